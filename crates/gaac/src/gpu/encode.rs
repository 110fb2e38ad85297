//! The GPU encoders: see the module docs of [`crate::gpu`].

use bf16_field::KvShape;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, PushKernelArg};
use kvcodec_gpu::integrity::{AdlerSums, RecordRuns, add_record_sums};
use kvcodec_gpu::{GpuContext, check_aligned, check_len, device_address, launch_config};

use super::{
    CALIBRATE_THREADS, Dim, GaacKernel, GpuError, Launch, LayoutArg, SCAN_THREADS, check_gpu_shape,
    encode_warp_bytes,
};
use crate::cache::{CacheHeader, EncodeOptions, block_shape_of, check_capacity, max_encoded_len, too_large};
use crate::format::{BLOCK_TOKENS, BlockShape, DEFAULT_CALIBRATION_TOKENS, HEADER_LEN, VERSION_1};

/// The 64 header bytes as the header kernel takes them.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct HeaderArg([u8; HEADER_LEN]);

// SAFETY: HeaderArg is 64 plain bytes, 16-byte aligned: the layout of GaacHeader (4 uint4).
unsafe impl cudarc::driver::DeviceRepr for HeaderArg {}

/// Launches `gaac_encode_d<D>`: the blocks `g` places in `words` into `slots` (block `i`
/// at `i C`), their statuses, raw words into `raw_out` (an address, or 0) and the warps'
/// raw counts into `warp_raw` (an address, or 0).
#[allow(clippy::too_many_arguments)]
fn launch_blocks(
    gpu: &GpuContext,
    dim: Dim,
    launch: &Launch,
    words: &CudaView<'_, u16>,
    g: &LayoutArg,
    bases: u64,
    slots: u64,
    statuses: u64,
    raw_out: u64,
    warp_raw: u64,
) -> Result<(), GpuError> {
    let f = gpu.function(GaacKernel::Encode(dim))?;
    let mut builder = gpu.stream().launch_builder(&f);
    builder.arg(words).arg(g).arg(&bases).arg(&slots).arg(&statuses).arg(&raw_out).arg(&warp_raw);
    // SAFETY: the signature matches gaac_encode_d<D>; the callers checked that `words`
    // holds every block `g` places (16-byte aligned rows: D is a multiple of 64), that
    // `bases` holds a head's D bases for every (tensor, head), that the slots, the
    // statuses and (when nonzero) raw_out and warp_raw hold g.blocks slots, bytes, raw
    // blocks and launch.warps() words; the shared memory is encode_warp_bytes per warp.
    unsafe { builder.launch(launch.config()) }?;
    Ok(())
}

/// Device buffers for encoding caches of one shape into containers (spec §5): the
/// container itself (its largest length), the bases (given, or calibrated on the device
/// by each encode), a raw count per warp, the length and R, and the checksum's sums.
pub struct CacheEncoder {
    shape: KvShape,
    dim: Dim,
    layout: LayoutArg,
    launch: Launch,
    /// Self-calibration: the tokens the bases are calibrated on and the calibration
    /// kernel's grid; `None` for given bases.
    calibration: Option<(u64, u32)>,
    bases: CudaSlice<u8>,
    out: CudaSlice<u8>,
    warp_raw: CudaSlice<u32>,
    /// `[container length, R]`.
    info: CudaSlice<u64>,
    sums: Option<AdlerSums>,
    /// The format version written (spec §5.1): what the checksum covers.
    version: u16,
    /// The header with R, the checksum and the CRC left for the header kernel.
    header: [u8; HEADER_LEN],
}

impl std::fmt::Debug for CacheEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheEncoder").field("shape", &self.shape).finish_non_exhaustive()
    }
}

