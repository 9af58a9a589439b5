// ApplyDedup: cut every group's copies into pieces needed by definite sets of ranks, pick one
// reader per shared piece (balanced by bytes, in file order), and emit per-rank reads and
// transfers in exchange steps. See dedup.h for the contract.
#include "planner/dedup.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/coalesce.h"

namespace hoist::planner {
namespace {

// Where a copy's source bytes lie, in units that cutting works on. pitch == 0: a contiguous
// byte range (unit = byte). pitch > 0: rows of `width` bytes at phase + k * pitch (unit = row k).
struct Lattice {
  std::uint32_t file = 0;
  std::uint64_t pitch = 0;
  std::uint64_t width = 0;
  std::uint64_t phase = 0;
  auto Key() const { return std::make_tuple(file, pitch, width, phase); }
  bool operator<(const Lattice& o) const { return Key() < o.Key(); }
  std::uint64_t Bytes(std::uint64_t a, std::uint64_t b) const {
    return pitch == 0 ? b - a : (b - a) * width;
  }
  std::uint64_t FileOffset(std::uint64_t a) const { return pitch == 0 ? a : a * pitch + phase; }
};

// One rank's copy on a lattice: units [lo, hi).
struct Seg {
  std::uint32_t rank = 0;
  const proto::Copy* copy = nullptr;
  std::uint64_t lo = 0, hi = 0;
};

// Arena offset of unit `a` of seg `s` on lattice `l`.
std::uint64_t ArenaAt(const Lattice& l, const Seg& s, std::uint64_t a) {
  if (l.pitch == 0) return s.copy->dst_offset() + (a - s.lo);
  return s.copy->dst_offset() + (a - s.lo) * s.copy->dst_pitch();
}

// Units [a, b) of seg `s` as a copy.
proto::Copy SubCopy(const Lattice& l, const Seg& s, std::uint64_t a, std::uint64_t b) {
  proto::Copy c;
  c.set_file(l.file);
  c.set_dst_offset(ArenaAt(l, s, a));
  c.set_rows(l.pitch == 0 ? 1 : b - a);
  if (l.pitch == 0) {
    c.set_src_offset(a);
    c.set_width(b - a);
  } else {
    c.set_src_offset(l.FileOffset(a));
    c.set_src_pitch(l.pitch);
    c.set_dst_pitch(s.copy->dst_pitch());
    c.set_width(l.width);
  }
  return c;
}

std::uint64_t CopyBytes(const proto::Copy& c) { return c.width() * c.rows(); }

struct Receiver {
  std::uint32_t rank;
  std::uint64_t offset;
};

// One shared piece after reader selection: sender's range and every receiver's.
struct Forward {
  std::uint32_t step = 0;
  std::uint32_t sender = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint32_t file = 0;
  std::uint64_t file_offset = 0;
  std::vector<Receiver> receivers;
};

bool Extends(const Forward& p, const Forward& c) {
  if (p.step != c.step || p.sender != c.sender || p.file != c.file ||
      p.offset + p.bytes != c.offset || p.file_offset + p.bytes != c.file_offset ||
      p.receivers.size() != c.receivers.size()) {
    return false;
  }
  for (std::size_t i = 0; i < p.receivers.size(); ++i) {
    if (p.receivers[i].rank != c.receivers[i].rank ||
        p.receivers[i].offset + p.bytes != c.receivers[i].offset) {
      return false;
    }
  }
  return true;
}

struct RankOut {
  std::vector<std::vector<proto::Copy>> step_reads;
  std::vector<proto::Copy> own;
};

struct SharedPiece {
  int lattice = 0;
  std::uint64_t lo = 0, hi = 0;
  std::vector<const Seg*> needers;  // one seg per rank, ascending rank
};

// One group's dedup state: its ranks' contiguous and row-strided copies as segments of source
// lattices, the bytes each rank reads so far, and the ranks' outputs.
struct GroupState {
  std::map<Lattice, int> lattice_index;
  std::vector<Lattice> lattices;
  std::vector<std::vector<Seg>> segs;  // per lattice; complete before pieces point into them
  std::map<std::uint32_t, std::uint64_t> load;
  std::map<std::uint32_t, RankOut>* out = nullptr;
};

// Every copy of the group's ranks as a segment of its lattice; copies strided in the arena go
// to their rank's own reads.
void CollectSegs(const proto::LoadPlan& plan, const std::vector<std::uint32_t>& ranks,
                 GroupState& g) {
  for (std::uint32_t r : ranks) {
    RankOut& ro = (*g.out)[r];
    g.load[r] = 0;
    for (const proto::Copy& c : plan.ranks(static_cast<int>(r)).copies()) {
      if (c.width() == 0 || c.rows() == 0) continue;
      Lattice l;
      l.file = c.file();
      Seg s{r, &c, 0, 0};
      const bool contiguous_src = c.rows() == 1 || c.src_pitch() == c.width();
      const bool contiguous_dst = c.rows() == 1 || c.dst_pitch() == c.width();
      if (contiguous_src && contiguous_dst) {
        s.lo = c.src_offset();
        s.hi = c.src_offset() + c.width() * c.rows();
      } else if (contiguous_dst && c.src_pitch() > c.width()) {
        l.pitch = c.src_pitch();
        l.width = c.width();
        l.phase = c.src_offset() % c.src_pitch();
        s.lo = c.src_offset() / c.src_pitch();
        s.hi = s.lo + c.rows();
      } else {
        // Strided in the arena (or overlapping rows): never shared; the rank reads it itself.
        ro.own.push_back(c);
        g.load[r] += CopyBytes(c);
        continue;
      }
      auto [it, inserted] = g.lattice_index.emplace(l, static_cast<int>(g.lattices.size()));
      if (inserted) {
        g.lattices.push_back(l);
        g.segs.emplace_back();
      }
      g.segs[it->second].push_back(s);
    }
  }
}

// Cuts lattice li at every segment boundary: a piece one rank needs (or a rank's second copy of
// the same bytes) becomes an own read; a piece several ranks need becomes shared pieces of at
// most step_bytes, so that forwarding starts before a whole tensor is read.
void CutLattice(GroupState& g, std::size_t li, std::uint64_t step_bytes,
                std::vector<SharedPiece>* shared) {
  const Lattice& l = g.lattices[li];
  std::vector<std::uint64_t> bounds;
  bounds.reserve(g.segs[li].size() * 2);
  for (const Seg& s : g.segs[li]) {
    bounds.push_back(s.lo);
    bounds.push_back(s.hi);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::vector<std::vector<const Seg*>> cover(bounds.size());
  for (const Seg& s : g.segs[li]) {
    const auto j0 = std::lower_bound(bounds.begin(), bounds.end(), s.lo) - bounds.begin();
    const auto j1 = std::lower_bound(bounds.begin(), bounds.end(), s.hi) - bounds.begin();
    for (auto j = j0; j < j1; ++j) cover[static_cast<std::size_t>(j)].push_back(&s);
  }
  for (std::size_t j = 0; j + 1 < bounds.size(); ++j) {
    auto& cv = cover[j];
    if (cv.empty()) continue;
    const std::uint64_t a = bounds[j], b = bounds[j + 1];
    std::stable_sort(cv.begin(), cv.end(),
                     [](const Seg* x, const Seg* y) { return x->rank < y->rank; });
    SharedPiece p{static_cast<int>(li), a, b, {}};
    for (const Seg* s : cv) {
      if (!p.needers.empty() && p.needers.back()->rank == s->rank) {
        // The same bytes twice in one rank's arena: it reads the second copy itself.
        (*g.out)[s->rank].own.push_back(SubCopy(l, *s, a, b));
        g.load[s->rank] += l.Bytes(a, b);
        continue;
      }
      p.needers.push_back(s);
    }
    if (p.needers.size() == 1) {
      const Seg& s = *p.needers[0];
      (*g.out)[s.rank].own.push_back(SubCopy(l, s, a, b));
      g.load[s.rank] += l.Bytes(a, b);
      continue;
    }
    // Cut large shared pieces so that forwarding starts before a whole tensor is read.
    const std::uint64_t unit = l.pitch == 0 ? 1 : l.width;
    const std::uint64_t max_units = std::max<std::uint64_t>(1, step_bytes / unit);
    for (std::uint64_t x = a; x < b; x += max_units) {
      SharedPiece q = p;
      q.lo = x;
      q.hi = std::min(b, x + max_units);
      shared->push_back(std::move(q));
    }
  }
}

// Shared pieces in file order: each read by the needer that has read least so far (ties: the
// previous piece's reader, so that runs extend), forwarded to the others in steps of step_bytes.
void AssignReaders(GroupState& g, std::vector<SharedPiece>& shared, std::uint64_t step_bytes,
                   std::vector<Forward>* forwards) {
  std::stable_sort(shared.begin(), shared.end(), [&](const SharedPiece& x, const SharedPiece& y) {
    const Lattice& lx = g.lattices[x.lattice];
    const Lattice& ly = g.lattices[y.lattice];
    return std::make_tuple(lx.file, lx.FileOffset(x.lo), x.lattice) <
           std::make_tuple(ly.file, ly.FileOffset(y.lo), y.lattice);
  });
  std::uint64_t cum = 0;
  std::int64_t prev = -1;
  for (const SharedPiece& p : shared) {
    const Lattice& l = g.lattices[p.lattice];
    const std::uint64_t bytes = l.Bytes(p.lo, p.hi);
    const Seg* reader = nullptr;
    for (const Seg* s : p.needers) {
      if (reader == nullptr || g.load[s->rank] < g.load[reader->rank] ||
          (g.load[s->rank] == g.load[reader->rank] && static_cast<std::int64_t>(s->rank) == prev)) {
        reader = s;
      }
    }
    prev = reader->rank;
    g.load[reader->rank] += bytes;
    const auto step = static_cast<std::uint32_t>(cum / step_bytes);
    cum += bytes;
    RankOut& ro = (*g.out)[reader->rank];
    if (ro.step_reads.size() <= step) ro.step_reads.resize(step + 1);
    ro.step_reads[step].push_back(SubCopy(l, *reader, p.lo, p.hi));
    Forward f;
    f.step = step;
    f.sender = reader->rank;
    f.offset = ArenaAt(l, *reader, p.lo);
    f.bytes = bytes;
    f.file = l.file;
    f.file_offset = l.FileOffset(p.lo);
    for (const Seg* s : p.needers) {
      if (s != reader) f.receivers.push_back({s->rank, ArenaAt(l, *s, p.lo)});
    }
    if (!forwards->empty() && Extends(forwards->back(), f)) {
      forwards->back().bytes += f.bytes;
    } else {
      forwards->push_back(std::move(f));
    }
  }
}

// Dedups one group of ranks. `forwards` receives the group's forwards in order.
Status DedupGroup(const proto::LoadPlan& plan, const std::vector<std::uint32_t>& ranks,
                  std::uint64_t step_bytes, std::map<std::uint32_t, RankOut>* out,
                  std::vector<Forward>* forwards) {
  GroupState g;
  g.out = out;
  CollectSegs(plan, ranks, g);
  std::vector<SharedPiece> shared;
  for (std::size_t li = 0; li < g.lattices.size(); ++li) CutLattice(g, li, step_bytes, &shared);
  AssignReaders(g, shared, step_bytes, forwards);
  return Status::Ok();
}

}  // namespace

const char* DedupName(proto::Dedup mode) {
  return NameOfEnum(kDedupNames, mode, "none").data();  // the names are literals: terminated
}

bool ParseDedup(const std::string& name, proto::Dedup* out) {
  const std::optional<proto::Dedup> mode = EnumFromName(kDedupNames, name);
  if (mode) *out = *mode;
  return mode.has_value();
}

namespace {

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

// DEDUP_AUTO: NODE where it pays, else NONE (see dedup.h).
Status ChooseAutoDedup(const DedupOptions& options, std::uint64_t world, const DedupApplier& apply,
                       proto::LoadPlan* plan) {
  DedupOptions none = options, node = options;
  none.mode = proto::DEDUP_NONE;
  node.mode = proto::DEDUP_NODE;
  if (world < 2) {
    HOIST_RETURN_IF_ERROR(apply(none, plan));
    plan->set_dedup_reason("auto: none (one rank)");
    return Status::Ok();
  }
  if (!options.gpu_peers) {
    HOIST_RETURN_IF_ERROR(apply(none, plan));
    plan->set_dedup_reason(
        "auto: none (the ranks do not load into GPUs with direct peer access, so forwarding "
        "would cost host memory bandwidth like reading)");
    return Status::Ok();
  }
  proto::LoadPlan with_node = *plan;
  HOIST_RETURN_IF_ERROR(apply(node, &with_node));
  HOIST_RETURN_IF_ERROR(apply(none, plan));
  const double all = static_cast<double>(plan->storage_bytes());
  const double saved = all > 0 ? 1.0 - static_cast<double>(with_node.storage_bytes()) / all : 0;
  if (saved >= kAutoDedupMinSaving) {
    *plan = std::move(with_node);
    plan->set_dedup_reason("auto: node (reads " + Percent(saved) +
                           " fewer bytes from storage; GPUs forward the shared bytes directly)");
  } else {
    plan->set_dedup_reason("auto: none (node dedup would save only " + Percent(saved) +
                           " of the bytes read, under " + Percent(kAutoDedupMinSaving) + ")");
  }
  return Status::Ok();
}

std::string GibS(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB/s", v);
  return buf;
}

// Across nodes: JOB where the measured rates say forwarding between hosts beats reading and it
// saves enough over the node choice already in *plan; else the node choice stays, and the reason
// says why each node reads its own copy.
Status ChooseAcrossHosts(const DedupOptions& options, std::uint64_t nodes,
                         const DedupApplier& apply, proto::LoadPlan* plan) {
  const HostRates& r = options.rates;
  const std::string own =
      "; across its " + std::to_string(nodes) + " nodes each node reads its own copy from storage";
  if (!r.measured()) {
    plan->set_dedup_reason(plan->dedup_reason() + own +
                           ", since a network between hosts is taken to be slower than reading "
                           "(--dedup job forwards between them)");
    return Status::Ok();
  }
  const std::string net = "the network between hosts measured " + GibS(r.net_gib_s);
  if (r.cached || r.net_gib_s <= r.storage_gib_s) {
    plan->set_dedup_reason(plan->dedup_reason() + own + ": " + net + ", " +
                           (r.cached
                                ? std::string("and every host has the checkpoint in its "
                                              "page cache")
                                : "not faster than reading storage at " + GibS(r.storage_gib_s)));
    return Status::Ok();
  }
  DedupOptions job = options;
  job.mode = proto::DEDUP_JOB;
  proto::LoadPlan with_job = *plan;
  HOIST_RETURN_IF_ERROR(apply(job, &with_job));
  const double now = static_cast<double>(plan->storage_bytes());
  const double saved = now > 0 ? 1.0 - static_cast<double>(with_job.storage_bytes()) / now : 0;
  const std::string figures = net + ", faster than reading storage at " + GibS(r.storage_gib_s);
  if (saved < kAutoDedupMinSaving) {
    plan->set_dedup_reason(plan->dedup_reason() + own + ": " + figures +
                           ", but forwarding between them would save only " + Percent(saved) +
                           " of the bytes read");
    return Status::Ok();
  }
  *plan = std::move(with_job);
  plan->set_dedup_reason("auto: job (" + figures + ": reads " + Percent(saved) +
                         " fewer bytes from storage than each node reading its own copy)");
  return Status::Ok();
}

}  // namespace

Status ApplyAutoDedup(const DedupOptions& options, std::uint64_t world, std::uint64_t nodes,
                      const DedupApplier& apply, proto::LoadPlan* plan) {
  HOIST_RETURN_IF_ERROR(ChooseAutoDedup(options, world, apply, plan));
  if (nodes > 1) return ChooseAcrossHosts(options, nodes, apply, plan);
  return Status::Ok();
}

namespace {

// Rank r's reads into its plan: `steps` exchange steps of shared reads, then its own reads, each
// list coalesced; returns the bytes it reads from storage.
std::uint64_t WriteRankReads(proto::Dedup mode, std::size_t steps, std::uint32_t r, RankOut& ro,
                             proto::LoadPlan* plan) {
  proto::RankPlan& rp = *plan->mutable_ranks(static_cast<int>(r));
  rp.set_peer_group(mode == proto::DEDUP_NODE ? rp.node() : 0);
  ro.step_reads.resize(steps);
  std::uint64_t bytes = 0;
  for (auto& reads : ro.step_reads) {
    CoalesceCopies(&reads);
    proto::ExchangeStep* st = rp.add_steps();
    for (proto::Copy& c : reads) {
      bytes += CopyBytes(c);
      *st->add_reads() = std::move(c);
    }
  }
  CoalesceCopies(&ro.own);
  for (proto::Copy& c : ro.own) {
    bytes += CopyBytes(c);
    *rp.add_own_reads() = std::move(c);
  }
  rp.set_storage_bytes(bytes);
  return bytes;
}

// A forward as a send in its sender's step and a receive in each receiver's.
void WriteForward(const Forward& f, proto::LoadPlan* plan) {
  proto::ExchangeStep* sender =
      plan->mutable_ranks(static_cast<int>(f.sender))->mutable_steps(static_cast<int>(f.step));
  for (const Receiver& rv : f.receivers) {
    proto::Transfer* s = sender->add_sends();
    s->set_peer(rv.rank);
    s->set_offset(f.offset);
    s->set_peer_offset(rv.offset);
    s->set_bytes(f.bytes);
    s->set_file(f.file);
    s->set_file_offset(f.file_offset);
    proto::Transfer* t = plan->mutable_ranks(static_cast<int>(rv.rank))
                             ->mutable_steps(static_cast<int>(f.step))
                             ->add_recvs();
    t->set_peer(f.sender);
    t->set_offset(rv.offset);
    t->set_peer_offset(f.offset);
    t->set_bytes(f.bytes);
    t->set_file(f.file);
    t->set_file_offset(f.file_offset);
  }
}

}  // namespace

Status ApplyDedup(const DedupOptions& options, proto::LoadPlan* plan) {
  if (options.mode == proto::DEDUP_AUTO) {
    std::set<std::uint32_t> nodes;
    for (const proto::RankPlan& r : plan->ranks()) nodes.insert(r.node());
    return ApplyAutoDedup(options, static_cast<std::uint64_t>(plan->ranks_size()), nodes.size(),
                          ApplyDedup, plan);
  }
  if (options.mode != proto::DEDUP_NONE && options.mode != proto::DEDUP_NODE &&
      options.mode != proto::DEDUP_JOB) {
    return Status::InvalidArgument("unknown dedup mode " + std::to_string(options.mode));
  }
  if (options.step_bytes == 0) return Status::InvalidArgument("dedup step bytes must be >= 1");
  plan->set_dedup(options.mode);
  plan->set_dedup_reason(std::string(DedupName(options.mode)) + " (asked for)");
  std::uint64_t total = 0;
  for (proto::RankPlan& rp : *plan->mutable_ranks()) {
    rp.clear_steps();
    rp.clear_own_reads();
    rp.set_peer_group(0);
    if (options.mode == proto::DEDUP_NONE) {
      std::uint64_t bytes = 0;
      for (const proto::Copy& c : rp.copies()) bytes += CopyBytes(c);
      rp.set_storage_bytes(bytes);
      total += bytes;
    }
  }
  if (options.mode == proto::DEDUP_NONE) {
    plan->set_storage_bytes(total);
    return Status::Ok();
  }
  for (int i = 0; i < plan->ranks_size(); ++i) {
    if (plan->ranks(i).rank() != static_cast<std::uint32_t>(i)) {
      return Status::Internal("plan.ranks(" + std::to_string(i) + ") is rank " +
                              std::to_string(plan->ranks(i).rank()));
    }
  }

  // Groups: the ranks of each node, or all ranks.
  std::map<std::uint32_t, std::vector<std::uint32_t>> groups;
  for (const proto::RankPlan& rp : plan->ranks()) {
    groups[options.mode == proto::DEDUP_NODE ? rp.node() : 0].push_back(rp.rank());
  }
  std::map<std::uint32_t, RankOut> out;
  std::vector<Forward> forwards;
  for (const auto& [group, ranks] : groups) {
    HOIST_RETURN_IF_ERROR(DedupGroup(*plan, ranks, options.step_bytes, &out, &forwards));
  }
  std::size_t steps = 0;
  for (const auto& [r, ro] : out) steps = std::max(steps, ro.step_reads.size());
  for (const Forward& f : forwards) steps = std::max<std::size_t>(steps, f.step + 1);

  for (auto& [r, ro] : out) total += WriteRankReads(options.mode, steps, r, ro, plan);
  for (const Forward& f : forwards) WriteForward(f, plan);
  plan->set_storage_bytes(total);
  return Status::Ok();
}

}  // namespace hoist::planner
