#include "rank/load_watch.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "planner/layer_order.h"
#include "rank/worker.h"

namespace hoist::rank {

LoadWatch::~LoadWatch() = default;

void LoadWatch::ArenaReady(transport::Device& dev, const transport::DeviceBuffer& arena) {
  Result<std::unique_ptr<transport::DeviceSignal>> signal = dev.CreateSignal();
  if (!signal.ok()) {
    spdlog::warn("{}: no device-side readiness signal ({}); stream waits block the host instead",
                 dev.Name(), signal.status().ToString());
    signal = transport::MakeHostSignal();
  }
  {
    std::lock_guard lock(mu_);
    signal_ = std::move(signal).value();
    signal_->Raise(static_cast<std::uint32_t>(landed_));
    arena_ = arena;
    device_ = {dev.Caps().gpu, dev.Caps().ordinal, dev.Name()};
    arena_device_ = &dev;
    arena_ready_ = true;
  }
  cv_.notify_all();
}

void LoadWatch::Landed(int groups) {
  {
    std::lock_guard lock(mu_);
    if (groups <= landed_ || ended_) return;
    landed_ = groups;
    if (signal_) signal_->Raise(static_cast<std::uint32_t>(landed_));
  }
  cv_.notify_all();
}

void LoadWatch::Ended(const Status& status) {
  {
    std::lock_guard lock(mu_);
    if (ended_) return;
    ended_ = true;
    status_ = status;
    if (status.ok()) landed_ = kAll;
    if (signal_) signal_->Release();
  }
  cv_.notify_all();
}

void LoadWatch::Orphan(std::unique_ptr<LoadedRank> loaded) {
  std::lock_guard lock(mu_);
  orphan_ = std::move(loaded);
}

std::unique_ptr<LoadedRank> LoadWatch::TakeOrphan() {
  std::lock_guard lock(mu_);
  return std::move(orphan_);
}

Result<transport::DeviceBuffer> LoadWatch::AwaitArena() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return arena_ready_ || ended_; });
  if (arena_ready_) return arena_;
  if (!status_.ok()) return status_;
  return Status::Internal("the load ended without an arena");
}

Status LoadWatch::WaitLanded(int groups) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return landed_ >= groups || ended_; });
  if (landed_ >= groups) return Status::Ok();
  return status_;
}

int LoadWatch::landed() const {
  std::lock_guard lock(mu_);
  return landed_;
}

bool LoadWatch::ended() const {
  std::lock_guard lock(mu_);
  return ended_;
}

Status LoadWatch::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

LoadWatch::DeviceInfo LoadWatch::device() const {
  std::lock_guard lock(mu_);
  return device_;
}

transport::Device* LoadWatch::arena_device() const {
  std::lock_guard lock(mu_);
  return arena_device_;
}

void InstallStreamingTestHooks(LoadWatch* watch, int my_rank) {
#if HOIST_TEST_HOOKS
  if (const char* path = std::getenv("HOIST_TEST_HOLD_STREAMING"); path != nullptr && *path) {
    watch->hold = [p = std::string(path)](const std::atomic<bool>& cancel) {
      while (!cancel.load() && ::access(p.c_str(), F_OK) != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    };
  }
  const char* fail = std::getenv("HOIST_TEST_FAIL_STREAMING_RANK");
  if (fail != nullptr && *fail && std::atoi(fail) == my_rank) {
    watch->inject_failure =
        Status::IoError("injected failure while streaming (HOIST_TEST_FAIL_STREAMING_RANK)");
  }
#else
  (void)watch;
  (void)my_rank;
#endif
}

transport::DeviceSignal* LoadWatch::signal() const {
  std::lock_guard lock(mu_);
  return signal_.get();
}

Status LandingWatcher::Attach(const proto::RankPlan& rank_plan, transport::PipelineOptions* po) {
  if (watch_ == nullptr) return Status::Ok();
  const planner::LayerGroups groups = planner::GroupTensorsByLayer(rank_plan);
  std::vector<int> need = planner::CopiesUntilGroupLands(rank_plan, groups);
  // Groups after the first one holding a transposed tensor land only when the load ends.
  std::size_t capped = need.size();
  for (int t = 0; t < rank_plan.tensors_size(); ++t) {
    if (!rank_plan.tensors(t).has_transpose()) continue;
    capped = std::min(capped, static_cast<std::size_t>(groups.of_tensor[t]));
  }
  if (rank_plan.copies_size() == 0) capped = 0;  // only fills: land at the end
  for (std::size_t g = 0; g < capped; ++g) {
    const int copies = std::max(need[g], 1);
    if (!po->milestone_copies.empty() && po->milestone_copies.back() == copies) {
      landed_at_.back() = static_cast<int>(g) + 1;
      continue;
    }
    HOIST_ASSIGN_OR_RETURN(transport::EventId e, dev_.CreateEvent(/*timing=*/false));
    events_.push_back(e);
    po->milestone_copies.push_back(copies);
    landed_at_.push_back(static_cast<int>(g) + 1);
  }
  if (events_.empty()) return Status::Ok();
  po->milestone_events = events_;
  po->on_milestone = [this](int m) {
    {
      std::lock_guard lock(mu_);
      recorded_ = std::max(recorded_, m + 1);
    }
    cv_.notify_all();
  };
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void LandingWatcher::Run() {
  for (std::size_t m = 0; m < events_.size(); ++m) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || recorded_ > static_cast<int>(m); });
      if (recorded_ <= static_cast<int>(m)) return;  // stopped before this milestone
    }
    if (!dev_.Wait(events_[m]).ok()) return;  // the run fails too; Ended says why
    watch_->Landed(landed_at_[m]);
  }
}

void LandingWatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (transport::EventId e : events_) (void)dev_.DestroyEvent(e);
  events_.clear();
}

}  // namespace hoist::rank
