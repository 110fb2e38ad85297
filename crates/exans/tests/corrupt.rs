//! One hand-built corrupt input per error variant, asserting the exact variant and its
//! numbers. Records start from the worked example of spec §9 (`common::example_record`),
//! whose byte map is:
//!
//! ```text
//! 0x000 magic "KVXA"      0x004 version 4      0x006 flags 0
//! 0x008 L=1  0x00a H=1  0x00c D=33  0x00e B'=8  0x010 N=528  0x014 record_len=1168
//! 0x018 precision 12  0x019 partitions 8  0x01a lanes 32  0x01b reserved
//! 0x01c model_offset 0x32  0x020 directory 0x50  0x024 words 0x470  0x028 sm 0x480
//! 0x02c checksum u32 (0: flag bit 1 clear)
//! 0x030 centers [127, 126]
//! 0x032 K=7, entries (sym, freq u16) at 0x034 (67,8) 0x037 (107,8) 0x03a (117,8)
//!       0x03d (124,8) 0x040 (127,4048) 0x043 (135,8) 0x046 (157,8); padding 0x049..0x050
//! 0x050 word counts [3, 0, 0, 0, 0, 0, 0, 0]
//! 0x070 final states, partition p lane j at 0x070 + 4 (32 p + j); the first P = 512
//!       values' sign+mantissa bytes travel in the lanes' initial rANS states (the
//!       decoder's end states): lane k = 32 p + j carries values 2k and 2k + 1
//! 0x470 partition 0's words 0xe018 0x4000 0x0010; padding 0x476..0x480
//! 0x480 N - P = 16 sign+mantissa bytes (values 512..528), to 0x490
//! ```
//!
//! Version 3 records (every lane at exactly 2^16, a section of all N bytes) start from
//! the same block's version 3 record (`common::example_record_v3`, the dump of spec §9
//! before version 4): the same bytes up to 0x470 but for the version, record_len 0x690
//! and the states (no payload), then the words 0xe018 0xc000 0x0010 (partition 0 lane 3
//! starts at 2^16, not 2^16 + 0x40, so its word differs) and 528 sign+mantissa bytes.

mod common;

use exans::format::header;
use exans::{BlockShape, EncodeOptions, Error, RawPolicy, decode_block, decode_block_into};

fn put(r: &mut [u8], at: usize, bytes: &[u8]) {
    r[at..at + bytes.len()].copy_from_slice(bytes);
}

/// `rejects!(name, |record| mutation, expected error)`: the example record, corrupted,
/// fails `decode_block` with exactly that error.
macro_rules! rejects {
    ($name:ident, $mutate:expr, $expected:expr) => {
        kvcodec_testkit::corrupt_input!($name: common::example_record() => $mutate; decode_block => $expected);
    };
}

/// The Adler-32 of the example block (RFC 1950, byte by byte).
fn example_adler() -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for byte in common::example_block().1.concat().iter().flat_map(|w| w.to_le_bytes()) {
        a = (a + byte as u32) % 65521;
        b = (b + a) % 65521;
    }
    b << 16 | a
}

