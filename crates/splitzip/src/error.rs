//! Typed errors; every variant carries the numbers that went wrong.

use thiserror::Error;

/// Any SplitZip error: what [`crate::SplitzipCodec`] and the GPU path
/// ([`crate::gpu::GpuError`]) report. The free functions return the specific types.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The encoder's arguments are invalid.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The payload is invalid, or does not hold the values the caller expects.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A cache shape with a zero dimension, or whose value count overflows `usize`
    /// ([`crate::SplitzipCodec`]).
    #[error("invalid cache shape {layers} layers x {kv_heads} heads x {head_dim} head_dim x {tokens} tokens")]
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
}

/// Errors of [`crate::Codebook`] construction, calibration and JSON I/O.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CodebookError {
    /// An exponent appears twice among the 16 entries.
    #[error("codebook holds exponent {exponent:#04x} twice")]
    Duplicate {
        /// The repeated exponent.
        exponent: u8,
    },
    /// A codebook's JSON lists another number of exponents than 16.
    #[error("codebook lists {got} exponents, expected 16 (one per 4-bit code)")]
    Length {
        /// Exponents listed.
        got: usize,
    },
    /// Calibration saw no value at all.
    #[error("cannot calibrate a codebook on zero values")]
    EmptyCalibration,
    /// The JSON form could not be parsed (malformed, wrong entry count, or a duplicate).
    #[error("codebook JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A codec's chunk size is not a power of two in `32..=32768` values.
    #[error("chunk size {chunk_size} values: must be a power of two in 32..=32768")]
    ChunkSize {
        /// The chunk size given.
        chunk_size: u32,
    },
    /// Reading or writing a codebook file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Errors of [`crate::encode_into`] and friends.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The chunk size is not a power of two in `32..=32768` values (spec §3).
    #[error("chunk size {chunk_size} values: must be a power of two in 32..=32768")]
    ChunkSizeInvalid {
        /// The chunk size given, in values.
        chunk_size: u32,
    },
    /// A cache given as words ([`crate::SplitzipCodec`]) holds another number of words
    /// than its shape, `2 L T H D`.
    #[error("{got} words given, the cache shape has {expected}")]
    WordCountMismatch {
        /// Words given.
        got: usize,
        /// `2 L T H D`.
        expected: usize,
    },
    /// The output buffer is shorter than this payload; [`crate::max_encoded_len`] bytes
    /// always suffice.
    #[error("output buffer holds {got} bytes, this payload needs {needed}")]
    OutputTooSmall {
        /// Bytes the payload needs.
        needed: usize,
        /// Bytes the buffer holds.
        got: usize,
    },
}

