// The ZipFusion page loader's device side, shared by the fused decode attention
// (attention.cu) and the restore-only microbenchmark (zipfusion_restore.cu): a head's
// metadata read and checked (spec 5.1), its K and V span staged into shared memory with
// 16-byte cp.async copies (spec 5.2), and each group of a staged block restored straight
// into the mma B-fragment registers (spec 3.4). Format: docs/formats/zipfusion.md.
#pragma once
#include "../attention/decode.cuh"
#include "zipfusion_format.gen.cuh"

namespace {

// Kinds of a block-table entry, beside the status flags of an entry that cannot be read.
constexpr uint32_t ZF_ENTRY_COMPRESSED = 0u;
constexpr uint32_t ZF_ENTRY_BF16 = 0x80u;
static_assert((ZF_ENTRY_BF16 & (ATTENTION_STATUS_BAD_PAGE | ATTENTION_STATUS_BAD_METADATA)) == 0,
              "entry kinds and status flags share a byte");

template <int D> __host__ __device__ constexpr int zf_head_metadata() {
    return D == 64 ? ZIPFUSION_HEAD_METADATA_D64 : D == 128 ? ZIPFUSION_HEAD_METADATA_D128 : ZIPFUSION_HEAD_METADATA_D256;
}

// A lane's prefetched block-table entry: the page id, the head's first-block offset in the
// slot (ZF_SPAN_SHIFTED in its low bits), the kind (or a status flag) with the sizes of the
// K and V spans in 16-byte units, and the block bytes of K and V (block j in byte j % 4 of
// word j / 4).
template <int D> struct ZfEntry {
    static constexpr int WORDS = (D / ZIPFUSION_BLOCK_CHANNELS + 3) / 4;
    uint32_t id, offset, info;
    uint32_t k_meta[WORDS], v_meta[WORDS];
};

__device__ __forceinline__ uint32_t zf_kind(uint32_t info) { return info & 0xffu; }
__device__ __forceinline__ uint32_t zf_k_units(uint32_t info) { return (info >> 8) & 0xfffu; }
__device__ __forceinline__ uint32_t zf_v_units(uint32_t info) { return info >> 20; }

template <int WORDS> __device__ __forceinline__ uint32_t zf_byte(const uint32_t (&meta)[WORDS], int j) {
    return (meta[j >> 2] >> (8 * (j & 3))) & 0xffu;
}

// The offset of block j of an entry from its first block: the sizes of the blocks before it.
template <int WORDS> __device__ __forceinline__ uint32_t zf_block_offset(const uint32_t (&meta)[WORDS], int j) {
    uint32_t at = 0;
#pragma unroll
    for (int i = 0; i < j; ++i)
        at += zf_byte(meta, i) == ZIPFUSION_RAW_BLOCK_BYTE ? ZIPFUSION_RAW_BLOCK_LEN : ZIPFUSION_CODED_BLOCK_LEN;
    return at;
}

__device__ __forceinline__ uint2 zf_lds64(uint32_t address) {
    uint2 r;
    asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "r"(address));
    return r;
}

// `yes ? a : b` as a PTX selp, which the compiler cannot turn into a branch around b's
// computation (it did for the C conditional, which cut the page's restore into blocks).
__device__ __forceinline__ uint32_t zf_select(bool yes, uint32_t a, uint32_t b) {
    uint32_t r;
    asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %3, 0;\n\tselp.b32 %0, %1, %2, p;\n\t}" : "=r"(r) : "r"(a), "r"(b), "r"((uint32_t)yes));
    return r;
}

