// hoist-pack: every packed tensor decodes to the original bytes (read by the tests' own
// safetensors reader), row blocks tile tensor-parallel row slices, and damaged packed data or
// bad input is refused with an error naming the file and tensor.
#include "tools/pack.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "codec/codec.h"
#include "tests/tools/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::tools {
namespace {

using testtools::ReadCheckpoint;
using testtools::ReadFile;
using testtools::ScratchDir;

nlohmann::json Index(const std::string& dir) {
  return nlohmann::json::parse(ReadFile(dir + "/" + kPackedIndexName));
}

std::string Pack(const ScratchDir& dir, const std::string& preset, std::uint64_t shard_size) {
  MkckptOptions m;
  m.preset = preset;
  m.out_dir = dir.Sub("model");
  m.shard_size = shard_size;
  m.seed = 5;
  EXPECT_TRUE(MakeCheckpoint(m).ok());
  PackOptions p;
  p.model_dir = m.out_dir;
  p.out_dir = dir.Sub("packed");
  p.shard_bytes = 256 << 10;  // several packed shards
  p.threads = 2;
  auto summary = PackCheckpoint(p);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  return p.out_dir;
}

TEST(Pack, EveryTensorDecodesToTheOriginal) {
  for (const std::string preset : {"qwen3-tiny", "deepseek-v3-tiny"}) {
    SCOPED_TRACE(preset);
    ScratchDir dir("hoist-pack");
    const std::string packed = Pack(dir, preset, 300000);
    const auto original = ReadCheckpoint(dir.Sub("model"));
    const auto index = Index(packed);
    EXPECT_EQ(index.at("tensors").size(), original.size());
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_dtype;  // packed, original
    for (const auto& [name, t] : original) {
      auto got = ReadPackedTensor(packed, name);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->dtype, t.dtype) << name;
      EXPECT_EQ(got->shape, t.shape) << name;
      EXPECT_TRUE(got->data == t.data) << name;
      by_dtype[t.dtype].first += index["tensors"][name]["bytes"].get<std::uint64_t>();
      by_dtype[t.dtype].second += t.data.size();
    }
    // Tiny tensors in blocks of 8-16 rows (tp multiple 8) carry framing (a 300-byte header per
    // tensor, sub-stream lengths per block): 72% holds for realistic sizes (tests/codec), here
    // the streams alone stay under 75%.
    const auto bf16 = by_dtype.at("BF16");
    EXPECT_LT(static_cast<double>(bf16.first) / static_cast<double>(bf16.second), 0.75);
    EXPECT_TRUE(std::filesystem::exists(packed + "/config.json"));
    EXPECT_TRUE(std::filesystem::exists(packed + "/packed-00002.bin"));
  }
}

TEST(Pack, BlockRowsDivideEveryTpSlice) {
  // Brute force: the largest r <= max(1, 65536 / row) dividing rows / 8 (or rows).
  for (auto [rows, row] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {9728, 2560}, {151936, 2560}, {2560, 9728}, {1000, 64}, {7, 100}, {1024, 70000}}) {
    const std::uint64_t r = PackBlockRows(rows, row, 65536, 8);
    const std::uint64_t span = rows % 8 == 0 ? rows / 8 : rows;
    std::uint64_t want = 1;
    for (std::uint64_t c = 1; c <= std::max<std::uint64_t>(1, 65536 / row); ++c) {
      if (span % c == 0) want = c;
    }
    EXPECT_EQ(r, want) << rows << " x " << row;
    for (std::uint64_t tp : {1, 2, 4, 8}) {
      if (rows % 8 == 0) {
        EXPECT_EQ(rows / tp % r, 0u) << rows << " x " << row << " tp " << tp;
      }
    }
  }
  EXPECT_EQ(PackBlockRows(16, 2u << 20, 65536, 8), 0u);  // a row longer than any block
}

TEST(Pack, StreamsUseTheIndexedRowBlocks) {
  ScratchDir dir("hoist-pack");
  const std::string packed = Pack(dir, "qwen3-tiny", 0);
  int checked = 0;
  const auto index = Index(packed);
  for (const auto& [name, t] : index.at("tensors").items()) {
    const auto shape = t.at("shape").get<std::vector<std::uint64_t>>();
    const std::uint64_t rows = t.at("block_rows");
    if (shape.size() < 2 || rows == 0) continue;
    const std::string bytes = ReadFile(packed + "/" + t.at("file").get<std::string>())
                                  .substr(t.at("offset"), t.at("bytes"));
    auto info = codec::ParseStream(
        {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, name);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->block_values, rows * (info->values / shape[0])) << name;
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

TEST(Pack, DamagedPackedDataIsRefusedByName) {
  ScratchDir dir("hoist-pack");
  const std::string packed = Pack(dir, "qwen3-tiny", 0);
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  const auto t = Index(packed)["tensors"][name];
  const std::string shard = packed + "/" + t["file"].get<std::string>();
  const std::string good = ReadFile(shard);
  auto write = [&](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  };
  auto expect = [&](Code code, const std::string& what) {
    auto got = ReadPackedTensor(packed, name);
    ASSERT_FALSE(got.ok()) << what;
    EXPECT_EQ(got.status().code(), code) << got.status().ToString();
    EXPECT_NE(got.status().message().find(what), std::string::npos) << got.status().ToString();
    EXPECT_NE(got.status().message().find(name), std::string::npos) << got.status().ToString();
  };
  std::string bad = good;
  bad[t["offset"].get<std::uint64_t>() + t["bytes"].get<std::uint64_t>() - 5] ^= 0x10;
  write(shard, bad);
  expect(Code::kCorrupt, t["file"].get<std::string>());
  write(shard, good.substr(0, t["offset"].get<std::uint64_t>() + 100));
  expect(Code::kCorrupt, "past the file's end");
  write(shard, good);
  ASSERT_TRUE(ReadPackedTensor(packed, name).ok());
  auto index = Index(packed);
  index["tensors"][name]["xxh64"] = "0123456789abcdef";
  write(packed + "/" + kPackedIndexName, index.dump());
  expect(Code::kCorrupt, "xxh64");
  write(packed + "/" + kPackedIndexName, "{\"format\": ");
  EXPECT_EQ(ReadPackedTensor(packed, name).status().code(), Code::kCorrupt);
  EXPECT_NE(ReadPackedTensor(packed, name).status().message().find(kPackedIndexName),
            std::string::npos);
}

TEST(Pack, BadInputAndOptions) {
  ScratchDir dir("hoist-pack");
  PackOptions p;
  p.model_dir = dir.Sub("missing");
  p.out_dir = dir.Sub("out");
  EXPECT_EQ(PackCheckpoint(p).status().code(), Code::kInvalidArgument);
  std::filesystem::create_directories(dir.Sub("empty"));
  p.model_dir = dir.Sub("empty");
  EXPECT_EQ(PackCheckpoint(p).status().code(), Code::kInvalidArgument);
  p.out_dir = dir.Sub("empty");
  EXPECT_EQ(PackCheckpoint(p).status().code(), Code::kInvalidArgument);
  // A tensor past its file's end.
  std::filesystem::create_directories(dir.Sub("bad"));
  const std::string header =
      R"({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header + std::string(16, '\1');
  std::ofstream(dir.Sub("bad/model.safetensors"), std::ios::binary) << file;
  p.model_dir = dir.Sub("bad");
  p.out_dir = dir.Sub("out");
  const Status s = PackCheckpoint(p).status();
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("model.safetensors: tensor w"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace hoist::tools
