//! Problems for the tests: random or real KV values in shuffled pages, with the slots past
//! each context filled with NaN so that a kernel reading them cannot go unnoticed.
#![allow(dead_code)]

use kvcodec_attention::{BlockTables, DecodeProblem, DecodeShape, PAGE_TOKENS, PagedKv};
use kvcodec_testkit::{Rng, bf16};

/// A decode problem that owns its buffers.
pub(crate) struct Owned {
    pub(crate) shape: DecodeShape,
    pub(crate) q: Vec<u16>,
    pub(crate) k: Vec<u16>,
    pub(crate) v: Vec<u16>,
    pub(crate) pages: Vec<u32>,
    pub(crate) max_pages: usize,
    pub(crate) lens: Vec<u32>,
    pub(crate) scale: f32,
}

impl Owned {
    pub(crate) fn problem(&self) -> DecodeProblem<'_> {
        DecodeProblem {
            shape: self.shape,
            q: &self.q,
            kv: PagedKv { k: &self.k, v: &self.v },
            tables: BlockTables { pages: &self.pages, max_pages: self.max_pages, context_lens: &self.lens },
            scale: self.scale,
        }
    }
}

const NAN: u16 = 0x7fc0;

/// Sequences of `lens` tokens over shuffled physical pages (plus two spare pages nobody
/// uses), K and V words from `word(rng)`, q roughly normal; every slot past a context and
/// every spare page holds NaN.
pub(crate) fn build(
    shape: DecodeShape,
    lens: &[u32],
    seed: u32,
    mut word: impl FnMut(&mut Rng) -> u16,
) -> Owned {
    assert_eq!(lens.len(), shape.batch);
    let mut rng = Rng(seed | 1);
    let used: Vec<usize> = lens.iter().map(|&l| (l as usize).div_ceil(PAGE_TOKENS)).collect();
    let max_pages = used.iter().copied().max().unwrap_or(0) + 1; // a spare table column
    let total: usize = used.iter().sum::<usize>() + 2;
    // A random permutation of the physical pages.
    let mut order: Vec<u32> = (0..total as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.next() as usize % (i + 1));
    }
    let page_values = shape.page_values();
    let mut k = vec![NAN; total * page_values];
    let mut v = vec![NAN; total * page_values];
    let mut pages = vec![u32::MAX; shape.batch * max_pages]; // entries past a context are never read
    let mut next = 0;
    let row_values = shape.kv_heads * shape.head_dim;
    for (b, &len) in lens.iter().enumerate() {
        for logical in 0..used[b] {
            let page = order[next] as usize;
            next += 1;
            pages[b * max_pages + logical] = page as u32;
            let tokens = (len as usize - logical * PAGE_TOKENS).min(PAGE_TOKENS);
            for slot in 0..tokens * row_values {
                k[page * page_values + slot] = word(&mut rng);
                v[page * page_values + slot] = word(&mut rng);
            }
        }
    }
    let q = (0..shape.q_values()).map(|_| bf16(rng.normal(1.0))).collect();
    Owned {
        shape,
        q,
        k,
        v,
        pages,
        max_pages,
        lens: lens.to_vec(),
        scale: 1.0 / (shape.head_dim as f32).sqrt(),
    }
}

/// Roughly normal K and V values of standard deviation `sigma`.
pub(crate) fn random(shape: DecodeShape, lens: &[u32], seed: u32, sigma: f32) -> Owned {
    build(shape, lens, seed, |rng| bf16(rng.normal(sigma)))
}

/// K and V values taken in order from `words` (cycled): real KV values in a page layout
/// of any width.
pub(crate) fn from_words(shape: DecodeShape, lens: &[u32], seed: u32, words: &[u16]) -> Owned {
    let mut i = 0;
    build(shape, lens, seed, |_| {
        i += 1;
        words[(i - 1) % words.len()]
    })
}
