//! A whole KV cache as a sequence of block records with an offset index (spec §8).

use bf16_field::{KvCache, KvShape, WordOrder};
use rayon::prelude::*;

use crate::format::{
    CONTAINER_HEADER_LEN, CONTAINER_MAGIC, HEADER_LEN, VERSION, VERSION_2, VERSION_3, align_up,
    container_header as ch, header,
};
use crate::record::{BlockShape, EncodeOptions, decode_block_into, encode_block_with, record_shape};
use crate::{Error, Result};

/// A validated container header and index: where each block's record lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The cache's shape (L, H, D, T).
    pub shape: KvShape,
    /// B, tokens per block; the last block holds `T - (blocks - 1) B` tokens.
    pub block_tokens: usize,
    /// `blocks + 1` byte offsets from the container start: record `i` starts at
    /// `offsets[i]`; `offsets[blocks]` is the container length.
    pub offsets: Vec<usize>,
    /// Each record's exact length (its header's `record_len`); the slot
    /// `offsets[i + 1] - offsets[i]` is this rounded up to 16.
    pub record_lens: Vec<usize>,
}

impl ContainerInfo {
    /// Blocks in the container, `ceil(T / B)`.
    pub fn blocks(&self) -> usize {
        self.record_lens.len()
    }

    /// The shape block `index` must have (B' = B, or the remainder for the last).
    pub fn block_shape(&self, index: usize) -> BlockShape {
        let s = &self.shape;
        let tokens = self.block_tokens.min(s.tokens - index * self.block_tokens);
        BlockShape { layers: s.layers, kv_heads: s.kv_heads, head_dim: s.head_dim, tokens }
    }

    /// Record `index`'s bytes within the container `bytes` this info was read from.
    ///
    /// # Panics
    /// If `index >= blocks()` or `bytes` is not the container this info came from.
    pub fn record<'a>(&self, bytes: &'a [u8], index: usize) -> &'a [u8] {
        &bytes[self.offsets[index]..self.offsets[index] + self.record_lens[index]]
    }

    /// Record `index`, once its header's shape matches the one the container implies
    /// for that block (spec §8).
    ///
    /// # Errors
    /// [`Error::InBlock`] around the record header's error or
    /// [`Error::RecordShapeMismatch`].
    pub(crate) fn shaped_record<'a>(&self, bytes: &'a [u8], index: usize) -> Result<&'a [u8]> {
        let in_block = |e: Error| Error::InBlock { block: index, source: Box::new(e) };
        let record = self.record(bytes, index);
        let got = record_shape(record).map_err(in_block)?;
        let expected = self.block_shape(index);
        if got != expected {
            let dims = |b: BlockShape| [b.layers, b.kv_heads, b.head_dim, b.tokens];
            return Err(in_block(Error::RecordShapeMismatch {
                block: index,
                got: dims(got),
                expected: dims(expected),
            }));
        }
        Ok(record)
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn check_zero(bytes: &[u8], from: usize, to: usize) -> Result<()> {
    for (i, &value) in bytes[from..to].iter().enumerate() {
        if value != 0 {
            return Err(Error::NonZeroPadding { offset: from + i, value });
        }
    }
    Ok(())
}

