// GAAC encoder and decoder kernels (docs/formats/gaac.md; Rust side crates/gaac/src/gpu/),
// byte-identical to the CPU reference (crates/gaac) both ways.
//
// Encode (a container, spec 5): gaac_encode_d<D> codes every 16-token block into its slot
// (one warp per block, each warp a contiguous range of blocks), writes its status byte,
// and counts the raw blocks of its range; gaac_encode_header scans those counts (the raw
// blocks' places in the overflow section), writes the header with R, version 1's
// checksum and the CRC-32C, and the container's length; gaac_encode_overflow copies the
// raw blocks, the tails and the bases; with version 2's checksum, gaac_body_sums sums the
// bytes after the header and gaac_encode_seal writes their Adler-32 and the CRC-32C
// again. Sealing (a paged pool) is gaac_encode_d<D> alone, with each raw
// block's BF16 words written beside its slot instead of counted.
//
// Decode: gaac_decode_d<D> checks every block (spec 7.2, and its status byte) and
// restores the coded ones (the restore of docs/perf/gaac-gpu.md, version 2: a cp.async
// ring of slots per warp, the addend image, the common path in registers); V blocks go
// through a shared-memory tile into [16, D] rows, K blocks straight from registers; each
// warp takes runs of 4 blocks from a work counter (GaacBlockQueue, decoder versions 4
// and 6). gaac_decode_finish
// copies the raw blocks and the tails and checks the bases, the paddings and the raw count
// (spec 7.1 rows 13-17); gaac_body_sums sums a version 2 container's bytes for its
// checksum (row 19). A problem leaves a GAAC_DECODE_* code in the status word; the
// host then reruns the CPU decoder for the exact error.
//
// Block addresses are advanced by counting (a division only where a run of blocks
// starts); loads and stores of values are 16 bytes wide.

#include <stddef.h>
#include <stdint.h>

#include "common/adler.cuh"
#include "common/crc32c.cuh"
#include "gaac/restore.cuh"

// Where a run of blocks lies (GaacLayout in crates/gaac/src/gpu/mod.rs, field for field).
// Block i is block i % per_head of head (i / per_head) % heads of tensor (i / per_head) /
// heads; its token row r (0..16) starts at word tensor * tensor_values + (16 (i %
// per_head) + r) row_values + head D of the values.
struct GaacLayout {
    unsigned long long tensor_values;  // words from one tensor (layer, kind) to the next
    unsigned long long tail_values;    // words of a tensor's BF16 tail: (T mod 16) H D
    unsigned long long statuses;       // container offsets of the sections (spec 5.2)
    unsigned long long slots;
    unsigned long long overflow;
    unsigned long long tails;          // decode only: the encoder's depend on R
    unsigned long long bases_len;      // 2 L H D
    unsigned blocks;                   // B
    unsigned per_head;                 // blocks per (tensor, head): floor(T / 16)
    unsigned heads;                    // H
    unsigned row_values;               // H D
    unsigned capacity;                 // C, a multiple of 16
    unsigned tensors;                  // 2 L
    unsigned raw_blocks;               // decode: the header's R
    unsigned pad;
};

// The 64 header bytes as the encoder's header kernel takes them.
struct GaacHeader {
    uint4 bytes[4];
};

#define GAAC_WARP_MASK 0xffffffffu

// Words per row of a warp's [16, D] shared-memory tile: D and 8 of padding, so that the
// fragment-order gathers and scatters of spec 3.1 fall on distinct banks.
template <int D>
struct GaacTile {
    static constexpr int ROW = D + GAAC_TILE_PAD;
    static constexpr int BYTES = 2 * GAAC_BLOCK_TOKENS * ROW;
    static constexpr int GROUPS_PER_ROW = D / GAAC_GROUP_CHANNELS;
};

// Shared memory of one encoder warp: the tile of codes and the slot being built (C bytes).
static inline __host__ __device__ size_t gaac_encode_warp_bytes(int head_dim, size_t capacity) {
    return 2 * (size_t)GAAC_BLOCK_TOKENS * (head_dim + GAAC_TILE_PAD) + capacity;
}

// Shared memory of one decoder warp: the addend image, the bases and window starts, the
// slot ring, the tile.
static inline __host__ __device__ size_t gaac_decode_warp_bytes(int head_dim, size_t capacity) {
    return (size_t)GAAC_BLOCK_TOKENS * head_dim + 2 * (size_t)head_dim + GAAC_DECODE_STAGES * capacity +
           2 * (size_t)GAAC_BLOCK_TOKENS * (head_dim + GAAC_TILE_PAD);
}

// This warp's contiguous range [begin, end) of `blocks` blocks: the same split in every
// kernel launched with the same grid.
__device__ __forceinline__ void gaac_warp_range(unsigned blocks, unsigned& me, unsigned& begin, unsigned& end) {
    const unsigned warps = gridDim.x * (blockDim.x / GAAC_LANES);
    me = blockIdx.x * (blockDim.x / GAAC_LANES) + (threadIdx.x / GAAC_LANES);
    begin = (unsigned)((unsigned long long)blocks * me / warps);
    end = (unsigned)((unsigned long long)blocks * (me + 1) / warps);
}

// A block's place, advanced block by block: divisions only when a head starts.
struct GaacCursor {
    unsigned head_index, in_head, tensor, head;
    __device__ void start(const GaacLayout& g, unsigned i) {
        head_index = i / g.per_head;
        in_head = i - head_index * g.per_head;
        place(g);
    }
    __device__ void place(const GaacLayout& g) {
        tensor = head_index / g.heads;
        head = head_index - tensor * g.heads;
    }
    // Returns whether the next block starts another head.
    __device__ bool next(const GaacLayout& g) {
        if (++in_head < g.per_head) return false;
        in_head = 0;
        ++head_index;
        place(g);
        return true;
    }
    // The block's first value word.
    __device__ unsigned long long first_word(const GaacLayout& g, int head_dim) const {
        return tensor * g.tensor_values + (unsigned long long)GAAC_BLOCK_TOKENS * in_head * g.row_values +
               (unsigned long long)head * head_dim;
    }
};

