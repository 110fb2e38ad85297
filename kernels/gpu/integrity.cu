// The Adler-32 sums of records of BF16 values in device memory (crates/gpu/src/integrity.rs):
// the checksum a codec stores with flag "checksum", verified after a decode kernel or
// computed before an encode kernel, for a codec whose own kernels do not fold it in.
//
// A record is `groups` runs of values; run g of record i starts at value
// g * group_stride + i * block_stride and holds block_stride values (last_block for the
// last record), and the record's bytes are its runs in group order: ExANS's blocks in a
// cache of 2L tensors [T, H, D] (spec §3), or one contiguous run. One CTA per span of up
// to KV_ADLER_SPAN values of one run: every thread adds 16 bytes at a time (4 bytes
// when the span is not 16-byte aligned), then the CTA adds its sums, modulo 65521, to
// the record's pair of counters.
#include "../common/adler.cuh"

#define KV_ADLER_THREADS 256
#define KV_ADLER_SPAN 16384ull

extern "C" __global__ void __launch_bounds__(KV_ADLER_THREADS)
kv_adler_records(const uint16_t* __restrict__ words, unsigned long long group_stride,
                 unsigned long long block_stride, unsigned long long last_block, unsigned groups,
                 unsigned blocks, unsigned spans, unsigned long long* __restrict__ sums) {
    __shared__ unsigned long long scratch[2 * KV_ADLER_THREADS / 32];
    const unsigned span = blockIdx.x % spans;
    const unsigned long long run = blockIdx.x / spans;
    const unsigned g = (unsigned)(run % groups);
    const unsigned long long rec = run / groups;
    if (rec >= blocks) return;  // CTA-uniform
    const unsigned long long len = rec + 1 == blocks ? last_block : block_stride;
    const unsigned long long lo = (unsigned long long)span * KV_ADLER_SPAN;
    if (lo >= len) return;  // CTA-uniform
    const unsigned long long hi = lo + KV_ADLER_SPAN < len ? lo + KV_ADLER_SPAN : len;
    const uint16_t* src = words + g * group_stride + rec * block_stride;
    const unsigned long long base = (unsigned long long)g * len;  // the run's first value in its record
    unsigned long long s = 0, ws = 0;
    unsigned long long v = lo;
    if (((size_t)(src + lo) & 15u) == 0) {
        const unsigned long long whole = lo + (hi - lo) / 8 * 8;
        for (unsigned long long at = lo + 8ull * threadIdx.x; at < whole; at += 8ull * KV_ADLER_THREADS)
            kv_adler_add16(__ldcs(reinterpret_cast<const uint4*>(src + at)), 2 * (base + at), s, ws);
        v = whole;
    }
    for (unsigned long long at = v + threadIdx.x; at < hi; at += KV_ADLER_THREADS)
        kv_adler_add_word(src[at], 2 * (base + at), s, ws);
    kv_adler_cta_flush(s, ws, scratch, sums + 2 * rec);
}
