//! The GAAC GPU encoder and decoder (PTX from `kernels/gaac/gaac.cu`), byte-identical to
//! the CPU reference in both directions (spec §7, "GPU" in `docs/formats/gaac.md`).
//!
//! **Caches** ([`CacheEncoder`], [`CacheDecoder`], and through them
//! [`kvcodec_gpu::GpuCacheCodec`] for [`crate::GaacCodec`]): the container of spec §5.
//! Encoding is three launches on the caller's stream (four with version 1's checksum,
//! five with version 2's): `gaac_encode_d<D>` codes every
//! block into its slot (one warp per block, each warp a contiguous range of blocks,
//! 16-byte loads, each value's code (sign+mantissa byte and 3-bit field) into a
//! shared-memory tile, the slot built from it in shared memory and written with 16-byte
//! stores), writes its status byte and counts the raw blocks of its range;
//! `gaac_encode_header` (one CTA) scans those counts into the raw blocks' places in the
//! overflow section and writes the header with R, version 1's checksum (from the values'
//! sums) and the CRC-32C;
//! `gaac_encode_overflow` copies the raw blocks, the tails and the bases; with the
//! checksum, `gaac_body_sums` sums the container's bytes after the header and
//! `gaac_encode_seal` writes their Adler-32 (format version 2, spec §5.1). The container's
//! length stays on the device until [`CacheEncoder::encoded_len`] reads it. Decoding is
//! `gaac_decode_d<D>` (checks each block's status byte and bytes, spec §7.2, and restores
//! the coded ones through a per-warp `cp.async` ring of slots, the restore of
//! `docs/perf/gaac-gpu.md`; each warp takes runs of blocks from a work counter) and
//! `gaac_decode_finish` (raw blocks, tails, and the checks of the bases, paddings and raw
//! count), and for a checksummed version 2 container `gaac_body_sums` over its bytes after
//! the header (version 1: the values' sums, over the output); a problem leaves a
//! [`DECODE_STATUS`] code that
//! [`CacheDecoder::finish`] turns into the CPU decoder's exact error.
//!
//! **Sealing** ([`seal_blocks_device`]): the paged cache's step, one 16-token block of
//! every (tensor, KV head) coded from a BF16 tail into its slot, on the caller's stream,
//! with no host synchronisation (graph-capturable): `gaac_encode_d<D>` alone.
//!
//! **Self-calibration** (options without bases, spec §5.4): `gaac_calibrate`
//! (`kernels/gaac/calibrate.cu`) first computes every base from the cache's own first
//! tokens into the encoder's device bases, exactly as [`crate::Bases::calibrate_words`]
//! does (a histogram per column, the window with the most exponents, the smallest base on
//! a tie), on the same stream and without a host sync; the blocks are then coded with
//! them and the header says so, as on the CPU.
//!
//! GPU limits (the CPU path has none of them): head_dim 64, 128 or 256 ([`HEAD_DIMS`]);
//! at most `u32::MAX` blocks; device buffers 16-byte aligned.

mod decode;
mod encode;

use kvcodec_gpu::{GpuContext, Kernel, Module, StatusCodes, StatusEncoding, StatusValue};

pub use decode::CacheDecoder;
pub use encode::{CacheEncoder, SealShape, Sealer, seal_blocks_device};

use crate::format::BlockShape;

/// An error of the GAAC GPU path: the CPU's [`crate::Error`], a GPU error, or a
/// disagreement with the CPU decoder.
pub type GpuError = kvcodec_gpu::GpuError<crate::Error>;

impl From<crate::Error> for GpuError {
    fn from(e: crate::Error) -> Self {
        GpuError::Codec(e)
    }
}

