//! `ExansCodec`: a whole cache as one container, and what its decoder rejects.

use bf16_field::{CacheCodec, KvShape};
use exans::{Error, ExansCodec};
use kvcodec_testkit::{assert_rejects, kv_like, round_trip};

#[test]
fn a_cache_is_one_container() {
    let cache = kv_like(3, 2, 16, 21, 4);
    let codec = ExansCodec { block_tokens: 8, checksum: false };
    let bytes = round_trip(&codec, None, "L=3 H=2 D=16 T=21 B=8", &cache);
    assert_eq!(bytes, exans::encode_cache(&cache, 8).unwrap());
    assert_eq!(
        codec.encode_words(&cache.concat_words(), cache.shape()).unwrap(),
        bytes,
        "flat words in block order encode to the same container"
    );
}

#[test]
fn the_decoder_rejects_other_shapes() {
    let cache = kv_like(2, 1, 8, 5, 6);
    let codec = ExansCodec::default();
    let bytes = codec.encode(&cache).unwrap();
    let other = KvShape::new(2, 1, 8, 6).unwrap();
    assert_rejects!(
        codec.decode(&bytes, other),
        Error::CacheShapeMismatch { expected: [2, 1, 8, 6], found: [2, 1, 8, 5] }
    );
    let mut out = vec![0u16; 3];
    assert_rejects!(
        codec.decode_into(&bytes, cache.shape(), &mut out),
        Error::OutputTooSmall { needed: 160, got: 3 }
    );
    assert_rejects!(
        codec.encode_words(&[0u16; 7], cache.shape()),
        Error::WordCountMismatch { got: 7, expected: 160 }
    );
}

#[test]
fn the_shape_is_checked_before_the_records() {
    // The caller's shape is wrong and record 0 is damaged (its value count field): the
    // shape error comes first, on the CPU and (by the same order of checks)
    // on the GPU. (A damaged record header is a container error, found with the index.)
    let cache = kv_like(2, 1, 8, 5, 6);
    let codec = ExansCodec::default();
    let mut bytes = codec.encode(&cache).unwrap();
    let info = exans::container_info(&bytes).unwrap();
    bytes[info.offsets[0] + 16] ^= 1;
    let right = cache.shape();
    assert_rejects!(codec.decode(&bytes, right), Error::InBlock { block: 0, .. });
    let other = KvShape::new(2, 1, 8, 6).unwrap();
    assert_rejects!(codec.decode(&bytes, other), Error::CacheShapeMismatch { .. });
}

#[test]
fn invalid_shapes_are_errors_not_panics() {
    let codec = ExansCodec::default();
    let bytes = codec.encode(&kv_like(1, 1, 8, 4, 2)).unwrap();
    for shape in [
        KvShape { layers: 1, kv_heads: 1, head_dim: 8, tokens: 0 },
        KvShape { layers: usize::MAX, kv_heads: 2, head_dim: 8, tokens: 4 },
    ] {
        assert_rejects!(codec.decode(&bytes, shape), Error::CacheShapeMismatch { .. });
        assert!(codec.encode_words(&[], shape).is_err(), "{shape:?}");
    }
    assert_rejects!(
        codec.encode_words(&[], KvShape { layers: 1, kv_heads: 1, head_dim: 8, tokens: 0 }),
        Error::InvalidShape { tokens: 0, .. }
    );
}
