//! The GPU BF16 twin against the FP64 reference, on random and real KV values, and its
//! launch contract: the same bytes from every launch, block tables checked on the device,
//! graph capture. Skips without a GPU unless `KVCODEC_REQUIRE_GPU=1`.

mod common;

use kvcodec_attention::gpu::{
    DecodeWorkspace, DeviceProblem, GpuError, STATUS, decode_device, decode_to_vec,
};
use kvcodec_attention::{DecodeShape, reference, relative_l2_error};
use kvcodec_gpu::GpuContext;
use kvcodec_testkit::{floats, gpu_or_skip};

/// BF16 attention tolerances: the output is rounded to BF16 (2^-9 relative) and P is
/// rounded to BF16 before P.V, as in FlashAttention-2.
const MAX_RELATIVE_L2: f64 = 1e-2;
const MAX_LSE_ERROR: f32 = 1e-4;

fn assert_close(gpu: &GpuContext, owned: &common::Owned, what: &str) {
    let problem = owned.problem();
    let want = reference(&problem).unwrap();
    let got = decode_to_vec(gpu, &problem).unwrap();
    let error = relative_l2_error(&floats(&got.out), &want.out);
    assert!(error < MAX_RELATIVE_L2, "{what}: relative L2 error {error:.2e}");
    for (i, (g, w)) in got.lse.iter().zip(&want.lse).enumerate() {
        assert!((g - w).abs() <= MAX_LSE_ERROR * w.abs().max(1.0), "{what}: lse[{i}] {g} vs {w}");
    }
    eprintln!("{what}: relative L2 error {error:.2e}");
}

#[test]
fn the_twin_matches_the_reference_on_random_kv() {
    let Some(gpu) = gpu_or_skip("the_twin_matches_the_reference_on_random_kv") else { return };
    let cases: &[(DecodeShape, &[u32])] = &[
        (DecodeShape { batch: 1, q_heads: 9, kv_heads: 3, head_dim: 64 }, &[1000]),
        (DecodeShape { batch: 3, q_heads: 32, kv_heads: 8, head_dim: 128 }, &[1, 300, 2049]),
        (DecodeShape { batch: 2, q_heads: 4, kv_heads: 1, head_dim: 256 }, &[17, 5000]),
        (DecodeShape { batch: 2, q_heads: 12, kv_heads: 4, head_dim: 128 }, &[64, 100]),
        (DecodeShape { batch: 1, q_heads: 8, kv_heads: 8, head_dim: 64 }, &[20_000]),
        (DecodeShape { batch: 4, q_heads: 16, kv_heads: 2, head_dim: 256 }, &[16, 15, 33, 4096]),
        (DecodeShape { batch: 1, q_heads: 2, kv_heads: 1, head_dim: 128 }, &[65_536]),
    ];
    for (i, (shape, lens)) in cases.iter().enumerate() {
        // Wide scores (sigma 3) make the softmax peaked: the online max matters.
        for sigma in [0.5, 3.0] {
            let owned = common::random(*shape, lens, 17 + i as u32, sigma);
            assert_close(&gpu, &owned, &format!("{shape:?} {lens:?} sigma {sigma}"));
        }
    }
}

#[test]
fn the_twin_matches_the_reference_for_every_group_and_width() {
    let Some(gpu) = gpu_or_skip("the_twin_matches_the_reference_for_every_group_and_width") else { return };
    for head_dim in kvcodec_attention::HEAD_DIMS {
        for group in 1..=kvcodec_attention::MAX_GROUP {
            let shape = DecodeShape { batch: 2, q_heads: 2 * group, kv_heads: 2, head_dim };
            // One split (37 tokens) beside several (3000 tokens).
            let owned = common::random(shape, &[37, 3000], group as u32, 1.0);
            assert_close(&gpu, &owned, &format!("{shape:?}"));
        }
    }
}

