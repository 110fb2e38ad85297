//! The record encoder (spec §2-§7).

use bf16_field::{exponent_of, sign_mantissa_of};

use super::{
    BlockShape, EncodeOptions, Layout, RawPolicy, center_symbol, check_groups, group_center, payload_len,
};
use crate::format::{
    self, FLAG_CHECKSUM, FLAG_RAW, HEADER_LEN, LANES, PARTITIONS, PAYLOAD_BYTES, PAYLOAD_BYTES_PER_LANE,
    RECORD_MAGIC, STATE_LOWER, VERSION, VERSION_3, align_up, header, partition_range,
};
use crate::model::Model;
use crate::rans::encode_partition;
use crate::{Error, Result};

fn put_u16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn pad_to(out: &mut Vec<u8>, len: usize) {
    debug_assert!(out.len() <= len);
    out.resize(len, 0);
}

/// Writes the header fields common to coded and raw records.
fn write_header(out: &mut [u8], version: u16, shape: &BlockShape, values: usize, flags: u16) {
    out[header::MAGIC..header::MAGIC + 4].copy_from_slice(&RECORD_MAGIC);
    put_u16(out, header::VERSION, version);
    put_u16(out, header::FLAGS, flags);
    put_u16(out, header::LAYERS, shape.layers as u16);
    put_u16(out, header::KV_HEADS, shape.kv_heads as u16);
    put_u16(out, header::HEAD_DIM, shape.head_dim as u16);
    put_u16(out, header::TOKENS, shape.tokens as u16);
    put_u32(out, header::VALUES, values as u32);
}

/// Encodes one physical KV block with the default options (precision 12, raw fallback
/// when coding does not pay). See [`encode_block_with`].
///
/// # Errors
/// As [`encode_block_with`].
pub fn encode_block(groups: &[&[u16]], shape: BlockShape) -> Result<Vec<u8>> {
    encode_block_with(groups, shape, &EncodeOptions::default())
}

/// Encodes one physical KV block into one self-contained record (the ExANS paper, "Block
/// Local Alignment" and "Encoding Pipeline"; spec §2-§7).
///
/// `groups` are the block's `2L` groups in block order (layer 0 K, layer 0 V, ...), each
/// `B' x H x D` BF16 words, as [`bf16_field::KvCache::block`] returns them.
///
/// # Errors
/// [`Error::InvalidShape`], [`Error::DimensionTooLarge`], [`Error::ShapeOverflow`] for a
/// shape the header cannot carry; [`Error::GroupCountMismatch`] /
/// [`Error::GroupLengthMismatch`] when `groups` does not match `shape`;
/// [`Error::UnsupportedVersion`] for an [`EncodeOptions::version`] other than 4 or 3;
/// [`Error::UnsupportedPrecisionForEncode`] for a precision outside `1..=12` or below
/// `log2` of the block's distinct symbols (with [`RawPolicy::Auto`] that case is stored
/// raw instead).
pub fn encode_block_with(groups: &[&[u16]], shape: BlockShape, options: &EncodeOptions) -> Result<Vec<u8>> {
    let mut record = encode_unsealed(groups, shape, options)?;
    if options.checksum {
        let flags = u16::from_le_bytes([record[header::FLAGS], record[header::FLAGS + 1]]);
        put_u16(&mut record, header::FLAGS, flags | FLAG_CHECKSUM);
        put_u32(&mut record, header::CHECKSUM, super::block_checksum(groups.iter().copied()));
    }
    Ok(record)
}

