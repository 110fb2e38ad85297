//! A whole KV cache as one container (spec §5): a 64-byte header, the bases, a status
//! byte per block, the fixed-capacity slots, the raw blocks that did not fit their slot,
//! and each layer's BF16 tail (the unfilled last block's `T mod 16` tokens, which stay
//! BF16 so tokens can append to them).
//!
//! The container is the resident image of a paged cache: every full block owns a slot of
//! the same capacity, so block `i` starts at `slots + i C` without an index, and a block
//! that does not fit its slot is stored raw in the overflow section and its slot left
//! zero (the GAAC paper, "Block-wise compression").

use std::fmt;

use bf16_field::header::{check_header_crc, header_prefix, le_u32, read_shape};
use bf16_field::integrity::{adler32_bytes, adler32_words, header_crc32c};
use bf16_field::{KvCache, KvKind, KvShape, WordOrder};
use rayon::prelude::*;

use crate::bases::Bases;
use crate::block::{self, FragmentOrder, HeadTables, TagCounts, block_info};
use crate::format::{
    BLOCK_TOKENS, BlockShape, DEFAULT_CALIBRATION_TOKENS, DEFAULT_VERSION, FLAG_CHECKSUM,
    FLAG_SELF_CALIBRATED, HEADER_LEN, KNOWN_FLAGS, MAGIC, SECTION_ALIGN, STATUS_CODED, STATUS_RAW, VERSION,
    VERSION_1, header,
};
use crate::{Error, Result};

/// Encoder options of a whole cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Calibrated bases of the cache's (L, H, D); `None`: calibrate on the cache's own
    /// first [`EncodeOptions::calibration_tokens`] tokens, and say so in the header.
    pub bases: Option<Bases>,
    /// Slot capacity in bytes; `None`: [`BlockShape::default_capacity`] (spec §4).
    pub slot_capacity: Option<usize>,
    /// Tokens a cache without given bases calibrates on; `None`: the first 128
    /// ([`DEFAULT_CALIBRATION_TOKENS`]), or all if fewer.
    pub calibration_tokens: Option<usize>,
    /// Store a checksum in the header (spec §5.1), which every decoder then verifies: the
    /// Adler-32 of the container's bytes after the header in version 2, which catches
    /// every single-byte corruption, of the values in version 1 (spec §7.3); off by
    /// default.
    pub checksum: bool,
    /// The format version to write, 1 or 2 (spec §5.1: they differ only in what the
    /// checksum covers); `None`: [`DEFAULT_VERSION`].
    pub version: Option<u16>,
}

impl EncodeOptions {
    /// The version these options write: [`EncodeOptions::version`] or
    /// [`DEFAULT_VERSION`].
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] for a version other than 1 or 2.
    pub fn write_version(&self) -> Result<u16> {
        match self.version.unwrap_or(DEFAULT_VERSION) {
            version @ (VERSION_1 | VERSION) => Ok(version),
            version => Err(Error::UnsupportedVersion { version }),
        }
    }
}

/// A container's header (spec §5.1), parsed and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheHeader {
    /// The format version: [`VERSION`] (2, what the encoders write by default,
    /// [`crate::format::DEFAULT_VERSION`]) or [`VERSION_1`].
    pub version: u16,
    /// L, H, D and T.
    pub shape: KvShape,
    /// The slot capacity in bytes.
    pub slot_capacity: usize,
    /// `Some(n)`: the bases were calibrated on the cache's first `n` tokens (flag bit 1);
    /// `None`: they were given.
    pub calibration_tokens: Option<usize>,
    /// Blocks kept raw in the overflow section.
    pub raw_blocks: usize,
    /// The checksum (flag bit 0), if stored: the Adler-32 of the container's bytes after
    /// the header in version 2, of the cache's values (layer-major) in version 1.
    pub checksum: Option<u32>,
}

/// Where each section of a container starts (spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sections {
    /// The bases: `2 L H D` bytes.
    pub bases: usize,
    /// The status bytes: one per block.
    pub statuses: usize,
    /// The slots: `blocks x C` bytes.
    pub slots: usize,
    /// The raw blocks: `raw x 32 D` bytes.
    pub overflow: usize,
    /// The BF16 tails: per layer K then V, `(T mod 16) H D` words each.
    pub tails: usize,
    /// The container's length.
    pub end: usize,
}

