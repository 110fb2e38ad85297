// ZipFusion GPU page compression and page decode, byte-identical to crates/zipfusion (the
// CPU reference). Format: docs/formats/zipfusion.md (blocks spec 2-4, pages spec 5, the
// checks of spec 6, the container spec 7).
//
// Work units: one warp per block of 16 tokens x 32 channels (512 values, 1 KiB of BF16);
// one CTA of ZIPFUSION_THREADS threads per page, whose warps take the page's blocks in
// turn. A page's metadata (the byte per block and each entry's first-block offset) is
// computed per page in shared memory: block positions are prefix sums of 768 (coded) and
// 1024 (raw) over the page's metadata bytes, so a page needs no other page's state; only
// a page's place in a whole-cache container depends on the earlier pages' lengths (a
// decoupled look-back in the one-pass encoder, a one-CTA scan in the two-pass one).
//
// Every global access of a block body is a 16-byte vector: a warp loads or stores its
// block's 16 rows of 64 bytes as 64 uint4, and moves values between row order and the
// tensor-core fragment order (spec 3) through a padded tile in shared memory.
#include "../common/adler.cuh"
#include "../common/crc32c.cuh"
#include "zipfusion_format.gen.cuh"

#define ZF_WARPS (ZIPFUSION_THREADS / 32)

// Where a run of pages lies in a buffer of BF16 words: page i's K starts at
// (i / group_pages) * group_stride + (i % group_pages) * per_kind and its V kind_stride
// values later; each kind is [16, H, D] token-major. A cache in layer-major order has
// group_pages = T / 16 per layer; a run of dense pages has group_pages = 1.
// Mirrors zipfusion::gpu::PagesArg field for field.
struct ZfPages {
    unsigned long long per_kind;
    unsigned long long group_pages;
    unsigned long long group_stride;
    unsigned long long kind_stride;
    unsigned heads;
    unsigned head_dim;
    unsigned blocks_per_entry;
    unsigned entry_stride;
    unsigned metadata_len;
    unsigned page_blocks;
    unsigned variant;  // 0 base, 1 zero-aware (spec 2.2)
    unsigned pad;
};

// The 48 header bytes of a container, as the host builds them (spec 7.1).
struct ZfHeader {
    uint4 bytes[3];
};

__device__ __forceinline__ unsigned long long zf_page_words(const ZfPages& g, unsigned long long page) {
    return (page / g.group_pages) * g.group_stride + (page % g.group_pages) * g.per_kind;
}

// The first word of block j of (head, kind) of the page whose K starts at `page_words`.
__device__ __forceinline__ unsigned long long zf_block_words(const ZfPages& g, unsigned long long page_words,
                                                             unsigned entry, unsigned j) {
    const unsigned head = entry >> 1, kind = entry & 1;
    return page_words + kind * g.kind_stride + (unsigned long long)head * g.head_dim +
           (unsigned long long)j * ZIPFUSION_BLOCK_CHANNELS;
}

// Value `v` (0..16) of lane `lane` as its (token, channel) in the block: the
// mma.m16n8k16 B fragment layout (spec 3.2, 3.3; zipfusion::format::fragment_coords).
__device__ __forceinline__ unsigned zf_tile_index(unsigned kind, unsigned lane, unsigned v) {
    const unsigned f = v >> 2, i = v & 3;
    const unsigned k = 2 * (lane & 3) + (i & 1) + 8 * (i >> 1);
    const unsigned n = lane >> 2;
    const unsigned token = kind == 0 ? 8 * (f & 1) + n : k;
    const unsigned channel = kind == 0 ? 16 * (f >> 1) + k : 8 * f + n;
    return token * ZIPFUSION_TILE_STRIDE + channel;
}

// A lane's two uint4 of a block's rows: unit u = lane + 32 s is row u / 4, bytes
// 16 (u % 4).. of the row's 64.
__device__ __forceinline__ unsigned long long zf_row_word(const ZfPages& g, unsigned u) {
    return (unsigned long long)(u >> 2) * g.heads * g.head_dim + 8 * (u & 3);
}

// Loads a block's rows into the warp's tile (row stride ZIPFUSION_TILE_STRIDE words,
// which spreads a fragment-order gather over the banks) and returns the lane's two
// uint4 for the classification.
__device__ __forceinline__ void zf_load_block(const unsigned short* __restrict__ words, const ZfPages& g,
                                              unsigned long long at, unsigned short* tile, uint4 (&v)[2]) {
    const unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const unsigned u = lane + 32 * s;
        v[s] = *reinterpret_cast<const uint4*>(words + at + zf_row_word(g, u));
        *reinterpret_cast<uint4*>(tile + (u >> 2) * ZIPFUSION_TILE_STRIDE + 8 * (u & 3)) = v[s];
    }
}

