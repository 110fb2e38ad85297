// SplitZip GPU encoder and decoder, byte-identical to crates/splitzip (the CPU
// reference). Format: docs/formats/splitzip.md; design: the SplitZip paper (top-16
// codebook, 4-bit codes, chunk-local escapes), with escapes compacted on the device by
// prefix sums, so no host synchronisation is needed.
//
// Work unit: a tile of SPLITZIP_TILE_VALUES values (a whole number of chunks; chunk sizes up
// to SPLITZIP_TILE_VALUES are supported on the GPU), one CTA of SPLITZIP_THREADS threads per tile;
// each thread owns groups of 8 values (16 bytes of words, 4 bytes of codes, 8 bytes of
// sign+mantissa).
#include "../common/adler.cuh"
#include "../common/bf16_field.cuh"
#include "../common/crc32c.cuh"
#include "splitzip_format.gen.cuh"

#define SZ_GROUPS_PER_THREAD (SPLITZIP_TILE_VALUES / SPLITZIP_GROUP_VALUES / SPLITZIP_THREADS)  // 4
// Decoder occupancy: 6 CTAs x 256 threads per SM (caps registers at 40 without spills; 8 spilled).
#define SZ_DECODE_CTAS_PER_SM 6
// Encoder occupancy: at least 6 CTAs x 256 threads per SM (a cap of 40 registers), where 5
// (48 registers) measured slower (docs/perf/splitzip-gpu.md). The tile kernel without the
// checksum now needs 32 registers, so 8 CTAs fit; the checksum's needs 40.
#define SZ_ENCODE_CTAS_PER_SM 6

// Chunk sizes are powers of two (spec section 3): divide and take remainders by shifts
// and masks. A 64-bit division by a run-time value costs dozens of instructions, which
// in the per-group paths was measured as a large share of both kernels' instructions.
__device__ __forceinline__ unsigned sz_chunk_shift(unsigned chunk_size) { return __ffs(chunk_size) - 1; }

__device__ __forceinline__ unsigned long long sz_align16(unsigned long long x) {
    return (x + SPLITZIP_SECTION_ALIGN - 1) / SPLITZIP_SECTION_ALIGN * SPLITZIP_SECTION_ALIGN;
}

// Section offsets that depend only on (n, chunk_size): spec section 3.
struct SzLayout {
    unsigned long long codes, sign_mantissa, escape_offsets, escape_positions, chunks;
};

__device__ __forceinline__ SzLayout sz_layout(unsigned long long n, unsigned chunk_size) {
    SzLayout l;
    l.chunks = (n + chunk_size - 1) >> sz_chunk_shift(chunk_size);
    l.codes = SPLITZIP_HEADER_LEN;
    l.sign_mantissa = sz_align16(l.codes + (n + 1) / 2);
    l.escape_offsets = sz_align16(l.sign_mantissa + n);
    l.escape_positions = sz_align16(l.escape_offsets + 4 * (l.chunks + 1));
    return l;
}

// Exclusive scan of one u64 per thread across a CTA of SPLITZIP_THREADS threads; returns the
// prefix and writes the CTA total to *total. All threads must call it. The tiles kernel
// scans four 16-bit counts packed in one u64 (a thread's four groups), which never
// carry into each other because a pass holds at most SPLITZIP_THREADS * 8 = 2048 escapes.
__device__ __forceinline__ unsigned long long sz_cta_exclusive_scan(unsigned long long v,
                                                                    unsigned long long* warp_sums,
                                                                    unsigned long long* total) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long x = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        unsigned long long t = lane < SPLITZIP_THREADS / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < SPLITZIP_THREADS / 32; d <<= 1) {
            const unsigned long long y = __shfl_up_sync(0xffffffffu, t, d);
            if (lane >= d) t += y;
        }
        if (lane < SPLITZIP_THREADS / 32) warp_sums[lane] = t;  // inclusive per warp
    }
    __syncthreads();
    *total = warp_sums[SPLITZIP_THREADS / 32 - 1];
    return (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
}

// The encoder is two kernels on one stream after a memset, with no host
// synchronisation (CUDA-graph safe):
//   1. splitzip_encode_tiles  (one CTA per tile) codes, sign+mantissa, tile-relative
//      chunk escape offsets, the tile's escape count (also added to its superblock's
//      sum), its escapes to tile-local scratch;
//   2. splitzip_encode_place  (one warp per two tiles) sums the superblock sums (total
//      E, and the escapes before its superblock) and the tile counts before its tiles in
//      their superblock, decides coded vs raw and, if coded, makes the tiles' chunk
//      offsets absolute and copies their escapes to their sections (one CTA per
//      superblock doing the same serially took 37 us per 0.5 GB on an H200); the first
//      warp also writes the header and padding; if raw, each warp copies its tiles'
//      words instead. A third kernel that wrote the header (and the raw form) after
//      placement cost a launch and one thread's chain of CRC lookups on every encode
//      (docs/perf/splitzip-gpu.md).
// Placement of a coded payload touches only per-tile counts and the escapes (~0.1% of
// the bytes), so the streaming kernel never waits on another tile (an earlier
// single-kernel version with a decoupled look-back serialised the tiles on it:
// docs/perf/splitzip-gpu.md).
//
// Workspace (u64 words): [0] encoded length, [1] total escapes, [2, 3] the Adler-32 sums
// of the input (with the checksum), then one sum per superblock, then one count per
// tile. Scratch: per tile SPLITZIP_TILE_VALUES u16 positions and SPLITZIP_TILE_VALUES u8
// exponents.
#define SZ_WS_LEN 0
#define SZ_WS_TOTAL 1
#define SZ_WS_ADLER 2
static_assert(SZ_WS_ADLER + 2 == SPLITZIP_WORKSPACE_HEADER_WORDS, "the superblock sums follow the four header words");

// Exponent -> code (0-15), or SPLITZIP_NO_CODE for an exponent outside the codebook:
// code 0 with bit 7 set, so coding is branch-free. Passed by value as a kernel parameter.
static_assert(SPLITZIP_NO_CODE == 0x80u, "the tile kernels take bit 7 of an entry as the escape flag and its low nibble as the code");
struct SzCodeTable {
    uint8_t code[256];
};

__device__ __forceinline__ unsigned long long sz_tiles(unsigned long long n) {
    return (n + SPLITZIP_TILE_VALUES - 1) / SPLITZIP_TILE_VALUES;
}

__device__ __forceinline__ unsigned long long* sz_tile_counts(unsigned long long* workspace, unsigned long long n) {
    return workspace + SPLITZIP_WORKSPACE_HEADER_WORDS + (sz_tiles(n) + SPLITZIP_SUPER_TILES - 1) / SPLITZIP_SUPER_TILES;
}

// Whether a coded payload with `escapes` escapes fits in the raw bound (spec section 4):
// the encoder stores raw otherwise.
__device__ __forceinline__ bool sz_coded_fits(unsigned long long n, unsigned chunk_size, unsigned long long escapes,
                                              unsigned long long* exponents_at, unsigned long long* coded_len) {
    const SzLayout lay = sz_layout(n, chunk_size);
    *exponents_at = sz_align16(lay.escape_positions + 2 * escapes);
    *coded_len = *exponents_at + escapes;
    return *coded_len <= SPLITZIP_HEADER_LEN + 2 * n && escapes <= 0xffffffffull;
}

// Four codes (table entries, byte i = value i) -> 16 bits of packed 4-bit codes and a
// 4-bit escape mask (bit i = value i escaped).
__device__ __forceinline__ void sz_pack_codes(uint32_t entries4, uint32_t* codes16, uint32_t* mask4) {
    uint32_t y = entries4 & 0x0f0f0f0fu;  // an escape entry has code 0
    y = (y | (y >> 4)) & 0x00ff00ffu;
    *codes16 = (y | (y >> 8)) & 0xffffu;
    *mask4 = (((entries4 >> 7) & 0x01010101u) * 0x01020408u) >> 24;
}

