//! The device allocator (`kvcodec_pool::gpu`) against the CPU model: a serving trace
//! (admissions with a prefill, decode steps that append and compress pages, pages kept
//! BF16 and moved later, finishes and evictions, the device one epoch behind) replayed on
//! the GPU with a pattern unique to each (page id, generation) in every page; at
//! checkpoints and at the end every live page holds its pattern where the model says,
//! the device page table equals the model's word for word, and nothing leaks. With
//! `KVCODEC_POOL_TRACE` set, that trace file (`cargo xtask simulate --trace`) is replayed
//! too. The checks themselves are shown to fail on a wrong page. Skips without a GPU
//! unless `KVCODEC_REQUIRE_GPU=1`.

use kvcodec_gpu::GpuContext;
use kvcodec_pool::gpu::{DevicePool, StepWork, replay_on_device};
use kvcodec_pool::{CompressOutcome, ID_BLOCK, INVALID_WORD, Pool, PoolConfig, SizeClasses};
use kvcodec_testkit::gpu_or_skip;

/// 4 layers of 4 KiB open pages (compressed classes every 256 B from 1 KiB) in 64 KiB
/// chunks: 4 private per layer, 16 shared.
fn small_config() -> PoolConfig {
    PoolConfig {
        layers: 4,
        chunk_bytes: 64 << 10,
        private_chunks: 4,
        shared_chunks: 16,
        page_tokens: 16,
        classes: SizeClasses::stepped(1024, 4096, 256).unwrap(),
        tail_fill_percent: 25,
    }
}

/// A deterministic generator (splitmix64).
struct Mix(u64);

impl Mix {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % below
    }
}

/// A serving run's trace: requests of 1-6 prompt pages and 1-40 output tokens admitted
/// while they fit (BF16 reservations), one token per running request per step, a page
/// that fills compressed to a random size (sometimes above the open class: kept BF16),
/// a kept page moved when room allows, a request evicted now and then; the device one
/// epoch behind.
fn serving_trace(steps: u64, seed: u64) -> String {
    let cfg = small_config();
    let (layers, open) = (cfg.layers, cfg.classes.open_bytes());
    let mut pool = Pool::new(cfg).unwrap();
    pool.record_trace(true);
    let mut rng = Mix(seed);
    // (id, tokens so far, tokens to go, open page per layer)
    let mut running: Vec<(u64, u64, u64, Vec<u32>)> = Vec::new();
    let mut kept = Vec::new();
    let mut next = 0u64;
    for step in 1..=steps {
        if step > 1 {
            pool.complete(step - 1).unwrap();
        }
        loop {
            let (prompt, output) = (16 * (1 + rng.next(6)), 1 + rng.next(40));
            let pages = (prompt + output).div_ceil(16);
            if running.len() >= 12 || pool.admissible_pages() < pages {
                break;
            }
            pool.reserve(next, pages).unwrap();
            let mut open_pages = Vec::new();
            for layer in 0..layers {
                let mut last = 0;
                for p in 0..prompt / 16 {
                    last = pool.alloc(next, layer).unwrap();
                    if p + 1 < prompt / 16 {
                        pool.compress(last, 1000 + rng.next(u64::from(open)) as u32).unwrap();
                    }
                }
                open_pages.push(last);
            }
            running.push((next, prompt, output, open_pages));
            next += 1;
        }
        let mut i = 0;
        while i < running.len() {
            let (id, t, _, _) = running[i];
            if t.is_multiple_of(16) {
                for layer in 0..layers {
                    let prev = running[i].3[layer as usize];
                    running[i].3[layer as usize] = pool.alloc(id, layer).unwrap();
                    let bytes = 1000 + rng.next(u64::from(open) + 200) as u32;
                    if pool.compress(prev, bytes).unwrap() == CompressOutcome::Kept {
                        kept.push(prev);
                    }
                }
            }
            running[i].1 += 1;
            running[i].2 -= 1;
            if running[i].2 == 0 || rng.next(200) == 0 {
                pool.release(id).unwrap();
                running.swap_remove(i);
            } else {
                i += 1;
            }
        }
        // Now and then a kept page (still live) moves: compressed into its segment.
        if rng.next(4) == 0
            && let Some(p) = kept.pop()
            && pool.entry(p).is_some()
        {
            let _ = pool.move_page(p);
        }
        pool.submit(step).unwrap();
    }
    pool.take_trace().join("\n")
}

