//! The record decoder (spec §6, §9).

use super::parse::{Body, Parsed, parse};
use super::{BlockShape, check_groups};
use crate::format::{
    self, LANES, PARTITIONS, PAYLOAD_BYTES, PAYLOAD_BYTES_PER_LANE, lane_payload_bytes, partition_range,
};
use crate::rans::{TABLE_SLOTS, decode_partitions_with, fill_decode_table};
use crate::{Error, Result};

/// Decodes one record into the block's `2L` groups, each `B' x H x D` words, block order
/// (spec §6, §9). Returns the record's shape. `record` must be exactly one record.
///
/// # Errors
/// Every reject of spec §10: header errors (see [`crate::record_shape`]);
/// [`Error::UnsupportedPrecision`], [`Error::UnsupportedLayout`],
/// [`Error::SectionMismatch`], [`Error::NonZeroPadding`]; model errors
/// ([`Error::BadSymbolCount`], [`Error::ZeroFrequency`], [`Error::DuplicateSymbol`],
/// [`Error::SymbolsNotAscending`], [`Error::FrequencySumMismatch`]);
/// [`Error::PartitionPastEnd`], [`Error::StateOutOfRange`],
/// [`Error::WordStreamExhausted`], [`Error::FinalStateMismatch`],
/// [`Error::UnconsumedWords`]; [`Error::GroupCountMismatch`] /
/// [`Error::GroupLengthMismatch`] when `groups` does not match the record's shape; last,
/// for a record with a checksum, [`Error::ChecksumMismatch`] (the values are written).
/// On any other error the contents of `groups` are unspecified.
pub fn decode_block_into(record: &[u8], groups: &mut [&mut [u16]]) -> Result<BlockShape> {
    decode_parsed(parse(record)?, groups)
}

/// Per-thread buffers of the coded decode path, reused across partitions and blocks.
struct DecodeScratch {
    table: Box<[u32; TABLE_SLOTS]>,
    /// One partition's symbols (about N / 8 bytes: stays in L1/L2 for the join).
    symbols: Vec<u8>,
    /// One partition's words plus padding.
    words: Vec<u16>,
}

thread_local! {
    static DECODE_SCRATCH: std::cell::RefCell<DecodeScratch> = std::cell::RefCell::new(DecodeScratch {
        table: Box::new([0; TABLE_SLOTS]),
        symbols: Vec::new(),
        words: Vec::new(),
    });
}

/// Un-centers the symbols of block positions `start..start + symbols.len()` and joins
/// them with their sign+mantissa bytes into `groups` (each `per_group` words).
fn join_range(
    groups: &mut [&mut [u16]],
    per_group: usize,
    centers: &[u8],
    start: usize,
    symbols: &[u8],
    sign_mantissa: &[u8],
) {
    let mut at = start;
    let mut done = 0;
    while done < symbols.len() {
        let (g, off) = (at / per_group, at % per_group);
        let len = (per_group - off).min(symbols.len() - done);
        let out = &mut groups[g][off..off + len];
        join_run(out, centers[g], &symbols[done..done + len], &sign_mantissa[done..done + len]);
        at += len;
        done += len;
    }
}

/// `out[i] = join(center_exponent(symbols[i], center), sign_mantissa[i])`, 16 at a time.
#[inline]
fn join_run(out: &mut [u16], center: u8, symbols: &[u8], sign_mantissa: &[u8]) {
    const CHUNK: usize = 16;
    let offset = center.wrapping_sub(format::CENTER_SYMBOL);
    // All in u16 lanes so that the loop vectorises: u = exponent << 8 | sign+mantissa,
    // then the sign moves to bit 15 and the exponent down one bit.
    #[inline(always)]
    fn join16(offset: u8, s: u8, sf: u8) -> u16 {
        let u = ((s.wrapping_add(offset) as u16) << 8) | sf as u16;
        ((u & 0x80) << 8) | ((u >> 1) & 0x7f80) | (u & 0x7f)
    }
    let one = |s: u8, sf: u8| -> u16 { join16(offset, s, sf) };
    let mut o = out.chunks_exact_mut(CHUNK);
    let mut s = symbols.chunks_exact(CHUNK);
    let mut m = sign_mantissa.chunks_exact(CHUNK);
    for ((o, s), m) in (&mut o).zip(&mut s).zip(&mut m) {
        let o: &mut [u16; CHUNK] = o.try_into().expect("chunk");
        let s: &[u8; CHUNK] = s.try_into().expect("chunk");
        let m: &[u8; CHUNK] = m.try_into().expect("chunk");
        for i in 0..CHUNK {
            o[i] = one(s[i], m[i]);
        }
    }
    for ((o, &s), &m) in o.into_remainder().iter_mut().zip(s.remainder()).zip(m.remainder()) {
        *o = one(s, m);
    }
}

