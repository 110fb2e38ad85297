//! Shared ground for the kvcodec codecs, on the CPU only (no driver code: the GPU side
//! is the `kvcodec-gpu` crate): the BF16 field split and merge, entropy statistics, the
//! KV cache data model ([`KvShape`], [`KvCache`], [`WordOrder`], and [`KeysOnlyCache`]
//! for caches without V), safetensors I/O
//! ([`io`]), the container-header fields GAAC and ZipFusion share ([`header`]) and the
//! [`CacheCodec`] trait every codec implements.
//!
//! A BF16 word `w` is `s EEEEEEEE FFFFFFF` (1 sign bit, 8 exponent bits, 7 mantissa
//! bits). Every codec in the workspace separates it into two byte streams (the ExANS
//! paper, "Encoding Pipeline"):
//!
//! * the exponent `E = (w >> 7) & 0xff`, which has ~2.5-3 bits of entropy in KV caches;
//! * the sign+mantissa byte `SF = ((w >> 8) & 0x80) | (w & 0x7f)`, which stays ~8 bits.
//!
//! ```
//! let words = [0x3f80u16, 0xc000, 0x0001];
//! let (e, sf) = bf16_field::split_to_vec(&words);
//! assert_eq!(e, [0x7f, 0x80, 0x00]);
//! assert_eq!(sf, [0x00, 0x80, 0x01]);
//! let mut back = [0u16; 3];
//! bf16_field::merge(&e, &sf, &mut back).unwrap();
//! assert_eq!(back, words);
//! ```

#![forbid(unsafe_code)]

mod codec;
mod error;
mod field;
pub mod header;
pub mod integrity;
pub mod io;
mod keys_only;
pub mod layout;
pub mod stats;

pub use codec::CacheCodec;
pub use error::{Error, Result};
pub use field::{
    PARALLEL_CHUNK_VALUES, PARALLEL_MIN_VALUES, exponent_of, join, merge, merge_to_vec, sign_mantissa_of,
    split, split_to_vec, words_of,
};
pub use keys_only::KeysOnlyCache;
pub use layout::{CacheLayout, KvCache, KvKind, KvShape, WordOrder};
