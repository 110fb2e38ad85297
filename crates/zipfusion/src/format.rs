//! Every constant of the ZipFusion resident format, version 1, and its layout arithmetic:
//! the block geometry, the tensor-core fragment order, the metadata byte, the page layout
//! and the cache container's header.
//!
//! Each item names the section of `docs/formats/zipfusion.md` ("spec §n") that defines it.
//! Change a constant only together with that section and [`VERSION`]: the GPU kernels of
//! the fused attention will be written against the same numbers.

use bf16_field::KvKind;

use crate::{Error, Result};

// ---------------------------------------------------------------------------------------
// Blocks (spec §2, §4).
// ---------------------------------------------------------------------------------------

/// Tokens per page: a page is compressed when it fills (spec §2; the ZipFusion paper,
/// "Compression format").
pub const PAGE_TOKENS: usize = 16;
/// Channels of one head per block: 16 tokens x 32 channels = [`BLOCK_VALUES`] (spec §2).
pub const BLOCK_CHANNELS: usize = 32;
/// Values per block, the unit that is either coded or raw (spec §2).
pub const BLOCK_VALUES: usize = PAGE_TOKENS * BLOCK_CHANNELS;
/// Lanes of the warp that restores a block (spec §3).
pub const LANES: usize = 32;
/// Values each lane holds of a block: two groups of [`GROUP_VALUES`] (spec §3).
pub const LANE_VALUES: usize = BLOCK_VALUES / LANES;
/// Values per group: two `mma.m16n8k16` B fragments of 4 values, whose codes share 4
/// bytes (spec §3.4).
pub const GROUP_VALUES: usize = 8;
/// Low bytes of a coded block: one per value, lane-major (spec §4.1).
pub const LOW_BYTES_LEN: usize = BLOCK_VALUES;
/// Code bytes of a coded block: two 4-bit codes per byte, lane-major (spec §4.1).
pub const CODE_BYTES_LEN: usize = BLOCK_VALUES / 2;
/// Bytes of a coded block: 12 bits per value (spec §4.1).
pub const CODED_BLOCK_LEN: usize = LOW_BYTES_LEN + CODE_BYTES_LEN;
/// Bytes of a raw block: the 512 BF16 words in fragment order (spec §4.2).
pub const RAW_BLOCK_LEN: usize = 2 * BLOCK_VALUES;
/// The largest `b/2` a coded block may have: `b/2 + d <= 127` for every 3-bit `d`, so
/// adding `b/2` to a code byte never carries into the sign bit or the next byte
/// (spec §2.1, §3.4); equivalently, the window `[b, b + 15]` lies in `0..=255`.
pub const MAX_HALF_BASE: u8 = 120;
/// The largest exponent offset `E - b` of a coded block: 4 bits of exponent, of which the
/// low byte keeps the lowest (spec §2.1).
pub const WINDOW_SPAN: u8 = 15;
/// The largest offset `E - b` of a nonzero exponent in a zero-aware block, whose `d = 7`
/// means exponent 0 (spec §2.2).
pub const ZERO_AWARE_WINDOW_SPAN: u8 = 13;
/// The `d` a zero-aware block reserves for exponent 0: the value is `±0` or a subnormal
/// (spec §2.2).
pub const ZERO_D: u8 = 7;

// ---------------------------------------------------------------------------------------
// The metadata byte of a block (spec §5.1).
// ---------------------------------------------------------------------------------------

/// The metadata byte of a raw block (spec §5.1).
pub const RAW_BLOCK_BYTE: u8 = 0xff;
/// Bit 7 of a coded block's metadata byte: a zero-aware block (spec §2.2, §5.1), allowed
/// in [`Variant::ZeroAware`] caches only.
pub const ZERO_AWARE_FLAG: u8 = 0x80;

