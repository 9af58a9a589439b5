#include "launch/exit_codes.h"

#include <cstdio>

#include "coordinator/comm.h"
#include "launch/status_line.h"
#include "util/printable.h"

namespace hoist::launch {

int ExitCode(const Status& s) {
  if (s.ok()) return kExitOk;
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitFailure;
}

int Fail(const Status& s, bool quiet) {
  if (!quiet && !s.ok()) {
    StderrStatusLine()->End();  // the error on a line of its own, below the progress bar
    std::fprintf(stderr, "hoist: error: %s\n", Printable(s.ToString(), true).c_str());
  }
  return ExitCode(s);
}

bool PrintsSharedErrors() { return coordinator::LauncherRank() <= 0; }

}  // namespace hoist::launch
