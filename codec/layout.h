// Internal to codec/: byte layout helpers shared by the encoder, the parser and the decoders
// (the GPU kernel repeats the block layout; docs/CODEC.md is the normative description).
//
// Failure: none (inputs are validated by the callers). Threading: ParallelFor runs `fn(i)` for
// i in [0, n) on up to `threads` threads and joins them before returning.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace hoist::codec::layout {

inline constexpr std::uint64_t kIdentityAt = 40;     // the stream's identity (StreamId)
inline constexpr std::uint64_t kCodeLengthsAt = 64;  // the code length of each byte value
inline constexpr std::uint64_t kFixedHeaderBytes = kCodeLengthsAt + 256;  // fields + lengths
inline constexpr std::uint32_t kMaxBlockValues = 1u << 22;
inline constexpr std::uint32_t kMaxSubStreams = 1024;
inline constexpr std::uint64_t kMaxOriginalBytes = std::uint64_t{1} << 48;

constexpr std::uint64_t Align(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

// Header: fixed part, block_count + 1 offsets (u64), block_count checksums (u32), zero padding,
// then the 8-byte header checksum, the total a multiple of 16.
constexpr std::uint64_t HeaderBytes(std::uint64_t block_count) {
  return Align(kFixedHeaderBytes + 8 * (block_count + 1) + 4 * block_count + 8, 16);
}
// A Huffman block: raw bytes (n, padded to 4), sub-stream bit lengths (u16 each, padded to 4),
// then the coded bits as 32-bit words.
constexpr std::uint64_t RawRegionBytes(std::uint64_t n) { return Align(n, 4); }
constexpr std::uint64_t LengthsRegionBytes(std::uint64_t sub_streams) {
  return Align(2 * sub_streams, 4);
}

template <typename T>
inline T Load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void Store(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <typename Fn>
void ParallelFor(std::uint64_t n, int threads, Fn fn) {
  const std::uint64_t workers = std::min<std::uint64_t>(std::max(threads, 1), n);
  if (workers <= 1) {
    for (std::uint64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::uint64_t> next{0};
  std::vector<std::thread> pool;
  for (std::uint64_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (std::uint64_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

}  // namespace hoist::codec::layout
