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

use kvcodec_attention::gpu::{DecodeWorkspace, GpuError, decode_to_vec};
use kvcodec_attention::pooled::{
    DevicePooledKv, DevicePooledProblem, INVALID_WORD, PooledKv, PooledPage, PooledProblem, bf16_page_bytes,
    decode_pooled_to_vec as twin_pooled_to_vec,
};
use kvcodec_attention::{
    AttentionError, BlockTables, DecodeShape, PAGE_TOKENS, PoolFault, reference, relative_l2_error,
};
use kvcodec_pool::gpu::DevicePool;
use kvcodec_pool::{ID_BLOCK, SizeClasses};
use kvcodec_testkit::pool::{self, Tables};
use kvcodec_testkit::{bf16, floats, gpu_or_skip};
use zipfusion::attention::{FusedError, decode_device_pooled, decode_pooled_to_vec, pooled_decoded_copy};
use zipfusion::{PageShape, Variant, encode_page};

const MAX_RELATIVE_L2: f64 = 1e-2;

/// A drive of [`kvcodec_testkit::pool`] with ZipFusion pages, the decode shape of its
/// live sequences and their query.
struct Driven {
    shape: DecodeShape,
    q: Vec<u16>,
    run: pool::Driven,
}

impl std::ops::Deref for Driven {
    type Target = pool::Driven;
    fn deref(&self) -> &pool::Driven {
        &self.run
    }
}

fn write(arena: &mut [u8], at: u64, words: &[u16]) {
    for (i, w) in words.iter().enumerate() {
        arena[at as usize + 2 * i..][..2].copy_from_slice(&w.to_le_bytes());
    }
}

/// Drives a pool of one layer of `shape` (its batch ignored) through the test kit's plans,
/// sealing pages with [`encode_page`]; token values come from `word`.
fn drive(shape: DecodeShape, variant: Variant, seed: u32, mut word: impl FnMut() -> u16) -> Driven {
    let page_shape = PageShape::new(shape.kv_heads, shape.head_dim).unwrap();
    let classes =
        SizeClasses::stepped(page_shape.min_page_len() as u32, bf16_page_bytes(shape) as u32, 512).unwrap();
    let mut run = pool::drive(
        shape.kv_heads,
        shape.head_dim,
        classes,
        seed,
        |_, _, _, _| word(),
        |_, k, v| encode_page(k, v, page_shape, variant).unwrap(),
    );
    let shape = DecodeShape { batch: run.live.len(), ..shape };
    let q = (0..shape.q_values()).map(|_| bf16(run.rng.normal(1.0))).collect();
    Driven { shape, q, run }
}

impl Driven {
    fn tables(&self) -> Tables {
        self.run.tables(self.shape.kv_heads * self.shape.head_dim)
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
