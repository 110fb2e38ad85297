//! The CPU decoder (spec §3, §5).
//!
//! Every check runs before any value is written, in the order of spec §5: the escapes of
//! a large payload are checked chunk by chunk in parallel, and the error reported is the
//! first in chunk order, so it does not depend on thread timing.
//! The work is bounded by the payload length: each loop runs over a section whose
//! length has been checked against the payload, and nothing is allocated before the
//! payload is known to be as long as its header says.

use bf16_field::join;
use rayon::prelude::*;

use crate::error::DecodeError;
use crate::format::{
    CODE_BITS, CODE_MASK, CODEBOOK_LEN, CodedLayout, ESCAPE_CODE, ESCAPE_OFFSET_BYTES, ESCAPE_POSITION_BYTES,
    Layout, NO_CODE, PARALLEL_MIN_VALUES, PARALLEL_TASK_VALUES, Section,
};
use crate::header::PayloadHeader;

/// Decodes a whole payload into `out[..n]` and returns n, the number of values.
///
/// `payload` must be exactly one payload (its length is the header's encoded length);
/// `out` must hold at least n values; values past n are left untouched. A payload with
/// a checksum (flag bit 1) is verified after its values are written. On error nothing
/// is written to `out`, but for [`DecodeError::ChecksumMismatch`], which leaves the
/// values the payload holds.
///
/// # Errors
/// Any [`DecodeError`]: first those of [`PayloadHeader::parse`], then
/// [`DecodeError::Truncated`] / [`DecodeError::TrailingBytes`] when the payload length
/// differs from the declared one, [`DecodeError::OutputTooSmall`], and for a coded
/// payload the body checks of spec §5 (padding, escape offsets, escapes), then
/// [`DecodeError::ChecksumMismatch`].
pub fn decode_into(payload: &[u8], out: &mut [u16]) -> Result<usize, DecodeError> {
    let header = parse_checked(payload)?;
    decode_checked(payload, &header, out)
}

/// [`decode_into`] into a new vector of exactly n values.
///
/// The vector is allocated only after the payload length matches its header, so a
/// hostile header cannot make it allocate more than 2/3 of a value (4/3 bytes) per
/// payload byte.
///
/// # Errors
/// As [`decode_into`].
pub fn decode(payload: &[u8]) -> Result<Vec<u16>, DecodeError> {
    let header = parse_checked(payload)?;
    let mut out = vec![0u16; header.value_count as usize];
    decode_checked(payload, &header, &mut out)?;
    Ok(out)
}

/// [`decode`] to `half::bf16` values.
///
/// # Errors
/// As [`decode_into`].
pub fn decode_bf16(payload: &[u8]) -> Result<Vec<half::bf16>, DecodeError> {
    let header = parse_checked(payload)?;
    let mut out = vec![half::bf16::ZERO; header.value_count as usize];
    decode_checked(payload, &header, bytemuck::cast_slice_mut(&mut out))?;
    Ok(out)
}

/// [`decode_into`] to `half::bf16` values.
///
/// # Errors
/// As [`decode_into`].
pub fn decode_bf16_into(payload: &[u8], out: &mut [half::bf16]) -> Result<usize, DecodeError> {
    decode_into(payload, bytemuck::cast_slice_mut(out))
}

/// Parses the header and checks that the payload has exactly the declared length.
fn parse_checked(payload: &[u8]) -> Result<PayloadHeader, DecodeError> {
    let header = PayloadHeader::parse(payload)?;
    let declared = header.encoded_len();
    let got = payload.len() as u64;
    if got < declared {
        return Err(DecodeError::Truncated { needed: declared, got });
    }
    if got > declared {
        return Err(DecodeError::TrailingBytes { extra: got - declared });
    }
    Ok(header)
}

