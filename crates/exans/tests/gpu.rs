//! The GPU decoder against the CPU reference: CPU encode -> GPU decode must give back
//! the original cache on the real fixtures and on edge cases, and a corrupted container
//! must give the CPU decoder's exact error. Skips without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

mod common;

use bf16_field::KvCache;
use common::{one_raw_block_cache, raw_flags};
use exans::gpu::{DecodeChecks, DeviceIndex, GpuError, decode_device, decode_to_cache};
use exans::{
    EncodeOptions, RawPolicy, container_info, decode_cache, encode_cache, encode_cache_with, inspect_record,
};
use kvcodec_gpu::GpuContext;
use kvcodec_testkit::gpu_or_skip;
use kvcodec_testkit::{Rng, cache_from, fixtures, kv_like};

fn options(raw: RawPolicy, precision: u8) -> EncodeOptions {
    EncodeOptions { precision, raw, ..EncodeOptions::default() }
}

/// Every value 1.0 or -1.0 (one exponent): every block's model has one symbol (K = 1).
fn one_symbol_cache() -> KvCache {
    cache_from(1, 2, 64, 40, |_, _, i| if i % 3 == 0 { 0xbf80 } else { 0x3f80 })
}

/// CPU encode -> GPU decode; the result must equal the original and the CPU decode.
fn check_round_trip(
    gpu: &GpuContext,
    name: &str,
    cache: &KvCache,
    block_tokens: usize,
    opts: &EncodeOptions,
) {
    let container = encode_cache_with(cache, block_tokens, opts).unwrap();
    assert_eq!(&decode_cache(&container).unwrap(), cache, "{name}: CPU round trip");
    let got = decode_to_cache(gpu, &container).unwrap_or_else(|e| panic!("{name}: GPU decode: {e}"));
    if &got != cache {
        let want = cache.concat_words();
        let have = got.concat_words();
        let first = want.iter().zip(&have).position(|(a, b)| a != b);
        panic!("{name} (B = {block_tokens}, {opts:?}): GPU output differs, first at value {first:?}");
    }
}

#[test]
fn gpu_decode_matches_cpu_on_the_fixtures() {
    let Some(gpu) = gpu_or_skip("gpu_decode_matches_cpu_on_the_fixtures") else { return };
    for (name, cache) in fixtures() {
        // B = 16: 32 full blocks; B = 13: 39 full blocks and a trailing block of 5 tokens.
        for block_tokens in [16, 13] {
            let container = encode_cache(&cache, block_tokens).unwrap();
            assert!(raw_flags(&container).iter().all(|raw| !raw), "{name}: fixture blocks are coded");
            let got = decode_to_cache(&gpu, &container).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == cache, "{name}, B = {block_tokens}: GPU decode differs from the original");
        }
        // A lower precision (a smaller table, a different mask) on the same data.
        check_round_trip(&gpu, &name, &cache, 16, &options(RawPolicy::Never, 10));
    }
}

