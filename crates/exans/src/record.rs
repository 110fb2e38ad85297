//! One physical KV block <-> one self-contained record (spec §2-§7).

use std::fmt;

use bf16_field::{exponent_of, sign_mantissa_of};

use crate::format::{
    self, DIRECTORY_LEN, FLAG_RAW, HEADER_LEN, KNOWN_FLAGS, LANES, MODEL_COUNT_LEN, MODEL_ENTRY_LEN,
    PARTITIONS, PRECISION, RECORD_MAGIC, VERSION, WORD_LEN, align_up, header, partition_range,
};
use crate::model::Model;
use crate::rans::{TABLE_SLOTS, decode_partitions_with, encode_partition, fill_decode_table};
use crate::{Error, Result};

/// The shape of one physical KV block: L layers x {K, V} x `tokens` (B') x H x D.
///
/// The block holds `2L` groups in block order (layer 0 K, layer 0 V, layer 1 K, ...),
/// each `tokens x kv_heads x head_dim` BF16 values token-major, as
/// [`bf16_field::KvCache::block`] returns them. Every dimension must be in
/// `1..=65535` (the header's `u16` fields) and `N = 2 L B' H D` must fit the record's
/// `u32` fields together with the 48-byte header: `48 + 2N < 2^32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockShape {
    /// L: layers.
    pub layers: usize,
    /// H: KV heads per layer.
    pub kv_heads: usize,
    /// D: values per head per token.
    pub head_dim: usize,
    /// B': tokens in this block (B, or fewer for a cache's trailing block).
    pub tokens: usize,
}

impl BlockShape {
    /// Groups in the block: `2L`.
    pub fn groups(&self) -> usize {
        2 * self.layers
    }

    /// Values per group: `B' x H x D` (saturating; see [`BlockShape::values`]).
    pub fn values_per_group(&self) -> usize {
        self.tokens.saturating_mul(self.kv_heads).saturating_mul(self.head_dim)
    }

    /// Values in the block, `N = 2 L B' H D`, after checking every limit of the format.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a zero dimension, [`Error::DimensionTooLarge`] for one
    /// above 65535, [`Error::ShapeOverflow`] when `48 + 2N` does not fit in `u32`.
    pub fn values(&self) -> Result<usize> {
        let &BlockShape { layers, kv_heads, head_dim, tokens } = self;
        if layers == 0 || kv_heads == 0 || head_dim == 0 || tokens == 0 {
            return Err(Error::InvalidShape { layers, kv_heads, head_dim, tokens });
        }
        for (what, value) in
            [("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("tokens", tokens)]
        {
            if value > u16::MAX as usize {
                return Err(Error::DimensionTooLarge { what, value, max: u16::MAX as usize });
            }
        }
        let n = 2 * layers as u128 * kv_heads as u128 * head_dim as u128 * tokens as u128;
        if HEADER_LEN as u128 + 2 * n > u32::MAX as u128 {
            return Err(Error::ShapeOverflow { layers, kv_heads, head_dim, tokens });
        }
        Ok(n as usize)
    }
}

/// When the encoder stores a block raw (spec §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RawPolicy {
    /// Raw when the coded record would not be smaller than the raw one (the default).
    #[default]
    Auto,
    /// Always code (tests, worked examples); the record may be larger than raw.
    Never,
    /// Always raw.
    Always,
}

/// Encoder settings. The decoder needs none of them: everything is in the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Probability precision n, `1..=12` (spec §5.2); default [`format::PRECISION`] = 12.
    pub precision: u8,
    /// Raw fallback policy; default [`RawPolicy::Auto`].
    pub raw: RawPolicy,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions { precision: PRECISION, raw: RawPolicy::Auto }
    }
}

/// The center of one group: its most frequent exponent, the smallest on a tie (spec §2).
pub fn group_center(group: &[u16]) -> u8 {
    let mut counts = [0u32; 256];
    for &w in group {
        counts[exponent_of(w) as usize] += 1;
    }
    let mut best = 0;
    for (e, &c) in counts.iter().enumerate() {
        if c > counts[best] {
            best = e;
        }
    }
    best as u8
}

