//! The SplitZip GPU encoder and decoder (PTX from `kernels/splitzip/splitzip.cu`),
//! byte-identical to the CPU reference in both directions.
//!
//! **Encode** ([`encode_device`]) is a memset and two kernels on the context's stream,
//! with no host synchronisation, so it can be captured in a CUDA graph:
//! `splitzip_encode_tiles` (one CTA per tile of [`TILE_VALUES`] values) writes codes,
//! sign+mantissa bytes, tile-relative chunk escape offsets, the tile's escape count (also
//! summed per superblock of [`SUPER_TILES`] tiles) and its escapes to scratch;
//! `splitzip_encode_place` (a warp per [`PLACE_TILES_PER_WARP`] tiles) sums the counts,
//! makes the offsets absolute and moves the escapes to their sections (whose place
//! depends on the total), and its first warp writes the header and padding; or, when
//! coded would be larger, each warp rewrites its tiles raw. The encoded length stays on
//! the device until [`EncodeWorkspace::encoded_len`] reads it.
//!
//! **Decode** ([`decode_device`]) takes a header validated on the host; one kernel
//! rebuilds every word once, with escapes patched in registers, and checks the body
//! (spec §5) in the same launch; for a payload with a checksum, a variant of the
//! kernel also adds the Adler-32 sums of the words it writes. [`DecodeChecks::verify`]
//! reads the verdict: a nonzero status or a checksum mismatch makes it run the CPU
//! decoder to return the exact [`DecodeError`].
//!
//! **Checksum** (the encoder's option, spec §2): `splitzip_encode_tiles_checksum` adds
//! each tile's Adler-32 sums of its input to the workspace as it codes the tile, and the
//! placement kernel writes the checksum into the header; every header gets its CRC-32C
//! there too.
//!
//! GPU limits (the CPU path has none of them): chunk sizes up to [`TILE_VALUES`] values,
//! at most `u32::MAX` values per payload, device buffers 16-byte aligned.

mod decode;
mod encode;

use kvcodec_gpu::{Kernel, Module, StatusCodes, StatusEncoding, StatusValue};

pub use decode::{DecodeChecks, decode_device, decode_to_vec};
pub use encode::{EncodeWorkspace, encode_device, encode_to_vec};

use crate::{DecodeError, EncodeError};

/// An error of the SplitZip GPU path: the CPU's [`crate::Error`], a GPU error, or a
/// disagreement with the CPU decoder.
pub type GpuError = kvcodec_gpu::GpuError<crate::Error>;

impl From<crate::Error> for GpuError {
    fn from(e: crate::Error) -> Self {
        GpuError::Codec(e)
    }
}

impl From<DecodeError> for GpuError {
    fn from(e: DecodeError) -> Self {
        GpuError::Codec(e.into())
    }
}

impl From<EncodeError> for GpuError {
    fn from(e: EncodeError) -> Self {
        GpuError::Codec(e.into())
    }
}

/// The SplitZip PTX module.
pub static MODULE: Module = Module::new("splitzip", include_str!("../../ptx/splitzip.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// The kernels of [`MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitzipKernel {
    /// Codes, sign+mantissa and escapes of one tile per CTA.
    EncodeTiles,
    /// [`SplitzipKernel::EncodeTiles`] that also adds the input's Adler-32 sums to the
    /// workspace (the checksum option).
    EncodeTilesChecksum,
    /// Escape offsets made absolute and escapes moved to their sections, with the
    /// header and padding; or the raw form.
    EncodePlace,
    /// Values of one tile per CTA, then the body check; each group finds its escapes by
    /// a search of its chunk's list (sparse escapes).
    DecodeTiles,
    /// [`SplitzipKernel::DecodeTiles`] that also adds the Adler-32 sums of the values it
    /// writes (a payload with a checksum).
    DecodeTilesChecksum,
    /// Values of one tile per CTA, each tile's escapes checked and laid out in shared
    /// memory first, then one CTA checking the padding (payloads with an escape per 4096
    /// values or more).
    DecodeTilesDense,
    /// [`SplitzipKernel::DecodeTilesDense`] with the checksum's sums.
    DecodeTilesDenseChecksum,
}

impl Kernel for SplitzipKernel {
    fn module(self) -> &'static Module {
        &MODULE
    }
    fn symbol(self) -> &'static str {
        match self {
            SplitzipKernel::EncodeTiles => "splitzip_encode_tiles",
            SplitzipKernel::EncodeTilesChecksum => "splitzip_encode_tiles_checksum",
            SplitzipKernel::EncodePlace => "splitzip_encode_place",
            SplitzipKernel::DecodeTiles => "splitzip_decode_tiles",
            SplitzipKernel::DecodeTilesChecksum => "splitzip_decode_tiles_checksum",
            SplitzipKernel::DecodeTilesDense => "splitzip_decode_tiles_dense",
            SplitzipKernel::DecodeTilesDenseChecksum => "splitzip_decode_tiles_dense_checksum",
        }
    }
}

