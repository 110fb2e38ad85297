//! The top-16 exponent codebook, calibrated offline (SplitZip paper, "Highlights":
//! "Offline-calibrated, Top-16 exponent codebooks"; spec §1).

use std::path::Path;

use bf16_field::exponent_of;
use bf16_field::stats::Histogram;

use crate::error::CodebookError;
use crate::format::{CODEBOOK_LEN, NO_CODE};

/// Sixteen distinct BF16 exponents; code `c` (4 bits) stands for `exponents()[c]`.
///
/// Built by [`Codebook::calibrate`] (the SplitZip protocol: calibrate once on a separate
/// calibration set, then encode many payloads with it) or [`Codebook::new`]. Every
/// payload carries its codebook in its header (spec §2), so a decoder needs no state.
/// Separate K and V codebooks are possible; one payload uses one codebook.
///
/// Serialized with serde as `{"exponents": [e0, ..., e15]}`; deserializing rejects
/// duplicates.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "CodebookRepr", into = "CodebookRepr")]
pub struct Codebook {
    exponents: [u8; CODEBOOK_LEN],
}

/// The JSON form; a list, not an array, so that a list of another length gets an
/// error that says so rather than serde's "trailing characters".
#[derive(serde::Serialize, serde::Deserialize)]
struct CodebookRepr {
    exponents: Vec<u8>,
}

impl TryFrom<CodebookRepr> for Codebook {
    type Error = CodebookError;
    fn try_from(r: CodebookRepr) -> Result<Self, CodebookError> {
        let exponents: [u8; CODEBOOK_LEN] = r
            .exponents
            .as_slice()
            .try_into()
            .map_err(|_| CodebookError::Length { got: r.exponents.len() })?;
        Codebook::new(exponents)
    }
}

impl From<Codebook> for CodebookRepr {
    fn from(c: Codebook) -> Self {
        CodebookRepr { exponents: c.exponents.to_vec() }
    }
}

impl std::fmt::Debug for Codebook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Codebook[")?;
        for (i, e) in self.exponents.iter().enumerate() {
            write!(f, "{}{e:#04x}", if i == 0 { "" } else { " " })?;
        }
        write!(f, "]")
    }
}

impl Codebook {
    /// A codebook whose code `c` stands for exponent `exponents[c]`.
    ///
    /// # Errors
    /// [`CodebookError::Duplicate`] if an exponent appears twice (the later occurrence
    /// is reported).
    pub fn new(exponents: [u8; CODEBOOK_LEN]) -> Result<Self, CodebookError> {
        let mut seen = [false; 256];
        for &e in &exponents {
            if std::mem::replace(&mut seen[e as usize], true) {
                return Err(CodebookError::Duplicate { exponent: e });
            }
        }
        Ok(Codebook { exponents })
    }

    /// Calibrates on a set of BF16 word slices taken together (one histogram over all of
    /// them): the 16 most frequent exponents, most frequent first, ties broken by the
    /// smaller exponent (spec §1).
    ///
    /// If fewer than 16 distinct exponents occur, the remaining codes take the unused
    /// exponents closest to the mode (the most frequent exponent), nearer first and the
    /// smaller exponent first at equal distance, so all 16 entries are distinct and the
    /// result is deterministic.
    ///
    /// # Errors
    /// [`CodebookError::EmptyCalibration`] if the slices hold no value at all.
    pub fn calibrate(samples: &[&[u16]]) -> Result<Self, CodebookError> {
        let mut h = Histogram::default();
        for words in samples {
            for &w in *words {
                h.counts[exponent_of(w) as usize] += 1;
            }
        }
        Self::from_histogram(&h)
    }

    /// [`Codebook::calibrate`] from an exponent histogram (e.g.
    /// `bf16_field::stats::FieldStats::exponent`).
    ///
    /// # Errors
    /// [`CodebookError::EmptyCalibration`] if the histogram is empty.
    ///
    /// # Panics
    /// If `histogram.counts` does not have 256 bins.
    pub fn from_histogram(histogram: &Histogram) -> Result<Self, CodebookError> {
        assert_eq!(histogram.counts.len(), 256, "an exponent histogram has 256 bins");
        let ranked = histogram.ranked();
        let Some(&(mode, _)) = ranked.first() else {
            return Err(CodebookError::EmptyCalibration);
        };
        let mut chosen: Vec<u8> = ranked.iter().take(CODEBOOK_LEN).map(|&(e, _)| e).collect();
        if chosen.len() < CODEBOOK_LEN {
            let mut fill: Vec<u8> = (0..=255u8).filter(|e| histogram.counts[*e as usize] == 0).collect();
            fill.sort_by_key(|&e| (e.abs_diff(mode), e));
            chosen.extend(fill.into_iter().take(CODEBOOK_LEN - chosen.len()));
        }
        Codebook::new(chosen.try_into().expect("exactly 16 entries"))
    }

