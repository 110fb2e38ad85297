//! Fused decode attention over GAAC pages: bit-identical to the BF16 twin run on the
//! decoded copy of the same pages (out and lse), within BF16 attention tolerances of the
//! FP64 reference, on generated and real KV values, head_dim 64/128/256, GQA groups 1, 3, 4
//! and 8, contexts with a BF16 last page, blocks with 4-bit and raw groups, raw blocks;
//! directory entries and block lengths checked on the device. GPU tests skip without a GPU
//! unless `KVCODEC_REQUIRE_GPU=1`.

use bf16_field::{KvKind, KvShape};
use gaac::attention::{
    CODED, DeviceGaacPagedKv, DeviceGaacProblem, FusedError, GaacDecodeProblem, GaacPagedKv, decode_cpu,
    decode_device_fused, decode_fused_to_vec, encode_block, max_capacity,
};
use gaac::format::BlockShape;
use gaac::gpu::{SealShape, Sealer, seal_blocks_device};
use gaac::{Bases, TagCounts, block_info};
use kvcodec_attention::gpu::DecodeWorkspace;
use kvcodec_attention::{
    BlockTables, DecodeProblem, DecodeShape, PAGE_TOKENS, PagedKv, reference, relative_l2_error,
};
use kvcodec_testkit::{Rng, bf16, floats, gpu_or_skip};

const MAX_RELATIVE_L2: f64 = 1e-2;
const MAX_LSE_ERROR: f32 = 1e-3;
const NAN: u16 = 0x7fc0;

/// A fused problem that owns its buffers: full pages coded by the CPU encoder into
/// shuffled slot pages (blocks that do not fit in a raw pool), partial last pages in a
/// BF16 pool.
struct Owned {
    shape: DecodeShape,
    q: Vec<u16>,
    slots: Vec<u8>,
    capacity: usize,
    directory: Vec<u32>,
    raw: Vec<u16>,
    bases: Vec<u8>,
    partial_k: Vec<u16>,
    partial_v: Vec<u16>,
    pages: Vec<u32>,
    max_pages: usize,
    lens: Vec<u32>,
    scale: f32,
    /// Every sequence's K and V rows, `[len, kv_heads, head_dim]` each.
    rows: Vec<[Vec<u16>; 2]>,
}

impl Owned {
    fn problem(&self) -> GaacDecodeProblem<'_> {
        GaacDecodeProblem {
            shape: self.shape,
            q: &self.q,
            cache: GaacPagedKv {
                slots: &self.slots,
                capacity: self.capacity,
                directory: &self.directory,
                raw: &self.raw,
                bases: &self.bases,
                partial: PagedKv { k: &self.partial_k, v: &self.partial_v },
            },
            tables: BlockTables { pages: &self.pages, max_pages: self.max_pages, context_lens: &self.lens },
            scale: self.scale,
        }
    }

    fn slot_pages(&self) -> usize {
        self.directory.len() / (2 * self.shape.kv_heads)
    }

    /// Coded and raw blocks, and the coded blocks' groups by tag.
    fn block_mix(&self) -> (usize, usize, TagCounts) {
        let block = BlockShape::new(self.shape.head_dim).unwrap();
        let (mut coded, mut raw, mut groups) = (0, 0, TagCounts::default());
        for (slot, &entry) in self.slots.chunks(self.capacity).zip(&self.directory) {
            if entry != CODED {
                raw += 1;
            } else if let Ok((_, counts)) = block_info(slot, block, self.capacity) {
                coded += 1;
                groups.merge(&counts);
            }
        }
        (coded, raw, groups)
    }
}

