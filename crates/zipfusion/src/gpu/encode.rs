//! The GPU encoders: see the module docs of [`crate::gpu`].

use bf16_field::KvShape;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, PushKernelArg};
use kvcodec_gpu::integrity::{AdlerSums, RecordRuns, add_record_sums};
use kvcodec_gpu::{GpuContext, check_aligned, check_len, device_address, launch_config};

use super::TailCopy::ToContainer;
use super::{GpuError, PagesArg, SCAN_THREADS, THREADS, TailsArg, ZipfusionKernel, copy_tails, page_grid};
use crate::cache::{CacheHeader, EncodeOptions, max_encoded_len, page_shape_of};
use crate::format::{ALIGN, HEADER_LEN, PAGE_TOKENS, PageShape, Variant};

/// Device scratch for [`encode_pages_device`]: a metadata byte per block of up to
/// `capacity` pages.
pub struct PageScratch {
    metas: CudaSlice<u8>,
    capacity: usize,
}

impl std::fmt::Debug for PageScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageScratch").field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

impl PageScratch {
    /// Scratch for runs of up to `capacity` pages of `shape`: `2 H D / 32` bytes per page.
    ///
    /// # Errors
    /// `shape`'s error; [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, shape: PageShape, capacity: usize) -> Result<Self, GpuError> {
        shape.validate()?;
        let metas = gpu.zeros((capacity * shape.blocks()).max(1))?;
        gpu.synchronize()?;
        Ok(PageScratch { metas, capacity })
    }
}

/// Launches the classification of `pages` pages laid out as `g` says: each block's
/// metadata byte into `metas`, each page's length into `lens`.
fn classify(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    g: &PagesArg,
    pages: usize,
    metas: &mut CudaSlice<u8>,
    lens: &mut CudaViewMut<'_, u32>,
) -> Result<(), GpuError> {
    let f = gpu.function(ZipfusionKernel::EncodeClassify)?;
    let pages64 = pages as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(words).arg(g).arg(&pages64).arg(metas).arg(lens);
    // SAFETY: the signature matches zipfusion_encode_classify; the callers checked that
    // `words` holds every page `g` places (16-byte aligned, as every block row is), that
    // `metas` holds a byte per block of `pages` pages and `lens` a word per page.
    unsafe { launch.launch(launch_config(page_grid(pages), THREADS, 0)) }?;
    Ok(())
}

/// Launches the writing of `pages` pages: to `out + i * slot_stride`, or with
/// `slot_stride == 0` to the container offsets in `offsets`.
#[allow(clippy::too_many_arguments)]
fn write_pages(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    g: &PagesArg,
    pages: usize,
    metas: &CudaSlice<u8>,
    offsets: Option<&CudaSlice<u64>>,
    slot_stride: u64,
    out: &mut CudaViewMut<'_, u8>,
) -> Result<(), GpuError> {
    let f = gpu.function(ZipfusionKernel::EncodePages)?;
    let pages64 = pages as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    // With fixed slots the kernel never reads the offsets table: a null pointer.
    let null = 0u64;
    launch.arg(words).arg(g).arg(&pages64).arg(metas);
    match offsets {
        Some(offsets) => launch.arg(offsets),
        None => launch.arg(&null),
    };
    launch.arg(&slot_stride).arg(out);
    // SAFETY: the signature matches zipfusion_encode_pages; `metas` holds what classify
    // wrote for these pages; every page lies within `out` (the callers checked the slots,
    // or the container's largest length); block positions are 16-byte aligned.
    unsafe { launch.launch(launch_config(page_grid(pages), THREADS, g.dynamic_smem())) }?;
    Ok(())
}

