// Fused decode attention over GAAC pages (crates/gaac/src/attention.rs; format in
// docs/formats/gaac.md, the shared kernel body and its contract in
// kernels/attention/decode.cuh and docs/formats/attention.md).
//
// The body is the BF16 twin's, so a compressed cache and its decoded BF16 copy give the same
// bits; only the loader differs. A page of one layer is a GAAC block (16 tokens x D, spec §3)
// per (kind, KV head), each in a slot of C bytes, [pages, 2 (K, V), kv_heads] slots: a page
// is what one sealing step of the layer writes (`gaac::gpu::seal_blocks_device`). Each
// warp copies its KV head's K and V slots into its staging slot with 16-byte cp.async loads,
// still compressed; the restore reads the 3-bit plane and the sign+mantissa plane in
// mma B-fragment order (spec §3.1-3.3) straight into the fragment registers, with the
// addends of a per-block image in the staging slot after the two blocks: each lane's 3-bit
// addend words (the bases, in registers for the CTA's head), patched for the block's 4-bit
// and raw groups (restore.cuh). The V image is built when the first V fragment is read, in
// the same place (the K image is then spent). Blocks that did not fit their slot (raw,
// spec §3.6) are read as BF16 words from a raw-block pool straight into the fragments; the
// sequence's unfilled last page stays BF16 and goes through the twin's staging and ldmatrix
// path. BF16 KV is never written to global memory.
//
// A per-page directory ([pages, 2, kv_heads] u32) says where each block is: 0 in
// its slot, r + 1 raw block r of the pool. Block-table entries of full pages index the slot
// pages; the entry of a partial last page indexes the BF16 pages. Page ids past either pool,
// a directory entry past the raw pool, a base above 248 and a block whose tags give a length
// past its slot are flagged in the status word (the page is skipped, or for such a block its
// 3-bit planes read without patches), as the twin does with bad page ids.
//
// The pooled kernels at the end (GaacPoolLoader) read a pool-managed cache instead
// (../attention/pooled.cuh, docs/formats/gaac.md §10.1): block tables of page ids, each
// id's word in the pool's page table giving a BF16 page (staged as the pooled twin does)
// or a compressed page, one extent of the page's 2 H slots then its raw blocks, found by
// a directory indexed by page id whose raw indices count from the extent's raw blocks.
// The staging, restore and fragments are the slot kernel's (GaacRestore).
#include "../attention/decode.cuh"
#include "../attention/pooled.cuh"
#include "gaac/restore.cuh"

