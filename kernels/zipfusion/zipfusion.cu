// ZipFusion GPU page compression and page decode, byte-identical to crates/zipfusion (the
// CPU reference). Format: docs/formats/zipfusion.md (blocks spec 2-4, pages spec 5, the
// checks of spec 6, the container spec 7).
//
// Work units. Encoding: one CTA of ZIPFUSION_THREADS threads per page, a warp per block of
// 16 tokens x 32 channels (512 values, 1 KiB of BF16), the page's warps taking its blocks
// in turn; only a page's place in a whole-cache container depends on the earlier pages'
// lengths (a decoupled look-back in the one-pass encoder, a one-CTA scan in the two-pass
// one). Decoding: one warp per page, no barriers. Inside a page, block b starts at
// metadata_len + 768 b + 256 (raw blocks before b) (spec 5.2), so positions come from a
// population count of the raw blocks' bits, not from a walk.
//
// Every global access of a block body is a 16-byte vector (8 bytes for a coded block's
// codes): block rows move between global memory and a swizzled shared-memory tile, and
// each lane gathers or scatters its 16 values in the tensor-core fragment order (spec 3)
// there; a lane's values are packed and unpacked in registers, four bytes at a time.
// Why the kernels look as they do, with the profiles and versions measured:
// docs/perf/zipfusion-gpu.md.
#include "../common/adler.cuh"
#include "../common/async_copy.cuh"
#include "../common/crc32c.cuh"
#include "zipfusion_format.gen.cuh"

#define ZF_WARPS (ZIPFUSION_THREADS / 32)

// Where a run of pages lies in a buffer of BF16 words: page i's K starts at
// (i / group_pages) * group_stride + (i % group_pages) * per_kind and its V kind_stride
// values later; each kind is [16, H, D] token-major. A cache in layer-major order has
// group_pages = T / 16 per layer; a run of dense pages has group_pages = 1.
// Mirrors zipfusion::gpu::PagesArg field for field.
struct ZfPages {
    unsigned long long per_kind;
    unsigned long long group_pages;
    unsigned long long group_stride;
    unsigned long long kind_stride;
    unsigned heads;
    unsigned head_dim;
    unsigned blocks_per_entry;
    unsigned entry_stride;
    unsigned metadata_len;
    unsigned page_blocks;
    unsigned variant;  // 0 base, 1 zero-aware (spec 2.2)
    unsigned pad;
};

// The 48 header bytes of a container, as the host builds them (spec 7.1).
struct ZfHeader {
    uint4 bytes[3];
};

__device__ __forceinline__ unsigned long long zf_page_words(const ZfPages& g, unsigned long long page) {
    return (page / g.group_pages) * g.group_stride + (page % g.group_pages) * g.per_kind;
}

// The first word of block j of (head, kind) of the page whose K starts at `page_words`.
__device__ __forceinline__ unsigned long long zf_block_words(const ZfPages& g, unsigned long long page_words,
                                                             unsigned entry, unsigned j) {
    const unsigned head = entry >> 1, kind = entry & 1;
    return page_words + kind * g.kind_stride + (unsigned long long)head * g.head_dim +
           (unsigned long long)j * ZIPFUSION_BLOCK_CHANNELS;
}

// A lane's two uint4 of a block's rows: unit u = lane + 32 s is row u / 4, bytes
// 16 (u % 4).. of the row's 64.
__device__ __forceinline__ unsigned long long zf_row_word(const ZfPages& g, unsigned u) {
    return (unsigned long long)(u >> 2) * g.heads * g.head_dim + 8 * (u & 3);
}

// A block's tile in shared memory: 16 rows (tokens) of 32 channels, 16 words of 32 bits
// a row, no padding. Word w of row r (channels 2 w, 2 w + 1) is stored at 16 r + (w ^ 4 ((r
// >> 1) & 3)): the swizzle moves 4-word groups within a row, so a row's 16-byte pieces
// stay whole, and the fragment-order accesses of a warp (spec 3) fall on 32 distinct
// banks, as the padded rows of earlier versions did, in 20% less memory.
__device__ __forceinline__ unsigned zf_tile_word(unsigned row, unsigned word) {
    return 16 * row + (word ^ (((row >> 1) & 3) << 2));
}

// Where unit u of zf_row_word lies in a tile (in 16-bit words): row u / 4, its words
// 4 (u % 4)..
__device__ __forceinline__ unsigned zf_row_offset(unsigned u) { return 2 * zf_tile_word(u >> 2, 4 * (u & 3)); }

// Loads a block's rows into a tile (zf_tile_word's swizzled layout) and returns the
// lane's two uint4 for the classification.
__device__ __forceinline__ void zf_load_block(const unsigned short* __restrict__ words, const ZfPages& g,
                                              unsigned long long at, unsigned short* tile, uint4 (&v)[2]) {
    const unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const unsigned u = lane + 32 * s;
        v[s] = *reinterpret_cast<const uint4*>(words + at + zf_row_word(g, u));
        *reinterpret_cast<uint4*>(tile + zf_row_offset(u)) = v[s];
    }
}

// The metadata byte of the block whose lanes hold `v` (zipfusion's block::classify, spec
// 2): coded when every exponent lies in [b, b + 15], b the smallest rounded down to even
// and b/2 <= 120; else, zero-aware, when a zero-aware cache's block holds exponent 0 and
// its other exponents lie in [b, b + 13]; else raw. Every lane gets the byte.
//
// The extremes are taken over the exponent fields left in place (w & 0x7f80 for a
// word's low value, w & 0x7f800000 for its high one): a min and a max per value, no
// shifts. Exponent 0 drops out of the nonzero minimum by wrapping: field - 1 step is
// below the other fields' only when the field is nonzero.
__device__ __forceinline__ unsigned zf_classify(const uint4 (&v)[2], unsigned variant) {
    const unsigned low_field = 0x7f80u, high_field = 0x7f800000u;
    unsigned lo_min = 0xffffffffu, lo_max = 0, hi_min = 0xffffffffu, hi_max = 0;
    unsigned lo_nz = 0xffffffffu, hi_nz = 0xffffffffu;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const unsigned w[4] = {v[s].x, v[s].y, v[s].z, v[s].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const unsigned lo = w[i] & low_field, hi = w[i] & high_field;
            lo_min = min(lo_min, lo);
            lo_max = max(lo_max, lo);
            hi_min = min(hi_min, hi);
            hi_max = max(hi_max, hi);
            if (variant == 1) {
                lo_nz = min(lo_nz, lo - 0x80u);
                hi_nz = min(hi_nz, hi - 0x800000u);
            }
        }
    }
    const unsigned full = 0xffffffffu;
    const unsigned low = __reduce_min_sync(full, min(lo_min >> 7, hi_min >> 23));
    const unsigned high = __reduce_max_sync(full, max(lo_max >> 7, hi_max >> 23));
    unsigned base = low & ~1u;
    if (base / 2 <= ZIPFUSION_MAX_HALF_BASE && high - base <= ZIPFUSION_WINDOW_SPAN) return base / 2;
    if (variant == 1) {
        // The smallest nonzero exponent (255 when there is none; then the first window
        // held the block of zeros and this is not reached).
        const unsigned low_nonzero = __reduce_min_sync(full, min(min(lo_nz >> 7, hi_nz >> 23), 254u) + 1);
        // With a zero in the block the largest exponent is the largest nonzero one.
        if (low == 0) {
            base = low_nonzero & ~1u;
            if (base / 2 <= ZIPFUSION_MAX_HALF_BASE && high - base <= ZIPFUSION_ZERO_AWARE_WINDOW_SPAN)
                return ZIPFUSION_ZERO_AWARE_FLAG | (base / 2);
        }
    }
    return ZIPFUSION_RAW_BLOCK_BYTE;
}

