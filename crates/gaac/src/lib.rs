//! GAAC: a lossless BF16 KV cache format of calibrated per-channel exponent bases and
//! 3/4-bit offsets, made for decode attention that rebuilds values in registers ("GAAC:
//! Lossless KV Compression for Bandwidth-Efficient LLM Inference on Personal Devices",
//! arXiv 2610.38210; byte format in `docs/formats/gaac.md`). This crate is the CPU
//! reference (calibration, encoder, decoder and the definition of the bytes) and its GPU
//! encoder and decoder ([`gpu`]), which write and read exactly these bytes.
//!
//! * **Bases** ([`Bases`]): one per (layer, K|V, KV head, channel), the `b` that holds
//!   the most calibration exponents in `[b, b + 7]` (spec §2.1); saved as JSON (spec §6),
//!   or calibrated on the cache's own first tokens and flagged in the header.
//! * **Groups** of 8 channels of one token and head share a 2-bit tag (spec §2.2): 3-bit
//!   offsets from each channel's base, 4-bit offsets from a window starting at `b - 4`,
//!   or raw exponents; sign+mantissa bytes are unchanged. The common case is 11.25 bits
//!   per value.
//! * **Blocks** of 16 tokens x D channels of one (layer, kind, head) are coded in uniform
//!   planes (spec §3): a tag plane, a 3-bit plane holding every group's low exponent
//!   bits, the sign+mantissa plane, then one byte per 4-bit group and five per raw group.
//!   Planes are in `mma.m16n8k16` B-fragment order, one for K and one for V, so a warp
//!   restores a block without branching on tags in the common path.
//! * **Slots** (spec §4): every full block owns a slot of one fixed capacity; a block
//!   that does not fit is kept raw in an overflow section; the unfilled last block's
//!   tokens stay BF16 (the paper, "Block-wise compression").
//!
//! ```
//! use bf16_field::KvCache;
//! use gaac::{Bases, EncodeOptions, cache_info, decode_cache, encode_cache};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Or: let cache = bf16_field::io::read_kv_cache("fixtures/smollm2-135m-code.safetensors")?;
//! let shape = bf16_field::KvShape::new(2, 2, 64, 40)?; // L, H, D, T: 2 blocks + 8 tail tokens
//! let tensor = |seed: u32| -> Vec<u16> {
//!     (0..shape.values_per_tensor() as u32).map(|i| 0x3c00 + ((i * seed) % 1021) as u16).collect()
//! };
//! let cache = KvCache::new(shape, vec![tensor(7), tensor(11)], vec![tensor(13), tensor(17)])?;
//! // Self-calibrated on the cache's first tokens:
//! let container = encode_cache(&cache, &EncodeOptions::default())?;
//! assert_eq!(decode_cache(&container)?, cache);
//! // With bases calibrated offline, and the checksum:
//! let bases = Bases::calibrate(&cache);
//! let options = EncodeOptions { bases: Some(bases), checksum: true, ..Default::default() };
//! let container = encode_cache(&cache, &options)?;
//! assert_eq!(decode_cache(&container)?, cache);
//! println!("{}", cache_info(&container)?); // ratios, blocks and groups by kind
//! // Damaged input is a typed error, never a panic:
//! assert!(decode_cache(&container[..container.len() - 1]).is_err());
//! # Ok(())
//! # }
//! ```
//!
//! **Integrity.** Decoders check every header field, status, tag, length and padding
//! byte (spec §7) and never panic; planes have no redundancy, so a flipped bit decodes
//! to another value unless the container carries its checksum
//! ([`EncodeOptions::checksum`], [`GaacCodec::checksum`]). Format version 2's checksum
//! (the Adler-32 of the bytes after the header; what the encoders write unless
//! [`EncodeOptions::version`] asks for 1) catches every corrupted byte; version 1's (the
//! Adler-32 of the values) every flipped bit but not every corrupted byte: about 0.1-0.4% of
//! single-byte replacements in the planes move several values in a pattern it cannot
//! see (spec §7.3). Every decoder reads both versions.
//!
//! **GPU.** [`gpu`]: the whole-cache encoder and decoder through
//! [`kvcodec_gpu::GpuCacheCodec`] (encoding needs given bases), byte-identical to this CPU
//! reference both ways, with the CPU's errors for invalid containers; and
//! [`gpu::seal_blocks_device`], one block of every (layer, kind, head) sealed from a BF16
//! tail on the caller's stream (spec §9).
//!
//! **Attention.** [`attention`]: fused decode attention over a paged GAAC cache (pages of
//! `2 H` blocks in slots, as sealing writes them; spec §10), bit-identical to the BF16 twin
//! of `kvcodec_attention` on the decoded copy.

pub mod attention;
mod bases;
mod block;
mod cache;
mod codec;
mod error;
pub mod format;
pub mod gpu;

pub use bases::Bases;
pub use block::{TagCounts, block_info};
pub use cache::{
    CacheHeader, CacheInfo, EncodeOptions, Sections, cache_info, decode_cache, decode_cache_into,
    encode_cache, encode_words, max_encoded_len,
};
pub use codec::GaacCodec;
pub use error::{Error, Result};
pub use format::{BlockShape, Tag, fragment_coords};
