// SplitZip decode's memory pattern (4 code bytes + 8 sign+mantissa bytes read per 16
// bytes written) with no decoding, fed in different ways: per-thread loads as the
// decoder does now (with and without L2 prefetch-size and streaming hints, 4 or 8 groups
// per thread), and sm_90 bulk copies (cp.async.bulk, the TMA's 1-D form) of whole tiles
// into shared memory, with per-thread or bulk stores. 1 GiB written, 0.75 GiB read,
// CUDA events, 3 warm-ups, median of 21; GB/s count bytes read + written, and "written"
// is the decode GB/s the pattern would give (docs/PERF.md, "SplitZip GPU history"). The
// "decode" is fake (no codebook, no escapes): this bounds the memory side only.
// A standalone program, not part of the workspace build:
//   V=target/xtask/nvcc-venv/lib/python3*/site-packages/nvidia/cu13
//   $V/bin/nvcc -O3 -arch=sm_90 -std=c++17 -I$V/include xtask/microbench/bulk_bw.cu \
//       -L$V/lib -lcudart_static -ldl -lpthread -lrt -o bulk_bw
#include <cstdint>
#include "microbench.cuh"

enum Hint { kCs, k256, kCs256, kPlain };

template <Hint H> __device__ __forceinline__ uint32_t ld32(const uint32_t* p) {
    uint32_t v;
    if (H == kCs) asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(v) : "l"(p));
    else if (H == k256) asm volatile("ld.global.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    else if (H == kCs256) asm volatile("ld.global.cs.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    else v = *p;
    return v;
}
template <Hint H> __device__ __forceinline__ uint2 ld64(const uint2* p) {
    uint2 v;
    if (H == kCs) asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else if (H == k256) asm volatile("ld.global.L2::256B.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else if (H == kCs256) asm volatile("ld.global.cs.L2::256B.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    else v = *p;
    return v;
}

// The decoder's pattern: U groups per thread, strided by the block, loads first.
template <int U, Hint H>
__global__ void mix(const uint32_t* __restrict__ c, const uint2* __restrict__ f, uint4* __restrict__ d, size_t n16) {
    size_t b = (size_t)blockIdx.x * blockDim.x * U + threadIdx.x;
    uint32_t cv[U]; uint2 fv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) { cv[u] = ld32<H>(c + i); fv[u] = ld64<H>(f + i); } }
#pragma unroll
    for (int u = 0; u < U; ++u) { size_t i = b + u * blockDim.x; if (i < n16) __stcs(d + i, make_uint4(cv[u], fv[u].x, fv[u].y, cv[u] ^ fv[u].x)); }
}

// ---- sm_90 bulk copies ----
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_u32(src)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

#define TILE 8192  // values: codes 4 KiB, sign+mantissa 8 KiB, output 16 KiB
#define THREADS 256

// Persistent CTAs; S stages of (codes, sign+mantissa) per CTA, refilled by thread 0 as
// soon as every thread is done with a stage. BULK_OUT: the output tile is assembled in
// shared memory and written by one bulk store (S output stages too).
template <int S, bool BULK_OUT>
__global__ void __launch_bounds__(THREADS) bulk(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ sf,
                                                 uint4* __restrict__ out, size_t tiles) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t bars[S];
    uint8_t* in_stage = smem;                            // S x 12 KiB
    uint4* out_stage = (uint4*)(smem + S * (TILE * 3 / 2));  // S x 16 KiB (BULK_OUT)
    const uint32_t tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < S; ++s) mbar_init(&bars[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](size_t tile, int s) {
        uint8_t* st = in_stage + s * (TILE * 3 / 2);
        mbar_expect_tx(&bars[s], TILE * 3 / 2);
        bulk_load(st, codes + tile * (TILE / 2), TILE / 2, &bars[s]);
        bulk_load(st + TILE / 2, sf + tile * TILE, TILE, &bars[s]);
    };
    if (tid == 0)
        for (int s = 0; s < S; ++s) {
            const size_t tile = blockIdx.x + (size_t)s * gridDim.x;
            if (tile < tiles) issue(tile, s);
        }
    uint32_t k = 0;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++k) {
        const int s = k % S;
        mbar_wait(&bars[s], (k / S) & 1);
        const uint8_t* st = in_stage + s * (TILE * 3 / 2);
        const uint32_t* c = (const uint32_t*)st;
        const uint2* f = (const uint2*)(st + TILE / 2);
        if (BULK_OUT) {
            if (tid == 0) bulk_wait_read<S - 1>();  // the stage's previous store has read its smem
            __syncthreads();
        }
#pragma unroll
        for (int u = 0; u < TILE / 8 / THREADS; ++u) {
            const uint32_t i = u * THREADS + tid;
            const uint32_t cv = c[i];
            const uint2 fv = f[i];
            const uint4 v = make_uint4(cv, fv.x, fv.y, cv ^ fv.x);
            if (BULK_OUT) out_stage[s * (TILE / 8) + i] = v;
            else __stcs(out + tile * (TILE / 8) + i, v);
        }
        if (BULK_OUT) fence_proxy_async();
        __syncthreads();  // every thread is done with the input stage (and wrote the output one)
        if (tid == 0) {
            if (BULK_OUT) {
                bulk_store(out + tile * (TILE / 8), out_stage + s * (TILE / 8), TILE * 2);
                bulk_commit();
            }
            const size_t next = tile + (size_t)S * gridDim.x;
            if (next < tiles) issue(next, s);
        }
    }
    if (BULK_OUT && tid == 0) bulk_wait_read<0>();
}

