//! Hand-built cases: the seed's cross-layer example, stream-ordered reuse, exact
//! admission, the reservation guard on compression, packing into request-owned segments
//! and their release per segment, errors, traces.

use kvcodec_pool::{
    Change, ChunkHome, CompressOutcome, Error, ID_BLOCK, INVALID_WORD, PageFormat, PageId, Pool, PoolConfig,
    SizeClasses, trace,
};

/// 64-byte open pages, compressed classes 16, 32, 48; 256-byte chunks (4 open slots).
fn tiny(layers: u32, private_chunks: u32, shared_chunks: u32) -> Pool {
    Pool::new(tiny_config(layers, private_chunks, shared_chunks)).unwrap()
}

/// [`tiny`]'s configuration, for tests that change one field.
fn tiny_config(layers: u32, private_chunks: u32, shared_chunks: u32) -> PoolConfig {
    let classes = SizeClasses::stepped(16, 64, 16).unwrap();
    PoolConfig {
        layers,
        chunk_bytes: 256,
        private_chunks,
        shared_chunks,
        page_tokens: 16,
        classes,
        tail_fill_percent: 0,
    }
}

/// Fills 16 pages in each of two layers, compresses layer 0's to 16 bytes (a quarter)
/// and layer 1's not at all, lets the step complete; returns the pages that fit then.
fn seed_example(pool: &mut Pool) -> u64 {
    pool.reserve(1, 16).unwrap();
    let mut pages = [Vec::new(), Vec::new()];
    for (layer, p) in pages.iter_mut().enumerate() {
        for _ in 0..16 {
            p.push(pool.alloc(1, layer as u32).unwrap());
        }
    }
    pool.submit(1).unwrap();
    for &p in &pages[0] {
        assert!(matches!(pool.compress(p, 16).unwrap(), CompressOutcome::Moved(_)));
    }
    for &p in &pages[1] {
        assert_eq!(pool.compress(p, 64).unwrap(), CompressOutcome::Kept);
    }
    pool.submit(2).unwrap();
    pool.complete(2).unwrap();
    pool.admissible_pages()
}

#[test]
fn shared_pool_lends_one_layers_savings_to_another() {
    // Seed 002's figure: capacity is set by the tightest layer. Both pools hold 12
    // chunks. Without a shared pool layer 0's 5 empty chunks sit idle (layer 1 has 2:
    // 8 pages); with one, they serve layer 1 too: 8 + 4 free chunks' worth, 12 pages.
    assert_eq!(seed_example(&mut tiny(2, 6, 0)), 8);
    assert_eq!(seed_example(&mut tiny(2, 2, 8)), 12);
}

#[test]
fn a_freed_slot_is_reused_only_after_its_epoch_completes() {
    let mut pool = tiny(1, 1, 0);
    pool.reserve(1, 4).unwrap();
    let a = pool.alloc(1, 0).unwrap();
    let at = pool.entry(a).unwrap().location;
    pool.submit(1).unwrap(); // step 1 reads page a
    pool.release(1).unwrap(); // freed while the host prepares step 2
    pool.reserve(2, 4).unwrap_err(); // the slot is pending: only 3 pages fit
    assert_eq!(pool.admissible_pages(), 3);
    pool.complete(1).unwrap(); // step 1 done, step 2 may still read it
    assert_eq!(pool.admissible_pages(), 3);
    pool.reserve(2, 3).unwrap();
    let b = pool.alloc(2, 0).unwrap();
    assert_ne!(pool.entry(b).unwrap().location, at);
    pool.submit(2).unwrap();
    pool.complete(2).unwrap();
    // Three slots of the chunk are free (a's again), one holds b.
    assert_eq!(pool.admissible_pages(), 1);
    assert_eq!(pool.stats().pending, 0);
}

