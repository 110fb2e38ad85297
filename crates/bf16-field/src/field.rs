//! Exponent / sign+mantissa split and merge (the ExANS paper, "Encoding Pipeline" and
//! "Decoding Pipeline"; the same split underlies SplitZip, GAAC and ZipFusion).

use rayon::prelude::*;

use crate::{Error, Result};

/// The workspace's CPU parallelism policy: inputs of at least this many values are
/// worked on rayon's pool, smaller ones on the calling thread, where the hand-off would
/// cost more than it saves. Every codec's CPU path uses it.
pub const PARALLEL_MIN_VALUES: usize = 1 << 16;
/// Values per rayon task: 64 Ki values = 128 KiB of BF16, large enough to amortise
/// scheduling, small enough to balance across cores.
pub const PARALLEL_CHUNK_VALUES: usize = 1 << 16;

/// The 8-bit exponent field of a BF16 word: `(w >> 7) & 0xff`.
#[inline(always)]
pub const fn exponent_of(word: u16) -> u8 {
    (word >> 7) as u8
}

/// The sign+mantissa byte of a BF16 word: the sign in bit 7, the 7 mantissa bits below.
#[inline(always)]
pub const fn sign_mantissa_of(word: u16) -> u8 {
    (((word >> 8) & 0x80) | (word & 0x7f)) as u8
}

/// Rebuilds a BF16 word from its exponent and sign+mantissa byte; the exact inverse of
/// [`exponent_of`] and [`sign_mantissa_of`].
#[inline(always)]
pub const fn join(exponent: u8, sign_mantissa: u8) -> u16 {
    (((sign_mantissa as u16) & 0x80) << 8) | ((exponent as u16) << 7) | ((sign_mantissa as u16) & 0x7f)
}

/// Views a slice of `half::bf16` as raw `u16` words (zero-copy).
pub fn words_of(values: &[half::bf16]) -> &[u16] {
    bytemuck::cast_slice(values)
}

fn check_len(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got == expected { Ok(()) } else { Err(Error::LengthMismatch { what, got, expected }) }
}

/// Splits `words` (n BF16 values) into `exponents` and `sign_mantissa`, n bytes each.
///
/// # Errors
/// [`Error::LengthMismatch`] if either output does not hold exactly `words.len()` bytes.
pub fn split(words: &[u16], exponents: &mut [u8], sign_mantissa: &mut [u8]) -> Result<()> {
    check_len("exponents", exponents.len(), words.len())?;
    check_len("sign_mantissa", sign_mantissa.len(), words.len())?;
    let serial = |w: &[u16], e: &mut [u8], sf: &mut [u8]| {
        for ((&w, e), sf) in w.iter().zip(e).zip(sf) {
            *e = exponent_of(w);
            *sf = sign_mantissa_of(w);
        }
    };
    if words.len() < PARALLEL_MIN_VALUES {
        serial(words, exponents, sign_mantissa);
    } else {
        words
            .par_chunks(PARALLEL_CHUNK_VALUES)
            .zip(exponents.par_chunks_mut(PARALLEL_CHUNK_VALUES))
            .zip(sign_mantissa.par_chunks_mut(PARALLEL_CHUNK_VALUES))
            .for_each(|((w, e), sf)| serial(w, e, sf));
    }
    Ok(())
}

/// Splits `words` into freshly allocated `(exponents, sign_mantissa)` byte vectors.
pub fn split_to_vec(words: &[u16]) -> (Vec<u8>, Vec<u8>) {
    let mut exponents = vec![0; words.len()];
    let mut sign_mantissa = vec![0; words.len()];
    split(words, &mut exponents, &mut sign_mantissa).expect("lengths match by construction");
    (exponents, sign_mantissa)
}