__device__ __forceinline__ uint4 gaac_load_nc(const uint16_t* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// The exponents of four BF16 words held as two u32 (x = words 0, 1; y = words 2, 3), one
// per byte.
__device__ __forceinline__ uint32_t gaac_exponents(uint32_t x, uint32_t y) {
    return __byte_perm((x >> 7) & 0x00ff00ffu, (y >> 7) & 0x00ff00ffu, 0x6420);
}

// ---------------------------------------------------------------------------------------
// Encode.
// ---------------------------------------------------------------------------------------

// Codes the blocks of this warp's range into their slots (spec 3, 4). A block that does
// not fit gets status 1 and an all-zero slot, and its words go to raw_out (when non-null,
// at 2 N bytes per block index) and its count to warp_raw[warp] (when non-null).
//
// Two passes per block (docs/perf/gaac-gpu.md, "Encoder version 2"): in group order, each
// lane checks its groups' tags on the exponents in 16-bit halves (E + 256 - b stays in its
// half) and writes each value's code, its sign+mantissa byte and its 3-bit field
// (spec 3.3) above it, into the tile; then in fragment order, each lane gathers its codes
// and splits them into the two planes with byte permutes. The lane's channels are the
// same for all its groups (group 32 j + lane has column lane mod D/8), so their bases are
// registers. At D = 64 the next block's loads are issued before the second pass.
template <int D>
__device__ void gaac_encode_range(const uint16_t* __restrict__ words, const GaacLayout& g,
                                  const uint8_t* __restrict__ bases, uint8_t* __restrict__ slots,
                                  uint8_t* __restrict__ statuses, uint8_t* __restrict__ raw_out,
                                  unsigned* __restrict__ warp_raw) {
    using G = GaacGeometry<D>;
    using T = GaacTile<D>;
    constexpr int J = G::GROUPS / GAAC_LANES;  // groups a lane loads per block: D / 16
    constexpr uint32_t BIAS = 0x01000100u;     // 256 in each half
    // Whether the next block's words are loaded during this one's second pass: at D = 64
    // (16 registers); wider blocks would fit fewer warps per multiprocessor.
    constexpr bool PREFETCH = J <= 4;
    extern __shared__ __align__(16) uint8_t gaac_smem[];
    const int lane = threadIdx.x & 31;
    const unsigned cap = g.capacity;
    uint8_t* own = gaac_smem + gaac_encode_warp_bytes(D, cap) * (threadIdx.x / GAAC_LANES);
    uint16_t* tile = reinterpret_cast<uint16_t*>(own);
    uint8_t* stage = own + T::BYTES;
    const uint32_t below = (1u << lane) - 1u;
    const int col = lane % T::GROUPS_PER_ROW;  // the column of every group of the lane
    unsigned me, begin, end;
    gaac_warp_range(g.blocks, me, begin, end);
    unsigned raw_count = 0;
    GaacCursor cur;
    uint4 v[J];
    auto load = [&]() {
        const uint16_t* src = words + cur.first_word(g, D);
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int grp = GAAC_LANES * j + lane;
            v[j] = gaac_load_nc(src + (size_t)(grp / T::GROUPS_PER_ROW) * g.row_values + GAAC_GROUP_CHANNELS * col);
        }
    };
    if (begin < end) {
        cur.start(g, begin);
        if (PREFETCH) load();
    }
    bool load_head = true;
    uint32_t bh[4], wh[4];  // the bases and window starts of channels 8 col + 2k, 2k + 1, in halves
    for (unsigned i = begin; i < end; ++i) {
        if (load_head) {
            const uint2 b8 = __ldg(reinterpret_cast<const uint2*>(bases + (size_t)cur.head_index * D + GAAC_GROUP_CHANNELS * col));
            const uint2 w8 = make_uint2(gaac_window_starts(b8.x), gaac_window_starts(b8.y));
            bh[0] = __byte_perm(b8.x, 0, 0x4140), bh[1] = __byte_perm(b8.x, 0, 0x4342);
            bh[2] = __byte_perm(b8.y, 0, 0x4140), bh[3] = __byte_perm(b8.y, 0, 0x4342);
            wh[0] = __byte_perm(w8.x, 0, 0x4140), wh[1] = __byte_perm(w8.x, 0, 0x4342);
            wh[2] = __byte_perm(w8.y, 0, 0x4140), wh[3] = __byte_perm(w8.y, 0, 0x4342);
        }
        if (!PREFETCH) load();
        // The 4th-bit and raw sections start zero; so does the padding after them.
        for (unsigned k = G::PLANES_LEN / 4 + lane; k < cap / 4; k += GAAC_LANES) reinterpret_cast<uint32_t*>(stage)[k] = 0;
        __syncwarp();
        // Tags (spec 2.2) of the lane's groups 32 j + lane, their 4th-bit bytes (spec 3.4),
        // and the groups' codes into the tile.
        uint32_t tagbits = 0;
        unsigned n4 = 0, nr = 0;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int grp = GAAC_LANES * j + lane;
            const uint32_t x[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
            // d3 = E + 256 - b and d4 = E + 256 - w per half: E - b in 0..=7 exactly when
            // d3 is 256..=263, E - w in 0..=15 when d4 is 256..=271; the low 3 bits are the
            // field (E - b or E - w mod 8).
            uint32_t eh[4], d3[4], d4[4], bad3 = 0, bad4 = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                eh[k] = (x[k] >> 7) & 0x00ff00ffu;
                d3[k] = eh[k] + BIAS - bh[k];
                d4[k] = eh[k] + BIAS - wh[k];
                bad3 |= d3[k] ^ BIAS;
                bad4 |= d4[k] ^ BIAS;
            }
            const bool ok3 = (bad3 & 0xfff8fff8u) == 0, ok4 = (bad4 & 0xfff0fff0u) == 0;
            const uint32_t tag = ok3 ? 0u : ok4 ? GAAC_TAG_OFFSET4 : GAAC_TAG_RAW;
            tagbits |= tag << (2 * j);
            const uint32_t m4 = __ballot_sync(GAAC_WARP_MASK, tag == GAAC_TAG_OFFSET4);
            const uint32_t mr = __ballot_sync(GAAC_WARP_MASK, tag == GAAC_TAG_RAW);
            if (tag == GAAC_TAG_OFFSET4) {
                // Bit 3 of E - w of value i -> bit i.
                uint32_t u = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) u |= ((d4[k] >> 3) & 0x00010001u) << (2 * k);
                const unsigned at = G::PLANES_LEN + n4 + __popc(m4 & below);
                if (at < cap) stage[at] = (uint8_t)(u | (u >> 15));
            }
            n4 += __popc(m4);
            nr += __popc(mr);
            // Code of a value: its sign+mantissa byte, its field in bits 8..10.
            uint32_t code[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const uint32_t f = ok3 ? d3[k] : ok4 ? d4[k] : eh[k];
                code[k] = ((x[k] >> 8) & 0x00800080u) | (x[k] & 0x007f007fu) | ((f << 8) & 0x07000700u);
            }
            *reinterpret_cast<uint4*>(tile + (grp / T::GROUPS_PER_ROW) * T::ROW + GAAC_GROUP_CHANNELS * col) =
                make_uint4(code[0], code[1], code[2], code[3]);
        }
        const unsigned len = G::PLANES_LEN + n4 + GAAC_RAW_BYTES_PER_GROUP * nr;
        uint8_t* slot = slots + (unsigned long long)i * cap;
        const bool coded = len <= cap;
        if (!coded) {
            // Raw (spec 3.6): an all-zero slot; the words, in [16, D] order = group order.
            if (raw_out) {
#pragma unroll
                for (int j = 0; j < J; ++j)
                    reinterpret_cast<uint4*>(raw_out + (unsigned long long)i * 2 * G::N)[GAAC_LANES * j + lane] = v[j];
            }
            for (unsigned k = lane; k < cap / 16; k += GAAC_LANES) reinterpret_cast<uint4*>(slot)[k] = make_uint4(0, 0, 0, 0);
            if (lane == 0) statuses[i] = GAAC_STATUS_RAW;
            ++raw_count;
        } else if (nr) {
            // Raw highs after every 4th-bit byte, in group order (spec 3.5): rare.
            unsigned before = 0;
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const bool raw = ((tagbits >> (2 * j)) & 3u) == GAAC_TAG_RAW;
                const uint32_t mr = __ballot_sync(GAAC_WARP_MASK, raw);
                if (raw) {
                    const uint32_t e_lo = gaac_exponents(v[j].x, v[j].y), e_hi = gaac_exponents(v[j].z, v[j].w);
                    unsigned long long high = 0;
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        high |= (unsigned long long)((e_lo >> (8 * q + 3)) & 0x1fu) << (5 * q);
                        high |= (unsigned long long)((e_hi >> (8 * q + 3)) & 0x1fu) << (5 * (q + 4));
                    }
                    const unsigned at = G::PLANES_LEN + n4 + GAAC_RAW_BYTES_PER_GROUP * (before + __popc(mr & below));
#pragma unroll
                    for (int q = 0; q < GAAC_RAW_BYTES_PER_GROUP; ++q) stage[at + q] = (uint8_t)(high >> (8 * q));
                }
                before += __popc(mr);
            }
        }
        // The next block's words are loaded while this one is written.
        const bool is_v = cur.tensor & 1u;
        load_head = cur.next(g);
        if (PREFETCH && i + 1 < end) load();
        if (coded) {
            // The tag plane: group 32 j + lane's tag at bits 2 (lane mod 4) of byte 8 j + lane / 4.
#pragma unroll
            for (int j = 0; j < J; ++j) {
                uint32_t t = ((tagbits >> (2 * j)) & 3u) << (2 * (lane & 3));
                t |= __shfl_xor_sync(GAAC_WARP_MASK, t, 1);
                t |= __shfl_xor_sync(GAAC_WARP_MASK, t, 2);
                if ((lane & 3) == 0) stage[8 * j + (lane >> 2)] = (uint8_t)t;
            }
            __syncwarp();  // the codes and the tags are in shared memory
            // The 3-bit plane (spec 3.2) and the sign+mantissa plane (spec 3.1): the lane's
            // four codes of each tile, gathered from the tile in fragment order.
#pragma unroll
            for (int s = 0; s < G::SLABS; ++s) {
                uint32_t planes[3] = {0, 0, 0};
#pragma unroll
                for (int m = 0; m < GAAC_SLAB_TILES; ++m) {
                    const int t = GAAC_SLAB_TILES * s + m;
                    uint32_t x, y;  // codes of values 0, 1 and 2, 3 of the lane's quad
                    if (!is_v) {
                        // K: token 8 (t / (D/16)) + l / 4, channels c, c + 1, c + 8, c + 9.
                        const int token = 8 * (t / G::CHANNEL_TILES) + (lane >> 2);
                        const int c = 16 * (t % G::CHANNEL_TILES) + 2 * (lane & 3);
                        x = *reinterpret_cast<const uint32_t*>(tile + token * T::ROW + c);
                        y = *reinterpret_cast<const uint32_t*>(tile + token * T::ROW + c + 8);
                    } else {
                        // V: channel 8 t + l / 4, tokens q, q + 1, q + 8, q + 9.
                        const uint16_t* ch = tile + 8 * t + (lane >> 2) + 2 * (lane & 3) * T::ROW;
                        x = __byte_perm(ch[0], ch[T::ROW], 0x5410);
                        y = __byte_perm(ch[8 * T::ROW], ch[9 * T::ROW], 0x5410);
                    }
                    const uint32_t f = __byte_perm(x, y, 0x7531);  // the fields, one per byte
#pragma unroll
                    for (int k = 0; k < 3; ++k)
                        planes[k] |= (m >= k ? f << (m - k) : f >> (k - m)) & (0x01010101u << m);
                    reinterpret_cast<uint32_t*>(stage + G::SM_AT)[GAAC_LANES * t + lane] = __byte_perm(x, y, 0x6420);
                }
#pragma unroll
                for (int k = 0; k < 3; ++k)
                    reinterpret_cast<uint32_t*>(stage + G::PLANE3_AT + GAAC_SLAB_BYTES * s)[GAAC_LANES * k + lane] =
                        planes[k];
            }
            __syncwarp();  // the slot is built
            for (unsigned k = lane; k < cap / 16; k += GAAC_LANES)
                reinterpret_cast<uint4*>(slot)[k] = reinterpret_cast<const uint4*>(stage)[k];
            if (lane == 0) statuses[i] = 0;
        }
        __syncwarp();  // every lane is done with the tile and the slot before the next block
    }
    if (warp_raw && lane == 0) warp_raw[me] = raw_count;
}

