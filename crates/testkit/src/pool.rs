//! A pool-managed cache of one layer driven through a scripted serving run, for the pooled
//! decode-attention tests of every codec (issue 19: "the attention kernels read through
//! [the page table]"): a CPU [`Pool`] admits the sequences of [`PLANS`], appends their
//! tokens one decode step at a time (K and V rows written into the open page where the
//! pool put it, `[16, kv_heads, head_dim]` K rows then V rows), seals every page that
//! fills with the codec's `seal` and writes its bytes where the pool moves it (pages the
//! pool keeps BF16 stay in their open slot), moves a page every fifth step (a kept page is
//! sealed by its move, a sealed one copied), releases a sequence and admits another into
//! its room. The host arena holds the real bytes; the recorded changes of each epoch are
//! what the device pool's table follows.

use std::collections::HashMap;

use kvcodec_pool::gpu::StepWork;
use kvcodec_pool::{CompressOutcome, INVALID_WORD, PageId, Pool, PoolConfig, SeqId, SizeClasses};

use crate::Rng;

/// Tokens per page.
pub const PAGE_TOKENS: usize = 16;

/// A sequence of the drive: when it is admitted, how many tokens it reaches, and when (if
/// ever) it is released before the attention step.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The sequence.
    pub seq: SeqId,
    /// The decode step at which it is admitted.
    pub admit_at: usize,
    /// Its final length in tokens.
    pub tokens: usize,
    /// The step at which it is released, if it is.
    pub release_at: Option<usize>,
}

/// The scripted run: sequences of whole and partial pages (37, 96, 150 tokens), one
/// released at step 120 and another admitted into its room at step 121.
pub const PLANS: [Plan; 6] = [
    Plan { seq: 1, admit_at: 0, tokens: 300, release_at: None },
    Plan { seq: 2, admit_at: 0, tokens: 37, release_at: None },
    Plan { seq: 3, admit_at: 0, tokens: 150, release_at: Some(120) },
    Plan { seq: 4, admit_at: 2, tokens: 200, release_at: None },
    Plan { seq: 5, admit_at: 5, tokens: 96, release_at: None },
    Plan { seq: 6, admit_at: 121, tokens: 170, release_at: None },
];

/// A sequence's tokens so far: K and V rows, `[tokens, kv_heads, head_dim]` BF16 words.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    /// K rows.
    pub k: Vec<u16>,
    /// V rows.
    pub v: Vec<u16>,
}

/// What a drive leaves.
pub struct Driven {
    /// The pool's configuration (one layer).
    pub cfg: PoolConfig,
    /// The pool after the run (recording changes).
    pub pool: Pool,
    /// The arena on the host: the real bytes of every live page, `cfg.arena_bytes()` bytes.
    pub arena: Vec<u8>,
    /// Each epoch's device work, in order.
    pub steps: Vec<StepWork>,
    /// The live sequences and their tokens, by sequence.
    pub live: Vec<(SeqId, Tokens)>,
    /// Pages sealed when they filled, kept BF16, moved as bytes, sealed by a move.
    pub paths: [usize; 4],
    /// The drive's generator, for the caller's queries.
    pub rng: Rng,
}

/// The model's page table and the block tables of the live sequences.
pub struct Tables {
    /// One device word per page id below the pool's id capacity.
    pub words: Vec<u64>,
    /// `[live sequences, max_pages]` page ids (`u32::MAX` past a sequence's pages).
    pub pages: Vec<u32>,
    /// Entries per block-table row: the longest sequence's pages plus one.
    pub max_pages: usize,
    /// Context lengths in tokens.
    pub lens: Vec<u32>,
}

fn write(arena: &mut [u8], at: u64, words: &[u16]) {
    for (i, w) in words.iter().enumerate() {
        arena[at as usize + 2 * i..][..2].copy_from_slice(&w.to_le_bytes());
    }
}

