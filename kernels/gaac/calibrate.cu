// GAAC self-calibration on the device (docs/formats/gaac.md, spec 2.1 and 5.4; Rust side
// crates/gaac/src/gpu/encode.rs): the base of every (layer, kind, KV head, channel) from
// the cache's own first n tokens, exactly as the CPU's Bases::calibrate_words computes it
// (crates/gaac/src/bases.rs): a histogram of the column's n exponents, then the b in
// 0..=248 with the most of them in [b, b + 7], the smallest b on a tie.
//
// One thread per column (tensor, head, channel): the columns are the bases' container
// order (layer, kind, head, channel), so adjacent lanes read adjacent words of a token
// row and write adjacent bases. Each lane's histogram is its own column of a
// [256][GAAC_CALIBRATE_THREADS] shared-memory array (one warp per CTA: 32 KiB, static) (bank = lane: increments never conflict, and no lane
// reads another's counts, so no barrier is needed). The encoder launches it on its stream
// before the block kernel, which reads the bases from device memory: no host sync.

#include <stdint.h>

#include "gaac/gaac_format.gen.cuh"

// Bins of an exponent histogram: every 8-bit exponent.
#define GAAC_EXPONENTS 256

// Bases of `columns` columns: column c is word `(c / row_values) * tensor_values + t *
// row_values + c % row_values` of token t (every tensor [T, H D] of the layer-major
// cache, `row_values` = H D), calibrated on tokens 0..tokens (1..=T), into bases[c].
extern "C" __global__ void __launch_bounds__(GAAC_CALIBRATE_THREADS)
    gaac_calibrate(const uint16_t* __restrict__ words, unsigned long long tensor_values,
                   unsigned long long row_values, unsigned long long tokens, unsigned long long columns,
                   uint8_t* __restrict__ bases) {
    __shared__ unsigned counts[GAAC_EXPONENTS][GAAC_CALIBRATE_THREADS];
    const unsigned lane = threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * GAAC_CALIBRATE_THREADS;
    for (unsigned long long col = (unsigned long long)blockIdx.x * GAAC_CALIBRATE_THREADS + lane; col < columns;
         col += stride) {
        for (int e = 0; e < GAAC_EXPONENTS; ++e) {
            counts[e][lane] = 0;
        }
        const uint16_t* column = words + (col / row_values) * tensor_values + col % row_values;
#pragma unroll 4
        for (unsigned long long t = 0; t < tokens; ++t) {
            counts[(column[t * row_values] >> 7) & 0xff][lane] += 1;
        }
        // The window [b, b + 7] slid from b = 0 (Rust's best_base, line for line).
        unsigned window = 0;
        for (unsigned e = 0; e <= GAAC_OFFSET3_MAX; ++e) {
            window += counts[e][lane];
        }
        unsigned best = 0, best_count = window;
        for (unsigned b = 1; b <= GAAC_MAX_BASE; ++b) {
            window = window - counts[b - 1][lane] + counts[b + GAAC_OFFSET3_MAX][lane];
            if (window > best_count) {
                best = b;
                best_count = window;
            }
        }
        bases[col] = (uint8_t)best;
    }
}