#[test]
fn gpu_decode_matches_cpu_on_edge_cases() {
    let Some(gpu) = gpu_or_skip("gpu_decode_matches_cpu_on_edge_cases") else { return };
    let auto = options(RawPolicy::Auto, 12);
    let never = options(RawPolicy::Never, 12);
    let always = options(RawPolicy::Always, 12);

    // L = H = D = B = 1: N = 2, raw under Auto; coded under Never, where six of the eight
    // partitions are empty and every lane but lane 0 of partitions 3 and 7 is idle.
    for tokens in [1, 5] {
        let tiny = kv_like(1, 1, 1, tokens, 3);
        assert!(raw_flags(&encode_cache(&tiny, 1).unwrap()).iter().all(|&raw| raw));
        for opts in [auto, never, always] {
            check_round_trip(&gpu, "L=H=D=B=1", &tiny, 1, &opts);
        }
    }
    // Partition lengths around the lane count: N = 2 L B' H D in 8..=600.
    for (l, h, d, t, b) in
        [(1, 1, 2, 2, 2), (1, 1, 33, 8, 8), (2, 1, 16, 3, 3), (1, 3, 5, 19, 19), (3, 2, 7, 7, 7)]
    {
        let cache = kv_like(l, h, d, t, 11 + d as u32);
        check_round_trip(&gpu, &format!("small L={l} H={h} D={d} T={t}"), &cache, b, &never);
    }

    // Partial trailing block (37 = 2 x 16 + 5), coded and auto, at two precisions.
    let partial = kv_like(2, 2, 64, 37, 5);
    for opts in [auto, never, options(RawPolicy::Never, 9)] {
        check_round_trip(&gpu, "partial trailing block", &partial, 16, &opts);
    }
    // Tables of fewer slots than threads (some warps, or lanes, fill none): 2^n distinct
    // exponents per block, so every symbol holds one slot.
    for precision in [2u8, 4, 5, 6, 7] {
        let few = cache_from(2, 2, 64, 37, |_, _, i| {
            (((120 + i % (1 << precision)) as u16) << 7) | (i as u16 & 0x807f)
        });
        check_round_trip(&gpu, "small table", &few, 16, &options(RawPolicy::Never, precision));
    }

    // One raw-fallback block between coded ones: tokens 16..32 are random words.
    let mixed = one_raw_block_cache();
    let container = encode_cache(&mixed, 16).unwrap();
    assert_eq!(raw_flags(&container), vec![false, true, false], "block 1 falls back to raw");
    check_round_trip(&gpu, "raw-fallback block", &mixed, 16, &auto);

    // One-symbol blocks: every value 1.0 (and -1.0, same exponent): K = 1, freq 4096, no
    // words, every final state 2^16 plus its lane's payload.
    let one = one_symbol_cache();
    let container = encode_cache(&one, 16).unwrap();
    let info = container_info(&container).unwrap();
    let first = inspect_record(info.record(&container, 0)).unwrap();
    assert!(!first.raw);
    assert_eq!(first.model, vec![(127, 4096)]);
    assert_eq!(first.word_counts, [0; 8]);
    check_round_trip(&gpu, "one symbol", &one, 16, &auto);
    check_round_trip(&gpu, "one symbol, precision 1", &one, 16, &options(RawPolicy::Never, 1));

    // All 256 exponents: a skewed block with every exponent at least once (K = 256),
    // and a uniform one. Precision 8 gives every symbol exactly one slot.
    let mut rng = Rng(1234);
    let all = cache_from(2, 2, 64, 32, |_, _, i| {
        let e = if i % 7 == 0 { (i / 7) % 256 } else { 120 + (rng.next() % 9) as usize };
        ((e as u16) << 7) | (rng.next() as u16 & 0x807f)
    });
    let container = encode_cache_with(&all, 32, &never).unwrap();
    let info = container_info(&container).unwrap();
    assert_eq!(inspect_record(info.record(&container, 0)).unwrap().model.len(), 256);
    for opts in [auto, never, options(RawPolicy::Never, 8)] {
        check_round_trip(&gpu, "all 256 exponents", &all, 32, &opts);
    }
    let uniform =
        cache_from(1, 1, 256, 4, |_, k, i| (((i + 17 * k) % 256) as u16) << 7 | (i as u16 & 0x807f));
    for opts in [never, options(RawPolicy::Never, 8)] {
        check_round_trip(&gpu, "uniform 256 exponents", &uniform, 4, &opts);
    }

    // Records of up to 512 groups keep their centers in shared memory, larger ones read
    // them from the record: 2L = 512 and 2L = 600 groups, one value per group and token.
    for layers in [256, 300] {
        let deep = kv_like(layers, 1, 1, 5, 21);
        check_round_trip(&gpu, &format!("L={layers}"), &deep, 4, &never);
    }
    // The same above 512 groups in a regular layout (partitions and groups of whole
    // 256-value tiles, spec 6.2), where the kernel stores tiles at a running pointer:
    // 2L = 514 groups of 8 x 256 values.
    let deep_regular = kv_like(257, 1, 256, 8, 23);
    check_round_trip(&gpu, "L=257, regular tiles", &deep_regular, 8, &never);
    // Above 512 groups, aligned but not regular (groups of 264 values): whole tiles go by
    // the checked 16-byte path, the rest value by value.
    let deep_aligned = kv_like(257, 1, 264, 2, 25);
    check_round_trip(&gpu, "L=257, aligned tiles", &deep_aligned, 1, &never);
    // A regular partition of an odd number of tiles (3 of 256 values): a round with
    // one tile.
    let odd_tiles = kv_like(4, 3, 32, 64, 27);
    check_round_trip(&gpu, "regular, 3 tiles", &odd_tiles, 8, &never);

    // Many records in one launch, with varied centers per group.
    let many = kv_like(4, 3, 32, 333, 77);
    for block_tokens in [1, 7, 16, 64, 333] {
        check_round_trip(&gpu, "many records", &many, block_tokens, &auto);
        check_round_trip(&gpu, "many records", &many, block_tokens, &never);
    }
}

