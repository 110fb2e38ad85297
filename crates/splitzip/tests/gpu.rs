//! GPU encoder and decoder against the CPU reference, in both directions, on the real
//! fixtures and on edge cases. Skips without a GPU unless `KVCODEC_REQUIRE_GPU=1`.

use kvcodec_gpu::GpuContext;
use kvcodec_testkit::{Rng, gpu_or_skip};
use splitzip::gpu::{GpuError, decode_to_vec, encode_to_vec};
use splitzip::{
    Codebook, DEFAULT_CHUNK_SIZE, DecodeError, EncodeOptions, SplitzipCodec, decode, encode, encode_with,
};

/// The real fixtures' words (`KVCODEC_FIXTURES` on the device machine), code then prose.
fn fixture_words() -> Vec<(String, Vec<u16>)> {
    kvcodec_testkit::fixtures().into_iter().map(|(name, cache)| (name, cache.concat_words())).collect()
}

/// `words` with exponent bit 4 flipped in every `every`-th value (the exponent moved by
/// 16, outside a fixture's codebook): dense escapes that still leave the payload coded.
fn with_escapes(words: &[u16], every: usize) -> Vec<u16> {
    words.iter().enumerate().map(|(i, &w)| if i % every == 0 { w ^ 0x0800 } else { w }).collect()
}

/// `words` with an exponent outside `codebook` at every index `escaped` picks and one of
/// its codes everywhere else (an exponent the codebook lacks becomes its code 0's): a
/// payload whose escapes are exactly those indices.
fn with_escapes_at(words: &[u16], codebook: &Codebook, escaped: impl Fn(usize) -> bool) -> Vec<u16> {
    let common = codebook.exponent(0).unwrap();
    let outside = (0..=255u8).find(|&e| !codebook.contains(e)).unwrap();
    let with_exponent = |w: u16, e: u8| (w & 0x807f) | (u16::from(e) << 7);
    let exponent = |w: u16| ((w >> 7) & 0xff) as u8;
    words
        .iter()
        .enumerate()
        .map(|(i, &w)| match (escaped(i), codebook.contains(exponent(w))) {
            (true, _) => with_exponent(w, outside),
            (false, true) => w,
            (false, false) => with_exponent(w, common),
        })
        .collect()
}

/// Inputs: edge cases (empty, one value, odd lengths, all zeros, specials, every value
/// escaped), the real fixtures with the codebook of the other fixture, and the first with
/// every 29th and every 10th exponent moved (about 3.5% and 10% escapes).
fn cases() -> Vec<(String, Vec<u16>, Codebook)> {
    let fixtures = fixture_words();
    let cb_code = Codebook::calibrate(&[&fixtures[0].1]).unwrap();
    let cb_prose = Codebook::calibrate(&[&fixtures[1].1]).unwrap();
    let mut cases = vec![
        ("empty".to_string(), vec![], cb_code),
        ("one".to_string(), vec![0x3f80], cb_code),
        ("zeros-1001".to_string(), vec![0; 1001], cb_code),
        ("specials".to_string(), kvcodec_testkit::special_words().repeat(1000), cb_code),
        ("random-raw".to_string(), Rng(7).words(100_003), cb_code),
        ("fixture-prefix-odd".to_string(), fixtures[0].1[..123_457].to_vec(), cb_prose),
        ("fixture-escapes-every-29th".to_string(), with_escapes(&fixtures[0].1, 29), cb_prose),
        ("fixture-escapes-every-10th".to_string(), with_escapes(&fixtures[0].1[..300_001], 10), cb_prose),
    ];
    let [code, prose] = <[(String, Vec<u16>); 2]>::try_from(fixtures).unwrap();
    cases.push((code.0, code.1, cb_prose));
    cases.push((prose.0, prose.1, cb_code));
    cases
}

/// The GPU's payload equals the CPU's: the same length, then the same bytes (the first
/// differing offset in the message, not two multi-gigabyte dumps).
fn assert_same_payload(gpu_bytes: &[u8], cpu: &[u8], what: &str) {
    assert_eq!(gpu_bytes.len(), cpu.len(), "{what}: length");
    assert!(
        gpu_bytes == cpu,
        "{what}: bytes differ at {:?}",
        gpu_bytes.iter().zip(cpu).position(|(a, b)| a != b)
    );
}