/// Launches the one-pass encoder of `pages` pages: to `out + i * slot_stride` with each
/// length into `lens`, or with `slot_stride == 0` to their container offsets, found by
/// the look-back over `state` (zeroed) and recorded in `offsets`.
#[allow(clippy::too_many_arguments)]
fn fused(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    g: &PagesArg,
    pages: usize,
    state: Option<&mut CudaSlice<u64>>,
    offsets: Option<&mut CudaSlice<u64>>,
    tail_len: u64,
    slot_stride: u64,
    lens: Option<&mut CudaViewMut<'_, u32>>,
    out: &mut CudaViewMut<'_, u8>,
    sums: Option<&mut AdlerSums>,
) -> Result<(), GpuError> {
    let kernel =
        if sums.is_some() { ZipfusionKernel::EncodeFusedChecksum } else { ZipfusionKernel::EncodeFused };
    let f = gpu.function(kernel)?;
    // What a mode does not use is a null pointer: the kernel never reads it.
    let null = 0u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(words).arg(g);
    match state {
        Some(state) => launch.arg(state),
        None => launch.arg(&null),
    };
    match offsets {
        Some(offsets) => launch.arg(offsets),
        None => launch.arg(&null),
    };
    launch.arg(&tail_len).arg(&slot_stride);
    match lens {
        Some(lens) => launch.arg(lens),
        None => launch.arg(&null),
    };
    launch.arg(out);
    match sums {
        Some(sums) => launch.arg(sums.counters_mut()),
        None => launch.arg(&null),
    };
    // SAFETY: the signature matches zipfusion_encode_fused(_checksum); one CTA per page
    // (pages <= 2^30, checked by PagesArg::fused); the callers checked that `words` holds
    // every page `g` places and that every page fits `out` (fixed slots of at least the
    // largest page, or the largest container); with slot_stride = 0, `state` holds 1 +
    // pages zeroed words and `offsets` groups x (group_pages + 1); else `lens` holds a
    // word per page; `sums` is two counters (read only by the checksum variant); the
    // dynamic shared memory holds a tile per block (fused_smem).
    unsafe { launch.launch(launch_config(pages as u32, THREADS, g.fused_smem())) }?;
    Ok(())
}

/// Compresses `pages` full pages of `shape` (`words`: for each page its K then its V,
/// each `[16, H, D]` token-major, `2 x 16 H D` words per page, 16-byte aligned) into
/// fixed slots of `slot_stride` bytes of `out` (page `i` at `i * slot_stride`, a multiple
/// of 16 of at least [`PageShape::max_page_len`]), and each page's length into `lens`,
/// on the context's stream without synchronising: a pool compressing the pages that
/// filled. Page `i`'s first `lens[i]` bytes are exactly [`crate::encode_page`]'s; the
/// rest of its slot is left as it was. Keep every buffer alive until the stream has passed
/// the call.
///
/// # Errors
/// `shape`'s error; [`kvcodec_gpu::Error::Unsupported`] past the GPU limits;
/// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned buffer, a slot too small or
/// not a multiple of 16, scratch for fewer pages; [`kvcodec_gpu::Error::Cuda`].
#[allow(clippy::too_many_arguments)]
pub fn encode_pages_device(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    shape: PageShape,
    variant: Variant,
    pages: usize,
    out: &mut CudaViewMut<'_, u8>,
    slot_stride: usize,
    lens: &mut CudaViewMut<'_, u32>,
    scratch: &mut PageScratch,
) -> Result<(), GpuError> {
    let g = PagesArg::dense(shape, variant)?;
    encode_slots(gpu, words, &g, shape, pages, out, slot_stride, lens, scratch)
}

/// [`encode_pages_device`] for pages whose K and V lie apart, as a paged attention cache
/// keeps them: `kv` holds every page's K (`[pages, 16, H, D]`), then every page's V.
///
/// # Errors
/// As [`encode_pages_device`].
#[allow(clippy::too_many_arguments)]
pub fn encode_kv_pages_device(
    gpu: &GpuContext,
    kv: &CudaView<'_, u16>,
    shape: PageShape,
    variant: Variant,
    pages: usize,
    out: &mut CudaViewMut<'_, u8>,
    slot_stride: usize,
    lens: &mut CudaViewMut<'_, u32>,
    scratch: &mut PageScratch,
) -> Result<(), GpuError> {
    let g = PagesArg::cache(shape, variant, pages, pages * shape.values_per_kind())?;
    encode_slots(gpu, kv, &g, shape, pages, out, slot_stride, lens, scratch)
}

