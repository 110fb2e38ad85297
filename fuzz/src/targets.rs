//! The fuzz target bodies, one per decoder stage per codec plus one round trip per codec.
//!
//! Each takes arbitrary bytes. A decode target asserts only what the decoders promise
//! (docs/ARCHITECTURE.md, "Architecture invariants"): no panic, no unbounded loop, `Ok`
//! or a typed error (whose `Display` is exercised too). Where a decode succeeds it also
//! checks what the format promises cheaply: a canonical form re-encodes to the same bytes
//! (a SplitZip header, a coded SplitZip payload), and otherwise re-encoding the decoded
//! values decodes to them again. A round-trip target builds valid encoder input from the
//! bytes and asserts `decode(encode(x)) == x`.
//!
//! Everything goes through the crates' public APIs only.

use bf16_field::{CacheCodec, KvCache, KvShape, WordOrder};
use exans::{EncodeOptions, ExansCodec, Model, RawPolicy};
use gaac::{Bases, GaacCodec};
use splitzip::{Codebook, PayloadHeader, SplitzipCodec};
use zipfusion::{PageShape, Variant, ZipfusionCodec};

/// A target: its name (the libFuzzer binary's and the seed folder's) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order the stable driver runs them.
pub const TARGETS: &[Target] = &[
    ("splitzip_header", splitzip_header),
    ("splitzip_payload", splitzip_payload),
    ("splitzip_codebook_json", splitzip_codebook_json),
    ("splitzip_cache", splitzip_cache),
    ("splitzip_roundtrip", splitzip_roundtrip),
    ("exans_record_parse", exans_record_parse),
    ("exans_record_decode", exans_record_decode),
    ("exans_container", exans_container),
    ("exans_model_table", exans_model_table),
    ("exans_quantize", exans_quantize),
    ("exans_roundtrip", exans_roundtrip),
    ("zipfusion_page", zipfusion_page),
    ("zipfusion_cache", zipfusion_cache),
    ("zipfusion_roundtrip", zipfusion_roundtrip),
    ("gaac_cache", gaac_cache),
    ("gaac_bases_json", gaac_bases_json),
    ("gaac_roundtrip", gaac_roundtrip),
    ("field_split_merge", field_split_merge),
    ("field_safetensors", field_safetensors),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|(n, _)| *n == name)
}

/// The little-endian `u16` words of `bytes` (an odd last byte is dropped).
pub fn words_of(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
}

/// A typed error must print: its `Display` may not panic either.
fn shown(error: &dyn std::error::Error) {
    let text = error.to_string();
    assert!(!text.is_empty(), "an error prints something");
}

/// A decoder's result and its parser's on the same bytes: both values when the decoder
/// accepts (then the parser must too), else `None` after showing each error.
fn decoded_and_parsed<T, U, E, F>(decoded: Result<T, E>, parsed: Result<U, F>) -> Option<(T, U)>
where
    E: std::error::Error,
    F: std::error::Error,
{
    match (decoded, parsed) {
        (Ok(value), Ok(layout)) => Some((value, layout)),
        (Ok(_), Err(e)) => panic!("the decoder accepts what its parser rejects: {e}"),
        (Err(e), parsed) => {
            shown(&e);
            if let Err(e) = parsed {
                shown(&e);
            }
            None
        }
    }
}

/// The four bytes a whole-cache target reads its shape from, and the shape they give:
/// L in 1..=4, H in 1..=4, D in 1..=64, T in 1..=32 (at most 65,536 words, so a hostile
/// shape costs at most 128 KiB of output buffer).
pub fn cache_shape(prefix: [u8; 4]) -> KvShape {
    let [l, h, d, t] = prefix;
    KvShape::new(1 + l as usize % 4, 1 + h as usize % 4, 1 + d as usize % 64, 1 + t as usize % 32)
        .expect("small dimensions")
}

/// The inverse of [`cache_shape`] for a shape in its range.
pub fn cache_shape_prefix(shape: KvShape) -> [u8; 4] {
    [shape.layers - 1, shape.kv_heads - 1, shape.head_dim - 1, shape.tokens - 1].map(|v| v as u8)
}

// ---------------------------------------------------------------------------------------
// SplitZip

