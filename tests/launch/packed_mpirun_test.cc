// End-to-end loads of packed checkpoints (docs/PACKED.md): `hoist pack` of tiny presets of each
// family, then `mpirun -np N hoist load` of the packed folder on the host backend (the decode
// jobs run on the CPU decoder), every rank's dump checked byte for byte against the independent
// reference computed from the ORIGINAL checkpoint; tp 1, 2 and 4, the hf layout, expert
// parallelism, dedup node, DeepSeek FP8; --verify; and what a user gets wrong (a damaged shard,
// a read mode that cannot decode).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/pack/pack.h"
#include "planner/packed_index.h"
#include "tests/launch/mpirun_util.h"
#include "tests/reference/reference.h"
#include "tests/test_paths.h"

namespace fs = std::filesystem;
using hoist::testing::RunCommand;
using hoist::testing::RunResult;

namespace {

class PackedMpirunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(hoist::testing::MakeFixtures(
        "hoist-packed", {"qwen3-tiny", "qwen3-moe-tiny", "deepseek-v3-tiny"}, 23));
    for (const char* preset : {"qwen3-tiny", "qwen3-moe-tiny", "deepseek-v3-tiny"}) {
      hoist::tools::PackOptions o;
      o.model_dir = (*root_ / preset).string();
      o.out_dir = Packed(preset).string();
      o.tp_multiple = 4;
      o.target_block_values = 1024;  // many blocks: slices start and end inside blocks
      o.threads = 2;
      const auto s = hoist::tools::PackCheckpoint(o);
      if (!s.ok()) ADD_FAILURE() << preset << ": " << s.status().ToString();
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  static fs::path Original(const char* preset) { return *root_ / preset; }
  static fs::path Packed(const char* preset) { return *root_ / (std::string(preset) + "-packed"); }
  fs::path Out(const std::string& name) {
    fs::path p = *root_ / name;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }

  RunResult Load(int np, const fs::path& model, const fs::path& out,
                 std::vector<std::string> extra) {
    std::vector<std::string> argv = {"mpirun",
                                     "-np",
                                     std::to_string(np),
                                     hoist::testing::HoistBin(),
                                     "load",
                                     "--model",
                                     model.string(),
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
                                     "--log-level",
                                     "warn",
                                     "--report-json",
                                     (out / "report.json").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, 240);
  }

  // Loads the packed copy of `preset` and compares every rank with the original's reference.
  void LoadAndCompare(int np, const char* preset, std::vector<std::string> extra,
                      hoist::testref::RefOptions ref, const std::string& name) {
    const fs::path out = Out(name);
    extra.push_back("--verify");
    const RunResult r = Load(np, Packed(preset), out, extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    hoist::testing::ExpectDumpsMatchReference(out, np, Original(preset).string(), ref);
    std::ifstream rj(out / "report.json");
    const nlohmann::json report = nlohmann::json::parse(rj);
    for (const auto& rank : report["ranks"]) {
      EXPECT_TRUE(rank["verified"].get<bool>());
      EXPECT_TRUE(rank["phases"].contains("decode")) << "rank " << rank["rank"];
      EXPECT_LT(rank["bytes_h2d"].get<std::uint64_t>(),
                rank["phases"]["total"]["bytes"].get<std::uint64_t>())
          << "compressed bytes cross the link, the arena gets the original bytes";
      EXPECT_EQ(rank["bytes_read_from_storage"], rank["bytes_read"])
          << "a packed rank reads stored bytes, not the logical bytes its copies address";
    }
    if (np == 1) {  // one rank reads every stored block once: within the packed files' size
      const std::uint64_t storage = report["ranks"][0]["bytes_read_from_storage"];
      EXPECT_GT(storage, 0u);
      EXPECT_LE(storage, FilesBytes(Packed(preset), ".bin"));
      EXPECT_LT(storage, FilesBytes(Original(preset), ".safetensors"));
    }
  }

  static std::uint64_t FilesBytes(const fs::path& dir, const std::string& extension) {
    std::uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == extension) n += e.file_size();
    }
    return n;
  }

  static fs::path* root_;
};

fs::path* PackedMpirunTest::root_ = nullptr;

TEST_F(PackedMpirunTest, OneRank) { LoadAndCompare(1, "qwen3-tiny", {}, {.tp = 1}, "p1"); }

TEST_F(PackedMpirunTest, Tp2HfLayout) {
  LoadAndCompare(2, "qwen3-tiny", {"--tp", "2", "--layout", "hf", "--dedup", "none"},
                 {.tp = 2, .fused = false}, "p2");
}

TEST_F(PackedMpirunTest, Tp4FusedWithDedupNode) {
  LoadAndCompare(4, "qwen3-tiny", {"--tp", "4", "--dedup", "node"}, {.tp = 4}, "p4");
}

TEST_F(PackedMpirunTest, Ep4) {
  LoadAndCompare(4, "qwen3-moe-tiny", {"--ep", "4"}, {.tp = 1, .ep = 4}, "pep4");
}

TEST_F(PackedMpirunTest, DeepseekFp8Ep2) {
  LoadAndCompare(2, "deepseek-v3-tiny", {"--ep", "2"}, {.tp = 1, .ep = 2}, "pds");
}

TEST_F(PackedMpirunTest, ADamagedShardFailsNamingTheTensor) {
  const fs::path copy = *root_ / "damaged";
  fs::remove_all(copy);
  fs::copy(Packed("qwen3-tiny"), copy);
  // A byte in the middle of the payload of the largest BF16 stream (coded: its block checksum
  // or its sub-streams catch it).
  const auto index = hoist::planner::ReadPackedIndex(copy.string());
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  const hoist::planner::PackedTensorEntry* big = nullptr;
  for (const auto& t : index->tensors) {
    if (t.dtype == "BF16" && (big == nullptr || t.original_bytes > big->original_bytes)) big = &t;
  }
  ASSERT_NE(big, nullptr);
  const auto& stream = big->streams[0];
  const fs::path shard = copy / index->shards[big->shard];
  const auto at = static_cast<std::streamoff>(stream.offset + stream.header.size() +
                                              (stream.bytes - stream.header.size()) / 2);
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  f.seekp(at);
  c = static_cast<char>(c ^ 0x5A);
  f.write(&c, 1);
  f.close();
  const RunResult r = Load(1, copy, Out("damaged-out"), {});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(shard.filename().string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(big->name), std::string::npos) << r.output;
}

TEST_F(PackedMpirunTest, PageableModeIsAUsageError) {
  const RunResult r = Load(1, Packed("qwen3-tiny"), Out("pageable"), {"--read", "pageable"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a packed checkpoint"), std::string::npos) << r.output;
}

}  // namespace
