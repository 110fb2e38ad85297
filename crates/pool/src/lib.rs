//! kvcodec-pool: the allocator of a paged, compressed KV cache, after the ZipFusion
//! paper's memory management (seed 002, "Memory management": new pages at uncompressed
//! size, compressed pages that move behind a page table, per-layer private space plus a
//! shared pool, admission by the number of new pages that fit in every layer): a CPU
//! model ([`Pool`]) and its device backend ([`gpu`]).
//!
//! # Model
//! * A **page** is 16 tokens (any [`PoolConfig::page_tokens`]) of one layer's K and V for
//!   every KV head, owned by one sequence: vLLM's block, one per (sequence, layer, 16
//!   tokens). It has a [`PageId`] that never changes while it lives; the **page table**
//!   ([`Pool::entry`]) maps it to its current [`Location`] (chunk, byte offset, slot
//!   size) and [`PageFormat`]. A sequence's block table lists page ids; the attention
//!   kernels resolve them through the page table. A sequence takes its ids in blocks of
//!   [`ID_BLOCK`] consecutive ids.
//! * Memory is a row of equal **chunks** (bytes: [`PoolConfig::chunk_bytes`]). Each
//!   layer owns [`PoolConfig::private_chunks`] of them; the other
//!   [`PoolConfig::shared_chunks`] form the **shared pool**, from which any layer takes a
//!   chunk when its own are full. A chunk in use belongs to one layer and is a **slab**
//!   (slots of the open class, the uncompressed page size: a free bitmap, O(1) alloc and
//!   free) or a **segment** owned by one sequence.
//! * A new page gets an open slot: it must accept writes until it fills. When it fills,
//!   the caller compresses it and tells [`Pool::compress`] its compressed size
//!   (ZipFusion: `zipfusion::page_info(..).len`; GAAC: its slots and raw blocks); the page
//!   moves into its sequence's **segment** of that layer, packed after the segment's
//!   earlier pages at the smallest size class ([`SizeClasses`]) that holds it, and its
//!   open slot becomes the sequence's spare for its next page in that layer (decode
//!   alternates two slots per layer and touches no slab). A full segment is followed by
//!   a fresh one, unless the sequence's pages still to come in that layer would fill
//!   less than [`PoolConfig::tail_fill_percent`] of it: that tail stays BF16. [`Pool::move_page`] moves a full page again (a page kept BF16 is
//!   compressed into the segment when room appears).
//! * **Release per segment.** A finished or evicted sequence ([`Pool::release`]) frees
//!   its segments and id blocks whole and queues its slab slots as one list, which the
//!   reclamation frees a slab bitmap word's run at a time: O(layers + segments + id
//!   blocks) at the release, not O(pages) (a Llama-3.1-8B request of 8K
//!   tokens: 16896 pages, about 400 segments of 2 MiB). Its segments' holes (pages moved
//!   away) and their unused tails are held until then; there is nothing to compact.
//! * **Stream-ordered reclamation.** The host numbers its decode steps (epochs):
//!   [`Pool::submit`]`(n)` after launching step `n`, [`Pool::complete`]`(n)` once it sees
//!   step `n` done (a CUDA event queried, or a counter the stream writes, polled; never a
//!   synchronize on the decode path). A slot, segment or id freed while the host prepares
//!   step `submitted + 1` (a finished sequence's, a page's old slot after a move) is
//!   reused only after that step completes: the kernels of every step up to and including
//!   it may still read the old bytes, and the copy of a move runs in it. A chunk whose
//!   slots are all free with none pending, or a released segment, returns to its home:
//!   its layer's private space or the shared pool (seed 002: "when a chunk in one layer
//!   becomes fully empty with no pending reads, it returns to the pool and can go to
//!   another layer").
//! * **Admission.** [`Pool::reserve`] holds open pages in every layer for a sequence's
//!   remaining tokens (its prompt and expected output, at uncompressed size, so a running
//!   sequence can always grow); [`Pool::alloc`] consumes them. [`Pool::admissible_pages`]
//!   is the number of new open pages that fit in every layer beyond all reservations
//!   (capacity is set by the tightest layer; the shared pool evens layers out), and
//!   [`Pool::admissible_requests`] divides it by a request's pages. It counts no pending
//!   slot and is exact: that many pages can be reserved and allocated, one more cannot.
//!   Compression never takes a fresh chunk that a reservation needs: a page that cannot
//!   move stays BF16 ([`CompressOutcome::Kept`]).
//! * **Row operations.** A decode step appends one token to every layer of a request, so
//!   a scheduler's calls are per request: [`Pool::alloc_row`] (a new open page in every
//!   layer), [`Pool::compress_pages`] (the pages the last token filled) and, for a
//!   prompt, [`Pool::prefill_layer`]. Each is the loop of the single calls (the same
//!   pages, trace lines and [`Change`]s) with one lookup of the sequence, whose
//!   per-layer state is one array (docs/perf/pool.md, "Version 4"). At a page boundary
//!   [`Pool::advance_row`] does both row calls in one pass over the layers (the next row
//!   allocated, then the filled row compressed; docs/perf/pool.md, "Version 7"). Before a step's
//!   rows, [`Pool::touch_rows`] (a hint that changes nothing) loads the lines those rows
//!   will touch, so that their cache misses overlap.
//!
//! # Size classes and the two clients
//! * **ZipFusion** pages are `M + 768 e + 1024 (nb - e)` bytes for `e` coded blocks of `nb`
//!   (docs/formats/zipfusion.md §5.2): classes a few hundred bytes to a KiB apart
//!   ([`SizeClasses::stepped`]) keep the rounding loss under 2%. A page never refers
//!   outside itself (§5.3), so a move is a byte copy. A page whose blocks are all raw is
//!   larger than the BF16 page (its metadata): it stays BF16 in its open slot.
//! * **GAAC** blocks (16 tokens x D of one head and kind) each own a fixed-capacity slot of
//!   `C` bytes; a block that does not fit is stored raw, `2N` bytes (docs/formats/gaac.md
//!   §3.6, §4). One page's `2H` slots are one extent of `2 H C` bytes, and a page with
//!   `k` raw blocks one of `2 H C + k 2N` (slots, then its raw blocks in block order):
//!   classes `2HC`, `2HC + 2N`, ... below the open class serve both, so GAAC needs no
//!   second allocator. (Raw blocks as separate allocations would give each page a list of
//!   locations; one extent per page keeps the page table one entry per page.)
//!
//! # On the device
//! [`gpu::DevicePool`] makes one allocation of [`PoolConfig::arena_bytes`] and maps
//! chunk `c` to bytes `c * chunk_bytes ..+ chunk_bytes` of it: [`Location::arena_offset`]
//! is the page's byte offset from the arena base. The page table lives in device memory
//! as one `u64` word per page id ([`PageEntry::device_word`]: the offset, and a bit the
//! kernels branch on, compressed or BF16). With [`Pool::record_changes`] the pool lists
//! what each epoch changed ([`Change`]); the backend turns them into stream-ordered work
//! before that epoch's attention: invalidate released id blocks, scatter the changed
//! words, run the page copies. [`Pool::complete`] is fed by a per-step CUDA event,
//! queried. [`gpu::replay_on_device`] replays a whole [`trace`] and checks every page and
//! every table word against this model (issue 19). The decode-attention kernels read
//! through this table (`kvcodec_attention::pooled`, `zipfusion::attention::decode_device_pooled`:
//! block tables of page ids, BF16 or compressed per page by bit 0).
//!
//! ```
//! use kvcodec_pool::{CompressOutcome, Pool, PoolConfig, SizeClasses};
//! # fn main() -> Result<(), kvcodec_pool::Error> {
//! // 2 layers; 64 KiB BF16 pages, compressed classes every 4 KiB from 48 KiB;
//! // 1 MiB chunks: 2 private per layer, 4 shared.
//! let classes = SizeClasses::stepped(48 << 10, 64 << 10, 4 << 10)?;
//! let cfg = PoolConfig {
//!     layers: 2, chunk_bytes: 1 << 20, private_chunks: 2, shared_chunks: 4, page_tokens: 16, classes, tail_fill_percent: 0,
//! };
//! let mut pool = Pool::new(cfg)?;
//! assert_eq!(pool.admissible_pages(), 16 * (2 + 2)); // 16 pages per chunk, 2 + 4/2 chunks a layer
//! pool.reserve(7, 1)?; // sequence 7: one page per layer
//! let page = pool.alloc(7, 0)?;
//! pool.submit(1)?; // step 1 reads the page
//! let CompressOutcome::Moved(m) = pool.compress(page, 50_000)? else { unreachable!() };
//! assert_eq!(m.to.slot_bytes, 52 << 10);
//! pool.submit(2)?; // step 2 runs the compression copy
//! pool.complete(2)?; // the old slot is free again
//! assert_eq!(pool.release(7)?, 1);
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_code)]

mod config;
mod error;
#[allow(unsafe_code)]
pub mod gpu;
mod pool;
pub mod trace;

pub use config::{PoolConfig, SLOT_ALIGN, SizeClasses};
pub use error::{Error, Result};
pub use pool::{
    Change, ChunkHome, ChunkInfo, CompressOutcome, ID_BLOCK, INVALID_WORD, Location, Move, PageEntry,
    PageFormat, Pool, PoolStats,
};

/// A page's id: its index in the page table; stable while the page lives, reused only
/// after the epoch that freed it completes.
pub type PageId = u32;
/// A sequence (request) id, chosen by the caller.
pub type SeqId = u64;
/// A chunk's index: chunk `c` covers arena bytes `c * chunk_bytes ..+ chunk_bytes`.
pub type ChunkId = u32;
/// A decode step's number, as submitted to and completed on the stream.
pub type Epoch = u64;