namespace {

// Kinds of a block-table entry, beside the status flags of an entry that cannot be read.
constexpr uint32_t GA_ENTRY_CODED = 0u;
constexpr uint32_t GA_ENTRY_BF16 = 0x80u;
static_assert((GA_ENTRY_BF16 & (ATTENTION_STATUS_BAD_PAGE | ATTENTION_STATUS_BAD_METADATA)) == 0,
              "entry kinds and status flags share a byte");

// The twin's shared memory of a CTA (every warp's staging slots, reused by the combine and
// the ticket: decode.cuh); this kernel's own bytes follow it: the head's K and V bases and
// window starts.
template <int D> __host__ __device__ constexpr int ga_twin_bytes() { return warps<D>() * STAGES * staged_page_bytes<D>(); }

// A lane's prefetched block-table entry: the page id, its kind (or a status flag) and the
// directory entries of its K and V blocks for the CTA's head.
struct GaEntry {
    uint32_t id, info, k_dir, v_dir;
};

template <int D> struct GaacRestore;

// The B fragments of a staged page: coded blocks at `k_blk`, `v_blk` (generic pointers
// into the staging slot) with the addend image after them, or raw blocks in global memory.
template <int D> struct GaacFragments {
    using G = GaacGeometry<D>;
    const GaacRestore<D>& restore;
    const uint8_t* k_blk;
    const uint8_t* v_blk;
    uint32_t* image;
    const uint8_t* k_raw;  // null: coded
    const uint8_t* v_raw;
    int lane;

    // K: k-step kk is tiles kk (tokens 0-7) and D/16 + kk (tokens 8-15) (spec §3.1).
    __device__ __forceinline__ void k(int kk, uint32_t (&b)[4]) const {
        if (k_raw) {
            // [16, D] BF16 words: token l / 4 (+ 8), channels 16 kk + 2 (l mod 4) (+ 8), in pairs.
            const uint32_t* w = reinterpret_cast<const uint32_t*>(k_raw);
            const int at = ((lane >> 2) * D + 16 * kk + 2 * (lane & 3)) / 2;
            b[0] = w[at];
            b[1] = w[at + 4];
            b[2] = w[at + 4 * D];
            b[3] = w[at + 4 * D + 4];
            return;
        }
        const uint2 lo = gaac_restore_tile<D>(k_blk, image, kk, lane);
        const uint2 hi = gaac_restore_tile<D>(k_blk, image, G::CHANNEL_TILES + kk, lane);
        b[0] = lo.x;
        b[1] = lo.y;
        b[2] = hi.x;
        b[3] = hi.y;
    }
    // V: n-tiles c, c + 1 are tiles c, c + 1 (spec §3.1). The V image replaces the K image
    // when the first V fragment is read.
    __device__ __forceinline__ void v(int c, uint32_t (&b)[4]) const {
        if (c == 0) restore.template prepare<true>(v_blk, v_raw, image, lane);
        if (v_raw) {
            // [16, D] BF16 words: tokens 2 (l mod 4) + {0, 1} (+ 8) of channel 8 c + l / 4 (+ 8).
            const uint16_t* h = reinterpret_cast<const uint16_t*>(v_raw);
            const int q = 2 * (lane & 3), ch = 8 * c + (lane >> 2);
            auto pair = [&](int token, int channel) {
                return (uint32_t)h[token * D + channel] | ((uint32_t)h[(token + 1) * D + channel] << 16);
            };
            b[0] = pair(q, ch);
            b[1] = pair(q + 8, ch);
            b[2] = pair(q, ch + 8);
            b[3] = pair(q + 8, ch + 8);
            return;
        }
        const uint2 lo = gaac_restore_tile<D>(v_blk, image, c, lane);
        const uint2 hi = gaac_restore_tile<D>(v_blk, image, c + 1, lane);
        b[0] = lo.x;
        b[1] = lo.y;
        b[2] = hi.x;
        b[3] = hi.y;
    }
};

// What every GAAC loader shares: the slot capacity, the CTA's head's bases (registers up
// to D = 128) and window starts (shared memory), the staging of a page's two coded slots
// and the restore of their fragments.
template <int D> struct GaacRestore {
    using G = GaacGeometry<D>;
    // Base words in registers up to D = 128; at D = 256 (64 words) from shared memory.
    static constexpr bool BASE_REGISTERS = D <= 128;
    static constexpr int REG_TILES = BASE_REGISTERS ? G::TILES : 1;

    unsigned long long capacity;
    uint32_t* status;
    // Shared memory: K bases, V bases, K window starts, V window starts (D bytes each).
    const uint8_t* head;
    bool slot_fits;  // 2 C + the image fit a staging slot, C a multiple of 16 at least P
    uint32_t kbase[REG_TILES], vbase[REG_TILES];

    // The lane's 3-bit addend word of tile t (spec §3.3): the bases of its four values.
    __device__ __forceinline__ uint32_t base_word(bool is_v, int t, int lane) const {
        if constexpr (BASE_REGISTERS) {
            return is_v ? vbase[t] : kbase[t];
        } else {
            return is_v ? 0x01010101u * head[D + 8 * t + (lane >> 2)]
                        : (uint32_t)head[16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3)] |
                              (uint32_t)head[16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3) + 1] << 8 |
                              (uint32_t)head[16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3) + 8] << 16 |
                              (uint32_t)head[16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3) + 9] << 24;
        }
    }

    // Builds the addend image of a coded block (base words, then the 4-bit and raw groups'
    // patches) and checks its length against the slot. The warp's previous reads of the
    // image are over first.
    template <bool IS_V>
    __device__ __forceinline__ void prepare(const uint8_t* blk, const uint8_t* raw_block, uint32_t* image,
                                            int lane) const {
        __syncwarp();
        if (raw_block) return;
#pragma unroll
        for (int t = 0; t < G::TILES; ++t) image[GAAC_LANES * t + lane] = base_word(IS_V, t, lane);
        const uint32_t len = gaac_patch_image<IS_V, D>(blk, image, head + (IS_V ? 3 : 2) * D, (uint32_t)capacity, lane);
        if (len > capacity && lane == 0) atomicOr(status, ATTENTION_STATUS_BAD_METADATA);
    }

    // Queues the head's K slot and V slot (`capacity` bytes each, 16-byte aligned; null:
    // the block is raw, not staged) into `stage`, as they are.
    __device__ __forceinline__ void stage_slots(const uint8_t* k_slot, const uint8_t* v_slot, uint16_t* stage,
                                                int lane) const {
        uint8_t* to = reinterpret_cast<uint8_t*>(stage);
        const uint32_t units = (uint32_t)(capacity / 16);
        if (k_slot)
            for (uint32_t u = lane; u < units; u += 32) copy_async_16(to + 16 * u, k_slot + 16 * u);
        if (v_slot)
            for (uint32_t u = lane; u < units; u += 32) copy_async_16(to + capacity + 16 * u, v_slot + 16 * u);
    }

    // Hands `f` the fragments of a staged page of two blocks: coded ones from the staging
    // slot at `stage`, raw ones (`k_raw`, `v_raw`, [16, D] BF16 in global memory; null:
    // coded) read straight into the fragments.
    template <class F>
    __device__ __forceinline__ void compute_coded(uint32_t stage, const uint8_t* k_raw, const uint8_t* v_raw,
                                                  F&& f) const {
        const int lane = threadIdx.x & 31;
        const uint8_t* k_blk = reinterpret_cast<const uint8_t*>(__cvta_shared_to_generic(stage));
        uint32_t* image = reinterpret_cast<uint32_t*>(__cvta_shared_to_generic(stage + 2 * (uint32_t)capacity));
        prepare<false>(k_blk, k_raw, image, lane);
        f(GaacFragments<D>{*this, k_blk, k_blk + capacity, image, k_raw, v_raw, lane});
    }
};

