// The MPI peer: host-memory arenas, MPI_Isend/MPI_Irecv on a communicator split from
// MPI_COMM_WORLD per group, progress by MPI_Testsome polled against a deadline (never a blocking
// wait), cancellation on error or timeout. Also the NCCL entry points for builds without NCCL.
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
#include <thread>

#include "transport/peer.h"

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTag = 0x6870;
constexpr std::uint64_t kMaxMessage = 1ull << 30;  // MPI counts are int: chunk larger ranges

std::string MpiError(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, static_cast<std::size_t>(len));
}

std::string GroupString(const PeerGroup& g) {
  std::string s = "[";
  for (std::size_t i = 0; i < g.ranks.size(); ++i) {
    s.append(i ? "," : "").append(std::to_string(g.ranks[i]));
  }
  return s + "]";
}

class MpiPeer final : public Peer {
 public:
  MpiPeer(MPI_Comm comm, PeerGroup group) : comm_(comm), group_(std::move(group)) {
    caps_.device_memory = false;
    caps_.cross_node = true;
  }

  ~MpiPeer() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (Pending() > 0 || allreduce_pending_) Abort();
    if (!allreduce_pending_) delete[] allreduce_;  // else MPI may still write it: leaked
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  std::string Name() const override { return "mpi"; }
  const PeerCaps& Caps() const override { return caps_; }
  const PeerGroup& Group() const override { return group_; }

  Result<int> AllOk(bool ok, double timeout_s) override {
    HOIST_RETURN_IF_ERROR(Usable());
    allreduce_[0] = ok ? INT_MAX : group_.self;
    allreduce_[1] = INT_MAX;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(&allreduce_[0], &allreduce_[1], 1, MPI_INT, MPI_MIN, comm_, &req);
    if (rc != MPI_SUCCESS) return Fail("MPI_Iallreduce: " + MpiError(rc));
    allreduce_pending_ = true;
    const Clock::time_point deadline = Deadline(timeout_s);
    for (int spin = 0;; ++spin) {
      int flag = 0;
      rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Fail("agreement: MPI_Test: " + MpiError(rc));
      if (flag) break;
      if (Clock::now() > deadline) {
        return Fail("agreement timed out after " + Secs(timeout_s) +
                    ": a rank of the group did not arrive (" + kPeerFailureNote + ")");
      }
      Backoff(spin);
    }
    allreduce_pending_ = false;
    return allreduce_[1] == INT_MAX ? -1 : allreduce_[1];
  }