fn decode_checked(payload: &[u8], header: &PayloadHeader, out: &mut [u16]) -> Result<usize, DecodeError> {
    // parse() checked that n fits usize.
    let n = header.value_count as usize;
    if out.len() < n {
        return Err(DecodeError::OutputTooSmall { needed: header.value_count, got: out.len() as u64 });
    }
    let out = &mut out[..n];
    let parallel = n >= PARALLEL_MIN_VALUES;
    match header.layout {
        Layout::Raw { words } => {
            let bytes = &payload[range(words)];
            let serial = |b: &[u8], w: &mut [u16]| {
                for (b, w) in b.chunks_exact(2).zip(w) {
                    *w = u16::from_le_bytes([b[0], b[1]]);
                }
            };
            if parallel {
                bytes
                    .par_chunks(2 * PARALLEL_TASK_VALUES)
                    .zip(out.par_chunks_mut(PARALLEL_TASK_VALUES))
                    .for_each(|(b, w)| serial(b, w));
            } else {
                serial(bytes, out);
            }
        }
        Layout::Coded(layout) => {
            let offsets = validate_coded(payload, header, &layout, parallel)?;
            write_values(payload, header, &layout, &offsets, out, parallel);
        }
    }
    if let Some(stored) = header.checksum {
        let computed = bf16_field::integrity::adler32_words(out);
        if computed != stored {
            return Err(DecodeError::ChecksumMismatch { stored, computed });
        }
    }
    Ok(n)
}

fn range(s: Section) -> std::ops::Range<usize> {
    s.offset as usize..s.end() as usize
}

/// The 4-bit code of value `i` in a codes section.
fn code_at(codes: &[u8], i: usize) -> u8 {
    (codes[i / 2] >> ((i % 2) as u32 * CODE_BITS)) & CODE_MASK
}

/// Spec §5 body checks, in order: padding, escape offsets, then escapes chunk by chunk
/// (on the rayon pool when `parallel`). Returns the escape offsets.
fn validate_coded(
    payload: &[u8],
    header: &PayloadHeader,
    layout: &CodedLayout,
    parallel: bool,
) -> Result<Vec<u32>, DecodeError> {
    let n = header.value_count;
    // Padding: the unused high nibble of the last code byte, then the gaps between
    // sections (the payload ends right after the last section).
    if n % 2 == 1 {
        let last = layout.codes.end() - 1;
        if payload[last as usize] >> 4 != 0 {
            return Err(DecodeError::PaddingNotZero { offset: last });
        }
    }
    let sections = layout.sections();
    for pair in sections.windows(2) {
        let (gap_start, gap_end) = (pair[0].1.end(), pair[1].1.offset);
        if let Some(i) = payload[gap_start as usize..gap_end as usize].iter().position(|&b| b != 0) {
            return Err(DecodeError::PaddingNotZero { offset: gap_start + i as u64 });
        }
    }

    // Escape offsets: 0, non-decreasing, ending at E.
    let offsets: Vec<u32> = payload[range(layout.escape_offsets)]
        .chunks_exact(ESCAPE_OFFSET_BYTES)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    if offsets[0] != 0 {
        return Err(DecodeError::EscapeOffsetsStartNotZero { first: offsets[0] });
    }
    for (chunk, pair) in offsets.windows(2).enumerate() {
        if pair[1] < pair[0] {
            return Err(DecodeError::EscapeOffsetsNotMonotonic {
                chunk: chunk as u32,
                start: pair[0],
                end: pair[1],
            });
        }
    }
    let last = *offsets.last().expect("chunk_count + 1 >= 1 entries");
    if last as u64 != header.escape_count {
        return Err(DecodeError::EscapeOffsetsEndMismatch { last, escape_count: header.escape_count });
    }

    // Escapes, chunk by chunk: position in range, strictly increasing, exponent not in
    // the codebook, code 0. Entries are < E, so every index below is in its section.
    // Chunks are checked in parallel on large payloads (the first error in chunk order
    // is the one returned, as in a serial walk): walked serially, dense escapes made
    // this check most of a multi-threaded decode.
    let codes = &payload[range(layout.codes)];
    let positions = &payload[range(layout.escape_positions)];
    let exponents = &payload[range(layout.escape_exponents)];
    let code_table = header.codebook.code_table();
    let cs = header.chunk_size as u64;
    let check_chunk = |chunk: usize| -> Result<(), DecodeError> {
        let chunk_start = chunk as u64 * cs;
        let chunk_len = (n - chunk_start).min(cs) as u32;
        let mut previous: Option<u16> = None;
        let (first, end) = (offsets[chunk] as usize, offsets[chunk + 1] as usize);
        let chunk_positions = positions[first * ESCAPE_POSITION_BYTES..end * ESCAPE_POSITION_BYTES]
            .chunks_exact(ESCAPE_POSITION_BYTES)
            .map(|b| u16::from_le_bytes([b[0], b[1]]));
        let chunk = chunk as u32;
        for (position, &exponent) in chunk_positions.zip(&exponents[first..end]) {
            if position as u32 >= chunk_len {
                return Err(DecodeError::EscapePositionOutOfRange { chunk, position, chunk_len });
            }
            if let Some(previous) = previous.filter(|&p| p >= position) {
                return Err(DecodeError::EscapePositionsUnsorted { chunk, previous, position });
            }
            previous = Some(position);
            if code_table[exponent as usize] != NO_CODE {
                return Err(DecodeError::EscapedExponentInCodebook { chunk, position, exponent });
            }
            let code = code_at(codes, (chunk_start + position as u64) as usize);
            if code != ESCAPE_CODE {
                return Err(DecodeError::EscapeCodeNotZero { chunk, position, code });
            }
        }
        Ok(())
    };
    let chunks = offsets.len() - 1;
    let first_error = if parallel {
        let min_chunks_per_task = (PARALLEL_TASK_VALUES / cs as usize).max(1);
        (0..chunks).into_par_iter().with_min_len(min_chunks_per_task).find_map_first(|c| check_chunk(c).err())
    } else {
        (0..chunks).find_map(|c| check_chunk(c).err())
    };
    match first_error {
        Some(error) => Err(error),
        None => Ok(offsets),
    }
}

