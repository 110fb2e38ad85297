//! The pipelined decoder from host memory (`exans::gpu::HostDecoder`) against the CPU
//! reference: bit-exact on the real fixtures for chunk sizes below a record, around
//! the default and above the container, for one and several decode streams, from
//! page-locked and from pageable (staged) memory; a one-record container; and a
//! corrupted container gives the CPU decoder's exact error. Skips without a GPU unless
//! `KVCODEC_REQUIRE_GPU=1`.

mod common;

use bf16_field::KvCache;
use exans::gpu::host::DEFAULT_CHUNK_BYTES;
use exans::gpu::{DeviceIndex, GpuError, HostContainer, HostDecodeOptions, HostDecoder};
use exans::{container_info, decode_cache, encode_cache, inspect_record};
use kvcodec_gpu::GpuContext;
use kvcodec_testkit::gpu_or_skip;
use kvcodec_testkit::kv_like;

/// Where the container comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Copied into page-locked memory first: `HostContainer::Pinned`.
    Pinned,
    /// Ordinary memory through the staging slots: `HostContainer::Staged`.
    Staged,
}

/// A word no decoded fixture value equals at every position: an output the decoder
/// did not write stays visible.
const UNWRITTEN: u16 = 0x7fc1;

/// Decodes `container` through `decoder` into a fresh device cache and reads it back.
/// `index` is built by the caller (host validation happens there).
fn host_decode(
    gpu: &GpuContext,
    decoder: &mut HostDecoder,
    container: &[u8],
    index: &DeviceIndex,
    source: Source,
) -> Result<Vec<u16>, GpuError> {
    let mut out = gpu.upload(&vec![UNWRITTEN; index.values()])?;
    match source {
        Source::Pinned => {
            let pinned = gpu.pinned_copy(container)?;
            let bytes = pinned.as_slice()?;
            decoder.decode(gpu, HostContainer::Pinned(bytes), index, &mut out.as_view_mut())?.finish()?;
        }
        Source::Staged => {
            decoder.decode(gpu, HostContainer::Staged(container), index, &mut out.as_view_mut())?.finish()?
        }
    }
    Ok(gpu.download(&out, index.values())?)
}

/// Chunks of 600,000 bytes from both sources, so that a fixture's container is several
/// chunks and a bad record is decoded by a chunk of its own, after others.
fn small_chunks() -> HostDecodeOptions {
    HostDecodeOptions { chunk_bytes: 600_000, streams: 2, staging_chunk_bytes: 600_000 }
}

/// Host decodes of `cache`'s container with every chunk size and stream count given, from
/// both sources, each compared with the original; each decoder decodes twice (reuse).
fn check_host_round_trip(
    gpu: &GpuContext,
    name: &str,
    cache: &KvCache,
    block_tokens: usize,
    chunks: &[usize],
) {
    let container = encode_cache(cache, block_tokens).unwrap();
    assert!(decode_cache(&container).unwrap() == *cache, "{name}: CPU round trip");
    let want = cache.concat_words();
    let index = DeviceIndex::new(gpu, &container).unwrap();
    for &chunk_bytes in chunks {
        for streams in [1, 2, 4] {
            let options = HostDecodeOptions { chunk_bytes, streams, staging_chunk_bytes: chunk_bytes };
            let mut decoder = HostDecoder::new(gpu, options).unwrap();
            for source in [Source::Pinned, Source::Staged, Source::Pinned] {
                let what = format!("{name}, B = {block_tokens}, {options:?}, {source:?}");
                let got = host_decode(gpu, &mut decoder, &container, &index, source)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                if got != want {
                    let first = want.iter().zip(&got).position(|(a, b)| a != b);
                    panic!("{what}: differs from the original, first at value {first:?}");
                }
            }
        }
    }
}