// At least 3 CTAs per multiprocessor at D = 64 (80 registers, no spills: the occupancy of
// version 1) and 2 at D = 128 (126 registers).
#define GAAC_ENCODE_ENTRY(D, MIN_CTAS)                                                                           \
    extern "C" __global__ void __launch_bounds__(GAAC_WARPS * 32, MIN_CTAS)                                     \
        gaac_encode_d##D(const uint16_t* words, GaacLayout g, const uint8_t* bases, uint8_t* slots,            \
                         uint8_t* statuses, uint8_t* raw_out, unsigned* warp_raw) {                            \
        gaac_encode_range<D>(words, g, bases, slots, statuses, raw_out, warp_raw);                              \
    }

GAAC_ENCODE_ENTRY(64, 3)
GAAC_ENCODE_ENTRY(128, 2)
GAAC_ENCODE_ENTRY(256, 1)

// One CTA of GAAC_SCAN_THREADS after gaac_encode_d<D>: the exclusive scan of the warps'
// raw counts (in place: each warp's first raw block's place in the overflow section), R,
// the header with R, version 1's checksum (from the values' `sums`, when non-null) and
// the CRC-32C, and info = {container length, R}. Version 2's checksum and CRC come
// later, from gaac_encode_seal.
extern "C" __global__ void __launch_bounds__(GAAC_SCAN_THREADS)
    gaac_encode_header(unsigned* __restrict__ warp_raw, unsigned warps, GaacHeader header,
                       const unsigned long long* __restrict__ sums, unsigned long long value_bytes, GaacLayout g,
                       unsigned head_dim, unsigned long long* __restrict__ info, uint8_t* __restrict__ out) {
    __shared__ unsigned totals[GAAC_SCAN_THREADS / 32];
    __shared__ unsigned carry;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (unsigned first = 0; first < warps; first += GAAC_SCAN_THREADS) {
        const unsigned idx = first + threadIdx.x;
        const unsigned v = idx < warps ? warp_raw[idx] : 0;
        unsigned scan = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned u = __shfl_up_sync(GAAC_WARP_MASK, scan, o);
            if ((int)lane >= o) scan += u;
        }
        if (lane == 31) totals[warp] = scan;
        __syncthreads();
        if (warp == 0) {
            const unsigned t = totals[lane];
            unsigned st = t;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned u = __shfl_up_sync(GAAC_WARP_MASK, st, o);
                if ((int)lane >= o) st += u;
            }
            totals[lane] = st - t;
        }
        __syncthreads();
        if (idx < warps) warp_raw[idx] = carry + totals[warp] + scan - v;
        __syncthreads();
        if (threadIdx.x == GAAC_SCAN_THREADS - 1) carry += totals[warp] + scan;
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    const unsigned raw = carry;
    const unsigned long long raw_len = 2ull * GAAC_BLOCK_TOKENS * head_dim;
    info[0] = g.overflow + raw * raw_len + 2ull * g.tensors * g.tail_values;
    info[1] = raw;
    __align__(16) uint8_t h[GAAC_HEADER_LEN];
    for (int i = 0; i < 4; ++i) reinterpret_cast<uint4*>(h)[i] = header.bytes[i];
    for (int i = 0; i < 4; ++i) h[GAAC_HEADER_RAW_BLOCKS + i] = (uint8_t)(raw >> (8 * i));
    if (sums) {
        const uint32_t c = kv_adler_from_sums(value_bytes, sums[0], sums[1]);
        for (int i = 0; i < 4; ++i) h[GAAC_HEADER_CHECKSUM + i] = (uint8_t)(c >> (8 * i));
    }
    const uint32_t crc = kv_crc32c_skip(h, GAAC_HEADER_LEN, GAAC_HEADER_CRC);
    for (int i = 0; i < 4; ++i) h[GAAC_HEADER_CRC + i] = (uint8_t)(crc >> (8 * i));
    for (int i = 0; i < 4; ++i) reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(h)[i];
}

