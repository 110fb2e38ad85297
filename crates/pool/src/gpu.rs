//! The device side of the pool (issue 19; seed 002, "Memory management"): one arena
//! allocation of [`PoolConfig::arena_bytes`], a page table of `u64` words in device
//! memory ([`crate::PageEntry::device_word`]: the arena byte offset shifted left by one, bit 0
//! set for a compressed page, [`INVALID_WORD`] for an id with no live page), and each
//! epoch's [`Change`]s run as stream-ordered device work before the epoch's attention
//! kernels: the id blocks of finished sequences invalidated, the changed words scattered
//! ([`DevicePool::update_table`]), the page copies run ([`DevicePool::run_moves`]). The
//! host never waits for the device on this path: [`Pool::complete`] is fed by a CUDA
//! event per epoch, queried.
//!
//! A move's `compress` flag is honoured by a **stand-in**: the first `bytes` bytes of
//! the BF16 page are copied (the compressed page's length, at its destination). The
//! allocator decides where bytes go and how many; the trace carries only sizes (from the
//! fixtures' statistics), not KV values, and ZipFusion's page compressor has its own
//! tests and benchmark. The device work timed here is therefore the allocator's own
//! (table updates and copies of the compressed sizes), not the codec's.
//!
//! [`replay_on_device`] replays a whole [`crate::trace`] on the CPU model and mirrors
//! it on the GPU: every new page is filled with a pattern unique to (page id,
//! generation), moves carry it, and at checkpoints and at the end a kernel checks every
//! live page's pattern where the model says it lives, and the device page table is
//! compared with the model's word for word.
//!
//! Kernels: `kernels/pool/pool.cu` ([`MODULE`]).

use std::collections::HashMap;
use std::time::Instant;

use cudarc::driver::{CudaEvent, CudaSlice, PushKernelArg, sys};
use kvcodec_gpu::{GpuContext, Kernel, Module, launch_config};
use thiserror::Error;

use crate::pool::{Change, INVALID_WORD, PageFormat};
use crate::trace::ReplayError;
use crate::{Epoch, ID_BLOCK, PageId, Pool, PoolConfig};

/// The pool's PTX module.
pub static MODULE: Module = Module::new("pool", include_str!("../ptx/pool.ptx"));
kvcodec_gpu::register_module!(MODULE);

/// The kernels of [`MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKernel {
    /// `table[id] = word` for each (id, word) pair.
    Scatter,
    /// Every id of each (first id, count) range becomes [`INVALID_WORD`].
    Invalidate,
    /// Each (source offset, destination offset, bytes) copy in the arena, one CTA each.
    Move,
    /// The replay check's pattern written into pages.
    Fill,
    /// The replay check: pages hold their pattern.
    Check,
}

impl Kernel for PoolKernel {
    fn module(self) -> &'static Module {
        &MODULE
    }
    fn symbol(self) -> &'static str {
        match self {
            PoolKernel::Scatter => "pool_scatter",
            PoolKernel::Invalidate => "pool_invalidate",
            PoolKernel::Move => "pool_move",
            PoolKernel::Fill => "pool_fill",
            PoolKernel::Check => "pool_check",
        }
    }
}

/// Threads per CTA of every pool kernel.
pub const THREADS: u32 = 256;
/// Most CTAs a pool kernel launches (each loops over the rest).
const MAX_GRID: usize = 65535;

/// An error of the device pool or its replay.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// A GPU failure.
    #[error(transparent)]
    Gpu(#[from] kvcodec_gpu::Error),
    /// The trace did not replay on the CPU model.
    #[error(transparent)]
    Trace(#[from] ReplayError),
    /// The model refused the replay's final release of every sequence.
    #[error(transparent)]
    Pool(#[from] crate::Error),
}

impl From<cudarc::driver::DriverError> for DeviceError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        DeviceError::Gpu(e.into())
    }
}

/// One epoch's device work, built from the [`Change`]s the pool recorded for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepWork {
    /// `(id, word)` pairs, flat, one per id changed (its last word).
    pub words: Vec<u64>,
    /// `(first id, count)` pairs, flat: the id blocks of released sequences.
    pub ranges: Vec<u32>,
    /// The moves in waves (a page moved twice in one epoch has its second move in the
    /// next wave), each wave flat `(source offset, destination offset, bytes)` triples.
    pub waves: Vec<Vec<u64>>,
    /// The new pages, `(page, arena offset)`, in allocation order.
    pub allocs: Vec<(PageId, u64)>,
}

