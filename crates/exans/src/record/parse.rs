//! The record parser: every check of spec §10 up to (not including) the rANS decode,
//! shared by the decoder and the inspector.

use super::{BlockShape, Layout, payload_len};
use crate::format::{
    self, DIRECTORY_LEN, FLAG_CHECKSUM, FLAG_RAW, HEADER_LEN, KNOWN_FLAGS, KNOWN_FLAGS_V2, LANES,
    MODEL_COUNT_LEN, MODEL_ENTRY_LEN, PARTITIONS, RECORD_MAGIC, VERSION, VERSION_2, VERSION_3, WORD_LEN,
    align_up, header,
};
use crate::model::Model;
use crate::{Error, Result};

fn get(bytes: &[u8], at: usize, len: usize) -> Result<&[u8]> {
    let end = at.checked_add(len).ok_or(Error::Truncated { needed: usize::MAX, got: bytes.len() })?;
    bytes.get(at..end).ok_or(Error::Truncated { needed: end, got: bytes.len() })
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16> {
    let b = get(bytes, at, 2)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32> {
    let b = get(bytes, at, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn check_zero(bytes: &[u8], from: usize, to: usize) -> Result<()> {
    for (i, &value) in get(bytes, from, to.saturating_sub(from))?.iter().enumerate() {
        if value != 0 {
            return Err(Error::NonZeroPadding { offset: from + i, value });
        }
    }
    Ok(())
}

fn expect_section(section: &'static str, stored: u32, expected: usize) -> Result<()> {
    if stored as usize != expected {
        return Err(Error::SectionMismatch { section, stored: stored as u64, expected: expected as u64 });
    }
    Ok(())
}

/// A record whose every section passed the checks of spec §10 up to (not including)
/// the rANS decode itself.
pub(super) struct Parsed<'a> {
    pub(super) shape: BlockShape,
    /// The record's format version: [`VERSION`], [`VERSION_3`] or [`VERSION_2`].
    pub(super) version: u16,
    pub(super) values: usize,
    /// The Adler-32 of the values, when the record carries one (flag bit 1).
    pub(super) checksum: Option<u32>,
    pub(super) body: Body<'a>,
}

// One `Body` lives per decode call, on the stack; boxing the 1 KiB of states would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Body<'a> {
    Raw {
        words: &'a [u8],
    },
    Coded {
        centers: &'a [u8],
        model: Model,
        word_counts: [u32; PARTITIONS],
        states: [[u32; LANES]; PARTITIONS],
        streams: [&'a [u8]; PARTITIONS],
        /// The sign+mantissa section: values `payload..N`.
        sign_mantissa: &'a [u8],
        /// P, the sign+mantissa bytes of values `0..P` that the lanes' states carry
        /// (spec §6.4): `min(N, 512)` in version 4, 0 in versions 2 and 3.
        payload: usize,
        layout: Layout,
    },
}

/// The 48-byte header's common part, validated.
struct Header {
    shape: BlockShape,
    version: u16,
    values: usize,
    flags: u16,
    checksum: Option<u32>,
}

/// The checks of a record header that need only its 48 bytes, not the record's length
/// (spec §10, rows 1-5): magic, version, flags, reserved fields. Returns the version, the
/// flags and the checksum. A container runs them on each record before it trusts the
/// record's length field, so that a damaged header is reported as a record error.
pub(crate) fn check_header_fields(record: &[u8]) -> Result<(u16, u16, Option<u32>)> {
    get(record, 0, HEADER_LEN)?;
    let magic: [u8; 4] = record[..4].try_into().expect("4 bytes");
    if magic != RECORD_MAGIC {
        return Err(Error::BadMagic { found: magic, expected: "KVXA" });
    }
    let version = u16_at(record, header::VERSION)?;
    // Versions 3 and 4 define the same flags; version 4 differs only in the payload of
    // the lanes' states (spec §6.4).
    let known_flags = match version {
        VERSION | VERSION_3 => KNOWN_FLAGS,
        VERSION_2 => KNOWN_FLAGS_V2,
        _ => return Err(Error::UnsupportedVersion { version }),
    };
    let flags = u16_at(record, header::FLAGS)?;
    if flags & !known_flags != 0 {
        return Err(Error::UnsupportedFlags { flags });
    }
    if record[header::RESERVED0] != 0 {
        return Err(Error::ReservedNonZero {
            offset: header::RESERVED0,
            value: record[header::RESERVED0] as u32,
        });
    }
    let stored_checksum = u32_at(record, header::CHECKSUM)?;
    let checksum = (flags & FLAG_CHECKSUM != 0).then_some(stored_checksum);
    if checksum.is_none() && stored_checksum != 0 {
        return Err(Error::ReservedNonZero { offset: header::CHECKSUM, value: stored_checksum });
    }
    Ok((version, flags, checksum))
}

/// Reads and validates the 48-byte header's common part.
fn parse_header(record: &[u8]) -> Result<Header> {
    let (version, flags, checksum) = check_header_fields(record)?;
    let shape = BlockShape {
        layers: u16_at(record, header::LAYERS)? as usize,
        kv_heads: u16_at(record, header::KV_HEADS)? as usize,
        head_dim: u16_at(record, header::HEAD_DIM)? as usize,
        tokens: u16_at(record, header::TOKENS)? as usize,
    };
    let values = shape.values()?;
    let stored = u32_at(record, header::VALUES)?;
    if stored as usize != values {
        return Err(Error::ValueCountMismatch { stored: stored as u64, expected: values as u64 });
    }
    let record_len = u32_at(record, header::RECORD_LEN)? as usize;
    if record.len() < record_len {
        return Err(Error::Truncated { needed: record_len, got: record.len() });
    }
    if record.len() > record_len {
        return Err(Error::TrailingBytes { extra: record.len() - record_len });
    }
    Ok(Header { shape, version, values, flags, checksum })
}

pub(super) fn parse(record: &[u8]) -> Result<Parsed<'_>> {
    let Header { shape, version, values, flags, checksum } = parse_header(record)?;
    let precision = record[header::PRECISION];
    let (partitions, lanes) = (record[header::PARTITIONS], record[header::LANES]);
    let stored = |field| u32_at(record, field);
    if flags & FLAG_RAW != 0 {
        if precision != 0 {
            return Err(Error::UnsupportedPrecision { precision });
        }
        if (partitions, lanes) != (0, 0) {
            return Err(Error::UnsupportedLayout { partitions, lanes });
        }
        for (section, field) in [
            ("model_offset", header::MODEL_OFFSET),
            ("directory_offset", header::DIRECTORY_OFFSET),
            ("words_offset", header::WORDS_OFFSET),
            ("sign_mantissa_offset", header::SIGN_MANTISSA_OFFSET),
        ] {
            expect_section(section, stored(field)?, HEADER_LEN)?;
        }
        expect_section("record_len", stored(header::RECORD_LEN)?, HEADER_LEN + 2 * values)?;
        return Ok(Parsed {
            shape,
            version,
            values,
            checksum,
            body: Body::Raw { words: &record[HEADER_LEN..] },
        });
    }

    if !(format::MIN_PRECISION..=format::MAX_PRECISION).contains(&precision) {
        return Err(Error::UnsupportedPrecision { precision });
    }
    if (partitions as usize, lanes as usize) != (PARTITIONS, LANES) {
        return Err(Error::UnsupportedLayout { partitions, lanes });
    }
    // Centers and model: their offsets follow from L alone.
    let model_offset = HEADER_LEN + 2 * shape.layers;
    expect_section("model_offset", stored(header::MODEL_OFFSET)?, model_offset)?;
    let centers = get(record, HEADER_LEN, 2 * shape.layers)?;
    let count = u16_at(record, model_offset)?;
    if count == 0 || count as usize > format::MAX_SYMBOLS {
        return Err(Error::BadSymbolCount { count });
    }
    let entry_bytes = get(record, model_offset + MODEL_COUNT_LEN, MODEL_ENTRY_LEN * count as usize)?;
    let entries =
        entry_bytes.chunks_exact(MODEL_ENTRY_LEN).map(|e| (e[0], u16::from_le_bytes([e[1], e[2]]))).collect();
    let model = Model::from_entries(precision, entries)?;

    // Directory: offsets follow from K; the word counts fix the rest. The section holds
    // N - P bytes, P by version (spec §4).
    let payload = payload_len(version, values);
    let section = values - payload;
    let probe = Layout::derive(shape.layers, count as usize, &[0; PARTITIONS], section).ok_or(
        Error::ShapeOverflow {
            layers: shape.layers,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            tokens: shape.tokens,
        },
    )?;
    expect_section("directory_offset", stored(header::DIRECTORY_OFFSET)?, probe.directory)?;
    expect_section("words_offset", stored(header::WORDS_OFFSET)?, probe.words)?;
    let directory = get(record, probe.directory, DIRECTORY_LEN)?;
    let dir_u32 = |i: usize| u32::from_le_bytes(directory[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let word_counts: [u32; PARTITIONS] = std::array::from_fn(dir_u32);
    let states: [[u32; LANES]; PARTITIONS] =
        std::array::from_fn(|p| std::array::from_fn(|j| dir_u32(PARTITIONS + p * LANES + j)));

    // Word streams must end before the stored sign+mantissa offset.
    let sign_mantissa_offset = stored(header::SIGN_MANTISSA_OFFSET)? as usize;
    let mut at = probe.words;
    for (partition, &c) in word_counts.iter().enumerate() {
        let end = (c as usize).checked_mul(WORD_LEN).and_then(|b| b.checked_add(at));
        match end {
            Some(end) if end <= sign_mantissa_offset => at = align_up(end).unwrap_or(usize::MAX),
            _ => return Err(Error::PartitionPastEnd { partition }),
        }
    }
    let layout = Layout::derive(shape.layers, count as usize, &word_counts, section)
        .ok_or(Error::PartitionPastEnd { partition: PARTITIONS - 1 })?;
    expect_section("sign_mantissa_offset", sign_mantissa_offset as u32, layout.sign_mantissa)?;
    expect_section("record_len", stored(header::RECORD_LEN)?, layout.record_len)?;

    // Padding after the model, after each stream.
    check_zero(record, model_offset + model.serialized_len(), layout.directory)?;
    let mut streams: [&[u8]; PARTITIONS] = [&[]; PARTITIONS];
    for p in 0..PARTITIONS {
        let len = word_counts[p] as usize * WORD_LEN;
        streams[p] = get(record, layout.streams[p], len)?;
        let next = if p + 1 < PARTITIONS { layout.streams[p + 1] } else { layout.sign_mantissa };
        check_zero(record, layout.streams[p] + len, next)?;
    }
    for (partition, lane_states) in states.iter().enumerate() {
        for (lane, &state) in lane_states.iter().enumerate() {
            if state < format::STATE_LOWER {
                return Err(Error::StateOutOfRange { partition, lane, state });
            }
        }
    }
    let sign_mantissa = get(record, layout.sign_mantissa, section)?;
    Ok(Parsed {
        shape,
        version,
        values,
        checksum,
        body: Body::Coded { centers, model, word_counts, states, streams, sign_mantissa, payload, layout },
    })
}

/// Reads only the shape of a record's header after the common header checks.
///
/// # Errors
/// The header errors of [`crate::decode_block_into`]: [`Error::Truncated`], [`Error::BadMagic`],
/// [`Error::UnsupportedVersion`], [`Error::UnsupportedFlags`], [`Error::ReservedNonZero`],
/// [`Error::InvalidShape`], [`Error::ShapeOverflow`], [`Error::ValueCountMismatch`],
/// [`Error::TrailingBytes`].
pub fn record_shape(record: &[u8]) -> Result<BlockShape> {
    parse_header(record).map(|h| h.shape)
}
