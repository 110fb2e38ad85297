//! The per-block entropy model: the integer-only quantizer (spec §5.2, §5.3), the sparse
//! table's parse rules (spec §5.1) and the encode and packed decode tables (spec §5.4).

use crate::format::{
    ENTRY_FIELD_MASK, ENTRY_FREQ_SHIFT, ENTRY_SYMBOL_SHIFT, LOG2_FRAC_BITS, MAX_PRECISION, MAX_SYMBOLS,
    MIN_PRECISION,
};
use crate::{Error, Result};

/// `floor`-style fixed-point `log2(x)` with [`LOG2_FRAC_BITS`] = 32 fractional bits, by
/// integer arithmetic only (spec §5.3).
///
/// The integer part is `floor(log2 x)`; the mantissa `x / 2^floor(log2 x)` is held in
/// Q31 in a `u64` and squared 32 times (`m = (m * m) >> 31`, truncating), each squaring
/// that reaches 2.0 emitting a 1 bit and halving `m`. The result is within a few units
/// of `2^-32` of the true value and is bit-identical wherever the same 64-bit integer
/// operations are used (the CUDA encoder must reproduce it exactly).
///
/// # Panics
/// Never; `x = 0` returns 0 (the quantizer never asks for it).
pub const fn log2_q32(x: u32) -> u64 {
    if x == 0 {
        return 0;
    }
    let int_part = 31 - x.leading_zeros();
    let mut m: u64 = (x as u64) << (31 - int_part);
    let mut frac: u64 = 0;
    let mut i = 0;
    while i < LOG2_FRAC_BITS {
        m = (m * m) >> 31;
        frac <<= 1;
        if m >= 1 << 32 {
            m >>= 1;
            frac |= 1;
        }
        i += 1;
    }
    ((int_part as u64) << LOG2_FRAC_BITS) | frac
}

/// Entries of [`LOG2_TABLE`]: `log2_q32(f)` for `f` in `0..=4096`.
const LOG2_TABLE_LEN: usize = (1 << MAX_PRECISION) + 1;

/// `LOG2_TABLE[f] = log2_q32(f)`, built at compile time.
static LOG2_TABLE: [u64; LOG2_TABLE_LEN] = {
    let mut t = [0u64; LOG2_TABLE_LEN];
    let mut f = 1;
    while f < LOG2_TABLE_LEN {
        t[f] = log2_q32(f as u32);
        f += 1;
    }
    t
};

/// The fixed-point gain of giving a symbol its `(f + 1)`-th slot: `log2(f + 1) - log2(f)`
/// in Q32, for `1 <= f < 4096` (spec §5.3).
#[inline]
pub(crate) fn slot_gain(f: u32) -> u64 {
    LOG2_TABLE[f as usize + 1] - LOG2_TABLE[f as usize]
}

/// The quantizer's total order on slots: `(count x gain, symbol)`, larger gain first,
/// then the smaller symbol first. `key` is the product, exact in `u128`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct SlotKey {
    weight: u128,
    symbol: u8,
}

impl SlotKey {
    fn new(count: u64, f: u32, symbol: u8) -> Self {
        SlotKey { weight: count as u128 * slot_gain(f) as u128, symbol }
    }

    /// True if `self` ranks strictly before `other` in the quantizer's order.
    fn beats(self, other: SlotKey) -> bool {
        self.weight > other.weight || (self.weight == other.weight && self.symbol < other.symbol)
    }
}

/// A block's sparse entropy model: the present symbols in ascending order with their
/// quantized frequencies, which sum to exactly `2^precision` (spec §5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    precision: u8,
    /// `(symbol, freq)`, symbols strictly ascending, every `freq >= 1`.
    entries: Vec<(u8, u16)>,
}

