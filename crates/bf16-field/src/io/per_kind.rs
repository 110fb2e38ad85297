//! The per-kind layouts (kvcodec's and transformers'): one tensor per layer and kind,
//! `[T, H, D]`, or transformers' `[1, H, T, D]` (a DynamicCache layer's batch of one,
//! head-major), read into token-major words.

use safetensors::SafeTensors;

use super::names::Naming;
use super::{bf16_tensors, le_words};
use crate::layout::transpose_token_head;
use crate::{Error, Result};

/// A per-kind tensor's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TensorDims {
    /// T.
    pub(super) tokens: usize,
    /// H.
    pub(super) kv_heads: usize,
    /// D.
    pub(super) head_dim: usize,
    /// Stored `[1, H, T, D]` (transposed on reading), not `[T, H, D]`.
    head_major: bool,
}

/// The dimensions of tensor `name` of `shape` in `naming`.
///
/// # Errors
/// [`Error::BatchNotOne`] for a transformers tensor of another batch than 1,
/// [`Error::WrongTensorShape`] for any other shape the naming does not take.
fn dims_of(naming: Naming, name: &str, shape: &[usize]) -> Result<TensorDims> {
    match (naming, shape) {
        (_, &[tokens, kv_heads, head_dim]) => {
            Ok(TensorDims { tokens, kv_heads, head_dim, head_major: false })
        }
        (Naming::Transformers, &[1, kv_heads, tokens, head_dim]) => {
            Ok(TensorDims { tokens, kv_heads, head_dim, head_major: true })
        }
        (Naming::Transformers, &[batch, _, _, _]) => Err(Error::BatchNotOne { name: name.into(), batch }),
        (Naming::Transformers, _) => Err(Error::WrongTensorShape {
            name: name.into(),
            got: shape.to_vec(),
            expected: "[T, H, D], or [1, H, T, D] as transformers' DynamicCache holds one sequence".into(),
        }),
        _ => Err(Error::WrongTensorShape {
            name: name.into(),
            got: shape.to_vec(),
            expected: "3 dimensions [T, H, D]".into(),
        }),
    }
}

/// Reads the tensors `names` of `file` (every one BF16 and of the first one's shape) as
/// token-major `[T, H, D]` words, in the order given.
///
/// # Errors
/// [`Error::WrongDtype`], [`Error::BatchNotOne`], [`Error::WrongTensorShape`].
pub(super) fn read(
    file: &SafeTensors<'_>,
    naming: Naming,
    names: &[String],
) -> Result<(TensorDims, Vec<Vec<u16>>)> {
    let (shape, data) = bf16_tensors(file, names)?;
    let dims = dims_of(naming, names.first().map_or("", String::as_str), &shape)?;
    let tensors = data
        .into_iter()
        .map(|bytes| {
            let words = le_words(bytes);
            if dims.head_major {
                transpose_token_head(&words, dims.kv_heads, dims.tokens, dims.head_dim)
            } else {
                words
            }
        })
        .collect();
    Ok((dims, tensors))
}
