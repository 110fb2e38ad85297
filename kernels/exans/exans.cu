// ExANS GPU decoder: every record of a container in one launch, byte-identical to the
// CPU reference (crates/exans/src/record.rs, rans.rs; docs/formats/exans.md).
//
// One CTA of 256 threads per record (grid-stride over records first_record..end_record, so a
// host can launch on the records that have arrived while later ones are still copied):
//   1. thread 0 parses and bounds-checks the 48-byte header (three 16-byte loads) and
//      derives every section offset (spec 3, 4) into shared memory;
//   2. raw records (spec 7) are copied word by word into their groups;
//   3. coded records: the sparse model (spec 5.1) is loaded one entry per thread (and
//      the 2L centers into shared memory, when 2L <= EX_SHARED_GROUPS), its cdf taken
//      with a block scan and checked, then the 2^n-entry decode table is built in shared
//      memory (per lane, one binary search over the cdf, then a walk over every 32nd slot
//      of its warp's range), in a packing of its own (freq << 20 | bias << 8 | symbol,
//      see ex_decode_round; a one-symbol model is written without the table);
//   4. warp w decodes partition w (spec 6): lane j is rANS lane j; step-major, in step t
//      every lane whose run is longer than t decodes symbol 256 (t / 8) + 8 j + t mod 8
//      (format version 2's tiles: lane j holds values 8 j .. 8 j + 7 of every 256-value
//      tile), then the lanes whose state fell below 2^16 take the next words of the
//      partition's stream in ascending lane order (ballot + popc(ballot & lanemask_lt)),
//      straight from a per-warp shared-memory ring that cp.async fills up to a ring ahead
//      (18 instructions a step, no branch, 10 of them on the ALU pipe; the ring's first
//      512 words are mirrored after it, so a round reads it without wrapping). Steps run
//      in rounds of EXANS_DECODE_ROUND_STEPS = 16, two tiles: a lane keeps the round's symbols in
//      registers, then, per tile, turns its 8 back into exponents E = (C + c_g - 127) mod
//      256 (four at a time; the tile's group, and so its center, is warp-uniform), joins
//      them with their raw sign+mantissa bytes (one 8-byte load per lane, issued at the
//      round's start: 256 contiguous bytes per warp) and writes the 8 BF16 words with one
//      16-byte store: 512 contiguous bytes per warp, whole sectors with no data exchanged
//      between lanes. A regular partition (whole tiles, groups of whole tiles) keeps a
//      running output pointer per lane; any other tile is checked (whole, inside one
//      group, aligned) and written value by value when it is not;
//   5. version 4 (spec 6.4): the section holds the sign+mantissa bytes of values P .. N - 1
//      (P = min(N, 512)), read in step 4 at a fixed offset -P from where version 3 had
//      them, so no tile tests for the payload: the first P values get whatever bytes lie
//      before the section (inside the record: the directory or the word streams, as the
//      section starts at least 1120 bytes in). Every lane's final state
//      is checked against its payload and kept in shared memory, and after a CTA barrier
//      thread k writes lane k's two bytes over the sign+mantissa bits of values 2 k and
//      2 k + 1 (deferred to the next record's start, behind thread 0's parse, it measured
//      0.3% slower: docs/perf/exans-gpu.md, "Format version 4").
//
// Output layout: the cache's 2L tensors [T, H, D] concatenated in block order (layer 0
// K, layer 0 V, ...), i.e. KvCache::concat_words. Value r of group g of record i goes to
// out[g * T*H*D + i * B*H*D + r].
//
// Robustness: the host validates the container and every record with the CPU parser
// first, but the kernel trusts nothing it reads: every header field and section offset
// is re-checked against the record's slot in the container before it is used, every
// memory access stays inside the record or the CTA's shared memory (a read past a
// partition's stream gets a stale ring word, and the final check flags the record), and
// every loop is bounded by symbol counts or 2^n. Any problem sets a bit of *status (0 = valid); the
// host then runs the CPU decoder for the exact typed error.
#include "../common/adler.cuh"
#include "../common/bf16_field.cuh"
#include "tiles.cuh"

#define EX_SHARED_GROUPS 512  // records of up to this many groups (2L) keep their centers in shared memory
#define EX_TABLE_SLOTS (1 << EXANS_MAX_PRECISION)
static_assert(EXANS_DECODE_ROUND_STEPS == 2 * EXANS_GROUP, "a round decodes and stores exactly two tiles");
// Words a round can read: pos .. pos + EXANS_DECODE_ROUND_STEPS * 32 - 1 (a step reads at most one word
// per lane, at pos + its rank). The lookahead requested at a round's start reaches
// pos + EXANS_DECODE_RING_WORDS, so it covers the next round whenever EXANS_DECODE_RING_WORDS >= 2 * EX_ROUND_WORDS.
#define EX_ROUND_WORDS (EXANS_DECODE_ROUND_STEPS * EXANS_LANES)
static_assert((EXANS_DECODE_RING_WORDS & (EXANS_DECODE_RING_WORDS - 1)) == 0 && EXANS_DECODE_RING_WORDS >= 2 * EX_ROUND_WORDS,
              "the lookahead covers the next round, and never lands on words the current round reads");

// The header is read as twelve aligned u32s: every u32 field sits on a multiple of 4.
static_assert(EXANS_HEADER_LEN == 48 && EXANS_HEADER_VALUES % 4 == 0 && EXANS_HEADER_RECORD_LEN % 4 == 0 &&
                  EXANS_HEADER_MODEL_OFFSET % 4 == 0 && EXANS_HEADER_DIRECTORY_OFFSET % 4 == 0 &&
                  EXANS_HEADER_WORDS_OFFSET % 4 == 0 && EXANS_HEADER_SIGN_MANTISSA_OFFSET % 4 == 0,
              "u32 fields are word-aligned");

