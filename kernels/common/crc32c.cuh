// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as the `crc32c` crate computes
// it: the header checksum of the formats (bf16_field::integrity::header_crc32c). One
// thread, a byte at a time through a 256-entry table (in constant memory, or a copy
// the caller made in shared memory): headers are a few dozen bytes, written once per
// payload.
#pragma once
#include <stdint.h>

struct KvCrc32cTable {
    uint32_t entry[256];
};

constexpr KvCrc32cTable kv_crc32c_make_table() {
    KvCrc32cTable t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        t.entry[i] = c;
    }
    return t;
}

__constant__ KvCrc32cTable kv_crc32c_table = kv_crc32c_make_table();

// CRC-32C of p[0 .. len) with the 4 bytes at `skip` read as zero, through `table` (the
// 256 entries of kv_crc32c_table, or a copy of them in shared memory: a serial chain of
// lookups, each a constant-cache miss the first time it meets an entry).
__device__ __forceinline__ uint32_t kv_crc32c_skip_with(const uint8_t* p, unsigned len, unsigned skip,
                                                        const uint32_t* table) {
    uint32_t c = 0xffffffffu;
    for (unsigned i = 0; i < len; ++i) {
        const uint32_t byte = (i >= skip && i < skip + 4) ? 0u : p[i];
        c = table[(c ^ byte) & 0xffu] ^ (c >> 8);
    }
    return ~c;
}

// CRC-32C of p[0 .. len) with the 4 bytes at `skip` read as zero.
__device__ __forceinline__ uint32_t kv_crc32c_skip(const uint8_t* p, unsigned len, unsigned skip) {
    return kv_crc32c_skip_with(p, len, skip, kv_crc32c_table.entry);
}
