//! KV cache shapes and layouts.
//!
//! A KV cache holds, for each of `L` layers, a K and a V tensor of `H` KV heads x
//! `head_dim` D x `T` tokens of BF16 values. Two orders are in use:
//!
//! * **token-major** `[T, H, D]` per layer: vLLM's and SGLang's paged caches, and the
//!   storage order of [`KvCache`];
//! * **head-major** `[H, T, D]` per layer: GAAC's per-(head, channel) order (the GAAC paper).
//!
//! A **physical KV block** is B consecutive tokens of every layer's K and V: 2L groups of
//! `B x H x D` values (the ExANS paper, "Block Local Alignment"). In token-major order each
//! group is one contiguous slice, so [`KvCache::block`] borrows without copying. A
//! **page** is B tokens of one layer's K or V: a single group.

use crate::{Error, Result};

/// Which of a layer's two tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum KvKind {
    /// Keys (after RoPE, as a serving engine stores them).
    K,
    /// Values.
    V,
}

impl KvKind {
    /// Both kinds, K first: the order of groups inside a physical block.
    pub const BOTH: [KvKind; 2] = [KvKind::K, KvKind::V];

    /// `"k"` or `"v"`, as in the safetensors names `layer.{i}.k`.
    pub fn suffix(self) -> &'static str {
        match self {
            KvKind::K => "k",
            KvKind::V => "v",
        }
    }
}

/// Memory order of one layer's K or V tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLayout {
    /// `[T, H, D]`: all heads of token 0, then token 1, ... (vLLM, SGLang).
    TokenMajor,
    /// `[H, T, D]`: all tokens of head 0, then head 1, ... (GAAC).
    HeadMajor,
}

/// An order of a whole cache's words in one flat buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WordOrder {
    /// Layer-major: layer 0 K, layer 0 V, layer 1 K, ..., each tensor `[T, H, D]`
    /// ([`KvCache::concat_words`]; ExANS's device cache, whose physical KV blocks take
    /// B tokens of every tensor in this order).
    LayerMajor,
    /// Kind-major: every layer's K in layer order, then every layer's V (SplitZip's
    /// cache, two payloads of one codebook each).
    KindMajor,
}

/// The dimensions of a KV cache: L layers x {K, V} x H KV heads x D head_dim x T tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KvShape {
    /// L: transformer layers.
    pub layers: usize,
    /// H: KV heads per layer (after GQA grouping, not query heads).
    pub kv_heads: usize,
    /// D: values per head per token.
    pub head_dim: usize,
    /// T: tokens held.
    pub tokens: usize,
}

impl KvShape {
    /// Checks that no dimension is zero and that the total value count fits `usize`.
    ///
    /// # Errors
    /// [`Error::InvalidShape`].
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize, tokens: usize) -> Result<Self> {
        let shape = KvShape { layers, kv_heads, head_dim, tokens };
        shape.validate()?;
        Ok(shape)
    }

    /// See [`KvShape::new`].
    ///
    /// # Errors
    /// [`Error::InvalidShape`].
    pub fn validate(&self) -> Result<()> {
        let fail = |why| Error::InvalidShape {
            layers: self.layers,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            tokens: self.tokens,
            why,
        };
        if self.layers == 0 || self.kv_heads == 0 || self.head_dim == 0 || self.tokens == 0 {
            return Err(fail("every dimension must be at least 1"));
        }
        self.layers
            .checked_mul(2)
            .and_then(|n| n.checked_mul(self.kv_heads))
            .and_then(|n| n.checked_mul(self.head_dim))
            .and_then(|n| n.checked_mul(self.tokens))
            .and_then(|n| n.checked_mul(2))
            .ok_or_else(|| fail("the byte count overflows usize"))?;
        Ok(())
    }

    /// `[L, H, D, T]`, the order in which the codecs' errors report a shape.
    pub fn dims(&self) -> [usize; 4] {
        [self.layers, self.kv_heads, self.head_dim, self.tokens]
    }

    /// Values per token of one layer's K or V: `H x D`.
    pub fn values_per_token(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Values in one layer's K (or V) tensor: `T x H x D`.
    pub fn values_per_tensor(&self) -> usize {
        self.tokens * self.values_per_token()
    }

    /// Values in the whole cache: `2 x L x T x H x D`.
    pub fn total_values(&self) -> usize {
        2 * self.layers * self.values_per_tensor()
    }

    /// Physical blocks of `block_tokens` tokens, the last one possibly partial.
    pub fn block_count(&self, block_tokens: usize) -> usize {
        self.tokens.div_ceil(block_tokens.max(1))
    }
}

/// A KV cache in token-major order: for each layer a K and a V tensor `[T, H, D]` of
/// BF16 words (`u16`, bit-identical to `half::bf16`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCache {
    shape: KvShape,
    /// `tensors[2 * layer + kind]`, kind 0 = K, 1 = V; each `T * H * D` words.
    tensors: Vec<Vec<u16>>,
}

