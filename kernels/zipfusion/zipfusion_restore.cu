// ZipFusion restore-only kernel (issue 18's restore benchmark; format in
// docs/formats/zipfusion.md): reads the compressed pages of a cache, restores every value
// to BF16 in the mma.m16n8k16 B-fragment registers exactly as the fused decode attention
// does, and folds the registers into a checksum instead of computing attention. It measures
// what the fused kernel pays to read and restore a page, against the read floor of the
// same bytes; the host program is xtask/microbench/zipfusion_restore.cu and the numbers are
// in docs/perf/attention.md, "Restore-only".
//
// The work is the fused kernel's loader (restore.cuh) with nothing around it: each warp
// owns a contiguous range of (page, KV head) items; a lane reads and checks the metadata of
// one item of the next 32 (zf_read_metadata, as a lane of the fused kernel reads its
// block-table entry's), the warp stages each item's K and V span with 16-byte cp.async
// copies ZF_RESTORE_STAGES - 1 items ahead (zf_stage_span) into its ring of page-sized
// slots, and restores every group of the staged blocks with ZfFragments (zf_group).
//
// The checksum is the sum, modulo 2^32, of every restored register (a bf16x2 word: values
// 2r and 2r + 1 of a lane's block values as its low and high half, spec 3.2) of every
// compressed page; crates/zipfusion/examples/restore_input.rs gives the CPU's sum for the
// same pages. An item whose metadata fails the fused kernel's checks is skipped and flagged
// in `status` (the bits of ATTENTION_STATUS_BAD_METADATA), as the fused kernel does.
#include <stddef.h>
#include <stdint.h>

#include "restore.cuh"

#define ZF_RESTORE_STAGES 3
// A lane holds the entries of the 64 items from the current run on: the item issued while
// item i is restored is at most STAGES - 1 past i (zf_restore_range's `held`).
static_assert(ZF_RESTORE_STAGES >= 2 && ZF_RESTORE_STAGES - 1 <= 32, "the issued item lies in the held runs");

// Warps per CTA: the ring of each warp is ZF_RESTORE_STAGES page-sized slots (12 KB at
// head_dim 64), so that two CTAs fit an SM's shared memory at every head_dim.
template <int D> __host__ __device__ constexpr int zf_restore_warps() { return D == 64 ? 8 : D == 128 ? 4 : 2; }

// Dynamic shared memory of one CTA, in bytes.
template <int D> __host__ __device__ constexpr size_t zf_restore_smem() {
    return (size_t)zf_restore_warps<D>() * ZF_RESTORE_STAGES * staged_page_bytes<D>();
}

// A lane's item: its checked entry and its page's address.
template <int D> struct ZfRestoreItem {
    ZfEntry<D> e;
    const uint8_t* page;
};

// The item `item` of the pages: copy `item / per_copy`, then page-major, KV head minor.
// Past `end`, an empty entry (never staged or restored).
template <int D, bool ZERO_AWARE>
__device__ __forceinline__ ZfRestoreItem<D> zf_restore_item(const uint8_t* pages, unsigned long long copy_bytes,
                                                            const uint32_t* page_offsets, uint32_t kv_heads,
                                                            uint32_t per_copy, unsigned long long item,
                                                            unsigned long long end) {
    ZfRestoreItem<D> r{zf_empty_entry<D>(0), pages};
    if (item >= end) return r;
    const unsigned long long copy = item / per_copy;
    const uint32_t in_copy = (uint32_t)(item - copy * per_copy);
    const uint32_t page = in_copy / kv_heads, head = in_copy - page * kv_heads;
    const uint32_t at = page_offsets[page];
    r.page = pages + copy * copy_bytes + at;
    zf_read_metadata<D, ZERO_AWARE>(r.page, page_offsets[page + 1] - at, head, r.e);
    return r;
}

template <int D>
__device__ __forceinline__ ZfRestoreItem<D> zf_restore_broadcast(const ZfRestoreItem<D>& it, int from) {
    return ZfRestoreItem<D>{zf_broadcast<D>(it.e, from),
                            reinterpret_cast<const uint8_t*>(
                                __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(it.page), from))};
}

