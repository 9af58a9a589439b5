#include "coordinator/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "coordinator/limit.h"
#include "transport/timing/span_log.h"
#include "util/printable.h"
#include "util/units.h"

namespace hoist::coordinator {
namespace {

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Ms(double s) { return Fmt("%.1f", s * 1e3); }

using transport::FindPhase;
using transport::Phase;

// Whether a reported phase (by wire name) is `phase`.
bool Is(const proto::Phase& p, Phase phase) { return p.name() == transport::PhaseName(phase); }

// Printable (XML 1.0 forbids most control characters) and XML-escaped.
std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : Printable(s)) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A Prometheus label value: printable, with '\\' and '"' escaped as the text format wants.
std::string PromLabel(const std::string& s) {
  std::string out;
  for (char c : Printable(s)) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

// rank="R",node="N",host="H": the labels every per-rank series carries.
std::string RankLabels(const proto::RankReport& r) {
  return "rank=\"" + std::to_string(r.rank()) + "\",node=\"" + std::to_string(r.node()) +
         "\",host=\"" + PromLabel(r.host()) + "\"";
}

// The bytes a rank put in its arena: its total phase's (a packed load moves fewer, compressed,
// bytes across the link than it loads: bytes_h2d), or bytes_h2d when it has no total phase.
std::uint64_t LoadedBytes(const proto::RankReport& r) {
  const proto::Phase* total = FindPhase(r, Phase::kTotal);
  return total != nullptr && total->bytes() > 0 ? total->bytes() : r.bytes_h2d();
}

// ", ring 4 x 16.00 MiB" (", deep for cold reads" when widened), or "" without a ring.
std::string RingText(const proto::RankReport& r) {
  if (r.staging_slots() == 0) return "";
  return ", ring " + std::to_string(r.staging_slots()) + " x " +
         HumanBytes(r.staging_slot_bytes()) + (r.deep_read() ? " (deep: a cold load)" : "");
}

}  // namespace

void AlignClocks(std::vector<proto::RankReport>* reports) {
  double earliest = 0;
  for (const auto& r : *reports) {
    if (r.origin_epoch_s() > 0 && (earliest == 0 || r.origin_epoch_s() < earliest)) {
      earliest = r.origin_epoch_s();
    }
  }
  for (auto& r : *reports) {
    r.set_clock_offset_s(r.origin_epoch_s() > 0 ? r.origin_epoch_s() - earliest : 0);
  }
}

Aggregate AggregateReports(const std::vector<proto::RankReport>& reports, double wall_s) {
  Aggregate agg;
  agg.wall_s = wall_s;
  agg.ranks = static_cast<int>(reports.size());
  std::set<std::uint32_t> nodes;
  for (const auto& r : reports) {
    if (!r.ok()) ++agg.failed;
    nodes.insert(r.node());
    agg.payload_bytes += LoadedBytes(r);
    agg.bytes_read += r.bytes_read();
    agg.bytes_resident_at_start += r.bytes_resident_at_start();
  }
  agg.nodes = static_cast<int>(nodes.size());
  for (const Phase phase : transport::AllPhases()) {
    if (!transport::PhaseInLoadReport(phase)) continue;
    std::vector<std::pair<double, std::uint32_t>> v;
    PhaseStats ps;
    ps.phase = phase;
    ps.name = std::string(transport::PhaseName(phase));
    for (const auto& r : reports) {
      if (const proto::Phase* p = FindPhase(r, phase)) {
        v.emplace_back(p->seconds(), r.rank());
        ps.bytes += p->bytes();
      }
    }
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    ps.ranks = static_cast<int>(v.size());
    ps.min_s = v.front().first;
    ps.max_s = v.back().first;
    ps.slowest_rank = v.back().second;
    ps.median_s = v.size() % 2 ? v[v.size() / 2].first
                               : (v[v.size() / 2 - 1].first + v[v.size() / 2].first) / 2;
    agg.phases.push_back(ps);
  }
  return agg;
}

namespace {

// The rank's limit (coordinator/limit.h) as the JSON report gives it.
nlohmann::json LimitJson(const LoadLimit& l) {
  return {{"kind", LimitName(l.limit)},           {"largest_phase", l.largest_phase},
          {"largest_phase_s", l.largest_phase_s}, {"engine_busy", l.engine_busy},
          {"engine_idle_s", l.engine_idle_s},     {"fill_busy", l.fill_busy},
          {"fill_threads", l.fill_threads},       {"resident", l.resident}};
}

}  // namespace

std::string FormatTable(const proto::LoadPlan& plan, const std::vector<proto::RankReport>& reports,
                        const Aggregate& agg) {
  std::ostringstream os;
  os << "hoist load: " << Printable(plan.model_dir()) << "  world " << plan.topology().world()
     << " (tp " << plan.topology().tp() << " x dp " << plan.topology().dp();
  if (plan.topology().ep() > 0) os << ", ep " << plan.topology().ep();
  os << ")  layout " << (plan.layout() == proto::LAYOUT_HF ? "hf" : "fused") << "  nodes "
     << agg.nodes;
  if (plan.dedup() != proto::DEDUP_NONE) {
    os << "  dedup " << (plan.dedup() == proto::DEDUP_NODE ? "node" : "job");
  }
  os << "\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-14s %6s %10s %10s %10s %8s %12s\n", "phase", "ranks",
                "min ms", "median ms", "max ms", "slowest", "rate(max)");
  os << line;
  for (const auto& p : agg.phases) {
    // A rate only where the phase moves bytes (allocation and free phases carry sizes, not flow).
    std::string rate = "";
    if (transport::PhaseMovesBytes(p.phase) && p.bytes > 0 && p.max_s > 0 && p.ranks > 0) {
      rate = HumanRate(static_cast<double>(p.bytes) / p.ranks / p.max_s);
    }
    std::snprintf(line, sizeof(line), "%-14s %6d %10s %10s %10s %8u %12s\n",
                  Printable(p.name).c_str(), p.ranks, Ms(p.min_s).c_str(), Ms(p.median_s).c_str(),
                  Ms(p.max_s).c_str(), p.slowest_rank, rate.c_str());
    os << line;
  }
  // Per node, then per rank.
  std::map<std::uint32_t, std::vector<const proto::RankReport*>> by_node;
  for (const auto& r : reports) by_node[r.node()].push_back(&r);
  for (const auto& [node, rs] : by_node) {
    os << "node " << node << ":\n";
    for (const proto::RankReport* r : rs) {
      const proto::Phase* total = FindPhase(*r, Phase::kTotal);
      const double t = total ? total->seconds() : 0;
      const double bytes = static_cast<double>(LoadedBytes(*r));
      std::snprintf(line, sizeof(line),
                    "  rank %-4u %-12s %-8s %12s in %8s ms = %12s  hot %5.1f%%  ", r->rank(),
                    Printable(r->host()).c_str(), Printable(r->device()).c_str(),
                    HumanBytes(LoadedBytes(*r)).c_str(), Ms(t).c_str(),
                    HumanRate(t > 0 ? bytes / t : 0.0).c_str(),
                    r->bytes_read() ? 100.0 * static_cast<double>(r->bytes_resident_at_start()) /
                                          static_cast<double>(r->bytes_read())
                                    : 0.0);
      os << line << (r->ok() ? "ok" : "FAILED: " + Printable(r->error())) << "\n";
      // Packed: its blocks were decoded (a plain load's fills, device memsets, move fewer bytes
      // than its arena holds too, and are no packing).
      if (FindPhase(*r, Phase::kDecode) != nullptr && r->bytes_h2d() > 0) {
        os << "            packed: " << HumanBytes(r->bytes_h2d())
           << " moved to the device and decoded there\n";
      }
      if (!r->cpus().empty()) {
        os << "            cpus " << Printable(r->cpus()) << " (" << r->cpu_bind() << "), "
           << r->fill_threads() << (r->fill_threads() == 1 ? " fill thread" : " fill threads")
           << RingText(*r) << "\n";
      }
      if (const std::string limit = LimitText(LimitOf(*r)); !limit.empty()) {
        os << "            " << limit << "\n";
      }
      if (plan.dedup() != proto::DEDUP_NONE) {
        std::snprintf(line, sizeof(line), "            from storage %12s, sent %12s, received %12s",
                      HumanBytes(r->bytes_read_from_storage()).c_str(),
                      HumanBytes(r->bytes_sent()).c_str(), HumanBytes(r->bytes_received()).c_str());
        os << line << (r->peer().empty() ? "" : " via " + Printable(r->peer())) << "\n";
      }
    }
  }
  const double payload = static_cast<double>(agg.payload_bytes);
  os << "total: " << HumanBytes(agg.payload_bytes) << " over " << agg.ranks << " ranks in "
     << Ms(agg.wall_s) << " ms wall = " << HumanRate(agg.wall_s > 0 ? payload / agg.wall_s : 0)
     << "\n";
  return os.str();
}

