// XXH64 as specified in xxHash's doc/xxhash_spec.md (little-endian reads).
#include "codec/checksum.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "codec/lane_sum.h"
#include "codec/layout.h"

namespace hoist::codec {
namespace {

constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline std::uint64_t Rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline std::uint64_t Read64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t Read32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint64_t Round(std::uint64_t acc, std::uint64_t input) {
  acc += input * kP2;
  return Rotl(acc, 31) * kP1;
}
inline std::uint64_t Merge(std::uint64_t acc, std::uint64_t v) {
  acc ^= Round(0, v);
  return acc * kP1 + kP4;
}

}  // namespace

std::uint64_t Xxh64(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;  // offsets, not pointer arithmetic: `data` may be null when size is 0
  std::uint64_t h;
  if (size >= 32) {
    std::uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (; i + 32 <= size; i += 32) {
      v1 = Round(v1, Read64(p + i));
      v2 = Round(v2, Read64(p + i + 8));
      v3 = Round(v3, Read64(p + i + 16));
      v4 = Round(v4, Read64(p + i + 24));
    }
    h = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18);
    h = Merge(Merge(Merge(Merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<std::uint64_t>(size);
  for (; i + 8 <= size; i += 8) h = Rotl(h ^ Round(0, Read64(p + i)), 27) * kP1 + kP4;
  if (i + 4 <= size) {
    h = Rotl(h ^ (static_cast<std::uint64_t>(Read32(p + i)) * kP1), 23) * kP2 + kP3;
    i += 4;
  }
  for (; i < size; ++i) h = Rotl(h ^ (p[i] * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

namespace {

// Values in chunks of `lanes`, so that the inner loop runs over independent lanes (it vectorizes).
template <typename V>
std::uint32_t Lanes(const std::uint8_t* data, std::uint64_t values, std::uint32_t lanes) {
  std::array<std::uint32_t, layout::kMaxSubStreams> h;
  for (std::uint32_t t = 0; t < lanes; ++t) h[t] = lane::Seed(t);
  for (std::uint64_t k = 0; k < values; k += lanes) {
    const std::uint32_t m = static_cast<std::uint32_t>(std::min<std::uint64_t>(lanes, values - k));
    const std::uint8_t* p = data + k * sizeof(V);
    for (std::uint32_t t = 0; t < m; ++t) {
      V v;
      std::memcpy(&v, p + t * sizeof(V), sizeof(V));
      h[t] = lane::Round(h[t], v);
    }
  }
  std::uint32_t sum = 0;
  for (std::uint32_t t = 0; t < lanes; ++t) sum ^= lane::Finish(h[t]);
  return sum;
}

}  // namespace

std::uint32_t LaneChecksum(const std::uint8_t* data, std::uint64_t values,
                           std::uint32_t value_bytes, std::uint32_t lanes) {
  lanes = std::clamp<std::uint32_t>(lanes, 1, layout::kMaxSubStreams);
  switch (value_bytes) {
    case 2:
      return Lanes<std::uint16_t>(data, values, lanes);
    case 4:
      return Lanes<std::uint32_t>(data, values, lanes);
    default:
      return Lanes<std::uint8_t>(data, values, lanes);
  }
}

std::uint32_t BlockChecksum(std::uint16_t version, std::uint32_t sub_streams,
                            std::uint32_t value_bytes, const std::uint8_t* data,
                            std::uint64_t bytes) {
  if (version < layout::kLaneSumVersion) return static_cast<std::uint32_t>(Xxh64(data, bytes));
  const std::uint32_t lanes = sub_streams != 0 ? sub_streams : lane::kStoredLanes;
  return LaneChecksum(data, bytes / value_bytes, value_bytes, lanes);
}

}  // namespace hoist::codec