fn decode_parsed(parsed: Parsed<'_>, groups: &mut [&mut [u16]]) -> Result<BlockShape> {
    check_groups(groups.len(), groups.iter().map(|g| g.len()), &parsed.shape)?;
    let checksum = parsed.checksum;
    let shape = decode_values(parsed, groups)?;
    if let Some(stored) = checksum {
        let computed = super::block_checksum(groups.iter().map(|g| &**g));
        if computed != stored {
            return Err(Error::ChecksumMismatch { stored, computed });
        }
    }
    Ok(shape)
}

fn decode_values(parsed: Parsed<'_>, groups: &mut [&mut [u16]]) -> Result<BlockShape> {
    let per_group = parsed.shape.values_per_group();
    match parsed.body {
        Body::Raw { words } => {
            for (g, group) in groups.iter_mut().enumerate() {
                let bytes = &words[2 * g * per_group..2 * (g + 1) * per_group];
                for (w, b) in group.iter_mut().zip(bytes.chunks_exact(2)) {
                    *w = u16::from_le_bytes([b[0], b[1]]);
                }
            }
        }
        Body::Coded { centers, model, states, streams, sign_mantissa, payload, .. } => {
            // Values P..N join with the section; values 0..P (spec §6.4) with the bytes of
            // the lanes' final states, once every partition is done.
            let capacity: [[u8; LANES]; PARTITIONS] =
                std::array::from_fn(|p| std::array::from_fn(|j| lane_payload_bytes(payload, p, j) as u8));
            // The first P symbols, copied out of the per-group buffer (a small block's
            // first P values span several partitions), and the P bytes of the final states.
            let mut head_symbols = [0u8; PAYLOAD_BYTES];
            let mut head_bytes = [0u8; PAYLOAD_BYTES];
            DECODE_SCRATCH.with(|scratch| {
                let mut scratch = scratch.borrow_mut();
                let DecodeScratch { table, symbols, words } = &mut *scratch;
                fill_decode_table(&model, table);
                let precision = model.precision() as u32;
                // GROUP partitions at a time: the decoder interleaves their independent
                // dependency chains (2 measured faster than 1 and than 4, which spills).
                const GROUP: usize = 2;
                const _: () = assert!(PARTITIONS.is_multiple_of(GROUP), "partitions decode in groups");
                for p in (0..PARTITIONS).step_by(GROUP) {
                    let (start, _) = partition_range(parsed.values, p);
                    let (_, end) = partition_range(parsed.values, p + GROUP - 1);
                    // Every symbol is overwritten by a successful decode: no clear.
                    symbols.resize(end - start, 0);
                    let mut rest = &mut symbols[..];
                    let out: [&mut [u8]; GROUP] = std::array::from_fn(|i| {
                        let (a, b) = partition_range(parsed.values, p + i);
                        let (part, tail) = std::mem::take(&mut rest).split_at_mut(b - a);
                        rest = tail;
                        part
                    });
                    let finals = decode_partitions_with::<GROUP>(
                        p,
                        std::array::from_fn(|i| &states[p + i]),
                        std::array::from_fn(|i| &capacity[p + i]),
                        std::array::from_fn(|i| streams[p + i]),
                        table,
                        precision,
                        out,
                        words,
                    )?;
                    // Values split..end join with the section now, start..split later.
                    let split = payload.clamp(start, end);
                    if split > start {
                        head_symbols[start..split].copy_from_slice(&symbols[..split - start]);
                    }
                    if end > split {
                        let (section, at) =
                            (&sign_mantissa[split - payload..end - payload], &symbols[split - start..]);
                        join_range(groups, per_group, centers, split, at, section);
                    }
                    if payload > 0 {
                        // Lane k = 32 p + j: bytes 2 k and 2 k + 1 of the payload, the low
                        // byte first; capacity 0 left the state at exactly 2^16 (zeros).
                        for (i, lane_states) in finals.iter().enumerate() {
                            for (j, &state) in lane_states.iter().enumerate() {
                                let at = PAYLOAD_BYTES_PER_LANE * (LANES * (p + i) + j);
                                let [b0, b1, ..] = state.to_le_bytes();
                                head_bytes[at..at + 2].copy_from_slice(&[b0, b1]);
                            }
                        }
                    }
                }
                Ok::<(), Error>(())
            })?;
            join_range(groups, per_group, centers, 0, &head_symbols[..payload], &head_bytes[..payload]);
        }
    }
    Ok(parsed.shape)
}

/// Decodes one record into a fresh vector of its `N` words in block order (group `g`
/// at `[g B' H D, (g + 1) B' H D)`).
///
/// # Errors
/// As [`decode_block_into`].
pub fn decode_block(record: &[u8]) -> Result<(BlockShape, Vec<u16>)> {
    // Validate every section first: the allocation below is then bounded by the
    // record's own length (a coded record holds N - P >= N - 512 sign+mantissa bytes and
    // a 1056-byte directory, a raw one 2N).
    let parsed = parse(record)?;
    let shape = parsed.shape;
    let mut words = vec![0u16; parsed.values];
    let mut groups: Vec<&mut [u16]> = words.chunks_mut(shape.values_per_group()).collect();
    decode_parsed(parsed, &mut groups)?;
    Ok((shape, words))
}
