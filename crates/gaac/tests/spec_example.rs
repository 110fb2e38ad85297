//! The worked example of `docs/formats/gaac.md` §8: the container's bytes as a hex dump
//! in the spec (checked against the encoder; `KVCODEC_BLESS=1` rewrites it), its summary
//! as an insta snapshot, and the byte-level facts the spec states about it.

mod common;

use common::{example_cache, example_container};
use gaac::format::BlockShape;
use kvcodec_testkit::{assert_doc_block, format_spec, hexdump};

#[test]
fn container_matches_the_spec() {
    let bytes = example_container();
    assert_eq!(bytes.len(), 64 + 128 + 16 + 2 * 1488 + 2048 + 768);
    assert_doc_block(&format_spec("gaac.md"), "container", &hexdump(&bytes));
    assert_eq!(gaac::decode_cache(&bytes).unwrap(), example_cache());
}

#[test]
fn summary_snapshot() {
    let info = gaac::cache_info(&example_container()).unwrap();
    insta::assert_snapshot!("example_summary", info.to_string());
}

#[test]
fn k_block_as_the_spec_reads_it() {
    let bytes = example_container();
    let slot = &bytes[208..208 + 1488];
    let shape = BlockShape::new(64).unwrap();
    // Tags: group 0 (token 0, channels 0-7) 4-bit, group 9 (token 1, channels 8-15) raw.
    assert_eq!(slot[0], 0x01);
    assert_eq!(slot[2], 0x08);
    assert!(slot[3..32].iter().all(|&b| b == 0));
    let (len, tags) = gaac::block_info(slot, shape, 1488).unwrap();
    assert_eq!((len, tags.offset3, tags.offset4, tags.raw), (1440 + 1 + 5, 126, 1, 1));
    // Status bytes: K coded, V raw.
    assert_eq!(&bytes[192..194], &[0, 1]);
}

#[test]
fn fields_where_the_spec_places_them() {
    let bytes = example_container();
    let slot = &bytes[208..208 + 1488];
    let field = |index: usize| {
        let (at, bit) = gaac::format::plane3_position(index);
        (0..3).map(|k| ((slot[32 + at + 128 * k + (bit / 8) as usize] >> (bit % 8)) & 1) << k).sum::<u8>()
    };
    for index in 0..1024 {
        let (token, channel) = gaac::fragment_coords(bf16_field::KvKind::K, 64, index);
        let expected = match (token, channel) {
            (0, 0) => 3,      // 126 - w, w = 123
            (0, 1..=7) => 4,  // 127 - 123
            (1, 8..=15) => 7, // raw: E mod 8
            _ => 0,           // 127 - b
        };
        assert_eq!(field(index), expected, "token {token} channel {channel}");
    }
}

#[test]
fn fourth_bits_come_before_every_raw_high() {
    // Token 0: group 0 raw (2^16 at channel 0), group 1 4-bit (exponent 135 at channel 8:
    // 135 - 123 = 12, bit 3 set). In group order the raw group comes first, but its highs
    // follow all 4th bits (spec §3.4, §3.5).
    let mut k = vec![0x3f80u16; 16 * 64];
    k[0] = 0x4780;
    k[8] = 0x4380;
    let v = vec![0x3f00u16; 16 * 64];
    let cache =
        bf16_field::KvCache::new(bf16_field::KvShape::new(1, 1, 64, 16).unwrap(), vec![k], vec![v]).unwrap();
    let options = gaac::EncodeOptions { bases: Some(common::example_bases()), ..Default::default() };
    let bytes = gaac::encode_cache(&cache, &options).unwrap();
    let slot = &bytes[208..208 + 1488];
    assert_eq!(slot[0], 0b0110, "group 0 raw, group 1 4-bit");
    assert_eq!(slot[1440], 0x01, "group 1's 4th bits: channel 8 only");
    let high: u64 = [17u64, 15, 15, 15, 15, 15, 15, 15].iter().enumerate().map(|(i, &h)| h << (5 * i)).sum();
    assert_eq!(&slot[1441..1446], &high.to_le_bytes()[..5], "group 0's raw highs");
    assert_eq!(gaac::decode_cache(&bytes).unwrap(), cache);
}
