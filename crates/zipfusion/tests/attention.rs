//! Fused decode attention over ZipFusion pages: bit-identical to the BF16 twin run on the
//! decoded copy of the same pages (out and lse), within BF16 attention tolerances of the
//! FP64 reference, on random and real KV values, head_dim 64/128/256, GQA groups 1, 3, 4
//! and 8, contexts with a BF16 last page, pages with raw and zero-aware blocks, both
//! variants; page metadata checked on the device. GPU tests skip without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

use kvcodec_attention::{BlockTables, DecodeShape, PAGE_TOKENS, PagedKv, reference, relative_l2_error};
use kvcodec_testkit::{Rng, bf16, floats, gpu_or_skip};
use zipfusion::attention::{FusedError, ZfDecodeProblem, ZfPagedKv, decode_cpu, decode_fused_to_vec};
use zipfusion::{PageShape, Variant, encode_page, page_info};

const MAX_RELATIVE_L2: f64 = 1e-2;
const MAX_LSE_ERROR: f32 = 1e-3;

/// A fused problem that owns its buffers: full pages encoded by the CPU encoder into
/// shuffled fixed slots, partial last pages in a BF16 pool.
struct Owned {
    shape: DecodeShape,
    variant: Variant,
    q: Vec<u16>,
    slots: Vec<u8>,
    slot_stride: usize,
    partial_k: Vec<u16>,
    partial_v: Vec<u16>,
    pages: Vec<u32>,
    max_pages: usize,
    lens: Vec<u32>,
    scale: f32,
}

impl Owned {
    fn problem(&self) -> ZfDecodeProblem<'_> {
        ZfDecodeProblem {
            shape: self.shape,
            q: &self.q,
            cache: ZfPagedKv {
                variant: self.variant,
                slots: &self.slots,
                slot_stride: self.slot_stride,
                partial: PagedKv { k: &self.partial_k, v: &self.partial_v },
            },
            tables: BlockTables { pages: &self.pages, max_pages: self.max_pages, context_lens: &self.lens },
            scale: self.scale,
        }
    }
}

const NAN: u16 = 0x7fc0;

/// Sequences of `lens` tokens; K and V words from `word(rng, token)` (the token within the
/// sequence), q roughly normal; slots past a context in the BF16 pages hold NaN.
fn build(
    shape: DecodeShape,
    variant: Variant,
    lens: &[u32],
    seed: u32,
    mut word: impl FnMut(&mut Rng, usize) -> u16,
) -> Owned {
    let mut rng = Rng(seed | 1);
    let page_shape = PageShape::new(shape.kv_heads, shape.head_dim).unwrap();
    let slot_stride = page_shape.max_page_len().next_multiple_of(16) + 16; // room the kernel must not read
    let page_values = shape.page_values();
    let full: usize = lens.iter().map(|&l| l as usize / PAGE_TOKENS).sum::<usize>() + 1; // a spare slot
    let partial: usize = lens.iter().filter(|&&l| !(l as usize).is_multiple_of(PAGE_TOKENS)).count() + 1; // and page
    let mut order: Vec<u32> = (0..full as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.next() as usize % (i + 1));
    }
    let mut slots = vec![0xa5u8; full * slot_stride];
    let mut partial_k = vec![NAN; partial * page_values];
    let mut partial_v = vec![NAN; partial * page_values];
    let max_pages = lens.iter().map(|&l| (l as usize).div_ceil(PAGE_TOKENS)).max().unwrap_or(0) + 1;
    let mut pages = vec![u32::MAX; shape.batch * max_pages];
    let (mut next_slot, mut next_partial) = (0, 0); // the last slot and BF16 page stay spare
    for (b, &len) in lens.iter().enumerate() {
        let len = len as usize;
        for logical in 0..len.div_ceil(PAGE_TOKENS) {
            let tokens = (len - logical * PAGE_TOKENS).min(PAGE_TOKENS);
            let mut k = vec![NAN; page_values];
            let mut v = vec![NAN; page_values];
            for slot in 0..tokens * shape.kv_heads * shape.head_dim {
                let token = logical * PAGE_TOKENS + slot / (shape.kv_heads * shape.head_dim);
                k[slot] = word(&mut rng, token);
                v[slot] = word(&mut rng, token);
            }
            if tokens == PAGE_TOKENS {
                let slot = order[next_slot] as usize;
                next_slot += 1;
                let page = encode_page(&k, &v, page_shape, variant).unwrap();
                slots[slot * slot_stride..][..page.len()].copy_from_slice(&page);
                pages[b * max_pages + logical] = slot as u32;
            } else {
                partial_k[next_partial * page_values..][..page_values].copy_from_slice(&k);
                partial_v[next_partial * page_values..][..page_values].copy_from_slice(&v);
                pages[b * max_pages + logical] = next_partial as u32;
                next_partial += 1;
            }
        }
    }
    let q = (0..shape.q_values()).map(|_| bf16(rng.normal(1.0))).collect();
    Owned {
        shape,
        variant,
        q,
        slots,
        slot_stride,
        partial_k,
        partial_v,
        pages,
        max_pages,
        lens: lens.to_vec(),
        scale: 1.0 / (shape.head_dim as f32).sqrt(),
    }
}

