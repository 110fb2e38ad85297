// SplitZip GPU encoder and decoder, byte-identical to crates/splitzip (the CPU
// reference). Format: docs/formats/splitzip.md; design: SplitZip seed (top-16 codebook,
// 4-bit codes, chunk-local escapes) and shared/notes/gpu-entropy-coding.md section 5
// (single-pass compaction with a decoupled look-back, no host synchronisation).
//
// Work unit: a tile of SZ_TILE_VALUES values (a whole number of chunks; chunk sizes up
// to SZ_TILE_VALUES are supported on the GPU). A CTA of SZ_THREADS threads takes tiles
// in the order of an atomic ticket; each thread owns groups of 8 values (16 bytes of
// words, 4 bytes of codes, 8 bytes of sign+mantissa).
#include "../common/bf16_field.cuh"

#define SZ_THREADS 256
#define SZ_GROUP 8
#define SZ_TILE_VALUES 8192
#define SZ_GROUPS_PER_THREAD (SZ_TILE_VALUES / SZ_GROUP / SZ_THREADS)  // 4
#define SZ_HEADER_LEN 128
#define SZ_ALIGN 16ull

// Look-back descriptor: 2 flag bits | 62-bit escape count, one u64 per tile.
#define SZ_FLAG_AGGREGATE 1ull
#define SZ_FLAG_PREFIX 2ull
#define SZ_VALUE_MASK ((1ull << 62) - 1)

// Workspace layout (u64 words): [0] ticket, [1] total escapes (written by the last
// tile), [2] encoded length (written by the finish kernel), [3..3+tiles) descriptors.
#define SZ_WS_TICKET 0
#define SZ_WS_TOTAL 1
#define SZ_WS_LEN 2
#define SZ_WS_TILES 3

__device__ __forceinline__ unsigned long long sz_align16(unsigned long long x) {
    return (x + SZ_ALIGN - 1) / SZ_ALIGN * SZ_ALIGN;
}

// Section offsets that depend only on (n, chunk_size): spec section 3.
struct SzLayout {
    unsigned long long codes, sign_mantissa, escape_offsets, escape_positions, chunks;
};

__device__ __forceinline__ SzLayout sz_layout(unsigned long long n, unsigned chunk_size) {
    SzLayout l;
    l.chunks = (n + chunk_size - 1) / chunk_size;
    l.codes = SZ_HEADER_LEN;
    l.sign_mantissa = sz_align16(l.codes + (n + 1) / 2);
    l.escape_offsets = sz_align16(l.sign_mantissa + n);
    l.escape_positions = sz_align16(l.escape_offsets + 4 * (l.chunks + 1));
    return l;
}

__device__ __forceinline__ unsigned long long sz_load_relaxed(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void sz_store_release(unsigned long long* p, unsigned long long v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long sz_load_acquire(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Exclusive scan of one value per thread across the CTA; returns the prefix and writes
// the CTA total to *total. All threads must call it.
__device__ __forceinline__ unsigned sz_cta_exclusive_scan(unsigned v, unsigned* warp_sums, unsigned* total) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned x = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const unsigned y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        unsigned s = lane < SZ_THREADS / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const unsigned y = __shfl_up_sync(0xffffffffu, s, d);
            if (lane >= d) s += y;
        }
        if (lane < SZ_THREADS / 32) warp_sums[lane] = s;  // inclusive per warp
    }
    __syncthreads();
    const unsigned before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
    *total = warp_sums[SZ_THREADS / 32 - 1];
    __syncthreads();  // warp_sums is reused by the next call
    return before;
}

