//! One hand-built bad input per error variant (spec §7, in the table's order), each
//! against every decoder that reads it: `decode_cache` and `cache_info` for containers,
//! the encoder and the bases loaders for their arguments.

mod common;

use bf16_field::{CacheCodec, KvKind, KvShape};
use common::{example_cache, example_container, rehash};
use gaac::{Bases, EncodeOptions, Error, GaacCodec, cache_info, decode_cache, encode_cache};
use kvcodec_testkit::corrupt_input;

/// Offsets in the example container (spec §8): header 0..64, bases 64..192, statuses
/// 192..194 and their padding to 208, the K slot 208..1696 (block 1446 bytes), the V slot
/// 1696..3184 (empty: V is raw), the raw V block 3184..5232, the tails 5232..6000.
const K_SLOT: usize = 208;
const V_SLOT: usize = K_SLOT + 1488;

fn set_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn in_block(kind: KvKind, source: Error) -> Error {
    Error::InBlock { layer: 0, kind, head: 0, block: 0, source: Box::new(source) }
}

// ----- the header (spec §7.1) ----------------------------------------------------------

corrupt_input!(header_truncated: example_container() => |b| b.truncate(10);
    decode_cache, cache_info => Error::Truncated { needed: 64, got: 10 });
corrupt_input!(bad_magic: example_container() => |b| b[0] = b'X';
    decode_cache, cache_info => Error::BadMagic { found: *b"XVGA" });
corrupt_input!(unsupported_version: example_container() => |b| b[4] = 3;
    decode_cache, cache_info => Error::UnsupportedVersion { version: 3 });
corrupt_input!(version_zero: example_container() => |b| b[4] = 0;
    decode_cache, cache_info => Error::UnsupportedVersion { version: 0 });
corrupt_input!(unknown_flags: example_container() => |b| b[6] |= 0x04;
    decode_cache, cache_info => Error::UnknownFlags { flags: 0x05 });
corrupt_input!(reserved_not_zero: example_container() => |b| b[50] = 7;
    decode_cache, cache_info => Error::ReservedNotZero { offset: 50, value: 7 });
corrupt_input!(checksum_field_without_flag: example_container() => |b| b[6] = 0;
    decode_cache, cache_info => Error::ReservedNotZero { offset: 40, value: 0x8e });
// Of several nonzero reserved bytes, the lowest is reported (spec §7.1 row 5), as
// ZipFusion's header does: the unflagged checksum field (40) before bytes 44..60.
corrupt_input!(lowest_reserved_byte_first: example_container() => |b| { b[6] = 0; b[50] = 7 };
    decode_cache, cache_info => Error::ReservedNotZero { offset: 40, value: 0x8e });
corrupt_input!(header_checksum_mismatch: example_container() => |b| b[8] = 2;
    decode_cache, cache_info => Error::HeaderChecksumMismatch { stored: 0xdfa4_762c, computed: 0x7897_66d5 });
corrupt_input!(zero_layers: example_container() => |b| { set_u32(b, 8, 0); rehash(b) };
    decode_cache, cache_info => Error::InvalidShape { layers: 0, kv_heads: 1, head_dim: 64, tokens: 19 });
corrupt_input!(head_dim_unsupported: example_container() => |b| { set_u32(b, 16, 32); rehash(b) };
    decode_cache, cache_info => Error::HeadDimUnsupported { head_dim: 32 });
