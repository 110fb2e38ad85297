//! The ZipFusion GPU page compression and page decode (PTX from
//! `kernels/zipfusion/zipfusion.cu`), byte-identical to the CPU reference in both
//! directions (spec §10).
//!
//! **Pages** (a paged pool's view): [`encode_pages_device`] compresses a run of full
//! 16-token pages into fixed slots and leaves each page's length on the device;
//! [`decode_pages_device`] checks each slot's metadata on the device (spec §6) and
//! decodes the valid pages to BF16, leaving a status word that [`verify_pages`] turns
//! into the CPU's exact [`crate::Error`]. Both enqueue on the context's stream with no
//! host synchronisation, so they can be captured in a CUDA graph.
//!
//! **Caches** ([`CacheEncoder`], [`CacheDecoder`], and through them
//! [`kvcodec_gpu::GpuCacheCodec`] for [`crate::ZipfusionCodec`]): the container of spec
//! §7. Encoding is one pass over the input (`zipfusion_encode_fused`, one CTA per page):
//! a page's blocks are loaded into shared memory and classified, the page's place in the
//! container comes from a decoupled look-back over the earlier pages' lengths (pages
//! taken in ticket order), and the page is written from shared memory; the BF16 tails
//! are copied (`zipfusion_tails`), then one CTA writes the header with its checksum and
//! CRC (`zipfusion_encode_header`). With the checksum, the one-pass encoder, the tail copy
//! and the decoder add the Adler-32 sums of the values they hold (`*_checksum` kernels);
//! no other pass reads the values. Pages of more than [`FUSED_MAX_BLOCKS`] blocks
//! take two passes instead: classification (`zipfusion_encode_classify`), a scan of the
//! page lengths that also writes the header (`zipfusion_encode_scan`, one CTA) and the
//! page writer (`zipfusion_encode_pages`), the checksum's sums in a pass of their own.
//! The container's length stays on the device
//! until [`CacheEncoder::encoded_len`] reads it. Decoding walks the container's page
//! lengths on the host once ([`CacheDecoder::new`]: pages have no index), then each
//! decode is one kernel over the pages plus the tail copy.
//!
//! How the kernels work: encoding, a CTA per page and a warp per block of 512 values;
//! decoding, a warp per page. A block's 16 rows move as 16-byte vectors and reach fragment
//! order (spec §3) through a swizzled shared-memory tile; block `b` of a page starts at
//! `metadata_len + 768 b + 256 x` (raw blocks before `b`), counted from the raw blocks' bits.
//!
//! GPU limits (the CPU path has none of them): device buffers 16-byte aligned; at most
//! [`MAX_PAGE_BLOCKS`] blocks per page (the two-pass encoder holds a page's metadata
//! bytes in shared memory).

mod decode;
mod encode;

use kvcodec_gpu::{GpuContext, Kernel, Module, StatusCodes, StatusEncoding, StatusValue};

pub use decode::{CacheDecoder, decode_pages_device, pages_cpu_verdict, verify_pages};
pub use encode::{CacheEncoder, PageScratch, encode_kv_pages_device, encode_pages_device};

use crate::format::{PageShape, Variant};

/// An error of the ZipFusion GPU path: the CPU's [`crate::Error`], a GPU error, or a
/// disagreement with the CPU decoder.
pub type GpuError = kvcodec_gpu::GpuError<crate::Error>;

impl From<crate::Error> for GpuError {
    fn from(e: crate::Error) -> Self {
        GpuError::Codec(e)
    }
}

/// The ZipFusion PTX module.
pub static MODULE: Module = Module::new("zipfusion", include_str!("../../ptx/zipfusion.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// The kernels of [`MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZipfusionKernel {
    /// Every block's metadata byte and each page's length, one CTA per page.
    EncodeClassify,
    /// Page offsets of a container (a scan over page lengths) and its header, one CTA.
    EncodeScan,
    /// Every page's metadata and blocks, one CTA per page.
    EncodePages,
    /// Classification, placement and writing of a page in one pass over its input, one
    /// CTA per page, pages of at most [`FUSED_MAX_BLOCKS`] blocks.
    EncodeFused,
    /// [`ZipfusionKernel::EncodeFused`] adding the checksum's sums of the pages' values.
    EncodeFusedChecksum,
    /// A container's length and header after [`ZipfusionKernel::EncodeFused`], one CTA.
    EncodeHeader,
    /// The BF16 tails of a container, either way.
    Tails,
    /// The metadata checks and the blocks of every page, one warp per page.
    DecodePages,
    /// [`ZipfusionKernel::DecodePages`] adding the checksum's sums of the decoded values.
    DecodePagesChecksum,
}

impl Kernel for ZipfusionKernel {
    fn module(self) -> &'static Module {
        &MODULE
    }
    fn symbol(self) -> &'static str {
        match self {
            ZipfusionKernel::EncodeClassify => "zipfusion_encode_classify",
            ZipfusionKernel::EncodeScan => "zipfusion_encode_scan",
            ZipfusionKernel::EncodePages => "zipfusion_encode_pages",
            ZipfusionKernel::EncodeFused => "zipfusion_encode_fused",
            ZipfusionKernel::EncodeFusedChecksum => "zipfusion_encode_fused_checksum",
            ZipfusionKernel::EncodeHeader => "zipfusion_encode_header",
            ZipfusionKernel::Tails => "zipfusion_tails",
            ZipfusionKernel::DecodePages => "zipfusion_decode_pages",
            ZipfusionKernel::DecodePagesChecksum => "zipfusion_decode_pages_checksum",
        }
    }
}

