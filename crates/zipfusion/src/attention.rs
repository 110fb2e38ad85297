//! Fused decode attention over a paged ZipFusion cache (issue 18; the ZipFusion paper's
//! "Attention kernel"): the kernel copies each page's compressed blocks into shared memory
//! and restores every 12-bit block straight into the tensor-core fragments, so BF16 KV is
//! never written to global memory (`kernels/zipfusion/attention.cu`).
//!
//! The kernel body is the BF16 twin's (`kernels/attention/decode.cuh`,
//! [`kvcodec_attention::gpu`]): the same split plan (from the same [`DecodeWorkspace`]),
//! the same page-to-warp assignment, mma sequence and accumulation order; only the staging
//! of a page differs. A cache and its decoded BF16 copy ([`ZfDecodeProblem::decoded_copy`])
//! therefore give bit-identical outputs and log-sum-exps on the GPU.
//!
//! **The cache.** Full pages live compressed, one per fixed slot of `slot_stride` bytes
//! (what [`crate::gpu::encode_pages_device`] writes; a page's bytes are
//! [`crate::encode_page`]'s, spec §5); a sequence's unfilled last page stays BF16, as
//! ZipFusion keeps it, in a pool of BF16 pages (`[pages, 16, kv_heads, head_dim]`, K and V
//! apart, as [`PagedKv`]). Block-table row `b` lists sequence `b`'s pages in token order:
//! slot ids for its full pages and, when its context is not a multiple of 16, a BF16 page
//! id for the last one.
//!
//! **A pool-managed cache** ([`kvcodec_attention::pooled`], issue 19): block tables of
//! page ids read through the pool's page table; a compressed page is this crate's page at
//! its arena offset (packed in its sequence's segment), a BF16 page (open, or kept
//! uncompressed by the pool) is K rows then V rows at its offset, chosen per page by the
//! word's flag ([`decode_device_pooled`], [`decode_pooled_to_vec`]). Same body, same bits.
//!
//! [`decode_cpu`] is the CPU path for small problems (decode the pages, then
//! [`kvcodec_attention::decode_cpu`]); [`decode_device_fused`] queues the fused kernel;
//! [`decode_fused_to_vec`] is the host convenience.

use std::fmt;

use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg, sys};
pub use kvcodec_attention::fused::DecodedCopy;
use kvcodec_attention::fused::{self, check_tables, for_each_read, partial_pages};
use kvcodec_attention::gpu::{DecodeWorkspace, FusedTail, check_launch_limits, shared_bytes};
use kvcodec_attention::pooled::{
    DevicePooledProblem, PooledArgs, PooledProblem, check_pooled_launch, run_pooled,
};
use kvcodec_attention::{Attention, AttentionError, BlockTables, DecodeShape, PagedKv};
use kvcodec_gpu::{GpuContext, Kernel, Module, check_aligned, device_address};

use crate::format::{ALIGN, PageShape, Variant};

/// The fused-attention PTX module.
pub static MODULE: Module = Module::new("zipfusion_attention", include_str!("../ptx/attention.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// One fused kernel per cache variant and head width: the base kernel has no zero-aware
/// restore step and flags zero-aware block bytes as bad metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedKernel {
    /// The cache's variant.
    pub variant: Variant,
    /// 64, 128 or 256 (`decode_device_fused` validates it before naming a kernel; any
    /// other value names the 256 instance).
    pub head_dim: usize,
    /// The kernel over a pool-managed cache ([`decode_device_pooled`]) rather than fixed
    /// slots.
    pub pooled: bool,
}

impl Kernel for FusedKernel {
    fn module(self) -> &'static Module {
        &MODULE
    }
    fn symbol(self) -> &'static str {
        match (self.variant, self.head_dim, self.pooled) {
            (Variant::Base, 64, false) => "zipfusion_attention_base_d64",
            (Variant::Base, 128, false) => "zipfusion_attention_base_d128",
            (Variant::Base, _, false) => "zipfusion_attention_base_d256",
            (Variant::ZeroAware, 64, false) => "zipfusion_attention_zero_aware_d64",
            (Variant::ZeroAware, 128, false) => "zipfusion_attention_zero_aware_d128",
            (Variant::ZeroAware, _, false) => "zipfusion_attention_zero_aware_d256",
            (Variant::Base, 64, true) => "zipfusion_attention_pooled_base_d64",
            (Variant::Base, 128, true) => "zipfusion_attention_pooled_base_d128",
            (Variant::Base, _, true) => "zipfusion_attention_pooled_base_d256",
            (Variant::ZeroAware, 64, true) => "zipfusion_attention_pooled_zero_aware_d64",
            (Variant::ZeroAware, 128, true) => "zipfusion_attention_pooled_zero_aware_d128",
            (Variant::ZeroAware, _, true) => "zipfusion_attention_pooled_zero_aware_d256",
        }
    }
}

