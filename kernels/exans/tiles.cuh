// Format version 2's tiles (docs/formats/exans.md 6.2), shared by the ExANS decoder
// (exans.cu) and encoder (exans_encode.cu): a partition is cut into tiles of
// EXANS_TILE symbols, and lane j codes symbols EXANS_GROUP j .. EXANS_GROUP j + 7 of
// each, in consecutive steps. The CPU reference is exans::format::{lane_symbol, lane_run}.
#pragma once
#include <stdint.h>

#include "exans_format.gen.cuh"

// Steps lane `lane` codes in a partition of `len` symbols: EXANS_GROUP per whole tile,
// plus clamp(r - 8 lane, 0, 8) in a last, partial tile of r symbols. It falls with the
// lane: lane 0's run is the partition's step count m, lane 31's the steps in which every
// lane is active.
__device__ __forceinline__ uint32_t exans_lane_run(uint32_t len, uint32_t lane) {
    const uint32_t rest = len % EXANS_TILE;
    const uint32_t in_rest = rest > EXANS_GROUP * lane ? min(rest - EXANS_GROUP * lane, (uint32_t)EXANS_GROUP) : 0u;
    return EXANS_GROUP * (len / EXANS_TILE) + in_rest;
}
