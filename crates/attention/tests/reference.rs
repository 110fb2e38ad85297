//! The CPU reference and fallback: hand-computed cases, the block table's indirection,
//! masking of the slots past a context, GQA sharing, and every error.

mod common;

use kvcodec_attention::{
    AttentionError, BlockTables, DecodeProblem, DecodeShape, PAGE_TOKENS, PagedKv, decode_cpu, reference,
    relative_l2_error,
};
use kvcodec_testkit::bf16;
use proptest::prelude::*;

const SHAPE: DecodeShape = DecodeShape { batch: 1, q_heads: 1, kv_heads: 1, head_dim: 64 };

#[test]
fn two_tokens_weigh_as_softmax_of_their_scores() {
    // q = e0, k0 = 0, k1 = e0 with scale 1: scores 0 and 1; v0 = 0, v1 = 1 everywhere.
    let d = SHAPE.head_dim;
    let mut q = vec![0u16; d];
    q[0] = bf16(1.0);
    let mut k = vec![0u16; SHAPE.page_values()];
    k[d] = bf16(1.0);
    let mut v = vec![0u16; SHAPE.page_values()];
    v[d..2 * d].fill(bf16(1.0));
    let problem = DecodeProblem {
        shape: SHAPE,
        q: &q,
        kv: PagedKv { k: &k, v: &v },
        tables: BlockTables { pages: &[0], max_pages: 1, context_lens: &[2] },
        scale: 1.0,
    };
    let result = reference(&problem).unwrap();
    let e = std::f64::consts::E;
    let want = (e / (1.0 + e)) as f32;
    assert!(result.out.iter().all(|&x| (x - want).abs() < 1e-6), "{:?}", &result.out[..4]);
    assert!((f64::from(result.lse[0]) - (1.0 + e).ln()).abs() < 1e-6);
    let cpu = decode_cpu(&problem).unwrap();
    assert!(cpu.out.iter().all(|&w| w == bf16(want)));
}

#[test]
fn slots_past_the_context_and_unused_pages_are_never_read() {
    // common::build fills them with NaN: a finite result shows they were skipped.
    let shape = DecodeShape { batch: 3, q_heads: 8, kv_heads: 2, head_dim: 128 };
    let owned = common::random(shape, &[1, 17, 40], 3, 1.0);
    let result = reference(&owned.problem()).unwrap();
    assert!(result.out.iter().chain(&result.lse).all(|x| x.is_finite()));
}

#[test]
fn a_context_of_one_token_returns_its_value() {
    let shape = DecodeShape { batch: 1, q_heads: 4, kv_heads: 1, head_dim: 256 };
    let owned = common::random(shape, &[1], 5, 2.0);
    let result = decode_cpu(&owned.problem()).unwrap();
    let page = owned.pages[0] as usize * shape.page_values();
    for h in 0..4 {
        assert_eq!(&result.out[h * 256..][..256], &owned.v[page..][..256]);
    }
}

