// The Peer seam (capabilities + status, like device.h): move arena byte ranges between the ranks
// of one peer group (the ranks of a node, or all ranks of a job), for dedup loads.
//
// Model: a group of ranks, named by their global (plan) ranks. Ops are queued between
// GroupBegin and GroupEnd and issued together at GroupEnd (NCCL: one ncclGroupStart/End; MPI:
// MPI_Isend/Irecv posted at once), so two ranks sending to each other never deadlock. Between two
// ranks, sends and recvs pair up in issue order and must agree in size. Groups complete in issue
// order; Test() progresses them without blocking and reports whether all completed; Wait()
// blocks until everything issued completed, an op failed, or the deadline passed.
//
// Set-up may run in the background (the NCCL communicator initialises while the rank reads):
// Ready() says when GroupEnd may be called. Agreement between ranks (did everyone read its part,
// did someone fail) is not the peer's job: the coordinator's control plane carries it, and a
// rank told that another failed calls Abort().
//
// Implementations: MPI (CreateMpiPeer; arenas are host memory: the host device backend, so the
// whole routing runs in CPU-only CI), CUDA IPC (CreateCudaIpcPeer; GPU arenas of one host, moved
// by copy engines over NVLink) and NCCL (CreateNcclPeer; GPU arenas across hosts; compiled only
// with CUDA and NCCL). None ever blocks without a deadline.
//
// Ownership: a Peer owns its NCCL communicator or CUDA stream; the MPI communicator is the job's.
// The arenas belong to the caller and must outlive every op issued on them.
// Failure: every call returns a Status; after a failed Wait/Test, or after Abort(), the peer is
// unusable (pending ops are cancelled, the NCCL communicator is aborted) and every later call
// returns Aborted. Destroying a peer with ops still pending aborts it.
// Threading: one thread at a time. The MPI peer must be driven from the thread that initialised
// MPI (MPI_THREAD_FUNNELED); the NCCL peer from any one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "transport/devices/device.h"

namespace hoist::transport {

struct PeerCaps {
  bool device_memory = false;  // arenas are GPU memory (NCCL); false: host memory (MPI)
  bool cross_node = true;      // ranks of several hosts may be in one group
};

// The ranks of one peer group: global ranks, ascending, `self` among them.
struct PeerGroup {
  std::vector<int> ranks;
  int self = 0;
};

class Peer {
 public:
  virtual ~Peer() = default;

  // "mpi" or "nccl".
  virtual std::string Name() const = 0;
  virtual const PeerCaps& Caps() const = 0;
  virtual const PeerGroup& Group() const = 0;

  // True once the communicator is set up and groups may be issued; false while it still
  // initialises. An initialisation error is returned (and aborts the peer).
  virtual Result<bool> Ready() = 0;

  // Queues ops; nothing moves until GroupEnd. `peer` is a global rank of the group (not self);
  // [offset, offset + bytes) must lie inside `arena`. GroupEnd needs Ready().
  virtual Status GroupBegin() = 0;
  virtual Status Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
                      std::uint64_t bytes) = 0;
  virtual Status Recv(int peer, const DeviceBuffer& arena, std::uint64_t offset,
                      std::uint64_t bytes) = 0;
  virtual Status GroupEnd() = 0;

  // Progresses issued groups without blocking: true when all completed. An op that failed is
  // an error (and aborts the peer).
  virtual Result<bool> Test() = 0;
  // Blocks until every issued group completed (OK), one failed, or timeout_s passed (Aborted
  // naming the pending ops, with kPeerFailureNote). Either error aborts the peer.
  virtual Status Wait(double timeout_s) = 0;

  // Groups issued and groups completed so far (completion is in issue order).
  virtual std::uint64_t groups_issued() const = 0;
  virtual std::uint64_t groups_completed() const = 0;
  // The ops of the groups in flight that have not completed ("recv of 4096 bytes from rank 2 at
  // arena offset 0; ..."), for messages.
  virtual std::string PendingText() const = 0;

  // Cancels pending ops and tears the communicator down (NCCL: ncclCommAbort). Idempotent.
  virtual void Abort() = 0;

  // Bytes moved by completed ops.
  virtual std::uint64_t bytes_sent() const = 0;
  virtual std::uint64_t bytes_received() const = 0;

  // True once an error of this peer was a timeout waiting for other ranks (set-up or transfers
  // not done within their bound; the message carries kPeerFailureNote): another rank stalled or
  // died, this one did not fail on its own. Failure blame reads this, never the message.
  virtual bool timed_out() const { return false; }
};

// MPI peer on `mpi_comm` (a pointer to the job's MPI_Comm, whose ranks are the global ranks;
// nullptr: MPI_COMM_WORLD), with its own message tag. Not collective: each rank creates its own.
// FailedPrecondition when MPI is not initialised or the communicator's size is not `world`.
Result<std::unique_ptr<Peer>> CreateMpiPeer(const PeerGroup& group, int world,
                                            const void* mpi_comm = nullptr);

// CUDA IPC peer on device `ordinal` for a group whose ranks share one host: a receiver pulls
// each transfer from the sender's arena (mapped once through CUDA IPC) with a copy-engine copy,
// as soon as the sender's notice (an MPI message on `mpi_comm`, the job's communicator, whose
// ranks are the global ranks) says the bytes landed. Nothing to set up: no communicator, no
// collective. Unsupported without CUDA.
Result<std::unique_ptr<Peer>> CreateCudaIpcPeer(const PeerGroup& group, int ordinal, int world,
                                                const void* mpi_comm);

// NCCL: an opaque unique id (NCCL_UNIQUE_ID_BYTES bytes). Any one process creates the id of a
// group (rank 0 creates all of them while it plans) and every member receives it with the plan.
// Unsupported without NCCL.
Result<std::string> NcclUniqueId();

// NCCL peer on CUDA device `ordinal` from the group's id. Starts the (non-blocking)
// communicator initialisation and returns at once; Ready() says when it is done. The
// initialisation must complete within timeout_s of this call, else Ready() fails naming the
// group. Unsupported without NCCL.
Result<std::unique_ptr<Peer>> CreateNcclPeer(const PeerGroup& group, int ordinal,
                                             const std::string& unique_id, double timeout_s);

// True when this build has the NCCL peer.
bool HaveNccl();

// Sets what NCCL is to read from the environment (NCCL_NVLS_ENABLE=0 unless the user set it:
// point-to-point needs no multicast objects). Call it on the main thread before any other thread
// starts (setenv beside a getenv on another thread is not safe); the peers' creation calls it
// again, when it changes nothing if it ran first. A no-op without NCCL.
void PrepareNcclEnvironment();

// Tests: a peer that fails on purpose. kError: once it issued its first group, its transport
// fails (the next Test() aborts the real peer and returns an error). kStall: it stays alive but
// does not move its bytes: the sends of every group are withheld and it never completes, while
// it reports nothing pending (so only its peers, waiting for its bytes, time out).
enum class PeerFault { kError, kStall };
std::unique_ptr<Peer> WrapFaultyPeer(std::unique_ptr<Peer> peer, PeerFault fault);

// Every error a rank reports because of another rank (a timeout waiting for a peer, a job that
// stopped because a rank failed) contains this text, for the reader; code decides by
// Peer::timed_out() and the report's stopped_by / peer_timed_out, not by this text.
inline constexpr char kPeerFailureNote[] = "a peer failed, stalled or died";

}  // namespace hoist::transport
