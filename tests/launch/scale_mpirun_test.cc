// Issue 41's scale: each rank receives its own view of the plan (planner/plan_set.h), so its
// received bytes (the report's `plan` phase) do not grow with the world. Under mpirun on nodes of
// two ranks (a topology), ranks 1-3 receive the same bytes at world 2, 4 and 6, and load what the
// reference says; one rank of a world of 1024 or 2048 runs alone (the others simulated by their
// absence) and receives the same bytes at both; `hoist plan` of DeepSeek-V3-671B (header-only) at
// world 1024 writes the plan it writes at world 256.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proto/plan.pb.h"
#include "tests/launch/mpirun_util.h"
#include "tests/reference/reference.h"
#include "tests/test_paths.h"
#include "tools/mkckpt.h"

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

// `hoist plan --out` on the header-only DeepSeek-V3-671B shape: at world 1024 the plan is the one
// at world 256 (8 rank plans) but for its topology and totals, and it says so on its wire line.
TEST_F(ScaleMpirunTest, HoistPlanOfDeepSeekV3At1024RanksIsItsPlanAt256) {
  const fs::path ckpt = *root_ / "dsv3";
  hoist::tools::MkckptOptions mk;
  mk.preset = "deepseek-v3-671b";
  mk.header_only = true;
  mk.out_dir = ckpt.string();
  mk.threads = 2;
  ASSERT_TRUE(hoist::tools::MakeCheckpoint(mk).ok());
  std::vector<hoist::proto::LoadPlan> plans;
  for (const int dp : {32, 128}) {
    const fs::path out = *root_ / ("dsv3-dp" + std::to_string(dp));
    const RunResult r = RunCommand(
        {hoist::testing::HoistBin(), "plan", "--model", ckpt.string(), "--tp", "8", "--dp",
         std::to_string(dp), "--out", (out.string() + ".pb"), "--json", (out.string() + ".json")},
        240);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("wire: plan "), std::string::npos) << r.output;
    std::ifstream pb(out.string() + ".pb", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(pb)), std::istreambuf_iterator<char>());
    hoist::proto::LoadPlan plan;
    ASSERT_TRUE(plan.ParseFromString(bytes));
    EXPECT_TRUE(plan.compact());
    EXPECT_EQ(plan.ranks_size(), 8);
    EXPECT_EQ(plan.topology().world(), static_cast<std::uint32_t>(8 * dp));
    std::ifstream js(out.string() + ".json");
    const nlohmann::json j = nlohmann::json::parse(js);
    EXPECT_EQ(j["ranks"].size(), static_cast<std::size_t>(8 * dp));
    EXPECT_EQ(j["wire"]["plan_bytes"].get<std::size_t>(), bytes.size());
    EXPECT_LT(j["wire"]["view_bytes_max"].get<std::size_t>(), bytes.size());
    plans.push_back(std::move(plan));
  }
  for (auto& p : plans) {
    p.clear_topology();
    p.clear_storage_bytes();
  }
  EXPECT_TRUE(plans[0].SerializeAsString() == plans[1].SerializeAsString())
      << "the plans at world 256 and 1024 differ beyond topology and totals";

  // --dedup job (issue 41 item 3): planned once per class, so the plan and a rank's view do not
  // grow with the world either (the chunk K and a rank's place aside), and the job still reads
  // each byte once.
  std::vector<nlohmann::json> wire;
  std::vector<hoist::proto::LoadPlan> job;
  for (const int dp : {32, 128}) {
    const fs::path out = *root_ / ("dsv3-job-dp" + std::to_string(dp));
    {  // nodes of 8 GPUs: a view names its node's ranks, not the world's
      std::ofstream yaml(out.string() + ".yaml");
      yaml << "tp: 8\ndp: " << dp << "\nnodes:\n";
      for (int n = 0; n < dp; ++n) {
        yaml << "  - {name: node-" << n << ", gpus: [0, 1, 2, 3, 4, 5, 6, 7]}\n";
      }
    }
    const RunResult r = RunCommand({hoist::testing::HoistBin(), "plan", "--model", ckpt.string(),
                                    "--topology", out.string() + ".yaml", "--dedup", "job", "--out",
                                    (out.string() + ".pb"), "--json", (out.string() + ".json")},
                                   240);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream pb(out.string() + ".pb", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(pb)), std::istreambuf_iterator<char>());
    hoist::proto::LoadPlan plan;
    ASSERT_TRUE(plan.ParseFromString(bytes));
    EXPECT_EQ(plan.dedup(), hoist::proto::DEDUP_JOB);
    EXPECT_EQ(plan.dedup_templates(0).members_size(), 8);
    std::ifstream js(out.string() + ".json");
    wire.push_back(nlohmann::json::parse(js)["wire"]);
    job.push_back(std::move(plan));
  }
  for (const char* key : {"view_bytes_min", "view_bytes_max"}) {
    const auto a = wire[0][key].get<std::int64_t>(), b = wire[1][key].get<std::int64_t>();
    EXPECT_LE(std::abs(a - b), 16) << key;
  }
  EXPECT_EQ(job[0].storage_bytes(), job[1].storage_bytes());
  for (auto& p : job) {
    p.clear_topology();
    p.clear_placement();
    p.mutable_job()->clear_chunk_bytes();
    p.clear_dedup_reason();
  }
  EXPECT_TRUE(job[0].SerializeAsString() == job[1].SerializeAsString())
      << "the job dedup plans at world 256 and 1024 differ beyond topology, placement and K";
}

}  // namespace
