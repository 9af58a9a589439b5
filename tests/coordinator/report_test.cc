#include "coordinator/report.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "transport/timing/span_log.h"

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
  transport::SpanLog spans;
  spans.Add("fill-0", "fill", 0.01, read_s / 2, bytes / 2);
  spans.Add("h2d-0", "h2d slot 0", 0.02, read_s / 3, bytes / 2);
  spans.AppendTo(r.mutable_spans());
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

// Rank 1 started 0.5 s after rank 0 (and rank 2 without an origin): after AlignClocks the trace
// and the timeline place rank 1's read 0.5 s later, though both logged it 0.01 s after their
// own start.
TEST(Report, RanksStartedAtDifferentTimesShareOneClock) {
  auto reports = FourRanks();
  reports.resize(3);
  reports[0].set_origin_epoch_s(1000.25);
  reports[1].set_origin_epoch_s(1000.75);
  AlignClocks(&reports);
  EXPECT_DOUBLE_EQ(reports[0].clock_offset_s(), 0.0);
  EXPECT_DOUBLE_EQ(reports[1].clock_offset_s(), 0.5);
  EXPECT_DOUBLE_EQ(reports[2].clock_offset_s(), 0.0);
  std::map<int, double> read_ts;
  const nlohmann::json trace = ChromeTrace(reports);
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "read") read_ts[e["pid"].get<int>()] = e["ts"];
  }
  ASSERT_EQ(read_ts.size(), 3u);
  EXPECT_NEAR(read_ts[1] - read_ts[0], 0.5e6, 1);
  EXPECT_NEAR(read_ts[0], 0.01e6, 1);
  // The timeline ends with rank 1's last box: its fill span of 0.05 s from 0.5 + 0.01 s.
  const std::string svg = TimelineSvg(reports);
  EXPECT_NE(svg.find("560.0 ms from the first rank's start"), std::string::npos)
      << svg.substr(0, 400);
}

