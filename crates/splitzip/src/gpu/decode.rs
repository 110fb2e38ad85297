//! The GPU decoder: see the module docs of [`crate::gpu`].

use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg};
use kvcodec_gpu::integrity::{AdlerSums, RecordRuns, add_record_sums};
use kvcodec_gpu::{DeviceStatus, GpuContext, check_aligned, device_address, launch_config};

use super::{CodebookArg, DECODE_STATUS, GpuError, SplitzipKernel, THREADS, TILE_VALUES, check_gpu_limits};
use crate::{DecodeError, Layout, PayloadHeader};

/// The status code the host reports for a checksum mismatch (`CHECKSUM` of
/// [`DECODE_STATUS`]).
const CHECKSUM_STATUS: u32 = 6;
const _: () = assert!(
    DECODE_STATUS.values[CHECKSUM_STATUS as usize - 1].value == CHECKSUM_STATUS,
    "CHECKSUM_STATUS is the CHECKSUM code of DECODE_STATUS"
);

/// A payload with at least one escape per this many values decodes with the tile escape
/// image ([`SplitzipKernel::DecodeTilesDense`]), below it with a search per group
/// ([`SplitzipKernel::DecodeTiles`]). The image, its lists fetched into the L2 ahead of
/// its tiles, led at every escape rate measured (from the fixture's own 0.033%, one per
/// 3066 values, up: docs/perf/splitzip-gpu.md, "The image's checks in the tiles"); the
/// search costs nothing in a chunk without escapes, so it keeps the sparser payloads,
/// where the crossover (not measured) lies.
pub(crate) const DENSE_ESCAPES: u64 = 4096;

/// What a decode leaves on the device for the host to judge: the body check's status
/// word and, for a payload with a checksum, the Adler-32 sums of the words written.
/// Reusable across decodes ([`decode_device`] clears it).
#[derive(Debug)]
pub struct DecodeChecks {
    status: DeviceStatus,
    sums: AdlerSums,
}

impl DecodeChecks {
    /// Zeroed checks on `gpu`'s device.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext) -> Result<Self, GpuError> {
        Ok(DecodeChecks { status: DeviceStatus::new(gpu)?, sums: AdlerSums::new(gpu, 1)? })
    }

    /// The verdict on the decode of a payload with `header`, once the stream has passed
    /// it (synchronises): 0 when the body checks passed and the checksum, if any,
    /// matches; else a value of [`DECODE_STATUS`].
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn status(&self, gpu: &GpuContext, header: &PayloadHeader) -> Result<u32, GpuError> {
        let status = self.status.read(gpu)?;
        if status != 0 {
            return Ok(status);
        }
        if let Some(stored) = header.checksum {
            let computed = self.sums.checksums(gpu, 1, |_| 2 * header.value_count)?[0];
            if computed != stored {
                return Ok(CHECKSUM_STATUS);
            }
        }
        Ok(0)
    }

    /// [`DecodeChecks::status`], then for a nonzero status the CPU decoder's error on the
    /// same input (`cpu`), or [`GpuError::Disagreement`] if it accepts it.
    ///
    /// # Errors
    /// As described; [`kvcodec_gpu::Error::Cuda`].
    pub fn verify<T>(
        &self,
        gpu: &GpuContext,
        header: &PayloadHeader,
        cpu: impl FnOnce() -> Result<T, crate::Error>,
    ) -> Result<(), GpuError> {
        match self.status(gpu, header)? {
            0 => Ok(()),
            status => Err(kvcodec_gpu::cpu_verdict(status, &DECODE_STATUS, cpu)),
        }
    }
}

