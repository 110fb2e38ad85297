//! ZipFusion: a lossless resident format for BF16 KV caches that decode attention reads
//! in place, restoring each value in registers with a few integer operations ("ZipFusion:
//! Fusing Lossless KV Decompression with Attention for Efficient LLM Decoding"; byte
//! format in `docs/formats/zipfusion.md`). This crate is the CPU reference encoder and
//! decoder and the definition of the bytes; its GPU encoder and decoder ([`gpu`]) and the
//! fused decode-attention kernel ([`attention`]) read and write exactly these bytes.
//!
//! * A full **page** of 16 tokens holds one layer's K and V, cut per KV head into
//!   **blocks** of 16 tokens x 32 channels (spec §2, §5).
//! * A block is **coded** when all its exponents lie in a window `[b, b + 15]`, `b` the
//!   smallest rounded down to even: each value keeps its low byte (7 mantissa bits and
//!   the exponent's lowest bit) and a 4-bit code (sign and `d = (E - b) >> 1`), 12 bits
//!   per value; other blocks stay **raw** BF16 (the paper, "Compression format").
//! * Blocks are stored in the order of the `mma.m16n8k16` B fragments a warp loads (K for
//!   `Q·Kᵀ`, V for `P·V`), codes paired so that one mask and one add of `b/2` restore four
//!   high bytes at once ([`restore_high_bytes`]; the paper, "Restoring in registers";
//!   spec §3).
//! * Each page starts with per-(head, kind) metadata: the first block's offset and a byte
//!   per block, `b/2` or raw, so a kernel finds every block by prefix sums; offsets are
//!   relative to the page, so a page can move (the paper, "Memory management").
//! * The **zero-aware** variant ([`Variant::ZeroAware`], chosen per cache) also codes
//!   blocks whose exact zeros would make them raw: a reserved `d = 7` for exponent 0 and a
//!   window `[b, b + 13]` for the rest (issue 17, "Beyond the seed"; spec §2.2).
//! * A cache of T tokens is `floor(T / 16)` pages per layer and a BF16 tail of the
//!   unfilled last page, in one container (spec §7).
//!
//! ```
//! use bf16_field::KvCache;
//! use zipfusion::{EncodeOptions, Variant, decode_cache, encode_cache};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Or: let cache = bf16_field::io::read_kv_cache("fixtures/smollm2-135m-code.safetensors")?;
//! let shape = bf16_field::KvShape::new(2, 2, 64, 40)?; // L, H, D, T: 2 pages + 8 tail tokens
//! let tensor = |seed: u32| -> Vec<u16> {
//!     (0..shape.values_per_tensor() as u32).map(|i| 0x3c00 + ((i * seed) % 1021) as u16).collect()
//! };
//! let cache = KvCache::new(shape, vec![tensor(7), tensor(11)], vec![tensor(13), tensor(17)])?;
//! let options = EncodeOptions { variant: Variant::ZeroAware, checksum: true };
//! let container = encode_cache(&cache, &options)?;
//! assert_eq!(decode_cache(&container)?, cache);
//! // Damaged input is a typed error, never a panic:
//! assert!(decode_cache(&container[..container.len() - 1]).is_err());
//! # Ok(())
//! # }
//! ```
//!
//! One page at a time, as a paged pool holds it:
//!
//! ```
//! use zipfusion::{PageShape, Variant, decode_page, encode_page, page_info};
//! let shape = PageShape::new(1, 64)?; // one KV head of head_dim 64
//! let k: Vec<u16> = (0..shape.values_per_kind() as u16).map(|i| 0x3f00 | (i & 0x7f)).collect();
//! let v: Vec<u16> = k.iter().map(|w| w ^ 0x8000).collect();
//! let page = encode_page(&k, &v, shape, Variant::Base)?;
//! assert_eq!(page.len(), 16 + 4 * 768); // metadata, then 4 coded blocks of 12 bits per value
//! assert_eq!(page_info(&page, shape, Variant::Base)?.len, page.len());
//! assert_eq!(decode_page(&page, shape, Variant::Base)?, [k, v]);
//! # Ok::<(), zipfusion::Error>(())
//! ```
//!
//! **Integrity.** Decoders check every metadata byte, offset and length (spec §6, §7.4)
//! and never panic; block bodies have no redundancy, so a flipped low or code bit decodes
//! to another value unless the container carries its checksum
//! ([`EncodeOptions::checksum`], [`ZipfusionCodec::checksum`]; spec §7.3).
//!
//! **GPU.** [`gpu`]: page compression and page decode on the caller's stream, and the
//! whole-cache container through [`kvcodec_gpu::GpuCacheCodec`], byte-identical to this
//! CPU reference both ways, with the CPU's errors for invalid pages (spec §10).
//!
//! **Attention.** [`attention`]: fused decode attention over a paged ZipFusion cache (full
//! pages in slots, or read through `kvcodec_pool`'s page table), bit-identical to the BF16
//! twin of `kvcodec_attention` on the decoded copy; [`attention::decode_cpu`] is its CPU
//! path.

pub mod attention;
mod block;
mod cache;
mod codec;
mod error;
pub mod format;
pub mod gpu;
mod page;

pub use block::restore_high_bytes;
pub use cache::{
    CacheHeader, CacheInfo, EncodeOptions, cache_info, decode_cache, decode_cache_into, encode_cache,
    encode_words, max_encoded_len,
};
pub use codec::ZipfusionCodec;
pub use error::{Error, Result};
pub use format::{BlockMeta, PageShape, Variant, fragment_coords};
pub use page::{
    BlockCounts, PageInfo, decode_page, decode_page_into, encode_page, encode_page_into, page_info,
};
