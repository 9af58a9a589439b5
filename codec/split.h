// How each dtype's values split into a coded symbol and raw bits (docs/CODEC.md, "Why it
// compresses"): one row per dtype, the only place the codec knows a dtype's bit layout. The
// encoder, the CPU decoder and the GPU kernel (codec/cuda, which instantiates its decode loop
// per row at compile time) all read this table.
//
// A value of `value_bytes` bytes (a little-endian integer v) splits into
//   symbol = (v >> low_bits) & (2^symbol_bits - 1)                      (Huffman-coded)
//   raw    = (v >> (low_bits + symbol_bits)) << low_bits | (v & (2^low_bits - 1))
// so raw holds the bits above the symbol over the bits below it, raw_bits = 8 * value_bytes -
// symbol_bits of them (at most 8). Join puts them back. symbol_bits 0: the dtype is always stored.
//
// Failure: none (constexpr arithmetic on validated dtypes). Ownership: values. Threading: pure.
#pragma once

#include <cstdint>

namespace hoist::codec {

enum class DType : std::uint8_t {
  kBytes = 0,
  kBF16 = 1,
  kF16 = 2,
  kF32 = 3,
  kF8E4M3 = 4,
  kF8E5M2 = 5
};
inline constexpr int kDTypeCount = 6;

struct Split {
  std::uint8_t value_bytes = 1;
  std::uint8_t low_bits = 0;     // bits below the symbol, kept raw
  std::uint8_t symbol_bits = 0;  // 0: never coded
  constexpr std::uint32_t raw_bits() const {
    return symbol_bits == 0 ? 0 : 8u * value_bytes - symbol_bits;
  }
};

// Indexed by DType. BF16: sign | exponent (8, coded) | mantissa (7). F16: the high byte (sign,
// exponent, 2 mantissa bits) coded, the low byte raw. F8 E4M3 and E5M2: the low 7 bits
// (exponent and mantissa) coded, the sign raw (1 bit): block-quantized weights skew the mantissa
// of their upper binades too, and of the splits measured (docs/CODEC.md, "FP8") this one is the
// smallest.
inline constexpr Split kSplits[kDTypeCount] = {
    {1, 0, 0},  // bytes: stored
    {2, 7, 8},  // BF16
    {2, 8, 8},  // F16
    {4, 0, 0},  // F32: stored
    {1, 0, 7},  // F8_E4M3
    {1, 0, 7},  // F8_E5M2
};

constexpr Split SplitOf(DType dtype) { return kSplits[static_cast<int>(dtype)]; }

constexpr std::uint32_t SymbolOf(Split s, std::uint32_t v) {
  return (v >> s.low_bits) & ((1u << s.symbol_bits) - 1);
}
constexpr std::uint32_t RawOf(Split s, std::uint32_t v) {
  const std::uint32_t low = v & ((1u << s.low_bits) - 1);
  return (v >> (s.low_bits + s.symbol_bits)) << s.low_bits | low;
}
constexpr std::uint32_t Join(Split s, std::uint32_t symbol, std::uint32_t raw) {
  const std::uint32_t low = raw & ((1u << s.low_bits) - 1);
  return (raw >> s.low_bits) << (s.low_bits + s.symbol_bits) | symbol << s.low_bits | low;
}

static_assert(SymbolOf(kSplits[1], 0xBF80) == 0x7F && RawOf(kSplits[1], 0xBF80) == 0x80 &&
                  Join(kSplits[1], 0x7F, 0x80) == 0xBF80,
              "BF16: exponent coded, sign << 7 | mantissa raw");
static_assert(SymbolOf(kSplits[2], 0x3C01) == 0x3C && RawOf(kSplits[2], 0x3C01) == 0x01,
              "F16: high byte coded, low byte raw");
static_assert(SymbolOf(kSplits[4], 0xC5) == 0x45 && RawOf(kSplits[4], 0xC5) == 1 &&
                  Join(kSplits[4], 0x45, 1) == 0xC5,
              "F8: exponent and mantissa coded, sign raw");

}  // namespace hoist::codec
