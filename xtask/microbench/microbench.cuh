// What the standalone microbenchmarks in this folder share: error checks, the timing
// method of docs/PERF.md (CUDA events, 3 warm-ups, median of 21, each behind the
// workspace's hold kernel) and the read roofline (the workspace's read floor kernel,
// included by its path from this folder).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../../kernels/gpu/timing.cu"

// Returns 1 from main() with the failing call's text when a CUDA call fails.
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

// Median milliseconds of 21 timed calls of f(i) (i = the call's index, for alternating
// buffers) after 3 untimed ones, each queued behind a 2 ms hold (kvcodec_hold) and timed
// alone between the two events; `before(i)`, if given, is queued ahead of the hold (an L2
// flush, say) and not timed.
template <class F, class B = void (*)(int)>
double median_ms(cudaEvent_t e0, cudaEvent_t e1, F&& f, B&& before = [](int) {}) {
    for (int i = 0; i < 3; ++i) f(i);
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
        before(i);
        kvcodec_hold<<<1, 1>>>(2000000ull);
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

// The read roofline of `bytes` (a multiple of 16) at `in`: the workspace's read floor
// kernel, launched as GpuContext::read_floor launches it.
inline void read_roofline(const void* in, size_t bytes, unsigned int* sink, int sms) {
    kvcodec_read_floor<<<4 * sms, 512>>>((const uint4*)in, bytes / 16, sink);
}

// A whole file's bytes (empty if it cannot be read).
inline std::vector<uint8_t> read_bytes(const char* path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Little-endian fields of a container (the caller checks `at` against the length).
inline uint32_t le32(const std::vector<uint8_t>& b, size_t at) { uint32_t v; memcpy(&v, &b[at], 4); return v; }
inline uint64_t le64(const std::vector<uint8_t>& b, size_t at) { uint64_t v; memcpy(&v, &b[at], 8); return v; }
