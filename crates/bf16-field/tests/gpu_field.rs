//! GPU split/merge against the CPU reference, in both directions. Skips without a GPU
//! unless `KVCODEC_REQUIRE_GPU=1` (then a missing GPU fails the test).

use bf16_field::gpu::gpu_for_test;

/// Every bit pattern, then a pseudo-random tail so the length is not a multiple of 16.
fn words() -> Vec<u16> {
    let mut w: Vec<u16> = (0..=u16::MAX).collect();
    let mut x = 0x9e37_79b9u32;
    w.extend((0..100_003).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u16
    }));
    w
}

#[test]
fn gpu_split_matches_cpu() {
    let Some(gpu) = gpu_for_test("gpu_split_matches_cpu") else { return };
    let words = words();
    for n in [1, 15, 16, 17, 65_536, words.len()] {
        let cpu = bf16_field::split_to_vec(&words[..n]);
        assert_eq!(gpu.split_host(&words[..n]).unwrap(), cpu, "n = {n}");
    }
}

#[test]
fn gpu_merge_matches_cpu() {
    let Some(gpu) = gpu_for_test("gpu_merge_matches_cpu") else { return };
    let words = words();
    for n in [1, 15, 16, 17, 65_536, words.len()] {
        // CPU split -> GPU merge must give the words back.
        let (e, sf) = bf16_field::split_to_vec(&words[..n]);
        assert_eq!(gpu.merge_host(&e, &sf).unwrap(), &words[..n], "n = {n}");
    }
}

#[test]
fn gpu_split_then_cpu_merge_round_trips() {
    let Some(gpu) = gpu_for_test("gpu_split_then_cpu_merge_round_trips") else { return };
    let words = words();
    let (e, sf) = gpu.split_host(&words).unwrap();
    assert_eq!(bf16_field::merge_to_vec(&e, &sf).unwrap(), words);
}