/// Maps exponent `e` of a group with center `c` to its symbol `(e + 127 - c) mod 256`.
#[inline(always)]
pub const fn center_symbol(exponent: u8, center: u8) -> u8 {
    exponent.wrapping_add(format::CENTER_SYMBOL.wrapping_sub(center))
}

/// The inverse of [`center_symbol`]: `(symbol + c - 127) mod 256`.
#[inline(always)]
pub const fn center_exponent(symbol: u8, center: u8) -> u8 {
    symbol.wrapping_add(center).wrapping_sub(format::CENTER_SYMBOL)
}

/// Section offsets of a coded record, derived from L, K, the word counts and N (spec §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    model: usize,
    directory: usize,
    words: usize,
    /// Byte offset of each partition's word stream.
    streams: [usize; PARTITIONS],
    sign_mantissa: usize,
    record_len: usize,
}

impl Layout {
    /// `None` when an offset overflows `usize` (a hostile word count).
    fn derive(
        layers: usize,
        symbols: usize,
        word_counts: &[u32; PARTITIONS],
        values: usize,
    ) -> Option<Layout> {
        let model = HEADER_LEN.checked_add(layers.checked_mul(2)?)?;
        let directory = align_up(model.checked_add(MODEL_COUNT_LEN + MODEL_ENTRY_LEN * symbols)?)?;
        let words = directory.checked_add(DIRECTORY_LEN)?;
        let mut streams = [0; PARTITIONS];
        let mut at = words;
        for (start, &count) in streams.iter_mut().zip(word_counts) {
            *start = at;
            at = align_up(at.checked_add((count as usize).checked_mul(WORD_LEN)?)?)?;
        }
        let record_len = at.checked_add(values)?;
        Some(Layout { model, directory, words, streams, sign_mantissa: at, record_len })
    }
}

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
fn write_header(out: &mut [u8], shape: &BlockShape, values: usize, flags: u16) {
    out[header::MAGIC..header::MAGIC + 4].copy_from_slice(&RECORD_MAGIC);
    put_u16(out, header::VERSION, VERSION);
    put_u16(out, header::FLAGS, flags);
    put_u16(out, header::LAYERS, shape.layers as u16);
    put_u16(out, header::KV_HEADS, shape.kv_heads as u16);
    put_u16(out, header::HEAD_DIM, shape.head_dim as u16);
    put_u16(out, header::TOKENS, shape.tokens as u16);
    put_u32(out, header::VALUES, values as u32);
}

fn check_groups(groups_len: usize, lens: impl Iterator<Item = usize>, shape: &BlockShape) -> Result<()> {
    if groups_len != shape.groups() {
        return Err(Error::GroupCountMismatch { got: groups_len, expected: shape.groups() });
    }
    let expected = shape.values_per_group();
    for (group, got) in lens.enumerate() {
        if got != expected {
            return Err(Error::GroupLengthMismatch { group, got, expected });
        }
    }
    Ok(())
}

/// Encodes one physical KV block with the default options (precision 12, raw fallback
/// when coding does not pay). See [`encode_block_with`].
///
/// # Errors
/// As [`encode_block_with`].
pub fn encode_block(groups: &[&[u16]], shape: BlockShape) -> Result<Vec<u8>> {
    encode_block_with(groups, shape, &EncodeOptions::default())
}

