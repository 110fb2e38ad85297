//! One physical KV block <-> one self-contained record (spec §2-§7): the block shape,
//! the encoder options, group centering and the section layout here; the encoder,
//! parser, decoder and inspector in the submodules.

mod decode;
mod encode;
mod inspect;
mod parse;

use bf16_field::exponent_of;

pub use decode::{decode_block, decode_block_into};
pub use encode::{encode_block, encode_block_with};
pub use inspect::{RecordInfo, inspect_record};
pub(crate) use parse::check_header_fields;
pub use parse::record_shape;

use crate::format::{
    self, DIRECTORY_LEN, HEADER_LEN, MODEL_COUNT_LEN, MODEL_ENTRY_LEN, PARTITIONS, PRECISION, WORD_LEN,
    align_up,
};
use crate::{Error, Result};

/// The shape of one physical KV block: L layers x {K, V} x `tokens` (B') x H x D.
///
/// The block holds `2L` groups in block order (layer 0 K, layer 0 V, layer 1 K, ...),
/// each `tokens x kv_heads x head_dim` BF16 values token-major, as
/// [`bf16_field::KvCache::block`] returns them. Every dimension must be in
/// `1..=65535` (the header's `u16` fields) and `N = 2 L B' H D` must fit the record's
/// `u32` fields together with the 48-byte header: `48 + 2N < 2^32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockShape {
    /// L: layers.
    pub layers: usize,
    /// H: KV heads per layer.
    pub kv_heads: usize,
    /// D: values per head per token.
    pub head_dim: usize,
    /// B': tokens in this block (B, or fewer for a cache's trailing block).
    pub tokens: usize,
}

impl BlockShape {
    /// Groups in the block: `2L`.
    pub fn groups(&self) -> usize {
        2 * self.layers
    }

    /// Values per group: `B' x H x D` (saturating; see [`BlockShape::values`]).
    pub fn values_per_group(&self) -> usize {
        self.tokens.saturating_mul(self.kv_heads).saturating_mul(self.head_dim)
    }

    /// Values in the block, `N = 2 L B' H D`, after checking every limit of the format.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a zero dimension, [`Error::DimensionTooLarge`] for one
    /// above 65535, [`Error::ShapeOverflow`] when `48 + 2N` does not fit in `u32`.
    pub fn values(&self) -> Result<usize> {
        let &BlockShape { layers, kv_heads, head_dim, tokens } = self;
        if layers == 0 || kv_heads == 0 || head_dim == 0 || tokens == 0 {
            return Err(Error::InvalidShape { layers, kv_heads, head_dim, tokens });
        }
        for (what, value) in
            [("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("tokens", tokens)]
        {
            if value > u16::MAX as usize {
                return Err(Error::DimensionTooLarge { what, value, max: u16::MAX as usize });
            }
        }
        let n = 2 * layers as u128 * kv_heads as u128 * head_dim as u128 * tokens as u128;
        if HEADER_LEN as u128 + 2 * n > u32::MAX as u128 {
            return Err(Error::ShapeOverflow { layers, kv_heads, head_dim, tokens });
        }
        Ok(n as usize)
    }
}

/// When the encoder stores a block raw (spec §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RawPolicy {
    /// Raw when the coded record would not be smaller than the raw one (the default).
    #[default]
    Auto,
    /// Always code (tests, worked examples); the record may be larger than raw.
    Never,
    /// Always raw.
    Always,
}

/// Encoder settings. The decoder needs none of them: everything is in the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Probability precision n, `1..=12` (spec §5.2); default [`format::PRECISION`] = 12.
    pub precision: u8,
    /// Raw fallback policy; default [`RawPolicy::Auto`].
    pub raw: RawPolicy,
    /// Store the Adler-32 of each block's values in its record (flag bit 1, spec §3),
    /// which every decoder then verifies; off by default.
    pub checksum: bool,
    /// The format version of the records and container to write: [`format::VERSION`] (4)
    /// or [`format::VERSION_3`], for readers that predate version 4 (a serving fleet
    /// upgraded in steps: the old nodes read 3, every new one reads both); `None`:
    /// [`format::VERSION`]. Version 3 records are about 496 bytes larger per block
    /// (spec §6.4). The GPU encoder writes version 4 only.
    pub version: Option<u16>,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions { precision: PRECISION, raw: RawPolicy::Auto, checksum: false, version: None }
    }
}

/// The checksum of a block (spec §3): the Adler-32 of its values as little-endian bytes,
/// group after group in block order.
pub fn block_checksum<'a>(groups: impl IntoIterator<Item = &'a [u16]>) -> u32 {
    use bf16_field::integrity::{adler32_combine, adler32_words};
    groups.into_iter().fold(1, |acc, g| adler32_combine(acc, adler32_words(g), 2 * g.len() as u64))
}

/// The center of one group: its most frequent exponent, the smallest on a tie (spec §2).
pub fn group_center(group: &[u16]) -> u8 {
    let mut counts = [0u32; 256];
    for &w in group {
        counts[exponent_of(w) as usize] += 1;
    }
    let mut best = 0;
    for (e, &c) in counts.iter().enumerate() {
        if c > counts[best] {
            best = e;
        }
    }
    best as u8
}

