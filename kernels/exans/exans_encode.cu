// ExANS GPU encoder: a whole KV cache -> one container, byte-identical to the CPU
// reference exans::encode_cache (crates/exans/src/{container,record,model,rans}.rs;
// docs/formats/exans.md) for every input.
//
// Input: the cache's 2L tensors [T, H, D] concatenated in block order (layer 0 K, layer
// 0 V, ...), i.e. KvCache::concat_words. Group g of block i is the strided slice
// words[g*T*H*D + i*B*H*D ..][.. B'*H*D]; the block's symbol stream is its groups in
// order (spec 2).
//
// Three kernels, no host synchronisation (the quantizer's gain table, gain[f] =
// LOG2[f+1] - LOG2[f] of spec 5.3, is the CPU reference's, copied to the device once per
// workspace), each launched per chunk [first, end) of the blocks: the host pipelines the
// chunks over streams (crates/exans/src/gpu_encode.rs): 2 of chunk c after 1 of chunk c
// and 2 of chunk c - 1, then 3 of chunk c after 2 of chunk c.
//   1. exans_encode_blocks, one 256-thread CTA per block (64 registers):
//      a. warp w takes groups w, w+8, ...: a 256-bin exponent histogram in shared memory
//         (4 copies, lane & 3, so that lanes hitting the dominant bins conflict less),
//         filled from 16-byte loads (EE_HIST_BATCH per lane, the next batch issued before
//         the current one's updates) when H D is a multiple of 8 and words is 16-byte
//         aligned (each chunk's 8 sign+mantissa bytes also go to the block's plane in
//         scratch, 8-byte stores), else word by word; its argmax (smallest exponent on a
//         tie) is the center (spec 2); the histogram is folded, shifted by the center,
//         into the block's symbol histogram;
//      b. every warp prefetches its first round of (c) into L2; the gain table is copied
//         into shared memory (the histograms' pool, free until c), then warp 0 quantizes
//         the histogram to 2^12 exactly like Model::quantize (spec 5.2): floor-scaled
//         start, add best free / remove worst held slot, then exchange while a free slot
//         outranks a held one (warp argmax/argmin over 256 symbols by the (count x gain,
//         symbol) total order);
//      c. warp p encodes partition p (spec 6): lane j is rANS lane j, steps t = m-1..0,
//         in rounds of EE_ROUND steps (16 tiles of 256 symbols; lane j's step t codes
//         symbol 256 (t / 8) + 8 j + t mod 8 of the partition). Each round the warp first
//         stages the round's symbols C = (E + 127 - center) mod 256, 4 steps per word, in
//         its 4 KiB of the pool: the round's 4096 symbols are contiguous in the partition,
//         so the warp reads them as 8-byte chunks of 4 words, 256 contiguous bytes per
//         load instruction and 8 loads in flight per lane, when every chunk lies in one
//         group and is aligned (else word by word); the next round's symbols are
//         prefetched into L2; then every step reads its symbol from shared memory
//         (conflict-free by a swizzle), not global.
//         The lanes that shed a word in step t push it in descending lane order, so its
//         stack index is (words so far) + popc(ballot & lanemask_gt); the word is stored
//         at scratch[partition end - 1 - index] (a pointer that moves down by popc(ballot)
//         per step), which leaves the reversed stream contiguous at the end of the
//         partition's scratch slice (count_p <= n_p). A step is one 16-byte table load
//         and about eight ALU operations: the entry holds the divider's magic
//         (ee_divider: x / freq as a multiply-high, exact for every u32 x), the emit
//         threshold freq 2^20 with the divider's shift in its low 5 bits, cdf as a bias
//         and 2^12 - freq, with freq = 1 folded in by ryg_rans's bias trick (no select);
//         the row groups where every lane is active run in a loop of their own, without
//         the per-lane activity test, their four table entries loaded first;
//      d. thread 0 derives the record length (spec 4), or the raw length when the coded
//         record would not be smaller (spec 7).
//   2. exans_encode_index, one CTA: exclusive scan of align16(record_len) -> record
//      offsets (spec 8) and index entries, from the previous chunk's end offset; the
//      first chunk's also writes the container header and the zero gap.
//   3. exans_encode_records, one 256-thread CTA per record: writes the record at its
//      offset, every padding byte included, and the zero gap up to the next record,
//      16 bytes per store; the sign+mantissa plane copied from the one step 1 wrote
//      when H D is a multiple of 8 and words is 16-byte aligned (1 byte per value read
//      instead of the 2-byte words: this kernel is DRAM-bound), else from the words.
#include "../common/adler.cuh"
#include "../common/bf16_field.cuh"
#include "tiles.cuh"

#define EE_WARPS (EXANS_THREADS / 32)
// The writers pack each header into aligned u32s: pairs of u16 fields share one, and the
// precision, partitions, lanes and reserved bytes share another.
static_assert(EXANS_HEADER_VERSION % 4 == 0 && EXANS_HEADER_VERSION + 2 == EXANS_HEADER_FLAGS &&
                  EXANS_HEADER_LAYERS % 4 == 0 &&
                  EXANS_HEADER_LAYERS + 2 == EXANS_HEADER_KV_HEADS && EXANS_HEADER_HEAD_DIM % 4 == 0 &&
                  EXANS_HEADER_HEAD_DIM + 2 == EXANS_HEADER_TOKENS && EXANS_HEADER_PRECISION % 4 == 0 &&
                  EXANS_HEADER_PARTITIONS == EXANS_HEADER_PRECISION + 1 &&
                  EXANS_HEADER_LANES == EXANS_HEADER_PRECISION + 2 &&
                  EXANS_HEADER_RESERVED0 == EXANS_HEADER_PRECISION + 3 && EXANS_HEADER_CHECKSUM % 4 == 0,
              "record header packing");
static_assert(EXANS_CONTAINER_HEADER_VERSION % 4 == 0 &&
                  EXANS_CONTAINER_HEADER_VERSION + 2 == EXANS_CONTAINER_HEADER_FLAGS &&
                  EXANS_CONTAINER_HEADER_LAYERS % 4 == 0 &&
                  EXANS_CONTAINER_HEADER_LAYERS + 2 == EXANS_CONTAINER_HEADER_KV_HEADS &&
                  EXANS_CONTAINER_HEADER_HEAD_DIM % 4 == 0 &&
                  EXANS_CONTAINER_HEADER_HEAD_DIM + 2 == EXANS_CONTAINER_HEADER_BLOCK_TOKENS &&
                  EXANS_CONTAINER_HEADER_TOKENS % 8 == 0 && EXANS_CONTAINER_HEADER_BLOCKS % 4 == 0 &&
                  EXANS_CONTAINER_HEADER_RESERVED + 4 == EXANS_CONTAINER_HEADER_LEN,
              "container header packing");
#define EE_SLOTS (1u << EXANS_PRECISION)
#define EE_NONE 256u                    // "no symbol" in the quantizer's reductions
#define EE_COPIES 4  // copies of each warp's exponent histogram (lane & 3): fewer atomic conflicts
#define EE_ROUND 128  // rANS steps whose symbols a warp stages in shared memory at once
#define EE_HIST_BATCH 4  // 16-byte histogram loads per lane in flight (x2: the next batch too)
#define EE_SHARED_GROUPS 1024  // centers kept in shared memory up to this many groups (else global)

typedef unsigned long long u64;

