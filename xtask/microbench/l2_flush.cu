// How the L2 flush before a timed run changes a short read-bound kernel: a read of
// `size` bytes (the read roofline, microbench.cuh) timed after each way of emptying the
// L2 of its data: a 512 MiB memset (what bench-attention and peers.py do: it leaves the
// L2 full of dirty lines, which the timed kernel's misses must write back to HBM), a
// 512 MiB read with ordinary loads (clean lines, dropped for free), or nothing (the same
// buffer read again; the read's evict-first loads leave little of it in the L2). Sizes
// are decode attention's KV bytes at batch 1 (Llama-3-8B shape, 4K .. 128K tokens: 16.8
// .. 537 MB). CUDA events, median of 21 after 3 warm-ups, each behind a 2 ms hold.
//   V=target/xtask/nvcc-venv/lib/python3*/site-packages/nvidia/cu13
//   $V/bin/nvcc -O3 -arch=sm_90 -std=c++17 -Ikernels -I$V/include xtask/microbench/l2_flush.cu \
//       -L$V/lib -lcudart_static -ldl -lpthread -lrt -o l2_flush && ./l2_flush
#include "microbench.cuh"

// The read flush: every 16-byte word read with an ordinary L2 policy (the read floor's
// streaming loads are marked evict-first, and would evict each other before the data).
__global__ void read_flush(const uint4* __restrict__ in, size_t n16, uint32_t* out) {
    uint32_t s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcg(in + i);
        s += v.x ^ v.y ^ v.z ^ v.w;
    }
    if (s == 0x9e3779b9u) atomicAdd(out, s);  // keeps the loads; never true in practice
}

int main() {
    const size_t flush_bytes = (size_t)512 << 20, max_bytes = (size_t)537 << 20;
    uint8_t *flush, *data;
    uint32_t* sink;
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaMalloc(&data, max_bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(data, 1, max_bytes));
    CK(cudaMemset(flush, 0, flush_bytes));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const auto read = [&](const uint8_t* p, size_t n) { read_roofline(p, n, sink, sms); };
    printf("%10s %14s %14s %14s   (us; GB/s)\n", "MB", "memset flush", "read flush", "no flush");
    for (const double mb : {16.8, 33.6, 67.1, 134.2, 268.4, 536.9}) {
        const size_t n = (size_t)(mb * 1e6) / 16 * 16;
        const auto run = [&](int) { read(data, n); };
        const double a = median_ms(e0, e1, run, [&](int) { cudaMemsetAsync(flush, 0, flush_bytes); });
        const double b = median_ms(e0, e1, run, [&](int) {
            read_flush<<<sms * 8, 512>>>((const uint4*)flush, flush_bytes / 16, sink);
        });
        const double c = median_ms(e0, e1, run);
        printf("%10.1f %7.1f %6.0f %7.1f %6.0f %7.1f %6.0f\n", mb, a * 1e3, n / (a * 1e6), b * 1e3, n / (b * 1e6),
               c * 1e3, n / (c * 1e6));
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) { printf("%s\n", cudaGetErrorString(err)); return 1; }
    return 0;
}