// The exponent range of a block for its classification: min and max of every exponent
// and of the nonzero ones, and whether exponent 0 occurs.
struct ZfRange {
    unsigned low, high, low_nonzero, high_nonzero, zeros;
};

__device__ __forceinline__ void zf_range_add(ZfRange& r, unsigned word) {
    const unsigned e = (word >> 7) & 0xffu;
    r.low = min(r.low, e);
    r.high = max(r.high, e);
    if (e == 0) {
        r.zeros = 1;
    } else {
        r.low_nonzero = min(r.low_nonzero, e);
        r.high_nonzero = max(r.high_nonzero, e);
    }
}

// The metadata byte of the block whose lanes hold `v` (zipfusion's block::classify, spec
// 2): coded when every exponent lies in [b, b + 15], b the smallest rounded down to even
// and b/2 <= 120; else, zero-aware, when a zero-aware cache's block holds exponent 0 and
// its other exponents lie in [b, b + 13]; else raw. Every lane gets the byte.
__device__ __forceinline__ unsigned zf_classify(const uint4 (&v)[2], unsigned variant) {
    ZfRange r = {255u, 0u, 255u, 0u, 0u};
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const unsigned w[4] = {v[s].x, v[s].y, v[s].z, v[s].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            zf_range_add(r, w[i] & 0xffffu);
            zf_range_add(r, w[i] >> 16);
        }
    }
    const unsigned full = 0xffffffffu;
    r.low = __reduce_min_sync(full, r.low);
    r.high = __reduce_max_sync(full, r.high);
    r.low_nonzero = __reduce_min_sync(full, r.low_nonzero);
    r.high_nonzero = __reduce_max_sync(full, r.high_nonzero);
    r.zeros = __reduce_or_sync(full, r.zeros);
    unsigned base = r.low & ~1u;
    if (base / 2 <= ZIPFUSION_MAX_HALF_BASE && r.high - base <= ZIPFUSION_WINDOW_SPAN) return base / 2;
    if (variant == 1 && r.zeros) {
        // low_nonzero <= high_nonzero here: a block of zeros alone fits the first window.
        base = r.low_nonzero & ~1u;
        if (base / 2 <= ZIPFUSION_MAX_HALF_BASE && r.high_nonzero - base <= ZIPFUSION_ZERO_AWARE_WINDOW_SPAN)
            return ZIPFUSION_ZERO_AWARE_FLAG | (base / 2);
    }
    return ZIPFUSION_RAW_BLOCK_BYTE;
}

__device__ __forceinline__ unsigned zf_block_len(unsigned meta) {
    return meta == ZIPFUSION_RAW_BLOCK_BYTE ? ZIPFUSION_RAW_BLOCK_LEN : ZIPFUSION_CODED_BLOCK_LEN;
}

// ---------------------------------------------------------------------------------------
// Encode.
// ---------------------------------------------------------------------------------------

// One CTA per page: the metadata byte of every block of the page into
// metas[page * page_blocks + block] (blocks entry-major: entry 2 head + kind, then j),
// and the page's length in bytes into page_lens[page].
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_classify(const unsigned short* __restrict__ words, ZfPages g, unsigned long long pages,
                              unsigned char* __restrict__ metas, unsigned* __restrict__ page_lens) {
    __shared__ __align__(16) unsigned short tiles[ZF_WARPS][16 * ZIPFUSION_TILE_STRIDE];
    __shared__ unsigned body_len;
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (unsigned long long page = blockIdx.x; page < pages; page += gridDim.x) {
        if (threadIdx.x == 0) body_len = 0;
        __syncthreads();
        const unsigned long long page_words = zf_page_words(g, page);
        unsigned mine = 0;
        for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
            uint4 v[2];
            const unsigned entry = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
            // The tile is not needed here; the load helper fills it anyway (cheap, shared).
            zf_load_block(words, g, zf_block_words(g, page_words, entry, j), tiles[warp], v);
            const unsigned meta = zf_classify(v, g.variant);
            if (lane == 0) metas[page * g.page_blocks + b] = (unsigned char)meta;
            mine += zf_block_len(meta);
            __syncwarp();
        }
        if (lane == 0 && mine) atomicAdd(&body_len, mine);
        __syncthreads();
        if (threadIdx.x == 0) page_lens[page] = g.metadata_len + body_len;
        __syncthreads();
    }
}

