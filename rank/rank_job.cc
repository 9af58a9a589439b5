#include "rank/rank_job.h"

#include <utility>

#include "planner/plan_set.h"
#include "rank/exchange.h"
#include "transport/timing/phase.h"

namespace hoist::rank {

RankJob::RankJob(const proto::LoadPlan& plan, LoadOptions options,
                 std::unique_ptr<transport::Peer> peer, ExchangeOptions exchange,
                 Clock::time_point peer_started)
    : plan_(plan),
      options_(std::move(options)),
      peer_(std::move(peer)),
      exchange_options_(std::move(exchange)),
      peer_started_(peer_started) {
  options_.wiring.progress = &progress_;
  options_.wiring.stage = &stage_;
  options_.wiring.cancel = &cancel_;
  options_.wiring.exchange = this;
}

std::unique_ptr<RankJob> RankJob::Start(const proto::LoadPlan& plan, std::uint32_t rank,
                                        LoadOptions options, std::unique_ptr<transport::Peer> peer,
                                        ExchangeOptions exchange, Clock::time_point peer_started) {
  return Launch(plan, rank, std::move(options), std::move(peer), std::move(exchange), peer_started,
                TestHooks());
}

std::unique_ptr<RankJob> RankJob::Launch(const proto::LoadPlan& plan, std::uint32_t rank,
                                         LoadOptions options, std::unique_ptr<transport::Peer> peer,
                                         ExchangeOptions exchange, Clock::time_point peer_started,
                                         TestHooks hooks) {
  std::unique_ptr<RankJob> job(
      new RankJob(plan, std::move(options), std::move(peer), std::move(exchange), peer_started));
  job->rank_ = rank;
  job->hooks_ = std::move(hooks);
  RankJob* self = job.get();
  job->worker_ = std::thread([self, rank] {
    self->result_.emplace(LoadRank(self->plan_, rank, self->options_));
    self->finished_.store(true);
  });
  return job;
}

Result<std::unique_ptr<transport::Peer>> OpenPeer(const proto::JobStart& start, std::uint32_t rank,
                                                  const LoadOptions& load,
                                                  const ExchangeOptions& exchange,
                                                  const void* mpi_comm) {
  const proto::LoadPlan& plan = start.plan();
  if (mpi_comm == nullptr || plan.dedup() == proto::DEDUP_NONE) {
    return std::unique_ptr<transport::Peer>();
  }
  const transport::PeerGroup group = GroupOf(plan, static_cast<int>(rank));
  const proto::RankPlan* found = planner::FindRank(plan, rank);
  if (found == nullptr) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " is not in the plan");
  }
  const proto::RankPlan& rp = *found;
  const int world = static_cast<int>(planner::PlanWorld(plan));
  if (start.peer() == "mpi") return transport::CreateMpiPeer(group, world, mpi_comm);
  if (start.peer() == "cuda-ipc") {
    return transport::CreateCudaIpcPeer(group, RankOrdinal(load.settings, rp), world, mpi_comm);
  }
  if (static_cast<int>(rp.peer_group()) >= start.peer_ids_size()) {
    return Status::Corrupt("no NCCL id for peer group " + std::to_string(rp.peer_group()));
  }
  return transport::CreateNcclPeer(group, RankOrdinal(load.settings, rp),
                                   start.peer_ids(static_cast<int>(rp.peer_group())),
                                   exchange.timeout_s);
}

Result<std::unique_ptr<RankJob>> RankJob::Open(const proto::JobStart& start, std::uint32_t rank,
                                               LoadOptions options, ExchangeOptions exchange,
                                               const void* mpi_comm, TestHooks hooks) {
  const Clock::time_point peer_started = Clock::now();
  Result<std::unique_ptr<transport::Peer>> peer =
      OpenPeer(start, rank, options, exchange, mpi_comm);
  Status s = peer.status();
#if HOIST_TEST_HOOKS
  if (s.ok() && hooks.wrap_peer && *peer != nullptr) *peer = hooks.wrap_peer(std::move(*peer));
  if (s.ok() && hooks.fail_rank == static_cast<int>(rank)) {
    s = Status::IoError("injected failure (--inject-fail-rank)");
  }
#endif
  if (!s.ok()) return s.Annotate("rank " + std::to_string(rank));
  return Launch(start.plan(), rank, std::move(options), std::move(peer).value(),
                std::move(exchange), peer_started, std::move(hooks));
}

