// The command line a newcomer meets: exit codes (0 ok, 1 plan/load failure, 2 usage or
// configuration), one "hoist: error:" message in words with the allowed range or the nearest
// command/flag, printed once under mpirun (rank 0), and nothing that waits without a bound.
// Every case runs the real binary under a watchdog and asserts code, message and time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "coordinator/comm.h"
#include "launch/exit_codes.h"
#include "launch/suggest.h"
#include "tests/launch/mpirun_util.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tools/mkckpt.h"

namespace hoist::launch {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;
using testing::RunResult;
using testing::ScratchDir;

constexpr double kBound = 60;  // seconds: every case here ends far sooner

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("hoist-cli");
    tools::MkckptOptions o;
    o.preset = "qwen3-tiny";
    o.out_dir = Model();
    o.seed = 3;
    const Status s = tools::MakeCheckpoint(o);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Model() { return dir_->Sub("qwen3-tiny"); }

  // Runs `hoist ARGS...` and checks that it ended in time.
  static RunResult Hoist(std::vector<std::string> args, double bound = kBound) {
    args.insert(args.begin(), testing::HoistBin());
    RunResult r = RunCommand(args, bound);
    EXPECT_NE(r.exit_code, -1) << "did not end within " << bound << " s: " << r.output;
    return r;
  }
  static RunResult Mpirun(int np, std::vector<std::string> args) {
    args.insert(args.begin(), {"mpirun", "-np", std::to_string(np), testing::HoistBin()});
    RunResult r = RunCommand(args, kBound);
    EXPECT_NE(r.exit_code, -1) << "did not end within " << kBound << " s: " << r.output;
    return r;
  }
  static std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_->Sub(name)) << text;
    return dir_->Sub(name);
  }
  // A usage or configuration error: exit 2 and one "hoist: error:" line containing `message`.
  static void ExpectUsage(const RunResult& r, const std::string& message) {
    EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
    EXPECT_EQ(Count(r.output, "hoist: error: "), 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << "want: " << message << "\n" << r.output;
  }

  static ScratchDir* dir_;
};

ScratchDir* CliTest::dir_ = nullptr;

TEST(ExitCodes, InvalidArgumentIsTwoEveryOtherFailureOne) {
  EXPECT_EQ(ExitCode(Status::Ok()), 0);
  EXPECT_EQ(ExitCode(Status::InvalidArgument("x")), 2);
  for (Code c :
       {Code::kNotFound, Code::kCorrupt, Code::kIoError, Code::kUnsupported,
        Code::kFailedPrecondition, Code::kResourceExhausted, Code::kAborted, Code::kInternal}) {
    EXPECT_EQ(ExitCode(Status(c, "x")), 1) << CodeName(c);
  }
}

TEST(Suggest, NearestByEditDistance) {
  EXPECT_EQ(EditDistance("lod", "load"), 1);
  EXPECT_EQ(EditDistance("--verfy", "--verify"), 1);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  const std::vector<std::string> commands = {"plan", "load", "serve", "ctl"};
  EXPECT_EQ(Nearest("lod", commands), "load");
  EXPECT_EQ(Nearest("srve", commands), "serve");
  EXPECT_EQ(Nearest("xyzzy", commands), "");  // nothing close: no suggestion
  EXPECT_EQ(Nearest("--thraeds", {"--threads", "--tp", "--topology"}), "--threads");
}

