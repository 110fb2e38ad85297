// Fused decode attention over ZipFusion pages (crates/zipfusion/src/attention.rs; format in
// docs/formats/zipfusion.md, the shared kernel body and its contract in
// kernels/attention/decode.cuh and docs/formats/attention.md).
//
// The body is the BF16 twin's, so a compressed cache and its decoded BF16 copy give the same
// bits; only the loader differs. A full page lives compressed in a fixed slot; each warp
// copies its KV head's contiguous span of K and V blocks (spec 5.2) into shared memory with
// 16-byte cp.async loads, still compressed, and restores every 12-bit block straight into
// the mma B-fragment registers: a lane's 8 low bytes and 4 code bytes of a group (spec
// 3.4) give the 4 registers that one ldmatrix x4 gives the twin, by one mask and one add
// of b/2 for four high bytes and a byte permute per register. Raw blocks are read as BF16
// words already in fragment order. The sequence's unfilled last page stays BF16 (as
// ZipFusion keeps it) and goes through the twin's staging and ldmatrix path. BF16 KV is
// never written to global memory.
//
// Block-table entries of full pages index the slots (the pooled kernels at the end read
// page ids through a pool's page table instead: ZfPoolLoader); the entry of a partial last page
// indexes the BF16 pages. Page ids past either pool and metadata that would read outside
// the slot or holds a block byte the variant does not allow are flagged in the status word
// and the page is skipped, as the twin does with bad page ids.
#include "../attention/decode.cuh"
#include "../attention/pooled.cuh"
#include "restore.cuh"

