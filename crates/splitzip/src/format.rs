//! The SplitZip payload format: every constant and the section layout. The header
//! itself is [`crate::PayloadHeader`].
//!
//! This module is the single place where the byte format is defined; the encoder, the
//! decoder and the CUDA kernels (through the header `cargo xtask kernels` generates from
//! these constants) derive their offsets from it. The normative description is
//! `docs/formats/splitzip.md`; each constant names its section there ("spec §N"). The
//! design follows the SplitZip paper (Guo and Joshi, NeurIPS 2026, "Abstract": 4-bit
//! codes for an offline top-16 exponent codebook, raw sign+mantissa, a sparse escape
//! stream with chunk-local metadata, chunk = 1024), with escape lists located by an
//! exclusive prefix sum so that a GPU thread block finds its chunk's escapes without a
//! scan.

// ---------------------------------------------------------------------------------------
// Format constants (spec §2 "Header" and §3 "Sections").
// ---------------------------------------------------------------------------------------

/// The four magic bytes that open every payload: `b"KVSZ"` (spec §2).
pub const MAGIC: [u8; 4] = *b"KVSZ";
/// The format version this crate writes (spec §2): 2 adds the header checksum and the
/// optional checksum of the values.
pub const VERSION: u16 = 2;
/// The first format version, still read: no header checksum, no checksum flag, bytes
/// 96..128 reserved (spec §2).
pub const VERSION_1: u16 = 1;
/// Header flag bit 0: the payload stores the n words raw after the header (spec §2, §4).
pub const FLAG_RAW: u16 = 1;
/// Header flag bit 1 (version 2): the header holds the Adler-32 of the n values as
/// little-endian bytes at [`field::CHECKSUM`] (spec §2).
pub const FLAG_CHECKSUM: u16 = 2;
/// Every flag bit version 2 defines; a payload with any other bit set is rejected
/// (spec §2).
pub const KNOWN_FLAGS: u16 = FLAG_RAW | FLAG_CHECKSUM;
/// Every flag bit version 1 defines.
pub const KNOWN_FLAGS_V1: u16 = FLAG_RAW;
/// Bytes in the fixed-size header, so the first section starts 16-byte aligned (spec §2).
pub const HEADER_LEN: usize = 128;
/// Every section starts at a multiple of this many bytes from the payload start; the
/// gaps are zero bytes (spec §3). 16 bytes = one `uint4` / `cp.async` load on the GPU.
pub const SECTION_ALIGN: usize = 16;
/// Entries in a codebook: one per 4-bit code (spec §2; the SplitZip paper, "Top-16").
pub const CODEBOOK_LEN: usize = 16;
/// Bits per exponent code; two codes per byte, value `2i` in the low nibble (spec §3.1).
pub const CODE_BITS: u32 = 4;
/// Mask of one code: `(1 << CODE_BITS) - 1` (spec §3.1).
pub const CODE_MASK: u8 = (1 << CODE_BITS) - 1;
/// The code written for an escaped value; the decoder requires it (spec §3.1).
pub const ESCAPE_CODE: u8 = 0;
/// The chunk size in values the SplitZip paper uses ("chunk_size=1024") and the default
/// of this crate (spec §3).
pub const DEFAULT_CHUNK_SIZE: u32 = 1024;
/// The smallest chunk size in values: a power of two, so a chunk's codes are whole bytes
/// and 16-byte multiples (spec §3).
pub const MIN_CHUNK_SIZE: u32 = 32;
/// The largest chunk size in values: escape positions are `u16` (spec §3.4).
pub const MAX_CHUNK_SIZE: u32 = 32768;
/// Bytes per entry of the escape offsets section: a little-endian `u32` (spec §3.3).
pub const ESCAPE_OFFSET_BYTES: usize = 4;
/// Bytes per escape position: a little-endian `u16` position inside its chunk (spec §3.4).
pub const ESCAPE_POSITION_BYTES: usize = 2;
/// Bytes per escaped exponent: the raw 8-bit exponent (spec §3.5).
pub const ESCAPE_EXPONENT_BYTES: usize = 1;

