//! GPU encoder and decoder against the CPU reference, in both directions, on the real
//! fixtures and on edge cases. Skips without a GPU unless `KVCODEC_REQUIRE_GPU=1`.

use bf16_field::gpu::gpu_for_test;
use splitzip::gpu::{GpuError, decode_host, encode_host};
use splitzip::{Codebook, DEFAULT_CHUNK_SIZE, DecodeError, decode, encode};

/// The real fixtures' words (`KVCODEC_FIXTURES` on the device machine), code then prose.
fn fixture_words() -> Vec<(String, Vec<u16>)> {
    let caches = bf16_field::fixtures::read_all().unwrap();
    assert_eq!(
        caches.len(),
        2,
        "expected the two SmolLM2 fixtures in {}",
        bf16_field::fixtures::dir().display()
    );
    caches.into_iter().map(|(name, cache)| (name, cache.concat_words())).collect()
}

fn xorshift_words(n: usize, seed: u32) -> Vec<u16> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u16
        })
        .collect()
}

/// Inputs: edge cases (empty, one value, odd lengths, all zeros, specials, every value
/// escaped) and the real fixtures, with the codebook of the other fixture.
fn cases() -> Vec<(String, Vec<u16>, Codebook)> {
    let fixtures = fixture_words();
    let cb_code = Codebook::calibrate(&[&fixtures[0].1]).unwrap();
    let cb_prose = Codebook::calibrate(&[&fixtures[1].1]).unwrap();
    let mut cases = vec![
        ("empty".to_string(), vec![], cb_code),
        ("one".to_string(), vec![0x3f80], cb_code),
        ("zeros-1001".to_string(), vec![0; 1001], cb_code),
        (
            "specials".to_string(),
            [0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0001, 0x807f, 0x7f7f, 0xffff].repeat(1000),
            cb_code,
        ),
        ("random-raw".to_string(), xorshift_words(100_003, 7), cb_code),
        ("fixture-prefix-odd".to_string(), fixtures[0].1[..123_457].to_vec(), cb_prose),
    ];
    let [code, prose] = <[(String, Vec<u16>); 2]>::try_from(fixtures).unwrap();
    cases.push((code.0, code.1, cb_prose));
    cases.push((prose.0, prose.1, cb_code));
    cases
}

#[test]
fn gpu_encode_is_byte_identical_to_cpu() {
    let Some(gpu) = gpu_for_test("gpu_encode_is_byte_identical_to_cpu") else { return };
    for (name, words, codebook) in cases() {
        for chunk in [32, DEFAULT_CHUNK_SIZE, 8192] {
            let cpu = encode(&words, &codebook, chunk).unwrap();
            let gpu_bytes = encode_host(&gpu, &words, &codebook, chunk).unwrap();
            assert_eq!(gpu_bytes.len(), cpu.len(), "{name}, chunk {chunk}: length");
            assert!(
                gpu_bytes == cpu,
                "{name}, chunk {chunk}: bytes differ at {:?}",
                gpu_bytes.iter().zip(&cpu).position(|(a, b)| a != b)
            );
            // GPU encode -> CPU decode.
            assert_eq!(decode(&gpu_bytes).unwrap(), words, "{name}, chunk {chunk}");
        }
    }
}

#[test]
fn gpu_decode_matches_cpu_encode() {
    let Some(gpu) = gpu_for_test("gpu_decode_matches_cpu_encode") else { return };
    for (name, words, codebook) in cases() {
        for chunk in [32, DEFAULT_CHUNK_SIZE, 8192] {
            let payload = encode(&words, &codebook, chunk).unwrap();
            assert_eq!(decode_host(&gpu, &payload).unwrap(), words, "{name}, chunk {chunk}");
        }
    }
}

/// Asserts that the GPU decoder rejects `bad` with exactly the CPU decoder's error `cpu`.
fn assert_gpu_reports(
    gpu: &std::sync::Arc<bf16_field::gpu::GpuContext>,
    bad: &[u8],
    cpu: &DecodeError,
    what: &str,
) {
    let gpu_err = decode_host(gpu, bad).unwrap_err();
    assert!(matches!(&gpu_err, GpuError::Decode(e) if e == cpu), "{what}: {gpu_err} vs {cpu}");
}

