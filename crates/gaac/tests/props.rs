//! Property tests over arbitrary `u16` words (NaN, ±Inf, subnormals, ±0 and exponent
//! 0xFF included): every cache round-trips whatever its bases and slot capacity, a
//! block's length is what its tags say, and decoders never panic on arbitrary bytes.

use bf16_field::{KvCache, KvShape};
use gaac::format::BlockShape;
use gaac::{Bases, EncodeOptions, cache_info, decode_cache, encode_cache};
use proptest::prelude::*;

/// A cache of 1-2 layers, 1-2 heads, head_dim 64 or 128, 1-40 tokens, of arbitrary words
/// mixed with the special values.
fn caches() -> impl Strategy<Value = KvCache> {
    (1usize..=2, 1usize..=2, prop_oneof![Just(64usize), Just(128)], 1usize..=40).prop_flat_map(
        |(l, h, d, t)| {
            let n = l * t * h * d;
            let word = prop_oneof![
                4 => any::<u16>(),
                2 => 0x3c00u16..0x4100,
                1 => prop::sample::select(kvcodec_testkit::special_words()),
            ];
            prop::collection::vec(word, 2 * n).prop_map(move |words| {
                let shape = KvShape::new(l, h, d, t).unwrap();
                KvCache::from_words(shape, bf16_field::WordOrder::LayerMajor, words).unwrap()
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn self_calibrated_round_trip(cache in caches(), tokens in 1usize..=40, checksum: bool, version in 1u16..=2) {
        let options =
            EncodeOptions { calibration_tokens: Some(tokens), checksum, version: Some(version), ..Default::default() };
        let bytes = encode_cache(&cache, &options).unwrap();
        prop_assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), version);
        prop_assert_eq!(decode_cache(&bytes).unwrap(), cache);
    }

    #[test]
    fn arbitrary_bases_and_capacity(cache in caches(), seed: u64, slack in 0usize..=40) {
        let s = cache.shape();
        let bytes: Vec<u8> = (0..2 * s.layers * s.kv_heads * s.head_dim)
            .map(|i| ((seed.rotate_left(i as u32 % 64) ^ i as u64).wrapping_mul(0x9e37_79b9) % 249) as u8)
            .collect();
        let bases = Bases::from_bytes(s.layers, s.kv_heads, s.head_dim, bytes).unwrap();
        let block = BlockShape::new(s.head_dim).unwrap();
        let capacity = (block.planes_len() + 16 * slack).min(block.max_coded_len());
        let options = EncodeOptions { bases: Some(bases), slot_capacity: Some(capacity), ..Default::default() };
        let encoded = encode_cache(&cache, &options).unwrap();
        let info = cache_info(&encoded).unwrap();
        for (len, tags) in info.blocks.iter().flatten().map(|(t, l)| (*l, *t)) {
            prop_assert_eq!(len, block.coded_len(tags.offset4, tags.raw));
            prop_assert!(len <= capacity);
        }
        prop_assert_eq!(decode_cache(&encoded).unwrap(), cache);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = decode_cache(&bytes);
        let _ = cache_info(&bytes);
    }

    #[test]
    fn mutated_containers_never_panic(cache in caches(), at: prop::sample::Index, byte: u8) {
        let mut bytes = encode_cache(&cache, &EncodeOptions::default()).unwrap();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        if i < 60 {
            let crc = bf16_field::integrity::header_crc32c(&bytes[..64], 60);
            bytes[60..64].copy_from_slice(&crc.to_le_bytes());
        }
        match decode_cache(&bytes) {
            Ok(back) => prop_assert_eq!(back.shape().total_values(), cache.shape().total_values()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
