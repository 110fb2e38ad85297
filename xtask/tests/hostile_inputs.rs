//! Hostile, hand-built inputs for every CPU decoder: each must return a typed error
//! (never panic, hang or allocate far beyond the input). Runs in a few seconds.
//! Found no bug when written; kept as the cross-crate regression suite for hostile inputs.

use splitzip::{Codebook, DecodeError as SzErr, PayloadHeader};

/// One in-place corruption of a payload.
type Mutation<'a> = Box<dyn Fn(&mut Vec<u8>) + 'a>;

fn book() -> Codebook {
    Codebook::new(std::array::from_fn(|i| 0x74 + i as u8)).unwrap()
}

/// A 128-byte splitzip header with the given fields (offsets/encoded_len as given).
#[allow(clippy::too_many_arguments)]
fn sz_header(flags: u16, n: u64, cs: u32, chunks: u32, e: u64, offs: [u64; 5], len: u64) -> Vec<u8> {
    let mut h = vec![0u8; 128];
    h[..4].copy_from_slice(b"KVSZ");
    h[4..6].copy_from_slice(&1u16.to_le_bytes());
    h[6..8].copy_from_slice(&flags.to_le_bytes());
    h[8..16].copy_from_slice(&n.to_le_bytes());
    h[16..20].copy_from_slice(&cs.to_le_bytes());
    h[20..24].copy_from_slice(&chunks.to_le_bytes());
    h[24..32].copy_from_slice(&e.to_le_bytes());
    h[32..48].copy_from_slice(&book().exponents());
    for (i, o) in offs.iter().enumerate() {
        h[48 + 8 * i..56 + 8 * i].copy_from_slice(&o.to_le_bytes());
    }
    h[88..96].copy_from_slice(&len.to_le_bytes());
    h
}

fn sz_both(p: &[u8]) -> SzErr {
    let e = splitzip::decode(p).unwrap_err();
    let mut out = vec![0x1234u16; 8192];
    assert_eq!(splitzip::decode_into(p, &mut out).unwrap_err(), e);
    assert!(out.iter().all(|&w| w == 0x1234), "nothing written on error");
    e
}

#[test]
fn splitzip_value_counts_near_u64_max() {
    for n in [u64::MAX, u64::MAX - 1, u64::MAX / 2, (u64::MAX - 128) / 2 + 1] {
        let p = sz_header(1, n, 1024, 0, 0, [0; 5], 0);
        assert!(matches!(sz_both(&p), SzErr::LengthOverflow { .. }), "{n}");
        let p = sz_header(0, n, 1024, 0, 0, [0; 5], 0);
        assert!(PayloadHeader::parse(&p).is_err());
        let _ = sz_both(&p);
    }
}

#[test]
fn splitzip_consistent_header_claiming_2_pow_40_values_is_rejected_before_allocating() {
    let n = 1u64 << 40;
    // Raw: consistent header, 100 bytes of body.
    let h = PayloadHeader::raw(n, 1024, book()).unwrap();
    let mut p = h.to_bytes().to_vec();
    p.extend([0u8; 100]);
    assert!(matches!(sz_both(&p), SzErr::Truncated { needed, .. } if needed == 128 + 2 * n));
    // Coded: consistent header (every offset right), body missing.
    let h = PayloadHeader::coded(n, 32768, 1000, book()).unwrap();
    let mut p = h.to_bytes().to_vec();
    p.extend([0u8; 100]);
    assert!(matches!(sz_both(&p), SzErr::Truncated { .. }));
    // Header-only parse succeeds: the receiver learns the size before allocating.
    assert_eq!(PayloadHeader::parse(&p).unwrap().value_count, n);
}

