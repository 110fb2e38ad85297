//! `cargo xtask stats [--input FILE]`: exponent and sign+mantissa entropy of a KV file,
//! overall, per K/V and per layer (ExANS seed, "Table 1"; SplitZip's top-16 coverage).

use std::path::PathBuf;

use bf16_field::KvKind;
use bf16_field::stats::{FieldStats, Histogram};

pub(crate) fn run(input: Option<PathBuf>) -> anyhow::Result<()> {
    for path in crate::inputs(input)? {
        let cache = bf16_field::io::read_kv_cache(&path)?;
        let s = cache.shape();
        println!(
            "{}: {} layers x {{K,V}} x {} KV heads x head_dim {} x {} tokens = {} values",
            path.display(),
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            s.total_values()
        );
        println!(
            "{:<10} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>9}",
            "scope", "H(E)", "2^H(E)", "E seen", "top16 E", "H(SF)", "2^H(SF)", "16/(8+H)"
        );
        let mut all = FieldStats::default();
        let mut per_kind = [FieldStats::default(), FieldStats::default()];
        let mut per_layer = Vec::new();
        for (layer, kind, words) in cache.tensors() {
            let st = FieldStats::of_words(words);
            all.merge(&st);
            per_kind[kind as usize].merge(&st);
            if kind == KvKind::K {
                per_layer.push([st, FieldStats::default()]);
            } else {
                per_layer[layer][1] = st;
            }
        }
        row("all", &all);
        for kind in KvKind::BOTH {
            row(&format!("all {}", kind.suffix().to_uppercase()), &per_kind[kind as usize]);
        }
        for (layer, [k, v]) in per_layer.iter().enumerate() {
            row(&format!("L{layer:02} K"), k);
            row(&format!("L{layer:02} V"), v);
        }
        println!();
    }
    Ok(())
}

fn row(scope: &str, st: &FieldStats) {
    let e: &Histogram = &st.exponent;
    println!(
        "{:<10} {:>7.3} {:>7.2} {:>6} {:>7.3}% {:>7.3} {:>7.1} {:>9.4}",
        scope,
        e.entropy_bits(),
        e.effective_alphabet(),
        e.distinct(),
        100.0 * e.top_k_coverage(16),
        st.sign_mantissa.entropy_bits(),
        st.sign_mantissa.effective_alphabet(),
        st.exponent_coding_bound()
    );
}
