//! The GPU encoder and decoder against the CPU reference, both ways, on the fixtures and
//! edge shapes (raw groups, raw blocks, every compiled head_dim, tails, no full block,
//! the smallest and largest slots, with and without the checksum); one hand-built hostile
//! container per check of spec §7 gets the CPU's exact error through the GPU status;
//! sealing gives the CPU encoder's slots and replays in a CUDA graph, and so does a
//! decoder decoding again and again; self-calibration on
//! the device gives the CPU's bases and bytes. Skips without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

mod common;

use std::cell::RefCell;

use bf16_field::{CacheCodec, KvCache, KvKind, KvShape, WordOrder};
use cudarc::driver::CudaSlice;
use gaac::format::BlockShape;
use gaac::gpu::{CacheDecoder, CacheEncoder, GpuError, SealShape, Sealer, seal_blocks_device};
use gaac::{Bases, EncodeOptions, Error, GaacCodec, cache_info, encode_words};
use kvcodec_gpu::{GpuCacheCodec, GpuContext};
use kvcodec_testkit::{
    assert_cache_encoding_replays, assert_gpu_rejects_like_cpu, fill_device, gpu_or_skip, kv_like,
    replay_in_graph, round_trip,
};

/// What graph-replay tests fill outputs with before each replay.
const REPLAY_FILL: u8 = 0x5a;

/// KV-like data with a few huge and tiny values (raw and 4-bit groups, and with a tight
/// slot raw blocks).
fn with_outliers(layers: usize, heads: usize, dim: usize, tokens: usize, seed: u32) -> KvCache {
    let cache = kv_like(layers, heads, dim, tokens, seed);
    let mut words = cache.words_in(WordOrder::LayerMajor);
    for (i, w) in words.iter_mut().enumerate() {
        if i % 211 == 7 {
            *w = 0x7000 | (*w & 0x807f);
        } else if i % 4099 == 5 {
            *w = 0;
        }
    }
    KvCache::from_words(cache.shape(), WordOrder::LayerMajor, words).unwrap()
}

/// The codec values a cache is checked with: bases calibrated on it (default slot, with
/// and without the checksum) and the smallest and largest slots.
fn codecs(cache: &KvCache) -> Vec<GaacCodec> {
    let bases = Bases::calibrate(cache);
    let block = BlockShape::new(cache.shape().head_dim).unwrap();
    let codec = |slot_capacity: Option<usize>, checksum, version| GaacCodec {
        bases: Some(bases.clone()),
        slot_capacity,
        checksum,
        version,
    };
    vec![
        codec(None, false, None),
        codec(None, true, Some(1)),
        codec(None, true, Some(2)),
        codec(Some(block.planes_len()), false, Some(2)),
        codec(Some(block.max_coded_len() / 16 * 16), true, Some(2)),
    ]
}

#[test]
fn gpu_caches_are_byte_identical_to_cpu_both_ways() {
    let Some(gpu) = gpu_or_skip("gpu_caches_are_byte_identical_to_cpu_both_ways") else { return };
    let fixtures = kvcodec_testkit::fixtures();
    // The fixtures with bases from the other fixture (the bench's protocol).
    for (i, (name, cache)) in fixtures.iter().enumerate() {
        let bases = Bases::calibrate(&fixtures[1 - i].1);
        for checksum in [false, true] {
            let codec =
                GaacCodec { bases: Some(bases.clone()), slot_capacity: None, checksum, version: None };
            round_trip(&codec, Some(&gpu), name, cache);
        }
    }
    let mut cases: Vec<(String, KvCache)> =
        vec![("example (T = 19, a raw block)".into(), common::example_cache())];
    for (l, h, d, t) in
        [(2, 2, 128, 40), (1, 1, 256, 48), (1, 3, 64, 7), (3, 1, 64, 33), (2, 8, 128, 64), (1, 2, 64, 16)]
    {
        cases.push((format!("L{l} H{h} D{d} T{t}"), with_outliers(l, h, d, t, (l * h + d + t) as u32)));
    }
    for (name, cache) in &cases {
        for codec in codecs(cache) {
            round_trip(&codec, Some(&gpu), name, cache);
        }
    }
}

