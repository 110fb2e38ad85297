//! One page: 16 tokens of one layer's K and V, every head, cut into blocks behind a small
//! metadata table (spec §5): the encoder, the metadata parser (the checks of spec §6) and
//! the decoder.

use std::fmt;

use bf16_field::KvKind;

use crate::block::{Tile, classify, read_block, write_block};
use crate::format::{BLOCK_CHANNELS, BLOCK_VALUES, BlockMeta, MetaByteFault, OFFSET_LEN, PageShape, Variant};
use crate::{Error, Result};

/// Blocks of each kind by how they are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCounts {
    /// Coded blocks of the base window, `[b, b + 15]`.
    pub coded: usize,
    /// Zero-aware coded blocks, `[b, b + 13]` and exponent 0 (zero-aware caches only).
    pub zero_aware: usize,
    /// Raw blocks.
    pub raw: usize,
}

impl BlockCounts {
    /// Counts one block.
    pub fn add(&mut self, meta: BlockMeta) {
        match meta {
            BlockMeta::Coded { .. } => self.coded += 1,
            BlockMeta::ZeroAware { .. } => self.zero_aware += 1,
            BlockMeta::Raw => self.raw += 1,
        }
    }

    /// Adds another count.
    pub fn merge(&mut self, other: &BlockCounts) {
        self.coded += other.coded;
        self.zero_aware += other.zero_aware;
        self.raw += other.raw;
    }

    /// Every block counted.
    pub fn total(&self) -> usize {
        self.coded + self.zero_aware + self.raw
    }

    /// Blocks stored in 12 bits per value: coded and zero-aware.
    pub fn eligible(&self) -> usize {
        self.coded + self.zero_aware
    }
}

/// A page's validated metadata (spec §5.1): where each (head, kind) entry's blocks start
/// and how each block is stored. [`page_info`] makes it; the decoder reads blocks by it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageInfo {
    /// The page's shape (given by the caller: pages do not record it).
    pub shape: PageShape,
    /// The cache's variant (given by the caller: the cache header records it).
    pub variant: Variant,
    /// The page's length in bytes: where the last entry's blocks end.
    pub len: usize,
    /// Entry `2 head + kind`'s first-block offset from the page start.
    offsets: Vec<usize>,
    /// Entry `e`'s blocks at `e * D / 32..`, in channel order.
    blocks: Vec<BlockMeta>,
}

impl PageInfo {
    /// The offset of `(head, kind)`'s first block from the page start.
    ///
    /// # Panics
    /// If `head >= H`.
    pub fn offset(&self, head: usize, kind: KvKind) -> usize {
        self.offsets[self.shape.entry(head, kind)]
    }

    /// How `(head, kind)`'s `D / 32` blocks are stored, block `j` holding channels
    /// `32 j..32 j + 32`.
    ///
    /// # Panics
    /// If `head >= H`.
    pub fn blocks(&self, head: usize, kind: KvKind) -> &[BlockMeta] {
        let per_entry = self.shape.blocks_per_entry();
        let at = self.shape.entry(head, kind) * per_entry;
        &self.blocks[at..at + per_entry]
    }

    /// The page's blocks counted by storage, `[K, V]`.
    pub fn block_counts(&self) -> [BlockCounts; 2] {
        let mut counts = [BlockCounts::default(); 2];
        for head in 0..self.shape.kv_heads {
            for kind in KvKind::BOTH {
                self.blocks(head, kind).iter().for_each(|&m| counts[kind as usize].add(m));
            }
        }
        counts
    }
}

/// `b/2` of a coded block, `z` + `b/2` of a zero-aware one, `raw`: a block in summaries.
fn block_label(meta: BlockMeta) -> String {
    match meta {
        BlockMeta::Coded { half_base } => half_base.to_string(),
        BlockMeta::ZeroAware { half_base } => format!("z{half_base}"),
        BlockMeta::Raw => "raw".into(),
    }
}