// One CTA: the container offset of every page and tail, an exclusive scan from the header's
// end over items (layer, p), p < pages_per_layer a page (page_lens) and p = pages_per_layer
// the layer's BF16 tail (tail_len bytes), into offsets[layer * (pages_per_layer + 1) + p];
// the container's length into *total; and the header, with the checksum from `sums`
// (when non-null) and its CRC-32C.
extern "C" __global__ void __launch_bounds__(ZIPFUSION_SCAN_THREADS)
    zipfusion_encode_scan(const unsigned* __restrict__ page_lens, unsigned long long layers,
                          unsigned long long pages_per_layer, unsigned long long tail_len,
                          unsigned long long* __restrict__ offsets, unsigned long long* __restrict__ total,
                          ZfHeader header, const unsigned long long* __restrict__ sums,
                          unsigned long long value_bytes, unsigned char* __restrict__ out) {
    __shared__ unsigned long long warp_sums[ZIPFUSION_SCAN_THREADS / 32];
    __shared__ __align__(16) unsigned char h[ZIPFUSION_HEADER_LEN];
    const unsigned long long per_layer = pages_per_layer + 1, items = layers * per_layer;
    const unsigned long long chunk = (items + blockDim.x - 1) / blockDim.x;
    const unsigned long long first = min(items, chunk * threadIdx.x), last = min(items, first + chunk);
    auto len_of = [&](unsigned long long item) -> unsigned long long {
        const unsigned long long layer = item / per_layer, p = item % per_layer;
        return p == pages_per_layer ? tail_len : page_lens[layer * pages_per_layer + p];
    };
    unsigned long long mine = 0;
    for (unsigned long long item = first; item < last; ++item) mine += len_of(item);
    // Exclusive scan of `mine` over the CTA.
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long x = mine;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = lane < blockDim.x / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const unsigned long long y = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += y;
        }
        if (lane < blockDim.x / 32) warp_sums[lane] = w;
    }
    __syncthreads();
    unsigned long long at = ZIPFUSION_HEADER_LEN + x - mine + (warp > 0 ? warp_sums[warp - 1] : 0);
    for (unsigned long long item = first; item < last; ++item) {
        offsets[item] = at;
        at += len_of(item);
    }
    if (threadIdx.x == blockDim.x - 1) *total = at;
    if (threadIdx.x < 3) reinterpret_cast<uint4*>(h)[threadIdx.x] = header.bytes[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        if (sums) {
            const uint32_t c = kv_adler_from_sums(value_bytes, sums[0], sums[1]);
            for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CHECKSUM + i] = (unsigned char)(c >> (8 * i));
        }
        const uint32_t crc = kv_crc32c_skip(h, ZIPFUSION_HEADER_LEN, ZIPFUSION_HEADER_CRC);
        for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CRC + i] = (unsigned char)(crc >> (8 * i));
    }
    __syncthreads();
    if (threadIdx.x < 3) reinterpret_cast<uint4*>(out)[threadIdx.x] = reinterpret_cast<const uint4*>(h)[threadIdx.x];
}

// Byte `t` of a page's metadata (spec 5.1): entry t / entry_stride's first-block offset
// (4 bytes, little-endian), its blocks' bytes, zero padding.
__device__ __forceinline__ unsigned char zf_metadata_byte(const ZfPages& g, unsigned t,
                                                          const unsigned char* metas, const unsigned* entry_at) {
    const unsigned entry = t / g.entry_stride, k = t % g.entry_stride;
    if (k < ZIPFUSION_OFFSET_LEN) return (unsigned char)(entry_at[entry] >> (8 * k));
    if (k < ZIPFUSION_OFFSET_LEN + g.blocks_per_entry)
        return metas[entry * g.blocks_per_entry + k - ZIPFUSION_OFFSET_LEN];
    return 0;
}

// Where each entry's blocks start in its page, from the blocks' metadata bytes in shared
// memory: entry_at[e] = metadata_len + the lengths of every block of entries before e.
// Every thread of the CTA calls it (it ends with a barrier).
__device__ __forceinline__ void zf_entry_offsets(const ZfPages& g, const unsigned char* metas, unsigned* entry_len,
                                                 unsigned* entry_at) {
    const unsigned entries = 2 * g.heads;
    for (unsigned e = threadIdx.x; e < entries; e += blockDim.x) {
        unsigned len = 0;
        for (unsigned j = 0; j < g.blocks_per_entry; ++j) len += zf_block_len(metas[e * g.blocks_per_entry + j]);
        entry_len[e] = len;
    }
    __syncthreads();
    for (unsigned e = threadIdx.x; e < entries; e += blockDim.x) {
        unsigned at = g.metadata_len;
        for (unsigned p = 0; p < e; ++p) at += entry_len[p];
        entry_at[e] = at;
    }
    __syncthreads();
}

