// Adler-32 on the GPU as two sums over the bytes b_i of BF16 values (little-endian, 2
// bytes per value): S = sum of b_i and W = sum of i * b_i, i the byte's position in the
// checksummed run. Any thread adds the bytes it holds, in any order; a CTA reduces its
// threads' sums modulo 65521 and adds them to a pair of device counters; the host turns
// the pair into the checksum (bf16_field::integrity::adler32_from_sums). Mirrors
// crates/bf16-field/src/integrity.rs.
#pragma once
#include <stdint.h>

#define KV_ADLER_MOD 65521ull

// Adds 16 bytes (8 BF16 words), the first at byte position `pos`: two dot products of
// four bytes with (1, 1, 1, 1) and with their offsets (0..15) per 32-bit word.
__device__ __forceinline__ void kv_adler_add16(uint4 w, unsigned long long pos, unsigned long long& s,
                                               unsigned long long& ws) {
    const unsigned ones = 0x01010101u;
    unsigned sum = __dp4a(w.x, ones, 0u);
    sum = __dp4a(w.y, ones, sum);
    sum = __dp4a(w.z, ones, sum);
    sum = __dp4a(w.w, ones, sum);
    unsigned offs = __dp4a(w.x, 0x03020100u, 0u);
    offs = __dp4a(w.y, 0x07060504u, offs);
    offs = __dp4a(w.z, 0x0b0a0908u, offs);
    offs = __dp4a(w.w, 0x0f0e0d0cu, offs);
    s += sum;
    ws += pos * sum + offs;
}

// Adds one BF16 word whose low byte is at byte position `pos`.
__device__ __forceinline__ void kv_adler_add_word(uint32_t word, unsigned long long pos, unsigned long long& s,
                                                  unsigned long long& ws) {
    const unsigned lo = word & 0xffu, hi = (word >> 8) & 0xffu;
    s += lo + hi;
    ws += pos * (lo + hi) + hi;
}

// Reduces every thread's (s, ws) over the CTA and adds the CTA's sums, modulo 65521, to
// sums[0] and sums[1]. Every thread of the CTA must call it (it has barriers);
// `scratch` holds 2 * (blockDim.x / 32) words. A thread's ws stays below 2^64: positions
// are below 2^34 bytes and a thread adds at most a few thousand bytes.
__device__ __forceinline__ void kv_adler_cta_flush(unsigned long long s, unsigned long long ws,
                                                   unsigned long long* scratch, unsigned long long* sums) {
    s %= KV_ADLER_MOD;
    ws %= KV_ADLER_MOD;
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
        s += __shfl_down_sync(0xffffffffu, s, d);
        ws += __shfl_down_sync(0xffffffffu, ws, d);
    }
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    __syncthreads();  // scratch may still be read by a previous flush
    if (lane == 0) {
        scratch[2 * warp] = s;
        scratch[2 * warp + 1] = ws;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long cs = 0, cws = 0;
        for (unsigned w = 0; w < warps; ++w) {
            cs += scratch[2 * w];
            cws += scratch[2 * w + 1];
        }
        if (cs | cws) {
            atomicAdd(sums, cs % KV_ADLER_MOD);
            atomicAdd(sums + 1, cws % KV_ADLER_MOD);
        }
    }
}

// The Adler-32 of `len` bytes from their sums (bf16_field::integrity::adler32_from_sums):
// A = 1 + S, B = len + len * S - W, modulo 65521.
__device__ __forceinline__ uint32_t kv_adler_from_sums(unsigned long long len, unsigned long long s,
                                                       unsigned long long ws) {
    const unsigned long long m = KV_ADLER_MOD, n = len % m;
    s %= m;
    const unsigned long long a = (1 + s) % m;
    const unsigned long long b = (n + n * s % m + m - ws % m) % m;
    return (uint32_t)(b << 16 | a);
}
