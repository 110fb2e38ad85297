//! The GPU BF16 twin (`kernels/attention/decode.cu`): decode attention over BF16 pages on
//! the tensor cores, split over the context so that batch 1 fills the GPU, the splits
//! combined in the same launch. The fused kernels over GAAC and ZipFusion pages share its
//! accumulation order, so that a compressed cache and its decoded copy give identical
//! outputs (issue 18; design notes in docs/formats/attention.md).
//!
//! [`decode_device`] queues one launch on the context's stream and does not synchronise, so
//! it can be captured in a CUDA graph: the workspace's tickets return to zero at the end of
//! every launch. [`decode_to_vec`] is the host convenience: it checks the problem, uploads,
//! runs and downloads.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchArgs, LaunchConfig, PushKernelArg, sys};
use kvcodec_gpu::{
    DeviceStatus, GpuContext, Kernel, Module, StatusCodes, StatusEncoding, StatusValue, check_len,
    launch_config,
};

use crate::{Attention, AttentionError, DecodeProblem, DecodeShape, MAX_GROUP, PAGE_TOKENS};

/// An error of the GPU path: the problem's own [`AttentionError`] or a GPU error.
pub type GpuError = kvcodec_gpu::GpuError<AttentionError>;

/// The attention PTX module.
pub static MODULE: Module = Module::new("attention", include_str!("../ptx/decode.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// The kernels of [`MODULE`]: one instance of the BF16 twin per head width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernel {
    /// BF16 pages, head_dim 64.
    DecodeBf16D64,
    /// BF16 pages, head_dim 128.
    DecodeBf16D128,
    /// BF16 pages, head_dim 256.
    DecodeBf16D256,
    /// BF16 pages of a pool-managed cache ([`crate::pooled`]), head_dim 64.
    DecodeBf16PooledD64,
    /// As [`AttentionKernel::DecodeBf16PooledD64`], head_dim 128.
    DecodeBf16PooledD128,
    /// As [`AttentionKernel::DecodeBf16PooledD64`], head_dim 256.
    DecodeBf16PooledD256,
}

impl Kernel for AttentionKernel {
    fn module(self) -> &'static Module {
        &MODULE
    }
    fn symbol(self) -> &'static str {
        match self {
            AttentionKernel::DecodeBf16D64 => "attention_decode_bf16_d64",
            AttentionKernel::DecodeBf16D128 => "attention_decode_bf16_d128",
            AttentionKernel::DecodeBf16D256 => "attention_decode_bf16_d256",
            AttentionKernel::DecodeBf16PooledD64 => "attention_decode_bf16_pooled_d64",
            AttentionKernel::DecodeBf16PooledD128 => "attention_decode_bf16_pooled_d128",
            AttentionKernel::DecodeBf16PooledD256 => "attention_decode_bf16_pooled_d256",
        }
    }
}

/// Warps per CTA at head_dim 64 and 128: each takes every `WARPS`-th page of the CTA's
/// split. Four keep each warp's two staged pages (8 or 16 KiB) small enough for 5 and 3
/// CTAs per SM on the H200 (docs/perf/attention.md, v6-v7).
pub const WARPS: usize = 4;

/// Warps per CTA at head_dim 256. Each warp stages two 16 KiB pages, so one CTA of 7 fills
/// an SM's shared memory (224 KiB of the 227 KiB a CTA may take on sm_90) where 4 left the
/// fused kernels' restore unhidden with one warp per scheduler; docs/perf/attention.md,
/// "v10". GPUs with less shared memory per CTA (sm_80: 163 KiB) cannot run head_dim 256:
/// [`DecodeWorkspace::new`] and the launches say so with
/// [`kvcodec_gpu::Error::Unsupported`].
pub const WARPS_D256: usize = 7;

/// Warps per CTA of the decode kernels at `head_dim`, one of [`crate::HEAD_DIMS`]
/// ([`WARPS`], or [`WARPS_D256`] at 256): the launches' block size is `warps(head_dim) *
/// 32` threads. The kernels' `warps<D>()` (kernels/attention/decode.cuh) is the same rule,
/// from the constants `cargo xtask kernels` generates.
pub fn warps(head_dim: usize) -> usize {
    if head_dim == 256 { WARPS_D256 } else { WARPS }
}

