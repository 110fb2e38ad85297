//! The GPU decoders: see the module docs of [`crate::gpu`].

use bf16_field::KvShape;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, PushKernelArg};
use kvcodec_gpu::integrity::{AdlerSums, status_with_checksum};
use kvcodec_gpu::{
    DeviceStatus, GpuContext, check_aligned, check_len, cpu_verdict, device_address, launch_config,
};

use super::TailCopy::ToWords;
use super::{DECODE_STATUS, GpuError, PagesArg, THREADS, TailsArg, ZipfusionKernel, copy_tails, decode_grid};
use crate::cache::{CacheHeader, cache_info};
use crate::format::{ALIGN, HEADER_LEN, OFFSET_LEN, PageShape, RAW_BLOCK_BYTE, Variant};
use crate::{Error, page_info};

/// The status code the host reports for a checksum mismatch (`CHECKSUM` of
/// [`DECODE_STATUS`]).
const CHECKSUM_STATUS: u32 = 7;
const _: () = assert!(
    DECODE_STATUS.values[CHECKSUM_STATUS as usize - 1].value == CHECKSUM_STATUS,
    "CHECKSUM_STATUS is the CHECKSUM code of DECODE_STATUS"
);

/// Launches `zipfusion_decode_pages`.
#[allow(clippy::too_many_arguments)]
fn launch_decode(
    gpu: &GpuContext,
    src: &CudaView<'_, u8>,
    g: &PagesArg,
    pages: usize,
    offsets: Option<&CudaSlice<u64>>,
    slot_stride: u64,
    out: &mut CudaViewMut<'_, u16>,
    status: &mut DeviceStatus,
    sums: Option<&mut AdlerSums>,
) -> Result<(), GpuError> {
    let kernel =
        if sums.is_some() { ZipfusionKernel::DecodePagesChecksum } else { ZipfusionKernel::DecodePages };
    let f = gpu.function(kernel)?;
    let (src_len, pages64) = (src.len() as u64, pages as u64);
    let mut launch = gpu.stream().launch_builder(&f);
    // With fixed slots the kernel never reads the offsets table: a null pointer.
    let null = 0u64;
    launch.arg(src).arg(&src_len).arg(g).arg(&pages64);
    match offsets {
        Some(offsets) => launch.arg(offsets),
        None => launch.arg(&null),
    };
    launch.arg(&slot_stride).arg(out);
    launch.arg(status.word());
    match sums {
        Some(sums) => launch.arg(sums.counters_mut()),
        None => launch.arg(&null),
    };
    // SAFETY: the signature matches zipfusion_decode_pages; each page lies at a 16-byte
    // aligned offset inside `src` with at most the bytes after it (fixed slots inside
    // `src`, checked by the caller, or the container offsets the host walk found inside
    // it); the kernel reads a page's metadata only when its limit holds it and its blocks
    // only when the metadata says they end within the limit; `out` holds every page `g`
    // places (checked by the caller); `status` is one u32; `sums` is null or two counters.
    unsafe { launch.launch(launch_config(decode_grid(pages), THREADS, 0)) }?;
    Ok(())
}

/// Decodes `pages` pages of `shape` held in fixed slots of `slot_stride` bytes of `slots`
/// (page `i` at `i * slot_stride`; a multiple of 16) into `out` (for each page its K then
/// its V, `[16, H, D]` each), on the context's stream without synchronising. Each page's
/// metadata is checked as [`crate::page_info`] checks the slot's bytes (spec §6); an
/// invalid page writes nothing and leaves a [`DECODE_STATUS`] code in `status` (cleared
/// first), which [`verify_pages`] turns into the CPU's error. The valid pages of the same
/// call are still decoded: after an error, `out` holds them and leaves the invalid pages'
/// words as they were.
///
/// # Errors
/// `shape`'s error; [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
/// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned buffer or a slot stride that
/// is zero or not a multiple of 16; [`kvcodec_gpu::Error::Cuda`].
#[allow(clippy::too_many_arguments)]
pub fn decode_pages_device(
    gpu: &GpuContext,
    slots: &CudaView<'_, u8>,
    shape: PageShape,
    variant: Variant,
    pages: usize,
    slot_stride: usize,
    out: &mut CudaViewMut<'_, u16>,
    status: &mut DeviceStatus,
) -> Result<(), GpuError> {
    let g = PagesArg::dense(shape, variant)?;
    if slot_stride == 0 || !slot_stride.is_multiple_of(ALIGN) {
        return Err(kvcodec_gpu::Error::Buffer {
            what: "slot_stride",
            why: format!("{slot_stride} bytes; needs a positive multiple of 16"),
        }
        .into());
    }
    check_len("slots", slots.len(), pages * slot_stride, "bytes")?;
    check_len("out", out.len(), pages * 2 * shape.values_per_kind(), "values")?;
    let stream = gpu.stream();
    check_aligned("slots", device_address(slots, stream))?;
    check_aligned("out", device_address(out, stream))?;
    status.clear(gpu)?;
    if pages == 0 {
        return Ok(());
    }
    launch_decode(gpu, slots, &g, pages, None, slot_stride as u64, out, status, None)?;
    Ok(())
}

