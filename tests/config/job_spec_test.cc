// One resolution of flags over the topology file for `hoist plan`, `hoist load`, `hoist serve`
// and the embedding API.
#include "config/job_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace hoist::config {
namespace {

namespace fs = std::filesystem;

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("hoist-jobspec-" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(path_) << "model: /models/m\ntp: 2\ndp: 2\nlayout: hf\ndedup: node\n"
                            "peer_timeout_s: 7\nread: buffered\nstaging: {slots: 3, slot_mib: 2, "
                            "threads: 5}\nverify: true\n";
  }
  void TearDown() override { fs::remove(path_); }
  fs::path path_;
};

TEST_F(JobSpecTest, TheFileFillsWhatTheFlagsLeaveUnset) {
  JobSpec spec;
  spec.topology = path_.string();
  Result<ResolvedJob> r = ResolveJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const coordinator::JobOptions& j = r->job;
  EXPECT_EQ(j.model_dir, "/models/m");
  EXPECT_EQ(j.plan.tp, 2);
  EXPECT_EQ(j.plan.dp, 2);
  EXPECT_EQ(j.plan.layout, proto::LAYOUT_HF);
  EXPECT_EQ(j.plan.dedup, proto::DEDUP_NODE);
  EXPECT_DOUBLE_EQ(j.exchange.timeout_s, 7);
  EXPECT_EQ(j.load.settings.pipeline.mode, transport::ReadMode::kBuffered);
  EXPECT_EQ(j.load.settings.pipeline.slots, 3);
  EXPECT_EQ(j.load.settings.pipeline.slot_bytes, 2ull << 20);
  EXPECT_EQ(j.load.settings.pipeline.threads, 5);
  EXPECT_TRUE(j.load.settings.verify);
}