#[test]
fn a_chunk_returns_to_the_shared_pool_when_empty_with_no_read_in_flight() {
    let mut pool = tiny(2, 0, 2);
    pool.reserve(1, 1).unwrap();
    let p = pool.alloc(1, 1).unwrap();
    let chunk = pool.entry(p).unwrap().location.chunk;
    assert_eq!(pool.chunk_info(chunk).unwrap().layer, Some(1));
    assert_eq!(pool.stats().shared_free, 1);
    pool.submit(1).unwrap();
    pool.release(1).unwrap();
    pool.submit(2).unwrap();
    pool.complete(1).unwrap();
    assert_eq!(pool.stats().shared_free, 1, "a read may be in flight: the chunk stays with layer 1");
    pool.complete(2).unwrap();
    let info = pool.chunk_info(chunk).unwrap();
    assert_eq!((info.home, info.layer, info.class), (ChunkHome::Shared, None, None));
    assert_eq!(pool.stats().shared_free, 2);
    // ... and layer 0 can now take both shared chunks.
    pool.reserve(2, 0).unwrap();
    for _ in 0..8 {
        pool.alloc(2, 0).unwrap();
    }
    assert_eq!(pool.alloc(2, 0), Err(Error::NoCapacity { layer: 0 }));
}

#[test]
fn admission_is_exact_and_counts_reservations() {
    let mut pool = tiny(3, 1, 3);
    // 3 layers x 1 private chunk + 3 shared: 4 + 4 pages per layer.
    assert_eq!(pool.admissible_pages(), 8);
    assert_eq!(pool.admissible_requests(16 * 3, 16), 2); // 4 pages each
    pool.reserve(1, 5).unwrap();
    assert_eq!(pool.admissible_pages(), 3);
    assert_eq!(pool.reserve(2, 4), Err(Error::ReservationTooLarge { requested: 4, admissible: 3 }));
    // Past a sequence's 32-bit count per layer: its own error, checked before the room.
    let past = u64::from(u32::MAX);
    assert_eq!(pool.reserve(1, past), Err(Error::ReservationPastLimit { seq: 1, held: 5, requested: past }));
    assert_eq!(
        pool.reserve(9, past + 1),
        Err(Error::ReservationPastLimit { seq: 9, held: 0, requested: past + 1 })
    );
    assert_eq!(pool.admissible_pages(), 3);
    pool.reserve(2, 3).unwrap();
    assert_eq!(pool.admissible_pages(), 0);
    // Every reserved page can be allocated, in any layer order.
    for layer in [2, 0, 1] {
        for _ in 0..5 {
            pool.alloc(1, layer).unwrap();
        }
    }
    for layer in 0..3 {
        for _ in 0..3 {
            pool.alloc(2, layer).unwrap();
        }
    }
    // A sequence past its reservation gets nothing more.
    assert_eq!(pool.alloc(2, 0), Err(Error::NoCapacity { layer: 0 }));
    assert_eq!(pool.reserved(1), Some(vec![0, 0, 0]));
}

#[test]
fn admission_is_exact_while_every_layer_draws_on_the_shared_pool() {
    // Five layers grown unevenly into sixty shared chunks: the query's bracket (every
    // layer short of its own room) and bisection against what a reservation accepts.
    let mut pool = tiny(5, 1, 60);
    pool.reserve(1, 0).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..220 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        // Skewed towards layer 0: layers' slacks differ by tens of pages.
        let layer = ((x >> 33) % 5 * ((x >> 45) % 5) / 4) as u32;
        pool.alloc(1, layer).unwrap();
        let n = pool.admissible_pages();
        let mut trial = pool.clone();
        assert_eq!(
            trial.reserve(2, n + 1),
            Err(Error::ReservationTooLarge { requested: n + 1, admissible: n })
        );
        trial.reserve(2, n).unwrap();
    }
    assert!(pool.admissible_pages() < 10, "the test reached a nearly full pool");
}

#[test]
fn admission_is_exact_with_one_open_slot_per_chunk() {
    // 64-byte chunks hold one 64-byte open page: the shortfall in chunks is the shortfall
    // in pages (no reciprocal multiply exists for a divisor of 1).
    let mut pool = Pool::new(PoolConfig { chunk_bytes: 64, ..tiny_config(2, 1, 2) }).unwrap();
    // Each layer: its private page, then the two shared chunks split between them.
    assert_eq!(pool.admissible_pages(), 2);
    pool.reserve(1, 2).unwrap();
    assert_eq!(pool.admissible_pages(), 0);
    for layer in 0..2 {
        for _ in 0..2 {
            pool.alloc(1, layer).unwrap();
        }
    }
    assert_eq!(pool.alloc(1, 0), Err(Error::NoCapacity { layer: 0 }));
}

