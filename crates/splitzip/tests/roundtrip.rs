//! Round trips: synthetic edge cases (one `testtrip!` line each), an independent
//! reference encoder written straight from `docs/formats/splitzip.md`, and property
//! tests over arbitrary words, codebooks, chunk sizes and corrupted payloads.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use splitzip::{
    Codebook, DEFAULT_CHUNK_SIZE, DecodeError, EncodeError, EncodeOptions, HEADER_LEN, PayloadHeader, decode,
    decode_bf16, decode_bf16_into, decode_into, encode, encode_bf16, encode_bf16_into, encode_into,
    encode_with, max_encoded_len,
};

const CHUNK_SIZES: [u32; 11] = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];

/// The spec, implemented as plainly as possible and independently of the crate's
/// encoder: header fields pushed one by one, sections appended, zero padding to 16.
fn reference_encode(words: &[u16], codebook: &[u8; 16], chunk_size: u32, checksum: bool) -> Vec<u8> {
    let n = words.len();
    let cs = chunk_size as usize;
    let chunks = n.div_ceil(cs);
    let code_of = |e: u8| codebook.iter().position(|&c| c == e);
    let exp = |w: u16| ((w >> 7) & 0xff) as u8;
    let sm = |w: u16| (((w >> 8) & 0x80) | (w & 0x7f)) as u8;
    let pad = |p: &mut Vec<u8>| {
        while !p.len().is_multiple_of(16) {
            p.push(0);
        }
    };
    let header =
        |p: &mut Vec<u8>, raw: bool, chunk_count: u32, escapes: u64, offsets: [u64; 5], total: u64| {
            p.extend_from_slice(b"KVSZ");
            p.extend_from_slice(&2u16.to_le_bytes());
            p.extend_from_slice(&(raw as u16 | (checksum as u16) << 1).to_le_bytes());
            p.extend_from_slice(&(n as u64).to_le_bytes());
            p.extend_from_slice(&chunk_size.to_le_bytes());
            p.extend_from_slice(&chunk_count.to_le_bytes());
            p.extend_from_slice(&escapes.to_le_bytes());
            p.extend_from_slice(codebook);
            for o in offsets {
                p.extend_from_slice(&o.to_le_bytes());
            }
            p.extend_from_slice(&total.to_le_bytes());
            p.extend_from_slice(&[0; 4]); // the header CRC, below
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let adler = if checksum { adler2::adler32_slice(&bytes) } else { 0 };
            p.extend_from_slice(&adler.to_le_bytes());
            p.resize(128, 0);
            let crc = crc32c::crc32c(&p[..128]);
            p[96..100].copy_from_slice(&crc.to_le_bytes());
        };

    // Sections after the header, built in a separate buffer starting at offset 128.
    let mut body = vec![0u8; 128];
    let mut offsets = [0u64; 5];
    offsets[0] = body.len() as u64;
    for pair in words.chunks(2) {
        let c = |w: u16| code_of(exp(w)).unwrap_or(0) as u8;
        body.push(c(pair[0]) | pair.get(1).map_or(0, |&w| c(w)) << 4);
    }
    pad(&mut body);
    offsets[1] = body.len() as u64;
    body.extend(words.iter().map(|&w| sm(w)));
    pad(&mut body);
    offsets[2] = body.len() as u64;
    let mut escapes = Vec::new();
    let mut prefix = 0u32;
    body.extend_from_slice(&0u32.to_le_bytes());
    for (c, chunk) in words.chunks(cs).enumerate() {
        for (i, &w) in chunk.iter().enumerate() {
            if code_of(exp(w)).is_none() {
                escapes.push((c, i as u16, exp(w)));
                prefix += 1;
            }
        }
        body.extend_from_slice(&prefix.to_le_bytes());
    }
    pad(&mut body);
    offsets[3] = body.len() as u64;
    for &(_, i, _) in &escapes {
        body.extend_from_slice(&i.to_le_bytes());
    }
    pad(&mut body);
    offsets[4] = body.len() as u64;
    body.extend(escapes.iter().map(|&(_, _, e)| e));

    let raw_len = 128 + 2 * n;
    let mut p = Vec::new();
    if body.len() <= raw_len {
        header(&mut p, false, chunks as u32, escapes.len() as u64, offsets, body.len() as u64);
        p.extend_from_slice(&body[128..]);
    } else {
        header(&mut p, true, 0, 0, [0; 5], raw_len as u64);
        p.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    }
    p
}

