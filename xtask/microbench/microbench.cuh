// What the standalone microbenchmarks in this folder share: error checks, the timing
// method of docs/PERF.md (CUDA events, 3 warm-ups, median of 21, each behind a hold
// kernel) and the read roofline of the restore benchmarks.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

// Returns 1 from main() with the failing call's text when a CUDA call fails.
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

// Holds the stream for `ns` nanoseconds of the GPU's global timer: a timed call queued
// behind it starts as soon as it ends, so the host's launch latency is not timed.
__global__ void microbench_hold(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    while (now - start < ns);
}

// Median milliseconds of 21 timed calls of f(i) (i = the call's index, for alternating
// buffers) after 3 untimed ones, each queued behind a 2 ms hold and timed alone between
// the two events.
// `before(i)`, if given, is queued ahead of the hold (an L2 flush, say) and not timed.
template <class F, class B = void (*)(int)>
double median_ms(cudaEvent_t e0, cudaEvent_t e1, F&& f, B&& before = [](int) {}) {
    for (int i = 0; i < 3; ++i) f(i);
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
        before(i);
        microbench_hold<<<1, 1>>>(2000000ull);
        cudaEventRecord(e0);
        f(i);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// Prints one result line: the median time, GB/s of traffic (`moved` bytes read + written
// per call) and GB/s written (`written` bytes per call), and the last CUDA error if any.
inline void print_rates(const char* name, double ms, double moved, double written) {
    const cudaError_t err = cudaGetLastError();
    printf("%-34s %8.3f ms %8.1f GB/s traffic %8.1f GB/s written%s%s\n", name, ms, moved / (ms * 1e-3) / 1e9,
           written / (ms * 1e-3) / 1e9, err == cudaSuccess ? "" : "  ", err == cudaSuccess ? "" : cudaGetErrorString(err));
}

// The read roofline: every 16-byte word of `n16` read once and summed (launch a few CTAs
// per SM; the restore benchmarks time it on the same bytes they restore).
__global__ void read_sum(const uint4* __restrict__ in, size_t n16, uint32_t* out) {
    uint32_t s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(in + i);
        s += v.x ^ v.y ^ v.z ^ v.w;
    }
    if (s == 0x9e3779b9u) atomicAdd(out, s);  // keeps the loads; never true in practice
}

// A whole file's bytes (empty if it cannot be read).
inline std::vector<uint8_t> read_bytes(const char* path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Little-endian fields of a container (the caller checks `at` against the length).
inline uint32_t le32(const std::vector<uint8_t>& b, size_t at) { uint32_t v; memcpy(&v, &b[at], 4); return v; }
inline uint64_t le64(const std::vector<uint8_t>& b, size_t at) { uint64_t v; memcpy(&v, &b[at], 8); return v; }
