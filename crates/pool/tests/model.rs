//! Property tests: random admit / append / compress / move / finish / evict / step
//! sequences on small pools, checked after every operation against a simple model (the
//! live pages of each sequence, the reservations, the freed regions and the epoch that
//! frees them): no overlap of live slots, no page lost, no slot or segment handed out
//! while a read of its old page may be in flight, every segment owned by one running
//! sequence and holding only its pages of one layer, a released sequence's segments
//! waiting whole for their epoch, the device mirror built from the recorded changes equal
//! to the page table, admission exact (what it reports can be reserved and allocated, one
//! more cannot), and no leak once everything finishes.

use std::collections::BTreeMap;

use kvcodec_pool::{
    Change, CompressOutcome, Error, ID_BLOCK, INVALID_WORD, Location, PageFormat, PageId, Pool, PoolConfig,
    SLOT_ALIGN, SeqId, SizeClasses,
};
use proptest::prelude::*;

/// 64-byte open pages, classes 16, 32, 48; 256-byte chunks.
const OPEN: u32 = 64;
const CHUNK: u64 = 256;

#[derive(Clone, Debug)]
enum Op {
    /// Admit a request of this many pages per layer if it fits.
    Admit(u64),
    /// Sequence `seq % live` appends a page in layer `layer % layers`.
    Append { seq: usize, layer: u32 },
    /// Open page `page % open` fills and compresses to `bytes`.
    Compress { page: usize, bytes: u32 },
    /// Full page `page % full` moves.
    Move { page: usize },
    /// Sequence `seq % live` finishes (or is evicted: the same for the allocator).
    Finish { seq: usize },
    /// The compressed reservation policy's append: sequence `seq % live` takes a page in
    /// every layer; on a shortfall the youngest other sequence is preempted (released
    /// whole, vLLM's recompute) until it fits or none is left.
    GrowOrPreempt { seq: usize },
    /// Submit the next epoch, then complete up to `lag` epochs behind it.
    Step { lag: u64 },
    /// Sequence `seq % live` takes a row (`Pool::alloc_row`) and compresses its open
    /// pages (`Pool::compress_pages`, sizes from `bytes`), or both in one call
    /// (`fused`: `Pool::advance_row`), checked against the loops of `Pool::alloc` and
    /// `Pool::compress` on a copy of the pool.
    Row { seq: usize, bytes: u32, fused: bool },
    /// Sequence `seq % live` prefills `pages` pages of layer `layer % layers`
    /// (`Pool::prefill_layer`, with an open tail or not), checked the same way.
    Prefill { seq: usize, layer: u32, pages: usize, tail: bool, bytes: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u64..6).prop_map(Op::Admit),
        6 => (any::<usize>(), 0u32..4).prop_map(|(seq, layer)| Op::Append { seq, layer }),
        4 => (any::<usize>(), 1u32..80).prop_map(|(page, bytes)| Op::Compress { page, bytes }),
        1 => any::<usize>().prop_map(|page| Op::Move { page }),
        1 => any::<usize>().prop_map(|seq| Op::Finish { seq }),
        2 => any::<usize>().prop_map(|seq| Op::GrowOrPreempt { seq }),
        3 => (0u64..3).prop_map(|lag| Op::Step { lag }),
        4 => (any::<usize>(), 1u32..80, any::<bool>()).prop_map(|(seq, bytes, fused)| Op::Row { seq, bytes, fused }),
        1 => (any::<usize>(), 0u32..4, 0usize..4, any::<bool>(), 1u32..80)
            .prop_map(|(seq, layer, pages, tail, bytes)| Op::Prefill { seq, layer, pages, tail, bytes }),
    ]
}