__device__ __forceinline__ uint32_t ex_u16(const uint8_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

// 16-byte global -> shared copy that completes asynchronously (sm_80+). The L2 fetches the
// whole 128-byte line from DRAM with the first miss (prefetch-size hint): the next chunks
// of the stream are then L2 hits.
__device__ __forceinline__ void ex_cp_async16(uint32_t smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void ex_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void ex_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Waits for every group but the newest one.
__device__ __forceinline__ void ex_cp_async_wait_all_but_newest() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

__device__ __forceinline__ unsigned long long ex_align16(unsigned long long x) { return (x + 15ull) & ~15ull; }

// A record's parsed header and derived layout (offsets relative to the record start).
struct ExRecord {
    unsigned long long start;          // byte offset of the record in the container
    unsigned long long values;         // N
    unsigned long long per_group;      // B' H D
    unsigned long long directory;
    unsigned long long sign_mantissa;
    unsigned long long streams[EXANS_PARTITIONS];
    unsigned counts[EXANS_PARTITIONS];
    unsigned precision;
    unsigned payload;       // P: sign+mantissa bytes in the lanes' states (spec 6.4)
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
    if (slot_end - slot_start < EXANS_HEADER_LEN) return false;
    const uint8_t* p = container + slot_start;
    // The 48-byte header in three 16-byte loads (the slot is 16-byte aligned and at least
    // 48 bytes long), so the checks below wait on one memory round trip, not one each.
    uint32_t h[12];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[i];
        h[4 * i] = v.x, h[4 * i + 1] = v.y, h[4 * i + 2] = v.z, h[4 * i + 3] = v.w;
    }
    auto u16_at = [&](int off) { return (h[off / 4] >> (8 * (off % 4))) & 0xffffu; };  // off even
    auto u8_at = [&](int off) { return (h[off / 4] >> (8 * (off % 4))) & 0xffu; };
    const unsigned long long record_len = h[EXANS_HEADER_RECORD_LEN / 4];
    if (record_len < EXANS_HEADER_LEN || record_len > slot_end - slot_start) return false;
    const uint32_t version = u16_at(EXANS_HEADER_VERSION);
    if (h[EXANS_HEADER_MAGIC / 4] != EXANS_RECORD_MAGIC ||
        (version != EXANS_VERSION && version != EXANS_VERSION_3 && version != EXANS_VERSION_2))
        return false;
    // The checksum (flag bit 1, versions 3 and 4) is verified after the decode, from the output.
    const uint32_t flags = u16_at(EXANS_HEADER_FLAGS);
    const uint32_t known = version != EXANS_VERSION_2 ? EXANS_FLAG_RAW | EXANS_FLAG_CHECKSUM : EXANS_FLAG_RAW;
    if ((flags & ~known) != 0) return false;
    // The shape must be the one the container implies (it fixes where the output goes).
    const unsigned long long first_token = rec * (unsigned long long)block_tokens;
    if (first_token >= tokens) return false;
    const unsigned long long left = tokens - first_token;
    const unsigned long long bt = left < block_tokens ? left : block_tokens;
    if (u16_at(EXANS_HEADER_LAYERS) != layers || u16_at(EXANS_HEADER_KV_HEADS) != kv_heads ||
        u16_at(EXANS_HEADER_HEAD_DIM) != head_dim || u16_at(EXANS_HEADER_TOKENS) != bt)
        return false;
    const unsigned long long per_group = bt * kv_heads * head_dim;
    const unsigned long long n = 2ull * layers * per_group;
    if (n == 0 || h[EXANS_HEADER_VALUES / 4] != n) return false;  // n = 0 only with a zero dimension
    r.start = slot_start;
    r.values = n;
    r.per_group = per_group;
    r.groups = 2u * layers;
    r.raw = flags & EXANS_FLAG_RAW;
    if (r.raw) return record_len == EXANS_HEADER_LEN + 2ull * n;

    const unsigned precision = u8_at(EXANS_HEADER_PRECISION);
    if (precision < 1 || precision > EXANS_MAX_PRECISION || u8_at(EXANS_HEADER_PARTITIONS) != EXANS_PARTITIONS ||
        u8_at(EXANS_HEADER_LANES) != EXANS_LANES)
        return false;
    const unsigned long long model = EXANS_HEADER_LEN + 2ull * layers;
    if (h[EXANS_HEADER_MODEL_OFFSET / 4] != model || model + 2 > record_len) return false;
    const unsigned k = ex_u16(p + model);
    if (k < 1 || k > EXANS_MAX_SYMBOLS) return false;
    const unsigned long long directory = ex_align16(model + 2 + 3ull * k);
    const unsigned long long words = directory + EXANS_DIRECTORY_LEN;
    if (h[EXANS_HEADER_DIRECTORY_OFFSET / 4] != directory || h[EXANS_HEADER_WORDS_OFFSET / 4] != words ||
        words > record_len)
        return false;
    // The 8 word counts: two 16-byte loads (the directory is 16-byte aligned).
    const uint4 c03 = *reinterpret_cast<const uint4*>(p + directory);
    const uint4 c47 = *reinterpret_cast<const uint4*>(p + directory + 16);
    const uint32_t counts[EXANS_PARTITIONS] = {c03.x, c03.y, c03.z, c03.w, c47.x, c47.y, c47.z, c47.w};
    unsigned long long at = words;
#pragma unroll
    for (int q = 0; q < EXANS_PARTITIONS; ++q) {
        r.counts[q] = counts[q];
        r.streams[q] = at;
        at = ex_align16(at + 2ull * counts[q]);  // counts < 2^32: no overflow in 64 bits
    }
    // Version 4 carries the first P = min(N, 512) sign+mantissa bytes in the lanes'
    // states (spec 6.4); the section holds the other N - P.
    const unsigned long long payload = version == EXANS_VERSION ? min(n, (unsigned long long)EXANS_PAYLOAD_BYTES) : 0;
    if (h[EXANS_HEADER_SIGN_MANTISSA_OFFSET / 4] != at || at + n - payload != record_len) return false;
    r.payload = (unsigned)payload;
    r.precision = precision;
    r.symbols = k;
    r.model_offset = (unsigned)model;
    r.directory = directory;
    r.sign_mantissa = at;
    return true;
}

// The CTA's dynamic shared memory, EX_DYNAMIC_SMEM bytes (the host launches with
// EXANS_DECODE_DYNAMIC_SMEM, asserted equal): the decode table, then the word rings.
//   - Decode table: 2^n 4-byte slots, freq << 20 | bias << 8 | symbol (ex_decode_round).
//     An 8-byte slot {freq | symbol << 24, bias} saved 3 instructions a step but measured
//     slower (more bank conflicts, more registers; docs/perf/exans-gpu.md).
//   - Word rings: per partition, an EXANS_DECODE_RING_WORDS-word ring followed by a mirror of its first
//     EX_ROUND_WORDS words (every chunk landing there is copied to both places). A round
//     reads at most EX_ROUND_WORDS words from where it starts in the ring, so its reads
//     are linear from ring + 2 (pos mod EXANS_DECODE_RING_WORDS): no wrap in the step (one ALU operation
//     fewer a step).
#define EX_RING_BYTES (EXANS_DECODE_RING_WORDS * 2)
#define EX_TABLE_BYTES (EX_TABLE_SLOTS * 4)
#define EX_MIRROR_BYTES (EX_ROUND_WORDS * 2)
#define EX_SLOT_BYTES (EX_RING_BYTES + EX_MIRROR_BYTES)
#define EX_DYNAMIC_SMEM (EX_TABLE_BYTES + EXANS_PARTITIONS * EX_SLOT_BYTES)
static_assert(EX_DYNAMIC_SMEM == EXANS_DECODE_DYNAMIC_SMEM, "the host launches with the generated size");
extern __shared__ __align__(16) uint8_t ex_smem[];

// Warp-wide ballot without the compiler's divergence check (every caller is converged:
// the step loops run on all 32 lanes, with per-lane work predicated).
__device__ __forceinline__ uint32_t ex_ballot(bool p) {
    uint32_t b;
    asm volatile("{\n .reg .pred q;\n setp.ne.u32 q, %1, 0;\n vote.sync.ballot.b32 %0, q, 0xffffffff;\n}\n"
                 : "=r"(b)
                 : "r"((uint32_t)p));
    return b;
}

// One lane's view of one partition (spec 6.2) while the partition is decoded.
struct ExLane {
    uint32_t x;             // rANS state
    unsigned pos;           // words of the partition consumed (warp-uniform)
    unsigned run;           // steps this lane decodes
    unsigned count;         // words in the partition's stream
    unsigned total_chunks;  // 16-byte chunks of the stream
    unsigned done;          // chunks requested (warp-uniform)
    unsigned done_old;      // chunks requested before the newest cp.async group
    uint32_t ring;          // the partition's word ring (shared address)
    const uint4* chunks;    // the stream
};

// Requests the stream chunks [from, to) of `lane`'s partition into its ring (one 16-byte
// cp.async per chunk, lanes striding; a second one for a chunk whose slot is mirrored).
// Not unrolled: a round's lookahead is about one chunk per lane, so ptxas's 4-fold
// unrolling of this loop only adds branch-sync blocks (measured slower,
// docs/perf/exans-gpu.md).
__device__ __forceinline__ void ex_request(const ExLane& l, unsigned from, unsigned to, unsigned lane) {
#pragma unroll 1
    for (unsigned c = from + lane; c < to; c += EXANS_LANES) {
        const uint32_t off = (16u * c) & (EX_RING_BYTES - 1);
        ex_cp_async16(l.ring + off, l.chunks + c);
        if (off < EX_MIRROR_BYTES) ex_cp_async16(l.ring + EX_RING_BYTES + off, l.chunks + c);
    }
}

// One round of EXANS_DECODE_ROUND_STEPS decode steps of the warp's partition, steps t0 .. t0 + EXANS_DECODE_ROUND_STEPS
// - 1 (spec 6.2): byte i % 4 of syms[i / 4] gets step t0 + i's symbol (unspecified for a
// lane that has no symbol in that step). kAll: every lane decodes in every step of the
// round, so the per-lane activity test is compiled out. Per step and lane: the table
// lookup, the state update x = freq * (x >> n) + bias, the symbol packed by one byte
// permute, and the renormalisation, which takes the lanes' words in ascending lane order
// straight from the ring (ballot, then popc of the lower lanes' bits). Every lane reads a
// ring word, needed or not, so the step has no branch.
//
// The step is written for the ALU pipe, which Nsight Compute showed the busiest, moving
// 4 of its 14 operations to the FMA pipe or away (docs/perf/exans-gpu.md):
//   - the slot's address, table + 4 (x mod 2^n), is x * 4 + table - q * 2^(n+2) mod
//     2^32: two multiply-adds instead of a mask and an LEA (`four` is 4 and `neg_span`
//     -2^(n+2), both run-time values, so ptxas cannot turn the multiplies back into
//     shifts);
//   - the slot holds freq << 20 | bias << 8 | symbol, and freq q + bias = freq (q - 2^12)
//     + (slot >> 8) mod 2^32 (q - 2^12 wraps when q < 2^12; the true result is below
//     2^32): two shifts, an add and a multiply-add, no mask (freq < 2^12 whenever the
//     model has two symbols or more; the caller writes a one-symbol model without
//     decoding);
//   - the renormalisation x = x << 16 | w is a predicated multiply-add by k16 = 2^16;
//   - the ring is read from rp on, linearly (see EX_MIRROR_BYTES), without a wrap mask.
template <bool kAll>
__device__ __forceinline__ void ex_decode_round(ExLane& l, uint32_t (&syms)[EXANS_DECODE_ROUND_STEPS / 4], uint32_t table_s,
                                                uint32_t four, uint32_t neg_span, uint32_t k16, unsigned precision,
                                                uint32_t lanes_below, unsigned t0) {
    uint32_t x = l.x;
    const uint32_t rp0 = l.ring + 2u * (l.pos % EXANS_DECODE_RING_WORDS);
    uint32_t rp = rp0;  // shared address of the next word of the stream
#pragma unroll
    for (int i = 0; i < EXANS_DECODE_ROUND_STEPS; ++i) {
        const bool active = kAll || t0 + i < l.run;
        uint32_t e = 0;
        if (active) {
            const uint32_t q = x >> precision;
            asm volatile("ld.shared.u32 %0, [%1];" : "=r"(e) : "r"(table_s + x * four + q * neg_span));
            x = (e >> 20) * (q - (1u << 12)) + (e >> 8);
        }
        // Byte (i % 4) <- the symbol, byte 0 of e (selector 4); the other bytes kept.
        constexpr uint32_t kKeepAndInsert[4] = {0x3210u, 0x3240u, 0x3410u, 0x4210u};
        syms[i / 4] = i % 4 == 0 ? e & 0xffu : __byte_perm(syms[i / 4], e, kKeepAndInsert[i % 4]);
        const bool need = active && x < EXANS_STATE_LOWER;
        const uint32_t ballot = ex_ballot(need);
        const uint32_t at = rp + 2u * __popc(ballot & lanes_below);
        uint16_t w;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(w) : "r"(at));
        if (need) x = x * k16 + w;
        rp += 2u * __popc(ballot);
    }
    l.x = x;
    l.pos += (rp - rp0) / 2u;
}

