// The Peer seam (capabilities + status, like device.h): move arena byte ranges between the ranks
// of one peer group (the ranks of a node, or all ranks of a job), for dedup loads.
//
// Model: a group of ranks, named by their global (plan) ranks. Ops are queued between
// GroupBegin and GroupEnd and issued together at GroupEnd (NCCL: one ncclGroupStart/End; MPI:
// MPI_Isend/Irecv posted at once), so two ranks sending to each other never deadlock. Between two
// ranks, sends and recvs pair up in issue order and must agree in size. Test() progresses and
// reports completion; Wait() blocks until everything issued completed, an op failed, or the
// deadline passed. AllOk() is the group's agreement round (every member calls it the same number
// of times): it returns the lowest rank that reported failure, so no rank starts forwarding when
// a peer could not read its part.
//
// Implementations: MPI (CreateMpiPeer; arenas are host memory: the host device backend, so the
// whole routing runs in CPU-only CI) and NCCL (CreateNcclPeer; arenas are CUDA device memory;
// compiled only with CUDA and NCCL). Neither ever blocks without a deadline: a peer that errors,
// stalls or dies makes Wait/AllOk return Aborted within the timeout, naming the pending ops and
// their peers.
//
// Ownership: a Peer owns its communicator (MPI_Comm from MPI_Comm_split, or an ncclComm and its
// stream). The arenas belong to the caller and must outlive every op issued on them.
// Failure: every call returns a Status; after a failed Wait/AllOk, or after Abort(), the peer is
// unusable (its pending ops are cancelled, the NCCL communicator is aborted) and every later call
// returns Aborted. Destroying a peer with ops still pending aborts it.
// Threading: one thread at a time. The MPI peer must be driven from the thread that initialised
// MPI (MPI_THREAD_FUNNELED); the NCCL peer from any one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "transport/device.h"

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

  // Agreement over the group: returns -1 when every member passed ok, else the lowest global
  // rank that passed !ok. Aborted when a member does not arrive within timeout_s.
  virtual Result<int> AllOk(bool ok, double timeout_s) = 0;

  // Queues ops; nothing moves until GroupEnd. `peer` is a global rank of the group (not self);
  // [offset, offset + bytes) must lie inside `arena`.
  virtual Status GroupBegin() = 0;
  virtual Status Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
                      std::uint64_t bytes) = 0;
  virtual Status Recv(int peer, const DeviceBuffer& arena, std::uint64_t offset,
                      std::uint64_t bytes) = 0;
  virtual Status GroupEnd() = 0;

  // Progresses issued ops without blocking: true when all completed. Errors as Wait.
  virtual Result<bool> Test() = 0;
  // Blocks until every issued op completed (OK), one failed, or timeout_s passed (Aborted naming
  // the pending ops). Either error aborts the peer.
  virtual Status Wait(double timeout_s) = 0;

  // Cancels pending ops and tears the communicator down (NCCL: ncclCommAbort). Idempotent.
  virtual void Abort() = 0;

  // Bytes moved by completed ops.
  virtual std::uint64_t bytes_sent() const = 0;
  virtual std::uint64_t bytes_received() const = 0;
};

// MPI peer over a communicator split from MPI_COMM_WORLD by group (global rank = world rank).
// Collective over MPI_COMM_WORLD: every world rank calls it once, each with its own group.
// `world` is the job's size: when MPI_COMM_WORLD is larger (an engine running the job on a
// sub-communicator) every rank gets FailedPrecondition before any collective, never a hang.
// FailedPrecondition when MPI is not initialised.
Result<std::unique_ptr<Peer>> CreateMpiPeer(const PeerGroup& group, int world);

// NCCL: an opaque unique id (NCCL_UNIQUE_ID_BYTES bytes) that the group's first rank creates and
// every member receives over the control plane. Unsupported without NCCL.
Result<std::string> NcclUniqueId();

// NCCL peer on CUDA device `ordinal` from the id of the group's first rank. Collective over the
// group (ncclCommInitRankConfig, non-blocking, bounded by timeout_s). Unsupported without NCCL.
Result<std::unique_ptr<Peer>> CreateNcclPeer(const PeerGroup& group, int ordinal,
                                             const std::string& unique_id, double timeout_s);

// True when this build has the NCCL peer.
bool HaveNccl();

// Every error a rank reports because of another rank (a timeout waiting for a peer, a group that
// stopped because a member failed) contains this text, so the coordinator can name the rank that
// failed first rather than the ones that stopped because of it.
inline constexpr char kPeerFailureNote[] = "a peer failed, stalled or died";

}  // namespace hoist::transport
