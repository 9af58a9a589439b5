#include "rank/exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "rank/verify.h"
#include "rank/worker.h"

namespace hoist::rank {
namespace {

using Clock = std::chrono::steady_clock;
using Range = std::pair<std::uint64_t, std::uint64_t>;  // [first, second)

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

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

void MergePhase(const transport::PhaseTiming& a, bool span, transport::PhaseTiming* t) {
  if (!a.ran) return;
  if (!t->ran) {
    *t = a;
    return;
  }
  const double end = std::max(t->start_s + t->seconds, a.start_s + a.seconds);
  t->start_s = std::min(t->start_s, a.start_s);
  t->seconds = span ? end - t->start_s : t->seconds + a.seconds;
  t->busy_s += a.busy_s;
  t->bytes += a.bytes;
}

void MergeReport(transport::PipelineReport&& a, transport::PipelineReport* t) {
  MergePhase(a.staging_alloc, false, &t->staging_alloc);
  MergePhase(a.read, true, &t->read);
  MergePhase(a.h2d, true, &t->h2d);
  MergePhase(a.drain, false, &t->drain);
  MergePhase(a.staging_free, false, &t->staging_free);
  t->bytes_read += a.bytes_read;
  t->bytes_h2d += a.bytes_h2d;
  t->bytes_filled += a.bytes_filled;
  t->bytes_cold += a.bytes_cold;
  t->slot_seqs += a.slot_seqs;
  t->tasks += a.tasks;
  if (a.slots > 0) {
    t->slots = a.slots;
    t->threads = a.threads;
    t->slot_bytes = a.slot_bytes;
    t->chunk_bytes = a.chunk_bytes;
  }
  for (auto& s : a.spans) t->spans.push_back(std::move(s));
}

Status Annotate(Status s, const std::string& what) {
  if (s.ok()) return s;
  return Status(s.code(), what + ": " + s.message());
}

}  // namespace

bool CausedByPeer(std::string_view error) {
  return error.find(transport::kPeerFailureNote) != std::string_view::npos;
}

bool ExchangeActive(const proto::LoadPlan& plan, const ExchangeOptions& options) {
  return options.peer != nullptr && plan.dedup() != proto::DEDUP_NONE;
}

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
  if (rank < 0 || rank >= plan.ranks_size()) return g;
  const std::uint32_t group = plan.ranks(rank).peer_group();
  for (const proto::RankPlan& rp : plan.ranks()) {
    if (rp.peer_group() == group) g.ranks.push_back(static_cast<int>(rp.rank()));
  }
  std::sort(g.ranks.begin(), g.ranks.end());
  return g;
}

