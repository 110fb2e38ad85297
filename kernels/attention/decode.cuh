// The decode-attention kernel body shared by the BF16 twin (kernels/attention/decode.cu)
// and the fused kernels over compressed pages (kernels/<codec>/attention.cu): one template
// over a page *loader*, so that a compressed cache and its decoded BF16 copy run the same
// split plan, page-to-warp assignment, mma sequence and accumulation order, and give the
// same bits (docs/formats/attention.md). Only the staging of a page and the reading of its
// tensor-core B fragments differ, and those are the loader's.
//
// One query token per sequence. Grid = (splits, kv_heads, batch): a CTA owns one KV head of
// one sequence, all of its GROUP query heads (so each KV byte is read once), and one
// contiguous range of pages (a split of the context, so that batch 1 still fills every SM).
// Each of its warps takes every warps<D>()-th page of that range, has the loader stage the page
// into shared memory with 16-byte cp.async loads hinted to fetch whole 128-byte L2 lines
// (the next page's in flight while one is computed), reads the tensor-core fragments
// through the loader, and runs
// FlashAttention-2's register flow on the tensor cores (mma.sync m16n8k16, in compute_80
// PTX): S = Q.K^T with the query heads as the 16 rows (rows past GROUP are zero), an online
// softmax in the log2 domain, then O += P.V with P taken straight from S's accumulators as
// the A operand.
//
// Splits are combined in the same launch: each CTA leaves its (max, sum, unnormalised O)
// in a workspace, and the CTA that takes the last ticket of its (sequence, KV head)
// combines every split (combine_splits at head_dim 64, a loop over the splits otherwise),
// writes the output and the log-sum-exp, and resets the ticket for the next launch (so a
// captured graph replays without a memset). Every combination runs in a fixed order: the
// result does not depend on which CTA finishes first.
//
// A loader provides:
//   Entry                          per-lane state of one block-table entry (a page id, or more)
//   Entry entry(id, live, partial, kv_head)   the entry of table value `id` (`live`: inside
//                                  the warp's range; `partial`: the sequence's unfilled last page)
//   static Entry broadcast(entries, lane)     lane `lane`'s entry, to the whole warp
//   bool issue(entry, p, len, stage, kv_head, kv_heads, lane, status)
//                                  queues logical page p's cp.async loads into the warp's slot
//                                  `stage` (2 * PAGE_TOKENS * staged_row<D>() values); false
//                                  (with a status flag) when the page cannot be read
//   void compute(entry, stage_address, bf16_lanes, f)   calls f(frags) once, where frags.k(kk, b)
//                                  gives K's B fragments of k-step kk (tokens 0-7: b0 b1,
//                                  8-15: b2 b3) and frags.v(c, b) V's of n-tiles c, c+1
//                                  (b0 b1, b2 b3), as ldmatrix gives them from a staged BF16 page
#pragma once

#include <stdint.h>

#include "../common/async_copy.cuh"
#include "attention_format.gen.cuh"

