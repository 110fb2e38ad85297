//! One partition's 32-lane interleaved rANS coder (spec §6).
//!
//! A partition is cut into tiles of 256 symbols; lane `j` holds symbols `8 j .. 8 j + 8`
//! of every tile, so in step `t` it decodes symbol `256 floor(t / 8) + 8 j + t mod 8`
//! ([`lane_symbol`]): a warp's 8 steps fill a tile, and each lane's 8 symbols are
//! adjacent. The decoder runs steps `t = 0..m`; in step `t` every lane whose run is
//! longer than `t` decodes its symbol and then, if its state fell below `2^16`, takes the
//! next 16-bit word of the partition's single stream, lanes in ascending order (the GPU's
//! ballot/popc order). The encoder visits the same (step, lane) pairs in exactly the
//! reverse order and reverses its word stack.
//!
//! In version 4 a lane's initial encoder state carries up to two sign+mantissa bytes,
//! `2^16 + b0 + 256 b1` (spec §6.4); the decoder checks each final state against the
//! lane's payload capacity and hands the states back so that the record decoder can
//! take the bytes out.

use crate::format::{
    ENTRY_FIELD_MASK, ENTRY_FREQ_SHIFT, ENTRY_SYMBOL_SHIFT, LANE_GROUP, LANES, STATE_LOWER, TILE, WORD_BITS,
    lane_run, lane_steps, lane_symbol,
};
use crate::model::EncEntry;
use crate::{Error, Result};

/// Encodes one partition's symbols from the lanes' initial states `initial` (each in
/// `[2^16, 2^17)`: `2^16` plus the lane's payload, spec §6.3, §6.4); returns the lanes'
/// final states (the decoder's initial states) and appends the partition's words, in
/// decoder read order, to `words`.
///
/// Every symbol must have a non-zero frequency in `table`.
pub(crate) fn encode_partition(
    symbols: &[u8],
    table: &[EncEntry; 256],
    precision: u32,
    initial: &[u32; LANES],
    words: &mut Vec<u16>,
) -> [u32; LANES] {
    let n = symbols.len();
    let m = lane_steps(n);
    // Below 2^17 <= freq << (32 - n), so no lane emits while encoding its first symbol
    // (spec §6.3, "Last symbol").
    debug_assert!(initial.iter().all(|&x| (STATE_LOWER..2 * STATE_LOWER).contains(&x)));
    let mut states = *initial;
    let first = words.len();
    // Emit threshold per symbol: x >= freq << (32 - n) needs a word out first; computed
    // in u64 because freq = 2^n makes it 2^32.
    let shift = 2 * WORD_BITS - precision;
    for t in (0..m).rev() {
        for j in (0..LANES).rev() {
            let i = lane_symbol(j, t);
            if i >= n {
                // Lane j's run ends before step t (a partial last tile).
                continue;
            }
            let e = table[symbols[i] as usize];
            debug_assert!(e.freq > 0, "symbol {} absent from the model", symbols[i]);
            let mut x = states[j];
            if x as u64 >= (e.freq as u64) << shift {
                words.push(x as u16);
                x >>= WORD_BITS;
            }
            states[j] = ((x / e.freq) << precision) + x % e.freq + e.cdf;
        }
    }
    words[first..].reverse();
    states
}

/// Slots of the largest decode table (precision 12); smaller tables are zero-padded to
/// it so that `x & mask` indexes it without a bounds check.
pub(crate) const TABLE_SLOTS: usize = 1 << crate::format::MAX_PRECISION;

/// Zero words appended after a partition's stream: a step of 32 lanes reads its words
/// through a fixed 32-word window at the step's first word, so the window stays in
/// bounds while `pos <= count`, which every step checks.
const WORD_PAD: usize = LANES;

/// Decodes one partition into `out` (its `n` symbols) from the lanes' initial states and
/// the partition's word stream (`u16` LE bytes, exactly `2 x count` of them). `table`
/// holds the `2^precision` packed entries of spec §5.4, zero-padded to 4096. `payload`
/// holds each lane's payload capacity in bytes, 0..=2 ([`crate::format::lane_payload_bytes`];
/// all 0 in versions 2 and 3). Returns the lanes' final states, `2^16` plus each lane's
/// payload (spec §6.4).
///
/// # Errors
/// [`Error::StateOutOfRange`] for an initial state below `2^16`,
/// [`Error::WordStreamExhausted`] when a lane needs a word past the stream,
/// [`Error::FinalStateMismatch`] when a lane does not end at `2^16` plus a payload that
/// fits its capacity, [`Error::UnconsumedWords`] when words are left over. `partition`
/// only labels errors.
#[cfg(test)]
pub(crate) fn decode_partition(
    partition: usize,
    states_in: &[u32; LANES],
    payload: &[u8; LANES],
    word_bytes: &[u8],
    table: &[u32; TABLE_SLOTS],
    precision: u32,
    out: &mut [u8],
) -> Result<[u32; LANES]> {
    decode_partition_with(partition, states_in, payload, word_bytes, table, precision, out, &mut Vec::new())
}