/// A cache whose every column's exponents are `pattern(token, column)` (sign and
/// mantissa varied), for the calibration's edge cases.
fn with_exponents(
    layers: usize,
    heads: usize,
    dim: usize,
    tokens: usize,
    pattern: fn(usize, usize) -> u8,
) -> KvCache {
    let shape = KvShape::new(layers, heads, dim, tokens).unwrap();
    let row = heads * dim;
    let words = (0..shape.total_values())
        .map(|i| {
            let (token, column) = ((i / row) % tokens, (i / (row * tokens)) * row + i % row);
            let e = u16::from(pattern(token, column));
            ((i as u16 & 1) << 15) | (e << 7) | ((i as u16 * 37) & 0x7f)
        })
        .collect();
    KvCache::from_words(shape, WordOrder::LayerMajor, words).unwrap()
}

/// The GPU encoder's container of `cache` with `options` (calibrated on the device when
/// they hold no bases).
fn gpu_encode_with(gpu: &GpuContext, cache: &KvCache, options: &EncodeOptions) -> Result<Vec<u8>, GpuError> {
    let shape = cache.shape();
    let words = gpu.upload(&cache.words_in(WordOrder::LayerMajor)).unwrap();
    let mut encoder = CacheEncoder::new(gpu, shape, options)?;
    encoder.encode(gpu, &words.slice(..shape.total_values()))?;
    encoder.to_vec(gpu)
}

#[test]
fn gpu_self_calibrated_containers_are_byte_identical_to_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_self_calibrated_containers_are_byte_identical_to_cpu") else { return };
    // The codec's default (the first 128 tokens), both ways, on the fixtures and KV-like
    // data with outliers.
    let mut caches = kvcodec_testkit::fixtures();
    caches.push(("L2 H2 D64 T150".into(), with_outliers(2, 2, 64, 150, 3)));
    for (name, cache) in &caches {
        // Version 2's checksum sums the bases the device calibrated (after the overflow
        // kernel copied them): both versions.
        for (checksum, version) in [(false, None), (true, Some(1)), (true, Some(2))] {
            let codec = GaacCodec { checksum, version, ..Default::default() };
            let bytes = round_trip(&codec, Some(&gpu), name, cache);
            let info = cache_info(&bytes).unwrap();
            assert_eq!(info.header.calibration_tokens, Some(cache.shape().tokens.min(128)), "{name}");
        }
    }
    // Edge data: every exponent equal, two windows tied (the smallest base wins),
    // exponents 0 and 255 (bases 0 and 248, the limits), one token against many.
    let edges = [
        ("all equal", with_exponents(1, 2, 64, 40, |_, _| 127)),
        ("ties", with_exponents(2, 1, 128, 33, |t, c| if (t + c) % 2 == 0 { 100 } else { 110 })),
        ("extremes", with_exponents(1, 1, 64, 20, |t, c| [0, 255, 3, 250][(t + c / 8) % 4])),
        ("spread", with_exponents(1, 3, 64, 17, |t, c| (t * 37 + c * 11) as u8)),
        ("outliers D256", with_outliers(1, 1, 256, 48, 9)),
    ]
    .map(|(name, cache)| (name.to_string(), cache));
    // Every case with n = 1, 2, all but one, all, more than all (clamped to T, as on the
    // CPU), and far more.
    for (name, cache) in edges.iter().chain(&caches) {
        let tokens = cache.shape().tokens;
        for n in [None, Some(1), Some(2), Some(tokens - 1), Some(tokens), Some(tokens + 5), Some(1 << 40)] {
            for (checksum, version) in [(false, None), (true, Some(1)), (true, Some(2))] {
                let options =
                    EncodeOptions { calibration_tokens: n, checksum, version, ..Default::default() };
                let cpu =
                    encode_words(&cache.words_in(WordOrder::LayerMajor), cache.shape(), &options).unwrap();
                let on_gpu = gpu_encode_with(&gpu, cache, &options).unwrap();
                assert!(
                    on_gpu == cpu,
                    "{name}, n {n:?}, checksum {checksum}, version {version:?}: GPU bytes differ from the CPU's"
                );
                let back = GaacCodec::default().gpu_decode_cache(&gpu, &on_gpu, cache.shape()).unwrap();
                assert!(back == *cache, "{name}, n {n:?}");
            }
        }
    }
    // No tokens to calibrate on: the CPU's error, before anything runs.
    let cache = &edges[0].1;
    let zero = EncodeOptions { calibration_tokens: Some(0), ..Default::default() };
    assert_eq!(
        encode_words(&cache.words_in(WordOrder::LayerMajor), cache.shape(), &zero),
        Err(Error::ZeroCalibrationTokens)
    );
    match gpu_encode_with(&gpu, cache, &zero) {
        Err(GpuError::Codec(e)) => assert_eq!(e, Error::ZeroCalibrationTokens),
        other => panic!("zero calibration tokens: {:?}", other.map(|b| b.len())),
    }
}