/// The most splits per (sequence, KV head): the CTA that combines them reads every
/// split's state, so their count bounds the combine's time (on the H200, Gemma-3's one KV
/// head at batch 1 ran 14-27% slower over 128-131 splits than over 64: docs/perf/attention.md, v5).
/// A multiple of 32: at head_dim 64 each lane of the combine loads the max and sum of
/// `MAX_SPLITS / 32` splits.
pub const MAX_SPLITS: usize = 64;

/// The fewest pages of a sequence a split reads, so that its partial state (about
/// `MAX_GROUP * head_dim` floats) stays a few percent of the bytes it reads. The kernel
/// splits each sequence's own pages: `max(MIN_PAGES_PER_SPLIT, ceil(pages / splits))` per
/// split, later splits empty, so a block-table row wider than its context costs nothing.
pub const MIN_PAGES_PER_SPLIT: usize = 16;

/// With units fewer than half the SMs: the share of the GPU's CTA slots a split plan fills
/// at least, where the context allows (fewer CTAs leave too few warps per SM).
const MIN_SLOT_FILL: f64 = 0.6;

/// With more units: the share of the last wave's CTA slots that must be busy for a split
/// count to be taken without looking further.
const GOOD_WAVE_FILL: f64 = 0.9;

/// What the kernels leave in their status word: flags for block-table entries that would
/// read outside the cache (checked on the device, for problems whose tables live there).
pub const STATUS: StatusCodes = StatusCodes {
    encoding: StatusEncoding::Flags,
    values: &[
        StatusValue {
            value: 1,
            name: "BAD_CONTEXT",
            meaning: "a context length of 0 or longer than its block-table row",
        },
        StatusValue {
            value: 2,
            name: "BAD_PAGE",
            meaning: "a block-table entry past the cache's pages, or a pooled page id whose page-table word names no \
                      readable page",
        },
        StatusValue {
            value: 4,
            name: "BAD_METADATA",
            meaning: "a compressed page whose metadata would read outside its slot or holds a block byte its \
                      format does not allow (fused kernels)",
        },
    ],
};

/// Page slots per warp: the page being computed and the next one in flight.
pub const STAGES: usize = 2;

/// Shared memory of one CTA, in bytes: each warp's [`STAGES`] staged K and V pages
/// ([`staged_page_bytes`]), reused for the combine of the warps, the split's ticket word
/// and, at head_dim 64, the splits' combine (the kernels check at compile time that they
/// fit the staging).
/// `head_dim` is one of [`crate::HEAD_DIMS`].
pub fn shared_bytes(head_dim: usize) -> usize {
    let staging = warps(head_dim) * STAGES * staged_page_bytes(head_dim);
    let combine = warps(head_dim) * MAX_GROUP * (head_dim + 2) * 4 + 4;
    staging.max(combine)
}

/// Bytes of one staged page in shared memory: its K and V rows of `head_dim` BF16 values,
/// unpadded (each row's 16-byte chunks swizzled by the row against bank conflicts, so that
/// every 32-byte sector of a row stays in one aligned 32-byte block: docs/formats/attention.md).
/// A fused kernel's loader stages a compressed page in the same room.
pub fn staged_page_bytes(head_dim: usize) -> usize {
    2 * PAGE_TOKENS * head_dim * 2
}

/// How the context is split: `splits` CTAs per (sequence, KV head), each over
/// `pages_per_split` consecutive pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// CTAs per (sequence, KV head).
    pub splits: usize,
    /// Pages each CTA reads when a context fills its block-table row (the last may read
    /// fewer); the kernel splits each shorter context on its own
    /// ([`MIN_PAGES_PER_SPLIT`]).
    pub pages_per_split: usize,
}

