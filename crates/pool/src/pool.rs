//! The allocator: chunks, open-page slabs, request-owned segments, the page table,
//! reservations, deferred frees.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::config::PoolConfig;
use crate::error::{Error, Result};
use crate::{ChunkId, Epoch, PageId, SeqId};

/// No page in this slot / not in a list / no chunk.
const NONE: u32 = u32::MAX;

/// Page ids are handed to sequences in blocks of this many consecutive ids: a sequence's
/// pages (all layers) take the ids of its blocks in allocation order, and a finished
/// sequence frees its ids per block, not per page. Block `b` holds ids
/// `b * ID_BLOCK ..+ ID_BLOCK`.
pub const ID_BLOCK: u32 = 256;

/// Where a page lives: its chunk, its byte offset in the chunk and its slot's size in
/// bytes. The attention kernels read page `p` at arena byte
/// [`Location::arena_offset`]; the slot holds the page's bytes at its start. An open or
/// kept-BF16 page's slot is a slot of a slab (offset a multiple of `slot_bytes`); a
/// compressed page's is an extent of its sequence's segment (offset a multiple of
/// [`crate::SLOT_ALIGN`], packed after the segment's earlier pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The chunk.
    pub chunk: ChunkId,
    /// Bytes from the chunk's start (a multiple of [`crate::SLOT_ALIGN`]).
    pub offset: u32,
    /// The slot's size in bytes: a size class ([`crate::SizeClasses`]).
    pub slot_bytes: u32,
}

impl Location {
    /// Bytes from the arena's start: `chunk * chunk_bytes + offset`.
    pub fn arena_offset(&self, chunk_bytes: u64) -> u64 {
        u64::from(self.chunk) * chunk_bytes + u64::from(self.offset)
    }
}

/// What a page's slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageFormat {
    /// Uncompressed (BF16) and still being written: tokens append to it.
    Open,
    /// Full and uncompressed, in a slot of the open class's size: it did not compress
    /// below the open class, or no segment room could be had when it filled.
    /// `compressed_bytes` is what it would take compressed (a later [`Pool::move_page`]
    /// compresses it into its sequence's segment).
    Bf16 {
        /// The compressed size the caller reported, in bytes.
        compressed_bytes: u32,
    },
    /// Compressed, `bytes` long at its slot's start.
    Compressed {
        /// The compressed page's length in bytes.
        bytes: u32,
    },
}

impl PageFormat {
    /// The bytes a full page's content takes compressed (what [`Pool::compress`] was
    /// told), or `None` for an open page.
    pub fn content_bytes(self) -> Option<u32> {
        match self {
            PageFormat::Open => None,
            PageFormat::Bf16 { compressed_bytes } => Some(compressed_bytes),
            PageFormat::Compressed { bytes } => Some(bytes),
        }
    }
}

/// One page table entry (seed 002, "Memory management": "a lookup table maps the
/// unchanged page ID to its current location").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageEntry {
    /// The sequence that owns the page.
    pub seq: SeqId,
    /// The page's layer.
    pub layer: u32,
    /// Where it lives now.
    pub location: Location,
    /// What its slot holds.
    pub format: PageFormat,
}

/// A copy the device must run, in stream order, before the first kernel that reads the
/// page at `to`: the first `bytes` bytes at `from` go to `to` (`compress`: the BF16 page
/// at `from` is compressed into `to` instead, `bytes` long). `from` stays readable until
/// the epoch that carries this copy completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Move {
    /// The page.
    pub page: PageId,
    /// Its old location.
    pub from: Location,
    /// Its new location (the page table already says so).
    pub to: Location,
    /// Bytes to write at `to`: the compressed length, or the open class's size when a
    /// page kept BF16 moves as it is.
    pub bytes: u32,
    /// Whether the device compresses the BF16 page at `from` (true) or copies bytes.
    pub compress: bool,
}

/// The outcome of [`Pool::compress`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressOutcome {
    /// The page moved into its sequence's segment; the device compresses it there.
    Moved(Move),
    /// The page stays BF16 where it is ([`PageFormat::Bf16`]): it does not compress below
    /// the open class, or no segment room can be had without breaking a reservation.
    Kept,
}

/// Which space a chunk belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkHome {
    /// A layer's private space.
    Private(u32),
    /// The shared pool.
    Shared,
}

/// A chunk's state, for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkInfo {
    /// Private or shared.
    pub home: ChunkHome,
    /// The layer using it, `None` when empty (back in its home's free list).
    pub layer: Option<u32>,
    /// A slab's size class (open and kept-BF16 pages), `None` for a segment or an empty
    /// chunk.
    pub class: Option<usize>,
    /// A segment's owner: the sequence whose compressed pages of `layer` it packs.
    pub owner: Option<SeqId>,
    /// Slots of its class in a slab; 0 for a segment.
    pub slots: u32,
    /// Pages living in it.
    pub live: u32,
    /// A slab's slots held as a sequence's spare open slot (no page in them).
    pub spare: u32,
    /// A slab's slots freed but still possibly read by an epoch in flight; 1 for a
    /// segment released whole and waiting for its epoch.
    pub pending: u32,
    /// A segment's bytes handed out (packed from its start, holes of moved pages
    /// included); 0 for a slab.
    pub used_bytes: u32,
}

/// Totals over the pool, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PoolStats {
    /// Chunks in use by some layer (a slab or a segment), private or shared.
    pub chunks_in_use: u32,
    /// Of those, segments owned by a sequence.
    pub segments: u32,
    /// Chunks of the shared pool not lent to any layer.
    pub shared_free: u32,
    /// Live pages.
    pub live_pages: u64,
    /// Live pages still open (BF16, being written).
    pub open_pages: u64,
    /// Bytes of the slots of live pages.
    pub live_slot_bytes: u64,
    /// Bytes the live pages' contents take (compressed length, or the open class).
    pub live_content_bytes: u64,
    /// Slab slots, segments and id blocks waiting for their epoch to complete.
    pub pending: u64,
    /// Segments returned to their home since the pool was made (each one a whole chunk
    /// freed in one step, with no per-page work).
    pub segments_reclaimed: u64,
}

/// What the device must mirror, recorded by [`Pool::record_changes`]: a device backend
/// uploads a step's changes with that step (page table words, copies, freed id blocks).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// A new open page at `at`: its page table word becomes [`PageEntry::device_word`].
    Alloc {
        /// The page.
        page: PageId,
        /// Its slot.
        at: Location,
    },
    /// A page moved (or was compressed into `to`): the copy to run, then its new word.
    Move(Move),
    /// A finished sequence's id block: ids `block * ID_BLOCK ..+ pages` are no longer
    /// live; their words become [`INVALID_WORD`].
    FreeBlock {
        /// The id block.
        block: u32,
        /// Ids of it that were in use.
        pages: u32,
    },
}

/// The device page table's word of an id that holds no live page.
pub const INVALID_WORD: u64 = u64::MAX;

impl PageEntry {
    /// The page's word in the device page table: its arena byte offset shifted left by
    /// one, with bit 0 set when the page is compressed (the attention kernels decode it)
    /// and clear when it is BF16 (open or kept). Never [`INVALID_WORD`].
    pub fn device_word(&self, chunk_bytes: u64) -> u64 {
        let compressed = matches!(self.format, PageFormat::Compressed { .. });
        (self.location.arena_offset(chunk_bytes) << 1) | u64::from(compressed)
    }
}

/// A page table entry inside the pool (16 bytes, four a cache line; the public
/// [`PageEntry`] is built from it on demand): the sequence comes from the page's id
/// block, the slot's size from the format (the open class, or the class of a compressed
/// page's bytes), the format's tag sits in the offset's low bits (a multiple of
/// [`crate::SLOT_ALIGN`]).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    chunk: ChunkId,
    /// The offset in the chunk, or'ed with [`OPEN`], [`BF16`] or [`COMPRESSED`].
    at: u32,
    /// The content's bytes: what the caller reported at compression (0 while open).
    content: u32,
    layer: u32,
}

/// [`Slot::at`]'s tags: [`PageFormat::Open`], [`PageFormat::Bf16`],
/// [`PageFormat::Compressed`].
const OPEN: u32 = 0;
const BF16: u32 = 1;
const COMPRESSED: u32 = 2;
/// The tag's bits of [`Slot::at`].
const TAG: u32 = 3;
const _: () = assert!(crate::SLOT_ALIGN > TAG);

impl Slot {
    /// A new open page's entry: at `offset` in `chunk`, of layer `layer`.
    fn open(chunk: ChunkId, offset: u32, layer: u32) -> Slot {
        Slot { chunk, at: offset | OPEN, content: 0, layer }
    }
    fn offset(self) -> u32 {
        self.at & !TAG
    }
    fn tag(self) -> u32 {
        self.at & TAG
    }
    /// Whether the page is open (BF16, being written).
    fn is_open(self) -> bool {
        self.tag() == OPEN
    }
    /// This open page's entry once it filled and stays BF16 in place, `content` bytes
    /// compressed.
    fn kept(self, content: u32) -> Slot {
        Slot { at: self.offset() | BF16, content, ..self }
    }
    fn format(self) -> PageFormat {
        match self.tag() {
            OPEN => PageFormat::Open,
            BF16 => PageFormat::Bf16 { compressed_bytes: self.content },
            _ => PageFormat::Compressed { bytes: self.content },
        }
    }
}

/// `offset / open_bytes` (an open slot's index from its byte offset) by a multiply: the
/// decode row's compressions and listings take one per page, where a division cost
/// more than the rest of a page's bookkeeping. `m = ceil(2^64 / d)` is exact for 32-bit
/// offsets and divisors (Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation", 2019); open pages are at least [`crate::SLOT_ALIGN`] bytes.
#[derive(Clone, Copy, Debug)]
struct OpenDiv {
    m: u64,
}

impl OpenDiv {
    fn new(open_bytes: u32) -> OpenDiv {
        assert!(open_bytes >= 2, "an open page is a positive multiple of SLOT_ALIGN bytes");
        OpenDiv { m: u64::MAX / u64::from(open_bytes) + 1 }
    }

    #[inline(always)]
    fn slot(self, offset: u32) -> u32 {
        ((u128::from(offset) * u128::from(self.m)) >> 64) as u32
    }
}

/// Chunk class tags besides a slab's class index.
const SEGMENT: u32 = u32::MAX - 1;
/// A segment whose sequence was released, waiting for its epoch ([`Pool::chunk_tag`]:
/// reports only; `chunk_class` keeps SEGMENT).
const RETIRED: u32 = u32::MAX - 2;

#[derive(Clone, Debug)]
struct Chunk {
    home: ChunkHome,
    layer: u32,
    /// A segment's owner.
    owner: SeqId,
    /// A slab's slots.
    slots: u32,
    /// A slab's slots held: by a page, or as a sequence's spare open slot, or by a
    /// released sequence until its epoch completes ([`Retired::SlotList`]).
    live: u32,
    /// A slab's pending slots.
    pending: u32,
    /// Position in its (layer, class) partial list, or NONE.
    partial_pos: u32,
    /// A segment's bytes handed out, written when it stops being its owner's current
    /// segment (the owner's `current` has it before).
    used: u32,
}

impl Chunk {
    fn free_count(&self) -> u32 {
        self.slots - self.live - self.pending
    }
}

#[derive(Clone, Debug, Default)]
struct LayerState {
    /// Slab chunks of this layer (open class) with at least one free slot.
    partial: Vec<ChunkId>,
    /// Empty private chunks of this layer.
    empty_private: Vec<ChunkId>,
}

/// A sequence's state in one layer (40 bytes: a row operation reads a sequence's layers
/// as one array).
#[derive(Clone, Copy, Debug)]
struct SeqLayer {
    /// Pages still reserved (at most `u32::MAX`: [`Pool::reserve`] refuses more).
    reserve: u32,
    /// Up to two of its pages in slab slots (NONE: none), the two last allocated in this
    /// layer while they stay there, the newer in `slab[1]`: decode allocates a row's pages
    /// while the previous row's are still open, then compresses those. Its other slab pages (a page kept
    /// BF16 once two more were allocated) are in [`Seq::in_slab`]; a decode row's
    /// allocation and compression never touch that list.
    slab: [PageId; 2],
    /// The segment new compressed pages go to (NONE before the first).
    current: ChunkId,
    /// Its bytes handed out.
    used: u32,
    /// An open slot its last compressed page left (NONE when none): its next page in
    /// this layer takes it instead of a slab slot once `spare_epoch` completed (decode
    /// alternates two slots per layer and touches no slab).
    spare_chunk: ChunkId,
    /// The spare's slot in `spare_chunk`.
    spare_slot: u32,
    /// The epoch after whose completion the spare may be written again.
    spare_epoch: Epoch,
}

impl SeqLayer {
    /// Whether the layer holds a spare slot that no read of its old page can still use:
    /// its epoch completed.
    #[inline(always)]
    fn spare_ready(&self, completed: Epoch) -> bool {
        self.spare_chunk != NONE && self.spare_epoch <= completed
    }
}

const FRESH_LAYER: SeqLayer = SeqLayer {
    reserve: 0,
    slab: [NONE; 2],
    current: NONE,
    used: 0,
    spare_chunk: NONE,
    spare_slot: 0,
    spare_epoch: 0,
};

/// A running sequence. Kept in [`Pool`]'s `store` by index (the map gives the index):
/// a released sequence's entry, its vectors' capacity with it, serves the next one.
#[derive(Clone, Debug, Default)]
struct Seq {
    id: SeqId,
    /// Per layer.
    lay: Vec<SeqLayer>,
    /// Its id blocks; the last one hands out the next id.
    blocks: Vec<u32>,
    /// Its pages in slab slots (open, or kept BF16) but those in its layers' `slab`, with
    /// their chunk and slot (the release frees them without reading the page table), in
    /// no order: page `p` is at `slab_pos[p]`; a page leaving its slab is swap-removed
    /// (O(1)).
    in_slab: Vec<(PageId, ChunkId, u32)>,
    /// Its segments, all layers: freed whole at release.
    segments: Vec<ChunkId>,
}

impl Seq {
    /// New page `page` of layer `l`, in a slab slot, goes into the layer's `slab`
    /// ([`place_slab`]).
    fn place_slab(
        &mut self,
        l: usize,
        page: PageId,
        entries: &[Slot],
        slab_pos: &mut [u32],
        open_div: OpenDiv,
    ) {
        place_slab(&mut self.lay[l].slab, page, &mut self.in_slab, entries, slab_pos, open_div);
    }

    /// Page `page` (of layer `l`) leaves its slab slot: out of its layer's `slab`, or
    /// swap-removed from `in_slab`.
    fn unlist_slab_page(&mut self, l: usize, page: PageId, slab_pos: &mut [u32]) {
        let sl = &mut self.lay[l];
        if let Some(held) = sl.slab.iter_mut().find(|p| **p == page) {
            *held = NONE;
            return;
        }
        let pos = slab_pos[page as usize] as usize;
        self.in_slab.swap_remove(pos);
        if let Some(&(moved, _, _)) = self.in_slab.get(pos) {
            slab_pos[moved as usize] = pos as u32;
        }
    }
}

#[derive(Clone, Debug)]
enum Retired {
    /// Slots of one slab word (`mask` bits of word `word`) freed in one epoch: the
    /// slots a prefill's compressions leave come back a word at a time.
    Slots {
        chunk: ChunkId,
        word: u32,
        mask: u64,
    },
    /// A released sequence's slab slots (`in_slab`'s entries, then its layers' `slab`
    /// pages and spares; the page, NONE for a spare, is not read): freed in order, a
    /// slab word's run of them at a time. Unlike [`Retired::Slots`] they stay counted
    /// `live` in their slabs until then (a release touches no slab per slot).
    SlotList(Vec<(PageId, ChunkId, u32)>),
    Segments(Vec<ChunkId>),
    Blocks(Vec<u32>),
}

#[derive(Clone, Debug)]
struct Pending {
    epoch: Epoch,
    what: Retired,
}

/// A change to the capacity test: `extra_need` more pages in `layer`, `own_loss` fewer
/// free open slots in `layer`, `shared_loss` fewer shared chunks.
#[derive(Clone, Copy, Debug, Default)]
struct Adjust {
    layer: usize,
    extra_need: u64,
    own_loss: u64,
    shared_loss: u64,
}

/// The allocator of a paged, compressed KV cache (seed 002, "Memory management").
///
/// * Memory is [`PoolConfig::chunks`] chunks of [`PoolConfig::chunk_bytes`]; a chunk in
///   use belongs to one layer and is either a **slab** of open-class slots (open pages,
///   and pages kept BF16) or a **segment** owned by one sequence, into which that
///   sequence's compressed pages of that layer are packed one after another.
/// * [`Pool::alloc`] gives a new page an open (BF16) slot; [`Pool::compress`] moves a
///   filled page into its sequence's segment, at the size class that holds its
///   compressed bytes; [`Pool::move_page`] relocates a full page; the page table
///   ([`Pool::entry`]) maps each page id to its location.
/// * A sequence's pages are freed together ([`Pool::release`]): its segments and its id
///   blocks whole, its slab pages as one list (their slabs are counted at the
///   reclamation, not at the release). The cost of a release is O(layers + segments +
///   id blocks), of its reclamation O(segments + id blocks + slab pages), not O(pages).
/// * Frees are stream-ordered: what is freed while the host prepares epoch `e`
///   (`e = last submitted + 1`) is reused only after [`Pool::complete`]`(e)`; a chunk
///   returns to its layer's private space or to the shared pool when it is free with
///   nothing pending. Nothing waits for the device.
/// * Reservations ([`Pool::reserve`]) hold open-class room in every layer for running
///   sequences' future pages; [`Pool::admissible_pages`] reports how many more pages fit
///   in every layer beyond them, for a scheduler's admission.
#[derive(Clone, Debug)]
pub struct Pool {
    cfg: PoolConfig,
    open: usize,
    open_bytes: u32,
    /// `offset / open_bytes` by a multiply.
    open_div: OpenDiv,
    open_spc: u64,
    chunks: Vec<Chunk>,
    /// Per chunk: NONE (free), a slab's class, or SEGMENT. A segment keeps its tag
    /// from the moment it is taken until it is taken again: its release and its
    /// reclamation write nothing per segment here (~400 scattered words a finished
    /// request), so a free or retired chunk may still read SEGMENT; the free lists and
    /// the pending queue say which ([`Pool::chunk_tag`], for reports). Compact: what
    /// the hot paths read, not the chunk structs.
    chunk_class: Vec<u32>,
    /// Free bitmaps of all slabs, `words` words per chunk (bit set = slot free and
    /// reusable): one flat array.
    free_bits: Vec<u64>,
    /// Bitmap words per chunk.
    words: usize,
    layers: Vec<LayerState>,
    shared_free: Vec<ChunkId>,
    /// The page table, by id.
    entries: Vec<Slot>,
    /// Per id block: the index in `store` of the sequence it belongs to (while in use).
    block_seq: Vec<u32>,
    /// By id: a page's index in its sequence's `in_slab` while it sits in a slab slot.
    slab_pos: Vec<u32>,
    /// Per layer: pages reserved for the running sequences' growth.
    reserved: Vec<u64>,
    /// Per layer: its free open slots plus its empty private chunks' open slots (what
    /// the admission test reads, kept compact beside `reserved`).
    room: Vec<u64>,
    /// Per id block: ids handed out (0 when free).
    block_used: Vec<u32>,
    free_blocks: Vec<u32>,
    /// Sequence id -> index in `store`.
    seqs: HashMap<SeqId, u32, SeqHash>,
    store: Vec<Seq>,
    /// Indices of `store` free for the next sequence.
    free_seqs: Vec<u32>,
    /// Emptied `in_slab` lists (their capacity), for the next sequences.
    free_lists: Vec<Vec<(PageId, ChunkId, u32)>>,
    /// [`Pool::admissible_pages`] as last computed, or `UNKNOWN` after a change of the
    /// counts it reads.
    admit: AdmitCache,
    pending: VecDeque<Pending>,
    pending_count: u64,
    reclaimed: u64,
    /// Pages of row calls that took the general path ([`Pool::row_fallbacks`]).
    row_fallbacks: u64,
    submitted: Epoch,
    completed: Epoch,
    trace: Option<Vec<String>>,
    changes: Option<Vec<Change>>,
}

impl Pool {
    /// Host bytes an *empty* pool of `cfg` allocates (its chunk records and bitmaps, its
    /// per-layer state and free lists), so that a reader of an untrusted configuration
    /// (a trace's first line, [`crate::trace`]) can refuse one before allocating it.
    /// What sequences and pages add later is [`Pool::host_bytes`]'s. Saturates instead
    /// of overflowing; `cfg` need not be valid.
    pub fn model_bytes(cfg: &PoolConfig) -> u64 {
        let chunks = u64::from(cfg.layers)
            .saturating_mul(u64::from(cfg.private_chunks))
            .saturating_add(u64::from(cfg.shared_chunks));
        let open = cfg.classes.open_bytes().max(1);
        let words = (cfg.chunk_bytes / u64::from(open)).div_ceil(64);
        let per_chunk = (std::mem::size_of::<Chunk>() as u64 + 4 + 4).saturating_add(words.saturating_mul(8));
        let per_layer = std::mem::size_of::<LayerState>() as u64 + 16;
        chunks.saturating_mul(per_chunk).saturating_add(u64::from(cfg.layers).saturating_mul(per_layer))
    }

    /// An estimate of the host bytes the pool holds now: [`Pool::model_bytes`] plus its
    /// page table, id blocks and sequence records by their capacity (a sequence record
    /// with its layer records, `layers x 40` bytes), without the trace and change logs.
    /// O(1): a replay of an untrusted trace checks it after every line.
    pub fn host_bytes(&self) -> u64 {
        let layers = self.cfg.layers as usize;
        let per_seq = std::mem::size_of::<Seq>() + layers * std::mem::size_of::<SeqLayer>();
        let grown = self.entries.capacity() * std::mem::size_of::<Slot>()
            + self.slab_pos.capacity() * 4
            + (self.block_seq.capacity() + self.block_used.capacity() + self.free_blocks.capacity()) * 4
            + self.store.capacity() * per_seq
            + self.seqs.capacity() * 16
            + self.pending.capacity() * 32;
        Pool::model_bytes(&self.cfg).saturating_add(grown as u64)
    }

