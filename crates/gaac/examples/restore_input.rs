//! Writes the input of the GAAC restore microbenchmark (`xtask/microbench/gaac_restore.cu`):
//! a KV file's GAAC container, and on stdout the checksum the kernel must fold from it
//! (the sum modulo 2^32 of every block's pair words: fragment values `2i`, `2i + 1` of a
//! coded block, words `2i`, `2i + 1` of a raw block, as the low and high half of a u32).
//!
//! ```text
//! cargo run --release -p gaac --example restore_input -- <kv.safetensors> <out.gaac> [bases.json]
//! ```
//!
//! With `GAAC_BLOCK_SUMS=1` it also prints the first four blocks' checksums on stderr, to
//! find the block a kernel restores differently.

use gaac::{Bases, EncodeOptions, cache_info, decode_cache, encode_cache, fragment_coords};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, out, rest @ ..] = args.as_slice() else {
        return Err("usage: restore_input <kv.safetensors> <out.gaac> [bases.json]".into());
    };
    let cache = bf16_field::io::read_kv_cache(input)?;
    let bases = rest.first().map(Bases::load).transpose()?;
    let container = encode_cache(&cache, &EncodeOptions { bases, ..Default::default() })?;
    std::fs::write(out, &container)?;
    let info = cache_info(&container)?;
    let decoded = decode_cache(&container)?;
    let s = info.header.shape;
    let d = s.head_dim;
    let show_blocks = std::env::var_os("GAAC_BLOCK_SUMS").is_some();
    let mut sum = 0u32;
    for (i, block) in info.blocks.iter().enumerate() {
        let (layer, kind, head, page) = info.header.block_coords(i);
        let tensor = decoded.tensor(layer, kind);
        let word = |token: usize, channel: usize| {
            u32::from(tensor[(16 * page + token) * s.kv_heads * d + head * d + channel])
        };
        let before = sum;
        for p in 0..16 * d {
            let (token, channel) = match block {
                Some(_) => fragment_coords(kind, d, p),
                None => (p / d, p % d),
            };
            sum = sum.wrapping_add(word(token, channel) << (16 * (p % 2)));
        }
        if i < 4 && show_blocks {
            eprintln!("block {i}: {:#010x}", sum.wrapping_sub(before));
        }
    }
    println!("{sum:#010x}");
    if let Ok(n) = std::env::var("GAAC_BLOCK_SUMS") {
        let _ = n;
    }
    eprintln!("{}", info);
    Ok(())
}
