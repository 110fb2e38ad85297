//! [`SplitzipCodec`]: SplitZip over a whole KV cache, the [`CacheCodec`] and
//! [`GpuCacheCodec`] implementations over this crate's payload API.

use bf16_field::{CacheCodec, KvCache, KvKind, KvShape, WordOrder};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use kvcodec_gpu::{GpuCacheCodec, GpuContext, device_address};

use crate::gpu::{DECODE_STATUS, DecodeChecks, EncodeWorkspace, GpuError, decode_device, encode_device};
use crate::{Codebook, CodebookError, DecodeError, EncodeError, Error, PayloadHeader, max_encoded_len};

/// SplitZip over a whole cache: two payloads back to back (spec §9), the first of every
/// layer's K in layer order with the K codebook, the second of every layer's V with the
/// V codebook (K and V exponents differ, so each kind has its own top 16).
///
/// Calibrate on a separate cache of the same model, as the SplitZip paper's protocol
/// does ([`SplitzipCodec::calibrate`]); a codebook from another model escapes more
/// values and costs ratio and decode speed, never correctness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitzipCodec {
    /// The codebook of the K payload.
    pub k_codebook: Codebook,
    /// The codebook of the V payload.
    pub v_codebook: Codebook,
    /// Values per chunk (spec §3), [`crate::DEFAULT_CHUNK_SIZE`] by default.
    pub chunk_size: u32,
    /// Store each payload's Adler-32 (spec §2, flag bit 1), which every decoder then
    /// verifies; off by default (and when absent from the JSON form).
    #[serde(default)]
    pub checksum: bool,
}

impl SplitzipCodec {
    /// The top-16 codebooks of `calibration`'s K and V, at the default chunk size.
    ///
    /// # Errors
    /// [`CodebookError::EmptyCalibration`] never for a valid cache (it holds values).
    pub fn calibrate(calibration: &KvCache) -> Result<Self, CodebookError> {
        let kind = |kind: KvKind| -> Vec<&[u16]> { calibration.tensors_of(kind).collect() };
        Ok(SplitzipCodec {
            k_codebook: Codebook::calibrate(&kind(KvKind::K))?,
            v_codebook: Codebook::calibrate(&kind(KvKind::V))?,
            chunk_size: crate::DEFAULT_CHUNK_SIZE,
            checksum: false,
        })
    }

    fn codebooks(&self) -> [Codebook; 2] {
        [self.k_codebook, self.v_codebook]
    }

    fn encode_options(&self) -> crate::EncodeOptions {
        crate::EncodeOptions { chunk_size: self.chunk_size, checksum: self.checksum }
    }

    /// The codec as JSON: `{"k_codebook": {"exponents": [...]}, "v_codebook": ...,
    /// "chunk_size": 1024, "checksum": false}` (what `cargo xtask calibrate --codec
    /// splitzip` writes; `checksum` may be left out).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a codec always serializes")
    }

    /// Parses [`SplitzipCodec::to_json`]'s output.
    ///
    /// # Errors
    /// [`CodebookError::Json`] for malformed JSON, a codebook with a duplicate or of
    /// another length; [`CodebookError::ChunkSize`] for an invalid chunk size.
    pub fn from_json(json: &str) -> Result<Self, CodebookError> {
        let codec: SplitzipCodec = serde_json::from_str(json)?;
        if !crate::format::chunk_size_is_valid(codec.chunk_size) {
            return Err(CodebookError::ChunkSize { chunk_size: codec.chunk_size });
        }
        Ok(codec)
    }

    /// Writes [`SplitzipCodec::to_json`] to `path`.
    ///
    /// # Errors
    /// [`CodebookError::Io`].
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<(), CodebookError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json() + "\n")
            .map_err(|source| CodebookError::Io { path: path.display().to_string(), source })
    }

    /// Reads a codec written by [`SplitzipCodec::save`].
    ///
    /// # Errors
    /// [`CodebookError::Io`], then as [`SplitzipCodec::from_json`].
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self, CodebookError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| CodebookError::Io { path: path.display().to_string(), source })?;
        Self::from_json(&text)
    }
}

/// `L T H D`, the values of one kind, after checking the shape.
fn values_per_kind(shape: KvShape) -> Result<usize, Error> {
    shape.validate().map_err(|_| Error::InvalidShape {
        layers: shape.layers,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        tokens: shape.tokens,
    })?;
    Ok(shape.total_values() / 2)
}

