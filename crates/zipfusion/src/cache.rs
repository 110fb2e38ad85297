//! A whole KV cache as one container (spec §7): a 48-byte header, then layer by layer the
//! layer's compressed pages (`floor(T / 16)` of them) and its BF16 tail (the unfilled last
//! page's `T mod 16` tokens, which stay BF16 so tokens can append to them).
//!
//! Pages have no index: each one's metadata says where it ends (spec §5), so a decoder
//! walks them, validating every page's metadata before it writes a value, then decodes
//! them in parallel. A serving engine's pool keeps its own page table instead.

use std::fmt;

use bf16_field::header::{check_header_crc, header_prefix, le_u32, read_shape};
use bf16_field::integrity::{adler32_words, header_crc32c};
use bf16_field::{KvCache, KvKind, KvShape, PARALLEL_CHUNK_VALUES, PARALLEL_MIN_VALUES, WordOrder};
use rayon::prelude::*;

use crate::format::{
    FLAG_CHECKSUM, HEADER_LEN, KNOWN_FLAGS, MAGIC, PAGE_TOKENS, PageShape, VERSION, Variant, header,
};
use crate::page::{BlockCounts, PageInfo, decode_blocks, encode_page, page_info};
use crate::{Error, Result};

/// Encoder options of a whole cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EncodeOptions {
    /// Which blocks the cache may hold (spec §2.2); base by default.
    pub variant: Variant,
    /// Store the Adler-32 of the cache's values in the header (spec §7.3), which every
    /// decoder then verifies; off by default.
    pub checksum: bool,
}

/// A container's header (spec §7.1), parsed and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheHeader {
    /// The cache's variant.
    pub variant: Variant,
    /// L, H, D and T.
    pub shape: KvShape,
    /// The Adler-32 of the cache's values (flag bit 0), if stored.
    pub checksum: Option<u32>,
}

/// Checks a cache shape against the format (spec §7.1): no zero dimension, D a multiple
/// of 32, every page within its `u32` offsets, L, H and D within their `u32` fields, and
/// the largest container within `usize`. Returns its page shape.
pub(crate) fn page_shape_of(shape: KvShape) -> Result<PageShape> {
    let [layers, kv_heads, head_dim, tokens] = shape.dims();
    if [layers, kv_heads, head_dim, tokens].contains(&0) {
        return Err(Error::InvalidShape { layers, kv_heads, head_dim, tokens });
    }
    let too_large = Error::ShapeTooLarge { layers, kv_heads, head_dim, tokens };
    let page = PageShape { kv_heads, head_dim };
    match page.validate() {
        Ok(()) => {}
        Err(Error::ShapeTooLarge { .. }) => return Err(too_large),
        Err(e) => return Err(e),
    }
    let fits_u32 = [layers, kv_heads, head_dim].iter().all(|&d| u32::try_from(d).is_ok());
    if !fits_u32 || shape.validate().is_err() || max_len(shape, page).is_none() {
        return Err(too_large);
    }
    Ok(page)
}

/// Bytes of one layer's BF16 tail: K and V, `T mod 16` tokens each (for a shape whose
/// values' bytes fit `usize`, [`KvShape::validate`]).
fn tail_len(shape: KvShape) -> usize {
    2 * 2 * (shape.tokens % PAGE_TOKENS) * shape.kv_heads * shape.head_dim
}

/// `48 + L (floor(T / 16) page + tail)` bytes with pages of `page_len` bytes, if it fits.
fn container_len(shape: KvShape, page_len: usize) -> Option<usize> {
    (shape.tokens / PAGE_TOKENS)
        .checked_mul(page_len)?
        .checked_add(tail_len(shape))?
        .checked_mul(shape.layers)?
        .checked_add(HEADER_LEN)
}

/// The largest container of a shape: every block raw.
fn max_len(shape: KvShape, page: PageShape) -> Option<usize> {
    container_len(shape, page.max_page_len())
}

