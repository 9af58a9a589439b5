// Deterministic test data for the codec tests: normal-distributed weights rounded to BF16 or
// F16, or block-quantized to FP8, by independent converters (round to nearest even), and
// helpers to round-trip a tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/codec.h"

namespace hoist::codec::testing {

inline std::uint64_t SplitMix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// N(0, sigma) by Box-Muller from splitmix64.
inline std::vector<float> NormalFloats(std::size_t n, std::uint64_t seed, double sigma) {
  std::vector<float> out(n);
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(SplitMix(state) >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = static_cast<double>(SplitMix(state) >> 11) / 9007199254740992.0;
    const double r = sigma * std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
  }
  return out;
}

inline std::uint16_t Bf16(float f) {  // round to nearest even (finite inputs)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

inline std::uint16_t F16(float f) {  // finite |f| < 65504, round to nearest even
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (a < 6.103515625e-05f) {  // subnormal half: a multiple of 2^-24
    return static_cast<std::uint16_t>(sign |
                                      static_cast<std::uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  std::uint32_t m;
  std::memcpy(&m, &a, 4);
  const std::uint32_t exp = (m >> 23) - 127 + 15;
  std::uint32_t half = exp << 10 | ((m >> 13) & 0x3FF);
  const std::uint32_t rest = m & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

inline std::vector<std::uint8_t> Bytes16(const std::vector<std::uint16_t>& v) {
  std::vector<std::uint8_t> out(2 * v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline std::vector<std::uint8_t> NormalBf16(std::size_t n, std::uint64_t seed, double sigma) {
  std::vector<std::uint16_t> v;
  for (float f : NormalFloats(n, seed, sigma)) v.push_back(Bf16(f));
  return Bytes16(v);
}

inline std::vector<std::uint8_t> NormalF16(std::size_t n, std::uint64_t seed, double sigma) {
  std::vector<std::uint16_t> v;
  for (float f : NormalFloats(n, seed, sigma)) v.push_back(F16(f));
  return Bytes16(v);
}

// FP8 by an independent converter: the nearest value of `exp_bits` exponent and `man_bits`
// mantissa bits (bias 2^(exp_bits-1) - 1, subnormals), ties to even, |f| saturated at `max`
// (448 for E4M3 fn, 57344 for E5M2).
inline std::uint8_t MiniFloat(float f, int exp_bits, int man_bits, float max) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), max);
  if (a < std::ldexp(1.0f, 1 - bias)) {  // subnormal: multiples of 2^(1 - bias - man_bits)
    return static_cast<std::uint8_t>(
        sign | static_cast<int>(std::nearbyint(std::ldexp(a, bias - 1 + man_bits))));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // [0.5, 1)
  const int mant =
      static_cast<int>(std::nearbyint((2 * m - 1) * static_cast<float>(1 << man_bits)));
  return static_cast<std::uint8_t>(sign | (((e - 1 + bias) << man_bits) + mant));
}

// A rows x cols weight of N(0, 1) values block-quantized as FP8 checkpoints are: per 128 x 128
// block, scale = amax / max, value = FP8(w / scale).
inline std::vector<std::uint8_t> BlockQuantizedF8(DType dtype, std::size_t rows, std::size_t cols,
                                                  std::uint64_t seed) {
  const bool e4m3 = dtype == DType::kF8E4M3;
  const float max = e4m3 ? 448.0f : 57344.0f;
  const std::vector<float> w = NormalFloats(rows * cols, seed, 1.0);
  std::vector<std::uint8_t> out(rows * cols);
  for (std::size_t br = 0; br < rows; br += 128) {
    for (std::size_t bc = 0; bc < cols; bc += 128) {
      const std::size_t r1 = std::min(rows, br + 128), c1 = std::min(cols, bc + 128);
      float amax = 0;
      for (std::size_t r = br; r < r1; ++r) {
        for (std::size_t c = bc; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const float scale = amax > 0 ? amax / max : 1.0f;
      for (std::size_t r = br; r < r1; ++r) {
        for (std::size_t c = bc; c < c1; ++c) {
          out[r * cols + c] = e4m3 ? MiniFloat(w[r * cols + c] / scale, 4, 3, max)
                                   : MiniFloat(w[r * cols + c] / scale, 5, 2, max);
        }
      }
    }
  }
  return out;
}

// Encodes `data`, decodes it whole (1 and 3 threads) and block by block (last block first),
// and expects the original bytes every time. Returns the stream.
inline std::vector<std::uint8_t> RoundTrip(DType dtype, const std::vector<std::uint8_t>& data,
                                           const EncodeOptions& options = {}) {
  auto encoded = Encode(dtype, data, options);
  EXPECT_TRUE(encoded.ok()) << encoded.status().ToString();
  if (!encoded.ok()) return {};
  const std::vector<std::uint8_t>& stream = *encoded;
  for (int threads : {1, 3}) {
    std::vector<std::uint8_t> out(data.size(), 0xA5);
    const Status s = Decode(stream, out, "t.safetensors: w", threads);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(out == data) << "whole decode differs, threads " << threads;
  }
  auto info = ParseStream(stream, "t.safetensors: w");
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  if (!info.ok()) return stream;
  std::vector<std::uint8_t> pieces(data.size(), 0x5A);
  for (std::uint32_t b = info->block_count; b-- > 0;) {
    const std::uint64_t bytes = info->block_value_count(b) * DTypeSize(dtype);
    const Status s = DecodeBlock(*info, stream, b,
                                 std::span(pieces).subspan(info->block_first_byte(b), bytes), "w");
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_TRUE(pieces == data) << "block-by-block decode differs";
  return stream;
}

// The entropy bound of FP8 under its split (computed here, not by the codec): one raw bit (the
// sign) and the entropy of the other 7 bits, per value, in bytes.
inline double Fp8BoundBytes(const std::vector<std::uint8_t>& data) {
  std::vector<double> counts(128, 0);
  for (std::uint8_t b : data) ++counts[b & 0x7F];
  const double n = static_cast<double>(data.size());
  double bits = n;
  for (double c : counts) bits -= c > 0 ? c * std::log2(c / n) : 0;
  return bits / 8;
}

}  // namespace hoist::codec::testing
