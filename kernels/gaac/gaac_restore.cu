// GAAC restore-only kernel (docs/formats/gaac.md §3.7): reads the coded blocks of a
// container's slots, restores every value to BF16 in registers in mma.m16n8k16 B-fragment
// order, and folds the words into a checksum instead of computing attention. It measures
// what the fused decode kernel will pay to restore a block before the attention kernel
// is built on the layout; the host program is xtask/microbench/gaac_restore.cu.
//
// One warp restores one block at a time, so every branch on a block's status or tags is
// warp-uniform. The common path is the same for every group whatever its tag: each lane
// takes its three 3-bit-plane words per slab and, per tile, moves bit k of its four values
// into byte lanes with one shift and one mask per plane, adds the four addend bytes
// (the channels' bases), and joins exponents and sign+mantissa bytes four at a time.
// The 4-bit and raw groups only change addends: a warp-uniform pass over the block's
// nonzero tags writes the changed addend words of the owning lanes into shared memory
// and sets a bit per tile, which the common path selects without branching.
//
// The checksum: the sum, modulo 2^32, of every restored pair word (fragment values 2i
// and 2i + 1 of a block as the low and high half of one u32) of coded blocks, and of
// every pair of consecutive words of raw blocks in [16, D] order; the host compares it
// with what the CPU reference gives for the same container.

#include <stdint.h>

#include "common/bf16_field.cuh"
#include "gaac/gaac_format.gen.cuh"

#define GAAC_RESTORE_WARPS 8
#define GAAC_RESTORE_RUN 8

template <int D>
struct GaacGeometry {
    static constexpr int N = GAAC_BLOCK_TOKENS * D;
    static constexpr int GROUPS = N / GAAC_GROUP_CHANNELS;
    static constexpr int TAGS_LEN = GROUPS / 4;
    static constexpr int TAG_WORDS = TAGS_LEN / 4;
    static constexpr int PLANE3_AT = TAGS_LEN;
    static constexpr int SM_AT = TAGS_LEN + 3 * N / 8;
    static constexpr int PLANES_LEN = SM_AT + N;
    static constexpr int TILES = N / GAAC_TILE_VALUES;
    static constexpr int SLABS = TILES / GAAC_SLAB_TILES;
    static constexpr int CHANNEL_TILES = D / 16;
    static constexpr int GROUPS_PER_TOKEN = D / GAAC_GROUP_CHANNELS;
};

__device__ __forceinline__ uint32_t gaac_ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t gaac_window_start(uint32_t b) {
    const uint32_t w = b > GAAC_WINDOW_BELOW_BASE ? b - GAAC_WINDOW_BELOW_BASE : 0u;
    return w < GAAC_MAX_WINDOW_START ? w : GAAC_MAX_WINDOW_START;
}

// Bytes r = 0..3 of a lane's addend word of tile t: the bases of its four values'
// channels (spec §3.1: K channel 16 (t mod D/16) + 2 (lane mod 4) + (r mod 2) + 8 (r / 2);
// V channel 8 t + lane / 4 for all four).
template <bool IS_V, int D>
__device__ __forceinline__ uint32_t gaac_base_word(const uint8_t* bases, int t, int lane) {
    if (IS_V) return 0x01010101u * bases[8 * t + (lane >> 2)];
    const int c = 16 * (t % GaacGeometry<D>::CHANNEL_TILES) + 2 * (lane & 3);
    return bases[c] | (bases[c + 1] << 8) | (bases[c + 8] << 16) | (bases[c + 9] << 24);
}

// The addend of channel i (0..7) of a 4-bit or raw group (spec §3.3).
__device__ __forceinline__ uint32_t gaac_fixed_addend(uint32_t tag, uint32_t base, uint32_t hi4, uint64_t high, int i) {
    return tag == GAAC_TAG_OFFSET4 ? gaac_window_start(base) + (((hi4 >> i) & 1u) << 3)
                                   : (uint32_t)((high >> (5 * i)) & 0x1fu) << 3;
}

