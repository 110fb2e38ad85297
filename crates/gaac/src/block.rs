//! One block: 16 tokens x D channels of one layer's K or V for one KV head, coded in
//! uniform planes (spec §3) or kept raw.
//!
//! Inside the encoder and decoder a block's values are in natural order, `[16, D]`
//! token-major; the planes hold them in fragment order ([`fragment_coords`]), which the
//! [`FragmentOrder`] table maps once per (kind, D).

use bf16_field::{KvKind, exponent_of, sign_mantissa_of};

use crate::format::{
    BlockShape, GROUP_CHANNELS, HI4_BYTES_PER_GROUP, LANES, RAW_BYTES_PER_GROUP, SLAB_BYTES, SLAB_TILES,
    SLAB_VALUES, TILE_VALUES, Tag, fragment_coords, window_start,
};
use crate::{Error, Result};

/// The fragment order of a (kind, D) block as tables: the natural index `token * D +
/// channel` of value `p` is `lane_base[p / 4] + offsets[p mod 4]` ([`fragment_coords`]:
/// a lane's four values of a tile are channels `c, c + 1, c + 8, c + 9` of one token for
/// K, tokens `q, q + 1, q + 8, q + 9` of one channel for V).
#[derive(Clone, Debug)]
pub(crate) struct FragmentOrder {
    /// The kind: K and V tiles map to natural order differently.
    kind: KvKind,
    /// D.
    head_dim: usize,
    /// The natural index of each lane's first value per tile, tile-major.
    lane_base: Vec<u32>,
    /// The natural index of register half `r` relative to half 0.
    offsets: [usize; 4],
    /// The channel of each value, in fragment order.
    channels: Vec<u16>,
}

impl FragmentOrder {
    pub(crate) fn new(kind: KvKind, shape: BlockShape) -> FragmentOrder {
        let d = shape.head_dim;
        let natural = |p: usize| {
            let (token, channel) = fragment_coords(kind, d, p);
            token * d + channel
        };
        let lane_base: Vec<u32> = (0..shape.values() / 4).map(|q| natural(4 * q) as u32).collect();
        let offsets = std::array::from_fn(|r| natural(r) - natural(0));
        debug_assert!((0..shape.values()).all(|p| natural(p) == lane_base[p / 4] as usize + offsets[p % 4]));
        let channels = (0..shape.values()).map(|p| fragment_coords(kind, d, p).1 as u16).collect();
        FragmentOrder { kind, head_dim: d, lane_base, offsets, channels }
    }

    /// What decoding a head's blocks needs from its D bases, made once per head.
    pub(crate) fn head_tables(&self, bases: &[u8]) -> HeadTables {
        HeadTables {
            addends: self.channels.iter().map(|&c| bases[usize::from(c)]).collect(),
            window_shifts: bases.iter().map(|&b| window_start(b).wrapping_sub(b)).collect(),
        }
    }