Status ValidateExchange(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                        const transport::PeerGroup& group) {
  const std::string who = "exchange plan: ";
  const std::uint64_t arena = rp.arena_bytes();
  for (const proto::RankPlan& other : plan.ranks()) {
    if (other.steps_size() != rp.steps_size()) {
      return Status::Corrupt(who + std::to_string(rp.steps_size()) + " steps but rank " +
                             std::to_string(other.rank()) + " has " +
                             std::to_string(other.steps_size()));
    }
  }
  auto check_transfer = [&](const proto::Transfer& t, int step, bool send) -> Status {
    const std::string what = std::string(send ? "send to" : "recv from") + " rank " +
                             std::to_string(t.peer()) + " in step " + std::to_string(step);
    if (t.peer() == rp.rank() ||
        !std::binary_search(group.ranks.begin(), group.ranks.end(), static_cast<int>(t.peer())) ||
        t.peer() >= static_cast<std::uint32_t>(plan.ranks_size())) {
      return Status::Corrupt(who + what + ": not another rank of its peer group");
    }
    if (t.offset() > arena || t.bytes() > arena - t.offset()) {
      return Status::Corrupt(who + what + ": arena bytes [" + std::to_string(t.offset()) + ", +" +
                             std::to_string(t.bytes()) + ") outside the arena of " +
                             std::to_string(arena) + " bytes");
    }
    return Status::Ok();
  };

  // Every send lies in bytes this rank has read by its step.
  std::vector<Range> read_so_far;
  for (int b = 0; b < rp.steps_size(); ++b) {
    const proto::ExchangeStep& st = rp.steps(b);
    for (const proto::Copy& c : st.reads()) AddCopyRanges(c, &read_so_far);
    read_so_far = MergeRanges(std::move(read_so_far));
    for (const proto::Transfer& t : st.sends()) {
      HOIST_RETURN_IF_ERROR(check_transfer(t, b, true));
      if (!Covered(read_so_far, t.offset(), t.offset() + t.bytes())) {
        return Status::Corrupt(who + "send to rank " + std::to_string(t.peer()) + " in step " +
                               std::to_string(b) + " of " + std::to_string(t.bytes()) +
                               " bytes at " + Where(rp, t.offset()) +
                               " is not covered by this rank's reads up to that step");
      }
    }
    for (const proto::Transfer& t : st.recvs()) HOIST_RETURN_IF_ERROR(check_transfer(t, b, false));
  }

  // Reads + receives + fills tile the arena bytes that copies + fills define, once each.
  struct Write {
    std::uint64_t lo, hi;
    const char* what;
  };
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
  std::vector<Range> got;
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (writes[i].lo == writes[i].hi) continue;
    if (writes[i].hi > arena) {
      return Status::Corrupt(who + std::string(writes[i].what) + " ends past the arena at " +
                             std::to_string(writes[i].hi));
    }
    if (!got.empty() && writes[i].lo < got.back().second) {
      return Status::Corrupt(who + std::string(writes[i].what) +
                             " and an earlier write both land at " + Where(rp, writes[i].lo));
    }
    if (!got.empty() && got.back().second == writes[i].lo) {
      got.back().second = writes[i].hi;
    } else {
      got.emplace_back(writes[i].lo, writes[i].hi);
    }
  }
  std::vector<Range> want;
  for (const proto::Copy& c : rp.copies()) AddCopyRanges(c, &want);
  for (const proto::Fill& f : rp.fills())
    want.emplace_back(f.dst_offset(), f.dst_offset() + f.bytes());
  want = MergeRanges(std::move(want));
  if (got != want) {
    for (std::size_t i = 0; i < std::max(got.size(), want.size()); ++i) {
      const Range g = i < got.size() ? got[i] : Range{~0ull, ~0ull};
      const Range w = i < want.size() ? want[i] : Range{~0ull, ~0ull};
      if (g == w) continue;
      const std::uint64_t at = std::min(
          g.first == w.first ? std::min(g.second, w.second) : std::min(g.first, w.first), arena);
      return Status::Corrupt(who +
                             "reads, receives and fills do not cover exactly the bytes its "
                             "copies and fills define; they first differ at " +
                             Where(rp, at));
    }
  }

  // Every send/recv pairs with the peer's plan, in order and size.
  for (int p : group.ranks) {
    if (p == static_cast<int>(rp.rank())) continue;
    const proto::RankPlan& other = plan.ranks(p);
    const auto up = static_cast<std::uint32_t>(p);
    if (TransfersWith(rp, up, true) != TransfersWith(other, rp.rank(), false)) {
      return Status::Corrupt(who + "its sends to rank " + std::to_string(p) +
                             " do not pair with that rank's receives (order, step or size)");
    }
    if (TransfersWith(rp, up, false) != TransfersWith(other, rp.rank(), true)) {
      return Status::Corrupt(who + "its receives from rank " + std::to_string(p) +
                             " do not pair with that rank's sends (order, step or size)");
    }
  }
  return Status::Ok();
}

void AbandonExchange(const proto::LoadPlan& plan, const ExchangeOptions& options) {
  if (!ExchangeActive(plan, options) || plan.ranks_size() == 0) return;
  if (plan.ranks(0).steps_size() == 0) return;
  Result<int> r = options.peer->AllOk(false, options.timeout_s);
  if (!r.ok()) spdlog::warn("leaving the exchange: {}", r.status().ToString());
}

