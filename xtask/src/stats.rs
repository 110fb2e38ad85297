//! `cargo xtask stats [--input FILE]`: exponent and sign+mantissa entropy of a KV file,
//! overall, per K/V and per layer (the ExANS paper's "Table 1"; SplitZip's top-16
//! coverage), then where ExANS's bytes go against the entropy of the data, GAAC's slots
//! (how many blocks fit, the content and resident ratios, the groups by tag), and how many
//! of ZipFusion's blocks each variant codes.

use std::path::PathBuf;

use bf16_field::stats::{FieldStats, Histogram};
use bf16_field::{KvCache, KvKind, exponent_of};

pub(crate) fn run(input: Option<PathBuf>) -> anyhow::Result<()> {
    for path in crate::inputs(input)? {
        let cache = crate::read_cache(&path)?;
        let s = cache.shape();
        outln!(
            "{}: {} layers x {{K,V}} x {} KV heads x head_dim {} x {} tokens = {} values",
            crate::shown(&path),
            s.layers,
            s.kv_heads,
            s.head_dim,
            s.tokens,
            s.total_values()
        )?;
        outln!(
            "{:<10} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>9}",
            "scope",
            "H(E)",
            "2^H(E)",
            "E seen",
            "top16 E",
            "H(SF)",
            "2^H(SF)",
            "16/(8+H)"
        )?;
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
        row("all", &all)?;
        for kind in KvKind::BOTH {
            row(&format!("all {}", kind.suffix().to_uppercase()), &per_kind[kind as usize])?;
        }
        for (layer, [k, v]) in per_layer.iter().enumerate() {
            row(&format!("L{layer:02} K"), k)?;
            row(&format!("L{layer:02} V"), v)?;
        }
        exans_bytes(&cache, exans::format::DEFAULT_BLOCK_TOKENS)?;
        gaac_slots(&path, &cache)?;
        if cache.shape().head_dim.is_multiple_of(zipfusion::format::BLOCK_CHANNELS) {
            for variant in zipfusion::Variant::ALL {
                zipfusion_blocks(&cache, variant)?;
            }
        } else {
            outln!("zipfusion: none, its blocks need a head_dim that is a multiple of 32")?;
        }
        outln!()?;
    }
    Ok(())
}

/// Ideal bits of one block's centered exponents under their own empirical distribution
/// (no table or state cost), and under the block's quantized 12-bit model.
fn block_entropy_bits(groups: &[&[u16]]) -> anyhow::Result<(f64, f64)> {
    let mut counts = [0u64; 256];
    for g in groups {
        let c = exans::group_center(g);
        for &w in *g {
            counts[exans::center_symbol(exponent_of(w), c) as usize] += 1;
        }
    }
    let n: u64 = counts.iter().sum();
    let h = counts.iter().filter(|&&c| c > 0).map(|&c| -(c as f64) * (c as f64 / n as f64).log2()).sum();
    let q = exans::Model::quantize(&counts, exans::format::PRECISION)?
        .cross_entropy_bits(&counts)
        .ok_or_else(|| anyhow::anyhow!("a block symbol has no slot in its own model"))?;
    Ok((h, q))
}