__device__ __forceinline__ unsigned zf_block_len(unsigned meta) {
    return meta == ZIPFUSION_RAW_BLOCK_BYTE ? ZIPFUSION_RAW_BLOCK_LEN : ZIPFUSION_CODED_BLOCK_LEN;
}

// The entry of block b of a page (blocks in storage order, blocks_per_entry = D / 32 a
// power of 2 for the usual head dims: a shift, else a division).
__device__ __forceinline__ unsigned zf_entry_of(const ZfPages& g, unsigned b) {
    const unsigned n = g.blocks_per_entry;
    return (n & (n - 1)) == 0 ? b >> (__ffs(n) - 1) : b / n;
}

// The checksum's sums (kernels/common/adler.cuh) of the values a lane holds of one page,
// folded in where the kernels already hold them: the encoder as it classifies the rows it
// loaded, the decoder as it stores its rows. Positions are relative to the page's K (kind
// 0) and V (kind 1) starts, so that each stays below 2 per_kind bytes.
struct ZfPageSums {
    uint32_t s_k, s_v;
    unsigned long long ws_k, ws_v;
};

// Word offset of unit u of block j of entry e inside its kind's [16, H, D] slice.
__device__ __forceinline__ unsigned zf_unit_in_kind(const ZfPages& g, unsigned entry, unsigned j, unsigned u) {
    return (entry >> 1) * g.head_dim + j * ZIPFUSION_BLOCK_CHANNELS + (u >> 2) * g.heads * g.head_dim + 8 * (u & 3);
}

__device__ __forceinline__ void zf_sums_add(ZfPageSums& sums, unsigned kind, uint4 w, unsigned word_in_kind) {
    if (kind == 0) {
        kv_adler_add16_wide(w, 2 * word_in_kind, sums.s_k, sums.ws_k);
    } else {
        kv_adler_add16_wide(w, 2 * word_in_kind, sums.s_v, sums.ws_v);
    }
}

// The warp's sums of the page whose K starts at word `page_words`, reduced over the lanes
// and taken modulo 65521 with the two bases folded in: (S, W) for the counters. Every lane
// gets them.
__device__ __forceinline__ void zf_sums_reduce(const ZfPages& g, const ZfPageSums& sums,
                                               unsigned long long page_words, uint32_t& s_mod, uint32_t& w_mod) {
    const unsigned full = 0xffffffffu;
    unsigned long long s_k = sums.s_k, s_v = sums.s_v, ws_k = sums.ws_k, ws_v = sums.ws_v;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        s_k += __shfl_xor_sync(full, s_k, d);
        s_v += __shfl_xor_sync(full, s_v, d);
        ws_k += __shfl_xor_sync(full, ws_k, d);
        ws_v += __shfl_xor_sync(full, ws_v, d);
    }
    const unsigned long long m = KV_ADLER_MOD;
    const unsigned long long base_k = (2 * page_words) % m, base_v = (2 * (page_words + g.kind_stride)) % m;
    s_mod = (uint32_t)((s_k + s_v) % m);
    w_mod = (uint32_t)((ws_k % m + base_k * (s_k % m) + ws_v % m + base_v * (s_v % m)) % m);
}

// A block's fragment order (spec 3.2, 3.3; zipfusion::format::fragment_coords): lane l
// holds values v = 4 f + i (f, i < 4) of the mma.m16n8k16 B fragments, at k = 2 (l % 4)
// + i % 2 + 8 (i / 2) and n = l / 4; K (kind 0) puts token 8 (f % 2) + n, channel
// 16 (f / 2) + k there, V (kind 1) token k, channel 8 f + n. A lane's 16 values travel
// as 8 words: p[2 q] holds values 4 q and 4 q + 1, p[2 q + 1] values 4 q + 2 and 4 q + 3
// (low half first), the order of a raw block's bytes (spec 4.2).

// 16-bit words of a block's tile: zf_tile_word and zf_lane_slots assume rows of exactly
// 32 channels (16 32-bit words).
#define ZF_TILE_WORDS (16 * ZIPFUSION_TILE_STRIDE)
static_assert(ZIPFUSION_TILE_STRIDE == 32, "the swizzled tile layout assumes unpadded rows of 32 channels");

// Where lane `lane`'s values lie in a tile, in 16-bit words, as four per-lane offsets to
// which zf_gather and zf_scatter add constants (K: value 4 f + 2 m at at[2 (f / 2) + m]
// plus 256 (f % 2); V: value 4 f + 2 m + h at at[f] plus 256 m + 32 h). The swizzle of
// zf_tile_word is a lane constant here: K reads rows n and n + 8, whose swizzle is that
// of n; V reads rows 2 j + {0, 1, 8, 9}, whose swizzle is that of 2 j.
struct ZfLaneSlots {
    unsigned at[4];
};

template <unsigned KIND>
__device__ __forceinline__ ZfLaneSlots zf_lane_slots(unsigned lane) {
    const unsigned n = lane >> 2, j = lane & 3;
    ZfLaneSlots l;
    if (KIND == 0) {
        // K: value 4 f + 2 m is the 32-bit word (pair) 8 (f / 2) + 4 m + j of row n + 8 (f % 2).
        const unsigned swizzle = ((n >> 1) & 3) << 2;
#pragma unroll
        for (int c = 0; c < 4; ++c) l.at[c] = 2 * (16 * n + j + ((4u * c) ^ swizzle));
    } else {
        // V: value 4 f + i is channel 8 f + n (pair 4 f + n / 2) of row 2 j + i % 2 + 8 (i / 2).
#pragma unroll
        for (int f = 0; f < 4; ++f) l.at[f] = 2 * (16 * 2 * j + 4 * (f ^ j)) + n;
    }
    return l;
}

// The lane's 16 values of the block in `tile`, as 8 words (see above). For K, values
// 4 f + 2 m and 4 f + 2 m + 1 are neighbouring channels: one 32-bit access each.
template <unsigned KIND>
__device__ __forceinline__ void zf_gather(const unsigned short* tile, unsigned lane, unsigned (&p)[8]) {
    const ZfLaneSlots l = zf_lane_slots<KIND>(lane);
#pragma unroll
    for (int f = 0; f < 4; ++f) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            if (KIND == 0) {
                p[2 * f + m] = *reinterpret_cast<const unsigned*>(tile + l.at[2 * (f >> 1) + m] + 2 * 16 * 8 * (f & 1));
            } else {
                const unsigned short* t = tile + l.at[f] + 2 * 16 * 8 * m;
                p[2 * f + m] = t[0] | (unsigned)t[2 * 16] << 16;
            }
        }
    }
}

