// One job, as each rank runs it, in collective steps: every rank says hello to rank 0; rank 0
// reads the checkpoint's headers once, plans, and sends every rank its JobStart (the protobuf
// plan, the peer a dedup plan uses and, across hosts, the NCCL ids of the peer groups); each rank
// starts its load through the rank entry point (rank/rank_job.h, which opens its peer) and takes
// part in the control loop (coordinator/control.h) until every rank is done; rank 0 gets every
// report with the last control message, aggregates them and names the rank that failed first.
//
// Ownership: RunJob returns this rank's LoadedRank (arena and device) so a caller can keep the
// weights resident; the reports and the aggregate live in JobResult on rank 0.
// Failure: a planning error on rank 0 reaches every rank (each returns it, with the same code);
// a load error on any rank stops the others within one control message and is carried in the
// reports, so rank 0 returns one error naming the rank, host and cause. A rank that goes silent
// (stopped, hung, dead) for longer than the peer timeout ends RunJob with Aborted naming it; its
// caller should then end the job (Comm::Abort), since MPI_Finalize would wait for that rank.
// Every wait on another rank is bounded by that timeout. Threading: call from the thread that
// owns the Comm (the one that initialised MPI).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/comm.h"
#include "hoist/status.h"
#include "planner/plan_builder.h"
#include "proto/plan.pb.h"
#include "rank/rank_job.h"
#include "rank/test_hooks.h"
#include "rank/worker.h"

namespace hoist::coordinator {

// Progress of the whole job, for rank 0's display.
struct Progress {
  std::uint64_t done = 0;     // bytes in the arenas of the ranks that run
  std::uint64_t total = 0;    // bytes those ranks' copies move
  double seconds = 0;         // since the loads began
  std::string_view activity;  // what the slowest rank does ("allocating the arena", "reading")
  int ranks = 1;              // how many ranks run
  bool final = false;         // the last call: every rank finished
  bool ok = true;             // with final: whether every rank succeeded
};

struct JobOptions {
  std::string model_dir;
  planner::PlanOptions plan;
  // The rank's load: its settings as config/ resolved them (plain values), and its wiring (the
  // clock origin, the engine's allocator, a watch) set by the caller; RunJob adds the prepared
  // device and the RankJob its counters and exchange.
  rank::LoadOptions load;
  rank::ExchangeOptions exchange;  // timeout_s also bounds every control-plane wait
  // The topology's node names by node index (plan.locations' nodes); empty without a nodes
  // list. Under MPI they are checked against the hosts the ranks run on (coordinator/hosts.h).
  std::vector<std::string> node_names;
  // Without MPI: which rank of the plan this single process executes.
  int solo_rank = 0;
  // Rank 0's progress display: called about every `progress_interval_s` while the ranks load,
  // and once at the end (final).
  std::function<void(const Progress&)> progress;
  double progress_interval_s = 0.25;
  // Seconds from process start to MPI ready on this rank (reported as the `init` phase).
  double init_s = 0;
  // A device opened before MPI started (rank::PrepareDevice on a helper thread); nullptr:
  // RunJob opens it itself, beside planning.
  std::shared_ptr<std::future<Result<rank::PreparedDevice>>> prepared;
  // Tests (HOIST_TEST_HOOKS builds; empty otherwise): where the CLI's --inject-* flags make this
  // rank fail, stop, die or misbehave (rank/test_hooks.h).
  rank::TestHooks hooks;
  // Loads that stream behind their caller (BeginJob, hoist::LoadAsync): this rank's copies are
  // ordered by layer (planner/layer_order.h) unless its plan runs a dedup exchange.
  bool order_by_layer = false;
};

struct JobResult {
  proto::LoadPlan plan;                    // this rank's view (planner/plan_set.h RankView)
  std::optional<rank::LoadedRank> local;   // this rank's weights, when its load succeeded
  std::vector<proto::RankReport> reports;  // rank 0 only, in rank order
  double wall_s = 0;                       // rank 0: job wall time from start to the last report
  // Rank 0: the first failed rank's error ("rank 3 on host-b failed: IoError: ..."), OK when
  // all succeeded. Other ranks: their own load error.
  Status failure;
};

// Whether a failed rank's report says another rank caused its failure: it was stopped because
// that rank failed (stopped_by >= 0) or gave up waiting for a rank that did not answer
// (peer_timed_out). Decided by these fields only, never by the error's text.
bool StoppedByAnotherRank(const proto::RankReport& report);

// Rank 0: the job's error (Aborted), naming the first failed rank (in report order) that was not
// stopped by another rank, or the first failed rank when every one was: "rank 3 on host-b
// failed: <its error>". OK when every rank succeeded.
Status Blame(const std::vector<proto::RankReport>& reports);

// The GPU `rank` will be given before the plan says so: the topology's gpu for it (plan.locations),
// else `fallback` (its index among the ranks of its host). For opening the device early.
int ExpectedGpu(const planner::PlanOptions& plan, int rank, int fallback);

// Runs the job on `comm`. The Status is not OK when the job could not run to its end (planning
// failed, the world does not match the plan, a rank went silent); load failures are in
// JobResult::failure with the reports. RunJob is FinishJob(BeginJob(...)).
Result<JobResult> RunJob(Comm& comm, JobOptions options);

// A job begun on this rank: planned (collective: hello, plan, each rank's start), this rank's
// load running on its worker thread. Nothing of it talks to other ranks until FinishJob, which
// runs the control loop (collective) until every rank finished. Between the two, only this rank's
// worker runs (it makes no MPI call: a plan that forwards bytes between ranks needs the control
// thread, so callers finish such a job at once, see ExchangesBytes). Destroying an unfinished
// JobInFlight cancels and joins its load without telling the other ranks (they end by timeout):
// callers finish it. Threading: the Comm's thread, except load()->Cancel (any thread).
class JobInFlight {
 public:
  struct State;
  explicit JobInFlight(std::unique_ptr<State> state);
  ~JobInFlight();
  // This rank's view of the plan and its rank in it.
  const proto::LoadPlan& plan() const;
  int rank() const;
  // This rank's load, or nullptr when it could not start (load_error() says why).
  rank::RankJob* load();
  const Status& load_error() const;
  // Whether this rank's load forwards bytes to or from peers (a dedup exchange).
  bool ExchangesBytes() const;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

// Steps 1-2 of RunJob: the world check, planning and this rank's load started. Collective.
Result<std::unique_ptr<JobInFlight>> BeginJob(Comm& comm, JobOptions options);
// The rest: the control loop until every rank finished, then (rank 0) the blame. Collective.
// Once per job; afterwards `job`'s load is finished (its result moved into the JobResult).
// job.load()->Cancel may be called from another thread meanwhile.
Result<JobResult> FinishJob(Comm& comm, JobInFlight& job);

}  // namespace hoist::coordinator
