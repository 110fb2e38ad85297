use thiserror::Error;

/// Errors of the ExANS encoder and decoder.
///
/// Decoder variants name the spec check that failed (`docs/formats/exans.md` §10, the
/// accept/reject table) and carry the numbers that went wrong. Offsets are in bytes from
/// the start of the record (or of the container for container-level variants).
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ----- input shape (encoder and decoder) -----------------------------------------
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
        /// Tokens (B' for a record, T for a container).
        tokens: usize,
    },
    /// A dimension does not fit its header field (`u16` for L, H, D, B).
    #[error("{what} = {value} exceeds the format's limit {max}")]
    DimensionTooLarge {
        /// Which dimension.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The largest value the format can hold.
        max: usize,
    },
    /// The value count of a block (`2 L B' H D`), or of a whole cache, overflows the
    /// record's `u32` fields or `usize`.
    #[error("shape overflow: the value count of {layers} x {kv_heads} x {head_dim} x {tokens} does not fit")]
    ShapeOverflow {
        /// L.
        layers: usize,
        /// H.
        kv_heads: usize,
        /// D.
        head_dim: usize,
        /// Tokens.
        tokens: usize,
    },
    /// The encoder got the wrong number of groups (it needs 2L), or the decoder the
    /// wrong number of output groups.
    #[error("{got} groups given, the block has {expected} (2 L)")]
    GroupCountMismatch {
        /// Groups given.
        got: usize,
        /// 2L.
        expected: usize,
    },
    /// A group (input or output) does not hold `B' x H x D` values.
    #[error("group {group} holds {got} values, expected {expected} (B' x H x D)")]
    GroupLengthMismatch {
        /// Group index in block order.
        group: usize,
        /// Its length in values.
        got: usize,
        /// `B' x H x D`.
        expected: usize,
    },
    /// The encoder was asked for a precision the format cannot carry, or one too small
    /// for the block's distinct symbols (`2^n` must be at least their count).
    #[error("precision {precision} cannot code {distinct} distinct symbols (valid: 1..=12, 2^n >= distinct)")]
    UnsupportedPrecisionForEncode {
        /// Requested precision n.
        precision: u8,
        /// Distinct symbols in the block (0 when the precision itself is out of range).
        distinct: usize,
    },
    /// `encode_cache` was given a block size of zero.
    #[error("block size must be at least one token")]
    ZeroBlockTokens,

    // ----- record header (spec §3) -----------------------------------------------------
    /// The input ends before a field or section it must contain.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed to continue.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// The first four bytes are not `KVXA` (record) or `KVXC` (container).
    #[error("bad magic {found:02x?}, expected \"{expected}\"")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
        /// The magic expected there: `"KVXA"` for a record, `"KVXC"` for a container.
        expected: &'static str,
    },
    /// The version field is none of [`crate::format::VERSION`] (4),
    /// [`crate::format::VERSION_3`] and [`crate::format::VERSION_2`], the versions a
    /// decoder reads (spec §3, §8).
    #[error("unsupported version {version}")]
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// A flag bit this version does not define is set.
    #[error("unsupported flags {flags:#06x}")]
    UnsupportedFlags {
        /// The flags found.
        flags: u16,
    },
    /// A reserved header field is not zero.
    #[error("reserved field at byte {offset} is {value}, must be 0")]
    ReservedNonZero {
        /// Offset of the field.
        offset: usize,
        /// Its value.
        value: u32,
    },
    /// The header's value count is not `2 L B' H D`.
    #[error("header says {stored} values, the shape has {expected}")]
    ValueCountMismatch {
        /// The stored count.
        stored: u64,
        /// `2 L B' H D`.
        expected: u64,
    },
    /// The precision field is outside `1..=12` (coded record) or not 0 (raw record).
    #[error("unsupported precision {precision}")]
    UnsupportedPrecision {
        /// The precision found.
        precision: u8,
    },
    /// The partition or lane count is not 8 / 32 (coded) or 0 / 0 (raw).
    #[error("unsupported layout: {partitions} partitions x {lanes} lanes")]
    UnsupportedLayout {
        /// Partitions found.
        partitions: u8,
        /// Lanes found.
        lanes: u8,
    },
    /// A section offset (or the record length) differs from the one the spec derives
    /// from the sections before it.
    #[error("{section}: stored {stored}, expected {expected}")]
    SectionMismatch {
        /// The header field.
        section: &'static str,
        /// Its stored value.
        stored: u64,
        /// The value derived from the layout rule (spec §4).
        expected: u64,
    },
    /// An alignment padding byte is not zero.
    #[error("padding byte at offset {offset} is {value:#04x}, must be 0")]
    NonZeroPadding {
        /// Offset of the byte.
        offset: usize,
        /// Its value.
        value: u8,
    },
    /// The record is longer than its header's record length (decoders take exactly one
    /// record), or a container is longer than its index says.
    #[error("{extra} trailing bytes")]
    TrailingBytes {
        /// Bytes past the end.
        extra: usize,
    },

    // ----- model (spec §5) -------------------------------------------------------------
    /// The model's entry count is 0 or above 256.
    #[error("model entry count {count} outside 1..=256")]
    BadSymbolCount {
        /// The count found.
        count: u16,
    },
    /// A model entry has frequency 0.
    #[error("symbol {symbol} has frequency 0")]
    ZeroFrequency {
        /// The symbol.
        symbol: u8,
    },
    /// A symbol appears twice in the model.
    #[error("symbol {symbol} appears twice in the model")]
    DuplicateSymbol {
        /// The symbol.
        symbol: u8,
    },
    /// Model entries are not in ascending symbol order.
    #[error("model symbol {symbol} follows {previous}: entries must ascend")]
    SymbolsNotAscending {
        /// The entry before.
        previous: u8,
        /// The out-of-order symbol.
        symbol: u8,
    },
    /// The model's frequencies do not sum to `2^precision`.
    #[error("frequencies sum to {sum}, expected {expected}")]
    FrequencySumMismatch {
        /// Their sum.
        sum: u32,
        /// `2^precision`.
        expected: u32,
    },

    // ----- partitions and rANS (spec §6) -----------------------------------------------
    /// A partition's word stream runs past the sign+mantissa offset (or past `u32`).
    #[error("partition {partition}'s word stream ends past the sign+mantissa section")]
    PartitionPastEnd {
        /// The partition.
        partition: usize,
    },
    /// A stored final encoder state is below `2^16`.
    #[error("partition {partition} lane {lane}: state {state:#x} below 2^16")]
    StateOutOfRange {
        /// The partition.
        partition: usize,
        /// The lane.
        lane: usize,
        /// The state.
        state: u32,
    },
    /// A lane needed a renormalisation word after the partition's last one.
    #[error("partition {partition}: word stream exhausted")]
    WordStreamExhausted {
        /// The partition.
        partition: usize,
    },
    /// A lane did not end at the form of its initial encoder state, `2^16` plus a payload
    /// of at most the bytes the lane carries (`state - 2^16 < 256^c`, `c` from
    /// [`crate::format::lane_payload_bytes`]; exactly `2^16` in versions 2 and 3) (corrupt
    /// data; spec §6.3, §6.4).
    #[error("partition {partition} lane {lane}: final state {state:#x}, expected 0x10000 plus its payload")]
    FinalStateMismatch {
        /// The partition.
        partition: usize,
        /// The lane.
        lane: usize,
        /// The state it ended in.
        state: u32,
    },
    /// Decoding finished with words of the partition left unread.
    #[error("partition {partition}: consumed {consumed} of {count} words")]
    UnconsumedWords {
        /// The partition.
        partition: usize,
        /// Words read.
        consumed: usize,
        /// Words stored.
        count: usize,
    },
    /// The decoded values' Adler-32 differs from the record's checksum (flag bit 1,
    /// versions 3 and 4): the record was corrupted where its structure cannot tell (the
    /// sign+mantissa bytes, in the section or in the lanes' states (spec §6.4), the centers)
    /// or in the checksum itself. The block's values
    /// have been written (they are what the record holds).
    #[error("checksum {stored:#010x}, the decoded values give {computed:#010x}")]
    ChecksumMismatch {
        /// The record's checksum.
        stored: u32,
        /// The Adler-32 of the decoded values.
        computed: u32,
    },

    // ----- container (spec §8) ---------------------------------------------------------
    /// The container's block count is not `ceil(T / B)`.
    #[error("container holds {stored} blocks, its shape needs {expected}")]
    BlockCountMismatch {
        /// The stored count.
        stored: u64,
        /// `ceil(T / B)`.
        expected: u64,
    },
    /// A record offset in the container index differs from the layout rule.
    #[error("index entry {entry}: offset {stored}, expected {expected}")]
    IndexMismatch {
        /// The index entry (block number; the last entry is the end of the container).
        entry: usize,
        /// Its stored offset.
        stored: u64,
        /// The offset the layout rule gives.
        expected: u64,
    },
    /// A record's shape differs from the one the container header implies.
    #[error("block {block}: record shape {got:?} (L, H, D, B'), expected {expected:?}")]
    RecordShapeMismatch {
        /// The block.
        block: usize,
        /// The record's (L, H, D, B').
        got: [usize; 4],
        /// The container's.
        expected: [usize; 4],
    },
    /// A record inside a container failed to decode.
    #[error("block {block}: {source}")]
    InBlock {
        /// The block.
        block: usize,
        /// Why.
        source: Box<Error>,
    },
    /// A cache given as flat words ([`crate::encode_words_with`]) holds another number of
    /// words than its shape, `2 L T H D`.
    #[error("{got} words given, the cache shape has {expected}")]
    WordCountMismatch {
        /// Words given.
        got: usize,
        /// `2 L T H D`.
        expected: usize,
    },
    /// [`crate::decode_cache_into`]'s output holds fewer words than the container's cache.
    #[error("output holds {got} words, the cache has {needed}")]
    OutputTooSmall {
        /// `2 L T H D`.
        needed: usize,
        /// Words the output holds.
        got: usize,
    },
    /// The container holds a cache of another shape than the caller expects
    /// ([`crate::ExansCodec`]).
    #[error("container holds a cache of shape {found:?} (L, H, D, T), expected {expected:?}")]
    CacheShapeMismatch {
        /// The caller's (L, H, D, T).
        expected: [usize; 4],
        /// The container's.
        found: [usize; 4],
    },
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;
