//! [`SplitzipCodec`]: SplitZip over a whole KV cache, the [`CacheCodec`] and
//! [`GpuCacheCodec`] implementations over this crate's payload API.

use bf16_field::{CacheCodec, KvCache, KvKind, KvShape, WordOrder};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use kvcodec_gpu::{DeviceStatus, GpuCacheCodec, GpuContext, device_address};

use crate::gpu::{DECODE_STATUS, EncodeWorkspace, GpuError, decode_device, encode_device};
use crate::{Codebook, CodebookError, DecodeError, EncodeError, Error, PayloadHeader, max_encoded_len};

/// SplitZip over a whole cache: two payloads back to back (spec §6), the first of every
/// layer's K in layer order with the K codebook, the second of every layer's V with the
/// V codebook (K and V exponents differ, so each kind has its own top 16).
///
/// Calibrate on a separate cache of the same model, as the SplitZip paper's protocol
/// does ([`SplitzipCodec::calibrate`]); a codebook from another model escapes more
/// values and costs ratio and decode speed, never correctness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitzipCodec {
    /// The codebook of the K payload.
    pub keys: Codebook,
    /// The codebook of the V payload.
    pub values: Codebook,
    /// Values per chunk (spec §3), [`crate::DEFAULT_CHUNK_SIZE`] by default.
    pub chunk_size: u32,
}

impl SplitzipCodec {
    /// The top-16 codebooks of `calibration`'s K and V, at the default chunk size.
    ///
    /// # Errors
    /// [`CodebookError::EmptyCalibration`] never for a valid cache (it holds values).
    pub fn calibrate(calibration: &KvCache) -> Result<Self, CodebookError> {
        let kind = |kind: KvKind| -> Vec<&[u16]> { calibration.tensors_of(kind).collect() };
        Ok(SplitzipCodec {
            keys: Codebook::calibrate(&kind(KvKind::K))?,
            values: Codebook::calibrate(&kind(KvKind::V))?,
            chunk_size: crate::DEFAULT_CHUNK_SIZE,
        })
    }

    fn codebooks(&self) -> [Codebook; 2] {
        [self.keys, self.values]
    }
}

/// The two payloads of a cache encoding: `(K payload, V payload)`.
fn split_payloads(encoded: &[u8]) -> Result<[&[u8]; 2], DecodeError> {
    // parse() checked that the length fits usize.
    let k_len = PayloadHeader::parse(encoded)?.encoded_len() as usize;
    if encoded.len() < k_len {
        return Err(DecodeError::Truncated { needed: k_len as u64, got: encoded.len() as u64 });
    }
    let (k, v) = encoded.split_at(k_len);
    Ok([k, v])
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
        "splitzip"
    }

    fn word_order(&self) -> WordOrder {
        WordOrder::KindMajor
    }

    fn encode_words(&self, words: &[u16], shape: KvShape) -> Result<Vec<u8>, Error> {
        let per_kind = shape.total_values() / 2;
        if words.len() != shape.total_values() {
            return Err(
                EncodeError::WordCountMismatch { got: words.len(), expected: shape.total_values() }.into()
            );
        }
        let (k, v) = words.split_at(per_kind);
        let mut out = vec![0u8; max_encoded_len(per_kind, self.chunk_size) * 2];
        let k_len = crate::encode_into(k, &self.keys, self.chunk_size, &mut out)?;
        let v_len = crate::encode_into(v, &self.values, self.chunk_size, &mut out[k_len..])?;
        out.truncate(k_len + v_len);
        Ok(out)
    }

    fn decode_into(&self, encoded: &[u8], shape: KvShape, out: &mut [u16]) -> Result<(), Error> {
        let per_kind = shape.total_values() / 2;
        if out.len() != 2 * per_kind {
            return Err(
                DecodeError::OutputTooSmall { needed: 2 * per_kind as u64, got: out.len() as u64 }.into()
            );
        }
        let [k, v] = split_payloads(encoded)?;
        check_count(&PayloadHeader::parse(k)?, per_kind)?;
        check_count(&PayloadHeader::parse(v)?, per_kind)?;
        let (k_out, v_out) = out.split_at_mut(per_kind);
        crate::decode_into(k, k_out)?;
        crate::decode_into(v, v_out)?;
        Ok(())
    }
}

/// One kind's half of a device cache: its encoder scratch and output, and an aligned
/// copy of its input when the half does not start 16-byte aligned.
struct Half {
    workspace: EncodeWorkspace,
    out: CudaSlice<u8>,
    staging: Option<CudaSlice<u16>>,
}

