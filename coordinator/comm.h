// The control plane between ranks: small messages between rank 0 and the others, from which the
// job's bounded collectives are built (coordinator/control.h).
//
// Two implementations: MPI (one process per rank under mpirun, or an engine's communicator) and
// Solo (one process, no MPI). Every wait is bounded: Send never blocks (the message is copied
// and sent in the background), TryRecv never blocks, and Broadcast/Gather give up after
// timeout_s naming the ranks that did not answer. Nothing here uses an MPI collective after the
// Comm is created, so a rank that stops (SIGSTOP, a hung read in the kernel) can never hang the
// others: they time out and name it.
//
// Ownership: MpiComm initialises MPI in its factory and finalises it in its destructor (unless
// it wraps an engine's communicator). Failure: calls return a Status; Abort() ends every rank of
// the job (MPI_Abort) and is for a caller (the CLI) that found a rank silent, since MPI_Finalize
// would then wait for it. Threading: call from the thread that initialised MPI only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hoist/status.h"

namespace hoist::coordinator {

// Message channels: messages of one channel between two ranks arrive in send order.
enum class Channel : int { kHello = 1, kPlan = 2, kControl = 3, kCollective = 4, kProbe = 5 };

struct Message {
  int from = 0;
  std::string data;
};

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
  // The MPI_Comm* of the job (for the MPI peer); nullptr without MPI.
  virtual const void* mpi_handle() const = 0;

  // Sends `data` to rank `to` on `channel` without blocking.
  virtual Status Send(int to, Channel channel, std::string data) = 0;
  // A message from `from` (-1: any rank) on `channel` when one has arrived, without blocking.
  virtual Result<std::optional<Message>> TryRecv(int from, Channel channel) = 0;

  // Rank 0's `data` reaches every rank, within timeout_s (else Aborted naming rank 0).
  Status Broadcast(std::string* data, double timeout_s);
  // Every rank's `mine` reaches rank 0, in rank order (empty vector on other ranks), within
  // timeout_s (else Aborted naming the ranks that did not answer).
  Result<std::vector<std::string>> Gather(const std::string& mine, double timeout_s);

  [[noreturn]] virtual void Abort(int exit_code) = 0;
};

// Waits for one message from `from` (-1: any rank) on `channel`, bounded by timeout_s (Aborted
// "<what>: nothing within ..." when none came).
Result<Message> Await(Comm& comm, int from, Channel channel, double timeout_s,
                      const std::string& what);

// True when this process was started by mpirun / a PMIx launcher.
bool LaunchedByMpi();
// This process's rank and its index among the ranks of its host as the launcher's environment
// tells them before MPI starts (OMPI_COMM_WORLD_*, PMIX_RANK, PMI_RANK, SLURM_PROCID /
// SLURM_LOCALID, MPI_LOCALRANKID); -1 when the environment does not say.
int LauncherRank();
int LauncherLocalRank();

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

// The command line's world: CreateMpiComm when LaunchedByMpi, else CreateSoloComm.
Result<std::unique_ptr<Comm>> CreateLaunchComm(int* argc, char*** argv);

}  // namespace hoist::coordinator
