// The embedding API's options are the table's (config/option_table.h): every entry is a field of
// hoist::LoadOptions (a JobOptionSet) and a key and field of the C API, and a value given through
// either resolves as the table's own accessor resolves it (which the topology file and the
// command line also do: tests/config/option_table_test.cc, tests/launch/job_flags_test.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <string>

#include "config/option_table.h"
#include "embed/resolve_options.h"
#include "hoist/hoist.h"
#include "hoist/hoist_c.h"
#include "tests/config/option_samples.h"

namespace hoist {
namespace {

constexpr const char* kModel = "/models/base";
constexpr const char* kOtherModel = "/models/other";

std::string Resolved(const LoadOptions& o) {
  Result<config::ResolvedJob> r = internal::ResolveLoadOptions(o);
  return r.ok() ? config::DescribeJob(r->job) : "error: " + r.status().ToString();
}

std::string ResolvedC(const hoist_load_options& c) {
  LoadOptions o;
  Status s = internal::FromC(c, &o);
  return s.ok() ? Resolved(o) : "error: " + s.ToString();
}

TEST(EmbedOptions, EveryOptionIsALoadOptionsField) {
  LoadOptions base;
  base.model = kModel;
  const std::string plain = Resolved(base);
  for (const config::OptionInfo& o : config::kOptions) {
    SCOPED_TRACE(std::string(o.name));
    const std::string text = testing::SampleText(o, kOtherModel);
    const std::string want = testing::ResolvedThroughTable(o, text, kModel);
    ASSERT_EQ(want.rfind("error", 0), std::string::npos) << want;
    LoadOptions lo = base;
    ASSERT_TRUE(config::SetOption(o, text, "test", &lo).ok());
    EXPECT_EQ(Resolved(lo), want);
    EXPECT_NE(Resolved(lo), plain);
  }
}

// The same by name from the C API: hoist_load_options_set knows every entry of the table (and
// writes its typed field), and hoist_load reads it back as the table says.
TEST(EmbedOptions, EveryOptionIsACApiKeyAndField) {
  for (const config::OptionInfo& o : config::kOptions) {
    SCOPED_TRACE(std::string(o.name));
    const std::string text = testing::SampleText(o, kOtherModel);
    hoist_load_options c;
    hoist_load_options_init(&c);
    c.model = kModel;
    ASSERT_EQ(hoist_load_options_set(&c, std::string(o.name).c_str(), text.c_str()), HOIST_OK)
        << hoist_last_error();
    EXPECT_EQ(ResolvedC(c), testing::ResolvedThroughTable(o, text, kModel));
  }
}

TEST(EmbedOptions, CApiFieldsUseTheirSentinels) {
  hoist_load_options c;
  hoist_load_options_init(&c);
  c.model = kModel;
  LoadOptions unset;
  ASSERT_TRUE(internal::FromC(c, &unset).ok());
  EXPECT_FALSE(unset.ep || unset.tp || unset.verify || unset.numa || unset.peer_timeout_s ||
               unset.pinning || unset.slots || unset.read_depth_mib);
  c.ep = 0;              // explicit "off", not unset
  c.read_depth_mib = 0;  // likewise: the ring only, not the node's default
  c.numa = 0;            // explicit false
  c.verify = 1;
  c.pinning = "mallochost";
  c.peer_timeout_s = 2.5;
  c.slot_mib = 3;
  LoadOptions set;
  ASSERT_TRUE(internal::FromC(c, &set).ok());
  EXPECT_EQ(set.ep, 0);
  EXPECT_EQ(set.numa, false);
  EXPECT_EQ(set.verify, true);
  EXPECT_EQ(set.pinning, "mallochost");
  EXPECT_EQ(set.peer_timeout_s, 2.5);
  EXPECT_EQ(set.slot_mib, 3);
  EXPECT_EQ(set.read_depth_mib, 0);
}

TEST(EmbedOptions, CApiRefusesUnknownKeysAndBadValuesNamingThem) {
  hoist_load_options c;
  hoist_load_options_init(&c);
  EXPECT_EQ(hoist_load_options_set(&c, "slot_mb", "3"), HOIST_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hoist_last_error())
                .find("unknown option 'slot_mb' (did you mean "
                      "'slot_mib'?)"),
            std::string::npos)
      << hoist_last_error();
  EXPECT_EQ(hoist_load_options_set(&c, "staging", "register"), HOIST_INVALID_ARGUMENT);
  EXPECT_EQ(hoist_load_options_set(&c, "slots", "three"), HOIST_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hoist_last_error()).find("slots takes a whole number"), std::string::npos)
      << hoist_last_error();
  EXPECT_EQ(c.slots, HOIST_UNSET);  // untouched
  EXPECT_EQ(hoist_load_options_set(&c, "verify", "maybe"), HOIST_INVALID_ARGUMENT);
  EXPECT_EQ(hoist_load_options_set(nullptr, "tp", "2"), HOIST_INVALID_ARGUMENT);
  EXPECT_EQ(hoist_load_options_set(&c, "numa", "false"), HOIST_OK);
  EXPECT_EQ(c.numa, 0);
}