int main() {
    const size_t out_bytes = 1ull << 30, n16 = out_bytes / 16, tiles = out_bytes / 2 / TILE;
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    uint8_t *in, *o1, *o2;
    CK(cudaMalloc(&in, out_bytes)); CK(cudaMalloc(&o1, out_bytes)); CK(cudaMalloc(&o2, out_bytes));
    CK(cudaMemset(in, 1, out_bytes)); CK(cudaMemset(o1, 2, out_bytes)); CK(cudaMemset(o2, 3, out_bytes));
    const uint8_t* codes = in;                  // 0.25 GiB
    const uint8_t* sf = in + out_bytes / 4;     // 0.5 GiB
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    double moved = 2.0 * out_bytes;  // the copy below; 1.75 x for every pattern after it
    auto timeit = [&](const char* name, auto&& f) { print_rates(name, median_ms(e0, e1, f), moved, out_bytes); };
    auto dst = [&](int i) { return (uint4*)(i % 2 ? o1 : o2); };
    timeit("cudaMemcpy d2d (1 GiB, for scale)", [&](int i) { cudaMemcpyAsync(dst(i), in, out_bytes, cudaMemcpyDeviceToDevice); });
    moved = 1.75 * out_bytes;
    const uint32_t* c32 = (const uint32_t*)codes;
    const uint2* f64 = (const uint2*)sf;
    timeit("mix<4> cs (the decoder now)", [&](int i) { mix<4, kCs><<<(n16 + 1023) / 1024, 256>>>(c32, f64, dst(i), n16); });
    timeit("mix<4> L2::256B", [&](int i) { mix<4, k256><<<(n16 + 1023) / 1024, 256>>>(c32, f64, dst(i), n16); });
    timeit("mix<4> cs L2::256B", [&](int i) { mix<4, kCs256><<<(n16 + 1023) / 1024, 256>>>(c32, f64, dst(i), n16); });
    timeit("mix<4> plain loads", [&](int i) { mix<4, kPlain><<<(n16 + 1023) / 1024, 256>>>(c32, f64, dst(i), n16); });
    timeit("mix<8> cs", [&](int i) { mix<8, kCs><<<(n16 + 2047) / 2048, 256>>>(c32, f64, dst(i), n16); });
    timeit("mix<8> cs L2::256B", [&](int i) { mix<8, kCs256><<<(n16 + 2047) / 2048, 256>>>(c32, f64, dst(i), n16); });
    for (int per_sm : {2, 3, 4, 6}) {
        const size_t smem2 = 2 * (TILE * 3 / 2), smem3 = 3 * (TILE * 3 / 2);
        CK(cudaFuncSetAttribute(bulk<2, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem2));
        CK(cudaFuncSetAttribute(bulk<3, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem3));
        char name[64];
        snprintf(name, sizeof name, "bulk in, S=2, %d CTAs/SM", per_sm);
        timeit(name, [&](int i) { bulk<2, false><<<sms * per_sm, THREADS, smem2>>>(codes, sf, dst(i), tiles); });
        snprintf(name, sizeof name, "bulk in, S=3, %d CTAs/SM", per_sm);
        timeit(name, [&](int i) { bulk<3, false><<<sms * per_sm, THREADS, smem3>>>(codes, sf, dst(i), tiles); });
    }
    for (int per_sm : {2, 3, 4}) {
        const size_t smem2 = 2 * (TILE * 3 / 2 + TILE * 2);
        CK(cudaFuncSetAttribute(bulk<2, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem2));
        char name[64];
        snprintf(name, sizeof name, "bulk in+out, S=2, %d CTAs/SM", per_sm);
        timeit(name, [&](int i) { bulk<2, true><<<sms * per_sm, THREADS, smem2>>>(codes, sf, dst(i), tiles); });
    }
    return 0;
}
