//! The bytes as the fused attention kernel will read them (spec §3): a simulated warp
//! restores each lane's 8 `bf16x2` registers of a block from the page bytes alone (the
//! metadata byte, the lane's 16 low bytes and 8 code bytes, [`restore_high_bytes`] and
//! two byte permutes), hands them to `mma.m16n8k16` as B fragments laid out as the PTX
//! ISA says, and gets `Q·Kᵀ` and `P·V` of the cache as it was.
//!
//! The PTX ISA ("Matrix Fragments for `mma.m16n8k16` with floating point type"), with
//! `g = lane >> 2` and `t = lane % 4`: B (16 x 8, `.bf16`) is two `.b32` registers per
//! lane holding `b0, b1` and `b2, b3` (low half first); `b_i` sits at row
//! `k = 2t + (i & 1)` (plus 8 for `i >= 2`) and column `n = g`. Written out here again,
//! not taken from the crate, so the crate's placement is checked against the ISA's text.

use bf16_field::{KvCache, KvKind};
use zipfusion::format::{BLOCK_CHANNELS, CODE_BYTES_LEN, LOW_BYTES_LEN, RAW_BLOCK_BYTE};
use zipfusion::{BlockCounts, PageShape, Variant, encode_page, page_info, restore_high_bytes};

/// PTX `prmt.b32 d, a, b, selector` (default mode): byte `j` of `d` is byte
/// `selector >> 4j & 7` of the 8 bytes `{b, a}` (a's bytes are 0-3).
fn prmt(a: u32, b: u32, selector: u32) -> u32 {
    let bytes = (u64::from(b) << 32 | u64::from(a)).to_le_bytes();
    u32::from_le_bytes(std::array::from_fn(|j| bytes[(selector >> (4 * j) & 7) as usize]))
}

/// One lane's 8 registers of a block, as a kernel gets them: raw blocks by a 32-byte
/// load; coded blocks from two 4-byte code words, each restoring 8 high bytes, joined
/// with their low bytes by `prmt` (selectors 0x5140 and 0x7362: `lo0 hi0 lo1 hi1`).
fn lane_registers(block: &[u8], meta_byte: u8, lane: usize) -> [u32; 8] {
    let word = |at: usize| u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
    if meta_byte == RAW_BLOCK_BYTE {
        return std::array::from_fn(|r| word(32 * lane + 4 * r));
    }
    assert_eq!(block.len(), LOW_BYTES_LEN + CODE_BYTES_LEN);
    let mut registers = [0u32; 8];
    for group in 0..2 {
        let codes = word(LOW_BYTES_LEN + 8 * lane + 4 * group);
        let [first, second] = restore_high_bytes(codes, meta_byte);
        let low_first = word(16 * lane + 8 * group);
        let low_second = word(16 * lane + 8 * group + 4);
        registers[4 * group] = prmt(low_first, first, 0x5140);
        registers[4 * group + 1] = prmt(low_first, first, 0x7362);
        registers[4 * group + 2] = prmt(low_second, second, 0x5140);
        registers[4 * group + 3] = prmt(low_second, second, 0x7362);
    }
    registers
}

/// The 16 x 8 B operand that fragment `fragment` (registers `2 fragment`, `2 fragment + 1`)
/// of every lane forms, per the PTX layout: `b[k][n]` as BF16 words.
fn b_operand(lanes: &[[u32; 8]; 32], fragment: usize) -> [[u16; 8]; 16] {
    let mut b = [[0u16; 8]; 16];
    for (lane, registers) in lanes.iter().enumerate() {
        let (g, t) = (lane >> 2, lane % 4);
        for i in 0..4 {
            let register = registers[2 * fragment + i / 2];
            let value = (register >> (16 * (i % 2))) as u16;
            b[2 * t + (i & 1) + 8 * (i >> 1)][g] = value;
        }
    }
    b
}

fn f32_of(word: u16) -> f32 {
    f32::from_bits(u32::from(word) << 16)
}

/// `c += a · b` for a 16 x 16 A and a 16 x 8 B given by `b(k, n)` as BF16 words, summing k
/// in order.
fn multiply(a: &[[f32; 16]; 16], b: impl Fn(usize, usize) -> u16, c: &mut [[f32; 8]; 16]) {
    for (row, a_row) in c.iter_mut().zip(a) {
        for (n, acc) in row.iter_mut().enumerate() {
            for (k, &x) in a_row.iter().enumerate() {
                *acc += x * f32_of(b(k, n));
            }
        }
    }
}

/// `mma.m16n8k16` of an A operand (f32 of BF16 values) and a B operand as the lanes
/// formed it, into a 16 x 8 accumulator.
fn mma(a: &[[f32; 16]; 16], b: &[[u16; 8]; 16], c: &mut [[f32; 8]; 16]) {
    multiply(a, |k, n| b[k][n], c);
}

/// A 16 x 16 matrix of small integers (queries, probabilities).
fn small_matrix(seed: u32) -> [[f32; 16]; 16] {
    let mut rng = kvcodec_testkit::Rng(seed);
    std::array::from_fn(|_| std::array::from_fn(|_| (rng.next() % 7) as f32 - 3.0))
}

