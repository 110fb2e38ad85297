//! `cargo xtask bench-attention`: decode attention over a paged cache on the GPU, per
//! model shape, context and batch, against the BF16 peers (torch SDPA, FlashInfer's paged
//! decode with tensor cores off and on) timed by `xtask/attention/peers.py` in the same
//! device call (issue 18's bench). Every kernel's speedup is printed against the best peer
//! of its cell (the fastest of the three) beside the byte ratio of what it reads; `--svg`
//! plots those speedups against the context ([`crate::attention_plot`]).
//!
//! Method (the peers script uses the same): CUDA events around one launch, 3 warm-ups,
//! median of `--runs`, each run behind a 512 MiB memset that flushes the L2 and a hold
//! kernel that keeps the host's launch latency out of the time. KV values are the real
//! fixture's, tiled in file order: K pages from the K tensors, V pages from the V tensors,
//! layer after layer, so a 128- or 256-wide head holds two or four consecutive 64-value
//! heads of SmolLM2. Pages are placed by a random permutation, as in a cache after churn
//! (`--pages contiguous` puts each sequence's pages in order).
//!
//! Read floors: each cell also times, by the same method, the plainest kernel that reads
//! the cell's BF16 KV bytes once, and one reading each fused kernel's compressed bytes
//! (`GpuContext::read_floor`); `%flr` is that floor over the kernel's time. A short read
//! does not reach the large-copy bandwidth (launch, ramp, the memset's dirty L2 lines
//! written back: docs/perf/attention.md, "Read floors"), so this, not the HBM peak, is
//! what a batch-1 kernel can approach.
//!
//! ZipFusion fused: the same pages compressed on the device into fixed slots
//! (`encode_kv_pages_device`, base and zero-aware), the same block table and workspace;
//! each cell prints the data's byte ratio (BF16 bytes over compressed page bytes, page
//! metadata included) beside the speedup over the twin, and whether out and lse are the
//! twin's bits.
//!
//! GAAC fused: the same pages sealed on the device into 16-token blocks per (kind, KV
//! head) in slots of the default capacity (`gaac::gpu::seal_blocks_device`, bases
//! calibrated on the cell's first tokens of the tiled values), raw blocks read from the
//! sealer's raw buffer through the page directory (`gaac::attention`); its ratio is BF16
//! bytes over the bytes the kernel reads (the slots of coded blocks, the raw blocks).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use cudarc::driver::{CudaSlice, sys};
use kvcodec_attention::gpu::{DecodeWorkspace, DeviceProblem, decode_device};
use kvcodec_attention::pooled::{DevicePooledKv, DevicePooledProblem};
use kvcodec_attention::{DecodeShape, PAGE_TOKENS};
use kvcodec_gpu::GpuContext;
use zipfusion::attention::{DeviceZfPagedKv, DeviceZfProblem, decode_device_fused};

/// `cargo xtask bench-attention`'s options.
#[derive(clap::Args)]
pub(crate) struct AttentionArgs {
    /// Model shapes: llama3-8b (32/8/128), smollm2 (9/3/64), gemma3 (4/1/256).
    #[arg(long, value_delimiter = ',', default_value = "llama3-8b,smollm2,gemma3")]
    shapes: Vec<String>,
    /// Context lengths in tokens.
    #[arg(long, value_delimiter = ',', default_value = "8192,32768,65536,131072")]
    contexts: Vec<usize>,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    batches: Vec<usize>,
    /// The KV file whose values fill the pages (default: the code fixture).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Page placement: `shuffled` (a random permutation, as in a cache after churn) or
    /// `contiguous` (each sequence's pages in order, back to back).
    #[arg(long, default_value = "shuffled", value_parser = ["shuffled", "contiguous"])]
    pages: String,
    /// The peers' JSON from xtask/attention/peers.py, joined into the table.
    #[arg(long)]
    peers: Option<PathBuf>,
    /// Timed runs per cell (the median is reported).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Write the cells as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also time the pooled kernels (issue 19, `kvcodec_attention::pooled`): the twin and
    /// ZipFusion's fused kernel (base) reading the same pages through a pool's page table,
    /// beside the slot-indexed ones ([`measure_pooled`]).
    #[arg(long)]
    pooled: bool,
    /// Leave out the GAAC fused kernel (its calibration and sealing take most of a cell's
    /// set-up time).
    #[arg(long)]
    no_gaac: bool,
    /// Write the SVG plot of the speedups over the best peer here
    /// ([`crate::attention_plot`]).
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// A named model shape: query heads, KV heads, head_dim.
const SHAPES: [(&str, usize, usize, usize); 3] =
    [("llama3-8b", 32, 8, 128), ("smollm2", 9, 3, 64), ("gemma3", 4, 1, 256)];

const WARMUP: usize = 3;
const FLUSH_BYTES: usize = 512 << 20;
const HOLD_NS: u64 = 2_000_000;

/// One measured cell.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub(crate) struct Cell {
    pub(crate) shape: String,
    pub(crate) batch: usize,
    pub(crate) context: usize,
    /// K and V bytes the step reads.
    pub(crate) kv_bytes: usize,
    /// Median µs of the BF16 twin.
    pub(crate) twin_us: f64,
    /// Median µs of the read floor of `kv_bytes` (`GpuContext::read_floor`, the same
    /// method): what the plainest kernel reading that many bytes takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) read_floor_us: Option<f64>,
    pub(crate) splits: usize,
    /// The peers' medians in µs from `--peers` (same cell), where given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sdpa_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) flashinfer_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) flashinfer_tc_us: Option<f64>,
    /// The ZipFusion fused kernel on the same pages compressed, per variant.
    pub(crate) fused: Vec<FusedCell>,
    /// The GAAC fused kernel on the same pages sealed (variant `gaac`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gaac: Option<FusedCell>,
    /// The pooled kernels (`--pooled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pooled: Option<PooledCell>,
}

/// The pooled kernels in one cell (`--pooled`): the same pages and block table (page ids),
/// read through a pool's page table.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub(crate) struct PooledCell {
    /// Median µs of the twin over BF16 pages in the pool's open slots.
    pub(crate) twin_us: f64,
    /// Whether its out and lse are the slot-indexed twin's bits.
    pub(crate) twin_identical: bool,
    /// Median µs of ZipFusion's fused kernel (base) over compressed pages packed in
    /// request segments.
    pub(crate) zf_us: f64,
    /// Whether its out and lse are the twin's bits.
    pub(crate) zf_identical: bool,
    /// Arena bytes of the compressed pages' segments (class rounding and segment tails
    /// included).
    pub(crate) zf_arena_bytes: u64,
    /// Segments (chunks) the compressed pages take.
    pub(crate) zf_segments: usize,
}

/// The ZipFusion fused kernel in one cell.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub(crate) struct FusedCell {
    /// `base` or `zero-aware` (ZipFusion), `gaac`.
    pub(crate) variant: String,
    /// Median µs.
    pub(crate) us: f64,
    /// Bytes of the compressed pages (metadata included; GAAC: the bytes read).
    pub(crate) compressed_bytes: u64,
    /// BF16 bytes / compressed bytes.
    pub(crate) ratio: f64,
    /// Median µs of the read floor of `compressed_bytes` (as [`Cell::read_floor_us`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) read_floor_us: Option<f64>,
    /// Whether out and lse are the twin's bits.
    pub(crate) identical: bool,
}

/// What peers.py writes: where and how it measured, and its cells.
#[derive(serde::Deserialize, serde::Serialize, Clone, Debug)]
struct PeersFile {
    device: String,
    torch: String,
    flashinfer: Option<String>,
    pages: String,
    runs: u32,
    #[serde(skip_serializing)]
    cells: Vec<PeerCell>,
}

/// A peer cell as peers.py writes it (µs, `null` where the peer could not run).
#[derive(serde::Deserialize, Clone, Debug)]
struct PeerCell {
    shape: String,
    batch: usize,
    context: usize,
    sdpa_us: Option<f64>,
    flashinfer_us: Option<f64>,
    flashinfer_tc_us: Option<f64>,
}

#[derive(serde::Serialize)]
struct Report {
    date: String,
    commit: String,
    dirty: bool,
    kernels_lock_sha256: String,
    device: String,
    command: String,
    values: String,
    pages: String,
    /// Where the peers' times come from (`--peers`).
    peers: Option<PeersFile>,
    cells: Vec<Cell>,
}