/// Parses and validates a container's header and record index, reading each record's
/// length field but decoding nothing (spec §8).
///
/// # Errors
/// [`Error::Truncated`], [`Error::BadMagic`], [`Error::UnsupportedVersion`],
/// [`Error::UnsupportedFlags`], [`Error::ReservedNonZero`], [`Error::InvalidShape`],
/// [`Error::ShapeOverflow`], [`Error::BlockCountMismatch`], [`Error::IndexMismatch`],
/// [`Error::NonZeroPadding`], [`Error::TrailingBytes`].
pub fn container_info(bytes: &[u8]) -> Result<ContainerInfo> {
    if bytes.len() < CONTAINER_HEADER_LEN {
        return Err(Error::Truncated { needed: CONTAINER_HEADER_LEN, got: bytes.len() });
    }
    let magic: [u8; 4] = bytes[..4].try_into().expect("4 bytes");
    if magic != CONTAINER_MAGIC {
        return Err(Error::BadMagic { found: magic, expected: "KVXC" });
    }
    // Versions 2, 3 and 4 share the container layout; each record carries its own
    // version (spec §8).
    let version = u16_at(bytes, ch::VERSION);
    if ![VERSION, VERSION_3, VERSION_2].contains(&version) {
        return Err(Error::UnsupportedVersion { version });
    }
    let flags = u16_at(bytes, ch::FLAGS);
    if flags != 0 {
        return Err(Error::UnsupportedFlags { flags });
    }
    let reserved = u32_at(bytes, ch::RESERVED);
    if reserved != 0 {
        return Err(Error::ReservedNonZero { offset: ch::RESERVED, value: reserved });
    }
    let layers = u16_at(bytes, ch::LAYERS) as usize;
    let kv_heads = u16_at(bytes, ch::KV_HEADS) as usize;
    let head_dim = u16_at(bytes, ch::HEAD_DIM) as usize;
    let block_tokens = u16_at(bytes, ch::BLOCK_TOKENS) as usize;
    let tokens_u64 = u64_at(bytes, ch::TOKENS);
    let tokens = usize::try_from(tokens_u64).unwrap_or(usize::MAX);
    if layers == 0 || kv_heads == 0 || head_dim == 0 || tokens == 0 || block_tokens == 0 {
        // A zero B is reported as zero tokens.
        let tokens = if block_tokens == 0 { 0 } else { tokens };
        return Err(Error::InvalidShape { layers, kv_heads, head_dim, tokens });
    }
    let shape = KvShape::new(layers, kv_heads, head_dim, tokens).map_err(|_| Error::ShapeOverflow {
        layers,
        kv_heads,
        head_dim,
        tokens,
    })?;
    let stored_blocks = u32_at(bytes, ch::BLOCKS) as u64;
    let expected_blocks = tokens_u64.div_ceil(block_tokens as u64);
    if stored_blocks != expected_blocks {
        return Err(Error::BlockCountMismatch { stored: stored_blocks, expected: expected_blocks });
    }
    let blocks = stored_blocks as usize;
    let index_end = CONTAINER_HEADER_LEN + 8 * (blocks + 1);
    if bytes.len() < index_end {
        return Err(Error::Truncated { needed: index_end, got: bytes.len() });
    }
    let stored = |i: usize| u64_at(bytes, CONTAINER_HEADER_LEN + 8 * i);
    let first = align_up(index_end).expect("index_end <= bytes.len()");
    if stored(0) != first as u64 {
        return Err(Error::IndexMismatch { entry: 0, stored: stored(0), expected: first as u64 });
    }
    if bytes.len() < first {
        return Err(Error::Truncated { needed: first, got: bytes.len() });
    }
    check_zero(bytes, index_end, first)?;
    let mut offsets = Vec::with_capacity(blocks + 1);
    let mut record_lens = Vec::with_capacity(blocks);
    let mut at = first;
    offsets.push(at);
    for i in 0..blocks {
        // The record's own header checks first: its length field means nothing in a
        // damaged header (a zeroed one would read as an index error).
        if let Some(record_header) = bytes.get(at..at + HEADER_LEN) {
            crate::record::check_header_fields(record_header)
                .map_err(|e| Error::InBlock { block: i, source: Box::new(e) })?;
        }
        let len_field = at + header::RECORD_LEN;
        if bytes.len() < len_field + 4 {
            return Err(Error::Truncated { needed: len_field + 4, got: bytes.len() });
        }
        let record_len = u32_at(bytes, len_field) as usize;
        let end = at + record_len;
        if bytes.len() < end {
            return Err(Error::Truncated { needed: end, got: bytes.len() });
        }
        let next = align_up(end).expect("end <= bytes.len()");
        if stored(i + 1) != next as u64 {
            return Err(Error::IndexMismatch { entry: i + 1, stored: stored(i + 1), expected: next as u64 });
        }
        if bytes.len() < next {
            return Err(Error::Truncated { needed: next, got: bytes.len() });
        }
        check_zero(bytes, end, next)?;
        record_lens.push(record_len);
        offsets.push(next);
        at = next;
    }
    if bytes.len() > at {
        return Err(Error::TrailingBytes { extra: bytes.len() - at });
    }
    Ok(ContainerInfo { shape, block_tokens, offsets, record_lens })
}

/// Encodes a whole cache in blocks of `block_tokens` tokens with the default options.
/// See [`encode_cache_with`].
///
/// # Errors
/// As [`encode_cache_with`].
pub fn encode_cache(cache: &KvCache, block_tokens: usize) -> Result<Vec<u8>> {
    encode_cache_with(cache, block_tokens, &EncodeOptions::default())
}