/// The GAAC PTX module.
pub static MODULE: Module = Module::new("gaac", include_str!("../../ptx/gaac.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// The self-calibration PTX module (`kernels/gaac/calibrate.cu`).
pub static CALIBRATE_MODULE: Module = Module::new("gaac_calibrate", include_str!("../../ptx/calibrate.ptx"));
kvcodec_gpu::register_module!(CALIBRATE_MODULE);

/// The kernels of [`MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaacKernel {
    /// Every block into its slot, its status byte, the raw count of each warp's range.
    Encode(Dim),
    /// The scan of the raw counts, the header and the container's length, one CTA.
    EncodeHeader,
    /// The raw blocks, tails and bases of a container.
    EncodeOverflow,
    /// The checks and the coded blocks of a container.
    Decode(Dim),
    /// The raw blocks and tails of a container, and the checks of its bases, paddings and
    /// raw count.
    DecodeFinish,
    /// The bases of a cache from its own first tokens (spec §5.4), in [`CALIBRATE_MODULE`].
    Calibrate,
    /// The Adler-32 sums of a container's bytes after the header (version 2's checksum,
    /// spec §5.1), its length read on the device.
    BodySums,
    /// The checksum and CRC-32C of an encoded container's header, from [`GaacKernel::BodySums`].
    EncodeSeal,
}

/// A head_dim the block kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// 64.
    D64,
    /// 128.
    D128,
    /// 256.
    D256,
}

impl Dim {
    /// The kernels' head_dim for `head_dim`, or [`kvcodec_gpu::Error::Unsupported`].
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Unsupported`] unless `head_dim` is one of [`HEAD_DIMS`].
    pub fn of(head_dim: usize) -> Result<Dim, GpuError> {
        match head_dim {
            64 => Ok(Dim::D64),
            128 => Ok(Dim::D128),
            256 => Ok(Dim::D256),
            _ => Err(kvcodec_gpu::Error::Unsupported {
                what: "head_dim",
                why: format!("{head_dim}; the GAAC kernels are compiled for {HEAD_DIMS:?}"),
            }
            .into()),
        }
    }
}

impl Kernel for GaacKernel {
    fn module(self) -> &'static Module {
        match self {
            GaacKernel::Calibrate => &CALIBRATE_MODULE,
            _ => &MODULE,
        }
    }
    fn symbol(self) -> &'static str {
        match self {
            GaacKernel::Encode(Dim::D64) => "gaac_encode_d64",
            GaacKernel::Encode(Dim::D128) => "gaac_encode_d128",
            GaacKernel::Encode(Dim::D256) => "gaac_encode_d256",
            GaacKernel::EncodeHeader => "gaac_encode_header",
            GaacKernel::EncodeOverflow => "gaac_encode_overflow",
            GaacKernel::Decode(Dim::D64) => "gaac_decode_d64",
            GaacKernel::Decode(Dim::D128) => "gaac_decode_d128",
            GaacKernel::Decode(Dim::D256) => "gaac_decode_d256",
            GaacKernel::DecodeFinish => "gaac_decode_finish",
            GaacKernel::Calibrate => "gaac_calibrate",
            GaacKernel::BodySums => "gaac_body_sums",
            GaacKernel::EncodeSeal => "gaac_encode_seal",
        }
    }
}

/// Launches `gaac_body_sums`: adds the Adler-32 sums of `container`'s bytes from 64 to
/// the length in `end[0]` (a multiple of 16, on the device; the kernel reads no further
/// than `max_len <= container.len()` whatever `end[0]` holds) to `sums`
/// (one record, cleared by the caller), on `gpu`'s stream: version 2's checksum (spec
/// §5.1).
///
/// # Errors
/// [`kvcodec_gpu::Error::Cuda`].
pub(crate) fn launch_body_sums(
    gpu: &GpuContext,
    container: &cudarc::driver::CudaSlice<u8>,
    max_len: usize,
    end: &cudarc::driver::CudaSlice<u64>,
    sums: &mut kvcodec_gpu::integrity::AdlerSums,
) -> Result<(), GpuError> {
    use cudarc::driver::PushKernelArg;
    debug_assert!(max_len.is_multiple_of(16), "containers are a multiple of 16 bytes (spec §5.2)");
    let f = gpu.function(GaacKernel::BodySums)?;
    let mut builder = gpu.stream().launch_builder(&f);
    assert!(max_len <= container.len(), "the sums read inside the container");
    let max_len_arg = max_len as u64;
    builder.arg(container).arg(end).arg(&max_len_arg).arg(sums.counters_mut());
    // SAFETY: the signature matches gaac_body_sums; the kernel reads below
    // `min(end[0], max_len)` and max_len <= container.len() (asserted), so every 16-byte
    // load lies inside `container`, whose device allocation is 256-byte aligned; `sums`
    // holds two u64 counters.
    unsafe { builder.launch(gpu.grid_stride_config(max_len / 16, BODY_SUMS_THREADS)) }?;
    Ok(())
}

/// Threads per CTA of `gaac_body_sums` (its launch bound, `GAAC_WARPS * 32`).
const BODY_SUMS_THREADS: u32 = WARPS * 32;

/// The head_dims the GPU kernels take.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];
/// Most warps per CTA of the block kernels (fewer when a warp's shared memory is large).
pub const WARPS: u32 = 8;
/// Threads of the encoder's header CTA.
pub const SCAN_THREADS: u32 = 1024;
/// Threads per CTA of the calibration kernel: one warp, each lane a column's 256-bin
/// histogram in shared memory (32 KiB a CTA).
pub const CALIBRATE_THREADS: u32 = 32;
/// Slots in each decoder warp's `cp.async` ring: two in flight while one is restored
/// (`docs/perf/gaac-gpu.md`, version 2).
pub const DECODE_STAGES: usize = 2;
/// Padding words per row of a warp's `[16, D]` shared-memory tile, so that the
/// fragment-order gathers of spec §3.1 fall on distinct banks.
pub const TILE_PAD: usize = 8;
/// CTAs per multiprocessor the block kernels' grids are sized for at most (fewer when
/// registers or shared memory allow fewer).
const CTAS_PER_SM: usize = 4;

/// What the decode kernels leave in their status word: the first problem's code (the
/// checks of spec §7.1 rows 13-17 and §7.2; the CPU decoder gives the exact error).
/// `CHECKSUM` is the host's verdict on a container's checksum, reported the same way.
pub const DECODE_STATUS: StatusCodes = StatusCodes {
    encoding: StatusEncoding::FirstCode,
    values: &[
        StatusValue { value: 1, name: "BASE_OUT_OF_RANGE", meaning: "a base above 248" },
        StatusValue { value: 2, name: "PADDING_NOT_ZERO", meaning: "a section padding byte is not zero" },
        StatusValue {
            value: 3,
            name: "UNKNOWN_BLOCK_STATUS",
            meaning: "a block status byte other than 0 or 1",
        },
        StatusValue {
            value: 4,
            name: "RAW_COUNT_MISMATCH",
            meaning: "the status bytes count another number of raw blocks than the header",
        },
        StatusValue {
            value: 5,
            name: "SLOT_PADDING_NOT_ZERO",
            meaning: "a slot byte after its block (or in a raw block's slot) is not zero",
        },
        StatusValue { value: 6, name: "UNKNOWN_TAG", meaning: "a group of tag 3" },
        StatusValue { value: 7, name: "BLOCK_EXCEEDS_SLOT", meaning: "the tags size a block past its slot" },
        StatusValue {
            value: 8,
            name: "CHECKSUM",
            meaning: "the header's checksum differs from the Adler-32 of the bytes after the header (version 2) or of the decoded values (version 1) (set by the host)",
        },
    ],
};

/// Where a run of blocks lies, as the kernels take it (`GaacLayout` in the kernel source,
/// field for field): block `i` is block `i mod per_head` of head `(i / per_head) mod
/// heads` of tensor `(i / per_head) / heads`, and its token row `r` starts at word
/// `tensor * tensor_values + (16 (i mod per_head) + r) row_values + head D`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LayoutArg {
    tensor_values: u64,
    tail_values: u64,
    statuses: u64,
    slots: u64,
    overflow: u64,
    tails: u64,
    bases_len: u64,
    blocks: u32,
    per_head: u32,
    heads: u32,
    row_values: u32,
    capacity: u32,
    tensors: u32,
    raw_blocks: u32,
    pad: u32,
}

