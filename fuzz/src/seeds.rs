//! Seed inputs for every target, encoded from small pieces of the real KV fixtures
//! (`fixtures/smollm2-135m-*.safetensors`: a few layers, heads, dims and tokens of each)
//! plus a few hand-made edge cases (escapes, raw payloads and records, special words).
//!
//! `cargo run --release --no-default-features --features driver --bin gen-seeds` writes them to `fuzz/seeds/<target>/`
//! for libFuzzer; the stable driver builds them in memory and adds whatever files that
//! folder holds (crash reproducers included).

use std::path::{Path, PathBuf};

use bf16_field::{CacheCodec, KvCache, KvKind, KvShape, WordOrder};
use exans::{BlockShape, EncodeOptions, RawPolicy};
use splitzip::{Codebook, SplitzipCodec};
use zipfusion::{PageShape, Variant, ZipfusionCodec};

use crate::targets::{cache_shape_prefix, zipfusion_page_prefix};

/// The repository's `fixtures/` folder.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The committed seed folder of `target`.
pub fn seed_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target)
}

/// The two fixture caches (code, prose); empty when the fixtures cannot be read.
pub fn fixtures() -> Vec<KvCache> {
    ["smollm2-135m-code", "smollm2-135m-prose"]
        .iter()
        .filter_map(|name| {
            bf16_field::io::read_kv_cache(fixtures_dir().join(format!("{name}.safetensors"))).ok()
        })
        .collect()
}

/// The sub-cache of `cache` made of `layers` layers from `first_layer`, its first `heads`
/// heads and `dims` dims of each, and `tokens` tokens from `first_token`.
pub fn sub_cache(cache: &KvCache, first_layer: usize, first_token: usize, shape: KvShape) -> KvCache {
    let src = cache.shape();
    let take = |layer: usize, kind: KvKind| -> Vec<u16> {
        let t = cache.tensor(first_layer + layer, kind);
        let mut out = Vec::with_capacity(shape.values_per_tensor());
        for token in first_token..first_token + shape.tokens {
            for head in 0..shape.kv_heads {
                let at = (token * src.kv_heads + head) * src.head_dim;
                out.extend_from_slice(&t[at..at + shape.head_dim]);
            }
        }
        out
    };
    let keys = (0..shape.layers).map(|l| take(l, KvKind::K)).collect();
    let values = (0..shape.layers).map(|l| take(l, KvKind::V)).collect();
    KvCache::new(shape, keys, values).expect("consistent sub-cache")
}

/// Words with every special kind of BF16 value: +-0, subnormals, +-Inf, NaNs, exponent
/// 0xff and 0x00, around ordinary values.
pub fn special_words(n: usize) -> Vec<u16> {
    const SPECIAL: [u16; 12] =
        [0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x3f80, 0xc000, 0x0080];
    (0..n)
        .map(|i| if i % 5 == 0 { SPECIAL[(i / 5) % SPECIAL.len()] } else { 0x3c00 + (i as u16 * 37) % 0x300 })
        .collect()
}

