//! Decode attention over a paged KV cache: one query token per sequence against every
//! cached token of its sequence, read through a block table (vLLM's paged cache).
//!
//! This crate holds what every attention kernel of the workspace shares: the problem's
//! types and checks ([`DecodeProblem`]), an FP64-accumulated [`reference()`], the CPU
//! fallback [`decode_cpu`], the error measure [`relative_l2_error`], and on the GPU the
//! BF16 twin ([`gpu`]): the kernel over plain BF16 pages that the fused kernels over GAAC
//! and ZipFusion pages are built from and compared with (the GAAC seed's "fused decode
//! attention" and the ZipFusion seed's "Fused kernel"; design notes in
//! `docs/formats/attention.md`).
//!
//! ```
//! use kvcodec_attention::{BlockTables, DecodeProblem, DecodeShape, PagedKv, decode_cpu, PAGE_TOKENS};
//!
//! let shape = DecodeShape { batch: 1, q_heads: 2, kv_heads: 1, head_dim: 64 };
//! let one = half::bf16::ONE.to_bits();
//! let q = vec![one; shape.q_values()];
//! // Two pages; the sequence's 20 tokens live in page 1, then page 0.
//! let (k, v) = (vec![one; 2 * shape.page_values()], vec![one; 2 * shape.page_values()]);
//! let problem = DecodeProblem {
//!     shape,
//!     q: &q,
//!     kv: PagedKv { k: &k, v: &v },
//!     tables: BlockTables { pages: &[1, 0], max_pages: 2, context_lens: &[20] },
//!     scale: 0.125,
//! };
//! let result = decode_cpu(&problem).unwrap();
//! assert!(result.out.iter().all(|&w| w == one)); // every V is 1: so is the average
//! assert!((result.lse[0] - (8.0 + 20f32.ln())).abs() < 1e-5); // 0.125 * 64 = 8 per token
//! # let _ = PAGE_TOKENS;
//! ```

mod error;
pub mod fused;
pub mod gpu;
pub mod pooled;
mod problem;
mod reference;

pub use error::{AttentionError, PoolFault};
pub use problem::{BlockTables, DecodeProblem, DecodeShape, HEAD_DIMS, MAX_GROUP, PAGE_TOKENS, PagedKv};
pub use reference::{Attention, decode_cpu, reference, relative_l2_error};