/// The two payloads of a cache encoding and their headers, after the checks of spec §9
/// that need no decoding: both headers valid, each payload holding `per_kind` values,
/// and nothing before, between or after them.
fn split_payloads(encoded: &[u8], per_kind: usize) -> Result<[(&[u8], PayloadHeader); 2], DecodeError> {
    let k = PayloadHeader::parse(encoded)?;
    check_count(&k, per_kind)?;
    // parse() checked that the lengths fit usize.
    let k_len = k.encoded_len() as usize;
    let rest = encoded.get(k_len..).unwrap_or_default();
    let v = PayloadHeader::parse(rest)?;
    check_count(&v, per_kind)?;
    let v_len = v.encoded_len() as usize;
    if rest.len() < v_len {
        return Err(DecodeError::Truncated { needed: v_len as u64, got: rest.len() as u64 });
    }
    if rest.len() > v_len {
        return Err(DecodeError::TrailingBytes { extra: (rest.len() - v_len) as u64 });
    }
    Ok([(&encoded[..k_len], k), (rest, v)])
}

/// Checks that a payload holds `expected` values (one kind of the caller's shape).
fn check_count(header: &PayloadHeader, expected: usize) -> Result<(), DecodeError> {
    if header.value_count != expected as u64 {
        return Err(DecodeError::CacheShapeMismatch { expected: expected as u64, found: header.value_count });
    }
    Ok(())
}

impl CacheCodec for SplitzipCodec {
    type Error = Error;

    fn name(&self) -> &'static str {
        if self.checksum { "splitzip-checksum" } else { "splitzip" }
    }

    fn word_order(&self) -> WordOrder {
        WordOrder::KindMajor
    }

    fn encode_words(&self, words: &[u16], shape: KvShape) -> Result<Vec<u8>, Error> {
        let per_kind = values_per_kind(shape)?;
        if words.len() != 2 * per_kind {
            return Err(EncodeError::WordCountMismatch { got: words.len(), expected: 2 * per_kind }.into());
        }
        let (k, v) = words.split_at(per_kind);
        let options = self.encode_options();
        let mut out = crate::encode_with(k, &self.k_codebook, &options)?;
        let k_len = out.len();
        out.resize(k_len + max_encoded_len(per_kind, self.chunk_size), 0);
        let v_len = crate::encode_into_with(v, &self.v_codebook, &options, &mut out[k_len..])?;
        out.truncate(k_len + v_len);
        Ok(out)
    }

    fn decode_into(&self, encoded: &[u8], shape: KvShape, out: &mut [u16]) -> Result<(), Error> {
        let per_kind = values_per_kind(shape)?;
        let [(k, _), (v, _)] = split_payloads(encoded, per_kind)?;
        if out.len() < 2 * per_kind {
            return Err(
                DecodeError::OutputTooSmall { needed: 2 * per_kind as u64, got: out.len() as u64 }.into()
            );
        }
        let (k_out, v_out) = out[..2 * per_kind].split_at_mut(per_kind);
        // A checksum mismatch of K leaves its values written: V is decoded too, as the
        // GPU path does, and K's error is the one reported.
        let k_result = crate::decode_into(k, k_out);
        if let Err(e) = &k_result
            && !matches!(e, DecodeError::ChecksumMismatch { .. })
        {
            return Err(e.clone().into());
        }
        let v_result = crate::decode_into(v, v_out);
        k_result?;
        v_result?;
        Ok(())
    }
}

/// One kind's half of a device cache encoding: its encoder scratch and output, and an
/// aligned copy of its input when the half does not start 16-byte aligned (`L T H D` not
/// a multiple of 8: the kernels move 16-byte vectors).
struct EncoderHalf {
    workspace: EncodeWorkspace,
    out: CudaSlice<u8>,
    aligned_input: Option<CudaSlice<u16>>,
}

/// [`SplitzipCodec`]'s device encoder state: one [`EncoderHalf`] per kind.
pub struct SplitzipEncoder {
    halves: [EncoderHalf; 2],
    per_kind: usize,
}

/// One payload of a cache encoding on the device, with its header and the checks its
/// decode leaves.
struct DecoderHalf {
    payload: CudaSlice<u8>,
    len: usize,
    header: PayloadHeader,
    checks: DecodeChecks,
}

/// [`SplitzipCodec`]'s device decoder state: both payloads on the device, the host bytes
/// the CPU decoder reruns on when a kernel flags them, and aligned scratch for a V half
/// that does not start 16-byte aligned.
pub struct SplitzipDecoder {
    halves: [DecoderHalf; 2],
    encoded: Vec<u8>,
    aligned_output: Option<CudaSlice<u16>>,
    per_kind: usize,
}

/// Whether the second half of a device cache of `2 * per_kind` words starts off a
/// 16-byte boundary (the first half starts where the buffer does).
fn second_half_misaligned(per_kind: usize) -> bool {
    !(2 * per_kind).is_multiple_of(16)
}

impl GpuCacheCodec for SplitzipCodec {
    type Encoder = SplitzipEncoder;
    type Decoder = SplitzipDecoder;