impl SplitPlan {
    /// The split count for `batch * kv_heads` units over at most `max_pages` pages on a GPU
    /// of `multiprocessors` SMs holding `ctas_per_sm` CTAs each (the slots); at most
    /// [`MAX_SPLITS`], at least [`MIN_PAGES_PER_SPLIT`] pages per split.
    ///
    /// - Units fewer than half the SMs (batch 1, and small batches of few KV heads): each
    ///   CTA is long and every SM holds few, so the busiest SM sets the step's time. Every
    ///   CTA reads the same pages and an SM's CTAs share its bandwidth: the busiest SM holds
    ///   `ceil(units * splits / SMs) / splits` of a unit. The plan takes the count that
    ///   minimises it (the most splits on a tie: more warps in flight), among the counts
    ///   that keep every CTA in one wave of the slots and fill at least 60% of them where
    ///   the context allows. On the H200 this takes 33 splits for Llama-3-8B's 8 KV heads at
    ///   batch 1 (2 CTAs on every SM; 45 put 3 on some SMs and 2 on others and ran 8-10%
    ///   slower) and 64 for one KV head (docs/perf/attention.md, v5).
    /// - More units: the fewest splits whose waves keep at least 90% of the slots busy (else
    ///   the count that keeps the most busy), so that each SM holds all the CTAs it can:
    ///   with the busiest-SM rule (1 split, 65% of the slots) ZipFusion's fused kernel ran
    ///   4-17% slower at Llama-3-8B batch 32 than with this rule's 3 (v5).
    pub fn new(shape: &DecodeShape, max_pages: usize, multiprocessors: usize, ctas_per_sm: usize) -> Self {
        let units = (shape.batch * shape.kv_heads).max(1);
        let sms = multiprocessors.max(1);
        let slots = sms * ctas_per_sm.max(1);
        let pages = max_pages.max(1);
        let most = (pages / MIN_PAGES_PER_SPLIT).clamp(1, MAX_SPLITS);
        let wanted = if 2 * units < sms {
            let one_wave = (slots / units).clamp(1, most);
            let fill = ((MIN_SLOT_FILL * slots as f64 / units as f64).ceil() as usize).clamp(1, one_wave);
            // The busiest SM's share, ceil(units * s / SMs) / s, compared as exact
            // fractions (a/s <= b/t <=> a*t <= b*s).
            let busiest = |s: usize| (units * s).div_ceil(sms);
            (fill..=one_wave)
                .reduce(|best, s| if busiest(s) * best <= busiest(best) * s { s } else { best })
                .unwrap_or(1)
        } else {
            let fill = |splits: usize| {
                let ctas = units * splits;
                ctas as f64 / (ctas.div_ceil(slots) * slots) as f64
            };
            (1..=most)
                .find(|&s| fill(s) >= GOOD_WAVE_FILL)
                .unwrap_or_else(|| (1..=most).rev().max_by(|&a, &b| fill(a).total_cmp(&fill(b))).unwrap_or(1))
        };
        let pages_per_split = pages.div_ceil(wanted);
        SplitPlan { splits: pages.div_ceil(pages_per_split), pages_per_split }
    }
}

/// Device scratch of a decode launch: each split's partial state and a ticket per
/// (sequence, KV head). Reusable across launches of the same shape and plan.
pub struct DecodeWorkspace {
    shape: DecodeShape,
    max_pages: usize,
    plan: SplitPlan,
    partial: CudaSlice<f32>,
    tickets: CudaSlice<u32>,
    status: DeviceStatus,
}

