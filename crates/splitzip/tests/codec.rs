//! `SplitzipCodec`: a whole cache as two payloads (spec §9), and what its decoder rejects.

use bf16_field::{CacheCodec, KvShape};
use kvcodec_testkit::{assert_rejects, kv_like, round_trip};
use splitzip::{DecodeError, EncodeError, Error, PayloadHeader, SplitzipCodec};

fn codec() -> SplitzipCodec {
    SplitzipCodec::calibrate(&kv_like(2, 2, 16, 20, 1)).unwrap()
}

#[test]
fn a_cache_is_its_k_payload_then_its_v_payload() {
    let cache = kv_like(3, 2, 16, 21, 4);
    let codec = codec();
    let bytes = round_trip(&codec, None, "L=3 H=2 D=16 T=21", &cache);
    let k = PayloadHeader::parse(&bytes).unwrap();
    let k_len = k.encoded_len() as usize;
    let v = PayloadHeader::parse(&bytes[k_len..]).unwrap();
    assert_eq!(k_len + v.encoded_len() as usize, bytes.len());
    let per_kind = cache.shape().total_values() as u64 / 2;
    assert_eq!((k.value_count, v.value_count), (per_kind, per_kind));
    assert_eq!(k.codebook, codec.k_codebook);
    assert_eq!(v.codebook, codec.v_codebook);
}

#[test]
fn the_decoder_rejects_other_shapes_and_damaged_framing() {
    let cache = kv_like(2, 1, 8, 5, 6);
    let codec = codec();
    let bytes = codec.encode(&cache).unwrap();
    let shape = cache.shape();
    let other = KvShape::new(2, 1, 8, 6).unwrap();
    assert_rejects!(
        codec.decode(&bytes, other),
        Error::Decode(DecodeError::CacheShapeMismatch { expected: 96, found: 80 })
    );
    let k_len = PayloadHeader::parse(&bytes).unwrap().encoded_len() as usize;
    assert_rejects!(
        codec.decode(&bytes[..k_len], shape),
        Error::Decode(DecodeError::Truncated { needed: 128, got: 0 })
    );
    let mut longer = bytes.clone();
    longer.push(0);
    assert_rejects!(codec.decode(&longer, shape), Error::Decode(DecodeError::TrailingBytes { extra: 1 }));
    assert_rejects!(
        codec.decode(&bytes[..10], shape),
        Error::Decode(DecodeError::Truncated { needed: 128, got: 10 })
    );
    let mut out = vec![0u16; 3];
    assert_rejects!(
        codec.decode_into(&bytes, shape, &mut out),
        Error::Decode(DecodeError::OutputTooSmall { .. })
    );
    assert_rejects!(
        codec.encode_words(&[0u16; 7], shape),
        Error::Encode(EncodeError::WordCountMismatch { got: 7, expected: 160 })
    );
}

#[test]
fn the_framing_is_checked_before_any_body() {
    // A damaged K body and a V payload one byte short: the framing error comes first, so
    // the CPU and the GPU (whose host side checks the framing) agree on it.
    let cache = kv_like(2, 2, 16, 20, 7);
    let codec = codec();
    let mut bytes = codec.encode(&cache).unwrap();
    let k = PayloadHeader::parse(&bytes).unwrap();
    let splitzip::Layout::Coded(layout) = k.layout else { panic!("coded") };
    bytes[layout.escape_offsets.offset as usize] = 0xff;
    bytes.pop();
    assert_rejects!(codec.decode(&bytes, cache.shape()), Error::Decode(DecodeError::Truncated { .. }));
}

#[test]
fn invalid_shapes_are_errors_not_panics() {
    let codec = codec();
    let bytes = codec.encode(&kv_like(1, 1, 8, 4, 2)).unwrap();
    for shape in [
        KvShape { layers: 0, kv_heads: 1, head_dim: 8, tokens: 4 },
        // An empty cache (T = 0): a typed error (spec §9); the payload API takes n = 0.
        KvShape { layers: 1, kv_heads: 1, head_dim: 8, tokens: 0 },
        KvShape { layers: usize::MAX, kv_heads: 2, head_dim: 8, tokens: 4 },
    ] {
        assert_rejects!(codec.decode(&bytes, shape), Error::InvalidShape { .. });
        assert_rejects!(codec.encode_words(&[], shape), Error::InvalidShape { .. });
    }
    let empty = splitzip::encode(&[], &codec.k_codebook, 1024).unwrap();
    assert_eq!((empty.len(), splitzip::decode(&empty).unwrap()), (128, vec![]));
}

/// With the checksum, a flipped sign+mantissa bit of K: the error is K's
/// `ChecksumMismatch`, and both halves hold what the payloads hold (V decoded too, as on
/// the GPU), so only that one value differs from the cache.
#[test]
fn a_checksum_mismatch_of_k_still_writes_v() {
    let codec = SplitzipCodec { checksum: true, ..codec() };
    let cache = kv_like(2, 2, 16, 20, 1);
    let mut bytes = codec.encode(&cache).unwrap();
    let k = PayloadHeader::parse(&bytes).unwrap();
    let splitzip::Layout::Coded(layout) = k.layout else { panic!("coded") };
    bytes[layout.sign_mantissa.offset as usize + 3] ^= 0x01;
    let mut out = vec![0x5a5au16; cache.shape().total_values()];
    let err = codec.decode_into(&bytes, cache.shape(), &mut out).unwrap_err();
    assert!(matches!(err, Error::Decode(DecodeError::ChecksumMismatch { .. })), "{err}");
    let want = cache.words_in(codec.word_order());
    let differ: Vec<usize> = (0..want.len()).filter(|&i| out[i] != want[i]).collect();
    assert_eq!(differ, [3], "only the damaged K value differs; V is written");
}