// SAFETY: LayoutArg is plain integers in C layout (7 u64, 8 u32), the layout of GaacLayout.
unsafe impl cudarc::driver::DeviceRepr for LayoutArg {}

/// A kernel's launch: grid, threads per CTA, dynamic shared memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Launch {
    grid: u32,
    threads: u32,
    smem: u32,
}

impl Launch {
    /// The launch of a block kernel over `blocks` blocks, one warp per block at a time,
    /// with `warp_bytes` of shared memory per warp: up to [`WARPS`] warps per CTA and
    /// [`CTAS_PER_SM`] CTAs per multiprocessor, never more warps than blocks. Sets the
    /// kernel's dynamic shared memory limit when it needs more than 48 KiB.
    pub(crate) fn blocks(
        gpu: &GpuContext,
        kernel: GaacKernel,
        blocks: usize,
        warp_bytes: usize,
    ) -> Result<Launch, GpuError> {
        // The device's opt-in limit: 227 KiB on sm_90, less on sm_80 and sm_8x.
        let max_smem = gpu.info().max_shared_per_cta;
        let warps = (max_smem / warp_bytes).clamp(1, WARPS as usize);
        if warp_bytes > max_smem {
            return Err(kvcodec_gpu::Error::Unsupported {
                what: "slot capacity",
                why: format!("a warp would need {warp_bytes} bytes of shared memory, over {max_smem}"),
            }
            .into());
        }
        let smem = warps * warp_bytes;
        let threads = 32 * warps as u32;
        let f = gpu.function(kernel)?;
        if smem > 48 * 1024 {
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )?;
        }
        // The grid is persistent (CTAs stride over the blocks), so it holds exactly the
        // CTAs that are resident at once: a CTA more per multiprocessor than registers and
        // shared memory allow would run as a second, nearly empty wave.
        let resident = f.occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)?.max(1) as usize;
        let per_sm = resident.min(CTAS_PER_SM);
        let grid = blocks.div_ceil(warps).min(gpu.multiprocessors() as usize * per_sm).max(1);
        Ok(Launch { grid: grid as u32, threads, smem: smem as u32 })
    }

    pub(crate) fn config(&self) -> cudarc::driver::LaunchConfig {
        kvcodec_gpu::launch_config(self.grid, self.threads, self.smem)
    }

    /// Warps of the whole grid.
    pub(crate) fn warps(&self) -> usize {
        self.grid as usize * (self.threads / 32) as usize
    }
}