// Where a tile's values go (warp-uniform): group g, and offset r in the group of the
// tile's first value.
struct ExTile {
    unsigned g, r;
};

// Moves a regular partition's tile (and the lane's output pointer in it) one tile on:
// to the next group's start at a group's end (groups are whole tiles there).
__device__ __forceinline__ void ex_next_tile(ExTile& tile, uint16_t*& dst, unsigned group_len,
                                             unsigned long long group_jump) {
    dst += EXANS_TILE;
    tile.r += EXANS_TILE;
    if (tile.r == group_len) {
        tile.r = 0;
        ++tile.g;
        dst += group_jump;
    }
}

// Joins one tile's symbols of this lane (steps t .. t + 7: values 8 lane .. 8 lane + 7
// of the tile, bytes of s0 then s1) with their sign+mantissa bytes `sgnman` and writes them
// as one 16-byte store: the warp writes the tile's 512 contiguous bytes. The tile lies
// in one group, whose center is warp-uniform, and every address is aligned. Returns the
// words stored (for the checksum's sums).
__device__ __forceinline__ uint4 ex_store_tile(uint16_t* dst, uint32_t s0, uint32_t s1, uint2 sgnman, uint32_t center) {
    // Byte-wise (C + c_g - 127) mod 256 of four symbols at once: add the low 7 bits, then
    // flip the top bit by the carry-less sum of the top bits.
    const uint32_t c4 = ((center - EXANS_CENTER_SYMBOL) & 0xffu) * 0x01010101u;
    const uint32_t c4_low = c4 & 0x7f7f7f7fu, c4_top = c4 & 0x80808080u;
    const uint32_t e0 = ((s0 & 0x7f7f7f7fu) + c4_low) ^ ((s0 & 0x80808080u) ^ c4_top);
    const uint32_t e1 = ((s1 & 0x7f7f7f7fu) + c4_low) ^ ((s1 & 0x80808080u) ^ c4_top);
    const uint2 a = kv_join_quad(e0, sgnman.x);
    const uint2 b = kv_join_quad(e1, sgnman.y);
    // Streaming store (evict first): the output is not read again here (docs/perf/exans-gpu.md).
    const uint4 words = make_uint4(a.x, a.y, b.x, b.y);
    __stcs(reinterpret_cast<uint4*>(dst), words);
    return words;
}

