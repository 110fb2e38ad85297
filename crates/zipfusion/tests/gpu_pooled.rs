//! Fused decode attention over a pool-managed cache (issue 19, "the attention kernels read
//! through [the page table]"): a CPU `kvcodec_pool::Pool` admits sequences, appends their
//! tokens one decode step at a time (K and V rows written into the open page where the
//! pool put it), compresses every page that fills (the real ZipFusion page bytes written
//! where the pool moves it; pages the pool keeps BF16 stay in their open slot), moves
//! pages (a kept page is compressed by its move), releases a sequence and admits another
//! into the room. The device pool's page table follows the recorded changes
//! (`DevicePool::update_table`); its arena gets the host arena's bytes in one copy (the
//! pool replay's device moves copy a stand-in of the compressed length, not ZipFusion
//! pages). The fused kernel reading the arena through that table
//! must give the BF16 twin's bits on the decoded copy, and so must the pooled twin on a
//! BF16 pool of the copy; hostile table words and ids are flagged, never read (run under
//! compute-sanitizer memcheck on the device). GPU tests skip without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

use std::collections::HashMap;

use kvcodec_attention::gpu::{DecodeWorkspace, GpuError, decode_to_vec};
use kvcodec_attention::pooled::{
    DevicePooledKv, DevicePooledProblem, INVALID_WORD, PooledKv, PooledPage, PooledProblem, bf16_page_bytes,
    decode_pooled_to_vec as twin_pooled_to_vec,
};
use kvcodec_attention::{
    AttentionError, BlockTables, DecodeShape, PAGE_TOKENS, PoolFault, reference, relative_l2_error,
};
use kvcodec_pool::gpu::{DevicePool, StepWork};
use kvcodec_pool::{CompressOutcome, ID_BLOCK, PageId, Pool, PoolConfig, SeqId, SizeClasses};
use kvcodec_testkit::{Rng, bf16, floats, gpu_or_skip};
use zipfusion::attention::{FusedError, decode_device_pooled, decode_pooled_to_vec, pooled_decoded_copy};
use zipfusion::{PageShape, Variant, encode_page};

const MAX_RELATIVE_L2: f64 = 1e-2;

/// A sequence of the drive: when it is admitted, how many tokens it reaches, and when (if
/// ever) it is released before the attention step.
struct Plan {
    seq: SeqId,
    admit_at: usize,
    tokens: usize,
    release_at: Option<usize>,
}

const PLANS: [Plan; 6] = [
    Plan { seq: 1, admit_at: 0, tokens: 300, release_at: None },
    Plan { seq: 2, admit_at: 0, tokens: 37, release_at: None },
    Plan { seq: 3, admit_at: 0, tokens: 150, release_at: Some(120) },
    Plan { seq: 4, admit_at: 2, tokens: 200, release_at: None },
    Plan { seq: 5, admit_at: 5, tokens: 96, release_at: None },
    Plan { seq: 6, admit_at: 121, tokens: 170, release_at: None },
];

/// A sequence's tokens so far: K and V rows, `[tokens, kv_heads, head_dim]`.
#[derive(Default)]
struct Tokens {
    k: Vec<u16>,
    v: Vec<u16>,
}

/// What a drive leaves: the pool, its arena on the host (real bytes), each epoch's device
/// work, the live sequences' tokens, and how many pages took each path.
struct Driven {
    shape: DecodeShape,
    cfg: PoolConfig,
    pool: Pool,
    arena: Vec<u8>,
    steps: Vec<StepWork>,
    live: Vec<(SeqId, Tokens)>,
    q: Vec<u16>,
    /// Pages compressed when they filled, kept BF16, moved as bytes, compressed by a move.
    paths: [usize; 4],
}

fn write(arena: &mut [u8], at: u64, words: &[u16]) {
    for (i, w) in words.iter().enumerate() {
        arena[at as usize + 2 * i..][..2].copy_from_slice(&w.to_le_bytes());
    }
}