    /// The 16 exponents; index = code.
    pub fn exponents(&self) -> [u8; CODEBOOK_LEN] {
        self.exponents
    }

    /// The exponent of code `code`, or `None` if `code >= 16`.
    pub fn exponent(&self, code: u8) -> Option<u8> {
        self.exponents.get(code as usize).copied()
    }

    /// The code of `exponent`, or `None` if it is not in the codebook (it is escaped).
    pub fn code_of(&self, exponent: u8) -> Option<u8> {
        self.exponents.iter().position(|&e| e == exponent).map(|c| c as u8)
    }

    /// Whether `exponent` has a code.
    pub fn contains(&self, exponent: u8) -> bool {
        self.exponents.contains(&exponent)
    }

    /// A 256-entry table: the code of each exponent, [`NO_CODE`] for escaped ones.
    pub(crate) fn code_table(&self) -> [u8; 256] {
        let mut t = [NO_CODE; 256];
        for (c, &e) in self.exponents.iter().enumerate() {
            t[e as usize] = c as u8;
        }
        t
    }

    /// How many of `words` would be escaped (exponent not in the codebook).
    pub fn escape_count(&self, words: &[u16]) -> u64 {
        let t = self.code_table();
        words.iter().filter(|&&w| t[exponent_of(w) as usize] == NO_CODE).count() as u64
    }

    /// Fraction of `words` whose exponent has a code, in `[0, 1]`; 1 for no words.
    pub fn coverage(&self, words: &[u16]) -> f64 {
        if words.is_empty() {
            return 1.0;
        }
        1.0 - self.escape_count(words) as f64 / words.len() as f64
    }

    /// Fraction of an exponent histogram's observations that have a code; 1 when empty.
    pub fn coverage_of_histogram(&self, histogram: &Histogram) -> f64 {
        let total = histogram.total();
        if total == 0 {
            return 1.0;
        }
        let covered: u64 =
            self.exponents.iter().map(|&e| histogram.counts.get(e as usize).copied().unwrap_or(0)).sum();
        covered as f64 / total as f64
    }

