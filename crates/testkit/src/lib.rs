//! Test support for kvcodec's crates, used only as a dev-dependency (rust-analyzer keeps
//! such helpers in an unpublished `test-utils` crate, out of every library's API).
//!
//! * [`gpu_or_skip`]: the GPU test gate;
//! * [`fixtures`]: the real KV fixtures;
//! * [`Rng`], [`bf16`], [`cache_from`], [`kv_like`], [`special_words`]: generators;
//! * [`round_trip`] and [`assert_gpu_rejects_like_cpu`]: every encoder x decoder x
//!   backend pair of a codec, and its rejections, against the CPU reference;
//! * [`corrupt_input!`] and [`assert_rejects!`]: hand-built corrupt inputs, each
//!   asserting its exact error;
//! * [`hexdump`] and [`assert_doc_block`]: worked examples in the format specs, kept
//!   equal to the encoder's output (`KVCODEC_BLESS=1` rewrites them);
//! * [`replay_in_graph`]: capture a GPU call in a CUDA graph and replay it;
//! * [`pool`]: a pool-managed cache driven through a scripted serving run (the pooled
//!   decode-attention tests).

use std::path::{Path, PathBuf};

pub mod pool;

use bf16_field::{KvCache, KvShape};
use kvcodec_gpu::{GpuCacheCodec, GpuContext};

/// `Some(gpu)` on device 0 when a GPU is usable. Without one it prints
/// "`test`: skipped: no GPU (reason)" and returns `None`, unless `KVCODEC_REQUIRE_GPU=1`,
/// which turns the skip into a panic so a run on a GPU machine cannot pass silently.
///
/// # Panics
/// With `KVCODEC_REQUIRE_GPU=1` and no usable GPU.
pub fn gpu_or_skip(test: &str) -> Option<GpuContext> {
    match GpuContext::new(0) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            if std::env::var("KVCODEC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("{test}: KVCODEC_REQUIRE_GPU=1 but no GPU: {e}");
            }
            eprintln!("{test}: skipped: no GPU ({e})");
            None
        }
    }
}

/// The fixture folder: `KVCODEC_FIXTURES` if set (a GPU machine running test binaries
/// built elsewhere sets it), else the workspace's `fixtures/`.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("KVCODEC_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

/// The `*.safetensors` files of [`fixtures_dir`], sorted.
pub fn fixture_paths() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "safetensors"));
    paths.sort();
    paths
}

/// The two real fixtures (SmolLM2-135M over code and over prose) as `(file stem, cache)`,
/// sorted by name.
///
/// # Panics
/// Unless exactly two fixtures read as KV caches.
pub fn fixtures() -> Vec<(String, KvCache)> {
    let paths = fixture_paths();
    assert_eq!(
        paths.len(),
        2,
        "expected the two SmolLM2 fixtures in {} (run `cargo xtask fixtures`)",
        fixtures_dir().display()
    );
    paths
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            let cache = bf16_field::io::read_kv_cache(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, cache)
        })
        .collect()
}

/// xorshift32: deterministic, dependency-free pseudo-random numbers.
#[derive(Clone, Debug)]
pub struct Rng(pub u32);

impl Rng {
    /// The next 32 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u32 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    /// `n` random BF16 words (every bit pattern equally likely).
    pub fn words(&mut self, n: usize) -> Vec<u16> {
        (0..n).map(|_| self.next() as u16).collect()
    }

    /// Roughly normal (the sum of four uniforms), standard deviation about `sigma`.
    pub fn normal(&mut self, sigma: f32) -> f32 {
        let s: f32 = (0..4).map(|_| (self.next() >> 8) as f32 / (1 << 24) as f32).sum();
        (s - 2.0) * 1.732 * sigma
    }
}

/// The BF16 word nearest to `x`.
pub fn bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// The `f32` value of each BF16 word (exact: every BF16 value is an `f32`).
pub fn floats(words: &[u16]) -> Vec<f32> {
    words.iter().map(|&w| half::bf16::from_bits(w).to_f32()).collect()
}

/// Words of every special class, repeated: +-0, +-Inf, NaNs, subnormals, the largest
/// finite values, exponent 0xFF with payload.
pub fn special_words() -> Vec<u16> {
    [0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0001, 0x807f, 0x7f7f, 0xff7f, 0xffff].to_vec()
}

