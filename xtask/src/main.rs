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
    /// Regenerate the real-model KV fixtures (SmolLM2-135M-Instruct, CPU, offline).
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
    /// The main job: every codec on the input, bit-exact round trip checked, one table.
    Bench(bench::BenchArgs),
    /// Build a folder with everything a GPU machine without Rust needs, and print the command to run there.
    GpuBundle {
        /// Output folder.
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
        Command::Bench(args) => bench::run(args),
        Command::GpuBundle { out } => bundle::run(&out),
    }
}

/// The workspace root (the folder above xtask/).
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace root").to_path_buf()
}

/// The committed fixture files, sorted; the default input of `stats` and `bench`.
fn fixture_files() -> anyhow::Result<Vec<PathBuf>> {
    let dir = project_root().join("fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("{}: {e} (run `cargo xtask fixtures`)", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    anyhow::ensure!(!files.is_empty(), "no .safetensors in {} (run `cargo xtask fixtures`)", dir.display());
    Ok(files)
}

/// Resolves `--input` (one file) or the fixtures.
fn inputs(input: Option<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    match input {
        Some(p) => Ok(vec![p]),
        None => fixture_files(),
    }
}