    /// An empty pool: every chunk free, epoch 0 submitted and completed.
    ///
    /// # Errors
    /// As [`PoolConfig::validate`].
    pub fn new(cfg: PoolConfig) -> Result<Pool> {
        cfg.validate()?;
        let mut layers = vec![LayerState::default(); cfg.layers as usize];
        let mut chunks = Vec::with_capacity(cfg.chunks() as usize);
        for c in 0..cfg.chunks() {
            let home = if c < cfg.layers * cfg.private_chunks {
                let layer = c / cfg.private_chunks;
                layers[layer as usize].empty_private.push(c);
                ChunkHome::Private(layer)
            } else {
                ChunkHome::Shared
            };
            chunks.push(Chunk {
                home,
                layer: NONE,
                owner: 0,
                slots: 0,
                live: 0,
                pending: 0,
                partial_pos: NONE,
                used: 0,
            });
        }
        // Pop order: lowest chunk id first (deterministic, as a device replay needs).
        for l in &mut layers {
            l.empty_private.reverse();
        }
        let shared_free = (cfg.layers * cfg.private_chunks..cfg.chunks()).rev().collect();
        let open = cfg.classes.open();
        let open_spc = cfg.slots_per_chunk(open);
        let words = (open_spc as usize).div_ceil(64);
        Ok(Pool {
            free_bits: vec![0; chunks.len() * words],
            chunk_class: vec![NONE; chunks.len()],
            words,
            open,
            open_bytes: cfg.classes.open_bytes(),
            open_div: OpenDiv::new(cfg.classes.open_bytes()),
            open_spc: u64::from(open_spc),
            chunks,
            layers,
            shared_free,
            entries: Vec::new(),
            block_seq: Vec::new(),
            slab_pos: Vec::new(),
            reserved: vec![0; cfg.layers as usize],
            room: vec![u64::from(cfg.private_chunks) * u64::from(open_spc); cfg.layers as usize],
            block_used: Vec::new(),
            free_blocks: Vec::new(),
            seqs: HashMap::default(),
            store: Vec::new(),
            free_seqs: Vec::new(),
            free_lists: Vec::new(),
            admit: AdmitCache::default(),
            pending: VecDeque::new(),
            pending_count: 0,
            reclaimed: 0,
            row_fallbacks: 0,
            submitted: 0,
            completed: 0,
            trace: None,
            changes: None,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    // ----- epochs ------------------------------------------------------------------

    /// Records that the host submitted epoch `epoch` (a decode step's launches) to the
    /// stream. Work the host prepares after this call belongs to `epoch + 1`.
    ///
    /// # Errors
    /// [`Error::SubmitOrder`] unless `epoch` is after the last submitted;
    /// [`Error::EpochLimit`] for `Epoch::MAX`.
    pub fn submit(&mut self, epoch: Epoch) -> Result<()> {
        if epoch == Epoch::MAX {
            return Err(Error::EpochLimit { epoch });
        }
        if epoch <= self.submitted {
            return Err(Error::SubmitOrder { epoch, last: self.submitted });
        }
        self.submitted = epoch;
        self.log(|_| format!("submit {epoch}"));
        Ok(())
    }

    /// Records that epoch `epoch` completed on the device (observed through a CUDA event
    /// or a counter the device writes, polled, never waited on): slots, segments and id
    /// blocks freed for epochs up to `epoch` become reusable, and chunks left empty
    /// return to their home.
    ///
    /// # Errors
    /// [`Error::CompleteOrder`] unless `completed <= epoch <= submitted`.
    pub fn complete(&mut self, epoch: Epoch) -> Result<()> {
        if epoch < self.completed || epoch > self.submitted {
            return Err(Error::CompleteOrder { epoch, completed: self.completed, submitted: self.submitted });
        }
        self.completed = epoch;
        if self.pending.front().is_some_and(|p| p.epoch <= epoch) {
            self.admit.clear();
        }
        while self.pending.front().is_some_and(|p| p.epoch <= epoch) {
            let p = self.pending.pop_front().expect("front checked");
            match p.what {
                Retired::Slots { chunk, word, mask } => {
                    self.pending_count -= u64::from(mask.count_ones());
                    self.release_slots(chunk, word, mask, mask.count_ones(), false);
                }
                Retired::SlotList(mut list) => {
                    // Still counted live in their slabs (the release does not touch a
                    // slab per slot): freed here in one pass.
                    self.pending_count -= list.len() as u64;
                    let mut i = 0;
                    while let Some(&(_, chunk, slot)) = list.get(i) {
                        // A run's slots are distinct, so its count is its length (no
                        // popcount, which baseline x86-64 has no instruction for).
                        let (word, mut mask, run) = (slot / 64, 1u64 << (slot % 64), i);
                        i += 1;
                        while let Some(&(_, c, s)) = list.get(i)
                            && (c, s / 64) == (chunk, word)
                        {
                            mask |= 1 << (s % 64);
                            i += 1;
                        }
                        self.release_slots(chunk, word, mask, (i - run) as u32, true);
                    }
                    list.clear();
                    self.free_lists.push(list);
                }
                Retired::Segments(list) => {
                    self.pending_count -= list.len() as u64;
                    self.reclaimed += list.len() as u64;
                    let (per_layer, spc) = (self.cfg.private_chunks, self.open_spc);
                    let private = self.cfg.layers * per_layer;
                    // A private chunk's layer, `c / per_layer`, by a multiply (`m =
                    // ceil(2^64 / per_layer)`: exact for `c` and `per_layer` below 2^32;
                    // ~400 segments a release, a division each cost more than the rest).
                    let m = if per_layer > 1 { u64::MAX / u64::from(per_layer) + 1 } else { 0 };
                    let layer_of = |c: ChunkId| {
                        if per_layer > 1 {
                            ((u128::from(c) * u128::from(m)) >> 64) as usize
                        } else {
                            c as usize
                        }
                    };
                    // Their tags stay SEGMENT (see `chunk_class`).
                    let Pool { layers, room, shared_free, .. } = self;
                    for &c in &list {
                        if c < private {
                            let l = layer_of(c);
                            layers[l].empty_private.push(c);
                            room[l] += spc;
                        } else {
                            shared_free.push(c);
                        }
                    }
                }
                Retired::Blocks(list) => {
                    self.pending_count -= list.len() as u64;
                    self.free_blocks.extend(list);
                }
            }
        }
        self.log(|_| format!("complete {epoch}"));
        Ok(())
    }

    /// The last epoch submitted.
    pub fn submitted(&self) -> Epoch {
        self.submitted
    }

    /// Pages of row calls ([`Pool::alloc_row`], [`Pool::compress_pages`]) that took the
    /// general path, one page at a time, instead of the one-pass loop, since the pool was
    /// made: how often a scheduler's rows leave the decode step's common case (a fresh
    /// slab, segment or id block, a capacity test, an unknown page). A diagnostic; the
    /// pages and outcomes are the same either way.
    pub fn row_fallbacks(&self) -> u64 {
        self.row_fallbacks
    }

    /// The last epoch completed.
    pub fn completed(&self) -> Epoch {
        self.completed
    }
    // ----- admission ---------------------------------------------------------------

    /// Whether `reserved + n` pages (adjusted by `adj`) fit in every layer: each layer's
    /// shortfall beyond its free open slots and empty private chunks, in chunks, summed,
    /// within the free shared chunks.
    fn fits(&self, n: u64, adj: Adjust) -> bool {
        let spc = self.open_spc;
        let mut shared = self.shared_free.len() as u64;
        if shared < adj.shared_loss {
            return false;
        }
        shared -= adj.shared_loss;
        let mut needed = 0u64;
        for (i, (&room, &reserved)) in self.room.iter().zip(&self.reserved).enumerate() {
            let (extra, loss) = if i == adj.layer { (adj.extra_need, adj.own_loss) } else { (0, 0) };
            let need = reserved + n + extra;
            let own = room.saturating_sub(loss);
            if need > own {
                needed += (need - own).div_ceil(spc);
                if needed > shared {
                    return false;
                }
            }
        }
        true
    }

    /// How many new open (BF16) pages fit in every layer beyond the reservations of the
    /// running sequences: the largest `n` such that `n` more pages per layer can be
    /// reserved or allocated (seed 002: "the allocator computes how many new pages fit
    /// across all layers, and the scheduler admits requests based on that number").
    /// Pending slots (reads in flight) do not count. Exact: `n + 1` would not fit.
    ///
    /// Cached: a query with no change of the counts it reads since the last one (a decode
    /// step in which no request starts a page or finishes) costs a load.
    pub fn admissible_pages(&self) -> u64 {
        if let Some(n) = self.admit.get() {
            return n;
        }
        // Each layer's slack: its free open slots and empty private chunks' slots beyond
        // its reservations. `n` pages fit when the layers' shortfalls, in chunks, fit in
        // the free shared chunks (`fits`, without the adjustments).
        let spc = self.open_spc as i64;
        let shared = self.shared_free.len() as i64;
        // On the stack for up to 128 layers (a query per decode step allocates nothing).
        let (mut on_stack, mut on_heap) = ([0i64; 128], Vec::new());
        let slack: &mut [i64] = match on_stack.get_mut(..self.room.len()) {
            Some(s) => s,
            None => {
                on_heap.resize(self.room.len(), 0);
                &mut on_heap
            }
        };
        for ((s, &o), &r) in slack.iter_mut().zip(&self.room).zip(&self.reserved) {
            *s = o as i64 - r as i64;
        }
        let slack = &*slack;
        // Invariant: fits(lo) (the reservations fit), !fits(hi) (the layer of most slack
        // would need one more shared chunk than there are).
        let min_slack = slack.iter().copied().min().unwrap_or(0);
        let mut lo = min_slack.max(0);
        let max_slack = slack.iter().copied().max().unwrap_or(0);
        let mut hi = max_slack.max(0) + shared * spc + 1;
        // A shortfall in chunks, `ceil(d / spc)`, by a multiply (`m = ceil(2^64 / spc)`:
        // exact for dividends and divisor below 2^32; a division costs ~20x more). The
        // largest dividend is `hi - min_slack + spc - 1`. One slot per chunk has no such
        // `m` below 2^64 and takes the division (which is then the identity).
        let m = if spc > 1 { u64::MAX / spc as u64 + 1 } else { 0 };
        let small = spc > 1 && (hi - min_slack.min(0) + spc) < 1 << 32;
        let chunks = |d: i64| {
            let n = (d + spc - 1) as u64;
            if small { ((u128::from(n) * u128::from(m)) >> 64) as i64 } else { (n / spc as u64) as i64 }
        };
        let fits = |n: i64| slack.iter().map(|&s| chunks((n - s).max(0))).sum::<i64>() <= shared;
        // Where every layer is short (`n` at or past the most slack), `n` costs between
        // `(L n - sum) / spc` and that plus `L` chunks: a bracket `spc + 2` wide, which the
        // bisection closes in ~6 probes (without it, the answer's jump at a release or an
        // admission costs ~15).
        let (layers, sum) = (slack.len() as i64, slack.iter().sum::<i64>());
        if layers > 0 {
            let surely_fits = ((shared - layers) * spc + sum).div_euclid(layers);
            if surely_fits >= max_slack && surely_fits > lo {
                lo = surely_fits;
            }
            let never_fits = (shared * spc + sum).div_euclid(layers) + 1;
            if never_fits >= max_slack && never_fits < hi {
                hi = never_fits;
            }
        }
        // The answer moves little between two queries (a decode step's allocations and
        // frees): gallop from the last one, then bisect what is left.
        if let Some(h) = self.admit.hint().map(|h| h as i64).filter(|&h| h > lo && h < hi) {
            let mut step = 1;
            if fits(h) {
                lo = h;
                while lo + step < hi && fits(lo + step) {
                    lo += step;
                    step *= 2;
                }
                hi = hi.min(lo + step);
            } else {
                hi = h;
                while hi - step > lo && !fits(hi - step) {
                    hi -= step;
                    step *= 2;
                }
                lo = lo.max(hi - step);
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.admit.set(lo as u64);
        lo as u64
    }

    /// How many new requests of `prompt_tokens + output_tokens` tokens fit, each counted
    /// at its whole length in open (BF16) pages per layer, beyond the reservations of the
    /// running sequences.
    pub fn admissible_requests(&self, prompt_tokens: u64, output_tokens: u64) -> u64 {
        let pages = self.cfg.pages_for_tokens(prompt_tokens.saturating_add(output_tokens)).max(1);
        self.admissible_pages() / pages
    }

    /// Reserves `pages` open pages in every layer for sequence `seq` (created if new):
    /// the pages its remaining tokens will need. [`Pool::alloc`] for `seq` consumes them.
    ///
    /// # Errors
    /// [`Error::ReservationTooLarge`] when more than [`Pool::admissible_pages`];
    /// [`Error::ReservationPastLimit`] when `seq`'s reservation in a layer would pass
    /// `u32::MAX` pages.
    pub fn reserve(&mut self, seq: SeqId, pages: u64) -> Result<()> {
        let held = self.seqs.get(&seq).map_or(0, |&si| {
            self.store[si as usize].lay.iter().map(|l| u64::from(l.reserve)).max().unwrap_or(0)
        });
        let r = if held.saturating_add(pages) > u64::from(u32::MAX) {
            Err(Error::ReservationPastLimit { seq, held, requested: pages })
        } else if self.fits(pages, Adjust::default()) {
            let si = match self.seqs.get(&seq) {
                Some(&si) => si as usize,
                None => self.new_seq(seq),
            };
            for (total, sl) in self.reserved.iter_mut().zip(&mut self.store[si].lay) {
                *total += pages;
                sl.reserve += pages as u32;
            }
            self.admit.clear();
            Ok(())
        } else {
            Err(Error::ReservationTooLarge { requested: pages, admissible: self.admissible_pages() })
        };
        self.log(|_| format!("reserve {seq} {pages} => {}", ok_or(&r, |_| "ok".into())));
        r
    }

    /// A fresh entry of `store` for `seq` (a released one's when there is one).
    fn new_seq(&mut self, seq: SeqId) -> usize {
        let layers = self.cfg.layers as usize;
        let si = match self.free_seqs.pop() {
            Some(si) => si as usize,
            None => {
                self.store.push(Seq::default());
                self.store.len() - 1
            }
        };
        let s = &mut self.store[si];
        if s.in_slab.capacity() == 0 {
            s.in_slab = self.free_lists.pop().unwrap_or_default();
        }
        s.id = seq;
        s.lay.clear();
        s.lay.resize(layers, FRESH_LAYER);
        self.seqs.insert(seq, si as u32);
        si
    }

    /// The index of `seq` in `store`.
    fn seq_index(&self, seq: SeqId) -> Result<usize> {
        self.seqs.get(&seq).map(|&si| si as usize).ok_or(Error::UnknownSeq { seq })
    }

    /// Pages per layer still reserved for `seq` (`layers` entries, a new `Vec` per call:
    /// the per-layer counts live in the sequence's row records), or `None` for an unknown
    /// sequence.
    pub fn reserved(&self, seq: SeqId) -> Option<Vec<u64>> {
        let si = self.seq_index(seq).ok()?;
        Some(self.store[si].lay.iter().map(|l| u64::from(l.reserve)).collect())
    }

    /// The fewest pages still reserved for `seq` in any layer (a row of
    /// [`Pool::alloc_row`] is covered by its reservation when this is at least 1), or
    /// `None` for an unknown sequence.
    pub fn min_reserved(&self, seq: SeqId) -> Option<u64> {
        let si = self.seq_index(seq).ok()?;
        self.store[si].lay.iter().map(|l| u64::from(l.reserve)).min()
    }

    // ----- pages -------------------------------------------------------------------

    /// A new open (BF16) page of `seq` in `layer`, in a slab slot: from `seq`'s
    /// reservation in that layer if it has one left, else from room beyond every
    /// reservation. Its id is the next of `seq`'s id blocks.
    ///
    /// # Errors
    /// [`Error::UnknownSeq`] (reserve first, even 0 pages), [`Error::LayerOutOfRange`],
    /// [`Error::NoCapacity`] without a reservation and without room.
    pub fn alloc(&mut self, seq: SeqId, layer: u32) -> Result<PageId> {
        let r = self.check_layer(layer).and_then(|()| self.seq_index(seq));
        let r = r.and_then(|si| self.alloc_at(si, layer));
        self.after_alloc(seq, layer, &r);
        r
    }

    /// A decode step's row: one new open page of `seq` in every layer, layer 0 first,
    /// written to `pages[layer]` (`pages.len()` must be the layer count). The same as
    /// [`Pool::alloc`] for each layer in turn (the same pages, trace lines and
    /// [`Change`]s) with one lookup of the sequence, whose per-layer state is one array,
    /// and the decode step's common layers (a spare slot, or a reservation and a partial
    /// slab) in one loop without a per-page call: what a serving stack's scheduler calls
    /// when a request's next token starts a page (seed 002, "Memory management").
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] (nothing allocated), [`Error::UnknownSeq`], or a layer's
    /// [`Error::NoCapacity`]: the row stops there, the pages of the layers before it stay
    /// allocated (as with the loop of [`Pool::alloc`]). A caller that checked
    /// [`Pool::min_reserved`] `>= 1` or [`Pool::admissible_pages`] `>= 1` first never
    /// sees it.
    pub fn alloc_row(&mut self, seq: SeqId, pages: &mut [PageId]) -> Result<()> {
        let layers = self.cfg.layers;
        if pages.len() != layers as usize {
            return Err(Error::LengthMismatch { what: "pages", got: pages.len(), expected: layers as usize });
        }
        let si = self.seq_index(seq);
        if let Ok(si) = si {
            self.touch_row(si);
        }
        self.alloc_row_from(seq, si, 0, pages)
    }

    /// Layers `layer..` of [`Pool::alloc_row`] (`pages.len()` is the layer count).
    fn alloc_row_from(
        &mut self,
        seq: SeqId,
        si: Result<usize>,
        mut layer: usize,
        pages: &mut [PageId],
    ) -> Result<()> {
        let recording = self.recording();
        while layer < pages.len() {
            // The common layers in one pass, then one layer by the general path.
            if let Ok(si) = si {
                let done = self.alloc_run(si, layer, pages);
                if recording {
                    for (l, &page) in pages.iter().enumerate().take(done).skip(layer) {
                        self.after_alloc(seq, l as u32, &Ok(page));
                    }
                }
                layer = done;
                if layer == pages.len() {
                    break;
                }
            }
            self.row_fallbacks += 1;
            let r = match si {
                Ok(si) => self.alloc_at(si, layer as u32),
                Err(ref e) => Err(e.clone()),
            };
            if recording {
                self.after_alloc(seq, layer as u32, &r);
            }
            pages[layer] = r?;
            layer += 1;
        }
        Ok(())
    }

    /// Layers `from..` of a row of `store[si]`, in order, while each is the decode step's
    /// common case: room in the sequence's last id block, and the layer's spare slot
    /// ready, or a reservation and a partial slab. Then [`Pool::alloc_at`] takes the spare
    /// (or a slot of the last partial slab), consumes a reservation if any, and the next
    /// id; this does exactly that (no capacity test, no new block or slab), writes the
    /// pages to `pages` and returns the first layer it did not do. One pass over the
    /// sequence's layers with the pool's arrays at hand (no per-page call). Row calls
    /// only: the single calls take the general path, and the property tests compare the
    /// two.
    fn alloc_run(&mut self, si: usize, from: usize, pages: &mut [PageId]) -> usize {
        // Slices and values in locals (see `compress_run`).
        let Pool {
            store,
            entries,
            block_used,
            reserved,
            layers,
            chunks,
            free_bits,
            words,
            room,
            slab_pos,
            admit,
            ..
        } = self;
        let (completed, open_bytes, open_div, words) =
            (self.completed, self.open_bytes, self.open_div, *words);
        let (entries, slab_pos, reserved, room) =
            (&mut entries[..], &mut slab_pos[..], &mut reserved[..], &mut room[..]);
        let (layers, chunks, free_bits) = (&mut layers[..], &mut chunks[..], &mut free_bits[..]);
        let Seq { lay, in_slab, blocks, .. } = &mut store[si];
        let Some(&block) = blocks.last() else { return from };
        let lay = &mut lay[..];
        let mut used = block_used[block as usize];
        let mut l = from;
        while l < pages.len() && used < ID_BLOCK {
            let sl = &mut lay[l];
            let (chunk, slot) = if sl.spare_ready(completed) {
                (std::mem::replace(&mut sl.spare_chunk, NONE), sl.spare_slot)
            } else if sl.reserve > 0
                && let Some(&c) = layers[l].partial.last()
            {
                room[l] -= 1;
                admit.clear();
                (c, take_partial(c, words, free_bits, chunks, &mut layers[l].partial))
            } else {
                break;
            };
            if sl.reserve > 0 {
                sl.reserve -= 1;
                reserved[l] -= 1;
                admit.clear();
            }
            let page = block * ID_BLOCK + used;
            used += 1;
            entries[page as usize] = Slot::open(chunk, slot * open_bytes, l as u32);
            place_slab(&mut sl.slab, page, in_slab, entries, slab_pos, open_div);
            pages[l] = page;
            l += 1;
        }
        block_used[block as usize] = used;
        l
    }

    /// Whether trace lines or [`Change`]s are being recorded.
    fn recording(&self) -> bool {
        self.trace.is_some() || self.changes.is_some()
    }

    /// A prefill's pages of one layer: for each `bytes[i]`, a new page of `seq` in
    /// `layer` ([`Pool::alloc`]) that fills and compresses to `bytes[i]` at once
    /// ([`Pool::compress`]); then, with `open_tail`, one more open page (the prompt's
    /// partial last page). Ids go to `pages` (`bytes.len() + open_tail` of them), outcomes
    /// to `out` (`bytes.len()`). The same pages, trace lines and [`Change`]s as that loop
    /// of calls, with one lookup of the sequence.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] (nothing done); else as [`Pool::alloc`] and
    /// [`Pool::compress`]: it stops at the first error, what was done before stays.
    pub fn prefill_layer(
        &mut self,
        seq: SeqId,
        layer: u32,
        bytes: &[u32],
        open_tail: bool,
        pages: &mut [PageId],
        out: &mut [CompressOutcome],
    ) -> Result<()> {
        let n = bytes.len() + usize::from(open_tail);
        if pages.len() != n {
            return Err(Error::LengthMismatch { what: "pages", got: pages.len(), expected: n });
        }
        if out.len() != bytes.len() {
            return Err(Error::LengthMismatch { what: "out", got: out.len(), expected: bytes.len() });
        }
        let si = self.check_layer(layer).and_then(|()| self.seq_index(seq));
        for (i, page) in pages.iter_mut().enumerate() {
            let r = si.clone().and_then(|si| self.alloc_at(si, layer));
            self.after_alloc(seq, layer, &r);
            *page = r?;
            if let Some(&b) = bytes.get(i) {
                let r = self.compress_inner(*page, b);
                self.after_compress(*page, b, &r);
                out[i] = r?;
            }
        }
        Ok(())
    }

    /// Loads one word of each cache line a row of `store[si]` will touch (its layers'
    /// state, the page table entries of the ids it will take, the layers' reservation
    /// counts) in one tight loop, so that their misses overlap
    /// instead of coming one at a time inside the row's work.
    fn touch_row(&self, si: usize) {
        let s = &self.store[si];
        let mut acc = touch(&s.lay, |l| l.spare_chunk) ^ touch(&self.reserved, |&r| r as u32);
        if let Some(&b) = s.blocks.last() {
            let (first, n) = (b * ID_BLOCK + self.block_used[b as usize], self.cfg.layers);
            if self.block_used[b as usize] + n <= ID_BLOCK {
                let ids = first as usize..(first + n) as usize;
                acc ^= touch(&self.entries[ids], |e| e.layer);
            }
        }
        std::hint::black_box(acc);
    }

    /// A hint before a decode step's rows: loads one word of each cache line the next
    /// [`Pool::alloc_row`] and [`Pool::compress_pages`] of each sequence in `seqs` will
    /// touch (the sequence's record, layer states and the tail of its slab list, the page
    /// table entries and slab positions of the ids its row will take and of its previous
    /// row's, the id block's counts; per layer the reservation counts and the last partial slab's record and
    /// first bitmap word), in phases of independent loads over all the sequences, so that
    /// the step's misses overlap instead of coming one row at a time. A scheduler calls it
    /// once per step with the requests whose next token starts a page, before their row
    /// calls. Changes nothing (no trace line, no [`Change`]): the pool after it is the
    /// pool before it. Unknown sequences are skipped. Cost: O(`seqs.len()` x layers /
    /// 4 + layers) loads.
    pub fn touch_rows(&self, seqs: &[SeqId]) {
        const BATCH: usize = 32;
        if seqs.is_empty() {
            return;
        }
        let layers = self.cfg.layers as usize;
        let mut acc = touch(&self.reserved, |&r| r as u32) ^ touch(&self.room, |&r| r as u32);
        for ls in &self.layers {
            if let Some(&c) = ls.partial.last() {
                acc ^= self.chunks[c as usize].live;
                acc ^= self.free_bits[c as usize * self.words] as u32;
            }
        }
        for part in seqs.chunks(BATCH) {
            // Phase 1: the map lookups (independent across sequences).
            let mut si = [NONE as usize; BATCH];
            for (k, seq) in part.iter().enumerate() {
                if let Some(&i) = self.seqs.get(seq) {
                    si[k] = i as usize;
                }
            }
            let si = &si[..part.len()];
            // Phase 2: each sequence's record and its last id block.
            let mut block = [NONE; BATCH];
            for (k, &i) in si.iter().enumerate() {
                if let Some(&b) = self.store.get(i).and_then(|s| s.blocks.last()) {
                    block[k] = b;
                }
            }
            // Phase 3: the layer states and the blocks' counts.
            let mut used = [0u32; BATCH];
            for (k, &i) in si.iter().enumerate() {
                if let Some(s) = self.store.get(i) {
                    acc ^= touch(&s.lay, |l| l.spare_chunk);
                    acc ^= s.in_slab.last().map_or(0, |e| e.2);
                }
                if let Some(&u) = self.block_used.get(block[k] as usize) {
                    used[k] = u;
                    acc ^= self.block_seq[block[k] as usize];
                }
            }
            // Phase 4: the entries (and slab positions) of the previous row's ids and the
            // next row's, in the last block (a row's ids are consecutive).
            for (k, &b) in block[..part.len()].iter().enumerate() {
                if b == NONE {
                    continue;
                }
                let base = (b * ID_BLOCK) as usize;
                let lo = base + (used[k] as usize).saturating_sub(layers);
                let hi = base + (used[k] as usize + layers).min(ID_BLOCK as usize);
                if let (Some(e), Some(p)) = (self.entries.get(lo..hi), self.slab_pos.get(lo..hi)) {
                    acc ^= touch(e, |e| e.layer) ^ touch(p, |&p| p);
                }
            }
        }
        std::hint::black_box(acc);
    }

    fn after_alloc(&mut self, seq: SeqId, layer: u32, r: &Result<PageId>) {
        self.log(|pool| {
            format!("alloc {seq} {layer} => {}", ok_or(r, |&p| format!("{p} {}", pool.loc_text(p))))
        });
        if let (&Ok(page), true) = (r, self.changes.is_some()) {
            let at = self.location(self.entries[page as usize]);
            self.changes.as_mut().expect("checked").push(Change::Alloc { page, at });
        }
    }

    fn alloc_at(&mut self, si: usize, layer: u32) -> Result<PageId> {
        let l = layer as usize;
        let sl = self.store[si].lay[l];
        let reserved = sl.reserve > 0;
        // The sequence's spare slot of this layer, once no read of its old page can be in
        // flight, is room it already holds.
        let spare = sl.spare_ready(self.completed);
        if !spare && !reserved && !self.fits(0, Adjust { layer: l, extra_need: 1, ..Adjust::default() }) {
            return Err(Error::NoCapacity { layer });
        }
        let (chunk, slot) = if spare {
            (sl.spare_chunk, sl.spare_slot)
        } else {
            self.take_slot(l).ok_or(Error::NoCapacity { layer })?
        };
        let s = &mut self.store[si];
        if spare {
            s.lay[l].spare_chunk = NONE;
        }
        if reserved {
            s.lay[l].reserve -= 1;
            self.reserved[l] -= 1;
            self.admit.clear();
        }
        // The next id of the sequence's last block, or a new block.
        let block = match s.blocks.last() {
            Some(&b) if self.block_used[b as usize] < ID_BLOCK => b,
            _ => {
                let b = self.free_blocks.pop().unwrap_or_else(|| {
                    let b = self.block_used.len() as u32;
                    self.block_used.push(0);
                    self.block_seq.push(NONE);
                    let ids = self.entries.len() + ID_BLOCK as usize;
                    self.entries.resize(ids, Slot::default());
                    self.slab_pos.resize(ids, NONE);
                    b
                });
                s.blocks.push(b);
                self.block_seq[b as usize] = si as u32;
                b
            }
        };
        let page = block * ID_BLOCK + self.block_used[block as usize];
        self.block_used[block as usize] += 1;
        self.entries[page as usize] = Slot::open(chunk, slot * self.open_bytes, layer);
        s.place_slab(l, page, &self.entries, &mut self.slab_pos, self.open_div);
        Ok(page)
    }

    /// An open page has filled and compresses to `compressed_bytes`: it moves into its
    /// sequence's current segment of its layer at the smallest class that holds them (a
    /// new segment when that one is full, if a chunk can be taken without breaking a
    /// reservation); else it stays BF16 in place ([`CompressOutcome::Kept`]). Its open
    /// slot is freed for the open epoch.
    ///
    /// # Errors
    /// [`Error::UnknownPage`], [`Error::NotOpen`], [`Error::ZeroCompressedBytes`].
    pub fn compress(&mut self, page: PageId, compressed_bytes: u32) -> Result<CompressOutcome> {
        let r = self.compress_inner(page, compressed_bytes);
        self.after_compress(page, compressed_bytes, &r);
        r
    }

    /// [`Pool::compress`] of `pages[i]` to `bytes[i]` for each `i` in order, outcomes in
    /// `out[i]`: a decode step's row (the pages a request's last token filled, one per
    /// layer) or a prefill's pages. The same pages, trace lines and [`Change`]s as the
    /// loop; the decode step's common pages (kept BF16, or packed into the current
    /// segment) in one loop over a run of pages of one sequence, without a per-page call.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] (nothing done) unless the three lengths agree; else
    /// as [`Pool::compress`]: it stops at the first error, the pages before it stay
    /// compressed.
    pub fn compress_pages(
        &mut self,
        pages: &[PageId],
        bytes: &[u32],
        out: &mut [CompressOutcome],
    ) -> Result<()> {
        for (what, got) in [("bytes", bytes.len()), ("out", out.len())] {
            if got != pages.len() {
                return Err(Error::LengthMismatch { what, got, expected: pages.len() });
            }
        }
        // The pages' entries, loaded together first (see `touch_row`).
        let mut acc = 0;
        for &p in pages {
            if let Some(e) = self.entries.get(p as usize) {
                acc ^= e.layer;
            }
        }
        std::hint::black_box(acc);
        let recording = self.recording();
        let mut i = 0;
        while i < pages.len() {
            // The common pages in one pass, then one page by the general path.
            let done = self.compress_run(i, pages, bytes, out);
            if recording {
                for j in i..done {
                    self.after_compress(pages[j], bytes[j], &Ok(out[j]));
                }
            }
            i = done;
            if i == pages.len() {
                break;
            }
            self.row_fallbacks += 1;
            let r = self.compress_inner(pages[i], bytes[i]);
            if recording {
                self.after_compress(pages[i], bytes[i], &r);
            }
            out[i] = r?;
            i += 1;
        }
        Ok(())
    }

    /// A decode step's page boundary for `seq` in one call: its next row allocated (one
    /// new open page per layer, written to `next`) and the row its last token filled
    /// (`filled[l]`, the page of layer `l`, as [`Pool::alloc_row`] gave it) compressed to
    /// `bytes[l]`, outcomes in `out[l]`. The same pages, outcomes, trace lines and
    /// [`Change`]s as [`Pool::alloc_row`]`(seq, next)` followed by
    /// [`Pool::compress_pages`]`(filled, bytes, out)`, the allocations first (so that a
    /// compression cannot take the room they need), but layer by layer in one pass over
    /// the sequence's layers where both are the decode step's common case (a spare slot
    /// or a reservation and a partial slab; the page kept BF16 or packed into the current
    /// segment): the pool's state per page is read once, where the two calls read it
    /// twice (seed 002, "Memory management").
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless `next` has the layer count and `bytes` and `out`
    /// have `filled`'s length (nothing done); else as the two calls: an allocation's error
    /// leaves the row's earlier pages allocated and nothing compressed, a compression's
    /// leaves every page allocated and the pages before it compressed.
    pub fn advance_row(
        &mut self,
        seq: SeqId,
        filled: &[PageId],
        bytes: &[u32],
        out: &mut [CompressOutcome],
        next: &mut [PageId],
    ) -> Result<()> {
        let layers = self.cfg.layers as usize;
        if next.len() != layers {
            return Err(Error::LengthMismatch { what: "next", got: next.len(), expected: layers });
        }
        for (what, got) in [("bytes", bytes.len()), ("out", out.len())] {
            if got != filled.len() {
                return Err(Error::LengthMismatch { what, got, expected: filled.len() });
            }
        }
        let si = self.seq_index(seq);
        let done = match si {
            Ok(si) if filled.len() == layers => self.advance_run(si, filled, bytes, out, next),
            _ => 0,
        };
        if done == 0 {
            self.alloc_row(seq, next)?;
            return self.compress_pages(filled, bytes, out);
        }
        // Layers `..done` are done; the rest as the two calls do them, the records of the
        // first layers in the two calls' order (their allocations, then the rest's, then
        // their compressions, then the rest's). The common compressions done touched
        // only their own pages and layers, which the rest's operations do not read.
        if self.recording() {
            for (l, &page) in next.iter().enumerate().take(done) {
                self.after_alloc(seq, l as u32, &Ok(page));
            }
        }
        self.alloc_row_from(seq, si, done, next)?;
        if self.recording() {
            for l in 0..done {
                self.after_compress(filled[l], bytes[l], &Ok(out[l]));
            }
        }
        if done == layers {
            return Ok(());
        }
        self.compress_pages(&filled[done..], &bytes[done..], &mut out[done..])
    }

    /// Layers `..` of [`Pool::advance_row`] while each is the common case for both its
    /// allocation (as [`Pool::alloc_run`]) and its compression (as
    /// [`Pool::compress_run`]); returns the first layer it did not do, 0 unless every
    /// layer's allocation is common (then no allocation of the row can fail, and a layer
    /// done never has to be undone). A layer's compression is decided before its
    /// allocation changes anything, from the state the allocation leaves (its spare slot
    /// taken or not, its reservation one less).
    fn advance_run(
        &mut self,
        si: usize,
        filled: &[PageId],
        bytes: &[u32],
        out: &mut [CompressOutcome],
        next: &mut [PageId],
    ) -> usize {
        let Pool {
            store,
            entries,
            block_used,
            reserved,
            layers,
            chunks,
            free_bits,
            words,
            room,
            slab_pos,
            admit,
            cfg,
            ..
        } = self;
        let (completed, epoch, words) = (self.completed, self.submitted + 1, *words);
        let (open, open_bytes, open_div) = (self.open, self.open_bytes, self.open_div);
        let (class_bytes_of, chunk_bytes, tail_percent) =
            (cfg.classes.bytes(), cfg.chunk_bytes, cfg.tail_fill_percent);
        let (entries, slab_pos, reserved, room) =
            (&mut entries[..], &mut slab_pos[..], &mut reserved[..], &mut room[..]);
        let (layers, chunks, free_bits) = (&mut layers[..], &mut chunks[..], &mut free_bits[..]);
        let Seq { lay, in_slab, blocks, .. } = &mut store[si];
        let lay = &mut lay[..];
        let Some(&block) = blocks.last() else { return 0 };
        let used = block_used[block as usize];
        if used as usize + lay.len() > ID_BLOCK as usize {
            return 0;
        }
        // The row's ids: layer `l`'s is `first + l`.
        let first = block * ID_BLOCK + used;
        for (sl, ls) in lay.iter().zip(layers.iter()) {
            if !sl.spare_ready(completed) && (sl.reserve == 0 || ls.partial.is_empty()) {
                return 0;
            }
        }
        // Whether a count the admission query reads changed (its cache is cleared then).
        let mut counts_changed = false;
        // The layers' records side by side (one bounds check for the row, not per array).
        let row = lay
            .iter_mut()
            .zip(layers.iter_mut())
            .zip(reserved.iter_mut().zip(room.iter_mut()))
            .zip(filled.iter().zip(bytes))
            .zip(out.iter_mut().zip(next.iter_mut()));
        let mut done = 0;
        for ((((sl, ls), (reserved_l, room_l)), (&old, &content)), (out_l, next_l)) in row {
            let Some(&e) = entries.get(old as usize) else { break };
            if sl.slab[1] != old || !e.is_open() || content == 0 {
                break;
            }
            // The compression, as the allocation will leave the layer.
            let (spare, reserve_after) = (sl.spare_ready(completed), sl.reserve.saturating_sub(1));
            let class = cfg.classes.fit(content).unwrap_or(open);
            let packed = if class == open {
                None
            } else {
                let class_bytes = class_bytes_of[class];
                if sl.current != NONE && u64::from(sl.used) + u64::from(class_bytes) <= chunk_bytes {
                    if sl.spare_chunk != NONE && !spare {
                        break; // its old slot would be retired, not kept as the spare
                    }
                    Some(class_bytes)
                } else if tail_keeps(chunk_bytes, tail_percent, reserve_after, class_bytes) {
                    None
                } else {
                    break; // a fresh segment
                }
            };
            // The allocation (every layer's is common: checked above).
            let (chunk, slot) = if spare {
                (std::mem::replace(&mut sl.spare_chunk, NONE), sl.spare_slot)
            } else {
                let c = *ls.partial.last().expect("checked: a partial slab");
                *room_l -= 1;
                counts_changed = true;
                (c, take_partial(c, words, free_bits, chunks, &mut ls.partial))
            };
            if sl.reserve > 0 {
                sl.reserve -= 1;
                *reserved_l -= 1;
                counts_changed = true;
            }
            let page = first + done as u32;
            entries[page as usize] = Slot::open(chunk, slot * open_bytes, done as u32);
            place_slab(&mut sl.slab, page, in_slab, entries, slab_pos, open_div);
            *next_l = page;
            // The compression: `old` is now the layer's older slab page (`slab[0]`).
            match packed {
                None => (entries[old as usize], *out_l) = (e.kept(content), CompressOutcome::Kept),
                Some(class_bytes) => {
                    let packing = (content, class_bytes, epoch, open_bytes, open_div);
                    (entries[old as usize], *out_l) = pack_in_segment(sl, 0, old, e, packing);
                }
            }
            done += 1;
        }
        if counts_changed {
            admit.clear();
        }
        block_used[block as usize] = used + done as u32;
        done
    }

    fn after_compress(&mut self, page: PageId, compressed_bytes: u32, r: &Result<CompressOutcome>) {
        self.log(|_| {
            format!(
                "compress {page} {compressed_bytes} => {}",
                ok_or(r, |o| match o {
                    CompressOutcome::Moved(m) => format!("moved {}", loc_text(m.to)),
                    CompressOutcome::Kept => "kept".into(),
                })
            )
        });
        if let (&Ok(CompressOutcome::Moved(m)), Some(c)) = (r, self.changes.as_mut()) {
            c.push(Change::Move(m));
        }
    }

    /// `pages[from..]` compressed to `bytes[..]` in order, outcomes to `out`, while each is
    /// the decode step's common case: the page is live and open, and either stays BF16
    /// (its bytes do not fit below the open class, or its sequence's current segment of
    /// the layer has no room for them and the tail rule keeps the page), or moves into
    /// that segment, which has room, while the page is in its layer's `slab` and the
    /// layer has no spare slot (its slot becomes the spare). Then this does what
    /// [`Pool::compress`] does; it returns the first index it did not do (a fresh segment,
    /// a spare already held, an error). One pass with the pool's arrays at hand; row
    /// calls only, as [`Pool::alloc_run`].
    fn compress_run(
        &mut self,
        from: usize,
        pages: &[PageId],
        bytes: &[u32],
        out: &mut [CompressOutcome],
    ) -> usize {
        // Slices and values in locals: stores through one slice do not make the others'
        // bounds and pointers reload.
        let Pool { store, entries, block_used, block_seq, cfg, .. } = self;
        let (store, entries, block_used, block_seq) =
            (&mut store[..], &mut entries[..], &block_used[..], &block_seq[..]);
        let class_bytes_of = cfg.classes.bytes();
        let (chunk_bytes, tail_percent) = (cfg.chunk_bytes, cfg.tail_fill_percent);
        let (open, open_bytes, open_div, epoch) =
            (self.open, self.open_bytes, self.open_div, self.submitted + 1);
        // The row's sequence's layers (pages of another sequence go to the general path).
        let Some(&first) = pages.get(from) else { return from };
        let si = match block_used.get((first / ID_BLOCK) as usize) {
            Some(&used) if first % ID_BLOCK < used => block_seq[(first / ID_BLOCK) as usize],
            _ => return from,
        };
        let lay = &mut store[si as usize].lay[..];
        for i in from..pages.len() {
            let (page, content) = (pages[i], bytes[i]);
            let b = (page / ID_BLOCK) as usize;
            if block_used.get(b).is_none_or(|&used| page % ID_BLOCK >= used) || block_seq[b] != si {
                return i;
            }
            let e = &mut entries[page as usize];
            if !e.is_open() || content == 0 {
                return i;
            }
            let kept = e.kept(content);
            let class = cfg.classes.fit(content).unwrap_or(open);
            if class == open {
                (*e, out[i]) = (kept, CompressOutcome::Kept);
                continue;
            }
            let class_bytes = class_bytes_of[class];
            let sl = &mut lay[e.layer as usize];
            let (chunk, offset) = (sl.current, sl.used);
            if chunk == NONE || u64::from(offset) + u64::from(class_bytes) > chunk_bytes {
                if !tail_keeps(chunk_bytes, tail_percent, sl.reserve, class_bytes) {
                    return i; // a fresh segment
                }
                (*e, out[i]) = (kept, CompressOutcome::Kept);
                continue;
            }
            let held = if sl.slab[0] == page { 0 } else { 1 };
            if sl.spare_chunk != NONE || sl.slab[held] != page {
                return i;
            }
            let packing = (content, class_bytes, epoch, open_bytes, open_div);
            (*e, out[i]) = pack_in_segment(sl, held, page, *e, packing);
        }
        pages.len()
    }

    fn compress_inner(&mut self, page: PageId, compressed_bytes: u32) -> Result<CompressOutcome> {
        if !self.live(page) {
            return Err(Error::UnknownPage { page });
        }
        let e = &mut self.entries[page as usize];
        if !e.is_open() {
            return Err(Error::NotOpen { page });
        }
        if compressed_bytes == 0 {
            return Err(Error::ZeroCompressedBytes { page });
        }
        (e.at, e.content) = (e.offset() | BF16, compressed_bytes);
        let class = self.cfg.classes.fit(compressed_bytes).unwrap_or(self.open);
        if class == self.open {
            return Ok(CompressOutcome::Kept);
        }
        let si = self.block_seq[(page / ID_BLOCK) as usize] as usize;
        match self.relocate(si, page, class, NONE, true) {
            Some(m) => Ok(CompressOutcome::Moved(m)),
            None => Ok(CompressOutcome::Kept),
        }
    }

    /// Moves a full page into its sequence's current segment of its layer (a new segment
    /// when that one is full or is the page's own chunk): a compressed page is copied, a
    /// page kept BF16 ([`PageFormat::Bf16`]) is compressed into the class of its
    /// compressed size, or copied as it is when that is the open class. The old slot is
    /// freed for the open epoch (a slab slot), or left as a hole until the sequence is
    /// released (a segment's).
    ///
    /// # Errors
    /// [`Error::UnknownPage`], [`Error::OpenPage`], [`Error::NoCapacity`] when the
    /// segment has no room and no chunk can be taken without breaking a reservation.
    pub fn move_page(&mut self, page: PageId) -> Result<Move> {
        let r = self.move_inner(page);
        self.log(|_| format!("move {page} => {}", ok_or(&r, |m| loc_text(m.to))));
        if let (&Ok(m), Some(c)) = (&r, self.changes.as_mut()) {
            c.push(Change::Move(m));
        }
        r
    }

    fn move_inner(&mut self, page: PageId) -> Result<Move> {
        if !self.live(page) {
            return Err(Error::UnknownPage { page });
        }
        let e = self.entries[page as usize];
        let content = e.format().content_bytes().ok_or(Error::OpenPage { page })?;
        let class = self.cfg.classes.fit(content).unwrap_or(self.open);
        let si = self.block_seq[(page / ID_BLOCK) as usize] as usize;
        let slab = self.chunk_class[e.chunk as usize] != SEGMENT;
        self.relocate(si, page, class, e.chunk, slab).ok_or(Error::NoCapacity { layer: e.layer })
    }

    /// Moves full page `page` (of sequence `store[si]`) to a `class` extent of its
    /// sequence's segment (not in chunk `avoid`): `None` when no segment room can be had.
    /// `from_slab`: whether the page sits in a slab slot (an open page always does).
    fn relocate(
        &mut self,
        si: usize,
        page: PageId,
        class: usize,
        avoid: ChunkId,
        from_slab: bool,
    ) -> Option<Move> {
        let e = self.entries[page as usize];
        let (l, from) = (e.layer as usize, self.location(e));
        let bytes = self.cfg.classes.bytes()[class];
        let sl = self.store[si].lay[l];
        let (current, used) = (sl.current, sl.used);
        let fresh =
            current == NONE || current == avoid || u64::from(used) + u64::from(bytes) > self.cfg.chunk_bytes;
        // A compression (no chunk to avoid): a tail too short to fill a fresh segment
        // enough stays BF16.
        if fresh
            && avoid == NONE
            && tail_keeps(self.cfg.chunk_bytes, self.cfg.tail_fill_percent, sl.reserve, bytes)
        {
            return None;
        }
        let (chunk, offset) = if fresh {
            let c = self.fresh_chunk(l, true)?;
            self.chunk_class[c as usize] = SEGMENT;
            let ch = &mut self.chunks[c as usize];
            (ch.layer, ch.owner, ch.slots, ch.live, ch.pending) = (l as u32, self.store[si].id, 0, 0, 0);
            if current != NONE {
                self.chunks[current as usize].used = used;
            }
            (c, 0)
        } else {
            (current, used)
        };
        let epoch = self.submitted + 1;
        let s = &mut self.store[si];
        if fresh {
            s.segments.push(chunk);
        }
        let sl = &mut s.lay[l];
        (sl.current, sl.used) = (chunk, offset + bytes);
        // The old slot: a slab slot becomes the sequence's spare (or is freed for the open
        // epoch when it has one); a segment's stays a hole until the release.
        if from_slab {
            let retire = if sl.spare_chunk == NONE {
                (sl.spare_chunk, sl.spare_slot, sl.spare_epoch) =
                    (from.chunk, from.offset / from.slot_bytes, epoch);
                false
            } else {
                true
            };
            s.unlist_slab_page(l, page, &mut self.slab_pos);
            if retire {
                self.retire_slot(from.chunk, from.offset / from.slot_bytes);
            }
        }
        // Callers refuse open pages: `content` is the page's compressed size.
        let content = e.content;
        let (tag, copied, compress) = if class == self.open {
            (e.tag(), self.open_bytes, false)
        } else {
            (COMPRESSED, content, e.tag() == BF16)
        };
        self.entries[page as usize] = Slot { chunk, at: offset | tag, content, layer: e.layer };
        Some(Move { page, from, to: to(chunk, offset, bytes), bytes: copied, compress })
    }

    /// Frees every page of `seq` (finished, or evicted by the scheduler to make room)
    /// and releases what it still had reserved: its segments and id blocks whole, its
    /// slab pages as one list, each freed in its slab when the open epoch completes
    /// ([`Pool::complete`]). Returns the pages freed. Their room and ids are reused
    /// after the open epoch completes.
    ///
    /// # Errors
    /// [`Error::UnknownSeq`].
    pub fn release(&mut self, seq: SeqId) -> Result<usize> {
        let r = self.release_inner(seq);
        self.log(|_| format!("release {seq} => {}", ok_or(&r, |n| n.to_string())));
        r
    }

    fn release_inner(&mut self, seq: SeqId) -> Result<usize> {
        let si = self.seqs.remove(&seq).ok_or(Error::UnknownSeq { seq })? as usize;
        self.free_seqs.push(si as u32);
        self.admit.clear();
        let mut s = std::mem::take(&mut self.store[si]);
        // Its slab slots (listed pages, the layers' `slab` pages, the spares) go to the
        // open epoch's queue as one list, `in_slab` itself.
        let mut slots = std::mem::take(&mut s.in_slab);
        for (l, sl) in s.lay.iter().enumerate() {
            self.reserved[l] -= u64::from(sl.reserve);
            if sl.current != NONE {
                self.chunks[sl.current as usize].used = sl.used;
            }
            for &p in sl.slab.iter().filter(|&&p| p != NONE) {
                let e = self.entries[p as usize];
                slots.push((p, e.chunk, self.open_div.slot(e.offset())));
            }
            if sl.spare_chunk != NONE {
                slots.push((NONE, sl.spare_chunk, sl.spare_slot));
            }
        }
        let mut pages = 0;
        for &b in &s.blocks {
            let used = self.block_used[b as usize];
            if let Some(c) = self.changes.as_mut() {
                c.push(Change::FreeBlock { block: b, pages: used });
            }
            pages += used as usize;
            self.block_used[b as usize] = 0;
        }
        let epoch = self.submitted + 1;
        self.pending_count += (slots.len() + s.segments.len() + s.blocks.len()) as u64;
        let (segments, blocks) = (std::mem::take(&mut s.segments), std::mem::take(&mut s.blocks));
        self.pending.push_back(Pending { epoch, what: Retired::SlotList(slots) });
        self.pending.push_back(Pending { epoch, what: Retired::Segments(segments) });
        self.pending.push_back(Pending { epoch, what: Retired::Blocks(blocks) });
        // The entry keeps its layer array for the next sequence (`in_slab`'s capacity
        // comes back with the reclamation of its slots).
        self.store[si] = s;
        Ok(pages)
    }

    // ----- the page table and reports -----------------------------------------------

    /// Page `page`'s entry, or `None` when it is not live.
    pub fn entry(&self, page: PageId) -> Option<PageEntry> {
        self.live(page).then(|| self.public_entry(page))
    }

    /// Whether page id `page` is live (handed out by its block, not released).
    fn live(&self, page: PageId) -> bool {
        self.block_used.get((page / ID_BLOCK) as usize).is_some_and(|&used| page % ID_BLOCK < used)
    }

    /// Live page `page`'s public entry.
    fn public_entry(&self, page: PageId) -> PageEntry {
        let e = self.entries[page as usize];
        let seq = self.store[self.block_seq[(page / ID_BLOCK) as usize] as usize].id;
        PageEntry { seq, layer: e.layer, location: self.location(e), format: e.format() }
    }

    /// The location of the page whose entry is `e`: a compressed page's slot is the class
    /// of its bytes, any other's the open class.
    fn location(&self, e: Slot) -> Location {
        let slot_bytes = if e.tag() == COMPRESSED {
            self.cfg.classes.bytes()[self.cfg.classes.fit(e.content).unwrap_or(self.open)]
        } else {
            self.open_bytes
        };
        Location { chunk: e.chunk, offset: e.offset(), slot_bytes }
    }

    /// The page table: every live page and its entry, by page id ascending. A device
    /// backend mirrors it with the words of [`PageEntry::device_word`], updated by the
    /// [`Change`]s of each epoch.
    pub fn page_table(&self) -> impl Iterator<Item = (PageId, PageEntry)> + '_ {
        self.block_used.iter().enumerate().flat_map(move |(b, &used)| {
            let first = b as u32 * ID_BLOCK;
            (first..first + used).map(move |p| (p, self.public_entry(p)))
        })
    }

    /// Page ids the page table spans: every live id is below it (a device page table
    /// of this many words holds them all).
    pub fn id_capacity(&self) -> u32 {
        self.block_used.len() as u32 * ID_BLOCK
    }

    /// The pages of `seq` in allocation order (all layers: the ids of its id blocks in
    /// order; a new `Vec` per call, built from the blocks), or `None` when unknown.
    pub fn seq_pages(&self, seq: SeqId) -> Option<Vec<PageId>> {
        let si = self.seq_index(seq).ok()?;
        Some(self.block_pages(&self.store[si].blocks).collect())
    }

    /// The ids in use of id blocks `blocks`, in order.
    fn block_pages<'a>(&'a self, blocks: &'a [u32]) -> impl Iterator<Item = PageId> + 'a {
        blocks.iter().flat_map(|&b| b * ID_BLOCK..b * ID_BLOCK + self.block_used[b as usize])
    }

    /// The segments `seq` owns (all layers, in the order taken), or `None` when unknown.
    pub fn seq_segments(&self, seq: SeqId) -> Option<&[ChunkId]> {
        let si = self.seq_index(seq).ok()?;
        Some(&self.store[si].segments[..])
    }

    /// Chunk `chunk`'s state, or `None` past the last chunk. A report, not a decode-step
    /// call: it tells a free or retired segment from a live one by the free lists and the
    /// pending queue, O(free chunks + pending releases).
    pub fn chunk_info(&self, chunk: ChunkId) -> Option<ChunkInfo> {
        let c = self.chunks.get(chunk as usize)?;
        let tag = self.chunk_tag(chunk);
        let mut info = ChunkInfo {
            home: c.home,
            layer: (tag != NONE).then_some(c.layer),
            class: None,
            owner: None,
            slots: 0,
            live: 0,
            spare: 0,
            pending: 0,
            used_bytes: 0,
        };
        match tag {
            NONE => {}
            SEGMENT => {
                let s = &self.store[self.seqs[&c.owner] as usize];
                let here = |p: &PageId| self.entries[*p as usize].chunk == chunk;
                info.live = self.block_pages(&s.blocks).filter(here).count() as u32;
                info.owner = Some(c.owner);
                let sl = s.lay[c.layer as usize];
                info.used_bytes = if sl.current == chunk { sl.used } else { c.used };
            }
            RETIRED => (info.pending, info.used_bytes) = (1, c.used),
            class => {
                let running = self.seqs.values().map(|&si| &self.store[si as usize]);
                let spares = running.flat_map(|s| &s.lay).filter(|sl| sl.spare_chunk == chunk).count() as u32;
                // Released sequences' slots still counted live until their epoch.
                let released = self
                    .pending
                    .iter()
                    .filter_map(|p| match &p.what {
                        Retired::SlotList(list) => Some(list.iter().filter(|e| e.1 == chunk).count() as u32),
                        _ => None,
                    })
                    .sum::<u32>();
                (info.class, info.slots, info.live, info.spare, info.pending) =
                    (Some(class as usize), c.slots, c.live - spares - released, spares, c.pending + released)
            }
        }
        Some(info)
    }

    /// Chunk `chunk`'s tag for reports: NONE (free), a slab's class, SEGMENT (owned by
    /// a running sequence) or RETIRED (a released sequence's, waiting for its epoch).
    /// `chunk_class` says SEGMENT for all three of a segment's states; the free lists
    /// and the pending queue tell them apart (O(free chunks + pending), a report's cost).
    fn chunk_tag(&self, chunk: ChunkId) -> u32 {
        let tag = self.chunk_class[chunk as usize];
        if tag != SEGMENT {
            return tag;
        }
        let home_free = match self.chunks[chunk as usize].home {
            ChunkHome::Private(l) => &self.layers[l as usize].empty_private,
            ChunkHome::Shared => &self.shared_free,
        };
        if home_free.contains(&chunk) {
            return NONE;
        }
        let retired =
            self.pending.iter().any(|p| matches!(&p.what, Retired::Segments(list) if list.contains(&chunk)));
        if retired { RETIRED } else { SEGMENT }
    }

    /// Per chunk: whether it is free (in its home's free list).
    fn free_chunks(&self) -> Vec<bool> {
        let mut free = vec![false; self.chunks.len()];
        let private = self.layers.iter().flat_map(|l| &l.empty_private);
        for &c in self.shared_free.iter().chain(private) {
            free[c as usize] = true;
        }
        free
    }

    /// Totals over the pool. A report, not a decode-step call: O(chunks + live pages +
    /// pending releases).
    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats {
            shared_free: self.shared_free.len() as u32,
            pending: self.pending_count,
            segments_reclaimed: self.reclaimed,
            ..PoolStats::default()
        };
        // A free segment keeps its tag (see `chunk_class`).
        let free = self.free_chunks();
        let in_use = self.chunk_class.iter().zip(&free).filter(|&(_, &f)| !f);
        s.chunks_in_use = in_use.clone().filter(|&(&c, _)| c != NONE).count() as u32;
        s.segments = in_use.filter(|&(&c, _)| c == SEGMENT).count() as u32;
        // The internal entries (no sequence lookup per page: a report per step reads them
        // all).
        for (b, &used) in self.block_used.iter().enumerate() {
            let first = b * ID_BLOCK as usize;
            for &e in &self.entries[first..first + used as usize] {
                s.live_pages += 1;
                s.live_slot_bytes += u64::from(self.location(e).slot_bytes);
                s.live_content_bytes +=
                    u64::from(if e.tag() == COMPRESSED { e.content } else { self.open_bytes });
                s.open_pages += u64::from(e.is_open());
            }
        }
        s
    }

    // ----- slots -------------------------------------------------------------------

    fn check_layer(&self, layer: u32) -> Result<()> {
        if layer >= self.cfg.layers {
            return Err(Error::LayerOutOfRange { layer, layers: self.cfg.layers });
        }
        Ok(())
    }

    /// An empty chunk for layer `l`, private first, then shared. With `guard`, only if
    /// the reservations still fit without it.
    fn fresh_chunk(&mut self, l: usize, guard: bool) -> Option<ChunkId> {
        let private = !self.layers[l].empty_private.is_empty();
        if guard {
            let adj = if private {
                Adjust { layer: l, own_loss: self.open_spc, ..Adjust::default() }
            } else {
                Adjust { layer: l, shared_loss: 1, ..Adjust::default() }
            };
            if !self.fits(0, adj) {
                return None;
            }
        }
        self.admit.clear();
        if private {
            self.room[l] -= self.open_spc;
            self.layers[l].empty_private.pop()
        } else {
            self.shared_free.pop()
        }
    }

    /// A free open-class slot in layer `l`: from a partial slab, else a fresh chunk
    /// (private first, then shared).
    fn take_slot(&mut self, l: usize) -> Option<(ChunkId, u32)> {
        let chunk = match self.layers[l].partial.last() {
            Some(&c) => c,
            None => {
                let c = self.fresh_chunk(l, false)?;
                self.format_slab(c, l);
                c
            }
        };
        let slot = take_partial(
            chunk,
            self.words,
            &mut self.free_bits,
            &mut self.chunks,
            &mut self.layers[l].partial,
        );
        self.room[l] -= 1;
        self.admit.clear();
        Some((chunk, slot))
    }

    fn format_slab(&mut self, c: ChunkId, l: usize) {
        let slots = self.open_spc as u32;
        self.chunk_class[c as usize] = self.open as u32;
        let ch = &mut self.chunks[c as usize];
        (ch.layer, ch.slots, ch.live, ch.pending, ch.used) = (l as u32, slots, 0, 0, 0);
        let base = c as usize * self.words;
        for (w, word) in self.free_bits[base..base + self.words].iter_mut().enumerate() {
            let below = slots.saturating_sub(w as u32 * 64);
            *word = if below >= 64 { u64::MAX } else { (1u64 << below) - 1 };
        }
        self.room[l] += u64::from(slots);
        self.partial_push(c);
    }

    /// Slab slot `slot` of chunk `at_chunk` stops being live; it becomes reusable when
    /// the open epoch completes. Slots retired in one epoch join the queue's last entry when it is of the same
    /// slab word (a prefill's compressions free their slots in order).
    fn retire_slot(&mut self, at_chunk: ChunkId, slot: u32) {
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        let ch = &mut self.chunks[at_chunk as usize];
        ch.live -= 1;
        ch.pending += 1;
        self.pending_count += 1;
        let epoch = self.submitted + 1;
        if let Some(Pending { epoch: e, what: Retired::Slots { chunk, word: w, mask } }) =
            self.pending.back_mut()
            && (*e, *chunk, *w) == (epoch, at_chunk, word)
        {
            *mask |= bit;
            return;
        }
        self.pending.push_back(Pending { epoch, what: Retired::Slots { chunk: at_chunk, word, mask: bit } });
    }

    /// Retired slab slots (`mask` of word `word`) become free: counted `pending` in the
    /// slab ([`Pool::retire_slot`]), or `live` (`from_live`: a released sequence's slots,
    /// which its release left as they were); an empty slab goes home.
    #[inline(always)]
    fn release_slots(&mut self, chunk: ChunkId, word: u32, mask: u64, n: u32, from_live: bool) {
        debug_assert_eq!(n, mask.count_ones());
        self.free_bits[chunk as usize * self.words + word as usize] |= mask;
        let ch = &mut self.chunks[chunk as usize];
        if from_live {
            ch.live -= n;
        } else {
            ch.pending -= n;
        }
        let l = ch.layer as usize;
        let was_full = ch.partial_pos == NONE;
        let empty = ch.live == 0 && ch.pending == 0;
        self.room[l] += u64::from(n);
        if empty {
            self.slab_emptied(chunk, was_full);
        } else if was_full {
            self.partial_push(chunk);
        }
    }

    /// Slab `chunk`, all its slots free now, goes home (out of its layer's partial list
    /// unless it was full).
    #[cold]
    #[inline(never)]
    fn slab_emptied(&mut self, chunk: ChunkId, was_full: bool) {
        if !was_full {
            self.partial_remove(chunk);
        }
        let ch = &mut self.chunks[chunk as usize];
        let l = ch.layer as usize;
        self.room[l] -= u64::from(ch.slots);
        ch.slots = 0;
        let home = ch.home;
        self.chunk_class[chunk as usize] = NONE;
        let base = chunk as usize * self.words;
        self.free_bits[base..base + self.words].fill(0);
        match home {
            ChunkHome::Private(h) => {
                self.layers[h as usize].empty_private.push(chunk);
                self.room[h as usize] += self.open_spc;
            }
            ChunkHome::Shared => self.shared_free.push(chunk),
        }
    }

    fn partial_push(&mut self, c: ChunkId) {
        let list = &mut self.layers[self.chunks[c as usize].layer as usize].partial;
        self.chunks[c as usize].partial_pos = list.len() as u32;
        list.push(c);
    }

    fn partial_remove(&mut self, c: ChunkId) {
        let l = self.chunks[c as usize].layer as usize;
        partial_remove_from(&mut self.chunks, &mut self.layers[l].partial, c);
    }

    // ----- trace and changes -------------------------------------------------------

    /// Starts (`true`) or stops recording every operation and its outcome as trace lines
    /// (`crate::trace`); starting writes the configuration line first.
    pub fn record_trace(&mut self, on: bool) {
        self.trace = on.then(|| vec![crate::trace::config_line(&self.cfg)]);
    }

    /// The trace lines recorded since [`Pool::record_trace`]`(true)`, and recording stops.
    pub fn take_trace(&mut self) -> Vec<String> {
        self.trace.take().unwrap_or_default()
    }

    /// The last trace line recorded, if recording.
    pub(crate) fn last_trace_line(&self) -> Option<&str> {
        self.trace.as_ref()?.last().map(String::as_str)
    }

    /// Forgets the lines recorded so far and goes on recording.
    pub(crate) fn clear_trace(&mut self) {
        if let Some(t) = &mut self.trace {
            t.clear();
        }
    }

    /// The sequences the pool knows (reserved and not released), in no order.
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    /// Starts (`true`) or stops recording the [`Change`]s a device mirror needs.
    pub fn record_changes(&mut self, on: bool) {
        self.changes = on.then(Vec::new);
    }

    /// The changes recorded since the last call (in operation order; empty when not
    /// recording). Recording goes on.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.changes.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn log(&mut self, line: impl FnOnce(&Pool) -> String) {
        if self.trace.is_some() {
            let line = line(self);
            if let Some(t) = &mut self.trace {
                t.push(line);
            }
        }
    }

    fn loc_text(&self, page: PageId) -> String {
        self.entry(page).map_or_else(|| "-".into(), |e| loc_text(e.location))
    }
}

/// The cached answer of [`Pool::admissible_pages`] (`u64::MAX`: not known), and the last
/// answer computed (`u64::MAX`: none; where the next computation starts). Atomics so that
/// the query stays `&self` and the pool `Sync`; relaxed: the pool is used from one thread
/// at a time (`&mut` for every change).
#[derive(Debug)]
struct AdmitCache(AtomicU64, AtomicU64);

impl AdmitCache {
    fn get(&self) -> Option<u64> {
        let v = self.0.load(Relaxed);
        (v != u64::MAX).then_some(v)
    }
    fn hint(&self) -> Option<u64> {
        let v = self.1.load(Relaxed);
        (v != u64::MAX).then_some(v)
    }
    fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
        self.1.store(v, Relaxed);
    }
    fn clear(&mut self) {
        *self.0.get_mut() = u64::MAX;
    }
}

