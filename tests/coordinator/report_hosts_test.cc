// The report's per-host figures (ReportJson's `hosts`) and the job totals drawn from them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "coordinator/report.h"

namespace hoist::coordinator {
namespace {

proto::RankReport Rank(std::uint32_t rank, const char* host, std::uint64_t read, std::uint64_t sent,
                       std::uint64_t received) {
  proto::RankReport r;
  r.set_rank(rank);
  r.set_host(host);
  r.set_ok(true);
  r.set_bytes_read_from_storage(read);
  r.set_bytes_sent(sent);
  r.set_bytes_received(received);
  return r;
}

TEST(ReportHostsTest, PerHostInOrderOfFirstRankWithTheJobTotals) {
  // mpirun --map-by node: the ranks alternate between the hosts.
  const std::vector<proto::RankReport> reports = {Rank(0, "b", 10, 1, 2), Rank(1, "a", 20, 3, 4),
                                                  Rank(2, "b", 30, 5, 6), Rank(3, "a", 40, 7, 8)};
  const nlohmann::json j = ReportJson(proto::LoadPlan(), reports, AggregateReports(reports, 1.0));
  ASSERT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["hosts"][0]["host"], "b");
  EXPECT_EQ(j["hosts"][0]["ranks"], nlohmann::json({0, 2}));
  EXPECT_EQ(j["hosts"][0]["bytes_read_from_storage"], 40u);
  EXPECT_EQ(j["hosts"][0]["bytes_sent"], 6u);
  EXPECT_EQ(j["hosts"][0]["bytes_received"], 8u);
  EXPECT_EQ(j["hosts"][1]["host"], "a");
  EXPECT_EQ(j["hosts"][1]["ranks"], nlohmann::json({1, 3}));
  EXPECT_EQ(j["hosts"][1]["bytes_read_from_storage"], 60u);
  EXPECT_EQ(j["bytes_read_from_storage"], 100u);
  EXPECT_EQ(j["bytes_sent"], 16u);
  EXPECT_EQ(j["bytes_received"], 20u);
}

}  // namespace
}  // namespace hoist::coordinator