/// Drives a pool of one layer of `shape` (its batch ignored) through [`PLANS`]; token
/// values come from `word`.
fn drive(shape: DecodeShape, variant: Variant, seed: u32, mut word: impl FnMut() -> u16) -> Driven {
    let row = shape.kv_heads * shape.head_dim;
    let page_values = shape.page_values();
    let page_bytes = bf16_page_bytes(shape);
    let page_shape = PageShape::new(shape.kv_heads, shape.head_dim).unwrap();
    let classes = SizeClasses::stepped(page_shape.min_page_len() as u32, page_bytes as u32, 512).unwrap();
    let cfg = PoolConfig {
        layers: 1,
        chunk_bytes: 4 * page_bytes as u64,
        private_chunks: 48,
        shared_chunks: 8,
        page_tokens: PAGE_TOKENS as u32,
        classes,
        // Tails that would fill less than 90% of a fresh segment stay BF16 (moved, and compressed, later).
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
            let (k, v): (Vec<u16>, Vec<u16>) = (0..row).map(|_| (word(), word())).unzip();
            let slot = (t % PAGE_TOKENS * row * 2) as u64;
            write(&mut arena, at + slot, &k);
            write(&mut arena, at + 2 * page_values as u64 + slot, &v);
            tokens.k.extend(k);
            tokens.v.extend(v);
            if (t + 1).is_multiple_of(PAGE_TOKENS) {
                *open = None;
                let first = (t + 1 - PAGE_TOKENS) * row;
                let bytes = encode_page(&tokens.k[first..], &tokens.v[first..], page_shape, variant).unwrap();
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
        // Every 5th step a full page moves: a kept one first (the move compresses it).
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
    let shape = DecodeShape { batch: live.len(), ..shape };
    let q = (0..shape.q_values()).map(|_| bf16(rng.normal(1.0))).collect();
    Driven { shape, cfg, pool, arena, steps, live, q, paths }
}

/// The model's page table and the block tables of the live sequences.
struct Tables {
    words: Vec<u64>,
    pages: Vec<u32>,
    max_pages: usize,
    lens: Vec<u32>,
}

impl Driven {
    fn tables(&self) -> Tables {
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
            lens.push((tokens.k.len() / (self.shape.kv_heads * self.shape.head_dim)) as u32);
        }
        Tables { words, pages, max_pages, lens }
    }

    fn problem<'a>(&'a self, t: &'a Tables) -> PooledProblem<'a> {
        PooledProblem {
            shape: self.shape,
            q: &self.q,
            cache: PooledKv { arena: &self.arena, table: &t.words },
            tables: BlockTables { pages: &t.pages, max_pages: t.max_pages, context_lens: &t.lens },
            scale: 1.0 / (self.shape.head_dim as f32).sqrt(),
        }
    }
}

fn real_words() -> Vec<u16> {
    kvcodec_testkit::fixtures()[0].1.concat_words()
}

fn shapes() -> [DecodeShape; 3] {
    [
        DecodeShape { batch: 0, q_heads: 8, kv_heads: 2, head_dim: 128 },
        DecodeShape { batch: 0, q_heads: 9, kv_heads: 3, head_dim: 64 },
        DecodeShape { batch: 0, q_heads: 4, kv_heads: 1, head_dim: 256 },
    ]
}

fn driven(shape: DecodeShape, variant: Variant, words: &[u16]) -> Driven {
    let mut at = 0;
    drive(shape, variant, 7, || {
        at += 1;
        words[(at * 7) % words.len()]
    })
}

#[test]
fn the_decoded_copy_of_a_driven_pool_is_the_tokens_written() {
    let words = real_words();
    for shape in shapes() {
        for variant in Variant::ALL {
            let d = driven(shape, variant, &words);
            assert!(
                d.paths.iter().all(|&n| n > 0),
                "{shape:?} {variant:?}: every page path taken: {:?}",
                d.paths
            );
            eprintln!("{shape:?} {variant:?}: page paths {:?}", d.paths);
            let t = d.tables();
            let problem = d.problem(&t);
            let copy = pooled_decoded_copy(&problem, variant).unwrap();
            let row = shape.kv_heads * shape.head_dim;
            for (b, (_, tokens)) in d.live.iter().enumerate() {
                let len = tokens.k.len() / row;
                for token in 0..len {
                    let page = copy.pages[b * t.max_pages + token / PAGE_TOKENS] as usize;
                    let at = page * shape.page_values() + token % PAGE_TOKENS * row;
                    assert_eq!(copy.k[at..at + row], tokens.k[token * row..][..row], "K of {b}/{token}");
                    assert_eq!(copy.v[at..at + row], tokens.v[token * row..][..row], "V of {b}/{token}");
                }
            }
        }
    }
}

/// The BF16 pool of a decoded copy: page `i` at `i` BF16 pages' bytes, K then V.
fn bf16_pool(shape: DecodeShape, k: &[u16], v: &[u16]) -> (Vec<u8>, Vec<u64>) {
    let pv = shape.page_values();
    let mut arena = vec![0u8; k.len() / pv * bf16_page_bytes(shape)];
    let mut words = Vec::new();
    for (i, (kp, vp)) in k.chunks(pv).zip(v.chunks(pv)).enumerate() {
        let at = (i * bf16_page_bytes(shape)) as u64;
        write(&mut arena, at, kp);
        write(&mut arena, at + 2 * pv as u64, vp);
        words.push(PooledPage::Bf16 { offset: at }.word());
    }
    (arena, words)
}

#[test]
fn pooled_fused_is_the_twin_on_a_driven_pool() {
    let words = real_words();
    let Some(gpu) = gpu_or_skip("pooled_fused_is_the_twin_on_a_driven_pool") else { return };
    for shape in shapes() {
        for variant in Variant::ALL {
            let d = driven(shape, variant, &words);
            let what = format!("{shape:?} {variant:?} paths {:?}", d.paths);
            let t = d.tables();
            let problem = d.problem(&t);
            // The device pool's table, from the drive's recorded changes, is the model's.
            let mut dev = DevicePool::new(&gpu, &d.cfg, ID_BLOCK).unwrap();
            for work in &d.steps {
                dev.update_table(work).unwrap();
            }
            let table = dev.download_table().unwrap();
            assert_eq!(table[..t.words.len()], t.words[..], "{what}: device table");
            assert!(table[t.words.len()..].iter().all(|&w| w == INVALID_WORD));
            gpu.stream().memcpy_htod(&d.arena, dev.arena_mut()).unwrap();

            let copy = pooled_decoded_copy(&problem, variant).unwrap();
            let twin_problem = copy.problem(&problem);
            let twin = decode_to_vec(&gpu, &twin_problem).unwrap();

            let shape = d.shape;
            let q = gpu.upload(&d.q).unwrap();
            let block_table = gpu.upload(&t.pages).unwrap();
            let lens = gpu.upload(&t.lens).unwrap();
            let mut out = gpu.zeros::<u16>(shape.q_values()).unwrap();
            let mut lse = gpu.zeros::<f32>(shape.batch * shape.q_heads).unwrap();
            let mut workspace = DecodeWorkspace::new(&gpu, shape, t.max_pages).unwrap();
            let device = DevicePooledProblem {
                shape,
                q: q.slice(..),
                cache: DevicePooledKv { arena: dev.arena().slice(..), table: dev.table().slice(..) },
                block_table: block_table.slice(..),
                max_pages: t.max_pages,
                context_lens: lens.slice(..),
                scale: problem.scale,
            };
            decode_device_pooled(
                &gpu,
                &mut workspace,
                variant,
                &device,
                &mut out.slice_mut(..),
                &mut lse.slice_mut(..),
            )
            .unwrap();
            workspace.check(&gpu).unwrap();
            let out = gpu.download(&out, shape.q_values()).unwrap();
            let lse = gpu.download(&lse, shape.batch * shape.q_heads).unwrap();
            assert!(out == twin.out, "{what}: out differs from the twin's");
            assert!(
                lse.iter().zip(&twin.lse).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: lse differs"
            );
            // The host convenience (its own upload of arena and table) gives the same bits.
            let host = decode_pooled_to_vec(&gpu, variant, &problem).unwrap();
            assert!(host.out == twin.out && host.lse == twin.lse, "{what}: decode_pooled_to_vec");
            // The pooled twin over the copy laid out as a BF16 pool.
            let (arena, pool_words) = bf16_pool(shape, &copy.k, &copy.v);
            let bf16_problem = PooledProblem {
                cache: PooledKv { arena: &arena, table: &pool_words },
                tables: BlockTables { pages: &copy.pages, ..problem.tables },
                ..problem
            };
            let pooled_twin = twin_pooled_to_vec(&gpu, &bf16_problem).unwrap();
            assert!(pooled_twin.out == twin.out && pooled_twin.lse == twin.lse, "{what}: pooled twin");
            let want = reference(&twin_problem).unwrap();
            let error = relative_l2_error(&floats(&out), &want.out);
            assert!(error < MAX_RELATIVE_L2, "{what}: relative L2 error {error:.2e}");
            eprintln!("{what}: identical to the twin; relative L2 error {error:.2e}");
        }
    }
}

/// The device status of the fused kernel over `words` and `pages` (every other buffer the
/// driven problem's), or 0.
fn device_status(
    gpu: &kvcodec_gpu::GpuContext,
    problem: &PooledProblem<'_>,
    variant: Option<Variant>,
) -> u32 {
    let result =
        kvcodec_attention::pooled::run_pooled(gpu, problem, |workspace, device, out, lse| match variant {
            Some(variant) => decode_device_pooled(gpu, workspace, variant, device, out, lse),
            None => kvcodec_attention::pooled::decode_device_pooled(gpu, workspace, device, out, lse),
        });
    match result {
        Ok(_) => 0,
        Err(GpuError::Disagreement { status, .. }) => status,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn hostile_table_words_are_flagged_and_never_read() {
    const BAD_PAGE: u32 = 2;
    const BAD_METADATA: u32 = 4;
    let words = real_words();
    let shape = shapes()[0];
    let variant = Variant::Base;
    let d = driven(shape, variant, &words);
    let t = d.tables();
    let arena_len = d.arena.len() as u64;
    // Sequence 0's first page (full) and sequence 1's last (partial: 37 tokens).
    let full = t.pages[0];
    let partial_at = t.max_pages + 2;
    let partial = t.pages[partial_at];
    let bf16_at = match PooledPage::from_word(t.words[partial as usize]) {
        Some(PooledPage::Bf16 { offset }) => offset,
        other => panic!("an open page is BF16: {other:?}"),
    };
    let cases: Vec<(&str, u32, u64, u32, Option<PoolFault>)> = vec![
        ("no live page", full, INVALID_WORD, BAD_PAGE, Some(PoolFault::NotLive)),
        (
            "misaligned",
            full,
            PooledPage::Bf16 { offset: 8 }.word(),
            BAD_PAGE,
            Some(PoolFault::Misaligned { offset: 8 }),
        ),
        (
            "BF16 page past the arena",
            full,
            PooledPage::Bf16 { offset: arena_len - 16 }.word(),
            BAD_PAGE,
            Some(PoolFault::PastArena {
                offset: arena_len - 16,
                bytes: bf16_page_bytes(shape) as u64,
                arena: arena_len,
            }),
        ),
        ("offset far past the arena", full, PooledPage::Bf16 { offset: 1 << 60 }.word(), BAD_PAGE, None),
        (
            "compressed page at the arena's end",
            full,
            PooledPage::Compressed { offset: arena_len - 16 }.word(),
            BAD_METADATA,
            None,
        ),
        (
            "compressed page past the arena",
            full,
            PooledPage::Compressed { offset: arena_len }.word(),
            BAD_METADATA,
            None,
        ),
        (
            "compressed last page",
            partial,
            PooledPage::Compressed { offset: bf16_at }.word(),
            BAD_PAGE,
            Some(PoolFault::Compressed),
        ),
        (
            "BF16 bytes read as a compressed page",
            full,
            PooledPage::Compressed { offset: bf16_at }.word(),
            BAD_METADATA,
            None,
        ),
    ];
    let gpu = gpu_or_skip("hostile_table_words_are_flagged_and_never_read");
    for (what, id, word, flag, fault) in cases {
        let mut table = t.words.clone();
        table[id as usize] = word;
        let problem = PooledProblem { cache: PooledKv { arena: &d.arena, table: &table }, ..d.problem(&t) };
        let host = pooled_decoded_copy(&problem, variant);
        match fault {
            Some(fault) => {
                let logical = if id == full { 0 } else { 2 };
                let sequence = usize::from(id != full);
                let want = AttentionError::PoolPage { sequence, logical, page: id, fault };
                assert_eq!(host, Err(FusedError::Problem(want)), "{what}");
            }
            None => assert!(host.is_err(), "{what}: the host refuses it"),
        }
        if let Some(gpu) = &gpu {
            assert_eq!(device_status(gpu, &problem, Some(variant)), flag, "{what}");
        }
    }
    // A block-table id past the page table.
    let mut pages = t.pages.clone();
    pages[0] = t.words.len() as u32 + 5;
    let problem =
        PooledProblem { tables: BlockTables { pages: &pages, ..d.problem(&t).tables }, ..d.problem(&t) };
    let fault = PoolFault::IdPastTable { ids: t.words.len() };
    let want = AttentionError::PoolPage { sequence: 0, logical: 0, page: pages[0], fault };
    assert_eq!(problem.validate(Some(1)), Err(want));
    // The twin reads BF16 pages only: a pool with compressed pages is refused.
    let problem = d.problem(&t);
    assert!(matches!(
        problem.validate(None),
        Err(AttentionError::PoolPage { fault: PoolFault::Compressed, .. })
    ));
    if let Some(gpu) = &gpu {
        let bad = PooledProblem { tables: BlockTables { pages: &pages, ..problem.tables }, ..problem };
        assert_eq!(device_status(gpu, &bad, Some(variant)), BAD_PAGE, "id past the table");
        assert_eq!(device_status(gpu, &problem, None), BAD_PAGE, "the twin over compressed pages");
        assert_eq!(device_status(gpu, &problem, Some(variant)), 0, "the untouched problem");
    }
}