impl Default for AdmitCache {
    fn default() -> AdmitCache {
        AdmitCache(AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX))
    }
}

impl Clone for AdmitCache {
    fn clone(&self) -> AdmitCache {
        AdmitCache(AtomicU64::new(self.0.load(Relaxed)), AtomicU64::new(self.1.load(Relaxed)))
    }
}

/// The hasher of the sequence map: sequence ids are the caller's integers, usually
/// dense; a multiply-xorshift (splitmix64's finaliser) spreads them in a few cycles,
/// where the default SipHash costs tens of nanoseconds per lookup on the decode path.
#[derive(Clone, Copy, Debug, Default)]
struct SeqHash;

impl std::hash::BuildHasher for SeqHash {
    type Hasher = SeqHasher;
    fn build_hasher(&self) -> SeqHasher {
        SeqHasher(0)
    }
}

/// See [`SeqHash`]; hashes a `u64` key (other writes fold their bytes in).
#[derive(Clone, Copy, Debug, Default)]
struct SeqHasher(u64);

impl std::hash::Hasher for SeqHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        let mut z = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        self.0 = z ^ (z >> 27);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// XOR of `f` of one element per 64-byte line of `v`: a row's lines loaded in one tight
/// loop (their misses overlap; the work that follows finds them in cache).
fn touch<T>(v: &[T], f: impl Fn(&T) -> u32) -> u32 {
    let step = (64 / std::mem::size_of::<T>().max(1)).max(1);
    v.iter().step_by(step).fold(0, |acc, x| acc ^ f(x))
}