// Restores one coded block and returns its checksum contribution for this lane.
// `base_words[t]` is gaac_base_word for tile t, computed once per (layer, kind, head).
template <bool IS_V, int D>
__device__ __forceinline__ uint32_t gaac_restore_block(const uint8_t* __restrict__ blk,
                                                       const uint8_t* __restrict__ bases,
                                                       const uint32_t (&base_words)[GaacGeometry<D>::TILES],
                                                       uint32_t (*override_word)[GAAC_LANES], int lane) {
    using G = GaacGeometry<D>;
    // Pass 1 (uniform): 4-bit groups come first among the extra bytes, so the raw highs
    // start after all of them.
    int offset4 = 0;
#pragma unroll
    for (int w = 0; w < G::TAG_WORDS; ++w) {
        const uint32_t tw = gaac_ld32(blk + 4 * w);
        offset4 += __popc(tw & ~(tw >> 1) & 0x55555555u);
    }
    // Pass 2 (uniform): each nonzero tag patches the addend words of the lanes that hold
    // its group's values.
    uint32_t fixed_tiles = 0;
    int k4 = 0, kraw = 0;
    for (int w = 0; w < G::TAG_WORDS; ++w) {
        const uint32_t tw = gaac_ld32(blk + 4 * w);
        uint32_t nonzero = (tw | (tw >> 1)) & 0x55555555u;
        while (nonzero) {
            const int bit = __ffs(nonzero) - 1;
            nonzero &= nonzero - 1;
            const uint32_t tag = (tw >> bit) & 3u;
            const int g = 16 * w + bit / 2;
            const int token = g / G::GROUPS_PER_TOKEN, j = g % G::GROUPS_PER_TOKEN;
            uint32_t hi4 = 0;
            uint64_t high = 0;
            if (tag == GAAC_TAG_OFFSET4) {
                hi4 = blk[G::PLANES_LEN + k4++];
            } else {
                const uint8_t* h = blk + G::PLANES_LEN + offset4 + GAAC_RAW_BYTES_PER_GROUP * kraw++;
#pragma unroll
                for (int b = 0; b < GAAC_RAW_BYTES_PER_GROUP; ++b) high |= (uint64_t)h[b] << (8 * b);
            }
            const uint8_t* gb = bases + GAAC_GROUP_CHANNELS * j;
            if (!IS_V) {
                // Token 8 nt + lane / 4, channels 8j + 2 (lane mod 4) + {0, 1} at halves
                // 2 (j mod 2) + {0, 1} of tile nt (D/16) + j / 2.
                const int t = (token >> 3) * G::CHANNEL_TILES + (j >> 1);
                if ((lane >> 2) == (token & 7)) {
                    uint32_t word = (fixed_tiles >> t) & 1u ? override_word[t][lane] : gaac_base_word<false, D>(bases, t, lane);
#pragma unroll
                    for (int rr = 0; rr < 2; ++rr) {
                        const int i = 2 * (lane & 3) + rr;
                        const int shift = 8 * (2 * (j & 1) + rr);
                        word = (word & ~(0xffu << shift)) | (gaac_fixed_addend(tag, gb[i], hi4, high, i) << shift);
                    }
                    override_word[t][lane] = word;
                    fixed_tiles |= 1u << t;
                }
            } else {
                // Channel 8j + lane / 4, token 2 (lane mod 4) + (r mod 2) + 8 (r / 2) of tile j.
                if ((lane & 3) == ((token & 7) >> 1)) {
                    const int t = j, i = lane >> 2;
                    const int shift = 8 * ((token & 1) + 2 * (token >> 3));
                    uint32_t word = (fixed_tiles >> t) & 1u ? override_word[t][lane] : gaac_base_word<true, D>(bases, t, lane);
                    word = (word & ~(0xffu << shift)) | (gaac_fixed_addend(tag, gb[i], hi4, high, i) << shift);
                    override_word[t][lane] = word;
                    fixed_tiles |= 1u << t;
                }
            }
        }
    }
    __syncwarp();
    // The common path: every tile of every slab, the addends from registers unless a
    // fix-up replaced them.
    uint32_t sum = 0;
#pragma unroll
    for (int s = 0; s < G::SLABS; ++s) {
        const uint8_t* plane = blk + G::PLANE3_AT + GAAC_SLAB_BYTES * s + 4 * lane;
        const uint32_t w0 = gaac_ld32(plane), w1 = gaac_ld32(plane + 128), w2 = gaac_ld32(plane + 256);
#pragma unroll
        for (int m = 0; m < GAAC_SLAB_TILES; ++m) {
            const int t = GAAC_SLAB_TILES * s + m;
            const uint32_t sm = gaac_ld32(blk + G::SM_AT + GAAC_TILE_VALUES * t + 4 * lane);
            const uint32_t field = ((w0 >> m) & 0x01010101u) | (((w1 >> m) & 0x01010101u) << 1) |
                                   (((w2 >> m) & 0x01010101u) << 2);
            uint32_t addend = base_words[t];
            if ((fixed_tiles >> t) & 1u) addend = override_word[t][lane];
            // A valid base keeps every byte of field + addend within 255 (spec §3.3): no
            // carry between byte lanes.
            const uint2 words = kv_join_quad(field + addend, sm);
            sum += words.x + words.y;
        }
    }
    __syncwarp();
    return sum;
}

