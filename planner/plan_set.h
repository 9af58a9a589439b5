// Compact plans: a plan whose size grows with the distinct rank plans and the tensors, not with
// the world (proto/plan.proto, LoadPlan.compact), and what is made of it.
//
// Data-parallel replicas of a tp rank load the same slices, so the planner builds one rank plan
// per class (the tp rank without ep; every rank is its own class with ep, whose experts differ)
// and folds the world into a placement (node, gpu per rank; empty for one node) and, under node
// dedup, one DedupTemplate per distinct peer group (the groups of a regular topology, one per
// node, all share one); under job dedup, one template with a member per class, which each rank
// expands (planner/job_dedup.h). From it:
//  - ExpandRank: one rank's plan, exactly as an expanded plan holds it;
//  - RankView: what rank 0 sends a rank: the plan's header (of a packed checkpoint's tensors,
//    those its copies read: PackedTensorsRead), the rank's own plan, and the place
//    (plus, under node dedup, the transfers with it) of the other ranks of its node and peer
//    group; under job dedup, the rank's class plan and class template member instead of its
//    exchange (ExpandJobView expands it) and its node's places; its size does not depend on the
//    world once nodes are bounded (a topology);
//  - ExpandPlan: every rank (BuildLoadPlan's result; tests and small tools).
// FindRank and PlanWorld read any of the three forms.
//
// Ownership: values in, values out; RankDirectory keeps no reference to the plan.
// Failure: RankDirectory::Of is Corrupt for a compact plan whose folding is inconsistent (class
// count not dividing the world, placement or templates of the wrong size), naming the field.
// Threading: pure functions; a RankDirectory is immutable after Of.
#pragma once

#include <cstdint>
#include <vector>

#include "hoist/status.h"
#include "planner/dedup.h"
#include "planner/job_dedup.h"
#include "proto/plan.pb.h"

namespace hoist::planner {

// Who runs what in a compact plan, indexed once (a few integers per rank).
class RankDirectory {
 public:
  static Result<RankDirectory> Of(const proto::LoadPlan& compact);

  std::uint32_t world() const { return world_; }
  std::uint32_t classes() const { return classes_; }
  std::uint32_t tp() const { return tp_; }
  std::uint32_t ClassOf(std::uint32_t rank) const { return rank % classes_; }
  std::uint32_t Node(std::uint32_t rank) const;
  std::uint32_t Gpu(std::uint32_t rank) const;
  bool dedup() const { return dedup_; }
  bool job() const { return job_; }  // DEDUP_JOB: one class template (planner/job_dedup.h)
  // Under dedup: the rank's peer group id (its node under DEDUP_NODE, 0 under DEDUP_JOB), the
  // group's ranks ascending, and the rank's index among them.
  std::uint32_t Group(std::uint32_t rank) const;
  const std::vector<std::uint32_t>& Members(std::uint32_t group) const;
  std::uint32_t MemberIndex(std::uint32_t rank) const { return member_index_[rank]; }
  // The ranks of a node, ascending.
  const std::vector<std::uint32_t>& NodeRanks(std::uint32_t node) const;

