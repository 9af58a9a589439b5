// The NCCL peer: CUDA device arenas, a non-blocking NCCL communicator per peer group (created
// from the group's unique id, which rank 0 sends with the plan), initialised in the background
// while the rank reads (Ready() polls it against a deadline), grouped ncclSend/ncclRecv on the
// peer's own stream with one event per group, completion polled while checking
// ncclCommGetAsyncError, and ncclCommAbort on any error or timeout (never a hang in NCCL).
//
// Compiled only with CUDA and NCCL (HOIST_HAVE_NCCL); without them peer_mpi.cc answers
// Unsupported. Placement needs no kernel: the planner only shares ranges that are contiguous in
// both arenas, so every transfer lands directly at its final arena offset. hoist uses point-to-
// point transfers only, so NVLink multicast (NVLS) is switched off unless the user set it.
#if defined(HOIST_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "transport/peers/peer.h"
#include "transport/peers/peer_ops.h"

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

std::string CudaText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

class NcclPeer final : public QueuedPeer {
 public:
  NcclPeer(PeerGroup group, int ordinal, ncclComm_t comm, Clock::time_point init_deadline,
           double timeout_s)
      : QueuedPeer("nccl", std::move(group), ~0ull,
                   PeerCaps{.device_memory = true, .cross_node = true}),
        ordinal_(ordinal),
        comm_(comm),
        init_deadline_(init_deadline),
        timeout_s_(timeout_s) {}

  ~NcclPeer() override {
    cudaSetDevice(ordinal_);
    if (comm_ != nullptr) {
      if (!ready_ || !ops_.inflight().empty()) {
        Abort();
      } else {
        Finalize();
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  Result<bool> Ready() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (ready_) return true;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) return Fail("ncclCommGetAsyncError: " + NcclText(rc));
    if (state == ncclInProgress) {
      if (Clock::now() <= init_deadline_) return false;
      return FailTimedOut("ncclCommInitRank did not complete within " + SecondsText(timeout_s_) +
                          ": a rank of the group did not join (" + kPeerFailureNote + ")");
    }
    if (state != ncclSuccess) return Fail("ncclCommInitRankConfig: " + NcclText(state));
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    HOIST_RETURN_IF_ERROR(
        Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    ready_ = true;
    return true;
  }

 private:
  Status Issue(std::vector<PeerOp> ops) override {
    if (!ready_) return Status::FailedPrecondition("nccl peer: GroupEnd before Ready()");
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    const Clock::time_point deadline = DeadlineAfter(timeout_s_);
    HOIST_RETURN_IF_ERROR(Nccl(ncclGroupStart(), "ncclGroupStart", deadline));
    for (const PeerOp& op : ops) {
      const ncclResult_t rc = op.send
                                  ? ncclSend(op.ptr, op.bytes, ncclUint8, op.index, comm_, stream_)
                                  : ncclRecv(op.ptr, op.bytes, ncclUint8, op.index, comm_, stream_);
      if (rc != ncclSuccess && rc != ncclInProgress) {
        ncclGroupEnd();
        return Fail(std::string(op.send ? "ncclSend" : "ncclRecv") + " (" + PeerOps::Describe(op) +
                    "): " + NcclText(rc));
      }
    }
    // Non-blocking comms may still be launching the group (ncclInProgress) until ready again.
    HOIST_RETURN_IF_ERROR(Nccl(ncclGroupEnd(), "ncclGroupEnd", deadline));
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t done, TakeEvent());
    HOIST_RETURN_IF_ERROR(Cuda(cudaEventRecord(done, stream_), "cudaEventRecord"));
    events_.push_back(done);
    ops_.Issued(std::move(ops));
    return Status::Ok();
  }

  // The oldest group's event; while it is pending, an asynchronous NCCL error fails the peer.
  Result<bool> OldestDone() override {
    const cudaError_t e = cudaEventQuery(events_.front());
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return CheckAsync();
    }
    if (e != cudaSuccess) return Fail("cudaEventQuery: " + CudaText(e));
    return true;
  }

  void RetireOldest() override {
    free_events_.push_back(events_.front());
    events_.pop_front();
  }

