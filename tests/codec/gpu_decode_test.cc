// The GPU decoder against the original bytes, run only where a GPU is visible (skipped in
// CPU-only CI, and not built without nvcc).
#include <gtest/gtest.h>

#include "tests/codec/codec_data.h"
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

TEST(CodecGpu, FlagsABadSubStream) {
  GPU_OR_SKIP();
  const auto data = testing::NormalBf16(70000, 6, 0.02);
  auto stream = *Encode(DType::kBF16, data);
  const auto info = *ParseStream(stream, "w");
  // Sub-stream 5 of block 1 claims one more bit (its lengths follow the block's 4464 raw bytes).
  stream[info.header_bytes + info.block_offsets[1] + info.block_value_count(1) + 2 * 5] += 1;
  std::vector<std::uint8_t> out(data.size());
  const Status s = transport::cuda::DecodeOnGpu(stream, out, "t.safetensors: w");
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("block 1 does not decode"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace hoist::codec
#endif
