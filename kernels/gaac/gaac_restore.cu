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
// needs (tags, planes, 4th bits, raw highs) is then read from shared memory.
//
// A block is restored in two steps, both without a loop over the block's groups:
// 1. Addends. Each lane writes its base words (the addends of a block of 3-bit groups,
//    spec §3.3) into a per-warp image of one addend byte per value, in fragment order.
//    Lane l owns the tags of groups (D/16) l .. (D/16) (l + 1), i.e. half a token; a
//    warp scan of its 4-bit and raw counts locates its 4th-bit bytes and raw highs, and
//    the lane overwrites the image bytes of its own nonzero groups (about one group in
//    nine, so the lanes' loops run about twice per block, all lanes at once).
// 2. The common path, the same for every value whatever its tag: per tile a lane takes
//    its sign+mantissa word and its addend word, selects bit k of its four fields out of
//    the three 3-bit-plane words into byte lanes (two bit selects, one shift, one mask),
//    adds the addends, and joins exponents and sign+mantissa bytes four at a time.
//
// The checksum: the sum, modulo 2^32, of every restored pair word (fragment values 2i
// and 2i + 1 of a block as the low and high half of one u32) of coded blocks, and of
// every pair of consecutive words of raw blocks in [16, D] order; the host compares it
// with what the CPU reference gives for the same container. The kernel trusts the
// container (no tag 3, spec §7): decode it on the CPU once to validate it.

#include <stddef.h>
#include <stdint.h>

#include "common/bf16_field.cuh"
#include "gaac/gaac_format.gen.cuh"

#define GAAC_RESTORE_WARPS 8
#define GAAC_RESTORE_STAGES 3

template <int D>
struct GaacGeometry {
    static constexpr int N = GAAC_BLOCK_TOKENS * D;
    static constexpr int GROUPS = N / GAAC_GROUP_CHANNELS;
    static constexpr int TAGS_LEN = GROUPS / 4;
    static constexpr int PLANE3_AT = TAGS_LEN;
    static constexpr int SM_AT = TAGS_LEN + 3 * N / 8;
    static constexpr int PLANES_LEN = SM_AT + N;
    static constexpr int TILES = N / GAAC_TILE_VALUES;
    static constexpr int SLABS = TILES / GAAC_SLAB_TILES;
    static constexpr int CHANNEL_TILES = D / 16;
    // The groups whose tags one lane owns: half of one token's groups.
    static constexpr int LANE_GROUPS = GROUPS / GAAC_LANES;
    // Bytes of the per-warp addend image: one byte per value.
    static constexpr int IMAGE_BYTES = N;
};

// Shared memory of one warp: the addend image, the head's bases and window starts (D
// bytes each), then the slot ring. Host and device agree on it through this function.
static inline __host__ __device__ size_t gaac_restore_warp_bytes(int head_dim, size_t capacity) {
    return (size_t)GAAC_BLOCK_TOKENS * head_dim + 2 * (size_t)head_dim + GAAC_RESTORE_STAGES * capacity;
}

__device__ __forceinline__ void gaac_cp_async16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void gaac_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void gaac_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// Bits of `b` where `mask` is set, of `a` elsewhere (one LOP3).
__device__ __forceinline__ uint32_t gaac_select(uint32_t a, uint32_t b, uint32_t mask) {
    return (a & ~mask) | (b & mask);
}

// The same select, written as one lop3 (0xd8 = `c ? b : a` per bit), for the join:
// written in C, the compiler first clears the bits the select discards and spends a
// second LOP3 per byte word.
__device__ __forceinline__ uint32_t gaac_select_lop3(uint32_t a, uint32_t b, uint32_t mask) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xd8;" : "=r"(r) : "r"(a), "r"(b), "r"(mask));
    return r;
}

// Four exponents and four sign+mantissa bytes (byte i = value i) -> four BF16 words as
// two u32 (value 0 in the low half of .x), as kv_join_quad, but with each byte built by
// one bit select: the bits a shift brings in from the neighbouring byte are the ones the
// select takes from `sf4`.
__device__ __forceinline__ uint2 gaac_join_quad(uint32_t e4, uint32_t sf4) {
    const uint32_t hi = gaac_select_lop3(e4 >> 1, sf4, 0x80808080u);
    const uint32_t lo = gaac_select_lop3(e4 << 7, sf4, 0x7f7f7f7fu);
    return make_uint2(__byte_perm(lo, hi, 0x5140), __byte_perm(lo, hi, 0x7362));
}

// Four 5-bit fields (bits 5i .. 5i + 5 of `v`, higher bits ignored) -> byte i = field i
// times 8: the addends of four values of a raw group (spec §3.5).
__device__ __forceinline__ uint32_t gaac_spread5x8(uint32_t v) {
    const uint32_t halves = (v & 0x3ffu) | ((v << 6) & 0x3ff0000u);
    return ((halves << 3) & 0x00f800f8u) | ((halves << 6) & 0xf800f800u);
}

