// Whether hoist's output may use the terminal: ANSI colours, a line redrawn in place.
//
// Colour only where a person reads the stream directly: never under a launcher (Open MPI,
// Slurm, PMI: the launcher forwards the ranks' output, often through a pseudo-terminal even when
// its own output is piped into a file) and never when NO_COLOR is set (no-color.org); otherwise
// the sink's own check of its stream (a terminal) decides.
// Threading: reads the environment; call it before starting threads that change it.
// Failure: none.
#pragma once

namespace hoist {

// False under a launcher or with NO_COLOR set; true when the stream's terminal check may decide.
bool LogColoursAllowed();

// True when a launcher (Open MPI, PMI, PMIx, Slurm) started this process: its output is
// forwarded, interleaved with other processes', so nothing may be redrawn in place.
bool UnderLauncher();

}  // namespace hoist
