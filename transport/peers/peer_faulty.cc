// WrapFaultyPeer (transport/peers/peer.h): fault injection for the dedup failure tests, through the
// Peer seam.
#include <utility>

#include "transport/peers/peer.h"

namespace hoist::transport {
namespace {

class FaultyPeer final : public Peer {
 public:
  FaultyPeer(std::unique_ptr<Peer> real, PeerFault fault) : real_(std::move(real)), fault_(fault) {}

  std::string Name() const override { return real_->Name(); }
  const PeerCaps& Caps() const override { return real_->Caps(); }
  const PeerGroup& Group() const override { return real_->Group(); }
  Result<bool> Ready() override { return real_->Ready(); }
  Status GroupBegin() override {
    if (fault_ == PeerFault::kStall) stalled_ = true;  // from the first group on
    return real_->GroupBegin();
  }
  Status Send(int peer, const DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    if (stalled_) return Status::Ok();  // withheld
    return real_->Send(peer, arena, offset, bytes);
  }
  Status Recv(int peer, const DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    return real_->Recv(peer, arena, offset, bytes);
  }
  Status GroupEnd() override {
    HOIST_RETURN_IF_ERROR(real_->GroupEnd());
    issued_ = true;
    return Status::Ok();
  }
  Result<bool> Test() override {
    if (issued_ && fault_ == PeerFault::kError) {
      real_->Abort();
      return Status::IoError("injected peer failure (--inject-peer-fault) after issuing " +
                             std::string("exchange step 0"));
    }
    HOIST_ASSIGN_OR_RETURN(bool done, real_->Test());
    return done && !stalled_;
  }
  Status Wait(double timeout_s) override {
    if (stalled_) return Status::Aborted("injected stall (--inject-peer-fault)");
    return real_->Wait(timeout_s);
  }
  std::uint64_t groups_issued() const override {
    return stalled_ ? real_->groups_completed() : real_->groups_issued();
  }
  std::uint64_t groups_completed() const override { return real_->groups_completed(); }
  std::string PendingText() const override { return real_->PendingText(); }
  void Abort() override { real_->Abort(); }
  std::uint64_t bytes_sent() const override { return real_->bytes_sent(); }
  std::uint64_t bytes_received() const override { return real_->bytes_received(); }
  bool timed_out() const override { return real_->timed_out(); }

 private:
  std::unique_ptr<Peer> real_;
  PeerFault fault_;
  bool issued_ = false;
  bool stalled_ = false;
};

}  // namespace

std::unique_ptr<Peer> WrapFaultyPeer(std::unique_ptr<Peer> peer, PeerFault fault) {
  return std::make_unique<FaultyPeer>(std::move(peer), fault);
}

}  // namespace hoist::transport
