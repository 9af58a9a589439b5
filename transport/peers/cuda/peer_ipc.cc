// The CUDA IPC peer (transport/peers/peer.h: CreateCudaIpcPeer): the ranks of one host move arena
// ranges GPU to GPU with copy-engine copies over NVLink (or PCIe peer-to-peer), with no
// communicator to set up. A send is a notice: an MPI message to the receiver with the range's
// arena offset (and, the first time, the sender's arena as a CUDA IPC handle plus the arena's
// offset inside its allocation). The receiver opens the handle once, and for each notice, matched
// in order with its posted receives from that sender, enqueues one cudaMemcpyAsync that pulls the
// bytes into its own arena, with an event to poll. A group completes when its notices went out
// and its pulls landed.
//
// The exchange issues a step's sends only once the step's bytes are in the sender's arena, and
// arenas are never written again during a load, so a pull always reads final bytes.
//
// Compiled only with CUDA (the MPI part is the plain C API, like peer_mpi.cc).
#if defined(HOIST_HAVE_CUDA)

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstring>
#include <deque>
#include <map>

#include "transport/peers/peer.h"
#include "transport/peers/peer_ops.h"

namespace hoist::transport {
namespace {

constexpr int kNoticeTag = 0x6871;

// What a sender tells its receiver for one transfer.
struct Notice {
  std::uint64_t offset = 0;  // the range in the sender's arena
  std::uint64_t bytes = 0;
  std::uint64_t base_offset = 0;  // the sender's arena start inside its IPC allocation
  std::uint32_t has_handle = 0;
  cudaIpcMemHandle_t handle{};
};

std::string CudaText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

class IpcPeer final : public QueuedPeer {
 public:
  IpcPeer(PeerGroup group, int ordinal, MPI_Comm comm)
      : QueuedPeer("cuda-ipc", std::move(group), ~0ull,
                   PeerCaps{.device_memory = true, .cross_node = false}),
        ordinal_(ordinal),
        comm_(comm) {}

  ~IpcPeer() override {
    cudaSetDevice(ordinal_);
    if (!groups_.empty()) Abort();
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (auto& [rank, base] : remote_) cudaIpcCloseMemHandle(base);
  }

  Result<bool> Ready() override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (stream_ != nullptr) return true;
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    HOIST_RETURN_IF_ERROR(
        Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    return true;
  }

  Status Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    HOIST_RETURN_IF_ERROR(Usable());
    if (arena_base_ == nullptr && arena.ptr != nullptr) HOIST_RETURN_IF_ERROR(ExportArena(arena));
    return QueuedPeer::Send(peer, arena, offset, bytes);
  }

