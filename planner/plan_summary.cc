#include "planner/plan_summary.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "planner/plan_options.h"
#include "planner/plan_set.h"
#include "util/printable.h"
#include "util/units.h"

namespace hoist::planner {
namespace {

std::string Layout(proto::Layout l) { return l == proto::LAYOUT_HF ? "hf" : "fused"; }

// A packed checkpoint's coded tensors: their original bytes and their streams' stored bytes.
struct PackedTotals {
  std::uint64_t tensors = 0, logical = 0, stored = 0;
};

PackedTotals Packed(const proto::LoadPlan& plan) {
  PackedTotals p;
  for (const auto& t : plan.packed()) {
    ++p.tensors;
    p.logical += t.bytes();
    for (const auto& s : t.streams()) p.stored += s.bytes();
  }
  return p;
}

// One rank's line: its place, its plan's summary (shared by a compact plan's replicas), its
// storage bytes and, under dedup, its sends.
struct RankRow {
  std::uint32_t rank = 0, node = 0, gpu = 0;
  std::uint64_t tp_rank = 0, dp_rank = 0, storage = 0, sends = 0, forwarded = 0;
  const RankSummary* s = nullptr;
};

void CountSends(const google::protobuf::RepeatedPtrField<proto::ExchangeStep>& steps,
                RankRow* row) {
  for (const auto& st : steps) {
    for (const auto& t : st.sends()) {
      ++row->sends;
      row->forwarded += t.bytes();
    }
  }
}

// Every rank's row, in rank order; `summaries` owns what the rows point to.
std::vector<RankRow> Rows(const proto::LoadPlan& plan, std::vector<RankSummary>* summaries) {
  std::vector<RankRow> rows;
  for (const auto& r : plan.ranks()) summaries->push_back(SummarizeRank(r));
  Result<RankDirectory> dir =
      plan.compact() ? RankDirectory::Of(plan) : Result<RankDirectory>(Status::Ok());
  if (!plan.compact() || !dir.ok()) {
    for (int i = 0; i < plan.ranks_size(); ++i) {
      const proto::RankPlan& r = plan.ranks(i);
      RankRow row{r.rank(), r.node(), r.gpu(), r.tp_rank(), r.dp_rank(), r.storage_bytes()};
      row.s = &(*summaries)[static_cast<std::size_t>(i)];
      CountSends(r.steps(), &row);
      rows.push_back(row);
    }
    return rows;
  }
  const std::vector<JobRankFigures> job = JobFigures(plan, *dir);  // DEDUP_JOB: per rank
  for (std::uint32_t r = 0; r < dir->world(); ++r) {
    const std::uint32_t c = dir->ClassOf(r);
    RankRow row{r, dir->Node(r), dir->Gpu(r), r % dir->tp(), r / dir->tp()};
    row.s = &(*summaries)[c];
    const proto::MemberExchange* ex = ExchangeOf(plan, *dir, r);
    row.storage = ex ? ex->storage_bytes() : plan.ranks(static_cast<int>(c)).storage_bytes();
    if (ex) CountSends(ex->steps(), &row);
    if (dir->job()) {
      row.storage = job[r].storage_bytes;
      row.sends = job[r].sends;
      row.forwarded = job[r].forwarded;
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

RankSummary SummarizeRank(const proto::RankPlan& rank) {
  RankSummary s;
  s.rank = rank.rank();
  s.tensors = static_cast<std::uint64_t>(rank.tensors_size());
  s.bytes = rank.payload_bytes();
  s.arena_bytes = rank.arena_bytes();
  s.copies = static_cast<std::uint64_t>(rank.copies_size());
  s.fills = static_cast<std::uint64_t>(rank.fills_size());
  std::set<std::uint32_t> files;
  for (const auto& c : rank.copies()) {
    files.insert(c.file());
    s.copy_bytes += c.width() * std::max<std::uint64_t>(c.rows(), 1);
  }
  for (const auto& f : rank.fills()) s.fill_bytes += f.bytes();
  s.files = files.size();
  return s;
}

// A vision-language checkpoint's line: what of it the plan leaves out.
std::string VisionLine(const proto::LoadPlan& plan) {
  if (plan.vision_tensors() == 0) return "";
  return "vision-language checkpoint: its text model; the " +
         std::to_string(plan.vision_tensors()) +
         " tensors of the vision tower and projector are not loaded\n";
}

std::string FormatPlanTable(const proto::LoadPlan& plan) {
  const auto& t = plan.topology();
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "plan: %s (family %s, %s), layout %s, world %u (tp %u, dp %u, ep %u%s), %llu "
                "source tensors, %s (%llu bytes) in %d files\n",
                Printable(plan.model_type()).c_str(), Printable(plan.family()).c_str(),
                Printable(plan.format()).c_str(), Layout(plan.layout()).c_str(), t.world(), t.tp(),
                t.dp(), t.ep(),
                t.ep() > 0
                    ? (t.placement() == proto::PLACEMENT_ROUND_ROBIN ? ", round_robin" : ", linear")
                    : "",
                static_cast<unsigned long long>(plan.source_tensors()),
                HumanBytes(plan.source_bytes()).c_str(),
                static_cast<unsigned long long>(plan.source_bytes()), plan.files_size());
  out += line;
  out += VisionLine(plan);
  if (const PackedTotals p = Packed(plan); p.tensors > 0) {
    std::snprintf(line, sizeof line,
                  "packed: %llu tensors stored as codec streams, %s for their %s (%.1f%%); the "
                  "bytes below are the tensors', ranks read the stored blocks that hold them\n",
                  static_cast<unsigned long long>(p.tensors), HumanBytes(p.stored).c_str(),
                  HumanBytes(p.logical).c_str(),
                  p.logical > 0 ? 100.0 * static_cast<double>(p.stored) / p.logical : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%6s %5s %4s %4s %8s %16s %12s %9s %7s %6s\n", "rank", "node",
                "gpu", "tp", "tensors", "bytes", "payload", "copies", "fills", "files");
  out += line;
  RankSummary total;
  std::vector<RankSummary> summaries;
  const std::vector<RankRow> rows = Rows(plan, &summaries);
  std::uint64_t copy_bytes = 0, transfers = 0, forwarded = 0;
  for (const RankRow& r : rows) {
    const RankSummary& s = *r.s;
    copy_bytes += s.copy_bytes;
    transfers += r.sends;
    forwarded += r.forwarded;
    std::snprintf(
        line, sizeof line, "%6u %5u %4u %4llu %8llu %16llu %12s %9llu %7llu %6llu\n", r.rank,
        r.node, r.gpu, static_cast<unsigned long long>(r.tp_rank),
        static_cast<unsigned long long>(s.tensors), static_cast<unsigned long long>(s.bytes),
        HumanBytes(s.bytes).c_str(), static_cast<unsigned long long>(s.copies),
        static_cast<unsigned long long>(s.fills), static_cast<unsigned long long>(s.files));
    out += line;
    total.tensors += s.tensors;
    total.bytes += s.bytes;
    total.copies += s.copies;
    total.fills += s.fills;
  }
  std::snprintf(line, sizeof line, "%6s %5s %4s %4s %8llu %16llu %12s %9llu %7llu %6d\n", "total",
                "", "", "", static_cast<unsigned long long>(total.tensors),
                static_cast<unsigned long long>(total.bytes), HumanBytes(total.bytes).c_str(),
                static_cast<unsigned long long>(total.copies),
                static_cast<unsigned long long>(total.fills), plan.files_size());
  out += line;
  if (!plan.dedup_reason().empty()) out += "dedup " + plan.dedup_reason() + "\n";
  if (plan.dedup() != proto::DEDUP_NONE) {  // planner/dedup.h
    std::snprintf(line, sizeof line,
                  "dedup %s: %s read from storage instead of %s; %llu transfers forward %s in "
                  "%d steps\n",
                  plan.dedup() == proto::DEDUP_NODE ? "node" : "job",
                  HumanBytes(plan.storage_bytes()).c_str(), HumanBytes(copy_bytes).c_str(),
                  static_cast<unsigned long long>(transfers), HumanBytes(forwarded).c_str(),
                  plan.compact()          ? static_cast<int>(plan.exchange_steps())
                  : plan.ranks_size() > 0 ? plan.ranks(0).steps_size()
                                          : 0);
    out += line;
  }
  return out;
}

nlohmann::json PlanToJson(const proto::LoadPlan& plan) {
  nlohmann::json j;
  j["version"] = plan.version();
  j["model_dir"] = Printable(plan.model_dir());  // valid UTF-8, or dump() would throw
  j["model_type"] = plan.model_type();
  j["family"] = plan.family();
  j["format"] = plan.format();
  j["vision_tensors"] = plan.vision_tensors();
  j["layout"] = Layout(plan.layout());
  j["alignment"] = plan.alignment();
  j["source_tensors"] = plan.source_tensors();
  j["source_bytes"] = plan.source_bytes();
  j["dedup"] = plan.dedup() == proto::DEDUP_NODE  ? "node"
               : plan.dedup() == proto::DEDUP_JOB ? "job"
                                                  : "none";
  j["storage_bytes"] = plan.storage_bytes();
  if (const PackedTotals p = Packed(plan); p.tensors > 0) {
    j["packed"] = {
        {"tensors", p.tensors}, {"logical_bytes", p.logical}, {"stored_bytes", p.stored}};
  }
  const auto& t = plan.topology();
  j["topology"] = {{"world", t.world()},
                   {"tp", t.tp()},
                   {"dp", t.dp()},
                   {"ep", t.ep()},
                   {"placement", std::string(NameOfEnum(kPlacementNames, t.placement()))},
                   {"nodes", t.nodes()}};
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : plan.files()) {
    files.push_back({{"path", Printable(f.path())},
                     {"size", f.size()},
                     {"mtime_ns", f.mtime_ns()},
                     {"data_start", f.data_start()}});
  }
  j["files"] = std::move(files);
  nlohmann::json ranks = nlohmann::json::array();
  std::uint64_t tensors = 0, bytes = 0, copies = 0, fills = 0;
  std::vector<RankSummary> summaries;
  for (const RankRow& r : Rows(plan, &summaries)) {
    const RankSummary& s = *r.s;
    ranks.push_back({{"rank", r.rank},
                     {"node", r.node},
                     {"gpu", r.gpu},
                     {"tp_rank", r.tp_rank},
                     {"dp_rank", r.dp_rank},
                     {"tensors", s.tensors},
                     {"bytes", s.bytes},
                     {"arena_bytes", s.arena_bytes},
                     {"copies", s.copies},
                     {"fills", s.fills},
                     {"files", s.files},
                     {"copy_bytes", s.copy_bytes},
                     {"fill_bytes", s.fill_bytes},
                     {"storage_bytes", r.storage}});
    tensors += s.tensors;
    bytes += s.bytes;
    copies += s.copies;
    fills += s.fills;
  }
  j["ranks"] = std::move(ranks);
  j["totals"] = {{"tensors", tensors}, {"bytes", bytes}, {"copies", copies}, {"fills", fills}};
  return j;
}

}  // namespace hoist::planner