// One warp's contiguous range of the `items` (page, KV head) items of `copies` copies of one
// cache's pages laid end to end, `copy_bytes` apart; `page_offsets` (pages of one copy + 1
// entries) gives each page's offset in its copy and, by the next entry, its length.
template <int D, bool ZERO_AWARE>
__device__ void zf_restore_range(const uint8_t* __restrict__ pages, unsigned long long copy_bytes,
                                 const uint32_t* __restrict__ page_offsets, uint32_t pages_per_copy,
                                 uint32_t kv_heads, unsigned long long items, uint32_t* checksum, uint32_t* status) {
    constexpr int WARPS = zf_restore_warps<D>();
    constexpr uint32_t SLOT = staged_page_bytes<D>();
    extern __shared__ __align__(128) uint8_t zf_restore_smem_bytes[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint16_t* ring = reinterpret_cast<uint16_t*>(zf_restore_smem_bytes + (size_t)warp * ZF_RESTORE_STAGES * SLOT);
    const uint32_t ring_at = shared_address(ring);

    const unsigned long long warps = (unsigned long long)gridDim.x * WARPS;
    const unsigned long long me = (unsigned long long)blockIdx.x * WARPS + warp;
    const unsigned long long begin = items * me / warps, end = items * (me + 1) / warps;
    const uint32_t per_copy = pages_per_copy * kv_heads;
    const auto item_of = [&](unsigned long long i) {
        return zf_restore_item<D, ZERO_AWARE>(pages, copy_bytes, page_offsets, kv_heads, per_copy, i, end);
    };
    // Lane j holds item run + j (`now`) and item run + 32 + j (`next`).
    unsigned long long run = begin;
    ZfRestoreItem<D> now = item_of(run + lane), next = item_of(run + 32 + lane);
    const auto held = [&](unsigned long long i) {
        const uint32_t j = (uint32_t)(i - run);
        return j < 32 ? zf_restore_broadcast<D>(now, j) : zf_restore_broadcast<D>(next, j - 32);
    };
    // Item i is staged in slot (i - begin) mod STAGES, `slot` bytes into the ring; the item
    // issued while item i is restored fills item i - 1's slot. Each issue commits one group,
    // empty past the range or for a flagged item, so that every wait counts the same groups.
    const auto issue = [&](unsigned long long i, uint32_t slot) {
        if (i < end) {
            const ZfRestoreItem<D> it = held(i);
            if (zf_kind(it.e.info) == ZF_ENTRY_COMPRESSED) zf_stage_span<D>(it.page, it.e, ring + slot / 2, lane);
        }
        copy_async_commit();
    };
#pragma unroll
    for (int s = 0; s < ZF_RESTORE_STAGES - 1; ++s) issue(begin + s, SLOT * s);

    uint32_t sum = 0;
    uint32_t stage = 0, prev = SLOT * (ZF_RESTORE_STAGES - 1);
    for (unsigned long long i = begin; i < end; ++i) {
        if (i - run == 32) {
            run += 32;
            now = next;
            next = item_of(run + 32 + lane);
        }
        copy_async_wait<ZF_RESTORE_STAGES - 2>();
        __syncwarp();  // item i is in shared memory for every lane; item i - 1's slot is free
        issue(i + ZF_RESTORE_STAGES - 1, prev);
        const ZfRestoreItem<D> it = held(i);
        const uint32_t kind = zf_kind(it.e.info);
        if (kind == ZF_ENTRY_COMPRESSED) {
            const uint32_t span = ring_at + stage + zf_span_shift<D>(it.e);
            const ZfFragments<D, ZERO_AWARE> f{span, span + 16 * zf_k_units(it.e.info), it.e, lane};
            uint32_t b[4];
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                f.k(kk, b);
                sum += (b[0] + b[1]) + (b[2] + b[3]);
            }
#pragma unroll
            for (int c = 0; c < D / 8; c += 2) {
                f.v(c, b);
                sum += (b[0] + b[1]) + (b[2] + b[3]);
            }
        } else if (lane == 0) {
            atomicOr(status, kind);
        }
        prev = stage;
        stage = stage == SLOT * (ZF_RESTORE_STAGES - 1) ? 0u : stage + SLOT;
    }
    copy_async_wait_all();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) atomicAdd(checksum, sum);
}

// Launch with zf_restore_warps<D>() * 32 threads per CTA and zf_restore_smem<D>() bytes of
// dynamic shared memory; `pages` 128-byte aligned, `copy_bytes` and every page offset
// multiples of 16 (spec 7.2 keeps them so in a container).
#define ZF_RESTORE_ENTRY(D, ZERO_AWARE, NAME)                                                                    \
    extern "C" __global__ void __launch_bounds__(zf_restore_warps<D>() * 32)                                    \
        NAME(const uint8_t* pages, unsigned long long copy_bytes, const uint32_t* page_offsets,                 \
             uint32_t pages_per_copy, uint32_t kv_heads, unsigned long long items, uint32_t* checksum,          \
             uint32_t* status) {                                                                                \
        zf_restore_range<D, ZERO_AWARE>(pages, copy_bytes, page_offsets, pages_per_copy, kv_heads, items,       \
                                        checksum, status);                                                      \
    }

ZF_RESTORE_ENTRY(64, false, zipfusion_restore_sum_base_d64)
ZF_RESTORE_ENTRY(128, false, zipfusion_restore_sum_base_d128)
ZF_RESTORE_ENTRY(256, false, zipfusion_restore_sum_base_d256)
ZF_RESTORE_ENTRY(64, true, zipfusion_restore_sum_zero_aware_d64)
ZF_RESTORE_ENTRY(128, true, zipfusion_restore_sum_zero_aware_d128)
ZF_RESTORE_ENTRY(256, true, zipfusion_restore_sum_zero_aware_d256)