__device__ __forceinline__ uint32_t sz_lookup4(const uint8_t* table, uint32_t e4) {
    const uint32_t c0 = table[e4 & 0xffu], c1 = table[(e4 >> 8) & 0xffu];
    const uint32_t c2 = table[(e4 >> 16) & 0xffu], c3 = table[e4 >> 24];
    return __byte_perm(__byte_perm(c0, c1, 0x0040), __byte_perm(c2, c3, 0x0040), 0x5410);
}

// The Adler-32 sums of one tile's input words, for a payload that is raw whatever the
// data (tiny n), where the tile code below does not run. All threads of the CTA call it.
__device__ __noinline__ void sz_sum_tile(const uint16_t* __restrict__ words, unsigned long long n,
                                         unsigned long long* __restrict__ sums) {
    __shared__ unsigned long long scratch[2 * SPLITZIP_THREADS / 32];
    const unsigned long long base = (unsigned long long)blockIdx.x * SPLITZIP_TILE_VALUES;
    const unsigned long long end = base + SPLITZIP_TILE_VALUES < n ? base + SPLITZIP_TILE_VALUES : n;
    uint32_t s = 0, ws = 0;
    for (unsigned long long v = base + threadIdx.x; v < end; v += SPLITZIP_THREADS)
        kv_adler_add_word(words[v], (uint32_t)(2 * (v - base)), s, ws);
    kv_adler_cta_flush(s, ws, 2 * base, scratch, sums);
}

// A thread's Adler-32 sums in a tile, as running sums over its groups
// (kv_adler_chain16): group u starts at byte G (256 u + tid) of the tile, G the group's
// bytes, so the weighted sum is G tid S + 256 G (3 S - q) + o, with q the byte sum after
// groups 0, 1 and 2. sz_adler_next subtracts 256 G q from o as it goes (one multiply-add
// a group, and no register for q: the tile kernels run at their register cap), and
// sz_adler_ws adds the rest. The sum is below 2^32 (positions below 2^14, 64 bytes a
// thread), so arithmetic modulo 2^32 is exact.
#define SZ_ADLER_PASS (2 * SPLITZIP_GROUP_VALUES * SPLITZIP_THREADS)  // bytes between a thread's groups
static_assert(SZ_GROUPS_PER_THREAD == 4, "q holds the sums after groups 0, 1 and 2");

// Before group u > 0 (whether or not it holds values).
__device__ __forceinline__ void sz_adler_next(uint32_t s, uint32_t& o) { o -= SZ_ADLER_PASS * s; }

__device__ __forceinline__ uint32_t sz_adler_ws(uint32_t s, uint32_t o) {
    return (2u * SPLITZIP_GROUP_VALUES * threadIdx.x + 3u * SZ_ADLER_PASS) * s + o;
}

