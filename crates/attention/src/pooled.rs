//! Decode attention over a pool-managed cache (issue 19; the ZipFusion seed's "Memory
//! management": "a lookup table maps the unchanged page ID to its current location"): the
//! block tables list **page ids**, and the kernels read each id's word in the pool's page
//! table to find the page in one arena (`kvcodec_pool::gpu::DevicePool`'s arena and table;
//! layout in `docs/formats/attention.md`, "Pooled addressing").
//!
//! * **The page table**: one `u64` per page id, `offset << 1 | compressed`
//!   (`kvcodec_pool::PageEntry::device_word`): the page's byte offset from the arena's
//!   start (a multiple of [`ALIGN`]) and bit 0 ([`COMPRESSED_BIT`]) set when the page is
//!   compressed; [`INVALID_WORD`] (all ones) for an id with no live page.
//! * **A BF16 page** (an open page, or a full page the pool kept uncompressed) is what the
//!   pool's open slot holds and what ZipFusion's page encoder reads: its K rows
//!   `[PAGE_TOKENS, kv_heads, head_dim]`, then its V rows, BF16 little-endian words:
//!   [`bf16_page_bytes`] bytes, the pool's open size class.
//! * **A compressed page** is a codec's page at its offset (ZipFusion: `zipfusion::encode_page`'s
//!   bytes, packed in its sequence's segment); only codec kernels read it
//!   (`zipfusion::attention::decode_device_pooled`). The BF16 twin here reads BF16 pages
//!   only.
//!
//! The kernels prefetch the words of 32 pages at a time (with the block-table entries, in
//! the twin's body, `kernels/attention/decode.cuh`), so a page load never waits on the two
//! dependent reads. A word that is all ones, an id past the table, a misaligned offset, a
//! page past the arena or a compressed page where a BF16 one is read is flagged
//! (`BAD_PAGE` in [`crate::gpu::STATUS`]) and the page skipped, never read; on the host
//! [`PooledProblem::validate`] gives the same refusals as [`AttentionError::PoolPage`].

use std::collections::HashMap;

use cudarc::driver::{CudaView, CudaViewMut, LaunchArgs, PushKernelArg};
use kvcodec_gpu::{GpuContext, check_aligned, device_address};

use crate::fused::{DecodedCopy, check_tables, for_each_read};
use crate::gpu::{
    DecodeWorkspace, FusedTail, GpuError, check_launch_lengths, check_launch_limits, shared_bytes,
};
use crate::{Attention, AttentionError, BlockTables, DecodeShape, PagedKv, PoolFault};

/// The page table word of an id with no live page (`kvcodec_pool::INVALID_WORD`).
pub const INVALID_WORD: u64 = u64::MAX;
/// Bit 0 of a page table word: set when the page is compressed.
pub const COMPRESSED_BIT: u64 = 1;
/// Every page starts at a multiple of this many bytes from the arena's start
/// (`kvcodec_pool::SLOT_ALIGN`): the kernels load pages with 16-byte vector loads.
pub const ALIGN: u64 = 16;

/// Where a page table word puts a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PooledPage {
    /// A BF16 page ([`bf16_page_bytes`] bytes: K rows, then V rows) at this arena offset.
    Bf16 {
        /// Bytes from the arena's start.
        offset: u64,
    },
    /// A codec's compressed page at this arena offset.
    Compressed {
        /// Bytes from the arena's start.
        offset: u64,
    },
}

impl PooledPage {
    /// The page a word names, `None` for [`INVALID_WORD`].
    pub fn from_word(word: u64) -> Option<PooledPage> {
        let offset = word >> 1;
        match (word == INVALID_WORD, word & COMPRESSED_BIT != 0) {
            (true, _) => None,
            (false, true) => Some(PooledPage::Compressed { offset }),
            (false, false) => Some(PooledPage::Bf16 { offset }),
        }
    }

    /// The page's word: `offset << 1 | compressed` (the offset below 2^63).
    pub fn word(self) -> u64 {
        match self {
            PooledPage::Bf16 { offset } => offset << 1,
            PooledPage::Compressed { offset } => (offset << 1) | COMPRESSED_BIT,
        }
    }

    /// The page's arena offset in bytes.
    pub fn offset(self) -> u64 {
        match self {
            PooledPage::Bf16 { offset } | PooledPage::Compressed { offset } => offset,
        }
    }
}

