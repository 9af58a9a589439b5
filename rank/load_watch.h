// The watch on a load that streams behind its caller (hoist::LoadAsync, include/hoist/hoist.h):
// what the load's worker thread tells the engine's threads while the bytes stream (when the arena
// exists, how many of the rank's layer groups have landed, planner/layer_order.h, and when and how
// the load ended), and the DeviceSignal an engine's streams wait on (transport/devices/device.h).
//
// The worker (rank/worker.cc) calls ArenaReady once the arena is allocated (before any byte
// moves), Landed as layer groups land (LandingWatcher, from the pipeline's milestones), and Ended
// once the load returns (after transposes and --verify, whatever the outcome). The counter of the
// signal is the number of layer groups landed; Ended releases it (DeviceSignal::kReleased) whether
// the load succeeded or not, so no engine stream waits forever: an engine learns of a failure
// from the host-side wait (hoist::Model::Wait), never from values.
//
// Ownership: shared by the worker and the embedding API's ModelState; a failed load's device and
// arena are kept here (Orphan) so that tensors an engine already bound stay valid memory until it
// releases them. Failure: Ended's status is what the waits return. Threading: every method is
// thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/devices/device.h"
#include "transport/staging/pipeline.h"

namespace hoist::rank {

struct LoadedRank;  // rank/worker.h

class LoadWatch {
 public:
  static constexpr int kAll = 1 << 30;  // landed() once the load succeeded
  LoadWatch() = default;
  ~LoadWatch();

  // What ArenaReady saw of the device.
  struct DeviceInfo {
    bool gpu = false;
    int ordinal = -1;
    std::string name;
  };

  // Worker: the arena exists at `arena` on `dev` (creates the signal on dev).
  void ArenaReady(transport::Device& dev, const transport::DeviceBuffer& arena);
  // Worker: layer groups [0, groups) have landed.
  void Landed(int groups);
  // Worker: the load ended with `status` (OK: every group landed, landed() is kAll). Releases
  // the signal.
  void Ended(const Status& status);
  // Worker: a failed load's device and arena, kept until TakeOrphan.
  void Orphan(std::unique_ptr<LoadedRank> loaded);
  std::unique_ptr<LoadedRank> TakeOrphan();

  // Tests (HOIST_TEST_HOOKS): called on the worker after ArenaReady, before any byte moves; it
  // must return once `cancel` is set. Set before the load starts.
  std::function<void(const std::atomic<bool>& cancel)> hold;
  // Tests: a failure the worker returns right after `hold` (OK: none).
  Status inject_failure;

  // Blocks until ArenaReady or Ended: the arena, or the load's error when it ended before one.
  Result<transport::DeviceBuffer> AwaitArena();
  // Blocks until `groups` groups landed or the load ended; the load's error if it failed.
  Status WaitLanded(int groups);
  int landed() const;
  bool ended() const;
  // Once ended(): the load's status.
  Status status() const;
  // Once AwaitArena returned the arena: the device it is on.
  DeviceInfo device() const;
  // Once AwaitArena returned the arena: the device object itself (the load's: it lives until the
  // load's LoadedRank, or the orphan of a failed load, is destroyed; thread-safe).
  transport::Device* arena_device() const;
  // The signal (nullptr until ArenaReady).
  transport::DeviceSignal* signal() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool arena_ready_ = false;
  transport::DeviceBuffer arena_;
  DeviceInfo device_;
  transport::Device* arena_device_ = nullptr;
  int landed_ = 0;
  bool ended_ = false;
  Status status_;
  std::unique_ptr<transport::DeviceSignal> signal_;
  std::unique_ptr<LoadedRank> orphan_;
};

// Tests (HOIST_TEST_HOOKS builds only; nothing otherwise), from the environment:
// HOIST_TEST_HOLD_STREAMING=PATH holds the load, once its arena exists, until PATH exists (or the
// load is cancelled); HOIST_TEST_FAIL_STREAMING_RANK=R fails rank R's load right there with an
// injected I/O error. Call before the load starts.
void InstallStreamingTestHooks(LoadWatch* watch, int my_rank);

// Turns the pipeline's milestones into landed layer groups for a watch: Attach gives the run a
// milestone where each layer group's last copy is enqueued (planner::CopiesUntilGroupLands) and
// starts a thread that waits for each milestone's event on the device and tells the watch. A
// group that holds a tensor transposed after the landing (TensorOut.transpose) lands only at
// Ended. Stop (also the destructor) ends the thread and destroys the events; call it after the
// run returned, before the device goes.
// Ownership: borrows the device and the watch (nullptr: nothing to watch). Threading: Attach and
// Stop on the load's thread.
class LandingWatcher {
 public:
  LandingWatcher(transport::Device& dev, LoadWatch* watch) : dev_(dev), watch_(watch) {}
  ~LandingWatcher() { Stop(); }
  Status Attach(const proto::RankPlan& rank_plan, transport::PipelineOptions* po);
  void Stop();

 private:
  void Run();

  transport::Device& dev_;
  LoadWatch* watch_;  // nullptr: Attach does nothing
  std::vector<transport::EventId> events_;
  std::vector<int> landed_at_;  // milestone m: groups landed once it completes
  std::mutex mu_;
  std::condition_variable cv_;
  int recorded_ = 0;  // milestones recorded on the device
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hoist::rank