// Loads the CTA's head's bases (the layer's [2, kv_heads, D], K then V) and window starts
// into shared memory after the twin's (a base above 248 flags BAD_METADATA) and returns
// the restore state of slots of `capacity` bytes, its base words in registers.
template <int D>
__device__ __forceinline__ GaacRestore<D> gaac_restore_setup(const uint8_t* bases, unsigned long long capacity,
                                                             uint32_t kv_heads, uint32_t* status) {
    using G = GaacGeometry<D>;
    extern __shared__ __align__(128) uint4 gaac_shared[];
    uint8_t* head = reinterpret_cast<uint8_t*>(gaac_shared) + ga_twin_bytes<D>();
    const uint32_t kv_head = blockIdx.y;
    for (int i = threadIdx.x; i < D / 2; i += threads<D>()) {
        const int kind = i / (D / 4), word = i % (D / 4);
        const uint32_t b = reinterpret_cast<const uint32_t*>(bases + ((size_t)kind * kv_heads + kv_head) * D)[word];
        if (__vcmpgtu4(b, GAAC_MAX_BASE * 0x01010101u)) atomicOr(status, ATTENTION_STATUS_BAD_METADATA);
        reinterpret_cast<uint32_t*>(head + kind * D)[word] = b;
        reinterpret_cast<uint32_t*>(head + (2 + kind) * D)[word] = gaac_window_starts(b);
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    GaacRestore<D> r;
    r.capacity = capacity;
    r.status = status;
    r.head = head;
    r.slot_fits = capacity % 16 == 0 && capacity >= (unsigned long long)G::PLANES_LEN &&
                  2 * capacity + G::IMAGE_BYTES <= (unsigned long long)staged_page_bytes<D>();
#pragma unroll
    for (int t = 0; t < GaacRestore<D>::REG_TILES; ++t) {
        // V: channel 8t + l / 4 for all four values; K: channels 16 (t mod D/16) + 2 (l mod
        // 4) + {0, 1, 8, 9} (spec §3.1).
        r.vbase[t] = 0x01010101u * head[D + 8 * t + (lane >> 2)];
        const uint8_t* k = head + 16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3);
        r.kbase[t] = (uint32_t)k[0] | (uint32_t)k[1] << 8 | (uint32_t)k[8] << 16 | (uint32_t)k[9] << 24;
    }
    return r;
}

// Broadcasts lane `from`'s entry to the warp.
__device__ __forceinline__ GaEntry ga_broadcast(const GaEntry& e, int from) {
    return GaEntry{__shfl_sync(0xffffffffu, e.id, from), __shfl_sync(0xffffffffu, e.info, from),
                   __shfl_sync(0xffffffffu, e.k_dir, from), __shfl_sync(0xffffffffu, e.v_dir, from)};
}