/// The limits the format puts on a cache and block size (spec §3, §8): B >= 1, L, H,
/// D and B fit `u16`, and the block count fits `u32`. Returns the block count.
pub(crate) fn check_encodable(shape: KvShape, block_tokens: usize) -> Result<usize> {
    if block_tokens == 0 {
        return Err(Error::ZeroBlockTokens);
    }
    for (what, value) in [
        ("layers", shape.layers),
        ("kv_heads", shape.kv_heads),
        ("head_dim", shape.head_dim),
        ("block_tokens", block_tokens),
    ] {
        if value > u16::MAX as usize {
            return Err(Error::DimensionTooLarge { what, value, max: u16::MAX as usize });
        }
    }
    let blocks = shape.block_count(block_tokens);
    if blocks > u32::MAX as usize {
        return Err(Error::DimensionTooLarge { what: "blocks", value: blocks, max: u32::MAX as usize });
    }
    Ok(blocks)
}

/// Encodes a whole cache: every physical block of `block_tokens` tokens (B; the last one
/// may be partial) becomes one record, in parallel on rayon's pool, and the records
/// are laid out behind a header and an offset index so they can be decoded in any
/// order (spec §8).
///
/// # Errors
/// [`Error::ZeroBlockTokens`]; [`Error::DimensionTooLarge`] when L, H, D or B exceed
/// 65535 or the block count exceeds `u32`; any [`encode_block_with`] error.
pub fn encode_cache_with(cache: &KvCache, block_tokens: usize, options: &EncodeOptions) -> Result<Vec<u8>> {
    let tensors: Vec<&[u16]> = cache.tensors().map(|(_, _, t)| t).collect();
    encode_tensors(&tensors, cache.shape(), block_tokens, options)
}

/// [`encode_cache_with`] for a cache given as its `2 L T H D` words in block order
/// ([`WordOrder::LayerMajor`]: layer 0 K, layer 0 V, ..., each `[T, H, D]`), as a device
/// cache or [`KvCache::concat_words`] lays them out.
///
/// # Errors
/// [`Error::InvalidShape`] for a zero dimension, [`Error::ShapeOverflow`] when the value
/// count overflows; [`Error::WordCountMismatch`] unless `words` holds
/// `shape.total_values()` words; then as [`encode_cache_with`].
pub fn encode_words_with(
    words: &[u16],
    shape: KvShape,
    block_tokens: usize,
    options: &EncodeOptions,
) -> Result<Vec<u8>> {
    let dims = (shape.layers, shape.kv_heads, shape.head_dim, shape.tokens);
    shape.validate().map_err(|_| match dims {
        (layers, kv_heads, head_dim, tokens) if [layers, kv_heads, head_dim, tokens].contains(&0) => {
            Error::InvalidShape { layers, kv_heads, head_dim, tokens }
        }
        (layers, kv_heads, head_dim, tokens) => Error::ShapeOverflow { layers, kv_heads, head_dim, tokens },
    })?;
    if words.len() != shape.total_values() {
        return Err(Error::WordCountMismatch { got: words.len(), expected: shape.total_values() });
    }
    let tensors: Vec<&[u16]> = words.chunks_exact(shape.values_per_tensor()).collect();
    encode_tensors(&tensors, shape, block_tokens, options)
}

