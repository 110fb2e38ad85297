//! The crate's one error type. Every variant carries the numbers that went wrong; the
//! decoder variants follow the accept/reject tables of `docs/formats/zipfusion.md` (§6
//! for a page, §7.4 for a cache), whose checks run in order, so every hostile input maps
//! to exactly one variant.

use std::fmt;

use bf16_field::KvKind;

/// Errors of the ZipFusion encoders and decoders.
///
/// Offsets are in bytes from the start of the page (page variants) or of the container
/// (container variants); a page inside a container reports its errors wrapped in
/// [`Error::InPage`]. `head`, `kind` and `block` locate a page's metadata entry and the
/// block within it (block `j` holds channels `32 j..32 j + 32` of that head).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ----- shapes and arguments (encoders and decoders) -------------------------------
    /// A dimension is zero (a page is a one-layer cache of 16 tokens).
    InvalidShape {
        /// L.
        layers: usize,
        /// H.
        kv_heads: usize,
        /// D.
        head_dim: usize,
        /// T.
        tokens: usize,
    },
    /// head_dim is not a positive multiple of 32, the channels of a block (spec §2).
    HeadDimUnsupported {
        /// D.
        head_dim: usize,
    },
    /// A page of this shape could outgrow its `u32` offsets, or the cache's size
    /// overflows `usize` or a header field (spec §5.2, §7.1).
    ShapeTooLarge {
        /// L.
        layers: usize,
        /// H.
        kv_heads: usize,
        /// D.
        head_dim: usize,
        /// T.
        tokens: usize,
    },
    /// An encoder got another number of words than its shape holds.
    WordCountMismatch {
        /// Words given.
        got: usize,
        /// Words the shape holds: `16 H D` per kind of a page, `2 L T H D` for a cache.
        expected: usize,
    },
    /// An output buffer is too short: bytes for an encoder
    /// ([`crate::PageShape::max_page_len`] or [`crate::max_encoded_len`] always suffice),
    /// words for a decoder.
    OutputTooSmall {
        /// Bytes or words needed.
        needed: usize,
        /// Bytes or words the buffer holds.
        got: usize,
    },

    // ----- a page (spec §6) ----------------------------------------------------------
    /// The input ends before what its metadata or header says it holds.
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// A metadata byte gives `b/2 > 120` (0x79..=0x7f, or 0xf9..=0xfe in a zero-aware
    /// cache), so `b/2 + d` could exceed 127 and carry into the sign bit.
    HalfBaseTooLarge {
        /// The entry's head.
        head: usize,
        /// The entry's kind.
        kind: KvKind,
        /// The block within the entry.
        block: usize,
        /// The metadata byte.
        byte: u8,
    },
    /// A metadata byte marks a zero-aware block (0x80..=0xfe) in a base-variant cache.
    ZeroAwareBlockInBaseVariant {
        /// The entry's head.
        head: usize,
        /// The entry's kind.
        kind: KvKind,
        /// The block within the entry.
        block: usize,
        /// The metadata byte.
        byte: u8,
    },
    /// A padding byte of a metadata entry is not zero.
    PaddingNotZero {
        /// Its offset.
        offset: usize,
        /// Its value.
        value: u8,
    },
    /// An entry's first-block offset points past the bytes given.
    OffsetPastPage {
        /// The entry's head.
        head: usize,
        /// The entry's kind.
        kind: KvKind,
        /// The stored offset.
        offset: usize,
        /// Bytes given.
        len: usize,
    },
    /// An entry's first-block offset is not where the metadata or the blocks before it
    /// end, as their metadata bytes size them (768 bytes coded, 1024 raw): for example a
    /// raw flag beside a coded block's length.
    OffsetMismatch {
        /// The entry's head.
        head: usize,
        /// The entry's kind.
        kind: KvKind,
        /// The stored offset.
        stored: usize,
        /// Where the metadata or the previous entry's blocks end.
        expected: usize,
    },
    /// Bytes follow the last block of a page, or the last tail of a cache.
    TrailingBytes {
        /// How many.
        extra: usize,
    },

    // ----- a cache container (spec §7.4) ---------------------------------------------
    /// The first four bytes are not `KVZF`.
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A format version this crate does not read.
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// The header's variant byte is neither 0 (base) nor 1 (zero-aware).
    UnknownVariant {
        /// The byte found.
        variant: u8,
    },
    /// A flag bit other than bit 0 (checksum) is set.
    UnknownFlags {
        /// The whole flags byte.
        flags: u8,
    },
    /// A reserved header byte, or the checksum field without the checksum flag, is not
    /// zero.
    ReservedNotZero {
        /// Its offset.
        offset: usize,
        /// Its value.
        value: u8,
    },
    /// The header's CRC-32C does not match its other bytes: the header was corrupted,
    /// though every field on its own is valid.
    HeaderChecksumMismatch {
        /// The stored CRC-32C.
        stored: u32,
        /// The CRC-32C of the header as received.
        computed: u32,
    },
    /// The container holds a cache of another shape than the caller expects
    /// ([`crate::ZipfusionCodec`]).
    CacheShapeMismatch {
        /// The caller's (L, H, D, T).
        expected: [usize; 4],
        /// The container's.
        found: [usize; 4],
    },
    /// A page of the container is invalid.
    InPage {
        /// Its layer.
        layer: usize,
        /// Its index in the layer: tokens `16 page..16 page + 16`.
        page: usize,
        /// Why, with offsets from the page's start.
        source: Box<Error>,
    },
    /// The decoded values' Adler-32 differs from the header's checksum: the body or the
    /// checksum was corrupted. The values have been written to the output (they are what
    /// the container holds); every other error writes nothing.
    ChecksumMismatch {
        /// The header's checksum.
        stored: u32,
        /// The Adler-32 of the decoded values.
        computed: u32,
    },
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// "K" or "V".
fn kind_name(kind: &KvKind) -> &'static str {
    match kind {
        KvKind::K => "K",
        KvKind::V => "V",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidShape { layers, kv_heads, head_dim, tokens } => write!(
                f,
                "invalid shape {layers} layers x {kv_heads} heads x {head_dim} head_dim x {tokens} tokens: a dimension is zero"
            ),
            Error::HeadDimUnsupported { head_dim } => {
                write!(f, "head_dim {head_dim} is not a positive multiple of 32 (the channels of a block)")
            }
            Error::ShapeTooLarge { layers, kv_heads, head_dim, tokens } => write!(
                f,
                "shape {layers} layers x {kv_heads} heads x {head_dim} head_dim x {tokens} tokens exceeds the format's fields"
            ),
            Error::WordCountMismatch { got, expected } => {
                write!(f, "{got} words given, the shape holds {expected}")
            }
            Error::OutputTooSmall { needed, got } => {
                write!(f, "output holds {got} elements, {needed} needed")
            }
            Error::Truncated { needed, got } => write!(f, "input truncated: {got} bytes, needs {needed}"),
            Error::HalfBaseTooLarge { head, kind, block, byte } => write!(
                f,
                "head {head} {} block {block}: metadata byte {byte:#04x} gives b/2 = {} > 120, so b/2 + d could exceed 127",
                kind_name(kind),
                byte & 0x7f
            ),
            Error::ZeroAwareBlockInBaseVariant { head, kind, block, byte } => write!(
                f,
                "head {head} {} block {block}: metadata byte {byte:#04x} marks a zero-aware block in a base-variant cache",
                kind_name(kind)
            ),
            Error::PaddingNotZero { offset, value } => {
                write!(f, "metadata padding byte {offset} is {value:#04x}, not zero")
            }
            Error::OffsetPastPage { head, kind, offset, len } => write!(
                f,
                "head {head} {}: first-block offset {offset} is past the {len} bytes given",
                kind_name(kind)
            ),
            Error::OffsetMismatch { head, kind, stored, expected } => write!(
                f,
                "head {head} {}: first-block offset {stored}, but the metadata and the blocks before it end at {expected}",
                kind_name(kind)
            ),
            Error::TrailingBytes { extra } => write!(f, "{extra} bytes after the end"),
            Error::BadMagic { found } => write!(f, "bad magic {found:02x?}, expected \"KVZF\""),
            Error::UnsupportedVersion { version } => {
                write!(f, "unsupported format version {version} (this crate reads version 1)")
            }
            Error::UnknownVariant { variant } => {
                write!(f, "unknown variant {variant} (0 = base, 1 = zero-aware)")
            }
            Error::UnknownFlags { flags } => write!(f, "unknown flag bits in {flags:#04x}"),
            Error::ReservedNotZero { offset, value } => {
                write!(f, "reserved header byte {offset} is {value:#04x}, not zero")
            }
            Error::HeaderChecksumMismatch { stored, computed } => {
                write!(f, "header checksum {stored:#010x}, the header's bytes give {computed:#010x}")
            }
            Error::CacheShapeMismatch { expected, found } => {
                write!(f, "container holds a cache of shape {found:?} (L, H, D, T), expected {expected:?}")
            }
            Error::InPage { layer, page, source } => write!(f, "layer {layer} page {page}: {source}"),
            Error::ChecksumMismatch { stored, computed } => {
                write!(f, "checksum {stored:#010x}, the decoded values give {computed:#010x}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InPage { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

bf16_field::impl_from_header_fault!(Error);