namespace {


constexpr int PAGE_TOKENS = ATTENTION_PAGE_TOKENS;
// Warps per CTA: ATTENTION_WARPS, or ATTENTION_WARPS_D256 at head_dim 256, where a CTA's
// staging fills the SM's shared memory and only more warps in it hide a fused kernel's
// restore (docs/perf/attention.md, "v10").
template <int D> __host__ __device__ constexpr int warps() { return D == 256 ? ATTENTION_WARPS_D256 : ATTENTION_WARPS; }
template <int D> __host__ __device__ constexpr int threads() { return warps<D>() * 32; }
// Threads that combine the warps' states: 16 per query row, whatever the warps.
constexpr int COMBINE_THREADS = 16 * ATTENTION_MAX_GROUP;
static_assert(ATTENTION_WARPS * 32 == COMBINE_THREADS && ATTENTION_WARPS_D256 * 32 >= COMBINE_THREADS,
              "every kernel has the combine's threads");
// The mma's 16 rows hold at most this many query heads per KV head; rows g+8 stay zero.
constexpr int MAX_GROUP = ATTENTION_MAX_GROUP;
// ln 2: the log-sum-exp is kept in the log2 domain and returned as a natural log.
constexpr float LN2 = 0.6931471805599453;

// Shared-memory row of a staged page, in BF16 values: head_dim, unpadded; its 16-byte
// chunks are swizzled (staged_at).
template <int D> __host__ __device__ constexpr int staged_row() { return D; }

// Bytes of one staged page, its K rows then its V rows (crates/attention's
// staged_page_bytes); a fused kernel's loader stages a compressed page in the same room.
template <int D> __host__ __device__ constexpr int staged_page_bytes() { return 2 * PAGE_TOKENS * staged_row<D>() * 2; }

// Bytes of the warps' combine state at the start of the dynamic buffer (per warp and query
// row: max, sum, O[0..D)); the split's ticket word follows it.
template <int D> __host__ __device__ constexpr int combine_bytes() { return warps<D>() * MAX_GROUP * (D + 2) * 4; }

// Where 16-byte chunk `chunk` of staged row `row` lies, in values from the page's K or V
// rows: chunk `chunk ^ (row mod 8)` of the row. The 8 rows of an ldmatrix 8x8 tile then
// fall in distinct banks, and the two chunks of every 32-byte sector of a row stay in one
// aligned 32-byte block of shared memory: cp.async asks the L2 for a sector once per
// aligned 32-byte block its halves land in, so rows padded by 16 bytes (as before) asked
// for half the sectors twice (docs/perf/attention.md, "v9").
template <int D> __device__ __forceinline__ int staged_at(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// Page slots per warp: the page being computed and the next one in flight (the loop
// below is written for two).
constexpr int STAGES = ATTENTION_STAGES;
static_assert(STAGES == 2, "the page loop alternates two slots");


__device__ __forceinline__ void mma_bf16(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    // Rows g+8 of A (a1, a3) are zero and their accumulators (c2, c3) are thrown away:
    // a decode step has at most MAX_GROUP query rows.
    float rows8_0 = 0.f, rows8_1 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(rows8_0), "+f"(rows8_1)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// Two floats to a bf16x2 word, round to nearest even; `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ uint16_t to_bf16(float x) { return (uint16_t)(pack_bf16x2(x, 0.f) & 0xffffu); }

// exp2 of a difference whose left side may be -inf (an empty warp or split): 0, not NaN.
__device__ __forceinline__ float weight(float m, float m_max) {
    return m == -INFINITY ? 0.f : exp2f(m - m_max);
}

// ldmatrix row addresses of a lane for a staged BF16 page: matrix lane/8, row lane%8 of it.
// A row's chunks are swizzled by the row (staged_at). The slots are 128-byte aligned and
// a row's chunk index XOR the row's low bits stays inside the row's aligned 128 bytes, so
// the swizzled address is the unswizzled one XOR a per-lane mask (`(row mod 8) << 4` bytes).
template <int D> struct Bf16Lanes {
    // K (x4, not transposed): matrices (tokens 0-7 | 8-15) x (channels +0 | +8) of a k-step:
    // row (mat / 2) 8 + mat_row, chunk 2 kk + mat % 2; bytes from the slot before the swizzle.
    uint32_t k_offset;
    // V (x4, transposed): matrices (tokens 0-7 | 8-15) x (n-block c | c+1): row (mat % 2) 8
    // + mat_row, chunk c + mat / 2 (c even).
    uint32_t v_offset;
    // The swizzle of the lane's rows, in bytes.
    uint32_t mask;
    __device__ __forceinline__ explicit Bf16Lanes(int lane) {
        const int mat = lane >> 3, mat_row = lane & 7;
        k_offset = (((mat >> 1) * 8 + mat_row) * staged_row<D>() + (mat & 1) * 8) * 2;
        v_offset = (((mat & 1) * 8 + mat_row) * staged_row<D>() + (mat >> 1) * 8) * 2;
        mask = mat_row << 4;
    }
};

// The B fragments of a staged BF16 page (K rows, then V rows, each PAGE_TOKENS rows of
// staged_row<D>() values, chunks swizzled) at shared address `stage` (128-byte aligned).
template <int D> struct Bf16Fragments {
    uint32_t k_lane, v_lane, mask;
    __device__ __forceinline__ Bf16Fragments(uint32_t stage, const Bf16Lanes<D>& l)
        : k_lane(stage + l.k_offset), v_lane(stage + PAGE_TOKENS * staged_row<D>() * 2 + l.v_offset), mask(l.mask) {}
    __device__ __forceinline__ void k(int kk, uint32_t (&b)[4]) const { ldmatrix_x4(b, (k_lane + kk * 32) ^ mask); }
    __device__ __forceinline__ void v(int c, uint32_t (&b)[4]) const { ldmatrix_x4_trans(b, (v_lane + c * 16) ^ mask); }
};

// Queues the K and V rows of kv_head of BF16 page `page` ([pages, PAGE_TOKENS, kv_heads, D]
// each, `token_stride` = kv_heads * D) into `stage`, the rows of tokens at or past `len` of V as zeros (a masked score
// weighs 0, but 0 x NaN would not be 0); `first_token` is the page's first token.
template <int D>
__device__ __forceinline__ void stage_bf16_page(const uint16_t* __restrict__ k_pages,
                                                const uint16_t* __restrict__ v_pages, uint32_t page,
                                                uint32_t first_token, uint32_t len, uint16_t* stage,
                                                uint32_t kv_head, uint32_t kv_heads, size_t token_stride, int lane) {
    uint16_t* k_slot = stage;
    uint16_t* v_slot = k_slot + PAGE_TOKENS * staged_row<D>();
    const size_t base = ((size_t)page * PAGE_TOKENS * kv_heads + kv_head) * D;
    constexpr int CHUNKS_PER_ROW = D / 8;
#pragma unroll
    for (int c = lane; c < PAGE_TOKENS * CHUNKS_PER_ROW; c += 32) {
        const int r = c / CHUNKS_PER_ROW, chunk = c % CHUNKS_PER_ROW, to = staged_at<D>(r, chunk);
        const size_t at = base + r * token_stride + chunk * 8;
        copy_async_16_line(k_slot + to, k_pages + at);
        if (first_token + r < len)
            copy_async_16_line(v_slot + to, v_pages + at);
        else
            *reinterpret_cast<uint4*>(v_slot + to) = make_uint4(0, 0, 0, 0);
    }
}

// The BF16 twin's loader: pages [num_pages, PAGE_TOKENS, kv_heads, D] of K and of V, an
// entry is the page id.
template <int D> struct Bf16Loader {
    const uint16_t* __restrict__ k_pages;
    const uint16_t* __restrict__ v_pages;
    uint32_t num_pages;
    size_t token_stride;  // kv_heads * D

    using Entry = uint32_t;
    __device__ __forceinline__ Entry entry(uint32_t id, bool, bool, uint32_t) const { return id; }
    static __device__ __forceinline__ Entry broadcast(Entry e, int from) { return __shfl_sync(0xffffffffu, e, from); }
    __device__ __forceinline__ bool issue(Entry page, uint32_t p, uint32_t len, uint16_t* stage, uint32_t kv_head,
                                          uint32_t kv_heads, int lane, uint32_t* status) const {
        const bool ok = page < num_pages;
        if (!ok && lane == 0) atomicOr(status, ATTENTION_STATUS_BAD_PAGE);
        if (ok) stage_bf16_page<D>(k_pages, v_pages, page, p * PAGE_TOKENS, len, stage, kv_head, kv_heads, token_stride,
                                   lane);
        return ok;
    }
    template <class F>
    __device__ __forceinline__ void compute(Entry, uint32_t stage, const Bf16Lanes<D>& lanes, F&& f) const {
        f(Bf16Fragments<D>(stage, lanes));
    }
};

// Parts the combine cuts a unit's splits into: each part's sum runs in split order, then
// the parts are added in order; a part's loads are independent, so they are in flight at once.
constexpr int COMBINE_PARTS = 4;

// Shared floats the combine uses past the ticket's word: every (row, split)'s weight, each
// row's max and sum, and each part's O.
template <int D> __host__ __device__ constexpr int combine_scratch_floats() {
    return MAX_GROUP * ATTENTION_MAX_SPLITS + 2 * MAX_GROUP + COMBINE_PARTS * MAX_GROUP * D;
}

// The last CTA of a unit combines its `splits` states (`unit_states`: per split and query
// row `[max, sum, O[0..D)]`, written by decode_paged) into the `group` query heads' output
// rows (`out`, `group * D` BF16) and log-sum-exps (`lse`), with every thread of the CTA and
// `scratch` (combine_scratch_floats, shared). The order is fixed whatever the CTAs'
// timing: a row's max (exact in any order); each split's weight 2^(max_split - max); the
// row's sum as each lane's sum over splits lane, lane + 32, ... reduced by an xor butterfly
// (offsets 16, 8, 4, 2, 1; lane 0's result kept); O per channel as COMBINE_PARTS sums over
// consecutive splits in split order, added part 0 first. A part's loads do not wait on each
// other, so they are in flight together. `splits` is at most ATTENTION_MAX_SPLITS (the
// host's plan), which lanes x PER_LANE cover.
template <int D>
__device__ __forceinline__ void combine_splits(const float* __restrict__ unit_states, uint32_t splits, uint32_t group,
                                               float* scratch, uint16_t* __restrict__ out, float* __restrict__ lse) {
    constexpr int WARPS = warps<D>();
    constexpr int PER_LANE = ATTENTION_MAX_SPLITS / 32;
    constexpr int STATE = D + 2;  // floats per (split, row)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* weights = scratch;                                     // [row][split], row stride splits
    float* row_max = weights + MAX_GROUP * ATTENTION_MAX_SPLITS;  // [row]
    float* row_sum = row_max + MAX_GROUP;                         // [row]
    float* part_o = row_sum + MAX_GROUP;                          // [part][row][D]

#pragma unroll 1
    for (uint32_t row = warp; row < group; row += WARPS) {
        float m[PER_LANE], l[PER_LANE];
#pragma unroll
        for (int k = 0; k < PER_LANE; ++k) {
            const uint32_t sp = lane + 32 * k;
            const float* state = unit_states + ((size_t)sp * MAX_GROUP + row) * STATE;
            m[k] = sp < splits ? __ldcg(state) : -INFINITY;
            l[k] = sp < splits ? __ldcg(state + 1) : 0.f;
        }
        float most = m[0];
#pragma unroll
        for (int k = 1; k < PER_LANE; ++k) most = fmaxf(most, m[k]);
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, x));
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < PER_LANE; ++k) {
            const float w = weight(m[k], most);
            if (lane + 32 * k < splits) weights[row * splits + lane + 32 * k] = w;
            sum += l[k] * w;
        }
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
        if (lane == 0) {
            row_max[row] = most;
            row_sum[row] = sum;
        }
    }
    __syncthreads();