/// Values that mix block kinds: sequences of pages whose values are narrow (coded), span
/// many exponents (raw), or are narrow with exact zeros (zero-aware in that variant, raw in
/// the base one), changing every 16-token page.
fn mixed(rng: &mut Rng, token: usize, sigma: f32) -> u16 {
    match (token / PAGE_TOKENS) % 3 {
        0 => bf16(
            sigma
                * (1.0 + (rng.next() % 1000) as f32 / 1000.0)
                * if rng.next() & 1 == 0 { 1.0 } else { -1.0 },
        ),
        1 => bf16(rng.normal(sigma)),
        _ => {
            if rng.next().is_multiple_of(97) {
                0
            } else {
                bf16(sigma * (1.0 + (rng.next() % 1000) as f32 / 1000.0))
            }
        }
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

fn block_mix(owned: &Owned) -> [usize; 3] {
    let page_shape = PageShape::new(owned.shape.kv_heads, owned.shape.head_dim).unwrap();
    let mut counts = [0usize; 3];
    for slot in owned.slots.chunks(owned.slot_stride) {
        let Ok(info) = page_info(slot, page_shape, owned.variant) else { continue };
        for kind in info.block_counts() {
            counts[0] += kind.coded;
            counts[1] += kind.zero_aware;
            counts[2] += kind.raw;
        }
    }
    counts
}

#[test]
fn fused_is_the_twin_on_mixed_blocks() {
    let mut cases = Vec::new();
    for (i, (shape, lens)) in shapes().into_iter().enumerate() {
        for variant in Variant::ALL {
            for sigma in [0.5, 3.0] {
                let owned =
                    build(shape, variant, &lens, 11 + i as u32, |rng, token| mixed(rng, token, sigma));
                let mix = block_mix(&owned);
                assert!(mix[0] > 0 && mix[2] > 0, "coded and raw blocks: {mix:?}");
                if variant == Variant::ZeroAware {
                    assert!(mix[1] > 0, "zero-aware blocks: {mix:?}");
                }
                cases.push((owned, format!("{shape:?} {lens:?} {variant:?} sigma {sigma} blocks {mix:?}")));
            }
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
            for variant in Variant::ALL {
                let mut at = 0;
                let owned = build(shape, variant, &lens, 5, |_, _| {
                    at += 1;
                    words[(at - 1) % words.len()]
                });
                let mix = block_mix(&owned);
                check(&gpu, &owned, &format!("{name} {shape:?} {variant:?} blocks {mix:?}"));
            }
        }
    }
}

#[test]
fn the_cpu_path_is_the_twin_cpu_path_on_the_decoded_copy() {
    let shape = DecodeShape { batch: 2, q_heads: 8, kv_heads: 2, head_dim: 64 };
    let owned = build(shape, Variant::ZeroAware, &[70, 33], 3, |rng, token| mixed(rng, token, 1.0));
    let problem = owned.problem();
    let copy = problem.decoded_copy().unwrap();
    let twin = kvcodec_attention::decode_cpu(&copy.problem(&problem)).unwrap();
    assert_eq!(decode_cpu(&problem).unwrap(), twin);
    // Six full pages read (4 + 2), then the BF16 pool as it is.
    assert_eq!(copy.k.len(), 6 * shape.page_values() + owned.partial_k.len());
    assert_eq!(copy.k[6 * shape.page_values()..], owned.partial_k[..]);
}

#[test]
fn bad_entries_and_metadata_are_refused() {
    let shape = DecodeShape { batch: 1, q_heads: 4, kv_heads: 2, head_dim: 128 };
    // A slot id past the slots: the host check.
    let mut bad = build(shape, Variant::Base, &[40], 9, |rng, token| mixed(rng, token, 1.0));
    bad.pages[0] = (bad.slots.len() / bad.slot_stride) as u32;
    assert!(matches!(decode_cpu(&bad.problem()), Err(FusedError::Problem(_))));
    // A zero-aware block byte in a base cache: the CPU decoder's error, and on the GPU the
    // kernel's flag turns into the same error.
    let mut corrupt = build(shape, Variant::Base, &[40], 9, |rng, token| mixed(rng, token, 1.0));
    let slot = corrupt.pages[1] as usize * corrupt.slot_stride;
    corrupt.slots[slot + 4] = 0x80 | (corrupt.slots[slot + 4] & 0x7f);
    if corrupt.slots[slot + 4] == 0xff {
        corrupt.slots[slot + 4] = 0xbf;
    }
    let cpu = decode_cpu(&corrupt.problem());
    assert!(matches!(cpu, Err(FusedError::Page { logical: 1, .. })), "{cpu:?}");
    let Some(gpu) = gpu_or_skip("bad_entries_and_metadata_are_refused") else { return };
    match decode_fused_to_vec(&gpu, &corrupt.problem()) {
        Err(kvcodec_gpu::GpuError::Codec(FusedError::Page { logical: 1, .. })) => {}
        other => panic!("expected the CPU's page error, got {other:?}"),
    }
    // An offset that would read past the slot, in the V entry of head 1 (the CPU decoder
    // stops at it too).
    let mut past = build(shape, Variant::Base, &[40], 9, |rng, token| mixed(rng, token, 1.0));
    let slot = past.pages[0] as usize * past.slot_stride;
    past.slots[slot + 3 * 8..][..4].copy_from_slice(&(past.slot_stride as u32 - 16).to_le_bytes());
    match decode_fused_to_vec(&gpu, &past.problem()) {
        Err(kvcodec_gpu::GpuError::Codec(FusedError::Page { logical: 0, .. })) => {}
        other => panic!("expected the CPU's page error, got {other:?}"),
    }
}
