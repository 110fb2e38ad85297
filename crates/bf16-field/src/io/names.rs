//! Which KV layout a file's tensor names follow, and which tensor holds which layer's K,
//! V or paged K+V blocks. Names only: the readers check dtypes and shapes.
//!
//! Strict by design: every tensor of the file must follow the one naming the file uses,
//! layers must run 0..L without a gap, and in a per-kind naming each layer's K has its V
//! (unless the file holds no V at all: a keys-only cache). Anything else is an error
//! that names the tensors, so a loader never drops part of a file silently.

use std::collections::BTreeMap;

use super::{KvLayout, TensorInfo, TensorList};
use crate::{Error, KvKind, Result};

/// A naming scheme for a layer's tensors; a file uses exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Naming {
    /// `layer.{i}.k`, `layer.{i}.v`.
    Kvcodec,
    /// `model.layers.{i}.self_attn.k_cache`, `model.layers.{i}.self_attn.v_cache`.
    Transformers,
    /// `kv_cache.{i}`: a dump of vLLM's per-layer cache list.
    VllmList,
    /// `layers.{i}.kv_cache`.
    VllmLayers,
    /// `model.layers.{i}.self_attn.attn`: the attention layer name vLLM keys its
    /// per-layer caches by.
    VllmLayerName,
}

impl Naming {
    /// The layout the naming's tensors have.
    pub(super) fn layout(self) -> KvLayout {
        match self {
            Naming::Kvcodec => KvLayout::Kvcodec,
            Naming::Transformers => KvLayout::Transformers,
            Naming::VllmList | Naming::VllmLayers | Naming::VllmLayerName => KvLayout::VllmPaged,
        }
    }
}

/// What one tensor of a naming holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Kind(KvKind),
    /// A layer's K and V blocks in one tensor.
    Paged,
}

/// One tensor name form: `{prefix}{layer}{suffix}`.
struct Pattern {
    naming: Naming,
    prefix: &'static str,
    suffix: &'static str,
    part: Part,
}

const PATTERNS: &[Pattern] = &[
    Pattern { naming: Naming::Kvcodec, prefix: "layer.", suffix: ".k", part: Part::Kind(KvKind::K) },
    Pattern { naming: Naming::Kvcodec, prefix: "layer.", suffix: ".v", part: Part::Kind(KvKind::V) },
    Pattern {
        naming: Naming::Transformers,
        prefix: "model.layers.",
        suffix: ".self_attn.k_cache",
        part: Part::Kind(KvKind::K),
    },
    Pattern {
        naming: Naming::Transformers,
        prefix: "model.layers.",
        suffix: ".self_attn.v_cache",
        part: Part::Kind(KvKind::V),
    },
    Pattern { naming: Naming::VllmList, prefix: "kv_cache.", suffix: "", part: Part::Paged },
    Pattern { naming: Naming::VllmLayers, prefix: "layers.", suffix: ".kv_cache", part: Part::Paged },
    Pattern {
        naming: Naming::VllmLayerName,
        prefix: "model.layers.",
        suffix: ".self_attn.attn",
        part: Part::Paged,
    },
];

/// A layer index as the namings write it: decimal digits without a sign or a leading
/// zero, so that `layer.01.k` cannot stand for `layer.1.k` beside it.
fn parse_layer(digits: &str) -> Option<usize> {
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// The naming, layer and part of a tensor name, if it follows a pattern.
fn classify(name: &str) -> Option<(Naming, usize, Part)> {
    PATTERNS.iter().find_map(|p| {
        let layer = parse_layer(name.strip_prefix(p.prefix)?.strip_suffix(p.suffix)?)?;
        Some((p.naming, layer, p.part))
    })
}

/// The name of `layer`'s `kind` tensor in a per-kind naming.
fn kind_name(naming: Naming, layer: usize, kind: KvKind) -> String {
    PATTERNS
        .iter()
        .find(|p| p.naming == naming && p.part == Part::Kind(kind))
        .map_or_else(|| format!("layer {layer} {kind:?}"), |p| format!("{}{layer}{}", p.prefix, p.suffix))
}

/// A file's KV tensors by layer, in the one naming they follow.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// One tensor per layer and kind: `keys[i]`, and `values[i]` unless the file holds
    /// no V tensor at all (a keys-only cache).
    PerKind { naming: Naming, keys: Vec<String>, values: Option<Vec<String>> },
    /// One tensor per layer holding its K and V blocks.
    Paged { tensors: Vec<String> },
}