// zf_gather's inverse: the lane's 8 words into their places in `tile`.
template <unsigned KIND>
__device__ __forceinline__ void zf_scatter(unsigned short* tile, unsigned lane, const unsigned (&p)[8]) {
    const ZfLaneSlots l = zf_lane_slots<KIND>(lane);
#pragma unroll
    for (int f = 0; f < 4; ++f) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            if (KIND == 0) {
                *reinterpret_cast<unsigned*>(tile + l.at[2 * (f >> 1) + m] + 2 * 16 * 8 * (f & 1)) = p[2 * f + m];
            } else {
                unsigned short* t = tile + l.at[f] + 2 * 16 * 8 * m;
                t[0] = (unsigned short)p[2 * f + m];
                t[2 * 16] = (unsigned short)(p[2 * f + m] >> 16);
            }
        }
    }
}

// Four values' d = (E - b) >> 1, one per byte, from their high bytes `high` (sign, E >> 1)
// and low bytes `low` (E & 1, mantissa): (E >> 1) - b/2, exact because b is even; in a
// zero-aware block exponent 0 takes ZIPFUSION_ZERO_D. The 0x80 set in every byte keeps
// each byte's subtraction from borrowing from the next.
__device__ __forceinline__ unsigned zf_window_d(unsigned high, unsigned low, unsigned meta) {
    const unsigned ones = 0x01010101u, sevens = 0x7f7f7f7fu, tops = 0x80808080u;
    const unsigned halves = high & sevens;
    unsigned d = ((halves | tops) - (meta & 0x7fu) * ones) & sevens;
    if (meta & ZIPFUSION_ZERO_AWARE_FLAG) {
        // Bit 7 of a byte of `nonzero`: its exponent is not 0.
        const unsigned nonzero = ((halves + sevens) | (low & tops)) & tops;
        const unsigned zero = (nonzero ^ tops) >> 7;
        d = (d & ~(zero * 0x7fu)) | zero * ZIPFUSION_ZERO_D;
    }
    return d;
}

// A lane's bytes of the block it holds as `p` (zipfusion's block::write_block, spec 4):
// raw, its 16 words (32 bytes, at 32 l); coded, its 16 low bytes (at 16 l) and, in
// `b.x`, `b.y`, its 8 code bytes (at 512 + 8 l): byte i of code word g pairs values
// 8 g + i (sign in bit 7, d in bits 0-2) and 8 g + 4 + i (sign in bit 6, d in bits 3-5).
__device__ __forceinline__ void zf_pack(const unsigned (&p)[8], unsigned meta, uint4& a, uint4& b) {
    if (meta == ZIPFUSION_RAW_BLOCK_BYTE) {
        a = make_uint4(p[0], p[1], p[2], p[3]);
        b = make_uint4(p[4], p[5], p[6], p[7]);
        return;
    }
    unsigned low[4], high[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        low[q] = __byte_perm(p[2 * q], p[2 * q + 1], 0x6420);
        high[q] = __byte_perm(p[2 * q], p[2 * q + 1], 0x7531);
    }
    unsigned codes[2];
#pragma unroll
    for (int g = 0; g < 2; ++g) {
        const unsigned first = high[2 * g], second = high[2 * g + 1];
        codes[g] = (first & 0x80808080u) | ((second >> 1) & 0x40404040u) | zf_window_d(first, low[2 * g], meta) |
                   zf_window_d(second, low[2 * g + 1], meta) << 3;
    }
    a = make_uint4(low[0], low[1], low[2], low[3]);
    b = make_uint4(codes[0], codes[1], 0u, 0u);
}

// The high bytes of a lane's two groups from its 8 code bytes (zipfusion's
// restore_high_bytes, spec 3.4): first[g] holds values 8g..8g+3, second[g] values
// 8g+4..8g+7, one per byte.
__device__ __forceinline__ void zf_restore(unsigned codes, unsigned meta, unsigned& first, unsigned& second) {
    const unsigned half_base = (meta & 0x7fu) * 0x01010101u;
    first = (codes & 0x87878787u) + half_base;
    second = (((codes >> 3) & 0x07070707u) | ((codes << 1) & 0x80808080u)) + half_base;
    if (meta & ZIPFUSION_ZERO_AWARE_FLAG) {
        // Bit 0 of a byte: its first d is 7; bit 3: its second d is 7.
        const unsigned sevens = codes & (codes >> 1) & (codes >> 2);
        first &= ~((sevens & 0x01010101u) * 0x7fu);
        second &= ~(((sevens >> 3) & 0x01010101u) * 0x7fu);
    }
}

// zf_pack's inverse: the lane's 8 words of the block from its bytes (a, b as zf_pack
// leaves them).
__device__ __forceinline__ void zf_unpack(uint4 a, uint4 b, unsigned meta, unsigned (&p)[8]) {
    if (meta == ZIPFUSION_RAW_BLOCK_BYTE) {
        p[0] = a.x, p[1] = a.y, p[2] = a.z, p[3] = a.w;
        p[4] = b.x, p[5] = b.y, p[6] = b.z, p[7] = b.w;
        return;
    }
    const unsigned low[4] = {a.x, a.y, a.z, a.w};
    unsigned high[4];
    zf_restore(b.x, meta, high[0], high[1]);
    zf_restore(b.y, meta, high[2], high[3]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        p[2 * q] = __byte_perm(low[q], high[q], 0x5140);
        p[2 * q + 1] = __byte_perm(low[q], high[q], 0x7362);
    }
}

// A lane's bytes of a block (zf_pack's a and b) to the block's bytes at `dst`.
__device__ __forceinline__ void zf_store_lane(unsigned char* dst, unsigned meta, unsigned lane, uint4 a, uint4 b) {
    if (meta == ZIPFUSION_RAW_BLOCK_BYTE) {
        reinterpret_cast<uint4*>(dst)[2 * lane] = a;
        reinterpret_cast<uint4*>(dst)[2 * lane + 1] = b;
    } else {
        reinterpret_cast<uint4*>(dst)[lane] = a;
        reinterpret_cast<uint2*>(dst + ZIPFUSION_LOW_BYTES_LEN)[lane] = make_uint2(b.x, b.y);
    }
}

// zf_store_lane's inverse: a lane's bytes of the block at `src`.
__device__ __forceinline__ void zf_load_lane(const unsigned char* src, unsigned meta, unsigned lane, uint4& a,
                                             uint4& b) {
    if (meta == ZIPFUSION_RAW_BLOCK_BYTE) {
        a = reinterpret_cast<const uint4*>(src)[2 * lane];
        b = reinterpret_cast<const uint4*>(src)[2 * lane + 1];
    } else {
        a = reinterpret_cast<const uint4*>(src)[lane];
        const uint2 codes = reinterpret_cast<const uint2*>(src + ZIPFUSION_LOW_BYTES_LEN)[lane];
        b = make_uint4(codes.x, codes.y, 0u, 0u);
    }
}