/// `PayloadHeader::parse` on arbitrary bytes. An accepted header is canonical: it
/// re-serializes to its 128 bytes, and its summary prints.
pub fn splitzip_header(data: &[u8]) {
    match PayloadHeader::parse(data) {
        Ok(header) => {
            // to_bytes writes the current version; a version 1 header becomes that.
            let bytes = header.to_bytes();
            let mut current = header;
            current.version = splitzip::format::VERSION;
            if header.version == splitzip::format::VERSION {
                assert_eq!(&bytes[..], &data[..splitzip::HEADER_LEN], "an accepted header is canonical");
            }
            assert_eq!(PayloadHeader::parse(&bytes), Ok(current));
            assert!(!header.summary().is_empty());
            assert!(header.encoded_len() >= splitzip::HEADER_LEN as u64);
        }
        Err(e) => shown(&e),
    }
}

/// `splitzip::decode` / `decode_into` of one payload. An accepted coded payload of the
/// current version is canonical (spec §5): re-encoding its values with its codebook,
/// chunk size and checksum option gives the same bytes; an accepted raw or version 1
/// payload's values round-trip.
pub fn splitzip_payload(data: &[u8]) {
    let words = match splitzip::decode(data) {
        Ok(words) => words,
        Err(e) => {
            shown(&e);
            // decode_into runs the same checks: the same error with a buffer of n values.
            if let Ok(header) = PayloadHeader::parse(data)
                && header.value_count <= 1 << 16
            {
                let mut out = vec![0u16; header.value_count as usize];
                assert_eq!(splitzip::decode_into(data, &mut out), Err(e));
            }
            return;
        }
    };
    let header = PayloadHeader::parse(data).expect("a decoded payload has a valid header");
    assert_eq!(words.len() as u64, header.value_count);
    // decode_into writes exactly n values and leaves the rest alone.
    let mut out = vec![0x5a5a_u16; words.len() + 1];
    assert_eq!(splitzip::decode_into(data, &mut out), Ok(words.len()));
    assert_eq!(&out[..words.len()], &words[..]);
    assert_eq!(out[words.len()], 0x5a5a);
    if !words.is_empty() {
        let mut short = vec![0u16; words.len() - 1];
        assert!(splitzip::decode_into(data, &mut short).is_err(), "a short buffer is an error");
    }
    let options =
        splitzip::EncodeOptions { chunk_size: header.chunk_size, checksum: header.checksum.is_some() };
    let again = splitzip::encode_with(&words, &header.codebook, &options).expect("valid header arguments");
    if header.is_raw() || header.version != splitzip::format::VERSION {
        assert_eq!(splitzip::decode(&again).expect("encoder output decodes"), words);
    } else {
        assert!(again == data, "an accepted coded payload re-encodes to the same bytes");
    }
}

/// `Codebook::from_json` and `SplitzipCodec::from_json` on arbitrary text (the files
/// `cargo xtask calibrate` writes and `SplitzipCodec::load` reads). What parses
/// serializes and parses back to itself.
pub fn splitzip_codebook_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Codebook::from_json(text) {
        Ok(codebook) => {
            assert_eq!(Codebook::from_json(&codebook.to_json()).expect("own output"), codebook);
            let mut seen = [false; 256];
            for e in codebook.exponents() {
                assert!(!std::mem::replace(&mut seen[e as usize], true), "codebook entries are distinct");
            }
        }
        Err(e) => shown(&e),
    }
    match SplitzipCodec::from_json(text) {
        Ok(codec) => {
            assert_eq!(SplitzipCodec::from_json(&codec.to_json()).expect("own output"), codec);
            let _ = splitzip::max_encoded_len(1000, codec.chunk_size);
        }
        Err(e) => shown(&e),
    }
}

