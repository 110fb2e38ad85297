//! One hand-built corrupt input per decode error, asserting the exact variant and its
//! numbers (snap's `testerrored!` style). Inputs start from the worked example of spec §8
//! (`common::example_page`, `common::example_container`), whose byte map is:
//!
//! ```text
//! page (3344 bytes, zero-aware variant, H = 1, D = 64):
//! 0x000 entry (head 0, K): offset u32 0x10, block bytes bf (zero-aware, b/2 63) 3e (b/2 62), 00 00
//! 0x008 entry (head 0, V): offset u32 0x610, block bytes ff (raw) 3f (b/2 63), 00 00
//! 0x010 K block 0: low bytes 0x010..0x210, code bytes 0x210..0x310
//! 0x310 K block 1      0x610 V block 0 (raw, 1024 bytes)      0xa10 V block 1, to 0xd10
//!
//! container (4160 bytes): the 48-byte header, the page at 0x30..0xd40, then the BF16
//! tail: K's 3 tokens (384 bytes) at 0xd40, V's at 0xec0, to 0x1040.
//! 0x00 "KVZF"  0x04 version 1  0x06 variant 1  0x07 flags 1 (checksum)  0x08 L = 1
//! 0x0c H = 1   0x10 D = 64     0x14 reserved   0x18 T = 19 (u64)        0x20 Adler-32
//! 0x24 header CRC-32C          0x28 8 reserved bytes
//! ```
//!
//! A test that changes a header field recomputes the header CRC (so it reaches the check
//! it names) unless it says otherwise.

mod common;

use bf16_field::integrity::header_crc32c;
use bf16_field::{CacheCodec, KvKind, KvShape};
use kvcodec_testkit::{assert_rejects, corrupt_input};
use zipfusion::{
    Error, PageShape, Variant, ZipfusionCodec, decode_cache, decode_cache_into, decode_page,
    decode_page_into, encode_page, encode_words,
};

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// The header CRC-32C after a change to the header.
fn recrc(c: &mut [u8]) {
    let crc = header_crc32c(&c[..48], 0x24);
    put(c, 0x24, &crc.to_le_bytes());
}

/// Decodes a page as the example's (zero-aware, H = 1, D = 64).
fn page(bytes: &[u8]) -> Result<[Vec<u16>; 2], Error> {
    decode_page(bytes, common::example_shape(), Variant::ZeroAware)
}

/// Decodes a page as a base-variant cache's.
fn base_page(bytes: &[u8]) -> Result<[Vec<u16>; 2], Error> {
    decode_page(bytes, common::example_shape(), Variant::Base)
}

/// Decodes a container with [`decode_cache_into`] into room for the example's values.
fn into(bytes: &[u8]) -> Result<KvShape, Error> {
    let mut out = vec![0u16; common::example_cache().shape().total_values()];
    decode_cache_into(bytes, &mut out)
}

/// Decodes a container with [`ZipfusionCodec`], given the example's shape.
fn codec(bytes: &[u8]) -> Result<bf16_field::KvCache, Error> {
    ZipfusionCodec::default().decode(bytes, common::example_cache().shape())
}

/// A page error as a container reports it: page 0 of layer 0.
fn in_page(source: Error) -> Error {
    Error::InPage { layer: 0, page: 0, source: Box::new(source) }
}

#[test]
fn the_byte_maps_above_are_the_examples() {
    let p = common::example_page();
    assert_eq!(p.len(), 0xd10);
    assert_eq!(&p[..16], &[0x10, 0, 0, 0, 0xbf, 0x3e, 0, 0, 0x10, 0x06, 0, 0, 0xff, 0x3f, 0, 0]);
    let [k, v] = page(&p).unwrap();
    assert_eq!((k, v), common::example_kv());
    let c = common::example_container();
    assert_eq!(c.len(), 0x1040);
    assert_eq!(&c[..8], b"KVZF\x01\x00\x01\x01");
    assert_eq!(&c[0x30..0xd40], &p[..]);
    assert_eq!(&c[0xd40..0xd42], &[0x00, 0x40], "the K tail: 2.0");
    assert_eq!(&c[0xec0..0xec2], &[0x00, 0xc0], "the V tail: -2.0");
    assert_eq!(decode_cache(&c).unwrap(), common::example_cache());
}