Status RunExchange(transport::Device& device, const transport::DeviceBuffer& arena,
                   const proto::LoadPlan& plan, const proto::RankPlan& rp,
                   const std::vector<transport::FileSources>& sources,
                   const transport::PipelineOptions& po, const ExchangeOptions& o,
                   transport::PipelineReport* report, ExchangeReport* xr) {
  transport::Peer& peer = *o.peer;
  const int steps = rp.steps_size();
  xr->steps = steps;
  xr->peer_name = peer.Name();

  // The reads as pipeline runs: one per step, then the own reads; fills go with the first run.
  std::vector<proto::RankPlan> runs(static_cast<std::size_t>(steps) + 1);
  for (int i = 0; i <= steps; ++i) {
    proto::RankPlan& run = runs[static_cast<std::size_t>(i)];
    run.set_rank(rp.rank());
    run.set_node(rp.node());
    run.set_gpu(rp.gpu());
    run.set_arena_bytes(rp.arena_bytes());
    *run.mutable_copies() = i < steps ? rp.steps(i).reads() : rp.own_reads();
  }
  *runs[0].mutable_fills() = rp.fills();

  Status valid = ValidateExchange(plan, rp, peer.Group());
  if (valid.ok() && peer.Caps().device_memory != device.Caps().gpu) {
    valid = Status::FailedPrecondition("the " + peer.Name() + " peer moves " +
                                       (peer.Caps().device_memory ? "GPU" : "host") +
                                       " memory but the arena is on " + device.Name());
  }
  if (valid.ok()) {
    std::vector<std::uint64_t> sizes;
    std::vector<std::string> paths;
    for (const proto::File& f : plan.files()) {
      sizes.push_back(f.size());
      paths.push_back(f.path());
    }
    for (int i = 0; i <= steps && valid.ok(); ++i) {
      valid = transport::ValidateRankPlan(runs[static_cast<std::size_t>(i)], sizes, paths,
                                          rp.arena_bytes());
    }
  }
  if (!valid.ok()) {
    if (steps > 0) (void)peer.AllOk(false, o.timeout_s);
    return valid;
  }

  // The helper thread reads; the calling thread drives the peer.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;  // runs finished (successfully or not)
    bool stop = false;
    std::vector<Status> status;
  } sh;
  sh.status.resize(runs.size());
  std::vector<transport::PipelineReport> reports(runs.size());
  std::thread helper([&] {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      {
        std::lock_guard lock(sh.mu);
        if (sh.stop) {
          for (std::size_t j = i; j < runs.size(); ++j) {
            sh.status[j] = Status::Aborted("reads stopped after an exchange failure");
          }
          sh.done = static_cast<int>(runs.size());
          sh.cv.notify_all();
          return;
        }
      }
      Status st;
      if (runs[i].copies_size() > 0 || runs[i].fills_size() > 0) {
        st = transport::RunPipeline(device, arena, runs[i], sources, po, &reports[i]);
      }
      std::lock_guard lock(sh.mu);
      sh.status[i] = st;
      sh.done = static_cast<int>(i) + 1;
      if (!st.ok()) {
        for (std::size_t j = i + 1; j < runs.size(); ++j) {
          sh.status[j] = Status::Aborted("reads stopped after an earlier read failure");
        }
        sh.done = static_cast<int>(runs.size());
        sh.cv.notify_all();
        return;
      }
      sh.cv.notify_all();
    }
  });

  bool issued = false;
  Clock::time_point peer_start{}, peer_end{};
  Status result;
  for (int b = 0; b < steps && result.ok(); ++b) {
    // Wait for this step's reads, progressing the transfers already issued.
    Status step_status;
    {
      std::unique_lock lock(sh.mu);
      while (sh.done <= b && result.ok()) {
        sh.cv.wait_for(lock, std::chrono::milliseconds(1));
        if (!issued) continue;
        lock.unlock();
        Result<bool> t = peer.Test();
        if (!t.ok()) result = Annotate(t.status(), "exchange step " + std::to_string(b - 1));
        lock.lock();
      }
      if (!result.ok()) break;
      step_status = sh.status[static_cast<std::size_t>(b)];
    }
    Result<int> agreed = peer.AllOk(step_status.ok(), o.timeout_s);
    if (!agreed.ok()) {
      result = Annotate(agreed.status(), "exchange step " + std::to_string(b));
      break;
    }
    if (*agreed >= 0) {
      // A member could not read its part: nobody forwards this step; finish what is in flight.
      if (issued) (void)peer.Wait(o.timeout_s);
      result = !step_status.ok() ? step_status
                                 : Status::Aborted("stopped at exchange step " + std::to_string(b) +
                                                   " because peer rank " + std::to_string(*agreed) +
                                                   " could not read its part (" +
                                                   transport::kPeerFailureNote + ")");
      break;
    }
    const proto::ExchangeStep& st = rp.steps(b);
    if (st.sends_size() + st.recvs_size() > 0) {
      Status s = peer.GroupBegin();
      for (const proto::Transfer& t : st.recvs()) {
        if (s.ok()) s = peer.Recv(static_cast<int>(t.peer()), arena, t.offset(), t.bytes());
      }
      for (const proto::Transfer& t : st.sends()) {
        if (s.ok()) s = peer.Send(static_cast<int>(t.peer()), arena, t.offset(), t.bytes());
      }
      if (s.ok()) s = peer.GroupEnd();
      if (!s.ok()) {
        peer.Abort();
        result = Annotate(s, "exchange step " + std::to_string(b));
        break;
      }
      if (!issued) peer_start = Clock::now();
      issued = true;
    }
    if (b == 0 && o.fault == PeerFault::kKill) {
      spdlog::error("rank {}: injected peer fault: killing this rank mid-exchange", rp.rank());
      std::raise(SIGKILL);
    }
    if (b == 0 && o.fault == PeerFault::kStall) {
      spdlog::error("rank {}: injected peer fault: stalling mid-exchange", rp.rank());
      std::this_thread::sleep_for(std::chrono::duration<double>(2 * o.timeout_s + 1));
    }
    if (b == 0 && o.fault == PeerFault::kError) {
      peer.Abort();
      result = Status::IoError(
          "injected peer failure (--inject-peer-fault) after issuing "
          "exchange step 0");
    }
  }
  if (result.ok() && issued) {
    result = Annotate(peer.Wait(o.timeout_s), "exchange");
    peer_end = Clock::now();
  }
  if (!result.ok()) {
    std::lock_guard lock(sh.mu);
    sh.stop = true;
  }
  helper.join();
  if (result.ok()) {
    for (const Status& s : sh.status) {
      if (!s.ok()) {
        result = s;
        break;
      }
    }
  }
  for (auto& r : reports) MergeReport(std::move(r), report);
  xr->bytes_sent = peer.bytes_sent();
  xr->bytes_received = peer.bytes_received();
  if (issued && result.ok()) {
    xr->peer.ran = true;
    xr->peer.start_s = Seconds(po.origin, peer_start);
    xr->peer.seconds = Seconds(peer_start, peer_end);
    xr->peer.busy_s = xr->peer.seconds;
    xr->peer.bytes = xr->bytes_sent + xr->bytes_received;
  }
  return result;
}