/// `SplitzipCodec`'s `CacheCodec::decode` of a whole cache (spec §9): the first four
/// bytes give the shape the caller expects ([`cache_shape`]), the rest is the encoding.
/// An accepted cache re-encodes to the same bytes when both payloads are coded with one
/// chunk size; otherwise its words round-trip.
pub fn splitzip_cache(data: &[u8]) {
    let Some((prefix, encoded)) = data.split_first_chunk::<4>() else { return };
    let shape = cache_shape(*prefix);
    let probe = SplitzipCodec {
        k_codebook: Codebook::new(std::array::from_fn(|i| i as u8)).expect("distinct"),
        v_codebook: Codebook::new(std::array::from_fn(|i| i as u8)).expect("distinct"),
        chunk_size: splitzip::DEFAULT_CHUNK_SIZE,
        checksum: false,
    };
    let cache = match probe.decode(encoded, shape) {
        Ok(cache) => cache,
        Err(e) => return shown(&e),
    };
    assert_eq!(cache.shape(), shape);
    let k = PayloadHeader::parse(encoded).expect("accepted");
    let v = PayloadHeader::parse(&encoded[k.encoded_len() as usize..]).expect("accepted");
    let checksum = k.checksum.is_some();
    let codec =
        SplitzipCodec { k_codebook: k.codebook, v_codebook: v.codebook, chunk_size: k.chunk_size, checksum };
    let again = codec.encode(&cache).expect("a decoded cache encodes");
    let same_options = k.chunk_size == v.chunk_size && checksum == v.checksum.is_some();
    let current = k.version == splitzip::format::VERSION && v.version == splitzip::format::VERSION;
    if !k.is_raw() && !v.is_raw() && same_options && current {
        assert!(again == encoded, "an accepted coded cache re-encodes to the same bytes");
    } else {
        assert_eq!(codec.decode(&again, shape).expect("encoder output decodes"), cache);
    }
}

/// The codebook of a round-trip input: `bytes` with duplicates replaced by the smallest
/// exponents not yet used.
fn codebook_from(bytes: &[u8; 16]) -> Codebook {
    let mut used = [false; 256];
    let mut exponents = [0u8; 16];
    let mut pending = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if std::mem::replace(&mut used[b as usize], true) {
            pending.push(i);
        } else {
            exponents[i] = b;
        }
    }
    let mut free = (0..=255u8).filter(|&e| !used[e as usize]);
    for i in pending {
        exponents[i] = free.next().expect("at most 15 taken twice");
    }
    Codebook::new(exponents).expect("distinct by construction")
}

/// SplitZip round trip: byte 0 picks the chunk size (32..=32768), whether the codebook
/// is calibrated on the words or read from bytes 1..17, and the checksum option (bit 6);
/// the rest are the words (any `u16`, NaN and Inf included). `decode(encode(w)) == w`,
/// the payload stays within `max_encoded_len`, and as a cache of shape (1, 1, 1, n/2) the
/// words round-trip too.
pub fn splitzip_roundtrip(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let Some((book_bytes, rest)) = rest.split_first_chunk::<16>() else { return };
    let chunk_size = 32u32 << (mode % 11);
    let words = words_of(rest);
    let codebook = if mode & 0x80 != 0 && !words.is_empty() {
        Codebook::calibrate(&[&words]).expect("non-empty sample")
    } else {
        codebook_from(book_bytes)
    };
    let checksum = mode & 0x40 != 0;
    let options = splitzip::EncodeOptions { chunk_size, checksum };
    let payload = splitzip::encode_with(&words, &codebook, &options).expect("valid arguments");
    assert!(payload.len() <= splitzip::max_encoded_len(words.len(), chunk_size));
    assert_eq!(splitzip::decode(&payload).expect("encoder output decodes"), words);
    if !words.is_empty() && words.len().is_multiple_of(2) {
        let shape = KvShape::new(1, 1, 1, words.len() / 2).expect("small");
        let codec = SplitzipCodec { k_codebook: codebook, v_codebook: codebook, chunk_size, checksum };
        let encoded = codec.encode_words(&words, shape).expect("valid arguments");
        let mut out = vec![0u16; words.len()];
        codec.decode_into(&encoded, shape, &mut out).expect("encoder output decodes");
        assert_eq!(out, words);
    }
}

// ---------------------------------------------------------------------------------------
// ExANS

