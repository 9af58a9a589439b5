#include "transport/devices/transpose.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace hoist::transport {
namespace {

constexpr std::uint64_t kTile = 64;  // elements a side: a tile of 8-byte elements is 32 KiB

template <typename T>
void TransposeTyped(const std::byte* src, std::byte* dst, std::uint64_t rows, std::uint64_t cols) {
  const auto* s = reinterpret_cast<const T*>(src);
  auto* d = reinterpret_cast<T*>(dst);
  for (std::uint64_t r0 = 0; r0 < rows; r0 += kTile) {
    const std::uint64_t r1 = std::min(rows, r0 + kTile);
    for (std::uint64_t c0 = 0; c0 < cols; c0 += kTile) {
      const std::uint64_t c1 = std::min(cols, c0 + kTile);
      for (std::uint64_t r = r0; r < r1; ++r) {
        for (std::uint64_t c = c0; c < c1; ++c) d[c * rows + r] = s[r * cols + c];
      }
    }
  }
}

bool MulOverflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

Result<std::uint64_t> CheckTranspose(const Transpose& op) {
  const std::uint32_t e = op.elem_bytes;
  if (e != 1 && e != 2 && e != 4 && e != 8) {
    return Status::InvalidArgument("transpose: element size " + std::to_string(e) +
                                   " is not 1, 2, 4 or 8 bytes");
  }
  std::uint64_t elems = 0, bytes = 0, all = 0;
  if (MulOverflows(op.rows, op.cols, &elems) || MulOverflows(elems, e, &bytes) ||
      MulOverflows(bytes, op.batch, &all)) {
    return Status::InvalidArgument("transpose: " + std::to_string(op.batch) + " x " +
                                   std::to_string(op.rows) + " x " + std::to_string(op.cols) +
                                   " elements overflow");
  }
  return bytes;
}

void TransposeMatrix(const std::byte* src, std::byte* dst, std::uint64_t rows, std::uint64_t cols,
                     std::uint32_t elem_bytes) {
  switch (elem_bytes) {
    case 1:
      return TransposeTyped<std::uint8_t>(src, dst, rows, cols);
    case 2:
      return TransposeTyped<std::uint16_t>(src, dst, rows, cols);
    case 4:
      return TransposeTyped<std::uint32_t>(src, dst, rows, cols);
    default:
      return TransposeTyped<std::uint64_t>(src, dst, rows, cols);
  }
}

}  // namespace hoist::transport
