//! Every constant of the ExANS format, version 4 (versions 2 and 3 are still read), in one
//! place.
//!
//! Each item names the section of `docs/formats/exans.md` ("spec §n") that defines it.
//! Change a constant only together with that section and [`VERSION`]; the CUDA kernels
//! are written against the same numbers.

// ---------------------------------------------------------------------------------------
// Identity (spec §3 "Record header", §8 "Container").
// ---------------------------------------------------------------------------------------

/// Magic of one block record, the ASCII bytes `KVXA` (spec §3).
pub const RECORD_MAGIC: [u8; 4] = *b"KVXA";
/// Magic of a whole-cache container, the ASCII bytes `KVXC` (spec §8).
pub const CONTAINER_MAGIC: [u8; 4] = *b"KVXC";
/// Version of records and containers this crate writes (spec §3, §8): 4 carries the
/// block's first sign+mantissa bytes in the lanes' initial states (spec §6.4).
pub const VERSION: u16 = 4;
/// Version 3, still read: the optional checksum, every lane starting at exactly `2^16`
/// (no payload) and a sign+mantissa section of all N bytes (spec §3).
pub const VERSION_3: u16 = 3;
/// Version 2, still read: as version 3 without the checksum flag, bytes 44..48 reserved
/// (spec §3).
pub const VERSION_2: u16 = 2;
/// Record flag bit 0: the block is stored raw, BF16 words little-endian (spec §7).
pub const FLAG_RAW: u16 = 1;
/// Record flag bit 1 (versions 3 and 4): the header holds the Adler-32 of the block's values at
/// [`header::CHECKSUM`] (spec §3).
pub const FLAG_CHECKSUM: u16 = 2;
/// Every record flag bit versions 3 and 4 define; any other set bit is rejected (spec §3).
pub const KNOWN_FLAGS: u16 = FLAG_RAW | FLAG_CHECKSUM;
/// Every record flag bit version 2 defines.
pub const KNOWN_FLAGS_V2: u16 = FLAG_RAW;

// ---------------------------------------------------------------------------------------
// Layout (spec §3, §4).
// ---------------------------------------------------------------------------------------

/// Bytes in a record header; the center table starts right after it (spec §3).
pub const HEADER_LEN: usize = 48;
/// Alignment, relative to the record start, of the partition directory, of each
/// partition's word stream, of the sign+mantissa section, and (relative to the container
/// start) of each record in a container. Padding bytes are zero (spec §4).
pub const SECTION_ALIGN: usize = 16;
/// Bytes per sparse-model entry: symbol `u8`, then frequency `u16` LE (spec §5.1).
pub const MODEL_ENTRY_LEN: usize = 3;
/// Bytes of the model's leading entry count, a `u16` LE (spec §5.1).
pub const MODEL_COUNT_LEN: usize = 2;
/// Bytes per word of a partition's word stream (`u16` LE, spec §6).
pub const WORD_LEN: usize = 2;

/// Byte offsets of the record header fields (spec §3). All integers are little-endian.
pub mod header {
    /// `[u8; 4]` magic, [`super::RECORD_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u16` format version, [`super::VERSION`].
    pub const VERSION: usize = 4;
    /// `u16` flags; bit 0 is [`super::FLAG_RAW`], bit 1 [`super::FLAG_CHECKSUM`] (versions
    /// 3 and 4); the others must be zero.
    pub const FLAGS: usize = 6;
    /// `u16` L, layers (>= 1).
    pub const LAYERS: usize = 8;
    /// `u16` H, KV heads (>= 1).
    pub const KV_HEADS: usize = 10;
    /// `u16` D, head dimension (>= 1).
    pub const HEAD_DIM: usize = 12;
    /// `u16` B', tokens in this block (>= 1; less than B only for a trailing block).
    pub const TOKENS: usize = 14;
    /// `u32` N = 2 L B' H D, values in the block.
    pub const VALUES: usize = 16;
    /// `u32` total record length in bytes, header included, container padding excluded.
    pub const RECORD_LEN: usize = 20;
    /// `u8` probability precision n (frequencies sum to 2^n); 0 in a raw record.
    pub const PRECISION: usize = 24;
    /// `u8` partitions, [`super::PARTITIONS`]; 0 in a raw record.
    pub const PARTITIONS: usize = 25;
    /// `u8` rANS lanes per partition, [`super::LANES`]; 0 in a raw record.
    pub const LANES: usize = 26;
    /// `u8` reserved, zero.
    pub const RESERVED0: usize = 27;
    /// `u32` offset of the sparse model (= 48 + 2L); 48 in a raw record.
    pub const MODEL_OFFSET: usize = 28;
    /// `u32` offset of the partition directory (word counts, then final states).
    pub const DIRECTORY_OFFSET: usize = 32;
    /// `u32` offset of partition 0's word stream.
    pub const WORDS_OFFSET: usize = 36;
    /// `u32` offset of the raw sign+mantissa bytes (`N - P` of them in version 4, spec §4);
    /// of the raw BF16 words in a raw record.
    pub const SIGN_MANTISSA_OFFSET: usize = 40;
    /// `u32` (versions 3 and 4) Adler-32 of the block's N values, little-endian bytes in block
    /// order, when [`super::FLAG_CHECKSUM`] is set; else zero (reserved in version 2).
    pub const CHECKSUM: usize = 44;
}

