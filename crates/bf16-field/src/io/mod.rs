//! KV cache tensor files in the safetensors format.
//!
//! The layout is recognized by the tensor names; every tensor is BF16 (stored
//! little-endian) and the free-form `__metadata__` map is returned by
//! [`read_kv_metadata`] (kvcodec's fixtures record the model there, under `model`).
//! Accepted layouts, `i` running over `0..L` without gaps (decimal, no leading zeros):
//!
//! | layout ([`KvLayout`]) | tensor names | shape of each |
//! |---|---|---|
//! | kvcodec's own, what [`write_kv_cache`] writes | `layer.{i}.k`, `layer.{i}.v` | `[T, H, D]` |
//! | transformers | `model.layers.{i}.self_attn.k_cache`, `model.layers.{i}.self_attn.v_cache` | `[T, H, D]`, or `[1, H, T, D]` (a DynamicCache layer: batch 1, head-major; transposed on reading) |
//! | vLLM, blocks-first paged | one per layer: `kv_cache.{i}`, `layers.{i}.kv_cache` or `model.layers.{i}.self_attn.attn` (vLLM's attention layer name) | `[num_blocks, 2, block_size, H, D]`, index 1: 0 = K, 1 = V |
//!
//! In the two per-kind layouts, a file without a single V tensor is a **keys-only**
//! cache (an MLA latent cache: K of one "head" of width 576 in DeepSeek-V3, no V), read
//! as [`KvFile::KeysOnly`]; any V makes every layer need both.
//!
//! A **paged** cache's tokens run block after block in the order of
//! [`LoadOptions::block_table`] (vLLM's block table row of the sequence; default: every
//! block in index order), and the sequence holds [`LoadOptions::tokens`] of them
//! (default: every slot of those blocks). The options apply to the paged layout only.
//!
//! Strict: every tensor of the file is read or named in an error. A tensor that follows
//! none of the names above (`layer.1.q`, `layer.01.k`, `position_ids`) is rejected
//! ([`Error::UnexpectedTensors`]), never skipped, and so is a gap in the layer numbers
//! ([`Error::MissingLayer`]), a K without its V ([`Error::UnpairedTensor`]), a file
//! mixing two layouts ([`Error::MixedLayouts`]) and a zero dimension
//! ([`Error::WrongTensorShape`]). A file in no layout gets
//! [`Error::UnrecognizedLayout`], which lists what it holds.
//!
//! The whole-cache codecs take [`KvCache`]: [`read_kv_cache`] and [`kv_cache_from_bytes`]
//! return it and reject a keys-only file with [`Error::KeysOnly`]. [`read_kv_file`] and
//! [`kv_file_from_bytes`] take [`LoadOptions`] and return either kind of cache.

mod listing;
mod names;
mod paged;
mod per_kind;

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

pub use listing::{TensorInfo, TensorList};
use names::Plan;

use crate::{Error, KeysOnlyCache, KvCache, KvKind, KvShape, Result};

/// The tensor name of layer `layer`'s K or V in kvcodec's layout: `layer.{i}.k` /
/// `layer.{i}.v`.
pub fn tensor_name(layer: usize, kind: KvKind) -> String {
    format!("layer.{layer}.{}", kind.suffix())
}

/// A KV file layout the loaders recognize (see the module docs for names and shapes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KvLayout {
    /// `layer.{i}.k` / `layer.{i}.v`, `[T, H, D]`.
    Kvcodec,
    /// `model.layers.{i}.self_attn.k_cache` / `v_cache`, `[T, H, D]` or `[1, H, T, D]`.
    Transformers,
    /// vLLM's per-layer blocks-first cache, `[num_blocks, 2, block_size, H, D]`.
    VllmPaged,
}

