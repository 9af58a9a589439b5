// Residency (transport/reading/residency.h): its arithmetic matches a page-by-page count, and a
// measured file is resident where it was just written and not where it was evicted.
#include "transport/reading/residency.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/transport/test_util.h"

namespace hoist::transport {
namespace {

using testtransport::Pattern;
using testtransport::ScratchDir;
using testtransport::WriteFile;

TEST(ResidencyTest, ArithmeticMatchesPageByPageCount) {
  const std::uint64_t page = 4096, size = 10 * page + 123;
  std::vector<unsigned char> pages = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1};
  Residency r = Residency::FromPages(size, page, pages);
  auto slow = [&](std::uint64_t off, std::uint64_t n) {
    std::uint64_t t = 0;
    for (std::uint64_t b = off; b < off + n && b < size; ++b) t += pages[b / page];
    return t;
  };
  for (std::uint64_t off : {0ull, 1ull, 4095ull, 4096ull, 5000ull, 20000ull, 40000ull}) {
    for (std::uint64_t n : {0ull, 1ull, 100ull, 4096ull, 9000ull, 30000ull, 100000ull}) {
      EXPECT_EQ(r.ResidentBytes(off, n), slow(off, n)) << off << "+" << n;
    }
  }
  std::uint64_t strided = 0;
  for (int i = 0; i < 6; ++i) strided += slow(100 + i * 7000, 3000);
  EXPECT_EQ(r.ResidentBytes(100, 7000, 3000, 6), strided);
  EXPECT_EQ(r.TotalResident(), slow(0, size));
  EXPECT_EQ(Residency::Uniform(size, true).TotalResident(), size);
  EXPECT_EQ(Residency::Uniform(size, false).TotalResident(), 0u);
}

TEST(ResidencyTest, MeasuresAFreshFileAsResidentAndEvictedRangeAsNot) {
  ScratchDir dir;
  const std::uint64_t size = 4 << 20;
  WriteFile(dir.Sub("f"), Pattern(size, 2));
  auto all = Residency::Measure(dir.Sub("f"), 2);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), size);
  EXPECT_EQ(all->TotalResident(), size) << "just written, method " << all->method();
  if (!testtransport::Evict(dir.Sub("f"), size / 2, size / 2)) GTEST_SKIP() << "no fadvise";
  auto half = Residency::Measure(dir.Sub("f"), 1);
  ASSERT_TRUE(half.ok());
  if (half->ResidentBytes(size / 2, size / 2) == size / 2) {
    GTEST_SKIP() << "this filesystem keeps pages after POSIX_FADV_DONTNEED";
  }
  EXPECT_EQ(half->ResidentBytes(0, size / 2), size / 2);
  EXPECT_LT(half->ResidentBytes(size / 2, size / 2), size / 2);
}

}  // namespace
}  // namespace hoist::transport