/// One chunk's work: (chunk index, ((output words, codes), sign+mantissa bytes)).
type DecodeTask<'a> = (usize, ((&'a mut [u16], &'a [u8]), &'a [u8]));

/// For each code byte, the exponent bits (`exponent << 7`) of its two values as the two
/// `u16` lanes of a `u32`: the low nibble's value in the low lane.
type PairTable = [u32; 256];

fn pair_table(book: &[u8; CODEBOOK_LEN]) -> PairTable {
    std::array::from_fn(|c| {
        let lo = book[c & CODE_MASK as usize] as u32;
        let hi = book[c >> CODE_BITS] as u32;
        (lo << 7) | (hi << 23)
    })
}

/// Four words at once (`u16` lanes of a `u64`, value order from the low lane): the
/// exponent bits `exps` (from [`PairTable`]) joined with the four sign+mantissa bytes
/// `sm` (little-endian, first value in the low byte). Same result as
/// [`bf16_field::join`] lane by lane.
#[inline(always)]
fn join4(exps: u64, sm: u32) -> u64 {
    // Spread the four bytes to the low byte of four 16-bit lanes.
    let x = sm as u64;
    let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    exps | (x & 0x007f_007f_007f_007f) | ((x & 0x0080_0080_0080_0080) << 8)
}

/// Decodes the codes and sign+mantissa bytes of one run of values into `out` (escapes
/// not patched: they decode as code 0). `codes` holds `ceil(out.len() / 2)` bytes and
/// `sm` `out.len()` bytes.
#[inline(always)]
fn decode_run(table: &PairTable, codes: &[u8], sm: &[u8], out: &mut [u16]) {
    // Whole groups of 8 values, then the tail of the last chunk (fewer than 8 values).
    let full = out.len() / 8 * 8;
    let (out, out_tail) = out.split_at_mut(full);
    let (codes, codes_tail) = codes.split_at(full / 2);
    let (sm, sm_tail) = sm.split_at(full);
    for ((w, c), s) in out.chunks_exact_mut(8).zip(codes.chunks_exact(4)).zip(sm.chunks_exact(8)) {
        let s = u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]);
        let e = |i: usize| table[c[i] as usize] as u64;
        let lo = join4(e(0) | (e(1) << 32), s as u32);
        let hi = join4(e(2) | (e(3) << 32), (s >> 32) as u32);
        w.copy_from_slice(&[
            lo as u16,
            (lo >> 16) as u16,
            (lo >> 32) as u16,
            (lo >> 48) as u16,
            hi as u16,
            (hi >> 16) as u16,
            (hi >> 32) as u16,
            (hi >> 48) as u16,
        ]);
    }
    for (i, (w, &s)) in out_tail.iter_mut().zip(sm_tail).enumerate() {
        let exps = table[codes_tail[i / 2] as usize] >> ((i % 2) * 16);
        *w = (exps as u16 & 0x7f80) | (((s as u16) & 0x80) << 8) | ((s as u16) & 0x7f);
    }
}

