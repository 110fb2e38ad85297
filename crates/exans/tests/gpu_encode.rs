//! The GPU encoder against the CPU reference: GPU encode must give exactly the bytes of
//! `exans::encode_cache` on the real fixtures and on edge cases, and must decode back to
//! the original on the CPU. Skips without a GPU unless `KVCODEC_REQUIRE_GPU=1`.

mod common;

use bf16_field::{KvCache, KvShape};
use common::{one_raw_block_cache, raw_flags};
use cudarc::driver::CudaSlice;
use exans::gpu::{EncodeWorkspace, GpuError, encode_device, encode_to_vec, max_container_len};
use exans::{Error, decode_cache, encode_cache};
use kvcodec_gpu::GpuContext;
use kvcodec_testkit::gpu_or_skip;
use kvcodec_testkit::{Rng, cache_from, fixtures, kv_like};

/// GPU encode == CPU encode, byte for byte, and the GPU container decodes back on the
/// CPU. Returns the container.
fn check(gpu: &GpuContext, name: &str, cache: &KvCache, block_tokens: usize) -> Vec<u8> {
    check_with(gpu, name, cache, block_tokens, false)
}

/// [`check`] with or without the records' checksums.
fn check_with(gpu: &GpuContext, name: &str, cache: &KvCache, block_tokens: usize, checksum: bool) -> Vec<u8> {
    let options = exans::EncodeOptions { checksum, ..Default::default() };
    let want = exans::encode_cache_with(cache, block_tokens, &options).unwrap();
    let got = encode_to_vec(gpu, cache, block_tokens, checksum)
        .unwrap_or_else(|e| panic!("{name} (B = {block_tokens}): GPU encode: {e}"));
    if got != want {
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        panic!(
            "{name} (B = {block_tokens}): GPU container differs: {} vs {} bytes, first difference at {first:?}",
            got.len(),
            want.len()
        );
    }
    assert!(&decode_cache(&got).unwrap() == cache, "{name} (B = {block_tokens}): round trip");
    got
}

#[test]
fn gpu_encode_matches_cpu_on_the_fixtures() {
    let Some(gpu) = gpu_or_skip("gpu_encode_matches_cpu_on_the_fixtures") else { return };
    for (name, cache) in fixtures() {
        // B = 16: 32 full blocks; B = 13: 39 full blocks and a trailing block of 5 tokens.
        for block_tokens in [16, 13] {
            let container = check(&gpu, &name, &cache, block_tokens);
            assert!(raw_flags(&container).iter().all(|raw| !raw), "{name}: fixture blocks are coded");
        }
    }
}

/// With the checksum option: the same bytes as the CPU encoder's, on the fixtures (B = 16
/// and a partial last block), on raw blocks and on shapes whose H D is not a multiple
/// of 8 (the sums' scalar path).
#[test]
fn gpu_encode_with_checksums_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_encode_with_checksums_matches_cpu") else { return };
    for (name, cache) in fixtures() {
        for block_tokens in [16, 13] {
            let container = check_with(&gpu, &name, &cache, block_tokens, true);
            let info = exans::container_info(&container).unwrap();
            let record = exans::inspect_record(info.record(&container, 0)).unwrap();
            assert!(record.checksum.is_some(), "{name}: the records carry checksums");
        }
    }
    for (l, h, d, t, b) in [(1, 1, 1, 1, 16), (2, 1, 3, 5, 2), (3, 2, 64, 17, 16), (1, 3, 5, 40, 16)] {
        check_with(&gpu, &format!("kv_like L={l} H={h} D={d} T={t}"), &kv_like(l, h, d, t, 9), b, true);
    }
    let mut rng = Rng(3);
    let random = cache_from(2, 2, 16, 40, |_, _, _| rng.words(1)[0]);
    check_with(&gpu, "random (raw records)", &random, 16, true);
}