    fn device_encoder(&self, gpu: &GpuContext, shape: KvShape) -> Result<SplitzipEncoder, GpuError> {
        let per_kind = values_per_kind(shape)?;
        let half = |aligned: bool| -> Result<EncoderHalf, GpuError> {
            Ok(EncoderHalf {
                workspace: EncodeWorkspace::new(gpu, per_kind)?,
                out: gpu.zeros(max_encoded_len(per_kind, self.chunk_size))?,
                aligned_input: if aligned { Some(gpu.zeros(per_kind)?) } else { None },
            })
        };
        let halves = [half(false)?, half(second_half_misaligned(per_kind))?];
        gpu.synchronize()?;
        Ok(SplitzipEncoder { halves, per_kind })
    }

    fn encode_device(
        &self,
        gpu: &GpuContext,
        encoder: &mut SplitzipEncoder,
        words: &CudaView<'_, u16>,
    ) -> Result<(), GpuError> {
        let n = encoder.per_kind;
        kvcodec_gpu::check_len("words", words.len(), 2 * n, "values")?;
        let options = self.encode_options();
        for (i, (half, codebook)) in encoder.halves.iter_mut().zip(self.codebooks()).enumerate() {
            let input = words.slice(i * n..(i + 1) * n);
            let out = &mut half.out.as_view_mut();
            match &mut half.aligned_input {
                Some(aligned) => {
                    gpu.stream().memcpy_dtod(&input, &mut aligned.slice_mut(..n))?;
                    encode_device(gpu, &aligned.slice(..n), &codebook, &options, out, &mut half.workspace)?;
                }
                None => encode_device(gpu, &input, &codebook, &options, out, &mut half.workspace)?,
            }
        }
        Ok(())
    }

    fn encoded_bytes(&self, gpu: &GpuContext, encoder: &SplitzipEncoder) -> Result<Vec<u8>, GpuError> {
        let mut bytes = Vec::new();
        for half in &encoder.halves {
            let len = half.workspace.encoded_len(gpu)?;
            bytes.extend(gpu.download(&half.out, len)?);
        }
        Ok(bytes)
    }

    fn device_decoder(
        &self,
        gpu: &GpuContext,
        encoded: &[u8],
        shape: KvShape,
    ) -> Result<SplitzipDecoder, GpuError> {
        let per_kind = values_per_kind(shape)?;
        let [k, v] = split_payloads(encoded, per_kind)?;
        let half = |(payload, header): (&[u8], PayloadHeader)| -> Result<DecoderHalf, GpuError> {
            let checks = DecodeChecks::new(gpu)?;
            Ok(DecoderHalf { payload: gpu.upload(payload)?, len: payload.len(), header, checks })
        };
        let halves = [half(k)?, half(v)?];
        let aligned_output = if second_half_misaligned(per_kind) { Some(gpu.zeros(per_kind)?) } else { None };
        gpu.synchronize()?;
        Ok(SplitzipDecoder { halves, encoded: encoded.to_vec(), aligned_output, per_kind })
    }

    fn decode_device(
        &self,
        gpu: &GpuContext,
        decoder: &mut SplitzipDecoder,
        out: &mut CudaViewMut<'_, u16>,
    ) -> Result<(), GpuError> {
        let n = decoder.per_kind;
        kvcodec_gpu::check_len("out", out.len(), 2 * n, "values")?;
        let SplitzipDecoder { halves, aligned_output, .. } = decoder;
        for (i, half) in halves.iter_mut().enumerate() {
            let payload = half.payload.slice(..half.len);
            let mut target = out.slice_mut(i * n..(i + 1) * n);
            match aligned_output {
                Some(aligned) if device_address(&target, gpu.stream()) % 16 != 0 => {
                    decode_device(
                        gpu,
                        &payload,
                        &half.header,
                        &mut aligned.slice_mut(..n),
                        &mut half.checks,
                    )?;
                    gpu.stream().memcpy_dtod(&aligned.slice(..n), &mut target)?;
                }
                _ => decode_device(gpu, &payload, &half.header, &mut target, &mut half.checks)?,
            }
        }
        Ok(())
    }

    fn finish_decode(&self, gpu: &GpuContext, decoder: &SplitzipDecoder) -> Result<(), GpuError> {
        for half in &decoder.halves {
            let status = half.checks.status(gpu, &half.header)?;
            if status != 0 {
                // The CPU decoder on the whole cache, so that its first error is reported.
                let mut scratch = vec![0u16; 2 * decoder.per_kind];
                let cpu = || {
                    let [(k, _), (v, _)] = split_payloads(&decoder.encoded, decoder.per_kind)?;
                    let (k_out, v_out) = scratch.split_at_mut(decoder.per_kind);
                    crate::decode_into(k, k_out)?;
                    crate::decode_into(v, v_out).map_err(Error::from)
                };
                return Err(kvcodec_gpu::cpu_verdict(status, &DECODE_STATUS, cpu));
            }
        }
        Ok(())
    }
}