/// The SSSE3 kernel: 16 values per step, the codebook lookup done by `pshufb` on two
/// 16-byte tables (one per output byte), so no table load per value.
#[cfg(target_arch = "x86_64")]
mod ssse3 {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_loadl_epi64, _mm_loadu_si128, _mm_or_si128, _mm_set1_epi8,
        _mm_shuffle_epi8, _mm_srli_epi16, _mm_storeu_si128, _mm_unpackhi_epi8, _mm_unpacklo_epi8,
    };

    use crate::format::{CODE_BITS, CODE_MASK, CODEBOOK_LEN};

    /// Values per step.
    pub(super) const STEP: usize = 16;

    /// Per code: the low output byte's exponent bit (`(e & 1) << 7`) and the high output
    /// byte's exponent bits (`e >> 1`); the sign+mantissa byte fills the rest.
    pub(super) struct Tables {
        low: [u8; CODEBOOK_LEN],
        high: [u8; CODEBOOK_LEN],
    }

    impl Tables {
        pub(super) fn new(book: &[u8; CODEBOOK_LEN]) -> Self {
            Self { low: book.map(|e| (e & 1) << 7), high: book.map(|e| e >> 1) }
        }
    }

    /// Whether this CPU can run [`decode_steps`].
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("ssse3")
    }

    /// Decodes the largest multiple of [`STEP`] values that `out`, `codes` (two codes a
    /// byte) and `sm` all cover, from the start (escapes not patched), and returns how
    /// many values it wrote.
    ///
    /// # Safety
    /// The CPU must support SSSE3 ([`available`]).
    #[target_feature(enable = "ssse3")]
    pub(super) unsafe fn decode_steps(tables: &Tables, codes: &[u8], sm: &[u8], out: &mut [u16]) -> usize {
        let steps = (out.len() / STEP).min(codes.len() / (STEP / 2)).min(sm.len() / STEP);
        // SAFETY: SSSE3 is available (the caller's contract). Every load and store is
        // unaligned and in bounds: step `g < steps` reads codes[8g..8g + 8] and
        // sm[16g..16g + 16] and writes out[16g..16g + 16], all within the lengths
        // `steps` was computed from; the tables are 16 bytes each.
        unsafe {
            let low_table = _mm_loadu_si128(tables.low.as_ptr().cast::<__m128i>());
            let high_table = _mm_loadu_si128(tables.high.as_ptr().cast::<__m128i>());
            let nibble = _mm_set1_epi8(CODE_MASK as i8);
            let mantissa = _mm_set1_epi8(0x7f);
            let sign = _mm_set1_epi8(0x80u8 as i8);
            for g in 0..steps {
                let c = _mm_loadl_epi64(codes.as_ptr().add(g * STEP / 2).cast::<__m128i>());
                let even = _mm_and_si128(c, nibble);
                let odd = _mm_and_si128(_mm_srli_epi16::<{ CODE_BITS as i32 }>(c), nibble);
                // The 16 codes in value order.
                let idx = _mm_unpacklo_epi8(even, odd);
                let s = _mm_loadu_si128(sm.as_ptr().add(g * STEP).cast::<__m128i>());
                let low = _mm_or_si128(_mm_and_si128(s, mantissa), _mm_shuffle_epi8(low_table, idx));
                let high = _mm_or_si128(_mm_and_si128(s, sign), _mm_shuffle_epi8(high_table, idx));
                let dst = out.as_mut_ptr().add(g * STEP);
                _mm_storeu_si128(dst.cast::<__m128i>(), _mm_unpacklo_epi8(low, high));
                _mm_storeu_si128(dst.add(STEP / 2).cast::<__m128i>(), _mm_unpackhi_epi8(low, high));
            }
        }
        steps * STEP
    }
}

