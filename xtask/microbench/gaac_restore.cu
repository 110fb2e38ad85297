// The GAAC restore-only microbenchmark (docs/formats/gaac.md §3.7, fused-attention notes
// §4.9): the slots of a GAAC container, tiled to at least 1 GiB, restored by
// kernels/gaac/gaac_restore.cu (every value rebuilt to BF16 in registers in fragment
// order and folded into a checksum, no attention), against the read floor kernel
// (kvcodec_read_floor, microbench.cuh) on the same bytes in the same run. Reports GB/s of
// slot bytes read and of BF16 restored, and the checksum against the CPU reference's. CUDA
// events, 3 warm-ups, median of 21, each behind a 2 ms hold (microbench.cuh). Results:
// docs/PERF.md, "GAAC" (the versions, against an older roofline kernel) and "the
// restore-only kernels" (the current one). A standalone program, not part of the workspace
// build:
//   cargo run --release -p gaac --example restore_input -- fixtures/smollm2-135m-code.safetensors code.gaac
//   (prints the checksum of one copy)
//   V=target/xtask/nvcc-venv/lib/python3*/site-packages/nvidia/cu13
//   $V/bin/nvcc -O3 -arch=sm_90 -std=c++17 -Ikernels -I$V/include xtask/microbench/gaac_restore.cu \
//       -L$V/lib -lcudart_static -ldl -lpthread -lrt -o gaac_restore
//   ./gaac_restore code.gaac <checksum>
#include <cstdlib>
#include "gaac/gaac_restore.cu"
#include "microbench.cuh"

static size_t align16(size_t x) { return (x + 15) / 16 * 16; }

int main(int argc, char** argv) {
    if (argc < 3) { printf("usage: gaac_restore <container.gaac> <checksum of one copy>\n"); return 2; }
    const std::vector<uint8_t> c = read_bytes(argv[1]);
    const uint32_t expected_one = (uint32_t)strtoul(argv[2], nullptr, 0);
    if (c.size() < GAAC_HEADER_LEN || le32(c, 0) != GAAC_MAGIC) { printf("not a GAAC container\n"); return 2; }
    const size_t L = le32(c, 8), H = le32(c, 12), D = le32(c, 16), C = le32(c, 20), T = le64(c, 24);
    if (D != 64 && D != 128) { printf("head_dim %zu: the kernel is built for 64 and 128\n", D); return 2; }
    // Sections (spec §5.2).
    const size_t per_head = T / GAAC_BLOCK_TOKENS, B = 2 * L * H * per_head;
    const size_t statuses_at = align16(GAAC_HEADER_LEN + 2 * L * H * D), slots_at = align16(statuses_at + B);
    const size_t overflow_at = slots_at + B * C;
    std::vector<int64_t> raw_index(B, -1);
    size_t raw = 0;
    for (size_t i = 0; i < B; ++i) if (c[statuses_at + i] == GAAC_STATUS_RAW) raw_index[i] = (int64_t)raw++;
    const size_t slot_bytes = B * C, copies = ((size_t)1 << 30) / slot_bytes + 1, total = copies * slot_bytes;
    const size_t values = copies * B * GAAC_BLOCK_TOKENS * D;
    printf("L=%zu H=%zu D=%zu T=%zu: %zu blocks of %zu-byte slots (%zu raw), x%zu copies = %.3f GB of slots\n", L, H, D,
           T, B, C, raw, copies, total / 1e9);

    uint8_t *d_slots, *d_status, *d_overflow, *d_bases;
    int64_t* d_raw;
    uint32_t* d_sum;
    CK(cudaMalloc(&d_slots, total));
    for (size_t k = 0; k < copies; ++k) CK(cudaMemcpy(d_slots + k * slot_bytes, &c[slots_at], slot_bytes, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_status, B));
    CK(cudaMemcpy(d_status, &c[statuses_at], B, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_raw, B * sizeof(int64_t)));
    CK(cudaMemcpy(d_raw, raw_index.data(), B * sizeof(int64_t), cudaMemcpyHostToDevice));
    const size_t overflow_len = raw * 2 * GAAC_BLOCK_TOKENS * D;
    CK(cudaMalloc(&d_overflow, overflow_len + 16));
    if (overflow_len) CK(cudaMemcpy(d_overflow, &c[overflow_at], overflow_len, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_bases, 2 * L * H * D));
    CK(cudaMemcpy(d_bases, &c[GAAC_HEADER_LEN], 2 * L * H * D, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_sum, 4));

    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    auto restore = D == 64 ? gaac_restore_sum_d64 : gaac_restore_sum_d128;
    // Dynamic shared memory: each warp's addend image, bases and slot ring (the kernel's
    // gaac_restore_warp_bytes).
    const size_t smem = GAAC_RESTORE_WARPS * gaac_restore_warp_bytes((int)D, C);
    CK(cudaFuncSetAttribute(restore, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, restore, GAAC_RESTORE_WARPS * 32, smem));
    if (per_sm == 0) { printf("%zu bytes of shared memory per CTA do not fit an SM\n", smem); return 2; }
    const int grid = sms * per_sm;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    CK(cudaMemset(d_sum, 0, 4));
    restore<<<grid, GAAC_RESTORE_WARPS * 32, smem>>>(d_slots, C, copies * B, B, (int)per_head, (int)H, d_status, d_raw,
                                               d_overflow, d_bases, d_sum);
    CK(cudaDeviceSynchronize());
    uint32_t got = 0;
    CK(cudaMemcpy(&got, d_sum, 4, cudaMemcpyDeviceToHost));
    const uint32_t expected = (uint32_t)(expected_one * (uint64_t)copies);
    printf("checksum %#010x, expected %#010x: %s\n", got, expected, got == expected ? "ok" : "MISMATCH");

    const double restore_ms = median_ms(e0, e1, [&](int) {
        restore<<<grid, GAAC_RESTORE_WARPS * 32, smem>>>(d_slots, C, copies * B, B, (int)per_head, (int)H, d_status, d_raw,
                                                   d_overflow, d_bases, d_sum);
    });
    const double read_ms = median_ms(e0, e1, [&](int) { read_roofline(d_slots, total, d_sum, sms); });
    print_rates("read roofline (slot bytes)", read_ms, (double)total, 0);
    printf("%-34s %8.3f ms %8.1f GB/s of slots %8.1f GB/s of BF16 restored, %.1f%% of the read roofline, %d CTAs x %d warps, %zu B shared per CTA, %d stages\n",
           "gaac restore", restore_ms, total / (restore_ms * 1e-3) / 1e9, 2.0 * values / (restore_ms * 1e-3) / 1e9,
           100.0 * read_ms / restore_ms, grid, GAAC_RESTORE_WARPS, smem, GAAC_RESTORE_STAGES);
    return got == expected ? 0 : 1;
}