// The tile kernel; kSums also adds the tile's Adler-32 sums to the workspace (the
// encoder's checksum option), in a kernel of its own so that the default one keeps its
// registers.
template <bool kSums>
__device__ __forceinline__ void sz_encode_tiles(const uint16_t* __restrict__ words, unsigned long long n,
                                                unsigned chunk_size, const SzCodeTable& code_table_param,
                                                uint8_t* __restrict__ out, uint16_t* __restrict__ scratch_positions,
                                                uint8_t* __restrict__ scratch_exponents,
                                                unsigned long long* __restrict__ workspace) {
    __shared__ uint8_t code_table[256];
    __shared__ unsigned long long warp_sums[SPLITZIP_THREADS / 32];
    const SzLayout lay = sz_layout(n, chunk_size);
    // When the sections of fixed place alone exceed the raw size (tiny n), the payload
    // is raw: write nothing (the workspace was zeroed, so E reads as 0 and the
    // placement kernel writes the raw form). Every write below is then inside 128 + 2n
    // bytes.
    if (lay.escape_positions > SPLITZIP_HEADER_LEN + 2 * n) {
        if (kSums) sz_sum_tile(words, n, workspace + SZ_WS_ADLER);
        return;
    }
    for (int i = threadIdx.x; i < 256; i += SPLITZIP_THREADS) code_table[i] = code_table_param.code[i];
    __syncthreads();
    const unsigned long long tile = blockIdx.x;
    const unsigned long long base = tile * SPLITZIP_TILE_VALUES;
    // Offsets inside the tile are 32-bit, and so is the check for the last, partial
    // group: 64-bit value indices in every group's checks and addresses were a large
    // share of the tile code's instructions. A tile is a whole number of chunks, so a
    // value starts a chunk exactly when its offset in the tile does.
    const unsigned long long left = n - base;
    const unsigned tile_values = left < SPLITZIP_TILE_VALUES ? (unsigned)left : SPLITZIP_TILE_VALUES;
    const uint16_t* tile_words = words + base;
    uint32_t* tile_codes = reinterpret_cast<uint32_t*>(out + lay.codes + base / 2);
    uint2* tile_sign_mantissa = reinterpret_cast<uint2*>(out + lay.sign_mantissa + base);
    uint32_t* tile_offsets = reinterpret_cast<uint32_t*>(out + lay.escape_offsets) + (base >> sz_chunk_shift(chunk_size));

    // Load every group first (4 x 16 B in flight per thread), then code them.
    uint4 w[SZ_GROUPS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        const unsigned in_tile = (u * SPLITZIP_THREADS + threadIdx.x) * SPLITZIP_GROUP_VALUES;
        if (in_tile + SPLITZIP_GROUP_VALUES <= tile_values) {
            w[u] = __ldcs(reinterpret_cast<const uint4*>(tile_words + in_tile));
        } else {
            uint32_t t[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) t[k] = in_tile + k < tile_values ? tile_words[in_tile + k] : 0;
            w[u] = make_uint4(t[0] | (t[1] << 16), t[2] | (t[3] << 16), t[4] | (t[5] << 16), t[6] | (t[7] << 16));
        }
    }
    uint32_t adler_s = 0, adler_o = 0;  // kSums: see sz_adler_ws
    if (kSums) {
#pragma unroll
        for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {  // values past n were loaded as 0
            if (u > 0) sz_adler_next(adler_s, adler_o);
            kv_adler_chain16(w[u], adler_s, adler_o);
        }
    }
    // Every value's exponent at its index in the tile, for the escape loop below: four
    // conflict-free 8-byte stores a thread, where reading an escaped value's exponent
    // back from the loaded words (selects over 16 registers that stay live) cost
    // registers and instructions on every tile.
    __shared__ __align__(8) uint8_t tile_exponents[SPLITZIP_TILE_VALUES];
    uint32_t esc_mask[SZ_GROUPS_PER_THREAD];
    unsigned long long packed_counts = 0;
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        const unsigned in_tile = (u * SPLITZIP_THREADS + threadIdx.x) * SPLITZIP_GROUP_VALUES;
        uint32_t e_lo, e_hi, sf_lo, sf_hi;
        kv_split_quad(w[u].x, w[u].y, &e_lo, &sf_lo);
        kv_split_quad(w[u].z, w[u].w, &e_hi, &sf_hi);
        *reinterpret_cast<uint2*>(tile_exponents + in_tile) = make_uint2(e_lo, e_hi);
        uint32_t codes_lo, codes_hi, mask_lo, mask_hi;
        sz_pack_codes(sz_lookup4(code_table, e_lo), &codes_lo, &mask_lo);
        sz_pack_codes(sz_lookup4(code_table, e_hi), &codes_hi, &mask_hi);
        uint32_t codes = codes_lo | (codes_hi << 16), mask = mask_lo | (mask_hi << 4);
        const unsigned group = u * SPLITZIP_THREADS + threadIdx.x;
        if (in_tile + SPLITZIP_GROUP_VALUES <= tile_values) {
            __stcs(tile_codes + group, codes);
            __stcs(tile_sign_mantissa + group, make_uint2(sf_lo, sf_hi));
        } else if (in_tile < tile_values) {
            // The last, partial group: values past n are neither coded nor escaped.
            const unsigned valid = tile_values - in_tile;
            mask &= (1u << valid) - 1u;
            codes &= valid >= 8 ? 0xffffffffu : (1u << (4 * valid)) - 1u;
            uint8_t* group_codes = reinterpret_cast<uint8_t*>(tile_codes + group);
            uint8_t* group_sign_mantissa = reinterpret_cast<uint8_t*>(tile_sign_mantissa + group);
            for (unsigned k = 0; k < (valid + 1) / 2; ++k) group_codes[k] = (codes >> (8 * k)) & 0xffu;
            for (unsigned k = 0; k < valid; ++k) group_sign_mantissa[k] = ((k < 4 ? sf_lo : sf_hi) >> (8 * (k % 4))) & 0xffu;
        } else {
            mask = 0;
        }
        esc_mask[u] = mask;
        packed_counts |= (unsigned long long)__popc(mask) << (16 * u);
    }
    unsigned long long pass_totals;
    const unsigned long long before_packed = sz_cta_exclusive_scan(packed_counts, warp_sums, &pass_totals);

    unsigned pass_base = 0;  // escapes of this tile before pass u
    unsigned first[SZ_GROUPS_PER_THREAD];  // see the escape loop
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        const unsigned in_tile = (u * SPLITZIP_THREADS + threadIdx.x) * SPLITZIP_GROUP_VALUES;
        const unsigned start = pass_base + (unsigned)((before_packed >> (16 * u)) & 0xffffu);
        // The group that starts a chunk writes the chunk's offset relative to the tile;
        // the place kernel adds the escapes before the tile.
        if (in_tile < tile_values && (in_tile & (chunk_size - 1)) == 0)
            tile_offsets[in_tile >> sz_chunk_shift(chunk_size)] = start;
        first[u] = start;
        pass_base += (unsigned)((pass_totals >> (16 * u)) & 0xffffu);
    }
    // The tile's escapes go to scratch in value order: pass by pass, thread by thread. One
    // loop over all of a thread's escapes, so that a warp runs as many iterations as its
    // busiest thread has escapes, where a loop per pass ran that maximum for every pass.
    // Escape bit b = 8 u + k of the thread goes to slot first[u] + (the thread's escapes
    // before bit b) once first[u] has the thread's escapes in passes before u taken off.
    if (packed_counts) {
        const uint32_t escapes = esc_mask[0] | (esc_mask[1] << 8) | (esc_mask[2] << 16) | (esc_mask[3] << 24);
#pragma unroll
        for (int u = 1; u < SZ_GROUPS_PER_THREAD; ++u) first[u] -= (unsigned)__popc(escapes & ((1u << (8 * u)) - 1u));
        uint16_t* tile_positions = scratch_positions + base;
        uint8_t* tile_escaped = scratch_exponents + base;
        unsigned i = 0;  // the thread's escapes before bit b
        for (uint32_t m = escapes; m; m &= m - 1, ++i) {
            const unsigned b = __ffs(m) - 1, u = b / 8;
            const unsigned in_tile = (u * SPLITZIP_THREADS + threadIdx.x) * SPLITZIP_GROUP_VALUES + b % 8;
            // Register arrays are indexed by constants only (no local memory).
            const unsigned slot = (u < 2 ? (u == 0 ? first[0] : first[1]) : (u == 2 ? first[2] : first[3])) + i;
            tile_positions[slot] = (uint16_t)(in_tile & (chunk_size - 1));
            tile_escaped[slot] = tile_exponents[in_tile];
        }
    }
    if (threadIdx.x == 0) {
        sz_tile_counts(workspace, n)[tile] = pass_base;
        if (pass_base) atomicAdd(workspace + SPLITZIP_WORKSPACE_HEADER_WORDS + tile / SPLITZIP_SUPER_TILES, (unsigned long long)pass_base);
    }
    if (kSums) {
        __shared__ uint32_t adler_scratch[3 * SPLITZIP_THREADS / 32];
        kv_adler_cta_flush_once(adler_s, sz_adler_ws(adler_s, adler_o), 2 * base, adler_scratch,
                                workspace + SZ_WS_ADLER);
    }
}

extern "C" __global__ void __launch_bounds__(SPLITZIP_THREADS, SZ_ENCODE_CTAS_PER_SM)
splitzip_encode_tiles(const uint16_t* __restrict__ words, unsigned long long n, unsigned chunk_size,
                      const SzCodeTable code_table_param, uint8_t* __restrict__ out,
                      uint16_t* __restrict__ scratch_positions, uint8_t* __restrict__ scratch_exponents,
                      unsigned long long* __restrict__ workspace) {
    sz_encode_tiles<false>(words, n, chunk_size, code_table_param, out, scratch_positions, scratch_exponents,
                           workspace);
}

extern "C" __global__ void __launch_bounds__(SPLITZIP_THREADS, SZ_ENCODE_CTAS_PER_SM)
splitzip_encode_tiles_checksum(const uint16_t* __restrict__ words, unsigned long long n, unsigned chunk_size,
                               const SzCodeTable code_table_param, uint8_t* __restrict__ out,
                               uint16_t* __restrict__ scratch_positions, uint8_t* __restrict__ scratch_exponents,
                               unsigned long long* __restrict__ workspace) {
    sz_encode_tiles<true>(words, n, chunk_size, code_table_param, out, scratch_positions, scratch_exponents,
                          workspace);
}