// The lane's bytes of the block in `tile` as `meta` says (gather, then zf_pack).
__device__ __forceinline__ void zf_encode_lane(const unsigned short* tile, unsigned kind, unsigned meta, uint4& a,
                                               uint4& b) {
    const unsigned lane = threadIdx.x & 31;
    unsigned p[8];
    if (kind == 0) {
        zf_gather<0>(tile, lane, p);
    } else {
        zf_gather<1>(tile, lane, p);
    }
    zf_pack(p, meta, a, b);
}

// Block positions inside a page (spec 5.2): blocks lie in storage order (entry-major,
// entry 2 head + kind), coded ones 768 bytes and raw ones 1024, after the metadata; so
// block b starts at metadata_len + 768 b + 256 (raw blocks before b). `raw` bit i of
// word c marks block 32 c + i raw; `raw_before[c]` counts the raw blocks before word c.
__device__ __forceinline__ unsigned zf_block_at(const ZfPages& g, const unsigned* raw, const unsigned* raw_before,
                                                unsigned b) {
    const unsigned c = b >> 5, below = raw[c] & ((1u << (b & 31)) - 1u);
    return g.metadata_len + ZIPFUSION_CODED_BLOCK_LEN * b +
           (ZIPFUSION_RAW_BLOCK_LEN - ZIPFUSION_CODED_BLOCK_LEN) * (raw_before[c] + __popc(below));
}

// Fills `raw` and `raw_before` (raw_before has a word more: the page's raw block count)
// from the page's metadata bytes in `metas`. Every thread of the CTA calls it (it ends
// with a barrier).
__device__ __forceinline__ void zf_raw_bits(const ZfPages& g, const unsigned char* metas, unsigned* raw,
                                            unsigned* raw_before) {
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned words = (g.page_blocks + 31) / 32;
    for (unsigned c = warp; c < words; c += ZF_WARPS) {
        const unsigned b = 32 * c + lane;
        const unsigned bits = __ballot_sync(0xffffffffu, b < g.page_blocks && metas[b] == ZIPFUSION_RAW_BLOCK_BYTE);
        if (lane == 0) raw[c] = bits;
    }
    __syncthreads();
    for (unsigned c = threadIdx.x; c <= words; c += blockDim.x) {
        unsigned before = 0;
        for (unsigned k = 0; k < c; ++k) before += __popc(raw[k]);
        raw_before[c] = before;
    }
    __syncthreads();
}

// Word t of a page's metadata (spec 5.1): entry e's first-block offset (4 bytes,
// little-endian), its blocks' bytes, zero padding; entry_stride is a multiple of 4.
__device__ __forceinline__ unsigned zf_metadata_word(const ZfPages& g, unsigned t, const unsigned char* metas,
                                                     const unsigned* raw, const unsigned* raw_before) {
    const unsigned entry = 4 * t / g.entry_stride, k = 4 * t % g.entry_stride;
    if (k == 0) return zf_block_at(g, raw, raw_before, entry * g.blocks_per_entry);
    unsigned word = 0;
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
        const unsigned j = k + i - ZIPFUSION_OFFSET_LEN;
        if (j < g.blocks_per_entry) word |= (unsigned)metas[entry * g.blocks_per_entry + j] << (8 * i);
    }
    return word;
}

// ---------------------------------------------------------------------------------------
// Encode.
// ---------------------------------------------------------------------------------------

// One CTA per page: the metadata byte of every block of the page into
// metas[page * page_blocks + block] (blocks entry-major: entry 2 head + kind, then j),
// and the page's length in bytes into page_lens[page].
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_classify(const unsigned short* __restrict__ words, ZfPages g, unsigned long long pages,
                              unsigned char* __restrict__ metas, unsigned* __restrict__ page_lens) {
    __shared__ __align__(16) unsigned short tiles[ZF_WARPS][16 * ZIPFUSION_TILE_STRIDE];
    __shared__ unsigned body_len;
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (unsigned long long page = blockIdx.x; page < pages; page += gridDim.x) {
        if (threadIdx.x == 0) body_len = 0;
        __syncthreads();
        const unsigned long long page_words = zf_page_words(g, page);
        unsigned mine = 0;
        for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
            uint4 v[2];
            const unsigned entry = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
            // The tile is not needed here; the load helper fills it anyway (cheap, shared).
            zf_load_block(words, g, zf_block_words(g, page_words, entry, j), tiles[warp], v);
            const unsigned meta = zf_classify(v, g.variant);
            if (lane == 0) metas[page * g.page_blocks + b] = (unsigned char)meta;
            mine += zf_block_len(meta);
            __syncwarp();
        }
        if (lane == 0 && mine) atomicAdd(&body_len, mine);
        __syncthreads();
        if (threadIdx.x == 0) page_lens[page] = g.metadata_len + body_len;
        __syncthreads();
    }
}

// One CTA: the container offset of every page and tail, an exclusive scan from the header's
// end over items (layer, p), p < pages_per_layer a page (page_lens) and p = pages_per_layer
// the layer's BF16 tail (tail_len bytes), into offsets[layer * (pages_per_layer + 1) + p];
// the container's length into *total; and the header, with the checksum from `sums`
// (when non-null) and its CRC-32C.
extern "C" __global__ void __launch_bounds__(ZIPFUSION_SCAN_THREADS)
    zipfusion_encode_scan(const unsigned* __restrict__ page_lens, unsigned long long layers,
                          unsigned long long pages_per_layer, unsigned long long tail_len,
                          unsigned long long* __restrict__ offsets, unsigned long long* __restrict__ total,
                          ZfHeader header, const unsigned long long* __restrict__ sums,
                          unsigned long long value_bytes, unsigned char* __restrict__ out) {
    __shared__ unsigned long long warp_sums[ZIPFUSION_SCAN_THREADS / 32];
    __shared__ __align__(16) unsigned char h[ZIPFUSION_HEADER_LEN];
    const unsigned long long per_layer = pages_per_layer + 1, items = layers * per_layer;
    const unsigned long long chunk = (items + blockDim.x - 1) / blockDim.x;
    const unsigned long long first = min(items, chunk * threadIdx.x), last = min(items, first + chunk);
    auto len_of = [&](unsigned long long item) -> unsigned long long {
        const unsigned long long layer = item / per_layer, p = item % per_layer;
        return p == pages_per_layer ? tail_len : page_lens[layer * pages_per_layer + p];
    };
    unsigned long long mine = 0;
    for (unsigned long long item = first; item < last; ++item) mine += len_of(item);
    // Exclusive scan of `mine` over the CTA.
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long x = mine;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = lane < blockDim.x / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const unsigned long long y = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += y;
        }
        if (lane < blockDim.x / 32) warp_sums[lane] = w;
    }
    __syncthreads();
    unsigned long long at = ZIPFUSION_HEADER_LEN + x - mine + (warp > 0 ? warp_sums[warp - 1] : 0);
    for (unsigned long long item = first; item < last; ++item) {
        offsets[item] = at;
        at += len_of(item);
    }
    if (threadIdx.x == blockDim.x - 1) *total = at;
    if (threadIdx.x < 3) reinterpret_cast<uint4*>(h)[threadIdx.x] = header.bytes[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        if (sums) {
            const uint32_t c = kv_adler_from_sums(value_bytes, sums[0], sums[1]);
            for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CHECKSUM + i] = (unsigned char)(c >> (8 * i));
        }
        const uint32_t crc = kv_crc32c_skip(h, ZIPFUSION_HEADER_LEN, ZIPFUSION_HEADER_CRC);
        for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CRC + i] = (unsigned char)(crc >> (8 * i));
    }
    __syncthreads();
    if (threadIdx.x < 3) reinterpret_cast<uint4*>(out)[threadIdx.x] = reinterpret_cast<const uint4*>(h)[threadIdx.x];
}

