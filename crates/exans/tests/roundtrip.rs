//! Round trips of synthetic edge cases through every encoder path (coded, raw, auto) and
//! every decoder path (block, block-into, container). One line per case.

mod common;

use common::round_trip_all;
use exans::inspect_record;
use kvcodec_testkit::{Rng, cache_from, kv_like};

/// `roundtrip!(name, (L, H, D, T), B, |layer, kind, index| word [, check])`: builds the
/// cache, round-trips it every way, then runs `check` on the `Auto` records.
macro_rules! roundtrip {
    ($name:ident, ($l:expr, $h:expr, $d:expr, $t:expr), $b:expr, $word:expr) => {
        roundtrip!($name, ($l, $h, $d, $t), $b, $word, |_records: &[Vec<u8>]| {});
    };
    ($name:ident, ($l:expr, $h:expr, $d:expr, $t:expr), $b:expr, $word:expr, $check:expr) => {
        #[test]
        fn $name() {
            let cache = cache_from($l, $h, $d, $t, $word);
            let records = round_trip_all(&cache, $b);
            assert_eq!(records.len(), cache.shape().block_count($b));
            ($check)(&records);
        }
    };
}

fn all_raw(records: &[Vec<u8>]) {
    assert!(records.iter().all(|r| inspect_record(r).unwrap().raw));
}

fn all_coded(records: &[Vec<u8>]) {
    assert!(records.iter().all(|r| !inspect_record(r).unwrap().raw));
}

fn one_symbol(records: &[Vec<u8>]) {
    all_coded(records);
    for r in records {
        let info = inspect_record(r).unwrap();
        assert_eq!(info.model, vec![(127, 4096)]);
        assert_eq!(info.word_counts, [0; 8]);
    }
}

roundtrip!(all_zeros, (2, 2, 64, 40), 16, |_, _, _| 0, |r: &[Vec<u8>]| {
    all_coded(r);
    one_symbol(r);
});
roundtrip!(signed_zeros, (2, 2, 64, 48), 16, |_, _, i| if i % 3 == 0 { 0x8000 } else { 0 }, one_symbol);
roundtrip!(nan_and_infinities, (2, 2, 32, 20), 16, |_, _, i| [
    0x7fc0, 0xffc0, 0x7f80, 0xff80, 0x7f81, 0xffff, 0x3f80, 0xbf80
][i % 8]);
roundtrip!(subnormals, (1, 2, 64, 16), 16, |_, k, i| ((i % 127) as u16 + 1) | ((k as u16) << 15));
roundtrip!(exponent_ff_only, (1, 1, 64, 32), 16, |_, _, i| 0x7f80 | (i as u16 & 0x807f), one_symbol);
roundtrip!(one_value_per_block, (1, 1, 1, 1), 1, |_, k, _| [0x3f80, 0xc2f7][k]);
roundtrip!(l1_h1_d1, (1, 1, 1, 50), 16, |_, _, i| kvcodec_testkit::bf16(i as f32 * 0.37 - 3.0));
roundtrip!(b1_many_blocks, (3, 2, 8, 9), 1, |l, k, i| kvcodec_testkit::bf16(
    (l * 7 + k * 3 + i) as f32 * 0.01
));
roundtrip!(partial_trailing_block, (2, 3, 64, 37), 16, |l, _, i| kvcodec_testkit::bf16(
    ((i * 31 + l) % 97) as f32 / 64.0
));
roundtrip!(block_larger_than_cache, (2, 1, 16, 5), 16, |_, _, i| kvcodec_testkit::bf16(i as f32));
roundtrip!(
    partitions_shorter_than_32_symbols,
    (1, 1, 3, 5),
    16,
    // N = 30: partitions of 3 or 4 symbols, 28 idle lanes each.
    |_, k, i| kvcodec_testkit::bf16((i + k) as f32 * 0.5 + 0.25)
);
roundtrip!(
    partitions_of_33_symbols,
    (1, 1, 33, 4),
    4,
    // N = 264: 33 symbols per partition, m = 2, lane 16 owns one symbol.
    |_, _, i| kvcodec_testkit::bf16(((i * 7) % 13) as f32 - 6.0)
);
roundtrip!(
    every_exponent_in_one_block,
    (1, 2, 64, 16),
    16,
    |_, k, i| ((i as u16 % 256) << 7) | ((k as u16) << 15) | (i as u16 >> 8),
    |r: &[Vec<u8>]| assert_eq!(inspect_record(&r[0]).unwrap().values, 4096)
);
roundtrip!(
    random_words_fall_back_to_raw,
    (2, 2, 64, 32),
    16,
    {
        let mut rng = Rng(12345);
        move |_, _, _| rng.next() as u16
    },
    all_raw
);