#[test]
fn gpu_encode_is_byte_identical_to_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_encode_is_byte_identical_to_cpu") else { return };
    for (name, words, codebook) in cases() {
        for (chunk, checksum) in
            [(32, false), (DEFAULT_CHUNK_SIZE, false), (8192, false), (1024, true), (32, true)]
        {
            let options = EncodeOptions { chunk_size: chunk, checksum };
            let cpu = encode_with(&words, &codebook, &options).unwrap();
            let gpu_bytes = encode_to_vec(&gpu, &words, &codebook, &options).unwrap();
            assert_same_payload(&gpu_bytes, &cpu, &format!("{name}, {options:?}"));
            // GPU encode -> CPU decode.
            assert_eq!(decode(&gpu_bytes).unwrap(), words, "{name}, {options:?}");
        }
    }
}

#[test]
fn gpu_decode_matches_cpu_encode() {
    let Some(gpu) = gpu_or_skip("gpu_decode_matches_cpu_encode") else { return };
    for (name, words, codebook) in cases() {
        for (chunk, checksum) in [(32, false), (DEFAULT_CHUNK_SIZE, false), (8192, false), (1024, true)] {
            let payload =
                encode_with(&words, &codebook, &EncodeOptions { chunk_size: chunk, checksum }).unwrap();
            assert_eq!(decode_to_vec(&gpu, &payload).unwrap(), words, "{name}, chunk {chunk}, {checksum}");
        }
    }
}

/// A version 1 payload (no header CRC, bytes 96..128 zero) decodes on the GPU as on the
/// CPU.
#[test]
fn gpu_decodes_version_1_payloads() {
    let Some(gpu) = gpu_or_skip("gpu_decodes_version_1_payloads") else { return };
    for (name, words, codebook) in cases() {
        let mut old = encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
        old[4] = 1;
        old[96..100].fill(0);
        assert_eq!(decode(&old).unwrap(), words, "{name}: CPU");
        assert_eq!(decode_to_vec(&gpu, &old).unwrap(), words, "{name}: GPU");
    }
}

/// A flipped sign+mantissa bit (coded) or word bit (raw) passes every structural check;
/// with the checksum the GPU reports the CPU's `ChecksumMismatch`, without it both
/// decode the same other values.
#[test]
fn gpu_checksum_catches_what_the_cpu_catches() {
    let Some(gpu) = gpu_or_skip("gpu_checksum_catches_what_the_cpu_catches") else { return };
    for (name, words, codebook) in cases() {
        if words.is_empty() {
            continue;
        }
        for checksum in [false, true] {
            let options = EncodeOptions { chunk_size: DEFAULT_CHUNK_SIZE, checksum };
            let mut bad = encode_with(&words, &codebook, &options).unwrap();
            let header = splitzip::PayloadHeader::parse(&bad).unwrap();
            let at = match header.layout {
                splitzip::Layout::Coded(l) => l.sign_mantissa.offset + l.sign_mantissa.len / 2,
                splitzip::Layout::Raw { words } => words.offset + words.len / 2,
            };
            bad[at as usize] ^= 0x01;
            match decode(&bad) {
                Ok(cpu) => {
                    assert!(!checksum, "{name}: the checksum missed a flipped bit");
                    assert_eq!(decode_to_vec(&gpu, &bad).unwrap(), cpu, "{name}");
                }
                Err(cpu) => {
                    assert!(matches!(cpu, DecodeError::ChecksumMismatch { .. }), "{name}: {cpu}");
                    assert_gpu_reports(&gpu, &bad, &cpu, &name);
                }
            }
        }
    }
}

/// Asserts that the GPU decoder rejects `bad` with exactly the CPU decoder's error `cpu`.
fn assert_gpu_reports(gpu: &GpuContext, bad: &[u8], cpu: &DecodeError, what: &str) {
    let gpu_err = decode_to_vec(gpu, bad).unwrap_err();
    let expected = splitzip::Error::Decode(cpu.clone());
    assert!(matches!(&gpu_err, GpuError::Codec(e) if *e == expected), "{what}: {gpu_err} vs {cpu}");
}

