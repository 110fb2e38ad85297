//! Every constant of the GAAC format, version 2, and its layout arithmetic: groups and
//! tags, the block's planes and their fragment order, slots, and the container header.
//!
//! Each item names the section of `docs/formats/gaac.md` ("spec §n") that defines it.
//! Change a constant only together with that section and [`VERSION`]: the fused
//! attention kernels will be written against the same numbers.

use bf16_field::KvKind;

// ---------------------------------------------------------------------------------------
// Groups and tags (spec §2; the GAAC paper, "Overview (a) Format").
// ---------------------------------------------------------------------------------------

/// Consecutive channels of one token and KV head that share a tag (spec §2).
pub const GROUP_CHANNELS: usize = 8;
/// The largest calibrated base: `b + 7 <= 255`, so a 3-bit offset never leaves the
/// exponent's 8 bits (spec §2.1).
pub const MAX_BASE: u8 = 248;
/// The widest 3-bit offset `E - b` (spec §2.2).
pub const OFFSET3_MAX: u8 = 7;
/// The widest 4-bit offset `E - w` (spec §2.2).
pub const OFFSET4_MAX: u8 = 15;
/// How far below the base the 4-bit window starts: `w = b - 4` (clamped, [`window_start`]),
/// the "a window starting at b - 4 measured best" on real KV (spec §2.2).
pub const WINDOW_BELOW_BASE: u8 = 4;
/// The largest 4-bit window start: `w + 15 <= 255` (spec §2.2).
pub const MAX_WINDOW_START: u8 = 255 - OFFSET4_MAX;

/// A group's 2-bit tag (spec §2.2): how its 8 exponents are coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tag {
    /// Every exponent within `[b, b + 7]` of its channel's base: 3 bits each.
    Offset3 = 0,
    /// Every exponent within `[w, w + 15]`, `w` = [`window_start`]`(b)`: 4 bits each.
    Offset4 = 1,
    /// Raw 8-bit exponents.
    Raw = 2,
}

impl Tag {
    /// The tag of a 2-bit field; 3 is rejected (`None`).
    pub const fn from_bits(bits: u8) -> Option<Tag> {
        match bits {
            0 => Some(Tag::Offset3),
            1 => Some(Tag::Offset4),
            2 => Some(Tag::Raw),
            _ => None,
        }
    }

    /// Exponent bits per value of a group with this tag: 3, 4 or 8 (spec §2.2).
    pub const fn exponent_bits(self) -> usize {
        match self {
            Tag::Offset3 => 3,
            Tag::Offset4 => 4,
            Tag::Raw => 8,
        }
    }

    /// Bytes the group adds to its block beyond the uniform planes: 0, one byte of 4th
    /// bits, or five bytes of high exponent bits (spec §3.4, §3.5).
    pub const fn extra_bytes(self) -> usize {
        match self {
            Tag::Offset3 => 0,
            Tag::Offset4 => HI4_BYTES_PER_GROUP,
            Tag::Raw => RAW_BYTES_PER_GROUP,
        }
    }
}

/// The start of a channel's 4-bit window: `b - 4`, clamped to `0..=240` so that the
/// window `[w, w + 15]` stays within the exponent's 8 bits (spec §2.2).
pub const fn window_start(base: u8) -> u8 {
    let w = base.saturating_sub(WINDOW_BELOW_BASE);
    if w > MAX_WINDOW_START { MAX_WINDOW_START } else { w }
}

// ---------------------------------------------------------------------------------------
// Blocks and their planes (spec §3).
// ---------------------------------------------------------------------------------------

/// Tokens per block: a block is encoded when it fills (spec §3; the GAAC paper,
/// "Block-wise compression").
pub const BLOCK_TOKENS: usize = 16;
/// Head dimensions must be a multiple of this: one slab of the 3-bit plane is 8
/// fragment tiles of 8 channels (V) or of 16 channels x 8 tokens (K) (spec §3.2).
pub const HEAD_DIM_MULTIPLE: usize = 64;
/// Values of one `mma.m16n8k16` B fragment tile: 32 lanes x 4 (spec §3.1).
pub const TILE_VALUES: usize = 128;
/// Lanes of the warp that restores a block (spec §3.1).
pub const LANES: usize = 32;
/// Tiles per slab of the 3-bit plane: one bit per tile in each byte of a lane's word
/// (spec §3.2).
pub const SLAB_TILES: usize = 8;
/// Values per slab.
pub const SLAB_VALUES: usize = SLAB_TILES * TILE_VALUES;
/// Bytes of one slab of the 3-bit plane: three bit planes of 32 lane words (spec §3.2).
pub const SLAB_BYTES: usize = 3 * LANES * 4;
/// Bytes of 4th bits a 4-bit group adds (spec §3.4).
pub const HI4_BYTES_PER_GROUP: usize = 1;
/// Bytes of high exponent bits (5 per value) a raw group adds (spec §3.5).
pub const RAW_BYTES_PER_GROUP: usize = 5;
/// Alignment of slot capacities, and so of every slot's start (spec §4).
pub const SLOT_ALIGN: usize = 16;