/// Which blocks a cache may hold: selected per cache, recorded in its header (spec §2.2,
/// §7.1). Every base page is also a valid zero-aware page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The ZipFusion paper's format: a block is coded when all its exponents lie in
    /// `[b, b + 15]`, else raw.
    #[default]
    Base,
    /// Base blocks, plus zero-aware blocks for blocks with exact zeros: nonzero exponents
    /// in `[b, b + 13]`, exponent 0 coded as `d = 7` (issue 17, "Beyond the seed").
    ZeroAware,
}

impl Variant {
    /// Both variants, base first.
    pub const ALL: [Variant; 2] = [Variant::Base, Variant::ZeroAware];

    /// The header's variant byte (spec §7.1): 0 base, 1 zero-aware.
    pub const fn byte(self) -> u8 {
        match self {
            Variant::Base => 0,
            Variant::ZeroAware => 1,
        }
    }

    /// The variant of a header's variant byte, if it names one.
    pub const fn from_byte(byte: u8) -> Option<Variant> {
        match byte {
            0 => Some(Variant::Base),
            1 => Some(Variant::ZeroAware),
            _ => None,
        }
    }

    /// `"base"` or `"zero-aware"`, as summaries print it.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Base => "base",
            Variant::ZeroAware => "zero-aware",
        }
    }
}

/// How one block is stored: its metadata byte, decoded (spec §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockMeta {
    /// Coded, base `b = 2 * half_base` (`half_base <= 120`): byte `half_base`.
    Coded {
        /// `b / 2`.
        half_base: u8,
    },
    /// Coded zero-aware, base `b = 2 * half_base`: byte `0x80 | half_base`.
    ZeroAware {
        /// `b / 2`.
        half_base: u8,
    },
    /// Raw BF16 words: byte `0xff`.
    Raw,
}

/// Why a metadata byte is invalid (the page parser adds where it stood).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetaByteFault {
    /// `b/2 > 120`: `b/2 + d` could exceed 127.
    HalfBaseTooLarge,
    /// A zero-aware block in a base-variant cache.
    ZeroAwareInBase,
}

impl BlockMeta {
    /// The metadata byte.
    pub const fn byte(self) -> u8 {
        match self {
            BlockMeta::Coded { half_base } => half_base,
            BlockMeta::ZeroAware { half_base } => ZERO_AWARE_FLAG | half_base,
            BlockMeta::Raw => RAW_BLOCK_BYTE,
        }
    }

    /// Reads a metadata byte of a `variant` cache: 0x00..=0x78 coded, 0x80..=0xf8
    /// zero-aware (zero-aware caches only), 0xff raw (spec §5.1).
    pub(crate) const fn from_byte(
        byte: u8,
        variant: Variant,
    ) -> std::result::Result<BlockMeta, MetaByteFault> {
        if byte == RAW_BLOCK_BYTE {
            return Ok(BlockMeta::Raw);
        }
        let zero_aware = byte & ZERO_AWARE_FLAG != 0;
        if zero_aware && matches!(variant, Variant::Base) {
            return Err(MetaByteFault::ZeroAwareInBase);
        }
        let half_base = byte & !ZERO_AWARE_FLAG;
        if half_base > MAX_HALF_BASE {
            return Err(MetaByteFault::HalfBaseTooLarge);
        }
        Ok(if zero_aware { BlockMeta::ZeroAware { half_base } } else { BlockMeta::Coded { half_base } })
    }