/// Sequences of `lens` tokens; K and V words from `word(rng, token)` (the token within the
/// sequence), q roughly normal; bases calibrated on all of them; slots past a context in
/// the BF16 pages hold NaN.
fn build(shape: DecodeShape, lens: &[u32], seed: u32, mut word: impl FnMut(&mut Rng, usize) -> u16) -> Owned {
    let mut rng = Rng(seed | 1);
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let row = heads * d;
    // Every sequence's K and V rows, [len, H, D] each.
    let mut k_rows = Vec::new();
    let mut v_rows = Vec::new();
    for &len in lens {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for slot in 0..len as usize * row {
            k.push(word(&mut rng, slot / row));
            v.push(word(&mut rng, slot / row));
        }
        k_rows.push(k);
        v_rows.push(v);
    }
    let tokens = lens.iter().map(|&l| l as usize).sum::<usize>();
    let all: Vec<u16> = [k_rows.concat(), v_rows.concat()].concat();
    let bases = Bases::calibrate_words(&all, KvShape::new(1, heads, d, tokens).unwrap(), tokens)
        .unwrap()
        .as_bytes()
        .to_vec();
    let block = BlockShape::new(d).unwrap();
    let capacity = block.default_capacity();
    let full: usize = lens.iter().map(|&l| l as usize / PAGE_TOKENS).sum::<usize>() + 1; // a spare page
    let partial: usize = lens.iter().filter(|&&l| !(l as usize).is_multiple_of(PAGE_TOKENS)).count() + 1;
    let mut order: Vec<u32> = (0..full as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.next() as usize % (i + 1));
    }
    let mut slots = vec![0xa5u8; 2 * full * heads * capacity];
    let mut directory = vec![CODED; 2 * full * heads];
    let mut raw = Vec::new();
    let page_values = shape.page_values();
    let mut partial_k = vec![NAN; partial * page_values];
    let mut partial_v = vec![NAN; partial * page_values];
    let max_pages = lens.iter().map(|&l| (l as usize).div_ceil(PAGE_TOKENS)).max().unwrap_or(0) + 1;
    let mut pages = vec![u32::MAX; shape.batch * max_pages];
    let (mut next_slot, mut next_partial) = (0, 0);
    for (b, &len) in lens.iter().enumerate() {
        let len = len as usize;
        for logical in 0..len.div_ceil(PAGE_TOKENS) {
            let tokens = (len - logical * PAGE_TOKENS).min(PAGE_TOKENS);
            let rows = logical * PAGE_TOKENS * row..(logical * PAGE_TOKENS + tokens) * row;
            if tokens < PAGE_TOKENS {
                let at = next_partial * page_values;
                partial_k[at..][..rows.len()].copy_from_slice(&k_rows[b][rows.clone()]);
                partial_v[at..][..rows.len()].copy_from_slice(&v_rows[b][rows]);
                pages[b * max_pages + logical] = next_partial as u32;
                next_partial += 1;
                continue;
            }
            let page = order[next_slot] as usize;
            next_slot += 1;
            pages[b * max_pages + logical] = page as u32;
            for (kind, (source, kv_kind)) in
                [(&k_rows, KvKind::K), (&v_rows, KvKind::V)].into_iter().enumerate()
            {
                for head in 0..heads {
                    let words: Vec<u16> = source[b][rows.clone()]
                        .chunks(row)
                        .flat_map(|t| &t[head * d..][..d])
                        .copied()
                        .collect();
                    let index = (2 * page + kind) * heads + head;
                    let head_bases = &bases[(kind * heads + head) * d..][..d];
                    let slot = &mut slots[index * capacity..][..capacity];
                    if encode_block(kv_kind, &words, head_bases, d, slot).unwrap().is_none() {
                        directory[index] = (raw.len() / block.values()) as u32 + 1;
                        raw.extend_from_slice(&words);
                    }
                }
            }
        }
    }
    let q = (0..shape.q_values()).map(|_| bf16(rng.normal(1.0))).collect();
    Owned {
        shape,
        q,
        slots,
        capacity,
        directory,
        raw,
        bases,
        partial_k,
        partial_v,
        pages,
        max_pages,
        lens: lens.to_vec(),
        scale: 1.0 / (shape.head_dim as f32).sqrt(),
        rows: k_rows.into_iter().zip(v_rows).map(|(k, v)| [k, v]).collect(),
    }
}

/// Values that mix block kinds, changing every 16-token page: narrow (3-bit groups),
/// narrow with exact zeros (raw groups in coded blocks, raw blocks where there are many),
/// spread over 2^-5 .. 2^5 (4-bit and raw groups), and normal.
fn mixed(rng: &mut Rng, token: usize, sigma: f32) -> u16 {
    let sign = if rng.next() & 1 == 0 { 1.0 } else { -1.0 };
    let narrow = sigma * (1.0 + (rng.next() % 1000) as f32 / 1000.0) * sign;
    match (token / PAGE_TOKENS) % 4 {
        0 => bf16(narrow),
        1 => bf16(if rng.next().is_multiple_of(61) { 0.0 } else { narrow }),
        2 => bf16(narrow * 2f32.powi((rng.next() % 11) as i32 - 5)),
        _ => bf16(rng.normal(sigma)),
    }
}

