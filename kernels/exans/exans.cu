// ExANS GPU decoder: every record of a container in one launch, byte-identical to the
// CPU reference (crates/exans/src/record.rs, rans.rs; docs/formats/exans.md).
//
// One CTA of 256 threads per record (grid-stride over records):
//   1. thread 0 parses and bounds-checks the 48-byte header and derives every section
//      offset (spec 3, 4) into shared memory;
//   2. raw records (spec 7) are copied word by word into their groups;
//   3. coded records: the sparse model (spec 5.1) is loaded one entry per thread, its
//      cdf taken with a block scan and checked, then the 2^n-entry packed decode table
//      (spec 5.4) is built in shared memory (16 consecutive slots per thread at n = 12:
//      a binary search over the cdf for the first, then a walk);
//   4. warp w decodes partition w (spec 6): lane j is rANS lane j; step-major, in step t
//      every lane whose run is longer than t decodes symbol j*m + t, then the lanes whose
//      state fell below 2^16 take the next words of the partition's stream in ascending
//      lane order (ballot + popc(ballot & lanemask_lt)). Each decoded symbol C is turned
//      back into its exponent E = (C + c_g - 127) mod 256 and joined with its raw
//      sign+mantissa byte into the BF16 word. Steps run in rounds of EX_ROUND: a lane
//      keeps the round's symbols in registers and then writes its EX_ROUND consecutive
//      words with 16-byte stores (sign+mantissa bytes by a 16-byte load issued before the
//      round's steps) when the round is full, inside one group and aligned, else word by
//      word. The partition's word stream is staged through a per-warp shared-memory ring
//      by cp.async, one round ahead; a lane that renormalises reads its word straight from
//      the ring at pos + popc(ballot & lanemask_lt). The steps are branch-free; a round in
//      which every lane is active and no read can reach the stream's end runs without the
//      activity and bounds checks.
//
// Output layout: the cache's 2L tensors [T, H, D] concatenated in block order (layer 0
// K, layer 0 V, ...), i.e. KvCache::concat_words. Value r of group g of record i goes to
// out[g * T*H*D + i * B*H*D + r].
//
// Robustness: the host validates the container and every record with the CPU parser
// first, but the kernel trusts nothing it reads: every header field and section offset
// is re-checked against the record's slot in the container before it is used, word
// reads past a partition's stream return 0 (like the CPU's sentinel), and every loop is
// bounded by symbol counts or 2^n. Any problem sets a bit of *status (0 = valid); the
// host then runs the CPU decoder for the exact typed error.
#include "../common/bf16_field.cuh"

#define EX_THREADS 256
#define EX_PARTITIONS 8
#define EX_LANES 32
#define EX_HEADER_LEN 48ull
#define EX_DIRECTORY_LEN 1056ull
#define EX_MAX_SYMBOLS 256
#define EX_MAX_PRECISION 12
#define EX_TABLE_SLOTS (1 << EX_MAX_PRECISION)
#define EX_STATE_LOWER 65536u
#define EX_CENTER_SYMBOL 127u
#define EX_ROUND 16  // decode steps per output round (a multiple of 16)
#define EX_RING 1024  // words of a warp's stream ring in shared memory (a power of two)
// Words a round can read: pos .. pos + EX_ROUND * 32 - 1 (step i reads below pos + 32 (i + 1)).
#define EX_ROUND_WORDS (EX_ROUND * EX_LANES)

// *status bits.
#define EX_STATUS_LAYOUT 1u        // header / section offsets / shape do not check out
#define EX_STATUS_MODEL 2u         // sparse model invalid
#define EX_STATUS_STATE_RANGE 4u   // an initial state below 2^16
#define EX_STATUS_EXHAUSTED 8u     // a lane read past its partition's words
#define EX_STATUS_FINAL_STATE 16u  // a lane did not end at 2^16
#define EX_STATUS_UNCONSUMED 32u   // words left over

