// GAAC restore-only kernel (docs/formats/gaac.md §3.7): reads the coded blocks of a
// container's slots, restores every value to BF16 in registers in mma.m16n8k16 B-fragment
// order, and folds the words into a checksum instead of computing attention. It measures
// what the fused decode kernel will pay to restore a block before the attention kernel
// is built on the layout; the host program is xtask/microbench/gaac_restore.cu, and the
// history of this kernel (what limited each version) is docs/perf/gaac-gpu.md.
//
// Each warp owns a contiguous range of blocks and streams it through its own ring of
// GAAC_RESTORE_STAGES slot buffers in shared memory, filled by 16-byte cp.async copies
// (512 contiguous bytes per warp instruction) GAAC_RESTORE_STAGES - 1 blocks ahead, so
// a warp always has that many slots in flight while it restores one. Everything a block
// needs (tags, planes, 4th bits, raw highs) is then read from shared memory. The range is
// walked by runs of at most 32 blocks of one head: the run's status bytes come from one
// load per lane and one ballot, the head's bases and the K/V choice once per run.
//
// A block is restored in two steps, both without a loop over the block's groups:
// 1. Addends. Each lane writes its base words (the addends of a block of 3-bit groups,
//    spec §3.3) into a per-warp image of one addend byte per value, in fragment order,
//    four tiles' words side by side per lane (one 16-byte store and load per four tiles).
//    Lane l owns the tags of groups (D/16) l .. (D/16) (l + 1), i.e. half a token; a
//    warp scan of its 4-bit and raw counts locates its 4th-bit bytes and raw highs, and
//    the lane overwrites the image bytes of its own nonzero groups (about one group in
//    nine, so the lanes' loops run about twice per block, all lanes at once).
// 2. The common path, the same for every value whatever its tag: per slab a lane
//    pre-rotates its three 3-bit-plane words into five words in which any tile's three
//    field bits lie side by side; per tile it takes its sign+mantissa word and its addend
//    word, masks the tile's fields out of one rotated word, shifts and adds the addends in
//    one high multiply-add (FMA pipe), and joins exponents and sign+mantissa bytes four at
//    a time (restore.cuh, gaac_restore_staged).
//
// The checksum: the sum, modulo 2^32, of every restored pair word (fragment values 2i
// and 2i + 1 of a block as the low and high half of one u32) of coded blocks, and of
// every pair of consecutive words of raw blocks in [16, D] order; the host compares it
// with what the CPU reference gives for the same container. The kernel trusts the
// container (no tag 3, spec §7): decode it on the CPU once to validate it.

#include <stddef.h>
#include <stdint.h>

#define GAAC_RESTORE_WARPS 8
#define GAAC_RESTORE_STAGES 3

#include "gaac/restore.cuh"

// Shared memory of one warp: the addend image, the head's bases and window starts (D
// bytes each), then the slot ring. Host and device agree on it through this function.
static inline __host__ __device__ size_t gaac_restore_warp_bytes(int head_dim, size_t capacity) {
    return (size_t)GAAC_BLOCK_TOKENS * head_dim + 2 * (size_t)head_dim + GAAC_RESTORE_STAGES * capacity;
}

// A compile-time bool as a value, to instantiate a generic lambda for K and for V.
template <bool B>
struct GaacRestoreBool {
    static constexpr bool value = B;
};