// ----- a page (spec §6) ------------------------------------------------------------------
corrupt_input!(page_truncated_in_the_metadata: common::example_page() => |p| p.truncate(15);
    page => Error::Truncated { needed: 16, got: 15 });
// The last entry's blocks end at 0xd10.
corrupt_input!(page_truncated_in_a_block: common::example_page() => |p| p.truncate(0xd0f);
    page => Error::Truncated { needed: 0xd10, got: 0xd0f });
// b/2 = 121: 121 + 7 > 127 would carry into the sign bit.
corrupt_input!(half_base_too_large: common::example_page() => |p| p[5] = 0x79;
    page => Error::HalfBaseTooLarge { head: 0, kind: KvKind::K, block: 1, byte: 0x79 });
corrupt_input!(zero_aware_half_base_too_large: common::example_page() => |p| p[4] = 0xf9;
    page => Error::HalfBaseTooLarge { head: 0, kind: KvKind::K, block: 0, byte: 0xf9 });
// The example's K block 0 is zero-aware: a base cache cannot hold it.
corrupt_input!(zero_aware_block_in_a_base_cache: common::example_page() => |_| ();
    base_page => Error::ZeroAwareBlockInBaseVariant { head: 0, kind: KvKind::K, block: 0, byte: 0xbf });
corrupt_input!(metadata_padding_not_zero: common::example_page() => |p| p[0x0f] = 4;
    page => Error::PaddingNotZero { offset: 0x0f, value: 4 });
corrupt_input!(offset_past_the_page: common::example_page() => |p| put(p, 8, &0x1_0000u32.to_le_bytes());
    page => Error::OffsetPastPage { head: 0, kind: KvKind::V, offset: 0x1_0000, len: 0xd10 });
corrupt_input!(first_offset_not_after_the_metadata: common::example_page() => |p| p[0] = 0x20;
    page => Error::OffsetMismatch { head: 0, kind: KvKind::K, stored: 0x20, expected: 0x10 });
// K block 1 flagged raw beside its coded 768 bytes: V's blocks would start 256 bytes later.
corrupt_input!(raw_flag_beside_a_coded_length: common::example_page() => |p| p[5] = 0xff;
    page => Error::OffsetMismatch { head: 0, kind: KvKind::V, stored: 0x610, expected: 0x710 });
// The last entry's coded block flagged raw: its blocks run 256 bytes past the page.
corrupt_input!(raw_flag_past_the_end: common::example_page() => |p| p[13] = 0xff;
    page => Error::Truncated { needed: 0xe10, got: 0xd10 });
// V block 0 flagged coded beside its raw 1024 bytes: the page ends 256 bytes earlier.
corrupt_input!(coded_flag_beside_a_raw_length: common::example_page() => |p| p[12] = 0x3f;
    page => Error::TrailingBytes { extra: 256 });
corrupt_input!(page_trailing_bytes: common::example_page() => |p| p.push(0);
    page => Error::TrailingBytes { extra: 1 });

#[test]
fn page_arguments_are_checked() {
    let p = common::example_page();
    let shape = common::example_shape();
    let (k, v) = common::example_kv();
    let (mut k_out, mut v_out) = (vec![0u16; 1024], vec![0u16; 1023]);
    assert_eq!(
        decode_page_into(&p, shape, Variant::ZeroAware, &mut k_out, &mut v_out),
        Err(Error::OutputTooSmall { needed: 1024, got: 1023 })
    );
    assert_eq!(k_out, vec![0u16; 1024], "nothing is written on an error");
    let odd = PageShape { kv_heads: 1, head_dim: 48 };
    assert_eq!(decode_page(&p, odd, Variant::Base), Err(Error::HeadDimUnsupported { head_dim: 48 }));
    let headless = PageShape { kv_heads: 0, head_dim: 64 };
    assert_rejects!(decode_page(&p, headless, Variant::Base), Error::InvalidShape { kv_heads: 0, .. });
    // A zero head_dim is reported with the H it came with, not as H = 0.
    let widthless = PageShape { kv_heads: 3, head_dim: 0 };
    assert_eq!(
        decode_page(&p, widthless, Variant::Base),
        Err(Error::InvalidShape { layers: 1, kv_heads: 3, head_dim: 0, tokens: 16 })
    );
    let huge = PageShape { kv_heads: 1 << 16, head_dim: 1 << 10 };
    assert_rejects!(decode_page(&p, huge, Variant::Base), Error::ShapeTooLarge { .. });
    assert_eq!(
        encode_page(&k[1..], &v, shape, Variant::Base),
        Err(Error::WordCountMismatch { got: 1023, expected: 1024 })
    );
    let mut small = vec![0u8; 100];
    assert_eq!(
        zipfusion::encode_page_into(&k, &v, shape, Variant::ZeroAware, &mut small),
        Err(Error::OutputTooSmall { needed: 0xd10, got: 100 })
    );
    assert_eq!(small, vec![0u8; 100], "nothing is written on an error");
}