TEST_F(JobSpecTest, BadValuesAreNamed) {
  JobSpec spec;
  spec.model = "/m";
  spec.dedup = "cluster";
  Result<ResolvedJob> r = ResolveJobSpec(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dedup 'cluster'"), std::string::npos);
  spec.dedup.reset();
  spec.tp = 3;
  spec.ep = 4;
  r = ResolveJobSpec(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tp 3 must divide ep 4"), std::string::npos)
      << r.status().message();
  JobSpec none;
  r = ResolveJobSpec(none);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no model: give --model DIR"), std::string::npos);
}

// Refused with InvalidArgument, and the message contains `message`.
void ExpectRefused(const JobSpec& spec, const std::string& message) {
  Result<ResolvedJob> r = ResolveJobSpec(spec);
  ASSERT_FALSE(r.ok()) << "accepted; want: " << message;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(message), std::string::npos)
      << "want: " << message << "\ngot: " << r.status().message();
}

JobSpec WithModel() {
  JobSpec s;
  s.model = "/m";
  return s;
}

// Each load number at its largest accepted value resolves; one more is refused naming the flag
// and stating the range.
TEST(JobSpecRanges, EveryNumberHasItsRangeFromAFlag) {
  struct Case {
    std::optional<int> JobSpec::*field;
    int max;
    std::string message;
  };
  const std::vector<Case> cases = {
      {&JobSpec::slots, 1024,
       "--slots 1025 is out of range: the number of staging slots must be "
       "1 to 1024 (or 0: the default)"},
      {&JobSpec::slot_mib, 16384,
       "--slot-mib 16385 is out of range: the staging slot size in MiB "
       "must be 1 to 16384 (or 0: the default)"},
      {&JobSpec::threads, 1024,
       "--threads 1025 is out of range: the number of fill threads must "
       "be 1 to 1024 (or 0: the default)"},
      {&JobSpec::chunk_kib, 16 << 20,
       "--chunk-kib 16777217 is out of range: the fill chunk in KiB "
       "must be 1 to 16777216 (or 0: the default)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    JobSpec s = WithModel();
    s.*c.field = c.max;
    Result<ResolvedJob> r = ResolveJobSpec(s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    s.*c.field = c.max + 1;
    ExpectRefused(s, c.message);
    s.*c.field = -1;
    ExpectRefused(s, "is out of range");
  }
}

TEST(JobSpecRanges, ZeroMeansTheDefault) {
  JobSpec s = WithModel();
  s.slots = s.slot_mib = s.threads = s.chunk_kib = s.dedup_step_kib = 0;
  Result<ResolvedJob> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The ring's default is resolved here, once; the fill threads (the rank's cpus) and the chunk
  // (a rule of the slot size) stay 0 for the rank to decide.
  EXPECT_EQ(r->job.load.settings.pipeline.slots, transport::kDefaultSlots);
  EXPECT_EQ(r->job.load.settings.pipeline.slot_bytes, transport::kDefaultSlotBytes);
  EXPECT_EQ(r->job.load.settings.pipeline.threads, 0);
  EXPECT_EQ(r->job.load.settings.pipeline.chunk_bytes, 0u);
  EXPECT_EQ(r->job.plan.dedup_step_bytes, planner::PlanOptions().dedup_step_bytes);
}

// The read depth: unset is left to the rank (by the ranks of its node); 0 is off, not the
// default; a value is MiB; past the limit it is refused.
TEST(JobSpecRanges, TheReadDepthIsLeftUnsetUnlessGiven) {
  JobSpec s = WithModel();
  Result<ResolvedJob> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->job.load.settings.pipeline.read_depth_bytes.has_value());
  for (int mib : {0, 3, 262144}) {
    s.read_depth_mib = mib;
    r = ResolveJobSpec(s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->job.load.settings.pipeline.read_depth_bytes.has_value()) << mib;
    EXPECT_EQ(*r->job.load.settings.pipeline.read_depth_bytes, static_cast<std::uint64_t>(mib)
                                                                   << 20);
  }
  s.read_depth_mib = 262145;
  ExpectRefused(s, "--read-depth-mib 262145 is out of range: the ring's depth in MiB");
  s.read_depth_mib = -1;
  ExpectRefused(s, "--read-depth-mib -1 is out of range");
}

// The plan's numbers go through the planner's one range check (planner/plan_options.h), from
// flags, the file and the embedding API alike.
TEST(JobSpecRanges, PlanNumbersUseThePlannersCheck) {
  JobSpec s = WithModel();
  s.tp = 0;
  ExpectRefused(s, "tp 0 is out of range: tp must be between 1 and 65536");
  s.tp = 65536;
  ASSERT_TRUE(ResolveJobSpec(s).ok());
  s.tp = 65537;
  ExpectRefused(s, "tp 65537 is out of range");
  s.tp = 1;
  s.dp = 0;
  ExpectRefused(s, "dp 0 is out of range");
  s.dp = 1;
  s.ep = -1;
  ExpectRefused(s, "ep -1 is out of range");
  s.ep = 0;
  s.dedup_step_kib = 1;
  ExpectRefused(s, "dedup step 1 KiB is out of range");
  s.dedup_step_kib = -5;
  ExpectRefused(s, "--dedup-step-kib -5 is out of range");
  s.dedup_step_kib = 4;
  Result<ResolvedJob> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job.plan.dedup_step_bytes, 4096u);
}

TEST(JobSpecRanges, TheWorldAndTheStagingRingAreBounded) {
  JobSpec s = WithModel();
  s.tp = 4096;
  s.dp = 16;  // 65536 ranks: the largest job
  ASSERT_TRUE(ResolveJobSpec(s).ok());
  s.tp = 65536;
  s.dp = 65536;  // 2^32 ranks must not wrap to 0
  ExpectRefused(s, "tp 65536 x dp 65536 = 4294967296 ranks is out of range");
  s = WithModel();
  s.slots = 1024;
  s.slot_mib = 256;  // 256 GiB: the largest ring
  ASSERT_TRUE(ResolveJobSpec(s).ok());
  s.slot_mib = 257;
  ExpectRefused(s,
                "staging of 263168 MiB (--slots x --slot-mib) is out of range: slots x "
                "slot_mib must be at most 262144 MiB per rank");
  s = WithModel();
  s.tp = 2;
  s.solo_rank = 1;
  ASSERT_TRUE(ResolveJobSpec(s).ok());
  s.solo_rank = 2;
  ExpectRefused(s, "--rank 2 is out of range: the plan has 2 ranks, so the rank must be 0 to 1");
}

