//! The SplitZip GPU encoder and decoder (PTX from `kernels/splitzip/splitzip.cu`),
//! byte-identical to the CPU reference in both directions.
//!
//! **Encode** is a memset and three kernels on one stream, with no host
//! synchronisation, so it can be captured in a CUDA graph ([`encode_device`]):
//! `splitzip_encode_tiles` (one CTA per 8192-value tile) writes codes, sign+mantissa
//! bytes, tile-relative chunk escape offsets, the tile's escape count (also summed per
//! superblock of 256 tiles) and its escapes to scratch; `splitzip_encode_place` (one CTA
//! per superblock) scans the counts, makes the offsets absolute and moves the escapes to
//! their sections (whose place depends on the total); `splitzip_encode_finish` writes the
//! header and padding, or rewrites the payload raw when coded would be larger. The
//! encoded length stays on the device until [`EncodeWorkspace::encoded_len`] reads it.
//!
//! **Decode** ([`decode_device`]) validates the header on the host, then one kernel
//! rebuilds every word once, with escapes patched in registers, and checks the body
//! (spec section 5); a nonzero status makes [`decode_host`] run the CPU decoder to
//! return the exact [`DecodeError`].
//!
//! GPU limits (the CPU path has none of them): chunk sizes up to [`GPU_MAX_CHUNK_SIZE`]
//! values, at most `u32::MAX` values per payload, device buffers 16-byte aligned.

use std::sync::Arc;

use bf16_field::gpu::{GpuContext, PtxModule};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, LaunchConfig, PushKernelArg};

use crate::format::{Layout, NO_CODE};
use crate::{Codebook, DecodeError, PayloadHeader, max_encoded_len};

/// The SplitZip PTX module.
pub const MODULE: PtxModule = PtxModule { name: "splitzip", ptx: include_str!("../ptx/splitzip.ptx") };

/// The kernel's code-table entry for an escape (`SZ_ESCAPE_ENTRY`): code 0 with bit 7
/// set, so the kernel codes without branches.
const ESCAPE_ENTRY: u8 = 0x80;

/// Values per GPU tile (`SZ_TILE_VALUES` in the kernel source); also the largest chunk
/// size the GPU path supports, since a tile holds whole chunks.
pub const GPU_MAX_CHUNK_SIZE: u32 = 8192;
const TILE_VALUES: usize = GPU_MAX_CHUNK_SIZE as usize;
const THREADS: u32 = 256;
/// Workspace words before the superblock sums (encoded length, total escapes).
const WORKSPACE_HEADER_WORDS: usize = 2;
/// Tiles per superblock (`SZ_SUPER`): one escape sum each in the workspace.
const SUPER_TILES: usize = 256;
/// Threads per CTA of the placement kernel (`SZ_PLACE_THREADS`): a warp per tile.
const PLACE_THREADS: u32 = 256;

/// Workspace words for `tiles` tiles: header, one sum per superblock, one count per tile.
fn workspace_words(tiles: usize) -> usize {
    WORKSPACE_HEADER_WORDS + tiles.div_ceil(SUPER_TILES) + tiles
}

