// End-to-end: `mpirun -np N hoist load` on the host backend, checked byte for byte against the
// independent reference, plus the reports, the one-header-reader rule and failure handling.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

class MpirunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(
        hoist::testing::MakeFixtures("hoist-mpirun", {"qwen3-tiny", "qwen3-moe-tiny"}, 11));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  static fs::path Model(const char* preset) { return *root_ / preset; }
  fs::path Out(const std::string& name) {
    fs::path p = *root_ / name;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }

  // Loads under mpirun with small slots and checks every rank's dump against the reference.
  void LoadAndCompare(int np, const char* preset, std::vector<std::string> extra,
                      hoist::testref::RefOptions ref, const std::string& name) {
    const fs::path out = Out(name);
    std::vector<std::string> argv = {"mpirun",
                                     "-np",
                                     std::to_string(np),
                                     Hoist(),
                                     "load",
                                     "--model",
                                     Model(preset).string(),
                                     "--device",
                                     "host",
                                     "--slots",
                                     "3",
                                     "--slot-mib",
                                     "1",
                                     "--threads",
                                     "2",
                                     "--dump",
                                     out.string(),
                                     "--verify",
                                     "--report-json",
                                     (out / "report.json").string(),
                                     "--trace",
                                     (out / "trace.json").string(),
                                     "--timeline",
                                     (out / "timeline.svg").string(),
                                     "--metrics",
                                     (out / "metrics.prom").string(),
                                     "--log-level",
                                     "warn"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const RunResult r = RunCommand(argv, 240);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    hoist::testing::ExpectDumpsMatchReference(out, np, Model(preset).string(), ref);
    // Reports: every rank and phase; only rank 0 opened headers.
    std::ifstream rj(out / "report.json");
    const nlohmann::json report = nlohmann::json::parse(rj);
    ASSERT_EQ(report["ranks"].size(), static_cast<std::size_t>(np));
    for (int rank = 0; rank < np; ++rank) {
      const auto& jr = report["ranks"][rank];
      EXPECT_EQ(jr["rank"], rank);
      EXPECT_TRUE(jr["ok"].get<bool>());
      EXPECT_TRUE(jr["verified"].get<bool>()) << "rank " << rank;
      for (const char* phase :
           {"init", "plan", "arena_alloc", "staging_alloc", "read", "h2d", "verify", "total"}) {
        EXPECT_TRUE(jr["phases"].contains(phase)) << "rank " << rank << " lacks " << phase;
      }
      if (rank == 0) {
        EXPECT_GT(jr["header_opens"].get<int>(), 0);
      } else {
        EXPECT_EQ(jr["header_opens"].get<int>(), 0) << "rank " << rank << " opened headers";
      }
    }
    std::ifstream tj(out / "trace.json");
    const nlohmann::json trace = nlohmann::json::parse(tj);
    std::set<int> pids;
    for (const auto& e : trace["traceEvents"]) pids.insert(e["pid"].get<int>());
    EXPECT_EQ(pids.size(), static_cast<std::size_t>(np));
    EXPECT_TRUE(fs::file_size(out / "timeline.svg") > 0);
    std::ifstream mp(out / "metrics.prom");
    std::stringstream ms;
    ms << mp.rdbuf();
    EXPECT_NE(ms.str().find("hoist_phase_seconds{phase=\"total\",rank=\"" + std::to_string(np - 1) +
                            "\""),
              std::string::npos);
  }

  static fs::path* root_;
};

fs::path* MpirunTest::root_ = nullptr;

TEST_F(MpirunTest, OneRank) { LoadAndCompare(1, "qwen3-tiny", {}, {.tp = 1}, "np1"); }

TEST_F(MpirunTest, Tp2HfLayout) {
  LoadAndCompare(2, "qwen3-tiny", {"--tp", "2", "--layout", "hf"}, {.tp = 2, .fused = false},
                 "np2");
}

TEST_F(MpirunTest, Tp4Fused) { LoadAndCompare(4, "qwen3-tiny", {"--tp", "4"}, {.tp = 4}, "tp4"); }

TEST_F(MpirunTest, Ep4) {
  LoadAndCompare(4, "qwen3-moe-tiny", {"--ep", "4"}, {.tp = 1, .ep = 4}, "ep4");
}

