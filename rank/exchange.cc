#include "rank/exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>
#include <utility>

#include "planner/plan_set.h"
#include "rank/verify.h"

namespace hoist::rank {
namespace {

using Clock = std::chrono::steady_clock;
using Range = std::pair<std::uint64_t, std::uint64_t>;  // [first, second)

// Arena ranges a copy writes.
void AddCopyRanges(const proto::Copy& c, std::vector<Range>* out) {
  if (c.width() == 0 || c.rows() == 0) return;
  if (c.rows() == 1 || c.dst_pitch() == c.width()) {
    out->emplace_back(c.dst_offset(), c.dst_offset() + c.width() * c.rows());
    return;
  }
  for (std::uint64_t i = 0; i < c.rows(); ++i) {
    const std::uint64_t d = c.dst_offset() + i * c.dst_pitch();
    out->emplace_back(d, d + c.width());
  }
}

std::vector<Range> MergeRanges(std::vector<Range> v) {
  std::sort(v.begin(), v.end());
  std::vector<Range> out;
  for (const Range& r : v) {
    if (r.first == r.second) continue;
    if (!out.empty() && r.first <= out.back().second) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

bool Covered(const std::vector<Range>& merged, std::uint64_t lo, std::uint64_t hi) {
  auto it = std::upper_bound(merged.begin(), merged.end(), Range{lo, ~0ull});
  if (it == merged.begin()) return false;
  --it;
  return it->first <= lo && hi <= it->second;
}

std::string Where(const proto::RankPlan& rp, std::uint64_t offset) {
  return "arena offset " + std::to_string(offset) + " (" + DescribeArenaOffset(rp, offset) + ")";
}

// One transfer between two ranks, as both sides must see it.
struct Pairing {
  int step;
  std::uint64_t bytes;
  bool operator==(const Pairing& o) const { return step == o.step && bytes == o.bytes; }
};

std::vector<Pairing> TransfersWith(const proto::RankPlan& rp, std::uint32_t peer, bool sends) {
  std::vector<Pairing> out;
  for (int b = 0; b < rp.steps_size(); ++b) {
    const auto& list = sends ? rp.steps(b).sends() : rp.steps(b).recvs();
    for (const proto::Transfer& t : list) {
      if (t.peer() == peer) out.push_back({b, t.bytes()});
    }
  }
  return out;
}

constexpr char kWho[] = "exchange plan: ";

// A transfer goes to another rank of the peer group and lies inside the arena.
Status CheckTransfer(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                     const transport::PeerGroup& group, const proto::Transfer& t, int step,
                     bool send) {
  const std::uint64_t arena = rp.arena_bytes();
  const std::string what = std::string(send ? "send to" : "recv from") + " rank " +
                           std::to_string(t.peer()) + " in step " + std::to_string(step);
  if (t.peer() == rp.rank() ||
      !std::binary_search(group.ranks.begin(), group.ranks.end(), static_cast<int>(t.peer())) ||
      t.peer() >= planner::PlanWorld(plan)) {
    return Status::Corrupt(kWho + what + ": not another rank of its peer group");
  }
  if (t.offset() > arena || t.bytes() > arena - t.offset()) {
    return Status::Corrupt(kWho + what + ": arena bytes [" + std::to_string(t.offset()) + ", +" +
                           std::to_string(t.bytes()) + ") outside the arena of " +
                           std::to_string(arena) + " bytes");
  }
  return Status::Ok();
}

// Every transfer is well formed, and every send lies in bytes this rank has read by its step.
Status CheckSends(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                  const transport::PeerGroup& group) {
  std::vector<Range> read_so_far;
  for (int b = 0; b < rp.steps_size(); ++b) {
    const proto::ExchangeStep& st = rp.steps(b);
    for (const proto::Copy& c : st.reads()) AddCopyRanges(c, &read_so_far);
    read_so_far = MergeRanges(std::move(read_so_far));
    for (const proto::Transfer& t : st.sends()) {
      HOIST_RETURN_IF_ERROR(CheckTransfer(plan, rp, group, t, b, true));
      if (!Covered(read_so_far, t.offset(), t.offset() + t.bytes())) {
        return Status::Corrupt(std::string(kWho) + "send to rank " + std::to_string(t.peer()) +
                               " in step " + std::to_string(b) + " of " +
                               std::to_string(t.bytes()) + " bytes at " + Where(rp, t.offset()) +
                               " is not covered by this rank's reads up to that step");
      }
    }
    for (const proto::Transfer& t : st.recvs()) {
      HOIST_RETURN_IF_ERROR(CheckTransfer(plan, rp, group, t, b, false));
    }
  }
  return Status::Ok();
}

// One arena range written by the rank's reads, receives or fills.
struct Write {
  std::uint64_t lo, hi;
  const char* what;
};

// Every arena range the rank writes during an exchange load, sorted.
std::vector<Write> ExchangeWrites(const proto::RankPlan& rp) {
  std::vector<Write> writes;
  std::vector<Range> tmp;
  auto add_copy = [&](const proto::Copy& c, const char* what) {
    tmp.clear();
    AddCopyRanges(c, &tmp);
    for (const Range& r : tmp) writes.push_back({r.first, r.second, what});
  };
  for (const proto::ExchangeStep& st : rp.steps()) {
    for (const proto::Copy& c : st.reads()) add_copy(c, "a read");
    for (const proto::Transfer& t : st.recvs()) {
      writes.push_back({t.offset(), t.offset() + t.bytes(), "a receive"});
    }
  }
  for (const proto::Copy& c : rp.own_reads()) add_copy(c, "a read");
  for (const proto::Fill& f : rp.fills()) {
    writes.push_back({f.dst_offset(), f.dst_offset() + f.bytes(), "a fill"});
  }
  std::sort(writes.begin(), writes.end(), [](const Write& a, const Write& b) {
    return std::tie(a.lo, a.hi) < std::tie(b.lo, b.hi);
  });
  return writes;
}

// Reads + receives + fills tile the arena bytes that copies + fills define, once each.
Status CheckTiling(const proto::RankPlan& rp) {
  const std::uint64_t arena = rp.arena_bytes();
  std::vector<Range> got;
  for (const Write& w : ExchangeWrites(rp)) {
    if (w.lo == w.hi) continue;
    if (w.hi > arena) {
      return Status::Corrupt(kWho + std::string(w.what) + " ends past the arena at " +
                             std::to_string(w.hi));
    }
    if (!got.empty() && w.lo < got.back().second) {
      return Status::Corrupt(kWho + std::string(w.what) + " and an earlier write both land at " +
                             Where(rp, w.lo));
    }
    if (!got.empty() && got.back().second == w.lo) {
      got.back().second = w.hi;
    } else {
      got.emplace_back(w.lo, w.hi);
    }
  }
  std::vector<Range> want;
  for (const proto::Copy& c : rp.copies()) AddCopyRanges(c, &want);
  for (const proto::Fill& f : rp.fills()) {
    want.emplace_back(f.dst_offset(), f.dst_offset() + f.bytes());
  }
  want = MergeRanges(std::move(want));
  for (std::size_t i = 0; got != want && i < std::max(got.size(), want.size()); ++i) {
    const Range g = i < got.size() ? got[i] : Range{~0ull, ~0ull};
    const Range w = i < want.size() ? want[i] : Range{~0ull, ~0ull};
    if (g == w) continue;
    const std::uint64_t at = std::min(
        g.first == w.first ? std::min(g.second, w.second) : std::min(g.first, w.first), arena);
    return Status::Corrupt(std::string(kWho) +
                           "reads, receives and fills do not cover exactly the bytes its "
                           "copies and fills define; they first differ at " +
                           Where(rp, at));
  }
  return Status::Ok();
}

// Every send/recv pairs with the peer's plan, in order and size.
Status CheckPairing(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                    const transport::PeerGroup& group) {
  for (int p : group.ranks) {
    if (p == static_cast<int>(rp.rank())) continue;
    const proto::RankPlan* found = planner::FindRank(plan, static_cast<std::uint32_t>(p));
    if (found == nullptr) {
      return Status::Corrupt(std::string(kWho) + "peer rank " + std::to_string(p) +
                             " is not in the plan");
    }
    const proto::RankPlan& other = *found;
    const auto up = static_cast<std::uint32_t>(p);
    if (TransfersWith(rp, up, true) != TransfersWith(other, rp.rank(), false)) {
      return Status::Corrupt(std::string(kWho) + "its sends to rank " + std::to_string(p) +
                             " do not pair with that rank's receives (order, step or size)");
    }
    if (TransfersWith(rp, up, false) != TransfersWith(other, rp.rank(), true)) {
      return Status::Corrupt(std::string(kWho) + "its receives from rank " + std::to_string(p) +
                             " do not pair with that rank's sends (order, step or size)");
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<const proto::Copy*> StorageReads(const proto::RankPlan& rp, bool exchange) {
  std::vector<const proto::Copy*> out;
  if (!exchange) {
    for (const proto::Copy& c : rp.copies()) out.push_back(&c);
    return out;
  }
  for (const proto::ExchangeStep& s : rp.steps()) {
    for (const proto::Copy& c : s.reads()) out.push_back(&c);
  }
  for (const proto::Copy& c : rp.own_reads()) out.push_back(&c);
  return out;
}

transport::PeerGroup GroupOf(const proto::LoadPlan& plan, int rank) {
  transport::PeerGroup g;
  g.self = rank;
  if (plan.dedup() == proto::DEDUP_JOB) {  // the whole job, whatever ranks the view names
    const auto world = static_cast<int>(planner::PlanWorld(plan));
    if (rank < 0 || rank >= world) return g;
    g.ranks.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) g.ranks[static_cast<std::size_t>(r)] = r;
    return g;
  }
  const proto::RankPlan* self =
      rank < 0 ? nullptr : planner::FindRank(plan, static_cast<std::uint32_t>(rank));
  if (self == nullptr) return g;
  const std::uint32_t group = self->peer_group();
  for (const proto::RankPlan& rp : plan.ranks()) {
    if (rp.peer_group() == group) g.ranks.push_back(static_cast<int>(rp.rank()));
  }
  std::sort(g.ranks.begin(), g.ranks.end());
  return g;
}

Status ValidateExchange(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                        const transport::PeerGroup& group) {
  // A job view names only its node's ranks, by place: its transfers pair by construction
  // (planner/job_dedup.h, tested over every pair of expanded plans), so only this rank's own
  // exchange is checked.
  const bool job_view = plan.view() && plan.dedup() == proto::DEDUP_JOB;
  for (const proto::RankPlan& other : plan.ranks()) {
    if (job_view) break;
    if (other.steps_size() != rp.steps_size()) {
      return Status::Corrupt(kWho + std::to_string(rp.steps_size()) + " steps but rank " +
                             std::to_string(other.rank()) + " has " +
                             std::to_string(other.steps_size()));
    }
  }
  HOIST_RETURN_IF_ERROR(CheckSends(plan, rp, group));
  HOIST_RETURN_IF_ERROR(CheckTiling(rp));
  return job_view ? Status::Ok() : CheckPairing(plan, rp, group);
}

Exchange::Exchange(transport::Device& device, const transport::DeviceBuffer& arena,
                   const proto::RankPlan& rp, transport::Peer& peer, ExchangeOptions options)
    : device_(device), arena_(arena), rank_plan_(rp), peer_(peer), options_(std::move(options)) {
  read_plan_.set_rank(rp.rank());
  read_plan_.set_node(rp.node());
  read_plan_.set_gpu(rp.gpu());
  read_plan_.set_arena_bytes(rp.arena_bytes());
  for (const proto::ExchangeStep& st : rp.steps()) {
    for (const proto::Copy& c : st.reads()) *read_plan_.add_copies() = c;
  }
  for (const proto::Copy& c : rp.own_reads()) *read_plan_.add_copies() = c;
  *read_plan_.mutable_fills() = rp.fills();
}

Exchange::~Exchange() {
  for (transport::EventId e : events_) (void)device_.DestroyEvent(e);
}

Result<std::unique_ptr<Exchange>> Exchange::Create(transport::Device& device,
                                                   const transport::DeviceBuffer& arena,
                                                   const proto::LoadPlan& plan,
                                                   const proto::RankPlan& rp, transport::Peer& peer,
                                                   ExchangeOptions options) {
  HOIST_RETURN_IF_ERROR(ValidateExchange(plan, rp, peer.Group()));
  if (peer.Caps().device_memory != device.Caps().gpu) {
    return Status::FailedPrecondition("the " + peer.Name() + " peer moves " +
                                      (peer.Caps().device_memory ? "GPU" : "host") +
                                      " memory but the arena is on " + device.Name());
  }
  std::unique_ptr<Exchange> x(new Exchange(device, arena, rp, peer, std::move(options)));
  for (int b = 0; b < rp.steps_size(); ++b) {
    HOIST_ASSIGN_OR_RETURN(transport::EventId e, device.CreateEvent(false));
    x->events_.push_back(e);
  }
  return x;
}

void Exchange::AttachTo(transport::PipelineOptions* o) {
  o->milestone_copies.clear();
  int copies = 0;
  for (const proto::ExchangeStep& st : rank_plan_.steps()) {
    copies += st.reads_size();
    o->milestone_copies.push_back(copies);
  }
  o->milestone_events = events_;
  o->on_milestone = [this](int step) { landed_enqueued_.store(step + 1); };
}

Status Exchange::IssueStep(int b) {
  const proto::ExchangeStep& st = rank_plan_.steps(b);
  if (st.sends_size() + st.recvs_size() == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(peer_.GroupBegin());
  for (const proto::Transfer& t : st.recvs()) {
    HOIST_RETURN_IF_ERROR(peer_.Recv(static_cast<int>(t.peer()), arena_, t.offset(), t.bytes()));
  }
  for (const proto::Transfer& t : st.sends()) {
    HOIST_RETURN_IF_ERROR(peer_.Send(static_cast<int>(t.peer()), arena_, t.offset(), t.bytes()));
  }
  HOIST_RETURN_IF_ERROR(peer_.GroupEnd());
  const auto now = std::chrono::steady_clock::now();
  issued_at_.push_back(now);
  if (!first_issue_) first_issue_ = now;
  return Status::Ok();
}

// The oldest group in flight waited longer than timeout_s: fail naming its pending transfers.
Status Exchange::CheckStalled() {
  while (issued_at_.size() > peer_.groups_issued() - peer_.groups_completed()) {
    issued_at_.pop_front();
  }
  if (issued_at_.empty()) return Status::Ok();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - issued_at_.front()).count();
  if (waited <= options_.timeout_s) return Status::Ok();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", options_.timeout_s);
  const std::string pending = peer_.PendingText();
  peer_.Abort();
  stalled_ = true;
  return Status::Aborted(peer_.Name() + " peer (rank " + std::to_string(rank_plan_.rank()) +
                         "): timed out after " + secs + " waiting for transfers (" + pending +
                         "): " + transport::kPeerFailureNote);
}

Result<bool> Exchange::Poll() {
  if (aborted_) return Status::Aborted("exchange aborted");
  if (!ready_at_) {
    HOIST_ASSIGN_OR_RETURN(bool ready, peer_.Ready());
    if (!ready) return false;
    ready_at_ = std::chrono::steady_clock::now();
  }
  const int steps = rank_plan_.steps_size();
  for (const int landed = landed_enqueued_.load(); next_step_ < landed; ++next_step_) {
    HOIST_ASSIGN_OR_RETURN(bool done, device_.Query(events_[next_step_]));
    if (!done) break;
    Status s = IssueStep(next_step_);
    if (!s.ok()) {
      peer_.Abort();
      return s.Annotate("exchange step " + std::to_string(next_step_));
    }
  }
  HOIST_ASSIGN_OR_RETURN(bool idle, peer_.Test());
  if (idle && first_issue_) last_complete_ = std::chrono::steady_clock::now();
  HOIST_RETURN_IF_ERROR(CheckStalled());
  return idle && next_step_ == steps;
}

void Exchange::Abort() {
  aborted_ = true;
  peer_.Abort();
}

ExchangeReport Exchange::Report(std::chrono::steady_clock::time_point origin) const {
  ExchangeReport r;
  r.peer_name = peer_.Name();
  r.steps = rank_plan_.steps_size();
  r.bytes_sent = peer_.bytes_sent();
  r.bytes_received = peer_.bytes_received();
  if (first_issue_ && last_complete_) {
    r.peer.ran = true;
    r.peer.start_s = std::chrono::duration<double>(*first_issue_ - origin).count();
    r.peer.seconds = std::chrono::duration<double>(*last_complete_ - *first_issue_).count();
    r.peer.busy_s = r.peer.seconds;
    r.peer.bytes = r.bytes_sent + r.bytes_received;
  }
  return r;
}

}  // namespace hoist::rank
