//! GPU split/merge against the CPU reference, in both directions. Skips without a GPU
//! unless `KVCODEC_REQUIRE_GPU=1` (then a missing GPU fails the test).

use kvcodec_gpu::field::{merge_to_vec, split_to_vec};
use kvcodec_testkit::{Rng, gpu_or_skip};

/// Every bit pattern, then a pseudo-random tail so the length is not a multiple of 16.
fn words() -> Vec<u16> {
    let mut w: Vec<u16> = (0..=u16::MAX).collect();
    w.extend(Rng(0x9e37_79b9).words(100_003));
    w
}

#[test]
fn gpu_split_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_split_matches_cpu") else { return };
    let words = words();
    for n in [1, 15, 16, 17, 65_536, words.len()] {
        let cpu = bf16_field::split_to_vec(&words[..n]);
        assert_eq!(split_to_vec(&gpu, &words[..n]).unwrap(), cpu, "n = {n}");
    }
}

#[test]
fn gpu_merge_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_merge_matches_cpu") else { return };
    let words = words();
    for n in [1, 15, 16, 17, 65_536, words.len()] {
        // CPU split -> GPU merge must give the words back.
        let (e, sf) = bf16_field::split_to_vec(&words[..n]);
        assert_eq!(merge_to_vec(&gpu, &e, &sf).unwrap(), &words[..n], "n = {n}");
    }
}

#[test]
fn gpu_split_then_cpu_merge_round_trips() {
    let Some(gpu) = gpu_or_skip("gpu_split_then_cpu_merge_round_trips") else { return };
    let words = words();
    let (e, sf) = split_to_vec(&gpu, &words).unwrap();
    assert_eq!(bf16_field::merge_to_vec(&e, &sf).unwrap(), words);
}

#[test]
fn empty_input_round_trips() {
    let Some(gpu) = gpu_or_skip("empty_input_round_trips") else { return };
    assert_eq!(split_to_vec(&gpu, &[]).unwrap(), (vec![], vec![]));
    assert_eq!(merge_to_vec(&gpu, &[], &[]).unwrap(), Vec::<u16>::new());
}
