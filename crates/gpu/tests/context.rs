//! The GPU layer itself: the module registry, the probe's errors, launches on a caller's
//! stream, and buffer checks. GPU tests skip without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

use kvcodec_gpu::field::split;
use kvcodec_gpu::{Error, GpuContext, registered_modules};
use kvcodec_testkit::{Rng, gpu_or_skip};

#[test]
fn the_probe_knows_every_module_of_this_crate() {
    let names: Vec<&str> = registered_modules().map(|m| m.name()).collect();
    for expected in ["kvcodec_field", "kvcodec_timing"] {
        assert!(names.contains(&expected), "{expected} not registered: {names:?}");
    }
}

#[test]
fn a_missing_device_is_unavailable_with_its_ordinal() {
    // Without libcuda the first probe step fails; with it, no machine has 4096 GPUs.
    match GpuContext::new(4096) {
        Err(Error::Unavailable(why)) => {
            assert!(why.contains("libcuda") || why.contains("device 4096"), "{why}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Splits on `gpu`'s stream and checks the bytes against the CPU. The input is written
/// on that stream behind a 20 ms hold, so a split launched on any other stream would
/// read the stale zeros instead.
fn split_matches_cpu(gpu: &GpuContext, words: &[u16]) {
    let n = words.len();
    let fresh = gpu.upload(words).unwrap();
    let mut d_words = gpu.zeros::<u16>(n).unwrap();
    gpu.synchronize().unwrap();
    gpu.hold(20_000_000).unwrap();
    gpu.stream().memcpy_dtod(&fresh, &mut d_words).unwrap();
    let (mut e, mut sf) = (gpu.zeros::<u8>(n).unwrap(), gpu.zeros::<u8>(n).unwrap());
    split(gpu, &d_words.slice(..n), &mut e.slice_mut(..n), &mut sf.slice_mut(..n)).unwrap();
    let (cpu_e, cpu_sf) = bf16_field::split_to_vec(words);
    assert_eq!(gpu.download(&e, n).unwrap(), cpu_e);
    assert_eq!(gpu.download(&sf, n).unwrap(), cpu_sf);
}

#[test]
fn launches_go_to_a_callers_stream() {
    let Some(gpu) = gpu_or_skip("launches_go_to_a_callers_stream") else { return };
    let words = Rng(3).words(1 << 20);
    // A cudarc stream of the caller's.
    let theirs = gpu.context().new_stream().unwrap();
    let on_theirs = gpu.with_stream(theirs.clone()).unwrap();
    assert!(std::sync::Arc::ptr_eq(on_theirs.stream(), &theirs));
    split_matches_cpu(&on_theirs, &words);
    // A raw CUstream owned by "another library" (here: the stream above).
    // SAFETY: `theirs` is a live stream of this device's primary context and outlives
    // the wrapped context.
    let raw = unsafe { gpu.with_raw_stream(theirs.cu_stream()) }.unwrap();
    assert_eq!(raw.stream().cu_stream(), theirs.cu_stream());
    split_matches_cpu(&raw, &words);
    // Both share the device's loaded modules and report the same device.
    assert_eq!(raw.info(), gpu.info());
}

#[test]
fn misaligned_and_short_buffers_are_typed_errors() {
    let Some(gpu) = gpu_or_skip("misaligned_and_short_buffers_are_typed_errors") else { return };
    let words = gpu.upload(&[0x3f80u16; 64]).unwrap();
    let (mut e, mut sf) = (gpu.zeros::<u8>(64).unwrap(), gpu.zeros::<u8>(64).unwrap());
    let err = split(&gpu, &words.slice(1..33), &mut e.slice_mut(..32), &mut sf.slice_mut(..32)).unwrap_err();
    assert!(matches!(err, Error::Buffer { what: "words", .. }), "{err}");
    let err = split(&gpu, &words.slice(..64), &mut e.slice_mut(..32), &mut sf.slice_mut(..64)).unwrap_err();
    assert!(matches!(err, Error::Buffer { what: "exponents", .. }), "{err}");
}