/// Byte offsets of the header fields (spec §2). All integers are little-endian.
pub mod field {
    /// `[u8; 4]` magic, [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u16` format version, [`super::VERSION`].
    pub const VERSION: usize = 4;
    /// `u16` flags; bit 0 = [`super::FLAG_RAW`], bit 1 = [`super::FLAG_CHECKSUM`] (version 2).
    pub const FLAGS: usize = 6;
    /// `u64` n, the number of BF16 values.
    pub const VALUE_COUNT: usize = 8;
    /// `u32` chunk size in values.
    pub const CHUNK_SIZE: usize = 16;
    /// `u32` chunk count: `ceil(n / chunk_size)` when coded, 0 when raw.
    pub const CHUNK_COUNT: usize = 20;
    /// `u64` total escape count E (0 when raw).
    pub const ESCAPE_COUNT: usize = 24;
    /// `[u8; 16]` codebook: entry `c` is the exponent of code `c`.
    pub const CODEBOOK: usize = 32;
    /// `u64` byte offset of the codes section (0 when raw).
    pub const CODES_OFFSET: usize = 48;
    /// `u64` byte offset of the sign+mantissa section (0 when raw).
    pub const SIGN_MANTISSA_OFFSET: usize = 56;
    /// `u64` byte offset of the escape offsets section (0 when raw).
    pub const ESCAPE_OFFSETS_OFFSET: usize = 64;
    /// `u64` byte offset of the escape positions section (0 when raw).
    pub const ESCAPE_POSITIONS_OFFSET: usize = 72;
    /// `u64` byte offset of the escape exponents section (0 when raw).
    pub const ESCAPE_EXPONENTS_OFFSET: usize = 80;
    /// `u64` total payload length in bytes, header included.
    pub const ENCODED_LEN: usize = 88;
    /// `u32` (version 2) CRC-32C of the 128 header bytes with this field read as zero.
    pub const HEADER_CRC: usize = 96;
    /// `u32` (version 2) Adler-32 of the values when [`super::FLAG_CHECKSUM`] is set, else 0.
    pub const CHECKSUM: usize = 100;
    /// First of the reserved bytes, which must be zero up to [`super::HEADER_LEN`].
    pub const RESERVED: usize = 104;
    /// First reserved byte of a version 1 header (there, 96..128 are all reserved).
    pub const RESERVED_V1: usize = 96;
}

// The constants fit together (checked at compile time).
const _: () = {
    assert!(HEADER_LEN.is_multiple_of(SECTION_ALIGN), "sections after the header start aligned");
    assert!(field::CODEBOOK + CODEBOOK_LEN == field::CODES_OFFSET);
    assert!(field::ENCODED_LEN + 8 == field::HEADER_CRC && field::RESERVED_V1 == field::HEADER_CRC);
    assert!(field::HEADER_CRC + 4 == field::CHECKSUM && field::CHECKSUM + 4 == field::RESERVED);
    assert!(field::RESERVED < HEADER_LEN);
    // A chunk's codes are whole bytes; a position inside a chunk fits u16.
    assert!(MIN_CHUNK_SIZE.is_power_of_two() && MIN_CHUNK_SIZE.is_multiple_of(2));
    assert!(MAX_CHUNK_SIZE as u64 <= u16::MAX as u64 + 1);
    assert!(CODEBOOK_LEN == 1 << CODE_BITS);
};

// ---------------------------------------------------------------------------------------
// Tuning constants (not part of the format; they change speed, never bytes).
// ---------------------------------------------------------------------------------------

/// Values per rayon task (whole chunks are grouped up to this size).
pub(crate) use bf16_field::PARALLEL_CHUNK_VALUES as PARALLEL_TASK_VALUES;
/// The workspace's CPU parallelism policy ([`bf16_field::PARALLEL_MIN_VALUES`]): inputs of
/// at least this many values are encoded and decoded on rayon's pool.
pub(crate) use bf16_field::PARALLEL_MIN_VALUES;
/// The entry of an exponent that has no code in the 256-entry exponent -> code tables
/// of the CPU and GPU encoders: bit 7 set (so a shift by 7 counts escapes without a
/// branch) over [`ESCAPE_CODE`] in the low nibble (so the code written is the escape's).
pub const NO_CODE: u8 = 0x80 | ESCAPE_CODE;

