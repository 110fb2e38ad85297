// A kernel for GPU timing (crates/gpu/src/timing.rs), not a codec.
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