// The loader of full pages in slots and partial last pages in BF16 pages
// ([num_bf16, PAGE_TOKENS, kv_heads, D]).
template <int D> struct GaacLoader {
    GaacRestore<D> restore;
    const uint8_t* __restrict__ slots;  // [num_pages, 2, kv_heads, capacity]
    uint32_t num_pages;
    const uint32_t* __restrict__ directory;  // [num_pages, 2, kv_heads]
    const uint8_t* __restrict__ raw;         // [num_raw, 16, D] BF16
    uint32_t num_raw;
    const uint16_t* __restrict__ k_bf16;
    const uint16_t* __restrict__ v_bf16;
    uint32_t num_bf16;
    uint32_t kv_heads;

    using Entry = GaEntry;

    __device__ __forceinline__ Entry entry(uint32_t id, bool live, bool partial, uint32_t kv_head) const {
        Entry e{id, GA_ENTRY_CODED, 0u, 0u};
        if (!live) return e;
        if (partial) {
            e.info = id < num_bf16 ? GA_ENTRY_BF16 : ATTENTION_STATUS_BAD_PAGE;
            return e;
        }
        if (id >= num_pages) {
            e.info = ATTENTION_STATUS_BAD_PAGE;
            return e;
        }
        const size_t at = (size_t)id * 2 * kv_heads + kv_head;
        e.k_dir = directory[at];
        e.v_dir = directory[at + kv_heads];
        if (!restore.slot_fits || e.k_dir > num_raw || e.v_dir > num_raw) e.info = ATTENTION_STATUS_BAD_METADATA;
        return e;
    }

    static __device__ __forceinline__ Entry broadcast(const Entry& e, int from) { return ga_broadcast(e, from); }

    __device__ __forceinline__ bool issue(const Entry& e, uint32_t p, uint32_t len, uint16_t* stage, uint32_t kv_head,
                                          uint32_t, int lane, uint32_t* flags) const {
        if (e.info == GA_ENTRY_BF16) {
            stage_bf16_page<D>(k_bf16, v_bf16, e.id, p * PAGE_TOKENS, len, stage, kv_head, kv_heads,
                               (size_t)kv_heads * D, lane);
            return true;
        }
        if (e.info != GA_ENTRY_CODED) {
            if (lane == 0) atomicOr(flags, e.info);
            return false;
        }
        // The head's K slot and V slot, as they are (raw blocks are read from their pool).
        const size_t at = (size_t)e.id * 2 * kv_heads + kv_head;
        const unsigned long long capacity = restore.capacity;
        restore.stage_slots(e.k_dir == 0 ? slots + at * capacity : nullptr,
                            e.v_dir == 0 ? slots + (at + kv_heads) * capacity : nullptr, stage, lane);
        return true;
    }

    template <class F>
    __device__ __forceinline__ void compute(const Entry& e, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) const {
        if (e.info == GA_ENTRY_BF16) {
            f(Bf16Fragments<D>(stage, lanes));
            return;
        }
        const size_t raw_len = (size_t)GAAC_BLOCK_TOKENS * D * 2;
        const uint8_t* k_raw = e.k_dir ? raw + (e.k_dir - 1) * raw_len : nullptr;
        const uint8_t* v_raw = e.v_dir ? raw + (e.v_dir - 1) * raw_len : nullptr;
        restore.compute_coded(stage, k_raw, v_raw, f);
    }
};

// A pooled loader's entry: the slot loader's (id unused) and the page's arena offset.
struct GaPoolEntry {
    GaEntry ga;
    unsigned long long at;
};

