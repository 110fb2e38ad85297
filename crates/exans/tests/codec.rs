//! `ExansCodec`: a whole cache as one container, and what its decoder rejects.

use bf16_field::{CacheCodec, KvShape};
use exans::{Error, ExansCodec};
use kvcodec_testkit::{assert_rejects, kv_like, round_trip};

#[test]
fn a_cache_is_one_container() {
    let cache = kv_like(3, 2, 16, 21, 4);
    let codec = ExansCodec { block_tokens: 8 };
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