/// A paged ZipFusion cache of one layer on the host.
#[derive(Clone, Copy, Debug)]
pub struct ZfPagedKv<'a> {
    /// The cache's variant (pages do not record it).
    pub variant: Variant,
    /// Compressed full pages, page `i` at `i * slot_stride` (its first bytes are the page,
    /// the rest of the slot is ignored).
    pub slots: &'a [u8],
    /// Bytes per slot: a positive multiple of 16.
    pub slot_stride: usize,
    /// BF16 pages of the sequences' unfilled last pages.
    pub partial: PagedKv<'a>,
}

/// One decode step of one layer over a [`ZfPagedKv`] cache; the shapes are
/// [`kvcodec_attention::DecodeProblem`]'s.
#[derive(Clone, Copy, Debug)]
pub struct ZfDecodeProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: &'a [u16],
    /// The cache.
    pub cache: ZfPagedKv<'a>,
    /// Slot ids of full pages, BF16 page ids of partial last pages (module docs).
    pub tables: BlockTables<'a>,
    /// Softmax scale.
    pub scale: f32,
}

/// An error of the fused path on the host.
#[derive(Clone, Debug, PartialEq)]
pub enum FusedError {
    /// The problem's shape, lengths, scale or block tables.
    Problem(AttentionError),
    /// A slot stride that is not a multiple of 16 bytes, or smaller than the smallest page
    /// of the shape (`PageShape::min_page_len`), in bytes.
    SlotStride {
        /// The stride given.
        slot_stride: usize,
    },
    /// A page a sequence reads does not decode ([`crate::page_info`]'s error).
    Page {
        /// The sequence.
        sequence: usize,
        /// Its logical page.
        logical: usize,
        /// The slot (a pooled cache's page id).
        slot: u32,
        /// Why.
        source: crate::Error,
    },
}

impl fmt::Display for FusedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FusedError::Problem(e) => write!(f, "{e}"),
            FusedError::SlotStride { slot_stride } => {
                write!(f, "slot stride of {slot_stride} bytes; needs a positive multiple of 16")
            }
            FusedError::Page { sequence, logical, slot, source } => {
                write!(f, "sequence {sequence}, logical page {logical}: slot {slot}: {source}")
            }
        }
    }
}

impl std::error::Error for FusedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FusedError::Problem(e) => Some(e),
            FusedError::Page { source, .. } => Some(source),
            FusedError::SlotStride { .. } => None,
        }
    }
}

impl From<AttentionError> for FusedError {
    fn from(e: AttentionError) -> Self {
        FusedError::Problem(e)
    }
}

kvcodec_attention::impl_fused_problem!(ZfDecodeProblem);