#[test]
fn a_block_table_wider_than_the_contexts_changes_nothing() {
    // vLLM's tables are as wide as the longest context the model allows: the split plan
    // comes from the width, each sequence is split over its own pages.
    let Some(gpu) = gpu_or_skip("a_block_table_wider_than_the_contexts_changes_nothing") else { return };
    let shape = DecodeShape { batch: 3, q_heads: 32, kv_heads: 8, head_dim: 128 };
    let owned = common::random(shape, &[5000, 17, 1234], 4, 1.0);
    let narrow = decode_to_vec(&gpu, &owned.problem()).unwrap();
    let width = 16 * owned.max_pages;
    let mut pages = vec![u32::MAX; shape.batch * width];
    for b in 0..shape.batch {
        pages[b * width..][..owned.max_pages]
            .copy_from_slice(&owned.pages[b * owned.max_pages..][..owned.max_pages]);
    }
    let wide = common::Owned { pages, max_pages: width, ..owned };
    let result = decode_to_vec(&gpu, &wide.problem()).unwrap();
    assert_close(&gpu, &wide, "wide table");
    let error = relative_l2_error(&floats(&result.out), &floats(&narrow.out));
    assert!(error < MAX_RELATIVE_L2, "wide vs narrow table: {error:.2e}");
}

#[test]
fn the_twin_matches_the_reference_on_real_kv() {
    let Some(gpu) = gpu_or_skip("the_twin_matches_the_reference_on_real_kv") else { return };
    for (name, cache) in kvcodec_testkit::fixtures() {
        let words = cache.concat_words();
        for shape in [
            DecodeShape { batch: 2, q_heads: 9, kv_heads: 3, head_dim: 64 },
            DecodeShape { batch: 1, q_heads: 32, kv_heads: 8, head_dim: 128 },
            DecodeShape { batch: 1, q_heads: 4, kv_heads: 1, head_dim: 256 },
        ] {
            let lens: Vec<u32> = (0..shape.batch as u32).map(|b| 3000 + 77 * b).collect();
            let owned = common::from_words(shape, &lens, 5, &words);
            assert_close(&gpu, &owned, &format!("{name} {shape:?}"));
        }
    }
}

struct Device {
    q: cudarc::driver::CudaSlice<u16>,
    k: cudarc::driver::CudaSlice<u16>,
    v: cudarc::driver::CudaSlice<u16>,
    table: cudarc::driver::CudaSlice<u32>,
    lens: cudarc::driver::CudaSlice<u32>,
}

impl Device {
    fn upload(gpu: &GpuContext, owned: &common::Owned) -> Self {
        Device {
            q: gpu.upload(&owned.q).unwrap(),
            k: gpu.upload(&owned.k).unwrap(),
            v: gpu.upload(&owned.v).unwrap(),
            table: gpu.upload(&owned.pages).unwrap(),
            lens: gpu.upload(&owned.lens).unwrap(),
        }
    }

    fn problem(&self, owned: &common::Owned) -> DeviceProblem<'_> {
        DeviceProblem {
            shape: owned.shape,
            q: self.q.slice(..),
            k: self.k.slice(..),
            v: self.v.slice(..),
            block_table: self.table.slice(..),
            max_pages: owned.max_pages,
            context_lens: self.lens.slice(..),
            scale: owned.scale,
        }
    }
}

#[test]
fn every_launch_gives_the_same_bytes_and_graphs_replay_them() {
    let Some(gpu) = gpu_or_skip("every_launch_gives_the_same_bytes_and_graphs_replay_them") else { return };
    // Head_dim 64 and 128: the two ways the last CTA combines the splits.
    for shape in [
        DecodeShape { batch: 2, q_heads: 32, kv_heads: 8, head_dim: 128 },
        DecodeShape { batch: 2, q_heads: 9, kv_heads: 3, head_dim: 64 },
    ] {
        repeat_and_replay(&gpu, shape);
    }
}