/// ExANS's container at `block_tokens`: its ratio against the per-block entropy bound
/// (`16 / (8 + H(C))`), the mean bytes per record by section, and where the exponent
/// bytes lose against the entropy (quantization, words, final states). In format
/// version 4 the final states also carry each coded record's first `P = min(N, 512)`
/// sign+mantissa bytes (spec §6.4): the sign+mantissa section is `N - P` bytes, and the
/// states' cost against the exponents' entropy is counted without those `P` bytes.
fn exans_bytes(cache: &KvCache, block_tokens: usize) -> anyhow::Result<()> {
    let raw = 2 * cache.shape().total_values();
    let container = exans::encode_cache(cache, block_tokens)?;
    let info = exans::container_info(&container)?;
    let (mut sections, mut raw_blocks, mut record_bytes) = ([0usize; 6], 0, 0);
    // Coded records' frequency tables (2 + 3K bytes) and rANS words (2 bytes each), the
    // rest of their sections being alignment padding.
    let (mut table_bytes, mut word_bytes) = (0, 0);
    // Sign+mantissa bytes carried in the coded records' final states (spec §6.4).
    let mut payload_bytes = 0;
    let (mut entropy_bytes, mut quantized_bytes) = (0.0, 0.0);
    for b in 0..info.blocks() {
        let r = exans::inspect_record(info.record(&container, b))?;
        raw_blocks += usize::from(r.raw);
        for (a, x) in sections.iter_mut().zip(r.section_bytes) {
            *a += x;
        }
        if !r.raw {
            table_bytes += 2 + 3 * r.model.len();
            word_bytes += 2 * r.word_counts.iter().map(|&c| c as usize).sum::<usize>();
            payload_bytes += r.payload_bytes;
        }
        record_bytes += r.record_len;
        let (h, q) = block_entropy_bits(&cache.block(b, block_tokens)?)?;
        entropy_bytes += h / 8.0 + r.values as f64;
        quantized_bytes += q / 8.0;
    }
    let blocks = info.blocks() as f64;
    outln!(
        "exans, B = {block_tokens}: {} blocks ({raw_blocks} raw), container {} bytes, ratio {:.4}, per-block entropy bound {:.4}",
        info.blocks(),
        container.len(),
        raw as f64 / container.len() as f64,
        raw as f64 / entropy_bytes
    )?;
    let names = ["header", "centers", "model+pad", "directory", "words+pad", "sign_mantissa section"];
    let per_block: Vec<String> =
        names.iter().zip(sections).map(|(n, b)| format!("{n} {:.1}", b as f64 / blocks)).collect();
    outln!(
        "  mean bytes per record: {}; container header and index {:.1}",
        per_block.join(", "),
        (container.len() - record_bytes) as f64 / blocks
    )?;
    // The directory is 8 word counts (u32) and 8 x 32 final rANS states (u32) per coded
    // record (spec §4); the states hold `payload_bytes` sign+mantissa bytes too.
    let coded = blocks - raw_blocks as f64;
    let counts = (4 * exans::format::PARTITIONS) as f64 * coded;
    let final_states = (4 * exans::format::PARTITIONS * exans::format::LANES) as f64 * coded;
    let per = |x: f64| x / blocks;
    outln!(
        "  of which: frequency table {:.1} + pad {:.1}; word counts {:.1}, final states {:.1} (carrying {:.1} sign+mantissa bytes); rANS words {:.1} + pad {:.1}",
        per(table_bytes as f64),
        per((sections[2] - table_bytes) as f64),
        per(counts),
        per(final_states),
        per(payload_bytes as f64),
        per(word_bytes as f64),
        per((sections[4] - word_bytes) as f64)
    )?;
    let ideal_exponent_bytes = entropy_bytes - cache.shape().total_values() as f64;
    let words = sections[4] as f64;
    let states = final_states - payload_bytes as f64;
    outln!(
        "  against the exponents' entropy: 12-bit quantization {:+.3}%, words {:+.3}%, words and final states less their sign+mantissa bytes {:+.3}%",
        100.0 * (quantized_bytes / ideal_exponent_bytes - 1.0),
        100.0 * (words / ideal_exponent_bytes - 1.0),
        100.0 * ((words + states) / ideal_exponent_bytes - 1.0)
    )?;
    Ok(())
}

/// ZipFusion's container of `variant` (docs/formats/zipfusion.md §9): the share of
/// blocks each kind codes (zero-aware among them), the ratio with every byte counted, and
/// the ratio of the blocks alone (without page metadata, container header and BF16 tails).
fn zipfusion_blocks(cache: &KvCache, variant: zipfusion::Variant) -> anyhow::Result<()> {
    let raw = 2 * cache.shape().total_values();
    let options = zipfusion::EncodeOptions { variant, checksum: false };
    let container = zipfusion::encode_cache(cache, &options)?;
    let info = zipfusion::cache_info(&container)?;
    let counts = info.block_counts();
    let kinds: Vec<String> = KvKind::BOTH
        .iter()
        .zip(&counts)
        .map(|(kind, c)| {
            format!(
                "{} {} of {} ({} zero-aware)",
                kind.suffix().to_uppercase(),
                percent(c.eligible(), c.total()),
                c.total(),
                c.zero_aware
            )
        })
        .collect();
    let (eligible, total) =
        (counts[0].eligible() + counts[1].eligible(), counts[0].total() + counts[1].total());
    let block_bytes =
        eligible * zipfusion::format::CODED_BLOCK_LEN + (total - eligible) * zipfusion::format::RAW_BLOCK_LEN;
    let block_values = total * zipfusion::format::BLOCK_VALUES;
    // A cache of fewer than 16 tokens has no page, so no block: its shares and its
    // blocks-alone ratio are undefined, not 0/0.
    let blocks_alone = if block_bytes == 0 {
        "- (no full page)".to_string()
    } else {
        format!("{:.4}", (2 * block_values) as f64 / block_bytes as f64)
    };
    outln!(
        "zipfusion {}: blocks coded {} ({}), container {} bytes, ratio {:.4}, blocks alone {blocks_alone}",
        variant.name(),
        percent(eligible, total),
        kinds.join(", "),
        container.len(),
        raw as f64 / container.len() as f64,
    )?;
    Ok(())
}