/// [`SplitzipCodec`]'s device encoder state: one [`Half`] per kind.
pub struct SplitzipEncoder {
    halves: [Half; 2],
    per_kind: usize,
}

/// [`SplitzipCodec`]'s device decoder state: both payloads on the device, their headers,
/// one status word each, and aligned scratch for a V half that does not start aligned.
pub struct SplitzipDecoder {
    payloads: [(CudaSlice<u8>, usize, PayloadHeader, DeviceStatus); 2],
    staging: Option<CudaSlice<u16>>,
    per_kind: usize,
}

impl GpuCacheCodec for SplitzipCodec {
    type Encoder = SplitzipEncoder;
    type Decoder = SplitzipDecoder;

    fn device_encoder(&self, gpu: &GpuContext, shape: KvShape) -> Result<SplitzipEncoder, GpuError> {
        let per_kind = shape.total_values() / 2;
        let half = || -> Result<Half, GpuError> {
            Ok(Half {
                workspace: EncodeWorkspace::new(gpu, per_kind)?,
                out: gpu.zeros(max_encoded_len(per_kind, self.chunk_size))?,
                staging: None,
            })
        };
        Ok(SplitzipEncoder { halves: [half()?, half()?], per_kind })
    }

    fn encode_device(
        &self,
        gpu: &GpuContext,
        encoder: &mut SplitzipEncoder,
        words: &CudaView<'_, u16>,
    ) -> Result<(), GpuError> {
        let n = encoder.per_kind;
        kvcodec_gpu::check_len("words", words.len(), 2 * n, "values")?;
        for (i, (half, codebook)) in encoder.halves.iter_mut().zip(self.codebooks()).enumerate() {
            let input = words.slice(i * n..(i + 1) * n);
            // A half that starts off a 16-byte boundary (L T H D not a multiple of 8) is
            // copied to aligned scratch first; the kernels move 16-byte vectors.
            if device_address(&input, gpu.stream()) % 16 != 0 {
                let staging = match &mut half.staging {
                    Some(s) => s,
                    slot => slot.insert(gpu.zeros(n)?),
                };
                gpu.stream().memcpy_dtod(&input, &mut staging.slice_mut(..n))?;
                encode_device(
                    gpu,
                    &staging.slice(..n),
                    &codebook,
                    self.chunk_size,
                    &mut half.out.as_view_mut(),
                    &mut half.workspace,
                )?;
            } else {
                encode_device(
                    gpu,
                    &input,
                    &codebook,
                    self.chunk_size,
                    &mut half.out.as_view_mut(),
                    &mut half.workspace,
                )?;
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
        let per_kind = shape.total_values() / 2;
        let halves = split_payloads(encoded)?;
        let mut payloads = Vec::with_capacity(2);
        for payload in halves {
            let header = PayloadHeader::parse(payload)?;
            check_count(&header, per_kind)?;
            payloads.push((gpu.upload(payload)?, payload.len(), header, DeviceStatus::new(gpu)?));
        }
        let payloads = payloads.try_into().unwrap_or_else(|_| unreachable!("two payloads"));
        Ok(SplitzipDecoder { payloads, staging: None, per_kind })
    }

    fn decode_device(
        &self,
        gpu: &GpuContext,
        decoder: &mut SplitzipDecoder,
        out: &mut CudaViewMut<'_, u16>,
    ) -> Result<(), GpuError> {
        let n = decoder.per_kind;
        kvcodec_gpu::check_len("out", out.len(), 2 * n, "values")?;
        for (i, (payload, len, header, status)) in decoder.payloads.iter_mut().enumerate() {
            let payload = payload.slice(..*len);
            let mut target = out.slice_mut(i * n..(i + 1) * n);
            if device_address(&target, gpu.stream()) % 16 != 0 {
                let staging = match &mut decoder.staging {
                    Some(s) => s,
                    slot => slot.insert(gpu.zeros(n)?),
                };
                decode_device(gpu, &payload, header, &mut staging.slice_mut(..n), status)?;
                gpu.stream().memcpy_dtod(&staging.slice(..n), &mut target)?;
            } else {
                decode_device(gpu, &payload, header, &mut target, status)?;
            }
        }
        Ok(())
    }

    fn finish_decode(
        &self,
        gpu: &GpuContext,
        decoder: &SplitzipDecoder,
        encoded: &[u8],
    ) -> Result<(), GpuError> {
        let halves = split_payloads(encoded)?;
        for ((_, _, _, status), payload) in decoder.payloads.iter().zip(halves) {
            status.check(gpu, &DECODE_STATUS, || crate::decode(payload).map_err(Error::from))?;
        }
        Ok(())
    }
}
