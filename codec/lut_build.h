// A canonical code's decode table built from its code lengths (codec/huffman.h says what the code
// and the table are): the one implementation, shared by the CPU codec (BuildDecodeLut) and the
// CUDA decoder, which builds a packed load's tables on the device from the streams' lengths
// (256 bytes a stream crossing the link instead of an 8 KiB table). The functions are host and
// device code under nvcc.
//
// Failure: none; lengths must be valid (CodeLengthsValid), which keeps every symbol's entries
// inside the table. Ownership: the caller's arrays. Threading: pure functions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOIST_LUT_FN __host__ __device__ __forceinline__
#else
#define HOIST_LUT_FN inline
#endif

namespace hoist::codec::lut {

inline constexpr int kBits = 12;  // codec::kLutBits (huffman.cc checks that they agree)

// The canonical code of each of the 256 symbols of `lengths` (right-aligned, lengths[s] bits)
// into codes[s]; an absent symbol's (length 0) entry is left as it is.
HOIST_LUT_FN void CanonicalCodes(const std::uint8_t* lengths, std::uint16_t* codes) {
  std::uint32_t code = 0;
  for (int len = 1; len <= kBits; ++len) {
    for (int s = 0; s < 256; ++s) {
      if (lengths[s] == len) codes[s] = static_cast<std::uint16_t>(code++);
    }
    code <<= 1;
  }
}

// Writes symbol s's entries (length len >= 1, canonical code `code`) into the table `table` of
// 1 << kBits entries: every index whose top len bits are the code holds len << 8 | s.
HOIST_LUT_FN void FillSymbol(int s, int len, std::uint16_t code, std::uint16_t* table) {
  const std::uint32_t first = std::uint32_t{code} << (kBits - len);
  const std::uint32_t count = std::uint32_t{1} << (kBits - len);
  const auto entry = static_cast<std::uint16_t>(len << 8 | s);
  for (std::uint32_t i = 0; i < count; ++i) table[first + i] = entry;
}

}  // namespace hoist::codec::lut