impl StepWork {
    /// The work of `changes` (one epoch's, in operation order) for a pool of `cfg`.
    pub fn from_changes(changes: &[Change], cfg: &PoolConfig) -> StepWork {
        let open = cfg.classes.open_bytes();
        let mut work = StepWork::default();
        let mut last: HashMap<PageId, u64> = HashMap::new();
        let mut moved: HashMap<PageId, usize> = HashMap::new();
        let mut freed: Vec<u32> = Vec::new();
        for c in changes {
            match *c {
                Change::Alloc { page, at } => {
                    let offset = at.arena_offset(cfg.chunk_bytes);
                    last.insert(page, offset << 1);
                    work.allocs.push((page, offset));
                }
                Change::Move(m) => {
                    let to = m.to.arena_offset(cfg.chunk_bytes);
                    last.insert(m.page, (to << 1) | u64::from(m.to.slot_bytes < open));
                    let wave = moved.entry(m.page).or_insert(0);
                    if work.waves.len() <= *wave {
                        work.waves.push(Vec::new());
                    }
                    work.waves[*wave].extend([m.from.arena_offset(cfg.chunk_bytes), to, u64::from(m.bytes)]);
                    *wave += 1;
                }
                Change::FreeBlock { block, pages } => {
                    work.ranges.extend([block * ID_BLOCK, pages]);
                    freed.push(block);
                }
            }
        }
        // A page allocated and released in the same epoch leaves no word (its block's ids
        // are not handed out again before the epoch completes).
        freed.sort_unstable();
        let mut words: Vec<(PageId, u64)> =
            last.into_iter().filter(|(id, _)| freed.binary_search(&(id / ID_BLOCK)).is_err()).collect();
        words.sort_unstable();
        work.words = words.into_iter().flat_map(|(id, w)| [u64::from(id), w]).collect();
        work
    }

    /// Page copies in all waves.
    pub fn moves(&self) -> usize {
        self.waves.iter().map(|w| w.len() / 3).sum()
    }
}

/// The pool's device memory: the arena, the page table, and staging for each epoch's
/// descriptors, all on one [`GpuContext`]'s stream.
pub struct DevicePool {
    gpu: GpuContext,
    cfg: PoolConfig,
    arena: CudaSlice<u8>,
    table: CudaSlice<u64>,
    words: CudaSlice<u64>,
    ranges: CudaSlice<u32>,
    moves: CudaSlice<u64>,
}

/// A device buffer of at least `len` elements: `buf` if it is long enough, else a new
/// one (the old one is freed in stream order).
fn at_least<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &GpuContext,
    buf: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), DeviceError> {
    if buf.len() < len {
        *buf = gpu.zeros(len.next_power_of_two())?;
    }
    Ok(())
}

impl DevicePool {
    /// The arena of `cfg` (zeroed) and a page table of `ids` words, all
    /// [`INVALID_WORD`], on `gpu`'s stream.
    ///
    /// # Errors
    /// [`DeviceError::Pool`] for a configuration [`PoolConfig::validate`] refuses (its
    /// arena's size could overflow); [`DeviceError::Gpu`] (out of device memory, a driver
    /// failure).
    pub fn new(gpu: &GpuContext, cfg: &PoolConfig, ids: u32) -> Result<DevicePool, DeviceError> {
        cfg.validate()?;
        let stream = gpu.stream();
        let arena = gpu.zeros::<u8>(cfg.arena_bytes() as usize)?;
        let table = stream.clone_htod(&vec![INVALID_WORD; ids.max(1) as usize])?;
        Ok(DevicePool {
            gpu: gpu.clone(),
            cfg: cfg.clone(),
            arena,
            table,
            words: gpu.zeros(1)?,
            ranges: gpu.zeros(1)?,
            moves: gpu.zeros(1)?,
        })
    }

    /// The arena: chunk `c` at bytes `c * chunk_bytes ..+ chunk_bytes`.
    pub fn arena(&self) -> &CudaSlice<u8> {
        &self.arena
    }