/// The record without its checksum.
fn encode_unsealed(groups: &[&[u16]], shape: BlockShape, options: &EncodeOptions) -> Result<Vec<u8>> {
    let values = shape.values()?;
    check_groups(groups.len(), groups.iter().map(|g| g.len()), &shape)?;
    let version = options.version.unwrap_or(VERSION);
    if version != VERSION && version != VERSION_3 {
        return Err(Error::UnsupportedVersion { version });
    }
    if options.raw == RawPolicy::Always {
        return Ok(encode_raw(groups, version, &shape, values));
    }
    if !(format::MIN_PRECISION..=format::MAX_PRECISION).contains(&options.precision) {
        return Err(Error::UnsupportedPrecisionForEncode { precision: options.precision, distinct: 0 });
    }
    let centers: Vec<u8> = groups.iter().map(|g| group_center(g)).collect();
    let mut symbols = Vec::with_capacity(values);
    let mut counts = [0u64; 256];
    for (group, &center) in groups.iter().zip(&centers) {
        for &w in *group {
            let s = center_symbol(exponent_of(w), center);
            counts[s as usize] += 1;
            symbols.push(s);
        }
    }
    let model = match Model::quantize(&counts, options.precision) {
        Ok(m) => m,
        // Too many distinct symbols for a low precision: raw is the only record.
        Err(_) if options.raw == RawPolicy::Auto => {
            return Ok(encode_raw(groups, version, &shape, values));
        }
        Err(e) => return Err(e),
    };
    let table = model.encode_table();
    // The lanes' initial states carry values 0..P (none in version 3); the section holds
    // the rest.
    let payload = payload_len(version, values);
    let section = values - payload;
    let initial = initial_states(groups, payload);
    let mut word_counts = [0u32; PARTITIONS];
    let mut states = [[0u32; LANES]; PARTITIONS];
    let mut words: Vec<u16> = Vec::with_capacity(values / 4);
    let mut stream_ends = [0usize; PARTITIONS];
    for p in 0..PARTITIONS {
        let (start, end) = partition_range(values, p);
        states[p] =
            encode_partition(&symbols[start..end], &table, options.precision as u32, &initial[p], &mut words);
        stream_ends[p] = words.len();
        word_counts[p] = (stream_ends[p] - if p == 0 { 0 } else { stream_ends[p - 1] }) as u32;
    }
    let layout = Layout::derive(shape.layers, model.entries().len(), &word_counts, section)
        .expect("offsets of a block whose 2N fits u32 fit usize");
    let raw_len = HEADER_LEN + 2 * values;
    if options.raw == RawPolicy::Auto && layout.record_len >= raw_len {
        return Ok(encode_raw(groups, version, &shape, values));
    }
    let record_len = u32::try_from(layout.record_len).map_err(|_| Error::ShapeOverflow {
        layers: shape.layers,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        tokens: shape.tokens,
    })?;

    let mut out = Vec::with_capacity(layout.record_len);
    out.resize(HEADER_LEN, 0);
    write_header(&mut out, version, &shape, values, 0);
    put_u32(&mut out, header::RECORD_LEN, record_len);
    out[header::PRECISION] = options.precision;
    out[header::PARTITIONS] = PARTITIONS as u8;
    out[header::LANES] = LANES as u8;
    put_u32(&mut out, header::MODEL_OFFSET, layout.model as u32);
    put_u32(&mut out, header::DIRECTORY_OFFSET, layout.directory as u32);
    put_u32(&mut out, header::WORDS_OFFSET, layout.words as u32);
    put_u32(&mut out, header::SIGN_MANTISSA_OFFSET, layout.sign_mantissa as u32);
    out.extend_from_slice(&centers);
    model.write(&mut out);
    pad_to(&mut out, layout.directory);
    for c in word_counts {
        out.extend_from_slice(&c.to_le_bytes());
    }
    for lane_states in &states {
        for s in lane_states {
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
    let mut from = 0;
    for p in 0..PARTITIONS {
        debug_assert_eq!(out.len(), layout.streams[p]);
        for w in &words[from..stream_ends[p]] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        from = stream_ends[p];
        let aligned = align_up(out.len()).expect("small");
        pad_to(&mut out, aligned);
    }
    debug_assert_eq!(out.len(), layout.sign_mantissa);
    out.extend(groups.iter().flat_map(|g| g.iter()).skip(payload).map(|&w| sign_mantissa_of(w)));
    debug_assert_eq!(out.len(), layout.record_len);
    Ok(out)
}

/// The lanes' initial encoder states (spec §6.4): lane `j` of partition `p`, `k = 32 p +
/// j`, starts at `2^16 + b0 + 256 b1`, with `b0`, `b1` the sign+mantissa bytes of block
/// values `2 k` and `2 k + 1` (0 where that index is `P` or more); `P` is where the
/// section starts.
fn initial_states(groups: &[&[u16]], carried: usize) -> [[u32; LANES]; PARTITIONS] {
    // Every group has the same length (checked), at least 1.
    let per_group = groups[0].len();
    let mut payload = [0u8; PAYLOAD_BYTES];
    for (b, v) in payload.iter_mut().zip(0..carried) {
        *b = sign_mantissa_of(groups[v / per_group][v % per_group]);
    }
    std::array::from_fn(|p| {
        std::array::from_fn(|j| {
            let at = PAYLOAD_BYTES_PER_LANE * (LANES * p + j);
            STATE_LOWER + payload[at] as u32 + ((payload[at + 1] as u32) << 8)
        })
    })
}

/// A raw record: header, then the N words LE in block order (spec §7).
fn encode_raw(groups: &[&[u16]], version: u16, shape: &BlockShape, values: usize) -> Vec<u8> {
    let record_len = HEADER_LEN + 2 * values;
    let mut out = Vec::with_capacity(record_len);
    out.resize(HEADER_LEN, 0);
    write_header(&mut out, version, shape, values, FLAG_RAW);
    put_u32(&mut out, header::RECORD_LEN, record_len as u32);
    for field in
        [header::MODEL_OFFSET, header::DIRECTORY_OFFSET, header::WORDS_OFFSET, header::SIGN_MANTISSA_OFFSET]
    {
        put_u32(&mut out, field, HEADER_LEN as u32);
    }
    for group in groups {
        for w in *group {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}
