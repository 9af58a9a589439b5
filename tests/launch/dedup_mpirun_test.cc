// End-to-end dedup: `mpirun --oversubscribe -np 4 hoist load --dedup none|node|job` on the host
// backend with the MPI peer, two nodes of two ranks declared in
// examples/topologies/two-nodes-dedup.yaml. tp 2 x ep 4 (dp 2) and ep 4 loads of qwen3-moe-tiny and
// deepseek-v3-tiny must be byte-identical to dedup none and to the independent reference, and the
// report must prove that each needed byte was read from storage once per node (node) or once per
// job (job): per node, the ranks' bytes_read_from_storage add up to the size of the union of the
// source bytes the node's ranks need, counted byte by byte from the plain plan here. Failures under
// dedup (a rank that fails before the exchange, one killed mid-exchange, one that errors
// mid-exchange, one killed after it) end the job within a bounded time with a message naming the
// rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "tests/launch/mpirun_util.h"
#include "tests/reference/reference.h"
#include "tests/test_paths.h"
#include "tools/mkckpt.h"

namespace fs = std::filesystem;
using hoist::testing::ReadDump;
using hoist::testing::RunCommand;
using hoist::testing::RunResult;

namespace {

std::string Hoist() { return hoist::testing::HoistBin(); }
std::string Topology() {
  return (fs::path(hoist::testing::SourceDir()) / "examples" / "topologies" /
          "two-nodes-dedup.yaml")
      .string();
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Shape {
  const char* preset;
  int tp, ep;
  int dp = 0;  // with ep 0: tp x dp = 4 (replicas of each tp rank; job dedup stripes them)
};

class DedupMpirunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(
        hoist::testing::MakeFixtures("hoist-dedup", {"qwen3-moe-tiny", "deepseek-v3-tiny"}, 23));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  static fs::path Model(const char* preset) { return *root_ / preset; }

  std::vector<std::string> Argv(const Shape& s, const std::string& dedup, const fs::path& out,
                                std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"mpirun",      "--oversubscribe",
                                     "-np",         "4",
                                     Hoist(),       "load",
                                     "--topology",  Topology(),
                                     "--model",     Model(s.preset).string(),
                                     "--tp",        std::to_string(s.tp),
                                     "--ep",        std::to_string(s.ep),
                                     "--dedup",     dedup,
                                     "--device",    "host",
                                     "--slots",     "3",
                                     "--slot-mib",  "1",
                                     "--threads",   "2",
                                     "--log-level", "warn"};
    if (s.ep == 0) argv.insert(argv.end(), {"--dp", std::to_string(s.dp)});
    if (!out.empty()) {
      argv.insert(argv.end(), {"--dump", out.string(), "--verify", "--report-json",
                               (out / "report.json").string()});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // Bytes of the union of source ranges the ranks of each node (or of the job: key 0) need,
  // counted byte by byte from the plain plan's copies.
  static std::map<std::uint32_t, std::uint64_t> UnionBytes(const Shape& s, bool per_node) {
    hoist::Result<hoist::planner::Checkpoint> ckpt =
        hoist::planner::OpenCheckpoint(Model(s.preset).string());
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    hoist::planner::PlanOptions o;
    o.tp = s.tp;
    o.ep = s.ep;
    o.dp = s.ep > 0 ? 1 : s.dp;
    o.locations = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    hoist::Result<hoist::proto::LoadPlan> plan = hoist::planner::BuildLoadPlan(*ckpt, o);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    std::map<std::uint32_t, std::vector<std::vector<bool>>> need;
    for (const auto& rp : plan->ranks()) {
      auto& files = need[per_node ? rp.node() : 0];
      if (files.empty()) {
        for (const auto& f : plan->files()) files.emplace_back(f.size(), false);
      }
      for (const auto& c : rp.copies()) {
        for (std::uint64_t i = 0; i < c.rows(); ++i) {
          const std::uint64_t at = c.src_offset() + (c.rows() > 1 ? i * c.src_pitch() : 0);
          for (std::uint64_t k = 0; k < c.width(); ++k) files[c.file()][at + k] = true;
        }
      }
    }
    std::map<std::uint32_t, std::uint64_t> out;
    for (const auto& [g, files] : need) {
      for (const auto& f : files)
        out[g] += static_cast<std::uint64_t>(std::count(f.begin(), f.end(), true));
    }
    return out;
  }

  // Loads with none, node and job; checks dumps and reports.
  void Check(const Shape& s) {
    const std::string name =
        std::string(s.preset) + "-tp" + std::to_string(s.tp) + "-ep" + std::to_string(s.ep);
    std::map<std::string, nlohmann::json> reports;
    for (const std::string dedup : {"none", "node", "job"}) {
      SCOPED_TRACE(name + " dedup " + dedup);
      const fs::path out = *root_ / (name + "-" + dedup);
      fs::remove_all(out);
      fs::create_directories(out);
      // Small exchange steps: many groups in flight while the pipeline reads on.
      const RunResult r = RunCommand(Argv(s, dedup, out, {"--dedup-step-kib", "64"}), 240);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      std::uint64_t payload = 0;  // every rank's tensors, however their bytes arrived
      for (int rank = 0; rank < 4; ++rank) {
        hoist::testref::RefOptions ref{.tp = s.tp, .ep = s.ep, .rank = rank};
        const auto want = hoist::testref::ReferenceRankTensors(Model(s.preset).string(), ref);
        const fs::path dump = out / ("rank-" + std::to_string(rank) + ".safetensors");
        const auto got = ReadDump(dump);
        ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
        for (const auto& [tname, w] : want) {
          payload += w.data.size();
          auto it = got.find(tname);
          ASSERT_NE(it, got.end()) << "rank " << rank << " lacks " << tname;
          EXPECT_EQ(it->second.shape, w.shape) << tname;
          EXPECT_TRUE(it->second.data == w.data) << "rank " << rank << " " << tname << " differs";
        }
        if (dedup != "none") {
          const fs::path plain = *root_ / (name + "-none") / dump.filename();
          EXPECT_TRUE(Slurp(dump) == Slurp(plain)) << dump << " differs from dedup none";
        }
      }
      std::ifstream rj(out / "report.json");
      reports[dedup] = nlohmann::json::parse(rj);
      // One payload figure whatever the dedup mode (README, "The byte figures").
      EXPECT_EQ(reports[dedup]["payload_bytes"].get<std::uint64_t>(), payload);
    }

    const auto& none = reports["none"];
    for (const std::string dedup : {"node", "job"}) {
      SCOPED_TRACE(name + " dedup " + dedup);
      const auto& rep = reports[dedup];
      EXPECT_EQ(rep["dedup"], dedup);
      const std::map<std::uint32_t, std::uint64_t> want = UnionBytes(s, dedup == "node");
      std::map<std::uint32_t, std::uint64_t> storage;
      std::uint64_t sent = 0, received = 0;
      for (int rank = 0; rank < 4; ++rank) {
        const auto& jr = rep["ranks"][rank];
        EXPECT_TRUE(jr["ok"].get<bool>());
        EXPECT_TRUE(jr["verified"].get<bool>()) << "rank " << rank;
        EXPECT_EQ(jr["peer"], "mpi");
        ASSERT_TRUE(jr["phases"].contains("peer")) << "rank " << rank;
        const auto mine = jr["bytes_read_from_storage"].get<std::uint64_t>();
        const auto got = jr["bytes_received"].get<std::uint64_t>();
        EXPECT_EQ(jr["phases"]["peer"]["bytes"].get<std::uint64_t>(),
                  jr["bytes_sent"].get<std::uint64_t>() + got);
        // The pipeline read exactly the planned share; share + received = everything it holds.
        EXPECT_EQ(jr["bytes_read"].get<std::uint64_t>(), mine) << "rank " << rank;
        EXPECT_EQ(mine + got, none["ranks"][rank]["bytes_read_from_storage"].get<std::uint64_t>())
            << "rank " << rank;
        storage[dedup == "node" ? jr["node"].get<std::uint32_t>() : 0] += mine;
        sent += jr["bytes_sent"].get<std::uint64_t>();
        received += got;
      }
      EXPECT_EQ(storage, want) << "storage bytes per group differ from the union of needed bytes";
      EXPECT_EQ(sent, received);
      EXPECT_GT(sent, 0u);
      EXPECT_EQ(rep["bytes_sent"].get<std::uint64_t>(), sent);
    }
    EXPECT_LT(reports["job"]["bytes_read_from_storage"].get<std::uint64_t>(),
              reports["node"]["bytes_read_from_storage"].get<std::uint64_t>());
    EXPECT_LT(reports["node"]["bytes_read_from_storage"].get<std::uint64_t>(),
              none["bytes_read_from_storage"].get<std::uint64_t>());
  }

  static fs::path* root_;
};

fs::path* DedupMpirunTest::root_ = nullptr;

TEST_F(DedupMpirunTest, QwenMoeTp2Ep4) { Check({"qwen3-moe-tiny", 2, 4}); }
TEST_F(DedupMpirunTest, QwenMoeEp4) { Check({"qwen3-moe-tiny", 1, 4}); }
TEST_F(DedupMpirunTest, DeepSeekTp2Ep4) { Check({"deepseek-v3-tiny", 2, 4}); }
TEST_F(DedupMpirunTest, DeepSeekEp4) { Check({"deepseek-v3-tiny", 1, 4}); }
// Replicas (ep off): job dedup stripes each tp rank's bytes over its replicas by chunk and
// forwards them (planner/job_dedup.h): tp 2 x dp 2 (two replicas a class, one a node), and tp 1 x
// dp 4 (one class, four replicas).
TEST_F(DedupMpirunTest, DeepSeekTp2Dp2) { Check({"deepseek-v3-tiny", 2, 0, 2}); }
TEST_F(DedupMpirunTest, QwenMoeTp1Dp4) { Check({"qwen3-moe-tiny", 1, 0, 4}); }

// A rank that fails before the exchange: rank 0's stop order stops the others, every rank
// reports, and the job names the rank that failed (not the ones that stopped for it).
TEST_F(DedupMpirunTest, ARankThatFailsBeforeTheExchangeIsNamed) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r =
      RunCommand(Argv({"deepseek-v3-tiny", 1, 4}, "job", {}, {"--inject-fail-rank", "2"}), 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("hoist: error: IoError: rank 2 on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("injected failure"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped because rank 2 failed"), std::string::npos) << r.output;
}

// Every "load failed" line of a rank other than `culprit` says it stopped because of a peer.
void ExpectOthersBlameAPeer(const std::string& output, int culprit) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find("load failed:") == std::string::npos) continue;
    if (line.find("[rank " + std::to_string(culprit) + " ") != std::string::npos) continue;
    EXPECT_NE(line.find("a peer failed, stalled or died"), std::string::npos) << line;
  }
}

