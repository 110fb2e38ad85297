//! Fused decode attention over a paged GAAC cache (issue 18; the GAAC paper's fused
//! decode kernel): the kernel copies each page's coded blocks into shared memory and
//! restores the 3-bit and sign+mantissa planes straight into the tensor-core fragments
//! (spec §3.1-3.3), so BF16 KV is never written to global memory
//! (`kernels/gaac/attention.cu`).
//!
//! The kernel body is the BF16 twin's (`kernels/attention/decode.cuh`,
//! [`kvcodec_attention::gpu`]): the same split plan (from the same [`DecodeWorkspace`]),
//! the same page-to-warp assignment, mma sequence and accumulation order; only the staging
//! of a page differs. A cache and its decoded BF16 copy ([`GaacDecodeProblem::decoded_copy`])
//! therefore give bit-identical outputs and log-sum-exps on the GPU.
//!
//! **The cache** (one layer; `docs/formats/gaac.md` §10). A page of 16 tokens is one GAAC
//! block (spec §3) per (kind, KV head), each in a slot of `capacity` bytes: the slots are
//! `[pages, 2, kv_heads, capacity]` (a page's K blocks, then its V blocks), which is what one
//! [`crate::gpu::seal_blocks_device`] step of the layer writes (tensors K, V: the sealer
//! codes odd tensors as V), or one call for `2 pages` tensors over pages whose K and V
//! tails alternate. A directory `[pages, 2, kv_heads]` of `u32` says where each block is: [`CODED`] in its slot, or `r +
//! 1` for raw block `r` (spec §3.6, a block that did not fit its slot) of a raw-block pool
//! `[raw, 16, head_dim]` BF16. The layer's bases are `[2, kv_heads, head_dim]` (K then V,
//! the container's order, spec §5.2). A sequence's unfilled last page stays BF16, as GAAC
//! keeps its tail, in a pool of BF16 pages (`[pages, 16, kv_heads, head_dim]`, K and V
//! apart, as [`PagedKv`]). Block-table row `b` lists sequence `b`'s pages in token order:
//! slot page ids for its full pages and, when its context is not a multiple of 16, a BF16
//! page id for the last one.
//!
//! **A pool-managed cache** ([`kvcodec_attention::pooled`], issue 19; `docs/formats/gaac.md`
//! §10.1): block tables of page ids read through the pool's page table. A compressed page
//! is one extent of the pool, its `2 kv_heads` slots (`[2, kv_heads, capacity]`) and then
//! its raw blocks in block order; a directory indexed by page id ([`GaacPoolLayer`]) names
//! each block's place with raw indices relative to the extent, so a moved page needs no
//! directory update. A BF16 page (open, or kept uncompressed by the pool) is K rows then V
//! rows. [`decode_device_pooled`], [`decode_pooled_to_vec`], [`pooled_decoded_copy`]: same
//! body, same bits.
//!
//! [`decode_cpu`] is the CPU path for small problems (decode the pages, then
//! [`kvcodec_attention::decode_cpu`]); [`decode_device_fused`] queues the fused kernel;
//! [`decode_fused_to_vec`] is the host convenience.

use std::fmt;

use bf16_field::KvKind;
use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg, sys};
pub use kvcodec_attention::fused::DecodedCopy;
use kvcodec_attention::fused::{self, check_tables, for_each_read, partial_pages};
use kvcodec_attention::gpu::{DecodeWorkspace, FusedTail, STAGES, check_launch_limits, shared_bytes};
use kvcodec_attention::pooled::{
    DevicePooledProblem, PooledArgs, PooledProblem, check_pooled_launch, run_pooled,
};
use kvcodec_attention::{Attention, AttentionError, BlockTables, DecodeShape, PagedKv, PoolFault};
use kvcodec_gpu::{GpuContext, Kernel, Module, check_aligned, device_address};

use crate::block::{self, FragmentOrder, block_info};
use crate::format::{BLOCK_TOKENS, BlockShape, MAX_BASE};

/// The fused-attention PTX module.
pub static MODULE: Module = Module::new("gaac_attention", include_str!("../ptx/attention.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// The fused kernel of one head width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedKernel {
    /// 64, 128 or 256 (`decode_device_fused` validates it before naming a kernel; any
    /// other value names the 256 instance).
    pub head_dim: usize,
    /// The kernel over a pool-managed cache ([`decode_device_pooled`]) rather than slot
    /// pages.
    pub pooled: bool,
}

impl Kernel for FusedKernel {
    fn module(self) -> &'static Module {
        &MODULE
    }
    fn symbol(self) -> &'static str {
        match (self.head_dim, self.pooled) {
            (64, false) => "gaac_attention_d64",
            (128, false) => "gaac_attention_d128",
            (_, false) => "gaac_attention_d256",
            (64, true) => "gaac_attention_pooled_d64",
            (128, true) => "gaac_attention_pooled_d128",
            (_, true) => "gaac_attention_pooled_d256",
        }
    }
}

/// The directory entry of a block coded in its slot; `r + 1` names raw block `r`.
pub const CODED: u32 = 0;

/// The largest slot capacity the fused kernel takes at `head_dim`: a warp stages a page's K
/// and V slots and the block's addend image (`16 head_dim` bytes) in the twin's staging
/// slot of a page (`64 head_dim` bytes): `24 head_dim` bytes (1536 / 3072 / 6144 at
/// head_dim 64 / 128 / 256). The default capacity ([`BlockShape::default_capacity`]) is
/// below it at every head_dim.
pub fn max_capacity(head_dim: usize) -> usize {
    let staging = kvcodec_attention::gpu::staged_page_bytes(head_dim);
    (staging - BLOCK_TOKENS * head_dim) / 2 / 16 * 16
}

