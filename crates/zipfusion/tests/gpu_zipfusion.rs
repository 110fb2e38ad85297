//! The GPU page compression, page decode and cache container against the CPU reference,
//! both ways, on the real fixtures and edge shapes, for both variants; hostile pages get
//! the CPU's exact error through the GPU status; page compression replays in a CUDA graph.
//! Skips without a GPU unless `KVCODEC_REQUIRE_GPU=1`.

mod common;

use std::cell::RefCell;

use bf16_field::{KvCache, KvKind};
use cudarc::driver::CudaSlice;
use kvcodec_gpu::{DeviceStatus, GpuContext};
use kvcodec_testkit::{
    assert_cache_encoding_replays, assert_gpu_rejects_like_cpu, fill_device, gpu_or_skip, kv_like,
    replay_in_graph, round_trip,
};
use zipfusion::gpu::{GpuError, PageScratch, decode_pages_device, encode_pages_device, verify_pages};
use zipfusion::{Error, PageShape, Variant, ZipfusionCodec, encode_page, page_info};

/// Every codec value: both variants, with and without the checksum.
fn codecs() -> Vec<ZipfusionCodec> {
    Variant::ALL
        .into_iter()
        .flat_map(|variant| [false, true].map(|checksum| ZipfusionCodec { variant, checksum }))
        .collect()
}

/// KV-like data with exact zeros scattered over K (so zero-aware blocks occur) and a few
/// huge values (so raw blocks occur).
fn with_zeros_and_outliers(layers: usize, heads: usize, dim: usize, tokens: usize, seed: u32) -> KvCache {
    let cache = kv_like(layers, heads, dim, tokens, seed);
    let mut words = cache.words_in(bf16_field::WordOrder::LayerMajor);
    for (i, w) in words.iter_mut().enumerate() {
        if i % 97 == 3 {
            *w = 0;
        } else if i % 4099 == 5 {
            *w = 0x7000;
        }
    }
    KvCache::from_words(cache.shape(), bf16_field::WordOrder::LayerMajor, words).unwrap()
}

#[test]
fn gpu_caches_are_byte_identical_to_cpu_both_ways() {
    let Some(gpu) = gpu_or_skip("gpu_caches_are_byte_identical_to_cpu_both_ways") else { return };
    let mut cases: Vec<(String, KvCache)> = kvcodec_testkit::fixtures();
    cases.push(("example (T = 19, a tail)".into(), common::example_cache()));
    // D = 96 has 3 blocks per metadata entry (not a power of 2; with H = 6 the decoder's
    // second chunk of 32 blocks starts inside an entry); H = 17 has 34 metadata entries
    // (the checks' second group of 32 lanes); the last shape's pages have 64 blocks: the
    // two-pass encoder.
    let shapes = [
        (2, 2, 128, 40),
        (1, 1, 256, 16),
        (1, 4, 32, 7),
        (3, 1, 64, 33),
        (1, 3, 96, 40),
        (1, 6, 96, 32),
        (1, 17, 64, 16),
        (1, 8, 128, 48),
    ];
    for (l, h, d, t) in shapes {
        cases.push((
            format!("L{l} H{h} D{d} T{t}"),
            with_zeros_and_outliers(l, h, d, t, (l * h + d + t) as u32),
        ));
    }
    for codec in codecs() {
        for (name, cache) in &cases {
            round_trip(&codec, Some(&gpu), name, cache);
        }
    }
}

/// A fixture's pages as a pool holds them: for each page its K then its V, `[16, H, D]`.
fn dense_pages(cache: &KvCache) -> (PageShape, usize, Vec<u16>) {
    let s = cache.shape();
    let shape = PageShape::new(s.kv_heads, s.head_dim).unwrap();
    let per_layer = s.tokens / 16;
    let mut words = Vec::new();
    for layer in 0..s.layers {
        for p in 0..per_layer {
            for kind in KvKind::BOTH {
                words.extend_from_slice(cache.page(layer, kind, p, 16).unwrap());
            }
        }
    }
    (shape, s.layers * per_layer, words)
}

