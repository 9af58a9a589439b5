// Block-quantized E4M3 content for hoist-mkckpt (tools/fp8_content.h).
#include "tools/fp8_content.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace hoist::tools {
namespace {

constexpr std::uint64_t kBlock = 128;  // weight_block_size [128, 128]
constexpr float kE4M3Max = 448.0f;

std::uint64_t Mix(std::uint64_t z) {  // splitmix64
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// N(0, 1) for element i (Box-Muller, one of the pair).
float Weight(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t h = Mix(key ^ Mix(i));
  const float u1 = (static_cast<float>(h >> 40) + 1.0f) / 16777217.0f;  // (0, 1)
  const float u2 = static_cast<float>(h & 0xFFFFFF) / 16777216.0f;      // [0, 1)
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

}  // namespace

std::uint8_t ToE4M3(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::min(std::fabs(x), kE4M3Max);
  if (a < 0.015625f) {  // below 2^-6: a subnormal, a multiple of 2^-9 (8 rounds to 0x08)
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0f)));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const auto mantissa = static_cast<std::uint32_t>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));
  const std::uint32_t bits = static_cast<std::uint32_t>(e - 1 + 7) << 3;  // carries into e
  return static_cast<std::uint8_t>(sign | (bits + mantissa));
}

void BlockQuantizedE4M3(std::uint64_t key, std::uint64_t rows, std::uint64_t cols,
                        std::uint64_t begin, std::uint64_t end, std::uint8_t* out) {
  if (cols == 0) return;
  std::unordered_map<std::uint64_t, float> scale;  // block -> amax / 448
  const std::uint64_t col_blocks = (cols + kBlock - 1) / kBlock;
  auto scale_of = [&](std::uint64_t r, std::uint64_t c) {
    const std::uint64_t br = r / kBlock, bc = c / kBlock;
    auto [it, fresh] = scale.try_emplace(br * col_blocks + bc, 0.0f);
    if (fresh) {
      float amax = 0;
      for (std::uint64_t i = br * kBlock; i < std::min(rows, (br + 1) * kBlock); ++i) {
        for (std::uint64_t j = bc * kBlock; j < std::min(cols, (bc + 1) * kBlock); ++j) {
          amax = std::max(amax, std::fabs(Weight(key, i * cols + j)));
        }
      }
      it->second = amax / kE4M3Max;
    }
    return it->second;
  };
  for (std::uint64_t i = begin; i < end; ++i) {
    const std::uint64_t r = i / cols, c = i % cols;
    out[i - begin] = ToE4M3(Weight(key, i) / scale_of(r, c));
  }
}

}  // namespace hoist::tools
