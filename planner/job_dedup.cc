// Replica-striped job dedup: cutting a class's template lists at its chunk bounds and expanding
// one rank's exchange from them. See job_dedup.h for the rule.
#include "planner/job_dedup.h"

#include <algorithm>
#include <string>

#include "planner/coalesce.h"

namespace hoist::planner {
namespace {

std::uint64_t CopyBytes(const proto::Copy& c) { return c.width() * c.rows(); }

// A 1-D copy of `len` bytes from row `row`, column `col` of packed copy `c`.
proto::Copy RowPart(const proto::Copy& c, std::uint64_t row, std::uint64_t col, std::uint64_t len) {
  proto::Copy p;
  p.set_file(c.file());
  p.set_src_offset(c.src_offset() + row * c.src_pitch() + col);
  p.set_dst_offset(c.dst_offset() + row * c.width() + col);
  p.set_width(len);
  p.set_rows(1);
  return p;
}

// Arena bytes [a, b) (relative to its dst_offset) of packed 2-D copy `c`, as copies.
void AppendRows(const proto::Copy& c, std::uint64_t a, std::uint64_t b, std::uint64_t chunk,
                std::vector<ChunkCopy>* out) {
  const std::uint64_t w = c.width();
  std::uint64_t r0 = a / w;
  const std::uint64_t c0 = a % w, r1 = b / w, c1 = b % w;
  if (r0 == r1) {
    out->push_back({chunk, RowPart(c, r0, c0, c1 - c0)});
    return;
  }
  if (c0 != 0) out->push_back({chunk, RowPart(c, r0++, c0, w - c0)});
  if (r1 - r0 == 1) {
    out->push_back({chunk, RowPart(c, r0, 0, w)});
  } else if (r1 > r0) {
    proto::Copy p = c;
    p.set_src_offset(c.src_offset() + r0 * c.src_pitch());
    p.set_dst_offset(c.dst_offset() + r0 * w);
    p.set_rows(r1 - r0);
    out->push_back({chunk, std::move(p)});
  }
  if (c1 != 0) out->push_back({chunk, RowPart(c, r1, 0, c1)});
}

}  // namespace

bool ContiguousInArena(const proto::Copy& c) { return c.rows() <= 1 || c.dst_pitch() == c.width(); }

std::vector<ChunkCopy> CutCopyAtChunks(const proto::Copy& c, std::uint64_t k) {
  std::vector<ChunkCopy> out;
  const std::uint64_t total = CopyBytes(c);
  if (total == 0) return out;
  const std::uint64_t lo = c.dst_offset(), hi = lo + total;
  if (k == 0 || lo / k == (hi - 1) / k) {
    out.push_back({k == 0 ? 0 : lo / k, c});
    return out;
  }
  for (std::uint64_t x = lo; x < hi;) {
    const std::uint64_t e = std::min(hi, (x / k + 1) * k);
    if (c.rows() <= 1) {
      proto::Copy p = c;
      p.set_src_offset(c.src_offset() + (x - lo));
      p.set_dst_offset(x);
      p.set_width(e - x);
      out.push_back({x / k, std::move(p)});
    } else {
      AppendRows(c, x - lo, e - lo, x / k, &out);
    }
    x = e;
  }
  return out;
}

std::uint64_t ChooseChunkBytes(std::uint64_t min_class_forwarded_bytes, std::uint32_t replicas,
                               std::uint64_t step_bytes) {
  constexpr std::uint64_t kMin = 1ull << 20, kAlign = 4ull << 10;
  std::uint64_t k = min_class_forwarded_bytes / (8ull * std::max<std::uint32_t>(replicas, 1));
  k = std::min(std::max(k, kMin), std::max<std::uint64_t>(step_bytes, 1));
  if (k >= kAlign) k -= k % kAlign;
  return k;
}

namespace {

// The events of one class's template member, cut at its chunk bounds (see job_dedup.h). Each
// rank of the class sees the same events in the same order.
class JobWalk {
 public:
  virtual ~JobWalk() = default;
  // A piece the owner replica reads in `step`.
  virtual void Read(std::uint32_t step, std::uint32_t owner, const proto::Copy& c) = 0;
  // Arena bytes [t.offset(), +t.bytes()) the owner forwards to the class's other replicas.
  virtual void Forward(std::uint32_t step, std::uint32_t owner, const proto::Transfer& t) = 0;
  // A piece of a template send (t.peer(): a class) the owner sends to each replica of t.peer().
  virtual void Send(std::uint32_t step, std::uint32_t owner, const proto::Transfer& t) = 0;
  // A piece of a template recv that replica `owner` of class t.peer() sends to this class.
  virtual void Recv(std::uint32_t step, std::uint32_t owner, const proto::Transfer& t) = 0;
  // An own read every replica reads (strided in the arena, or any with one replica).
  virtual void OwnRead(const proto::Copy& c) = 0;
};

struct Shape {
  std::uint32_t cls = 0, classes = 1, replicas = 1;
  std::uint64_t k = 0;  // 0 with one replica: nothing is cut
  std::uint64_t step = 1;
};

std::uint32_t Owner(const Shape& s, std::uint32_t cls, std::uint64_t chunk) {
  return static_cast<std::uint32_t>((chunk + cls) % s.replicas);
}

// Consecutive read pieces of one owner and step, contiguous in the arena, as one Forward.
class Runs {
 public:
  explicit Runs(JobWalk& w) : w_(w) {}
  void Add(std::uint32_t step, std::uint32_t owner, const proto::Copy& c) {
    w_.Read(step, owner, c);
    const std::uint64_t bytes = CopyBytes(c);
    if (open_ && step == step_ && owner == owner_ &&
        run_.offset() + run_.bytes() == c.dst_offset()) {
      run_.set_bytes(run_.bytes() + bytes);
      return;
    }
    Flush();
    open_ = true;
    step_ = step;
    owner_ = owner;
    run_.set_offset(c.dst_offset());
    run_.set_peer_offset(c.dst_offset());
    run_.set_bytes(bytes);
    run_.set_file(c.file());
    run_.set_file_offset(c.src_offset());
  }
  void Flush() {
    if (open_) w_.Forward(step_, owner_, run_);
    open_ = false;
  }