/// Bytes of one BF16 page of `shape` in the arena: K and V, `2 * PAGE_TOKENS * kv_heads *
/// head_dim` BF16 words (the pool's open size class).
pub fn bf16_page_bytes(shape: DecodeShape) -> usize {
    2 * shape.page_values() * 2
}

/// A pool-managed cache of one layer on the host: the arena and the page table.
#[derive(Clone, Copy, Debug)]
pub struct PooledKv<'a> {
    /// The arena's bytes.
    pub arena: &'a [u8],
    /// One word per page id (module docs).
    pub table: &'a [u64],
}

impl PooledKv<'_> {
    /// Resolves page id `page` of `shape`: its word must name a live page at an aligned
    /// offset whose bytes lie in the arena: a BF16 page's [`bf16_page_bytes`], a
    /// compressed page's first `compressed_min` bytes (a codec's smallest page). With
    /// `compressed_min` `None`, compressed pages are refused.
    ///
    /// # Errors
    /// The [`PoolFault`].
    pub fn resolve(
        &self,
        shape: DecodeShape,
        page: u32,
        compressed_min: Option<usize>,
    ) -> Result<PooledPage, PoolFault> {
        let word = *self.table.get(page as usize).ok_or(PoolFault::IdPastTable { ids: self.table.len() })?;
        let found = PooledPage::from_word(word).ok_or(PoolFault::NotLive)?;
        let offset = found.offset();
        if !offset.is_multiple_of(ALIGN) {
            return Err(PoolFault::Misaligned { offset });
        }
        let bytes = match found {
            PooledPage::Bf16 { .. } => bf16_page_bytes(shape),
            PooledPage::Compressed { .. } => compressed_min.ok_or(PoolFault::Compressed)?,
        } as u64;
        let arena = self.arena.len() as u64;
        if offset > arena || bytes > arena - offset {
            return Err(PoolFault::PastArena { offset, bytes, arena });
        }
        Ok(found)
    }
}

/// One decode step of one layer over a [`PooledKv`] cache; the shapes are
/// [`crate::DecodeProblem`]'s, the block-table entries are page ids.
#[derive(Clone, Copy, Debug)]
pub struct PooledProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: &'a [u16],
    /// The cache.
    pub cache: PooledKv<'a>,
    /// Page ids of each sequence's pages in token order.
    pub tables: BlockTables<'a>,
    /// Softmax scale.
    pub scale: f32,
}

crate::impl_fused_problem!(PooledProblem);

impl PooledProblem<'_> {
    /// Checks the problem as [`crate::DecodeProblem::validate`] does (shape, query, scale,
    /// contexts, table lengths) and every page id a sequence reads
    /// ([`PooledKv::resolve`]; a sequence's unfilled last page must be BF16).
    ///
    /// # Errors
    /// [`AttentionError`]s; [`AttentionError::PoolPage`] for the first page id, in
    /// storage order, that cannot be read.
    pub fn validate(&self, compressed_min: Option<usize>) -> Result<(), AttentionError> {
        self.read_pages(compressed_min).map(|_| ())
    }

    /// The pages the sequences read, in storage order: `(sequence, logical, page id,
    /// page)`, after [`PooledProblem::validate`]'s checks.
    ///
    /// # Errors
    /// As [`PooledProblem::validate`].
    pub fn read_pages(
        &self,
        compressed_min: Option<usize>,
    ) -> Result<Vec<(usize, usize, u32, PooledPage)>, AttentionError> {
        check_tables(self, PagedKv { k: &[], v: &[] })?;
        let mut pages = Vec::new();
        for_each_read(self.tables, |sequence, logical, page, partial| {
            let allowed = if partial { None } else { compressed_min };
            let found = self
                .cache
                .resolve(self.shape, page, allowed)
                .map_err(|fault| AttentionError::PoolPage { sequence, logical, page, fault })?;
            pages.push((sequence, logical, page, found));
            Ok(())
        })?;
        Ok(pages)
    }

    /// The BF16 copy the twin reads ([`DecodedCopy`]): each page id read becomes one BF16
    /// page (in order of first use), BF16 pages copied from the arena, compressed ones
    /// written by `decode(sequence, logical, page id, arena bytes from its offset, k, v)`
    /// (one page of values each); the block tables renumbered.
    ///
    /// # Errors
    /// [`PooledProblem::validate`]'s; the first error `decode` returns.
    pub fn decoded_copy<E: From<AttentionError>>(
        &self,
        compressed_min: Option<usize>,
        mut decode: impl FnMut(usize, usize, u32, &[u8], &mut [u16], &mut [u16]) -> Result<(), E>,
    ) -> Result<DecodedCopy, E> {
        let reads = self.read_pages(compressed_min)?;
        let page_values = self.shape.page_values();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let mut pages = self.tables.pages.to_vec();
        let mut copies: HashMap<u32, u32> = HashMap::new();
        for (sequence, logical, id, found) in reads {
            let at = sequence * self.tables.max_pages + logical;
            if let Some(&copy) = copies.get(&id) {
                pages[at] = copy;
                continue;
            }
            let copy = copies.len() as u32;
            k.resize(k.len() + page_values, 0);
            v.resize(v.len() + page_values, 0);
            let from = copy as usize * page_values;
            let bytes = &self.cache.arena[found.offset() as usize..];
            match found {
                PooledPage::Bf16 { .. } => {
                    let words = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
                    let (kw, vw) = (&mut k[from..], &mut v[from..]);
                    for (i, w) in words.take(2 * page_values).enumerate() {
                        if i < page_values { kw[i] = w } else { vw[i - page_values] = w }
                    }
                }
                PooledPage::Compressed { .. } => {
                    decode(sequence, logical, id, bytes, &mut k[from..], &mut v[from..])?;
                }
            }
            copies.insert(id, copy);
            pages[at] = copy;
        }
        Ok(DecodedCopy { k, v, pages })
    }
}

