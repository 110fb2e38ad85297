// Decode attention over a paged BF16 KV cache: the BF16 twin of the fused kernels
// (crates/attention/src/gpu.rs; the design notes are in docs/formats/attention.md).
//
// Pages hold PAGE_TOKENS tokens in FlashInfer's NHD order, [num_pages, PAGE_TOKENS,
// kv_heads, head_dim] BF16, for K and V alike; a block table maps each sequence's logical
// page to a physical page. The kernel body (decode.cuh) is shared with the fused kernels;
// this twin's loader stages a page's K and V rows into padded shared-memory rows and reads
// the tensor-core fragments with ldmatrix (transposed for V).
#include "decode.cuh"

// At head_dim 64 the twin is compiled for 5 CTAs per SM, as ZipFusion's fused kernels are:
// the split plan takes the twin's occupancy for every kernel of the body, and left to
// itself ptxas gives the twin 112 registers (4 CTAs).
#define TWIN_BOUNDS_D64 __launch_bounds__(threads<64>(), 5)
#define TWIN_BOUNDS_D128 __launch_bounds__(threads<128>())
#define TWIN_BOUNDS_D256 __launch_bounds__(threads<256>())

#define KV_ATTENTION_DECODE_BF16(D)                                                                          \
    extern "C" __global__ void TWIN_BOUNDS_D##D attention_decode_bf16_d##D(                   \
        const uint16_t* q, const uint16_t* k_pages, const uint16_t* v_pages, const uint32_t* block_table,    \
        const uint32_t* context_lens, uint16_t* out, float* lse, float* partial, uint32_t* tickets,          \
        uint32_t* status, uint32_t num_pages, uint32_t max_pages, uint32_t kv_heads, uint32_t group,          \
        float scale_log2) {                                                                                   \
        const Bf16Loader<D> loader{k_pages, v_pages, num_pages, (size_t)kv_heads * D};                          \
        decode_paged<D>(loader, q, block_table, context_lens, out, lse, partial, tickets, status, max_pages,  \
                        kv_heads, group, scale_log2);                                        \
    }

KV_ATTENTION_DECODE_BF16(64)
KV_ATTENTION_DECODE_BF16(128)
KV_ATTENTION_DECODE_BF16(256)

// The twin over a pool-managed cache (pooled.cuh): block tables of page ids, read through
// the pool's page table into its arena; every page BF16.
#include "pooled.cuh"

#define KV_ATTENTION_DECODE_BF16_POOLED(D)                                                                   \
    extern "C" __global__ void TWIN_BOUNDS_D##D attention_decode_bf16_pooled_d##D(            \
        const uint16_t* q, const uint8_t* arena, unsigned long long arena_bytes,                             \
        const unsigned long long* page_table, uint32_t table_len, const uint32_t* block_table,               \
        const uint32_t* context_lens, uint16_t* out, float* lse, float* partial, uint32_t* tickets,          \
        uint32_t* status, uint32_t max_pages, uint32_t kv_heads, uint32_t group, float scale_log2) {         \
        const Bf16PoolLoader<D> loader{{arena, arena_bytes, page_table, table_len}, kv_heads};               \
        decode_paged<D>(loader, q, block_table, context_lens, out, lse, partial, tickets, status, max_pages,  \
                        kv_heads, group, scale_log2);                                                        \
    }

KV_ATTENTION_DECODE_BF16_POOLED(64)
KV_ATTENTION_DECODE_BF16_POOLED(128)
KV_ATTENTION_DECODE_BF16_POOLED(256)