// The loader of a pool-managed cache (pooled.cuh; docs/formats/gaac.md §10.1): each page
// id's word gives its arena offset and format. A BF16 page (K rows, then V rows) goes
// through the twin's staging. A compressed page is one extent: its 2 H slots
// [2, kv_heads, capacity], then its raw blocks ([16, D] BF16 each, in block order); the
// directory ([table_len, 2, kv_heads], by page id) holds 0 for a block coded in its slot,
// r + 1 for the extent's raw block r, at `2 kv_heads capacity + r 32 D` bytes from the
// extent's start. Flagged BAD_PAGE: an id past the table or with no live page, a
// misaligned offset, a BF16 page or a compressed page's slots past the arena, a compressed
// page as a sequence's unfilled last page. Flagged BAD_METADATA: a capacity the staging
// does not take, a directory entry past the page's 2 kv_heads blocks or whose raw block
// passes the arena.
template <int D> struct GaacPoolLoader {
    GaacRestore<D> restore;
    PoolView pool;
    const uint32_t* __restrict__ directory;  // [table_len, 2, kv_heads]
    uint32_t kv_heads;

    using Entry = GaPoolEntry;

    // Bytes of a compressed page's slots, where its raw blocks start.
    __device__ __forceinline__ unsigned long long slot_bytes() const { return 2ull * kv_heads * restore.capacity; }
    static constexpr unsigned long long RAW_LEN = (unsigned long long)GAAC_BLOCK_TOKENS * D * 2;

    __device__ __forceinline__ Entry entry(uint32_t id, bool live, bool partial, uint32_t kv_head) const {
        Entry e{{id, GA_ENTRY_CODED, 0u, 0u}, 0ull};
        if (!live) return e;
        const PoolPage kind = pool_page<D>(pool, id, partial, kv_heads, slot_bytes(), e.at);
        if (kind == POOL_PAGE_BAD) {
            e.ga.info = ATTENTION_STATUS_BAD_PAGE;
        } else if (kind == POOL_PAGE_BF16) {
            e.ga.info = GA_ENTRY_BF16;
        } else {
            // id < table_len: a word past the table is POOL_INVALID_WORD.
            const size_t at = (size_t)id * 2 * kv_heads + kv_head;
            e.ga.k_dir = directory[at];
            e.ga.v_dir = directory[at + kv_heads];
            const uint32_t last = max(e.ga.k_dir, e.ga.v_dir);
            const bool fits = last <= 2 * kv_heads && pool.holds(e.at, slot_bytes() + last * RAW_LEN);
            if (!restore.slot_fits || !fits) e.ga.info = ATTENTION_STATUS_BAD_METADATA;
        }
        return e;
    }

    static __device__ __forceinline__ Entry broadcast(const Entry& e, int from) {
        return Entry{ga_broadcast(e.ga, from), __shfl_sync(0xffffffffu, e.at, from)};
    }

    // The extent's raw block named by directory entry `dir` (nonzero).
    __device__ __forceinline__ const uint8_t* raw_block(unsigned long long at, uint32_t dir) const {
        return pool.arena + at + slot_bytes() + (dir - 1) * RAW_LEN;
    }

    __device__ __forceinline__ bool issue(const Entry& e, uint32_t p, uint32_t len, uint16_t* stage, uint32_t kv_head,
                                          uint32_t kv_heads_, int lane, uint32_t* flags) const {
        if (e.ga.info == GA_ENTRY_BF16) {
            stage_pooled_bf16_page<D>(pool.arena + e.at, p * PAGE_TOKENS, len, stage, kv_head, kv_heads_, lane);
            return true;
        }
        if (e.ga.info != GA_ENTRY_CODED) {
            if (lane == 0) atomicOr(flags, e.ga.info);
            return false;
        }
        const uint8_t* page = pool.arena + e.at;
        const unsigned long long capacity = restore.capacity;
        restore.stage_slots(e.ga.k_dir == 0 ? page + kv_head * capacity : nullptr,
                            e.ga.v_dir == 0 ? page + (kv_heads + kv_head) * capacity : nullptr, stage, lane);
        return true;
    }

    template <class F>
    __device__ __forceinline__ void compute(const Entry& e, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) const {
        if (e.ga.info == GA_ENTRY_BF16) {
            f(Bf16Fragments<D>(stage, lanes));
            return;
        }
        const uint8_t* k_raw = e.ga.k_dir ? raw_block(e.at, e.ga.k_dir) : nullptr;
        const uint8_t* v_raw = e.ga.v_dir ? raw_block(e.at, e.ga.v_dir) : nullptr;
        restore.compute_coded(stage, k_raw, v_raw, f);
    }
};