TEST(Report, PrometheusLines) {
  const auto reports = FourRanks();
  const std::string text = PrometheusText(reports, AggregateReports(reports, 2.5));
  EXPECT_NE(text.find("hoist_phase_seconds{phase=\"read\",rank=\"3\",node=\"1\",host=\"host1\"} "
                      "0.2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("hoist_phase_bytes{phase=\"read\",rank=\"3\",node=\"1\",host=\"host1\"} "
                      "4000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("hoist_bytes_total{rank=\"1\",node=\"0\",host=\"host0\"} 2000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("hoist_rank_ok{rank=\"2\",node=\"1\",host=\"host1\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("hoist_job_seconds{rank=\"0\",node=\"0\",host=\"host0\"} 2.5\n"),
            std::string::npos)
      << text;
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
  transport::SpanLog spans;
  for (const char* lane : {"fill-10", "fill-9", "fill-2"}) spans.Add(lane, "fill", 0.31, 0.01);
  spans.AppendTo(r.mutable_spans());
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

// Every series carries the same rank, node and host labels (phase series add `phase`).
TEST(Report, PrometheusSeriesShareOneLabelSet) {
  const auto reports = FourRanks();
  const std::string text = PrometheusText(reports, AggregateReports(reports, 2.5));
  std::istringstream in(text);
  std::string line;
  std::set<std::string> names;
  int series = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t open = line.find('{'), close = line.find('}');
    ASSERT_NE(open, std::string::npos) << "a series without labels: " << line;
    ASSERT_NE(close, std::string::npos) << line;
    const std::string name = line.substr(0, open);
    names.insert(name);
    std::vector<std::string> keys;
    std::istringstream labels(line.substr(open + 1, close - open - 1));
    for (std::string kv; std::getline(labels, kv, ',');) keys.push_back(kv.substr(0, kv.find('=')));
    std::vector<std::string> want = {"rank", "node", "host"};
    if (name.rfind("hoist_phase_", 0) == 0) want.insert(want.begin(), "phase");
    EXPECT_EQ(keys, want) << line;
    ++series;
  }
  EXPECT_EQ(names, (std::set<std::string>{"hoist_phase_seconds", "hoist_phase_bytes",
                                          "hoist_bytes_total", "hoist_bytes_read_total",
                                          "hoist_rank_ok", "hoist_job_seconds"}));
  EXPECT_EQ(series, 4 * 2 + 4 * 2 + 4 + 4 + 4 + 1);  // 2 phases with bytes per rank
}

// Tiny loads read in B / KiB / MiB, never "0.000 GiB".
TEST(Report, TableAdaptsUnitsToSmallLoads) {
  auto reports = FourRanks();  // 1000 .. 4000 bytes per rank
  reports[3].set_bytes_h2d(3u << 20);
  for (proto::Phase& p : *reports[3].mutable_phases()) {
    if (p.name() == "total") p.set_bytes(3u << 20);
  }
  const Aggregate a = AggregateReports(reports, 0.5);
  const std::string table = FormatTable(proto::LoadPlan(), reports, a);
  EXPECT_EQ(table.find("0.000 GiB"), std::string::npos) << table;
  EXPECT_EQ(table.find("0.00 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("1000 B in"), std::string::npos) << table;
  EXPECT_NE(table.find("1.95 KiB in"), std::string::npos) << table;  // 2000 / 1024
  EXPECT_NE(table.find("3.00 MiB in"), std::string::npos) << table;
  // Rank 1: 2000 B in 0.2 s = 9.77 KiB/s; the job: 3 MiB + 6000 B in 0.5 s.
  EXPECT_NE(table.find("9.77 KiB/s"), std::string::npos) << table;
  EXPECT_NE(table.find("total: 3.01 MiB over 4 ranks in 500.0 ms wall = 6.01 MiB/s"),
            std::string::npos)
      << table;
}

// Names, hosts and errors with control bytes or invalid UTF-8 come out escaped in every writer,
// and the JSON writers do not throw on them.
// A rank's span table with columns of different lengths or indices past its names (a broken or
// mismatched rank) costs that rank its spans in the trace and timeline, never a crash; the other
// ranks' spans stay.
TEST(Report, AMalformedSpanTableLosesItsSpansOnly) {
  auto reports = FourRanks();
  reports[1].mutable_spans()->mutable_seconds()->RemoveLast();  // a short column
  reports[2].mutable_spans()->set_lane(0, 99);                  // a lane it does not name
  const nlohmann::json trace = ChromeTrace(reports);
  std::map<int, int> spans;  // per rank: events off the phases row
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["tid"] != 0) ++spans[e["pid"].get<int>()];
  }
  EXPECT_EQ(spans[0], 2);
  EXPECT_EQ(spans[1], 0);
  EXPECT_EQ(spans[2], 0);
  EXPECT_EQ(spans[3], 2);
  const std::string svg = TimelineSvg(reports);
  EXPECT_NE(svg.find("rank 0 fill-0"), std::string::npos);
  EXPECT_EQ(svg.find("rank 1 fill-0"), std::string::npos);
  EXPECT_NE(svg.find("rank 3 h2d-0"), std::string::npos);
}

TEST(Report, UntrustedStringsAreEscapedInEveryWriter) {
  auto reports = FourRanks();
  reports[1].set_host("evil\x1b[2J\"host\\");
  reports[1].set_ok(false);
  reports[1].set_error("NotFound: tensor 'w\x1b[31m' in /m/\xff\xfe.safetensors");
  reports[2].mutable_spans()->set_lanes(0, "fill-\x07");
  proto::LoadPlan plan;
  plan.set_model_dir("/models/\x1b]0;title\x07");
  const Aggregate a = AggregateReports(reports, 1.0);
  auto clean = [](const std::string& s) {
    for (unsigned char c : s) {
      if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    }
    return true;
  };
  const std::string table = FormatTable(plan, reports, a);
  EXPECT_TRUE(clean(table)) << table;
  EXPECT_NE(table.find("FAILED: NotFound: tensor 'w\\x1B[31m' in /m/\\xFF\\xFE.safetensors"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("/models/\\x1B]0;title\\x07"), std::string::npos) << table;

  std::string json;
  ASSERT_NO_THROW(json = ReportJson(plan, reports, a).dump());
  EXPECT_TRUE(clean(json));
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["ranks"][1]["error"], "NotFound: tensor 'w\\x1B[31m' in /m/\\xFF\\xFE.safetensors");
  std::string trace;
  ASSERT_NO_THROW(trace = ChromeTrace(reports).dump());
  EXPECT_NE(trace.find("evil\\\\x1B[2J"), std::string::npos) << trace;  // JSON-escaped backslash
  EXPECT_NE(trace.find("fill-\\\\x07"), std::string::npos) << trace;

  const std::string svg = TimelineSvg(reports);
  EXPECT_TRUE(clean(svg));
  EXPECT_NE(svg.find(">rank 2 fill-\\x07<"), std::string::npos);

  const std::string prom = PrometheusText(reports, a);
  EXPECT_TRUE(clean(prom));
  // Prometheus label values escape '\\' and '"'; the escape's own backslash doubles too.
  EXPECT_NE(prom.find("hoist_rank_ok{rank=\"1\",node=\"0\",host=\"evil\\\\x1B[2J\\\"host\\\\\"} 0"),
            std::string::npos)
      << prom;
}

// The SVG states its size and viewBox, and every text fits inside it: the last axis label is
// centred on its tick with room to its right (it used to be cut).
TEST(Report, TimelineSvgHasAViewBoxAndRoomForEveryLabel) {
  auto reports = FourRanks();
  reports[3].mutable_spans()->set_seconds(0, 12345.5);  // long axis labels, up to "12345510.0" ms
  const std::string svg = TimelineSvg(reports);
  auto attr = [](const std::string& tag, const std::string& name) {
    const std::size_t at = tag.find(" " + name + "=\"");
    if (at == std::string::npos) return std::string();
    const std::size_t v = at + name.size() + 3;
    return tag.substr(v, tag.find('"', v) - v);
  };
  const std::string head = svg.substr(0, svg.find('>'));
  const double width = std::stod(attr(head, "width")), height = std::stod(attr(head, "height"));
  EXPECT_EQ(attr(head, "viewBox"), "0 0 " + attr(head, "width") + " " + attr(head, "height"));
  int texts = 0, axis_labels = 0;
  std::string last_axis_label;
  for (std::size_t p = svg.find("<text"); p != std::string::npos; p = svg.find("<text", p + 1)) {
    const std::string tag = svg.substr(p, svg.find('>', p) - p);
    const std::size_t body = svg.find('>', p) + 1;
    const std::string content = svg.substr(body, svg.find('<', body) - body);
    const double x = std::stod(attr(tag, "x")), y = std::stod(attr(tag, "y"));
    const std::string size = attr(tag, "font-size");
    // Monospace glyphs are at most 0.62 em wide.
    const double w = 0.62 * (size.empty() ? 11 : std::stod(size)) * content.size();
    const std::string anchor = attr(tag, "text-anchor");
    const double left = anchor == "middle" ? x - w / 2 : anchor == "end" ? x - w : x;
    const double right = left + w;
    EXPECT_GE(left, 0) << tag << ">" << content;
    EXPECT_LE(right, width) << tag << ">" << content;
    EXPECT_LE(y + 4, height) << tag << ">" << content;
    if (anchor == "middle") {
      ++axis_labels;
      last_axis_label = content;
    }
    ++texts;
  }
  EXPECT_GT(texts, 20);
  EXPECT_EQ(axis_labels, 11);  // 0 .. t_end in tenths, each inside the picture (checked above)
  EXPECT_EQ(last_axis_label, "12345510.0");
}

}  // namespace
}  // namespace hoist::coordinator

namespace hoist::coordinator {
namespace {

// A packed load puts more bytes in the arena (its total phase) than it moves to the device
// (bytes_h2d): the table's rank line and the job total count the arena's, and say what moved.
// A plain load whose fills (device memsets) move fewer bytes than its arena holds is no packed
// one: it says nothing (it did, until 2026-12-07, for every checkpoint with a fill).
TEST(Report, PackedLoadsCountTheArenasBytesAndSayWhatMoved) {
  auto reports = FourRanks();
  reports[0].set_bytes_h2d(700);  // its total phase holds 1000
  reports[0].add_phases()->set_name("decode");
  reports[1].set_bytes_h2d(1500);  // 2000 in its arena: 500 filled, not copied
  const Aggregate a = AggregateReports(reports, 0.5);
  EXPECT_EQ(a.payload_bytes, 1000u + 2000u + 3000u + 4000u);
  const std::string table = FormatTable(proto::LoadPlan(), reports, a);
  EXPECT_NE(table.find("1000 B in"), std::string::npos) << table;
  EXPECT_NE(table.find("packed: 700 B moved to the device and decoded there"), std::string::npos)
      << table;
  EXPECT_NE(table.find("1.95 KiB in"), std::string::npos) << table;  // 2000 B
  std::size_t packed_lines = 0;  // rank 0's alone: not rank 1 (fills), nor ranks 2 and 3
  for (std::size_t at = table.find("packed:"); at != std::string::npos;
       at = table.find("packed:", at + 1)) {
    ++packed_lines;
  }
  EXPECT_EQ(packed_lines, 1u) << table;
}

}  // namespace
}  // namespace hoist::coordinator