impl KvCache {
    /// Builds a cache from per-layer K and V tensors, each `[T, H, D]` token-major.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a bad shape, [`Error::LengthMismatch`] when the number
    /// of layers or a tensor's length does not match it.
    pub fn new(shape: KvShape, keys: Vec<Vec<u16>>, values: Vec<Vec<u16>>) -> Result<Self> {
        shape.validate()?;
        for (what, list) in [("layers of K", &keys), ("layers of V", &values)] {
            if list.len() != shape.layers {
                return Err(Error::LengthMismatch { what, got: list.len(), expected: shape.layers });
            }
        }
        let mut tensors = Vec::with_capacity(2 * shape.layers);
        for (k, v) in keys.into_iter().zip(values) {
            for t in [&k, &v] {
                if t.len() != shape.values_per_tensor() {
                    return Err(Error::LengthMismatch {
                        what: "K/V tensor",
                        got: t.len(),
                        expected: shape.values_per_tensor(),
                    });
                }
            }
            tensors.push(k);
            tensors.push(v);
        }
        Ok(KvCache { shape, tensors })
    }

    /// The cache's dimensions.
    pub fn shape(&self) -> KvShape {
        self.shape
    }

    /// One layer's K or V tensor, `[T, H, D]` token-major, `T * H * D` words.
    ///
    /// # Panics
    /// If `layer >= L` (an index, like slice indexing).
    pub fn tensor(&self, layer: usize, kind: KvKind) -> &[u16] {
        &self.tensors[2 * layer + kind as usize]
    }

    /// All 2L tensors in block order: layer 0 K, layer 0 V, layer 1 K, ...
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = (usize, KvKind, &[u16])> {
        self.tensors.iter().enumerate().map(|(i, t)| (i / 2, KvKind::BOTH[i % 2], t.as_slice()))
    }

    /// Every layer's K (or V) tensor in layer order, each `[T, H, D]`.
    pub fn tensors_of(&self, kind: KvKind) -> impl ExactSizeIterator<Item = &[u16]> {
        self.tensors.iter().skip(kind as usize).step_by(2).map(Vec::as_slice)
    }

    /// Every value of the cache concatenated in block order (layer 0 K, layer 0 V, ...).
    pub fn concat_words(&self) -> Vec<u16> {
        self.tensors.concat()
    }

    /// Every value of the cache concatenated in `order`, `2 L T H D` words.
    pub fn words_in(&self, order: WordOrder) -> Vec<u16> {
        match order {
            WordOrder::LayerMajor => self.concat_words(),
            WordOrder::KindMajor => {
                let mut out = Vec::with_capacity(self.shape.total_values());
                for kind in KvKind::BOTH {
                    for layer in 0..self.shape.layers {
                        out.extend_from_slice(self.tensor(layer, kind));
                    }
                }
                out
            }
        }
    }

    /// The cache whose words, concatenated in `order`, are `words` (the inverse of
    /// [`KvCache::words_in`]).
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a bad shape, [`Error::LengthMismatch`] unless `words`
    /// holds `shape.total_values()` words.
    pub fn from_words(shape: KvShape, order: WordOrder, words: Vec<u16>) -> Result<Self> {
        shape.validate()?;
        if words.len() != shape.total_values() {
            return Err(Error::LengthMismatch {
                what: "cache words",
                got: words.len(),
                expected: shape.total_values(),
            });
        }
        let per_tensor = shape.values_per_tensor();
        let tensor_at = |layer: usize, kind: KvKind| -> usize {
            match order {
                WordOrder::LayerMajor => 2 * layer + kind as usize,
                WordOrder::KindMajor => kind as usize * shape.layers + layer,
            }
        };
        let tensors = (0..2 * shape.layers)
            .map(|i| {
                let at = tensor_at(i / 2, KvKind::BOTH[i % 2]) * per_tensor;
                words[at..at + per_tensor].to_vec()
            })
            .collect();
        Ok(KvCache { shape, tensors })
    }

    /// One physical KV block: tokens `[index * B, min((index + 1) * B, T))` of every
    /// layer's K and V, as 2L borrowed groups in block order (layer 0 K, layer 0 V, ...),
    /// each `tokens_in_block x H x D` words. This is ExANS's coding unit.
    ///
    /// # Errors
    /// [`Error::BlockOutOfRange`] if `index` is past the last (possibly partial) block.
    pub fn block(&self, index: usize, block_tokens: usize) -> Result<Vec<&[u16]>> {
        let count = self.shape.block_count(block_tokens);
        if block_tokens == 0 || index >= count {
            return Err(Error::BlockOutOfRange { index, count, block_tokens });
        }
        let per_token = self.shape.values_per_token();
        let start = index * block_tokens * per_token;
        let end = ((index + 1) * block_tokens).min(self.shape.tokens) * per_token;
        Ok(self.tensors.iter().map(|t| &t[start..end]).collect())
    }