TEST_F(MpirunTest, Tp2Ep4RoundRobinOnTwoNodes) {
  const fs::path topo = *root_ / "two-nodes.yaml";
  std::ofstream(topo) << "tp: 2\nep: 4\nplacement: round_robin\n"
                         "nodes:\n  - {name: a, gpus: [0, 1]}\n  - {name: b, gpus: [0, 1]}\n";
  LoadAndCompare(4, "qwen3-moe-tiny", {"--topology", topo.string()},
                 {.tp = 2, .ep = 4, .round_robin = true}, "tp2ep4");
  std::ifstream rj(*root_ / "tp2ep4" / "report.json");
  const nlohmann::json report = nlohmann::json::parse(rj);
  EXPECT_EQ(report["nodes"], 2);
  EXPECT_EQ(report["ranks"][2]["node"], 1);
  EXPECT_EQ(report["ranks"][3]["gpu"], 1);
}

TEST_F(MpirunTest, RankZeroShowsProgressOverAllRanks) {
  const std::vector<std::string> base = {
      "mpirun", "-np", "2",        Hoist(), "load", "--model", Model("qwen3-tiny").string(),
      "--tp",   "2",   "--device", "host"};
  const RunResult r = RunCommand(base, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Not a terminal: log lines, the last one at 100% of both ranks' bytes, from rank 0 only.
  EXPECT_NE(r.output.find("(100%) over 2 ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", done"), std::string::npos) << r.output;
  std::istringstream lines(r.output);
  int progress_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("progress:") == std::string::npos) continue;
    ++progress_lines;
    EXPECT_NE(line.find("[rank 0 "), std::string::npos) << "progress from another rank: " << line;
  }
  EXPECT_GE(progress_lines, 1);
  std::vector<std::string> quiet = base;
  quiet.push_back("--no-progress");
  const RunResult q = RunCommand(quiet, 120);
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(q.output.find("progress:"), std::string::npos) << q.output;
}

TEST_F(MpirunTest, WorldMismatchIsAClearError) {
  const RunResult r = RunCommand({"mpirun", "-np", "3", Hoist(), "load", "--model",
                                  Model("qwen3-tiny").string(), "--tp", "2", "--device", "host"},
                                 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, -1) << "hung";
  EXPECT_NE(r.output.find("the plan needs 2 ranks (tp 2 x dp 1) but mpirun started 3 processes"),
            std::string::npos)
      << r.output;
}

TEST_F(MpirunTest, ARankThatFailsStopsTheJobWithItsName) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r =
      RunCommand({"mpirun", "-np", "4", Hoist(), "load", "--model", Model("qwen3-tiny").string(),
                  "--tp", "4", "--device", "host", "--inject-fail-rank", "2"},
                 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("rank 2 on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("injected failure"), std::string::npos) << r.output;
}

TEST_F(MpirunTest, ARankThatIsKilledStopsTheJob) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r =
      RunCommand({"mpirun", "-np", "4", Hoist(), "load", "--model", Model("qwen3-tiny").string(),
                  "--tp", "4", "--device", "host", "--inject-kill-rank", "1"},
                 120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
}

TEST_F(MpirunTest, BadModelFailsEveryRank) {
  const RunResult r =
      RunCommand({"mpirun", "-np", "2", Hoist(), "load", "--model",
                  (*root_ / "no-such-model").string(), "--tp", "2", "--device", "host"},
                 120);
  EXPECT_NE(r.exit_code, -1) << "hung";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no-such-model"), std::string::npos) << r.output;
}

// hoist owns its CPU placement: whatever Open MPI bound (--bind-to core pins each rank to one
// core), each rank's fill threads run on its share of the machine's cores, reported per rank.
std::vector<int> ParseCpuList(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    const std::size_t dash = part.find('-');
    const int lo = std::stoi(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

std::vector<int> MachineCpus() {
  std::vector<int> all;
  for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c) {
    all.push_back(static_cast<int>(c));
  }
  return all;
}

TEST_F(MpirunTest, OneRankBoundToACoreStillUsesEveryCore) {
  const fs::path out = Out("cpus-np1");
  const RunResult r = RunCommand({"mpirun", "-np", "1", "--bind-to", "core", Hoist(), "load",
                                  "--model", Model("qwen3-tiny").string(), "--device", "host",
                                  "--report-json", (out / "r.json").string()},
                                 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream rj(out / "r.json");
  const nlohmann::json report = nlohmann::json::parse(rj);
  const auto& rank = report["ranks"][0];
  EXPECT_EQ(rank["cpu_bind"], "auto");
  EXPECT_EQ(ParseCpuList(rank["cpus"].get<std::string>()), MachineCpus()) << rank["cpus"];
  EXPECT_GE(rank["fill_threads"].get<int>(), 1);
  EXPECT_LE(rank["fill_threads"].get<std::size_t>(), MachineCpus().size());
}

TEST_F(MpirunTest, TwoRanksBoundToCoresShareTheMachineDisjointly) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two cores";
  const fs::path out = Out("cpus-np2");
  const RunResult r = RunCommand({"mpirun", "-np", "2", "--bind-to", "core", Hoist(), "load",
                                  "--model", Model("qwen3-tiny").string(), "--tp", "2", "--device",
                                  "host", "--report-json", (out / "r.json").string()},
                                 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream rj(out / "r.json");
  const nlohmann::json report = nlohmann::json::parse(rj);
  std::vector<int> seen;
  for (const auto& rank : report["ranks"]) {
    const std::vector<int> cpus = ParseCpuList(rank["cpus"].get<std::string>());
    ASSERT_FALSE(cpus.empty());
    EXPECT_EQ(rank["fill_threads"].get<std::size_t>(), cpus.size()) << rank;
    seen.insert(seen.end(), cpus.begin(), cpus.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end()) << "overlapping cpus";
  EXPECT_EQ(seen, MachineCpus());
  // The text table names them too.
  EXPECT_NE(r.output.find(" fill thread"), std::string::npos) << r.output;
}

TEST_F(MpirunTest, LauncherModeKeepsTheLaunchersBinding) {
  const fs::path out = Out("cpus-launcher");
  const RunResult r =
      RunCommand({"mpirun", "-np", "1", "--bind-to", "core", Hoist(), "load", "--model",
                  Model("qwen3-tiny").string(), "--device", "host", "--cpu-bind", "launcher",
                  "--report-json", (out / "r.json").string()},
                 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream rj(out / "r.json");
  const nlohmann::json report = nlohmann::json::parse(rj);
  EXPECT_EQ(report["ranks"][0]["cpu_bind"], "launcher");
  EXPECT_EQ(ParseCpuList(report["ranks"][0]["cpus"].get<std::string>()).size(), 1u)
      << report["ranks"][0]["cpus"];
}

// A rank that stops (SIGSTOP: a hung NFS read or a frozen host looks like this) cannot hang the
// job: rank 0 hears nothing from it for --peer-timeout-s, names it, and ends the job.
TEST_F(MpirunTest, AStoppedRankIsNamedAndTheJobEnds) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r = RunCommand(
      {"mpirun", "-np", "2", Hoist(), "load", "--model", Model("qwen3-tiny").string(), "--tp", "2",
       "--device", "host", "--peer-timeout-s", "3", "--inject-stop-rank", "1"},
      120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("hoist: error: Aborted: rank 1 on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("it stopped, hung or died"), std::string::npos) << r.output;
}

TEST_F(MpirunTest, AStoppedRankZeroIsNamedByTheOthers) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r = RunCommand(
      {"mpirun", "-np", "2", Hoist(), "load", "--model", Model("qwen3-tiny").string(), "--tp", "2",
       "--device", "host", "--peer-timeout-s", "3", "--inject-stop-rank", "0"},
      120);
  EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.output.find("rank 0 on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" sent nothing for "), std::string::npos) << r.output;
}

// Four ranks, two replicas with node dedup (so the stopped rank is also someone's peer), with
// and without the progress display: the job still ends within the peer timeout plus a few
// seconds naming the stopped rank, and no hoist process of the job is left behind.
TEST_F(MpirunTest, AStoppedRankOfFourWithDedupIsNamedAndNothingIsLeft) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  for (const bool progress : {false, true}) {
    const fs::path out = Out(progress ? "stop4-progress" : "stop4-quiet") / "report.json";
    std::vector<std::string> cmd = {"mpirun",
                                    "-np",
                                    "4",
                                    Hoist(),
                                    "load",
                                    "--model",
                                    Model("qwen3-tiny").string(),
                                    "--tp",
                                    "2",
                                    "--dp",
                                    "2",
                                    "--dedup",
                                    "node",
                                    "--device",
                                    "host",
                                    "--peer-timeout-s",
                                    "3",
                                    "--inject-stop-rank",
                                    "2",
                                    "--report-json",
                                    out.string()};
    if (!progress) cmd.push_back("--no-progress");
    const RunResult r = RunCommand(cmd, 120);
    EXPECT_NE(r.exit_code, -1) << "hung: " << r.output;
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_LT(r.seconds, 60) << r.output;
    EXPECT_NE(r.output.find("rank 2 on "), std::string::npos) << r.output;
    // The report path is unique to this run: no hoist process that carries it may remain (the
    // bracket keeps the pattern from matching the shell that runs pgrep).
    // mpirun may return while the kernel is still reaping the killed ranks: allow 10 s.
    const std::string left = "pgrep -f -- 'hois[t] load .*" + out.string() + "' > /dev/null";
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = std::system(left.c_str()) != 0;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(gone) << "a process of the job is still there 10 s after mpirun: " << out;
  }
}

// Without mpirun, a plan of several ranks loads one of them and says so; progress counts only
// that rank's bytes.
TEST_F(MpirunTest, ASoloRankOfALargerPlanSaysSoAndCountsItsOwnBytes) {
  const RunResult r = RunCommand({Hoist(), "load", "--model", Model("qwen3-tiny").string(), "--tp",
                                  "2", "--rank", "1", "--device", "host"},
                                 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loading rank 1 of the plan's 2 alone"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(100%)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", done"), std::string::npos) << r.output;
}

// A rank of another hoist build (another plan format in its hello) is refused by rank 0 before
// any byte is read: every rank exits 2 (a configuration error), and the one message names the
// rank, its host and both formats.
TEST_F(MpirunTest, ARankOfAnotherPlanFormatIsRefusedOnEveryRank) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  for (const std::string format : {"1", "7"}) {  // an older hoist's, a newer one's
    SCOPED_TRACE(format);
    const RunResult r = RunCommand(
        {"mpirun", "-np", "2", Hoist(), "load", "--model", Model("qwen3-tiny").string(), "--tp",
         "2", "--device", "host", "--no-progress", "--inject-plan-format", "1:" + format},
        120);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("rank 1 on "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("whose plan format is " + format +
                            ", rank 0's is 2: every rank of a job must run the same hoist build"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("rank 0 on "), std::string::npos) << "rank 0 agrees with itself";
    EXPECT_EQ(r.output.find(", done"), std::string::npos) << r.output;
  }
}

// A malformed test-hook value is refused (exit 2, the value named) rather than read as a number
// it is not: "1:x" once parsed as format 0, which injects nothing, and the test would pass
// without testing anything.
TEST_F(MpirunTest, AMalformedTestHookValueIsRefused) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--inject-plan-format", "1:x"},
                                                        {"--inject-plan-format", "1:7x"},
                                                        {"--inject-plan-format", "one:7"},
                                                        {"--inject-plan-format", "1"},
                                                        {"--inject-plan-format", "1:-3"},
                                                        {"--inject-peer-fault", "kill:x"},
                                                        {"--inject-peer-fault", "kill:"},
                                                        {"--inject-peer-fault", "boom:1"}}) {
    SCOPED_TRACE(flag + " " + value);
    const RunResult r = RunCommand({Hoist(), "load", "--model", Model("qwen3-tiny").string(),
                                    "--device", "host", "--no-progress", flag, value},
                                   60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(flag + " wants "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("got '" + value + "'"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(", done"), std::string::npos) << r.output;
  }
}

TEST_F(MpirunTest, AFailedLoadNeverSaysDone) {
  HOIST_SKIP_WITHOUT_TEST_HOOKS();
  const RunResult r =
      RunCommand({"mpirun", "-np", "2", Hoist(), "load", "--model", Model("qwen3-tiny").string(),
                  "--tp", "2", "--device", "host", "--inject-fail-rank", "1"},
                 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find(", done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
}

}  // namespace
