//! The GPU encoder (PTX from `kernels/exans/exans_encode.cu`), byte-identical to the
//! CPU reference [`crate::encode_cache`] for every cache and block size it accepts:
//! coded and raw-fallback records, partial trailing blocks, the container header and
//! index, and every padding byte.
//!
//! [`encode_device`] runs three kernels and no host synchronisation, so it can be
//! captured in a CUDA graph (the quantizer's Q32 `log2` gains of spec §5.3, in
//! `docs/formats/exans.md` like every "spec §" here, are the CPU
//! reference's table, copied to the device when the [`EncodeWorkspace`] is made):
//!
//! 1. `exans_encode_blocks` (one 256-thread CTA per block) finds each group's center
//!    (16-byte coalesced loads when `H D` is a multiple of 8, which also write the
//!    block's sign+mantissa plane to scratch), folds the group histograms into the
//!    block's symbol histogram, quantizes it exactly like `Model::quantize` (one
//!    warp, gains in shared memory), encodes partition p with warp p (one rANS lane per
//!    thread, steps backward in rounds whose symbols are first staged in shared memory
//!    with coalesced loads, words placed by ballot/popc in the reversed stack order) into
//!    scratch, and derives the record length (or the raw length, spec §7);
//! 2. `exans_encode_index` (one CTA) scans the record lengths into the offsets of spec
//!    §8 and writes the container header and index;
//! 3. `exans_encode_records` (one CTA per record) writes each record at its offset,
//!    padding included (the sign+mantissa plane copied from the one step 1 wrote, when
//!    it wrote one).
//!
//! The blocks go through these in chunks (by default equal chunks of at most one wave
//! of step-1 CTAs, [`EncodeWorkspace::set_chunk_blocks`] to change it), pipelined over
//! three streams: step 1 of the even chunks on the context's stream and of the odd ones
//! on a second stream, so a chunk's CTAs take the SMs the previous chunk's last CTAs
//! leave, and steps 2 and 3 of chunk c on a third stream once chunk c's step 1 is done
//! (step 2 continues the offsets from the previous chunk's last one). So the record
//! writing (bound by DRAM) overlaps the block encoding (bound by latency) instead of
//! following it. The streams are forked from and joined back into the context's stream
//! by events, so the call is ordered on that stream like a single launch.
//!
//! To capture it in a CUDA graph, capture the context's stream around a call, as the
//! GPU test `gpu_encode_replays_from_a_cuda_graph` does (after one plain call, in
//! `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`; the PTX module, whose loading cannot be
//! captured, is loaded by the probe).
//!
//! The container length stays on the device until [`EncodeWorkspace::encoded_len`]
//! reads it.
//!
//! GPU limits (the CPU path has none): the output buffer must be 16-byte aligned, and
//! only the default options (precision 12, [`crate::RawPolicy::Auto`]) are supported.

use std::sync::Arc;

use bf16_field::{KvCache, KvShape};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchArgs, PushKernelArg, sys,
};
use kvcodec_gpu::integrity::{AdlerSums, add_record_sums};
use kvcodec_gpu::{GpuContext, check_aligned, device_address, launch_config};

use super::{ExansKernel, GpuError, THREADS};
use crate::Error;
use crate::format::{CONTAINER_HEADER_LEN, HEADER_LEN, MAX_PRECISION, MAX_SYMBOLS, PARTITIONS, align_up};
use crate::record::BlockShape;

/// Entries of the gain table: `gain[f]` for `f` in `1..2^12`, entry 0 unused.
pub const GAIN_LEN: usize = 1 << MAX_PRECISION;

