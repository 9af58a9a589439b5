// The control plane between ranks: broadcast the plan, gather the reports.
//
// Two implementations: MPI (one process per rank under mpirun) and Solo (one process, no MPI;
// used when hoist runs without mpirun). Ownership: MpiComm initialises MPI in its factory and
// finalises it in its destructor. Failure: collectives return a Status; Abort() ends every rank
// of the job (MPI_Abort) and is used only when a rank cannot report its failure through a
// collective. Threading: call from the main thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hoist/status.h"

namespace hoist::coordinator {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Node index of this rank from the shared-memory split (ranks of one host share a node),
  // and the number of nodes.
  virtual int node() const = 0;
  virtual int nodes() const = 0;
  // Index of this rank among the ranks of its node.
  virtual int local_rank() const = 0;
  virtual std::string host() const = 0;
  // Rank 0's `data` reaches every rank.
  virtual Status Broadcast(std::string* data) = 0;
  // Every rank's `mine` reaches rank 0, in rank order (empty vector on other ranks).
  virtual Result<std::vector<std::string>> Gather(const std::string& mine) = 0;
  // Sum of `value` over ranks, on every rank.
  virtual Result<double> AllreduceMax(double value) = 0;
  // Element-wise sum of `values[0, n)` over ranks, in place, on every rank.
  virtual Status AllreduceSum(double* values, int n) = 0;
  virtual void Barrier() = 0;
  [[noreturn]] virtual void Abort(int exit_code) = 0;
};

// True when this process was started by mpirun / a PMIx launcher.
bool LaunchedByMpi();

// Initialises MPI (MPI_THREAD_FUNNELED) and returns the world communicator; the Comm finalises
// MPI when destroyed.
Result<std::unique_ptr<Comm>> CreateMpiComm(int* argc, char*** argv);

// A Comm over an engine's existing communicator: `mpi_comm` points to an MPI_Comm (nullptr:
// MPI_COMM_WORLD). It duplicates the communicator (freed by the destructor) and never initialises
// or finalises MPI. FailedPrecondition when MPI is not initialised.
Result<std::unique_ptr<Comm>> WrapMpiComm(const void* mpi_comm);

// True when the process has initialised MPI (and not finalised it).
bool MpiActive();

// A world of one.
std::unique_ptr<Comm> CreateSoloComm();

}  // namespace hoist::coordinator