 private:
  Status Issue(std::vector<PeerOp> ops) override {
    HOIST_ASSIGN_OR_RETURN(bool ready, Ready());
    if (!ready) return Status::FailedPrecondition("cuda-ipc peer: GroupEnd before Ready()");
    InFlight g;
    g.slots.resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].send) {
        HOIST_RETURN_IF_ERROR(PostNotice(ops[i], &g.slots[i]));
      } else {
        pending_[ops[i].peer].push_back({ops_.groups_issued(), i});
      }
    }
    groups_.push_back(std::move(g));
    ops_.Issued(std::move(ops));
    return MatchEarlyNotices();
  }

  Status Progress() override { return ReceiveNotices(); }

  void RetireOldest() override {
    for (Slot& s : groups_.front().slots) {
      if (s.event != nullptr) free_events_.push_back(s.event);
    }
    groups_.pop_front();
  }

  void AbortTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (InFlight& g : groups_) {
      for (Slot& s : g.slots) {
        if (s.request != MPI_REQUEST_NULL && !finalized) {
          MPI_Cancel(&s.request);
          MPI_Request_free(&s.request);
          s.notice.release();  // MPI may still read it
        }
        if (s.event != nullptr) free_events_.push_back(s.event);
      }
    }
    groups_.clear();
    pending_.clear();
  }

  std::string Where() const override { return " on cuda:" + std::to_string(ordinal_); }

  // One op of a group in flight: a posted notice (send) or an enqueued pull (recv).
  struct Slot {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<Notice> notice;
    cudaEvent_t event = nullptr;  // recv: recorded after its pull
  };
  struct InFlight {
    std::vector<Slot> slots;
  };
  struct RecvRef {
    std::uint64_t group;  // absolute group number
    std::size_t op;
  };

  Status ExportArena(const DeviceBuffer& arena) {
    HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
    // The arena may lie inside a larger allocation (an engine's): IPC maps whole allocations.
    // The driver call comes through the runtime, so hoist needs no link to libcuda.
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HOIST_RETURN_IF_ERROR(Cuda(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020,
                                                                cudaEnableDefault, &found),
                               "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)"));
    if (fn == nullptr || found != cudaDriverEntryPointSuccess) {
      return Fail("the driver has no cuMemGetAddressRange");
    }
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn)(
            &base, &size, reinterpret_cast<CUdeviceptr>(arena.ptr)) != CUDA_SUCCESS) {
      return Fail("cuMemGetAddressRange: the arena is not CUDA device memory");
    }
    HOIST_RETURN_IF_ERROR(Cuda(cudaIpcGetMemHandle(&handle_, reinterpret_cast<void*>(base)),
                               "cudaIpcGetMemHandle (the arena's allocation)"));
    arena_base_ = reinterpret_cast<std::byte*>(base);
    base_offset_ = static_cast<std::uint64_t>(static_cast<std::byte*>(arena.ptr) - arena_base_);
    return Status::Ok();
  }

  Status PostNotice(const PeerOp& op, Slot* slot) {
    auto n = std::make_unique<Notice>();
    n->offset = op.offset;
    n->bytes = op.bytes;
    n->base_offset = base_offset_;
    if (!handle_sent_[op.peer]) {
      n->has_handle = 1;
      n->handle = handle_;
      handle_sent_[op.peer] = true;
    }
    const int rc =
        MPI_Isend(n.get(), sizeof(Notice), MPI_BYTE, op.peer, kNoticeTag, comm_, &slot->request);
    if (rc != MPI_SUCCESS) return Fail("MPI_Isend (" + PeerOps::Describe(op) + ")");
    slot->notice = std::move(n);
    return Status::Ok();
  }

  // Takes every notice that arrived; each pulls into the next posted receive from its sender.
  Status ReceiveNotices() {
    for (;;) {
      int flag = 0;
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      if (MPI_Improbe(MPI_ANY_SOURCE, kNoticeTag, comm_, &flag, &msg, &st) != MPI_SUCCESS) {
        return Fail("MPI_Improbe");
      }
      if (!flag) return Status::Ok();
      Notice n;
      if (MPI_Mrecv(&n, sizeof n, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return Fail("MPI_Mrecv (a notice from rank " + std::to_string(st.MPI_SOURCE) + ")");
      }
      early_[st.MPI_SOURCE].push_back(n);
      HOIST_RETURN_IF_ERROR(MatchEarlyNotices());
    }
  }

  // Pairs notices with posted receives, in order per sender, and enqueues the pulls.
  Status MatchEarlyNotices() {
    for (auto& [from, notices] : early_) {
      auto& recvs = pending_[from];
      while (!notices.empty() && !recvs.empty()) {
        HOIST_RETURN_IF_ERROR(Pull(from, notices.front(), recvs.front()));
        notices.pop_front();
        recvs.pop_front();
      }
    }
    return Status::Ok();
  }

  Status Pull(int from, const Notice& n, const RecvRef& ref) {
    const std::size_t g = static_cast<std::size_t>(ref.group - ops_.groups_completed());
    PeerOp& op = ops_.inflight()[g][ref.op];
    if (n.bytes != op.bytes) {
      return Fail(PeerOps::Describe(op) + ": rank " + std::to_string(from) + " sent " +
                  std::to_string(n.bytes) + " bytes (mispaired transfer)");
    }
    if (n.has_handle && !remote_.count(from)) {
      void* p = nullptr;
      HOIST_RETURN_IF_ERROR(Cuda(cudaSetDevice(ordinal_), "cudaSetDevice"));
      HOIST_RETURN_IF_ERROR(
          Cuda(cudaIpcOpenMemHandle(&p, n.handle, cudaIpcMemLazyEnablePeerAccess),
               ("cudaIpcOpenMemHandle (rank " + std::to_string(from) + "'s arena)").c_str()));
      remote_[from] = static_cast<std::byte*>(p);
    }
    auto it = remote_.find(from);
    if (it == remote_.end()) return Fail("rank " + std::to_string(from) + " sent no arena handle");
    Slot& slot = groups_[g].slots[ref.op];
    HOIST_RETURN_IF_ERROR(TakeEvent(&slot.event));
    HOIST_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(op.ptr, it->second + n.base_offset + n.offset,
                                               n.bytes, cudaMemcpyDeviceToDevice, stream_),
                               "cudaMemcpyAsync (pull)"));
    return Cuda(cudaEventRecord(slot.event, stream_), "cudaEventRecord");
  }

  // Whether every op of the oldest group completed (marking the ones that did).
  Result<bool> OldestDone() override {
    std::vector<PeerOp>& ops = ops_.inflight().front();
    InFlight& g = groups_.front();
    bool all = true;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].done) continue;
      Slot& s = g.slots[i];
      if (ops[i].send) {
        int done = 0;
        if (MPI_Test(&s.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return Fail("MPI_Test");
        ops[i].done = done != 0;
      } else if (s.event != nullptr) {
        const cudaError_t e = cudaEventQuery(s.event);
        if (e == cudaErrorNotReady) {
          (void)cudaGetLastError();
        } else if (e != cudaSuccess) {
          return Fail("pull of " + PeerOps::Describe(ops[i]) + ": " + CudaText(e));
        } else {
          ops[i].done = true;
        }
      }
      all = all && ops[i].done;
    }
    return all;
  }

  Status TakeEvent(cudaEvent_t* e) {
    if (!free_events_.empty()) {
      *e = free_events_.back();
      free_events_.pop_back();
      return Status::Ok();
    }
    return Cuda(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
  }

  Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    return Fail(std::string(what) + ": " + CudaText(e));
  }

  int ordinal_ = 0;
  MPI_Comm comm_;  // the job's; not owned
  cudaStream_t stream_ = nullptr;
  std::byte* arena_base_ = nullptr;  // this rank's arena allocation (exported)
  std::uint64_t base_offset_ = 0;
  cudaIpcMemHandle_t handle_{};
  std::map<int, bool> handle_sent_;
  std::map<int, std::byte*> remote_;            // sender -> its arena allocation, mapped here
  std::deque<InFlight> groups_;                 // parallel to ops_.inflight()
  std::map<int, std::deque<RecvRef>> pending_;  // posted receives without a notice, per sender
  std::map<int, std::deque<Notice>> early_;     // notices without a posted receive, per sender
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace

Result<std::unique_ptr<Peer>> CreateCudaIpcPeer(const PeerGroup& group, int ordinal, int world,
                                                const void* mpi_comm) {
  HOIST_RETURN_IF_ERROR(ValidateGroup("cuda-ipc peer", group));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return Status::FailedPrecondition("cuda-ipc peer: MPI is not initialised");
  const MPI_Comm base = mpi_comm ? *static_cast<const MPI_Comm*>(mpi_comm) : MPI_COMM_WORLD;
  int rank = -1, size = 0;
  MPI_Comm_rank(base, &rank);
  MPI_Comm_size(base, &size);
  if (size != world || rank != group.self) {
    return Status::FailedPrecondition("cuda-ipc peer: rank " + std::to_string(group.self) + " of " +
                                      std::to_string(world) +
                                      " is not this process's place in its communicator");
  }
  // The job's communicator itself (its notices have their own tag): duplicating it would be a
  // collective, which a silent rank could hang.
  return std::unique_ptr<Peer>(new IpcPeer(group, ordinal, base));
}

}  // namespace hoist::transport

#endif  // HOIST_HAVE_CUDA
