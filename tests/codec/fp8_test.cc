// FP8 (E4M3 and E5M2) coding: round trips against the original bytes on block-quantized weights
// (the independent converter of codec_data.h), every byte pattern, NaNs, odd sizes and tiny
// tensors; the size against the split's entropy bound (computed here, independently of
// codec::SplitEntropyBytes); stored fallback; and format 2 streams (written by the previous
// hoist, kept in tests/fuzz/codec_corpus) still decoding.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <utility>

#include "codec/codec.h"
#include "codec/split.h"
#include "tests/codec/codec_data.h"
#include "tests/test_paths.h"

namespace hoist::codec {
namespace {

using testing::BlockQuantizedF8;
using testing::Fp8BoundBytes;
using testing::RoundTrip;

Method MethodOf(const std::vector<std::uint8_t>& stream) {
  auto info = ParseStream(stream, "w");
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  return info.ok() ? info->method : Method::kStored;
}

TEST(CodecFp8, SplitTableRowsJoinBack) {
  for (DType d : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2}) {
    const Split s = SplitOf(d);
    EXPECT_EQ(s.raw_bits() + s.symbol_bits, 8u * s.value_bytes);
    for (std::uint32_t v = 0; v < (1u << (8 * s.value_bytes)); v += (s.value_bytes == 2 ? 7 : 1)) {
      ASSERT_EQ(Join(s, SymbolOf(s, v), RawOf(s, v)), v) << DTypeName(d) << " " << v;
    }
  }
  EXPECT_EQ(SplitOf(DType::kF32).symbol_bits, 0);
  EXPECT_EQ(SplitOf(DType::kBytes).symbol_bits, 0);
}

// The target: at least 15% fewer bytes on block-quantized FP8 (DeepSeek-V3's
// 7168-column rows and smaller).
TEST(CodecFp8, BlockQuantizedWeightsShrinkNearTheBound) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (auto [rows, cols] :
         std::vector<std::pair<std::size_t, std::size_t>>{{256, 7168}, {1024, 1000}}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + std::to_string(rows) + "x" +
                   std::to_string(cols));
      const auto data = BlockQuantizedF8(dtype, rows, cols, rows + cols);
      EncodeOptions o;
      o.sub_streams = 1024;  // 64 values a sub-stream, as `hoist pack` writes
      const auto stream = RoundTrip(dtype, data, o);
      EXPECT_EQ(MethodOf(stream), Method::kHuffman);
      const double size = static_cast<double>(stream.size());
      const double bound = Fp8BoundBytes(data);
      EXPECT_LE(size, 0.85 * static_cast<double>(data.size()));
      EXPECT_GE(size, bound);
      EXPECT_LE(size, bound + 0.02 * static_cast<double>(data.size()));  // table, lengths, ...
      EXPECT_NEAR(SplitEntropyBytes(dtype, data), bound, 1e-9 * bound);
    }
  }
}

TEST(CodecFp8, EveryBytePatternAloneIsStoredAndInsideWeightsIsCoded) {
  std::vector<std::uint8_t> all(256 * 64);
  std::iota(all.begin(), all.end(), 0);  // every byte, NaNs and +-0 included, 64 times
  std::uint64_t state = 9;
  for (std::size_t i = all.size(); i > 1; --i) {
    std::swap(all[i - 1], all[testing::SplitMix(state) % i]);
  }
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(dtype));
    EXPECT_EQ(MethodOf(RoundTrip(dtype, all)), Method::kStored);  // nothing to gain
    auto mixed = BlockQuantizedF8(dtype, 512, 512, 3);
    for (int b = 0; b < 256; ++b) mixed[1000 * b + 7] = static_cast<std::uint8_t>(b);
    const auto stream = RoundTrip(dtype, mixed);
    EXPECT_EQ(MethodOf(stream), Method::kHuffman);
    EXPECT_LT(stream.size(), mixed.size() * 0.86);
  }
}