namespace {

// Per host, in the order of its first rank: its ranks and their bytes read from storage, sent
// and received (so a job across hosts shows what each host read and forwarded).
nlohmann::json HostsJson(const std::vector<proto::RankReport>& reports) {
  struct Host {
    std::vector<std::uint32_t> ranks;
    std::uint64_t storage = 0, sent = 0, received = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Host> hosts;
  for (const proto::RankReport& r : reports) {
    const std::string name = Printable(r.host());
    if (!hosts.count(name)) order.push_back(name);
    Host& h = hosts[name];
    h.ranks.push_back(r.rank());
    h.storage += r.bytes_read_from_storage();
    h.sent += r.bytes_sent();
    h.received += r.bytes_received();
  }
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& name : order) {
    const Host& h = hosts[name];
    out.push_back({{"host", name},
                   {"ranks", h.ranks},
                   {"bytes_read_from_storage", h.storage},
                   {"bytes_sent", h.sent},
                   {"bytes_received", h.received}});
  }
  return out;
}

}  // namespace

nlohmann::json ReportJson(const proto::LoadPlan& plan,
                          const std::vector<proto::RankReport>& reports, const Aggregate& agg) {
  nlohmann::json j;
  j["model_dir"] = Printable(plan.model_dir());
  j["world"] = plan.topology().world();
  j["tp"] = plan.topology().tp();
  j["dp"] = plan.topology().dp();
  j["ep"] = plan.topology().ep();
  j["layout"] = plan.layout() == proto::LAYOUT_HF ? "hf" : "fused";
  j["wall_s"] = agg.wall_s;
  j["payload_bytes"] = agg.payload_bytes;
  j["bytes_read"] = agg.bytes_read;
  j["bytes_resident_at_start"] = agg.bytes_resident_at_start;
  j["dedup"] = plan.dedup() == proto::DEDUP_NODE  ? "node"
               : plan.dedup() == proto::DEDUP_JOB ? "job"
                                                  : "none";
  j["dedup_reason"] = plan.dedup_reason();
  const nlohmann::json hosts = HostsJson(reports);
  for (const char* key : {"bytes_read_from_storage", "bytes_sent", "bytes_received"}) {
    std::uint64_t sum = 0;
    for (const nlohmann::json& h : hosts) sum += h[key].get<std::uint64_t>();
    j[key] = sum;
  }
  j["ranks_failed"] = agg.failed;
  j["nodes"] = agg.nodes;
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : agg.phases) {
    phases.push_back({{"phase", p.name},
                      {"ranks", p.ranks},
                      {"min_s", p.min_s},
                      {"median_s", p.median_s},
                      {"max_s", p.max_s},
                      {"slowest_rank", p.slowest_rank},
                      {"bytes", p.bytes}});
  }
  j["phases"] = phases;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : reports) {
    nlohmann::json jr;
    jr["rank"] = r.rank();
    jr["host"] = Printable(r.host());
    jr["node"] = r.node();
    jr["gpu"] = r.gpu();
    jr["ok"] = r.ok();
    jr["error"] = Printable(r.error());
    jr["device"] = Printable(r.device());
    jr["read_mode"] = Printable(r.read_mode());
    jr["bytes_read"] = r.bytes_read();
    jr["bytes_h2d"] = r.bytes_h2d();
    jr["bytes_resident_at_start"] = r.bytes_resident_at_start();
    jr["header_opens"] = r.header_opens();
    jr["limit"] = LimitJson(LimitOf(r));
    jr["bytes_read_from_storage"] = r.bytes_read_from_storage();
    jr["bytes_sent"] = r.bytes_sent();
    jr["bytes_received"] = r.bytes_received();
    jr["peer"] = Printable(r.peer());
    jr["verified"] = r.verified();
    jr["cpus"] = r.cpus();
    jr["fill_threads"] = r.fill_threads();
    jr["staging_slots"] = r.staging_slots();
    jr["staging_slot_bytes"] = r.staging_slot_bytes();
    jr["deep_read"] = r.deep_read();
    jr["cpu_bind"] = r.cpu_bind();
    jr["stopped_by"] = r.stopped_by();
    jr["origin_epoch_s"] = r.origin_epoch_s();
    nlohmann::json ph = nlohmann::json::object();
    for (const auto& p : r.phases()) {
      ph[p.name()] = {{"start_s", p.start_s()},
                      {"seconds", p.seconds()},
                      {"busy_s", p.busy_s()},
                      {"bytes", p.bytes()}};
    }
    jr["phases"] = ph;
    ranks.push_back(jr);
  }
  j["ranks"] = ranks;
  j["hosts"] = hosts;
  return j;
}

