//! The Adler-32 of BF16 values in device memory (`kernels/gpu/integrity.cu`), equal to
//! [`bf16_field::integrity::adler32_words`]: the checksum a codec stores when its encoder
//! is asked to (flag "checksum" in `docs/formats/`), computed here before an encode
//! kernel or verified after a decode kernel that does not fold the sums in itself.
//!
//! Adler-32 is two sums over the bytes, `S = Σ b_i` and `W = Σ i·b_i`, so a kernel adds
//! any bytes it holds in any order: [`AdlerSums`] holds the two device counters of each
//! record, and [`AdlerSums::checksums`] turns them into the checksums.

use cudarc::driver::{CudaSlice, CudaView, PushKernelArg};

use crate::registry::{Kernel, Module};
use crate::{Error, GpuContext, Result, launch_config};

/// The integrity module (`kernels/gpu/integrity.cu`).
pub static INTEGRITY_MODULE: Module = Module::new("kvcodec_integrity", include_str!("../ptx/integrity.ptx"));
crate::register_module!(INTEGRITY_MODULE);

/// The kernels of [`INTEGRITY_MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegrityKernel {
    /// `kv_adler_records(words, group_stride, block_stride, last_block, groups, blocks,
    /// spans, items, sums)`.
    Records,
}

impl Kernel for IntegrityKernel {
    fn module(self) -> &'static Module {
        &INTEGRITY_MODULE
    }
    fn symbol(self) -> &'static str {
        "kv_adler_records"
    }
}

/// Threads per CTA of `kv_adler_records`.
const THREADS: u32 = 256;
/// Values one warp sums at a time (`KV_ADLER_SPAN` in the kernel).
const SPAN: usize = 4096;
/// CTAs at most: the warps stride over the spans.
const MAX_CTAS: u64 = 1 << 16;

/// Where checksummed records lie in a device buffer of BF16 words: `blocks` records,
/// each of `groups` runs; run `g` of record `i` starts at value
/// `g * group_stride + i * block_stride` and holds `block_stride` values
/// (`last_block` for the last record). A record's bytes are its runs in group order.
/// An ExANS cache (2L tensors `[T, H, D]` back to back, blocks of B tokens) has
/// `groups = 2L`, `group_stride = T H D`, `block_stride = B H D`; a flat payload is
/// [`RecordRuns::contiguous`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRuns {
    /// Runs per record (>= 1).
    pub groups: usize,
    /// Records (>= 1).
    pub blocks: usize,
    /// Values between the starts of run `g` and run `g + 1` of a record.
    pub group_stride: usize,
    /// Values between the starts of record `i` and record `i + 1`'s runs; the length of a
    /// run of every record but the last.
    pub block_stride: usize,
    /// The length of a run of the last record, in values.
    pub last_block: usize,
}

impl RecordRuns {
    /// One record of `values` contiguous values.
    pub fn contiguous(values: usize) -> Self {
        RecordRuns { groups: 1, blocks: 1, group_stride: values, block_stride: values, last_block: values }
    }

    /// Bytes of record `i` (2 per value).
    pub fn record_bytes(&self, i: usize) -> u64 {
        let run = if i + 1 == self.blocks { self.last_block } else { self.block_stride };
        2 * (self.groups * run) as u64
    }

    /// One past the last value any run reads, or `None` on overflow.
    fn extent(&self) -> Option<usize> {
        let last_group = (self.groups.checked_sub(1)?).checked_mul(self.group_stride)?;
        let last_block = (self.blocks.checked_sub(1)?).checked_mul(self.block_stride)?;
        last_group.checked_add(last_block)?.checked_add(self.last_block)
    }
}

/// The device counters of the Adler-32 sums of `records` records: two `u64` per record
/// (`S` and `W`, each a sum of values below 65521).
pub struct AdlerSums {
    sums: CudaSlice<u64>,
    records: usize,
}

impl std::fmt::Debug for AdlerSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdlerSums").field("records", &self.records).finish_non_exhaustive()
    }
}

