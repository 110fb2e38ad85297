// GAAC restore helpers shared by the restore microbenchmark (gaac_restore.cu) and the
// decoder (gaac.cu): the block geometry, cp.async, and the restore of one coded block
// staged in shared memory (docs/formats/gaac.md §3; the design is in
// docs/perf/gaac-gpu.md, "Version 2").
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/bf16_field.cuh"
#include "gaac/gaac_format.gen.cuh"

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

// One step of an inclusive warp scan: `x` plus lane (l - o)'s `x` where that lane exists.
// The shuffle's own "source lane valid" predicate guards the add: one predicated add per
// step instead of a compare-and-select on the lane index and an add.
__device__ __forceinline__ uint32_t gaac_scan_step(uint32_t x, int o) {
    asm("{\n\t.reg .u32 t;\n\t.reg .pred p;\n\t"
        "shfl.sync.up.b32 t|p, %0, %1, 0, 0xffffffff;\n\t"
        "@p add.u32 %0, %0, t;\n\t}"
        : "+r"(x)
        : "r"(o));
    return x;
}

// 2^(32 - s) for s = 1..7 (entry 0 unused): the multipliers of gaac_shr_add. In constant
// memory, not immediates: ptxas turns a high multiply by an immediate power of two back
// into a shift on the ALU pipe, but takes these as uniform-register operands.
static __constant__ uint32_t gaac_shr_multipliers[8] = {0u,          0x80000000u, 0x40000000u, 0x20000000u,
                                                        0x10000000u, 0x08000000u, 0x04000000u, 0x02000000u};

