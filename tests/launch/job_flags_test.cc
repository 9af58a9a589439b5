// The CLI11 flags of a job (launch/job_flags.h) fill a config::JobSpec that the same resolution
// as the embedding API's turns into JobOptions: flags win over the topology file.
#include "launch/job_flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hoist::launch {
namespace {

namespace fs = std::filesystem;

class JobFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("hoist-jobflags-" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(path_) << "model: /models/m\ntp: 2\ndp: 2\nlayout: hf\ndedup: node\n"
                            "peer_timeout_s: 7\nread: buffered\nstaging: {slots: 3, slot_mib: 2, "
                            "threads: 5}\nverify: true\n";
  }
  void TearDown() override { fs::remove(path_); }
  fs::path path_;
};

TEST_F(JobFlagsTest, FlagsOverrideTheFile) {
  config::JobSpec spec;
  spec.topology = path_.string();
  CLI::App app;
  AddJobFlags(&app, &spec, /*load_flags=*/true);
  const char* argv[] = {"hoist",       "--model",   "/other",  "--tp",     "4",
                        "--dp",        "1",         "--dedup", "job",      "--read",
                        "direct",      "--threads", "9",       "--layout", "fused",
                        "--chunk-kib", "64",        "--rank",  "3",        "--no-numa"};
  ASSERT_NO_THROW(app.parse(static_cast<int>(std::size(argv)), const_cast<char**>(argv)));
  Result<config::ResolvedJob> r = config::ResolveJobSpec(spec);
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

}  // namespace
}  // namespace hoist::launch