__device__ __forceinline__ uint32_t sz_warp_sum32(uint32_t v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

__device__ void sz_put(uint8_t* p, unsigned long long v, int bytes) {
    for (int i = 0; i < bytes; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

// The header (with its CRC-32C), the padding before each section and the offsets
// section's closing total of a coded payload, or the header of a raw one; the encoded
// length and total to the workspace. One warp calls it (all lanes): lane 0 composes the
// header in shared memory while the lanes copy the CRC table there, so the CRC's 128
// dependent lookups are shared loads rather than constant-cache misses behind global
// loads of the bytes just written; the lanes then store the header in 16-byte words.
__device__ __forceinline__ void sz_write_header(unsigned long long n, unsigned chunk_size, uint4 codebook, bool raw,
                                                unsigned checksum, unsigned long long escapes,
                                                unsigned long long exponents_at, unsigned long long coded_len,
                                                uint8_t* __restrict__ out, unsigned long long* __restrict__ workspace) {
    __shared__ __align__(16) uint8_t header[SPLITZIP_HEADER_LEN];
    __shared__ uint32_t crc_table[256];
    const unsigned lane = threadIdx.x & 31;
    for (unsigned i = lane; i < 256; i += 32) crc_table[i] = kv_crc32c_table.entry[i];
    const SzLayout lay = sz_layout(n, chunk_size);
    const unsigned long long raw_len = SPLITZIP_HEADER_LEN + 2 * n;
    if (lane == 0) {
        uint8_t* h = header;
        for (int i = 0; i < SPLITZIP_HEADER_LEN; ++i) h[i] = 0;
        sz_put(h + SPLITZIP_HEADER_MAGIC, SPLITZIP_MAGIC, 4);
        sz_put(h + SPLITZIP_HEADER_VERSION, SPLITZIP_VERSION, 2);
        sz_put(h + SPLITZIP_HEADER_FLAGS, (raw ? SPLITZIP_FLAG_RAW : 0) | (checksum ? SPLITZIP_FLAG_CHECKSUM : 0), 2);
        if (checksum)
            sz_put(h + SPLITZIP_HEADER_CHECKSUM,
                   kv_adler_from_sums(2 * n, workspace[SZ_WS_ADLER], workspace[SZ_WS_ADLER + 1]), 4);
        sz_put(h + SPLITZIP_HEADER_VALUE_COUNT, n, 8);
        sz_put(h + SPLITZIP_HEADER_CHUNK_SIZE, chunk_size, 4);
        const uint32_t cb[4] = {codebook.x, codebook.y, codebook.z, codebook.w};
#pragma unroll
        for (int i = 0; i < SPLITZIP_CODEBOOK_LEN; ++i) h[SPLITZIP_HEADER_CODEBOOK + i] = (uint8_t)(cb[i / 4] >> (8 * (i % 4)));
        if (raw) {
            sz_put(h + SPLITZIP_HEADER_ENCODED_LEN, raw_len, 8);
        } else {
            sz_put(h + SPLITZIP_HEADER_CHUNK_COUNT, lay.chunks, 4);
            sz_put(h + SPLITZIP_HEADER_ESCAPE_COUNT, escapes, 8);
            sz_put(h + SPLITZIP_HEADER_CODES_OFFSET, lay.codes, 8);
            sz_put(h + SPLITZIP_HEADER_SIGN_MANTISSA_OFFSET, lay.sign_mantissa, 8);
            sz_put(h + SPLITZIP_HEADER_ESCAPE_OFFSETS_OFFSET, lay.escape_offsets, 8);
            sz_put(h + SPLITZIP_HEADER_ESCAPE_POSITIONS_OFFSET, lay.escape_positions, 8);
            sz_put(h + SPLITZIP_HEADER_ESCAPE_EXPONENTS_OFFSET, exponents_at, 8);
            sz_put(h + SPLITZIP_HEADER_ENCODED_LEN, coded_len, 8);
        }
    }
    __syncwarp();
    if (lane == 0)
        sz_put(header + SPLITZIP_HEADER_CRC,
               kv_crc32c_skip_with(header, SPLITZIP_HEADER_LEN, SPLITZIP_HEADER_CRC, crc_table), 4);
    __syncwarp();
    static_assert(SPLITZIP_HEADER_LEN % 16 == 0, "the header is stored in 16-byte words");
    if (lane < SPLITZIP_HEADER_LEN / 16)
        reinterpret_cast<uint4*>(out)[lane] = reinterpret_cast<const uint4*>(header)[lane];
    if (lane != 0) return;
    workspace[SZ_WS_TOTAL] = raw ? 0 : escapes;
    workspace[SZ_WS_LEN] = raw ? raw_len : coded_len;
    if (raw) return;
    // Zero padding before each section (the tiles kernel left the spare nibble of an
    // odd n zero).
    for (unsigned long long i = lay.codes + (n + 1) / 2; i < lay.sign_mantissa; ++i) out[i] = 0;
    for (unsigned long long i = lay.sign_mantissa + n; i < lay.escape_offsets; ++i) out[i] = 0;
    sz_put(out + lay.escape_offsets + 4 * lay.chunks, escapes, 4);
    for (unsigned long long i = lay.escape_offsets + 4 * (lay.chunks + 1); i < lay.escape_positions; ++i) out[i] = 0;
    for (unsigned long long i = lay.escape_positions + 2 * escapes; i < exponents_at; ++i) out[i] = 0;
}

// One warp per SPLITZIP_PLACE_TILES_PER_WARP consecutive tiles (at least one warp: the
// first also writes the header), all warps at once: each sums the superblock sums (the
// total E and the escapes before its superblock) and its superblock's tile counts before
// its tiles, so no warp waits for another. If the coded payload fits, it makes its tiles'
// chunk offsets absolute and copies their escapes to their sections; otherwise it copies
// its tiles' words to the raw payload. A warp's tiles share the sums and the layout
// arithmetic, which is most of its instructions. Indices are 32-bit: a payload holds
// under 2^32 values (the host checks), so at most 2^19 tiles; byte offsets stay 64-bit.
#define SZ_PLACE_TILES SPLITZIP_PLACE_TILES_PER_WARP
#define SZ_PLACE_BATCH 4  // scratch slots a lane loads per tile before the sums (128 a tile)
static_assert(SZ_PLACE_TILES == 2, "a chunk's tile is the first or the second of its warp");
static_assert(SPLITZIP_SUPER_TILES % SZ_PLACE_TILES == 0, "a warp's tiles lie in one superblock");
// Placement occupancy: 5 CTAs x 256 threads per SM (48 registers): at 6 (40 registers)
// ptxas added up the first loaded sums before issuing the last loads, and at 8 it
// spilled loaded values, which waits for them: either way the loads below no longer
// went out in one batch.
#define SZ_PLACE_CTAS_PER_SM 5
extern "C" __global__ void __launch_bounds__(SPLITZIP_PLACE_THREADS, SZ_PLACE_CTAS_PER_SM)
splitzip_encode_place(const uint16_t* __restrict__ words, unsigned long long n, unsigned chunk_size, uint4 codebook,
                      uint8_t* __restrict__ out, const uint16_t* __restrict__ scratch_positions,
                      const uint8_t* __restrict__ scratch_exponents, unsigned long long* __restrict__ workspace,
                      unsigned checksum) {
    const unsigned lane = threadIdx.x & 31;
    const unsigned warp = blockIdx.x * (SPLITZIP_PLACE_THREADS / 32) + threadIdx.x / 32;
    const unsigned tiles = (unsigned)sz_tiles(n);
    const unsigned first_tile = warp * SZ_PLACE_TILES;
    if (first_tile >= (tiles > 0 ? tiles : 1)) return;  // warp-uniform; the kernel has no barrier
    const SzLayout lay = sz_layout(n, chunk_size);
    // The tiles kernel wrote its sections (and scratch and counts) only if they fit.
    const bool sections = tiles > 0 && lay.escape_positions <= SPLITZIP_HEADER_LEN + 2 * n;
    const unsigned supers = (tiles + SPLITZIP_SUPER_TILES - 1) / SPLITZIP_SUPER_TILES;
    const unsigned my_super = first_tile / SPLITZIP_SUPER_TILES;
    const unsigned shift = sz_chunk_shift(chunk_size);
    const unsigned base = first_tile * SPLITZIP_TILE_VALUES;  // below n < 2^32
    // In 64 bits: base + 2 tiles passes 2^32 in the last warp when n is within 16 Ki of it.
    const unsigned long long tiles_end = (unsigned long long)base + SZ_PLACE_TILES * SPLITZIP_TILE_VALUES;
    const unsigned end = (unsigned)(tiles_end < n ? tiles_end : n);
    const unsigned chunks_here = sections ? (end - base + chunk_size - 1) >> shift : 0;
    const unsigned chunks_per_tile = SPLITZIP_TILE_VALUES >> shift;
    const bool second = first_tile + 1 < tiles;
    // The loads go out in one batch before any is used: the sums are read and added in
    // 32 bits (their low halves: no sum of escapes reaches 2^32); the first 256
    // superblocks (2^29 values) and the tiles before this warp's in its superblock as 8
    // predicated loads per lane each (a loop of unknown trip count would wait out a
    // round trip per load past its unrolled part); the first 32 chunk offsets; and each
    // tile's first 128 scratch slots whatever its count (its own slots; those past the
    // count are not used). So a warp whose tiles have up to 128 escapes each and chunks
    // of 512 values or more waits one round trip before its stores; more superblocks,
    // chunks or escapes are read after it.
    const uint32_t* super_sums32 = reinterpret_cast<const uint32_t*>(workspace + SPLITZIP_WORKSPACE_HEADER_WORDS);
    const uint32_t* counts32 = reinterpret_cast<const uint32_t*>(sz_tile_counts(workspace, n));
    const unsigned count0 = sections ? counts32[2 * first_tile] : 0;
    const unsigned count1 = sections && second ? counts32[2 * first_tile + 2] : 0;
    uint32_t all = 0, before = 0;
#pragma unroll
    for (unsigned k = 0; k < SPLITZIP_SUPER_TILES / 32; ++k) {
        const unsigned s = lane + 32 * k;
        const uint32_t v = s < supers ? super_sums32[2 * s] : 0;
        all += v;
        before += s < my_super ? v : 0;
    }
#pragma unroll
    for (unsigned k = 0; k < SPLITZIP_SUPER_TILES / 32; ++k) {
        const unsigned t = my_super * SPLITZIP_SUPER_TILES + lane + 32 * k;
        before += t < first_tile ? counts32[2 * t] : 0;
    }
    // Read before the coded / raw decision: for a raw payload other warps may be
    // overwriting these bytes with words, and the value read is not used.
    uint32_t* offsets = reinterpret_cast<uint32_t*>(out + lay.escape_offsets) + (base >> shift);
    const uint32_t first_offset = lane < chunks_here ? offsets[lane] : 0;
    // Lane l holds a tile's scratch slots 4l .. 4l + 3 (8-byte and 4-byte aligned: a
    // tile's slots start at a multiple of SPLITZIP_TILE_VALUES).
    static_assert(SZ_PLACE_BATCH == 4, "a lane's first escapes of a tile are one 8-byte and one 4-byte load");
    uint2 first_positions[SZ_PLACE_TILES] = {make_uint2(0, 0), make_uint2(0, 0)};
    uint32_t first_exponents[SZ_PLACE_TILES] = {0, 0};
#pragma unroll
    for (unsigned u = 0; u < SZ_PLACE_TILES; ++u) {
        if (sections && (u == 0 || second)) {
            const unsigned at = base + u * SPLITZIP_TILE_VALUES;
            first_positions[u] = reinterpret_cast<const uint2*>(scratch_positions + at)[lane];
            first_exponents[u] = reinterpret_cast<const uint32_t*>(scratch_exponents + at)[lane];
        }
    }
    for (unsigned s = lane + SPLITZIP_SUPER_TILES; s < supers; s += 32) {
        const uint32_t v = super_sums32[2 * s];
        all += v;
        before += s < my_super ? v : 0;
    }
    const unsigned long long escapes = sz_warp_sum32(all);
    const unsigned prefix = sz_warp_sum32(before);
    unsigned long long exponents_at, coded_len;
    const bool coded = sz_coded_fits(n, chunk_size, escapes, &exponents_at, &coded_len);
    if (first_tile == 0)
        sz_write_header(n, chunk_size, codebook, !coded, checksum, escapes, exponents_at, coded_len, out, workspace);
    if (tiles == 0) return;
    if (!coded) {
        // The raw payload: these tiles' words after the header (16-byte words; the
        // output and input are 16-byte aligned and a tile is 16 KiB).
        uint4* raw = reinterpret_cast<uint4*>(out + SPLITZIP_HEADER_LEN + 2ull * base);
        const uint4* from = reinterpret_cast<const uint4*>(words + base);
        const unsigned quads = (end - base) / 8;
        for (unsigned q = lane; q < quads; q += 32) raw[q] = from[q];
        // Offsets from base: base + k would wrap past 2^32 (and never reach end) for n
        // close to 2^32.
        for (unsigned k = 8 * quads + lane; k < end - base; k += 32)
            sz_put(out + SPLITZIP_HEADER_LEN + 2ull * (base + k), words[base + k], 2);
        return;
    }
    // A chunk of the second tile also follows the first tile's escapes.
    if (lane < chunks_here) offsets[lane] = first_offset + prefix + (lane >= chunks_per_tile ? count0 : 0);
    for (unsigned c = lane + 32; c < chunks_here; c += 32)
        offsets[c] = offsets[c] + prefix + (c >= chunks_per_tile ? count0 : 0);
    // Positions are 2-byte aligned (their section is 16-byte aligned).
    uint16_t* positions_out = reinterpret_cast<uint16_t*>(out + lay.escape_positions) + prefix;
    uint8_t* exponents_out = out + exponents_at + prefix;
#pragma unroll
    for (unsigned u = 0; u < SZ_PLACE_TILES; ++u) {
        const unsigned count = u == 0 ? count0 : count1;
        const unsigned skip = u == 0 ? 0 : count0;  // escapes of the warp before this tile
        const unsigned at = base + u * SPLITZIP_TILE_VALUES;
#pragma unroll
        for (unsigned j = 0; j < SZ_PLACE_BATCH; ++j) {
            const unsigned i = SZ_PLACE_BATCH * lane + j;
            if (i < count) {
                const uint32_t pair = j < 2 ? first_positions[u].x : first_positions[u].y;
                positions_out[skip + i] = (uint16_t)(pair >> (16 * (j % 2)));
                exponents_out[skip + i] = (uint8_t)(first_exponents[u] >> (8 * j));
            }
        }
        for (unsigned i = lane + 32 * SZ_PLACE_BATCH; i < count; i += 32) {
            positions_out[skip + i] = scratch_positions[at + i];
            exponents_out[skip + i] = scratch_exponents[at + i];
        }
    }
}

// ---------------------------------------------------------------------------------------
// Decoder, body check (the search decoder): one thread per chunk checks that chunk's
// escape offsets and escapes (spec section 5); the first check thread also checks the
// padding. The first problem seen goes to *status (0 = valid); the host then runs the CPU
// decoder for the exact typed error. The header was validated on the host. Work is
// bounded by the payload length. It runs in CTAs of its own after the decode kernel's
// tile CTAs (see splitzip_decode_tiles): with the search, every thread checking its own
// values inside the tile code measured slower, as it lengthens every tile; a separate
// kernel on a second stream measured the same as these CTAs, which need one launch and no
// stream joins (docs/perf/splitzip-gpu.md). The image decoder checks its chunks in the
// tiles instead (sz_tile_escapes), where it reads the lists and holds the codes anyway,
// and only the padding here.
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned sz_position(const uint8_t* positions, unsigned long long k) {
    return positions[2 * k] | (positions[2 * k + 1] << 8);
}

// Checks the spare nibble of an odd n and every padding byte before a section (one
// thread of the launch).
__device__ __forceinline__ void sz_check_padding(const uint8_t* __restrict__ payload, unsigned long long n,
                                                 unsigned chunk_size, unsigned long long escapes,
                                                 unsigned long long exponents_at, unsigned* __restrict__ status) {
    const SzLayout lay = sz_layout(n, chunk_size);
    bool ok = !(n % 2 == 1 && (payload[lay.codes + n / 2] >> 4) != 0);
    for (unsigned long long i = lay.codes + (n + 1) / 2; i < lay.sign_mantissa; ++i) ok &= payload[i] == 0;
    for (unsigned long long i = lay.sign_mantissa + n; i < lay.escape_offsets; ++i) ok &= payload[i] == 0;
    for (unsigned long long i = lay.escape_offsets + 4 * (lay.chunks + 1); i < lay.escape_positions; ++i)
        ok &= payload[i] == 0;
    for (unsigned long long i = lay.escape_positions + 2 * escapes; i < exponents_at; ++i) ok &= payload[i] == 0;
    if (!ok) atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_PADDING);
}

// Checks chunks first_chunk, first_chunk + stride, ... of the body; `padding` also checks
// every padding byte (one thread of the launch). Not inlined: inlined into the decode
// kernel it made ptxas spill in the tile code at the 40-register cap.
__device__ __noinline__ void sz_check_body(const uint8_t* __restrict__ payload, unsigned long long n, unsigned chunk_size,
                              unsigned long long escapes, unsigned long long exponents_at, uint4 codebook,
                              unsigned long long first_chunk, unsigned long long stride, bool padding,
                              unsigned* __restrict__ status) {
    const SzLayout lay = sz_layout(n, chunk_size);
    const uint32_t* offsets = reinterpret_cast<const uint32_t*>(payload + lay.escape_offsets);
    const uint8_t* positions = payload + lay.escape_positions;
    const uint8_t* esc_exponents = payload + exponents_at;
    const uint32_t cb[4] = {codebook.x, codebook.y, codebook.z, codebook.w};
    for (unsigned long long chunk = first_chunk; chunk < lay.chunks; chunk += stride) {
        const unsigned long long lo = offsets[chunk], hi = offsets[chunk + 1];
        const unsigned long long chunk_len = chunk + 1 == lay.chunks ? n - chunk * chunk_size : chunk_size;
        if ((chunk == 0 && lo != 0) || hi < lo || hi > escapes || (chunk + 1 == lay.chunks && hi != escapes) ||
            hi - lo > chunk_len) {
            atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_OFFSETS);
            continue;
        }
        for (unsigned long long k = lo; k < hi; ++k) {
            const unsigned pos = sz_position(positions, k);
            if (pos >= chunk_len || (k > lo && pos <= sz_position(positions, k - 1))) {
                atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_POSITION);
                break;
            }
            const uint32_t e = esc_exponents[k];
            bool in_codebook = false;
#pragma unroll
            for (int j = 0; j < 16; ++j) in_codebook |= ((cb[j / 4] >> (8 * (j % 4))) & 0xffu) == e;
            if (in_codebook) {
                atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_ESCAPED_EXPONENT);
                break;
            }
            const unsigned long long v = chunk * chunk_size + pos;
            if (((payload[lay.codes + v / 2] >> (4 * (v % 2))) & 15u) != 0) {
                atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_ESCAPE_CODE);
                break;
            }
        }
    }
    if (padding) sz_check_padding(payload, n, chunk_size, escapes, exponents_at, status);
}

