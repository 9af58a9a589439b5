#include "util/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
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
// On several threads, 41 and 42 are made to run at once and fail in either order (the one that
// fails second waits for the other to start, then for a while): the report is 41's both ways.
TEST(ParallelTry, ReturnsTheLowestFailingIndexAsALoopWould) {
  const std::set<std::uint64_t> failing = {977, 403, 404, 41, 42, 650};
  for (bool low_fails_first : {true, false}) {
    for (int threads : {1, 2, 3, 8}) {
      for (int run = 0; run < 5; ++run) {
        std::vector<std::atomic<int>> runs(1000);
        std::atomic<bool> started41{false}, started42{false};
        // Both in flight, then the one that fails second pauses.
        auto meet = [&](std::atomic<bool>& mine, std::atomic<bool>& other, bool second) {
          mine = true;
          if (threads == 1) return;
          while (!other.load()) std::this_thread::yield();
          if (second) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        };
        const Status s = ParallelTry(runs.size(), threads, [&](std::uint64_t i) {
          runs[i].fetch_add(1);
          if (i == 41) meet(started41, started42, !low_fails_first);
          if (i == 42) meet(started42, started41, low_fails_first);
          return failing.count(i) ? Status::Corrupt("index " + std::to_string(i)) : Status::Ok();
        });
        ASSERT_EQ(s.code(), Code::kCorrupt);
        EXPECT_EQ(s.message(), "index 41") << threads << " threads";
        for (std::uint64_t i = 0; i <= 41; ++i) ASSERT_EQ(runs[i].load(), 1) << i;
      }
    }
  }
}

TEST(ThreadsFor, OneThreadPerShareCappedByTheMostAndTheMachine) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(ThreadsFor(0, 128, 16), 1);
  EXPECT_EQ(ThreadsFor(127, 128, 16), 1);
  EXPECT_EQ(ThreadsFor(128, 128, 16), std::min(2, hw));
  EXPECT_EQ(ThreadsFor(1'000'000, 128, 16), std::min(16, hw));
  EXPECT_EQ(ThreadsFor(1'000'000, 128, 0), 1);
  EXPECT_EQ(ThreadsFor(5, 0, 16), std::min(6, std::min(16, hw)));
}

TEST(ParallelTry, NothingToDoIsOk) {
  EXPECT_TRUE(ParallelTry(0, 4, [](std::uint64_t) { return Status::Internal("ran"); }).ok());
}

}  // namespace
}  // namespace hoist::util
