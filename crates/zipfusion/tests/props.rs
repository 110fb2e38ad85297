//! Property tests over arbitrary BF16 words (NaN, ±Inf, subnormals, ±0 and exponent 0xFF
//! included) and shapes, plus "never panics" properties over hostile bytes. A failure is
//! persisted in `tests/props.proptest-regressions` (proptest's default beside an
//! integration test) and replayed first on every later run; commit that file.

use bf16_field::{CacheCodec, KvCache, KvShape, WordOrder};
use proptest::prelude::*;
use zipfusion::{PageShape, Variant, ZipfusionCodec, decode_cache, decode_page, max_encoded_len, page_info};

/// One BF16 word: any bit pattern, a special value, an exact zero, or a value in a few
/// exponents around 1.0 (so coded and zero-aware blocks occur, not only raw ones).
fn word() -> impl Strategy<Value = u16> {
    prop_oneof![
        1 => any::<u16>(),
        1 => prop::sample::select(vec![
            0x0000u16, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x0001, 0x807f, 0x0080, 0x7f7f,
        ]),
        1 => Just(0u16),
        12 => (0u16..0x80, 120u16..134, any::<bool>()).prop_map(|(m, e, s)| (s as u16) << 15 | e << 7 | m),
    ]
}

/// A cache of L 1..3, H 1..3, D in {32, 64, 96}, T 1..40 of such words.
fn cache() -> impl Strategy<Value = KvCache> {
    (1usize..3, 1usize..3, prop::sample::select(vec![32usize, 64, 96]), 1usize..40).prop_flat_map(
        |(l, h, d, t)| {
            let n = 2 * l * h * d * t;
            prop::collection::vec(word(), n).prop_map(move |words| {
                let shape = KvShape::new(l, h, d, t).unwrap();
                KvCache::from_words(shape, WordOrder::LayerMajor, words).unwrap()
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_caches_round_trip(cache in cache(), zero_aware in any::<bool>(), checksum in any::<bool>()) {
        let variant = if zero_aware { Variant::ZeroAware } else { Variant::Base };
        let codec = ZipfusionCodec { variant, checksum };
        let bytes = codec.encode(&cache).unwrap();
        prop_assert!(bytes.len() <= max_encoded_len(cache.shape()).unwrap());
        prop_assert_eq!(codec.decode(&bytes, cache.shape()).unwrap(), cache);
    }

    #[test]
    fn arbitrary_pages_round_trip(words in prop::collection::vec(word(), 2 * 16 * 64), zero_aware in any::<bool>()) {
        let variant = if zero_aware { Variant::ZeroAware } else { Variant::Base };
        let shape = PageShape::new(1, 64).unwrap();
        let (k, v) = words.split_at(16 * 64);
        let page = zipfusion::encode_page(k, v, shape, variant).unwrap();
        prop_assert!(page.len() <= shape.max_page_len() && page.len() >= shape.min_page_len());
        prop_assert_eq!(decode_page(&page, shape, variant).unwrap(), [k.to_vec(), v.to_vec()]);
    }

    #[test]
    fn corrupted_containers_never_panic(
        cache in cache(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let codec = ZipfusionCodec { variant: Variant::ZeroAware, checksum: false };
        let bytes = codec.encode(&cache).unwrap();
        let mut bad = bytes.clone();
        for (at, value) in &flips {
            let i = at.index(bad.len());
            bad[i] ^= value | 1;
        }
        // Ok or Err, never a panic; an Ok has the shape the header says.
        if let Ok(decoded) = decode_cache(&bad) {
            prop_assert_eq!(decoded.shape(), zipfusion::CacheHeader::parse(&bad).unwrap().shape);
        }
        let _ = codec.decode(&bad, cache.shape());
        prop_assert!(decode_cache(&bytes[..cut.index(bytes.len())]).is_err());
        // The same flips on the first page alone.
        let info = zipfusion::cache_info(&bytes).unwrap();
        if let Some((offset, page)) = info.pages.first() {
            let mut page_bytes = bytes[*offset..*offset + page.len].to_vec();
            for (at, value) in &flips {
                let i = at.index(page_bytes.len());
                page_bytes[i] ^= value | 1;
            }
            let _ = decode_page(&page_bytes, page.shape, Variant::ZeroAware);
            let _ = page_info(&page_bytes, page.shape, Variant::Base);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
        heads in 1usize..4,
        blocks in 1usize..4,
        magic in any::<bool>(),
    ) {
        let shape = PageShape::new(heads, 32 * blocks).unwrap();
        for variant in Variant::ALL {
            let _ = page_info(&bytes, shape, variant);
            let _ = decode_page(&bytes, shape, variant);
        }
        let mut bytes = bytes;
        if magic && bytes.len() >= 8 {
            bytes[..8].copy_from_slice(b"KVZF\x01\x00\x01\x00");
        }
        let _ = decode_cache(&bytes);
    }
}