/// Offsets in the example container (spec §8), as `errors.rs` names them.
const K_SLOT: usize = 208;
const V_SLOT: usize = K_SLOT + 1488;

#[test]
fn hostile_containers_get_the_cpu_error_through_the_gpu_status() {
    let codec = GaacCodec::default();
    let shape = common::example_cache().shape();
    let good = common::example_container();
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        b
    };
    let in_block =
        |kind, source| Error::InBlock { layer: 0, kind, head: 0, block: 0, source: Box::new(source) };
    // (what, container, the CPU's error): one hand-built input per check the GPU path
    // makes (the header's on the host, the rest in the kernels).
    let cases = [
        ("truncated header", good[..10].to_vec(), Error::Truncated { needed: 64, got: 10 }),
        ("bad magic", with(&|b| b[0] = b'X'), Error::BadMagic { found: *b"XVGA" }),
        ("body truncated", good[..good.len() - 1].to_vec(), Error::Truncated { needed: 6000, got: 5999 }),
        ("trailing bytes", with(&|b| b.extend([0, 0])), Error::TrailingBytes { extra: 2 }),
        (
            "base out of range",
            with(&|b| b[64 + 70] = 249),
            Error::BaseOutOfRange { layer: 0, kind: KvKind::V, head: 0, channel: 6, base: 249 },
        ),
        ("unknown block status", with(&|b| b[193] = 2), Error::UnknownBlockStatus { block: 1, byte: 2 }),
        (
            "raw count mismatch",
            with(&|b| b[193] = 0),
            Error::RawCountMismatch { stored: 1, counted: 0, blocks: 2 },
        ),
        ("status padding", with(&|b| b[200] = 1), Error::PaddingNotZero { offset: 200, value: 1 }),
        (
            "unknown tag",
            with(&|b| b[K_SLOT] = 0x03),
            in_block(KvKind::K, Error::UnknownTag { group: 0, head_dim: 64 }),
        ),
        (
            "block exceeds slot",
            with(&|b| b[K_SLOT + 3..K_SLOT + 32].fill(0xaa)),
            in_block(KvKind::K, Error::BlockExceedsSlot { len: 2026, capacity: 1488 }),
        ),
        (
            "slot padding",
            with(&|b| b[K_SLOT + 1446] = 9),
            in_block(KvKind::K, Error::SlotPaddingNotZero { offset: 1446, value: 9 }),
        ),
        (
            "raw block's slot",
            with(&|b| b[V_SLOT + 5] = 1),
            in_block(KvKind::V, Error::SlotPaddingNotZero { offset: 5, value: 1 }),
        ),
    ];
    // The CPU's verdicts, checked without a GPU too.
    for (what, bad, expected) in &cases {
        assert_eq!(codec.decode(bad, shape).map(|_| ()).as_ref(), Err(expected), "{what}");
    }
    let Some(gpu) = gpu_or_skip("hostile_containers_get_the_cpu_error_through_the_gpu_status") else {
        return;
    };
    for (what, bad, expected) in &cases {
        assert_eq!(&assert_gpu_rejects_like_cpu(&codec, &gpu, bad, shape, what), expected, "{what}");
    }
    // A mantissa bit of the K block, a byte of the raw V block, a tail byte: only the
    // checksum (format version 2: of the bytes after the header) sees them.
    for at in [K_SLOT + 32 + 384, V_SLOT + 1488 + 7, good.len() - 1] {
        let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &with(&|b| b[at] ^= 1), shape, "checksum");
        assert!(matches!(e, Error::ChecksumMismatch { .. }), "byte {at}: {e:?}");
    }
    let other = KvShape::new(1, 1, 64, 18).unwrap();
    match codec.gpu_decode_cache(&gpu, &good, other) {
        Err(GpuError::Codec(e)) => {
            assert_eq!(e, Error::CacheShapeMismatch { expected: [1, 1, 64, 18], found: [1, 1, 64, 19] })
        }
        other => panic!("shape mismatch: {:?}", other.map(|_| ())),
    }
}