void AddExchangeReport(const proto::RankPlan& rp, bool exchange, const ExchangeReport& xr,
                       proto::RankReport* report) {
  std::uint64_t storage = 0;
  for (const proto::Copy* c : StorageReads(rp, exchange)) storage += c->width() * c->rows();
  report->set_bytes_read_from_storage(storage);
  if (!exchange) return;
  report->set_bytes_sent(xr.bytes_sent);
  report->set_bytes_received(xr.bytes_received);
  report->set_peer(xr.peer_name);
  proto::Phase* p = report->add_phases();
  p->set_name("peer");
  p->set_start_s(xr.peer.start_s);
  p->set_seconds(xr.peer.seconds);
  p->set_busy_s(xr.peer.busy_s);
  p->set_bytes(xr.peer.bytes);
}

Result<std::unique_ptr<transport::Peer>> OpenPeer(const proto::LoadPlan& plan, int rank,
                                                  const PeerOpenOptions& o,
                                                  const ControlPlane& control) {
  const int world = plan.ranks_size();
  // Every rank's string reaches every rank (gather to rank 0, broadcast of the concatenation).
  auto all_gather = [&](const std::string& mine) -> Result<std::vector<std::string>> {
    HOIST_ASSIGN_OR_RETURN(std::vector<std::string> parts, control.gather(mine));
    std::string wire;
    for (const std::string& p : parts) {
      const std::uint64_t n = p.size();
      wire.append(reinterpret_cast<const char*>(&n), sizeof n);
      wire += p;
    }
    HOIST_RETURN_IF_ERROR(control.broadcast(&wire));
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < wire.size()) {
      std::uint64_t n = 0;
      if (wire.size() - at < sizeof n) break;
      std::memcpy(&n, wire.data() + at, sizeof n);
      at += sizeof n;
      if (n > wire.size() - at) break;
      out.push_back(wire.substr(at, n));
      at += n;
    }
    if (at != wire.size() || static_cast<int>(out.size()) != world) {
      return Status::Corrupt("peer set-up: control message holds " + std::to_string(out.size()) +
                             " entries for " + std::to_string(world) + " ranks");
    }
    return out;
  };
  if (rank < 0 || rank >= world) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " is outside the plan");
  }

  // 1. One transport for all: host arenas -> MPI, CUDA arenas -> NCCL.
  const int count = o.device == DeviceKind::kHost ? 0 : transport::CudaDeviceCount();
  const bool cuda =
      !(o.device == DeviceKind::kHost || (o.device == DeviceKind::kAuto && count == 0));
  const int want = o.gpu >= 0 ? o.gpu : static_cast<int>(plan.ranks(rank).gpu());
  const int ordinal = count > 0 ? want % count : want;
  const std::string kind = !cuda ? "mpi" : transport::HaveNccl() ? "nccl" : "cuda-without-nccl";
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> kinds, all_gather(kind));
  for (int r = 0; r < world; ++r) {
    if (kinds[r] == "cuda-without-nccl") {
      return Status::Unsupported("dedup: rank " + std::to_string(r) +
                                 " loads into a GPU but this build has no NCCL; use --dedup none "
                                 "or --device host");
    }
    if (kinds[r] != kinds[0]) {
      return Status::InvalidArgument("dedup: ranks disagree on the peer transport: rank 0 uses " +
                                     kinds[0] + ", rank " + std::to_string(r) + " " + kinds[r] +
                                     " (all ranks must load into GPUs, or all into host memory)");
    }
  }

  // 2. This rank's peer.
  const transport::PeerGroup group = GroupOf(plan, rank);
  Result<std::unique_ptr<transport::Peer>> peer = Status::Internal("unset");
  if (kind == "mpi") {
    peer = transport::CreateMpiPeer(group, world);
  } else {
    std::string id_msg;
    if (group.ranks.front() == rank) {
      Result<std::string> id = transport::NcclUniqueId();
      id_msg = id.ok() ? "I" + *id : "E" + id.status().ToString();
    }
    HOIST_ASSIGN_OR_RETURN(std::vector<std::string> ids, all_gather(id_msg));
    const std::string& leader = ids[static_cast<std::size_t>(group.ranks.front())];
    if (leader.empty() || leader[0] != 'I') {
      peer = Status::IoError("rank " + std::to_string(group.ranks.front()) +
                             " could not create the NCCL id of its group: " +
                             (leader.empty() ? "" : leader.substr(1)));
    } else {
      peer = transport::CreateNcclPeer(group, ordinal, leader.substr(1), o.timeout_s);
    }
  }

  // 3. Every rank or none.
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> oks,
                         all_gather(peer.ok() ? "" : peer.status().ToString()));
  std::string failed;
  for (int r = 0; r < world; ++r) {
    if (!oks[r].empty())
      failed += (failed.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + oks[r]);
  }
  if (!failed.empty()) {
    if (!peer.ok()) return peer.status();
    return Status::Aborted("dedup: peers could not be opened on every rank (" + failed + ")");
  }
  spdlog::debug("rank {}: {} peer, group of {}", rank, kind, group.ranks.size());
  return peer;
}

}  // namespace hoist::rank