// Block j of entry e starts this many bytes after the entry's first block.
__device__ __forceinline__ unsigned zf_in_entry(const ZfPages& g, const unsigned char* metas, unsigned e,
                                                unsigned j) {
    unsigned at = 0;
    for (unsigned p = 0; p < j; ++p) at += zf_block_len(metas[e * g.blocks_per_entry + p]);
    return at;
}

// Writes the block in the warp's tile as `meta` says (zipfusion's block::write_block,
// spec 4): raw, each lane's 16 words in fragment order (32 bytes); coded, each lane's 16
// low bytes and 8 code bytes.
__device__ __forceinline__ void zf_write_block(const unsigned short* tile, unsigned kind, unsigned meta,
                                               unsigned char* __restrict__ dst) {
    const unsigned lane = threadIdx.x & 31;
    unsigned short w[16];
#pragma unroll
    for (int v = 0; v < 16; ++v) w[v] = tile[zf_tile_index(kind, lane, v)];
    if (meta == ZIPFUSION_RAW_BLOCK_BYTE) {
        uint4 a, b;
        a.x = w[0] | (unsigned)w[1] << 16;
        a.y = w[2] | (unsigned)w[3] << 16;
        a.z = w[4] | (unsigned)w[5] << 16;
        a.w = w[6] | (unsigned)w[7] << 16;
        b.x = w[8] | (unsigned)w[9] << 16;
        b.y = w[10] | (unsigned)w[11] << 16;
        b.z = w[12] | (unsigned)w[13] << 16;
        b.w = w[14] | (unsigned)w[15] << 16;
        reinterpret_cast<uint4*>(dst)[2 * lane] = a;
        reinterpret_cast<uint4*>(dst)[2 * lane + 1] = b;
        return;
    }
    const unsigned half_base = meta & 0x7fu;
    const bool zero_aware = (meta & ZIPFUSION_ZERO_AWARE_FLAG) != 0;
    unsigned low[4] = {0, 0, 0, 0};
    unsigned codes[2] = {0, 0};
#pragma unroll
    for (int v = 0; v < 16; ++v) low[v >> 2] |= (unsigned)(w[v] & 0xffu) << (8 * (v & 3));
#pragma unroll
    for (int g = 0; g < 2; ++g) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned c[2];
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const unsigned word = w[8 * g + 4 * s + i];
                const unsigned e = (word >> 7) & 0xffu;
                const unsigned d = (zero_aware && e == 0) ? ZIPFUSION_ZERO_D : ((e - 2 * half_base) >> 1);
                c[s] = (word >> 15) << 3 | d;
            }
            const unsigned byte = (c[0] & 8) << 4 | (c[0] & 7) | (c[1] & 8) << 3 | (c[1] & 7) << 3;
            codes[g] |= (byte & 0xffu) << (8 * i);
        }
    }
    reinterpret_cast<uint4*>(dst)[lane] = make_uint4(low[0], low[1], low[2], low[3]);
    reinterpret_cast<uint2*>(dst + ZIPFUSION_LOW_BYTES_LEN)[lane] = make_uint2(codes[0], codes[1]);
}

// One CTA per page: the page's metadata and blocks (zipfusion's encode_page_into, spec 5)
// from the metadata bytes zipfusion_encode_classify left. Page i goes to
// out + i * slot_stride when slot_stride is nonzero (a pool of fixed slots), else to
// out + offsets[(i / group_pages) * (group_pages + 1) + i % group_pages] (a container,
// zipfusion_encode_scan's offsets).
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_pages(const unsigned short* __restrict__ words, ZfPages g, unsigned long long pages,
                           const unsigned char* __restrict__ metas, const unsigned long long* __restrict__ offsets,
                           unsigned long long slot_stride, unsigned char* __restrict__ out) {
    __shared__ __align__(16) unsigned short tiles[ZF_WARPS][16 * ZIPFUSION_TILE_STRIDE];
    extern __shared__ __align__(16) unsigned char dynamic[];
    // Dynamic shared memory: entry_len and entry_at (2 H words each), then the page's
    // metadata bytes (page_blocks).
    unsigned* entry_len = reinterpret_cast<unsigned*>(dynamic);
    unsigned* entry_at = entry_len + 2 * g.heads;
    unsigned char* page_metas = reinterpret_cast<unsigned char*>(entry_at + 2 * g.heads);
    const unsigned warp = threadIdx.x >> 5;
    for (unsigned long long page = blockIdx.x; page < pages; page += gridDim.x) {
        for (unsigned b = threadIdx.x; b < g.page_blocks; b += blockDim.x)
            page_metas[b] = metas[page * g.page_blocks + b];
        __syncthreads();
        zf_entry_offsets(g, page_metas, entry_len, entry_at);
        const unsigned long long at =
            slot_stride ? page * slot_stride
                        : offsets[(page / g.group_pages) * (g.group_pages + 1) + page % g.group_pages];
        unsigned char* dst = out + at;
        for (unsigned t = threadIdx.x; t < g.metadata_len; t += blockDim.x)
            dst[t] = zf_metadata_byte(g, t, page_metas, entry_at);
        const unsigned long long page_words = zf_page_words(g, page);
        for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
            const unsigned entry = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
            uint4 v[2];
            zf_load_block(words, g, zf_block_words(g, page_words, entry, j), tiles[warp], v);
            __syncwarp();
            const unsigned meta = page_metas[b];
            const unsigned pos = entry_at[entry] + zf_in_entry(g, page_metas, entry, j);
            zf_write_block(tiles[warp], entry & 1, meta, dst + pos);
            __syncwarp();
        }
        __syncthreads();
    }
}

