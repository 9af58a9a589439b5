#include "transport/peers/peer_ops.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

namespace hoist::transport {

PeerOps::PeerOps(std::string name, PeerGroup group, std::uint64_t max_op_bytes)
    : name_(std::move(name)), group_(std::move(group)), max_op_bytes_(max_op_bytes) {}

std::string PeerOps::Who() const {
  return name_ + " (rank " + std::to_string(group_.self) + ", group " + GroupString(group_) + ")";
}

Status PeerOps::Begin() {
  if (in_group_) return Status::InvalidArgument(name_ + ": GroupBegin inside a group");
  in_group_ = true;
  return Status::Ok();
}

Status PeerOps::Queue(bool send, int peer, const DeviceBuffer& arena, std::uint64_t offset,
                      std::uint64_t bytes) {
  if (!in_group_) return Status::InvalidArgument(name_ + ": Send/Recv outside GroupBegin/End");
  const auto it = std::lower_bound(group_.ranks.begin(), group_.ranks.end(), peer);
  if (it == group_.ranks.end() || *it != peer || peer == group_.self) {
    return Status::InvalidArgument(name_ + ": rank " + std::to_string(peer) +
                                   " is not another member of group " + GroupString(group_));
  }
  if (arena.ptr == nullptr || offset > arena.bytes || bytes > arena.bytes - offset) {
    return Status::InvalidArgument(name_ + ": arena range [" + std::to_string(offset) + ", +" +
                                   std::to_string(bytes) + ") outside the arena of " +
                                   std::to_string(arena.bytes) + " bytes");
  }
  const int index = static_cast<int>(it - group_.ranks.begin());
  for (std::uint64_t done = 0; done < bytes;) {  // zero bytes: nothing moves on either side
    const std::uint64_t n = std::min(bytes - done, max_op_bytes_);
    PeerOp op;
    op.send = send;
    op.peer = peer;
    op.index = index;
    op.ptr = static_cast<std::byte*>(arena.ptr) + offset + done;
    op.offset = offset + done;
    op.bytes = n;
    queued_.push_back(op);
    done += n;
  }
  return Status::Ok();
}

Result<std::vector<PeerOp>> PeerOps::End() {
  if (!in_group_) return Status::InvalidArgument(name_ + ": GroupEnd without GroupBegin");
  in_group_ = false;
  return std::exchange(queued_, {});
}

void PeerOps::Issued(std::vector<PeerOp> ops) {
  ++issued_;
  inflight_.push_back(std::move(ops));
}

void PeerOps::CompleteOldest() {
  if (inflight_.empty()) return;
  for (const PeerOp& op : inflight_.front()) (op.send ? sent_ : received_) += op.bytes;
  inflight_.pop_front();
  ++completed_;
}

void PeerOps::Forget() {
  inflight_.clear();
  queued_.clear();
  in_group_ = false;
}

std::string PeerOps::Describe(const PeerOp& op) {
  return std::string(op.send ? "send of " : "recv of ") + std::to_string(op.bytes) + " bytes " +
         (op.send ? "to rank " : "from rank ") + std::to_string(op.peer) + " at arena offset " +
         std::to_string(op.offset);
}

std::size_t PeerOps::PendingOps() const {
  std::size_t n = 0;
  for (const auto& g : inflight_) {
    for (const PeerOp& op : g) n += op.done ? 0 : 1;
  }
  return n;
}

std::string PeerOps::PendingText() const {
  std::string s;
  int listed = 0;
  for (const auto& g : inflight_) {
    for (const PeerOp& op : g) {
      if (op.done) continue;
      if (listed++ < 4) s += (s.empty() ? "" : "; ") + Describe(op);
    }
  }
  if (listed > 4) s += "; ...";
  return s;
}

QueuedPeer::QueuedPeer(std::string name, PeerGroup group, std::uint64_t max_op_bytes, PeerCaps caps)
    : ops_(name + " peer", std::move(group), max_op_bytes), name_(std::move(name)), caps_(caps) {}

Status QueuedPeer::GroupBegin() {
  HOIST_RETURN_IF_ERROR(Usable());
  return ops_.Begin();
}

Status QueuedPeer::Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
                        std::uint64_t bytes) {
  HOIST_RETURN_IF_ERROR(Usable());
  return ops_.Queue(true, peer, arena, offset, bytes);
}

