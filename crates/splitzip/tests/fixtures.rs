//! Real KV fixtures (`fixtures/*.safetensors`, written by `cargo xtask fixtures`):
//! an insta snapshot of each payload's readable summary, and cross-fixture round trips
//! (a codebook calibrated on one fixture encodes another, the SplitZip protocol).
//!
//! Without fixtures these tests print "skipped: ..." and pass, unless
//! `REQUIRE_FIXTURES=1` is set, which turns the skip into a failure.

use std::fmt::Write;

use bf16_field::{KvCache, KvKind};
use splitzip::{Codebook, DEFAULT_CHUNK_SIZE, PayloadHeader, decode, encode};

fn fixtures() -> Vec<(String, KvCache)> {
    let dir = bf16_field::fixtures::dir();
    let paths = bf16_field::fixtures::paths();
    if paths.is_empty() {
        assert!(
            std::env::var_os("REQUIRE_FIXTURES").is_none_or(|v| v != "1"),
            "REQUIRE_FIXTURES=1 but {} holds no *.safetensors",
            dir.display()
        );
        eprintln!("skipped: no fixtures in {} (run `cargo xtask fixtures`)", dir.display());
    }
    paths
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let cache = bf16_field::io::read_kv_cache(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, cache)
        })
        .collect()
}

/// Every K (or V) tensor of the cache, concatenated in layer order.
fn words(cache: &KvCache, kind: KvKind) -> Vec<u16> {
    cache.tensors().filter(|(_, k, _)| *k == kind).flat_map(|(_, _, t)| t.iter().copied()).collect()
}

#[test]
fn fixture_payload_summaries() {
    for (name, cache) in fixtures() {
        let shape = cache.shape();
        let mut report = String::new();
        writeln!(
            report,
            "fixture {name}: {} layers x {} kv heads x {} head_dim x {} tokens",
            shape.layers, shape.kv_heads, shape.head_dim, shape.tokens
        )
        .unwrap();
        for kind in KvKind::BOTH {
            let words = words(&cache, kind);
            let codebook = Codebook::calibrate(&[&words]).unwrap();
            let payload = encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
            assert_eq!(decode(&payload).unwrap(), words, "{name} {kind:?}: lossless");
            let header = PayloadHeader::parse(&payload).unwrap();
            let histogram = bf16_field::stats::Histogram::of_bytes(
                &words.iter().map(|&w| bf16_field::exponent_of(w)).collect::<Vec<_>>(),
            );
            writeln!(
                report,
                "\n== {} (codebook calibrated on this fixture's {}) ==",
                kind.suffix(),
                kind.suffix()
            )
            .unwrap();
            writeln!(
                report,
                "exponents: {} distinct, entropy {:.4} bits, top-16 coverage {:.4}%",
                histogram.distinct(),
                histogram.entropy_bits(),
                100.0 * histogram.top_k_coverage(16)
            )
            .unwrap();
            report.push_str(&header.summary());
        }
        insta::assert_snapshot!(format!("fixture_{name}"), report);
    }
}

#[test]
fn codebook_from_one_fixture_round_trips_another() {
    let all = fixtures();
    if all.len() < 2 {
        eprintln!("skipped: cross-fixture round trip needs two fixtures, found {}", all.len());
        return;
    }
    for (from, calibration) in &all {
        for (to, target) in &all {
            if from == to {
                continue;
            }
            for kind in KvKind::BOTH {
                let codebook = Codebook::calibrate(&[&words(calibration, kind)]).unwrap();
                let words = words(target, kind);
                let payload = encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
                assert_eq!(decode(&payload).unwrap(), words, "{from} -> {to} {kind:?}");
                // Guard, not a benchmark: a KV cache must stay coded and near 12 bits.
                let header = PayloadHeader::parse(&payload).unwrap();
                let ratio = (2 * words.len()) as f64 / payload.len() as f64;
                assert!(!header.is_raw() && ratio > 1.32, "{from} -> {to} {kind:?}: ratio {ratio:.4}");
            }
        }
    }
}
