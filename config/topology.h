// The YAML topology file: model, parallelism, layout, nodes and GPUs, read mode and staging.
//
//   model: /models/qwen3-4b
//   tp: 2            # tensor parallel size
//   ep: 0            # expert parallel size (0/absent: off; else = world)
//   dp: 1            # data parallel groups (ignored when ep > 0: dp = ep / tp)
//   layout: fused    # fused | hf
//   placement: linear  # linear | round_robin (experts under ep)
//   read: auto       # auto | buffered | direct | mmap | pageable | registered
//   device: auto     # auto | cuda | host
//   staging: {slots: 4, slot_mib: 32, threads: 12}
//   verify: false
//   dedup: auto      # auto | none | node | job: read shared bytes once per node / job, forward
//                    # them (auto: node where it pays, see planner/dedup.h)
//   cpu_bind: auto   # auto | launcher | none: where fill threads run (rank/placement.h)
//   peer_timeout_s: 120  # dedup: bound on any wait for a peer
//   unexpected_tensors: warn  # error | warn | ignore: tensors no family rule knows
//   nodes:           # rank -> (node, gpu) in order; absent: one node, gpu = rank
//     - {name: node-a, gpus: [0, 1]}
//   socket_dir: /run/hoist  # `hoist serve`: rank-<R>.sock per rank (dir 0700, sockets 0600)
//   allow_uids: [1000]      # `hoist serve`: peer uids served (absent: the daemon's own uid)
//   host_cache: false       # `hoist serve`: keep a pinned host copy for ctl release/restore
//
// Failure: a file that cannot be opened, is not a regular file or is over 1 MiB, invalid YAML, a
// key that is not a string, unknown or given twice, and a value of the wrong type are
// InvalidArgument naming the file, key and line (exit 2). Numbers are range-checked, and the
// nodes list compared with the world, where flags and file meet: ResolveJobSpec
// (config/job_spec.h). Nothing throws. Threading: pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hoist/status.h"

namespace hoist::config {

struct NodeSpec {
  std::string name;
  std::vector<int> gpus;
};

struct Topology {
  std::string model;
  std::optional<int> tp, ep, dp;
  std::optional<std::string> layout, placement, read, device;
  std::optional<int> slots, slot_mib, threads;
  std::optional<bool> verify;
  std::optional<std::string> dedup;      // planner/dedup.h
  std::optional<std::string> cpu_bind;   // rank/placement.h: auto | launcher | none
  std::optional<double> peer_timeout_s;  // rank/exchange.h
  // error | warn | ignore (planner/plan_options.h)
  std::optional<std::string> unexpected_tensors;
  std::vector<NodeSpec> nodes;
  // `hoist serve` (rank/serve.h).
  std::optional<std::string> socket_dir;
  std::optional<std::vector<long long>> allow_uids;
  std::optional<bool> host_cache;
};

Result<Topology> LoadTopology(const std::string& path);
Result<Topology> ParseTopology(const std::string& label, const std::string& yaml_text);

// World size implied by the nodes list (sum of GPUs), 0 when absent.
int NodesWorld(const Topology& t);

}  // namespace hoist::config
