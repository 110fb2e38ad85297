//! Entropy statistics of the exponent and sign+mantissa byte streams (the ExANS paper,
//! "Table 1"; the SplitZip paper, top-16 coverage).

use crate::field::{exponent_of, sign_mantissa_of};

/// A 256-bin histogram of byte values.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Histogram {
    /// `counts[b]`: occurrences of byte value `b`.
    pub counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; 256] }
    }
}

impl Histogram {
    /// Histogram of a byte stream.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        let mut h = Histogram::default();
        h.add_bytes(bytes);
        h
    }

    /// Adds every byte of `bytes`.
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.counts[b as usize] += 1;
        }
    }

    /// Adds another histogram bin by bin.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    /// Total observations.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Byte values seen at least once.
    pub fn distinct(&self) -> usize {
        self.counts.iter().filter(|&&c| c > 0).count()
    }

    /// The most frequent byte value (the smallest on a tie); 0 for an empty histogram.
    pub fn mode(&self) -> u8 {
        let mut best = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            if c > self.counts[best] {
                best = b;
            }
        }
        best as u8
    }

    /// Shannon entropy `H = -sum p log2 p` in bits per symbol; 0 for an empty histogram.
    pub fn entropy_bits(&self) -> f64 {
        let total = self.total() as f64;
        if total == 0.0 {
            return 0.0;
        }
        self.counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / total;
                -p * p.log2()
            })
            .sum()
    }

    /// Effective alphabet size `2^H` (the ExANS paper: "N_eff").
    pub fn effective_alphabet(&self) -> f64 {
        self.entropy_bits().exp2()
    }

    /// Byte values ordered by falling count, ties by value; only values seen.
    pub fn ranked(&self) -> Vec<(u8, u64)> {
        let mut seen: Vec<(u8, u64)> =
            self.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(b, &c)| (b as u8, c)).collect();
        seen.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        seen
    }

    /// Fraction of observations covered by the `k` most frequent values, in `[0, 1]`.
    pub fn top_k_coverage(&self, k: usize) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        let covered: u64 = self.ranked().iter().take(k).map(|&(_, c)| c).sum();
        covered as f64 / total as f64
    }
}

/// Histograms of both BF16 fields of one set of values.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldStats {
    /// The 8-bit exponent field.
    pub exponent: Histogram,
    /// The sign+mantissa byte.
    pub sign_mantissa: Histogram,
}

impl FieldStats {
    /// Statistics of BF16 words.
    pub fn of_words(words: &[u16]) -> Self {
        let mut s = FieldStats::default();
        s.add_words(words);
        s
    }

    /// Adds BF16 words.
    pub fn add_words(&mut self, words: &[u16]) {
        for &w in words {
            self.exponent.counts[exponent_of(w) as usize] += 1;
            self.sign_mantissa.counts[sign_mantissa_of(w) as usize] += 1;
        }
    }

    /// Adds another set's histograms.
    pub fn merge(&mut self, other: &FieldStats) {
        self.exponent.merge(&other.exponent);
        self.sign_mantissa.merge(&other.sign_mantissa);
    }

    /// Zero-order bound on the compression ratio when the exponent is entropy-coded at
    /// exactly `H(E)` bits and sign+mantissa is stored raw: `16 / (8 + H(E))`.
    pub fn exponent_coding_bound(&self) -> f64 {
        16.0 / (8.0 + self.exponent.entropy_bits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_of_known_distributions() {
        assert_eq!(Histogram::default().entropy_bits(), 0.0);
        assert_eq!(Histogram::of_bytes(&[7; 100]).entropy_bits(), 0.0);
        let uniform: Vec<u8> = (0..=255).collect();
        assert!((Histogram::of_bytes(&uniform).entropy_bits() - 8.0).abs() < 1e-12);
        let h = Histogram::of_bytes(&[1, 1, 2, 3]);
        assert!((h.entropy_bits() - 1.5).abs() < 1e-12);
        assert!((h.effective_alphabet() - 2f64.powf(1.5)).abs() < 1e-12);
        assert_eq!(h.ranked(), vec![(1, 2), (2, 1), (3, 1)]);
        assert_eq!(h.top_k_coverage(1), 0.5);
        assert_eq!(h.top_k_coverage(16), 1.0);
        assert_eq!(h.mode(), 1);
    }

    #[test]
    fn field_stats_split_the_word() {
        let s = FieldStats::of_words(&[0x3f80, 0xbf80, 0x4000]);
        assert_eq!(s.exponent.counts[0x7f], 2);
        assert_eq!(s.exponent.counts[0x80], 1);
        assert_eq!(s.sign_mantissa.counts[0x00], 2);
        assert_eq!(s.sign_mantissa.counts[0x80], 1);
    }
}
