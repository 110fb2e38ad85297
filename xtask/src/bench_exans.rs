//! ExANS rows of `cargo xtask bench`: the cache in physical KV blocks of 16 tokens, one
//! self-contained record per block in a container; the ratio counts the whole container
//! (index, headers, centers, models, rANS states, padding). The GPU row times the GPU
//! encoder and decoder; its container must equal the CPU encoder's byte for byte.

use anyhow::ensure;
use bf16_field::gpu::GpuContext;
use bf16_field::{KvCache, KvShape};
use cudarc::driver::CudaSlice;
use exans::gpu::{DeviceIndex, decode_device};
use exans::gpu_encode::{EncodeWorkspace, encode_device, max_container_len};

use crate::bench::{BenchArgs, Codec, Measured, Row, median_secs};

/// Tokens per physical KV block (the ExANS seed's unit, vLLM's default page size).
const BLOCK_TOKENS: usize = 16;

pub(crate) fn bench_cpu(input: &str, cache: &KvCache, args: &BenchArgs) -> anyhow::Result<Row> {
    let mut container = Vec::new();
    let enc = median_secs(args.warmup, args.runs, || {
        container = exans::encode_cache(cache, BLOCK_TOKENS).expect("a valid cache encodes");
    });
    let mut decoded = None;
    let dec = median_secs(args.warmup, args.runs, || {
        decoded = Some(exans::decode_cache(&container).expect("own container decodes"));
    });
    ensure!(decoded.as_ref() == Some(cache), "{input}: exans CPU round trip differs");
    let n = cache.shape().total_values();
    let m = Measured {
        input: input.into(),
        values: n,
        encoded_bytes: container.len(),
        encode_secs: enc,
        decode_secs: dec,
    };
    Ok(Row::new(Codec::Exans, "cpu", m, args))
}

/// The cache repeated along the token axis until it holds at least `min_bytes` bytes.
fn tiled_cache(cache: &KvCache, min_bytes: usize) -> anyhow::Result<(KvCache, usize)> {
    let s = cache.shape();
    let copies = (min_bytes / 2).div_ceil(s.total_values()).max(1);
    let shape = KvShape::new(s.layers, s.kv_heads, s.head_dim, s.tokens * copies)?;
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (_, kind, t) in cache.tensors() {
        let long = t.repeat(copies);
        if kind == bf16_field::KvKind::K { keys.push(long) } else { values.push(long) }
    }
    Ok((KvCache::new(shape, keys, values)?, copies))
}

pub(crate) fn bench_gpu(
    input: &str,
    cache: &KvCache,
    gpu: &GpuContext,
    args: &BenchArgs,
) -> anyhow::Result<Row> {
    let (big, copies) = tiled_cache(cache, args.gpu_bytes)?;
    let shape = big.shape();
    let n = shape.total_values();
    let words = big.concat_words();
    let cpu_container = exans::encode_cache(&big, BLOCK_TOKENS)?;
    let stream = gpu.stream();
    // Two copies of every input, alternated, so L2 does not serve them.
    let raw: Vec<CudaSlice<u16>> = (0..2).map(|_| stream.clone_htod(&words)).collect::<Result<_, _>>()?;
    let mut encoded: CudaSlice<u8> = stream.alloc_zeros(max_container_len(shape, BLOCK_TOKENS)?)?;
    let mut ws = EncodeWorkspace::new(gpu, shape, BLOCK_TOKENS)?;
    let gpu_err = |e: exans::gpu::GpuError| bf16_field::Error::GpuUnavailable(e.to_string());
    let enc = gpu.time_runs(args.warmup, args.runs, |i| {
        encode_device(gpu, &raw[i % 2].as_view(), shape, BLOCK_TOKENS, &mut encoded.as_view_mut(), &mut ws)
            .map_err(gpu_err)
    })?;
    let len = ws.encoded_len(gpu)?;
    ensure!(
        stream.clone_dtoh(&encoded.slice(..len))? == cpu_container,
        "{input}: exans GPU container differs from the CPU's"
    );
    let index = DeviceIndex::new(gpu, &cpu_container)?;
    let containers: Vec<CudaSlice<u8>> =
        (0..2).map(|_| stream.clone_htod(&cpu_container)).collect::<Result<_, _>>()?;
    let mut out: CudaSlice<u16> = stream.alloc_zeros(n)?;
    let mut status: CudaSlice<u32> = stream.alloc_zeros(1)?;
    let dec = gpu.time_runs(args.warmup, args.runs, |i| {
        decode_device(gpu, &containers[i % 2].as_view(), &index, &mut out.as_view_mut(), &mut status)
            .map_err(gpu_err)
    })?;
    ensure!(stream.clone_dtoh(&status)?[0] == 0, "{input}: exans GPU decoder flagged its own container");
    ensure!(stream.clone_dtoh(&out)? == words, "{input}: exans GPU round trip differs");
    let m = Measured {
        input: format!("{input} x{copies}"),
        values: n,
        encoded_bytes: len,
        encode_secs: enc.median_ms * 1e-3,
        decode_secs: dec.median_ms * 1e-3,
    };
    Ok(Row::new(Codec::Exans, "cuda", m, args))
}