    // O: items (part, row, channel pair), consecutive threads on consecutive channel pairs
    // (a state's O starts 8 bytes into it: float2 loads).
    const uint32_t per_part = (splits + COMBINE_PARTS - 1) / COMBINE_PARTS;
    const uint32_t items = COMBINE_PARTS * group * (D / 2);
#pragma unroll 1
    for (uint32_t item = threadIdx.x; item < items; item += WARPS * 32) {
        const uint32_t c2 = item % (D / 2), rest = item / (D / 2), row = rest % group, part = rest / group;
        const uint32_t first = part * per_part, last = min(splits, first + per_part);
        float2 acc = make_float2(0.f, 0.f);
#pragma unroll 4
        for (uint32_t sp = first; sp < last; ++sp) {
            const float2 o = __ldcg(reinterpret_cast<const float2*>(unit_states + ((size_t)sp * MAX_GROUP + row) * STATE + 2) + c2);
            const float w = weights[row * splits + sp];
            acc.x = fmaf(o.x, w, acc.x);
            acc.y = fmaf(o.y, w, acc.y);
        }
        reinterpret_cast<float2*>(part_o + (part * MAX_GROUP + row) * D)[c2] = acc;
    }
    __syncthreads();

    for (uint32_t item = threadIdx.x; item < group * D; item += WARPS * 32) {
        const uint32_t row = item / D, d = item % D;
        float acc = part_o[row * D + d];
#pragma unroll
        for (int part = 1; part < COMBINE_PARTS; ++part) acc += part_o[(part * MAX_GROUP + row) * D + d];
        out[item] = to_bf16(acc / row_sum[row]);
    }
    if (threadIdx.x < group) lse[threadIdx.x] = (row_max[threadIdx.x] + log2f(row_sum[threadIdx.x])) * LN2;
}