RankJob::~RankJob() {
  if (!worker_.joinable()) return;
  Cancel(Status::Aborted("the job ended before this rank's load"));
  worker_.join();
}

transport::Peer* RankJob::peer() { return peer_.get(); }

void RankJob::EndExchange(Status s, bool timed_out) {
  if (!s.ok() && first_error_.ok()) {
    first_error_ = s;
    first_error_timed_out_ = timed_out;
  }
  if (!s.ok()) cancel_.store(true);
  exchange_done_ = true;
  exchange_ = nullptr;
  cv_.notify_all();
}

void RankJob::Start(Exchange* exchange) {
  std::lock_guard lock(mu_);
  if (!exchange_done_) exchange_ = exchange;
}

Status RankJob::Finish(const Status& reads) {
  std::unique_lock lock(mu_);
  if (!reads.ok() && first_error_.ok()) {
    first_error_ = reads;
    cancel_.store(true);
  }
  reads_done_ = true;
  cv_.notify_all();
  if (exchange_ != nullptr) cv_.wait(lock, [this] { return exchange_done_; });
  exchange_done_ = true;
  exchange_ = nullptr;
  return first_error_;
}

void RankJob::PollPeerSetUp() {
  if (peer_ == nullptr || peer_ready_ || !peer_status_.ok()) return;
  Result<bool> ready = peer_->Ready();
  if (!ready.ok()) {
    peer_status_ = ready.status();
    std::lock_guard lock(mu_);
    if (exchange_ != nullptr) exchange_->Abort();
    EndExchange(peer_status_, peer_->timed_out());
    return;
  }
  if (*ready) peer_ready_ = Clock::now();
}

void RankJob::Poll() {
  PollPeerSetUp();
  Exchange* x = nullptr;
  bool reads_failed = false;
  {
    std::lock_guard lock(mu_);
    if (exchange_done_) return;
    x = exchange_;
    reads_failed = reads_done_ && !first_error_.ok();
  }
  if (x == nullptr) return;
  if (reads_failed) {
    x->Abort();
    std::lock_guard lock(mu_);
    EndExchange(Status::Ok());
    return;
  }
  Result<bool> done = x->Poll();
  if (peer_ != nullptr) received_.store(peer_->bytes_received());
#if HOIST_TEST_HOOKS
  if (!first_group_seen_ && x->issued_any()) {
    first_group_seen_ = true;
    if (hooks_.after_first_group) hooks_.after_first_group();
  }
#endif
  if (done.ok() && !*done) return;
  std::lock_guard lock(mu_);
  EndExchange(done.status(), x->timed_out());
}

void RankJob::Cancel(const Status& why) {
  std::lock_guard lock(mu_);
  if (first_error_.ok()) first_error_ = why;
  cancel_.store(true);
  if (exchange_ != nullptr) exchange_->Abort();
  EndExchange(why);
}

Result<LoadedRank> RankJob::Finish() {
  if (worker_.joinable()) worker_.join();
  Result<LoadedRank> r = std::move(*result_);
  result_.reset();
  {
    std::lock_guard lock(mu_);
    // The first cause wins: a load stopped by Cancel or by an exchange failure reports that, not
    // the "cancelled" its pipeline saw.
    if (!r.ok() && !first_error_.ok()) {
      r = Status(first_error_).Annotate("rank " + std::to_string(rank_));
      peer_timed_out_ = first_error_timed_out_;
    }
  }
  if (r.ok() && peer_ready_) {
    transport::PhaseRecorder(&r->report, options_.wiring.origin)
        .Record(transport::Phase::kPeerInit, peer_started_, *peer_ready_);
  }
  return r;
}

}  // namespace hoist::rank