/// Encodes `pages` dense pages into slots on the GPU: the slots and lengths, on the host.
fn gpu_encode_pages(
    gpu: &GpuContext,
    words: &[u16],
    shape: PageShape,
    variant: Variant,
    pages: usize,
) -> Result<(Vec<u8>, Vec<u32>), GpuError> {
    let stride = shape.max_page_len();
    let d_words = gpu.upload(words)?;
    let mut slots: CudaSlice<u8> = gpu.zeros(pages * stride)?;
    let mut lens: CudaSlice<u32> = gpu.zeros(pages)?;
    let mut scratch = PageScratch::new(gpu, shape, pages)?;
    encode_pages_device(
        gpu,
        &d_words.slice(..words.len()),
        shape,
        variant,
        pages,
        &mut slots.slice_mut(..pages * stride),
        stride,
        &mut lens.slice_mut(..pages),
        &mut scratch,
    )?;
    Ok((gpu.download(&slots, pages * stride)?, gpu.download(&lens, pages)?))
}

/// Decodes pages held in slots of `stride` bytes on the GPU, with the CPU's error for
/// an invalid page.
fn gpu_decode_slots(
    gpu: &GpuContext,
    slots: &[u8],
    shape: PageShape,
    variant: Variant,
    stride: usize,
) -> Result<Vec<u16>, GpuError> {
    let pages = slots.len() / stride;
    let n = pages * 2 * shape.values_per_kind();
    let d_slots = gpu.upload(slots)?;
    let mut out: CudaSlice<u16> = gpu.zeros(n.max(1))?;
    let mut status = DeviceStatus::new(gpu)?;
    decode_pages_device(
        gpu,
        &d_slots.slice(..slots.len()),
        shape,
        variant,
        pages,
        stride,
        &mut out.slice_mut(..n),
        &mut status,
    )?;
    verify_pages(gpu, &status, slots, shape, variant, pages, stride)?;
    Ok(gpu.download(&out, n)?)
}

/// Pages laid in slots of `stride` bytes, each cut or zero-padded to its slot.
fn into_slots(pages: &[Vec<u8>], stride: usize) -> Vec<u8> {
    let mut slots = vec![0u8; pages.len() * stride];
    for (slot, page) in slots.chunks_exact_mut(stride).zip(pages) {
        let n = page.len().min(stride);
        slot[..n].copy_from_slice(&page[..n]);
    }
    slots
}

#[test]
fn gpu_pages_are_byte_identical_to_cpu_both_ways() {
    let Some(gpu) = gpu_or_skip("gpu_pages_are_byte_identical_to_cpu_both_ways") else { return };
    let mut caches = kvcodec_testkit::fixtures();
    caches.push(("zeros and outliers".into(), with_zeros_and_outliers(2, 2, 128, 64, 5)));
    // 64 blocks a page: past the one-pass encoder, classified and written in two passes.
    caches.push(("H8 D128".into(), with_zeros_and_outliers(1, 8, 128, 48, 9)));
    for (name, cache) in &caches {
        let (shape, pages, words) = dense_pages(cache);
        let per_page = 2 * shape.values_per_kind();
        for variant in Variant::ALL {
            let cpu: Vec<Vec<u8>> = words
                .chunks_exact(per_page)
                .map(|p| encode_page(&p[..per_page / 2], &p[per_page / 2..], shape, variant).unwrap())
                .collect();
            let stride = shape.max_page_len();
            let (slots, lens) = gpu_encode_pages(&gpu, &words, shape, variant, pages).unwrap();
            for (i, (page, slot)) in cpu.iter().zip(slots.chunks_exact(stride)).enumerate() {
                assert_eq!(lens[i] as usize, page.len(), "{name} {variant:?} page {i}: length");
                assert!(slot[..page.len()] == page[..], "{name} {variant:?} page {i}: GPU bytes differ");
            }
            let decoded = gpu_decode_slots(&gpu, &into_slots(&cpu, stride), shape, variant, stride).unwrap();
            assert!(decoded == words, "{name} {variant:?}: GPU decode of the CPU's pages differs");
            // A pool with slots just large enough for the largest page of this run.
            let tight = cpu.iter().map(Vec::len).max().unwrap();
            let decoded = gpu_decode_slots(&gpu, &into_slots(&cpu, tight), shape, variant, tight).unwrap();
            assert!(decoded == words, "{name} {variant:?}: tight slots");
        }
    }
}

