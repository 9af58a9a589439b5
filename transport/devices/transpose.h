// Transposing row-major matrices on the CPU: the host backend's Device::TransposeInPlace, and
// the size check both backends share.
//
// Ownership: the caller's buffers. Threading: none (pure functions). Failure: CheckTranspose
// returns InvalidArgument for an operation it cannot carry out (zero or unsupported element
// size, a size that overflows); TransposeMatrix assumes a checked operation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hoist/status.h"
#include "transport/devices/device.h"

namespace hoist::transport {

// The bytes of one of op's matrices; InvalidArgument when op is malformed (an element size
// other than 1, 2, 4 or 8, or sizes whose product overflows).
Result<std::uint64_t> CheckTranspose(const Transpose& op);

// dst (cols x rows) = the transpose of src (rows x cols), elements of elem_bytes; src and dst
// must not overlap. Works in cache-sized tiles.
void TransposeMatrix(const std::byte* src, std::byte* dst, std::uint64_t rows, std::uint64_t cols,
                     std::uint32_t elem_bytes);

}  // namespace hoist::transport