impl fmt::Display for KvLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvLayout::Kvcodec => "kvcodec layout (`layer.{i}.k` / `layer.{i}.v`)",
            KvLayout::Transformers => {
                "transformers layout (`model.layers.{i}.self_attn.k_cache` / `v_cache`)"
            }
            KvLayout::VllmPaged => {
                "vLLM paged layout (one [num_blocks, 2, block_size, H, D] tensor per layer)"
            }
        })
    }
}

/// How to read a paged cache (the module docs' vLLM layout); the other layouts take
/// only the default, [`Error::OptionsNotApplicable`] otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// T, the tokens the sequence holds; default: every slot of the blocks read
    /// (block table length, or `num_blocks`, x `block_size`). More than that is
    /// [`Error::TokensExceedCapacity`]; 0 is [`Error::InvalidShape`].
    pub tokens: Option<usize>,
    /// The sequence's physical block indices in token order (vLLM's block table row):
    /// tokens `[j * block_size, (j + 1) * block_size)` are in block `block_table[j]`.
    /// Default: `0..num_blocks`. An index `>= num_blocks` is
    /// [`Error::BlockTableOutOfRange`], one listed twice [`Error::BlockTableRepeat`].
    pub block_table: Option<Vec<usize>>,
}

/// What a KV file holds: a cache with K and V, or a keys-only one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvFile {
    /// K and V for every layer: what every codec's whole-cache API takes.
    KeysAndValues(KvCache),
    /// K and no V (an MLA latent cache): SplitZip's payload API takes its words.
    KeysOnly(KeysOnlyCache),
}

impl KvFile {
    /// The dimensions (L, H, D, T) of either kind of cache.
    pub fn shape(&self) -> KvShape {
        match self {
            KvFile::KeysAndValues(cache) => cache.shape(),
            KvFile::KeysOnly(cache) => cache.shape(),
        }
    }

    /// The cache with K and V, for the codecs that need both.
    ///
    /// # Errors
    /// [`Error::KeysOnly`] for a keys-only cache.
    pub fn into_kv_cache(self) -> Result<KvCache> {
        match self {
            KvFile::KeysAndValues(cache) => Ok(cache),
            KvFile::KeysOnly(cache) => Err(Error::KeysOnly { shape: cache.shape() }),
        }
    }
}

/// Every tensor of a file as errors list it, in name order.
fn listing(file: &SafeTensors<'_>) -> Vec<TensorInfo> {
    let mut tensors: Vec<TensorInfo> = file
        .iter()
        .map(|(name, view)| TensorInfo {
            name: name.to_owned(),
            dtype: view.dtype().to_string(),
            shape: view.shape().to_vec(),
        })
        .collect();
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    tensors
}

/// The shape and the little-endian bytes of the BF16 tensors `names`, which all have
/// the first one's shape (empty when `names` is).
///
/// # Errors
/// [`Error::WrongDtype`] for another dtype, [`Error::WrongTensorShape`] for a zero
/// dimension or a shape other than the first's, [`Error::Safetensors`] for a tensor that
/// is absent.
fn bf16_tensors<'data>(
    file: &SafeTensors<'data>,
    names: &[String],
) -> Result<(Vec<usize>, Vec<&'data [u8]>)> {
    let mut first_shape = None;
    let mut data = Vec::with_capacity(names.len());
    for name in names {
        let view = file.tensor(name)?;
        if view.dtype() != Dtype::BF16 {
            return Err(Error::WrongDtype { name: name.clone(), dtype: view.dtype().to_string() });
        }
        // A zero dimension would let the others claim any size without a byte of data,
        // and the readers allocate and loop by the dimensions.
        if view.shape().contains(&0) {
            return Err(Error::WrongTensorShape {
                name: name.clone(),
                got: view.shape().to_vec(),
                expected: "every dimension at least 1".into(),
            });
        }
        let expected = first_shape.get_or_insert_with(|| view.shape().to_vec());
        if view.shape() != expected.as_slice() {
            return Err(Error::WrongTensorShape {
                name: name.clone(),
                got: view.shape().to_vec(),
                expected: format!("{expected:?} like `{}`", names[0]),
            });
        }
        data.push(view.data());
    }
    Ok((first_shape.unwrap_or_default(), data))
}

