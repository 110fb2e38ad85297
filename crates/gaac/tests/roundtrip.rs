//! Round trips on the fixtures (bases calibrated on the other fixture, and
//! self-calibrated) and on edge shapes: partial blocks, no full block, wider heads,
//! every slot capacity from the smallest to the largest, and the `CacheCodec` path.

use bf16_field::{CacheCodec, KvShape, WordOrder};
use gaac::format::BlockShape;
use gaac::{Bases, EncodeOptions, GaacCodec, cache_info, decode_cache, encode_cache};
use kvcodec_testkit::{fixtures, kv_like};

fn round_trip(cache: &bf16_field::KvCache, options: &EncodeOptions) -> Vec<u8> {
    let bytes = encode_cache(cache, options).unwrap();
    assert_eq!(decode_cache(&bytes).unwrap(), *cache);
    bytes
}

#[test]
fn fixtures_cross_calibrated() {
    let all = fixtures();
    assert_eq!(all.len(), 2, "expected two fixtures");
    for (i, (name, cache)) in all.iter().enumerate() {
        let bases = Bases::calibrate(&all[1 - i].1);
        let options = EncodeOptions { bases: Some(bases), ..Default::default() };
        let bytes = round_trip(cache, &options);
        let info = cache_info(&bytes).unwrap();
        let [(k_coded, k_raw), (v_coded, v_raw)] = info.block_counts();
        // The default slot holds at least 99% of real blocks (spec §4).
        assert!(100 * (k_raw + v_raw) <= k_coded + k_raw + v_coded + v_raw, "{name}: {info}");
    }
}

#[test]
fn fixtures_self_calibrated_with_checksum() {
    for (name, cache) in fixtures() {
        let options = EncodeOptions { checksum: true, ..Default::default() };
        let bytes = round_trip(&cache, &options);
        let header = gaac::CacheHeader::parse(&bytes).unwrap();
        assert_eq!(header.calibration_tokens, Some(128), "{name}");
        assert!(header.checksum.is_some());
    }
}

#[test]
fn edge_shapes() {
    for (layers, heads, head_dim, tokens) in
        [(1, 1, 64, 1), (1, 1, 64, 15), (1, 1, 64, 16), (2, 3, 64, 17), (1, 2, 128, 40), (1, 1, 192, 33)]
    {
        let cache = kv_like(layers, heads, head_dim, tokens, 7);
        round_trip(&cache, &EncodeOptions::default());
        round_trip(
            &cache,
            &EncodeOptions { calibration_tokens: Some(1), checksum: true, ..Default::default() },
        );
    }
}

#[test]
fn every_capacity() {
    let cache = kv_like(1, 2, 64, 64, 3);
    let block = BlockShape::new(64).unwrap();
    let mut last_raw = usize::MAX;
    for capacity in (block.planes_len()..=block.max_coded_len()).step_by(16) {
        let options = EncodeOptions { slot_capacity: Some(capacity), ..Default::default() };
        let bytes = round_trip(&cache, &options);
        let raw = gaac::CacheHeader::parse(&bytes).unwrap().raw_blocks;
        assert!(raw <= last_raw, "a larger slot never stores more blocks raw");
        last_raw = raw;
    }
    assert_eq!(last_raw, 0, "the largest slot holds every block");
}

#[test]
fn codec_trait() {
    let cache = kv_like(2, 2, 64, 35, 11);
    let shape = cache.shape();
    for codec in [
        GaacCodec::default(),
        GaacCodec { bases: Some(Bases::calibrate(&cache)), checksum: true, ..Default::default() },
    ] {
        assert_eq!(codec.word_order(), WordOrder::LayerMajor);
        let bytes = codec.encode(&cache).unwrap();
        assert_eq!(codec.decode(&bytes, shape).unwrap(), cache);
        let other = KvShape::new(2, 2, 64, 34).unwrap();
        assert!(matches!(codec.decode(&bytes, other), Err(gaac::Error::CacheShapeMismatch { .. })));
    }
}

#[test]
fn bases_json_round_trip() {
    let (_, cache) = &fixtures()[0];
    let bases = Bases::calibrate(cache);
    assert_eq!(Bases::from_json(&bases.to_json()).unwrap(), bases);
    assert!(bases.coverage(cache).unwrap() > 0.9);
}