// PrintsSharedErrors relies on the launcher's rank before MPI (coordinator/comm.h).
TEST(LauncherEnv, ReadsTheLaunchersVariables) {
  using coordinator::LauncherLocalRank;
  using coordinator::LauncherRank;
  const std::vector<const char*> vars = {
      "OMPI_COMM_WORLD_RANK",       "PMIX_RANK",       "PMI_RANK",       "SLURM_PROCID",
      "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"};
  for (const char* v : vars) ::unsetenv(v);
  EXPECT_EQ(LauncherRank(), -1);
  EXPECT_EQ(LauncherLocalRank(), -1);
  EXPECT_TRUE(PrintsSharedErrors());  // not launched: print
  ::setenv("SLURM_PROCID", "7", 1);
  ::setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(LauncherRank(), 7);
  EXPECT_EQ(LauncherLocalRank(), 3);
  EXPECT_FALSE(PrintsSharedErrors());
  ::setenv("PMI_RANK", "5", 1);
  ::setenv("MPI_LOCALRANKID", "1", 1);
  EXPECT_EQ(LauncherRank(), 5);  // MPICH's before Slurm's
  EXPECT_EQ(LauncherLocalRank(), 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  EXPECT_EQ(LauncherRank(), 0);  // Open MPI's first
  EXPECT_EQ(LauncherLocalRank(), 0);
  EXPECT_TRUE(PrintsSharedErrors());          // rank 0 prints
  ::setenv("OMPI_COMM_WORLD_RANK", "x1", 1);  // not a number: the next variable
  EXPECT_EQ(LauncherRank(), 5);
  for (const char* v : vars) ::unsetenv(v);
}

TEST_F(CliTest, HelpExitsZero) {
  RunResult r = Hoist({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("load"), std::string::npos) << r.output;
  r = Hoist({"load", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tensor-parallel size (1 to 65536; default 1)"), std::string::npos)
      << r.output;
}

TEST_F(CliTest, UnknownCommandSuggestsTheNearest) {
  ExpectUsage(Hoist({"lod", "--model", Model()}),
              "hoist: error: unknown command 'lod' (did you mean 'load'?)");
  ExpectUsage(Hoist({"frobnicate"}), "unknown command 'frobnicate'; the commands are plan, load");
  ExpectUsage(Hoist({}), "hoist: error: no command given: the commands are plan, load, serve, ctl");
  ExpectUsage(Hoist({"--tp", "2", "load"}), "'--tp' comes before a command");
  ExpectUsage(Hoist({"ctl", "statu", "--socket", "x.sock"}),
              "'statu' is not status, release or restore (did you mean 'status'?)");
}

TEST_F(CliTest, UnknownFlagSuggestsTheNearest) {
  ExpectUsage(Hoist({"load", "--model", Model(), "--verfy"}),
              "hoist: error: unknown flag '--verfy' for 'hoist load' (did you mean '--verify'?)");
  ExpectUsage(Hoist({"plan", "--modle", Model()}),
              "unknown flag '--modle' for 'hoist plan' (did you mean '--model'?)");
  ExpectUsage(Hoist({"load", "--model", Model(), "extra"}),
              "unexpected argument 'extra' for 'hoist load'");
}

TEST_F(CliTest, BadFlagValuesSayWhatIsWrongInWords) {
  RunResult r = Hoist({"plan", "--model", Model(), "--tp", "0"});
  ExpectUsage(r, "tp 0 is out of range: tp must be between 1 and 65536");
  EXPECT_EQ(r.output.find("1797693"), std::string::npos) << r.output;
  ExpectUsage(Hoist({"plan", "--model", Model(), "--tp", "abc"}),
              "--tp 'abc' is not valid: --tp takes a whole number");
  ExpectUsage(Hoist({"plan", "--model", Model(), "--tp", "99999999999"}),
              "--tp '99999999999' is not valid: --tp takes a whole number");
  ExpectUsage(Hoist({"plan", "--model", Model(), "--tp"}), "--tp needs a value");
  ExpectUsage(Hoist({"load", "--model", Model(), "--log-level", "loud"}), "--log-level: loud");
}

// Every load/staging number, from a flag, out of range: exit 2 with the range, before any work.
// An empty value is a usage error naming the flag (CLI11 would read it as 0: the default), and a
// value no integer holds names the flag's range.
TEST_F(CliTest, EmptyAndUnrepresentableValuesAreUsageErrorsNamingTheRange) {
  for (const char* flag : {"--slots", "--ep", "--rank", "--threads", "--read-depth-mib", "--tp",
                           "--model", "--dump"}) {
    SCOPED_TRACE(flag);
    ExpectUsage(Hoist({"load", "--model", Model(), "--device", "host", flag, ""}),
                std::string(flag) + ": needs a value, not ''");
  }
  ExpectUsage(Hoist({"pack", "--model", Model(), "--out", dir_->Sub("p"), "--threads", ""}),
              "--threads: needs a value, not ''");
  for (const char* v : {"2147483648", "9223372036854775808", "1e308", "nan"}) {
    SCOPED_TRACE(v);
    ExpectUsage(Hoist({"load", "--model", Model(), "--device", "host", "--slots", v}),
                "--slots takes a whole number from 1 to 1024 (0: the default)");
  }
}

// Output paths are checked before a byte is read (exit 2), and nothing the user did not ask for
// is created: a dump folder is made, never the folders above it.
TEST_F(CliTest, OutputPathsAreCheckedBeforeTheLoad) {
  const std::string missing = dir_->Sub("no-such-folder");
  for (const char* flag : {"--report-json", "--trace", "--timeline", "--metrics"}) {
    SCOPED_TRACE(flag);
    ExpectUsage(
        Hoist({"load", "--model", Model(), "--device", "host", flag, missing + "/r.out"}),
        std::string(flag) + " " + missing + "/r.out: its folder " + missing + " does not exist");
  }
  ExpectUsage(Hoist({"load", "--model", Model(), "--device", "host", "--timeline", dir_->Sub("")}),
              "is a folder, not a file");
  ExpectUsage(Hoist({"load", "--model", Model(), "--device", "host", "--dump", missing + "/dump"}),
              "--dump " + missing + "/dump: its parent " + missing + " does not exist");
  EXPECT_FALSE(std::filesystem::exists(missing));
  ExpectUsage(Hoist({"plan", "--model", Model(), "--json", missing + "/plan.json"}),
              "--json " + missing + "/plan.json: its folder " + missing + " does not exist");
  const RunResult ok = Hoist({"load", "--model", Model(), "--device", "host", "--no-progress",
                              "--dump", dir_->Sub("dump-leaf/")});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(std::filesystem::exists(dir_->Sub("dump-leaf/rank-0.safetensors")));
}

// One --version, before a command or after any, exit 0; hoist-mkckpt's too, and its usage errors
// exit 2 with one error line, as hoist's do.
TEST_F(CliTest, VersionWorksEverywhere) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--version"}, {"load", "--version"}, {"plan", "--version"}, {"pack", "--version"}}) {
    const RunResult r = Hoist(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("hoist ", 0), 0u) << r.output;
  }
  RunResult v = RunCommand({testing::MkckptBin(), "--version"}, kBound);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_EQ(v.output.rfind("hoist-mkckpt ", 0), 0u) << v.output;
  RunResult bad = RunCommand({testing::MkckptBin(), "--bogus"}, kBound);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(Count(bad.output, "hoist-mkckpt: error: "), 1) << bad.output;
}

// What hoist does differently from what was asked is said: --ep on a model without routed
// experts is data parallelism, --rank under mpirun is ignored; alone, --rank R logs as rank R.
TEST_F(CliTest, SilentReinterpretationsAreSaid) {
  const RunResult ep = Hoist({"load", "--model", Model(), "--device", "host", "--no-progress",
                              "--ep", "2", "--rank", "1"});
  EXPECT_EQ(ep.exit_code, 0) << ep.output;
  EXPECT_NE(ep.output.find("has no routed experts, so expert parallelism is data parallelism"),
            std::string::npos)
      << ep.output;
  EXPECT_NE(ep.output.find("[rank 1 "), std::string::npos) << ep.output;
  EXPECT_EQ(ep.output.find("[rank 0 "), std::string::npos) << ep.output;
  const RunResult r = Mpirun(2, {"load", "--model", Model(), "--device", "host", "--no-progress",
                                 "--tp", "2", "--rank", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "--rank is ignored under mpirun"), 1) << r.output;
}

// One job, one exit code: a configuration error every rank meets (a GPU that is not there) is
// exit 2 on every rank, whichever fails first, alone as under mpirun.
TEST_F(CliTest, AFailedJobExitsWithItsCausesCodeEveryRun) {
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is present";
  for (int run = 0; run < 4; ++run) {
    const RunResult r =
        Mpirun(2, {"load", "--model", Model(), "--tp", "2", "--device", "cuda", "--no-progress"});
    EXPECT_EQ(r.exit_code, kExitUsage) << "run " << run << ": " << r.output;
  }
  const RunResult alone = Hoist({"load", "--model", Model(), "--device", "cuda", "--no-progress"});
  EXPECT_EQ(alone.exit_code, kExitUsage) << alone.output;
  EXPECT_EQ(Count(alone.output, "hoist: error: InvalidArgument: rank 0 on "), 1) << alone.output;
}

TEST_F(CliTest, LoadNumbersOutOfRangeAreUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--threads", "1000000"},
       "--threads 1000000 is out of range: the number of fill threads "
       "must be 1 to 1024 (or 0: the default)"},
      {{"--slots", "100000"},
       "--slots 100000 is out of range: the number of staging slots must "
       "be 1 to 1024"},
      {{"--slot-mib", "1000000"}, "--slot-mib 1000000 is out of range"},
      {{"--slots", "1024", "--slot-mib", "16384"},
       "is out of range: slots x slot_mib must be at "
       "most 262144 MiB"},
      {{"--chunk-kib", "2000000000"}, "--chunk-kib 2000000000 is out of range"},
      {{"--peer-timeout-s", "inf"},
       "--peer-timeout-s inf is out of range: the peer timeout must "
       "be a number of seconds above 0 and at most 86400"},
      {{"--peer-timeout-s", "nan"}, "--peer-timeout-s nan is out of range"},
      {{"--peer-timeout-s", "0"}, "--peer-timeout-s 0 is out of range"},
      {{"--dp", "1000000000"}, "dp 1000000000 is out of range: dp must be between 1 and 65536"},
      {{"--tp", "64", "--dp", "4096"}, "tp 64 x dp 4096 = 262144 ranks is out of range"},
      {{"--ep", "-1"}, "ep -1 is out of range"},
      {{"--tp", "2", "--rank", "2"}, "--rank 2 is out of range: the plan has 2 ranks"},
      {{"--dedup-step-kib", "-5"}, "--dedup-step-kib -5 is out of range"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"load", "--model", Model(), "--device", "host"};
    args.insert(args.end(), flags.begin(), flags.end());
    RunResult r = Hoist(args);
    SCOPED_TRACE(flags[0]);
    ExpectUsage(r, message);
    EXPECT_LT(r.seconds, 20);
  }
}