/// Threads per CTA of the page kernels: 4 warps, one block each at a time (a SmolLM2
/// page of 12 blocks gives each warp 3).
pub const THREADS: u32 = 128;
/// Threads of the container's scan CTA.
pub const SCAN_THREADS: u32 = 1024;
/// 16-bit words per row of a block's shared-memory tile: its 32 channels, unpadded (an XOR
/// swizzle of the row's 16-byte pieces keeps the fragment-order accesses of spec §3 on
/// distinct banks).
pub const TILE_STRIDE: usize = 32;
/// The most blocks of a page the one-pass encoder holds in shared memory (a tile of
/// `16 x` [`TILE_STRIDE`] words each); larger pages are classified and written in two
/// passes over the input.
pub const FUSED_MAX_BLOCKS: usize = 32;
/// The most blocks a page may have on the GPU (`2 H D / 32`): the two-pass encoder holds
/// a page's metadata bytes and raw bits in shared memory.
pub const MAX_PAGE_BLOCKS: usize = 4096;

/// What `zipfusion_decode_pages` leaves in its status word: the first problem's code
/// (the checks of spec §6; the CPU's [`crate::page_info`] gives the exact error).
/// `CHECKSUM` is the host's verdict on a container's checksum, reported the same way.
pub const DECODE_STATUS: StatusCodes = StatusCodes {
    encoding: StatusEncoding::FirstCode,
    values: &[
        StatusValue {
            value: 1,
            name: "TRUNCATED",
            meaning: "a page's metadata or blocks end past its bytes",
        },
        StatusValue {
            value: 2,
            name: "ZERO_AWARE_IN_BASE",
            meaning: "a zero-aware metadata byte in a base-variant cache",
        },
        StatusValue { value: 3, name: "HALF_BASE_TOO_LARGE", meaning: "a metadata byte with b/2 > 120" },
        StatusValue { value: 4, name: "PADDING_NOT_ZERO", meaning: "a metadata padding byte is not zero" },
        StatusValue {
            value: 5,
            name: "OFFSET_PAST_PAGE",
            meaning: "a first-block offset past the page's bytes",
        },
        StatusValue {
            value: 6,
            name: "OFFSET_MISMATCH",
            meaning: "a first-block offset not where the blocks before it end",
        },
        StatusValue {
            value: 7,
            name: "CHECKSUM",
            meaning: "the decoded values' Adler-32 differs from the header's checksum (set by the host)",
        },
    ],
};

/// Where a run of pages lies in a buffer of BF16 words, and the page geometry, as the
/// kernels take it (`ZfPages` in the kernel source, field for field): page `i`'s K starts
/// at `(i / group_pages) * group_stride + (i % group_pages) * per_kind` and its V
/// `kind_stride` words later, each `[16, H, D]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct PagesArg {
    per_kind: u64,
    group_pages: u64,
    group_stride: u64,
    kind_stride: u64,
    heads: u32,
    head_dim: u32,
    blocks_per_entry: u32,
    entry_stride: u32,
    metadata_len: u32,
    page_blocks: u32,
    variant: u32,
    pad: u32,
}

// SAFETY: PagesArg is plain integers in C layout (4 u64, 8 u32), the layout of ZfPages.
unsafe impl cudarc::driver::DeviceRepr for PagesArg {}

impl PagesArg {
    /// Dense pages: page `i`'s K at `2 i per_kind`, its V right after.
    pub(crate) fn dense(shape: PageShape, variant: Variant) -> Result<Self, GpuError> {
        let per_kind = shape.values_per_kind() as u64;
        Self::new(shape, variant, 1, 2 * per_kind, per_kind)
    }

    /// The pages of a layer-major cache of `pages_per_layer` pages per layer and
    /// `per_tensor` values per tensor.
    pub(crate) fn cache(
        shape: PageShape,
        variant: Variant,
        pages_per_layer: usize,
        per_tensor: usize,
    ) -> Result<Self, GpuError> {
        Self::new(shape, variant, pages_per_layer.max(1) as u64, 2 * per_tensor as u64, per_tensor as u64)
    }

