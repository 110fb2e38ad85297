//! The GPU encoder: see the module docs of [`crate::gpu`].

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, PushKernelArg};
use kvcodec_gpu::{GpuContext, check_aligned, device_address, launch_config};

use super::{
    CodebookArg, GpuError, PLACE_THREADS, PLACE_TILES_PER_WARP, SUPER_TILES, SplitzipKernel, THREADS,
    TILE_VALUES, WORKSPACE_HEADER_WORDS, check_gpu_limits,
};
use crate::{Codebook, EncodeOptions, max_encoded_len};

/// Workspace words for `tiles` tiles: header, one sum per superblock, one count per tile.
fn workspace_words(tiles: usize) -> usize {
    WORKSPACE_HEADER_WORDS + tiles.div_ceil(SUPER_TILES) + tiles
}

/// Device scratch for [`encode_device`], reusable across calls of up to `capacity` values.
pub struct EncodeWorkspace {
    /// `[encoded length, total escapes, Adler-32 S, Adler-32 W, sum per superblock...,
    /// escapes per tile...]`.
    words: CudaSlice<u64>,
    /// Each tile's escape positions before they move to their section (worst case: every
    /// value of the tile).
    scratch_positions: CudaSlice<u16>,
    /// Each tile's escape exponents, likewise.
    scratch_exponents: CudaSlice<u8>,
    capacity: usize,
}

impl std::fmt::Debug for EncodeWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodeWorkspace").field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