#[test]
fn host_decode_matches_cpu_on_the_fixtures() {
    let Some(gpu) = gpu_or_skip("host_decode_matches_cpu_on_the_fixtures") else { return };
    let caches = kvcodec_testkit::fixtures();
    for (name, cache) in caches {
        for block_tokens in [16, 13] {
            let container = encode_cache(&cache, block_tokens).unwrap();
            let info = container_info(&container).unwrap();
            let smallest_record = info.offsets.windows(2).map(|w| w[1] - w[0]).min().unwrap();
            // Below every record (one chunk a record), 1 byte, about three records,
            // the default, and larger than the container (one chunk).
            let chunks =
                [smallest_record / 2, 1, 3 * smallest_record, DEFAULT_CHUNK_BYTES, 2 * container.len()];
            check_host_round_trip(&gpu, &name, &cache, block_tokens, &chunks);
        }
    }
}

#[test]
fn host_decode_of_one_record_and_small_caches() {
    let Some(gpu) = gpu_or_skip("host_decode_of_one_record_and_small_caches") else { return };
    // One record (B = T), coded; then a partial trailing block and many tiny records.
    let one = kv_like(2, 2, 64, 16, 3);
    let container = encode_cache(&one, 16).unwrap();
    assert_eq!(container_info(&container).unwrap().blocks(), 1);
    check_host_round_trip(&gpu, "one record", &one, 16, &[1, 4096, 1 << 30]);
    check_host_round_trip(&gpu, "partial trailing block", &kv_like(2, 2, 64, 37, 5), 16, &[1, 6000, 1 << 20]);
    check_host_round_trip(&gpu, "many tiny records", &kv_like(4, 3, 32, 333, 77), 1, &[1, 700, 20_000]);
}

#[test]
fn host_decode_refuses_bad_options_and_buffers() {
    let Some(gpu) = gpu_or_skip("host_decode_refuses_bad_options_and_buffers") else { return };
    let bad = [
        (0, 2, 1, "chunk_bytes"),
        (1, 0, 1, "streams"),
        (1, 9, 1, "streams"),
        (1, 2, 0, "staging_chunk_bytes"),
    ];
    for (chunk_bytes, streams, staging_chunk_bytes, what) in bad {
        let options = HostDecodeOptions { chunk_bytes, streams, staging_chunk_bytes };
        let err = HostDecoder::new(&gpu, options).unwrap_err();
        assert!(
            matches!(err, GpuError::Gpu(kvcodec_gpu::Error::InvalidArgument { what: w, .. }) if w == what),
            "{err}"
        );
    }
    let cache = kv_like(3, 2, 64, 50, 21);
    let container = encode_cache(&cache, 16).unwrap();
    let index = DeviceIndex::new(&gpu, &container).unwrap();
    let mut decoder = HostDecoder::new(&gpu, HostDecodeOptions::default()).unwrap();
    let mut out = gpu.zeros::<u16>(index.values()).unwrap();
    let short = &container[..container.len() - 16];
    let err = decoder.decode(&gpu, HostContainer::Staged(short), &index, &mut out.as_view_mut()).unwrap_err();
    assert!(matches!(err, GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "container", .. })), "{err}");
    let mut small = out.slice_mut(..index.values() - 1);
    let err = decoder.decode(&gpu, HostContainer::Pinned(&container), &index, &mut small).unwrap_err();
    assert!(matches!(err, GpuError::Gpu(kvcodec_gpu::Error::Buffer { what: "out", .. })), "{err}");
}

/// `bad` through host validation and the host decoder: the same outcome as the CPU
/// decoder (the same cache, or the same error). True if the kernel found it.
fn check_same_outcome(gpu: &GpuContext, decoder: &mut HostDecoder, what: &str, bad: &[u8]) -> bool {
    let cpu = decode_cache(bad);
    let index = match DeviceIndex::new(gpu, bad) {
        Ok(index) => index,
        Err(GpuError::Codec(got)) => {
            assert_eq!(Err(got), cpu.map(|_| ()), "{what}: host validation");
            return false;
        }
        Err(e) => panic!("{what}: {e}"),
    };
    for source in [Source::Pinned, Source::Staged] {
        match (&cpu, host_decode(gpu, decoder, bad, &index, source)) {
            (Ok(cache), Ok(got)) => {
                assert!(cache.concat_words() == got, "{what}, {source:?}: outputs differ")
            }
            (Err(cpu), Err(GpuError::Codec(got))) => assert_eq!(&got, cpu, "{what}, {source:?}"),
            (cpu, got) => panic!("{what}, {source:?}: CPU {:?} vs GPU {:?}", cpu.as_ref().err(), got.err()),
        }
    }
    cpu.is_err()
}

