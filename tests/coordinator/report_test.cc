#include "coordinator/report.h"

#include <gtest/gtest.h>

#include <set>

namespace hoist::coordinator {
namespace {

proto::RankReport MakeReport(std::uint32_t rank, std::uint32_t node, double read_s, double total_s,
                             std::uint64_t bytes) {
  proto::RankReport r;
  r.set_rank(rank);
  r.set_node(node);
  r.set_host("host" + std::to_string(node));
  r.set_ok(true);
  r.set_bytes_h2d(bytes);
  r.set_bytes_read(bytes);
  r.set_bytes_resident_at_start(bytes / 2);
  r.set_device("host");
  auto add = [&](const char* name, double start, double s, std::uint64_t b) {
    proto::Phase* p = r.add_phases();
    p->set_name(name);
    p->set_start_s(start);
    p->set_seconds(s);
    p->set_busy_s(s);
    p->set_bytes(b);
  };
  add("read", 0.01, read_s, bytes);
  add("total", 0.0, total_s, bytes);
  proto::Span* s = r.add_spans();
  s->set_lane("fill-0");
  s->set_what("fill");
  s->set_start_s(0.01);
  s->set_seconds(read_s / 2);
  s->set_bytes(bytes / 2);
  s = r.add_spans();
  s->set_lane("h2d-0");
  s->set_what("h2d slot 0");
  s->set_start_s(0.02);
  s->set_seconds(read_s / 3);
  s->set_bytes(bytes / 2);
  return r;
}

std::vector<proto::RankReport> FourRanks() {
  // read times 0.4, 0.1, 0.3, 0.2 -> min 0.1, median 0.25, max 0.4 on rank 0.
  return {MakeReport(0, 0, 0.4, 0.5, 1000), MakeReport(1, 0, 0.1, 0.2, 2000),
          MakeReport(2, 1, 0.3, 0.35, 3000), MakeReport(3, 1, 0.2, 0.9, 4000)};
}

const PhaseStats* Find(const Aggregate& a, const std::string& name) {
  for (const auto& p : a.phases) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

TEST(Aggregate, MinMedianMaxAndSlowestRank) {
  const Aggregate a = AggregateReports(FourRanks(), 1.25);
  const PhaseStats* read = Find(a, "read");
  ASSERT_NE(read, nullptr);
  EXPECT_EQ(read->ranks, 4);
  EXPECT_DOUBLE_EQ(read->min_s, 0.1);
  EXPECT_DOUBLE_EQ(read->median_s, 0.25);
  EXPECT_DOUBLE_EQ(read->max_s, 0.4);
  EXPECT_EQ(read->slowest_rank, 0u);
  EXPECT_EQ(read->bytes, 10000u);
  const PhaseStats* total = Find(a, "total");
  ASSERT_NE(total, nullptr);
  EXPECT_EQ(total->slowest_rank, 3u);
  EXPECT_EQ(Find(a, "verify"), nullptr);  // nobody reported it
  EXPECT_EQ(a.payload_bytes, 10000u);
  EXPECT_EQ(a.bytes_resident_at_start, 5000u);
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.failed, 0);
}

TEST(Aggregate, CountsFailures) {
  auto reports = FourRanks();
  reports[2].set_ok(false);
  reports[2].set_error("IoError: boom");
  const Aggregate a = AggregateReports(reports, 1.0);
  EXPECT_EQ(a.failed, 1);
  proto::LoadPlan plan;
  const std::string table = FormatTable(plan, reports, a);
  EXPECT_NE(table.find("FAILED: IoError: boom"), std::string::npos) << table;
}

TEST(Report, JsonHasEveryRankAndPhase) {
  const auto reports = FourRanks();
  proto::LoadPlan plan;
  plan.mutable_topology()->set_world(4);
  plan.mutable_topology()->set_tp(4);
  const nlohmann::json j = ReportJson(plan, reports, AggregateReports(reports, 1.0));
  const nlohmann::json round = nlohmann::json::parse(j.dump());
  ASSERT_EQ(round["ranks"].size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(round["ranks"][r]["rank"], r);
    EXPECT_TRUE(round["ranks"][r]["phases"].contains("read"));
    EXPECT_TRUE(round["ranks"][r]["phases"].contains("total"));
  }
  EXPECT_EQ(round["world"], 4);
  EXPECT_EQ(round["phases"][0]["phase"], "read");
}

TEST(Report, ChromeTraceHasLanesPerRank) {
  const auto reports = FourRanks();
  const nlohmann::json t = nlohmann::json::parse(ChromeTrace(reports).dump());
  std::set<int> pids;
  std::set<std::string> lanes;
  int complete = 0;
  for (const auto& e : t["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"]);
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(complete, 4 * 3);  // read phase + two spans per rank ("total" is not an event)
  EXPECT_TRUE(lanes.count("fill-0"));
  EXPECT_TRUE(lanes.count("h2d-0"));
}

TEST(Report, PrometheusLines) {
  const auto reports = FourRanks();
  const std::string text = PrometheusText(reports, AggregateReports(reports, 2.5));
  EXPECT_NE(text.find("hoist_phase_seconds{phase=\"read\",rank=\"3\",node=\"1\"} 0.2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("hoist_bytes_total{rank=\"1\"} 2000\n"), std::string::npos);
  EXPECT_NE(text.find("hoist_job_seconds 2.5\n"), std::string::npos);
  // Every non-comment line is `name{labels} value` or `name value`.
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.rfind("hoist_", 0), 0u) << line;
    EXPECT_NE(line.find(' '), std::string::npos) << line;
  }
}

TEST(Report, TimelineSvgDrawsEveryLaneToScale) {
  const auto reports = FourRanks();
  const std::string svg = TimelineSvg(reports);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(svg.find("rank " + std::to_string(r) + " fill-0"), std::string::npos);
    EXPECT_NE(svg.find("rank " + std::to_string(r) + " h2d-0"), std::string::npos);
  }
  // One box (a rect with a title) per span; read/h2d phases are drawn as lanes, total not at all.
  std::size_t boxes = 0;
  for (std::size_t p = svg.find("\"><title>"); p != std::string::npos;
       p = svg.find("\"><title>", p + 1)) {
    ++boxes;
  }
  EXPECT_EQ(boxes, 4u * 2);
}

