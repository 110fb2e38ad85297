//! vLLM's blocks-first paged cache: one tensor per layer of shape
//! `[num_blocks, 2, block_size, H, D]` (index 1: 0 = K, 1 = V; the NHD layout FlashInfer
//! takes and vLLM's FlashInfer backend allocates), read into token-major K and V by
//! taking the blocks in block-table order.

use safetensors::SafeTensors;

use super::{LoadOptions, bf16_tensors, le_words};
use crate::{Error, KvCache, KvKind, KvShape, Result};

/// The dimensions of a layer's paged tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PagedDims {
    blocks: usize,
    block_size: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl PagedDims {
    /// # Errors
    /// [`Error::WrongTensorShape`] unless `shape` is `[N, 2, B, H, D]`.
    fn of(name: &str, shape: &[usize]) -> Result<Self> {
        match *shape {
            [blocks, 2, block_size, kv_heads, head_dim] => {
                Ok(PagedDims { blocks, block_size, kv_heads, head_dim })
            }
            _ => Err(Error::WrongTensorShape {
                name: name.into(),
                got: shape.to_vec(),
                expected: "[num_blocks, 2, block_size, kv_heads, head_dim] (index 1: 0 = K, 1 = V)".into(),
            }),
        }
    }
}

/// The physical blocks holding the sequence's tokens in token order, and the token count
/// T: `options.block_table` (default: every block in index order) and `options.tokens`
/// (default: every slot of those blocks).
///
/// # Errors
/// [`Error::BlockTableOutOfRange`], [`Error::BlockTableRepeat`],
/// [`Error::TokensExceedCapacity`].
fn block_order(dims: PagedDims, options: &LoadOptions) -> Result<(Vec<usize>, usize)> {
    let order = options.block_table.clone().unwrap_or_else(|| (0..dims.blocks).collect());
    let mut first_position = vec![None; dims.blocks];
    for (position, &block) in order.iter().enumerate() {
        let seen = first_position.get_mut(block).ok_or(Error::BlockTableOutOfRange {
            position,
            block,
            blocks: dims.blocks,
        })?;
        if let Some(first) = *seen {
            return Err(Error::BlockTableRepeat { block, first, second: position });
        }
        *seen = Some(position);
    }
    let capacity = order.len() * dims.block_size;
    let tokens = options.tokens.unwrap_or(capacity);
    if tokens > capacity {
        return Err(Error::TokensExceedCapacity {
            tokens,
            capacity,
            blocks: order.len(),
            block_size: dims.block_size,
        });
    }
    Ok((order, tokens))
}

/// Reads the per-layer paged tensors `names` (layer order; every one BF16 and of the
/// first one's shape) as a cache of T tokens.
///
/// # Errors
/// [`Error::WrongDtype`], [`Error::WrongTensorShape`], the block-table errors of
/// [`block_order`], [`Error::InvalidShape`] for a zero dimension or T = 0.
pub(super) fn read(file: &SafeTensors<'_>, names: &[String], options: &LoadOptions) -> Result<KvCache> {
    let (tensor_shape, layers) = bf16_tensors(file, names)?;
    let dims = PagedDims::of(names.first().map_or("", String::as_str), &tensor_shape)?;
    let (order, tokens) = block_order(dims, options)?;
    let shape = KvShape::new(names.len(), dims.kv_heads, dims.head_dim, tokens)?;
    let per_token = shape.values_per_token();
    let gather = |data: &[u8], kind: KvKind| -> Vec<u16> {
        let mut words = Vec::with_capacity(shape.values_per_tensor());
        for (j, &block) in order.iter().enumerate().take(tokens.div_ceil(dims.block_size)) {
            let rows = dims.block_size.min(tokens - j * dims.block_size);
            // Element (block, kind, row, h, d) sits at ((block * 2 + kind) * B + row) * H * D + h * D + d.
            let start = (block * 2 + kind as usize) * dims.block_size * per_token;
            words.extend(le_words(&data[2 * start..2 * (start + rows * per_token)]));
        }
        words
    };
    let keys = layers.iter().map(|data| gather(data, KvKind::K)).collect();
    let values = layers.iter().map(|data| gather(data, KvKind::V)).collect();
    KvCache::new(shape, keys, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: PagedDims = PagedDims { blocks: 4, block_size: 16, kv_heads: 2, head_dim: 8 };

    fn options(tokens: Option<usize>, table: Option<Vec<usize>>) -> LoadOptions {
        LoadOptions { tokens, block_table: table }
    }

    #[test]
    fn tokens_default_to_the_blocks_capacity() {
        assert_eq!(block_order(DIMS, &options(None, None)).unwrap(), (vec![0, 1, 2, 3], 64));
        assert_eq!(block_order(DIMS, &options(Some(20), Some(vec![3, 1]))).unwrap(), (vec![3, 1], 20));
        assert_eq!(block_order(DIMS, &options(None, Some(vec![2]))).unwrap(), (vec![2], 16));
    }

    #[test]
    fn bad_tables_and_token_counts_are_typed() {
        let err = block_order(DIMS, &options(Some(65), None)).unwrap_err();
        assert!(matches!(
            err,
            Error::TokensExceedCapacity { tokens: 65, capacity: 64, blocks: 4, block_size: 16 }
        ));
        let err = block_order(DIMS, &options(Some(17), Some(vec![0]))).unwrap_err();
        assert!(matches!(err, Error::TokensExceedCapacity { capacity: 16, .. }));
        let err = block_order(DIMS, &options(None, Some(vec![1, 4]))).unwrap_err();
        assert!(matches!(err, Error::BlockTableOutOfRange { position: 1, block: 4, blocks: 4 }));
        let err = block_order(DIMS, &options(None, Some(vec![2, 0, 2]))).unwrap_err();
        assert!(matches!(err, Error::BlockTableRepeat { block: 2, first: 0, second: 2 }));
    }
}
