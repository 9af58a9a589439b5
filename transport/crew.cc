#include "transport/crew.h"

#include <system_error>
#include <utility>

namespace hoist::transport {

Crew::Crew(int threads) : size_(threads < 1 ? 1 : threads) {
  try {
    first_ = std::thread([this] { Launch(); });
  } catch (const std::system_error& e) {
    refused_ = "could not start fill thread 0 of " + std::to_string(size_) + ": " + e.what();
    launched_.store(1, std::memory_order_release);
  }
}

Crew::~Crew() {
  if (!first_.joinable()) return;
  WaitLaunched();
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  first_.join();  // thread 0 joins the others
}

void Crew::Launch() {
  rest_.reserve(size_ - 1);
  for (int t = 1; t < size_; ++t) {
    try {
      rest_.emplace_back([this, t] { Serve(t); });
    } catch (const std::system_error& e) {
      refused_ = "could not start fill thread " + std::to_string(t) + " of " +
                 std::to_string(size_) + ": " + e.what();
      break;
    }
  }
  started_ = 1 + static_cast<int>(rest_.size());
  launched_.store(1, std::memory_order_release);
  launched_.notify_all();
  Serve(0);
  for (std::thread& th : rest_) th.join();
}

void Crew::Serve(int t) {
  int seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    (*job_)(t);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_.notify_one();
  }
}

void Crew::WaitLaunched() { launched_.wait(0, std::memory_order_acquire); }

Status Crew::Run(const std::function<void(int)>& fn,
                 const std::function<void(Status)>& on_refused) {
  WaitLaunched();
  Status refused =
      refused_.empty() ? Status::Ok() : Status::ResourceExhausted("pipeline: " + refused_);
  if (!refused.ok() && on_refused) on_refused(refused);
  if (started_ == 0) return refused;
  job_ = &fn;
  busy_.store(started_, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (int left = busy_.load(std::memory_order_acquire); left != 0;
       left = busy_.load(std::memory_order_acquire)) {
    busy_.wait(left, std::memory_order_acquire);
  }
  job_ = nullptr;
  return refused;
}

}  // namespace hoist::transport