impl AdlerSums {
    /// Zeroed counters for `records` records on `gpu`'s device, ready for any stream
    /// (synchronises).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn new(gpu: &GpuContext, records: usize) -> Result<Self> {
        let sums = Self::new_ordered(gpu, records)?;
        gpu.synchronize()?;
        Ok(sums)
    }

    /// [`AdlerSums::new`] without the synchronisation: the allocation and zeroing are
    /// ordered on `gpu`'s stream, so only work queued after them on that stream (or
    /// forked from it afterwards) may use the counters.
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn new_ordered(gpu: &GpuContext, records: usize) -> Result<Self> {
        Ok(AdlerSums { sums: gpu.zeros(2 * records)?, records })
    }

    /// Records counted.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Queues the zeroing of every counter on `gpu`'s stream.
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn clear(&mut self, gpu: &GpuContext) -> Result<()> {
        Ok(gpu.stream().memset_zeros(&mut self.sums)?)
    }

    /// The counters, `[S_0, W_0, S_1, W_1, ...]`, to pass to a kernel that adds to them.
    pub fn counters_mut(&mut self) -> &mut CudaSlice<u64> {
        &mut self.sums
    }

    /// The counters, to pass to a kernel that reads them.
    pub fn counters(&self) -> &CudaSlice<u64> {
        &self.sums
    }

    /// The Adler-32 of each of the first `records` records, from its counters and its
    /// length in bytes (`record_bytes(i)`), once `gpu`'s stream has passed every queued
    /// launch (synchronises).
    ///
    /// # Errors
    /// [`Error::Buffer`] for more records than counted; [`Error::Cuda`].
    pub fn checksums(
        &self,
        gpu: &GpuContext,
        records: usize,
        record_bytes: impl Fn(usize) -> u64,
    ) -> Result<Vec<u32>> {
        crate::check_len("sums", self.records, records, "records")?;
        let sums = gpu.download(&self.sums, 2 * records)?;
        Ok(sums
            .chunks_exact(2)
            .enumerate()
            .map(|(i, pair)| bf16_field::integrity::adler32_from_sums(record_bytes(i), pair[0], pair[1]))
            .collect())
    }
}

/// The verdict word of a whole-container decode with an optional checksum (synchronises):
/// the kernels' `status` word, or `checksum_code` when that word is 0 and the Adler-32 of
/// the decoded values (one record of `value_bytes` bytes, summed into `sums`) differs from
/// the header's `stored` checksum. 0 means valid.
///
/// # Errors
/// [`Error::Cuda`].
pub fn status_with_checksum(
    gpu: &GpuContext,
    status: &crate::DeviceStatus,
    stored: Option<u32>,
    sums: Option<&AdlerSums>,
    value_bytes: u64,
    checksum_code: u32,
) -> Result<u32> {
    let word = status.read(gpu)?;
    if word == 0
        && let (Some(stored), Some(sums)) = (stored, sums)
        && sums.checksums(gpu, 1, |_| value_bytes)?[0] != stored
    {
        return Ok(checksum_code);
    }
    Ok(word)
}

/// Adds the Adler-32 sums of every record of `runs` in `words` to `sums` (one pair per
/// record; the caller clears them first), on `gpu`'s stream, without synchronising.
///
/// # Errors
/// [`Error::Buffer`] when `words` is shorter than the runs reach or `sums` counts fewer
/// records; [`Error::Unsupported`] for an empty layout or more than `u32::MAX` runs;
/// [`Error::Cuda`].
pub fn add_record_sums(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    runs: &RecordRuns,
    sums: &mut AdlerSums,
) -> Result<()> {
    let unsupported = |why: String| Error::Unsupported { what: "record runs", why };
    let extent = runs.extent().ok_or_else(|| unsupported(format!("{runs:?} is empty or overflows")))?;
    crate::check_len("words", words.len(), extent, "values")?;
    crate::check_len("sums", sums.records, runs.blocks, "records")?;
    if runs.groups > u32::MAX as usize || runs.blocks > u32::MAX as usize {
        return Err(unsupported(format!("{runs:?}: more than u32::MAX runs")));
    }
    let spans = runs.block_stride.max(runs.last_block).div_ceil(SPAN).max(1) as u64;
    let items = runs.blocks as u64 * runs.groups as u64 * spans;
    let warps_per_cta = (THREADS / 32) as u64;
    let ctas = items.div_ceil(warps_per_cta).clamp(1, MAX_CTAS) as u32;
    let f = gpu.function(IntegrityKernel::Records)?;
    let (group_stride, block_stride, last_block) =
        (runs.group_stride as u64, runs.block_stride as u64, runs.last_block as u64);
    let (groups, blocks) = (runs.groups as u32, runs.blocks as u32);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(words).arg(&group_stride).arg(&block_stride).arg(&last_block);
    launch.arg(&groups).arg(&blocks).arg(&spans).arg(&items).arg(&mut sums.sums);
    // SAFETY: the signature matches kv_adler_records; every value a warp reads lies
    // below `extent` <= words.len() (checked above); item `i` adds to the pair of record
    // i / (spans * groups) < blocks <= sums.records (checked); 16-byte loads only at
    // 16-byte aligned addresses (the kernel checks).
    unsafe { launch.launch(launch_config(ctas, THREADS, 0)) }?;
    Ok(())
}
