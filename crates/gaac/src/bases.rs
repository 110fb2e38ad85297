//! Calibrated exponent bases: one per (layer, K|V, KV head, channel), the `b` that puts
//! the most of the channel's calibration exponents in `[b, b + 7]` (spec §2.1; the GAAC
//! paper, "calibrated per-channel base-plus-offset codes"), and their JSON file (spec §6).

use std::path::Path;

use bf16_field::{KvCache, KvKind, KvShape, exponent_of};
use rayon::prelude::*;

use crate::format::{MAX_BASE, OFFSET3_MAX};
use crate::{Error, Result};

/// The bases of a cache shape: `2 L H D` bytes, ordered layer, kind (K then V), head,
/// channel (spec §5.2), each at most [`MAX_BASE`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bases {
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    bytes: Vec<u8>,
}

/// The JSON of a bases file (spec §6).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BasesFile {
    codec: String,
    version: u32,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    /// `k[layer][head][channel]`.
    k: Vec<Vec<Vec<u8>>>,
    /// `v[layer][head][channel]`.
    v: Vec<Vec<Vec<u8>>>,
}

impl Bases {
    /// Bases from their bytes in container order (layer, kind, head, channel).
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a zero dimension (reported with T = 1),
    /// [`Error::BasesCountMismatch`] unless `bytes` holds `2 L H D` bases,
    /// [`Error::BaseOutOfRange`] for the first base above 248.
    pub fn from_bytes(layers: usize, kv_heads: usize, head_dim: usize, bytes: Vec<u8>) -> Result<Bases> {
        if layers == 0 || kv_heads == 0 || head_dim == 0 {
            return Err(Error::InvalidShape { layers, kv_heads, head_dim, tokens: 1 });
        }
        let expected = 2usize.saturating_mul(layers).saturating_mul(kv_heads).saturating_mul(head_dim);
        if bytes.len() != expected {
            return Err(Error::BasesCountMismatch { what: "bases".into(), got: bytes.len(), expected });
        }
        let bases = Bases { layers, kv_heads, head_dim, bytes };
        bases.check_range()?;
        Ok(bases)
    }

    fn check_range(&self) -> Result<()> {
        match self.bytes.iter().position(|&b| b > MAX_BASE) {
            None => Ok(()),
            Some(at) => {
                let (layer, kind, head, channel) = self.coords(at);
                Err(Error::BaseOutOfRange { layer, kind, head, channel, base: self.bytes[at] })
            }
        }
    }

    /// (layer, kind, head, channel) of byte `at`.
    fn coords(&self, at: usize) -> (usize, KvKind, usize, usize) {
        let channel = at % self.head_dim;
        let head = (at / self.head_dim) % self.kv_heads;
        let tensor = at / (self.head_dim * self.kv_heads);
        (tensor / 2, KvKind::BOTH[tensor % 2], head, channel)
    }

    /// `(L, H, D)`.
    pub fn dims(&self) -> [usize; 3] {
        [self.layers, self.kv_heads, self.head_dim]
    }

    /// All bases in container order (layer, kind, head, channel): `2 L H D` bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The D bases of one (layer, kind, head).
    ///
    /// # Panics
    /// If an index is out of range.
    pub fn of(&self, layer: usize, kind: KvKind, head: usize) -> &[u8] {
        let tensor = 2 * layer + kind as usize;
        let at = (tensor * self.kv_heads + head) * self.head_dim;
        &self.bytes[at..at + self.head_dim]
    }

    /// Checks that these bases are for caches of `shape`'s L, H and D.
    ///
    /// # Errors
    /// [`Error::BasesShapeMismatch`].
    pub fn check_shape(&self, shape: KvShape) -> Result<()> {
        let expected = [shape.layers, shape.kv_heads, shape.head_dim];
        if self.dims() != expected {
            return Err(Error::BasesShapeMismatch { expected, found: self.dims() });
        }
        Ok(())
    }

    /// Calibrates on every token of `cache` (the offline step: calibrate on other data of
    /// the same model, the GAAC paper's `examples/calibrate.py`).
    pub fn calibrate(cache: &KvCache) -> Bases {
        let shape = cache.shape();
        Bases::calibrate_words(&cache.concat_words(), shape, shape.tokens)
            .expect("a cache's words match its shape")
    }