/// Writes the values of a validated coded payload; cannot fail.
fn write_values(
    payload: &[u8],
    header: &PayloadHeader,
    layout: &CodedLayout,
    offsets: &[u32],
    out: &mut [u16],
    parallel: bool,
) {
    let cs = header.chunk_size as usize;
    let table = pair_table(&header.codebook.exponents());
    #[cfg(target_arch = "x86_64")]
    let simd = ssse3::available().then(|| ssse3::Tables::new(&header.codebook.exponents()));
    let codes = &payload[range(layout.codes)];
    let sign_mantissa = &payload[range(layout.sign_mantissa)];
    let positions = &payload[range(layout.escape_positions)];
    let exponents = &payload[range(layout.escape_exponents)];
    let decode_chunk = |(chunk, ((w, codes), sm)): DecodeTask<'_>| {
        #[cfg(target_arch = "x86_64")]
        let done = match &simd {
            // SAFETY: `simd` is Some only when SSSE3 is available.
            Some(tables) => unsafe { ssse3::decode_steps(tables, codes, sm, w) },
            None => 0,
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        // `done` is even and at most each slice's length (in values).
        decode_run(&table, &codes[done / 2..], &sm[done..], &mut w[done..]);
        let (first, end) = (offsets[chunk] as usize, offsets[chunk + 1] as usize);
        if first == end {
            return;
        }
        let chunk_positions = positions[first * ESCAPE_POSITION_BYTES..end * ESCAPE_POSITION_BYTES]
            .chunks_exact(ESCAPE_POSITION_BYTES)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
        for (position, &exponent) in chunk_positions.zip(&exponents[first..end]) {
            w[position] = join(exponent, sm[position]);
        }
    };
    if parallel {
        let min_chunks_per_task = (PARALLEL_TASK_VALUES / cs).max(1);
        out.par_chunks_mut(cs)
            .zip(codes.par_chunks(cs / 2))
            .zip(sign_mantissa.par_chunks(cs))
            .enumerate()
            .with_min_len(min_chunks_per_task)
            .for_each(decode_chunk);
    } else {
        out.chunks_mut(cs)
            .zip(codes.chunks(cs / 2))
            .zip(sign_mantissa.chunks(cs))
            .enumerate()
            .for_each(decode_chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random bytes.
    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = kvcodec_testkit::Rng(seed as u32 | 1);
        (0..len).map(|_| (rng.next() >> 24) as u8).collect()
    }

    fn reference(book: &[u8; CODEBOOK_LEN], codes: &[u8], sm: &[u8]) -> Vec<u16> {
        sm.iter().enumerate().map(|(i, &s)| join(book[code_at(codes, i) as usize], s)).collect()
    }

    #[test]
    fn kernels_match_join() {
        let book: [u8; CODEBOOK_LEN] =
            [0, 1, 0x7f, 0x80, 0xff, 0xfe, 3, 0x55, 0xaa, 9, 10, 11, 0x70, 0x71, 0x72, 0x73];
        let table = pair_table(&book);
        for len in [0usize, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1024, 1031] {
            let codes = bytes(len.div_ceil(2), len as u64 + 1);
            let sm = bytes(len, len as u64 + 1000);
            let want = reference(&book, &codes, &sm);
            let mut got = vec![0x5a5a; len];
            decode_run(&table, &codes, &sm, &mut got);
            assert_eq!(got, want, "scalar, len {len}");
            #[cfg(target_arch = "x86_64")]
            if ssse3::available() {
                let mut got = vec![0x5a5a; len];
                // SAFETY: SSSE3 is available.
                let done = unsafe { ssse3::decode_steps(&ssse3::Tables::new(&book), &codes, &sm, &mut got) };
                assert_eq!(done, len / ssse3::STEP * ssse3::STEP);
                decode_run(&table, &codes[done / 2..], &sm[done..], &mut got[done..]);
                assert_eq!(got, want, "ssse3, len {len}");
            }
        }
    }
}
