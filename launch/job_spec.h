// What a load needs, as the embedding API (include/hoist/hoist.h) and `hoist serve` state it:
// an optional topology file plus overrides, resolved into coordinator::JobOptions the same way
// `hoist load` merges its flags over the file.
//
// Failure: a bad topology, unknown layout/placement/device/read mode or impossible tp/ep/dp is
// InvalidArgument naming the file or the value. Threading: pure.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "coordinator/job.h"
#include "hoist/status.h"
#include "launch/topology.h"

namespace hoist::launch {

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

// Registers the flags that fill `spec` on a subcommand: the plan selection (--topology, --model,
// --tp, --ep, --dp, --layout, --placement, --dedup, --dedup-step-kib, --unexpected-tensors) and,
// with `load_flags`, how a rank loads (--rank, --read, --device, --staging, --slots, --slot-mib,
// --threads, --chunk-kib, --verify, --peer-timeout-s, --no-numa). `hoist plan`, `hoist load` and
// `hoist serve` share them.
void AddJobFlags(CLI::App* app, JobSpec* spec, bool load_flags);

struct ResolvedJob {
  coordinator::JobOptions job;
  Topology topology;  // as read from the file (serve keys included)
};

Result<ResolvedJob> ResolveJobSpec(const JobSpec& spec);

}  // namespace hoist::launch