impl fmt::Display for PageInfo {
    /// A readable summary: the size and ratio, then per entry its offset and blocks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.shape;
        let bf16 = 2 * 2 * s.values_per_kind();
        writeln!(
            f,
            "zipfusion page, {} variant, H={} D={}: {} bytes for {bf16} of BF16 (ratio {:.4})",
            self.variant.name(),
            s.kv_heads,
            s.head_dim,
            self.len,
            bf16 as f64 / self.len as f64
        )?;
        writeln!(f, "metadata: {} bytes, {} entries of {}", s.metadata_len(), s.entries(), s.entry_stride())?;
        writeln!(f, "head kind  offset  blocks (b/2, z = zero-aware, raw)")?;
        for head in 0..s.kv_heads {
            for kind in KvKind::BOTH {
                let labels: Vec<String> = self.blocks(head, kind).iter().map(|&m| block_label(m)).collect();
                let kind_name = if kind == KvKind::K { "K" } else { "V" };
                writeln!(f, "{head:>4} {kind_name:<4} {:>7}  {}", self.offset(head, kind), labels.join(" "))?;
            }
        }
        let [k, v] = self.block_counts();
        write!(
            f,
            "blocks: K {} coded, {} zero-aware, {} raw; V {} coded, {} zero-aware, {} raw",
            k.coded, k.zero_aware, k.raw, v.coded, v.zero_aware, v.raw
        )
    }
}

/// Validates a page's metadata (the checks of spec §6, rows 1-7) and returns it. `bytes`
/// starts at the page and may run past its end (a pool slot, the rest of a container):
/// [`PageInfo::len`] says where the page ends. The block bodies are not read: every body
/// decodes.
///
/// # Errors
/// `shape`'s error ([`PageShape::validate`]); [`Error::Truncated`] when `bytes` ends
/// before the metadata or a block; per entry, in order, [`Error::ZeroAwareBlockInBaseVariant`],
/// [`Error::HalfBaseTooLarge`], [`Error::PaddingNotZero`], [`Error::OffsetPastPage`],
/// [`Error::OffsetMismatch`].
pub fn page_info(bytes: &[u8], shape: PageShape, variant: Variant) -> Result<PageInfo> {
    shape.validate()?;
    let metadata_len = shape.metadata_len();
    if bytes.len() < metadata_len {
        return Err(Error::Truncated { needed: metadata_len, got: bytes.len() });
    }
    let (stride, per_entry) = (shape.entry_stride(), shape.blocks_per_entry());
    let mut offsets = Vec::with_capacity(shape.entries());
    let mut blocks = Vec::with_capacity(shape.blocks());
    let mut end = metadata_len;
    for (e, entry) in bytes[..metadata_len].chunks_exact(stride).enumerate() {
        let (head, kind) = (e / 2, KvKind::BOTH[e % 2]);
        let (offset_bytes, rest) = entry.split_at(OFFSET_LEN);
        let (block_bytes, padding) = rest.split_at(per_entry);
        for (block, &byte) in block_bytes.iter().enumerate() {
            let meta = BlockMeta::from_byte(byte, variant).map_err(|fault| match fault {
                MetaByteFault::ZeroAwareInBase => {
                    Error::ZeroAwareBlockInBaseVariant { head, kind, block, byte }
                }
                MetaByteFault::HalfBaseTooLarge => Error::HalfBaseTooLarge { head, kind, block, byte },
            })?;
            blocks.push(meta);
        }
        if let Some(i) = padding.iter().position(|&b| b != 0) {
            let offset = e * stride + OFFSET_LEN + per_entry + i;
            return Err(Error::PaddingNotZero { offset, value: padding[i] });
        }
        let offset = u32::from_le_bytes([offset_bytes[0], offset_bytes[1], offset_bytes[2], offset_bytes[3]]);
        let offset = offset as usize;
        if offset > bytes.len() {
            return Err(Error::OffsetPastPage { head, kind, offset, len: bytes.len() });
        }
        if offset != end {
            return Err(Error::OffsetMismatch { head, kind, stored: offset, expected: end });
        }
        end += blocks[blocks.len() - per_entry..].iter().map(|m| m.encoded_len()).sum::<usize>();
        if end > bytes.len() {
            return Err(Error::Truncated { needed: end, got: bytes.len() });
        }
        offsets.push(offset);
    }
    Ok(PageInfo { shape, variant, len: end, offsets, blocks })
}

