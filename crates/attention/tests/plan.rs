//! The split plan: with units fewer than half the SMs, the split count whose busiest SM
//! holds the least work, in one wave of the slots filled at least 60% where the context
//! allows; with more, enough CTAs to fill the slots without a mostly idle last wave; within
//! the bounds on split count and size.

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
fn the_busiest_sm_gets_the_least_work() {
    // 8 units, 396 slots: 33 splits put 2 CTAs of 1/33 on every SM (2/33 of a unit); 45
    // (the earlier rule) put 3 of 1/45 on some (3/45), 49 put 3 of 1/49 (3/49 > 2/33).
    assert_eq!(plan(1, 8, 4096, 3).splits, 33);
    // 64 units: 4, 5 and 6 splits all leave the busiest SM half a unit; the most is taken.
    assert_eq!(plan(8, 8, 4096, 3).splits, 6);
    // 24 units, 660 slots: 22 splits put 4 CTAs on every SM (4/22); 27 put 5 on most (5/27).
    assert_eq!(plan(8, 3, 4096, 5).splits, 22);
}

#[test]
fn many_units_take_the_fewest_splits_that_fill_the_last_wave() {
    // 256 units: 1 or 2 splits leave a wave 65% full, 3 splits make 768 CTAs in 2 waves (97%).
    assert_eq!(plan(32, 8, 4096, 3).splits, 3);
    // 512 units: 1 split fills 65% of two waves, 2 fill 86% of three, 3 fill 97% of four.
    assert_eq!(plan(64, 8, 4096, 3).splits, 3);
    // 96 units on 660 slots: 13 splits make 1248 CTAs in 2 waves (95%).
    assert_eq!(plan(32, 3, 4096, 5).splits, 13);
    // Units that fill the slots exactly are not split.
    assert_eq!(plan(99, 4, 4096, 3).splits, 1);
}

#[test]
fn splits_stay_within_their_bounds_and_cover_every_page() {
    for (batch, kv_heads, pages, per_sm) in
        [(1, 1, 8192, 3), (1, 3, 100, 5), (1, 8, 1, 2), (3, 2, 17, 8), (2, 1, 40, 1), (1, 1, 1 << 20, 1)]
    {
        let p = plan(batch, kv_heads, pages, per_sm);
        assert!(p.splits >= 1 && p.splits <= MAX_SPLITS, "{p:?}");
        assert!(p.splits * p.pages_per_split >= pages, "{p:?} covers {pages} pages");
        assert!((p.splits - 1) * p.pages_per_split < pages, "{p:?}: no empty split");
        assert!(p.pages_per_split >= MIN_PAGES_PER_SPLIT || p.splits == 1, "{p:?}: {pages} pages");
    }
}

#[test]
fn batch_one_on_one_kv_head_stops_at_max_splits() {
    // One unit on 132 or 264 slots: as many splits as the combine allows.
    assert_eq!(plan(1, 1, 8192, 1).splits, MAX_SPLITS);
    assert_eq!(plan(1, 1, 8192, 2).splits, MAX_SPLITS);
    // A context too short for that many splits of 16 pages.
    assert_eq!(plan(1, 1, 100, 1).splits, 6);
}
