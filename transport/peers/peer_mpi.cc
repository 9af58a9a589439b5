// The MPI peer: host-memory arenas, MPI_Isend/MPI_Irecv on a duplicate of the job's
// communicator (ranks addressed by their global rank, so no collective split is needed),
// progress by MPI_Testsome polled against a deadline (never a blocking wait), cancellation on
// error or timeout. Also the NCCL entry points for builds without NCCL.
//
// Bytes move through buffers the peer owns: a send copies its arena range when posted, a receive
// copies into the arena when it completes. Open MPI cannot cancel a send, and a matched receive
// keeps writing until its data arrived; with owned buffers an operation abandoned by Abort() can
// never touch the caller's arena after the caller freed it (its buffer is leaked on purpose).
// The extra copies cost nothing that matters on the host backend this peer serves (CI).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>

#include "transport/peers/peer.h"
#include "transport/peers/peer_ops.h"

namespace hoist::transport {
namespace {

constexpr int kTag = 0x6870;
constexpr std::uint64_t kMaxMessage = 1ull << 30;  // MPI counts are int: chunk larger ranges

std::string MpiError(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, static_cast<std::size_t>(len));
}

class MpiPeer final : public QueuedPeer {
 public:
  MpiPeer(MPI_Comm comm, PeerGroup group)
      : QueuedPeer("mpi", std::move(group), kMaxMessage,
                   PeerCaps{.device_memory = false, .cross_node = true}),
        comm_(comm) {}

  ~MpiPeer() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (!ops_.inflight().empty()) Abort();
  }

  Result<bool> Ready() override {
    HOIST_RETURN_IF_ERROR(Usable());
    return true;
  }

 private:
  // The MPI side of one group in flight (parallel to its ops in ops_.inflight()).
  struct Posted {
    std::vector<MPI_Request> reqs;
    std::vector<std::byte*> buffers;  // owned while posted (see the file comment)
  };

  Status Issue(std::vector<PeerOp> ops) override {
    Posted posted;
    for (const PeerOp& op : ops) {
      MPI_Request req = MPI_REQUEST_NULL;
      const int count = static_cast<int>(op.bytes);
      auto* buffer = new std::byte[op.bytes];
      if (op.send) std::memcpy(buffer, op.ptr, op.bytes);
      const int rc = op.send ? MPI_Isend(buffer, count, MPI_BYTE, op.peer, kTag, comm_, &req)
                             : MPI_Irecv(buffer, count, MPI_BYTE, op.peer, kTag, comm_, &req);
      if (rc != MPI_SUCCESS) {
        delete[] buffer;
        posted_.push_back(std::move(posted));
        ops_.Issued(std::move(ops));  // so Abort cancels what was posted
        return Fail(std::string(op.send ? "MPI_Isend" : "MPI_Irecv") + " (" +
                    PeerOps::Describe(op) + "): " + MpiError(rc));
      }
      posted.reqs.push_back(req);
      posted.buffers.push_back(buffer);
    }
    posted_.push_back(std::move(posted));
    ops_.Issued(std::move(ops));
    return Status::Ok();
  }

  void RetireOldest() override {
    for (std::byte* b : posted_.front().buffers) delete[] b;
    posted_.pop_front();
  }

  void AbortTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Pending operations keep their buffers (leaked): MPI may still read or write them.
    for (Posted& p : posted_) {
      for (std::size_t i = 0; i < p.reqs.size(); ++i) {
        if (p.reqs[i] == MPI_REQUEST_NULL) {
          delete[] p.buffers[i];
          continue;
        }
        MPI_Cancel(&p.reqs[i]);
        MPI_Request_free(&p.reqs[i]);
      }
    }
    posted_.clear();
  }

  // Progresses the oldest group: true when all its ops completed (receives copied in).
  Result<bool> OldestDone() override {
    Posted& p = posted_.front();
    std::vector<PeerOp>& ops = ops_.inflight().front();
    int outcount = 0;
    indices_.resize(p.reqs.size());
    statuses_.resize(p.reqs.size());
    const int rc = MPI_Testsome(static_cast<int>(p.reqs.size()), p.reqs.data(), &outcount,
                                indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return Fail("MPI_Testsome: " + MpiError(rc));
    if (outcount == MPI_UNDEFINED) outcount = 0;
    for (int i = 0; i < outcount; ++i) {
      const auto k = static_cast<std::size_t>(indices_[i]);
      PeerOp& op = ops[k];
      const MPI_Status& st = statuses_[i];
      if (rc == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_SUCCESS) {
        return Fail(PeerOps::Describe(op) + ": " + MpiError(st.MPI_ERROR));
      }
      if (!op.send) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (static_cast<std::uint64_t>(got) != op.bytes) {
          return Fail(PeerOps::Describe(op) + ": received " + std::to_string(got) + " bytes");
        }
        std::memcpy(op.ptr, p.buffers[k], op.bytes);
      }
      op.done = true;
    }
    for (const PeerOp& op : ops) {
      if (!op.done) return false;
    }
    return true;
  }

  MPI_Comm comm_;  // the job's; not owned
  std::deque<Posted> posted_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
};

}  // namespace

Result<std::unique_ptr<Peer>> CreateMpiPeer(const PeerGroup& group, int world,
                                            const void* mpi_comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return Status::FailedPrecondition("mpi peer: MPI is not initialised");
  HOIST_RETURN_IF_ERROR(ValidateGroup("mpi peer", group));
  const MPI_Comm base = mpi_comm ? *static_cast<const MPI_Comm*>(mpi_comm) : MPI_COMM_WORLD;
  int rank = -1, size = 0;
  MPI_Comm_rank(base, &rank);
  MPI_Comm_size(base, &size);
  if (size != world) {
    return Status::FailedPrecondition("mpi peer: the job has " + std::to_string(world) +
                                      " ranks but its communicator has " + std::to_string(size));
  }
  if (rank != group.self) {
    return Status::InvalidArgument("mpi peer: this process is rank " + std::to_string(rank) +
                                   " of the job's communicator, not rank " +
                                   std::to_string(group.self));
  }
  // The job's communicator itself, with the peer's own tag: ranks address each other by their
  // global rank, and neither a split nor a duplicate (collectives a silent rank could hang) is
  // needed.
  return std::unique_ptr<Peer>(new MpiPeer(base, group));
}

#if !defined(HOIST_HAVE_CUDA)
Result<std::unique_ptr<Peer>> CreateCudaIpcPeer(const PeerGroup&, int, int, const void*) {
  return Status::Unsupported("this build has no CUDA backend (dedup on GPUs needs it)");
}
#endif

#if !defined(HOIST_HAVE_NCCL)
Result<std::string> NcclUniqueId() {
  return Status::Unsupported("this build has no NCCL (dedup on GPUs needs it)");
}
Result<std::unique_ptr<Peer>> CreateNcclPeer(const PeerGroup&, int, const std::string&, double) {
  return Status::Unsupported("this build has no NCCL (dedup on GPUs needs it)");
}
bool HaveNccl() { return false; }
void PrepareNcclEnvironment() {}
#endif

}  // namespace hoist::transport