#[test]
fn gpu_decode_device_reuses_its_index() {
    let Some(gpu) = gpu_or_skip("gpu_decode_device_reuses_its_index") else { return };
    let cache = kv_like(3, 2, 64, 50, 21);
    let container = encode_cache(&cache, 16).unwrap();
    let index = DeviceIndex::new(&gpu, &container).unwrap();
    assert_eq!(index.values(), cache.shape().total_values());
    let d_container = gpu.upload(&container).unwrap();
    let mut out = gpu.zeros::<u16>(index.values()).unwrap();
    let mut checks = DecodeChecks::new(&gpu, 0).unwrap();
    for _ in 0..3 {
        decode_device(&gpu, &d_container.as_view(), &index, &mut out.as_view_mut(), &mut checks).unwrap();
        assert_eq!(checks.status(&gpu).unwrap(), 0);
        assert_eq!(gpu.download(&out, index.values()).unwrap(), cache.concat_words());
    }
    // A container of another length, or an output that is too small, is refused.
    let short = d_container.slice(..container.len() - 16);
    let err = decode_device(&gpu, &short, &index, &mut out.as_view_mut(), &mut checks).unwrap_err();
    assert!(matches!(err, GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "container", .. })), "{err}");
    let mut small = out.slice_mut(..index.values() - 1);
    let err = decode_device(&gpu, &d_container.as_view(), &index, &mut small, &mut checks).unwrap_err();
    assert!(matches!(err, GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "out", .. })), "{err}");
}

/// Decodes `bad` on both paths: both accept with the same cache, or both reject with
/// the same error. Returns true if the GPU kernel (not the host validation) found it.
fn check_same_outcome(gpu: &GpuContext, what: &str, bad: &[u8]) -> bool {
    let host_valid = DeviceIndex::new(gpu, bad).is_ok();
    match (decode_cache(bad), decode_to_cache(gpu, bad)) {
        (Ok(cpu), Ok(got)) => {
            assert!(cpu == got, "{what}: both accept, outputs differ");
            false
        }
        (Err(cpu), Err(GpuError::Codec(got))) => {
            assert_eq!(got, cpu, "{what}");
            host_valid
        }
        (cpu, got) => panic!("{what}: CPU {:?} vs GPU {:?}", cpu.err(), got.err()),
    }
}