// The public by-name entry points (include/hoist/hoist.h: JobOptions, FindJobOption,
// SetJobOption, DescribeLoad), which the Python module uses: the table's rows as they are, and a
// value set by name resolves as the table's own accessor resolves its text.
JobOptionValue SampleValue(const config::OptionInfo& o, const std::string& text) {
  switch (o.type) {
    case config::OptionType::kString:
      return text;
    case config::OptionType::kInt:
      return static_cast<std::int64_t>(std::stoll(text));
    case config::OptionType::kDouble:
      return std::stod(text);
    case config::OptionType::kBool:
      return text == "true" || text == "1";
  }
  return text;
}

TEST(EmbedOptions, EveryOptionIsSetByNameThroughThePublicApi) {
  ASSERT_EQ(JobOptions().size(), std::size(config::kOptions));
  for (const config::OptionInfo& o : config::kOptions) {
    SCOPED_TRACE(std::string(o.name));
    const JobOptionInfo* info = FindJobOption(o.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->name, o.name);
    EXPECT_EQ(static_cast<int>(info->type), static_cast<int>(o.type));
    EXPECT_EQ(info->choices, o.choices);
    EXPECT_EQ(info->default_is, o.default_is);
    const std::string text = testing::SampleText(o, kOtherModel);
    LoadOptions lo;
    lo.model = kModel;
    ASSERT_TRUE(SetJobOption(&lo, o.name, SampleValue(o, text)).ok());
    Result<std::string> got = DescribeLoad(lo);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, testing::ResolvedThroughTable(o, text, kModel));
  }
}

TEST(EmbedOptions, SetJobOptionRefusesUnknownNamesAndOtherTypes) {
  LoadOptions o;
  EXPECT_EQ(FindJobOption("slot_mb"), nullptr);
  EXPECT_EQ(NearestJobOption("slot_mb"), "slot_mib");
  EXPECT_EQ(NearestJobOption("zzzzzzzz"), "");
  Status s = SetJobOption(&o, "slot_mb", std::int64_t{3});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown option 'slot_mb' (did you mean 'slot_mib'?)"),
            std::string::npos)
      << s.ToString();
  EXPECT_FALSE(SetJobOption(&o, "tp", std::string("2")).ok());
  EXPECT_FALSE(SetJobOption(&o, "verify", std::int64_t{1}).ok());
  EXPECT_FALSE(SetJobOption(&o, "tp", std::int64_t{1} << 40).ok());
  EXPECT_FALSE(o.tp || o.verify);                                         // untouched
  ASSERT_TRUE(SetJobOption(&o, "peer_timeout_s", std::int64_t{7}).ok());  // a whole number will do
  EXPECT_EQ(o.peer_timeout_s, 7.0);
  o.model = kModel;
  o.threads = 100000;  // DescribeLoad checks ranges as Load does
  EXPECT_EQ(DescribeLoad(o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoist
