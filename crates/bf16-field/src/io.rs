//! KV cache tensor files in the safetensors format.
//!
//! Convention (kvcodec's, documented in `docs/ARCHITECTURE.md`): a KV file holds, for
//! every layer `i` in `0..L`, the tensors `layer.{i}.k` and `layer.{i}.v`, each BF16 of
//! shape `[T, H, D]` (token-major, keys after RoPE). All 2L tensors share one shape.
//! Other tensors in the file are ignored; the free-form `__metadata__` map is returned by
//! [`read_kv_metadata`] (kvcodec's fixtures record the model there, under `model`).

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::{Error, KvCache, KvKind, KvShape, Result};

/// The tensor name of layer `layer`'s K or V: `layer.{i}.k` / `layer.{i}.v`.
pub fn tensor_name(layer: usize, kind: KvKind) -> String {
    format!("layer.{layer}.{}", kind.suffix())
}

/// Parses a KV cache from the bytes of a safetensors file.
///
/// # Errors
/// [`Error::Safetensors`] for a malformed container, [`Error::MissingTensor`] when
/// `layer.0.k` or any later layer's partner is absent, [`Error::WrongDtype`] for a
/// tensor that is not BF16, [`Error::WrongTensorShape`] for one that is not 3-D or does
/// not match `layer.0.k`'s shape.
pub fn kv_cache_from_bytes(bytes: &[u8]) -> Result<KvCache> {
    let file = SafeTensors::deserialize(bytes)?;
    let names: std::collections::HashSet<String> = file.names().into_iter().map(str::to_owned).collect();
    let layers = (0..).take_while(|&i| names.contains(&tensor_name(i, KvKind::K))).count();
    if layers == 0 {
        return Err(Error::MissingTensor { name: tensor_name(0, KvKind::K) });
    }
    let first = file.tensor(&tensor_name(0, KvKind::K))?;
    let dims: [usize; 3] = first.shape().try_into().map_err(|_| Error::WrongTensorShape {
        name: tensor_name(0, KvKind::K),
        got: first.shape().to_vec(),
        expected: "3 dimensions [T, H, D]".into(),
    })?;
    let shape = KvShape::new(layers, dims[1], dims[2], dims[0])?;
    let mut keys = Vec::with_capacity(layers);
    let mut values = Vec::with_capacity(layers);
    for layer in 0..layers {
        for kind in KvKind::BOTH {
            let name = tensor_name(layer, kind);
            if !names.contains(&name) {
                return Err(Error::MissingTensor { name });
            }
            let view = file.tensor(&name)?;
            if view.dtype() != Dtype::BF16 {
                return Err(Error::WrongDtype { name, dtype: format!("{:?}", view.dtype()) });
            }
            if view.shape() != dims {
                return Err(Error::WrongTensorShape {
                    name,
                    got: view.shape().to_vec(),
                    expected: format!("{dims:?} like layer.0.k"),
                });
            }
            // safetensors stores little-endian; the data may be unaligned, so copy bytewise.
            let words: Vec<u16> =
                view.data().chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
            match kind {
                KvKind::K => keys.push(words),
                KvKind::V => values.push(words),
            }
        }
    }
    KvCache::new(shape, keys, values)
}

/// Reads a KV cache from a safetensors file (see the module docs for the convention).
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, then as [`kv_cache_from_bytes`].
pub fn read_kv_cache(path: impl AsRef<Path>) -> Result<KvCache> {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    kv_cache_from_bytes(&bytes)
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
    fn wrong_shape_and_missing_partner_are_typed() {
        let bytes =
            file_with(&[("layer.0.k", Dtype::BF16, vec![2, 1, 4]), ("layer.0.v", Dtype::BF16, vec![2, 4])]);
        assert!(
            matches!(kv_cache_from_bytes(&bytes), Err(Error::WrongTensorShape { ref name, .. }) if name == "layer.0.v")
        );
        let bytes = file_with(&[("layer.0.k", Dtype::BF16, vec![2, 1, 4])]);
        assert!(
            matches!(kv_cache_from_bytes(&bytes), Err(Error::MissingTensor { ref name }) if name == "layer.0.v")
        );
        let bytes = file_with(&[("something.else", Dtype::BF16, vec![2])]);
        assert!(
            matches!(kv_cache_from_bytes(&bytes), Err(Error::MissingTensor { ref name }) if name == "layer.0.k")
        );
        assert!(matches!(kv_cache_from_bytes(b"garbage"), Err(Error::Safetensors(_))));
    }
}
