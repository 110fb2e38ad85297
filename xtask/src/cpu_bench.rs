//! `cargo xtask cpu-bench`: ZipFusion's CPU codec timed on one thread and on every thread
//! (its per-core decode throughput, which `cargo xtask bench` does not separate), with the
//! bench's method (wall-clock medians after warm-ups, GB/s of uncompressed BF16, round
//! trip checked before a number is printed).

use std::path::PathBuf;

use anyhow::ensure;
use bf16_field::CacheCodec;
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

/// Every codec this command times, in table order.
const CODECS: &[ZipfusionCodec] = &[
    ZipfusionCodec { variant: Variant::Base, checksum: false },
    ZipfusionCodec { variant: Variant::ZeroAware, checksum: false },
];

pub(crate) fn run(args: CpuBenchArgs) -> anyhow::Result<()> {
    let known: Vec<&str> = CODECS.iter().map(|c| c.name()).collect();
    for c in &args.codecs {
        ensure!(known.contains(&c.as_str()), "--codec {c}: expected one of {}", known.join(", "));
    }
    let chosen: Vec<&ZipfusionCodec> = CODECS
        .iter()
        .filter(|c| args.codecs.is_empty() || args.codecs.iter().any(|n| n == c.name()))
        .collect();
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
        let shape = cache.shape();
        for codec in &chosen {
            // The codec's own word order, gathered outside the timing, as the bench does.
            let words = cache.words_in(codec.word_order());
            let encoded = codec.encode_words(&words, shape)?;
            let mut out = vec![0u16; words.len()];
            codec.decode_into(&encoded, shape, &mut out)?;
            ensure!(out == words, "{}: {name}: the round trip differs", codec.name());
            let bf16 = 2.0 * words.len() as f64;
            for pool in &pools {
                let pool = pool.as_ref().map_err(|e| anyhow::anyhow!("a thread pool: {e}"))?;
                let (encode, decode) = pool.install(|| -> anyhow::Result<(f64, f64)> {
                    let encode = median_secs(&method, || codec.encode_words(&words, shape).map(drop))?;
                    let decode = median_secs(&method, || codec.decode_into(&encoded, shape, &mut out))?;
                    Ok((encode, decode))
                })?;
                outln!(
                    "{:<16} {:<20} {:>7.4} {:>7} {:>12.3} {:>12.3}",
                    codec.name(),
                    name,
                    bf16 / encoded.len() as f64,
                    pool.current_num_threads(),
                    bf16 / encode * 1e-9,
                    bf16 / decode * 1e-9
                )?;
            }
        }
    }
    outln!(
        "GB/s of uncompressed BF16; wall-clock median of {} runs after {} warm-ups; decode into a reused buffer",
        method.runs,
        method.warmup
    )?;
    Ok(())
}