/// The quantizer's gain table as `exans_encode_blocks` reads it: entry `f` is the CPU
/// reference's `log2(f + 1) - log2(f)` in Q32 (spec §5.3), entry 0 unused.
fn gain_table() -> Vec<u64> {
    (0..GAIN_LEN as u32).map(|f| if f == 0 { 0 } else { crate::model::slot_gain(f) }).collect()
}
/// `u32`s of a block's directory scratch: 8 word counts, then 8 x 32 final states,
/// exactly the record's directory.
pub const DIRECTORY_WORDS: usize = PARTITIONS + PARTITIONS * crate::format::LANES;
/// The largest grid launched; the per-block kernels stride over more blocks.
const MAX_GRID: usize = i32::MAX as usize;

/// A cache geometry the encoder accepts, with the checks and errors of
/// [`crate::encode_cache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    shape: KvShape,
    block_tokens: usize,
    blocks: usize,
}

impl Geometry {
    fn new(shape: KvShape, block_tokens: usize) -> Result<Self, Error> {
        let blocks = crate::container::check_encodable(shape, block_tokens)?;
        // The largest block decides whether every record's 48 + 2N fits u32 (encode_block
        // fails with ShapeOverflow otherwise); this also bounds N below 2^31 for the kernels.
        let largest = BlockShape {
            layers: shape.layers,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            tokens: block_tokens.min(shape.tokens),
        };
        largest.values()?;
        Ok(Geometry { shape, block_tokens, blocks })
    }

    /// Values of block `i`.
    fn block_values(&self, i: usize) -> usize {
        let tokens = self.block_tokens.min(self.shape.tokens - i * self.block_tokens);
        2 * self.shape.layers * tokens * self.shape.kv_heads * self.shape.head_dim
    }

    /// The container's largest possible length: every record raw.
    fn max_len(&self) -> usize {
        let first = align_up(CONTAINER_HEADER_LEN + 8 * (self.blocks + 1)).expect("small");
        let raw = |i: usize| align_up(HEADER_LEN + 2 * self.block_values(i)).expect("below 4 GiB");
        first + (self.blocks - 1) * raw(0) + raw(self.blocks - 1)
    }
}

/// The largest container [`encode_device`] can write for a cache of `shape` in blocks of
/// `block_tokens`, in bytes: the length its `out` buffer needs (every record raw).
///
/// # Errors
/// The CPU encoder's error for a shape or block size it rejects.
pub fn max_container_len(shape: KvShape, block_tokens: usize) -> Result<usize, Error> {
    Ok(Geometry::new(shape, block_tokens)?.max_len())
}

/// Device scratch for [`encode_device`]: about three bytes per value (the word streams
/// before they move into place, and the sign+mantissa planes) plus about 1.6 KiB per
/// block, and the pipeline's two streams and its events. Reusable for any cache of at
/// most the values, blocks and layers it was sized for.
pub struct EncodeWorkspace {
    /// The quantizer's gains (spec §5.3), [`GAIN_LEN`] entries.
    gain: CudaSlice<u64>,
    /// Each block's `2L` centers.
    centers: CudaSlice<u8>,
    /// Each block's 256 quantized frequencies (0 = absent).
    freqs: CudaSlice<u16>,
    /// Each block's directory: word counts, then final states.
    directory: CudaSlice<u32>,
    /// Each block's record length.
    lens: CudaSlice<u64>,
    /// `blocks + 1` record offsets; the last is the container length.
    offsets: CudaSlice<u64>,
    /// Each partition's word stream, at the end of the partition's slice of the block's
    /// `N` slots (block i at `i B H D 2L`).
    scratch: CudaSlice<u16>,
    /// Each block's sign+mantissa plane (`N` bytes at `i B H D 2L`), written with the
    /// histograms when `H D` is a multiple of 8, so that the record writer reads one
    /// byte per value instead of the two-byte words.
    sign_mantissa: CudaSlice<u8>,
    capacity_values: usize,
    capacity_blocks: usize,
    capacity_centers: usize,
    /// Blocks of the last [`encode_device`]: where its container length is.
    last_blocks: Option<usize>,
    /// The Adler-32 sums of each block's input, for the checksum option (spec §3).
    sums: AdlerSums,
    /// Blocks per pipeline chunk if set; else [`balanced_chunk_blocks`] of `wave`.
    chunk_blocks: Option<usize>,
    /// `exans_encode_blocks` CTAs resident at once on the whole GPU (its occupancy per SM
    /// times the SMs): one wave.
    wave: usize,
    /// The pipeline's streams and events (see [`encode_device`]).
    pipeline: Pipeline,
}