    /// Bytes the block takes in its page: [`CODED_BLOCK_LEN`] or [`RAW_BLOCK_LEN`].
    pub const fn encoded_len(self) -> usize {
        match self {
            BlockMeta::Raw => RAW_BLOCK_LEN,
            _ => CODED_BLOCK_LEN,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fragment order (spec §3).
// ---------------------------------------------------------------------------------------

/// The `(token, channel)` inside its block of value `value` (0..16) of lane `lane`
/// (0..32), for a K or a V block (spec §3.2, §3.3).
///
/// Lane `l` holds 4 `mma.m16n8k16` B fragments `f = value / 4`, element `i = value % 4`
/// of each at row `k = 2 (l % 4) + (i & 1) + 8 (i >> 1)` and column `n = l / 4` of its
/// 16 x 8 tile (the PTX ISA's B fragment layout for `.bf16`). K is the B operand of
/// `Q·Kᵀ` (k = channel, n = token): fragment `f` is channels `16 (f / 2)..`, tokens
/// `8 (f % 2)..`. V is the B operand of `P·V` (k = token, n = channel): fragment `f` is
/// tokens `0..16`, channels `8 f..`.
///
/// # Panics
/// If `lane >= 32` or `value >= 16` (a caller's index, like slice indexing).
pub const fn fragment_coords(kind: KvKind, lane: usize, value: usize) -> (usize, usize) {
    assert!(lane < LANES && value < LANE_VALUES, "lane < 32 and value < 16");
    let (fragment, element) = (value / 4, value % 4);
    let k = 2 * (lane % 4) + (element & 1) + 8 * (element >> 1);
    let n = lane / 4;
    match kind {
        KvKind::K => (8 * (fragment % 2) + n, 16 * (fragment / 2) + k),
        KvKind::V => (k, 8 * fragment + n),
    }
}

/// For each lane-major position `16 lane + value` of a block, the index `32 token +
/// channel` of its value in the block's token-major tile.
const fn fragment_order(kind: KvKind) -> [u16; BLOCK_VALUES] {
    let mut order = [0u16; BLOCK_VALUES];
    let mut at = 0;
    while at < BLOCK_VALUES {
        let (token, channel) = fragment_coords(kind, at / LANE_VALUES, at % LANE_VALUES);
        order[at] = (token * BLOCK_CHANNELS + channel) as u16;
        at += 1;
    }
    order
}

/// [`fragment_order`] of K and V blocks, indexed by `kind as usize`.
pub(crate) static FRAGMENT_ORDER: [[u16; BLOCK_VALUES]; 2] =
    [fragment_order(KvKind::K), fragment_order(KvKind::V)];

// ---------------------------------------------------------------------------------------
// Pages (spec §5).
// ---------------------------------------------------------------------------------------

/// Bytes of an entry's first-block offset, a `u32` from the page start (spec §5.1).
pub const OFFSET_LEN: usize = 4;
/// Alignment of every block, and of each head's pair of metadata entries, relative to
/// the page start; pages in a container start 16-byte aligned too (spec §5.2, §7.2).
pub const ALIGN: usize = 16;

/// The dimensions one page's layout depends on: H KV heads of head_dim D. A page holds
/// [`PAGE_TOKENS`] tokens of one layer's K and V, `16 x H x D` values of each (spec §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageShape {
    /// H: KV heads.
    pub kv_heads: usize,
    /// D: values per head per token, a positive multiple of [`BLOCK_CHANNELS`].
    pub head_dim: usize,
}

impl PageShape {
    /// Checks the shape ([`PageShape::validate`]).
    ///
    /// # Errors
    /// As [`PageShape::validate`].
    pub fn new(kv_heads: usize, head_dim: usize) -> Result<Self> {
        let shape = PageShape { kv_heads, head_dim };
        shape.validate()?;
        Ok(shape)
    }

    /// Checks that H >= 1, that D is a positive multiple of 32, and that the largest page
    /// of this shape fits the `u32` offsets (spec §5.2).
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for H = 0 or D = 0 (as a cache's zero dimension is),
    /// [`Error::HeadDimUnsupported`] for a D that is not a multiple of 32,
    /// [`Error::ShapeTooLarge`]; both shape errors report the page as the one-layer,
    /// 16-token cache it is.
    pub fn validate(&self) -> Result<()> {
        if self.kv_heads == 0 || self.head_dim == 0 {
            return Err(Error::InvalidShape {
                layers: 1,
                kv_heads: self.kv_heads,
                head_dim: self.head_dim,
                tokens: PAGE_TOKENS,
            });
        }
        if !self.head_dim.is_multiple_of(BLOCK_CHANNELS) {
            return Err(Error::HeadDimUnsupported { head_dim: self.head_dim });
        }
        let too_large = Error::ShapeTooLarge {
            layers: 1,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            tokens: PAGE_TOKENS,
        };
        let blocks = self.kv_heads.checked_mul(2 * self.blocks_per_entry()).ok_or(too_large.clone())?;
        let max = blocks
            .checked_mul(RAW_BLOCK_LEN)
            .and_then(|b| b.checked_add(2 * self.kv_heads * self.entry_stride()))
            .ok_or(too_large.clone())?;
        if u32::try_from(max).is_err() {
            return Err(too_large);
        }
        Ok(())
    }

    /// Blocks per (head, kind) entry: `D / 32`; block `j` holds channels `32 j..32 j + 32`
    /// (spec §5.2).
    pub const fn blocks_per_entry(&self) -> usize {
        self.head_dim / BLOCK_CHANNELS
    }

    /// Metadata entries: one per (head, kind), `2 H` (spec §5.1).
    pub const fn entries(&self) -> usize {
        2 * self.kv_heads
    }

    /// The entry of `(head, kind)`: `2 head + kind`, K before V (spec §5.1).
    pub const fn entry(&self, head: usize, kind: KvKind) -> usize {
        2 * head + kind as usize
    }

    /// Bytes per metadata entry: the 4-byte offset and one byte per block, rounded up to
    /// a multiple of 8, so each head's K and V entries fill whole 16-byte units
    /// (spec §5.1).
    pub const fn entry_stride(&self) -> usize {
        (OFFSET_LEN + self.blocks_per_entry()).next_multiple_of(8)
    }

    /// Bytes of a page's metadata, where its first block starts: `2 H x`
    /// [`PageShape::entry_stride`], a multiple of 16 (spec §5.2).
    pub const fn metadata_len(&self) -> usize {
        self.entries() * self.entry_stride()
    }

    /// Values of one kind in a page: `16 x H x D` (a `[16, H, D]` token-major slice).
    pub const fn values_per_kind(&self) -> usize {
        PAGE_TOKENS * self.kv_heads * self.head_dim
    }

    /// Blocks in a page: `2 H D / 32`.
    pub const fn blocks(&self) -> usize {
        self.entries() * self.blocks_per_entry()
    }

    /// Bytes of a page whose blocks are all coded: the smallest page of this shape.
    pub const fn min_page_len(&self) -> usize {
        self.metadata_len() + self.blocks() * CODED_BLOCK_LEN
    }

    /// Bytes of a page whose blocks are all raw: the largest page of this shape.
    pub const fn max_page_len(&self) -> usize {
        self.metadata_len() + self.blocks() * RAW_BLOCK_LEN
    }
}

// ---------------------------------------------------------------------------------------
// The cache container (spec §7).
// ---------------------------------------------------------------------------------------

/// Magic of a whole-cache container, the ASCII bytes `KVZF` (spec §7.1).
pub const MAGIC: [u8; 4] = *b"KVZF";
/// Version of the containers and pages this crate writes and reads (spec §7.1).
pub const VERSION: u16 = 1;
/// Bytes of the container header; the first page follows it, 16-byte aligned (spec §7.1).
pub const HEADER_LEN: usize = 48;
/// Container flag bit 0: the header holds the Adler-32 of the cache's values (spec §7.3).
pub const FLAG_CHECKSUM: u8 = 1;
/// Every container flag bit version 1 defines; any other set bit is rejected.
pub const KNOWN_FLAGS: u8 = FLAG_CHECKSUM;

/// Byte offsets of the container header fields (spec §7.1). All integers are
/// little-endian.
pub mod header {
    /// `[u8; 4]` magic, [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u16` format version, [`super::VERSION`].
    pub const VERSION: usize = 4;
    /// `u8` variant: 0 base, 1 zero-aware ([`super::Variant::byte`]).
    pub const VARIANT: usize = 6;
    /// `u8` flags; bit 0 is [`super::FLAG_CHECKSUM`], the others must be zero.
    pub const FLAGS: usize = 7;
    /// `u32` L, layers (>= 1).
    pub const LAYERS: usize = 8;
    /// `u32` H, KV heads (>= 1).
    pub const KV_HEADS: usize = 12;
    /// `u32` D, head_dim (a positive multiple of 32).
    pub const HEAD_DIM: usize = 16;
    /// `u32` reserved, zero.
    pub const RESERVED0: usize = 20;
    /// `u64` T, tokens (>= 1).
    pub const TOKENS: usize = 24;
    /// `u32` Adler-32 of the values with flag bit 0, else zero.
    pub const CHECKSUM: usize = 32;
    /// `u32` CRC-32C of the 48 header bytes with this field read as zero.
    pub const HEADER_CRC: usize = 36;
    /// `[u8; 8]` reserved, zero.
    pub const RESERVED1: usize = 40;
    /// The shape fields L, H, D and T, as [`bf16_field::header::read_shape`] reads them.
    pub const SHAPE: bf16_field::header::ShapeFields = bf16_field::header::ShapeFields {
        layers: LAYERS,
        kv_heads: KV_HEADS,
        head_dim: HEAD_DIM,
        tokens: TOKENS,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_bytes_round_trip_and_reject_what_could_carry() {
        for byte in 0..=255u8 {
            for variant in Variant::ALL {
                match BlockMeta::from_byte(byte, variant) {
                    Ok(meta) => assert_eq!(meta.byte(), byte),
                    Err(MetaByteFault::HalfBaseTooLarge) => assert!(byte & 0x7f > MAX_HALF_BASE),
                    Err(MetaByteFault::ZeroAwareInBase) => {
                        assert_eq!(variant, Variant::Base);
                        assert!(byte & 0x80 != 0 && byte != 0xff);
                    }
                }
            }
        }
        assert_eq!(BlockMeta::from_byte(120, Variant::Base), Ok(BlockMeta::Coded { half_base: 120 }));
        assert_eq!(BlockMeta::from_byte(121, Variant::Base), Err(MetaByteFault::HalfBaseTooLarge));
        assert_eq!(
            BlockMeta::from_byte(0xf8, Variant::ZeroAware),
            Ok(BlockMeta::ZeroAware { half_base: 120 })
        );
        assert_eq!(BlockMeta::from_byte(0xf9, Variant::ZeroAware), Err(MetaByteFault::HalfBaseTooLarge));
    }

    #[test]
    fn every_block_position_is_one_tile_value() {
        for order in &FRAGMENT_ORDER {
            let mut seen = [false; BLOCK_VALUES];
            for &i in order {
                assert!(!std::mem::replace(&mut seen[i as usize], true), "tile value {i} twice");
            }
        }
    }

    #[test]
    fn page_arithmetic_for_the_common_head_dims() {
        let s = PageShape::new(3, 64).unwrap();
        assert_eq!((s.blocks_per_entry(), s.entry_stride(), s.metadata_len()), (2, 8, 48));
        assert_eq!((s.min_page_len(), s.max_page_len()), (48 + 12 * 768, 48 + 12 * 1024));
        let s = PageShape::new(8, 128).unwrap();
        assert_eq!((s.entry_stride(), s.metadata_len()), (8, 128));
        let s = PageShape::new(1, 256).unwrap();
        assert_eq!((s.entry_stride(), s.metadata_len()), (16, 32));
        assert!(matches!(PageShape::new(1, 80), Err(Error::HeadDimUnsupported { head_dim: 80 })));
        assert!(matches!(PageShape::new(0, 64), Err(Error::InvalidShape { kv_heads: 0, .. })));
        assert!(matches!(PageShape::new(1, 0), Err(Error::InvalidShape { head_dim: 0, .. })));
        assert!(matches!(PageShape::new(1 << 20, 1 << 10), Err(Error::ShapeTooLarge { .. })));
    }
}