#[allow(clippy::too_many_arguments)]
fn encode_slots(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    g: &PagesArg,
    shape: PageShape,
    pages: usize,
    out: &mut CudaViewMut<'_, u8>,
    slot_stride: usize,
    lens: &mut CudaViewMut<'_, u32>,
    scratch: &mut PageScratch,
) -> Result<(), GpuError> {
    if slot_stride < shape.max_page_len() || !slot_stride.is_multiple_of(ALIGN) {
        return Err(kvcodec_gpu::Error::Buffer {
            what: "slot_stride",
            why: format!("{slot_stride} bytes; needs a multiple of 16 of at least {}", shape.max_page_len()),
        }
        .into());
    }
    check_len("words", words.len(), pages * 2 * shape.values_per_kind(), "values")?;
    check_len("out", out.len(), pages * slot_stride, "bytes")?;
    check_len("lens", lens.len(), pages, "pages")?;
    check_len("scratch", scratch.capacity, pages, "pages")?;
    let stream = gpu.stream();
    check_aligned("words", device_address(words, stream))?;
    check_aligned("out", device_address(out, stream))?;
    if pages == 0 {
        return Ok(());
    }
    if g.fused(pages) {
        return fused(gpu, words, g, pages, None, None, 0, slot_stride as u64, Some(lens), out, None);
    }
    classify(gpu, words, g, pages, &mut scratch.metas, lens)?;
    write_pages(gpu, words, g, pages, &scratch.metas, None, slot_stride as u64, out)?;
    Ok(())
}

/// Device buffers for encoding caches of one shape into containers (spec §7): the
/// container itself, a metadata byte per block, a length per page, the container
/// offsets of every page and tail, the length, and the checksum's sums.
pub struct CacheEncoder {
    shape: KvShape,
    page_shape: PageShape,
    options: EncodeOptions,
    /// The encoded container (its largest length).
    out: CudaSlice<u8>,
    metas: CudaSlice<u8>,
    page_lens: CudaSlice<u32>,
    /// `layers x (pages_per_layer + 1)`: each page's offset, then the layer's tail's.
    offsets: CudaSlice<u64>,
    /// `[container length]`.
    total: CudaSlice<u64>,
    /// The one-pass encoder's ticket and look-back word per page.
    state: CudaSlice<u64>,
    sums: Option<AdlerSums>,
    /// The header without checksum and CRC, which the scan kernel completes.
    header: [u8; HEADER_LEN],
}

impl std::fmt::Debug for CacheEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheEncoder").field("shape", &self.shape).finish_non_exhaustive()
    }
}

/// The 48 header bytes as the scan kernel takes them.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct HeaderArg([u8; HEADER_LEN]);

// SAFETY: HeaderArg is 48 plain bytes, 16-byte aligned: the layout of ZfHeader (3 uint4).
unsafe impl cudarc::driver::DeviceRepr for HeaderArg {}

impl CacheEncoder {
    /// Allocates what encoding caches of `shape` with `options` needs: about the largest
    /// container plus a byte per block and 12 bytes per page.
    ///
    /// # Errors
    /// The CPU encoder's shape errors; [`kvcodec_gpu::Error::Unsupported`] past the GPU
    /// limits; [`kvcodec_gpu::Error::Cuda`].
    pub fn new(gpu: &GpuContext, shape: KvShape, options: &EncodeOptions) -> Result<Self, GpuError> {
        let page_shape = page_shape_of(shape)?;
        PagesArg::dense(page_shape, options.variant)?;
        let pages = shape.layers * (shape.tokens / PAGE_TOKENS);
        // The checksum field (flagged here) is filled on the device, and the CRC.
        let checksum = options.checksum.then_some(0);
        let header = CacheHeader { variant: options.variant, shape, checksum }.to_bytes();
        let encoder = CacheEncoder {
            shape,
            page_shape,
            options: *options,
            out: gpu.zeros(max_encoded_len(shape)?)?,
            metas: gpu.zeros((pages * page_shape.blocks()).max(1))?,
            page_lens: gpu.zeros(pages.max(1))?,
            offsets: gpu.zeros(shape.layers * (shape.tokens / PAGE_TOKENS + 1))?,
            total: gpu.zeros(1)?,
            state: gpu.zeros(pages + 1)?,
            sums: if options.checksum { Some(AdlerSums::new(gpu, 1)?) } else { None },
            header,
        };
        gpu.synchronize()?;
        Ok(encoder)
    }

