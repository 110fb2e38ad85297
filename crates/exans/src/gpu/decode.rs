//! The device decoder: a container already in device memory, one launch over every
//! record (`exans_decode_records`, `kernels/exans/exans.cu`).
//!
//! One 256-thread CTA per record, warp w decoding partition w with one rANS lane per
//! thread, the decode table (spec §5.4, packed for the GPU's step) in shared memory,
//! words taken step-major in ascending lane order with ballot/popc (spec §6.2) from a
//! per-partition word ring that `cp.async` fills ahead, and each symbol joined with its
//! sign+mantissa byte and written straight into the cache's `[T, H, D]` tensors
//! (concatenated in block order, [`bf16_field::WordOrder::LayerMajor`]).
//!
//! **Validation.** [`DeviceIndex::new`] runs the CPU parser over the container index and
//! every record (all the checks of spec §8 and §10 that need no decoding) before
//! anything is launched; an invalid container gets the CPU decoder's exact error. The
//! kernel re-checks every offset it uses, bounds every read by the record, and flags the
//! three decode-time errors (word stream exhausted, final state, unconsumed words) in its
//! [`DeviceStatus`]; [`decode_to_cache`] and [`super::PendingDecode::finish`] then run
//! the CPU decoder on the same bytes to return its exact error.
//!
//! GPU limits (the CPU path has none): the device container must be 16-byte aligned.

use std::ops::Range;
use std::sync::Arc;

use bf16_field::{KvCache, WordOrder};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, PushKernelArg};
use kvcodec_gpu::integrity::{AdlerSums, RecordRuns};
use kvcodec_gpu::{DeviceStatus, GpuContext, check_aligned, device_address, launch_config};

use super::{CHECKSUM_STATUS, DECODE_STATUS, ExansKernel, GpuError, THREADS, record_runs};
use crate::container::{ContainerInfo, checked_info, decode_cache};
use crate::format::{MAX_PRECISION, PARTITIONS};
use crate::{Error, inspect_record};

/// Words of each partition's stream ring in shared memory (a power of two).
pub const RING_WORDS: usize = 1024;
/// Decode steps per round: two tiles of [`crate::format::LANE_GROUP`] steps.
pub const ROUND_STEPS: usize = 2 * crate::format::LANE_GROUP;
/// Dynamic shared memory per CTA, bytes: the 2^12-slot decode table at 4 bytes a slot,
/// then per partition a word ring and a mirror of the ring's first round of words (so a
/// round reads the ring without wrapping).
pub const DYNAMIC_SMEM: u32 =
    ((4usize << MAX_PRECISION) + PARTITIONS * 2 * (RING_WORDS + ROUND_STEPS * crate::format::LANES)) as u32;
/// The largest grid the kernel is launched with; it strides over more records.
const MAX_GRID: usize = i32::MAX as usize;

/// The CPU decoder's error for `container`, which the GPU path found invalid; a
/// [`GpuError::Disagreement`] if the CPU decoder accepts it.
pub(super) fn cpu_error(container: &[u8], status: u32) -> GpuError {
    kvcodec_gpu::cpu_verdict(status, &DECODE_STATUS, || decode_cache(container))
}

/// Every check [`decode_cache`] makes before it decodes: the container header and index,
/// the allocation bound, each record's shape against the container's, and every record
/// check of spec §10 except the decode-time ones. Returns the index and each record's
/// checksum.
fn validate(container: &[u8]) -> Result<(ContainerInfo, Vec<Option<u32>>), Error> {
    let info = checked_info(container)?;
    let mut checksums = Vec::with_capacity(info.blocks());
    for i in 0..info.blocks() {
        let in_block = |e: Error| Error::InBlock { block: i, source: Box::new(e) };
        let record = info.shaped_record(container, i)?;
        checksums.push(inspect_record(record).map_err(in_block)?.checksum);
    }
    Ok((info, checksums))
}

