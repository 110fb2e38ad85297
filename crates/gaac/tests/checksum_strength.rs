//! What a container's checksum catches when one byte of a coded block is corrupted
//! (docs/formats/gaac.md §7.3). One byte of the 3-bit plane holds one field bit of 8
//! values at a fixed stride (spec §3.2: 4 channels 16 apart in 2 tokens 8 apart for K), so
//! a replaced byte moves their exponents by `±2^k`. Format version 1's checksum, the
//! Adler-32 of the values, misses the edits whose moves form `+d, -d` at `i, i + s` and
//! `-d, +d` at `j, j + s`; version 2's, the Adler-32 of the bytes after the header, sees
//! every single-byte change (its byte sum moves by the change, `0 < |d| < 65521`).

mod common;

use bf16_field::KvCache;
use common::as_version_1;
use gaac::{EncodeOptions, cache_info, decode_cache, encode_cache};
use kvcodec_testkit::kv_like;

/// Every replacement of every byte of the first K block's 3-bit plane of `bytes`: the
/// edits that decode without an error to values other than `cache`'s.
fn silent_plane_edits(bytes: &[u8], cache: &KvCache) -> Vec<(usize, u8, u8)> {
    let info = cache_info(bytes).unwrap();
    assert!(info.blocks[0].is_some(), "the K block is coded");
    let plane = info.sections.slots + info.header.block_shape().plane3_at();
    let mut escaped = Vec::new();
    for at in plane..plane + info.header.block_shape().plane3_len() {
        for value in 0..=255u8 {
            let mut corrupt = bytes.to_vec();
            corrupt[at] = value;
            if decode_cache(&corrupt).is_ok_and(|decoded| decoded != *cache) {
                escaped.push((at, bytes[at], value));
            }
        }
    }
    escaped
}

/// Format version 2 (what the encoder writes): all 97,920 edits of one 3-bit plane are
/// caught.
#[test]
fn one_corrupted_plane_byte_is_caught_by_the_checksum() {
    let cache = kv_like(1, 1, 64, 16, 7);
    let options = EncodeOptions { checksum: true, version: Some(2), ..Default::default() };
    let bytes = encode_cache(&cache, &options).unwrap();
    assert_eq!(bytes[4], 2, "version 2");
    let escaped = silent_plane_edits(&bytes, &cache);
    assert!(
        escaped.is_empty(),
        "{} edits decode silently, the first {:?}",
        escaped.len(),
        &escaped[..escaped.len().min(4)]
    );
}

/// The same cache as format version 1 (the same layout, the values' checksum): it decodes,
/// and its checksum misses the 421 edits spec §7.3 counts, the defect version 2 fixes.
#[test]
fn version_1_still_decodes_and_misses_what_spec_7_3_says() {
    let cache = kv_like(1, 1, 64, 16, 7);
    let v2 = EncodeOptions { checksum: true, version: Some(2), ..Default::default() };
    let v1 = encode_cache(&cache, &EncodeOptions { version: Some(1), ..v2.clone() }).unwrap();
    assert_eq!(v1, as_version_1(&encode_cache(&cache, &v2).unwrap(), &cache));
    assert_eq!(cache_info(&v1).unwrap().header.version, 1);
    assert_eq!(decode_cache(&v1).unwrap(), cache);
    assert_eq!(silent_plane_edits(&v1, &cache).len(), 421);
}