template <int D, class Loader>
__device__ __forceinline__ void decode_paged(
    const Loader& loader, const uint16_t* __restrict__ q, const uint32_t* __restrict__ block_table, const uint32_t* __restrict__ context_lens, uint16_t* __restrict__ out,
    float* __restrict__ lse, float* __restrict__ partial, uint32_t* __restrict__ tickets,
    uint32_t* __restrict__ status, uint32_t max_pages, uint32_t kv_heads, uint32_t group,
    float scale_log2) {
    constexpr int ROW = staged_row<D>();
    constexpr int KSTEPS = D / 16;
    constexpr int NBLOCKS = D / 8;
    constexpr int WARPS = warps<D>();
    using Entry = typename Loader::Entry;
    // 128-byte aligned, and no static shared memory before it (the split's ticket lies in
    // it too): the staging slots start on aligned 32-byte blocks (staged_at).
    extern __shared__ __align__(128) uint4 shared_raw[];
    static_assert(combine_bytes<D>() + 4 <= WARPS * STAGES * staged_page_bytes<D>(),
                  "the warps' states and the ticket word fit the staging");
    static_assert(D != 64 || combine_bytes<D>() + 16 + 4 * combine_scratch_floats<D>() <= WARPS * STAGES * staged_page_bytes<D>(),
                  "combine_splits' scratch fits the staging past the ticket word");
    static_assert(ATTENTION_MAX_SPLITS % 32 == 0, "combine_splits' lanes hold ATTENTION_MAX_SPLITS / 32 splits each");

    const uint32_t split = blockIdx.x, splits = gridDim.x, kv_head = blockIdx.y, seq = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    // The host checks the block tables of a host problem; a device problem's are checked
    // here, so that no read leaves the cache: a bad context or page id is flagged and
    // skipped (the output is then meaningless, and the host reports the status).
    uint32_t len = context_lens[seq];
    if (len == 0 || len > max_pages * PAGE_TOKENS) {
        if (threadIdx.x == 0 && split == 0) atomicOr(status, ATTENTION_STATUS_BAD_CONTEXT);
        len = min(len, max_pages * PAGE_TOKENS);
    }
    const uint32_t pages = (len + PAGE_TOKENS - 1) / PAGE_TOKENS;
    // Each sequence's own split of its pages (a table row may be much wider than the
    // context): at least ATTENTION_MIN_PAGES_PER_SPLIT pages per split, later splits empty.
    const uint32_t pages_per_split = max((uint32_t)ATTENTION_MIN_PAGES_PER_SPLIT, (pages + splits - 1) / splits);
    const uint32_t page_begin = split * pages_per_split;
    const uint32_t page_end = min(pages, page_begin + pages_per_split);
    const uint32_t q_heads = kv_heads * group;

    // Q fragments of rows 0..7 (query heads kv_head*group + g), channels 2t, 2t+1 and 2t+8, 2t+9
    // of each 16-channel step.
    uint32_t qa[KSTEPS][2];
    {
        const bool live = (uint32_t)g < group;
        const uint16_t* row = q + ((size_t)seq * q_heads + kv_head * group + (live ? g : 0)) * D;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            qa[kk][0] = live ? *reinterpret_cast<const uint32_t*>(row + kk * 16 + 2 * t) : 0u;
            qa[kk][1] = live ? *reinterpret_cast<const uint32_t*>(row + kk * 16 + 8 + 2 * t) : 0u;
        }
    }

    float o[NBLOCKS][2];
