//! `cargo xtask simulate`: a discrete-event decode server at an equal KV memory budget,
//! with `kvcodec-pool` as its allocator (issue 19; seed 002, "Memory management" and
//! "Results": 8K prompts + 256 generated tokens, batch 46 -> 57 at equal memory).
//!
//! * Model shape Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128, 16-token pages of
//!   64 KiB in BF16. Step time: weight bytes over the H200's measured copy bandwidth,
//!   plus 32 times one layer's decode attention at the batch and its mean context
//!   (bench-attention JSON: the BF16 twin for BF16, each codec's fused kernel for its
//!   pages), plus the device work of compressing and moving pages at
//!   ZipFusion's measured GPU encode rate. Prefill is not timed (as in the seed).
//! * Page sizes from real KV: the SmolLM2 fixtures encoded by the CPU encoders, their
//!   blocks mapped to the Llama page shape (see [`PageSizes`]).
//! * The scheduler admits requests in arrival order while [`Pool::admissible_pages`]
//!   covers a request's whole length in BF16 pages, reserves them, prefills (every full
//!   prompt page compressed as written) and decodes one token per running request per
//!   step; the device is one step behind the host ([`Pool::complete`] of step n - 1 at
//!   the start of step n).
//! * `--reserve compressed`: a request reserves its prompt in BF16 pages and its output
//!   at the codec's measured mean page ratio; a page that cannot be had preempts the
//!   youngest request (vLLM's recompute: released, queued again first, its generated
//!   tokens lost and not counted in tokens/s).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bf16_field::KvKind;
use kvcodec_pool::{CompressOutcome, Epoch, Move, PageId, Pool, PoolConfig, SizeClasses};

/// Llama-3.1-8B: layers, KV heads, head_dim.
const LAYERS: u32 = 32;
const KV_HEADS: usize = 8;
const HEAD_DIM: usize = 128;
/// Tokens per page (ZipFusion's and GAAC's blocks are 16 tokens).
const PAGE_TOKENS: u64 = 16;
/// One BF16 page: 16 tokens x 8 heads x 128 x {K,V} x 2 bytes.
const PAGE_BYTES: u32 = (PAGE_TOKENS as usize * KV_HEADS * HEAD_DIM * 2 * 2) as u32;
/// ZipFusion's size classes are this many bytes apart (rounding loss under 1%).
const ZF_CLASS_STEP: u32 = 512;
/// The decode steps a run takes and the first step of its measured window.
const STEPS: u64 = 2048;
const WARMUP: u64 = 512;
/// The batch at which the allocator's own CPU cost is measured (the target).
const TIMED_BATCH: usize = 64;

/// The default `--bench` and `--attention` JSONs (a GPU bundle carries them).
pub(crate) const DEFAULT_BENCH: &str = "docs/bench/2026-12-01-h200-merged-main-3-code.json";
pub(crate) const DEFAULT_ATTENTION: &str = "docs/bench/2026-12-02-h200-attention-v10.json";

#[derive(clap::Args, Clone)]
pub(crate) struct SimulateArgs {
    /// KV memory budget in GB (10^9 bytes), the same for every codec. Default: the seed's
    /// H100 run, 46 BF16 requests of 8192 + 256 tokens (46 x 1.107 GB, rounded up).
    #[arg(long, default_value_t = 51.0)]
    kv_gb: f64,
    /// Chunk size in MiB: the unit a layer takes from or returns to the shared pool.
    #[arg(long, default_value_t = 2)]
    chunk_mib: u64,
    /// `PoolConfig::tail_fill_percent`: a request's compressed pages take a fresh
    /// segment only if its pages still to come in the layer fill this percent of it.
    #[arg(long, default_value_t = 50)]
    tail_fill: u32,
    /// With the shared pool: the share of the budget kept as per-layer private space.
    #[arg(long, default_value_t = 0.5)]
    private_share: f64,
    /// Model weights in bytes (Llama-3.1-8B in BF16).
    #[arg(long, default_value_t = 16.0e9)]
    weight_bytes: f64,
    /// The bench JSON whose CUDA rows give `copy_gb_s` (weights' read time) and
    /// ZipFusion's GPU `encode_gb_s` (page compression).
    #[arg(long, default_value = DEFAULT_BENCH)]
    bench: PathBuf,
    /// The bench-attention JSON: per-(shape, batch, context) twin and fused times.
    #[arg(long, default_value = DEFAULT_ATTENTION)]
    attention: PathBuf,
    /// Write the allocator trace of the ZipFusion + pool run on the seed's stream to
    /// this file (the format of `kvcodec_pool::trace`), then replay it on the CPU model.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Decode steps the trace covers (the first wave's prefill dominates its size).
    #[arg(long, default_value_t = 300)]
    trace_steps: u64,
    /// With `--trace`: replay the trace on the GPU as well (`kvcodec_pool::gpu`): check
    /// every live page and the device page table against the model at checkpoints and
    /// at the end, and time the device allocator per step (host and device time).
    #[arg(long, requires = "trace")]
    device_replay: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only time the allocator's CPU cost per decode step (skip the serving runs).
    #[arg(long)]
    allocator_only: bool,
    /// Repetitions of the allocator's timing, each on a fresh pool: the report gives the
    /// one of least pool-call time (a shared machine's interference only adds time) and
    /// the median and every repetition beside it.
    #[arg(long, default_value_t = 5)]
    allocator_repeats: usize,
    /// The reservation policies to run, comma-separated: `bf16` (a request reserves its
    /// whole length in BF16 pages, never preempted) and `compressed` (its prompt in BF16
    /// pages, its output at the codec's measured mean page ratio; a page that cannot be
    /// allocated preempts the youngest request, vLLM's recompute).
    #[arg(long, value_delimiter = ',', default_value = "bf16,compressed")]
    reserve: Vec<Reserve>,
}

/// How much a request reserves at admission (see `--reserve`).
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Reserve {
    /// Its whole length in open (BF16) pages: a running request can always grow.
    Bf16,
    /// Its prompt in open pages (prefill writes them open before compressing them), its
    /// output pages divided by the codec's measured mean page ratio, rounded up; a
    /// shortfall preempts.
    Compressed,
}

impl Reserve {
    fn name(self) -> &'static str {
        match self {
            Reserve::Bf16 => "bf16",
            Reserve::Compressed => "compressed",
        }
    }
}

// ----- measured inputs ---------------------------------------------------------------

/// The H200 numbers the step time is built from.
struct Device {
    /// Device-to-device copy GB/s (read + write counted), the bench's `copy_gb_s`.
    copy_gb_s: f64,
    /// ZipFusion's GPU page compression GB/s of BF16 input (`encode_gb_s`, CUDA row).
    encode_gb_s: f64,
    source: String,
    /// One layer's decode attention in µs: (batch, context) grid; the twin, ZipFusion
    /// fused (base) and GAAC fused.
    batches: Vec<f64>,
    contexts: Vec<f64>,
    twin_us: Vec<Vec<f64>>,
    fused_us: Vec<Vec<f64>>,
    gaac_us: Vec<Vec<f64>>,
    attention_source: String,
}