impl std::fmt::Debug for DecodeWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeWorkspace")
            .field("shape", &self.shape)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl DecodeWorkspace {
    /// Scratch for `shape` with block-table rows of `max_pages` entries, split by
    /// [`SplitPlan::new`] for `gpu`'s device and the kernel's occupancy: `batch * kv_heads *
    /// splits * MAX_GROUP * (head_dim + 2)` floats and `batch * kv_heads` tickets.
    ///
    /// # Errors
    /// [`AttentionError`] for a bad shape; [`kvcodec_gpu::Error::Unsupported`] when one CTA
    /// of the kernel does not fit the GPU's shared memory (head_dim 256 needs 229,376 bytes:
    /// sm_90-class GPUs, not sm_80 or sm_8x); [`kvcodec_gpu::Error::Cuda`] on allocation or
    /// the occupancy query.
    pub fn new(gpu: &GpuContext, shape: DecodeShape, max_pages: usize) -> Result<Self, GpuError> {
        shape.validate().map_err(GpuError::Codec)?;
        let f = kernel_function(gpu, shape.head_dim, false)?;
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(
                (warps(shape.head_dim) * 32) as u32,
                shared_bytes(shape.head_dim),
                None,
            )
            .map_err(kvcodec_gpu::Error::Cuda)?;
        if per_sm == 0 {
            return Err(kvcodec_gpu::Error::Unsupported {
                what: "head_dim",
                why: format!("{} does not fit one CTA on an SM of this GPU", shape.head_dim),
            }
            .into());
        }
        let plan = SplitPlan::new(&shape, max_pages, gpu.multiprocessors() as usize, per_sm as usize);
        let units = shape.batch * shape.kv_heads;
        let partial = gpu.zeros(units * plan.splits * MAX_GROUP * (shape.head_dim + 2))?;
        let tickets = gpu.zeros(units.max(1))?;
        let status = DeviceStatus::new(gpu)?;
        Ok(DecodeWorkspace { shape, max_pages, plan, partial, tickets, status })
    }

    /// The host checks every decode launch over this workspace makes, whatever its pages
    /// hold: the shape, the scale, and a workspace made for this shape and row length.
    ///
    /// # Errors
    /// [`AttentionError`] for the shape or scale; [`kvcodec_gpu::Error::Buffer`] for a
    /// workspace of another shape or row length.
    pub fn check_problem(&self, shape: DecodeShape, max_pages: usize, scale: f32) -> Result<(), GpuError> {
        shape.validate().map_err(GpuError::Codec)?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(GpuError::Codec(AttentionError::Scale { scale }));
        }
        if self.shape != shape || self.max_pages != max_pages {
            return Err(kvcodec_gpu::Error::Buffer {
                what: "workspace",
                why: format!(
                    "made for {:?} with {} pages per row, not this problem",
                    self.shape, self.max_pages
                ),
            }
            .into());
        }
        Ok(())
    }

    /// The launch configuration of a decode kernel over this workspace (the twin, a fused
    /// or a pooled kernel, all sharing kernels/attention/decode.cuh) with `shared_mem_bytes`
    /// of dynamic shared memory: grid `(splits, kv_heads, batch)`, `warps(head_dim) * 32`
    /// threads per CTA.
    pub fn launch_config(&self, shared_mem_bytes: u32) -> LaunchConfig {
        let mut config = launch_config(1, (warps(self.shape.head_dim) * 32) as u32, shared_mem_bytes);
        config.grid_dim = (self.plan.splits as u32, self.shape.kv_heads as u32, self.shape.batch as u32);
        config
    }

    /// The split plan launches use.
    pub fn plan(&self) -> SplitPlan {
        self.plan
    }

    /// The shape the workspace was made for.
    pub fn shape(&self) -> DecodeShape {
        self.shape
    }

    /// The block-table row length the workspace was made for, in entries.
    pub fn max_pages(&self) -> usize {
        self.max_pages
    }

    /// The device buffers a launch of a kernel that shares the twin's body (`kernels/
    /// attention/decode.cuh`, such as a codec's fused kernel) writes, in its parameter
    /// order: each split's partial state (`batch * kv_heads * splits * MAX_GROUP *
    /// (head_dim + 2)` floats), a ticket per (sequence, KV head), and the status word
    /// ([`STATUS`] flags).
    pub fn launch_buffers(&mut self) -> (&mut CudaSlice<f32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>) {
        (&mut self.partial, &mut self.tickets, self.status.word())
    }

    /// Reads the status word the launches since the last check left (synchronises) and
    /// clears it.
    ///
    /// # Errors
    /// [`GpuError::Disagreement`] naming the flags when a launch met a context length or
    /// block-table entry outside the cache; [`kvcodec_gpu::Error::Cuda`].
    pub fn check(&mut self, gpu: &GpuContext) -> Result<(), GpuError> {
        let status = self.status.read(gpu)?;
        self.status.clear(gpu)?;
        if status == 0 {
            Ok(())
        } else {
            Err(GpuError::Disagreement { status, meaning: STATUS.describe(status) })
        }
    }
}

/// Checks the lengths of a launch's buffers other than the pages, in elements:
/// `[q, block_table, context_lens, out, lse]` against `[batch * q_heads * head_dim,
/// batch * max_pages, batch, batch * q_heads * head_dim, batch * q_heads]`.
///
/// # Errors
/// [`kvcodec_gpu::Error::Buffer`] naming the first short buffer.
pub fn check_launch_lengths(
    shape: DecodeShape,
    max_pages: usize,
    lengths: [usize; 5],
) -> Result<(), GpuError> {
    let [q, block_table, context_lens, out, lse] = lengths;
    check_len("q", q, shape.q_values(), "BF16 values")?;
    check_len("block_table", block_table, shape.batch * max_pages, "entries")?;
    check_len("context_lens", context_lens, shape.batch, "entries")?;
    check_len("out", out, shape.q_values(), "BF16 values")?;
    check_len("lse", lse, shape.batch * shape.q_heads, "floats")?;
    Ok(())
}