// One CTA per page: the page's metadata and blocks (zipfusion's encode_page_into, spec 5)
// from the metadata bytes zipfusion_encode_classify left. Page i goes to
// out + i * slot_stride when slot_stride is nonzero (a pool of fixed slots), else to
// out + offsets[(i / group_pages) * (group_pages + 1) + i % group_pages] (a container,
// zipfusion_encode_scan's offsets).
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_pages(const unsigned short* __restrict__ words, ZfPages g, unsigned long long pages,
                           const unsigned char* __restrict__ metas, const unsigned long long* __restrict__ offsets,
                           unsigned long long slot_stride, unsigned char* __restrict__ out) {
    __shared__ __align__(16) unsigned short tiles[ZF_WARPS][ZF_TILE_WORDS];
    extern __shared__ __align__(16) unsigned char dynamic[];
    // Dynamic shared memory: the raw bits (a word per 32 blocks) and the raw counts
    // before each word (one more), then the page's metadata bytes (page_blocks).
    const unsigned raw_words = (g.page_blocks + 31) / 32;
    unsigned* raw = reinterpret_cast<unsigned*>(dynamic);
    unsigned* raw_before = raw + raw_words;
    unsigned char* page_metas = reinterpret_cast<unsigned char*>(raw_before + raw_words + 1);
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (unsigned long long page = blockIdx.x; page < pages; page += gridDim.x) {
        for (unsigned b = threadIdx.x; b < g.page_blocks; b += blockDim.x)
            page_metas[b] = metas[page * g.page_blocks + b];
        __syncthreads();
        zf_raw_bits(g, page_metas, raw, raw_before);
        const unsigned long long at =
            slot_stride ? page * slot_stride
                        : offsets[(page / g.group_pages) * (g.group_pages + 1) + page % g.group_pages];
        unsigned char* dst = out + at;
        for (unsigned t = threadIdx.x; t < g.metadata_len / 4; t += blockDim.x)
            reinterpret_cast<unsigned*>(dst)[t] = zf_metadata_word(g, t, page_metas, raw, raw_before);
        const unsigned long long page_words = zf_page_words(g, page);
        for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
            const unsigned entry = zf_entry_of(g, b), j = b - entry * g.blocks_per_entry;
            uint4 v[2];
            zf_load_block(words, g, zf_block_words(g, page_words, entry, j), tiles[warp], v);
            __syncwarp();
            const unsigned meta = page_metas[b];
            uint4 a, c;
            zf_encode_lane(tiles[warp], entry & 1, meta, a, c);
            zf_store_lane(dst + zf_block_at(g, raw, raw_before, b), meta, lane, a, c);
            __syncwarp();
        }
        __syncthreads();
    }
}

// Single-pass scan state (decoupled look-back): a word per page, 0 until the page
// publishes its length (ZF_AGGREGATE | len) and then the inclusive sum of every page's
// length up to it (ZF_PREFIX | sum). Relaxed accesses at GPU scope: coherent in L2, where
// every SM sees them, and nothing else is ordered by them (a word carries its own value).
#define ZF_AGGREGATE (1ull << 62)
#define ZF_PREFIX (2ull << 62)
#define ZF_VALUE ((1ull << 62) - 1)

__device__ __forceinline__ void zf_publish(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long zf_peek(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// The sum of the lengths of every page before `page` (a warp's collective; every lane
// gets it), once the page has published its own length (ZF_AGGREGATE): walks back 32
// pages at a time, adding published lengths until it meets a published prefix, then
// publishes its own. A window is read again only while a page nearer than its nearest
// prefix has not published. Pages are taken in ticket order, so every page waited on
// has started and publishes its length before it waits itself: the walk ends.
__device__ __forceinline__ unsigned long long zf_look_back(unsigned long long* state, unsigned long long page,
                                                           unsigned long long len) {
    const unsigned lane = threadIdx.x & 31, full = 0xffffffffu;
    unsigned long long before = 0;
    long long next = (long long)page - 1;
    while (true) {
        const long long at = next - (long long)lane;
        unsigned long long v;
        unsigned prefixes, needed;
        do {
            // Before page 0 reads as a prefix of 0.
            v = at >= 0 ? zf_peek(state + at) : ZF_PREFIX;
            prefixes = __ballot_sync(full, (v >> 62) == 2);
            // Lanes up to the nearest prefix (lane 0 is the nearest page) count.
            needed = prefixes ? (2u << (__ffs(prefixes) - 1)) - 1u : full;
        } while (__ballot_sync(full, (v >> 62) == 0) & needed);
        unsigned long long x = (needed >> lane) & 1 ? (v & ZF_VALUE) : 0;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) x += __shfl_xor_sync(full, x, d);
        before += x;
        if (prefixes) break;
        next -= 32;
    }
    if (lane == 0) zf_publish(state + page, ZF_PREFIX | (before + len));
    return before;
}

// One CTA per page, one pass over the input: a warp per block loads the block into the
// CTA's tile of the page (dynamic shared memory) and classifies it; the page's length
// then gives its place, page * slot_stride for fixed slots (lens[page] gets the length)
// or, for a container (slot_stride = 0), the header, every earlier page's length (the
// look-back over state[1..], pages taken in the order of the ticket in state[0]) and the
// tails of earlier groups, recorded in offsets (the group's tail offset too, after its
// last page). The page publishes its length as soon as it is known, and its warps encode
// their blocks into their tiles (each block's bytes in its own tile) while the look-back
// runs; then the metadata and the blocks are copied out, 16 bytes a lane. At most 32
// blocks per page (one word of raw bits).
template <bool CHECKSUM>
__device__ __forceinline__ void zf_encode_fused(const unsigned short* __restrict__ words, ZfPages g, unsigned long long* state,
                           unsigned long long* __restrict__ offsets, unsigned long long tail_len,
                           unsigned long long slot_stride, unsigned* __restrict__ lens,
                           unsigned char* __restrict__ out, unsigned long long* __restrict__ sums) {
    extern __shared__ __align__(16) unsigned char dynamic[];
    // Dynamic shared memory: a tile per block, then the blocks' metadata bytes.
    unsigned short* tiles = reinterpret_cast<unsigned short*>(dynamic);
    unsigned char* page_metas = reinterpret_cast<unsigned char*>(tiles + g.page_blocks * ZF_TILE_WORDS);
    __shared__ unsigned long long s_page, s_at;
    __shared__ unsigned s_raw[2];  // raw bits, then 0: raw and raw_before of zf_block_at
    __shared__ uint32_t s_sums[2];  // the page's checksum sums (S, W), each modulo 65521 per warp
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        s_page = slot_stride ? blockIdx.x : atomicAdd(state, 1ull);
        s_raw[0] = 0;
        s_raw[1] = 0;
        s_sums[0] = 0;
        s_sums[1] = 0;
    }
    __syncthreads();
    const unsigned long long page = s_page;
    const unsigned long long page_words = zf_page_words(g, page);
    // Every block of the warp's share in flight at once: 16-byte copies straight into
    // the blocks' tiles, one wait, then each lane classifies the rows it copied.
    for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
        const unsigned entry = zf_entry_of(g, b), j = b - entry * g.blocks_per_entry;
        const unsigned short* block = words + zf_block_words(g, page_words, entry, j);
        unsigned short* tile = tiles + b * ZF_TILE_WORDS;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const unsigned u = lane + 32 * s;
            copy_async_16(tile + zf_row_offset(u), block + zf_row_word(g, u));
        }
    }
    copy_async_commit();
    copy_async_wait_all();
    ZfPageSums page_sums = {0, 0, 0, 0};
    for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
        const unsigned short* tile = tiles + b * ZF_TILE_WORDS;
        uint4 v[2];
