// What a load needs, as the embedding API (include/hoist/hoist.h), `hoist plan`, `hoist load` and
// `hoist serve` state it: an optional topology file plus the options (hoist/job_options.h, one
// table in config/option_table.h), resolved into coordinator::JobOptions the same way whichever
// surface set them. The flags that fill a JobSpec are the command line's (launch/job_flags.h):
// config/ has no CLI11, so libhoist.so resolves a load through it without linking the command line.
//
// ResolveJobSpec is the one place where every number of a rank's load is checked against a sane
// range (kLimits, stated in kOptions), whether it came from a flag, the topology file or the
// embedding API; the message names where the value came from ("--threads", "FILE: threads") and
// states the range. The plan's numbers go through the planner's one check
// (planner::ValidatePlanOptions) from here.
//
// Failure: a bad or missing topology file, an unknown layout/placement/dedup/read mode/device/
// pinning kind, a number out of range or an impossible tp/ep/dp is InvalidArgument (exit 2).
// Threading: pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/limits.h"
#include "config/option_table.h"
#include "config/topology.h"
#include "coordinator/job.h"
#include "hoist/job_options.h"
#include "hoist/status.h"
#include "planner/plan_options.h"

namespace hoist::config {

// The options (JobOptionSet, hoist/job_options.h) as a flag or API field sets them; every one left
// unset falls back to the topology file, then to its default (kOptions). An empty model counts as
// unset.
struct JobSpec : JobOptionSet {
  std::string topology;               // YAML file; empty: none
  int solo_rank = 0;                  // without MPI: which rank of the plan this process executes
  std::vector<std::string> warnings;  // deprecated spellings used (launch/job_flags.h)
};

struct ResolvedJob {
  coordinator::JobOptions job;
  Topology topology;  // as read from the file (serve keys included)
  // Deprecated spellings used, in the flags or the file: the caller shows them (rank 0).
  std::vector<std::string> warnings;
};

Result<ResolvedJob> ResolveJobSpec(const JobSpec& spec);

// Every field of `job` that an option sets, one "field=value" per line (enums as numbers), so
// that tests compare the resolution of one value given through different surfaces.
std::string DescribeJob(const coordinator::JobOptions& job);

}  // namespace hoist::config
