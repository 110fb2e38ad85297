//! [`KeysOnlyCache`]: a cache with K and no V, as MLA models (DeepSeek-V2/V3's multi-head
//! latent attention) store it: per layer one "head" holding the compressed latent and
//! the RoPE key part (width 576 in DeepSeek-V3), from which K and V are both recomputed.
//!
//! It is a separate type, not a [`KvCache`](crate::KvCache) with an optional V, so that
//! every whole-cache API ([`CacheCodec`](crate::CacheCodec), [`WordOrder`](crate::WordOrder),
//! physical KV blocks) keeps taking K and V without a case that has none.
//!
//! Which codecs take it: SplitZip's payload API (`splitzip::encode` on
//! [`KeysOnlyCache::words`], with a codebook calibrated on them), which codes any flat
//! run of BF16 words. The whole-cache codecs (`SplitzipCodec`, `ExansCodec`, whose
//! formats hold K and V per layer) do not.

use crate::{Error, KvShape, Result};

/// A cache of L layers' K tensors, each `[T, H, D]` token-major BF16 words (`u16`), and
/// no V. `shape()` gives L, H, D and T; the cache holds `L x T x H x D` words
/// ([`KeysOnlyCache::value_count`]), half of what [`KvShape::total_values`] counts for a
/// cache with V.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeysOnlyCache {
    shape: KvShape,
    /// `keys[layer]`, `T * H * D` words each.
    keys: Vec<Vec<u16>>,
}

impl KeysOnlyCache {
    /// Builds a keys-only cache from per-layer K tensors, each `[T, H, D]` token-major.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a bad shape, [`Error::LengthMismatch`] when the number
    /// of layers or a tensor's length does not match it.
    pub fn new(shape: KvShape, keys: Vec<Vec<u16>>) -> Result<Self> {
        shape.validate()?;
        if keys.len() != shape.layers {
            return Err(Error::LengthMismatch {
                what: "layers of K",
                got: keys.len(),
                expected: shape.layers,
            });
        }
        if let Some(bad) = keys.iter().find(|k| k.len() != shape.values_per_tensor()) {
            return Err(Error::LengthMismatch {
                what: "K tensor",
                got: bad.len(),
                expected: shape.values_per_tensor(),
            });
        }
        Ok(KeysOnlyCache { shape, keys })
    }

    /// The cache's dimensions (L, H, D, T; there is no V).
    pub fn shape(&self) -> KvShape {
        self.shape
    }

    /// Words held: `L x T x H x D`.
    pub fn value_count(&self) -> usize {
        self.shape.layers * self.shape.values_per_tensor()
    }

    /// One layer's K tensor, `[T, H, D]` token-major, `T * H * D` words.
    ///
    /// # Panics
    /// If `layer >= L` (an index, like slice indexing).
    pub fn tensor(&self, layer: usize) -> &[u16] {
        &self.keys[layer]
    }

    /// Every layer's K tensor in layer order, each `[T, H, D]`.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = &[u16]> {
        self.keys.iter().map(Vec::as_slice)
    }

    /// Every word in one flat run, layer after layer (`L x T x H x D` words): what
    /// SplitZip's payload API (`splitzip::encode`) takes.
    pub fn words(&self) -> Vec<u16> {
        self.keys.concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_run_layer_after_layer_and_lengths_are_checked() {
        let shape = KvShape::new(2, 1, 576, 3).unwrap();
        let keys: Vec<Vec<u16>> = (0..2u16).map(|l| vec![l; 3 * 576]).collect();
        let cache = KeysOnlyCache::new(shape, keys.clone()).unwrap();
        assert_eq!(cache.value_count(), 2 * 3 * 576);
        assert_eq!(cache.words(), keys.concat());
        assert_eq!(cache.tensor(1), keys[1]);
        let err = KeysOnlyCache::new(shape, vec![vec![0; 3 * 576]]).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "layers of K", got: 1, expected: 2 }));
        let err = KeysOnlyCache::new(shape, vec![vec![0; 3 * 576], vec![0; 5]]).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "K tensor", got: 5, .. }));
    }
}
