//! `cargo xtask cpu-bench`: the CPU codecs of ZipFusion and GAAC timed on one thread and
//! on every thread (their per-core decode throughput, which `cargo xtask bench` does not
//! separate), with the bench's method (wall-clock medians after warm-ups, GB/s of
//! uncompressed BF16, round trip checked before a number is printed). GAAC's bases come
//! from the bench's calibration input (the same model's other fixture when there is one).

use std::path::PathBuf;

use anyhow::ensure;
use bf16_field::{CacheCodec, KvCache};
use gaac::GaacCodec;
use zipfusion::{Variant, ZipfusionCodec};

use crate::bench::{Method, TileAxis, median_secs};

#[derive(clap::Args)]
pub(crate) struct CpuBenchArgs {
    /// A KV safetensors file; default: every fixture.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Only these codecs (repeat the flag or give a comma list); default: all.
    #[arg(long = "codec", value_delimiter = ',')]
    codecs: Vec<String>,
    /// Timed runs per measurement (median reported), at least 1.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Untimed warm-up runs before timing.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
}

/// Every ZipFusion codec this command times, in table order.
const ZIPFUSION: &[ZipfusionCodec] = &[
    ZipfusionCodec { variant: Variant::Base, checksum: false },
    ZipfusionCodec { variant: Variant::ZeroAware, checksum: false },
];
/// GAAC's row: calibrated bases from another input of the same model.
const GAAC: &str = "gaac";

/// What one row is timed with.
struct Timing<'a> {
    method: &'a Method,
    pools: &'a [Result<rayon::ThreadPool, rayon::ThreadPoolBuildError>],
    name: &'a str,
    cache: &'a KvCache,
}

pub(crate) fn run(args: CpuBenchArgs) -> anyhow::Result<()> {
    let known: Vec<&str> = ZIPFUSION.iter().map(|c| c.name()).chain([GAAC]).collect();
    for c in &args.codecs {
        ensure!(known.contains(&c.as_str()), "--codec {c}: expected one of {}", known.join(", "));
    }
    let wanted = |name: &str| args.codecs.is_empty() || args.codecs.iter().any(|n| n == name);
    let method =
        Method { runs: args.runs as usize, warmup: args.warmup, gpu_bytes: 0, tile: TileAxis::Tokens };
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pools = [1, all].map(|threads| rayon::ThreadPoolBuilder::new().num_threads(threads).build());
    outln!("{}, {all} hardware threads; timed on 1 and on {all} threads", crate::bench::cpu_model())?;
    outln!(
        "{:<16} {:<20} {:>7} {:>7} {:>12} {:>12}",
        "codec",
        "input",
        "ratio",
        "threads",
        "encode GB/s",
        "decode GB/s"
    )?;
    for path in crate::inputs(args.input)? {
        let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let cache = crate::read_cache(&path)?;
        let timing = Timing { method: &method, pools: &pools, name: &name, cache: &cache };
        for codec in ZIPFUSION.iter().filter(|c| wanted(c.name())) {
            time_rows(&timing, codec)?;
        }
        if wanted(GAAC) && gaac::format::BlockShape::new(cache.shape().head_dim).is_none() {
            eprintln!(
                "[cpu-bench] {name}: no gaac row (head_dim {} is not a multiple of 64)",
                cache.shape().head_dim
            );
        } else if wanted(GAAC) {
            let (calibration, source) = crate::bench::calibration_for(&path, None, &cache)?;
            eprintln!("[cpu-bench] {name}: gaac bases from {source}");
            let codec = GaacCodec { bases: Some(gaac::Bases::calibrate(&calibration)), ..Default::default() };
            time_rows(&timing, &codec)?;
        }
    }
    outln!(
        "GB/s of uncompressed BF16; wall-clock median of {} runs after {} warm-ups; decode into a reused buffer",
        method.runs,
        method.warmup
    )?;
    Ok(())
}

/// Times `codec` on `t.cache` on each pool and prints a row per pool.
fn time_rows<C: CacheCodec + Sync>(t: &Timing<'_>, codec: &C) -> anyhow::Result<()> {
    let shape = t.cache.shape();
    // The codec's own word order, gathered outside the timing, as the bench does.
    let words = t.cache.words_in(codec.word_order());
    let encoded = codec.encode_words(&words, shape)?;
    let mut out = vec![0u16; words.len()];
    codec.decode_into(&encoded, shape, &mut out)?;
    ensure!(out == words, "{}: {}: the round trip differs", codec.name(), t.name);
    let bf16 = 2.0 * words.len() as f64;
    for pool in t.pools {
        let pool = pool.as_ref().map_err(|e| anyhow::anyhow!("a thread pool: {e}"))?;
        let (encode, decode) = pool.install(|| -> anyhow::Result<(f64, f64)> {
            let encode = median_secs(t.method, || codec.encode_words(&words, shape).map(drop))?;
            let decode = median_secs(t.method, || codec.decode_into(&encoded, shape, &mut out))?;
            Ok((encode, decode))
        })?;
        outln!(
            "{:<16} {:<20} {:>7.4} {:>7} {:>12.3} {:>12.3}",
            codec.name(),
            t.name,
            bf16 / encoded.len() as f64,
            pool.current_num_threads(),
            bf16 / encode * 1e-9,
            bf16 / decode * 1e-9
        )?;
    }
    Ok(())
}
