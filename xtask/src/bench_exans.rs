//! ExANS rows of `cargo xtask bench`: the cache in physical KV blocks of 16 tokens, one
//! self-contained record per block in a container; the ratio counts the whole container
//! (index, headers, centers, models, rANS states, padding). The GPU row times the GPU
//! encoder and decoder; its container must equal the CPU encoder's byte for byte.
//!
//! The host-to-device rows time what a serving engine does when it brings an offloaded
//! cache back: the container in page-locked host memory decoded into device memory by
//! `exans::gpu::HostDecoder` (transfer and decode overlapped), at three chunk sizes and
//! through the pageable staging path, next to plain page-locked copies of the
//! uncompressed cache (what moving it without compression costs) and of the container
//! (the bound of a decoder that hides all its work behind the transfer), all in the
//! same run, median of `--runs` after `--warmup`, between CUDA events on the main
//! stream, each decode finished (status read) before the next starts.

use anyhow::ensure;
use bf16_field::gpu::GpuContext;
use bf16_field::gpu::timing::{CopyRoofline, Timing};
use bf16_field::{KvCache, KvShape};
use cudarc::driver::{CudaEvent, CudaSlice, sys};
use exans::gpu::{DeviceIndex, GpuError, HostContainer, HostDecodeOptions, HostDecoder, decode_device};
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

/// The device-resident row (with its copy roofline) and the host-to-device rows.
pub(crate) fn bench_gpu(
    input: &str,
    cache: &KvCache,
    gpu: &GpuContext,
    copy: &CopyRoofline,
    args: &BenchArgs,
) -> anyhow::Result<Vec<Row>> {
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
    let input = format!("{input} x{copies}");
    let m = Measured {
        input: input.clone(),
        values: n,
        encoded_bytes: len,
        encode_secs: enc.median_ms * 1e-3,
        decode_secs: dec.median_ms * 1e-3,
    };
    let mut rows = vec![Row::new(Codec::Exans, "cuda", m, args).gpu(copy)];
    drop(containers);
    rows.extend(bench_host_to_device(&input, &words, &cpu_container, &index, &mut out, gpu, args)?);
    Ok(rows)
}

/// Chunk sizes of the page-locked host decode rows: the default and a factor of four
/// either side, to show where the pipeline's per-chunk cost and its fill and tail cross.
const HOST_CHUNKS: [usize; 3] = [2 << 20, exans::gpu::host::DEFAULT_CHUNK_BYTES, 32 << 20];

/// The host-to-device rows (module docs): `words` is the uncompressed cache,
/// `container` its ExANS container, `out` a device buffer of `words.len()` words.
fn bench_host_to_device(
    input: &str,
    words: &[u16],
    container: &[u8],
    index: &DeviceIndex,
    out: &mut CudaSlice<u16>,
    gpu: &GpuContext,
    args: &BenchArgs,
) -> anyhow::Result<Vec<Row>> {
    let stream = gpu.stream();
    let n = words.len();
    let measured = |encoded_bytes: usize, t: &Timing| Measured {
        input: input.into(),
        values: n,
        encoded_bytes,
        encode_secs: f64::NAN,
        decode_secs: t.median_ms * 1e-3,
    };
    let pinned_words = gpu.pinned_copy(words)?;
    let pinned_container = gpu.pinned_copy(container)?;
    let (pinned_words, pinned_container) = (pinned_words.as_slice()?, pinned_container.as_slice()?);

    let raw = gpu.time_runs(args.warmup, args.runs, |_| Ok(stream.memcpy_htod(pinned_words, out)?))?;
    ensure!(stream.clone_dtoh(&*out)? == words, "{input}: host-to-device copy differs");
    let raw_bw = raw.gb_per_s(2 * n);
    let mut d_container: CudaSlice<u8> = stream.alloc_zeros(container.len())?;
    let packed = gpu
        .time_runs(args.warmup, args.runs, |_| Ok(stream.memcpy_htod(pinned_container, &mut d_container)?))?;
    let packed_bw = packed.gb_per_s(container.len());
    drop(d_container);
    let mut rows = vec![
        Row::host_to_device("h2d-raw", measured(2 * n, &raw), raw_bw, args),
        Row::host_to_device("h2d-exans", measured(container.len(), &packed), packed_bw, args),
    ];

    let mut decode_rows = |name: String, options: HostDecodeOptions, staged: bool| -> anyhow::Result<()> {
        let mut decoder = HostDecoder::new(gpu, options)?;
        stream.memset_zeros(out)?;
        let t = time_host_decodes(gpu, args, |end| {
            let source = if staged {
                HostContainer::Staged(container)
            } else {
                HostContainer::Pinned(pinned_container)
            };
            let pending = decoder.decode(gpu, source, index, &mut out.as_view_mut())?;
            end.record(stream)?;
            pending.finish()
        })?;
        ensure!(stream.clone_dtoh(&*out)? == words, "{input}: {name} round trip differs");
        rows.push(Row::host_to_device(&name, measured(container.len(), &t), packed_bw, args));
        Ok(())
    };
    for chunk_bytes in HOST_CHUNKS {
        let options = HostDecodeOptions { chunk_bytes, ..HostDecodeOptions::default() };
        decode_rows(format!("exans-h2d-{}M", chunk_bytes >> 20), options, false)?;
    }
    decode_rows("exans-h2d-staged".into(), HostDecodeOptions::default(), true)?;
    Ok(rows)
}

/// Times `decode` (which issues one host decode, records `end` on the main stream, then
/// finishes it) from a `start` event recorded on the main stream just before it:
/// `args.warmup` untimed runs, then the median of `args.runs`. The decoder joins its
/// streams into the main stream, so `end` follows every copy and kernel.
///
/// Unlike [`GpuContext::time_runs`], no hold kernel precedes `start`: a host decode is
/// driven by the host chunk by chunk (and the staged path copies on the host), so the
/// host's part is what these rows measure, and a hold would hide its first chunks. Over
/// a 1.085 GB transfer (about 13 ms) a launch latency is below 0.1%.
fn time_host_decodes(
    gpu: &GpuContext,
    args: &BenchArgs,
    mut decode: impl FnMut(&CudaEvent) -> Result<(), GpuError>,
) -> anyhow::Result<Timing> {
    // Timing events need CU_EVENT_DEFAULT (cudarc's default flags disable timing).
    let start = gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut times = Vec::with_capacity(args.runs);
    for i in 0..args.warmup + args.runs {
        start.record(gpu.stream())?;
        decode(&end)?;
        if i >= args.warmup {
            times.push(f64::from(start.elapsed_ms(&end)?));
        }
    }
    Ok(Timing::from_runs(times))
}