/// Encodes one physical KV block into one self-contained record (ExANS seed, "Block
/// Local Alignment" and "Encoding Pipeline"; spec §2-§7).
///
/// `groups` are the block's `2L` groups in block order (layer 0 K, layer 0 V, ...), each
/// `B' x H x D` BF16 words, as [`bf16_field::KvCache::block`] returns them.
///
/// # Errors
/// [`Error::InvalidShape`], [`Error::DimensionTooLarge`], [`Error::ShapeOverflow`] for a
/// shape the header cannot carry; [`Error::GroupCountMismatch`] /
/// [`Error::GroupLengthMismatch`] when `groups` does not match `shape`;
/// [`Error::UnsupportedPrecisionForEncode`] for a precision outside `1..=12` or below
/// `log2` of the block's distinct symbols (with [`RawPolicy::Auto`] that case is stored
/// raw instead).
pub fn encode_block_with(groups: &[&[u16]], shape: BlockShape, options: &EncodeOptions) -> Result<Vec<u8>> {
    let values = shape.values()?;
    check_groups(groups.len(), groups.iter().map(|g| g.len()), &shape)?;
    if options.raw == RawPolicy::Always {
        return Ok(encode_raw(groups, &shape, values));
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
        Err(_) if options.raw == RawPolicy::Auto => return Ok(encode_raw(groups, &shape, values)),
        Err(e) => return Err(e),
    };
    let table = model.encode_table();
    let mut word_counts = [0u32; PARTITIONS];
    let mut states = [[0u32; LANES]; PARTITIONS];
    let mut words: Vec<u16> = Vec::with_capacity(values / 4);
    let mut stream_ends = [0usize; PARTITIONS];
    for p in 0..PARTITIONS {
        let (start, end) = partition_range(values, p);
        states[p] = encode_partition(&symbols[start..end], &table, options.precision as u32, &mut words);
        stream_ends[p] = words.len();
        word_counts[p] = (stream_ends[p] - if p == 0 { 0 } else { stream_ends[p - 1] }) as u32;
    }
    let layout = Layout::derive(shape.layers, model.entries().len(), &word_counts, values)
        .expect("offsets of a block whose 2N fits u32 fit usize");
    let raw_len = HEADER_LEN + 2 * values;
    if options.raw == RawPolicy::Auto && layout.record_len >= raw_len {
        return Ok(encode_raw(groups, &shape, values));
    }
    let record_len = u32::try_from(layout.record_len).map_err(|_| Error::ShapeOverflow {
        layers: shape.layers,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        tokens: shape.tokens,
    })?;

    let mut out = Vec::with_capacity(layout.record_len);
    out.resize(HEADER_LEN, 0);
    write_header(&mut out, &shape, values, 0);
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
    for group in groups {
        out.extend(group.iter().map(|&w| sign_mantissa_of(w)));
    }
    debug_assert_eq!(out.len(), layout.record_len);
    Ok(out)
}

/// A raw record: header, then the N words LE in block order (spec §7).
fn encode_raw(groups: &[&[u16]], shape: &BlockShape, values: usize) -> Vec<u8> {
    let record_len = HEADER_LEN + 2 * values;
    let mut out = Vec::with_capacity(record_len);
    out.resize(HEADER_LEN, 0);
    write_header(&mut out, shape, values, FLAG_RAW);
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

// ---------------------------------------------------------------------------------------
// Parsing (shared by decode and inspect).
// ---------------------------------------------------------------------------------------

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
struct Parsed<'a> {
    shape: BlockShape,
    values: usize,
    body: Body<'a>,
}

// One `Body` lives per decode call, on the stack; boxing the 1 KiB of states would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Body<'a> {
    Raw {
        words: &'a [u8],
    },
    Coded {
        centers: &'a [u8],
        model: Model,
        word_counts: [u32; PARTITIONS],
        states: [[u32; LANES]; PARTITIONS],
        streams: [&'a [u8]; PARTITIONS],
        sign_mantissa: &'a [u8],
        layout: Layout,
    },
}

/// Reads and validates the 48-byte header's common part; returns the shape and N.
fn parse_header(record: &[u8]) -> Result<(BlockShape, usize, u16)> {
    get(record, 0, HEADER_LEN)?;
    let magic: [u8; 4] = record[..4].try_into().expect("4 bytes");
    if magic != RECORD_MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let version = u16_at(record, header::VERSION)?;
    if version != VERSION {
        return Err(Error::UnsupportedVersion { version });
    }
    let flags = u16_at(record, header::FLAGS)?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(Error::UnsupportedFlags { flags });
    }
    if record[header::RESERVED0] != 0 {
        return Err(Error::ReservedNonZero {
            offset: header::RESERVED0,
            value: record[header::RESERVED0] as u32,
        });
    }
    let reserved1 = u32_at(record, header::RESERVED1)?;
    if reserved1 != 0 {
        return Err(Error::ReservedNonZero { offset: header::RESERVED1, value: reserved1 });
    }
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
    Ok((shape, values, flags))
}

