#include "coordinator/control.h"

#include <cstdio>
#include <utility>

#include "transport/peers/peer.h"
#include "transport/timing/span_log.h"

namespace hoist::coordinator {
namespace {

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

ControlLoop::ControlLoop(Comm& comm, double timeout_s, double interval_s,
                         std::vector<std::string> hosts)
    : comm_(comm),
      timeout_s_(timeout_s),
      interval_(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s))),
      hosts_(std::move(hosts)) {
  const auto n = static_cast<std::size_t>(comm.size());
  const Clock::time_point now = Clock::now();
  states_.resize(n);
  heard_.assign(n, now);
  finished_.assign(n, false);
  root_heard_ = now;
}

std::string ControlLoop::Who(int rank) const {
  std::string s = "rank " + std::to_string(rank);
  if (static_cast<std::size_t>(rank) < hosts_.size() && !hosts_[rank].empty()) {
    s += " on " + hosts_[rank];
  }
  return s;
}

Result<const JobView*> ControlLoop::Poll(const LocalState& mine) {
  const Clock::time_point now = Clock::now();
  HOIST_RETURN_IF_ERROR(comm_.rank() == 0 ? PollRoot(mine, now) : PollMember(mine, now));
  return &view_;
}

Status ControlLoop::SendTicks(Clock::time_point now, bool done) {
  proto::JobTick tick;
  tick.set_bytes(view_.bytes);
  tick.set_stage(view_.stage);
  tick.set_stop_rank(view_.stop_rank);
  tick.set_stop_reason(view_.stop_reason);
  tick.set_stop_code(view_.stop_code);
  tick.set_done(done);
  tick.set_abort(!abort_reason_.empty());
  tick.set_abort_reason(abort_reason_);
  const std::string wire = tick.SerializeAsString();
  for (int r = 1; r < comm_.size(); ++r) {
    HOIST_RETURN_IF_ERROR(comm_.Send(r, Channel::kControl, wire));
  }
  last_tick_ = now;
  return Status::Ok();
}

Status ControlLoop::PollRoot(const LocalState& mine, Clock::time_point now) {
  states_[0].set_bytes(mine.bytes);
  states_[0].set_stage(mine.stage);
  if (mine.finished && !finished_[0]) {
    finished_[0] = true;
    *states_[0].mutable_report() = mine.report;
  }
  heard_[0] = now;
  for (;;) {
    HOIST_ASSIGN_OR_RETURN(std::optional<Message> m, comm_.TryRecv(-1, Channel::kControl));
    if (!m) break;
    const auto r = static_cast<std::size_t>(m->from);
    if (r >= states_.size() || finished_[r]) continue;
    proto::RankState st;
    if (!st.ParseFromString(m->data)) {
      return Status::Corrupt("control: a state message from " + Who(m->from) + " does not parse");
    }
    if (st.finished()) {
      Status spans = transport::SpanLog::Check(st.report().spans());
      if (!spans.ok()) return std::move(spans).Annotate("control: the report from " + Who(m->from));
    }
    heard_[r] = now;
    finished_[r] = st.finished();
    states_[r] = std::move(st);
  }
  bool all = true;
  bool changed = false;
  view_.bytes = 0;
  view_.stage = ~0u;
  for (std::size_t r = 0; r < states_.size(); ++r) {
    view_.bytes += states_[r].bytes();
    if (!finished_[r]) {
      all = false;
      view_.stage = std::min(view_.stage, states_[r].stage());
    } else if (!states_[r].report().ok() && view_.stop_rank < 0) {
      view_.stop_rank = static_cast<int>(r);
      view_.stop_reason = states_[r].report().error();
      view_.stop_code = states_[r].report().error_code();
      changed = true;
    }
    const double silent = std::chrono::duration<double>(now - heard_[r]).count();
    if (r > 0 && !finished_[r] && silent > timeout_s_ && abort_reason_.empty()) {
      abort_reason_ = Who(static_cast<int>(r)) + " sent nothing for " + Secs(silent) +
                      " (limit --peer-timeout-s " + Secs(timeout_s_) +
                      "): it stopped, hung or died";
      (void)SendTicks(now, false);
      return Status::Aborted(abort_reason_);
    }
  }
  if (all) {
    view_.stage = 0;
    HOIST_RETURN_IF_ERROR(SendTicks(now, true));
    view_.done = true;
    view_.reports.clear();
    for (const proto::RankState& st : states_) view_.reports.push_back(st.report());
    return Status::Ok();
  }
  if (changed || now - last_tick_ >= interval_) HOIST_RETURN_IF_ERROR(SendTicks(now, false));
  return Status::Ok();
}

Status ControlLoop::PollMember(const LocalState& mine, Clock::time_point now) {
  if (!sent_final_ && (mine.finished || now - last_sent_ >= interval_)) {
    proto::RankState st;
    st.set_bytes(mine.bytes);
    st.set_stage(mine.stage);
    st.set_finished(mine.finished);
    if (mine.finished) *st.mutable_report() = mine.report;
    HOIST_RETURN_IF_ERROR(comm_.Send(0, Channel::kControl, st.SerializeAsString()));
    last_sent_ = now;
    sent_final_ = mine.finished;
  }
  for (;;) {
    HOIST_ASSIGN_OR_RETURN(std::optional<Message> m, comm_.TryRecv(0, Channel::kControl));
    if (!m) break;
    proto::JobTick tick;
    if (!tick.ParseFromString(m->data)) {
      return Status::Corrupt("control: a tick from rank 0 does not parse");
    }
    root_heard_ = now;
    view_.bytes = tick.bytes();
    view_.stage = tick.stage();
    if (tick.stop_rank() >= 0 && view_.stop_rank < 0) {
      view_.stop_rank = tick.stop_rank();
      view_.stop_reason = tick.stop_reason();
      view_.stop_code = tick.stop_code();
    }
    if (tick.abort()) {
      return Status::Aborted("the job was aborted: " + tick.abort_reason() + " (" +
                             transport::kPeerFailureNote + ")");
    }
    if (tick.done()) {
      view_.done = true;
      return Status::Ok();
    }
  }
  const double silent = std::chrono::duration<double>(now - root_heard_).count();
  if (silent > timeout_s_) {
    return Status::Aborted(Who(0) + " sent nothing for " + Secs(silent) +
                           " (limit --peer-timeout-s " + Secs(timeout_s_) +
                           "): it stopped, hung or died");
  }
  return Status::Ok();
}

}  // namespace hoist::coordinator
