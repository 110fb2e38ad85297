//! One block of 16 tokens x 32 channels: whether it is coded, zero-aware or raw (spec
//! §2), its bytes in tensor-core fragment order (spec §3, §4), and the restore in
//! registers that the fused attention kernel will run (spec §3.4).

use bf16_field::{KvKind, exponent_of};

use crate::format::{
    BLOCK_VALUES, BlockMeta, CODE_BYTES_LEN, FRAGMENT_ORDER, GROUP_VALUES, LANE_VALUES, LOW_BYTES_LEN,
    MAX_HALF_BASE, RAW_BLOCK_LEN, Variant, WINDOW_SPAN, ZERO_AWARE_FLAG, ZERO_AWARE_WINDOW_SPAN, ZERO_D,
};

/// A block's values token-major: `tile[32 token + channel]`.
pub(crate) type Tile = [u16; BLOCK_VALUES];

/// `0x01` in every byte: multiplying a byte value by it replicates the byte.
const ONES: u64 = 0x0101_0101_0101_0101;
/// Bit 7 of every byte: where a restored high byte keeps its sign.
const SIGNS: u64 = 0x8080_8080_8080_8080;
/// Bits 0-2 of every byte: where a restored high byte takes its `d`.
const LOW3: u64 = 0x0707_0707_0707_0707;

/// The restore of spec §3.4 on up to 8 code bytes at once (SIMD within a register): the
/// high bytes of values `i` (bit 7 and bits 0-2 of code byte `i`) and of values `i + 4`
/// (bit 6 and bits 3-5), given a coded block's metadata byte. A mask and an add give the
/// first four, since `b/2 + d <= 127` never carries out of a byte; a shift pair, a mask
/// and an add the other four; a zero-aware block then clears the 7 exponent bits of each
/// `d = 7` value, leaving its sign.
#[inline(always)]
const fn restore_swar(codes: u64, meta_byte: u8) -> (u64, u64) {
    let half_base = (meta_byte & !ZERO_AWARE_FLAG) as u64 * ONES;
    let mut first = (codes & (SIGNS | LOW3)) + half_base;
    let mut second = (((codes >> 3) & LOW3) | ((codes << 1) & SIGNS)) + half_base;
    if meta_byte & ZERO_AWARE_FLAG != 0 {
        // Bit 0 of a byte: its first d is 7; bit 3: its second d is 7 (bits 0-5 of one
        // byte only, so the shifts bring nothing in from the next byte).
        let sevens = codes & (codes >> 1) & (codes >> 2);
        first &= !((sevens & ONES) * 0x7f);
        second &= !(((sevens >> 3) & ONES) * 0x7f);
    }
    (first, second)
}

/// The high bytes (`sign << 7 | E >> 1`) of one thread's 8 values from its 4 code bytes,
/// as the fused attention kernel restores them in registers (spec §3.4): `[values 0-3,
/// values 4-7]`, value `i`'s high byte in byte `i` of the first word, value `i + 4`'s in
/// byte `i` of the second. `codes` is the group's 4 code bytes as a little-endian `u32`
/// (byte `i` holds value `i`'s sign in bit 7 and `d` in bits 0-2, value `i + 4`'s sign in
/// bit 6 and `d` in bits 3-5); `meta_byte` is the block's metadata byte, which must be a
/// coded block's (`0x00..=0x78`, or `0x80..=0xf8` zero-aware; spec §5.1): for another
/// byte the result is unspecified.
///
/// The ZipFusion paper's example ("Restoring in registers"): code byte `0xd0` with
/// `b/2 = 63` restores `0xbf` (value 0: sign 1, d 0) and `0xc1` (value 4: sign 1, d 2):
///
/// ```
/// let [first, second] = zipfusion::restore_high_bytes(0xd0, 63);
/// assert_eq!((first as u8, second as u8), (0xbf, 0xc1));
/// ```
pub const fn restore_high_bytes(codes: u32, meta_byte: u8) -> [u32; 2] {
    let (first, second) = restore_swar(codes as u64, meta_byte);
    [first as u32, second as u32]
}