__device__ __forceinline__ u64 ee_align16(u64 x) { return (x + 15ull) & ~15ull; }

__device__ __forceinline__ uint32_t ee_lanemask_gt() {
    uint32_t m;
    asm("mov.u32 %0, %%lanemask_gt;" : "=r"(m));
    return m;
}

// x / freq for every x < 2^32 by a multiply-high (libdivide's branch-free u32 scheme):
// freq = 2^k, k >= 1: magic 0, shift k - 1; otherwise k = floor(log2 freq), magic =
// 1 + 2 floor(2^(32+k) / freq) (+1 if twice the remainder >= freq), mod 2^32, shift k.
// q = (t + ((x - t) >> 1)) >> shift with t = umulhi(magic, x) (ee_step). freq = 1 has
// no such divider; the step's table entry handles it (see where s_tab is filled).
__device__ __forceinline__ void ee_divider(uint32_t freq, uint32_t& magic, uint32_t& shift) {
    magic = 0;
    shift = 0;
    if (freq < 2) return;
    const uint32_t k = 31u - (uint32_t)__clz(freq);
    if ((freq & (freq - 1)) == 0) {
        shift = k - 1;
        return;
    }
    const u64 num = 1ull << (32 + k);
    uint32_t m = (uint32_t)(num / freq);
    const uint32_t rem = (uint32_t)(num - (u64)m * freq);
    m += m;
    if (rem + rem >= freq) m += 1;
    magic = m + 1;
    shift = k;
}

// Warp argmax in the quantizer's order: larger weight first, then the smaller symbol.
__device__ __forceinline__ void ee_warp_best(u64& w, uint32_t& s) {
    for (int off = 16; off > 0; off >>= 1) {
        const u64 ow = __shfl_xor_sync(0xffffffffu, w, off);
        const uint32_t os = __shfl_xor_sync(0xffffffffu, s, off);
        if (ow > w || (ow == w && os < s)) {
            w = ow;
            s = os;
        }
    }
}

// Warp argmin in the same order (the slot every other one beats); (~0, EE_NONE) = none.
__device__ __forceinline__ void ee_warp_worst(u64& w, uint32_t& s) {
    for (int off = 16; off > 0; off >>= 1) {
        const u64 ow = __shfl_xor_sync(0xffffffffu, w, off);
        const uint32_t os = __shfl_xor_sync(0xffffffffu, s, off);
        const bool o_none = os == EE_NONE, none = s == EE_NONE;
        if (!o_none && (none || ow < w || (ow == w && os > s))) {
            w = ow;
            s = os;
        }
    }
}

__device__ __forceinline__ uint32_t ee_warp_sum(uint32_t v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The best free slot: symbol s's (f_s + 1)-th, over the present symbols. Lane holds
// symbols lane*8 + q.
__device__ __forceinline__ void ee_best_free(const uint32_t (&c)[8], const uint32_t (&f)[8],
                                             const u64* __restrict__ gain, uint32_t lane, u64& w,
                                             uint32_t& s) {
    w = 0;
    s = EE_NONE;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        if (c[q] == 0) continue;
        const u64 key = (u64)c[q] * gain[f[q]];
        if (s == EE_NONE || key > w) {  // ascending symbols: a tie keeps the smaller
            w = key;
            s = lane * 8 + q;
        }
    }
    ee_warp_best(w, s);
}

// The worst held slot beyond the mandatory first: symbol s's f_s-th, f_s >= 2.
__device__ __forceinline__ void ee_worst_held(const uint32_t (&c)[8], const uint32_t (&f)[8],
                                              const u64* __restrict__ gain, uint32_t lane, u64& w,
                                              uint32_t& s) {
    w = ~0ull;
    s = EE_NONE;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        if (c[q] == 0 || f[q] < 2) continue;
        const u64 key = (u64)c[q] * gain[f[q] - 1];
        if (s == EE_NONE || key <= w) {  // ascending symbols: a tie takes the larger
            w = key;
            s = lane * 8 + q;
        }
    }
    ee_warp_worst(w, s);
}

// Adds `delta` to symbol s's frequency in the lane that holds it.
__device__ __forceinline__ void ee_bump(uint32_t (&f)[8], uint32_t lane, uint32_t s, int delta) {
#pragma unroll
    for (int q = 0; q < 8; ++q)
        if (s == lane * 8 + q) f[q] += delta;
}

__device__ __forceinline__ void ee_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Counts the exponents of the two BF16 words packed in v.
__device__ __forceinline__ void ee_hist2(uint32_t* s_hist, uint32_t v, uint32_t copy) {
    atomicAdd(&s_hist[((v >> 7) & 0xffu) * EE_COPIES + copy], 1u);
    atomicAdd(&s_hist[((v >> 23) & 0xffu) * EE_COPIES + copy], 1u);
}

// The sign+mantissa bytes of the four BF16 words packed in a and b, little-endian.
__device__ __forceinline__ uint32_t ee_sm4(uint32_t a, uint32_t b) {
    // Per word: (w >> 8) & 0x80 | w & 0x7f, i.e. bit 15 -> bit 7, bits 0..6 kept.
    const uint32_t pa = ((a >> 8) & 0x00800080u) | (a & 0x007f007fu);  // bytes 0 and 2
    const uint32_t pb = ((b >> 8) & 0x00800080u) | (b & 0x007f007fu);
    return __byte_perm(pa, pb, 0x6420);
}

// The staging word of row group rg (rows 4 rg .. 4 rg + 3, byte row & 3) and column
// (lane) j: row groups of 32 words, the column's bit 4 flipped in odd row groups, so that
// neither the staging stores (one store instruction writes row groups 2 h and 2 h + 1, 16
// columns each, the same 16 in both: the flip puts them in the two halves of the banks)
// nor the step loads (one row group, 32 columns) conflict.
__device__ __forceinline__ uint32_t ee_stage_word(uint32_t rg, uint32_t j) {
    return rg * EXANS_LANES + (j ^ ((rg & 1u) << 4));
}

// One rANS step (spec 6) of symbol sym; ALL: every lane is active. The symbol's s_tab
// entry (see the table's construction) holds the step pre-digested so that the common
// case is one 16-byte shared load and eight ALU operations:
//   emit  <=> x >= freq 2^20 <=> (x | 31) >= tab.y (freq 2^20 is a multiple of 32);
//   q      = x / freq: multiply-high by tab.x, shift by tab.y mod 32 (a funnel shift
//            takes its amount mod 32, so the shift rides in tab.y's low 5 bits);
//   x'     = (q << 12) + (x - q freq) + cdf = x + tab.z + q tab.w, tab.w = 2^12 - freq.
// A word shed in this step goes to stk[-(its index among this step's words)]; stk then
// moves down past them (stk = region + np - 1 - words so far).
// ALL: the entry tab is given (loaded ahead by the caller), not looked up.
template <bool ALL>
__device__ __forceinline__ void ee_step(bool active, uint32_t sym, uint4 tab, uint32_t gt, const uint4* s_tab,
                                        uint16_t*& stk, uint32_t& x) {
    if (ALL) active = true;
    bool emit = false;
    if (active) {
        if (!ALL) tab = s_tab[sym];
        emit = (x | 31u) >= tab.y;
    }
    const uint32_t b = __ballot_sync(0xffffffffu, emit);
    if (emit) {
        stk[-(int)__popc(b & gt)] = (uint16_t)x;
        x >>= 16;
    }
    stk -= __popc(b);
    if (active) {
        const uint32_t t = __umulhi(tab.x, x);
        const uint32_t q = __funnelshift_r(t + ((x - t) >> 1), 0u, tab.y);
        x += tab.z + q * tab.w;
    }
}