/// The geometry of one block: 16 tokens x `head_dim` channels of one layer's K or V for
/// one KV head (spec §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockShape {
    /// D, a positive multiple of [`HEAD_DIM_MULTIPLE`].
    pub head_dim: usize,
}

impl BlockShape {
    /// A block shape of head_dim `head_dim`, if the format can hold it (a positive
    /// multiple of 64, at most 2^16 so that every block length fits `u32`).
    pub fn new(head_dim: usize) -> Option<BlockShape> {
        (head_dim > 0 && head_dim.is_multiple_of(HEAD_DIM_MULTIPLE) && head_dim <= 1 << 16)
            .then_some(BlockShape { head_dim })
    }

    /// Values of the block: `16 D`.
    pub const fn values(&self) -> usize {
        BLOCK_TOKENS * self.head_dim
    }

    /// Groups of the block: `2 D` (16 tokens x D/8).
    pub const fn groups(&self) -> usize {
        self.values() / GROUP_CHANNELS
    }

    /// Bytes of the tag plane: 2 bits per group (spec §3.3).
    pub const fn tags_len(&self) -> usize {
        self.groups() / 4
    }

    /// Bytes of the 3-bit plane: 3 bits per value (spec §3.2).
    pub const fn plane3_len(&self) -> usize {
        3 * self.values() / 8
    }

    /// Bytes of the sign+mantissa plane: one per value (spec §3.1).
    pub const fn sign_mantissa_len(&self) -> usize {
        self.values()
    }

    /// Offset of the 3-bit plane in a coded block.
    pub const fn plane3_at(&self) -> usize {
        self.tags_len()
    }

    /// Offset of the sign+mantissa plane in a coded block.
    pub const fn sign_mantissa_at(&self) -> usize {
        self.plane3_at() + self.plane3_len()
    }

    /// Bytes of a coded block whose groups are all 3-bit: the planes alone, where the
    /// 4th-bit and raw sections start (spec §3).
    pub const fn planes_len(&self) -> usize {
        self.sign_mantissa_at() + self.sign_mantissa_len()
    }

    /// Bytes of a coded block with `offset4` 4-bit and `raw` raw groups (spec §3).
    pub const fn coded_len(&self, offset4: usize, raw: usize) -> usize {
        self.planes_len() + offset4 * HI4_BYTES_PER_GROUP + raw * RAW_BYTES_PER_GROUP
    }

    /// Bytes of the longest coded block (every group raw): no slot needs more.
    pub const fn max_coded_len(&self) -> usize {
        self.coded_len(0, self.groups())
    }

    /// Bytes of a raw block: its BF16 words (spec §3.6).
    pub const fn raw_len(&self) -> usize {
        2 * self.values()
    }

    /// Fragment tiles of the block: `D / 8` for K and V alike (spec §3.1).
    pub const fn tiles(&self) -> usize {
        self.values() / TILE_VALUES
    }

    /// Whether `capacity` is a valid slot capacity: a multiple of 16 between
    /// [`BlockShape::planes_len`] and [`BlockShape::max_coded_len`] (spec §4).
    pub const fn capacity_valid(&self, capacity: usize) -> bool {
        capacity.is_multiple_of(SLOT_ALIGN)
            && capacity >= self.planes_len()
            && capacity <= self.max_coded_len()
    }

    /// The default slot capacity: the planes and [`DEFAULT_SLACK_EIGHTHS`] / 8 of a byte
    /// per group for the 4-bit and raw sections, rounded up to 16 bytes (spec §4): 1488
    /// bytes at D = 64, 2976 at D = 128.
    pub const fn default_capacity(&self) -> usize {
        let slack = (DEFAULT_SLACK_EIGHTHS * self.groups()).div_ceil(8);
        (self.planes_len() + slack).next_multiple_of(SLOT_ALIGN)
    }
}

/// The default slot's room for the 4-bit and raw sections, in eighths of a byte per group
/// of the block (spec §4): 48 bytes for the 128 groups of a D = 64 block. Chosen on the
/// SmolLM2 fixtures so that at least 99% of their blocks fit (docs/PERF.md, "GAAC"); the
/// room scales with the groups, while the spread of a block's length grows only with
/// their square root, so wider heads fit at least as often.
pub const DEFAULT_SLACK_EIGHTHS: usize = 3;

/// Where value `index` (0..16 D) of a block in fragment order sits: its `(token,
/// channel)` in the block (spec §3.1). Tile `t = index / 128`, lane `index / 4 mod 32`,
/// register half `r = index mod 4`, as the `mma.m16n8k16` B operand holds them:
///
/// * K (`S = Q Kᵀ`, k = channel, n = token): tile `t` is token tile `t / (D/16)` and
///   channel tile `t mod (D/16)`; token `8 (t / (D/16)) + lane / 4`, channel
///   `16 (t mod (D/16)) + 2 (lane mod 4) + (r mod 2) + 8 (r / 2)`.
/// * V (`O = P V`, k = token, n = channel): tile `t` holds channels `8t..8t + 8`; channel
///   `8t + lane / 4`, token `2 (lane mod 4) + (r mod 2) + 8 (r / 2)`.
pub const fn fragment_coords(kind: KvKind, head_dim: usize, index: usize) -> (usize, usize) {
    let tile = index / TILE_VALUES;
    let lane = (index / 4) % LANES;
    let r = index % 4;
    let pair = 2 * (lane % 4) + (r % 2) + 8 * (r / 2);
    match kind {
        KvKind::K => {
            let channel_tiles = head_dim / 16;
            (8 * (tile / channel_tiles) + lane / 4, 16 * (tile % channel_tiles) + pair)
        }
        KvKind::V => (pair, 8 * tile + lane / 4),
    }
}