/// [`decode_partition`] with a caller-owned scratch buffer for the decoded words (reused
/// across partitions and blocks to avoid an allocation per partition).
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_partition_with(
    partition: usize,
    states_in: &[u32; LANES],
    payload: &[u8; LANES],
    word_bytes: &[u8],
    table: &[u32; TABLE_SLOTS],
    precision: u32,
    out: &mut [u8],
    words: &mut Vec<u16>,
) -> Result<[u32; LANES]> {
    for (lane, &state) in states_in.iter().enumerate() {
        if state < STATE_LOWER {
            return Err(Error::StateOutOfRange { partition, lane, state });
        }
    }
    let n = out.len();
    let mut st = *states_in;
    let mask = ((1u32 << precision) - 1) & (TABLE_SLOTS as u32 - 1);
    let count = word_bytes.len() / 2;
    words.clear();
    load_words(words, word_bytes);
    let words = &words[..];
    // The whole tiles first, where every lane decodes in every step (the fast path),
    // then a last, partial tile lane by lane.
    let whole = n / TILE * TILE;
    let mut pos = 0usize;
    if whole > 0 {
        let m = whole / LANES;
        match full_steps(&mut st, table, mask, precision, words, count, &mut out[..whole], m, true) {
            Some(p) => pos = p,
            None => return Err(Error::WordStreamExhausted { partition }),
        }
    }
    if whole < n {
        match tail_steps(&mut st, table, mask, precision, words, count, out, pos) {
            Some(p) => pos = p,
            None => return Err(Error::WordStreamExhausted { partition }),
        }
    }
    check_end(partition, &st, payload, pos, count)?;
    Ok(st)
}

/// Decodes the steps of a partition's last, partial tile (`out` is the whole partition,
/// `out.len() mod 256 > 0`), lane by lane, from the states `st` and the word position
/// `pos` that the whole tiles before it left. Returns the words consumed, or `None` as
/// soon as a step needs a word past `count`. `words` holds the stream plus
/// [`WORD_PAD`] zeros.
#[allow(clippy::too_many_arguments)]
fn tail_steps(
    st: &mut [u32; LANES],
    table: &[u32; TABLE_SLOTS],
    mask: u32,
    precision: u32,
    words: &[u16],
    count: usize,
    out: &mut [u8],
    mut pos: usize,
) -> Option<usize> {
    let n = out.len();
    // The lanes' runs fall with the lane: in step t, lanes 0..active decode.
    let runs: [usize; LANES] = std::array::from_fn(|j| lane_run(n, j));
    for t in n / TILE * LANE_GROUP..lane_steps(n) {
        let active = runs.iter().take_while(|&&run| run > t).count();
        let window = words.get(pos..pos + LANES)?;
        let mut k = 0usize;
        for j in 0..active {
            let (symbol, x) = decode_step(st[j], table, mask, precision);
            let renormalise = x < STATE_LOWER;
            let refilled = (x << WORD_BITS) | window[k % LANES] as u32;
            st[j] = if renormalise { refilled } else { x };
            k += renormalise as usize;
            out[lane_symbol(j, t)] = symbol;
        }
        pos += k;
        if pos > count {
            return None;
        }
    }
    Some(pos)
}

/// One decode step of state `x` before renormalisation (spec §6.3): the symbol of the
/// packed entry at slot `x mod 2^n` and the state `freq (x >> n) + bias`.
#[inline(always)]
fn decode_step(x: u32, table: &[u32; TABLE_SLOTS], mask: u32, precision: u32) -> (u8, u32) {
    let e = table[(x & mask) as usize];
    let freq = ((e >> ENTRY_FREQ_SHIFT) & ENTRY_FIELD_MASK) + 1;
    ((e >> ENTRY_SYMBOL_SHIFT) as u8, freq * (x >> precision) + (e & ENTRY_FIELD_MASK))
}

/// The end-of-partition checks (spec §6.3, "Final checks"): every lane back at `2^16`
/// plus a payload of at most its `payload[lane]` bytes (`state - 2^16 < 256^c`; exactly
/// `2^16` for `c = 0`), then every word consumed.
fn check_end(
    partition: usize,
    st: &[u32; LANES],
    payload: &[u8; LANES],
    pos: usize,
    count: usize,
) -> Result<()> {
    for (lane, (&state, &capacity)) in st.iter().zip(payload).enumerate() {
        debug_assert!(capacity as usize <= crate::format::PAYLOAD_BYTES_PER_LANE);
        // A state below 2^16 wraps to a huge excess and fails too.
        let excess = state.wrapping_sub(STATE_LOWER);
        if excess >> (8 * capacity as u32) != 0 {
            return Err(Error::FinalStateMismatch { partition, lane, state });
        }
    }
    if pos != count {
        return Err(Error::UnconsumedWords { partition, consumed: pos, count });
    }
    Ok(())
}