// The round's steps t = t_lo + rows - 1 .. t_lo (row t - t_lo), a row group (one staging
// word, 4 steps) at a time. Row group rg has every lane active (4 rg + 4 <= rows and
// t_lo + 4 rg + 4 <= minlen) exactly when rg < all, so the groups from the top down to
// all take the per-lane activity test and the rest run in a loop of their own, without
// it and without the per-group test.
__device__ __forceinline__ void ee_steps(uint32_t rows, uint32_t t_lo, uint32_t minlen, uint32_t len,
                                         uint32_t lane, uint32_t gt, const uint32_t* stage32,
                                         const uint4* s_tab, uint16_t*& stk, uint32_t& x) {
    const uint32_t all = min(rows / 4, minlen > t_lo ? (minlen - t_lo) / 4 : 0u);
    uint32_t rg = (rows + 3) / 4;
#pragma unroll 1
    while (rg > all) {
        --rg;
        const uint32_t wv = stage32[ee_stage_word(rg, lane)];
        const uint32_t t0 = t_lo + 4 * rg;
#pragma unroll
        for (int e = 3; e >= 0; --e) {
            if (4 * rg + e < rows)
                ee_step<false>(t0 + e < len, (wv >> (8 * e)) & 255u, make_uint4(0, 0, 0, 0), gt, s_tab, stk, x);
        }
    }
#pragma unroll 1
    while (rg > 0) {
        --rg;
        const uint32_t wv = stage32[ee_stage_word(rg, lane)];
        // The four entries first: their loads overlap the steps' dependent chain on x.
        const uint4 a = s_tab[wv >> 24], b = s_tab[(wv >> 16) & 255u], c = s_tab[(wv >> 8) & 255u],
                    d = s_tab[wv & 255u];
        ee_step<true>(true, 0, a, gt, s_tab, stk, x);
        ee_step<true>(true, 0, b, gt, s_tab, stk, x);
        ee_step<true>(true, 0, c, gt, s_tab, stk, x);
        ee_step<true>(true, 0, d, gt, s_tab, stk, x);
    }
}