  Status GroupBegin() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (in_group_) return Status::InvalidArgument("mpi peer: GroupBegin inside a group");
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
    if (!in_group_) return Status::InvalidArgument("mpi peer: GroupEnd without GroupBegin");
    in_group_ = false;
    for (Op& op : queued_) {
      MPI_Request req = MPI_REQUEST_NULL;
      const int count = static_cast<int>(op.bytes);
      op.buffer = new std::byte[op.bytes];
      if (op.send) std::memcpy(op.buffer, op.arena, op.bytes);
      const int rc = op.send ? MPI_Isend(op.buffer, count, MPI_BYTE, op.index, kTag, comm_, &req)
                             : MPI_Irecv(op.buffer, count, MPI_BYTE, op.index, kTag, comm_, &req);
      if (rc != MPI_SUCCESS) {
        const std::string what = Describe(op);
        delete[] op.buffer;
        queued_.clear();
        return Fail(std::string(op.send ? "MPI_Isend" : "MPI_Irecv") + " (" + what +
                    "): " + MpiError(rc));
      }
      ops_.push_back(op);
      reqs_.push_back(req);
    }
    queued_.clear();
    return Status::Ok();
  }

  Result<bool> Test() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (Pending() == 0) return true;
    int outcount = 0;
    indices_.resize(reqs_.size());
    statuses_.resize(reqs_.size());
    const int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &outcount,
                                indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return Fail("MPI_Testsome: " + MpiError(rc));
    if (outcount == MPI_UNDEFINED) outcount = 0;
    for (int i = 0; i < outcount; ++i) {
      Op& op = ops_[static_cast<std::size_t>(indices_[i])];
      const MPI_Status& st = statuses_[i];
      if (rc == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_SUCCESS) {
        return Fail(Describe(op) + ": " + MpiError(st.MPI_ERROR));
      }
      if (!op.send) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (static_cast<std::uint64_t>(got) != op.bytes) {
          return Fail(Describe(op) + ": received " + std::to_string(got) + " bytes");
        }
        std::memcpy(op.arena, op.buffer, op.bytes);
        received_ += op.bytes;
      } else {
        sent_ += op.bytes;
      }
      delete[] op.buffer;
      op.buffer = nullptr;
      op.done = true;
      ++completed_;
    }
    if (Pending() > 0) return false;
    ops_.clear();
    reqs_.clear();
    completed_ = 0;
    return true;
  }

  Status Wait(double timeout_s) override {
    const Clock::time_point deadline = Deadline(timeout_s);
    for (int spin = 0;; ++spin) {
      HOIST_ASSIGN_OR_RETURN(bool done, Test());
      if (done) return Status::Ok();
      if (Clock::now() > deadline) {
        std::string what;
        int listed = 0;
        for (const Op& op : ops_) {
          if (op.done) continue;
          if (listed++ < 4) what += (what.empty() ? "" : "; ") + Describe(op);
        }
        if (listed > 4) what += "; ...";
        return Fail("timed out after " + Secs(timeout_s) + " with " + std::to_string(Pending()) +
                    " of " + std::to_string(ops_.size()) + " transfers pending (" + what +
                    "): " + kPeerFailureNote);
      }
      Backoff(spin);
    }
  }

  void Abort() override {
    if (aborted_) return;
    aborted_ = true;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Pending operations keep their buffers (leaked): MPI may still read or write them.
    for (MPI_Request& r : reqs_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    for (Op& op : ops_) {
      if (op.done) delete[] op.buffer;
    }
    ops_.clear();
    reqs_.clear();
    completed_ = 0;
    queued_.clear();
  }

  std::uint64_t bytes_sent() const override { return sent_; }
  std::uint64_t bytes_received() const override { return received_; }

 private:
  struct Op {
    bool send = false;
    int peer = 0;                 // global rank
    int index = 0;                // rank in comm_
    std::byte* arena = nullptr;   // the range in the caller's arena
    std::byte* buffer = nullptr;  // owned while posted (see the file comment)
    std::uint64_t offset = 0;     // arena offset, for messages
    std::uint64_t bytes = 0;
    bool done = false;
  };

  static Clock::time_point Deadline(double timeout_s) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(std::max(0.0, timeout_s)));
  }
  static std::string Secs(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", s);
    return buf;
  }
  static void Backoff(int spin) {
    // Poll hard for the first few hundred microseconds, then back off to 1 ms.
    if (spin < 64) return;
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 256 ? 20 : 1000));
  }

  std::size_t Pending() const { return ops_.size() - completed_; }

  std::string Describe(const Op& op) const {
    return std::string(op.send ? "send of " : "recv of ") + std::to_string(op.bytes) + " bytes " +
           (op.send ? "to rank " : "from rank ") + std::to_string(op.peer) + " at arena offset " +
           std::to_string(op.offset);
  }

  Status Usable() const {
    if (aborted_) return Status::Aborted("mpi peer: aborted after an earlier failure");
    return Status::Ok();
  }

  Status Fail(const std::string& what) {
    Abort();
    return Status::Aborted("mpi peer (rank " + std::to_string(group_.self) + ", group " +
                           GroupString(group_) + "): " + what);
  }

  Status Queue(bool send, int peer, const DeviceBuffer& arena, std::uint64_t offset,
               std::uint64_t bytes) {
    HOIST_RETURN_IF_ERROR(Usable());
    if (!in_group_) return Status::InvalidArgument("mpi peer: Send/Recv outside GroupBegin/End");
    const auto it = std::lower_bound(group_.ranks.begin(), group_.ranks.end(), peer);
    if (it == group_.ranks.end() || *it != peer || peer == group_.self) {
      return Status::InvalidArgument("mpi peer: rank " + std::to_string(peer) +
                                     " is not another member of group " + GroupString(group_));
    }
    if (arena.ptr == nullptr || offset > arena.bytes || bytes > arena.bytes - offset) {
      return Status::InvalidArgument("mpi peer: arena range [" + std::to_string(offset) + ", +" +
                                     std::to_string(bytes) + ") outside the arena of " +
                                     std::to_string(arena.bytes) + " bytes");
    }
    const int index = static_cast<int>(it - group_.ranks.begin());
    for (std::uint64_t done = 0; done < bytes;) {  // zero bytes: nothing to move on either side
      const std::uint64_t n = std::min(bytes - done, kMaxMessage);
      Op op;
      op.send = send;
      op.peer = peer;
      op.index = index;
      op.arena = static_cast<std::byte*>(arena.ptr) + offset + done;
      op.offset = offset + done;
      op.bytes = n;
      queued_.push_back(op);
      done += n;
    }
    return Status::Ok();
  }

  MPI_Comm comm_;
  PeerGroup group_;
  PeerCaps caps_;
  bool in_group_ = false;
  bool aborted_ = false;
  bool allreduce_pending_ = false;
  int* allreduce_ = new int[2];  // in, out; leaked if a timed-out Iallreduce may still write it
  std::vector<Op> queued_;
  std::vector<Op> ops_;
  std::vector<MPI_Request> reqs_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  std::size_t completed_ = 0;
  std::uint64_t sent_ = 0, received_ = 0;
};

}  // namespace