__device__ __forceinline__ uint32_t ex_u16(const uint8_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

__device__ __forceinline__ uint32_t ex_u32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// 16-byte global -> shared copy that completes asynchronously (sm_80+).
__device__ __forceinline__ void ex_cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void ex_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void ex_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ unsigned long long ex_align16(unsigned long long x) { return (x + 15ull) & ~15ull; }

// A record's parsed header and derived layout (offsets relative to the record start).
struct ExRecord {
    unsigned long long start;          // byte offset of the record in the container
    unsigned long long values;         // N
    unsigned long long per_group;      // B' H D
    unsigned long long directory;
    unsigned long long sign_mantissa;
    unsigned long long streams[EX_PARTITIONS];
    unsigned counts[EX_PARTITIONS];
    unsigned precision;
    unsigned symbols;       // K
    unsigned model_offset;
    unsigned groups;        // 2L
    unsigned raw;
    unsigned ok;
};

// Parses record `rec` (thread 0 only). Every byte read is inside [start, start+record_len),
// and record_len is inside the record's slot of the container.
__device__ bool ex_parse(const uint8_t* __restrict__ container, unsigned long long container_len,
                         const unsigned long long* __restrict__ offsets, unsigned long long rec,
                         unsigned layers, unsigned kv_heads, unsigned head_dim, unsigned block_tokens,
                         unsigned long long tokens, ExRecord& r) {
    const unsigned long long slot_start = offsets[rec], slot_end = offsets[rec + 1];
    if (slot_start > slot_end || slot_end > container_len || slot_start % 16 != 0) return false;
    if (slot_end - slot_start < EX_HEADER_LEN) return false;
    const uint8_t* p = container + slot_start;
    const unsigned long long record_len = ex_u32(p + 20);
    if (record_len < EX_HEADER_LEN || record_len > slot_end - slot_start) return false;
    if (p[0] != 'K' || p[1] != 'V' || p[2] != 'X' || p[3] != 'A' || ex_u16(p + 4) != 1) return false;
    const uint32_t flags = ex_u16(p + 6);
    if ((flags & ~1u) != 0) return false;
    // The shape must be the one the container implies (it fixes where the output goes).
    const unsigned long long first_token = rec * (unsigned long long)block_tokens;
    if (first_token >= tokens) return false;
    const unsigned long long left = tokens - first_token;
    const unsigned long long bt = left < block_tokens ? left : block_tokens;
    if (ex_u16(p + 8) != layers || ex_u16(p + 10) != kv_heads || ex_u16(p + 12) != head_dim || ex_u16(p + 14) != bt)
        return false;
    const unsigned long long per_group = bt * kv_heads * head_dim;
    const unsigned long long n = 2ull * layers * per_group;
    if (ex_u32(p + 16) != n) return false;
    r.start = slot_start;
    r.values = n;
    r.per_group = per_group;
    r.groups = 2u * layers;
    r.raw = flags & 1u;
    if (r.raw) return record_len == EX_HEADER_LEN + 2ull * n;

    const unsigned precision = p[24];
    if (precision < 1 || precision > EX_MAX_PRECISION || p[25] != EX_PARTITIONS || p[26] != EX_LANES) return false;
    const unsigned long long model = EX_HEADER_LEN + 2ull * layers;
    if (ex_u32(p + 28) != model || model + 2 > record_len) return false;
    const unsigned k = ex_u16(p + model);
    if (k < 1 || k > EX_MAX_SYMBOLS) return false;
    const unsigned long long directory = ex_align16(model + 2 + 3ull * k);
    const unsigned long long words = directory + EX_DIRECTORY_LEN;
    if (ex_u32(p + 32) != directory || ex_u32(p + 36) != words || words > record_len) return false;
    unsigned long long at = words;
    for (int q = 0; q < EX_PARTITIONS; ++q) {
        r.counts[q] = ex_u32(p + directory + 4 * q);
        r.streams[q] = at;
        at = ex_align16(at + 2ull * r.counts[q]);  // counts < 2^32: no overflow in 64 bits
    }
    if (ex_u32(p + 40) != at || at + n != record_len) return false;
    r.precision = precision;
    r.symbols = k;
    r.model_offset = (unsigned)model;
    r.directory = directory;
    r.sign_mantissa = at;
    return true;
}

// prmt.b32 in its default mode, where bit 3 of a selector nibble replicates the sign
// (bit 7) of the selected byte.
__device__ __forceinline__ uint32_t ex_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Two BF16 words (the first in the low half) from two symbols and their sign+mantissa
// bytes: bytes 0/1 (pick 0x4140, spread 0x9180) or 2/3 (0x4342, 0xb3a2) of syms4 and
// sf4. c128 = ((c_g - 127) mod 256) * 0x00800080. In each 16-bit lane, (C + c_g - 127)
// << 7 puts the exponent in bits 14..7 (bit 15, a carry, is masked off); the spread byte
// holds the sign in bit 15 (replicated over bits 15..8) and the mantissa in bits 6..0.
__device__ __forceinline__ uint32_t ex_join_pair(uint32_t syms4, uint32_t sf4, uint32_t c128, uint32_t pick,
                                                 uint32_t spread) {
    const uint32_t e = ex_prmt(syms4, 0u, pick) * 128u + c128;  // each lane <= 510 * 128: no carry out
    const uint32_t f = ex_prmt(sf4, 0u, spread);
    uint32_t d;  // (e & 0x7f807f80) | (f & 0x807f807f): one bit select
    asm("lop3.b32 %0, %1, 0x7f807f80, %2, 0xe2;" : "=r"(d) : "r"(e), "r"(f));
    return d;
}

// One round of EX_ROUND decode steps of one lane (spec 6.2, 6.3), branch-free. In step i
// the lane decodes (when active: i < left) and takes a word when its state fell below
// 2^16; the words go to the needing lanes in ascending lane order (ballot + popc), each
// lane reading its own from the ring. An inactive lane keeps its state, which is always
// >= 2^16 (checked at the start, and restored by every renormalisation), so it never
// needs a word. CHECK = false: every lane is active in every step and no read can pass
// `count`. Symbol i goes to byte i % 4 of syms[i / 4] (garbage for inactive steps).
template <bool CHECK>
__device__ __forceinline__ void ex_round(uint32_t& x, unsigned& pos2, uint32_t (&syms)[EX_ROUND / 4],
                                         const uint32_t* __restrict__ table, unsigned ring_base,
                                         uint32_t mask, unsigned shift, uint32_t lanes_below, unsigned count2,
                                         int left) {
#pragma unroll
    for (int i = 0; i < EX_ROUND; ++i) {
        const uint32_t e = table[x & mask];
        uint32_t xn = ((e >> 12) & 0xfffu) * (x >> shift) + (e & 0xfffu);
        if (CHECK) xn = i < left ? xn : x;
        x = xn;
        if (i % 4 == 0) syms[i / 4] = e >> 24;
        else syms[i / 4] = __byte_perm(syms[i / 4], e, i % 4 == 1 ? 0x3270 : i % 4 == 2 ? 0x3710 : 0x7210);
        const bool need = x < EX_STATE_LOWER;
        const uint32_t ballot = __ballot_sync(0xffffffffu, need);
        // Byte offset of word pos2 / 2 + (needing lanes below this one) in the ring; the
        // ring is 2 * EX_RING-byte aligned, so OR places it.
        const unsigned idx2 = pos2 + 2u * __popc(ballot & lanes_below);
        const unsigned at = ring_base | (idx2 & (2u * EX_RING - 2u));
        // need: x = (x << 16) | word idx2 / 2, the word being 0 at or past `count` (the
        // CPU's sentinel). Volatile: the reads stay after the round's cp.async wait.
        if (CHECK) {
            asm volatile(
                "{\n\t.reg .pred p, q;\n\t.reg .b32 w;\n\t"
                "setp.lt.u32 p, %0, 65536;\n\tsetp.lt.u32 q, %2, %3;\n\tand.pred q, q, p;\n\t"
                "mov.b32 w, 0;\n\t@q ld.shared.u16 w, [%1];\n\t@p prmt.b32 %0, w, %0, 0x5410;\n\t}"
                : "+r"(x) : "r"(at), "r"(idx2), "r"(count2));
        } else {
            asm volatile(
                "{\n\t.reg .pred p;\n\t.reg .b32 w;\n\t"
                "setp.lt.u32 p, %0, 65536;\n\tld.shared.u16 w, [%1];\n\t@p prmt.b32 %0, w, %0, 0x5410;\n\t}"
                : "+r"(x) : "r"(at));
        }
        pos2 += 2u * __popc(ballot);
    }
}

extern "C" __global__ void __launch_bounds__(EX_THREADS, 5)
exans_decode_records(const uint8_t* __restrict__ container, unsigned long long container_len,
                     const unsigned long long* __restrict__ offsets, unsigned blocks, unsigned layers,
                     unsigned kv_heads, unsigned head_dim, unsigned block_tokens, unsigned long long tokens,
                     uint16_t* __restrict__ out, unsigned* __restrict__ status) {
    __shared__ uint32_t table[EX_TABLE_SLOTS];
    __shared__ uint32_t entry_cdf[EX_MAX_SYMBOLS];
    __shared__ uint32_t entry_base[EX_MAX_SYMBOLS];  // symbol << 24 | (freq - 1) << 12
    __shared__ uint32_t entry_symbol[EX_MAX_SYMBOLS];
    __shared__ uint32_t warp_sums[EX_THREADS / 32];
    __shared__ ExRecord rs;
    __shared__ __align__(2 * EX_RING) uint16_t rings[EX_PARTITIONS][EX_RING];

    const unsigned tid = threadIdx.x;
    const unsigned lane = tid % 32;
    const unsigned warp = tid / 32;
    const unsigned long long hd = (unsigned long long)kv_heads * head_dim;
    const unsigned long long tensor_values = tokens * hd;  // T H D: one group's stride in `out`

    for (unsigned long long rec = blockIdx.x; rec < blocks; rec += gridDim.x) {
        __syncthreads();  // the previous record is done with the shared memory
        if (tid == 0) {
            rs.ok = ex_parse(container, container_len, offsets, rec, layers, kv_heads, head_dim, block_tokens,
                             tokens, rs) ? 1u : 0u;
            if (!rs.ok) atomicOr(status, EX_STATUS_LAYOUT);
        }
        __syncthreads();
        if (!rs.ok) continue;  // uniform: every thread reads the same shared flag
        const uint8_t* rp = container + rs.start;
        const unsigned long long n = rs.values;
        const unsigned long long per_group = rs.per_group;
        const unsigned long long out_block = rec * block_tokens * hd;

        if (rs.raw) {
            // Raw: the N words LE in block order at offset 48 (2-byte aligned: records
            // and the container are 16-byte aligned).
            const uint16_t* src = reinterpret_cast<const uint16_t*>(rp + EX_HEADER_LEN);
            for (unsigned g = 0; g < rs.groups; ++g) {
                for (unsigned long long i = tid; i < per_group; i += EX_THREADS)
                    out[g * tensor_values + out_block + i] = src[g * per_group + i];
            }
            continue;
        }

        // ---- Model: one entry per thread, cdf by a block-wide exclusive scan. ----
        const unsigned k = rs.symbols;
        const unsigned precision = rs.precision;
        uint32_t freq = 0, symbol = 0;
        if (tid < k) {
            const uint8_t* e = rp + rs.model_offset + 2 + 3 * tid;
            symbol = e[0];
            freq = ex_u16(e + 1);
            entry_symbol[tid] = symbol;
        }
        uint32_t incl = freq;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= (unsigned)d) incl += v;
        }
        if (lane == 31) warp_sums[warp] = incl;
        __syncthreads();
        uint32_t before = 0, total = 0;
        for (unsigned w = 0; w < EX_THREADS / 32; ++w) {
            if (w < warp) before += warp_sums[w];
            total += warp_sums[w];
        }
        const uint32_t cdf = before + incl - freq;
        bool bad = false;
        if (tid < k) {
            entry_cdf[tid] = cdf;
            // The table holds freq itself (not freq - 1 as spec 5.4): with K >= 2 every freq
            // is below 2^12. A single-symbol model (freq = 2^n, 4096 at n = 12) leaves the
            // state unchanged, x = 2^n (x >> n) + (x mod 2^n); it is decoded as freq 1 and
            // bias 0 at shift 0 from slot 0 (mask 0), which gives the same x.
            entry_base[tid] = (symbol << 24) | ((k == 1 ? 1u : freq & 0xfffu) << 12);
            bad = freq == 0 || (tid > 0 && entry_symbol[tid - 1] >= symbol);
        }
        // freq < 2^16 and k <= 256: the sum fits u32.
        bad = bad || total != (1u << precision);
        if (__syncthreads_or(bad)) {
            if (tid == 0) atomicOr(status, EX_STATUS_MODEL);
            continue;
        }
        // ---- Decode table: slot x -> the entry with cdf <= x < cdf + freq. ----
        // A valid model has cdf[0] = 0 and strictly increasing cdfs.
        // Thread tid fills the slots [tid * per, (tid + 1) * per): a binary search for the
        // first, then a walk forward over the entries.
        const unsigned slots = 1u << precision;
        const unsigned per = slots > EX_THREADS ? slots / EX_THREADS : 1u;
        if (tid * per < slots) {
            const unsigned x0 = tid * per;
            unsigned lo = 0, hi = k - 1;
            while (lo < hi) {
                const unsigned mid = (lo + hi + 1) / 2;
                if (entry_cdf[mid] <= x0) lo = mid; else hi = mid - 1;
            }
            for (unsigned x = x0; x < x0 + per; ++x) {
                while (lo + 1 < k && entry_cdf[lo + 1] <= x) ++lo;
                table[x] = entry_base[lo] | (x - entry_cdf[lo]);
            }
        }
        __syncthreads();

        // ---- Partition `warp`: 32 lanes, step-major. ----
        // N < 2^32 (a u32 header field), so every count below fits 32 bits; only output
        // addresses need 64.
        const unsigned p = warp;
        const unsigned p_start = (unsigned)(p * n / EX_PARTITIONS);
        const unsigned p_end = (unsigned)((p + 1) * n / EX_PARTITIONS);
        const unsigned p_len = p_end - p_start;
        const unsigned m = (p_len + EX_LANES - 1) / EX_LANES;
        // Lanes 0..full own m symbols; lane `full` owns rem when rem > 0; the rest none.
        const unsigned full = m ? p_len / m : 0;
        const unsigned rem = m ? p_len % m : 0;
        const unsigned run = lane < full ? m : (lane == full ? rem : 0);
        uint32_t x = *reinterpret_cast<const uint32_t*>(rp + rs.directory + 32 + 4 * (EX_LANES * p + lane));
        if (__any_sync(0xffffffffu, x < EX_STATE_LOWER)) {
            if (lane == 0) atomicOr(status, EX_STATUS_STATE_RANGE);
            continue;  // warp-uniform; no block barrier until the next record
        }
        const uint16_t* words = reinterpret_cast<const uint16_t*>(rp + rs.streams[p]);
        const unsigned count = rs.counts[p];
        const uint32_t mask = k == 1 ? 0u : slots - 1;
        const unsigned shift = k == 1 ? 0u : precision;
        const uint32_t lanes_below = (1u << lane) - 1u;
        const unsigned group_len = (unsigned)per_group;

        // This lane's first value v0, its group g, offset r in the group, output address
        // and sign+mantissa bytes.
        const unsigned v0 = p_start + lane * m;
        unsigned g = 0, r = 0;
        uint32_t center = 0;
        uint16_t* dst = out;
        if (run > 0) {
            g = v0 / group_len;
            r = v0 % group_len;
            dst = out + (g * tensor_values + out_block + r);
            center = rp[EX_HEADER_LEN + g];
        }
        const uint8_t* src = rp + rs.sign_mantissa + v0;
        const unsigned long long group_jump = tensor_values - per_group;  // dst step at a group end
        unsigned pos = 0;  // words consumed by the partition (warp-uniform; <= p_len)
        // The stream is staged through this warp's ring in 16-byte chunks (the stream is
        // 16-byte aligned and padded to 16 inside the record, so chunk c < ceil(count/8)
        // is inside the record): word i sits at ring[i % EX_RING]. Before a round every
        // word it can read is in the ring (loaded synchronously if the lookahead fell
        // short); then the chunks up to pos + EX_RING, whose slots hold only words below
        // pos, are requested asynchronously for the next rounds.
        uint16_t* const ring = rings[p];
        const unsigned ring_base = (unsigned)__cvta_generic_to_shared(ring);
        const uint4* const chunks = reinterpret_cast<const uint4*>(words);
        const unsigned total_chunks = (count + 7u) / 8u;
        unsigned done = 0;  // chunks requested (warp-uniform)
        // Rounds of EX_ROUND steps: the round's symbols are kept in registers (4 per u32,
        // compile-time indexed), then joined with their sign+mantissa bytes and written as
        // whole 16-byte chunks when the round is full, inside one group and aligned;
        // otherwise value by value exactly as before.
        for (unsigned t0 = 0; t0 < m; t0 += EX_ROUND) {
            __syncwarp();  // every lane's reads of the previous round are done with the ring
            const unsigned target = min((pos + EX_ROUND_WORDS + 7u) / 8u, total_chunks);
#pragma unroll 1
            for (unsigned c = done + lane; c < target; c += EX_LANES)
                ex_cp_async16(ring + ((8u * c) & (EX_RING - 1)), chunks + c);
            if (done < target) done = target;
            ex_cp_async_commit();
            ex_cp_async_wait_all();
            __syncwarp();
            // Top the ring up once a whole warp's worth of chunks (or the stream's end) is
            // free, so that most rounds skip the loop.
            const unsigned ahead = min((pos + EX_RING) / 8u, total_chunks);
            if (ahead >= done + EX_LANES || ahead == total_chunks) {
#pragma unroll 1
                for (unsigned c = done + lane; c < ahead; c += EX_LANES)
                    ex_cp_async16(ring + ((8u * c) & (EX_RING - 1)), chunks + c);
                if (done < ahead) done = ahead;
                ex_cp_async_commit();
            }
            uint32_t syms[EX_ROUND / 4];
            // Vector join (t0 < run implied): the round is full, inside one group and both
            // ends are 16-byte aligned. Its sign+mantissa bytes are loaded before the steps
            // so that the load's latency hides behind them.
            const bool vector = t0 + EX_ROUND <= run && r + EX_ROUND <= group_len &&
                ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src + t0)) & 15u) == 0;
            uint4 sm[EX_ROUND / 16];
            if (vector) {
#pragma unroll
                for (int c = 0; c < EX_ROUND / 16; ++c) sm[c] = __ldg(reinterpret_cast<const uint4*>(src + t0) + c);
            }
            // Fast round (warp-uniform): every lane decodes all EX_ROUND steps and no read
            // can pass the stream's end (a step reads at most 32 words), so the steps need
            // neither the activity nor the bounds check.
            const bool fast = __all_sync(0xffffffffu, t0 + EX_ROUND <= run) && pos + EX_ROUND * EX_LANES <= count;
            unsigned pos2 = 2u * pos;  // in bytes: pos <= p_len < 2^29
            if (fast) {
                ex_round<false>(x, pos2, syms, table, ring_base, mask, shift, lanes_below, 0, 0);
            } else {
                ex_round<true>(x, pos2, syms, table, ring_base, mask, shift, lanes_below, 2u * count,
                               (int)(run - t0));
            }
            pos = pos2 / 2u;
            if (t0 >= run) continue;
            if (vector) {
                const uint32_t c128 = ((center - EX_CENTER_SYMBOL) & 0xffu) * 0x00800080u;
#pragma unroll
                for (int c = 0; c < EX_ROUND / 16; ++c) {
                    const uint32_t q[4] = {sm[c].x, sm[c].y, sm[c].z, sm[c].w};
                    uint32_t o[8];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        o[2 * j] = ex_join_pair(syms[4 * c + j], q[j], c128, 0x4140u, 0x9180u);
                        o[2 * j + 1] = ex_join_pair(syms[4 * c + j], q[j], c128, 0x4342u, 0xb3a2u);
                    }
                    reinterpret_cast<uint4*>(dst)[2 * c] = make_uint4(o[0], o[1], o[2], o[3]);
                    reinterpret_cast<uint4*>(dst)[2 * c + 1] = make_uint4(o[4], o[5], o[6], o[7]);
                }
                dst += EX_ROUND;
                r += EX_ROUND;
                if (r == group_len) {
                    r = 0;
                    ++g;
                    dst += group_jump;
                    if (t0 + EX_ROUND < run) center = rp[EX_HEADER_LEN + g];
                }
            } else {
#pragma unroll
                for (int i = 0; i < EX_ROUND; ++i) {
                    const unsigned t = t0 + i;
                    if (t < run) {
                        const uint32_t sym = (syms[i / 4] >> (8 * (i % 4))) & 0xffu;
                        const uint32_t exponent = (sym + center - EX_CENTER_SYMBOL) & 0xffu;
                        *dst++ = (uint16_t)kv_join(exponent, src[t]);
                        if (++r == group_len) {
                            r = 0;
                            ++g;
                            dst += group_jump;
                            if (t + 1 < run) center = rp[EX_HEADER_LEN + g];
                        }
                    }
                }
            }
        }
        ex_cp_async_wait_all();  // nothing may land in the ring once the next record uses it
        unsigned flags = 0;
        if (pos > count) flags |= EX_STATUS_EXHAUSTED;
        if (__any_sync(0xffffffffu, x != EX_STATE_LOWER)) flags |= EX_STATUS_FINAL_STATE;
        if (pos != count) flags |= EX_STATUS_UNCONSUMED;
        if (lane == 0 && flags) atomicOr(status, flags);
    }
}
