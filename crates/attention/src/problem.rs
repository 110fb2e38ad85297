//! A decode-attention problem: its shape, the paged cache it reads and the block tables
//! that map each sequence's tokens to pages, with every check made once.

use crate::AttentionError;

/// Tokens per page: the page size of vLLM's and FlashInfer's paged caches, and the page of
/// ZipFusion and the block of GAAC (ZipFusion seed, "Memory management"; GAAC seed, §3).
pub const PAGE_TOKENS: usize = 16;

/// The head widths the kernels are built for, in values.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The largest GQA group (query heads per KV head): a decode step's query heads of one KV
/// head are the rows of one 16-row tensor-core tile, of which 8 carry data.
pub const MAX_GROUP: usize = 8;

/// The sizes of a decode step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    /// Sequences in the batch, one query token each.
    pub batch: usize,
    /// Query heads per token.
    pub q_heads: usize,
    /// KV heads per token; each serves `q_heads / kv_heads` query heads (a GQA group).
    pub kv_heads: usize,
    /// Values per head, one of [`HEAD_DIMS`].
    pub head_dim: usize,
}

impl DecodeShape {
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.q_heads / self.kv_heads.max(1)
    }

    /// Values in `q` and in the output: `batch * q_heads * head_dim` (saturating: a size
    /// no buffer can have).
    pub fn q_values(&self) -> usize {
        self.batch.saturating_mul(self.q_heads).saturating_mul(self.head_dim)
    }

    /// BF16 values of one page of K (or of V): `PAGE_TOKENS * kv_heads * head_dim`
    /// (saturating).
    pub fn page_values(&self) -> usize {
        PAGE_TOKENS.saturating_mul(self.kv_heads).saturating_mul(self.head_dim)
    }

    /// Checks the head counts and width.
    ///
    /// # Errors
    /// [`AttentionError::HeadDim`], [`AttentionError::Heads`], [`AttentionError::Group`].
    pub fn validate(&self) -> Result<(), AttentionError> {
        if !HEAD_DIMS.contains(&self.head_dim) {
            return Err(AttentionError::HeadDim { head_dim: self.head_dim });
        }
        if self.kv_heads == 0 || self.q_heads == 0 || !self.q_heads.is_multiple_of(self.kv_heads) {
            return Err(AttentionError::Heads { q_heads: self.q_heads, kv_heads: self.kv_heads });
        }
        if self.group() > MAX_GROUP {
            return Err(AttentionError::Group { group: self.group(), max: MAX_GROUP });
        }
        Ok(())
    }
}

/// A paged BF16 cache of one layer: K and V pages, each `[pages, PAGE_TOKENS, kv_heads,
/// head_dim]` BF16 words (FlashInfer's "NHD" page layout), page `i` of K beside page `i`
/// of V.
#[derive(Clone, Copy, Debug)]
pub struct PagedKv<'a> {
    /// K pages, `pages * PAGE_TOKENS * kv_heads * head_dim` BF16 words.
    pub k: &'a [u16],
    /// V pages, the same shape as `k`.
    pub v: &'a [u16],
}

/// Per-sequence block tables, as vLLM's: row `b` lists the physical pages of sequence `b`
/// in token order, `max_pages` entries per row, of which the first
/// `ceil(context_lens[b] / PAGE_TOKENS)` are read.
#[derive(Clone, Copy, Debug)]
pub struct BlockTables<'a> {
    /// `[batch, max_pages]` physical page ids, row-major.
    pub pages: &'a [u32],
    /// Entries per row.
    pub max_pages: usize,
    /// `[batch]` context lengths in tokens, each at least 1.
    pub context_lens: &'a [u32],
}

/// One decode step of one layer: the query of each sequence against its cached tokens.
#[derive(Clone, Copy, Debug)]
pub struct DecodeProblem<'a> {
    /// The sizes.
    pub shape: DecodeShape,
    /// `[batch, q_heads, head_dim]` BF16 words.
    pub q: &'a [u16],
    /// The cache.
    pub kv: PagedKv<'a>,
    /// Which pages each sequence reads.
    pub tables: BlockTables<'a>,
    /// Softmax scale applied to every dot product (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
}

impl DecodeProblem<'_> {
    /// Pages in the cache.
    pub fn pages(&self) -> usize {
        self.kv.k.len() / self.shape.page_values().max(1)
    }

    /// Checks every length, context and block table entry that the computation reads, so
    /// that no kernel reads out of bounds.
    ///
    /// # Errors
    /// The first disagreement found, as an [`AttentionError`].
    pub fn validate(&self) -> Result<(), AttentionError> {
        let shape = self.shape;
        shape.validate()?;
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(AttentionError::Scale { scale: self.scale });
        }
        length("q", self.q.len(), shape.q_values(), "BF16 values")?;
        let page_values = shape.page_values();
        if !self.kv.k.len().is_multiple_of(page_values) {
            return Err(AttentionError::Length {
                what: "k pages",
                got: self.kv.k.len(),
                expected: self.kv.k.len() / page_values * page_values,
                unit: "BF16 values (a whole number of pages)",
            });
        }
        length("v pages", self.kv.v.len(), self.kv.k.len(), "BF16 values (as many as k)")?;
        let tables = self.tables;
        length("context_lens", tables.context_lens.len(), shape.batch, "entries")?;
        // Sizes from the caller multiply: an overflow is a length no buffer can have.
        length("block table", tables.pages.len(), shape.batch.saturating_mul(tables.max_pages), "entries")?;
        let pages = self.pages();
        for (sequence, &len) in tables.context_lens.iter().enumerate() {
            let tokens = len as usize;
            if tokens == 0 {
                return Err(AttentionError::EmptyContext { sequence });
            }
            let capacity = tables.max_pages.saturating_mul(PAGE_TOKENS);
            if tokens > capacity {
                return Err(AttentionError::ContextTooLong { sequence, tokens, capacity });
            }
            let row = &tables.pages[sequence * tables.max_pages..][..tokens.div_ceil(PAGE_TOKENS)];
            if let Some((logical, &page)) = row.iter().enumerate().find(|(_, p)| **p as usize >= pages) {
                return Err(AttentionError::PageOutOfRange { sequence, logical, page, pages });
            }
        }
        Ok(())
    }
}

fn length(what: &'static str, got: usize, expected: usize, unit: &'static str) -> Result<(), AttentionError> {
    if got == expected { Ok(()) } else { Err(AttentionError::Length { what, got, expected, unit }) }
}