/// The CPU's verdict on `pages` slots of `slot_stride` bytes of `slots`: the first
/// page's [`crate::page_info`] error, in page order.
///
/// # Errors
/// That error.
pub fn pages_cpu_verdict(
    slots: &[u8],
    shape: PageShape,
    variant: Variant,
    pages: usize,
    slot_stride: usize,
) -> Result<(), Error> {
    for slot in slots.chunks(slot_stride.max(1)).take(pages) {
        page_info(slot, shape, variant)?;
    }
    Ok(())
}

/// Reads the status [`decode_pages_device`] left (synchronises): nonzero gets the CPU's
/// error on the same slots (`slots` is their host copy; [`pages_cpu_verdict`]).
///
/// # Errors
/// [`GpuError::Codec`] with the CPU's error; [`GpuError::Disagreement`] if the CPU
/// accepts the slots; [`kvcodec_gpu::Error::Cuda`].
pub fn verify_pages(
    gpu: &GpuContext,
    status: &DeviceStatus,
    slots: &[u8],
    shape: PageShape,
    variant: Variant,
    pages: usize,
    slot_stride: usize,
) -> Result<(), GpuError> {
    status.check(gpu, &DECODE_STATUS, || pages_cpu_verdict(slots, shape, variant, pages, slot_stride))
}

/// A container on the device, ready to be decoded any number of times: its header, the
/// page offsets a host walk found, the host bytes (which the CPU decoder reruns on when a
/// kernel flags them), and the status word and checksum sums of the last decode.
pub struct CacheDecoder {
    header: CacheHeader,
    bytes: Vec<u8>,
    device: CudaSlice<u8>,
    /// `layers x (pages_per_layer + 1)`: each page's offset, then the layer's tail's.
    offsets: CudaSlice<u64>,
    status: DeviceStatus,
    sums: Option<AdlerSums>,
}

impl std::fmt::Debug for CacheDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheDecoder").field("header", &self.header).finish_non_exhaustive()
    }
}

/// Every page's and tail's offset in a container, walking the pages by the lengths their
/// metadata bytes give (768 coded, 1024 raw) without checking them (the kernel does):
/// `None` when a page or tail would end past the bytes or bytes follow the last tail.
fn walk(bytes: &[u8], header: &CacheHeader) -> Option<Vec<u64>> {
    let (shape, page) = (header.shape, header.page_shape());
    let per_layer = header.pages_per_layer();
    let tail_len = 4 * header.tail_tokens() * shape.values_per_token();
    let (stride, per_entry) = (page.entry_stride(), page.blocks_per_entry());
    let mut offsets = Vec::with_capacity(shape.layers * (per_layer + 1));
    let mut at = HEADER_LEN;
    for _ in 0..shape.layers {
        for _ in 0..per_layer {
            let metadata = bytes.get(at..at + page.metadata_len())?;
            let body: usize = metadata
                .chunks_exact(stride)
                .flat_map(|entry| &entry[OFFSET_LEN..OFFSET_LEN + per_entry])
                .map(|&m| if m == RAW_BLOCK_BYTE { 1024 } else { 768 })
                .sum();
            offsets.push(at as u64);
            at = at.checked_add(page.metadata_len() + body)?;
            if at > bytes.len() {
                return None;
            }
        }
        offsets.push(at as u64);
        at = at.checked_add(tail_len)?;
        if at > bytes.len() {
            return None;
        }
    }
    (at == bytes.len()).then_some(offsets)
}