// ----- a cache container (spec §7.4) -----------------------------------------------------
corrupt_input!(header_truncated: common::example_container() => |c| c.truncate(47);
    decode_cache, into, codec => Error::Truncated { needed: 48, got: 47 });
corrupt_input!(bad_magic: common::example_container() => |c| c[3] = b'X';
    decode_cache, into, codec => Error::BadMagic { found: *b"KVZX" });
corrupt_input!(version_2: common::example_container() => |c| c[4] = 2;
    decode_cache, into, codec => Error::UnsupportedVersion { version: 2 });
corrupt_input!(unknown_variant: common::example_container() => |c| c[6] = 2;
    decode_cache, into, codec => Error::UnknownVariant { variant: 2 });
corrupt_input!(unknown_flag: common::example_container() => |c| c[7] = 3;
    decode_cache, into, codec => Error::UnknownFlags { flags: 3 });
corrupt_input!(reserved_word_not_zero: common::example_container() => |c| c[0x15] = 7;
    decode_cache, into, codec => Error::ReservedNotZero { offset: 0x15, value: 7 });
corrupt_input!(reserved_tail_not_zero: common::example_container() => |c| c[0x2f] = 1;
    decode_cache, into, codec => Error::ReservedNotZero { offset: 0x2f, value: 1 });
// Without the checksum flag the checksum field is reserved (its first byte is nonzero).
corrupt_input!(checksum_without_its_flag: common::example_container() => |c| c[7] = 0;
    decode_cache, into, codec => Error::ReservedNotZero { offset: 0x20, value: common::example_container()[0x20] });
// Bytes 0x2f (reserved) and 0x20 (the checksum field, reserved without its flag) are both
// nonzero: the lower offset is reported.
corrupt_input!(lowest_reserved_byte_first: common::example_container() => |c| { c[7] = 0; c[0x2f] = 1 };
    decode_cache, into, codec => Error::ReservedNotZero { offset: 0x20, value: common::example_container()[0x20] });
// T changed from 19 to 20 without recomputing the CRC.
corrupt_input!(header_crc_mismatch: common::example_container() => |c| c[0x18] = 20;
decode_cache, into, codec => Error::HeaderChecksumMismatch {
    stored: u32::from_le_bytes([c_at(0x24), c_at(0x25), c_at(0x26), c_at(0x27)]),
    computed: {
        let mut h = common::example_container();
        h[0x18] = 20;
        header_crc32c(&h[..48], 0x24)
    },
});

/// Byte `at` of the unmodified example container.
fn c_at(at: usize) -> u8 {
    common::example_container()[at]
}

corrupt_input!(zero_layers: common::example_container() => |c| { c[0x08] = 0; recrc(c) };
    decode_cache, into, codec => Error::InvalidShape { layers: 0, kv_heads: 1, head_dim: 64, tokens: 19 });
corrupt_input!(head_dim_not_a_multiple_of_32: common::example_container() => |c| { c[0x10] = 48; recrc(c) };
    decode_cache, into, codec => Error::HeadDimUnsupported { head_dim: 48 });
// 2^32 - 1 heads of head_dim 2^15: a page could not keep its u32 offsets.
corrupt_input!(shape_too_large: common::example_container() => |c| {
        put(c, 0x0c, &u32::MAX.to_le_bytes());
        put(c, 0x10, &(1u32 << 15).to_le_bytes());
        recrc(c)
    };
    decode_cache, into, codec => Error::ShapeTooLarge { layers: 1, kv_heads: u32::MAX as usize, head_dim: 1 << 15, tokens: 19 });