impl EncodeWorkspace {
    /// Allocates scratch for payloads of up to `capacity` values: about `3 * capacity`
    /// bytes (the worst case, every value escaped) plus 8 bytes per 8192 values.
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`] when allocation fails.
    pub fn new(gpu: &GpuContext, capacity: usize) -> Result<Self, GpuError> {
        let tiles = capacity.div_ceil(TILE_VALUES);
        let slots = tiles * TILE_VALUES;
        let workspace = EncodeWorkspace {
            words: gpu.zeros(workspace_words(tiles))?,
            scratch_positions: gpu.zeros(slots)?,
            scratch_exponents: gpu.zeros(slots)?,
            capacity,
        };
        gpu.synchronize()?;
        Ok(workspace)
    }

    /// The length in bytes of the payload the last [`encode_device`] wrote (synchronises
    /// with the context's stream).
    ///
    /// # Errors
    /// [`kvcodec_gpu::Error::Cuda`].
    pub fn encoded_len(&self, gpu: &GpuContext) -> Result<usize, GpuError> {
        Ok(gpu.download(&self.words, 1)?[0] as usize)
    }
}

/// Encodes `words` (n device BF16 words, 16-byte aligned) into `out` (at least
/// [`max_encoded_len`]`(n, chunk_size)` device bytes, 16-byte aligned) with `options`
/// (chunk size, checksum) on the context's stream, without synchronising; the payload
/// is byte-identical to [`crate::encode_with`]'s.
/// Its length is read afterwards with [`EncodeWorkspace::encoded_len`]. Keep `words`,
/// `out` and the workspace alive until the stream has passed the call.
///
/// # Errors
/// [`GpuError::Codec`] for a chunk size the CPU encoder rejects too;
/// [`kvcodec_gpu::Error::Unsupported`] past the GPU limits (module docs);
/// [`kvcodec_gpu::Error::Buffer`] for a short output or workspace or a misaligned buffer;
/// [`kvcodec_gpu::Error::Cuda`].
pub fn encode_device(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    codebook: &Codebook,
    options: &EncodeOptions,
    out: &mut CudaViewMut<'_, u8>,
    workspace: &mut EncodeWorkspace,
) -> Result<(), GpuError> {
    let n = words.len();
    let chunk_size = options.chunk_size;
    check_gpu_limits(n, chunk_size)?;
    kvcodec_gpu::check_len("out", out.len(), max_encoded_len(n, chunk_size), "bytes")?;
    kvcodec_gpu::check_len("workspace", workspace.capacity, n, "values")?;
    let stream = gpu.stream();
    check_aligned("words", device_address(words, stream))?;
    check_aligned("out", device_address(out, stream))?;
    let tiles = n.div_ceil(TILE_VALUES);
    stream.memset_zeros(&mut workspace.words.slice_mut(..workspace_words(tiles)))?;
    // The 256-byte exponent -> code table travels as a kernel parameter: no copy, so
    // the whole encode stays capturable in a CUDA graph.
    let table = CodeTableArg(codebook.code_table());
    let (n64, cs) = (n as u64, chunk_size);
    if tiles > 0 {
        let tiles_kernel =
            if options.checksum { SplitzipKernel::EncodeTilesChecksum } else { SplitzipKernel::EncodeTiles };
        let f = gpu.function(tiles_kernel)?;
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
        // SAFETY: the signature matches splitzip_encode_tiles (and its _checksum twin,
        // which also adds to workspace words 2 and 3); `words` holds n values;
        // the kernel writes only below the escape positions section, which it checks
        // lies within 128 + 2n <= out.len() bytes; each tile writes at most TILE_VALUES
        // scratch slots of its own, its count and an atomic add to its superblock sum
        // (all in the workspace of workspace_words(tiles) words, zeroed above).
        unsafe { launch.launch(launch_config(tiles as u32, THREADS, 0)) }?;
    }
    let codebook_arg = CodebookArg::new(codebook);
    let checksum = options.checksum as u32;
    let f = gpu.function(SplitzipKernel::EncodePlace)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(words).arg(&n64).arg(&cs).arg(&codebook_arg).arg(&mut *out);
    launch.arg(&workspace.scratch_positions).arg(&workspace.scratch_exponents).arg(&mut workspace.words);
    launch.arg(&checksum);
    let tiles_per_cta = (PLACE_THREADS / 32) as usize * PLACE_TILES_PER_WARP;
    // SAFETY: the signature matches splitzip_encode_place. One warp per
    // PLACE_TILES_PER_WARP tiles (one for n = 0), warps past the last tile return. A
    // coded payload (<= 128 + 2n bytes) gets its header, padding, offsets and escapes
    // inside its sections; otherwise the raw form of exactly 128 + 2n bytes (`words`
    // holds n values); `out` holds at least that. Scratch reads stay inside each tile's
    // slots (counts are what the tiles kernel wrote, zero where it wrote nothing);
    // workspace sums as zeroed above and filled by the tiles kernel.
    unsafe { launch.launch(launch_config(tiles.max(1).div_ceil(tiles_per_cta) as u32, PLACE_THREADS, 0)) }?;
    Ok(())
}

/// The encoder's exponent -> code table as the kernel takes it: a 256-byte struct
/// passed by value; an exponent outside the codebook maps to [`crate::format::NO_CODE`].
#[repr(C)]
#[derive(Clone, Copy)]
struct CodeTableArg([u8; 256]);

// SAFETY: CodeTableArg is 256 plain bytes, the layout of the kernel's SzCodeTable.
unsafe impl cudarc::driver::DeviceRepr for CodeTableArg {}

/// Host words -> payload bytes through the GPU (uploads, encodes, reads back;
/// synchronises).
///
/// # Errors
/// As [`encode_device`].
pub fn encode_to_vec(
    gpu: &GpuContext,
    words: &[u16],
    codebook: &Codebook,
    options: &EncodeOptions,
) -> Result<Vec<u8>, GpuError> {
    let n = words.len();
    let d_words = gpu.upload(words)?;
    let mut out: CudaSlice<u8> = gpu.zeros(max_encoded_len(n, options.chunk_size))?;
    let mut ws = EncodeWorkspace::new(gpu, n)?;
    encode_device(gpu, &d_words.slice(..n), codebook, options, &mut out.as_view_mut(), &mut ws)?;
    let len = ws.encoded_len(gpu)?;
    Ok(gpu.download(&out, len)?)
}