/// The record parser: `record_shape` (the header checks) and `inspect_record` (every
/// check of spec §10 short of the rANS decode). What inspects has consistent sizes.
pub fn exans_record_parse(data: &[u8]) {
    let shape = exans::record_shape(data);
    match exans::inspect_record(data) {
        Ok(info) => {
            assert_eq!(shape, Ok(info.shape), "inspect accepts only what record_shape accepts");
            assert_eq!(info.record_len, data.len());
            assert_eq!(info.section_bytes.iter().sum::<usize>(), data.len());
            assert_eq!(info.shape.values(), Ok(info.values));
            assert!(!info.to_string().is_empty());
        }
        Err(e) => shown(&e),
    }
    if let Err(e) = shape {
        shown(&e);
    }
}

/// The record decoder: `decode_block` and `decode_block_into`. A decoded block
/// re-encodes (with the default options) into a record that decodes to the same words.
/// Records are not canonical (a decoder accepts any center byte; spec §3), so the bytes
/// are not compared.
pub fn exans_record_decode(data: &[u8]) {
    let (shape, words) = match exans::decode_block(data) {
        Ok(decoded) => decoded,
        Err(e) => return shown(&e),
    };
    assert_eq!(shape.values(), Ok(words.len()));
    assert!(exans::inspect_record(data).is_ok(), "what decodes inspects");
    let per_group = shape.values_per_group();
    let mut again = vec![0u16; words.len()];
    let mut groups: Vec<&mut [u16]> = again.chunks_mut(per_group).collect();
    assert_eq!(exans::decode_block_into(data, &mut groups), Ok(shape));
    assert_eq!(again, words);
    let groups: Vec<&[u16]> = words.chunks(per_group).collect();
    let record = exans::encode_block(&groups, shape).expect("a decoded block encodes");
    assert_eq!(exans::decode_block(&record).expect("encoder output decodes"), (shape, words));
}

/// The container decoder: `container_info`, `decode_cache` and `ExansCodec`'s
/// `CacheCodec::decode` (the shape comes from the container itself). A decoded cache
/// re-encodes into a container that decodes to it again.
pub fn exans_container(data: &[u8]) {
    let Some((cache, info)) = decoded_and_parsed(exans::decode_cache(data), exans::container_info(data))
    else {
        return;
    };
    assert_eq!(info.shape, cache.shape());
    for i in 0..info.blocks() {
        assert_eq!(exans::record_shape(info.record(data, i)), Ok(info.block_shape(i)));
    }
    let codec = ExansCodec { block_tokens: info.block_tokens, checksum: false };
    assert_eq!(codec.decode(data, cache.shape()).as_ref(), Ok(&cache));
    let again = exans::encode_cache(&cache, info.block_tokens).expect("a decoded cache encodes");
    assert_eq!(exans::decode_cache(&again).expect("encoder output decodes"), cache);
}

/// Checks a decode table against its model (spec §5.4): `2^n` slots, each naming its
/// symbol, that symbol's frequency and the slot's offset in the symbol's range.
fn check_decode_table(model: &Model) {
    let table = model.decode_table();
    assert_eq!(table.len(), 1 << model.precision());
    let mut slot = 0usize;
    for &(symbol, freq) in model.entries() {
        for bias in 0..freq as u32 {
            let e = table[slot];
            assert_eq!(e >> 24, symbol as u32);
            assert_eq!((e >> 12) & 0xfff, (freq as u32 - 1) & 0xfff);
            assert_eq!(e & 0xfff, bias & 0xfff);
            slot += 1;
        }
    }
    assert_eq!(slot, table.len());
}

/// The model parser's rules (`Model::from_entries`, as a record's sparse frequency table
/// is read; spec §5.1) and the decode-table build (§5.4): byte 0 is the precision, then
/// `(u8 symbol, u16 freq)` triples.
pub fn exans_model_table(data: &[u8]) {
    let Some((&precision, rest)) = data.split_first() else { return };
    let entries: Vec<(u8, u16)> =
        rest.chunks_exact(3).map(|e| (e[0], u16::from_le_bytes([e[1], e[2]]))).collect();
    match Model::from_entries(precision, entries.clone()) {
        Ok(model) => {
            assert_eq!(model.entries(), &entries[..]);
            assert_eq!(model.serialized_len(), 2 + 3 * entries.len());
            check_decode_table(&model);
        }
        Err(e) => shown(&e),
    }
}

