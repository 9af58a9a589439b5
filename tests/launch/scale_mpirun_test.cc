// Issue 41's scale: each rank receives its own view of the plan (planner/plan_set.h), so its
// received bytes (the report's `plan` phase) do not grow with the world. Under mpirun on nodes of
// two ranks (a topology), ranks 1-3 receive the same bytes at world 2, 4 and 6, and load what the
// reference says; one rank of a world of 1024 or 2048 runs alone (the others simulated by their
// absence) and receives the same bytes at both.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/launch/mpirun_util.h"
#include "tests/reference/reference.h"
#include "tests/test_paths.h"

namespace fs = std::filesystem;
using hoist::testing::RunCommand;
using hoist::testing::RunResult;

namespace {

class ScaleMpirunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(hoist::testing::MakeFixtures("hoist-scale", {"qwen3-tiny"}, 41));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string Model() { return (*root_ / "qwen3-tiny").string(); }

  // A topology of `nodes` nodes of two GPUs, tp 2 (dp is the node count).
  static std::string Topology(int nodes) {
    const fs::path p = *root_ / ("nodes-" + std::to_string(nodes) + ".yaml");
    std::ofstream out(p);
    out << "tp: 2\ndp: " << nodes << "\nnodes:\n";
    for (int n = 0; n < nodes; ++n) out << "  - {name: node-" << n << ", gpus: [0, 1]}\n";
    return p.string();
  }

  // Runs `argv` (a launcher, or nothing) + hoist load on `nodes` nodes + `extra`; returns the
  // report.
  static nlohmann::json Load(std::vector<std::string> argv, int nodes, const fs::path& out,
                             const std::vector<std::string>& extra = {}) {
    fs::remove_all(out);
    fs::create_directories(out);
    argv.insert(argv.end(),
                {hoist::testing::HoistBin(), "load", "--topology", Topology(nodes), "--model",
                 Model(), "--device", "host", "--threads", "2", "--log-level", "warn", "--verify",
                 "--dump", out.string(), "--report-json", (out / "report.json").string()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    const RunResult r = RunCommand(argv, 240);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out / "report.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json();
  }

  static std::uint64_t PlanBytes(const nlohmann::json& report, int index) {
    return report["ranks"][index]["phases"]["plan"]["bytes"].get<std::uint64_t>();
  }

  static fs::path* root_;
};

fs::path* ScaleMpirunTest::root_ = nullptr;

TEST_F(ScaleMpirunTest, EachRanksPlanBytesDoNotGrowWithTheWorld) {
  std::map<int, std::vector<std::uint64_t>> received;  // world -> bytes per rank
  for (const int nodes : {1, 2, 3}) {
    const int np = 2 * nodes;
    SCOPED_TRACE("world " + std::to_string(np));
    const fs::path out = *root_ / ("world-" + std::to_string(np));
    const nlohmann::json rep = Load({"mpirun", "-np", std::to_string(np)}, nodes, out);
    ASSERT_EQ(rep["ranks"].size(), static_cast<std::size_t>(np));
    hoist::testing::ExpectDumpsMatchReference(out, np, Model(), {.tp = 2});
    for (int r = 0; r < np; ++r) {
      EXPECT_TRUE(rep["ranks"][r]["verified"].get<bool>()) << "rank " << r;
      received[np].push_back(PlanBytes(rep, r));
    }
  }
  // Rank 0 also holds every rank's host and the progress total; the others only their views.
  for (int r = 1; r < 2; ++r) {
    EXPECT_EQ(received[2][r], received[4][r]) << "rank " << r;
    EXPECT_EQ(received[4][r], received[6][r]) << "rank " << r;
  }
  for (int r = 2; r < 4; ++r) EXPECT_EQ(received[4][r], received[6][r]) << "rank " << r;
  // Ranks of the same tp rank on other nodes receive views of the same size.
  EXPECT_EQ(received[6][3], received[6][5]);
  EXPECT_EQ(received[6][2], received[6][4]);
}

TEST_F(ScaleMpirunTest, OneRankOfAThousandLoadsAloneFromItsView) {
  std::vector<std::uint64_t> received;
  for (const int nodes : {512, 1024}) {
    SCOPED_TRACE("world " + std::to_string(2 * nodes));
    const fs::path out = *root_ / ("alone-" + std::to_string(nodes));
    const nlohmann::json rep = Load({}, nodes, out, {"--rank", "1001"});
    ASSERT_EQ(rep["ranks"].size(), 1u);
    EXPECT_EQ(rep["world"].get<int>(), 2 * nodes);
    EXPECT_EQ(rep["ranks"][0]["rank"].get<int>(), 1001);
    EXPECT_EQ(rep["ranks"][0]["node"].get<int>(), 500);
    EXPECT_TRUE(rep["ranks"][0]["verified"].get<bool>());
    const auto want = hoist::testref::ReferenceRankTensors(Model(), {.tp = 2, .rank = 1001});
    const auto got = hoist::testing::ReadDump(out / "rank-1001.safetensors");
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_TRUE(got.at(name).data == w.data) << name << " differs";
    }
    received.push_back(PlanBytes(rep, 0));
  }
  EXPECT_EQ(received[0], received[1]);
}

}  // namespace
