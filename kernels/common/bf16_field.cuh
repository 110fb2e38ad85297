// Shared device helpers for the BF16 field split (the ExANS paper, "Encoding Pipeline").
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

// Four words (two packed pairs, value 0 in the low half of p01) -> their four
// exponents and four sign+mantissa bytes (byte i = value i). Byte permutes gather the
// low and high bytes of the four words; one LOP3-able expression per output.
__device__ __forceinline__ void kv_split_quad(uint32_t p01, uint32_t p23, uint32_t* e4, uint32_t* sf4) {
    const uint32_t lo = __byte_perm(p01, p23, 0x6420);  // low bytes of words 0..3
    const uint32_t hi = __byte_perm(p01, p23, 0x7531);  // high bytes of words 0..3
    *sf4 = (lo & 0x7f7f7f7fu) | (hi & 0x80808080u);
    *e4 = ((hi & 0x7f7f7f7fu) << 1) | ((lo >> 7) & 0x01010101u);
}

// Four exponents and four sign+mantissa bytes (byte i = value i) -> four words as two
// u32 (value 0 in the low half of .x): the high and low bytes of all four words are
// built at once, then interleaved by two byte permutes.
__device__ __forceinline__ uint2 kv_join_quad(uint32_t e4, uint32_t sf4) {
    const uint32_t hi = (sf4 & 0x80808080u) | ((e4 >> 1) & 0x7f7f7f7fu);
    const uint32_t lo = ((e4 << 7) & 0x80808080u) | (sf4 & 0x7f7f7f7fu);
    return make_uint2(__byte_perm(lo, hi, 0x5140), __byte_perm(lo, hi, 0x7362));
}

// Four 4-bit codes (nibble i of `codes4` = code of value i) -> their four exponents from
// a 16-entry codebook held in four registers (byte j of cb[j / 4] = entry j), with no
// memory access: two byte permutes pick among entries 0-7 and 8-15, a third picks
// between them by bit 3 of each code.
__device__ __forceinline__ uint32_t kv_lookup16_quad(uint32_t codes4, uint32_t cb0, uint32_t cb1, uint32_t cb2,
                                                     uint32_t cb3) {
    const uint32_t low3 = codes4 & 0x7777u;
    const uint32_t lo = __byte_perm(cb0, cb1, low3);
    const uint32_t hi = __byte_perm(cb2, cb3, low3);
    return __byte_perm(lo, hi, 0x3210u | ((codes4 >> 1) & 0x4444u));
}