/// The encoder's quantizer (spec §5.2) on an arbitrary histogram: byte 0 the precision,
/// byte 1 a shift for the counts, then `u32` counts of symbols 0, 1, ... The result, if
/// any, is a model the decoder accepts with every counted symbol present.
pub fn exans_quantize(data: &[u8]) {
    let Some((&[precision, shift], rest)) = data.split_first_chunk::<2>() else { return };
    let mut counts = [0u64; 256];
    for (c, b) in counts.iter_mut().zip(rest.chunks_exact(4)) {
        // Counts up to 2^32 x 2^31: far past any block, still summing within u64.
        *c = (u32::from_le_bytes(b.try_into().expect("4 bytes")) as u64) << (shift % 32);
    }
    match Model::quantize(&counts, precision) {
        Ok(model) => {
            let again =
                Model::from_entries(precision, model.entries().to_vec()).expect("a decoder accepts it");
            assert_eq!(again, model);
            let mut present = [false; 256];
            for &(symbol, _) in model.entries() {
                present[symbol as usize] = true;
            }
            for (&p, &c) in present.iter().zip(&counts) {
                assert_eq!(p, c > 0, "exactly the counted symbols are in the model");
            }
            check_decode_table(&model);
            assert!(model.cross_entropy_bits(&counts).is_some());
        }
        Err(e) => shown(&e),
    }
}

/// ExANS round trip through the container: bytes 0..4 give the shape (L in 1..=2, H in
/// 1..=2, D in 1..=32, T in 1..=8: at most 2,048 words, as every block pays for a model
/// and 256 rANS lanes), byte 4 the block size (bit 7: the checksum option), byte 5 the
/// precision, raw policy and format version (3 or 4); the rest are the words (repeated, or zeros, to fill the cache). With the default options
/// the container is also what `ExansCodec` writes.
pub fn exans_roundtrip(data: &[u8]) {
    let Some((&[l, h, d, t, b, opts], rest)) = data.split_first_chunk::<6>() else { return };
    let shape = KvShape::new(1 + l as usize % 2, 1 + h as usize % 2, 1 + d as usize % 32, 1 + t as usize % 8)
        .expect("small dimensions");
    let block_tokens = 1 + (b & 0x7f) as usize % shape.tokens;
    let checksum = b & 0x80 != 0;
    let raw = match opts >> 6 {
        0 | 1 => RawPolicy::Auto,
        2 => RawPolicy::Never,
        _ => RawPolicy::Always,
    };
    let precision = if opts & 0x20 != 0 { 1 + (opts & 0x1f) % 12 } else { exans::format::PRECISION };
    // Precisions 1..=12 take the low five bits; the version rides on opts & 0x10 when
    // the precision is the default (format version 3, for older readers, or 4).
    let version = (opts & 0x30 == 0x10).then_some(exans::format::VERSION_3);
    let options = EncodeOptions { precision, raw, checksum, version };
    let mut words = words_of(rest);
    let n = shape.total_values();
    if words.is_empty() {
        words = vec![0; n];
    }
    let words: Vec<u16> = words.iter().copied().cycle().take(n).collect();
    let container = match exans::encode_words_with(&words, shape, block_tokens, &options) {
        Ok(container) => container,
        Err(e) => {
            // Only a precision too small for the block's distinct symbols, with raw
            // storage forbidden, is refused.
            assert!(raw == RawPolicy::Never && precision < 8, "refused: {e}");
            return shown(&e);
        }
    };
    let cache = exans::decode_cache(&container).expect("encoder output decodes");
    assert_eq!(cache.shape(), shape);
    assert_eq!(cache.words_in(WordOrder::LayerMajor), words);
    if options == (EncodeOptions { checksum, ..EncodeOptions::default() }) && block_tokens == shape.tokens {
        // One block: cheap enough to encode twice.
        let codec = ExansCodec { block_tokens, checksum };
        assert!(codec.encode(&cache).expect("valid cache") == container, "the trait writes the same bytes");
    }
}

// ---------------------------------------------------------------------------------------
// GAAC

