// How close do plain SM copy kernels get to cudaMemcpy device-to-device, and what does
// SplitZip decode's access pattern (4 code bytes + 8 sign+mantissa bytes read per 16
// bytes written, per thread) reach with no decoding at all? 1 GiB buffers, CUDA events,
// 3 warm-ups, median of 21; GB/s count bytes read + written (docs/PERF.md, "SplitZip
// GPU history"). A standalone CUDA program, not part of the workspace build:
//   V=target/xtask/nvcc-venv/lib/python3*/site-packages/nvidia/cu13
//   $V/bin/nvcc -O3 -arch=sm_90 -std=c++17 -I$V/include xtask/microbench/copy_bw.cu \
//       -L$V/lib -lcudart_static -ldl -lpthread -lrt -o copy_bw
// (the nvcc venv is the one `cargo xtask kernels` installs), then run ./copy_bw there.
#include <cstdint>
#include "microbench.cuh"

__global__ void copy1(const uint4* __restrict__ s, uint4* __restrict__ d, size_t n16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) d[i] = s[i];
}
template <int U, bool CS>
__global__ void copyU(const uint4* __restrict__ s, uint4* __restrict__ d, size_t n16) {
    size_t b = (size_t)blockIdx.x * blockDim.x * U + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) v[u] = CS ? __ldcs(s + i) : s[i]; }
#pragma unroll
    for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) { if (CS) __stcs(d + i, v[u]); else d[i] = v[u]; } }
}
template <int U>
__global__ void copyPersist(const uint4* __restrict__ s, uint4* __restrict__ d, size_t n16) {
    size_t stride = (size_t)gridDim.x * blockDim.x * U;
    for (size_t b = (size_t)blockIdx.x * blockDim.x * U + threadIdx.x; b < n16; b += stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) v[u] = s[i]; }
#pragma unroll
        for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) d[i] = v[u]; }
    }
}
// decode-like: read 12 bytes (4 code bytes + 8 sf bytes) per 16 bytes written.
template <int U>
__global__ void mix(const uint32_t* __restrict__ c, const uint2* __restrict__ f, uint4* __restrict__ d, size_t n16) {
    size_t b = (size_t)blockIdx.x * blockDim.x * U + threadIdx.x;
    uint32_t cv[U]; uint2 fv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) { cv[u] = __ldcs(c + i); fv[u] = __ldcs(f + i); } }
#pragma unroll
    for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) __stcs(d + i, make_uint4(cv[u], fv[u].x, fv[u].y, cv[u] ^ fv[u].x)); }
}

int main() {
    const size_t bytes = 1ull << 30, n16 = bytes / 16;
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    uint8_t *a, *b, *c;
    CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 1, bytes)); CK(cudaMemset(b, 2, bytes)); CK(cudaMemset(c, 3, bytes));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    auto timeit = [&](const char* name, double moved, auto&& f) {
        const double m = median_ms(e0, e1, f);
        printf("%-28s %8.3f ms %8.1f GB/s (read+write)\n", name, m, moved / (m * 1e-3) / 1e9);
        return moved / (m * 1e-3) / 1e9;
    };
    double mb = 2.0 * bytes;
    timeit("cudaMemcpy d2d", mb, [&](int i) { cudaMemcpyAsync(i % 2 ? b : c, a, bytes, cudaMemcpyDeviceToDevice); });
    timeit("copy1 (1x16B/thread)", mb, [&](int i) { copy1<<<(n16 + 255) / 256, 256>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    timeit("copyU<2>", mb, [&](int i) { copyU<2, false><<<(n16 + 511) / 512, 256>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    timeit("copyU<4>", mb, [&](int i) { copyU<4, false><<<(n16 + 1023) / 1024, 256>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    timeit("copyU<4> cs", mb, [&](int i) { copyU<4, true><<<(n16 + 1023) / 1024, 256>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    timeit("copyU<8>", mb, [&](int i) { copyU<8, false><<<(n16 + 2047) / 2048, 256>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    timeit("copyU<4> 512thr", mb, [&](int i) { copyU<4, false><<<(n16 + 2047) / 2048, 512>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    for (int k : {2, 4, 8, 16})
        timeit(k == 2 ? "persist<4> 2/SM" : k == 4 ? "persist<4> 4/SM" : k == 8 ? "persist<4> 8/SM" : "persist<4> 16/SM", mb,
               [&](int i) { copyPersist<4><<<sms * k, 256>>>((uint4*)a, (uint4*)(i % 2 ? b : c), n16); });
    // the splitzip-decode-like mix: 0.75 B read per B written, two 0.5 GiB halves vs one launch
    const size_t w16 = (bytes / 16);  // 1 GiB written
    double mixb = bytes * 1.75;
    timeit("mix<4> one launch", mixb, [&](int i) { mix<4><<<(w16 + 1023) / 1024, 256>>>((uint32_t*)a, (uint2*)(a + bytes / 4), (uint4*)(i % 2 ? b : c), w16); });
    timeit("mix<4> two launches", mixb, [&](int i) {
        uint4* d = (uint4*)(i % 2 ? b : c);
        mix<4><<<(w16 / 2 + 1023) / 1024, 256>>>((uint32_t*)a, (uint2*)(a + bytes / 4), d, w16 / 2);
        mix<4><<<(w16 / 2 + 1023) / 1024, 256>>>((uint32_t*)(a + bytes / 8), (uint2*)(a + bytes / 4 + bytes / 4), d + w16 / 2, w16 / 2); });
    return 0;
}