// ---------------------------------------------------------------------------------------
// Layout arithmetic (spec §3).
// ---------------------------------------------------------------------------------------

/// Whether `chunk_size` (in values) is allowed: a power of two in
/// [`MIN_CHUNK_SIZE`]`..=`[`MAX_CHUNK_SIZE`] (spec §3).
pub const fn chunk_size_is_valid(chunk_size: u32) -> bool {
    chunk_size.is_power_of_two() && chunk_size >= MIN_CHUNK_SIZE && chunk_size <= MAX_CHUNK_SIZE
}

/// `x` rounded up to a multiple of [`SECTION_ALIGN`], or `None` on overflow.
pub(crate) const fn align_up(x: u64) -> Option<u64> {
    let a = SECTION_ALIGN as u64;
    match x.checked_add(a - 1) {
        Some(y) => Some(y / a * a),
        None => None,
    }
}

/// Bytes of a raw payload of `value_count` values: `HEADER_LEN + 2n` (spec §4), or `None`
/// if that overflows `u64`.
pub const fn raw_encoded_len(value_count: u64) -> Option<u64> {
    match value_count.checked_mul(2) {
        Some(b) => b.checked_add(HEADER_LEN as u64),
        None => None,
    }
}

/// One section of a payload: `len` bytes starting `offset` bytes from the payload start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Section {
    /// Byte offset from the start of the payload; a multiple of [`SECTION_ALIGN`].
    pub offset: u64,
    /// Length in bytes (without the zero padding that follows it).
    pub len: u64,
}

impl Section {
    /// One past the last byte: `offset + len` (never overflows for a layout built by
    /// [`CodedLayout::new`]).
    pub const fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Where every section of a coded payload lies (spec §3).
///
/// The first four sections depend only on `(value_count, chunk_size)`, so a GPU encoder
/// can write them before it knows the escape count; only the escape exponents section
/// (last) moves with the escape count E. Built only by [`CodedLayout::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CodedLayout {
    /// `ceil(n / chunk_size)` chunks; the last one holds `n - (chunks - 1) * chunk_size`
    /// values.
    pub chunk_count: u32,
    /// §3.1: `ceil(n / 2)` bytes of 4-bit codes, at [`HEADER_LEN`].
    pub codes: Section,
    /// §3.2: n bytes of sign+mantissa.
    pub sign_mantissa: Section,
    /// §3.3: `chunk_count + 1` little-endian `u32` exclusive prefix sums of per-chunk
    /// escape counts.
    pub escape_offsets: Section,
    /// §3.4: E little-endian `u16` positions inside their chunk.
    pub escape_positions: Section,
    /// §3.5: E raw exponent bytes.
    pub escape_exponents: Section,
    /// Total payload bytes: the end of the escape exponents section (no tail padding).
    pub encoded_len: u64,
}

impl CodedLayout {
    /// The layout of a coded payload of `value_count` values in chunks of `chunk_size`
    /// values with `escape_count` escapes.
    ///
    /// Returns `None` if `chunk_size` is not valid ([`chunk_size_is_valid`]), if the chunk
    /// count does not fit `u32`, or if any offset overflows `u64`. It does not check that
    /// `escape_count` is plausible; [`crate::PayloadHeader::parse`] does.
    pub const fn new(value_count: u64, chunk_size: u32, escape_count: u64) -> Option<CodedLayout> {
        if !chunk_size_is_valid(chunk_size) {
            return None;
        }
        // `?` is not allowed in a const fn; this macro spells it out.
        macro_rules! q {
            ($e:expr) => {
                match $e {
                    Some(v) => v,
                    None => return None,
                }
            };
        }
        let chunks = value_count.div_ceil(chunk_size as u64);
        if chunks > u32::MAX as u64 {
            return None;
        }
        let codes = Section { offset: HEADER_LEN as u64, len: value_count.div_ceil(2) };
        let sign_mantissa =
            Section { offset: q!(align_up(q!(codes.offset.checked_add(codes.len)))), len: value_count };
        let escape_offsets = Section {
            offset: q!(align_up(q!(sign_mantissa.offset.checked_add(sign_mantissa.len)))),
            len: (chunks + 1) * ESCAPE_OFFSET_BYTES as u64,
        };
        let escape_positions = Section {
            offset: q!(align_up(q!(escape_offsets.offset.checked_add(escape_offsets.len)))),
            len: q!(escape_count.checked_mul(ESCAPE_POSITION_BYTES as u64)),
        };
        let escape_exponents = Section {
            offset: q!(align_up(q!(escape_positions.offset.checked_add(escape_positions.len)))),
            len: q!(escape_count.checked_mul(ESCAPE_EXPONENT_BYTES as u64)),
        };
        let encoded_len = q!(escape_exponents.offset.checked_add(escape_exponents.len));
        Some(CodedLayout {
            chunk_count: chunks as u32,
            codes,
            sign_mantissa,
            escape_offsets,
            escape_positions,
            escape_exponents,
            encoded_len,
        })
    }