// One CTA per block (header comment, step 1), 64 registers, 4 CTAs (32 warps) per SM.
//
// kSums (exans_encode_blocks_checksum) also adds the Adler-32 sums of each block's values
// to record_sums[2 blk, 2 blk + 1] (zeroed by the host), for exans_encode_records'
// checksum (spec 3), when (a) reads them in 16-byte chunks (H D a multiple of 8, words
// 16-byte aligned; else the host runs kv_adler_records instead): each lane adds the chunks
// it loads, at their byte positions in the record (below 2^32: N < 2^31), in 64-bit sums
// (reduced modulo 65521 before they could pass 2^64) kept in shared memory, not
// registers (held across (a) they made ptxas spill in the whole kernel), and each warp
// commits once per block. A twin, so that the default kernel's registers and code stay
// as they are.
template <bool kSums>
__device__ __forceinline__ void ee_encode_blocks(
    const uint16_t* __restrict__ words, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
    uint32_t block_tokens, u64 tokens, uint32_t blocks, uint32_t first, uint32_t end, const u64* __restrict__ gain,
    uint8_t* __restrict__ centers_out, uint16_t* __restrict__ freqs_out, uint32_t* __restrict__ dir_out,
    u64* __restrict__ lens_out, uint16_t* __restrict__ scratch, uint8_t* __restrict__ sgnman_out,
    u64* __restrict__ record_sums) {
    // (a) uses the pool as the warps' exponent histograms, (c) as the warps' symbol
    // staging (EE_ROUND rows of 32 lanes' bytes per warp, 4 KiB each).
    __shared__ __align__(16) uint32_t s_pool[EE_WARPS * 256 * EE_COPIES];
    __shared__ uint32_t s_counts[256];
    __shared__ uint32_t s_enc[256];  // freq | cdf << 16
    __shared__ uint4 s_tab[256];     // (divider magic, freq, cdf, divider shift): one load per step
    __shared__ uint32_t s_words[EXANS_PARTITIONS];
    __shared__ uint16_t s_payload[EXANS_THREADS];  // lane 32 p + j's payload bytes (spec 6.4)
    static_assert(EXANS_THREADS == EXANS_PARTITIONS * EXANS_LANES, "thread k reads lane k's payload");
    __shared__ uint32_t s_k;
    __shared__ uint8_t s_centers[EE_SHARED_GROUPS];
    __shared__ ulonglong2 s_adler[kSums ? EXANS_THREADS : 1];  // kSums: each thread's (S, W)
    static_assert(EE_WARPS * EE_ROUND * EXANS_LANES <= EE_WARPS * 256 * EE_COPIES * 4, "staging fits the pool");
    static_assert(EE_ROUND % (2 * EXANS_GROUP) == 0 && EXANS_TILE == EXANS_LANES * EXANS_GROUP,
                  "a round is whole pairs of tiles: the staging chunks' row groups come in pairs");

    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const u64 hd = (u64)kv_heads * head_dim;
    const u64 thd = tokens * hd;
    const uint32_t groups = 2u * layers;
    // 16-byte loads of a group's words: every group slice starts at a multiple of 8 words.
    const bool vec = (hd & 7u) == 0 && ((size_t)words & 15u) == 0;
    uint32_t* s_hist = s_pool + warp * 256 * EE_COPIES;  // [bin * EE_COPIES + copy]

    // The stride stops at end instead of wrapping past 2^32 (end can be up to u32::MAX).
    for (uint32_t blk = first + blockIdx.x; blk < end; blk += min(gridDim.x, end - blk)) {
        const u64 t0 = (u64)blk * block_tokens;
        const u64 bt = min((u64)block_tokens, tokens - t0);
        const u64 per_group = bt * hd;
        const u64 n = per_group * groups;  // < 2^31 (checked on the host)
        const u64 base = t0 * hd;          // the block's offset inside each tensor
        const u64 scratch_base = base * groups;
        uint8_t* centers = centers_out + (u64)blk * groups;
        const uint8_t* cen = groups <= EE_SHARED_GROUPS ? s_centers : centers;
        uint8_t* const sgnman_plane = sgnman_out + scratch_base;  // the block's plane (vec only)

        // Lane k = tid's payload (spec 6.4): the sign+mantissa bytes of block values 2 k and
        // 2 k + 1 (those below P = min(n, 512); a byte past them is 0), which its initial
        // state carries, 2^16 + b0 + 256 b1. Read first, where few registers are live (after
        // the histogram pass ptxas spilled more), for this thread's lane in (c).
        {
            const uint32_t payload = (uint32_t)min(n, (u64)EXANS_PAYLOAD_BYTES);
            const uint32_t pg = (uint32_t)per_group;
            uint32_t bytes = 0;
#pragma unroll
            for (uint32_t i = 0; i < 2; ++i) {
                const uint32_t v = 2u * tid + i;  // the value, and its index in the payload
                if (v < payload) {
                    const uint32_t g = v / pg, r = v - g * pg;
                    bytes |= kv_sign_mantissa_of(words[(u64)g * thd + base + r]) << (8 * i);
                }
            }
            s_payload[tid] = (uint16_t)bytes;
        }
        // (a) centers and the symbol histogram.
        for (uint32_t i = tid; i < EE_WARPS * 256 * EE_COPIES / 4; i += EXANS_THREADS)
            ((uint4*)s_pool)[i] = make_uint4(0, 0, 0, 0);
        s_counts[tid] = 0;
        __syncthreads();
        if (kSums) s_adler[tid] = make_ulonglong2(0, 0);
        for (uint32_t g = warp; g < groups; g += EE_WARPS) {
            const uint16_t* src = words + g * thd + base;
            const uint32_t copy = lane & (EE_COPIES - 1);
            if (vec) {
                // EE_HIST_BATCH 16-byte loads per lane per step (chunks v + 32 b), the next
                // step's batch issued before this step's updates: the loads' latency was
                // this loop's main stall with one load in flight. Chunks past n8 are not
                // loaded and not counted.
                const uint4* src4 = (const uint4*)src;
                const uint32_t n8 = (uint32_t)(per_group >> 3);
                uint4 cur[EE_HIST_BATCH];
#pragma unroll
                for (uint32_t b = 0; b < EE_HIST_BATCH; ++b)
                    cur[b] = lane + b * EXANS_LANES < n8 ? src4[lane + b * EXANS_LANES] : make_uint4(0, 0, 0, 0);
                for (uint32_t v = lane; v < n8; v += EE_HIST_BATCH * EXANS_LANES) {
                    // kSums: running sums of the batch's chunks (kv_adler_chain16), chunk b at
                    // byte 512 b after chunk v; q holds the byte sum after chunks 0 .. B - 2.
                    uint32_t batch_s = 0, batch_o = 0, batch_q = 0;
                    uint4 nxt[EE_HIST_BATCH];
#pragma unroll
                    for (uint32_t b = 0; b < EE_HIST_BATCH; ++b) {
                        const uint32_t i = v + (EE_HIST_BATCH + b) * EXANS_LANES;
                        nxt[b] = i < n8 ? src4[i] : make_uint4(0, 0, 0, 0);
                    }
#pragma unroll
                    for (uint32_t b = 0; b < EE_HIST_BATCH; ++b) {
                        if (kSums && b > 0) batch_q += batch_s;
                        if (v + b * EXANS_LANES < n8) {
                            ee_hist2(s_hist, cur[b].x, copy);
                            ee_hist2(s_hist, cur[b].y, copy);
                            ee_hist2(s_hist, cur[b].z, copy);
                            ee_hist2(s_hist, cur[b].w, copy);
                            // The chunk's 8 sign+mantissa bytes into the block's plane, for
                            // exans_encode_records (1 byte per value there instead of
                            // reading the 2-byte words again); 8-byte aligned: per_group
                            // and scratch_base are multiples of 8.
                            *(uint2*)(sgnman_plane + g * per_group + 8 * (v + b * EXANS_LANES)) =
                                make_uint2(ee_sm4(cur[b].x, cur[b].y), ee_sm4(cur[b].z, cur[b].w));
                            if (kSums) kv_adler_chain16(cur[b], batch_s, batch_o);
                        }
                        cur[b] = nxt[b];
                    }
                    if (kSums) {
                        // Relative to chunk v: sum of 512 b S_b + o, and sum of b S_b =
                        // (B - 1) S - q (below 2^32: 4 chunks of 16 bytes within 2 KiB).
                        const uint32_t batch_ws =
                            16u * EXANS_LANES * ((EE_HIST_BATCH - 1) * batch_s - batch_q) + batch_o;
                        // Chunk v of group g starts at byte 2 (g per_group + 8 v) < 2 N.
                        ulonglong2 acc = s_adler[tid];
                        acc.x += batch_s;
                        acc.y += (u64)(uint32_t)(2 * (g * per_group + 8ull * v)) * batch_s + batch_ws;
                        if (acc.y >> 63) acc.y %= KV_ADLER_MOD;
                        s_adler[tid] = acc;
                    }
                }
            } else {
                // kSums adds nothing here: for such input the host sums the values with
                // kv_adler_records (sums here made ptxas spill more in the whole kernel).
                for (u64 r = lane; r < per_group; r += EXANS_LANES)
                    atomicAdd(&s_hist[kv_exponent_of(src[r]) * EE_COPIES + copy], 1u);
            }
            __syncwarp();
            // Lane holds bins e = lane + 32 q (the copies summed, then zeroed); its best in
            // ascending e, then the warp's (count desc, exponent asc) argmax.
            uint32_t h[8];
#pragma unroll
            for (uint32_t q = 0; q < 8; ++q) {
                const uint32_t e = lane + 32 * q;
                h[q] = 0;
#pragma unroll
                for (uint32_t j = 0; j < EE_COPIES; ++j) {
                    h[q] += s_hist[e * EE_COPIES + j];
                    s_hist[e * EE_COPIES + j] = 0;
                }
            }
            uint32_t best_e = lane, best_c = h[0];
#pragma unroll
            for (uint32_t q = 1; q < 8; ++q) {
                if (h[q] > best_c) {
                    best_c = h[q];
                    best_e = lane + 32 * q;
                }
            }
            for (int off = 16; off > 0; off >>= 1) {
                const uint32_t oc = __shfl_xor_sync(0xffffffffu, best_c, off);
                const uint32_t oe = __shfl_xor_sync(0xffffffffu, best_e, off);
                if (oc > best_c || (oc == best_c && oe < best_e)) {
                    best_c = oc;
                    best_e = oe;
                }
            }
            const uint32_t center = best_e;
            if (lane == 0) {
                centers[g] = (uint8_t)center;
                if (groups <= EE_SHARED_GROUPS) s_centers[g] = (uint8_t)center;
            }
#pragma unroll
            for (uint32_t q = 0; q < 8; ++q) {
                const uint32_t e = lane + 32 * q;
                if (h[q]) atomicAdd(&s_counts[(e + EXANS_CENTER_SYMBOL - center) & 255u], h[q]);
            }
            __syncwarp();
        }
        if (kSums) kv_adler_warp_flush_mod(s_adler[tid].x, s_adler[tid].y, 0, record_sums + 2ull * blk);
        // The first round of (c)'s symbols (see there) into L2 while warp 0 quantizes: the
        // round loop prefetches each next round, but nothing covered the first one. A hint
        // only: two prefetches per lane, one every 64 words (128 bytes) of the round, so
        // every line of it but the last partial one is touched, each where its 64 words
        // lie in one group (the spans need not be line-aligned).
        {
            const u64 ps = (u64)warp * n / EXANS_PARTITIONS, pe = (u64)(warp + 1) * n / EXANS_PARTITIONS;
            const uint32_t np = (uint32_t)(pe - ps), pg = (uint32_t)per_group;
            const uint32_t m = exans_lane_run(np, 0);
            const uint32_t q0 = m ? EXANS_LANES * ((m - 1) / EE_ROUND * EE_ROUND) : np;
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t o = q0 + 64u * (2u * lane + h);
                if (o < np) {
                    const uint32_t k = (uint32_t)ps + o, g = k / pg, r = k - g * pg;
                    if (r + 63u < pg) ee_prefetch_l2(words + (u64)g * thd + base + r);
                }
            }
        }
        __syncthreads();
        // The gain table into the pool (free from here until (c)), for the quantizer.
        {
            const uint4* from = (const uint4*)gain;
            uint4* to = (uint4*)s_pool;
            for (uint32_t i = tid; i < EXANS_ENCODE_GAIN_LEN * sizeof(u64) / sizeof(uint4); i += EXANS_THREADS) to[i] = from[i];
        }
        __syncthreads();

        // (b) the model (warp 0).
        if (warp == 0) {
            const u64* s_gain = (const u64*)s_pool;
            uint32_t c[8], f[8];
            uint32_t present = 0;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                c[q] = s_counts[lane * 8 + q];
                present += c[q] != 0;
            }
            const uint32_t k = ee_warp_sum(present);
            if (k == 1) {
#pragma unroll
                for (int q = 0; q < 8; ++q) f[q] = c[q] ? EE_SLOTS : 0;
            } else {
                uint32_t local = 0;
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    f[q] = c[q] ? max(1u, (uint32_t)(((u64)c[q] << EXANS_PRECISION) / n)) : 0;
                    local += f[q];
                }
                uint32_t sum = ee_warp_sum(local);
                u64 w, hw;
                uint32_t s, hs;
                while (sum < EE_SLOTS) {
                    ee_best_free(c, f, s_gain, lane, w, s);
                    ee_bump(f, lane, s, 1);
                    ++sum;
                }
                while (sum > EE_SLOTS) {
                    ee_worst_held(c, f, s_gain, lane, w, s);
                    if (s == EE_NONE) break;
                    ee_bump(f, lane, s, -1);
                    --sum;
                }
                for (;;) {
                    ee_worst_held(c, f, s_gain, lane, hw, hs);
                    if (hs == EE_NONE) break;
                    ee_best_free(c, f, s_gain, lane, w, s);
                    if (s == hs || !(w > hw || (w == hw && s < hs))) break;
                    ee_bump(f, lane, s, 1);
                    ee_bump(f, lane, hs, -1);
                }
            }
            // cdf in ascending symbol order: the lane's 8, then an exclusive warp scan.
            uint32_t total = 0;