#pragma unroll
        for (int s = 0; s < 2; ++s) v[s] = *reinterpret_cast<const uint4*>(tile + zf_row_offset(lane + 32 * s));
        const unsigned meta = zf_classify(v, g.variant);
        if (lane == 0) {
            page_metas[b] = (unsigned char)meta;
            if (meta == ZIPFUSION_RAW_BLOCK_BYTE) atomicOr(&s_raw[0], 1u << b);
        }
        if (CHECKSUM) {
            const unsigned entry = zf_entry_of(g, b), j = b - entry * g.blocks_per_entry;
#pragma unroll
            for (int s = 0; s < 2; ++s)
                zf_sums_add(page_sums, entry & 1, v[s], zf_unit_in_kind(g, entry, j, lane + 32 * s));
        }
    }
    if (CHECKSUM) {
        uint32_t s_mod, w_mod;
        zf_sums_reduce(g, page_sums, page_words, s_mod, w_mod);
        if (lane == 0) {
            atomicAdd(&s_sums[0], s_mod);
            atomicAdd(&s_sums[1], w_mod);
        }
    }
    __syncthreads();
    if (CHECKSUM && threadIdx.x == 0) kv_adler_commit32(s_sums[0] % (uint32_t)KV_ADLER_MOD, s_sums[1] % (uint32_t)KV_ADLER_MOD, 0, sums);
    const unsigned page_len = g.metadata_len + ZIPFUSION_CODED_BLOCK_LEN * g.page_blocks +
                              (ZIPFUSION_RAW_BLOCK_LEN - ZIPFUSION_CODED_BLOCK_LEN) * __popc(s_raw[0]);
    const bool container = slot_stride == 0;
    if (container && threadIdx.x == 0)
        zf_publish(state + 1 + page, (page == 0 ? ZF_PREFIX : ZF_AGGREGATE) | page_len);
    // Each warp encodes its blocks in place: a lane's 32 bytes of a block replace the
    // tile's words at 32 lane bytes once every lane has gathered its values.
    for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
        unsigned short* tile = tiles + b * ZF_TILE_WORDS;
        uint4 a, c;
        zf_encode_lane(tile, zf_entry_of(g, b) & 1, page_metas[b], a, c);
        __syncwarp();
        reinterpret_cast<uint4*>(tile)[2 * lane] = a;
        reinterpret_cast<uint4*>(tile)[2 * lane + 1] = c;
    }
    if (warp == 0) {
        unsigned long long at;
        if (!container) {
            at = page * slot_stride;
            if (lane == 0) lens[page] = page_len;
        } else {
            const unsigned long long per = g.group_pages, group = page / per;
            const unsigned long long before = page == 0 ? 0 : zf_look_back(state + 1, page, page_len);
            at = ZIPFUSION_HEADER_LEN + before + group * tail_len;
            if (lane == 0) {
                offsets[group * (per + 1) + page % per] = at;
                if (page % per == per - 1) offsets[group * (per + 1) + per] = at + page_len;
            }
        }
        if (lane == 0) s_at = at;
    }
    __syncthreads();
    unsigned char* dst = out + s_at;
    for (unsigned t = threadIdx.x; t < g.metadata_len / 4; t += blockDim.x)
        reinterpret_cast<unsigned*>(dst)[t] = zf_metadata_word(g, t, page_metas, s_raw, s_raw + 1);
    for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
        const uint4* tile = reinterpret_cast<const uint4*>(tiles + b * ZF_TILE_WORDS);
        zf_store_lane(dst + zf_block_at(g, s_raw, s_raw + 1, b), page_metas[b], lane, tile[2 * lane],
                      tile[2 * lane + 1]);
    }
}

extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_fused(const unsigned short* __restrict__ words, ZfPages g, unsigned long long* state,
                           unsigned long long* __restrict__ offsets, unsigned long long tail_len,
                           unsigned long long slot_stride, unsigned* __restrict__ lens,
                           unsigned char* __restrict__ out, unsigned long long* __restrict__ sums) {
    zf_encode_fused<false>(words, g, state, offsets, tail_len, slot_stride, lens, out, sums);
}

// zipfusion_encode_fused with the checksum's sums of the values folded into `sums`.
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_fused_checksum(const unsigned short* __restrict__ words, ZfPages g, unsigned long long* state,
                           unsigned long long* __restrict__ offsets, unsigned long long tail_len,
                           unsigned long long slot_stride, unsigned* __restrict__ lens,
                           unsigned char* __restrict__ out, unsigned long long* __restrict__ sums) {
    zf_encode_fused<true>(words, g, state, offsets, tail_len, slot_stride, lens, out, sums);
}

// One CTA after zipfusion_encode_fused: a container's length into *total (and, for a
// cache without full pages, each group's tail offset), and its header, with the checksum
// from `sums` (when non-null) and its CRC-32C.
extern "C" __global__ void zipfusion_encode_header(unsigned long long* __restrict__ offsets, unsigned long long groups,
                                                   unsigned long long pages_per_group, unsigned long long tail_len,
                                                   unsigned long long* __restrict__ total, ZfHeader header,
                                                   const unsigned long long* __restrict__ sums,
                                                   unsigned long long value_bytes, unsigned char* __restrict__ out) {
    if (pages_per_group == 0) {
        for (unsigned long long l = threadIdx.x; l < groups; l += blockDim.x)
            offsets[l] = ZIPFUSION_HEADER_LEN + l * tail_len;
    }
    if (threadIdx.x != 0) return;
    *total = pages_per_group == 0 ? ZIPFUSION_HEADER_LEN + groups * tail_len
                                  : offsets[(groups - 1) * (pages_per_group + 1) + pages_per_group] + tail_len;
    __align__(16) unsigned char h[ZIPFUSION_HEADER_LEN];
    for (int i = 0; i < 3; ++i) reinterpret_cast<uint4*>(h)[i] = header.bytes[i];
    if (sums) {
        const uint32_t c = kv_adler_from_sums(value_bytes, sums[0], sums[1]);
        for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CHECKSUM + i] = (unsigned char)(c >> (8 * i));
    }
    const uint32_t crc = kv_crc32c_skip(h, ZIPFUSION_HEADER_LEN, ZIPFUSION_HEADER_CRC);
    for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CRC + i] = (unsigned char)(crc >> (8 * i));
    for (int i = 0; i < 3; ++i) reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(h)[i];
}

