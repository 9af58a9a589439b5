// The report's phases follow the one vocabulary (transport/timing/phase.h): its order and names.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "coordinator/report.h"
#include "transport/timing/phase.h"

namespace hoist::coordinator {
namespace {

using transport::Phase;

// A rank that reported every phase, in a shuffled order, with distinct durations.
proto::RankReport ShuffledReport(std::uint32_t rank, unsigned seed) {
  std::vector<Phase> phases(transport::AllPhases().begin(), transport::AllPhases().end());
  std::shuffle(phases.begin(), phases.end(), std::mt19937(seed));
  proto::RankReport r;
  r.set_rank(rank);
  r.set_ok(true);
  r.set_host("h");
  for (std::size_t i = 0; i < phases.size(); ++i) {
    proto::Phase* p = r.add_phases();
    p->set_name(std::string(transport::PhaseName(phases[i])));
    p->set_start_s(static_cast<double>(i));
    p->set_seconds(0.001 * static_cast<double>(i + 1 + rank));
    p->set_bytes(1000 * (i + 1));
  }
  return r;
}

// The load phases, in the enum's order.
std::vector<Phase> LoadPhases() {
  std::vector<Phase> out;
  for (Phase p : transport::AllPhases()) {
    if (transport::PhaseInLoadReport(p)) out.push_back(p);
  }
  return out;
}

TEST(ReportPhaseTest, AggregateListsPhasesInTheEnumsOrder) {
  const std::vector<proto::RankReport> reports = {ShuffledReport(0, 1), ShuffledReport(1, 2)};
  const Aggregate agg = AggregateReports(reports, 1.0);
  const std::vector<Phase> load = LoadPhases();
  ASSERT_EQ(load.size(), 20u);  // init .. total
  ASSERT_EQ(agg.phases.size(), load.size());
  for (std::size_t i = 0; i < agg.phases.size(); ++i) {
    const Phase want = load[i];
    EXPECT_EQ(agg.phases[i].phase, want) << i;
    EXPECT_EQ(agg.phases[i].name, transport::PhaseName(want)) << i;
    EXPECT_EQ(agg.phases[i].ranks, 2) << agg.phases[i].name;
  }
}

TEST(ReportPhaseTest, TableAndJsonRowsFollowTheEnum) {
  const std::vector<proto::RankReport> reports = {ShuffledReport(0, 3)};
  const Aggregate agg = AggregateReports(reports, 1.0);
  proto::LoadPlan plan;
  const std::string table = FormatTable(plan, reports, agg);
  std::size_t at = 0;
  for (Phase p : LoadPhases()) {
    const std::string row = "\n" + std::string(transport::PhaseName(p)) + " ";
    const std::size_t found = table.find(row, at);
    ASSERT_NE(found, std::string::npos) << "row " << row << " missing or out of order:\n" << table;
    at = found + 1;
  }
  const nlohmann::json j = ReportJson(plan, reports, agg);
  const std::vector<Phase> load = LoadPhases();
  ASSERT_EQ(j["phases"].size(), load.size());
  for (std::size_t i = 0; i < load.size(); ++i) {
    EXPECT_EQ(j["phases"][i]["phase"], transport::PhaseName(load[i]));
  }
}

TEST(ReportPhaseTest, UnknownAndAttachPhaseNamesAreLeftOutOfTheAggregate) {
  proto::RankReport r = ShuffledReport(0, 4);  // has connect and map too
  proto::Phase* odd = r.add_phases();
  odd->set_name("warp_drive");
  odd->set_seconds(1);
  const Aggregate agg = AggregateReports({r}, 1.0);
  EXPECT_EQ(agg.phases.size(), LoadPhases().size());
  for (const PhaseStats& p : agg.phases) {
    EXPECT_NE(p.name, "warp_drive");
    EXPECT_NE(p.name, "connect");
    EXPECT_NE(p.name, "map");
  }
}

}  // namespace
}  // namespace hoist::coordinator