// ---------------------------------------------------------------------------------------
// Decoder, values: CTAs 0 .. tiles - 1 decode one tile each. Every thread rebuilds 8
// words from 4 bytes of codes (exponents looked up in registers with byte permutes) and 8
// bytes of sign+mantissa, patches its escaped values in registers and stores 16 bytes
// once. Two ways to find a group's escapes, chosen by the host from the payload's escape
// rate (kImage): a binary search of its chunk's sorted list (bounded even for a corrupt
// list), which costs nothing in a chunk without escapes but a dependent chain of loads per
// group in a chunk with some; or the tile's escape image in shared memory
// (sz_tile_escapes), which costs every tile with an escape two barriers but each group one
// shared load, and wins once escapes are dense (docs/perf/splitzip-gpu.md); its tiles also
// check their own chunks. CTAs from `tiles` on run the body check (sz_check_body, one
// thread per chunk; the padding only after the image decoder). The hardware has been seen to
// dispatch CTAs in index order, so they mostly fill the SMs the last wave of tiles leaves
// idle; correctness does not depend on any order.
// ---------------------------------------------------------------------------------------

// A tile's escapes as its threads read them: bit v of `mask` set when the tile's value v
// is escaped, byte v of `image` its exponent (9 KB of shared memory per CTA).
struct __align__(16) SzTileEscapes {  // zeroed by 16-byte stores, read by 8-byte loads
    uint32_t mask[SPLITZIP_TILE_VALUES / 32];
    uint32_t image[SPLITZIP_TILE_VALUES / 4];
};

