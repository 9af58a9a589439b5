// Internal to codec/: byte layout helpers shared by the encoder, the parser and the decoders
// (the GPU kernel repeats the block layout; docs/CODEC.md is the normative description).
//
// Failure: none (inputs are validated by the callers). Threading: pure (the callers spread blocks
// over threads with util::ParallelFor).
#pragma once

#include <cstdint>
#include <cstring>

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
// A Huffman block (docs/CODEC.md, "Byte layout"): the raw region (raw_bits per value, least
// significant bit first, padded to 4 bytes), the sub-stream lengths region, then the coded bits
// as 32-bit words. Format 2 (BF16/F16 only, 8 raw bits) stores each length as a u16; format 3
// stores a u32 head word (base | width << 16) and one `width`-bit field per sub-stream (length =
// base + field), padded to 4 bytes.
inline constexpr std::uint16_t kU16LengthsVersion = 2;  // the last format with u16 lengths
// The first format whose block checksums are lane checksums (codec/lane_sum.h); 2 and 3 store the
// low 32 bits of each block's XXH64.
inline constexpr std::uint16_t kLaneSumVersion = 4;
inline constexpr std::uint64_t kLengthsHeadBytes = 4;
inline constexpr std::uint32_t kMaxLengthWidth = 16;

constexpr std::uint64_t RawRegionBytes(std::uint64_t n, std::uint32_t raw_bits) {
  return Align((n * raw_bits + 7) / 8, 4);
}
constexpr std::uint64_t U16LengthsBytes(std::uint64_t sub_streams) {
  return Align(2 * sub_streams, 4);
}
constexpr std::uint64_t PackedLengthsBytes(std::uint64_t sub_streams, std::uint32_t width) {
  return kLengthsHeadBytes + Align((sub_streams * width + 7) / 8, 4);
}
// The smallest lengths region a block of `version` can have (exact for format 2).
constexpr std::uint64_t MinLengthsBytes(std::uint16_t version, std::uint64_t sub_streams) {
  return version <= kU16LengthsVersion ? U16LengthsBytes(sub_streams) : kLengthsHeadBytes;
}
// Bits needed for x (0 for 0).
constexpr std::uint32_t BitWidth(std::uint32_t x) {
  std::uint32_t w = 0;
  for (; x != 0; x >>= 1) ++w;
  return w;
}

// Bits [bit, bit + width) of the little-endian bit string at p (width <= 25); reads only the
// bytes that hold them.
inline std::uint32_t BitField(const std::uint8_t* p, std::uint64_t bit, std::uint32_t width) {
  if (width == 0) return 0;
  const std::uint8_t* q = p + bit / 8;
  const std::uint32_t shift = static_cast<std::uint32_t>(bit % 8);
  const std::uint32_t bytes = (shift + width + 7) / 8;
  std::uint32_t v = 0;
  for (std::uint32_t i = 0; i < bytes; ++i) v |= std::uint32_t{q[i]} << (8 * i);
  return (v >> shift) & ((1u << width) - 1);
}
// ORs `value` (< 2^width) into bits [bit, bit + width) of the zeroed bit string at p.
inline void PutBitField(std::uint8_t* p, std::uint64_t bit, std::uint32_t width,
                        std::uint32_t value) {
  for (std::uint32_t i = 0; i < width; ++i, ++bit) {
    p[bit / 8] = static_cast<std::uint8_t>(p[bit / 8] | ((value >> i) & 1u) << (bit % 8));
  }
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

}  // namespace hoist::codec::layout