#[test]
fn compression_never_takes_a_chunk_a_reservation_needs() {
    let mut pool = tiny(1, 2, 0);
    pool.reserve(1, 8).unwrap(); // both chunks' worth of open pages
    let p = pool.alloc(1, 0).unwrap();
    // A 16-byte class chunk would leave 4 open slots for 7 reserved pages: kept BF16.
    assert_eq!(pool.compress(p, 16).unwrap(), CompressOutcome::Kept);
    assert_eq!(pool.entry(p).unwrap().format, PageFormat::Bf16 { compressed_bytes: 16 });
    for _ in 0..7 {
        pool.alloc(1, 0).unwrap();
    }
    // No room for a compact chunk at all: a later move fails cleanly.
    assert_eq!(pool.move_page(p), Err(Error::NoCapacity { layer: 0 }));
}

#[test]
fn a_kept_page_compresses_later_by_moving() {
    let mut pool = tiny(1, 2, 0);
    pool.reserve(1, 1).unwrap();
    pool.reserve(2, 4).unwrap();
    let p = pool.alloc(1, 0).unwrap();
    // A class chunk would leave 3 + 4 - 4 open slots for 4 reserved pages.
    assert_eq!(pool.compress(p, 40).unwrap(), CompressOutcome::Kept);
    pool.release(2).unwrap();
    let m = pool.move_page(p).unwrap();
    assert!(m.compress);
    assert_eq!((m.to.slot_bytes, m.bytes), (48, 40));
    assert_eq!(pool.entry(p).unwrap().format, PageFormat::Compressed { bytes: 40 });
}

#[test]
fn a_sequence_packs_its_compressed_pages_in_its_own_segments() {
    let mut pool = tiny(1, 8, 0);
    pool.reserve(1, 20).unwrap();
    pool.reserve(2, 2).unwrap();
    // Sequence 1: 20 pages compressed to 16 bytes (16 per 256-byte segment), with two of
    // sequence 2's in between; a step completes after each page (its open slot is free
    // again).
    let mut pages = Vec::new();
    for i in 0..20u64 {
        pool.submit(i + 1).unwrap();
        pool.complete(i + 1).unwrap();
        let p = pool.alloc(1, 0).unwrap();
        assert!(matches!(pool.compress(p, 10).unwrap(), CompressOutcome::Moved(_)));
        pages.push(p);
        if i % 10 == 3 {
            let q = pool.alloc(2, 0).unwrap();
            let CompressOutcome::Moved(m) = pool.compress(q, 30).unwrap() else { panic!("room") };
            assert_eq!(pool.chunk_info(m.to.chunk).unwrap().owner, Some(2));
        }
    }
    let segments = pool.seq_segments(1).unwrap().to_vec();
    assert_eq!(segments.len(), 2);
    for (i, &p) in pages.iter().enumerate() {
        let at = pool.entry(p).unwrap().location;
        assert_eq!((at.chunk, at.offset, at.slot_bytes), (segments[i / 16], 16 * (i as u32 % 16), 16));
    }
    let info = pool.chunk_info(segments[1]).unwrap();
    assert_eq!((info.owner, info.live, info.used_bytes, info.class), (Some(1), 4, 64, None));
    // The release frees both segments whole once its epoch completes.
    pool.submit(21).unwrap();
    pool.complete(21).unwrap();
    let free_before = pool.admissible_pages();
    assert_eq!(pool.release(1).unwrap(), 20);
    assert!(pool.entry(pages[0]).is_none(), "released pages leave the page table at once");
    assert_eq!(pool.chunk_info(segments[0]).unwrap().pending, 1);
    assert_eq!(pool.admissible_pages(), free_before, "nothing is reusable before the epoch");
    pool.submit(22).unwrap();
    pool.complete(22).unwrap();
    assert!(pool.admissible_pages() > free_before);
    assert_eq!(pool.stats().segments_reclaimed, 2);
    for c in segments {
        assert_eq!(pool.chunk_info(c).unwrap().layer, None);
    }
    assert_eq!(pool.stats().segments, 1, "sequence 2's segment stays");
}