namespace {

// A report's spans; none when its table is malformed (the control loop refuses such a report
// on arrival, so this is only a report built elsewhere, e.g. by a test).
transport::SpanLog SpansOf(const proto::RankReport& r) {
  Result<transport::SpanLog> spans = transport::SpanLog::FromProto(r.spans());
  return spans.ok() ? std::move(*spans) : transport::SpanLog();
}

}  // namespace

nlohmann::json ChromeTrace(const std::vector<proto::RankReport>& reports) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& r : reports) {
    const int pid = static_cast<int>(r.rank());
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"name", "process_name"},
                      {"args",
                       {{"name", "rank " + std::to_string(r.rank()) + " (" + Printable(r.host()) +
                                     ", node " + std::to_string(r.node()) + ")"}}}});
    std::map<std::string, int> tids{{"phases", 0}};
    auto tid_of = [&](const std::string& lane) {
      auto it = tids.find(lane);
      if (it != tids.end()) return it->second;
      int tid = static_cast<int>(tids.size());
      tids[lane] = tid;
      return tid;
    };
    const double offset = r.clock_offset_s();
    for (const auto& p : r.phases()) {
      if (Is(p, Phase::kTotal)) continue;
      events.push_back({{"ph", "X"},
                        {"pid", pid},
                        {"tid", 0},
                        {"name", Printable(p.name())},
                        {"ts", (p.start_s() + offset) * 1e6},
                        {"dur", p.seconds() * 1e6},
                        {"args", {{"bytes", p.bytes()}, {"busy_s", p.busy_s()}}}});
    }
    const transport::SpanLog spans = SpansOf(r);
    for (const transport::Span& s : spans) {
      events.push_back({{"ph", "X"},
                        {"pid", pid},
                        {"tid", tid_of(spans.LaneName(s))},
                        {"name", Printable(spans.What(s))},
                        {"ts", (s.start_s + offset) * 1e6},
                        {"dur", s.seconds * 1e6},
                        {"args", {{"bytes", s.bytes}}}});
    }
    for (const auto& [lane, tid] : tids) {
      events.push_back({{"ph", "M"},
                        {"pid", pid},
                        {"tid", tid},
                        {"name", "thread_name"},
                        {"args", {{"name", Printable(lane)}}}});
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

std::string PrometheusText(const std::vector<proto::RankReport>& reports, const Aggregate& agg) {
  // Every series carries the same rank, node and host labels (phase series add `phase`), so any
  // two can be joined or grouped alike. The job's wall time is rank 0's.
  std::ostringstream os;
  auto series = [&os](const char* name, const char* help, const char* type, auto&& each) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    each();
  };
  series("hoist_phase_seconds", "Wall time of one load phase on one rank.", "gauge", [&] {
    for (const auto& r : reports) {
      for (const auto& p : r.phases()) {
        os << "hoist_phase_seconds{phase=\"" << PromLabel(p.name()) << "\"," << RankLabels(r)
           << "} " << Fmt("%.9g", p.seconds()) << "\n";
      }
    }
  });
  series("hoist_phase_bytes", "Bytes moved by one load phase on one rank.", "gauge", [&] {
    for (const auto& r : reports) {
      for (const auto& p : r.phases()) {
        if (p.bytes() == 0) continue;
        os << "hoist_phase_bytes{phase=\"" << PromLabel(p.name()) << "\"," << RankLabels(r) << "} "
           << p.bytes() << "\n";
      }
    }
  });
  series("hoist_bytes_total", "Bytes copied into device memory.", "counter", [&] {
    for (const auto& r : reports) {
      os << "hoist_bytes_total{" << RankLabels(r) << "} " << r.bytes_h2d() << "\n";
    }
  });
  series("hoist_bytes_read_total", "Bytes read from storage or page cache.", "counter", [&] {
    for (const auto& r : reports) {
      os << "hoist_bytes_read_total{" << RankLabels(r) << "} " << r.bytes_read() << "\n";
    }
  });
  series("hoist_rank_ok", "1 when the rank's load succeeded.", "gauge", [&] {
    for (const auto& r : reports) {
      os << "hoist_rank_ok{" << RankLabels(r) << "} " << (r.ok() ? 1 : 0) << "\n";
    }
  });
  series("hoist_job_seconds", "Job wall time, measured on rank 0.", "gauge", [&] {
    proto::RankReport rank0;  // rank 0's labels (node and host empty if it did not report)
    for (const auto& r : reports) {
      if (r.rank() == 0) rank0 = r;
    }
    os << "hoist_job_seconds{" << RankLabels(rank0) << "} " << Fmt("%.9g", agg.wall_s) << "\n";
  });
  return os.str();
}

