//! SplitZip rows of `cargo xtask bench`: one codebook for K and one for V, each
//! calibrated on another corpus (the seed's protocol), so every cache is two payloads;
//! the ratio counts both whole payloads (headers, codebooks, offsets, escapes).

use anyhow::ensure;
use bf16_field::gpu::GpuContext;
use bf16_field::{KvCache, KvKind};
use cudarc::driver::CudaSlice;
use splitzip::gpu::{EncodeWorkspace, decode_device, encode_device};
use splitzip::{Codebook, DEFAULT_CHUNK_SIZE, PayloadHeader};

use crate::bench::{BenchArgs, Codec, Measured, Row, median_secs, tiled};

/// The words of one cache split by kind (all layers' K, then all layers' V) with the
/// codebook of each kind.
pub(crate) struct SplitzipInput {
    parts: [(Vec<u16>, Codebook); 2],
}

fn words_of_kind(cache: &KvCache, kind: KvKind) -> Vec<u16> {
    cache.tensors().filter(|(_, k, _)| *k == kind).flat_map(|(_, _, t)| t.iter().copied()).collect()
}

impl SplitzipInput {
    pub(crate) fn new(cache: &KvCache, calibration: &KvCache) -> anyhow::Result<Self> {
        let part = |kind| -> anyhow::Result<(Vec<u16>, Codebook)> {
            Ok((words_of_kind(cache, kind), Codebook::calibrate(&[&words_of_kind(calibration, kind)])?))
        };
        Ok(SplitzipInput { parts: [part(KvKind::K)?, part(KvKind::V)?] })
    }

    pub(crate) fn bench_cpu(&self, input: &str, args: &BenchArgs) -> anyhow::Result<Row> {
        let mut payloads = Vec::new();
        let enc = median_secs(args.warmup, args.runs, || {
            payloads = self
                .parts
                .iter()
                .map(|(w, cb)| splitzip::encode(w, cb, DEFAULT_CHUNK_SIZE).expect("valid chunk size"))
                .collect();
        });
        let mut outs: Vec<Vec<u16>> = self.parts.iter().map(|(w, _)| vec![0; w.len()]).collect();
        let dec = median_secs(args.warmup, args.runs, || {
            for (p, o) in payloads.iter().zip(&mut outs) {
                splitzip::decode_into(p, o).expect("own payload decodes");
            }
        });
        for ((w, _), o) in self.parts.iter().zip(&outs) {
            ensure!(w == o, "{input}: splitzip CPU round trip differs");
        }
        let n: usize = self.parts.iter().map(|(w, _)| w.len()).sum();
        let encoded: usize = payloads.iter().map(Vec::len).sum();
        let m = Measured {
            input: input.into(),
            values: n,
            encoded_bytes: encoded,
            encode_secs: enc,
            decode_secs: dec,
        };
        Ok(Row::new(Codec::Splitzip, "cpu", m, args))
    }

    pub(crate) fn bench_gpu(&self, input: &str, gpu: &GpuContext, args: &BenchArgs) -> anyhow::Result<Row> {
        let stream = gpu.stream();
        struct Part {
            words: Vec<u16>,
            copies: Vec<CudaSlice<u16>>,
            codebook: Codebook,
            out: CudaSlice<u8>,
            ws: EncodeWorkspace,
            cpu_payload: Vec<u8>,
            decoded: CudaSlice<u16>,
        }
        let mut parts = self
            .parts
            .iter()
            .map(|(w, cb)| -> anyhow::Result<Part> {
                let words = tiled(w, args.gpu_bytes / 2);
                let n = words.len();
                Ok(Part {
                    copies: (0..2).map(|_| stream.clone_htod(&words)).collect::<Result<_, _>>()?,
                    codebook: *cb,
                    out: stream.alloc_zeros(splitzip::max_encoded_len(n, DEFAULT_CHUNK_SIZE))?,
                    ws: EncodeWorkspace::new(gpu, n)?,
                    cpu_payload: splitzip::encode(&words, cb, DEFAULT_CHUNK_SIZE)?,
                    decoded: stream.alloc_zeros(n)?,
                    words,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let enc = gpu.time_runs(args.warmup, args.runs, |i| {
            for p in parts.iter_mut() {
                let src = p.copies[i % 2].as_view();
                encode_device(
                    gpu,
                    &src,
                    &p.codebook,
                    DEFAULT_CHUNK_SIZE,
                    &mut p.out.as_view_mut(),
                    &mut p.ws,
                )
                .map_err(|e| bf16_field::Error::GpuUnavailable(e.to_string()))?;
            }
            Ok(())
        })?;
        let mut encoded = 0;
        let mut headers = Vec::new();
        for p in &parts {
            let len = p.ws.encoded_len(gpu)?;
            let bytes = stream.clone_dtoh(&p.out.slice(..len))?;
            ensure!(bytes == p.cpu_payload, "{input}: splitzip GPU payload differs from the CPU's");
            headers.push(PayloadHeader::parse(&bytes)?);
            encoded += len;
        }
        // One status word per payload: decode_device zeroes its word first, so a shared
        // one would lose the K payload's flag when the V payload is decoded.
        let mut statuses: Vec<CudaSlice<u32>> =
            parts.iter().map(|_| stream.alloc_zeros(1)).collect::<Result<_, _>>()?;
        let dec = gpu.time_runs(args.warmup, args.runs, |_| {
            for ((p, h), status) in parts.iter_mut().zip(&headers).zip(&mut statuses) {
                let payload = p.out.slice(..h.encoded_len() as usize);
                decode_device(gpu, &payload, h, &mut p.decoded.as_view_mut(), status)
                    .map_err(|e| bf16_field::Error::GpuUnavailable(e.to_string()))?;
            }
            Ok(())
        })?;
        for status in &statuses {
            ensure!(stream.clone_dtoh(status)?[0] == 0, "{input}: GPU decoder flagged its own payload");
        }
        for p in &parts {
            ensure!(stream.clone_dtoh(&p.decoded)? == p.words, "{input}: splitzip GPU round trip differs");
        }
        let n: usize = parts.iter().map(|p| p.words.len()).sum();
        let tiles = n / self.parts.iter().map(|(w, _)| w.len()).sum::<usize>();
        let m = Measured {
            input: format!("{input} x{tiles}"),
            values: n,
            encoded_bytes: encoded,
            encode_secs: enc.median_ms * 1e-3,
            decode_secs: dec.median_ms * 1e-3,
        };
        Ok(Row::new(Codec::Splitzip, "cuda", m, args))
    }
}