/// Maps exponent `e` of a group with center `c` to its symbol `(e + 127 - c) mod 256`.
#[inline(always)]
pub const fn center_symbol(exponent: u8, center: u8) -> u8 {
    exponent.wrapping_add(format::CENTER_SYMBOL.wrapping_sub(center))
}

/// The inverse of [`center_symbol`]: `(symbol + c - 127) mod 256`.
#[inline(always)]
pub const fn center_exponent(symbol: u8, center: u8) -> u8 {
    symbol.wrapping_add(center).wrapping_sub(format::CENTER_SYMBOL)
}

/// Section offsets of a coded record, derived from L, K, the word counts and the length
/// of the sign+mantissa section (spec §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    model: usize,
    directory: usize,
    words: usize,
    /// Byte offset of each partition's word stream.
    streams: [usize; PARTITIONS],
    sign_mantissa: usize,
    record_len: usize,
}

impl Layout {
    /// The layout of a record of `layers` layers, a model of `symbols` entries and these
    /// word counts, whose sign+mantissa section holds `section_len` bytes
    /// (`N - P`, [`payload_len`]: `N - 512` at most in version 4, `N` in versions 2 and 3), so that
    /// `record_len = sign_mantissa + section_len`. `None` when an offset overflows
    /// `usize` (a hostile word count).
    fn derive(
        layers: usize,
        symbols: usize,
        word_counts: &[u32; PARTITIONS],
        section_len: usize,
    ) -> Option<Layout> {
        let model = HEADER_LEN.checked_add(layers.checked_mul(2)?)?;
        let directory = align_up(model.checked_add(MODEL_COUNT_LEN + MODEL_ENTRY_LEN * symbols)?)?;
        let words = directory.checked_add(DIRECTORY_LEN)?;
        let mut streams = [0; PARTITIONS];
        let mut at = words;
        for (start, &count) in streams.iter_mut().zip(word_counts) {
            *start = at;
            at = align_up(at.checked_add((count as usize).checked_mul(WORD_LEN)?)?)?;
        }
        let record_len = at.checked_add(section_len)?;
        Some(Layout { model, directory, words, streams, sign_mantissa: at, record_len })
    }
}

/// Sign+mantissa bytes a coded record of `values` values and version `version` carries in
/// its lanes' initial states: `P = min(N, 512)` in version 4, 0 in versions 2 and 3
/// (spec §4, §6.4); its section holds the other `N - P`.
const fn payload_len(version: u16, values: usize) -> usize {
    if version == format::VERSION { format::payload_len(values) } else { 0 }
}

fn check_groups(groups_len: usize, lens: impl Iterator<Item = usize>, shape: &BlockShape) -> Result<()> {
    if groups_len != shape.groups() {
        return Err(Error::GroupCountMismatch { got: groups_len, expected: shape.groups() });
    }
    let expected = shape.values_per_group();
    for (group, got) in lens.enumerate() {
        if got != expected {
            return Err(Error::GroupLengthMismatch { group, got, expected });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centering_is_reversible_for_every_pair() {
        for c in 0..=255u8 {
            assert_eq!(center_symbol(c, c), 127);
            for e in 0..=255u8 {
                assert_eq!(center_exponent(center_symbol(e, c), c), e);
            }
        }
    }

    #[test]
    fn center_is_the_mode_smallest_on_ties() {
        // exponents 0x7f, 0x7f, 0x80, 0x80, 0x01: tie 0x7f/0x80 -> 0x7f.
        assert_eq!(group_center(&[0x3f80, 0x3f81, 0x4000, 0xc000, 0x0080]), 0x7f);
        assert_eq!(group_center(&[0x4000, 0xc000, 0x3f80]), 0x80);
        assert_eq!(group_center(&[]), 0);
    }

    #[test]
    fn layout_matches_the_spec_formula() {
        let l = Layout::derive(30, 40, &[1, 0, 8, 3, 0, 0, 0, 5], 1000).unwrap();
        assert_eq!(l.model, 48 + 60);
        assert_eq!(l.directory, (108usize + 2 + 120).div_ceil(16) * 16);
        assert_eq!(l.words, l.directory + 1056);
        assert_eq!(l.streams[1], l.words + 16);
        assert_eq!(l.streams[2], l.words + 16);
        assert_eq!(l.streams[3], l.words + 32);
        assert_eq!(l.sign_mantissa, l.streams[7] + 16);
        assert_eq!(l.record_len, l.sign_mantissa + 1000);
        assert!(Layout::derive(1, 1, &[u32::MAX; 8], usize::MAX - 10).is_none());
    }

    #[test]
    fn the_section_holds_n_minus_p_bytes_in_version_4_only() {
        use format::{VERSION, VERSION_2, VERSION_3};
        for (values, p) in [(1, 1), (528, 512), (511, 511), (512, 512), (513, 512), (184_320, 512)] {
            assert_eq!(values - payload_len(VERSION, values), values - p, "N = {values}");
            assert_eq!(values - payload_len(VERSION_3, values), values);
            assert_eq!(values - payload_len(VERSION_2, values), values);
        }
    }
}
