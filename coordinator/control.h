// The job's control plane while the ranks load (built on Comm's point-to-point messages):
// every rank tells rank 0 its state (proto::RankState) at least every interval_s and at once when
// its load ends (then with its report, and never again); rank 0 answers every rank
// (proto::JobTick) at least every interval_s with the bytes loaded over all ranks, at once with
// a stop order when a rank failed, and with `done` once every rank has reported its end.
//
// So a failure anywhere reaches every rank within one message, the job ends within microseconds
// of its last rank, progress needs no collective, and silence is detected: a rank that rank 0
// has not heard from for timeout_s (a stopped, hung or dead process), or rank 0 silent for that
// long towards a rank, ends the loop with Aborted naming the silent rank; rank 0 then tells the
// others (`abort`).
//
// Ownership: borrows the Comm. Failure: Poll returns Aborted for silence or an abort order, and
// the Comm's errors. Threading: the Comm's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/comm.h"
#include "hoist/status.h"
#include "proto/control.pb.h"

namespace hoist::coordinator {

// What this rank tells the loop.
struct LocalState {
  std::uint64_t bytes = 0;
  std::uint32_t stage = 0;
  bool finished = false;
  proto::RankReport report;  // with finished
};

// What the loop tells this rank.
struct JobView {
  std::uint64_t bytes = 0;  // over all ranks (as of rank 0's latest tick)
  std::uint32_t stage = 0;  // the earliest stage of an unfinished rank
  int stop_rank = -1;       // >= 0: that rank failed; stop this rank's load
  std::string stop_reason;
  std::uint32_t stop_code = 0;             // that rank's hoist::Code
  bool done = false;                       // every rank finished
  std::vector<proto::RankReport> reports;  // rank 0, once done: every rank's, in rank order
};

class ControlLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // hosts: rank 0's list of every rank's host (for messages); others may pass it too.
  ControlLoop(Comm& comm, double timeout_s, double interval_s, std::vector<std::string> hosts);

  // Non-blocking; call often with this rank's current state (a finished state must stay
  // finished). The view is valid until the next call.
  Result<const JobView*> Poll(const LocalState& mine);

 private:
  Status PollRoot(const LocalState& mine, Clock::time_point now);
  Status PollMember(const LocalState& mine, Clock::time_point now);
  Status SendTicks(Clock::time_point now, bool done);
  std::string Who(int rank) const;

  Comm& comm_;
  double timeout_s_;
  Clock::duration interval_;
  std::vector<std::string> hosts_;
  JobView view_;
  // Rank 0.
  std::vector<proto::RankState> states_;
  std::vector<Clock::time_point> heard_;
  std::vector<bool> finished_;
  Clock::time_point last_tick_{};
  std::string abort_reason_;
  // Others.
  Clock::time_point last_sent_{}, root_heard_;
  bool sent_final_ = false;
};

}  // namespace hoist::coordinator