/// A K block's 4 B operands (k-step `f >> 1`, n-tile `f & 1`) are channels x tokens of
/// the block, `value(token, channel)`, and `Q·Kᵀ` over the block's 32 channels is
/// right for both 8-token tiles.
fn check_k_block(lanes: &[[u32; 8]; 32], value: impl Fn(usize, usize) -> u16) {
    let q = small_matrix(3);
    for n_tile in 0..2 {
        let (mut s, mut expected) = ([[0f32; 8]; 16], [[0f32; 8]; 16]);
        for k_step in 0..2 {
            let b = b_operand(lanes, 2 * k_step + n_tile);
            let want = |k: usize, n: usize| value(8 * n_tile + n, 16 * k_step + k);
            for (k, row) in b.iter().enumerate() {
                for (n, &word) in row.iter().enumerate() {
                    assert_eq!(word, want(k, n), "K: k-step {k_step} n-tile {n_tile} k {k} n {n}");
                }
            }
            mma(&q, &b, &mut s);
            multiply(&q, want, &mut expected);
        }
        assert_eq!(format!("{s:?}"), format!("{expected:?}"), "Q·Kᵀ, n-tile {n_tile}");
    }
}

/// A V block's 4 B operands (n-tile `f`) are tokens x channels of the block,
/// `value(token, channel)`, and `P·V` is right for each 8-channel tile.
fn check_v_block(lanes: &[[u32; 8]; 32], value: impl Fn(usize, usize) -> u16) {
    let p = small_matrix(5);
    for n_tile in 0..4 {
        let b = b_operand(lanes, n_tile);
        let want = |k: usize, n: usize| value(k, 8 * n_tile + n);
        for (k, row) in b.iter().enumerate() {
            for (n, &word) in row.iter().enumerate() {
                assert_eq!(word, want(k, n), "V: n-tile {n_tile} k {k} n {n}");
            }
        }
        let (mut o, mut expected) = ([[0f32; 8]; 16], [[0f32; 8]; 16]);
        mma(&p, &b, &mut o);
        multiply(&p, want, &mut expected);
        assert_eq!(format!("{o:?}"), format!("{expected:?}"), "P·V, n-tile {n_tile}");
    }
}

/// Encodes a page and checks every block as a warp reads it; returns the page's block
/// counts `[K, V]`.
fn check_page(k: &[u16], v: &[u16], shape: PageShape, variant: Variant) -> [BlockCounts; 2] {
    let page = encode_page(k, v, shape, variant).unwrap();
    let info = page_info(&page, shape, variant).unwrap();
    let (heads, dim) = (shape.kv_heads, shape.head_dim);
    for head in 0..heads {
        for (kind, src) in [(KvKind::K, k), (KvKind::V, v)] {
            let mut at = info.offset(head, kind);
            for (block, meta) in info.blocks(head, kind).iter().enumerate() {
                let bytes = &page[at..at + meta.encoded_len()];
                at += meta.encoded_len();
                let lanes: [[u32; 8]; 32] = std::array::from_fn(|l| lane_registers(bytes, meta.byte(), l));
                let value = |token: usize, channel: usize| {
                    src[(token * heads + head) * dim + block * BLOCK_CHANNELS + channel]
                };
                match kind {
                    KvKind::K => check_k_block(&lanes, value),
                    KvKind::V => check_v_block(&lanes, value),
                }
            }
        }
    }
    info.block_counts()
}

#[test]
fn a_warp_restores_a_page_with_a_raw_block_into_mma_operands() {
    let (k, v) = {
        let mut rng = kvcodec_testkit::Rng(1);
        let e = |rng: &mut kvcodec_testkit::Rng| {
            let r = rng.next();
            ((r >> 31) as u16) << 15 | ((118 + r % 9) as u16) << 7 | (r >> 8) as u16 & 0x7f
        };
        let k: Vec<u16> = (0..2 * 16 * 64).map(|_| e(&mut rng)).collect();
        let mut v: Vec<u16> = (0..2 * 16 * 64).map(|_| e(&mut rng)).collect();
        v[77] = 0x7000; // one raw block
        (k, v)
    };
    let [k_counts, v_counts] = check_page(&k, &v, PageShape::new(2, 64).unwrap(), Variant::Base);
    assert_eq!((k_counts.coded, v_counts.coded, v_counts.raw), (4, 3, 1));
}

#[test]
fn a_warp_restores_real_pages_into_mma_operands_for_every_head_dim() {
    let caches: Vec<KvCache> = kvcodec_testkit::fixtures().into_iter().map(|(_, c)| c).collect();
    for cache in &caches {
        for (layer, page) in [(0, 0), (17, 9), (29, 31)] {
            let k = cache.page(layer, KvKind::K, page, 16).unwrap();
            let v = cache.page(layer, KvKind::V, page, 16).unwrap();
            for variant in Variant::ALL {
                check_page(k, v, PageShape::new(3, 64).unwrap(), variant);
                // The same values seen as one head of 128 and of 192 channels.
                check_page(k, v, PageShape::new(1, 192).unwrap(), variant);
            }
        }
    }
    // head_dim 128 and 256 from KV-like data with exact zeros.
    for (heads, dim) in [(2, 128), (1, 256)] {
        let cache = kvcodec_testkit::kv_like(1, heads, dim, 16, 7);
        let zeroed = |t: &[u16]| -> Vec<u16> {
            t.iter().enumerate().map(|(i, &w)| if i % 97 == 0 { 0 } else { w }).collect()
        };
        let (k, v) = (zeroed(cache.tensor(0, KvKind::K)), zeroed(cache.tensor(0, KvKind::V)));
        let [k_counts, _] = check_page(&k, &v, PageShape::new(heads, dim).unwrap(), Variant::ZeroAware);
        assert!(k_counts.zero_aware > 0, "zero-aware blocks restored too");
        check_page(&k, &v, PageShape::new(heads, dim).unwrap(), Variant::Base);
    }
}