fn load_device(args: &SimulateArgs) -> anyhow::Result<Device> {
    // A GPU bundle runs away from the checkout: it sets KVCODEC_WORKSPACE to its own
    // folder, which holds the default JSONs under docs/bench/.
    let root = std::env::var_os("KVCODEC_WORKSPACE").map_or_else(crate::project_root, PathBuf::from);
    let read = |p: &Path| -> anyhow::Result<serde_json::Value> {
        let path = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
        let text = std::fs::read_to_string(&path).with_context(|| crate::shown(&path).to_string())?;
        serde_json::from_str(&text).with_context(|| crate::shown(&path).to_string())
    };
    let bench = read(&args.bench)?;
    let rows = bench["rows"].as_array().context("--bench: no rows")?;
    let row = |codec: &str, field: &str| {
        rows.iter()
            .filter(|r| r["codec"] == codec && r["backend"] == "cuda")
            .find_map(|r| r[field].as_f64())
            .with_context(|| format!("--bench: no CUDA {codec} row with {field}"))
    };
    let copy_gb_s = row("zipfusion", "copy_gb_s")?;
    let encode_gb_s = row("zipfusion", "encode_gb_s")?;
    let source = format!("{}, {}, commit {}", args.bench.display(), bench["device"], bench["commit"]);

    let att = read(&args.attention)?;
    let cells: Vec<&serde_json::Value> = att["cells"]
        .as_array()
        .context("--attention: no cells")?
        .iter()
        .filter(|c| c["shape"] == "llama3-8b")
        .collect();
    let mut batches: Vec<f64> = cells.iter().filter_map(|c| c["batch"].as_f64()).collect();
    let mut contexts: Vec<f64> = cells.iter().filter_map(|c| c["context"].as_f64()).collect();
    for v in [&mut batches, &mut contexts] {
        v.sort_by(f64::total_cmp);
        v.dedup();
    }
    anyhow::ensure!(
        batches.len() >= 2 && contexts.len() >= 2,
        "--attention: fewer than 2 batches or contexts"
    );
    let grid = |pick: &dyn Fn(&serde_json::Value) -> Option<f64>| -> anyhow::Result<Vec<Vec<f64>>> {
        batches
            .iter()
            .map(|&b| {
                contexts
                    .iter()
                    .map(|&s| {
                        cells
                            .iter()
                            .find(|c| c["batch"].as_f64() == Some(b) && c["context"].as_f64() == Some(s))
                            .and_then(|c| pick(c))
                            .with_context(|| {
                                format!("--attention: no llama3-8b cell at batch {b} context {s}")
                            })
                    })
                    .collect()
            })
            .collect()
    };
    let twin_us = grid(&|c| c["twin_us"].as_f64())?;
    let fused_us = grid(&|c| {
        c["fused"].as_array()?.iter().find(|f| f["variant"] == "base").and_then(|f| f["us"].as_f64())
    })?;
    let gaac_us = grid(&|c| c["gaac"]["us"].as_f64())?;
    let attention_source =
        format!("{}, {}, commit {}", args.attention.display(), att["device"], att["commit"]);
    Ok(Device {
        copy_gb_s,
        encode_gb_s,
        source,
        batches,
        contexts,
        twin_us,
        fused_us,
        gaac_us,
        attention_source,
    })
}

/// `y` at `x` on the polyline through `(xs, ys)`, extended past both ends by the first
/// and last segments.
fn polyline(xs: &[f64], ys: &[f64], x: f64) -> f64 {
    let i = xs.partition_point(|&v| v <= x).clamp(1, xs.len() - 1);
    let (x0, x1, y0, y1) = (xs[i - 1], xs[i], ys[i - 1], ys[i]);
    y0 + (y1 - y0) * (x - x0) / (x1 - x0)
}

impl Device {
    /// One layer's attention in µs at `batch` sequences of mean context `context`:
    /// piecewise linear in context at each measured batch, then in batch (both extended
    /// linearly past the grid), floored at the smallest measured time.
    fn attention_us(&self, codec: Codec, batch: f64, context: f64) -> f64 {
        let grid = match codec {
            Codec::Bf16 => &self.twin_us,
            Codec::Zipfusion => &self.fused_us,
            Codec::Gaac => &self.gaac_us,
        };
        let at_batch: Vec<f64> = grid.iter().map(|row| polyline(&self.contexts, row, context)).collect();
        let floor = grid.iter().flatten().copied().fold(f64::INFINITY, f64::min);
        polyline(&self.batches, &at_batch, batch).max(floor)
    }
}

// ----- page sizes from real KV -----------------------------------------------------

/// Compressed page sizes of the Llama shape, per Llama layer, from the SmolLM2 fixtures
/// (30 layers, 3 KV heads, head_dim 64, 512 tokens each).
///
/// Layer `l` of 32 takes SmolLM2 layer `round(l * 29 / 31)` (same relative depth). That
/// layer's blocks, both fixtures, in page order, form one sequence; a Llama page takes
/// the next blocks of it from a start chosen by a hash of (request, page):
/// * ZipFusion: 64 blocks of 16 tokens x 32 channels (8 heads x {K,V} x 4) from the
///   SmolLM2 blocks of the same size (12 per SmolLM2 page); size
///   `M + 768 e + 1024 (64 - e)` (docs/formats/zipfusion.md §5.2).
/// * GAAC: 16 blocks of 16 x 128 channels, each two consecutive SmolLM2 blocks of
///   16 x 64: it fits its 2976-byte slot when the two halves' 4-bit and raw bytes sum to
///   at most the slot's 96 bytes of slack (each half coded in the widest slot, bases
///   calibrated on the other fixture); size `16 C + k 2N` with `k` raw blocks
///   (docs/formats/gaac.md §4), BF16 past the open page.
struct PageSizes {
    /// Per Llama layer, per start, the page's compressed bytes.
    per_layer: Vec<Vec<u32>>,
    /// The mean Llama page ratio (BF16 bytes / compressed bytes, pages kept BF16 at 1).
    mean_ratio: f64,
    /// The SmolLM2 share of eligible (ZipFusion) or fitting (GAAC) blocks.
    smollm_share: f64,
}

fn smollm_layer(l: u32, smollm_layers: usize) -> usize {
    ((l as f64) * (smollm_layers - 1) as f64 / (LAYERS - 1) as f64).round() as usize
}

/// Builds the sizes from per-SmolLM2-layer block sequences: `take` consecutive items
/// from every start, `size` of them.
fn page_sizes<T: Copy>(blocks: &[Vec<T>], take: usize, size: impl Fn(&[T]) -> u32, share: f64) -> PageSizes {
    let per_layer: Vec<Vec<u32>> = (0..LAYERS)
        .map(|l| {
            let seq = &blocks[smollm_layer(l, blocks.len())];
            (0..seq.len())
                .step_by(take.min(seq.len()).max(1))
                .map(|start| {
                    let items: Vec<T> = (0..take).map(|i| seq[(start + i) % seq.len()]).collect();
                    size(&items)
                })
                .collect()
        })
        .collect();
    let all: Vec<f64> =
        per_layer.iter().flatten().map(|&b| f64::from(PAGE_BYTES) / f64::from(b.min(PAGE_BYTES))).collect();
    PageSizes { mean_ratio: all.iter().sum::<f64>() / all.len() as f64, per_layer, smollm_share: share }
}

fn zipfusion_sizes(files: &[PathBuf]) -> anyhow::Result<PageSizes> {
    let shape = zipfusion::PageShape::new(KV_HEADS, HEAD_DIM)?;
    let mut blocks: Vec<Vec<bool>> = Vec::new();
    let options = zipfusion::EncodeOptions { variant: zipfusion::Variant::Base, checksum: false };
    for f in files {
        let cache = crate::read_cache(f)?;
        let info = zipfusion::cache_info(&zipfusion::encode_cache(&cache, &options)?)?;
        let s = cache.shape();
        blocks.resize(s.layers, Vec::new());
        let per_layer = info.header.pages_per_layer();
        for (i, (_, page)) in info.pages.iter().enumerate() {
            for head in 0..s.kv_heads {
                for kind in KvKind::BOTH {
                    let eligible = page.blocks(head, kind).iter().map(|m| *m != zipfusion::BlockMeta::Raw);
                    blocks[i / per_layer].extend(eligible);
                }
            }
        }
    }
    let all: Vec<bool> = blocks.iter().flatten().copied().collect();
    let share = all.iter().filter(|&&e| e).count() as f64 / all.len() as f64;
    let size = |e: &[bool]| {
        let coded = e.iter().filter(|&&x| x).count();
        (shape.metadata_len()
            + coded * zipfusion::format::CODED_BLOCK_LEN
            + (e.len() - coded) * zipfusion::format::RAW_BLOCK_LEN) as u32
    };
    Ok(page_sizes(&blocks, shape.blocks(), size, share))
}