fn assert_clean(report: &kvcodec_pool::gpu::ReplayReport) {
    assert!(report.checkpoints >= 2 && report.pages_checked > 0, "{report:?}");
    assert_eq!(report.bad_pages, 0, "pages lost or overwritten");
    assert_eq!(report.table_mismatches, 0, "device page table differs from the model's");
    assert_eq!(report.chunks_in_use_at_end, 0, "a chunk leaked");
    assert!(report.segments_reclaimed > 0 && report.moves > 0 && report.freed_blocks > 0, "{report:?}");
}

#[test]
fn a_serving_trace_replays_on_the_device_like_the_model() {
    let Some(gpu) = gpu_or_skip("a_serving_trace_replays_on_the_device_like_the_model") else { return };
    for seed in [1, 2] {
        let trace = serving_trace(300, seed);
        let report = replay_on_device(&gpu, &trace, 25).unwrap();
        assert_clean(&report);
        assert_eq!(report.steps, 301);
    }
}

#[test]
fn the_simulators_trace_replays_on_the_device_when_given() {
    let Some(gpu) = gpu_or_skip("the_simulators_trace_replays_on_the_device_when_given") else { return };
    let Some(path) = std::env::var_os("KVCODEC_POOL_TRACE") else {
        eprintln!(
            "the_simulators_trace_replays_on_the_device_when_given: no KVCODEC_POOL_TRACE, nothing to replay"
        );
        return;
    };
    let trace = std::fs::read_to_string(&path).unwrap();
    let report = replay_on_device(&gpu, &trace, 100).unwrap();
    assert_clean(&report);
    eprintln!(
        "{}: {} steps, {} allocs, {} moves, {} checkpoints, {} pages checked, {} segments reclaimed, {} waits",
        path.to_string_lossy(),
        report.steps,
        report.allocs,
        report.moves,
        report.checkpoints,
        report.pages_checked,
        report.segments_reclaimed,
        report.waits
    );
}

/// A device pool of the small configuration and one page filled with generation 1.
fn one_page(gpu: &GpuContext) -> DevicePool {
    let mut dev = DevicePool::new(gpu, &small_config(), 8).unwrap();
    dev.fill_pattern(&[4096, 3, 1], 4096).unwrap();
    dev
}

#[test]
fn the_checks_catch_a_wrong_page_a_short_copy_and_a_wrong_word() {
    let Some(gpu) = gpu_or_skip("the_checks_catch_a_wrong_page_a_short_copy_and_a_wrong_word") else {
        return;
    };
    let dev = one_page(&gpu);
    assert_eq!(dev.check_pattern(&[4096, 3, 1, 4096]).unwrap(), (0, None));
    assert_eq!(
        dev.check_pattern(&[4096, 3, 1, 4096, 4096, 3, 2, 4096]).unwrap(),
        (1, Some(1)),
        "wrong generation"
    );
    assert_eq!(dev.check_pattern(&[8192, 3, 1, 4096]).unwrap(), (1, Some(0)), "wrong place");
    // A move of 1001 bytes (a compressed page's length, not a multiple of 4) carries
    // exactly that prefix.
    let mut dev = one_page(&gpu);
    // No tail rule: one page of a two-page sequence must move.
    let cfg = PoolConfig { tail_fill_percent: 0, ..small_config() };
    let mut pool = Pool::new(cfg.clone()).unwrap();
    pool.record_changes(true);
    pool.reserve(1, 2).unwrap();
    let page = pool.alloc(1, 0).unwrap();
    let at = pool.entry(page).unwrap().location.arena_offset(cfg.chunk_bytes);
    let CompressOutcome::Moved(m) = pool.compress(page, 1001).unwrap() else { panic!("room") };
    let work = StepWork::from_changes(&pool.take_changes(), &cfg);
    dev.fill_pattern(&[at, u64::from(page), 1], 4096).unwrap();
    dev.update_table(&work).unwrap();
    dev.run_moves(&work).unwrap();
    let to = m.to.arena_offset(cfg.chunk_bytes);
    assert_eq!(dev.check_pattern(&[to, u64::from(page), 1, 1001]).unwrap(), (0, None));
    assert_eq!(dev.check_pattern(&[to, u64::from(page), 1, 1002]).unwrap().0, 1, "one byte past the copy");
    let table = dev.download_table().unwrap();
    assert_eq!(table[page as usize], pool.entry(page).unwrap().device_word(cfg.chunk_bytes));
    assert!(table.iter().enumerate().all(|(i, &w)| i == page as usize || w == INVALID_WORD));
    // A move outside the arena, or not 16-aligned, is refused before any launch; so is a
    // fill not 4-aligned.
    let mut bad = work.clone();
    bad.waves[0][1] = cfg.arena_bytes();
    assert!(dev.run_moves(&bad).is_err());
    let mut bad = work.clone();
    bad.waves[0][1] += 8;
    assert!(dev.run_moves(&bad).is_err());
    assert!(dev.fill_pattern(&[4098, 3, 1], 4096).is_err());
    assert!(dev.fill_pattern(&[4096, 3, 1], 4095).is_err());
}