/// BF16 words from little-endian bytes; the data may be unaligned, so copied bytewise.
fn le_words(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
}

/// Parses a KV file in any layout of the module docs from the bytes of a safetensors
/// file: K and V, or keys only.
///
/// # Errors
/// [`Error::Safetensors`] for a malformed container; the name errors of the module docs
/// ([`Error::UnrecognizedLayout`], [`Error::MixedLayouts`], [`Error::UnexpectedTensors`],
/// [`Error::MissingLayer`], [`Error::UnpairedTensor`]); [`Error::WrongDtype`] for a tensor
/// that is not BF16; [`Error::WrongTensorShape`] for a shape the layout does not take or
/// that differs from the first tensor's; [`Error::BatchNotOne`]; [`Error::InvalidShape`]
/// for a zero dimension; [`Error::OptionsNotApplicable`] for options on an unpaged file,
/// and [`LoadOptions`]'s errors on a paged one.
pub fn kv_file_from_bytes(bytes: &[u8], options: &LoadOptions) -> Result<KvFile> {
    let file = SafeTensors::deserialize(bytes)?;
    match names::plan(&listing(&file))? {
        Plan::Paged { tensors } => Ok(KvFile::KeysAndValues(paged::read(&file, &tensors, options)?)),
        Plan::PerKind { naming, keys, values } => {
            if *options != LoadOptions::default() {
                return Err(Error::OptionsNotApplicable { layout: naming.layout() });
            }
            let layers = keys.len();
            let names: Vec<String> = keys.into_iter().chain(values.into_iter().flatten()).collect();
            let (dims, mut tensors) = per_kind::read(&file, naming, &names)?;
            let shape = KvShape::new(layers, dims.kv_heads, dims.head_dim, dims.tokens)?;
            let values = tensors.split_off(layers);
            if values.is_empty() {
                Ok(KvFile::KeysOnly(KeysOnlyCache::new(shape, tensors)?))
            } else {
                Ok(KvFile::KeysAndValues(KvCache::new(shape, tensors, values)?))
            }
        }
    }
}

/// Reads a KV file in any layout of the module docs: K and V, or keys only.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, then as [`kv_file_from_bytes`].
pub fn read_kv_file(path: impl AsRef<Path>, options: &LoadOptions) -> Result<KvFile> {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    kv_file_from_bytes(&bytes, options)
}

/// Parses a cache with K and V from the bytes of a safetensors file in any layout of the
/// module docs, a paged one with the default [`LoadOptions`].
///
/// # Errors
/// As [`kv_file_from_bytes`], and [`Error::KeysOnly`] for a file with no V.
pub fn kv_cache_from_bytes(bytes: &[u8]) -> Result<KvCache> {
    kv_file_from_bytes(bytes, &LoadOptions::default())?.into_kv_cache()
}

/// Reads a cache with K and V from a safetensors file (see the module docs for the
/// layouts).
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, then as [`kv_cache_from_bytes`].
pub fn read_kv_cache(path: impl AsRef<Path>) -> Result<KvCache> {
    read_kv_file(path, &LoadOptions::default())?.into_kv_cache()
}

/// The free-form `__metadata__` map of a safetensors file (empty when it has none),
/// without reading the tensors.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, [`Error::Safetensors`] for a malformed
/// header.
pub fn read_kv_metadata(path: impl AsRef<Path>) -> Result<HashMap<String, String>> {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    let (_, header) = SafeTensors::read_metadata(&bytes)?;
    Ok(header.metadata().clone().unwrap_or_default())
}