#pragma unroll
            for (int q = 0; q < 8; ++q) total += f[q];
            uint32_t incl = total;
            for (int off = 1; off < 32; off <<= 1) {
                const uint32_t o = __shfl_up_sync(0xffffffffu, incl, off);
                if (lane >= (uint32_t)off) incl += o;
            }
            uint32_t cdf = incl - total;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                s_enc[lane * 8 + q] = f[q] | (cdf << 16);
                freqs_out[(u64)blk * 256 + lane * 8 + q] = (uint16_t)f[q];
                cdf += f[q];
            }
            if (lane == 0) s_k = k;
        }
        __syncthreads();
        {
            // The step's entry (ee_step): (magic, freq 2^20 | shift, bias, 2^12 - freq).
            // freq = 1 has no multiply-high divider; magic 2^32 - 1, shift 0 give q = x - 1
            // (x >= 2^16 > 0), and bias cdf + 2^12 - 1 makes x + bias + q (2^12 - 1) =
            // 2^12 x + cdf (ryg_rans's trick), so the step needs no select. freq = 2^12
            // (the only symbol, k = 1) would wrap freq 2^20 to 0: its threshold is
            // 2^32 - 32 | shift, never reached, since such a step maps x to x and x stays
            // at its initial state, below 2^17. Absent symbols (freq 0) are never looked up.
            uint32_t magic, shift;
            const uint32_t ent = s_enc[tid];
            const uint32_t freq = ent & 0xffffu, cdf = (ent >> 16) & 0xfffu;
            ee_divider(freq, magic, shift);
            uint32_t bias = cdf;
            if (freq == 1) {
                magic = 0xffffffffu;
                shift = 0;
                bias += EE_SLOTS - 1;
            }
            const uint32_t thr = (freq >= EE_SLOTS ? 0xffffffe0u : freq << (32 - EXANS_PRECISION)) | shift;
            s_tab[tid] = make_uint4(magic, thr, bias, EE_SLOTS - freq);
        }
        __syncthreads();

        // (c) warp p encodes partition p, in rounds of EE_ROUND steps t = t_hi-1 .. t_lo
        // (t_lo a multiple of EE_ROUND, so a round is 16 whole tiles but for the
        // partition's last): the warp first stages the round's symbols C = (E + 127 -
        // center) mod 256 in shared memory, the 4 symbols of lane j's rows 4 rg .. 4 rg + 3
        // (row = t - t_lo) packed in staging word ee_stage_word(rg, j); then each lane
        // steps through its column, one 32-bit shared load per 4 steps. By the tile order
        // (spec 6.2) that staging word holds the 4 consecutive symbols at partition offset
        // 32 t_lo + 4 c, chunk c = 64 (rg / 2) + 2 j + rg % 2: the round's symbols are
        // 32 EE_ROUND consecutive ones, which the warp reads as 8-byte chunks, lane L
        // taking chunks L + 32 i (256 contiguous bytes per load instruction).
        {
            const u64 ps = (u64)warp * n / EXANS_PARTITIONS, pe = (u64)(warp + 1) * n / EXANS_PARTITIONS;
            const uint32_t np = (uint32_t)(pe - ps);
            const uint32_t len = exans_lane_run(np, lane);  // this lane's run (steps)
            const uint32_t m = exans_lane_run(np, 0);       // the partition's steps
            const uint32_t pg = (uint32_t)per_group;  // <= n < 2^31
            uint32_t* const stage32 = s_pool + warp * (EE_ROUND / 4 * EXANS_LANES);
            uint32_t x = EXANS_STATE_LOWER + s_payload[tid];  // spec 6.4, see (a)
            // The partition's scratch slice; the stack's word k at region[np - 1 - k], so
            // the next word's slot is stk = region + np - 1 - (words so far). stk is only
            // dereferenced at a word's slot (index < count <= np).
            uint16_t* const region = scratch + scratch_base + ps;
            uint16_t* stk = region + np - 1;
            const uint32_t gt = ee_lanemask_gt();
            const uint32_t minlen = exans_lane_run(np, EXANS_LANES - 1);  // len falls with lane
            // 8-byte chunk loads need every chunk inside one group and 8-byte aligned: the
            // block index ps + 32 t_lo + 4 c is a multiple of 4 when ps is, a group of
            // pg >= 128 values (a multiple of 4) holds whole chunks, and a chunk's word
            // sits at g thd + base + r.
            const bool chunked = ((ps | pg | thd | base) & 3u) == 0 && pg >= 4 * EXANS_LANES &&
                                 ((size_t)words & 7u) == 0;
            for (uint32_t t_hi = m; t_hi > 0;) {
                const uint32_t t_lo = (t_hi - 1) / EE_ROUND * EE_ROUND;
                const uint32_t q0 = EXANS_LANES * t_lo;  // the round's first symbol in the partition
                const uint32_t vals = min(np - q0, EXANS_LANES * EE_ROUND);  // symbols staged
                // The next round's symbols, [q0 - 4096, q0), into L2: two prefetches per
                // lane, one every 64 words (as before the quantizer), each where its 64
                // words lie in one group.
                if (t_lo > 0) {
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) {
                        const uint32_t k = (uint32_t)ps + q0 - EXANS_LANES * EE_ROUND + 64u * (2u * lane + h);
                        const uint32_t g = k / pg, r = k - g * pg;
                        if (r + 63u < pg) ee_prefetch_l2(words + (u64)g * thd + base + r);
                    }
                }
                __syncwarp();
                if (chunked) {
                    // Lane L's chunks c = L + 32 i lie 128 symbols apart: its group g and
                    // offset r advance by 128 per chunk (one group boundary at most, as
                    // pg >= 128). 8 loads in flight, then their symbols packed and stored.
                    uint32_t k = (uint32_t)ps + q0 + 4u * lane;
                    uint32_t g = k / pg, r = k - g * pg;
#pragma unroll 1
                    for (uint32_t i0 = 0; i0 < EE_ROUND / 4; i0 += 8) {
                        uint2 w[8];
                        uint32_t cj[8];
#pragma unroll
                        for (uint32_t u = 0; u < 8; ++u) {
                            const uint32_t o = 4u * (lane + EXANS_LANES * (i0 + u));  // offset in the round
                            w[u] = make_uint2(0, 0);
                            cj[u] = 0;
                            if (o < vals) {  // else g may lie past the cache
                                cj[u] = EXANS_CENTER_SYMBOL - cen[g];
                                w[u] = __ldg(reinterpret_cast<const uint2*>(words + (u64)g * thd + base + r));
                            }
                            r += 4 * EXANS_LANES;
                            if (r >= pg) {
                                r -= pg;
                                ++g;
                            }
                        }
#pragma unroll
                        for (uint32_t u = 0; u < 8; ++u) {
                            const uint32_t c = lane + EXANS_LANES * (i0 + u);
                            if (4u * c < vals) {
                                const uint32_t packed = ((kv_exponent_of(w[u].x) + cj[u]) & 255u) |
                                                        ((kv_exponent_of(w[u].x >> 16) + cj[u]) & 255u) << 8 |
                                                        ((kv_exponent_of(w[u].y) + cj[u]) & 255u) << 16 |
                                                        (kv_exponent_of(w[u].y >> 16) + cj[u]) << 24;
                                stage32[ee_stage_word(2u * (c / 64u) + (c & 1u), (c % 64u) / 2u)] = packed;
                            }
                        }
                    }
                } else {
                    // Any other shape: symbol by symbol, each finding its group by division.
                    for (uint32_t o = lane; o < vals; o += EXANS_LANES) {
                        const uint32_t k = (uint32_t)ps + q0 + o;
                        const uint32_t g = k / pg, r = k - g * pg;
                        const uint32_t w = words[(u64)g * thd + base + r];
                        const uint32_t c = o / 4u;
                        ((uint8_t*)stage32)[4 * ee_stage_word(2u * (c / 64u) + (c & 1u), (c % 64u) / 2u) + (o & 3u)] =
                            (uint8_t)(kv_exponent_of(w) + EXANS_CENTER_SYMBOL - cen[g]);
                    }
                }
                __syncwarp();
                ee_steps(t_hi - t_lo, t_lo, minlen, len, lane, gt, stage32, s_tab, stk, x);
                t_hi = t_lo;
            }
            const uint32_t tail = (uint32_t)((region + np) - (stk + 1));  // the words pushed
            dir_out[(u64)blk * EXANS_ENCODE_DIRECTORY_WORDS + EXANS_PARTITIONS + warp * EXANS_LANES + lane] = x;
            if (lane == 0) {
                dir_out[(u64)blk * EXANS_ENCODE_DIRECTORY_WORDS + warp] = tail;
                s_words[warp] = tail;
            }
        }
        __syncthreads();

        // (d) the record length.
        if (tid == 0) {
            const u64 model = EXANS_HEADER_LEN + 2ull * layers;
            u64 at = ee_align16(model + 2 + 3ull * s_k) + EXANS_DIRECTORY_LEN;
            for (int p = 0; p < EXANS_PARTITIONS; ++p) at = ee_align16(at + 2ull * s_words[p]);
            // The section holds n - P bytes; the first P travel in the states (spec 6.4).
            const u64 coded = at + n - min(n, (u64)EXANS_PAYLOAD_BYTES), raw = EXANS_HEADER_LEN + 2 * n;
            lens_out[blk] = coded >= raw ? raw : coded;
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(EXANS_THREADS, 4) exans_encode_blocks(
    const uint16_t* __restrict__ words, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
    uint32_t block_tokens, u64 tokens, uint32_t blocks, uint32_t first, uint32_t end, const u64* __restrict__ gain,
    uint8_t* __restrict__ centers_out, uint16_t* __restrict__ freqs_out, uint32_t* __restrict__ dir_out,
    u64* __restrict__ lens_out, uint16_t* __restrict__ scratch, uint8_t* __restrict__ sgnman_out) {
    ee_encode_blocks<false>(words, layers, kv_heads, head_dim, block_tokens, tokens, blocks, first, end, gain,
                            centers_out, freqs_out, dir_out, lens_out, scratch, sgnman_out, nullptr);
}

extern "C" __global__ void __launch_bounds__(EXANS_THREADS, 4) exans_encode_blocks_checksum(
    const uint16_t* __restrict__ words, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
    uint32_t block_tokens, u64 tokens, uint32_t blocks, uint32_t first, uint32_t end, const u64* __restrict__ gain,
    uint8_t* __restrict__ centers_out, uint16_t* __restrict__ freqs_out, uint32_t* __restrict__ dir_out,
    u64* __restrict__ lens_out, uint16_t* __restrict__ scratch, uint8_t* __restrict__ sgnman_out,
    u64* __restrict__ record_sums) {
    ee_encode_blocks<true>(words, layers, kv_heads, head_dim, block_tokens, tokens, blocks, first, end, gain,
                           centers_out, freqs_out, dir_out, lens_out, scratch, sgnman_out, record_sums);
}

// One CTA per chunk [first, end) of the blocks: their record offsets and index entries,
// and, for the chunk that starts at block 0, the container header and the gap after the
// index. The chunk's first offset is the end of the index (first = 0) or the one the
// previous chunk's launch wrote to offsets[first]. Thread t scans the blocks
// [first + t s, first + t s + s), s = ceil((end - first) / EXANS_THREADS): its segment sum,
// a block-wide scan of the sums, then the segment's offsets (two passes over the
// segment's lengths, one barrier).
extern "C" __global__ void __launch_bounds__(EXANS_THREADS) exans_encode_index(
    uint32_t layers, uint32_t kv_heads, uint32_t head_dim, uint32_t block_tokens, u64 tokens, uint32_t blocks,
    uint32_t first, uint32_t end, const u64* __restrict__ lens, u64* __restrict__ offsets,
    uint8_t* __restrict__ out) {
    __shared__ u64 s_warp[EE_WARPS];
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const u64 index_end = EXANS_CONTAINER_HEADER_LEN + 8ull * ((u64)blocks + 1);
    const u64 chunk_start = first == 0 ? ee_align16(index_end) : offsets[first];
    if (first == 0 && tid == 0) {
        uint32_t* h = (uint32_t*)out;
        h[EXANS_CONTAINER_HEADER_MAGIC / 4] = EXANS_CONTAINER_MAGIC;
        h[EXANS_CONTAINER_HEADER_VERSION / 4] = EXANS_VERSION;  // version, flags 0
        h[EXANS_CONTAINER_HEADER_LAYERS / 4] = layers | (kv_heads << 16);
        h[EXANS_CONTAINER_HEADER_HEAD_DIM / 4] = head_dim | (block_tokens << 16);
        h[EXANS_CONTAINER_HEADER_TOKENS / 4] = (uint32_t)tokens;
        h[EXANS_CONTAINER_HEADER_TOKENS / 4 + 1] = (uint32_t)(tokens >> 32);
        h[EXANS_CONTAINER_HEADER_BLOCKS / 4] = blocks;
        h[EXANS_CONTAINER_HEADER_RESERVED / 4] = 0;
        for (u64 b = index_end; b < chunk_start; ++b) out[b] = 0;
    }
    // In u32 without wrapping for any first < end <= u32::MAX: seg <= 2^24, tid seg < 2^32.
    const uint32_t count = end - first;  // >= 1 (the host plans no empty chunk)
    const uint32_t seg = count / EXANS_THREADS + (count % EXANS_THREADS != 0);
    const uint32_t lo = first + min(tid * seg, count), hi = lo + min(seg, end - lo);
    u64 sum = 0;
#pragma unroll 4
    for (uint32_t i = lo; i < hi; ++i) sum += ee_align16(lens[i]);
    u64 incl = sum;
    for (int off = 1; off < 32; off <<= 1) {
        const u64 o = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= (uint32_t)off) incl += o;
    }
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    u64 at = chunk_start + incl - sum;
    for (uint32_t w = 0; w < warp; ++w) at += s_warp[w];
    u64* index = (u64*)(out + EXANS_CONTAINER_HEADER_LEN);
    for (uint32_t i = lo; i < hi; ++i) {
        offsets[i] = at;
        index[i] = at;
        at += ee_align16(lens[i]);
    }
    if (hi == end && lo < hi) {  // the thread with the chunk's last block: the next offset
        offsets[end] = at;
        index[end] = at;
    }
}