Result<std::unique_ptr<Peer>> CreateMpiPeer(const PeerGroup& group, int world) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return Status::FailedPrecondition("mpi peer: MPI is not initialised");
  if (group.ranks.empty() || !std::is_sorted(group.ranks.begin(), group.ranks.end()) ||
      std::adjacent_find(group.ranks.begin(), group.ranks.end()) != group.ranks.end() ||
      !std::binary_search(group.ranks.begin(), group.ranks.end(), group.self)) {
    return Status::InvalidArgument("mpi peer: group " + GroupString(group) +
                                   " must be ascending, distinct and contain rank " +
                                   std::to_string(group.self));
  }
  int world_rank = -1, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size != world) {
    return Status::FailedPrecondition(
        "mpi peer: the job has " + std::to_string(world) + " ranks but MPI_COMM_WORLD has " +
        std::to_string(world_size) + "; dedup over MPI needs the job to span MPI_COMM_WORLD");
  }
  if (world_rank != group.self) {
    return Status::InvalidArgument("mpi peer: this process is world rank " +
                                   std::to_string(world_rank) + ", not rank " +
                                   std::to_string(group.self));
  }
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_split(MPI_COMM_WORLD, group.ranks.front(), group.self, &comm);
  if (rc != MPI_SUCCESS) return Status::IoError("mpi peer: MPI_Comm_split: " + MpiError(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int size = 0, me = -1;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &me);
  const auto expect_me =
      std::lower_bound(group.ranks.begin(), group.ranks.end(), group.self) - group.ranks.begin();
  if (size != static_cast<int>(group.ranks.size()) || me != expect_me) {
    MPI_Comm_free(&comm);
    return Status::Internal("mpi peer: ranks disagree on the group of rank " +
                            std::to_string(group.self) + " " + GroupString(group) +
                            ": the split communicator has " + std::to_string(size) + " ranks");
  }
  return std::unique_ptr<Peer>(new MpiPeer(comm, group));
}

#if !defined(HOIST_HAVE_NCCL)
Result<std::string> NcclUniqueId() {
  return Status::Unsupported("this build has no NCCL (dedup on GPUs needs it)");
}
Result<std::unique_ptr<Peer>> CreateNcclPeer(const PeerGroup&, int, const std::string&, double) {
  return Status::Unsupported("this build has no NCCL (dedup on GPUs needs it)");
}
bool HaveNccl() { return false; }
#endif

}  // namespace hoist::transport
