//! Property tests over arbitrary BF16 words (NaN, ±Inf, subnormals, ±0 and exponent 0xFF
//! included) and shapes, plus "never panics" properties over hostile bytes. A failure is
//! persisted in `tests/props.proptest-regressions` (proptest's default beside an
//! integration test) and replayed first on every later run; commit that file.
//!
//! The round-trip properties count the blocks they encoded and assert that every storage
//! (coded, zero-aware, raw) occurred often: a generator whose outliers are too frequent
//! would make nearly every block raw and leave the coded paths untested.

use std::cell::RefCell;

use bf16_field::{CacheCodec, KvCache, KvShape, WordOrder};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use zipfusion::{
    BlockCounts, CacheHeader, PageShape, Variant, ZipfusionCodec, cache_info, decode_cache, decode_page,
    max_encoded_len, page_info,
};

/// Cases per property.
const CASES: u32 = 128;

/// One BF16 word: mostly a value in the exponents 120..134 around 1.0 (a window a coded
/// block holds), rarely an exact zero (which makes its block zero-aware, or raw in a base
/// cache) and rarely a special value or any bit pattern (which makes its block raw). With
/// these weights a 512-value block has an outlier with probability about 0.2 for each
/// rarity, so coded, zero-aware and raw blocks all occur.
fn word() -> impl Strategy<Value = u16> {
    prop_oneof![
        4000 => (0u16..0x80, 120u16..134, any::<bool>()).prop_map(|(m, e, s)| (s as u16) << 15 | e << 7 | m),
        2 => prop::sample::select(vec![0x0000u16, 0x8000]),
        1 => prop::sample::select(vec![
            0x0000u16, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x0001, 0x807f, 0x0080, 0x7f7f,
        ]),
        1 => any::<u16>(),
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

/// Runs `test` on `CASES` values of `strategy` (failures persisted like `proptest!`'s)
/// and returns the blocks the passing cases counted, `[base caches, zero-aware caches]`.
fn counting<S: Strategy>(
    strategy: S,
    test: impl Fn(S::Value) -> Result<(Variant, BlockCounts), TestCaseError>,
) -> [BlockCounts; 2] {
    let config = ProptestConfig { cases: CASES, source_file: Some(file!()), ..ProptestConfig::default() };
    let seen = RefCell::new([BlockCounts::default(); 2]);
    TestRunner::new(config)
        .run(&strategy, |value| {
            let (variant, counts) = test(value)?;
            seen.borrow_mut()[(variant == Variant::ZeroAware) as usize].merge(&counts);
            Ok(())
        })
        .unwrap();
    seen.into_inner()
}

/// Asserts that the round trips met each storage in at least a tenth of their blocks
/// (zero-aware ones only in zero-aware caches, where exact zeros alone make a block so).
fn assert_coverage([base, zero_aware]: [BlockCounts; 2]) {
    for (what, count, total) in [
        ("coded (base caches)", base.coded, base.total()),
        ("raw (base caches)", base.raw, base.total()),
        ("coded (zero-aware caches)", zero_aware.coded, zero_aware.total()),
        ("zero-aware", zero_aware.zero_aware, zero_aware.total()),
        ("raw (zero-aware caches)", zero_aware.raw, zero_aware.total()),
    ] {
        assert!(10 * count >= total && total > 0, "{what} blocks: {count} of {total}");
    }
    assert_eq!(base.zero_aware, 0, "a base cache holds no zero-aware block");
}

#[test]
fn arbitrary_caches_round_trip() {
    let strategy = (cache(), any::<bool>(), any::<bool>());
    assert_coverage(counting(strategy, |(cache, zero_aware, checksum)| {
        let variant = if zero_aware { Variant::ZeroAware } else { Variant::Base };
        let codec = ZipfusionCodec { variant, checksum };
        let bytes = codec.encode(&cache).unwrap();
        prop_assert!(bytes.len() <= max_encoded_len(cache.shape()).unwrap());
        prop_assert_eq!(codec.decode(&bytes, cache.shape()).unwrap(), cache);
        let [k, v] = cache_info(&bytes).unwrap().block_counts();
        let mut counts = k;
        counts.merge(&v);
        Ok((variant, counts))
    }));
}

#[test]
fn arbitrary_pages_round_trip() {
    let strategy = (prop::collection::vec(word(), 2 * 16 * 64), any::<bool>());
    assert_coverage(counting(strategy, |(words, zero_aware)| {
        let variant = if zero_aware { Variant::ZeroAware } else { Variant::Base };
        let shape = PageShape::new(1, 64).unwrap();
        let (k, v) = words.split_at(16 * 64);
        let page = zipfusion::encode_page(k, v, shape, variant).unwrap();
        prop_assert!(page.len() <= shape.max_page_len() && page.len() >= shape.min_page_len());
        prop_assert_eq!(decode_page(&page, shape, variant).unwrap(), [k.to_vec(), v.to_vec()]);
        let [k, v] = page_info(&page, shape, variant).unwrap().block_counts();
        let mut counts = k;
        counts.merge(&v);
        Ok((variant, counts))
    }));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]
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
        header in proptest::option::of((1usize..3, 1usize..40, any::<bool>(), any::<bool>())),
    ) {
        let shape = PageShape::new(heads, 32 * blocks).unwrap();
        for variant in Variant::ALL {
            let _ = page_info(&bytes, shape, variant);
            let _ = decode_page(&bytes, shape, variant);
        }
        let _ = decode_cache(&bytes);
        // A valid header (its CRC-32C included) before the random bytes, so the page walk
        // and the decoders behind it see them.
        if let Some((layers, tokens, zero_aware, checksum)) = header {
            let shape = KvShape::new(layers, heads, 32 * blocks, tokens).unwrap();
            let variant = if zero_aware { Variant::ZeroAware } else { Variant::Base };
            let header = CacheHeader { variant, shape, checksum: checksum.then_some(0x1234_5678) };
            let container = [&header.to_bytes()[..], &bytes].concat();
            prop_assert_eq!(CacheHeader::parse(&container), Ok(header));
            let _ = decode_cache(&container);
            let _ = cache_info(&container);
            let mut out = vec![0u16; shape.total_values()];
            let _ = zipfusion::decode_cache_into(&container, &mut out);
            let _ = ZipfusionCodec { variant, checksum }.decode(&container, shape);
        }
    }
}
