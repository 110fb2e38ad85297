//! A keys-only (MLA latent) cache file: the whole-cache loader refuses it by name, and
//! its words, read with `bf16_field::io::read_kv_file`, go through SplitZip's payload API.

use bf16_field::io::{KvFile, LoadOptions, kv_cache_from_bytes, kv_file_from_bytes};
use bf16_field::{Error, KvKind};
use safetensors::{Dtype, tensor::TensorView};
use splitzip::{Codebook, DEFAULT_CHUNK_SIZE};

#[test]
fn keys_only_words_round_trip_through_the_payload_api() {
    // Three layers of one 576-wide latent "head" over 40 tokens, K only.
    let source = kvcodec_testkit::kv_like(3, 1, 576, 40, 11);
    let bytes: Vec<(String, Vec<u8>)> = (0..3)
        .map(|l| {
            let words = source.tensor(l, KvKind::K);
            (format!("layer.{l}.k"), words.iter().flat_map(|w| w.to_le_bytes()).collect())
        })
        .collect();
    let views =
        bytes.iter().map(|(n, b)| (n.clone(), TensorView::new(Dtype::BF16, vec![40, 1, 576], b).unwrap()));
    let file = safetensors::serialize(views, None).unwrap();

    assert!(matches!(kv_cache_from_bytes(&file), Err(Error::KeysOnly { .. })));
    let KvFile::KeysOnly(cache) = kv_file_from_bytes(&file, &LoadOptions::default()).unwrap() else {
        panic!("a file without V reads as keys-only")
    };
    let words = cache.words();
    assert_eq!(words.len(), cache.value_count());
    let codebook = Codebook::calibrate(&[&words]).unwrap();
    let payload = splitzip::encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
    assert!(payload.len() < 2 * words.len(), "the latent's exponents compress");
    assert_eq!(splitzip::decode(&payload).unwrap(), words);
}
