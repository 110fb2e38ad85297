//! `cargo xtask reshape`: a KV file of another model's shape made from a fixture's real
//! values, for the caches we cannot keep as fixtures (issue 21: a model with head_dim
//! 256, one KV head and exact zeros in K from dead QK-norm channels).
//!
//! Each of the first `layers` layers' K and V keeps its words in file order, regrouped
//! as tokens of `kv_heads x head_dim` (a 256-wide head holds four consecutive 64-value
//! heads of SmolLM2, as `bench-attention` fills wide heads); the words that do not fill
//! a whole new token are dropped. Then `dead_k_channels` channels of every K head are set
//! to +0.0 in every token: a QK-norm channel whose scale is zero is exactly zero whatever
//! its input, and it stays zero after RoPE (the cache holds K after RoPE) only when its
//! rotary partner is dead too, so channels die in pairs `c` and `c + head_dim / 2` (the
//! rotate-half pairing of Llama and Gemma in transformers). Which channels are dead is
//! the model's, not the text's: the pairs are drawn from a fixed sequence per (layer,
//! head), so every file made with the same arguments has the same dead channels, and a
//! codec calibrated on one (SplitZip's codebook, GAAC's bases) meets them in another.

use std::collections::HashMap;
use std::path::Path;

use anyhow::ensure;
use bf16_field::{KvCache, KvKind, KvShape};

/// The target shape and the dead K channels of [`run`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reshape {
    /// Layers kept (the source's first ones).
    pub(crate) layers: usize,
    /// KV heads per token of the output.
    pub(crate) kv_heads: usize,
    /// Channels per head of the output.
    pub(crate) head_dim: usize,
    /// K channels per head set to +0.0 in every token: an even number (rotary pairs).
    pub(crate) dead_k_channels: usize,
}

pub(crate) fn run(input: &Path, out: &Path, to: Reshape) -> anyhow::Result<()> {
    let source = crate::read_cache(input)?;
    let (cache, dead) = reshape(&source, to)?;
    let s = cache.shape();
    let metadata = HashMap::from([
        ("source".to_string(), crate::shown(input).to_string()),
        (
            "shape_per_tensor".to_string(),
            format!("[T, H, D] = [{}, {}, {}]", s.tokens, s.kv_heads, s.head_dim),
        ),
        ("layers".to_string(), s.layers.to_string()),
        ("dead_k_channels".to_string(), format!("{dead:?}")),
        ("command".to_string(), "cargo xtask reshape".to_string()),
    ]);
    bf16_field::io::write_kv_cache(out, &cache, Some(metadata))?;
    let zeros = cache.tensors_of(KvKind::K).flatten().filter(|&&w| w == 0).count();
    outln!(
        "{} -> {}: {} layers x {{K,V}} x {} KV heads x head_dim {} x {} tokens; {} dead K channels per head; \
         K words +0.0: {:.3}%",
        crate::shown(input),
        crate::shown(out),
        s.layers,
        s.kv_heads,
        s.head_dim,
        s.tokens,
        to.dead_k_channels,
        100.0 * zeros as f64 / (s.layers * s.values_per_tensor()) as f64
    )?;
    Ok(())
}

/// `source` in the shape `to` asks for, and the dead K channels of each (layer, head).
fn reshape(source: &KvCache, to: Reshape) -> anyhow::Result<(KvCache, Vec<Vec<usize>>)> {
    let s = source.shape();
    ensure!(
        (1..=s.layers).contains(&to.layers),
        "--layers {}: the source has {} layers",
        to.layers,
        s.layers
    );
    let per_token = to.kv_heads * to.head_dim;
    ensure!(per_token > 0, "--kv-heads and --head-dim must be at least 1");
    ensure!(
        to.head_dim.is_multiple_of(2) && to.dead_k_channels.is_multiple_of(2),
        "--head-dim {} and --dead-k-channels {} must be even: channels die in rotary pairs",
        to.head_dim,
        to.dead_k_channels
    );
    ensure!(
        to.dead_k_channels < to.head_dim,
        "--dead-k-channels {} leaves no live channel of {}",
        to.dead_k_channels,
        to.head_dim
    );
    let tokens = s.values_per_tensor() / per_token;
    ensure!(
        tokens > 0,
        "a source tensor holds {} values, fewer than one token of {per_token}",
        s.values_per_tensor()
    );
    let shape = KvShape::new(to.layers, to.kv_heads, to.head_dim, tokens)?;
    let take = |layer: usize, kind: KvKind| source.tensor(layer, kind)[..tokens * per_token].to_vec();
    let values: Vec<Vec<u16>> = (0..to.layers).map(|l| take(l, KvKind::V)).collect();
    let mut keys: Vec<Vec<u16>> = (0..to.layers).map(|l| take(l, KvKind::K)).collect();
    let mut dead = Vec::new();
    for k in &mut keys {
        for head in 0..to.kv_heads {
            let channels = dead_channels(dead.len(), to);
            for token in k.chunks_exact_mut(per_token) {
                for &c in &channels {
                    token[head * to.head_dim + c] = 0;
                }
            }
            dead.push(channels);
        }
    }
    Ok((KvCache::new(shape, keys, values)?, dead))
}