/// Whether a block is coded, zero-aware or raw (spec §2): coded when every exponent lies
/// in `[b, b + 15]` with `b` the smallest rounded down to even and `b/2 <= 120`; else, in
/// a zero-aware cache, zero-aware when it holds exponent-0 values and its other
/// exponents lie in `[b, b + 13]`; else raw.
pub(crate) fn classify(tile: &Tile, variant: Variant) -> BlockMeta {
    let (mut low, mut high) = (u8::MAX, 0u8);
    let (mut low_nonzero, mut high_nonzero, mut zeros) = (u8::MAX, 0u8, false);
    for &word in tile {
        let e = exponent_of(word);
        low = low.min(e);
        high = high.max(e);
        if e == 0 {
            zeros = true;
        } else {
            low_nonzero = low_nonzero.min(e);
            high_nonzero = high_nonzero.max(e);
        }
    }
    // The half base of the window [b, b + span] that holds exponents low..=high, if any.
    let window = |low: u8, high: u8, span: u8| -> Option<u8> {
        let base = low & !1;
        (base / 2 <= MAX_HALF_BASE && high.saturating_sub(base) <= span).then_some(base / 2)
    };
    if let Some(half_base) = window(low, high, WINDOW_SPAN) {
        return BlockMeta::Coded { half_base };
    }
    // Only a block with a zero and a nonzero value gets here: all zeros fit [0, 15].
    if variant == Variant::ZeroAware
        && zeros
        && let Some(half_base) = window(low_nonzero, high_nonzero, ZERO_AWARE_WINDOW_SPAN)
    {
        return BlockMeta::ZeroAware { half_base };
    }
    BlockMeta::Raw
}

/// A value's 4-bit code, `sign << 3 | d`, in a coded block of base `2 half_base` (spec
/// §2): `d = (E - b) >> 1`, or 7 for exponent 0 in a zero-aware block.
#[inline(always)]
fn code_of(word: u16, half_base: u8, zero_aware: bool) -> u8 {
    let sign = (word >> 15) as u8;
    let e = exponent_of(word);
    let d = if zero_aware && e == 0 { ZERO_D } else { (e - 2 * half_base) >> 1 };
    sign << 3 | d
}

/// Writes the block `tile` (a `kind` block) as `meta` says, in fragment order: 768 bytes
/// coded (spec §4.1) or 1024 raw (§4.2). `meta` must be [`classify`]'s answer for the
/// tile and `out` exactly `meta.encoded_len()` bytes.
pub(crate) fn write_block(tile: &Tile, kind: KvKind, meta: BlockMeta, out: &mut [u8]) {
    let order = &FRAGMENT_ORDER[kind as usize];
    let (half_base, zero_aware) = match meta {
        BlockMeta::Raw => {
            for (word, &at) in out.chunks_exact_mut(2).zip(order) {
                word.copy_from_slice(&tile[at as usize].to_le_bytes());
            }
            return;
        }
        BlockMeta::Coded { half_base } => (half_base, false),
        BlockMeta::ZeroAware { half_base } => (half_base, true),
    };
    let (low, codes) = out.split_at_mut(LOW_BYTES_LEN);
    let lanes = low.chunks_exact_mut(LANE_VALUES).zip(codes.chunks_exact_mut(LANE_VALUES / 2));
    for ((low, codes), order) in lanes.zip(order.chunks_exact(LANE_VALUES)) {
        let words: [u16; LANE_VALUES] = std::array::from_fn(|v| tile[order[v] as usize]);
        for (byte, word) in low.iter_mut().zip(words) {
            *byte = word as u8;
        }
        for (group, codes) in codes.chunks_exact_mut(GROUP_VALUES / 2).enumerate() {
            for (i, byte) in codes.iter_mut().enumerate() {
                let v = GROUP_VALUES * group + i;
                let first = code_of(words[v], half_base, zero_aware);
                let second = code_of(words[v + 4], half_base, zero_aware);
                *byte = (first & 8) << 4 | (first & 7) | (second & 8) << 3 | (second & 7) << 3;
            }
        }
    }
}