#pragma unroll
    for (int c = 0; c < NBLOCKS; ++c) o[c][0] = o[c][1] = 0.f;
    float m = -INFINITY;  // running max of row g, log2 domain
    float l = 0.f;        // this lane's share of row g's running sum

    // Each warp owns STAGES page slots of K and V rows: the next page's loads (cp.async)
    // are in flight while this page is computed.
    uint16_t* warp_stage = reinterpret_cast<uint16_t*>(shared_raw) + warp * STAGES * 2 * PAGE_TOKENS * ROW;

    // Queues page p's rows (the loader's staging) into slot `slot`. Commits one cp.async
    // group either way; returns whether the page is staged.
    auto issue = [&](uint32_t p, const Entry& e, int slot) -> bool {
        bool ok = false;
        if (p < page_end)
            ok = loader.issue(e, p, len, warp_stage + slot * 2 * PAGE_TOKENS * ROW, kv_head, kv_heads, lane, status);
        asm volatile("cp.async.commit_group;\n" ::);
        return ok;
    };

    const Bf16Lanes<D> bf16_lanes(lane);

    // The block-table entries of this warp's pages, 32 at a time, one per lane, as the
    // loader's entries (a page id, or more): the page loads then never wait on a table read.
    typename Loader::Entry entries;
    auto load_ids = [&](uint32_t first) {
        const uint32_t logical = page_begin + warp + WARPS * (first + lane);
        const bool live = logical < page_end;
        const uint32_t id = live ? block_table[(size_t)seq * max_pages + logical] : 0u;
        entries = loader.entry(id, live, logical + 1 == pages && len % PAGE_TOKENS != 0, kv_head);
    };
    load_ids(0);

    uint32_t p = page_begin + warp;
    int slot = 0;
    Entry current = Loader::broadcast(entries, 0);
    bool ready = issue(p, current, 0);
    for (uint32_t it = 0; p < page_end; ++it, p += WARPS, slot ^= 1) {
        if ((it + 1) % 32 == 0) load_ids(it + 1);
        const Entry next = Loader::broadcast(entries, (it + 1) % 32);
        const bool next_ready = issue(p + WARPS, next, slot ^ 1);
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncwarp();
        if (ready) loader.compute(current, shared_address(warp_stage + slot * 2 * PAGE_TOKENS * ROW), bf16_lanes, [&](const auto& frags) {
            // S for tokens 0..7 and 8..15 of the page: s[nb][j] is row g, token nb*8 + 2t + j.
            float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                uint32_t b[4];
                frags.k(kk, b);
                mma_bf16(s[0][0], s[0][1], qa[kk][0], qa[kk][1], b[0], b[1]);
                mma_bf16(s[1][0], s[1][1], qa[kk][0], qa[kk][1], b[2], b[3]);
            }
            float row_max = -INFINITY;
#pragma unroll
            for (int nb = 0; nb < 2; ++nb)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const uint32_t token = p * PAGE_TOKENS + nb * 8 + 2 * t + j;
                    s[nb][j] = token < len ? s[nb][j] * scale_log2 : -INFINITY;
                    row_max = fmaxf(row_max, s[nb][j]);
                }
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
            row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
            // Every page in range holds at least one token below len: row_max is finite.
            const float m_new = fmaxf(m, row_max);
            const float correction = weight(m, m_new);
            m = m_new;
            float p_sum = 0.f;
#pragma unroll
            for (int nb = 0; nb < 2; ++nb)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    s[nb][j] = exp2f(s[nb][j] - m_new);
                    p_sum += s[nb][j];
                }
            l = l * correction + p_sum;
            const uint32_t pa0 = pack_bf16x2(s[0][0], s[0][1]);
            const uint32_t pa2 = pack_bf16x2(s[1][0], s[1][1]);

            // O += P.V over n-blocks c, c+1 per transposed ldmatrix.
