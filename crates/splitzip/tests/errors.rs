//! One hand-built payload per decode error, asserting the exact variant (snap's
//! `testerrored!` style). Payloads are spelled out field by field from
//! `docs/formats/splitzip.md`, without the crate's encoder; `base_payloads_are_valid`
//! shows that the unmodified payloads decode and are exactly what the encoder writes.
//! Payloads are version 2 with their header CRC-32C recomputed after a change (so a test
//! reaches the check it names), unless a test says otherwise; version 1 is still read.

use splitzip::{
    Codebook, DecodeError, EncodeOptions, PayloadHeader, decode, decode_into, encode, encode_with,
};

/// A payload, field by field. `bytes()` lays it out; tests change one field.
#[derive(Clone)]
struct Hand {
    magic: [u8; 4],
    version: u16,
    flags: u16,
    value_count: u64,
    chunk_size: u32,
    chunk_count: u32,
    escape_count: u64,
    codebook: [u8; 16],
    /// codes, sign_mantissa, escape_offsets, escape_positions, escape_exponents.
    section_offsets: [u64; 5],
    encoded_len: u64,
    /// Version 2: the Adler-32 of the values (flag bit 1), else 0.
    checksum: u32,
    /// Bytes 104..128 (version 2) or 100..128 minus the checksum (version 1): reserved.
    reserved: [u8; 24],
    /// Version 2: write this instead of the CRC-32C the header's bytes give.
    stale_crc: Option<u32>,
    codes: Vec<u8>,
    sign_mantissa: Vec<u8>,
    escape_offsets: Vec<u32>,
    escape_positions: Vec<u16>,
    escape_exponents: Vec<u8>,
    /// Only for a raw payload (flag bit 0).
    raw_words: Vec<u16>,
}

impl Hand {
    fn bytes(&self) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&self.magic); //                          0..4    magic "KVSZ"
        p.extend_from_slice(&self.version.to_le_bytes()); //          4..6    version
        p.extend_from_slice(&self.flags.to_le_bytes()); //            6..8    flags
        p.extend_from_slice(&self.value_count.to_le_bytes()); //      8..16   n
        p.extend_from_slice(&self.chunk_size.to_le_bytes()); //       16..20  chunk size
        p.extend_from_slice(&self.chunk_count.to_le_bytes()); //      20..24  chunk count
        p.extend_from_slice(&self.escape_count.to_le_bytes()); //     24..32  E
        p.extend_from_slice(&self.codebook); //                       32..48  codebook
        for o in self.section_offsets {
            p.extend_from_slice(&o.to_le_bytes()); //                 48..88  5 section offsets
        }
        p.extend_from_slice(&self.encoded_len.to_le_bytes()); //      88..96  encoded length
        p.extend_from_slice(&[0; 4]); //                              96..100 header CRC (below)
        p.extend_from_slice(&self.checksum.to_le_bytes()); //         100..104 checksum
        p.extend_from_slice(&self.reserved); //                       104..128 reserved
        assert_eq!(p.len(), 128);
        if self.version == 2 {
            let crc = self.stale_crc.unwrap_or_else(|| crc32c::crc32c(&p));
            p[96..100].copy_from_slice(&crc.to_le_bytes());
        }
        if self.flags & 1 == 1 {
            p.extend(self.raw_words.iter().flat_map(|w| w.to_le_bytes())); // 128.. raw words
            return p;
        }
        // Each section at its offset, zero padding before it.
        let place = |p: &mut Vec<u8>, at: u64, bytes: &[u8]| {
            while (p.len() as u64) < at {
                p.push(0);
            }
            p.extend_from_slice(bytes);
        };
        let [codes, sm, offsets, positions, exponents] = self.section_offsets;
        place(&mut p, codes, &self.codes);
        place(&mut p, sm, &self.sign_mantissa);
        let o: Vec<u8> = self.escape_offsets.iter().flat_map(|x| x.to_le_bytes()).collect();
        place(&mut p, offsets, &o);
        let e: Vec<u8> = self.escape_positions.iter().flat_map(|x| x.to_le_bytes()).collect();
        place(&mut p, positions, &e);
        place(&mut p, exponents, &self.escape_exponents);
        p
    }
}

