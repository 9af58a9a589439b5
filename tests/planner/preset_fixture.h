// Test-only: hoist-mkckpt presets written once per test binary into a temp folder of the
// fixture's (removed when the suite ends), and a topology's rank places.
// Test code: a failed write or open is a gtest failure; not thread-safe (gtest runs a suite on
// one thread).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "tools/mkckpt.h"

namespace hoist::planner::testing {

// `nodes` nodes of `per_node` GPUs, ranks in order.
inline std::vector<RankLocation> Nodes(int nodes, int per_node) {
  std::vector<RankLocation> v;
  for (int n = 0; n < nodes; ++n) {
    for (int g = 0; g < per_node; ++g) {
      v.push_back({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(g)});
    }
  }
  return v;
}

// A suite's presets: Open(name) writes the preset on first use (header-only: data as sparse
// holes, in 158 shards like the DeepSeek-V3 measurement) and opens it with the planner.
class PresetSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                      ("hoist-presets-" + std::to_string(getpid())));
    std::filesystem::create_directories(*root_);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete root_;
    root_ = nullptr;
  }
  static Checkpoint Open(const std::string& preset, bool header_only = false) {
    const std::filesystem::path dir = *root_ / preset;
    if (!std::filesystem::exists(dir)) {
      tools::MkckptOptions o;
      o.preset = preset;
      o.out_dir = dir.string();
      o.header_only = header_only;
      o.threads = 2;
      if (header_only) o.shard_size = 4'300'000'000ull;
      const Status s = tools::MakeCheckpoint(o);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    Result<Checkpoint> ckpt = OpenCheckpoint(dir.string());
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    return std::move(ckpt).value();
  }

 private:
  static inline std::filesystem::path* root_ = nullptr;
};

}  // namespace hoist::planner::testing
