//! What the host sides of the fused kernels share (`zipfusion::attention`,
//! `gaac::attention`): their caches hold full pages compressed in the codec's own pool and
//! each sequence's unfilled last page in a pool of BF16 pages, so a block-table entry names
//! one pool or the other by its place (the last page of a context that is not a multiple of
//! 16). This module walks the entries a step reads, checks the parts the twin also checks,
//! builds the BF16 copy the twin reads ([`DecodedCopy`]) and lifts the twin's GPU errors
//! into a codec's.

use std::collections::HashMap;

use crate::{AttentionError, BlockTables, DecodeProblem, DecodeShape, PAGE_TOKENS, PagedKv};

/// A fused decode problem: its query, shape, block tables and scale, which the twin's
/// problem over the decoded copy shares.
pub trait FusedProblem<'a> {
    /// The sizes.
    fn shape(&self) -> DecodeShape;
    /// `[batch, q_heads, head_dim]` BF16 words.
    fn q(&self) -> &'a [u16];
    /// The block tables (entries name compressed pages, or BF16 pages for partial last pages).
    fn tables(&self) -> BlockTables<'a>;
    /// Softmax scale.
    fn scale(&self) -> f32;
}

/// Implements [`FusedProblem`] for a problem struct with the fields `shape`, `q`, `tables`
/// and `scale` of those types (and one lifetime).
#[macro_export]
macro_rules! impl_fused_problem {
    ($problem:ident) => {
        impl<'a> $crate::fused::FusedProblem<'a> for $problem<'a> {
            fn shape(&self) -> $crate::DecodeShape {
                self.shape
            }
            fn q(&self) -> &'a [u16] {
                self.q
            }
            fn tables(&self) -> $crate::BlockTables<'a> {
                self.tables
            }
            fn scale(&self) -> f32 {
                self.scale
            }
        }
    };
}

/// Calls `f(sequence, logical, entry, partial)` for every block-table entry a sequence
/// reads, in order (`partial`: the unfilled last page of its context). The contexts must
/// have passed [`check_tables`].
///
/// # Errors
/// The first error `f` returns.
pub fn for_each_read<E>(
    tables: BlockTables<'_>,
    mut f: impl FnMut(usize, usize, u32, bool) -> Result<(), E>,
) -> Result<(), E> {
    for (sequence, &len) in tables.context_lens.iter().enumerate() {
        let len = len as usize;
        let used = len.div_ceil(PAGE_TOKENS);
        for logical in 0..used {
            let partial = logical + 1 == used && !len.is_multiple_of(PAGE_TOKENS);
            f(sequence, logical, tables.pages[sequence * tables.max_pages + logical], partial)?;
        }
    }
    Ok(())
}

/// The pages of a pool of BF16 partial pages given the lengths of its K and V buffers in
/// values.
///
/// # Errors
/// [`AttentionError::Length`] unless both hold the same whole pages of `shape`.
pub fn partial_pages(shape: DecodeShape, k_len: usize, v_len: usize) -> Result<usize, AttentionError> {
    let page_values = shape.page_values();
    if !k_len.is_multiple_of(page_values) || v_len != k_len {
        return Err(AttentionError::Length {
            what: "partial k/v pages",
            got: v_len,
            expected: k_len / page_values * page_values,
            unit: "BF16 values (whole pages, k and v alike)",
        });
    }
    Ok(k_len / page_values)
}

/// Checks a fused problem as [`DecodeProblem::validate`] checks the twin's (shape, query,
/// scale, contexts, table lengths), with every entry pointing at page 0 of a one-page
/// stand-in, and the partial pool's lengths; returns the partial pool's pages. The entries
/// themselves are the codec's to check against its pools.
///
/// # Errors
/// [`DecodeProblem::validate`]'s, [`partial_pages`]'.
pub fn check_tables<'a>(
    problem: &impl FusedProblem<'a>,
    partial: PagedKv<'_>,
) -> Result<usize, AttentionError> {
    let shape = problem.shape();
    shape.validate()?;
    let tables = problem.tables();
    let zeros = vec![0u32; tables.pages.len()];
    let one_page = vec![0u16; shape.page_values()];
    let stand_in = DecodeProblem {
        shape,
        q: problem.q(),
        kv: PagedKv { k: &one_page, v: &one_page },
        tables: BlockTables { pages: &zeros, ..tables },
        scale: problem.scale(),
    };
    stand_in.validate()?;
    partial_pages(shape, partial.k.len(), partial.v.len())
}