// One warp's contiguous range of blocks, streamed through its slot ring; raw blocks are
// summed as BF16 from the overflow section.
template <int D>
__device__ void gaac_restore_range(const uint8_t* __restrict__ slots, unsigned long long capacity,
                                   unsigned long long blocks, unsigned long long blocks_per_copy, int blocks_per_head,
                                   int kv_heads, const uint8_t* __restrict__ statuses,
                                   const int64_t* __restrict__ raw_index, const uint8_t* __restrict__ overflow,
                                   const uint8_t* __restrict__ bases, uint32_t* __restrict__ checksum) {
    using G = GaacGeometry<D>;
    extern __shared__ __align__(16) uint8_t gaac_restore_smem[];
    // The lane index behind an opaque move: read once and kept, not recomputed from the
    // thread index at each use inside the block loop.
    int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    const int warp = threadIdx.x >> 5;
    const uint32_t cap = (uint32_t)capacity;
    uint8_t* own = gaac_restore_smem + gaac_restore_warp_bytes(D, capacity) * warp;
    uint32_t* image = reinterpret_cast<uint32_t*>(own);
    uint8_t* base = own + G::IMAGE_BYTES;
    uint8_t* wstart = base + D;
    uint8_t* ring = wstart + D;
    const uint32_t ring_at = (uint32_t)__cvta_generic_to_shared(ring);

    const unsigned long long warps = (unsigned long long)gridDim.x * GAAC_RESTORE_WARPS;
    const unsigned long long me = (unsigned long long)blockIdx.x * GAAC_RESTORE_WARPS + warp;
    const unsigned long long begin = blocks * me / warps, end = blocks * (me + 1) / warps;
    // The loop counts in 32 bits (a warp's range is far below 2^32 blocks), so that no
    // 64-bit compare or add is left in it.
    const uint32_t count = (uint32_t)(end - begin);
    // Block k's stage is k mod STAGES; an empty group keeps the waits uniform. `fetch` is
    // the slot of the next block to copy; a slot is at most P + 10 D bytes, and copy k of
    // a lane is needed while 512 k of the slot's bytes from its first 16-byte word on are
    // left. Block k's stage starts `stage` bytes into the ring; the copy issued while
    // block k is restored fills block k - 1's stage, `prev` (one rotated offset per block).
    constexpr int MAX_COPIES = (G::PLANES_LEN + 10 * D + 16 * GAAC_LANES - 1) / (16 * GAAC_LANES);
    const uint8_t* fetch = slots + begin * capacity + 16 * lane;
    uint32_t fetched = 0;
    uint32_t stage = 0, prev = cap * (GAAC_RESTORE_STAGES - 1);
    // cap >= P >= 1440 > 16 x 31 (a slot holds at least its block's planes, spec 4), so
    // lane_left does not wrap.
    const uint32_t lane_at = ring_at + 16 * lane, lane_left = cap - 16 * lane;
    auto issue_to = [&](uint32_t dst) {
        if (fetched < count) {
#pragma unroll
            for (int k = 0; k < MAX_COPIES; ++k) {
                if (16 * GAAC_LANES * k < lane_left)
                    gaac_cp_async16(dst + 16 * GAAC_LANES * k, fetch + 16 * GAAC_LANES * k);
            }
        }
        gaac_cp_async_commit();
        ++fetched;
        fetch += capacity;
    };
#pragma unroll
    for (int s = 0; s < GAAC_RESTORE_STAGES - 1; ++s) issue_to(lane_at + cap * s);

    // The block's place in its copy, within its head, and its (layer, kind, head),
    // advanced by counting: no 64-bit division per block.
    const uint32_t per_copy = (uint32_t)blocks_per_copy, per_head = (uint32_t)blocks_per_head;
    uint32_t local = (uint32_t)(begin % blocks_per_copy);
    uint32_t in_head = local % per_head, head_index = local / per_head;
    uint32_t loaded = 0xffffffffu;  // the head whose bases the warp holds
    bool is_v = false;
    uint32_t base_words[G::TILES];
    uint32_t sum = 0;
    // Runs of at most 32 blocks of one head (a head's blocks never cross its copy's end).
    for (uint32_t k = 0; k < count;) {
        uint32_t run = per_head - in_head;
        if (run > count - k) run = count - k;
        if (run > GAAC_LANES) run = GAAC_LANES;
        // Bit j: block k + j is raw (lane j reads its status byte).
        const uint32_t raw_mask =
            __ballot_sync(0xffffffffu, (uint32_t)lane < run && statuses[local + lane] == GAAC_STATUS_RAW);
        if (head_index != loaded) {
            // Once per (layer, kind, head): the fused kernel's CTA owns one head.
            is_v = (head_index / (uint32_t)kv_heads) & 1u;
            gaac_load_head<D>(bases + (size_t)head_index * D, base, wstart, is_v, base_words, lane);
            loaded = head_index;
        }
        const auto blocks_of_run = [&](auto kind) {
            constexpr bool IS_V = decltype(kind)::value;
            for (uint32_t j = 0; j < run; ++j) {
                gaac_cp_async_wait<GAAC_RESTORE_STAGES - 2>();
                __syncwarp();             // block k + j is in shared memory for every lane; k + j - 1 is done
                issue_to(lane_at + prev);  // block k + j + STAGES - 1, into block k + j - 1's stage
                if ((raw_mask >> j) & 1u) {
                    const uint32_t* words =
                        reinterpret_cast<const uint32_t*>(overflow + raw_index[local + j] * 2ull * G::N);
                    for (int w = lane; w < G::N / 2; w += GAAC_LANES) sum += words[w];
                } else {
                    const auto add = [&](int, uint2 words) { sum += words.x + words.y; };
                    gaac_restore_staged<IS_V, D, true>(ring + stage, image, wstart, base_words, lane, add);
                }
                __syncwarp();  // every lane is done with the image and the stage
                prev = stage;
                stage = stage == cap * (GAAC_RESTORE_STAGES - 1) ? 0u : stage + cap;
            }
        };
        if (is_v) blocks_of_run(GaacRestoreBool<true>{});
        else blocks_of_run(GaacRestoreBool<false>{});
        k += run, local += run, in_head += run;
        if (in_head == per_head) in_head = 0, ++head_index;
        if (local == per_copy) local = 0, head_index = 0;
    }
    gaac_cp_async_wait<0>();
    // Lanes, then warps, then CTAs: one atomic per warp.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) atomicAdd(checksum, sum);
}

// Launch with GAAC_RESTORE_WARPS * 32 threads per CTA and GAAC_RESTORE_WARPS *
// gaac_restore_warp_bytes(D, capacity) bytes of dynamic shared memory; `capacity` a
// multiple of 16 (spec §4) and `slots` 16-byte aligned. `blocks` may be several copies
// of one container's `blocks_per_copy` slots laid end to end (statuses, raw indices and
// bases are those of one copy; raw_index[b] is the block's place in the overflow
// section, or -1).
#define GAAC_RESTORE_ENTRY(D, CTAS)                                                                                \
    extern "C" __global__ void __launch_bounds__(GAAC_RESTORE_WARPS * 32, CTAS)                                    \
        gaac_restore_sum_d##D(const uint8_t* slots, unsigned long long capacity, unsigned long long blocks,        \
                              unsigned long long blocks_per_copy, int blocks_per_head, int kv_heads,               \
                              const uint8_t* statuses, const int64_t* raw_index, const uint8_t* overflow,          \
                              const uint8_t* bases, uint32_t* checksum) {                                          \
        gaac_restore_range<D>(slots, capacity, blocks, blocks_per_copy, blocks_per_head, kv_heads, statuses,       \
                              raw_index, overflow, bases, checksum);                                               \
    }

// CTAs per SM the registers must allow: shared memory fits 5 at D = 64 (44.9 KB per CTA at
// the default capacity) and 2 at D = 128; without the bound ptxas may take more than
// 65,536 / (256 x 5) registers at D = 64 and lose the fifth CTA.
GAAC_RESTORE_ENTRY(64, 5)
GAAC_RESTORE_ENTRY(128, 2)
