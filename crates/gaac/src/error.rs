//! The crate's one error type. Every variant carries the numbers that went wrong; the
//! decoder variants follow the accept/reject table of `docs/formats/gaac.md` §7, whose
//! checks run in order, so every hostile input maps to exactly one variant.

use bf16_field::KvKind;
use thiserror::Error;

/// Errors of the GAAC calibration, encoders and decoders.
///
/// Offsets are in bytes from the start of the block (block variants) or of the container
/// (container variants); a block inside a container reports its errors wrapped in
/// [`Error::InBlock`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ----- shapes and arguments (encoders and decoders) -------------------------------
    /// A dimension is zero.
    #[error(
        "invalid shape {layers} layers x {kv_heads} heads x {head_dim} head_dim x {tokens} tokens: a dimension is zero"
    )]
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
    /// head_dim is not a positive multiple of 64 (spec §3.2), or exceeds 65,536.
    #[error("head_dim {head_dim} is not a positive multiple of 64 up to 65536 (a slab of the 3-bit plane)")]
    HeadDimUnsupported {
        /// D.
        head_dim: usize,
    },
    /// L, H or D exceed their `u32` header fields, or the container's length overflows
    /// `usize` (spec §5.1, §5.2).
    #[error(
        "shape {layers} layers x {kv_heads} heads x {head_dim} head_dim x {tokens} tokens exceeds the format's fields"
    )]
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
    #[error("{got} words given, the shape holds {expected}")]
    WordCountMismatch {
        /// Words given.
        got: usize,
        /// Words the shape holds: `16 D` for a block, `2 L T H D` for a cache.
        expected: usize,
    },
    /// An output buffer is too short: words for a decoder.
    #[error("output holds {got} elements, {needed} needed")]
    OutputTooSmall {
        /// Elements needed.
        needed: usize,
        /// Elements the buffer holds.
        got: usize,
    },
    /// A slot capacity is not a multiple of 16 between the planes' length and the longest
    /// coded block of the head_dim (spec §4).
    #[error("slot capacity {capacity} is not a multiple of 16 in {min}..={max} (head_dim {head_dim})")]
    SlotCapacityInvalid {
        /// The capacity in bytes.
        capacity: usize,
        /// The smallest valid capacity: a block of 3-bit groups only.
        min: usize,
        /// The largest valid capacity: a block of raw groups only.
        max: usize,
        /// D.
        head_dim: usize,
    },
    /// A cache may not calibrate on zero tokens.
    #[error("self-calibration needs at least one token")]
    ZeroCalibrationTokens,

    // ----- bases (spec §2.1, §6) -----------------------------------------------------
    /// Bases made for another shape than the cache's: `(L, H, D)` differ.
    #[error("bases for {found:?} (L, H, D), the cache is {expected:?}")]
    BasesShapeMismatch {
        /// The cache's (L, H, D).
        expected: [usize; 3],
        /// The bases'.
        found: [usize; 3],
    },
    /// A list in a bases file or argument has the wrong number of entries.
    #[error("bases: {what} has {got} entries, expected {expected}")]
    BasesCountMismatch {
        /// Which list (`"k"`, `"k[3]"`, `"v[0][1]"`).
        what: String,
        /// Entries found.
        got: usize,
        /// Entries the shape needs.
        expected: usize,
    },
    /// A base exceeds 248, so `b + 7` would leave the exponent's 8 bits.
    #[error("base {base} of layer {layer} {kind:?} head {head} channel {channel} exceeds 248")]
    BaseOutOfRange {
        /// Layer.
        layer: usize,
        /// K or V.
        kind: KvKind,
        /// KV head.
        head: usize,
        /// Channel.
        channel: usize,
        /// The base.
        base: u8,
    },
    /// A bases file is not the JSON of spec §6.
    #[error("bases JSON: {0}")]
    BasesJson(String),
    /// A bases file names another codec or version.
    #[error("bases JSON: codec {codec:?} version {version}, expected \"gaac\" version 1")]
    BasesNotGaac {
        /// The file's codec field.
        codec: String,
        /// The file's version field.
        version: u32,
    },
    /// A bases file could not be read or written.
    #[error("bases file {path}: {message}")]
    BasesIo {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },

    // ----- a block (spec §7.2) -------------------------------------------------------
    /// The input ends before what its header, statuses or tags say it holds.
    #[error("input truncated: {got} bytes, needs {needed}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// A group's tag is 3, the value the format rejects.
    #[error("group {group} (token {}, channels {}..{}) has tag 3", group / (head_dim / 8), 8 * (group % (head_dim / 8)), 8 * (group % (head_dim / 8)) + 8)]
    UnknownTag {
        /// The group, in token-major order.
        group: usize,
        /// D, to name the group's token and channels.
        head_dim: usize,
    },
    /// A coded block's tags size it longer than its slot.
    #[error("the tags size the block at {len} bytes, more than its slot's {capacity}")]
    BlockExceedsSlot {
        /// The length the tags give.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
    /// A byte of a slot after its block's end (or of a raw block's empty slot) is not zero.
    #[error("slot padding byte {offset} is {value:#04x}, not zero")]
    SlotPaddingNotZero {
        /// Its offset from the slot's start.
        offset: usize,
        /// Its value.
        value: u8,
    },

    // ----- a container (spec §7.1) ---------------------------------------------------
    /// The first four bytes are not `KVGA`.
    #[error("bad magic {found:02x?}, expected \"KVGA\"")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A format version this crate does not read or write (it reads and writes 1 and 2).
    #[error("unsupported format version {version} (this crate reads and writes versions 1 and 2)")]
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// A flag bit other than bits 0 (checksum) and 1 (self-calibrated) is set.
    #[error("unknown flag bits in {flags:#04x}")]
    UnknownFlags {
        /// The whole flags byte.
        flags: u8,
    },
    /// A reserved header byte, or the checksum field without the checksum flag, is not
    /// zero.
    #[error("reserved header byte {offset} is {value:#04x}, not zero")]
    ReservedNotZero {
        /// Its offset.
        offset: usize,
        /// Its value.
        value: u8,
    },
    /// The header's CRC-32C does not match its other bytes.
    #[error("header checksum {stored:#010x}, the header's bytes give {computed:#010x}")]
    HeaderChecksumMismatch {
        /// The stored CRC-32C.
        stored: u32,
        /// The CRC-32C of the header as received.
        computed: u32,
    },
    /// The calibration-token field disagrees with the self-calibrated flag: nonzero
    /// without it, or outside `1..=T` with it.
    #[error(
        "calibration tokens {calibration_tokens} with self-calibrated = {self_calibrated} and T = {tokens}"
    )]
    CalibrationTokensInvalid {
        /// The field.
        calibration_tokens: u32,
        /// Flag bit 1.
        self_calibrated: bool,
        /// T.
        tokens: usize,
    },
    /// The header counts more raw blocks than the cache has blocks, or the status bytes
    /// count another number.
    #[error("the header counts {stored} raw blocks, the status bytes {counted} (of {blocks} blocks)")]
    RawCountMismatch {
        /// The header's count.
        stored: u32,
        /// The status bytes' count (or, before they are read, the cache's blocks).
        counted: usize,
        /// Blocks in the cache.
        blocks: usize,
    },
    /// A padding byte between sections is not zero.
    #[error("section padding byte {offset} is {value:#04x}, not zero")]
    PaddingNotZero {
        /// Its offset.
        offset: usize,
        /// Its value.
        value: u8,
    },
    /// A block status byte is neither 0 (coded) nor 1 (raw).
    #[error("block {block} has status byte {byte:#04x} (0 coded, 1 raw)")]
    UnknownBlockStatus {
        /// The block, in container order.
        block: usize,
        /// The byte.
        byte: u8,
    },
    /// Bytes follow the last tail.
    #[error("{extra} bytes after the end")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The container holds a cache of another shape than the caller expects.
    #[error("container holds a cache of shape {found:?} (L, H, D, T), expected {expected:?}")]
    CacheShapeMismatch {
        /// The caller's (L, H, D, T).
        expected: [usize; 4],
        /// The container's.
        found: [usize; 4],
    },
    /// A block of the container is invalid.
    #[error("layer {layer} {kind:?} head {head} block {block}: {source}")]
    InBlock {
        /// Its layer.
        layer: usize,
        /// K or V.
        kind: KvKind,
        /// Its KV head.
        head: usize,
        /// Its index: tokens `16 block..16 block + 16`.
        block: usize,
        /// Why, with offsets from the slot's start.
        source: Box<Error>,
    },
    /// The header's checksum differs from the container's (spec §7.1 row 19): in version
    /// 2 the Adler-32 of the bytes after the header, which the CPU decoder checks before a
    /// value is written (the GPU decoder has written its output by then); in version 1
    /// that of the decoded values, which have been written to the output. Every other
    /// error of the CPU decoder writes nothing.
    #[error("checksum {stored:#010x}, the container gives {computed:#010x}")]
    ChecksumMismatch {
        /// The header's checksum.
        stored: u32,
        /// The Adler-32 the decoder computed (of the bytes after the header in version 2,
        /// of the decoded values in version 1).
        computed: u32,
    },
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

bf16_field::impl_from_header_fault!(Error);