fn le_words(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Named seeds of `target` (empty for an unknown name).
pub fn for_target(target: &str) -> Vec<(String, Vec<u8>)> {
    let caches = fixtures();
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: String, bytes: Vec<u8>| out.push((name, bytes));
    // Small real pieces: (fixture, first layer, first token, shape).
    let pieces: Vec<(String, KvCache)> = caches
        .iter()
        .zip(["code", "prose"])
        .flat_map(|(c, name)| {
            [
                (format!("{name}-l1h1d16t4"), sub_cache(c, 0, 0, KvShape::new(1, 1, 16, 4).expect("shape"))),
                (format!("{name}-l2h2d8t5"), sub_cache(c, 7, 100, KvShape::new(2, 2, 8, 5).expect("shape"))),
            ]
        })
        .collect();
    // The codebooks a real sender would use: calibrated on the other fixture's K and V.
    let codecs: Vec<SplitzipCodec> = caches
        .iter()
        .rev()
        .map(|c| SplitzipCodec { chunk_size: 32, ..SplitzipCodec::calibrate(c).expect("non-empty") })
        .collect();
    let toy_book = Codebook::new(std::array::from_fn(|i| 0x74 + i as u8)).expect("distinct");
    let special = special_words(96);
    // ZipFusion needs head_dims of whole 32-channel blocks: its own small pieces (a page
    // and a tail of real K and V, whose exact zeros make zero-aware blocks), and 1.0 with
    // every special value among it (exponent 0: zero-aware; 255: raw).
    let mut zipfusion_pieces: Vec<(String, KvCache)> = caches
        .iter()
        .zip(["code", "prose"])
        .flat_map(|(c, name)| {
            [
                (
                    format!("{name}-l1h1d64t19"),
                    sub_cache(c, 0, 0, KvShape::new(1, 1, 64, 19).expect("shape")),
                ),
                (
                    format!("{name}-l2h1d32t16"),
                    sub_cache(c, 11, 200, KvShape::new(2, 1, 32, 16).expect("shape")),
                ),
            ]
        })
        .collect();
    let specials: Vec<u16> =
        (0..2 * 16 * 32).map(|i| if i % 41 == 0 { special[i % special.len()] } else { 0x3f80 }).collect();
    let specials =
        KvCache::from_words(KvShape::new(1, 1, 32, 16).expect("shape"), WordOrder::LayerMajor, specials);
    zipfusion_pieces.push(("special".into(), specials.expect("cache")));
    let zipfusion_codecs = [
        ("base", ZipfusionCodec::default()),
        ("zero-checksum", ZipfusionCodec { variant: Variant::ZeroAware, checksum: true }),
    ];

    match target {
        "splitzip_header" | "splitzip_payload" => {
            for ((name, piece), codec) in pieces.iter().zip(codecs.iter().cycle()) {
                let k: Vec<u16> = piece.tensors_of(KvKind::K).flatten().copied().collect();
                add(format!("{name}-k"), splitzip::encode(&k, &codec.k_codebook, 32).expect("encode"));
            }
            add("special-escapes".into(), splitzip::encode(&special, &toy_book, 32).expect("encode"));
            add("special-raw".into(), splitzip::encode(&special[..3], &toy_book, 32).expect("encode"));
            add("empty".into(), splitzip::encode(&[], &toy_book, 1024).expect("encode"));
            let checked = splitzip::EncodeOptions { chunk_size: 32, checksum: true };
            add(
                "special-checksum".into(),
                splitzip::encode_with(&special, &toy_book, &checked).expect("encode"),
            );
            add(
                "raw-checksum".into(),
                splitzip::encode_with(&special[..3], &toy_book, &checked).expect("encode"),
            );
        }
        "splitzip_codebook_json" => {
            for (i, codec) in codecs.iter().enumerate() {
                add(format!("codec-{i}"), codec.to_json().into_bytes());
                add(format!("codebook-{i}"), codec.k_codebook.to_json().into_bytes());
            }
        }
        "splitzip_cache" => {
            for ((name, piece), codec) in pieces.iter().zip(codecs.iter().cycle()) {
                for checksum in [false, true] {
                    let codec = SplitzipCodec { checksum, ..*codec };
                    let mut bytes = cache_shape_prefix(piece.shape()).to_vec();
                    bytes.extend(codec.encode(piece).expect("encode"));
                    add(if checksum { format!("{name}-checksum") } else { name.clone() }, bytes);
                }
            }
        }
        "splitzip_roundtrip" => {
            for (name, piece) in &pieces {
                let mut bytes = vec![0x80];
                bytes.extend_from_slice(&toy_book.exponents());
                bytes.extend(le_words(&piece.concat_words()[..256.min(piece.shape().total_values())]));
                add(name.clone(), bytes);
            }
            let mut bytes = vec![0];
            bytes.extend_from_slice(&toy_book.exponents());
            bytes.extend(le_words(&special));
            add("special".into(), bytes);
        }
        "exans_record_parse" | "exans_record_decode" => {
            for (name, piece) in &pieces {
                let s = piece.shape();
                let shape = BlockShape {
                    layers: s.layers,
                    kv_heads: s.kv_heads,
                    head_dim: s.head_dim,
                    tokens: s.tokens,
                };
                let groups: Vec<&[u16]> = piece.tensors().map(|(_, _, t)| t).collect();
                // Blocks this small are stored raw by default: code them anyway.
                let coded = EncodeOptions { raw: RawPolicy::Never, ..EncodeOptions::default() };
                add(name.clone(), exans::encode_block_with(&groups, shape, &coded).expect("encode"));
                let checked = EncodeOptions { checksum: true, ..coded };
                add(
                    format!("{name}-checksum"),
                    exans::encode_block_with(&groups, shape, &checked).expect("encode"),
                );
                // The same block in format version 3 (no payload in the states), which
                // decoders still read.
                let v3 = EncodeOptions { version: Some(exans::format::VERSION_3), ..coded };
                add(format!("{name}-v3"), exans::encode_block_with(&groups, shape, &v3).expect("encode"));
            }
            let shape = BlockShape { layers: 1, kv_heads: 1, head_dim: 3, tokens: 16 };
            let groups = [&special[..48], &special[48..]];
            let raw = EncodeOptions { raw: RawPolicy::Always, ..EncodeOptions::default() };
            add("special-raw".into(), exans::encode_block_with(&groups, shape, &raw).expect("encode"));
            let coded = EncodeOptions { raw: RawPolicy::Never, precision: 7, ..EncodeOptions::default() };
            add("special-p7".into(), exans::encode_block_with(&groups, shape, &coded).expect("encode"));
        }
        "exans_container" => {
            let coded = EncodeOptions { raw: RawPolicy::Never, ..EncodeOptions::default() };
            for (name, piece) in &pieces {
                // Coded records (blocks this small are stored raw by default), and the
                // default raw ones for the first piece.
                add(format!("{name}-b2"), exans::encode_cache_with(piece, 2, &coded).expect("encode"));
            }
            if let Some((name, piece)) = pieces.first() {
                add(format!("{name}-b3-raw"), exans::encode_cache(piece, 3).expect("encode"));
                let checked = EncodeOptions { checksum: true, ..coded };
                add(
                    format!("{name}-b2-checksum"),
                    exans::encode_cache_with(piece, 2, &checked).expect("encode"),
                );
            }
            let cache = KvCache::from_words(
                KvShape::new(1, 1, 3, 16).expect("shape"),
                bf16_field::WordOrder::LayerMajor,
                special.clone(),
            )
            .expect("cache");
            add("special-b5".into(), exans::encode_cache(&cache, 5).expect("encode"));
        }
        "exans_model_table" => {
            for (name, piece) in &pieces {
                if let Some(p) = piece.tensors().next() {
                    let mut counts = [0u64; 256];
                    for &w in p.2 {
                        counts[bf16_field::exponent_of(w) as usize] += 1;
                    }
                    for precision in [12u8, 9] {
                        let model = exans::Model::quantize(&counts, precision).expect("quantize");
                        let mut bytes = vec![precision];
                        for &(s, f) in model.entries() {
                            bytes.push(s);
                            bytes.extend_from_slice(&f.to_le_bytes());
                        }
                        add(format!("{name}-p{precision}"), bytes);
                    }
                }
            }
            add("single".into(), vec![12, 127, 0x00, 0x10]);
        }
        "exans_quantize" => {
            for (name, piece) in &pieces {
                let mut counts = [0u32; 256];
                for (_, _, t) in piece.tensors() {
                    for &w in t {
                        counts[bf16_field::exponent_of(w) as usize] += 1;
                    }
                }
                let mut bytes = vec![12, 0];
                bytes.extend(counts.iter().flat_map(|c| c.to_le_bytes()));
                add(name.clone(), bytes);
            }
            let mut flat = vec![12, 20];
            flat.extend((0..256u32).flat_map(|i| (1 + i % 7).to_le_bytes()));
            add("all-256".into(), flat);
        }
        "exans_roundtrip" => {
            for (name, piece) in &pieces {
                let s = piece.shape();
                let mut bytes = vec![
                    (s.layers - 1) as u8,
                    (s.kv_heads - 1) as u8,
                    (s.head_dim - 1) as u8,
                    (s.tokens - 1) as u8,
                    1,
                    0,
                ];
                bytes.extend(le_words(&piece.words_in(bf16_field::WordOrder::LayerMajor)));
                add(name.clone(), bytes);
            }
            let mut bytes = vec![0, 0, 2, 15, 4, 0xa6];
            bytes.extend(le_words(&special));
            add("special-never-p7".into(), bytes);
        }
        "gaac_cache" => {
            // Real blocks need a head_dim of 64: whole heads of the fixtures, 16-40 tokens.
            for (i, c) in caches.iter().enumerate() {
                let name = ["code", "prose"][i];
                let piece = sub_cache(c, 3, 64, KvShape::new(1, 1, 64, 35).expect("shape"));
                let bases = caches.get(1 - i).map(|other| {
                    let cut = sub_cache(other, 3, 0, KvShape::new(1, 1, 64, 128).expect("shape"));
                    gaac::Bases::calibrate(&cut)
                });
                let given = gaac::EncodeOptions { bases, ..Default::default() };
                add(format!("{name}-l1h1d64t35"), gaac::encode_cache(&piece, &given).expect("encode"));
                // Format version 1, which the decoders still read: its checksum over the
                // values.
                let own = gaac::EncodeOptions {
                    checksum: true,
                    calibration_tokens: Some(16),
                    version: Some(gaac::format::VERSION_1),
                    ..Default::default()
                };
                add(format!("{name}-self-checksum"), gaac::encode_cache(&piece, &own).expect("encode"));
                // Format version 2: its checksum over the bytes (a mutated version 1
                // header fails its CRC before the version-2 branch is reached).
                let own_v2 = gaac::EncodeOptions { version: Some(gaac::format::VERSION), ..own };
                add(format!("{name}-self-checksum-v2"), gaac::encode_cache(&piece, &own_v2).expect("encode"));
            }
            let cache = KvCache::from_words(
                KvShape::new(1, 1, 64, 17).expect("shape"),
                bf16_field::WordOrder::LayerMajor,
                special_words(96).into_iter().cycle().take(2 * 17 * 64).collect(),
            )
            .expect("cache");
            let tight = gaac::EncodeOptions { slot_capacity: Some(1440), ..Default::default() };
            add("special-tight-slot".into(), gaac::encode_cache(&cache, &tight).expect("encode"));
        }
        "gaac_bases_json" => {
            for (i, c) in caches.iter().enumerate() {
                let cut = sub_cache(c, 0, 0, KvShape::new(2, 1, 64, 32).expect("shape"));
                add(format!("bases-{i}"), gaac::Bases::calibrate(&cut).to_json().into_bytes());
            }
        }
        "gaac_roundtrip" => {
            for (i, c) in caches.iter().enumerate() {
                let piece = sub_cache(c, 5, 0, KvShape::new(1, 1, 64, 20).expect("shape"));
                for (opts, tag) in [(0u8, "self"), (0x07, "given-bases-checksum")] {
                    let mut bytes = vec![0, 0, 0, 19, opts, 15];
                    bytes.extend(le_words(&piece.words_in(bf16_field::WordOrder::LayerMajor)));
                    add(format!("{}-{tag}", ["code", "prose"][i]), bytes);
                }
            }
            let mut bytes = vec![1, 1, 1, 39, 0x05, 0];
            bytes.extend(le_words(&special_words(96)));
            add("special".into(), bytes);
        }
        "zipfusion_page" => {
            for (name, piece) in &zipfusion_pieces {
                let shape = PageShape::new(piece.shape().kv_heads, piece.shape().head_dim).expect("shape");
                let k = piece.page(0, KvKind::K, 0, 16).expect("a full page");
                let v = piece.page(0, KvKind::V, 0, 16).expect("a full page");
                for variant in Variant::ALL {
                    let mut bytes = zipfusion_page_prefix(shape, variant).to_vec();
                    bytes.extend(zipfusion::encode_page(k, v, shape, variant).expect("encode"));
                    add(format!("{name}-{}", variant.name()), bytes);
                }
            }
        }
        "zipfusion_cache" => {
            for (name, piece) in &zipfusion_pieces {
                for (options, codec) in &zipfusion_codecs {
                    // Switch byte 1: the header CRC is recomputed (a no-op on a valid one).
                    let mut bytes = vec![1u8];
                    bytes.extend(codec.encode(piece).expect("encode"));
                    add(format!("{name}-{options}"), bytes);
                }
            }
        }
        "zipfusion_roundtrip" => {
            for (name, piece) in &zipfusion_pieces {
                let s = piece.shape();
                let shape =
                    [s.layers - 1, s.kv_heads - 1, s.head_dim / 32 - 1, s.tokens - 1].map(|v| v as u8);
                let mut bytes = shape.to_vec();
                bytes.push(1); // zero-aware, no checksum
                bytes.extend(le_words(&piece.words_in(WordOrder::LayerMajor)));
                add(name.clone(), bytes);
            }
        }
        "field_split_merge" => {
            add("special".into(), le_words(&special));
            if let Some((name, piece)) = pieces.first() {
                add(name.clone(), le_words(&piece.concat_words()[..128]));
            }
        }
        "field_safetensors" => {
            for (name, piece) in pieces.iter().take(2) {
                add(name.clone(), bf16_field::io::kv_cache_to_bytes(piece, None).expect("write"));
            }
        }
        _ => {}
    }
    out
}

/// The files of `target`'s seed folder (committed seeds, crash reproducers), sorted by
/// name; empty when there is none.
pub fn from_dir(target: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(seed_dir(target)) else { return Vec::new() };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).ok()?)))
        .collect();
    files.sort();
    files
}
