// What the MPI, CUDA IPC and NCCL peers share (transport/peers/peer.h). PeerOps: argument checks
// for Send/Recv, the queue of a group being built, the groups in flight in issue order, completion
// counters, and the text that names pending transfers in errors. QueuedPeer: the Peer methods
// built on it (group begin/end, the Test loop over the oldest group, the bounded Wait, Abort once,
// the counters), leaving each transport only how it posts a group, tests and retires its oldest
// group, and cancels what it posted.
//
// Ownership: plain values; ops point into the caller's arena. Failure: Queue returns
// InvalidArgument for a bad peer, range or call order; a QueuedPeer that failed (Fail) or was
// aborted answers every later call with Aborted. Threading: one thread at a time (the peer's).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "transport/devices/device.h"
#include "transport/peers/peer.h"

namespace hoist::transport {

struct PeerOp {
  bool send = false;
  int peer = 0;              // global rank
  int index = 0;             // the peer's index in the group (its rank in the communicator)
  std::byte* ptr = nullptr;  // the range in the caller's arena
  std::uint64_t offset = 0;  // arena offset, for messages
  std::uint64_t bytes = 0;
  bool done = false;
};

class PeerOps {
 public:
  using Clock = std::chrono::steady_clock;

  // `name` prefixes messages ("mpi peer"); ops larger than `max_op_bytes` are split.
  PeerOps(std::string name, PeerGroup group, std::uint64_t max_op_bytes);

  const PeerGroup& group() const { return group_; }
  // "mpi peer (rank 1, group [0,1])"
  std::string Who() const;

  Status Begin();
  Status Queue(bool send, int peer, const DeviceBuffer& arena, std::uint64_t offset,
               std::uint64_t bytes);
  // Ends the group being built: its ops, to be issued by the caller (then Issued()).
  Result<std::vector<PeerOp>> End();
  // A group is in flight from now.
  void Issued(std::vector<PeerOp> ops);

  // The groups in flight, oldest first.
  std::deque<std::vector<PeerOp>>& inflight() { return inflight_; }
  // Marks the oldest group complete (all its ops), adding its bytes to the counters.
  void CompleteOldest();
  // Drops every group in flight without counting it (Abort).
  void Forget();

  std::uint64_t groups_issued() const { return issued_; }
  std::uint64_t groups_completed() const { return completed_; }
  std::uint64_t bytes_sent() const { return sent_; }
  std::uint64_t bytes_received() const { return received_; }

  // "recv of 4096 bytes from rank 2 at arena offset 0"
  static std::string Describe(const PeerOp& op);
  // Up to four pending ops of the groups in flight, "; ..." past that.
  std::string PendingText() const;
  std::size_t PendingOps() const;

 private:
  std::string name_;
  PeerGroup group_;
  std::uint64_t max_op_bytes_;
  bool in_group_ = false;
  std::vector<PeerOp> queued_;
  std::deque<std::vector<PeerOp>> inflight_;
  std::uint64_t issued_ = 0, completed_ = 0;
  std::uint64_t sent_ = 0, received_ = 0;
};

// A Peer whose ops are queued through PeerOps. Subclasses implement Ready and the transport
// hooks below; everything else is here.
class QueuedPeer : public Peer {
 public:
  std::string Name() const final { return name_; }
  const PeerCaps& Caps() const final { return caps_; }
  const PeerGroup& Group() const final { return ops_.group(); }

  Status GroupBegin() final;
  Status Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override;
  Status Recv(int peer, const DeviceBuffer& arena, std::uint64_t offset, std::uint64_t bytes) final;
  Status GroupEnd() final;
  Result<bool> Test() final;
  Status Wait(double timeout_s) final;

  std::uint64_t groups_issued() const final { return ops_.groups_issued(); }
  std::uint64_t groups_completed() const final { return ops_.groups_completed(); }
  std::string PendingText() const final { return ops_.PendingText(); }
  void Abort() final;
  std::uint64_t bytes_sent() const final { return ops_.bytes_sent(); }
  std::uint64_t bytes_received() const final { return ops_.bytes_received(); }
  bool timed_out() const final { return timed_out_; }

 protected:
  // `name`: what Name() returns ("mpi"); messages say "<name> peer". Ops larger than
  // `max_op_bytes` are split.
  QueuedPeer(std::string name, PeerGroup group, std::uint64_t max_op_bytes, PeerCaps caps);

  // Posts one group's ops (never empty) and, once they are posted, hands them to
  // ops_.Issued(). A transport error goes through Fail (the peer is then aborted).
  virtual Status Issue(std::vector<PeerOp> ops) = 0;
  // Called by Test before it looks at the groups (e.g. to take arrived notices). Default: none.
  virtual Status Progress() { return Status::Ok(); }
  // Whether every op of the oldest group in flight completed (marking those that did).
  virtual Result<bool> OldestDone() = 0;
  // The oldest group completed: releases what the transport held for it (ops_ then counts it).
  virtual void RetireOldest() = 0;
  // Cancels what the transport posted; called once, by the first Abort().
  virtual void AbortTransport() = 0;
  // What follows the peer's name and group in errors (" on cuda:0"). Default: nothing.
  virtual std::string Where() const { return ""; }

  // OK unless the peer was aborted.
  Status Usable() const;
  // Aborts the peer and returns Aborted("<name> peer (rank R, group [..])<Where>: <what>").
  Status Fail(const std::string& what);
  // Fail for a timeout waiting for other ranks (timed_out() is true from now on).
  Status FailTimedOut(const std::string& what);

  PeerOps ops_;

 private:
  std::string name_;
  PeerCaps caps_;
  bool aborted_ = false;
  bool timed_out_ = false;  // an error was a timeout waiting for other ranks
};

// "[0,1,3]"
std::string GroupString(const PeerGroup& group);
// InvalidArgument unless the group is ascending, distinct and contains self.
Status ValidateGroup(const std::string& name, const PeerGroup& group);

// Deadline helpers for the polling loops of the peers.
PeerOps::Clock::time_point DeadlineAfter(double seconds);
std::string SecondsText(double seconds);  // "2.0 s"
// Spins for the first polls, then sleeps 20 us, then 1 ms.
void PollBackoff(int spin);

}  // namespace hoist::transport