fn parse(record: &[u8]) -> Result<Parsed<'_>> {
    let (shape, values, flags) = parse_header(record)?;
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
        return Ok(Parsed { shape, values, body: Body::Raw { words: &record[HEADER_LEN..] } });
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

    // Directory: offsets follow from K; the word counts fix the rest.
    let probe = Layout::derive(shape.layers, count as usize, &[0; PARTITIONS], values).ok_or(
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
    let layout = Layout::derive(shape.layers, count as usize, &word_counts, values)
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
    let sign_mantissa = get(record, layout.sign_mantissa, values)?;
    Ok(Parsed {
        shape,
        values,
        body: Body::Coded { centers, model, word_counts, states, streams, sign_mantissa, layout },
    })
}

/// Reads only the shape of a record's header after the common header checks.
///
/// # Errors
/// The header errors of [`decode_block_into`]: [`Error::Truncated`], [`Error::BadMagic`],
/// [`Error::UnsupportedVersion`], [`Error::UnsupportedFlags`], [`Error::ReservedNonZero`],
/// [`Error::InvalidShape`], [`Error::ShapeOverflow`], [`Error::ValueCountMismatch`],
/// [`Error::TrailingBytes`].
pub fn record_shape(record: &[u8]) -> Result<BlockShape> {
    parse_header(record).map(|(shape, _, _)| shape)
}

/// Decodes one record into the block's `2L` groups, each `B' x H x D` words, block order
/// (spec §6, §9). Returns the record's shape. `record` must be exactly one record.
///
/// # Errors
/// Every reject of spec §10: header errors (see [`record_shape`]);
/// [`Error::UnsupportedPrecision`], [`Error::UnsupportedLayout`],
/// [`Error::SectionMismatch`], [`Error::NonZeroPadding`]; model errors
/// ([`Error::BadSymbolCount`], [`Error::ZeroFrequency`], [`Error::DuplicateSymbol`],
/// [`Error::SymbolsNotAscending`], [`Error::FrequencySumMismatch`]);
/// [`Error::PartitionPastEnd`], [`Error::StateOutOfRange`],
/// [`Error::WordStreamExhausted`], [`Error::FinalStateMismatch`],
/// [`Error::UnconsumedWords`]; [`Error::GroupCountMismatch`] /
/// [`Error::GroupLengthMismatch`] when `groups` does not match the record's shape.
/// On error the contents of `groups` are unspecified.
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
        Body::Coded { centers, model, states, streams, sign_mantissa, .. } => {
            DECODE_SCRATCH.with(|scratch| {
                let mut scratch = scratch.borrow_mut();
                let DecodeScratch { table, symbols, words } = &mut *scratch;
                fill_decode_table(&model, table);
                let precision = model.precision() as u32;
                // GROUP partitions at a time: the decoder interleaves their independent
                // dependency chains (2 measured faster than 1 and than 4, which spills).
                const GROUP: usize = 2;
                const _: () = assert!(PARTITIONS % GROUP == 0, "partitions decode in groups");
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
                    decode_partitions_with::<GROUP>(
                        p,
                        std::array::from_fn(|i| &states[p + i]),
                        std::array::from_fn(|i| streams[p + i]),
                        table,
                        precision,
                        out,
                        words,
                    )?;
                    join_range(groups, per_group, centers, start, symbols, &sign_mantissa[start..end]);
                }
                Ok::<(), Error>(())
            })?;
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
    // record's own length (a coded record holds N sign+mantissa bytes, a raw one 2N).
    let parsed = parse(record)?;
    let shape = parsed.shape;
    let mut words = vec![0u16; parsed.values];
    let mut groups: Vec<&mut [u16]> = words.chunks_mut(shape.values_per_group()).collect();
    decode_parsed(parsed, &mut groups)?;
    Ok((shape, words))
}

/// A readable summary of a validated record: header, centers, model and section sizes.
/// Its [`fmt::Display`] form is what the snapshot tests pin (spec §3-§5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordInfo {
    /// The block's shape.
    pub shape: BlockShape,
    /// N, values in the block.
    pub values: usize,
    /// Whether the block is stored raw (flag bit 0).
    pub raw: bool,
    /// Record length in bytes.
    pub record_len: usize,
    /// Probability precision n; 0 for a raw record.
    pub precision: u8,
    /// The 2L group centers; empty for a raw record.
    pub centers: Vec<u8>,
    /// The sparse model's `(symbol, freq)` entries; empty for a raw record.
    pub model: Vec<(u8, u16)>,
    /// Words per partition; zeros for a raw record.
    pub word_counts: [u32; PARTITIONS],
    /// Bytes per section, padding counted with the section it follows:
    /// `[header, centers, model, directory, words, sign_mantissa]`; for a raw record
    /// `[48, 0, 0, 0, 0, 2N]`.
    pub section_bytes: [usize; 6],
}

