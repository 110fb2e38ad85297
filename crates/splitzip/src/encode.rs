//! The CPU encoder (spec §3, §4).
//!
//! Two passes over the input, both parallel over chunks for large inputs (the same plan
//! a GPU encoder follows, with the prefix sum done by a decoupled look-back there,
//! `gpu-entropy-coding.md` §5):
//!
//! 1. count each chunk's escapes;
//! 2. exclusive prefix sum of the counts = the escape offsets section; this fixes every
//!    section's place and decides coded versus raw;
//! 3. every chunk writes its codes, sign+mantissa bytes and escapes at known offsets.

use bf16_field::{exponent_of, sign_mantissa_of};
use rayon::prelude::*;

use crate::codebook::Codebook;
use crate::error::EncodeError;
use crate::format::{
    CODE_BITS, CodedLayout, ESCAPE_CODE, ESCAPE_EXPONENT_BYTES, ESCAPE_OFFSET_BYTES, ESCAPE_POSITION_BYTES,
    HEADER_LEN, Layout, NO_CODE, PARALLEL_MIN_VALUES, PARALLEL_TASK_VALUES, PayloadHeader, Section,
    chunk_size_is_valid,
};

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

/// Encodes `words` (n BF16 values as raw `u16` bits) with `codebook` in chunks of
/// `chunk_size` values into `out`, and returns the payload length in bytes.
///
/// The payload is coded (spec §3) unless that would be longer than the raw form, or
/// needs more than `u32::MAX` chunks or escapes; then it is raw (spec §4). Only the
/// first (returned) bytes of `out` are written. The output is a pure function of the
/// arguments: byte-identical on every run and thread count.
///
/// Design: SplitZip seed ("Abstract", "Codec API" with `chunk_size=1024`); the layout
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
    if !chunk_size_is_valid(chunk_size) {
        return Err(EncodeError::ChunkSizeInvalid { chunk_size });
    }
    let cs = chunk_size as usize;
    let n = words.len();
    let table = codebook.code_table();
    let parallel = n >= PARALLEL_MIN_VALUES;
    let min_chunks_per_task = (PARALLEL_TASK_VALUES / cs).max(1);

    // Pass 1: escapes per chunk.
    let count =
        |chunk: &[u16]| chunk.iter().filter(|&&w| table[exponent_of(w) as usize] == NO_CODE).count() as u32;
    let counts: Vec<u32> = if parallel {
        words.par_chunks(cs).with_min_len(min_chunks_per_task).map(count).collect()
    } else {
        words.chunks(cs).map(count).collect()
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
    let len = header.encoded_len() as usize;
    if out.len() < len {
        return Err(EncodeError::OutputTooSmall { needed: len, got: out.len() });
    }
    let out = &mut out[..len];
    out[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    match header.layout {
        Layout::Raw { .. } => write_raw(words, &mut out[HEADER_LEN..], parallel),
        Layout::Coded(layout) => {
            write_coded(words, &table, cs, &layout, &counts, &offsets, out, parallel, min_chunks_per_task);
        }
    }
    Ok(len)
}

/// [`encode_into`] into a new vector of exactly the payload's length.
///
/// # Errors
/// [`EncodeError::ChunkSizeInvalid`].
pub fn encode(words: &[u16], codebook: &Codebook, chunk_size: u32) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0u8; max_encoded_len(words.len(), chunk_size)];
    let len = encode_into(words, codebook, chunk_size, &mut out)?;
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

/// One chunk's work: (((input words, codes), sign+mantissa bytes), (escape position
/// bytes, escape exponent bytes)).
type EncodeTask<'a> = (((&'a [u16], &'a mut [u8]), &'a mut [u8]), (&'a mut [u8], &'a mut [u8]));

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
fn write_coded(
    words: &[u16],
    table: &[u8; 256],
    cs: usize,
    layout: &CodedLayout,
    counts: &[u32],
    offsets: &[u32],
    out: &mut [u8],
    parallel: bool,
    min_chunks_per_task: usize,
) {
    let mut cursor = HEADER_LEN;
    let mut rest = &mut out[HEADER_LEN..];
    let codes = take_section(&mut rest, &mut cursor, layout.codes);
    let sign_mantissa = take_section(&mut rest, &mut cursor, layout.sign_mantissa);
    let escape_offsets = take_section(&mut rest, &mut cursor, layout.escape_offsets);
    let mut positions = take_section(&mut rest, &mut cursor, layout.escape_positions);
    let mut exponents = take_section(&mut rest, &mut cursor, layout.escape_exponents);
    debug_assert!(rest.is_empty(), "the layout ends at the escape exponents");

    for (o, &v) in escape_offsets.chunks_exact_mut(ESCAPE_OFFSET_BYTES).zip(offsets) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    // Each chunk's slice of the two escape arrays.
    let mut escapes: Vec<(&mut [u8], &mut [u8])> = Vec::with_capacity(counts.len());
    for &c in counts {
        let (p, p_rest) = std::mem::take(&mut positions).split_at_mut(c as usize * ESCAPE_POSITION_BYTES);
        let (e, e_rest) = std::mem::take(&mut exponents).split_at_mut(c as usize * ESCAPE_EXPONENT_BYTES);
        positions = p_rest;
        exponents = e_rest;
        escapes.push((p, e));
    }

    let encode_chunk = |(((w, codes), sm), (pos, exps)): EncodeTask<'_>| {
        let mut k = 0;
        for (i, &x) in w.iter().enumerate() {
            let e = exponent_of(x);
            sm[i] = sign_mantissa_of(x);
            let mut code = table[e as usize];
            if code == NO_CODE {
                pos[k * ESCAPE_POSITION_BYTES..(k + 1) * ESCAPE_POSITION_BYTES]
                    .copy_from_slice(&(i as u16).to_le_bytes());
                exps[k] = e;
                k += 1;
                code = ESCAPE_CODE;
            }
            if i % 2 == 0 {
                codes[i / 2] = code;
            } else {
                codes[i / 2] |= code << CODE_BITS;
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
