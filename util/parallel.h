// ParallelFor: fn(0) .. fn(n - 1) on a few threads. ParallelTry: the same for an fn that can
// fail, with the error a plain loop would return.
//
// Ownership: none; fn and what it captures are borrowed for the call.
// Failure: ParallelFor none. ParallelTry returns the not-OK Status of the lowest index that
// failed, or OK. Indices are taken in order, and an index above one already failed is not
// started, so every index below the reported one ran and succeeded, whatever the scheduling: the
// same error as `for (i) HOIST_RETURN_IF_ERROR(fn(i))`, though indices above it may have run too.
// Threading: fn runs on the calling thread and up to threads - 1 threads of its own, all joined
// before the return; fn(i) for different i must be safe to run at once.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "hoist/status.h"

namespace hoist::util {

// Threads for n items of about equal cost: one per `per_thread` items (at least one), at most
// `most` and the machine's hardware threads. A few items stay on the calling thread: starting a
// thread costs tens of microseconds, a small load's whole set-up about a millisecond.
inline int ThreadsFor(std::uint64_t n, std::uint64_t per_thread, int most) {
  const std::uint64_t wanted = n / std::max<std::uint64_t>(per_thread, 1) + 1;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::min<std::uint64_t>(wanted, std::clamp(hw, 1, std::max(most, 1))));
}

template <typename Fn>
void ParallelFor(std::uint64_t n, int threads, Fn fn) {
  const std::uint64_t workers = std::min<std::uint64_t>(std::max(threads, 1), n);
  if (workers <= 1) {
    for (std::uint64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::uint64_t> next{0};
  auto work = [&] {
    for (std::uint64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  for (std::uint64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

template <typename Fn>
Status ParallelTry(std::uint64_t n, int threads, Fn fn) {
  std::atomic<std::uint64_t> failed_at{n};
  std::mutex mu;
  Status first;  // the failure at failed_at, under mu
  ParallelFor(n, threads, [&](std::uint64_t i) {
    if (i > failed_at.load(std::memory_order_relaxed)) return;  // a lower index failed
    Status s = fn(i);
    if (s.ok()) return;
    std::lock_guard lock(mu);
    if (i < failed_at.load()) {
      failed_at.store(i);
      first = std::move(s);
    }
  });
  return first;
}

}  // namespace hoist::util