// Value k of block (blk) as a (group base pointer, index) walk: the word at stream
// index k of the block.
struct EeCursor {
    const uint16_t* src;
    u64 g, r;
};

__device__ __forceinline__ EeCursor ee_cursor(const uint16_t* words, u64 thd, u64 base, u64 per_group, u64 k) {
    // k < N < 2^31 (checked on the host): a 32-bit division.
    EeCursor c;
    c.g = (uint32_t)k / (uint32_t)per_group;
    c.r = k - c.g * per_group;
    c.src = words + c.g * thd + base;
    return c;
}

__device__ __forceinline__ uint32_t ee_next(EeCursor& c, u64 thd, u64 per_group) {
    const uint32_t w = c.src[c.r];
    if (++c.r == per_group) {
        c.r = 0;
        ++c.g;
        c.src += thd;
    }
    return w;
}

// The Adler-32 of block `blk`'s n values from its sums, or 0 without them.
__device__ __noinline__ uint32_t ee_checksum(const unsigned long long* record_sums, uint32_t blk, unsigned long long n) {
    if (!record_sums) return 0;
    return kv_adler_from_sums(2 * n, record_sums[2 * (unsigned long long)blk], record_sums[2 * (unsigned long long)blk + 1]);
}

// At most 48 registers (5 CTAs per SM), as before the plane copy: left alone, ptxas
// takes 56 for it, and this kernel lives on bytes in flight.
extern "C" __global__ void __launch_bounds__(EXANS_THREADS, 5) exans_encode_records(
    const uint16_t* __restrict__ words, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
    uint32_t block_tokens, u64 tokens, uint32_t blocks, uint32_t first, uint32_t end, const uint8_t* __restrict__ centers_in,
    const uint16_t* __restrict__ freqs_in, const uint32_t* __restrict__ dir_in, const u64* __restrict__ lens,
    const u64* __restrict__ offsets, const uint16_t* __restrict__ scratch, const uint8_t* __restrict__ sgnman_in,
    const u64* __restrict__ record_sums, uint8_t* __restrict__ out) {
    __shared__ uint32_t s_entry[256];  // symbol | freq << 8, by rank
    __shared__ uint32_t s_warp[EE_WARPS];
    __shared__ uint32_t s_k;
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const u64 hd = (u64)kv_heads * head_dim;
    const u64 thd = tokens * hd;
    const uint32_t groups = 2u * layers;
    const bool vec = (hd & 7u) == 0 && ((size_t)words & 15u) == 0;

    // The stride stops at end instead of wrapping past 2^32 (end can be up to u32::MAX).
    for (uint32_t blk = first + blockIdx.x; blk < end; blk += min(gridDim.x, end - blk)) {
        const u64 t0 = (u64)blk * block_tokens;
        const u64 bt = min((u64)block_tokens, tokens - t0);
        const u64 per_group = bt * hd;
        const u64 n = per_group * groups;
        const u64 base = t0 * hd;
        const u64 scratch_base = base * groups;
        const u64 len = lens[blk];
        const u64 raw_len = EXANS_HEADER_LEN + 2 * n;
        const bool raw = len == raw_len;
        uint8_t* rec = out + offsets[blk];
        uint32_t* rec32 = (uint32_t*)rec;  // the record start is 16-byte aligned
        // The block's checksum (spec 3), from the sums kv_adler_records added before this
        // kernel; record_sums is null without the checksum option.
        const uint32_t checksum_flag = record_sums ? EXANS_FLAG_CHECKSUM : 0u;

        if (raw) {
            if (tid == 0) {
                rec32[EXANS_HEADER_MAGIC / 4] = EXANS_RECORD_MAGIC;
                rec32[EXANS_HEADER_VERSION / 4] = EXANS_VERSION | ((EXANS_FLAG_RAW | checksum_flag) << 16);  // version, flags
                rec32[EXANS_HEADER_LAYERS / 4] = layers | (kv_heads << 16);
                rec32[EXANS_HEADER_HEAD_DIM / 4] = head_dim | ((uint32_t)bt << 16);
                rec32[EXANS_HEADER_VALUES / 4] = (uint32_t)n;
                rec32[EXANS_HEADER_RECORD_LEN / 4] = (uint32_t)len;
                rec32[EXANS_HEADER_PRECISION / 4] = 0;  // precision, partitions, lanes, reserved: 0
                rec32[EXANS_HEADER_MODEL_OFFSET / 4] = rec32[EXANS_HEADER_DIRECTORY_OFFSET / 4] =
                    rec32[EXANS_HEADER_WORDS_OFFSET / 4] = rec32[EXANS_HEADER_SIGN_MANTISSA_OFFSET / 4] =
                        (uint32_t)EXANS_HEADER_LEN;
                rec32[EXANS_HEADER_CHECKSUM / 4] = ee_checksum(record_sums, blk, n);
            }
            // 8 words per 16-byte chunk; the last chunk's tail is the gap to the next
            // record (48 + 16 ceil(n / 8) = align16(48 + 2n)).
            const u64 chunks = (n + 7) / 8;
            for (u64 c = tid; c < chunks; c += EXANS_THREADS) {
                EeCursor cur = ee_cursor(words, thd, base, per_group, c * 8);
                uint32_t v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t a = c * 8 + 2 * j < n ? ee_next(cur, thd, per_group) : 0u;
                    const uint32_t b = c * 8 + 2 * j + 1 < n ? ee_next(cur, thd, per_group) : 0u;
                    v[j] = a | (b << 16);
                }
                *(uint4*)(rec + EXANS_HEADER_LEN + 16 * c) = make_uint4(v[0], v[1], v[2], v[3]);
            }
            __syncthreads();
            continue;
        }

        // The sparse model's entries by rank (block scan of the present flags).
        const uint32_t f = freqs_in[(u64)blk * 256 + tid];
        const uint32_t present = f != 0;
        const uint32_t ballot = __ballot_sync(0xffffffffu, present);
        if (lane == 0) s_warp[warp] = __popc(ballot);
        __syncthreads();
        uint32_t rank = __popc(ballot & ((1u << lane) - 1u));
        for (uint32_t w = 0; w < warp; ++w) rank += s_warp[w];
        if (present) s_entry[rank] = tid | (f << 8);
        if (tid == 0) {
            uint32_t k = 0;
            for (uint32_t w = 0; w < EE_WARPS; ++w) k += s_warp[w];
            s_k = k;
        }
        __syncthreads();
        const uint32_t k = s_k;
        const uint32_t* dir = dir_in + (u64)blk * EXANS_ENCODE_DIRECTORY_WORDS;
        const u64 model = EXANS_HEADER_LEN + 2ull * layers;
        const u64 model_end = model + 2 + 3ull * k;
        const u64 directory = ee_align16(model_end);
        const u64 words_off = directory + EXANS_DIRECTORY_LEN;
        u64 sgnman_off = words_off;
#pragma unroll 1
        for (int p = 0; p < EXANS_PARTITIONS; ++p) sgnman_off = ee_align16(sgnman_off + 2ull * dir[p]);

        if (tid == 0) {
            rec32[EXANS_HEADER_MAGIC / 4] = EXANS_RECORD_MAGIC;
            rec32[EXANS_HEADER_VERSION / 4] = EXANS_VERSION | (checksum_flag << 16);  // version, flags
            rec32[EXANS_HEADER_LAYERS / 4] = layers | (kv_heads << 16);
            rec32[EXANS_HEADER_HEAD_DIM / 4] = head_dim | ((uint32_t)bt << 16);
            rec32[EXANS_HEADER_VALUES / 4] = (uint32_t)n;
            rec32[EXANS_HEADER_RECORD_LEN / 4] = (uint32_t)len;
            rec32[EXANS_HEADER_PRECISION / 4] = EXANS_PRECISION | (EXANS_PARTITIONS << 8) | (EXANS_LANES << 16);
            rec32[EXANS_HEADER_MODEL_OFFSET / 4] = (uint32_t)model;
            rec32[EXANS_HEADER_DIRECTORY_OFFSET / 4] = (uint32_t)directory;
            rec32[EXANS_HEADER_WORDS_OFFSET / 4] = (uint32_t)words_off;
            rec32[EXANS_HEADER_SIGN_MANTISSA_OFFSET / 4] = (uint32_t)sgnman_off;
            rec32[EXANS_HEADER_CHECKSUM / 4] = ee_checksum(record_sums, blk, n);
        }
        // Centers.
        const uint8_t* centers = centers_in + (u64)blk * groups;
        for (uint32_t g = tid; g < groups; g += EXANS_THREADS) rec[EXANS_HEADER_LEN + g] = centers[g];
        // Model: u16 K, K x (u8 symbol, u16 freq), zero padding to the directory.
        for (uint32_t b = tid; b < (uint32_t)(directory - model); b += EXANS_THREADS) {
            uint32_t v = 0;
            if (b < 2) {
                v = (k >> (8 * b)) & 0xffu;
            } else if (b < 2 + 3 * k) {
                const uint32_t e = s_entry[(b - 2) / 3], j = (b - 2) % 3;
                v = j == 0 ? (e & 0xffu) : j == 1 ? ((e >> 8) & 0xffu) : (e >> 16);
            }
            rec[model + b] = (uint8_t)v;
        }
        // Directory: word counts, then final states.
        uint32_t* dir_dst = (uint32_t*)(rec + directory);
        for (uint32_t i = tid; i < EXANS_ENCODE_DIRECTORY_WORDS; i += EXANS_THREADS) dir_dst[i] = dir[i];
        // Word streams, 8 words per 16-byte chunk; a partial chunk's tail is the stream's
        // zero padding. Stream p sits at the end of the partition's scratch slice.
        u64 at = words_off;
#pragma unroll 1
        for (int p = 0; p < EXANS_PARTITIONS; ++p) {
            const uint32_t count = dir[p];
            const u64 pe = (u64)(p + 1) * n / EXANS_PARTITIONS;
            const uint16_t* from = scratch + scratch_base + pe - count;
            const uint32_t chunks = (count + 7) / 8;
            uint4* to = (uint4*)(rec + at);
            for (uint32_t c = tid; c < chunks; c += EXANS_THREADS) {
                uint32_t v[4];
#pragma unroll
                for (uint32_t j = 0; j < 4; ++j) {
                    const uint32_t i = c * 8 + 2 * j;
                    const uint32_t lo16 = i < count ? from[i] : 0u;
                    const uint32_t hi16 = i + 1 < count ? from[i + 1] : 0u;
                    v[j] = lo16 | (hi16 << 16);
                }
                to[c] = make_uint4(v[0], v[1], v[2], v[3]);
            }
            at = ee_align16(at + 2ull * count);
        }
        // The section: the sign+mantissa bytes of values P .. n - 1; the first P = min(n,
        // 512) are in the lanes' states (spec 6.4).
        const u64 payload = min(n, (u64)EXANS_PAYLOAD_BYTES);
        const u64 section = n - payload;
        if (vec) {
            // The plane exans_encode_blocks wrote under the same condition, from value P, 16
            // bytes per chunk (the block's plane starts at scratch_base, a multiple of 16:
            // H D is a multiple of 8 and 2L even; P is 512 or n, when the section is
            // empty). n is a multiple of 8, so only the last chunk can end past the
            // section, by 8 bytes: those are zero (the gap to the next record) and not read.
            const uint32_t chunks = ((uint32_t)section + 15) / 16;
            const uint4* const from = (const uint4*)(sgnman_in + scratch_base + payload);
            uint4* to = (uint4*)(rec + sgnman_off);
            for (uint32_t c = tid; c < chunks; c += EXANS_THREADS) {
                uint4 v;
                if (16 * c + 16 <= (uint32_t)section) {
                    v = __ldg(from + c);
                } else {
                    const uint2 h = __ldg((const uint2*)(from + c));
                    v = make_uint4(h.x, h.y, 0, 0);
                }
                to[c] = v;
            }
            __syncthreads();
            continue;
        }
        // Sign+mantissa bytes, 16 per chunk; the last chunk's tail is the gap to the next
        // record (sgnman_off is 16-aligned, so align16(sgnman_off + section) = sgnman_off +
        // 16 ceil(section / 16)).
        const u64 chunks = (section + 15) / 16;
        for (u64 c = tid; c < chunks; c += EXANS_THREADS) {
            EeCursor cur = ee_cursor(words, thd, base, per_group, payload + c * 16);
            uint32_t v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                uint32_t acc = 0;
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const u64 i = c * 16 + 4 * j + b;
                    if (i < section) acc |= kv_sign_mantissa_of(ee_next(cur, thd, per_group)) << (8 * b);
                }
                v[j] = acc;
            }
            *(uint4*)(rec + sgnman_off + 16 * c) = make_uint4(v[0], v[1], v[2], v[3]);
        }
        __syncthreads();
    }
}