/// What the model knows.
#[derive(Default)]
struct Model {
    /// Live pages: page -> (seq, layer, open?).
    pages: BTreeMap<PageId, (SeqId, u32, bool)>,
    /// Pages per layer still reserved per sequence.
    reserve: BTreeMap<SeqId, Vec<u64>>,
    /// Arena ranges freed, with the epoch after whose completion they may be reused.
    freed: Vec<(u64, u64, u64)>,
    /// Page ids freed, with the epoch after whose completion they may be reused (the
    /// device page table entry may still be read until then).
    freed_ids: Vec<(PageId, u64)>,
    next_seq: SeqId,
    epoch: u64,
    /// The device page table as the recorded changes build it, by id.
    mirror: Vec<u64>,
}

impl Model {
    fn free(&mut self, pool: &Pool, at: Location) {
        let start = at.arena_offset(CHUNK);
        self.freed.push((start, start + u64::from(at.slot_bytes), pool.submitted() + 1));
    }

    /// A page's old location is freed at once when it was a slab slot; a segment's
    /// extent stays held until the sequence is released.
    fn free_if_slab(&mut self, pool: &Pool, at: Location, was_slab: bool) {
        if was_slab {
            self.free(pool, at);
        }
    }

    /// Applies the changes the pool recorded to the mirror, as a device backend does.
    fn mirror(&mut self, pool: &mut Pool) {
        for c in pool.take_changes() {
            let (page, word) = match c {
                Change::Alloc { page, at } => (page, at.arena_offset(CHUNK) << 1),
                Change::Move(m) => {
                    (m.page, (m.to.arena_offset(CHUNK) << 1) | u64::from(m.to.slot_bytes < OPEN))
                }
                Change::FreeBlock { block, pages } => {
                    let first = (block * ID_BLOCK) as usize;
                    self.mirror.get_mut(first..first + pages as usize).unwrap().fill(INVALID_WORD);
                    continue;
                }
            };
            if self.mirror.len() <= page as usize {
                self.mirror.resize(page as usize + 1, INVALID_WORD);
            }
            self.mirror[page as usize] = word;
        }
    }

    /// A location handed out must not overlap a freed range whose epoch has not completed.
    fn check_fresh(&self, pool: &Pool, at: Location) -> Result<(), TestCaseError> {
        let (s, e) = (at.arena_offset(CHUNK), at.arena_offset(CHUNK) + u64::from(at.slot_bytes));
        for &(fs, fe, epoch) in &self.freed {
            prop_assert!(
                e <= fs || fe <= s || epoch <= pool.completed(),
                "{at:?} reused while epoch {epoch} may still read it (completed {})",
                pool.completed()
            );
        }
        Ok(())
    }
}

fn pool_strategy() -> impl Strategy<Value = Pool> {
    (1u32..4, 0u32..4, 0u32..6, prop_oneof![Just(0u32), Just(50)]).prop_map(
        |(layers, private_chunks, shared_chunks, tail_fill_percent)| {
            let classes = SizeClasses::stepped(16, OPEN, 16).unwrap();
            Pool::new(PoolConfig {
                layers,
                chunk_bytes: CHUNK,
                private_chunks,
                shared_chunks,
                page_tokens: 16,
                classes,
                tail_fill_percent,
            })
            .unwrap()
        },
    )
}