/// The streams and events of [`encode_device`]'s pipeline: the odd chunks' block
/// encoders run on `alternate` (so that a chunk's CTAs fill the SMs the previous chunk's
/// last CTAs leave), the index and record writers on `writer`; both are forked from the
/// context's stream by `start` and joined back into it at the end.
struct Pipeline {
    alternate: Arc<CudaStream>,
    writer: Arc<CudaStream>,
    /// Recorded on the context's stream at the start: both streams wait on it.
    start: CudaEvent,
    /// Recorded after each chunk's block encoders, waited on by `writer` right away (a
    /// wait takes the event as it is when the wait is issued, so one event serves every
    /// chunk).
    encoded: CudaEvent,
    /// The last work of `alternate` / `writer`: the context's stream waits on both.
    alternate_done: CudaEvent,
    writer_done: CudaEvent,
}

impl Pipeline {
    /// Makes both streams wait for the work queued on `stream` so far. Queues no work, so
    /// nothing needs joining when it fails.
    fn fork(&self, stream: &CudaStream) -> Result<(), GpuError> {
        self.start.record(stream)?;
        self.alternate.wait(&self.start)?;
        self.writer.wait(&self.start)?;
        Ok(())
    }

    /// Makes `stream` wait for everything queued on both streams.
    fn join(&self, stream: &CudaStream) -> Result<(), GpuError> {
        self.alternate_done.record(&self.alternate)?;
        self.writer_done.record(&self.writer)?;
        stream.wait(&self.alternate_done)?;
        stream.wait(&self.writer_done)?;
        Ok(())
    }

    fn new(gpu: &GpuContext) -> Result<Self, GpuError> {
        // Same priority as the context's stream: the writer at the highest priority
        // measured slower (its CTAs then cut in ahead of the next chunk's encoders).
        let ctx = gpu.context();
        Ok(Pipeline {
            alternate: ctx.new_stream()?,
            writer: ctx.new_stream()?,
            start: untimed_event(gpu)?,
            encoded: untimed_event(gpu)?,
            alternate_done: untimed_event(gpu)?,
            writer_done: untimed_event(gpu)?,
        })
    }
}

/// An event for ordering only (no timestamps: cheaper to record and wait on).
fn untimed_event(gpu: &GpuContext) -> Result<CudaEvent, GpuError> {
    Ok(gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))?)
}

/// Blocks per chunk of [`encode_device`]'s pipeline by default: `blocks` (at least 1)
/// split into equal chunks of at most one `wave` of block encoders (as many CTAs as fit
/// on the GPU at once). Equal chunks measured faster than whole waves with a short last
/// chunk, and both faster than larger or smaller chunks (docs/perf/exans-gpu.md).
fn balanced_chunk_blocks(wave: usize, blocks: usize) -> usize {
    blocks.div_ceil(blocks.div_ceil(wave))
}

