// The GPU decoder against the original bytes, run only where a GPU is visible (skipped in
// CPU-only CI, and not built without nvcc).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <tuple>
#include <utility>

#include "tests/codec/codec_data.h"
#include "tests/test_paths.h"
#include "transport/devices/device.h"

#ifdef HOIST_HAVE_CODEC_CUDA
#include "codec/cuda/codec_decode.h"

namespace hoist::codec {
namespace {

#define GPU_OR_SKIP() \
  if (transport::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible on this machine"

void ExpectGpuDecodes(DType dtype, const std::vector<std::uint8_t>& data, const EncodeOptions& o) {
  const auto stream = *Encode(dtype, data, o);
  std::vector<std::uint8_t> out(data.size(), 0xA5);
  const Status s = transport::cuda::DecodeOnGpu(stream, out, "w");
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(out == data);
}

TEST(CodecGpu, DecodesRealisticAndAdversarialData) {
  GPU_OR_SKIP();
  EncodeOptions small;
  small.block_values = 1000;
  small.sub_streams = 64;
  for (const EncodeOptions& o : {EncodeOptions{}, small}) {
    for (std::size_t n : {1, 255, 1000, 65536, 65537, 3 << 20}) {
      SCOPED_TRACE(n);
      ExpectGpuDecodes(DType::kBF16, testing::NormalBf16(n, 3, 0.02), o);
      ExpectGpuDecodes(DType::kF16, testing::NormalF16(n, 4, 0.02), o);
    }
    std::vector<std::uint16_t> all(65536 * 4);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);
    auto mixed = testing::NormalBf16(1 << 22, 5, 0.02);
    std::memcpy(mixed.data(), all.data(), 2 * all.size() / 4);  // every pattern once, then normal
    ExpectGpuDecodes(DType::kBF16, mixed, o);
    ExpectGpuDecodes(DType::kBF16, testing::Bytes16(all), o);  // stored: nothing to gain
  }
}

// FP8 (E4M3, E5M2) against the original bytes and the CPU decoder: block-quantized weights,
// every byte pattern inside them, NaNs, odd sizes and block options.
TEST(CodecGpu, DecodesFp8LikeTheCpu) {
  GPU_OR_SKIP();
  EncodeOptions small;
  small.block_values = 1000;
  small.sub_streams = 64;
  EncodeOptions pack;  // what `hoist pack` writes for a 64 Ki-value block
  pack.sub_streams = 1024;
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const EncodeOptions& o : {pack, small}) {
      for (auto [rows, cols] : std::vector<std::pair<std::size_t, std::size_t>>{
               {1, 1}, {1, 255}, {3, 1001}, {256, 7168}, {1024, 1000}}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
        const auto data = testing::BlockQuantizedF8(dtype, rows, cols, rows * 31 + cols);
        std::vector<std::uint8_t> cpu(data.size());
        const auto stream = *Encode(dtype, data, o);
        ASSERT_TRUE(Decode(stream, cpu, "w").ok());
        ExpectGpuDecodes(dtype, data, o);
      }
      auto mixed = testing::BlockQuantizedF8(dtype, 512, 512, 3);
      for (int b = 0; b < 256; ++b) mixed[1000 * b + 7] = static_cast<std::uint8_t>(b);
      ExpectGpuDecodes(dtype, mixed, o);
      std::vector<std::uint8_t> nan(70001);
      for (std::size_t i = 0; i < nan.size(); ++i) nan[i] = (i % 3) ? 0xFF : 0x7F;
      ExpectGpuDecodes(dtype, nan, o);
    }
  }
}

// A stream of format 2 (u16 sub-stream lengths, the previous hoist's) decodes on the GPU too.
TEST(CodecGpu, DecodesAFormat2Stream) {
  GPU_OR_SKIP();
  for (const char* name : {"bf16_normal", "f16_normal"}) {
    std::ifstream in(hoist::testing::SourceDir() + "/tests/fuzz/codec_corpus/" + name,
                     std::ios::binary);
    const std::vector<std::uint8_t> stream{std::istreambuf_iterator<char>(in), {}};
    const auto info = ParseStream(stream, name);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_EQ(info->version, 2);
    std::vector<std::uint8_t> cpu(info->original_bytes), gpu(info->original_bytes, 0xA5);
    ASSERT_TRUE(Decode(stream, cpu, name).ok());
    const Status s = transport::cuda::DecodeOnGpu(stream, gpu, name);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(gpu, cpu) << name;
  }
}

TEST(CodecGpu, FlagsABadSubStream) {
  GPU_OR_SKIP();
  const auto data = testing::NormalBf16(70000, 6, 0.02);
  auto stream = *Encode(DType::kBF16, data);
  const auto info = *ParseStream(stream, "w");
  // Every sub-stream of block 1 claims one more bit: the base length of the block's lengths
  // region (a head word after the block's 4464 raw bytes, docs/CODEC.md).
  stream[info.header_bytes + info.block_offsets[1] + info.block_value_count(1)] += 1;
  std::vector<std::uint8_t> out(data.size());
  const Status s = transport::cuda::DecodeOnGpu(stream, out, "t.safetensors: w");
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("block 1 does not decode"), std::string::npos) << s.ToString();
}

// The tables a packed load's decoder builds on the device, against the host's BuildDecodeLut:
// codes of every depth (a Fibonacci-count tree at the 12-bit limit), a complete 8-bit code, one
// symbol alone (an incomplete code: entries without a code stay 0), random counts, and a stored
// stream's all-zero lengths.
TEST(CodecGpu, BuildsTheHostsDecodeTables) {
  GPU_OR_SKIP();
  std::vector<CodeLengths> lengths;
  SymbolCounts fib{};
  std::uint64_t a = 1, b = 1;
  for (int s = 0; s < 60; ++s) {
    fib[s * 3] = a;
    std::tie(a, b) = std::make_pair(b, a + b);
  }
  lengths.push_back(LimitedCodeLengths(fib, kLutBits));
  SymbolCounts flat{};
  flat.fill(5);
  lengths.push_back(LimitedCodeLengths(flat, kLutBits));
  SymbolCounts one{};
  one[77] = 9;
  lengths.push_back(LimitedCodeLengths(one, kLutBits));
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < 40; ++t) {
    SymbolCounts c{};
    for (auto& n : c) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      n = (x % 5 == 0) ? 0 : x % (1u << (t % 20));
    }
    c[t] += 1;  // at least one used symbol
    lengths.push_back(LimitedCodeLengths(c, 8 + t % 5));
  }
  lengths.push_back(CodeLengths{});
  for (const CodeLengths& l : lengths) {
    const bool stored = std::all_of(l.begin(), l.end(), [](std::uint8_t n) { return n == 0; });
    ASSERT_TRUE(stored || CodeLengthsValid(l, kLutBits));
  }
  auto got = transport::cuda::BuildCodecLutsOnGpu(lengths);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_TRUE((*got)[i] == BuildDecodeLut(lengths[i])) << "table " << i;
  }
  EXPECT_TRUE(std::any_of(got->front().begin(), got->front().end(), [](std::uint16_t e) {
    return (e >> 8) == kLutBits;
  })) << "the deep tree's table has no 12-bit code: the test would not reach the table's end";
}

}  // namespace
}  // namespace hoist::codec
#endif
