#include "transport/timing/phase.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hoist::transport {
namespace {

TEST(PhaseTest, EveryPhaseHasAUniqueNonEmptyNameThatRoundTrips) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kPhaseCount; ++i) {
    const Phase phase = static_cast<Phase>(i);
    const std::string name(PhaseName(phase));
    EXPECT_FALSE(name.empty()) << i;
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    ASSERT_TRUE(PhaseFromName(name).has_value()) << name;
    EXPECT_EQ(*PhaseFromName(name), phase) << name;
    EXPECT_FALSE(PhaseColor(phase).empty()) << name;
  }
  EXPECT_EQ(names.size(), kPhaseCount);
}

TEST(PhaseTest, OtherStringsAreNoPhase) {
  for (const char* s : {"", "Total", "total ", "h2d-0", "fill", "staging", "peer-init"}) {
    EXPECT_FALSE(PhaseFromName(s).has_value()) << "'" << s << "'";
  }
}

TEST(PhaseTest, AllPhasesIsTheEnumInOrder) {
  const auto& all = AllPhases();
  ASSERT_EQ(all.size(), kPhaseCount);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(static_cast<std::size_t>(all[i]), i);
}

// The wire names are a format (reports of other ranks, --report-json, trace, metrics, bench
// scripts): pin them, in report order, as they were written before the enum existed.
TEST(PhaseTest, WireNamesAndOrderAreTheReportsFormat) {
  const std::vector<std::string> want = {
      "init",         "device_init", "plan",          "prepare",   "bind",   "residency",
      "arena_alloc",  "setup",       "staging_alloc", "read",      "h2d",    "decode",
      "peer_init",    "peer",        "drain",         "transpose", "verify", "dump",
      "staging_free", "total",       "connect",       "map"};
  std::vector<std::string> got;
  for (Phase p : AllPhases()) got.emplace_back(PhaseName(p));
  EXPECT_EQ(got, want);
}

TEST(PhaseTest, TheLoadReportHasEveryPhaseButTheAttachOnes) {
  for (Phase p : AllPhases()) {
    EXPECT_EQ(PhaseInLoadReport(p), p != Phase::kConnect && p != Phase::kMap) << PhaseName(p);
  }
}

TEST(PhaseTest, MovingPhasesAreTheOnesThatCarryFlow) {
  std::set<std::string> moving;
  for (Phase p : AllPhases()) {
    if (PhaseMovesBytes(p)) moving.emplace(PhaseName(p));
  }
  EXPECT_EQ(moving, (std::set<std::string>{"read", "h2d", "decode", "peer", "transpose", "verify",
                                           "dump", "total"}));
}

TEST(PhaseTest, ColorsByKind) {
  EXPECT_EQ(PhaseColor(Phase::kArenaAlloc), PhaseColor(Phase::kStagingFree));
  EXPECT_EQ(PhaseColor(Phase::kVerify), PhaseColor(Phase::kDump));
  EXPECT_EQ(PhaseColor(Phase::kInit), PhaseColor(Phase::kPlan));
  EXPECT_NE(PhaseColor(Phase::kPeer), PhaseColor(Phase::kDeviceInit));
  EXPECT_EQ(PhaseColor("staging_alloc"), PhaseColor(Phase::kStagingAlloc));
  EXPECT_EQ(PhaseColor("no such phase"), PhaseColor(Phase::kDrain));
}

TEST(PhaseTest, FindPhaseGivesTheFirstEntryOfThatNameOrNothing) {
  proto::RankReport r;
  for (const auto& [name, seconds] :
       std::vector<std::pair<std::string, double>>{{"read", 1.5}, {"h2d", 2.5}, {"read", 9.0}}) {
    proto::Phase* p = r.add_phases();
    p->set_name(name);
    p->set_seconds(seconds);
  }
  ASSERT_NE(FindPhase(r, Phase::kRead), nullptr);
  EXPECT_EQ(FindPhase(r, Phase::kRead)->seconds(), 1.5);
  EXPECT_EQ(FindPhase(r, Phase::kH2d)->seconds(), 2.5);
  EXPECT_EQ(FindPhase(r, Phase::kTotal), nullptr);
}

TEST(PhaseRecorderTest, RecordsStartSinceOriginDurationAndBytes) {
  using Clock = PhaseRecorder::Clock;
  const Clock::time_point origin = Clock::now();
  const Clock::time_point a = origin + std::chrono::milliseconds(250);
  const Clock::time_point b = a + std::chrono::milliseconds(1500);
  proto::RankReport report;
  const PhaseRecorder rec(&report, origin);
  rec.Record(Phase::kArenaAlloc, a, b, 4096);
  rec.Record(Phase::kRead, 2.0, 3.0, 5.5, 77);
  rec.Record(Phase::kBind, a, a);

  ASSERT_EQ(report.phases_size(), 3);
  const proto::Phase& alloc = report.phases(0);
  EXPECT_EQ(alloc.name(), "arena_alloc");
  EXPECT_NEAR(alloc.start_s(), 0.25, 1e-9);
  EXPECT_NEAR(alloc.seconds(), 1.5, 1e-9);
  EXPECT_NEAR(alloc.busy_s(), 1.5, 1e-9);
  EXPECT_EQ(alloc.bytes(), 4096u);

  const proto::Phase& read = report.phases(1);
  EXPECT_EQ(read.name(), "read");
  EXPECT_DOUBLE_EQ(read.start_s(), 2.0);
  EXPECT_DOUBLE_EQ(read.seconds(), 3.0);
  EXPECT_DOUBLE_EQ(read.busy_s(), 5.5);
  EXPECT_EQ(read.bytes(), 77u);

  const proto::Phase& bind = report.phases(2);
  EXPECT_EQ(bind.name(), "bind");
  EXPECT_NEAR(bind.start_s(), 0.25, 1e-9);
  EXPECT_EQ(bind.seconds(), 0.0);
  EXPECT_EQ(bind.bytes(), 0u);
  EXPECT_NEAR(rec.SinceOrigin(b), 1.75, 1e-9);
}

}  // namespace
}  // namespace hoist::transport