// Four 4th bits (bit i of `h`, higher bits ignored) -> byte i = bit i times 8. The
// multiply puts bit i at 8i + 3 among copies that never overlap.
__device__ __forceinline__ uint32_t gaac_spread1x8(uint32_t h) { return ((h & 15u) * 0x01020408u) & 0x08080808u; }

// The fields of tile m (0..7) of a slab: byte r = bits m of the three plane words' byte r
// (spec §3.2). `w1s` = w1 << 1, `w2s` = w2 << 2 (used for m <= 5, where bits m .. m + 2
// stay in their byte); `w0r` = w0 >> 2, `w1r` = w1 >> 1 (for m = 6, 7: bits m - 2 .. m).
template <int M>
__device__ __forceinline__ uint32_t gaac_tile_field(uint32_t w0, uint32_t w1s, uint32_t w2s, uint32_t w0r,
                                                    uint32_t w1r, uint32_t w2) {
    if constexpr (M <= 5) {
        const uint32_t x = gaac_select(gaac_select(w0, w1s, 0x01010101u << (M + 1)), w2s, 0x01010101u << (M + 2));
        return (x >> M) & 0x07070707u;
    } else {
        const uint32_t x = gaac_select(gaac_select(w0r, w1r, 0x01010101u << (M - 1)), w2, 0x01010101u << M);
        return (x >> (M - 2)) & 0x07070707u;
    }
}

// Restores one coded block staged in shared memory and returns this lane's checksum
// contribution. `image` is the warp's addend image ([TILES][32] words), `wstart` the
// head's window starts (D bytes, spec §2.2), `base_words[t]` the lane's addend word of
// tile t for 3-bit groups. No pointer here is __restrict__: other lanes write the image
// between this lane's stores and loads, and a restrict-qualified image lets the compiler
// forward this lane's own stores past the __syncwarp.
template <bool IS_V, int D>
__device__ __forceinline__ uint32_t gaac_restore_staged(const uint8_t* blk, uint32_t* image, const uint8_t* wstart,
                                                        const uint32_t (&base_words)[GaacGeometry<D>::TILES],
                                                        int lane) {
    using G = GaacGeometry<D>;
#pragma unroll
    for (int t = 0; t < G::TILES; ++t) image[GAAC_LANES * t + lane] = base_words[t];
    // This lane's tags (spec §2.2: group g at bits 2 (g mod 4) of byte g / 4).
    const uint32_t tags = D == 64 ? (uint32_t)blk[lane] : (uint32_t)reinterpret_cast<const uint16_t*>(blk)[lane];
    const uint32_t four = tags & 0x5555u, raw = (tags >> 1) & 0x5555u;
    // Inclusive scan of (4-bit count, raw count << 16) over the lanes in group order.
    const uint32_t counts = __popc(four) | (__popc(raw) << 16);
    uint32_t scan = counts;
#pragma unroll
    for (int o = 1; o < GAAC_LANES; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, scan, o);
        if (lane >= o) scan += v;
    }
    const uint32_t before = scan - counts;
    // Raw highs start after every 4th-bit byte (spec §3.5).
    const uint32_t raw_at = G::PLANES_LEN + (__shfl_sync(0xffffffffu, scan, GAAC_LANES - 1) & 0xffffu);
    const uint32_t four_at = G::PLANES_LEN + (before & 0xffffu);
    const uint32_t raw_first = before >> 16;
    const int token = lane >> 1;
    __syncwarp();  // every base word is in the image before any lane patches it
    uint32_t pending = four | raw;
    while (pending) {
        const int bit = 31 - __clz(pending);
        const uint32_t one = 1u << bit, below = one - 1u;
        pending ^= one;
        const int j = G::LANE_GROUPS * (lane & 1) + (bit >> 1);  // the group's channels 8j .. 8j + 8
        uint32_t lo, hi;  // addends of channels 8j + 0..3 and 8j + 4..7, one per byte
        if (raw & one) {
            // Five bytes at any alignment: two aligned words hold them.
            const uint32_t at = raw_at + GAAC_RAW_BYTES_PER_GROUP * (raw_first + __popc(raw & below));
            const uint32_t* w = reinterpret_cast<const uint32_t*>(blk + (at & ~3u));
            const uint32_t shift = 8 * (at & 3u), w1 = w[1];
            const uint32_t x = __funnelshift_r(w[0], w1, shift);
            lo = gaac_spread5x8(x);
            hi = gaac_spread5x8(__funnelshift_r(x, w1 >> shift, 20));
        } else {
            const uint32_t h = blk[four_at + __popc(four & below)];
            const uint2 w = *reinterpret_cast<const uint2*>(wstart + GAAC_GROUP_CHANNELS * j);
            lo = w.x + gaac_spread1x8(h);
            hi = w.y + gaac_spread1x8(h >> 4);
        }
        uint8_t* img = reinterpret_cast<uint8_t*>(image);
        if (!IS_V) {
            // Channel 8j + i of token 8 nt + l / 4 is lane 4 (token mod 8) + i / 2, half
            // 2 (j mod 2) + (i mod 2) of tile nt (D/16) + j / 2 (spec §3.1): two bytes per lane.
            uint8_t* p = img + 4 * (GAAC_LANES * ((token >> 3) * G::CHANNEL_TILES + (j >> 1)) + 4 * (token & 7)) +
                         2 * (j & 1);
            *reinterpret_cast<uint16_t*>(p) = (uint16_t)lo;
            *reinterpret_cast<uint16_t*>(p + 4) = (uint16_t)(lo >> 16);
            *reinterpret_cast<uint16_t*>(p + 8) = (uint16_t)hi;
            *reinterpret_cast<uint16_t*>(p + 12) = (uint16_t)(hi >> 16);
        } else {
            // Channel 8j + i, token q is lane 4i + (q mod 8) / 2, half (q mod 2) + 2 (q / 8)
            // of tile j: one byte in each of eight lanes.
            uint8_t* p = img + 4 * (GAAC_LANES * j + ((token & 7) >> 1)) + (token & 1) + 2 * (token >> 3);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                p[16 * i] = (uint8_t)(lo >> (8 * i));
                p[16 * (i + 4)] = (uint8_t)(hi >> (8 * i));
            }
        }
    }
    __syncwarp();  // every patch is in the image
    uint32_t sum = 0;