/// Codes one block of `kind` (`[16, head_dim]` token-major words, `bases` its `head_dim`
/// channel bases) into `slot` as the CPU encoder does (spec §3, §4): `Some(len)` when it fits
/// (the slot's first `len` bytes, zeros after), `None` when it does not and is kept raw
/// (the slot all zero). The host side of [`crate::gpu::seal_blocks_device`].
///
/// # Errors
/// [`crate::Error::HeadDimUnsupported`], [`crate::Error::SlotCapacityInvalid`] for a slot
/// whose length is not a valid capacity, [`crate::Error::WordCountMismatch`] for `words`
/// or `bases` of the wrong length, [`crate::Error::BaseOutOfRange`].
pub fn encode_block(
    kind: KvKind,
    words: &[u16],
    bases: &[u8],
    head_dim: usize,
    slot: &mut [u8],
) -> crate::Result<Option<usize>> {
    let shape = BlockShape::new(head_dim).ok_or(crate::Error::HeadDimUnsupported { head_dim })?;
    crate::cache::check_capacity(shape, slot.len())?;
    if words.len() != shape.values() || bases.len() != head_dim {
        return Err(crate::Error::WordCountMismatch { got: words.len(), expected: shape.values() });
    }
    if let Some((channel, &base)) = bases.iter().enumerate().find(|&(_, &b)| b > MAX_BASE) {
        return Err(crate::Error::BaseOutOfRange { layer: 0, kind, head: 0, channel, base });
    }
    slot.fill(0);
    let (len, _) = block::measure(words, bases, shape);
    if len > slot.len() {
        return Ok(None);
    }
    Ok(Some(block::encode_into(words, bases, shape, &FragmentOrder::new(kind, shape), slot)))
}

/// A paged GAAC cache of one layer on the host (module docs).
#[derive(Clone, Copy, Debug)]
pub struct GaacPagedKv<'a> {
    /// `[pages, 2, kv_heads, capacity]`: each page's K blocks, then its V blocks.
    pub slots: &'a [u8],
    /// Bytes per slot: a valid capacity (spec §4) of at most [`max_capacity`].
    pub capacity: usize,
    /// `[pages, 2, kv_heads]`: [`CODED`], or `r + 1` for raw block `r`.
    pub directory: &'a [u32],
    /// Raw blocks, `[raw, 16, head_dim]` BF16 words.
    pub raw: &'a [u16],
    /// The layer's bases, `[2, kv_heads, head_dim]`, each at most 248.
    pub bases: &'a [u8],
    /// BF16 pages of the sequences' unfilled last pages.
    pub partial: PagedKv<'a>,
}

/// One decode step of one layer over a [`GaacPagedKv`] cache; the shapes are
/// [`kvcodec_attention::DecodeProblem`]'s.
#[derive(Clone, Copy, Debug)]
pub struct GaacDecodeProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: &'a [u16],
    /// The cache.
    pub cache: GaacPagedKv<'a>,
    /// Slot page ids of full pages, BF16 page ids of partial last pages (module docs).
    pub tables: BlockTables<'a>,
    /// Softmax scale.
    pub scale: f32,
}

/// An error of the fused path on the host.
#[derive(Clone, Debug, PartialEq)]
pub enum FusedError {
    /// The problem's shape, lengths, scale or block tables.
    Problem(AttentionError),
    /// The cache's layout: a capacity, a buffer length, a base or a directory entry.
    Layout {
        /// Which part.
        what: &'static str,
        /// Why.
        why: String,
    },
    /// A block a sequence reads does not decode ([`crate::block_info`]'s error).
    Block {
        /// The sequence.
        sequence: usize,
        /// Its logical page.
        logical: usize,
        /// The slot page.
        page: u32,
        /// K or V.
        kind: KvKind,
        /// The KV head.
        head: usize,
        /// Why.
        source: crate::Error,
    },
}

impl fmt::Display for FusedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FusedError::Problem(e) => write!(f, "{e}"),
            FusedError::Layout { what, why } => write!(f, "{what}: {why}"),
            FusedError::Block { sequence, logical, page, kind, head, source } => {
                write!(
                    f,
                    "sequence {sequence}, logical page {logical}: page {page} {kind:?} head {head}: {source}"
                )
            }
        }
    }
}

impl std::error::Error for FusedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FusedError::Problem(e) => Some(e),
            FusedError::Block { source, .. } => Some(source),
            FusedError::Layout { .. } => None,
        }
    }
}

impl From<AttentionError> for FusedError {
    fn from(e: AttentionError) -> Self {
        FusedError::Problem(e)
    }
}

fn layout(what: &'static str, why: String) -> FusedError {
    FusedError::Layout { what, why }
}

/// The checks of a cache's layout the host and the device path share: the capacity, and
/// the lengths of the slots, directory, raw pool and bases for `pages` pages.
fn check_layout(
    shape: DecodeShape,
    capacity: usize,
    [slots, directory, raw, bases]: [usize; 4],
) -> Result<usize, FusedError> {
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let block = check_capacity_and_bases(shape, capacity, bases)?;
    if !directory.is_multiple_of(2 * heads) || slots != directory * capacity {
        return Err(layout(
            "slots/directory",
            format!(
                "{slots} slot bytes and {directory} entries; needs [pages, 2, {heads}] entries and capacity bytes each"
            ),
        ));
    }
    if !raw.is_multiple_of(block.values()) {
        return Err(layout("raw", format!("{raw} words; needs whole [16, {d}] blocks")));
    }
    Ok(directory / (2 * heads))
}

/// The capacity (a valid one the fused kernel takes) and the bases' length
/// (`[2, kv_heads, head_dim]`) every GAAC attention layout shares; the block shape.
fn check_capacity_and_bases(
    shape: DecodeShape,
    capacity: usize,
    bases: usize,
) -> Result<BlockShape, FusedError> {
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let block = BlockShape::new(d).ok_or(AttentionError::HeadDim { head_dim: d })?;
    if !block.capacity_valid(capacity) || capacity > max_capacity(d) {
        return Err(layout(
            "capacity",
            format!(
                "{capacity} bytes; the fused kernel takes a multiple of 16 in {}..={} at head_dim {d}",
                block.planes_len(),
                max_capacity(d)
            ),
        ));
    }
    if bases != 2 * heads * d {
        return Err(layout("bases", format!("{bases} bytes; needs [2, {heads}, {d}]")));
    }
    Ok(block)
}

/// Every base at most [`MAX_BASE`] (the kernels flag a larger one).
fn check_base_values(bases: &[u8]) -> Result<(), FusedError> {
    match bases.iter().position(|&b| b > MAX_BASE) {
        Some(at) => Err(layout("bases", format!("base {} at {at}: at most {MAX_BASE}", bases[at]))),
        None => Ok(()),
    }
}