// (x >> s) + y as the high word of x * 2^(32 - s) plus y: one IMAD.HI on the FMA pipe
// instead of a shift (or LEA.HI) on the ALU pipe, the block restore's busiest pipe
// (docs/perf/gaac-gpu.md, "Restore version 3"). Exact for every x, y (mod 2^32); `s` in
// 0..7 is a constant wherever this is inlined into unrolled code.
__device__ __forceinline__ uint32_t gaac_shr_add(uint32_t x, int s, uint32_t y) {
    if (s == 0) return x + y;
    uint32_t r;
    asm("mad.hi.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(gaac_shr_multipliers[s]), "r"(y));
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

// gaac_join_quad with both shifts on the FMA pipe (e4 >> 1 as a high multiply, e4 << 7 as
// a multiply): the same words. For the block restore (gaac_restore_staged), bound by
// instruction issue with its ALU pipe the busiest; the fused attention keeps
// gaac_join_quad, with which it was measured faster (docs/perf/gaac-gpu.md, "Version 3
// measured").
__device__ __forceinline__ uint2 gaac_join_quad_fma(uint32_t e4, uint32_t sf4) {
    const uint32_t hi = gaac_select_lop3(gaac_shr_add(e4, 1, 0u), sf4, 0x80808080u);
    const uint32_t lo = gaac_select_lop3(e4 * 128u, sf4, 0x7f7f7f7fu);
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
// `m` is a constant wherever this is inlined into an unrolled loop.
__device__ __forceinline__ uint32_t gaac_tile_field(int m, uint32_t w0, uint32_t w1s, uint32_t w2s, uint32_t w0r,
                                                    uint32_t w1r, uint32_t w2) {
    if (m <= 5) {
        const uint32_t x = gaac_select(gaac_select(w0, w1s, 0x01010101u << (m + 1)), w2s, 0x01010101u << (m + 2));
        return (x >> m) & 0x07070707u;
    } else {
        const uint32_t x = gaac_select(gaac_select(w0r, w1r, 0x01010101u << (m - 1)), w2, 0x01010101u << m);
        return (x >> (m - 2)) & 0x07070707u;
    }
}

// Bits p of every byte whose plane is `i` in the pre-rotation `j` (p - j = i mod 3).
__host__ __device__ constexpr uint32_t gaac_rotation_mask(int j, int i) {
    uint32_t m = 0;
    for (int p = 0; p < 8; ++p) {
        if (((p - j) % 3 + 3) % 3 == i) m |= 0x01010101u << p;
    }
    return m;
}

// The three plane words of a slab (spec §3.2), pre-rotated once per slab so that tile m's
// three field bits lie side by side in one word (one mask per tile instead of three):
// `y[j]` holds at bit p of each byte plane (p - j) mod 3's bit p - ((p - j) mod 3), from
// the left-shifted words (tiles m <= 5 use y[m mod 3], bits m .. m + 2); `z[j]` the same
// from w0 >> 2, w1 >> 1, w2 (tiles 6, 7 use z[(m - 2) mod 3], bits m - 2 .. m).
struct GaacSlabWords {
    uint32_t y[3], z[3];
};

__device__ __forceinline__ GaacSlabWords gaac_slab_words(uint32_t w0, uint32_t w1, uint32_t w2) {
    GaacSlabWords r;
    const uint32_t w1s = w1 << 1, w2s = w2 << 2, w0r = w0 >> 2, w1r = w1 >> 1;
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        r.y[j] = gaac_select_lop3(gaac_select_lop3(w0, w1s, gaac_rotation_mask(j, 1)), w2s, gaac_rotation_mask(j, 2));
        r.z[j] = gaac_select_lop3(gaac_select_lop3(w0r, w1r, gaac_rotation_mask(j, 1)), w2, gaac_rotation_mask(j, 2));
    }
    return r;
}

// Tile m's (0..7) four exponents of this lane: byte r = field (bits m of the three plane
// words' byte r, spec §3.2) + byte r of `addend`. One mask, then the shift and the add as
// one high multiply-add on the FMA pipe. A valid base keeps every byte of field + addend
// within 255 (spec §3.3): no carry between byte lanes. `m` is a constant wherever this is
// inlined into unrolled code; the pre-rotations no tile reads are then dead code.
__device__ __forceinline__ uint32_t gaac_tile_exponents(const GaacSlabWords& w, int m, uint32_t addend) {
    if (m <= 5) return gaac_shr_add(w.y[m % 3] & (0x07070707u << m), m, addend);
    return gaac_shr_add(w.z[(m - 2) % 3] & (0x07070707u << (m - 2)), m - 2, addend);
}

// The tags of the groups lane `lane` owns (D/16 groups, half a token: spec 3.3), one
// 2-bit field per group in group order.
template <int D>
__device__ __forceinline__ uint32_t gaac_lane_tags(const uint8_t* blk, int lane) {
    if constexpr (D == 64) return blk[lane];
    else if constexpr (D == 128) return reinterpret_cast<const uint16_t*>(blk)[lane];
    else return reinterpret_cast<const uint32_t*>(blk)[lane];
}

// The window starts of four bases, one per byte: w = min(max(b, 4) - 4, 240) (spec 2.2).
__device__ __forceinline__ uint32_t gaac_window_starts(uint32_t b) {
    return __vminu4(__vsub4(__vmaxu4(b, GAAC_WINDOW_BELOW_BASE * 0x01010101u), GAAC_WINDOW_BELOW_BASE * 0x01010101u),
                    GAAC_MAX_WINDOW_START * 0x01010101u);
}

// Loads one head's D bases (`hb`, global memory) into `base` and their window starts into
// `wstart` (shared memory, D bytes each), and the lane's addend word of each tile for a
// block of 3-bit groups into `base_words` (spec 3.3). Call with the whole warp.
template <int D>
__device__ __forceinline__ void gaac_load_head(const uint8_t* hb, uint8_t* base, uint8_t* wstart, bool is_v,
                                               uint32_t (&base_words)[GaacGeometry<D>::TILES], int lane) {
    using G = GaacGeometry<D>;
    __syncwarp();  // no lane still reads the previous head's bases
    for (int k = lane; k < D / 4; k += GAAC_LANES) {
        const uint32_t b = reinterpret_cast<const uint32_t*>(hb)[k];
        reinterpret_cast<uint32_t*>(base)[k] = b;
        reinterpret_cast<uint32_t*>(wstart)[k] = gaac_window_starts(b);
    }
    __syncwarp();
#pragma unroll
    for (int t = 0; t < G::TILES; ++t) {
        if (is_v) {
            // V: channel 8t + l / 4 for all four values (spec 3.1).
            base_words[t] = 0x01010101u * base[8 * t + (lane >> 2)];
        } else {
            // K: channels 16 (t mod D/16) + 2 (l mod 4) + {0, 1, 8, 9}.
            const uint16_t* b16 = reinterpret_cast<const uint16_t*>(base + 16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3));
            base_words[t] = b16[0] | ((uint32_t)b16[4] << 16);
        }
    }
}

// Byte offset of tile t's word of lane l in a warp's addend image. WIDE = false: [TILES][32]
// words (tile-major, one 4-byte word per lane and tile). WIDE = true: [TILES / 4][32] groups
// of four words (a lane's words of tiles 4q .. 4q + 3 side by side), so that a lane stores
// and loads four tiles' addends with one 16-byte shared-memory instruction, and the 32
// lanes of one such instruction read 512 contiguous bytes (no bank conflict).
template <bool WIDE>
__host__ __device__ constexpr int gaac_image_at(int t, int l) {
    return WIDE ? 16 * (GAAC_LANES * (t >> 2) + l) + 4 * (t & 3) : 4 * (GAAC_LANES * t + l);
}

// Patches the addend image of one coded block staged in shared memory (`blk`) for its
// 4-bit and raw groups (spec §3.3-3.5): the image ([TILES][32] words, fragment order, or
// the four-tile groups of gaac_image_at<true> with WIDE) must hold every lane's 3-bit
// addend words when the warp calls this; `wstart` is the
// head's window starts (D bytes, spec §2.2). Returns the block's length `P + n4 + 5 nr`
// from its tags (spec §3), for the caller's check against the slot; a tag 3 patches
// nothing, and a block longer than `limit` bytes patches nothing (its 4th bits and raw
// highs would lie past the slot: the caller flags it). No pointer here is __restrict__: other lanes write the image between this
// lane's stores and loads, and a restrict-qualified image lets the compiler forward this
// lane's own stores past the __syncwarp. Call with the whole warp. PREDICATED_SCAN: the
// scan's adds guarded by the shuffle's own predicate (gaac_scan_step, fewer instructions,
// the block restore's choice) or by a lane compare and a select (as the fused attention was
// measured faster with; docs/perf/gaac-gpu.md, "Version 3 measured").
template <bool IS_V, int D, bool PREDICATED_SCAN = false, bool WIDE = false>
__device__ __forceinline__ uint32_t gaac_patch_image(const uint8_t* blk, uint32_t* image, const uint8_t* wstart,
                                                     uint32_t limit, int lane) {
    using G = GaacGeometry<D>;
    // This lane's tags (spec §2.2: group g at bits 2 (g mod 4) of byte g / 4).
    const uint32_t tags = gaac_lane_tags<D>(blk, lane);
    const uint32_t four = tags & ~(tags >> 1) & 0x55555555u, raw = (tags >> 1) & ~tags & 0x55555555u;
    // Inclusive scan of (4-bit count, raw count << 16) over the lanes in group order.
    const uint32_t counts = __popc(four) | (__popc(raw) << 16);
    uint32_t scan = counts;
#pragma unroll
    for (int o = 1; o < GAAC_LANES; o <<= 1) {
        if constexpr (PREDICATED_SCAN) {
            scan = gaac_scan_step(scan, o);
        } else {
            const uint32_t v = __shfl_up_sync(0xffffffffu, scan, o);
            if (lane >= o) scan += v;
        }
    }
    const uint32_t before = scan - counts;
    // Raw highs start after every 4th-bit byte (spec §3.5).
    const uint32_t total = __shfl_sync(0xffffffffu, scan, GAAC_LANES - 1);
    const uint32_t raw_at = G::PLANES_LEN + (total & 0xffffu);
    const uint32_t four_at = G::PLANES_LEN + (before & 0xffffu);
    const uint32_t raw_first = before >> 16;
    const uint32_t len = raw_at + GAAC_RAW_BYTES_PER_GROUP * (total >> 16);
    const int token = lane >> 1;
    __syncwarp();  // every base word is in the image before any lane patches it
    uint32_t pending = len <= limit ? four | raw : 0u;
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
            constexpr int LANE = gaac_image_at<WIDE>(0, 1);  // bytes from one lane's word to the next's
            // WIDE (D / 16 tiles per token row, a multiple of 4): tile group nt (D/64) + j / 8,
            // word (j / 2) mod 4, half j mod 2, i.e. 2 (j mod 8) bytes into the lane's group.
            // Written as a lane-constant part plus the group's part, g = bit / 2 (j = LANE_GROUPS
            // (l mod 2) + g; LANE_GROUPS = D / 16 is 4 or a multiple of 8).
            const int g = bit >> 1;
            uint8_t* p;
            if constexpr (!WIDE) {
                p = img + 4 * (GAAC_LANES * ((token >> 3) * G::CHANNEL_TILES + (j >> 1)) + 4 * (token & 7)) + 2 * (j & 1);
            } else if constexpr (G::LANE_GROUPS == 4) {
                p = img + 16 * (GAAC_LANES * (token >> 3) * (G::CHANNEL_TILES / 4) + 4 * (token & 7)) +
                    8 * (lane & 1) + 2 * g;
            } else {
                p = img + 16 * (GAAC_LANES * ((token >> 3) * (G::CHANNEL_TILES / 4) + G::LANE_GROUPS / 8 * (lane & 1)) +
                                4 * (token & 7)) +
                    16 * GAAC_LANES * (g >> 3) + 2 * (g & 7);
            }
            *reinterpret_cast<uint16_t*>(p) = (uint16_t)lo;
            *reinterpret_cast<uint16_t*>(p + LANE) = (uint16_t)(lo >> 16);
            *reinterpret_cast<uint16_t*>(p + 2 * LANE) = (uint16_t)hi;
            *reinterpret_cast<uint16_t*>(p + 3 * LANE) = (uint16_t)(hi >> 16);
        } else {
            // Channel 8j + i, token q is lane 4i + (q mod 8) / 2, half (q mod 2) + 2 (q / 8)
            // of tile j: one byte in each of eight lanes.
            constexpr int LANE = gaac_image_at<WIDE>(0, 1);
            // WIDE: as the K side, a lane-constant part and the group's (LANE_GROUPS a multiple of 4).
            uint8_t* p;
            if constexpr (!WIDE) {
                p = img + 4 * (GAAC_LANES * j + ((token & 7) >> 1)) + (token & 1) + 2 * (token >> 3);
            } else {
                p = img + gaac_image_at<WIDE>(G::LANE_GROUPS * (lane & 1), (token & 7) >> 1) + (token & 1) +
                    2 * (token >> 3) + 16 * GAAC_LANES * ((bit >> 1) >> 2) + 4 * ((bit >> 1) & 3);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                p[4 * LANE * i] = (uint8_t)(lo >> (8 * i));
                p[4 * LANE * (i + 4)] = (uint8_t)(hi >> (8 * i));
            }
        }
    }
    __syncwarp();  // every patch is in the image
    return len;
}