/// Values per GPU tile, one CTA each; also the largest chunk size the GPU path
/// supports, since a tile holds whole chunks.
pub const TILE_VALUES: usize = 8192;
/// Threads per CTA of the tile kernels.
pub const THREADS: u32 = 256;
/// Values each thread of a tile kernel owns at once (16 bytes of words).
pub const GROUP_VALUES: usize = 8;
/// Tiles per superblock: the encoder's workspace keeps one escape sum per superblock,
/// so the placement scan reads a sum per 256 tiles, not a count per tile.
pub const SUPER_TILES: usize = 256;
/// Threads per CTA of the placement kernel.
pub const PLACE_THREADS: u32 = 256;
/// Consecutive tiles per warp of the placement kernel, which share the warp's sums and
/// layout arithmetic.
pub const PLACE_TILES_PER_WARP: usize = 2;
/// Workspace words before the superblock sums: the encoded length, the total escape
/// count, then the two Adler-32 sums of the input (spec §2's checksum).
pub const WORKSPACE_HEADER_WORDS: usize = 4;

/// What `splitzip_decode_tiles` leaves in its status word: the first problem's code
/// (spec §5's body checks; the header is checked on the host). `CHECKSUM` is the host's
/// verdict on the sums the checksum kernel leaves, reported the same way.
pub const DECODE_STATUS: StatusCodes = StatusCodes {
    encoding: StatusEncoding::FirstCode,
    values: &[
        StatusValue { value: 1, name: "BAD_OFFSETS", meaning: "escape offsets out of order or out of range" },
        StatusValue {
            value: 2,
            name: "BAD_POSITION",
            meaning: "an escape position outside its chunk or unsorted",
        },
        StatusValue {
            value: 3,
            name: "BAD_ESCAPED_EXPONENT",
            meaning: "an escaped exponent is in the codebook",
        },
        StatusValue { value: 4, name: "BAD_ESCAPE_CODE", meaning: "an escaped value's code is not 0" },
        StatusValue { value: 5, name: "BAD_PADDING", meaning: "a padding byte is not zero" },
        StatusValue {
            value: 6,
            name: "CHECKSUM",
            meaning: "the decoded values' Adler-32 differs from the header's checksum (set by the host)",
        },
    ],
};

/// The GPU limits on top of the CPU's checks: a valid chunk size of at most
/// [`TILE_VALUES`], at most `u32::MAX` values.
fn check_gpu_limits(values: usize, chunk_size: u32) -> Result<(), GpuError> {
    if !crate::format::chunk_size_is_valid(chunk_size) {
        return Err(EncodeError::ChunkSizeInvalid { chunk_size }.into());
    }
    if chunk_size as usize > TILE_VALUES {
        return Err(kvcodec_gpu::Error::Unsupported {
            what: "chunk_size",
            why: format!("{chunk_size} values; the GPU kernels take at most {TILE_VALUES}"),
        }
        .into());
    }
    if values > u32::MAX as usize {
        return Err(kvcodec_gpu::Error::Unsupported {
            what: "values",
            why: format!("{values}; the GPU kernels take at most u32::MAX per payload"),
        }
        .into());
    }
    Ok(())
}

/// The codebook as the kernels take it: 16 bytes, entry i in byte i (CUDA's `uint4`).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct CodebookArg([u8; 16]);

// SAFETY: CodebookArg is 16 plain bytes with the size and alignment of CUDA's uint4.
unsafe impl cudarc::driver::DeviceRepr for CodebookArg {}

impl CodebookArg {
    fn new(codebook: &crate::Codebook) -> Self {
        CodebookArg(codebook.exponents())
    }
}