impl ZfDecodeProblem<'_> {
    /// Slots in the cache.
    pub fn slots(&self) -> usize {
        self.cache.slots.len() / self.cache.slot_stride.max(1)
    }

    fn page_shape(&self) -> Result<PageShape, FusedError> {
        page_shape(self.shape)
    }

    /// Checks the problem as [`kvcodec_attention::DecodeProblem::validate`] does (block-table entries against
    /// the slots, or the BF16 pages for a partial last page) and the slot stride; pages are
    /// checked when decoded.
    ///
    /// # Errors
    /// [`FusedError::Problem`], [`FusedError::SlotStride`].
    pub fn validate(&self) -> Result<(), FusedError> {
        let shape = self.shape;
        let stride = self.cache.slot_stride;
        if stride == 0 || !stride.is_multiple_of(ALIGN) {
            return Err(FusedError::SlotStride { slot_stride: stride });
        }
        // The kernel reads a head's metadata before it checks the page's spans: a slot must
        // hold at least the smallest page of the shape.
        shape.validate()?;
        if stride < self.page_shape()?.min_page_len() {
            return Err(FusedError::SlotStride { slot_stride: stride });
        }
        // Contexts and lengths as the twin checks them; then each entry against its own pool.
        let bf16_pages = check_tables(self, self.cache.partial)?;
        let slots = self.slots();
        for_each_read(self.tables, |sequence, logical, page, partial| {
            let pages = if partial { bf16_pages } else { slots };
            if page as usize >= pages {
                return Err(AttentionError::PageOutOfRange { sequence, logical, page, pages }.into());
            }
            Ok(())
        })
    }

    /// The BF16 copy the twin reads ([`DecodedCopy`]), pages decoded by the CPU decoder.
    ///
    /// # Errors
    /// [`ZfDecodeProblem::validate`]'s; [`FusedError::Page`] for a slot that does not
    /// decode.
    pub fn decoded_copy(&self) -> Result<DecodedCopy, FusedError> {
        self.validate()?;
        let page_shape = self.page_shape()?;
        let stride = self.cache.slot_stride;
        let (variant, slots) = (self.cache.variant, self.cache.slots);
        DecodedCopy::build(self.shape, self.tables, self.cache.partial, |sequence, logical, page, k, v| {
            let bytes = &slots[page as usize * stride..][..stride];
            let page_error = |source| FusedError::Page { sequence, logical, slot: page, source };
            let info = crate::page_info(bytes, page_shape, variant).map_err(page_error)?;
            crate::decode_page_into(&bytes[..info.len], page_shape, variant, k, v).map_err(page_error)
        })
    }
}

/// The CPU path: decodes the pages the sequences read ([`ZfDecodeProblem::decoded_copy`])
/// and runs [`kvcodec_attention::decode_cpu`] on them (FP64 accumulation, BF16 output).
///
/// # Errors
/// As [`ZfDecodeProblem::decoded_copy`].
pub fn decode_cpu(problem: &ZfDecodeProblem<'_>) -> Result<Attention<u16>, FusedError> {
    let copy = problem.decoded_copy()?;
    Ok(kvcodec_attention::decode_cpu(&copy.problem(problem))?)
}

/// A paged ZipFusion cache on the device: [`ZfPagedKv`]'s buffers.
#[derive(Debug)]
pub struct DeviceZfPagedKv<'a> {
    /// The cache's variant.
    pub variant: Variant,
    /// Compressed full pages in fixed slots, 16-byte aligned.
    pub slots: CudaView<'a, u8>,
    /// Bytes per slot: a positive multiple of 16.
    pub slot_stride: usize,
    /// BF16 K pages of partial last pages, `[pages, 16, kv_heads, head_dim]`.
    pub partial_k: CudaView<'a, u16>,
    /// BF16 V pages, as `partial_k`.
    pub partial_v: CudaView<'a, u16>,
}

/// A fused decode problem whose buffers live on the device.
#[derive(Debug)]
pub struct DeviceZfProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: CudaView<'a, u16>,
    /// The cache.
    pub cache: DeviceZfPagedKv<'a>,
    /// `[batch, max_pages]` slot ids, or BF16 page ids for partial last pages.
    pub block_table: CudaView<'a, u32>,
    /// Entries per block-table row.
    pub max_pages: usize,
    /// `[batch]` context lengths in tokens.
    pub context_lens: CudaView<'a, u32>,
    /// Softmax scale.
    pub scale: f32,
}

