// Kernels for GPU timing (crates/gpu/src/timing.rs), not a codec: the hold and the read
// floor.
//
// kvcodec_hold keeps its stream busy for `ns` nanoseconds of the GPU's global timer
// (one thread; the loop is also bounded by a count). A benchmark launches it, then records its start event
// and enqueues the timed operation behind it: the start event fires when the GPU gets
// there, with the operation already queued, so the time between the events is the
// GPU's and not the host's launch latency. nvbench's blocking kernel serves the same
// purpose (it waits on a host flag instead of a timer).
#include <stdint.h>

__device__ __forceinline__ uint64_t kv_global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Also at most `ns` iterations, each far longer than a nanosecond (a timer read and a
// sleep of up to 2 us: __nanosleep may return at once), so the wait ends even if the
// global timer stood still; while the timer runs, the timer ends it.
extern "C" __global__ void kvcodec_hold(unsigned long long ns) {
    const uint64_t start = kv_global_ns();
    for (uint64_t i = 0; i < ns && kv_global_ns() - start < ns; ++i) __nanosleep(1000);
}

// kvcodec_read_floor reads `n16` 16-byte words once and keeps only a test of their XOR,
// which never writes: the time of the plainest kernel that reads the same bytes, against
// which a memory-bound kernel's time is read. Each thread keeps four independent 16-byte
// streaming loads in flight (a warp's four 512-byte runs, `stride` words apart), so that
// the loads in flight, not their latency, bound it: with one load per thread a full SM
// holds only 32 KB in flight, short of what the H200's HBM needs.
extern "C" __global__ void kvcodec_read_floor(const uint4* __restrict__ in, unsigned long long n16,
                                              unsigned int* __restrict__ sink) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int x = 0;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const uint4 a = __ldcs(in + i), b = __ldcs(in + i + stride), c = __ldcs(in + i + 2 * stride),
                    d = __ldcs(in + i + 3 * stride);
        x ^= (a.x ^ a.y ^ a.z ^ a.w) ^ (b.x ^ b.y ^ b.z ^ b.w) ^ (c.x ^ c.y ^ c.z ^ c.w) ^ (d.x ^ d.y ^ d.z ^ d.w);
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(in + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x9e3779b9u) atomicAdd(sink, x);  // keeps the loads; never true on the benchmarks' data
}
