// The device side of kvcodec-pool (crates/pool/src/gpu.rs): the page table's updates
// and the copies of page moves, which a decode step runs before its attention kernels,
// plus the fill and check kernels of the device replay test (a pattern unique to a
// page id and its generation, written where the page is allocated and checked where the
// CPU model says it lives).
//
// Descriptors are flat u64 (or u32) arrays, one record per entry, written by the host.
// Every arena offset is a multiple of 16 (kvcodec_pool::SLOT_ALIGN).
#include <stdint.h>

// Murmur3's 32-bit finaliser constants and three odd multipliers (Knuth's golden ratio
// and Murmur3's c1/c2), in decimal.
#define POOL_M1 2654435761u
#define POOL_M2 2246822519u
#define POOL_M3 3266489917u
#define POOL_F1 2246822507u
#define POOL_F2 3266489909u

// Word `w` of the pattern of page `id`, generation `gen`.
__device__ __forceinline__ uint32_t pool_pattern(uint64_t id, uint64_t gen, uint32_t w) {
    uint32_t x = (uint32_t)id * POOL_M1 ^ (uint32_t)(id >> 32) ^ (uint32_t)gen * POOL_M2 ^ w * POOL_M3;
    x ^= x >> 16;
    x *= POOL_F1;
    x ^= x >> 13;
    x *= POOL_F2;
    x ^= x >> 16;
    return x;
}

// table[pairs[2i]] = pairs[2i + 1] for i < n (the page table words a step changes; the
// host keeps the last word of each id, so no two pairs name one id).
extern "C" __global__ void pool_scatter(uint64_t* table, const uint64_t* pairs, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        table[pairs[2 * i]] = pairs[2 * i + 1];
    }
}

// Ids ranges[2r] ..+ ranges[2r + 1] become invalid (u64 max), for r < n: one CTA per
// range (a finished sequence's id block).
extern "C" __global__ void pool_invalidate(uint64_t* table, const uint32_t* ranges, uint32_t n) {
    for (uint32_t r = blockIdx.x; r < n; r += gridDim.x) {
        const uint64_t first = ranges[2 * r];
        for (uint32_t i = threadIdx.x; i < ranges[2 * r + 1]; i += blockDim.x) table[first + i] = ~0ull;
    }
}

// Move m (one CTA each, m < n): moves[3m + 2] bytes from arena offset moves[3m] to
// moves[3m + 1], 16 bytes a thread, the tail byte by byte. Source and destination never
// overlap (a move's destination is room no live page holds).
extern "C" __global__ void pool_move(uint8_t* arena, const uint64_t* moves, uint32_t n) {
    for (uint32_t m = blockIdx.x; m < n; m += gridDim.x) {
        const uint8_t* src = arena + moves[3 * m];
        uint8_t* dst = arena + moves[3 * m + 1];
        const uint64_t bytes = moves[3 * m + 2];
        const uint64_t vecs = bytes / 16;
        for (uint64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
            reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
        }
        for (uint64_t i = vecs * 16 + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
    }
}

// Test: page f (one CTA each, f < n) gets `bytes` bytes (a multiple of 4) of the pattern
// of (fills[3f + 1], fills[3f + 2]) at arena offset fills[3f].
extern "C" __global__ void pool_fill(uint8_t* arena, const uint64_t* fills, uint32_t n, uint32_t bytes) {
    for (uint32_t f = blockIdx.x; f < n; f += gridDim.x) {
        uint32_t* dst = reinterpret_cast<uint32_t*>(arena + fills[3 * f]);
        for (uint32_t w = threadIdx.x; w < bytes / 4; w += blockDim.x) {
            dst[w] = pool_pattern(fills[3 * f + 1], fills[3 * f + 2], w);
        }
    }
}

// Test: page c (one CTA each, c < n) must hold the first checks[4c + 3] bytes of the
// pattern of (checks[4c + 1], checks[4c + 2]) at arena offset checks[4c]. bad[0] counts
// the pages that do not; bad[1] is the lowest such c (the host sets it to u32 max).
extern "C" __global__ void pool_check(const uint8_t* arena, const uint64_t* checks, uint32_t n, uint32_t* bad) {
    __shared__ int wrong;
    for (uint32_t c = blockIdx.x; c < n; c += gridDim.x) {
        if (threadIdx.x == 0) wrong = 0;
        __syncthreads();
        const uint8_t* page = arena + checks[4 * c];
        const uint64_t id = checks[4 * c + 1], gen = checks[4 * c + 2];
        const uint32_t len = (uint32_t)checks[4 * c + 3];
        int mine = 0;
        for (uint32_t w = threadIdx.x; w < len / 4; w += blockDim.x) {
            mine |= reinterpret_cast<const uint32_t*>(page)[w] != pool_pattern(id, gen, w);
        }
        if (threadIdx.x == 0) {
            const uint32_t last = pool_pattern(id, gen, len / 4);
            for (uint32_t b = len / 4 * 4; b < len; ++b) {
                mine |= page[b] != (uint8_t)(last >> (8 * (b % 4)));
            }
        }
        if (mine) wrong = 1;
        __syncthreads();
        if (threadIdx.x == 0 && wrong) {
            atomicAdd(&bad[0], 1u);
            atomicMin(&bad[1], c);
        }
        __syncthreads();
    }
}