// Copies each group's BF16 tail between words and a container: the K tail (tail_words
// words from words + group * group_stride + tail_first) then the V tail (kind_stride words
// later), at bytes offsets[group * (pages_per_group + 1) + pages_per_group] of the
// container (a group without pages has only its tail's offset in the table).
// to_container: words -> container (encode), else container -> words (decode).
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_tails(unsigned short* words, ZfPages g, unsigned long long groups, unsigned long long tail_first,
                    unsigned long long tail_words, const unsigned long long* __restrict__ offsets,
                    unsigned long long pages_per_group, unsigned char* container, unsigned to_container,
                    unsigned long long* __restrict__ sums) {
    // tail_words is a multiple of 32 (16-byte units: tail_words / 8 per kind).
    const unsigned long long units = tail_words / 8, total = groups * 2 * units;
    // The checksum's sums of the values copied (when sums is not null), modulo 65521 per
    // unit: a tail is a small share of a cache.
    const unsigned long long m = KV_ADLER_MOD;
    unsigned long long s_mod = 0, w_mod = 0;
    for (unsigned long long u = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; u < total;
         u += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long group = u / (2 * units), kind = (u / units) % 2, k = u % units;
        const unsigned long long at = group * g.group_stride + kind * g.kind_stride + tail_first + 8 * k;
        uint4* w = reinterpret_cast<uint4*>(words + at);
        uint4* c = reinterpret_cast<uint4*>(container + offsets[group * (pages_per_group + 1) + pages_per_group] +
                                            2 * kind * tail_words) +
                   k;
        const uint4 value = to_container ? *w : *c;
        if (to_container) {
            *c = value;
        } else {
            *w = value;
        }
        if (sums) {
            uint32_t sum = 0, weighted = 0;
            kv_adler_add16(value, 0u, sum, weighted);
            s_mod = (s_mod + sum) % m;
            w_mod = (w_mod + (2 * at) % m * sum + weighted) % m;
        }
    }
    if (sums) {
        const unsigned full = 0xffffffffu;
        const uint32_t s_warp = __reduce_add_sync(full, (uint32_t)s_mod) % (uint32_t)m;
        const uint32_t w_warp = __reduce_add_sync(full, (uint32_t)w_mod) % (uint32_t)m;
        if ((threadIdx.x & 31) == 0) kv_adler_commit32(s_warp, w_warp, 0, sums);
    }
}

// ---------------------------------------------------------------------------------------
// Decode.
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ void zf_flag(unsigned* status, unsigned code) { atomicCAS(status, 0u, code); }

// Blocks a warp loads before restoring the first of them: enough bytes in flight per SM
// to cover the DRAM latency at the registers a lane can spare (8 words a block).
#define ZF_DECODE_AHEAD 3
// CTAs per SM the decoder asks its registers to allow (__launch_bounds__); its checksum
// variant holds the sums too and takes one CTA fewer rather than spill.
#define ZF_DECODE_CTAS 6
#define ZF_DECODE_CHECKSUM_CTAS 5

// Block b's metadata byte in the page at `page_src` (spec 5.1).
__device__ __forceinline__ unsigned zf_meta_byte(const ZfPages& g, const unsigned char* page_src, unsigned b) {
    const unsigned entry = zf_entry_of(g, b);
    return page_src[entry * g.entry_stride + ZIPFUSION_OFFSET_LEN + b - entry * g.blocks_per_entry];
}

// The checks of spec 6 on a page's metadata (what zipfusion::page_info checks, entry by
// entry): the first failing entry's first failing check's status code, or 0. A warp's
// collective, lane e taking entry e (32 at a time). `limit` is the page's bytes.
__device__ __forceinline__ unsigned zf_check_page(const ZfPages& g, const unsigned char* __restrict__ page_src,
                                                  unsigned long long limit) {
    const unsigned lane = threadIdx.x & 31, full = 0xffffffffu;
    const unsigned entries = 2 * g.heads;
    unsigned raw_carry = 0;
    for (unsigned e0 = 0; e0 < entries; e0 += 32) {
        const unsigned e = e0 + lane;
        unsigned code = 0, raws = 0, stored = 0;
        if (e < entries) {
            const unsigned char* entry = page_src + e * g.entry_stride;
            for (unsigned j = 0; j < g.blocks_per_entry; ++j) {
                const unsigned m = entry[ZIPFUSION_OFFSET_LEN + j];
                if (m == ZIPFUSION_RAW_BLOCK_BYTE) {
                    ++raws;
                } else if (!code) {
                    if ((m & ZIPFUSION_ZERO_AWARE_FLAG) && g.variant == 0) code = ZIPFUSION_STATUS_ZERO_AWARE_IN_BASE;
                    else if ((m & 0x7fu) > ZIPFUSION_MAX_HALF_BASE) code = ZIPFUSION_STATUS_HALF_BASE_TOO_LARGE;
                }
            }
            for (unsigned k = ZIPFUSION_OFFSET_LEN + g.blocks_per_entry; k < g.entry_stride && !code; ++k)
                if (entry[k]) code = ZIPFUSION_STATUS_PADDING_NOT_ZERO;
            stored = entry[0] | (unsigned)entry[1] << 8 | (unsigned)entry[2] << 16 | (unsigned)entry[3] << 24;
        }
        // Raw blocks of the entries before e: an exclusive scan over the lanes.
        unsigned before = raws;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const unsigned y = __shfl_up_sync(full, before, d);
            if (lane >= d) before += y;
        }
        const unsigned total = __shfl_sync(full, before, 31);
        before += raw_carry - raws;
        raw_carry += total;
        if (e < entries) {
            const unsigned long long expected =
                g.metadata_len + (unsigned long long)ZIPFUSION_CODED_BLOCK_LEN * e * g.blocks_per_entry +
                (ZIPFUSION_RAW_BLOCK_LEN - ZIPFUSION_CODED_BLOCK_LEN) * (unsigned long long)before;
            const unsigned long long len = (unsigned long long)ZIPFUSION_CODED_BLOCK_LEN * g.blocks_per_entry +
                                           (ZIPFUSION_RAW_BLOCK_LEN - ZIPFUSION_CODED_BLOCK_LEN) * raws;
            if (!code && stored > limit) code = ZIPFUSION_STATUS_OFFSET_PAST_PAGE;
            if (!code && stored != expected) code = ZIPFUSION_STATUS_OFFSET_MISMATCH;
            if (!code && expected + len > limit) code = ZIPFUSION_STATUS_TRUNCATED;
        }
        const unsigned failing = __ballot_sync(full, code != 0);
        if (failing) return __shfl_sync(full, code, __ffs(failing) - 1);
    }
    return 0;
}

