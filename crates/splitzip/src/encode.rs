//! The CPU encoder (spec §3, §4).
//!
//! Two passes over the input, both parallel over chunks for large inputs (the same plan
//! a GPU encoder follows, with the prefix sum done by a decoupled look-back there,
//! `gpu-entropy-coding.md` §5):
//!
//! 1. count each chunk's escapes; when the output buffer can hold the raw form (so no
//!    payload can fail with `OutputTooSmall`), this pass also writes the codes section,
//!    whose offset (128) does not depend on the escape count: the raw form overwrites
//!    it if the payload turns out raw;
//! 2. exclusive prefix sum of the counts = the escape offsets section; this fixes every
//!    section's place and decides coded versus raw;
//! 3. every chunk writes its sign+mantissa bytes, escapes and (unless pass 1 did)
//!    codes at known offsets.

use bf16_field::{exponent_of, sign_mantissa_of};
use rayon::prelude::*;

use crate::codebook::Codebook;
use crate::error::EncodeError;
use crate::format::{
    CODE_BITS, CODE_MASK, CodedLayout, DEFAULT_CHUNK_SIZE, ESCAPE_CODE, ESCAPE_EXPONENT_BYTES,
    ESCAPE_OFFSET_BYTES, ESCAPE_POSITION_BYTES, HEADER_LEN, Layout, NO_CODE, PARALLEL_MIN_VALUES,
    PARALLEL_TASK_VALUES, Section, chunk_size_is_valid,
};
use crate::header::PayloadHeader;

/// A hard upper bound on the bytes [`encode_into`] writes for `value_count` values:
/// `HEADER_LEN + 2 * value_count` = 128 + 2n, the raw form (spec §4).
///
/// The encoder stores a payload coded only when that is no longer than the raw form, so
/// no payload exceeds this, whatever the data and codebook. `chunk_size` does not change
/// the bound in format version 1; it is a parameter so callers need not change if a
/// later version's bound depends on it. Saturates at `usize::MAX` (only for counts no
/// slice can hold).
pub fn max_encoded_len(value_count: usize, chunk_size: u32) -> usize {
    let _ = chunk_size;
    HEADER_LEN.saturating_add(value_count.saturating_mul(2))
}

/// Encoder settings beyond the codebook; the decoder needs none of them (everything is
/// in the header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Values per chunk: a power of two in `32..=32768`; default [`DEFAULT_CHUNK_SIZE`]
    /// (the SplitZip paper's `chunk_size=1024`).
    pub chunk_size: u32,
    /// Store the Adler-32 of the values in the header (flag bit 1, spec §2), which every
    /// decoder then verifies; off by default. Costs a pass over the input here.
    pub checksum: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions { chunk_size: DEFAULT_CHUNK_SIZE, checksum: false }
    }
}

/// Encodes `words` (n BF16 values as raw `u16` bits) with `codebook` in chunks of
/// `chunk_size` values into `out`, and returns the payload length in bytes. No checksum
/// of the values: [`encode_into_with`] can add one.
///
/// The payload is coded (spec §3) unless that would be longer than the raw form, or
/// needs more than `u32::MAX` chunks or escapes; then it is raw (spec §4). Only the
/// first (returned) bytes of `out` are written. The output is a pure function of the
/// arguments: byte-identical on every run and thread count.
///
/// Design: the SplitZip paper ("Abstract", "Codec API" with `chunk_size=1024`); the layout
/// is GPU-friendly (every section but the last at an offset fixed by n and the chunk
/// size, escapes found through prefix sums).
///
/// # Errors
/// [`EncodeError::ChunkSizeInvalid`] unless `chunk_size` is a power of two in
/// `32..=32768`; [`EncodeError::OutputTooSmall`] if `out` is shorter than this payload
/// (a buffer of [`max_encoded_len`] bytes is always long enough).
pub fn encode_into(
    words: &[u16],
    codebook: &Codebook,
    chunk_size: u32,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    encode_into_with(words, codebook, &EncodeOptions { chunk_size, checksum: false }, out)
}

