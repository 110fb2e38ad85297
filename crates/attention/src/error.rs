//! Why a decode-attention problem was refused.

/// A decode-attention problem that cannot be run: its shape, buffers or block tables do not
/// agree. Every check runs before any work, on the CPU and on the GPU path alike.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AttentionError {
    /// `head_dim` is not one of [`crate::HEAD_DIMS`].
    #[error("head_dim {head_dim} is not supported (64, 128 or 256)")]
    HeadDim {
        /// The head width asked for, in values.
        head_dim: usize,
    },
    /// `q_heads` is not a whole multiple of `kv_heads`, or a count is zero.
    #[error("{q_heads} query heads cannot share {kv_heads} KV heads evenly")]
    Heads {
        /// Query heads per token.
        q_heads: usize,
        /// KV heads per token.
        kv_heads: usize,
    },
    /// More query heads per KV head than [`crate::MAX_GROUP`].
    #[error("a GQA group of {group} query heads per KV head is above the supported {max}")]
    Group {
        /// `q_heads / kv_heads`.
        group: usize,
        /// [`crate::MAX_GROUP`].
        max: usize,
    },
    /// A buffer's length disagrees with the shape.
    #[error("{what} holds {got} {unit}, the shape needs {expected}")]
    Length {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length the shape implies.
        expected: usize,
        /// What the lengths count.
        unit: &'static str,
    },
    /// A sequence has no tokens: attention over an empty context has no value.
    #[error("sequence {sequence} has an empty context")]
    EmptyContext {
        /// The sequence's index in the batch.
        sequence: usize,
    },
    /// A context is longer than its row of the block table can address.
    #[error("sequence {sequence} has {tokens} tokens, its block table row holds {capacity}")]
    ContextTooLong {
        /// The sequence's index in the batch.
        sequence: usize,
        /// Its context length, in tokens.
        tokens: usize,
        /// `max_pages * PAGE_TOKENS`.
        capacity: usize,
    },
    /// A block table entry that the context uses names no page of the cache.
    #[error("sequence {sequence}, logical page {logical}: page {page} is past the cache's {pages} pages")]
    PageOutOfRange {
        /// The sequence's index in the batch.
        sequence: usize,
        /// The logical page (token / PAGE_TOKENS).
        logical: usize,
        /// The physical page the table names.
        page: u32,
        /// Pages in the cache.
        pages: usize,
    },
    /// A page id a sequence reads through a pool's page table does not name a readable
    /// page ([`crate::pooled`]).
    #[error("sequence {sequence}, logical page {logical}: page id {page}: {fault}")]
    PoolPage {
        /// The sequence's index in the batch.
        sequence: usize,
        /// The logical page (token / PAGE_TOKENS).
        logical: usize,
        /// The page id the block table names.
        page: u32,
        /// Why it cannot be read.
        fault: PoolFault,
    },
    /// The softmax scale is not a finite positive number.
    #[error("softmax scale {scale} is not finite and positive")]
    Scale {
        /// The scale given.
        scale: f32,
    },
}

/// Why a page table word of a pooled cache cannot be read ([`crate::pooled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolFault {
    /// The page id is past the page table.
    #[error("the page table holds {ids} words")]
    IdPastTable {
        /// Words in the page table.
        ids: usize,
    },
    /// The id's word is [`crate::pooled::INVALID_WORD`]: no live page.
    #[error("no live page (the word is all ones)")]
    NotLive,
    /// The word's arena offset is not a multiple of [`crate::pooled::ALIGN`].
    #[error("arena offset {offset} is not a multiple of 16")]
    Misaligned {
        /// The offset, in bytes.
        offset: u64,
    },
    /// The page would read past the arena.
    #[error("{bytes} bytes at arena offset {offset} pass the arena's {arena} bytes")]
    PastArena {
        /// The offset, in bytes.
        offset: u64,
        /// The bytes the page takes (a BF16 page), or the least a compressed page reads.
        bytes: u64,
        /// The arena's length, in bytes.
        arena: u64,
    },
    /// A compressed page where only a BF16 page can be read: by the BF16 twin, or as a
    /// sequence's unfilled last page (the pool compresses only full pages).
    #[error("a compressed page where a BF16 page is read")]
    Compressed,
}