// The 4 B-fragment registers of group G (0 or 1) of the staged block at shared address
// `block` with metadata byte `meta`: values 8G .. 8G + 7 of this lane (spec 3.2), the
// registers ldmatrix x4 gives the twin for the same channels and tokens. Branch-free: a
// raw block's registers are selected, not branched to, so that the compiler can issue the
// shared loads of later groups before this group's mma (with one warp or two per
// scheduler, as at head_dim 256, a branch per group left every load's latency exposed:
// docs/perf/attention.md, "v10").
template <bool ZERO_AWARE>
__device__ __forceinline__ void zf_group(uint32_t block, uint32_t meta, int G, int lane, uint32_t (&b)[4]) {
    static_assert(ZIPFUSION_LOW_BYTES_LEN % 8 == 0, "a lane's code word is 8-byte aligned");
    const bool raw = meta == ZIPFUSION_RAW_BLOCK_BYTE;
    // Coded: the low bytes of values 8G..8G+3 and 8G+4..8G+7, and the code word of both
    // groups (spec 4.1). Raw: the lane's 8 registers in order, this group's four as two
    // halves (spec 4.2).
    const uint32_t raw_at = block + 32 * lane + 16 * G;
    const uint2 low = zf_lds64(raw ? raw_at : block + 16 * lane + 8 * G);
    const uint2 high = zf_lds64(raw ? raw_at + 8 : block + ZIPFUSION_LOW_BYTES_LEN + 8 * lane);
    const uint32_t codes = G ? high.y : high.x;
    // One mask and one add of b/2 per byte restore four high bytes: b/2 + d <= 127 never
    // carries into the sign bit or the next byte (spec 3.4).
    const uint32_t half_base = (meta & 0x7fu) * 0x01010101u;
    uint32_t first = (codes & 0x87878787u) + half_base;
    uint32_t second = (((codes >> 3) & 0x07070707u) | ((codes << 1) & 0x80808080u)) + half_base;
    if (ZERO_AWARE && (meta & ZIPFUSION_ZERO_AWARE_FLAG)) {
        // d = 7 is exponent 0 in a zero-aware block: keep the sign alone (spec 2.2).
        // Uniform across the warp; a branch, as the fix-up costs more than the blocks it
        // splits the restore into.
        const uint32_t sevens = codes & (codes >> 1) & (codes >> 2);
        first &= ~((sevens & 0x01010101u) * 0x7fu);
        second &= ~(((sevens >> 3) & 0x01010101u) * 0x7fu);
    }
    // lo0 hi0 lo1 hi1: a bf16x2 register of two consecutive values.
    b[0] = zf_select(raw, low.x, __byte_perm(low.x, first, 0x5140));
    b[1] = zf_select(raw, low.y, __byte_perm(low.x, first, 0x7362));
    b[2] = zf_select(raw, high.x, __byte_perm(low.y, second, 0x5140));
    b[3] = zf_select(raw, high.y, __byte_perm(low.y, second, 0x7362));
}

// The B fragments of a staged compressed span: K blocks from shared address `k_span`, V
// blocks after them.
template <int D, bool ZERO_AWARE> struct ZfFragments {
    uint32_t k_span, v_span;
    const ZfEntry<D>& e;
    int lane;
    // K: k-step kk is group kk % 2 of block kk / 2 (spec 3.3).
    __device__ __forceinline__ void k(int kk, uint32_t (&b)[4]) const {
        const int j = kk >> 1;
        zf_group<ZERO_AWARE>(k_span + zf_block_offset(e.k_meta, j), zf_byte(e.k_meta, j), kk & 1, lane, b);
    }
    // V: n-tiles c, c + 1 (c even) are group (c / 2) % 2 of block c / 4.
    __device__ __forceinline__ void v(int c, uint32_t (&b)[4]) const {
        const int j = c >> 2;
        zf_group<ZERO_AWARE>(v_span + zf_block_offset(e.v_meta, j), zf_byte(e.v_meta, j), (c >> 1) & 1, lane, b);
    }
};

// An entry of kind compressed with no blocks (a page past the warp's range: never staged).
template <int D> __device__ __forceinline__ ZfEntry<D> zf_empty_entry(uint32_t id) {
    ZfEntry<D> e;
    e.id = id;
    e.offset = 0;
    e.info = ZF_ENTRY_COMPRESSED;
#pragma unroll
    for (int w = 0; w < ZfEntry<D>::WORDS; ++w) e.k_meta[w] = e.v_meta[w] = 0;
    return e;
}

template <bool ZERO_AWARE> __device__ __forceinline__ bool zf_valid_byte(uint32_t m) {
    if (m == ZIPFUSION_RAW_BLOCK_BYTE) return true;
    if (!ZERO_AWARE && (m & ZIPFUSION_ZERO_AWARE_FLAG)) return false;
    return (m & 0x7fu) <= ZIPFUSION_MAX_HALF_BASE;
}

// A mark in the low bits of a checked entry's offset (a multiple of 16): the span starts 16
// bytes past a 32-byte boundary and is staged 16 bytes into the slot (which has the room),
// so that each 32-byte sector of it lands in one aligned 32-byte block of shared memory
// (the slots are 128-byte aligned): cp.async asks the L2 for a sector once per aligned
// block its halves land in (docs/perf/attention.md, "v9").
constexpr uint32_t ZF_SPAN_SHIFTED = 1u;