TEST(JobSpecRanges, PeerTimeoutMustBeFinitePositiveAndAtMostADay) {
  JobSpec s = WithModel();
  for (double ok : {0.001, 2.0, 86400.0}) {
    s.peer_timeout_s = ok;
    Result<ResolvedJob> r = ResolveJobSpec(s);
    ASSERT_TRUE(r.ok()) << ok << ": " << r.status().ToString();
    EXPECT_DOUBLE_EQ(r->job.exchange.timeout_s, ok);
  }
  for (double bad : {0.0, -1.0, 86400.5, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    s.peer_timeout_s = bad;
    ExpectRefused(s, "--peer-timeout-s ");
    ExpectRefused(s,
                  "is out of range: the peer timeout must be a number of seconds above 0 and "
                  "at most 86400");
  }
}

// Values from the file are named by the file and key; a flag given for the same value wins.
TEST_F(JobSpecTest, RangesFromTheFileNameTheFileAndKey) {
  auto write = [this](const std::string& yaml) {
    std::ofstream(path_) << yaml;
    JobSpec s;
    s.topology = path_.string();
    return s;
  };
  const std::string p = path_.string();
  ExpectRefused(write("model: /m\nstaging: {threads: 1000000}\n"),
                p + ": staging.threads 1000000 is out of range");
  JobSpec s = write("model: /m\nstaging: {threads: 1000000}\n");
  s.threads = 8;
  Result<ResolvedJob> r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job.load.settings.pipeline.threads, 8);
  ExpectRefused(write("model: /m\nstaging: {slots: 5000}\n"),
                p + ": staging.slots 5000 is out of range");
  ExpectRefused(write("model: /m\nstaging: {slot_mib: -1}\n"),
                p + ": staging.slot_mib -1 is out of range");
  ExpectRefused(write("model: /m\ntp: 0\n"), "tp 0 is out of range");
  ExpectRefused(write("model: /m\ndp: 1000000000\n"), "dp 1000000000 is out of range");
  ExpectRefused(write("model: /m\npeer_timeout_s: .inf\n"),
                p + ": peer_timeout_s inf is out of range");
  ExpectRefused(write("model: /m\npeer_timeout_s: .nan\n"),
                p + ": peer_timeout_s nan is out of range");
  ExpectRefused(write("model: /m\ndevice: gpu\n"), "device 'gpu' is not auto, cuda or host");
  ExpectRefused(write("model: /m\nread: fast\n"), "read mode 'fast' is not auto, buffered");
  ExpectRefused(write("model: /m\ntp: 2\nnodes: [{name: a, gpus: [0, 256]}]\n"),
                p + ": nodes[0].gpus: 256 is out of range: a GPU ordinal must be 0 to 255");
  ExpectRefused(write("model: /m\ntp: 2\nnodes: [{name: a, gpus: [-1, 0]}]\n"),
                p + ": nodes[0].gpus: -1 is out of range");
  s = write("model: /m\ntp: 2\nnodes: [{name: a, gpus: [255, 0]}]\n");
  r = ResolveJobSpec(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job.plan.locations[0].gpu, 255u);
}

TEST(JobSpecFile, AMissingTopologyIsAConfigurationError) {
  JobSpec s = WithModel();
  s.topology = "/nonexistent/hoist.yaml";
  ExpectRefused(s, "/nonexistent/hoist.yaml: cannot open the topology file");
}

}  // namespace
}  // namespace hoist::config