    /// One layer's K or V page: tokens `[index * B, ...)` of a single tensor,
    /// `tokens_in_page x H x D` words, token-major.
    ///
    /// # Errors
    /// [`Error::BlockOutOfRange`] if `index` is past the last page.
    pub fn page(&self, layer: usize, kind: KvKind, index: usize, block_tokens: usize) -> Result<&[u16]> {
        let mut block = self.block(index, block_tokens)?;
        Ok(block.swap_remove(2 * layer + kind as usize))
    }

    /// One layer's K or V tensor copied into `layout` order.
    pub fn tensor_in_layout(&self, layer: usize, kind: KvKind, layout: CacheLayout) -> Vec<u16> {
        let t = self.tensor(layer, kind);
        match layout {
            CacheLayout::TokenMajor => t.to_vec(),
            CacheLayout::HeadMajor => {
                transpose_token_head(t, self.shape.tokens, self.shape.kv_heads, self.shape.head_dim)
            }
        }
    }
}

/// Reorders `[A, B, D]` rows into `[B, A, D]`: token-major to head-major with
/// `(A, B) = (T, H)`, and back with `(A, B) = (H, T)`.
///
/// # Panics
/// If `src.len() != a * b * head_dim`.
pub fn transpose_token_head(src: &[u16], a: usize, b: usize, head_dim: usize) -> Vec<u16> {
    assert_eq!(src.len(), a * b * head_dim, "transpose: length does not match the shape");
    let mut out = Vec::with_capacity(src.len());
    for j in 0..b {
        for i in 0..a {
            let row = (i * b + j) * head_dim;
            out.extend_from_slice(&src[row..row + head_dim]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(layers: usize, heads: usize, dim: usize, tokens: usize) -> KvCache {
        let shape = KvShape::new(layers, heads, dim, tokens).unwrap();
        let n = shape.values_per_tensor();
        let make = |tag: usize| (0..n).map(|i| (tag * 10_000 + i) as u16).collect::<Vec<_>>();
        KvCache::new(
            shape,
            (0..layers).map(|l| make(2 * l)).collect(),
            (0..layers).map(|l| make(2 * l + 1)).collect(),
        )
        .unwrap()
    }

    #[test]
    fn blocks_cover_every_value_once_including_a_partial_tail() {
        let c = cache(2, 3, 4, 37);
        let mut seen = vec![Vec::new(); 4];
        for b in 0..c.shape().block_count(16) {
            let groups = c.block(b, 16).unwrap();
            assert_eq!(groups.len(), 4);
            for (g, group) in groups.iter().enumerate() {
                seen[g].extend_from_slice(group);
            }
        }
        assert_eq!(c.block(2, 16).unwrap()[0].len(), 5 * 12, "partial tail of 5 tokens");
        for (i, (_, _, t)) in c.tensors().enumerate() {
            assert_eq!(seen[i], t);
        }
        assert!(matches!(c.block(3, 16), Err(Error::BlockOutOfRange { index: 3, count: 3, .. })));
    }

    #[test]
    fn word_orders_round_trip() {
        let c = cache(3, 2, 4, 5);
        for order in [WordOrder::LayerMajor, WordOrder::KindMajor] {
            let words = c.words_in(order);
            assert_eq!(KvCache::from_words(c.shape(), order, words).unwrap(), c, "{order:?}");
        }
        // Kind-major: layer 2's V tensor is the sixth tensor.
        let per = c.shape().values_per_tensor();
        assert_eq!(&c.words_in(WordOrder::KindMajor)[5 * per..6 * per], c.tensor(2, KvKind::V));
        let err = KvCache::from_words(c.shape(), WordOrder::LayerMajor, vec![0; 3]).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "cache words", got: 3, .. }));
    }

    #[test]
    fn head_major_round_trips() {
        let c = cache(1, 3, 4, 5);
        let hm = c.tensor_in_layout(0, KvKind::V, CacheLayout::HeadMajor);
        // Head 1, token 2, channel 3 sits at ((1 * T) + 2) * D + 3 head-major.
        assert_eq!(hm[(5 + 2) * 4 + 3], c.tensor(0, KvKind::V)[(2 * 3 + 1) * 4 + 3]);
        assert_eq!(transpose_token_head(&hm, 3, 5, 4), c.tensor(0, KvKind::V));
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        assert!(matches!(KvShape::new(1, 0, 64, 8), Err(Error::InvalidShape { .. })));
        assert!(matches!(KvShape::new(usize::MAX, 2, 2, 2), Err(Error::InvalidShape { .. })));
        let shape = KvShape::new(2, 1, 1, 1).unwrap();
        let err = KvCache::new(shape, vec![vec![0]], vec![vec![0], vec![0]]).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "layers of K", got: 1, expected: 2 }));
        let err = KvCache::new(shape, vec![vec![0], vec![0, 1]], vec![vec![0], vec![0]]).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { what: "K/V tensor", got: 2, expected: 1 }));
    }
}