/// Where a block of a page is for the CPU decoder: coded in its slot, or raw words (host
/// `u16`s of a slot cache's raw pool, or little-endian bytes of a pooled extent).
enum BlockSource<'a> {
    Slot(&'a [u8]),
    RawWords(&'a [u16]),
    RawBytes(&'a [u8]),
}

/// The CPU decoder's per-layer state: block shape, fragment orders and every (kind,
/// head)'s tables.
struct LayerDecoder<'a> {
    shape: DecodeShape,
    block: BlockShape,
    capacity: usize,
    bases: &'a [u8],
    orders: [FragmentOrder; 2],
    tables: Vec<block::HeadTables>,
}

const KINDS: [KvKind; 2] = [KvKind::K, KvKind::V];

impl<'a> LayerDecoder<'a> {
    fn new(shape: DecodeShape, capacity: usize, bases: &'a [u8]) -> Result<Self, FusedError> {
        let (heads, d) = (shape.kv_heads, shape.head_dim);
        let block = BlockShape::new(d).ok_or(AttentionError::HeadDim { head_dim: d })?;
        let orders = KINDS.map(|kind| FragmentOrder::new(kind, block));
        // (kind, head) i = kind H + head: its bases are bases[i D..][..D].
        let tables = (0..2 * heads).map(|i| orders[i / heads].head_tables(&bases[i * d..][..d])).collect();
        Ok(LayerDecoder { shape, block, capacity, bases, orders, tables })
    }

    /// Decodes one page's `2 kv_heads` blocks, `source(kind, head)` each, into `k` and `v`
    /// (`[16, kv_heads, head_dim]`); a coded block is checked by [`block_info`] first
    /// (`page`, `sequence`, `logical` name it in the error).
    fn decode_page<'b>(
        &self,
        (sequence, logical, page): (usize, usize, u32),
        k: &mut [u16],
        v: &mut [u16],
        source: impl Fn(usize, usize) -> BlockSource<'b>,
    ) -> Result<(), FusedError> {
        let (heads, d) = (self.shape.kv_heads, self.shape.head_dim);
        for (kind, dst) in [k, v].into_iter().enumerate() {
            for head in 0..heads {
                // Token i of this head's block goes to dst[(i H + head) D ..][.. D].
                let rows = &mut dst[head * d..];
                match source(kind, head) {
                    BlockSource::Slot(slot) => {
                        let error = |source| FusedError::Block {
                            sequence,
                            logical,
                            page,
                            kind: KINDS[kind],
                            head,
                            source,
                        };
                        block_info(slot, self.block, self.capacity).map_err(error)?;
                        let bases = &self.bases[(kind * heads + head) * d..][..d];
                        let tables = &self.tables[kind * heads + head];
                        block::decode_checked(
                            slot,
                            bases,
                            tables,
                            self.block,
                            &self.orders[kind],
                            rows,
                            heads * d,
                        );
                    }
                    BlockSource::RawWords(raw) => {
                        for (token, row) in raw.chunks_exact(d).enumerate() {
                            rows[token * heads * d..][..d].copy_from_slice(row);
                        }
                    }
                    BlockSource::RawBytes(raw) => {
                        for (token, row) in raw.chunks_exact(2 * d).enumerate() {
                            let to = &mut rows[token * heads * d..][..d];
                            for (w, b) in to.iter_mut().zip(row.chunks_exact(2)) {
                                *w = u16::from_le_bytes([b[0], b[1]]);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

kvcodec_attention::impl_fused_problem!(GaacDecodeProblem);

impl GaacDecodeProblem<'_> {
    /// Slot pages in the cache (the directory's length over `2 kv_heads`).
    pub fn pages(&self) -> usize {
        self.cache.directory.len() / (2 * self.shape.kv_heads).max(1)
    }

    /// Checks the problem as [`kvcodec_attention::DecodeProblem::validate`] does (block-table entries against
    /// the slot pages, or the BF16 pages for a partial last page), the cache's layout
    /// (capacity, lengths, bases) and the directory entries of every page read; blocks are
    /// checked when decoded.
    ///
    /// # Errors
    /// [`FusedError::Problem`], [`FusedError::Layout`].
    pub fn validate(&self) -> Result<(), FusedError> {
        let shape = self.shape;
        shape.validate()?;
        let cache = self.cache;
        let lengths = [cache.slots.len(), cache.directory.len(), cache.raw.len(), cache.bases.len()];
        let pages = check_layout(shape, cache.capacity, lengths)?;
        check_base_values(cache.bases)?;
        // Contexts and lengths as the twin checks them; then each entry against its own pool.
        let bf16_pages = check_tables(self, cache.partial)?;
        let raw_blocks = cache.raw.len() / (BLOCK_TOKENS * shape.head_dim);
        let heads = shape.kv_heads;
        for_each_read(self.tables, |sequence, logical, page, partial| {
            let limit = if partial { bf16_pages } else { pages };
            if page as usize >= limit {
                return Err(AttentionError::PageOutOfRange { sequence, logical, page, pages: limit }.into());
            }
            if !partial {
                for kind in 0..2 {
                    let entries = &cache.directory[(2 * page as usize + kind) * heads..][..heads];
                    if let Some(&entry) = entries.iter().find(|&&e| e as usize > raw_blocks) {
                        return Err(layout(
                            "directory",
                            format!("page {page}: entry {entry} past the {raw_blocks} raw blocks"),
                        ));
                    }
                }
            }
            Ok(())
        })
    }

    /// The BF16 copy the twin reads ([`DecodedCopy`]), blocks decoded by the CPU decoder.
    ///
    /// # Errors
    /// [`GaacDecodeProblem::validate`]'s; [`FusedError::Block`] for a coded block that
    /// does not decode (spec §7.2 rows 2-3).
    pub fn decoded_copy(&self) -> Result<DecodedCopy, FusedError> {
        self.validate()?;
        let cache = self.cache;
        let (heads, capacity) = (self.shape.kv_heads, cache.capacity);
        let decoder = LayerDecoder::new(self.shape, capacity, cache.bases)?;
        let values = decoder.block.values();
        DecodedCopy::build(self.shape, self.tables, cache.partial, |sequence, logical, page, k, v| {
            decoder.decode_page((sequence, logical, page), k, v, |kind, head| {
                let index = (2 * page as usize + kind) * heads + head;
                match cache.directory[index] {
                    CODED => BlockSource::Slot(&cache.slots[index * capacity..][..capacity]),
                    entry => BlockSource::RawWords(&cache.raw[(entry as usize - 1) * values..][..values]),
                }
            })
        })
    }
}

/// The CPU path: decodes the pages the sequences read ([`GaacDecodeProblem::decoded_copy`])
/// and runs [`kvcodec_attention::decode_cpu`] on them (FP64 accumulation, BF16 output).
///
/// # Errors
/// As [`GaacDecodeProblem::decoded_copy`].
pub fn decode_cpu(problem: &GaacDecodeProblem<'_>) -> Result<Attention<u16>, FusedError> {
    let copy = problem.decoded_copy()?;
    Ok(kvcodec_attention::decode_cpu(&copy.problem(problem))?)
}

/// A paged GAAC cache on the device: [`GaacPagedKv`]'s buffers.
#[derive(Debug)]
pub struct DeviceGaacPagedKv<'a> {
    /// `[pages, 2, kv_heads, capacity]` bytes, 16-byte aligned.
    pub slots: CudaView<'a, u8>,
    /// Bytes per slot (as [`GaacPagedKv::capacity`]).
    pub capacity: usize,
    /// `[pages, 2, kv_heads]`: [`CODED`] or `r + 1`.
    pub directory: CudaView<'a, u32>,
    /// Raw blocks, `[raw, 16, head_dim]` BF16 words as little-endian bytes (what
    /// [`crate::gpu::seal_blocks_device`] writes), 16-byte aligned.
    pub raw: CudaView<'a, u8>,
    /// `[2, kv_heads, head_dim]` bases.
    pub bases: CudaView<'a, u8>,
    /// BF16 K pages of partial last pages, `[pages, 16, kv_heads, head_dim]`.
    pub partial_k: CudaView<'a, u16>,
    /// BF16 V pages, as `partial_k`.
    pub partial_v: CudaView<'a, u16>,
}

/// A fused decode problem whose buffers live on the device.
#[derive(Debug)]
pub struct DeviceGaacProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: CudaView<'a, u16>,
    /// The cache.
    pub cache: DeviceGaacPagedKv<'a>,
    /// `[batch, max_pages]` slot page ids, or BF16 page ids for partial last pages.
    pub block_table: CudaView<'a, u32>,
    /// Entries per block-table row.
    pub max_pages: usize,
    /// `[batch]` context lengths in tokens.
    pub context_lens: CudaView<'a, u32>,
    /// Softmax scale.
    pub scale: f32,
}

/// Dynamic shared memory of the fused kernel: the twin's, then the CTA's head's K and V
/// bases and window starts (`4 head_dim` bytes).
pub fn fused_shared_bytes(head_dim: usize) -> usize {
    debug_assert_eq!(STAGES, 2, "the kernel stages two pages per warp");
    shared_bytes(head_dim) + 4 * head_dim
}

/// Queues the fused decode attention on `gpu`'s stream without synchronising: `out` gets
/// `[batch, q_heads, head_dim]` BF16 words, `lse` `[batch, q_heads]` natural-log
/// log-sum-exps, bit-identical to [`kvcodec_attention::gpu::decode_device`] on the decoded
/// copy with a workspace of the same plan. Checked on the device and reported by
/// [`DecodeWorkspace::check`]: block-table entries past their pool, directory entries past
/// the raw pool, bases above 248, and blocks whose tags give a length past the slot (read
/// without their 4-bit and raw groups: the output is then meaningless). Not
/// checked on the device: tag 3 (read as a 3-bit group) and slot padding (spec §7.2 rows 2
/// and 4). Blocks from an untrusted source are checked on the host first:
/// [`crate::block_info`] (as [`decode_fused_to_vec`] does) rejects tag 3 and a length past
/// the slot; neither path checks the padding, which no value is read from (the container
/// decoder rejects nonzero padding; attention reads such a block's values as they are). Which pool an entry names (a
/// slot page, or a BF16 page for a partial last page) follows from `context_lens`. A
/// workspace serves one launch at a time; its status accumulates until
/// [`DecodeWorkspace::check`]. Every buffer 16-byte aligned (fresh allocations are).
///
/// # Errors
/// [`AttentionError`] for a shape or scale; [`kvcodec_gpu::Error::Buffer`] for a layout
/// [`GaacPagedKv`] does not allow (capacity, lengths), short or misaligned buffers, or a
/// workspace of another shape or row length; [`kvcodec_gpu::Error::Unsupported`] past `u32`
/// counts or 65535 sequences or KV heads; [`kvcodec_gpu::Error::Cuda`].
pub fn decode_device_fused(
    gpu: &GpuContext,
    workspace: &mut DecodeWorkspace,
    problem: &DeviceGaacProblem<'_>,
    out: &mut CudaViewMut<'_, u16>,
    lse: &mut CudaViewMut<'_, f32>,
) -> Result<(), kvcodec_attention::gpu::GpuError> {
    use kvcodec_attention::gpu::GpuError;
    let shape = problem.shape;
    workspace.check_problem(shape, problem.max_pages, problem.scale)?;
    let cache = &problem.cache;
    let lengths = [cache.slots.len(), cache.directory.len(), cache.raw.len() / 2, cache.bases.len()];
    if !cache.raw.len().is_multiple_of(2) {
        return Err(kvcodec_gpu::Error::Buffer { what: "raw", why: "an odd number of bytes".into() }.into());
    }
    let pages = check_layout(shape, cache.capacity, lengths).map_err(|e| match e {
        FusedError::Problem(e) => GpuError::Codec(e),
        other => GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "cache", why: other.to_string() }),
    })?;
    let bf16_pages =
        partial_pages(shape, cache.partial_k.len(), cache.partial_v.len()).map_err(GpuError::Codec)?;
    let raw_blocks = cache.raw.len() / (2 * BLOCK_TOKENS * shape.head_dim);
    // A directory entry names raw block r as r + 1: that must fit a u32 too.
    let pools = [("pages", pages), ("BF16 pages", bf16_pages), ("raw blocks + 1", raw_blocks + 1)];
    check_launch_limits(shape, problem.max_pages, &pools)?;
    let lengths =
        [problem.q.len(), problem.block_table.len(), problem.context_lens.len(), out.len(), lse.len()];
    kvcodec_attention::gpu::check_launch_lengths(shape, problem.max_pages, lengths)?;
    let stream = gpu.stream();
    for (what, address) in [
        ("q", device_address(&problem.q, stream)),
        ("slots", device_address(&cache.slots, stream)),
        ("raw", device_address(&cache.raw, stream)),
        ("bases", device_address(&cache.bases, stream)),
        ("partial_k", device_address(&cache.partial_k, stream)),
        ("partial_v", device_address(&cache.partial_v, stream)),
    ] {
        check_aligned(what, address)?;
    }
    if shape.batch == 0 {
        return Ok(());
    }
    let f = gpu.function(FusedKernel { head_dim: shape.head_dim, pooled: false })?;
    let smem = fused_shared_bytes(shape.head_dim);
    f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
        .map_err(kvcodec_gpu::Error::Cuda)?;
    let config = workspace.launch_config(smem as u32);
    let (capacity, num_pages, num_raw, num_bf16) =
        (cache.capacity as u64, pages as u32, raw_blocks as u32, bf16_pages as u32);
    let tail = FusedTail::new(shape, problem.max_pages, problem.scale);
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&problem.q)
        .arg(&cache.slots)
        .arg(&capacity)
        .arg(&num_pages)
        .arg(&cache.directory)
        .arg(&cache.raw)
        .arg(&num_raw)
        .arg(&cache.bases)
        .arg(&cache.partial_k)
        .arg(&cache.partial_v)
        .arg(&num_bf16);
    tail.push(&mut launch, &problem.block_table, &problem.context_lens, out, lse, workspace);
    // SAFETY: the signature matches GAAC_ATTENTION_KERNEL's. The kernel reads q
    // [batch*q_heads*head_dim], the first ceil(len/16) entries of each block-table row, the
    // bases [2*kv_heads*head_dim], directory entries and slots of pages below num_pages
    // ([num_pages, 2, kv_heads] entries and slots of `capacity` bytes: check_layout), raw blocks
    // below num_raw (checked in the kernel), BF16 pages below num_bf16 of partial_k and
    // partial_v, and context_lens [batch]; it writes out and lse of the shape's sizes and
    // the workspace made for this shape and row length. Lengths and alignment are checked
    // above; the dynamic shared memory is the twin's plus 4*head_dim bytes, allowed by the
    // attribute just set, and a capacity of at most max_capacity keeps a page's two slots
    // and its addend image within a staging slot.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Fused decode attention of a host problem on the GPU: checks it
/// ([`GaacDecodeProblem::validate`]) and every block it reads with the CPU's block checks
/// (the device path checks fewer: [`decode_device_fused`]), uploads, launches
/// [`decode_device_fused`] with a fresh workspace, downloads (synchronises). A block the
/// CPU decoder rejects gets its error before any launch.
///
/// # Errors
/// [`FusedError`]s as [`kvcodec_gpu::GpuError::Codec`]; GPU errors.
pub fn decode_fused_to_vec(
    gpu: &GpuContext,
    problem: &GaacDecodeProblem<'_>,
) -> Result<Attention<u16>, kvcodec_gpu::GpuError<FusedError>> {
    use kvcodec_gpu::GpuError;
    let lift = fused::lift::<FusedError>;
    problem.decoded_copy().map_err(GpuError::Codec)?;
    let shape = problem.shape;
    let cache = problem.cache;
    let upload_words = |words: &[u16]| if words.is_empty() { gpu.zeros::<u16>(8) } else { gpu.upload(words) };
    let q = gpu.upload(problem.q)?;
    let slots = if cache.slots.is_empty() { gpu.zeros::<u8>(16)? } else { gpu.upload(cache.slots)? };
    let directory =
        if cache.directory.is_empty() { gpu.zeros::<u32>(4)? } else { gpu.upload(cache.directory)? };
    let raw_bytes: Vec<u8> = cache.raw.iter().flat_map(|w| w.to_le_bytes()).collect();
    let raw = if raw_bytes.is_empty() { gpu.zeros::<u8>(16)? } else { gpu.upload(&raw_bytes)? };
    let bases = gpu.upload(cache.bases)?;
    let partial_k = upload_words(cache.partial.k)?;
    let partial_v = upload_words(cache.partial.v)?;
    let table = gpu.upload(problem.tables.pages)?;
    let lens = gpu.upload(problem.tables.context_lens)?;
    let mut out = gpu.zeros::<u16>(shape.q_values().max(1))?;
    let mut lse = gpu.zeros::<f32>((shape.batch * shape.q_heads).max(1))?;
    let mut workspace = DecodeWorkspace::new(gpu, shape, problem.tables.max_pages).map_err(lift)?;
    let device = DeviceGaacProblem {
        shape,
        q: q.slice(..),
        cache: DeviceGaacPagedKv {
            slots: slots.slice(..cache.slots.len()),
            capacity: cache.capacity,
            directory: directory.slice(..cache.directory.len()),
            raw: raw.slice(..raw_bytes.len()),
            bases: bases.slice(..),
            partial_k: partial_k.slice(..cache.partial.k.len()),
            partial_v: partial_v.slice(..cache.partial.v.len()),
        },
        block_table: table.slice(..),
        max_pages: problem.tables.max_pages,
        context_lens: lens.slice(..),
        scale: problem.scale,
    };
    let n = shape.q_values();
    let h = shape.batch * shape.q_heads;
    decode_device_fused(gpu, &mut workspace, &device, &mut out.slice_mut(..n), &mut lse.slice_mut(..h))
        .map_err(lift)?;
    workspace.check(gpu).map_err(lift)?;
    Ok(Attention { out: gpu.download(&out, n)?, lse: gpu.download(&lse, h)? })
}

/// Bytes of one raw block (spec §3.6: `[16, head_dim]` BF16 words, `2 N`).
pub fn raw_block_bytes(head_dim: usize) -> usize {
    BLOCK_TOKENS * head_dim * 2
}

/// Bytes of a compressed GAAC page of a pooled cache with `raw_blocks` raw blocks: its
/// `2 kv_heads` slots of `capacity` bytes, then the raw blocks (`docs/formats/gaac.md`
/// §10.1; the pool's size class is the smallest of at least this many bytes).
pub fn pooled_page_bytes(shape: DecodeShape, capacity: usize, raw_blocks: usize) -> usize {
    2 * shape.kv_heads * capacity + raw_blocks * raw_block_bytes(shape.head_dim)
}

/// The per-layer parts of a pool-managed GAAC cache besides the pool's arena and page
/// table ([`kvcodec_attention::pooled::PooledKv`]; `docs/formats/gaac.md` §10.1).
#[derive(Clone, Copy, Debug)]
pub struct GaacPoolLayer<'a> {
    /// Bytes per slot: a valid capacity (spec §4) of at most [`max_capacity`].
    pub capacity: usize,
    /// `[page ids, 2, kv_heads]`, one row per word of the page table: for a compressed
    /// page, [`CODED`] or `r + 1` for raw block `r` of the page's own extent (at
    /// `2 kv_heads capacity + r` [`raw_block_bytes`] from its offset), `r < 2 kv_heads`.
    /// Rows of BF16 pages and of ids with no live page are not read.
    pub directory: &'a [u32],
    /// The layer's bases, `[2, kv_heads, head_dim]`, each at most 248.
    pub bases: &'a [u8],
}

/// [`GaacPoolLayer`] on the device.
#[derive(Debug)]
pub struct DeviceGaacPoolLayer<'a> {
    /// Bytes per slot (as [`GaacPoolLayer::capacity`]).
    pub capacity: usize,
    /// `[page ids, 2, kv_heads]` (as [`GaacPoolLayer::directory`]), page ids = the page
    /// table's words.
    pub directory: CudaView<'a, u32>,
    /// `[2, kv_heads, head_dim]` bases, 16-byte aligned.
    pub bases: CudaView<'a, u8>,
}

/// The layer checks of a pooled cache: capacity, bases' length, a directory row per
/// page id of a table of `ids` words.
fn check_pool_layer(
    shape: DecodeShape,
    capacity: usize,
    [directory, ids, bases]: [usize; 3],
) -> Result<BlockShape, FusedError> {
    let block = check_capacity_and_bases(shape, capacity, bases)?;
    if directory != ids * 2 * shape.kv_heads {
        let heads = shape.kv_heads;
        return Err(layout("directory", format!("{directory} entries; needs [{ids} page ids, 2, {heads}]")));
    }
    Ok(block)
}

/// The BF16 copy the twin reads of a pooled GAAC cache ([`PooledProblem::decoded_copy`]):
/// compressed pages' blocks decoded by the CPU decoder ([`block_info`]'s checks) or copied
/// from their raw blocks in the extent, BF16 pages copied.
///
/// # Errors
/// [`FusedError::Problem`] for the problem and its page ids ([`PooledProblem::validate`],
/// a compressed page's slots inside the arena) and, as
/// [`AttentionError::PoolPage`] with [`PoolFault::PastArena`], a compressed page whose raw
/// blocks pass the arena; [`FusedError::Layout`] for the capacity, the bases or the
/// directory (its length, an entry past the page's `2 kv_heads` blocks);
/// [`FusedError::Block`] (`page`: the page id) for a coded block that does not decode.
pub fn pooled_decoded_copy(
    problem: &PooledProblem<'_>,
    layer: &GaacPoolLayer<'_>,
) -> Result<DecodedCopy, FusedError> {
    let shape = problem.shape;
    shape.validate()?;
    let lengths = [layer.directory.len(), problem.cache.table.len(), layer.bases.len()];
    check_pool_layer(shape, layer.capacity, lengths)?;
    check_base_values(layer.bases)?;
    let (blocks, capacity) = (2 * shape.kv_heads, layer.capacity);
    let slots = pooled_page_bytes(shape, capacity, 0);
    let raw_len = raw_block_bytes(shape.head_dim);
    let arena = problem.cache.arena.len() as u64;
    let decoder = LayerDecoder::new(shape, capacity, layer.bases)?;
    problem.decoded_copy(Some(slots), |sequence, logical, page, bytes, k, v| {
        let directory = &layer.directory[page as usize * blocks..][..blocks];
        let last = *directory.iter().max().unwrap_or(&CODED) as usize;
        if last > blocks {
            let why = format!("page id {page}: entry {last} past the page's {blocks} blocks");
            return Err(layout("directory", why));
        }
        let need = pooled_page_bytes(shape, capacity, last);
        if need > bytes.len() {
            let fault =
                PoolFault::PastArena { offset: arena - bytes.len() as u64, bytes: need as u64, arena };
            return Err(AttentionError::PoolPage { sequence, logical, page, fault }.into());
        }
        decoder.decode_page((sequence, logical, page), k, v, |kind, head| {
            let index = kind * shape.kv_heads + head;
            match directory[index] {
                CODED => BlockSource::Slot(&bytes[index * capacity..][..capacity]),
                entry => BlockSource::RawBytes(&bytes[slots + (entry as usize - 1) * raw_len..][..raw_len]),
            }
        })
    })
}

/// Queues the fused decode attention over a pool-managed GAAC cache on `gpu`'s stream
/// without synchronising (`kernels/gaac/attention.cu`, `GaacPoolLoader`): each page id's
/// word in `problem.cache.table` gives its arena offset and format; a compressed page's
/// slots are staged and restored as [`decode_device_fused`] does, its raw blocks read
/// from its own extent, a BF16 page (K rows then V rows) staged as the twin does. `out`
/// and `lse` are bit-identical to [`kvcodec_attention::gpu::decode_device`] on the decoded
/// copy ([`pooled_decoded_copy`]) with a workspace of the same plan.
/// [`DecodeWorkspace::check`] reports `BAD_PAGE` for a page id past the table, a word with
/// no live page, a misaligned offset, a BF16 page or a compressed page's slots past the
/// arena, a compressed page as a sequence's unfilled last page; `BAD_METADATA` for a
/// directory entry past the page's `2 kv_heads` blocks or whose raw block passes the
/// arena, a base above 248, and a block whose tags give a length past its slot (as
/// [`decode_device_fused`]); flagged pages are skipped. Block bodies are checked on the
/// host only ([`decode_pooled_to_vec`]).
///
/// # Errors
/// As [`kvcodec_attention::pooled::decode_device_pooled`]; [`kvcodec_gpu::Error::Buffer`]
/// for a layer [`GaacPoolLayer`] does not allow (capacity, directory or bases length) or
/// misaligned bases.
pub fn decode_device_pooled(
    gpu: &GpuContext,
    workspace: &mut DecodeWorkspace,
    layer: &DeviceGaacPoolLayer<'_>,
    problem: &DevicePooledProblem<'_>,
    out: &mut CudaViewMut<'_, u16>,
    lse: &mut CudaViewMut<'_, f32>,
) -> Result<(), kvcodec_attention::gpu::GpuError> {
    use kvcodec_attention::gpu::GpuError;
    let shape = problem.shape;
    let lengths = [layer.directory.len(), problem.cache.table.len(), layer.bases.len()];
    check_pool_layer(shape, layer.capacity, lengths).map_err(|e| match e {
        FusedError::Problem(e) => GpuError::Codec(e),
        other => GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "GAAC layer", why: other.to_string() }),
    })?;
    check_aligned("bases", device_address(&layer.bases, gpu.stream()))?;
    let Some(mut config) = check_pooled_launch(gpu, workspace, problem, out.len(), lse.len())? else {
        return Ok(());
    };
    let f = gpu.function(FusedKernel { head_dim: shape.head_dim, pooled: true })?;
    let smem = fused_shared_bytes(shape.head_dim);
    f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
        .map_err(kvcodec_gpu::Error::Cuda)?;
    config.shared_mem_bytes = smem as u32;
    let capacity = layer.capacity as u64;
    let args = PooledArgs::new(problem);
    let mut launch = gpu.stream().launch_builder(&f);
    args.push(&mut launch, problem, out, lse, workspace, |launch| {
        launch.arg(&capacity).arg(&layer.directory).arg(&layer.bases);
    });
    // SAFETY: the signature matches GAAC_ATTENTION_POOLED_KERNEL's. The kernel reads q
    // [batch*q_heads*head_dim], the first ceil(len/16) entries of each block-table row,
    // table words of ids below table_len, directory rows of those ids ([table_len, 2,
    // kv_heads] entries: check_pool_layer), the bases [2*kv_heads*head_dim], and in the
    // arena only: BF16 pages whose aligned offset and page bytes lie inside arena_bytes,
    // a compressed page's slots (2*kv_heads*capacity bytes) and the raw blocks its
    // directory entries name, each checked inside arena_bytes per page in the kernel; and
    // context_lens [batch]. It writes out and lse of the shape's sizes and the workspace
    // made for this shape and row length (checked by check_pooled_launch, with the
    // lengths and the alignment of q and the arena); the dynamic shared memory is the
    // twin's plus 4*head_dim bytes, allowed by the attribute just set, and a capacity of
    // at most max_capacity keeps a page's two slots and its addend image within a
    // staging slot.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Fused decode attention over a host pooled GAAC cache on the GPU: checks it and every