 private:
  JobWalk& w_;
  bool open_ = false;
  std::uint32_t step_ = 0, owner_ = 0;
  proto::Transfer run_;
};

// Transfer `t` cut at multiples of k of its own side (offset) or its peer's (peer_offset),
// each piece with its chunk on that side.
template <typename F>
void CutTransfer(const proto::Transfer& t, bool peer_side, std::uint64_t k, F&& each) {
  const std::uint64_t base = peer_side ? t.peer_offset() : t.offset();
  if (t.bytes() == 0) return;
  if (k == 0) {
    each(0, t);
    return;
  }
  for (std::uint64_t x = base; x < base + t.bytes();) {
    const std::uint64_t e = std::min(base + t.bytes(), (x / k + 1) * k);
    proto::Transfer p = t;
    p.set_offset(t.offset() + (x - base));
    p.set_peer_offset(t.peer_offset() + (x - base));
    p.set_file_offset(t.file_offset() + (x - base));
    p.set_bytes(e - x);
    each(x / k, p);
    x = e;
  }
}

// Class s.cls's member `m`, walked in list order.
void Walk(const proto::MemberExchange& m, const Shape& s, JobWalk& w) {
  Runs runs(w);
  for (int b = 0; b < m.steps_size(); ++b) {
    const auto step = static_cast<std::uint32_t>(b);
    const proto::ExchangeStep& st = m.steps(b);
    for (const proto::Copy& c : st.reads()) {
      for (const ChunkCopy& p : CutCopyAtChunks(c, s.k)) {
        runs.Add(step, Owner(s, s.cls, p.chunk), p.copy);
      }
    }
    runs.Flush();
    for (const proto::Transfer& t : st.sends()) {
      CutTransfer(t, false, s.k, [&](std::uint64_t chunk, const proto::Transfer& p) {
        w.Send(step, Owner(s, s.cls, chunk), p);
      });
    }
    for (const proto::Transfer& t : st.recvs()) {
      CutTransfer(t, true, s.k, [&](std::uint64_t chunk, const proto::Transfer& p) {
        w.Recv(step, Owner(s, t.peer(), chunk), p);
      });
    }
  }
  const auto first = static_cast<std::uint32_t>(m.steps_size());
  std::uint64_t cum = 0;
  for (const proto::Copy& c : m.own_reads()) {
    if (s.replicas <= 1 || !ContiguousInArena(c)) {
      w.OwnRead(c);
      continue;
    }
    for (const ChunkCopy& p : CutCopyAtChunks(c, s.k)) {
      runs.Add(first + static_cast<std::uint32_t>(cum / s.step), Owner(s, s.cls, p.chunk), p.copy);
      cum += CopyBytes(p.copy);
    }
  }
  runs.Flush();
}

Shape ShapeOf(const proto::JobDedup& job, std::uint32_t cls, std::uint32_t replicas) {
  Shape s;
  s.cls = cls;
  s.classes = std::max<std::uint32_t>(job.classes(), 1);
  s.replicas = std::max<std::uint32_t>(replicas, 1);
  s.k = s.replicas > 1 ? job.chunk_bytes() : 0;
  s.step = std::max<std::uint64_t>(job.step_bytes(), 1);
  return s;
}

// The last step a walk uses.
class LastStep final : public JobWalk {
 public:
  void Read(std::uint32_t step, std::uint32_t, const proto::Copy&) override {
    steps = std::max(steps, step + 1);
  }
  void Forward(std::uint32_t, std::uint32_t, const proto::Transfer&) override {}
  void Send(std::uint32_t, std::uint32_t, const proto::Transfer&) override {}
  void Recv(std::uint32_t, std::uint32_t, const proto::Transfer&) override {}
  void OwnRead(const proto::Copy&) override {}
  std::uint32_t steps = 0;
};

class Figures final : public JobWalk {
 public:
  explicit Figures(std::uint32_t replicas) : out(replicas) {}
  void Read(std::uint32_t, std::uint32_t owner, const proto::Copy& c) override {
    out[owner].storage_bytes += CopyBytes(c);
  }
  void Forward(std::uint32_t, std::uint32_t owner, const proto::Transfer& t) override {
    out[owner].sends += out.size() - 1;
    out[owner].forwarded += t.bytes() * (out.size() - 1);
  }
  void Send(std::uint32_t, std::uint32_t owner, const proto::Transfer& t) override {
    out[owner].sends += out.size();
    out[owner].forwarded += t.bytes() * out.size();
  }
  void Recv(std::uint32_t, std::uint32_t, const proto::Transfer&) override {}
  void OwnRead(const proto::Copy& c) override {
    for (JobRankFigures& f : out) f.storage_bytes += CopyBytes(c);
  }
  std::vector<JobRankFigures> out;
};

// Replica `d` of the walked class: its reads, transfers and own reads into `rp`'s steps.
class Expander final : public JobWalk {
 public:
  Expander(const Shape& s, std::uint32_t d, proto::RankPlan* rp) : s_(s), d_(d), rp_(rp) {}
  void Read(std::uint32_t step, std::uint32_t owner, const proto::Copy& c) override {
    if (owner != d_) return;
    *Step(step)->add_reads() = c;
    storage += CopyBytes(c);
  }
  void Forward(std::uint32_t step, std::uint32_t owner, const proto::Transfer& t) override {
    if (owner != d_) {
      Add(Step(step)->add_recvs(), t, Rank(s_.cls, owner));
      return;
    }
    for (std::uint32_t e = 0; e < s_.replicas; ++e) {
      if (e != d_) Add(Step(step)->add_sends(), t, Rank(s_.cls, e));
    }
  }
  void Send(std::uint32_t step, std::uint32_t owner, const proto::Transfer& t) override {
    if (owner != d_) return;
    for (std::uint32_t e = 0; e < s_.replicas; ++e) {
      Add(Step(step)->add_sends(), t, Rank(t.peer(), e));
    }
  }
  void Recv(std::uint32_t step, std::uint32_t owner, const proto::Transfer& t) override {
    Add(Step(step)->add_recvs(), t, Rank(t.peer(), owner));
  }
  void OwnRead(const proto::Copy& c) override {
    *rp_->add_own_reads() = c;
    storage += CopyBytes(c);
  }
  std::uint64_t storage = 0;
  bool overflow = false;  // a step past the plan's count

