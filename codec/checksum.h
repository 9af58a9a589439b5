// The codec format's checksums. XXH64 (seed 0): the published xxHash64 algorithm, so any xxHash
// implementation (e.g. Python's `xxhash.xxh64_intdigest`) recomputes a stored value; it covers
// headers, whole tensors and (formats 2 and 3) blocks. BlockChecksum: a block's checksum as its
// stream's format defines it (format 4: the lane checksum of codec/lane_sum.h).
//
// Failure: none. Ownership: reads `data` only. Threading: pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hoist::codec {

std::uint64_t Xxh64(const void* data, std::size_t size, std::uint64_t seed = 0);

// The lane checksum (codec/lane_sum.h) of `values` values of `value_bytes` (1, 2 or 4) bytes
// each at `data`, value k in lane k mod `lanes` (1 .. 1024).
std::uint32_t LaneChecksum(const std::uint8_t* data, std::uint64_t values,
                           std::uint32_t value_bytes, std::uint32_t lanes);

// The checksum of a block of `bytes` decoded bytes in a stream of format `version`: format 4,
// the lane checksum with `sub_streams` lanes (a Huffman block) or lane::kStoredLanes (a stored
// one, sub_streams 0); formats 2 and 3, the low 32 bits of the bytes' XXH64.
std::uint32_t BlockChecksum(std::uint16_t version, std::uint32_t sub_streams,
                            std::uint32_t value_bytes, const std::uint8_t* data,
                            std::uint64_t bytes);

}  // namespace hoist::codec