// Checks the escapes of the tile's chunks first_chunk .. + tile_chunks as the body check
// does (spec section 5: the offsets, the positions, the escaped exponents; the escaped
// values' codes are checked where the groups are rebuilt) and, when `image`, builds `t`
// from them (two barriers). Warp w takes chunks w, w + 8, ..., its lanes the chunk's
// escapes, so a chunk's list is read once, coalesced, instead of searched by every group
// of the chunk (a dependent chain of loads per group, whose length grows with the chunk's
// escapes) or walked by one check thread (a chain of loads per escape, and a random read
// of its code long after the tile read the codes). Chunks of 2048 values and more leave
// warps idle here (a tile holds fewer than 8); splitting their lists over warps cost
// registers (spills at the 40-register cap) for chunk sizes the codec does not use by
// default. A chunk's first problem (in list order) goes to *status and ends its walk; the
// output is then unspecified. The ORs are atomic because lanes share mask and image
// words. Work is bounded by the tile's values.
__device__ __forceinline__ void sz_tile_escapes(SzTileEscapes& t, bool image, const uint32_t* __restrict__ offsets,
                                                const uint8_t* __restrict__ positions,
                                                const uint8_t* __restrict__ esc_exponents, unsigned long long n,
                                                unsigned chunk_size, unsigned long long chunks,
                                                unsigned long long escapes, unsigned long long first_chunk,
                                                unsigned tile_chunks, uint4 codebook, unsigned* __restrict__ status) {
    constexpr unsigned kWords = sizeof(SzTileEscapes) / 16;
    if (image) {
        for (unsigned i = threadIdx.x; i < kWords; i += SPLITZIP_THREADS) reinterpret_cast<uint4*>(&t)[i] = make_uint4(0, 0, 0, 0);
        __syncthreads();
    }
    // 32-bit indices (offsets are u32, a chunk at most SPLITZIP_TILE_VALUES long): the
    // group loads of the caller stay in registers without spilling at the 40-register cap.
    const unsigned shift = sz_chunk_shift(chunk_size), lane = threadIdx.x % 32;
    const uint16_t* position = reinterpret_cast<const uint16_t*>(positions);
    for (unsigned c = threadIdx.x / 32; c < tile_chunks; c += SPLITZIP_THREADS / 32) {  // warp-uniform
        const unsigned long long chunk = first_chunk + c;
        const unsigned lo = offsets[chunk], hi = offsets[chunk + 1];
        const unsigned chunk_len = chunk + 1 == chunks ? (unsigned)(n - (chunk << shift)) : chunk_size;
        if ((chunk == 0 && lo != 0) || lo > hi || hi > escapes || (chunk + 1 == chunks && hi != escapes) ||
            hi - lo > chunk_len) {
            if (lane == 0) atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_OFFSETS);
            continue;
        }
        unsigned last = 0;  // the position before this pass's first: lane 31's of the last pass
        for (unsigned j0 = 0; j0 < hi - lo; j0 += 32) {  // hi - lo <= chunk_len: no wrap
            const unsigned j = j0 + lane;
            const unsigned pos = j < hi - lo ? position[lo + j] : 0u;
            // Both shuffles outside any condition: every lane of the warp must reach them.
            const unsigned up = __shfl_up_sync(0xffffffffu, pos, 1);
            const unsigned before = lane == 0 ? last : up;
            last = __shfl_sync(0xffffffffu, pos, 31);
            unsigned problem = 0;
            if (j < hi - lo) {
                const uint32_t e = esc_exponents[lo + j], e4 = e * 0x01010101u;
                const uint32_t in_codebook = __vcmpeq4(codebook.x, e4) | __vcmpeq4(codebook.y, e4) |
                                             __vcmpeq4(codebook.z, e4) | __vcmpeq4(codebook.w, e4);
                if (pos >= chunk_len || (j > 0 && pos <= before)) {
                    problem = SPLITZIP_STATUS_BAD_POSITION;
                } else if (in_codebook != 0) {
                    problem = SPLITZIP_STATUS_BAD_ESCAPED_EXPONENT;
                } else if (image) {
                    const unsigned v = (c << shift) + pos;
                    atomicOr(&t.mask[v / 32], 1u << (v % 32));
                    atomicOr(&t.image[v / 4], e << (8 * (v % 4)));
                }
            }
            const unsigned bad = __ballot_sync(0xffffffffu, problem != 0);
            if (bad != 0) {
                if (lane == __ffs(bad) - 1) atomicCAS(status, 0u, problem);
                break;
            }
        }
    }
    if (image) __syncthreads();
}