/// The container of the cache of shape `s` whose `2L` tensors, in block order, are
/// `tensors`.
fn encode_tensors(
    tensors: &[&[u16]],
    s: KvShape,
    block_tokens: usize,
    options: &EncodeOptions,
) -> Result<Vec<u8>> {
    let blocks = check_encodable(s, block_tokens)?;
    let per_token = s.values_per_token();
    let records = (0..blocks)
        .into_par_iter()
        .map(|i| {
            let first = i * block_tokens;
            let tokens = block_tokens.min(s.tokens - first);
            let groups: Vec<&[u16]> =
                tensors.iter().map(|t| &t[first * per_token..(first + tokens) * per_token]).collect();
            let shape = BlockShape { layers: s.layers, kv_heads: s.kv_heads, head_dim: s.head_dim, tokens };
            encode_block_with(&groups, shape, options)
        })
        .collect::<Result<Vec<Vec<u8>>>>()?;

    let index_end = CONTAINER_HEADER_LEN + 8 * (blocks + 1);
    let mut offsets = Vec::with_capacity(blocks + 1);
    let mut at = align_up(index_end).expect("small");
    offsets.push(at);
    for r in &records {
        at = align_up(at + r.len()).expect("fits memory");
        offsets.push(at);
    }
    let mut out = Vec::with_capacity(at);
    out.extend_from_slice(&CONTAINER_MAGIC);
    // The records' version (checked by the block encoder): a reader that predates
    // version 4 rejects the container by its header first.
    out.extend_from_slice(&options.version.unwrap_or(VERSION).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for v in [s.layers, s.kv_heads, s.head_dim, block_tokens] {
        out.extend_from_slice(&(v as u16).to_le_bytes());
    }
    out.extend_from_slice(&(s.tokens as u64).to_le_bytes());
    out.extend_from_slice(&(blocks as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for &o in &offsets {
        out.extend_from_slice(&(o as u64).to_le_bytes());
    }
    for (r, &o) in records.iter().zip(&offsets) {
        out.resize(o, 0);
        out.extend_from_slice(r);
    }
    out.resize(at, 0);
    Ok(out)
}

/// Decodes a whole container back into the cache, blocks in parallel on rayon's pool
/// (spec §8). Without the checksum option, damage that leaves every structural and rANS
/// check intact (a flipped sign+mantissa bit, for one) decodes without an error (see the
/// crate docs, "Integrity"); records with a checksum are verified.
///
/// # Errors
/// As [`decode_cache_into`] (never [`Error::OutputTooSmall`]).
pub fn decode_cache(bytes: &[u8]) -> Result<KvCache> {
    let info = checked_info(bytes)?;
    let mut words = vec![0u16; info.shape.total_values()];
    decode_checked(bytes, &info, &mut words)?;
    Ok(KvCache::from_words(info.shape, WordOrder::LayerMajor, words)
        .expect("container_info checked the shape"))
}

/// Decodes a whole container into `out`, the cache's `2 L T H D` words in block order
/// ([`WordOrder::LayerMajor`]: layer 0 K, layer 0 V, ..., each `[T, H, D]`), blocks in
/// parallel on rayon's pool, and returns the cache's shape. Words of `out` past the
/// cache are left as they were. Every block is decoded even when one fails; when the
/// only failures are checksum mismatches ([`Error::ChecksumMismatch`] in
/// [`Error::InBlock`]), every value is written (what the records hold); after any other
/// error `out` is unspecified.
///
/// # Errors
/// The errors of [`container_info`]; [`Error::Truncated`] when the container is smaller
/// than the cache's value count (every value costs at least one byte);
/// [`Error::OutputTooSmall`]; [`Error::InBlock`] wrapping a record's decode error, or
/// holding [`Error::RecordShapeMismatch`] when a record's shape is not the one the
/// container implies.
pub fn decode_cache_into(bytes: &[u8], out: &mut [u16]) -> Result<KvShape> {
    let info = checked_info(bytes)?;
    let needed = info.shape.total_values();
    if out.len() < needed {
        return Err(Error::OutputTooSmall { needed, got: out.len() });
    }
    decode_checked(bytes, &info, &mut out[..needed])?;
    Ok(info.shape)
}

/// [`container_info`], then the allocation bound: every value costs at least a byte.
pub(crate) fn checked_info(bytes: &[u8]) -> Result<ContainerInfo> {
    let info = container_info(bytes)?;
    // KvShape::new checked that the total fits usize; bound the allocation by the input.
    if info.shape.total_values() > bytes.len() {
        return Err(Error::Truncated { needed: info.shape.total_values(), got: bytes.len() });
    }
    Ok(info)
}

/// Decodes every record of a checked container into `out` (exactly `2 L T H D` words).
fn decode_checked(bytes: &[u8], info: &ContainerInfo, out: &mut [u16]) -> Result<()> {
    let s = info.shape;
    let per_block = info.block_tokens * s.values_per_token();
    let mut blocks: Vec<Vec<&mut [u16]>> =
        (0..info.blocks()).map(|_| Vec::with_capacity(2 * s.layers)).collect();
    for tensor in out.chunks_mut(s.values_per_tensor()) {
        for (b, chunk) in tensor.chunks_mut(per_block).enumerate() {
            blocks[b].push(chunk);
        }
    }
    // Every block decodes (in parallel), then the lowest failing block's error is the
    // one reported, so that the error does not depend on thread timing.
    let results: Vec<Result<()>> = blocks
        .into_par_iter()
        .enumerate()
        .map(|(i, mut groups)| {
            let in_block = |e: Error| Error::InBlock { block: i, source: Box::new(e) };
            let record = info.shaped_record(bytes, i)?;
            decode_block_into(record, &mut groups).map_err(in_block)?;
            Ok(())
        })
        .collect();
    results.into_iter().collect()
}