    /// The arena, writable: where a serving stack writes the KV of new pages and its
    /// codec's compressed pages, at the offsets the pool gives (the attention kernels read
    /// it through [`DevicePool::table`]). Writes must be queued on the pool's stream
    /// (or ordered before it by an event): a page's bytes after the
    /// [`DevicePool::update_table`] that makes it live and after the moves of the same
    /// step, never into a location a step still in flight may read.
    pub fn arena_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.arena
    }

    /// The page table, one word per page id ([`crate::PageEntry::device_word`]).
    pub fn table(&self) -> &CudaSlice<u64> {
        &self.table
    }

    /// Grows the page table to at least `ids` words (the new ones invalid), in stream
    /// order; nothing when it is long enough.
    ///
    /// # Errors
    /// [`DeviceError::Gpu`].
    pub fn reserve_ids(&mut self, ids: u32) -> Result<(), DeviceError> {
        if (ids as usize) <= self.table.len() {
            return Ok(());
        }
        let stream = self.gpu.stream().clone();
        let mut table = stream.clone_htod(&vec![INVALID_WORD; (ids as usize).next_power_of_two()])?;
        stream.memcpy_dtod(&self.table, &mut table.slice_mut(..self.table.len()))?;
        self.table = table;
        Ok(())
    }

    /// The epoch's page table changes, in stream order: released id blocks invalidated,
    /// then every changed word written. Run it before the epoch's kernels that read the
    /// table. Grows the table when a word's or a released range's id is past it (a
    /// sequence admitted and released within one epoch writes no word but releases its
    /// id block).
    ///
    /// # Errors
    /// [`DeviceError::Gpu`].
    pub fn update_table(&mut self, work: &StepWork) -> Result<(), DeviceError> {
        let word_top = work.words.chunks(2).map(|p| p[0] + 1).max().unwrap_or(0);
        let range_top = work.ranges.chunks(2).map(|r| u64::from(r[0]) + u64::from(r[1])).max().unwrap_or(0);
        let top = u32::try_from(word_top.max(range_top)).map_err(|_| kvcodec_gpu::Error::Buffer {
            what: "page table",
            why: format!("page id {} past u32", word_top.max(range_top)),
        })?;
        self.reserve_ids(top)?;
        let stream = self.gpu.stream().clone();
        let n = work.ranges.len() / 2;
        if n > 0 {
            at_least(&self.gpu, &mut self.ranges, work.ranges.len())?;
            stream.memcpy_htod(&work.ranges, &mut self.ranges.slice_mut(..work.ranges.len()))?;
            let f = self.gpu.function(PoolKernel::Invalidate)?;
            let mut b = stream.launch_builder(&f);
            let n32 = n as u32;
            b.arg(&mut self.table).arg(&self.ranges).arg(&n32);
            // SAFETY: pool_invalidate(u64* table, const u32* ranges, u32 n); `ranges`
            // holds n pairs; every id of a released range is below the table's length
            // (reserve_ids above counts the ranges' ends).
            unsafe { b.launch(launch_config(n.min(MAX_GRID) as u32, THREADS, 0)) }?;
        }
        let n = work.words.len() / 2;
        if n > 0 {
            at_least(&self.gpu, &mut self.words, work.words.len())?;
            stream.memcpy_htod(&work.words, &mut self.words.slice_mut(..work.words.len()))?;
            let f = self.gpu.function(PoolKernel::Scatter)?;
            let mut b = stream.launch_builder(&f);
            let n32 = n as u32;
            b.arg(&mut self.table).arg(&self.words).arg(&n32);
            // SAFETY: pool_scatter(u64* table, const u64* pairs, u32 n); `words` holds n
            // pairs whose ids are below the table's length (reserve_ids above).
            unsafe { b.launch(self.gpu.grid_stride_config(n, THREADS)) }?;
        }
        Ok(())
    }

    /// The epoch's page copies, wave after wave, in stream order. Run it after the
    /// epoch's writes of new pages that move in the same epoch (a prefill's pages) and
    /// before its kernels that read moved pages.
    ///
    /// # Errors
    /// [`DeviceError::Gpu`]; [`kvcodec_gpu::Error::Buffer`] for a copy outside the arena.
    pub fn run_moves(&mut self, work: &StepWork) -> Result<(), DeviceError> {
        let stream = self.gpu.stream().clone();
        let arena = self.arena.len() as u64;
        for wave in &work.waves {
            // The kernel copies 16 bytes a thread: both ends 16-aligned, inside the arena.
            let outside = |m: &[u64]| m[0].max(m[1]).checked_add(m[2]).is_none_or(|end| end > arena);
            if let Some(m) =
                wave.chunks(3).find(|m| outside(m) || !m[0].is_multiple_of(16) || !m[1].is_multiple_of(16))
            {
                return Err(kvcodec_gpu::Error::Buffer {
                    what: "move",
                    why: format!("{m:?}: outside the {arena}-byte arena or not 16-aligned"),
                }
                .into());
            }
            let n = wave.len() / 3;
            at_least(&self.gpu, &mut self.moves, wave.len())?;
            stream.memcpy_htod(wave, &mut self.moves.slice_mut(..wave.len()))?;
            let f = self.gpu.function(PoolKernel::Move)?;
            let mut b = stream.launch_builder(&f);
            let n32 = n as u32;
            b.arg(&mut self.arena).arg(&self.moves).arg(&n32);
            // SAFETY: pool_move(u8* arena, const u64* moves, u32 n); `moves` holds n
            // triples, each inside the arena (checked above), offsets 16-aligned.
            unsafe { b.launch(launch_config(n.min(MAX_GRID) as u32, THREADS, 0)) }?;
        }
        Ok(())
    }

    /// Replay check: writes `bytes` bytes (a multiple of 4) of the pattern of
    /// `(page, generation)` at each `(arena offset, page, generation)` triple (flat).
    ///
    /// # Errors
    /// [`DeviceError::Gpu`]; [`kvcodec_gpu::Error::Buffer`] for a page outside the arena.
    pub fn fill_pattern(&mut self, fills: &[u64], bytes: u32) -> Result<(), DeviceError> {
        let n = fills.len() / 3;
        if n == 0 {
            return Ok(());
        }
        if !bytes.is_multiple_of(4) || fills.chunks(3).any(|f| !f[0].is_multiple_of(4)) {
            return Err(kvcodec_gpu::Error::Buffer {
                what: "fill",
                why: format!("{bytes} bytes or an offset not a multiple of 4"),
            }
            .into());
        }
        self.check_inside(fills.chunks(3).map(|f| f[0].saturating_add(u64::from(bytes))), "fill")?;
        let fills_dev = self.gpu.upload(fills)?;
        let f = self.gpu.function(PoolKernel::Fill)?;
        let stream = self.gpu.stream().clone();
        let mut b = stream.launch_builder(&f);
        let n32 = n as u32;
        b.arg(&mut self.arena).arg(&fills_dev).arg(&n32).arg(&bytes);
        // SAFETY: pool_fill(u8* arena, const u64* fills, u32 n, u32 bytes); n triples,
        // each page inside the arena (checked above), offsets 4-aligned.
        unsafe { b.launch(launch_config(n.min(MAX_GRID) as u32, THREADS, 0)) }?;
        Ok(())
    }

    /// Replay check: of the `(arena offset, page, generation, bytes)` quadruples (flat),
    /// how many pages do not hold the first `bytes` bytes of their pattern, and the index
    /// of the first that does not (synchronises).
    ///
    /// # Errors
    /// [`DeviceError::Gpu`]; [`kvcodec_gpu::Error::Buffer`] for a page outside the arena.
    pub fn check_pattern(&self, checks: &[u64]) -> Result<(u32, Option<usize>), DeviceError> {
        let n = checks.len() / 4;
        if n == 0 {
            return Ok((0, None));
        }
        if checks.chunks(4).any(|c| !c[0].is_multiple_of(4)) {
            return Err(kvcodec_gpu::Error::Buffer {
                what: "check",
                why: "an offset not a multiple of 4".into(),
            }
            .into());
        }
        self.check_inside(checks.chunks(4).map(|c| c[0].saturating_add(c[3])), "check")?;
        let checks_dev = self.gpu.upload(checks)?;
        let mut bad = self.gpu.upload(&[0u32, u32::MAX])?;
        let f = self.gpu.function(PoolKernel::Check)?;
        let stream = self.gpu.stream().clone();
        let mut b = stream.launch_builder(&f);
        let n32 = n as u32;
        b.arg(&self.arena).arg(&checks_dev).arg(&n32).arg(&mut bad);
        // SAFETY: pool_check(const u8*, const u64* checks, u32 n, u32* bad); n
        // quadruples, each inside the arena (checked above); `bad` holds 2 words.
        unsafe { b.launch(launch_config(n.min(MAX_GRID) as u32, THREADS, 0)) }?;
        let bad = self.gpu.download(&bad, 2)?;
        Ok((bad[0], (bad[0] > 0).then_some(bad[1] as usize)))
    }

    /// The page table copied to the host (synchronises).
    ///
    /// # Errors
    /// [`DeviceError::Gpu`].
    pub fn download_table(&self) -> Result<Vec<u64>, DeviceError> {
        Ok(self.gpu.download(&self.table, self.table.len())?)
    }

    fn check_inside(&self, ends: impl Iterator<Item = u64>, what: &'static str) -> Result<(), DeviceError> {
        let arena = self.arena.len() as u64;
        match ends.into_iter().find(|&e| e > arena) {
            Some(end) => Err(kvcodec_gpu::Error::Buffer {
                what,
                why: format!("ends at {end}, past the {arena}-byte arena"),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }
}

/// What [`replay_on_device`] found and measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReplayReport {
    /// Epochs submitted (decode steps; an admission's prefill is part of its step).
    pub steps: u64,
    /// Of those, steps that admitted a request (held a `reserve` line).
    pub admission_steps: u64,
    /// Pages allocated, moves run, id blocks released, over the trace.
    pub allocs: u64,
    /// Page copies run.
    pub moves: u64,
    /// Id blocks invalidated.
    pub freed_blocks: u64,
    /// Checkpoints run (the last one after everything was released).
    pub checkpoints: u64,
    /// Live pages whose pattern was checked, summed over the checkpoints.
    pub pages_checked: u64,
    /// Pages that did not hold their pattern where the model says (summed).
    pub bad_pages: u64,
    /// Page table words that differ from the model's (summed over checkpoints).
    pub table_mismatches: u64,
    /// `complete` lines whose epoch's event had not fired when queried (the replay then
    /// waited; a server would complete it later).
    pub waits: u64,
    /// Segments the model returned to their home (each a whole chunk, no per-page work).
    pub segments_reclaimed: u64,
    /// Chunks still in use after every sequence was released and its epoch completed
    /// (a leak if not 0).
    pub chunks_in_use_at_end: u32,
    /// Per step, µs of host time of the device backend (building the step's work from
    /// the changes, uploads, launches, event records); the CPU model's own operations
    /// are timed by `cargo xtask simulate --allocator-only`.
    pub host_us: Vec<f64>,
    /// Per step, µs of device time of the allocator's kernels (table updates and moves;
    /// not the replay's pattern fills), by CUDA events.
    pub device_us: Vec<f64>,
    /// Per step, whether it admitted a request.
    pub admitted: Vec<bool>,
}

/// Replays trace `text` (see [`crate::trace`]) on the CPU model and on `gpu`: at each
/// `submit` line the epoch's [`Change`]s become device work (table updates, the pattern
/// fills of its new pages, its moves) with an event; a `complete` line queries its
/// epoch's event (and waits, counted, if it has not fired). Every `checkpoint_every`
/// steps, and after the trace when every sequence has been released and that epoch
/// completed, every live page's pattern is checked where the model says it lives and
/// the whole device page table is compared with the model's words.
///
/// # Errors
/// [`DeviceError::Trace`] for a trace that does not replay; [`DeviceError::Gpu`].
pub fn replay_on_device(
    gpu: &GpuContext,
    text: &str,
    checkpoint_every: u64,
) -> Result<ReplayReport, DeviceError> {
    let first = text.lines().next().unwrap_or_default();
    let cfg = crate::trace::replay_config(first)?;
    let mut dev = DevicePool::new(gpu, &cfg, ID_BLOCK)?;
    let mut state =
        Replay { report: ReplayReport::default(), gens: Vec::new(), events: Vec::new(), admitting: false };
    let mut pool =
        crate::trace::replay_with(text, true, |pool: &mut Pool, line: &str| -> Result<(), DeviceError> {
            let mut words = line.split_whitespace();
            match (words.next(), words.next().and_then(|w| w.parse::<Epoch>().ok())) {
                (Some("reserve"), _) => state.admitting = true,
                (Some("submit"), Some(epoch)) => {
                    state.step(pool, &mut dev, epoch)?;
                    if state.report.steps.is_multiple_of(checkpoint_every.max(1)) {
                        state.checkpoint(pool, &dev)?;
                    }
                }
                (Some("complete"), Some(epoch)) => {
                    // The last step submitted at or before `epoch` carries it.
                    let i = state.events.partition_point(|e| e.0 <= epoch);
                    if let Some((_, _, _, _, end)) = i.checked_sub(1).map(|i| &state.events[i])
                        && !end.is_complete()
                    {
                        state.report.waits += 1;
                        end.synchronize()?;
                    }
                }
                _ => {}
            }
            Ok(())
        })?;
    // Everything still running finishes: its changes join those recorded since the last
    // submit, in one last step.
    for seq in pool.sequences().collect::<Vec<_>>() {
        pool.release(seq)?;
    }
    let last = pool.submitted() + 1;
    pool.submit(last)?;
    state.step(&mut pool, &mut dev, last)?;
    state.events.last().expect("a step").4.synchronize()?;
    pool.complete(last)?;
    state.checkpoint(&pool, &dev)?;
    let stats = pool.stats();
    state.report.segments_reclaimed = stats.segments_reclaimed;
    state.report.chunks_in_use_at_end = stats.chunks_in_use;
    for (_, e0, e1, e2, e3) in &state.events {
        state.report.device_us.push(f64::from(e0.elapsed_ms(e1)? + e2.elapsed_ms(e3)?) * 1e3);
    }
    Ok(state.report)
}

struct Replay {
    report: ReplayReport,
    /// Per page id, how often it was allocated.
    gens: Vec<u32>,
    /// Per step: its epoch; events before the table update, after it, before the moves,
    /// after them.
    events: Vec<(Epoch, CudaEvent, CudaEvent, CudaEvent, CudaEvent)>,
    admitting: bool,
}

impl Replay {
    /// The device work of the epoch just submitted.
    fn step(&mut self, pool: &mut Pool, dev: &mut DevicePool, epoch: Epoch) -> Result<(), DeviceError> {
        let ctx = dev.gpu.context().clone();
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let events =
            (ctx.new_event(timing)?, ctx.new_event(timing)?, ctx.new_event(timing)?, ctx.new_event(timing)?);
        let stream = dev.gpu.stream().clone();
        let t0 = Instant::now();
        let work = StepWork::from_changes(&pool.take_changes(), pool.config());
        events.0.record(&stream)?;
        dev.update_table(&work)?;
        events.1.record(&stream)?;
        let mut host = t0.elapsed().as_secs_f64();
        // The replay's pattern writes (the KV a prefill or decode writes into new pages).
        let mut fills = Vec::with_capacity(work.allocs.len() * 3);
        for &(page, offset) in &work.allocs {
            if self.gens.len() <= page as usize {
                self.gens.resize(page as usize + 1, 0);
            }
            self.gens[page as usize] += 1;
            fills.extend([offset, u64::from(page), u64::from(self.gens[page as usize])]);
        }
        dev.fill_pattern(&fills, pool.config().classes.open_bytes())?;
        let t1 = Instant::now();
        events.2.record(&stream)?;
        dev.run_moves(&work)?;
        events.3.record(&stream)?;
        host += t1.elapsed().as_secs_f64();
        self.report.host_us.push(host * 1e6);
        self.report.steps += 1;
        self.report.admitted.push(self.admitting);
        self.report.admission_steps += u64::from(self.admitting);
        self.admitting = false;
        self.report.allocs += work.allocs.len() as u64;
        self.report.moves += work.moves() as u64;
        self.report.freed_blocks += (work.ranges.len() / 2) as u64;
        self.events.push((epoch, events.0, events.1, events.2, events.3));
        Ok(())
    }

    /// Every live page's pattern where the model says, and the whole table.
    fn checkpoint(&mut self, pool: &Pool, dev: &DevicePool) -> Result<(), DeviceError> {
        let cfg = pool.config();
        let mut checks = Vec::new();
        let mut expected = vec![INVALID_WORD; dev.table().len().max(pool.id_capacity() as usize)];
        for (page, e) in pool.page_table() {
            let len = match e.format {
                PageFormat::Compressed { bytes } => bytes,
                _ => cfg.classes.open_bytes(),
            };
            let generation = self.gens.get(page as usize).copied().unwrap_or(0);
            checks.extend([
                e.location.arena_offset(cfg.chunk_bytes),
                u64::from(page),
                u64::from(generation),
                u64::from(len),
            ]);
            expected[page as usize] = e.device_word(cfg.chunk_bytes);
        }
        let (bad, _) = dev.check_pattern(&checks)?;
        let table = dev.download_table()?;
        let mismatches = (0..expected.len())
            .filter(|&i| table.get(i).copied().unwrap_or(INVALID_WORD) != expected[i])
            .count();
        self.report.checkpoints += 1;
        self.report.pages_checked += (checks.len() / 4) as u64;
        self.report.bad_pages += u64::from(bad);
        self.report.table_mismatches += mismatches as u64;
        Ok(())
    }
}
