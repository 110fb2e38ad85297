//! Shared helpers of the exans integration tests: deterministic data generators and a
//! round-trip checker that runs every encoder path against every decoder path.

#![allow(dead_code, unreachable_pub)]

use bf16_field::{KvCache, KvShape};
use exans::{BlockShape, EncodeOptions, RawPolicy};

/// xorshift32: deterministic, dependency-free pseudo-random words.
pub struct Rng(pub u32);

impl Rng {
    pub fn next(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    /// Roughly normal, via the sum of four uniforms, scaled by `sigma`.
    pub fn normal(&mut self, sigma: f32) -> f32 {
        let s: f32 = (0..4).map(|_| (self.next() >> 8) as f32 / (1 << 24) as f32).sum();
        (s - 2.0) * 1.732 * sigma
    }
}

pub fn bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// A cache whose every tensor is filled by `word(layer, kind, index)`.
pub fn cache_from(
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    tokens: usize,
    mut word: impl FnMut(usize, usize, usize) -> u16,
) -> KvCache {
    let shape = KvShape::new(layers, kv_heads, head_dim, tokens).unwrap();
    let n = shape.values_per_tensor();
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for l in 0..layers {
        keys.push((0..n).map(|i| word(l, 0, i)).collect());
        values.push((0..n).map(|i| word(l, 1, i)).collect());
    }
    KvCache::new(shape, keys, values).unwrap()
}

/// KV-like synthetic data: per-(layer, kind, channel) scales spanning a few octaves,
/// values roughly normal, so exponents concentrate around each group's center.
pub fn kv_like(layers: usize, kv_heads: usize, head_dim: usize, tokens: usize, seed: u32) -> KvCache {
    let mut rng = Rng(seed | 1);
    let channels = kv_heads * head_dim;
    let scales: Vec<f32> = (0..2 * layers * channels)
        .map(|_| 2f32.powf((rng.next() % 1000) as f32 / 1000.0 * 5.0 - 3.0))
        .collect();
    cache_from(layers, kv_heads, head_dim, tokens, |l, k, i| {
        let sigma = scales[(2 * l + k) * channels + i % channels];
        bf16(rng.normal(sigma))
    })
}

/// Encodes every block of `cache` with `policy`, decodes it with both block decoders,
/// and the whole cache with the container; returns the records.
pub fn round_trip(cache: &KvCache, block_tokens: usize, policy: RawPolicy) -> Vec<Vec<u8>> {
    let s = cache.shape();
    let options = EncodeOptions { raw: policy, ..EncodeOptions::default() };
    let mut records = Vec::new();
    for b in 0..s.block_count(block_tokens) {
        let groups = cache.block(b, block_tokens).unwrap();
        let shape = BlockShape {
            layers: s.layers,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            tokens: groups[0].len() / s.values_per_token(),
        };
        let record = exans::encode_block_with(&groups, shape, &options).unwrap();
        let info = exans::inspect_record(&record).unwrap();
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
    let container = exans::encode_cache_with(cache, block_tokens, &options).unwrap();
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

/// `hexdump -C`-style rendering: 16 bytes a line, offset in hex, runs of identical
/// lines collapsed to `*`, the length on the last line.
pub fn hexdump(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in bytes.chunks(16).enumerate() {
        if previous == Some(line) && line.len() == 16 {
            if !starred {
                out.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        previous = Some(line);
        out.push_str(&format!("{:08x} ", i * 16));
        for (j, b) in line.iter().enumerate() {
            out.push_str(if j == 8 { "  " } else { " " });
            out.push_str(&format!("{b:02x}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:08x}\n", bytes.len()));
    out
}

/// The two real fixtures (`KVCODEC_FIXTURES` on the device machine), by name.
pub fn fixture_caches() -> Vec<(String, KvCache)> {
    let caches = bf16_field::fixtures::read_all().unwrap();
    assert_eq!(
        caches.len(),
        2,
        "expected the two SmolLM2 fixtures in {}",
        bf16_field::fixtures::dir().display()
    );
    caches
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
