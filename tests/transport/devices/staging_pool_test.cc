// StagingPool (transport/devices/staging_pool.h): buffers come back only for the same device,
// kind and size; the capacity bounds what is kept, evicting oldest first; Trim returns everything.
#include "transport/devices/staging_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

namespace hoist::transport {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

// Distinct fake addresses (the pool never dereferences them).
std::byte* Addr(int i) {
  static std::array<std::byte, 64> base{};
  return base.data() + i;
}

HostBuffer Buf(int i, std::uint64_t bytes, StagingKind kind = StagingKind::kRegister) {
  return HostBuffer{Addr(i), bytes, kind};
}

TEST(StagingPoolTest, TakeMatchesDeviceKindAndSizeExactly) {
  StagingPool pool(64 * kMiB);
  EXPECT_TRUE(pool.Give(0, Buf(1, 8 * kMiB)).empty());
  EXPECT_FALSE(pool.Take(1, StagingKind::kRegister, 8 * kMiB));    // other device
  EXPECT_FALSE(pool.Take(0, StagingKind::kMallocHost, 8 * kMiB));  // other kind
  EXPECT_FALSE(pool.Take(0, StagingKind::kRegister, 4 * kMiB));    // other size
  std::optional<HostBuffer> b = pool.Take(0, StagingKind::kRegister, 8 * kMiB);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->ptr, Addr(1));
  EXPECT_EQ(pool.kept_bytes(), 0u);
  EXPECT_FALSE(pool.Take(0, StagingKind::kRegister, 8 * kMiB));  // handed out once only
}

TEST(StagingPoolTest, ARingGivenBackIsTakenBackWhole) {
  StagingPool pool;  // default capacity: two default rings at least
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(pool.Give(0, Buf(k, 8 * kMiB)).empty());
  std::vector<std::byte*> got;
  for (int k = 0; k < 4; ++k) {
    std::optional<HostBuffer> b = pool.Take(0, StagingKind::kRegister, 8 * kMiB);
    ASSERT_TRUE(b) << k;
    got.push_back(b->ptr);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::byte*>{Addr(0), Addr(1), Addr(2), Addr(3)}));
}

TEST(StagingPoolTest, CapacityEvictsOldestAndRefusesOversize) {
  StagingPool pool(20 * kMiB);
  EXPECT_TRUE(pool.Give(0, Buf(1, 8 * kMiB)).empty());
  EXPECT_TRUE(pool.Give(0, Buf(2, 8 * kMiB)).empty());
  std::vector<HostBuffer> out = pool.Give(0, Buf(3, 8 * kMiB));  // 24 > 20: the oldest goes
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ptr, Addr(1));
  EXPECT_EQ(pool.kept_bytes(), 16 * kMiB);
  out = pool.Give(0, Buf(4, 32 * kMiB));  // larger than the capacity: returned at once
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ptr, Addr(4));
  EXPECT_EQ(pool.kept_bytes(), 16 * kMiB);
  EXPECT_TRUE(pool.Give(0, HostBuffer{}).empty());  // null: nothing kept, nothing returned
}

TEST(StagingPoolTest, TrimReturnsOneDeviceOrAll) {
  StagingPool pool(64 * kMiB);
  pool.Give(0, Buf(1, kMiB));
  pool.Give(1, Buf(2, kMiB));
  pool.Give(0, Buf(3, kMiB, StagingKind::kMallocHost));
  std::vector<HostBuffer> dev0 = pool.Trim(0);
  EXPECT_EQ(dev0.size(), 2u);
  EXPECT_EQ(pool.kept_bytes(), kMiB);
  std::vector<HostBuffer> rest = pool.Trim();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].ptr, Addr(2));
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

}  // namespace
}  // namespace hoist::transport