/// A sealing step's inputs and the CPU's answer: the tails of `2 L` tensors (`[16, H, D]`
/// each, `stride` words apart), their bases, and per block the CPU's slot bytes, status
/// and raw words (from a container of exactly 16 tokens).
struct SealCase {
    shape: SealShape,
    tail: Vec<u16>,
    bases: Vec<u8>,
    slots: Vec<u8>,
    statuses: Vec<u8>,
    raw: Vec<u8>,
}

fn seal_case(layers: usize, heads: usize, dim: usize, slot_capacity: usize, seed: u32) -> SealCase {
    let cache = with_outliers(layers, heads, dim, 16, seed);
    let kv = cache.shape();
    let words = cache.words_in(WordOrder::LayerMajor);
    let bases = Bases::calibrate(&cache);
    let options = EncodeOptions {
        bases: Some(bases.clone()),
        slot_capacity: Some(slot_capacity),
        ..Default::default()
    };
    let bytes = encode_words(&words, kv, &options).unwrap();
    let info = cache_info(&bytes).unwrap();
    let s = info.sections;
    let blocks = info.blocks.len();
    let block = BlockShape::new(dim).unwrap();
    // A stride with room between the tensors, as a pool's tail buffer may have.
    let stride = 16 * heads * dim + 64;
    let mut tail = vec![0xffffu16; (2 * layers - 1) * stride + 16 * heads * dim];
    for (t, tensor) in words.chunks_exact(kv.values_per_tensor()).enumerate() {
        tail[t * stride..t * stride + tensor.len()].copy_from_slice(tensor);
    }
    let mut raw = vec![0u8; blocks * block.raw_len()];
    for (i, b) in info.blocks.iter().enumerate() {
        if b.is_none() {
            let (tensor, head) = (i / heads, i % heads);
            for token in 0..16 {
                let at = tensor * kv.values_per_tensor() + token * heads * dim + head * dim;
                for (c, w) in words[at..at + dim].iter().enumerate() {
                    let o = i * block.raw_len() + 2 * (token * dim + c);
                    raw[o..o + 2].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
    }
    SealCase {
        shape: SealShape {
            tensors: 2 * layers,
            kv_heads: heads,
            head_dim: dim,
            tensor_stride: stride,
            slot_capacity,
        },
        tail,
        bases: bases.as_bytes().to_vec(),
        slots: bytes[s.slots..s.overflow].to_vec(),
        statuses: bytes[s.statuses..s.statuses + blocks].to_vec(),
        raw,
    }
}

/// Device buffers of one sealing step.
struct SealBuffers {
    tail: CudaSlice<u16>,
    bases: CudaSlice<u8>,
    slots: CudaSlice<u8>,
    statuses: CudaSlice<u8>,
    raw: CudaSlice<u8>,
}

impl SealBuffers {
    fn new(gpu: &GpuContext, case: &SealCase) -> SealBuffers {
        SealBuffers {
            tail: gpu.upload(&case.tail).unwrap(),
            bases: gpu.upload(&case.bases).unwrap(),
            slots: gpu.upload(&vec![0x5au8; case.slots.len()]).unwrap(),
            statuses: gpu.upload(&vec![0x5au8; case.statuses.len()]).unwrap(),
            raw: gpu.zeros(case.raw.len()).unwrap(),
        }
    }

    fn seal(&mut self, gpu: &GpuContext, sealer: &Sealer) {
        seal_blocks_device(
            gpu,
            sealer,
            &self.tail.as_view(),
            &self.bases.as_view(),
            &mut self.slots.as_view_mut(),
            &mut self.statuses.as_view_mut(),
            &mut self.raw.as_view_mut(),
        )
        .unwrap();
    }

    fn check(&self, gpu: &GpuContext, case: &SealCase, what: &str) {
        assert!(
            gpu.download(&self.statuses, case.statuses.len()).unwrap() == case.statuses,
            "{what}: statuses"
        );
        assert!(gpu.download(&self.slots, case.slots.len()).unwrap() == case.slots, "{what}: slots");
        let raw = gpu.download(&self.raw, case.raw.len()).unwrap();
        for (i, &status) in case.statuses.iter().enumerate() {
            if status == 1 {
                let n = case.raw.len() / case.statuses.len();
                assert!(raw[i * n..(i + 1) * n] == case.raw[i * n..(i + 1) * n], "{what}: raw block {i}");
            }
        }
    }
}

#[test]
fn sealing_gives_the_cpu_slots_and_replays_in_a_cuda_graph() {
    // (L, H, D, slot): a tight slot makes some blocks raw.
    let cases = [(2, 2, 64, 1488), (3, 1, 64, 1440), (2, 4, 128, 2976), (1, 2, 256, 5760 + 16 * 4)];
    let Some(gpu) = gpu_or_skip("sealing_gives_the_cpu_slots_and_replays_in_a_cuda_graph") else { return };
    for (l, h, d, slot) in cases {
        let case = seal_case(l, h, d, slot, (l + h + d) as u32);
        let what = format!("L{l} H{h} D{d} slot {slot}");
        let sealer = Sealer::new(&gpu, case.shape).unwrap();
        let buffers = RefCell::new(SealBuffers::new(&gpu, &case));
        buffers.borrow_mut().seal(&gpu, &sealer);
        buffers.borrow().check(&gpu, &case, &what);
        replay_in_graph(
            &gpu,
            2,
            || {
                let mut b = buffers.borrow_mut();
                fill_device(&gpu, &mut b.slots, REPLAY_FILL);
                fill_device(&gpu, &mut b.statuses, REPLAY_FILL);
                fill_device(&gpu, &mut b.raw, REPLAY_FILL);
            },
            || buffers.borrow_mut().seal(&gpu, &sealer),
            |replay| buffers.borrow().check(&gpu, &case, &format!("{what} replay {replay}")),
        );
    }
}

#[test]
fn cache_encoding_replays_in_a_cuda_graph() {
    let Some(gpu) = gpu_or_skip("cache_encoding_replays_in_a_cuda_graph") else { return };
    let caches = [with_outliers(2, 2, 64, 37, 11), with_outliers(2, 2, 64, 37, 12)];
    // Self-calibration too: the bases are computed on the device inside the graph.
    for codec in codecs(&caches[0]).into_iter().chain([GaacCodec::default()]) {
        assert_cache_encoding_replays(&gpu, &codec, &caches);
    }
}

#[test]
fn cache_decoding_replays_in_a_cuda_graph() {
    let Some(gpu) = gpu_or_skip("cache_decoding_replays_in_a_cuda_graph") else { return };
    // One decoder decodes again and again (its work counter and raw-block count are reset
    // on the stream, inside the graph): the warm-up call, then each replay, into an output
    // filled before each replay, so a replay that wrote nothing or skipped a chunk fails.
    let cache = with_outliers(2, 2, 64, 37, 13);
    for codec in codecs(&cache) {
        let bytes = codec.encode(&cache).unwrap();
        let expected = cache.words_in(codec.word_order());
        let n = expected.len();
        let fill = vec![u16::from_le_bytes([REPLAY_FILL; 2]); n];
        let decoder = RefCell::new(CacheDecoder::new(&gpu, &bytes, Some(cache.shape())).unwrap());
        let out = RefCell::new(gpu.zeros::<u16>(n).unwrap());
        replay_in_graph(
            &gpu,
            3,
            || gpu.stream().memcpy_htod(&fill, &mut *out.borrow_mut()).unwrap(),
            || decoder.borrow_mut().decode(&gpu, &mut out.borrow_mut().slice_mut(..)).unwrap(),
            |replay| {
                decoder.borrow().finish(&gpu).unwrap();
                let words = gpu.download(&out.borrow(), n).unwrap();
                assert!(words == expected, "{} replay {replay}", codec.name());
            },
        );
    }
}

/// A measurement, not a check of speed: sealing one block of every (layer, kind, head)
/// of a Llama-3-8B-shaped cache (32 layers, 8 KV heads, head_dim 128), median of 200
/// runs, printed; the bytes are checked against the CPU's first. Run with `--ignored
/// --nocapture`.
#[test]
#[ignore = "a measurement: run with --ignored --nocapture on a GPU"]
fn seal_llama3_8b_shape_timing() {
    let Some(gpu) = gpu_or_skip("seal_llama3_8b_shape_timing") else { return };
    let case = seal_case(32, 8, 128, BlockShape::new(128).unwrap().default_capacity(), 8);
    let sealer = Sealer::new(&gpu, case.shape).unwrap();
    let mut buffers = SealBuffers::new(&gpu, &case);
    buffers.seal(&gpu, &sealer);
    buffers.check(&gpu, &case, "llama shape");
    let timing = gpu
        .time_runs::<GpuError>(20, 200, |_| {
            buffers.seal(&gpu, &sealer);
            Ok(())
        })
        .unwrap();
    println!(
        "seal: {} blocks (32 layers x K,V x 8 heads, D = 128) on {}: median {:.2} us, min {:.2} us (200 runs, event-timed)",
        case.shape.blocks(),
        gpu.info(),
        timing.median_ms * 1e3,
        timing.min_ms * 1e3
    );
}

/// Format version 2 on the GPU: 3-bit plane edits that version 1's checksum of the values
/// misses (spec §7.3) get `ChecksumMismatch` through the GPU status. The same container
/// as version 1 wrote it decodes on the GPU to the CPU's values, those edits included
/// (version 1's blind spot, kept so that no valid container is lost), and its checksum
/// still catches a mantissa bit there.
#[test]
fn version_2_checksum_on_the_gpu_and_version_1_containers() {
    let cache = kv_like(1, 1, 64, 16, 7);
    let codec = GaacCodec { checksum: true, version: Some(2), ..Default::default() };
    let shape = cache.shape();
    let v2 = codec.encode(&cache).unwrap();
    let v1 = common::as_version_1(&v2, &cache);
    let codec_v1 = GaacCodec { version: Some(1), ..codec.clone() };
    assert_eq!(codec_v1.encode(&cache).unwrap(), v1);
    let info = cache_info(&v2).unwrap();
    let block = info.header.block_shape();
    let plane = info.sections.slots + block.plane3_at();
    // The first edits version 1's checksum misses (the CPU decides).
    let mut missed = Vec::new();
    'search: for at in plane..plane + block.plane3_len() {
        for value in 0..=255u8 {
            let mut bad = v1.clone();
            bad[at] = value;
            if codec.decode(&bad, shape).is_ok_and(|decoded| decoded != cache) {
                missed.push((at, value));
                if missed.len() == 3 {
                    break 'search;
                }
            }
        }
    }
    assert_eq!(missed.len(), 3, "spec §7.3: version 1 misses some plane edits");
    let Some(gpu) = gpu_or_skip("version_2_checksum_on_the_gpu_and_version_1_containers") else {
        return;
    };
    assert_eq!(codec.gpu_encode_cache(&gpu, &cache).unwrap(), v2, "the GPU encoder writes version 2");
    assert_eq!(codec_v1.gpu_encode_cache(&gpu, &cache).unwrap(), v1, "and version 1");
    assert_eq!(codec.gpu_decode_cache(&gpu, &v1, shape).unwrap(), cache, "a version 1 container");
    for &(at, value) in &missed {
        let with = |bytes: &[u8]| {
            let mut bad = bytes.to_vec();
            bad[at] = value;
            bad
        };
        let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &with(&v2), shape, "version 2 plane edit");
        assert!(matches!(e, Error::ChecksumMismatch { .. }), "byte {at} = {value}: {e:?}");
        let bad = with(&v1);
        assert_eq!(
            codec.gpu_decode_cache(&gpu, &bad, shape).unwrap(),
            codec.decode(&bad, shape).unwrap(),
            "version 1, byte {at} = {value}: the GPU decodes as the CPU"
        );
    }
    let mut bad = v1.clone();
    bad[plane + block.plane3_len()] ^= 1; // a mantissa bit
    let e = assert_gpu_rejects_like_cpu(&codec, &gpu, &bad, shape, "version 1 mantissa");
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e:?}");
}
