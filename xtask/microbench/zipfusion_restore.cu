// The ZipFusion restore-only microbenchmark (issue 18; docs/perf/attention.md,
// "Restore-only"): the pages of a ZipFusion container, tiled to at least 1 GiB, read and
// restored by kernels/zipfusion/zipfusion_restore.cu (the fused attention's loader: every
// value rebuilt to BF16 in mma B-fragment registers and folded into a checksum, no
// attention), against the read floor kernel (kvcodec_read_floor, microbench.cuh) on the
// same bytes in the same run. Reports GB/s of compressed page bytes read and of BF16
// restored, and the checksum against the CPU's. CUDA events, 3 warm-ups, median of 21, each behind a 2 ms
// hold (microbench.cuh). A standalone program, not part of the workspace build:
//   cargo run --release -p zipfusion --example zipfusion_restore_input -- fixtures/smollm2-135m-code.safetensors code.zf
//   (prints the checksum of one copy; `zero-aware` and a head_dim may follow code.zf)
//   V=target/xtask/nvcc-venv/lib/python3*/site-packages/nvidia/cu13
//   $V/bin/nvcc -O3 -arch=sm_90 -std=c++17 -Ikernels -I$V/include xtask/microbench/zipfusion_restore.cu \
//       -L$V/lib -lcudart_static -ldl -lpthread -lrt -o zipfusion_restore
//   ./zipfusion_restore code.zf <checksum> [copies]
// (copies: how many times the pages are tiled, default enough for 1 GiB; a small count
// such as 2 for compute-sanitizer runs).
#include <cstdlib>
#include "zipfusion/zipfusion_restore.cu"
#include "microbench.cuh"

using RestoreKernel = void (*)(const uint8_t*, unsigned long long, const uint32_t*, uint32_t, uint32_t,
                               unsigned long long, uint32_t*, uint32_t*);

// The kernel, its warps and its shared memory for a variant and head_dim.
struct Restore {
    RestoreKernel kernel;
    int warps;
    size_t smem;
};

template <int D> static Restore restore_for(bool zero_aware, RestoreKernel base, RestoreKernel zero) {
    return {zero_aware ? zero : base, zf_restore_warps<D>(), zf_restore_smem<D>()};
}

static Restore restore_for(size_t d, bool z) {
    if (d == 64) return restore_for<64>(z, zipfusion_restore_sum_base_d64, zipfusion_restore_sum_zero_aware_d64);
    if (d == 128) return restore_for<128>(z, zipfusion_restore_sum_base_d128, zipfusion_restore_sum_zero_aware_d128);
    return restore_for<256>(z, zipfusion_restore_sum_base_d256, zipfusion_restore_sum_zero_aware_d256);
}