/// A validated container index, with its record offsets on the device: what
/// [`decode_device`] needs besides the container bytes. Build it once per container
/// (it parses every record header on the host) and reuse it across launches.
pub struct DeviceIndex {
    info: ContainerInfo,
    /// `blocks + 1` record offsets from the container start (`u64`, spec §8).
    offsets: CudaSlice<u64>,
    container_len: usize,
    /// Each record's checksum, when it carries one (spec §3).
    checksums: Vec<Option<u32>>,
}

impl std::fmt::Debug for DeviceIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceIndex")
            .field("shape", &self.info.shape)
            .field("blocks", &self.info.blocks())
            .field("container_len", &self.container_len)
            .finish_non_exhaustive()
    }
}

impl DeviceIndex {
    /// Validates `container` with the CPU parser (no decoding) and uploads its record
    /// offsets.
    ///
    /// # Errors
    /// [`GpuError::Codec`] with the CPU decoder's exact error for an invalid container;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, container: &[u8]) -> Result<Self, GpuError> {
        let (info, checksums) = match validate(container) {
            Ok(validated) => validated,
            // The CPU decoder's own run gives its exact error: it reports the lowest
            // failing block, where a decode-time error of an earlier block comes before a
            // header error of a later one.
            Err(_) => return Err(cpu_error(container, 0)),
        };
        let offsets: Vec<u64> = info.offsets.iter().map(|&o| o as u64).collect();
        let offsets = gpu.upload(&offsets)?;
        gpu.synchronize()?;
        Ok(DeviceIndex { info, offsets, container_len: container.len(), checksums })
    }

    /// Whether any record carries a checksum (then a decode also sums its output).
    pub fn has_checksums(&self) -> bool {
        self.checksums.iter().any(Option::is_some)
    }

    /// Where each record's values land in the decoded cache.
    fn runs(&self) -> RecordRuns {
        record_runs(self.info.shape, self.info.block_tokens)
    }

    /// The container's header and index.
    pub fn info(&self) -> &ContainerInfo {
        &self.info
    }

    /// The container's length in bytes.
    pub fn container_len(&self) -> usize {
        self.container_len
    }

    /// Values in the decoded cache, `2 L T H D`: the length `out` needs.
    pub fn values(&self) -> usize {
        self.info.shape.total_values()
    }
}

/// What a decode leaves on the device for the host to judge: the kernel's status word
/// and, for a container whose records carry checksums, the Adler-32 sums of each
/// record's decoded values. Reusable across decodes and containers.
#[derive(Debug)]
pub struct DecodeChecks {
    status: DeviceStatus,
    sums: Option<AdlerSums>,
    /// Each record of the decode in flight: its bytes and stored checksum.
    expected: Vec<(u64, Option<u32>)>,
}