namespace {

// The fragments of a staged entry: the twin's ldmatrix path for a BF16 page, the restore
// of the compressed span otherwise.
template <int D, bool ZERO_AWARE, class F>
__device__ __forceinline__ void zf_compute(const ZfEntry<D>& e, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) {
    if (zf_kind(e.info) == ZF_ENTRY_BF16) {
        f(Bf16Fragments<D>(stage, lanes));
    } else {
        const int lane = threadIdx.x & 31;
        const uint32_t span = stage + zf_span_shift<D>(e);
        f(ZfFragments<D, ZERO_AWARE>{span, span + 16 * zf_k_units(e.info), e, lane});
    }
}

// The loader of full pages in fixed slots (`slot_stride` bytes, a multiple of 16, from
// `slots`) and partial last pages in BF16 pages ([num_bf16, PAGE_TOKENS, kv_heads, D]).
template <int D, bool ZERO_AWARE> struct ZfLoader {
    const uint8_t* __restrict__ slots;
    unsigned long long slot_stride;
    uint32_t num_slots;
    const uint16_t* __restrict__ k_bf16;
    const uint16_t* __restrict__ v_bf16;
    uint32_t num_bf16;
    size_t token_stride;  // kv_heads * D

    static constexpr int NB = D / ZIPFUSION_BLOCK_CHANNELS;
    using Entry = ZfEntry<D>;
    // A head's span (at most 2 NB raw blocks) fits the twin's staging slot of a page.
    static_assert(2 * NB * ZIPFUSION_RAW_BLOCK_LEN <= staged_page_bytes<D>(), "span fits a slot");

    __device__ __forceinline__ Entry entry(uint32_t id, bool live, bool partial, uint32_t kv_head) const {
        Entry e = zf_empty_entry<D>(id);
        if (!live) return e;
        if (partial) {
            e.info = id < num_bf16 ? ZF_ENTRY_BF16 : ATTENTION_STATUS_BAD_PAGE;
            return e;
        }
        if (id >= num_slots) {
            e.info = ATTENTION_STATUS_BAD_PAGE;
            return e;
        }
        zf_read_metadata<D, ZERO_AWARE>(slots + id * slot_stride, slot_stride, kv_head, e);
        return e;
    }

    static __device__ __forceinline__ Entry broadcast(const Entry& e, int from) { return zf_broadcast<D>(e, from); }

    __device__ __forceinline__ bool issue(const Entry& e, uint32_t p, uint32_t len, uint16_t* stage, uint32_t kv_head,
                                          uint32_t kv_heads, int lane, uint32_t* status) const {
        const uint32_t kind = zf_kind(e.info);
        if (kind == ZF_ENTRY_BF16) {
            stage_bf16_page<D>(k_bf16, v_bf16, e.id, p * PAGE_TOKENS, len, stage, kv_head, kv_heads, token_stride,
                               lane);
            return true;
        }
        if (kind != ZF_ENTRY_COMPRESSED) {
            if (lane == 0) atomicOr(status, kind);
            return false;
        }
        // The head's K and V blocks are one contiguous span (spec 5.2): staged as is.
        zf_stage_span<D>(slots + e.id * slot_stride, e, stage, lane);
        return true;
    }

    template <class F>
    __device__ __forceinline__ void compute(const Entry& e, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) const {
        zf_compute<D, ZERO_AWARE>(e, stage, lanes, f);
    }
};

// The loader of a pool-managed cache (pooled.cuh): each page id's word in the pool's
// page table gives its arena offset and whether it is compressed. A compressed page is
// read as a slot is, with the span limited to the largest page of the shape
// (`max_page_bytes`) and to the arena's end; a BF16 page (K rows, then V rows) goes
// through the twin's staging. An id past the table or with no live page, a misaligned
// offset, a BF16 page past the arena, a compressed page as a sequence's unfilled last
// page (the pool compresses only full pages) are flagged BAD_PAGE; metadata as the slot
// loader checks it.
template <int D> struct ZfPoolEntry {
    ZfEntry<D> zf;
    unsigned long long at;  // the page's arena offset
};

template <int D, bool ZERO_AWARE> struct ZfPoolLoader {
    PoolView pool;
    unsigned long long max_page_bytes;
    uint32_t kv_heads;

    using Entry = ZfPoolEntry<D>;

    __device__ __forceinline__ Entry entry(uint32_t id, bool live, bool partial, uint32_t kv_head) const {
        Entry e{zf_empty_entry<D>(id), 0};
        if (!live) return e;
        const PoolPage kind = pool_page<D>(pool, id, partial, kv_heads, 0, e.at);
        if (kind == POOL_PAGE_BAD) {
            e.zf.info = ATTENTION_STATUS_BAD_PAGE;
        } else if (kind == POOL_PAGE_BF16) {
            e.zf.info = ZF_ENTRY_BF16;
        } else {
            const unsigned long long room = pool.arena_bytes - e.at;
            zf_read_metadata<D, ZERO_AWARE>(pool.arena + e.at, room < max_page_bytes ? room : max_page_bytes, kv_head,
                                            e.zf);
        }
        return e;
    }

    static __device__ __forceinline__ Entry broadcast(const Entry& e, int from) {
        return Entry{zf_broadcast<D>(e.zf, from), __shfl_sync(0xffffffffu, e.at, from)};
    }

    __device__ __forceinline__ bool issue(const Entry& e, uint32_t p, uint32_t len, uint16_t* stage, uint32_t kv_head,
                                          uint32_t kv_heads_, int lane, uint32_t* status) const {
        const uint32_t kind = zf_kind(e.zf.info);
        if (kind == ZF_ENTRY_BF16) {
            stage_pooled_bf16_page<D>(pool.arena + e.at, p * PAGE_TOKENS, len, stage, kv_head, kv_heads_, lane);
            return true;
        }
        if (kind != ZF_ENTRY_COMPRESSED) {
            if (lane == 0) atomicOr(status, kind);
            return false;
        }
        zf_stage_span<D>(pool.arena + e.at, e.zf, stage, lane);
        return true;
    }

    template <class F>
    __device__ __forceinline__ void compute(const Entry& e, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) const {
        zf_compute<D, ZERO_AWARE>(e.zf, stage, lanes, f);
    }
};

}  // namespace