#ifndef SZ_PREFETCH_TILES
#define SZ_PREFETCH_TILES 384
#endif

// The tile image waits for two dependent loads before its barrier: the chunks' escape
// offsets, then their lists. Near one another, tiles share those lines and the first to
// ask pays DRAM's latency for all; so warp 0 of tile t asks the L2 for them ahead: the
// offsets of tile t + 2 SZ_PREFETCH_TILES, and the lists of tile t + SZ_PREFETCH_TILES
// (whose offsets tile t - SZ_PREFETCH_TILES asked for, so reading them here is an L2 hit
// in the shadow of this tile's own loads). Tiles start in index order, about as many per
// microsecond as there are SMs, so a tile's lines arrive some microseconds before it
// starts. A prefetch only warms the L2: a list range out of order, past E or longer than
// a tile's values is skipped, so no address leaves its section. Not inlined: inlined, ptxas spilled in the tile code
// at the 40-register cap.
__device__ __noinline__ void sz_prefetch_escapes(const uint32_t* __restrict__ offsets,
                                                 const uint8_t* __restrict__ positions,
                                                 const uint8_t* __restrict__ esc_exponents,
                                                 unsigned long long escapes, unsigned chunk_size,
                                                 unsigned long long chunks, unsigned tiles) {
    const unsigned shift = sz_chunk_shift(chunk_size), lane = threadIdx.x % 32;
    const unsigned long long far = blockIdx.x + 2ull * SZ_PREFETCH_TILES, near = blockIdx.x + SZ_PREFETCH_TILES;
    if (lane == 0 && far < tiles) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(offsets + ((far * SPLITZIP_TILE_VALUES) >> shift)));
    }
    if (near >= tiles) return;
    const unsigned long long first = (near * SPLITZIP_TILE_VALUES) >> shift;
    const unsigned long long last = min(first + (SPLITZIP_TILE_VALUES >> shift), chunks);
    const unsigned lo = offsets[first], hi = offsets[last];
    // A tile holds at most SPLITZIP_TILE_VALUES escapes: a longer range is corrupt, and
    // would cost a long loop here (at most 129 position lines and 65 exponent lines).
    if (lo >= hi || hi > escapes || hi - lo > SPLITZIP_TILE_VALUES) return;
    // Lines of 128 bytes: positions 2 bytes an escape (byte offsets in 64 bits: E < 2^32),
    // exponents 1.
    const unsigned p0 = (2ull * lo) / 128, p1 = (2ull * hi - 1) / 128, e0 = lo / 128, e1 = (hi - 1) / 128;
    for (unsigned l = p0 + lane; l <= p1; l += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(positions + 128ull * l));
    for (unsigned l = e0 + lane; l <= e1; l += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(esc_exponents + 128ull * l));
}

// 0xf in nibble i for bit i of `bits` (8 bits): the bits spread 4 apart, then each
// filled (no carries).
__device__ __forceinline__ uint32_t sz_nibble_mask8(uint32_t bits) {
    uint32_t x = (bits | (bits << 12)) & 0x000f000fu;
    x = (x | (x << 6)) & 0x03030303u;
    x = (x | (x << 3)) & 0x11111111u;
    return x * 0xfu;
}

// 0xff in byte i for bit i of `bits` (4 bits): the four shifted copies do not overlap,
// so neither the multiply nor the spread to 0xff carries.
__device__ __forceinline__ uint32_t sz_byte_mask4(uint32_t bits) {
    return ((bits * 0x00204081u) & 0x01010101u) * 0xffu;
}

