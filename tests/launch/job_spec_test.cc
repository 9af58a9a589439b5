// One resolution of flags over the topology file for `hoist plan`, `hoist load`, `hoist serve`
// and the embedding API.
#include "launch/job_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace hoist::launch {
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
  EXPECT_EQ(j.load.read_mode, transport::ReadMode::kBuffered);
  EXPECT_EQ(j.load.slots, 3);
  EXPECT_EQ(j.load.slot_bytes, 2ull << 20);
  EXPECT_EQ(j.load.threads, 5);
  EXPECT_TRUE(j.load.verify);
}

TEST_F(JobSpecTest, FlagsOverrideTheFile) {
  JobSpec spec;
  spec.topology = path_.string();
  CLI::App app;
  AddJobFlags(&app, &spec, /*load_flags=*/true);
  const char* argv[] = {"hoist",       "--model",   "/other",  "--tp",     "4",
                        "--dp",        "1",         "--dedup", "job",      "--read",
                        "direct",      "--threads", "9",       "--layout", "fused",
                        "--chunk-kib", "64",        "--rank",  "3",        "--no-numa"};
  ASSERT_NO_THROW(app.parse(static_cast<int>(std::size(argv)), const_cast<char**>(argv)));
  Result<ResolvedJob> r = ResolveJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const coordinator::JobOptions& j = r->job;
  EXPECT_EQ(j.model_dir, "/other");
  EXPECT_EQ(j.plan.tp, 4);
  EXPECT_EQ(j.plan.dp, 1);
  EXPECT_EQ(j.plan.layout, proto::LAYOUT_FUSED);
  EXPECT_EQ(j.plan.dedup, proto::DEDUP_JOB);
  EXPECT_EQ(j.load.read_mode, transport::ReadMode::kDirect);
  EXPECT_EQ(j.load.threads, 9);
  EXPECT_EQ(j.load.slots, 3);  // not given: still the file's
  EXPECT_EQ(j.load.chunk_bytes, 64u << 10);
  EXPECT_FALSE(j.load.bind_numa);
  EXPECT_EQ(j.solo_rank, 3);
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
  EXPECT_NE(r.status().message().find("ep 4 is not a multiple of tp 3"), std::string::npos);
  JobSpec none;
  r = ResolveJobSpec(none);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no model"), std::string::npos);
}

}  // namespace
}  // namespace hoist::launch