/// The invariants that must hold after every operation.
fn check(pool: &Pool, model: &Model) -> Result<(), TestCaseError> {
    let cfg = pool.config();
    // The page table is the model's live set, and each page sits in a chunk of its layer
    // and of its slot's class.
    let table: Vec<_> = pool.page_table().collect();
    prop_assert_eq!(table.len(), model.pages.len());
    let mut per_chunk = vec![0u32; cfg.chunks() as usize];
    let mut ranges = Vec::new();
    for (page, e) in &table {
        let &(seq, layer, open) =
            model.pages.get(page).ok_or_else(|| TestCaseError::fail("page not in model"))?;
        prop_assert_eq!((e.seq, e.layer, e.format == PageFormat::Open), (seq, layer, open));
        let info = pool.chunk_info(e.location.chunk).unwrap();
        prop_assert_eq!(info.layer, Some(layer));
        prop_assert!(cfg.classes.bytes().contains(&e.location.slot_bytes));
        prop_assert!(u64::from(e.location.offset + e.location.slot_bytes) <= CHUNK);
        match (info.class, info.owner) {
            (Some(class), None) => {
                // A slab slot: open or kept BF16 pages of the open class.
                prop_assert_eq!(class, cfg.classes.open());
                prop_assert_eq!(e.location.slot_bytes, OPEN);
                prop_assert_eq!(e.location.offset % OPEN, 0);
                prop_assert!(
                    !matches!(e.format, PageFormat::Compressed { .. }),
                    "page {} compressed in a slab",
                    page
                );
            }
            (None, Some(owner)) => {
                // An extent of the owner's segment of this layer, below what it handed out.
                prop_assert_eq!(owner, seq, "page {} in another sequence's segment", page);
                prop_assert!(e.format != PageFormat::Open);
                prop_assert_eq!(e.location.offset % SLOT_ALIGN, 0);
                prop_assert!(e.location.offset + e.location.slot_bytes <= info.used_bytes);
            }
            other => prop_assert!(false, "page {} in chunk {:?}: {:?}", page, info, other),
        }
        if let Some(b) = e.format.content_bytes() {
            let kept = matches!(e.format, PageFormat::Bf16 { .. });
            prop_assert!(
                kept || b <= e.location.slot_bytes,
                "page {} holds {} bytes in a {}-byte slot",
                page,
                b,
                e.location.slot_bytes
            );
        }
        per_chunk[e.location.chunk as usize] += 1;
        let s = e.location.arena_offset(CHUNK);
        ranges.push((s, s + u64::from(e.location.slot_bytes), *page));
    }
    // No overlap.
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        prop_assert!(w[0].1 <= w[1].0, "pages {} and {} overlap", w[0].2, w[1].2);
    }
    // Chunk accounting: live counts match, nothing over capacity, empty chunks are free,
    // every segment belongs to a running sequence.
    for c in 0..cfg.chunks() {
        let info = pool.chunk_info(c).unwrap();
        prop_assert_eq!(info.live, per_chunk[c as usize]);
        if info.class.is_some() {
            prop_assert!(info.live + info.spare + info.pending <= info.slots);
            prop_assert!(info.live + info.spare + info.pending > 0, "chunk {} {:?}", c, info);
        } else if let Some(owner) = info.owner {
            prop_assert!(model.reserve.contains_key(&owner), "segment {} of finished sequence {}", c, owner);
            prop_assert!(info.used_bytes > 0 && u64::from(info.used_bytes) <= CHUNK);
        } else if info.layer.is_some() {
            prop_assert_eq!((info.live, info.pending), (0, 1), "a released segment waits whole");
        }
    }
    // The totals agree with the chunks' own reports (`stats` reads the chunk tags and the
    // free lists; `chunk_info` the tag, the free lists and the pending queue per chunk).
    let infos: Vec<_> = (0..cfg.chunks()).map(|c| pool.chunk_info(c).unwrap()).collect();
    let stats = pool.stats();
    prop_assert_eq!(stats.chunks_in_use as usize, infos.iter().filter(|i| i.layer.is_some()).count());
    prop_assert_eq!(
        stats.segments as usize,
        infos.iter().filter(|i| i.layer.is_some() && i.class.is_none()).count(),
        "segments: owned and released ones waiting for their epoch"
    );
    // The mirror built from the recorded changes is the page table's device words.
    let words: BTreeMap<PageId, u64> = table.iter().map(|(p, e)| (*p, e.device_word(CHUNK))).collect();
    for (id, &word) in model.mirror.iter().enumerate() {
        prop_assert_eq!(
            word,
            words.get(&(id as PageId)).copied().unwrap_or(INVALID_WORD),
            "mirror of id {}",
            id
        );
    }
    prop_assert!(words.keys().all(|&p| (p as usize) < model.mirror.len()));
    // Reservations match the model.
    for (seq, r) in &model.reserve {
        prop_assert_eq!(pool.reserved(*seq), Some(r.clone()));
    }
    // Admission is exact: n pages reserve and allocate in every layer, n + 1 do not.
    let n = pool.admissible_pages();
    let mut trial = pool.clone();
    prop_assert_eq!(
        trial.reserve(SeqId::MAX, n + 1),
        Err(Error::ReservationTooLarge { requested: n + 1, admissible: n })
    );
    trial.reserve(SeqId::MAX, n).unwrap();
    for layer in 0..cfg.layers {
        for _ in 0..n {
            let p = trial.alloc(SeqId::MAX, layer);
            prop_assert!(p.is_ok(), "admission said {} pages fit; layer {}: {:?}", n, layer, p);
        }
    }
    // ... and every running sequence can still take all it reserved.
    for (&seq, r) in &model.reserve {
        for (layer, &k) in r.iter().enumerate() {
            for _ in 0..k {
                prop_assert!(trial.alloc(seq, layer as u32).is_ok());
            }
        }
    }
    Ok(())
}

