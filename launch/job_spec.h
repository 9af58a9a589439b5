// What a load needs, as the embedding API (include/hoist/hoist.h) and `hoist serve` state it:
// an optional topology file plus overrides, resolved into coordinator::JobOptions the same way
// `hoist load` merges its flags over the file.
//
// Failure: a bad topology, unknown layout/placement/device/read mode or impossible tp/ep/dp is
// InvalidArgument naming the file or the value. Threading: pure.
#pragma once

#include <optional>
#include <string>

#include "coordinator/job.h"
#include "hoist/status.h"
#include "launch/topology.h"

namespace hoist::launch {

struct JobSpec {
  std::string topology;  // YAML file; empty: none
  std::optional<std::string> model;
  std::optional<int> tp, ep, dp;
  std::optional<std::string> layout, placement, read, device, staging;
  std::optional<int> slots, slot_mib, threads;
  std::optional<bool> verify;
  int solo_rank = 0;  // without MPI: which rank of the plan this process executes
};

struct ResolvedJob {
  coordinator::JobOptions job;
  Topology topology;  // as read from the file (serve keys included)
};

Result<ResolvedJob> ResolveJobSpec(const JobSpec& spec);

}  // namespace hoist::launch
