// The fill threads' core gate (transport/staging/core_gate.h): never more holders than cores,
// waiters served lowest ticket first whatever order they arrived in, holds dropped and taken
// again, and an open gate never waits.
#include "transport/staging/core_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace hoist::transport::pipeline_internal {
namespace {

void WaitForWaiters(CoreGate& gate, int n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (gate.waiting() < n) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "waiters never queued";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(CoreGateTest, NeverMoreHoldersThanCores) {
  for (int cores : {1, 2, 3}) {
    SCOPED_TRACE("cores " + std::to_string(cores));
    CoreGate gate(cores);
    std::atomic<int> inside{0}, most{0}, passes{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 300; ++i) {
          CoreGate::Hold core(gate);
          core.Take(static_cast<std::uint64_t>(i * 8 + t));
          const int now = ++inside;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          std::this_thread::yield();
          --inside;
          ++passes;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(passes.load(), 8 * 300);
    EXPECT_LE(most.load(), cores);
    EXPECT_GE(most.load(), 1);
    EXPECT_EQ(gate.waiting(), 0);
  }
}

// One core held; four threads queue with tickets in scrambled order; each, once in, records its
// ticket and leaves: they get the core in ticket order.
TEST(CoreGateTest, LowestTicketFirst) {
  CoreGate gate(1);
  gate.Enter(0);
  std::mutex mu;
  std::vector<std::uint64_t> order;
  std::vector<std::thread> threads;
  for (std::uint64_t ticket : {7u, 3u, 9u, 1u, 5u}) {
    threads.emplace_back([&, ticket] {
      CoreGate::Hold core(gate);
      core.Take(ticket);
      std::lock_guard lock(mu);
      order.push_back(ticket);
    });
  }
  WaitForWaiters(gate, 5);
  EXPECT_TRUE(order.empty());
  gate.Leave();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<std::uint64_t>{1, 3, 5, 7, 9}));
}

// A ticket lower than every waiter's that arrives while they wait is served before them.
TEST(CoreGateTest, ALateLowTicketOvertakesTheQueue) {
  CoreGate gate(1);
  gate.Enter(10);
  std::mutex mu;
  std::vector<std::uint64_t> order;
  auto run = [&](std::uint64_t ticket) {
    CoreGate::Hold core(gate);
    core.Take(ticket);
    std::lock_guard lock(mu);
    order.push_back(ticket);
  };
  std::thread a(run, 20), b(run, 30);
  WaitForWaiters(gate, 2);
  std::thread c(run, 11);
  WaitForWaiters(gate, 3);
  gate.Leave();
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(order, (std::vector<std::uint64_t>{11, 20, 30}));
}

// A hold dropped while its thread waits elsewhere (a cold read) lets another thread in, and is
// taken again after it; taking a held core or dropping a free one changes nothing.
TEST(CoreGateTest, AHoldDroppedAndTakenAgain) {
  CoreGate gate(1);
  CoreGate::Hold a(gate);
  a.Take(1);
  a.Take(1);  // held: no second Enter (would wait forever on one core)
  std::atomic<bool> b_in{false};
  std::thread b([&] {
    CoreGate::Hold h(gate);
    h.Take(2);
    b_in = true;
  });
  WaitForWaiters(gate, 1);
  EXPECT_FALSE(b_in.load());
  a.Drop();
  a.Drop();  // free: no second Leave
  b.join();
  EXPECT_TRUE(b_in.load());
  a.Take(3);  // b's hold ended with its scope: the core is free again
  EXPECT_EQ(gate.waiting(), 0);
}

TEST(CoreGateTest, AnOpenGateNeverWaits) {
  CoreGate gate(0);
  EXPECT_TRUE(gate.open());
  for (std::uint64_t i = 0; i < 100; ++i) gate.Enter(i);  // would block at the first if gated
  for (int i = 0; i < 100; ++i) gate.Leave();
  EXPECT_EQ(gate.waiting(), 0);
  EXPECT_FALSE(CoreGate(2).open());
}

}  // namespace
}  // namespace hoist::transport::pipeline_internal