/// Checks one input with one codebook at one chunk size, through every entry point.
fn check_trip(words: &[u16], codebook: &Codebook, chunk_size: u32) -> Vec<u8> {
    let payload = encode(words, codebook, chunk_size).unwrap();
    assert_eq!(
        payload,
        reference_encode(words, &codebook.exponents(), chunk_size, false),
        "reference encoder"
    );
    let options = EncodeOptions { chunk_size, checksum: true };
    let checked = encode_with(words, codebook, &options).unwrap();
    assert_eq!(checked, reference_encode(words, &codebook.exponents(), chunk_size, true), "with checksum");
    assert_eq!(decode(&checked).unwrap(), words);
    assert!(payload.len() <= max_encoded_len(words.len(), chunk_size));
    assert_eq!(decode(&payload).unwrap(), words);

    // Header alone.
    let header = PayloadHeader::parse(&payload[..HEADER_LEN]).unwrap();
    assert_eq!(header.value_count, words.len() as u64);
    assert_eq!(header.encoded_len(), payload.len() as u64);
    assert_eq!(header.codebook, *codebook);
    assert_eq!(header.chunk_size, chunk_size);

    // encode_into: exact buffer, max buffer with garbage, one byte short.
    let mut buf = vec![0xa5u8; max_encoded_len(words.len(), chunk_size) + 3];
    assert_eq!(encode_into(words, codebook, chunk_size, &mut buf).unwrap(), payload.len());
    assert_eq!(&buf[..payload.len()], &payload[..], "garbage in the buffer must not leak into padding");
    let mut exact = vec![0u8; payload.len()];
    assert_eq!(encode_into(words, codebook, chunk_size, &mut exact).unwrap(), payload.len());
    let mut short = vec![0u8; payload.len() - 1];
    assert_eq!(
        encode_into(words, codebook, chunk_size, &mut short),
        Err(EncodeError::OutputTooSmall { needed: payload.len(), got: payload.len() - 1 })
    );

    // decode_into: larger buffer keeps its tail; too small is an error.
    let mut out = vec![0x5a5au16; words.len() + 2];
    assert_eq!(decode_into(&payload, &mut out).unwrap(), words.len());
    assert_eq!(&out[..words.len()], words);
    assert_eq!(&out[words.len()..], &[0x5a5a, 0x5a5a]);
    if !words.is_empty() {
        let mut small = vec![0u16; words.len() - 1];
        assert_eq!(
            decode_into(&payload, &mut small),
            Err(DecodeError::OutputTooSmall { needed: words.len() as u64, got: words.len() as u64 - 1 })
        );
    }

    // half::bf16 entry points agree with the word ones.
    let values: Vec<half::bf16> = words.iter().map(|&w| half::bf16::from_bits(w)).collect();
    assert_eq!(encode_bf16(&values, codebook, chunk_size).unwrap(), payload);
    let mut buf = vec![0u8; payload.len()];
    assert_eq!(encode_bf16_into(&values, codebook, chunk_size, &mut buf).unwrap(), payload.len());
    let back = decode_bf16(&payload).unwrap();
    assert!(back.iter().zip(&values).all(|(a, b)| a.to_bits() == b.to_bits()));
    let mut back = vec![half::bf16::ZERO; words.len()];
    assert_eq!(decode_bf16_into(&payload, &mut back).unwrap(), words.len());
    assert_eq!(bf16_field::words_of(&back), words);
    payload
}

