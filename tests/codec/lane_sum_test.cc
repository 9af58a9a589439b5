// The lane checksum of codec format 4 (codec/lane_sum.h): known answers from an independent
// implementation of its definition, what it must notice, and that the encoder stores it for every
// block (Huffman with T lanes, stored with lane::kStoredLanes) so that the decoders agree.
#include "codec/lane_sum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "tests/codec/codec_data.h"

namespace hoist::codec {
namespace {

std::vector<std::uint8_t> Ramp(std::size_t n) {
  std::vector<std::uint8_t> d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<std::uint8_t>((i * 7 + 3) % 256);
  return d;
}

// Computed by a separate Python implementation of the definition in docs/CODEC.md
// ("Block checksums"): per lane t, h = P5 + t * P1; per value v, h = rotl(h + v * P2, 13) * P1;
// the block's value is the XOR over lanes of xxHash32's avalanche of h.
TEST(LaneSum, KnownAnswers) {
  const std::vector<std::uint8_t> d = Ramp(1000);
  EXPECT_EQ(LaneChecksum(d.data(), 1000, 1, 256), 0x16dce51au);
  EXPECT_EQ(LaneChecksum(d.data(), 500, 2, 32), 0xfb68fbc5u);
  EXPECT_EQ(LaneChecksum(d.data(), 250, 4, 256), 0x1f474175u);
  EXPECT_EQ(LaneChecksum(d.data(), 7, 2, 1024), 0xe549fcf7u);  // fewer values than lanes
  EXPECT_EQ(LaneChecksum(d.data(), 0, 4, 256), 0xddc9ac85u);   // no values
}

// Every single-bit change of any value, and swapping two values (in one lane, across lanes, or
// between lanes' same positions), changes the checksum.
TEST(LaneSum, NoticesFlippedBitsAndSwappedValues) {
  std::uint64_t state = 17;
  std::vector<std::uint8_t> d(2 * 300);
  for (auto& b : d) b = static_cast<std::uint8_t>(testing::SplitMix(state));
  const std::uint32_t want = LaneChecksum(d.data(), 300, 2, 32);
  for (std::size_t bit = 0; bit < 8 * d.size(); ++bit) {
    d[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    EXPECT_NE(LaneChecksum(d.data(), 300, 2, 32), want) << "bit " << bit;
    d[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
  }
  for (auto [a, b] : {std::pair{3, 35}, std::pair{3, 4}, std::pair{0, 299}, std::pair{40, 72}}) {
    if (d[2 * a] == d[2 * b] && d[2 * a + 1] == d[2 * b + 1]) continue;
    std::vector<std::uint8_t> s = d;
    std::swap(s[2 * a], s[2 * b]);
    std::swap(s[2 * a + 1], s[2 * b + 1]);
    EXPECT_NE(LaneChecksum(s.data(), 300, 2, 32), want) << a << " <-> " << b;
  }
}

// Encode (format 4) stores, per block, the lane checksum of the block's original values; the
// lane count is the stream's T for coded blocks and kStoredLanes for stored ones.
TEST(LaneSum, TheEncoderStoresItPerBlock) {
  struct Case {
    DType dtype;
    std::vector<std::uint8_t> data;
    std::uint32_t sub_streams;
    bool huffman;
  };
  std::uint64_t state = 5;
  std::vector<std::uint8_t> f32(4 * 5000);
  for (auto& b : f32) b = static_cast<std::uint8_t>(testing::SplitMix(state));
  const std::vector<Case> cases = {
      {DType::kBF16, testing::NormalBf16(9000, 3, 0.02), 64, true},
      {DType::kF8E4M3, testing::BlockQuantizedF8(DType::kF8E4M3, 64, 150, 4), 128, true},
      {DType::kF32, f32, 256, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(DTypeName(c.dtype));
    EncodeOptions o;
    o.block_values = 1000;
    o.sub_streams = c.sub_streams;
    const auto stream = Encode(c.dtype, c.data, o);
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    const auto info = ParseStream(*stream, "t");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->version, 4);
    EXPECT_EQ(info->method == Method::kHuffman, c.huffman);
    const std::uint32_t vb = DTypeSize(c.dtype);
    const std::uint32_t lanes = c.huffman ? c.sub_streams : lane::kStoredLanes;
    for (std::uint32_t b = 0; b < info->block_count; ++b) {
      const std::uint8_t* values = c.data.data() + info->block_first_byte(b);
      EXPECT_EQ(info->block_checksums[b],
                LaneChecksum(values, info->block_value_count(b), vb, lanes))
          << "block " << b;
    }
  }
}

}  // namespace
}  // namespace hoist::codec