impl CacheEncoder {
    /// Allocates what encoding caches of `shape` with `options` needs: about the largest
    /// container (every block raw) plus 4 bytes per warp. Options without bases
    /// self-calibrate: each [`CacheEncoder::encode`] calibrates the bases on the cache's
    /// first `min(T, n)` tokens on the device (`n` = [`EncodeOptions::calibration_tokens`],
    /// by default 128) and the header says so (spec §5.4), as the CPU encoder does.
    ///
    /// # Errors
    /// The CPU encoder's errors for the shape, the slot capacity and the bases
    /// ([`crate::Error::BasesShapeMismatch`], [`crate::Error::ZeroCalibrationTokens`],
    /// [`crate::Error::UnsupportedVersion`]);
    /// [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, shape: KvShape, options: &EncodeOptions) -> Result<Self, GpuError> {
        let block = block_shape_of(shape)?;
        let version = options.write_version()?;
        let capacity = options.slot_capacity.unwrap_or(block.default_capacity());
        check_capacity(block, capacity)?;
        let calibration_tokens = match &options.bases {
            Some(bases) => {
                bases.check_shape(shape)?;
                None
            }
            None => match options.calibration_tokens.unwrap_or(DEFAULT_CALIBRATION_TOKENS) {
                0 => return Err(crate::Error::ZeroCalibrationTokens.into()),
                n => Some(n.min(shape.tokens)),
            },
        };
        let max_len = max_encoded_len(shape, capacity)?;
        let dim = check_gpu_shape(shape).map_err(|e| match e {
            // The CPU encoder refuses more than u32::MAX blocks too, as too large.
            GpuError::Gpu(kvcodec_gpu::Error::Unsupported { what: "blocks", .. }) => too_large(shape).into(),
            e => e,
        })?;
        let header = CacheHeader {
            version,
            shape,
            slot_capacity: capacity,
            calibration_tokens,
            raw_blocks: 0,
            checksum: options.checksum.then_some(0),
        };
        let sections = header.sections();
        let layout = LayoutArg::cache(shape, capacity, &sections, 0);
        let blocks = layout.blocks as usize;
        let launch =
            Launch::blocks(gpu, GaacKernel::Encode(dim), blocks, encode_warp_bytes(block, capacity))?;
        let bases = match &options.bases {
            Some(bases) => gpu.upload(bases.as_bytes())?,
            None => gpu.zeros(layout.bases_len as usize)?,
        };
        let calibration = match calibration_tokens {
            Some(n) => Some((n as u64, calibrate_grid(gpu, layout.bases_len)?)),
            None => None,
        };
        let encoder = CacheEncoder {
            shape,
            dim,
            layout,
            launch,
            calibration,
            bases,
            out: gpu.zeros(max_len)?,
            warp_raw: gpu.zeros(launch.warps())?,
            info: gpu.zeros(2)?,
            sums: if options.checksum { Some(AdlerSums::new(gpu, 1)?) } else { None },
            version,
            header: header.to_bytes(),
        };
        gpu.synchronize()?;
        Ok(encoder)
    }

    /// Enqueues the encoding of the device cache `words` (`2 L T H D` words, layer-major,
    /// 16-byte aligned) on the context's stream, without synchronising: the container
    /// is exactly [`crate::encode_words`]'s with the same options.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned `words`;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn encode(&mut self, gpu: &GpuContext, words: &CudaView<'_, u16>) -> Result<(), GpuError> {
        let n = self.shape.total_values();
        check_len("words", words.len(), n, "values")?;
        let stream = gpu.stream();
        check_aligned("words", device_address(words, stream))?;
        let words = words.slice(..n);
        // Version 1's checksum: the values' sums, which the header kernel turns into it.
        let values_sums = self.version == VERSION_1;
        if let Some(sums) = self.sums.as_mut().filter(|_| values_sums) {
            sums.clear(gpu)?;
            add_record_sums(gpu, &words, &RecordRuns::contiguous(n), sums)?;
        }
        let g = self.layout;
        if let Some((tokens, grid)) = self.calibration {
            let f = gpu.function(GaacKernel::Calibrate)?;
            let mut builder = stream.launch_builder(&f);
            let (row_values, columns) = (u64::from(g.row_values), g.bases_len);
            builder.arg(&words).arg(&g.tensor_values).arg(&row_values).arg(&tokens).arg(&columns);
            builder.arg(&mut self.bases);
            // SAFETY: the signature matches gaac_calibrate; `words` holds the cache's 2 L
            // tensors of T >= tokens rows of H D words, `bases` its 2 L H D columns; the
            // CTA is one warp with its 32 KiB of static shared memory.
            unsafe { builder.launch(launch_config(grid, CALIBRATE_THREADS, 0)) }?;
        }
        let out = device_address(&self.out, stream);
        let warp_raw = device_address(&self.warp_raw, stream);
        if g.blocks > 0 {
            let bases = device_address(&self.bases, stream);
            launch_blocks(
                gpu,
                self.dim,
                &self.launch,
                &words,
                &g,
                bases,
                out + g.slots,
                out + g.statuses,
                0,
                warp_raw,
            )?;
        } else {
            stream.memset_zeros(&mut self.warp_raw)?;
        }
        let head_dim = self.shape.head_dim as u32;
        let (warps, value_bytes) = (self.launch.warps() as u32, 2 * n as u64);
        let header = HeaderArg(self.header);
        let null = 0u64;
        let f = gpu.function(GaacKernel::EncodeHeader)?;
        let mut builder = stream.launch_builder(&f);
        builder.arg(&mut self.warp_raw).arg(&warps).arg(&header);
        match self.sums.as_ref().filter(|_| values_sums) {
            Some(sums) => builder.arg(sums.counters()),
            None => builder.arg(&null),
        };
        builder.arg(&value_bytes).arg(&g).arg(&head_dim).arg(&mut self.info).arg(&mut self.out);
        // SAFETY: the signature matches gaac_encode_header; warp_raw holds `warps` words
        // (the block kernel's counts, or zeros); `sums` is null or two u64 counters; info
        // holds two words; the header's 64 bytes fit `out`.
        unsafe { builder.launch(launch_config(1, SCAN_THREADS, 0)) }?;
        let f = gpu.function(GaacKernel::EncodeOverflow)?;
        let mut builder = stream.launch_builder(&f);
        builder.arg(&words).arg(&g).arg(&head_dim).arg(&self.bases).arg(&self.warp_raw).arg(&self.info);
        builder.arg(&mut self.out);
        let config = launch_config(self.launch.grid, self.launch.threads, 0);
        // SAFETY: the signature matches gaac_encode_overflow; the grid and CTA size are the
        // block kernel's, so each warp's range and scanned raw count are its own; the
        // raw blocks, tails and bases land inside `out`, which holds the largest container
        // (every block raw); `words` holds the cache.
        unsafe { builder.launch(config) }?;
        if let Some(sums) = self.sums.as_mut().filter(|_| !values_sums) {
            // Version 2's checksum: the Adler-32 of the finished bytes after the header.
            sums.clear(gpu)?;
            super::launch_body_sums(gpu, &self.out, self.out.len(), &self.info, sums)?;
            let f = gpu.function(GaacKernel::EncodeSeal)?;
            let mut builder = stream.launch_builder(&f);
            builder.arg(sums.counters()).arg(&self.info).arg(&mut self.out);
            // SAFETY: the signature matches gaac_encode_seal; `sums` holds the two
            // counters gaac_body_sums filled, info the container's length; the header's
            // 64 bytes fit `out`.
            unsafe { builder.launch(launch_config(1, 32, 0)) }?;
        }
        Ok(())
    }

    /// The container's length from the last [`CacheEncoder::encode`] (synchronises).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn encoded_len(&self, gpu: &GpuContext) -> Result<usize, GpuError> {
        Ok(gpu.download(&self.info, 1)?[0] as usize)
    }

    /// The container the last [`CacheEncoder::encode`] wrote, copied to the host
    /// (synchronises).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn to_vec(&self, gpu: &GpuContext) -> Result<Vec<u8>, GpuError> {
        let len = self.encoded_len(gpu)?;
        Ok(gpu.download(&self.out, len)?)
    }

    /// The device container (its first [`CacheEncoder::encoded_len`] bytes are valid).
    pub fn output(&self) -> &CudaSlice<u8> {
        &self.out
    }
}

