// One rank's part of a dedup load (planner/dedup.h): read its share of the shared bytes, forward
// them to the ranks of its peer group that need them, receive the rest, and read its own bytes.
//
// Execution (RunExchange): a helper thread runs the staging pipeline over each exchange step's
// reads in order, then over the rank's own reads (the plan's fills go with the first run). The
// calling thread drives the Peer: when step b's reads have drained into the arena, the group
// agrees that every member read its part (Peer::AllOk), then the step's receives and sends are
// issued as one group and progress while the helper reads step b+1 and the own reads. So
// reading, H2D and forwarding overlap, and receives land in arena ranges no read of this rank
// touches. Before anything moves, the rank's exchange plan is checked: every send lies in bytes
// this rank read by that step, reads + receives + fills tile exactly the arena bytes the copies
// and fills define, and every send/recv pairs with the peer's plan in order and size.
//
// Failure: a rank whose reads fail (or that fails before reaching RunExchange: AbandonExchange)
// tells its group through the agreement round, so every member stops at the same step, drains
// what was already issued and returns (its own error, or Aborted naming the failed peer) without
// a hang. A peer that errors, stalls or dies mid-exchange makes Wait/AllOk fail within
// timeout_s (the peer is then aborted) with a message naming the rank, the step and the pending
// transfers. Threading: RunExchange and AbandonExchange run on the thread that drives the Peer
// (for MPI, the thread that initialised MPI); RunExchange starts and joins its helper thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/device.h"
#include "transport/peer.h"
#include "transport/pipeline.h"

namespace hoist::rank {

enum class DeviceKind;  // rank/worker.h

// Tests: a fault this rank injects right after issuing its first exchange step: it dies
// (SIGKILL), its transport fails (the peer is aborted and the rank returns an error), or it
// stalls (sleeps 2 x timeout_s + 1 s without progressing its peer, then carries on).
enum class PeerFault { kNone, kKill, kError, kStall };

struct ExchangeOptions {
  // The data plane of this rank's group; nullptr: no exchange (a rank of a dedup plan then reads
  // every one of its copies itself, e.g. a single rank run without mpirun).
  transport::Peer* peer = nullptr;
  double timeout_s = 120;  // bound on any wait for a peer (agreement, transfers, NCCL init)
  PeerFault fault = PeerFault::kNone;
};

struct ExchangeReport {
  std::string peer_name;        // "mpi", "nccl"
  transport::PhaseTiming peer;  // first transfer issued -> last completed
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  int steps = 0;
};

// True when a rank's error says it stopped because of another rank (transport::kPeerFailureNote).
bool CausedByPeer(std::string_view error);

// True when a rank of `plan` runs an exchange: a dedup plan and a peer.
bool ExchangeActive(const proto::LoadPlan& plan, const ExchangeOptions& options);

// The copies the rank reads from storage: its steps' reads and own reads with an exchange,
// otherwise all its copies.
std::vector<const proto::Copy*> StorageReads(const proto::RankPlan& rank_plan, bool exchange);

// Checks `rank_plan`'s exchange against its copies, fills and arena, and its transfers against
// the peers' plans (see above). Errors name the rank, step, peer and arena offset (and tensor).
Status ValidateExchange(const proto::LoadPlan& plan, const proto::RankPlan& rank_plan,
                        const transport::PeerGroup& group);

// Runs the reads and the exchange of `rank_plan` into `arena`. `report` receives the merged
// pipeline report of all reads.
Status RunExchange(transport::Device& device, const transport::DeviceBuffer& arena,
                   const proto::LoadPlan& plan, const proto::RankPlan& rank_plan,
                   const std::vector<transport::FileSources>& sources,
                   const transport::PipelineOptions& pipeline, const ExchangeOptions& options,
                   transport::PipelineReport* report, ExchangeReport* exchange);

// For a rank that fails before RunExchange (or never loads): joins the group's first agreement
// as failed, so that its peers stop instead of waiting. No-op without an exchange.
void AbandonExchange(const proto::LoadPlan& plan, const ExchangeOptions& options);

// Sets the dedup fields of `report` (storage bytes, bytes sent/received, peer, `peer` phase).
void AddExchangeReport(const proto::RankPlan& rank_plan, bool exchange,
                       const ExchangeReport& exchange_report, proto::RankReport* report);

// The members of `rank`'s peer group in `plan` (ranks with its peer_group), ascending.
transport::PeerGroup GroupOf(const proto::LoadPlan& plan, int rank);

// The control plane the coordinator lends for opening peers (coordinator/comm.h).
struct ControlPlane {
  std::function<Result<std::vector<std::string>>(const std::string&)> gather;  // to rank 0
  std::function<Status(std::string*)> broadcast;                               // from rank 0
};

struct PeerOpenOptions {
  DeviceKind device{};  // as LoadOptions::device: host arenas use MPI, CUDA arenas NCCL
  int gpu = -1;         // as LoadOptions::gpu (-1: the plan's gpu)
  double timeout_s = 120;
};

// Opens this rank's peer for a dedup plan. Collective over every rank of the job (each calls it
// once): the ranks agree on the transport (all host: MPI; all CUDA: NCCL, one communicator per
// group from an id its first rank creates, shared over the control plane), and either every rank
// gets its peer or every rank gets an error (naming the ranks that failed and why).
Result<std::unique_ptr<transport::Peer>> OpenPeer(const proto::LoadPlan& plan, int rank,
                                                  const PeerOpenOptions& options,
                                                  const ControlPlane& control);

}  // namespace hoist::rank