fn apply(pool: &mut Pool, model: &mut Model, op: Op) -> Result<(), TestCaseError> {
    let seqs: Vec<SeqId> = model.reserve.keys().copied().collect();
    let layers = pool.config().layers;
    match op {
        Op::Admit(pages) => {
            let fits = pool.admissible_pages() >= pages;
            let seq = model.next_seq;
            let r = pool.reserve(seq, pages);
            prop_assert_eq!(r.is_ok(), fits);
            if fits {
                model.next_seq += 1;
                model.reserve.insert(seq, vec![pages; layers as usize]);
            }
        }
        Op::Append { seq, layer } if !seqs.is_empty() => {
            let (seq, layer) = (seqs[seq % seqs.len()], layer % layers);
            let reserved = model.reserve[&seq][layer as usize] > 0;
            let r = pool.alloc(seq, layer);
            allocated(pool, model, seq, layer, reserved, r)?;
        }
        Op::Compress { page, bytes } => {
            let open: Vec<PageId> = model.pages.iter().filter(|(_, v)| v.2).map(|(&p, _)| p).collect();
            if let Some(&p) = open.get(page % open.len().max(1)) {
                let before = pool.entry(p).unwrap().location;
                let outcome = pool.compress(p, bytes).unwrap();
                compressed(pool, model, p, bytes, before, outcome)?;
            }
        }
        Op::Row { seq, bytes, fused } if !seqs.is_empty() => {
            let seq = seqs[seq % seqs.len()];
            let open: Vec<PageId> =
                model.pages.iter().filter(|(_, v)| v.0 == seq && v.2).map(|(&p, _)| p).collect();
            // Sizes of 0 included: a row stops at `ZeroCompressedBytes` as the loop does.
            let sizes: Vec<u32> = (0..open.len() as u32).map(|i| (bytes + 29 * i) % 80).collect();
            // The reference: the loops of single calls on a copy.
            let mut twin = pool.clone();
            let mut expect = Vec::new();
            for layer in 0..layers {
                let r = twin.alloc(seq, layer);
                let stop = r.is_err();
                expect.push(r);
                if stop {
                    break;
                }
            }
            let before: Vec<Location> = open.iter().map(|&p| twin.entry(p).unwrap().location).collect();
            let full = expect.iter().all(Result::is_ok);
            let mut outcomes = Vec::new();
            for (&p, &b) in open.iter().zip(&sizes).filter(|_| full) {
                let r = twin.compress(p, b);
                let stop = r.is_err();
                outcomes.push(r);
                if stop {
                    break;
                }
            }
            // The step's hint first (this row, every live sequence, an unknown one): it
            // changes nothing the twin, which had none, does not show.
            let mut touched = vec![seq, SeqId::MAX];
            touched.extend_from_slice(&seqs);
            pool.touch_rows(&touched);
            let mut ids = vec![0; layers as usize];
            let mut got = vec![CompressOutcome::Kept; open.len()];
            // The fused call's one result: the allocations' error, else the compressions'.
            let fused_result = fused.then(|| pool.advance_row(seq, &open, &sizes, &mut got, &mut ids));
            let r = fused_result.clone().unwrap_or_else(|| pool.alloc_row(seq, &mut ids));
            match (expect.last(), &fused_result) {
                (Some(Err(e)), _) => prop_assert_eq!(r, Err(e.clone())),
                (_, None) => prop_assert_eq!(r, Ok(())),
                (_, Some(_)) => {}
            }
            let reserved: Vec<bool> = model.reserve[&seq].iter().map(|&k| k > 0).collect();
            for (layer, e) in expect.into_iter().enumerate() {
                if let Ok(p) = e {
                    prop_assert_eq!(ids[layer], p);
                }
                allocated(pool, model, seq, layer as u32, reserved[layer], e)?;
            }
            if full {
                let r = fused_result.unwrap_or_else(|| pool.compress_pages(&open, &sizes, &mut got));
                match outcomes.last() {
                    Some(Err(e)) => prop_assert_eq!(r, Err(e.clone())),
                    _ => prop_assert_eq!(r, Ok(())),
                }
                for (i, o) in outcomes.into_iter().enumerate() {
                    if let Ok(o) = o {
                        prop_assert_eq!(got[i], o);
                        compressed(pool, model, open[i], sizes[i], before[i], o)?;
                    }
                }
            }
            same(pool, &mut twin)?;
        }
        Op::Prefill { seq, layer, pages, tail, bytes } if !seqs.is_empty() => {
            let (seq, layer) = (seqs[seq % seqs.len()], layer % layers);
            let sizes: Vec<u32> = (0..pages as u32).map(|i| 1 + (bytes + 37 * i) % 79).collect();
            let mut twin = pool.clone();
            let (mut expect, mut outcomes, mut before) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..pages + usize::from(tail) {
                let r = twin.alloc(seq, layer);
                let page = r.clone();
                expect.push(r);
                let Ok(p) = page else { break };
                if let Some(&b) = sizes.get(i) {
                    before.push(twin.entry(p).unwrap().location);
                    outcomes.push(twin.compress(p, b).unwrap());
                }
            }
            let mut ids = vec![0; pages + usize::from(tail)];
            let mut got = vec![CompressOutcome::Kept; pages];
            let r = pool.prefill_layer(seq, layer, &sizes, tail, &mut ids, &mut got);
            match expect.last() {
                Some(Err(e)) => prop_assert_eq!(r, Err(e.clone())),
                _ => prop_assert_eq!(r, Ok(())),
            }
            for (i, e) in expect.into_iter().enumerate() {
                let reserved = model.reserve[&seq][layer as usize] > 0;
                let page = e.clone();
                allocated(pool, model, seq, layer, reserved, e)?;
                if let (Ok(p), Some(&o)) = (page, outcomes.get(i)) {
                    prop_assert_eq!((ids[i], got[i]), (p, o));
                    compressed(pool, model, p, sizes[i], before[i], o)?;
                }
            }
            same(pool, &mut twin)?;
        }
        Op::Move { page } => {
            let full: Vec<PageId> = model.pages.iter().filter(|(_, v)| !v.2).map(|(&p, _)| p).collect();
            if let Some(&p) = full.get(page % full.len().max(1)) {
                let before = pool.entry(p).unwrap().location;
                let was_slab = pool.chunk_info(before.chunk).unwrap().class.is_some();
                match pool.move_page(p) {
                    Ok(m) => {
                        prop_assert_ne!(m.to.chunk, before.chunk);
                        prop_assert_eq!(pool.chunk_info(m.to.chunk).unwrap().owner, Some(model.pages[&p].0));
                        model.check_fresh(pool, m.to)?;
                        model.free_if_slab(pool, before, was_slab);
                    }
                    Err(e) => prop_assert_eq!(e, Error::NoCapacity { layer: model.pages[&p].1 }),
                }
            }
        }
        Op::Finish { seq } if !seqs.is_empty() => finish(pool, model, seqs[seq % seqs.len()])?,
        Op::GrowOrPreempt { seq } if !seqs.is_empty() => {
            let seq = seqs[seq % seqs.len()];
            loop {
                let reserved = model.reserve[&seq].iter().all(|&k| k > 0);
                if reserved || pool.admissible_pages() >= 1 {
                    for layer in 0..layers {
                        apply(
                            pool,
                            model,
                            Op::Append { seq: model.reserve.keys().position(|&s| s == seq).unwrap(), layer },
                        )?;
                        prop_assert!(
                            model.pages.values().filter(|v| v.0 == seq && v.1 == layer && v.2).count() > 0
                        );
                    }
                    break;
                }
                let Some(&victim) = model.reserve.keys().filter(|&&s| s != seq).max() else { break };
                let before = pool.admissible_pages();
                finish(pool, model, victim)?;
                // Preemption releases everything: no page, no reservation, no room lost.
                prop_assert!(pool.seq_pages(victim).is_none() && pool.reserved(victim).is_none());
                prop_assert!(pool.page_table().all(|(_, e)| e.seq != victim));
                prop_assert!(pool.admissible_pages() >= before);
            }
        }
        Op::Step { lag } => {
            model.epoch += 1;
            pool.submit(model.epoch).unwrap();
            let done = model.epoch.saturating_sub(lag).max(pool.completed());
            pool.complete(done).unwrap();
            model.freed.retain(|&(_, _, e)| e > done);
            model.freed_ids.retain(|&(_, e)| e > done);
        }
        Op::Append { .. }
        | Op::Finish { .. }
        | Op::GrowOrPreempt { .. }
        | Op::Row { .. }
        | Op::Prefill { .. } => {}
    }
    Ok(())
}

