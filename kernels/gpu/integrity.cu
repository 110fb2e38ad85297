// The Adler-32 sums of records of BF16 values in device memory (crates/gpu/src/integrity.rs):
// the checksum a codec stores with flag "checksum", verified after a decode kernel or
// computed before an encode kernel, for a codec whose own kernels do not fold it in.
//
// A record is `groups` runs of values; run g of record i starts at value
// g * group_stride + i * block_stride and holds block_stride values (last_block for the
// last record), and the record's bytes are its runs in group order: ExANS's blocks in a
// cache of 2L tensors [T, H, D] (spec §3), or one contiguous run. The work items are
// spans of up to KV_ADLER_SPAN values of one run, one per warp at a time (grid-stride):
// each lane adds 16 bytes at a time (2 when the span is not 16-byte aligned), then the
// warp adds its sums to the record's pair of counters. A warp per item, not a CTA: runs
// are a few thousand values, and a CTA-wide reduction per run (two barriers) left the
// loads of too few runs in flight.
#include "../common/adler.cuh"

#define KV_ADLER_THREADS 256
#define KV_ADLER_SPAN 4096ull

extern "C" __global__ void __launch_bounds__(KV_ADLER_THREADS)
kv_adler_records(const uint16_t* __restrict__ words, unsigned long long group_stride,
                 unsigned long long block_stride, unsigned long long last_block, unsigned groups,
                 unsigned blocks, unsigned long long spans, unsigned long long items,
                 unsigned long long* __restrict__ sums) {
    const unsigned lane = threadIdx.x % 32;
    const unsigned long long warps = (unsigned long long)gridDim.x * (KV_ADLER_THREADS / 32);
    for (unsigned long long item = (unsigned long long)blockIdx.x * (KV_ADLER_THREADS / 32) + threadIdx.x / 32;
         item < items; item += warps) {
        const unsigned long long span = item % spans, run = item / spans;
        const unsigned long long g = run % groups, rec = run / groups;
        const unsigned long long len = rec + 1 == blocks ? last_block : block_stride;
        const unsigned long long lo = span * KV_ADLER_SPAN;
        if (lo >= len) continue;  // warp-uniform
        const unsigned long long hi = lo + KV_ADLER_SPAN < len ? lo + KV_ADLER_SPAN : len;
        const uint16_t* src = words + g * group_stride + rec * block_stride;
        uint32_t s = 0, ws = 0;
        unsigned long long v = lo;
        if (((size_t)(src + lo) & 15u) == 0) {
            const unsigned long long whole = lo + (hi - lo) / 8 * 8;
#pragma unroll 4
            for (unsigned long long at = lo + 8ull * lane; at < whole; at += 8ull * 32)
                kv_adler_add16(__ldcs(reinterpret_cast<const uint4*>(src + at)), (uint32_t)(2 * (at - lo)), s, ws);
            v = whole;
        }
        for (unsigned long long at = v + lane; at < hi; at += 32) kv_adler_add_word(src[at], (uint32_t)(2 * (at - lo)), s, ws);
        // The span's first byte in its record: run g starts at g * len values.
        kv_adler_warp_flush(s, ws, 2 * (g * len + lo), sums + 2 * rec);
    }
}