#[test]
fn query_heads_of_one_group_share_their_kv_head() {
    let shape = DecodeShape { batch: 2, q_heads: 6, kv_heads: 2, head_dim: 64 };
    let mut owned = common::random(shape, &[33, 16], 9, 1.0);
    // Heads 0..3 use KV head 0: give heads 1 and 2 the query of head 0.
    for b in 0..2 {
        let (first, rest) = owned.q[b * 6 * 64..].split_at_mut(64);
        rest[..64].copy_from_slice(first);
        rest[64..128].copy_from_slice(first);
    }
    let result = reference(&owned.problem()).unwrap();
    for b in 0..2 {
        let head = |h: usize| &result.out[(b * 6 + h) * 64..][..64];
        assert_eq!(head(0), head(1));
        assert_eq!(head(0), head(2));
        assert_ne!(head(0), head(3), "head 3 uses KV head 1");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Moving pages and rewriting the block table to match changes nothing.
    #[test]
    fn the_block_table_is_the_only_map_from_tokens_to_pages(
        lens in prop::collection::vec(1u32..70, 1..4), seed in 1u32..1000, shift in 1usize..5,
    ) {
        let shape = DecodeShape { batch: lens.len(), q_heads: 4, kv_heads: 2, head_dim: 64 };
        let owned = common::random(shape, &lens, seed, 1.0);
        let before = reference(&owned.problem()).unwrap();
        let pages = owned.k.len() / shape.page_values();
        let moved = |words: &[u16]| {
            let mut out = vec![0u16; words.len()];
            for p in 0..pages {
                let to = (p + shift) % pages;
                out[to * shape.page_values()..][..shape.page_values()]
                    .copy_from_slice(&words[p * shape.page_values()..][..shape.page_values()]);
            }
            out
        };
        let mut relocated = common::Owned { k: moved(&owned.k), v: moved(&owned.v), ..owned };
        for (b, &len) in lens.iter().enumerate() {
            for logical in 0..(len as usize).div_ceil(PAGE_TOKENS) {
                let entry = &mut relocated.pages[b * relocated.max_pages + logical];
                *entry = ((*entry as usize + shift) % pages) as u32;
            }
        }
        prop_assert_eq!(reference(&relocated.problem()).unwrap(), before);
    }
}

#[test]
fn relative_l2_error_measures_the_difference_against_the_reference() {
    assert_eq!(relative_l2_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
    assert_eq!(relative_l2_error(&[0.0, 0.0], &[0.0, 0.0]), 0.0);
    assert_eq!(relative_l2_error(&[1.0], &[0.0]), f64::INFINITY);
    assert!((relative_l2_error(&[3.0, 4.0], &[0.0, 5.0]) - (10f64).sqrt() / 5.0).abs() < 1e-12);
}

#[test]
fn every_inconsistent_problem_gets_its_error() {
    let shape = DecodeShape { batch: 2, q_heads: 4, kv_heads: 2, head_dim: 64 };
    let owned = common::random(shape, &[20, 5], 1, 1.0);
    let ok = owned.problem();
    assert!(ok.validate().is_ok());
    let pages = ok.pages();
    let cases: Vec<(DecodeProblem<'_>, AttentionError)> = vec![
        (
            DecodeProblem { shape: DecodeShape { head_dim: 96, ..shape }, ..ok },
            AttentionError::HeadDim { head_dim: 96 },
        ),
        (
            DecodeProblem { shape: DecodeShape { q_heads: 5, ..shape }, ..ok },
            AttentionError::Heads { q_heads: 5, kv_heads: 2 },
        ),
        (
            DecodeProblem { shape: DecodeShape { kv_heads: 0, ..shape }, ..ok },
            AttentionError::Heads { q_heads: 4, kv_heads: 0 },
        ),
        (
            DecodeProblem { shape: DecodeShape { q_heads: 18, ..shape }, ..ok },
            AttentionError::Group { group: 9, max: 8 },
        ),
        (DecodeProblem { scale: f32::NAN, ..ok }, AttentionError::Scale { scale: f32::NAN }),
        (
            DecodeProblem { q: &owned.q[1..], ..ok },
            AttentionError::Length { what: "q", got: 511, expected: 512, unit: "BF16 values" },
        ),
        (
            DecodeProblem { kv: PagedKv { k: &owned.k[1..], ..ok.kv }, ..ok },
            AttentionError::Length {
                what: "k pages",
                got: owned.k.len() - 1,
                expected: owned.k.len() - shape.page_values(),
                unit: "BF16 values (a whole number of pages)",
            },
        ),
        (
            DecodeProblem { kv: PagedKv { v: &owned.v[shape.page_values()..], ..ok.kv }, ..ok },
            AttentionError::Length {
                what: "v pages",
                got: owned.v.len() - shape.page_values(),
                expected: owned.v.len(),
                unit: "BF16 values (as many as k)",
            },
        ),
        (
            DecodeProblem { tables: BlockTables { context_lens: &[20, 0], ..ok.tables }, ..ok },
            AttentionError::EmptyContext { sequence: 1 },
        ),
        (
            DecodeProblem { tables: BlockTables { context_lens: &[20, 49], ..ok.tables }, ..ok },
            AttentionError::ContextTooLong { sequence: 1, tokens: 49, capacity: 48 },
        ),
        (
            DecodeProblem { tables: BlockTables { context_lens: &[20], ..ok.tables }, ..ok },
            AttentionError::Length { what: "context_lens", got: 1, expected: 2, unit: "entries" },
        ),
        (
            // Sequence 1's second table entry is u32::MAX, read once its context passes 16.
            DecodeProblem { tables: BlockTables { context_lens: &[20, 17], ..ok.tables }, ..ok },
            AttentionError::PageOutOfRange { sequence: 1, logical: 1, page: u32::MAX, pages },
        ),
    ];
    for (problem, want) in cases {
        let got = problem.validate().unwrap_err();
        if let (AttentionError::Scale { scale: a }, AttentionError::Scale { scale: b }) = (&got, &want) {
            assert!(a.is_nan() && b.is_nan());
        } else {
            assert_eq!(got, want);
        }
        assert!(reference(&problem).is_err() && decode_cpu(&problem).is_err());
    }
}