#[test]
fn moving_a_compressed_page_leaves_a_hole_until_the_release() {
    let mut pool = tiny(1, 4, 0);
    pool.reserve(1, 2).unwrap();
    let p = pool.alloc(1, 0).unwrap();
    let CompressOutcome::Moved(first) = pool.compress(p, 32).unwrap() else { panic!("room") };
    let m = pool.move_page(p).unwrap();
    assert_eq!((m.from, m.compress, m.bytes), (first.to, false, 32));
    assert_ne!(m.to.chunk, m.from.chunk, "a move goes to another segment");
    assert_eq!(pool.chunk_info(m.from.chunk).unwrap().live, 0);
    assert_eq!(pool.chunk_info(m.from.chunk).unwrap().owner, Some(1), "the hole stays the sequence's");
    assert_eq!(pool.seq_segments(1).unwrap(), &[m.from.chunk, m.to.chunk]);
    pool.release(1).unwrap();
    pool.submit(1).unwrap();
    pool.complete(1).unwrap();
    assert_eq!(pool.stats().chunks_in_use, 0);
}

#[test]
fn recorded_changes_say_what_the_device_mirrors() {
    let mut pool = tiny(1, 4, 0);
    pool.record_changes(true);
    pool.reserve(1, 2).unwrap();
    let p = pool.alloc(1, 0).unwrap();
    let at = pool.entry(p).unwrap().location;
    let CompressOutcome::Moved(m) = pool.compress(p, 20).unwrap() else { panic!("room") };
    assert_eq!(pool.take_changes(), vec![Change::Alloc { page: p, at }, Change::Move(m)]);
    let e = pool.entry(p).unwrap();
    assert_eq!(e.device_word(256), (m.to.arena_offset(256) << 1) | 1);
    let q = pool.alloc(1, 0).unwrap();
    assert_eq!(pool.compress(q, 64).unwrap(), CompressOutcome::Kept);
    assert_eq!(pool.entry(q).unwrap().device_word(256) & 1, 0, "a kept page is read as BF16");
    pool.take_changes();
    pool.release(1).unwrap();
    assert_eq!(pool.take_changes(), vec![Change::FreeBlock { block: p / ID_BLOCK, pages: 2 }]);
    assert_ne!(pool.entry(q).map(|e| e.device_word(256)), Some(INVALID_WORD));
}

#[test]
fn operations_refuse_bad_arguments() {
    let mut pool = tiny(2, 1, 0);
    assert_eq!(pool.alloc(9, 0), Err(Error::UnknownSeq { seq: 9 }));
    pool.reserve(1, 1).unwrap();
    assert_eq!(pool.alloc(1, 2), Err(Error::LayerOutOfRange { layer: 2, layers: 2 }));
    let p = pool.alloc(1, 0).unwrap();
    assert_eq!(pool.move_page(p), Err(Error::OpenPage { page: p }));
    pool.compress(p, 16).unwrap();
    assert_eq!(pool.compress(p, 16), Err(Error::NotOpen { page: p }));
    assert_eq!(pool.compress(p + 1, 16), Err(Error::UnknownPage { page: p + 1 }));
    assert_eq!(pool.submit(0), Err(Error::SubmitOrder { epoch: 0, last: 0 }));
    assert_eq!(pool.complete(1), Err(Error::CompleteOrder { epoch: 1, completed: 0, submitted: 0 }));
    pool.release(1).unwrap();
    assert_eq!(pool.release(1), Err(Error::UnknownSeq { seq: 1 }));
    assert_eq!(pool.entry(p), None, "a released page is gone from the page table at once");
}