// Copies one block's 16 rows of head_dim words between [16, D] bytes (`packed`) and the
// cache's rows at `rows` (row_values apart); a warp. to_packed: rows -> packed.
__device__ __forceinline__ void gaac_copy_block_rows(uint16_t* rows, unsigned row_values, uint8_t* packed,
                                                     unsigned head_dim, bool to_packed) {
    const unsigned per_row = head_dim / 8, units = GAAC_BLOCK_TOKENS * per_row;
    for (unsigned u = threadIdx.x & 31; u < units; u += GAAC_LANES) {
        const unsigned r = u / per_row, c = u - r * per_row;
        uint4* w = reinterpret_cast<uint4*>(rows + (size_t)r * row_values) + c;
        uint4* p = reinterpret_cast<uint4*>(packed) + u;
        if (to_packed) *p = *w;
        else *w = *p;
    }
}

// Copies each tensor's BF16 tail between the values and the container's tail section at
// `tails` (grid-stride, 16 bytes a thread). to_container: values -> container.
__device__ __forceinline__ void gaac_copy_tails(uint16_t* words, const GaacLayout& g, uint8_t* tails,
                                                bool to_container) {
    const unsigned long long units = g.tail_values / 8, total = units * g.tensors;
    const unsigned long long first = (unsigned long long)GAAC_BLOCK_TOKENS * g.per_head * g.row_values;
    for (unsigned long long u = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; u < total;
         u += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long tensor = u / units, k = u - tensor * units;
        uint4* w = reinterpret_cast<uint4*>(words + tensor * g.tensor_values + first) + k;
        uint4* c = reinterpret_cast<uint4*>(tails) + u;
        if (to_container) *c = *w;
        else *w = *c;
    }
}

