// Compact plans: the directory of who runs what, expanding one rank, a rank's view, and the
// dedup assignment computed once per distinct peer group. See plan_set.h.
#include "planner/plan_set.h"

#include <google/protobuf/field_mask.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/field_mask_util.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <map>
#include <string>

#include "planner/job_dedup.h"

namespace hoist::planner {
namespace {

constexpr char kWho[] = "compact plan: ";

// Every group of a compact plan's dedup: its id and ranks (nodes under DEDUP_NODE, else one).
std::vector<std::pair<std::uint32_t, const std::vector<std::uint32_t>*>> GroupsOf(
    const RankDirectory& dir, std::uint32_t nodes, bool by_node) {
  std::vector<std::pair<std::uint32_t, const std::vector<std::uint32_t>*>> out;
  if (!by_node) {
    out.emplace_back(0, &dir.Members(0));
    return out;
  }
  for (std::uint32_t n = 0; n < nodes; ++n) {
    if (!dir.NodeRanks(n).empty()) out.emplace_back(n, &dir.NodeRanks(n));
  }
  return out;
}

// The template member `rank` is, in its group's template.
const proto::MemberExchange& MemberOf(const proto::LoadPlan& p, const RankDirectory& dir,
                                      std::uint32_t rank) {
  const std::uint32_t t = p.group_template(static_cast<int>(dir.Group(rank)));
  return p.dedup_templates(static_cast<int>(t)).members(static_cast<int>(dir.MemberIndex(rank)));
}

// LoadPlan.job as a rank expands it: the class count and step count filled in (a plan of an
// older hoist, one replica per class, has no job field).
proto::JobDedup JobOf(const proto::LoadPlan& p, const RankDirectory& dir) {
  proto::JobDedup job = p.job();
  job.set_classes(dir.classes());
  job.set_steps(p.exchange_steps());
  return job;
}

void SetPlace(const RankDirectory& dir, std::uint32_t rank, proto::RankPlan* rp) {
  rp->set_rank(rank);
  rp->set_node(dir.Node(rank));
  rp->set_gpu(dir.Gpu(rank));
  rp->set_tp_rank(rank % dir.tp());
  rp->set_dp_rank(rank / dir.tp());
}

// A template transfer with its peer (a member index) made a rank.
void AddRemapped(const proto::Transfer& t, const std::vector<std::uint32_t>& members,
                 google::protobuf::RepeatedPtrField<proto::Transfer>* out) {
  proto::Transfer* n = out->Add();
  *n = t;
  n->set_peer(members[t.peer()]);
}

// Member steps as rank `rank`'s, padded to the plan's count; with `only` >= 0, only the
// transfers with that rank and no reads (a stub's).
void AddSteps(const proto::LoadPlan& p, const RankDirectory& dir, std::uint32_t rank,
              std::int64_t only, proto::RankPlan* rp) {
  const proto::MemberExchange& m = MemberOf(p, dir, rank);
  const std::vector<std::uint32_t>& members = dir.Members(dir.Group(rank));
  const auto keep = [&](const proto::Transfer& t) {
    return only < 0 || members[t.peer()] == static_cast<std::uint32_t>(only);
  };
  for (const proto::ExchangeStep& st : m.steps()) {
    proto::ExchangeStep* out = rp->add_steps();
    if (only < 0) *out->mutable_reads() = st.reads();
    for (const proto::Transfer& t : st.sends()) {
      if (keep(t)) AddRemapped(t, members, out->mutable_sends());
    }
    for (const proto::Transfer& t : st.recvs()) {
      if (keep(t)) AddRemapped(t, members, out->mutable_recvs());
    }
  }
  while (rp->steps_size() < static_cast<int>(p.exchange_steps())) rp->add_steps();
}

// The ranks of a view of `rank`: its node's and, under dedup, its group's, ascending.
std::vector<std::uint32_t> ViewRanks(const RankDirectory& dir, std::uint32_t rank) {
  std::vector<std::uint32_t> out = dir.NodeRanks(dir.Node(rank));
  if (dir.dedup() && !dir.job()) {
    const std::vector<std::uint32_t>& group = dir.Members(dir.Group(rank));
    out.insert(out.end(), group.begin(), group.end());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return out;
}

// One template: the group's members as ranks 0..n-1 of a plan of their classes' copies, through
// ApplyDedup's one-group (job) assignment; returns the members' storage bytes.
Result<std::uint64_t> MakeTemplate(const proto::LoadPlan& p, const std::vector<std::uint32_t>& sig,
                                   std::uint64_t step_bytes, proto::DedupTemplate* t) {
  proto::LoadPlan mini;
  for (std::size_t i = 0; i < sig.size(); ++i) {
    proto::RankPlan* m = mini.add_ranks();
    m->set_rank(static_cast<std::uint32_t>(i));
    *m->mutable_copies() = p.ranks(static_cast<int>(sig[i])).copies();
  }
  HOIST_RETURN_IF_ERROR(ApplyDedup({proto::DEDUP_JOB, step_bytes, false}, &mini));
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < sig.size(); ++i) {
    t->add_member_class(sig[i]);
    proto::RankPlan& m = *mini.mutable_ranks(static_cast<int>(i));
    proto::MemberExchange* e = t->add_members();
    e->mutable_steps()->Swap(m.mutable_steps());
    e->mutable_own_reads()->Swap(m.mutable_own_reads());
    e->set_storage_bytes(m.storage_bytes());
    bytes += m.storage_bytes();
  }
  return bytes;
}

// Under DEDUP_JOB: the class template (one member per class) and the job's integers
// (planner/job_dedup.h); storage_bytes is the world's, from each class's figures.
Status FoldJob(const DedupOptions& o, const RankDirectory& dir, proto::LoadPlan* p) {
  std::vector<std::uint32_t> sig(dir.classes());
  for (std::uint32_t c = 0; c < dir.classes(); ++c) sig[c] = c;
  proto::DedupTemplate* t = p->add_dedup_templates();
  HOIST_RETURN_IF_ERROR(MakeTemplate(*p, sig, o.step_bytes, t).status());
  p->add_group_template(0);
  const std::uint32_t replicas = dir.world() / dir.classes();
  std::uint64_t least = ~0ull;
  for (const proto::MemberExchange& m : t->members()) least = std::min(least, ForwardedBytes(m));
  proto::JobDedup& job = *p->mutable_job();
  job.set_classes(dir.classes());
  job.set_step_bytes(o.step_bytes);
  job.set_chunk_bytes(o.chunk_bytes > 0 ? o.chunk_bytes
                                        : ChooseChunkBytes(least, replicas, o.step_bytes));
  std::uint32_t extra = 0;
  for (const proto::MemberExchange& m : t->members()) {
    extra = std::max(extra, ExtraJobSteps(m, job, replicas));
  }
  job.set_steps(static_cast<std::uint32_t>(t->members(0).steps_size()) + extra);
  p->set_exchange_steps(job.steps());
  std::uint64_t total = 0;
  for (std::uint32_t c = 0; c < dir.classes(); ++c) {
    for (const JobRankFigures& f :
         JobClassFigures(t->members(static_cast<int>(c)), job, c, replicas)) {
      total += f.storage_bytes;
    }
  }
  p->set_storage_bytes(total);
  return Status::Ok();
}

// Under DEDUP_NODE: one template per distinct group (its members' classes); DEDUP_JOB: FoldJob.
Status FoldGroups(const DedupOptions& o, proto::LoadPlan* p) {
  for (proto::RankPlan& rp : *p->mutable_ranks()) rp.set_storage_bytes(0);
  HOIST_ASSIGN_OR_RETURN(RankDirectory dir, RankDirectory::Of(*p));
  if (o.mode == proto::DEDUP_JOB) return FoldJob(o, dir, p);
  std::uint32_t nodes = 0;
  for (std::uint32_t r = 0; r < dir.world(); ++r) nodes = std::max(nodes, dir.Node(r) + 1);
  const bool by_node = o.mode == proto::DEDUP_NODE;
  p->mutable_group_template()->Resize(static_cast<int>(by_node ? nodes : 1), 0);
  std::map<std::vector<std::uint32_t>, std::pair<std::uint32_t, std::uint64_t>> seen;
  std::uint64_t total = 0;
  for (const auto& [group, members] : GroupsOf(dir, nodes, by_node)) {
    std::vector<std::uint32_t> sig;
    for (std::uint32_t r : *members) sig.push_back(dir.ClassOf(r));
    auto it = seen.find(sig);
    if (it == seen.end()) {
      const auto index = static_cast<std::uint32_t>(p->dedup_templates_size());
      HOIST_ASSIGN_OR_RETURN(std::uint64_t bytes,
                             MakeTemplate(*p, sig, o.step_bytes, p->add_dedup_templates()));
      it = seen.emplace(sig, std::make_pair(index, bytes)).first;
      const proto::DedupTemplate& t = p->dedup_templates(static_cast<int>(index));
      p->set_exchange_steps(std::max<std::uint32_t>(
          p->exchange_steps(), static_cast<std::uint32_t>(t.members(0).steps_size())));
    }
    p->set_group_template(static_cast<int>(group), it->second.first);
    total += it->second.second;
  }
  p->set_storage_bytes(total);
  return Status::Ok();
}

// DEDUP_JOB's template has one member per class, member i running class i, and the job's
// integers fit (planner/job_dedup.h).
Status CheckJobTemplate(const proto::LoadPlan& p, const RankDirectory& d,
                        const proto::DedupTemplate& t) {
  const std::string who = std::string(kWho) + "job dedup: ";
  if (t.members_size() != static_cast<int>(d.classes()) ||
      t.member_class_size() != t.members_size()) {
    return Status::Corrupt(who + "a template of " + std::to_string(t.members_size()) +
                           " members for " + std::to_string(d.classes()) +
                           " classes (a job plan of an older hoist has a member per rank: plan "
                           "it again)");
  }
  for (int i = 0; i < t.member_class_size(); ++i) {
    if (t.member_class(i) != static_cast<std::uint32_t>(i)) {
      return Status::Corrupt(who + "template member " + std::to_string(i) + " runs class " +
                             std::to_string(t.member_class(i)));
    }
  }
  const proto::JobDedup job = JobOf(p, d);
  if (d.world() / d.classes() > 1 && (job.chunk_bytes() == 0 || job.step_bytes() == 0)) {
    return Status::Corrupt(who + "no chunk or step bytes");
  }
  for (const proto::MemberExchange& m : t.members()) {
    if (static_cast<std::uint32_t>(m.steps_size()) > job.steps()) {
      return Status::Corrupt(who + "a template member has more steps than the plan's " +
                             std::to_string(job.steps()));
    }
    for (const proto::ExchangeStep& st : m.steps()) {
      for (const proto::Copy& c : st.reads()) {
        if (!ContiguousInArena(c))
          return Status::Corrupt(who + "a shared read strided in the arena");
      }
    }
  }
  return Status::Ok();
}

// The dedup fields of a compact plan agree with its directory (checked by RankDirectory::Of).
Status CheckTemplates(const proto::LoadPlan& p, const RankDirectory& d, std::uint32_t nodes,
                      bool by_node) {
  for (const auto& [group, members] : GroupsOf(d, nodes, by_node)) {
    const std::string who = kWho + std::string("peer group ") + std::to_string(group);
    if (group >= static_cast<std::uint32_t>(p.group_template_size()) ||
        p.group_template(static_cast<int>(group)) >=
            static_cast<std::uint32_t>(p.dedup_templates_size())) {
      return Status::Corrupt(who + " has no dedup template");
    }
    const proto::DedupTemplate& t =
        p.dedup_templates(static_cast<int>(p.group_template(static_cast<int>(group))));
    if (!by_node) return CheckJobTemplate(p, d, t);
    if (t.members_size() != static_cast<int>(members->size()) ||
        t.member_class_size() != t.members_size()) {
      return Status::Corrupt(who + " has " + std::to_string(members->size()) +
                             " ranks but its template " + std::to_string(t.members_size()));
    }
    for (std::size_t i = 0; i < members->size(); ++i) {
      if (t.member_class(static_cast<int>(i)) != d.ClassOf((*members)[i])) {
        return Status::Corrupt(who + ": rank " + std::to_string((*members)[i]) +
                               " runs another class than its template member");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<RankDirectory> RankDirectory::Of(const proto::LoadPlan& p) {
  RankDirectory d;
  d.world_ = p.topology().world();
  d.tp_ = std::max<std::uint32_t>(1, p.topology().tp());
  const auto classes = static_cast<std::uint32_t>(p.ranks_size());
  if (!p.compact() || classes == 0 || d.world_ == 0 || d.world_ % classes != 0) {
    return Status::Corrupt(kWho + std::to_string(classes) + " rank plans for a world of " +
                           std::to_string(d.world_) + (p.compact() ? "" : " (not compact)"));
  }
  d.classes_ = classes;
  const int placed = p.placement().node_size();
  if ((placed != 0 && placed != static_cast<int>(d.world_)) || p.placement().gpu_size() != placed) {
    return Status::Corrupt(std::string(kWho) + "placement of " + std::to_string(placed) +
                           " nodes and " + std::to_string(p.placement().gpu_size()) +
                           " gpus for a world of " + std::to_string(d.world_));
  }
  d.node_.assign(p.placement().node().begin(), p.placement().node().end());
  d.gpu_.assign(p.placement().gpu().begin(), p.placement().gpu().end());
  std::uint32_t nodes = 1;
  for (std::uint32_t n : d.node_) nodes = std::max(nodes, n + 1);
  if (nodes > d.world_) return Status::Corrupt(std::string(kWho) + "node ids beyond the world");
  d.node_ranks_.resize(nodes);
  d.member_index_.resize(d.world_);
  d.all_.resize(d.world_);
  for (std::uint32_t r = 0; r < d.world_; ++r) {
    std::vector<std::uint32_t>& mates = d.node_ranks_[d.Node(r)];
    d.member_index_[r] = static_cast<std::uint32_t>(p.dedup() == proto::DEDUP_NODE  ? mates.size()
                                                    : p.dedup() == proto::DEDUP_JOB ? r % classes
                                                                                    : r);
    mates.push_back(r);
    d.all_[r] = r;
  }
  d.by_node_ = p.dedup() == proto::DEDUP_NODE;
  d.dedup_ = p.dedup() != proto::DEDUP_NONE && p.dedup_templates_size() > 0;
  d.job_ = d.dedup_ && p.dedup() == proto::DEDUP_JOB;
  if (p.dedup() != proto::DEDUP_NONE && (d.dedup_ || p.exchange_steps() > 0)) {
    HOIST_RETURN_IF_ERROR(CheckTemplates(p, d, nodes, d.by_node_));
  }
  return d;
}

std::uint32_t RankDirectory::Node(std::uint32_t rank) const {
  return node_.empty() ? 0 : node_[rank];
}
std::uint32_t RankDirectory::Gpu(std::uint32_t rank) const {
  return gpu_.empty() ? rank : gpu_[rank];
}
std::uint32_t RankDirectory::Group(std::uint32_t rank) const { return by_node_ ? Node(rank) : 0; }
const std::vector<std::uint32_t>& RankDirectory::Members(std::uint32_t group) const {
  return by_node_ ? node_ranks_[group] : all_;
}
const std::vector<std::uint32_t>& RankDirectory::NodeRanks(std::uint32_t node) const {
  return node_ranks_[node];
}

proto::RankPlan ExpandRank(const proto::LoadPlan& p, const RankDirectory& dir, std::uint32_t rank) {
  proto::RankPlan rp = p.ranks(static_cast<int>(dir.ClassOf(rank)));
  SetPlace(dir, rank, &rp);
  if (dir.job()) {
    // Cannot fail: RankDirectory::Of checked what ExpandJobExchange does.
    const Status s =
        ExpandJobExchange(MemberOf(p, dir, rank), JobOf(p, dir), dir.world(), rank, &rp);
    if (!s.ok()) rp.clear_steps();
  } else if (dir.dedup()) {
    rp.set_peer_group(dir.Group(rank));
    AddSteps(p, dir, rank, -1, &rp);
    const proto::MemberExchange& m = MemberOf(p, dir, rank);
    *rp.mutable_own_reads() = m.own_reads();
    rp.set_storage_bytes(m.storage_bytes());
  }
  return rp;
}

const proto::MemberExchange* ExchangeOf(const proto::LoadPlan& p, const RankDirectory& dir,
                                        std::uint32_t rank) {
  return dir.dedup() && !dir.job() ? &MemberOf(p, dir, rank) : nullptr;
}

std::vector<JobRankFigures> JobFigures(const proto::LoadPlan& p, const RankDirectory& dir) {
  std::vector<JobRankFigures> out(dir.world());
  if (!dir.job()) return out;
  const std::uint32_t replicas = dir.world() / dir.classes();
  const proto::JobDedup job = JobOf(p, dir);
  for (std::uint32_t c = 0; c < dir.classes(); ++c) {
    std::vector<JobRankFigures> f = JobClassFigures(MemberOf(p, dir, c), job, c, replicas);
    for (std::uint32_t d = 0; d < replicas; ++d) out[c + dir.classes() * d] = f[d];
  }
  return out;
}

proto::LoadPlan PlanHeader(const proto::LoadPlan& plan, bool packed) {
  const auto make = [](bool with_packed) {
    auto* m = new google::protobuf::FieldMask;
    const google::protobuf::Descriptor* d = proto::LoadPlan::descriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      switch (d->field(i)->number()) {
        case proto::LoadPlan::kRanksFieldNumber:
        case proto::LoadPlan::kCompactFieldNumber:
        case proto::LoadPlan::kViewFieldNumber:
        case proto::LoadPlan::kPlacementFieldNumber:
        case proto::LoadPlan::kDedupTemplatesFieldNumber:
        case proto::LoadPlan::kGroupTemplateFieldNumber:
        case proto::LoadPlan::kExchangeStepsFieldNumber:
          continue;
        case proto::LoadPlan::kPackedFieldNumber:
          if (!with_packed) continue;
          [[fallthrough]];
        default:
          m->add_paths(d->field(i)->name());
      }
    }
    return m;
  };
  static const google::protobuf::FieldMask* const with = make(true);
  static const google::protobuf::FieldMask* const without = make(false);
  proto::LoadPlan header;
  google::protobuf::util::FieldMaskUtil::MergeMessageTo(plan, packed ? *with : *without, {},
                                                        &header);
  return header;
}

std::vector<int> PackedTensorsRead(const proto::LoadPlan& plan, const proto::RankPlan& rp) {
  struct Range {
    std::uint32_t file;
    std::uint64_t begin, end;
    int index;
  };
  std::vector<Range> ranges;  // sorted by file, then offset
  ranges.reserve(static_cast<std::size_t>(plan.packed_size()));
  for (int i = 0; i < plan.packed_size(); ++i) {
    const proto::PackedTensor& t = plan.packed(i);
    ranges.push_back({t.file(), t.offset(), t.offset() + t.bytes(), i});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.file != b.file ? a.file < b.file : a.begin < b.begin;
  });
  std::vector<char> read(ranges.size(), 0);
  for (const proto::Copy& c : rp.copies()) {
    if (c.width() == 0 || c.rows() == 0) continue;
    const std::uint64_t lo = c.src_offset();
    const std::uint64_t hi = lo + (c.rows() - 1) * c.src_pitch() + c.width();
    // The first tensor of the copy's file that ends past lo, then every one that starts before hi.
    auto it =
        std::lower_bound(ranges.begin(), ranges.end(), std::pair(c.file(), lo),
                         [](const Range& r, const std::pair<std::uint32_t, std::uint64_t>& k) {
                           return r.file != k.first ? r.file < k.first : r.end <= k.second;
                         });
    for (; it != ranges.end() && it->file == c.file() && it->begin < hi; ++it) {
      read[static_cast<std::size_t>(it - ranges.begin())] = 1;
    }
  }
  std::vector<int> out;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (read[i]) out.push_back(ranges[i].index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

proto::LoadPlan RankView(const proto::LoadPlan& p, const proto::LoadPlan& header,
                         const RankDirectory& dir, std::uint32_t rank) {
  proto::LoadPlan v = header;
  v.clear_packed();  // a header may carry the whole index (PlanHeader)
  for (int i : PackedTensorsRead(p, p.ranks(static_cast<int>(dir.ClassOf(rank))))) {
    *v.add_packed() = p.packed(i);
  }
  v.set_view(true);
  v.clear_storage_bytes();  // the world's total: nothing of one rank's
  v.clear_dedup_reason();   // rank 0's summary (it names the node count)
  if (dir.job()) *v.mutable_job() = JobOf(p, dir);
  for (std::uint32_t r : ViewRanks(dir, rank)) {
    if (r == rank && dir.job()) {  // its class member: the rank expands it (ExpandJobView)
      proto::RankPlan* own = v.add_ranks();
      *own = p.ranks(static_cast<int>(dir.ClassOf(rank)));
      SetPlace(dir, rank, own);
      *own->mutable_job_exchange() = MemberOf(p, dir, rank);
      continue;
    }
    if (r == rank) {
      *v.add_ranks() = ExpandRank(p, dir, rank);
      continue;
    }
    proto::RankPlan* stub = v.add_ranks();
    SetPlace(dir, r, stub);
    if (dir.job()) {
      stub->set_peer_group(0);
    } else if (dir.dedup()) {
      stub->set_peer_group(dir.Group(r));
      AddSteps(p, dir, r, rank, stub);
    }
  }
  return v;
}

ViewWriter::ViewWriter(const proto::LoadPlan& compact, const RankDirectory& dir)
    : compact_(compact), dir_(dir) {
  proto::LoadPlan header = PlanHeader(compact, /*packed=*/false);
  header.set_view(true);
  header.clear_storage_bytes();
  header.clear_dedup_reason();  // rank 0's summary (it names the node count)
  if (dir.job()) *header.mutable_job() = JobOf(compact, dir);
  header_ = header.SerializeAsString();
  for (const proto::RankPlan& c : compact.ranks()) {
    classes_.push_back(c.SerializeAsString());
    reads_.push_back(PackedTensorsRead(compact, c));
  }
  // Each packed tensor's bytes once (a view's parse merges the repeated field's occurrences).
  packed_.reserve(static_cast<std::size_t>(compact.packed_size()));
  for (const proto::PackedTensor& t : compact.packed()) {
    proto::LoadPlan one;
    *one.add_packed() = t;
    packed_.push_back(one.SerializeAsString());
  }
  if (!dir.job()) return;
  for (std::uint32_t c = 0; c < dir.classes(); ++c) {  // each class's member, once
    proto::RankPlan m;
    *m.mutable_job_exchange() = MemberOf(compact, dir, c);
    members_.push_back(m.SerializeAsString());
  }
}

std::string ViewWriter::View(std::uint32_t rank) const {
  std::string out = header_;
  for (int i : reads_[dir_.ClassOf(rank)]) out += packed_[static_cast<std::size_t>(i)];
  const auto add_entry = [&out](const std::string& a, const std::string& b) {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        proto::LoadPlan::kRanksFieldNumber,
        google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint64(a.size() + b.size());
    coded.WriteString(a);
    coded.WriteString(b);
  };
  std::vector<std::uint32_t> others = ViewRanks(dir_, rank);
  for (std::uint32_t r : others) {
    proto::RankPlan own;  // the fields of one rank; a stub's alone
    SetPlace(dir_, r, &own);
    if (dir_.job()) {
      own.set_peer_group(0);
      add_entry(r == rank ? classes_[dir_.ClassOf(r)] : std::string(),
                own.SerializeAsString() + (r == rank ? members_[dir_.ClassOf(r)] : std::string()));
      continue;
    }
    if (dir_.dedup()) {
      own.set_peer_group(dir_.Group(r));
      AddSteps(compact_, dir_, r, r == rank ? -1 : static_cast<std::int64_t>(rank), &own);
      if (r == rank) {
        const proto::MemberExchange& m = MemberOf(compact_, dir_, rank);
        *own.mutable_own_reads() = m.own_reads();
        own.set_storage_bytes(m.storage_bytes());
      }
    }
    add_entry(r == rank ? classes_[dir_.ClassOf(r)] : std::string(), own.SerializeAsString());
  }
  return out;
}

Result<proto::LoadPlan> ExpandPlan(const proto::LoadPlan& plan) {
  if (!plan.compact()) return plan;
  HOIST_ASSIGN_OR_RETURN(RankDirectory dir, RankDirectory::Of(plan));
  proto::LoadPlan out = PlanHeader(plan);
  out.mutable_ranks()->Reserve(static_cast<int>(dir.world()));
  for (std::uint32_t r = 0; r < dir.world(); ++r) *out.add_ranks() = ExpandRank(plan, dir, r);
  return out;
}

const proto::RankPlan* FindRank(const proto::LoadPlan& plan, std::uint32_t rank) {
  if (plan.compact()) return nullptr;
  if (rank < static_cast<std::uint32_t>(plan.ranks_size()) &&
      plan.ranks(static_cast<int>(rank)).rank() == rank) {
    return &plan.ranks(static_cast<int>(rank));
  }
  for (const proto::RankPlan& rp : plan.ranks()) {
    if (rp.rank() == rank) return &rp;
  }
  return nullptr;
}

std::uint32_t PlanWorld(const proto::LoadPlan& plan) {
  if (plan.compact() || plan.view()) return plan.topology().world();
  return static_cast<std::uint32_t>(plan.ranks_size());
}

Result<ViewBytes> SampleViewBytes(const proto::LoadPlan& compact) {
  HOIST_ASSIGN_OR_RETURN(RankDirectory dir, RankDirectory::Of(compact));
  const ViewWriter writer(compact, dir);
  ViewBytes out;
  bool first = true;
  const auto sample = [&](std::uint32_t r) {
    const std::uint64_t n = writer.View(r).size();
    if (first || n < out.min) {
      out.min = n;
      out.min_rank = r;
    }
    if (first || n > out.max) {
      out.max = n;
      out.max_rank = r;
    }
    first = false;
  };
  const std::uint32_t n = std::min(dir.classes(), dir.world());
  for (std::uint32_t r = 0; r < n; ++r) sample(r);
  for (std::uint32_t r = std::max(n, dir.world() - n); r < dir.world(); ++r) sample(r);
  return out;
}

Status ApplyCompactDedup(const DedupOptions& options, proto::LoadPlan* p) {
  if (options.mode == proto::DEDUP_AUTO) {
    return ApplyAutoDedup(options, p->topology().world(), p->topology().nodes(), ApplyCompactDedup,
                          p);
  }
  p->clear_dedup_templates();
  p->clear_group_template();
  p->clear_exchange_steps();
  p->clear_job();
  // The classes' own bookkeeping (storage_bytes = their copies' bytes, no steps) and the
  // option checks.
  HOIST_RETURN_IF_ERROR(ApplyDedup({proto::DEDUP_NONE, options.step_bytes, false}, p));
  if (options.mode != proto::DEDUP_NONE && options.mode != proto::DEDUP_NODE &&
      options.mode != proto::DEDUP_JOB) {
    return Status::InvalidArgument("unknown dedup mode " + std::to_string(options.mode));
  }
  p->set_dedup(options.mode);
  p->set_dedup_reason(std::string(DedupName(options.mode)) + " (asked for)");
  if (options.mode == proto::DEDUP_NONE) {
    HOIST_ASSIGN_OR_RETURN(RankDirectory dir, RankDirectory::Of(*p));
    std::uint64_t total = 0;
    for (const proto::RankPlan& rp : p->ranks()) total += rp.storage_bytes();
    p->set_storage_bytes(total * (dir.world() / dir.classes()));
    return Status::Ok();
  }
  return FoldGroups(options, p);
}

}  // namespace hoist::planner