#[test]
fn a_range_released_past_the_table_grows_it_first() {
    let Some(gpu) = gpu_or_skip("a_range_released_past_the_table_grows_it_first") else {
        return;
    };
    // A sequence admitted and released within one epoch writes no word but releases its
    // id block; the table (one block long) must grow to hold it before it is invalidated.
    let mut dev = DevicePool::new(&gpu, &small_config(), ID_BLOCK).unwrap();
    let work = StepWork { ranges: vec![ID_BLOCK, 1], ..StepWork::default() };
    dev.update_table(&work).unwrap();
    let table = dev.download_table().unwrap();
    assert!(table.len() > ID_BLOCK as usize, "table of {} words", table.len());
    assert!(table.iter().all(|&w| w == INVALID_WORD));
}

/// `pool_pattern` of kernels/pool/pool.cu.
fn pattern(id: u64, generation: u64, w: u32) -> u32 {
    const M1: u32 = 2654435761;
    const M2: u32 = 2246822519;
    const M3: u32 = 3266489917;
    const F1: u32 = 2246822507;
    const F2: u32 = 3266489909;
    let mut x = (id as u32).wrapping_mul(M1)
        ^ (id >> 32) as u32
        ^ (generation as u32).wrapping_mul(M2)
        ^ w.wrapping_mul(M3);
    x ^= x >> 16;
    x = x.wrapping_mul(F1);
    x ^= x >> 13;
    x = x.wrapping_mul(F2);
    x ^ (x >> 16)
}

/// What the device replay does, with the kernels emulated on a host arena: the step work
/// built from each epoch's changes keeps every live page's pattern where the model says
/// and the table equal to the model's words (the device test then checks the kernels).
#[test]
fn the_step_work_of_a_serving_trace_keeps_every_page_on_a_host_arena() {
    let cfg = small_config();
    let open = cfg.classes.open_bytes() as usize;
    let mut arena = vec![0u8; cfg.arena_bytes() as usize];
    let mut table: Vec<u64> = Vec::new();
    let mut gens: Vec<u64> = Vec::new();
    let mut checked = 0usize;
    let trace = serving_trace(300, 3);
    let pool = kvcodec_pool::trace::replay_with(&trace, true, |pool: &mut Pool, line: &str| {
        if !line.starts_with("submit ") {
            return Ok::<(), kvcodec_pool::trace::ReplayError>(());
        }
        let work = StepWork::from_changes(&pool.take_changes(), &cfg);
        for r in work.ranges.chunks(2) {
            table[r[0] as usize..(r[0] + r[1]) as usize].fill(INVALID_WORD);
        }
        for w in work.words.chunks(2) {
            if table.len() <= w[0] as usize {
                table.resize(w[0] as usize + 1, INVALID_WORD);
            }
            table[w[0] as usize] = w[1];
        }
        for &(page, offset) in &work.allocs {
            if gens.len() <= page as usize {
                gens.resize(page as usize + 1, 0);
            }
            gens[page as usize] += 1;
            for w in 0..open / 4 {
                let at = offset as usize + 4 * w;
                arena[at..at + 4]
                    .copy_from_slice(&pattern(u64::from(page), gens[page as usize], w as u32).to_le_bytes());
            }
        }
        for wave in &work.waves {
            for m in wave.chunks(3) {
                arena.copy_within(m[0] as usize..(m[0] + m[2]) as usize, m[1] as usize);
            }
        }
        for (page, e) in pool.page_table() {
            let len = match e.format {
                kvcodec_pool::PageFormat::Compressed { bytes } => bytes as usize,
                _ => open,
            };
            let at = e.location.arena_offset(cfg.chunk_bytes) as usize;
            let want: Vec<u8> = (0..len.div_ceil(4))
                .flat_map(|w| pattern(u64::from(page), gens[page as usize], w as u32).to_le_bytes())
                .collect();
            assert_eq!(&arena[at..at + len], &want[..len], "page {page} at {at}");
            assert_eq!(table[page as usize], e.device_word(cfg.chunk_bytes), "word of page {page}");
            checked += 1;
        }
        let live = pool.page_table().count();
        assert_eq!(table.iter().filter(|&&w| w != INVALID_WORD).count(), live);
        Ok(())
    })
    .unwrap();
    assert!(checked > 1000, "{checked} page checks");
    assert!(pool.stats().segments_reclaimed > 0);
}
