#include "util/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace hoist::util {
namespace {

TEST(ParallelTry, RunsEveryIndexOnceWhenAllSucceed) {
  for (int threads : {1, 2, 4, 16}) {
    std::vector<std::atomic<int>> runs(1000);
    const Status s = ParallelTry(runs.size(), threads, [&](std::uint64_t i) {
      runs[i].fetch_add(1);
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (std::size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << i;
  }
}

// What a plain loop would return: the lowest failing index's error, every index below it run.
TEST(ParallelTry, ReturnsTheLowestFailingIndexAsALoopWould) {
  const std::set<std::uint64_t> failing = {977, 403, 404, 41, 650};
  for (int threads : {1, 2, 3, 8}) {
    for (int run = 0; run < 20; ++run) {
      std::vector<std::atomic<int>> runs(1000);
      const Status s = ParallelTry(runs.size(), threads, [&](std::uint64_t i) {
        runs[i].fetch_add(1);
        return failing.count(i) ? Status::Corrupt("index " + std::to_string(i)) : Status::Ok();
      });
      ASSERT_EQ(s.code(), Code::kCorrupt);
      EXPECT_EQ(s.message(), "index 41") << threads << " threads";
      for (std::uint64_t i = 0; i <= 41; ++i) ASSERT_EQ(runs[i].load(), 1) << i;
    }
  }
}

TEST(ParallelTry, NothingToDoIsOk) {
  EXPECT_TRUE(ParallelTry(0, 4, [](std::uint64_t) { return Status::Internal("ran"); }).ok());
}

}  // namespace
}  // namespace hoist::util