/// One line per case: the words, the codebook, and whether the payload must be raw
/// (checked at chunk sizes 32, 1024 and 32768).
macro_rules! testtrip {
    ($name:ident, $words:expr, $codebook:expr, raw = $raw:expr) => {
        #[test]
        fn $name() {
            let words: Vec<u16> = $words;
            let codebook: Codebook = $codebook;
            for chunk_size in [32, DEFAULT_CHUNK_SIZE, 32768] {
                let payload = check_trip(&words, &codebook, chunk_size);
                let header = PayloadHeader::parse(&payload).unwrap();
                assert_eq!(header.is_raw(), $raw, "chunk size {chunk_size}: raw flag");
            }
        }
    };
}

fn bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// Typical KV-like magnitudes: exponents 0x74..=0x83 are the whole codebook.
fn typical_codebook() -> Codebook {
    Codebook::new(std::array::from_fn(|i| 0x74 + i as u8)).unwrap()
}

/// Deterministic words with exponents in 0x74..=0x83, random-looking sign+mantissa.
fn typical(n: usize) -> Vec<u16> {
    typical_in(n, 16)
}

/// Like [`typical`] with exponents in `0x74..0x74 + k`.
fn typical_in(n: usize, k: u32) -> Vec<u16> {
    (0..n as u32)
        .map(|i| {
            let h = i.wrapping_mul(2_654_435_761).rotate_right(13);
            let e = 0x74 + (h % k) as u16;
            ((h >> 8) as u16 & 0x807f) | (e << 7)
        })
        .collect()
}

/// [`typical`] with the special values planted every `stride` values.
fn with_specials(n: usize, stride: usize) -> Vec<u16> {
    plant_specials(typical(n), stride)
}

/// Plants +-0, +-Inf, NaNs, subnormals, the extreme normals and 1.0 every `stride`
/// values; their exponents are 0x00, 0x01, 0x7f, 0xfe and 0xff.
fn plant_specials(mut w: Vec<u16>, stride: usize) -> Vec<u16> {
    const SPECIALS: [u16; 12] = [
        0x0000, // +0
        0x8000, // -0
        0x7f80, // +Inf
        0xff80, // -Inf
        0x7fc0, // quiet NaN
        0xffc1, // negative NaN with payload
        0x7f81, // signalling NaN
        0x0001, // smallest positive subnormal
        0x807f, // largest negative subnormal
        0x0080, // smallest normal
        0x7f7f, // largest finite
        0x3f80, // 1.0 (exponent 0x7f, in the codebook)
    ];
    for (k, i) in (0..w.len()).step_by(stride).enumerate() {
        w[i] = SPECIALS[k % SPECIALS.len()];
    }
    w
}

