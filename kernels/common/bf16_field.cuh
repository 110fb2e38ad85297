// Shared device helpers for the BF16 field split (ExANS seed, "Encoding Pipeline").
// Mirrors crates/bf16-field/src/field.rs: exponent_of, sign_mantissa_of, join.
#pragma once
#include <stdint.h>

__device__ __forceinline__ uint32_t kv_exponent_of(uint32_t w) { return (w >> 7) & 0xffu; }

__device__ __forceinline__ uint32_t kv_sign_mantissa_of(uint32_t w) {
    return ((w >> 8) & 0x80u) | (w & 0x7fu);
}

__device__ __forceinline__ uint32_t kv_join(uint32_t e, uint32_t sf) {
    return ((sf & 0x80u) << 8) | ((e & 0xffu) << 7) | (sf & 0x7fu);
}

// Two packed BF16 words (low word first) -> their two exponents / sign+mantissa bytes
// in the low 16 bits, byte 0 from the low word.
__device__ __forceinline__ uint32_t kv_exponents_of_pair(uint32_t pair) {
    return ((pair >> 7) & 0xffu) | ((pair >> 15) & 0xff00u);
}

__device__ __forceinline__ uint32_t kv_sign_mantissas_of_pair(uint32_t pair) {
    return ((pair >> 8) & 0x80u) | (pair & 0x7fu) | ((pair >> 16) & 0x8000u) | ((pair >> 8) & 0x7f00u);
}

// Four exponents and four sign+mantissa bytes (byte i = value i) -> four words as two u32.
__device__ __forceinline__ uint2 kv_join_quad(uint32_t e4, uint32_t sf4) {
    uint2 out;
    out.x = kv_join(e4 & 0xffu, sf4 & 0xffu) | (kv_join((e4 >> 8) & 0xffu, (sf4 >> 8) & 0xffu) << 16);
    out.y = kv_join((e4 >> 16) & 0xffu, (sf4 >> 16) & 0xffu) | (kv_join(e4 >> 24, sf4 >> 24) << 16);
    return out;
}