// ---------------------------------------------------------------------------------------
// Symbols and model (spec §2, §5).
// ---------------------------------------------------------------------------------------

/// The symbol a group's center exponent maps to: `C = (E + 127 - c_g) mod 256` (spec §2).
pub const CENTER_SYMBOL: u8 = 127;
/// Distinct symbols a model can hold: every byte value (spec §5.1).
pub const MAX_SYMBOLS: usize = 256;
/// Probability precision n written by the encoder by default: frequencies sum to 2^12
/// (spec §5.2).
pub const PRECISION: u8 = 12;
/// Smallest precision a decoder accepts (spec §5.1).
pub const MIN_PRECISION: u8 = 1;
/// Largest precision a decoder accepts: the packed decode entry has 12-bit fields
/// (spec §5.4).
pub const MAX_PRECISION: u8 = 12;
/// Fractional bits of the fixed-point `log2` table the quantizer ranks slots with
/// (spec §5.3).
pub const LOG2_FRAC_BITS: u32 = 32;
/// Shift of the symbol in a packed decode-table entry, bits 31..24 (spec §5.4).
pub const ENTRY_SYMBOL_SHIFT: u32 = 24;
/// Shift of `freq - 1` in a packed decode-table entry, bits 23..12 (spec §5.4).
pub const ENTRY_FREQ_SHIFT: u32 = 12;
/// Mask of the 12-bit `freq - 1` and `slot - cdf` fields of a decode entry (spec §5.4).
pub const ENTRY_FIELD_MASK: u32 = 0xfff;

// ---------------------------------------------------------------------------------------
// Partitions and rANS (spec §6).
// ---------------------------------------------------------------------------------------

/// Independent partitions of a block's exponent stream (spec §6.1).
pub const PARTITIONS: usize = 8;
/// Interleaved rANS states ("lanes") per partition: one warp (spec §6.2).
pub const LANES: usize = 32;
/// Lower bound L of a normalised rANS state, which is always in `[2^16, 2^32)`; also
/// every lane's initial encoder state before its payload is added (spec §6.3, §6.4).
pub const STATE_LOWER: u32 = 1 << 16;
/// Sign+mantissa bytes a lane's initial encoder state carries in version 4: the state is
/// `2^16 + b0 + 256 b1`, below `2^17`, so the encoder still never emits a word while
/// encoding a lane's first symbol (spec §6.4).
pub const PAYLOAD_BYTES_PER_LANE: usize = 2;
/// Sign+mantissa bytes a version 4 record carries in its lanes' states, at most:
/// 8 partitions x 32 lanes x 2 bytes; a block of fewer values carries all of them
/// (spec §6.4).
pub const PAYLOAD_BYTES: usize = PARTITIONS * LANES * PAYLOAD_BYTES_PER_LANE;
/// Bits per renormalisation word (spec §6.3).
pub const WORD_BITS: u32 = 16;
/// Bytes of a partition directory: [`PARTITIONS`] word counts then
/// [`PARTITIONS`] x [`LANES`] final states, all `u32` LE (spec §4).
pub const DIRECTORY_LEN: usize = 4 * PARTITIONS + 4 * PARTITIONS * LANES;

