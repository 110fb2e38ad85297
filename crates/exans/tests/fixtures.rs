//! The real KV fixtures (`fixtures/*.safetensors` at the workspace root, made by
//! `cargo xtask fixtures`): exact round trip, the 1.480 ratio target with every byte of
//! metadata counted, and insta snapshots of readable record summaries (header, centers,
//! model, section sizes) that catch any format or quantizer drift.

use std::fmt::Write as _;

/// The ratio every real fixture must reach at B = 16, all metadata counted.
const RATIO_TARGET: f64 = 1.480;

#[test]
fn real_fixtures_round_trip_reach_the_ratio_target_and_match_their_snapshots() {
    for (name, cache) in kvcodec_testkit::fixtures() {
        let container = exans::encode_cache(&cache, exans::format::DEFAULT_BLOCK_TOKENS).unwrap();
        assert_eq!(exans::decode_cache(&container).unwrap(), cache, "{name} did not round-trip");
        let raw = 2 * cache.shape().total_values();
        let ratio = raw as f64 / container.len() as f64;
        assert!(ratio >= RATIO_TARGET, "{name}: ratio {ratio:.4} < {RATIO_TARGET}");

        let info = exans::container_info(&container).unwrap();
        let s = info.shape;
        let mut summary = String::new();
        writeln!(
            summary,
            "container: L={} H={} D={} T={} B={} blocks={} raw={raw} bytes={} ratio={ratio:.4}",
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            info.block_tokens,
            info.blocks(),
            container.len()
        )
        .unwrap();
        writeln!(summary, "block: record_len K words_per_partition").unwrap();
        let records: Vec<exans::RecordInfo> =
            (0..info.blocks()).map(|b| exans::inspect_record(info.record(&container, b)).unwrap()).collect();
        for (b, r) in records.iter().enumerate() {
            writeln!(summary, "{b:3}: {} {} {:?}", r.record_len, r.model.len(), r.word_counts).unwrap();
        }
        for b in [0, info.blocks() - 1] {
            writeln!(summary, "\n--- block {b} ---\n{}", records[b]).unwrap();
        }
        insta::assert_snapshot!(name, summary);
    }
}
