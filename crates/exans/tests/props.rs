//! Property tests over arbitrary BF16 words (NaN, +-Inf, subnormals, +-0 and exponent
//! 0xFF included) and odd shapes, plus "never panics" properties over hostile bytes.
//! A failure is persisted in `tests/props.proptest-regressions` (proptest's default beside
//! an integration test) and replayed first on every later run; commit that file.

mod common;

use bf16_field::{KvCache, KvShape};
use exans::{EncodeOptions, RawPolicy, decode_block, decode_cache};
use proptest::prelude::*;

/// One BF16 word: uniformly any bit pattern, a special value, or a KV-like value near
/// a small set of exponents (so that coded records occur, not only raw ones).
fn word() -> impl Strategy<Value = u16> {
    prop_oneof![
        any::<u16>(),
        prop::sample::select(vec![
            0x0000u16, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x0001, 0x807f, 0x0080,
            0x7f7f,
        ]),
        (0u16..0x80, 122u16..132, any::<bool>()).prop_map(|(m, e, s)| (s as u16) << 15 | e << 7 | m),
        (0u16..0x80, 124u16..128, any::<bool>()).prop_map(|(m, e, s)| (s as u16) << 15 | e << 7 | m),
    ]
}

/// The format version to write: the default (4) or version 3, still written on request.
fn version() -> impl Strategy<Value = Option<u16>> {
    prop_oneof![Just(None), Just(Some(exans::format::VERSION_3))]
}

/// (L, H, D, T, B, words) with `2 L T H D` words.
fn cache_case() -> impl Strategy<Value = (KvCache, usize)> {
    (1usize..4, 1usize..4, 1usize..20, 1usize..24, 1usize..20).prop_flat_map(|(l, h, d, t, b)| {
        let n = 2 * l * h * d * t;
        (prop::collection::vec(word(), n), Just((l, h, d, t, b))).prop_map(|(words, (l, h, d, t, b))| {
            let shape = KvShape::new(l, h, d, t).unwrap();
            let per = t * h * d;
            let mut tensors = words.chunks(per).map(<[u16]>::to_vec);
            let (mut k, mut v) = (Vec::new(), Vec::new());
            for _ in 0..l {
                k.push(tensors.next().unwrap());
                v.push(tensors.next().unwrap());
            }
            (KvCache::new(shape, k, v).unwrap(), b)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_caches_round_trip_every_way((cache, b) in cache_case(), version in version()) {
        for raw in [RawPolicy::Never, RawPolicy::Auto] {
            common::round_trip_with(&cache, b, &EncodeOptions { raw, version, ..Default::default() });
        }
    }

    #[test]
    fn corrupted_records_never_panic(
        (cache, b) in cache_case(),
        version in version(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let container = exans::encode_cache_with(&cache, b, &EncodeOptions {
            raw: RawPolicy::Never,
            version,
            ..Default::default()
        }).unwrap();
        let info = exans::container_info(&container).unwrap();
        let mut record = info.record(&container, 0).to_vec();
        for (at, value) in &flips {
            let i = at.index(record.len());
            record[i] ^= value | 1;
        }
        // Must return, Ok or Err, without panicking; an Ok must have the right length.
        if let Ok((shape, words)) = decode_block(&record) {
            prop_assert_eq!(words.len(), shape.values().unwrap());
        }
        let _ = exans::inspect_record(&record);
        let intact = info.record(&container, 0);
        prop_assert!(decode_block(&intact[..cut.index(intact.len())]).is_err());
        // The same flips on the whole container.
        let mut bytes = container.clone();
        for (at, value) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= value | 1;
        }
        let _ = decode_cache(&bytes);
        prop_assert!(decode_cache(&container[..cut.index(container.len())]).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 8 {
            bytes[..4].copy_from_slice(b"KVXA");
            bytes[4..6].copy_from_slice(&exans::format::VERSION.to_le_bytes());
        }
        let _ = decode_block(&bytes);
        let _ = exans::inspect_record(&bytes);
        if magic && bytes.len() >= 8 {
            bytes[..4].copy_from_slice(b"KVXC");
        }
        let _ = decode_cache(&bytes);
    }
}