// Reads kv_head's two metadata entries (spec 5.1) of the compressed page at `page`, of
// which `limit` bytes may be read, into `e`, and checks what the kernel relies on: every
// block byte allowed, the V entry right after the K blocks, 16-byte alignment and the
// whole span inside the limit (else e.info is the BAD_METADATA flag); marks the offset with
// ZF_SPAN_SHIFTED where the span is staged 16 bytes in.
template <int D, bool ZERO_AWARE>
__device__ __forceinline__ void zf_read_metadata(const uint8_t* page, unsigned long long limit, uint32_t kv_head,
                                                 ZfEntry<D>& e) {
    constexpr int NB = D / ZIPFUSION_BLOCK_CHANNELS;
    using Entry = ZfEntry<D>;
    if ((unsigned long long)(kv_head + 1) * zf_head_metadata<D>() > limit) {
        e.info = ATTENTION_STATUS_BAD_METADATA;
        return;
    }
    const uint4* meta = reinterpret_cast<const uint4*>(page + (size_t)kv_head * zf_head_metadata<D>());
    uint32_t v_offset;
    if constexpr (zf_head_metadata<D>() == 16) {
        // Two 8-byte entries: offset, NB block bytes, padding.
        const uint4 m = meta[0];
        constexpr uint32_t mask = NB >= 4 ? 0xffffffffu : (1u << (8 * NB)) - 1;
        e.offset = m.x;
        e.k_meta[0] = m.y & mask;
        v_offset = m.z;
        e.v_meta[Entry::WORDS - 1] = m.w & mask;
    } else {
        static_assert(zf_head_metadata<D>() == 16 || (zf_head_metadata<D>() == 32 && NB == 8),
                      "16-byte entries hold 8 block bytes");
        const uint4 m0 = meta[0], m1 = meta[1];
        e.offset = m0.x;
        e.k_meta[0] = m0.y;
        e.k_meta[Entry::WORDS - 1] = m0.z;
        v_offset = m1.x;
        e.v_meta[0] = m1.y;
        e.v_meta[Entry::WORDS - 1] = m1.z;
    }
    bool ok = true;
    uint32_t k_len = 0, v_len = 0;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
        const uint32_t km = zf_byte(e.k_meta, j), vm = zf_byte(e.v_meta, j);
        ok = ok && zf_valid_byte<ZERO_AWARE>(km) && zf_valid_byte<ZERO_AWARE>(vm);
        k_len += km == ZIPFUSION_RAW_BLOCK_BYTE ? ZIPFUSION_RAW_BLOCK_LEN : ZIPFUSION_CODED_BLOCK_LEN;
        v_len += vm == ZIPFUSION_RAW_BLOCK_BYTE ? ZIPFUSION_RAW_BLOCK_LEN : ZIPFUSION_CODED_BLOCK_LEN;
    }
    ok = ok && e.offset % 16 == 0 && v_offset == e.offset + k_len &&
         (unsigned long long)e.offset + k_len + v_len <= limit;
    e.info = ok ? (ZF_ENTRY_COMPRESSED | (k_len / 16) << 8 | (v_len / 16) << 20) : ATTENTION_STATUS_BAD_METADATA;
    if (ok && ((uintptr_t)(page + e.offset) & 16u) && k_len + v_len + 16 <= (uint32_t)staged_page_bytes<D>())
        e.offset |= ZF_SPAN_SHIFTED;
}

// Where a checked compressed entry's span is staged, in bytes past the slot's start.
template <int D> __device__ __forceinline__ uint32_t zf_span_shift(const ZfEntry<D>& e) {
    return (e.offset & ZF_SPAN_SHIFTED) << 4;
}

// Queues a checked compressed entry's span (its K and V blocks, one contiguous run, spec
// 5.2) from the page at `page` into `stage` (at zf_span_shift), still compressed.
template <int D>
__device__ __forceinline__ void zf_stage_span(const uint8_t* page, const ZfEntry<D>& e, uint16_t* stage, int lane) {
    const uint8_t* span = page + (e.offset & ~15u);
    uint8_t* to = reinterpret_cast<uint8_t*>(stage) + zf_span_shift<D>(e);
    const uint32_t units = zf_k_units(e.info) + zf_v_units(e.info);
    for (uint32_t u = lane; u < units; u += 32) copy_async_16_line(to + 16 * u, span + 16 * u);
}

// Broadcasts lane `from`'s entry to the warp.
template <int D> __device__ __forceinline__ ZfEntry<D> zf_broadcast(const ZfEntry<D>& e, int from) {
    ZfEntry<D> r;
    r.id = __shfl_sync(0xffffffffu, e.id, from);
    r.offset = __shfl_sync(0xffffffffu, e.offset, from);
    r.info = __shfl_sync(0xffffffffu, e.info, from);
#pragma unroll
    for (int w = 0; w < ZfEntry<D>::WORDS; ++w) {
        r.k_meta[w] = __shfl_sync(0xffffffffu, e.k_meta[w], from);
        r.v_meta[w] = __shfl_sync(0xffffffffu, e.v_meta[w], from);
    }
    return r;
}

}  // namespace
