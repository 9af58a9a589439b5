// The fill threads' core gate (internal to transport/staging/): at most `cores` of them work at
// once (copy resident bytes, submit a slot), the lowest task first.
//
// Why: fill threads beyond the cores a rank owns (a user's --threads, a CPU quota) time-slice the
// copies of every slot in flight, so the oldest slot, the one the DMA engine waits for, fills
// slowest and the engine idles (measured on an H200: a tp 2 rank on 8 cores loaded in 81 ms with 8
// threads and 138 ms with 16). Behind the gate a thread beyond the cores sleeps until a core's
// copy ends, and the task the DMA engine needs soonest gets the core first. Reads that wait on a
// disk (cold O_DIRECT batches) do not take a core: their depth is what the extra threads are for.
//
// Ownership: none (plain state). Failure: none; every Enter is matched by a Leave (Hold), so a
// failing thread still hands its core on. Threading: any number of threads; each waiter sleeps
// on its own condition variable (no herd).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <queue>
#include <vector>

namespace hoist::transport::pipeline_internal {

class CoreGate {
 public:
  // cores <= 0: no gate (every Enter returns at once).
  explicit CoreGate(int cores) : free_(cores), open_(cores <= 0) {}

  bool open() const { return open_; }

  // Threads waiting for a core now.
  int waiting() {
    std::lock_guard lock(mu_);
    return static_cast<int>(waiting_.size());
  }

  // Waits for a core; among waiters, the lowest ticket (task index) is served first.
  void Enter(std::uint64_t ticket) {
    if (open_) return;
    std::unique_lock lock(mu_);
    if (free_ > 0 && waiting_.empty()) {
      --free_;
      return;
    }
    Waiter me(ticket);
    waiting_.push(&me);
    me.cv.wait(lock, [&] { return me.granted; });
  }

  // Hands the core to the lowest waiting ticket, or frees it.
  void Leave() {
    if (open_) return;
    std::lock_guard lock(mu_);
    if (waiting_.empty()) {
      ++free_;
      return;
    }
    Waiter* next = waiting_.top();
    waiting_.pop();
    next->granted = true;
    next->cv.notify_one();  // under the lock: `next` lives on its thread's stack until it wakes
  }

  // A thread's hold on a core: taken and dropped as the thread's work needs a core or waits;
  // dropped at the end of its scope.
  class Hold {
   public:
    explicit Hold(CoreGate& gate) : gate_(gate) {}
    ~Hold() { Drop(); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

    void Take(std::uint64_t ticket) {
      if (held_) return;
      gate_.Enter(ticket);
      held_ = true;
    }
    void Drop() {
      if (!held_) return;
      gate_.Leave();
      held_ = false;
    }

   private:
    CoreGate& gate_;
    bool held_ = false;
  };

 private:
  struct Waiter {
    explicit Waiter(std::uint64_t t) : ticket(t) {}
    std::uint64_t ticket;
    bool granted = false;
    std::condition_variable cv;
  };
  struct Later {
    bool operator()(const Waiter* a, const Waiter* b) const { return a->ticket > b->ticket; }
  };

  std::mutex mu_;
  int free_;                                                           // guarded by mu_
  std::priority_queue<Waiter*, std::vector<Waiter*>, Later> waiting_;  // guarded by mu_
  const bool open_;
};

}  // namespace hoist::transport::pipeline_internal