    /// Enqueues the encoding of the device cache `words` (`2 L T H D` words, layer-major,
    /// 16-byte aligned) on the context's stream, without synchronising: the container
    /// is exactly [`crate::encode_words`]'s.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Buffer`] for a short or misaligned `words`;
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn encode(&mut self, gpu: &GpuContext, words: &CudaView<'_, u16>) -> Result<(), GpuError> {
        let shape = self.shape;
        let n = shape.total_values();
        check_len("words", words.len(), n, "values")?;
        let stream = gpu.stream();
        check_aligned("words", device_address(words, stream))?;
        let words = words.slice(..n);
        let per_layer = shape.tokens / PAGE_TOKENS;
        let per_tensor = shape.values_per_tensor();
        let g = PagesArg::cache(self.page_shape, self.options.variant, per_layer, per_tensor)?;
        let pages = shape.layers * per_layer;
        let tail_tokens = shape.tokens % PAGE_TOKENS;
        let tail_words = tail_tokens * shape.values_per_token();
        let value_bytes = 2 * n as u64;
        let header = HeaderArg(self.header);
        let (layers, per_layer64, tail_len) = (shape.layers as u64, per_layer as u64, 4 * tail_words as u64);
        let tails = TailsArg {
            groups: layers,
            first: (per_layer * self.page_shape.values_per_kind()) as u64,
            words: tail_words as u64,
            pages_per_group: per_layer64,
        };
        let (words_at, out_at) = (device_address(&words, stream), device_address(&self.out, stream));
        // The one-pass encoder and the tail copy after it add the checksum's sums of the
        // values they hold; the two-pass encoder and a cache of tails alone take a pass of
        // their own.
        let sums_in_kernels = g.fused(pages) && pages > 0;
        if let Some(sums) = &mut self.sums {
            sums.clear(gpu)?;
            if !sums_in_kernels {
                add_record_sums(gpu, &words, &RecordRuns::contiguous(n), sums)?;
            }
        }
        if !g.fused(pages) {
            self.encode_two_pass(gpu, &words, &g, pages, tail_len)?;
            // SAFETY: each layer's tails lie in `words` (after its pages) and, at the scan's
            // offsets, inside `out` (the largest container); only `out` is written.
            return unsafe {
                copy_tails(gpu, words_at, &g, &tails, &self.offsets, out_at, ToContainer, None)
            };
        }
        stream.memset_zeros(&mut self.state)?;
        if pages > 0 {
            // Pages, then tails (the pages' look-back wrote the tails' offsets), both adding
            // the checksum's sums, then the header with the checksum.
            let mut out = self.out.as_view_mut();
            let (state, offsets) = (Some(&mut self.state), Some(&mut self.offsets));
            fused(gpu, &words, &g, pages, state, offsets, tail_len, 0, None, &mut out, self.sums.as_mut())?;
            let sums = self.sums.as_mut();
            // SAFETY: as above; the offsets are the fused kernel's.
            unsafe { copy_tails(gpu, words_at, &g, &tails, &self.offsets, out_at, ToContainer, sums) }?;
            self.write_header(gpu, layers, per_layer64, tail_len, &header, value_bytes)
        } else {
            // No full page: the header kernel writes the tails' offsets, so it runs first.
            self.write_header(gpu, layers, per_layer64, tail_len, &header, value_bytes)?;
            // SAFETY: as above; the offsets are the header kernel's.
            unsafe { copy_tails(gpu, words_at, &g, &tails, &self.offsets, out_at, ToContainer, None) }
        }
    }

