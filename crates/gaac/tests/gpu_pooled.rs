//! Fused decode attention over a pool-managed GAAC cache (issue 19, "the attention
//! kernels read through [the page table]"; `docs/formats/gaac.md` §10.1): a CPU
//! `kvcodec_pool::Pool` admits sequences, appends their tokens one decode step at a time
//! (K and V rows written into the open page where the pool put it), seals every page that
//! fills into one GAAC extent (its `2 H` slots by the CPU encoder, then its raw blocks)
//! written where the pool moves it (pages the pool keeps BF16 stay in their open slot),
//! moves pages (a kept page is compressed by its move, a compressed one copied with its
//! raw blocks), releases a sequence and admits another into the room. The directory is
//! indexed by page id, with raw indices relative to the extent, and never changes when a
//! page moves. The fused kernel reading the arena through the device pool's table must
//! give the BF16 twin's bits on the decoded copy; hostile table words and directory
//! entries are flagged, never read (run under compute-sanitizer memcheck on the device).
//! The CPU tests run everywhere; GPU tests skip without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

use bf16_field::{KvKind, KvShape};
use gaac::Bases;
use gaac::attention::{
    CODED, DeviceGaacPoolLayer, FusedError, GaacPoolLayer, decode_device_pooled, decode_pooled_to_vec,
    encode_block, pooled_decoded_copy, pooled_page_bytes, raw_block_bytes,
};
use gaac::format::BlockShape;
use kvcodec_attention::gpu::{DecodeWorkspace, GpuError, decode_to_vec};
use kvcodec_attention::pooled::{
    DevicePooledKv, DevicePooledProblem, INVALID_WORD, PooledKv, PooledPage, PooledProblem, bf16_page_bytes,
};
use kvcodec_attention::{
    AttentionError, BlockTables, DecodeShape, PAGE_TOKENS, PoolFault, reference, relative_l2_error,
};
use kvcodec_pool::gpu::DevicePool;
use kvcodec_pool::{ID_BLOCK, SizeClasses};
use kvcodec_testkit::pool::{self, Tables};
use kvcodec_testkit::{Rng, bf16, floats, gpu_or_skip};

const MAX_RELATIVE_L2: f64 = 1e-2;
const BAD_PAGE: u32 = 2;
const BAD_METADATA: u32 = 4;

/// A drive of [`kvcodec_testkit::pool`] with GAAC extents: the decode shape of its live
/// sequences, their query, the slot capacity, the directory (`[id capacity, 2, kv_heads]`,
/// by page id) and the bases.
struct Driven {
    shape: DecodeShape,
    q: Vec<u16>,
    capacity: usize,
    directory: Vec<u32>,
    bases: Vec<u8>,
    run: pool::Driven,
}

impl std::ops::Deref for Driven {
    type Target = pool::Driven;
    fn deref(&self) -> &pool::Driven {
        &self.run
    }
}

/// One page's GAAC extent (`[2, H]` slots, then raw blocks in block order) of 16 tokens'
/// K and V rows, and its directory row.
fn seal(shape: DecodeShape, capacity: usize, bases: &[u8], k: &[u16], v: &[u16]) -> (Vec<u8>, Vec<u32>) {
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let row = heads * d;
    let mut slots = vec![0u8; pooled_page_bytes(shape, capacity, 0)];
    let mut raw = Vec::new();
    let mut directory = vec![CODED; 2 * heads];
    for (kind, (rows, kv_kind)) in [(k, KvKind::K), (v, KvKind::V)].into_iter().enumerate() {
        for head in 0..heads {
            let words: Vec<u16> =
                rows[..PAGE_TOKENS * row].chunks(row).flat_map(|t| &t[head * d..][..d]).copied().collect();
            let index = kind * heads + head;
            let slot = &mut slots[index * capacity..][..capacity];
            let head_bases = &bases[index * d..][..d];
            if encode_block(kv_kind, &words, head_bases, d, slot).unwrap().is_none() {
                directory[index] = (raw.len() / raw_block_bytes(d)) as u32 + 1;
                raw.extend(words.iter().flat_map(|w| w.to_le_bytes()));
            }
        }
    }
    slots.extend(raw);
    (slots, directory)
}