#[test]
fn gpu_decode_reports_the_cpu_error() {
    let Some(gpu) = gpu_or_skip("gpu_decode_reports_the_cpu_error") else { return };
    let (_, cache) = fixtures().remove(0);
    let container = encode_cache(&cache, 16).unwrap();
    let info = container_info(&container).unwrap();
    let mut kernel_found = 0;
    for block in [0, info.blocks() - 1] {
        let start = info.offsets[block];
        let record = inspect_record(info.record(&container, block)).unwrap();
        assert!(!record.raw);
        let [_, centers, model, _, words, sign_mantissa] = record.section_bytes;
        let model_at = 48 + centers;
        let directory = model_at + model;
        let words_at = directory + 1056;
        let sm_at = words_at + words;
        let states = directory + 32;
        let word_bytes = 2 * record.word_counts.iter().sum::<u32>() as usize;
        let spots = [
            ("magic", 0),
            ("layers", 8),
            ("record_len", 20),
            ("precision", 24),
            ("center", 48),
            ("model count", model_at),
            ("model symbol", model_at + 2),
            ("model freq", model_at + 3),
            ("model freq high", model_at + 4 + 3 * 5),
            ("word count 0", directory),
            ("word count 7", directory + 28),
            ("state p0 lane 0", states),
            ("state p1 lane 5 high", states + 4 * (32 + 5) + 3),
            ("state p7 lane 31", states + 4 * 255 + 1),
            ("state p3 lane 9 low", states + 4 * (96 + 9)),
            ("word 0", words_at),
            ("word 0 high", words_at + 1),
            ("word middle", words_at + word_bytes / 2),
            ("near the end of the words", sm_at - 16 - 2),
            ("stream padding", sm_at - 1),
            ("sign+mantissa first", sm_at),
            ("sign+mantissa last", sm_at + sign_mantissa - 1),
        ];
        for (what, at) in spots {
            for flip in [0x01u8, 0x5a, 0x80] {
                let mut bad = container.clone();
                bad[start + at] ^= flip;
                kernel_found +=
                    check_same_outcome(&gpu, &format!("block {block} {what} ^ {flip:#x}"), &bad) as usize;
            }
        }
        // Two words of a stream swapped; a final state set to 2^16.
        let mut bad = container.clone();
        bad.swap(start + words_at, start + words_at + 2);
        bad.swap(start + words_at + 1, start + words_at + 3);
        kernel_found += check_same_outcome(&gpu, &format!("block {block} words swapped"), &bad) as usize;
        let mut bad = container.clone();
        bad[start + states + 40..start + states + 44].copy_from_slice(&65_536u32.to_le_bytes());
        kernel_found += check_same_outcome(&gpu, &format!("block {block} state reset"), &bad) as usize;
    }
    assert!(kernel_found >= 10, "only {kernel_found} corruptions reached the kernel");
    let truncated = &container[..container.len() - 1];
    kvcodec_testkit::assert_rejects!(
        decode_to_cache(&gpu, truncated),
        GpuError::Codec(exans::Error::Truncated { .. })
    );
}

/// One-symbol records (K = 1) are written without decoding on the GPU (a step maps the
/// state to itself and reads no word), so the final-state check is what the kernel has
/// left to find there: a state outside `[2^16, 2^17)` (spec 6.4) must get the CPU
/// decoder's error, at precision 12 (freq 4096, which the GPU's decode table cannot
/// hold) and at a lower one; a state inside it is a lane's payload, decoded as the CPU
/// decodes it.
#[test]
fn gpu_decode_reports_the_cpu_error_in_one_symbol_records() {
    let Some(gpu) = gpu_or_skip("gpu_decode_reports_the_cpu_error_in_one_symbol_records") else { return };
    let one = one_symbol_cache();
    for precision in [12, 5] {
        let container = encode_cache_with(&one, 16, &options(RawPolicy::Never, precision)).unwrap();
        let info = container_info(&container).unwrap();
        let record = inspect_record(info.record(&container, 0)).unwrap();
        assert_eq!(record.model.len(), 1, "precision {precision}: one symbol");
        let [_, centers, model, ..] = record.section_bytes;
        let directory = info.offsets[0] + 48 + centers + model;
        let states = directory + 32;
        for (what, at, value) in [
            ("state p0 lane 0 = 2^17", states, 1 << 17),
            ("state p4 lane 17 = 2^31", states + 4 * (4 * 32 + 17), 1 << 31),
            ("state p7 lane 31 = 2^32 - 1", states + 4 * 255, u32::MAX),
        ] {
            let mut bad = container.clone();
            bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
            let what = format!("precision {precision}, {what}");
            assert!(decode_cache(&bad).is_err(), "{what}: the CPU rejects it");
            assert!(check_same_outcome(&gpu, &what, &bad), "{what}: found by the kernel");
        }
        let mut other = container.clone();
        other[states + 4 * 33..states + 4 * 34].copy_from_slice(&0x0001_5a81u32.to_le_bytes());
        assert!(decode_cache(&other).unwrap() != one, "another payload, other values");
        check_same_outcome(&gpu, &format!("precision {precision}, p1 lane 1's payload"), &other);
    }
}

