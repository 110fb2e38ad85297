// SplitZip decode's memory pattern (4 code bytes + 8 sign+mantissa bytes read per 16
// bytes written) under different payload layouts, with no decoding: the format's two
// sections, the codes and sign+mantissa bytes interleaved per chunk of 256 / 1024 / 8192
// values, and a tile permuted so that each thread reads three 16-byte words; a plain copy
// with the same 0.75 read/write ratio for scale. 1 GiB written, two input copies
// alternated, CUDA events, 3 warm-ups, median of 21 (microbench.cuh); GB/s of traffic
// read + written and of output ("written" = the decode GB/s the pattern would give).
// Results: docs/PERF.md, "SplitZip GPU history". A standalone program, not part of the
// workspace build:
//   V=target/xtask/nvcc-venv/lib/python3*/site-packages/nvidia/cu13
//   $V/bin/nvcc -O3 -arch=sm_90 -std=c++17 -I$V/include xtask/microbench/layout_bw.cu \
//       -L$V/lib -lcudart_static -ldl -lpthread -lrt -o layout_bw
#include <cstdint>
#include "microbench.cuh"

__device__ __forceinline__ uint32_t ldcs32(const void* p) { uint32_t v; asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(v) : "l"(p)); return v; }
__device__ __forceinline__ uint2 ldcs64(const void* p) { uint2 v; asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p)); return v; }
__device__ __forceinline__ uint4 ldcs128(const void* p) { uint4 v; asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }

#define TILE 8192
#define THREADS 256
// The format's layout: a codes section (n / 2 bytes), then a sign+mantissa section (n).
__global__ void sections(const uint8_t* __restrict__ in, uint4* __restrict__ out, size_t n) {
    const uint8_t* codes = in; const uint8_t* sf = in + n / 2;
    const size_t base = (size_t)blockIdx.x * TILE;
    uint32_t c[4]; uint2 f[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) { size_t v0 = base + (u * THREADS + threadIdx.x) * 8; c[u] = ldcs32(codes + v0 / 2); f[u] = ldcs64(sf + v0); }
#pragma unroll
    for (int u = 0; u < 4; ++u) { size_t v0 = base + (u * THREADS + threadIdx.x) * 8; __stcs(out + v0 / 8, make_uint4(c[u], f[u].x, f[u].y, c[u] ^ f[u].x)); }
}
// Per chunk of C values: its C / 2 code bytes, then its C sign+mantissa bytes.
template <int C>
__global__ void chunked(const uint8_t* __restrict__ in, uint4* __restrict__ out, size_t n) {
    const size_t base = (size_t)blockIdx.x * TILE;
    uint32_t c[4]; uint2 f[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const size_t v0 = base + (u * THREADS + threadIdx.x) * 8;
        const size_t chunk = v0 / C, j = v0 % C;
        const uint8_t* cb = in + chunk * (C * 3 / 2);
        c[u] = ldcs32(cb + j / 2); f[u] = ldcs64(cb + C / 2 + j);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) { size_t v0 = base + (u * THREADS + threadIdx.x) * 8; __stcs(out + v0 / 8, make_uint4(c[u], f[u].x, f[u].y, c[u] ^ f[u].x)); }
}
// A tile's 12 KiB permuted into the order the threads read it: 768 16-byte words, thread
// t reads words t, t + 256 and t + 512.
__global__ void swizzled(const uint8_t* __restrict__ in, uint4* __restrict__ out, size_t n) {
    const size_t base = (size_t)blockIdx.x * TILE;
    const uint4* t4 = (const uint4*)(in + (size_t)blockIdx.x * (TILE * 3 / 2));
    const uint4 a = ldcs128(t4 + threadIdx.x), b = ldcs128(t4 + 256 + threadIdx.x), c = ldcs128(t4 + 512 + threadIdx.x);
    const uint32_t w[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) { size_t v0 = base + (u * THREADS + threadIdx.x) * 8; __stcs(out + v0 / 8, make_uint4(w[u], w[4 + 2 * u], w[5 + 2 * u], w[u] ^ w[3 * u])); }
}
// A plain copy with the same traffic: three 16-byte loads and four 16-byte stores per
// thread, the stored words not derived from the loaded ones beyond reuse.
__global__ void copy34(const uint8_t* __restrict__ in, uint4* __restrict__ out, size_t n) {
    const size_t base = (size_t)blockIdx.x * TILE;
    const uint4* t4 = (const uint4*)(in + (size_t)blockIdx.x * (TILE * 3 / 2));
    uint4 r[3];
#pragma unroll
    for (int k = 0; k < 3; ++k) r[k] = ldcs128(t4 + k * 256 + threadIdx.x);
#pragma unroll
    for (int u = 0; u < 4; ++u) { size_t v0 = base + (u * THREADS + threadIdx.x) * 8; __stcs(out + v0 / 8, r[u % 3]); }
}

int main() {
    const size_t out_bytes = 1ull << 30, n = out_bytes / 2, tiles = n / TILE;
    uint8_t *in[2], *o1, *o2;
    for (int i = 0; i < 2; ++i) { CK(cudaMalloc(&in[i], out_bytes)); CK(cudaMemset(in[i], 1 + i, out_bytes)); }
    CK(cudaMalloc(&o1, out_bytes)); CK(cudaMalloc(&o2, out_bytes));
    CK(cudaMemset(o1, 2, out_bytes)); CK(cudaMemset(o2, 3, out_bytes));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    double moved = 2.0 * out_bytes;
    auto timeit = [&](const char* name, auto&& f) { print_rates(name, median_ms(e0, e1, f), moved, out_bytes); };
    auto dst = [&](int i) { return (uint4*)(i % 2 ? o1 : o2); };
    for (int rep = 0; rep < 2; ++rep) {
        moved = 2.0 * out_bytes;
        timeit("cudaMemcpy d2d (1 GiB)", [&](int i) { cudaMemcpyAsync(dst(i), in[i % 2], out_bytes, cudaMemcpyDeviceToDevice); });
        moved = 1.75 * out_bytes;
        timeit("sections (now)", [&](int i) { sections<<<tiles, THREADS>>>(in[i % 2], dst(i), n); });
        timeit("chunked 256", [&](int i) { chunked<256><<<tiles, THREADS>>>(in[i % 2], dst(i), n); });
        timeit("chunked 1024", [&](int i) { chunked<1024><<<tiles, THREADS>>>(in[i % 2], dst(i), n); });
        timeit("chunked 8192", [&](int i) { chunked<8192><<<tiles, THREADS>>>(in[i % 2], dst(i), n); });
        timeit("swizzled 3x16B", [&](int i) { swizzled<<<tiles, THREADS>>>(in[i % 2], dst(i), n); });
        timeit("copy34 3x16B", [&](int i) { copy34<<<tiles, THREADS>>>(in[i % 2], dst(i), n); });
    }
    return 0;
}
