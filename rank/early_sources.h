// A rank's checkpoint sources opened before its device is ready, with their page tables made
// while the device opens (transport/prefault.h).
//
// A GPU load waits ~200 ms for its CUDA context with the host's cores idle; its hot reads then
// spend about half of each fill thread's time taking the page faults of fresh mappings. An
// EarlySources opens the sources the load will read (the same OpenSources call the load makes)
// as soon as the plan is known and prefaults this rank's storage reads on
// DefaultFillThreads(ranks on the node) threads, bound to this rank's share of the node's cores
// (a launcher's one-core binding would put them all on one core beside the device's opening).
// Take, once the device is open and the arena allocated, stops the prefault and hands the
// sources to the load.
//
// When: read modes auto and mmap of an unpacked plan, and LoadOptions::prefault on, or auto
// with a device that is not forced to host memory (a host-memory load releases its mapped pages
// as it copies, so prefaulting would only raise its RSS).
//
// Ownership: owns the sources until Take moves them out. Failure: never fails the load: when the
// sources cannot be opened early, Start returns nullptr and the load opens them itself (and
// reports the error there). Threading: Start and Take on the load's thread; the prefault runs on
// its own threads until Take or destruction.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/plan.pb.h"
#include "rank/worker.h"
#include "transport/pipeline.h"
#include "transport/prefault.h"

namespace hoist::rank {

class EarlySources {
 public:
  // nullptr when this load does not prefault (see above) or its sources failed to open.
  static std::unique_ptr<EarlySources> Start(const proto::LoadPlan& plan,
                                             const proto::RankPlan& rank_plan,
                                             const LoadOptions& options,
                                             const std::vector<std::string>& paths,
                                             const std::vector<bool>& used, bool exchange);
  ~EarlySources();
  EarlySources(const EarlySources&) = delete;
  EarlySources& operator=(const EarlySources&) = delete;

  // Stops the prefault and adds its span ("prefault" on lane "sources", with the bytes it made
  // entries for) to the report. Returns the sources, or nullopt when a load under
  // PrefaultMode::kAuto found itself on the host device (it then opens its own, which release
  // their pages).
  std::optional<transport::SourceSet> Take(bool gpu, const LoadOptions& options,
                                           proto::RankReport* report);

 private:
  EarlySources() = default;

  transport::SourceSet set_;
  std::unique_ptr<transport::Prefaulter> prefault_;  // borrows set_.files; destroyed first
};

}  // namespace hoist::rank