/// A pool-managed cache on the device: `kvcodec_pool::gpu::DevicePool`'s arena and table.
#[derive(Debug)]
pub struct DevicePooledKv<'a> {
    /// The arena, 16-byte aligned.
    pub arena: CudaView<'a, u8>,
    /// One word per page id.
    pub table: CudaView<'a, u64>,
}

/// A pooled decode problem whose buffers live on the device.
#[derive(Debug)]
pub struct DevicePooledProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: CudaView<'a, u16>,
    /// The cache.
    pub cache: DevicePooledKv<'a>,
    /// `[batch, max_pages]` page ids.
    pub block_table: CudaView<'a, u32>,
    /// Entries per block-table row.
    pub max_pages: usize,
    /// `[batch]` context lengths in tokens.
    pub context_lens: CudaView<'a, u32>,
    /// Softmax scale, finite and positive.
    pub scale: f32,
}

/// What a pooled launch passes besides its kernel's own parameters, after the checks every
/// pooled launcher shares: the workspace's shape, row length and scale, launch limits
/// (page ids within `u32`), buffer lengths, 16-byte alignment of `q` and the arena
/// (pooled addressing: docs/formats/attention.md; the ZipFusion paper, "Memory management").
/// Returns `None` for an empty batch (nothing to launch), else the launch configuration
/// (grid = splits x KV heads x batch, the twin's block and shared memory).
///
/// # Errors
/// As [`decode_device_pooled`].
pub fn check_pooled_launch(
    gpu: &GpuContext,
    workspace: &DecodeWorkspace,
    problem: &DevicePooledProblem<'_>,
    out_len: usize,
    lse_len: usize,
) -> Result<Option<cudarc::driver::LaunchConfig>, GpuError> {
    let shape = problem.shape;
    workspace.check_problem(shape, problem.max_pages, problem.scale)?;
    check_launch_limits(shape, problem.max_pages, &[("page ids", problem.cache.table.len())])?;
    let lengths = [problem.q.len(), problem.block_table.len(), problem.context_lens.len(), out_len, lse_len];
    check_launch_lengths(shape, problem.max_pages, lengths)?;
    let stream = gpu.stream();
    check_aligned("q", device_address(&problem.q, stream))?;
    check_aligned("arena", device_address(&problem.cache.arena, stream))?;
    if shape.batch == 0 {
        return Ok(None);
    }
    Ok(Some(workspace.launch_config(shared_bytes(shape.head_dim) as u32)))
}

/// The scalar arguments every pooled decode kernel takes, held so that a launch can borrow
/// them: the arena's length in bytes, the table's length in page ids, the block-table row
/// length, KV heads, the GQA group and the softmax scale times log2(e).
#[derive(Clone, Copy, Debug)]
pub struct PooledArgs {
    arena_bytes: u64,
    table_len: u32,
    tail: FusedTail,
}