const CODEBOOK: [u8; 16] =
    [0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83];
/// Escaped values (global index, exponent): chunk 0 position 5, chunk 2 positions 6 and 30.
const ESCAPES: [(u64, u8); 3] = [(5, 0x00), (70, 0xff), (94, 0x01)];

/// A coded payload of `n` (95 or 96) values in chunks of 32: every value has code 1
/// (exponent 0x75) except the three escapes; sign+mantissa byte of value i is i.
fn coded(n: u64) -> Hand {
    let code = |i: u64| if ESCAPES.iter().any(|&(at, _)| at == i) { 0 } else { 1 };
    Hand {
        magic: *b"KVSZ",
        version: 2,
        flags: 0,
        value_count: n,
        chunk_size: 32,
        chunk_count: 3,
        escape_count: 3,
        codebook: CODEBOOK,
        // codes 48 bytes @128; sign+mantissa n bytes @176; 4 offsets @272 (16 bytes);
        // 3 positions @288 (6 bytes, then 10 zero bytes); 3 exponents @304.
        section_offsets: [128, 176, 272, 288, 304],
        encoded_len: 307,
        checksum: 0,
        reserved: [0; 24],
        stale_crc: None,
        // Two codes per byte, value 2i in the low nibble; the high nibble past n is 0.
        codes: (0..n).step_by(2).map(|i| code(i) | if i + 1 < n { code(i + 1) << 4 } else { 0 }).collect(),
        sign_mantissa: (0..n).map(|i| i as u8).collect(),
        escape_offsets: vec![0, 1, 1, 3], // chunk 0: 1 escape, chunk 1: 0, chunk 2: 2
        escape_positions: vec![5, 6, 30],
        escape_exponents: ESCAPES.map(|(_, e)| e).to_vec(),
        raw_words: vec![],
    }
}

/// The words `coded(n)` holds.
fn coded_words(n: u64) -> Vec<u16> {
    (0..n)
        .map(|i| {
            let e = ESCAPES.iter().find(|&&(at, _)| at == i).map_or(0x75, |&(_, e)| e);
            bf16_field::join(e, i as u8)
        })
        .collect()
}

/// A raw payload of the three words 1.0, -2.0 and the smallest subnormal.
fn raw() -> Hand {
    Hand {
        flags: 1,
        value_count: 3,
        chunk_size: 1024,
        chunk_count: 0,
        escape_count: 0,
        section_offsets: [0; 5],
        encoded_len: 128 + 6,
        codes: vec![],
        sign_mantissa: vec![],
        escape_offsets: vec![],
        escape_positions: vec![],
        escape_exponents: vec![],
        raw_words: vec![0x3f80, 0xc000, 0x0001],
        ..coded(96)
    }
}

#[test]
fn base_payloads_are_valid() {
    let codebook = Codebook::new(CODEBOOK).unwrap();
    for n in [95, 96] {
        let payload = coded(n).bytes();
        assert_eq!(payload.len(), 307);
        assert_eq!(decode(&payload).unwrap(), coded_words(n), "n = {n}");
        assert_eq!(encode(&coded_words(n), &codebook, 32).unwrap(), payload, "the encoder agrees, n = {n}");
    }
    let payload = raw().bytes();
    assert_eq!(decode(&payload).unwrap(), [0x3f80, 0xc000, 0x0001]);
    assert_eq!(encode(&[0x3f80, 0xc000, 0x0001], &codebook, 1024).unwrap(), payload);
    // With the checksum (flag bit 1).
    for base in [coded(96), raw()] {
        let words = if base.flags & 1 == 1 { base.raw_words.clone() } else { coded_words(96) };
        let options = EncodeOptions { chunk_size: base.chunk_size, checksum: true };
        let hand = Hand { flags: base.flags | 2, checksum: adler(&words), ..base };
        assert_eq!(decode(&hand.bytes()).unwrap(), words);
        assert_eq!(encode_with(&words, &codebook, &options).unwrap(), hand.bytes());
    }
}