#[test]
fn version_3_is_still_read() {
    let r = common::example_record_v3();
    assert_eq!(r.len(), 0x690);
    assert_eq!(decode_block(&r).unwrap().1, common::example_block().1.concat());
    let info = exans::inspect_record(&r).unwrap();
    assert_eq!((info.version, info.payload_bytes, info.section_bytes[5]), (3, 0, 528));
    // The same block's version 4 record differs in the version, record_len, the states,
    // one word and the section: 512 bytes shorter.
    let v4 = common::example_record();
    assert_eq!(common::parse_hexdump(&kvcodec_testkit::hexdump(&v4)), v4, "the dump parser");
    assert_eq!(v4.len() + 512, r.len());
    assert_eq!(r[..4], v4[..4]);
    assert_eq!(r[0x28..0x70], v4[0x28..0x70]);
    // Lane 3 of partition 0 starts at 2^16 in version 3 and at 2^16 + 0x40 (value 6's
    // byte) in version 4, so the word it sheds at step 3 differs; the others do not.
    assert_eq!(r[0x470..0x480], [0x18, 0xe0, 0x00, 0xc0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!((&r[0x470..0x473], &r[0x474..0x480]), (&v4[0x470..0x473], &v4[0x474..0x480]));
    // Version 3's section holds all 528 values' bytes in block order; version 4's, the
    // last 16 of them (values 512..528, V's 0x80).
    let section: Vec<u8> =
        common::example_block().1.concat().iter().map(|&w| bf16_field::sign_mantissa_of(w)).collect();
    assert_eq!(r[0x480..], section[..]);
    assert_eq!(v4[0x480..], r[0x480 + 512..]);
    assert_eq!(v4[0x480..], [0x80; 16]);
    // With the checksum flag (version 3 defines it), the same values.
    let mut checked = r.clone();
    checked[6] = 2;
    put(&mut checked, 0x2c, &example_adler().to_le_bytes());
    assert_eq!(decode_block(&checked).unwrap().1, common::example_block().1.concat());
    // In a container of version 3 next to a version 4 record.
    let c = container_with(&[&r, &v4], 3);
    let (_, groups) = common::example_block();
    let twice = kvcodec_testkit::cache_from(1, 1, 33, 16, |_, k, i| groups[k][i % 264]);
    assert_eq!(exans::decode_cache(&c).unwrap(), twice);
}

#[test]
fn version_2_is_still_read() {
    // Version 2 is version 3 without the checksum flag.
    let mut r = common::example_record_v3();
    r[4] = 2;
    assert_eq!(decode_block(&r).unwrap().1, common::example_block().1.concat());
    let c = container_with(&[&r, &r], 2);
    assert_eq!(exans::decode_cache(&c).unwrap().concat_words().len(), 2 * 528);
}

#[test]
fn version_3_lanes_carry_no_payload() {
    // Partition 0 lane 31 (idle) one above 2^16: a payload byte in version 4, a final
    // state mismatch in version 3, where every lane must end at exactly 2^16.
    let mut v3 = common::example_record_v3();
    v3[0xec] = 1;
    assert_eq!(
        decode_block(&v3).unwrap_err(),
        Error::FinalStateMismatch { partition: 0, lane: 31, state: 0x0001_0001 }
    );
    let mut v4 = common::example_record();
    v4[0xec] = 1;
    let mut words = common::example_block().1.concat();
    // Lane 31 = k 31 carries values 62 and 63: the first one's byte is now 01.
    words[62] |= 0x0001;
    assert_eq!(decode_block(&v4).unwrap().1, words);
    // A version 4 record read as version 3 is 512 bytes short of its layout.
    let mut relabelled = common::example_record();
    relabelled[4] = 3;
    assert_eq!(
        decode_block(&relabelled).unwrap_err(),
        Error::SectionMismatch { section: "record_len", stored: 0x490, expected: 0x690 }
    );
}

/// A block of N = 2 x 10 x 5 = 100 values, below the 512 of a full payload: lanes k =
/// 0..50 carry 2 bytes each (values 0..100), lanes 50..256 none (spec §6.4).
fn small_block() -> (BlockShape, Vec<Vec<u16>>) {
    let shape = BlockShape { layers: 1, kv_heads: 1, head_dim: 10, tokens: 5 };
    let k: Vec<u16> = (0..50u16).map(|i| 0x3f80 + (i % 3) * 0x80 + i).collect();
    let v: Vec<u16> = (0..50u16).map(|i| 0xbf00 - (i % 2) * 0x80 + 2 * i).collect();
    (shape, vec![k, v])
}

#[test]
fn a_small_block_carries_every_byte_in_its_states() {
    let (shape, groups) = small_block();
    let refs: Vec<&[u16]> = groups.iter().map(Vec::as_slice).collect();
    let never = EncodeOptions { raw: RawPolicy::Never, ..Default::default() };
    let r = exans::encode_block_with(&refs, shape, &never).unwrap();
    let info = exans::inspect_record(&r).unwrap();
    assert_eq!((info.version, info.payload_bytes, info.section_bytes[5]), (4, 100, 0));
    assert_eq!(decode_block(&r).unwrap().1, groups.concat());
    let directory = u32::from_le_bytes(r[0x20..0x24].try_into().unwrap()) as usize;
    let state_at = |p: usize, j: usize| directory + 32 + 4 * (32 * p + j);
    let state = |r: &[u8], at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
    // Partition 1 lane 17 (k = 49, idle: partitions hold 12 or 13 symbols) carries values
    // 98 and 99; lane 18 (k = 50) carries nothing and must end at exactly 2^16.
    let (last, beyond) = (state_at(1, 17), state_at(1, 18));
    let sf = |v: usize| u32::from(bf16_field::sign_mantissa_of(groups[v / 50][v % 50]));
    assert_eq!(state(&r, last), 0x0001_0000 + sf(98) + (sf(99) << 8));
    assert_eq!(state(&r, last), 0x0001_e2e0, "V's words 0xbf60 and 0xbee2");
    assert_eq!(state(&r, beyond), 0x0001_0000);
    // A byte flipped in lane 17's payload: another sign+mantissa byte of value 98.
    let mut flipped = r.clone();
    flipped[last] ^= 0x01;
    let mut words = groups.concat();
    words[98] ^= 0x0001;
    assert_eq!(decode_block(&flipped).unwrap().1, words);
    // Any nonzero byte beyond lane 18's capacity of 0 bytes, low or high.
    for (at, value, state) in [(beyond, 1, 0x0001_0001), (beyond + 1, 0x80, 0x0001_8000)] {
        let mut bad = r.clone();
        bad[at] = value;
        assert_eq!(
            decode_block(&bad).unwrap_err(),
            Error::FinalStateMismatch { partition: 1, lane: 18, state }
        );
    }
    // And in the last lane of the record.
    let mut bad = r.clone();
    bad[state_at(7, 31)] = 0xff;
    assert_eq!(
        decode_block(&bad).unwrap_err(),
        Error::FinalStateMismatch { partition: 7, lane: 31, state: 0x0001_00ff }
    );
}

#[test]
fn a_checksum_catches_what_the_structure_cannot() {
    let words = common::example_block().1.concat();
    let mut checked = common::example_record();
    checked[6] = 2;
    put(&mut checked, 0x2c, &example_adler().to_le_bytes());
    assert_eq!(decode_block(&checked).unwrap().1, words);
    // A sign+mantissa bit in the section (0x486), one in a lane's payload (partition 0
    // lane 6's low byte at 0x088, value 12's) and a center (0x031) each decode to other
    // values without the checksum, and fail with it.
    for at in [0x486, 0x088, 0x031] {
        let mut plain = common::example_record();
        plain[at] ^= 1;
        assert_ne!(decode_block(&plain).unwrap().1, words, "byte {at:#x}");
        let mut guarded = checked.clone();
        guarded[at] ^= 1;
        assert!(matches!(decode_block(&guarded), Err(Error::ChecksumMismatch { .. })), "byte {at:#x}");
    }
    // The encoder writes the same bytes.
    let (shape, groups) = common::example_block();
    let refs: Vec<&[u16]> = groups.iter().map(|g| g.as_slice()).collect();
    let options = EncodeOptions { raw: RawPolicy::Never, checksum: true, ..Default::default() };
    assert_eq!(exans::encode_block_with(&refs, shape, &options).unwrap(), checked);
}

#[test]
fn the_byte_map_above_is_the_example_record() {
    let r = common::example_record();
    assert_eq!(r.len(), 0x490);
    assert_eq!(&r[0x30..0x34], &[127, 126, 7, 0]);
    assert_eq!(&r[0x40..0x43], &[127, 0xd0, 0x0f]);
    assert_eq!(&r[0x50..0x54], &[3, 0, 0, 0]);
    assert_eq!(&r[0x470..0x480], &[0x18, 0xe0, 0x00, 0x40, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&r[0x480..0x490], &[0x80; 16], "values 512..528: V's -0.5");
    assert_eq!(&r[0xec..0xf0], &[0, 0, 1, 0], "partition 0 lane 31 is idle: state 2^16");
    assert_eq!(decode_block(&r).unwrap().1, common::example_block().1.concat());
}

// ----- header -----------------------------------------------------------------------
rejects!(truncated_header, |r| r.truncate(47), Error::Truncated { needed: 48, got: 47 });
rejects!(truncated_body, |r| r.truncate(0x48f), Error::Truncated { needed: 0x490, got: 0x48f });
rejects!(bad_magic, |r| r[0] = b'X', Error::BadMagic { found: *b"XVXA", expected: "KVXA" });
rejects!(version_1, |r| r[4] = 1, Error::UnsupportedVersion { version: 1 });
rejects!(version_5, |r| r[4] = 5, Error::UnsupportedVersion { version: 5 });
rejects!(unknown_flag_bit_2, |r| r[6] = 4, Error::UnsupportedFlags { flags: 4 });
// Version 2 did not define the checksum flag.
rejects!(
    checksum_flag_in_version_2,
    |r| {
        r[4] = 2;
        r[6] = 2;
    },
    Error::UnsupportedFlags { flags: 2 }
);
// The checksum flag with a checksum the values do not give (the example's Adler-32 is
// computed by its definition, independently of the crate).
rejects!(
    checksum_mismatch,
    |r| {
        r[6] = 2;
        put(r, 0x2c, &0x1234_5678u32.to_le_bytes());
    },
    Error::ChecksumMismatch { stored: 0x1234_5678, computed: example_adler() }
);
rejects!(reserved_byte, |r| r[0x1b] = 1, Error::ReservedNonZero { offset: 0x1b, value: 1 });
rejects!(reserved_word, |r| r[0x2c] = 5, Error::ReservedNonZero { offset: 0x2c, value: 5 });
rejects!(
    zero_layers,
    |r| r[0x08] = 0,
    Error::InvalidShape { layers: 0, kv_heads: 1, head_dim: 33, tokens: 8 }
);
rejects!(
    // L = H = D = B' = 65535: 2 L B' H D overflows u32.
    value_count_overflows,
    |r| put(r, 0x08, &[0xff; 8]),
    Error::ShapeOverflow { layers: 65535, kv_heads: 65535, head_dim: 65535, tokens: 65535 }
);
rejects!(
    value_count_off_by_one,
    |r| r[0x10] = 0x11,
    Error::ValueCountMismatch { stored: 529, expected: 528 }
);
rejects!(one_trailing_byte, |r| r.push(0), Error::TrailingBytes { extra: 1 });
rejects!(precision_13, |r| r[0x18] = 13, Error::UnsupportedPrecision { precision: 13 });
rejects!(precision_0_in_a_coded_record, |r| r[0x18] = 0, Error::UnsupportedPrecision { precision: 0 });
rejects!(seven_partitions, |r| r[0x19] = 7, Error::UnsupportedLayout { partitions: 7, lanes: 32 });
rejects!(sixteen_lanes, |r| r[0x1a] = 16, Error::UnsupportedLayout { partitions: 8, lanes: 16 });
rejects!(
    model_offset_moved,
    |r| r[0x1c] = 0x33,
    Error::SectionMismatch { section: "model_offset", stored: 0x33, expected: 0x32 }
);
rejects!(
    directory_offset_moved,
    |r| r[0x20] = 0x60,
    Error::SectionMismatch { section: "directory_offset", stored: 0x60, expected: 0x50 }
);
rejects!(
    words_offset_moved,
    |r| put(r, 0x24, &0x480u32.to_le_bytes()),
    Error::SectionMismatch { section: "words_offset", stored: 0x480, expected: 0x470 }
);
rejects!(
    sign_mantissa_offset_moved,
    |r| put(r, 0x28, &0x490u32.to_le_bytes()),
    Error::SectionMismatch { section: "sign_mantissa_offset", stored: 0x490, expected: 0x480 }
);
rejects!(
    // record_len 1169 with one more byte: consistent with the slice, not with the layout.
    record_len_longer_than_layout,
    |r| {
        put(r, 0x14, &0x491u32.to_le_bytes());
        r.push(0);
    },
    Error::SectionMismatch { section: "record_len", stored: 0x491, expected: 0x490 }
);

// ----- padding ----------------------------------------------------------------------
rejects!(model_padding, |r| r[0x49] = 1, Error::NonZeroPadding { offset: 0x49, value: 1 });
rejects!(word_stream_padding, |r| r[0x47f] = 0xaa, Error::NonZeroPadding { offset: 0x47f, value: 0xaa });

// ----- model ------------------------------------------------------------------------
rejects!(no_symbols, |r| r[0x32] = 0, Error::BadSymbolCount { count: 0 });
rejects!(too_many_symbols, |r| put(r, 0x32, &257u16.to_le_bytes()), Error::BadSymbolCount { count: 257 });
rejects!(zero_frequency, |r| put(r, 0x38, &[0, 0]), Error::ZeroFrequency { symbol: 107 });
rejects!(duplicate_symbol, |r| r[0x37] = 67, Error::DuplicateSymbol { symbol: 67 });
rejects!(descending_symbols, |r| r[0x37] = 60, Error::SymbolsNotAscending { previous: 67, symbol: 60 });
rejects!(frequency_sum_4097, |r| r[0x38] = 9, Error::FrequencySumMismatch { sum: 4097, expected: 4096 });

// ----- partitions and rANS ----------------------------------------------------------
rejects!(
    // Partition 1 claims 16 words: its stream would start at 0x480 and end past it.
    partition_past_end,
    |r| r[0x54] = 16,
    Error::PartitionPastEnd { partition: 1 }
);
rejects!(
    huge_word_count,
    |r| put(r, 0x50, &u32::MAX.to_le_bytes()),
    Error::PartitionPastEnd { partition: 0 }
);
rejects!(
    // Partition 0 lane 0's state 0x00044b38 loses its high half.
    state_below_2_pow_16,
    |r| put(r, 0x72, &[0, 0]),
    Error::StateOutOfRange { partition: 0, lane: 0, state: 0x4b38 }
);
rejects!(
    // Partition 0 keeps 2 of its 3 words (the third becomes zero padding): lane 0 runs
    // dry at step 6.
    word_stream_exhausted,
    |r| {
        r[0x50] = 2;
        put(r, 0x474, &[0, 0]);
    },
    Error::WordStreamExhausted { partition: 0 }
);
rejects!(
    // Lane 31 of partition 0 owns no symbols: its state must already be 2^16 plus its 2
    // payload bytes, below 2^17 (a payload flip passes: `version_3_lanes_carry_no_payload`).
    idle_lane_state,
    |r| r[0xee] = 3,
    Error::FinalStateMismatch { partition: 0, lane: 31, state: 0x0003_0000 }
);
rejects!(
    // Lane 1's state 0x00011990 flipped in bit 17: it decodes 127 eight times, reads no
    // word, and ends far above 2^16 plus any 2 payload bytes.
    busy_lane_state,
    |r| r[0x76] ^= 0x02,
    Error::FinalStateMismatch { partition: 0, lane: 1, state: 0x0002_d1e0 }
);
rejects!(
    // Partition 0 claims a fourth word (0x0000, from its padding): never read.
    unconsumed_word,
    |r| r[0x50] = 4,
    Error::UnconsumedWords { partition: 0, consumed: 3, count: 4 }
);

// ----- raw records ------------------------------------------------------------------
fn raw_record() -> Vec<u8> {
    let (shape, groups) = common::example_block();
    let refs: Vec<&[u16]> = groups.iter().map(Vec::as_slice).collect();
    exans::encode_block_with(&refs, shape, &EncodeOptions { raw: RawPolicy::Always, ..Default::default() })
        .unwrap()
}

#[test]
fn raw_record_rules() {
    let r = raw_record();
    assert_eq!(r.len(), 48 + 2 * 528);
    assert_eq!(decode_block(&r).unwrap().1, common::example_block().1.concat());
    let mut bad = r.clone();
    bad[header::PRECISION] = 12;
    assert_eq!(decode_block(&bad).unwrap_err(), Error::UnsupportedPrecision { precision: 12 });
    let mut bad = r.clone();
    bad[header::LANES] = 32;
    assert_eq!(decode_block(&bad).unwrap_err(), Error::UnsupportedLayout { partitions: 0, lanes: 32 });
    let mut bad = r.clone();
    bad[header::WORDS_OFFSET] = 0x40;
    assert_eq!(
        decode_block(&bad).unwrap_err(),
        Error::SectionMismatch { section: "words_offset", stored: 0x40, expected: 48 }
    );
    let mut bad = r.clone();
    put(&mut bad, header::RECORD_LEN, &(r.len() as u32 + 2).to_le_bytes());
    bad.extend([0, 0]);
    assert_eq!(
        decode_block(&bad).unwrap_err(),
        Error::SectionMismatch {
            section: "record_len",
            stored: r.len() as u64 + 2,
            expected: r.len() as u64
        }
    );
}

#[test]
fn a_huge_value_count_is_rejected_before_allocating() {
    // A 48-byte raw header claiming N = 2 x 65535 x 65535 x 1 x 1 values (8 GiB of
    // output): the record length rule must stop it before any allocation.
    let mut r = raw_record();
    r.truncate(48);
    put(&mut r, header::LAYERS, &65535u16.to_le_bytes());
    put(&mut r, header::KV_HEADS, &1u16.to_le_bytes());
    put(&mut r, header::HEAD_DIM, &1u16.to_le_bytes());
    put(&mut r, header::TOKENS, &16383u16.to_le_bytes());
    let n = 2u64 * 65535 * 16383;
    put(&mut r, header::VALUES, &(n as u32).to_le_bytes());
    put(&mut r, header::RECORD_LEN, &48u32.to_le_bytes());
    assert_eq!(
        decode_block(&r).unwrap_err(),
        Error::SectionMismatch { section: "record_len", stored: 48, expected: 48 + 2 * n }
    );
}

// ----- output and input shapes ------------------------------------------------------
#[test]
fn decode_into_checks_the_output_groups() {
    let r = common::example_record();
    let mut a = vec![0u16; 264];
    let mut b = vec![0u16; 263];
    assert_eq!(
        decode_block_into(&r, &mut [&mut a]).unwrap_err(),
        Error::GroupCountMismatch { got: 1, expected: 2 }
    );
    assert_eq!(
        decode_block_into(&r, &mut [&mut a, &mut b]).unwrap_err(),
        Error::GroupLengthMismatch { group: 1, got: 263, expected: 264 }
    );
}

#[test]
fn encoder_input_errors() {
    let (shape, groups) = common::example_block();
    let refs: Vec<&[u16]> = groups.iter().map(Vec::as_slice).collect();
    let enc = |g: &[&[u16]], s: BlockShape| exans::encode_block(g, s).unwrap_err();
    assert_eq!(enc(&refs[..1], shape), Error::GroupCountMismatch { got: 1, expected: 2 });
    assert_eq!(
        enc(&[refs[0], &refs[1][1..]], shape),
        Error::GroupLengthMismatch { group: 1, got: 263, expected: 264 }
    );
    assert_eq!(
        enc(&refs, BlockShape { tokens: 0, ..shape }),
        Error::InvalidShape { layers: 1, kv_heads: 1, head_dim: 33, tokens: 0 }
    );
    assert_eq!(
        enc(&refs, BlockShape { head_dim: 70_000, ..shape }),
        Error::DimensionTooLarge { what: "head_dim", value: 70_000, max: 65_535 }
    );
    let big = BlockShape { layers: 65_535, kv_heads: 65_535, head_dim: 1, tokens: 1 };
    assert_eq!(
        enc(&refs, big),
        Error::ShapeOverflow { layers: 65_535, kv_heads: 65_535, head_dim: 1, tokens: 1 }
    );
    let options = EncodeOptions { precision: 13, raw: RawPolicy::Auto, ..EncodeOptions::default() };
    assert_eq!(
        exans::encode_block_with(&refs, shape, &options).unwrap_err(),
        Error::UnsupportedPrecisionForEncode { precision: 13, distinct: 0 }
    );
    // 7 distinct symbols do not fit 2^2 slots: an error when raw is not allowed.
    let options = EncodeOptions { precision: 2, raw: RawPolicy::Never, ..EncodeOptions::default() };
    assert_eq!(
        exans::encode_block_with(&refs, shape, &options).unwrap_err(),
        Error::UnsupportedPrecisionForEncode { precision: 2, distinct: 7 }
    );
    let cache = kvcodec_testkit::cache_from(1, 1, 4, 4, |_, _, i| i as u16);
    assert_eq!(exans::encode_cache(&cache, 0).unwrap_err(), Error::ZeroBlockTokens);
    assert_eq!(
        exans::encode_cache(&cache, 70_000).unwrap_err(),
        Error::DimensionTooLarge { what: "block_tokens", value: 70_000, max: 65_535 }
    );
}

// ----- container --------------------------------------------------------------------
/// Two copies of the example block: T = 16, B = 8. Layout: header 0x00..0x20, index of
/// 3 u64 offsets 0x20..0x38, padding to 0x40, record 0 at 0x40 (0x490 bytes), record 1
/// at 0x4d0, end 0x960.
fn container() -> Vec<u8> {
    let (_, groups) = common::example_block();
    let cache = kvcodec_testkit::cache_from(1, 1, 33, 16, |_, k, i| groups[k][i % 264]);
    exans::encode_cache_with(&cache, 8, &EncodeOptions { raw: RawPolicy::Never, ..Default::default() })
        .unwrap()
}

/// `container_rejects!(name, |container| mutation, expected error)`: the two-record
/// container, corrupted, fails `decode_cache` with exactly that error.
macro_rules! container_rejects {
    ($name:ident, $mutate:expr, $expected:expr) => {
        kvcodec_testkit::corrupt_input!($name: container() => $mutate; exans::decode_cache => $expected);
    };
}

#[test]
fn container_layout_is_as_documented() {
    let c = container();
    let info = exans::container_info(&c).unwrap();
    assert_eq!(info.offsets, vec![0x40, 0x4d0, 0x960]);
    assert_eq!(info.record_lens, vec![0x490, 0x490]);
    assert_eq!(c.len(), 0x960);
    assert_eq!(c[4..6], [4, 0], "version 4");
    // The same two records behind a container header of version 3 (or 2): the layout
    // is shared.
    for version in [3, 2] {
        let mut old = c.clone();
        old[4] = version;
        assert_eq!(exans::decode_cache(&old).unwrap(), exans::decode_cache(&c).unwrap());
    }
}

/// A container of `records` (each one of the example block) at B = 8 with header
/// version `version`, laid out by spec §8.
fn container_with(records: &[&[u8]], version: u16) -> Vec<u8> {
    let index_end = 32 + 8 * (records.len() + 1);
    let mut offsets = vec![index_end.next_multiple_of(16)];
    for r in records {
        offsets.push((offsets.last().unwrap() + r.len()).next_multiple_of(16));
    }
    let mut c = vec![0u8; *offsets.last().unwrap()];
    c[..4].copy_from_slice(b"KVXC");
    put(&mut c, 4, &version.to_le_bytes());
    put(&mut c, 8, &[1, 0, 1, 0, 33, 0, 8, 0]);
    put(&mut c, 16, &(8 * records.len() as u64).to_le_bytes());
    put(&mut c, 24, &(records.len() as u32).to_le_bytes());
    for (i, o) in offsets.iter().enumerate() {
        put(&mut c, 32 + 8 * i, &(*o as u64).to_le_bytes());
    }
    for (r, o) in records.iter().zip(&offsets) {
        put(&mut c, *o, r);
    }
    c
}

container_rejects!(container_truncated_header, |c| c.truncate(31), Error::Truncated { needed: 32, got: 31 });
container_rejects!(
    container_truncated_index,
    |c| c.truncate(0x30),
    Error::Truncated { needed: 0x38, got: 0x30 }
);
container_rejects!(
    container_truncated_record,
    |c| c.truncate(0x900),
    Error::Truncated { needed: 0x960, got: 0x900 }
);
// A zeroed record header is the record's error, not an index mismatch.
container_rejects!(
    zeroed_record_header,
    |c| {
        let at = exans::container_info(c).unwrap().offsets[1];
        c[at..at + 48].fill(0);
    },
    Error::InBlock { block: 1, source: Box::new(Error::BadMagic { found: [0; 4], expected: "KVXA" }) }
);
container_rejects!(
    container_bad_magic,
    |c| c[3] = b'A',
    Error::BadMagic { found: *b"KVXA", expected: "KVXC" }
);
container_rejects!(container_version, |c| c[4] = 9, Error::UnsupportedVersion { version: 9 });
container_rejects!(container_flags, |c| c[6] = 1, Error::UnsupportedFlags { flags: 1 });
container_rejects!(container_reserved, |c| c[28] = 1, Error::ReservedNonZero { offset: 28, value: 1 });
container_rejects!(
    container_zero_heads,
    |c| c[10] = 0,
    Error::InvalidShape { layers: 1, kv_heads: 0, head_dim: 33, tokens: 16 }
);
container_rejects!(
    container_zero_block_tokens,
    |c| c[14] = 0,
    Error::InvalidShape { layers: 1, kv_heads: 1, head_dim: 33, tokens: 0 }
);
container_rejects!(
    container_shape_overflow,
    |c| {
        put(c, 8, &[0xff; 6]);
        put(c, 16, &(1u64 << 62).to_le_bytes());
    },
    Error::ShapeOverflow { layers: 65535, kv_heads: 65535, head_dim: 65535, tokens: 1 << 62 }
);
container_rejects!(
    container_block_count,
    |c| c[24] = 3,
    Error::BlockCountMismatch { stored: 3, expected: 2 }
);
container_rejects!(
    // T = 17 needs 3 blocks of 8.
    container_tokens_need_more_blocks,
    |c| c[16] = 17,
    Error::BlockCountMismatch { stored: 2, expected: 3 }
);
container_rejects!(
    container_first_offset,
    |c| c[0x20] = 0x50,
    Error::IndexMismatch { entry: 0, stored: 0x50, expected: 0x40 }
);
container_rejects!(
    container_second_offset,
    |c| put(c, 0x28, &0x4e0u64.to_le_bytes()),
    Error::IndexMismatch { entry: 1, stored: 0x4e0, expected: 0x4d0 }
);
container_rejects!(
    container_index_padding,
    |c| c[0x3f] = 7,
    Error::NonZeroPadding { offset: 0x3f, value: 7 }
);

#[test]
fn container_record_padding() {
    // The raw record of a 5-token tail of D = 35: 48 + 2 x 350 = 748 bytes, so 4 bytes
    // of padding follow it (the example's own records are multiples of 16 long).
    let cache = kvcodec_testkit::cache_from(1, 1, 35, 13, |_, _, i| i as u16);
    let mut c = exans::encode_cache(&cache, 8).unwrap();
    let info = exans::container_info(&c).unwrap();
    assert_eq!(info.record_lens[1], 748);
    let pad = info.offsets[1] + info.record_lens[1];
    c[pad + 3] = 7;
    assert_eq!(exans::decode_cache(&c).unwrap_err(), Error::NonZeroPadding { offset: pad + 3, value: 7 });
}
container_rejects!(container_trailing, |c| c.push(0), Error::TrailingBytes { extra: 1 });
container_rejects!(
    // Record 1's H and D swapped: same N, wrong shape.
    container_record_shape,
    |c| {
        put(c, 0x4d0 + 0x0a, &33u16.to_le_bytes());
        put(c, 0x4d0 + 0x0c, &1u16.to_le_bytes());
    },
    Error::InBlock {
        block: 1,
        source: Box::new(Error::RecordShapeMismatch {
            block: 1,
            got: [1, 33, 1, 8],
            expected: [1, 1, 33, 8]
        })
    }
);
container_rejects!(
    container_record_corrupt,
    |c| c[0x4d0 + 0xee] = 3,
    Error::InBlock {
        block: 1,
        source: Box::new(Error::FinalStateMismatch { partition: 0, lane: 31, state: 0x0003_0000 })
    }
);