/// Corrupt bodies with dense escapes at the smallest and largest GPU chunk sizes (256
/// chunks of a tile, or one): every byte flip the CPU rejects, the GPU rejects with the
/// same error; one it accepts decodes to the CPU's words.
#[test]
fn gpu_decode_of_corrupt_escapes_matches_the_cpu_at_every_chunk_size() {
    let Some(gpu) = gpu_or_skip("gpu_decode_of_corrupt_escapes_matches_the_cpu_at_every_chunk_size") else {
        return;
    };
    let (_, words) = fixture_words().remove(0);
    let codebook = Codebook::calibrate(&[&words]).unwrap();
    let words = with_escapes(&words[..200_003], 29);
    for chunk_size in [32, 8192] {
        let payload = encode(&words, &codebook, chunk_size).unwrap();
        let header = splitzip::PayloadHeader::parse(&payload).unwrap();
        let splitzip::Layout::Coded(layout) = header.layout else { panic!("chunk {chunk_size}: not coded") };
        let mut rejected = 0;
        for (section, s) in layout.sections() {
            for k in [0u64, 1, 2, 3, s.len / 3, s.len / 2, s.len.saturating_sub(2), s.len.saturating_sub(1)] {
                if k >= s.len {
                    continue;
                }
                for flip in [0x5au8, 0xff, 0x01] {
                    let mut bad = payload.clone();
                    bad[(s.offset + k) as usize] ^= flip;
                    let what = format!("chunk {chunk_size}, {section}+{k} ^ {flip:#x}");
                    match decode(&bad) {
                        Ok(cpu) => assert_eq!(decode_to_vec(&gpu, &bad).unwrap(), cpu, "{what}"),
                        Err(cpu) => {
                            assert_gpu_reports(&gpu, &bad, &cpu, &what);
                            rejected += 1;
                        }
                    }
                }
            }
        }
        assert!(rejected >= 10, "chunk {chunk_size}: only {rejected} corruptions were rejected");
    }
}

/// The image decoder (dense escapes) checks every chunk in its tiles, a tile without
/// escapes too: one hand-made corruption per check of spec §5, each rejected with the
/// CPU's error and each made so that no other check would catch it. The payload has
/// 1440 tiles, so tiles also fetch the offsets and lists of tiles hundreds ahead into
/// the L2, corrupt ones included.
#[test]
fn gpu_image_decoder_checks_every_chunk() {
    let Some(gpu) = gpu_or_skip("gpu_image_decoder_checks_every_chunk") else { return };
    const TILE: usize = splitzip::gpu::TILE_VALUES;
    let (_, words) = fixture_words().remove(0);
    let codebook = Codebook::calibrate(&[&words]).unwrap();
    let other = codebook.exponent(1).unwrap();
    // The fixture twice; escapes every 29th value, none in tile 1 (values TILE .. 2 TILE).
    let twice = [&words[..], &words[..]].concat();
    let words = with_escapes_at(&twice, &codebook, |i| i % 29 == 0 && !(TILE..2 * TILE).contains(&i));
    let payload = encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
    let header = splitzip::PayloadHeader::parse(&payload).unwrap();
    let splitzip::Layout::Coded(layout) = header.layout else { panic!("not coded") };
    assert!(header.escape_count * 4096 >= words.len() as u64, "dense: the image decoder");
    assert_eq!(decode_to_vec(&gpu, &payload).unwrap(), words);
    // By construction escape k < 283 is value 29 k: chunk 0 holds escapes 0 ..= 35, and
    // escape 40 is value 1160, position 136 of chunk 1.
    let at = |section: splitzip::Section, k: usize| section.offset as usize + k;
    let offset_at = |chunk: usize| at(layout.escape_offsets, 4 * chunk);
    let position_at = |k: usize| at(layout.escape_positions, 2 * k);
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut bad = payload.clone();
    bad[offset_at(9)] ^= 1; // chunks 8 and 9 of tile 1 (no escapes) out of order
    cases.push(("offsets in a tile without escapes", bad));
    let mut bad = payload.clone();
    let one_short = (header.escape_count - 1) as u32; // still ordered and <= E
    bad[offset_at(layout.chunk_count as usize)..][..4].copy_from_slice(&one_short.to_le_bytes());
    cases.push(("the last offset short of E", bad));
    let mut bad = payload.clone();
    bad.copy_within(position_at(0)..position_at(1), position_at(1));
    cases.push(("positions not increasing", bad));
    let mut bad = payload.clone();
    bad[position_at(31)..position_at(33)].rotate_left(2); // escapes 31 and 32 swapped: lane 0
    cases.push(("positions not increasing across a pass of 32", bad)); // of the second pass sees it
    let mut bad = payload.clone();
    bad[position_at(35) + 1] = 0x04; // position 1024 + 1015 % 256, value 1271: given code 0, so
    bad[at(layout.codes, 1271 / 2)] &= 0x0f; // only the range check can catch it
    cases.push(("a position past its chunk", bad));
    let mut bad = payload.clone();
    bad[at(layout.escape_exponents, 40)] = other;
    cases.push(("an escaped exponent in the codebook", bad));
    let mut bad = payload.clone();
    bad[at(layout.codes, 1160 / 2)] |= 1; // value 1160's code (even: the low nibble)
    cases.push(("an escaped value with a code", bad));
    let first_chunk_of = |tile: usize| tile * TILE / DEFAULT_CHUNK_SIZE as usize;
    let mut bad = payload.clone();
    bad[offset_at(first_chunk_of(500))..][..4].fill(0); // its list range spans ~140K escapes
    cases.push(("a far tile's offsets", bad));
    let mut bad = payload.clone();
    bad[offset_at(first_chunk_of(1000))..][..4].fill(0xff); // past E
    cases.push(("a far tile's offset past E", bad));
    for (what, bad) in cases {
        let cpu = decode(&bad).expect_err(what);
        assert_gpu_reports(&gpu, &bad, &cpu, what);
    }
}