namespace {

// "fill-10" after "fill-9": lanes sort by prefix, then by their numeric suffix.
bool LaneLess(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    std::size_t i = s.size();
    while (i > 0 && std::isdigit(static_cast<unsigned char>(s[i - 1]))) --i;
    const long n = i < s.size() ? std::stol(s.substr(i)) : -1;
    return std::make_pair(s.substr(0, i), n);
  };
  return split(a) < split(b);
}

struct Box {
  double start, dur;
  std::string what;
  std::uint64_t bytes;
};

struct Row {
  std::string label;
  std::vector<Box> boxes;
  bool phases = false;
};

// One rank's phases (not total, read or h2d, which its spans show), packed into as few rows as
// overlap allows (e.g. residency during device_init goes to a second row). Extends *t_end.
std::vector<Row> PhaseRows(const proto::RankReport& r, const std::string& rank, double* t_end) {
  const double off = r.clock_offset_s();
  std::vector<Box> phases;
  for (const auto& p : r.phases()) {
    if (Is(p, Phase::kTotal) || Is(p, Phase::kRead) || Is(p, Phase::kH2d) || p.seconds() <= 0) {
      continue;
    }
    phases.push_back({p.start_s() + off, p.seconds(), p.name(), p.bytes()});
    *t_end = std::max(*t_end, p.start_s() + off + p.seconds());
  }
  std::sort(phases.begin(), phases.end(),
            [](const Box& a, const Box& b) { return a.start < b.start; });
  std::vector<Row> phase_rows;
  for (const Box& b : phases) {
    Row* fit = nullptr;
    for (Row& row : phase_rows) {
      const Box& last = row.boxes.back();
      if (last.start + last.dur <= b.start + 1e-9) {
        fit = &row;
        break;
      }
    }
    if (fit == nullptr) {
      phase_rows.push_back(Row{phase_rows.empty() ? rank + " phases" : "", {}, true});
      fit = &phase_rows.back();
    }
    fit->boxes.push_back(b);
  }
  return phase_rows;
}