/// Checks a cache shape against the format (spec §5.1): no zero dimension, D a multiple
/// of 64, L, H and D within `u32`. Returns its block shape.
pub(crate) fn block_shape_of(shape: KvShape) -> Result<BlockShape> {
    let [layers, kv_heads, head_dim, tokens] = shape.dims();
    if [layers, kv_heads, head_dim, tokens].contains(&0) {
        return Err(Error::InvalidShape { layers, kv_heads, head_dim, tokens });
    }
    let block = BlockShape::new(head_dim).ok_or(Error::HeadDimUnsupported { head_dim })?;
    let fits_u32 = [layers, kv_heads].iter().all(|&d| u32::try_from(d).is_ok());
    if !fits_u32 || shape.validate().is_err() {
        return Err(Error::ShapeTooLarge { layers, kv_heads, head_dim, tokens });
    }
    Ok(block)
}

/// Blocks of a cache: `2 L H floor(T / 16)`, if it fits `usize`.
fn block_count(shape: KvShape) -> Option<usize> {
    2usize.checked_mul(shape.layers)?.checked_mul(shape.kv_heads)?.checked_mul(shape.tokens / BLOCK_TOKENS)
}

/// The sections of a container of `shape` with slots of `capacity` bytes and `raw` raw
/// blocks, if its length fits `usize`.
fn sections(shape: KvShape, block: BlockShape, capacity: usize, raw: usize) -> Option<Sections> {
    let align = |n: usize| n.checked_next_multiple_of(SECTION_ALIGN);
    let blocks = block_count(shape)?;
    let bases = HEADER_LEN;
    let statuses = align(bases.checked_add(2 * shape.layers * shape.kv_heads * block.head_dim)?)?;
    let slots = align(statuses.checked_add(blocks)?)?;
    let overflow = slots.checked_add(blocks.checked_mul(capacity)?)?;
    let tails = overflow.checked_add(raw.checked_mul(block.raw_len())?)?;
    let tail_words = 2 * shape.layers * (shape.tokens % BLOCK_TOKENS) * shape.kv_heads * block.head_dim;
    let end = tails.checked_add(tail_words.checked_mul(2)?)?;
    Some(Sections { bases, statuses, slots, overflow, tails, end })
}

pub(crate) fn too_large(shape: KvShape) -> Error {
    let [layers, kv_heads, head_dim, tokens] = shape.dims();
    Error::ShapeTooLarge { layers, kv_heads, head_dim, tokens }
}

/// The largest container of a cache of `shape` with slots of `capacity` bytes (every
/// block raw): a buffer this long holds any such cache.
///
/// # Errors
/// [`Error::InvalidShape`], [`Error::HeadDimUnsupported`], [`Error::ShapeTooLarge`],
/// [`Error::SlotCapacityInvalid`].
pub fn max_encoded_len(shape: KvShape, capacity: usize) -> Result<usize> {
    let block = block_shape_of(shape)?;
    check_capacity(block, capacity)?;
    let blocks = block_count(shape).ok_or_else(|| too_large(shape))?;
    sections(shape, block, capacity, blocks).map(|s| s.end).ok_or_else(|| too_large(shape))
}

pub(crate) fn check_capacity(block: BlockShape, capacity: usize) -> Result<()> {
    if block.capacity_valid(capacity) {
        Ok(())
    } else {
        Err(Error::SlotCapacityInvalid {
            capacity,
            min: block.planes_len(),
            max: block.max_coded_len(),
            head_dim: block.head_dim,
        })
    }
}