 private:
  std::uint32_t world_ = 0, classes_ = 1, tp_ = 1;
  bool dedup_ = false, by_node_ = false, job_ = false;
  std::vector<std::uint32_t> node_, gpu_, member_index_;
  std::vector<std::vector<std::uint32_t>> node_ranks_;  // by node id
  std::vector<std::uint32_t> all_;                      // DEDUP_JOB's one group
};

// Rank `rank`'s plan (its class's, with its place, and under dedup its exchange).
proto::RankPlan ExpandRank(const proto::LoadPlan& compact, const RankDirectory& dir,
                           std::uint32_t rank);

// Under DEDUP_NODE, rank `rank`'s exchange in its group's template (peers are member indexes);
// nullptr without dedup and under DEDUP_JOB (see JobFigures).
const proto::MemberExchange* ExchangeOf(const proto::LoadPlan& compact, const RankDirectory& dir,
                                        std::uint32_t rank);

// Under DEDUP_JOB, every rank's storage bytes, sends and bytes forwarded (indexed by rank), in
// one pass per class over its template member (classes x pieces + world work), without
// expanding any rank; all zero otherwise.
std::vector<JobRankFigures> JobFigures(const proto::LoadPlan& compact, const RankDirectory& dir);

// The plan without its ranks and compact fields (version, model, topology, files, packed, ...);
// without the packed index too when `packed` is false (a view adds the tensors its rank reads:
// copying a DeepSeek-V3-shaped index only to clear it cost rank 0 a tenth of a second).
proto::LoadPlan PlanHeader(const proto::LoadPlan& plan, bool packed = true);

// The packed tensors (indexes into plan.packed, ascending) whose logical bytes any copy of `rp`
// reads: each copy's source extent on a packed file against the tensors' byte ranges. Under dedup
// a rank reads only bytes of its own copies (planner/dedup.h: a shared piece is read by one of the
// ranks that need it), so these are all the tensors a rank decodes. A rank's view carries these
// alone: a packed copy of a DeepSeek-V3-shaped checkpoint (90,427 tensors) gave every rank the
// whole index, 93 MB, which each rank then parsed.
std::vector<int> PackedTensorsRead(const proto::LoadPlan& plan, const proto::RankPlan& rp);

// What rank 0 sends `rank` (LoadPlan.view; see above).
proto::LoadPlan RankView(const proto::LoadPlan& compact, const proto::LoadPlan& header,
                         const RankDirectory& dir, std::uint32_t rank);

// RankView's bytes, made without copying a class plan: each class plan and the header are
// serialized once, and a view is their bytes put together with the rank's own fields (protobuf
// merges a message's repeated occurrences, so the bytes parse as RankView's message). For
// rank 0's scatter: its cost per rank is the view's bytes, not a copy of its plan.
// Keeps references to `compact` and `dir`, which must outlive it.
class ViewWriter {
 public:
  ViewWriter(const proto::LoadPlan& compact, const RankDirectory& dir);
  std::string View(std::uint32_t rank) const;

 private:
  const proto::LoadPlan& compact_;
  const RankDirectory& dir_;
  std::string header_;                   // without the packed tensors
  std::vector<std::string> packed_;      // packed tensor i as LoadPlan bytes (its field)
  std::vector<std::vector<int>> reads_;  // per class: its PackedTensorsRead
  std::vector<std::string> classes_;
  std::vector<std::string> members_;  // DEDUP_JOB: a RankPlan holding class c's job_exchange
};

// Every rank's plan, ranks(r) rank r's; an expanded plan is returned as it is.
Result<proto::LoadPlan> ExpandPlan(const proto::LoadPlan& plan);

// Rank `rank`'s plan in any form (an expanded plan, a view; a compact plan holds none), or
// nullptr.
const proto::RankPlan* FindRank(const proto::LoadPlan& plan, std::uint32_t rank);
// The plan's world: topology.world of a compact plan or a view, ranks_size otherwise.
std::uint32_t PlanWorld(const proto::LoadPlan& plan);

// The size of ViewWriter's views (the plan part of what rank 0 sends) of a compact plan's first
// `classes` ranks and of its last `classes` (the largest rank ids): sampled once per class at
// each end.
struct ViewBytes {
  std::uint64_t min = 0, max = 0;
  std::uint32_t min_rank = 0, max_rank = 0;
};
Result<ViewBytes> SampleViewBytes(const proto::LoadPlan& compact);

// ApplyDedup (planner/dedup.h) for a compact plan: under DEDUP_NODE the same assignment,
// computed once per distinct peer group and kept as templates; under DEDUP_JOB the class template
// and LoadPlan.job (planner/job_dedup.h). Sets dedup, dedup_reason, storage_bytes (the whole
// world's), exchange_steps, dedup_templates, group_template and job.
Status ApplyCompactDedup(const DedupOptions& options, proto::LoadPlan* compact);

}  // namespace hoist::planner