/// [`encode_into`] with every encoder setting, the checksum included.
///
/// # Errors
/// As [`encode_into`].
pub fn encode_into_with(
    words: &[u16],
    codebook: &Codebook,
    options: &EncodeOptions,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let chunk_size = options.chunk_size;
    if !chunk_size_is_valid(chunk_size) {
        return Err(EncodeError::ChunkSizeInvalid { chunk_size });
    }
    let cs = chunk_size as usize;
    let n = words.len();
    let table = codebook.code_table();
    let parallel = n >= PARALLEL_MIN_VALUES;
    let min_chunks_per_task = (PARALLEL_TASK_VALUES / cs).max(1);

    // Pass 1: escapes per chunk, and the codes section when `out` can hold any payload
    // (it starts at HEADER_LEN in every coded payload and lies inside a raw one).
    let codes_early = out.len() >= max_encoded_len(n, chunk_size);
    let counts: Vec<u32> = if codes_early {
        let codes = &mut out[HEADER_LEN..HEADER_LEN + n.div_ceil(2)];
        let code = |(w, c): (&[u16], &mut [u8])| write_codes(&table, w, c);
        if parallel {
            words
                .par_chunks(cs)
                .zip(codes.par_chunks_mut(cs / 2))
                .with_min_len(min_chunks_per_task)
                .map(code)
                .collect()
        } else {
            words.chunks(cs).zip(codes.chunks_mut(cs / 2)).map(code).collect()
        }
    } else {
        let count = |w: &[u16]| count_escapes(&table, w);
        if parallel {
            words.par_chunks(cs).with_min_len(min_chunks_per_task).map(count).collect()
        } else {
            words.chunks(cs).map(count).collect()
        }
    };
    // Exclusive prefix sum; a total past u32::MAX cannot be coded.
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    let mut total = 0u64;
    offsets.push(0u32);
    for &c in &counts {
        total += c as u64;
        offsets.push(total.min(u32::MAX as u64) as u32);
    }

    let raw = PayloadHeader::raw(n as u64, chunk_size, *codebook).expect("2n + 128 fits u64 for any slice");
    let coded = if total <= u32::MAX as u64 {
        PayloadHeader::coded(n as u64, chunk_size, total, *codebook)
    } else {
        None
    };
    let header = match coded {
        Some(h) if h.encoded_len() <= raw.encoded_len() => h,
        _ => raw,
    };
    let header = if options.checksum {
        header.with_checksum(bf16_field::integrity::adler32_words(words))
    } else {
        header
    };
    let len = header.encoded_len() as usize;
    if out.len() < len {
        return Err(EncodeError::OutputTooSmall { needed: len, got: out.len() });
    }
    let out = &mut out[..len];
    out[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    match header.layout {
        Layout::Raw { .. } => write_raw(words, &mut out[HEADER_LEN..], parallel),
        Layout::Coded(layout) => {
            let plan = CodedPlan { cs, layout: &layout, counts: &counts, offsets: &offsets, codes_early };
            write_coded(words, &table, &plan, out, parallel, min_chunks_per_task);
        }
    }
    Ok(len)
}

/// [`encode_into`] into a new vector of exactly the payload's length.
///
/// # Errors
/// [`EncodeError::ChunkSizeInvalid`].
pub fn encode(words: &[u16], codebook: &Codebook, chunk_size: u32) -> Result<Vec<u8>, EncodeError> {
    encode_with(words, codebook, &EncodeOptions { chunk_size, checksum: false })
}

/// [`encode_into_with`] into a new vector of exactly the payload's length.
///
/// # Errors
/// [`EncodeError::ChunkSizeInvalid`].
pub fn encode_with(
    words: &[u16],
    codebook: &Codebook,
    options: &EncodeOptions,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0u8; max_encoded_len(words.len(), options.chunk_size)];
    let len = encode_into_with(words, codebook, options, &mut out)?;
    out.truncate(len);
    Ok(out)
}

/// [`encode`] for `half::bf16` values (viewed as words by [`bf16_field::words_of`],
/// without copying).
///
/// # Errors
/// [`EncodeError::ChunkSizeInvalid`].
pub fn encode_bf16(
    values: &[half::bf16],
    codebook: &Codebook,
    chunk_size: u32,
) -> Result<Vec<u8>, EncodeError> {
    encode(bf16_field::words_of(values), codebook, chunk_size)
}

/// [`encode_into`] for `half::bf16` values.
///
/// # Errors
/// As [`encode_into`].
pub fn encode_bf16_into(
    values: &[half::bf16],
    codebook: &Codebook,
    chunk_size: u32,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    encode_into(bf16_field::words_of(values), codebook, chunk_size, out)
}

fn write_raw(words: &[u16], out: &mut [u8], parallel: bool) {
    let serial = |w: &[u16], o: &mut [u8]| {
        for (w, o) in w.iter().zip(o.chunks_exact_mut(2)) {
            o.copy_from_slice(&w.to_le_bytes());
        }
    };
    if parallel {
        words
            .par_chunks(PARALLEL_TASK_VALUES)
            .zip(out.par_chunks_mut(2 * PARALLEL_TASK_VALUES))
            .for_each(|(w, o)| serial(w, o));
    } else {
        serial(words, out);
    }
}

/// Splits `section.len` bytes for `section` off the front of `rest`, which starts at
/// payload offset `*cursor`, zeroing the padding before it.
fn take_section<'a>(rest: &mut &'a mut [u8], cursor: &mut usize, section: Section) -> &'a mut [u8] {
    let pad = section.offset as usize - *cursor;
    let (padding, tail) = std::mem::take(rest).split_at_mut(pad);
    padding.fill(0);
    let (body, tail) = tail.split_at_mut(section.len as usize);
    *rest = tail;
    *cursor = section.end() as usize;
    body
}