impl EncodeWorkspace {
    /// Allocates scratch for caches of `shape` in blocks of `block_tokens` (or smaller:
    /// fewer values, blocks and `blocks x 2L` centers).
    ///
    /// # Errors
    /// [`GpuError::Codec`] for a shape or block size the CPU encoder rejects;
    /// [`kvcodec_gpu::Error::Cuda`] when allocation, querying the block encoder's
    /// occupancy, or creating the pipeline's streams and events fails.
    pub fn new(gpu: &GpuContext, shape: KvShape, block_tokens: usize) -> Result<Self, GpuError> {
        let geometry = Geometry::new(shape, block_tokens)?;
        let blocks = geometry.blocks;
        let values = shape.total_values();
        let centers = blocks * 2 * shape.layers;
        let encode_blocks = gpu.function(ExansKernel::EncodeBlocks)?;
        let per_multiprocessor =
            encode_blocks.occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)?;
        let workspace = EncodeWorkspace {
            gain: gpu.upload(&gain_table())?,
            centers: gpu.zeros(centers)?,
            freqs: gpu.zeros(blocks * MAX_SYMBOLS)?,
            directory: gpu.zeros(blocks * DIRECTORY_WORDS)?,
            lens: gpu.zeros(blocks)?,
            offsets: gpu.zeros(blocks + 1)?,
            scratch: gpu.zeros(values)?,
            sign_mantissa: gpu.zeros(values)?,
            capacity_values: values,
            capacity_blocks: blocks,
            capacity_centers: centers,
            last_blocks: None,
            sums: AdlerSums::new(gpu, blocks)?,
            chunk_blocks: None,
            wave: per_multiprocessor.max(1) as usize * gpu.multiprocessors().max(1) as usize,
            pipeline: Pipeline::new(gpu)?,
        };
        gpu.synchronize()?;
        Ok(workspace)
    }

    /// The length in bytes of the container the last [`encode_device`] wrote
    /// (synchronises with the stream).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Buffer`] before any encode; [`kvcodec_gpu::Error::Cuda`].
    pub fn encoded_len(&self, gpu: &GpuContext) -> Result<usize, GpuError> {
        let Some(blocks) = self.last_blocks else {
            return Err(kvcodec_gpu::Error::Buffer {
                what: "workspace",
                why: "nothing was encoded yet".into(),
            }
            .into());
        };
        Ok(gpu.download(&self.offsets, blocks + 1)?[blocks] as usize)
    }

    /// Sets the blocks per chunk of [`encode_device`]'s pipeline (0 is taken as 1). By
    /// default each call splits its blocks into equal chunks of at most one wave of
    /// block encoders (as many as fit on the GPU at once: 4 per SM on the H200). Any
    /// chunk size gives the same container; it only changes how the record writers
    /// overlap the block encoders.
    pub fn set_chunk_blocks(&mut self, blocks: usize) {
        self.chunk_blocks = Some(blocks.max(1));
    }

    fn check_fits(&self, g: &Geometry) -> Result<(), GpuError> {
        let values = g.shape.total_values();
        let centers = g.blocks * 2 * g.shape.layers;
        if values > self.capacity_values || g.blocks > self.capacity_blocks || centers > self.capacity_centers
        {
            return Err(kvcodec_gpu::Error::Buffer {
                what: "workspace",
                why: format!(
                    "sized for {} values, {} blocks, {} centers; needs {values}, {}, {centers}",
                    self.capacity_values, self.capacity_blocks, self.capacity_centers, g.blocks
                ),
            }
            .into());
        }
        Ok(())
    }
}