    /// Launches `zipfusion_encode_header`: the container's length and header (with the
    /// checksum from the sums, when they are kept).
    fn write_header(
        &mut self,
        gpu: &GpuContext,
        layers: u64,
        per_layer: u64,
        tail_len: u64,
        header: &HeaderArg,
        value_bytes: u64,
    ) -> Result<(), GpuError> {
        // A null pointer tells the header kernel there is no checksum.
        let null: u64 = 0;
        let f = gpu.function(ZipfusionKernel::EncodeHeader)?;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(&mut self.offsets).arg(&layers).arg(&per_layer).arg(&tail_len);
        launch.arg(&mut self.total).arg(header);
        match &self.sums {
            Some(sums) => launch.arg(sums.counters()),
            None => launch.arg(&null),
        };
        launch.arg(&value_bytes).arg(&mut self.out);
        // SAFETY: the signature matches zipfusion_encode_header; offsets holds layers x
        // (per_layer + 1) words, the fused kernel's (or, without pages, the tails' that
        // this kernel writes); the header's 48 bytes fit `out`; `sums` is null or two u64
        // counters.
        unsafe { launch.launch(launch_config(1, 32, 0)) }?;
        Ok(())
    }

    /// The classification, the scan (which also writes the header) and the page writer,
    /// for pages too large for the one-pass encoder.
    fn encode_two_pass(
        &mut self,
        gpu: &GpuContext,
        words: &CudaView<'_, u16>,
        g: &PagesArg,
        pages: usize,
        tail_len: u64,
    ) -> Result<(), GpuError> {
        let stream = gpu.stream();
        let shape = self.shape;
        let per_layer = shape.tokens / PAGE_TOKENS;
        if pages > 0 {
            classify(gpu, words, g, pages, &mut self.metas, &mut self.page_lens.slice_mut(..pages))?;
        }
        let (layers, per_layer64) = (shape.layers as u64, per_layer as u64);
        let header = HeaderArg(self.header);
        let value_bytes = 2 * shape.total_values() as u64;
        let f = gpu.function(ZipfusionKernel::EncodeScan)?;
        let mut launch = stream.launch_builder(&f);
        launch.arg(&self.page_lens).arg(&layers).arg(&per_layer64).arg(&tail_len);
        launch.arg(&mut self.offsets).arg(&mut self.total).arg(&header);
        // A null pointer tells the kernel there is no checksum.
        let null: u64 = 0;
        match &self.sums {
            Some(sums) => launch.arg(sums.counters()),
            None => launch.arg(&null),
        };
        launch.arg(&value_bytes).arg(&mut self.out);
        // SAFETY: the signature matches zipfusion_encode_scan; page_lens holds the
        // classify kernel's length of each of layers x per_layer pages; offsets holds
        // layers x (per_layer + 1) words; the header's 48 bytes fit `out`; `sums` is null
        // or two u64 counters.
        unsafe { launch.launch(launch_config(1, SCAN_THREADS, 0)) }?;
        if pages > 0 {
            let mut out = self.out.as_view_mut();
            write_pages(gpu, words, g, pages, &self.metas, Some(&self.offsets), 0, &mut out)?;
        }
        Ok(())
    }

    /// The container's length from the last [`CacheEncoder::encode`] (synchronises).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn encoded_len(&self, gpu: &GpuContext) -> Result<usize, GpuError> {
        Ok(gpu.download(&self.total, 1)?[0] as usize)
    }

    /// The container the last [`CacheEncoder::encode`] wrote, copied to the host
    /// (synchronises).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn to_vec(&self, gpu: &GpuContext) -> Result<Vec<u8>, GpuError> {
        let len = self.encoded_len(gpu)?;
        Ok(gpu.download(&self.out, len)?)
    }

    /// The device container (its first [`CacheEncoder::encoded_len`] bytes are valid).
    pub fn output(&self) -> &CudaSlice<u8> {
        &self.out
    }
}
