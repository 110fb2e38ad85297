//! One block: 16 tokens x D channels of one layer's K or V for one KV head, coded in
//! uniform planes (spec §3) or kept raw.
//!
//! Inside the encoder and decoder a block's values are in natural order, `[16, D]`
//! token-major; the planes hold them in fragment order ([`fragment_coords`]), which the
//! [`FragmentOrder`] table maps once per (kind, D).

use bf16_field::{KvKind, exponent_of, sign_mantissa_of};

use crate::format::{
    BlockShape, GROUP_CHANNELS, HI4_BYTES_PER_GROUP, LANES, RAW_BYTES_PER_GROUP, SLAB_BYTES, SLAB_TILES, Tag,
    fragment_coords, window_start,
};
use crate::{Error, Result};

/// The fragment order of a (kind, D) block as tables: the natural index `token * D +
/// channel` of value `p` is `lane_base[p / 4] + offsets[p mod 4]` ([`fragment_coords`]:
/// a lane's four values of a tile are channels `c, c + 1, c + 8, c + 9` of one token for
/// K, tokens `q, q + 1, q + 8, q + 9` of one channel for V).
#[derive(Clone, Debug)]
pub(crate) struct FragmentOrder {
    /// The natural index of each lane's first value per tile, tile-major.
    lane_base: Vec<u32>,
    /// The natural index of register half `r` relative to half 0.
    offsets: [usize; 4],
    /// The inverse: the fragment index of natural index `i`.
    fragment: Vec<u32>,
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
        let mut fragment = vec![0u32; shape.values()];
        for p in 0..shape.values() {
            fragment[natural(p)] = p as u32;
        }
        FragmentOrder { lane_base, offsets, fragment }
    }

    /// The addends of a block of 3-bit groups in fragment order: byte `p` is the base of
    /// value `p`'s channel (spec §3.3). A decoder copies it per block and patches the
    /// 4-bit and raw groups.
    pub(crate) fn base_addends(&self, bases: &[u8], shape: BlockShape) -> Vec<u8> {
        (0..shape.values())
            .map(|p| bases[(self.lane_base[p / 4] as usize + self.offsets[p % 4]) % shape.head_dim])
            .collect()
    }
}

/// The little-endian `u32` at `at` (one load: the slice's length is checked once).
fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
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
    // Four 2-bit fields a byte: `11` is rejected, `01` is 4-bit, `10` raw.
    let (mut offset4, mut raw) = (0, 0);
    for (k, &t) in tags.iter().enumerate() {
        let rejected = t & (t >> 1) & 0x55;
        if rejected != 0 {
            let group = 4 * k + rejected.trailing_zeros() as usize / 2;
            return Err(Error::UnknownTag { group, head_dim: shape.head_dim });
        }
        offset4 += (t & !(t >> 1) & 0x55).count_ones() as usize;
        raw += ((t >> 1) & !t & 0x55).count_ones() as usize;
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

/// Decodes a coded block whose tags [`block_info`] accepted into `out` (`[16, D]`
/// token-major words). `base_addends` is [`FragmentOrder::base_addends`] of the block's
/// bases, `addend` scratch of 16 D bytes. Cannot fail: every field of a block with valid
/// tags and valid bases decodes to some exponent in `0..=255`.
pub(crate) fn decode_checked(
    bytes: &[u8],
    bases: &[u8],
    base_addends: &[u8],
    shape: BlockShape,
    order: &FragmentOrder,
    addend: &mut [u8],
    out: &mut [u16],
) {
    let d = shape.head_dim;
    let tags = &bytes[..shape.tags_len()];
    let plane3 = &bytes[shape.plane3_at()..shape.sign_mantissa_at()];
    let sign_mantissa = &bytes[shape.sign_mantissa_at()..shape.planes_len()];
    // The addends in fragment order (spec §3.3): the bases, then the 4-bit and raw groups
    // patched. Their 4th bits come first, then the raw highs (spec §3.4, §3.5); a tag
    // byte's 4-bit groups are its `01` fields.
    addend.copy_from_slice(base_addends);
    let offset4: usize = tags.iter().map(|&t| (t & 0x55 & !(t >> 1)).count_ones() as usize).sum();
    let mut extra = shape.planes_len();
    let mut raw_at = shape.planes_len() + offset4;
    for (k, &t) in tags.iter().enumerate().filter(|&(_, &t)| t != 0) {
        for g in 4 * k..4 * k + 4 {
            let tag = (t >> (2 * (g % 4))) & 3;
            if tag == Tag::Offset3 as u8 {
                continue;
            }
            let at = g * GROUP_CHANNELS;
            let c0 = at % d;
            let fragment = &order.fragment[at..at + GROUP_CHANNELS];
            if tag == Tag::Offset4 as u8 {
                let hi = bytes[extra];
                extra += HI4_BYTES_PER_GROUP;
                for (j, &p) in fragment.iter().enumerate() {
                    addend[p as usize] = window_start(bases[c0 + j]) + (((hi >> j) & 1) << 3);
                }
            } else {
                let mut high = [0u8; 8];
                high[..RAW_BYTES_PER_GROUP].copy_from_slice(&bytes[raw_at..raw_at + RAW_BYTES_PER_GROUP]);
                raw_at += RAW_BYTES_PER_GROUP;
                let high = u64::from_le_bytes(high);
                for (j, &p) in fragment.iter().enumerate() {
                    addend[p as usize] = (((high >> (5 * j)) & 0x1f) as u8) << 3;
                }
            }
        }
    }
    // A slab at a time, a lane at a time: the lane's three words hold the 3-bit fields of
    // its 32 values of the slab, bit `8 r + m` for tile `m`, half `r` (spec §3.2); four
    // values are restored at once, one byte each, as a warp lane will.
    for (slab, words) in plane3.chunks_exact(SLAB_BYTES).enumerate() {
        for lane in 0..LANES {
            let word = |k: usize| le_u32(words, k * (SLAB_BYTES / 3) + 4 * lane);
            let (w0, w1, w2) = (word(0), word(1), word(2));
            for m in 0..SLAB_TILES {
                let q = (slab * SLAB_TILES + m) * LANES + lane;
                let four = |bytes: &[u8]| le_u32(bytes, 4 * q);
                let fields = ((w0 >> m) & 0x0101_0101)
                    | (((w1 >> m) & 0x0101_0101) << 1)
                    | (((w2 >> m) & 0x0101_0101) << 2);
                // A valid base keeps every byte of `fields + addends` within 255 (spec
                // §2.2, §3.3): no carry between bytes.
                let exponents = fields + four(addend);
                let sm = four(sign_mantissa);
                let high = (sm & 0x8080_8080) | ((exponents >> 1) & 0x7f7f_7f7f);
                let low = ((exponents << 7) & 0x8080_8080) | (sm & 0x7f7f_7f7f);
                let base = order.lane_base[q] as usize;
                for (r, &offset) in order.offsets.iter().enumerate() {
                    out[base + offset] = (((high >> (8 * r)) & 0xff) << 8 | ((low >> (8 * r)) & 0xff)) as u16;
                }
            }
        }
    }
}
