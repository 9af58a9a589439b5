// What limited a rank's load, from its phases: each class on a report built by hand, its
// figures checked against the arithmetic done here, and the line the table prints.
#include "coordinator/limit.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coordinator/report.h"

namespace hoist::coordinator {
namespace {

struct Timing {
  double start_s, seconds, busy_s;
};

// A finished rank: total [0, total_s), read and h2d as given, `threads` fill threads, `resident`
// of its 1 GB found in the page cache.
proto::RankReport Rank(double total_s, Timing read, Timing h2d, int threads, double resident) {
  proto::RankReport r;
  r.set_rank(3);
  r.set_ok(true);
  r.set_bytes_read(1000000000);
  r.set_bytes_h2d(1000000000);
  r.set_bytes_resident_at_start(static_cast<std::uint64_t>(resident * 1e9));
  r.set_fill_threads(static_cast<std::uint32_t>(threads));
  auto add = [&](const char* name, Timing t) {
    proto::Phase* p = r.add_phases();
    p->set_name(name);
    p->set_start_s(t.start_s);
    p->set_seconds(t.seconds);
    p->set_busy_s(t.busy_s);
  };
  add("device_init", {-0.25, 0.24, 0.24});  // before the load: never its overhead
  add("arena_alloc", {0.0002, 0.0004, 0.0004});
  add("read", read);
  add("h2d", h2d);
  add("total", {0.0, total_s, total_s});
  return r;
}

TEST(Limit, CopyWhenTheEngineNeverWaits) {
  const LoadLimit l = LimitOf(Rank(0.160, {0.002, 0.155, 1.6}, {0.003, 0.155, 0.1534}, 16, 1.0));
  EXPECT_EQ(l.limit, Limit::kCopy);
  EXPECT_NEAR(l.engine_busy, 0.1534 / 0.155, 1e-12);
  EXPECT_NEAR(l.engine_idle_s, 0.155 - 0.1534, 1e-12);
  EXPECT_NEAR(l.fill_busy, 1.6 / (0.155 * 16), 1e-12);
  EXPECT_EQ(LimitText(l), "limit: copy: the copy engine was busy 99% of its 155.0 ms (the link)");
}

TEST(Limit, FillWhenSaturatedThreadsLeaveTheEngineWaiting) {
  // A tp 2 rank on 8 cores (measured 2026-12-03): the engine busy 77 of 95 ms, the threads 98%
  // busy.
  const LoadLimit l = LimitOf(Rank(0.098, {0.0015, 0.095, 0.745}, {0.0027, 0.095, 0.077}, 8, 1.0));
  EXPECT_EQ(l.limit, Limit::kFill);
  EXPECT_NEAR(l.engine_idle_s, 0.018, 1e-12);
  EXPECT_NEAR(l.fill_busy, 0.745 / (0.095 * 8), 1e-12);
  EXPECT_EQ(LimitText(l),
            "limit: fill: the copy engine waited 18.0 ms (busy 81%) while 8 fill threads worked "
            "98% of the time: more cores per rank would help (--cpu-bind, --threads)");
}

TEST(Limit, StorageWhenTheBytesWereNotCached) {
  const LoadLimit l = LimitOf(Rank(6.0, {0.001, 5.99, 5.99 * 64}, {0.01, 5.98, 0.16}, 64, 0.02));
  EXPECT_EQ(l.limit, Limit::kStorage);
  EXPECT_NEAR(l.resident, 0.02, 1e-12);
  EXPECT_EQ(LimitText(l),
            "limit: storage: 2% of the bytes were in the page cache; the copy engine waited "
            "5820.0 ms for reads");
}

TEST(Limit, HandoffWhenNeitherSideIsSaturated) {
  const LoadLimit l =
      LimitOf(Rank(0.2, {0.001, 0.19, 0.19 * 16 * 0.5}, {0.002, 0.19, 0.152}, 16, 0.9));
  EXPECT_EQ(l.limit, Limit::kHandoff);
  EXPECT_NEAR(l.fill_busy, 0.5, 1e-12);
  EXPECT_EQ(LimitText(l),
            "limit: handoff: the copy engine waited 38.0 ms (busy 80%) while the fill threads "
            "worked only 50% of the time: slots came back from the device late (the trace's "
            "h2d-0 and submit lanes show where)");
}

TEST(Limit, OverheadNamesTheLongestPhaseInsideTheLoad) {
  proto::RankReport r = Rank(0.010, {0.007, 0.002, 0.004}, {0.008, 0.001, 0.001}, 2, 1.0);
  proto::Phase* staging = r.add_phases();
  staging->set_name("staging_alloc");
  staging->set_start_s(0.0006);
  staging->set_seconds(0.006);
  const LoadLimit l = LimitOf(r);
  EXPECT_EQ(l.limit, Limit::kOverhead);
  EXPECT_EQ(l.largest_phase, "staging_alloc");  // not device_init, which ran before the load
  EXPECT_EQ(LimitText(l),
            "limit: overhead: the copies took 1.0 ms of the load's 10.0 ms; the longest other "
            "phase: staging_alloc 6.0 ms");
}

TEST(Limit, ThresholdsBelongToTheClassTheyName) {
  // Just above kCopyBusy is copy; just above kFillBusy is fill, just below it handoff (values
  // exact in binary).
  EXPECT_EQ(LimitOf(Rank(1.0, {0, 0.5, 0.5}, {0, 1.0, 0.96875}, 1, 1.0)).limit, Limit::kCopy);
  EXPECT_EQ(LimitOf(Rank(1.0, {0, 1.0, 0.875}, {0, 1.0, 0.9375}, 1, 1.0)).limit, Limit::kFill);
  EXPECT_EQ(LimitOf(Rank(1.0, {0, 1.0, 0.8125}, {0, 1.0, 0.9375}, 1, 1.0)).limit, Limit::kHandoff);
  // Exactly half the load in copies is not overhead; just under half is.
  EXPECT_NE(LimitOf(Rank(1.0, {0, 0.5, 0.5}, {0, 0.5, 0.5}, 1, 1.0)).limit, Limit::kOverhead);
  EXPECT_EQ(LimitOf(Rank(1.0, {0, 0.5, 0.5}, {0, 0.4375, 0.4375}, 1, 1.0)).limit, Limit::kOverhead);
}

TEST(Limit, NoneWithoutACompletedStagedRead) {
  proto::RankReport failed = Rank(0.1, {0, 0.09, 0.09}, {0, 0.09, 0.09}, 4, 1.0);
  failed.set_ok(false);
  EXPECT_EQ(LimitOf(failed).limit, Limit::kNone);
  EXPECT_EQ(LimitOf(Rank(0.1, {0, 0.09, 0.09}, {0, 0.09, 0.09}, 0, 1.0)).limit, Limit::kNone);
  EXPECT_EQ(LimitOf(Rank(0.1, {0, 0.09, 0.09}, {0, 0.0, 0.0}, 4, 1.0)).limit, Limit::kNone);
  proto::RankReport no_h2d;
  no_h2d.set_ok(true);
  no_h2d.set_fill_threads(4);
  EXPECT_EQ(LimitOf(no_h2d).limit, Limit::kNone);
  EXPECT_EQ(LimitText(LimitOf(no_h2d)), "");
  EXPECT_STREQ(LimitName(Limit::kNone), "none");
}

TEST(Limit, TheTableAndTheJsonGiveIt) {
  proto::LoadPlan plan;
  plan.mutable_topology()->set_world(1);
  plan.mutable_topology()->set_tp(1);
  const std::vector<proto::RankReport> reports = {
      Rank(0.098, {0.0015, 0.095, 0.745}, {0.0027, 0.095, 0.077}, 8, 1.0)};
  const Aggregate agg = AggregateReports(reports, 0.1);
  EXPECT_NE(FormatTable(plan, reports, agg).find("\n            limit: fill: the copy engine"),
            std::string::npos);
  const nlohmann::json j = ReportJson(plan, reports, agg);
  EXPECT_EQ(j["ranks"][0]["limit"]["kind"], "fill");
  EXPECT_EQ(j["ranks"][0]["limit"]["fill_threads"], 8);
  EXPECT_NEAR(j["ranks"][0]["limit"]["engine_idle_s"].get<double>(), 0.018, 1e-12);
}

TEST(Limit, TheTimelineSaysItUnderTheLegendAtMostSixteenLines) {
  std::vector<proto::RankReport> reports;
  for (std::uint32_t rank = 0; rank < 20; ++rank) {
    reports.push_back(Rank(0.098, {0.0015, 0.095, 0.745}, {0.0027, 0.095, 0.077}, 8, 1.0));
    reports.back().set_rank(rank);
  }
  const std::string one = TimelineSvg({reports[0]});
  EXPECT_NE(one.find(">rank 0 limit: fill: the copy engine waited 18.0 ms"), std::string::npos);
  const std::string all = TimelineSvg(reports);
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = all.find(" limit: fill:", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 15u);
  EXPECT_NE(all.find(">rank 14 limit: fill"), std::string::npos);
  EXPECT_EQ(all.find(">rank 15 limit: fill"), std::string::npos);
  EXPECT_NE(all.find(">... and 5 more ranks: see the report's table<"), std::string::npos);
}

}  // namespace
}  // namespace hoist::coordinator