impl Model {
    /// Quantizes a 256-bin symbol histogram to frequencies summing to `2^precision`,
    /// every present symbol at least 1 (spec §5.2).
    ///
    /// The result is the unique allocation that gives each present symbol one slot and
    /// then the `2^n - K` remaining slots to the best-ranked `(symbol, f)` "next slot"
    /// candidates, ranked by `count x (log2_q32(f + 1) - log2_q32(f))` (larger first,
    /// ties to the smaller symbol). As the per-symbol gains fall strictly with `f`, this
    /// is exactly the greedy maximiser of `sum count x log2 f`, i.e. the minimiser of the
    /// coded size `sum count x (n - log2 f)` up to the Q32 rounding. Integer-only; the
    /// computation starts from floor-scaled counts and moves single slots, so it takes a
    /// few hundred steps, not 4096.
    ///
    /// # Errors
    /// [`Error::UnsupportedPrecisionForEncode`] when `precision` is outside `1..=12` or
    /// `2^precision` is smaller than the number of distinct symbols, or when the
    /// histogram is empty.
    pub fn quantize(counts: &[u64; 256], precision: u8) -> Result<Model> {
        let present: Vec<(u8, u64)> =
            counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(s, &c)| (s as u8, c)).collect();
        let distinct = present.len();
        if !(MIN_PRECISION..=MAX_PRECISION).contains(&precision) || distinct == 0 || distinct > 1 << precision
        {
            return Err(Error::UnsupportedPrecisionForEncode { precision, distinct });
        }
        let total_slots: u32 = 1 << precision;
        if distinct == 1 {
            return Ok(Model { precision, entries: vec![(present[0].0, total_slots as u16)] });
        }
        let n: u128 = present.iter().map(|&(_, c)| c as u128).sum();
        // Floor-scaled start, every symbol at least 1.
        let mut freqs: Vec<u32> =
            present.iter().map(|&(_, c)| ((c as u128 * total_slots as u128 / n) as u32).max(1)).collect();
        let mut sum: u32 = freqs.iter().sum();

        // The best slot not yet held: symbol i's next slot (f_i -> f_i + 1).
        let best_free = |freqs: &[u32]| -> usize {
            let mut best = 0;
            for i in 1..present.len() {
                if SlotKey::new(present[i].1, freqs[i], present[i].0).beats(SlotKey::new(
                    present[best].1,
                    freqs[best],
                    present[best].0,
                )) {
                    best = i;
                }
            }
            best
        };
        // The worst slot held beyond the mandatory first: symbol i's last (f_i - 1 -> f_i).
        let worst_held = |freqs: &[u32]| -> Option<usize> {
            let mut worst: Option<usize> = None;
            for i in 0..present.len() {
                if freqs[i] < 2 {
                    continue;
                }
                let key = SlotKey::new(present[i].1, freqs[i] - 1, present[i].0);
                match worst {
                    Some(w) if !SlotKey::new(present[w].1, freqs[w] - 1, present[w].0).beats(key) => {}
                    _ => worst = Some(i),
                }
            }
            worst
        };