/// The largest container of a cache of `shape`, every block raw: a buffer this long holds
/// any cache of this shape (spec §7.2).
///
/// # Errors
/// [`Error::InvalidShape`], [`Error::HeadDimUnsupported`], [`Error::ShapeTooLarge`].
pub fn max_encoded_len(shape: KvShape) -> Result<usize> {
    let page = page_shape_of(shape)?;
    max_len(shape, page).ok_or(Error::ShapeTooLarge {
        layers: shape.layers,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        tokens: shape.tokens,
    })
}

impl CacheHeader {
    /// Parses and checks the first 48 bytes of a container (spec §7.4, rows 1-10): a
    /// receiver can learn the shape and variant from the header alone.
    ///
    /// # Errors
    /// In order: [`Error::Truncated`], [`Error::BadMagic`], [`Error::UnsupportedVersion`],
    /// [`Error::UnknownVariant`], [`Error::UnknownFlags`], [`Error::ReservedNotZero`],
    /// [`Error::HeaderChecksumMismatch`], then the shape's error ([`Error::InvalidShape`],
    /// [`Error::HeadDimUnsupported`], [`Error::ShapeTooLarge`]).
    pub fn parse(bytes: &[u8]) -> Result<CacheHeader> {
        let h = header_prefix::<HEADER_LEN>(bytes, MAGIC, header::VERSION, VERSION)?;
        let variant = Variant::from_byte(h[header::VARIANT])
            .ok_or(Error::UnknownVariant { variant: h[header::VARIANT] })?;
        let flags = h[header::FLAGS];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(Error::UnknownFlags { flags });
        }
        let checksummed = flags & FLAG_CHECKSUM != 0;
        // The lowest nonzero reserved byte is reported: bytes 20..24, then the checksum
        // field 32..36 when no flag claims it, then 40..48.
        let reserved = |at: usize| {
            (header::RESERVED0..header::RESERVED0 + 4).contains(&at)
                || (!checksummed && (header::CHECKSUM..header::CHECKSUM + 4).contains(&at))
                || (header::RESERVED1..HEADER_LEN).contains(&at)
        };
        if let Some(offset) = (0..HEADER_LEN).find(|&at| reserved(at) && h[at] != 0) {
            return Err(Error::ReservedNotZero { offset, value: h[offset] });
        }
        check_header_crc(h, header::HEADER_CRC)?;
        let shape = read_shape(h, header::SHAPE);
        page_shape_of(shape)?;
        let checksum = checksummed.then(|| le_u32(h, header::CHECKSUM));
        Ok(CacheHeader { variant, shape, checksum })
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
            page_shape_of(shape)?;
        }
        let header = CacheHeader::parse(bytes)?;
        if let Some(expected) = expected
            && expected != header.shape
        {
            return Err(Error::CacheShapeMismatch { expected: expected.dims(), found: header.shape.dims() });
        }
        Ok(header)
    }

    /// The 48 header bytes, the CRC-32C included.
    ///
    /// # Panics
    /// If the shape's L, H or D exceed `u32` (a header [`CacheHeader::parse`] accepted, or
    /// one of a shape the encoder accepted, never does).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        let s = self.shape;
        let u32_of = |d: usize| u32::try_from(d).expect("a dimension within the format's u32 fields");
        h[header::MAGIC..header::MAGIC + 4].copy_from_slice(&MAGIC);
        h[header::VERSION..header::VERSION + 2].copy_from_slice(&VERSION.to_le_bytes());
        h[header::VARIANT] = self.variant.byte();
        h[header::FLAGS] = if self.checksum.is_some() { FLAG_CHECKSUM } else { 0 };
        h[header::LAYERS..header::LAYERS + 4].copy_from_slice(&u32_of(s.layers).to_le_bytes());
        h[header::KV_HEADS..header::KV_HEADS + 4].copy_from_slice(&u32_of(s.kv_heads).to_le_bytes());
        h[header::HEAD_DIM..header::HEAD_DIM + 4].copy_from_slice(&u32_of(s.head_dim).to_le_bytes());
        h[header::TOKENS..header::TOKENS + 8].copy_from_slice(&(s.tokens as u64).to_le_bytes());
        h[header::CHECKSUM..header::CHECKSUM + 4].copy_from_slice(&self.checksum.unwrap_or(0).to_le_bytes());
        let crc = header_crc32c(&h, header::HEADER_CRC);
        h[header::HEADER_CRC..header::HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// The shape of the cache's pages.
    pub fn page_shape(&self) -> PageShape {
        PageShape { kv_heads: self.shape.kv_heads, head_dim: self.shape.head_dim }
    }

    /// Compressed pages per layer: `floor(T / 16)`.
    pub fn pages_per_layer(&self) -> usize {
        self.shape.tokens / PAGE_TOKENS
    }

    /// Tokens of each layer's BF16 tail: `T mod 16`.
    pub fn tail_tokens(&self) -> usize {
        self.shape.tokens % PAGE_TOKENS
    }
}