/// Containers with checksums: host decodes round-trip, and a flipped sign+mantissa bit
/// of the middle record gives the CPU's `ChecksumMismatch` from every source.
#[test]
fn host_decode_verifies_checksums() {
    let Some(gpu) = gpu_or_skip("host_decode_verifies_checksums") else { return };
    let (_, cache) = kvcodec_testkit::fixtures().remove(0);
    let options = exans::EncodeOptions { checksum: true, ..Default::default() };
    let container = exans::encode_cache_with(&cache, 16, &options).unwrap();
    let index = DeviceIndex::new(&gpu, &container).unwrap();
    let mut decoder = HostDecoder::new(&gpu, small_chunks()).unwrap();
    for source in [Source::Pinned, Source::Staged] {
        let got = host_decode(&gpu, &mut decoder, &container, &index, source).unwrap();
        assert!(got == cache.concat_words(), "{source:?}: checksummed container");
    }
    let info = container_info(&container).unwrap();
    let middle = info.blocks() / 2;
    let mut bad = container.clone();
    bad[info.offsets[middle + 1] - 100] ^= 0x01;
    assert!(check_same_outcome(&gpu, &mut decoder, "middle record's sign+mantissa", &bad));
    assert!(matches!(
        decode_cache(&bad),
        Err(exans::Error::InBlock { source, .. }) if matches!(*source, exans::Error::ChecksumMismatch { .. })
    ));
    // The same decoder on a smaller checksummed container (fewer records than its sums
    // hold), then on one without checksums, then on a larger one again.
    let small = kv_like(2, 2, 64, 37, 5);
    let small_container = exans::encode_cache_with(&small, 16, &options).unwrap();
    for (what, container, want) in [
        ("fewer records", small_container, small.concat_words()),
        ("no checksums", encode_cache(&small, 16).unwrap(), small.concat_words()),
        ("more records", container.clone(), cache.concat_words()),
    ] {
        let index = DeviceIndex::new(&gpu, &container).unwrap();
        let got = host_decode(&gpu, &mut decoder, &container, &index, Source::Pinned).unwrap();
        assert!(got == want, "{what}");
    }
}

#[test]
fn host_decode_reports_the_cpu_error() {
    let Some(gpu) = gpu_or_skip("host_decode_reports_the_cpu_error") else { return };
    let (_, cache) = kvcodec_testkit::fixtures().remove(0);
    let container = encode_cache(&cache, 16).unwrap();
    let info = container_info(&container).unwrap();
    let options = small_chunks();
    let mut decoder = HostDecoder::new(&gpu, options).unwrap();
    let mut kernel_found = 0;
    for block in [0, info.blocks() / 2, info.blocks() - 1] {
        let start = info.offsets[block];
        let record = inspect_record(info.record(&container, block)).unwrap();
        assert!(!record.raw);
        let [_, centers, model, _, words, _] = record.section_bytes;
        let words_at = 48 + centers + model + 1056;
        let states = 48 + centers + model + 32;
        for (spot, at) in [("word 0", words_at), ("word middle", words_at + words / 2), ("state", states + 8)]
        {
            for flip in [0x01u8, 0x5a, 0x80] {
                let mut bad = container.clone();
                bad[start + at] ^= flip;
                let what = format!("block {block} {spot} ^ {flip:#x}");
                kernel_found += check_same_outcome(&gpu, &mut decoder, &what, &bad) as usize;
            }
        }
        // The decoder is still good after a failed decode.
        let got = host_decode(
            &gpu,
            &mut decoder,
            &container,
            &DeviceIndex::new(&gpu, &container).unwrap(),
            Source::Pinned,
        );
        assert!(got.unwrap() == cache.concat_words(), "block {block}: decode after an error");
    }
    assert!(kernel_found >= 5, "only {kernel_found} corruptions reached the kernel");
    // Host validation still rejects a truncated container before anything is launched.
    let truncated = &container[..container.len() - 1];
    kvcodec_testkit::assert_rejects!(
        DeviceIndex::new(&gpu, truncated),
        GpuError::Codec(exans::Error::Truncated { .. })
    );
}