testtrip!(empty, vec![], typical_codebook(), raw = true);
testtrip!(one_value, vec![bf16(1.0)], typical_codebook(), raw = true);
testtrip!(one_escape, vec![0x7f80], typical_codebook(), raw = true);
testtrip!(all_zeros_calibrated, vec![0; 5000], Codebook::calibrate(&[&[0u16; 10]]).unwrap(), raw = false);
testtrip!(all_zeros_every_value_escaped, vec![0; 5000], typical_codebook(), raw = true);
testtrip!(
    signed_zeros,
    (0..3001).map(|i| if i % 3 == 0 { 0x8000 } else { 0 }).collect(),
    Codebook::calibrate(&[&[0u16]]).unwrap(),
    raw = false
);
testtrip!(specials_rarely_escaped, with_specials(10_000, 97), typical_codebook(), raw = false);
// 11 typical exponents (0x74..=0x7e) + the 5 special ones = 16: nothing escapes.
testtrip!(
    specials_in_codebook,
    plant_specials(typical_in(10_000, 11), 3),
    Codebook::calibrate(&[&plant_specials(typical_in(500, 11), 3)]).unwrap(),
    raw = false
);
testtrip!(specials_dense_is_raw, with_specials(10_000, 2), typical_codebook(), raw = true);
testtrip!(
    nan_and_inf_only,
    [0x7f80u16, 0xff80, 0x7fc0, 0xffff].repeat(700),
    Codebook::calibrate(&[&[0x7f80u16]]).unwrap(),
    raw = false
);
testtrip!(
    subnormals_only,
    (0..4000u16).map(|i| i & 0x807f).collect(),
    Codebook::calibrate(&[&[0u16]]).unwrap(),
    raw = false
);
testtrip!(
    exponent_ff_escaped,
    {
        let mut w = typical(4096);
        w[7] = 0x7fff;
        w[4095] = 0xff80;
        w
    },
    typical_codebook(),
    raw = false
);
testtrip!(len_1023, typical(1023), typical_codebook(), raw = false);
testtrip!(len_1025, typical(1025), typical_codebook(), raw = false);
testtrip!(
    len_odd_with_escape_in_last_value,
    {
        let mut w = typical(2049);
        w[2048] = 0;
        w
    },
    typical_codebook(),
    raw = false
);
testtrip!(every_bit_pattern, (0..=u16::MAX).collect(), typical_codebook(), raw = true);
testtrip!(parallel_path, with_specials(3 * 65536 + 17, 1001), typical_codebook(), raw = false);
testtrip!(parallel_path_raw, with_specials(70_001, 1), typical_codebook(), raw = true);

#[test]
fn coded_is_chosen_on_a_tie_and_raw_one_escape_later() {
    // Find (n, E) with a coded length exactly 128 + 2n at chunk size 32.
    let (n, e) = (64..400u64)
        .flat_map(|n| (0..n).map(move |e| (n, e)))
        .find(|&(n, e)| splitzip::CodedLayout::new(n, 32, e).unwrap().encoded_len == 128 + 2 * n)
        .expect("a tie exists");
    let with_escapes = |count: u64| {
        let mut w = typical(n as usize);
        w[..count as usize].fill(0); // exponent 0 is not in the codebook
        w
    };
    let tie = check_trip(&with_escapes(e), &typical_codebook(), 32);
    assert_eq!(tie.len() as u64, 128 + 2 * n);
    assert!(!PayloadHeader::parse(&tie).unwrap().is_raw(), "coded on a tie (n = {n}, E = {e})");
    let over = check_trip(&with_escapes(e + 1), &typical_codebook(), 32);
    assert!(PayloadHeader::parse(&over).unwrap().is_raw(), "raw when coded would be longer");
}

#[test]
fn invalid_chunk_sizes_are_rejected() {
    for chunk_size in [0, 16, 31, 48, 1000, 65536] {
        assert_eq!(
            encode(&[0u16; 4], &typical_codebook(), chunk_size),
            Err(EncodeError::ChunkSizeInvalid { chunk_size })
        );
    }
}

#[test]
fn typical_data_approaches_twelve_bits() {
    // No escapes: 12 bits/value plus header and offsets; the ratio bound of the paper.
    let words = typical(1 << 20);
    let payload = encode(&words, &typical_codebook(), DEFAULT_CHUNK_SIZE).unwrap();
    // header + codes + sign+mantissa + 1025 offsets + 12 bytes of padding to 16.
    let expected = 128 + (1 << 19) + (1 << 20) + 4 * (1024 + 1) + 12;
    assert_eq!(payload.len(), expected);
    let ratio = (2 * words.len()) as f64 / payload.len() as f64;
    assert!(ratio > 1.3289 && ratio < 4.0 / 3.0, "{ratio}");
}

// ------------------------------------------------------------------------------------
// Property tests.
// ------------------------------------------------------------------------------------

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/roundtrip.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn chunk_size() -> impl Strategy<Value = u32> {
    prop::sample::select(CHUNK_SIZES.to_vec())
}

