//! ExANS's host-to-device rows: what a serving engine does when it brings an offloaded
//! cache back. The container in page-locked host memory is decoded into device memory
//! by `exans::gpu::HostDecoder` (transfer and decode overlapped), at three chunk sizes
//! and through the pageable staging path (its default 32 MiB chunks and 8 MiB), next to
//! plain page-locked copies of the uncompressed cache (what moving it without
//! compression costs) and of the container (the bound of a decoder that hides all its
//! work behind the transfer), and a plain copy of the container from pageable memory
//! (the staged decode's peer), all in the same run, median of `--runs` after
//! `--warmup`, between CUDA events on the context's stream, each decode finished
//! (status read) before the next starts.

use anyhow::ensure;
use cudarc::driver::{CudaEvent, sys};
use exans::gpu::{DeviceIndex, HostContainer, HostDecodeOptions, HostDecoder};
use kvcodec_gpu::GpuContext;
use kvcodec_gpu::timing::Timing;

use super::report::{Measured, Row};
use super::{Ctx, Method, tiled_cache};

/// Chunk sizes of the page-locked host decode rows: the default and a factor of four
/// either side, to show where the pipeline's per-chunk cost and its fill and tail cross.
const HOST_CHUNKS: [usize; 3] = [2 << 20, exans::gpu::host::DEFAULT_CHUNK_BYTES, 32 << 20];

/// The host-to-device rows of the context's input, tiled as the GPU rows are; none
/// without a GPU.
pub(super) fn rows(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let Some((gpu, _)) = ctx.gpu else { return Ok(Vec::new()) };
    let m = &ctx.method;
    let (big, copies) = tiled_cache(ctx.cache, m.gpu_bytes, m.tile)?;
    let words = big.concat_words();
    let container = exans::encode_cache(&big, exans::format::DEFAULT_BLOCK_TOKENS)?;
    let input = format!("{} x{copies}", ctx.name);
    let n = words.len();
    let stream = gpu.stream();
    let index = DeviceIndex::new(gpu, &container)?;
    let mut out = gpu.zeros::<u16>(n)?;
    let measured = |codec: &str, encoded_bytes: usize, t: &Timing| Measured {
        input: input.clone(),
        codec: codec.into(),
        values: n,
        encoded_bytes,
        encode_secs: None,
        decode_secs: t.median_ms * 1e-3,
        runs: m.runs,
    };
    let pinned_words = gpu.pinned_copy(&words)?;
    let pinned_container = gpu.pinned_copy(&container)?;
    let (pinned_words, pinned_container) = (pinned_words.as_slice()?, pinned_container.as_slice()?);

    let raw = gpu.time_runs(m.warmup, m.runs, |_| -> anyhow::Result<()> {
        Ok(stream.memcpy_htod(pinned_words, &mut out)?)
    })?;
    ensure!(gpu.download(&out, n)? == words, "{input}: host-to-device copy differs");
    let raw_bw = raw.gb_per_s(2 * n);
    let mut d_container = gpu.zeros::<u8>(container.len())?;
    let packed = gpu.time_runs(m.warmup, m.runs, |_| -> anyhow::Result<()> {
        Ok(stream.memcpy_htod(pinned_container, &mut d_container)?)
    })?;
    let packed_bw = packed.gb_per_s(container.len());
    // The staged decode's peer: the driver's own staging of the same pageable bytes,
    // timed as the host decodes are (no hold: the host copies).
    let pageable = time_host_runs(gpu, m, |end| {
        stream.memcpy_htod(&container[..], &mut d_container)?;
        end.record(stream)?;
        Ok(stream.synchronize()?)
    })?;
    ensure!(gpu.download(&d_container, container.len())? == container, "{input}: pageable copy differs");
    drop(d_container);
    let mut rows = vec![
        Row::host_to_device(measured("h2d-raw", 2 * n, &raw), raw_bw),
        Row::host_to_device(measured("h2d-exans", container.len(), &packed), packed_bw),
        Row::host_to_device(measured("h2d-exans-pageable", container.len(), &pageable), packed_bw),
    ];

    let mut decode_rows = |name: String, options: HostDecodeOptions, staged: bool| -> anyhow::Result<()> {
        let mut decoder = HostDecoder::new(gpu, options)?;
        stream.memset_zeros(&mut out)?;
        let t = time_host_runs(gpu, m, |end| {
            let source = if staged {
                HostContainer::Staged(&container)
            } else {
                HostContainer::Pinned(pinned_container)
            };
            let pending = decoder.decode(gpu, source, &index, &mut out.slice_mut(..n))?;
            end.record(stream)?;
            Ok(pending.finish()?)
        })?;
        ensure!(gpu.download(&out, n)? == words, "{input}: {name} round trip differs");
        rows.push(Row::host_to_device(measured(&name, container.len(), &t), packed_bw));
        Ok(())
    };
    for chunk_bytes in HOST_CHUNKS {
        let options = HostDecodeOptions { chunk_bytes, ..HostDecodeOptions::default() };
        decode_rows(format!("exans-h2d-{}M", chunk_bytes >> 20), options, false)?;
    }
    decode_rows("exans-h2d-staged".into(), HostDecodeOptions::default(), true)?;
    // The page-locked default's chunks, staged: what the host copy's per-chunk cost is.
    let staged_8m = HostDecodeOptions {
        staging_chunk_bytes: exans::gpu::host::DEFAULT_CHUNK_BYTES,
        ..HostDecodeOptions::default()
    };
    decode_rows("exans-h2d-staged-8M".into(), staged_8m, true)?;
    Ok(rows)
}

/// Times `run` (which issues one host decode or copy, records `end` on the context's
/// stream, then waits for it) from a `start` event recorded on that stream just before
/// it: `warmup` untimed runs, then the median of `runs`. The decoder joins its streams
/// into the context's stream, so `end` follows every copy and kernel.
///
/// Unlike [`GpuContext::time_runs`], no hold kernel precedes `start`: a host decode is
/// driven by the host chunk by chunk (and the staged path and a pageable copy copy on
/// the host), so the host's part is what these rows measure, and a hold would hide its
/// first chunks.
fn time_host_runs(
    gpu: &GpuContext,
    m: &Method,
    mut run: impl FnMut(&CudaEvent) -> anyhow::Result<()>,
) -> anyhow::Result<Timing> {
    // Timing events need CU_EVENT_DEFAULT (cudarc's default flags disable timing).
    let start = gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut times = Vec::with_capacity(m.runs);
    for i in 0..m.warmup + m.runs {
        start.record(gpu.stream())?;
        run(&end)?;
        if i >= m.warmup {
            times.push(f64::from(start.elapsed_ms(&end)?));
        }
    }
    Ok(Timing::from_runs(times))
}