#pragma unroll
    for (int s = 0; s < G::SLABS; ++s) {
        const uint32_t* plane = reinterpret_cast<const uint32_t*>(blk + G::PLANE3_AT + GAAC_SLAB_BYTES * s) + lane;
        const uint32_t w0 = plane[0], w1 = plane[GAAC_LANES], w2 = plane[2 * GAAC_LANES];
        const uint32_t w1s = w1 << 1, w2s = w2 << 2, w0r = w0 >> 2, w1r = w1 >> 1;
        const uint32_t* sm = reinterpret_cast<const uint32_t*>(blk + G::SM_AT) + GAAC_LANES * GAAC_SLAB_TILES * s + lane;
        const uint32_t* add = image + GAAC_LANES * GAAC_SLAB_TILES * s + lane;
        uint32_t f[GAAC_SLAB_TILES];
        f[0] = gaac_tile_field<0>(w0, w1s, w2s, w0r, w1r, w2);
        f[1] = gaac_tile_field<1>(w0, w1s, w2s, w0r, w1r, w2);
        f[2] = gaac_tile_field<2>(w0, w1s, w2s, w0r, w1r, w2);
        f[3] = gaac_tile_field<3>(w0, w1s, w2s, w0r, w1r, w2);
        f[4] = gaac_tile_field<4>(w0, w1s, w2s, w0r, w1r, w2);
        f[5] = gaac_tile_field<5>(w0, w1s, w2s, w0r, w1r, w2);
        f[6] = gaac_tile_field<6>(w0, w1s, w2s, w0r, w1r, w2);
        f[7] = gaac_tile_field<7>(w0, w1s, w2s, w0r, w1r, w2);
#pragma unroll
        for (int m = 0; m < GAAC_SLAB_TILES; ++m) {
            // A valid base keeps every byte of field + addend within 255 (spec §3.3): no
            // carry between byte lanes.
            const uint2 words = gaac_join_quad(f[m] + add[GAAC_LANES * m], sm[GAAC_LANES * m]);
            sum += words.x + words.y;
        }
    }
    return sum;
}

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
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
    // Block i's stage is (i - begin) mod STAGES; an empty group keeps the waits uniform.
    // `fetch` is the slot of the next block to copy; a slot is at most P + 10 D bytes.
    constexpr int MAX_COPIES = (G::PLANES_LEN + 10 * D + 16 * GAAC_LANES - 1) / (16 * GAAC_LANES);
    const uint8_t* fetch = slots + begin * capacity + 16 * lane;
    unsigned long long fetched = begin;
    auto issue = [&](int stage) {
        if (fetched < end) {
            const uint32_t dst = ring_at + cap * stage + 16 * lane;
#pragma unroll
            for (int k = 0; k < MAX_COPIES; ++k) {
                if (16 * (lane + GAAC_LANES * k) < cap) gaac_cp_async16(dst + 16 * GAAC_LANES * k, fetch + 16 * GAAC_LANES * k);
            }
        }
        gaac_cp_async_commit();
        ++fetched;
        fetch += capacity;
    };