// Rows: for each rank, its phases, then one row per span lane: fill threads, then DMA streams.
// *t_end: the end of the last box (1 ms when there is none).
std::vector<Row> TimelineRows(const std::vector<proto::RankReport>& reports, double* t_end) {
  std::vector<Row> rows;
  *t_end = 0;
  for (const auto& r : reports) {
    const double off = r.clock_offset_s();
    const std::string rank = "rank " + std::to_string(r.rank());
    for (Row& row : PhaseRows(r, rank, t_end)) rows.push_back(std::move(row));
    std::map<std::string, Row, decltype(&LaneLess)> lanes(&LaneLess);
    const transport::SpanLog spans = SpansOf(r);
    for (const transport::Span& s : spans) {
      const std::string& lane = spans.LaneName(s);
      Row& row = lanes[lane];
      row.label = rank + " " + lane;
      row.boxes.push_back({s.start_s + off, s.seconds, spans.What(s), s.bytes});
      *t_end = std::max(*t_end, s.start_s + off + s.seconds);
    }
    for (auto& [lane, row] : lanes) rows.push_back(std::move(row));
  }
  if (*t_end <= 0) *t_end = 1e-3;
  return rows;
}

// Geometry: a label column, the plot, and a right margin wide enough for the last axis label
// (centred on its tick); below the rows the axis labels, then the legend.
struct SvgGeometry {
  static constexpr int kLabelW = 170, kPlotW = 1000, kRightW = 60, kRowH = 18, kTop = 30;
  static constexpr int kNoteH = 14;  // a line under the legend (the ranks' limits)
  SvgGeometry(std::size_t rows, std::size_t notes, double t_end)
      : axis_y(kTop + static_cast<int>(rows) * kRowH + 12),
        legend_y(axis_y + 24),
        width(kLabelW + kPlotW + kRightW),
        height(legend_y + 14 + static_cast<int>(notes) * kNoteH),
        scale(kPlotW / t_end) {}
  int axis_y, legend_y, width, height;
  double scale;
};