/// Parses and validates a record without running the rANS decode (every check of
/// spec §10 except the three that need decoding: word stream exhausted, final state,
/// unconsumed words).
///
/// # Errors
/// As [`decode_block_into`], less the decode-time and output-shape errors.
pub fn inspect_record(record: &[u8]) -> Result<RecordInfo> {
    let parsed = parse(record)?;
    let values = parsed.values;
    Ok(match parsed.body {
        Body::Raw { .. } => RecordInfo {
            shape: parsed.shape,
            values,
            raw: true,
            record_len: record.len(),
            precision: 0,
            centers: Vec::new(),
            model: Vec::new(),
            word_counts: [0; PARTITIONS],
            section_bytes: [HEADER_LEN, 0, 0, 0, 0, 2 * values],
        },
        Body::Coded { centers, model, word_counts, layout, .. } => RecordInfo {
            shape: parsed.shape,
            values,
            raw: false,
            record_len: record.len(),
            precision: model.precision(),
            centers: centers.to_vec(),
            model: model.entries().to_vec(),
            word_counts,
            section_bytes: [
                HEADER_LEN,
                layout.model - HEADER_LEN,
                layout.directory - layout.model,
                layout.words - layout.directory,
                layout.sign_mantissa - layout.words,
                values,
            ],
        },
    })
}

impl fmt::Display for RecordInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        writeln!(
            f,
            "{} record: L={} H={} D={} B'={} N={} len={} ratio={:.4}",
            if self.raw { "raw" } else { "coded" },
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            self.values,
            self.record_len,
            2.0 * self.values as f64 / self.record_len as f64
        )?;
        let [h, c, m, d, w, sm] = self.section_bytes;
        writeln!(f, "sections: header={h} centers={c} model={m} directory={d} words={w} sign_mantissa={sm}")?;
        if self.raw {
            return Ok(());
        }
        write!(f, "centers:")?;
        for (g, c) in self.centers.iter().enumerate() {
            write!(f, "{}{c}", if g % 16 == 0 { "\n  " } else { " " })?;
        }
        writeln!(f)?;
        write!(f, "model: precision={} K={}", self.precision, self.model.len())?;
        for (i, (sym, freq)) in self.model.iter().enumerate() {
            write!(f, "{}{sym}:{freq}", if i % 12 == 0 { "\n  " } else { " " })?;
        }
        writeln!(f)?;
        writeln!(f, "word_counts: {:?}", self.word_counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centering_is_reversible_for_every_pair() {
        for c in 0..=255u8 {
            assert_eq!(center_symbol(c, c), 127);
            for e in 0..=255u8 {
                assert_eq!(center_exponent(center_symbol(e, c), c), e);
            }
        }
    }

    #[test]
    fn center_is_the_mode_smallest_on_ties() {
        // exponents 0x7f, 0x7f, 0x80, 0x80, 0x01: tie 0x7f/0x80 -> 0x7f.
        assert_eq!(group_center(&[0x3f80, 0x3f81, 0x4000, 0xc000, 0x0080]), 0x7f);
        assert_eq!(group_center(&[0x4000, 0xc000, 0x3f80]), 0x80);
        assert_eq!(group_center(&[]), 0);
    }

    #[test]
    fn layout_matches_the_spec_formula() {
        let l = Layout::derive(30, 40, &[1, 0, 8, 3, 0, 0, 0, 5], 1000).unwrap();
        assert_eq!(l.model, 48 + 60);
        assert_eq!(l.directory, (108usize + 2 + 120).div_ceil(16) * 16);
        assert_eq!(l.words, l.directory + 1056);
        assert_eq!(l.streams[1], l.words + 16);
        assert_eq!(l.streams[2], l.words + 16);
        assert_eq!(l.streams[3], l.words + 32);
        assert_eq!(l.sign_mantissa, l.streams[7] + 16);
        assert_eq!(l.record_len, l.sign_mantissa + 1000);
        assert!(Layout::derive(1, 1, &[u32::MAX; 8], usize::MAX - 10).is_none());
    }
}