    /// Moves fragment tile `t`'s 128 words (`tile`, in fragment order) to their places
    /// in `out`, the block's natural-order words, token `i`'s D channels
    /// at `i stride` (spec §3.1). A lane `l`'s four values are the 16-value run `16 (l /
    /// 4) ..` of the tile at `4 (l mod 4) + r`, and `q = 2 (l mod 4) + (r mod 2) + 8 (r /
    /// 2)`: for K a run is one token's 16 channels (pairs `r = 0, 1` to channels `2 (l
    /// mod 4) ..`, pairs `r = 2, 3` 8 channels on), for V one channel's 16 tokens.
    fn scatter_tile(&self, t: usize, tile: &[u16; TILE_VALUES], out: &mut [u16], stride: usize) {
        let d = self.head_dim;
        match self.kind {
            KvKind::K => {
                let channel_tiles = d / 16;
                let (token0, channel0) = (8 * (t / channel_tiles), 16 * (t % channel_tiles));
                for g in 0..TILE_VALUES / 16 {
                    // Word pairs `[a0 b0 a1 b1 a2 b2 a3 b3]` (`a` = halves 0, 1) to `[a0 a1
                    // a2 a3 b0 b1 b2 b3]`, in 64-bit words (each within one of the tile's
                    // stores, so that the loads are forwarded).
                    const LOW: u64 = 0xffff_ffff;
                    let x: [u64; 4] = std::array::from_fn(|k| four_words(tile, 16 * g + 4 * k));
                    let rows = [
                        (x[0] & LOW) | (x[1] << 32),
                        (x[2] & LOW) | (x[3] << 32),
                        (x[0] >> 32) | (x[1] & !LOW),
                        (x[2] >> 32) | (x[3] & !LOW),
                    ];
                    let row = words_at::<16>(out, (token0 + g) * stride + channel0);
                    for (four, v) in row.chunks_exact_mut(4).zip(rows) {
                        four.copy_from_slice(&split_words(v));
                    }
                }
            }
            KvKind::V => {
                // The tile is 8 runs (channels) of 16 words (tokens in run order): moved in
                // 4 x 4 blocks of words, each transposed in four 64-bit words.
                for p in 0..2 {
                    for q in 0..4 {
                        let mut x: [u64; 4] =
                            std::array::from_fn(|c| four_words(tile, 16 * (4 * p + c) + 4 * q));
                        transpose4(&mut x);
                        // Word `k` of the runs' quad `q` is run position `4 q + k`: token
                        // `2 q + (k mod 2) + 8 (k / 2)`.
                        for (k, v) in x.into_iter().enumerate() {
                            let token = 2 * q + (k % 2) + 8 * (k / 2);
                            let four = words_at::<4>(out, token * stride + 8 * t + 4 * p);
                            four.copy_from_slice(&split_words(v));
                        }
                    }
                }
            }
        }
    }
}

/// Every byte 1.
const BYTE_ONES: u64 = u64::from_le_bytes([1; 8]);
/// Bit `i` of byte `i`: with [`BYTE_ONES`], spreads the bits of a byte over 8 bytes.
const BIT_PER_BYTE: u64 = u64::from_le_bytes([1, 2, 4, 8, 16, 32, 64, 128]);
/// The low 7 bits of every byte.
const LOW7: u64 = u64::from_le_bytes([0x7f; 8]);
/// The high bit of every byte.
const HIGH_BITS: u64 = !LOW7;

/// Words `at .. at + 4` of a tile as one little-endian 64-bit word.
fn four_words(tile: &[u16; TILE_VALUES], at: usize) -> u64 {
    (0..4).fold(0, |acc, i| acc | (u64::from(tile[at + i]) << (16 * i)))
}

/// The four 16-bit words of a little-endian 64-bit word.
fn split_words(v: u64) -> [u16; 4] {
    [v as u16, (v >> 16) as u16, (v >> 32) as u16, (v >> 48) as u16]
}

/// Transposes a 4 x 4 matrix of 16-bit words, row `r` in `x[r]` (word `k` at bits `16 k`).
fn transpose4(x: &mut [u64; 4]) {
    const WORDS_0_2: u64 = 0x0000_ffff_0000_ffff;
    const LOW_HALF: u64 = 0xffff_ffff;
    for (a, b) in [(0, 1), (2, 3)] {
        let t = ((x[a] >> 16) ^ x[b]) & WORDS_0_2;
        x[b] ^= t;
        x[a] ^= t << 16;
    }
    for (a, b) in [(0, 2), (1, 3)] {
        let t = ((x[a] >> 32) ^ x[b]) & LOW_HALF;
        x[b] ^= t;
        x[a] ^= t << 32;
    }
}

/// A head's decoding tables ([`FragmentOrder::head_tables`]).
#[derive(Clone, Debug)]
pub(crate) struct HeadTables {
    /// The addends of a block of 3-bit groups in fragment order: byte `p` is the base of
    /// value `p`'s channel (spec §3.3).
    addends: Vec<u8>,
    /// Per channel, `w - b` modulo 256: what a 4-bit group's exponents move by from the
    /// 3-bit restore, less their 4th bits' 8 (spec §3.3).
    window_shifts: Vec<u8>,
}

