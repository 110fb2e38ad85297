//! One block: 16 tokens x D channels of one layer's K or V for one KV head, coded in
//! uniform planes (spec §3) or kept raw.
//!
//! Inside the encoder and decoder a block's values are in natural order, `[16, D]`
//! token-major; the planes hold them in fragment order ([`fragment_coords`]), which the
//! [`FragmentOrder`] table maps once per (kind, D).

use bf16_field::{KvKind, exponent_of, join, sign_mantissa_of};

use crate::format::{
    BlockShape, GROUP_CHANNELS, HI4_BYTES_PER_GROUP, LANES, RAW_BYTES_PER_GROUP, SLAB_BYTES, SLAB_TILES,
    TILE_VALUES, Tag, fragment_coords, window_start,
};
use crate::{Error, Result};

/// The fragment order of a (kind, D) block as a table: for fragment index `p`, the
/// natural index `token * D + channel` of its value.
#[derive(Clone, Debug)]
pub(crate) struct FragmentOrder {
    /// `natural[p]`: the value at fragment index `p`.
    natural: Vec<u32>,
}

impl FragmentOrder {
    pub(crate) fn new(kind: KvKind, shape: BlockShape) -> FragmentOrder {
        let n = shape.values();
        let natural = (0..n)
            .map(|p| {
                let (token, channel) = fragment_coords(kind, shape.head_dim, p);
                (token * shape.head_dim + channel) as u32
            })
            .collect();
        FragmentOrder { natural }
    }
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
                let p0 = (slab * SLAB_TILES + m) * TILE_VALUES + 4 * lane;
                for r in 0..4 {
                    let p = p0 + r;
                    let i = order.natural[p] as usize;
                    let field = u32::from(exponent_of(words[i]) - addend[i]);
                    sign_mantissa[p] = sign_mantissa_of(words[i]);
                    let bit = 8 * r + m;
                    for (k, wk) in w.iter_mut().enumerate() {
                        *wk |= ((field >> k) & 1) << bit;
                    }
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
    let mut counts = TagCounts::default();
    for g in 0..shape.groups() {
        let bits = (tags[g / 4] >> (2 * (g % 4))) & 3;
        let tag = Tag::from_bits(bits).ok_or(Error::UnknownTag { group: g, head_dim: shape.head_dim })?;
        counts.add(tag);
    }
    let len = shape.coded_len(counts.offset4, counts.raw);
    if len > capacity {
        return Err(Error::BlockExceedsSlot { len, capacity });
    }
    if bytes.len() < len {
        return Err(Error::Truncated { needed: len, got: bytes.len() });
    }
    Ok((len, counts))
}

/// Decodes a coded block whose tags [`block_info`] accepted into `out` (`[16, D]`
/// token-major words), with scratch `addend` of 16 D bytes. Cannot fail: every field of
/// a block with valid tags and valid bases decodes to some exponent in `0..=255`.
pub(crate) fn decode_checked(
    bytes: &[u8],
    bases: &[u8],
    shape: BlockShape,
    order: &FragmentOrder,
    addend: &mut [u8],
    out: &mut [u16],
) {
    let d = shape.head_dim;
    let tags = &bytes[..shape.tags_len()];
    let plane3 = &bytes[shape.plane3_at()..shape.sign_mantissa_at()];
    let sign_mantissa = &bytes[shape.sign_mantissa_at()..shape.planes_len()];
    // The 4th bits of 4-bit groups, then the raw highs (spec §3.4, §3.5): a tag byte's
    // 4-bit groups are its `01` fields.
    let offset4: usize = tags.iter().map(|&t| (t & 0x55 & !(t >> 1)).count_ones() as usize).sum();
    let mut extra = shape.planes_len();
    let mut raw_at = shape.planes_len() + offset4;
    for g in 0..shape.groups() {
        let at = g * GROUP_CHANNELS;
        let c0 = at % d;
        let group_bases = &bases[c0..c0 + GROUP_CHANNELS];
        let add = &mut addend[at..at + GROUP_CHANNELS];
        match (tags[g / 4] >> (2 * (g % 4))) & 3 {
            0 => add.copy_from_slice(group_bases),
            1 => {
                let hi = bytes[extra];
                extra += HI4_BYTES_PER_GROUP;
                for (j, (a, &b)) in add.iter_mut().zip(group_bases).enumerate() {
                    *a = window_start(b) + (((hi >> j) & 1) << 3);
                }
            }
            _ => {
                let mut high = [0u8; 8];
                high[..RAW_BYTES_PER_GROUP].copy_from_slice(&bytes[raw_at..raw_at + RAW_BYTES_PER_GROUP]);
                raw_at += RAW_BYTES_PER_GROUP;
                let high = u64::from_le_bytes(high);
                for (j, a) in add.iter_mut().enumerate() {
                    *a = (((high >> (5 * j)) & 0x1f) as u8) << 3;
                }
            }
        }
    }
    // A slab at a time, a lane at a time: the lane's three words hold the 3-bit fields of
    // its 32 values of the slab, bit `8 r + m` for tile `m`, half `r` (spec §3.2).
    for (slab, words) in plane3.chunks_exact(SLAB_BYTES).enumerate() {
        for lane in 0..LANES {
            let word = |k: usize| {
                let at = k * (SLAB_BYTES / 3) + 4 * lane;
                u32::from_le_bytes([words[at], words[at + 1], words[at + 2], words[at + 3]])
            };
            let (w0, w1, w2) = (word(0), word(1), word(2));
            for m in 0..SLAB_TILES {
                let p0 = (slab * SLAB_TILES + m) * TILE_VALUES + 4 * lane;
                for r in 0..4 {
                    let bit = 8 * r + m;
                    let field = ((w0 >> bit) & 1) | (((w1 >> bit) & 1) << 1) | (((w2 >> bit) & 1) << 2);
                    let p = p0 + r;
                    let i = order.natural[p] as usize;
                    // A valid base keeps `addend + field <= 255` (spec §2.2, §3.3).
                    out[i] = join(addend[i] + field as u8, sign_mantissa[p]);
                }
            }
        }
    }
}