/// Shared memory of one encoder warp: the tile of codes and the slot being built
/// (`gaac_encode_warp_bytes` in the kernel source).
pub(crate) fn encode_warp_bytes(block: BlockShape, capacity: usize) -> usize {
    2 * 16 * (block.head_dim + TILE_PAD) + capacity
}

/// Shared memory of one decoder warp: the addend image, the bases and window starts, the
/// slot ring, the tile (`gaac_decode_warp_bytes` in the kernel source).
pub(crate) fn decode_warp_bytes(block: BlockShape, capacity: usize) -> usize {
    block.values() + 2 * block.head_dim + DECODE_STAGES * capacity + 2 * 16 * (block.head_dim + TILE_PAD)
}

/// The GPU's limits on a cache shape beyond the format's: a compiled head_dim, a block
/// count and a token row within `u32`.
pub(crate) fn check_gpu_shape(shape: bf16_field::KvShape) -> Result<Dim, GpuError> {
    let dim = Dim::of(shape.head_dim)?;
    let blocks = 2u128 * shape.layers as u128 * shape.kv_heads as u128 * (shape.tokens / 16) as u128;
    if blocks > u32::MAX as u128 || shape.kv_heads * shape.head_dim > u32::MAX as usize {
        return Err(kvcodec_gpu::Error::Unsupported {
            what: "blocks",
            why: format!(
                "{blocks} blocks or a row of {} values; the kernels take u32",
                shape.kv_heads * shape.head_dim
            ),
        }
        .into());
    }
    Ok(dim)
}

impl LayoutArg {
    /// The layout of a layer-major cache of `shape` (every tensor `[T, H, D]`, one after
    /// the other) in a container with `sections`, `raw_blocks` of them raw.
    pub(crate) fn cache(
        shape: bf16_field::KvShape,
        capacity: usize,
        sections: &crate::Sections,
        raw_blocks: usize,
    ) -> LayoutArg {
        let per_head = shape.tokens / 16;
        let row_values = shape.kv_heads * shape.head_dim;
        LayoutArg {
            tensor_values: shape.values_per_tensor() as u64,
            tail_values: ((shape.tokens % 16) * row_values) as u64,
            statuses: sections.statuses as u64,
            slots: sections.slots as u64,
            overflow: sections.overflow as u64,
            tails: sections.tails as u64,
            bases_len: (2 * shape.layers * row_values) as u64,
            blocks: (2 * shape.layers * shape.kv_heads * per_head) as u32,
            per_head: per_head as u32,
            heads: shape.kv_heads as u32,
            row_values: row_values as u32,
            capacity: capacity as u32,
            tensors: 2 * shape.layers as u32,
            raw_blocks: raw_blocks as u32,
            pad: 0,
        }
    }
}