/// Appends the `u16` LE words of `bytes` (an odd last byte is ignored) and then
/// [`WORD_PAD`] zeros to `words`.
fn load_words(words: &mut Vec<u16>, bytes: &[u8]) {
    let start = words.len();
    let count = bytes.len() / 2;
    words.resize(start + count + WORD_PAD, 0);
    for (w, b) in words[start..start + count].iter_mut().zip(bytes.chunks_exact(2)) {
        *w = u16::from_le_bytes([b[0], b[1]]);
    }
}

/// Decodes partitions `first..first + P` exactly as `P` calls of
/// [`decode_partition_with`] would (same outputs and final states, same first error),
/// interleaving their whole tiles where all have the same number of them and the CPU has
/// AVX2 (each last, partial tile is then decoded on its own).
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_partitions_with<const P: usize>(
    first: usize,
    states_in: [&[u32; LANES]; P],
    payload: [&[u8; LANES]; P],
    word_bytes: [&[u8]; P],
    table: &[u32; TABLE_SLOTS],
    precision: u32,
    mut out: [&mut [u8]; P],
    words: &mut Vec<u16>,
) -> Result<[[u32; LANES]; P]> {
    #[cfg(target_arch = "x86_64")]
    {
        // The partitions' whole tiles in lock step when every partition has the same
        // number of them (lengths differ by at most one symbol), then each one's last,
        // partial tile on its own.
        let whole = out.first().map_or(0, |o| o.len()) / TILE * TILE;
        let m = whole / LANES;
        let valid = states_in.iter().all(|s| s.iter().all(|&x| x >= STATE_LOWER));
        if m > 0
            && out.iter().all(|o| o.len() / TILE * TILE == whole)
            && valid
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            let count: [usize; P] = word_bytes.map(|b| b.len() / 2);
            words.clear();
            for b in word_bytes {
                load_words(words, b);
            }
            let mut rest: &[u16] = words;
            let streams: [&[u16]; P] = std::array::from_fn(|p| {
                let (stream, tail) = rest.split_at(count[p] + WORD_PAD);
                rest = tail;
                stream
            });
            let mut st: [[u32; LANES]; P] = states_in.map(|s| *s);
            let mask = ((1u32 << precision) - 1) & (TABLE_SLOTS as u32 - 1);
            // SAFETY: the CPU has the features the function enables.
            let done = unsafe {
                x86::full_steps_avx2(
                    st.each_mut(),
                    table,
                    mask,
                    precision,
                    streams,
                    count,
                    out.each_mut().map(|o| &mut o[..whole]),
                    m,
                )
            };
            // On an exhausted stream, fall through: the one-by-one decode below
            // reports the first error in partition order.
            if let Some(mut pos) = done {
                for p in 0..P {
                    if out[p].len() > whole {
                        let tail = tail_steps(
                            &mut st[p], table, mask, precision, streams[p], count[p], out[p], pos[p],
                        );
                        pos[p] = tail.ok_or(Error::WordStreamExhausted { partition: first + p })?;
                    }
                    check_end(first + p, &st[p], payload[p], pos[p], count[p])?;
                }
                return Ok(st);
            }
        }
    }
    let mut finals = [[0u32; LANES]; P];
    for (p, o) in out.into_iter().enumerate() {
        finals[p] = decode_partition_with(
            first + p,
            states_in[p],
            payload[p],
            word_bytes[p],
            table,
            precision,
            o,
            words,
        )?;
    }
    Ok(finals)
}