/// Why a payload was rejected by [`crate::PayloadHeader::parse`] or
/// [`crate::decode_into`]. The checks run in the order of spec §5; the first failure is
/// reported, so every hostile input maps to exactly one variant.
///
/// Offsets are byte offsets from the payload start; chunk indices count from 0;
/// positions are value positions inside their chunk.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload is shorter than the header or than the length its header declares.
    #[error("payload truncated: {got} bytes, needs {needed}")]
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes given.
        got: u64,
    },
    /// The first four bytes are not `b"KVSZ"`.
    #[error("bad magic {found:02x?}, expected \"KVSZ\"")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A format version this crate does not read.
    #[error("unsupported format version {version} (this crate reads versions 1 and 2)")]
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// A flag bit the payload's version does not define is set (version 1: bit 0, raw;
    /// version 2: bits 0 and 1, checksum).
    #[error("unknown flag bits in {flags:#06x}")]
    UnknownFlags {
        /// The whole flags field.
        flags: u16,
    },
    /// A reserved header byte is not zero.
    #[error("reserved header byte {offset} is not zero")]
    ReservedNotZero {
        /// Its offset.
        offset: u64,
    },
    /// The chunk size is not a power of two in `32..=32768` values.
    #[error("chunk size {chunk_size} values: must be a power of two in 32..=32768")]
    ChunkSizeInvalid {
        /// The stored chunk size.
        chunk_size: u32,
    },
    /// The header's codebook holds an exponent twice (codes would be ambiguous to an
    /// encoder, so the payload cannot be canonical).
    #[error("codebook holds exponent {exponent:#04x} twice")]
    CodebookDuplicate {
        /// The first exponent found a second time, scanning codes 0..16.
        exponent: u8,
    },
    /// n is so large that the payload length overflows `u64` or `usize`.
    #[error("value count {value_count} overflows the payload length")]
    LengthOverflow {
        /// The stored value count.
        value_count: u64,
    },
    /// The chunk count is not `ceil(n / chunk_size)` (coded) or 0 (raw).
    #[error("chunk count {stored}, expected {expected}")]
    ChunkCountMismatch {
        /// The stored chunk count.
        stored: u32,
        /// What n and the chunk size imply.
        expected: u64,
    },
    /// The escape count exceeds `min(n, u32::MAX)` (coded) or is not 0 (raw).
    #[error("escape count {escapes} exceeds {max}")]
    EscapeCountOutOfRange {
        /// The stored escape count E.
        escapes: u64,
        /// The largest allowed.
        max: u64,
    },
    /// A section offset field is not the one n, the chunk size and E imply (spec §3),
    /// or not 0 in a raw payload.
    #[error("{section} section offset {stored}, expected {expected}")]
    SectionOffsetMismatch {
        /// The section: `codes`, `sign_mantissa`, `escape_offsets`, `escape_positions`
        /// or `escape_exponents`.
        section: &'static str,
        /// The stored offset.
        stored: u64,
        /// The implied offset.
        expected: u64,
    },
    /// The header's encoded length field is not the one the layout implies.
    #[error("encoded length field {stored}, layout implies {expected}")]
    EncodedLengthMismatch {
        /// The stored length in bytes.
        stored: u64,
        /// The implied length in bytes.
        expected: u64,
    },
    /// A coded payload longer than the raw form of the same values; the encoder stores
    /// such input raw, so this encoding is not canonical.
    #[error("coded payload of {coded} bytes is longer than the raw form's {raw}")]
    CodedLargerThanRaw {
        /// The coded length in bytes.
        coded: u64,
        /// The raw length in bytes.
        raw: u64,
    },
    /// Bytes follow the declared end of the payload.
    #[error("{extra} bytes after the end of the payload")]
    TrailingBytes {
        /// How many.
        extra: u64,
    },
    /// [`crate::decode_into`]'s output holds fewer values than the payload.
    #[error("output holds {got} values, the payload has {needed}")]
    OutputTooSmall {
        /// Values in the payload (n).
        needed: u64,
        /// Values the output holds.
        got: u64,
    },
    /// A padding byte between sections, or the unused high nibble of the last code byte
    /// when n is odd, is not zero.
    #[error("padding byte {offset} is not zero")]
    PaddingNotZero {
        /// Its offset.
        offset: u64,
    },
    /// Escape offsets entry 0 is not 0.
    #[error("escape offsets start at {first}, expected 0")]
    EscapeOffsetsStartNotZero {
        /// The stored entry 0.
        first: u32,
    },
    /// Escape offsets decrease across a chunk.
    #[error("escape offsets decrease across chunk {chunk}: {start} then {end}")]
    EscapeOffsetsNotMonotonic {
        /// The chunk whose entries `chunk` and `chunk + 1` decrease.
        chunk: u32,
        /// Entry `chunk`.
        start: u32,
        /// Entry `chunk + 1`.
        end: u32,
    },
    /// The last escape offsets entry is not the header's escape count.
    #[error("escape offsets end at {last}, header escape count is {escape_count}")]
    EscapeOffsetsEndMismatch {
        /// The stored last entry.
        last: u32,
        /// The header's E.
        escape_count: u64,
    },
    /// An escape position is not inside its chunk.
    #[error("chunk {chunk}: escape position {position} >= chunk length {chunk_len}")]
    EscapePositionOutOfRange {
        /// The chunk.
        chunk: u32,
        /// The stored position.
        position: u16,
        /// Values in the chunk.
        chunk_len: u32,
    },
    /// Escape positions of a chunk are not strictly increasing.
    #[error("chunk {chunk}: escape position {position} follows {previous}")]
    EscapePositionsUnsorted {
        /// The chunk.
        chunk: u32,
        /// The position before it.
        previous: u16,
        /// The position that is not larger.
        position: u16,
    },
    /// An escaped exponent is in the codebook (it should have been coded).
    #[error("chunk {chunk} position {position}: escaped exponent {exponent:#04x} is in the codebook")]
    EscapedExponentInCodebook {
        /// The chunk.
        chunk: u32,
        /// The position in the chunk.
        position: u16,
        /// The exponent.
        exponent: u8,
    },
    /// The 4-bit code of an escaped value is not 0.
    #[error("chunk {chunk} position {position}: escaped value has code {code}, expected 0")]
    EscapeCodeNotZero {
        /// The chunk.
        chunk: u32,
        /// The position in the chunk.
        position: u16,
        /// The stored code.
        code: u8,
    },
    /// The header's CRC-32C (version 2) does not match its other 124 bytes: the header
    /// was corrupted, though every field on its own is valid.
    #[error("header checksum {stored:#010x}, the header's bytes give {computed:#010x}")]
    HeaderChecksumMismatch {
        /// The stored CRC-32C.
        stored: u32,
        /// The CRC-32C of the header as received.
        computed: u32,
    },
    /// The decoded values' Adler-32 differs from the header's checksum (flag bit 1): the
    /// body was corrupted, or the header's checksum. The values have been written to the
    /// output (they are what the payload holds); every other error writes nothing.
    #[error("checksum {stored:#010x}, the decoded values give {computed:#010x}")]
    ChecksumMismatch {
        /// The header's checksum.
        stored: u32,
        /// The Adler-32 of the decoded values.
        computed: u32,
    },
    /// A cache's payload holds another number of values than the caller's cache shape
    /// has per kind (`L T H D`) ([`crate::SplitzipCodec`], spec §9).
    #[error("payload holds {found} values, the cache shape has {expected} per kind")]
    CacheShapeMismatch {
        /// `L T H D` of the caller's shape.
        expected: u64,
        /// The payload's n.
        found: u64,
    },
}