#[test]
fn configurations_are_checked() {
    let cfg = |chunk_bytes, classes: Vec<u32>| PoolConfig {
        layers: 1,
        chunk_bytes,
        private_chunks: 1,
        shared_chunks: 0,
        page_tokens: 16,
        classes: SizeClasses::new(classes).unwrap(),
        tail_fill_percent: 0,
    };
    assert_eq!(SizeClasses::new(vec![]), Err(Error::NoClasses));
    assert_eq!(SizeClasses::new(vec![24]), Err(Error::ClassNotAligned { bytes: 24, align: 16 }));
    assert_eq!(SizeClasses::new(vec![32, 32]), Err(Error::ClassOrder { index: 1, bytes: 32 }));
    assert_eq!(
        Pool::new(cfg(32, vec![64])).err(),
        Some(Error::ChunkTooSmall { chunk_bytes: 32, class_bytes: 64 })
    );
    assert_eq!(Pool::new(cfg(0, vec![64])).err(), Some(Error::ZeroField { field: "chunk_bytes" }));
    let big = PoolConfig { shared_chunks: u32::MAX, ..cfg(64, vec![64]) };
    assert!(matches!(Pool::new(big), Err(Error::TooLarge { .. })));
    assert_eq!(SizeClasses::stepped(100, 160, 16).unwrap().bytes(), &[112, 128, 144, 160]);
}

#[test]
fn gaac_slots_and_raw_blocks_are_size_classes() {
    // Llama-3-8B GAAC page: 2 H = 16 slots of C = 2976 bytes; a raw block is 2 N = 4096.
    let (slots, raw, open) = (16 * 2976, 4096, 65536);
    let classes = SizeClasses::new((0..=4).map(|k| slots + k * raw).chain([open]).collect()).unwrap();
    assert_eq!(classes.fit(slots), Some(0));
    assert_eq!(classes.fit(slots + 2 * raw), Some(2));
    assert_eq!(classes.fit(open), Some(5));
    assert_eq!(classes.fit(slots + 5 * raw), None, "five raw blocks: larger than BF16, the page stays BF16");
    assert_eq!(classes.fit(open + 128), None, "an all-raw ZipFusion page is above the BF16 page");
}