// The general path of a tile (partial, across groups or unaligned): value by value, each
// finding its group by division (rare: never for whole tiles of a record whose groups
// are multiples of 256 values at aligned offsets). `sgnman[v]` is value v's byte (for
// v below the payload, a byte before the section, replaced after the partitions).
// kSums adds each word to the checksum's sums (s, ws), at its byte position in the
// partition.
template <bool kSums>
__device__ void ex_store_tile_slow(uint16_t* __restrict__ out, const uint8_t* sgnman, const uint8_t* centers,
                                   uint32_t s0, uint32_t s1, unsigned first, unsigned p_len, unsigned p_start,
                                   unsigned group_len, unsigned long long tensor_values,
                                   unsigned long long out_block, uint32_t& s, unsigned long long& ws) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const unsigned idx = first + i;  // index in the partition
        if (idx < p_len) {
            const uint32_t sym = ((i < 4 ? s0 : s1) >> (8 * (i % 4))) & 0xffu;
            const unsigned v = p_start + idx;
            const unsigned g = v / group_len, r = v - g * group_len;
            const uint32_t exponent = (sym + centers[g] - EXANS_CENTER_SYMBOL) & 0xffu;
            const uint32_t word = kv_join(exponent, sgnman[v]);
            out[g * tensor_values + out_block + r] = (uint16_t)word;
            if (kSums) kv_adler_add_word_wide(word, 2u * idx, s, ws);
        }
    }
}

