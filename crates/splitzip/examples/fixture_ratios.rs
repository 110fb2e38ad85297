//! Top-16 coverage and compression ratio of SplitZip on KV fixture files (no timing).
//!
//! ```text
//! cargo run --release -p splitzip --example fixture_ratios [FILE.safetensors ...]
//! ```
//!
//! Without arguments it reads every `fixtures/*.safetensors`. For each file it encodes
//! the K tensors and the V tensors as one payload each, with a K and a V codebook
//! (and, row "kv", all tensors as one payload with one codebook),
//! calibrated either on the same file ("self") or on each other file ("cross", the
//! SplitZip protocol: calibrate on separate data), at several chunk sizes.

use std::path::PathBuf;

use bf16_field::KvKind;
use splitzip::{Codebook, PayloadHeader, decode, encode};

fn fixture_paths() -> Vec<PathBuf> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if !args.is_empty() {
        return args;
    }
    bf16_field::fixtures::paths()
}

fn main() {
    let paths = fixture_paths();
    if paths.is_empty() {
        eprintln!("no fixtures found; pass safetensors files or run `cargo xtask fixtures`");
        return;
    }
    let caches: Vec<(String, bf16_field::KvCache)> = paths
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, bf16_field::io::read_kv_cache(p).expect("a KV fixture"))
        })
        .collect();
    // `None` = K and V together, one codebook for both.
    let words_of = |cache: &bf16_field::KvCache, kind: Option<KvKind>| -> Vec<u16> {
        cache
            .tensors()
            .filter(|(_, k, _)| kind.is_none_or(|kind| *k == kind))
            .flat_map(|(_, _, t)| t.iter().copied())
            .collect()
    };
    println!(
        "{:<24} {:<2} {:<18} {:>6} {:>10} {:>9} {:>10} {:>8} {:>7}",
        "file", "kv", "codebook from", "chunk", "values", "escapes", "coverage%", "bits/val", "ratio"
    );
    for (name, cache) in &caches {
        for kind in [Some(KvKind::K), Some(KvKind::V), None] {
            let words = words_of(cache, kind);
            for (cal_name, cal_cache) in &caches {
                let cal = words_of(cal_cache, kind);
                let codebook = Codebook::calibrate(&[&cal]).expect("non-empty calibration");
                let from = if cal_name == name { "self".to_string() } else { cal_name.clone() };
                for chunk in [1024u32, 4096, 32768] {
                    let payload = encode(&words, &codebook, chunk).unwrap();
                    assert_eq!(decode(&payload).unwrap(), words, "lossless");
                    let h = PayloadHeader::parse(&payload).unwrap();
                    let n = words.len() as f64;
                    println!(
                        "{:<24} {:<2} {:<18} {:>6} {:>10} {:>9} {:>10.4} {:>8.4} {:>7.4}",
                        name,
                        kind.map_or("kv", KvKind::suffix),
                        from,
                        chunk,
                        words.len(),
                        h.escape_count,
                        100.0 * (1.0 - h.escape_count as f64 / n),
                        8.0 * payload.len() as f64 / n,
                        2.0 * n / payload.len() as f64
                    );
                }
            }
        }
        let stats = bf16_field::stats::FieldStats::of_words(&cache.concat_words());
        println!(
            "{name}: exponent entropy {:.3} bits, {} distinct exponents, top-16 coverage {:.4}%, \
             entropy-coded exponent bound {:.4}",
            stats.exponent.entropy_bits(),
            stats.exponent.distinct(),
            100.0 * stats.exponent.top_k_coverage(16),
            stats.exponent_coding_bound()
        );
    }
}
