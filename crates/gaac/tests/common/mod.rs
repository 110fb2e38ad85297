//! The worked example of `docs/formats/gaac.md` §8, shared by the tests that print it
//! (`spec_example.rs`) and corrupt it (`errors.rs`).

#![allow(dead_code, unreachable_pub)]

use bf16_field::{KvCache, KvShape};
use gaac::{Bases, EncodeOptions};

/// Index of `(token, channel)` in a `[T, 1, 64]` tensor.
fn at(token: usize, channel: usize) -> usize {
    token * 64 + channel
}

/// The example's bases: 127 for every K channel, 126 for every V channel.
pub fn example_bases() -> Bases {
    let mut bytes = vec![127u8; 64];
    bytes.extend([126u8; 64]);
    Bases::from_bytes(1, 1, 64, bytes).unwrap()
}

/// The example cache: one layer, one KV head, head_dim 64, T = 19 (one block and 3 tail
/// tokens):
///
/// * K block: 1.0 everywhere (exponent 127 = the base: 3-bit offset 0), but 0.5 at
///   (token 0, channel 0) (exponent 126: group 0 takes the 4-bit window from 123),
///   2^16 at (1, 9) (exponent 143: group (1, 1) raw) and -1.0 at (2, 63) (a sign bit).
/// * V block: -0.5 everywhere (exponent 126 = the base), but 2^-40 (exponent 87) at
///   channel 0 of tokens 0-9: ten raw groups, 50 bytes past the planes, so the block
///   (1490 bytes) does not fit the 1488-byte slot and is kept raw.
/// * Tail: 2.0 in K, -2.0 in V.
pub fn example_cache() -> KvCache {
    let mut k = vec![0x3f80u16; 19 * 64];
    k[at(0, 0)] = 0x3f00;
    k[at(1, 9)] = 0x4780;
    k[at(2, 63)] = 0xbf80;
    let mut v = vec![0xbf00u16; 19 * 64];
    for token in 0..10 {
        v[at(token, 0)] = 0x2b80;
    }
    for token in 16..19 {
        k[at(token, 0)..at(token + 1, 0)].fill(0x4000);
        v[at(token, 0)..at(token + 1, 0)].fill(0xc000);
    }
    KvCache::new(KvShape::new(1, 1, 64, 19).unwrap(), vec![k], vec![v]).unwrap()
}

/// The example's options: its bases, the default slot (1488 bytes), the checksum, format
/// version 2.
pub fn example_options() -> EncodeOptions {
    EncodeOptions {
        bases: Some(example_bases()),
        checksum: true,
        version: Some(gaac::format::VERSION),
        ..Default::default()
    }
}

/// The example container (64 + 128 + 16 + 2 x 1488 + 2048 + 768 bytes).
pub fn example_container() -> Vec<u8> {
    gaac::encode_cache(&example_cache(), &example_options()).unwrap()
}

/// Rewrites a container's header CRC-32C after a test changed a header field.
pub fn rehash(bytes: &mut [u8]) {
    let crc = bf16_field::integrity::header_crc32c(&bytes[..64], 60);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// `bytes` (a version 2 container this crate's encoder wrote from `cache`) as format
/// version 1 has it (spec §5.1): the same layout with version 1 and, when flag bit 0 is
/// set, the Adler-32 of the values (layer-major) as its checksum. Made by hand, so that
/// the tests also check that the encoder's version 1 output is exactly this.
pub fn as_version_1(bytes: &[u8], cache: &KvCache) -> Vec<u8> {
    let mut v1 = bytes.to_vec();
    v1[4..6].copy_from_slice(&gaac::format::VERSION_1.to_le_bytes());
    if v1[6] & gaac::format::FLAG_CHECKSUM != 0 {
        let words = cache.words_in(bf16_field::WordOrder::LayerMajor);
        v1[40..44].copy_from_slice(&bf16_field::integrity::adler32_words(&words).to_le_bytes());
    }
    rehash(&mut v1);
    v1
}