/// Where the 3-bit field of fragment value `index` sits in a block's 3-bit plane: the
/// byte offset of its lane's word in bit plane 0 (planes 1 and 2 follow at +128 and
/// +256) and the bit within that little-endian `u32` (spec §3.2).
pub const fn plane3_position(index: usize) -> (usize, u32) {
    let tile = index / TILE_VALUES;
    let lane = (index / 4) % LANES;
    let r = index % 4;
    let slab = tile / SLAB_TILES;
    let m = tile % SLAB_TILES;
    (slab * SLAB_BYTES + 4 * lane, (8 * r + m) as u32)
}

// ---------------------------------------------------------------------------------------
// The container (spec §5).
// ---------------------------------------------------------------------------------------

/// The container's first four bytes (spec §5.1).
pub const MAGIC: [u8; 4] = *b"KVGA";
/// The newest format version (spec §5.1): its checksum (flag bit 0) is the Adler-32 of
/// every byte after the header, which catches every single-byte corruption (spec §7.3).
pub const VERSION: u16 = 2;
/// The first format version, which the decoders still read (spec §5.1): its checksum is
/// the Adler-32 of the decoded values, which misses some corruptions (spec §7.3).
pub const VERSION_1: u16 = 1;
/// The version the encoders write unless [`crate::EncodeOptions::version`] says otherwise:
/// [`VERSION`] (version 1 on request, for readers that predate version 2).
pub const DEFAULT_VERSION: u16 = VERSION;
/// Bytes of the container header (spec §5.1).
pub const HEADER_LEN: usize = 64;
/// Sections after the header start at multiples of this (spec §5.2).
pub const SECTION_ALIGN: usize = 16;
/// Flag bit 0: the header holds a checksum (spec §5.1): in version 2 the Adler-32 of the
/// container's bytes after the header, in version 1 that of the values.
pub const FLAG_CHECKSUM: u8 = 0x01;
/// Flag bit 1: the bases were calibrated on the cache's own first tokens, not given
/// (spec §5.1; the GAAC paper, "Usage": "each sequence calibrates its own bases").
pub const FLAG_SELF_CALIBRATED: u8 = 0x02;
/// Every flag bit this version knows.
pub const KNOWN_FLAGS: u8 = FLAG_CHECKSUM | FLAG_SELF_CALIBRATED;
/// The block status byte of a block coded in its slot (spec §5.3).
pub const STATUS_CODED: u8 = 0;
/// The block status byte of a block kept raw in the overflow section (spec §5.3).
pub const STATUS_RAW: u8 = 1;
/// Tokens a cache calibrates on when no bases are given (spec §5.4): the first 128 or
/// all, whichever is fewer.
pub const DEFAULT_CALIBRATION_TOKENS: usize = 128;

/// Byte offsets of the header fields (spec §5.1).
pub mod header {
    /// "KVGA".
    pub const MAGIC: usize = 0;
    /// `u16` version.
    pub const VERSION: usize = 4;
    /// Flags byte.
    pub const FLAGS: usize = 6;
    /// Reserved byte, zero.
    pub const RESERVED0: usize = 7;
    /// `u32` L.
    pub const LAYERS: usize = 8;
    /// `u32` H.
    pub const KV_HEADS: usize = 12;
    /// `u32` D.
    pub const HEAD_DIM: usize = 16;
    /// `u32` slot capacity in bytes.
    pub const SLOT_CAPACITY: usize = 20;
    /// `u64` T.
    pub const TOKENS: usize = 24;
    /// `u32` tokens the bases were calibrated on (self-calibrated), else 0.
    pub const CALIBRATION_TOKENS: usize = 32;
    /// `u32` blocks kept raw.
    pub const RAW_BLOCKS: usize = 36;
    /// `u32` checksum (flag bit 0), else 0: the Adler-32 of bytes 64.. (version 2) or of
    /// the values (version 1).
    pub const CHECKSUM: usize = 40;
    /// Reserved bytes 44..60, zero.
    pub const RESERVED1: usize = 44;
    /// `u32` CRC-32C of bytes 0..60.
    pub const HEADER_CRC: usize = 60;
    /// The shape fields L, H, D and T, as [`bf16_field::header::read_shape`] reads them.
    pub const SHAPE: bf16_field::header::ShapeFields = bf16_field::header::ShapeFields {
        layers: LAYERS,
        kv_heads: KV_HEADS,
        head_dim: HEAD_DIM,
        tokens: TOKENS,
    };
}