/// Drives a pool of one layer of `kv_heads x head_dim` through [`PLANS`]: chunks of four
/// BF16 pages, 48 private and 8 shared, size classes `classes` (the BF16 page the largest),
/// tails that would fill less than 90% of a fresh segment kept BF16 (moved, and sealed,
/// later). Token values come from `word(token of its sequence, kind 0 = K / 1 = V, head,
/// channel)`, called K then V for each value; `seal(page id, K rows, V rows)` (16 tokens
/// each) gives a full page's sealed bytes.
///
/// # Panics
/// When the pool refuses an operation of the script (a bug in it or in the pool).
pub fn drive(
    kv_heads: usize,
    head_dim: usize,
    classes: SizeClasses,
    seed: u32,
    mut word: impl FnMut(usize, usize, usize, usize) -> u16,
    mut seal: impl FnMut(PageId, &[u16], &[u16]) -> Vec<u8>,
) -> Driven {
    let row = kv_heads * head_dim;
    let page_values = PAGE_TOKENS * row;
    let page_bytes = 4 * page_values;
    let cfg = PoolConfig {
        layers: 1,
        chunk_bytes: 4 * page_bytes as u64,
        private_chunks: 48,
        shared_chunks: 8,
        page_tokens: PAGE_TOKENS as u32,
        classes,
        tail_fill_percent: 90,
    };
    let mut pool = Pool::new(cfg.clone()).unwrap();
    pool.record_changes(true);
    let mut arena = vec![0u8; cfg.arena_bytes() as usize];
    let mut rng = Rng(seed | 1);
    let mut live: HashMap<SeqId, (Tokens, Option<PageId>)> = HashMap::new();
    let mut kept: HashMap<PageId, Vec<u8>> = HashMap::new();
    let mut steps = Vec::new();
    let mut paths = [0usize; 4];
    let mut step = 0;
    loop {
        for plan in PLANS.iter().filter(|p| p.admit_at == step) {
            pool.reserve(plan.seq, plan.tokens.div_ceil(PAGE_TOKENS) as u64).unwrap();
            live.insert(plan.seq, (Tokens::default(), None));
        }
        for plan in PLANS.iter().filter(|p| p.release_at == Some(step)) {
            for id in pool.seq_pages(plan.seq).unwrap() {
                kept.remove(&id);
            }
            pool.release(plan.seq).unwrap();
            live.remove(&plan.seq);
        }
        let mut growing = false;
        let mut seqs: Vec<SeqId> = live.keys().copied().collect();
        seqs.sort_unstable();
        for seq in seqs {
            let plan = PLANS.iter().find(|p| p.seq == seq).unwrap();
            let (tokens, open) = live.get_mut(&seq).unwrap();
            let t = tokens.k.len() / row;
            if t == plan.tokens {
                continue;
            }
            growing = true;
            let page = *open.get_or_insert_with(|| pool.alloc(seq, 0).unwrap());
            let at = pool.entry(page).unwrap().location.arena_offset(cfg.chunk_bytes);
            let (k, v): (Vec<u16>, Vec<u16>) = (0..row)
                .map(|i| {
                    let k = word(t, 0, i / head_dim, i % head_dim);
                    (k, word(t, 1, i / head_dim, i % head_dim))
                })
                .unzip();
            let slot = (t % PAGE_TOKENS * row * 2) as u64;
            write(&mut arena, at + slot, &k);
            write(&mut arena, at + 2 * page_values as u64 + slot, &v);
            tokens.k.extend(k);
            tokens.v.extend(v);
            if (t + 1).is_multiple_of(PAGE_TOKENS) {
                *open = None;
                let first = (t + 1 - PAGE_TOKENS) * row;
                let bytes = seal(page, &tokens.k[first..], &tokens.v[first..]);
                match pool.compress(page, bytes.len() as u32).unwrap() {
                    CompressOutcome::Moved(m) => {
                        arena[m.to.arena_offset(cfg.chunk_bytes) as usize..][..bytes.len()]
                            .copy_from_slice(&bytes);
                        paths[0] += 1;
                    }
                    CompressOutcome::Kept => {
                        kept.insert(page, bytes);
                        paths[1] += 1;
                    }
                }
            }
        }
        // Every 5th step a full page moves: a kept one first (the move seals it).
        if step % 5 == 4 {
            let full: Vec<PageId> = pool
                .page_table()
                .filter(|(_, e)| e.format.content_bytes().is_some())
                .map(|(id, _)| id)
                .collect();
            let pick = full
                .iter()
                .find(|id| kept.contains_key(id))
                .copied()
                .or_else(|| (!full.is_empty()).then(|| full[rng.next() as usize % full.len()]));
            if let Some(page) = pick
                && let Ok(m) = pool.move_page(page)
            {
                let to = m.to.arena_offset(cfg.chunk_bytes) as usize;
                if m.compress {
                    let bytes = kept.remove(&page).unwrap();
                    arena[to..][..bytes.len()].copy_from_slice(&bytes);
                    paths[3] += 1;
                } else {
                    let from = m.from.arena_offset(cfg.chunk_bytes) as usize;
                    arena.copy_within(from..from + m.bytes as usize, to);
                    kept.remove(&page);
                    paths[2] += 1;
                }
            }
        }
        let epoch = step as u64 + 1;
        pool.submit(epoch).unwrap();
        steps.push(StepWork::from_changes(&pool.take_changes(), &cfg));
        if epoch > 1 {
            pool.complete(epoch - 1).unwrap();
        }
        step += 1;
        if !growing && PLANS.iter().all(|p| p.admit_at < step) {
            break;
        }
    }
    let mut live: Vec<(SeqId, Tokens)> = live.into_iter().map(|(s, (t, _))| (s, t)).collect();
    live.sort_unstable_by_key(|(s, _)| *s);
    Driven { cfg, pool, arena, steps, live, paths, rng }
}

impl Driven {
    /// The model's page table words and the live sequences' block tables; `row` is
    /// `kv_heads x head_dim`, the values of one token's K (or V).
    pub fn tables(&self, row: usize) -> Tables {
        let words = (0..self.pool.id_capacity())
            .map(|id| self.pool.entry(id).map_or(INVALID_WORD, |e| e.device_word(self.cfg.chunk_bytes)))
            .collect();
        let max_pages =
            self.live.iter().map(|(s, _)| self.pool.seq_pages(*s).unwrap().len()).max().unwrap() + 1;
        let mut pages = vec![u32::MAX; self.live.len() * max_pages];
        let mut lens = Vec::new();
        for (b, (seq, tokens)) in self.live.iter().enumerate() {
            let ids = self.pool.seq_pages(*seq).unwrap();
            pages[b * max_pages..][..ids.len()].copy_from_slice(&ids);
            lens.push((tokens.k.len() / row) as u32);
        }
        Tables { words, pages, max_pages, lens }
    }
}