// After gaac_encode_header, with gaac_encode_d<D>'s grid: each warp copies its range's raw
// blocks to the overflow section (at the scanned places); then the tails and the bases.
extern "C" __global__ void __launch_bounds__(GAAC_WARPS * 32)
    gaac_encode_overflow(const uint16_t* __restrict__ words, GaacLayout g, unsigned head_dim,
                         const uint8_t* __restrict__ bases, const unsigned* __restrict__ warp_raw,
                         const unsigned long long* __restrict__ info, uint8_t* __restrict__ out) {
    const unsigned lane = threadIdx.x & 31;
    const unsigned long long raw_len = 2ull * GAAC_BLOCK_TOKENS * head_dim;
    unsigned me, begin, end;
    gaac_warp_range(g.blocks, me, begin, end);
    unsigned rank = warp_raw[me];
    for (unsigned first = begin; first < end; first += GAAC_LANES) {
        const unsigned i = first + lane;
        unsigned mask = __ballot_sync(GAAC_WARP_MASK, i < end && out[g.statuses + i] == GAAC_STATUS_RAW);
        while (mask) {
            const unsigned b = first + __ffs(mask) - 1;
            mask &= mask - 1;
            GaacCursor cur;
            cur.start(g, b);
            gaac_copy_block_rows(const_cast<uint16_t*>(words) + cur.first_word(g, head_dim), g.row_values,
                                 out + g.overflow + rank * raw_len, head_dim, true);
            ++rank;
        }
    }
    gaac_copy_tails(const_cast<uint16_t*>(words), g, out + g.overflow + info[1] * raw_len, true);
    for (unsigned long long u = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; u < g.bases_len / 16;
         u += (unsigned long long)gridDim.x * blockDim.x)
        reinterpret_cast<uint4*>(out + GAAC_HEADER_LEN)[u] = reinterpret_cast<const uint4*>(bases)[u];
}

// The checksum of version 2 (spec 5.1): the Adler-32 sums of a container's bytes
// 64..*end (`end` a multiple of 16, on the device: the encoder's info[0], the decoder's
// length; never past `max_len`, the buffer's bytes, whatever the device wrote there),
// positions relative to byte 64, added to sums[0..2]; grid-stride, 16-byte loads, at most
// GAAC_WARPS warps per CTA. A thread tracks its position modulo 65521, so its weighted
// sum grows by less than 2^28 a load (any container that fits a device).
extern "C" __global__ void __launch_bounds__(GAAC_WARPS * 32)
    gaac_body_sums(const uint8_t* __restrict__ container, const unsigned long long* __restrict__ end,
                   unsigned long long max_len, unsigned long long* __restrict__ sums) {
    const unsigned long long units = min(*end, max_len) / 16, stride = (unsigned long long)gridDim.x * blockDim.x;
    const uint32_t m = (uint32_t)KV_ADLER_MOD, step = (uint32_t)(16 * stride % KV_ADLER_MOD);
    unsigned long long u = GAAC_HEADER_LEN / 16 + blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    uint32_t rel = (uint32_t)((16 * u - GAAC_HEADER_LEN) % KV_ADLER_MOD);
    unsigned long long s = 0, ws = 0;
    for (; u < units; u += stride) {
        uint32_t sum = 0, offs = 0;
        kv_adler_add16(reinterpret_cast<const uint4*>(container)[u], 0u, sum, offs);
        s += sum;
        ws += (unsigned long long)rel * sum + offs;
        rel += step;
        if (rel >= m) rel -= m;
    }
    kv_adler_warp_flush_mod(s, ws, 0ull, sums);
}