// The same numbers from the topology file are refused by `plan` and `load` alike, naming the key.
TEST_F(CliTest, TopologyMistakesAreUsageErrorsInPlanAndLoad) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"staging: {threads: 1000000}\n", "staging.threads 1000000 is out of range"},
      {"staging: {slots: 0, slot_mib: 99999}\n", "staging.slot_mib 99999 is out of range"},
      {"tp: 2\n[1, 2]: 3\n", "line 2: a key is not a string"},
      {"? {a: 1}\n: 2\n", "a key is not a string"},
      {"tp: 2\nread: auto\ntp: 4\n", "key 'tp' appears twice (lines 1 and 3)"},
      {"staging: {slots: 2, slots: 3}\n", "key 'slots' in 'staging' appears twice"},
      {"device: gpu\n", "device 'gpu' is not auto, cuda or host"},
      {"tp: 2\nnodes: [{name: a, gpus: [0, 100000]}]\n",
       "nodes[0].gpus: 100000 is out of range: a GPU ordinal must be 0 to 255"},
      {"peer_timeout_s: .inf\n", "peer_timeout_s inf is out of range"},
      {"peer_timeout_s: .nan\n", "peer_timeout_s nan is out of range"},
      {"dp: 1000000000\n", "dp 1000000000 is out of range"},
      {"tp: two\n", "line 1: key 'tp' must be a whole number, not 'two'"},
      {"tp: 99999999999\n", "key 'tp' must be a whole number, not '99999999999'"},
      {"\x01\x02\xff: [\n", "invalid YAML"},
  };
  int i = 0;
  for (const auto& [yaml, message] : cases) {
    const std::string file = Write("bad-" + std::to_string(i++) + ".yaml", yaml);
    SCOPED_TRACE(yaml);
    ExpectUsage(Hoist({"plan", "--topology", file, "--model", Model()}), message);
    ExpectUsage(Hoist({"load", "--topology", file, "--model", Model()}), message);
  }
}