impl CacheDecoder {
    /// Parses the header of the container `bytes`, checks it holds a cache of `shape`
    /// (when given), walks its pages to find them, and uploads it (synchronises). The
    /// pages' metadata is checked by the decode kernel, not here.
    ///
    /// # Errors
    /// [`GpuError::Codec`] with the CPU decoder's error for a header it rejects, a shape
    /// mismatch ([`Error::CacheShapeMismatch`]), or pages and tails that do not fit the
    /// bytes; [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, bytes: &[u8], shape: Option<KvShape>) -> Result<Self, GpuError> {
        let header = CacheHeader::parse_expecting(bytes, shape)?;
        PagesArg::dense(header.page_shape(), header.variant)?;
        let Some(offsets) = walk(bytes, &header) else {
            // The CPU's walk fails too, with its exact error.
            return Err(cpu_verdict(0, &DECODE_STATUS, || cache_info(bytes)));
        };
        let decoder = CacheDecoder {
            header,
            bytes: bytes.to_vec(),
            device: gpu.upload(bytes)?,
            offsets: gpu.upload(&offsets)?,
            status: DeviceStatus::new(gpu)?,
            sums: if header.checksum.is_some() { Some(AdlerSums::new(gpu, 1)?) } else { None },
        };
        gpu.synchronize()?;
        Ok(decoder)
    }

    /// The container's header.
    pub fn header(&self) -> &CacheHeader {
        &self.header
    }

    /// Enqueues the decoding into `out` (`2 L T H D` words, layer-major, 16-byte
    /// aligned) on the context's stream, without synchronising; [`CacheDecoder::finish`]
    /// reads the verdict.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned `out`;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn decode(&mut self, gpu: &GpuContext, out: &mut CudaViewMut<'_, u16>) -> Result<(), GpuError> {
        let shape = self.header.shape;
        let n = shape.total_values();
        check_len("out", out.len(), n, "values")?;
        let stream = gpu.stream();
        check_aligned("out", device_address(out, stream))?;
        let mut out = out.slice_mut(..n);
        let per_layer = self.header.pages_per_layer();
        let page_shape = self.header.page_shape();
        let g = PagesArg::cache(page_shape, self.header.variant, per_layer, shape.values_per_tensor())?;
        self.status.clear(gpu)?;
        if let Some(sums) = &mut self.sums {
            sums.clear(gpu)?;
        }
        let src = self.device.slice(..self.bytes.len());
        let pages = shape.layers * per_layer;
        if pages > 0 {
            let (offsets, status) = (Some(&self.offsets), &mut self.status);
            launch_decode(gpu, &src, &g, pages, offsets, 0, &mut out, status, self.sums.as_mut())?;
        }
        let tails = TailsArg {
            groups: shape.layers as u64,
            first: (per_layer * page_shape.values_per_kind()) as u64,
            words: (self.header.tail_tokens() * shape.values_per_token()) as u64,
            pages_per_group: per_layer as u64,
        };
        let (out_at, src_at) = (device_address(&out, stream), device_address(&src, stream));
        // SAFETY: the walk put each layer's tail inside the container; each lands after
        // its layer's pages in `out` (n words); only `out` is written.
        unsafe { copy_tails(gpu, out_at, &g, &tails, &self.offsets, src_at, ToWords, self.sums.as_mut()) }?;
        Ok(())
    }

    /// Waits for the last [`CacheDecoder::decode`] (synchronises) and checks its status
    /// and checksum: a flagged container gets the CPU decoder's exact error.
    ///
    /// # Errors
    /// [`GpuError::Codec`]; [`GpuError::Disagreement`]; [`kvcodec_gpu::Error::Cuda`].
    pub fn finish(&self, gpu: &GpuContext) -> Result<(), GpuError> {
        let value_bytes = 2 * self.header.shape.total_values() as u64;
        let status = status_with_checksum(
            gpu,
            &self.status,
            self.header.checksum,
            self.sums.as_ref(),
            value_bytes,
            CHECKSUM_STATUS,
        )?;
        if status == 0 {
            return Ok(());
        }
        Err(cpu_verdict(status, &DECODE_STATUS, || crate::decode_cache(&self.bytes)))
    }
}
