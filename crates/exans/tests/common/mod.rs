//! Shared helpers of the exans integration tests: the worked example of the spec, and a
//! round-trip checker over every block-level encoder and decoder path; the generic
//! helpers come from `kvcodec-testkit`.

#![allow(dead_code, unreachable_pub)]

use bf16_field::KvCache;
use exans::{BlockShape, EncodeOptions, RawPolicy};
use kvcodec_testkit::{Rng, cache_from, kv_like};

/// Encodes every block of `cache` with `policy`, decodes it with both block decoders,
/// and the whole cache with the container; returns the records.
pub fn round_trip(cache: &KvCache, block_tokens: usize, policy: RawPolicy) -> Vec<Vec<u8>> {
    round_trip_with(cache, block_tokens, &EncodeOptions { raw: policy, ..EncodeOptions::default() })
}

/// [`round_trip`] with any options (the format version included): every record and the
/// container's header carry the version the options ask for.
pub fn round_trip_with(cache: &KvCache, block_tokens: usize, options: &EncodeOptions) -> Vec<Vec<u8>> {
    let s = cache.shape();
    let (policy, version) = (options.raw, options.version.unwrap_or(exans::format::VERSION));
    let mut records = Vec::new();
    for b in 0..s.block_count(block_tokens) {
        let groups = cache.block(b, block_tokens).unwrap();
        let shape = BlockShape {
            layers: s.layers,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            tokens: groups[0].len() / s.values_per_token(),
        };
        let record = exans::encode_block_with(&groups, shape, options).unwrap();
        let info = exans::inspect_record(&record).unwrap();
        assert_eq!(info.version, version, "block {b}");
        match policy {
            RawPolicy::Always => assert!(info.raw, "block {b} must be raw"),
            RawPolicy::Never => assert!(!info.raw, "block {b} must be coded"),
            RawPolicy::Auto => assert!(record.len() <= 48 + 2 * info.values, "block {b} expanded"),
        }
        let (got_shape, words) = exans::decode_block(&record).unwrap();
        assert_eq!(got_shape, shape);
        assert_eq!(words, groups.concat(), "block {b} ({policy:?}) did not round-trip");
        let mut out: Vec<Vec<u16>> = groups.iter().map(|g| vec![0xdead; g.len()]).collect();
        let mut out_refs: Vec<&mut [u16]> = out.iter_mut().map(|g| g.as_mut_slice()).collect();
        exans::decode_block_into(&record, &mut out_refs).unwrap();
        assert_eq!(out.concat(), groups.concat());
        records.push(record);
    }
    let container = exans::encode_cache_with(cache, block_tokens, options).unwrap();
    assert_eq!(u16::from_le_bytes([container[4], container[5]]), version, "container version");
    assert_eq!(&exans::decode_cache(&container).unwrap(), cache, "container ({policy:?})");
    let info = exans::container_info(&container).unwrap();
    for (b, r) in records.iter().enumerate() {
        assert_eq!(info.record(&container, b), &r[..], "container record {b}");
    }
    records
}

/// [`round_trip`] under all three raw policies; returns the `Auto` records.
pub fn round_trip_all(cache: &KvCache, block_tokens: usize) -> Vec<Vec<u8>> {
    round_trip(cache, block_tokens, RawPolicy::Never);
    round_trip(cache, block_tokens, RawPolicy::Always);
    round_trip(cache, block_tokens, RawPolicy::Auto)
}

/// The worked example of spec §9: L = 1, H = 1, D = 33, B' = 8, so N = 528 and each of
/// the 8 partitions holds 66 symbols, one partial tile (m = 8 steps: lanes 0..=7 own 8
/// symbols each, lane 8 owns 2, lanes 9..=31 are idle). K is 1.0 everywhere except six
/// rare exponents in partition 0, two each for lanes 0, 2 and 3, so that lane 2 reads a
/// word in step 0, lane 3 in step 3 and lane 0 in step 6; V is -0.5 everywhere.
pub fn example_block() -> (BlockShape, Vec<Vec<u16>>) {
    let shape = BlockShape { layers: 1, kv_heads: 1, head_dim: 33, tokens: 8 };
    let mut k = vec![0x3f80u16; 264]; // 1.0: exponent 127, sign+mantissa 0x00
    k[6] = 0x35c0; // 1.5 x 2^-20, exponent 107
    k[7] = 0x3a80; // 2^-10, exponent 117
    k[16] = 0x4380; // 2^8, exponent 135
    k[17] = 0xbe40; // -1.5 x 2^-3 = -0.1875, exponent 124
    k[27] = 0x4e80; // 2^30, exponent 157
    k[28] = 0x21a0; // 1.25 x 2^-60, exponent 67
    let v = vec![0xbf00u16; 264]; // -0.5: exponent 126, sign+mantissa 0x80
    (shape, vec![k, v])
}

/// The worked example's record, coded even though raw would be smaller.
pub fn example_record() -> Vec<u8> {
    let (shape, groups) = example_block();
    let refs: Vec<&[u16]> = groups.iter().map(Vec::as_slice).collect();
    let options = EncodeOptions { raw: RawPolicy::Never, ..EncodeOptions::default() };
    exans::encode_block_with(&refs, shape, &options).unwrap()
}

/// The worked example's record in format version 3 (every lane starting at exactly
/// `2^16`, all 528 sign+mantissa bytes in the section): the dump of spec §9 as the
/// version 3 encoder wrote it, kept in `tests/data/example-v3.hex` so that version 3
/// records stay readable.
pub fn example_record_v3() -> Vec<u8> {
    parse_hexdump(include_str!("../data/example-v3.hex"))
}

/// The bytes of a `hexdump -C`-style dump ([`kvcodec_testkit::hexdump`]): `*` repeats
/// the previous line up to the next offset; the last line is the length.
pub fn parse_hexdump(text: &str) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::new();
    let mut previous: Vec<u8> = Vec::new();
    let mut starred = false;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if line.trim() == "*" {
            starred = true;
            continue;
        }
        let mut fields = line.split_whitespace();
        let offset = usize::from_str_radix(fields.next().unwrap(), 16).unwrap();
        if starred {
            while out.len() < offset {
                out.extend_from_slice(&previous);
            }
            starred = false;
        }
        assert_eq!(out.len(), offset, "dump offset {offset:#x}");
        previous = fields.map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        out.extend_from_slice(&previous);
    }
    assert!(previous.is_empty(), "the last line is the length alone");
    out
}

/// Which records of a container are raw.
pub fn raw_flags(container: &[u8]) -> Vec<bool> {
    let info = exans::container_info(container).unwrap();
    (0..info.blocks()).map(|i| exans::inspect_record(info.record(container, i)).unwrap().raw).collect()
}

/// A 48-token cache (L = 2, H = 2, D = 64) whose tokens 16..32 are random words: at
/// B = 16 its middle block does not compress and falls back to raw, between coded ones.
pub fn one_raw_block_cache() -> KvCache {
    let mut rng = Rng(99);
    let base = kv_like(2, 2, 64, 48, 7);
    cache_from(2, 2, 64, 48, |l, k, i| {
        let token = i / 128;
        let w = base.tensor(l, bf16_field::KvKind::BOTH[k])[i];
        if (16..32).contains(&token) { rng.next() as u16 } else { w }
    })
}