    /// The five sections in payload order with their spec names.
    pub fn sections(&self) -> [(&'static str, Section); 5] {
        [
            ("codes", self.codes),
            ("sign_mantissa", self.sign_mantissa),
            ("escape_offsets", self.escape_offsets),
            ("escape_positions", self.escape_positions),
            ("escape_exponents", self.escape_exponents),
        ]
    }
}

/// How a payload stores its values (spec §2 flags, §3, §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Codes, sign+mantissa and escapes (flag bit 0 clear).
    Coded(CodedLayout),
    /// The n words little-endian right after the header (flag bit 0 set).
    Raw {
        /// `2n` bytes at [`HEADER_LEN`].
        words: Section,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes() {
        for cs in [32, 64, 1024, 4096, 32768] {
            assert!(chunk_size_is_valid(cs), "{cs}");
        }
        for cs in [0, 1, 16, 31, 33, 1000, 65536, u32::MAX] {
            assert!(!chunk_size_is_valid(cs), "{cs}");
        }
    }

    #[test]
    fn layout_of_a_small_payload_by_hand() {
        // n = 96, chunk 32: 3 chunks; E = 3.
        let l = CodedLayout::new(96, 32, 3).unwrap();
        assert_eq!(l.chunk_count, 3);
        assert_eq!(l.codes, Section { offset: 128, len: 48 });
        assert_eq!(l.sign_mantissa, Section { offset: 176, len: 96 });
        assert_eq!(l.escape_offsets, Section { offset: 272, len: 16 });
        assert_eq!(l.escape_positions, Section { offset: 288, len: 6 });
        assert_eq!(l.escape_exponents, Section { offset: 304, len: 3 });
        assert_eq!(l.encoded_len, 307);
        // Odd n, partial chunk: codes round up, every offset 16-aligned.
        let l = CodedLayout::new(33, 32, 0).unwrap();
        assert_eq!((l.chunk_count, l.codes.len), (2, 17));
        assert_eq!(l.sign_mantissa.offset, 160);
        assert_eq!(l.escape_offsets, Section { offset: 208, len: 12 });
        assert_eq!(l.escape_positions, Section { offset: 224, len: 0 });
        assert_eq!(l.escape_exponents, Section { offset: 224, len: 0 });
        // Empty: one escape offset entry (the total, 0).
        let l = CodedLayout::new(0, 1024, 0).unwrap();
        assert_eq!((l.chunk_count, l.escape_offsets.len, l.encoded_len), (0, 4, 144));
    }

    #[test]
    fn layout_refuses_overflow() {
        assert!(CodedLayout::new(u64::MAX, 32768, 0).is_none(), "chunk count exceeds u32");
        assert!(CodedLayout::new(u64::MAX - 7, 32, 0).is_none());
        assert!(CodedLayout::new(100, 1000, 0).is_none(), "chunk size");
        assert!(CodedLayout::new(1 << 40, 32768, u64::MAX).is_none(), "escape bytes");
        assert!(raw_encoded_len(u64::MAX / 2).is_none());
        assert_eq!(raw_encoded_len(3), Some(134));
    }
}