        while sum < total_slots {
            let i = best_free(&freqs);
            freqs[i] += 1;
            sum += 1;
        }
        while sum > total_slots {
            // sum > 2^n >= K, so some symbol holds a second slot.
            let Some(i) = worst_held(&freqs) else { break };
            freqs[i] -= 1;
            sum -= 1;
        }
        // Exchange phase: move a slot while a free one outranks a held one. Each move
        // strictly improves the held set in the total order, so this terminates; at the
        // end the held slots are exactly the top 2^n - K candidates.
        while let (Some(w), b) = (worst_held(&freqs), best_free(&freqs)) {
            let free = SlotKey::new(present[b].1, freqs[b], present[b].0);
            let held = SlotKey::new(present[w].1, freqs[w] - 1, present[w].0);
            if b == w || !free.beats(held) {
                break;
            }
            freqs[b] += 1;
            freqs[w] -= 1;
        }
        let entries = present.iter().zip(&freqs).map(|(&(s, _), &f)| (s, f as u16)).collect();
        Ok(Model { precision, entries })
    }

    /// Builds a model from explicit entries, checking every rule a decoder checks
    /// (spec §5.1): precision in `1..=12`, 1 to 256 entries, symbols strictly ascending,
    /// every frequency at least 1, frequencies summing to `2^precision`.
    ///
    /// # Errors
    /// [`Error::UnsupportedPrecision`], [`Error::BadSymbolCount`],
    /// [`Error::ZeroFrequency`], [`Error::DuplicateSymbol`],
    /// [`Error::SymbolsNotAscending`], [`Error::FrequencySumMismatch`].
    pub fn from_entries(precision: u8, entries: Vec<(u8, u16)>) -> Result<Model> {
        if !(MIN_PRECISION..=MAX_PRECISION).contains(&precision) {
            return Err(Error::UnsupportedPrecision { precision });
        }
        if entries.is_empty() || entries.len() > MAX_SYMBOLS {
            return Err(Error::BadSymbolCount { count: entries.len().min(u16::MAX as usize) as u16 });
        }
        let mut sum: u32 = 0;
        for (i, &(symbol, freq)) in entries.iter().enumerate() {
            if freq == 0 {
                return Err(Error::ZeroFrequency { symbol });
            }
            if i > 0 {
                let previous = entries[i - 1].0;
                if symbol == previous {
                    return Err(Error::DuplicateSymbol { symbol });
                }
                if symbol < previous {
                    return Err(Error::SymbolsNotAscending { previous, symbol });
                }
            }
            sum += freq as u32;
        }
        let expected = 1u32 << precision;
        if sum != expected {
            return Err(Error::FrequencySumMismatch { sum, expected });
        }
        Ok(Model { precision, entries })
    }

    /// The precision n: frequencies sum to `2^n`.
    pub fn precision(&self) -> u8 {
        self.precision
    }

    /// `(symbol, freq)` pairs, symbols strictly ascending.
    pub fn entries(&self) -> &[(u8, u16)] {
        &self.entries
    }

    /// Size of the serialized sparse model in bytes: `2 + 3 K` (spec §5.1).
    pub fn serialized_len(&self) -> usize {
        crate::format::MODEL_COUNT_LEN + crate::format::MODEL_ENTRY_LEN * self.entries.len()
    }

    /// Appends the sparse model: `u16` K, then K x (`u8` symbol, `u16` freq), LE.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.entries.len() as u16).to_le_bytes());
        for &(s, f) in &self.entries {
            out.push(s);
            out.extend_from_slice(&f.to_le_bytes());
        }
    }

    /// The packed decode table, `2^n` entries, one per slot (spec §5.4): slot `x` of
    /// symbol `s` (`cdf_s <= x < cdf_s + freq_s`, cdf in entry order) holds
    /// `s << 24 | (freq_s - 1) << 12 | (x - cdf_s)`.
    pub fn decode_table(&self) -> Vec<u32> {
        let mut table = Vec::with_capacity(1 << self.precision);
        for &(s, f) in &self.entries {
            let base = ((s as u32) << ENTRY_SYMBOL_SHIFT)
                | (((f as u32 - 1) & ENTRY_FIELD_MASK) << ENTRY_FREQ_SHIFT);
            table.extend((0..f as u32).map(|bias| base | bias));
        }
        table
    }

    /// Per-symbol `(freq, cdf)` for the encoder; absent symbols get `(0, 0)`.
    pub(crate) fn encode_table(&self) -> [EncEntry; 256] {
        let mut table = [EncEntry::default(); 256];
        let mut cdf = 0u32;
        for &(s, f) in &self.entries {
            table[s as usize] = EncEntry { freq: f as u32, cdf };
            cdf += f as u32;
        }
        table
    }

    /// The ideal coded size in bits of a histogram under this model,
    /// `sum count x (n - log2 freq)`; `None` if a counted symbol is absent.
    pub fn cross_entropy_bits(&self, counts: &[u64; 256]) -> Option<f64> {
        let mut freq = [0u16; 256];
        for &(s, f) in &self.entries {
            freq[s as usize] = f;
        }
        let mut bits = 0.0;
        for (s, &c) in counts.iter().enumerate() {
            if c > 0 {
                if freq[s] == 0 {
                    return None;
                }
                bits += c as f64 * (self.precision as f64 - (freq[s] as f64).log2());
            }
        }
        Some(bits)
    }
}