// After gaac_body_sums of a checksummed encode: the header's checksum, the Adler-32 of
// bytes 64..info[0] (spec 5.1), and its CRC-32C again. One thread.
extern "C" __global__ void gaac_encode_seal(const unsigned long long* __restrict__ sums,
                                            const unsigned long long* __restrict__ info, uint8_t* __restrict__ out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    __align__(16) uint8_t h[GAAC_HEADER_LEN];
    for (int i = 0; i < 4; ++i) reinterpret_cast<uint4*>(h)[i] = reinterpret_cast<const uint4*>(out)[i];
    const uint32_t c = kv_adler_from_sums(info[0] - GAAC_HEADER_LEN, sums[0], sums[1]);
    for (int i = 0; i < 4; ++i) h[GAAC_HEADER_CHECKSUM + i] = (uint8_t)(c >> (8 * i));
    const uint32_t crc = kv_crc32c_skip(h, GAAC_HEADER_LEN, GAAC_HEADER_CRC);
    for (int i = 0; i < 4; ++i) h[GAAC_HEADER_CRC + i] = (uint8_t)(crc >> (8 * i));
    for (int i = 0; i < 4; ++i) reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(h)[i];
}

// ---------------------------------------------------------------------------------------
// Decode.
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ void gaac_flag(unsigned* status, unsigned code) { atomicCAS(status, 0u, code); }

// Whether any byte of the staged slot `blk` at [from, cap) is nonzero (a warp; `from` and
// `cap` warp-uniform).
__device__ __forceinline__ bool gaac_nonzero_from(const uint8_t* blk, unsigned from, unsigned cap, int lane) {
    uint32_t any = 0;
    for (unsigned k = from / 4 + lane; k < cap / 4; k += GAAC_LANES) {
        uint32_t w = reinterpret_cast<const uint32_t*>(blk)[k];
        if (4 * k < from) w &= GAAC_WARP_MASK << (8 * (from - 4 * k));
        any |= w;
    }
    return __any_sync(GAAC_WARP_MASK, any != 0);
}

// The decoder's work queue (docs/perf/gaac-gpu.md, "Decoder version 4" to "version 8
// candidates"): each warp takes runs of GAAC_DECODE_CHUNK consecutive blocks from one work
// counter. Measured on the H200: runs of 4 beat 1, 2, 8, 16 and 32, a static share before
// the runs (1/2, 3/4, 7/8), guided runs, a static interleaved order and 8 counters.
#define GAAC_DECODE_CHUNK 4u
#define GAAC_NO_BLOCK 0xffffffffu

// The blocks one decoder warp takes, in its order: runs handed out by a work counter, so
// that a warp whose blocks cost more (V against K, raw blocks) does not set the kernel's
// end. Lane 0 requests the next run when it starts one.
struct GaacBlockQueue {
    unsigned next, end;  // the current run [next, end)
    unsigned grabbed;    // lane 0: the counter value of the next run
    unsigned* work;      // counts blocks handed out; below 2^32 (B + warps CHUNK)
    __device__ void grab() { grabbed = atomicAdd(work, GAAC_DECODE_CHUNK); }
    __device__ void start(unsigned* work_counter, int lane) {
        next = end = 0;
        work = work_counter;
        grabbed = 0;
        if (lane == 0) grab();
    }
    // The next block, or GAAC_NO_BLOCK once every block is taken (a warp-uniform call).
    __device__ unsigned pop(unsigned blocks, int lane) {
        if (next == end) {
            const unsigned c = __shfl_sync(GAAC_WARP_MASK, grabbed, 0);
            if (c >= blocks) return GAAC_NO_BLOCK;
            next = c;
            end = next + min(GAAC_DECODE_CHUNK, blocks - next);
            if (lane == 0) grab();
        }
        return next++;
    }
};

// Words of a head's D bases each lane of a decoder warp prefetches (lane l holds words
// l, l + 32, ...: D/4 words in all).
template <int D>
struct GaacHeadWords {
    static constexpr int W = (D / 4 + GAAC_LANES - 1) / GAAC_LANES;
};

// gaac_load_head with the head's bases already in registers (`words`, as GaacHeadWords
// lays them out, prefetched a block ahead): they go to `base` first, and gaac_load_head
// reads them back from there. Call with the whole warp.
template <int D>
__device__ __forceinline__ void gaac_decode_head(const uint32_t (&words)[GaacHeadWords<D>::W], uint8_t* base,
                                                 uint8_t* wstart, bool is_v,
                                                 uint32_t (&base_words)[GaacGeometry<D>::TILES], int lane) {
    __syncwarp();  // no lane still reads the previous head's bases
#pragma unroll
    for (int w = 0; w < GaacHeadWords<D>::W; ++w) {
        const int k = lane + GAAC_LANES * w;
        if (k < D / 4) reinterpret_cast<uint32_t*>(base)[k] = words[w];
    }
    // Each lane reads back (and rewrites) only the words it stored.
    gaac_load_head<D>(base, base, wstart, is_v, base_words, lane);
}

