//! The KV file loaders on small safetensors files built here: every accepted layout
//! reads to the cache it holds, and every tensor that is not read is named in a typed
//! error (nothing is dropped silently).

use bf16_field::io::{KvFile, KvLayout, LoadOptions, kv_cache_from_bytes, kv_file_from_bytes, read_kv_file};
use bf16_field::{Error, KvCache, KvKind, KvShape};
use safetensors::{Dtype, tensor::TensorView};

/// A BF16 tensor for [`file`]: name, shape, words.
type Tensor = (String, Vec<usize>, Vec<u16>);

/// The safetensors bytes of `tensors`, all BF16.
fn file(tensors: &[Tensor]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> =
        tensors.iter().map(|(_, _, w)| w.iter().flat_map(|w| w.to_le_bytes()).collect()).collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), b)| (name.clone(), TensorView::new(Dtype::BF16, shape.clone(), b).unwrap()));
    safetensors::serialize(views, None).unwrap()
}

/// Zero-filled BF16 tensors of the given names and shapes.
fn zeros(tensors: &[(&str, &[usize])]) -> Vec<u8> {
    file(
        &tensors
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_vec(), vec![0; s.iter().product()]))
            .collect::<Vec<_>>(),
    )
}

/// A cache whose every word is distinct and nonzero (so a misplaced word shows).
fn reference(layers: usize, kv_heads: usize, head_dim: usize, tokens: usize) -> KvCache {
    let shape = KvShape::new(layers, kv_heads, head_dim, tokens).unwrap();
    let n = shape.values_per_tensor();
    let tensor = |i: usize| (0..n).map(|j| (1 + i * n + j) as u16).collect::<Vec<u16>>();
    KvCache::new(
        shape,
        (0..layers).map(|l| tensor(2 * l)).collect(),
        (0..layers).map(|l| tensor(2 * l + 1)).collect(),
    )
    .unwrap()
}

/// `cache` in the kvcodec layout under `names(layer, kind)`, `[T, H, D]`.
fn per_kind_file(cache: &KvCache, names: impl Fn(usize, KvKind) -> String) -> Vec<u8> {
    let s = cache.shape();
    let tensors: Vec<Tensor> = cache
        .tensors()
        .map(|(l, k, w)| (names(l, k), vec![s.tokens, s.kv_heads, s.head_dim], w.to_vec()))
        .collect();
    file(&tensors)
}

fn kvcodec_name(layer: usize, kind: KvKind) -> String {
    bf16_field::io::tensor_name(layer, kind)
}

// ------------------------------------------------------------------ strictness

#[test]
fn a_gap_in_the_layers_is_an_error_not_a_shorter_cache() {
    let t = [2, 1, 4];
    let bytes = zeros(&[("layer.0.k", &t), ("layer.0.v", &t), ("layer.2.k", &t), ("layer.2.v", &t)]);
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    assert!(matches!(err, Error::MissingLayer { layer: 1, ref next } if next == "layer.2.k"), "{err}");
    // A layer-like tensor far beyond the last layer is the same gap.
    let mut tensors: Vec<(String, &[usize])> =
        (0..3).flat_map(|l| [(format!("layer.{l}.k"), &t[..]), (format!("layer.{l}.v"), &t[..])]).collect();
    tensors.push(("layer.7.k".into(), &t));
    let named: Vec<(&str, &[usize])> = tensors.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let err = kv_cache_from_bytes(&zeros(&named)).unwrap_err();
    assert!(matches!(err, Error::MissingLayer { layer: 3, ref next } if next == "layer.7.k"), "{err}");
}

#[test]
fn a_v_without_its_k_is_an_error() {
    let t = [2, 1, 4];
    let bytes = zeros(&[("layer.0.k", &t), ("layer.0.v", &t), ("layer.1.v", &t)]);
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(err, Error::UnpairedTensor { ref present, ref missing } if present == "layer.1.v" && missing == "layer.1.k"),
        "{err}"
    );
    let bytes = zeros(&[("layer.0.k", &t), ("layer.0.v", &t), ("layer.1.k", &t)]);
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    assert!(matches!(err, Error::UnpairedTensor { ref missing, .. } if missing == "layer.1.v"), "{err}");
}