/// `gaac::decode_cache` and `gaac::cache_info` of arbitrary bytes (the container records
/// its shape). An accepted container's values round-trip through the encoder with its
/// own bases, slot capacity and checksum option. Byte equality is not asserted: the
/// decoder accepts wider tags and raw blocks that would fit (spec §7.2), which the
/// encoder never writes.
pub fn gaac_cache(data: &[u8]) {
    let cache = match gaac::decode_cache(data) {
        Ok(cache) => cache,
        Err(e) => {
            shown(&e);
            // cache_info runs the same structural checks; the checksum is not one of them.
            if !matches!(e, gaac::Error::ChecksumMismatch { .. }) {
                assert_eq!(gaac::cache_info(data).map(|_| ()), Err(e), "cache_info runs the same checks");
            }
            return;
        }
    };
    let info = gaac::cache_info(data).expect("a decoded container is valid");
    assert!(!info.to_string().is_empty());
    assert!(info.content_len() <= info.resident_len());
    let codec = GaacCodec {
        bases: Some(info.bases.clone()),
        slot_capacity: Some(info.header.slot_capacity),
        checksum: info.header.checksum.is_some(),
        version: Some(info.header.version),
    };
    let shape = cache.shape();
    assert_eq!(codec.decode(data, shape).expect("the trait accepts it too"), cache);
    let again = codec.encode(&cache).expect("a decoded cache encodes");
    assert_eq!(gaac::decode_cache(&again).expect("encoder output decodes"), cache);
    if info.header.calibration_tokens.is_none() && again == data {
        assert_eq!(gaac::cache_info(&again).expect("valid"), info);
    }
}

/// `Bases::from_json` on arbitrary text (the files `cargo xtask calibrate --codec gaac`
/// writes): what parses serializes and parses back to itself, every base at most 248.
pub fn gaac_bases_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Bases::from_json(text) {
        Ok(bases) => {
            assert_eq!(Bases::from_json(&bases.to_json()).expect("own output"), bases);
            assert!(bases.as_bytes().iter().all(|&b| b <= gaac::format::MAX_BASE));
        }
        Err(e) => shown(&e),
    }
}

/// A GAAC round trip of arbitrary words: bytes 0-3 give L in 1..=2, H in 1..=2, D 64 or
/// 128 (bit 0 of byte 2; bit 1 the format version, 1 or 2) and T in 1..=40; byte 4 the options (bit 0 checksum, bit 1 given bases from the
/// data, bits 2-7 the slot's extra 16-byte units, 0 = the default slot) and byte 5 the
/// self-calibration tokens. `decode(encode(x)) == x`, within `max_encoded_len`.
pub fn gaac_roundtrip(data: &[u8]) {
    let Some((&[l, h, d, t, opts, calibration], rest)) = data.split_first_chunk::<6>() else { return };
    let head_dim = if d & 1 == 0 { 64 } else { 128 };
    let shape = KvShape::new(1 + l as usize % 2, 1 + h as usize % 2, head_dim, 1 + t as usize % 40)
        .expect("small dimensions");
    let block = gaac::BlockShape::new(head_dim).expect("a multiple of 64");
    let extra = (opts >> 2) as usize;
    let slot_capacity = (extra != 0).then(|| (block.planes_len() + 16 * extra).min(block.max_coded_len()));
    let mut words = words_of(rest);
    if words.is_empty() {
        words = vec![0x3f80];
    }
    let words: Vec<u16> = words.iter().copied().cycle().take(shape.total_values()).collect();
    let bases = (opts & 2 != 0).then(|| {
        let n = 2 * shape.layers * shape.kv_heads * head_dim;
        let seed = if rest.is_empty() { &[127u8][..] } else { rest };
        let bytes = seed.iter().copied().cycle().take(n).map(|b| b % (gaac::format::MAX_BASE + 1)).collect();
        Bases::from_bytes(shape.layers, shape.kv_heads, head_dim, bytes).expect("valid bases")
    });
    let options = gaac::EncodeOptions {
        bases,
        slot_capacity,
        calibration_tokens: Some(1 + calibration as usize % 48),
        checksum: opts & 1 != 0,
        version: Some(1 + u16::from(d >> 1 & 1)),
    };
    let container = gaac::encode_words(&words, shape, &options).expect("valid arguments");
    let capacity = slot_capacity.unwrap_or(block.default_capacity());
    assert!(container.len() <= gaac::max_encoded_len(shape, capacity).expect("valid shape"));
    let cache = gaac::decode_cache(&container).expect("encoder output decodes");
    assert_eq!(cache.words_in(WordOrder::LayerMajor), words);
}