/// Every single-byte corruption of the body that the CPU rejects, the GPU rejects with
/// the same error, and one the CPU accepts decodes to the CPU's words, on both decoders:
/// the fixture as it is (one escape per ~1550 values: the tile image) and the fixture
/// with sparse escapes (two adjacent ones every 10007 values: the search and its check
/// CTAs). Sampled: a few bytes of each section and of each padding gap; for the sparse
/// payload also unsorted positions and an escaped exponent in the codebook, which the
/// samples do not reach.
#[test]
fn gpu_decode_reports_the_cpu_error() {
    let Some(gpu) = gpu_or_skip("gpu_decode_reports_the_cpu_error") else { return };
    let (_, words) = fixture_words().remove(0);
    let codebook = Codebook::calibrate(&[&words]).unwrap();
    let common = codebook.exponent(0).unwrap();
    let sparse = with_escapes_at(&words, &codebook, |i| i % 10007 < 2);
    for (name, words, dense) in [("fixture", &words, true), ("sparse", &sparse, false)] {
        let payload = encode(words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
        let header = splitzip::PayloadHeader::parse(&payload).unwrap();
        let splitzip::Layout::Coded(layout) = header.layout else { panic!("{name}: payload is coded") };
        assert!(header.escape_count >= 2, "{name}: has escapes");
        assert_eq!(header.escape_count * 4096 >= words.len() as u64, dense, "{name}: the decoder it is for");
        let mut checked = 0;
        for (section, s) in layout.sections() {
            for k in [0u64, 1, s.len / 2, s.len.saturating_sub(1)] {
                if s.len == 0 || k >= s.len {
                    continue;
                }
                let mut bad = payload.clone();
                bad[(s.offset + k) as usize] ^= 0x5a;
                match decode(&bad) {
                    // e.g. a sign+mantissa byte: still a valid payload
                    Ok(cpu) => assert_eq!(decode_to_vec(&gpu, &bad).unwrap(), cpu, "{name}: {section}+{k}"),
                    Err(cpu) => {
                        assert_gpu_reports(&gpu, &bad, &cpu, &format!("{name}: {section}+{k}"));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 4, "{name}: only {checked} corruptions were rejected");
        if !dense {
            // Escapes 0 and 1 are values 0 and 1 (chunk 0): swapped, then escape 2 given a
            // codebook exponent.
            let position_at = |k: usize| (layout.escape_positions.offset as usize) + 2 * k;
            let mut unsorted = payload.clone();
            unsorted[position_at(0)..position_at(2)].rotate_left(2);
            let mut in_codebook = payload.clone();
            in_codebook[layout.escape_exponents.offset as usize + 2] = common;
            for (what, bad) in
                [("unsorted positions", unsorted), ("an escaped exponent in the codebook", in_codebook)]
            {
                let cpu = decode(&bad).expect_err(what);
                assert_gpu_reports(&gpu, &bad, &cpu, &format!("{name}: {what}"));
            }
        }
        // A nonzero byte in each alignment gap between sections (spec §3): the GPU's
        // padding check (one thread of the decode launch) must flag it as the CPU does.
        let sections = layout.sections();
        let mut gaps = 0;
        for pair in sections.windows(2) {
            let ((section, s), (_, next)) = (pair[0], pair[1]);
            let end = s.offset + s.len;
            for at in [end, next.offset.saturating_sub(1)] {
                if at < end || at >= next.offset {
                    continue; // no gap after this section
                }
                let mut bad = payload.clone();
                bad[at as usize] = 0x01;
                let cpu = decode(&bad).unwrap_err();
                assert!(
                    matches!(cpu, DecodeError::PaddingNotZero { .. }),
                    "{name}: gap after {section}: {cpu}"
                );
                assert_gpu_reports(&gpu, &bad, &cpu, &format!("{name}: gap after {section}+{at}"));
                gaps += 1;
            }
        }
        assert!(gaps >= 2, "{name}: the payload has only {gaps} padding bytes to corrupt");
        let truncated = &payload[..payload.len() - 1];
        kvcodec_testkit::assert_rejects!(
            decode_to_vec(&gpu, truncated),
            GpuError::Codec(splitzip::Error::Decode(DecodeError::Truncated { .. }))
        );
    }
}

#[test]
fn gpu_encode_replays_from_a_cuda_graph() {
    let Some(gpu) = gpu_or_skip("gpu_encode_replays_from_a_cuda_graph") else { return };
    let fixtures = fixture_words();
    let (words, codebook) = (&fixtures[0].1, Codebook::calibrate(&[&fixtures[1].1]).unwrap());
    for checksum in [false, true] {
        replay_encode(&gpu, words, &codebook, &EncodeOptions { checksum, ..EncodeOptions::default() });
    }
}

/// [`gpu_encode_replays_from_a_cuda_graph`] with one set of options.
fn replay_encode(gpu: &GpuContext, words: &[u16], codebook: &Codebook, options: &EncodeOptions) {
    use splitzip::gpu::{EncodeWorkspace, encode_device};
    let cpu = encode_with(words, codebook, options).unwrap();
    let d_words = gpu.upload(words).unwrap();
    let mut out = gpu.zeros::<u8>(splitzip::max_encoded_len(words.len(), DEFAULT_CHUNK_SIZE)).unwrap();
    let mut ws = EncodeWorkspace::new(gpu, words.len()).unwrap();
    let out = std::cell::RefCell::new(&mut out);
    let ws = std::cell::RefCell::new(&mut ws);
    kvcodec_testkit::replay_in_graph(
        gpu,
        3,
        || gpu.stream().memset_zeros(*out.borrow_mut()).unwrap(),
        || {
            let (mut out, mut ws) = (out.borrow_mut(), ws.borrow_mut());
            encode_device(gpu, &d_words.as_view(), codebook, options, &mut out.as_view_mut(), &mut ws)
                .unwrap();
        },
        |replay| {
            let len = ws.borrow().encoded_len(gpu).unwrap();
            let bytes = gpu.download(*out.borrow(), len).unwrap();
            assert!(bytes == cpu, "replay {replay}: graph-encoded payload differs from the CPU's");
        },
    );
}

/// Whole caches through [`SplitzipCodec`]: every encoder x decoder x backend pair, on
/// the fixtures and on shapes whose V half starts off a 16-byte boundary.
#[test]
fn whole_caches_round_trip_on_every_path() {
    let gpu = gpu_or_skip("whole_caches_round_trip_on_every_path");
    let fixtures = kvcodec_testkit::fixtures();
    let plain = SplitzipCodec::calibrate(&fixtures[1].1).unwrap();
    for codec in [plain, SplitzipCodec { checksum: true, ..plain }] {
        kvcodec_testkit::round_trip(&codec, gpu.as_ref(), &fixtures[0].0, &fixtures[0].1);
        for (l, h, d, t) in [(1, 1, 1, 1), (2, 1, 3, 5), (3, 2, 64, 17)] {
            let cache = kvcodec_testkit::kv_like(l, h, d, t, 5);
            let name = format!("L={l} H={h} D={d} T={t}, checksum {}", codec.checksum);
            kvcodec_testkit::round_trip(&codec, gpu.as_ref(), &name, &cache);
        }
    }
}

/// A GPU decode of a damaged cache encoding gives the CPU decoder's error.
#[test]
fn whole_cache_rejections_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("whole_cache_rejections_match_the_cpu") else { return };
    let fixtures = kvcodec_testkit::fixtures();
    let codec = SplitzipCodec::calibrate(&fixtures[1].1).unwrap();
    let cache = &fixtures[0].1;
    let bytes = bf16_field::CacheCodec::encode(&codec, cache).unwrap();
    let k_len = splitzip::PayloadHeader::parse(&bytes).unwrap().encoded_len() as usize;
    // The V payload's body: an escape offset entry made to decrease.
    let v = splitzip::PayloadHeader::parse(&bytes[k_len..]).unwrap();
    let splitzip::Layout::Coded(layout) = v.layout else { panic!("fixture payloads are coded") };
    let mut bad = bytes.clone();
    bad[k_len + layout.escape_offsets.offset as usize + 4] = 0xff;
    kvcodec_testkit::assert_gpu_rejects_like_cpu(&codec, &gpu, &bad, cache.shape(), "V escape offsets");
    kvcodec_testkit::assert_gpu_rejects_like_cpu(
        &codec,
        &gpu,
        &bytes[..bytes.len() - 1],
        cache.shape(),
        "truncated",
    );
    // A damaged K body and a V payload one byte short: the framing error first, both ways.
    let mut both = bytes.clone();
    let k = splitzip::PayloadHeader::parse(&bytes).unwrap();
    let splitzip::Layout::Coded(k_layout) = k.layout else { panic!("fixture payloads are coded") };
    both[k_layout.escape_offsets.offset as usize + 4] = 0xff;
    both.pop();
    kvcodec_testkit::assert_gpu_rejects_like_cpu(&codec, &gpu, &both, cache.shape(), "K body and V length");
    // With the checksum: a flipped V sign+mantissa bit.
    let checked = SplitzipCodec { checksum: true, ..codec };
    let mut bad = bf16_field::CacheCodec::encode(&checked, cache).unwrap();
    let v = splitzip::PayloadHeader::parse(&bad[k_len..]).unwrap();
    let splitzip::Layout::Coded(layout) = v.layout else { panic!("fixture payloads are coded") };
    bad[k_len + layout.sign_mantissa.offset as usize + 7] ^= 0x40;
    kvcodec_testkit::assert_gpu_rejects_like_cpu(&checked, &gpu, &bad, cache.shape(), "V checksum");
}

/// The GPU limit itself: `u32::MAX` values (8 GiB of words), where the last placement
/// warp's two tiles would end past 2^32 in 32-bit arithmetic; the real fixture tiled (a
/// coded payload) and random words (a raw one), byte for byte against the CPU.
#[test]
#[ignore = "8 GiB of values and ~40 GB of host and device memory: run with --ignored on a GPU"]
fn gpu_encode_at_the_value_limit() {
    let Some(gpu) = gpu_or_skip("gpu_encode_at_the_value_limit") else { return };
    let n = u32::MAX as usize;
    let fixtures = fixture_words();
    let codebook = Codebook::calibrate(&[&fixtures[1].1]).unwrap();
    let tiled: Vec<u16> = fixtures[0].1.iter().copied().cycle().take(n).collect();
    let random = Rng(11).words(n);
    for (name, words) in [("fixture tiled", tiled), ("random", random)] {
        let options = EncodeOptions::default();
        let cpu = encode_with(&words, &codebook, &options).unwrap();
        let gpu_bytes = encode_to_vec(&gpu, &words, &codebook, &options).unwrap();
        assert_same_payload(&gpu_bytes, &cpu, name);
    }
}