// Single-pass scan state (decoupled look-back): a word per page, 0 until the page
// publishes its length (ZF_AGGREGATE | len) and then the inclusive sum of every page's
// length up to it (ZF_PREFIX | sum). Volatile accesses reach L2, where every SM sees them.
#define ZF_AGGREGATE (1ull << 62)
#define ZF_PREFIX (2ull << 62)
#define ZF_VALUE ((1ull << 62) - 1)

__device__ __forceinline__ void zf_publish(unsigned long long* p, unsigned long long v) {
    *reinterpret_cast<volatile unsigned long long*>(p) = v;
}

__device__ __forceinline__ unsigned long long zf_peek(const unsigned long long* p) {
    return *reinterpret_cast<const volatile unsigned long long*>(p);
}

// The sum of the lengths of every page before `page` (a warp's collective; every lane
// gets it). Publishes the page's length at once, then walks back 32 pages at a time,
// adding published lengths until it meets a published prefix, then publishes its own.
// Pages are taken in ticket order, so every page waited on has started and publishes its
// length before it waits itself: the walk ends.
__device__ __forceinline__ unsigned long long zf_look_back(unsigned long long* state, unsigned long long page,
                                                           unsigned long long len) {
    const unsigned lane = threadIdx.x & 31, full = 0xffffffffu;
    if (page == 0) {
        if (lane == 0) zf_publish(state, ZF_PREFIX | len);
        return 0;
    }
    if (lane == 0) zf_publish(state + page, ZF_AGGREGATE | len);
    unsigned long long before = 0;
    long long next = (long long)page - 1;
    while (true) {
        const long long at = next - (long long)lane;
        unsigned long long v;
        do {
            // Before page 0 reads as a prefix of 0.
            v = at >= 0 ? zf_peek(state + at) : ZF_PREFIX;
        } while (__any_sync(full, (v >> 62) == 0));
        const unsigned prefixes = __ballot_sync(full, (v >> 62) == 2);
        // Lanes up to the nearest prefix (lane 0 is the nearest page) count.
        const unsigned last = prefixes ? __ffs(prefixes) - 1 : 31;
        unsigned long long x = lane <= last ? (v & ZF_VALUE) : 0;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) x += __shfl_xor_sync(full, x, d);
        before += x;
        if (prefixes) break;
        next -= 32;
    }
    if (lane == 0) zf_publish(state + page, ZF_PREFIX | (before + len));
    return before;
}