#[test]
fn tensors_outside_the_layout_are_rejected_and_listed() {
    let t = [2, 1, 4];
    let bytes = zeros(&[
        ("layer.0.k", &t),
        ("layer.0.v", &t),
        ("layer.0.q", &t),
        ("layer.01.k", &t),
        ("position_ids", &[2]),
    ]);
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    let Error::UnexpectedTensors { layout: KvLayout::Kvcodec, ref tensors } = err else { panic!("{err}") };
    let names: Vec<&str> = tensors.0.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["layer.0.q", "layer.01.k", "position_ids"]);
    let shown = err.to_string();
    assert!(shown.contains("`position_ids` BF16 [2]"), "{shown}");
}

#[test]
fn two_layouts_in_one_file_are_rejected() {
    let bytes =
        zeros(&[("layer.0.k", &[2, 1, 4]), ("layer.0.v", &[2, 1, 4]), ("kv_cache.0", &[1, 2, 2, 1, 4])]);
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(err, Error::MixedLayouts { ref first, ref second } if first == "kv_cache.0" && second == "layer.0.k"),
        "{err}"
    );
}

#[test]
fn a_file_in_another_layout_is_told_what_is_expected_and_what_it_holds() {
    let mut tensors: Vec<(String, Dtype, Vec<usize>)> =
        (0..12).map(|i| (format!("blocks.{i:02}.weight"), Dtype::F32, vec![3, i + 1])).collect();
    tensors.push(("alpha".into(), Dtype::I64, vec![]));
    let data: Vec<Vec<u8>> =
        tensors.iter().map(|(_, d, s)| vec![0; s.iter().product::<usize>() * d.bitsize() / 8]).collect();
    let views = tensors
        .iter()
        .zip(&data)
        .map(|((n, d, s), b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()));
    let bytes = safetensors::serialize(views, None).unwrap();
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    let Error::UnrecognizedLayout { ref tensors } = err else { panic!("{err}") };
    assert_eq!(tensors.0.len(), 13, "the error holds every tensor");
    let shown = err.to_string();
    for expected in [
        "`layer.{i}.k` and `layer.{i}.v`",
        "BF16",
        "[T, H, D]",
        "the file holds 13 tensors: `alpha` I64 [], `blocks.00.weight` F32 [3, 1]",
        "and 5 more",
    ] {
        assert!(shown.contains(expected), "missing {expected:?} in: {shown}");
    }
    let err =
        kv_cache_from_bytes(&safetensors::serialize(Vec::<(String, TensorView<'_>)>::new(), None).unwrap());
    assert!(err.unwrap_err().to_string().ends_with("the file holds no tensors"));
}

#[test]
fn dtypes_and_shapes_are_checked_in_every_layout() {
    let data = vec![0u8; 16];
    let f16 = [("layer.0.k", Dtype::F16), ("layer.0.v", Dtype::BF16)]
        .map(|(n, d)| (n.to_string(), TensorView::new(d, vec![2, 1, 4], &data).unwrap()));
    let err = kv_cache_from_bytes(&safetensors::serialize(f16, None).unwrap()).unwrap_err();
    assert!(
        matches!(err, Error::WrongDtype { ref name, ref dtype } if name == "layer.0.k" && dtype == "F16")
    );
    let err = kv_cache_from_bytes(&zeros(&[("kv_cache.0", &[2, 3, 2, 1, 4])])).unwrap_err();
    assert!(matches!(err, Error::WrongTensorShape { ref got, .. } if got == &[2, 3, 2, 1, 4]), "{err}");
    let err =
        kv_cache_from_bytes(&zeros(&[("kv_cache.0", &[2, 2, 2, 1, 4]), ("kv_cache.1", &[3, 2, 2, 1, 4])]))
            .unwrap_err();
    assert!(matches!(err, Error::WrongTensorShape { ref name, .. } if name == "kv_cache.1"), "{err}");
    let err = kv_cache_from_bytes(&zeros(&[("layer.0.k", &[1, 1, 2, 4]), ("layer.0.v", &[1, 1, 2, 4])]))
        .unwrap_err();
    assert!(matches!(err, Error::WrongTensorShape { ref name, .. } if name == "layer.0.k"), "{err}");
}

#[test]
fn zero_dimensions_cannot_claim_huge_others() {
    // No data, so nothing bounds the other dimensions: the readers must not allocate or
    // loop by them.
    let huge = 1usize << 50;
    for (name, shape) in [
        ("kv_cache.0", vec![huge, 2, 0, 1, 1]),
        ("model.layers.0.self_attn.k_cache", vec![1, 0, huge, 1]),
        ("layer.0.k", vec![huge, 0, 1]),
    ] {
        let err = kv_cache_from_bytes(&zeros(&[(name, &shape)])).unwrap_err();
        assert!(matches!(err, Error::WrongTensorShape { ref got, .. } if *got == shape), "{err}");
    }
}

// ------------------------------------------------------------------ kvcodec layout

#[test]
fn kvcodec_layout_round_trips_through_the_writer() {
    let cache = reference(3, 2, 4, 5);
    let bytes = bf16_field::io::kv_cache_to_bytes(&cache, None).unwrap();
    assert_eq!(kv_cache_from_bytes(&bytes).unwrap(), cache);
    assert_eq!(per_kind_file(&cache, kvcodec_name), bytes);
    let path = std::env::temp_dir().join(format!("bf16-field-loaders-{}.safetensors", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let read = read_kv_file(&path, &LoadOptions::default());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(read.unwrap(), KvFile::KeysAndValues(cache));
}

#[test]
fn options_on_an_unpaged_file_are_an_error() {
    let bytes = per_kind_file(&reference(1, 1, 4, 2), kvcodec_name);
    for options in [
        LoadOptions { tokens: Some(2), block_table: None },
        LoadOptions { tokens: None, block_table: Some(vec![0]) },
    ] {
        let err = kv_file_from_bytes(&bytes, &options).unwrap_err();
        assert!(matches!(err, Error::OptionsNotApplicable { layout: KvLayout::Kvcodec }), "{err}");
    }
}

// ------------------------------------------------------------------ vLLM paged

/// `cache` as vLLM's per-layer blocks-first tensors `[N, 2, B, H, D]` named by `name`,
/// token block j in physical block `table[j]`; every slot no token fills is garbage.
fn paged_file(cache: &KvCache, blocks: usize, block_size: usize, table: &[usize], name: &str) -> Vec<u8> {
    let s = cache.shape();
    let per_token = s.values_per_token();
    let tensors: Vec<Tensor> = (0..s.layers)
        .map(|layer| {
            let mut words = vec![0xdeadu16; blocks * 2 * block_size * per_token];
            for kind in KvKind::BOTH {
                for (t, token) in cache.tensor(layer, kind).chunks(per_token).enumerate() {
                    let (block, row) = (table[t / block_size], t % block_size);
                    let at = ((block * 2 + kind as usize) * block_size + row) * per_token;
                    words[at..at + per_token].copy_from_slice(token);
                }
            }
            (
                name.replace("{i}", &layer.to_string()),
                vec![blocks, 2, block_size, s.kv_heads, s.head_dim],
                words,
            )
        })
        .collect();
    file(&tensors)
}

#[test]
fn vllm_paged_cache_reads_in_block_table_order_under_each_name() {
    // 21 tokens in blocks of 4: 6 blocks used out of 8, in a scrambled order.
    let cache = reference(2, 2, 3, 21);
    let table = [5, 0, 7, 2, 3, 6];
    for name in ["kv_cache.{i}", "layers.{i}.kv_cache", "model.layers.{i}.self_attn.attn"] {
        let bytes = paged_file(&cache, 8, 4, &table, name);
        let options = LoadOptions { tokens: Some(21), block_table: Some(table.to_vec()) };
        assert_eq!(
            kv_file_from_bytes(&bytes, &options).unwrap(),
            KvFile::KeysAndValues(cache.clone()),
            "{name}"
        );
    }
}

#[test]
fn vllm_paged_cache_defaults_to_every_block_in_order() {
    let cache = reference(3, 1, 4, 12);
    let bytes = paged_file(&cache, 3, 4, &[0, 1, 2], "kv_cache.{i}");
    assert_eq!(kv_cache_from_bytes(&bytes).unwrap(), cache);
    // Only the tokens given, the rest of the last block left out.
    let options = LoadOptions { tokens: Some(10), block_table: None };
    let first_ten = kv_file_from_bytes(&bytes, &options).unwrap().into_kv_cache().unwrap();
    assert_eq!(first_ten.shape().tokens, 10);
    assert_eq!(first_ten.tensor(2, KvKind::V), &cache.tensor(2, KvKind::V)[..10 * 4]);
}

#[test]
fn vllm_paged_cache_rejects_more_tokens_than_its_blocks_hold() {
    let bytes = paged_file(&reference(1, 1, 4, 8), 2, 4, &[0, 1], "kv_cache.{i}");
    let err = kv_file_from_bytes(&bytes, &LoadOptions { tokens: Some(9), block_table: None }).unwrap_err();
    assert!(
        matches!(err, Error::TokensExceedCapacity { tokens: 9, capacity: 8, blocks: 2, block_size: 4 }),
        "{err}"
    );
    let options = LoadOptions { tokens: Some(5), block_table: Some(vec![1]) };
    let err = kv_file_from_bytes(&bytes, &options).unwrap_err();
    assert!(matches!(err, Error::TokensExceedCapacity { capacity: 4, .. }), "{err}");
    let err =
        kv_file_from_bytes(&bytes, &LoadOptions { tokens: None, block_table: Some(vec![2]) }).unwrap_err();
    assert!(matches!(err, Error::BlockTableOutOfRange { position: 0, block: 2, blocks: 2 }), "{err}");
    let err = kv_file_from_bytes(&bytes, &LoadOptions { tokens: Some(0), block_table: None }).unwrap_err();
    assert!(matches!(err, Error::InvalidShape { tokens: 0, .. }), "{err}");
}

// ------------------------------------------------------------------ transformers

fn hf_name(layer: usize, kind: KvKind) -> String {
    format!("model.layers.{layer}.self_attn.{}_cache", kind.suffix())
}

#[test]
fn transformers_names_read_token_major_and_head_major() {
    let cache = reference(2, 3, 4, 5);
    assert_eq!(kv_cache_from_bytes(&per_kind_file(&cache, hf_name)).unwrap(), cache);
    // DynamicCache: [batch 1, H, T, D].
    let s = cache.shape();
    let head_major: Vec<Tensor> = cache
        .tensors()
        .map(|(l, k, _)| {
            let words = cache.tensor_in_layout(l, k, bf16_field::CacheLayout::HeadMajor);
            (hf_name(l, k), vec![1, s.kv_heads, s.tokens, s.head_dim], words)
        })
        .collect();
    assert_eq!(kv_cache_from_bytes(&file(&head_major)).unwrap(), cache);
}

#[test]
fn transformers_batches_of_more_than_one_are_rejected() {
    let t: &[usize] = &[2, 3, 5, 4];
    let bytes = zeros(&[("model.layers.0.self_attn.k_cache", t), ("model.layers.0.self_attn.v_cache", t)]);
    let err = kv_cache_from_bytes(&bytes).unwrap_err();
    assert!(
        matches!(err, Error::BatchNotOne { ref name, batch: 2 } if name == "model.layers.0.self_attn.k_cache"),
        "{err}"
    );
    let bytes = zeros(&[("model.layers.0.self_attn.k_cache", &[1, 1, 2, 3, 4])]);
    assert!(matches!(kv_cache_from_bytes(&bytes), Err(Error::WrongTensorShape { .. })));
}

// ------------------------------------------------------------------ keys only

#[test]
fn a_file_without_v_is_a_keys_only_cache() {
    // MLA-style: one "head" of width 576 per layer, K only.
    let full = reference(3, 1, 576, 4);
    for names in [kvcodec_name as fn(usize, KvKind) -> String, hf_name] {
        let keys: Vec<Tensor> = (0..3)
            .map(|l| (names(l, KvKind::K), vec![4, 1, 576], full.tensor(l, KvKind::K).to_vec()))
            .collect();
        let bytes = file(&keys);
        let KvFile::KeysOnly(cache) = kv_file_from_bytes(&bytes, &LoadOptions::default()).unwrap() else {
            panic!("not keys-only")
        };
        assert_eq!(cache.shape(), full.shape());
        assert_eq!(cache.words(), full.tensors_of(KvKind::K).collect::<Vec<_>>().concat());
        // The K+V loader, which the whole-cache codecs use, says why it cannot take it.
        let err = kv_cache_from_bytes(&bytes).unwrap_err();
        assert!(matches!(err, Error::KeysOnly { shape } if shape == full.shape()), "{err}");
        assert!(err.to_string().contains("K only"), "{err}");
    }
}