/// A container's validated layout (spec §7.2): its header, and every page's offset and
/// metadata, layer-major. [`cache_info`] makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheInfo {
    /// The header.
    pub header: CacheHeader,
    /// `(offset from the container start, metadata)` of page `p` of layer `l` at index
    /// `l * floor(T / 16) + p`.
    pub pages: Vec<(usize, PageInfo)>,
    /// Where each layer's BF16 tail starts, by layer.
    pub tails: Vec<usize>,
    /// The container's length in bytes.
    pub len: usize,
}

impl CacheInfo {
    /// The cache's blocks counted by storage, `[K, V]`.
    pub fn block_counts(&self) -> [BlockCounts; 2] {
        let mut counts = [BlockCounts::default(); 2];
        for (_, page) in &self.pages {
            for (total, page) in counts.iter_mut().zip(page.block_counts()) {
                total.merge(&page);
            }
        }
        counts
    }
}

impl fmt::Display for CacheInfo {
    /// A readable summary: the shape, size and ratio, and the blocks of each kind.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.header;
        let s = h.shape;
        let bf16 = 2 * s.total_values();
        writeln!(
            f,
            "zipfusion cache, {} variant: L={} H={} D={} T={}; per layer: pages {}, BF16 tail tokens {}",
            h.variant.name(),
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            h.pages_per_layer(),
            h.tail_tokens()
        )?;
        let checksum = h.checksum.map_or("none".to_string(), |c| format!("adler32 {c:08x}"));
        writeln!(
            f,
            "bytes: {} for {bf16} of BF16, ratio {:.4}; checksum {checksum}",
            self.len,
            bf16 as f64 / self.len as f64
        )?;
        for (kind, c) in KvKind::BOTH.iter().zip(self.block_counts()) {
            let share = 100.0 * c.eligible() as f64 / c.total().max(1) as f64;
            writeln!(
                f,
                "{} blocks: {} ({} coded, {} zero-aware, {} raw), {share:.2}% eligible",
                if *kind == KvKind::K { "K" } else { "V" },
                c.total(),
                c.coded,
                c.zero_aware,
                c.raw
            )?;
        }
        Ok(())
    }
}

