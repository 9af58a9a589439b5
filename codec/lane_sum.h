// The block checksum of codec format 4 (docs/CODEC.md, "Block checksums"): a checksum that the
// GPU decoder computes as it decodes, one lane per thread, where format 2 and 3's XXH64 of the
// block's bytes is one sequential pass that no decoding thread holds.
//
// Value k of a block (its little-endian 1-, 2- or 4-byte value) goes to lane k mod L, where L is
// the block's sub-stream count T for a Huffman block (thread t of the GPU decoder decodes exactly
// lane t's values) and kStoredLanes for a stored one. Each lane runs xxHash32's round over its
// values in increasing k from its own seed, ends with xxHash32's avalanche, and the block's
// checksum is the XOR of its L lanes. One changed value changes its lane's state; two changes
// cancel with probability about 2^-32. Like XXH64, it finds damage, not tampering.
//
// Shared by the CPU codec and the CUDA kernel (the functions are host and device code under
// nvcc). Failure: none. Threading: pure functions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOIST_LANE_FN __host__ __device__ __forceinline__
#else
#define HOIST_LANE_FN inline
#endif

namespace hoist::codec::lane {

inline constexpr std::uint32_t kStoredLanes = 256;  // L of a stored block
inline constexpr std::uint32_t kP1 = 0x9E3779B1u;   // xxHash32's primes
inline constexpr std::uint32_t kP2 = 0x85EBCA77u;
inline constexpr std::uint32_t kP3 = 0xC2B2AE3Du;
inline constexpr std::uint32_t kP5 = 0x165667B1u;

// Lane t's state before its first value.
HOIST_LANE_FN constexpr std::uint32_t Seed(std::uint32_t t) { return kP5 + t * kP1; }

// One value into a lane's state (xxHash32's round).
HOIST_LANE_FN constexpr std::uint32_t Round(std::uint32_t h, std::uint32_t v) {
  h += v * kP2;
  h = (h << 13) | (h >> 19);
  return h * kP1;
}

// A lane's contribution to the block's checksum (xxHash32's avalanche).
HOIST_LANE_FN constexpr std::uint32_t Finish(std::uint32_t h) {
  h ^= h >> 15;
  h *= kP2;
  h ^= h >> 13;
  h *= kP3;
  h ^= h >> 16;
  return h;
}

}  // namespace hoist::codec::lane
