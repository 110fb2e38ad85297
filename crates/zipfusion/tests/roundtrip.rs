//! Round trips on edge cases: every BF16 word, special values (NaN, ±Inf, subnormals,
//! ±0), all-zero blocks, blocks exactly at the window edges, head_dim 64, 128 and 256,
//! T below 16 and not a multiple of 16; whole caches and single pages, moved pages.

use bf16_field::{CacheCodec, KvCache, KvKind, KvShape, WordOrder};
use kvcodec_testkit::{cache_from, kv_like, special_words};
use zipfusion::{
    BlockCounts, EncodeOptions, PageShape, Variant, ZipfusionCodec, cache_info, decode_cache, decode_page,
    encode_cache, max_encoded_len, page_info,
};

/// Every codec value on `cache`: the trait and the free functions write the same bytes,
/// which decode to the cache, whole and page by page, within `max_encoded_len`. Returns
/// the block counts of each variant, `[K, V]`.
fn round_trip(cache: &KvCache) -> [[BlockCounts; 2]; 2] {
    let shape = cache.shape();
    let page_shape = PageShape::new(shape.kv_heads, shape.head_dim).unwrap();
    Variant::ALL.map(|variant| {
        let mut counts = None;
        for checksum in [false, true] {
            let codec = ZipfusionCodec { variant, checksum };
            let bytes = codec.encode(cache).unwrap();
            assert_eq!(bytes, encode_cache(cache, &EncodeOptions { variant, checksum }).unwrap());
            assert!(bytes.len() <= max_encoded_len(shape).unwrap());
            assert_eq!(codec.decode(&bytes, shape).unwrap(), *cache, "{}", codec.name());
            assert_eq!(decode_cache(&bytes).unwrap(), *cache);
            let info = cache_info(&bytes).unwrap();
            assert_eq!(info.len, bytes.len());
            for (i, (offset, page)) in info.pages.iter().enumerate() {
                let (layer, index) = (i / info.header.pages_per_layer(), i % info.header.pages_per_layer());
                let [k, v] = decode_page(&bytes[*offset..*offset + page.len], page_shape, variant).unwrap();
                assert_eq!(k, cache.page(layer, KvKind::K, index, 16).unwrap());
                assert_eq!(v, cache.page(layer, KvKind::V, index, 16).unwrap());
            }
            counts = Some(info.block_counts());
        }
        counts.expect("two runs")
    })
}

#[test]
fn every_bf16_word_round_trips_in_coded_blocks() {
    // K holds all 65,536 words in order: a block's 512 consecutive words share the sign
    // and span 4 exponents, so every block up to exponent 243 is coded. V holds them
    // reversed and scrambled.
    let cache = cache_from(1, 1, 32, 2048, |_, kind, i| {
        if kind == 0 { i as u16 } else { (i as u16).wrapping_mul(40_503).reverse_bits() }
    });
    let [base, zero_aware] = round_trip(&cache);
    assert_eq!(base, zero_aware);
    // Per sign, blocks of exponents 0-3, ..., 240-243 coded; 244-247 .. 252-255 raw.
    assert_eq!((base[0].coded, base[0].raw), (2 * 61, 2 * 3));
}

#[test]
fn special_values_round_trip() {
    let special = special_words();
    for (heads, dim, tokens) in [(1, 32, 37), (2, 64, 16), (1, 128, 5)] {
        let cache = cache_from(2, heads, dim, tokens, |l, k, i| special[(i * 7 + l + k) % special.len()]);
        round_trip(&cache);
    }
    // A block of 1.0 with one special value: zeros and subnormals are exponent 0 (a
    // zero-aware block), Inf and NaN exponent 255 (raw in both variants).
    for &special in &special {
        let cache = cache_from(1, 1, 32, 16, |_, _, i| if i == 100 { special } else { 0x3f80 });
        let [base, zero_aware] = round_trip(&cache);
        let exponent = (special >> 7) & 0xff;
        assert_eq!(base[0].raw, 1, "{special:#06x}");
        let expected_zero_aware = usize::from(exponent == 0);
        assert_eq!(zero_aware[0].zero_aware, expected_zero_aware, "{special:#06x}");
    }
}

#[test]
fn all_zero_blocks_are_coded_with_base_0() {
    for zero in [0x0000u16, 0x8000] {
        let cache = cache_from(1, 2, 64, 16, |_, _, _| zero);
        let [base, zero_aware] = round_trip(&cache);
        assert_eq!(base, zero_aware, "all zeros fit the base window");
        assert_eq!((base[0].coded, base[1].coded, base[0].raw), (4, 4, 0));
        let bytes = encode_cache(&cache, &EncodeOptions::default()).unwrap();
        let info = cache_info(&bytes).unwrap();
        assert_eq!(info.pages[0].1.blocks(1, KvKind::V), &[zipfusion::BlockMeta::Coded { half_base: 0 }; 2]);
    }
}