/// One symbol's encoder parameters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EncEntry {
    pub(crate) freq: u32,
    pub(crate) cdf: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_table_is_accurate_and_strictly_concave() {
        for (f, &entry) in LOG2_TABLE.iter().enumerate().skip(1) {
            let exact = (f as f64).log2() * (1u64 << 32) as f64;
            let got = entry as f64;
            assert!((exact - got).abs() < 16.0, "log2({f}): {got} vs {exact}");
        }
        for k in [1u32, 2, 4, 8, 1024, 4096] {
            assert_eq!(log2_q32(k), (k.trailing_zeros() as u64) << 32, "powers of two are exact");
        }
        // Gains must fall strictly, or the greedy set would not be a prefix per symbol.
        for f in 1..(1 << MAX_PRECISION) - 1 {
            assert!(slot_gain(f) > slot_gain(f + 1), "gain({f}) <= gain({})", f + 1);
        }
    }

    #[test]
    fn log2_table_checksum_is_pinned() {
        // The CUDA encoder must reproduce this table bit for bit (spec §5.3).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &v in LOG2_TABLE.iter() {
            for b in v.to_le_bytes() {
                h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
        assert_eq!(
            (LOG2_TABLE[3], LOG2_TABLE[4095], h),
            (6_807_362_105, 51_538_094_591, LOG2_TABLE_CHECKSUM)
        );
    }

    /// FNV-1a over the LE bytes of the 4097 table entries.
    const LOG2_TABLE_CHECKSUM: u64 = 14_205_008_391_168_983_591;

    /// Reference: greedy from all-ones, one slot at a time, by the same total order.
    fn greedy_reference(counts: &[u64; 256], precision: u8) -> Vec<(u8, u16)> {
        let present: Vec<(u8, u64)> =
            counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(s, &c)| (s as u8, c)).collect();
        let mut f = vec![1u32; present.len()];
        let mut left = (1u32 << precision) - present.len() as u32;
        while left > 0 {
            let mut best = 0;
            for i in 1..present.len() {
                if SlotKey::new(present[i].1, f[i], present[i].0).beats(SlotKey::new(
                    present[best].1,
                    f[best],
                    present[best].0,
                )) {
                    best = i;
                }
            }
            f[best] += 1;
            left -= 1;
        }
        present.iter().zip(f).map(|(&(s, _), f)| (s, f as u16)).collect()
    }

    fn random(rng: &mut kvcodec_testkit::Rng) -> u64 {
        rng.next() as u64
    }

    #[test]
    fn quantizer_matches_the_one_slot_greedy_reference() {
        let mut seed = kvcodec_testkit::Rng(7);
        for case in 0..300 {
            let mut counts = [0u64; 256];
            let distinct = 1 + (random(&mut seed) % if case % 10 == 0 { 256 } else { 48 }) as usize;
            for _ in 0..distinct {
                let s = random(&mut seed) % 256;
                // Heavy-tailed counts: a few huge, many rare.
                let c = match random(&mut seed) % 4 {
                    0 => 1 + random(&mut seed) % 3,
                    1 => 1 + random(&mut seed) % 100,
                    2 => 1 + random(&mut seed) % 10_000,
                    _ => 1 + random(&mut seed) % 200_000,
                };
                counts[s as usize] += c;
            }
            for precision in [8u8, 12] {
                let k = counts.iter().filter(|&&c| c > 0).count();
                if k > 1 << precision {
                    continue;
                }
                let m = Model::quantize(&counts, precision).unwrap();
                assert_eq!(
                    m.entries,
                    greedy_reference(&counts, precision),
                    "case {case} precision {precision}"
                );
                let sum: u32 = m.entries.iter().map(|&(_, f)| f as u32).sum();
                assert_eq!(sum, 1 << precision);
                assert!(m.entries.iter().all(|&(_, f)| f >= 1));
                Model::from_entries(precision, m.entries.clone()).unwrap();
            }
        }
    }

    #[test]
    fn quantizer_beats_naive_rounding() {
        // A skewed KV-like histogram: the optimum can never be worse than floor + fix-up.
        let mut counts = [0u64; 256];
        for (s, c) in
            [(127, 100_000u64), (126, 40_000), (128, 30_000), (125, 9_000), (129, 4_000), (124, 900)]
        {
            counts[s] = c;
        }
        for (s, c) in counts.iter_mut().enumerate().take(124).skip(100) {
            *c = 1 + (s as u64 % 5);
        }
        let m = Model::quantize(&counts, 12).unwrap();
        let best = m.cross_entropy_bits(&counts).unwrap();
        // Naive: floor, clamp to 1, give the remainder to the most frequent symbol.
        let n: u64 = counts.iter().sum();
        let mut naive: Vec<(u8, u16)> = (0..256)
            .filter(|&s| counts[s] > 0)
            .map(|s| (s as u8, ((counts[s] * 4096 / n) as u16).max(1)))
            .collect();
        let sum: i32 = naive.iter().map(|&(_, f)| f as i32).sum();
        let top = naive.iter().position(|&(s, _)| s == 127).unwrap();
        naive[top].1 = (naive[top].1 as i32 + 4096 - sum) as u16;
        let naive = Model::from_entries(12, naive).unwrap();
        assert!(best < naive.cross_entropy_bits(&counts).unwrap());
    }

    #[test]
    fn decode_table_packs_symbol_freq_and_bias() {
        let m = Model::from_entries(3, vec![(5, 2), (9, 1), (200, 5)]).unwrap();
        let t = m.decode_table();
        assert_eq!(t.len(), 8);
        assert_eq!(t[0], 5 << 24 | 1 << 12);
        assert_eq!(t[1], 5 << 24 | 1 << 12 | 1);
        assert_eq!(t[2], 9 << 24);
        assert_eq!(t[7], 200 << 24 | 4 << 12 | 4);
        let full = Model::from_entries(12, vec![(77, 4096)]).unwrap();
        assert!(
            full.decode_table().iter().enumerate().all(|(x, &e)| e == (77 << 24 | 4095 << 12 | x as u32))
        );
    }

    #[test]
    fn model_rules_are_typed() {
        assert_eq!(Model::from_entries(0, vec![(1, 1)]), Err(Error::UnsupportedPrecision { precision: 0 }));
        assert_eq!(Model::from_entries(13, vec![(1, 1)]), Err(Error::UnsupportedPrecision { precision: 13 }));
        assert_eq!(Model::from_entries(2, vec![]), Err(Error::BadSymbolCount { count: 0 }));
        assert_eq!(Model::from_entries(2, vec![(1, 0), (2, 4)]), Err(Error::ZeroFrequency { symbol: 1 }));
        assert_eq!(Model::from_entries(2, vec![(1, 2), (1, 2)]), Err(Error::DuplicateSymbol { symbol: 1 }));
        assert_eq!(
            Model::from_entries(2, vec![(3, 2), (1, 2)]),
            Err(Error::SymbolsNotAscending { previous: 3, symbol: 1 })
        );
        assert_eq!(
            Model::from_entries(2, vec![(1, 2), (2, 1)]),
            Err(Error::FrequencySumMismatch { sum: 3, expected: 4 })
        );
        let mut counts = [1u64; 256];
        counts[0] = 0;
        assert!(Model::quantize(&counts, 7).is_err());
        assert_eq!(Model::quantize(&counts, 8).unwrap().entries.len(), 255);
        assert!(Model::quantize(&[0; 256], 12).is_err());
    }
}