/// Adler-32 of words as little-endian bytes, by its definition (RFC 1950).
fn adler(words: &[u16]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for byte in words.iter().flat_map(|w| w.to_le_bytes()) {
        a = (a + byte as u32) % 65521;
        b = (b + a) % 65521;
    }
    b << 16 | a
}

/// `hand` as version 1: no header CRC, no checksum field (bytes 96..128 reserved).
fn v1(hand: Hand) -> Vec<u8> {
    Hand { version: 1, ..hand }.bytes()
}

#[test]
fn version_1_is_still_read() {
    for n in [95, 96] {
        assert_eq!(decode(&v1(coded(n))).unwrap(), coded_words(n));
    }
    assert_eq!(decode(&v1(raw())).unwrap(), [0x3f80, 0xc000, 0x0001]);
    assert_eq!(PayloadHeader::parse(&v1(coded(96))).unwrap().version, 1);
    // A corrupted value count that version 1 cannot detect (the sections' 16-byte
    // alignment hides one more value), which version 2's header CRC does.
    let mut old = v1(coded(95));
    old[8] = 96;
    assert_eq!(decode(&old).unwrap().len(), 96);
    let mut new = coded(95).bytes();
    new[8] = 96;
    assert!(matches!(decode(&new), Err(DecodeError::HeaderChecksumMismatch { .. })));
}

#[test]
fn checksum_mismatch_reports_both_and_leaves_the_values() {
    let words = coded_words(96);
    let good = adler(&words);
    let payload = Hand { flags: 2, checksum: good ^ 1, ..coded(96) }.bytes();
    let err = DecodeError::ChecksumMismatch { stored: good ^ 1, computed: good };
    assert_eq!(decode(&payload), Err(err.clone()));
    let mut out = vec![0u16; 96];
    assert_eq!(decode_into(&payload, &mut out), Err(err));
    assert_eq!(out, words, "the values the payload holds are written");
    // One flipped sign+mantissa bit (byte 176 + 10) decodes silently without the
    // checksum, and is caught with it.
    let checked = Hand { flags: 2, checksum: good, ..coded(96) }.bytes();
    for mut payload in [coded(96).bytes(), checked] {
        payload[186] ^= 0x04;
        let result = decode(&payload);
        let has_checksum = payload[6] & 2 != 0;
        assert_eq!(result.is_err(), has_checksum, "{result:?}");
    }
}

/// Decodes into an output that must stay untouched when decoding fails.
fn decode_into_untouched(payload: &[u8]) -> Result<usize, DecodeError> {
    let mut out = vec![0x5a5au16; 200];
    let result = decode_into(payload, &mut out);
    assert!(result.is_ok() || out.iter().all(|&w| w == 0x5a5a), "nothing written on error");
    result
}

/// `PayloadHeader::parse` fails the same way as the decoders, or succeeds (body errors).
fn parse_or_body_error(payload: &[u8]) -> Result<(), DecodeError> {
    let expected = decode(payload).err();
    match PayloadHeader::parse(payload) {
        Err(e) => Err(e),
        Ok(_) => expected.map_or(Ok(()), Err),
    }
}

/// `testerrored!(name, payload, error)` (snap's name): decoding `payload` fails with
/// exactly `error` through `decode`, `decode_into` (which leaves its output untouched)
/// and, for header errors, `PayloadHeader::parse`.
macro_rules! testerrored {
    ($name:ident, $payload:expr, $err:expr) => {
        kvcodec_testkit::corrupt_input!($name: $payload => |_| {};
            decode, decode_into_untouched, parse_or_body_error => $err);
    };
}

/// `coded(96)` with one change.
fn coded_with(change: impl FnOnce(&mut Hand)) -> Vec<u8> {
    let mut h = coded(96);
    change(&mut h);
    h.bytes()
}

fn raw_with(change: impl FnOnce(&mut Hand)) -> Vec<u8> {
    let mut h = raw();
    change(&mut h);
    h.bytes()
}

// --- Header (spec §5, steps 1-13) ---------------------------------------------------