/// Encodes the device cache `words` (its `2L` tensors `[T, H, D]` concatenated in block
/// order, as [`KvCache::concat_words`] lays them out, `shape.total_values()` words) in
/// blocks of `block_tokens`, with each record's checksum when `checksum` is set (a
/// kernel sums every block's input first), into `out` (16-byte aligned, at least
/// [`max_container_len`] bytes), ordered on the context's stream (the work forks onto
/// the workspace's two streams and joins back: see the module docs), without
/// synchronising. The container is byte-identical to [`crate::encode_cache_with`]'s (the
/// default options but `checksum`) whatever the chunk size; its length is read afterwards with [`EncodeWorkspace::encoded_len`].
/// Bytes of `out` past the container are left as they were. Like any launch the work is
/// asynchronous: keep `words`, `out` and the workspace allocated (or free them only
/// through the context's stream) until that stream has passed this call.
///
/// # Errors
/// [`GpuError::Codec`] with the CPU encoder's error for a shape or block size it
/// rejects; [`kvcodec_gpu::Error::Buffer`] for a short `words` or `out`, a misaligned
/// `out` or a workspace that is too small; [`kvcodec_gpu::Error::Cuda`].
pub fn encode_device(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    shape: KvShape,
    block_tokens: usize,
    checksum: bool,
    out: &mut CudaViewMut<'_, u8>,
    workspace: &mut EncodeWorkspace,
) -> Result<(), GpuError> {
    let g = Geometry::new(shape, block_tokens)?;
    kvcodec_gpu::check_len("words", words.len(), shape.total_values(), "words")?;
    kvcodec_gpu::check_len("out", out.len(), g.max_len(), "bytes")?;
    workspace.check_fits(&g)?;
    let stream = gpu.stream();
    check_aligned("out", device_address(out, stream))?;
    // Geometry::new: blocks >= 1.
    let per_chunk = workspace.chunk_blocks.unwrap_or_else(|| balanced_chunk_blocks(workspace.wave, g.blocks));
    // The checksum's sums: cleared on the context's stream before the fork, then added by
    // `exans_encode_blocks_checksum` as it reads the values in 16-byte chunks (H D a
    // multiple of 8, `words` 16-byte aligned: the kernel's own test), or else by a pass
    // of their own here; the record writers (on the writer stream, after each chunk's
    // blocks) read them.
    let fused = checksum
        && (shape.kv_heads * shape.head_dim).is_multiple_of(8)
        && device_address(words, stream).is_multiple_of(16);
    if checksum {
        workspace.sums.clear(gpu)?;
        if !fused {
            let runs = super::record_runs(shape, block_tokens);
            add_record_sums(gpu, &words.slice(..shape.total_values()), &runs, &mut workspace.sums)?;
        }
    }
    let kernels = Kernels {
        encode_blocks: gpu.function(if fused {
            ExansKernel::EncodeBlocksChecksum
        } else {
            ExansKernel::EncodeBlocks
        })?,
        write_index: gpu.function(ExansKernel::EncodeIndex)?,
        write_records: gpu.function(ExansKernel::EncodeRecords)?,
    };
    // Fork, launch, join. The join comes after a failed launch too: the streams may
    // still hold kernels of earlier chunks that read `words` and write `out` and the
    // workspace, and a caller that frees those after an error, or encodes again, must
    // find them done once the context's stream is (the next call forks after it).
    workspace.pipeline.fork(stream)?;
    let plan = ChunkPlan { per_chunk, checksum, fused };
    let launched = launch_chunks(gpu, &kernels, words, &g, plan, out, workspace);
    let joined = workspace.pipeline.join(stream);
    launched?;
    joined?;
    workspace.last_blocks = Some(g.blocks);
    Ok(())
}

/// How [`launch_chunks`] runs: blocks per chunk, whether the record writers add the
/// checksums (the sums are then in the workspace), and whether the block encoder adds
/// the sums (`exans_encode_blocks_checksum`, which takes the counters as a last argument).
#[derive(Clone, Copy)]
struct ChunkPlan {
    per_chunk: usize,
    checksum: bool,
    fused: bool,
}

/// The encoder's three kernels, loaded.
struct Kernels {
    encode_blocks: CudaFunction,
    write_index: CudaFunction,
    write_records: CudaFunction,
}

