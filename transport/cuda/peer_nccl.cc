// The NCCL peer: CUDA device arenas, a non-blocking NCCL communicator per peer group (created
// from the group's unique id, broadcast over MPI by the caller), grouped ncclSend/ncclRecv on the
// peer's own stream, completion by an event polled against a deadline while checking
// ncclCommGetAsyncError, and ncclCommAbort on any error or timeout (never a hang in NCCL).
//
// Compiled only with CUDA and NCCL (HOIST_HAVE_NCCL); without them peer_mpi.cc answers
// Unsupported. Placement needs no kernel: the planner only shares ranges that are contiguous in
// both arenas, so every transfer lands directly at its final arena offset.
#if defined(HOIST_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "transport/peer.h"

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point Deadline(double timeout_s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, timeout_s)));
}

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

void Backoff(int spin) {
  if (spin < 64) return;
  std::this_thread::sleep_for(std::chrono::microseconds(spin < 256 ? 20 : 1000));
}

std::string GroupString(const PeerGroup& g) {
  std::string s = "[";
  for (std::size_t i = 0; i < g.ranks.size(); ++i) {
    s.append(i ? "," : "").append(std::to_string(g.ranks[i]));
  }
  return s + "]";
}

Status ValidateGroup(const PeerGroup& group) {
  if (group.ranks.empty() || !std::is_sorted(group.ranks.begin(), group.ranks.end()) ||
      std::adjacent_find(group.ranks.begin(), group.ranks.end()) != group.ranks.end() ||
      !std::binary_search(group.ranks.begin(), group.ranks.end(), group.self)) {
    return Status::InvalidArgument("nccl peer: group " + GroupString(group) +
                                   " must be ascending, distinct and contain rank " +
                                   std::to_string(group.self));
  }
  return Status::Ok();
}

std::string CudaText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

// Waits until a non-blocking communicator leaves ncclInProgress. Returns the final state.
ncclResult_t WaitReady(ncclComm_t comm, Clock::time_point deadline, bool* timed_out) {
  *timed_out = false;
  for (int spin = 0;; ++spin) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (Clock::now() > deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    Backoff(spin);
  }
}

class NcclPeer final : public Peer {
 public:
  NcclPeer(PeerGroup group, int ordinal, ncclComm_t comm)
      : group_(std::move(group)), ordinal_(ordinal), comm_(comm) {
    caps_.device_memory = true;
    caps_.cross_node = true;
  }