#pragma unroll
            for (int c = 0; c < NBLOCKS; c += 2) {
                uint32_t b[4];
                frags.v(c, b);
                o[c][0] *= correction;
                o[c][1] *= correction;
                o[c + 1][0] *= correction;
                o[c + 1][1] *= correction;
                mma_bf16(o[c][0], o[c][1], pa0, pa2, b[0], b[1]);
                mma_bf16(o[c + 1][0], o[c + 1][1], pa0, pa2, b[2], b[3]);
            }
        });
        __syncwarp();  // the slot is refilled by the next iteration's issue
        ready = next_ready;
        current = next;
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);

    // Combine the warps in shared memory (reusing the staging space): per warp and row,
    // [max, sum, O[0..D)].
    __syncthreads();
    float* warp_state = reinterpret_cast<float*>(shared_raw);
    {
        float* row = warp_state + (warp * MAX_GROUP + g) * (D + 2);
        if (t == 0) {
            row[0] = m;
            row[1] = l;
        }
#pragma unroll
        for (int c = 0; c < NBLOCKS; ++c) {
            row[2 + c * 8 + 2 * t] = o[c][0];
            row[2 + c * 8 + 2 * t + 1] = o[c][1];
        }
    }
    __syncthreads();

    // Thread i < COMBINE_THREADS combines channels of row i / 16 into registers; threads
    // past COMBINE_THREADS (head_dim 256's extra warps) only keep the barriers.
    constexpr int THREADS_PER_ROW = COMBINE_THREADS / MAX_GROUP;
    const bool combiner = threadIdx.x < COMBINE_THREADS;
    const int r = combiner ? threadIdx.x / THREADS_PER_ROW : 0, part = threadIdx.x % THREADS_PER_ROW;
    float cta_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) cta_max = fmaxf(cta_max, warp_state[(w * MAX_GROUP + r) * (D + 2)]);
    float weights[WARPS];
    float cta_sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
        const float* row = warp_state + (w * MAX_GROUP + r) * (D + 2);
        weights[w] = weight(row[0], cta_max);
        cta_sum += row[1] * weights[w];
    }
    float combined[D / THREADS_PER_ROW];
