//! The generated parts of `docs/formats/zipfusion.md`: the worked example (§8) as the
//! encoder writes it, the lane map of §3.3 and the head_dim table below it, all computed
//! here from the crate; these tests assert the document shows exactly them
//! (`KVCODEC_BLESS=1` rewrites the blocks after an intended change).

mod common;

use std::fmt::Write as _;

use bf16_field::KvKind;
use kvcodec_testkit::{assert_doc_block as assert_block, format_spec, hexdump};
use zipfusion::format::{BLOCK_CHANNELS, CODED_BLOCK_LEN, LANE_VALUES, LANES, RAW_BLOCK_LEN};
use zipfusion::{
    CacheHeader, PageShape, Variant, cache_info, decode_cache, decode_page, fragment_coords, page_info,
};

/// Asserts the spec's block `name` reads `expected`.
fn assert_doc_block(name: &str, expected: &str) {
    assert_block(&format_spec("zipfusion.md"), name, expected);
}

#[test]
fn the_example_page_matches_the_spec() {
    let page = common::example_page();
    let shape = common::example_shape();
    assert_eq!(page.len(), 3344);
    let [k, v] = decode_page(&page, shape, Variant::ZeroAware).unwrap();
    assert_eq!((k, v), common::example_kv());
    // The ZipFusion paper's code byte: lane 0's values 0 (-1.0) and 4 (-8.0) of K block 0.
    assert_eq!(page[16 + 512], 0xd0);
    let info = page_info(&page, shape, Variant::ZeroAware).unwrap();
    assert_doc_block("page-hex", &hexdump(&page));
    assert_doc_block("page-summary", &format!("{info}\n"));
}

#[test]
fn the_example_container_matches_the_spec() {
    let container = common::example_container();
    assert_eq!(container.len(), 48 + 3344 + 2 * 3 * 64 * 2);
    assert_eq!(decode_cache(&container).unwrap(), common::example_cache());
    let header = CacheHeader::parse(&container).unwrap();
    assert_eq!(header.to_bytes()[..], container[..48]);
    let info = cache_info(&container).unwrap();
    assert_doc_block("container-header-hex", &hexdump(&container[..48]));
    assert_doc_block("container-summary", &info.to_string());
}

/// Lane by lane, the `(token, channel)` of each of its 8 registers' first value: K's
/// registers hold channels `c, c + 1` of one token, V's tokens `t, t + 1` of one channel.
#[test]
fn the_lane_map_matches_the_spec() {
    let mut map = String::from(
        "lane | K r0..r7: token.channel (channels c, c+1)  | V r0..r7: token.channel (tokens t, t+1)\n",
    );
    for lane in 0..LANES {
        let mut row = format!("{lane:>4} |");
        for kind in KvKind::BOTH {
            for register in 0..8 {
                let (token, channel) = fragment_coords(kind, lane, 2 * register);
                let second = fragment_coords(kind, lane, 2 * register + 1);
                let pair = if kind == KvKind::K { (token, channel + 1) } else { (token + 1, channel) };
                assert_eq!(second, pair, "a register holds a pair along k");
                write!(row, " {:>5}", format!("{token}.{channel}")).unwrap();
            }
            row.push_str(if kind == KvKind::K { " |" } else { "\n" });
        }
        map.push_str(&row);
    }
    assert_doc_block("lane-map", &map);
}

/// For each head_dim of the spec's picture: the blocks of one (head, kind), the channels
/// each holds and the `mma` steps it feeds, and the page's metadata and size bounds.
#[test]
fn the_head_dim_table_matches_the_spec() {
    let mut table = String::new();
    for head_dim in [64, 128, 256] {
        let shape = PageShape::new(1, head_dim).unwrap();
        let blocks = shape.blocks_per_entry();
        writeln!(
            table,
            "head_dim {head_dim}: {blocks} blocks per (head, kind); metadata entry {} bytes, {} per head; \
             one head's page {}..{} bytes",
            shape.entry_stride(),
            2 * shape.entry_stride(),
            shape.min_page_len(),
            shape.max_page_len()
        )
        .unwrap();
        for block in 0..blocks {
            // What the block's lanes hold, from the fragment layout itself: the channels
            // of each kind (the same 32), the Q·Kᵀ k-steps (16 channels each) K feeds and
            // the P·V n-tiles (8 channels each) V feeds.
            let channels = |kind| {
                let all = (0..LANES).flat_map(|lane| (0..LANE_VALUES).map(move |v| (lane, v)));
                let mut seen: Vec<usize> =
                    all.map(|(lane, v)| block * BLOCK_CHANNELS + fragment_coords(kind, lane, v).1).collect();
                seen.sort_unstable();
                seen.dedup();
                seen
            };
            let (k, v) = (channels(KvKind::K), channels(KvKind::V));
            assert_eq!(k, v, "K and V blocks hold the same channels");
            assert_eq!(k.len(), BLOCK_CHANNELS);
            let (first, last) = (k[0], k[k.len() - 1]);
            writeln!(
                table,
                "  block {block}: channels {first:>3}-{last:<3}  K: Q·Kᵀ k-steps {:>2}-{:<2} of {:<2}  V: P·V n-tiles {:>2}-{:<2} of {}",
                first / 16,
                last / 16,
                head_dim / 16,
                first / 8,
                last / 8,
                head_dim / 8
            )
            .unwrap();
        }
    }
    assert_eq!((CODED_BLOCK_LEN, RAW_BLOCK_LEN), (768, 1024));
    assert_doc_block("head-dims", &table);
}