// Span lanes: DMA streams and fill threads; phases: their kind's colour (transport/timing/phase.h).
constexpr std::string_view kH2dColor = "#3b7dd8", kFillColor = "#e8a33d", kDecodeColor = "#d63384",
                           kSubmitColor = "#6c757d";

std::string_view BoxColor(const std::string& what, const std::string& label) {
  // The set-up's steps ("decoder started" among them) and the tear-down take the setup phase's
  // colour.
  const auto ends_with = [&label](std::string_view tail) {
    return label.size() >= tail.size() &&
           label.compare(label.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with(" setup") || ends_with(" teardown")) return transport::PhaseColor(Phase::kSetup);
  if (label.find("h2d") != std::string::npos || what.rfind("h2d", 0) == 0) return kH2dColor;
  if (label.find("fill") != std::string::npos || what.rfind("fill", 0) == 0) return kFillColor;
  if (label.find("decode") != std::string::npos || what.rfind("decode", 0) == 0) {
    return kDecodeColor;  // packed loads: blocks decoded on the device
  }
  if (label.find("submit") != std::string::npos) return kSubmitColor;  // a slot's copies enqueued
  return transport::PhaseColor(what);
}

void SvgRow(std::ostringstream& os, const Row& row, int y, double scale) {
  using G = SvgGeometry;
  os << "<text x=\"4\" y=\"" << y + 13 << "\">" << XmlEscape(row.label) << "</text>\n";
  os << "<line x1=\"" << G::kLabelW << "\" y1=\"" << y + G::kRowH - 1 << "\" x2=\""
     << G::kLabelW + G::kPlotW << "\" y2=\"" << y + G::kRowH - 1 << "\" stroke=\"#eee\"/>\n";
  for (const Box& b : row.boxes) {
    const double x = G::kLabelW + b.start * scale;
    const double w = std::max(0.5, b.dur * scale);
    os << "<rect x=\"" << Fmt("%.2f", x) << "\" y=\"" << y + 2 << "\" width=\"" << Fmt("%.2f", w)
       << "\" height=\"" << G::kRowH - 5 << "\" fill=\"" << BoxColor(b.what, row.label)
       << "\"><title>" << XmlEscape(b.what) << " " << Ms(b.dur) << " ms " << b.bytes
       << " B</title></rect>\n";
    if (row.phases && w > 7.0 * static_cast<double>(b.what.size())) {
      os << "<text x=\"" << Fmt("%.1f", x + 3) << "\" y=\"" << y + 12
         << "\" fill=\"white\" font-size=\"10\">" << XmlEscape(b.what) << "</text>\n";
    }
  }
}

// Time axis: labels centred on their ticks, the unit left of the first.
void SvgAxis(std::ostringstream& os, const SvgGeometry& g, double t_end) {
  using G = SvgGeometry;
  os << "<text x=\"" << G::kLabelW - 22 << "\" y=\"" << g.axis_y + 6
     << "\" text-anchor=\"end\">ms</text>\n";
  for (int k = 0; k <= 10; ++k) {
    const double t = t_end * k / 10;
    const double x = G::kLabelW + t * g.scale;
    os << "<line x1=\"" << Fmt("%.1f", x) << "\" y1=\"" << G::kTop << "\" x2=\"" << Fmt("%.1f", x)
       << "\" y2=\"" << g.axis_y - 8 << "\" stroke=\"#ddd\"/>\n"
       << "<text x=\"" << Fmt("%.1f", x) << "\" y=\"" << g.axis_y + 6
       << "\" text-anchor=\"middle\">" << Ms(t) << "</text>\n";
  }
}

void SvgLegend(std::ostringstream& os, int ly) {
  int lx = SvgGeometry::kLabelW;
  for (const auto& [name, col] : std::vector<std::pair<std::string, std::string_view>>{
           {"device_init", transport::PhaseColor(Phase::kDeviceInit)},
           {"plan/init", transport::PhaseColor(Phase::kPlan)},
           {"alloc/free", transport::PhaseColor(Phase::kArenaAlloc)},
           {"prepare/setup/bind/drain", transport::PhaseColor(Phase::kResidency)},
           {"fill", kFillColor},
           {"h2d", kH2dColor},
           {"decode", kDecodeColor},
           {"submit", kSubmitColor},
           {"verify/dump", transport::PhaseColor(Phase::kVerify)},
           {"peer", transport::PhaseColor(Phase::kPeer)}}) {
    os << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\""
       << col << "\"/><text x=\"" << lx + 14 << "\" y=\"" << ly << "\">" << name << "</text>\n";
    lx += 24 + 7 * static_cast<int>(name.size());
  }
}

// What limited each rank (coordinator/limit.h), a line per rank, at most kMaxLimitNotes lines.
constexpr std::size_t kMaxLimitNotes = 16;
std::vector<std::string> LimitNotes(const std::vector<proto::RankReport>& reports) {
  std::vector<std::string> notes;
  for (const proto::RankReport& r : reports) {
    if (const std::string t = LimitText(LimitOf(r)); !t.empty()) {
      notes.push_back("rank " + std::to_string(r.rank()) + " " + t);
    }
  }
  if (notes.size() <= kMaxLimitNotes) return notes;
  const std::size_t more = notes.size() - (kMaxLimitNotes - 1);
  notes.resize(kMaxLimitNotes - 1);
  notes.push_back("... and " + std::to_string(more) + " more ranks: see the report's table");
  return notes;
}

}  // namespace