#[test]
fn gpu_decode_reports_the_cpu_error() {
    let Some(gpu) = gpu_for_test("gpu_decode_reports_the_cpu_error") else { return };
    let (_, words) = fixture_words().remove(0);
    let codebook = Codebook::calibrate(&[&words]).unwrap();
    let payload = encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
    let header = splitzip::PayloadHeader::parse(&payload).unwrap();
    let splitzip::Layout::Coded(layout) = header.layout else { panic!("fixture payload is coded") };
    assert!(header.escape_count >= 2, "the fixture has escapes");
    // Every single-byte corruption of the body that the CPU rejects, the GPU rejects with
    // the same error; sample a few bytes of each section.
    let mut checked = 0;
    for (section, s) in layout.sections() {
        for k in [0u64, 1, s.len / 2, s.len.saturating_sub(1)] {
            if s.len == 0 || k >= s.len {
                continue;
            }
            let mut bad = payload.clone();
            bad[(s.offset + k) as usize] ^= 0x5a;
            match decode(&bad) {
                Ok(_) => {} // e.g. a sign+mantissa byte: still a valid payload
                Err(cpu) => {
                    assert_gpu_reports(&gpu, &bad, &cpu, &format!("{section}+{k}"));
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 4, "only {checked} corruptions were rejected");
    // A nonzero byte in each alignment gap between sections (spec §3): the GPU's padding
    // check (one thread of the decode launch) must flag it as the CPU does.
    let sections = layout.sections();
    let mut gaps = 0;
    for pair in sections.windows(2) {
        let ((name, s), (_, next)) = (pair[0], pair[1]);
        let end = s.offset + s.len;
        for at in [end, next.offset.saturating_sub(1)] {
            if at < end || at >= next.offset {
                continue; // no gap after this section
            }
            let mut bad = payload.clone();
            bad[at as usize] = 0x01;
            let cpu = decode(&bad).unwrap_err();
            assert!(matches!(cpu, DecodeError::PaddingNotZero { .. }), "gap after {name}: {cpu}");
            assert_gpu_reports(&gpu, &bad, &cpu, &format!("gap after {name}+{at}"));
            gaps += 1;
        }
    }
    assert!(gaps >= 2, "the fixture payload has only {gaps} padding bytes to corrupt");
    let truncated = &payload[..payload.len() - 1];
    assert!(matches!(decode_host(&gpu, truncated), Err(GpuError::Decode(DecodeError::Truncated { .. }))));
}

#[test]
fn gpu_encode_replays_from_a_cuda_graph() {
    use cudarc::driver::CudaSlice;
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use splitzip::gpu::{EncodeWorkspace, encode_device};

    let Some(gpu) = gpu_for_test("gpu_encode_replays_from_a_cuda_graph") else { return };
    let fixtures = fixture_words();
    let (words, codebook) = (&fixtures[0].1, Codebook::calibrate(&[&fixtures[1].1]).unwrap());
    let cpu = encode(words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
    let stream = gpu.stream();
    let d_words: CudaSlice<u16> = stream.clone_htod(words).unwrap();
    let mut out: CudaSlice<u8> =
        stream.alloc_zeros(splitzip::max_encoded_len(words.len(), DEFAULT_CHUNK_SIZE)).unwrap();
    let mut ws = EncodeWorkspace::new(&gpu, words.len()).unwrap();
    // One plain call first loads the module (not a stream operation).
    encode_device(&gpu, &d_words.as_view(), &codebook, DEFAULT_CHUNK_SIZE, &mut out.as_view_mut(), &mut ws)
        .unwrap();
    stream.memset_zeros(&mut out).unwrap();
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    encode_device(&gpu, &d_words.as_view(), &codebook, DEFAULT_CHUNK_SIZE, &mut out.as_view_mut(), &mut ws)
        .unwrap();
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
    for replay in 0..3 {
        graph.launch().unwrap();
        let len = ws.encoded_len(&gpu).unwrap();
        let bytes = stream.clone_dtoh(&out.slice(..len)).unwrap();
        assert!(bytes == cpu, "replay {replay}: graph-encoded payload differs from the CPU's");
    }
}