/// The calibration kernel's grid for `columns` bases: a CTA per 32 columns, at most as
/// many CTAs as are resident at once (the kernel strides over the rest).
fn calibrate_grid(gpu: &GpuContext, columns: u64) -> Result<u32, GpuError> {
    let f = gpu.function(GaacKernel::Calibrate)?;
    let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(CALIBRATE_THREADS, 0, None)?.max(1) as u64;
    let resident = u64::from(gpu.multiprocessors()) * per_sm;
    Ok(columns.div_ceil(u64::from(CALIBRATE_THREADS)).clamp(1, resident) as u32)
}

/// The geometry of one sealing step (a paged cache's tail filling): one 16-token block of
/// every (tensor, KV head), tensor `t`'s tail `[16, H, D]` at word `t * tensor_stride` of
/// the tail buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealShape {
    /// Tensors: `2 L` (each layer's K and V).
    pub tensors: usize,
    /// H.
    pub kv_heads: usize,
    /// D: one of [`super::HEAD_DIMS`].
    pub head_dim: usize,
    /// Words from one tensor's tail to the next: at least `16 H D`, a multiple of 8.
    pub tensor_stride: usize,
    /// C, the slot capacity in bytes (spec §4).
    pub slot_capacity: usize,
}

impl SealShape {
    /// Blocks sealed per call: `tensors x H`, block `t H + h` for tensor `t`, head `h`.
    pub fn blocks(&self) -> usize {
        self.tensors * self.kv_heads
    }

    /// Words the tail buffer must hold.
    pub fn tail_words(&self) -> usize {
        (self.tensors.max(1) - 1) * self.tensor_stride + BLOCK_TOKENS * self.kv_heads * self.head_dim
    }
}

/// A prepared sealing step: checks and the launch, made once outside any graph capture.
#[derive(Clone, Copy, Debug)]
pub struct Sealer {
    shape: SealShape,
    block: BlockShape,
    dim: Dim,
    layout: LayoutArg,
    launch: Launch,
}