// 100 bytes: not even a header.
testerrored!(
    truncated_header,
    coded(96).bytes()[..100].to_vec(),
    DecodeError::Truncated { needed: 128, got: 100 }
);
// Magic "KVSQ".
testerrored!(bad_magic, coded_with(|h| h.magic = *b"KVSQ"), DecodeError::BadMagic { found: *b"KVSQ" });
// Version 3.
testerrored!(
    unsupported_version,
    coded_with(|h| h.version = 3),
    DecodeError::UnsupportedVersion { version: 3 }
);
// Flags 0x0004: bit 2 is not defined.
testerrored!(unknown_flags, coded_with(|h| h.flags = 4), DecodeError::UnknownFlags { flags: 4 });
// Version 1 flags 0x0002: the checksum bit came with version 2.
testerrored!(unknown_flags_v1, v1(Hand { flags: 2, ..coded(96) }), DecodeError::UnknownFlags { flags: 2 });
// Reserved byte 104 + 5 = 109 set.
testerrored!(
    reserved_not_zero,
    coded_with(|h| h.reserved[5] = 1),
    DecodeError::ReservedNotZero { offset: 109 }
);
// A checksum without the checksum flag.
testerrored!(
    checksum_without_flag,
    coded_with(|h| h.checksum = 0x0100),
    DecodeError::ReservedNotZero { offset: 100 }
);
// Version 1: byte 101 is reserved.
testerrored!(
    reserved_not_zero_v1,
    v1(Hand { checksum: 0x0100, ..coded(96) }),
    DecodeError::ReservedNotZero { offset: 101 }
);
// n = 95 under the CRC of n = 96: every field is valid on its own (the sections of 95
// and 96 values lie at the same offsets), only the CRC catches it.
testerrored!(
    header_checksum_mismatch,
    {
        let stale = u32::from_le_bytes(coded(96).bytes()[96..100].try_into().unwrap());
        let mut h = coded(96);
        h.value_count = 95;
        h.codes[47] &= 0x0f;
        h.stale_crc = Some(stale);
        h.bytes()
    },
    DecodeError::HeaderChecksumMismatch {
        stored: u32::from_le_bytes(coded(96).bytes()[96..100].try_into().unwrap()),
        computed: u32::from_le_bytes(coded(95).bytes()[96..100].try_into().unwrap()),
    }
);
// Chunk size 48: not a power of two.
testerrored!(
    chunk_size_not_power_of_two,
    coded_with(|h| h.chunk_size = 48),
    DecodeError::ChunkSizeInvalid { chunk_size: 48 }
);
// Chunk size 16: below the minimum of 32.
testerrored!(
    chunk_size_too_small,
    coded_with(|h| h.chunk_size = 16),
    DecodeError::ChunkSizeInvalid { chunk_size: 16 }
);
// Chunk size 65536: above the maximum of 32768.
testerrored!(
    chunk_size_too_large,
    coded_with(|h| h.chunk_size = 65536),
    DecodeError::ChunkSizeInvalid { chunk_size: 65536 }
);
// Codebook entry 9 repeats entry 2 (0x76).
testerrored!(
    codebook_duplicate,
    coded_with(|h| h.codebook[9] = 0x76),
    DecodeError::CodebookDuplicate { exponent: 0x76 }
);
// n = 2^63: 128 + 2n overflows u64.
testerrored!(
    length_overflow,
    coded_with(|h| h.value_count = 1 << 63),
    DecodeError::LengthOverflow { value_count: 1 << 63 }
);
// Chunk count 4, but ceil(96 / 32) = 3.
testerrored!(
    chunk_count_mismatch,
    coded_with(|h| h.chunk_count = 4),
    DecodeError::ChunkCountMismatch { stored: 4, expected: 3 }
);
// A raw payload must store chunk count 0.
testerrored!(
    raw_chunk_count_not_zero,
    raw_with(|h| h.chunk_count = 1),
    DecodeError::ChunkCountMismatch { stored: 1, expected: 0 }
);
// E = 97 > n = 96.
testerrored!(
    escape_count_above_n,
    coded_with(|h| h.escape_count = 97),
    DecodeError::EscapeCountOutOfRange { escapes: 97, max: 96 }
);
// A raw payload must store E = 0.
testerrored!(
    raw_escape_count_not_zero,
    raw_with(|h| h.escape_count = 1),
    DecodeError::EscapeCountOutOfRange { escapes: 1, max: 0 }
);
// Sign+mantissa offset 192; n = 96 puts it at 128 + 48 = 176.
testerrored!(
    section_offset_mismatch,
    coded_with(|h| h.section_offsets[1] = 192),
    DecodeError::SectionOffsetMismatch { section: "sign_mantissa", stored: 192, expected: 176 }
);
// Escape exponents offset 320: E = 3 puts it at align16(288 + 6) = 304.
testerrored!(
    escape_exponents_offset_mismatch,
    coded_with(|h| h.section_offsets[4] = 320),
    DecodeError::SectionOffsetMismatch { section: "escape_exponents", stored: 320, expected: 304 }
);
// A raw payload must store every section offset as 0.
testerrored!(
    raw_section_offset_not_zero,
    raw_with(|h| h.section_offsets[0] = 128),
    DecodeError::SectionOffsetMismatch { section: "codes", stored: 128, expected: 0 }
);
// Encoded length field 308, layout implies 307.
testerrored!(
    encoded_len_mismatch,
    coded_with(|h| h.encoded_len = 308),
    DecodeError::EncodedLengthMismatch { stored: 308, expected: 307 }
);
// Raw: 128 + 2 * 3 = 134, field says 135.
testerrored!(
    raw_encoded_len_mismatch,
    raw_with(|h| h.encoded_len = 135),
    DecodeError::EncodedLengthMismatch { stored: 135, expected: 134 }
);
// E = 9: positions @288 (18 bytes), exponents @320, end 329 > raw 128 + 192 = 320.
testerrored!(
    coded_larger_than_raw,
    coded_with(|h| {
        h.escape_count = 9;
        h.section_offsets[4] = 320;
        h.encoded_len = 329;
    }),
    DecodeError::CodedLargerThanRaw { coded: 329, raw: 320 }
);