/// New page `page`, in a slab slot, goes into its layer's `slab` as the newer of the two
/// (`slab[1]`; `slab[0]` is the older, or a hole): when both are taken, the older page
/// joins `in_slab` (`entries` gives its slot). Keeping the newest page in the record is
/// what lets the next row's compression of it take `compress_run`'s one-pass path.
#[inline(always)]
fn place_slab(
    slab: &mut [PageId; 2],
    page: PageId,
    in_slab: &mut Vec<(PageId, ChunkId, u32)>,
    entries: &[Slot],
    slab_pos: &mut [u32],
    open_div: OpenDiv,
) {
    if slab[1] == NONE {
        slab[1] = page;
    } else {
        let older = slab[0];
        *slab = [slab[1], page];
        if older != NONE {
            let e = entries[older as usize];
            list_slab_page(in_slab, older, e.chunk, open_div.slot(e.offset()), slab_pos);
        }
    }
}

/// Page `page` at slot `slot` of slab `chunk` joins `in_slab`, its position in `slab_pos`.
#[inline]
fn list_slab_page(
    in_slab: &mut Vec<(PageId, ChunkId, u32)>,
    page: PageId,
    chunk: ChunkId,
    slot: u32,
    slab_pos: &mut [u32],
) {
    slab_pos[page as usize] = in_slab.len() as u32;
    in_slab.push((page, chunk, slot));
}

