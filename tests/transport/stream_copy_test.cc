// StreamCopy (transport/stream_copy.h): every size across the memcpy threshold and every
// alignment of source and destination copies exactly the source bytes and writes nothing outside
// the destination, checked byte by byte against the source.
#include "transport/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hoist::transport {
namespace {

TEST(StreamCopyTest, EverySizeAndAlignmentCopiesExactlyTheSource) {
  constexpr std::size_t kMax = 3 * kStreamCopyMinBytes + 200;
  std::vector<std::uint8_t> src(kMax + 64), dst(kMax + 128);
  std::uint32_t x = 12345;
  for (auto& b : src) {
    x = x * 1664525u + 1013904223u;  // fresh, non-zero bytes
    b = static_cast<std::uint8_t>(x >> 24);
  }
  const std::vector<std::size_t> sizes = {0,    1,    15,   16,   17,   63,   64,
                                          65,   1023, 1024, 1025, 1040, 2047, 2048,
                                          2049, 3000, 3071, 3072, 3073, kMax};
  for (std::size_t n : sizes) {
    for (std::size_t sa = 0; sa < 17; sa += 3) {
      for (std::size_t da = 0; da < 33; da += 5) {
        std::fill(dst.begin(), dst.end(), std::uint8_t{0xEE});
        StreamCopy(dst.data() + da, src.data() + sa, n);
        StreamFence();
        for (std::size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= da && i < da + n;
          const std::uint8_t want = inside ? src[sa + (i - da)] : std::uint8_t{0xEE};
          ASSERT_EQ(dst[i], want) << "n " << n << " src+" << sa << " dst+" << da << " at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hoist::transport