// ---------------------------------------------------------------------------------------
// Container (spec §8).
// ---------------------------------------------------------------------------------------

/// Bytes in a container header; the record index follows (spec §8).
pub const CONTAINER_HEADER_LEN: usize = 32;
/// Block size B in tokens used when a caller has no reason to choose another: vLLM's
/// default page size, and the unit of the ExANS paper's physical KV block records.
pub const DEFAULT_BLOCK_TOKENS: usize = 16;

/// Byte offsets of the container header fields (spec §8). All integers little-endian.
pub mod container_header {
    /// `[u8; 4]` magic, [`super::CONTAINER_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u16` format version, [`super::VERSION`].
    pub const VERSION: usize = 4;
    /// `u16` flags, zero.
    pub const FLAGS: usize = 6;
    /// `u16` L.
    pub const LAYERS: usize = 8;
    /// `u16` H.
    pub const KV_HEADS: usize = 10;
    /// `u16` D.
    pub const HEAD_DIM: usize = 12;
    /// `u16` B, tokens per block (the last block may hold fewer).
    pub const BLOCK_TOKENS: usize = 14;
    /// `u64` T, tokens in the cache.
    pub const TOKENS: usize = 16;
    /// `u32` block count, `ceil(T / B)`.
    pub const BLOCKS: usize = 24;
    /// `u32` reserved, zero.
    pub const RESERVED: usize = 28;
}

/// Rounds `n` up to the next multiple of [`SECTION_ALIGN`]; `None` on overflow.
#[inline]
pub const fn align_up(n: usize) -> Option<usize> {
    match n.checked_add(SECTION_ALIGN - 1) {
        Some(v) => Some(v & !(SECTION_ALIGN - 1)),
        None => None,
    }
}

/// Symbols `[start, end)` of partition `p` in a stream of `n` symbols:
/// `start = floor(p n / 8)`, `end = floor((p + 1) n / 8)` (spec §6.1).
#[inline]
pub const fn partition_range(n: usize, p: usize) -> (usize, usize) {
    // n < 2^32 in any valid record, so `p * n` cannot overflow a 64-bit usize; u128
    // keeps the definition exact on every platform.
    let start = (p as u128 * n as u128 / PARTITIONS as u128) as usize;
    let end = ((p as u128 + 1) * n as u128 / PARTITIONS as u128) as usize;
    (start, end)
}

/// Consecutive symbols of a partition a lane decodes in consecutive steps: lane `j`
/// holds symbols `8 j .. 8 j + 8` of every tile (spec §6.2).
pub const LANE_GROUP: usize = 8;
/// Symbols of a partition in one tile, [`LANES`] x [`LANE_GROUP`]: the 32 lanes decode a
/// tile in [`LANE_GROUP`] steps (spec §6.2).
pub const TILE: usize = LANES * LANE_GROUP;

/// The symbol lane `j` decodes in step `t`, as an index into its partition:
/// `256 floor(t / 8) + 8 j + t mod 8` (spec §6.2). It lies in the partition exactly when
/// `t < lane_run(n_p, j)`.
#[inline]
pub const fn lane_symbol(lane: usize, step: usize) -> usize {
    TILE * (step / LANE_GROUP) + LANE_GROUP * lane + step % LANE_GROUP
}

/// Steps lane `j` decodes in a partition of `n_p` symbols: 8 per whole tile, and
/// `clamp(r - 8 j, 0, 8)` in a last, partial tile of `r = n_p mod 256` symbols (spec §6.2).
/// It falls with `j`: lane 0's is the partition's step count `m`.
#[inline]
pub const fn lane_run(partition_len: usize, lane: usize) -> usize {
    let rest = (partition_len % TILE).saturating_sub(LANE_GROUP * lane);
    LANE_GROUP * (partition_len / TILE) + if rest < LANE_GROUP { rest } else { LANE_GROUP }
}

/// Sign+mantissa bytes a record of `n` values carries in its lanes' initial states: the
/// values `0 .. payload_len` (spec §6.4). Version 4 only; versions 2 and 3 carry none.
#[inline]
pub const fn payload_len(values: usize) -> usize {
    if values < PAYLOAD_BYTES { values } else { PAYLOAD_BYTES }
}