impl PooledArgs {
    /// The scalars of `problem` (checked by [`check_pooled_launch`] first).
    pub fn new(problem: &DevicePooledProblem<'_>) -> PooledArgs {
        PooledArgs {
            arena_bytes: problem.cache.arena.len() as u64,
            table_len: problem.cache.table.len() as u32,
            tail: FusedTail::new(problem.shape, problem.max_pages, problem.scale),
        }
    }

    /// Pushes a pooled kernel's arguments in the order every pooled kernel declares them
    /// (`kernels/attention/pooled.cuh` and the codecs' pooled loaders): q, arena, arena
    /// bytes, table, table length; then what `own` pushes, the kernel's own parameters;
    /// then the block table, context lengths, out, lse, the workspace's partials, tickets
    /// and status, block-table row length, KV heads, group and scale.
    pub fn push<'a>(
        &'a self,
        launch: &mut LaunchArgs<'a>,
        problem: &'a DevicePooledProblem<'_>,
        out: &'a mut CudaViewMut<'_, u16>,
        lse: &'a mut CudaViewMut<'_, f32>,
        workspace: &'a mut DecodeWorkspace,
        own: impl FnOnce(&mut LaunchArgs<'a>),
    ) {
        launch
            .arg(&problem.q)
            .arg(&problem.cache.arena)
            .arg(&self.arena_bytes)
            .arg(&problem.cache.table)
            .arg(&self.table_len);
        own(launch);
        self.tail.push(launch, &problem.block_table, &problem.context_lens, out, lse, workspace);
    }
}