/// Checks what a launch's grid and 32-bit indices can address: every page pool's count
/// (`(name, count)`) at most `u32::MAX`, batch and KV heads at most 65535 (grid
/// dimensions), and `max_pages` tokens' worth of a block-table row within `u32`.
///
/// # Errors
/// [`kvcodec_gpu::Error::Unsupported`] naming the sizes.
pub fn check_launch_limits(
    shape: DecodeShape,
    max_pages: usize,
    pools: &[(&str, usize)],
) -> Result<(), GpuError> {
    let pools_fit = pools.iter().all(|&(_, count)| count <= u32::MAX as usize);
    if pools_fit
        && shape.batch <= u16::MAX as usize
        && shape.kv_heads <= u16::MAX as usize
        && max_pages <= u32::MAX as usize / PAGE_TOKENS
    {
        return Ok(());
    }
    let pools: Vec<String> = pools.iter().map(|(name, count)| format!("{count} {name}")).collect();
    Err(kvcodec_gpu::Error::Unsupported {
        what: "problem size",
        why: format!(
            "{}, batch {}, {} KV heads, {max_pages} pages per row",
            pools.join(", "),
            shape.batch,
            shape.kv_heads
        ),
    }
    .into())
}

/// The twin's function for `head_dim` (one of [`crate::HEAD_DIMS`], validated before),
/// slot-indexed or `pooled` ([`crate::pooled`]), allowed the dynamic shared memory it
/// launches with.
pub(crate) fn kernel_function(
    gpu: &GpuContext,
    head_dim: usize,
    pooled: bool,
) -> Result<cudarc::driver::CudaFunction, GpuError> {
    let kernel = match (head_dim, pooled) {
        (64, false) => AttentionKernel::DecodeBf16D64,
        (128, false) => AttentionKernel::DecodeBf16D128,
        (256, false) => AttentionKernel::DecodeBf16D256,
        (64, true) => AttentionKernel::DecodeBf16PooledD64,
        (128, true) => AttentionKernel::DecodeBf16PooledD128,
        (256, true) => AttentionKernel::DecodeBf16PooledD256,
        _ => return Err(GpuError::Codec(AttentionError::HeadDim { head_dim })),
    };
    let f = gpu.function(kernel)?;
    let bytes = shared_bytes(head_dim);
    // A GPU with less opt-in shared memory per CTA than the 224 KiB of the head_dim 256
    // instance (sm_80 allows 163 KiB, sm_86 and sm_89 99 KiB) cannot run it: say so rather
    // than fail at the launch.
    f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
        .map_err(|e| kvcodec_gpu::Error::Unsupported {
            what: "head_dim",
            why: format!(
                "{head_dim} needs {bytes} bytes of shared memory per CTA, more than this GPU allows ({e})"
            ),
        })?;
    Ok(f)
}

/// The arguments that close the parameter list of every fused kernel built on the twin's
/// body (`kernels/attention/decode.cuh`: ZipFusion's and GAAC's, slot-indexed and pooled),
/// after the kernel's own cache parameters; the scalars are held here so that a launch can
/// borrow them.
#[derive(Clone, Copy, Debug)]
pub struct FusedTail {
    max_pages: u32,
    kv_heads: u32,
    group: u32,
    scale_log2: f32,
}

impl FusedTail {
    /// The scalars of a launch of `shape` over block-table rows of `max_pages` entries
    /// with softmax scale `scale` (the launcher checked them: `max_pages` within `u32`).
    pub fn new(shape: DecodeShape, max_pages: usize, scale: f32) -> FusedTail {
        FusedTail {
            max_pages: max_pages as u32,
            kv_heads: shape.kv_heads as u32,
            group: shape.group() as u32,
            scale_log2: scale * std::f32::consts::LOG2_E,
        }
    }

