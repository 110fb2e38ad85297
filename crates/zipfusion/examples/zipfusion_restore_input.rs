//! Writes the input of the ZipFusion restore-only microbenchmark
//! (`xtask/microbench/zipfusion_restore.cu`): a KV file's ZipFusion container, and on stdout
//! the checksum the kernel must fold from its pages (the sum modulo 2^32 of every block's
//! register words: a lane's values `2r` and `2r + 1` in fragment order, spec §3.2, as the
//! low and high half of a u32).
//!
//! ```text
//! cargo run --release -p zipfusion --example zipfusion_restore_input -- <kv.safetensors> <out.zf> [zero-aware] [head_dim]
//! ```
//!
//! `zero-aware` writes that variant (default: base). A `head_dim` other than the file's
//! reads each K and V tensor's words in file order as `[T', H, head_dim]` tokens, the way
//! `cargo xtask bench-attention` fills a wider head from real values.

use bf16_field::{KvCache, KvKind, KvShape};
use zipfusion::{EncodeOptions, Variant, cache_info, decode_cache, encode_cache, fragment_coords};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, out, rest @ ..] = args.as_slice() else {
        return Err("usage: zipfusion_restore_input <kv.safetensors> <out.zf> [zero-aware] [head_dim]".into());
    };
    let mut variant = Variant::Base;
    let mut head_dim = None;
    for arg in rest {
        match arg.as_str() {
            "zero-aware" => variant = Variant::ZeroAware,
            d => {
                head_dim =
                    Some(d.parse::<usize>().map_err(|_| format!("{d}: neither zero-aware nor a head_dim"))?)
            }
        }
    }
    let mut cache = bf16_field::io::read_kv_cache(input)?;
    if let Some(d) = head_dim {
        cache = regroup(cache, d)?;
    }
    let container = encode_cache(&cache, &EncodeOptions { variant, checksum: false })?;
    std::fs::write(out, &container)?;
    let info = cache_info(&container)?;
    let decoded = decode_cache(&container)?;
    let s = decoded.shape();
    let pages_per_layer = s.tokens / zipfusion::format::PAGE_TOKENS;
    let mut sum = 0u32;
    for (layer, page) in (0..s.layers).flat_map(|l| (0..pages_per_layer).map(move |p| (l, p))) {
        for head in 0..s.kv_heads {
            for kind in [KvKind::K, KvKind::V] {
                let tensor = decoded.tensor(layer, kind);
                for block in 0..s.head_dim / zipfusion::format::BLOCK_CHANNELS {
                    for lane in 0..32 {
                        for value in 0..16 {
                            let (token, channel) = fragment_coords(kind, lane, value);
                            let token = page * zipfusion::format::PAGE_TOKENS + token;
                            let channel = block * zipfusion::format::BLOCK_CHANNELS + channel;
                            let word = tensor[(token * s.kv_heads + head) * s.head_dim + channel];
                            sum = sum.wrapping_add(u32::from(word) << (16 * (value % 2)));
                        }
                    }
                }
            }
        }
    }
    println!("{sum:#010x}");
    eprintln!("{info}");
    Ok(())
}

/// The cache's tensors read as `[T * D / head_dim, H, head_dim]`.
fn regroup(cache: KvCache, head_dim: usize) -> Result<KvCache, Box<dyn std::error::Error>> {
    let s = cache.shape();
    if head_dim == 0 || !(s.tokens * s.head_dim).is_multiple_of(head_dim) {
        return Err(format!(
            "{} tokens of head_dim {} do not regroup to head_dim {head_dim}",
            s.tokens, s.head_dim
        )
        .into());
    }
    let shape = KvShape::new(s.layers, s.kv_heads, head_dim, s.tokens * s.head_dim / head_dim)?;
    let tensors = |kind| cache.tensors_of(kind).map(<[u16]>::to_vec).collect();
    Ok(KvCache::new(shape, tensors(KvKind::K), tensors(KvKind::V))?)
}