/// GAAC's Llama block: slot capacity, raw length, slack of its slot.
fn gaac_block() -> (u32, u32, u32) {
    let b = gaac::BlockShape::new(HEAD_DIM).expect("128 is a multiple of 64");
    let c = b.default_capacity();
    (c as u32, b.raw_len() as u32, (c - b.planes_len()) as u32)
}

fn gaac_sizes(files: &[PathBuf]) -> anyhow::Result<PageSizes> {
    let (capacity, raw, slack) = gaac_block();
    let mut blocks: Vec<Vec<u32>> = Vec::new();
    let (mut fit, mut total) = (0usize, 0usize);
    for f in files {
        let cache = crate::read_cache(f)?;
        let other =
            crate::bench::other_text_of_model(f).context("GAAC bases: no other fixture of the model")?;
        let small = gaac::BlockShape::new(cache.shape().head_dim).context("GAAC needs head_dim % 64 == 0")?;
        let options = gaac::EncodeOptions {
            bases: Some(gaac::Bases::calibrate(&crate::read_cache(&other)?)),
            slot_capacity: Some(small.max_coded_len()),
            ..Default::default()
        };
        let info = gaac::cache_info(&gaac::encode_cache(&cache, &options)?)?;
        let s = cache.shape();
        blocks.resize(s.layers, Vec::new());
        // Container order is (layer, kind, head, block); a page wants (block, kind, head).
        let mut keyed: Vec<((usize, usize, usize, usize), u32)> = Vec::new();
        for (i, b) in info.blocks.iter().enumerate() {
            let (layer, kind, head, block) = info.header.block_coords(i);
            let len = b.map_or(small.raw_len(), |(_, len)| len);
            let extra = (len - small.planes_len()) as u32;
            fit += usize::from(len <= small.default_capacity());
            total += 1;
            keyed.push(((layer, block, kind as usize, head), extra));
        }
        keyed.sort_unstable_by_key(|k| k.0);
        for ((layer, ..), extra) in keyed {
            blocks[layer].push(extra);
        }
    }
    let size = |extras: &[u32]| {
        let raws = extras.chunks(2).filter(|pair| pair.iter().sum::<u32>() > slack).count() as u32;
        2 * KV_HEADS as u32 * capacity + raws * raw
    };
    Ok(page_sizes(&blocks, 2 * 2 * KV_HEADS, size, fit as f64 / total as f64))
}

// ----- the server ---------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Codec {
    Bf16,
    Zipfusion,
    Gaac,
}

impl Codec {
    fn name(self) -> &'static str {
        match self {
            Codec::Bf16 => "bf16",
            Codec::Zipfusion => "zipfusion",
            Codec::Gaac => "gaac",
        }
    }
    fn classes(self) -> anyhow::Result<SizeClasses> {
        Ok(match self {
            Codec::Bf16 => SizeClasses::open_only(PAGE_BYTES)?,
            Codec::Zipfusion => {
                let min = zipfusion::PageShape::new(KV_HEADS, HEAD_DIM)?.min_page_len() as u32;
                SizeClasses::stepped(min, PAGE_BYTES, ZF_CLASS_STEP)?
            }
            Codec::Gaac => {
                let (capacity, raw, _) = gaac_block();
                let slots = 2 * KV_HEADS as u32 * capacity;
                let sizes = (0..).map(|k| slots + k * raw).take_while(|&b| b < PAGE_BYTES);
                SizeClasses::new(sizes.chain([PAGE_BYTES]).collect())?
            }
        })
    }
}

/// A request stream: (prompt tokens, output tokens), cycled.
struct Stream {
    name: &'static str,
    what: &'static str,
    requests: &'static [(u64, u64)],
}

const STREAMS: [Stream; 2] = [
    Stream {
        name: "seed-8k",
        what: "8192-token prompt + 256 generated (the seed's)",
        requests: &[(8192, 256)],
    },
    Stream {
        name: "long-output",
        what: "cycle of (1024 + 8192), (2048 + 4096), (8192 + 256), (512 + 2048): 57% of tokens generated",
        requests: &[(1024, 8192), (2048, 4096), (8192, 256), (512, 2048)],
    },
];

struct Running {
    id: u64,
    /// Which request of the stream it is (a preempted one is admitted again as itself).
    request: (u64, u64),
    prompt: u64,
    output: u64,
    generated: u64,
    /// The open page of each layer.
    open: Vec<PageId>,
    /// Whether the pages of `open` are full and compressed already (a prompt that ends
    /// on a page boundary): the next row starts without compressing them.
    open_done: bool,
    /// Pages per layer of its reservation not yet allocated: the scheduler's own count
    /// (its rows take one page in every layer), [`Pool::min_reserved`] without asking.
    reserve_left: u64,
    /// The compressed bytes of the pages its decode fills, page `prompt / PAGE_TOKENS`
    /// on, [`LAYERS`] a page: what a serving stack reads from the buffer the device's
    /// encoder wrote, drawn at admission so that the timed step reads them as such
    /// instead of hashing ([`Server::page_bytes`], the same sizes).
    decode_sizes: Vec<u32>,
}

/// The result of one run.
#[derive(serde::Serialize, Clone)]
struct RunResult {
    stream: &'static str,
    codec: &'static str,
    shared_pool: bool,
    attention: &'static str,
    mean_batch: f64,
    max_batch: usize,
    tokens_per_s: f64,
    mean_step_ms: f64,
    held_gb: f64,
    live_gb: f64,
    pages_kept_bf16: u64,
    pages_compressed: u64,
    reserve: &'static str,
    /// Requests preempted in the measured window (their generated tokens are lost).
    preemptions: u64,
    /// Decode tokens thrown away by those preemptions (not counted in `tokens_per_s`).
    lost_tokens: u64,
}

/// The pool of `codec` at the budget: `private_share` of the chunks per layer (1.0: no
/// shared pool), the rest shared. Both shapes hold the same chunks.
fn pool_config(args: &SimulateArgs, codec: Codec, shared: bool) -> anyhow::Result<PoolConfig> {
    let chunk_bytes = args.chunk_mib << 20;
    let per_layer = ((args.kv_gb * 1e9) / (chunk_bytes as f64 * f64::from(LAYERS))).floor() as u32;
    let private_chunks =
        if shared { (f64::from(per_layer) * args.private_share).floor() as u32 } else { per_layer };
    Ok(PoolConfig {
        layers: LAYERS,
        chunk_bytes,
        private_chunks,
        shared_chunks: (per_layer - private_chunks) * LAYERS,
        page_tokens: PAGE_TOKENS as u32,
        classes: codec.classes()?,
        tail_fill_percent: args.tail_fill,
    })
}