Status QueuedPeer::Recv(int peer, const DeviceBuffer& arena, std::uint64_t offset,
                        std::uint64_t bytes) {
  HOIST_RETURN_IF_ERROR(Usable());
  return ops_.Queue(false, peer, arena, offset, bytes);
}

Status QueuedPeer::GroupEnd() {
  HOIST_RETURN_IF_ERROR(Usable());
  HOIST_ASSIGN_OR_RETURN(std::vector<PeerOp> ops, ops_.End());
  if (ops.empty()) return Status::Ok();
  return Issue(std::move(ops));
}

Result<bool> QueuedPeer::Test() {
  HOIST_RETURN_IF_ERROR(Usable());
  HOIST_RETURN_IF_ERROR(Progress());
  while (!ops_.inflight().empty()) {
    HOIST_ASSIGN_OR_RETURN(bool done, OldestDone());
    if (!done) return false;
    RetireOldest();
    ops_.CompleteOldest();
  }
  return true;
}

Status QueuedPeer::Wait(double timeout_s) {
  const auto deadline = DeadlineAfter(timeout_s);
  for (int spin = 0;; ++spin) {
    HOIST_ASSIGN_OR_RETURN(bool done, Test());
    if (done) return Status::Ok();
    if (PeerOps::Clock::now() > deadline) {
      return FailTimedOut("timed out after " + SecondsText(timeout_s) + " with " +
                          std::to_string(ops_.PendingOps()) + " transfers pending (" +
                          ops_.PendingText() + "): " + kPeerFailureNote);
    }
    PollBackoff(spin);
  }
}

void QueuedPeer::Abort() {
  if (aborted_) return;
  aborted_ = true;
  AbortTransport();
  ops_.Forget();
}

Status QueuedPeer::Usable() const {
  if (aborted_) return Status::Aborted(name_ + " peer: aborted after an earlier failure");
  return Status::Ok();
}

Status QueuedPeer::Fail(const std::string& what) {
  const std::string msg = ops_.Who() + Where() + ": " + what;
  Abort();
  return Status::Aborted(msg);
}

Status QueuedPeer::FailTimedOut(const std::string& what) {
  timed_out_ = true;
  return Fail(what);
}

std::string GroupString(const PeerGroup& g) {
  std::string s = "[";
  for (std::size_t i = 0; i < g.ranks.size(); ++i) {
    s.append(i ? "," : "").append(std::to_string(g.ranks[i]));
  }
  return s + "]";
}

Status ValidateGroup(const std::string& name, const PeerGroup& group) {
  if (group.ranks.empty() || !std::is_sorted(group.ranks.begin(), group.ranks.end()) ||
      std::adjacent_find(group.ranks.begin(), group.ranks.end()) != group.ranks.end() ||
      !std::binary_search(group.ranks.begin(), group.ranks.end(), group.self)) {
    return Status::InvalidArgument(name + ": group " + GroupString(group) +
                                   " must be ascending, distinct and contain rank " +
                                   std::to_string(group.self));
  }
  return Status::Ok();
}

PeerOps::Clock::time_point DeadlineAfter(double seconds) {
  return PeerOps::Clock::now() + std::chrono::duration_cast<PeerOps::Clock::duration>(
                                     std::chrono::duration<double>(std::max(0.0, seconds)));
}

std::string SecondsText(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  return buf;
}

void PollBackoff(int spin) {
  if (spin < 64) return;
  std::this_thread::sleep_for(std::chrono::microseconds(spin < 256 ? 20 : 1000));
}

}  // namespace hoist::transport
