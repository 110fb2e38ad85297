//! The CPU decoder (spec §3, §5).
//!
//! Every check runs before any value is written, sequentially and in the order of spec
//! §5, so the error reported for a hostile payload does not depend on thread timing.
//! The work is bounded by the payload length: each loop runs over a section whose
//! length has been checked against the payload, and nothing is allocated before the
//! payload is known to be as long as its header says.

use bf16_field::join;
use rayon::prelude::*;

use crate::error::DecodeError;
use crate::format::{
    CODE_BITS, CODE_MASK, CodedLayout, ESCAPE_CODE, ESCAPE_OFFSET_BYTES, ESCAPE_POSITION_BYTES, Layout,
    PARALLEL_MIN_VALUES, PARALLEL_TASK_VALUES, PayloadHeader, Section,
};

/// Decodes a whole payload into `out[..n]` and returns n, the number of values.
///
/// `payload` must be exactly one payload (its length is the header's encoded length);
/// `out` must hold at least n values; values past n are left untouched. On error
/// nothing is written to `out`.
///
/// # Errors
/// Any [`DecodeError`]: first those of [`PayloadHeader::parse`], then
/// [`DecodeError::Truncated`] / [`DecodeError::TrailingBytes`] when the payload length
/// differs from the declared one, [`DecodeError::OutputTooSmall`], and for a coded
/// payload the body checks of spec §5 (padding, escape offsets, escapes).
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
            let offsets = validate_coded(payload, header, &layout)?;
            write_values(payload, header, &layout, &offsets, out, parallel);
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

/// Spec §5 body checks, in order: padding, escape offsets, then escapes chunk by chunk.
/// Returns the escape offsets.
fn validate_coded(
    payload: &[u8],
    header: &PayloadHeader,
    layout: &CodedLayout,
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
    let codes = &payload[range(layout.codes)];
    let positions = &payload[range(layout.escape_positions)];
    let exponents = &payload[range(layout.escape_exponents)];
    let cs = header.chunk_size as u64;
    for (chunk, pair) in offsets.windows(2).enumerate() {
        let chunk_start = chunk as u64 * cs;
        let chunk_len = (n - chunk_start).min(cs) as u32;
        let mut previous: Option<u16> = None;
        let (first, end) = (pair[0] as usize, pair[1] as usize);
        let chunk_positions = positions[first * ESCAPE_POSITION_BYTES..end * ESCAPE_POSITION_BYTES]
            .chunks_exact(ESCAPE_POSITION_BYTES)
            .map(|b| u16::from_le_bytes([b[0], b[1]]));
        for (position, &exponent) in chunk_positions.zip(&exponents[first..end]) {
            let chunk = chunk as u32;
            if position as u32 >= chunk_len {
                return Err(DecodeError::EscapePositionOutOfRange { chunk, position, chunk_len });
            }
            if let Some(previous) = previous.filter(|&p| p >= position) {
                return Err(DecodeError::EscapePositionsUnsorted { chunk, previous, position });
            }
            previous = Some(position);
            if header.codebook.contains(exponent) {
                return Err(DecodeError::EscapedExponentInCodebook { chunk, position, exponent });
            }
            let code = code_at(codes, (chunk_start + position as u64) as usize);
            if code != ESCAPE_CODE {
                return Err(DecodeError::EscapeCodeNotZero { chunk, position, code });
            }
        }
    }
    Ok(offsets)
}

/// One chunk's work: (chunk index, ((output words, codes), sign+mantissa bytes)).
type DecodeTask<'a> = (usize, ((&'a mut [u16], &'a [u8]), &'a [u8]));

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
    let book = header.codebook.exponents();
    let codes = &payload[range(layout.codes)];
    let sign_mantissa = &payload[range(layout.sign_mantissa)];
    let positions = &payload[range(layout.escape_positions)];
    let exponents = &payload[range(layout.escape_exponents)];
    let decode_chunk = |(chunk, ((w, codes), sm)): DecodeTask<'_>| {
        for (i, (w, &sm)) in w.iter_mut().zip(sm).enumerate() {
            *w = join(book[code_at(codes, i) as usize], sm);
        }
        let (first, end) = (offsets[chunk] as usize, offsets[chunk + 1] as usize);
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