#[test]
fn a_trace_replays_and_a_changed_outcome_is_caught() {
    let mut pool = tiny(2, 2, 8);
    pool.record_trace(true);
    seed_example(&mut pool);
    pool.reserve(2, 2).unwrap();
    let p = pool.alloc(2, 1).unwrap();
    pool.compress(p, 30).unwrap();
    pool.release(1).unwrap();
    let lines = pool.take_trace();
    let text = lines.join("\n");
    let replayed = trace::replay(&text).unwrap();
    assert_eq!(replayed.page_table().collect::<Vec<_>>(), pool.page_table().collect::<Vec<_>>());
    // Another location in one alloc line is a mismatch on that line.
    let at = lines.iter().position(|l| l.starts_with("alloc ")).unwrap();
    let mut tampered = lines.clone();
    tampered[at] = tampered[at].replacen(":0:64", ":64:64", 1);
    assert_ne!(tampered[at], lines[at]);
    match trace::replay(&tampered.join("\n")) {
        Err(trace::ReplayError::Mismatch { line, .. }) => assert_eq!(line, at + 1),
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert!(matches!(trace::replay("garbage"), Err(trace::ReplayError::Parse { line: 1, .. })));
}

#[test]
fn moving_a_kept_page_to_another_open_slot_respects_reservations() {
    // Found by the property test: the move's capacity check counted the free open slots
    // of the page's own chunk, which a move cannot use, and took the last shared chunk
    // that layers 1 and 2 had reserved.
    let mut pool = tiny(3, 0, 3);
    pool.reserve(0, 0).unwrap();
    pool.reserve(2, 1).unwrap();
    let p = pool.alloc(0, 0).unwrap();
    assert_eq!(pool.compress(p, 49).unwrap(), CompressOutcome::Kept);
    pool.alloc(0, 0).unwrap();
    assert_eq!(pool.move_page(p), Err(Error::NoCapacity { layer: 0 }));
    for layer in 0..3 {
        pool.alloc(2, layer).unwrap();
    }
}

#[test]
fn a_tail_too_short_to_fill_half_a_segment_stays_bf16() {
    let mut pool = Pool::new(PoolConfig { tail_fill_percent: 50, ..tiny_config(1, 8, 0) }).unwrap();
    // Sequence 1 will hold 8 more 16-byte pages: 9 x 16 = 144 bytes fill half of 256.
    pool.reserve(1, 9).unwrap();
    let p = pool.alloc(1, 0).unwrap();
    assert!(matches!(pool.compress(p, 16).unwrap(), CompressOutcome::Moved(_)));
    // Sequence 2, 2 pages to come: 2 x 16 = 32 bytes would leave its segment mostly empty.
    pool.reserve(2, 2).unwrap();
    let q = pool.alloc(2, 0).unwrap();
    assert_eq!(pool.compress(q, 16).unwrap(), CompressOutcome::Kept);
    assert_eq!(pool.seq_segments(2).unwrap(), &[] as &[u32]);
    // Within an existing segment the rule does not apply: sequence 1's last page packs.
    for _ in 0..8 {
        let r = pool.alloc(1, 0).unwrap();
        assert!(matches!(pool.compress(r, 16).unwrap(), CompressOutcome::Moved(_)));
    }
    assert_eq!(pool.seq_segments(1).unwrap().len(), 1);
    let bad = PoolConfig { tail_fill_percent: 101, ..pool.config().clone() };
    assert_eq!(Pool::new(bad).err(), Some(Error::TailFill { percent: 101 }));
}

/// A decode stream of rows (each step allocates a row, compresses the previous one,
/// moved and kept pages alternating, and completes its epoch) stays on the row calls'
/// one-pass path: only a layer's first slab slot and first segment take the general
/// path. A row's newest page held anywhere but in its layer's record would send every
/// second moved page down the general path.
#[test]
fn decode_rows_stay_on_the_one_pass_path() {
    let layers = 3;
    let mut pool = Pool::new(PoolConfig { chunk_bytes: 4096, ..tiny_config(layers, 2, 2) }).unwrap();
    let steps = 40;
    pool.reserve(1, steps).unwrap();
    let mut previous: Option<Vec<PageId>> = None;
    let mut moved = 0;
    for step in 1..=steps {
        let mut row = vec![0; layers as usize];
        pool.alloc_row(1, &mut row).unwrap();
        if let Some(filled) = previous.take() {
            // 16 bytes move into the segment; 64 (the open class) keep the page BF16.
            let bytes = vec![if step % 2 == 0 { 16 } else { 64 }; filled.len()];
            let mut out = vec![CompressOutcome::Kept; filled.len()];
            pool.compress_pages(&filled, &bytes, &mut out).unwrap();
            moved += out.iter().filter(|o| matches!(o, CompressOutcome::Moved(_))).count();
        }
        previous = Some(row);
        pool.submit(step).unwrap();
        pool.complete(step).unwrap();
    }
    assert_eq!(moved, 20 * layers as usize);
    // Per layer: the first allocation (a fresh slab) and the first move (a fresh segment).
    assert_eq!(pool.row_fallbacks(), 2 * u64::from(layers));
}

#[test]
fn advance_row_is_the_row_calls_in_one() {
    // A decode loop on two copies of a pool: `advance_row` on one, `alloc_row` then
    // `compress_pages` on the other, with segments that fill (256-byte chunks), the tail
    // rule deciding near the end of the reservation, and completions lagging so that a
    // spare slot is sometimes not yet free.
    let layers = 3;
    let cfg = PoolConfig { chunk_bytes: 512, tail_fill_percent: 50, ..tiny_config(layers, 2, 30) };
    let mut pool = Pool::new(cfg).unwrap();
    pool.record_trace(true);
    let steps = 40;
    pool.reserve(1, steps).unwrap();
    let mut twin = pool.clone();
    let mut filled = vec![0; layers as usize];
    pool.alloc_row(1, &mut filled).unwrap();
    twin.alloc_row(1, &mut vec![0; layers as usize]).unwrap();
    for step in 1..steps {
        let bytes: Vec<u32> =
            (0..layers).map(|l| [48, 16, 64, 32][(step as usize + l as usize) % 4]).collect();
        let (mut next, mut twin_next) = (vec![0; layers as usize], vec![0; layers as usize]);
        let (mut out, mut twin_out) = (vec![CompressOutcome::Kept; 3], vec![CompressOutcome::Kept; 3]);
        pool.advance_row(1, &filled, &bytes, &mut out, &mut next).unwrap();
        twin.alloc_row(1, &mut twin_next).unwrap();
        twin.compress_pages(&filled, &bytes, &mut twin_out).unwrap();
        assert_eq!((&next, &out), (&twin_next, &twin_out), "step {step}");
        filled = next;
        for p in [&mut pool, &mut twin] {
            p.submit(step).unwrap();
            if step % 3 != 0 {
                p.complete(step - 1).unwrap();
            }
        }
    }
    let same = |pool: &Pool, twin: &Pool| {
        assert_eq!(pool.page_table().collect::<Vec<_>>(), twin.page_table().collect::<Vec<_>>());
        assert_eq!(pool.stats(), twin.stats());
        assert_eq!(pool.admissible_pages(), twin.admissible_pages());
        let chunks = pool.config().chunks();
        assert!((0..chunks).all(|c| pool.chunk_info(c) == twin.chunk_info(c)));
    };
    same(&pool, &twin);
    assert_eq!(pool.clone().take_trace(), twin.clone().take_trace());
    // What the release and the reclamation find (the slab lists the rows left).
    for p in [&mut pool, &mut twin] {
        p.release(1).unwrap();
        p.submit(steps).unwrap();
        p.complete(steps).unwrap();
    }
    same(&pool, &twin);
    pool.reserve(1, 1).unwrap();
    pool.alloc_row(1, &mut filled).unwrap();
    // Lengths are checked before anything is done.
    let before = pool.stats();
    let mut out = [CompressOutcome::Kept; 3];
    assert_eq!(
        pool.advance_row(1, &filled, &[16; 3], &mut out, &mut [0; 2]),
        Err(Error::LengthMismatch { what: "next", got: 2, expected: 3 })
    );
    assert_eq!(
        pool.advance_row(1, &filled, &[16; 2], &mut out, &mut [0; 3]),
        Err(Error::LengthMismatch { what: "bytes", got: 2, expected: 3 })
    );
    assert_eq!(pool.stats(), before);
}

#[test]
fn the_row_hint_stays_in_bounds_at_a_block_edge_and_for_unknown_sequences() {
    // `touch_rows` takes `&self`, so it cannot change the pool; what can fail is a load
    // past an array: the ids of a full block's next row, a sequence with no page yet, an
    // unknown one, an empty list.
    let mut pool = tiny(2, 40, 0);
    pool.reserve(1, 0).unwrap();
    pool.reserve(2, 3).unwrap();
    for i in 0..ID_BLOCK {
        pool.alloc(1, i % 2).unwrap();
    }
    pool.touch_rows(&[]);
    pool.touch_rows(&[1, 2, 3, 1]);
    let mut row = [0; 2];
    pool.alloc_row(1, &mut row).unwrap();
    assert_eq!(row, [ID_BLOCK, ID_BLOCK + 1], "sequence 1's second id block");
    pool.touch_rows(&[1]);
}

#[test]
fn a_trace_asking_for_a_pool_past_the_replay_bound_is_refused_before_allocating() {
    // A trace is untrusted input: its first line must not make the replay allocate
    // without bound (this 130-byte line asks for 16 M layers).
    let huge = format!(
        "{} layers=16777216 chunk_bytes=16 private_chunks=1 shared_chunks=0 page_tokens=16 tail_fill_percent=0 classes=16",
        trace::TRACE_MAGIC
    );
    match trace::replay(&huge) {
        Err(trace::ReplayError::TooLarge { bytes, limit }) => {
            assert!(bytes > limit);
            assert_eq!(limit, trace::MAX_REPLAY_MODEL_BYTES);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let shared = format!(
        "{} layers=1 chunk_bytes=16 private_chunks=0 shared_chunks=200000000 page_tokens=16 tail_fill_percent=0 classes=16",
        trace::TRACE_MAGIC
    );
    assert!(matches!(trace::replay(&shared), Err(trace::ReplayError::TooLarge { .. })));
    // A pool of the seed's size is far inside the bound.
    let cfg = tiny_config(32, 8, 1000);
    assert!(Pool::model_bytes(&cfg) < trace::MAX_REPLAY_MODEL_BYTES / 1000);
    assert!(trace::replay(&trace::config_line(&cfg)).is_ok());
}

#[test]
fn a_trace_growing_the_model_past_the_replay_bound_stops_there() {
    // No chunk and 4 M layers: the empty pool fits the bound, but every new sequence's
    // layer records (40 bytes a layer) grow the model by 160 MB.
    let cfg = PoolConfig {
        chunk_bytes: 16,
        classes: SizeClasses::new(vec![16]).unwrap(),
        ..tiny_config(4_000_000, 0, 0)
    };
    assert!(Pool::model_bytes(&cfg) < trace::MAX_REPLAY_MODEL_BYTES);
    let mut text = trace::config_line(&cfg);
    for seq in 0..8 {
        text.push_str(&format!("\nreserve {seq} 0 => ok"));
    }
    match trace::replay(&text) {
        Err(trace::ReplayError::TooLarge { bytes, limit }) => assert!(bytes > limit),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn a_trace_with_an_invalid_configuration_is_refused_before_anything_is_sized() {
    // A chunk size whose arena overflows u64: validate() refuses it before model_bytes
    // or a device pool would multiply it.
    let line = format!(
        "{} layers=1 chunk_bytes=9223372036854775808 private_chunks=3 shared_chunks=0 page_tokens=16 tail_fill_percent=0 classes=4294967280",
        trace::TRACE_MAGIC
    );
    assert!(matches!(trace::replay(&line), Err(trace::ReplayError::Config { .. })));
}

#[test]
fn the_last_epoch_cannot_be_submitted() {
    let mut pool = tiny(1, 1, 0);
    assert_eq!(pool.submit(u64::MAX), Err(Error::EpochLimit { epoch: u64::MAX }));
    pool.submit(u64::MAX - 1).unwrap();
}

#[test]
fn a_page_compressed_to_zero_bytes_is_refused_by_the_single_and_the_row_call() {
    let mut pool = tiny(2, 2, 8);
    pool.reserve(1, 2).unwrap();
    let a = pool.alloc(1, 0).unwrap();
    let b = pool.alloc(1, 1).unwrap();
    assert_eq!(pool.compress(a, 0), Err(Error::ZeroCompressedBytes { page: a }));
    // The page is still open and compresses normally afterwards.
    assert!(matches!(pool.compress(a, 16).unwrap(), CompressOutcome::Moved(_)));
    let mut out = [CompressOutcome::Kept];
    assert_eq!(pool.compress_pages(&[b], &[0], &mut out), Err(Error::ZeroCompressedBytes { page: b }));

    // In the middle of a row: the pages before it compressed, as by the single calls.
    let mut pool = tiny(3, 2, 8);
    pool.reserve(1, 2).unwrap();
    let mut row = [0; 3];
    pool.alloc_row(1, &mut row).unwrap();
    pool.record_trace(true);
    let mut twin = pool.clone();
    let mut out = [CompressOutcome::Kept; 3];
    let got = pool.compress_pages(&row, &[16, 0, 16], &mut out);
    assert_eq!(got, Err(Error::ZeroCompressedBytes { page: row[1] }));
    assert!(twin.compress(row[0], 16).is_ok());
    assert_eq!(twin.compress(row[1], 0), Err(Error::ZeroCompressedBytes { page: row[1] }));
    assert_eq!(pool.take_trace(), twin.take_trace());
    assert_eq!(pool.page_table().collect::<Vec<_>>(), twin.page_table().collect::<Vec<_>>());
}

#[test]
fn extreme_arguments_saturate_instead_of_overflowing() {
    let pool = tiny(2, 2, 8);
    assert_eq!(pool.admissible_requests(u64::MAX, u64::MAX), 0);
    // Every multiple of 16 from u32::MAX up overflows: only the open class is left.
    assert_eq!(SizeClasses::stepped(u32::MAX, 16, 16).unwrap().bytes(), &[16]);
}