/// A free slot of partial slab `chunk` (`words` bitmap words a chunk in `free_bits`):
/// taken, counted live; the slab leaves its layer's `partial` list when full.
#[inline(always)]
fn take_partial(
    chunk: ChunkId,
    words: usize,
    free_bits: &mut [u64],
    chunks: &mut [Chunk],
    partial: &mut Vec<ChunkId>,
) -> u32 {
    let base = chunk as usize * words;
    // The first word first: a slab of up to 64 slots has no other.
    let w = if free_bits[base] != 0 {
        0
    } else {
        let bits = &free_bits[base..base + words];
        bits.iter().position(|&w| w != 0).expect("a partial chunk has a free slot")
    };
    let word = &mut free_bits[base + w];
    let slot = (w * 64) as u32 + word.trailing_zeros();
    *word &= *word - 1;
    let ch = &mut chunks[chunk as usize];
    ch.live += 1;
    if ch.free_count() == 0 {
        partial_remove_from(chunks, partial, chunk);
    }
    slot
}

/// Slab `c` leaves `list`, its layer's partial list (swap-removed by its position).
fn partial_remove_from(chunks: &mut [Chunk], list: &mut Vec<ChunkId>, c: ChunkId) {
    let pos = chunks[c as usize].partial_pos as usize;
    list.swap_remove(pos);
    if let Some(&moved) = list.get(pos) {
        chunks[moved as usize].partial_pos = pos as u32;
    }
    chunks[c as usize].partial_pos = NONE;
}

