//! How the bench measures: wall-clock medians on the CPU, and the inputs it builds.

use std::time::Instant;

use bf16_field::{KvCache, KvShape};

/// Timed runs and warm-ups of every measurement, and the GPU input size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Method {
    /// Timed runs per measurement (the median is reported).
    pub(crate) runs: usize,
    /// Untimed runs before timing.
    pub(crate) warmup: usize,
    /// GPU inputs are the cache tiled to at least this many bytes.
    pub(crate) gpu_bytes: usize,
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

/// The cache repeated along the token axis until it holds at least `min_bytes` bytes of
/// BF16, and the number of copies: real values, at a size whose working set is many
/// times the GPU's L2.
pub(crate) fn tiled_cache(cache: &KvCache, min_bytes: usize) -> anyhow::Result<(KvCache, usize)> {
    let s = cache.shape();
    let copies = (min_bytes / 2).div_ceil(s.total_values()).max(1);
    let shape = KvShape::new(s.layers, s.kv_heads, s.head_dim, s.tokens * copies)?;
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (_, kind, t) in cache.tensors() {
        let long = t.repeat(copies);
        if kind == bf16_field::KvKind::K { keys.push(long) } else { values.push(long) }
    }
    Ok((KvCache::new(shape, keys, values)?, copies))
}