// Restores one coded block staged in shared memory (its tags checked: no tag 3, and the
// length they give within the slot) and hands each restored quad to `sink(t, words)`:
// tile t's four values of this lane (fragment order, spec 3.1) as two u32, value 0 in
// the low half of .x. `image` is the warp's addend image ([TILES][32] words), `wstart` the
// head's window starts (D bytes, spec §2.2), `base_words[t]` the lane's addend word of
// tile t for 3-bit groups (gaac_patch_image adds the other groups'). The fields come from
// the slab's pre-rotated plane words (gaac_slab_words) and the shifts run on the FMA pipe
// (gaac_shr_add, gaac_join_quad_fma): fewer ALU instructions per tile than
// gaac_restore_tile's, for a loop whose ALU pipe was the busiest. WIDE: the image laid out
// by gaac_image_at<true>, written and read with 16-byte accesses (the restore benchmark's
// choice, docs/perf/gaac-gpu.md "Restore version 4"; the decoder measured the same with
// either layout and keeps the default).
template <bool IS_V, int D, bool WIDE = false, class Sink>
__device__ __forceinline__ void gaac_restore_staged(const uint8_t* blk, uint32_t* image, const uint8_t* wstart,
                                                    const uint32_t (&base_words)[GaacGeometry<D>::TILES], int lane,
                                                    Sink&& sink) {
    using G = GaacGeometry<D>;
    // WIDE also needs `image` 16-byte aligned (its 16-byte accesses).
    static_assert(!WIDE || G::TILES % 4 == 0, "the wide image holds whole groups of four tiles");
    uint32_t addends[G::TILES];
    if constexpr (WIDE) {
        // The image in groups of four tiles per lane (gaac_image_at<true>): one 16-byte
        // store and one 16-byte load per lane for four tiles' addends.
        uint4* image4 = reinterpret_cast<uint4*>(image) + lane;
#pragma unroll
        for (int q = 0; q < G::TILES / 4; ++q) {
            image4[GAAC_LANES * q] =
                make_uint4(base_words[4 * q], base_words[4 * q + 1], base_words[4 * q + 2], base_words[4 * q + 3]);
        }
        gaac_patch_image<IS_V, D, true, true>(blk, image, wstart, G::PLANES_LEN + 10 * D, lane);
#pragma unroll
        for (int q = 0; q < G::TILES / 4; ++q) {
            const uint4 a = image4[GAAC_LANES * q];
            addends[4 * q] = a.x, addends[4 * q + 1] = a.y, addends[4 * q + 2] = a.z, addends[4 * q + 3] = a.w;
        }
    } else {
#pragma unroll
        for (int t = 0; t < G::TILES; ++t) image[GAAC_LANES * t + lane] = base_words[t];
        gaac_patch_image<IS_V, D, true>(blk, image, wstart, G::PLANES_LEN + 10 * D, lane);
    }
#pragma unroll
    for (int s = 0; s < G::SLABS; ++s) {
        const uint32_t* plane = reinterpret_cast<const uint32_t*>(blk + G::PLANE3_AT + GAAC_SLAB_BYTES * s) + lane;
        const GaacSlabWords w = gaac_slab_words(plane[0], plane[GAAC_LANES], plane[2 * GAAC_LANES]);
        const uint32_t* sm = reinterpret_cast<const uint32_t*>(blk + G::SM_AT) + GAAC_LANES * GAAC_SLAB_TILES * s + lane;
        const uint32_t* add = image + GAAC_LANES * GAAC_SLAB_TILES * s + lane;
#pragma unroll
        for (int m = 0; m < GAAC_SLAB_TILES; ++m) {
            const uint32_t a = WIDE ? addends[GAAC_SLAB_TILES * s + m] : add[GAAC_LANES * m];
            sink(GAAC_SLAB_TILES * s + m, gaac_join_quad_fma(gaac_tile_exponents(w, m, a), sm[GAAC_LANES * m]));
        }
    }
}