// A rank whose transport fails mid-exchange (its transfers abandoned): the job fails naming it,
// within a bounded time; its peers either completed or timed out blaming a peer.
TEST_F(DedupMpirunTest, ARankThatErrorsMidExchangeFailsTheJobInBoundedTime) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r = RunCommand(Argv({"qwen3-moe-tiny", 1, 4}, "node", {},
                                      {"--inject-peer-fault", "error:1", "--peer-timeout-s", "3"}),
                                 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  // The job fails with the failed rank's own code (an I/O error of its transport).
  EXPECT_NE(r.output.find("hoist: error: IoError: rank 1 on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("injected peer failure"), std::string::npos) << r.output;
  ExpectOthersBlameAPeer(r.output, 1);
}

// A rank that stalls mid-exchange (alive, but not moving its transfers): its node peer gives up
// after --peer-timeout-s, naming the transfers it still expects from the stalled rank, and the
// job fails instead of hanging.
TEST_F(DedupMpirunTest, ARankThatStallsMidExchangeTimesOutItsPeer) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r = RunCommand(Argv({"qwen3-moe-tiny", 1, 4}, "node", {},
                                      {"--inject-peer-fault", "stall:1", "--peer-timeout-s", "2"}),
                                 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("stalling mid-exchange"), std::string::npos) << r.output;
  // The job's error (rank 0 reports) is the timeout, naming the stalled rank's transfers.
  const std::size_t at = r.output.find("hoist: error: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string error = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(error.find("timed out after 2.0 s"), std::string::npos) << error;
  EXPECT_NE(error.find("from rank 1 at arena offset"), std::string::npos) << error;
}

// A rank killed mid-exchange, and one killed after it: mpirun ends the job, naming the rank.
TEST_F(DedupMpirunTest, ARankKilledMidExchangeStopsTheJob) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r = RunCommand(
      Argv({"deepseek-v3-tiny", 2, 4}, "job", {}, {"--inject-peer-fault", "kill:1"}), 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("killing this rank mid-exchange"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
}

TEST_F(DedupMpirunTest, ARankKilledAfterTheExchangeStopsTheJob) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r =
      RunCommand(Argv({"qwen3-moe-tiny", 2, 4}, "job", {}, {"--inject-kill-rank", "3"}), 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("rank 3"), std::string::npos) << r.output;
}

}  // namespace