// Four CTAs of 256 threads per SM (64 registers, no spills; 43 KiB of shared memory each):
// the tile layout's round fits 64 registers, and occupancy bounds the step chain's
// latency hiding, so 4 CTAs beat 3 (80 registers); 5 (48 registers) spill and lose
// (docs/perf/exans-gpu.md).
//
// kSums (exans_decode_records_checksum) also adds the Adler-32 sums of each record's
// decoded values to record_sums[2 rec, 2 rec + 1], for the host to compare with the
// records' checksums (spec 3): each lane adds the 16 bytes of every tile it stores, at
// its byte position in the partition (a 64-bit weighted sum: a partition can pass 2^32
// of it; a lane holds fewer than 2^24 bytes of a record below 2^31 values, so its byte
// sum fits 32 bits), and the warp commits the partition's sums once, after its last
// round. A twin, so that the default kernel's registers and code stay as they are.
template <bool kSums>
__device__ __forceinline__ void ex_decode_records(const uint8_t* __restrict__ container,
                                                  unsigned long long container_len,
                                                  const unsigned long long* __restrict__ offsets,
                                                  unsigned first_record, unsigned end_record, unsigned layers,
                                                  unsigned kv_heads, unsigned head_dim, unsigned block_tokens,
                                                  unsigned long long tokens, uint16_t* __restrict__ out,
                                                  unsigned* __restrict__ status,
                                                  unsigned long long* __restrict__ record_sums) {
    __shared__ uint32_t entry_cdf[EXANS_MAX_SYMBOLS];
    __shared__ uint32_t entry_base[EXANS_MAX_SYMBOLS];  // a slot's word without the bias
    __shared__ uint32_t warp_sums[EXANS_PARTITIONS];
    // The record's 2L centers when 2L <= EX_SHARED_GROUPS (else read from the record): a
    // tile's join reads its group's center here by a shared load, where a global load
    // stalled the join (Nsight Compute's stall samples, docs/perf/exans-gpu.md).
    __shared__ uint8_t s_centers[EX_SHARED_GROUPS];
    __shared__ ExRecord rs;
    // 4 and 2^16 for ex_decode_round, read back from shared memory so that ptxas cannot
    // fold its multiply-adds back into shifts and permutes.
    __shared__ uint32_t s_four_k16[2];
    // Each lane's final state's low 16 bits: the sign+mantissa bytes of the record's first
    // P values (spec 6.4), joined after the partitions.
    __shared__ uint16_t s_payload[EXANS_PARTITIONS * EXANS_LANES];
    static_assert(EXANS_PARTITIONS * EXANS_LANES == EXANS_THREADS && EXANS_PAYLOAD_BYTES == 2 * EXANS_THREADS,
                  "one thread per lane joins the lane's two payload bytes");

    // One warp per partition and EX_DYNAMIC_SMEM bytes of dynamic shared memory: any other
    // launch is refused (uniform, before any work).
    uint32_t dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (blockDim.x != EXANS_THREADS || blockDim.y != 1 || blockDim.z != 1 || dynamic_smem < EX_DYNAMIC_SMEM) {
        if (threadIdx.x == 0 && blockIdx.x == 0) atomicOr(status, EXANS_STATUS_LAUNCH);
        return;
    }
    const unsigned tid = threadIdx.x;
    uint32_t* const table = reinterpret_cast<uint32_t*>(ex_smem);
    const uint32_t table_s = (uint32_t)__cvta_generic_to_shared(ex_smem);  // shared addresses
    const uint32_t rings = table_s + EX_TABLE_BYTES;
    if (tid == 0) {  // read after the record loop's first barrier
        volatile uint32_t* const four_k16 = s_four_k16;
        four_k16[0] = 4;
        four_k16[1] = EXANS_STATE_LOWER;
    }
    const unsigned lane = tid % 32;
    const unsigned warp = tid / 32;
    const uint32_t lanes_below = (1u << lane) - 1u;
    const unsigned long long hd = (unsigned long long)kv_heads * head_dim;
    const unsigned long long tensor_values = tokens * hd;  // T H D: one group's stride in `out`

    for (unsigned long long rec = first_record + (unsigned long long)blockIdx.x; rec < end_record;
         rec += gridDim.x) {
        __syncthreads();  // the previous record is done with the shared memory
        if (tid == 0) {
            rs.ok = ex_parse(container, container_len, offsets, rec, layers, kv_heads, head_dim, block_tokens,
                             tokens, rs) ? 1u : 0u;
            if (!rs.ok) atomicOr(status, EXANS_STATUS_LAYOUT);
        }
        __syncthreads();
        if (!rs.ok) continue;  // uniform: every thread reads the same shared flag
        const volatile uint32_t* const four_k16 = s_four_k16;  // volatile: loaded, never folded
        const uint32_t four = four_k16[0], k16 = four_k16[1];
        const uint8_t* rp = container + rs.start;
        const unsigned long long n = rs.values;
        const unsigned long long per_group = rs.per_group;
        const unsigned long long out_block = rec * block_tokens * hd;

        if (rs.raw) {
            // Raw: the N words LE in block order at offset 48 (2-byte aligned: records
            // and the container are 16-byte aligned).
            // With kSums, positions are relative to the record's first byte (below 2^32:
            // N < 2^31), and a thread's weighted sum stays below 2^64 (about 2 N^2).
            const uint16_t* src = reinterpret_cast<const uint16_t*>(rp + EXANS_HEADER_LEN);
            uint32_t raw_s = 0;
            unsigned long long raw_ws = 0;
            for (unsigned g = 0; g < rs.groups; ++g) {
                for (unsigned long long i = tid; i < per_group; i += EXANS_THREADS) {
                    const uint16_t word = src[g * per_group + i];
                    out[g * tensor_values + out_block + i] = word;
                    if (kSums) kv_adler_add_word_wide(word, (uint32_t)(2 * (g * per_group + i)), raw_s, raw_ws);
                }
            }
            if (kSums) kv_adler_warp_flush_mod32(raw_s, raw_ws, 0, record_sums + 2 * rec);
            continue;
        }

        // ---- Model: one entry per thread, cdf by a block-wide exclusive scan. ----
        const unsigned k = rs.symbols;
        const unsigned precision = rs.precision;
        static_assert(EXANS_MAX_SYMBOLS <= EXANS_THREADS, "one model entry per thread");
        const bool shared_centers = rs.groups <= EX_SHARED_GROUPS;
        const uint8_t* const centers = shared_centers ? s_centers : rp + EXANS_HEADER_LEN;
        if (shared_centers)
            for (unsigned g = tid; g < rs.groups; g += EXANS_THREADS) s_centers[g] = rp[EXANS_HEADER_LEN + g];
        uint32_t freq = 0, symbol = 0;
        bool bad = false;
        if (tid < k) {
            const uint8_t* e = rp + rs.model_offset + 2 + 3 * tid;
            symbol = e[0];
            freq = ex_u16(e + 1);
            // Strictly ascending symbols: entry tid - 1 read straight from the record.
            bad = freq == 0 || (tid > 0 && e[-3] >= symbol);
        }
        uint32_t incl = freq;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= (unsigned)d) incl += v;
        }
        if (lane == 31) warp_sums[warp] = incl;
        __syncthreads();
        uint32_t cdf = incl - freq, total = 0;
        for (unsigned w = 0; w < EXANS_PARTITIONS; ++w) {
            if (w < warp) cdf += warp_sums[w];
            total += warp_sums[w];
        }
        if (tid < k) {
            entry_cdf[tid] = cdf;
            // freq < 2^12 once the sum is checked below, unless k = 1 (then unused: see single).
            entry_base[tid] = (freq << 20) | symbol;
        }
        // freq < 2^16 and k <= 256: the sum fits u32.
        bad = bad || total != (1u << precision);
        if (__syncthreads_or(bad)) {
            if (tid == 0) atomicOr(status, EXANS_STATUS_MODEL);
            continue;
        }
        // ---- Decode table: slot x -> the entry with cdf <= x < cdf + freq. ----
        // A valid model has cdf[0] = 0 and strictly increasing cdfs.
        // Warp w fills slots [w R, min((w + 1) R, 2^n)), R = max(2^n / 8, 32), lane j every
        // 32nd from w R + j (conflict-free stores; below 256 slots the higher warps, and
        // below 32 the higher lanes, have none): one binary search for its first slot, then
        // a walk forward (the entry only moves up, at most K - 1 times per lane), where a
        // search per slot cost 16 dependent searches per thread.
        const unsigned slots = 1u << precision;
        const unsigned region = max(slots / (EXANS_THREADS / EXANS_LANES), (unsigned)EXANS_LANES);
        const unsigned x_end = min((warp + 1) * region, slots);
        unsigned x = warp * region + lane;
        if (x < x_end) {
            unsigned lo = 0, hi = k - 1;
            while (lo < hi) {
                const unsigned mid = (lo + hi + 1) / 2;
                if (entry_cdf[mid] <= x) lo = mid; else hi = mid - 1;
            }
            for (; x < x_end; x += EXANS_LANES) {
                while (lo + 1 < k && entry_cdf[lo + 1] <= x) ++lo;
                table[x] = entry_base[lo] | ((x - entry_cdf[lo]) << 8);
            }
        }
        __syncthreads();

        // ---- Partition `warp`: 32 lanes, step-major. ----
        // N < 2^32 (a u32 header field), so every count below fits 32 bits; only output
        // addresses need 64.
        const uint32_t neg_span = 0u - (4u << precision);  // -(bytes of the table)
        // One symbol: freq 2^n, which the slot's 12-bit field cannot hold at n = 12, and a
        // step maps x to 2^n (x >> n) + x mod 2^n = x and reads no word, so the symbols
        // are written without decoding (the final checks still see the states and words).
        const bool single = k == 1;
        const uint32_t single4 = (table[0] & 0xffu) * 0x01010101u;
        const unsigned group_len = (unsigned)per_group;
        const unsigned p = warp;
        const unsigned p_start = (unsigned)(p * n / EXANS_PARTITIONS);
        const unsigned p_len = (unsigned)((p + 1) * n / EXANS_PARTITIONS) - p_start;
        // Tiles of 256 symbols (spec 6.2): lane j decodes symbols 8 j .. 8 j + 7 of each,
        // in 8 steps, for exans_lane_run steps in all.
        const unsigned m = exans_lane_run(p_len, 0);  // the partition's steps
        ExLane l;
        l.run = exans_lane_run(p_len, lane);
        l.x = *reinterpret_cast<const uint32_t*>(rp + rs.directory + 32 + 4 * (EXANS_LANES * p + lane));
        // A state below 2^16 flags the record, and the warp skips its steps (warp-uniform)
        // but still meets the block barrier before the payload's join.
        const bool state_range = __any_sync(0xffffffffu, l.x < EXANS_STATE_LOWER);
        if (state_range && lane == 0) atomicOr(status, EXANS_STATUS_STATE_RANGE);
        const unsigned steps = state_range ? 0u : m;
        l.pos = 0;
        l.count = rs.counts[p];
        l.total_chunks = (l.count + 7u) / 8u;
        l.done = l.done_old = 0;
        // The stream is staged through the partition's ring in 16-byte chunks (the stream
        // is 16-byte aligned and padded to 16 inside the record, so chunk c < ceil(count/8)
        // is inside the record): word i sits at ring[i % EXANS_DECODE_RING_WORDS], and also at
        // ring[EXANS_DECODE_RING_WORDS + i % EXANS_DECODE_RING_WORDS] when i % EXANS_DECODE_RING_WORDS < EX_ROUND_WORDS. Before a round every
        // word it can read is in the ring (loaded synchronously if the lookahead fell
        // short); then the chunks up to pos + EXANS_DECODE_RING_WORDS, whose slots hold only words below
        // pos, are requested asynchronously for the next rounds. A lane that renormalises
        // reads its word straight from the ring. Past `count` the ring holds stale words:
        // only an invalid record reads them, and the final check flags it (pos > count).
        l.ring = rings + p * EX_SLOT_BYTES;
        l.chunks = reinterpret_cast<const uint4*>(rp + rs.streams[p]);
        // The partition's sign+mantissa bytes, and the group and offset of its first tile
        // (warp-uniform, advanced a tile at a time). The section starts at value P (spec
        // 6.4): value v's byte at sign_mantissa - P + v, for v < P a byte of the record
        // before the section (sign_mantissa > 1056 > P), overwritten after the partitions.
        const uint8_t* const sgnman_block = rp + rs.sign_mantissa - rs.payload;
        const uint8_t* const sgnman_part = sgnman_block + p_start;
        ExTile tile;
        tile.g = p_start / group_len;
        tile.r = p_start - tile.g * group_len;
        // A lane's 8 values are 16-byte aligned in `out` and 8-byte aligned in the
        // sign+mantissa section in every tile when every term of their offsets is a
        // multiple of 8 values (tiles are 256 values apart).
        const bool aligned =
            ((out_block | tile.r | p_start | group_len | tensor_values) & 7u) == 0 &&
            (reinterpret_cast<uintptr_t>(out) & 15u) == 0 && (reinterpret_cast<uintptr_t>(sgnman_part) & 7u) == 0;
        // A regular partition (the common case: whole tiles, groups of whole tiles, both
        // starting at multiples of 256 values, aligned) stores every tile with 16-byte
        // stores at a running per-lane pointer, with no per-tile tests.
        // With kSums, also a partition of at most 2^25 values (so the running sums of the
        // regular path below fit 32 bits): larger ones take the general path.
        const bool regular = aligned && p_len % EXANS_TILE == 0 && p_start % EXANS_TILE == 0 &&
                             group_len % EXANS_TILE == 0 && (!kSums || p_len <= (1u << 25));
        uint16_t* dst = out + (tile.g * tensor_values + out_block + tile.r + EXANS_GROUP * lane);
        const unsigned long long group_jump = tensor_values - group_len;
        // Steps where all 32 lanes decode (lane 31's run) take the fast path, with no
        // per-lane activity test; the rest the general one.
        const unsigned all_active = exans_lane_run(p_len, EXANS_LANES - 1);
        // kSums: the lane's sums, relative to the partition's first byte. The general path
        // adds each tile at its position (kv_adler_add16_wide). The regular path keeps
        // running sums instead (kv_adler_chain16: s, and o < 2^32 for at most 2^17 tiles)
        // and adds 512 s to adler_ws after each tile: the lane's bytes of tile t sit at
        // 512 t + 16 lane, so after T tiles the weighted sum is (512 T + 16 lane) s + o -
        // adler_ws (see after the loop), one wide multiply-add a tile where the general
        // form pays a multiply-add by the position and two adds.
        uint32_t adler_s = 0, adler_o = 0;
        unsigned long long adler_ws = 0;
        // Rounds of EXANS_DECODE_ROUND_STEPS steps, two tiles: the round's symbols are kept in registers
        // (4 per u32, compile-time indexed), then each tile is joined with its
        // sign+mantissa bytes and written, 16 bytes per lane and 512 contiguous bytes per
        // warp when the tile is whole, inside one group and aligned; otherwise value by
        // value.
        for (unsigned t0 = 0; t0 < steps; t0 += EXANS_DECODE_ROUND_STEPS) {
            __syncwarp();  // every lane's reads of the previous round are done with the ring
            // The words this round can read are normally in groups older than the newest
            // (the previous round's lookahead, still in flight), so the wait skips it; if
            // they are not, they are requested now and every group is waited for.
            const unsigned target = min((l.pos + EX_ROUND_WORDS + 7u) / 8u, l.total_chunks);
            if (target > l.done_old) {  // warp-uniform
                ex_request(l, l.done, target, lane);
                l.done = max(l.done, target);
                ex_cp_async_commit();
                ex_cp_async_wait_all();
            } else {
                ex_cp_async_wait_all_but_newest();
            }
            __syncwarp();
            const unsigned ahead = min((l.pos + EXANS_DECODE_RING_WORDS) / 8u, l.total_chunks);
            ex_request(l, l.done, ahead, lane);
            l.done_old = l.done;
            l.done = max(l.done, ahead);
            ex_cp_async_commit();
            // The round's tiles, tile0 and tile0 + 1 (when in the partition).
            const unsigned tile0 = t0 / EXANS_GROUP;
            const bool second = (tile0 + 1) * EXANS_TILE < p_len;  // warp-uniform
            // Regular partitions load the round's sign+mantissa bytes now, so that the
            // loads' latency hides behind the decode steps.
            uint2 sgnman0 = make_uint2(0, 0), sgnman1 = make_uint2(0, 0);
            if (regular) {
                const uint2* const sgnman_tile = reinterpret_cast<const uint2*>(sgnman_part + tile0 * EXANS_TILE) + lane;
                sgnman0 = __ldg(sgnman_tile);
                if (second) sgnman1 = __ldg(sgnman_tile + EXANS_TILE / 8);
            }
            uint32_t syms[EXANS_DECODE_ROUND_STEPS / 4];
            if (single) {
#pragma unroll
                for (int j = 0; j < EXANS_DECODE_ROUND_STEPS / 4; ++j) syms[j] = single4;
            } else if (t0 + EXANS_DECODE_ROUND_STEPS <= all_active)
                ex_decode_round<true>(l, syms, table_s, four, neg_span, k16, precision, lanes_below, t0);
            else
                ex_decode_round<false>(l, syms, table_s, four, neg_span, k16, precision, lanes_below, t0);
            if (regular) {
                // Every tile whole, inside one group and aligned: the lane's 16 bytes at
                // dst, which moves a tile on, and past the rest of the tensor at a group's
                // end (where the tile offset r comes back to 0).
                const uint4 w0 =
                    ex_store_tile(dst, syms[0], syms[1], sgnman0, shared_centers ? s_centers[tile.g] : centers[tile.g]);
                if (kSums) {
                    kv_adler_chain16(w0, adler_s, adler_o);
                    adler_ws += 2ull * EXANS_TILE * adler_s;
                }
                ex_next_tile(tile, dst, group_len, group_jump);
                if (second) {
                    const uint4 w1 = ex_store_tile(dst, syms[2], syms[3], sgnman1,
                                                   shared_centers ? s_centers[tile.g] : centers[tile.g]);
                    if (kSums) {
                        kv_adler_chain16(w1, adler_s, adler_o);
                        adler_ws += 2ull * EXANS_TILE * adler_s;
                    }
                    ex_next_tile(tile, dst, group_len, group_jump);
                }
            } else {
                // Any other partition, tile by tile: 16-byte stores where the tile is
                // whole, inside one group and aligned, else value by value.
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const unsigned first = (tile0 + u) * EXANS_TILE;  // the tile's first symbol
                    if (first >= p_len) break;                     // warp-uniform
                    if (aligned && first + EXANS_TILE <= p_len && tile.r + EXANS_TILE <= group_len) {
                        const uint2 sgnman = __ldg(reinterpret_cast<const uint2*>(sgnman_part + first) + lane);
                        uint16_t* const at = out + (tile.g * tensor_values + out_block + tile.r + EXANS_GROUP * lane);
                        // The center through the generic pointer: a shared load here (the
                        // path regular partitions never take) changed ptxas's register
                        // allocation of the whole kernel for the worse (docs/perf/exans-gpu.md).
                        const uint4 w = ex_store_tile(at, syms[2 * u], syms[2 * u + 1], sgnman, centers[tile.g]);
                        if (kSums) kv_adler_add16_wide(w, 2u * (first + EXANS_GROUP * lane), adler_s, adler_ws);
                    } else {
                        ex_store_tile_slow<kSums>(out, sgnman_block, centers, syms[2 * u], syms[2 * u + 1],
                                                  first + EXANS_GROUP * lane, p_len, p_start, group_len,
                                                  tensor_values, out_block, adler_s, adler_ws);
                    }
                    // The next tile's group: a loop, not a division, which ptxas predicates
                    // into every round; one pass when groups hold at least a tile, at most
                    // EXANS_TILE passes for groups of a single value.
                    tile.r += EXANS_TILE;
                    while (tile.r >= group_len) {
                        tile.r -= group_len;
                        ++tile.g;
                    }
                }
            }
        }
        if (kSums) {
            if (regular)  // warp-uniform; every tile of the partition went through the regular path
                adler_ws = (2ull * EXANS_TILE * (p_len / EXANS_TILE) + 2u * EXANS_GROUP * lane) * adler_s + adler_o -
                           adler_ws;
            kv_adler_warp_flush_mod32(adler_s, adler_ws, 2ull * p_start, record_sums + 2 * rec);
        }
        ex_cp_async_wait_all();  // nothing may land in the ring once the next record uses it
        // Lane k = 32 p + j ends at its initial encoder state, 2^16 + b0 + 256 b1, with the
        // bytes it carries no payload in zero (spec 6.3, 6.4): c = clamp(P - 2 k, 0, 2).
        const unsigned k_lane = EXANS_LANES * p + lane;
        const unsigned carried = rs.payload > 2u * k_lane ? min(rs.payload - 2u * k_lane, 2u) : 0u;
        const bool end_ok = l.x >= EXANS_STATE_LOWER && l.x - EXANS_STATE_LOWER < (1u << (8u * carried));
        s_payload[k_lane] = (uint16_t)l.x;
        unsigned flags = 0;
        if (l.pos > l.count) flags |= EXANS_STATUS_EXHAUSTED;
        if (__any_sync(0xffffffffu, !end_ok)) flags |= EXANS_STATUS_FINAL_STATE;
        if (l.pos != l.count) flags |= EXANS_STATUS_UNCONSUMED;
        if (lane == 0 && flags) atomicOr(status, flags);

        // ---- The first P values' sign+mantissa bytes, from the states (spec 6.4). ----
        // Every warp has stored its values (with a byte from before the section there)
        // and its states: thread k writes the bytes of lane k over the sign+mantissa bits
        // of values 2 k and 2 k + 1, reading back the words its CTA wrote (a CTA barrier
        // makes them visible). kSums takes the old word's bytes back out of the record's
        // sums (adding 65521 minus each, weighted by its position) and adds the new one's.
        __syncthreads();
        if (rs.payload != 0) {  // block-uniform
            uint32_t patch_s = 0;
            unsigned long long patch_ws = 0;
            const uint32_t bytes = s_payload[tid];
#pragma unroll
            for (unsigned i = 0; i < 2; ++i) {
                const unsigned v = 2u * tid + i;  // the value, and its index in the payload
                if (v < rs.payload) {
                    const unsigned g = v / group_len, r = v - g * group_len;
                    uint16_t* const at = out + (g * tensor_values + out_block + r);
                    const uint32_t old = *at;
                    const uint32_t word = (old & 0x7f80u) | kv_join(0u, (bytes >> (8u * i)) & 0xffu);
                    *at = (uint16_t)word;
                    if (kSums) {
                        const uint32_t lo = old & 0xffu, hi = old >> 8;
                        patch_s += 2u * KV_ADLER_MOD - lo - hi;
                        patch_ws += 2ull * v * (KV_ADLER_MOD - lo) + (2ull * v + 1) * (KV_ADLER_MOD - hi);
                        kv_adler_add_word_wide(word, 2u * v, patch_s, patch_ws);
                    }
                }
            }
            if (kSums) kv_adler_warp_flush_mod32(patch_s, patch_ws, 0, record_sums + 2 * rec);
        }
    }
}