/// `part` as a percentage of `whole` with two decimals, or `-` when `whole` is 0.
fn percent(part: usize, whole: usize) -> String {
    if whole == 0 { "-".to_string() } else { format!("{:.2}%", 100.0 * part as f64 / whole as f64) }
}

fn row(scope: &str, st: &FieldStats) -> std::io::Result<()> {
    let e: &Histogram = &st.exponent;
    outln!(
        "{:<10} {:>7.3} {:>7.2} {:>6} {:>7.3}% {:>7.3} {:>7.1} {:>9.4}",
        scope,
        e.entropy_bits(),
        e.effective_alphabet(),
        e.distinct(),
        100.0 * e.top_k_coverage(16),
        st.sign_mantissa.entropy_bits(),
        st.sign_mantissa.effective_alphabet(),
        st.exponent_coding_bound()
    )
}

/// GAAC with the default slot (docs/formats/gaac.md §4), for each source of bases: the
/// share of blocks that fit their slot and the length percentiles of the coded blocks,
/// the content and resident ratios, and the groups of the coded blocks by tag.
fn gaac_slots(path: &std::path::Path, cache: &KvCache) -> anyhow::Result<()> {
    let Some(block) = gaac::BlockShape::new(cache.shape().head_dim) else {
        outln!("gaac: none, its blocks need a head_dim that is a multiple of 64")?;
        return Ok(());
    };
    let mut sources = Vec::new();
    if let Some(other) = crate::bench::other_text_of_model(path) {
        let bases = gaac::Bases::calibrate(&crate::read_cache(&other)?);
        sources.push((format!("bases from {} (same model, other text)", crate::shown(&other)), Some(bases)));
    }
    sources.push(("bases from this file".to_string(), Some(gaac::Bases::calibrate(cache))));
    sources.push(("self-calibrated (first 128 tokens)".to_string(), None));
    let capacity = block.default_capacity();
    for (label, bases) in sources {
        // Every block coded (the largest slot) to see the lengths, then the default slot.
        let widest = gaac::EncodeOptions {
            bases: bases.clone(),
            slot_capacity: Some(block.max_coded_len()),
            ..Default::default()
        };
        let info = gaac::cache_info(&gaac::encode_cache(cache, &widest)?)?;
        let mut lens: Vec<usize> = info.blocks.iter().flatten().map(|(_, len)| *len).collect();
        lens.sort_unstable();
        let Some(&max) = lens.last() else {
            outln!("gaac {label}: no full block")?;
            return Ok(());
        };
        let at = |q: f64| lens[((lens.len() - 1) as f64 * q).round() as usize];
        let fit = lens.iter().filter(|&&len| len <= capacity).count();
        let options = gaac::EncodeOptions { bases, ..Default::default() };
        let info = gaac::cache_info(&gaac::encode_cache(cache, &options)?)?;
        let tags = info.tag_counts();
        let (o3, o4, raw, total) = tags
            .iter()
            .fold((0, 0, 0, 0), |(a, b, c, d), t| (a + t.offset3, b + t.offset4, c + t.raw, d + t.total()));
        let pct = |n: usize| 100.0 * n as f64 / total.max(1) as f64;
        outln!(
            "gaac {label}: slot {capacity} B fits {:.2}% of {} blocks (coded lengths p50 {} p99 {} max {}); content ratio {:.4}, resident ratio {:.4}; groups 3-bit {:.2}% 4-bit {:.2}% raw {:.2}%",
            100.0 * fit as f64 / lens.len() as f64,
            lens.len(),
            at(0.5),
            at(0.99),
            max,
            info.bf16_len() as f64 / info.content_len() as f64,
            info.bf16_len() as f64 / info.resident_len() as f64,
            pct(o3),
            pct(o4),
            pct(raw)
        )?;
    }
    Ok(())
}