// A run of one (layer, kind, head)'s blocks restored by one warp; raw blocks are summed
// as BF16 from the overflow section.
template <int D>
__device__ void gaac_restore_runs(const uint8_t* __restrict__ slots, unsigned long long capacity,
                                  unsigned long long blocks, unsigned long long blocks_per_copy, int blocks_per_head,
                                  int kv_heads, const uint8_t* __restrict__ statuses,
                                  const int64_t* __restrict__ raw_index, const uint8_t* __restrict__ overflow,
                                  const uint8_t* __restrict__ bases, uint32_t* __restrict__ checksum) {
    __shared__ uint32_t overrides[GAAC_RESTORE_WARPS][GaacGeometry<D>::TILES][GAAC_LANES];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned long long runs = (blocks + GAAC_RESTORE_RUN - 1) / GAAC_RESTORE_RUN;
    const unsigned long long warps = (unsigned long long)gridDim.x * GAAC_RESTORE_WARPS;
    uint32_t sum = 0;
    uint32_t base_words[GaacGeometry<D>::TILES];
    long long loaded = -1;  // the (tensor, head) whose base words are loaded
    for (unsigned long long run = (unsigned long long)blockIdx.x * GAAC_RESTORE_WARPS + warp; run < runs;
         run += warps) {
        for (unsigned long long i = run * GAAC_RESTORE_RUN; i < blocks && i < (run + 1) * GAAC_RESTORE_RUN; ++i) {
            const unsigned long long local = i % blocks_per_copy;
            const unsigned long long head_index = local / blocks_per_head;
            const int tensor = (int)(head_index / kv_heads), head = (int)(head_index % kv_heads);
            const uint8_t* head_bases = bases + ((unsigned long long)tensor * kv_heads + head) * D;
            if ((long long)head_index != loaded) {
                // Once per (layer, kind, head): the fused kernel's CTA owns one head.
#pragma unroll
                for (int t = 0; t < GaacGeometry<D>::TILES; ++t) {
                    base_words[t] = (tensor & 1) ? gaac_base_word<true, D>(head_bases, t, lane)
                                                 : gaac_base_word<false, D>(head_bases, t, lane);
                }
                loaded = (long long)head_index;
            }
            if (statuses[local] == GAAC_STATUS_RAW) {
                const uint32_t* raw = reinterpret_cast<const uint32_t*>(overflow + raw_index[local] * 2ull * GaacGeometry<D>::N);
                for (int k = lane; k < GaacGeometry<D>::N / 2; k += GAAC_LANES) sum += raw[k];
            } else if (tensor & 1) {
                sum += gaac_restore_block<true, D>(slots + i * capacity, head_bases, base_words, overrides[warp], lane);
            } else {
                sum += gaac_restore_block<false, D>(slots + i * capacity, head_bases, base_words, overrides[warp], lane);
            }
        }
    }
    // Lanes, then warps, then CTAs: one atomic per warp.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) atomicAdd(checksum, sum);
}

// Launch with GAAC_RESTORE_WARPS * 32 threads per CTA; `blocks` may be several copies of
// one container's `blocks_per_copy` slots laid end to end (statuses, raw indices and
// bases are those of one copy; raw_index[b] is the block's place in the overflow
// section, or -1).
#define GAAC_RESTORE_ENTRY(D)                                                                                       \
    extern "C" __global__ void __launch_bounds__(GAAC_RESTORE_WARPS * 32)                                           \
        gaac_restore_sum_d##D(const uint8_t* slots, unsigned long long capacity, unsigned long long blocks,        \
                              unsigned long long blocks_per_copy, int blocks_per_head, int kv_heads,               \
                              const uint8_t* statuses, const int64_t* raw_index, const uint8_t* overflow,          \
                              const uint8_t* bases, uint32_t* checksum) {                                          \
        gaac_restore_runs<D>(slots, capacity, blocks, blocks_per_copy, blocks_per_head, kv_heads, statuses,        \
                             raw_index, overflow, bases, checksum);                                                \
    }

GAAC_RESTORE_ENTRY(64)
GAAC_RESTORE_ENTRY(128)