 private:
  std::uint32_t Rank(std::uint32_t cls, std::uint32_t replica) const {
    return cls + s_.classes * replica;
  }
  proto::ExchangeStep* Step(std::uint32_t step) {
    if (step < static_cast<std::uint32_t>(rp_->steps_size())) {
      return rp_->mutable_steps(static_cast<int>(step));
    }
    overflow = true;
    scratch_.Clear();
    return &scratch_;
  }
  static void Add(proto::Transfer* out, const proto::Transfer& t, std::uint32_t peer) {
    *out = t;
    out->set_peer(peer);
  }
  const Shape& s_;
  std::uint32_t d_;
  proto::RankPlan* rp_;
  proto::ExchangeStep scratch_;
};

}  // namespace

std::uint64_t ForwardedBytes(const proto::MemberExchange& m) {
  std::uint64_t bytes = 0;
  for (const proto::ExchangeStep& st : m.steps()) {
    for (const proto::Copy& c : st.reads()) bytes += CopyBytes(c);
  }
  for (const proto::Copy& c : m.own_reads()) {
    if (ContiguousInArena(c)) bytes += CopyBytes(c);
  }
  return bytes;
}

std::uint32_t ExtraJobSteps(const proto::MemberExchange& m, const proto::JobDedup& job,
                            std::uint32_t replicas) {
  if (replicas <= 1) return 0;
  LastStep last;
  Walk(m, ShapeOf(job, 0, replicas), last);
  const auto first = static_cast<std::uint32_t>(m.steps_size());
  return last.steps > first ? last.steps - first : 0;
}

std::vector<JobRankFigures> JobClassFigures(const proto::MemberExchange& m,
                                            const proto::JobDedup& job, std::uint32_t c,
                                            std::uint32_t replicas) {
  Figures f(std::max<std::uint32_t>(replicas, 1));
  Walk(m, ShapeOf(job, c, replicas), f);
  return std::move(f.out);
}

Status ExpandJobExchange(const proto::MemberExchange& m, const proto::JobDedup& job,
                         std::uint32_t world, std::uint32_t rank, proto::RankPlan* rp) {
  const std::string who = "job dedup of rank " + std::to_string(rank) + ": ";
  if (job.classes() == 0 || world == 0 || world % job.classes() != 0 || rank >= world) {
    return Status::Corrupt(who + std::to_string(job.classes()) + " classes in a world of " +
                           std::to_string(world));
  }
  const std::uint32_t replicas = world / job.classes();
  if (replicas > 1 && (job.chunk_bytes() == 0 || job.step_bytes() == 0)) {
    return Status::Corrupt(who + "no chunk or step bytes for " + std::to_string(replicas) +
                           " replicas");
  }
  const Shape s = ShapeOf(job, rank % job.classes(), replicas);
  rp->clear_steps();
  rp->clear_own_reads();
  rp->set_peer_group(0);
  for (std::uint32_t b = 0; b < job.steps(); ++b) rp->add_steps();
  Expander x(s, rank / job.classes(), rp);
  Walk(m, s, x);
  if (x.overflow) {
    return Status::Corrupt(who + "its exchange needs more than the plan's " +
                           std::to_string(job.steps()) + " steps");
  }
  if (replicas > 1) {
    for (proto::ExchangeStep& st : *rp->mutable_steps()) {
      std::vector<proto::Copy> reads(st.reads().begin(), st.reads().end());
      CoalesceCopies(&reads);
      st.clear_reads();
      for (proto::Copy& c : reads) *st.add_reads() = std::move(c);
    }
  }
  rp->set_storage_bytes(x.storage);
  return Status::Ok();
}

Status ExpandJobView(proto::LoadPlan* view, std::uint32_t rank) {
  if (!view->view() || view->dedup() != proto::DEDUP_JOB) return Status::Ok();
  for (proto::RankPlan& rp : *view->mutable_ranks()) {
    if (rp.rank() != rank || !rp.has_job_exchange()) continue;
    proto::MemberExchange m = std::move(*rp.mutable_job_exchange());
    rp.clear_job_exchange();
    return ExpandJobExchange(m, view->job(), view->topology().world(), rank, &rp);
  }
  return Status::Ok();
}

}  // namespace hoist::planner