/// Errors of the GPU path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The payload is invalid; the variant is the CPU decoder's, for the same bytes.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The encoder's arguments are invalid (as on the CPU).
    #[error(transparent)]
    Encode(#[from] crate::EncodeError),
    /// A chunk size the GPU kernels do not support (the CPU path does).
    #[error("chunk size {chunk_size} is not supported on the GPU (largest: {GPU_MAX_CHUNK_SIZE})")]
    UnsupportedChunkSize {
        /// The chunk size in values.
        chunk_size: u32,
    },
    /// More values than the GPU path handles in one payload.
    #[error("{values} values: the GPU path takes at most u32::MAX values per payload")]
    TooManyValues {
        /// The value count.
        values: usize,
    },
    /// A buffer is too small or misaligned.
    #[error("{what}: {why}")]
    Buffer {
        /// Which buffer.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The GPU decoder flagged a payload the CPU decoder accepts: a bug, never expected.
    #[error("GPU decoder status {status} on a payload the CPU decoder accepts")]
    Disagreement {
        /// The kernel's status code.
        status: u32,
    },
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),
    /// Loading the module failed.
    #[error(transparent)]
    Backend(#[from] bf16_field::Error),
}

/// Device scratch for [`encode_device`], reusable across calls of up to `capacity` values.
pub struct EncodeWorkspace {
    /// `[encoded length, total escapes, sum per superblock..., escapes per tile...]`.
    words: CudaSlice<u64>,
    /// Each tile's escape positions before they move to their section (worst case: every
    /// value of the tile).
    scratch_positions: CudaSlice<u16>,
    /// Each tile's escape exponents, likewise.
    scratch_exponents: CudaSlice<u8>,
    capacity: usize,
}

impl EncodeWorkspace {
    /// Allocates scratch for payloads of up to `capacity` values: about `3 * capacity`
    /// bytes (the worst case, every value escaped) plus 8 bytes per 8192 values.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] when allocation fails.
    pub fn new(gpu: &GpuContext, capacity: usize) -> Result<Self, GpuError> {
        let tiles = capacity.div_ceil(TILE_VALUES);
        let slots = (tiles * TILE_VALUES).max(1);
        Ok(EncodeWorkspace {
            words: gpu.stream().alloc_zeros(workspace_words(tiles))?,
            scratch_positions: gpu.stream().alloc_zeros(slots)?,
            scratch_exponents: gpu.stream().alloc_zeros(slots)?,
            capacity,
        })
    }

    /// The length in bytes of the payload the last [`encode_device`] wrote (synchronises
    /// with the stream).
    ///
    /// # Errors
    /// [`GpuError::Cuda`].
    pub fn encoded_len(&self, gpu: &GpuContext) -> Result<usize, GpuError> {
        let mut len = [0u64];
        gpu.stream().memcpy_dtoh(&self.words.slice(0..1), &mut len)?;
        Ok(len[0] as usize)
    }
}

fn check_aligned(what: &'static str, ptr: u64) -> Result<(), GpuError> {
    if ptr % 16 == 0 {
        Ok(())
    } else {
        Err(GpuError::Buffer { what, why: format!("device address {ptr:#x} is not 16-byte aligned") })
    }
}

fn check_gpu_limits(values: usize, chunk_size: u32) -> Result<(), GpuError> {
    if !crate::format::chunk_size_is_valid(chunk_size) {
        return Err(crate::EncodeError::ChunkSizeInvalid { chunk_size }.into());
    }
    if chunk_size > GPU_MAX_CHUNK_SIZE {
        return Err(GpuError::UnsupportedChunkSize { chunk_size });
    }
    if values > u32::MAX as usize {
        return Err(GpuError::TooManyValues { values });
    }
    Ok(())
}

/// Encodes `words` (n device BF16 words) into `out` (at least
/// [`max_encoded_len`]`(n, chunk_size)` device bytes) on the context's stream, without
/// synchronising; the payload is byte-identical to [`crate::encode`]'s. Its length is
/// read afterwards with [`EncodeWorkspace::encoded_len`].
///
/// # Errors
/// [`GpuError::UnsupportedChunkSize`], [`GpuError::TooManyValues`], [`GpuError::Buffer`]
/// (output too small, workspace too small, misaligned buffer), [`GpuError::Cuda`].
pub fn encode_device(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    codebook: &Codebook,
    chunk_size: u32,
    out: &mut CudaViewMut<'_, u8>,
    workspace: &mut EncodeWorkspace,
) -> Result<(), GpuError> {
    let n = words.len();
    check_gpu_limits(n, chunk_size)?;
    let needed = max_encoded_len(n, chunk_size);
    if out.len() < needed {
        return Err(GpuError::Buffer { what: "out", why: format!("{} bytes, needs {needed}", out.len()) });
    }
    if workspace.capacity < n {
        return Err(GpuError::Buffer {
            what: "workspace",
            why: format!("holds {} values, needs {n}", workspace.capacity),
        });
    }
    let stream = gpu.stream();
    check_aligned("words", words.device_ptr(stream).0)?;
    check_aligned("out", out.device_ptr(stream).0)?;
    let tiles = n.div_ceil(TILE_VALUES);
    stream.memset_zeros(&mut workspace.words.slice_mut(..workspace_words(tiles)))?;
    // The 256-byte exponent -> code table travels as a kernel parameter: no copy, so
    // the whole encode stays capturable in a CUDA graph.
    let table = CodeTableArg(codebook.code_table().map(|c| if c == NO_CODE { ESCAPE_ENTRY } else { c }));
    let (n64, cs) = (n as u64, chunk_size);
    if tiles > 0 {
        let f = gpu.function(&MODULE, "splitzip_encode_tiles")?;
        let mut launch = stream.launch_builder(&f);
        launch
            .arg(words)
            .arg(&n64)
            .arg(&cs)
            .arg(&table)
            .arg(&mut *out)
            .arg(&mut workspace.scratch_positions)
            .arg(&mut workspace.scratch_exponents)
            .arg(&mut workspace.words);
        let cfg =
            LaunchConfig { grid_dim: (tiles as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the signature matches splitzip_encode_tiles; `words` holds n values;
        // the kernel writes only below the escape positions section, which it checks
        // lies within 128 + 2n <= out.len() bytes; each tile writes at most 8192 scratch
        // slots of its own, its count and an atomic add to its superblock sum (all in the
        // workspace of workspace_words(tiles) words, zeroed above).
        unsafe { launch.launch(cfg) }?;
        let f = gpu.function(&MODULE, "splitzip_encode_place")?;
        let mut launch = stream.launch_builder(&f);
        launch
            .arg(&n64)
            .arg(&cs)
            .arg(&mut *out)
            .arg(&workspace.scratch_positions)
            .arg(&workspace.scratch_exponents)
            .arg(&mut workspace.words);
        let warps_per_cta = (PLACE_THREADS / 32) as usize;
        let cfg = LaunchConfig {
            grid_dim: (tiles.div_ceil(warps_per_cta) as u32, 1, 1),
            block_dim: (PLACE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: runs only when the coded payload fits in 128 + 2n bytes and writes
        // inside its sections; scratch reads stay inside each tile's slots (counts are
        // what the tiles kernel wrote); one warp per tile, warps past the last return.
        unsafe { launch.launch(cfg) }?;
    }
    let codebook_arg = codebook_uint4(codebook);
    let finish = gpu.function(&MODULE, "splitzip_encode_finish")?;
    let mut launch = stream.launch_builder(&finish);
    launch.arg(words).arg(&n64).arg(&cs).arg(&codebook_arg).arg(&mut *out).arg(&mut workspace.words);
    // SAFETY: writes the header and padding of a coded payload of <= 128 + 2n bytes, or
    // the raw form of exactly 128 + 2n bytes; `out` holds at least that.
    unsafe { launch.launch(gpu.grid_stride_config(n / 8 + 1, THREADS)) }?;
    Ok(())
}

/// The encoder's exponent -> code table as the kernel takes it: a 256-byte struct
/// passed by value; an exponent outside the codebook maps to [`ESCAPE_ENTRY`].
#[repr(C)]
#[derive(Clone, Copy)]
struct CodeTableArg([u8; 256]);

// SAFETY: CodeTableArg is 256 plain bytes, the layout of the kernel's SzCodeTable.
unsafe impl cudarc::driver::DeviceRepr for CodeTableArg {}

/// The codebook as the kernels take it: 16 bytes, entry i in byte i.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct CodebookArg([u8; 16]);

// SAFETY: CodebookArg is 16 plain bytes with the size and alignment of CUDA's uint4.
unsafe impl cudarc::driver::DeviceRepr for CodebookArg {}

fn codebook_uint4(codebook: &Codebook) -> CodebookArg {
    CodebookArg(codebook.exponents())
}

/// Host words -> payload bytes through the GPU (uploads, encodes, reads back).
///
/// # Errors
/// As [`encode_device`].
pub fn encode_host(
    gpu: &Arc<GpuContext>,
    words: &[u16],
    codebook: &Codebook,
    chunk_size: u32,
) -> Result<Vec<u8>, GpuError> {
    let stream = gpu.stream();
    let d_words: CudaSlice<u16> =
        if words.is_empty() { stream.alloc_zeros(1)? } else { stream.clone_htod(words)? };
    let mut out: CudaSlice<u8> = stream.alloc_zeros(max_encoded_len(words.len(), chunk_size))?;
    let mut ws = EncodeWorkspace::new(gpu, words.len())?;
    encode_device(gpu, &d_words.slice(..words.len()), codebook, chunk_size, &mut out.as_view_mut(), &mut ws)?;
    let len = ws.encoded_len(gpu)?;
    let mut bytes = stream.clone_dtoh(&out)?;
    bytes.truncate(len);
    Ok(bytes)
}

/// Decodes a device payload whose header (`header`, parsed from its first 128 bytes by
/// [`PayloadHeader::parse`]) the caller has; writes n words into `out` and leaves the
/// body status (0 = valid) in `status[0]`, without synchronising.
///
/// `payload` must be exactly `header.encoded_len()` bytes.
///
/// # Errors
/// [`GpuError::Decode`] for a length that does not match the header,
/// [`GpuError::Buffer`], [`GpuError::UnsupportedChunkSize`], [`GpuError::Cuda`].
pub fn decode_device(
    gpu: &GpuContext,
    payload: &CudaView<'_, u8>,
    header: &PayloadHeader,
    out: &mut CudaViewMut<'_, u16>,
    status: &mut CudaSlice<u32>,
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
    stream.memset_zeros(status)?;
    match header.layout {
        Layout::Raw { words } => {
            let src = payload.slice(words.offset as usize..words.end() as usize);
            // SAFETY: 2n bytes viewed as n u16 words; the source offset (128) keeps the
            // 2-byte alignment of the allocation.
            let src = unsafe { src.transmute::<u16>(n) }
                .ok_or_else(|| GpuError::Buffer { what: "payload", why: "raw section".into() })?;
            stream.memcpy_dtod(&src, &mut out.slice_mut(..n))?;
        }
        Layout::Coded(layout) => {
            check_gpu_limits(n, header.chunk_size)?;
            check_aligned("payload", payload.device_ptr(stream).0)?;
            check_aligned("out", out.device_ptr(stream).0)?;
            let (n64, cs, e, exp_at) =
                (n as u64, header.chunk_size, header.escape_count, layout.escape_exponents.offset);
            let cb = codebook_uint4(&header.codebook);
            let f = gpu.function(&MODULE, "splitzip_decode_tiles")?;
            let tiles = n.div_ceil(TILE_VALUES).max(1) as u32;
            // The body check runs in CTAs after the tiles' (one thread per chunk, at most
            // 8 CTAs per SM, striding), which mostly run where the last wave of tiles
            // leaves SMs idle. At least one: without them the body would go unchecked.
            let check_ctas = gpu.grid_stride_config(layout.chunk_count as usize, THREADS).grid_dim.0;
            debug_assert!(check_ctas >= 1, "grid_stride_config gives at least one CTA");
            let mut launch = stream.launch_builder(&f);
            launch.arg(payload).arg(&n64).arg(&cs).arg(&e).arg(&exp_at).arg(&cb).arg(&mut *out);
            launch.arg(&tiles).arg(&mut *status);
            let cfg = LaunchConfig {
                grid_dim: (tiles + check_ctas, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the header was validated (section offsets and lengths match n, the
            // chunk size and E, and the payload is exactly encoded_len bytes), so every
            // index the kernel derives is in bounds; escape indices are checked against E
            // before use (the check CTAs) or used only when a chunk's offsets are ordered
            // and <= E (the tile CTAs); `out` holds n words; `status` holds one u32.
            unsafe { launch.launch(cfg) }?;
        }
    }
    Ok(())
}

/// Host payload -> host words through the GPU. On a body error the CPU decoder runs on
/// the same bytes so the error is its exact variant.
///
/// # Errors
/// [`GpuError::Decode`] for any invalid payload; [`GpuError::Disagreement`] if the GPU
/// flags a payload the CPU accepts; [`GpuError::Cuda`].
pub fn decode_host(gpu: &Arc<GpuContext>, payload: &[u8]) -> Result<Vec<u16>, GpuError> {
    let header = PayloadHeader::parse(payload)?;
    let stream = gpu.stream();
    let n = header.value_count as usize;
    let d_payload = stream.clone_htod(payload)?;
    let mut out: CudaSlice<u16> = stream.alloc_zeros(n.max(1))?;
    let mut status: CudaSlice<u32> = stream.alloc_zeros(1)?;
    decode_device(gpu, &d_payload.as_view(), &header, &mut out.as_view_mut(), &mut status)?;
    let status = stream.clone_dtoh(&status)?[0];
    if status != 0 {
        crate::decode(payload)?;
        return Err(GpuError::Disagreement { status });
    }
    let mut words = stream.clone_dtoh(&out)?;
    words.truncate(n);
    Ok(words)
}