TEST(CodecFp8, NansZerosAndOneSymbol) {
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(dtype));
    RoundTrip(dtype, std::vector<std::uint8_t>(5000, 0x7F));  // all NaN: one symbol, sign 0
    std::vector<std::uint8_t> nan(5001);
    for (std::size_t i = 0; i < nan.size(); ++i) nan[i] = (i * 7 % 3) ? 0xFF : 0x7F;  // +-NaN
    EXPECT_EQ(MethodOf(RoundTrip(dtype, nan)), Method::kHuffman);
    RoundTrip(dtype, std::vector<std::uint8_t>(4099, 0x80));  // -0 only
    const std::vector<std::uint8_t> specials = {0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01,
                                                0x81, 0x08, 0x7C, 0xFC, 0x7D, 0x03, 0x04};
    std::vector<std::uint8_t> v;
    for (int i = 0; i < 7000; ++i) v.push_back(specials[(i * 5 + i / 11) % specials.size()]);
    EXPECT_EQ(MethodOf(RoundTrip(dtype, v)), Method::kHuffman);
  }
}

TEST(CodecFp8, OddSizesTinyTensorsAndOptions) {
  const auto pool = BlockQuantizedF8(DType::kF8E4M3, 130, 131, 17);
  EncodeOptions small;
  small.block_values = 1000;
  small.sub_streams = 64;
  EncodeOptions odd;
  odd.block_values = 7;
  odd.sub_streams = 3;
  for (std::size_t n : {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 999, 1000, 1001, 4097, 17030}) {
    SCOPED_TRACE(n);
    const std::vector<std::uint8_t> data(pool.begin(), pool.begin() + n);
    for (const EncodeOptions& o : {small, odd, EncodeOptions{}}) {
      RoundTrip(DType::kF8E4M3, data, o);
      RoundTrip(DType::kF8E5M2, data, o);
    }
  }
}

TEST(CodecFp8, UniformBytesAreStoredAndHuffmanCanBeRefused) {
  std::vector<std::uint8_t> data(1 << 16);
  std::uint64_t state = 4;
  for (auto& b : data) b = static_cast<std::uint8_t>(testing::SplitMix(state));
  EXPECT_EQ(MethodOf(RoundTrip(DType::kF8E4M3, data)), Method::kStored);
  EncodeOptions stored;
  stored.allow_huffman = false;
  const auto weights = BlockQuantizedF8(DType::kF8E4M3, 256, 256, 5);
  const auto stream = RoundTrip(DType::kF8E4M3, weights, stored);
  EXPECT_EQ(MethodOf(stream), Method::kStored);
}

// Streams of formats 2 (u16 sub-stream lengths) and 3 (XXH64 block checksums), written by earlier
// hoists, still decode: their own block and tensor checksums prove the bytes, and re-encoding
// them (format 4) decodes alike.
TEST(CodecFp8, Format2And3StreamsStillDecode) {
  const std::pair<const char*, int> files[] = {{"bf16_normal", 2},      {"f16_normal", 2},
                                               {"bf16_zeros", 2},       {"bf16_one_value", 2},
                                               {"bf16_normal_v3", 3},   {"f8_e4m3_quantized", 3},
                                               {"f8_e5m2_quantized", 3}};
  for (const auto& [name, version] : files) {
    SCOPED_TRACE(name);
    std::ifstream in(hoist::testing::SourceDir() + "/tests/fuzz/codec_corpus/" + name,
                     std::ios::binary);
    const std::vector<std::uint8_t> stream{std::istreambuf_iterator<char>(in), {}};
    auto info = ParseStream(stream, name);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->version, version);
    if (std::string(name).find("normal") != std::string::npos) {
      EXPECT_EQ(info->method, Method::kHuffman);
    }
    std::vector<std::uint8_t> out(info->original_bytes);
    const Status s = Decode(stream, out, name);
    ASSERT_TRUE(s.ok()) << s.ToString();
    RoundTrip(info->dtype, out);
  }
}

}  // namespace
}  // namespace hoist::codec