/// Merges `exponents` and `sign_mantissa` (n bytes each) into `words` (n BF16 values).
///
/// # Errors
/// [`Error::LengthMismatch`] if the three slices do not have the same length: `what` is
/// `"sign_mantissa"` when the inputs differ, `"words (output)"` when the output does not
/// match them.
pub fn merge(exponents: &[u8], sign_mantissa: &[u8], words: &mut [u16]) -> Result<()> {
    // The inputs are checked against each other first, so that a wrong-size output is
    // named as the output, not blamed on an input.
    check_len("sign_mantissa", sign_mantissa.len(), exponents.len())?;
    check_len("words (output)", words.len(), exponents.len())?;
    let serial = |e: &[u8], sf: &[u8], w: &mut [u16]| {
        for ((&e, &sf), w) in e.iter().zip(sf).zip(w) {
            *w = join(e, sf);
        }
    };
    if words.len() < PARALLEL_MIN_VALUES {
        serial(exponents, sign_mantissa, words);
    } else {
        exponents
            .par_chunks(PARALLEL_CHUNK_VALUES)
            .zip(sign_mantissa.par_chunks(PARALLEL_CHUNK_VALUES))
            .zip(words.par_chunks_mut(PARALLEL_CHUNK_VALUES))
            .for_each(|((e, sf), w)| serial(e, sf, w));
    }
    Ok(())
}

/// Merges two byte streams into a freshly allocated vector of BF16 words.
///
/// # Errors
/// [`Error::LengthMismatch`] if the streams differ in length.
pub fn merge_to_vec(exponents: &[u8], sign_mantissa: &[u8]) -> Result<Vec<u16>> {
    let mut words = vec![0; exponents.len()];
    merge(exponents, sign_mantissa, &mut words)?;
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bit_pattern_round_trips() {
        let words: Vec<u16> = (0..=u16::MAX).collect();
        let (e, sf) = split_to_vec(&words);
        for (&w, (&e, &sf)) in words.iter().zip(e.iter().zip(&sf)) {
            // Independent definition: the exponent is bits 14..7, sign bit 15, mantissa 6..0.
            assert_eq!(e as u16, (w & 0x7f80) >> 7, "exponent of {w:#06x}");
            assert_eq!(sf & 0x80 != 0, w & 0x8000 != 0, "sign of {w:#06x}");
            assert_eq!((sf & 0x7f) as u16, w & 0x7f, "mantissa of {w:#06x}");
        }
        assert_eq!(merge_to_vec(&e, &sf).unwrap(), words);
    }

    #[test]
    fn parallel_path_matches_serial_definition() {
        // Longer than PARALLEL_MIN_VALUES and not a multiple of the chunk size.
        let words: Vec<u16> = (0..(3 * PARALLEL_CHUNK_VALUES + 17) as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u16)
            .collect();
        let (e, sf) = split_to_vec(&words);
        for (i, &w) in words.iter().enumerate() {
            assert_eq!((e[i], sf[i]), (exponent_of(w), sign_mantissa_of(w)));
        }
        assert_eq!(merge_to_vec(&e, &sf).unwrap(), words);
    }

    #[test]
    fn length_mismatch_is_typed() {
        let mut e = [0u8; 2];
        let mut sf = [0u8; 3];
        let err = split(&[0u16; 3], &mut e, &mut sf).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "exponents", got: 2, expected: 3 }));
        let err = merge(&[0u8; 3], &[0u8; 2], &mut [0u16; 3]).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "sign_mantissa", got: 2, expected: 3 }));
        let err = merge(&[0u8; 3], &[0u8; 3], &mut [0u16; 2]).unwrap_err();
        assert!(
            matches!(err, Error::LengthMismatch { what: "words (output)", got: 2, expected: 3 }),
            "{err}"
        );
    }

    #[test]
    fn bf16_view_is_zero_copy() {
        let values = [half::bf16::from_f32(1.0), half::bf16::from_f32(-2.0)];
        assert_eq!(words_of(&values), &[0x3f80, 0xc000]);
    }
}