// ---------------------------------------------------------------------------------------
// ZipFusion

/// The page shape and variant a page target reads from its first two bytes: H in 1..=4,
/// D = 32 x (1..=4), bit 7 of byte 1 the zero-aware variant.
pub fn zipfusion_page_args(prefix: [u8; 2]) -> (PageShape, Variant) {
    let [h, d] = prefix;
    let shape = PageShape::new(1 + h as usize % 4, 32 * (1 + (d & 0x7f) as usize % 4)).expect("small shape");
    (shape, if d & 0x80 != 0 { Variant::ZeroAware } else { Variant::Base })
}

/// The inverse of [`zipfusion_page_args`] for arguments in its range.
pub fn zipfusion_page_prefix(shape: PageShape, variant: Variant) -> [u8; 2] {
    let zero_aware = if variant == Variant::ZeroAware { 0x80 } else { 0 };
    [(shape.kv_heads - 1) as u8, (shape.head_dim / 32 - 1) as u8 | zero_aware]
}

/// One page (spec §5, §6): `page_info` (on the bytes, which may run past the page) and
/// `decode_page` (exactly the page), with the shape and variant from the first two bytes
/// ([`zipfusion_page_args`]). What decodes has the length `page_info` gives, and its
/// values re-encode into a page that decodes to them (pages are not canonical: spec §6).
pub fn zipfusion_page(data: &[u8]) {
    let Some((prefix, page)) = data.split_first_chunk::<2>() else { return };
    let (shape, variant) = zipfusion_page_args(*prefix);
    let info = zipfusion::page_info(page, shape, variant);
    let [k, v] = match zipfusion::decode_page(page, shape, variant) {
        Ok(decoded) => decoded,
        Err(e) => {
            shown(&e);
            if let Ok(info) = info {
                assert!(info.len < page.len(), "valid metadata fails decode_page only on trailing bytes");
                assert!(info.to_string().contains("zipfusion page"));
            }
            return;
        }
    };
    let info = info.expect("what decodes has valid metadata");
    assert_eq!(info.len, page.len());
    assert_eq!(info.block_counts().iter().map(|c| c.total()).sum::<usize>(), shape.blocks());
    let again = zipfusion::encode_page(&k, &v, shape, variant).expect("decoded values encode");
    assert_eq!(zipfusion::decode_page(&again, shape, variant).expect("encoder output decodes"), [k, v]);
}