/// The first [`TILE_VALUES`] bytes of `bytes` as an array (one length check for a tile).
fn tile_bytes(bytes: &[u8]) -> &[u8; TILE_VALUES] {
    bytes[..TILE_VALUES].try_into().expect("a tile's bytes")
}

/// `N` words of `out` from `at` as an array (one bounds check for `N` stores).
fn words_at<const N: usize>(out: &mut [u16], at: usize) -> &mut [u16; N] {
    (&mut out[at..at + N]).try_into().expect("N words")
}

/// Counts of a block's groups by tag, or of blocks by storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TagCounts {
    /// Groups with 3-bit offsets.
    pub offset3: usize,
    /// Groups with 4-bit offsets.
    pub offset4: usize,
    /// Groups with raw exponents.
    pub raw: usize,
}

impl TagCounts {
    /// All groups counted.
    pub fn total(&self) -> usize {
        self.offset3 + self.offset4 + self.raw
    }

    /// Adds another count.
    pub fn merge(&mut self, other: &TagCounts) {
        self.offset3 += other.offset3;
        self.offset4 += other.offset4;
        self.raw += other.raw;
    }

    fn add(&mut self, tag: Tag) {
        match tag {
            Tag::Offset3 => self.offset3 += 1,
            Tag::Offset4 => self.offset4 += 1,
            Tag::Raw => self.raw += 1,
        }
    }
}

/// The tag the encoder gives a group (spec §2.2): the narrowest that holds all 8.
fn group_tag(exponents: &[u8], bases: &[u8]) -> Tag {
    let within = |span: u8, start: fn(u8) -> u8| {
        exponents.iter().zip(bases).all(|(&e, &b)| e.wrapping_sub(start(b)) <= span && e >= start(b))
    };
    if within(7, |b| b) {
        Tag::Offset3
    } else if within(15, window_start) {
        Tag::Offset4
    } else {
        Tag::Raw
    }
}

/// The length a block of these words would code to, and its tag counts, without writing
/// it. `words` is `[16, D]` token-major, `bases` the block's D channel bases.
pub(crate) fn measure(words: &[u16], bases: &[u8], shape: BlockShape) -> (usize, TagCounts) {
    let mut counts = TagCounts::default();
    let mut exponents = [0u8; GROUP_CHANNELS];
    for (g, group) in words.chunks_exact(GROUP_CHANNELS).enumerate() {
        let c0 = (g * GROUP_CHANNELS) % shape.head_dim;
        for (e, &w) in exponents.iter_mut().zip(group) {
            *e = exponent_of(w);
        }
        counts.add(group_tag(&exponents, &bases[c0..c0 + GROUP_CHANNELS]));
    }
    (shape.coded_len(counts.offset4, counts.raw), counts)
}