// One CTA per page, one pass over the input: a warp per block loads the block into the
// CTA's tile of the page (dynamic shared memory) and classifies it; the page's length
// then gives its place, page * slot_stride for fixed slots (lens[page] gets the length)
// or, for a container (slot_stride = 0), the header, every earlier page's length (the
// look-back over state[1..], pages taken in the order of the ticket in state[0]) and the
// tails of earlier groups, recorded in offsets (the group's tail offset too, after its
// last page); then the metadata and the blocks are written from the tile.
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_encode_fused(const unsigned short* __restrict__ words, ZfPages g, unsigned long long* state,
                           unsigned long long* __restrict__ offsets, unsigned long long tail_len,
                           unsigned long long slot_stride, unsigned* __restrict__ lens,
                           unsigned char* __restrict__ out) {
    extern __shared__ __align__(16) unsigned char dynamic[];
    // Dynamic shared memory: a tile per block, entry_len and entry_at (2 H words each),
    // then the blocks' metadata bytes.
    unsigned short* tiles = reinterpret_cast<unsigned short*>(dynamic);
    unsigned* entry_len = reinterpret_cast<unsigned*>(tiles + g.page_blocks * 16 * ZIPFUSION_TILE_STRIDE);
    unsigned* entry_at = entry_len + 2 * g.heads;
    unsigned char* page_metas = reinterpret_cast<unsigned char*>(entry_at + 2 * g.heads);
    __shared__ unsigned long long s_page, s_at;
    __shared__ unsigned s_body;
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        s_page = slot_stride ? blockIdx.x : atomicAdd(state, 1ull);
        s_body = 0;
    }
    __syncthreads();
    const unsigned long long page = s_page;
    const unsigned long long page_words = zf_page_words(g, page);
    unsigned mine = 0;
    for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
        const unsigned entry = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
        uint4 v[2];
        zf_load_block(words, g, zf_block_words(g, page_words, entry, j), tiles + b * 16 * ZIPFUSION_TILE_STRIDE, v);
        const unsigned meta = zf_classify(v, g.variant);
        if (lane == 0) page_metas[b] = (unsigned char)meta;
        mine += zf_block_len(meta);
    }
    if (lane == 0 && mine) atomicAdd(&s_body, mine);
    __syncthreads();
    zf_entry_offsets(g, page_metas, entry_len, entry_at);
    const unsigned page_len = g.metadata_len + s_body;
    if (warp == 0) {
        unsigned long long at;
        if (slot_stride) {
            at = page * slot_stride;
            if (lane == 0) lens[page] = page_len;
        } else {
            const unsigned long long per = g.group_pages, group = page / per;
            at = ZIPFUSION_HEADER_LEN + zf_look_back(state + 1, page, page_len) + group * tail_len;
            if (lane == 0) {
                offsets[group * (per + 1) + page % per] = at;
                if (page % per == per - 1) offsets[group * (per + 1) + per] = at + page_len;
            }
        }
        if (lane == 0) s_at = at;
    }
    __syncthreads();
    unsigned char* dst = out + s_at;
    for (unsigned t = threadIdx.x; t < g.metadata_len; t += blockDim.x)
        dst[t] = zf_metadata_byte(g, t, page_metas, entry_at);
    for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
        const unsigned entry = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
        const unsigned pos = entry_at[entry] + zf_in_entry(g, page_metas, entry, j);
        zf_write_block(tiles + b * 16 * ZIPFUSION_TILE_STRIDE, entry & 1, page_metas[b], dst + pos);
    }
}

// One CTA after zipfusion_encode_fused: a container's length into *total (and, for a
// cache without full pages, each group's tail offset), and its header, with the checksum
// from `sums` (when non-null) and its CRC-32C.
extern "C" __global__ void zipfusion_encode_header(unsigned long long* __restrict__ offsets, unsigned long long groups,
                                                   unsigned long long pages_per_group, unsigned long long tail_len,
                                                   unsigned long long* __restrict__ total, ZfHeader header,
                                                   const unsigned long long* __restrict__ sums,
                                                   unsigned long long value_bytes, unsigned char* __restrict__ out) {
    if (pages_per_group == 0) {
        for (unsigned long long l = threadIdx.x; l < groups; l += blockDim.x)
            offsets[l] = ZIPFUSION_HEADER_LEN + l * tail_len;
    }
    if (threadIdx.x != 0) return;
    *total = pages_per_group == 0 ? ZIPFUSION_HEADER_LEN + groups * tail_len
                                  : offsets[(groups - 1) * (pages_per_group + 1) + pages_per_group] + tail_len;
    __align__(16) unsigned char h[ZIPFUSION_HEADER_LEN];
    for (int i = 0; i < 3; ++i) reinterpret_cast<uint4*>(h)[i] = header.bytes[i];
    if (sums) {
        const uint32_t c = kv_adler_from_sums(value_bytes, sums[0], sums[1]);
        for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CHECKSUM + i] = (unsigned char)(c >> (8 * i));
    }
    const uint32_t crc = kv_crc32c_skip(h, ZIPFUSION_HEADER_LEN, ZIPFUSION_HEADER_CRC);
    for (int i = 0; i < 4; ++i) h[ZIPFUSION_HEADER_CRC + i] = (unsigned char)(crc >> (8 * i));
    for (int i = 0; i < 3; ++i) reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(h)[i];
}