/// block it reads on the host ([`pooled_decoded_copy`]), then uploads, launches
/// [`decode_device_pooled`] with a fresh workspace and downloads (synchronises).
///
/// # Errors
/// [`FusedError`]s as [`kvcodec_gpu::GpuError::Codec`]; GPU errors.
pub fn decode_pooled_to_vec(
    gpu: &GpuContext,
    layer: &GaacPoolLayer<'_>,
    problem: &PooledProblem<'_>,
) -> Result<Attention<u16>, kvcodec_gpu::GpuError<FusedError>> {
    use kvcodec_gpu::GpuError;
    pooled_decoded_copy(problem, layer).map_err(GpuError::Codec)?;
    let directory =
        if layer.directory.is_empty() { gpu.zeros::<u32>(4)? } else { gpu.upload(layer.directory)? };
    let bases = gpu.upload(layer.bases)?;
    let device = DeviceGaacPoolLayer {
        capacity: layer.capacity,
        directory: directory.slice(..layer.directory.len()),
        bases: bases.slice(..),
    };
    run_pooled(gpu, problem, |workspace, problem, out, lse| {
        decode_device_pooled(gpu, workspace, &device, problem, out, lse)
    })
    .map_err(fused::lift::<FusedError>)
}

#[cfg(test)]
mod tests {
    use kvcodec_attention::PAGE_TOKENS;
    use kvcodec_attention::pooled::{PooledKv, PooledPage, bf16_page_bytes};