/// Writes the coded block of `words` (`[16, D]` token-major) with channel bases `bases`
/// into `out`, which holds at least its length (from [`measure`]); returns the length.
pub(crate) fn encode_into(
    words: &[u16],
    bases: &[u8],
    shape: BlockShape,
    order: &FragmentOrder,
    out: &mut [u8],
) -> usize {
    let d = shape.head_dim;
    let groups = shape.groups();
    // The addend each value's 3-bit field is restored against (spec §3.7): the encoder
    // writes `E - addend` into the 3-bit plane.
    let mut addend = vec![0u8; shape.values()];
    let (tags, rest) = out.split_at_mut(shape.tags_len());
    let (plane3, rest) = rest.split_at_mut(shape.plane3_len());
    let (sign_mantissa, rest) = rest.split_at_mut(shape.sign_mantissa_len());
    tags.fill(0);
    // 4th bits go first, in group order, then all raw highs (spec §3.4, §3.5): the raw
    // highs wait in `highs` until the 4th bits are counted.
    let mut extra = 0usize;
    let mut highs = Vec::new();
    let mut exponents = [0u8; GROUP_CHANNELS];
    for g in 0..groups {
        let at = g * GROUP_CHANNELS;
        let c0 = at % d;
        let group_bases = &bases[c0..c0 + GROUP_CHANNELS];
        for (e, &w) in exponents.iter_mut().zip(&words[at..at + GROUP_CHANNELS]) {
            *e = exponent_of(w);
        }
        let tag = group_tag(&exponents, group_bases);
        tags[g / 4] |= (tag as u8) << (2 * (g % 4));
        let add = &mut addend[at..at + GROUP_CHANNELS];
        match tag {
            Tag::Offset3 => add.copy_from_slice(group_bases),
            Tag::Offset4 => {
                let mut hi = 0u8;
                for (j, ((a, &e), &b)) in add.iter_mut().zip(&exponents).zip(group_bases).enumerate() {
                    let offset = e - window_start(b);
                    hi |= (offset >> 3) << j;
                    *a = window_start(b) + (offset & 8);
                }
                rest[extra] = hi;
                extra += HI4_BYTES_PER_GROUP;
            }
            Tag::Raw => {
                let mut high = 0u64;
                for (j, (a, &e)) in add.iter_mut().zip(&exponents).enumerate() {
                    high |= u64::from(e >> 3) << (5 * j);
                    *a = e & !7;
                }
                highs.extend_from_slice(&high.to_le_bytes()[..RAW_BYTES_PER_GROUP]);
            }
        }
    }
    for (slab, plane) in plane3.chunks_exact_mut(SLAB_BYTES).enumerate() {
        for lane in 0..LANES {
            let mut w = [0u32; 3];
            for m in 0..SLAB_TILES {
                let q = (slab * SLAB_TILES + m) * LANES + lane;
                let base = order.lane_base[q] as usize;
                let mut fields = 0u32;
                for (r, &offset) in order.offsets.iter().enumerate() {
                    let i = base + offset;
                    fields |= u32::from(exponent_of(words[i]) - addend[i]) << (8 * r);
                    sign_mantissa[4 * q + r] = sign_mantissa_of(words[i]);
                }
                // Bit k of the four fields, one per byte, to bits 8r + m of plane k.
                for (k, wk) in w.iter_mut().enumerate() {
                    *wk |= ((fields >> k) & 0x0101_0101) << m;
                }
            }
            for (k, wk) in w.iter().enumerate() {
                let at = k * (SLAB_BYTES / 3) + 4 * lane;
                plane[at..at + 4].copy_from_slice(&wk.to_le_bytes());
            }
        }
    }
    rest[extra..extra + highs.len()].copy_from_slice(&highs);
    shape.planes_len() + extra + highs.len()
}

/// Reads a coded block's tags (spec §3.3) and returns its length and tag counts.
///
/// # Errors
/// In order (spec §7.2): [`Error::Truncated`] if `bytes` is shorter than the tag plane,
/// [`Error::UnknownTag`] for the first group of tag 3, [`Error::BlockExceedsSlot`] if the
/// tags size the block longer than `capacity`, [`Error::Truncated`] if `bytes` is shorter
/// than the block.
pub fn block_info(bytes: &[u8], shape: BlockShape, capacity: usize) -> Result<(usize, TagCounts)> {
    let tags = bytes
        .get(..shape.tags_len())
        .ok_or(Error::Truncated { needed: shape.tags_len(), got: bytes.len() })?;
    // Four 2-bit fields a byte, 32 a word: `11` is rejected, `01` is 4-bit, `10` raw. The
    // tag plane is `D / 2` bytes, a multiple of 8 (D is a multiple of 64).
    const LOW_BITS: u64 = u64::from_le_bytes([0x55; 8]);
    let (mut offset4, mut raw) = (0, 0);
    for (k, word) in tags.chunks_exact(8).enumerate() {
        let t = u64::from_le_bytes(word.try_into().expect("8 tag bytes"));
        let rejected = t & (t >> 1) & LOW_BITS;
        if rejected != 0 {
            let group = 32 * k + rejected.trailing_zeros() as usize / 2;
            return Err(Error::UnknownTag { group, head_dim: shape.head_dim });
        }
        offset4 += (t & !(t >> 1) & LOW_BITS).count_ones() as usize;
        raw += ((t >> 1) & !t & LOW_BITS).count_ones() as usize;
    }
    let counts = TagCounts { offset3: shape.groups() - offset4 - raw, offset4, raw };
    let len = shape.coded_len(counts.offset4, counts.raw);
    if len > capacity {
        return Err(Error::BlockExceedsSlot { len, capacity });
    }
    if bytes.len() < len {
        return Err(Error::Truncated { needed: len, got: bytes.len() });
    }
    Ok((len, counts))
}