/// Reads a `kind` block stored as `meta` says into `tile` (spec §4): `bytes` is the block,
/// `meta.encoded_len()` bytes, which the caller's page checks (`page_info`) guarantee.
/// Every byte string of that length decodes: nothing here can fail. A shorter one is a
/// caller's bug: debug builds assert; release builds clamp the reads (the missing lanes'
/// values stay as they were), so even then nothing reads out of bounds or panics.
pub(crate) fn read_block(bytes: &[u8], kind: KvKind, meta: BlockMeta, tile: &mut Tile) {
    debug_assert_eq!(bytes.len(), meta.encoded_len(), "read_block takes exactly one block");
    let order = &FRAGMENT_ORDER[kind as usize];
    if meta == BlockMeta::Raw {
        for (word, &at) in bytes[..bytes.len().min(RAW_BLOCK_LEN)].chunks_exact(2).zip(order) {
            tile[at as usize] = u16::from_le_bytes([word[0], word[1]]);
        }
        return;
    }
    let meta_byte = meta.byte();
    let (low, codes) = bytes.split_at(bytes.len().min(LOW_BYTES_LEN));
    let codes = &codes[..codes.len().min(CODE_BYTES_LEN)];
    let lanes = low.chunks_exact(LANE_VALUES).zip(codes.chunks_exact(LANE_VALUES / 2));
    for ((low, codes), order) in lanes.zip(order.chunks_exact(LANE_VALUES)) {
        let codes = u64::from_le_bytes(std::array::from_fn(|i| codes[i]));
        let (first, second) = restore_swar(codes, meta_byte);
        let (first, second) = (first.to_le_bytes(), second.to_le_bytes());
        for group in 0..LANE_VALUES / GROUP_VALUES {
            for i in 0..GROUP_VALUES / 2 {
                let (v, at) = (GROUP_VALUES * group + i, 4 * group + i);
                tile[order[v] as usize] = u16::from_le_bytes([low[v], first[at]]);
                tile[order[v + 4] as usize] = u16::from_le_bytes([low[v + 4], second[at]]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{CODED_BLOCK_LEN, ZERO_AWARE_FLAG};

    /// The spec §2 definition, value by value: the high byte is `sign << 7 | (b/2 + d)`,
    /// or `sign << 7` for `d = 7` in a zero-aware block.
    fn high_byte(sign: u8, d: u8, meta_byte: u8) -> u8 {
        if meta_byte & ZERO_AWARE_FLAG != 0 && d == ZERO_D {
            sign << 7
        } else {
            sign << 7 | ((meta_byte & 0x7f) + d)
        }
    }

    #[test]
    fn the_papers_example_restores_0xbf_and_0xc1() {
        assert_eq!(restore_high_bytes(0xd0, 63), [0x3f3f_3fbf, 0x3f3f_3fc1], "code bytes 1-3 are 0");
        // Four bytes at once, each with its own codes, one base.
        let [first, second] = restore_high_bytes(u32::from_le_bytes([0xd0, 0x00, 0x7f, 0xbf]), 63);
        assert_eq!(first.to_le_bytes(), [0xbf, 0x3f, 0x46, 0xc6]);
        assert_eq!(second.to_le_bytes(), [0xc1, 0x3f, 0xc6, 0x46]);
    }

    #[test]
    fn the_word_restore_agrees_with_the_definition_for_every_code_byte_and_base() {
        for meta_byte in (0..=MAX_HALF_BASE).chain((0..=MAX_HALF_BASE).map(|h| h | ZERO_AWARE_FLAG)) {
            for code in 0..=255u8 {
                // The same byte in every lane position, and a neighbour that differs.
                let codes = u32::from_le_bytes([code, code ^ 0x5a, code, !code]);
                let [first, second] = restore_high_bytes(codes, meta_byte);
                for (i, c) in codes.to_le_bytes().into_iter().enumerate() {
                    let expect_first = high_byte(c >> 7, c & 7, meta_byte);
                    let expect_second = high_byte((c >> 6) & 1, (c >> 3) & 7, meta_byte);
                    assert_eq!(first.to_le_bytes()[i], expect_first, "byte {c:#04x} meta {meta_byte:#04x}");
                    assert_eq!(second.to_le_bytes()[i], expect_second, "byte {c:#04x} meta {meta_byte:#04x}");
                }
            }
        }
    }

    fn tile_of(f: impl Fn(usize) -> u16) -> Tile {
        std::array::from_fn(f)
    }

    #[test]
    fn classification_at_the_window_edges() {
        let at = |e0: u16, e1: u16| tile_of(|i| if i == 7 { e1 << 7 } else { e0 << 7 | (i as u16 & 0x7f) });
        let base = Variant::Base;
        assert_eq!(classify(&at(126, 141), base), BlockMeta::Coded { half_base: 63 }, "span 15 from even");
        assert_eq!(classify(&at(126, 142), base), BlockMeta::Raw, "span 16");
        assert_eq!(classify(&at(127, 141), base), BlockMeta::Coded { half_base: 63 }, "odd low");
        assert_eq!(classify(&at(127, 142), base), BlockMeta::Raw, "b = 126 misses 142");
        assert_eq!(classify(&at(240, 255), base), BlockMeta::Coded { half_base: 120 }, "top window");
        assert_eq!(classify(&at(242, 243), base), BlockMeta::Raw, "b/2 = 121 could carry");
        assert_eq!(classify(&at(0, 0), base), BlockMeta::Coded { half_base: 0 }, "all zero");
        assert_eq!(classify(&at(0, 15), base), BlockMeta::Coded { half_base: 0 });
        // Zeros: exponent 0 beside a window far above it.
        let zero = Variant::ZeroAware;
        assert_eq!(classify(&at(126, 0), base), BlockMeta::Raw);
        assert_eq!(classify(&at(126, 0), zero), BlockMeta::ZeroAware { half_base: 63 });
        let zeros_and = |high: u16| tile_of(|i| [0, 126 << 7, high << 7][i % 3]);
        assert_eq!(classify(&zeros_and(139), zero), BlockMeta::ZeroAware { half_base: 63 }, "span 13");
        assert_eq!(classify(&zeros_and(140), zero), BlockMeta::Raw, "span 14");
        // A block that fits whole stays a plain coded block in a zero-aware cache.
        let low = tile_of(|i| [0, 1 << 7, 15 << 7][i % 3]);
        assert_eq!(classify(&low, zero), BlockMeta::Coded { half_base: 0 });
    }

    #[test]
    fn blocks_round_trip_in_every_form() {
        let mut rng = kvcodec_testkit::Rng(9);
        for kind in KvKind::BOTH {
            for meta in
                [BlockMeta::Coded { half_base: 60 }, BlockMeta::ZeroAware { half_base: 60 }, BlockMeta::Raw]
            {
                let tile: Tile = std::array::from_fn(|_| {
                    let r = rng.next();
                    let sign = (r >> 31) as u16;
                    let mut e = 120 + (r % 14) as u16;
                    if matches!(meta, BlockMeta::ZeroAware { .. }) && r.is_multiple_of(5) {
                        e = 0;
                    }
                    let word = sign << 15 | e << 7 | (r >> 8) as u16 & 0x7f;
                    if meta == BlockMeta::Raw { r as u16 } else { word }
                });
                let mut bytes = vec![0u8; meta.encoded_len()];
                write_block(&tile, kind, meta, &mut bytes);
                let mut back = [0u16; BLOCK_VALUES];
                read_block(&bytes, kind, meta, &mut back);
                assert_eq!(back, tile, "{kind:?} {meta:?}");
            }
        }
        assert_eq!(CODED_BLOCK_LEN, 768);
    }
}