// Copies each group's BF16 tail between words and a container: the K tail (tail_words
// words from words + group * group_stride + tail_first) then the V tail (kind_stride words
// later), at bytes offsets[group * (pages_per_group + 1) + pages_per_group] of the
// container (a group without pages has only its tail's offset in the table).
// to_container: words -> container (encode), else container -> words (decode).
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_tails(unsigned short* words, ZfPages g, unsigned long long groups, unsigned long long tail_first,
                    unsigned long long tail_words, const unsigned long long* __restrict__ offsets,
                    unsigned long long pages_per_group, unsigned char* container, unsigned to_container) {
    // tail_words is a multiple of 32 (16-byte units: tail_words / 8 per kind).
    const unsigned long long units = tail_words / 8, total = groups * 2 * units;
    for (unsigned long long u = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; u < total;
         u += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long group = u / (2 * units), kind = (u / units) % 2, k = u % units;
        uint4* w = reinterpret_cast<uint4*>(words + group * g.group_stride + kind * g.kind_stride + tail_first) + k;
        uint4* c = reinterpret_cast<uint4*>(container + offsets[group * (pages_per_group + 1) + pages_per_group] +
                                            2 * kind * tail_words) +
                   k;
        if (to_container) {
            *c = *w;
        } else {
            *w = *c;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Decode.
// ---------------------------------------------------------------------------------------

__device__ __forceinline__ void zf_flag(unsigned* status, unsigned code) { atomicCAS(status, 0u, code); }

// The high bytes of a lane's two groups from its 8 code bytes (zipfusion's
// restore_high_bytes, spec 3.4): first[g] holds values 8g..8g+3, second[g] values
// 8g+4..8g+7, one per byte.
__device__ __forceinline__ void zf_restore(unsigned codes, unsigned meta, unsigned& first, unsigned& second) {
    const unsigned half_base = (meta & 0x7fu) * 0x01010101u;
    first = (codes & 0x87878787u) + half_base;
    second = (((codes >> 3) & 0x07070707u) | ((codes << 1) & 0x80808080u)) + half_base;
    if (meta & ZIPFUSION_ZERO_AWARE_FLAG) {
        // Bit 0 of a byte: its first d is 7; bit 3: its second d is 7.
        const unsigned sevens = codes & (codes >> 1) & (codes >> 2);
        first &= ~((sevens & 0x01010101u) * 0x7fu);
        second &= ~(((sevens >> 3) & 0x01010101u) * 0x7fu);
    }
}

// One CTA per page: checks the page's metadata (spec 6, rows 1-7: what
// zipfusion::page_info checks) and, when it is valid, decodes its blocks into words.
// Page i lies at src + i * slot_stride with slot_stride bytes to it when slot_stride is
// nonzero (a pool of fixed slots), else at src + offsets[(i / group_pages) *
// (group_pages + 1) + i % group_pages] with the rest of the container's src_len bytes to
// it (a container, whose offsets the host walked). An invalid page leaves a status code
// and writes nothing.
extern "C" __global__ void __launch_bounds__(ZIPFUSION_THREADS)
    zipfusion_decode_pages(const unsigned char* __restrict__ src, unsigned long long src_len, ZfPages g,
                           unsigned long long pages, const unsigned long long* __restrict__ offsets,
                           unsigned long long slot_stride, unsigned short* __restrict__ words,
                           unsigned* __restrict__ status) {
    __shared__ __align__(16) unsigned short tiles[ZF_WARPS][16 * ZIPFUSION_TILE_STRIDE];
    __shared__ unsigned bad;
    extern __shared__ __align__(16) unsigned char dynamic[];
    // Dynamic shared memory: entry_len and entry_at (2 H words each), then the page's
    // metadata (metadata_len bytes, a multiple of 16) and its blocks' bytes (page_blocks).
    unsigned* entry_len = reinterpret_cast<unsigned*>(dynamic);
    unsigned* entry_at = entry_len + 2 * g.heads;
    unsigned char* metadata = reinterpret_cast<unsigned char*>(entry_at + 2 * g.heads);
    unsigned char* page_metas = metadata + g.metadata_len;
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned entries = 2 * g.heads;
    for (unsigned long long page = blockIdx.x; page < pages; page += gridDim.x) {
        const unsigned long long at =
            slot_stride ? page * slot_stride
                        : offsets[(page / g.group_pages) * (g.group_pages + 1) + page % g.group_pages];
        const unsigned long long limit = slot_stride ? slot_stride : src_len - at;
        if (limit < g.metadata_len) {
            if (threadIdx.x == 0) zf_flag(status, ZIPFUSION_STATUS_TRUNCATED);
            continue;  // uniform over the CTA
        }
        const unsigned char* page_src = src + at;
        if (threadIdx.x == 0) bad = 0;
        for (unsigned t = threadIdx.x; t < g.metadata_len / 16; t += blockDim.x)
            reinterpret_cast<uint4*>(metadata)[t] = reinterpret_cast<const uint4*>(page_src)[t];
        __syncthreads();
        for (unsigned b = threadIdx.x; b < g.page_blocks; b += blockDim.x) {
            const unsigned e = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
            page_metas[b] = metadata[e * g.entry_stride + ZIPFUSION_OFFSET_LEN + j];
        }
        __syncthreads();
        zf_entry_offsets(g, page_metas, entry_len, entry_at);
        // The checks of spec 6 per entry; an entry fails exactly when page_info stops at it
        // or at an earlier entry, so the page fails exactly when page_info does.
        for (unsigned e = threadIdx.x; e < entries; e += blockDim.x) {
            unsigned code = 0;
            const unsigned char* entry = metadata + e * g.entry_stride;
            for (unsigned j = 0; j < g.blocks_per_entry && !code; ++j) {
                const unsigned m = entry[ZIPFUSION_OFFSET_LEN + j];
                if (m == ZIPFUSION_RAW_BLOCK_BYTE) continue;
                if ((m & ZIPFUSION_ZERO_AWARE_FLAG) && g.variant == 0) code = ZIPFUSION_STATUS_ZERO_AWARE_IN_BASE;
                else if ((m & 0x7fu) > ZIPFUSION_MAX_HALF_BASE) code = ZIPFUSION_STATUS_HALF_BASE_TOO_LARGE;
            }
            for (unsigned k = ZIPFUSION_OFFSET_LEN + g.blocks_per_entry; k < g.entry_stride && !code; ++k)
                if (entry[k]) code = ZIPFUSION_STATUS_PADDING_NOT_ZERO;
            const unsigned stored = entry[0] | (unsigned)entry[1] << 8 | (unsigned)entry[2] << 16 |
                                    (unsigned)entry[3] << 24;
            if (!code && stored > limit) code = ZIPFUSION_STATUS_OFFSET_PAST_PAGE;
            if (!code && stored != entry_at[e]) code = ZIPFUSION_STATUS_OFFSET_MISMATCH;
            if (!code && (unsigned long long)entry_at[e] + entry_len[e] > limit) code = ZIPFUSION_STATUS_TRUNCATED;
            if (code) {
                zf_flag(status, code);
                bad = 1;
            }
        }
        __syncthreads();
        if (!bad) {
            const unsigned long long page_words = zf_page_words(g, page);
            for (unsigned b = warp; b < g.page_blocks; b += ZF_WARPS) {
                const unsigned entry = b / g.blocks_per_entry, j = b % g.blocks_per_entry;
                const unsigned meta = page_metas[b];
                const unsigned char* block = page_src + entry_at[entry] + zf_in_entry(g, page_metas, entry, j);
                unsigned short* tile = tiles[warp];
                const unsigned kind = entry & 1;
                if (meta == ZIPFUSION_RAW_BLOCK_BYTE) {
                    const uint4 a = reinterpret_cast<const uint4*>(block)[2 * lane];
                    const uint4 c = reinterpret_cast<const uint4*>(block)[2 * lane + 1];
                    const unsigned w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
                    for (int v = 0; v < 16; ++v)
                        tile[zf_tile_index(kind, lane, v)] = (unsigned short)(w[v >> 1] >> (16 * (v & 1)));
                } else {
                    const uint4 low = reinterpret_cast<const uint4*>(block)[lane];
                    const uint2 codes = reinterpret_cast<const uint2*>(block + ZIPFUSION_LOW_BYTES_LEN)[lane];
                    const unsigned lows[4] = {low.x, low.y, low.z, low.w};
                    unsigned first[2], second[2];
                    zf_restore(codes.x, meta, first[0], second[0]);
                    zf_restore(codes.y, meta, first[1], second[1]);
#pragma unroll
                    for (int v = 0; v < 16; ++v) {
                        const unsigned grp = v >> 3, i = v & 3;
                        const unsigned high = ((v & 4) ? second[grp] : first[grp]) >> (8 * i) & 0xffu;
                        const unsigned lo = lows[v >> 2] >> (8 * (v & 3)) & 0xffu;
                        tile[zf_tile_index(kind, lane, v)] = (unsigned short)(high << 8 | lo);
                    }
                }
                __syncwarp();
                const unsigned long long base = zf_block_words(g, page_words, entry, j);
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    const unsigned u = lane + 32 * s;
                    *reinterpret_cast<uint4*>(words + base + zf_row_word(g, u)) =
                        *reinterpret_cast<const uint4*>(tile + (u >> 2) * ZIPFUSION_TILE_STRIDE + 8 * (u & 3));
                }
                __syncwarp();
            }
        }
        __syncthreads();
    }
}
