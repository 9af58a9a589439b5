// XXH64 (seed 0), the checksum of the codec format: the published xxHash64 algorithm, so any
// xxHash implementation (e.g. Python's `xxhash.xxh64_intdigest`) recomputes a stored value.
//
// Failure: none. Ownership: reads `data` only. Threading: pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hoist::codec {

std::uint64_t Xxh64(const void* data, std::size_t size, std::uint64_t seed = 0);

}  // namespace hoist::codec