// Launch bounds per head_dim: at 64, 5 CTAs per SM, so that the registers (allocated 8 per
// thread at a time) stay at or under 96 as the twin's do: one more costs the fifth CTA.
#define ZF_BOUNDS_D64 __launch_bounds__(threads<64>(), 5)
#define ZF_BOUNDS_D128 __launch_bounds__(threads<128>())
#define ZF_BOUNDS_D256 __launch_bounds__(threads<256>())

#define ZF_ATTENTION_KERNEL(D, ZERO_AWARE, NAME)                                                               \
    extern "C" __global__ void ZF_BOUNDS_D##D NAME(                                                            \
        const uint16_t* q, const uint8_t* slots, unsigned long long slot_stride, uint32_t num_slots,           \
        const uint16_t* k_bf16, const uint16_t* v_bf16, uint32_t num_bf16, const uint32_t* block_table,        \
        const uint32_t* context_lens, uint16_t* out, float* lse, float* partial, uint32_t* tickets,            \
        uint32_t* status, uint32_t max_pages, uint32_t kv_heads, uint32_t group,                              \
        float scale_log2) {                                                                                     \
        const ZfLoader<D, ZERO_AWARE> loader{slots,  slot_stride, num_slots, k_bf16,                            \
                                             v_bf16, num_bf16,    (size_t)kv_heads * D};                        \
        decode_paged<D>(loader, q, block_table, context_lens, out, lse, partial, tickets, status, max_pages,    \
                        kv_heads, group, scale_log2);                                          \
    }

ZF_ATTENTION_KERNEL(64, false, zipfusion_attention_base_d64)
ZF_ATTENTION_KERNEL(128, false, zipfusion_attention_base_d128)
ZF_ATTENTION_KERNEL(256, false, zipfusion_attention_base_d256)
ZF_ATTENTION_KERNEL(64, true, zipfusion_attention_zero_aware_d64)
ZF_ATTENTION_KERNEL(128, true, zipfusion_attention_zero_aware_d128)
ZF_ATTENTION_KERNEL(256, true, zipfusion_attention_zero_aware_d256)

// The fused kernel over a pool-managed cache (ZfPoolLoader): block tables of page ids.
#define ZF_ATTENTION_POOLED_KERNEL(D, ZERO_AWARE, NAME)                                                        \
    extern "C" __global__ void ZF_BOUNDS_D##D NAME(                                                            \
        const uint16_t* q, const uint8_t* arena, unsigned long long arena_bytes,                               \
        const unsigned long long* page_table, uint32_t table_len, unsigned long long max_page_bytes,           \
        const uint32_t* block_table, const uint32_t* context_lens, uint16_t* out, float* lse, float* partial,  \
        uint32_t* tickets, uint32_t* status, uint32_t max_pages, uint32_t kv_heads, uint32_t group,            \
        float scale_log2) {                                                                                     \
        const ZfPoolLoader<D, ZERO_AWARE> loader{{arena, arena_bytes, page_table, table_len}, max_page_bytes,  \
                                                 kv_heads};                                                     \
        decode_paged<D>(loader, q, block_table, context_lens, out, lse, partial, tickets, status, max_pages,    \
                        kv_heads, group, scale_log2);                                                           \
    }

ZF_ATTENTION_POOLED_KERNEL(64, false, zipfusion_attention_pooled_base_d64)
ZF_ATTENTION_POOLED_KERNEL(128, false, zipfusion_attention_pooled_base_d128)
ZF_ATTENTION_POOLED_KERNEL(256, false, zipfusion_attention_pooled_base_d256)
ZF_ATTENTION_POOLED_KERNEL(64, true, zipfusion_attention_pooled_zero_aware_d64)
ZF_ATTENTION_POOLED_KERNEL(128, true, zipfusion_attention_pooled_zero_aware_d128)
ZF_ATTENTION_POOLED_KERNEL(256, true, zipfusion_attention_pooled_zero_aware_d256)