#[test]
fn gpu_encode_matches_cpu_on_edge_cases() {
    let Some(gpu) = gpu_or_skip("gpu_encode_matches_cpu_on_edge_cases") else { return };
    // L = H = D = B = 1: every record raw (N = 2).
    for tokens in [1, 2, 5] {
        let tiny = kv_like(1, 1, 1, tokens, 3);
        let c = check(&gpu, "L=H=D=B=1", &tiny, 1);
        assert!(raw_flags(&c).iter().all(|&raw| raw));
        check(&gpu, "L=H=D=1, B=2", &tiny, 2);
    }
    // Partition lengths around the lane count, and partial trailing blocks.
    for (l, h, d, t, b) in [
        (1, 1, 2, 2, 2),
        (1, 1, 33, 8, 8),
        (2, 1, 16, 3, 3),
        (1, 3, 5, 19, 19),
        (3, 2, 7, 7, 7),
        (2, 2, 64, 37, 16),
        (1, 8, 128, 40, 16),
        (5, 1, 64, 100, 7),
        (9, 1, 32, 33, 16),
    ] {
        let cache = kv_like(l, h, d, t, 11 + d as u32);
        check(&gpu, &format!("L={l} H={h} D={d} T={t} B={b}"), &cache, b);
    }
    // One symbol per block: the model is a single entry of 4096, no words at all.
    let one = cache_from(2, 2, 64, 48, |_, _, _| 0x3f80);
    let c = check(&gpu, "one symbol", &one, 16);
    assert!(raw_flags(&c).iter().all(|raw| !raw));
    // All 256 exponents, uniformly (raw) and skewed (coded, K = 256).
    let uniform =
        cache_from(2, 2, 64, 64, |l, k, i| (((i * 7 + l * 3 + k) % 256) << 7) as u16 | (i % 128) as u16);
    let c = check(&gpu, "all exponents, uniform", &uniform, 16);
    assert!(raw_flags(&c).iter().all(|&raw| raw));
    let mut rng = Rng(5);
    let skewed = cache_from(2, 2, 64, 64, |_, _, i| {
        let r = rng.next();
        let e = if r.is_multiple_of(8) { (i % 256) as u32 } else { 120 + r % 4 };
        ((e << 7) | (r >> 24) & 0x807f) as u16
    });
    let c = check(&gpu, "all exponents, skewed", &skewed, 16);
    assert!(raw_flags(&c).iter().all(|raw| !raw));
    // One incompressible (random) block between coded ones falls back to raw.
    let mixed = one_raw_block_cache();
    let c = check(&gpu, "raw-fallback block", &mixed, 16);
    assert_eq!(raw_flags(&c), vec![false, true, false]);
    // More than 256 blocks: the index scan runs over several chunks.
    check(&gpu, "350 raw blocks", &kv_like(1, 1, 8, 700, 21), 2);
    check(&gpu, "300 coded blocks", &kv_like(1, 2, 64, 600, 23), 2);
    // Random shapes.
    let mut rng = Rng(1234);
    for case in 0..40 {
        let l = 1 + rng.next() as usize % 4;
        let h = 1 + rng.next() as usize % 4;
        let d = 1 + rng.next() as usize % 70;
        let t = 1 + rng.next() as usize % 50;
        let b = 1 + rng.next() as usize % 20;
        check(&gpu, &format!("random L={l} H={h} D={d} T={t} B={b}"), &kv_like(l, h, d, t, case + 100), b);
    }
}

#[test]
fn gpu_encode_device_reuses_its_workspace_and_ignores_stale_output() {
    let Some(gpu) = gpu_or_skip("gpu_encode_device_reuses_its_workspace_and_ignores_stale_output") else {
        return;
    };
    let big = kv_like(3, 2, 64, 70, 41);
    let shape = big.shape();
    let len = max_container_len(shape, 16).unwrap();
    let mut ws = EncodeWorkspace::new(&gpu, shape, 16).unwrap();
    // 5 and 3 blocks in chunks of 2: the second call's chunks reuse the first's slots.
    ws.set_chunk_blocks(2);
    // Garbage in the output buffer: every padding byte must still come out zero.
    let mut out: CudaSlice<u8> = gpu.upload(&vec![0xa5u8; len]).unwrap();
    for cache in [big.clone(), kv_like(3, 2, 64, 33, 42), big] {
        let s = cache.shape();
        let words = gpu.upload(&cache.concat_words()).unwrap();
        encode_device(&gpu, &words.as_view(), s, 16, false, &mut out.as_view_mut(), &mut ws).unwrap();
        let n = ws.encoded_len(&gpu).unwrap();
        let bytes = gpu.download(&out, len).unwrap();
        assert_eq!(&bytes[..n], &encode_cache(&cache, 16).unwrap()[..], "T = {}", s.tokens);
    }
}

/// A cache on the device with its output buffer and workspace, for `encode_device`.
struct OnDevice {
    words: CudaSlice<u16>,
    out: CudaSlice<u8>,
    ws: EncodeWorkspace,
    shape: KvShape,
    block_tokens: usize,
    checksum: bool,
}