/// The model's side of an allocation of `seq` in `layer` (`reserved`: whether the model
/// had a reservation there): a new page is fresh and its id not in use; a failure is a
/// shortfall beyond the reservations.
fn allocated(
    pool: &Pool,
    model: &mut Model,
    seq: SeqId,
    layer: u32,
    reserved: bool,
    r: Result<PageId, Error>,
) -> Result<(), TestCaseError> {
    match r {
        Ok(p) => {
            model.check_fresh(pool, pool.entry(p).unwrap().location)?;
            let early = model.freed_ids.iter().find(|&&(id, e)| id == p && e > pool.completed());
            prop_assert!(early.is_none(), "page id {} reused before its epoch completed", p);
            prop_assert!(model.pages.insert(p, (seq, layer, true)).is_none(), "page id {} reused live", p);
            if reserved {
                model.reserve.get_mut(&seq).unwrap()[layer as usize] -= 1;
            }
        }
        Err(e) => {
            prop_assert!(!reserved, "a reserved page failed: {:?}", e);
            prop_assert_eq!(e, Error::NoCapacity { layer });
        }
    }
    Ok(())
}

/// The model's side of page `p`'s compression to `bytes` (it was at `before`).
fn compressed(
    pool: &Pool,
    model: &mut Model,
    p: PageId,
    bytes: u32,
    before: Location,
    outcome: CompressOutcome,
) -> Result<(), TestCaseError> {
    if let CompressOutcome::Moved(m) = outcome {
        prop_assert_eq!(m.from, before);
        prop_assert!(m.to.slot_bytes >= bytes && m.to.slot_bytes < OPEN);
        prop_assert_eq!(pool.chunk_info(m.to.chunk).unwrap().owner, Some(model.pages[&p].0));
        model.check_fresh(pool, m.to)?;
        model.free(pool, before);
    }
    model.pages.get_mut(&p).unwrap().2 = false;
    Ok(())
}

