// What the standalone microbenchmarks in this folder share: error checks and the timing
// method of docs/PERF.md (CUDA events, 3 warm-ups, median of 21).
#pragma once
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

// Returns 1 from main() with the failing call's text when a CUDA call fails.
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

// Median milliseconds of 21 timed calls of f(i) (i = the call's index, for alternating
// buffers) after 3 untimed ones, each timed alone between the two events.
template <class F>
double median_ms(cudaEvent_t e0, cudaEvent_t e1, F&& f) {
    for (int i = 0; i < 3; ++i) f(i);
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
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