// --- Length (spec §5, steps 14-15) ---------------------------------------------------

// The last escape exponent is missing: 306 of 307 bytes.
testerrored!(
    truncated_body,
    coded(96).bytes()[..306].to_vec(),
    DecodeError::Truncated { needed: 307, got: 306 }
);
// Raw payload missing its last byte.
testerrored!(truncated_raw, raw().bytes()[..133].to_vec(), DecodeError::Truncated { needed: 134, got: 133 });
// One byte after the end.
testerrored!(
    trailing_bytes,
    {
        let mut p = coded(96).bytes();
        p.push(0);
        p
    },
    DecodeError::TrailingBytes { extra: 1 }
);

#[test]
fn output_too_small() {
    let mut out = vec![0x5a5au16; 95];
    assert_eq!(
        decode_into(&coded(96).bytes(), &mut out),
        Err(DecodeError::OutputTooSmall { needed: 96, got: 95 })
    );
    assert!(out.iter().all(|&w| w == 0x5a5a));
    let mut out = vec![0u16; 2];
    assert_eq!(decode_into(&raw().bytes(), &mut out), Err(DecodeError::OutputTooSmall { needed: 3, got: 2 }));
}

// --- Body (spec §5, steps 17-23) ------------------------------------------------------

// n = 95: the high nibble of code byte 47 (offset 175) is padding and holds 1.
testerrored!(
    padding_nibble_not_zero,
    {
        let mut h = coded(95);
        h.codes[47] |= 0x10;
        h.bytes()
    },
    DecodeError::PaddingNotZero { offset: 175 }
);
// n = 95: the byte between sign+mantissa (ends at 271) and the escape offsets (272).
testerrored!(
    padding_after_sign_mantissa_not_zero,
    {
        let mut p = coded(95).bytes();
        p[271] = 0x80;
        p
    },
    DecodeError::PaddingNotZero { offset: 271 }
);
// The 10 bytes between positions (end 294) and exponents (304): byte 300 set.
testerrored!(
    padding_after_positions_not_zero,
    {
        let mut p = coded(96).bytes();
        p[300] = 1;
        p
    },
    DecodeError::PaddingNotZero { offset: 300 }
);
// Escape offsets [1, 1, 1, 3]: entry 0 must be 0.
testerrored!(
    escape_offsets_start_not_zero,
    coded_with(|h| h.escape_offsets = vec![1, 1, 1, 3]),
    DecodeError::EscapeOffsetsStartNotZero { first: 1 }
);
// Escape offsets [0, 2, 1, 3]: chunk 1 would have -1 escapes.
testerrored!(
    escape_offsets_not_monotonic,
    coded_with(|h| h.escape_offsets = vec![0, 2, 1, 3]),
    DecodeError::EscapeOffsetsNotMonotonic { chunk: 1, start: 2, end: 1 }
);
// Escape offsets [0, 1, 1, 2]: end 2, header E = 3.
testerrored!(
    escape_offsets_end_mismatch,
    coded_with(|h| h.escape_offsets = vec![0, 1, 1, 2]),
    DecodeError::EscapeOffsetsEndMismatch { last: 2, escape_count: 3 }
);
// Chunk 2 position 32: chunk 2 holds 32 values (0..=31).
testerrored!(
    escape_position_out_of_range,
    coded_with(|h| h.escape_positions[2] = 32),
    DecodeError::EscapePositionOutOfRange { chunk: 2, position: 32, chunk_len: 32 }
);
// n = 95: chunk 2 holds 31 values, so position 31 is out of range.
testerrored!(
    escape_position_past_partial_chunk,
    {
        let mut h = coded(95);
        h.escape_positions[2] = 31;
        h.bytes()
    },
    DecodeError::EscapePositionOutOfRange { chunk: 2, position: 31, chunk_len: 31 }
);
// Chunk 2 positions [30, 6]: not increasing.
testerrored!(
    escape_positions_unsorted,
    coded_with(|h| h.escape_positions = vec![5, 30, 6]),
    DecodeError::EscapePositionsUnsorted { chunk: 2, previous: 30, position: 6 }
);
// Chunk 2 positions [6, 6]: a repeat is not strictly increasing.
testerrored!(
    escape_positions_repeated,
    coded_with(|h| h.escape_positions = vec![5, 6, 6]),
    DecodeError::EscapePositionsUnsorted { chunk: 2, previous: 6, position: 6 }
);
// Chunk 2 position 6 escapes exponent 0x75, which has code 1.
testerrored!(
    escaped_exponent_in_codebook,
    coded_with(|h| h.escape_exponents[1] = 0x75),
    DecodeError::EscapedExponentInCodebook { chunk: 2, position: 6, exponent: 0x75 }
);
// Code byte 2 = 0x11: value 5 (escaped) has code 1 instead of 0.
testerrored!(
    escape_code_not_zero,
    coded_with(|h| h.codes[2] = 0x11),
    DecodeError::EscapeCodeNotZero { chunk: 0, position: 5, code: 1 }
);

#[test]
fn header_alone_parses_and_reports_the_length() {
    let payload = coded(96).bytes();
    let header = PayloadHeader::parse(&payload[..128]).unwrap();
    assert_eq!((header.value_count, header.encoded_len(), header.chunk_count()), (96, 307, 3));
    assert_eq!(header.escape_count, 3);
    assert!(!header.is_raw());
    assert_eq!(header.to_bytes().as_slice(), &payload[..128]);
    let header = PayloadHeader::parse(&raw().bytes()).unwrap();
    assert_eq!((header.value_count, header.encoded_len(), header.is_raw()), (3, 134, true));
}

#[test]
fn every_truncation_is_an_error() {
    for payload in [coded(95).bytes(), coded(96).bytes(), raw().bytes()] {
        for len in 0..payload.len() {
            let needed = if len < 128 { 128 } else { payload.len() as u64 };
            assert_eq!(decode(&payload[..len]), Err(DecodeError::Truncated { needed, got: len as u64 }));
        }
    }
}
