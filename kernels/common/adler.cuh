// Adler-32 on the GPU as two sums over the bytes b_i of BF16 values (little-endian, 2
// bytes per value): S = sum of b_i and W = sum of i * b_i, i the byte's position in the
// checksummed run. Any thread adds the bytes it holds, in any order; a warp or CTA
// reduces its threads' sums and adds them, modulo 65521, to a pair of device counters;
// the host turns the pair into the checksum (bf16_field::integrity::adler32_from_sums).
// Mirrors crates/bf16-field/src/integrity.rs.
#pragma once
#include <stdint.h>

#define KV_ADLER_MOD 65521ull

// Positions are relative to a base the caller fixes (a tile's or a warp's first byte),
// so that a thread's sums fit 32 bits and cost 32-bit multiply-adds. A 16-byte group at
// relative positions below 2^p adds less than 2^p * 4080 to W, so a caller must keep
// groups * 2^p * 4080 below 2^32 (the tile kernels: 4 groups below 2^14; kv_adler_records:
// 16 below 2^13). The flush adds base * S.

// Adds 16 bytes (8 BF16 words), the first at relative byte position `rel`: two dot
// products of four bytes with (1, 1, 1, 1) and with their offsets (0..15) per word.
__device__ __forceinline__ void kv_adler_add16(uint4 w, uint32_t rel, uint32_t& s, uint32_t& ws) {
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
    ws += rel * sum + offs;
}

// The tile loops' form: running sums over the 16-byte groups a thread or lane holds,
// s = sum of the bytes and o = sum of each byte times its offset (0..15) in its group,
// the dp4a chained through both, so that a group costs its eight dp4a and nothing else.
// The groups' own positions enter once, after the loop: for groups g at 16-byte-aligned
// relative positions P_g = a + d g, the weighted sum is a S + d (G S - Q) + o, where
// Q = sum of s after each group (one add a group, or one wide multiply-add, see the
// callers) and G the number of groups; kv_adler_add16 instead paid a multiply-add by
// the position and two adds a group.
__device__ __forceinline__ void kv_adler_chain16(uint4 w, uint32_t& s, uint32_t& o) {
    const unsigned ones = 0x01010101u;
    s = __dp4a(w.x, ones, s);
    s = __dp4a(w.y, ones, s);
    s = __dp4a(w.z, ones, s);
    s = __dp4a(w.w, ones, s);
    o = __dp4a(w.x, 0x03020100u, o);
    o = __dp4a(w.y, 0x07060504u, o);
    o = __dp4a(w.z, 0x0b0a0908u, o);
    o = __dp4a(w.w, 0x0f0e0d0cu, o);
}

// kv_adler_add16 for a thread whose weighted sum may pass 2^32 (relative positions below
// 2^32 but too many groups for the bound above): W in 64 bits, one wide multiply-add
// more. S stays 32 bits: the caller keeps the thread's bytes below 2^24.
__device__ __forceinline__ void kv_adler_add16_wide(uint4 w, uint32_t rel, uint32_t& s, unsigned long long& ws) {
    uint32_t sum = 0, offs = 0;
    kv_adler_add16(w, 0u, sum, offs);
    s += sum;
    ws += (unsigned long long)rel * sum + offs;
}

// Adds one BF16 word whose low byte is at relative byte position `rel`.
__device__ __forceinline__ void kv_adler_add_word(uint32_t word, uint32_t rel, uint32_t& s, uint32_t& ws) {
    const uint32_t lo = word & 0xffu, hi = (word >> 8) & 0xffu;
    s += lo + hi;
    ws += rel * (lo + hi) + hi;
}

// kv_adler_add_word with a 64-bit weighted sum (see kv_adler_add16_wide).
__device__ __forceinline__ void kv_adler_add_word_wide(uint32_t word, uint32_t rel, uint32_t& s,
                                                       unsigned long long& ws) {
    const uint32_t lo = word & 0xffu, hi = (word >> 8) & 0xffu;
    s += lo + hi;
    ws += (unsigned long long)rel * (lo + hi) + hi;
}

// Adds a run's sums (S, W relative to byte position `base`) to the counters, modulo
// 65521: W + base * S.
__device__ __forceinline__ void kv_adler_commit(unsigned long long s, unsigned long long ws,
                                                unsigned long long base, unsigned long long* sums) {
    if ((s | ws) == 0) return;
    const unsigned long long m = KV_ADLER_MOD;
    s %= m;
    atomicAdd(sums, s);
    atomicAdd(sums + 1, (ws % m + base % m * s) % m);
}

// Sums every lane's (s, ws) over the warp and commits them (lane 0). All 32 lanes call it.
__device__ __forceinline__ void kv_adler_warp_flush(uint32_t s, uint32_t ws, unsigned long long base,
                                                    unsigned long long* sums) {
    unsigned long long s64 = s, ws64 = ws;
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
        s64 += __shfl_down_sync(0xffffffffu, s64, d);
        ws64 += __shfl_down_sync(0xffffffffu, ws64, d);
    }
    if (threadIdx.x % 32 == 0) kv_adler_commit(s64, ws64, base, sums);
}