int main(int argc, char** argv) {
    if (argc < 3) { printf("usage: zipfusion_restore <container.zf> <checksum of one copy> [copies]\n"); return 2; }
    const std::vector<uint8_t> c = read_bytes(argv[1]);
    const uint32_t expected_one = (uint32_t)strtoul(argv[2], nullptr, 0);
    // Header (spec 7.1): magic "KVZF", version, variant, flags, L, H, D, reserved, T.
    if (c.size() < ZIPFUSION_HEADER_LEN || memcmp(c.data(), "KVZF", 4) != 0) { printf("not a ZipFusion container\n"); return 2; }
    const unsigned version = c[4] | c[5] << 8, variant = c[6];
    if (version != 1 || variant > 1) { printf("version %u, variant %u: not a version-1 container\n", version, variant); return 2; }
    const bool zero_aware = variant == 1;
    const size_t L = le32(c, 8), H = le32(c, 12), D = le32(c, 16), T = le64(c, 24);
    if (L == 0 || H == 0) { printf("L=%zu H=%zu: no pages\n", L, H); return 2; }
    if (D != 64 && D != 128 && D != 256) { printf("head_dim %zu: the kernel is built for 64, 128 and 256\n", D); return 2; }
    // Body (spec 7.2): per layer its pages back to back (each page's length from its last
    // entry's offset and block bytes, spec 5.1-5.2), then its BF16 tail, skipped here.
    const size_t nb = D / ZIPFUSION_BLOCK_CHANNELS, stride = (4 + nb + 7) / 8 * 8, last = (2 * H - 1) * stride;
    std::vector<uint8_t> pages;
    std::vector<uint32_t> offsets;
    size_t at = ZIPFUSION_HEADER_LEN;
    for (size_t l = 0; l < L; ++l) {
        for (size_t p = 0; p < T / ZIPFUSION_PAGE_TOKENS; ++p) {
            if (at + 2 * H * stride > c.size()) { printf("page %zu of layer %zu: truncated\n", p, l); return 2; }
            size_t len = le32(c, at + last);
            for (size_t j = 0; j < nb; ++j)
                len += c[at + last + 4 + j] == ZIPFUSION_RAW_BLOCK_BYTE ? ZIPFUSION_RAW_BLOCK_LEN : ZIPFUSION_CODED_BLOCK_LEN;
            if (at + len > c.size() || pages.size() + len > UINT32_MAX) { printf("page %zu of layer %zu: too long\n", p, l); return 2; }
            offsets.push_back((uint32_t)pages.size());
            pages.insert(pages.end(), c.begin() + at, c.begin() + at + len);
            at += len;
        }
        at += 2 * 2 * (T % ZIPFUSION_PAGE_TOKENS) * H * D;
    }
    offsets.push_back((uint32_t)pages.size());
    const size_t per_copy = offsets.size() - 1, copy_bytes = pages.size();
    if (per_copy == 0) { printf("no full pages\n"); return 2; }
    const size_t copies = argc > 3 ? strtoull(argv[3], nullptr, 0) : ((size_t)1 << 30) / copy_bytes + 1;
    if (copies == 0) { printf("copies: at least 1\n"); return 2; }
    const size_t total = copies * copy_bytes;
    const size_t values = copies * per_copy * 2 * ZIPFUSION_PAGE_TOKENS * H * D;
    printf("L=%zu H=%zu D=%zu T=%zu %s: %zu pages, %zu bytes (ratio %.4f), x%zu copies = %.3f GB of pages\n", L, H, D,
           T, zero_aware ? "zero-aware" : "base", per_copy, copy_bytes, 2.0 * values / copies / copy_bytes, copies,
           total / 1e9);

    uint8_t* d_pages;
    uint32_t *d_offsets, *d_sum, *d_status;
    CK(cudaMalloc(&d_pages, total));
    for (size_t k = 0; k < copies; ++k) CK(cudaMemcpy(d_pages + k * copy_bytes, pages.data(), copy_bytes, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_offsets, offsets.size() * 4));
    CK(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_sum, 4));
    CK(cudaMalloc(&d_status, 4));

    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const Restore r = restore_for(D, zero_aware);
    CK(cudaFuncSetAttribute(r.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)r.smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, r.kernel, r.warps * 32, r.smem));
    if (per_sm == 0) { printf("%zu bytes of shared memory per CTA do not fit an SM\n", r.smem); return 2; }
    const int grid = sms * per_sm;
    const unsigned long long items = (unsigned long long)copies * per_copy * H;
    const auto launch = [&]() {
        r.kernel<<<grid, r.warps * 32, r.smem>>>(d_pages, copy_bytes, d_offsets, (uint32_t)per_copy, (uint32_t)H, items,
                                               d_sum, d_status);
    };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    CK(cudaMemset(d_sum, 0, 4));
    CK(cudaMemset(d_status, 0, 4));
    launch();
    CK(cudaDeviceSynchronize());
    uint32_t got = 0, status = 0;
    CK(cudaMemcpy(&got, d_sum, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&status, d_status, 4, cudaMemcpyDeviceToHost));
    const uint32_t expected = (uint32_t)(expected_one * (uint64_t)copies);
    const bool ok = got == expected && status == 0;
    printf("checksum %#010x, expected %#010x, status %u: %s\n", got, expected, status, ok ? "ok" : "MISMATCH");

    const double restore_ms = median_ms(e0, e1, [&](int) { launch(); });
    const double read_ms = median_ms(e0, e1, [&](int) { read_roofline(d_pages, total, d_sum, sms); });
    print_rates("read roofline (page bytes)", read_ms, (double)total, 0);
    printf("%-34s %8.3f ms %8.1f GB/s of pages %8.1f GB/s of BF16 restored, %.1f%% of the read roofline, %d CTAs x %d warps, %zu B shared per CTA, %d stages\n",
           "zipfusion restore", restore_ms, total / (restore_ms * 1e-3) / 1e9, 2.0 * values / (restore_ms * 1e-3) / 1e9,
           100.0 * read_ms / restore_ms, grid, r.warps, r.smem, ZF_RESTORE_STAGES);
    return ok ? 0 : 1;
}