/// Checks that a page's K and V hold `16 H D` words each.
fn check_kind_lengths(k: usize, v: usize, shape: PageShape) -> Result<()> {
    let expected = shape.values_per_kind();
    for got in [k, v] {
        if got != expected {
            return Err(Error::WordCountMismatch { got, expected });
        }
    }
    Ok(())
}

/// Copies block `block` of head `head` out of a `[16, H, D]` slice into a tile.
fn gather(src: &[u16], shape: PageShape, head: usize, block: usize, tile: &mut Tile) {
    let (heads, dim) = (shape.kv_heads, shape.head_dim);
    for (token, row) in tile.chunks_exact_mut(BLOCK_CHANNELS).enumerate() {
        let at = (token * heads + head) * dim + block * BLOCK_CHANNELS;
        row.copy_from_slice(&src[at..at + BLOCK_CHANNELS]);
    }
}

/// Copies a tile into block `block` of head `head` of a `[16, H, D]` slice.
fn scatter(tile: &Tile, shape: PageShape, head: usize, block: usize, dst: &mut [u16]) {
    let (heads, dim) = (shape.kv_heads, shape.head_dim);
    for (token, row) in tile.chunks_exact(BLOCK_CHANNELS).enumerate() {
        let at = (token * heads + head) * dim + block * BLOCK_CHANNELS;
        dst[at..at + BLOCK_CHANNELS].copy_from_slice(row);
    }
}

/// Encodes one page (spec §5) into `out` and returns its length. `k` and `v` are the
/// page's 16 tokens of one layer's K and V, each `[16, H, D]` token-major (`16 H D`
/// words, as [`bf16_field::KvCache::page`] gives them). Nothing is written on an error.
///
/// # Errors
/// `shape`'s error ([`PageShape::validate`]), [`Error::WordCountMismatch`],
/// [`Error::OutputTooSmall`] (in bytes; [`PageShape::max_page_len`] always suffices).
pub fn encode_page_into(
    k: &[u16],
    v: &[u16],
    shape: PageShape,
    variant: Variant,
    out: &mut [u8],
) -> Result<usize> {
    shape.validate()?;
    check_kind_lengths(k.len(), v.len(), shape)?;
    let per_entry = shape.blocks_per_entry();
    let mut tile = [0u16; BLOCK_VALUES];
    let mut metas = Vec::with_capacity(shape.blocks());
    for head in 0..shape.kv_heads {
        for src in [k, v] {
            for block in 0..per_entry {
                gather(src, shape, head, block, &mut tile);
                metas.push(classify(&tile, variant));
            }
        }
    }
    let len = shape.metadata_len() + metas.iter().map(|m| m.encoded_len()).sum::<usize>();
    if out.len() < len {
        return Err(Error::OutputTooSmall { needed: len, got: out.len() });
    }
    let (metadata, mut body) = out[..len].split_at_mut(shape.metadata_len());
    metadata.fill(0);
    let mut offset = shape.metadata_len();
    for (e, (entry, metas)) in
        metadata.chunks_exact_mut(shape.entry_stride()).zip(metas.chunks(per_entry)).enumerate()
    {
        let (head, src) = (e / 2, if e % 2 == 0 { k } else { v });
        entry[..OFFSET_LEN].copy_from_slice(&(offset as u32).to_le_bytes());
        for (block, &meta) in metas.iter().enumerate() {
            entry[OFFSET_LEN + block] = meta.byte();
            gather(src, shape, head, block, &mut tile);
            let (bytes, rest) = body.split_at_mut(meta.encoded_len());
            write_block(&tile, KvKind::BOTH[e % 2], meta, bytes);
            body = rest;
            offset += meta.encoded_len();
        }
    }
    Ok(len)
}