fn shapes() -> Vec<(DecodeShape, Vec<u32>)> {
    vec![
        (DecodeShape { batch: 2, q_heads: 9, kv_heads: 3, head_dim: 64 }, vec![1000, 37]),
        (DecodeShape { batch: 3, q_heads: 32, kv_heads: 8, head_dim: 128 }, vec![5, 300, 2049]),
        (DecodeShape { batch: 2, q_heads: 4, kv_heads: 1, head_dim: 256 }, vec![17, 5000]),
        (DecodeShape { batch: 2, q_heads: 12, kv_heads: 4, head_dim: 128 }, vec![64, 100]),
        (DecodeShape { batch: 1, q_heads: 2, kv_heads: 2, head_dim: 64 }, vec![4096]),
        (DecodeShape { batch: 1, q_heads: 16, kv_heads: 2, head_dim: 256 }, vec![1601]),
    ]
}

/// The fused kernel against the twin on the decoded copy (bits) and the reference.
fn check(gpu: &kvcodec_gpu::GpuContext, owned: &Owned, what: &str) {
    let problem = owned.problem();
    let copy = problem.decoded_copy().unwrap();
    let twin_problem = copy.problem(&problem);
    let twin = kvcodec_attention::gpu::decode_to_vec(gpu, &twin_problem).unwrap();
    let fused = decode_fused_to_vec(gpu, &problem).unwrap();
    assert!(fused.out == twin.out, "{what}: out differs from the twin's");
    let same_lse = fused.lse.iter().zip(&twin.lse).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same_lse, "{what}: lse differs from the twin's");
    let want = reference(&twin_problem).unwrap();
    let error = relative_l2_error(&floats(&fused.out), &want.out);
    assert!(error < MAX_RELATIVE_L2, "{what}: relative L2 error {error:.2e}");
    for (i, (g, w)) in fused.lse.iter().zip(&want.lse).enumerate() {
        assert!((g - w).abs() <= MAX_LSE_ERROR * w.abs().max(1.0), "{what}: lse[{i}] {g} vs {w}");
    }
    eprintln!("{what}: identical to the twin; relative L2 error {error:.2e}");
}

#[test]
fn fused_is_the_twin_on_mixed_blocks() {
    let mut cases = Vec::new();
    for (i, (shape, lens)) in shapes().into_iter().enumerate() {
        for sigma in [0.5, 3.0] {
            let owned = build(shape, &lens, 11 + i as u32, |rng, token| mixed(rng, token, sigma));
            let (coded, raw, groups) = owned.block_mix();
            if owned.slot_pages() > 8 {
                assert!(
                    coded > 0 && raw > 0 && groups.offset4 > 0 && groups.raw > 0,
                    "coded and raw blocks, 4-bit and raw groups: {coded} {raw} {groups:?}"
                );
            }
            cases.push((
                owned,
                format!("{shape:?} {lens:?} sigma {sigma}: {coded} coded, {raw} raw, {groups:?}"),
            ));
        }
    }
    let Some(gpu) = gpu_or_skip("fused_is_the_twin_on_mixed_blocks") else { return };
    for (owned, what) in &cases {
        check(&gpu, owned, what);
    }
}

#[test]
fn fused_is_the_twin_on_real_kv() {
    let Some(gpu) = gpu_or_skip("fused_is_the_twin_on_real_kv") else { return };
    for (name, cache) in kvcodec_testkit::fixtures() {
        let words = cache.concat_words();
        for shape in [
            DecodeShape { batch: 2, q_heads: 9, kv_heads: 3, head_dim: 64 },
            DecodeShape { batch: 1, q_heads: 32, kv_heads: 8, head_dim: 128 },
            DecodeShape { batch: 1, q_heads: 4, kv_heads: 1, head_dim: 256 },
            DecodeShape { batch: 2, q_heads: 24, kv_heads: 8, head_dim: 128 },
        ] {
            let lens: Vec<u32> = (0..shape.batch as u32).map(|b| 3000 + 77 * b).collect();
            let mut at = 0;
            let owned = build(shape, &lens, 5, |_, _| {
                at += 1;
                words[(at - 1) % words.len()]
            });
            let (coded, raw, groups) = owned.block_mix();
            check(&gpu, &owned, &format!("{name} {shape:?}: {coded} coded, {raw} raw, {groups:?}"));
        }
    }
}