// T = 2^64 - 1 (a valid CRC): the cache's bytes cannot fit usize.
corrupt_input!(tokens_too_many: common::example_container() => |c| { put(c, 0x18, &u64::MAX.to_le_bytes()); recrc(c) };
decode_cache, into, codec => Error::ShapeTooLarge {
    layers: 1, kv_heads: 1, head_dim: 64, tokens: usize::try_from(u64::MAX).unwrap_or(usize::MAX),
});
// The variant byte changed from zero-aware to base (a valid CRC): the page's zero-aware
// block is then one a base cache cannot hold.
corrupt_input!(zero_aware_page_in_a_base_container: common::example_container() => |c| { c[6] = 0; recrc(c) };
decode_cache, into, codec => in_page(Error::ZeroAwareBlockInBaseVariant {
    head: 0, kind: KvKind::K, block: 0, byte: 0xbf,
}));
// T = 1019: 63 pages of at least 3088 bytes cannot fit 4160 bytes.
corrupt_input!(shorter_than_the_smallest_cache_of_its_shape: common::example_container() => |c| {
        put(c, 0x18, &1019u64.to_le_bytes());
        recrc(c)
    };
    decode_cache => Error::Truncated { needed: 48 + 63 * 3088 + 4 * 11 * 64, got: 0x1040 });
corrupt_input!(a_page_error_names_its_page: common::example_container() => |c| c[0x30 + 5] = 0x7f;
    decode_cache, into, codec => in_page(Error::HalfBaseTooLarge { head: 0, kind: KvKind::K, block: 1, byte: 0x7f }));
corrupt_input!(tail_truncated: common::example_container() => |c| c.truncate(0x103f);
    decode_cache, into, codec => Error::Truncated { needed: 0x1040, got: 0x103f });
corrupt_input!(container_trailing_bytes: common::example_container() => |c| c.extend([0, 0]);
    decode_cache, into, codec => Error::TrailingBytes { extra: 2 });
// The low byte of lane 0's value 2 in K block 0 (page byte 0x12): token 0, channel 8.
// The structure holds; the values do not.
corrupt_input!(checksum_mismatch: common::example_container() => |c| c[0x30 + 0x12] ^= 1;
decode_cache, into, codec => Error::ChecksumMismatch {
    stored: u32::from_le_bytes([c_at(0x20), c_at(0x21), c_at(0x22), c_at(0x23)]),
    computed: {
        assert_eq!(zipfusion::fragment_coords(KvKind::K, 0, 2), (0, 8));
        let mut words = common::example_cache().words_in(bf16_field::WordOrder::LayerMajor);
        words[8] ^= 1;
        bf16_field::integrity::adler32_words(&words)
    },
});

#[test]
fn cache_arguments_are_checked() {
    let c = common::example_container();
    let shape = common::example_cache().shape();
    let mut out = vec![0u16; shape.total_values() - 1];
    assert_eq!(
        decode_cache_into(&c, &mut out),
        Err(Error::OutputTooSmall { needed: shape.total_values(), got: shape.total_values() - 1 })
    );
    assert!(out.iter().all(|&w| w == 0), "nothing is written on an error");
    let codec = ZipfusionCodec::default();
    let other = KvShape { tokens: 20, ..shape };
    assert_eq!(
        codec.decode(&c, other).map(|_| ()),
        Err(Error::CacheShapeMismatch { expected: [1, 1, 64, 20], found: [1, 1, 64, 19] })
    );
    assert_rejects!(codec.decode(&c, KvShape { layers: 0, ..shape }), Error::InvalidShape { layers: 0, .. });
    assert_eq!(
        encode_words(&[0; 5], shape, &Default::default()),
        Err(Error::WordCountMismatch { got: 5, expected: shape.total_values() })
    );
    let odd = KvShape { head_dim: 80, ..shape };
    assert_eq!(codec.encode_words(&[], odd), Err(Error::HeadDimUnsupported { head_dim: 80 }));
}
