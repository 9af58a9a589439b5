// Internal: the embedding API's options as a resolved job. hoist::Load and the C and Python
// surfaces go through these, and tests use them to compare every surface with the topology file
// and the command line (tests/config/option_table_test.cc).
//
// Failure: InvalidArgument naming the option (exit 2 in the CLI's terms). Threading: pure.
#pragma once

#include "config/job_spec.h"
#include "hoist/hoist.h"
#include "hoist/hoist_c.h"

namespace hoist::internal {

// LoadOptions -> JobSpec: the options carry over as one struct (both are a JobOptionSet), plus
// the topology file and the rank.
config::JobSpec ToJobSpec(const LoadOptions& options);

// ResolveJobSpec(ToJobSpec(options)).
Result<config::ResolvedJob> ResolveLoadOptions(const LoadOptions& options);

// The C API's options as LoadOptions (its sentinels: NULL, 0, ep -1, booleans 0 / > 0 / < 0),
// allocator excepted.
Status FromC(const hoist_load_options& c, LoadOptions* out);

}  // namespace hoist::internal
