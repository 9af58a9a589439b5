// The rank entry point: one rank's whole load inside a job, as its driver thread (the thread
// that owns MPI) sees it. Open() opens the rank's peer for the plan rank 0 sent (a dedup plan's
// exchange: MPI for host arenas, CUDA IPC within a host, NCCL across hosts) and starts the load;
// Start() does the same with a peer the caller made (tests). The load runs LoadRank on a worker
// thread; Poll() sets up the peer and progresses the dedup exchange (rank/exchange.h); the driver
// reads bytes_done() and stage() for the control plane, Cancel()s the load when another rank
// failed, and Finish() joins and returns the result. The coordinator (coordinator/job.h) only
// plans, broadcasts, runs the control loop and gathers; it never sees the peer.
//
// Ownership: a RankJob owns the worker thread and the peer (which outlives the load). Destroying
// an unfinished RankJob cancels the load and joins it (Poll must not be needed for that: the
// exchange is aborted first). Failure: the load's Status (Aborted with `why` after Cancel; a
// peer set-up or transfer failure as the exchange reports it) comes back from Finish, and
// peer_timed_out() says whether that failure was a timeout waiting for another rank.
// Threading: every method is for the driver thread; the worker thread talks to it through the
// ExchangeHost interface (rank/worker.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "hoist/status.h"
#include "proto/control.pb.h"
#include "proto/plan.pb.h"
#include "rank/exchange_options.h"
#include "rank/test_hooks.h"
#include "rank/worker.h"
#include "transport/peers/peer.h"

namespace hoist::rank {

// The peer plan.ranks(rank) uses for a dedup plan, as rank 0 chose it in `start` (start.peer:
// "mpi", "cuda-ipc" or "nccl" with start.peer_ids per peer group), on the job's communicator
// `mpi_comm` (a pointer to an MPI_Comm); its GPU is the one the rank loads into (RankOrdinal).
// nullptr without dedup, or without an MPI world (mpi_comm nullptr): the rank then reads every
// copy itself. Creating it starts its set-up; RankJob::Poll completes it.
Result<std::unique_ptr<transport::Peer>> OpenPeer(const proto::JobStart& start, std::uint32_t rank,
                                                  const LoadOptions& load,
                                                  const ExchangeOptions& exchange,
                                                  const void* mpi_comm);

class RankJob final : private ExchangeHost {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens plan.ranks(rank)'s peer (OpenPeer) and starts its load; `start` must outlive the
  // RankJob. An error (the peer could not be opened, or a test hook's injected failure) names the
  // rank; the load then never started.
  static Result<std::unique_ptr<RankJob>> Open(const proto::JobStart& start, std::uint32_t rank,
                                               LoadOptions options, ExchangeOptions exchange,
                                               const void* mpi_comm, TestHooks hooks = {});

  // Starts plan.ranks(rank)'s load (`plan` must outlive the RankJob). `peer` (dedup plans; nullptr
  // otherwise) was created at `peer_started` and may still be setting up.
  // options.wiring.progress/stage/cancel/exchange are the RankJob's own and are overwritten.
  static std::unique_ptr<RankJob> Start(const proto::LoadPlan& plan, std::uint32_t rank,
                                        LoadOptions options, std::unique_ptr<transport::Peer> peer,
                                        ExchangeOptions exchange, Clock::time_point peer_started);
  ~RankJob() override;
  RankJob(const RankJob&) = delete;
  RankJob& operator=(const RankJob&) = delete;

  // Progresses the peer's set-up and the exchange. Cheap; call every few hundred microseconds
  // while the load runs.
  void Poll();
  bool finished() const { return finished_.load(); }
  // Bytes in this rank's arena so far: handed to the device plus received from peers.
  std::uint64_t bytes_done() const { return progress_.load() + received_.load(); }
  LoadStage stage() const { return stage_.load(); }

  // Stops the load: the pipeline stops taking work, the exchange is aborted, and the load
  // returns Aborted(why).
  void Cancel(const Status& why);

  // Once finished(): the load's result (peer_init added to its report).
  Result<LoadedRank> Finish();
  // After Finish() returned an error: true when its cause was another rank not answering in time
  // (the peer's set-up or the exchange's transfers timed out), not this rank's own failure.
  bool peer_timed_out() const { return peer_timed_out_; }

 private:
  RankJob(const proto::LoadPlan& plan, LoadOptions options, std::unique_ptr<transport::Peer> peer,
          ExchangeOptions exchange, Clock::time_point peer_started);
  static std::unique_ptr<RankJob> Launch(const proto::LoadPlan& plan, std::uint32_t rank,
                                         LoadOptions options, std::unique_ptr<transport::Peer> peer,
                                         ExchangeOptions exchange, Clock::time_point peer_started,
                                         TestHooks hooks);

  // ExchangeHost (worker thread).
  transport::Peer* peer() override;
  const ExchangeOptions& exchange_options() override { return exchange_options_; }
  void Start(Exchange* exchange) override;
  Status Finish(const Status& reads) override;

  void PollPeerSetUp();
  // mu_ held: ends the exchange with `s` (`timed_out`: a timeout waiting for another rank) and
  // wakes the worker.
  void EndExchange(Status s, bool timed_out = false);

  const proto::LoadPlan& plan_;
  std::uint32_t rank_ = 0;
  TestHooks hooks_;
#if HOIST_TEST_HOOKS
  bool first_group_seen_ = false;  // the exchange issued its first group (hooks_)
#endif
  LoadOptions options_;
  std::unique_ptr<transport::Peer> peer_;
  ExchangeOptions exchange_options_;
  Clock::time_point peer_started_;
  std::optional<Clock::time_point> peer_ready_;
  Status peer_status_;

  std::atomic<std::uint64_t> progress_{0};
  std::atomic<std::uint64_t> received_{0};
  std::atomic<LoadStage> stage_{LoadStage::kStarting};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> finished_{false};
  std::thread worker_;
  std::optional<Result<LoadedRank>> result_;  // written by the worker before finished_

  std::mutex mu_;  // guards the exchange hand-over below
  std::condition_variable cv_;
  Exchange* exchange_ = nullptr;  // the worker's, while the driver polls it
  bool reads_done_ = false;
  bool exchange_done_ = false;
  Status first_error_;  // the first failure of reads, exchange, peer set-up or Cancel's reason
  bool first_error_timed_out_ = false;  // first_error_ was a timeout waiting for another rank
  bool peer_timed_out_ = false;         // Finish's error is first_error_ and that was a timeout
};

}  // namespace hoist::rank
