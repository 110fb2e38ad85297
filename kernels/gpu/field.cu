// GPU split and merge of BF16 words into exponent and sign+mantissa byte streams.
// Byte-identical to crates/bf16-field/src/field.rs (the CPU reference); launched by
// crates/gpu/src/field.rs.
//
// Merge: a thread owns groups of 8 values (8 bytes of each byte stream in, 16 bytes of
// words out), so every warp-wide load and store is contiguous (coalesced). Each thread keeps UNROLL
// groups in flight (all loads issued before the first use) and the grid strides over
// tiles of blockDim * UNROLL groups. The last n % 8 values are handled one per thread.
#include "../common/bf16_field.cuh"

#define KV_FIELD_UNROLL 4

extern "C" __global__ void bf16_split(const uint16_t* __restrict__ words,
                                      uint8_t* __restrict__ exponents,
                                      uint8_t* __restrict__ sign_mantissa,
                                      unsigned long long n) {
    // Split moves 16 values per group: two adjacent 16-byte loads (the warp's pair of
    // loads covers one contiguous 1 KiB) and one 16-byte store per byte stream; 8-value
    // groups measured slower (docs/perf/field.md).
    const unsigned long long groups = n / 16;
    const unsigned long long tile = (unsigned long long)blockDim.x * KV_FIELD_UNROLL;
    const uint4* in = reinterpret_cast<const uint4*>(words);
    uint4* e_out = reinterpret_cast<uint4*>(exponents);
    uint4* sf_out = reinterpret_cast<uint4*>(sign_mantissa);
    for (unsigned long long base = (unsigned long long)blockIdx.x * tile; base < groups;
         base += (unsigned long long)gridDim.x * tile) {
        uint4 a[KV_FIELD_UNROLL], b[KV_FIELD_UNROLL];
#pragma unroll
        for (int u = 0; u < KV_FIELD_UNROLL; ++u) {
            const unsigned long long g = base + u * blockDim.x + threadIdx.x;
            if (g < groups) {
                a[u] = __ldcs(in + 2 * g);
                b[u] = __ldcs(in + 2 * g + 1);
            }
        }
#pragma unroll
        for (int u = 0; u < KV_FIELD_UNROLL; ++u) {
            const unsigned long long g = base + u * blockDim.x + threadIdx.x;
            if (g < groups) {
                const uint32_t w[8] = {a[u].x, a[u].y, a[u].z, a[u].w, b[u].x, b[u].y, b[u].z, b[u].w};
                uint32_t e[4], sf[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    e[i] = kv_exponents_of_pair(w[2 * i]) | (kv_exponents_of_pair(w[2 * i + 1]) << 16);
                    sf[i] = kv_sign_mantissas_of_pair(w[2 * i]) | (kv_sign_mantissas_of_pair(w[2 * i + 1]) << 16);
                }
                __stcs(e_out + g, make_uint4(e[0], e[1], e[2], e[3]));
                __stcs(sf_out + g, make_uint4(sf[0], sf[1], sf[2], sf[3]));
            }
        }
    }
    const unsigned long long tail = groups * 16 + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tail < n) {
        const uint32_t w = words[tail];
        exponents[tail] = (uint8_t)kv_exponent_of(w);
        sign_mantissa[tail] = (uint8_t)kv_sign_mantissa_of(w);
    }
}

extern "C" __global__ void bf16_merge(const uint8_t* __restrict__ exponents,
                                      const uint8_t* __restrict__ sign_mantissa,
                                      uint16_t* __restrict__ words,
                                      unsigned long long n) {
    const unsigned long long groups = n / 8;
    const unsigned long long tile = (unsigned long long)blockDim.x * KV_FIELD_UNROLL;
    const uint2* e_in = reinterpret_cast<const uint2*>(exponents);
    const uint2* sf_in = reinterpret_cast<const uint2*>(sign_mantissa);
    uint4* out = reinterpret_cast<uint4*>(words);
    for (unsigned long long base = (unsigned long long)blockIdx.x * tile; base < groups;
         base += (unsigned long long)gridDim.x * tile) {
        uint2 e[KV_FIELD_UNROLL], sf[KV_FIELD_UNROLL];
#pragma unroll
        for (int u = 0; u < KV_FIELD_UNROLL; ++u) {
            const unsigned long long g = base + u * blockDim.x + threadIdx.x;
            if (g < groups) {
                e[u] = __ldcs(e_in + g);
                sf[u] = __ldcs(sf_in + g);
            }
        }
#pragma unroll
        for (int u = 0; u < KV_FIELD_UNROLL; ++u) {
            const unsigned long long g = base + u * blockDim.x + threadIdx.x;
            if (g < groups) {
                const uint2 lo = kv_join_quad(e[u].x, sf[u].x);
                const uint2 hi = kv_join_quad(e[u].y, sf[u].y);
                __stcs(out + g, make_uint4(lo.x, lo.y, hi.x, hi.y));
            }
        }
    }
    const unsigned long long tail = groups * 8 + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tail < n) {
        words[tail] = (uint16_t)kv_join(exponents[tail], sign_mantissa[tail]);
    }
}