    /// Pushes, in the order the fused kernels declare them: the block table
    /// (`[batch, max_pages]` page ids), the context lengths (`[batch]` tokens), `out`, `lse`,
    /// the workspace's partials, tickets and status ([`DecodeWorkspace::launch_buffers`]),
    /// then the block-table row length, KV heads, GQA group and scale times log2(e).
    pub fn push<'a>(
        &'a self,
        launch: &mut LaunchArgs<'a>,
        block_table: &'a CudaView<'_, u32>,
        context_lens: &'a CudaView<'_, u32>,
        out: &'a mut CudaViewMut<'_, u16>,
        lse: &'a mut CudaViewMut<'_, f32>,
        workspace: &'a mut DecodeWorkspace,
    ) {
        let (partial, tickets, status) = workspace.launch_buffers();
        launch
            .arg(block_table)
            .arg(context_lens)
            .arg(out)
            .arg(lse)
            .arg(partial)
            .arg(tickets)
            .arg(status)
            .arg(&self.max_pages)
            .arg(&self.kv_heads)
            .arg(&self.group)
            .arg(&self.scale_log2);
    }
}

/// A decode problem whose buffers live on the device; the shapes are [`DecodeProblem`]'s.
#[derive(Debug)]
pub struct DeviceProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: CudaView<'a, u16>,
    /// K pages, `[pages, PAGE_TOKENS, kv_heads, head_dim]` BF16 words.
    pub k: CudaView<'a, u16>,
    /// V pages, as `k`.
    pub v: CudaView<'a, u16>,
    /// `[batch, max_pages]` physical page ids.
    pub block_table: CudaView<'a, u32>,
    /// Entries per block-table row.
    pub max_pages: usize,
    /// `[batch]` context lengths in tokens, each in `1..=max_pages * PAGE_TOKENS`; others
    /// are flagged in the status ([`DecodeWorkspace::check`]) and their output is garbage.
    pub context_lens: CudaView<'a, u32>,
    /// Softmax scale, finite and positive (checked on the host).
    pub scale: f32,
}

/// Queues decode attention on `gpu`'s stream without synchronising: `out` gets
/// `[batch, q_heads, head_dim]` BF16 words, `lse` `[batch, q_heads]` natural-log
/// log-sum-exps. Block-table entries and context lengths are checked on the device:
/// [`DecodeWorkspace::check`] reports any that would have read outside the cache (those
/// reads are skipped). Every buffer 16-byte aligned (fresh allocations are).
///
/// A workspace serves one launch at a time (its tickets and partial state): launches that
/// share one must be ordered on one stream.
///
/// # Errors
/// [`AttentionError`] for a shape, length or scale the host can check;
/// [`kvcodec_gpu::Error::Buffer`] for short or misaligned buffers, a workspace of another
/// shape or plan; [`kvcodec_gpu::Error::Unsupported`] past the grid's limits (more than
/// 65535 sequences or KV heads, more than `u32::MAX` pages) or the GPU's shared memory
/// (head_dim 256 needs 229,376 bytes per CTA: sm_90-class GPUs, not sm_80 or sm_8x);
/// [`kvcodec_gpu::Error::Cuda`] on a launch failure.
pub fn decode_device(
    gpu: &GpuContext,
    workspace: &mut DecodeWorkspace,
    problem: &DeviceProblem<'_>,
    out: &mut CudaViewMut<'_, u16>,
    lse: &mut CudaViewMut<'_, f32>,
) -> Result<(), GpuError> {
    let shape = problem.shape;
    workspace.check_problem(shape, problem.max_pages, problem.scale)?;
    let page_values = shape.page_values();
    if !problem.k.len().is_multiple_of(page_values) || problem.v.len() != problem.k.len() {
        return Err(GpuError::Codec(AttentionError::Length {
            what: "k/v pages",
            got: problem.v.len(),
            expected: problem.k.len() / page_values * page_values,
            unit: "BF16 values (whole pages, k and v alike)",
        }));
    }
    let pages = problem.k.len() / page_values;
    check_launch_limits(shape, problem.max_pages, &[("pages", pages)])?;
    let lengths =
        [problem.q.len(), problem.block_table.len(), problem.context_lens.len(), out.len(), lse.len()];
    check_launch_lengths(shape, problem.max_pages, lengths)?;
    let stream = gpu.stream();
    for (what, address) in [
        ("q", kvcodec_gpu::device_address(&problem.q, stream)),
        ("k", kvcodec_gpu::device_address(&problem.k, stream)),
        ("v", kvcodec_gpu::device_address(&problem.v, stream)),
    ] {
        kvcodec_gpu::check_aligned(what, address)?;
    }
    if shape.batch == 0 {
        return Ok(());
    }
    let f = kernel_function(gpu, shape.head_dim, false)?;
    let smem = shared_bytes(shape.head_dim) as u32;
    let config = workspace.launch_config(smem);
    let (num_pages, max_pages) = (pages as u32, problem.max_pages as u32);
    let (kv_heads, group) = (shape.kv_heads as u32, shape.group() as u32);
    let scale_log2 = problem.scale * std::f32::consts::LOG2_E;
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&problem.q)
        .arg(&problem.k)
        .arg(&problem.v)
        .arg(&problem.block_table)
        .arg(&problem.context_lens)
        .arg(out)
        .arg(lse)
        .arg(&mut workspace.partial)
        .arg(&mut workspace.tickets)
        .arg(workspace.status.word())
        .arg(&num_pages)
        .arg(&max_pages)
        .arg(&kv_heads)
        .arg(&group)
        .arg(&scale_log2);
    // SAFETY: the kernel reads q [batch*q_heads*head_dim], the first ceil(len/16) entries of
    // each block-table row, pages below num_pages (checked in the kernel) of k and v, and
    // context_lens [batch]; it writes out and lse of the shape's sizes, and the workspace
    // made for this shape and plan (partial: units*splits*MAX_GROUP*(head_dim+2) floats,
    // tickets: units). Lengths and alignment are checked above; the dynamic shared memory
    // is sized by shared_bytes for this head_dim and allowed by the attribute just set.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Decode attention of a host problem on the GPU: checks it as [`crate::reference`] does,