/// The BF16 copy of a fused problem's cache that the BF16 twin reads: every compressed page
/// a sequence reads decoded to a BF16 page (in order of first use), then the partial pages,
/// with the block tables renumbered (entries no sequence reads are kept as they were).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedCopy {
    /// K pages, `[pages, 16, kv_heads, head_dim]`.
    pub k: Vec<u16>,
    /// V pages, as `k`.
    pub v: Vec<u16>,
    /// `[batch, max_pages]` page ids into `k` and `v`.
    pub pages: Vec<u32>,
}

impl DecodedCopy {
    /// Builds the copy: `decode(sequence, logical, entry, k, v)` writes the compressed page
    /// `entry` (first read by that sequence's logical page) into `k` and `v` (one page of
    /// values each); `partial` is the BF16 pool. The tables' contexts must have passed
    /// [`check_tables`].
    ///
    /// # Errors
    /// The first error `decode` returns.
    pub fn build<E>(
        shape: DecodeShape,
        tables: BlockTables<'_>,
        partial: PagedKv<'_>,
        mut decode: impl FnMut(usize, usize, u32, &mut [u16], &mut [u16]) -> Result<(), E>,
    ) -> Result<DecodedCopy, E> {
        let page_values = shape.page_values();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let mut pages = tables.pages.to_vec();
        let mut decoded: HashMap<u32, u32> = HashMap::new();
        let mut partial_entries = Vec::new();
        for_each_read(tables, |sequence, logical, entry, is_partial| {
            let at = sequence * tables.max_pages + logical;
            if is_partial {
                partial_entries.push(at);
                return Ok(());
            }
            if let Some(&copy) = decoded.get(&entry) {
                pages[at] = copy;
                return Ok(());
            }
            let copy = decoded.len() as u32;
            k.resize(k.len() + page_values, 0);
            v.resize(v.len() + page_values, 0);
            let from = copy as usize * page_values;
            decode(sequence, logical, entry, &mut k[from..], &mut v[from..])?;
            decoded.insert(entry, copy);
            pages[at] = copy;
            Ok(())
        })?;
        let first_partial = decoded.len() as u32;
        // Saturating: an entry nobody checked yet stays past every pool instead of
        // wrapping onto a real page (the twin's checks then refuse it).
        for at in partial_entries {
            pages[at] = pages[at].saturating_add(first_partial);
        }
        k.extend_from_slice(partial.k);
        v.extend_from_slice(partial.v);
        Ok(DecodedCopy { k, v, pages })
    }

    /// The twin's problem over this copy, with `problem`'s query, contexts and scale.
    pub fn problem<'a>(&'a self, problem: &impl FusedProblem<'a>) -> DecodeProblem<'a> {
        DecodeProblem {
            shape: problem.shape(),
            q: problem.q(),
            kv: PagedKv { k: &self.k, v: &self.v },
            tables: BlockTables { pages: &self.pages, ..problem.tables() },
            scale: problem.scale(),
        }
    }
}

/// The twin's GPU error as a fused path's: the problem's [`AttentionError`] in the codec's
/// error, GPU errors and disagreements as they are.
pub fn lift<E: From<AttentionError>>(e: crate::gpu::GpuError) -> kvcodec_gpu::GpuError<E> {
    use kvcodec_gpu::GpuError;
    match e {
        GpuError::Codec(e) => GpuError::Codec(E::from(e)),
        GpuError::Gpu(e) => GpuError::Gpu(e),
        GpuError::Disagreement { status, meaning } => GpuError::Disagreement { status, meaning },
        other => GpuError::Disagreement { status: 0, meaning: other.to_string() },
    }
}