impl CacheHeader {
    /// Parses and checks the first 64 bytes of a container (spec §7.1, rows 1-11).
    ///
    /// # Errors
    /// In order: [`Error::Truncated`], [`Error::BadMagic`], [`Error::UnsupportedVersion`],
    /// [`Error::UnknownFlags`], [`Error::ReservedNotZero`],
    /// [`Error::HeaderChecksumMismatch`], the shape's error ([`Error::InvalidShape`],
    /// [`Error::HeadDimUnsupported`], [`Error::ShapeTooLarge`]),
    /// [`Error::SlotCapacityInvalid`], [`Error::CalibrationTokensInvalid`],
    /// [`Error::RawCountMismatch`] (more raw blocks than blocks), and
    /// [`Error::ShapeTooLarge`] when the container's length overflows `usize`.
    pub fn parse(bytes: &[u8]) -> Result<CacheHeader> {
        // Version 1 or 2 (spec §5.1): the same layout, another checksum.
        let version = match bytes.get(header::VERSION..header::VERSION + 2) {
            Some(&[lo, hi]) if u16::from_le_bytes([lo, hi]) == VERSION_1 => VERSION_1,
            _ => VERSION,
        };
        let h = header_prefix::<HEADER_LEN>(bytes, MAGIC, header::VERSION, version)?;
        let flags = h[header::FLAGS];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(Error::UnknownFlags { flags });
        }
        let checksummed = flags & FLAG_CHECKSUM != 0;
        // The lowest nonzero one is reported: byte 7, then the checksum field 40..44 when
        // no flag claims it, then 44..60.
        let unchecked = (header::CHECKSUM..header::CHECKSUM + 4).filter(|_| !checksummed);
        let mut reserved =
            std::iter::once(header::RESERVED0).chain(unchecked).chain(header::RESERVED1..header::HEADER_CRC);
        if let Some(offset) = reserved.find(|&at| h[at] != 0) {
            return Err(Error::ReservedNotZero { offset, value: h[offset] });
        }
        check_header_crc(h, header::HEADER_CRC)?;
        let shape = read_shape(h, header::SHAPE);
        let block = block_shape_of(shape)?;
        let slot_capacity = le_u32(h, header::SLOT_CAPACITY) as usize;
        check_capacity(block, slot_capacity)?;
        let self_calibrated = flags & FLAG_SELF_CALIBRATED != 0;
        let calibration = le_u32(h, header::CALIBRATION_TOKENS);
        let calibration_ok = if self_calibrated {
            calibration != 0 && calibration as usize <= shape.tokens
        } else {
            calibration == 0
        };
        if !calibration_ok {
            return Err(Error::CalibrationTokensInvalid {
                calibration_tokens: calibration,
                self_calibrated,
                tokens: shape.tokens,
            });
        }
        let raw = le_u32(h, header::RAW_BLOCKS);
        let blocks = block_count(shape).ok_or_else(|| too_large(shape))?;
        if raw as usize > blocks {
            return Err(Error::RawCountMismatch { stored: raw, counted: blocks, blocks });
        }
        sections(shape, block, slot_capacity, raw as usize).ok_or_else(|| too_large(shape))?;
        Ok(CacheHeader {
            version,
            shape,
            slot_capacity,
            calibration_tokens: self_calibrated.then_some(calibration as usize),
            raw_blocks: raw as usize,
            checksum: checksummed.then(|| le_u32(h, header::CHECKSUM)),
        })
    }

    /// [`CacheHeader::parse`] of a container the caller expects to hold a cache of
    /// `expected`, in the CPU decoder's order: the expected shape first (it must be one
    /// the format can hold), then the header, then the header's shape against it.
    ///
    /// # Errors
    /// The expected shape's error, [`CacheHeader::parse`]'s, or
    /// [`Error::CacheShapeMismatch`].
    pub(crate) fn parse_expecting(bytes: &[u8], expected: Option<KvShape>) -> Result<CacheHeader> {
        if let Some(shape) = expected {
            block_shape_of(shape)?;
        }
        let header = CacheHeader::parse(bytes)?;
        if let Some(expected) = expected
            && expected != header.shape
        {
            return Err(Error::CacheShapeMismatch { expected: expected.dims(), found: header.shape.dims() });
        }
        Ok(header)
    }

    /// The 64 header bytes, the CRC-32C included.
    ///
    /// # Panics
    /// If a field exceeds its width (a header [`CacheHeader::parse`] accepted, or one the
    /// encoder made, never does).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        let s = self.shape;
        let u32_of = |d: usize| u32::try_from(d).expect("a field within its u32");
        let mut put = |at: usize, v: u32| h[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put(header::LAYERS, u32_of(s.layers));
        put(header::KV_HEADS, u32_of(s.kv_heads));
        put(header::HEAD_DIM, u32_of(s.head_dim));
        put(header::SLOT_CAPACITY, u32_of(self.slot_capacity));
        put(header::CALIBRATION_TOKENS, u32_of(self.calibration_tokens.unwrap_or(0)));
        put(header::RAW_BLOCKS, u32_of(self.raw_blocks));
        put(header::CHECKSUM, self.checksum.unwrap_or(0));
        h[header::MAGIC..header::MAGIC + 4].copy_from_slice(&MAGIC);
        h[header::VERSION..header::VERSION + 2].copy_from_slice(&self.version.to_le_bytes());
        let mut flags = 0;
        if self.checksum.is_some() {
            flags |= FLAG_CHECKSUM;
        }
        if self.calibration_tokens.is_some() {
            flags |= FLAG_SELF_CALIBRATED;
        }
        h[header::FLAGS] = flags;
        h[header::TOKENS..header::TOKENS + 8].copy_from_slice(&(s.tokens as u64).to_le_bytes());
        let crc = header_crc32c(&h, header::HEADER_CRC);
        h[header::HEADER_CRC..header::HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// The shape of the cache's blocks.
    pub fn block_shape(&self) -> BlockShape {
        BlockShape { head_dim: self.shape.head_dim }
    }

    /// Full blocks per (layer, kind, head): `floor(T / 16)`.
    pub fn blocks_per_head(&self) -> usize {
        self.shape.tokens / BLOCK_TOKENS
    }

    /// All full blocks: `2 L H floor(T / 16)`.
    pub fn blocks(&self) -> usize {
        2 * self.shape.layers * self.shape.kv_heads * self.blocks_per_head()
    }

    /// Where each section starts.
    ///
    /// # Panics
    /// If the container's length overflows `usize` (a header [`CacheHeader::parse`]
    /// accepted, or one the encoder made, never does; the fields are public, so a header
    /// built by hand can).
    pub fn sections(&self) -> Sections {
        sections(self.shape, self.block_shape(), self.slot_capacity, self.raw_blocks)
            .expect("parse and the encoder check the length")
    }

    /// (layer, kind, head, block within the head) of block `index` in container order,
    /// for `index < `[`CacheHeader::blocks`] (a larger index gives a layer past the
    /// cache's).
    ///
    /// # Panics
    /// If the cache has no full block (T < 16).
    pub fn block_coords(&self, index: usize) -> (usize, KvKind, usize, usize) {
        let per_head = self.blocks_per_head();
        let head = (index / per_head) % self.shape.kv_heads;
        let tensor = index / (per_head * self.shape.kv_heads);
        (tensor / 2, KvKind::BOTH[tensor % 2], head, index % per_head)
    }
}

/// A container's validated layout: its header, bases, and every block's status and tag
/// counts. [`cache_info`] makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheInfo {
    /// The header.
    pub header: CacheHeader,
    /// The bases stored in the container.
    pub bases: Bases,
    /// Per block in container order: `Some(tag counts, length)` for a coded block,
    /// `None` for a raw one.
    pub blocks: Vec<Option<(TagCounts, usize)>>,
    /// The container's sections.
    pub sections: Sections,
}