// Checks and decodes the blocks a GaacBlockQueue gives this warp: coded blocks into `out`;
// raw ones are checked and counted in counters[0] (gaac_decode_finish copies them);
// counters[1] is the queue's work counter. Both are zero at launch.
template <int D>
__device__ void gaac_decode_range(const uint8_t* __restrict__ container, const GaacLayout& g,
                                  uint16_t* __restrict__ out, unsigned* __restrict__ counters,
                                  unsigned* __restrict__ status) {
    using G = GaacGeometry<D>;
    using T = GaacTile<D>;
    using HW = GaacHeadWords<D>;
    extern __shared__ __align__(16) uint8_t gaac_smem[];
    const int lane = threadIdx.x & 31;
    const unsigned cap = g.capacity;
    uint8_t* own = gaac_smem + gaac_decode_warp_bytes(D, cap) * (threadIdx.x / GAAC_LANES);
    uint32_t* image = reinterpret_cast<uint32_t*>(own);
    uint8_t* base = own + G::IMAGE_BYTES;
    uint8_t* wstart = base + D;
    uint8_t* ring = wstart + D;
    uint16_t* tile = reinterpret_cast<uint16_t*>(ring + GAAC_DECODE_STAGES * cap);
    const uint32_t ring_at = (uint32_t)__cvta_generic_to_shared(ring);
    const uint8_t* statuses = container + g.statuses;
    const uint8_t* bases = container + GAAC_HEADER_LEN;
    // The slot ring of gaac_restore.cu with two stages: the next block's slot is in flight
    // (and its status byte and, on a new head, its bases loaded) while one is restored.
    static_assert(GAAC_DECODE_STAGES == 2, "the decoder's ring holds the block in hand and the next one");
    constexpr int MAX_COPIES = (G::PLANES_LEN + 10 * D + 16 * GAAC_LANES - 1) / (16 * GAAC_LANES);
    GaacBlockQueue queue;
    queue.start(counters + 1, lane);
    GaacCursor fetch;  // the place of the block last issued
    unsigned fetched = GAAC_NO_BLOCK, fetched_head = GAAC_NO_BLOCK;
    // The next block: its index, head, first word, status and (when next_new_head) bases.
    unsigned next_block = GAAC_NO_BLOCK, next_head = 0;
    unsigned long long next_first = 0;
    uint32_t next_status = 0, next_words[HW::W];
    bool next_new_head = false, next_is_v = false;
    auto issue = [&](int stage) {
        const unsigned k = queue.pop(g.blocks, lane);
        next_block = GAAC_NO_BLOCK;
        if (k != GAAC_NO_BLOCK) {
            if (fetched != GAAC_NO_BLOCK && k == fetched + 1) fetch.next(g);
            else fetch.start(g, k);
            fetched = k;
            next_block = k;
            next_head = fetch.head_index;
            next_first = fetch.first_word(g, D);
            next_is_v = fetch.tensor & 1u;
            const uint8_t* src = container + g.slots + (unsigned long long)next_block * cap + 16 * lane;
            const uint32_t dst = ring_at + cap * stage + 16 * lane;
#pragma unroll
            for (int c = 0; c < MAX_COPIES; ++c) {
                if (16 * (lane + GAAC_LANES * c) < cap) gaac_cp_async16(dst + 16 * GAAC_LANES * c, src + 16 * GAAC_LANES * c);
            }
            next_status = statuses[next_block];  // used a block later
            next_new_head = next_head != fetched_head;
            if (next_new_head) {
                const uint32_t* hb = reinterpret_cast<const uint32_t*>(bases + (size_t)next_head * D);
#pragma unroll
                for (int w = 0; w < HW::W; ++w) {
                    const int at = lane + GAAC_LANES * w;
                    next_words[w] = at < D / 4 ? __ldg(hb + at) : 0u;
                }
                fetched_head = next_head;
            }
        }
        gaac_cp_async_commit();
    };
    issue(0);
    uint32_t base_words[G::TILES];
    int stage = 0;
    for (;;) {
        const unsigned i = next_block;
        const uint32_t block_status = next_status;
        const unsigned long long first = next_first;
        const bool is_v = next_is_v;
        if (i == GAAC_NO_BLOCK) break;
        if (next_new_head) gaac_decode_head<D>(next_words, base, wstart, is_v, base_words, lane);
        gaac_cp_async_wait<GAAC_DECODE_STAGES - 2>();
        __syncwarp();  // block i is in shared memory for every lane; block i - 1 is done
        issue(stage ^ 1);
        const uint8_t* blk = ring + cap * stage;
        if (block_status == GAAC_STATUS_RAW) {
            if (lane == 0) atomicAdd(counters, 1u);
            if (gaac_nonzero_from(blk, 0, cap, lane) && lane == 0) gaac_flag(status, GAAC_DECODE_SLOT_PADDING_NOT_ZERO);
        } else if (block_status != 0) {
            if (lane == 0) gaac_flag(status, GAAC_DECODE_UNKNOWN_BLOCK_STATUS);
        } else {
            // Spec 7.2: no tag 3, the length within the slot, zeros after it.
            const uint32_t tags = gaac_lane_tags<D>(blk, lane);
            const uint32_t four = tags & ~(tags >> 1) & 0x55555555u, raw = (tags >> 1) & ~tags & 0x55555555u;
            const unsigned n4 = __reduce_add_sync(GAAC_WARP_MASK, __popc(four));
            const unsigned nr = __reduce_add_sync(GAAC_WARP_MASK, __popc(raw));
            const unsigned len = G::PLANES_LEN + n4 + GAAC_RAW_BYTES_PER_GROUP * nr;
            unsigned code = 0;
            if (__any_sync(GAAC_WARP_MASK, tags & (tags >> 1) & 0x55555555u)) code = GAAC_DECODE_UNKNOWN_TAG;
            else if (len > cap) code = GAAC_DECODE_BLOCK_EXCEEDS_SLOT;
            else if (gaac_nonzero_from(blk, len, cap, lane)) code = GAAC_DECODE_SLOT_PADDING_NOT_ZERO;
            if (code) {
                if (lane == 0) gaac_flag(status, code);
            } else {
                // V: restored into the tile in [16, D] order, then 16-byte rows to `out`.
                // K: stored from registers (decoder version 6).
                if (is_v) {
                    // Lanes l (even channel c) and l ^ 4 (c + 1) swap halves: the even lane
                    // then holds channels c, c + 1 of tokens q and q + 8, the odd one of q + 1
                    // and q + 9, one 4-byte word each (word 4 t + l / 8 of its row: the rows
                    // q + odd lie T::ROW / 2 words apart, 4 more than a multiple of 32 at
                    // every D, so the 32 lanes hit 32 banks).
                    const bool odd = lane & 4;
                    const uint32_t send_sel = odd ? 0x5410u : 0x7632u, lo_sel = odd ? 0x3254u : 0x5410u,
                                   hi_sel = odd ? 0x3276u : 0x7610u;
                    uint32_t* col = reinterpret_cast<uint32_t*>(tile) + (2 * (lane & 3) + odd) * (T::ROW / 2) + (lane >> 3);
                    gaac_restore_staged<true, D>(blk, image, wstart, base_words, lane, [&](int t, uint2 w) {
                        const uint32_t r = __shfl_xor_sync(GAAC_WARP_MASK, __byte_perm(w.x, w.y, send_sel), 4);
                        col[4 * t] = __byte_perm(w.x, r, lo_sel);
                        col[4 * t + 8 * (T::ROW / 2)] = __byte_perm(w.y, r, hi_sel);
                    });
                } else {
                    // Lanes l and l ^ 1 swap a word: the even lane then holds channels
                    // c .. c + 3, the odd one c + 8 .. c + 11 (c of the even lane), so each
                    // quad of lanes stores 32 contiguous bytes of its token row.
                    const bool odd = lane & 1;
                    uint16_t* dst = out + first + (size_t)(lane >> 2) * g.row_values + 2 * (lane & 2) + 8 * odd;
                    gaac_restore_staged<false, D>(blk, image, wstart, base_words, lane, [&](int t, uint2 w) {
                        const uint32_t r = __shfl_xor_sync(GAAC_WARP_MASK, odd ? w.x : w.y, 1);
                        *reinterpret_cast<uint2*>(dst + (size_t)(8 * (t / G::CHANNEL_TILES)) * g.row_values +
                                                  16 * (t % G::CHANNEL_TILES)) =
                            odd ? make_uint2(r, w.y) : make_uint2(w.x, r);
                    });
                }
                if (is_v) {
                    __syncwarp();
                    uint16_t* dst = out + first;
#pragma unroll
                    for (int k = 0; k < 2 * D / GAAC_LANES; ++k) {
                        const int u = GAAC_LANES * k + lane, r = u / T::GROUPS_PER_ROW, c = u % T::GROUPS_PER_ROW;
                        *reinterpret_cast<uint4*>(dst + (size_t)r * g.row_values + GAAC_GROUP_CHANNELS * c) =
                            *reinterpret_cast<const uint4*>(tile + r * T::ROW + GAAC_GROUP_CHANNELS * c);
                    }
                }
            }
        }
        __syncwarp();  // every lane is done with the image, the tile and the stage
        stage ^= 1;
    }
    gaac_cp_async_wait<0>();
}