// ---------------------------------------------------------------------------------------
// Encoder, kernel 1 of 2: codes, sign+mantissa, escape offsets and positions; escape
// exponents to scratch (their section's place depends on the total escape count).
// `code_table[e]` = code of exponent e, or 0xff for "escape" (built from the codebook
// by the host). Launch with any grid; tiles are taken by ticket until none is left.
// ---------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(SZ_THREADS)
splitzip_encode_tiles(const uint16_t* __restrict__ words, unsigned long long n, unsigned chunk_size,
                      const uint8_t* __restrict__ code_table_global, uint8_t* __restrict__ out,
                      unsigned long long out_capacity, uint8_t* __restrict__ scratch_exponents,
                      unsigned long long* __restrict__ workspace) {
    __shared__ uint8_t code_table[256];
    __shared__ uint16_t esc_index[SZ_TILE_VALUES];  // index of the value inside the tile
    __shared__ uint8_t esc_exponent[SZ_TILE_VALUES];
    __shared__ unsigned chunk_first_escape[SZ_TILE_VALUES / 32 + 1];
    __shared__ unsigned warp_sums[SZ_THREADS / 32];
    __shared__ unsigned long long tile_shared, prefix_shared;

    for (int i = threadIdx.x; i < 256; i += SZ_THREADS) code_table[i] = code_table_global[i];
    const SzLayout lay = sz_layout(n, chunk_size);
    const unsigned long long tiles = (n + SZ_TILE_VALUES - 1) / SZ_TILE_VALUES;
    unsigned long long* desc = workspace + SZ_WS_TILES;

    for (;;) {
        if (threadIdx.x == 0) tile_shared = atomicAdd(workspace + SZ_WS_TICKET, 1ull);
        __syncthreads();
        const unsigned long long tile = tile_shared;
        if (tile >= tiles) return;
        const unsigned long long base = tile * SZ_TILE_VALUES;

        // Load every group first (4 x 16 B in flight per thread), then code them.
        uint4 w[SZ_GROUPS_PER_THREAD];
#pragma unroll
        for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
            const unsigned long long v0 = base + (unsigned long long)(u * SZ_THREADS + threadIdx.x) * SZ_GROUP;
            if (v0 + SZ_GROUP <= n) {
                w[u] = __ldcs(reinterpret_cast<const uint4*>(words + v0));
            } else {
                uint16_t t[8];
#pragma unroll
                for (int k = 0; k < 8; ++k) t[k] = v0 + k < n ? words[v0 + k] : 0;
                w[u] = make_uint4(t[0] | (t[1] << 16), t[2] | (t[3] << 16), t[4] | (t[5] << 16), t[6] | (t[7] << 16));
            }
        }
        unsigned running = 0;  // escapes in this tile before the current pass
#pragma unroll
        for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
            const unsigned in_tile = (u * SZ_THREADS + threadIdx.x) * SZ_GROUP;
            const unsigned long long v0 = base + in_tile;
            const uint32_t pairs[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
            uint32_t codes = 0, esc_mask = 0;
            uint32_t sf_lo = 0, sf_hi = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const uint32_t word = (pairs[k / 2] >> (16 * (k % 2))) & 0xffffu;
                const uint32_t e = kv_exponent_of(word);
                uint32_t c = code_table[e];
                const bool valid = v0 + k < n;
                if (c == 0xffu) {
                    if (valid) esc_mask |= 1u << k;
                    c = 0;
                }
                if (!valid) c = 0;
                codes |= c << (4 * k);
                const uint32_t sf = kv_sign_mantissa_of(word);
                if (k < 4) sf_lo |= sf << (8 * k); else sf_hi |= sf << (8 * (k - 4));
            }
            if (v0 < n) {
                if (v0 + SZ_GROUP <= n) {
                    __stcs(reinterpret_cast<uint32_t*>(out + lay.codes + v0 / 2), codes);
                    __stcs(reinterpret_cast<uint2*>(out + lay.sign_mantissa + v0), make_uint2(sf_lo, sf_hi));
                } else {
                    const unsigned valid = (unsigned)(n - v0);
                    for (unsigned k = 0; k < (valid + 1) / 2; ++k) out[lay.codes + v0 / 2 + k] = (codes >> (8 * k)) & 0xffu;
                    for (unsigned k = 0; k < valid; ++k)
                        out[lay.sign_mantissa + v0 + k] = ((k < 4 ? sf_lo : sf_hi) >> (8 * (k % 4))) & 0xffu;
                }
            }
            unsigned pass_total;
            const unsigned before = running + sz_cta_exclusive_scan(__popc(esc_mask), warp_sums, &pass_total);
            // A chunk starts at this group: remember the tile-local escape index there.
            if (v0 < n && (v0 % chunk_size) == 0) chunk_first_escape[in_tile / chunk_size] = before;
            unsigned slot = before;
            for (uint32_t m = esc_mask; m; m &= m - 1) {
                const int k = __ffs(m) - 1;
                const uint32_t word = (pairs[k / 2] >> (16 * (k % 2))) & 0xffffu;
                esc_index[slot] = (uint16_t)(in_tile + k);
                esc_exponent[slot] = (uint8_t)kv_exponent_of(word);
                ++slot;
            }
            running += pass_total;
        }
        const unsigned tile_escapes = running;

        // Decoupled look-back (thread 0): publish the aggregate, sum predecessors until
        // an inclusive prefix is found, publish ours.
        if (threadIdx.x == 0) {
            unsigned long long prefix = 0;
            if (tile == 0) {
                sz_store_release(desc + tile, SZ_FLAG_PREFIX << 62 | tile_escapes);
            } else {
                sz_store_release(desc + tile, SZ_FLAG_AGGREGATE << 62 | tile_escapes);
                long long p = (long long)tile - 1;
                for (;;) {
                    const unsigned long long d = sz_load_acquire(desc + p);
                    const unsigned long long flag = d >> 62;
                    if (flag == 0) {
                        __nanosleep(32);
                        continue;
                    }
                    prefix += d & SZ_VALUE_MASK;
                    if (flag == SZ_FLAG_PREFIX) break;
                    --p;
                }
                sz_store_release(desc + tile, SZ_FLAG_PREFIX << 62 | (prefix + tile_escapes));
            }
            prefix_shared = prefix;
            if (tile == tiles - 1) workspace[SZ_WS_TOTAL] = prefix + tile_escapes;
        }
        __syncthreads();
        const unsigned long long prefix = prefix_shared;

        // Escape offsets of this tile's chunks (the final entry is the finish kernel's).
        const unsigned long long first_chunk = base / chunk_size;
        const unsigned long long tile_end = base + SZ_TILE_VALUES < n ? base + SZ_TILE_VALUES : n;
        const unsigned chunks_here = (unsigned)((tile_end - base + chunk_size - 1) / chunk_size);
        for (unsigned c = threadIdx.x; c < chunks_here; c += SZ_THREADS) {
            const unsigned long long at = lay.escape_offsets + 4 * (first_chunk + c);
            *reinterpret_cast<uint32_t*>(out + at) = (uint32_t)(prefix + chunk_first_escape[c]);
        }
        // Escape positions (inside their chunk) and exponents (to scratch). Positions
        // past the buffer only happen when the payload will be stored raw.
        for (unsigned i = threadIdx.x; i < tile_escapes; i += SZ_THREADS) {
            const unsigned long long g = prefix + i;
            const unsigned long long at = lay.escape_positions + 2 * g;
            const uint16_t pos = (uint16_t)(esc_index[i] & (chunk_size - 1));
            if (at + 2 <= out_capacity) {
                out[at] = pos & 0xff;
                out[at + 1] = pos >> 8;
            }
            if (g < n) scratch_exponents[g] = esc_exponent[i];
        }
        __syncthreads();  // shared arrays are reused by the next tile
    }
}