    use super::*;

    const SHAPE: DecodeShape = DecodeShape { batch: 1, q_heads: 2, kv_heads: 2, head_dim: 64 };

    /// Two pages of one sequence (20 tokens): page 0 coded with V head 1 raw, as a slot
    /// cache and as a pooled extent at offset 32 (after 32 bytes of noise), page 1 BF16.
    struct Pages {
        capacity: usize,
        bases: Vec<u8>,
        slots: Vec<u8>,
        directory: Vec<u32>,
        raw: Vec<u16>,
        arena: Vec<u8>,
        words: Vec<u64>,
        pool_directory: Vec<u32>,
        k: Vec<u16>,
        v: Vec<u16>,
    }

    fn pages() -> Pages {
        let (heads, d) = (SHAPE.kv_heads, SHAPE.head_dim);
        let row = heads * d;
        let block = BlockShape::new(d).unwrap();
        let capacity = block.default_capacity();
        let bases = vec![120u8; 2 * heads * d];
        // Values with exponents 120..=127 (coded), V head 1 spread to 2^-40 .. 2^40 (raw).
        let word = |i: usize, wide: bool| {
            let exp = if wide { 87 + (i * 37) % 80 } else { 120 + i % 8 };
            ((exp as u16) << 7) | ((i * 13) & 0x7f) as u16 | ((i as u16 & 1) << 15)
        };
        let k: Vec<u16> = (0..20 * row).map(|i| word(i, false)).collect();
        let v: Vec<u16> = (0..20 * row).map(|i| word(i, i % row >= d)).collect();
        let mut slots = vec![0u8; 2 * heads * capacity];
        let mut directory = vec![CODED; 2 * heads];
        let mut raw = Vec::new();
        for (kind, (rows, kv_kind)) in [(&k, KvKind::K), (&v, KvKind::V)].into_iter().enumerate() {
            for head in 0..heads {
                let words: Vec<u16> = rows[..PAGE_TOKENS * row]
                    .chunks(row)
                    .flat_map(|t| &t[head * d..][..d])
                    .copied()
                    .collect();
                let index = kind * heads + head;
                let slot = &mut slots[index * capacity..][..capacity];
                if encode_block(kv_kind, &words, &bases[index * d..][..d], d, slot).unwrap().is_none() {
                    directory[index] = (raw.len() / block.values()) as u32 + 1;
                    raw.extend_from_slice(&words);
                }
            }
        }
        assert_eq!(directory, [CODED, CODED, CODED, 1], "V head 1 is raw");
        let mut arena = vec![0x5au8; 32];
        arena.extend_from_slice(&slots);
        arena.extend(raw.iter().flat_map(|w| w.to_le_bytes()));
        let bf16_at = arena.len().next_multiple_of(16);
        arena.resize(bf16_at + bf16_page_bytes(SHAPE), 0);
        for (i, w) in k[PAGE_TOKENS * row..].iter().chain(&vec![0; 12 * row]).enumerate() {
            arena[bf16_at + 2 * i..][..2].copy_from_slice(&w.to_le_bytes());
        }
        for (i, w) in v[PAGE_TOKENS * row..].iter().enumerate() {
            arena[bf16_at + 2 * (PAGE_TOKENS * row + i)..][..2].copy_from_slice(&w.to_le_bytes());
        }
        let words = vec![
            INVALID,
            PooledPage::Compressed { offset: 32 }.word(),
            PooledPage::Bf16 { offset: bf16_at as u64 }.word(),
        ];
        let mut pool_directory = vec![u32::MAX; 3 * 2 * heads];
        pool_directory[2 * heads..][..2 * heads].copy_from_slice(&directory);
        Pages { capacity, bases, slots, directory, raw, arena, words, pool_directory, k, v }
    }

