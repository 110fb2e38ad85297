//! The allocator: chunks, slabs of one size class, the page table, reservations,
//! deferred frees.

use std::collections::{HashMap, VecDeque};

use crate::config::PoolConfig;
use crate::error::{Error, Result};
use crate::{ChunkId, Epoch, PageId, SeqId};

/// No page in this slot / not in a partial list.
const NONE: u32 = u32::MAX;

/// Where a page lives: its chunk, its byte offset in the chunk and its slot's size in
/// bytes. The attention kernels read page `p` at arena byte
/// [`Location::arena_offset`]; the slot holds the page's bytes at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The chunk.
    pub chunk: ChunkId,
    /// Bytes from the chunk's start (a multiple of [`crate::SLOT_ALIGN`]).
    pub offset: u32,
    /// The slot's size in bytes (its size class).
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
    /// Full and uncompressed in an open-class slot: it did not compress below the open
    /// class, or no compact slot was free when it filled. `compressed_bytes` is what it
    /// would take compressed (a later [`Pool::move_page`] compresses it into that class).
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
/// page at `to`: the page's bytes at `from` go to `to` (`compress`: the BF16 page at
/// `from` is compressed into `to` instead). `from` stays readable until the epoch that
/// carries this copy completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Move {
    /// The page.
    pub page: PageId,
    /// Its old location.
    pub from: Location,
    /// Its new location (the page table already says so).
    pub to: Location,
    /// Bytes to write at `to`: the compressed length.
    pub bytes: u32,
    /// Whether the device compresses the BF16 page at `from` (true) or copies bytes.
    pub compress: bool,
}

/// The outcome of [`Pool::compress`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressOutcome {
    /// The page moved into a compact slot; the device compresses it there.
    Moved(Move),
    /// The page stays BF16 where it is ([`PageFormat::Bf16`]): it does not compress below
    /// the open class, or no compact slot fits without breaking a reservation.
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
    /// Its size class, `None` when empty.
    pub class: Option<usize>,
    /// Slots of its class in it.
    pub slots: u32,
    /// Slots holding a live page.
    pub live: u32,
    /// Slots freed but still possibly read by an epoch in flight.
    pub pending: u32,
}

/// Totals over the pool, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PoolStats {
    /// Chunks in use by some layer (formatted with a class), private or shared.
    pub chunks_in_use: u32,
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
    /// Slots waiting for their epoch to complete.
    pub pending_slots: u64,
}

#[derive(Clone, Debug)]
struct Chunk {
    home: ChunkHome,
    layer: u32,
    class: u32,
    slots: u32,
    live: u32,
    pending: u32,
    /// Position in its (layer, class) partial list, or NONE.
    partial_pos: u32,
}

impl Chunk {
    fn free_count(&self) -> u32 {
        self.slots - self.live - self.pending
    }
    fn in_use(&self) -> bool {
        self.class != NONE
    }
}

#[derive(Clone, Debug, Default)]
struct LayerState {
    /// Per class: chunks of this layer with at least one free slot.
    partial: Vec<Vec<ChunkId>>,
    /// Empty private chunks of this layer.
    empty_private: Vec<ChunkId>,
    /// Free open-class slots in this layer's chunks in use.
    open_free: u64,
    /// Pages reserved for the running sequences' growth.
    reserved: u64,
}