#[test]
fn the_cpu_path_is_the_twin_cpu_path_on_the_decoded_copy() {
    let shape = DecodeShape { batch: 2, q_heads: 8, kv_heads: 2, head_dim: 64 };
    let owned = build(shape, &[70, 33], 3, |rng, token| mixed(rng, token, 1.0));
    let problem = owned.problem();
    let copy = problem.decoded_copy().unwrap();
    let twin = kvcodec_attention::decode_cpu(&copy.problem(&problem)).unwrap();
    assert_eq!(decode_cpu(&problem).unwrap(), twin);
    // Six full pages read (4 + 2), then the BF16 pool as it is.
    let page_values = shape.page_values();
    assert_eq!(copy.k.len(), 6 * page_values + owned.partial_k.len());
    assert_eq!(copy.k[6 * page_values..], owned.partial_k[..]);
    // Every full page decodes to the sequence's values (coded and raw blocks alike).
    let (coded, raw, _) = owned.block_mix();
    assert!(coded > 0 && raw > 0, "{coded} coded, {raw} raw blocks");
    for (b, rows) in owned.rows.iter().enumerate() {
        for logical in 0..owned.lens[b] as usize / PAGE_TOKENS {
            let page = copy.pages[b * owned.max_pages + logical] as usize;
            for (kind, words) in [&copy.k, &copy.v].into_iter().enumerate() {
                let want = &rows[kind][logical * page_values..][..page_values];
                assert!(
                    words[page * page_values..][..page_values] == *want,
                    "sequence {b} page {logical} kind {kind}"
                );
            }
        }
    }
    // The small case the sanitizers run: raw blocks and unfilled last pages on the device.
    let Some(gpu) = gpu_or_skip("the_cpu_path_is_the_twin_cpu_path_on_the_decoded_copy") else { return };
    check(&gpu, &owned, "small");
}

#[test]
fn the_default_capacity_fits_the_kernel() {
    for d in [64, 128, 256] {
        let block = BlockShape::new(d).unwrap();
        assert!(block.default_capacity() <= max_capacity(d), "head_dim {d}");
        assert!(block.capacity_valid(max_capacity(d)), "head_dim {d}");
    }
}