/// Queues the fused decode attention on `gpu`'s stream without synchronising: `out` gets
/// `[batch, q_heads, head_dim]` BF16 words, `lse` `[batch, q_heads]` natural-log
/// log-sum-exps, bit-identical to [`kvcodec_attention::gpu::decode_device`] on the decoded
/// copy with a workspace of the same plan. Block-table entries, context lengths and the
/// metadata of every page read are checked on the device: [`DecodeWorkspace::check`]
/// reports entries past their pool and pages whose spans would read outside the slot or
/// whose metadata holds a block byte the variant does not allow (those pages are
/// skipped). Not checked on the device: page bodies, the metadata's zero padding and the
/// chain of K offsets (spec §6 rows 5 and 7; such a page is read as its offsets say, within
/// its slot): pages from an untrusted source are checked on the host first
/// ([`crate::page_info`], as [`decode_fused_to_vec`] does). Which pool an entry names (a
/// slot, or a BF16 page for a partial last page) follows from `context_lens`. A workspace
/// serves one launch at a time; its status accumulates until [`DecodeWorkspace::check`].
/// Every buffer 16-byte aligned (fresh allocations are).
///
/// # Errors
/// [`AttentionError`] for a shape or scale; [`kvcodec_gpu::Error::Buffer`] for short or
/// misaligned buffers, a slot stride below the smallest page or not a multiple of 16, a
/// workspace of another shape or row length; [`kvcodec_gpu::Error::Unsupported`] past `u32`
/// counts or 65535 sequences or KV heads; [`kvcodec_gpu::Error::Cuda`].
pub fn decode_device_fused(
    gpu: &GpuContext,
    workspace: &mut DecodeWorkspace,
    problem: &DeviceZfProblem<'_>,
    out: &mut CudaViewMut<'_, u16>,
    lse: &mut CudaViewMut<'_, f32>,
) -> Result<(), kvcodec_attention::gpu::GpuError> {
    use kvcodec_attention::gpu::GpuError;
    let shape = problem.shape;
    workspace.check_problem(shape, problem.max_pages, problem.scale)?;
    let cache = &problem.cache;
    let stride = cache.slot_stride;
    // The kernel reads a head's metadata before it checks the page's spans: a slot must hold
    // at least the smallest page of the shape.
    let min_page = PageShape::new(shape.kv_heads, shape.head_dim).map_or(usize::MAX, |p| p.min_page_len());
    if stride == 0 || !stride.is_multiple_of(ALIGN) || stride < min_page {
        return Err(kvcodec_gpu::Error::Buffer {
            what: "slot_stride",
            why: format!("{stride} bytes; needs a multiple of 16 of at least {min_page} (the smallest page)"),
        }
        .into());
    }
    let bf16_pages =
        partial_pages(shape, cache.partial_k.len(), cache.partial_v.len()).map_err(GpuError::Codec)?;
    let slots = cache.slots.len() / stride;
    check_launch_limits(shape, problem.max_pages, &[("slots", slots), ("BF16 pages", bf16_pages)])?;
    let lengths =
        [problem.q.len(), problem.block_table.len(), problem.context_lens.len(), out.len(), lse.len()];
    kvcodec_attention::gpu::check_launch_lengths(shape, problem.max_pages, lengths)?;
    let stream = gpu.stream();
    for (what, address) in [
        ("q", device_address(&problem.q, stream)),
        ("slots", device_address(&cache.slots, stream)),
        ("partial_k", device_address(&cache.partial_k, stream)),
        ("partial_v", device_address(&cache.partial_v, stream)),
    ] {
        check_aligned(what, address)?;
    }
    if shape.batch == 0 {
        return Ok(());
    }
    let f = gpu.function(FusedKernel { variant: cache.variant, head_dim: shape.head_dim, pooled: false })?;
    let smem = shared_bytes(shape.head_dim);
    f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
        .map_err(kvcodec_gpu::Error::Cuda)?;
    let config = workspace.launch_config(smem as u32);
    let (slot_stride, num_slots, num_bf16) = (stride as u64, slots as u32, bf16_pages as u32);
    let tail = FusedTail::new(shape, problem.max_pages, problem.scale);
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&problem.q)
        .arg(&cache.slots)
        .arg(&slot_stride)
        .arg(&num_slots)
        .arg(&cache.partial_k)
        .arg(&cache.partial_v)
        .arg(&num_bf16);
    tail.push(&mut launch, &problem.block_table, &problem.context_lens, out, lse, workspace);
    // SAFETY: the signature matches ZF_ATTENTION_KERNEL's. The kernel reads q
    // [batch*q_heads*head_dim], the first ceil(len/16) entries of each block-table row,
    // slots below num_slots (num_slots * slot_stride bytes, checked in the kernel, and
    // within each slot only the head's metadata and a span its metadata places inside the
    // slot, also checked), BF16 pages below num_bf16 of partial_k and partial_v, and
    // context_lens [batch]; it writes out and lse of the shape's sizes and the workspace
    // made for this shape and row length. Lengths and alignment are checked above; the
    // dynamic shared memory is the twin's, allowed by the attribute just set.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Fused decode attention of a host problem on the GPU: checks it
