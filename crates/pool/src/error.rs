//! The crate's one error type: every variant carries the numbers that went wrong.

use thiserror::Error;

use crate::{Epoch, PageId, SeqId};

/// Errors of the pool's configuration and operations. An operation that returns an error
/// leaves the pool unchanged.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ----- configuration --------------------------------------------------------------
    /// `layers`, `chunk_bytes` or `page_tokens` is zero.
    #[error("invalid pool configuration: {field} is zero")]
    ZeroField {
        /// The configuration field that is zero.
        field: &'static str,
    },
    /// No size class was given.
    #[error("invalid pool configuration: no size class")]
    NoClasses,
    /// The size classes are not strictly ascending.
    #[error("size class {index} ({bytes} bytes) is not larger than the class before it")]
    ClassOrder {
        /// The index of the offending class.
        index: usize,
        /// Its size in bytes.
        bytes: u32,
    },
    /// A size class is not a positive multiple of [`crate::SLOT_ALIGN`] bytes: every
    /// slot must start 16-byte aligned for the kernels' vector loads.
    #[error("size class {bytes} bytes is not a positive multiple of {align}")]
    ClassNotAligned {
        /// The class's size in bytes.
        bytes: u32,
        /// The required alignment in bytes.
        align: u32,
    },
    /// A size class (the largest is the open, BF16 page class) does not fit one chunk, or
    /// the chunk size is not a multiple of [`crate::SLOT_ALIGN`].
    #[error("chunk of {chunk_bytes} bytes cannot hold a slot of {class_bytes} bytes aligned to 16")]
    ChunkTooSmall {
        /// The chunk size in bytes.
        chunk_bytes: u64,
        /// The class size in bytes.
        class_bytes: u32,
    },
    /// The chunk count or a chunk's byte offsets exceed the page table's `u32` fields.
    #[error("{chunks} chunks of {chunk_bytes} bytes exceed the page table's u32 fields")]
    TooLarge {
        /// Total chunks requested.
        chunks: u64,
        /// The chunk size in bytes.
        chunk_bytes: u64,
    },

    /// [`crate::PoolConfig::tail_fill_percent`] above 100.
    #[error("tail_fill_percent {percent} is above 100")]
    TailFill {
        /// The percent given.
        percent: u32,
    },

    // ----- operations -----------------------------------------------------------------
    /// A layer index at or past the configured layer count.
    #[error("layer {layer} out of range: the pool has {layers} layers")]
    LayerOutOfRange {
        /// The layer given.
        layer: u32,
        /// The pool's layer count.
        layers: u32,
    },
    /// A page id that is not live (never allocated, or already freed).
    #[error("page {page} is not live")]
    UnknownPage {
        /// The page id.
        page: PageId,
    },
    /// A sequence id the pool does not know (never reserved, or already released).
    #[error("sequence {seq} is not known to the pool")]
    UnknownSeq {
        /// The sequence id.
        seq: SeqId,
    },
    /// `compress` on a page that is not open (already compressed or kept BF16).
    #[error("page {page} is not open: only an open page that has just filled can be compressed")]
    NotOpen {
        /// The page id.
        page: PageId,
    },
    /// `move_page` on an open page: a page still being written must not move.
    #[error("page {page} is open: a page still being written cannot move")]
    OpenPage {
        /// The page id.
        page: PageId,
    },
    /// No room in `layer` without breaking the reservations of running sequences.
    #[error("no capacity in layer {layer} without breaking the running sequences' reservations")]
    NoCapacity {
        /// The layer that has no room.
        layer: u32,
    },
    /// A reservation larger than what [`crate::Pool::admissible_pages`] reports.
    #[error("reservation of {requested} pages per layer exceeds the {admissible} pages that fit")]
    ReservationTooLarge {
        /// Pages per layer asked for.
        requested: u64,
        /// Pages per layer that fit.
        admissible: u64,
    },
    /// A reservation that would hold more than `u32::MAX` pages for one sequence in one
    /// layer (a sequence's per-layer count is 32 bits in its row record).
    #[error(
        "sequence {seq} holds {held} reserved pages in a layer; {requested} more pass the per-sequence limit of 2^32 - 1"
    )]
    ReservationPastLimit {
        /// The sequence.
        seq: u64,
        /// Its largest reservation in a layer, in pages.
        held: u64,
        /// Pages per layer asked for.
        requested: u64,
    },
    /// A row or batch operation given slices of different lengths, or a row that is not
    /// one page per layer.
    #[error("{what}: {got} entries where {expected} are needed")]
    LengthMismatch {
        /// The argument.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length needed.
        expected: usize,
    },
    /// `submit` with an epoch not after the last one submitted.
    #[error("epoch {epoch} submitted after epoch {last}: epochs must increase")]
    SubmitOrder {
        /// The epoch given.
        epoch: Epoch,
        /// The last epoch submitted.
        last: Epoch,
    },
    /// `compress` of a page to 0 bytes: no format of this workspace stores a page in
    /// none (a caller's size went wrong), and moving it would lose the page's values.
    #[error("page {page} cannot be compressed to 0 bytes")]
    ZeroCompressedBytes {
        /// The page.
        page: u32,
    },
    /// `submit` of the largest epoch: the pool names the work prepared after a submit
    /// `epoch + 1`, which must exist.
    #[error("epoch {epoch} cannot be submitted: the last epoch is u64::MAX - 1")]
    EpochLimit {
        /// The epoch given.
        epoch: Epoch,
    },
    /// `complete` with an epoch not yet submitted, or before the last one completed.
    #[error("epoch {epoch} completed: it must lie in [{completed}, {submitted}]")]
    CompleteOrder {
        /// The epoch given.
        epoch: Epoch,
        /// The last epoch completed.
        completed: Epoch,
        /// The last epoch submitted.
        submitted: Epoch,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