/// Random corruption of small containers (1-3 bytes, anywhere in the records or in the
/// word streams and states, where most of it reaches the kernel): the GPU path either
/// accepts and returns the CPU decoder's cache, or returns the CPU decoder's exact error.
#[test]
fn gpu_decode_agrees_with_cpu_on_random_corruption() {
    let Some(gpu) = gpu_or_skip("gpu_decode_agrees_with_cpu_on_random_corruption") else { return };
    let mut rng = Rng(2026);
    let mut kernel_found = 0;
    let mut trials = 0;
    for (cache, block_tokens) in [(kv_like(2, 2, 64, 48, 31), 16), (kv_like(1, 3, 32, 37, 8), 7)] {
        let container = encode_cache(&cache, block_tokens).unwrap();
        let info = container_info(&container).unwrap();
        let records = info.offsets[0]..container.len();
        for _ in 0..400 {
            let mut bad = container.clone();
            for _ in 0..1 + rng.next() % 3 {
                let at = records.start + (rng.next() as usize) % records.len();
                bad[at] ^= 1 + (rng.next() % 255) as u8;
            }
            trials += 1;
            kernel_found += check_same_outcome(&gpu, &format!("random corruption {trials}"), &bad) as usize;
        }
    }
    assert!(kernel_found >= 50, "only {kernel_found} of {trials} corruptions reached the kernel");
}

#[test]
fn gpu_decode_writes_to_an_unaligned_output() {
    let Some(gpu) = gpu_or_skip("gpu_decode_writes_to_an_unaligned_output") else { return };
    // A regular layout (the fixtures' shape at B = 16) decoded one value past an aligned
    // address: no tile may take a 16-byte store, so every value goes by the general path.
    let cache = kv_like(2, 3, 64, 40, 29);
    let container = encode_cache(&cache, 16).unwrap();
    let on_device = gpu.upload(&container).unwrap();
    let index = DeviceIndex::new(&gpu, &container).unwrap();
    let values = index.values();
    let mut out = gpu.zeros::<u16>(values + 1).unwrap();
    let mut checks = DecodeChecks::new(&gpu, 0).unwrap();
    decode_device(&gpu, &on_device.as_view(), &index, &mut out.slice_mut(1..), &mut checks).unwrap();
    assert_eq!(checks.status(&gpu).unwrap(), 0, "status");
    let got = gpu.download(&out, values + 1).unwrap();
    assert_eq!(got[0], 0, "the value before the output is untouched");
    assert!(got[1..] == cache.concat_words()[..], "unaligned output differs from the cache");
}

/// Whole caches through [`exans::ExansCodec`]: every encoder x decoder x backend pair.
#[test]
fn whole_caches_round_trip_on_every_path() {
    let gpu = gpu_or_skip("whole_caches_round_trip_on_every_path");
    for checksum in [false, true] {
        for (name, cache) in fixtures() {
            let codec = exans::ExansCodec { checksum, ..Default::default() };
            kvcodec_testkit::round_trip(
                &codec,
                gpu.as_ref(),
                &format!("{name}, checksum {checksum}"),
                &cache,
            );
        }
        let codec = exans::ExansCodec { block_tokens: 7, checksum };
        kvcodec_testkit::round_trip(&codec, gpu.as_ref(), "one raw block", &one_raw_block_cache());
        kvcodec_testkit::round_trip(&codec, gpu.as_ref(), "L=H=D=T=1", &kv_like(1, 1, 1, 1, 3));
        kvcodec_testkit::round_trip(&codec, gpu.as_ref(), "H D = 15", &kv_like(2, 3, 5, 30, 4));
        // Runs of 64 x 3 x 64 = 12,288 values: three spans of the checksum pass per run.
        let (name, cache) = fixtures().remove(0);
        let codec = exans::ExansCodec { block_tokens: 64, checksum };
        kvcodec_testkit::round_trip(&codec, gpu.as_ref(), &format!("{name}, B = 64"), &cache);
    }
}