/// A whole container (spec §7): `cache_info`, `decode_cache`, and `ZipfusionCodec`'s
/// `CacheCodec::decode` with the header's shape. Byte 0 is a switch, the container
/// follows: with bit 0 set the header CRC-32C is recomputed first, so that a mutated L,
/// H, D, T, variant or flag reaches the checks behind the CRC instead of stopping at it.
/// A decoded cache re-encodes, with the container's variant and checksum option, into a
/// container that decodes to it.
pub fn zipfusion_cache(data: &[u8]) {
    let Some((&switch, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    let crc_at = zipfusion::format::header::HEADER_CRC;
    if switch & 1 != 0 && bytes.len() >= zipfusion::format::HEADER_LEN {
        let crc = bf16_field::integrity::header_crc32c(&bytes[..zipfusion::format::HEADER_LEN], crc_at);
        bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let data = &bytes[..];
    let Some((cache, info)) = decoded_and_parsed(zipfusion::decode_cache(data), zipfusion::cache_info(data))
    else {
        return;
    };
    assert_eq!(info.header.shape, cache.shape());
    assert_eq!(info.len, data.len());
    assert!(!info.to_string().is_empty());
    let codec = ZipfusionCodec { variant: info.header.variant, checksum: info.header.checksum.is_some() };
    assert_eq!(codec.decode(data, cache.shape()).as_ref(), Ok(&cache));
    let again = codec.encode(&cache).expect("a decoded cache encodes");
    assert_eq!(zipfusion::decode_cache(&again).expect("encoder output decodes"), cache);
}

/// ZipFusion round trip: bytes 0..4 give the shape (L in 1..=2, H in 1..=2, D = 32 x
/// (1..=3), T in 1..=40: at most 30,720 words), byte 4 the options (bit 0 zero-aware, bit
/// 1 checksum); the rest are the words (repeated, or zeros, to fill the cache).
/// `decode(encode(w)) == w` for the cache and for each of its pages, within
/// `max_encoded_len`.
pub fn zipfusion_roundtrip(data: &[u8]) {
    let Some((&[l, h, d, t, options], rest)) = data.split_first_chunk::<5>() else { return };
    let shape =
        KvShape::new(1 + l as usize % 2, 1 + h as usize % 2, 32 * (1 + d as usize % 3), 1 + t as usize % 40)
            .expect("small dimensions");
    let variant = if options & 1 != 0 { Variant::ZeroAware } else { Variant::Base };
    let codec = ZipfusionCodec { variant, checksum: options & 2 != 0 };
    let mut words = words_of(rest);
    if words.is_empty() {
        words = vec![0];
    }
    let words: Vec<u16> = words.iter().copied().cycle().take(shape.total_values()).collect();
    let encoded = codec.encode_words(&words, shape).expect("a valid shape encodes");
    assert!(encoded.len() <= zipfusion::max_encoded_len(shape).expect("a valid shape"));
    let mut out = vec![0u16; words.len()];
    codec.decode_into(&encoded, shape, &mut out).expect("encoder output decodes");
    assert_eq!(out, words);
    let info = zipfusion::cache_info(&encoded).expect("encoder output is valid");
    let page_shape = info.header.page_shape();
    for (offset, page) in &info.pages {
        let bytes = &encoded[*offset..*offset + page.len];
        let [k, v] = zipfusion::decode_page(bytes, page_shape, variant).expect("encoder pages decode");
        assert_eq!(zipfusion::encode_page(&k, &v, page_shape, variant).expect("valid shape"), bytes);
    }
}

// ---------------------------------------------------------------------------------------
// bf16-field

/// Field split / merge: `merge(split(w)) == w` for the words of the input, and `merge`
/// of arbitrary exponent and sign+mantissa streams (byte 0 gives the exponent stream's
/// length) is `Ok` exactly when the lengths agree, and then splits back to them.
pub fn field_split_merge(data: &[u8]) {
    let words = words_of(data);
    let (exponents, sign_mantissa) = bf16_field::split_to_vec(&words);
    for ((&w, &e), &sf) in words.iter().zip(&exponents).zip(&sign_mantissa) {
        assert_eq!((e, sf), (bf16_field::exponent_of(w), bf16_field::sign_mantissa_of(w)));
    }
    assert_eq!(bf16_field::merge_to_vec(&exponents, &sign_mantissa).expect("equal lengths"), words);

    let Some((&cut, rest)) = data.split_first() else { return };
    let cut = (cut as usize).min(rest.len());
    let (e, sf) = rest.split_at(cut);
    match bf16_field::merge_to_vec(e, sf) {
        Ok(merged) => {
            assert_eq!(e.len(), sf.len());
            assert_eq!(bf16_field::split_to_vec(&merged), (e.to_vec(), sf.to_vec()));
        }
        Err(err) => {
            assert_ne!(e.len(), sf.len());
            shown(&err);
        }
    }
    let mut out = vec![0u16; e.len() + 1];
    assert!(bf16_field::merge(e, &sf[..sf.len().min(e.len())], &mut out).is_err(), "a long output");
    let (mut e_out, mut sf_out) = (vec![0u8; words.len()], vec![0u8; words.len() + 1]);
    assert!(bf16_field::split(&words, &mut e_out, &mut sf_out).is_err(), "a long sign+mantissa output");
}

/// The safetensors reader (`bf16_field::io::kv_cache_from_bytes`): what it accepts
/// writes back (`kv_cache_to_bytes`) into a file that reads as the same cache.
pub fn field_safetensors(data: &[u8]) {
    match bf16_field::io::kv_cache_from_bytes(data) {
        Ok(cache) => {
            let bytes = bf16_field::io::kv_cache_to_bytes(&cache, None).expect("a valid cache writes");
            let again: KvCache = bf16_field::io::kv_cache_from_bytes(&bytes).expect("own output reads");
            assert_eq!(again, cache);
        }
        Err(e) => shown(&e),
    }
}
