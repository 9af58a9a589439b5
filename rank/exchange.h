// One rank's part of a dedup load (planner/dedup.h) as a stage of its pipeline: the rank reads
// its share of the shared bytes (and its own bytes) in ONE staging-pipeline run, and forwards
// each exchange step to the ranks of its peer group that need it as soon as the step's bytes
// have landed in its arena, while the pipeline goes on reading the next step.
//
// Execution: the pipeline's copies are the steps' reads in step order, then the own reads
// (ReadPlan()). A milestone per step (transport/staging/pipeline.h) records an event on the copy
// stream once the step's reads are enqueued. The driver thread (the one that owns MPI) calls
// Poll(): when step b's event has completed and the peer is ready, step b's receives and sends are
// issued as one group; groups progress while the pipeline reads on. No collective round runs per
// step: ranks issue their groups in the same order, so they pair up, and each waits only for the
// data it needs.
//
// Before anything moves, the exchange plan is checked: every send lies in bytes this rank read
// by that step, reads + receives + fills tile exactly the arena bytes the copies and fills
// define, and every send/recv pairs with the peer's plan in order and size.
//
// Failure: failures are agreed by the coordinator's control plane, not here: a rank whose reads
// fail stops issuing steps and reports; the others are told and call Abort(). Poll() fails (and
// aborts the peer) when the peer fails or when the oldest group in flight has waited longer than
// timeout_s, naming the transfers still pending (with transport::kPeerFailureNote for the reader;
// timed_out() tells code).
// Threading: Create, Poll, Abort and Report run on the driver thread; the milestone callback the
// pipeline calls (AttachTo) may run on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "rank/exchange_options.h"
#include "transport/devices/device.h"
#include "transport/peers/peer.h"
#include "transport/staging/pipeline.h"

namespace hoist::rank {

struct ExchangeReport {
  std::string peer_name;        // "mpi", "nccl"
  transport::PhaseTiming peer;  // first group issued -> last completed
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  int steps = 0;
};

// The copies the rank reads from storage: its steps' reads and own reads with an exchange,
// otherwise all its copies.
std::vector<const proto::Copy*> StorageReads(const proto::RankPlan& rank_plan, bool exchange);

// Checks `rank_plan`'s exchange against its copies, fills and arena, and its transfers against
// the peers' plans (see above). Errors name the rank, step, peer and arena offset (and tensor).
Status ValidateExchange(const proto::LoadPlan& plan, const proto::RankPlan& rank_plan,
                        const transport::PeerGroup& group);

// The members of `rank`'s peer group in `plan` (ranks with its peer_group), ascending.
transport::PeerGroup GroupOf(const proto::LoadPlan& plan, int rank);

class Exchange {
 public:
  // Validates the exchange (plan, peer and device kinds) and creates one event per step on
  // `device`. `peer` and `arena` must outlive the Exchange.
  static Result<std::unique_ptr<Exchange>> Create(transport::Device& device,
                                                  const transport::DeviceBuffer& arena,
                                                  const proto::LoadPlan& plan,
                                                  const proto::RankPlan& rank_plan,
                                                  transport::Peer& peer, ExchangeOptions options);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // The rank's storage reads as one pipeline plan: the steps' reads in order, then the own
  // reads; the fills.
  const proto::RankPlan& read_plan() const { return read_plan_; }
  // Sets the milestones of `options` (one per step) for the pipeline run over read_plan().
  void AttachTo(transport::PipelineOptions* options);

  // Driver thread: issues every step whose reads have landed (once the peer is ready) and
  // progresses the groups in flight. True once every step was issued and completed.
  Result<bool> Poll();
  // Driver thread: stops forwarding (another rank failed, or this rank's reads did).
  void Abort();

  // True once Poll failed because another rank did not answer in time: a group waited longer
  // than timeout_s, or the peer timed out (set-up or transfers). Not this rank's own failure.
  bool timed_out() const { return stalled_ || peer_.timed_out(); }
  // True once the first group was issued.
  bool issued_any() const { return first_issue_.has_value(); }

  // When the peer became ready (for the peer_init phase); unset until then.
  std::optional<std::chrono::steady_clock::time_point> ready_at() const { return ready_at_; }
  ExchangeReport Report(std::chrono::steady_clock::time_point origin) const;

 private:
  Exchange(transport::Device& device, const transport::DeviceBuffer& arena,
           const proto::RankPlan& rank_plan, transport::Peer& peer, ExchangeOptions options);
  Status IssueStep(int step);
  Status CheckStalled();

  transport::Device& device_;
  const transport::DeviceBuffer& arena_;
  const proto::RankPlan& rank_plan_;
  transport::Peer& peer_;
  ExchangeOptions options_;
  proto::RankPlan read_plan_;
  std::vector<transport::EventId> events_;  // per step
  std::atomic<int> landed_enqueued_{0};     // steps whose milestone the pipeline recorded
  int next_step_ = 0;                       // next step to issue
  std::deque<std::chrono::steady_clock::time_point> issued_at_;  // groups in flight
  std::optional<std::chrono::steady_clock::time_point> ready_at_, first_issue_, last_complete_;
  bool aborted_ = false;
  bool stalled_ = false;  // CheckStalled gave up
};

}  // namespace hoist::rank