struct Server<'a> {
    pool: Pool,
    sizes: Option<&'a PageSizes>,
    reserve: Reserve,
    running: Vec<Running>,
    next_id: u64,
    /// Preempted requests, admitted again before new arrivals (oldest first).
    requeue: std::collections::VecDeque<(u64, u64)>,
    /// Preemptions, and the decode tokens they threw away.
    preemptions: u64,
    lost_tokens: u64,
    kept: u64,
    compressed: u64,
    /// Bytes the device reads and writes this step for compression and moves.
    device_bytes: f64,
    /// Rows allocated by decode steps (a request's token starting a page in every layer).
    rows: u64,
    /// Scratch of the row and prefill calls: page ids, compressed sizes, outcomes.
    ids: Vec<PageId>,
    sizes_buf: Vec<u32>,
    outcomes: Vec<CompressOutcome>,
    /// The decode step's requests whose token starts a page (the `touch_rows` hint), and
    /// the next step's as this step and the admissions find them (no pass of their own).
    crossing: Vec<u64>,
    crossing_next: Vec<u64>,
    /// How the step calls [`Pool::touch_rows`] (`KVCODEC_POOL_TOUCH`).
    touch: Touch,
    /// With `Some`, the [`ticks`] spent inside the pool's calls of the decode steps and
    /// the calls timed (the allocator's timing; the serving runs leave it `None`).
    pool_ticks: Option<(u64, u64)>,
}

/// A cycle counter for timing the pool's calls one by one inside a decode step: on
/// x86-64 the time-stamp counter (a read costs ~25 cycles, `Instant::now` ~20-25 ns; a
/// step makes ~8 calls), converted to µs by its ratio to `Instant` over the whole timed
/// run; elsewhere nanoseconds since the first call.
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is on every x86-64 processor and reads a counter, nothing else.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// `f()`, its [`ticks`] added to `clock` (and one call counted) when the allocator is
/// being timed.
#[inline(always)]
fn timed<R>(clock: &mut Option<(u64, u64)>, f: impl FnOnce() -> R) -> R {
    match clock {
        None => f(),
        Some((spent, calls)) => {
            let t0 = ticks();
            let r = f();
            *spent += ticks().wrapping_sub(t0);
            *calls += 1;
            r
        }
    }
}

/// Whether a decode step calls the pool's [`Pool::touch_rows`] hint, from the environment
/// variable `KVCODEC_POOL_TOUCH` (a measurement switch: `0` never; anything else or
/// unset: once per step with every request whose token starts a page, before the first
/// row). The hint per next row and in batches of rows were measured no better and
/// removed (docs/perf/pool.md, version 6 candidates and "Measured on the H200 host").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Touch {
    Off,
    Step,
}

impl Touch {
    fn from_env() -> Touch {
        match std::env::var("KVCODEC_POOL_TOUCH").as_deref() {
            Ok("0") => Touch::Off,
            _ => Touch::Step,
        }
    }
}