/// Payload bytes lane `lane` of partition `partition` carries in a record whose lanes
/// carry `payload` bytes in all (`P`: [`payload_len`] in version 4, 0 in versions 2 and
/// 3): `clamp(P - 2 k, 0, 2)` with `k = 32 partition + lane`; they are the sign+mantissa
/// bytes of values `2 k` and `2 k + 1` (spec §6.4).
#[inline]
pub const fn lane_payload_bytes(payload: usize, partition: usize, lane: usize) -> usize {
    let first = PAYLOAD_BYTES_PER_LANE * (LANES * partition + lane);
    let rest = payload.saturating_sub(first);
    if rest < PAYLOAD_BYTES_PER_LANE { rest } else { PAYLOAD_BYTES_PER_LANE }
}

/// Steps `m` of a partition of `n_p` symbols, lane 0's run (spec §6.2).
#[inline]
pub const fn lane_steps(partition_len: usize) -> usize {
    lane_run(partition_len, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_tile_the_header() {
        // (offset, width) of every field, in order; they must abut and end at HEADER_LEN.
        let fields = [
            (header::MAGIC, 4),
            (header::VERSION, 2),
            (header::FLAGS, 2),
            (header::LAYERS, 2),
            (header::KV_HEADS, 2),
            (header::HEAD_DIM, 2),
            (header::TOKENS, 2),
            (header::VALUES, 4),
            (header::RECORD_LEN, 4),
            (header::PRECISION, 1),
            (header::PARTITIONS, 1),
            (header::LANES, 1),
            (header::RESERVED0, 1),
            (header::MODEL_OFFSET, 4),
            (header::DIRECTORY_OFFSET, 4),
            (header::WORDS_OFFSET, 4),
            (header::SIGN_MANTISSA_OFFSET, 4),
            (header::CHECKSUM, 4),
        ];
        let mut at = 0;
        for (offset, width) in fields {
            assert_eq!(offset, at);
            at += width;
        }
        assert_eq!(at, HEADER_LEN);
        assert_eq!(HEADER_LEN % SECTION_ALIGN, 0);
    }

    #[test]
    fn container_fields_tile_the_header() {
        let fields = [
            (container_header::MAGIC, 4),
            (container_header::VERSION, 2),
            (container_header::FLAGS, 2),
            (container_header::LAYERS, 2),
            (container_header::KV_HEADS, 2),
            (container_header::HEAD_DIM, 2),
            (container_header::BLOCK_TOKENS, 2),
            (container_header::TOKENS, 8),
            (container_header::BLOCKS, 4),
            (container_header::RESERVED, 4),
        ];
        let mut at = 0;
        for (offset, width) in fields {
            assert_eq!(offset, at);
            at += width;
        }
        assert_eq!(at, CONTAINER_HEADER_LEN);
    }

    #[test]
    fn partitions_and_lanes_cover_every_symbol_once() {
        for n in [0usize, 1, 7, 8, 9, 31, 33, 255, 256, 257, 1000, 2047, 2048, 2049, 184_320] {
            let mut next = 0;
            for p in 0..PARTITIONS {
                let (start, end) = partition_range(n, p);
                assert_eq!(start, next, "n = {n}, p = {p}");
                let len = end - start;
                let m = lane_steps(len);
                let mut seen = vec![false; len];
                for j in 0..LANES {
                    let run = lane_run(len, j);
                    assert!(run <= m && (j == 0 || run <= lane_run(len, j - 1)));
                    for t in 0..m {
                        let i = lane_symbol(j, t);
                        assert_eq!(i < len, t < run, "n = {n}, p = {p}, lane {j}, step {t}");
                        if i < len {
                            assert!(!seen[i]);
                            seen[i] = true;
                        }
                    }
                }
                assert!(seen.iter().all(|&s| s), "n = {n}, p = {p}");
                next = end;
            }
            assert_eq!(next, n);
        }
    }

    #[test]
    fn align_up_rounds_to_sixteen() {
        assert_eq!(align_up(0), Some(0));
        assert_eq!(align_up(1), Some(16));
        assert_eq!(align_up(16), Some(16));
        assert_eq!(align_up(17), Some(32));
        assert_eq!(align_up(usize::MAX), None);
    }
}
