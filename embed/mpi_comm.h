// Internal: a coordinator::Comm over an engine's existing MPI communicator (hoist::Load with
// LoadOptions::mpi_comm). It duplicates the communicator (freed by the destructor) and never
// initialises or finalises MPI. Failure: collectives return a Status. Threading: the thread that
// owns MPI.
#pragma once

#include <memory>

#include "coordinator/comm.h"
#include "hoist/status.h"

namespace hoist::internal {

// `mpi_comm` points to an MPI_Comm; nullptr: MPI_COMM_WORLD. FailedPrecondition when MPI is not
// initialised.
Result<std::unique_ptr<coordinator::Comm>> WrapMpiComm(const void* mpi_comm);
// True when the process has initialised MPI (and not finalised it).
bool MpiActive();

}  // namespace hoist::internal