impl<'a> Server<'a> {
    fn new(pool: Pool, sizes: Option<&'a PageSizes>, reserve: Reserve) -> Server<'a> {
        Server {
            pool,
            sizes,
            reserve,
            running: Vec::new(),
            next_id: 0,
            requeue: std::collections::VecDeque::new(),
            preemptions: 0,
            lost_tokens: 0,
            kept: 0,
            compressed: 0,
            device_bytes: 0.0,
            rows: 0,
            ids: Vec::new(),
            sizes_buf: Vec::new(),
            outcomes: Vec::new(),
            crossing: Vec::new(),
            crossing_next: Vec::new(),
            touch: Touch::from_env(),
            pool_ticks: None,
        }
    }

    fn page_bytes(&self, id: u64, page: u64, layer: u32) -> u32 {
        self.size_at(crate::mix(id, page), layer)
    }

    /// The size [`Server::page_bytes`] gives a page whose `mix(id, page)` is `h` (a row's
    /// pages share it: one hash per row).
    fn size_at(&self, h: u64, layer: u32) -> u32 {
        match self.sizes {
            None => PAGE_BYTES,
            Some(s) => {
                let starts = &s.per_layer[layer as usize];
                starts[(h % starts.len() as u64) as usize]
            }
        }
    }

    /// Counts the outcomes in `self.outcomes[..n]` (moves' device bytes, pages kept).
    fn count_outcomes(&mut self, n: usize) {
        for i in 0..n {
            match self.outcomes[i] {
                CompressOutcome::Moved(m) => {
                    self.compressed += 1;
                    self.count_move(&m);
                }
                CompressOutcome::Kept => self.kept += 1,
            }
        }
    }

    fn count_move(&mut self, m: &Move) {
        // A compression reads the BF16 page and writes the compressed one; a move copies.
        let read = if m.compress { m.from.slot_bytes } else { m.bytes };
        self.device_bytes += f64::from(read) + f64::from(m.bytes);
    }

    /// Pages per layer a request of `(prompt, output)` reserves at admission under the
    /// server's policy (`--reserve`).
    fn reservation(&self, prompt: u64, output: u64) -> u64 {
        let cfg = self.pool.config();
        match self.reserve {
            Reserve::Bf16 => cfg.pages_for_tokens(prompt + output),
            Reserve::Compressed => {
                let ratio = self.sizes.map_or(1.0, |s| s.mean_ratio);
                let out_pages = cfg.pages_for_tokens(prompt + output) - prompt / PAGE_TOKENS;
                prompt / PAGE_TOKENS + (out_pages as f64 / ratio).ceil() as u64
            }
        }
    }

    /// Admits `(prompt, output)` if its reservation fits (a preempted request first),
    /// reserves it, prefills.
    fn try_admit_next(&mut self, stream: &Stream, arrivals: &mut u64) -> anyhow::Result<bool> {
        let (prompt, output) = match self.requeue.front() {
            Some(&r) => r,
            None => stream.requests[(*arrivals % stream.requests.len() as u64) as usize],
        };
        let admitted = self.try_admit(prompt, output)?;
        if admitted && self.requeue.pop_front().is_none() {
            *arrivals += 1;
        }
        Ok(admitted)
    }

    /// Admits `(prompt, output)` if its reservation fits: reserves it, prefills.
    fn try_admit(&mut self, prompt: u64, output: u64) -> anyhow::Result<bool> {
        let pages = self.reservation(prompt, output);
        if self.pool.admissible_pages() < pages {
            return Ok(false);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pool.reserve(id, pages)?;
        // Per layer, one call: every full prompt page allocated and compressed as written,
        // then the partial last page open.
        let full = (prompt / PAGE_TOKENS) as usize;
        let tail = !prompt.is_multiple_of(PAGE_TOKENS);
        anyhow::ensure!(full > 0 || tail, "a prompt of at least one token");
        let mut open = Vec::with_capacity(LAYERS as usize);
        self.ids.resize(full + usize::from(tail), 0);
        self.outcomes.resize(full, CompressOutcome::Kept);
        for layer in 0..LAYERS {
            self.sizes_buf.clear();
            for p in 0..full as u64 {
                self.sizes_buf.push(self.page_bytes(id, p, layer));
            }
            self.pool.prefill_layer(id, layer, &self.sizes_buf, tail, &mut self.ids, &mut self.outcomes)?;
            self.count_outcomes(full);
            open.push(*self.ids.last().expect("at least one page"));
        }
        if self.touch != Touch::Off && prompt.is_multiple_of(PAGE_TOKENS) {
            self.crossing_next.push(id);
        }
        let mut decode_sizes = Vec::new();
        for page in full as u64..(prompt + output).div_ceil(PAGE_TOKENS) {
            let h = crate::mix(id, page);
            decode_sizes.extend((0..LAYERS).map(|layer| self.size_at(h, layer)));
        }
        self.running.push(Running {
            id,
            request: (prompt, output),
            prompt,
            output,
            generated: 0,
            open,
            open_done: !tail,
            reserve_left: pages.saturating_sub((full + usize::from(tail)) as u64),
            decode_sizes,
        });
        Ok(true)
    }

    /// Whether request `i` can take a new page in every layer: from its reservation, or
    /// beyond every reservation (the pool's exact admission query).
    fn can_grow(&mut self, i: usize) -> bool {
        self.running[i].reserve_left > 0 || timed(&mut self.pool_ticks, || self.pool.admissible_pages()) >= 1
    }

    /// Preempts the youngest running request (vLLM's recompute): its pages and
    /// reservation are released, it is queued to be admitted again, its generated tokens
    /// are lost. Returns the index it had.
    fn preempt_youngest(&mut self) -> anyhow::Result<usize> {
        let v =
            (0..self.running.len()).max_by_key(|&j| self.running[j].id).context("no request to preempt")?;
        let r = self.running.swap_remove(v);
        timed(&mut self.pool_ticks, || self.pool.release(r.id))?;
        self.requeue.push_back(r.request);
        self.preemptions += 1;
        self.lost_tokens += r.generated;
        Ok(v)
    }

    /// One decode token for every running request; finished ones release. A request
    /// that needs a page when none can be had preempts the youngest request (itself if
    /// it is the youngest); if the room is still pending it waits this step.
    fn decode(&mut self) -> anyhow::Result<u64> {
        let mut tokens = 0;
        let mut i = 0;
        // The rows this step will take, announced to the pool before the first (their
        // lines load together): what a serving stack's scheduler knows at the step's start
        // (the requests the last step and the admissions since left at a page boundary; a
        // hint: one preempted since is skipped by the pool).
        if self.touch != Touch::Off {
            std::mem::swap(&mut self.crossing, &mut self.crossing_next);
            self.crossing_next.clear();
            timed(&mut self.pool_ticks, || self.pool.touch_rows(&self.crossing));
        }
        while i < self.running.len() {
            let (id, t) = (self.running[i].id, self.running[i].prompt + self.running[i].generated);
            if t.is_multiple_of(PAGE_TOKENS) && !self.can_grow(i) {
                let v = self.preempt_youngest()?;
                if v == i {
                    continue; // it preempted itself; the request now at i (if any) is next
                }
                if v < i {
                    // The request at `i` moved: the last one took the victim's place.
                    i = self.running.iter().position(|r| r.id == id).context("still running")?;
                }
                if !self.can_grow(i) {
                    if self.touch != Touch::Off {
                        self.crossing_next.push(id); // it tries again next step
                    }
                    i += 1; // the victim's slots come back when its epoch completes
                    continue;
                }
            }
            if t.is_multiple_of(PAGE_TOKENS) {
                // The token starts a new page in every layer (room checked above: the
                // row's allocations first, so a compression cannot take it), and the
                // previous row filled and compresses (unless the prompt's last page
                // already did): one call for both.
                let Server { pool, running, ids, outcomes, pool_ticks, .. } = self;
                let r = &mut running[i];
                std::mem::swap(&mut r.open, ids);
                r.open.resize(LAYERS as usize, 0);
                r.reserve_left = r.reserve_left.saturating_sub(1);
                self.rows += 1;
                if std::mem::replace(&mut r.open_done, false) {
                    timed(pool_ticks, || pool.alloc_row(id, &mut r.open))?;
                } else {
                    let first = (t / PAGE_TOKENS - 1 - r.prompt / PAGE_TOKENS) as usize * LAYERS as usize;
                    let sizes = &r.decode_sizes[first..first + LAYERS as usize];
                    outcomes.resize(LAYERS as usize, CompressOutcome::Kept);
                    ids.truncate(LAYERS as usize);
                    timed(pool_ticks, || pool.advance_row(id, ids, sizes, outcomes, &mut r.open))?;
                    self.count_outcomes(LAYERS as usize);
                }
            }
            self.running[i].generated += 1;
            tokens += 1;
            if self.running[i].generated == self.running[i].output {
                timed(&mut self.pool_ticks, || self.pool.release(id))?;
                self.running.swap_remove(i);
            } else {
                if self.touch != Touch::Off && (t + 1).is_multiple_of(PAGE_TOKENS) {
                    self.crossing_next.push(id);
                }
                i += 1;
            }
        }
        Ok(tokens)
    }
}

/// Steps between the device replay's checkpoints.
const DEVICE_CHECK_EVERY: u64 = 100;

/// Mean and quantiles of a list of µs.
#[derive(serde::Serialize)]
struct Summary {
    n: usize,
    mean: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

impl Summary {
    fn of(mut v: Vec<f64>) -> Summary {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let at = |q: f64| if n == 0 { 0.0 } else { v[((n - 1) as f64 * q).round() as usize] };
        Summary {
            n,
            mean: v.iter().sum::<f64>() / n.max(1) as f64,
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// The allocator's CPU time per decode step, in µs of one thread of this machine.
struct AllocatorTime {
    mean: f64,
    p50: f64,
    p99: f64,
    /// The mean over the steps in which no request finished (appends, compressions,
    /// the admission query: no release).
    steady_mean: f64,
    /// Steps in which a request finished (its release and reclamation timed).
    finish_steps: u64,
    /// Pages compressed in the run, prefills included.
    compressed: u64,
    /// Means over all steps of the step's parts, µs: `complete` of the previous step,
    /// the admission query, the decode (rows allocated and compressed, releases), and
    /// the reclamation of a finished request (the `complete` of its release's epoch).
    complete_us: f64,
    admission_us: f64,
    decode_us: f64,
    reclaim_us: f64,
    /// Steps by kind, (count, mean µs, p50 µs): a request finished; else some request's
    /// token started a page (rows allocated and compressed); else neither.
    finish: (usize, f64, f64),
    rows: (usize, f64, f64),
    idle: (usize, f64, f64),
    /// Rows allocated by the decode steps.
    row_count: u64,
    /// A replacement's admission (reserve + prefill of its 8192-token prompt: 16384
    /// pages allocated and compressed), µs each, outside the decode step: (count, mean).
    prefill: (usize, f64),
    /// The pool's calls alone per step (complete, the admission query, the row hint, the
    /// rows, a request's admission query when its reservation is spent, releases,
    /// submits and the reclamation; not the scheduler's loop over the running requests
    /// and its bookkeeping around them), µs, each call with one clock read in it, and
    /// their means by step kind (finish, rows, other).
    calls: Summary,
    calls_by_kind: [f64; 3],
    /// Pool calls timed per step, and the µs one clock read adds to each (an empty call
    /// timed): their product is the clock's share of `calls`.
    calls_per_step: f64,
    clock_us: f64,
}

struct Sim<'a> {
    args: &'a SimulateArgs,
    device: &'a Device,
    zf: &'a PageSizes,
    gaac: &'a PageSizes,
}

impl Sim<'_> {
    fn run(
        &self,
        stream: &Stream,
        codec: Codec,
        shared: bool,
        reserve: Reserve,
        trace_steps: Option<u64>,
    ) -> anyhow::Result<(RunResult, Vec<String>)> {
        let sizes = match codec {
            Codec::Bf16 => None,
            Codec::Zipfusion => Some(self.zf),
            Codec::Gaac => Some(self.gaac),
        };
        let mut pool = Pool::new(pool_config(self.args, codec, shared)?)?;
        if trace_steps.is_some() {
            pool.record_trace(true);
        }
        let mut s = Server::new(pool, sizes, reserve);
        let mut arrivals = 0u64;
        let (mut preempt_start, mut lost_start) = (0, 0);
        let weight_ms = self.args.weight_bytes / (self.device.copy_gb_s * 1e9) * 1e3;
        let (mut time_ms, mut tokens, mut batch_sum, mut max_batch, mut held, mut live) =
            (0.0, 0u64, 0u64, 0, 0u64, 0u64);
        let steps = trace_steps.unwrap_or(STEPS);
        for step in 1..=steps {
            let epoch: Epoch = step;
            if step > 1 {
                s.pool.complete(epoch - 1)?; // the device is one step behind
            }
            // Admission in arrival order.
            while s.try_admit_next(stream, &mut arrivals)? {}
            if step == WARMUP + 1 {
                (preempt_start, lost_start) = (s.preemptions, s.lost_tokens);
            }
            let batch = s.running.len();
            let context =
                s.running.iter().map(|r| (r.prompt + r.generated) as f64).sum::<f64>() / batch.max(1) as f64;
            let step_tokens = s.decode()?;
            s.pool.submit(epoch)?;
            let attention_ms =
                f64::from(LAYERS) * self.device.attention_us(codec, batch as f64, context) / 1e3;
            let device_ms = s.device_bytes / (self.device.encode_gb_s * 1e9) * 1e3;
            s.device_bytes = 0.0;
            if step > WARMUP {
                time_ms += weight_ms + attention_ms + device_ms;
                tokens += step_tokens;
                batch_sum += batch as u64;
                max_batch = max_batch.max(batch);
                let st = s.pool.stats();
                held += u64::from(st.chunks_in_use) * s.pool.config().chunk_bytes;
                live += st.live_slot_bytes;
            }
        }
        let window = steps.saturating_sub(WARMUP).max(1) as f64;
        let result = RunResult {
            stream: stream.name,
            codec: codec.name(),
            shared_pool: shared,
            attention: match codec {
                Codec::Bf16 => "bf16 twin",
                Codec::Zipfusion => "zipfusion fused (base)",
                Codec::Gaac => "gaac fused",
            },
            mean_batch: batch_sum as f64 / window,
            max_batch,
            tokens_per_s: tokens.saturating_sub(s.lost_tokens - lost_start) as f64 / (time_ms / 1e3),
            mean_step_ms: time_ms / window,
            held_gb: held as f64 / window / 1e9,
            live_gb: live as f64 / window / 1e9,
            pages_kept_bf16: s.kept,
            pages_compressed: s.compressed,
            reserve: reserve.name(),
            preemptions: s.preemptions - preempt_start,
            lost_tokens: s.lost_tokens - lost_start,
        };
        Ok((result, s.pool.take_trace()))
    }

    /// The allocator's CPU time per decode step with [`TIMED_BATCH`] requests of the
    /// seed's stream running, staggered, ZipFusion with the shared pool; a finished
    /// request is replaced at once (its prefill not timed, the reclamation of its slots
    /// timed).
    fn time_allocator(&self) -> anyhow::Result<AllocatorTime> {
        let (prompt, output) = STREAMS[0].requests[0];
        let per_request =
            f64::from(LAYERS) * (prompt + output) as f64 * f64::from(PAGE_BYTES) / PAGE_TOKENS as f64;
        let args = SimulateArgs {
            kv_gb: TIMED_BATCH as f64 * per_request / 1e9 * 1.05,
            trace: None,
            json: None,
            ..self.args.clone()
        };
        let pool = Pool::new(pool_config(&args, Codec::Zipfusion, true)?)?;
        let mut s = Server::new(pool, Some(self.zf), Reserve::Bf16);
        // Each admission's prefill is its own epoch, completed before the next: its
        // compressed pages' open slots are free again.
        let mut epoch: Epoch = 0;
        for i in 0..TIMED_BATCH as u64 {
            // Staggered: request i starts i * 4 tokens into its output.
            let ahead = (i * 4) % output;
            anyhow::ensure!(
                s.try_admit(prompt + ahead, output - ahead)?,
                "the timing pool holds {TIMED_BATCH} requests"
            );
            epoch += 1;
            s.pool.submit(epoch)?;
            s.pool.complete(epoch)?;
        }
        let (mut times, mut steady) = (Vec::new(), Vec::new());
        let (mut parts, mut kinds) = ([0.0f64; 4], [Vec::new(), Vec::new(), Vec::new()]);
        let (mut prefills, rows0) = (Vec::new(), s.rows);
        // Per step, the ticks inside the pool's calls alone (the decode's scheduler loop
        // and its bookkeeping left out), and the step's kind.
        let (mut call_ticks, mut call_kinds, mut call_count) = (Vec::new(), Vec::new(), 0u64);
        let (clock_t0, clock_c0) = (Instant::now(), ticks());
        let us_since = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
        for _ in 0..STEPS {
            let rows = s.rows;
            s.pool_ticks = Some((0, 0));
            let t0 = Instant::now();
            timed(&mut s.pool_ticks, || timed_complete(&mut s.pool, epoch))?; // the device is one step behind
            let t1 = Instant::now();
            let admissible = timed(&mut s.pool_ticks, || s.pool.admissible_pages());
            let t2 = Instant::now();
            s.decode()?;
            epoch += 1;
            timed(&mut s.pool_ticks, || s.pool.submit(epoch))?;
            let t3 = Instant::now();
            std::hint::black_box(admissible);
            for (part, (a, b)) in parts.iter_mut().zip([(t0, t1), (t1, t2), (t2, t3)]) {
                *part += (b - a).as_secs_f64() * 1e6;
            }
            let mut us = (t3 - t0).as_secs_f64() * 1e6;
            // A finished request is replaced (prefill untimed) once its room is back; the
            // reclamation of its slots (the `complete` of the epoch that freed them) is
            // allocator work of this step, and timed.
            let finished = s.running.len() < TIMED_BATCH;
            if finished {
                epoch += 1;
                timed(&mut s.pool_ticks, || s.pool.submit(epoch))?;
                let t4 = Instant::now();
                timed(&mut s.pool_ticks, || timed_complete(&mut s.pool, epoch))?;
                let reclaim = us_since(t4);
                parts[3] += reclaim;
                us += reclaim;
            }
            times.push(us);
            if !finished {
                steady.push(us);
            }
            let kind = if finished {
                0
            } else if s.rows > rows {
                1
            } else {
                2
            };
            kinds[kind].push(us);
            let (spent, calls) = s.pool_ticks.take().unwrap_or((0, 0));
            call_ticks.push(spent);
            call_count += calls;
            call_kinds.push(kind);
            if finished {
                while s.running.len() < TIMED_BATCH {
                    let t5 = Instant::now();
                    let admitted = s.try_admit(prompt, output)?;
                    prefills.push(us_since(t5));
                    anyhow::ensure!(admitted, "a finished request's room is back after its epoch");
                    epoch += 1;
                    s.pool.submit(epoch)?;
                    s.pool.complete(epoch)?;
                }
            }
        }
        let ticks_per_us = ticks().wrapping_sub(clock_c0) as f64 / us_since(clock_t0);
        // What the clock adds to a timed call: an empty call timed many times.
        let mut empty = Some((0, 0));
        for _ in 0..10_000 {
            timed(&mut empty, || std::hint::black_box(()));
        }
        let clock_us = empty.map_or(0.0, |(t, n)| t as f64 / n as f64 / ticks_per_us);
        let calls: Vec<f64> = call_ticks.iter().map(|&t| t as f64 / ticks_per_us).collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let calls_of = |k: usize| -> Vec<f64> {
            calls.iter().zip(&call_kinds).filter(|&(_, &kind)| kind == k).map(|(&c, _)| c).collect()
        };
        let calls_by_kind = [mean(&calls_of(0)), mean(&calls_of(1)), mean(&calls_of(2))];
        let calls = Summary::of(calls);
        let (all_mean, steady_mean) = (mean(&times), mean(&steady));
        let per_step = |x: f64| x / STEPS as f64;
        let kind = |k: &[f64]| {
            let mut v = k.to_vec();
            v.sort_by(f64::total_cmp);
            (v.len(), mean(&v), v.get(v.len() / 2).copied().unwrap_or(0.0))
        };
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        Ok(AllocatorTime {
            mean: all_mean,
            p50: at(0.5),
            p99: at(0.99),
            steady_mean,
            finish_steps: (times.len() - steady.len()) as u64,
            compressed: s.compressed,
            complete_us: per_step(parts[0]),
            admission_us: per_step(parts[1]),
            decode_us: per_step(parts[2]),
            reclaim_us: per_step(parts[3]),
            finish: kind(&kinds[0]),
            rows: kind(&kinds[1]),
            idle: kind(&kinds[2]),
            row_count: s.rows - rows0,
            prefill: (prefills.len(), mean(&prefills)),
            calls,
            calls_by_kind,
            calls_per_step: call_count as f64 / STEPS as f64,
            clock_us,
        })
    }
}

/// [`Pool::complete`] inside the timed step (the previous step's epoch, and a finished
/// request's reclamation): not inlined, so that an instruction count (`valgrind
/// --tool=callgrind --toggle-collect=xtask::simulate::timed_complete
/// --toggle-collect=xtask::simulate::Server::decode`) takes the timed work apart from
/// the untimed prefills' completes.
#[inline(never)]
fn timed_complete(pool: &mut Pool, epoch: Epoch) -> kvcodec_pool::Result<()> {
    pool.complete(epoch)
}

pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    anyhow::ensure!((0.0..=1.0).contains(&args.private_share), "--private-share must lie in [0, 1]");
    // Before the simulation and the trace (minutes, a file of ~160 MB), not after them.
    let replay_gpu = if args.device_replay {
        Some(kvcodec_gpu::GpuContext::new(0).context("--device-replay needs a GPU")?)
    } else {
        None
    };
    let device = load_device(&args)?;
    let files = crate::fixture_files()?;
    let zf = zipfusion_sizes(&files)?;
    let gaac = gaac_sizes(&files)?;
    let sim = Sim { args: &args, device: &device, zf: &zf, gaac: &gaac };
    let weight_ms = args.weight_bytes / (device.copy_gb_s * 1e9) * 1e3;
    let chunk_bytes = args.chunk_mib << 20;
    let per_layer = pool_config(&args, Codec::Bf16, false)?.private_chunks;
    outln!(
        "serving simulation: Llama-3.1-8B shape (32 layers, 8 KV heads, head_dim 128, 16-token pages of {PAGE_BYTES} B in BF16)"
    )?;
    outln!(
        "KV budget {:.1} GB = 32 layers x {per_layer} chunks of {} MiB; with the shared pool {:.0}% of them private, the rest shared",
        args.kv_gb,
        args.chunk_mib,
        100.0 * args.private_share
    )?;
    outln!(
        "weights {:.1} GB / copy_bw {:.0} GB/s = {weight_ms:.3} ms per step (copy_gb_s, {})",
        args.weight_bytes / 1e9,
        device.copy_gb_s,
        device.source
    )?;
    outln!(
        "attention: 32 x one layer's time from {}: piecewise linear in context at each batch {:?}, then in batch (linear past the grid), at the batch's mean context",
        device.attention_source,
        device.batches
    )?;
    outln!(
        "page compression and moves: bytes read + written / ZipFusion's GPU encode {:.0} GB/s (same JSON); GAAC's sealing at the same rate",
        device.encode_gb_s
    )?;
    outln!(
        "page sizes from the fixtures ({}): SmolLM2 layer round(l x 29/31) for Llama layer l; Llama pages from consecutive SmolLM2 blocks of that layer",
        files.iter().map(|f| crate::shown(f).to_string()).collect::<Vec<_>>().join(", ")
    )?;
    outln!(
        "  zipfusion (base): {:.2}% of SmolLM2 blocks eligible; Llama page ratio {:.4} mean; classes every {ZF_CLASS_STEP} B",
        100.0 * zf.smollm_share,
        zf.mean_ratio
    )?;
    let (capacity, raw, slack) = gaac_block();
    outln!(
        "  gaac: {:.2}% of SmolLM2 blocks (D=64) fit the default slot; a D=128 block = two D=64 halves, fits its {capacity} B slot when their extras sum <= {slack} B; page = 16 slots + {raw} B per raw block; Llama page ratio {:.4} mean",
        100.0 * gaac.smollm_share,
        gaac.mean_ratio
    )?;
    outln!("steps {STEPS}, measured from step {WARMUP}; chunk {chunk_bytes} B; prefill not timed")?;

    let mut results = Vec::new();
    for stream in STREAMS.iter().filter(|_| !args.allocator_only) {
        outln!()?;
        outln!("stream {}: {}", stream.name, stream.what)?;
        outln!(
            "{:<10} {:<5} {:<10} {:>10} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
            "codec",
            "pool",
            "reserve",
            "mean batch",
            "max batch",
            "tokens/s",
            "step ms",
            "held GB",
            "live GB",
            "preempt",
            "lost tok",
            "attention"
        )?;
        let mut rows = Vec::new();
        for &reserve in &args.reserve {
            for codec in [Codec::Bf16, Codec::Zipfusion, Codec::Gaac] {
                for shared in [false, true] {
                    let (r, _) = sim.run(stream, codec, shared, reserve, None)?;
                    outln!(
                        "{:<10} {:<5} {:<10} {:>10.1} {:>9} {:>10.0} {:>8.3} {:>8.2} {:>8.2} {:>8} {:>8}  {}",
                        r.codec,
                        if shared { "yes" } else { "no" },
                        r.reserve,
                        r.mean_batch,
                        r.max_batch,
                        r.tokens_per_s,
                        r.mean_step_ms,
                        r.held_gb,
                        r.live_gb,
                        r.preemptions,
                        r.lost_tokens,
                        r.attention
                    )?;
                    rows.push(r);
                }
            }
        }
        // The baseline: BF16 pages, no shared pool, BF16 reservations (if run).
        let base = rows
            .iter()
            .find(|r| r.codec == "bf16" && !r.shared_pool && r.reserve == "bf16")
            .unwrap_or(&rows[0])
            .clone();
        for &reserve in &args.reserve {
            for codec in ["bf16", "zipfusion", "gaac"] {
                let pick = |shared: bool| {
                    rows.iter()
                        .find(|r| r.codec == codec && r.shared_pool == shared && r.reserve == reserve.name())
                        .expect("ran")
                };
                let (no, yes) = (pick(false), pick(true));
                if codec == base.codec && reserve.name() == base.reserve {
                    continue;
                }
                let pct = |a: f64, b: f64| 100.0 * (a / b - 1.0);
                outln!(
                    "  {codec}, reserve {} vs bf16, reserve {} (no pool): max batch {:+.1}% ({:+.1}% without the pool, the pool's share {:+.1} points), mean batch {:+.1}%, tokens/s {:+.1}% ({:+.1}% without the pool)",
                    reserve.name(),
                    base.reserve,
                    pct(yes.max_batch as f64, base.max_batch as f64),
                    pct(no.max_batch as f64, base.max_batch as f64),
                    pct(yes.max_batch as f64, base.max_batch as f64)
                        - pct(no.max_batch as f64, base.max_batch as f64),
                    pct(yes.mean_batch, base.mean_batch),
                    pct(yes.tokens_per_s, base.tokens_per_s),
                    pct(no.tokens_per_s, base.tokens_per_s),
                )?;
            }
        }
        results.extend(rows);
    }

    let repeats = (0..args.allocator_repeats.max(1))
        .map(|_| sim.time_allocator())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let at =
        repeats.iter().min_by(|a, b| a.calls.mean.total_cmp(&b.calls.mean)).expect("one repetition at least");
    let median = |f: fn(&AllocatorTime) -> f64| {
        let mut v: Vec<f64> = repeats.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[(v.len() - 1) / 2]
    };
    let each = |f: fn(&AllocatorTime) -> f64| {
        repeats.iter().map(|r| format!("{:.2}", f(r))).collect::<Vec<_>>().join(" / ")
    };
    let mut device_json = Vec::new();
    outln!()?;
    outln!(
        "allocator timing, {} repetitions on fresh pools: the pool's calls per step {} us (median {:.2}); whole step {} us (median {:.2}); below, the repetition of least pool-call time",
        repeats.len(),
        each(|r| r.calls.mean),
        median(|r| r.calls.mean),
        each(|r| r.mean),
        median(|r| r.mean),
    )?;
    outln!(
        "allocator CPU time per decode step at batch {TIMED_BATCH} (seed stream, zipfusion, shared pool; complete + admission query + appends, compressions, releases and their reclamation; {STEPS} steps, {} with a request finishing, {} pages compressed, one thread of this machine): mean {:.2} us, p50 {:.2} us, p99 {:.2} us; steps without a finish: mean {:.2} us",
        at.finish_steps,
        at.compressed,
        at.mean,
        at.p50,
        at.p99,
        at.steady_mean
    )?;
    outln!(
        "  parts, mean us per step: complete {:.2}, admission query {:.2}, decode (rows, releases) {:.2}, reclamation {:.2}; steps (count x mean / p50 us) with a finish {} x {:.2} / {:.2}, with rows {} x {:.2} / {:.2} ({} rows of {LAYERS} pages), other {} x {:.2} / {:.2}; outside the step: admission with prefill ({} pages) {} x {:.1} us",
        at.complete_us,
        at.admission_us,
        at.decode_us,
        at.reclaim_us,
        at.finish.0,
        at.finish.1,
        at.finish.2,
        at.rows.0,
        at.rows.1,
        at.rows.2,
        at.row_count,
        at.idle.0,
        at.idle.1,
        at.idle.2,
        u64::from(LAYERS) * (STREAMS[0].requests[0].0.div_ceil(PAGE_TOKENS)),
        at.prefill.0,
        at.prefill.1,
    )?;
    outln!(
        "  the pool's calls alone (the scheduler's loop over the running requests left out; per-call time-stamp counter): mean {:.2} us, p50 {:.2} us, p99 {:.2} us per step; by step kind: finish {:.2}, rows {:.2}, other {:.2} us; {:.1} calls per step, each with a clock read of ~{:.3} us in it",
        at.calls.mean,
        at.calls.p50,
        at.calls.p99,
        at.calls_by_kind[0],
        at.calls_by_kind[1],
        at.calls_by_kind[2],
        at.calls_per_step,
        at.clock_us,
    )?;

    if let Some(path) = &args.trace {
        let (_, lines) =
            sim.run(&STREAMS[0], Codec::Zipfusion, true, Reserve::Bf16, Some(args.trace_steps))?;
        let text = lines.join("\n") + "\n";
        std::fs::write(path, &text).with_context(|| format!("--trace {}", crate::shown(path)))?;
        let replayed = kvcodec_pool::trace::replay(&text)?;
        outln!(
            "trace: {} lines ({} steps, zipfusion + pool, seed stream) -> {}; replayed on the CPU model: every outcome matches, {} live pages",
            lines.len(),
            args.trace_steps,
            crate::shown(path),
            replayed.page_table().count()
        )?;
        if let Some(gpu) = &replay_gpu {
            let r = kvcodec_pool::gpu::replay_on_device(gpu, &text, DEVICE_CHECK_EVERY)?;
            anyhow::ensure!(
                r.bad_pages == 0 && r.table_mismatches == 0 && r.chunks_in_use_at_end == 0,
                "device replay: {} bad pages, {} table words differ, {} chunks left in use",
                r.bad_pages,
                r.table_mismatches,
                r.chunks_in_use_at_end
            );
            outln!(
                "device replay on {}: {} steps ({} with an admission), {} allocations, {} moves, {} id blocks freed; {} checkpoints: {} pages checked, 0 bad, device page table equal to the model's; {} segments reclaimed, 0 chunks in use at the end; {} completes waited for their event",
                gpu.info().name,
                r.steps,
                r.admission_steps,
                r.allocs,
                r.moves,
                r.freed_blocks,
                r.checkpoints,
                r.pages_checked,
                r.segments_reclaimed,
                r.waits
            )?;
            for (label, admitted) in [("decode steps", false), ("steps with an admission", true)] {
                let pick = |v: &[f64]| -> Vec<f64> {
                    v.iter().zip(&r.admitted).filter(|(_, a)| **a == admitted).map(|(x, _)| *x).collect()
                };
                let (host, device) = (Summary::of(pick(&r.host_us)), Summary::of(pick(&r.device_us)));
                outln!(
                    "  {label} ({}): host us/step mean {:.2} p50 {:.2} p99 {:.2} max {:.2}; device us/step (CUDA events, table updates + moves) mean {:.2} p50 {:.2} p99 {:.2} max {:.2}",
                    host.n,
                    host.mean,
                    host.p50,
                    host.p99,
                    host.max,
                    device.mean,
                    device.p50,
                    device.p99,
                    device.max
                )?;
                device_json.push(serde_json::json!({"steps": label, "host_us": host, "device_us": device}));
            }
        }
    }
    if let Some(path) = &args.json {
        // A bundle's build-info.json first: on a GPU machine there is no checkout.
        let (commit, dirty) = crate::bench::build_info();
        let allocator_json = serde_json::json!({"batch": TIMED_BATCH, "repetitions": repeats.len(),
                "selected": "the repetition of least pool-call mean (the fields below but the repetition lists)",
                "repetition_pool_calls_means": repeats.iter().map(|r| r.calls.mean).collect::<Vec<_>>(),
                "repetition_step_means": repeats.iter().map(|r| r.mean).collect::<Vec<_>>(),
                "mean": at.mean, "p50": at.p50, "p99": at.p99, "steady_mean": at.steady_mean, "finish_steps": at.finish_steps,
                "parts": {"complete": at.complete_us, "admission": at.admission_us, "decode": at.decode_us, "reclaim": at.reclaim_us},
                "finish_steps_mean": at.finish.1, "finish_steps_p50": at.finish.2, "row_steps": at.rows.0, "row_steps_mean": at.rows.1, "row_steps_p50": at.rows.2,
                "rows": at.row_count, "other_steps": at.idle.0, "other_steps_mean": at.idle.1, "other_steps_p50": at.idle.2,
                "admissions": at.prefill.0, "admission_prefill_us": at.prefill.1,
                "pool_calls": at.calls, "pool_calls_finish_mean": at.calls_by_kind[0], "pool_calls_rows_mean": at.calls_by_kind[1], "pool_calls_other_mean": at.calls_by_kind[2],
                "pool_calls_per_step": at.calls_per_step, "clock_read_us": at.clock_us});
        let doc = serde_json::json!({
            "date": crate::bench::report::today(),
            "commit": commit,
            "dirty": dirty,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "kv_gb": args.kv_gb,
            "chunk_mib": args.chunk_mib,
            "private_share": args.private_share,
            "weight_ms": weight_ms,
            "copy_gb_s": device.copy_gb_s,
            "encode_gb_s": device.encode_gb_s,
            "bench_source": device.source,
            "attention_source": device.attention_source,
            "zipfusion": {"smollm_eligible": zf.smollm_share, "llama_page_ratio": zf.mean_ratio},
            "gaac": {"smollm_fit": gaac.smollm_share, "llama_page_ratio": gaac.mean_ratio},
            "runs": results,
            "device_replay": device_json,
            "allocator_us_per_step": allocator_json,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("--json {}", crate::shown(path)))?;
        outln!("-> {}", crate::shown(path))?;
    }
    Ok(())
}
