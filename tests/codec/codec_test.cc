// Codec round trips against the original bytes (the independent reference), on realistic and
// adversarial data, and the compressed size of realistic BF16 weights.
#include "codec/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "codec/checksum.h"
#include "codec/huffman.h"
#include "tests/codec/codec_data.h"
#include "tools/mkckpt.h"

namespace hoist::codec {
namespace {

using testing::NormalBf16;
using testing::NormalF16;
using testing::RoundTrip;

double Ratio(const std::vector<std::uint8_t>& stream, std::size_t original) {
  return static_cast<double>(stream.size()) / static_cast<double>(original);
}

// The lossless bound of a split BF16 coder: (8 raw bits + entropy of the coded byte) / 16.
double EntropyBound(DType dtype, const std::vector<std::uint8_t>& data) {
  std::vector<double> counts(256, 0);
  for (std::size_t i = 0; i < data.size(); i += 2) {
    std::uint16_t v;
    std::memcpy(&v, &data[i], 2);
    ++counts[dtype == DType::kBF16 ? (v >> 7) & 0xFF : v >> 8];
  }
  const double n = static_cast<double>(data.size() / 2);
  double h = 0;
  for (double c : counts) h -= c > 0 ? c / n * std::log2(c / n) : 0;
  return (8 + h) / 16;
}

TEST(Xxh64, PublishedVectors) {
  EXPECT_EQ(Xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(Xxh64("a", 1), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(Xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  const char* text = "Nobody inspects the spammish repetition";
  EXPECT_EQ(Xxh64(text, std::strlen(text)), 0xFBCEA83C8A378BF1ull);
}

TEST(Huffman, LengthLimitHoldsOnADeepTree) {
  SymbolCounts counts{};
  std::uint64_t a = 1, b = 1;
  for (int s = 0; s < 60; ++s) {  // Fibonacci counts: plain Huffman is 59 deep
    counts[s] = a;
    std::tie(a, b) = std::make_pair(b, a + b);
  }
  for (int max_len : {8, 10, 12}) {
    const CodeLengths lengths = LimitedCodeLengths(counts, max_len);
    EXPECT_TRUE(CodeLengthsValid(lengths, max_len));
    for (int s = 0; s < 256; ++s) EXPECT_EQ(lengths[s] > 0, counts[s] > 0) << s;
    EXPECT_EQ(*std::max_element(lengths.begin(), lengths.end()), max_len);
  }
}

TEST(Huffman, TableDecodesEveryCanonicalCode) {
  SymbolCounts counts{};
  for (int s = 0; s < 256; ++s) counts[s] = (s % 7 == 0) ? 1000 + s : (s % 3 ? s + 1 : 0);
  const CodeLengths lengths = LimitedCodeLengths(counts, 12);
  ASSERT_TRUE(CodeLengthsValid(lengths, 12));
  const auto codes = CanonicalCodes(lengths);
  const DecodeLut lut = BuildDecodeLut(lengths);
  for (int s = 0; s < 256; ++s) {
    if (lengths[s] == 0) continue;
    const std::uint32_t index = std::uint32_t{codes[s]} << (kLutBits - lengths[s]);
    EXPECT_EQ(lut[index], lengths[s] << 8 | s) << s;
  }
}

TEST(Codec, RealisticBf16IsAtMost72Percent) {
  for (double sigma : {0.02, 0.002, 1.0}) {
    const auto data = NormalBf16(3 << 20, 7, sigma);
    const auto stream = RoundTrip(DType::kBF16, data);
    const double ratio = Ratio(stream, data.size()), bound = EntropyBound(DType::kBF16, data);
    EXPECT_LE(ratio, 0.72) << "sigma " << sigma;
    EXPECT_GE(ratio, bound) << "below the entropy bound: sigma " << sigma;
    EXPECT_LE(ratio, bound + 0.01) << "sigma " << sigma;  // Huffman + framing near the bound
  }
}

TEST(Codec, MkckptBf16IsAtMost72Percent) {
  const tools::TensorSpec spec{"model.layers.0.mlp.up_proj.weight", "BF16", {2048, 1024}};
  std::vector<std::uint8_t> data(spec.Bytes());
  tools::GenerateTensorBytes(spec, 1, 0, data.size(), data.data());
  const auto stream = RoundTrip(DType::kBF16, data);
  EXPECT_LE(Ratio(stream, data.size()), 0.72);
  EXPECT_GE(Ratio(stream, data.size()), EntropyBound(DType::kBF16, data));
}

TEST(Codec, F16RoundTripsAndShrinks) {
  const auto data = NormalF16((1 << 20) + 5, 11, 0.02);
  const auto stream = RoundTrip(DType::kF16, data);
  EXPECT_LT(Ratio(stream, data.size()), 0.9);
  EXPECT_GE(Ratio(stream, data.size()), EntropyBound(DType::kF16, data));
}

TEST(Codec, F32AndFp8PassThroughStored) {
  std::uint64_t state = 3;
  std::vector<std::uint8_t> data(1 << 18 | 12);
  for (auto& b : data) b = static_cast<std::uint8_t>(testing::SplitMix(state));
  for (DType dtype : {DType::kF32, DType::kF8E4M3, DType::kF8E5M2, DType::kBytes}) {
    const auto stream = RoundTrip(dtype, data);
    auto info = ParseStream(stream, "w");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->method, Method::kStored);
    EXPECT_EQ(stream.size(), info->header_bytes + data.size());
  }
}

TEST(Codec, EveryBf16AndF16BitPattern) {
  // All 65536 patterns (every exponent, +-0, subnormals, +-Inf, every NaN), shuffled: nothing
  // to gain, so stored; then the same patterns inside realistic data, so coded with rare codes.
  std::vector<std::uint16_t> all(65536);
  std::iota(all.begin(), all.end(), 0);
  std::uint64_t state = 5;
  for (std::size_t i = all.size(); i > 1; --i)
    std::swap(all[i - 1], all[testing::SplitMix(state) % i]);
  const auto every = testing::Bytes16(all);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const auto stream = RoundTrip(dtype, every);
    EXPECT_EQ(ParseStream(stream, "w")->method, Method::kStored);
  }
  auto mixed = NormalBf16(1 << 21, 9, 0.02);
  for (std::size_t i = 0; i < all.size(); ++i) std::memcpy(&mixed[64 * i + 6], &all[i], 2);
  const auto stream = RoundTrip(DType::kBF16, mixed);
  EXPECT_EQ(ParseStream(stream, "w")->method, Method::kHuffman);
  EXPECT_LE(Ratio(stream, mixed.size()), 0.72);
  RoundTrip(DType::kF16, mixed);
}

TEST(Codec, SpecialValuesAndSingleSymbol) {
  // Zeros only: one symbol (a 1-bit code). Then +-0, +-Inf, NaNs and subnormals alone.
  RoundTrip(DType::kBF16, std::vector<std::uint8_t>(20000, 0));
  const std::vector<std::uint16_t> specials = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0,
                                               0xFFC1, 0x7F81, 0x0001, 0x807F, 0x0040,
                                               0x7C00, 0xFC00, 0x7E00, 0x03FF, 0x8001};
  std::vector<std::uint16_t> v;
  for (int i = 0; i < 5000; ++i) v.push_back(specials[(i * 7 + i / 13) % specials.size()]);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const auto stream = RoundTrip(dtype, testing::Bytes16(v));
    EXPECT_EQ(ParseStream(stream, "w")->method, Method::kHuffman);
  }
}

TEST(Codec, SizesAroundBlockAndSubStreamBoundaries) {
  EncodeOptions small;
  small.block_values = 1024;
  small.sub_streams = 64;
  const auto pool = NormalBf16(4 * 1024 + 8, 13, 0.02);
  for (std::size_t n : {0, 1, 2, 3, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 4096 + 7}) {
    const std::vector<std::uint8_t> data(pool.begin(), pool.begin() + 2 * n);
    for (const EncodeOptions& o : {small, EncodeOptions{}}) {
      const auto stream = RoundTrip(DType::kBF16, data, o);
      auto info = ParseStream(stream, "w");
      ASSERT_TRUE(info.ok()) << n;
      EXPECT_EQ(info->block_count, (n + o.block_values - 1) / o.block_values) << n;
      RoundTrip(DType::kF16, data, o);
    }
  }
}

TEST(Codec, OddOptionsRoundTrip) {
  const auto data = NormalBf16(70001, 17, 0.02);
  for (auto [block, subs] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{
           {1, 1}, {7, 3}, {1000, 1}, {65536, 1024}, {100000, 1000}, {1 << 22, 1024}}) {
    EncodeOptions o;
    o.block_values = block;
    o.sub_streams = subs;
    o.threads = 4;
    SCOPED_TRACE(std::to_string(block) + " values x " + std::to_string(subs) + " sub-streams");
    RoundTrip(DType::kBF16, data, o);
  }
}

TEST(Codec, ThreadedEncodeIsIdentical) {
  const auto data = NormalBf16(300000, 19, 0.02);
  EncodeOptions one, many;
  many.threads = 4;
  EXPECT_EQ(*Encode(DType::kBF16, data, one), *Encode(DType::kBF16, data, many));
}

TEST(Codec, BadEncodeArguments) {
  const std::vector<std::uint8_t> odd(7, 1);
  EXPECT_EQ(Encode(DType::kBF16, odd).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Encode(DType::kF32, odd).status().code(), Code::kInvalidArgument);
  EncodeOptions o;
  o.block_values = 0;
  EXPECT_EQ(Encode(DType::kBF16, {}, o).status().code(), Code::kInvalidArgument);
  o = {};
  o.sub_streams = 2000;
  EXPECT_EQ(Encode(DType::kBF16, {}, o).status().code(), Code::kInvalidArgument);
  o = {};
  o.max_code_len = 13;
  EXPECT_EQ(Encode(DType::kBF16, {}, o).status().code(), Code::kInvalidArgument);
  o = {};
  o.sub_streams = 1;  // 65536 values of up to 12 bits do not fit a 16-bit length
  EXPECT_EQ(Encode(DType::kBF16, {}, o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoist::codec

namespace hoist::codec {
namespace {

// A loader reads a stream's header alone, then its blocks one by one (packed loads).
TEST(Codec, HeaderAloneAndBlockBytesMatchTheWholeStream) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const std::vector<std::uint8_t> data = dtype == DType::kBF16  ? NormalBf16(70001, 11, 0.02)
                                           : dtype == DType::kF16 ? NormalF16(70001, 12, 0.02)
                                                                  : NormalBf16(70002, 13, 0.02);
    EncodeOptions o;
    o.block_values = dtype == DType::kF32 ? 4099 : 8192;
    const auto stream = Encode(dtype, data, o);
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    const auto whole = ParseStream(*stream, "t");
    ASSERT_TRUE(whole.ok());
    const std::span<const std::uint8_t> head(stream->data(), whole->header_bytes);
    const auto info = ParseHeader(head, stream->size(), "t");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->block_offsets, whole->block_offsets);
    EXPECT_EQ(info->block_checksums, whole->block_checksums);
    EXPECT_EQ(info->content_checksum, whole->content_checksum);
    std::vector<std::uint8_t> out(data.size());
    for (std::uint32_t b = 0; b < info->block_count; ++b) {
      const std::uint64_t at = info->header_bytes + info->block_offsets[b];
      const std::uint64_t n = info->block_offsets[b + 1] - info->block_offsets[b];
      const std::uint64_t first = info->block_first_byte(b);
      const std::uint64_t bytes = info->block_value_count(b) * DTypeSize(dtype);
      const std::vector<std::uint8_t> copy(stream->begin() + at, stream->begin() + at + n);
      ASSERT_TRUE(DecodeBlockBytes(*info, b, copy, std::span(out).subspan(first, bytes), "t").ok());
    }
    EXPECT_EQ(out, data) << DTypeName(dtype);
  }
}

TEST(Codec, HeaderAloneIsCheckedAgainstTheStreamSize) {
  const std::vector<std::uint8_t> data = NormalBf16(20000, 21, 0.02);
  const auto stream = Encode(DType::kBF16, data);
  ASSERT_TRUE(stream.ok());
  const auto whole = ParseStream(*stream, "t");
  ASSERT_TRUE(whole.ok());
  const std::span<const std::uint8_t> head(stream->data(), whole->header_bytes);
  const auto longer = ParseHeader(head, stream->size() + 4, "shard: t");
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("shard: t"), std::string::npos);
  EXPECT_FALSE(ParseHeader(head.first(head.size() - 1), stream->size(), "t").ok());
  std::vector<std::uint8_t> bad(head.begin(), head.end());
  bad[300] ^= 1;  // a block offset: the header checksum catches it
  const auto damaged = ParseHeader(bad, stream->size(), "t");
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("checksum"), std::string::npos);
  // A block's bytes damaged: its decode is refused, naming the block.
  const std::uint64_t at = whole->header_bytes + whole->block_offsets[0];
  std::vector<std::uint8_t> blk(stream->begin() + at,
                                stream->begin() + at + whole->block_offsets[1]);
  blk[5] ^= 0x10;  // a raw byte: only the checksum sees it
  std::vector<std::uint8_t> out(whole->block_value_count(0) * 2);
  const Status s = DecodeBlockBytes(*whole, 0, blk, out, "t");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("block 0 checksum"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace hoist::codec