#[test]
fn every_exponent_codes_with_256_symbols_when_forced() {
    let cache = cache_from(1, 2, 64, 16, |_, k, i| ((i as u16 % 256) << 7) | ((k as u16) << 15));
    let groups = cache.block(0, 16).unwrap();
    let shape = exans::BlockShape { layers: 1, kv_heads: 2, head_dim: 64, tokens: 16 };
    let options = exans::EncodeOptions { raw: exans::RawPolicy::Never, ..Default::default() };
    let record = exans::encode_block_with(&groups, shape, &options).unwrap();
    let info = inspect_record(&record).unwrap();
    assert_eq!(info.model.len(), 256);
    assert!(info.model.iter().all(|&(_, f)| f == 16));
    assert_eq!(exans::decode_block(&record).unwrap().1, groups.concat());
}

#[test]
fn kv_like_data_codes_and_compresses() {
    let cache = kv_like(4, 2, 64, 70, 99);
    let records = round_trip_all(&cache, 16);
    all_coded(&records);
    let container = exans::encode_cache(&cache, 16).unwrap();
    let ratio = 2.0 * cache.shape().total_values() as f64 / container.len() as f64;
    assert!(ratio > 1.2, "ratio {ratio}");
}

#[test]
fn low_precisions_round_trip_and_too_many_symbols_fall_back() {
    let cache = kv_like(2, 1, 64, 16, 5);
    let groups = cache.block(0, 16).unwrap();
    let shape = exans::BlockShape { layers: 2, kv_heads: 1, head_dim: 64, tokens: 16 };
    for precision in [4u8, 6, 9, 11, 12] {
        for raw in [exans::RawPolicy::Auto, exans::RawPolicy::Never] {
            let options = exans::EncodeOptions { precision, raw, ..Default::default() };
            match exans::encode_block_with(&groups, shape, &options) {
                Ok(record) => {
                    let info = inspect_record(&record).unwrap();
                    assert!(info.raw || info.precision == precision);
                    assert_eq!(exans::decode_block(&record).unwrap().1, groups.concat());
                }
                Err(e) => {
                    assert_eq!(raw, exans::RawPolicy::Never, "{e}");
                    assert!(matches!(e, exans::Error::UnsupportedPrecisionForEncode { .. }));
                }
            }
        }
    }
}

#[test]
fn payload_boundaries_round_trip() {
    // N around the payload's 512 values (spec §6.4): all in the states (N <= 512, the
    // P values spanning every partition), then a section of N - 512 bytes, one tile
    // of a partition (N = 2048) and a partition boundary inside the payload.
    let mut rng = Rng(17);
    for d in [1usize, 2, 3, 63, 64, 65, 127, 128, 129, 256, 257] {
        let cache = cache_from(1, 1, d, 4, |_, _, _| {
            let r = rng.next();
            (r as u16 & 0x807f) | ((124 + (r >> 16) as u16 % 6) << 7)
        });
        let records = common::round_trip(&cache, 4, exans::RawPolicy::Never);
        let info = inspect_record(&records[0]).unwrap();
        let n = 8 * d;
        assert_eq!(
            (info.version, info.payload_bytes, info.section_bytes[5]),
            (4, n.min(512), n - n.min(512))
        );
        assert_eq!(info.section_bytes.iter().sum::<usize>(), info.record_len);
    }
}