/// For each exponent, its code, or [`NO_CODE`] (bit 7 over [`ESCAPE_CODE`]) when it is
/// escaped: [`Codebook::code_table`].
type FlagTable = [u8; 256];

/// The shift that turns a [`FlagTable`] entry into 1 for an escape, 0 for a code. The
/// code bits of [`NO_CODE`] are the escape's code, so a table entry is written as is.
const ESCAPE_SHIFT: u32 = NO_CODE.trailing_zeros();
const _: () = assert!(NO_CODE & CODE_MASK == ESCAPE_CODE && NO_CODE >> ESCAPE_SHIFT == 1);

/// The number of escaped values in `words`.
fn count_escapes(table: &FlagTable, words: &[u16]) -> u32 {
    let flag = |w: u16| (table[exponent_of(w) as usize] >> ESCAPE_SHIFT) as u32;
    let mut octets = words.chunks_exact(8);
    let mut count = 0;
    for w in &mut octets {
        count += w.iter().map(|&w| flag(w)).sum::<u32>();
    }
    count + octets.remainder().iter().map(|&w| flag(w)).sum::<u32>()
}

/// Writes the codes of `words` (one chunk) into `codes` (`ceil(words.len() / 2)` bytes,
/// escapes as [`ESCAPE_CODE`], a zero high nibble after an odd count) and returns the
/// number of escapes.
fn write_codes(table: &FlagTable, words: &[u16], codes: &mut [u8]) -> u32 {
    let code = |w: u16| table[exponent_of(w) as usize];
    // Two codes in a byte; the escape bit of either falls out of the byte.
    let byte = |c0: u8, c1: u8| (c0 & CODE_MASK) | (c1 << CODE_BITS);
    let full = words.len() / 8 * 8;
    let (words, words_tail) = words.split_at(full);
    let (codes, codes_tail) = codes.split_at_mut(full / 2);
    let mut count = 0;
    for (w, out) in words.chunks_exact(8).zip(codes.chunks_exact_mut(4)) {
        let c =
            [code(w[0]), code(w[1]), code(w[2]), code(w[3]), code(w[4]), code(w[5]), code(w[6]), code(w[7])];
        out.copy_from_slice(&[byte(c[0], c[1]), byte(c[2], c[3]), byte(c[4], c[5]), byte(c[6], c[7])]);
        if c.iter().fold(0, |a, &c| a | c) & NO_CODE & !CODE_MASK != 0 {
            count += c.iter().map(|&c| (c >> ESCAPE_SHIFT) as u32).sum::<u32>();
        }
    }
    for (w, out) in words_tail.chunks(2).zip(codes_tail) {
        let c0 = code(w[0]);
        let c1 = w.get(1).map_or(ESCAPE_CODE, |&w| code(w));
        *out = byte(c0, c1);
        count += (c0 >> ESCAPE_SHIFT) as u32 + (c1 >> ESCAPE_SHIFT) as u32;
    }
    count
}

/// Everything [`write_coded`] needs besides the data.
struct CodedPlan<'a> {
    cs: usize,
    layout: &'a CodedLayout,
    counts: &'a [u32],
    offsets: &'a [u32],
    /// Pass 1 already wrote the codes section.
    codes_early: bool,
}

/// One chunk's work: (((input words, codes), sign+mantissa bytes), (escape position
/// bytes, escape exponent bytes)).
type EncodeTask<'a> = (((&'a [u16], &'a mut [u8]), &'a mut [u8]), (&'a mut [u8], &'a mut [u8]));