// kSums (splitzip_decode_tiles_checksum) also adds the Adler-32 sums of the words it
// writes to sums[0, 1], for the host to compare with the header's checksum.
template <bool kSums, bool kImage>
__device__ __forceinline__ void sz_decode_tiles(const uint8_t* __restrict__ payload, unsigned long long n,
                                                unsigned chunk_size, unsigned long long escapes,
                                                unsigned long long exponents_at, uint4 codebook,
                                                uint16_t* __restrict__ out, unsigned tiles,
                                                unsigned* __restrict__ status, unsigned long long* __restrict__ sums) {
    if (blockIdx.x >= tiles) {  // CTA-uniform
        if (kImage) {  // the tiles check their own chunks; the one CTA after them, the padding
            if (blockIdx.x == tiles && threadIdx.x == 0) {  // no chunk (first_chunk past the last): the padding only
                sz_check_body(payload, n, chunk_size, escapes, exponents_at, codebook, ~0ull, 1, true, status);
            }
            return;
        }
        const unsigned long long check_thread = (unsigned long long)(blockIdx.x - tiles) * SPLITZIP_THREADS + threadIdx.x;
        const unsigned long long check_threads = (unsigned long long)(gridDim.x - tiles) * SPLITZIP_THREADS;
        sz_check_body(payload, n, chunk_size, escapes, exponents_at, codebook, check_thread, check_threads,
                      check_thread == 0, status);
        return;
    }
    const SzLayout lay = sz_layout(n, chunk_size);
    const uint32_t* offsets = reinterpret_cast<const uint32_t*>(payload + lay.escape_offsets);
    const uint8_t* positions = payload + lay.escape_positions;
    const uint8_t* esc_exponents = payload + exponents_at;
    const unsigned long long base = (unsigned long long)blockIdx.x * SPLITZIP_TILE_VALUES;

    uint32_t adler_s = 0, adler_o = 0;  // kSums: see sz_adler_ws
    // Load every group's codes and sign+mantissa first, then rebuild and store.
    uint32_t codes[SZ_GROUPS_PER_THREAD];
    uint2 sf[SZ_GROUPS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        const unsigned long long v0 = base + (unsigned long long)(u * SPLITZIP_THREADS + threadIdx.x) * SPLITZIP_GROUP_VALUES;
        if (v0 + SPLITZIP_GROUP_VALUES <= n) {
            codes[u] = __ldcs(reinterpret_cast<const uint32_t*>(payload + lay.codes + v0 / 2));
            sf[u] = __ldcs(reinterpret_cast<const uint2*>(payload + lay.sign_mantissa + v0));
        } else {
            codes[u] = 0;
            sf[u] = make_uint2(0, 0);
            for (unsigned long long k = 0; v0 + k < n; ++k) {
                if (k % 2 == 0) codes[u] |= (uint32_t)payload[lay.codes + (v0 + k) / 2] << (4 * k);
                const uint32_t b = payload[lay.sign_mantissa + v0 + k];
                if (k < 4) sf[u].x |= b << (8 * k); else sf[u].y |= b << (8 * (k - 4));
            }
        }
    }
    // The image: the tile's escapes checked, and laid out in shared memory unless it has
    // none (every thread reads the same two offsets, so `patch` is uniform; a tile whose
    // offsets claim none while a chunk inside has some has a chunk whose offsets decrease,
    // which sz_tile_escapes reports).
    __shared__ SzTileEscapes tile_escapes;
    bool patch = false;
    if (kImage) {
        const unsigned long long first_chunk = base >> sz_chunk_shift(chunk_size);
        // A division once per tile: written with the chunk shift, ptxas spilled at the cap.
        const unsigned tile_chunks =
            (unsigned)min((unsigned long long)(SPLITZIP_TILE_VALUES / chunk_size), lay.chunks - first_chunk);
        if (threadIdx.x < 32) sz_prefetch_escapes(offsets, positions, esc_exponents, escapes, chunk_size, lay.chunks, tiles);
        patch = offsets[first_chunk] != offsets[first_chunk + tile_chunks];
        sz_tile_escapes(tile_escapes, patch, offsets, positions, esc_exponents, n, chunk_size, lay.chunks, escapes,
                        first_chunk, tile_chunks, codebook, status);
    }
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        if (kSums && u > 0) sz_adler_next(adler_s, adler_o);  // also before a group past n
        const unsigned long long v0 = base + (unsigned long long)(u * SPLITZIP_THREADS + threadIdx.x) * SPLITZIP_GROUP_VALUES;
        if (v0 >= n) continue;
        uint32_t e_lo = kv_lookup16_quad(codes[u] & 0xffffu, codebook.x, codebook.y, codebook.z, codebook.w);
        uint32_t e_hi = kv_lookup16_quad(codes[u] >> 16, codebook.x, codebook.y, codebook.z, codebook.w);
        if (kImage) {
            const unsigned v = (unsigned)(v0 - base);  // a multiple of 8: its mask bits are one byte
            const uint32_t escaped = patch ? (tile_escapes.mask[v / 32] >> (v % 32)) & 0xffu : 0u;
            if (escaped != 0) {
                const uint2 image = *reinterpret_cast<const uint2*>(&tile_escapes.image[v / 4]);
                const uint32_t sel_lo = sz_byte_mask4(escaped & 15u), sel_hi = sz_byte_mask4(escaped >> 4);
                e_lo = (e_lo & ~sel_lo) | (image.x & sel_lo);
                e_hi = (e_hi & ~sel_hi) | (image.y & sel_hi);
                if ((codes[u] & sz_nibble_mask8(escaped)) != 0) atomicCAS(status, 0u, SPLITZIP_STATUS_BAD_ESCAPE_CODE);
            }
        } else {
            const unsigned long long chunk = v0 >> sz_chunk_shift(chunk_size);
            const unsigned long long lo = offsets[chunk], hi = offsets[chunk + 1];
            if (hi > lo && hi <= escapes) {
                const unsigned start = (unsigned)(v0 & (chunk_size - 1));
                unsigned long long a = lo, b = hi;
                while (a < b) {
                    const unsigned long long mid = (a + b) / 2;
                    if (sz_position(positions, mid) < start) a = mid + 1; else b = mid;
                }
                for (int step = 0; step < 8 && a < hi; ++step, ++a) {
                    const unsigned pos = sz_position(positions, a);
                    if (pos < start || pos >= start + 8) break;
                    const unsigned k = pos - start, shift = 8 * (k % 4);
                    const uint32_t e = esc_exponents[a];
                    if (k < 4) e_lo = (e_lo & ~(0xffu << shift)) | (e << shift);
                    else e_hi = (e_hi & ~(0xffu << shift)) | (e << shift);
                }
            }
        }
        const uint2 lo4 = kv_join_quad(e_lo, sf[u].x);
        const uint2 hi4 = kv_join_quad(e_hi, sf[u].y);
        if (v0 + SPLITZIP_GROUP_VALUES <= n) {
            __stcs(reinterpret_cast<uint4*>(out + v0), make_uint4(lo4.x, lo4.y, hi4.x, hi4.y));
            if (kSums) kv_adler_chain16(make_uint4(lo4.x, lo4.y, hi4.x, hi4.y), adler_s, adler_o);
        } else {
            const uint32_t q[4] = {lo4.x, lo4.y, hi4.x, hi4.y};
            if (kSums) {
                // The group with its words past n zeroed, as one chain: added word by word
                // (two dp4a each), the sums made ptxas spill at the register cap.
                const unsigned valid = (unsigned)(n - v0);
                uint32_t z[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) z[k] = 2 * k + 1 < valid ? q[k] : 2 * k < valid ? q[k] & 0xffffu : 0u;
                kv_adler_chain16(make_uint4(z[0], z[1], z[2], z[3]), adler_s, adler_o);
            }
#pragma unroll
            for (int k = 0; k < SPLITZIP_GROUP_VALUES; ++k) {
                if (v0 + k < n) {
                    const uint32_t word = (q[k / 2] >> (16 * (k % 2))) & 0xffffu;
                    out[v0 + k] = (uint16_t)word;
                }
            }
        }
    }
    if (kSums) {
        const uint32_t ws = sz_adler_ws(adler_s, adler_o);
        __shared__ uint32_t adler_scratch[3 * SPLITZIP_THREADS / 32];
        kv_adler_cta_flush_once(adler_s, ws, 2 * base, adler_scratch, sums);
    }
}

// The entry points: the search (`splitzip_decode_tiles*`) and the image
// (`splitzip_decode_tiles_dense*`), each without and with the checksum's sums.
extern "C" __global__ void __launch_bounds__(SPLITZIP_THREADS, SZ_DECODE_CTAS_PER_SM)
splitzip_decode_tiles(const uint8_t* __restrict__ payload, unsigned long long n, unsigned chunk_size,
                      unsigned long long escapes, unsigned long long exponents_at, uint4 codebook,
                      uint16_t* __restrict__ out, unsigned tiles, unsigned* __restrict__ status) {
    sz_decode_tiles<false, false>(payload, n, chunk_size, escapes, exponents_at, codebook, out, tiles, status, nullptr);
}

extern "C" __global__ void __launch_bounds__(SPLITZIP_THREADS, SZ_DECODE_CTAS_PER_SM)
splitzip_decode_tiles_checksum(const uint8_t* __restrict__ payload, unsigned long long n, unsigned chunk_size,
                               unsigned long long escapes, unsigned long long exponents_at, uint4 codebook,
                               uint16_t* __restrict__ out, unsigned tiles, unsigned* __restrict__ status,
                               unsigned long long* __restrict__ sums) {
    sz_decode_tiles<true, false>(payload, n, chunk_size, escapes, exponents_at, codebook, out, tiles, status, sums);
}

extern "C" __global__ void __launch_bounds__(SPLITZIP_THREADS, SZ_DECODE_CTAS_PER_SM)
splitzip_decode_tiles_dense(const uint8_t* __restrict__ payload, unsigned long long n, unsigned chunk_size,
                            unsigned long long escapes, unsigned long long exponents_at, uint4 codebook,
                            uint16_t* __restrict__ out, unsigned tiles, unsigned* __restrict__ status) {
    sz_decode_tiles<false, true>(payload, n, chunk_size, escapes, exponents_at, codebook, out, tiles, status, nullptr);
}

extern "C" __global__ void __launch_bounds__(SPLITZIP_THREADS, SZ_DECODE_CTAS_PER_SM)
splitzip_decode_tiles_dense_checksum(const uint8_t* __restrict__ payload, unsigned long long n, unsigned chunk_size,
                                     unsigned long long escapes, unsigned long long exponents_at, uint4 codebook,
                                     uint16_t* __restrict__ out, unsigned tiles, unsigned* __restrict__ status,
                                     unsigned long long* __restrict__ sums) {
    sz_decode_tiles<true, true>(payload, n, chunk_size, escapes, exponents_at, codebook, out, tiles, status, sums);
}
