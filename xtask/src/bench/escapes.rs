//! SplitZip under escapes (issue 21): the input's real values with the exponents of a
//! chosen share moved out of the codebook, so that a sweep of escape rates keeps the
//! data's sign+mantissa and the rest of its exponents. A chosen value's exponent moves
//! by 16: up, or down where up would leave the finite exponents or land in the codebook.
//! A value whose both moves land in the codebook or outside 1..=254, an exact zero or
//! subnormal (exponent 0) and a value already escaped are never chosen. Values are chosen
//! by a hash of their index, so a rate gives the same cache in every run.

use bf16_field::{KvCache, KvKind};
use splitzip::{Codebook, SplitzipCodec};

use super::report::Row;
use super::{Ctx, codec_rows};

/// The escape rates of the sweep (escaped values over all values): issue 21's 0.15% (a
/// codebook from another capture of the same model) and ~1.6% (a codebook from another
/// model), steps between them, and past them.
pub(super) const ESCAPE_RATES: [f64; 5] = [0.0015, 0.005, 0.01, 0.016, 0.03];

/// SplitZip's rows (CPU, then GPU when there is one) on the input moved to each rate of
/// [`ESCAPE_RATES`], with the codebooks of the `splitzip` rows; each row's input name
/// gives the escape rate the cache has.
pub(super) fn rows(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let (codec, source) = ctx.splitzip()?;
    let codec = SplitzipCodec { checksum: false, ..*codec };
    let mut rows = Vec::new();
    for rate in ESCAPE_RATES {
        let (cache, escaped) = with_escapes(ctx.cache, &codec, rate);
        let n = cache.shape().total_values();
        let name = format!("{} esc {:.2}%", ctx.name, 100.0 * escaped as f64 / n as f64);
        let sub = ctx.with_cache(&name, &cache);
        let _ = sub.splitzip.set((codec, source.clone()));
        let mut made = codec_rows(&sub, &codec)?;
        made.iter_mut().for_each(|r| r.calibrated_on = Some(source.clone()));
        rows.extend(made);
    }
    Ok(rows)
}

/// `cache` with exponents moved out of `codec`'s codebooks until about `rate` of all
/// values escape (none moved if it already has that many), and how many escape now.
pub(super) fn with_escapes(cache: &KvCache, codec: &SplitzipCodec, rate: f64) -> (KvCache, u64) {
    let codebook = |kind| if kind == KvKind::K { &codec.k_codebook } else { &codec.v_codebook };
    let (mut escaped, mut movable) = (0u64, 0u64);
    for (_, kind, words) in cache.tensors() {
        for &w in words {
            match moved(w, codebook(kind)) {
                Move::Escaped => escaped += 1,
                Move::To(_) => movable += 1,
                Move::Stays => {}
            }
        }
    }
    let n = cache.shape().total_values() as f64;
    let wanted = (rate * n).round() - escaped as f64;
    if wanted <= 0.0 || movable == 0 {
        return (cache.clone(), escaped);
    }
    // A value moves when its index's hash falls below this share of 2^64.
    let threshold = ((wanted / movable as f64).min(1.0) * u64::MAX as f64) as u64;
    let mut index = 0u64;
    let mut tensors = [Vec::new(), Vec::new()];
    for (_, kind, words) in cache.tensors() {
        let moved_words = words
            .iter()
            .map(|&w| {
                index += 1;
                match moved(w, codebook(kind)) {
                    Move::To(to) if crate::mix(index, 0) < threshold => {
                        escaped += 1;
                        to
                    }
                    _ => w,
                }
            })
            .collect();
        tensors[kind as usize].push(moved_words);
    }
    let [keys, values] = tensors;
    let cache = KvCache::new(cache.shape(), keys, values).expect("same shape, same tensor lengths");
    (cache, escaped)
}

/// What [`with_escapes`] may do with one word.
enum Move {
    /// Its exponent is outside the codebook already.
    Escaped,
    /// It may move: the word with its exponent 16 higher (or lower), outside the codebook.
    To(u16),
    /// It never moves (an exact zero or subnormal, or both moves land in the codebook).
    Stays,
}

fn moved(w: u16, codebook: &Codebook) -> Move {
    let e = ((w >> 7) & 0xff) as u8;
    if !codebook.contains(e) {
        return Move::Escaped;
    }
    let fits = |to: i32| (1..=254).contains(&to) && !codebook.contains(to as u8);
    let to = [i32::from(e) + 16, i32::from(e) - 16].into_iter().find(|&to| e != 0 && fits(to));
    match to {
        Some(to) => Move::To((w & 0x807f) | ((to as u16) << 7)),
        None => Move::Stays,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_moves_exponents_out_of_the_codebook_and_nothing_else() {
        let (_, cache) = kvcodec_testkit::fixtures().remove(0);
        let codec = SplitzipCodec::calibrate(&cache).unwrap();
        let n = cache.shape().total_values() as f64;
        let mut last = 0;
        for rate in ESCAPE_RATES {
            let (moved_cache, escaped) = with_escapes(&cache, &codec, rate);
            assert!((escaped as f64 / n - rate).abs() < 0.05 * rate, "{rate}: {escaped} of {n}");
            assert!(escaped > last, "{rate}");
            last = escaped;
            let mut counted = 0;
            for ((_, kind, before), (_, _, after)) in cache.tensors().zip(moved_cache.tensors()) {
                let book = if kind == KvKind::K { &codec.k_codebook } else { &codec.v_codebook };
                for (&b, &a) in before.iter().zip(after) {
                    let (eb, ea) = ((b >> 7) & 0xff, (a >> 7) & 0xff);
                    // Sign and mantissa kept; an exponent moved only by 16, out of the codebook.
                    assert_eq!(b & 0x807f, a & 0x807f);
                    assert!(ea == eb || (ea.abs_diff(eb) == 16 && !book.contains(ea as u8)));
                    counted += u64::from(!book.contains(ea as u8));
                }
            }
            assert_eq!(counted, escaped, "{rate}");
        }
    }
}
