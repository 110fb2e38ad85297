//! The split plan: enough CTAs to fill the GPU's slots without a mostly idle last wave,
//! within the bounds on split count and size.

use kvcodec_attention::DecodeShape;
use kvcodec_attention::gpu::{MAX_SPLITS, MIN_PAGES_PER_SPLIT, SplitPlan};

fn plan(batch: usize, kv_heads: usize, pages: usize, slots: usize) -> SplitPlan {
    SplitPlan::new(&DecodeShape { batch, q_heads: kv_heads, kv_heads, head_dim: 128 }, pages, slots)
}

#[test]
fn the_fewest_splits_that_fill_the_last_wave_are_taken() {
    // 132 SMs x 3 CTAs: 64 units x 6 splits = 384 CTAs fill 97% of one wave; 5 would fill 81%.
    assert_eq!(plan(8, 8, 4096, 396).splits, 6);
    // 256 units: 1 or 2 splits leave a wave 65% full, 3 splits make 768 CTAs in 2 waves (97%).
    assert_eq!(plan(32, 8, 4096, 396).splits, 3);
    // 512 units: 1 split fills 65% of two waves, 2 fill 86% of three, 3 fill 97% of four.
    assert_eq!(plan(64, 8, 4096, 396).splits, 3);
    // Units that fill the slots exactly are not split.
    assert_eq!(plan(99, 4, 4096, 396).splits, 1);
}

#[test]
fn splits_stay_within_their_bounds_and_cover_every_page() {
    for (batch, kv_heads, pages, slots) in
        [(1, 1, 8192, 396), (1, 3, 100, 396), (1, 8, 1, 264), (3, 2, 17, 1000)]
    {
        let p = plan(batch, kv_heads, pages, slots);
        assert!(p.splits >= 1 && p.splits <= MAX_SPLITS, "{p:?}");
        assert!(p.splits * p.pages_per_split >= pages, "{p:?} covers {pages} pages");
        assert!((p.splits - 1) * p.pages_per_split < pages, "{p:?}: no empty split");
        if pages >= MIN_PAGES_PER_SPLIT {
            assert!(p.pages_per_split >= MIN_PAGES_PER_SPLIT.min(pages.div_ceil(MAX_SPLITS)), "{p:?}");
        }
    }
    // Batch 1 over a long context on one KV head: as many splits as allowed.
    assert_eq!(plan(1, 1, 8192, 396).splits, MAX_SPLITS);
}