/// ([`ZfDecodeProblem::validate`]) and every page it reads with the CPU's page checks
/// (the device path checks fewer: [`decode_device_fused`]), uploads, launches
/// [`decode_device_fused`] with a fresh workspace, downloads (synchronises). A page the CPU
/// decoder rejects gets its error before any launch.
///
/// # Errors
/// [`FusedError`]s as [`kvcodec_gpu::GpuError::Codec`]; GPU errors.
pub fn decode_fused_to_vec(
    gpu: &GpuContext,
    problem: &ZfDecodeProblem<'_>,
) -> Result<Attention<u16>, kvcodec_gpu::GpuError<FusedError>> {
    use kvcodec_gpu::GpuError;
    let lift = fused::lift::<FusedError>;
    problem.validate().map_err(GpuError::Codec)?;
    // The device checks a page's spans and block bytes, not its padding or the chain of K
    // offsets (spec §6 rows 5 and 7): the CPU's checks of every page read come first.
    problem.decoded_copy().map_err(GpuError::Codec)?;
    let shape = problem.shape;
    let upload = |words: &[u16]| if words.is_empty() { gpu.zeros::<u16>(8) } else { gpu.upload(words) };
    let q = gpu.upload(problem.q)?;
    let slots =
        if problem.cache.slots.is_empty() { gpu.zeros::<u8>(16)? } else { gpu.upload(problem.cache.slots)? };
    let partial_k = upload(problem.cache.partial.k)?;
    let partial_v = upload(problem.cache.partial.v)?;
    let table = gpu.upload(problem.tables.pages)?;
    let lens = gpu.upload(problem.tables.context_lens)?;
    let mut out = gpu.zeros::<u16>(shape.q_values().max(1))?;
    let mut lse = gpu.zeros::<f32>((shape.batch * shape.q_heads).max(1))?;
    let mut workspace = DecodeWorkspace::new(gpu, shape, problem.tables.max_pages).map_err(lift)?;
    let (slot_bytes, partial_words) = (problem.cache.slots.len(), problem.cache.partial.k.len());
    let device = DeviceZfProblem {
        shape,
        q: q.slice(..),
        cache: DeviceZfPagedKv {
            variant: problem.cache.variant,
            slots: slots.slice(..slot_bytes),
            slot_stride: problem.cache.slot_stride,
            partial_k: partial_k.slice(..partial_words),
            partial_v: partial_v.slice(..partial_words),
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
    if let Err(e) = workspace.check(gpu) {
        // A flagged page: the CPU decoder's error on the same bytes, if it has one.
        problem.decoded_copy().map_err(GpuError::Codec)?;
        return Err(lift(e));
    }
    Ok(Attention { out: gpu.download(&out, n)?, lse: gpu.download(&lse, h)? })
}

/// The ZipFusion page shape of a decode shape, after the shape's own checks.
fn page_shape(shape: DecodeShape) -> Result<PageShape, FusedError> {
    shape.validate()?;
    PageShape::new(shape.kv_heads, shape.head_dim).map_err(|source| FusedError::Page {
        sequence: 0,
        logical: 0,
        slot: 0,
        source,
    })
}

/// The BF16 copy the twin reads of a pooled cache ([`PooledProblem::decoded_copy`]):
/// compressed pages decoded by the CPU decoder (its checks: [`crate::page_info`], from
/// the page's offset to the arena's end), BF16 pages copied.
///
/// # Errors
/// [`FusedError::Problem`] for the problem and its page ids
/// ([`PooledProblem::validate`]); [`FusedError::Page`] (`slot`: the page id) for a
/// compressed page that does not decode.
pub fn pooled_decoded_copy(problem: &PooledProblem<'_>, variant: Variant) -> Result<DecodedCopy, FusedError> {
    let page_shape = page_shape(problem.shape)?;
    // A compressed page must hold at least the smallest page of the shape (its metadata
    // and every block coded) inside the arena.
    problem.decoded_copy(Some(page_shape.min_page_len()), |sequence, logical, page, bytes, k, v| {
        let page_error = |source| FusedError::Page { sequence, logical, slot: page, source };
        let info = crate::page_info(bytes, page_shape, variant).map_err(page_error)?;
        crate::decode_page_into(&bytes[..info.len], page_shape, variant, k, v).map_err(page_error)
    })
}

/// Queues the fused decode attention over a pool-managed cache on `gpu`'s stream without
/// synchronising (`kernels/zipfusion/attention.cu`, `ZfPoolLoader`): each page id's word
/// in `problem.cache.table` gives its arena offset and format; a compressed page is read
/// as [`decode_device_fused`] reads a slot (its span bounded by the largest page of the
/// shape and the arena's end), a BF16 page (K rows then V rows) as the twin reads its
/// pages. `out` and `lse` are bit-identical to [`kvcodec_attention::gpu::decode_device`]
/// on the decoded copy ([`pooled_decoded_copy`]) with a workspace of the same plan.
/// [`DecodeWorkspace::check`] reports `BAD_PAGE` for a page id past the table, a word
/// with no live page, a misaligned offset, a BF16 page past the arena, a compressed page
/// that starts past the arena's end or serves as a sequence's unfilled last page, and
/// `BAD_METADATA` as [`decode_device_fused`] does, including a compressed page that
/// starts inside the arena but whose metadata or blocks run past its end (the host's
/// [`kvcodec_attention::pooled`] validation calls both cases `PastArena`); those pages
/// are skipped. Page bodies are not checked on the device (as
/// [`decode_device_fused`]).
///
/// # Errors
/// As [`kvcodec_attention::pooled::decode_device_pooled`].
pub fn decode_device_pooled(
    gpu: &GpuContext,
    workspace: &mut DecodeWorkspace,
    variant: Variant,
    problem: &DevicePooledProblem<'_>,
    out: &mut CudaViewMut<'_, u16>,
    lse: &mut CudaViewMut<'_, f32>,
) -> Result<(), kvcodec_attention::gpu::GpuError> {
    let Some(config) = check_pooled_launch(gpu, workspace, problem, out.len(), lse.len())? else {
        return Ok(());
    };
    let shape = problem.shape;
    let max_page = PageShape::new(shape.kv_heads, shape.head_dim)
        .map_err(|e| kvcodec_gpu::Error::Unsupported { what: "page shape", why: e.to_string() })?
        .max_page_len() as u64;
    let f = gpu.function(FusedKernel { variant, head_dim: shape.head_dim, pooled: true })?;
    f.set_attribute(
        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        shared_bytes(shape.head_dim) as i32,
    )
    .map_err(kvcodec_gpu::Error::Cuda)?;
    let args = PooledArgs::new(problem);
    let mut launch = gpu.stream().launch_builder(&f);
    args.push(&mut launch, problem, out, lse, workspace, |launch| {
        launch.arg(&max_page);
    });
    // SAFETY: the signature matches ZF_ATTENTION_POOLED_KERNEL's. The kernel reads q
    // [batch*q_heads*head_dim], the first ceil(len/16) entries of each block-table row,
    // table words of ids below table_len, and in the arena only: BF16 pages whose aligned
    // offset and page bytes lie inside arena_bytes, a compressed page's head metadata and
    // the span its metadata places within min(max_page, arena_bytes - offset) (checked
    // per page in the kernel), and context_lens [batch]; it writes out and lse of the
    // shape's sizes and the workspace made for this shape and row length (checked by
    // check_pooled_launch, with the lengths and alignment); the dynamic shared memory is
    // the twin's, allowed by the attribute just set.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Fused decode attention over a host pooled problem on the GPU: checks it
/// ([`PooledProblem::validate`], compressed pages at least the smallest page) and every
/// compressed page it reads with the CPU's page checks ([`pooled_decoded_copy`]), then
/// uploads, launches [`decode_device_pooled`] with a fresh workspace and downloads
/// (synchronises).
///
/// # Errors
/// [`FusedError`]s as [`kvcodec_gpu::GpuError::Codec`]; GPU errors.
pub fn decode_pooled_to_vec(
    gpu: &GpuContext,
    variant: Variant,
    problem: &PooledProblem<'_>,
) -> Result<Attention<u16>, kvcodec_gpu::GpuError<FusedError>> {
    use kvcodec_gpu::GpuError;
    pooled_decoded_copy(problem, variant).map_err(GpuError::Codec)?;
    run_pooled(gpu, problem, |workspace, device, out, lse| {
        decode_device_pooled(gpu, workspace, variant, device, out, lse)
    })
    .map_err(fused::lift::<FusedError>)
}