/// Drives a pool of one layer of `shape` (its batch ignored) through [`PLANS`]; token
/// values from `word(token of the sequence, kind, head, channel, widened)` (bases
/// calibrated on 64 tokens of it, not widened).
fn drive(
    shape: DecodeShape,
    seed: u32,
    mut word: impl FnMut(usize, usize, usize, usize, bool) -> u16,
) -> Driven {
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let row = heads * d;
    let page_bytes = bf16_page_bytes(shape);
    let block = BlockShape::new(d).unwrap();
    let capacity = block.default_capacity();
    let sample = 64;
    let mut calib = vec![0u16; 2 * sample * row];
    for (i, w) in calib.iter_mut().enumerate() {
        *w = word(i / row % sample, i / (sample * row), i % row / d, i % d, false);
    }
    let bases = Bases::calibrate_words(&calib, KvShape::new(1, heads, d, sample).unwrap(), sample)
        .unwrap()
        .as_bytes()
        .to_vec();
    // Size classes: the page's slots with 0, 1, ... raw blocks, below the BF16 page.
    let classes: Vec<u32> = (0..=2 * heads)
        .map(|k| pooled_page_bytes(shape, capacity, k) as u32)
        .filter(|&b| b < page_bytes as u32)
        .chain([page_bytes as u32])
        .collect();
    // Rows of ids never sealed hold u32::MAX (never read).
    let mut directory = Vec::new();
    let mut run = pool::drive(
        heads,
        d,
        SizeClasses::new(classes).unwrap(),
        seed,
        |t, kind, head, channel| word(t, kind, head, channel, true),
        |page, k, v| {
            let (bytes, dir) = seal(shape, capacity, &bases, k, v);
            let end = (page as usize + 1) * 2 * heads;
            if directory.len() < end {
                directory.resize(end, u32::MAX);
            }
            directory[end - 2 * heads..end].copy_from_slice(&dir);
            bytes
        },
    );
    directory.resize(run.pool.id_capacity() as usize * 2 * heads, u32::MAX);
    let shape = DecodeShape { batch: run.live.len(), ..shape };
    let q = (0..shape.q_values()).map(|_| bf16(run.rng.normal(1.0))).collect();
    Driven { shape, q, capacity, directory, bases, run }
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

    fn layer(&self) -> GaacPoolLayer<'_> {
        GaacPoolLayer { capacity: self.capacity, directory: &self.directory, bases: &self.bases }
    }

    /// Raw blocks of the compressed pages the live sequences read.
    fn raw_blocks_read(&self, t: &Tables) -> usize {
        let heads = 2 * self.shape.kv_heads;
        let mut ids: Vec<u32> = t.pages.iter().copied().filter(|&id| id != u32::MAX).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.iter()
            .filter(|&&id| {
                matches!(PooledPage::from_word(t.words[id as usize]), Some(PooledPage::Compressed { .. }))
            })
            .map(|&id| self.directory[id as usize * heads..][..heads].iter().filter(|&&e| e != CODED).count())
            .sum()
    }
}

fn shapes() -> [DecodeShape; 3] {
    [
        DecodeShape { batch: 0, q_heads: 8, kv_heads: 2, head_dim: 128 },
        DecodeShape { batch: 0, q_heads: 9, kv_heads: 3, head_dim: 64 },
        DecodeShape { batch: 0, q_heads: 4, kv_heads: 1, head_dim: 256 },
    ]
}

/// Real KV words: layer 1 of the first fixture, token `t % T`, head `h % H`, channel
/// `c % D` of the fixture's shape. On some pages one head's K (every 4th page from page
/// 2) or the last head's V (every 8th from page 6) is spread over 2^-5 .. 2^5 (`widened`),
/// so that those blocks get 4-bit and raw groups past the default capacity: raw blocks.
fn driven(shape: DecodeShape, real: &bf16_field::KvCache) -> Driven {
    let mut rng = Rng(11);
    let last = shape.kv_heads - 1;
    let f = real.shape();
    drive(shape, 7, |token, kind, head, channel, widened| {
        let tensor = real.tensor(1, if kind == 0 { KvKind::K } else { KvKind::V });
        let w =
            tensor[((token % f.tokens) * f.kv_heads + head % f.kv_heads) * f.head_dim + channel % f.head_dim];
        let page = token / PAGE_TOKENS;
        let wide = (kind == 0 && head == 0 && page % 4 == 2) || (kind == 1 && head == last && page % 8 == 6);
        if !(widened && wide) {
            return w;
        }
        let scale = 2f32.powi((rng.next() % 11) as i32 - 5);
        bf16(f32::from_bits(u32::from(w) << 16) * scale)
    })
}

