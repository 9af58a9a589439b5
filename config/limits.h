// The accepted ranges (inclusive) of a rank's load: config/option_table.h states them in each
// option's entry and config/job_spec.h checks them. Sizes where 0 means "the default" accept 0 as
// well. The plan's numbers (tp, dp, ep, the world, the dedup step) are the planner's:
// planner/plan_options.h (ValidatePlanOptions), which ResolveJobSpec calls.
// Threading: constants.
#pragma once

namespace hoist::config {

struct JobLimits {
  int max_slots = 1024;
  int max_slot_mib = 16384;            // 16 GiB per staging slot
  long long max_staging_mib = 262144;  // slots x slot_mib: 256 GiB of pinned staging per rank
  int max_threads = 1024;
  int max_chunk_kib = 16 << 20;       // 16 GiB
  int max_read_depth_mib = 262144;    // 256 GiB of deep-read staging per rank
  double max_peer_timeout_s = 86400;  // a day
  int max_gpu = 255;                  // a GPU ordinal in the topology's nodes list
};
inline constexpr JobLimits kLimits{};

}  // namespace hoist::config