#[test]
fn blocks_exactly_at_the_window_edges() {
    // A 16-token page of one head of 32 channels: K is one block of exponents `low` and
    // `high`, V one of exponents 0, `low` and `high` (signs and mantissas varied).
    let block = |low: u16, high: u16| {
        cache_from(1, 1, 32, 16, move |_, kind, i| {
            let e = match i % 5 {
                0 => high,
                1 | 2 => low,
                _ => {
                    if kind == 0 {
                        low
                    } else {
                        0
                    }
                }
            };
            ((i % 2) as u16) << 15 | e << 7 | (i as u16 * 13) & 0x7f
        })
    };
    let counts = |low, high| round_trip(&block(low, high));
    // Base window: 16 exponents from an even base.
    let [base, _] = counts(126, 141);
    assert_eq!(base[0], BlockCounts { coded: 1, ..Default::default() }, "span 15");
    let [base, _] = counts(126, 142);
    assert_eq!(base[0], BlockCounts { raw: 1, ..Default::default() }, "span 16");
    let [base, _] = counts(127, 142);
    assert_eq!(base[0], BlockCounts { raw: 1, ..Default::default() }, "odd low: b = 126 misses 142");
    let [base, _] = counts(240, 255);
    assert_eq!(base[0], BlockCounts { coded: 1, ..Default::default() }, "the top window, b/2 = 120");
    let [base, _] = counts(242, 243);
    assert_eq!(base[0], BlockCounts { raw: 1, ..Default::default() }, "b/2 = 121 could carry");
    // Zero-aware window: exponent 0 and 14 exponents from an even base.
    let [base, zero_aware] = counts(126, 139);
    assert_eq!(base[1], BlockCounts { raw: 1, ..Default::default() });
    assert_eq!(zero_aware[1], BlockCounts { zero_aware: 1, ..Default::default() }, "span 13 and zeros");
    let [_, zero_aware] = counts(126, 140);
    assert_eq!(zero_aware[1], BlockCounts { raw: 1, ..Default::default() }, "span 14 and zeros");
    let [_, zero_aware] = counts(240, 253);
    assert_eq!(
        zero_aware[1],
        BlockCounts { zero_aware: 1, ..Default::default() },
        "the top zero-aware window"
    );
    let [base, zero_aware] = counts(1, 15);
    assert_eq!((base[1].coded, zero_aware[1].coded), (1, 1), "zeros inside [0, 15] stay a base block");
}

#[test]
fn head_dims_64_128_256_and_partial_pages() {
    for (layers, heads, dim, tokens) in
        [(2, 3, 64, 37), (1, 2, 128, 48), (1, 1, 256, 21), (3, 1, 64, 5), (1, 1, 32, 1)]
    {
        let cache = kv_like(layers, heads, dim, tokens, tokens as u32);
        let [base, zero_aware] = round_trip(&cache);
        let blocks = layers * (tokens / 16) * heads * dim / 32;
        assert_eq!(base[0].total(), blocks, "{dim} {tokens}");
        assert_eq!(zero_aware[1].total(), blocks);
    }
}

#[test]
fn a_cache_shorter_than_a_page_is_its_bf16_tail() {
    let cache = kv_like(2, 1, 64, 15, 3);
    let bytes = ZipfusionCodec::default().encode(&cache).unwrap();
    assert_eq!(bytes.len(), 48 + 2 * 2 * 2 * 15 * 64);
    assert_eq!(&bytes[48..50], &cache.tensor(0, KvKind::K)[0].to_le_bytes());
    assert!(cache_info(&bytes).unwrap().pages.is_empty());
    round_trip(&cache);
}

#[test]
fn a_page_decodes_wherever_it_is_moved() {
    let cache = kv_like(1, 2, 64, 48, 11);
    let bytes =
        encode_cache(&cache, &EncodeOptions { variant: Variant::ZeroAware, checksum: false }).unwrap();
    let info = cache_info(&bytes).unwrap();
    let shape = PageShape::new(2, 64).unwrap();
    // Pages copied into a pool in reverse order, each after 16 bytes of other data.
    let mut pool = Vec::new();
    let mut slots = Vec::new();
    for (offset, page) in info.pages.iter().rev() {
        pool.extend_from_slice(&[0xa5; 16]);
        slots.push(pool.len());
        pool.extend_from_slice(&bytes[*offset..*offset + page.len]);
    }
    for (slot, index) in slots.iter().zip((0..3).rev()) {
        // A pool slot runs on past the page: page_info says where it ends.
        let len = page_info(&pool[*slot..], shape, Variant::ZeroAware).unwrap().len;
        let [k, v] = decode_page(&pool[*slot..*slot + len], shape, Variant::ZeroAware).unwrap();
        assert_eq!(k, cache.page(0, KvKind::K, index, 16).unwrap());
        assert_eq!(v, cache.page(0, KvKind::V, index, 16).unwrap());
    }
}

#[test]
fn the_codec_takes_words_layer_major() {
    let cache = kv_like(2, 1, 32, 20, 1);
    for variant in Variant::ALL {
        let codec = ZipfusionCodec { variant, checksum: false };
        assert_eq!(codec.word_order(), WordOrder::LayerMajor);
        let words = cache.words_in(WordOrder::LayerMajor);
        assert_eq!(codec.encode_words(&words, cache.shape()).unwrap(), codec.encode(&cache).unwrap());
    }
    let names: Vec<&str> = [
        (Variant::Base, false),
        (Variant::Base, true),
        (Variant::ZeroAware, false),
        (Variant::ZeroAware, true),
    ]
    .map(|(variant, checksum)| ZipfusionCodec { variant, checksum }.name())
    .to_vec();
    assert_eq!(names, ["zipfusion", "zipfusion-checksum", "zipfusion-zero", "zipfusion-zero-checksum"]);
    // Any codec value decodes any container: the container records its options.
    let bytes = ZipfusionCodec { variant: Variant::ZeroAware, checksum: true }.encode(&cache).unwrap();
    assert_eq!(ZipfusionCodec::default().decode(&bytes, cache.shape()).unwrap(), cache);
    assert_eq!(max_encoded_len(KvShape::new(1, 1, 32, 16).unwrap()).unwrap(), 48 + 16 + 2 * 1024);
}