corrupt_input!(length_overflows: example_container() => |b| {
        set_u32(b, 8, u32::MAX);
        set_u32(b, 12, u32::MAX);
        b[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
        rehash(b)
    };
    decode_cache, cache_info => Error::ShapeTooLarge {
        layers: u32::MAX as usize, kv_heads: u32::MAX as usize, head_dim: 64, tokens: 1 << 40 });
corrupt_input!(slot_capacity_invalid: example_container() => |b| { set_u32(b, 20, 1489); rehash(b) };
    decode_cache, cache_info => Error::SlotCapacityInvalid { capacity: 1489, min: 1440, max: 2080, head_dim: 64 });
corrupt_input!(calibration_tokens_without_flag: example_container() => |b| { set_u32(b, 32, 5); rehash(b) };
    decode_cache, cache_info => Error::CalibrationTokensInvalid { calibration_tokens: 5, self_calibrated: false, tokens: 19 });
corrupt_input!(self_calibrated_on_zero_tokens: example_container() => |b| { b[6] |= 0x02; rehash(b) };
    decode_cache, cache_info => Error::CalibrationTokensInvalid { calibration_tokens: 0, self_calibrated: true, tokens: 19 });
corrupt_input!(more_raw_blocks_than_blocks: example_container() => |b| { set_u32(b, 36, 3); rehash(b) };
    decode_cache, cache_info => Error::RawCountMismatch { stored: 3, counted: 2, blocks: 2 });

// ----- the sections (spec §7.1) --------------------------------------------------------

corrupt_input!(body_truncated: example_container() => |b| { b.pop(); };
    decode_cache, cache_info => Error::Truncated { needed: 6000, got: 5999 });
corrupt_input!(trailing_bytes: example_container() => |b| b.extend([0, 0]);
    decode_cache, cache_info => Error::TrailingBytes { extra: 2 });
corrupt_input!(base_out_of_range: example_container() => |b| b[64 + 70] = 249;
    decode_cache, cache_info => Error::BaseOutOfRange { layer: 0, kind: KvKind::V, head: 0, channel: 6, base: 249 });
corrupt_input!(unknown_block_status: example_container() => |b| b[193] = 2;
    decode_cache, cache_info => Error::UnknownBlockStatus { block: 1, byte: 2 });
corrupt_input!(raw_count_mismatch: example_container() => |b| b[193] = 0;
    decode_cache, cache_info => Error::RawCountMismatch { stored: 1, counted: 0, blocks: 2 });
corrupt_input!(status_padding_not_zero: example_container() => |b| b[200] = 1;
    decode_cache, cache_info => Error::PaddingNotZero { offset: 200, value: 1 });

// ----- a block (spec §7.2) -------------------------------------------------------------

corrupt_input!(unknown_tag: example_container() => |b| b[K_SLOT] = 0x03;
    decode_cache, cache_info => in_block(KvKind::K, Error::UnknownTag { group: 0, head_dim: 64 }));
corrupt_input!(block_exceeds_slot: example_container() => |b| b[K_SLOT + 3..K_SLOT + 32].fill(0xaa);
    decode_cache, cache_info => in_block(KvKind::K, Error::BlockExceedsSlot { len: 2026, capacity: 1488 }));
corrupt_input!(slot_padding_not_zero: example_container() => |b| b[K_SLOT + 1446] = 9;
    decode_cache, cache_info => in_block(KvKind::K, Error::SlotPaddingNotZero { offset: 1446, value: 9 }));
corrupt_input!(raw_block_slot_not_zero: example_container() => |b| b[V_SLOT + 5] = 1;
    decode_cache, cache_info => in_block(KvKind::V, Error::SlotPaddingNotZero { offset: 5, value: 1 }));

/// Version 2 (spec §7.1 row 19): a byte after the header that no structural check sees
/// (a mantissa bit of the K block, a byte of the raw V block or of a tail) fails the
/// checksum of the bytes, before a value is written.
#[test]
fn checksum_mismatch_writes_nothing() {
    let good = example_container();
    for at in [K_SLOT + 32 + 384, V_SLOT + 1488 + 7, good.len() - 1] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x01;
        let mut out = vec![0x5a5au16; example_cache().shape().total_values()];
        let err = gaac::decode_cache_into(&bytes, &mut out).unwrap_err();
        let stored = u32::from_le_bytes(good[40..44].try_into().unwrap());
        let computed = bf16_field::integrity::adler32_bytes(&bytes[64..]);
        assert_eq!(err, Error::ChecksumMismatch { stored, computed }, "byte {at}");
        assert_eq!(decode_cache(&bytes), Err(err), "byte {at}");
        assert!(cache_info(&bytes).is_ok(), "the structure is valid");
        assert!(out.iter().all(|&w| w == 0x5a5a), "byte {at}: nothing written");
    }
}

/// Version 1 (spec §7.1 row 19): the values' checksum, checked after they are written.
#[test]
fn version_1_checksum_mismatch_writes_the_values() {
    let mut bytes = common::as_version_1(&example_container(), &example_cache());
    assert_eq!(decode_cache(&bytes).unwrap(), example_cache(), "a valid version 1 container");
    bytes[K_SLOT + 32 + 384] ^= 0x01; // a mantissa bit of the K block
    let mut out = vec![0u16; example_cache().shape().total_values()];
    let err = gaac::decode_cache_into(&bytes, &mut out).unwrap_err();
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    assert!(cache_info(&bytes).is_ok(), "the structure is valid");
    assert_ne!(out, example_cache().concat_words());
    assert_eq!(out.iter().zip(example_cache().concat_words()).filter(|(a, b)| **a != *b).count(), 1);
}

