//! CPU encode and decode throughput of SplitZip on the KV fixtures (GB/s of BF16 input
//! or output, 10^9 bytes/s, median of 15 runs).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p splitzip --example cpu_throughput [FILE.safetensors ...]
//! ```
//!
//! Without arguments it reads every `fixtures/*.safetensors`. The K and the V tensors of
//! each file are one payload each, encoded with a K or V codebook calibrated on another
//! fixture (the SplitZip protocol: calibrate on separate data; on the same file when
//! only one is given) at the default chunk size. Run with `RAYON_NUM_THREADS=1` for
//! per-core numbers.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bf16_field::KvKind;
use splitzip::{Codebook, DEFAULT_CHUNK_SIZE, decode_into, encode_into, max_encoded_len};

const RUNS: usize = 15;

fn fixture_paths() -> Vec<PathBuf> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if !args.is_empty() {
        return args;
    }
    bf16_field::fixtures::paths()
}

/// The median of `RUNS` timings of `f`, after one warm-up call.
fn median_time(mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() {
    let paths = fixture_paths();
    if paths.is_empty() {
        eprintln!("no fixtures found; pass safetensors files or run `cargo xtask fixtures`");
        return;
    }
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
    println!("rayon threads: {} (RAYON_NUM_THREADS={threads})", rayon::current_num_threads());
    let caches: Vec<(String, bf16_field::KvCache)> = paths
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, bf16_field::io::read_kv_cache(p).expect("a KV fixture"))
        })
        .collect();
    let words_of = |cache: &bf16_field::KvCache, kind: KvKind| -> Vec<u16> {
        cache.tensors().filter(|(_, k, _)| *k == kind).flat_map(|(_, _, t)| t.iter().copied()).collect()
    };
    println!(
        "{:<24} {:<2} {:<24} {:>9} {:>8} {:>7} {:>10} {:>10}",
        "file", "kv", "codebook from", "values", "escapes", "ratio", "enc GB/s", "dec GB/s"
    );
    let (mut total_bytes, mut total_enc, mut total_dec) = (0usize, Duration::ZERO, Duration::ZERO);
    for (i, (name, cache)) in caches.iter().enumerate() {
        let (cal_name, cal_cache) = &caches[(i + 1) % caches.len()];
        for kind in [KvKind::K, KvKind::V] {
            let words = words_of(cache, kind);
            let codebook = Codebook::calibrate(&[&words_of(cal_cache, kind)]).expect("non-empty calibration");
            let mut payload = vec![0u8; max_encoded_len(words.len(), DEFAULT_CHUNK_SIZE)];
            let len = encode_into(&words, &codebook, DEFAULT_CHUNK_SIZE, &mut payload).unwrap();
            payload.truncate(len);
            let mut out = vec![0u16; words.len()];
            decode_into(&payload, &mut out).unwrap();
            assert_eq!(out, words, "lossless");
            let header = splitzip::PayloadHeader::parse(&payload).unwrap();

            let mut enc_buf = vec![0u8; max_encoded_len(words.len(), DEFAULT_CHUNK_SIZE)];
            let t_enc = median_time(|| {
                std::hint::black_box(
                    encode_into(std::hint::black_box(&words), &codebook, DEFAULT_CHUNK_SIZE, &mut enc_buf)
                        .unwrap(),
                );
            });
            assert_eq!(enc_buf[..len], payload[..], "deterministic");
            let t_dec = median_time(|| {
                std::hint::black_box(decode_into(std::hint::black_box(&payload), &mut out).unwrap());
            });
            let bytes = 2 * words.len();
            total_bytes += bytes;
            total_enc += t_enc;
            total_dec += t_dec;
            println!(
                "{:<24} {:<2} {:<24} {:>9} {:>8} {:>7.4} {:>10.3} {:>10.3}",
                name,
                kind.suffix(),
                cal_name,
                words.len(),
                header.escape_count,
                bytes as f64 / len as f64,
                gbps(bytes, t_enc),
                gbps(bytes, t_dec)
            );
        }
    }
    println!(
        "{:<24} {:<2} {:<24} {:>9} {:>8} {:>7} {:>10.3} {:>10.3}",
        "all",
        "",
        "",
        total_bytes / 2,
        "",
        "",
        gbps(total_bytes, total_enc),
        gbps(total_bytes, total_dec)
    );
}