#pragma unroll
    for (int s = 0; s < GAAC_RESTORE_STAGES - 1; ++s) issue(s);

    // The block's place in its copy, within its head, and its (layer, kind, head),
    // advanced by counting: no 64-bit division per block.
    const uint32_t per_copy = (uint32_t)blocks_per_copy, per_head = (uint32_t)blocks_per_head;
    uint32_t local = (uint32_t)(begin % blocks_per_copy);
    uint32_t in_head = local % per_head, head_index = local / per_head;
    uint32_t loaded = 0xffffffffu;  // the head whose bases the warp holds
    bool is_v = false;
    uint32_t base_words[G::TILES];
    uint32_t status_next = begin < end ? statuses[local] : 0u;
    uint32_t sum = 0;
    int stage = 0;
    for (unsigned long long i = begin; i < end; ++i) {
        const uint32_t status = status_next;
        uint32_t next_local = local + 1, next_in_head = in_head + 1, next_head = head_index;
        if (next_in_head == per_head) next_in_head = 0, ++next_head;
        if (next_local == per_copy) next_local = 0, next_in_head = 0, next_head = 0;
        // Read a whole block ahead: its latency is hidden behind this block.
        if (i + 1 < end) status_next = statuses[next_local];
        if (head_index != loaded) {
            // Once per (layer, kind, head): the fused kernel's CTA owns one head.
            __syncwarp();  // no lane still reads the previous head's bases
            const uint32_t* hb = reinterpret_cast<const uint32_t*>(bases + (size_t)head_index * D);
            for (int k = lane; k < D / 4; k += GAAC_LANES) {
                const uint32_t b = hb[k];
                reinterpret_cast<uint32_t*>(base)[k] = b;
                // w = min(max(b, 4) - 4, 240) per byte (spec §2.2).
                reinterpret_cast<uint32_t*>(wstart)[k] = __vminu4(
                    __vsub4(__vmaxu4(b, GAAC_WINDOW_BELOW_BASE * 0x01010101u), GAAC_WINDOW_BELOW_BASE * 0x01010101u),
                    GAAC_MAX_WINDOW_START * 0x01010101u);
            }
            __syncwarp();
            is_v = (head_index / (uint32_t)kv_heads) & 1u;
#pragma unroll
            for (int t = 0; t < G::TILES; ++t) {
                if (is_v) {
                    // V: channel 8t + l / 4 for all four values (spec §3.1).
                    base_words[t] = 0x01010101u * base[8 * t + (lane >> 2)];
                } else {
                    // K: channels 16 (t mod D/16) + 2 (l mod 4) + {0, 1, 8, 9}.
                    const uint16_t* b16 = reinterpret_cast<const uint16_t*>(
                        base + 16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3));
                    base_words[t] = b16[0] | ((uint32_t)b16[4] << 16);
                }
            }
            loaded = head_index;
        }
        gaac_cp_async_wait<GAAC_RESTORE_STAGES - 2>();
        __syncwarp();  // block i is in shared memory for every lane; block i - 1 is done
        issue(stage == 0 ? GAAC_RESTORE_STAGES - 1 : stage - 1);  // block i + STAGES - 1
        if (status == GAAC_STATUS_RAW) {
            const uint32_t* words =
                reinterpret_cast<const uint32_t*>(overflow + raw_index[local] * 2ull * G::N);
            for (int k = lane; k < G::N / 2; k += GAAC_LANES) sum += words[k];
        } else {
            const uint8_t* blk = ring + cap * stage;
            sum += is_v ? gaac_restore_staged<true, D>(blk, image, wstart, base_words, lane)
                        : gaac_restore_staged<false, D>(blk, image, wstart, base_words, lane);
        }
        __syncwarp();  // every lane is done with the image and the stage
        stage = stage == GAAC_RESTORE_STAGES - 1 ? 0 : stage + 1;
        local = next_local, in_head = next_in_head, head_index = next_head;
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
#define GAAC_RESTORE_ENTRY(D)                                                                                       \
    extern "C" __global__ void __launch_bounds__(GAAC_RESTORE_WARPS * 32)                                           \
        gaac_restore_sum_d##D(const uint8_t* slots, unsigned long long capacity, unsigned long long blocks,        \
                              unsigned long long blocks_per_copy, int blocks_per_head, int kv_heads,               \
                              const uint8_t* statuses, const int64_t* raw_index, const uint8_t* overflow,          \
                              const uint8_t* bases, uint32_t* checksum) {                                          \
        gaac_restore_range<D>(slots, capacity, blocks, blocks_per_copy, blocks_per_head, kv_heads, statuses,       \
                              raw_index, overflow, bases, checksum);                                               \
    }

GAAC_RESTORE_ENTRY(64)
GAAC_RESTORE_ENTRY(128)