std::string TimelineSvg(const std::vector<proto::RankReport>& reports) {
  double t_end = 0;
  const std::vector<Row> rows = TimelineRows(reports, &t_end);
  const std::vector<std::string> notes = LimitNotes(reports);
  const SvgGeometry g(rows.size(), notes.size(), t_end);
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << g.width << "\" height=\""
     << g.height << "\" viewBox=\"0 0 " << g.width << " " << g.height
     << "\" font-family=\"monospace\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"4\" y=\"16\" font-size=\"13\">hoist load timeline, " << Ms(t_end)
     << " ms from the first rank's start (fill = a thread filling pinned "
        "slots, h2d = DMA of a slot; gaps "
        "in "
        "h2d are DMA bubbles)</text>\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    SvgRow(os, rows[i], SvgGeometry::kTop + static_cast<int>(i) * SvgGeometry::kRowH, g.scale);
  }
  SvgAxis(os, g, t_end);
  SvgLegend(os, g.legend_y);
  for (std::size_t i = 0; i < notes.size(); ++i) {
    os << "<text x=\"4\" y=\"" << g.legend_y + SvgGeometry::kNoteH * static_cast<int>(i + 1)
       << "\">" << XmlEscape(notes[i]) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IoError(path + ": cannot open for writing: " + std::strerror(errno));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return Status::IoError(path + ": write failed");
  return Status::Ok();
}

}  // namespace hoist::coordinator
