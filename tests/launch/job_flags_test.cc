// The CLI11 flags of a job (launch/job_flags.h) fill a config::JobSpec that the same resolution
// as the embedding API's turns into JobOptions: flags win over the topology file.
#include "launch/job_flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/option_table.h"
#include "tests/config/option_samples.h"

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
  EXPECT_EQ(j.load.settings.pipeline.mode, transport::ReadMode::kDirect);
  EXPECT_EQ(j.load.settings.pipeline.threads, 9);
  EXPECT_EQ(j.load.settings.pipeline.slots, 3);  // not given: still the file's
  EXPECT_EQ(j.load.settings.pipeline.chunk_bytes, 64u << 10);
  EXPECT_FALSE(j.load.settings.bind_numa);
  EXPECT_EQ(j.solo_rank, 3);
}

// Parses `args` (after the program name) with the flags of `hoist load` (or `hoist plan`) into a
// JobSpec; the error text of a parse failure, else "".
std::string Parse(const std::vector<std::string>& args, config::JobSpec* spec,
                  bool load_flags = true) {
  CLI::App app;
  AddJobFlags(&app, spec, load_flags);
  std::vector<const char*> argv = {"hoist"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

// Every entry of the option table is a flag (--name, '_' written '-'; a bool --name / --no-name)
// whose value resolves as the table's own accessor resolves it.
TEST(JobFlagsTable, EveryOptionIsAFlagThatResolvesLikeTheTable) {
  const std::string model = "/models/base";
  for (const config::OptionInfo& o : config::kOptions) {
    SCOPED_TRACE(std::string(o.name));
    const std::string text = hoist::testing::SampleText(o, "/models/other");
    const std::string want = hoist::testing::ResolvedThroughTable(o, text, model);
    std::vector<std::string> args;
    if (o.name != "model") args = {"--model", model};
    if (o.type == config::OptionType::kBool) {
      args.push_back(text == "true" ? config::FlagName(o.name)
                                    : "--no-" + config::FlagName(o.name).substr(2));
    } else {
      args.insert(args.end(), {config::FlagName(o.name), text});
    }
    config::JobSpec spec;
    ASSERT_EQ(Parse(args, &spec), "");
    EXPECT_EQ(hoist::testing::Resolved(spec), want);
    EXPECT_TRUE(spec.warnings.empty());
  }
}

// `hoist plan` takes exactly the options that shape the plan; `hoist load` takes them all.
TEST(JobFlagsTable, PlanTakesThePlanOptionsLoadTakesAll) {
  for (const bool load_flags : {false, true}) {
    config::JobSpec spec;
    CLI::App app;
    AddJobFlags(&app, &spec, load_flags);
    for (const config::OptionInfo& o : config::kOptions) {
      EXPECT_EQ(app.get_option_no_throw(config::FlagName(o.name)) != nullptr, o.plan || load_flags)
          << o.name << (load_flags ? " (load)" : " (plan)");
    }
  }
}

// `--staging KIND` (the old name of --pinning) still parses, hidden from --help, and records
// its warning; the value lands where --pinning puts it.
TEST(JobFlagsTable, TheDeprecatedStagingFlagWorksAndWarns) {
  const config::OptionInfo& pinning = *config::FindOption("pinning");
  for (const std::string kind : {"register", "mallochost"}) {
    config::JobSpec old_spec, new_spec;
    ASSERT_EQ(Parse({"--model", "/m", "--staging", kind}, &old_spec), "");
    ASSERT_EQ(Parse({"--model", "/m", "--pinning", kind}, &new_spec), "");
    EXPECT_EQ(*old_spec.pinning, kind);
    EXPECT_EQ(hoist::testing::Resolved(old_spec),
              hoist::testing::ResolvedThroughTable(pinning, kind, "/m"));
    ASSERT_EQ(old_spec.warnings.size(), 1u);
    EXPECT_EQ(old_spec.warnings[0], "--staging is deprecated: it is --pinning now (same values)");
    EXPECT_TRUE(new_spec.warnings.empty());
    Result<config::ResolvedJob> r = config::ResolveJobSpec(old_spec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->warnings, old_spec.warnings);
  }
  config::JobSpec spec;
  CLI::App app;
  AddJobFlags(&app, &spec, /*load_flags=*/true);
  EXPECT_EQ(app.help().find("--staging"), std::string::npos) << app.help();
  EXPECT_NE(app.help().find("--pinning"), std::string::npos);
  EXPECT_NE(Parse({"--staging"}, &spec), "");  // still needs its value
}

}  // namespace
}  // namespace hoist::launch