    /// Calibrates on the first `tokens` tokens (all, if fewer) of a cache given as its
    /// layer-major words (layer 0 K `[T, H, D]`, layer 0 V, ...). For each (layer, kind,
    /// head, channel) the base is the `b` in `0..=248` with the most exponents in
    /// `[b, b + 7]`, the smallest such `b` on a tie.
    ///
    /// # Errors
    /// [`Error::WordCountMismatch`] unless `words` holds `2 L T H D` words,
    /// [`Error::ZeroCalibrationTokens`] for `tokens == 0`.
    pub fn calibrate_words(words: &[u16], shape: KvShape, tokens: usize) -> Result<Bases> {
        if words.len() != shape.total_values() {
            return Err(Error::WordCountMismatch { got: words.len(), expected: shape.total_values() });
        }
        if tokens == 0 {
            return Err(Error::ZeroCalibrationTokens);
        }
        let tokens = tokens.min(shape.tokens);
        let hd = shape.values_per_token();
        let bytes = words
            .par_chunks_exact(shape.values_per_tensor().max(1))
            .flat_map_iter(|tensor| {
                let mut histograms = vec![[0u32; 256]; hd];
                for token in tensor[..tokens * hd].chunks_exact(hd) {
                    for (h, &w) in histograms.iter_mut().zip(token) {
                        h[exponent_of(w) as usize] += 1;
                    }
                }
                histograms.into_iter().map(|h| best_base(&h))
            })
            .collect();
        Ok(Bases { layers: shape.layers, kv_heads: shape.kv_heads, head_dim: shape.head_dim, bytes })
    }

    /// The JSON text of spec §6.
    pub fn to_json(&self) -> String {
        let per_kind = |kind: KvKind| {
            (0..self.layers)
                .map(|l| (0..self.kv_heads).map(|h| self.of(l, kind, h).to_vec()).collect())
                .collect()
        };
        let file = BasesFile {
            codec: "gaac".into(),
            version: 1,
            layers: self.layers,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            k: per_kind(KvKind::K),
            v: per_kind(KvKind::V),
        };
        serde_json::to_string(&file).expect("plain data serializes") + "\n"
    }

    /// Parses the JSON of spec §6.
    ///
    /// # Errors
    /// [`Error::BasesJson`] for text that is not that JSON (a base above 255 included),
    /// [`Error::BasesNotGaac`], [`Error::BasesCountMismatch`] for a list of the wrong
    /// length, [`Error::BaseOutOfRange`].
    pub fn from_json(text: &str) -> Result<Bases> {
        let file: BasesFile = serde_json::from_str(text).map_err(|e| Error::BasesJson(e.to_string()))?;
        if file.codec != "gaac" || file.version != 1 {
            return Err(Error::BasesNotGaac { codec: file.codec, version: file.version });
        }
        let count = |what: String, got: usize, expected: usize| {
            if got == expected { Ok(()) } else { Err(Error::BasesCountMismatch { what, got, expected }) }
        };
        count("k".into(), file.k.len(), file.layers)?;
        count("v".into(), file.v.len(), file.layers)?;
        let mut bytes = Vec::new();
        for l in 0..file.layers {
            for (name, lists) in [("k", &file.k), ("v", &file.v)] {
                let heads = &lists[l];
                count(format!("{name}[{l}]"), heads.len(), file.kv_heads)?;
                for (h, channels) in heads.iter().enumerate() {
                    count(format!("{name}[{l}][{h}]"), channels.len(), file.head_dim)?;
                    bytes.extend_from_slice(channels);
                }
            }
        }
        Bases::from_bytes(file.layers, file.kv_heads, file.head_dim, bytes)
    }

    /// Reads a bases file.
    ///
    /// # Errors
    /// [`Error::BasesIo`], then those of [`Bases::from_json`].
    pub fn load(path: impl AsRef<Path>) -> Result<Bases> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::BasesIo { path: path.display().to_string(), message: e.to_string() })?;
        Bases::from_json(&text)
    }

    /// Writes a bases file.
    ///
    /// # Errors
    /// [`Error::BasesIo`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json())
            .map_err(|e| Error::BasesIo { path: path.display().to_string(), message: e.to_string() })
    }

    /// The share of `cache`'s values whose exponent lies in `[b, b + 7]` of their
    /// channel's base: what calibration maximizes.
    ///
    /// # Errors
    /// [`Error::BasesShapeMismatch`].
    pub fn coverage(&self, cache: &KvCache) -> Result<f64> {
        self.check_shape(cache.shape())?;
        let shape = cache.shape();
        let mut inside = 0u64;
        for (layer, kind, tensor) in cache.tensors() {
            for token in tensor.chunks_exact(shape.values_per_token()) {
                for (h, head) in token.chunks_exact(shape.head_dim).enumerate() {
                    let bases = self.of(layer, kind, h);
                    inside += head
                        .iter()
                        .zip(bases)
                        .filter(|&(&w, &b)| exponent_of(w).wrapping_sub(b) <= OFFSET3_MAX)
                        .count() as u64;
                }
            }
        }
        Ok(inside as f64 / shape.total_values() as f64)
    }
}

/// The `b` in `0..=248` maximizing the count of a histogram's exponents in `[b, b + 7]`,
/// the smallest on a tie.
fn best_base(histogram: &[u32; 256]) -> u8 {
    let mut window: u32 = histogram[..8].iter().sum();
    let (mut best, mut best_count) = (0u8, window);
    for b in 1..=MAX_BASE as usize {
        window = window - histogram[b - 1] + histogram[b + 7];
        if window > best_count {
            (best, best_count) = (b as u8, window);
        }
    }
    best
}