/// A row or prefill call left `pool` as the loop of single calls left `twin`: the same
/// page table, chunks, totals, admission, recorded changes and trace.
fn same(pool: &Pool, twin: &mut Pool) -> Result<(), TestCaseError> {
    prop_assert_eq!(pool.page_table().collect::<Vec<_>>(), twin.page_table().collect::<Vec<_>>());
    for c in 0..pool.config().chunks() {
        prop_assert_eq!(pool.chunk_info(c), twin.chunk_info(c));
    }
    prop_assert_eq!(pool.stats(), twin.stats());
    prop_assert_eq!(pool.admissible_pages(), twin.admissible_pages());
    prop_assert_eq!(pool.clone().take_changes(), twin.take_changes());
    prop_assert_eq!(pool.clone().take_trace(), twin.take_trace());
    Ok(())
}

/// Sequence `seq` finishes or is preempted: its pages and reservation go.
fn finish(pool: &mut Pool, model: &mut Model, seq: SeqId) -> Result<(), TestCaseError> {
    let mine: Vec<PageId> = model.pages.iter().filter(|(_, v)| v.0 == seq).map(|(&p, _)| p).collect();
    for &p in &mine {
        let at = pool.entry(p).unwrap().location;
        let was_slab = pool.chunk_info(at.chunk).unwrap().class.is_some();
        model.free_if_slab(pool, at, was_slab);
        model.freed_ids.push((p, pool.submitted() + 1));
        model.pages.remove(&p);
    }
    // Its segments are freed whole.
    let segments = pool.seq_segments(seq).unwrap().to_vec();
    for &c in &segments {
        model.free(pool, Location { chunk: c, offset: 0, slot_bytes: CHUNK as u32 });
    }
    let reclaimed = pool.stats().segments_reclaimed;
    prop_assert_eq!(pool.release(seq).unwrap(), mine.len());
    for &c in &segments {
        let info = pool.chunk_info(c).unwrap();
        prop_assert_eq!((info.owner, info.pending), (None, 1), "segment {} waits for its epoch", c);
    }
    prop_assert_eq!(pool.stats().segments_reclaimed, reclaimed, "nothing reclaimed before the epoch");
    model.reserve.remove(&seq);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn random_serving_sequences_keep_the_invariants(mut pool in pool_strategy(), ops in prop::collection::vec(op(), 1..120)) {
        let mut model = Model::default();
        pool.record_changes(true);
        check(&pool, &model)?;
        for op in ops {
            apply(&mut pool, &mut model, op)?;
            model.mirror(&mut pool);
            check(&pool, &model)?;
        }
        // No leak: finishing everything and completing every epoch frees every chunk.
        for seq in model.reserve.keys().copied().collect::<Vec<_>>() {
            pool.release(seq).unwrap();
        }
        let last = pool.submitted() + 1;
        pool.submit(last).unwrap();
        pool.complete(last).unwrap();
        let cfg = pool.config().clone();
        model.mirror(&mut pool);
        prop_assert!(model.mirror.iter().all(|&w| w == INVALID_WORD), "the mirror holds no live word");
        prop_assert_eq!(pool.page_table().count(), 0);
        prop_assert_eq!(pool.stats().chunks_in_use, 0);
        prop_assert_eq!(pool.stats().pending, 0);
        prop_assert_eq!(pool.stats().shared_free, cfg.shared_chunks);
        prop_assert_eq!(pool.admissible_pages(), u64::from(cfg.private_chunks + cfg.shared_chunks / cfg.layers) * u64::from(cfg.slots_per_chunk(cfg.classes.open())));
    }

    #[test]
    fn a_recorded_trace_replays_to_the_same_page_table(mut pool in pool_strategy(), ops in prop::collection::vec(op(), 1..80)) {
        let mut model = Model::default();
        pool.record_trace(true);
        for op in ops {
            apply(&mut pool, &mut model, op)?;
        }
        let text = pool.take_trace().join("\n");
        let replayed = kvcodec_pool::trace::replay(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(replayed.page_table().collect::<Vec<_>>(), pool.page_table().collect::<Vec<_>>());
    }
}
