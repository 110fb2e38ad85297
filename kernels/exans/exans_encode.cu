// ExANS GPU encoder: a whole KV cache -> one container, byte-identical to the CPU
// reference exans::encode_cache (crates/exans/src/{container,record,model,rans}.rs;
// docs/formats/exans.md) for every input.
//
// Input: the cache's 2L tensors [T, H, D] concatenated in block order (layer 0 K, layer
// 0 V, ...), i.e. KvCache::concat_words. Group g of block i is the strided slice
// words[g*T*H*D + i*B*H*D ..][.. B'*H*D]; the block's symbol stream is its groups in
// order (spec 2).
//
// Four launches on one stream, no host synchronisation:
//   0. exans_encode_gain_table: gain[f] = LOG2[f+1] - LOG2[f] (spec 5.3), f = 1..4095,
//      computed with the reference's 64-bit integer squaring (bit-identical).
//   1. exans_encode_blocks, one 256-thread CTA per block:
//      a. warp w takes groups w, w+8, ...: a 256-bin exponent histogram in shared memory
//         (4 copies, lane & 3, so that lanes hitting the dominant bins conflict less),
//         its argmax (smallest exponent on a tie) is the center (spec 2); the histogram
//         is folded, shifted by the center, into the block's symbol histogram;
//      b. warp 0 quantizes the histogram to 2^12 exactly like Model::quantize (spec 5.2):
//         floor-scaled start, add best free / remove worst held slot, then exchange
//         while a free slot outranks a held one (warp argmax/argmin over 256 symbols by
//         the (count x gain, symbol) total order);
//      c. warp p encodes partition p (spec 6): lane j is rANS lane j, steps t = m-1..0;
//         the lanes that shed a word in step t push it in descending lane order, so its
//         stack index is tail + popc(ballot & lanemask_gt); the word is stored at
//         scratch[partition end - 1 - index], which leaves the reversed stream
//         contiguous at the end of the partition's scratch slice (count_p <= n_p);
//         x / freq is a multiply-high by a per-symbol magic (ee_divider), exact for
//         every u32 x;
//      d. thread 0 derives the record length (spec 4), or the raw length when the coded
//         record would not be smaller (spec 7).
//   2. exans_encode_index, one CTA: exclusive scan of align16(record_len) -> record
//      offsets (spec 8); writes the container header, the index and the zero gap.
//   3. exans_encode_records, one 256-thread CTA per record: writes the record at its
//      offset, every padding byte included, and the zero gap up to the next record.
#include "../common/bf16_field.cuh"

#define EE_THREADS 256
#define EE_WARPS 8
#define EE_PARTITIONS 8
#define EE_LANES 32
#define EE_HEADER_LEN 48ull
#define EE_DIRECTORY_WORDS 264u  // 8 word counts + 8 x 32 final states, u32 each
#define EE_DIRECTORY_LEN 1056ull
#define EE_PRECISION 12u
#define EE_SLOTS 4096u
#define EE_GAIN_LEN 4096u  // gain[f] for f in 1..=4095; gain[0] unused
#define EE_STATE_LOWER 65536u
#define EE_CENTER_SYMBOL 127u
#define EE_CONTAINER_HEADER_LEN 32ull
#define EE_RECORD_MAGIC 0x4158564bu     // "KVXA" little-endian
#define EE_CONTAINER_MAGIC 0x4358564bu  // "KVXC" little-endian
#define EE_NONE 256u                    // "no symbol" in the quantizer's reductions
#define EE_COPIES 4  // copies of each warp's exponent histogram (lane & 3): fewer atomic conflicts

typedef unsigned long long u64;

__device__ __forceinline__ u64 ee_align16(u64 x) { return (x + 15ull) & ~15ull; }

__device__ __forceinline__ uint32_t ee_lanemask_gt() {
    uint32_t m;
    asm("mov.u32 %0, %%lanemask_gt;" : "=r"(m));
    return m;
}

// exans::log2_q32, operation for operation (spec 5.3).
__device__ u64 ee_log2_q32(uint32_t x) {
    if (x == 0) return 0;
    const uint32_t ip = 31u - (uint32_t)__clz(x);
    u64 m = (u64)x << (31u - ip);
    u64 frac = 0;
    for (int i = 0; i < 32; ++i) {
        m = (m * m) >> 31;
        frac <<= 1;
        if (m >= (1ull << 32)) {
            m >>= 1;
            frac |= 1;
        }
    }
    return ((u64)ip << 32) | frac;
}