    /// The codebook as JSON, `{"exponents":[...]}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a codebook always serializes")
    }

    /// Parses [`Codebook::to_json`]'s output.
    ///
    /// # Errors
    /// [`CodebookError::Json`] for malformed JSON, a wrong entry count or a duplicate.
    pub fn from_json(json: &str) -> Result<Self, CodebookError> {
        Ok(serde_json::from_str(json)?)
    }

    /// Writes [`Codebook::to_json`] to `path`.
    ///
    /// # Errors
    /// [`CodebookError::Io`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CodebookError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json())
            .map_err(|source| CodebookError::Io { path: path.display().to_string(), source })
    }

    /// Reads a codebook written by [`Codebook::save`].
    ///
    /// # Errors
    /// [`CodebookError::Io`], then as [`Codebook::from_json`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CodebookError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| CodebookError::Io { path: path.display().to_string(), source })?;
        Self::from_json(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(exponent: u8) -> u16 {
        bf16_field::join(exponent, 0x15)
    }

    #[test]
    fn top16_by_count_then_smaller_exponent() {
        // Exponents 100..=120 (21 distinct); counts chosen so 105 and 104 tie at 50 and
        // the 16th/17th places tie at count 11 between 100 and 101 (100 wins).
        let mut words = Vec::new();
        for e in 100u8..=120 {
            let count = match e {
                104 | 105 => 50,
                110 => 99,
                100 => 11,
                e if e >= 117 => 1,
                e => 10 + e as usize - 100,
            };
            words.extend(std::iter::repeat_n(word(e), count));
        }
        let cb = Codebook::calibrate(&[&words]).unwrap();
        assert_eq!(
            cb.exponents(),
            [110, 104, 105, 116, 115, 114, 113, 112, 111, 109, 108, 107, 106, 103, 102, 100]
        );
        assert_eq!(cb.code_of(110), Some(0));
        assert_eq!(cb.code_of(117), None);
        assert_eq!(cb.exponent(15), Some(100));
        assert_eq!(cb.code_of(101), None);
        assert_eq!(cb.exponent(16), None);
    }

    #[test]
    fn fewer_than_16_distinct_fill_around_the_mode() {
        // Mode 3 (near the bottom edge), plus 10 and 200.
        let words: Vec<u16> = [3, 3, 3, 10, 200].map(word).to_vec();
        let cb = Codebook::calibrate(&[&words[..2], &words[2..]]).unwrap();
        // Seen first by count (3), then ties by exponent (10, 200); fill by distance to
        // 3, smaller first on ties: 2, 4, 1, 5, 0, 6, 7, 8, 9, 11, 12, 13, 14.
        assert_eq!(cb.exponents(), [3, 10, 200, 2, 4, 1, 5, 0, 6, 7, 8, 9, 11, 12, 13, 14]);
        // Mode at the top edge.
        let cb = Codebook::calibrate(&[&[word(0xff)]]).unwrap();
        let expected: Vec<u8> = (0xf0..=0xffu8).rev().collect();
        assert_eq!(cb.exponents().to_vec(), expected);
    }

    #[test]
    fn empty_calibration_is_an_error() {
        assert!(matches!(Codebook::calibrate(&[]), Err(CodebookError::EmptyCalibration)));
        assert!(matches!(Codebook::calibrate(&[&[], &[]]), Err(CodebookError::EmptyCalibration)));
    }

    #[test]
    fn duplicates_are_rejected_everywhere() {
        let mut e: [u8; 16] = std::array::from_fn(|i| i as u8);
        e[9] = 4;
        assert!(matches!(Codebook::new(e), Err(CodebookError::Duplicate { exponent: 4 })));
        let json = r#"{"exponents":[0,1,2,3,4,5,6,7,8,4,10,11,12,13,14,15]}"#;
        assert!(matches!(Codebook::from_json(json), Err(CodebookError::Json(_))));
        let short = r#"{"exponents":[0,1,2]}"#;
        assert!(matches!(Codebook::from_json(short), Err(CodebookError::Json(_))));
        // The message names the count, for 3 and for 17 entries.
        let long =
            format!("{{\"exponents\":[{}]}}", (0..17).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        for (json, got) in [(short.to_string(), 3), (long, 17)] {
            let message = Codebook::from_json(&json).unwrap_err().to_string();
            assert!(message.contains(&format!("lists {got} exponents, expected 16")), "{message}");
        }
    }

    #[test]
    fn json_round_trip_and_file() {
        let cb = Codebook::new(std::array::from_fn(|i| 120 + i as u8)).unwrap();
        let json = cb.to_json();
        assert_eq!(
            json,
            r#"{"exponents":[120,121,122,123,124,125,126,127,128,129,130,131,132,133,134,135]}"#
        );
        assert_eq!(Codebook::from_json(&json).unwrap(), cb);
        let path = std::env::temp_dir().join(format!("splitzip-codebook-{}.json", std::process::id()));
        cb.save(&path).unwrap();
        assert_eq!(Codebook::load(&path).unwrap(), cb);
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(Codebook::load(&path), Err(CodebookError::Io { .. })));
    }

    #[test]
    fn coverage_counts_escapes() {
        let cb = Codebook::new(std::array::from_fn(|i| 120 + i as u8)).unwrap();
        let words = [word(120), word(135), word(136), word(0), 0x7f80, 0x3f80];
        // 0x3f80 = 1.0, exponent 127 (coded); 136, 0 and 0xff (Inf) are escaped.
        assert_eq!(cb.escape_count(&words), 3);
        assert_eq!(cb.coverage(&words), 0.5);
        assert_eq!(cb.coverage(&[]), 1.0);
        let mut h = Histogram::default();
        h.counts[120] = 3;
        h.counts[0] = 1;
        assert_eq!(cb.coverage_of_histogram(&h), 0.75);
        let debug = format!("{:?}", Codebook::new(std::array::from_fn(|i| i as u8)).unwrap());
        assert!(debug.starts_with("Codebook[0x00 0x01 ") && debug.ends_with(" 0x0f]"), "{debug}");
    }
}
