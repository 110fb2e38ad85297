//! The split plan: enough CTAs to fill the GPU's slots without a mostly idle last wave,
//! within the bounds on split count and size.

use kvcodec_attention::DecodeShape;
use kvcodec_attention::gpu::{MAX_SPLITS, MIN_PAGES_PER_SPLIT, SplitPlan};

/// An H200: 132 SMs.
const SMS: usize = 132;

fn plan(batch: usize, kv_heads: usize, pages: usize, ctas_per_sm: usize) -> SplitPlan {
    SplitPlan::new(
        &DecodeShape { batch, q_heads: kv_heads, kv_heads, head_dim: 128 },
        pages,
        SMS,
        ctas_per_sm,
    )
}

#[test]
fn the_fewest_splits_that_fill_the_last_wave_are_taken() {
    // 3 CTAs per SM = 396 slots: 64 units x 6 splits = 384 CTAs fill 97% of one wave; 5 fill 81%.
    assert_eq!(plan(8, 8, 4096, 3).splits, 6);
    // 256 units: 1 or 2 splits leave a wave 65% full, 3 splits make 768 CTAs in 2 waves (97%).
    assert_eq!(plan(32, 8, 4096, 3).splits, 3);
    // 512 units: 1 split fills 65% of two waves, 2 fill 86% of three, 3 fill 97% of four.
    assert_eq!(plan(64, 8, 4096, 3).splits, 3);
    // Units that fill the slots exactly are not split.
    assert_eq!(plan(99, 4, 4096, 3).splits, 1);
}

#[test]
fn splits_stay_within_their_bounds_and_cover_every_page() {
    for (batch, kv_heads, pages, per_sm) in
        [(1, 1, 8192, 3), (1, 3, 100, 5), (1, 8, 1, 2), (3, 2, 17, 8), (2, 1, 40, 1)]
    {
        let p = plan(batch, kv_heads, pages, per_sm);
        let cap = MAX_SPLITS.max(SMS.div_ceil(batch * kv_heads));
        assert!(p.splits >= 1 && p.splits <= cap, "{p:?}");
        assert!(p.splits * p.pages_per_split >= pages, "{p:?} covers {pages} pages");
        assert!((p.splits - 1) * p.pages_per_split < pages, "{p:?}: no empty split");
        assert!(p.pages_per_split >= MIN_PAGES_PER_SPLIT || p.splits == 1, "{p:?}: {pages} pages");
    }
}

#[test]
fn batch_one_on_one_kv_head_gets_a_cta_on_every_sm() {
    // One unit, one CTA per SM (head_dim 256): 119 splits keep 90% of the 132 SMs busy,
    // past MAX_SPLITS.
    assert_eq!(plan(1, 1, 8192, 1).splits, 119);
    // Two CTAs per SM: no count up to the cap (one per SM) fills 90% of the 264 slots; the
    // cap fills the most: 132 wanted, 63 pages per split make it 131.
    assert_eq!(plan(1, 1, 8192, 2).splits, 131);
    // A context too short for that many splits of 16 pages.
    assert_eq!(plan(1, 1, 100, 1).splits, 6);
}