impl CacheInfo {
    /// Blocks coded and raw, by kind: `[(K coded, K raw), (V coded, V raw)]`.
    pub fn block_counts(&self) -> [(usize, usize); 2] {
        let mut counts = [(0, 0); 2];
        for (i, b) in self.blocks.iter().enumerate() {
            let (_, kind, _, _) = self.header.block_coords(i);
            let c = &mut counts[kind as usize];
            if b.is_some() {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
        counts
    }

    /// The groups of the coded blocks by tag, `[K, V]`.
    pub fn tag_counts(&self) -> [TagCounts; 2] {
        let mut counts = [TagCounts::default(); 2];
        for (i, b) in self.blocks.iter().enumerate() {
            if let Some((tags, _)) = b {
                counts[self.header.block_coords(i).1 as usize].merge(tags);
            }
        }
        counts
    }

    /// The bytes the container holds data in: its length without the unused bytes of
    /// slots (the padding after coded blocks and the empty slots of raw blocks).
    pub fn content_len(&self) -> usize {
        let capacity = self.header.slot_capacity;
        let unused: usize = self.blocks.iter().map(|b| b.map_or(capacity, |(_, len)| capacity - len)).sum();
        self.sections.end - unused
    }

    /// The container's length: every slot reserved.
    pub fn resident_len(&self) -> usize {
        self.sections.end
    }

    /// BF16 bytes of the cache: `4 L T H D`.
    pub fn bf16_len(&self) -> usize {
        2 * self.header.shape.total_values()
    }
}

impl fmt::Display for CacheInfo {
    /// A readable summary: the shape, slot, ratios, and the blocks and groups of each kind.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.header;
        let s = h.shape;
        writeln!(
            f,
            "gaac cache: L={} H={} D={} T={}; per (layer, kind, head): blocks {}, BF16 tail tokens {}",
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            h.blocks_per_head(),
            s.tokens % BLOCK_TOKENS
        )?;
        let bases = match h.calibration_tokens {
            Some(n) => format!("self-calibrated on the first {n} tokens"),
            None => "given".to_string(),
        };
        let covered = if h.version == VERSION_1 { "values" } else { "bytes" };
        let checksum = h.checksum.map_or("none".to_string(), |c| format!("adler32 of the {covered} {c:08x}"));
        writeln!(
            f,
            "slot {} bytes (coded block of 3-bit groups: {}, raw: {}); bases {bases}; checksum {checksum}",
            h.slot_capacity,
            h.block_shape().planes_len(),
            h.block_shape().raw_len()
        )?;
        let bf16 = self.bf16_len();
        writeln!(
            f,
            "bytes: content {} resident {} for {bf16} of BF16: content ratio {:.4}, resident ratio {:.4}",
            self.content_len(),
            self.resident_len(),
            bf16 as f64 / self.content_len() as f64,
            bf16 as f64 / self.resident_len() as f64
        )?;
        for ((kind, (coded, raw)), tags) in
            KvKind::BOTH.iter().zip(self.block_counts()).zip(self.tag_counts())
        {
            let share = |n: usize| 100.0 * n as f64 / tags.total().max(1) as f64;
            writeln!(
                f,
                "{}: blocks coded {coded}, raw {raw}; groups of coded blocks: 3-bit {:.2}%, 4-bit {:.2}%, raw {:.2}%",
                kind.suffix().to_uppercase(),
                share(tags.offset3),
                share(tags.offset4),
                share(tags.raw)
            )?;
        }
        Ok(())
    }
}

/// Parses and checks a container's header, bases, statuses and every block's tags and
/// padding (spec §7), decoding nothing.
///
/// # Errors
/// In the order of spec §7: the header's ([`CacheHeader::parse`]), then
/// [`Error::Truncated`] / [`Error::TrailingBytes`] for the length, [`Error::BaseOutOfRange`],
/// [`Error::PaddingNotZero`], [`Error::UnknownBlockStatus`], [`Error::RawCountMismatch`],
/// then the first invalid block's error in [`Error::InBlock`].
pub fn cache_info(bytes: &[u8]) -> Result<CacheInfo> {
    let header = CacheHeader::parse(bytes)?;
    let s = header.shape;
    let sections = header.sections();
    if bytes.len() < sections.end {
        return Err(Error::Truncated { needed: sections.end, got: bytes.len() });
    }
    if bytes.len() > sections.end {
        return Err(Error::TrailingBytes { extra: bytes.len() - sections.end });
    }
    let bases_len = 2 * s.layers * s.kv_heads * s.head_dim;
    let bases = Bases::from_bytes(
        s.layers,
        s.kv_heads,
        s.head_dim,
        bytes[sections.bases..sections.bases + bases_len].to_vec(),
    )?;
    let blocks = header.blocks();
    let statuses = &bytes[sections.statuses..sections.statuses + blocks];
    if let Some(offset) = (sections.bases + bases_len..sections.statuses).find(|&at| bytes[at] != 0) {
        return Err(Error::PaddingNotZero { offset, value: bytes[offset] });
    }
    if let Some(block) = statuses.iter().position(|&b| b != STATUS_CODED && b != STATUS_RAW) {
        return Err(Error::UnknownBlockStatus { block, byte: statuses[block] });
    }
    let counted = statuses.iter().filter(|&&b| b == STATUS_RAW).count();
    if counted != header.raw_blocks {
        return Err(Error::RawCountMismatch { stored: header.raw_blocks as u32, counted, blocks });
    }
    if let Some(offset) = (sections.statuses + blocks..sections.slots).find(|&at| bytes[at] != 0) {
        return Err(Error::PaddingNotZero { offset, value: bytes[offset] });
    }
    let capacity = header.slot_capacity;
    let shape = header.block_shape();
    let slots = &bytes[sections.slots..sections.overflow];
    let blocks = slots
        .par_chunks_exact(capacity)
        .zip(statuses.par_iter())
        .enumerate()
        .map(|(i, (slot, &status))| {
            let checked = if status == STATUS_RAW {
                check_zero(slot, 0).map(|()| None)
            } else {
                block_info(slot, shape, capacity)
                    .and_then(|(len, tags)| check_zero(&slot[len..], len).map(|()| Some((tags, len))))
            };
            checked.map_err(|source| {
                let (layer, kind, head, block) = header.block_coords(i);
                Error::InBlock { layer, kind, head, block, source: Box::new(source) }
            })
        })
        // Collected in block order before the first error is taken: rayon's own
        // short-circuit would return whichever invalid block a thread met first, and the
        // spec (and a GPU decoder) reports the first in storage order.
        .collect::<Vec<Result<_>>>()
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    Ok(CacheInfo { header, bases, blocks, sections })
}

fn check_zero(bytes: &[u8], from: usize) -> Result<()> {
    // The common case, all zero, in one pass that vectorizes; the first nonzero byte only
    // when there is one.
    if bytes.iter().fold(0, |acc, &b| acc | b) == 0 {
        return Ok(());
    }
    match bytes.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(at) => Err(Error::SlotPaddingNotZero { offset: from + at, value: bytes[at] }),
    }
}