// At least 4 CTAs per multiprocessor at D = 64 (64 registers: the 4 CTAs the shared memory
// allows), 2 at D = 128 and 1 at D = 256.
#define GAAC_DECODE_ENTRY(D, MIN_CTAS)                                                                           \
    extern "C" __global__ void __launch_bounds__(GAAC_WARPS * 32, MIN_CTAS)                                     \
        gaac_decode_d##D(const uint8_t* container, GaacLayout g, uint16_t* out, unsigned* counters,            \
                         unsigned* status) {                                                                   \
        gaac_decode_range<D>(container, g, out, counters, status);                                              \
    }

GAAC_DECODE_ENTRY(64, 4)
GAAC_DECODE_ENTRY(128, 2)
GAAC_DECODE_ENTRY(256, 1)

// After gaac_decode_d<D>: the raw blocks (raw_list[k]: the block index of the k-th raw
// status, `listed` of them, at most R) from the overflow section, the tails, and the
// checks of spec 7.1 rows 13, 14, 16 and 17 (grid-stride).
extern "C" __global__ void __launch_bounds__(GAAC_WARPS * 32)
    gaac_decode_finish(const uint8_t* __restrict__ container, GaacLayout g, unsigned head_dim,
                       const unsigned* __restrict__ raw_list, unsigned listed,
                       const unsigned* __restrict__ raw_counter, uint16_t* __restrict__ out,
                       unsigned* __restrict__ status) {
    const unsigned long long raw_len = 2ull * GAAC_BLOCK_TOKENS * head_dim;
    const unsigned warps = gridDim.x * (blockDim.x / GAAC_LANES);
    for (unsigned k = blockIdx.x * (blockDim.x / GAAC_LANES) + threadIdx.x / GAAC_LANES; k < listed; k += warps) {
        GaacCursor cur;
        cur.start(g, raw_list[k]);
        gaac_copy_block_rows(out + cur.first_word(g, head_dim), g.row_values,
                             const_cast<uint8_t*>(container) + g.overflow + k * raw_len, head_dim, false);
    }
    gaac_copy_tails(out, g, const_cast<uint8_t*>(container) + g.tails, false);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (unsigned long long at = GAAC_HEADER_LEN + first; at < g.slots; at += stride) {
        const uint8_t b = container[at];
        if (at < GAAC_HEADER_LEN + g.bases_len) {
            if (b > GAAC_MAX_BASE) gaac_flag(status, GAAC_DECODE_BASE_OUT_OF_RANGE);
        } else if ((at < g.statuses || at >= g.statuses + g.blocks) && b != 0) {
            gaac_flag(status, GAAC_DECODE_PADDING_NOT_ZERO);
        }
    }
    if (first == 0 && *raw_counter != g.raw_blocks) gaac_flag(status, GAAC_DECODE_RAW_COUNT_MISMATCH);
}