// Restores tile `t` of a coded block staged in shared memory whose addend image is
// patched (gaac_patch_image): this lane's four values in fragment order (spec §3.1) as two
// u32, value 0 in the low half of .x, as gaac_restore_staged's sink gets them. `t` is a
// constant wherever this is inlined into an unrolled loop, and the plane words of a slab
// are then loaded once for its tiles.
template <int D>
__device__ __forceinline__ uint2 gaac_restore_tile(const uint8_t* blk, const uint32_t* image, int t, int lane) {
    using G = GaacGeometry<D>;
    const int s = t / GAAC_SLAB_TILES, m = t % GAAC_SLAB_TILES;
    const uint32_t* plane = reinterpret_cast<const uint32_t*>(blk + G::PLANE3_AT + GAAC_SLAB_BYTES * s) + lane;
    const uint32_t w0 = plane[0], w1 = plane[GAAC_LANES], w2 = plane[2 * GAAC_LANES];
    const uint32_t field = gaac_tile_field(m, w0, w1 << 1, w2 << 2, w0 >> 2, w1 >> 1, w2);
    const uint32_t sm = reinterpret_cast<const uint32_t*>(blk + G::SM_AT)[GAAC_LANES * t + lane];
    return gaac_join_quad(field + image[GAAC_LANES * t + lane], sm);
}