TEST(Report, TimelineStacksOverlappingPhasesAndSortsLanesNaturally) {
  proto::RankReport r = MakeReport(0, 0, 0.2, 0.5, 100);
  auto add = [&](const char* name, double start, double s) {
    proto::Phase* p = r.add_phases();
    p->set_name(name);
    p->set_start_s(start);
    p->set_seconds(s);
  };
  add("device_init", 0.0, 0.3);
  add("residency", 0.05, 0.1);  // overlaps device_init: needs its own row
  add("arena_alloc", 0.3, 0.01);
  for (const char* lane : {"fill-10", "fill-9", "fill-2"}) {
    proto::Span* s = r.add_spans();
    s->set_lane(lane);
    s->set_what("fill");
    s->set_start_s(0.31);
    s->set_seconds(0.01);
  }
  const std::string svg = TimelineSvg({r});
  // Two phase rows: the first labelled, the second (residency) not.
  const std::size_t device_init = svg.find("<title>device_init");
  const std::size_t residency = svg.find("<title>residency");
  ASSERT_NE(device_init, std::string::npos);
  ASSERT_NE(residency, std::string::npos);
  auto y_of = [&](std::size_t title_pos) {
    const std::size_t rect = svg.rfind("<rect", title_pos);
    const std::size_t y = svg.find(" y=\"", rect) + 4;
    return std::stoi(svg.substr(y, svg.find('"', y) - y));
  };
  EXPECT_NE(y_of(device_init), y_of(residency));
  EXPECT_EQ(y_of(device_init), y_of(svg.find("<title>arena_alloc")));
  const std::size_t f2 = svg.find(">rank 0 fill-2<");
  const std::size_t f9 = svg.find(">rank 0 fill-9<");
  const std::size_t f10 = svg.find(">rank 0 fill-10<");
  ASSERT_NE(f2, std::string::npos);
  EXPECT_LT(f2, f9);
  EXPECT_LT(f9, f10);
}

}  // namespace
}  // namespace hoist::coordinator