  // Creates the stream, event and the agreement buffers (after the communicator is ready).
  Status Init() {
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    HOIST_RETURN_IF_ERROR(
        Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    HOIST_RETURN_IF_ERROR(
        Cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate"));
    void* d = nullptr;
    HOIST_RETURN_IF_ERROR(Cuda(cudaMalloc(&d, 2 * sizeof(int)), "cudaMalloc(agreement)"));
    dev_flag_ = static_cast<int*>(d);
    void* h = nullptr;
    HOIST_RETURN_IF_ERROR(Cuda(cudaMallocHost(&h, 2 * sizeof(int)), "cudaMallocHost(agreement)"));
    host_flag_ = static_cast<int*>(h);
    return Status::Ok();
  }

  ~NcclPeer() override {
    cudaSetDevice(ordinal_);
    if (comm_ != nullptr) {
      if (pending_) {
        Abort();
      } else {
        bool timed_out = false;
        ncclResult_t rc = ncclCommFinalize(comm_);
        if (rc == ncclSuccess || rc == ncclInProgress)
          rc = WaitReady(comm_, Deadline(10), &timed_out);
        if (rc == ncclSuccess && !timed_out) {
          ncclCommDestroy(comm_);
        } else {
          ncclCommAbort(comm_);
        }
        comm_ = nullptr;
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (dev_flag_ != nullptr) cudaFree(dev_flag_);
    if (host_flag_ != nullptr) cudaFreeHost(host_flag_);
  }

  std::string Name() const override { return "nccl"; }
  const PeerCaps& Caps() const override { return caps_; }
  const PeerGroup& Group() const override { return group_; }

  Result<int> AllOk(bool ok, double timeout_s) override {
    HOIST_RETURN_IF_ERROR(Usable());
    // Enqueued behind any transfers still in flight on the peer's stream (every rank issues the
    // same sequence on the communicator), so completing it completes them too.
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    const Clock::time_point deadline = Deadline(timeout_s);
    host_flag_[0] = ok ? INT_MAX : group_.self;
    host_flag_[1] = INT_MAX;
    HOIST_RETURN_IF_ERROR(
        Cuda(cudaMemcpyAsync(dev_flag_, host_flag_, sizeof(int), cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync(agreement)"));
    HOIST_RETURN_IF_ERROR(
        Nccl(ncclAllReduce(dev_flag_, dev_flag_ + 1, 1, ncclInt32, ncclMin, comm_, stream_),
             "ncclAllReduce(agreement)", deadline));
    HOIST_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(host_flag_ + 1, dev_flag_ + 1, sizeof(int),
                                               cudaMemcpyDeviceToHost, stream_),
                               "cudaMemcpyAsync(agreement)"));
    HOIST_RETURN_IF_ERROR(Cuda(cudaEventRecord(done_, stream_), "cudaEventRecord"));
    pending_ = true;
    const Status s = WaitEvent(
        deadline, timeout_s,
        std::string("agreement: a rank of the group did not arrive (") + kPeerFailureNote + ")");
    if (!s.ok()) return s;
    return host_flag_[1] == INT_MAX ? -1 : host_flag_[1];
  }

  Status GroupBegin() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (in_group_) return Status::InvalidArgument("nccl peer: GroupBegin inside a group");
    in_group_ = true;
    return Status::Ok();
  }

  Status Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    return Queue(true, peer, arena, offset, bytes);
  }
  Status Recv(int peer, const DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    return Queue(false, peer, arena, offset, bytes);
  }

  Status GroupEnd() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (!in_group_) return Status::InvalidArgument("nccl peer: GroupEnd without GroupBegin");
    in_group_ = false;
    if (queued_.empty()) return Status::Ok();
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    const Clock::time_point deadline = Deadline(60);
    HOIST_RETURN_IF_ERROR(Nccl(ncclGroupStart(), "ncclGroupStart", deadline));
    for (const Op& op : queued_) {
      const ncclResult_t rc = op.send
                                  ? ncclSend(op.ptr, op.bytes, ncclUint8, op.index, comm_, stream_)
                                  : ncclRecv(op.ptr, op.bytes, ncclUint8, op.index, comm_, stream_);
      if (rc != ncclSuccess && rc != ncclInProgress) {
        ncclGroupEnd();
        const std::string what = Describe(op);
        queued_.clear();
        return Fail(std::string(op.send ? "ncclSend" : "ncclRecv") + " (" + what +
                    "): " + NcclText(rc));
      }
    }
    // The group's operations are enqueued (or fail) here; non-blocking comms may still be
    // launching them (ncclInProgress) until the communicator is ready again.
    HOIST_RETURN_IF_ERROR(Nccl(ncclGroupEnd(), "ncclGroupEnd", deadline));
    HOIST_RETURN_IF_ERROR(Cuda(cudaEventRecord(done_, stream_), "cudaEventRecord"));
    for (const Op& op : queued_) {
      (op.send ? inflight_sent_ : inflight_received_) += op.bytes;
      inflight_.push_back(op);
    }
    queued_.clear();
    pending_ = true;
    return Status::Ok();
  }

  Result<bool> Test() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (!pending_) return true;
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) {
      Complete();
      return true;
    }
    if (e != cudaErrorNotReady) return Fail("cudaEventQuery: " + CudaText(e));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) return Fail("ncclCommGetAsyncError: " + NcclText(rc));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail("asynchronous NCCL error with " + std::to_string(inflight_.size()) +
                  " transfers in flight (" + PendingText() + "): " + NcclText(state));
    }
    return false;
  }

  Status Wait(double timeout_s) override { return WaitEvent(Deadline(timeout_s), timeout_s, ""); }

  void Abort() override {
    if (aborted_) return;
    aborted_ = true;
    if (comm_ != nullptr) {
      cudaSetDevice(ordinal_);
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    queued_.clear();
  }

  std::uint64_t bytes_sent() const override { return sent_; }
  std::uint64_t bytes_received() const override { return received_; }

 private:
  struct Op {
    bool send = false;
    int peer = 0;
    int index = 0;
    void* ptr = nullptr;
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
  };

  void Complete() {
    pending_ = false;
    sent_ += inflight_sent_;
    received_ += inflight_received_;
    inflight_sent_ = inflight_received_ = 0;
    inflight_.clear();
  }

  Status WaitEvent(Clock::time_point deadline, double timeout_s, const std::string& what) {
    for (int spin = 0;; ++spin) {
      HOIST_ASSIGN_OR_RETURN(bool done, Test());
      if (done) return Status::Ok();
      if (Clock::now() > deadline) {
        return Fail("timed out after " + Secs(timeout_s) +
                    (what.empty()
                         ? " with " + std::to_string(inflight_.size()) + " transfers in flight (" +
                               PendingText() + "): " + kPeerFailureNote
                         : ": " + what));
      }
      Backoff(spin);
    }
  }

  std::string Describe(const Op& op) const {
    return std::string(op.send ? "send of " : "recv of ") + std::to_string(op.bytes) + " bytes " +
           (op.send ? "to rank " : "from rank ") + std::to_string(op.peer) + " at arena offset " +
           std::to_string(op.offset);
  }

  std::string PendingText() const {
    std::string s;
    for (std::size_t i = 0; i < inflight_.size() && i < 4; ++i) {
      s += (i ? "; " : "") + Describe(inflight_[i]);
    }
    if (inflight_.size() > 4) s += "; ...";
    return s;
  }

  std::string NcclText(ncclResult_t rc) const {
    std::string s = ncclGetErrorString(rc);
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    if (last != nullptr && *last != '\0') s += std::string(": ") + last;
    return s;
  }

  Status Usable() const {
    if (aborted_) return Status::Aborted("nccl peer: aborted after an earlier failure");
    return Status::Ok();
  }

  Status Fail(const std::string& what) {
    const std::string msg = "nccl peer (rank " + std::to_string(group_.self) + ", group " +
                            GroupString(group_) + ", cuda:" + std::to_string(ordinal_) +
                            "): " + what;
    Abort();
    return Status::Aborted(msg);
  }

  Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    return Fail(std::string(what) + ": " + CudaText(e));
  }

  // Checks an NCCL call on the non-blocking communicator, waiting out ncclInProgress.
  Status Nccl(ncclResult_t rc, const char* what, Clock::time_point deadline) {
    if (rc == ncclInProgress) {
      bool timed_out = false;
      rc = WaitReady(comm_, deadline, &timed_out);
      if (timed_out) return Fail(std::string(what) + ": timed out");
    }
    if (rc != ncclSuccess) return Fail(std::string(what) + ": " + NcclText(rc));
    return Status::Ok();
  }

  Status Queue(bool send, int peer, const DeviceBuffer& arena, std::uint64_t offset,
               std::uint64_t bytes) {
    HOIST_RETURN_IF_ERROR(Usable());
    if (!in_group_) return Status::InvalidArgument("nccl peer: Send/Recv outside GroupBegin/End");
    const auto it = std::lower_bound(group_.ranks.begin(), group_.ranks.end(), peer);
    if (it == group_.ranks.end() || *it != peer || peer == group_.self) {
      return Status::InvalidArgument("nccl peer: rank " + std::to_string(peer) +
                                     " is not another member of group " + GroupString(group_));
    }
    if (arena.ptr == nullptr || offset > arena.bytes || bytes > arena.bytes - offset) {
      return Status::InvalidArgument("nccl peer: arena range [" + std::to_string(offset) + ", +" +
                                     std::to_string(bytes) + ") outside the arena of " +
                                     std::to_string(arena.bytes) + " bytes");
    }
    if (bytes == 0) return Status::Ok();
    Op op;
    op.send = send;
    op.peer = peer;
    op.index = static_cast<int>(it - group_.ranks.begin());
    op.ptr = static_cast<std::byte*>(arena.ptr) + offset;
    op.offset = offset;
    op.bytes = bytes;
    queued_.push_back(op);
    return Status::Ok();
  }

  PeerGroup group_;
  int ordinal_ = 0;
  ncclComm_t comm_ = nullptr;
  PeerCaps caps_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  int* dev_flag_ = nullptr;
  int* host_flag_ = nullptr;
  bool in_group_ = false;
  bool pending_ = false;
  bool aborted_ = false;
  std::vector<Op> queued_;
  std::vector<Op> inflight_;
  std::uint64_t inflight_sent_ = 0, inflight_received_ = 0;
  std::uint64_t sent_ = 0, received_ = 0;
};

}  // namespace