// ---------------------------------------------------------------------------------------
// Encoder, kernel 2 of 2: with the total escape count known, either finish the coded
// payload (header, padding, last escape offset, exponents to their section) or, when
// coded would be longer than raw, overwrite everything with the raw form. Grid-stride
// over the bytes to move; block 0 thread 0 writes the header and the padding.
// ---------------------------------------------------------------------------------------
__device__ void sz_put(uint8_t* p, unsigned long long v, int bytes) {
    for (int i = 0; i < bytes; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

extern "C" __global__ void splitzip_encode_finish(const uint16_t* __restrict__ words, unsigned long long n,
                                                  unsigned chunk_size, uint4 codebook, uint8_t* __restrict__ out,
                                                  const uint8_t* __restrict__ scratch_exponents,
                                                  unsigned long long* __restrict__ workspace) {
    const SzLayout lay = sz_layout(n, chunk_size);
    const unsigned long long escapes = n == 0 ? 0 : workspace[SZ_WS_TOTAL];
    const unsigned long long exponents_at = sz_align16(lay.escape_positions + 2 * escapes);
    const unsigned long long coded_len = exponents_at + escapes;
    const unsigned long long raw_len = SZ_HEADER_LEN + 2 * n;
    const bool raw = coded_len > raw_len || escapes > 0xffffffffull;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;

    if (raw) {
        const unsigned long long quads = n / 8;
        for (unsigned long long q = tid; q < quads; q += stride)
            reinterpret_cast<uint4*>(out + SZ_HEADER_LEN)[q] = reinterpret_cast<const uint4*>(words)[q];
        for (unsigned long long i = quads * 8 + tid; i < n; i += stride) sz_put(out + SZ_HEADER_LEN + 2 * i, words[i], 2);
    } else {
        for (unsigned long long i = tid; i < escapes; i += stride) out[exponents_at + i] = scratch_exponents[i];
    }
    if (tid != 0) return;

    uint8_t* h = out;
    for (int i = 0; i < SZ_HEADER_LEN; ++i) h[i] = 0;
    h[0] = 'K'; h[1] = 'V'; h[2] = 'S'; h[3] = 'Z';
    sz_put(h + 4, 1, 2);                 // version
    sz_put(h + 6, raw ? 1 : 0, 2);       // flags: bit 0 = raw
    sz_put(h + 8, n, 8);
    sz_put(h + 16, chunk_size, 4);
    const uint32_t cb[4] = {codebook.x, codebook.y, codebook.z, codebook.w};
    for (int i = 0; i < 16; ++i) h[32 + i] = (uint8_t)(cb[i / 4] >> (8 * (i % 4)));
    if (raw) {
        sz_put(h + 88, raw_len, 8);
        workspace[SZ_WS_LEN] = raw_len;
        return;
    }
    sz_put(h + 20, lay.chunks, 4);
    sz_put(h + 24, escapes, 8);
    sz_put(h + 48, lay.codes, 8);
    sz_put(h + 56, lay.sign_mantissa, 8);
    sz_put(h + 64, lay.escape_offsets, 8);
    sz_put(h + 72, lay.escape_positions, 8);
    sz_put(h + 80, exponents_at, 8);
    sz_put(h + 88, coded_len, 8);
    // Zero padding before each section, and the spare nibble of an odd n.
    for (unsigned long long i = lay.codes + (n + 1) / 2; i < lay.sign_mantissa; ++i) out[i] = 0;
    for (unsigned long long i = lay.sign_mantissa + n; i < lay.escape_offsets; ++i) out[i] = 0;
    sz_put(out + lay.escape_offsets + 4 * lay.chunks, escapes, 4);
    for (unsigned long long i = lay.escape_offsets + 4 * (lay.chunks + 1); i < lay.escape_positions; ++i) out[i] = 0;
    for (unsigned long long i = lay.escape_positions + 2 * escapes; i < exponents_at; ++i) out[i] = 0;
    workspace[SZ_WS_LEN] = coded_len;
}

// ---------------------------------------------------------------------------------------
// Decoder: one CTA per tile. Every thread rebuilds 8 words from 4 bytes of codes and 8
// bytes of sign+mantissa, patches its escaped values in registers (found by binary
// search in its chunk's sorted escape list) and stores 16 bytes once. Threads also
// check the body (spec section 5) and report the first problem they see in *status
// (0 = valid); the host then runs the CPU decoder for the exact typed error.
// The header was validated on the host; section offsets come from it.
// ---------------------------------------------------------------------------------------
#define SZ_BAD_OFFSETS 1u
#define SZ_BAD_POSITION 2u
#define SZ_BAD_ESCAPED_EXPONENT 3u
#define SZ_BAD_ESCAPE_CODE 4u
#define SZ_BAD_PADDING 5u

extern "C" __global__ void __launch_bounds__(SZ_THREADS)
splitzip_decode_tiles(const uint8_t* __restrict__ payload, unsigned long long n, unsigned chunk_size,
                      unsigned long long escapes, unsigned long long exponents_at, uint4 codebook,
                      uint16_t* __restrict__ out, unsigned* __restrict__ status) {
    __shared__ uint8_t exponent_of_code[16];
    __shared__ uint8_t in_codebook[256];
    const SzLayout lay = sz_layout(n, chunk_size);
    if (threadIdx.x < 16) {
        const uint32_t cb[4] = {codebook.x, codebook.y, codebook.z, codebook.w};
        exponent_of_code[threadIdx.x] = (uint8_t)(cb[threadIdx.x / 4] >> (8 * (threadIdx.x % 4)));
    }
    for (int i = threadIdx.x; i < 256; i += SZ_THREADS) in_codebook[i] = 0;
    __syncthreads();
    if (threadIdx.x < 16) in_codebook[exponent_of_code[threadIdx.x]] = 1;
    __syncthreads();

    const uint32_t* offsets = reinterpret_cast<const uint32_t*>(payload + lay.escape_offsets);
    const uint8_t* positions = payload + lay.escape_positions;
    const uint8_t* esc_exponents = payload + exponents_at;
    const unsigned long long base = (unsigned long long)blockIdx.x * SZ_TILE_VALUES;

    // Body checks that do not belong to one value: chunk offsets and escapes.
    const unsigned long long tile_end = base + SZ_TILE_VALUES < n ? base + SZ_TILE_VALUES : n;
    const unsigned long long first_chunk = base / chunk_size;
    const unsigned chunks_here = (unsigned)((tile_end - base + chunk_size - 1) / chunk_size);
    for (unsigned c = threadIdx.x; c < chunks_here; c += SZ_THREADS) {
        const unsigned long long chunk = first_chunk + c;
        const unsigned long long lo = offsets[chunk], hi = offsets[chunk + 1];
        const unsigned long long chunk_len = chunk + 1 == lay.chunks ? n - chunk * chunk_size : chunk_size;
        if ((chunk == 0 && lo != 0) || hi < lo || hi > escapes || (chunk + 1 == lay.chunks && hi != escapes) ||
            hi - lo > chunk_len) {
            atomicCAS(status, 0u, SZ_BAD_OFFSETS);
            continue;
        }
        for (unsigned long long k = lo; k < hi; ++k) {
            const unsigned pos = positions[2 * k] | (positions[2 * k + 1] << 8);
            const unsigned prev = k > lo ? positions[2 * k - 2] | (positions[2 * k - 1] << 8) : 0;
            if (pos >= chunk_len || (k > lo && pos <= prev)) { atomicCAS(status, 0u, SZ_BAD_POSITION); break; }
            if (in_codebook[esc_exponents[k]]) { atomicCAS(status, 0u, SZ_BAD_ESCAPED_EXPONENT); break; }
            const unsigned long long v = chunk * chunk_size + pos;
            if (((payload[lay.codes + v / 2] >> (4 * (v % 2))) & 15u) != 0) { atomicCAS(status, 0u, SZ_BAD_ESCAPE_CODE); break; }
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        bool ok = true;
        if (n % 2 == 1 && (payload[lay.codes + n / 2] >> 4) != 0) ok = false;
        for (unsigned long long i = lay.codes + (n + 1) / 2; i < lay.sign_mantissa; ++i) ok &= payload[i] == 0;
        for (unsigned long long i = lay.sign_mantissa + n; i < lay.escape_offsets; ++i) ok &= payload[i] == 0;
        for (unsigned long long i = lay.escape_offsets + 4 * (lay.chunks + 1); i < lay.escape_positions; ++i) ok &= payload[i] == 0;
        for (unsigned long long i = lay.escape_positions + 2 * escapes; i < exponents_at; ++i) ok &= payload[i] == 0;
        if (!ok) atomicCAS(status, 0u, SZ_BAD_PADDING);
    }

    // Values: load every group's codes and sign+mantissa first, then rebuild and store.
    uint32_t codes[SZ_GROUPS_PER_THREAD];
    uint2 sf[SZ_GROUPS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        const unsigned long long v0 = base + (unsigned long long)(u * SZ_THREADS + threadIdx.x) * SZ_GROUP;
        if (v0 + SZ_GROUP <= n) {
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
#pragma unroll
    for (int u = 0; u < SZ_GROUPS_PER_THREAD; ++u) {
        const unsigned long long v0 = base + (unsigned long long)(u * SZ_THREADS + threadIdx.x) * SZ_GROUP;
        if (v0 >= n) continue;
        uint32_t e[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) e[k] = exponent_of_code[(codes[u] >> (4 * k)) & 15u];
        // Escapes of this group: binary search for the first position >= our start in
        // the chunk's list, then walk at most 8 entries. Bounded even for a corrupt list.
        const unsigned long long chunk = v0 / chunk_size;
        unsigned long long lo = offsets[chunk], hi = offsets[chunk + 1];
        if (hi > lo && hi <= escapes) {
            const unsigned start = (unsigned)(v0 % chunk_size);
            unsigned long long a = lo, b = hi;
            while (a < b) {
                const unsigned long long mid = (a + b) / 2;
                const unsigned pos = positions[2 * mid] | (positions[2 * mid + 1] << 8);
                if (pos < start) a = mid + 1; else b = mid;
            }
            for (int step = 0; step < 8 && a < hi; ++step, ++a) {
                const unsigned pos = positions[2 * a] | (positions[2 * a + 1] << 8);
                if (pos < start || pos >= start + 8) break;
                const unsigned k = pos - start;
#pragma unroll
                for (int j = 0; j < 8; ++j) if (j == (int)k) e[j] = esc_exponents[a];
            }
        }
        const uint32_t e_lo = e[0] | (e[1] << 8) | (e[2] << 16) | (e[3] << 24);
        const uint32_t e_hi = e[4] | (e[5] << 8) | (e[6] << 16) | (e[7] << 24);
        const uint2 lo4 = kv_join_quad(e_lo, sf[u].x);
        const uint2 hi4 = kv_join_quad(e_hi, sf[u].y);
        if (v0 + SZ_GROUP <= n) {
            __stcs(reinterpret_cast<uint4*>(out + v0), make_uint4(lo4.x, lo4.y, hi4.x, hi4.y));
        } else {
            const uint32_t q[4] = {lo4.x, lo4.y, hi4.x, hi4.y};
            for (unsigned long long k = 0; v0 + k < n; ++k) out[v0 + k] = (uint16_t)(q[k / 2] >> (16 * (k % 2)));
        }
    }
}