    const INVALID: u64 = kvcodec_attention::pooled::INVALID_WORD;

    fn pooled<'a>(p: &'a Pages, pages: &'a [u32], words: &'a [u64]) -> PooledProblem<'a> {
        PooledProblem {
            shape: SHAPE,
            q: &[0; 128],
            cache: PooledKv { arena: &p.arena, table: words },
            tables: BlockTables { pages, max_pages: 2, context_lens: &[20] },
            scale: 0.125,
        }
    }

    #[test]
    fn the_pooled_copy_is_the_slot_copy_and_the_tokens() {
        let p = pages();
        let layer = GaacPoolLayer { capacity: p.capacity, directory: &p.pool_directory, bases: &p.bases };
        let copy = pooled_decoded_copy(&pooled(&p, &[1, 2], &p.words), &layer).unwrap();
        let pv = SHAPE.page_values();
        assert_eq!(copy.pages, [0, 1]);
        assert_eq!(copy.k[..pv + 4 * 128], p.k[..]);
        assert_eq!(copy.v[..pv + 4 * 128], p.v[..]);
        // The slot cache of the same page: the same copy of page 0.
        let empty = PagedKv { k: &[0; 2048], v: &[0; 2048] };
        let slot = GaacDecodeProblem {
            shape: SHAPE,
            q: &[0; 128],
            cache: GaacPagedKv {
                slots: &p.slots,
                capacity: p.capacity,
                directory: &p.directory,
                raw: &p.raw,
                bases: &p.bases,
                partial: empty,
            },
            tables: BlockTables { pages: &[0, 0], max_pages: 2, context_lens: &[16] },
            scale: 0.125,
        };
        let slot_copy = slot.decoded_copy().unwrap();
        assert_eq!(slot_copy.k[..pv], copy.k[..pv]);
        assert_eq!(slot_copy.v[..pv], copy.v[..pv]);
        assert_eq!(pooled_page_bytes(SHAPE, p.capacity, 1), 4 * p.capacity + 2048);
    }

    #[test]
    fn pooled_refusals_are_typed() {
        let p = pages();
        let layer = GaacPoolLayer { capacity: p.capacity, directory: &p.pool_directory, bases: &p.bases };
        let slots = 4 * p.capacity as u64;
        let arena = p.arena.len() as u64;
        let fault = |logical, page, fault| {
            Err(FusedError::Problem(AttentionError::PoolPage { sequence: 0, logical, page, fault }))
        };
        let copy = |words: &[u64], layer: &GaacPoolLayer<'_>| {
            pooled_decoded_copy(&pooled(&p, &[1, 2], words), layer).map(|_| ())
        };
        // A compressed last page, a page with no live page.
        assert_eq!(copy(&[INVALID, p.words[1], p.words[1]], &layer), fault(1, 2, PoolFault::Compressed));
        assert_eq!(copy(&[p.words[1], INVALID, p.words[2]], &layer), fault(0, 1, PoolFault::NotLive));
        // Slots past the arena; the raw block past the arena (slots inside).
        let at = arena / 16 * 16 - 16;
        let word = PooledPage::Compressed { offset: at }.word();
        let past = PoolFault::PastArena { offset: at, bytes: slots, arena };
        assert_eq!(copy(&[INVALID, word, p.words[2]], &layer), fault(0, 1, past));
        let at = (arena - slots) / 16 * 16;
        let word = PooledPage::Compressed { offset: at }.word();
        let past = PoolFault::PastArena { offset: at, bytes: slots + 2048, arena };
        assert_eq!(copy(&[INVALID, word, p.words[2]], &layer), fault(0, 1, past));
        // Directory: an entry past the page's 4 blocks, a short directory.
        let mut directory = p.pool_directory.clone();
        directory[4] = 5;
        let bad = GaacPoolLayer { directory: &directory, ..layer };
        assert!(matches!(copy(&p.words, &bad), Err(FusedError::Layout { what: "directory", .. })));
        let short = GaacPoolLayer { directory: &p.pool_directory[..11], ..layer };
        assert!(matches!(copy(&p.words, &short), Err(FusedError::Layout { what: "directory", .. })));
        // A base above 248, a capacity the kernel does not take.
        let mut bases = p.bases.clone();
        bases[7] = 249;
        let high = GaacPoolLayer { bases: &bases, ..layer };
        assert!(matches!(copy(&p.words, &high), Err(FusedError::Layout { what: "bases", .. })));
        let big = GaacPoolLayer { capacity: max_capacity(64) + 16, ..layer };
        assert!(matches!(copy(&p.words, &big), Err(FusedError::Layout { what: "capacity", .. })));
        // A coded block whose bytes do not decode (its slot's tags overwritten).
        let mut arena = p.arena.clone();
        arena[32..32 + 64].fill(0xff);
        let problem = PooledProblem {
            cache: PooledKv { arena: &arena, table: &p.words },
            ..pooled(&p, &[1, 2], &p.words)
        };
        assert!(matches!(pooled_decoded_copy(&problem, &layer), Err(FusedError::Block { page: 1, .. })));
    }
}