bool HaveNccl() { return true; }

Result<std::string> NcclUniqueId() {
  ncclUniqueId id;
  const ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) {
    return Status::IoError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc));
  }
  return std::string(id.internal, sizeof id.internal);
}

Result<std::unique_ptr<Peer>> CreateNcclPeer(const PeerGroup& group, int ordinal,
                                             const std::string& unique_id, double timeout_s) {
  HOIST_RETURN_IF_ERROR(ValidateGroup(group));
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
  config.blocking = 0;  // every call returns; we poll with a deadline instead of hanging
  ncclComm_t comm = nullptr;
  ncclResult_t rc =
      ncclCommInitRankConfig(&comm, static_cast<int>(group.ranks.size()), id, index, &config);
  if (rc == ncclInProgress && comm != nullptr) {
    bool timed_out = false;
    rc = WaitReady(comm, Deadline(timeout_s), &timed_out);
    if (timed_out) {
      ncclCommAbort(comm);
      return Status::Aborted("nccl peer (rank " + std::to_string(group.self) + ", group " +
                             GroupString(group) + "): ncclCommInitRank timed out after " +
                             Secs(timeout_s) + ": a rank of the group did not join (" +
                             kPeerFailureNote + ")");
    }
  }
  if (rc != ncclSuccess) {
    const std::string last = comm != nullptr ? ncclGetLastError(comm) : "";
    if (comm != nullptr) ncclCommAbort(comm);
    return Status::IoError(
        "nccl peer (rank " + std::to_string(group.self) + ", group " + GroupString(group) +
        "): ncclCommInitRankConfig: " + ncclGetErrorString(rc) + (last.empty() ? "" : ": " + last));
  }
  auto peer = std::make_unique<NcclPeer>(group, ordinal, comm);
  HOIST_RETURN_IF_ERROR(peer->Init());
  return std::unique_ptr<Peer>(std::move(peer));
}

}  // namespace hoist::transport

#endif  // HOIST_HAVE_NCCL