/// Sorts the tensors of a file into a [`Plan`].
///
/// # Errors
/// [`Error::UnrecognizedLayout`] when no tensor follows a naming, [`Error::MixedLayouts`]
/// when tensors follow two, [`Error::UnexpectedTensors`] for tensors that follow none
/// beside ones that do, [`Error::MissingLayer`] for a gap in the layer numbers,
/// [`Error::UnpairedTensor`] for a K without its V or a V without its K.
pub(super) fn plan(tensors: &[TensorInfo]) -> Result<Plan> {
    let (known, unknown): (Vec<_>, Vec<_>) =
        tensors.iter().map(|t| (t, classify(&t.name))).partition(|(_, c)| c.is_some());
    let Some(&(first, Some((naming, ..)))) = known.first() else {
        return Err(Error::UnrecognizedLayout { tensors: TensorList(tensors.to_vec()) });
    };
    // (K or the paged tensor, V) names per layer.
    let mut layers: BTreeMap<usize, (Option<String>, Option<String>)> = BTreeMap::new();
    for &(t, class) in &known {
        let Some((other, layer, part)) = class else { continue };
        if other != naming {
            return Err(Error::MixedLayouts { first: first.name.clone(), second: t.name.clone() });
        }
        let slots = layers.entry(layer).or_default();
        match part {
            Part::Kind(KvKind::K) | Part::Paged => slots.0 = Some(t.name.clone()),
            Part::Kind(KvKind::V) => slots.1 = Some(t.name.clone()),
        }
    }
    if !unknown.is_empty() {
        let tensors = TensorList(unknown.into_iter().map(|(t, _)| t.clone()).collect());
        return Err(Error::UnexpectedTensors { layout: naming.layout(), tensors });
    }
    for (expected, (&layer, (a, b))) in layers.iter().enumerate() {
        if layer != expected {
            let next = a.clone().or_else(|| b.clone()).unwrap_or_default();
            return Err(Error::MissingLayer { layer: expected, next });
        }
    }
    let any_v = layers.values().any(|(_, v)| v.is_some());
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (layer, (k, v)) in layers {
        match (k, v) {
            (Some(k), Some(v)) => {
                keys.push(k);
                values.push(v);
            }
            (Some(k), None) if !any_v => keys.push(k),
            (Some(present), None) => {
                return Err(Error::UnpairedTensor { present, missing: kind_name(naming, layer, KvKind::V) });
            }
            (None, Some(present)) => {
                return Err(Error::UnpairedTensor { present, missing: kind_name(naming, layer, KvKind::K) });
            }
            // A layer enters the map with a tensor.
            (None, None) => {}
        }
    }
    Ok(match naming.layout() {
        KvLayout::VllmPaged => Plan::Paged { tensors: keys },
        KvLayout::Kvcodec | KvLayout::Transformers => {
            Plan::PerKind { naming, keys, values: any_v.then_some(values) }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_numbers_are_canonical_decimals() {
        assert_eq!(parse_layer("0"), Some(0));
        assert_eq!(parse_layer("17"), Some(17));
        for bad in ["", "01", "+1", "-1", "1a", " 1", "99999999999999999999999"] {
            assert_eq!(parse_layer(bad), None, "{bad:?}");
        }
        assert_eq!(classify("layer.3.k"), Some((Naming::Kvcodec, 3, Part::Kind(KvKind::K))));
        assert_eq!(classify("model.layers.2.self_attn.attn"), Some((Naming::VllmLayerName, 2, Part::Paged)));
        assert_eq!(classify("layer.3.q"), None);
        assert_eq!(classify("layer..k"), None);
    }

    #[test]
    fn a_missing_partner_is_named_in_the_files_naming() {
        assert_eq!(kind_name(Naming::Transformers, 4, KvKind::V), "model.layers.4.self_attn.v_cache");
        assert_eq!(kind_name(Naming::Kvcodec, 0, KvKind::K), "layer.0.k");
    }
}