/// Encodes a cache into one container (spec §5).
///
/// # Errors
/// The shape's ([`Error::InvalidShape`], [`Error::HeadDimUnsupported`],
/// [`Error::ShapeTooLarge`]), [`Error::SlotCapacityInvalid`],
/// [`Error::BasesShapeMismatch`], [`Error::ZeroCalibrationTokens`],
/// [`Error::UnsupportedVersion`] for a version other than 1 or 2.
pub fn encode_cache(cache: &KvCache, options: &EncodeOptions) -> Result<Vec<u8>> {
    encode_words(&cache.words_in(WordOrder::LayerMajor), cache.shape(), options)
}

/// [`encode_cache`] of a cache given as its layer-major words (layer 0 K `[T, H, D]`,
/// layer 0 V, layer 1 K, ...).
///
/// # Errors
/// Those of [`encode_cache`], and [`Error::WordCountMismatch`].
pub fn encode_words(words: &[u16], shape: KvShape, options: &EncodeOptions) -> Result<Vec<u8>> {
    let block = block_shape_of(shape)?;
    let version = options.write_version()?;
    let capacity = options.slot_capacity.unwrap_or(block.default_capacity());
    check_capacity(block, capacity)?;
    if words.len() != shape.total_values() {
        return Err(Error::WordCountMismatch { got: words.len(), expected: shape.total_values() });
    }
    let (bases, calibration_tokens) = match &options.bases {
        Some(bases) => {
            bases.check_shape(shape)?;
            (bases.clone(), None)
        }
        None => {
            let n = options.calibration_tokens.unwrap_or(DEFAULT_CALIBRATION_TOKENS);
            if n == 0 {
                return Err(Error::ZeroCalibrationTokens);
            }
            let n = n.min(shape.tokens);
            (Bases::calibrate_words(words, shape, n)?, Some(n))
        }
    };
    let blocks = block_count(shape).ok_or_else(|| too_large(shape))?;
    // The largest container (every block raw) must fit, and the raw count its u32.
    sections(shape, block, capacity, blocks).ok_or_else(|| too_large(shape))?;
    if u32::try_from(blocks).is_err() {
        return Err(too_large(shape));
    }
    let per_head = shape.tokens / BLOCK_TOKENS;
    let hd = shape.values_per_token();
    let tensor_len = shape.values_per_tensor();
    let orders = KvKind::BOTH.map(|kind| FragmentOrder::new(kind, block));
    let coords = |i: usize| {
        let head = (i / per_head.max(1)) % shape.kv_heads;
        let tensor = i / (per_head.max(1) * shape.kv_heads);
        (tensor, head, i % per_head.max(1))
    };
    let gather = |tensor: usize, head: usize, page: usize, out: &mut [u16]| {
        let t = &words[tensor * tensor_len..(tensor + 1) * tensor_len];
        for (token, row) in out.chunks_exact_mut(block.head_dim).enumerate() {
            let at = (BLOCK_TOKENS * page + token) * hd + head * block.head_dim;
            row.copy_from_slice(&t[at..at + block.head_dim]);
        }
    };
    // Slots first: each block coded into its slot, or marked raw.
    let mut slots = vec![0u8; blocks * capacity];
    let statuses: Vec<u8> = slots
        .par_chunks_exact_mut(capacity)
        .enumerate()
        .map_init(
            || vec![0u16; block.values()],
            |scratch, (i, slot)| {
                let (tensor, head, page) = coords(i);
                gather(tensor, head, page, scratch);
                let layer_bases = bases.of(tensor / 2, KvKind::BOTH[tensor % 2], head);
                let (len, _) = block::measure(scratch, layer_bases, block);
                if len > capacity {
                    return STATUS_RAW;
                }
                block::encode_into(scratch, layer_bases, block, &orders[tensor % 2], slot);
                STATUS_CODED
            },
        )
        .collect();
    let raw: Vec<usize> = (0..blocks).filter(|&i| statuses[i] == STATUS_RAW).collect();
    let mut header = CacheHeader {
        version,
        shape,
        slot_capacity: capacity,
        calibration_tokens,
        raw_blocks: raw.len(),
        checksum: None,
    };
    let sec = header.sections();
    let mut out = vec![0u8; sec.end];
    out[sec.bases..sec.bases + bases.as_bytes().len()].copy_from_slice(bases.as_bytes());
    out[sec.statuses..sec.statuses + blocks].copy_from_slice(&statuses);
    out[sec.slots..sec.overflow].copy_from_slice(&slots);
    drop(slots);
    let mut scratch = vec![0u16; block.values()];
    for (k, &i) in raw.iter().enumerate() {
        let (tensor, head, page) = coords(i);
        gather(tensor, head, page, &mut scratch);
        let at = sec.overflow + k * block.raw_len();
        for (dst, w) in out[at..at + block.raw_len()].chunks_exact_mut(2).zip(&scratch) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
    }
    let tail_tokens = shape.tokens % BLOCK_TOKENS;
    let mut at = sec.tails;
    for tensor in words.chunks_exact(tensor_len) {
        for w in &tensor[per_head * BLOCK_TOKENS * hd..] {
            out[at..at + 2].copy_from_slice(&w.to_le_bytes());
            at += 2;
        }
    }
    debug_assert_eq!(at, sec.end, "{tail_tokens} tail tokens");
    // The header last: version 2's checksum covers every byte after it (spec §5.1).
    header.checksum = options.checksum.then(|| match version {
        VERSION_1 => adler32_words(words),
        _ => adler32_bytes(&out[HEADER_LEN..]),
    });
    out[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    Ok(out)
}

/// Decodes a container into a new cache.
///
/// # Errors
/// Those of [`decode_cache_into`].
pub fn decode_cache(bytes: &[u8]) -> Result<KvCache> {
    // The whole container is checked before the output is allocated: its length bounds
    // the values it can hold, so a hostile header cannot ask for a huge buffer.
    let info = cache_info(bytes)?;
    let shape = info.header.shape;
    let mut words = vec![0u16; shape.total_values()];
    decode_checked_into(bytes, &info, &mut words)?;
    Ok(KvCache::from_words(shape, WordOrder::LayerMajor, words).expect("a checked shape"))
}

/// Decodes a container into `out`, layer-major (layer 0 K `[T, H, D]`, layer 0 V, ...),
/// which holds at least `2 L T H D` words; returns the cache's header. Every block is
/// checked before a word is written; words past the cache's are left as they were.
///
/// # Errors
/// Those of [`cache_info`], [`Error::OutputTooSmall`], and [`Error::ChecksumMismatch`]
/// (version 2: nothing written; version 1: the values written).
pub fn decode_cache_into(bytes: &[u8], out: &mut [u16]) -> Result<CacheHeader> {
    let info = cache_info(bytes)?;
    decode_checked_into(bytes, &info, out)?;
    Ok(info.header)
}

/// Decodes a container that [`cache_info`] accepted (as `info`) into `out`.
fn decode_checked_into(bytes: &[u8], info: &CacheInfo, out: &mut [u16]) -> Result<()> {
    let header = info.header;
    let s = header.shape;
    let n = s.total_values();
    if out.len() < n {
        return Err(Error::OutputTooSmall { needed: n, got: out.len() });
    }
    let out = &mut out[..n];
    // Version 2's checksum covers the bytes, so it is checked before a value is written.
    if header.version != VERSION_1
        && let Some(stored) = header.checksum
    {
        let computed = adler32_bytes(&bytes[HEADER_LEN..]);
        if computed != stored {
            return Err(Error::ChecksumMismatch { stored, computed });
        }
    }
    let block = header.block_shape();
    let sec = info.sections;
    let capacity = header.slot_capacity;
    let per_head = header.blocks_per_head();
    let hd = s.values_per_token();
    let d = s.head_dim;
    // Where each raw block sits in the overflow section.
    let mut raw_index = vec![0usize; info.blocks.len()];
    let mut k = 0;
    for (i, b) in info.blocks.iter().enumerate() {
        if b.is_none() {
            raw_index[i] = k;
            k += 1;
        }
    }
    let orders = KvKind::BOTH.map(|kind| FragmentOrder::new(kind, block));
    // The decoding tables of every (layer, kind, head), made once.
    let tables: Vec<HeadTables> = (0..2 * s.layers * s.kv_heads)
        .map(|th| {
            let (tensor, head) = (th / s.kv_heads, th % s.kv_heads);
            let bases = info.bases.of(tensor / 2, KvKind::BOTH[tensor % 2], head);
            orders[tensor % 2].head_tables(bases)
        })
        .collect();
    out.par_chunks_exact_mut(s.values_per_tensor()).enumerate().for_each(|(tensor, words)| {
        let (pages, tail) = words.split_at_mut(per_head * BLOCK_TOKENS * hd);
        pages.par_chunks_exact_mut(BLOCK_TOKENS * hd).enumerate().for_each(|(page, rows)| {
            for head in 0..s.kv_heads {
                let i = (tensor * s.kv_heads + head) * per_head + page;
                // The head's block goes straight into the page's rows: token `t`'s D
                // channels at `t H D + head D`.
                let out = &mut rows[head * d..];
                match info.blocks[i] {
                    Some(_) => {
                        let slot = &bytes[sec.slots + i * capacity..sec.slots + (i + 1) * capacity];
                        let bases = info.bases.of(tensor / 2, KvKind::BOTH[tensor % 2], head);
                        let tables = &tables[tensor * s.kv_heads + head];
                        block::decode_checked(slot, bases, tables, block, &orders[tensor % 2], out, hd);
                    }
                    None => {
                        let at = sec.overflow + raw_index[i] * block.raw_len();
                        let raw = bytes[at..at + block.raw_len()].chunks_exact(2 * d);
                        for (row, src) in out.chunks_mut(hd).zip(raw) {
                            for (w, b) in row.iter_mut().zip(src.chunks_exact(2)) {
                                *w = u16::from_le_bytes([b[0], b[1]]);
                            }
                        }
                    }
                }
            }
        });
        let tail_bytes = 2 * tail.len();
        let at = sec.tails + tensor * tail_bytes;
        for (w, b) in tail.iter_mut().zip(bytes[at..at + tail_bytes].chunks_exact(2)) {
            *w = u16::from_le_bytes([b[0], b[1]]);
        }
    });
    if header.version == VERSION_1
        && let Some(stored) = header.checksum
    {
        let computed = adler32_words(out);
        if computed != stored {
            return Err(Error::ChecksumMismatch { stored, computed });
        }
    }
    Ok(())
}
