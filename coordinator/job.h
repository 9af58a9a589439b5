// Rank 0's role and every rank's part in one job: plan once on rank 0, broadcast the protobuf
// plan, run this rank's part through rank/, gather the reports to rank 0.
//
// Ownership: RunJob returns this rank's LoadedRank (arena and device) so a caller can keep the
// weights resident; the reports and the aggregate live in JobResult on rank 0.
// Failure: a planning error on rank 0 is broadcast to every rank (each returns Aborted naming
// rank 0's cause); a load error on any rank is carried in its report, so every rank reaches the
// gather and rank 0 returns one error naming the rank, host and cause. No collective is entered
// by only some ranks. A rank that dies is handled by mpirun, which ends the others.
// Threading: call from the main thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/comm.h"
#include "hoist/status.h"
#include "planner/plan_builder.h"
#include "proto/plan.pb.h"
#include "rank/worker.h"

namespace hoist::coordinator {

struct JobOptions {
  std::string model_dir;
  planner::PlanOptions plan;
  rank::LoadOptions load;
  // Without MPI: which rank of the plan this single process executes.
  int solo_rank = 0;
  // Progress while the ranks load, called on rank 0 about every `progress_interval_s` and once
  // at the end with (bytes handed to devices over all ranks, bytes the plan's copies move, seconds
  // since the loads began). Not called for dedup plans, whose exchange owns MPI from its own
  // thread.
  std::function<void(std::uint64_t done, std::uint64_t total, double seconds, bool final)> progress;
  double progress_interval_s = 0.25;
  // Seconds from process start to MPI ready on this rank (reported as the `init` phase).
  double init_s = 0;
  // Test hook, called with this rank's index just before the gather (launch/ uses it to
  // simulate a rank that dies mid-job).
  std::function<void(int)> before_gather;
  // Test hook: fail this rank with an injected error after planning (-1: none).
  int fail_rank = -1;
};

struct JobResult {
  proto::LoadPlan plan;                    // every rank
  std::optional<rank::LoadedRank> local;   // this rank's weights, when its load succeeded
  std::vector<proto::RankReport> reports;  // rank 0 only, in rank order
  double wall_s = 0;                       // rank 0: job wall time from start to gather
  // Rank 0: the first failed rank's error ("rank 3 on host-b: IoError: ..."), OK when all
  // succeeded. Other ranks: their own load error.
  Status failure;
};

// Runs the job on `comm`. The Status is not OK only when the job could not reach the gather
// (e.g. planning failed); load failures are in JobResult::failure with the reports.
Result<JobResult> RunJob(Comm& comm, const JobOptions& options);

}  // namespace hoist::coordinator
