//! The CPU side: a reference with every product and sum in FP64, and the CPU fallback that
//! rounds it to BF16.

use half::bf16;
use rayon::prelude::*;

use crate::{AttentionError, DecodeProblem, PAGE_TOKENS};

/// The result of a decode step.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention<T> {
    /// `[batch, q_heads, head_dim]`: each query head's softmax-weighted sum of V.
    pub out: Vec<T>,
    /// `[batch, q_heads]`: the natural log of `sum_t exp(scale * q . k_t)` over the
    /// context, what a caller needs to merge this result with attention over other tokens.
    pub lse: Vec<f32>,
}

/// Decode attention computed in FP64 from the BF16 inputs, rounded once to FP32: the
/// reference the GPU kernels are checked against (within BF16 attention tolerances, by
/// [`relative_l2_error`]). For query head `h` of sequence `b`, with `g = h / group`:
/// `out[b, h] = sum_t softmax_t(scale * q[b, h] . k[t, g]) * v[t, g]` over the sequence's
/// `context_lens[b]` tokens, read through its block table row.
///
/// # Errors
/// [`DecodeProblem::validate`]'s.
pub fn reference(problem: &DecodeProblem<'_>) -> Result<Attention<f32>, AttentionError> {
    problem.validate()?;
    let shape = problem.shape;
    let d = shape.head_dim;
    let heads: Vec<(Vec<f32>, f32)> = (0..shape.batch * shape.q_heads)
        .into_par_iter()
        .map(|i| one_head(problem, i / shape.q_heads, i % shape.q_heads))
        .collect();
    let mut out = Vec::with_capacity(shape.q_values());
    let mut lse = Vec::with_capacity(heads.len());
    for (values, head_lse) in heads {
        debug_assert_eq!(values.len(), d);
        out.extend(values);
        lse.push(head_lse);
    }
    Ok(Attention { out, lse })
}

/// The CPU fallback: [`reference()`]'s output rounded to BF16 (round to nearest even), the
/// same function the GPU kernels compute, for problems small enough to run on the host.
///
/// # Errors
/// [`DecodeProblem::validate`]'s.
pub fn decode_cpu(problem: &DecodeProblem<'_>) -> Result<Attention<u16>, AttentionError> {
    let Attention { out, lse } = reference(problem)?;
    Ok(Attention { out: out.into_iter().map(|x| bf16::from_f32(x).to_bits()).collect(), lse })
}

fn one_head(problem: &DecodeProblem<'_>, sequence: usize, q_head: usize) -> (Vec<f32>, f32) {
    let shape = problem.shape;
    let d = shape.head_dim;
    let kv_head = q_head / shape.group();
    let value = |w: u16| f64::from(bf16::from_bits(w).to_f32());
    let q: Vec<f64> =
        problem.q[(sequence * shape.q_heads + q_head) * d..][..d].iter().map(|&w| value(w)).collect();
    let tokens = problem.tables.context_lens[sequence] as usize;
    let row = &problem.tables.pages[sequence * problem.tables.max_pages..];
    // Offset of token t's head `kv_head` in the K and V page arrays.
    let at = |t: usize| {
        let page = row[t / PAGE_TOKENS] as usize;
        ((page * PAGE_TOKENS + t % PAGE_TOKENS) * shape.kv_heads + kv_head) * d
    };
    let scale = f64::from(problem.scale);
    let scores: Vec<f64> = (0..tokens)
        .map(|t| scale * problem.kv.k[at(t)..][..d].iter().zip(&q).map(|(&k, q)| value(k) * q).sum::<f64>())
        .collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    let mut acc = vec![0.0f64; d];
    for (t, s) in scores.iter().enumerate() {
        let p = (s - max).exp();
        sum += p;
        for (a, &v) in acc.iter_mut().zip(&problem.kv.v[at(t)..][..d]) {
            *a += p * value(v);
        }
    }
    ((acc.iter().map(|a| (a / sum) as f32).collect()), (max + sum.ln()) as f32)
}

/// `||got - want||_2 / ||want||_2` over two equally long vectors, in FP64; 0 when both are
/// zero, infinite when only `want` is. The measure of BF16 attention error used by
/// FlashAttention's and FlashInfer's tests.
///
/// # Panics
/// When the lengths differ.
pub fn relative_l2_error(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "relative_l2_error: lengths differ");
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        diff += (f64::from(g) - f64::from(w)).powi(2);
        norm += f64::from(w).powi(2);
    }
    match (diff, norm) {
        (0.0, _) => 0.0,
        (_, 0.0) => f64::INFINITY,
        _ => (diff / norm).sqrt(),
    }
}