/// Launches every chunk of `per_chunk` blocks on the pipeline's streams (see the module
/// docs), between its fork and join. Checked by
/// [`encode_device`]: `words` holds the cache, `out` is 16-byte aligned and holds
/// [`Geometry::max_len`] bytes, the workspace fits `g`.
fn launch_chunks(
    gpu: &GpuContext,
    k: &Kernels,
    words: &CudaView<'_, u16>,
    g: &Geometry,
    plan: ChunkPlan,
    out: &mut CudaViewMut<'_, u8>,
    workspace: &mut EncodeWorkspace,
) -> Result<(), GpuError> {
    let ChunkPlan { per_chunk, checksum, fused } = plan;
    let stream = gpu.stream();
    let p = &workspace.pipeline;
    // The record writer's `record_sums`: the sums, or a null pointer without the checksum.
    const NULL: u64 = 0;
    let cache_args = CacheArgs::new(g);
    let one = launch_config(1, THREADS, 0);
    for c in 0..g.blocks.div_ceil(per_chunk) {
        // Geometry::new checked blocks <= u32::MAX.
        let first = (c * per_chunk) as u32;
        let end = ((c + 1) * per_chunk).min(g.blocks) as u32;
        let per_block = launch_config((end - first).min(MAX_GRID as u32), THREADS, 0);
        let encoder: &CudaStream = if c % 2 == 1 { &p.alternate } else { stream };
        let mut launch = encoder.launch_builder(&k.encode_blocks);
        launch.arg(words);
        cache_args.push(&mut launch);
        launch
            .arg(&first)
            .arg(&end)
            .arg(&workspace.gain)
            .arg(&mut workspace.centers)
            .arg(&mut workspace.freqs)
            .arg(&mut workspace.directory)
            .arg(&mut workspace.lens)
            .arg(&mut workspace.scratch)
            .arg(&mut workspace.sign_mantissa);
        if fused {
            launch.arg(workspace.sums.counters_mut());
        }
        // SAFETY: the arguments match exans_encode_blocks(words: *const u16, layers,
        // kv_heads, head_dim, block_tokens: u32, tokens: u64, blocks, first, end: u32,
        // gain: *const u64, centers: *mut u8, freqs: *mut u16, dir: *mut u32, lens: *mut
        // u64, scratch: *mut u16, sign_mantissa: *mut u8), and when `fused`
        // exans_encode_blocks_checksum's last argument record_sums: *mut u64, two per
        // block (the workspace's counters hold two per block of its capacity, check_fits),
        // to which block i adds atomically, in its own pair only.
        // It reads words[g T H D + i B H D + r] for g < 2L, r < B' H D: below 2 L T H D <=
        // words.len() (checked by encode_device), and gain[f] for 1 <= f <= 4095. Block i
        // in [first, end) writes only its own slots: centers[i 2L ..][..2L], freqs[i 256
        // ..][..256], dir[i 264 ..][..264], lens[i], scratch[i B H D 2L ..][..N_i] and
        // sign_mantissa[i B H D 2L ..][..N_i] (u64 stores, only when H D is a multiple of 8: 8-byte
        // aligned), all inside the workspace (check_fits: both hold total_values()
        // elements). Chunks own disjoint blocks, so the two encoder streams never write
        // the same bytes; the writer stream reads a chunk's slots only after its event;
        // and the previous call's readers are done: its streams were joined into the
        // context's stream, which `start` follows.
        unsafe { launch.launch(per_block) }?;
        p.encoded.record(encoder)?;
        p.writer.wait(&p.encoded)?;

        let mut launch = p.writer.launch_builder(&k.write_index);
        cache_args.push(&mut launch);
        launch.arg(&first).arg(&end).arg(&workspace.lens).arg(&mut workspace.offsets).arg(&mut *out);
        // SAFETY: exans_encode_index(layers, kv_heads, head_dim, block_tokens: u32, tokens:
        // u64, blocks, first, end: u32, lens: *const u64, offsets: *mut u64, out: *mut u8)
        // reads lens[first..end] (after the chunk's event) and offsets[first] (chunks
        // after the first: written by the previous chunk's launch, earlier on this
        // stream), writes offsets[first..=end] (end <= blocks; the workspace holds
        // blocks + 1) and index entries first..=end, and for chunk 0 the header and the
        // gap after the index: all before the first record, <= max_len <= out.len(); out
        // is 16-byte aligned, so its u32 and u64 stores are aligned.
        unsafe { launch.launch(one) }?;

        let mut launch = p.writer.launch_builder(&k.write_records);
        launch.arg(words);
        cache_args.push(&mut launch);
        launch
            .arg(&first)
            .arg(&end)
            .arg(&workspace.centers)
            .arg(&workspace.freqs)
            .arg(&workspace.directory)
            .arg(&workspace.lens)
            .arg(&workspace.offsets)
            .arg(&workspace.scratch)
            .arg(&workspace.sign_mantissa);
        if checksum {
            launch.arg(workspace.sums.counters());
        } else {
            launch.arg(&NULL);
        }
        launch.arg(&mut *out);
        // SAFETY: the arguments match exans_encode_records(words, layers, kv_heads,
        // head_dim, block_tokens, tokens, blocks, first, end, centers, freqs, dir, lens,
        // offsets, scratch, sign_mantissa, record_sums, out); record_sums (null, or two
        // u64 per block, block < blocks <= the workspace's capacity) is read by thread 0
        // of a block's CTA only.
        // It reads what exans_encode_blocks wrote for each block of the chunk (the slots
        // above, after the chunk's event; sign_mantissa only under the same H D condition, in
        // 16-byte loads: i B H D 2L is then a multiple of 16, and the 8 bytes past N_i of
        // a block's last 16-byte load are not read), the offsets the index launch before
        // it on this stream wrote, and the words it read (raw records, or H D not a
        // multiple of 8); record i is written in [offsets[i], offsets[i + 1]), and each
        // record is at most raw-sized, so offsets[blocks] <= max_len <= out.len(); every
        // record starts 16-byte aligned (spec §8), so its u32 and 16-byte stores are
        // aligned.
        unsafe { launch.launch(per_block) }?;
    }
    Ok(())
}