/// [`encode_page_into`] into a new buffer of the page's length.
///
/// # Errors
/// As [`encode_page_into`].
pub fn encode_page(k: &[u16], v: &[u16], shape: PageShape, variant: Variant) -> Result<Vec<u8>> {
    shape.validate()?;
    let mut out = vec![0u8; shape.max_page_len()];
    let len = encode_page_into(k, v, shape, variant, &mut out)?;
    out.truncate(len);
    Ok(out)
}

/// Decodes the blocks of a page whose metadata `info` holds into its K and V outputs
/// (each at least `16 H D` words). `page` holds at least `info.len` bytes.
pub(crate) fn decode_blocks(page: &[u8], info: &PageInfo, k: &mut [u16], v: &mut [u16]) {
    let mut tile = [0u16; BLOCK_VALUES];
    for head in 0..info.shape.kv_heads {
        for (kind, out) in [(KvKind::K, &mut *k), (KvKind::V, &mut *v)] {
            let mut at = info.offset(head, kind);
            for (block, &meta) in info.blocks(head, kind).iter().enumerate() {
                read_block(&page[at..at + meta.encoded_len()], kind, meta, &mut tile);
                scatter(&tile, info.shape, head, block, out);
                at += meta.encoded_len();
            }
        }
    }
}

/// Decodes one page into `k` and `v`, each at least `16 H D` words (`[16, H, D]`
/// token-major; words past them are left as they were). `page` is exactly the page's
/// bytes; the caller gives the shape and the cache's variant, which pages do not record.
/// Nothing is written on an error.
///
/// # Errors
/// As [`page_info`], then [`Error::TrailingBytes`] when `page` runs past the page's end
/// and [`Error::OutputTooSmall`] (in words).
pub fn decode_page_into(
    page: &[u8],
    shape: PageShape,
    variant: Variant,
    k: &mut [u16],
    v: &mut [u16],
) -> Result<()> {
    let info = page_info(page, shape, variant)?;
    if page.len() > info.len {
        return Err(Error::TrailingBytes { extra: page.len() - info.len });
    }
    let needed = shape.values_per_kind();
    for got in [k.len(), v.len()] {
        if got < needed {
            return Err(Error::OutputTooSmall { needed, got });
        }
    }
    decode_blocks(page, &info, k, v);
    Ok(())
}

/// [`decode_page_into`] into new buffers: `[K, V]`, each `[16, H, D]`.
///
/// # Errors
/// As [`decode_page_into`].
pub fn decode_page(page: &[u8], shape: PageShape, variant: Variant) -> Result<[Vec<u16>; 2]> {
    shape.validate()?;
    let mut k = vec![0u16; shape.values_per_kind()];
    let mut v = vec![0u16; shape.values_per_kind()];
    decode_page_into(page, shape, variant, &mut k, &mut v)?;
    Ok([k, v])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_round_trips_and_its_metadata_says_where_blocks_are() {
        let shape = PageShape::new(2, 64).unwrap();
        let n = shape.values_per_kind();
        // K: head 0 coded, head 1's second block raw (one huge value); V coded.
        let k: Vec<u16> =
            (0..n).map(|i| if i == 64 + 40 { 0x7000 } else { 0x3f00 + (i % 97) as u16 }).collect();
        let v: Vec<u16> = (0..n).map(|i| 0xbe00 + (i % 211) as u16).collect();
        let page = encode_page(&k, &v, shape, Variant::Base).unwrap();
        let info = page_info(&page, shape, Variant::Base).unwrap();
        assert_eq!(info.len, page.len());
        assert_eq!(info.blocks(1, KvKind::K)[1], BlockMeta::Raw);
        assert_eq!(page.len(), shape.metadata_len() + 7 * 768 + 1024);
        assert_eq!(info.offset(0, KvKind::K), shape.metadata_len());
        assert_eq!(info.offset(1, KvKind::V), shape.metadata_len() + 2 * 768 + 2 * 768 + 768 + 1024);
        assert_eq!(decode_page(&page, shape, Variant::Base).unwrap(), [k, v]);
    }
}