#[derive(Clone, Debug)]
struct Seq {
    pages: Vec<PageId>,
    reserve: Vec<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    epoch: Epoch,
    chunk: ChunkId,
    slot: u32,
    page: PageId,
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
///   use belongs to one layer and holds slots of one size class.
/// * [`Pool::alloc`] gives a new page an open (BF16) slot; [`Pool::compress`] moves a
///   filled page into the smallest class that holds its compressed bytes;
///   [`Pool::move_page`] and [`Pool::compact`] relocate full pages; the page table
///   ([`Pool::entry`]) maps each page id to its location.
/// * Frees are stream-ordered: a slot freed while the host prepares epoch `e`
///   (`e = last submitted + 1`) is reused only after [`Pool::complete`]`(e)`; a chunk
///   returns to its layer's private space or to the shared pool when all its slots are
///   free and none is pending. Nothing waits for the device.
/// * Reservations ([`Pool::reserve`]) hold open-class room in every layer for running
///   sequences' future pages; [`Pool::admissible_pages`] reports how many more pages fit
///   in every layer beyond them, for a scheduler's admission.
#[derive(Clone, Debug)]
pub struct Pool {
    cfg: PoolConfig,
    open: usize,
    open_spc: u64,
    class_spc: Vec<u32>,
    chunks: Vec<Chunk>,
    /// Free bitmaps of all chunks, `words` words per chunk (bit set = slot free and
    /// reusable): one flat array, no allocation when a chunk changes class.
    free_bits: Vec<u64>,
    /// The page in each slot of all chunks, `stride` slots per chunk, `NONE` when empty.
    owners: Vec<PageId>,
    /// Slots per chunk of the smallest class: the most any chunk holds.
    stride: usize,
    /// Bitmap words per chunk.
    words: usize,
    layers: Vec<LayerState>,
    shared_free: Vec<ChunkId>,
    pages: Vec<Option<PageEntry>>,
    free_ids: Vec<PageId>,
    seqs: HashMap<SeqId, Seq, SeqHash>,
    pending: VecDeque<Pending>,
    submitted: Epoch,
    completed: Epoch,
    trace: Option<Vec<String>>,
}

impl Pool {
    /// An empty pool: every chunk free, epoch 0 submitted and completed.
    ///
    /// # Errors
    /// As [`PoolConfig::validate`].
    pub fn new(cfg: PoolConfig) -> Result<Pool> {
        cfg.validate()?;
        let classes = cfg.classes.bytes().len();
        let class_spc: Vec<u32> = (0..classes).map(|c| cfg.slots_per_chunk(c)).collect();
        let mut layers = vec![
            LayerState { partial: vec![Vec::new(); classes], ..LayerState::default() };
            cfg.layers as usize
        ];
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
                class: NONE,
                slots: 0,
                live: 0,
                pending: 0,
                partial_pos: NONE,
            });
        }
        // Pop order: lowest chunk id first (deterministic, as a device replay needs).
        for l in &mut layers {
            l.empty_private.reverse();
        }
        let shared_free = (cfg.layers * cfg.private_chunks..cfg.chunks()).rev().collect();
        let open = cfg.classes.open();
        let stride = class_spc[0] as usize;
        let words = stride.div_ceil(64);
        Ok(Pool {
            free_bits: vec![0; chunks.len() * words],
            owners: vec![NONE; chunks.len() * stride],
            stride,
            words,
            open,
            open_spc: u64::from(class_spc[open]),
            class_spc,
            chunks,
            layers,
            shared_free,
            pages: Vec::new(),
            free_ids: Vec::new(),
            seqs: HashMap::default(),
            pending: VecDeque::new(),
            submitted: 0,
            completed: 0,
            trace: None,
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
    /// [`Error::SubmitOrder`] unless `epoch` is after the last submitted.
    pub fn submit(&mut self, epoch: Epoch) -> Result<()> {
        if epoch <= self.submitted {
            return Err(Error::SubmitOrder { epoch, last: self.submitted });
        }
        self.submitted = epoch;
        self.log(|_| format!("submit {epoch}"));
        Ok(())
    }

    /// Records that epoch `epoch` completed on the device (observed through a CUDA event
    /// or a counter the device writes, polled, never waited on): slots freed for epochs
    /// up to `epoch` become reusable, and chunks left empty return to their home.
    ///
    /// # Errors
    /// [`Error::CompleteOrder`] unless `completed <= epoch <= submitted`.
    pub fn complete(&mut self, epoch: Epoch) -> Result<()> {
        if epoch < self.completed || epoch > self.submitted {
            return Err(Error::CompleteOrder { epoch, completed: self.completed, submitted: self.submitted });
        }
        self.completed = epoch;
        while self.pending.front().is_some_and(|p| p.epoch <= epoch) {
            let p = self.pending.pop_front().expect("front checked");
            self.release_slot(p.chunk, p.slot);
            if p.page != NONE {
                self.free_ids.push(p.page);
            }
        }
        self.log(|_| format!("complete {epoch}"));
        Ok(())
    }

    /// The last epoch submitted.
    pub fn submitted(&self) -> Epoch {
        self.submitted
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
        for (i, l) in self.layers.iter().enumerate() {
            let (extra, loss) = if i == adj.layer { (adj.extra_need, adj.own_loss) } else { (0, 0) };
            let need = l.reserved + n + extra;
            let own = (l.open_free + l.empty_private.len() as u64 * spc).saturating_sub(loss);
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
    pub fn admissible_pages(&self) -> u64 {
        let (mut lo, mut hi) = (0u64, self.layers.iter().map(|l| l.open_free).max().unwrap_or(0));
        hi += (self.cfg.private_chunks as u64 + self.shared_free.len() as u64) * self.open_spc + 1;
        // Invariant: fits(lo); !fits(hi).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.fits(mid, Adjust::default()) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// How many new requests of `prompt_tokens + output_tokens` tokens fit, each counted
    /// at its whole length in open (BF16) pages per layer, beyond the reservations of the
    /// running sequences.
    pub fn admissible_requests(&self, prompt_tokens: u64, output_tokens: u64) -> u64 {
        let pages = self.cfg.pages_for_tokens(prompt_tokens + output_tokens).max(1);
        self.admissible_pages() / pages
    }

    /// Reserves `pages` open pages in every layer for sequence `seq` (created if new):
    /// the pages its remaining tokens will need. [`Pool::alloc`] for `seq` consumes them.
    ///
    /// # Errors
    /// [`Error::ReservationTooLarge`] when more than [`Pool::admissible_pages`].
    pub fn reserve(&mut self, seq: SeqId, pages: u64) -> Result<()> {
        let r = if self.fits(pages, Adjust::default()) {
            let layers = self.layers.len();
            let s =
                self.seqs.entry(seq).or_insert_with(|| Seq { pages: Vec::new(), reserve: vec![0; layers] });
            for (l, r) in self.layers.iter_mut().zip(&mut s.reserve) {
                l.reserved += pages;
                *r += pages;
            }
            Ok(())
        } else {
            Err(Error::ReservationTooLarge { requested: pages, admissible: self.admissible_pages() })
        };
        self.log(|_| format!("reserve {seq} {pages} => {}", ok_or(&r, |_| "ok".into())));
        r
    }

    /// Pages per layer still reserved for `seq`, or `None` for an unknown sequence.
    pub fn reserved(&self, seq: SeqId) -> Option<&[u64]> {
        self.seqs.get(&seq).map(|s| &s.reserve[..])
    }

    // ----- pages -------------------------------------------------------------------

    /// A new open (BF16) page of `seq` in `layer`: from `seq`'s reservation in that layer
    /// if it has one left, else from room beyond every reservation.
    ///
    /// # Errors
    /// [`Error::UnknownSeq`] (reserve first, even 0 pages), [`Error::LayerOutOfRange`],
    /// [`Error::NoCapacity`] without a reservation and without room.
    pub fn alloc(&mut self, seq: SeqId, layer: u32) -> Result<PageId> {
        let r = self.alloc_inner(seq, layer);
        self.log(|pool| {
            format!("alloc {seq} {layer} => {}", ok_or(&r, |&p| format!("{p} {}", pool.loc_text(p))))
        });
        r
    }

    fn alloc_inner(&mut self, seq: SeqId, layer: u32) -> Result<PageId> {
        self.check_layer(layer)?;
        let l = layer as usize;
        let reserved = self.seqs.get(&seq).ok_or(Error::UnknownSeq { seq })?.reserve[l] > 0;
        if !reserved && !self.fits(0, Adjust { layer: l, extra_need: 1, ..Adjust::default() }) {
            return Err(Error::NoCapacity { layer });
        }
        let (chunk, slot) = self.take_slot(l, self.open, false).ok_or(Error::NoCapacity { layer })?;
        let location = self.location(chunk, slot);
        let s = self.seqs.get_mut(&seq).expect("checked above");
        if reserved {
            s.reserve[l] -= 1;
            self.layers[l].reserved -= 1;
        }
        let entry = PageEntry { seq, layer, location, format: PageFormat::Open };
        let page = match self.free_ids.pop() {
            Some(id) => {
                self.pages[id as usize] = Some(entry);
                id
            }
            None => {
                self.pages.push(Some(entry));
                (self.pages.len() - 1) as PageId
            }
        };
        s.pages.push(page);
        self.owners[chunk as usize * self.stride + slot as usize] = page;
        Ok(page)
    }

    /// An open page has filled and compresses to `compressed_bytes`: it moves into the
    /// smallest class that holds them, in its layer, if a slot is free or a chunk can be
    /// taken without breaking a reservation; else it stays BF16 in place
    /// ([`CompressOutcome::Kept`]). Its old slot is freed for the open epoch.
    ///
    /// # Errors
    /// [`Error::UnknownPage`], [`Error::NotOpen`].
    pub fn compress(&mut self, page: PageId, compressed_bytes: u32) -> Result<CompressOutcome> {
        let r = self.compress_inner(page, compressed_bytes);
        self.log(|_| {
            format!(
                "compress {page} {compressed_bytes} => {}",
                ok_or(&r, |o| match o {
                    CompressOutcome::Moved(m) => format!("moved {}", loc_text(m.to)),
                    CompressOutcome::Kept => "kept".into(),
                })
            )
        });
        r
    }

    fn compress_inner(&mut self, page: PageId, compressed_bytes: u32) -> Result<CompressOutcome> {
        let entry = self.entry(page).ok_or(Error::UnknownPage { page })?;
        if entry.format != PageFormat::Open {
            return Err(Error::NotOpen { page });
        }
        self.set_format(page, PageFormat::Bf16 { compressed_bytes });
        match self.relocate(page, false) {
            Some(m) => Ok(CompressOutcome::Moved(m)),
            None => Ok(CompressOutcome::Kept),
        }
    }

    /// Moves a full page to another chunk: a compressed page into a slot of its class, a
    /// page kept BF16 ([`PageFormat::Bf16`]) compressed into the class of its compressed
    /// size (or another open slot if it has none). The old slot is freed for the open
    /// epoch.
    ///
    /// # Errors
    /// [`Error::UnknownPage`], [`Error::OpenPage`], [`Error::NoCapacity`] when no slot of
    /// the class is free in another chunk and no chunk can be taken.
    pub fn move_page(&mut self, page: PageId) -> Result<Move> {
        let r = self.move_inner(page);
        self.log(|_| format!("move {page} => {}", ok_or(&r, |m| loc_text(m.to))));
        r
    }

    fn move_inner(&mut self, page: PageId) -> Result<Move> {
        let entry = self.entry(page).ok_or(Error::UnknownPage { page })?;
        if entry.format == PageFormat::Open {
            return Err(Error::OpenPage { page });
        }
        self.relocate(page, true).ok_or(Error::NoCapacity { layer: entry.layer })
    }

    /// Moves full page `page` into the class of its content, in a chunk other than its
    /// own; `None` when no slot can be had, or (`force` false) when the target class is
    /// its current one.
    fn relocate(&mut self, page: PageId, force: bool) -> Option<Move> {
        let e = self.pages[page as usize].expect("caller checked");
        let (l, from) = (e.layer as usize, e.location);
        let content = e.format.content_bytes().expect("callers refuse open pages");
        let class = self.cfg.classes.fit(content).unwrap_or(self.open);
        let current = self.chunks[from.chunk as usize].class as usize;
        if class == current && !force {
            return None;
        }
        // Never the page's own chunk: take it out of the partial list for the search.
        let own_pos = self.chunks[from.chunk as usize].partial_pos;
        if own_pos != NONE {
            self.partial_remove(from.chunk);
        }
        // An open slot must not eat reserved room, and the own chunk's free open slots
        // are no target.
        let own_free = if current == self.open { self.chunks[from.chunk as usize].free_count() } else { 0 };
        let adj = Adjust { layer: l, extra_need: 1, own_loss: u64::from(own_free), ..Adjust::default() };
        let taken = if class == self.open && !self.fits(0, adj) {
            None
        } else {
            self.take_slot(l, class, class != self.open)
        };
        if own_pos != NONE {
            self.partial_push(from.chunk);
        }
        let (chunk, slot) = taken?;
        Some(self.finish_move(page, chunk, slot))
    }

    /// Points full page `page` at `slot` of `chunk` (already taken), retires its old
    /// slot, and returns the copy the device must run.
    fn finish_move(&mut self, page: PageId, chunk: ChunkId, slot: u32) -> Move {
        let e = self.pages[page as usize].expect("caller checked");
        let from = e.location;
        let to = self.location(chunk, slot);
        self.owners[chunk as usize * self.stride + slot as usize] = page;
        self.retire(from, NONE);
        let content = e.format.content_bytes().expect("callers refuse open pages");
        let (format, compress) = if to.slot_bytes == self.cfg.classes.open_bytes() {
            (e.format, false)
        } else {
            (PageFormat::Compressed { bytes: content }, matches!(e.format, PageFormat::Bf16 { .. }))
        };
        self.pages[page as usize] = Some(PageEntry { location: to, format, ..e });
        Move { page, from, to, bytes: content, compress }
    }

    /// Compaction of `layer`: for each compressed class, empties the least-used chunk
    /// into the other chunks of its class when they have room, up to `max_moves` moves in
    /// all. The emptied chunks return to their home once their epoch completes (seed
    /// 002: "a compressed page may move").
    ///
    /// # Errors
    /// [`Error::LayerOutOfRange`].
    pub fn compact(&mut self, layer: u32, max_moves: usize) -> Result<Vec<Move>> {
        self.check_layer(layer)?;
        let l = layer as usize;
        let mut moves = Vec::new();
        for class in 0..self.open {
            while moves.len() < max_moves {
                // Chunks holding pages, fullest first; the emptiest is the source.
                let mut used: Vec<ChunkId> = self.layers[l].partial[class]
                    .iter()
                    .copied()
                    .filter(|&c| self.chunks[c as usize].live > 0)
                    .collect();
                used.sort_by_key(|&c| (std::cmp::Reverse(self.chunks[c as usize].live), c));
                let Some(source) = used.pop() else { break };
                let room: u64 = used.iter().map(|&c| u64::from(self.chunks[c as usize].free_count())).sum();
                let src = &self.chunks[source as usize];
                if used.is_empty() || room < u64::from(src.live) {
                    break;
                }
                let base = source as usize * self.stride;
                let pages: Vec<PageId> = self.owners[base..base + src.slots as usize]
                    .iter()
                    .copied()
                    .filter(|&p| p != NONE)
                    .collect();
                let mut targets = used.into_iter();
                let mut target = targets.next();
                for p in pages.into_iter().take(max_moves - moves.len()) {
                    while target.is_some_and(|t| self.chunks[t as usize].free_count() == 0) {
                        target = targets.next();
                    }
                    let t = target.expect("room counted above");
                    let slot = self.take_from(t, l, class);
                    moves.push(self.finish_move(p, t, slot));
                }
            }
        }
        self.log(|_| {
            let list: Vec<String> = moves.iter().map(|m| format!("{}@{}", m.page, loc_text(m.to))).collect();
            format!("compact {layer} {max_moves} => {}", list.join(" "))
        });
        Ok(moves)
    }

    /// Frees every page of `seq` (finished, or evicted by the scheduler to make room)
    /// and releases what it still had reserved. Returns the pages freed. Their slots and
    /// ids are reused after the open epoch completes.
    ///
    /// # Errors
    /// [`Error::UnknownSeq`].
    pub fn release(&mut self, seq: SeqId) -> Result<usize> {
        let r = self.release_inner(seq);
        self.log(|_| format!("release {seq} => {}", ok_or(&r, |n| n.to_string())));
        r
    }

    fn release_inner(&mut self, seq: SeqId) -> Result<usize> {
        let s = self.seqs.remove(&seq).ok_or(Error::UnknownSeq { seq })?;
        for (l, r) in self.layers.iter_mut().zip(&s.reserve) {
            l.reserved -= r;
        }
        for &p in &s.pages {
            let e = self.pages[p as usize].take().expect("a sequence's pages are live");
            self.retire(e.location, p);
        }
        Ok(s.pages.len())
    }

    // ----- the page table and reports -----------------------------------------------

    /// Page `page`'s entry, or `None` when it is not live.
    pub fn entry(&self, page: PageId) -> Option<PageEntry> {
        self.pages.get(page as usize).copied().flatten()
    }

    /// The page table: every live page and its entry, by page id. A device backend
    /// uploads the changed entries (or the block tables resolved through it) with each
    /// epoch.
    pub fn page_table(&self) -> impl Iterator<Item = (PageId, PageEntry)> + '_ {
        self.pages.iter().enumerate().filter_map(|(i, e)| e.map(|e| (i as PageId, e)))
    }

    /// The pages of `seq` in allocation order (all layers), or `None` when unknown.
    pub fn seq_pages(&self, seq: SeqId) -> Option<&[PageId]> {
        self.seqs.get(&seq).map(|s| &s.pages[..])
    }

    /// Chunk `chunk`'s state, or `None` past the last chunk.
    pub fn chunk_info(&self, chunk: ChunkId) -> Option<ChunkInfo> {
        let c = self.chunks.get(chunk as usize)?;
        Some(ChunkInfo {
            home: c.home,
            layer: c.in_use().then_some(c.layer),
            class: c.in_use().then_some(c.class as usize),
            slots: c.slots,
            live: c.live,
            pending: c.pending,
        })
    }

    /// Totals over the pool.
    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats {
            shared_free: self.shared_free.len() as u32,
            pending_slots: self.pending.len() as u64,
            ..PoolStats::default()
        };
        s.chunks_in_use = self.chunks.iter().filter(|c| c.in_use()).count() as u32;
        for (_, e) in self.page_table() {
            s.live_pages += 1;
            s.live_slot_bytes += u64::from(e.location.slot_bytes);
            s.live_content_bytes += u64::from(match e.format {
                PageFormat::Compressed { bytes } => bytes,
                _ => self.cfg.classes.open_bytes(),
            });
            s.open_pages += u64::from(e.format == PageFormat::Open);
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

    fn set_format(&mut self, page: PageId, format: PageFormat) {
        if let Some(e) = self.pages[page as usize].as_mut() {
            e.format = format;
        }
    }

    fn location(&self, chunk: ChunkId, slot: u32) -> Location {
        let slot_bytes = self.cfg.classes.bytes()[self.chunks[chunk as usize].class as usize];
        Location { chunk, offset: slot * slot_bytes, slot_bytes }
    }

    /// A free slot of `class` in layer `l`: from a partial chunk, else a fresh chunk
    /// (private first, then shared). With `guard`, a fresh chunk is taken only if the
    /// reservations still fit without it.
    fn take_slot(&mut self, l: usize, class: usize, guard: bool) -> Option<(ChunkId, u32)> {
        let chunk = match self.layers[l].partial[class].last() {
            Some(&c) => c,
            None => {
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
                let c = if private { self.layers[l].empty_private.pop() } else { self.shared_free.pop() }?;
                self.format_chunk(c, l, class);
                c
            }
        };
        Some((chunk, self.take_from(chunk, l, class)))
    }

    /// Takes the lowest free slot of `chunk` (in use by layer `l`, class `class`, with a
    /// free slot).
    fn take_from(&mut self, chunk: ChunkId, l: usize, class: usize) -> u32 {
        let base = chunk as usize * self.words;
        let bits = &mut self.free_bits[base..base + self.words];
        let w = bits.iter().position(|&w| w != 0).expect("a partial chunk has a free slot");
        let slot = (w * 64) as u32 + bits[w].trailing_zeros();
        bits[w] &= bits[w] - 1;
        let ch = &mut self.chunks[chunk as usize];
        ch.live += 1;
        let full = ch.free_count() == 0;
        if class == self.open {
            self.layers[l].open_free -= 1;
        }
        if full {
            self.partial_remove(chunk);
        }
        slot
    }

    fn format_chunk(&mut self, c: ChunkId, l: usize, class: usize) {
        let slots = self.class_spc[class];
        let ch = &mut self.chunks[c as usize];
        ch.layer = l as u32;
        ch.class = class as u32;
        ch.slots = slots;
        // Slots 0..slots free; the owners of an empty chunk are all NONE already.
        let base = c as usize * self.words;
        for (w, word) in self.free_bits[base..base + self.words].iter_mut().enumerate() {
            let below = slots.saturating_sub(w as u32 * 64);
            *word = if below >= 64 { u64::MAX } else { (1u64 << below) - 1 };
        }
        if class == self.open {
            self.layers[l].open_free += u64::from(slots);
        }
        self.partial_push(c);
    }

    /// A live slot stops being live; it becomes reusable when the open epoch completes.
    fn retire(&mut self, at: Location, page: PageId) {
        let slot = at.offset / at.slot_bytes;
        self.owners[at.chunk as usize * self.stride + slot as usize] = NONE;
        let ch = &mut self.chunks[at.chunk as usize];
        ch.live -= 1;
        ch.pending += 1;
        self.pending.push_back(Pending { epoch: self.submitted + 1, chunk: at.chunk, slot, page });
    }

    /// A pending slot becomes free; an empty chunk goes home.
    fn release_slot(&mut self, chunk: ChunkId, slot: u32) {
        let open = self.open;
        self.free_bits[chunk as usize * self.words + (slot / 64) as usize] |= 1 << (slot % 64);
        let ch = &mut self.chunks[chunk as usize];
        ch.pending -= 1;
        let (l, class) = (ch.layer as usize, ch.class as usize);
        let was_full = ch.partial_pos == NONE;
        let empty = ch.live == 0 && ch.pending == 0;
        if class == open {
            self.layers[l].open_free += 1;
        }
        if was_full {
            self.partial_push(chunk);
        }
        if empty {
            self.partial_remove(chunk);
            let ch = &mut self.chunks[chunk as usize];
            if class == open {
                self.layers[l].open_free -= u64::from(ch.slots);
            }
            ch.layer = NONE;
            ch.class = NONE;
            ch.slots = 0;
            let home = ch.home;
            let base = chunk as usize * self.words;
            self.free_bits[base..base + self.words].fill(0);
            match home {
                ChunkHome::Private(h) => self.layers[h as usize].empty_private.push(chunk),
                ChunkHome::Shared => self.shared_free.push(chunk),
            }
        }
    }

    fn partial_push(&mut self, c: ChunkId) {
        let ch = &self.chunks[c as usize];
        let list = &mut self.layers[ch.layer as usize].partial[ch.class as usize];
        self.chunks[c as usize].partial_pos = list.len() as u32;
        list.push(c);
    }

    fn partial_remove(&mut self, c: ChunkId) {
        let ch = &self.chunks[c as usize];
        let pos = ch.partial_pos as usize;
        let list = &mut self.layers[ch.layer as usize].partial[ch.class as usize];
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            self.chunks[moved as usize].partial_pos = pos as u32;
        }
        self.chunks[c as usize].partial_pos = NONE;
    }

    // ----- trace -------------------------------------------------------------------

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