/// The cache arguments every encoder kernel takes, in its order: layers, kv_heads,
/// head_dim, block_tokens (u32), tokens (u64), blocks (u32).
struct CacheArgs {
    layers: u32,
    kv_heads: u32,
    head_dim: u32,
    block_tokens: u32,
    tokens: u64,
    blocks: u32,
}

impl CacheArgs {
    /// Geometry::new checked L, H, D, B against u16 and the block count against u32.
    fn new(g: &Geometry) -> Self {
        let s = g.shape;
        CacheArgs {
            layers: s.layers as u32,
            kv_heads: s.kv_heads as u32,
            head_dim: s.head_dim as u32,
            block_tokens: g.block_tokens as u32,
            tokens: s.tokens as u64,
            blocks: g.blocks as u32,
        }
    }

    fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>) {
        launch
            .arg(&self.layers)
            .arg(&self.kv_heads)
            .arg(&self.head_dim)
            .arg(&self.block_tokens)
            .arg(&self.tokens)
            .arg(&self.blocks);
    }
}

/// Host cache -> container bytes through the GPU (uploads, encodes, reads back;
/// synchronises): the same bytes as [`crate::encode_cache_with`] with the default
/// options but `checksum`.
///
/// # Errors
/// [`GpuError::Codec`] with the CPU encoder's error for a block size it rejects;
/// [`kvcodec_gpu::Error::Cuda`].
pub fn encode_to_vec(
    gpu: &GpuContext,
    cache: &KvCache,
    block_tokens: usize,
    checksum: bool,
) -> Result<Vec<u8>, GpuError> {
    let shape = cache.shape();
    let max_len = max_container_len(shape, block_tokens)?;
    let words = gpu.upload(&cache.concat_words())?;
    // A fresh allocation: aligned far beyond 16 bytes.
    let mut out: CudaSlice<u8> = gpu.zeros(max_len)?;
    let mut workspace = EncodeWorkspace::new(gpu, shape, block_tokens)?;
    encode_device(
        gpu,
        &words.as_view(),
        shape,
        block_tokens,
        checksum,
        &mut out.as_view_mut(),
        &mut workspace,
    )?;
    let len = workspace.encoded_len(gpu)?;
    Ok(gpu.download(&out, len)?)
}
