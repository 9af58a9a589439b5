// The one mapping from a Status to hoist's exit code, and how the CLI prints an error.
//
//   0  ok
//   1  a plan or load failure: checkpoint content, I/O, a rank failing, a daemon failing
//   2  a usage or configuration error: flags, the topology file, a model folder that does not
//      exist, a tp/dp/ep the model cannot take, a number out of range
//
// In code, Status code kInvalidArgument means "the user's choice is wrong" and is exit 2; every
// other non-OK code is exit 1. Threading: ExitCode is pure; Fail writes one line to stderr.
#pragma once

#include "hoist/status.h"

namespace hoist::launch {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int ExitCode(const Status& s);

// Prints "hoist: error: <s>" to stderr unless `quiet` (control bytes escaped: util/printable.h),
// and returns ExitCode(s).
int Fail(const Status& s, bool quiet = false);

// True when this process prints errors that every rank of a launch sees identically (usage,
// configuration, world size): rank 0 of the launch, or a process not started by a launcher
// (coordinator::LauncherRank, read from the launcher's environment before MPI starts). Other
// ranks exit with the same code silently.
bool PrintsSharedErrors();

}  // namespace hoist::launch