fn real_kv() -> bf16_field::KvCache {
    kvcodec_testkit::fixtures().swap_remove(0).1
}

#[test]
fn the_decoded_copy_of_a_driven_pool_is_the_tokens_written() {
    let real = real_kv();
    for shape in shapes() {
        let d = driven(shape, &real);
        let t = d.tables();
        let raw = d.raw_blocks_read(&t);
        eprintln!("{shape:?}: page paths {:?}, raw blocks read {raw}", d.paths);
        assert!(d.paths[..4].iter().all(|&n| n > 0), "{shape:?}: every page path taken: {:?}", d.paths);
        // At one KV head a raw block (half a BF16 page) and the two slots pass the BF16
        // page: such a page stays BF16.
        assert!(raw > 0 || shape.kv_heads == 1, "{shape:?}: compressed pages with raw blocks are read");
        let problem = d.problem(&t);
        let copy = pooled_decoded_copy(&problem, &d.layer()).unwrap();
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

#[test]
fn pooled_fused_is_the_twin_on_a_driven_pool() {
    let real = real_kv();
    let Some(gpu) = gpu_or_skip("pooled_fused_is_the_twin_on_a_driven_pool") else { return };
    for shape in shapes() {
        let d = driven(shape, &real);
        let what = format!("{shape:?} paths {:?}", d.paths);
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
        // A directory row per word of the device table (rows past the model's never read).
        let mut directory = d.directory.clone();
        directory.resize(table.len() * 2 * shape.kv_heads, u32::MAX);

        let copy = pooled_decoded_copy(&problem, &d.layer()).unwrap();
        let twin_problem = copy.problem(&problem);
        let twin = decode_to_vec(&gpu, &twin_problem).unwrap();

        let shape = d.shape;
        let q = gpu.upload(&d.q).unwrap();
        let block_table = gpu.upload(&t.pages).unwrap();
        let lens = gpu.upload(&t.lens).unwrap();
        let dir = gpu.upload(&directory).unwrap();
        let bases = gpu.upload(&d.bases).unwrap();
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
        let layer =
            DeviceGaacPoolLayer { capacity: d.capacity, directory: dir.slice(..), bases: bases.slice(..) };
        decode_device_pooled(
            &gpu,
            &mut workspace,
            &layer,
            &device,
            &mut out.slice_mut(..),
            &mut lse.slice_mut(..),
        )
        .unwrap();
        workspace.check(&gpu).unwrap();
        let out = gpu.download(&out, shape.q_values()).unwrap();
        let lse = gpu.download(&lse, shape.batch * shape.q_heads).unwrap();
        assert!(out == twin.out, "{what}: out differs from the twin's");
        assert!(lse.iter().zip(&twin.lse).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: lse differs");
        // A directory one row short is refused before the launch.
        let short = DeviceGaacPoolLayer { directory: dir.slice(..directory.len() - 1), ..layer };
        let (mut out2, mut lse2) =
            (gpu.zeros::<u16>(out.len()).unwrap(), gpu.zeros::<f32>(lse.len()).unwrap());
        let (mut out2, mut lse2) = (out2.slice_mut(..), lse2.slice_mut(..));
        let refused = decode_device_pooled(&gpu, &mut workspace, &short, &device, &mut out2, &mut lse2);
        assert!(
            matches!(refused, Err(GpuError::Gpu(kvcodec_gpu::Error::Buffer { .. }))),
            "{what}: {refused:?}"
        );
        // The host convenience (its own upload of arena, table and directory) gives the same bits.
        let host = decode_pooled_to_vec(&gpu, &d.layer(), &problem).unwrap();
        assert!(host.out == twin.out && host.lse == twin.lse, "{what}: decode_pooled_to_vec");
        let want = reference(&twin_problem).unwrap();
        let error = relative_l2_error(&floats(&out), &want.out);
        assert!(error < MAX_RELATIVE_L2, "{what}: relative L2 error {error:.2e}");
        eprintln!("{what}: identical to the twin; relative L2 error {error:.2e}");
    }
}

/// The device status of the fused kernel over `problem` and `layer` (uploaded), or 0.
fn device_status(
    gpu: &kvcodec_gpu::GpuContext,
    problem: &PooledProblem<'_>,
    layer: &GaacPoolLayer<'_>,
) -> u32 {
    let directory = gpu.upload(layer.directory).unwrap();
    let bases = gpu.upload(layer.bases).unwrap();
    let device = DeviceGaacPoolLayer {
        capacity: layer.capacity,
        directory: directory.slice(..),
        bases: bases.slice(..),
    };
    let result = kvcodec_attention::pooled::run_pooled(gpu, problem, |workspace, problem, out, lse| {
        decode_device_pooled(gpu, workspace, &device, problem, out, lse)
    });
    match result {
        Ok(_) => 0,
        Err(GpuError::Disagreement { status, .. }) => status,
        Err(e) => panic!("{e}"),
    }
}

/// What the host says of a hostile case: a typed pool fault, a layout error of `what`, or
/// any refusal.
enum Host {
    Fault(PoolFault),
    Layout(&'static str),
    Refused,
}

#[test]
fn hostile_words_and_directory_entries_are_flagged_and_never_read() {
    let real = real_kv();
    let shape = shapes()[0];
    let d = driven(shape, &real);
    let t = d.tables();
    let arena_len = d.arena.len() as u64;
    let blocks = 2 * shape.kv_heads;
    let slots = pooled_page_bytes(shape, d.capacity, 0) as u64;
    // Sequence 0's first page and sequence 1's last (partial: 37 tokens).
    let full = t.pages[0];
    let partial_at = t.max_pages + 2;
    let partial = t.pages[partial_at];
    let bf16_at = match PooledPage::from_word(t.words[partial as usize]) {
        Some(PooledPage::Bf16 { offset }) => offset,
        other => panic!("an open page is BF16: {other:?}"),
    };
    // A compressed page the sequences read, and its directory row.
    let compressed = *t
        .pages
        .iter()
        .find(|&&id| {
            id != u32::MAX
                && matches!(PooledPage::from_word(t.words[id as usize]), Some(PooledPage::Compressed { .. }))
        })
        .unwrap();
    let (sequence, logical) = {
        let at = t.pages.iter().position(|&id| id == compressed).unwrap();
        (at / t.max_pages, at % t.max_pages)
    };
    let row = compressed as usize * blocks;
    let compressed_at = PooledPage::from_word(t.words[compressed as usize]).unwrap().offset();
    let page_bytes = bf16_page_bytes(shape) as u64;
    let raw_len = raw_block_bytes(shape.head_dim) as u64;
    // (what, id, word, directory row (None: unchanged), device flag, host)
    type Case = (&'static str, u32, u64, Option<Vec<u32>>, u32, Host);
    let mut one_raw = vec![CODED; blocks];
    one_raw[0] = 1;
    let mut past_blocks = vec![CODED; blocks];
    past_blocks[blocks - 1] = blocks as u32 + 1;
    let cases: Vec<Case> = vec![
        ("no live page", compressed, INVALID_WORD, None, BAD_PAGE, Host::Fault(PoolFault::NotLive)),
        (
            "misaligned",
            compressed,
            PooledPage::Compressed { offset: compressed_at + 8 }.word(),
            None,
            BAD_PAGE,
            Host::Fault(PoolFault::Misaligned { offset: compressed_at + 8 }),
        ),
        (
            "BF16 page past the arena",
            compressed,
            PooledPage::Bf16 { offset: arena_len - 16 }.word(),
            None,
            BAD_PAGE,
            Host::Fault(PoolFault::PastArena { offset: arena_len - 16, bytes: page_bytes, arena: arena_len }),
        ),
        (
            "offset far past the arena",
            compressed,
            PooledPage::Compressed { offset: 1 << 60 }.word(),
            None,
            BAD_PAGE,
            Host::Refused,
        ),
        (
            "compressed slots past the arena",
            compressed,
            PooledPage::Compressed { offset: arena_len - 16 }.word(),
            None,
            BAD_PAGE,
            Host::Fault(PoolFault::PastArena { offset: arena_len - 16, bytes: slots, arena: arena_len }),
        ),
        (
            "a raw block past the arena",
            compressed,
            PooledPage::Compressed { offset: arena_len - slots }.word(),
            Some(one_raw),
            BAD_METADATA,
            Host::Fault(PoolFault::PastArena {
                offset: arena_len - slots,
                bytes: slots + raw_len,
                arena: arena_len,
            }),
        ),
        (
            "a directory entry past the page's blocks",
            compressed,
            t.words[compressed as usize],
            Some(past_blocks),
            BAD_METADATA,
            Host::Layout("directory"),
        ),
        (
            "compressed last page",
            partial,
            PooledPage::Compressed { offset: bf16_at }.word(),
            None,
            BAD_PAGE,
            Host::Fault(PoolFault::Compressed),
        ),
    ];
    let gpu = gpu_or_skip("hostile_words_and_directory_entries_are_flagged_and_never_read");
    for (what, id, word, dir_row, flag, host) in cases {
        let mut table = t.words.clone();
        table[id as usize] = word;
        let mut directory = d.directory.clone();
        if let Some(r) = dir_row {
            directory[row..][..blocks].copy_from_slice(&r);
        }
        let problem = PooledProblem { cache: PooledKv { arena: &d.arena, table: &table }, ..d.problem(&t) };
        let layer = GaacPoolLayer { directory: &directory, ..d.layer() };
        let got = pooled_decoded_copy(&problem, &layer);
        let (seq, log) = if id == partial { (1, 2) } else { (sequence, logical) };
        match host {
            Host::Fault(fault) => {
                let want = AttentionError::PoolPage { sequence: seq, logical: log, page: id, fault };
                assert_eq!(got.err(), Some(FusedError::Problem(want)), "{what}");
            }
            Host::Layout(part) => {
                assert!(
                    matches!(got, Err(FusedError::Layout { what, .. }) if what == part),
                    "{what}: {got:?}"
                )
            }
            Host::Refused => assert!(got.is_err(), "{what}: the host refuses it"),
        }
        if let Some(gpu) = &gpu {
            assert_eq!(device_status(gpu, &problem, &layer), flag, "{what}");
        }
    }
    // The bytes of a BF16 page read as a compressed page: in bounds; the kernel flags
    // at most BAD_METADATA (tags past the slot), never another fault.
    let mut table = t.words.clone();
    table[full as usize] = PooledPage::Compressed { offset: bf16_at }.word();
    let problem = PooledProblem { cache: PooledKv { arena: &d.arena, table: &table }, ..d.problem(&t) };
    if let Some(gpu) = &gpu {
        assert_eq!(device_status(gpu, &problem, &d.layer()) & !BAD_METADATA, 0, "BF16 bytes as GAAC slots");
    }
    // A block-table id past the page table.
    let mut pages = t.pages.clone();
    pages[0] = t.words.len() as u32 + 5;
    let problem =
        PooledProblem { tables: BlockTables { pages: &pages, ..d.problem(&t).tables }, ..d.problem(&t) };
    let fault = PoolFault::IdPastTable { ids: t.words.len() };
    let want = AttentionError::PoolPage { sequence: 0, logical: 0, page: pages[0], fault };
    assert_eq!(pooled_decoded_copy(&problem, &d.layer()).err(), Some(FusedError::Problem(want)));
    if let Some(gpu) = &gpu {
        assert_eq!(device_status(gpu, &problem, &d.layer()), BAD_PAGE, "id past the table");
        assert_eq!(device_status(gpu, &d.problem(&t), &d.layer()), 0, "the untouched problem");
    }
    // Layer errors: a directory not one row per page id, a capacity the kernel does not take.
    let problem = d.problem(&t);
    let short = GaacPoolLayer { directory: &d.directory[1..], ..d.layer() };
    assert!(matches!(
        pooled_decoded_copy(&problem, &short),
        Err(FusedError::Layout { what: "directory", .. })
    ));
    let odd = GaacPoolLayer { capacity: d.capacity + 8, ..d.layer() };
    assert!(matches!(pooled_decoded_copy(&problem, &odd), Err(FusedError::Layout { what: "capacity", .. })));
}