/// Three launches and three graph replays of one problem over `shape` give the bytes of
/// the first `decode_to_vec`.
fn repeat_and_replay(gpu: &GpuContext, shape: DecodeShape) {
    let owned = common::random(shape, &[9000, 70], 3, 1.0);
    let first = decode_to_vec(gpu, &owned.problem()).unwrap();
    let device = Device::upload(gpu, &owned);
    let mut workspace = DecodeWorkspace::new(gpu, shape, owned.max_pages).unwrap();
    assert!(workspace.plan().splits > 1, "the case must exercise the split combine");
    let n = shape.q_values();
    let heads = shape.batch * shape.q_heads;
    let mut out = gpu.zeros::<u16>(n).unwrap();
    let mut lse = gpu.zeros::<f32>(heads).unwrap();
    for _ in 0..3 {
        decode_device(
            gpu,
            &mut workspace,
            &device.problem(&owned),
            &mut out.slice_mut(..),
            &mut lse.slice_mut(..),
        )
        .unwrap();
        workspace.check(gpu).unwrap();
        assert_eq!(gpu.download(&out, n).unwrap(), first.out);
        assert_eq!(gpu.download(&lse, heads).unwrap(), first.lse);
    }
    let out_cell = std::cell::RefCell::new(out);
    let lse_cell = std::cell::RefCell::new(lse);
    let workspace_cell = std::cell::RefCell::new(workspace);
    kvcodec_testkit::replay_in_graph(
        gpu,
        3,
        || {
            gpu.stream().memset_zeros(&mut *out_cell.borrow_mut()).unwrap();
            gpu.stream().memset_zeros(&mut *lse_cell.borrow_mut()).unwrap();
        },
        || {
            decode_device(
                gpu,
                &mut workspace_cell.borrow_mut(),
                &device.problem(&owned),
                &mut out_cell.borrow_mut().slice_mut(..),
                &mut lse_cell.borrow_mut().slice_mut(..),
            )
            .unwrap()
        },
        |replay| {
            assert_eq!(gpu.download(&out_cell.borrow(), n).unwrap(), first.out, "replay {replay}");
            assert_eq!(gpu.download(&lse_cell.borrow(), heads).unwrap(), first.lse, "replay {replay}");
        },
    );
    workspace_cell.borrow_mut().check(gpu).unwrap();
}

#[test]
fn block_tables_on_the_device_are_checked_there() {
    let Some(gpu) = gpu_or_skip("block_tables_on_the_device_are_checked_there") else { return };
    let shape = DecodeShape { batch: 2, q_heads: 8, kv_heads: 2, head_dim: 64 };
    let good = common::random(shape, &[40, 3], 8, 1.0);
    let pages = (good.k.len() / shape.page_values()) as u32;
    let mut bad_page = common::random(shape, &[40, 3], 8, 1.0);
    bad_page.pages[1] = pages; // sequence 0, logical page 1
    let mut bad_len = common::random(shape, &[40, 3], 8, 1.0);
    bad_len.lens[1] = (bad_len.max_pages * 16 + 1) as u32;
    // A context past its row is flagged, then clamped to the row, whose unused entries
    // (u32::MAX in these tables) are flagged as pages past the cache too.
    for (owned, flag) in [(&bad_page, 2u32), (&bad_len, 1 | 2)] {
        let device = Device::upload(&gpu, owned);
        let mut workspace = DecodeWorkspace::new(&gpu, shape, owned.max_pages).unwrap();
        let mut out = gpu.zeros::<u16>(shape.q_values()).unwrap();
        let mut lse = gpu.zeros::<f32>(shape.batch * shape.q_heads).unwrap();
        decode_device(
            &gpu,
            &mut workspace,
            &device.problem(owned),
            &mut out.slice_mut(..),
            &mut lse.slice_mut(..),
        )
        .unwrap();
        match workspace.check(&gpu) {
            Err(GpuError::Disagreement { status, meaning }) => {
                assert_eq!(status, flag, "{meaning}");
                assert_eq!(meaning, STATUS.describe(flag));
            }
            other => panic!("expected the status flag {flag}, got {other:?}"),
        }
        // The status is cleared by the check: a good problem through the same workspace passes.
        let device = Device::upload(&gpu, &good);
        decode_device(
            &gpu,
            &mut workspace,
            &device.problem(&good),
            &mut out.slice_mut(..),
            &mut lse.slice_mut(..),
        )
        .unwrap();
        workspace.check(&gpu).unwrap();
    }
    // The host path refuses them before any launch, with the problem's own error.
    assert!(matches!(decode_to_vec(&gpu, &bad_page.problem()), Err(GpuError::Codec(_))));
    assert!(matches!(decode_to_vec(&gpu, &bad_len.problem()), Err(GpuError::Codec(_))));
}