/// Decodes a coded block whose tags [`block_info`] accepted into `out`, token `i`'s D
/// words at `out[i stride..]` (`stride >= D`, `out` at least `15 stride + D` long). `tables` are [`FragmentOrder::head_tables`] of the block's
/// bases. Cannot fail: every field of a block with valid tags and valid bases decodes to
/// some exponent in `0..=255`.
///
/// Every value is first restored as if its group were 3-bit (exponent `field + b`, the
/// common case, in whole tiles); then each 4-bit or raw group's 8 words, contiguous in
/// natural order, get their exponents moved by `addend - b` (spec §3.3), modulo 256.
pub(crate) fn decode_checked(
    bytes: &[u8],
    bases: &[u8],
    tables: &HeadTables,
    shape: BlockShape,
    order: &FragmentOrder,
    out: &mut [u16],
    stride: usize,
) {
    let plane3 = &bytes[shape.plane3_at()..shape.sign_mantissa_at()];
    let sign_mantissa = &bytes[shape.sign_mantissa_at()..shape.planes_len()];
    restore_tiles(plane3, sign_mantissa, &tables.addends, order, out, stride);
    fix_wide_groups(bytes, bases, &tables.window_shifts, shape, out, stride);
}

/// Every value of a block restored against `addends` (fragment order): the first step
/// of [`decode_checked`].
fn restore_tiles(
    plane3: &[u8],
    sign_mantissa: &[u8],
    addends: &[u8],
    order: &FragmentOrder,
    out: &mut [u16],
    stride: usize,
) {
    // A slab at a time, a tile at a time: byte `i` of bit plane `k` holds bit `k` of the
    // fields of value `i` of the slab's 8 tiles, tile `m` at bit `m` (spec §3.2), so a
    // tile's 128 values are restored with the same shifts and masks, branch-free, on
    // fixed-size arrays (no bounds check per value), then moved to natural order.
    let slabs = plane3.chunks_exact(SLAB_BYTES).zip(sign_mantissa.chunks_exact(SLAB_VALUES));
    // A tile's high and low bytes and its words, every element rewritten for each tile.
    let (mut high, mut low, mut tile) = ([0u8; TILE_VALUES], [0u8; TILE_VALUES], [0u16; TILE_VALUES]);
    for (slab, ((planes, sm), add)) in slabs.zip(addends.chunks_exact(SLAB_VALUES)).enumerate() {
        let [p0, p1, p2] = [0, 1, 2].map(|k| tile_bytes(&planes[k * TILE_VALUES..]));
        for (m, (sm, add)) in sm.chunks_exact(TILE_VALUES).zip(add.chunks_exact(TILE_VALUES)).enumerate() {
            let (sm, add) = (tile_bytes(sm), tile_bytes(add));
            // Byte-wide first (16 lanes per SSE2 op), then widened: the high and low byte
            // of each word.
            for i in 0..TILE_VALUES {
                let field = ((p0[i] >> m) & 1) | (((p1[i] >> m) & 1) << 1) | (((p2[i] >> m) & 1) << 2);
                // A valid base keeps `field + addend` within 255 (spec §2.2, §3.3).
                let exponent = field.wrapping_add(add[i]);
                high[i] = (sm[i] & 0x80) | (exponent >> 1);
                low[i] = (exponent << 7) | (sm[i] & 0x7f);
            }
            for ((w, &h), &l) in tile.iter_mut().zip(&high).zip(&low) {
                *w = u16::from_le_bytes([l, h]);
            }
            order.scatter_tile(slab * SLAB_TILES + m, &tile, out, stride);
        }
    }
}