#[test]
fn splitzip_chunk_and_escape_extremes() {
    for cs in [0u32, 1, 16, 31, 33, 1000, 65536, u32::MAX, 1 << 31] {
        let p = sz_header(0, 96, cs, 3, 0, [0; 5], 0);
        assert!(matches!(sz_both(&p), SzErr::ChunkSizeInvalid { .. }), "{cs}");
    }
    // chunk count that would overflow u32 at chunk size 32
    let n = (u32::MAX as u64 + 1) * 32;
    let p = sz_header(0, n, 32, 0, 0, [0; 5], 0);
    let _ = sz_both(&p);
    // escapes > n, escapes = u64::MAX, escapes = u32::MAX + 1
    for e in [97u64, u64::MAX, u32::MAX as u64 + 1] {
        let p = sz_header(0, 96, 32, 3, e, [0; 5], 0);
        assert!(matches!(sz_both(&p), SzErr::EscapeCountOutOfRange { .. }), "{e}");
    }
    // raw with nonzero chunk count / escapes / offsets
    assert!(matches!(sz_both(&sz_header(1, 3, 32, 1, 0, [0; 5], 134)), SzErr::ChunkCountMismatch { .. }));
    assert!(matches!(sz_both(&sz_header(1, 3, 32, 0, 1, [0; 5], 134)), SzErr::EscapeCountOutOfRange { .. }));
    assert!(matches!(
        sz_both(&sz_header(1, 3, 32, 0, 0, [0, 0, 0, 0, 128], 134)),
        SzErr::SectionOffsetMismatch { .. }
    ));
    // offsets past the end / overlapping
    let good = PayloadHeader::coded(96, 32, 3, book()).unwrap().to_bytes();
    for field in [48usize, 56, 64, 72, 80] {
        for v in [0u64, 127, 129, u64::MAX, 1 << 40] {
            let mut p = good.to_vec();
            p[field..field + 8].copy_from_slice(&v.to_le_bytes());
            p.resize(307, 0);
            assert!(matches!(sz_both(&p), SzErr::SectionOffsetMismatch { .. }), "{field} {v}");
        }
    }
    // encoded_len wrong, huge
    for v in [0u64, 306, 308, u64::MAX] {
        let mut p = good.to_vec();
        p[88..96].copy_from_slice(&v.to_le_bytes());
        p.resize(307, 0);
        assert!(matches!(sz_both(&p), SzErr::EncodedLengthMismatch { .. }), "{v}");
    }
}