pub(crate) fn run(args: AttentionArgs) -> anyhow::Result<()> {
    let gpu = GpuContext::new(0).context("bench-attention needs a GPU")?;
    let input = match &args.input {
        Some(p) => p.clone(),
        None => crate::fixtures_dir().join("smollm2-135m-code.safetensors"),
    };
    let cache = crate::read_cache(&input)?;
    let k_words: Vec<u16> = cache.tensors_of(bf16_field::KvKind::K).collect::<Vec<_>>().concat();
    let v_words: Vec<u16> = cache.tensors_of(bf16_field::KvKind::V).collect::<Vec<_>>().concat();
    let k_source = gpu.upload(&k_words)?;
    let v_source = gpu.upload(&v_words)?;
    let mut flush = gpu.zeros::<u8>(FLUSH_BYTES)?;
    let peers_file: Option<PeersFile> = match &args.peers {
        Some(p) => {
            let file: PeersFile =
                serde_json::from_str(&std::fs::read_to_string(p).with_context(|| crate::shown(p))?)
                    .with_context(|| format!("--peers {}", crate::shown(p)))?;
            anyhow::ensure!(
                file.pages == args.pages,
                "--peers {}: measured with {} pages, this run places them {}",
                crate::shown(p),
                file.pages,
                args.pages
            );
            Some(file)
        }
        None => None,
    };
    let peers: &[PeerCell] = peers_file.as_ref().map_or(&[], |f| &f.cells);
    outln!(
        "[bench-attention] {} ; KV values from {} ; {} pages",
        gpu.info(),
        crate::shown(&input),
        args.pages
    )?;
    // The cell's BF16 read floor; each kernel: µs, GB/s of what it reads, its read floor
    // over its time (%flr), the byte ratio of what it reads, the speedup over the best peer
    // and (fused) over the twin.
    outln!(
        "{:<10} {:>3} {:>7} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>5} {:>5} {:>6} {:>6} | {:>8} {:>5} {:>5} {:>6} {:>6} {:>6} | {:>8} {:>5} {:>5} {:>6} {:>6} {:>6} | {:>8} {:>5} {:>5} {:>6} {:>6} {:>6} | {:>4}",
        "shape",
        "B",
        "S",
        "KV MB",
        "splits",
        "SDPA",
        "FI",
        "FI-TC",
        "floor",
        "twin us",
        "GB/s",
        "%flr",
        "ratio",
        "/best",
        "ZF us",
        "GB/s",
        "%flr",
        "ratio",
        "/best",
        "/twin",
        "ZF-ZA us",
        "GB/s",
        "%flr",
        "ratio",
        "/best",
        "/twin",
        "GAAC us",
        "GB/s",
        "%flr",
        "ratio",
        "/best",
        "/twin",
        "bits"
    )?;
    let mut cells = Vec::new();
    for name in &args.shapes {
        let &(shape_name, q_heads, kv_heads, head_dim) = SHAPES
            .iter()
            .find(|s| s.0 == name)
            .with_context(|| format!("--shapes {name}: one of llama3-8b, smollm2, gemma3"))?;
        for &batch in &args.batches {
            for &context in &args.contexts {
                let shape = DecodeShape { batch, q_heads, kv_heads, head_dim };
                let shuffled = args.pages == "shuffled";
                let cell = measure(
                    &gpu,
                    shape,
                    context,
                    shuffled,
                    &k_source,
                    &v_source,
                    &mut flush,
                    args.runs as usize,
                    Kernels { pooled: args.pooled, gaac: !args.no_gaac },
                )
                .with_context(|| format!("{shape_name} B={batch} S={context}"))?;
                let peer =
                    peers.iter().find(|p| p.shape == shape_name && p.batch == batch && p.context == context);
                let cell = Cell {
                    shape: shape_name.to_string(),
                    sdpa_us: peer.and_then(|p| p.sdpa_us),
                    flashinfer_us: peer.and_then(|p| p.flashinfer_us),
                    flashinfer_tc_us: peer.and_then(|p| p.flashinfer_tc_us),
                    ..cell
                };
                outln!("{}", table_row(&cell))?;
                if let Some(p) = &cell.pooled {
                    let zf_slot = cell.fused.first().map_or(f64::NAN, |f| f.us);
                    outln!(
                        "{:<10} {:>3} {:>7}   pooled: twin {:.1} us ({:+.1}% vs slot-indexed, bits {}) | ZF {:.1} us \
                         ({:+.1}% vs slot-indexed, bits {}; {} segments, {:.1} MB)",
                        "",
                        cell.batch,
                        cell.context,
                        p.twin_us,
                        (p.twin_us / cell.twin_us - 1.0) * 100.0,
                        if p.twin_identical { "same" } else { "DIFF" },
                        p.zf_us,
                        (p.zf_us / zf_slot - 1.0) * 100.0,
                        if p.zf_identical { "same" } else { "DIFF" },
                        p.zf_segments,
                        p.zf_arena_bytes as f64 / 1e6
                    )?;
                }
                cells.push(cell);
            }
        }
    }
    outln!(
        "SDPA, FI, FI-TC: the peers' µs (torch SDPA on dense KV; FlashInfer's paged decode, tensor cores off / on); \
         floor: µs of the plainest kernel reading the cell's BF16 KV bytes once (GpuContext::read_floor, same \
         method); twin: the BF16 twin (kvcodec_attention::gpu); GB/s: bytes the kernel reads / time; %flr: the \
         read floor of the bytes the kernel reads / its time; ratio: BF16 bytes / bytes the kernel reads; /best: \
         the best peer's time / the kernel's"
    )?;
    outln!(
        "ZF / ZF-ZA: ZipFusion fused (zipfusion::attention), base / zero-aware pages compressed on the device from \
         the same values (ratio: metadata included); /twin: twin time / fused time; bits: out and lse identical to \
         the twin's"
    )?;
    outln!(
        "GAAC: GAAC fused (gaac::attention), blocks sealed on the device from the same values, default slot; ratio: \
         BF16 bytes / bytes read (coded slots and raw blocks); /best and /twin as above"
    )?;
    outln!(
        "times: CUDA events, median of {} after {WARMUP} warm-ups, L2 flushed (512 MiB memset) before each run",
        args.runs
    )?;
    if let Some(svg) = &args.svg {
        let title = format!("decode attention, {} ({} pages)", gpu.info(), args.pages);
        std::fs::write(svg, crate::attention_plot::svg(&cells, &title))
            .with_context(|| format!("--svg {}", crate::shown(svg)))?;
    }
    if let Some(json) = &args.json {
        let (commit, dirty) = crate::bench::build_info();
        let report = Report {
            date: crate::bench::report::today(),
            commit,
            dirty,
            kernels_lock_sha256: crate::bench::kernels_lock_sha256(),
            device: gpu.info().to_string(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            values: format!("{} tiled in file order", crate::shown(&input)),
            pages: args.pages.clone(),
            peers: peers_file.clone(),
            cells,
        };
        std::fs::write(json, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("--json {}", crate::shown(json)))?;
    }
    Ok(())
}

/// One line of the table: the peers, then each kernel's µs, GB/s, byte ratio and speedups.
fn table_row(cell: &Cell) -> String {
    let best = crate::attention_plot::best_peer(cell);
    let show = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
    let over_best = |us: f64| best.map_or("-".to_string(), |b| format!("{:.3}x", b / us));
    let of_floor =
        |floor: Option<f64>, us: f64| floor.map_or("-".to_string(), |f| format!("{:.0}%", 100.0 * f / us));
    let mut row = format!(
        "{:<10} {:>3} {:>7} {:>8.1} {:>6} {:>8} {:>8} {:>8} {:>8} | {:>8.1} {:>5.0} {:>5} {:>6.3} {:>6}",
        cell.shape,
        cell.batch,
        cell.context,
        cell.kv_bytes as f64 / 1e6,
        cell.splits,
        show(cell.sdpa_us),
        show(cell.flashinfer_us),
        show(cell.flashinfer_tc_us),
        show(cell.read_floor_us),
        cell.twin_us,
        cell.kv_bytes as f64 / cell.twin_us / 1e3,
        of_floor(cell.read_floor_us, cell.twin_us),
        1.0,
        over_best(cell.twin_us),
    );
    let fused = [cell.fused.first(), cell.fused.get(1), cell.gaac.as_ref()];
    for f in fused {
        match f {
            Some(f) => {
                let _ = write!(
                    row,
                    " | {:>8.1} {:>5.0} {:>5} {:>6.4} {:>6} {:>5.3}x",
                    f.us,
                    f.compressed_bytes as f64 / f.us / 1e3,
                    of_floor(f.read_floor_us, f.us),
                    f.ratio,
                    over_best(f.us),
                    cell.twin_us / f.us
                );
            }
            None => {
                let _ = write!(row, " | {:>8} {:>5} {:>5} {:>6} {:>6} {:>6}", "-", "-", "-", "-", "-", "-");
            }
        }
    }
    let bits = if cell.fused.is_empty() && cell.gaac.is_none() {
        "-"
    } else if cell.fused.iter().chain(&cell.gaac).all(|f| f.identical) {
        "same"
    } else {
        "DIFF"
    };
    let _ = write!(row, " | {bits:>4}");
    row
}

/// Fills `dst` with `src` repeated, on the device.
fn tile(gpu: &GpuContext, src: &CudaSlice<u16>, dst: &mut CudaSlice<u16>) -> anyhow::Result<()> {
    let mut at = 0;
    while at < dst.len() {
        let n = src.len().min(dst.len() - at);
        gpu.stream().memcpy_dtod(&src.slice(..n), &mut dst.slice_mut(at..at + n))?;
        at += n;
    }
    Ok(())
}

/// Which kernels a cell times besides the twin and ZipFusion's slot-indexed ones.
#[derive(Clone, Copy)]
struct Kernels {
    pooled: bool,
    gaac: bool,
}

#[allow(clippy::too_many_arguments)]
fn measure(
    gpu: &GpuContext,
    shape: DecodeShape,
    context: usize,
    shuffled: bool,
    k_source: &CudaSlice<u16>,
    v_source: &CudaSlice<u16>,
    flush: &mut CudaSlice<u8>,
    runs: usize,
    kernels: Kernels,
) -> anyhow::Result<Cell> {
    let pages_per_seq = context.div_ceil(PAGE_TOKENS);
    let pages = shape.batch * pages_per_seq;
    // K pages then V pages in one buffer: the twin reads the halves, the ZipFusion page
    // compressor takes the whole.
    let n = pages * shape.page_values();
    let mut kv = gpu.zeros::<u16>(2 * n)?;
    {
        let mut k = gpu.zeros::<u16>(n)?;
        tile(gpu, k_source, &mut k)?;
        gpu.stream().memcpy_dtod(&k, &mut kv.slice_mut(..n))?;
        tile(gpu, v_source, &mut k)?;
        gpu.stream().memcpy_dtod(&k, &mut kv.slice_mut(n..))?;
    }
    let mut rng = xorshift(0x5eed);
    let mut order: Vec<u32> = (0..pages as u32).collect();
    for i in (1..order.len()).rev().filter(|_| shuffled) {
        order.swap(i, rng() as usize % (i + 1));
    }
    let table = gpu.upload(&order)?;
    let lens = gpu.upload(&vec![context as u32; shape.batch])?;
    // Queries uniform in [-1, 1], truncated to BF16 (their values do not change the time).
    let q_words: Vec<u16> = (0..shape.q_values())
        .map(|_| (((rng() % 2001) as f32 / 1000.0 - 1.0).to_bits() >> 16) as u16)
        .collect();
    let q = gpu.upload(&q_words)?;
    let mut out = gpu.zeros::<u16>(shape.q_values())?;
    let mut lse = gpu.zeros::<f32>(shape.batch * shape.q_heads)?;
    let mut workspace = DecodeWorkspace::new(gpu, shape, pages_per_seq)?;
    let problem = DeviceProblem {
        shape,
        q: q.slice(..),
        k: kv.slice(..n),
        v: kv.slice(n..),
        block_table: table.slice(..),
        max_pages: pages_per_seq,
        context_lens: lens.slice(..),
        scale: 1.0 / (shape.head_dim as f32).sqrt(),
    };
    let start = gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut time = |launch: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let mut times = Vec::with_capacity(runs);
        for i in 0..WARMUP + runs {
            gpu.stream().memset_zeros(flush)?;
            gpu.hold(HOLD_NS)?;
            start.record(gpu.stream())?;
            launch()?;
            end.record(gpu.stream())?;
            end.synchronize()?;
            if i >= WARMUP {
                times.push(f64::from(start.elapsed_ms(&end)?) * 1e3);
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    let twin_us = time(&mut || {
        Ok(decode_device(gpu, &mut workspace, &problem, &mut out.slice_mut(..), &mut lse.slice_mut(..))?)
    })?;
    workspace.check(gpu)?;
    // The read floor of `bytes` of the cell's KV (its contents do not change a plain read;
    // a kernel that reads more bytes than the BF16 cache has no floor here).
    let mut sink = gpu.zeros::<u32>(1)?;
    let mut read_floor = |bytes: u64, time: &mut Timer<'_>| -> anyhow::Result<f64> {
        let bytes = usize::try_from(bytes)?.next_multiple_of(16);
        anyhow::ensure!(bytes <= 4 * n, "a read floor of {bytes} bytes past the {}-byte KV", 4 * n);
        time(&mut || Ok(gpu.read_floor(&kv, bytes, &mut sink)?))
    };
    let twin_floor_us = read_floor((4 * n) as u64, &mut time)?;
    let twin_out = gpu.download(&out, shape.q_values())?;
    let twin_lse = gpu.download(&lse, shape.batch * shape.q_heads)?;

    // ZipFusion: the same pages compressed on the device into fixed slots (every page is
    // full at these contexts; a partial last page would stay BF16), the same block table.
    let mut fused = Vec::new();
    let mut pooled = None;
    if context.is_multiple_of(PAGE_TOKENS) {
        let page_shape = zipfusion::PageShape::new(shape.kv_heads, shape.head_dim)?;
        let stride = page_shape.max_page_len().next_multiple_of(16);
        let mut slots = gpu.zeros::<u8>(pages * stride)?;
        let mut lens_dev = gpu.zeros::<u32>(pages)?;
        let mut scratch = zipfusion::gpu::PageScratch::new(gpu, page_shape, pages)?;
        let no_partial = gpu.zeros::<u16>(8)?;
        for variant in zipfusion::Variant::ALL {
            zipfusion::gpu::encode_kv_pages_device(
                gpu,
                &kv.slice(..),
                page_shape,
                variant,
                pages,
                &mut slots.slice_mut(..),
                stride,
                &mut lens_dev.slice_mut(..),
                &mut scratch,
            )?;
            let page_lens = gpu.download(&lens_dev, pages)?;
            let compressed: u64 = page_lens.iter().map(|&l| u64::from(l)).sum();
            let fused_problem = DeviceZfProblem {
                shape,
                q: q.slice(..),
                cache: DeviceZfPagedKv {
                    variant,
                    slots: slots.slice(..),
                    slot_stride: stride,
                    partial_k: no_partial.slice(..0),
                    partial_v: no_partial.slice(..0),
                },
                block_table: table.slice(..),
                max_pages: pages_per_seq,
                context_lens: lens.slice(..),
                scale: problem.scale,
            };
            let us = time(&mut || {
                Ok(decode_device_fused(
                    gpu,
                    &mut workspace,
                    &fused_problem,
                    &mut out.slice_mut(..),
                    &mut lse.slice_mut(..),
                )?)
            })?;
            workspace.check(gpu)?;
            let identical = gpu.download(&out, shape.q_values())? == twin_out
                && gpu
                    .download(&lse, shape.batch * shape.q_heads)?
                    .iter()
                    .zip(&twin_lse)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            fused.push(FusedCell {
                variant: variant.name().to_string(),
                us,
                compressed_bytes: compressed,
                ratio: (4 * n) as f64 / compressed as f64,
                read_floor_us: Some(read_floor(compressed, &mut time)?),
                identical,
            });
            if kernels.pooled && variant == zipfusion::Variant::Base {
                let same = |out: &CudaSlice<u16>, lse: &CudaSlice<f32>| -> anyhow::Result<bool> {
                    Ok(gpu.download(out, shape.q_values())? == twin_out
                        && gpu
                            .download(lse, shape.batch * shape.q_heads)?
                            .iter()
                            .zip(&twin_lse)
                            .all(|(a, b)| a.to_bits() == b.to_bits()))
                };
                let mut run = |launch: &mut dyn FnMut() -> anyhow::Result<()>| time(launch);
                let placed = PooledInputs {
                    kv: &kv,
                    slots: &slots,
                    slot_stride: stride,
                    page_lens: &page_lens,
                    order: &order,
                    pages_per_seq,
                    problem: &problem,
                };
                pooled =
                    Some(measure_pooled(gpu, &placed, &mut workspace, &mut out, &mut lse, &mut run, &same)?);
            }
        }
    }
    let gaac = if kernels.gaac && context.is_multiple_of(PAGE_TOKENS) {
        let mut run = |launch: &mut dyn FnMut() -> anyhow::Result<()>| time(launch);
        Some(measure_gaac(
            gpu,
            shape,
            pages,
            &kv,
            &q,
            &table,
            &lens,
            pages_per_seq,
            &mut workspace,
            &mut run,
        )?)
    } else {
        None
    };
    let gaac = match gaac {
        Some((cell, out_words, lse_words)) => Some(FusedCell {
            identical: out_words == twin_out
                && lse_words.iter().zip(&twin_lse).all(|(a, b)| a.to_bits() == b.to_bits()),
            read_floor_us: Some(read_floor(cell.compressed_bytes, &mut time)?),
            ..cell
        }),
        None => None,
    };
    Ok(Cell {
        shape: String::new(),
        batch: shape.batch,
        context,
        kv_bytes: 2 * shape.batch * context * shape.kv_heads * shape.head_dim * 2,
        twin_us,
        read_floor_us: Some(twin_floor_us),
        splits: workspace.plan().splits,
        sdpa_us: None,
        flashinfer_us: None,
        flashinfer_tc_us: None,
        fused,
        gaac,
        pooled,
    })
}

/// The GAAC fused kernel on the cell's pages (`kv`: K pages then V pages, `[pages, 16, H,
/// D]` each): bases calibrated on the first tokens of the values, every block sealed on the
/// device into a default-capacity slot (one call, each page's K and V tails in turn), the
/// directory from the statuses (raw blocks read from the sealer's raw buffer), timed with
/// `time`. Returns the cell (not yet compared, no read floor yet) and the output and lse.
#[allow(clippy::too_many_arguments)]
fn measure_gaac(
    gpu: &GpuContext,
    shape: DecodeShape,
    pages: usize,
    kv: &CudaSlice<u16>,
    q: &CudaSlice<u16>,
    table: &CudaSlice<u32>,
    lens: &CudaSlice<u32>,
    max_pages: usize,
    workspace: &mut DecodeWorkspace,
    time: &mut Timer<'_>,
) -> anyhow::Result<(FusedCell, Vec<u16>, Vec<f32>)> {
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let n = pages * shape.page_values();
    let block = gaac::BlockShape::new(d).context("GAAC head_dim")?;
    let capacity = block.default_capacity();
    // Bases of the layer: calibrated on up to 4096 tokens of K and of V.
    let tokens = (pages * PAGE_TOKENS).min(4096);
    let row = heads * d;
    let k_host = gpu.stream().clone_dtoh(&kv.slice(..tokens * row))?;
    let v_host = gpu.stream().clone_dtoh(&kv.slice(n..n + tokens * row))?;
    let calibration = bf16_field::KvShape::new(1, heads, d, tokens)?;
    let bases = gaac::Bases::calibrate_words(&[k_host, v_host].concat(), calibration, tokens)?;
    let layer_bases = bases.as_bytes().to_vec();
    // The sealer codes block b = t H + h of tensor t with bases [b D ..], as V when t is odd:
    // page p's K tail is tensor 2 p, its V tail 2 p + 1 (copied so), the bases repeat per
    // page, and the slots come out as the cache's [pages, 2, H, C].
    let per_block: Vec<u8> = std::iter::repeat_n(&layer_bases[..], pages).flatten().copied().collect();
    let per_block = gpu.upload(&per_block)?;
    let tails = interleave(gpu, kv, pages, shape.page_values())?;
    let blocks = 2 * pages * heads;
    let sealer = gaac::gpu::Sealer::new(
        gpu,
        gaac::gpu::SealShape {
            tensors: 2 * pages,
            kv_heads: heads,
            head_dim: d,
            tensor_stride: PAGE_TOKENS * row,
            slot_capacity: capacity,
        },
    )?;
    let mut slots = gpu.zeros::<u8>(blocks * capacity)?;
    let mut statuses = gpu.zeros::<u8>(blocks)?;
    let mut raw = gpu.zeros::<u8>(blocks * block.raw_len())?;
    gaac::gpu::seal_blocks_device(
        gpu,
        &sealer,
        &tails.slice(..),
        &per_block.slice(..),
        &mut slots.slice_mut(..),
        &mut statuses.slice_mut(..),
        &mut raw.slice_mut(..),
    )?;
    drop((per_block, tails));
    let statuses = gpu.download(&statuses, blocks)?;
    let directory: Vec<u32> = statuses
        .iter()
        .enumerate()
        .map(|(b, &s)| if s == 0 { gaac::attention::CODED } else { b as u32 + 1 })
        .collect();
    let raw_count = statuses.iter().filter(|&&s| s != 0).count();
    let read_bytes = ((blocks - raw_count) * capacity + raw_count * block.raw_len()) as u64;
    let directory = gpu.upload(&directory)?;
    let layer_bases = gpu.upload(&layer_bases)?;
    let no_partial = gpu.zeros::<u16>(8)?;
    let problem = gaac::attention::DeviceGaacProblem {
        shape,
        q: q.slice(..),
        cache: gaac::attention::DeviceGaacPagedKv {
            slots: slots.slice(..),
            capacity,
            directory: directory.slice(..),
            raw: raw.slice(..),
            bases: layer_bases.slice(..),
            partial_k: no_partial.slice(..0),
            partial_v: no_partial.slice(..0),
        },
        block_table: table.slice(..),
        max_pages,
        context_lens: lens.slice(..),
        scale: 1.0 / (d as f32).sqrt(),
    };
    let mut out = gpu.zeros::<u16>(shape.q_values())?;
    let mut lse = gpu.zeros::<f32>(shape.batch * shape.q_heads)?;
    let us = time(&mut || {
        Ok(gaac::attention::decode_device_fused(
            gpu,
            workspace,
            &problem,
            &mut out.slice_mut(..),
            &mut lse.slice_mut(..),
        )?)
    })?;
    workspace.check(gpu)?;
    let cell = FusedCell {
        variant: "gaac".to_string(),
        us,
        compressed_bytes: read_bytes,
        ratio: (4 * n) as f64 / read_bytes as f64,
        read_floor_us: None,
        identical: false,
    };
    Ok((cell, gpu.download(&out, shape.q_values())?, gpu.download(&lse, shape.batch * shape.q_heads)?))
}

/// `kv` (every page's K, then every page's V, `page_values` words each) with each page's
/// K and V side by side: page `p` at `2 p page_values` words, K then V (the layout of a
/// BF16 page in a pool's open slot, and the GAAC sealer's tensors).
fn interleave(
    gpu: &GpuContext,
    kv: &CudaSlice<u16>,
    pages: usize,
    page_values: usize,
) -> anyhow::Result<CudaSlice<u16>> {
    let n = pages * page_values;
    let mut out = gpu.zeros::<u16>(2 * n)?;
    for p in 0..pages {
        for (kind, from) in [p * page_values, n + p * page_values].into_iter().enumerate() {
            let to = (2 * p + kind) * page_values;
            gpu.stream()
                .memcpy_dtod(&kv.slice(from..from + page_values), &mut out.slice_mut(to..to + page_values))?;
        }
    }
    Ok(out)
}

/// What [`measure_pooled`] places in a pool: the cell's pages and their ZipFusion (base)
/// compression.
struct PooledInputs<'a> {
    /// Every page's K, then every page's V.
    kv: &'a CudaSlice<u16>,
    /// The compressed pages in fixed slots of `slot_stride` bytes.
    slots: &'a CudaSlice<u8>,
    slot_stride: usize,
    /// Each page's compressed length.
    page_lens: &'a [u32],
    /// The block table (sequence-major): the page ids.
    order: &'a [u32],
    pages_per_seq: usize,
    /// The slot-indexed twin's problem (query, block table, lengths, scale).
    problem: &'a DeviceProblem<'a>,
}

/// Bytes of a pool chunk in the pooled bench: a request segment (docs/perf/pool.md).
const POOL_CHUNK_BYTES: usize = 2 << 20;
/// ZipFusion's size-class step in the pool (as `cargo xtask simulate`).
const POOL_CLASS_STEP: u32 = 512;

/// The pooled kernels on the cell's pages, placed as the pool places them: page id `p`
/// (the slot-indexed twin's page `p`, so the block table is the same) BF16 in open slot
/// `p` of the twin's arena, K then V; compressed, each sequence's pages in token order
/// packed into its segments (2 MiB chunks, extents of the pool's size classes, 512 bytes
/// apart: `kvcodec_pool::SizeClasses::stepped`), the segments in a random order in the
/// arena (chunks freed and reused by other requests). Every page is compressed (a page
/// whose compressed length passes the largest class takes its length rounded to 16).
/// Returns the cell; `same` says whether out and lse are the twin's.
fn measure_pooled(
    gpu: &GpuContext,
    placed: &PooledInputs<'_>,
    workspace: &mut DecodeWorkspace,
    out: &mut CudaSlice<u16>,
    lse: &mut CudaSlice<f32>,
    time: &mut Timer<'_>,
    same: &SameBits<'_>,
) -> anyhow::Result<PooledCell> {
    let problem = placed.problem;
    let shape = problem.shape;
    let page_values = shape.page_values();
    let pages = placed.page_lens.len();
    let page_bytes = kvcodec_attention::pooled::bf16_page_bytes(shape);
    // The twin: open slots, page id p in slot p.
    let (twin_us, twin_identical) = {
        let words = interleave(gpu, placed.kv, pages, page_values)?;
        // SAFETY: a view of the same allocation as bytes: u8 has no invalid values and
        // alignment 1, and 2 * words.len() bytes is exactly its length.
        let arena_view =
            unsafe { words.transmute::<u8>(2 * words.len()) }.context("the BF16 arena as bytes")?;
        let arena_words: Vec<u64> = (0..pages as u64).map(|p| (p * page_bytes as u64) << 1).collect();
        let table = gpu.upload(&arena_words)?;
        let device_problem = DevicePooledProblem {
            shape,
            q: problem.q.slice(..),
            cache: DevicePooledKv { arena: arena_view, table: table.slice(..) },
            block_table: problem.block_table.slice(..),
            max_pages: problem.max_pages,
            context_lens: problem.context_lens.slice(..),
            scale: problem.scale,
        };
        let us = time(&mut || {
            Ok(kvcodec_attention::pooled::decode_device_pooled(
                gpu,
                workspace,
                &device_problem,
                &mut out.slice_mut(..),
                &mut lse.slice_mut(..),
            )?)
        })?;
        workspace.check(gpu)?;
        (us, same(out, lse)?)
    };

    // ZipFusion: each sequence's pages packed in its segments.
    let page_shape = zipfusion::PageShape::new(shape.kv_heads, shape.head_dim)?;
    let classes = kvcodec_pool::SizeClasses::stepped(
        page_shape.min_page_len() as u32,
        page_bytes as u32,
        POOL_CLASS_STEP,
    )?;
    let mut offsets = vec![0u64; pages];
    let mut segments = 0usize;
    for row in placed.order.chunks(placed.pages_per_seq) {
        let mut used = POOL_CHUNK_BYTES; // no segment yet
        for &page in row {
            let len = placed.page_lens[page as usize];
            let extent = classes.fit(len).map_or(len.next_multiple_of(16), |c| classes.bytes()[c]) as usize;
            if used + extent > POOL_CHUNK_BYTES {
                segments += 1;
                used = 0;
            }
            offsets[page as usize] = ((segments - 1) * POOL_CHUNK_BYTES + used) as u64;
            used += extent;
        }
    }
    let mut rng = xorshift(0x5e9);
    let mut chunk_of: Vec<u64> = (0..segments as u64).collect();
    for i in (1..chunk_of.len()).rev() {
        chunk_of.swap(i, rng() as usize % (i + 1));
    }
    let chunk = POOL_CHUNK_BYTES as u64;
    let mut arena = gpu.zeros::<u8>(segments * POOL_CHUNK_BYTES)?;
    let mut table_words = vec![0u64; pages];
    for p in 0..pages {
        let at = chunk_of[(offsets[p] / chunk) as usize] * chunk + offsets[p] % chunk;
        let len = placed.page_lens[p] as usize;
        let from = p * placed.slot_stride;
        gpu.stream().memcpy_dtod(
            &placed.slots.slice(from..from + len),
            &mut arena.slice_mut(at as usize..at as usize + len),
        )?;
        table_words[p] = (at << 1) | 1;
    }
    let table = gpu.upload(&table_words)?;
    let device_problem = DevicePooledProblem {
        shape,
        q: problem.q.slice(..),
        cache: DevicePooledKv { arena: arena.slice(..), table: table.slice(..) },
        block_table: problem.block_table.slice(..),
        max_pages: problem.max_pages,
        context_lens: problem.context_lens.slice(..),
        scale: problem.scale,
    };
    let zf_us = time(&mut || {
        Ok(zipfusion::attention::decode_device_pooled(
            gpu,
            workspace,
            zipfusion::Variant::Base,
            &device_problem,
            &mut out.slice_mut(..),
            &mut lse.slice_mut(..),
        )?)
    })?;
    workspace.check(gpu)?;
    Ok(PooledCell {
        twin_us,
        twin_identical,
        zf_us,
        zf_identical: same(out, lse)?,
        zf_arena_bytes: (segments * POOL_CHUNK_BYTES) as u64,
        zf_segments: segments,
    })
}

/// Whether an out and lse on the device are the twin's bits.
type SameBits<'a> = dyn Fn(&CudaSlice<u16>, &CudaSlice<f32>) -> anyhow::Result<bool> + 'a;

type Timer<'a> = dyn FnMut(&mut dyn FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> + 'a;

/// xorshift32 for the page permutation and the queries.
fn xorshift(seed: u32) -> impl FnMut() -> u32 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    }
}

/// `cargo xtask plot-attention`: the SVG of the cells of bench-attention JSONs written
/// earlier, titled with the first one's device and page placement.
pub(crate) fn plot(jsons: &[PathBuf], svg: &std::path::Path) -> anyhow::Result<()> {
    #[derive(serde::Deserialize)]
    struct Saved {
        device: String,
        pages: String,
        cells: Vec<Cell>,
    }
    let mut title = String::new();
    let mut cells = Vec::new();
    for json in jsons {
        let saved: Saved =
            serde_json::from_str(&std::fs::read_to_string(json).with_context(|| crate::shown(json))?)
                .with_context(|| format!("--json {}", crate::shown(json)))?;
        if title.is_empty() {
            title = format!("decode attention, {} ({} pages)", saved.device, saved.pages);
        }
        cells.extend(saved.cells);
    }
    std::fs::write(svg, crate::attention_plot::svg(&cells, &title))
        .with_context(|| format!("--svg {}", crate::shown(svg)))?;
    Ok(())
}