impl DecodeChecks {
    /// Zeroed checks on `gpu`'s device, with room for the checksums of `records`
    /// records (0: none yet). A decode of a container with checksums and more records
    /// allocates more room first, on the context's stream (no host synchronisation,
    /// but not capturable in a CUDA graph): size it for the largest container to decode.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, records: usize) -> Result<Self, GpuError> {
        let sums = if records > 0 { Some(AdlerSums::new(gpu, records)?) } else { None };
        Ok(DecodeChecks { status: DeviceStatus::new(gpu)?, sums, expected: Vec::new() })
    }

    /// Clears the status and, for a container with checksums, the sums (grown to its
    /// record count), on the context's stream; records what the decode must give.
    pub(super) fn prepare(&mut self, gpu: &GpuContext, index: &DeviceIndex) -> Result<(), GpuError> {
        self.status.clear(gpu)?;
        self.expected.clear();
        if !index.has_checksums() {
            return Ok(());
        }
        let runs = index.runs();
        self.expected.extend(index.checksums.iter().enumerate().map(|(i, &c)| (runs.record_bytes(i), c)));
        let blocks = index.info.blocks();
        match &mut self.sums {
            Some(sums) if sums.records() >= blocks => sums.clear(gpu)?,
            slot => *slot = Some(AdlerSums::new_ordered(gpu, blocks)?),
        }
        Ok(())
    }

    /// The decode kernel for the container [`DecodeChecks::prepare`] was last given:
    /// `exans_decode_records_checksum`, which adds each record's sums as it stores the
    /// values, when it has checksums; else `exans_decode_records`.
    pub(super) fn kernel(&self) -> ExansKernel {
        if self.summing() { ExansKernel::DecodeRecordsChecksum } else { ExansKernel::DecodeRecords }
    }

    /// Whether the decode in flight adds the records' sums (its container has checksums).
    fn summing(&self) -> bool {
        self.sums.is_some() && !self.expected.is_empty()
    }

    /// The verdict once the stream has passed the decode (synchronises): 0 when every
    /// record passed the kernel's checks and every stored checksum matches its decoded
    /// values; else flags of [`DECODE_STATUS`].
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn status(&self, gpu: &GpuContext) -> Result<u32, GpuError> {
        let status = self.status.read(gpu)?;
        if status != 0 || self.expected.is_empty() {
            return Ok(status);
        }
        let Some(sums) = &self.sums else { return Ok(status) };
        let computed = sums.checksums(gpu, self.expected.len(), |i| self.expected[i].0)?;
        let mismatch =
            self.expected.iter().zip(&computed).any(|(&(_, stored), &c)| stored.is_some_and(|s| s != c));
        Ok(if mismatch { CHECKSUM_STATUS } else { 0 })
    }

    /// [`DecodeChecks::status`], then for a nonzero status the CPU decoder's exact error
    /// on `container` (the host bytes), or [`GpuError::Disagreement`].
    ///
    /// # Errors
    /// As described; [`kvcodec_gpu::Error::Cuda`].
    pub fn verify(&self, gpu: &GpuContext, container: &[u8]) -> Result<(), GpuError> {
        match self.status(gpu)? {
            0 => Ok(()),
            status => Err(cpu_error(container, status)),
        }
    }
}

/// Decodes the device container `container` (the bytes [`DeviceIndex::new`] validated,
/// 16-byte aligned) into `out`, the cache's `2L` tensors `[T, H, D]` in block order
/// ([`WordOrder::LayerMajor`]), in one kernel launch on the context's stream (for
/// records with checksums, the kernel's twin that also sums each record's output),
/// without synchronising.
/// `checks` is cleared, then holds what [`DecodeChecks::verify`] judges: a record that
/// failed a check in the kernel (`out` is then unspecified) or whose checksum does not
/// match turns into the CPU decoder's error.
///
/// # Errors
/// [`kvcodec_gpu::Error::Buffer`] for a container of the wrong length or alignment, or
/// an `out` that is too small; [`kvcodec_gpu::Error::Cuda`].
pub fn decode_device(
    gpu: &GpuContext,
    container: &CudaView<'_, u8>,
    index: &DeviceIndex,
    out: &mut CudaViewMut<'_, u16>,
    checks: &mut DecodeChecks,
) -> Result<(), GpuError> {
    check_buffers(index, container.len(), out.len())?;
    let stream = gpu.stream();
    check_aligned("container", device_address(container, stream))?;
    checks.prepare(gpu, index)?;
    let f = gpu.function(checks.kernel())?;
    launch_records(&f, stream, container, index, 0..index.info.blocks(), out, checks)
}

/// The checks every decoder entry point makes before launching: a container of the
/// indexed length and an output of at least `2 L T H D` words.
pub(super) fn check_buffers(
    index: &DeviceIndex,
    container_len: usize,
    out_len: usize,
) -> Result<(), GpuError> {
    if container_len != index.container_len {
        return Err(kvcodec_gpu::Error::Buffer {
            what: "container",
            why: format!("{container_len} bytes, the index was built for {}", index.container_len),
        }
        .into());
    }
    Ok(kvcodec_gpu::check_len("out", out_len, index.values(), "words")?)
}