#[test]
fn output_too_small() {
    let mut out = vec![0u16; 10];
    assert_eq!(
        gaac::decode_cache_into(&example_container(), &mut out),
        Err(Error::OutputTooSmall { needed: 2 * 19 * 64, got: 10 })
    );
    assert!(out.iter().all(|&w| w == 0), "nothing written");
}

#[test]
fn cache_shape_mismatch() {
    let shape = KvShape::new(1, 1, 64, 18).unwrap();
    assert_eq!(
        GaacCodec::default().decode(&example_container(), shape).map(|_| ()),
        Err(Error::CacheShapeMismatch { expected: [1, 1, 64, 18], found: [1, 1, 64, 19] })
    );
}

// ----- encoder arguments ---------------------------------------------------------------

#[test]
fn encoder_arguments() {
    let cache = example_cache();
    let shape = cache.shape();
    let words = cache.concat_words();
    let encode = |options: EncodeOptions| encode_cache(&cache, &options).map(|_| ());
    assert_eq!(
        encode(EncodeOptions { slot_capacity: Some(1456 + 8), ..Default::default() }),
        Err(Error::SlotCapacityInvalid { capacity: 1464, min: 1440, max: 2080, head_dim: 64 })
    );
    assert_eq!(
        encode(EncodeOptions { calibration_tokens: Some(0), ..Default::default() }),
        Err(Error::ZeroCalibrationTokens)
    );
    for version in [0, 3] {
        assert_eq!(
            encode(EncodeOptions { version: Some(version), ..Default::default() }),
            Err(Error::UnsupportedVersion { version })
        );
    }
    let wrong = Bases::from_bytes(2, 1, 64, vec![0; 256]).unwrap();
    assert_eq!(
        encode(EncodeOptions { bases: Some(wrong), ..Default::default() }),
        Err(Error::BasesShapeMismatch { expected: [1, 1, 64], found: [2, 1, 64] })
    );
    assert_eq!(
        gaac::encode_words(&words[1..], shape, &EncodeOptions::default()).map(|_| ()),
        Err(Error::WordCountMismatch { got: words.len() - 1, expected: words.len() })
    );
    let narrow = KvShape::new(1, 1, 32, 16).unwrap();
    assert_eq!(
        gaac::encode_words(&vec![0; narrow.total_values()], narrow, &EncodeOptions::default()).map(|_| ()),
        Err(Error::HeadDimUnsupported { head_dim: 32 })
    );
}

// ----- bases (spec §6) -----------------------------------------------------------------

#[test]
fn bases_errors() {
    assert_eq!(
        Bases::from_bytes(1, 1, 64, vec![0; 127]),
        Err(Error::BasesCountMismatch { what: "bases".into(), got: 127, expected: 128 })
    );
    assert_eq!(
        Bases::from_bytes(0, 1, 64, vec![]),
        Err(Error::InvalidShape { layers: 0, kv_heads: 1, head_dim: 64, tokens: 1 })
    );
    let json = common::example_bases().to_json();
    assert!(matches!(Bases::from_json("{"), Err(Error::BasesJson(_))));
    assert!(matches!(Bases::from_json(&json.replace("127,", "300,")), Err(Error::BasesJson(_))));
    assert_eq!(
        Bases::from_json(&json.replace("\"gaac\"", "\"splitzip\"")),
        Err(Error::BasesNotGaac { codec: "splitzip".into(), version: 1 })
    );
    assert_eq!(
        Bases::from_json(&json.replacen("127,", "", 1)),
        Err(Error::BasesCountMismatch { what: "k[0][0]".into(), got: 63, expected: 64 })
    );
    assert_eq!(
        Bases::from_json(&json.replace("\"layers\":1", "\"layers\":2")),
        Err(Error::BasesCountMismatch { what: "k".into(), got: 1, expected: 2 })
    );
    assert_eq!(
        Bases::from_json(&json.replacen("126", "250", 1)),
        Err(Error::BaseOutOfRange { layer: 0, kind: KvKind::V, head: 0, channel: 0, base: 250 })
    );
    assert!(matches!(Bases::load("/nonexistent/bases.json"), Err(Error::BasesIo { .. })));
}