impl OnDevice {
    fn new(gpu: &GpuContext, cache: &KvCache, block_tokens: usize) -> Self {
        let shape = cache.shape();
        OnDevice {
            words: gpu.upload(&cache.concat_words()).unwrap(),
            out: gpu.zeros(max_container_len(shape, block_tokens).unwrap()).unwrap(),
            ws: EncodeWorkspace::new(gpu, shape, block_tokens).unwrap(),
            shape,
            block_tokens,
            checksum: false,
        }
    }

    /// Queues the encode on the context's stream.
    fn encode(&mut self, gpu: &GpuContext) {
        let (shape, b, checksum) = (self.shape, self.block_tokens, self.checksum);
        encode_device(
            gpu,
            &self.words.as_view(),
            shape,
            b,
            checksum,
            &mut self.out.as_view_mut(),
            &mut self.ws,
        )
        .unwrap();
    }

    /// The container the last encode wrote.
    fn container(&self, gpu: &GpuContext) -> Vec<u8> {
        let n = self.ws.encoded_len(gpu).unwrap();
        gpu.download(&self.out, n).unwrap()
    }
}

/// `encode_device` on the fixture (B = 13: 40 blocks, the last one partial) into a
/// workspace pipelined in chunks of `chunk_blocks`, read back.
fn encode_in_chunks(gpu: &GpuContext, cache: &KvCache, chunk_blocks: usize) -> Vec<u8> {
    let mut d = OnDevice::new(gpu, cache, 13);
    d.ws.set_chunk_blocks(chunk_blocks);
    d.encode(gpu);
    d.container(gpu)
}

#[test]
fn gpu_encode_gives_the_same_container_for_every_pipeline_chunk_size() {
    let Some(gpu) = gpu_or_skip("gpu_encode_gives_the_same_container_for_every_pipeline_chunk_size") else {
        return;
    };
    let (name, cache) = fixtures().swap_remove(0);
    let want = encode_cache(&cache, 13).unwrap();
    // One block per chunk, chunks that do not divide the 40 blocks, one chunk, more.
    for chunk_blocks in [1, 2, 3, 7, 39, 40, 1000] {
        let got = encode_in_chunks(&gpu, &cache, chunk_blocks);
        assert!(got == want, "{name}: chunks of {chunk_blocks} blocks: GPU container differs from the CPU's");
    }
}

#[test]
fn gpu_encode_continues_the_offsets_across_chunks_of_more_than_256_blocks() {
    let Some(gpu) = gpu_or_skip("gpu_encode_continues_the_offsets_across_chunks_of_more_than_256_blocks")
    else {
        return;
    };
    // 2401 tokens in blocks of 4: 601 blocks of 2048 values (the last of 512, raw: its
    // coded record would not be smaller), coded records of varying lengths and a raw
    // one. Chunks of 257: the index launches of chunks 1 and 2 start past block 0, with
    // segments of 2 blocks per thread (257 > 256 threads), and chunk 2 is partial.
    let cache = kv_like(1, 4, 64, 2401, 77);
    let want = encode_cache(&cache, 4).unwrap();
    let raw = raw_flags(&want);
    assert!(raw.contains(&true) && raw.contains(&false), "the cache mixes coded and raw records");
    let mut d = OnDevice::new(&gpu, &cache, 4);
    for chunk_blocks in [257, 300, 600] {
        d.ws.set_chunk_blocks(chunk_blocks);
        d.encode(&gpu);
        let got = d.container(&gpu);
        assert!(got == want, "chunks of {chunk_blocks} blocks: GPU container differs from the CPU's");
    }
}

#[test]
fn gpu_encode_replays_from_a_cuda_graph() {
    let Some(gpu) = gpu_or_skip("gpu_encode_replays_from_a_cuda_graph") else { return };
    let (name, cache) = fixtures().swap_remove(1);
    // With the checksum the sums kernel is captured too.
    for checksum in [false, true] {
        let options = exans::EncodeOptions { checksum, ..Default::default() };
        let want = exans::encode_cache_with(&cache, 13, &options).unwrap();
        let d = std::cell::RefCell::new(OnDevice { checksum, ..OnDevice::new(&gpu, &cache, 13) });
        // 6 chunks: both encoder streams and the writer stream are forked into the capture.
        d.borrow_mut().ws.set_chunk_blocks(7);
        kvcodec_testkit::replay_in_graph(
            &gpu,
            3,
            || gpu.stream().memset_zeros(&mut d.borrow_mut().out).unwrap(),
            || d.borrow_mut().encode(&gpu),
            |replay| {
                let bytes = d.borrow().container(&gpu);
                assert!(
                    bytes == want,
                    "{name}, {checksum}: replay {replay}: graph-encoded container differs"
                );
            },
        );
    }
}