/// The second step of [`decode_checked`]: the 4-bit and raw groups of a block restored
/// as 3-bit (exponent `field + b` modulo 256) get their own addends, `w + 8 h` (4th bits,
/// spec §3.4, in group order from the planes' end) or `8 x` (raw highs, §3.5, after the
/// 4th bits). A tag byte's 4-bit groups are its `01` fields, its raw groups its `10`.
fn fix_wide_groups(
    bytes: &[u8],
    bases: &[u8],
    window_shifts: &[u8],
    shape: BlockShape,
    out: &mut [u16],
    stride: usize,
) {
    let d = shape.head_dim;
    let tags = &bytes[..shape.tags_len()];
    let offset4: usize = tags.iter().map(|&t| (t & 0x55 & !(t >> 1)).count_ones() as usize).sum();
    let mut extra = shape.planes_len();
    let mut raw_at = shape.planes_len() + offset4;
    // A token's D / 8 groups are D / 32 tag bytes; a byte's four groups are 32 channels.
    for (token, row_tags) in tags.chunks_exact(d / 32).enumerate() {
        let row = token * stride;
        for (k, &t) in row_tags.iter().enumerate().filter(|&(_, &t)| t != 0) {
            // One bit per group that is not 3-bit (tags 1 and 2), at bit 2 j.
            let mut wide = (t | (t >> 1)) & 0x55;
            while wide != 0 {
                let j = wide.trailing_zeros() as usize / 2;
                wide &= wide - 1;
                let c0 = 32 * k + GROUP_CHANNELS * j;
                // What each value's exponent moves by, one per byte: its addend less the
                // base it was restored with.
                let shift = if (t >> (2 * j)) & 3 == Tag::Offset4 as u8 {
                    let hi = bytes[extra];
                    extra += HI4_BYTES_PER_GROUP;
                    // `w - b` and 8 where the 4th bit is set, added byte by byte.
                    let eights = {
                        let x = (u64::from(hi) * BYTE_ONES) & BIT_PER_BYTE;
                        (((x + LOW7) >> 7) & BYTE_ONES) << 3
                    };
                    let windows = u64::from_le_bytes(window_shifts[c0..c0 + 8].try_into().expect("8 shifts"));
                    ((windows & LOW7) + eights) ^ (windows & HIGH_BITS)
                } else {
                    let mut high = [0u8; 8];
                    high[..RAW_BYTES_PER_GROUP].copy_from_slice(&bytes[raw_at..raw_at + RAW_BYTES_PER_GROUP]);
                    raw_at += RAW_BYTES_PER_GROUP;
                    let high = u64::from_le_bytes(high);
                    let group_bases = &bases[c0..c0 + GROUP_CHANNELS];
                    let mut shift = [0u8; GROUP_CHANNELS];
                    for (j, (s, &b)) in shift.iter_mut().zip(group_bases).enumerate() {
                        *s = ((((high >> (5 * j)) & 0x1f) as u8) << 3).wrapping_sub(b);
                    }
                    u64::from_le_bytes(shift)
                };
                let shift = shift.to_le_bytes();
                for (w, &s) in words_at::<GROUP_CHANNELS>(out, row + c0).iter_mut().zip(&shift) {
                    *w = (*w & 0x807f) | (u16::from(((*w >> 7) as u8).wrapping_add(s)) << 7);
                }
            }
        }
    }
}