    fn new(
        shape: PageShape,
        variant: Variant,
        group_pages: u64,
        group_stride: u64,
        kind_stride: u64,
    ) -> Result<Self, GpuError> {
        shape.validate()?;
        if shape.blocks() > MAX_PAGE_BLOCKS {
            return Err(kvcodec_gpu::Error::Unsupported {
                what: "page blocks",
                why: format!(
                    "{} (2 H D / 32); the GPU kernels take at most {MAX_PAGE_BLOCKS}",
                    shape.blocks()
                ),
            }
            .into());
        }
        // validate() keeps the largest page within u32, so every count below fits.
        Ok(PagesArg {
            per_kind: shape.values_per_kind() as u64,
            group_pages,
            group_stride,
            kind_stride,
            heads: shape.kv_heads as u32,
            head_dim: shape.head_dim as u32,
            blocks_per_entry: shape.blocks_per_entry() as u32,
            entry_stride: shape.entry_stride() as u32,
            metadata_len: shape.metadata_len() as u32,
            page_blocks: shape.blocks() as u32,
            variant: variant.byte() as u32,
            pad: 0,
        })
    }

    /// Dynamic shared memory of the two-pass page writer: a word of raw bits per 32
    /// blocks, the raw counts before each word and the page's total, and a byte per block.
    pub(crate) fn dynamic_smem(&self) -> u32 {
        let raw_words = self.page_blocks.div_ceil(32);
        4 * (2 * raw_words + 1) + self.page_blocks
    }

    /// Whether the one-pass encoder takes pages of this shape, `pages` of them.
    pub(crate) fn fused(&self, pages: usize) -> bool {
        self.page_blocks as usize <= FUSED_MAX_BLOCKS && pages <= 1 << 30
    }

    /// Dynamic shared memory of the one-pass encoder: a tile per block and a byte per
    /// block.
    pub(crate) fn fused_smem(&self) -> u32 {
        self.page_blocks * (32 * TILE_STRIDE as u32) + self.page_blocks
    }
}

/// Where a cache's BF16 tails lie: in each of `groups` layers, its K tail (`words` words
/// from word `first` of the layer's K) then its V tail, at the container offset recorded
/// after the layer's `pages_per_group` pages.
pub(crate) struct TailsArg {
    pub(crate) groups: u64,
    pub(crate) first: u64,
    pub(crate) words: u64,
    pub(crate) pages_per_group: u64,
}

/// Which way [`copy_tails`] copies.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TailCopy {
    /// Cache words into the container (encoding).
    ToContainer,
    /// The container into cache words (decoding).
    ToWords,
}

/// Launches `zipfusion_tails` (nothing when there are no tails): the tails between the
/// cache's words at device address `words` and the container at `container`, adding the
/// checksum's sums of the values copied to `sums` when given.
///
/// # Safety
/// `words` must hold the cache `g` and `tails` describe (16-byte aligned) and `container`
/// every tail at the offsets in `offsets` (groups x (pages_per_group + 1) words); the
/// side copied to must be writable and not read by anything else on the stream meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn copy_tails(
    gpu: &GpuContext,
    words: u64,
    g: &PagesArg,
    tails: &TailsArg,
    offsets: &cudarc::driver::CudaSlice<u64>,
    container: u64,
    direction: TailCopy,
    sums: Option<&mut kvcodec_gpu::integrity::AdlerSums>,
) -> Result<(), GpuError> {
    use cudarc::driver::PushKernelArg;
    if tails.words == 0 {
        return Ok(());
    }
    let f = gpu.function(ZipfusionKernel::Tails)?;
    let to_container = u32::from(direction == TailCopy::ToContainer);
    let null = 0u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(&words).arg(g).arg(&tails.groups).arg(&tails.first).arg(&tails.words).arg(offsets);
    launch.arg(&tails.pages_per_group).arg(&container).arg(&to_container);
    match sums {
        Some(sums) => launch.arg(sums.counters_mut()),
        None => launch.arg(&null),
    };
    let units = (tails.groups * tails.words / 4) as usize;
    // SAFETY: the signature matches zipfusion_tails; the caller vouches for the buffers;
    // `sums` is null or two counters.
    unsafe { launch.launch(gpu.grid_stride_config(units, THREADS)) }?;
    Ok(())
}

/// The grid of a page kernel: a CTA per page (the kernels stride past 2^30 pages).
pub(crate) fn page_grid(pages: usize) -> u32 {
    pages.min(1 << 30) as u32
}

/// The grid of the decoder: a warp per page (it strides past 2^30 pages).
pub(crate) fn decode_grid(pages: usize) -> u32 {
    pages.div_ceil(THREADS as usize / 32).min(1 << 30) as u32
}