fn write_coded(
    words: &[u16],
    table: &FlagTable,
    plan: &CodedPlan<'_>,
    out: &mut [u8],
    parallel: bool,
    min_chunks_per_task: usize,
) {
    let (cs, layout) = (plan.cs, plan.layout);
    let mut cursor = HEADER_LEN;
    let mut rest = &mut out[HEADER_LEN..];
    let codes = take_section(&mut rest, &mut cursor, layout.codes);
    let sign_mantissa = take_section(&mut rest, &mut cursor, layout.sign_mantissa);
    let escape_offsets = take_section(&mut rest, &mut cursor, layout.escape_offsets);
    let mut positions = take_section(&mut rest, &mut cursor, layout.escape_positions);
    let mut exponents = take_section(&mut rest, &mut cursor, layout.escape_exponents);
    debug_assert!(rest.is_empty(), "the layout ends at the escape exponents");

    for (o, &v) in escape_offsets.chunks_exact_mut(ESCAPE_OFFSET_BYTES).zip(plan.offsets) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    // Each chunk's slice of the two escape arrays.
    let mut escapes: Vec<(&mut [u8], &mut [u8])> = Vec::with_capacity(plan.counts.len());
    for &c in plan.counts {
        let (p, p_rest) = std::mem::take(&mut positions).split_at_mut(c as usize * ESCAPE_POSITION_BYTES);
        let (e, e_rest) = std::mem::take(&mut exponents).split_at_mut(c as usize * ESCAPE_EXPONENT_BYTES);
        positions = p_rest;
        exponents = e_rest;
        escapes.push((p, e));
    }

    let codes_early = plan.codes_early;
    let encode_chunk = |(((w, codes), sm), (pos, exps)): EncodeTask<'_>| {
        for (s, &x) in sm.iter_mut().zip(w) {
            *s = sign_mantissa_of(x);
        }
        if !codes_early {
            write_codes(table, w, codes);
        }
        if exps.is_empty() {
            return;
        }
        let mut k = 0;
        for (i, &x) in w.iter().enumerate() {
            let e = exponent_of(x);
            if table[e as usize] == NO_CODE {
                pos[k * ESCAPE_POSITION_BYTES..(k + 1) * ESCAPE_POSITION_BYTES]
                    .copy_from_slice(&(i as u16).to_le_bytes());
                exps[k] = e;
                k += 1;
            }
        }
        debug_assert_eq!(k, exps.len(), "pass 2 finds the escapes pass 1 counted");
    };
    let half = cs / 2;
    if parallel {
        words
            .par_chunks(cs)
            .zip(codes.par_chunks_mut(half))
            .zip(sign_mantissa.par_chunks_mut(cs))
            .zip(escapes.into_par_iter())
            .with_min_len(min_chunks_per_task)
            .for_each(encode_chunk);
    } else {
        words
            .chunks(cs)
            .zip(codes.chunks_mut(half))
            .zip(sign_mantissa.chunks_mut(cs))
            .zip(escapes)
            .for_each(encode_chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random words, about one in `1 << rare_bits` with a random
    /// exponent and the rest with an exponent in 0x70..0x80.
    fn words(len: usize, seed: u64, rare_bits: u32) -> Vec<u16> {
        let mut rng = kvcodec_testkit::Rng(seed as u32 | 1);
        (0..len)
            .map(|_| {
                let r = rng.next();
                let w = r as u16;
                if (r >> 16).is_multiple_of(1 << rare_bits) {
                    w
                } else {
                    (w & 0x807f) | ((0x70 | (w >> 7) & 0xf) << 7)
                }
            })
            .collect()
    }

    #[test]
    fn codes_and_counts_match_the_reference() {
        let codebook = Codebook::new((0x70..0x80).collect::<Vec<u8>>().try_into().unwrap()).unwrap();
        let table = codebook.code_table();
        let reference = codebook.code_table();
        for len in [0usize, 1, 2, 7, 8, 9, 15, 16, 17, 33, 1000, 1025] {
            for rare_bits in [0, 1, 3] {
                let w = words(len, len as u64 * 7 + rare_bits as u64 + 1, rare_bits);
                let code = |i: usize| match reference[exponent_of(w[i]) as usize] {
                    NO_CODE => ESCAPE_CODE,
                    c => c,
                };
                let want: Vec<u8> = (0..len.div_ceil(2))
                    .map(|j| code(2 * j) | w.get(2 * j + 1).map_or(0, |_| code(2 * j + 1) << 4))
                    .collect();
                let escapes =
                    w.iter().filter(|&&x| reference[exponent_of(x) as usize] == NO_CODE).count() as u32;
                let mut got = vec![0xa5; len.div_ceil(2)];
                assert_eq!(write_codes(&table, &w, &mut got), escapes, "len {len}");
                assert_eq!(got, want, "len {len}");
                assert_eq!(count_escapes(&table, &w), escapes, "len {len}");
            }
        }
    }

    #[test]
    fn codes_written_early_or_late_give_the_same_payload() {
        let codebook = Codebook::new((0x70..0x80).collect::<Vec<u8>>().try_into().unwrap()).unwrap();
        for (len, rare_bits) in [(0, 4), (1, 4), (33, 0), (1001, 4), (1001, 2), (PARALLEL_MIN_VALUES + 77, 6)]
        {
            let w = words(len, len as u64 + 3, rare_bits);
            for chunk_size in [32, 1024] {
                let mut early = vec![0xa5; max_encoded_len(len, chunk_size)];
                let n = encode_into(&w, &codebook, chunk_size, &mut early).unwrap();
                let mut late = vec![0x5a; n];
                assert_eq!(encode_into(&w, &codebook, chunk_size, &mut late).unwrap(), n);
                assert_eq!(early[..n], late[..], "len {len}, chunk {chunk_size}");
                assert_eq!(crate::decode(&late).unwrap(), w);
            }
        }
    }
}