#[test]
fn splitzip_escape_tables_hostile() {
    // n = 96, chunk 32, E = 3: escape offsets at 272, positions at 288, exponents at 304.
    let base = {
        let mut p = PayloadHeader::coded(96, 32, 3, book()).unwrap().to_bytes().to_vec();
        p.resize(307, 0);
        // offsets [0, 1, 1, 3]; positions [5, 6, 30]; exponents 0, 0xff, 0xff; codes 0
        for (i, v) in [0u32, 1, 1, 3].iter().enumerate() {
            p[272 + 4 * i..276 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        for (i, v) in [5u16, 6, 30].iter().enumerate() {
            p[288 + 2 * i..290 + 2 * i].copy_from_slice(&v.to_le_bytes());
        }
        p[304..307].copy_from_slice(&[0, 0xff, 0xff]);
        p
    };
    assert_eq!(splitzip::decode(&base).unwrap().len(), 96);
    let set32 =
        |p: &mut Vec<u8>, i: usize, v: u32| p[272 + 4 * i..276 + 4 * i].copy_from_slice(&v.to_le_bytes());
    let set16 =
        |p: &mut Vec<u8>, i: usize, v: u16| p[288 + 2 * i..290 + 2 * i].copy_from_slice(&v.to_le_bytes());
    let cases: Vec<(Mutation<'_>, &str)> = vec![
        (Box::new(|p| set32(p, 0, 1)), "start"),
        (Box::new(|p| set32(p, 1, u32::MAX)), "monotonic"),
        (Box::new(|p| set32(p, 2, 0)), "monotonic"),
        (Box::new(|p| set32(p, 3, 2)), "end"),
        (Box::new(|p| set32(p, 3, u32::MAX)), "end"),
        (Box::new(|p| set16(p, 0, 32)), "range"),
        (Box::new(|p| set16(p, 0, u16::MAX)), "range"),
        (Box::new(|p| set16(p, 2, 6)), "unsorted"),
        (Box::new(|p| set16(p, 2, 6)), "unsorted"),
        (Box::new(|p| p[304] = 0x74), "in codebook"),
        (Box::new(|p| p[130] = 0x10), "code"),
        (Box::new(|p| p[200] = 1), "no-op (sign+mantissa)"),
    ];
    for (mutate, what) in cases {
        let mut p = base.clone();
        mutate(&mut p);
        let r = splitzip::decode(&p);
        if what.starts_with("no-op") {
            assert!(r.is_ok());
        } else {
            assert!(r.is_err(), "{what}");
            let _ = sz_both(&p);
        }
    }
}

#[test]
fn splitzip_truncation_and_garbage_never_panic() {
    let words: Vec<u16> =
        (0..5000u32).map(|i| half::bf16::from_f32((i as f32).sin() * 3.0).to_bits()).collect();
    let mut words2 = words.clone();
    words2[77] = 1;
    words2[4999] = 0x7f80;
    for cs in [32u32, 1024, 32768] {
        let p = splitzip::encode(&words2, &book(), cs).unwrap();
        assert_eq!(splitzip::decode(&p).unwrap(), words2);
        for cut in (0..p.len()).step_by(7) {
            let _ = sz_both(&p[..cut]);
        }
        let mut long = p.clone();
        long.push(0);
        assert!(matches!(sz_both(&long), SzErr::TrailingBytes { extra: 1 }));
    }
    for n in 0..300 {
        let _ = splitzip::decode(&vec![0xffu8; n]);
        let _ = PayloadHeader::parse(&vec![0u8; n]);
    }
}

#[test]
fn codebook_json_hostile() {
    let deep = "[".repeat(100_000);
    for s in [
        "",
        "{}",
        "null",
        r#"{"exponents":[]}"#,
        r#"{"exponents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14]}"#,
        r#"{"exponents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}"#,
        r#"{"exponents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,14]}"#,
        r#"{"exponents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,256]}"#,
        r#"{"exponents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,-1]}"#,
        r#"{"exponents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,1e400]}"#,
        r#"{"exponents":"AAAAAAAAAAAAAAAA"}"#,
        deep.as_str(),
    ] {
        assert!(Codebook::from_json(s).is_err(), "{s:.40}");
    }
}

// ------------------------------------------------------------------------- exans

fn rec_header(flags: u16, l: u16, h: u16, d: u16, t: u16, n: u32, len: u32) -> Vec<u8> {
    let mut r = vec![0u8; 48];
    r[..4].copy_from_slice(b"KVXA");
    r[4..6].copy_from_slice(&exans::format::VERSION.to_le_bytes());
    r[6..8].copy_from_slice(&flags.to_le_bytes());
    for (i, v) in [l, h, d, t].iter().enumerate() {
        r[8 + 2 * i..10 + 2 * i].copy_from_slice(&v.to_le_bytes());
    }
    r[16..20].copy_from_slice(&n.to_le_bytes());
    r[20..24].copy_from_slice(&len.to_le_bytes());
    r
}

fn example_record() -> Vec<u8> {
    let mut k = vec![0x3f80u16; 264];
    for (p, w) in [(6, 0x35c0), (7, 0x3a80), (16, 0x4380), (17, 0xbe40), (27, 0x4e80), (28, 0x21a0)] {
        k[p] = w;
    }
    let v = vec![0xbf00u16; 264];
    let shape = exans::BlockShape { layers: 1, kv_heads: 1, head_dim: 33, tokens: 8 };
    let opts = exans::EncodeOptions { precision: 12, raw: exans::RawPolicy::Never, ..Default::default() };
    exans::encode_block_with(&[&k, &v], shape, &opts).unwrap()
}

fn rec_all(r: &[u8]) -> exans::Error {
    let e = exans::decode_block(r).unwrap_err();
    let _ = exans::inspect_record(r);
    let _ = exans::record_shape(r);
    e
}

#[test]
fn exans_shape_extremes() {
    use exans::Error;
    for (l, h, d, t) in [(65535u16, 65535u16, 65535u16, 65535u16), (65535, 65535, 1, 1), (65535, 1, 1, 65535)]
    {
        let r = rec_header(0, l, h, d, t, 0, 48);
        assert!(matches!(rec_all(&r), Error::ShapeOverflow { .. } | Error::ValueCountMismatch { .. }));
    }
    // Largest legal N with a tiny record: 2*L*H*D*B' = 2 * 65535 * 1 * 1 * 16383.
    let n = 2u32 * 65535 * 16383;
    let r = rec_header(0, 65535, 1, 1, 16383, n, 48);
    let mut r2 = r.clone();
    r2[24] = 12;
    r2[25] = 8;
    r2[26] = 32;
    assert!(matches!(rec_all(&r2), Error::SectionMismatch { .. } | Error::Truncated { .. }));
    // record_len claims 4 GiB - 1 on a 48-byte input.
    let r = rec_header(1, 1, 1, 1, 1, 2, u32::MAX);
    assert!(matches!(rec_all(&r), Error::Truncated { .. }));
    // raw with wrong record_len
    let mut r = rec_header(1, 1, 1, 1, 1, 2, 50);
    r.extend([0u8; 2]);
    for o in [28, 32, 36, 40] {
        r[o..o + 4].copy_from_slice(&48u32.to_le_bytes());
    }
    assert!(matches!(rec_all(&r), Error::SectionMismatch { .. }));
}

#[test]
fn exans_model_and_directory_extremes() {
    use exans::Error;
    let base = example_record();
    assert!(exans::decode_block(&base).is_ok());
    let put = |r: &mut Vec<u8>, at: usize, b: &[u8]| r[at..at + b.len()].copy_from_slice(b);
    let cases: Vec<Mutation<'_>> = vec![
        Box::new(|r| put(r, 0x32, &0u16.to_le_bytes())),     // K = 0
        Box::new(|r| put(r, 0x32, &257u16.to_le_bytes())),   // K = 257
        Box::new(|r| put(r, 0x32, &u16::MAX.to_le_bytes())), // K = 65535
        Box::new(|r| put(r, 0x32, &256u16.to_le_bytes())),   // K = 256 past the record
        Box::new(|r| put(r, 0x35, &0u16.to_le_bytes())),     // zero frequency
        Box::new(|r| r[0x37] = 67),                          // duplicate symbol
        Box::new(|r| r[0x37] = 1),                           // not ascending
        Box::new(|r| put(r, 0x35, &9u16.to_le_bytes())),     // sum 4097
        Box::new(|r| put(r, 0x35, &u16::MAX.to_le_bytes())), // sum overflow attempt
        Box::new(|r| put(r, 0x50, &u32::MAX.to_le_bytes())), // word count u32::MAX
        Box::new(|r| put(r, 0x54, &0x8000_0000u32.to_le_bytes())),
        Box::new(|r| put(r, 0x50, &4u32.to_le_bytes())), // one word too many
        Box::new(|r| put(r, 0x50, &2u32.to_le_bytes())), // one word too few
        Box::new(|r| put(r, 0x70, &0xffffu32.to_le_bytes())), // state below 2^16
        Box::new(|r| put(r, 0x70, &u32::MAX.to_le_bytes())), // state at the top
        Box::new(|r| put(r, 0xec, &0x3_0000u32.to_le_bytes())), // idle lane state past its 2 payload bytes
        Box::new(|r| put(r, 0x471, &[0xe1])),            // word 0's high byte: lane 2 ends far above 2^17
        Box::new(|r| put(r, 0x28, &0x470u32.to_le_bytes())), // sm offset overlapping the words
        Box::new(|r| put(r, 0x28, &u32::MAX.to_le_bytes())),
        Box::new(|r| put(r, 0x20, &0u32.to_le_bytes())),
        Box::new(|r| r[0x18] = 1),  // precision 1 with a 4096-sum table
        Box::new(|r| r[0x18] = 13), // precision 13
        Box::new(|r| r[0x4a] = 1),  // padding
    ];
    for (i, m) in cases.iter().enumerate() {
        let mut r = base.clone();
        m(&mut r);
        let e = rec_all(&r);
        assert!(!matches!(e, Error::InBlock { .. }), "case {i}: {e:?}");
    }
    // Words of all ones decode without an error in version 4: each word is read one or two
    // steps before its lane's last symbol, and the lanes end within 2^16 plus their 2
    // payload bytes (spec §6.4), which any payload passes. Only the checksum tells.
    let mut r = base.clone();
    put(&mut r, 0x470, &[0xff; 6]);
    assert_ne!(exans::decode_block(&r).unwrap().1, exans::decode_block(&base).unwrap().1);
    // Every truncation and every single-byte 0xff overwrite.
    for cut in 0..base.len() {
        let _ = exans::decode_block(&base[..cut]);
    }
    for i in 0..base.len() {
        let mut r = base.clone();
        r[i] ^= 0xff;
        let _ = exans::decode_block(&r);
        let _ = exans::inspect_record(&r);
    }
}

fn container_header(l: u16, h: u16, d: u16, b: u16, t: u64, blocks: u32) -> Vec<u8> {
    let mut c = vec![0u8; 32];
    c[..4].copy_from_slice(b"KVXC");
    c[4..6].copy_from_slice(&exans::format::VERSION.to_le_bytes());
    for (i, v) in [l, h, d, b].iter().enumerate() {
        c[8 + 2 * i..10 + 2 * i].copy_from_slice(&v.to_le_bytes());
    }
    c[16..24].copy_from_slice(&t.to_le_bytes());
    c[24..28].copy_from_slice(&blocks.to_le_bytes());
    c
}

#[test]
fn exans_container_extremes() {
    for (l, h, d, b, t, blocks) in [
        (65535u16, 65535u16, 65535u16, 1u16, u64::MAX, u32::MAX),
        (1, 1, 1, 1, u64::MAX, u32::MAX),
        (1, 1, 1, 1, u32::MAX as u64 + 1, 0),
        (1, 1, 1, 1, u32::MAX as u64, u32::MAX), // 4G blocks claimed on a 32-byte input
        (1, 1, 1, 0, 5, 0),
        (0, 1, 1, 1, 5, 5),
    ] {
        let c = container_header(l, h, d, b, t, blocks);
        assert!(exans::container_info(&c).is_err());
        assert!(exans::decode_cache(&c).is_err());
    }
    // Index entries: decreasing, overlapping, past the end, huge.
    let cache = {
        let shape = bf16_field::KvShape::new(1, 1, 8, 5).unwrap();
        let t: Vec<u16> = (0..40u16).map(|i| 0x3f80 + i).collect();
        bf16_field::KvCache::new(shape, vec![t.clone()], vec![t]).unwrap()
    };
    let good = exans::encode_cache(&cache, 2).unwrap();
    assert_eq!(exans::decode_cache(&good).unwrap(), cache);
    for entry in 0..4usize {
        for v in [0u64, 1, 48, 63, 64, 65, u64::MAX, 1 << 40, good.len() as u64 + 16] {
            let mut c = good.clone();
            c[32 + 8 * entry..40 + 8 * entry].copy_from_slice(&v.to_le_bytes());
            let info = exans::container_info(&c);
            let dec = exans::decode_cache(&c);
            if v != u64::from_le_bytes(good[32 + 8 * entry..40 + 8 * entry].try_into().unwrap()) {
                assert!(info.is_err() && dec.is_err(), "entry {entry} = {v}");
            }
        }
    }
    // A record_len of 0 would put every record in the same zero-length slot; the
    // index walk cannot accept it (the length field needs 24 bytes past the slot, the
    // container must end at the slot): both must reject.
    let mut c = container_header(1, 1, 1, 1, 4, 4);
    let first = (32 + 8 * 5 + 15) & !15;
    for _ in 0..5 {
        c.extend((first as u64).to_le_bytes());
    }
    for len in [first, first + 24, first + 48] {
        let mut c = c.clone();
        c.resize(len, 0);
        assert!(exans::container_info(&c).is_err());
        assert!(exans::decode_cache(&c).is_err());
    }
    for cut in 0..good.len() {
        let _ = exans::decode_cache(&good[..cut]);
    }
}

#[test]
fn safetensors_hostile() {
    use bf16_field::io::kv_cache_from_bytes;
    let mk = |json: &str, data: usize| {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend(json.as_bytes());
        v.extend(vec![0u8; data]);
        v
    };
    for (json, data) in [
        (r#"{"layer.0.k":{"dtype":"BF16","shape":[1,1,1],"data_offsets":[0,2]}}"#, 2), // no v
        (
            r#"{"layer.0.k":{"dtype":"BF16","shape":[0,1,1],"data_offsets":[0,0]},"layer.0.v":{"dtype":"BF16","shape":[0,1,1],"data_offsets":[0,0]}}"#,
            0,
        ),
        (r#"{"layer.0.k":{"dtype":"BF16","shape":[1,1],"data_offsets":[0,2]}}"#, 2),
        (
            r#"{"layer.0.k":{"dtype":"BF16","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,2]}}"#,
            2,
        ),
        (
            r#"{"layer.0.k":{"dtype":"BF16","shape":[1,1,1],"data_offsets":[0,2]},"layer.0.v":{"dtype":"BF16","shape":[1,1,1],"data_offsets":[0,2]}}"#,
            2,
        ),
        (
            r#"{"layer.0.k":{"dtype":"BF16","shape":[1,1,1],"data_offsets":[0,2]},"layer.0.v":{"dtype":"F32","shape":[1,1,1],"data_offsets":[2,6]}}"#,
            6,
        ),
        (
            r#"{"layer.0.k":{"dtype":"BF16","shape":[1,1,1],"data_offsets":[0,2]},"layer.0.v":{"dtype":"BF16","shape":[1,1,2],"data_offsets":[2,6]}}"#,
            6,
        ),
    ] {
        assert!(kv_cache_from_bytes(&mk(json, data)).is_err(), "{json}");
    }
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend(b"{}");
    assert!(kv_cache_from_bytes(&huge).is_err());
    let mut big = (1u64 << 40).to_le_bytes().to_vec();
    big.extend(b"{}");
    assert!(kv_cache_from_bytes(&big).is_err());
}

/// Whole-cache decoders (the `CacheCodec` implementations) on truncations, bit flips and
/// garbage of valid encodings, with the right shape and with wrong ones: an error or a
/// cache, never a panic.
#[test]
fn whole_cache_decoders_never_panic() {
    use bf16_field::{CacheCodec, KvShape};
    let cache = kvcodec_testkit::kv_like(2, 2, 16, 21, 5);
    let shapes = [
        cache.shape(),
        KvShape { tokens: 22, ..cache.shape() },
        KvShape { layers: 0, ..cache.shape() },
        KvShape { layers: usize::MAX / 2, ..cache.shape() },
    ];
    fn attack<C: CacheCodec>(codec: &C, bytes: &[u8], shapes: &[KvShape]) {
        let mut rng = kvcodec_testkit::Rng(17);
        let mut inputs: Vec<Vec<u8>> = (0..bytes.len()).step_by(7).map(|n| bytes[..n].to_vec()).collect();
        for _ in 0..300 {
            let mut bad = bytes.to_vec();
            let at = rng.next() as usize % bad.len();
            bad[at] ^= 1 << (rng.next() % 8);
            inputs.push(bad);
        }
        inputs.push((0..600).map(|_| rng.next() as u8).collect());
        for input in &inputs {
            for &shape in shapes {
                let _ = codec.decode(input, shape);
            }
        }
    }
    let plain = splitzip::SplitzipCodec::calibrate(&cache).unwrap();
    for checksum in [false, true] {
        let splitzip = splitzip::SplitzipCodec { checksum, ..plain };
        attack(&splitzip, &splitzip.encode(&cache).unwrap(), &shapes);
        let exans = exans::ExansCodec { block_tokens: 8, checksum };
        attack(&exans, &exans.encode(&cache).unwrap(), &shapes);
    }
    // ZipFusion's blocks are 32 channels wide: a cache of head_dim 32 with a page and a tail.
    let cache = kvcodec_testkit::kv_like(2, 2, 32, 21, 5);
    let shapes = shapes.map(|s| KvShape { head_dim: 32, ..s });
    for variant in zipfusion::Variant::ALL {
        for checksum in [false, true] {
            let zipfusion = zipfusion::ZipfusionCodec { variant, checksum };
            attack(&zipfusion, &zipfusion.encode(&cache).unwrap(), &shapes);
        }
    }
}
