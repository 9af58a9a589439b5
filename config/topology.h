// The YAML topology file: every job option (config/option_table.h, kOptions) as a top-level key of
// the same name, plus the nodes list and the keys of `hoist serve`.
//
//   model: /models/qwen3-4b
//   tp: 2            # tensor parallel size
//   ep: 0            # expert parallel size (0/absent: off; else = world)
//   dp: 1            # data parallel groups (ignored when ep > 0: dp = ep / tp)
//   layout: fused    # fused | hf
//   read: auto       # auto | buffered | direct | mmap | pageable | registered
//   slots: 4         # staging ring: slots, slot_mib, threads, chunk_kib, read_depth_mib,
//                    # pinning, cpu_bind, numa
//   dedup: auto      # auto | none | node | job; peer_timeout_s, dedup_step_kib
//   verify: false
//   nodes:           # rank -> (node, gpu) in order; absent: one node, gpu = rank
//     - {name: node-a, gpus: [0, 1]}
//   socket_dir: /run/hoist  # `hoist serve`: rank-<R>.sock per rank (dir 0700, sockets 0600)
//   allow_uids: [1000]      # `hoist serve`: peer uids served (absent: the daemon's own uid)
//   host_cache: false       # `hoist serve`: keep a pinned host copy for ctl release/restore
//
// Deprecated, still read with a warning (Topology::warnings): `staging: {slots, slot_mib,
// threads}`; a key given both there and at the top level is refused.
//
// Failure: a file that cannot be opened, is not a regular file or is over 1 MiB, invalid YAML, a
// key that is not a string, unknown (with the nearest known key) or given twice, and a value of
// the wrong type are InvalidArgument naming the file, key and line (exit 2). Numbers are
// range-checked, and the nodes list compared with the world, where flags and file meet:
// ResolveJobSpec (config/job_spec.h). Nothing throws. Threading: pure.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hoist/job_options.h"
#include "hoist/status.h"

namespace hoist::config {

struct NodeSpec {
  std::string name;
  std::vector<int> gpus;
};

// The options the file sets (unset: absent), the nodes list and serve's keys.
struct Topology : JobOptionSet {
  // Option name -> the key as written ("threads", or "staging.threads" under the old mapping).
  std::map<std::string, std::string, std::less<>> keys;
  std::vector<std::string> warnings;  // deprecated spellings read, each naming the file and line
  std::vector<NodeSpec> nodes;
  // `hoist serve` (daemon/serve.h).
  std::optional<std::string> socket_dir;
  std::optional<std::vector<long long>> allow_uids;
  std::optional<bool> host_cache;
};

Result<Topology> LoadTopology(const std::string& path);
Result<Topology> ParseTopology(const std::string& label, const std::string& yaml_text);

// World size implied by the nodes list (sum of GPUs), 0 when absent.
int NodesWorld(const Topology& t);

}  // namespace hoist::config