#[test]
fn bad_entries_and_blocks_are_refused() {
    let shape = DecodeShape { batch: 1, q_heads: 4, kv_heads: 2, head_dim: 128 };
    let good = || build(shape, &[40], 9, |rng, token| mixed(rng, token, 1.0));
    // A page id past the slot pages: the host check.
    let mut bad = good();
    bad.pages[0] = bad.slot_pages() as u32;
    assert!(matches!(decode_cpu(&bad.problem()), Err(FusedError::Problem(_))));
    // A directory entry past the raw pool.
    let mut bad = good();
    let page = bad.pages[1] as usize;
    bad.directory[2 * page * shape.kv_heads] = (bad.raw.len() / (16 * 128)) as u32 + 1;
    assert!(matches!(decode_cpu(&bad.problem()), Err(FusedError::Layout { what: "directory", .. })));
    // A capacity the kernel does not take.
    let mut bad = good();
    bad.capacity = max_capacity(128) + 16;
    assert!(matches!(decode_cpu(&bad.problem()), Err(FusedError::Layout { what: "capacity", .. })));
    // Tags that size a coded block past its slot (every group raw): the CPU decoder's
    // error; on the device the kernel flags it and reads within the staging slot.
    let mut corrupt = good();
    let page = corrupt.pages[1] as usize;
    let (v_index, capacity) = ((2 * page + 1) * shape.kv_heads + 1, corrupt.capacity);
    corrupt.directory[v_index] = CODED;
    corrupt.slots[v_index * capacity..][..64].fill(0xaa);
    match decode_cpu(&corrupt.problem()) {
        Err(FusedError::Block { logical: 1, kind: KvKind::V, head: 1, .. }) => {}
        other => panic!("expected the CPU's block error, got {other:?}"),
    }
    let Some(gpu) = gpu_or_skip("bad_entries_and_blocks_are_refused") else { return };
    match decode_fused_to_vec(&gpu, &corrupt.problem()) {
        Err(kvcodec_gpu::GpuError::Codec(FusedError::Block { logical: 1, .. })) => {}
        other => panic!("expected the CPU's block error, got {other:?}"),
    }
    let problem = corrupt.problem();
    let up8 = |b: &[u8]| gpu.upload(b).unwrap();
    let up16 = |w: &[u16]| if w.is_empty() { gpu.zeros(8).unwrap() } else { gpu.upload(w).unwrap() };
    let up32 = |w: &[u32]| gpu.upload(w).unwrap();
    let (q, slots, directory) = (up16(problem.q), up8(problem.cache.slots), up32(problem.cache.directory));
    let raw_bytes: Vec<u8> = problem.cache.raw.iter().flat_map(|w| w.to_le_bytes()).chain([0; 16]).collect();
    let (raw, bases) = (up8(&raw_bytes), up8(problem.cache.bases));
    let (partial_k, partial_v) = (up16(problem.cache.partial.k), up16(problem.cache.partial.v));
    let (table, lens) = (up32(problem.tables.pages), up32(problem.tables.context_lens));
    let mut out = gpu.zeros::<u16>(shape.q_values()).unwrap();
    let mut lse = gpu.zeros::<f32>(shape.q_heads).unwrap();
    let mut workspace = DecodeWorkspace::new(&gpu, shape, problem.tables.max_pages).unwrap();
    let device = DeviceGaacProblem {
        shape,
        q: q.slice(..),
        cache: DeviceGaacPagedKv {
            slots: slots.slice(..),
            capacity,
            directory: directory.slice(..),
            raw: raw.slice(..raw_bytes.len() - 16),
            bases: bases.slice(..),
            partial_k: partial_k.slice(..),
            partial_v: partial_v.slice(..),
        },
        block_table: table.slice(..),
        max_pages: problem.tables.max_pages,
        context_lens: lens.slice(..),
        scale: problem.scale,
    };
    decode_device_fused(&gpu, &mut workspace, &device, &mut out.slice_mut(..), &mut lse.slice_mut(..))
        .unwrap();
    assert!(workspace.check(&gpu).is_err(), "the device flags a block past its slot");
}

