// Crew (transport/crew.h): each run has every thread run the work once, with its own place,
// all at the same time; the same threads serve every run (they are made once, ahead); a crew
// that never runs stops cleanly.
#include "transport/crew.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

// What one run saw: each place's count and thread id.
struct Seen {
  std::mutex mu;
  std::vector<int> count;
  std::vector<std::thread::id> id;
  explicit Seen(int n) : count(n, 0), id(n) {}
  void Add(int t) {
    std::lock_guard lock(mu);
    ++count[t];
    id[t] = std::this_thread::get_id();
  }
};

TEST(CrewTest, EveryPlaceRunsOnceAndAllRunAtOnce) {
  constexpr int kThreads = 6;
  Crew crew(kThreads);
  EXPECT_EQ(crew.size(), kThreads);
  Seen seen(kThreads);
  std::atomic<int> arrived{0};
  std::atomic<bool> all_met{true};
  const Status s = crew.Run([&](int t) {
    seen.Add(t);
    // A barrier: returns only once every place has arrived (or fails after 20 s), so the run
    // could not finish if the crew ran its places one after another.
    arrived.fetch_add(1);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(20);
    while (arrived.load() < kThreads) {
      if (Clock::now() > deadline) {
        all_met = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(all_met.load());
  EXPECT_EQ(seen.count, std::vector<int>(kThreads, 1));
  const std::set<std::thread::id> ids(seen.id.begin(), seen.id.end());
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kThreads));
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u) << "the caller is not one of the crew";
}

TEST(CrewTest, TheSameThreadsServeEveryRun) {
  constexpr int kThreads = 4;
  Crew crew(kThreads);
  Seen first(kThreads), second(kThreads);
  ASSERT_TRUE(crew.Run([&](int t) { first.Add(t); }).ok());
  ASSERT_TRUE(crew.Run([&](int t) { second.Add(t); }).ok());
  EXPECT_EQ(second.count, std::vector<int>(kThreads, 1));
  EXPECT_EQ(first.id, second.id) << "a place keeps its thread from run to run";
}

TEST(CrewTest, RunWaitsForTheSlowestPlace) {
  Crew crew(3);
  std::atomic<int> done{0};
  ASSERT_TRUE(crew.Run([&](int t) {
                    if (t == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    done.fetch_add(1);
                  })
                  .ok());
  EXPECT_EQ(done.load(), 3);
}

TEST(CrewTest, ACrewThatNeverRunsStopsCleanly) {
  for (int n : {1, 2, 16}) {
    Crew crew(n);
    EXPECT_EQ(crew.size(), n);
  }
  Crew none(0);  // asked for none: one thread
  EXPECT_EQ(none.size(), 1);
  int ran = 0;
  ASSERT_TRUE(none.Run([&](int t) { ran += t + 1; }).ok());
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace hoist::transport
