//! How the bench measures: wall-clock medians on the CPU, and the inputs it builds.

use std::time::Instant;

use bf16_field::{KvCache, KvShape};

/// Timed runs and warm-ups of every measurement, and the GPU input.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Method {
    /// Timed runs per measurement (the median is reported).
    pub(crate) runs: usize,
    /// Untimed runs before timing.
    pub(crate) warmup: usize,
    /// GPU inputs are the cache tiled to at least this many bytes.
    pub(crate) gpu_bytes: usize,
    /// The axis the GPU input repeats the cache along.
    pub(crate) tile: TileAxis,
}

/// How the bench grows a cache to the GPU input size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TileAxis {
    /// More tokens: each layer's K and V repeated along T, a long-context cache of the
    /// same model (every codec's default).
    Tokens,
    /// More layers: the layers repeated as a deeper model (each K and V tensor unchanged;
    /// SplitZip's two payloads are then the cache's K and V streams repeated whole).
    Layers,
}

/// Median wall time of `runs` calls of `f` after `warmup` calls, in seconds; the first
/// error of `f` stops it.
pub(crate) fn median_secs<E>(m: &Method, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    for _ in 0..m.warmup {
        f()?;
    }
    let mut runs_ms = Vec::with_capacity(m.runs.max(1));
    for _ in 0..m.runs.max(1) {
        let start = Instant::now();
        f()?;
        runs_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(kvcodec_gpu::timing::Timing::from_runs(runs_ms).median_ms * 1e-3)
}

/// The cache repeated along `axis` until it holds at least `min_bytes` bytes of BF16, and
/// the number of copies: real values, at a size whose working set is many times the
/// GPU's L2.
pub(crate) fn tiled_cache(
    cache: &KvCache,
    min_bytes: usize,
    axis: TileAxis,
) -> anyhow::Result<(KvCache, usize)> {
    let s = cache.shape();
    let copies = (min_bytes / 2).div_ceil(s.total_values()).max(1);
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let shape = match axis {
        TileAxis::Tokens => {
            for (_, kind, t) in cache.tensors() {
                let long = t.repeat(copies);
                if kind == bf16_field::KvKind::K { keys.push(long) } else { values.push(long) }
            }
            KvShape::new(s.layers, s.kv_heads, s.head_dim, s.tokens * copies)?
        }
        TileAxis::Layers => {
            for _ in 0..copies {
                for (_, kind, t) in cache.tensors() {
                    if kind == bf16_field::KvKind::K {
                        keys.push(t.to_vec())
                    } else {
                        values.push(t.to_vec())
                    }
                }
            }
            KvShape::new(s.layers * copies, s.kv_heads, s.head_dim, s.tokens)?
        }
    };
    Ok((KvCache::new(shape, keys, values)?, copies))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_along_layers_repeats_the_kind_major_streams_whole() {
        let cache = kvcodec_testkit::kv_like(3, 2, 4, 5, 9);
        let bytes = 2 * cache.shape().total_values();
        let (deep, copies) = tiled_cache(&cache, 3 * bytes, TileAxis::Layers).unwrap();
        assert_eq!((copies, deep.shape().layers), (3, 9));
        let kind_major = cache.words_in(bf16_field::WordOrder::KindMajor);
        let (k, v) = kind_major.split_at(kind_major.len() / 2);
        let expected = [k.repeat(3), v.repeat(3)].concat();
        assert_eq!(deep.words_in(bf16_field::WordOrder::KindMajor), expected);
        let (long, _) = tiled_cache(&cache, 3 * bytes, TileAxis::Tokens).unwrap();
        assert_eq!(long.shape().tokens, 15);
        assert_eq!(long.tensor(1, bf16_field::KvKind::V), cache.tensor(1, bf16_field::KvKind::V).repeat(3));
    }
}
