// hoist::Load over the engine's own MPI communicator. Include after (or instead of) hoist.h in an
// engine that uses MPI; hoist itself does not need the engine to include mpi.h.
// Collective over `comm`: every rank calls it. Threading: from the thread that owns MPI.
#pragma once

#include <mpi.h>

#include "hoist/hoist.h"

namespace hoist {

inline Result<Model> Load(const LoadOptions& options, MPI_Comm comm) {
  LoadOptions o = options;
  o.mpi_comm = &comm;
  return Load(o);
}

}  // namespace hoist