/// uploads, launches [`decode_device`], downloads (synchronises).
///
/// # Errors
/// [`DecodeProblem::validate`]'s as [`GpuError::Codec`]; GPU errors.
pub fn decode_to_vec(gpu: &GpuContext, problem: &DecodeProblem<'_>) -> Result<Attention<u16>, GpuError> {
    problem.validate().map_err(GpuError::Codec)?;
    let shape = problem.shape;
    let q = gpu.upload(problem.q)?;
    let k = gpu.upload(problem.kv.k)?;
    let v = gpu.upload(problem.kv.v)?;
    let table = gpu.upload(problem.tables.pages)?;
    let lens = gpu.upload(problem.tables.context_lens)?;
    let mut out = gpu.zeros::<u16>(shape.q_values().max(1))?;
    let mut lse = gpu.zeros::<f32>((shape.batch * shape.q_heads).max(1))?;
    let mut workspace = DecodeWorkspace::new(gpu, shape, problem.tables.max_pages)?;
    let device = DeviceProblem {
        shape,
        q: q.slice(..),
        k: k.slice(..),
        v: v.slice(..),
        block_table: table.slice(..),
        max_pages: problem.tables.max_pages,
        context_lens: lens.slice(..),
        scale: problem.scale,
    };
    let n = shape.q_values();
    let h = shape.batch * shape.q_heads;
    decode_device(gpu, &mut workspace, &device, &mut out.slice_mut(..n), &mut lse.slice_mut(..h))?;
    workspace.check(gpu)?;
    Ok(Attention { out: gpu.download(&out, n)?, lse: gpu.download(&lse, h)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_limits_refuse_what_the_grid_or_u32_indices_cannot_address() {
        let shape = DecodeShape { batch: 2, q_heads: 8, kv_heads: 2, head_dim: 128 };
        let max_row = u32::MAX as usize / PAGE_TOKENS;
        assert!(check_launch_limits(shape, max_row, &[("pages", u32::MAX as usize)]).is_ok());
        assert!(check_launch_limits(shape, max_row + 1, &[]).is_err());
        assert!(check_launch_limits(shape, 4, &[("pages", 1), ("slots", u32::MAX as usize + 1)]).is_err());
        for wide in [DecodeShape { batch: 1 << 16, ..shape }, DecodeShape { kv_heads: 1 << 16, ..shape }] {
            assert!(check_launch_limits(wide, 4, &[]).is_err());
        }
    }
}
