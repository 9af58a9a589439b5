// Device::TransposeInPlace on every backend this machine has (the host backend always, CUDA
// where a GPU is visible), against a naive element-by-element transpose of fresh deterministic
// bytes; and the refusals (bad element size, outside the arena, overflow).
#include "transport/devices/transpose.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "transport/devices/device.h"

namespace hoist::transport {
namespace {

std::vector<std::uint8_t> Random(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(gen());
  return v;
}

// Element (r, c) of each rows x cols matrix to (c, r).
std::vector<std::uint8_t> Naive(const std::vector<std::uint8_t>& in, std::uint64_t batch,
                                std::uint64_t rows, std::uint64_t cols, std::uint32_t es) {
  std::vector<std::uint8_t> out(in.size());
  for (std::uint64_t m = 0; m < batch; ++m) {
    for (std::uint64_t r = 0; r < rows; ++r) {
      for (std::uint64_t c = 0; c < cols; ++c) {
        std::memcpy(&out[((m * cols + c) * rows + r) * es], &in[((m * rows + r) * cols + c) * es],
                    es);
      }
    }
  }
  return out;
}

std::vector<std::unique_ptr<Device>> Devices() {
  std::vector<std::unique_ptr<Device>> out;
  out.push_back(OpenHostDevice());
  if (CudaDeviceCount() > 0) {
    auto d = OpenCudaDevice(0);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (d.ok()) out.push_back(std::move(*d));
  }
  return out;
}

TEST(TransposeTest, EveryBackendMatchesTheNaiveTranspose) {
  struct Shape {
    std::uint64_t batch, rows, cols;
    std::uint32_t es;
  };
  // Tiles of 32 and 64 elements a side, cut by odd edges; one row; one column; bf16 experts.
  const Shape kShapes[] = {{1, 1, 1, 2},   {3, 1, 77, 2},   {2, 77, 1, 4},  {5, 33, 65, 2},
                           {2, 64, 64, 1}, {1, 129, 70, 8}, {8, 128, 64, 2}};
  for (auto& dev : Devices()) {
    SCOPED_TRACE(dev->Name());
    std::uint32_t seed = 1;
    for (const Shape& s : kShapes) {
      const std::uint64_t bytes = s.batch * s.rows * s.cols * s.es;
      const std::vector<std::uint8_t> in = Random(bytes, seed++);
      auto arena = dev->Allocate(bytes + 256);
      ASSERT_TRUE(arena.ok()) << arena.status().ToString();
      auto* base = static_cast<std::byte*>(arena->ptr) + 128;  // not at the arena's start
      Copy2D up;
      up.dst = base;
      up.src = in.data();
      up.width = bytes;
      ASSERT_TRUE(dev->CopySync(up).ok());
      Transpose op{base, s.batch, s.rows, s.cols, s.es};
      ASSERT_TRUE(dev->TransposeInPlace(op).ok());
      std::vector<std::uint8_t> got(bytes);
      ASSERT_TRUE(dev->CopyToHost(got.data(), base, bytes).ok());
      EXPECT_EQ(got, Naive(in, s.batch, s.rows, s.cols, s.es))
          << s.batch << " x " << s.rows << " x " << s.cols << " of " << s.es;
      ASSERT_TRUE(dev->Free(*arena).ok());
    }
  }
}

TEST(TransposeTest, BadOperationsAreRefused) {
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(4096);
  ASSERT_TRUE(arena.ok());
  Transpose three{arena->ptr, 1, 4, 4, 3};
  EXPECT_EQ(dev->TransposeInPlace(three).code(), Code::kInvalidArgument);
  std::vector<std::byte> host(8192);  // memory of no arena of the device
  Transpose outside{host.data(), 2, 32, 32, 2};
  EXPECT_EQ(dev->TransposeInPlace(outside).code(), Code::kInvalidArgument);
  Transpose overflow{arena->ptr, 1, 1ull << 40, 1ull << 30, 2};
  EXPECT_EQ(CheckTranspose(overflow).status().code(), Code::kInvalidArgument);
  Transpose none{arena->ptr, 0, 4, 4, 2};
  EXPECT_TRUE(dev->TransposeInPlace(none).ok());
  ASSERT_TRUE(dev->Free(*arena).ok());
}

}  // namespace
}  // namespace hoist::transport