/// The example page of the spec (§8) with one byte or field changed, decoded in a slot
/// of `stride` bytes between two valid pages (or alone when the slot cuts it): the GPU's
/// error is the CPU's `page_info` error on the same slot.
fn assert_page_rejected(what: &str, page: Vec<u8>, variant: Variant, stride: usize, expected: Error) {
    let shape = common::example_shape();
    let good = common::example_page();
    let pages = if stride >= good.len() { vec![good.clone(), page, good] } else { vec![page] };
    let slots = into_slots(&pages, stride);
    let cpu =
        page_info(&slots[if pages.len() == 3 { stride..2 * stride } else { 0..stride }], shape, variant);
    assert_eq!(cpu.map(|_| ()), Err(expected.clone()), "{what}: the CPU's error");
    let Some(gpu) = gpu_or_skip(what) else { return };
    match gpu_decode_slots(&gpu, &slots, shape, variant, stride) {
        Err(GpuError::Codec(e)) => assert_eq!(e, expected, "{what}: the GPU's error"),
        other => panic!("{what}: expected {expected:?}, the GPU gave {:?}", other.map(|_| ())),
    }
}

#[test]
fn hostile_pages_get_the_cpu_error_through_the_gpu_status() {
    use KvKind::{K, V};
    let page = common::example_page();
    let stride = page.len();
    let with = |at: usize, bytes: &[u8]| {
        let mut p = page.clone();
        p[at..at + bytes.len()].copy_from_slice(bytes);
        p
    };
    let za = Variant::ZeroAware;
    // (what, page, variant, slot bytes, the CPU's error); one hand-built input per check.
    let cases = [
        // Byte 5: K block 1's metadata byte; 0x79 gives b/2 = 121, so b/2 + 7 = 128.
        (
            "b/2 + d over 127",
            with(5, &[0x79]),
            za,
            stride,
            Error::HalfBaseTooLarge { head: 0, kind: K, block: 1, byte: 0x79 },
        ),
        // Byte 4 (K block 0) is zero-aware, 0x80 | 63: not allowed in a base cache.
        (
            "zero-aware in base",
            page.clone(),
            Variant::Base,
            stride,
            Error::ZeroAwareBlockInBaseVariant { head: 0, kind: K, block: 0, byte: 0xbf },
        ),
        // Byte 6: K entry padding.
        ("padding", with(6, &[1]), za, stride, Error::PaddingNotZero { offset: 6, value: 1 }),
        // K block 1 flagged raw beside its coded 768 bytes: V's blocks would start 256 later.
        (
            "raw flag beside a coded length",
            with(5, &[0xff]),
            za,
            stride,
            Error::OffsetMismatch { head: 0, kind: V, stored: 1552, expected: 1808 },
        ),
        // Bytes 8..12: V's first-block offset, pointed past the slot.
        (
            "offset past the page",
            with(8, &100_000u32.to_le_bytes()),
            za,
            stride,
            Error::OffsetPastPage { head: 0, kind: V, offset: 100_000, len: stride },
        ),
        // A slot 16 bytes short of the page, and one that holds only the metadata.
        ("truncated", page.clone(), za, stride - 16, Error::Truncated { needed: 3344, got: 3328 }),
        ("metadata only", page.clone(), za, 16, Error::Truncated { needed: 1552, got: 16 }),
    ];
    for (what, bad, variant, slot, expected) in cases {
        assert_page_rejected(what, bad, variant, slot, expected);
    }
}