/// Validates a whole container without decoding a value (spec §7.4, rows 1-10 and 13-15):
/// the header, then every page's metadata in order, the tails and the length.
///
/// # Errors
/// As [`CacheHeader::parse`]; then [`Error::Truncated`] (shorter than the smallest
/// container of its shape, or than its pages and tails), [`Error::InPage`] for the first
/// invalid page, [`Error::TrailingBytes`].
pub fn cache_info(bytes: &[u8]) -> Result<CacheInfo> {
    let header = CacheHeader::parse(bytes)?;
    let (shape, page_shape) = (header.shape, header.page_shape());
    // Bounds the walk and any output buffer by the input: every page takes at least its
    // all-coded length.
    let smallest = container_len(shape, page_shape.min_page_len()).unwrap_or(usize::MAX);
    if bytes.len() < smallest {
        return Err(Error::Truncated { needed: smallest, got: bytes.len() });
    }
    let per_layer = header.pages_per_layer();
    let mut pages = Vec::with_capacity(shape.layers * per_layer);
    let mut tails = Vec::with_capacity(shape.layers);
    let mut at = HEADER_LEN;
    for layer in 0..shape.layers {
        for page in 0..per_layer {
            let info = page_info(&bytes[at..], page_shape, header.variant)
                .map_err(|source| Error::InPage { layer, page, source: Box::new(source) })?;
            let len = info.len;
            pages.push((at, info));
            at += len;
        }
        tails.push(at);
        at += tail_len(shape);
        if at > bytes.len() {
            return Err(Error::Truncated { needed: at, got: bytes.len() });
        }
    }
    if bytes.len() > at {
        return Err(Error::TrailingBytes { extra: bytes.len() - at });
    }
    Ok(CacheInfo { header, pages, tails, len: at })
}

/// Encodes a cache given as its `2 L T H D` words in layer-major order (layer 0 K, layer 0
/// V, layer 1 K, ..., each `[T, H, D]`; [`WordOrder::LayerMajor`]) into one container.
/// Pages are encoded in parallel.
///
/// # Errors
/// The shape's error ([`Error::InvalidShape`], [`Error::HeadDimUnsupported`],
/// [`Error::ShapeTooLarge`]), [`Error::WordCountMismatch`].
pub fn encode_words(words: &[u16], shape: KvShape, options: &EncodeOptions) -> Result<Vec<u8>> {
    let page_shape = page_shape_of(shape)?;
    if words.len() != shape.total_values() {
        return Err(Error::WordCountMismatch { got: words.len(), expected: shape.total_values() });
    }
    let header = CacheHeader {
        variant: options.variant,
        shape,
        checksum: options.checksum.then(|| adler32_words(words)),
    };
    let (per_tensor, per_page) = (shape.values_per_tensor(), page_shape.values_per_kind());
    let per_layer = header.pages_per_layer();
    let encode = |i: usize| {
        let (layer, page) = (i / per_layer, i % per_layer);
        let k = &words[2 * layer * per_tensor + page * per_page..][..per_page];
        let v = &words[(2 * layer + 1) * per_tensor + page * per_page..][..per_page];
        encode_page(k, v, page_shape, options.variant)
    };
    let count = shape.layers * per_layer;
    let pages: Vec<Vec<u8>> = if count * 2 * per_page < PARALLEL_MIN_VALUES {
        (0..count).map(encode).collect::<Result<_>>()?
    } else {
        let min_len = (PARALLEL_CHUNK_VALUES / (2 * per_page)).max(1);
        (0..count).into_par_iter().with_min_len(min_len).map(encode).collect::<Result<_>>()?
    };
    let len = HEADER_LEN + pages.iter().map(Vec::len).sum::<usize>() + shape.layers * tail_len(shape);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&header.to_bytes());
    let tail_values = header.tail_tokens() * shape.values_per_token();
    for layer in 0..shape.layers {
        pages[layer * per_layer..(layer + 1) * per_layer].iter().for_each(|p| out.extend_from_slice(p));
        for kind in 0..2 {
            let tensor = &words[(2 * layer + kind) * per_tensor..][..per_tensor];
            out.extend(tensor[per_tensor - tail_values..].iter().flat_map(|w| w.to_le_bytes()));
        }
    }
    debug_assert_eq!(out.len(), len);
    Ok(out)
}