fn any_codebook() -> impl Strategy<Value = Codebook> {
    prop::sample::subsequence((0..=255u8).collect::<Vec<_>>(), 16)
        .prop_shuffle()
        .prop_map(|e| Codebook::new(e.try_into().unwrap()).unwrap())
}

/// Words whose exponents are mostly in `codebook` (so payloads are usually coded),
/// with arbitrary escapes, specials and sign+mantissa bits.
fn kv_like(max_len: usize) -> impl Strategy<Value = (Vec<u16>, Codebook)> {
    kv_like_escaping(max_len, 40)
}

/// [`kv_like`] with at most `max_escape_percent` percent random words.
fn kv_like_escaping(max_len: usize, max_escape_percent: u32) -> impl Strategy<Value = (Vec<u16>, Codebook)> {
    // prop_map rather than prop_flat_map, so failures shrink element by element.
    let cells = prop::collection::vec((any::<u16>(), 0u32..100, 0usize..16), 0..max_len);
    (any_codebook(), 0..max_escape_percent, cells).prop_map(|(cb, escape_percent, cells)| {
        let e = cb.exponents();
        let words = cells
            .into_iter()
            .map(
                |(bits, roll, pick)| {
                    if roll < escape_percent { bits } else { (bits & 0x807f) | ((e[pick] as u16) << 7) }
                },
            )
            .collect();
        (words, cb)
    })
}

/// Decoding `payload` fails, or re-encoding the decoded values with the header's codebook
/// and chunk size gives `payload` back: the decoder accepts exactly one encoding per
/// input. (A raw payload may re-encode coded: the decoder does not recount a raw
/// payload's escapes, spec §5.)
fn assert_canonical_or_rejected(payload: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(decoded) = decode(payload) {
        let header = PayloadHeader::parse(payload).unwrap();
        let again = encode(&decoded, &header.codebook, header.chunk_size).unwrap();
        if header.is_raw() {
            prop_assert!(again == payload || !PayloadHeader::parse(&again).unwrap().is_raw());
        } else {
            prop_assert_eq!(again, payload, "accepted a non-canonical coded payload");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_words_round_trip(words in prop::collection::vec(any::<u16>(), 0..3000), cb in any_codebook(), cs in chunk_size()) {
        check_trip(&words, &cb, cs);
    }

    #[test]
    fn kv_like_words_round_trip((words, cb) in kv_like(5000), cs in chunk_size()) {
        check_trip(&words, &cb, cs);
    }

    /// Every single-bit flip of a valid payload is rejected or gives another canonical
    /// payload (exhaustive over the payload's bits).
    #[test]
    fn every_bit_flip_is_rejected_or_canonical((words, cb) in kv_like_escaping(400, 12), cs in prop::sample::select(vec![32u32, 64])) {
        let payload = encode(&words, &cb, cs).unwrap();
        for i in 0..payload.len() {
            for bit in 0..8 {
                let mut flipped = payload.clone();
                flipped[i] ^= 1 << bit;
                assert_canonical_or_rejected(&flipped)?;
            }
        }
    }

    /// Corrupting bytes of a valid payload never panics; whatever is still accepted is
    /// canonical.
    #[test]
    fn corrupted_payloads_are_rejected_or_canonical(
        (words, cb) in kv_like(600),
        cs in prop::sample::select(vec![32u32, 64, 128]),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut payload = encode(&words, &cb, cs).unwrap();
        for (at, byte) in &edits {
            let i = at.index(payload.len());
            payload[i] = *byte;
        }
        if let Some(cut) = cut {
            payload.truncate(cut.index(payload.len() + 1));
        }
        assert_canonical_or_rejected(&payload)?;
    }

    /// Arbitrary bytes behind a valid magic and version never panic the header parser
    /// or the decoder.
    #[test]
    fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut payload = b"KVSZ\x01\x00".to_vec();
        payload.extend_from_slice(&tail);
        let _ = PayloadHeader::parse(&payload);
        let _ = decode(&payload);
        let _ = decode(&tail);
    }
}