/// Decodes a device payload whose header (`header`, parsed from its first 128 bytes by
/// [`PayloadHeader::parse`]) the caller has; writes n words into `out` and leaves the
/// body status and, for a payload with a checksum, the sums of the words written in
/// `checks` (cleared first; [`DecodeChecks::verify`] reads them), without
/// synchronising. `payload` must be exactly `header.encoded_len()` bytes; both buffers
/// 16-byte aligned.
///
/// # Errors
/// [`GpuError::Codec`] with [`DecodeError::Truncated`], [`DecodeError::TrailingBytes`]
/// or [`DecodeError::OutputTooSmall`] for buffers that do not fit the header;
/// [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
/// [`kvcodec_gpu::Error::Buffer`] for a misaligned buffer; [`kvcodec_gpu::Error::Cuda`].
pub fn decode_device(
    gpu: &GpuContext,
    payload: &CudaView<'_, u8>,
    header: &PayloadHeader,
    out: &mut CudaViewMut<'_, u16>,
    checks: &mut DecodeChecks,
) -> Result<(), GpuError> {
    let n = header.value_count as usize;
    let declared = header.encoded_len();
    let got = payload.len() as u64;
    if got < declared {
        return Err(DecodeError::Truncated { needed: declared, got }.into());
    }
    if got > declared {
        return Err(DecodeError::TrailingBytes { extra: got - declared }.into());
    }
    if out.len() < n {
        return Err(DecodeError::OutputTooSmall { needed: n as u64, got: out.len() as u64 }.into());
    }
    let stream = gpu.stream();
    checks.status.clear(gpu)?;
    let checksum = header.checksum.is_some();
    if checksum {
        checks.sums.clear(gpu)?;
    }
    match header.layout {
        Layout::Raw { words } => {
            let src = payload.slice(words.offset as usize..words.end() as usize);
            // SAFETY: 2n bytes viewed as n u16 words (a byte copy follows, which needs no
            // alignment).
            let src = unsafe { src.transmute::<u16>(n) }.ok_or_else(|| kvcodec_gpu::Error::Buffer {
                what: "payload",
                why: "its raw section does not view as words".into(),
            })?;
            stream.memcpy_dtod(&src, &mut out.slice_mut(..n))?;
            if checksum && n > 0 {
                add_record_sums(gpu, &out.slice(..n), &RecordRuns::contiguous(n), &mut checks.sums)?;
            }
        }
        Layout::Coded(layout) => {
            check_gpu_limits(n, header.chunk_size)?;
            check_aligned("payload", device_address(payload, stream))?;
            check_aligned("out", device_address(out, stream))?;
            let (n64, cs, e, exp_at) =
                (n as u64, header.chunk_size, header.escape_count, layout.escape_exponents.offset);
            let cb = CodebookArg::new(&header.codebook);
            let dense = u128::from(e) * u128::from(DENSE_ESCAPES) >= n as u128;
            let kernel = match (dense, checksum) {
                (false, false) => SplitzipKernel::DecodeTiles,
                (false, true) => SplitzipKernel::DecodeTilesChecksum,
                (true, false) => SplitzipKernel::DecodeTilesDense,
                (true, true) => SplitzipKernel::DecodeTilesDenseChecksum,
            };
            let f = gpu.function(kernel)?;
            let tiles = n.div_ceil(TILE_VALUES).max(1) as u32;
            // The body check runs in CTAs after the tiles'. With the image the tiles check
            // their own chunks and one CTA checks the padding; with the search one thread
            // per chunk (at most 8 CTAs per SM, striding) checks it, which mostly runs
            // where the last wave of tiles leaves SMs idle. At least one: without them the
            // body would go unchecked.
            let check_ctas = if dense {
                1
            } else {
                gpu.grid_stride_config(layout.chunk_count as usize, THREADS).grid_dim.0
            };
            debug_assert!(check_ctas >= 1, "grid_stride_config gives at least one CTA");
            let mut launch = stream.launch_builder(&f);
            launch.arg(payload).arg(&n64).arg(&cs).arg(&e).arg(&exp_at).arg(&cb).arg(&mut *out);
            launch.arg(&tiles).arg(checks.status.word());
            if checksum {
                launch.arg(checks.sums.counters_mut());
            }
            // SAFETY: the header was validated (section offsets and lengths match n, the
            // chunk size and E, and the payload is exactly encoded_len bytes), so every
            // index the kernel derives is in bounds; escape indices are checked against E
            // before use (the check CTAs) or used only when a chunk's offsets are ordered,
            // <= E and at most the chunk's length apart (the tile CTAs, whose shared escape
            // image takes only positions below the chunk's length); the image decoder's
            // L2 prefetches of a later tile's lists are made only for a range ordered,
            // <= E and at most a tile's values long, so they stay in their sections;
            // `out` holds n words; `status` holds one u32; the _checksum variant adds to
            // the two u64 of `sums`.
            unsafe { launch.launch(launch_config(tiles + check_ctas, THREADS, 0)) }?;
        }
    }
    Ok(())
}

/// Host payload -> host words through the GPU (validates the header on the host,
/// uploads, decodes, reads back; synchronises). On a body error or a checksum mismatch
/// the CPU decoder runs on the same bytes so the error is its exact variant.
///
/// # Errors
/// [`GpuError::Codec`] for any invalid payload; [`GpuError::Disagreement`] if the GPU
/// flags a payload the CPU accepts; [`kvcodec_gpu::Error`]s.
pub fn decode_to_vec(gpu: &GpuContext, payload: &[u8]) -> Result<Vec<u16>, GpuError> {
    let header = PayloadHeader::parse(payload)?;
    let n = header.value_count as usize;
    let d_payload = gpu.upload(payload)?;
    let mut out = gpu.zeros::<u16>(n)?;
    let mut checks = DecodeChecks::new(gpu)?;
    decode_device(gpu, &d_payload.slice(..payload.len()), &header, &mut out.slice_mut(..n), &mut checks)?;
    checks.verify(gpu, &header, || crate::decode(payload).map_err(crate::Error::from))?;
    Ok(gpu.download(&out, n)?)
}