/// Launches the decode kernel `f` (`checks.kernel()`, loaded: `exans_decode_records` or
/// its checksum twin) on `stream` over the records `records` of the device container,
/// without synchronising. The caller has run [`check_buffers`], prepared `checks` for
/// `index`, checked that `container` is 16-byte aligned and that `records` lies in
/// `0..blocks`. An empty range launches nothing.
pub(super) fn launch_records(
    f: &CudaFunction,
    stream: &Arc<CudaStream>,
    container: &CudaView<'_, u8>,
    index: &DeviceIndex,
    records: Range<usize>,
    out: &mut CudaViewMut<'_, u16>,
    checks: &mut DecodeChecks,
) -> Result<(), GpuError> {
    if records.is_empty() {
        return Ok(());
    }
    let s = index.info.shape;
    // container_info checked every dimension against its u16 header field and the block
    // count against its u32 field.
    let (container_len, first, end) = (index.container_len as u64, records.start as u32, records.end as u32);
    let (layers, kv_heads, head_dim) = (s.layers as u32, s.kv_heads as u32, s.head_dim as u32);
    let (block_tokens, tokens) = (index.info.block_tokens as u32, s.tokens as u64);
    let summing = checks.summing();
    let mut launch = stream.launch_builder(f);
    launch
        .arg(container)
        .arg(&container_len)
        .arg(&index.offsets)
        .arg(&first)
        .arg(&end)
        .arg(&layers)
        .arg(&kv_heads)
        .arg(&head_dim)
        .arg(&block_tokens)
        .arg(&tokens)
        .arg(&mut *out)
        .arg(checks.status.word());
    if let Some(sums) = checks.sums.as_mut().filter(|_| summing) {
        launch.arg(sums.counters_mut());
    }
    let grid = records.len().clamp(1, MAX_GRID) as u32;
    // SAFETY: the arguments match exans_decode_records(container: *const u8, container_len:
    // u64, offsets: *const u64, first_record: u32, end_record: u32, layers, kv_heads,
    // head_dim, block_tokens: u32, tokens: u64, out: *mut u16, status: *mut u32).
    // `container` holds container_len bytes and is 16-byte aligned (checked by the
    // caller); `offsets` holds blocks + 1 entries, each <= container_len (validated on the
    // host, re-checked by the kernel), and first < end <= blocks. The kernel reads only
    // inside the slots of records first..end, after checking every section offset against
    // the slot, and writes only out[g T H D + i B H D + r] for g < 2L, i B + B' <= T,
    // r < B' H D, i.e. below 2 L T H D <= out.len() (checked by the caller), and the
    // status word. The checksum twin takes one more argument, record_sums: *mut u64, and
    // adds to the pair of record i only (i < blocks: prepare grew the counters to the
    // container's record count).
    unsafe { launch.launch(launch_config(grid, THREADS, DYNAMIC_SMEM)) }?;
    Ok(())
}

/// Host container -> host cache through the GPU: validates on the host, uploads, decodes
/// every record in one launch, reads back (synchronises). On any error the CPU decoder's
/// exact error is returned.
///
/// # Errors
/// [`GpuError::Codec`] for an invalid container (the CPU decoder's error);
/// [`GpuError::Disagreement`] if the GPU flags a container the CPU accepts;
/// [`kvcodec_gpu::Error`]s.
pub fn decode_to_cache(gpu: &GpuContext, container: &[u8]) -> Result<KvCache, GpuError> {
    let index = DeviceIndex::new(gpu, container)?;
    // A fresh allocation: aligned far beyond 16 bytes.
    let d_container = gpu.upload(container)?;
    let values = index.values();
    let mut out = gpu.zeros::<u16>(values)?;
    let mut checks = DecodeChecks::new(gpu, index.info.blocks())?;
    decode_device(
        gpu,
        &d_container.slice(..container.len()),
        &index,
        &mut out.slice_mut(..values),
        &mut checks,
    )?;
    checks.verify(gpu, container)?;
    let words = gpu.download(&out, values)?;
    Ok(KvCache::from_words(index.info.shape, WordOrder::LayerMajor, words).expect("the index's shape"))
}
