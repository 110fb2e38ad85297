//! ExANS: lossless compression of BF16 KV cache blocks by block-local exponent centering
//! and 8-partition, 32-lane interleaved rANS ("ExANS: Exponent Aligned Asymmetric Numeral
//! Systems"; byte format in `docs/formats/exans.md`). The CPU code here is the reference;
//! the CUDA kernels (module [`gpu`]) match it byte for byte.
//!
//! A physical KV block (B tokens of every layer's K and V: 2L groups of `B x H x D`
//! values) becomes one self-contained record:
//!
//! 1. each group's center `c_g` is its most frequent exponent (smallest on a tie); each
//!    exponent `E` becomes the symbol `C = (E + 127 - c_g) mod 256` (spec §2);
//! 2. one sparse model per block, quantized to `2^12` by an integer-only optimal
//!    quantizer (spec §5);
//! 3. the block's symbol stream is cut into 8 partitions, each coded by 32 interleaved
//!    rANS lanes (32-bit state, 16-bit words) sharing one word stream (spec §6);
//! 4. the sign+mantissa bytes follow raw, except the block's first (up to) 512, which the
//!    lanes' initial rANS states carry (format version 4, spec §6.4); a block that would
//!    not shrink is stored raw (spec §7). Records of versions 2 and 3 are still read.
//!
//! ```
//! use exans::{BlockShape, decode_block, encode_block};
//! let shape = BlockShape { layers: 1, kv_heads: 2, head_dim: 64, tokens: 16 };
//! // 2L = 2 groups of B x H x D = 2048 values: smooth data around 1.0.
//! let k: Vec<u16> = (0..2048u32).map(|i| 0x3f00 + (i * 37 % 251) as u16).collect();
//! let v: Vec<u16> = (0..2048u32).map(|i| 0xbe80 + (i * 11 % 509) as u16).collect();
//! let record = encode_block(&[&k, &v], shape).unwrap();
//! assert!(record.len() < 2 * 4096);
//! let (got_shape, words) = decode_block(&record).unwrap();
//! assert_eq!(got_shape, shape);
//! assert_eq!(&words[..2048], &k[..]);
//! assert_eq!(&words[2048..], &v[..]);
//! ```
//!
//! A whole cache goes through [`encode_cache`] / [`decode_cache`], which code blocks in
//! parallel and lay the records out behind an offset index (spec §8); a real cache is
//! read from safetensors with [`bf16_field::io::read_kv_cache`]:
//!
//! ```
//! use bf16_field::{KvCache, KvShape};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Or: let cache = bf16_field::io::read_kv_cache("fixtures/smollm2-135m-code.safetensors")?;
//! let shape = KvShape::new(2, 2, 64, 40)?; // L = 2 layers, H = 2 KV heads, D = 64, T = 40 tokens
//! let tensor = |seed: u32| -> Vec<u16> {
//!     (0..shape.values_per_tensor() as u32).map(|i| 0x3c00 + ((i * seed) % 1021) as u16).collect()
//! };
//! let cache = KvCache::new(shape, vec![tensor(7), tensor(11)], vec![tensor(13), tensor(17)])?;
//! let container = exans::encode_cache(&cache, 16)?; // B = 16 tokens per block: 3 records
//! assert_eq!(exans::decode_cache(&container)?, cache);
//! // Damaged input is a typed error, never a panic:
//! assert!(exans::decode_cache(&container[..container.len() - 1]).is_err());
//! # Ok(())
//! # }
//! ```
//!
//! **Integrity.** Truncation, damaged headers, offsets, models and rANS streams are
//! detected (spec §6.3, §10), but a flipped bit in the raw sign+mantissa bytes (in the
//! section or in a lane's payload, spec §6.4) or a center, or one that leaves every rANS
//! check intact (in version 4 the final check accepts any state in `[2^16, 2^16 + 256^c)`
//! for a lane carrying `c` bytes, so a damaged word read in a lane's last steps can pass),
//! decodes to
//! a different cache without an error, unless the records carry their checksum
//! ([`EncodeOptions::checksum`], [`ExansCodec::checksum`]; spec §3): the Adler-32 of each
//! block, verified by every decoder ([`Error::ChecksumMismatch`]).
//!
//! **GPU.** [`gpu::encode`] encodes a device cache into the same container bytes (no host
//! synchronisation, CUDA-graph capturable); [`gpu`] decodes a container on the device
//! ([`gpu::decode_device`]) or streams one from host memory into a device cache with the
//! transfer overlapped ([`gpu::HostDecoder`]). Both need a CUDA driver at run time (cudarc,
//! loaded dynamically) and a GPU of compute capability 8.0 or later, and take cudarc 0.19
//! buffer types. Decoding an offloaded cache kept in page-locked memory:
//!
//! ```no_run
//! use exans::gpu::{DeviceIndex, HostContainer, HostDecodeOptions, HostDecoder};
//! use kvcodec_gpu::GpuContext;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let container: Vec<u8> = Vec::new();
//! let gpu = GpuContext::new(0)?; // device 0; Err without a GPU or driver
//! let pinned = gpu.pinned_copy(&container)?; // where an offloaded cache would live
//! let index = DeviceIndex::new(&gpu, &container)?; // validates every record on the CPU
//! let mut out = gpu.stream().alloc_zeros::<u16>(index.values())?; // 2 L T H D words
//! let mut decoder = HostDecoder::new(&gpu, HostDecodeOptions::default())?;
//! decoder
//!     .decode(&gpu, HostContainer::Pinned(pinned.as_slice()?), &index, &mut out.as_view_mut())?
//!     .finish()?; // one host synchronisation; the CPU decoder's error on bad input
//! # Ok(())
//! # }
//! ```

mod codec;
mod container;
mod error;
pub mod format;
pub mod gpu;
mod model;
mod rans;
mod record;

pub use codec::ExansCodec;
pub use container::{
    ContainerInfo, container_info, decode_cache, decode_cache_into, encode_cache, encode_cache_with,
    encode_words_with,
};
pub use error::{Error, Result};
pub use model::{Model, log2_q32};
pub use record::{
    BlockShape, EncodeOptions, RawPolicy, RecordInfo, block_checksum, center_exponent, center_symbol,
    decode_block, decode_block_into, encode_block, encode_block_with, group_center, inspect_record,
    record_shape,
};

/// The README's library example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
