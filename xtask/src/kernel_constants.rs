//! The headers `cargo xtask kernels` writes from the codecs' Rust constants, so that a
//! kernel never retypes a format constant, a launch constant or a status value: each is
//! defined once in Rust and reaches CUDA C through `kernels/<crate>/<crate>_format.gen.cuh`.
//! The lock check compares every header with what this module generates now.

use std::fmt::Write as _;

use kvcodec_gpu::StatusCodes;

/// A `#define` of a generated header: the CUDA name, the value, and the C suffix that
/// gives it the type the kernels compute with (`""` int, `"u"`, `"ull"`).
struct Define {
    name: &'static str,
    value: u64,
    suffix: &'static str,
    what: &'static str,
}

const fn d(name: &'static str, value: usize, suffix: &'static str, what: &'static str) -> Define {
    Define { name, value: value as u64, suffix, what }
}

/// One generated header: its path, the Rust items it comes from, its defines and status
/// values.
pub(crate) struct Header {
    pub(crate) path: &'static str,
    source: &'static str,
    defines: Vec<Define>,
    status: Option<(&'static str, StatusCodes)>,
}

fn magic(bytes: [u8; 4]) -> usize {
    u32::from_le_bytes(bytes) as usize
}

/// Every generated header.
pub(crate) fn headers() -> Vec<Header> {
    use exans::format as ef;
    use splitzip::format as sf;
    use zipfusion::format as zf;
    vec![
        Header {
            path: "kernels/attention/attention_format.gen.cuh",
            source: "kvcodec_attention and kvcodec_attention::gpu",
            defines: vec![
                d("ATTENTION_PAGE_TOKENS", kvcodec_attention::PAGE_TOKENS, "", "tokens per page"),
                d(
                    "ATTENTION_MAX_GROUP",
                    kvcodec_attention::MAX_GROUP,
                    "",
                    "query heads per KV head, at most",
                ),
                d(
                    "ATTENTION_WARPS",
                    kvcodec_attention::gpu::WARPS,
                    "",
                    "warps per CTA at head_dim 64 and 128",
                ),
                d(
                    "ATTENTION_WARPS_D256",
                    kvcodec_attention::gpu::WARPS_D256,
                    "",
                    "warps per CTA at head_dim 256",
                ),
                d(
                    "ATTENTION_STAGES",
                    kvcodec_attention::gpu::STAGES,
                    "",
                    "page slots per warp (cp.async stages)",
                ),
                d(
                    "ATTENTION_MAX_SPLITS",
                    kvcodec_attention::gpu::MAX_SPLITS,
                    "",
                    "most splits per (sequence, KV head)",
                ),
                d(
                    "ATTENTION_MIN_PAGES_PER_SPLIT",
                    kvcodec_attention::gpu::MIN_PAGES_PER_SPLIT,
                    "",
                    "fewest pages of a sequence per split",
                ),
            ],
            status: Some(("ATTENTION_STATUS", kvcodec_attention::gpu::STATUS)),
        },
        Header {
            path: "kernels/exans/exans_format.gen.cuh",
            source: "exans::format and exans::gpu",
            defines: vec![
                d(
                    "EXANS_VERSION",
                    ef::VERSION as usize,
                    "u",
                    "record and container format version (spec 3, 8)",
                ),
                d("EXANS_RECORD_MAGIC", magic(ef::RECORD_MAGIC), "u", "\"KVXA\" read as a little-endian u32"),
                d(
                    "EXANS_CONTAINER_MAGIC",
                    magic(ef::CONTAINER_MAGIC),
                    "u",
                    "\"KVXC\" read as a little-endian u32",
                ),
                d(
                    "EXANS_VERSION_3",
                    ef::VERSION_3 as usize,
                    "u",
                    "version 3, still read: no payload in the states (spec 3)",
                ),
                d(
                    "EXANS_VERSION_2",
                    ef::VERSION_2 as usize,
                    "u",
                    "version 2, still read: no checksum, no payload (spec 3)",
                ),
                d("EXANS_FLAG_RAW", ef::FLAG_RAW as usize, "u", "record flag: stored raw (spec 7)"),
                d(
                    "EXANS_FLAG_CHECKSUM",
                    ef::FLAG_CHECKSUM as usize,
                    "u",
                    "record flag: the header holds the block's Adler-32 (spec 3)",
                ),
                d("EXANS_HEADER_LEN", ef::HEADER_LEN, "ull", "bytes of a record header (spec 3)"),
                d(
                    "EXANS_CONTAINER_HEADER_LEN",
                    ef::CONTAINER_HEADER_LEN,
                    "ull",
                    "bytes of the container header (spec 8)",
                ),
                d("EXANS_DIRECTORY_LEN", ef::DIRECTORY_LEN, "ull", "bytes of a record's directory (spec 4)"),
                d("EXANS_PARTITIONS", ef::PARTITIONS, "", "rANS partitions per record (spec 6.1)"),
                d("EXANS_LANES", ef::LANES, "", "rANS lanes per partition (spec 6.2)"),
                d(
                    "EXANS_GROUP",
                    ef::LANE_GROUP,
                    "",
                    "consecutive symbols of a tile a lane codes in consecutive steps",
                ),
                d("EXANS_TILE", ef::TILE, "", "symbols of a tile: lanes x group (spec 6.2)"),
                d("EXANS_MAX_SYMBOLS", ef::MAX_SYMBOLS, "", "entries of a sparse model at most (spec 5.1)"),
                d(
                    "EXANS_MAX_PRECISION",
                    ef::MAX_PRECISION as usize,
                    "",
                    "the largest probability precision n (spec 5)",
                ),
                d(
                    "EXANS_PRECISION",
                    ef::PRECISION as usize,
                    "u",
                    "the precision the encoders write (spec 5.2)",
                ),
                d(
                    "EXANS_STATE_LOWER",
                    ef::STATE_LOWER as usize,
                    "u",
                    "the rANS state interval's lower end, 2^16 (spec 6.3)",
                ),
                d(
                    "EXANS_PAYLOAD_BYTES",
                    ef::PAYLOAD_BYTES,
                    "u",
                    "sign+mantissa bytes a version 4 record carries in its lanes' states, at most (spec 6.4)",
                ),
                d(
                    "EXANS_CENTER_SYMBOL",
                    ef::CENTER_SYMBOL as usize,
                    "u",
                    "the symbol of a group's center (spec 2)",
                ),
                d("EXANS_HEADER_MAGIC", ef::header::MAGIC, "", "record header field offsets (spec 3)"),
                d("EXANS_HEADER_VERSION", ef::header::VERSION, "", ""),
                d("EXANS_HEADER_FLAGS", ef::header::FLAGS, "", ""),
                d("EXANS_HEADER_LAYERS", ef::header::LAYERS, "", ""),
                d("EXANS_HEADER_KV_HEADS", ef::header::KV_HEADS, "", ""),
                d("EXANS_HEADER_HEAD_DIM", ef::header::HEAD_DIM, "", ""),
                d("EXANS_HEADER_TOKENS", ef::header::TOKENS, "", ""),
                d("EXANS_HEADER_VALUES", ef::header::VALUES, "", ""),
                d("EXANS_HEADER_RECORD_LEN", ef::header::RECORD_LEN, "", ""),
                d("EXANS_HEADER_PRECISION", ef::header::PRECISION, "", ""),
                d("EXANS_HEADER_PARTITIONS", ef::header::PARTITIONS, "", ""),
                d("EXANS_HEADER_LANES", ef::header::LANES, "", ""),
                d("EXANS_HEADER_RESERVED0", ef::header::RESERVED0, "", ""),
                d("EXANS_HEADER_MODEL_OFFSET", ef::header::MODEL_OFFSET, "", ""),
                d("EXANS_HEADER_DIRECTORY_OFFSET", ef::header::DIRECTORY_OFFSET, "", ""),
                d("EXANS_HEADER_WORDS_OFFSET", ef::header::WORDS_OFFSET, "", ""),
                d("EXANS_HEADER_SIGN_MANTISSA_OFFSET", ef::header::SIGN_MANTISSA_OFFSET, "", ""),
                d("EXANS_HEADER_CHECKSUM", ef::header::CHECKSUM, "", ""),
                d(
                    "EXANS_CONTAINER_HEADER_MAGIC",
                    ef::container_header::MAGIC,
                    "",
                    "container header field offsets (spec 8)",
                ),
                d("EXANS_CONTAINER_HEADER_VERSION", ef::container_header::VERSION, "", ""),
                d("EXANS_CONTAINER_HEADER_FLAGS", ef::container_header::FLAGS, "", ""),
                d("EXANS_CONTAINER_HEADER_LAYERS", ef::container_header::LAYERS, "", ""),
                d("EXANS_CONTAINER_HEADER_KV_HEADS", ef::container_header::KV_HEADS, "", ""),
                d("EXANS_CONTAINER_HEADER_HEAD_DIM", ef::container_header::HEAD_DIM, "", ""),
                d("EXANS_CONTAINER_HEADER_BLOCK_TOKENS", ef::container_header::BLOCK_TOKENS, "", ""),
                d("EXANS_CONTAINER_HEADER_TOKENS", ef::container_header::TOKENS, "", ""),
                d("EXANS_CONTAINER_HEADER_BLOCKS", ef::container_header::BLOCKS, "", ""),
                d("EXANS_CONTAINER_HEADER_RESERVED", ef::container_header::RESERVED, "", ""),
                d(
                    "EXANS_THREADS",
                    exans::gpu::THREADS as usize,
                    "",
                    "threads per CTA of every ExANS kernel: partitions x lanes",
                ),
                d(
                    "EXANS_DECODE_RING_WORDS",
                    exans::gpu::decode::RING_WORDS,
                    "",
                    "words of a partition's stream ring",
                ),
                d(
                    "EXANS_DECODE_ROUND_STEPS",
                    exans::gpu::decode::ROUND_STEPS,
                    "",
                    "decode steps per round: two tiles",
                ),
                d(
                    "EXANS_DECODE_DYNAMIC_SMEM",
                    exans::gpu::decode::DYNAMIC_SMEM as usize,
                    "u",
                    "dynamic shared memory of a decode CTA, bytes",
                ),
                d(
                    "EXANS_ENCODE_DIRECTORY_WORDS",
                    exans::gpu::encode::DIRECTORY_WORDS,
                    "u",
                    "u32s of a block's directory scratch",
                ),
                d(
                    "EXANS_ENCODE_GAIN_LEN",
                    exans::gpu::encode::GAIN_LEN,
                    "u",
                    "entries of the quantizer's gain table",
                ),
            ],
            status: Some(("EXANS_STATUS", exans::gpu::DECODE_STATUS)),
        },
        Header {
            path: "kernels/splitzip/splitzip_format.gen.cuh",
            source: "splitzip::format and splitzip::gpu",
            defines: vec![
                d("SPLITZIP_MAGIC", magic(sf::MAGIC), "u", "\"KVSZ\" read as a little-endian u32"),
                d("SPLITZIP_VERSION", sf::VERSION as usize, "", "payload format version (spec 2)"),
                d("SPLITZIP_FLAG_RAW", sf::FLAG_RAW as usize, "", "header flag: stored raw (spec 2, 4)"),
                d(
                    "SPLITZIP_FLAG_CHECKSUM",
                    sf::FLAG_CHECKSUM as usize,
                    "",
                    "header flag: the header holds the values' Adler-32 (spec 2)",
                ),
                d("SPLITZIP_HEADER_LEN", sf::HEADER_LEN, "", "bytes of the header (spec 2)"),
                d(
                    "SPLITZIP_SECTION_ALIGN",
                    sf::SECTION_ALIGN,
                    "ull",
                    "every section starts at a multiple of this (spec 3)",
                ),
                d("SPLITZIP_CODEBOOK_LEN", sf::CODEBOOK_LEN, "", "codebook entries, one per 4-bit code"),
                d(
                    "SPLITZIP_NO_CODE",
                    sf::NO_CODE as usize,
                    "u",
                    "code-table entry of an exponent without a code",
                ),
                d("SPLITZIP_HEADER_MAGIC", sf::field::MAGIC, "", "header field offsets (spec 2)"),
                d("SPLITZIP_HEADER_VERSION", sf::field::VERSION, "", ""),
                d("SPLITZIP_HEADER_FLAGS", sf::field::FLAGS, "", ""),
                d("SPLITZIP_HEADER_VALUE_COUNT", sf::field::VALUE_COUNT, "", ""),
                d("SPLITZIP_HEADER_CHUNK_SIZE", sf::field::CHUNK_SIZE, "", ""),
                d("SPLITZIP_HEADER_CHUNK_COUNT", sf::field::CHUNK_COUNT, "", ""),
                d("SPLITZIP_HEADER_ESCAPE_COUNT", sf::field::ESCAPE_COUNT, "", ""),
                d("SPLITZIP_HEADER_CODEBOOK", sf::field::CODEBOOK, "", ""),
                d("SPLITZIP_HEADER_CODES_OFFSET", sf::field::CODES_OFFSET, "", ""),
                d("SPLITZIP_HEADER_SIGN_MANTISSA_OFFSET", sf::field::SIGN_MANTISSA_OFFSET, "", ""),
                d("SPLITZIP_HEADER_ESCAPE_OFFSETS_OFFSET", sf::field::ESCAPE_OFFSETS_OFFSET, "", ""),
                d("SPLITZIP_HEADER_ESCAPE_POSITIONS_OFFSET", sf::field::ESCAPE_POSITIONS_OFFSET, "", ""),
                d("SPLITZIP_HEADER_ESCAPE_EXPONENTS_OFFSET", sf::field::ESCAPE_EXPONENTS_OFFSET, "", ""),
                d("SPLITZIP_HEADER_ENCODED_LEN", sf::field::ENCODED_LEN, "", ""),
                d("SPLITZIP_HEADER_CRC", sf::field::HEADER_CRC, "", ""),
                d("SPLITZIP_HEADER_CHECKSUM", sf::field::CHECKSUM, "", ""),
                d(
                    "SPLITZIP_TILE_VALUES",
                    splitzip::gpu::TILE_VALUES,
                    "",
                    "values per GPU tile; the largest GPU chunk size",
                ),
                d(
                    "SPLITZIP_THREADS",
                    splitzip::gpu::THREADS as usize,
                    "",
                    "threads per CTA of the tile kernels",
                ),
                d("SPLITZIP_GROUP_VALUES", splitzip::gpu::GROUP_VALUES, "", "values a thread owns at once"),
                d(
                    "SPLITZIP_SUPER_TILES",
                    splitzip::gpu::SUPER_TILES,
                    "",
                    "tiles per superblock of the encoder's workspace",
                ),
                d(
                    "SPLITZIP_PLACE_THREADS",
                    splitzip::gpu::PLACE_THREADS as usize,
                    "",
                    "threads per CTA of the placement kernel",
                ),
                d(
                    "SPLITZIP_PLACE_TILES_PER_WARP",
                    splitzip::gpu::PLACE_TILES_PER_WARP,
                    "",
                    "consecutive tiles per warp of the placement kernel",
                ),
                d(
                    "SPLITZIP_WORKSPACE_HEADER_WORDS",
                    splitzip::gpu::WORKSPACE_HEADER_WORDS,
                    "",
                    "workspace words before the superblock sums",
                ),
            ],
            status: Some(("SPLITZIP_STATUS", splitzip::gpu::DECODE_STATUS)),
        },
        Header {
            path: "kernels/gaac/gaac_format.gen.cuh",
            source: "gaac::format and gaac::gpu",
            defines: gaac_defines(),
            status: Some(("GAAC_DECODE", gaac::gpu::DECODE_STATUS)),
        },
        Header {
            path: "kernels/zipfusion/zipfusion_format.gen.cuh",
            source: "zipfusion::format and zipfusion::gpu",
            defines: vec![
                d("ZIPFUSION_PAGE_TOKENS", zf::PAGE_TOKENS, "", "tokens per page (spec 2)"),
                d(
                    "ZIPFUSION_BLOCK_CHANNELS",
                    zf::BLOCK_CHANNELS,
                    "",
                    "channels of one head per block (spec 2)",
                ),
                d("ZIPFUSION_BLOCK_VALUES", zf::BLOCK_VALUES, "", "values per block (spec 2)"),
                d("ZIPFUSION_LOW_BYTES_LEN", zf::LOW_BYTES_LEN, "", "low bytes of a coded block (spec 4.1)"),
                d("ZIPFUSION_CODED_BLOCK_LEN", zf::CODED_BLOCK_LEN, "u", "bytes of a coded block (spec 4.1)"),
                d("ZIPFUSION_RAW_BLOCK_LEN", zf::RAW_BLOCK_LEN, "u", "bytes of a raw block (spec 4.2)"),
                d("ZIPFUSION_MAX_HALF_BASE", zf::MAX_HALF_BASE as usize, "u", "the largest b/2 (spec 2.1)"),
                d(
                    "ZIPFUSION_WINDOW_SPAN",
                    zf::WINDOW_SPAN as usize,
                    "u",
                    "the largest E - b of a coded block",
                ),
                d(
                    "ZIPFUSION_ZERO_AWARE_WINDOW_SPAN",
                    zf::ZERO_AWARE_WINDOW_SPAN as usize,
                    "u",
                    "the largest nonzero E - b of a zero-aware block (spec 2.2)",
                ),
                d("ZIPFUSION_ZERO_D", zf::ZERO_D as usize, "u", "the d of exponent 0 in a zero-aware block"),
                d(
                    "ZIPFUSION_RAW_BLOCK_BYTE",
                    zf::RAW_BLOCK_BYTE as usize,
                    "u",
                    "metadata byte of a raw block (spec 5.1)",
                ),
                d(
                    "ZIPFUSION_ZERO_AWARE_FLAG",
                    zf::ZERO_AWARE_FLAG as usize,
                    "u",
                    "metadata bit of a zero-aware block (spec 5.1)",
                ),
                d(
                    "ZIPFUSION_OFFSET_LEN",
                    zf::OFFSET_LEN,
                    "u",
                    "bytes of an entry's first-block offset (spec 5.1)",
                ),
                d("ZIPFUSION_HEADER_LEN", zf::HEADER_LEN, "u", "bytes of the container header (spec 7.1)"),
                d("ZIPFUSION_HEADER_CHECKSUM", zf::header::CHECKSUM, "u", "header field offsets (spec 7.1)"),
                d("ZIPFUSION_HEADER_CRC", zf::header::HEADER_CRC, "u", ""),
                d(
                    "ZIPFUSION_HEAD_METADATA_D64",
                    2 * zf::PageShape { kv_heads: 1, head_dim: 64 }.entry_stride(),
                    "",
                    "bytes of a head's K and V metadata entries at head_dim 64 (spec 5.1)",
                ),
                d(
                    "ZIPFUSION_HEAD_METADATA_D128",
                    2 * zf::PageShape { kv_heads: 1, head_dim: 128 }.entry_stride(),
                    "",
                    "... at head_dim 128",
                ),
                d(
                    "ZIPFUSION_HEAD_METADATA_D256",
                    2 * zf::PageShape { kv_heads: 1, head_dim: 256 }.entry_stride(),
                    "",
                    "... at head_dim 256",
                ),
                d(
                    "ZIPFUSION_THREADS",
                    zipfusion::gpu::THREADS as usize,
                    "",
                    "threads per CTA of the page kernels",
                ),
                d(
                    "ZIPFUSION_SCAN_THREADS",
                    zipfusion::gpu::SCAN_THREADS as usize,
                    "",
                    "threads of the container's scan CTA",
                ),
                d(
                    "ZIPFUSION_TILE_STRIDE",
                    zipfusion::gpu::TILE_STRIDE,
                    "",
                    "words per row of a warp's shared-memory tile",
                ),
            ],
            status: Some(("ZIPFUSION_STATUS", zipfusion::gpu::DECODE_STATUS)),
        },
    ]
}

/// GAAC's format constants (docs/formats/gaac.md), for its kernels.
fn gaac_defines() -> Vec<Define> {
    use gaac::format as gf;
    vec![
        d("GAAC_VERSION", gf::VERSION as usize, "u", "container format version (spec 5.1)"),
        d("GAAC_MAGIC", magic(gf::MAGIC), "u", "\"KVGA\" read as a little-endian u32"),
        d("GAAC_HEADER_LEN", gf::HEADER_LEN, "ull", "bytes of the container header (spec 5.1)"),
        d("GAAC_BLOCK_TOKENS", gf::BLOCK_TOKENS, "", "tokens per block (spec 3)"),
        d("GAAC_GROUP_CHANNELS", gf::GROUP_CHANNELS, "", "channels per tagged group (spec 2.2)"),
        d("GAAC_TILE_VALUES", gf::TILE_VALUES, "", "values per mma.m16n8k16 B fragment tile (spec 3.1)"),
        d("GAAC_LANES", gf::LANES, "", "lanes of the warp that restores a block (spec 3.1)"),
        d("GAAC_SLAB_TILES", gf::SLAB_TILES, "", "tiles per slab of the 3-bit plane (spec 3.2)"),
        d("GAAC_SLAB_BYTES", gf::SLAB_BYTES, "", "bytes per slab of the 3-bit plane (spec 3.2)"),
        d("GAAC_TAG_OFFSET4", gf::Tag::Offset4 as usize, "u", "tag of a 4-bit group (spec 2.2)"),
        d("GAAC_TAG_RAW", gf::Tag::Raw as usize, "u", "tag of a raw group (spec 2.2)"),
        d("GAAC_WINDOW_BELOW_BASE", gf::WINDOW_BELOW_BASE as usize, "u", "w = b - 4, clamped (spec 2.2)"),
        d("GAAC_MAX_WINDOW_START", gf::MAX_WINDOW_START as usize, "u", "the largest w (spec 2.2)"),
        d(
            "GAAC_RAW_BYTES_PER_GROUP",
            gf::RAW_BYTES_PER_GROUP,
            "",
            "high-bit bytes of a raw group (spec 3.5)",
        ),
        d(
            "GAAC_STATUS_RAW",
            gf::STATUS_RAW as usize,
            "u",
            "block status: raw in the overflow section (spec 5.3)",
        ),
        d("GAAC_OFFSET3_MAX", gf::OFFSET3_MAX as usize, "u", "the widest 3-bit offset E - b (spec 2.2)"),
        d("GAAC_OFFSET4_MAX", gf::OFFSET4_MAX as usize, "u", "the widest 4-bit offset E - w (spec 2.2)"),
        d("GAAC_MAX_BASE", gf::MAX_BASE as usize, "u", "the largest base (spec 2.1)"),
        d("GAAC_HEADER_RAW_BLOCKS", gf::header::RAW_BLOCKS, "", "header field offsets (spec 5.1)"),
        d("GAAC_HEADER_CHECKSUM", gf::header::CHECKSUM, "", ""),
        d("GAAC_HEADER_CRC", gf::header::HEADER_CRC, "", ""),
        d("GAAC_WARPS", gaac::gpu::WARPS as usize, "", "most warps per CTA of the block kernels"),
        d("GAAC_SCAN_THREADS", gaac::gpu::SCAN_THREADS as usize, "", "threads of the encoder's header CTA"),
        d("GAAC_DECODE_STAGES", gaac::gpu::DECODE_STAGES, "", "slots per decoder warp's cp.async ring"),
        d("GAAC_TILE_PAD", gaac::gpu::TILE_PAD, "", "padding words per row of a warp's [16, D] tile"),
        d(
            "GAAC_CALIBRATE_THREADS",
            gaac::gpu::CALIBRATE_THREADS as usize,
            "",
            "threads (one warp) per CTA of the calibration kernel",
        ),
    ]
}

impl Header {
    /// The header's text.
    pub(crate) fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "// Generated by `cargo xtask kernels` from {}: do not edit.", self.source);
        let _ =
            writeln!(s, "// The Rust constants are the definition; `cargo xtask kernels --check` fails when");
        let _ = writeln!(s, "// this file differs from what they give.");
        let _ = writeln!(s, "#pragma once");
        let _ = writeln!(s);
        for def in &self.defines {
            let value = if def.value > 0xffff { format!("{:#x}", def.value) } else { def.value.to_string() };
            let line = format!("#define {} {value}{}", def.name, def.suffix);
            if def.what.is_empty() {
                let _ = writeln!(s, "{line}");
            } else {
                let _ = writeln!(s, "{line:<56} // {}", def.what);
            }
        }
        if let Some((prefix, codes)) = &self.status {
            let _ = writeln!(s);
            let how = match codes.encoding {
                kvcodec_gpu::StatusEncoding::FirstCode => "the first problem's code (atomicCAS from 0)",
                kvcodec_gpu::StatusEncoding::Flags => "a flag per problem (atomicOr)",
            };
            let _ = writeln!(s, "// Device status values: {how}.");
            for v in codes.values {
                let line = format!("#define {prefix}_{} {}u", v.name, v.value);
                let _ = writeln!(s, "{line:<56} // {}", v.meaning);
            }
        }
        s
    }
}