/// The encoder forks from and joins into a caller's stream: the input is written on that
/// stream behind a 20 ms hold, so an encoder that did not wait for the caller's stream
/// would read the stale zeros; a raw CUstream handle (as PyTorch gives) works the same.
#[test]
fn gpu_encode_is_ordered_on_a_callers_stream() {
    let Some(gpu) = gpu_or_skip("gpu_encode_is_ordered_on_a_callers_stream") else { return };
    let (name, cache) = fixtures().swap_remove(0);
    let want = encode_cache(&cache, 16).unwrap();
    let theirs = gpu.context().new_stream().unwrap();
    // SAFETY: `theirs` is a live stream of this device's context and outlives `raw`.
    let raw = unsafe { gpu.with_raw_stream(theirs.cu_stream()) }.unwrap();
    for ctx in [gpu.with_stream(theirs.clone()).unwrap(), raw] {
        let mut d = OnDevice::new(&ctx, &cache, 16);
        let stale = ctx.zeros::<u16>(cache.shape().total_values()).unwrap();
        let fresh = ctx.upload(&cache.concat_words()).unwrap();
        ctx.stream().memcpy_dtod(&stale, &mut d.words).unwrap();
        ctx.synchronize().unwrap();
        ctx.hold(20_000_000).unwrap();
        ctx.stream().memcpy_dtod(&fresh, &mut d.words).unwrap();
        d.encode(&ctx);
        assert!(d.container(&ctx) == want, "{name}: container on the caller's stream differs");
    }
}

#[test]
fn gpu_encode_rejects_what_the_cpu_rejects() {
    let Some(gpu) = gpu_or_skip("gpu_encode_rejects_what_the_cpu_rejects") else { return };
    let cache = kv_like(1, 1, 4, 4, 1);
    kvcodec_testkit::assert_rejects!(
        encode_to_vec(&gpu, &cache, 0, false),
        GpuError::Codec(Error::ZeroBlockTokens)
    );
    let shape = KvShape::new(1, 1, 4, 4).unwrap();
    assert!(matches!(
        max_container_len(shape, 70_000),
        Err(Error::DimensionTooLarge { what: "block_tokens", .. })
    ));
    // A workspace sized for a smaller cache is refused, not overrun.
    let mut ws = EncodeWorkspace::new(&gpu, KvShape::new(1, 1, 4, 2).unwrap(), 2).unwrap();
    let words = gpu.upload(&cache.concat_words()).unwrap();
    let mut out = gpu.zeros::<u8>(max_container_len(shape, 2).unwrap()).unwrap();
    let err = encode_device(&gpu, &words.as_view(), shape, 2, false, &mut out.as_view_mut(), &mut ws);
    kvcodec_testkit::assert_rejects!(
        err,
        GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "workspace", .. })
    );
}

#[test]
fn gpu_encode_stages_partial_chunks_and_unaligned_words() {
    let Some(gpu) = gpu_or_skip("gpu_encode_stages_partial_chunks_and_unaligned_words") else { return };
    // 33-symbol partitions in 132-value groups: partition 0 takes the chunked staging path
    // (8-byte loads of 4 words) and ends inside its last chunk.
    check(&gpu, "partition ends inside a chunk", &kv_like(1, 1, 132, 3, 51), 1);
    // The cache's words one element past an aligned address: no 8- or 16-byte load is
    // aligned, so the histograms, every staging round and the checksum's sums go word
    // by word.
    let cache = kv_like(3, 2, 64, 70, 53);
    let want =
        exans::encode_cache_with(&cache, 16, &exans::EncodeOptions { checksum: true, ..Default::default() })
            .unwrap();
    let mut host = vec![0u16];
    host.extend(cache.concat_words());
    let words = gpu.upload(&host).unwrap();
    let shape = cache.shape();
    let mut out = gpu.zeros::<u8>(max_container_len(shape, 16).unwrap()).unwrap();
    let mut ws = EncodeWorkspace::new(&gpu, shape, 16).unwrap();
    encode_device(&gpu, &words.slice(1..), shape, 16, true, &mut out.as_view_mut(), &mut ws).unwrap();
    let n = ws.encoded_len(&gpu).unwrap();
    assert!(gpu.download(&out, n).unwrap() == want, "words at an odd address: GPU container differs");
}
