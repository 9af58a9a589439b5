// The read modes (transport/reading/read_modes.h): their names round-trip and are the option's
// choices, and OpenSources opens what each mode reads with, for the used files only.
#include "transport/reading/read_modes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/transport/test_util.h"

namespace hoist::transport {
namespace {

using testtransport::Pattern;
using testtransport::ScratchDir;
using testtransport::WriteFile;

TEST(ReadModeTest, NamesRoundTrip) {
  for (ReadMode m : {ReadMode::kAuto, ReadMode::kBuffered, ReadMode::kDirect, ReadMode::kMmap,
                     ReadMode::kPageable, ReadMode::kRegistered}) {
    auto parsed = ParseReadMode(ReadModeName(m));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_FALSE(ParseReadMode("fast").has_value());
}

TEST(ReadModeTest, TheNameTableIsTheOptionsChoices) {
  EXPECT_EQ(kEnumChoices<kReadModeNames>,
            "auto | buffered | direct | mmap | pageable | registered");
  EXPECT_EQ(EnumNameList(kReadModeNames), "auto, buffered, direct, mmap, pageable or registered");
}

TEST(OpenSourcesTest, EachModeOpensItsSourcesForTheUsedFilesOnly) {
  ScratchDir dir;
  WriteFile(dir.Sub("a"), Pattern(8192, 1));
  WriteFile(dir.Sub("b"), Pattern(8192, 2));
  const std::vector<std::string> paths = {dir.Sub("a"), dir.Sub("b")};
  const std::vector<bool> used = {true, false};
  for (ReadMode mode : {ReadMode::kBuffered, ReadMode::kMmap, ReadMode::kAuto}) {
    SCOPED_TRACE(std::string(ReadModeName(mode)));
    Result<SourceSet> set = OpenSources(paths, used, mode);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->files.size(), 2u);
    ASSERT_NE(set->files[0].primary, nullptr);
    EXPECT_EQ(set->files[0].cold != nullptr, mode == ReadMode::kAuto) << "auto: a cold source too";
    EXPECT_EQ(set->files[1].primary, nullptr) << "an unused file is not opened";
    const std::vector<std::uint8_t> want = Pattern(8192, 1);
    std::vector<std::uint8_t> got(100);
    ASSERT_TRUE(set->files[0].primary->ReadAt(1000, got.data(), got.size()).ok());
    EXPECT_EQ(got, std::vector<std::uint8_t>(want.begin() + 1000, want.begin() + 1100));
  }
  EXPECT_EQ(OpenSources({dir.Sub("missing")}, {true}, ReadMode::kBuffered).status().code(),
            Code::kNotFound);
}

}  // namespace
}  // namespace hoist::transport
