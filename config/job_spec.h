// What a load needs, as the embedding API (include/hoist/hoist.h), `hoist plan`, `hoist load` and
// `hoist serve` state it: an optional topology file plus overrides, resolved into
// coordinator::JobOptions the same way `hoist load` merges its flags over the file. The flags
// that fill a JobSpec are the command line's (launch/job_flags.h): config/ has no CLI11, so
// libhoist.so resolves a load through it without linking the command line.
//
// ResolveJobSpec is the one place where every number of a rank's load is checked against a sane
// range (kLimits below), whether it came from a flag, the topology file or the embedding API; the
// message names where the value came from and states the range. The plan's numbers go through
// the planner's one check (planner::ValidatePlanOptions) from here.
//
// Failure: a bad or missing topology file, an unknown layout/placement/dedup/read mode/device/
// staging kind, a number out of range or an impossible tp/ep/dp is InvalidArgument (exit 2).
// Threading: pure.
#pragma once

#include <optional>
#include <string>

#include "config/topology.h"
#include "coordinator/job.h"
#include "hoist/status.h"
#include "planner/plan_options.h"

namespace hoist::config {

// Every field left unset falls back to the topology file, then to the default.
struct JobSpec {
  std::string topology;  // YAML file; empty: none
  std::optional<std::string> model;
  std::optional<int> tp, ep, dp;
  std::optional<std::string> layout, placement, dedup, read, device, staging, cpu_bind;
  std::optional<std::string> unexpected_tensors;  // error | warn | ignore (planner/plan_options.h)
  std::optional<int> dedup_step_kib, slots, slot_mib, threads, chunk_kib;
  std::optional<double> peer_timeout_s;
  std::optional<bool> verify;
  bool no_numa = false;
  int solo_rank = 0;  // without MPI: which rank of the plan this process executes
};

// The accepted ranges (inclusive) of a rank's load. Sizes where 0 means "the default" accept 0
// as well. The plan's numbers (tp, dp, ep, the world, the dedup step) are the planner's:
// planner/plan_options.h (ValidatePlanOptions), which ResolveJobSpec calls.
struct JobLimits {
  int max_slots = 1024;
  int max_slot_mib = 16384;            // 16 GiB per staging slot
  long long max_staging_mib = 262144;  // slots x slot_mib: 256 GiB of pinned staging per rank
  int max_threads = 1024;
  int max_chunk_kib = 16 << 20;       // 16 GiB
  double max_peer_timeout_s = 86400;  // a day
  int max_gpu = 255;                  // a GPU ordinal in the topology's nodes list
};
inline constexpr JobLimits kLimits{};

struct ResolvedJob {
  coordinator::JobOptions job;
  Topology topology;  // as read from the file (serve keys included)
};

Result<ResolvedJob> ResolveJobSpec(const JobSpec& spec);

}  // namespace hoist::config