#[test]
fn hostile_containers_get_the_cpu_error_on_the_gpu() {
    let codec = ZipfusionCodec { variant: Variant::ZeroAware, checksum: true };
    let shape = common::example_cache().shape();
    let good = common::example_container();
    let bad = |at: usize, byte: u8| {
        let mut c = good.clone();
        c[at] = byte;
        c
    };
    let page = |e: Error| Error::InPage { layer: 0, page: 0, source: Box::new(e) };
    // The CPU's verdicts, checked here too, so the expectations hold without a GPU.
    let cpu = |bytes: &[u8]| bf16_field::CacheCodec::decode(&codec, bytes, shape).map(|_| ());
    let k_half_base = Error::HalfBaseTooLarge { head: 0, kind: KvKind::K, block: 1, byte: 0x79 };
    assert_eq!(cpu(&bad(48 + 5, 0x79)), Err(page(k_half_base)));
    let mismatch = Error::OffsetMismatch { head: 0, kind: KvKind::V, stored: 1552, expected: 1808 };
    assert_eq!(cpu(&bad(48 + 5, 0xff)), Err(page(mismatch)));
    assert!(matches!(cpu(&bad(48 + 19, good[48 + 19] ^ 1)), Err(Error::ChecksumMismatch { .. })));
    let Some(gpu) = gpu_or_skip("hostile_containers_get_the_cpu_error_on_the_gpu") else { return };
    // The page starts at 48; its byte 5 is K block 1's metadata byte.
    let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &bad(48 + 5, 0x79), shape, "b/2 over 120");
    assert_eq!(e, page(Error::HalfBaseTooLarge { head: 0, kind: KvKind::K, block: 1, byte: 0x79 }));
    let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &bad(48 + 5, 0xff), shape, "raw flag");
    assert!(matches!(e, Error::InPage { .. }), "{e:?}");
    let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &bad(48 + 12, 0x7a), shape, "V b/2 over 120");
    assert_eq!(e, page(Error::HalfBaseTooLarge { head: 0, kind: KvKind::V, block: 0, byte: 0x7a }));
    // A low byte of a coded block: only the checksum sees it.
    let e =
        assert_gpu_rejects_like_cpu(&codec, &gpu, &bad(48 + 16 + 3, good[48 + 16 + 3] ^ 1), shape, "body");
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e:?}");
    let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &good[..good.len() - 16], shape, "truncated");
    assert!(matches!(e, Error::Truncated { .. }), "{e:?}");
    assert_gpu_rejects_like_cpu(&codec, &gpu, &bad(0, b'X'), shape, "magic");
}

#[test]
fn page_compression_replays_in_a_cuda_graph() {
    let Some(gpu) = gpu_or_skip("page_compression_replays_in_a_cuda_graph") else { return };
    let (name, cache) = kvcodec_testkit::fixtures().remove(0);
    let (shape, pages, words) = dense_pages(&cache);
    let pages = pages.min(64);
    let per_page = 2 * shape.values_per_kind();
    let words = &words[..pages * per_page];
    for variant in Variant::ALL {
        let cpu: Vec<Vec<u8>> = words
            .chunks_exact(per_page)
            .map(|p| encode_page(&p[..per_page / 2], &p[per_page / 2..], shape, variant).unwrap())
            .collect();
        let stride = shape.max_page_len();
        let d_words = gpu.upload(words).unwrap();
        let slots: RefCell<CudaSlice<u8>> = RefCell::new(gpu.zeros(pages * stride).unwrap());
        let lens: RefCell<CudaSlice<u32>> = RefCell::new(gpu.zeros(pages).unwrap());
        let mut scratch = PageScratch::new(&gpu, shape, pages).unwrap();
        replay_in_graph(
            &gpu,
            3,
            || {
                fill_device(&gpu, &mut slots.borrow_mut(), 0x5a);
                gpu.stream().memset_zeros(&mut *lens.borrow_mut()).unwrap();
            },
            || {
                encode_pages_device(
                    &gpu,
                    &d_words.slice(..words.len()),
                    shape,
                    variant,
                    pages,
                    &mut slots.borrow_mut().slice_mut(..pages * stride),
                    stride,
                    &mut lens.borrow_mut().slice_mut(..pages),
                    &mut scratch,
                )
                .unwrap();
            },
            |replay| {
                let host = gpu.download(&*slots.borrow(), pages * stride).unwrap();
                let lens = gpu.download(&*lens.borrow(), pages).unwrap();
                for (i, page) in cpu.iter().enumerate() {
                    let what = format!("{name} {variant:?} replay {replay} page {i}");
                    assert_eq!(lens[i] as usize, page.len(), "{what}");
                    assert!(host[i * stride..][..page.len()] == page[..], "{what}");
                }
            },
        );
    }
}

#[test]
fn cache_encoding_replays_in_a_cuda_graph() {
    let Some(gpu) = gpu_or_skip("cache_encoding_replays_in_a_cuda_graph") else { return };
    let caches = [with_zeros_and_outliers(2, 2, 64, 37, 11), with_zeros_and_outliers(2, 2, 64, 37, 12)];
    for codec in codecs() {
        assert_cache_encoding_replays(&gpu, &codec, &caches);
    }
}