extern "C" __global__ void __launch_bounds__(EXANS_THREADS, 4)
exans_decode_records(const uint8_t* __restrict__ container, unsigned long long container_len,
                     const unsigned long long* __restrict__ offsets, unsigned first_record, unsigned end_record,
                     unsigned layers, unsigned kv_heads, unsigned head_dim, unsigned block_tokens,
                     unsigned long long tokens, uint16_t* __restrict__ out, unsigned* __restrict__ status) {
    ex_decode_records<false>(container, container_len, offsets, first_record, end_record, layers, kv_heads, head_dim,
                             block_tokens, tokens, out, status, nullptr);
}

extern "C" __global__ void __launch_bounds__(EXANS_THREADS, 4)
exans_decode_records_checksum(const uint8_t* __restrict__ container, unsigned long long container_len,
                              const unsigned long long* __restrict__ offsets, unsigned first_record,
                              unsigned end_record, unsigned layers, unsigned kv_heads, unsigned head_dim,
                              unsigned block_tokens, unsigned long long tokens, uint16_t* __restrict__ out,
                              unsigned* __restrict__ status, unsigned long long* __restrict__ record_sums) {
    ex_decode_records<true>(container, container_len, offsets, first_record, end_record, layers, kv_heads, head_dim,
                            block_tokens, tokens, out, status, record_sums);
}