impl Sealer {
    /// Prepares sealing steps of `shape` (loads the kernel and sets its shared-memory
    /// limit).
    ///
    /// # Errors
    /// [`crate::Error::HeadDimUnsupported`], [`crate::Error::InvalidShape`] (a zero
    /// dimension), [`crate::Error::SlotCapacityInvalid`];
    /// [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
    /// [`kvcodec_gpu::Error::InvalidArgument`] for a tensor stride below `16 H D` or not a
    /// multiple of 8; [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, shape: SealShape) -> Result<Sealer, GpuError> {
        let kv = KvShape {
            layers: shape.tensors.div_ceil(2),
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            tokens: BLOCK_TOKENS,
        };
        if shape.tensors == 0 {
            return Err(crate::Error::InvalidShape {
                layers: 0,
                kv_heads: shape.kv_heads,
                head_dim: shape.head_dim,
                tokens: BLOCK_TOKENS,
            }
            .into());
        }
        let block = block_shape_of(kv)?;
        check_capacity(block, shape.slot_capacity)?;
        let dim = check_gpu_shape(kv)?;
        let row_values = shape.kv_heads * shape.head_dim;
        if shape.tensor_stride < BLOCK_TOKENS * row_values || !shape.tensor_stride.is_multiple_of(8) {
            return Err(kvcodec_gpu::Error::InvalidArgument {
                what: "tensor_stride",
                why: format!(
                    "{} words; needs a multiple of 8 of at least 16 H D = {}",
                    shape.tensor_stride,
                    BLOCK_TOKENS * row_values
                ),
            }
            .into());
        }
        let blocks = shape.blocks();
        if blocks > u32::MAX as usize {
            return Err(kvcodec_gpu::Error::Unsupported {
                what: "blocks",
                why: format!("{blocks}; the kernels take u32"),
            }
            .into());
        }
        let layout = LayoutArg {
            tensor_values: shape.tensor_stride as u64,
            blocks: blocks as u32,
            per_head: 1,
            heads: shape.kv_heads as u32,
            row_values: row_values as u32,
            capacity: shape.slot_capacity as u32,
            tensors: shape.tensors as u32,
            bases_len: (shape.tensors * row_values) as u64,
            ..LayoutArg::default()
        };
        let launch = Launch::blocks(
            gpu,
            GaacKernel::Encode(dim),
            blocks,
            encode_warp_bytes(block, shape.slot_capacity),
        )?;
        Ok(Sealer { shape, block, dim, layout, launch })
    }

    /// The shape this sealer seals.
    pub fn shape(&self) -> SealShape {
        self.shape
    }
}

/// Seals one block of every (tensor, KV head) on the context's stream, without
/// synchronising and without allocating (a CUDA graph can capture it): block `b = t H +
/// h` of `tail` (tensor `t`'s `[16, H, D]` words at `t * tensor_stride`, head `h`) is coded
/// with bases `bases[b D .. b D + D]` (the container's order: tensor, head, channel) into
/// `slots[b C .. b C + C]`, exactly as the CPU encoder codes that block (its first bytes the
/// block, zeros after it), and `statuses[b]` = 0; a block that does not fit gets an
/// all-zero slot, `statuses[b]` = 1 and its `[16, D]` words in `raw[b 32 D .. b 32 D + 32
/// D]` (spec §3.6), where a pool keeps it. Keep every buffer alive until the stream has
/// passed the call. The bases are not checked here (that would need a synchronisation):
/// every base must be at most 248, as [`crate::Bases`] guarantees for calibrated ones;
/// a larger one seals blocks that the decoder later rejects (`BaseOutOfRange`).
///
/// # Errors
/// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned buffer;
/// [`kvcodec_gpu::Error::Cuda`].
pub fn seal_blocks_device(
    gpu: &GpuContext,
    sealer: &Sealer,
    tail: &CudaView<'_, u16>,
    bases: &CudaView<'_, u8>,
    slots: &mut CudaViewMut<'_, u8>,
    statuses: &mut CudaViewMut<'_, u8>,
    raw: &mut CudaViewMut<'_, u8>,
) -> Result<(), GpuError> {
    let s = sealer.shape;
    let blocks = s.blocks();
    check_len("tail", tail.len(), s.tail_words(), "values")?;
    check_len("bases", bases.len(), blocks * s.head_dim, "bytes")?;
    check_len("slots", slots.len(), blocks * s.slot_capacity, "bytes")?;
    check_len("statuses", statuses.len(), blocks, "bytes")?;
    check_len("raw", raw.len(), blocks * sealer.block.raw_len(), "bytes")?;
    let stream = gpu.stream();
    check_aligned("tail", device_address(tail, stream))?;
    check_aligned("slots", device_address(slots, stream))?;
    check_aligned("raw", device_address(raw, stream))?;
    check_aligned("bases", device_address(bases, stream))?;
    if blocks == 0 {
        return Ok(());
    }
    launch_blocks(
        gpu,
        sealer.dim,
        &sealer.launch,
        tail,
        &sealer.layout,
        device_address(bases, stream),
        device_address(slots, stream),
        device_address(statuses, stream),
        device_address(raw, stream),
        0,
    )
}