/// A cache whose every tensor is filled by `word(layer, kind, index)` (kind 0 = K, 1 = V,
/// index into the `[T, H, D]` tensor).
///
/// # Panics
/// On a zero dimension.
pub fn cache_from(
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    tokens: usize,
    mut word: impl FnMut(usize, usize, usize) -> u16,
) -> KvCache {
    let shape = KvShape::new(layers, kv_heads, head_dim, tokens).expect("a valid shape");
    let n = shape.values_per_tensor();
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for l in 0..layers {
        keys.push((0..n).map(|i| word(l, 0, i)).collect());
        values.push((0..n).map(|i| word(l, 1, i)).collect());
    }
    KvCache::new(shape, keys, values).expect("lengths match the shape")
}

/// KV-like synthetic data: per-(layer, kind, channel) scales spanning a few octaves and
/// values roughly normal, so exponents concentrate around each channel's scale as in a
/// real cache.
pub fn kv_like(layers: usize, kv_heads: usize, head_dim: usize, tokens: usize, seed: u32) -> KvCache {
    let mut rng = Rng(seed | 1);
    let channels = kv_heads * head_dim;
    let scales: Vec<f32> = (0..2 * layers * channels)
        .map(|_| 2f32.powf((rng.next() % 1000) as f32 / 1000.0 * 5.0 - 3.0))
        .collect();
    cache_from(layers, kv_heads, head_dim, tokens, |l, k, i| {
        let sigma = scales[(2 * l + k) * channels + i % channels];
        bf16(rng.normal(sigma))
    })
}

/// Every encoder x decoder x backend pair of `codec` on `cache`: CPU encode -> CPU
/// decode; with a GPU, GPU encode must give the CPU's bytes, the GPU decoder must
/// decode the CPU's bytes, and the CPU decoder the GPU's. Returns the encoded bytes.
///
/// # Panics
/// On any error or difference, naming `what`.
pub fn round_trip<C: GpuCacheCodec>(
    codec: &C,
    gpu: Option<&GpuContext>,
    what: &str,
    cache: &KvCache,
) -> Vec<u8>
where
    C::Error: std::fmt::Debug,
{
    let name = codec.name();
    let shape = cache.shape();
    let bytes = codec.encode(cache).unwrap_or_else(|e| panic!("{name} {what}: CPU encode: {e}"));
    let back = codec.decode(&bytes, shape).unwrap_or_else(|e| panic!("{name} {what}: CPU decode: {e}"));
    assert!(back == *cache, "{name} {what}: CPU round trip differs");
    if let Some(gpu) = gpu {
        let gpu_bytes =
            codec.gpu_encode_cache(gpu, cache).unwrap_or_else(|e| panic!("{name} {what}: GPU encode: {e}"));
        if gpu_bytes != bytes {
            let first = gpu_bytes.iter().zip(&bytes).position(|(a, b)| a != b);
            panic!(
                "{name} {what}: GPU bytes differ from the CPU's: {} vs {} bytes, first difference at {first:?}",
                gpu_bytes.len(),
                bytes.len()
            );
        }
        let gpu_back = codec
            .gpu_decode_cache(gpu, &bytes, shape)
            .unwrap_or_else(|e| panic!("{name} {what}: GPU decode: {e}"));
        assert!(gpu_back == *cache, "{name} {what}: GPU decode of the CPU's bytes differs");
        let cpu_back = codec.decode(&gpu_bytes, shape).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
        assert!(cpu_back == *cache, "{name} {what}: CPU decode of the GPU's bytes differs");
    }
    bytes
}

/// Asserts that the GPU decoder rejects `bad` with exactly the CPU decoder's error, and
/// returns that error.
///
/// # Panics
/// If the CPU decoder accepts `bad`, or the GPU's error differs.
pub fn assert_gpu_rejects_like_cpu<C: GpuCacheCodec>(
    codec: &C,
    gpu: &GpuContext,
    bad: &[u8],
    shape: KvShape,
    what: &str,
) -> C::Error
where
    C::Error: PartialEq + std::fmt::Debug,
{
    let cpu = codec.decode(bad, shape).map(|_| ()).expect_err(what);
    match codec.gpu_decode_cache(gpu, bad, shape) {
        Err(kvcodec_gpu::GpuError::Codec(e)) if e == cpu => cpu,
        other => panic!("{what}: the CPU says {cpu:?}, the GPU {:?}", other.map(|_| ())),
    }
}

/// Asserts that `result` is an `Err` matching `pattern` (with an optional `if` guard),
/// printing what it was otherwise:
/// `assert_rejects!(decode(&bad), Error::Truncated { needed: 48, .. })`.
#[macro_export]
macro_rules! assert_rejects {
    ($result:expr, $pattern:pat $(if $guard:expr)? $(,)?) => {
        match $result {
            Err($pattern) $(if $guard)? => {}
            other => panic!(
                "expected Err({}), got {:?} ({}:{})",
                stringify!($pattern),
                other.map(|_| ()),
                file!(),
                line!()
            ),
        }
    };
}

