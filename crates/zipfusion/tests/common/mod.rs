//! The worked example of `docs/formats/zipfusion.md` §8, shared by the tests that print it
//! (`spec_example.rs`) and corrupt it (`errors.rs`).

#![allow(dead_code, unreachable_pub)]

use bf16_field::{KvCache, KvShape};
use zipfusion::{EncodeOptions, PageShape, Variant};

/// The example's page shape: one KV head of head_dim 64, two blocks per kind.
pub fn example_shape() -> PageShape {
    PageShape::new(1, 64).unwrap()
}

/// Index of `(token, channel)` in a `[16, 1, 64]` page tensor.
fn at(token: usize, channel: usize) -> usize {
    token * 64 + channel
}

/// The example page's K and V, each `[16, 1, 64]`:
///
/// * K block 0 (channels 0-31): 1.0 everywhere, but -1.0 at (token 0, channel 0), -8.0 at
///   (8, 0), +0 at (5, 3) and the negative smallest subnormal at (5, 4). The zero and the
///   subnormal (exponent 0) make it zero-aware, base 126.
/// * K block 1 (channels 32-63): 1.0, and 0.375 at (15, 63): coded, base 124.
/// * V block 0 (channels 0-31): 0.5, and 2^16 at (3, 7): exponents 126 to 143, raw.
/// * V block 1 (channels 32-63): -0.5 everywhere: coded, base 126.
pub fn example_kv() -> (Vec<u16>, Vec<u16>) {
    let mut k = vec![0x3f80u16; 16 * 64];
    k[at(0, 0)] = 0xbf80;
    k[at(8, 0)] = 0xc100;
    k[at(5, 3)] = 0x0000;
    k[at(5, 4)] = 0x8001;
    k[at(15, 63)] = 0x3ec0;
    let mut v = vec![0x3f00u16; 16 * 64];
    for token in 0..16 {
        v[at(token, 32)..at(token, 64)].fill(0xbf00);
    }
    v[at(3, 7)] = 0x4780;
    (k, v)
}

/// The example page, zero-aware variant (3344 bytes).
pub fn example_page() -> Vec<u8> {
    let (k, v) = example_kv();
    zipfusion::encode_page(&k, &v, example_shape(), Variant::ZeroAware).unwrap()
}

/// The example cache: one layer, the example page's 16 tokens and 3 more (the BF16 tail:
/// 2.0 in K, -2.0 in V), T = 19.
pub fn example_cache() -> KvCache {
    let (mut k, mut v) = example_kv();
    k.extend(std::iter::repeat_n(0x4000u16, 3 * 64));
    v.extend(std::iter::repeat_n(0xc000u16, 3 * 64));
    KvCache::new(KvShape::new(1, 1, 64, 19).unwrap(), vec![k], vec![v]).unwrap()
}

/// The example container: zero-aware, with the checksum (48 + 3344 + 768 bytes).
pub fn example_container() -> Vec<u8> {
    let options = EncodeOptions { variant: Variant::ZeroAware, checksum: true };
    zipfusion::encode_cache(&example_cache(), &options).unwrap()
}