/// Queues the BF16 twin over a pool-managed cache whose pages are all BF16 on `gpu`'s
/// stream without synchronising: `out` gets `[batch, q_heads, head_dim]` BF16 words,
/// `lse` `[batch, q_heads]` natural-log log-sum-exps, bit-identical to
/// [`crate::gpu::decode_device`] over the same pages in a `[pages, 16, kv_heads,
/// head_dim]` cache with a workspace of the same plan. Page ids, words and context
/// lengths are checked on the device: [`DecodeWorkspace::check`] reports `BAD_PAGE` for a
/// page it could not read (module docs; compressed pages included) and skips it.
///
/// # Errors
/// [`AttentionError`] for a shape or scale; [`kvcodec_gpu::Error::Buffer`] for short or
/// misaligned buffers or a workspace of another shape or row length;
/// [`kvcodec_gpu::Error::Unsupported`] past `u32` page ids, 65535 sequences or KV heads,
/// or the GPU's shared memory; [`kvcodec_gpu::Error::Cuda`].
pub fn decode_device_pooled(
    gpu: &GpuContext,
    workspace: &mut DecodeWorkspace,
    problem: &DevicePooledProblem<'_>,
    out: &mut CudaViewMut<'_, u16>,
    lse: &mut CudaViewMut<'_, f32>,
) -> Result<(), GpuError> {
    let Some(config) = check_pooled_launch(gpu, workspace, problem, out.len(), lse.len())? else {
        return Ok(());
    };
    let shape = problem.shape;
    let f = crate::gpu::kernel_function(gpu, shape.head_dim, true)?;
    let args = PooledArgs::new(problem);
    let mut launch = gpu.stream().launch_builder(&f);
    args.push(&mut launch, problem, out, lse, workspace, |_| {});
    // SAFETY: the signature matches KV_ATTENTION_DECODE_BF16_POOLED's. The kernel reads q
    // [batch*q_heads*head_dim], the first ceil(len/16) entries of each block-table row,
    // table words of ids below table_len, and only BF16 pages whose aligned offset and
    // bf16_page_bytes lie inside arena_bytes (checked in the kernel per page), and
    // context_lens [batch]; it writes out and lse of the shape's sizes and the workspace
    // made for this shape and row length. Lengths and alignment are checked above; the
    // dynamic shared memory is the twin's, allowed by kernel_function.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Uploads a host pooled problem (arena, table, block tables, lengths, query), runs
/// `launch` with a fresh workspace and downloads out and lse (synchronises); a status
/// flag raised by the launch is [`DecodeWorkspace::check`]'s error. The problem is not
/// checked here: callers validate first.
///
/// # Errors
/// GPU errors, `launch`'s, the status.
pub fn run_pooled(
    gpu: &GpuContext,
    problem: &PooledProblem<'_>,
    launch: impl FnOnce(
        &mut DecodeWorkspace,
        &DevicePooledProblem<'_>,
        &mut CudaViewMut<'_, u16>,
        &mut CudaViewMut<'_, f32>,
    ) -> Result<(), GpuError>,
) -> Result<Attention<u16>, GpuError> {
    let shape = problem.shape;
    let q = gpu.upload(problem.q)?;
    let arena =
        if problem.cache.arena.is_empty() { gpu.zeros::<u8>(16)? } else { gpu.upload(problem.cache.arena)? };
    let table =
        if problem.cache.table.is_empty() { gpu.zeros::<u64>(1)? } else { gpu.upload(problem.cache.table)? };
    let block_table = gpu.upload(problem.tables.pages)?;
    let lens = gpu.upload(problem.tables.context_lens)?;
    let mut out = gpu.zeros::<u16>(shape.q_values().max(1))?;
    let mut lse = gpu.zeros::<f32>((shape.batch * shape.q_heads).max(1))?;
    let mut workspace = DecodeWorkspace::new(gpu, shape, problem.tables.max_pages)?;
    let device = DevicePooledProblem {
        shape,
        q: q.slice(..),
        cache: DevicePooledKv {
            arena: arena.slice(..problem.cache.arena.len()),
            table: table.slice(..problem.cache.table.len()),
        },
        block_table: block_table.slice(..),
        max_pages: problem.tables.max_pages,
        context_lens: lens.slice(..),
        scale: problem.scale,
    };
    let (n, h) = (shape.q_values(), shape.batch * shape.q_heads);
    launch(&mut workspace, &device, &mut out.slice_mut(..n), &mut lse.slice_mut(..h))?;
    workspace.check(gpu)?;
    Ok(Attention { out: gpu.download(&out, n)?, lse: gpu.download(&lse, h)? })
}

/// The twin over a host pooled problem on the GPU: [`PooledProblem::validate`] (every page
/// read BF16), then [`decode_device_pooled`] through [`run_pooled`].
///
/// # Errors
/// [`PooledProblem::validate`]'s as [`GpuError::Codec`]; GPU errors.
pub fn decode_pooled_to_vec(
    gpu: &GpuContext,
    problem: &PooledProblem<'_>,
) -> Result<Attention<u16>, GpuError> {
    problem.validate(None).map_err(GpuError::Codec)?;
    run_pooled(gpu, problem, |workspace, device, out, lse| {
        decode_device_pooled(gpu, workspace, device, out, lse)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: DecodeShape = DecodeShape { batch: 2, q_heads: 2, kv_heads: 1, head_dim: 64 };

    /// Two BF16 pages (page id 0 at 0, id 2 at one page's bytes), id 1 compressed at
    /// 2 pages' bytes, id 3 not live.
    fn table() -> (Vec<u8>, Vec<u64>) {
        let page = bf16_page_bytes(SHAPE) as u64;
        let arena: Vec<u8> = (0..3 * page + 64).map(|i| (i % 251) as u8).collect();
        let words = vec![
            PooledPage::Bf16 { offset: 0 }.word(),
            PooledPage::Compressed { offset: 2 * page }.word(),
            PooledPage::Bf16 { offset: page }.word(),
            INVALID_WORD,
        ];
        (arena, words)
    }

    #[test]
    fn words_round_trip_and_all_ones_is_no_page() {
        for page in [PooledPage::Bf16 { offset: 4096 }, PooledPage::Compressed { offset: 16 }] {
            assert_eq!(PooledPage::from_word(page.word()), Some(page));
        }
        assert_eq!(PooledPage::from_word(INVALID_WORD), None);
        assert_eq!(PooledPage::from_word(0x20), Some(PooledPage::Bf16 { offset: 0x10 }));
        assert_eq!(bf16_page_bytes(SHAPE), 2 * 16 * 64 * 2);
    }

    #[test]
    fn resolve_refuses_every_unreadable_word() {
        let (arena, mut words) = table();
        let page = bf16_page_bytes(SHAPE) as u64;
        let arena_len = arena.len() as u64;
        words.extend([
            PooledPage::Bf16 { offset: 8 }.word(),
            PooledPage::Bf16 { offset: 3 * page }.word(),
            PooledPage::Compressed { offset: arena_len - 32 }.word(),
            PooledPage::Bf16 { offset: (u64::MAX >> 1) & !15 }.word(),
        ]);
        let kv = PooledKv { arena: &arena, table: &words };
        assert_eq!(kv.resolve(SHAPE, 0, None), Ok(PooledPage::Bf16 { offset: 0 }));
        assert_eq!(kv.resolve(SHAPE, 1, Some(64)), Ok(PooledPage::Compressed { offset: 2 * page }));
        assert_eq!(kv.resolve(SHAPE, 1, None), Err(PoolFault::Compressed));
        assert_eq!(kv.resolve(SHAPE, 3, None), Err(PoolFault::NotLive));
        assert_eq!(kv.resolve(SHAPE, 8, None), Err(PoolFault::IdPastTable { ids: 8 }));
        assert_eq!(kv.resolve(SHAPE, 4, None), Err(PoolFault::Misaligned { offset: 8 }));
        let past = |offset, bytes| Err(PoolFault::PastArena { offset, bytes, arena: arena_len });
        assert_eq!(kv.resolve(SHAPE, 5, None), past(3 * page, page));
        assert_eq!(kv.resolve(SHAPE, 6, Some(64)), past(arena_len - 32, 64));
        assert_eq!(kv.resolve(SHAPE, 7, None), past((u64::MAX >> 1) & !15, page));
    }

    #[test]
    fn validate_names_the_first_bad_read_and_keeps_partial_pages_bf16() {
        let (arena, words) = table();
        let q = vec![0u16; SHAPE.q_values()];
        let problem = |pages: &'static [u32], lens: &'static [u32]| PooledProblem {
            shape: SHAPE,
            q: &q,
            cache: PooledKv { arena: &arena, table: &words },
            tables: BlockTables { pages, max_pages: 2, context_lens: lens },
            scale: 0.125,
        };
        assert_eq!(problem(&[0, 1, 2, 0], &[32, 20]).validate(Some(64)), Ok(()));
        // Sequence 0's last page is partial (20 tokens): a compressed page there is refused.
        let partial = problem(&[0, 1, 2, 0], &[20, 20]).validate(Some(64));
        let fault = PoolFault::Compressed;
        assert_eq!(partial, Err(AttentionError::PoolPage { sequence: 0, logical: 1, page: 1, fault }));
        // Entries past a context are not read.
        assert_eq!(problem(&[0, 3, 2, 9], &[16, 16]).validate(None), Ok(()));
        let dead = problem(&[0, 3, 2, 9], &[32, 16]).validate(None);
        assert_eq!(
            dead,
            Err(AttentionError::PoolPage { sequence: 0, logical: 1, page: 3, fault: PoolFault::NotLive })
        );
    }

    #[test]
    fn the_decoded_copy_splits_bf16_pages_and_decodes_compressed_ones_once() {
        let (arena, words) = table();
        let q = vec![0u16; SHAPE.q_values()];
        let problem = PooledProblem {
            shape: SHAPE,
            q: &q,
            cache: PooledKv { arena: &arena, table: &words },
            tables: BlockTables { pages: &[2, 1, 1, 0], max_pages: 2, context_lens: &[32, 17] },
            scale: 0.125,
        };
        let mut decoded = Vec::new();
        let copy = problem
            .decoded_copy(Some(64), |sequence, logical, id, bytes, k: &mut [u16], v: &mut [u16]| {
                decoded.push((sequence, logical, id, bytes.len()));
                k[0] = 7;
                v[0] = 9;
                Ok::<_, AttentionError>(())
            })
            .unwrap();
        let page = bf16_page_bytes(SHAPE);
        assert_eq!(decoded, vec![(0, 1, 1, arena.len() - 2 * page)]);
        assert_eq!(copy.pages, vec![0, 1, 1, 2]);
        let pv = SHAPE.page_values();
        let word = |at: usize| u16::from_le_bytes([arena[at], arena[at + 1]]);
        // Copy 0 is page id 2 (at one page's bytes): K then V.
        assert_eq!(copy.k[3], word(page + 6));
        assert_eq!(copy.v[3], word(page + 2 * pv + 6));
        assert_eq!((copy.k[pv], copy.v[pv]), (7, 9));
        assert_eq!(copy.k[2 * pv + 1], word(2));
    }
}