  void AbortTransport() override {
    if (comm_ == nullptr) return;
    cudaSetDevice(ordinal_);
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  std::string Where() const override { return " on cuda:" + std::to_string(ordinal_); }

  void Finalize() {
    ncclResult_t rc = ncclCommFinalize(comm_);
    if (rc == ncclSuccess || rc == ncclInProgress) {
      const Clock::time_point deadline = DeadlineAfter(10);
      ncclResult_t state = ncclInProgress;
      for (int spin = 0; state == ncclInProgress && Clock::now() <= deadline; ++spin) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        PollBackoff(spin);
      }
      rc = state;
    }
    if (rc == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }

  // An asynchronous NCCL error while groups are in flight fails the peer; else "not done".
  Result<bool> CheckAsync() {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) return Fail("ncclCommGetAsyncError: " + NcclText(rc));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail("asynchronous NCCL error with transfers in flight (" + ops_.PendingText() +
                  "): " + NcclText(state));
    }
    return false;
  }

  Result<cudaEvent_t> TakeEvent() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    HOIST_RETURN_IF_ERROR(
        Cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    return e;
  }

  std::string NcclText(ncclResult_t rc) const {
    std::string s = ncclGetErrorString(rc);
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    if (last != nullptr && *last != '\0') s += std::string(": ") + last;
    return s;
  }

  Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    return Fail(std::string(what) + ": " + CudaText(e));
  }

  // Checks an NCCL call on the non-blocking communicator, waiting out ncclInProgress.
  Status Nccl(ncclResult_t rc, const char* what, Clock::time_point deadline) {
    for (int spin = 0; rc == ncclInProgress; ++spin) {
      if (Clock::now() > deadline) return Fail(std::string(what) + ": timed out");
      PollBackoff(spin);
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      rc = q != ncclSuccess ? q : state;
    }
    if (rc != ncclSuccess) return Fail(std::string(what) + ": " + NcclText(rc));
    return Status::Ok();
  }

  int ordinal_ = 0;
  ncclComm_t comm_ = nullptr;
  Clock::time_point init_deadline_;
  double timeout_s_ = 0;
  cudaStream_t stream_ = nullptr;
  bool ready_ = false;
  std::deque<cudaEvent_t> events_;  // one per group in flight, in issue order
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace

bool HaveNccl() { return true; }

// Point-to-point needs no multicast objects; creating them can upset shared hosts. An existing
// value (the user's, or this call's earlier) is kept, and then setenv changes nothing.
void PrepareNcclEnvironment() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

Result<std::string> NcclUniqueId() {
  PrepareNcclEnvironment();
  ncclUniqueId id;
  const ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) {
    return Status::IoError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc));
  }
  return std::string(id.internal, sizeof id.internal);
}

Result<std::unique_ptr<Peer>> CreateNcclPeer(const PeerGroup& group, int ordinal,
                                             const std::string& unique_id, double timeout_s) {
  HOIST_RETURN_IF_ERROR(ValidateGroup("nccl peer", group));
  PrepareNcclEnvironment();
  ncclUniqueId id;
  if (unique_id.size() != sizeof id.internal) {
    return Status::InvalidArgument("nccl peer: unique id of " + std::to_string(unique_id.size()) +
                                   " bytes, expected " + std::to_string(sizeof id.internal));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  const cudaError_t e = cudaSetDevice(ordinal);
  if (e != cudaSuccess) {
    return Status::IoError("nccl peer: cudaSetDevice(" + std::to_string(ordinal) +
                           "): " + CudaText(e));
  }
  const int index = static_cast<int>(
      std::lower_bound(group.ranks.begin(), group.ranks.end(), group.self) - group.ranks.begin());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns; Ready() polls with a deadline instead of hanging
  ncclComm_t comm = nullptr;
  const Clock::time_point deadline = DeadlineAfter(timeout_s);
  const ncclResult_t rc =
      ncclCommInitRankConfig(&comm, static_cast<int>(group.ranks.size()), id, index, &config);
  if ((rc != ncclSuccess && rc != ncclInProgress) || comm == nullptr) {
    const std::string last = comm != nullptr ? ncclGetLastError(comm) : "";
    if (comm != nullptr) ncclCommAbort(comm);
    return Status::IoError(
        "nccl peer (rank " + std::to_string(group.self) + ", group " + GroupString(group) +
        "): ncclCommInitRankConfig: " + ncclGetErrorString(rc) + (last.empty() ? "" : ": " + last));
  }
  return std::unique_ptr<Peer>(new NcclPeer(group, ordinal, comm, deadline, timeout_s));
}

}  // namespace hoist::transport

#endif  // HOIST_HAVE_NCCL