// One warp per page: checks the page's metadata (spec 6, rows 1-7: what
// zipfusion::page_info checks) and, when it is valid, decodes its blocks into words,
// ZF_DECODE_AHEAD blocks' loads in flight at a time. Page i lies at src + i * slot_stride
// with slot_stride bytes to it when slot_stride is nonzero (a pool of fixed slots), else
// at src + offsets[(i / group_pages) * (group_pages + 1) + i % group_pages] with the rest
// of the container's src_len bytes to it (a container, whose offsets the host walked).
// An invalid page leaves a status code and writes nothing. No barriers: a warp's pages
// are its own.
template <bool CHECKSUM>
__device__ __forceinline__ void zf_decode_pages(const unsigned char* __restrict__ src, unsigned long long src_len, ZfPages g,
                           unsigned long long pages, const unsigned long long* __restrict__ offsets,
                           unsigned long long slot_stride, unsigned short* __restrict__ words,
                           unsigned* __restrict__ status, unsigned long long* __restrict__ sums) {
    __shared__ __align__(16) unsigned short tiles[ZF_WARPS][ZF_TILE_WORDS];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, full = 0xffffffffu;
    unsigned short* tile = tiles[warp];
    const unsigned long long warps = (unsigned long long)gridDim.x * ZF_WARPS;
    for (unsigned long long page = (unsigned long long)blockIdx.x * ZF_WARPS + warp; page < pages; page += warps) {
        const unsigned long long at =
            slot_stride ? page * slot_stride
                        : offsets[(page / g.group_pages) * (g.group_pages + 1) + page % g.group_pages];
        const unsigned long long limit = slot_stride ? slot_stride : src_len - at;
        if (limit < g.metadata_len) {
            if (lane == 0) zf_flag(status, ZIPFUSION_STATUS_TRUNCATED);
            continue;
        }
        const unsigned char* page_src = src + at;
        const unsigned code = zf_check_page(g, page_src, limit);
        if (code) {
            if (lane == 0) zf_flag(status, code);
            continue;
        }
        const unsigned long long page_words = zf_page_words(g, page);
        ZfPageSums page_sums = {0, 0, 0, 0};
        // 32 blocks at a time: lane l holds block 32 c + l's metadata byte and position.
        for (unsigned c0 = 0; c0 < g.page_blocks; c0 += 32) {
            const unsigned b = c0 + lane;
            const unsigned mine = b < g.page_blocks ? zf_meta_byte(g, page_src, b) : 0u;
            const unsigned raws = __ballot_sync(full, b < g.page_blocks && mine == ZIPFUSION_RAW_BLOCK_BYTE);
            // The chunk's first block starts at its entry's stored offset (the checks made
            // every offset agree with the blocks before it) plus the entry's blocks before
            // it (none when D / 32 divides 32).
            const unsigned first_entry = zf_entry_of(g, c0);
            const unsigned char* fe = page_src + first_entry * g.entry_stride;
            unsigned chunk_at = fe[0] | (unsigned)fe[1] << 8 | (unsigned)fe[2] << 16 | (unsigned)fe[3] << 24;
            for (unsigned k = first_entry * g.blocks_per_entry; k < c0; ++k)
                chunk_at += zf_block_len(zf_meta_byte(g, page_src, k));
            const unsigned count = min(32u, g.page_blocks - c0);
            for (unsigned k0 = 0; k0 < count; k0 += ZF_DECODE_AHEAD) {
                uint4 a[ZF_DECODE_AHEAD], c[ZF_DECODE_AHEAD];
                unsigned metas[ZF_DECODE_AHEAD];
#pragma unroll
                for (int s = 0; s < ZF_DECODE_AHEAD; ++s) {
                    const unsigned k = k0 + s;
                    metas[s] = __shfl_sync(full, mine, k & 31);
                    if (k < count) {
                        const unsigned below = raws & ((1u << k) - 1u);
                        const unsigned pos = chunk_at + ZIPFUSION_CODED_BLOCK_LEN * k +
                                             (ZIPFUSION_RAW_BLOCK_LEN - ZIPFUSION_CODED_BLOCK_LEN) * __popc(below);
                        zf_load_lane(page_src + pos, metas[s], lane, a[s], c[s]);
                    }
                }
#pragma unroll
                for (int s = 0; s < ZF_DECODE_AHEAD; ++s) {
                    const unsigned k = k0 + s, blk = c0 + k;
                    if (k >= count) break;
                    const unsigned entry = zf_entry_of(g, blk), j = blk - entry * g.blocks_per_entry;
                    unsigned p[8];
                    zf_unpack(a[s], c[s], metas[s], p);
                    if (entry & 1) {
                        zf_scatter<1>(tile, lane, p);
                    } else {
                        zf_scatter<0>(tile, lane, p);
                    }
                    __syncwarp();
                    const unsigned long long base = zf_block_words(g, page_words, entry, j);
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const unsigned u = lane + 32 * r;
                        const uint4 row = *reinterpret_cast<const uint4*>(tile + zf_row_offset(u));
                        *reinterpret_cast<uint4*>(words + base + zf_row_word(g, u)) = row;
                        if (CHECKSUM) zf_sums_add(page_sums, entry & 1, row, zf_unit_in_kind(g, entry, j, u));
                    }
                    __syncwarp();
                }
            }
        }
        if (CHECKSUM) {
            uint32_t s_mod, w_mod;
            zf_sums_reduce(g, page_sums, page_words, s_mod, w_mod);
            if (lane == 0) kv_adler_commit32(s_mod, w_mod, 0, sums);
        }
    }
}

extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS, ZF_DECODE_CTAS)
    zipfusion_decode_pages(const unsigned char* __restrict__ src, unsigned long long src_len, ZfPages g,
                           unsigned long long pages, const unsigned long long* __restrict__ offsets,
                           unsigned long long slot_stride, unsigned short* __restrict__ words,
                           unsigned* __restrict__ status, unsigned long long* __restrict__ sums) {
    zf_decode_pages<false>(src, src_len, g, pages, offsets, slot_stride, words, status, sums);
}

// zipfusion_decode_pages with the checksum's sums of the values folded into `sums`.
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS, ZF_DECODE_CHECKSUM_CTAS)
    zipfusion_decode_pages_checksum(const unsigned char* __restrict__ src, unsigned long long src_len, ZfPages g,
                           unsigned long long pages, const unsigned long long* __restrict__ offsets,
                           unsigned long long slot_stride, unsigned short* __restrict__ words,
                           unsigned* __restrict__ status, unsigned long long* __restrict__ sums) {
    zf_decode_pages<true>(src, src_len, g, pages, offsets, slot_stride, words, status, sums);
}

