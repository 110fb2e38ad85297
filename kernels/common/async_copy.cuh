// 16-byte asynchronous copies from global to shared memory (cp.async, sm_80 and later):
// a thread queues copies, commits them as a group and waits for its groups, so that many
// loads are in flight without holding registers. Used by the attention kernels' page
// staging and ZipFusion's page encoder.
#pragma once
#include <stdint.h>

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Queues a copy of 16 bytes (both addresses 16-byte aligned), bypassing L1.
__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(shared)), "l"(global));
}

// copy_async_16 with an L2 prefetch hint of the whole 128-byte line (`L2::128B`), for
// streams that read every byte of their lines (a staged row of 128 bytes or more): the
// attention kernels' page staging, as FlashInfer's paged decode does.
__device__ __forceinline__ void copy_async_16_line(void* shared, const void* global) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(shared_address(shared)), "l"(global));
}

// Closes the thread's queued copies into one group.
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until every group the thread committed has landed (its copies are then visible
// to the thread; other threads see them after a barrier).
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Waits until at most `N` of the thread's most recent committed groups are still in
// flight (the older ones have landed and are visible to the thread).
template <int N> __device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
