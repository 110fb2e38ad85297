// GPU split and merge of BF16 words into exponent and sign+mantissa byte streams.
// Byte-identical to crates/bf16-field/src/field.rs (the CPU reference).
//
// Each thread moves 16 values per step: two 16-byte loads of words and one 16-byte
// store per byte stream (merge: the reverse), in a grid-stride loop. The last
// n % 16 values are handled one per thread by the first threads of the grid.
#include "../common/bf16_field.cuh"

extern "C" __global__ void bf16_split(const uint16_t* __restrict__ words,
                                      uint8_t* __restrict__ exponents,
                                      uint8_t* __restrict__ sign_mantissa,
                                      unsigned long long n) {
    const unsigned long long groups = n / 16;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* in = reinterpret_cast<const uint4*>(words);
    uint4* e_out = reinterpret_cast<uint4*>(exponents);
    uint4* sf_out = reinterpret_cast<uint4*>(sign_mantissa);
    for (unsigned long long g = tid; g < groups; g += stride) {
        const uint4 a = __ldcs(in + 2 * g);
        const uint4 b = __ldcs(in + 2 * g + 1);
        const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint32_t e[4], sf[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            e[i] = kv_exponents_of_pair(w[2 * i]) | (kv_exponents_of_pair(w[2 * i + 1]) << 16);
            sf[i] = kv_sign_mantissas_of_pair(w[2 * i]) | (kv_sign_mantissas_of_pair(w[2 * i + 1]) << 16);
        }
        __stcs(e_out + g, make_uint4(e[0], e[1], e[2], e[3]));
        __stcs(sf_out + g, make_uint4(sf[0], sf[1], sf[2], sf[3]));
    }
    const unsigned long long tail = groups * 16 + tid;
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
    const unsigned long long groups = n / 16;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* e_in = reinterpret_cast<const uint4*>(exponents);
    const uint4* sf_in = reinterpret_cast<const uint4*>(sign_mantissa);
    uint4* out = reinterpret_cast<uint4*>(words);
    for (unsigned long long g = tid; g < groups; g += stride) {
        const uint4 e = __ldcs(e_in + g);
        const uint4 sf = __ldcs(sf_in + g);
        const uint2 w0 = kv_join_quad(e.x, sf.x);
        const uint2 w1 = kv_join_quad(e.y, sf.y);
        const uint2 w2 = kv_join_quad(e.z, sf.z);
        const uint2 w3 = kv_join_quad(e.w, sf.w);
        __stcs(out + 2 * g, make_uint4(w0.x, w0.y, w1.x, w1.y));
        __stcs(out + 2 * g + 1, make_uint4(w2.x, w2.y, w3.x, w3.y));
    }
    const unsigned long long tail = groups * 16 + tid;
    if (tail < n) {
        words[tail] = (uint16_t)kv_join(exponents[tail], sign_mantissa[tail]);
    }
}