/// Older and mixed containers on the GPU: a version 3 container (every lane starting at
/// exactly 2^16, the whole sign+mantissa section) as `EncodeOptions::version` writes it,
/// the same as version 2 (its records carry no checksum), and a version 4 one whose
/// records carry checksums but for one, decode as on the CPU; a damaged record of the
/// mixed one gives the CPU's error through `decode_to_cache` too.
#[test]
fn gpu_decodes_versions_3_and_2_and_mixed_containers() {
    let Some(gpu) = gpu_or_skip("gpu_decodes_versions_3_and_2_and_mixed_containers") else { return };
    let cache = kv_like(2, 2, 64, 40, 3);
    let v3 = EncodeOptions { version: Some(exans::format::VERSION_3), ..Default::default() };
    let mut old = exans::encode_cache_with(&cache, 16, &v3).unwrap();
    let info = container_info(&old).unwrap();
    assert!(info.offsets[..info.blocks()].iter().all(|&at| old[at + 4] == 3), "version 3 records");
    assert!(decode_to_cache(&gpu, &old).unwrap() == cache, "the GPU reads version 3");
    // Version 3 with checksums, and both versions where partitions are not whole tiles
    // (the kernel's general path: partial tiles, tiles across groups).
    let v3_checked = EncodeOptions { checksum: true, ..v3 };
    assert!(
        decode_to_cache(&gpu, &exans::encode_cache_with(&cache, 16, &v3_checked).unwrap()).unwrap() == cache
    );
    for (l, h, d, t) in [(1, 3, 5, 19), (3, 2, 7, 7), (2, 1, 33, 24)] {
        let odd = kv_like(l, h, d, t, 5 + d as u32);
        for version in [None, Some(exans::format::VERSION_3)] {
            for checksum in [false, true] {
                let options =
                    EncodeOptions { raw: RawPolicy::Never, checksum, version, ..Default::default() };
                let container = exans::encode_cache_with(&odd, 8, &options).unwrap();
                let what = format!("L={l} H={h} D={d} T={t} {version:?} checksum {checksum}");
                assert!(decode_to_cache(&gpu, &container).unwrap() == odd, "{what}");
            }
        }
    }
    old[4] = 2; // the container's version
    for &at in &info.offsets[..info.blocks()] {
        old[at + 4] = 2; // each record's
    }
    assert!(decode_cache(&old).unwrap() == cache, "the CPU reads version 2");
    assert!(decode_to_cache(&gpu, &old).unwrap() == cache, "the GPU reads version 2");
    let options = EncodeOptions { checksum: true, ..Default::default() };
    let mut mixed = exans::encode_cache_with(&cache, 16, &options).unwrap();
    let info = container_info(&mixed).unwrap();
    let first = info.offsets[0];
    mixed[first + 6] &= !2; // record 0 without its checksum
    mixed[first + 44..first + 48].fill(0);
    assert!(decode_to_cache(&gpu, &mixed).unwrap() == cache, "mixed records");
    let last = info.offsets[info.blocks()] - 20;
    mixed[last] ^= 0x01; // the last record's sign+mantissa
    assert!(check_same_outcome(&gpu, "mixed, last record damaged", &mixed), "found after the decode");
    assert!(decode_cache(&mixed).is_err());
}

/// A wrong shape and a damaged record: the GPU path reports the CPU decoder's error
/// (the shape, checked first by both). With checksums, a flipped sign+mantissa bit or
/// center of a later record: the CPU's `ChecksumMismatch` of that block.
#[test]
fn whole_cache_rejections_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("whole_cache_rejections_match_the_cpu") else { return };
    let cache = kv_like(2, 2, 64, 40, 3);
    let codec = exans::ExansCodec::default();
    let mut bytes = bf16_field::CacheCodec::encode(&codec, &cache).unwrap();
    let info = container_info(&bytes).unwrap();
    bytes[info.offsets[0] + 16] ^= 0x01; // record 0's value count
    let other = bf16_field::KvShape::new(2, 2, 64, 41).unwrap();
    kvcodec_testkit::assert_gpu_rejects_like_cpu(&codec, &gpu, &bytes, other, "shape and record 0");
    kvcodec_testkit::assert_gpu_rejects_like_cpu(&codec, &gpu, &bytes, cache.shape(), "record 0");
    let checked = exans::ExansCodec { checksum: true, ..codec };
    let good = bf16_field::CacheCodec::encode(&checked, &cache).unwrap();
    let info = container_info(&good).unwrap();
    for (what, at) in [("sign+mantissa", info.offsets[2] - 40), ("center", info.offsets[1] + 48 + 1)] {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        let cpu = bf16_field::CacheCodec::decode(&checked, &bad, cache.shape()).unwrap_err();
        assert!(
            matches!(&cpu, exans::Error::InBlock { source, .. } if matches!(**source, exans::Error::ChecksumMismatch { .. })),
            "{what}: {cpu}"
        );
        kvcodec_testkit::assert_gpu_rejects_like_cpu(&checked, &gpu, &bad, cache.shape(), what);
    }
}
