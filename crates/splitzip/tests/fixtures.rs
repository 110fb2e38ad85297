//! Real KV fixtures (`fixtures/*.safetensors`, written by `cargo xtask fixtures`):
//! an insta snapshot of each payload's readable summary, and cross-fixture round trips
//! (a codebook calibrated on one fixture encodes another, the SplitZip protocol).

use std::fmt::Write;

use bf16_field::{KvCache, KvKind};
use kvcodec_testkit::fixtures;
use splitzip::{Codebook, DEFAULT_CHUNK_SIZE, PayloadHeader, decode, encode};

/// Every K (or V) tensor of the cache, concatenated in layer order.
fn words(cache: &KvCache, kind: KvKind) -> Vec<u16> {
    cache.tensors_of(kind).collect::<Vec<_>>().concat()
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

/// The table of docs/formats/splitzip.md §8: each fixture's K and V with the codebook
/// of the other fixture's same kind (and one codebook for K and V together), at three
/// chunk sizes.
#[test]
fn cross_calibrated_ratios() {
    let all = fixtures();
    let mut table = String::from("fixture kind calibrated_on escapes coverage ratio@1024 @4096 @32768\n");
    for (to, target) in &all {
        let (from, calibration) = all.iter().find(|(n, _)| n != to).expect("two fixtures");
        let both = |c: &KvCache| [words(c, KvKind::K), words(c, KvKind::V)].concat();
        let cases = [
            ("K", words(target, KvKind::K), words(calibration, KvKind::K)),
            ("V", words(target, KvKind::V), words(calibration, KvKind::V)),
            ("K+V", both(target), both(calibration)),
        ];
        for (kind, words, calibration_words) in cases {
            let codebook = Codebook::calibrate(&[&calibration_words]).unwrap();
            let ratio = |chunk| {
                let payload = encode(&words, &codebook, chunk).unwrap();
                (2 * words.len()) as f64 / payload.len() as f64
            };
            writeln!(
                table,
                "{to} {kind} {from} {} {:.4}% {:.4} {:.4} {:.4}",
                codebook.escape_count(&words),
                100.0 * codebook.coverage(&words),
                ratio(1024),
                ratio(4096),
                ratio(32768)
            )
            .unwrap();
        }
    }
    insta::assert_snapshot!("cross_calibrated_ratios", table);
}