#pragma unroll
    for (int i = 0; i < D / THREADS_PER_ROW; ++i) {
        const int d = part + i * THREADS_PER_ROW;
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) acc += warp_state[(w * MAX_GROUP + r) * (D + 2) + 2 + d] * weights[w];
        combined[i] = acc;
    }
    const bool live_row = combiner && (uint32_t)r < group;
    const size_t head_out = (size_t)seq * q_heads + kv_head * group + r;

    if (splits == 1) {
        if (live_row) {
#pragma unroll
            for (int i = 0; i < D / THREADS_PER_ROW; ++i)
                out[head_out * D + part + i * THREADS_PER_ROW] = to_bf16(combined[i] / cta_sum);
            if (part == 0) lse[head_out] = (cta_max + log2f(cta_sum)) * LN2;
        }
        return;
    }

    // Leave this split's state, then the last CTA of the (sequence, KV head) combines.
    const size_t unit = (size_t)seq * kv_heads + kv_head;
    // Rows past the group are never read back: their state is not written.
    float* mine = partial + ((unit * splits + split) * MAX_GROUP + r) * (D + 2);
    if (live_row) {
        if (part == 0) {
            mine[0] = cta_max;
            mine[1] = cta_sum;
        }
#pragma unroll
        for (int i = 0; i < D / THREADS_PER_ROW; ++i) mine[2 + part + i * THREADS_PER_ROW] = combined[i];
    }
    __threadfence();
    __syncthreads();
    // The ticket's word follows the combine's state in the dynamic buffer (a static
    // __shared__ word would shift the buffer's start by 16 bytes).
    uint32_t* ticket = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(shared_raw) + combine_bytes<D>());
    if (threadIdx.x == 0) *ticket = atomicAdd(tickets + unit, 1u);
    __syncthreads();
    if (*ticket != splits - 1) return;
    // Every split of the unit has taken its ticket: it can be reset for the next launch.
    if (threadIdx.x == 0) tickets[unit] = 0;
    if constexpr (D == 64) {
        __threadfence();
        combine_splits<D>(partial + unit * splits * MAX_GROUP * (D + 2), splits, group,
                          reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(shared_raw) + combine_bytes<D>() + 16),
                          out + ((size_t)seq * q_heads + kv_head * group) * D, lse + (size_t)seq * q_heads + kv_head * group);
        return;
    }
    if (!live_row) return;
    __threadfence();

    // Head_dim 128 and 256: one pass with the online rescaling of the softmax by the live
    // rows' threads, unrolled so that the loads of 16 splits are in flight at once (the
    // parallel combine above, with more items per thread there, measured slower).
    float total_max = -INFINITY, total_sum = 0.f;
    float total[D / THREADS_PER_ROW];
#pragma unroll
    for (int i = 0; i < D / THREADS_PER_ROW; ++i) total[i] = 0.f;
#pragma unroll 16
    for (uint32_t sp = 0; sp < splits; ++sp) {
        const float* theirs = partial + ((unit * splits + sp) * MAX_GROUP + r) * (D + 2);
        const float their_max = __ldcg(theirs);
        const float new_max = fmaxf(total_max, their_max);
        const float keep = weight(total_max, new_max), add = weight(their_max, new_max);
        total_sum = total_sum * keep + __ldcg(theirs + 1) * add;
#pragma unroll
        for (int i = 0; i < D / THREADS_PER_ROW; ++i)
            total[i] = total[i] * keep + __ldcg(theirs + 2 + part + i * THREADS_PER_ROW) * add;
        total_max = new_max;
    }
#pragma unroll
    for (int i = 0; i < D / THREADS_PER_ROW; ++i)
        out[head_out * D + part + i * THREADS_PER_ROW] = to_bf16(total[i] / total_sum);
    if (part == 0) lse[head_out] = (total_max + log2f(total_sum)) * LN2;
}

}  // namespace
