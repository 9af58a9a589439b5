// The option table (config/option_table.h) is the one source of the topology file's keys: every
// entry is a key that resolves like the table's own accessor, numbers are checked against the
// entry's range, defaults are the libraries' own, and the deprecated staging mapping still reads,
// with a warning.
#include "config/option_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "config/job_spec.h"
#include "tests/config/option_samples.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::config {
namespace {

using hoist::testing::ResolvedThroughTable;
using hoist::testing::SampleText;

constexpr const char* kModel = "/models/base";
constexpr const char* kOtherModel = "/models/other";

TEST(OptionTable, NamesAreUniqueIdentifiersAndEachOwnsOneField) {
  std::set<std::string_view> names;
  const std::regex identifier("[a-z][a-z0-9_]*");
  for (const OptionInfo& o : kOptions) {
    SCOPED_TRACE(std::string(o.name));
    EXPECT_TRUE(names.insert(o.name).second);
    EXPECT_TRUE(std::regex_match(std::string(o.name), identifier));
    EXPECT_FALSE(o.help.empty());
    EXPECT_EQ(FindOption(o.name), &o);
    // Setting this entry sets its field and no other entry's.
    JobOptionSet set;
    ASSERT_TRUE(SetOption(o, SampleText(o, kOtherModel), "test", &set).ok());
    for (const OptionInfo& other : kOptions) {
      EXPECT_EQ(OptionText(other, set).empty(), &other != &o) << other.name;
    }
  }
  EXPECT_EQ(FindOption("staging"), nullptr);
  EXPECT_EQ(FlagName("peer_timeout_s"), "--peer-timeout-s");
}

// Each entry's concern is the struct of hoist/job_options.h its field lives in.
TEST(OptionTable, EachConcernIsTheStructHoldingTheField) {
  JobOptionSet set;
  auto within = [](const void* field, const auto& part) {
    const char* p = static_cast<const char*>(field);
    const char* base = reinterpret_cast<const char*>(&part);
    return p >= base && p < base + sizeof(part);
  };
  for (const OptionInfo& o : kOptions) {
    const void* field = std::visit([](auto* f) -> const void* { return f; }, o.field(set));
    const bool in_selection = within(field, static_cast<SelectionOptions&>(set));
    const bool in_staging = within(field, static_cast<StagingOptions&>(set));
    const bool in_peer = within(field, static_cast<PeerOptions&>(set));
    const bool in_outputs = within(field, static_cast<OutputOptions&>(set));
    EXPECT_EQ(in_selection, o.concern == Concern::kSelection) << o.name;
    EXPECT_EQ(in_staging, o.concern == Concern::kStaging) << o.name;
    EXPECT_EQ(in_peer, o.concern == Concern::kPeer) << o.name;
    EXPECT_EQ(in_outputs, o.concern == Concern::kOutputs) << o.name;
  }
}

// The table's defaults are what the libraries default to when no option is given at all.
TEST(OptionTable, DefaultsAreTheLibrariesDefaults) {
  JobSpec spec;
  spec.model = kModel;
  coordinator::JobOptions plain;
  plain.model_dir = kModel;
  EXPECT_EQ(hoist::testing::Resolved(spec), DescribeJob(plain));
}

// Each named choice the table lists is one the resolution accepts, and each is a different
// setting; a name outside them is refused, naming the value.
TEST(OptionTable, EveryChoiceResolvesAndOthersAreRefused) {
  for (const OptionInfo& o : kOptions) {
    if (o.choices.empty()) continue;
    SCOPED_TRACE(std::string(o.name));
    std::set<std::string> seen;
    for (const std::string& c : hoist::testing::Choices(o)) {
      const std::string r = ResolvedThroughTable(o, c, kModel);
      EXPECT_EQ(r.rfind("error", 0), std::string::npos) << c << ": " << r;
      EXPECT_TRUE(seen.insert(r).second) << c << " resolves like another choice";
    }
    JobSpec spec;
    spec.model = kModel;
    ASSERT_TRUE(SetOption(o, "bogus", "test", &spec).ok());
    Result<ResolvedJob> r = ResolveJobSpec(spec);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("'bogus'"), std::string::npos) << r.status().message();
  }
}

TEST(OptionTable, TextThatDoesNotConvertIsNamed) {
  JobOptionSet set;
  Status s = SetOption(*FindOption("tp"), "two", "--tp", &set);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--tp 'two' is not valid: tp takes a whole number"), std::string::npos)
      << s.message();
  EXPECT_FALSE(SetOption(*FindOption("slots"), "1.5", "x", &set).ok());
  EXPECT_FALSE(SetOption(*FindOption("slots"), "", "x", &set).ok());
  EXPECT_FALSE(SetOption(*FindOption("verify"), "yes", "x", &set).ok());
  EXPECT_FALSE(SetOption(*FindOption("peer_timeout_s"), "3s", "x", &set).ok());
  EXPECT_TRUE(SetOption(*FindOption("peer_timeout_s"), "2.5", "x", &set).ok());
  EXPECT_DOUBLE_EQ(*set.peer_timeout_s, 2.5);
}

class OptionFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& yaml) {
    const std::string path = dir_.Sub("t" + std::to_string(n_++) + ".yaml");
    std::ofstream(path) << yaml;
    return path;
  }
  JobSpec FromFile(const std::string& yaml) {
    JobSpec s;
    s.topology = Write(yaml);
    return s;
  }
  hoist::testing::ScratchDir dir_{"hoist-options"};
  int n_ = 0;
};

// Every entry is a top-level key, and its value resolves as the table's accessor resolves it
// (and differently from the default).
TEST_F(OptionFileTest, EveryOptionIsAKeyThatResolvesLikeTheTable) {
  JobSpec base;
  base.model = kModel;
  const std::string plain = hoist::testing::Resolved(base);
  for (const OptionInfo& o : kOptions) {
    SCOPED_TRACE(std::string(o.name));
    const std::string text = SampleText(o, kOtherModel);
    const std::string want = ResolvedThroughTable(o, text, kModel);
    ASSERT_EQ(want.rfind("error", 0), std::string::npos) << want;
    EXPECT_NE(want, plain);
    const std::string model_line = o.name == "model" ? "" : std::string("model: ") + kModel + "\n";
    const JobSpec s = FromFile(model_line + std::string(o.name) + ": " + text + "\n");
    EXPECT_EQ(hoist::testing::Resolved(s), want);
  }
}

// A load number from the file out of the entry's range is refused naming the file and key.
TEST_F(OptionFileTest, NumbersFromTheFileAreCheckedAgainstTheTablesRange) {
  for (const OptionInfo& o : kOptions) {
    if (o.type != OptionType::kInt || o.plan) continue;
    SCOPED_TRACE(std::string(o.name));
    const long long over = static_cast<long long>(o.hi) + 1;
    const JobSpec s = FromFile("model: /m\n" + std::string(o.name) + ": " + std::to_string(over));
    Result<ResolvedJob> r = ResolveJobSpec(s);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(s.topology + ": " + std::string(o.name) + " " +
                                        std::to_string(over) + " is out of range"),
              std::string::npos)
        << r.status().message();
  }
}

TEST_F(OptionFileTest, AnUnknownKeySuggestsTheNearest) {
  Result<ResolvedJob> r = ResolveJobSpec(FromFile("model: /m\nslot_mb: 3\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 2: unknown key 'slot_mb' (did you mean 'slot_mib'?)"),
            std::string::npos)
      << r.status().message();
  r = ResolveJobSpec(FromFile("model: /m\nzzzzzz: 3\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("did you mean"), std::string::npos);
  EXPECT_NE(r.status().message().find("the keys are "), std::string::npos);
}

// The old `staging: {slots, slot_mib, threads}` mapping reads as the top-level keys do, with a
// warning naming the file and line; giving a key both ways is refused.
TEST_F(OptionFileTest, TheDeprecatedStagingMappingWorksAndWarns) {
  const JobSpec old_style = FromFile(
      "model: /m\ntp: 2\nstaging: {slots: 3, slot_mib: 2, "
      "threads: 5}\n");
  const JobSpec new_style = FromFile("model: /m\ntp: 2\nslots: 3\nslot_mib: 2\nthreads: 5\n");
  Result<ResolvedJob> old_r = ResolveJobSpec(old_style);
  Result<ResolvedJob> new_r = ResolveJobSpec(new_style);
  ASSERT_TRUE(old_r.ok()) << old_r.status().ToString();
  ASSERT_TRUE(new_r.ok()) << new_r.status().ToString();
  EXPECT_EQ(DescribeJob(old_r->job), DescribeJob(new_r->job));
  EXPECT_EQ(new_r->job.load.settings.pipeline.slots, 3);
  EXPECT_EQ(new_r->job.load.settings.pipeline.slot_bytes, 2u << 20);
  EXPECT_EQ(new_r->job.load.settings.pipeline.threads, 5);
  EXPECT_TRUE(new_r->warnings.empty());
  ASSERT_EQ(old_r->warnings.size(), 1u);
  EXPECT_EQ(old_r->warnings[0],
            old_style.topology + ": line 3: " + std::string(kDeprecatedStagingKey));
  Result<ResolvedJob> both = ResolveJobSpec(FromFile("model: /m\nslots: 2\nstaging: {slots: 3}\n"));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("'slots' is given twice"), std::string::npos)
      << both.status().message();
}

// README.md's option table has one row per entry of the table, in its order, and no other.
TEST(OptionTable, TheReadmeListsEveryOption) {
  std::ifstream readme(hoist::testing::SourceDir() + "/README.md");
  ASSERT_TRUE(readme.good());
  const std::regex row("^\\| `([a-z_]+)` \\|.*");
  std::vector<std::string> rows;
  bool in_section = false;
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Options";
    std::smatch m;
    if (in_section && std::regex_match(line, m, row)) rows.push_back(m[1].str());
  }
  std::vector<std::string> names;
  for (const OptionInfo& o : kOptions) names.emplace_back(o.name);
  EXPECT_EQ(rows, names);
}

}  // namespace
}  // namespace hoist::config