template <int D>
__device__ __forceinline__ void gaac_attention(const uint16_t* q, const uint8_t* slots, unsigned long long capacity,
                                               uint32_t num_pages, const uint32_t* directory, const uint8_t* raw,
                                               uint32_t num_raw, const uint8_t* bases, const uint16_t* k_bf16,
                                               const uint16_t* v_bf16, uint32_t num_bf16,
                                               const uint32_t* block_table, const uint32_t* context_lens,
                                               uint16_t* out, float* lse, float* partial, uint32_t* tickets,
                                               uint32_t* status, uint32_t max_pages, uint32_t kv_heads,
                                               uint32_t group, float scale_log2) {
    const GaacLoader<D> loader{gaac_restore_setup<D>(bases, capacity, kv_heads, status),
                               slots,
                               num_pages,
                               directory,
                               raw,
                               num_raw,
                               k_bf16,
                               v_bf16,
                               num_bf16,
                               kv_heads};
    decode_paged<D>(loader, q, block_table, context_lens, out, lse, partial, tickets, status, max_pages, kv_heads,
                    group, scale_log2);
}

template <int D>
__device__ __forceinline__ void gaac_attention_pooled(const uint16_t* q, const uint8_t* arena,
                                                      unsigned long long arena_bytes,
                                                      const unsigned long long* page_table, uint32_t table_len,
                                                      unsigned long long capacity, const uint32_t* directory,
                                                      const uint8_t* bases, const uint32_t* block_table,
                                                      const uint32_t* context_lens, uint16_t* out, float* lse,
                                                      float* partial, uint32_t* tickets, uint32_t* status,
                                                      uint32_t max_pages, uint32_t kv_heads, uint32_t group,
                                                      float scale_log2) {
    const GaacPoolLoader<D> loader{gaac_restore_setup<D>(bases, capacity, kv_heads, status),
                                   {arena, arena_bytes, page_table, table_len},
                                   directory,
                                   kv_heads};
    decode_paged<D>(loader, q, block_table, context_lens, out, lse, partial, tickets, status, max_pages, kv_heads,
                    group, scale_log2);
}

}  // namespace

#define GAAC_ATTENTION_KERNEL(D)                                                                                 \
    extern "C" __global__ void __launch_bounds__(threads<D>()) gaac_attention_d##D(                               \
        const uint16_t* q, const uint8_t* slots, unsigned long long capacity, uint32_t num_pages,                \
        const uint32_t* directory, const uint8_t* raw, uint32_t num_raw, const uint8_t* bases,                   \
        const uint16_t* k_bf16, const uint16_t* v_bf16, uint32_t num_bf16, const uint32_t* block_table,          \
        const uint32_t* context_lens, uint16_t* out, float* lse, float* partial, uint32_t* tickets,              \
        uint32_t* status, uint32_t max_pages, uint32_t kv_heads, uint32_t group, float scale_log2) {             \
        gaac_attention<D>(q, slots, capacity, num_pages, directory, raw, num_raw, bases, k_bf16, v_bf16,         \
                          num_bf16, block_table, context_lens, out, lse, partial, tickets, status, max_pages,    \
                          kv_heads, group, scale_log2);                                                           \
    }

GAAC_ATTENTION_KERNEL(64)
GAAC_ATTENTION_KERNEL(128)
GAAC_ATTENTION_KERNEL(256)

// The fused kernel over a pool-managed cache (GaacPoolLoader): block tables of page ids.
#define GAAC_ATTENTION_POOLED_KERNEL(D)                                                                          \
    extern "C" __global__ void __launch_bounds__(threads<D>()) gaac_attention_pooled_d##D(                        \
        const uint16_t* q, const uint8_t* arena, unsigned long long arena_bytes,                                 \
        const unsigned long long* page_table, uint32_t table_len, unsigned long long capacity,                   \
        const uint32_t* directory, const uint8_t* bases, const uint32_t* block_table,                            \
        const uint32_t* context_lens, uint16_t* out, float* lse, float* partial, uint32_t* tickets,              \
        uint32_t* status, uint32_t max_pages, uint32_t kv_heads, uint32_t group, float scale_log2) {             \
        gaac_attention_pooled<D>(q, arena, arena_bytes, page_table, table_len, capacity, directory, bases,       \
                                 block_table, context_lens, out, lse, partial, tickets, status, max_pages,       \
                                 kv_heads, group, scale_log2);                                                    \
    }

GAAC_ATTENTION_POOLED_KERNEL(64)
GAAC_ATTENTION_POOLED_KERNEL(128)
GAAC_ATTENTION_POOLED_KERNEL(256)