extern "C" __global__ void exans_encode_gain_table(u64* __restrict__ gain) {
    const uint32_t f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f < EE_GAIN_LEN) gain[f] = f == 0 ? 0ull : ee_log2_q32(f + 1) - ee_log2_q32(f);
}

// x / freq for every x < 2^32 by a multiply-high (libdivide's branch-free u32 scheme):
// freq = 2^k, k >= 1: magic 0, shift k - 1; otherwise k = floor(log2 freq), magic =
// 1 + 2 floor(2^(32+k) / freq) (+1 if twice the remainder >= freq), mod 2^32, shift k.
// freq = 1 is selected around it. The kernel packs shift into bits 28..31 of the entry.
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

__device__ __forceinline__ uint32_t ee_divide(uint32_t x, uint32_t freq, uint32_t magic, uint32_t shift) {
    const uint32_t t = __umulhi(magic, x);
    const uint32_t q = (t + ((x - t) >> 1)) >> shift;
    return freq == 1 ? x : q;
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

extern "C" __global__ void __launch_bounds__(EE_THREADS) exans_encode_blocks(
    const uint16_t* __restrict__ words, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
    uint32_t block_tokens, u64 tokens, uint32_t blocks, const u64* __restrict__ gain,
    uint8_t* __restrict__ centers_out, uint16_t* __restrict__ freqs_out, uint32_t* __restrict__ dir_out,
    u64* __restrict__ lens_out, uint16_t* __restrict__ scratch) {
    __shared__ uint32_t s_hist[EE_WARPS][256 * EE_COPIES];  // [bin * EE_COPIES + (lane & 3)]
    __shared__ uint32_t s_counts[256];
    __shared__ uint32_t s_enc[256];  // freq | cdf << 16 | divider shift << 28
    __shared__ uint32_t s_magic[256];
    __shared__ uint32_t s_words[EE_PARTITIONS];
    __shared__ uint32_t s_k;

    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const u64 hd = (u64)kv_heads * head_dim;
    const u64 thd = tokens * hd;
    const uint32_t groups = 2u * layers;

    for (uint32_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
        const u64 t0 = (u64)blk * block_tokens;
        const u64 bt = min((u64)block_tokens, tokens - t0);
        const u64 per_group = bt * hd;
        const u64 n = per_group * groups;  // < 2^31 (checked on the host)
        const u64 base = t0 * hd;          // the block's offset inside each tensor
        const u64 scratch_base = base * groups;
        uint8_t* centers = centers_out + (u64)blk * groups;

        // (a) centers and the symbol histogram.
        for (uint32_t i = tid; i < EE_WARPS * 256 * EE_COPIES; i += EE_THREADS) (&s_hist[0][0])[i] = 0;
        s_counts[tid] = 0;
        __syncthreads();
        for (uint32_t g = warp; g < groups; g += EE_WARPS) {
            const uint16_t* src = words + g * thd + base;
            const uint32_t copy = lane & (EE_COPIES - 1);
            for (u64 r = lane; r < per_group; r += EE_LANES)
                atomicAdd(&s_hist[warp][kv_exponent_of(src[r]) * EE_COPIES + copy], 1u);
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
                    h[q] += s_hist[warp][e * EE_COPIES + j];
                    s_hist[warp][e * EE_COPIES + j] = 0;
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
            if (lane == 0) centers[g] = (uint8_t)center;
#pragma unroll
            for (uint32_t q = 0; q < 8; ++q) {
                const uint32_t e = lane + 32 * q;
                if (h[q]) atomicAdd(&s_counts[(e + EE_CENTER_SYMBOL - center) & 255u], h[q]);
            }
            __syncwarp();
        }
        __syncthreads();

        // (b) the model (warp 0).
        if (warp == 0) {
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
                    f[q] = c[q] ? max(1u, (uint32_t)(((u64)c[q] << EE_PRECISION) / n)) : 0;
                    local += f[q];
                }
                uint32_t sum = ee_warp_sum(local);
                u64 w, hw;
                uint32_t s, hs;
                while (sum < EE_SLOTS) {
                    ee_best_free(c, f, gain, lane, w, s);
                    ee_bump(f, lane, s, 1);
                    ++sum;
                }
                while (sum > EE_SLOTS) {
                    ee_worst_held(c, f, gain, lane, w, s);
                    if (s == EE_NONE) break;
                    ee_bump(f, lane, s, -1);
                    --sum;
                }
                for (;;) {
                    ee_worst_held(c, f, gain, lane, hw, hs);
                    if (hs == EE_NONE) break;
                    ee_best_free(c, f, gain, lane, w, s);
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
            uint32_t magic, shift;
            ee_divider(s_enc[tid] & 0xffffu, magic, shift);
            s_magic[tid] = magic;
            s_enc[tid] |= shift << 28;
        }
        __syncthreads();

        // (c) warp p encodes partition p.
        {
            const u64 ps = (u64)warp * n / EE_PARTITIONS, pe = (u64)(warp + 1) * n / EE_PARTITIONS;
            const uint32_t np = (uint32_t)(pe - ps);
            const uint32_t m = (np + EE_LANES - 1) / EE_LANES;
            const uint32_t lo = lane * m;
            const uint32_t len = lo < np ? min(m, np - lo) : 0;
            uint32_t x = EE_STATE_LOWER, tail = 0;
            u64 g = 0, r = 0;
            const uint16_t* src = words;
            uint32_t center = 0;
            if (len) {
                const u64 kk = ps + lo + len - 1;  // the lane's last symbol
                g = (uint32_t)kk / (uint32_t)per_group;  // both < 2^31
                r = kk - g * per_group;
                src = words + g * thd + base;
                center = centers[g];
            }
            uint16_t* region_end = scratch + scratch_base + pe;
            const uint32_t gt = ee_lanemask_gt();
            for (int t = (int)m - 1; t >= 0; --t) {
                const bool active = (uint32_t)t < len;
                uint32_t freq = 1, cdf = 0, magic = 0, shift = 0;
                bool emit = false;
                if (active) {
                    const uint32_t sym = (kv_exponent_of(src[r]) + EE_CENTER_SYMBOL - center) & 255u;
                    const uint32_t ent = s_enc[sym];
                    freq = ent & 0xffffu;
                    cdf = (ent >> 16) & 0xfffu;
                    shift = ent >> 28;
                    magic = s_magic[sym];
                    emit = (u64)x >= ((u64)freq << (32 - EE_PRECISION));
                    if (r == 0 && t > 0) {
                        --g;
                        r = per_group - 1;
                        src = words + g * thd + base;
                        center = centers[g];
                    } else {
                        --r;
                    }
                }
                const uint32_t b = __ballot_sync(0xffffffffu, emit);
                if (emit) {
                    region_end[-1 - (long long)(tail + __popc(b & gt))] = (uint16_t)x;
                    x >>= 16;
                }
                tail += __popc(b);
                if (active) {
                    const uint32_t q = ee_divide(x, freq, magic, shift);
                    x = (q << EE_PRECISION) + (x - q * freq) + cdf;
                }
            }
            dir_out[(u64)blk * EE_DIRECTORY_WORDS + EE_PARTITIONS + warp * EE_LANES + lane] = x;
            if (lane == 0) {
                dir_out[(u64)blk * EE_DIRECTORY_WORDS + warp] = tail;
                s_words[warp] = tail;
            }
        }
        __syncthreads();

        // (d) the record length.
        if (tid == 0) {
            const u64 model = EE_HEADER_LEN + 2ull * layers;
            u64 at = ee_align16(model + 2 + 3ull * s_k) + EE_DIRECTORY_LEN;
            for (int p = 0; p < EE_PARTITIONS; ++p) at = ee_align16(at + 2ull * s_words[p]);
            const u64 coded = at + n, raw = EE_HEADER_LEN + 2 * n;
            lens_out[blk] = coded >= raw ? raw : coded;
        }
        __syncthreads();
    }
}

// One CTA: record offsets, the container header, the index and the gap after it.
extern "C" __global__ void __launch_bounds__(EE_THREADS) exans_encode_index(
    uint32_t layers, uint32_t kv_heads, uint32_t head_dim, uint32_t block_tokens, u64 tokens, uint32_t blocks,
    const u64* __restrict__ lens, u64* __restrict__ offsets, uint8_t* __restrict__ out) {
    __shared__ u64 s_warp[EE_WARPS];
    __shared__ u64 s_carry;
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const u64 index_end = EE_CONTAINER_HEADER_LEN + 8ull * ((u64)blocks + 1);
    const u64 first = ee_align16(index_end);
    if (tid == 0) {
        uint32_t* h = (uint32_t*)out;
        h[0] = EE_CONTAINER_MAGIC;
        h[1] = 1u;  // version 1, flags 0
        h[2] = layers | (kv_heads << 16);
        h[3] = head_dim | (block_tokens << 16);
        h[4] = (uint32_t)tokens;
        h[5] = (uint32_t)(tokens >> 32);
        h[6] = blocks;
        h[7] = 0;
        for (u64 b = index_end; b < first; ++b) out[b] = 0;
        s_carry = first;
    }
    __syncthreads();
    u64* index = (u64*)(out + EE_CONTAINER_HEADER_LEN);
    for (u64 chunk = 0; chunk < blocks; chunk += EE_THREADS) {
        const u64 i = chunk + tid;
        const u64 v = i < blocks ? ee_align16(lens[i]) : 0;
        u64 incl = v;
        for (int off = 1; off < 32; off <<= 1) {
            const u64 o = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= (uint32_t)off) incl += o;
        }
        if (lane == 31) s_warp[warp] = incl;
        __syncthreads();
        u64 before = s_carry;
        for (uint32_t w = 0; w < warp; ++w) before += s_warp[w];
        if (i < blocks) {
            const u64 off = before + incl - v;
            offsets[i] = off;
            index[i] = off;
        }
        __syncthreads();
        if (tid == EE_THREADS - 1) s_carry = before + incl;
        __syncthreads();
    }
    if (tid == 0) {
        offsets[blocks] = s_carry;
        index[blocks] = s_carry;
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

extern "C" __global__ void __launch_bounds__(EE_THREADS) exans_encode_records(
    const uint16_t* __restrict__ words, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
    uint32_t block_tokens, u64 tokens, uint32_t blocks, const uint8_t* __restrict__ centers_in,
    const uint16_t* __restrict__ freqs_in, const uint32_t* __restrict__ dir_in, const u64* __restrict__ lens,
    const u64* __restrict__ offsets, const uint16_t* __restrict__ scratch, uint8_t* __restrict__ out) {
    __shared__ uint32_t s_entry[256];  // symbol | freq << 8, by rank
    __shared__ uint32_t s_warp[EE_WARPS];
    __shared__ uint32_t s_k;
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const u64 hd = (u64)kv_heads * head_dim;
    const u64 thd = tokens * hd;
    const uint32_t groups = 2u * layers;

    for (uint32_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
        const u64 t0 = (u64)blk * block_tokens;
        const u64 bt = min((u64)block_tokens, tokens - t0);
        const u64 per_group = bt * hd;
        const u64 n = per_group * groups;
        const u64 base = t0 * hd;
        const u64 scratch_base = base * groups;
        const u64 len = lens[blk];
        const u64 raw_len = EE_HEADER_LEN + 2 * n;
        const bool raw = len == raw_len;
        uint8_t* rec = out + offsets[blk];
        uint32_t* rec32 = (uint32_t*)rec;  // the record start is 16-byte aligned

        if (raw) {
            if (tid == 0) {
                rec32[0] = EE_RECORD_MAGIC;
                rec32[1] = 1u | (1u << 16);  // version 1, flags RAW
                rec32[2] = layers | (kv_heads << 16);
                rec32[3] = head_dim | ((uint32_t)bt << 16);
                rec32[4] = (uint32_t)n;
                rec32[5] = (uint32_t)len;
                rec32[6] = 0;
                rec32[7] = rec32[8] = rec32[9] = rec32[10] = (uint32_t)EE_HEADER_LEN;
                rec32[11] = 0;
            }
            // 8 words per 16-byte chunk; the last chunk's tail is the gap to the next
            // record (48 + 16 ceil(n / 8) = align16(48 + 2n)).
            const u64 chunks = (n + 7) / 8;
            for (u64 c = tid; c < chunks; c += EE_THREADS) {
                EeCursor cur = ee_cursor(words, thd, base, per_group, c * 8);
                uint32_t v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t a = c * 8 + 2 * j < n ? ee_next(cur, thd, per_group) : 0u;
                    const uint32_t b = c * 8 + 2 * j + 1 < n ? ee_next(cur, thd, per_group) : 0u;
                    v[j] = a | (b << 16);
                }
                *(uint4*)(rec + EE_HEADER_LEN + 16 * c) = make_uint4(v[0], v[1], v[2], v[3]);
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
        const uint32_t* dir = dir_in + (u64)blk * EE_DIRECTORY_WORDS;
        const u64 model = EE_HEADER_LEN + 2ull * layers;
        const u64 model_end = model + 2 + 3ull * k;
        const u64 directory = ee_align16(model_end);
        const u64 words_off = directory + EE_DIRECTORY_LEN;
        u64 stream[EE_PARTITIONS];
        u64 at = words_off;
#pragma unroll
        for (int p = 0; p < EE_PARTITIONS; ++p) {
            stream[p] = at;
            at = ee_align16(at + 2ull * dir[p]);
        }
        const u64 sm = at;

        if (tid == 0) {
            rec32[0] = EE_RECORD_MAGIC;
            rec32[1] = 1u;  // version 1, flags 0
            rec32[2] = layers | (kv_heads << 16);
            rec32[3] = head_dim | ((uint32_t)bt << 16);
            rec32[4] = (uint32_t)n;
            rec32[5] = (uint32_t)len;
            rec32[6] = EE_PRECISION | (EE_PARTITIONS << 8) | (EE_LANES << 16);
            rec32[7] = (uint32_t)model;
            rec32[8] = (uint32_t)directory;
            rec32[9] = (uint32_t)words_off;
            rec32[10] = (uint32_t)sm;
            rec32[11] = 0;
        }
        // Centers.
        const uint8_t* centers = centers_in + (u64)blk * groups;
        for (uint32_t g = tid; g < groups; g += EE_THREADS) rec[EE_HEADER_LEN + g] = centers[g];
        // Model: u16 K, K x (u8 symbol, u16 freq), zero padding to the directory.
        for (u64 b = tid; b < directory - model; b += EE_THREADS) {
            uint32_t v = 0;
            if (b < 2) {
                v = (k >> (8 * b)) & 0xffu;
            } else if (b < 2 + 3ull * k) {
                const uint32_t e = s_entry[(b - 2) / 3], j = (b - 2) % 3;
                v = j == 0 ? (e & 0xffu) : j == 1 ? ((e >> 8) & 0xffu) : (e >> 16);
            }
            rec[model + b] = (uint8_t)v;
        }
        // Directory: word counts, then final states.
        uint32_t* dir_dst = (uint32_t*)(rec + directory);
        for (uint32_t i = tid; i < EE_DIRECTORY_WORDS; i += EE_THREADS) dir_dst[i] = dir[i];
        // Word streams, 8 words per 16-byte chunk; a partial chunk's tail is the stream's
        // zero padding. Stream p sits at the end of the partition's scratch slice.
        for (int p = 0; p < EE_PARTITIONS; ++p) {
            const u64 count = dir[p];
            const u64 pe = (u64)(p + 1) * n / EE_PARTITIONS;
            const uint16_t* from = scratch + scratch_base + pe - count;
            const u64 chunks = (count + 7) / 8;
            for (u64 c = tid; c < chunks; c += EE_THREADS) {
                uint32_t v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u64 i = c * 8 + 2 * j;
                    const uint32_t a = i < count ? from[i] : 0u;
                    const uint32_t b = i + 1 < count ? from[i + 1] : 0u;
                    v[j] = a | (b << 16);
                }
                *(uint4*)(rec + stream[p] + 16 * c) = make_uint4(v[0], v[1], v[2], v[3]);
            }
        }
        // Sign+mantissa bytes, 16 per chunk; the last chunk's tail is the gap to the next
        // record (sm is 16-aligned, so align16(sm + n) = sm + 16 ceil(n / 16)).
        const u64 chunks = (n + 15) / 16;
        for (u64 c = tid; c < chunks; c += EE_THREADS) {
            EeCursor cur = ee_cursor(words, thd, base, per_group, c * 16);
            uint32_t v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                uint32_t acc = 0;
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const u64 i = c * 16 + 4 * j + b;
                    if (i < n) acc |= kv_sign_mantissa_of(ee_next(cur, thd, per_group)) << (8 * b);
                }
                v[j] = acc;
            }
            *(uint4*)(rec + sm + 16 * c) = make_uint4(v[0], v[1], v[2], v[3]);
        }
        __syncthreads();
    }
}