TEST_F(CliTest, TopologyThatIsMissingOrAFifoIsAUsageErrorWithoutWaiting) {
  ExpectUsage(Hoist({"plan", "--topology", dir_->Sub("absent.yaml"), "--model", Model()}),
              "absent.yaml: cannot open the topology file");
  const std::string fifo = dir_->Sub("fifo.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  RunResult r = Hoist({"load", "--topology", fifo, "--model", Model()}, 20);
  ExpectUsage(r, "fifo.yaml: the topology is not a regular file");
}

TEST_F(CliTest, NoModelNamesTheFlag) {
  ExpectUsage(Hoist({"load", "--tp", "2"}), "no model: give --model DIR");
}

TEST_F(CliTest, MissingModelFolderIsAConfigurationError) {
  const std::string missing = dir_->Sub("no-such-model");
  ExpectUsage(Hoist({"plan", "--model", missing}), "no-such-model");
  ExpectUsage(Hoist({"load", "--model", missing, "--device", "host"}), "no-such-model");
  // Under mpirun the planning error reaches every rank with its code; rank 0 alone prints it.
  RunResult r = Mpirun(2, {"load", "--model", missing, "--tp", "2", "--device", "host"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_EQ(Count(r.output, "hoist: error: "), 1) << r.output;
  EXPECT_NE(r.output.find("no-such-model"), std::string::npos) << r.output;
}

// Deprecated spellings (--staging for --pinning; the topology's staging mapping) still work and
// print one warning each, once under mpirun.
TEST_F(CliTest, DeprecatedSpellingsWorkAndWarnOnce) {
  RunResult r = Hoist(
      {"load", "--model", Model(), "--device", "host", "--staging", "register", "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "hoist: warning: --staging is deprecated: it is --pinning now"), 1)
      << r.output;
  r = Hoist(
      {"load", "--model", Model(), "--device", "host", "--pinning", "register", "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "warning"), 0) << r.output;
  const std::string file = Write("old-staging.yaml", "tp: 2\nstaging: {slots: 2, threads: 2}\n");
  r = Mpirun(2,
             {"load", "--topology", file, "--model", Model(), "--device", "host", "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "hoist: warning: " + file +
                                ": line 2: 'staging: {slots, slot_mib, "
                                "threads}' is deprecated"),
            1)
      << r.output;
  r = Hoist({"plan", "--topology", file, "--model", Model()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "hoist: warning: "), 1) << r.output;
}

// The --inject-* test hooks exist exactly in builds with HOIST_TEST_HOOKS (all but Release).
TEST_F(CliTest, InjectFlagsExistOnlyWithTestHooks) {
  const RunResult r = Hoist(
      {"load", "--model", Model(), "--device", "host", "--no-progress", "--inject-fail-rank", "0"});
#if HOIST_TEST_HOOKS
  EXPECT_EQ(r.exit_code, 1) << r.output;  // a rank failed: a load failure
  EXPECT_NE(r.output.find("rank 0: injected failure (--inject-fail-rank)"), std::string::npos)
      << r.output;
#else
  ExpectUsage(r, "unknown flag '--inject-fail-rank' for 'hoist load'");
#endif
}

TEST_F(CliTest, SuccessIsZero) {
  RunResult r = Hoist({"plan", "--model", Model(), "--tp", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = Hoist({"load", "--model", Model(), "--device", "host", "--verify", "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Errors every rank sees alike are printed once, by rank 0, and every rank exits 2.
TEST_F(CliTest, UnderMpirunSharedErrorsArePrintedOnce) {
  RunResult r = Mpirun(3, {"load", "--model", Model(), "--device", "host", "--tp", "2"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_EQ(Count(r.output, "the plan needs 2 ranks (tp 2 x dp 1) but mpirun started 3"), 1)
      << r.output;
  EXPECT_EQ(Count(r.output, "hoist: error: "), 1) << r.output;
  r = Mpirun(3, {"load", "--model", Model(), "--device", "host", "--threads", "1000000"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_EQ(Count(r.output, "--threads 1000000 is out of range"), 1) << r.output;
  EXPECT_EQ(Count(r.output, "hoist: error: "), 1) << r.output;
  r = Mpirun(2, {"lod", "--model", Model()});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_EQ(Count(r.output, "unknown command 'lod'"), 1) << r.output;
}

// A daemon that accepts connections but never answers (stopped with SIGSTOP, or hung): `hoist
// ctl` gives up after --timeout-s, 10 s by default, with exit 1.
TEST_F(CliTest, CtlAgainstAStoppedDaemonTimesOut) {
  const std::string path = dir_->Sub("stopped.sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 8), 0);  // never accepted, never answered
  RunResult r = Hoist({"ctl", "status", "--socket", path, "--timeout-s", "1"}, 30);
  EXPECT_EQ(r.exit_code, kExitFailure) << r.output;
  EXPECT_NE(r.output.find("hoist: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped.sock"), std::string::npos) << r.output;
  EXPECT_GE(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 10);
  r = Hoist({"ctl", "status", "--socket", path}, 40);  // the default bound
  EXPECT_EQ(r.exit_code, kExitFailure) << r.output;
  EXPECT_GE(r.seconds, 9.5);
  EXPECT_LT(r.seconds, 25);
  ::close(fd);
  ExpectUsage(Hoist({"ctl", "status", "--socket", path, "--timeout-s", "0"}),
              "--timeout-s 0 is out of range");
  ExpectUsage(Hoist({"ctl", "status", "--socket", path, "--timeout-s", "inf"}),
              "--timeout-s inf is out of range");
}

TEST_F(CliTest, ServeRequestLimitOutOfRangeIsAUsageError) {
  ExpectUsage(Hoist({"serve", "--model", Model(), "--device", "host", "--socket-dir",
                     dir_->Sub("sockets"), "--max-request-kib", "4194304"}),
              "--max-request-kib 4194304 is out of range: 1 to 1048576 (1 GiB)");
  ExpectUsage(Hoist({"serve", "--model", Model(), "--device", "host", "--socket-dir",
                     dir_->Sub("sockets"), "--threads", "1000000"}),
              "--threads 1000000 is out of range");
}

}  // namespace
}  // namespace hoist::launch
