//! SplitZip: a lossless, GPU-friendly codec for BF16 KV caches ("SplitZip: Ultra-Fast
//! Lossless KV Compression for Disaggregated LLM Serving", Guo and Joshi, NeurIPS 2026,
//! arXiv 2605.01708). This crate is the CPU reference implementation and the
//! definition of the byte format; GPU kernels must match it byte for byte.
//!
//! A BF16 word is split into its 8-bit exponent and its sign+mantissa byte
//! ([`bf16_field::exponent_of`], [`bf16_field::sign_mantissa_of`]). The sign+mantissa
//! byte is stored raw. The exponent is replaced by a fixed 4-bit code: its index in a
//! [`Codebook`] of the 16 most frequent exponents, calibrated offline. Values whose
//! exponent is not in the codebook are *escapes*: code 0 plus a (position, exponent)
//! entry in a sparse list kept per chunk of [`DEFAULT_CHUNK_SIZE`] values, located by a
//! prefix sum so a GPU thread block finds its chunk's escapes without a scan
//! (the paper's "Abstract" and "Highlights"). The ideal ratio is 16/12 = 1.333; the escape
//! cost is 24 bits each and the chunk metadata 32 bits per chunk.
//!
//! The byte format is specified in `docs/formats/splitzip.md`; [`format`](mod@format) holds every
//! constant and the section layout.
//!
//! ```
//! use splitzip::{Codebook, DEFAULT_CHUNK_SIZE, decode, encode};
//!
//! // Calibrate once on separate data (the paper's protocol), then encode many payloads.
//! let calibration: Vec<u16> = (0..4096u32).map(|i| half::bf16::from_f32((i as f32 - 2048.0) / 300.0).to_bits()).collect();
//! let codebook = Codebook::calibrate(&[&calibration]).unwrap();
//!
//! let words: Vec<u16> = (0..10_000u32).map(|i| half::bf16::from_f32((i as f32).sin()).to_bits()).collect();
//! let payload = encode(&words, &codebook, DEFAULT_CHUNK_SIZE).unwrap();
//! assert!(payload.len() < 2 * words.len());
//! assert_eq!(decode(&payload).unwrap(), words);
//!
//! // A receiver can size its buffer from the 128-byte header alone.
//! let header = splitzip::PayloadHeader::parse(&payload[..128]).unwrap();
//! assert_eq!((header.value_count, header.encoded_len()), (10_000, payload.len() as u64));
//! ```

mod codebook;
mod codec;
mod decode;
mod encode;
mod error;
pub mod format;
pub mod gpu;
mod header;

pub use codebook::Codebook;
pub use codec::SplitzipCodec;
pub use decode::{decode, decode_bf16, decode_bf16_into, decode_into};
pub use encode::{
    EncodeOptions, encode, encode_bf16, encode_bf16_into, encode_into, encode_into_with, encode_with,
    max_encoded_len,
};
pub use error::{CodebookError, DecodeError, EncodeError, Error};
pub use format::{CodedLayout, DEFAULT_CHUNK_SIZE, HEADER_LEN, Layout, Section};
pub use header::PayloadHeader;