/// [`encode_words`] of a [`KvCache`].
///
/// # Errors
/// As [`encode_words`].
pub fn encode_cache(cache: &KvCache, options: &EncodeOptions) -> Result<Vec<u8>> {
    encode_words(&cache.words_in(WordOrder::LayerMajor), cache.shape(), options)
}

/// Decodes a container into `out`, which holds at least the cache's `2 L T H D` words, in
/// layer-major order (words past them are left as they were), and returns the cache's
/// shape. Every page's metadata is checked before a word is written; pages are decoded in
/// parallel.
///
/// # Errors
/// As [`cache_info`], with [`Error::OutputTooSmall`] (in words) after the header checks;
/// [`Error::ChecksumMismatch`] last, with the values written.
pub fn decode_cache_into(bytes: &[u8], out: &mut [u16]) -> Result<KvShape> {
    let shape = CacheHeader::parse(bytes)?.shape;
    if out.len() < shape.total_values() {
        return Err(Error::OutputTooSmall { needed: shape.total_values(), got: out.len() });
    }
    decode_checked(bytes, &cache_info(bytes)?, &mut out[..shape.total_values()])?;
    Ok(shape)
}

/// Decodes a container into a new [`KvCache`].
///
/// # Errors
/// As [`decode_cache_into`].
pub fn decode_cache(bytes: &[u8]) -> Result<KvCache> {
    // The whole layout first, so the allocation is bounded by the input's length.
    let info = cache_info(bytes)?;
    let shape = info.header.shape;
    let mut words = vec![0u16; shape.total_values()];
    decode_checked(bytes, &info, &mut words)?;
    Ok(KvCache::from_words(shape, WordOrder::LayerMajor, words).expect("a parsed shape is valid"))
}

/// Decodes the container `bytes`, which `info` describes, into `out` (exactly `2 L T H D`
/// words), then verifies the checksum.
fn decode_checked(bytes: &[u8], info: &CacheInfo, out: &mut [u16]) -> Result<()> {
    let header = &info.header;
    let shape = header.shape;
    let (per_tensor, per_page) = (shape.values_per_tensor(), header.page_shape().values_per_kind());
    let per_layer = header.pages_per_layer();
    let tail_values = header.tail_tokens() * shape.values_per_token();
    let parallel = out.len() >= PARALLEL_MIN_VALUES;
    let mut jobs = Vec::with_capacity(info.pages.len());
    for (layer, (tensors, &tail)) in out.chunks_exact_mut(2 * per_tensor).zip(&info.tails).enumerate() {
        let (k, v) = tensors.split_at_mut(per_tensor);
        let (k_pages, k_tail) = k.split_at_mut(per_tensor - tail_values);
        let (v_pages, v_tail) = v.split_at_mut(per_tensor - tail_values);
        let tail_bytes = &bytes[tail..tail + 4 * tail_values];
        for (word, src) in k_tail.iter_mut().chain(v_tail).zip(tail_bytes.chunks_exact(2)) {
            *word = u16::from_le_bytes([src[0], src[1]]);
        }
        let slots = k_pages.chunks_exact_mut(per_page).zip(v_pages.chunks_exact_mut(per_page));
        for ((k, v), (offset, page)) in slots.zip(&info.pages[layer * per_layer..(layer + 1) * per_layer]) {
            jobs.push((&bytes[*offset..*offset + page.len], page, k, v));
        }
    }
    let decode =
        |(bytes, page, k, v): (&[u8], &PageInfo, &mut [u16], &mut [u16])| decode_blocks(bytes, page, k, v);
    if parallel {
        let min_len = (PARALLEL_CHUNK_VALUES / (2 * per_page)).max(1);
        jobs.into_par_iter().with_min_len(min_len).for_each(decode);
    } else {
        jobs.into_iter().for_each(decode);
    }
    if let Some(stored) = header.checksum {
        let computed = adler32_words(out);
        if computed != stored {
            return Err(Error::ChecksumMismatch { stored, computed });
        }
    }
    Ok(())
}