/// Pages sealed on the device, as a serving cache (and bench-attention) makes them: every
/// block of `2 pages` tensors (each page's K and V tails in turn) in one sealing call, bases calibrated on the first tokens only
/// (so later pages hold many 4-bit and raw groups and raw blocks), raw blocks read from the
/// sealer's raw buffer. The sealed blocks decode on the CPU to the original pages, and the
/// fused kernel over them gives the twin's bits on the original BF16 pages.
#[test]
fn sealed_pages_give_the_twins_bits_on_the_original_pages() {
    let Some(gpu) = gpu_or_skip("sealed_pages_give_the_twins_bits_on_the_original_pages") else { return };
    let (_, cache) = kvcodec_testkit::fixtures().into_iter().next().expect("a fixture");
    let words = cache.concat_words();
    let shape = DecodeShape { batch: 2, q_heads: 32, kv_heads: 8, head_dim: 128 };
    let (heads, d) = (shape.kv_heads, shape.head_dim);
    let (row, per_seq) = (heads * d, 96);
    let pages = shape.batch * per_seq;
    let n = pages * PAGE_TOKENS * row;
    // K pages then V pages, [pages, 16, H, D] each, the fixture's words in file order.
    let kv: Vec<u16> = (0..2 * n).map(|i| words[i % words.len()]).collect();
    let tokens = 256;
    let calibration: Vec<u16> = [&kv[..tokens * row], &kv[n..n + tokens * row]].concat();
    let bases =
        Bases::calibrate_words(&calibration, KvShape::new(1, heads, d, tokens).unwrap(), tokens).unwrap();
    let layer_bases = bases.as_bytes().to_vec();
    // The sealer codes tensor t as V when t is odd: page p's K tail is tensor 2 p, its V tail
    // 2 p + 1, and the bases repeat per page.
    let per_block: Vec<u8> = std::iter::repeat_n(&layer_bases[..], pages).flatten().copied().collect();
    let page_values = shape.page_values();
    let tails: Vec<u16> = (0..pages)
        .flat_map(|p| [&kv[p * page_values..][..page_values], &kv[n + p * page_values..][..page_values]])
        .flatten()
        .copied()
        .collect();
    let block = BlockShape::new(d).unwrap();
    let capacity = block.default_capacity();
    let blocks = 2 * pages * heads;
    let seal = SealShape {
        tensors: 2 * pages,
        kv_heads: heads,
        head_dim: d,
        tensor_stride: PAGE_TOKENS * row,
        slot_capacity: capacity,
    };
    let sealer = Sealer::new(&gpu, seal).unwrap();
    let tail = gpu.upload(&tails).unwrap();
    let per_block = gpu.upload(&per_block).unwrap();
    let mut slots = gpu.zeros::<u8>(blocks * capacity).unwrap();
    let mut statuses = gpu.zeros::<u8>(blocks).unwrap();
    let mut raw = gpu.zeros::<u8>(blocks * block.raw_len()).unwrap();
    seal_blocks_device(
        &gpu,
        &sealer,
        &tail.slice(..),
        &per_block.slice(..),
        &mut slots.slice_mut(..),
        &mut statuses.slice_mut(..),
        &mut raw.slice_mut(..),
    )
    .unwrap();
    let slots = gpu.download(&slots, blocks * capacity).unwrap();
    let statuses = gpu.download(&statuses, blocks).unwrap();
    let raw_bytes = gpu.download(&raw, blocks * block.raw_len()).unwrap();
    let raw: Vec<u16> = raw_bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    let directory: Vec<u32> =
        statuses.iter().enumerate().map(|(b, &s)| if s == 0 { CODED } else { b as u32 + 1 }).collect();
    let raw_blocks = statuses.iter().filter(|&&s| s != 0).count();
    assert!(raw_blocks > 0 && raw_blocks < blocks, "{raw_blocks} raw blocks of {blocks}");
    // Sequence b reads pages b, b + 2, b + 4, ... (interleaved, as after churn).
    let table: Vec<u32> =
        (0..shape.batch).flat_map(|b| (0..per_seq).map(move |l| (b + 2 * l) as u32)).collect();
    let lens = vec![(per_seq * PAGE_TOKENS) as u32; shape.batch];
    let mut rng = Rng(7);
    let q: Vec<u16> = (0..shape.q_values()).map(|_| bf16(rng.normal(1.0))).collect();
    let tables = BlockTables { pages: &table, max_pages: per_seq, context_lens: &lens };
    let scale = 1.0 / (d as f32).sqrt();
    let problem = GaacDecodeProblem {
        shape,
        q: &q,
        cache: GaacPagedKv {
            slots: &slots,
            capacity,
            directory: &directory,
            raw: &raw,
            bases: &layer_bases,
            partial: PagedKv { k: &[], v: &[] },
        },
        tables,
        scale,
    };
    let copy = problem.decoded_copy().unwrap();
    for (at, &page) in table.iter().enumerate() {
        let (copied, page) = (copy.pages[at] as usize, page as usize);
        for (kind, decoded) in [&copy.k, &copy.v].into_iter().enumerate() {
            let want = &kv[kind * n + page * page_values..][..page_values];
            assert!(
                decoded[copied * page_values..][..page_values] == *want,
                "page {page} kind {kind} decodes"
            );
        }
    }
    let twin_problem =
        DecodeProblem { shape, q: &q, kv: PagedKv { k: &kv[..n], v: &kv[n..] }, tables, scale };
    let twin = kvcodec_attention::gpu::decode_to_vec(&gpu, &twin_problem).unwrap();
    let fused = decode_fused_to_vec(&gpu, &problem).unwrap();
    let same_lse = fused.lse.iter().zip(&twin.lse).all(|(a, b)| a.to_bits() == b.to_bits());
    let differing = fused.out.iter().zip(&twin.out).filter(|(a, b)| a != b).count();
    assert!(differing == 0 && same_lse, "{differing} outputs differ; lse the same: {same_lse}");
}