/// The tail rule ([`PoolConfig::tail_fill_percent`]): whether a compression that needs a
/// fresh segment (of `chunk_bytes`) keeps its page BF16 instead, its sequence having
/// `reserve` more pages reserved in the layer and the page's class being `bytes` long.
fn tail_keeps(chunk_bytes: u64, tail_fill_percent: u32, reserve: u32, bytes: u32) -> bool {
    // In u128: a reservation near u32::MAX pages of a large class overflows u64.
    let still = u128::from(reserve) + 1;
    still * u128::from(bytes) * 100 < u128::from(chunk_bytes) * u128::from(tail_fill_percent)
}

/// The row loops' common compression ([`Pool::compress_run`], [`Pool::advance_run`]):
/// open page `page` (entry `e`, `sl.slab[held]`) packs into its layer's current segment
/// (room checked by the caller, no spare held) at a `class_bytes` extent, `content`
/// bytes; its open slot becomes the layer's spare once epoch `epoch` completes. Returns
/// the page's new entry and the move. `packing`: `(content, class_bytes, epoch,
/// open_bytes, open_div)`.
#[inline(always)]
fn pack_in_segment(
    sl: &mut SeqLayer,
    held: usize,
    page: PageId,
    e: Slot,
    packing: (u32, u32, Epoch, u32, OpenDiv),
) -> (Slot, CompressOutcome) {
    let (content, class_bytes, epoch, open_bytes, open_div) = packing;
    let (segment, offset) = (sl.current, sl.used);
    let from = Location { chunk: e.chunk, offset: e.offset(), slot_bytes: open_bytes };
    sl.used = offset + class_bytes;
    (sl.spare_chunk, sl.spare_slot, sl.spare_epoch) = (from.chunk, open_div.slot(from.offset), epoch);
    sl.slab[held] = NONE;
    let entry = Slot { chunk: segment, at: offset | COMPRESSED, content, layer: e.layer };
    let to = to(segment, offset, class_bytes);
    (entry, CompressOutcome::Moved(Move { page, from, to, bytes: content, compress: true }))
}

/// The location `offset` bytes into `chunk`, `slot_bytes` long.
fn to(chunk: ChunkId, offset: u32, slot_bytes: u32) -> Location {
    Location { chunk, offset, slot_bytes }
}

/// `chunk:offset:slot_bytes`: a location in a trace line.
pub(crate) fn loc_text(l: Location) -> String {
    format!("{}:{}:{}", l.chunk, l.offset, l.slot_bytes)
}

/// `f(value)`, or `err <message>` in a trace line.
fn ok_or<T>(r: &Result<T>, f: impl FnOnce(&T) -> String) -> String {
    match r {
        Ok(v) => f(v),
        Err(e) => format!("err {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::OpenDiv;

    #[test]
    fn open_slot_index_by_multiply_equals_the_division() {
        for d in [16u32, 48, 64, 1488, 2976, 4096, 65_536, 65_552, 1 << 20, u32::MAX - 15] {
            let div = OpenDiv::new(d);
            let mut x = 0x9e37_79b9u32;
            for k in 0..100_000u32 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                for offset in [x, k.wrapping_mul(d), k.wrapping_mul(d).wrapping_sub(1), u32::MAX] {
                    assert_eq!(div.slot(offset), offset / d, "{offset} / {d}");
                }
            }
        }
    }
}