/// One test per hand-built corrupt input: `base` (an expression giving the valid
/// `Vec<u8>`) is copied, `mutate` (a `fn(&mut Vec<u8>)`) corrupts the copy, and every
/// listed decoder (each callable on `&[u8]`, returning a `Result`) must fail with exactly
/// `expected` (compared with `==`; the expression is evaluated once per decoder).
///
/// ```ignore
/// kvcodec_testkit::corrupt_input!(bad_magic: example_record() => |r| r[0] = b'X';
///     exans::decode_block => Error::BadMagic { found: *b"XVXA", expected: "KVXA" });
/// ```
#[macro_export]
macro_rules! corrupt_input {
    ($(#[$meta:meta])* $name:ident: $base:expr => $mutate:expr; $($decode:expr),+ => $expected:expr) => {
        #[test]
        $(#[$meta])*
        fn $name() {
            let mut bytes: Vec<u8> = $base;
            let mutate: fn(&mut Vec<u8>) = $mutate;
            mutate(&mut bytes);
            $(
                let decoded = ($decode)(&bytes[..]).map(|_| ());
                assert_eq!(decoded, Err($expected), "{} on {}", stringify!($decode), stringify!($name));
            )+
        }
    };
}

/// `hexdump -C`-style rendering: 16 bytes a line, the offset in hex, runs of identical
/// full lines collapsed to `*`, the length on the last line.
pub fn hexdump(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in bytes.chunks(16).enumerate() {
        if previous == Some(line) && line.len() == 16 {
            if !starred {
                out.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        previous = Some(line);
        out.push_str(&format!("{:08x} ", i * 16));
        for (j, b) in line.iter().enumerate() {
            out.push_str(if j == 8 { "  " } else { " " });
            out.push_str(&format!("{b:02x}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:08x}\n", bytes.len()));
    out
}

/// The byte range of the body of the fenced block that follows `<!-- example:NAME -->`.
fn doc_block(doc: &str, name: &str) -> std::ops::Range<usize> {
    let marker = format!("<!-- example:{name} -->");
    let at = doc.find(&marker).unwrap_or_else(|| panic!("marker {marker} missing")) + marker.len();
    let fence = at + doc[at..].find("```").expect("a fenced block after the marker");
    let body = fence + doc[fence..].find('\n').expect("fence line") + 1;
    let end = body + doc[body..].find("```").expect("closing fence");
    body..end
}

/// Asserts that the fenced block after `<!-- example:NAME -->` in the document `doc`
/// (a path) reads `expected`. With `KVCODEC_BLESS=1` it rewrites the block instead
/// (after an intended format change; review the diff).
///
/// # Panics
/// When the block differs and blessing is off, or the marker is missing.
pub fn assert_doc_block(doc: &Path, name: &str, expected: &str) {
    // Tests run in parallel; blessing rewrites the file, so read and write under a lock.
    static DOC_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = DOC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let range = doc_block(&text, name);
    if text[range.clone()] == *expected {
        return;
    }
    if std::env::var_os("KVCODEC_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(doc, format!("{}{expected}{}", &text[..range.start], &text[range.end..]))
            .unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        return;
    }
    panic!(
        "{} block `{name}` is stale (rerun with KVCODEC_BLESS=1 to rewrite it); it should read:\n{expected}",
        doc.display()
    );
}

/// The workspace's `docs/formats/<file>`: under `KVCODEC_WORKSPACE` if set (a GPU
/// bundle mirrors the specs there), else in the workspace this crate was built in.
pub fn format_spec(file: &str) -> PathBuf {
    let root = std::env::var_os("KVCODEC_WORKSPACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    root.join("docs/formats").join(file)
}

/// Fills a device buffer with `byte` on `gpu`'s stream: a graph-replay `reset` that a
/// replay writing nothing cannot pass (zeros would be the right value of many statuses).
///
/// # Panics
/// If the copy fails.
pub fn fill_device(gpu: &GpuContext, buffer: &mut cudarc::driver::CudaSlice<u8>, byte: u8) {
    let fill = vec![byte; buffer.len()];
    gpu.stream().memcpy_htod(&fill, buffer).expect("fill a device buffer");
}

/// Runs `call` once on `gpu`'s stream (loading modules and warming allocations, which
/// cannot be captured), then captures a second call in a CUDA graph and replays it
/// `replays` times, running `check(replay)` after each replay. `reset` runs before the
/// capture and before each replay (to clear outputs, so a replay must write them).
///
/// # Panics
/// If capture, instantiation, a replay or `call` fails.
pub fn replay_in_graph(
    gpu: &GpuContext,
    replays: usize,
    mut reset: impl FnMut(),
    mut call: impl FnMut(),
    mut check: impl FnMut(usize),
) {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    call();
    reset();
    let stream = gpu.stream();
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).expect("begin capture");
    call();
    let graph =
        stream.end_capture(CUgraphInstantiate_flags(0)).expect("end capture").expect("a captured graph");
    for replay in 0..replays {
        reset();
        graph.launch().expect("graph launch");
        check(replay);
    }
}

/// Captures `codec`'s device encoding of a cache in a CUDA graph and replays it 4 times,
/// the two caches (of one shape) taking turns in the captured input buffer: each replay
/// must leave the CPU encoder's bytes of the cache then in the buffer, so a replay that
/// read or wrote nothing fails (it would leave the other cache's container behind).
///
/// # Panics
/// On any error, on caches of two shapes, or when a replay's bytes differ.
pub fn assert_cache_encoding_replays<C: GpuCacheCodec>(gpu: &GpuContext, codec: &C, caches: &[KvCache; 2])
where
    C::Error: std::fmt::Debug,
{
    use std::cell::{Cell, RefCell};
    let shape = caches[0].shape();
    assert_eq!(shape, caches[1].shape(), "the caches of a replay test share one shape");
    let name = codec.name();
    let expected: Vec<Vec<u8>> = caches.iter().map(|c| codec.encode(c).unwrap()).collect();
    let inputs: Vec<Vec<u16>> = caches.iter().map(|c| c.words_in(codec.word_order())).collect();
    let words = RefCell::new(gpu.upload(&inputs[0]).unwrap());
    let n = shape.total_values();
    let encoder = RefCell::new(codec.device_encoder(gpu, shape).unwrap());
    let turn = Cell::new(0);
    replay_in_graph(
        gpu,
        4,
        || {
            turn.set(turn.get() + 1);
            gpu.stream().memcpy_htod(&inputs[turn.get() % 2], &mut *words.borrow_mut()).unwrap();
        },
        || codec.encode_device(gpu, &mut encoder.borrow_mut(), &words.borrow().slice(..n)).unwrap(),
        |replay| {
            let bytes = codec.encoded_bytes(gpu, &encoder.borrow()).unwrap();
            assert!(bytes == expected[turn.get() % 2], "{name} replay {replay}");
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexdump_collapses_repeated_lines_and_ends_with_the_length() {
        let mut bytes: Vec<u8> = (0..20).collect();
        bytes.extend([0u8; 48]);
        let dump = hexdump(&bytes);
        assert_eq!(
            dump,
            "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f\n\
             00000010  10 11 12 13 00 00 00 00  00 00 00 00 00 00 00 00\n\
             00000020  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00\n\
             *\n\
             00000040  00 00 00 00\n\
             00000044\n"
        );
    }

    #[test]
    fn doc_blocks_are_found_after_their_marker() {
        let doc =
            "intro\n<!-- example:a -->\n\n```text\nfirst\n```\n<!-- example:b -->\n```\nsecond\nline\n```\n";
        assert_eq!(&doc[doc_block(doc, "a")], "first\n");
        assert_eq!(&doc[doc_block(doc, "b")], "second\nline\n");
    }

    #[test]
    #[should_panic(expected = "marker <!-- example:c --> missing")]
    fn a_missing_doc_block_is_reported() {
        doc_block("no markers here", "c");
    }

    fn decode_first_byte(bytes: &[u8]) -> Result<u8, &'static str> {
        match bytes.first() {
            Some(0) => Err("zero"),
            Some(&b) => Ok(b),
            None => Err("empty"),
        }
    }

    corrupt_input!(corrupt_input_checks_the_error: vec![1u8, 2] => |b| b[0] = 0; decode_first_byte => "zero");

    corrupt_input!(
        #[should_panic(expected = "decode_first_byte on corrupt_input_fails_on_another_error")]
        corrupt_input_fails_on_another_error: vec![1u8] => |b| b.clear(); decode_first_byte => "zero"
    );

    #[test]
    fn assert_rejects_matches_patterns_and_guards() {
        assert_rejects!(decode_first_byte(&[0]), "zero");
        let other = std::panic::catch_unwind(|| assert_rejects!(decode_first_byte(&[3]), "zero"));
        assert!(other.is_err(), "Ok must fail assert_rejects!");
    }
}