/// The dead channels of K head number `head_index` (`layer * kv_heads + head`),
/// ascending: the first `to.dead_k_channels / 2` of a Fisher-Yates shuffle of the first
/// half's channels, driven by SplitMix64 seeded with the index ([`crate::mix`]), each with its rotary
/// partner `c + head_dim / 2`; they depend on nothing but the index and the shape.
fn dead_channels(head_index: usize, to: Reshape) -> Vec<usize> {
    let (half, pairs) = (to.head_dim / 2, to.dead_k_channels / 2);
    let mut order: Vec<usize> = (0..half).collect();
    for i in 0..pairs {
        let draw = crate::mix(i as u64 + 1, head_index as u64);
        let j = i + (draw % (half - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut channels: Vec<usize> = order[..pairs].iter().flat_map(|&c| [c, c + half]).collect();
    channels.sort_unstable();
    channels
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two layers of [T = 6, H = 2, D = 4]: word `i` of a tensor is `base + i`, so a
    /// word's place says where it came from (BF16 of small positive normals).
    fn source() -> KvCache {
        let shape = KvShape::new(2, 2, 4, 6).unwrap();
        let t = |base: u16| (0..48).map(|i| base + i).collect::<Vec<u16>>();
        KvCache::new(shape, vec![t(0x3f00), t(0x3f80)], vec![t(0x4000), t(0x4080)]).unwrap()
    }

    #[test]
    fn words_keep_file_order_and_the_dead_k_channels_are_zero() {
        let to = Reshape { layers: 1, kv_heads: 1, head_dim: 8, dead_k_channels: 2 };
        let (cache, dead) = reshape(&source(), to).unwrap();
        let s = cache.shape();
        assert_eq!((s.layers, s.kv_heads, s.head_dim, s.tokens), (1, 1, 8, 6));
        // V is the source's words in order; K too but for its dead channels, zero in
        // every token.
        assert_eq!(cache.tensor(0, KvKind::V), &source().tensor(0, KvKind::V)[..48]);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].len(), 2);
        let source = source();
        for (i, (&got, &was)) in
            cache.tensor(0, KvKind::K).iter().zip(source.tensor(0, KvKind::K)).enumerate()
        {
            assert_eq!(got, if dead[0].contains(&(i % 8)) { 0 } else { was }, "word {i}");
        }
    }

    #[test]
    fn a_partial_token_is_dropped_and_each_head_has_its_dead_channels() {
        // 48 words as tokens of 2 x 10: 2 tokens, 8 words dropped.
        let to = Reshape { layers: 2, kv_heads: 2, head_dim: 10, dead_k_channels: 2 };
        let (cache, dead) = reshape(&source(), to).unwrap();
        assert_eq!(cache.shape().tokens, 2);
        assert_eq!(dead.len(), 4);
        let k = cache.tensor(1, KvKind::K);
        assert_eq!(k.len(), 40);
        for (h, head) in k.chunks_exact(10).enumerate() {
            let dead = &dead[2 + h % 2];
            assert!(
                head.iter().enumerate().all(|(c, &w)| (w == 0) == dead.contains(&c)),
                "{head:?} {dead:?}"
            );
        }
    }

    #[test]
    fn dead_channels_depend_on_the_head_and_the_shape_only() {
        let to = Reshape { layers: 18, kv_heads: 1, head_dim: 256, dead_k_channels: 8 };
        let all: Vec<_> = (0..18).map(|i| dead_channels(i, to)).collect();
        for d in &all {
            assert_eq!(d.len(), 8);
            assert!(d.windows(2).all(|w| w[0] < w[1]) && d[7] < 256, "{d:?}");
            assert!(d.iter().all(|c| d.contains(&((c + 128) % 256))), "rotary pairs: {d:?}");
        }
        assert_eq!(all, (0..18).map(|i| dead_channels(i, to)).collect::<Vec<_>>());
        assert!(all.windows(2).any(|w| w[0] != w[1]), "every layer the same channels");
        let most = Reshape { dead_k_channels: 254, ..to };
        let d = dead_channels(3, most);
        assert!(d.len() == 254 && d.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn impossible_shapes_are_refused() {
        let bad = [
            Reshape { layers: 3, kv_heads: 1, head_dim: 8, dead_k_channels: 0 },
            Reshape { layers: 0, kv_heads: 1, head_dim: 8, dead_k_channels: 0 },
            Reshape { layers: 1, kv_heads: 1, head_dim: 8, dead_k_channels: 8 },
            Reshape { layers: 1, kv_heads: 1, head_dim: 64, dead_k_channels: 0 },
            Reshape { layers: 1, kv_heads: 0, head_dim: 8, dead_k_channels: 0 },
            Reshape { layers: 1, kv_heads: 1, head_dim: 8, dead_k_channels: 3 },
            Reshape { layers: 1, kv_heads: 2, head_dim: 5, dead_k_channels: 2 },
        ];
        for to in bad {
            assert!(reshape(&source(), to).is_err(), "{to:?}");
        }
    }
}
