// Pooled addressing for the decode kernels (kernels/attention/decode.cuh): the pages of a
// pool-managed cache (crates/pool, docs/formats/attention.md "Pooled addressing") live
// in one arena, and a device page table holds one 64-bit word per page id: the page's
// arena byte offset shifted left by one, bit 0 set for a compressed page, all ones for an
// id with no live page (kvcodec_pool::PageEntry::device_word). Block tables list page ids;
// a loader's entry() reads the id's word in the kernel body's prefetch of 32 entries, so
// a page load never waits on the table.
//
// A BF16 page in the arena is what the pool's open slot holds and what ZipFusion's page
// encoder reads: its K rows [PAGE_TOKENS, kv_heads, D], then its V rows, BF16 words
// (2 * PAGE_TOKENS * kv_heads * D * 2 bytes, the open size class).
#pragma once

#include "decode.cuh"

namespace {

// The word of an id with no live page.
constexpr unsigned long long POOL_INVALID_WORD = ~0ull;
// Bit 0 of a word: the page is compressed (else BF16).
constexpr unsigned long long POOL_COMPRESSED_BIT = 1ull;
// Every page starts at a multiple of 16 bytes of the arena (kvcodec_pool::SLOT_ALIGN).
constexpr unsigned long long POOL_ALIGN = 16ull;
// A pooled BF16 loader entry that cannot be read.
constexpr unsigned long long POOL_BAD_ENTRY = ~0ull;

// The arena and its page table, as the kernels see them.
struct PoolView {
    const uint8_t* __restrict__ arena;
    unsigned long long arena_bytes;
    const unsigned long long* __restrict__ table;
    uint32_t table_len;

    // The word of page id `id`, or POOL_INVALID_WORD for an id past the table.
    __device__ __forceinline__ unsigned long long word(uint32_t id) const {
        return id < table_len ? table[id] : POOL_INVALID_WORD;
    }
    // Whether `bytes` bytes from a 16-byte aligned `offset` lie inside the arena.
    __device__ __forceinline__ bool holds(unsigned long long offset, unsigned long long bytes) const {
        return offset % POOL_ALIGN == 0 && offset <= arena_bytes && bytes <= arena_bytes - offset;
    }
};

// The BF16 page bytes of a pooled page of kv_heads heads of D values.
template <int D> __device__ __forceinline__ unsigned long long pool_bf16_page_bytes(uint32_t kv_heads) {
    return 2ull * PAGE_TOKENS * kv_heads * D * 2;
}

// What a page's word says, before a codec's own checks of a compressed page.
enum PoolPage : uint32_t { POOL_PAGE_BAD, POOL_PAGE_BF16, POOL_PAGE_COMPRESSED };

// The kind of page id `id` and its arena offset (`at`, the word's offset whatever the
// kind): BAD for an id with no live page or past the table, a BF16 page misaligned or
// past the arena, or a compressed page that is a sequence's unfilled last page
// (`partial`), misaligned, or whose first `compressed_bytes` bytes leave the arena.
template <int D>
__device__ __forceinline__ PoolPage pool_page(const PoolView& pool, uint32_t id, bool partial, uint32_t kv_heads,
                                              unsigned long long compressed_bytes, unsigned long long& at) {
    const unsigned long long w = pool.word(id);
    at = w >> 1;
    if (w == POOL_INVALID_WORD) return POOL_PAGE_BAD;
    if (!(w & POOL_COMPRESSED_BIT)) {
        return pool.holds(at, pool_bf16_page_bytes<D>(kv_heads)) ? POOL_PAGE_BF16 : POOL_PAGE_BAD;
    }
    return !partial && pool.holds(at, compressed_bytes) ? POOL_PAGE_COMPRESSED : POOL_PAGE_BAD;
}

// Queues the K and V rows of kv_head of the pooled BF16 page at `page` (K rows, then V
// rows) as the twin stages its pages.
template <int D>
__device__ __forceinline__ void stage_pooled_bf16_page(const uint8_t* page, uint32_t first_token, uint32_t len,
                                                       uint16_t* stage, uint32_t kv_head, uint32_t kv_heads,
                                                       int lane) {
    const uint16_t* k = reinterpret_cast<const uint16_t*>(page);
    const uint16_t* v = k + (size_t)PAGE_TOKENS * kv_heads * D;
    stage_bf16_page<D>(k, v, 0, first_token, len, stage, kv_head, kv_heads, (size_t)kv_heads * D, lane);
}

// The BF16 twin's loader over a pool: an entry is the arena offset of a BF16 page that
// lies inside the arena, or POOL_BAD_ENTRY (an id with no live page or past the table, a
// misaligned offset, a page past the arena, a compressed page: flagged BAD_PAGE).
template <int D> struct Bf16PoolLoader {
    PoolView pool;
    uint32_t kv_heads;

    using Entry = unsigned long long;
    __device__ __forceinline__ Entry entry(uint32_t id, bool live, bool, uint32_t) const {
        if (!live) return POOL_BAD_ENTRY;
        unsigned long long at;
        return pool_page<D>(pool, id, false, kv_heads, 0, at) == POOL_PAGE_BF16 ? at : POOL_BAD_ENTRY;
    }
    static __device__ __forceinline__ Entry broadcast(Entry e, int from) { return __shfl_sync(0xffffffffu, e, from); }
    __device__ __forceinline__ bool issue(Entry at, uint32_t p, uint32_t len, uint16_t* stage, uint32_t kv_head,
                                          uint32_t kv_heads_, int lane, uint32_t* status) const {
        if (at == POOL_BAD_ENTRY) {
            if (lane == 0) atomicOr(status, ATTENTION_STATUS_BAD_PAGE);
            return false;
        }
        stage_pooled_bf16_page<D>(pool.arena + at, p * PAGE_TOKENS, len, stage, kv_head, kv_heads_, lane);
        return true;
    }
    template <class F>
    __device__ __forceinline__ void compute(Entry, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) const {
        f(Bf16Fragments<D>(stage, lanes));
    }
};

}  // namespace