/// Serializes a KV cache to safetensors bytes, with optional `__metadata__` entries.
///
/// # Errors
/// [`Error::Safetensors`] if the container cannot be built.
pub fn kv_cache_to_bytes(cache: &KvCache, metadata: Option<HashMap<String, String>>) -> Result<Vec<u8>> {
    let s = cache.shape();
    let shape = vec![s.tokens, s.kv_heads, s.head_dim];
    let bytes: Vec<(String, Vec<u8>)> = cache
        .tensors()
        .map(|(layer, kind, words)| {
            (tensor_name(layer, kind), words.iter().flat_map(|w| w.to_le_bytes()).collect())
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, data)| Ok((name.clone(), TensorView::new(Dtype::BF16, shape.clone(), data)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(safetensors::serialize(views, metadata)?)
}

/// Writes a KV cache to a safetensors file.
///
/// # Errors
/// [`Error::Io`] when the file cannot be written, [`Error::Safetensors`] as in
/// [`kv_cache_to_bytes`].
pub fn write_kv_cache(
    path: impl AsRef<Path>,
    cache: &KvCache,
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let path = path.as_ref();
    let bytes = kv_cache_to_bytes(cache, metadata)?;
    std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_cache() -> KvCache {
        let shape = KvShape::new(2, 3, 4, 5).unwrap();
        let t = |seed: u16| (0..60).map(|i| i * 7 + seed).collect::<Vec<u16>>();
        KvCache::new(shape, vec![t(0), t(1)], vec![t(2), t(3)]).unwrap()
    }

    #[test]
    fn round_trips_through_bytes() {
        let cache = small_cache();
        let bytes = kv_cache_to_bytes(&cache, None).unwrap();
        assert_eq!(kv_cache_from_bytes(&bytes).unwrap(), cache);
    }

    #[test]
    fn metadata_is_read_back() {
        let path = std::env::temp_dir().join(format!("bf16-field-meta-{}.safetensors", std::process::id()));
        let meta = HashMap::from([("model".to_string(), "m".to_string())]);
        write_kv_cache(&path, &small_cache(), Some(meta.clone())).unwrap();
        assert_eq!(read_kv_metadata(&path).unwrap(), meta);
        std::fs::remove_file(&path).unwrap();
    }

    fn file_with(tensors: &[(&str, Dtype, Vec<usize>)]) -> Vec<u8> {
        let data: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, d, s)| vec![0u8; s.iter().product::<usize>() * d.bitsize() / 8])
            .collect();
        let views: Vec<_> = tensors
            .iter()
            .zip(&data)
            .map(|((n, d, s), b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, None).unwrap()
    }

    #[test]
    fn wrong_dtype_names_the_tensor() {
        let bytes =
            file_with(&[("layer.0.k", Dtype::BF16, vec![2, 1, 4]), ("layer.0.v", Dtype::F16, vec![2, 1, 4])]);
        let err = kv_cache_from_bytes(&bytes).unwrap_err();
        assert!(matches!(err, Error::WrongDtype { ref name, .. } if name == "layer.0.v"), "{err}");
    }

    #[test]
    fn wrong_shape_and_a_lone_k_are_typed() {
        let bytes =
            file_with(&[("layer.0.k", Dtype::BF16, vec![2, 1, 4]), ("layer.0.v", Dtype::BF16, vec![2, 4])]);
        assert!(
            matches!(kv_cache_from_bytes(&bytes), Err(Error::WrongTensorShape { ref name, .. }) if name == "layer.0.v")
        );
        // No V at all: a keys-only cache, which the K+V loader refuses by name.
        let bytes = file_with(&[("layer.0.k", Dtype::BF16, vec![2, 1, 4])]);
        assert!(matches!(kv_cache_from_bytes(&bytes), Err(Error::KeysOnly { .. })));
        let bytes = file_with(&[("something.else", Dtype::BF16, vec![2])]);
        assert!(matches!(kv_cache_from_bytes(&bytes), Err(Error::UnrecognizedLayout { .. })));
        assert!(matches!(kv_cache_from_bytes(b"garbage"), Err(Error::Safetensors(_))));
    }
}