/// Decodes the `m` steps of a partition's whole tiles (every lane owns `m` symbols, `m`
/// a multiple of 8) into `body` (`32 m` symbols, in partition order). Returns the words
/// consumed, or `None` as soon as a step needs a word past `count`. `words` holds the
/// stream plus [`WORD_PAD`] zeros. `simd` allows the AVX2 path where the CPU has it (the
/// tests run both).
#[allow(clippy::too_many_arguments)]
fn full_steps(
    st: &mut [u32; LANES],
    table: &[u32; TABLE_SLOTS],
    mask: u32,
    precision: u32,
    words: &[u16],
    count: usize,
    body: &mut [u8],
    m: usize,
    simd: bool,
) -> Option<usize> {
    debug_assert_eq!(m % LANE_GROUP, 0, "whole tiles only");
    #[cfg(target_arch = "x86_64")]
    if simd && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has the features the function enables.
        return unsafe { x86::full_steps_avx2([st], table, mask, precision, [words], [count], [body], m) }
            .map(|[pos]| pos);
    }
    let _ = simd;
    let mut pos = 0usize;
    for t in 0..m {
        // Within a step `pos` rises by at most 32, so this window holds every word the
        // step can take; a read past `count` lands in the zero padding and is caught
        // below (a stream is exhausted as soon as `pos > count`).
        let window: &[u16; LANES] = words.get(pos..pos + LANES)?.try_into().ok()?;
        let mut next = [0u32; LANES];
        let mut syms = [0u8; LANES];
        for j in 0..LANES {
            (syms[j], next[j]) = decode_step(st[j], table, mask, precision);
        }
        // Branch-free renormalisation: lane j takes window[k], k = the number of lanes
        // before it that also take a word (ballot/popc on the GPU).
        let mut k = 0usize;
        for j in 0..LANES {
            let x = next[j];
            let renormalise = x < STATE_LOWER;
            let refilled = (x << WORD_BITS) | window[k % LANES] as u32;
            st[j] = if renormalise { refilled } else { x };
            k += renormalise as usize;
        }
        pos += k;
        if pos > count {
            return None;
        }
        for (j, &s) in syms.iter().enumerate() {
            body[lane_symbol(j, t)] = s;
        }
    }
    Some(pos)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{LANE_GROUP, LANES, TABLE_SLOTS, WORD_BITS, lane_symbol};
    use crate::format::{ENTRY_FIELD_MASK, ENTRY_FREQ_SHIFT, ENTRY_SYMBOL_SHIFT};

    /// For each 8-lane renormalisation mask, the word index each lane takes: lane i
    /// with bit i set takes word `popcount(mask & ((1 << i) - 1))` (ballot/popc).
    static EXPAND: [[u32; 8]; 256] = {
        let mut t = [[0u32; 8]; 256];
        let mut mask = 0;
        while mask < 256 {
            let mut lane = 0;
            while lane < 8 {
                t[mask][lane] = (mask & ((1 << lane) - 1)).count_ones();
                lane += 1;
            }
            mask += 1;
        }
        t
    };

    /// The lane of byte `p` of a step's packed row: `packus_epi32` then `packus_epi16`
    /// of the four 8-lane quarters work within 128-bit halves, so byte `16 h + 4 q + i`
    /// is lane `8 q + 4 h + i`.
    static ROW_LANE: [u8; LANES] = {
        let mut t = [0u8; LANES];
        let mut p = 0;
        while p < LANES {
            let (h, q, i) = (p / 16, (p % 16) / 4, p % 4);
            t[p] = (8 * q + 4 * h + i) as u8;
            p += 1;
        }
        t
    };

    /// The lane of 8-byte chunk `k` of the transposed block of 8 rows: the unpack
    /// stages leave the row bytes at position `16 h + 4 i + 2 hi + e` in chunk
    /// `k = 8 i + 4 hi + 2 h + e`.
    static CHUNK_LANE: [u8; LANES] = {
        let mut t = [0u8; LANES];
        let mut k = 0;
        while k < LANES {
            let (i, hi, h, e) = (k / 8, (k / 4) % 2, (k / 2) % 2, k % 2);
            t[k] = ROW_LANE[16 * h + 4 * i + 2 * hi + e];
            k += 1;
        }
        t
    };

    /// [`super::full_steps`] with 8 lanes per 256-bit vector: a gather for the table,
    /// a vector multiply, and a permute from [`EXPAND`] to hand the step's words to the
    /// lanes that renormalise, in ascending lane order.
    ///
    /// Decodes `P` partitions of the same `m` in lock step: their dependency chains
    /// (gather, multiply, renormalise) are independent, so the core overlaps them.
    /// Returns each partition's words consumed, or `None` as soon as any partition
    /// needs a word past its `count`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and POPCNT.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn full_steps_avx2<const P: usize>(
        st: [&mut [u32; LANES]; P],
        table: &[u32; TABLE_SLOTS],
        mask: u32,
        precision: u32,
        words: [&[u16]; P],
        count: [usize; P],
        body: [&mut [u8]; P],
        m: usize,
    ) -> Option<[usize; P]> {
        let vmask = _mm256_set1_epi32(mask as i32);
        let field = _mm256_set1_epi32(ENTRY_FIELD_MASK as i32);
        let one = _mm256_set1_epi32(1);
        let zero = _mm256_setzero_si256();
        let shift = _mm_cvtsi32_si128(precision as i32);
        let mut x: [[__m256i; 4]; P] = std::array::from_fn(|p| {
            // SAFETY: `st[p]` is 32 u32s: four unaligned 8-lane loads.
            std::array::from_fn(|q| unsafe { _mm256_loadu_si256(st[p].as_ptr().add(8 * q).cast()) })
        });
        let mut pos = [0usize; P];
        let mut body: [&mut [u8]; P] = body.map(|b| &mut b[..LANES * m]);
        // Symbols of a tile's 8 steps, one packed 32-byte row per step (byte `p` of a row
        // belongs to lane `ROW_LANE[p]`), transposed and stored 8 bytes per lane.
        debug_assert_eq!(m % LANE_GROUP, 0, "whole tiles only");
        let mut rows = [[zero; 8]; P];
        let mut t = 0usize;
        while t < m {
            // `r` indexes the row of every partition (`rows[p][r]`), inside the loop over `p`.
            #[allow(clippy::needless_range_loop)]
            for r in 0..LANE_GROUP {
                for p in 0..P {
                    // The 32-word window at `pos` (in bounds: `words` has 32 pad words
                    // and `pos <= count` here); each quarter reads 8 words inside it.
                    let window: &[u16; LANES] = words[p].get(pos[p]..pos[p] + LANES)?.try_into().ok()?;
                    let mut k = 0usize;
                    let mut s = [zero; 4];
                    for (xq, sq) in x[p].iter_mut().zip(s.iter_mut()) {
                        let idx = _mm256_and_si256(*xq, vmask);
                        // SAFETY: every index is `x & mask <= 4095`; `table` has 4096 entries.
                        let e = unsafe { _mm256_i32gather_epi32::<4>(table.as_ptr().cast(), idx) };
                        let freq = _mm256_add_epi32(
                            _mm256_and_si256(_mm256_srli_epi32::<{ ENTRY_FREQ_SHIFT as i32 }>(e), field),
                            one,
                        );
                        let bias = _mm256_and_si256(e, field);
                        let next =
                            _mm256_add_epi32(_mm256_mullo_epi32(freq, _mm256_srl_epi32(*xq, shift)), bias);
                        // x < 2^16 <=> x >> 16 == 0.
                        let need = _mm256_cmpeq_epi32(_mm256_srli_epi32::<{ WORD_BITS as i32 }>(next), zero);
                        let bits = _mm256_movemask_ps(_mm256_castsi256_ps(need)) as usize & 0xff;
                        // k <= 24 before the last quarter: `window[k..k + 8]` is in bounds.
                        let w = &window[(k & 31).min(24)..][..8];
                        // SAFETY: `w` is 8 u16s (16 bytes); `EXPAND[bits]` is 8 u32s.
                        let (w16, perm) = unsafe {
                            (
                                _mm_loadu_si128(w.as_ptr().cast()),
                                _mm256_loadu_si256(EXPAND[bits].as_ptr().cast()),
                            )
                        };
                        let wq = _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(w16), perm);
                        let refilled = _mm256_or_si256(_mm256_slli_epi32::<{ WORD_BITS as i32 }>(next), wq);
                        *xq = _mm256_blendv_epi8(next, refilled, need);
                        k += bits.count_ones() as usize;
                        *sq = _mm256_srli_epi32::<{ ENTRY_SYMBOL_SHIFT as i32 }>(e);
                    }
                    pos[p] += k;
                    if pos[p] > count[p] {
                        return None;
                    }
                    rows[p][r] =
                        _mm256_packus_epi16(_mm256_packus_epi32(s[0], s[1]), _mm256_packus_epi32(s[2], s[3]));
                }
            }
            for (rows, body) in rows.iter().zip(body.iter_mut()) {
                // SAFETY: AVX2 is enabled in this function.
                unsafe { store_transposed(rows, body, t) };
            }
            t += LANE_GROUP;
        }
        for (p, xp) in x.iter().enumerate() {
            for (q, xq) in xp.iter().enumerate() {
                // SAFETY: as the loads above.
                unsafe { _mm256_storeu_si256(st[p].as_mut_ptr().add(8 * q).cast(), *xq) };
            }
        }
        Some(pos)
    }

    /// Transposes 8 packed rows (steps `t..t + 8`, `t` a multiple of 8: one tile) and
    /// stores each lane's 8 symbols at `body[lane_symbol(lane, t)..][..8]`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_transposed(rows: &[__m256i; 8], body: &mut [u8], t: usize) {
        let [c0, c1, c2, c3, c4, c5, c6, c7] = *rows;
        let (a0, a1) = (_mm256_unpacklo_epi8(c0, c1), _mm256_unpackhi_epi8(c0, c1));
        let (a2, a3) = (_mm256_unpacklo_epi8(c2, c3), _mm256_unpackhi_epi8(c2, c3));
        let (a4, a5) = (_mm256_unpacklo_epi8(c4, c5), _mm256_unpackhi_epi8(c4, c5));
        let (a6, a7) = (_mm256_unpacklo_epi8(c6, c7), _mm256_unpackhi_epi8(c6, c7));
        let b = [
            _mm256_unpacklo_epi16(a0, a2),
            _mm256_unpackhi_epi16(a0, a2),
            _mm256_unpacklo_epi16(a1, a3),
            _mm256_unpackhi_epi16(a1, a3),
        ];
        let d = [
            _mm256_unpacklo_epi16(a4, a6),
            _mm256_unpackhi_epi16(a4, a6),
            _mm256_unpacklo_epi16(a5, a7),
            _mm256_unpackhi_epi16(a5, a7),
        ];
        let mut out = [0u64; LANES];
        for i in 0..4 {
            // SAFETY: `out[8 i..8 i + 8]` is 64 bytes: two 32-byte stores.
            unsafe {
                let o = out.as_mut_ptr().add(8 * i);
                _mm256_storeu_si256(o.cast(), _mm256_unpacklo_epi32(b[i], d[i]));
                _mm256_storeu_si256(o.add(4).cast(), _mm256_unpackhi_epi32(b[i], d[i]));
            }
        }
        for (&v, &lane) in out.iter().zip(&CHUNK_LANE) {
            let at = lane_symbol(lane as usize, t);
            body[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Writes the packed decode table of `model` (spec §5.4) into `table`, zero-padded to
/// [`TABLE_SLOTS`] entries.
pub(crate) fn fill_decode_table(model: &crate::model::Model, table: &mut [u32; TABLE_SLOTS]) {
    let mut at = 0usize;
    for &(s, f) in model.entries() {
        let base =
            ((s as u32) << ENTRY_SYMBOL_SHIFT) | (((f as u32 - 1) & ENTRY_FIELD_MASK) << ENTRY_FREQ_SHIFT);
        // A validated model's frequencies sum to 2^n <= 4096; `get_mut` keeps a
        // hypothetical excess from panicking.
        let end = (at + f as usize).min(TABLE_SLOTS);
        for (bias, slot) in table[at.min(end)..end].iter_mut().enumerate() {
            *slot = base | bias as u32;
        }
        at = end;
    }
    table[at..].fill(0);
}

/// The packed decode table of `model` zero-padded to [`TABLE_SLOTS`] entries.
#[cfg(test)]
pub(crate) fn padded_decode_table(model: &crate::model::Model) -> Box<[u32; TABLE_SLOTS]> {
    let mut table = Box::new([0u32; TABLE_SLOTS]);
    for (slot, e) in table.iter_mut().zip(model.decode_table()) {
        *slot = e;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;

    fn model_of(symbols: &[u8], precision: u8) -> Model {
        let mut counts = [0u64; 256];
        counts[0] = symbols.is_empty() as u64; // an empty partition still needs some model
        for &s in symbols {
            counts[s as usize] += 1;
        }
        Model::quantize(&counts, precision).unwrap()
    }

    /// Version 3's lanes: every one starts at exactly 2^16 and carries no payload.
    const NO_PAYLOAD: [u8; LANES] = [0; LANES];
    const PLAIN: [u32; LANES] = [STATE_LOWER; LANES];

    fn round_trip(symbols: &[u8], precision: u8) -> (usize, [u32; LANES]) {
        let model = model_of(symbols, precision);
        let mut words = Vec::new();
        let states = encode_partition(symbols, &model.encode_table(), precision as u32, &PLAIN, &mut words);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = vec![0u8; symbols.len()];
        let table = padded_decode_table(&model);
        let finals =
            decode_partition(0, &states, &NO_PAYLOAD, &bytes, &table, precision as u32, &mut out).unwrap();
        assert_eq!(out, symbols);
        assert_eq!(finals, PLAIN);
        (words.len(), states)
    }

    #[test]
    fn round_trips_every_partition_length_around_the_lane_boundaries() {
        let mut rng = kvcodec_testkit::Rng(1);
        for n in (0..70).chain([95, 96, 97, 255, 256, 257, 511, 512, 513, 1000, 4097]) {
            let symbols: Vec<u8> = (0..n)
                .map(|_| [127u8, 127, 127, 126, 128, 126, 3, 250][(rng.next() >> 29) as usize])
                .collect();
            for precision in [1u8, 5, 12] {
                if precision == 1 && symbols.iter().collect::<std::collections::HashSet<_>>().len() > 2 {
                    continue;
                }
                round_trip(&symbols, precision);
            }
        }
    }

    #[test]
    fn simd_and_scalar_full_steps_agree_on_valid_and_corrupt_streams() {
        let mut rng = kvcodec_testkit::Rng(7);
        for n in [256usize, 512, 2560, 4096, 23040] {
            let symbols: Vec<u8> = (0..n)
                .map(|_| [127u8, 127, 127, 126, 128, 126, 3, 250, 127, 125][(rng.next() >> 28) as usize % 10])
                .collect();
            let model = model_of(&symbols, 12);
            let mut words = Vec::new();
            let states = encode_partition(&symbols, &model.encode_table(), 12, &PLAIN, &mut words);
            let table = padded_decode_table(&model);
            let m = n / LANES;
            for corrupt in 0..6usize {
                let mut w = words.clone();
                let mut st = states;
                match corrupt {
                    0 => {}
                    1 => w.truncate(w.len() / 2),
                    2 => w.push(0x1234),
                    3 => st[5] ^= 0x00ff_0000,
                    4 if !w.is_empty() => {
                        let i = w.len() / 3;
                        w[i] ^= 0xffff;
                    }
                    _ => w.clear(),
                }
                let count = w.len();
                w.resize(count + WORD_PAD, 0);
                let run = |simd: bool| {
                    let mut st = st;
                    let mut body = vec![0u8; n];
                    let pos = full_steps(&mut st, &table, 4095, 12, &w, count, &mut body, m, simd);
                    (pos, pos.map(|_| (st, body)))
                };
                assert_eq!(run(true), run(false), "n {n} corrupt {corrupt}");
                if corrupt == 0 {
                    assert_eq!(run(false).1.unwrap().1, symbols);
                }
            }
        }
    }

    fn check_group<const P: usize>(n: usize, rng: &mut kvcodec_testkit::Rng) {
        let parts: Vec<Vec<u8>> = (0..P)
            .map(|_| {
                (0..n)
                    .map(|_| {
                        [127u8, 127, 127, 126, 128, 126, 3, 250, 127, 125][(rng.next() >> 28) as usize % 10]
                    })
                    .collect()
            })
            .collect();
        let model = model_of(&parts.concat(), 12);
        let table = padded_decode_table(&model);
        // Half the groups carry a version 4 payload, of a capacity that varies by lane.
        let payload: [u8; LANES] = std::array::from_fn(|j| if P > 1 { (j % 3) as u8 } else { 0 });
        let initial: Vec<[u32; LANES]> = (0..P)
            .map(|_| {
                std::array::from_fn(|j| {
                    let bytes = rng.next() & ((1u32 << (8 * payload[j])) - 1);
                    STATE_LOWER + bytes
                })
            })
            .collect();
        let encoded: Vec<(Vec<u16>, [u32; LANES])> = parts
            .iter()
            .zip(&initial)
            .map(|(p, initial)| {
                let mut words = Vec::new();
                let states = encode_partition(p, &model.encode_table(), 12, initial, &mut words);
                (words, states)
            })
            .collect();
        for corrupt in 0..4 + 4 * P {
            let mut enc = encoded.clone();
            let which = corrupt % P;
            match corrupt / P {
                0 if corrupt == 0 => {}
                0 => {
                    enc[0].0.clear();
                    enc[which].0.push(7);
                }
                1 => {
                    let len = enc[which].0.len();
                    enc[which].0.truncate(len / 2);
                }
                2 => enc[which].0.push(0x1234),
                3 => enc[which].1[5] ^= 0x00ff_0000,
                4 => enc[which].1[9] = 5,
                _ => {
                    let len = enc[which].0.len();
                    if len > 0 {
                        enc[which].0[len / 3] ^= 0xffff;
                    }
                }
            }
            let bytes: Vec<Vec<u8>> =
                enc.iter().map(|(w, _)| w.iter().flat_map(|w| w.to_le_bytes()).collect()).collect();
            let mut a = vec![vec![0u8; n]; P];
            let mut scratch = Vec::new();
            let group = decode_partitions_with::<P>(
                3,
                std::array::from_fn(|p| &enc[p].1),
                [&payload; P],
                std::array::from_fn(|p| &bytes[p][..]),
                &table,
                12,
                a.iter_mut().map(|o| &mut o[..]).collect::<Vec<_>>().try_into().unwrap(),
                &mut scratch,
            );
            let mut b = vec![vec![0u8; n]; P];
            let one_by_one: Result<Vec<[u32; LANES]>> = b
                .iter_mut()
                .enumerate()
                .map(|(p, o)| {
                    decode_partition_with(3 + p, &enc[p].1, &payload, &bytes[p], &table, 12, o, &mut scratch)
                })
                .collect();
            let group = group.map(|g| g.to_vec());
            assert_eq!(group, one_by_one, "P {P} n {n} corrupt {corrupt}");
            if group.is_ok() {
                assert_eq!(a, b, "P {P} n {n} corrupt {corrupt}");
            }
            if corrupt == 0 {
                assert_eq!(group.unwrap(), initial, "the final states are the initial ones");
                assert_eq!(a, parts);
            }
        }
    }

    #[test]
    fn grouped_decode_matches_one_by_one_on_valid_and_corrupt_streams() {
        let mut rng = kvcodec_testkit::Rng(11);
        for n in [0usize, 31, 32, 64, 256, 300, 320, 4096, 23040, 23041, 23072] {
            check_group::<1>(n, &mut rng);
            check_group::<2>(n, &mut rng);
            check_group::<4>(n, &mut rng);
        }
    }

    #[test]
    fn single_symbol_partitions_need_no_words() {
        let (words, states) = round_trip(&[42; 1000], 12);
        assert_eq!(words, 0);
        assert_eq!(states, [STATE_LOWER; LANES]);
    }

    #[test]
    fn rare_symbols_emit_at_most_one_word_each() {
        // Alternating frequency-1 symbols cost 12 bits each: the state must shed a word
        // on nearly every symbol, never two.
        let mut symbols = vec![0u8; 4000];
        for (i, s) in symbols.iter_mut().enumerate() {
            *s = if i % 2 == 0 { 1 } else { 2 };
        }
        symbols[0] = 3; // a third symbol keeps 1 and 2 from getting half the slots each
        let mut counts = [0u64; 256];
        counts[1] = 1;
        counts[2] = 1;
        counts[3] = 1_000_000;
        let model = Model::quantize(&counts, 12).unwrap();
        let mut words = Vec::new();
        encode_partition(&symbols, &model.encode_table(), 12, &PLAIN, &mut words);
        assert!(words.len() <= symbols.len());
        assert!(words.len() > symbols.len() * 2 / 3, "{} words", words.len());
    }

    #[test]
    fn word_order_is_step_major_then_ascending_lane() {
        // 64 symbols, one partial tile: lane j < 8 owns symbols 8j .. 8j + 7 (steps 0..8),
        // lanes 8..32 are idle. Only lanes 3 and 6 see rare symbols, in their steps 0 and
        // 1, so only they ever read words; lane 6's word in step 0 must come after lane
        // 3's step-0 word, and there are no step-1 words (a lane's last symbol never
        // needs one: its state ends at 2^16).
        let mut symbols = vec![0u8; 64];
        (symbols[24], symbols[25], symbols[48], symbols[49]) = (1, 2, 2, 1);
        let model = Model::from_entries(12, vec![(0, 4094), (1, 1), (2, 1)]).unwrap();
        let mut words = Vec::new();
        let states = encode_partition(&symbols, &model.encode_table(), 12, &PLAIN, &mut words);
        // Steps 7..2 of symbol 0 (freq 4094, cdf 0) take 2^16 to 2^16 + 6 * 32 = 65728.
        // Lane 3 then encodes symbol 25 (sym 2, cdf 4095): x = 65728 << 12 | 4095, and
        // sheds its low word 4095 before encoding symbol 24 (sym 1, cdf 4094), leaving
        // (65728 >> 4) << 12 | 4094. Lane 6 mirrors it and sheds 4094. The decoder reads
        // lane 3's word first.
        assert_eq!(words, vec![4095, 4094]);
        assert_eq!(states[3], (4108 << 12) + 4094);
        assert_eq!(states[6], (4108 << 12) + 4095);
        // 8 steps of symbol 0: 2^16 + 8 * 32. Idle lanes keep 2^16.
        assert_eq!(states[0], 65_792);
        assert_eq!(states[7], 65_792);
        assert_eq!(states[8], STATE_LOWER);
        assert_eq!(states[31], STATE_LOWER);
    }

    #[test]
    fn payload_states_round_trip_and_an_excess_byte_is_a_final_state_mismatch() {
        // 300 symbols: a whole tile and a partial one of 44 (lanes 0..=5 busy in it).
        let mut rng = kvcodec_testkit::Rng(5);
        let symbols: Vec<u8> =
            (0..300).map(|_| [127u8, 127, 127, 126, 128, 3][(rng.next() >> 29) as usize % 6]).collect();
        let model = model_of(&symbols, 12);
        let table = padded_decode_table(&model);
        // Lanes 0..10 carry 2 bytes, lane 10 one, the rest none: 21 payload bytes.
        let payload: [u8; LANES] = std::array::from_fn(|j| match j {
            0..10 => 2,
            10 => 1,
            _ => 0,
        });
        let initial: [u32; LANES] = std::array::from_fn(|j| match payload[j] {
            2 => STATE_LOWER + 0xff80 - j as u32, // b0 and b1 both nonzero
            1 => STATE_LOWER + 0x7f,
            _ => STATE_LOWER,
        });
        let mut words = Vec::new();
        let states = encode_partition(&symbols, &model.encode_table(), 12, &initial, &mut words);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = vec![0u8; symbols.len()];
        let finals = decode_partition(0, &states, &payload, &bytes, &table, 12, &mut out).unwrap();
        assert_eq!(out, symbols);
        assert_eq!(finals, initial);
        // Declared capacity below what a lane holds: lane 10 ends at 2^16 + 0x7f, which
        // needs one byte.
        let mut short = payload;
        short[10] = 0;
        assert_eq!(
            decode_partition(0, &states, &short, &bytes, &table, 12, &mut out),
            Err(Error::FinalStateMismatch { partition: 0, lane: 10, state: STATE_LOWER + 0x7f })
        );
        // In a partition of one partial tile (44 symbols: lanes 6..32 idle), an idle lane's
        // state is its final state: a byte beyond its capacity of 0 fails, and so does a
        // state of 2^17 or more whatever the capacity (two bytes hold at most 2^16 - 1).
        let short_symbols = &symbols[..44];
        words.clear();
        let states = encode_partition(short_symbols, &model.encode_table(), 12, &initial, &mut words);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = vec![0u8; 44];
        assert_eq!(decode_partition(0, &states, &payload, &bytes, &table, 12, &mut out), Ok(initial));
        assert_eq!(out, short_symbols);
        let mut corrupt = states;
        corrupt[20] += 0x100;
        assert_eq!(
            decode_partition(0, &corrupt, &payload, &bytes, &table, 12, &mut out),
            Err(Error::FinalStateMismatch { partition: 0, lane: 20, state: STATE_LOWER + 0x100 })
        );
        corrupt[20] = 2 * STATE_LOWER;
        assert_eq!(
            decode_partition(0, &corrupt, &[2; LANES], &bytes, &table, 12, &mut out),
            Err(Error::FinalStateMismatch { partition: 0, lane: 20, state: 2 * STATE_LOWER })
        );
    }
}