// Adds a run's sums, each already below 65521, to the counters: S and W + base * S,
// modulo 65521 (base below 2^64).
__device__ __forceinline__ void kv_adler_commit32(uint32_t s, uint32_t ws, unsigned long long base,
                                                  unsigned long long* sums) {
    if ((s | ws) == 0) return;
    const uint32_t m = (uint32_t)KV_ADLER_MOD;
    const uint32_t base_m = (uint32_t)(base % KV_ADLER_MOD);
    atomicAdd(sums, (unsigned long long)s);
    atomicAdd(sums + 1, (unsigned long long)((ws + base_m * s % m) % m));
}

// kv_adler_warp_flush for sums of any size: each lane reduces its own modulo 65521
// first, so that the warp's totals fit 32 bits and one redux.sync each sums them (where
// five 64-bit shuffles and adds each did). All 32 lanes call it.
__device__ __forceinline__ void kv_adler_warp_flush_mod(unsigned long long s, unsigned long long ws,
                                                        unsigned long long base, unsigned long long* sums) {
    const uint32_t s_m = __reduce_add_sync(0xffffffffu, (uint32_t)(s % KV_ADLER_MOD));
    const uint32_t ws_m = __reduce_add_sync(0xffffffffu, (uint32_t)(ws % KV_ADLER_MOD));
    if (threadIdx.x % 32 == 0) kv_adler_commit32(s_m % (uint32_t)KV_ADLER_MOD, ws_m % (uint32_t)KV_ADLER_MOD, base, sums);
}

// kv_adler_warp_flush_mod for a 32-bit byte sum (a 32-bit modulo, not a 64-bit one).
__device__ __forceinline__ void kv_adler_warp_flush_mod32(uint32_t s, unsigned long long ws, unsigned long long base,
                                                          unsigned long long* sums) {
    const uint32_t s_m = __reduce_add_sync(0xffffffffu, s % (uint32_t)KV_ADLER_MOD);
    const uint32_t ws_m = __reduce_add_sync(0xffffffffu, (uint32_t)(ws % KV_ADLER_MOD));
    if (threadIdx.x % 32 == 0) kv_adler_commit32(s_m % (uint32_t)KV_ADLER_MOD, ws_m % (uint32_t)KV_ADLER_MOD, base, sums);
}

// Sums every thread's (s, ws) over the CTA and commits them (thread 0). Every thread of
// the CTA calls it (it has barriers); `scratch` holds 2 * (blockDim.x / 32) words.
__device__ __forceinline__ void kv_adler_cta_flush(uint32_t s, uint32_t ws, unsigned long long base,
                                                   unsigned long long* scratch, unsigned long long* sums) {
    unsigned long long s64 = s, ws64 = ws;
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
        s64 += __shfl_down_sync(0xffffffffu, s64, d);
        ws64 += __shfl_down_sync(0xffffffffu, ws64, d);
    }
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    __syncthreads();  // scratch may still be read by a previous flush
    if (lane == 0) {
        scratch[2 * warp] = s64;
        scratch[2 * warp + 1] = ws64;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long cs = 0, cws = 0;
        for (unsigned w = 0; w < warps; ++w) {
            cs += scratch[2 * w];
            cws += scratch[2 * w + 1];
        }
        kv_adler_commit(cs, cws, base, sums);
    }
}

// kv_adler_cta_flush for a CTA that flushes once (no barrier before the scratch is
// written), with no modulo in the threads: each warp sums s and the two 16-bit halves
// of ws with one redux.sync each (the halves' sums fit 32 bits for any ws), lane 0
// writes the three to `scratch`, and after the one barrier warp 0 sums the warps' the
// same way and commits. The caller keeps the CTA's total s below 2^32. `scratch` holds
// 3 * (blockDim.x / 32) words. Every thread of the CTA calls it.
__device__ __forceinline__ void kv_adler_cta_flush_once(uint32_t s, uint32_t ws, unsigned long long base,
                                                        uint32_t* scratch, unsigned long long* sums) {
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    s = __reduce_add_sync(0xffffffffu, s);
    uint32_t lo = __reduce_add_sync(0xffffffffu, ws & 0xffffu);
    uint32_t hi = __reduce_add_sync(0xffffffffu, ws >> 16);
    if (lane == 0) {
        scratch[3 * warp] = s;
        scratch[3 * warp + 1] = lo;
        scratch[3 * warp + 2] = hi;
    }
    __syncthreads();
    if (warp == 0) {
        s = lo = hi = 0;
        if (lane < warps) {
            s = scratch[3 * lane];
            lo = scratch[3 * lane + 1];
            hi = scratch[3 * lane + 2];
        }
        s = __reduce_add_sync(0xffffffffu, s);
        lo = __reduce_add_sync(0xffffffffu, lo);
        hi = __reduce_add_sync(0xffffffffu, hi);
        // ws = 2^16 hi + lo, and 2^16 = 15 modulo 65521: below 2^31 for 1024 threads.
        const uint32_t m = (uint32_t)KV_ADLER_MOD;
        if (lane == 0) kv_adler_commit32(s % m, (15u * hi + lo) % m, base, sums);
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
