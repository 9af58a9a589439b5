// `hoist pack`: every packed tensor of every family's tiny preset decodes to the original bytes
// (read by the tests' own safetensors reader), through planner::ReadPackedIndex and
// tools::ReadPackedTensor; exactly the row-parallel BF16/FP8 tensors (o_proj, down_proj, expert
// down_proj: picked here by name, not by the planner's rules) are column stripes, and each
// stripe's stream alone decodes to those columns of the original; row blocks tile
// tensor-parallel row slices; damaged packed data and bad input are refused with an error naming
// the file and tensor; the `hoist pack` subcommand's exit codes.
#include "codec/pack/pack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "planner/safetensors.h"
#include "tests/codec/codec_data.h"
#include "tests/launch/mpirun_util.h"
#include "tests/test_paths.h"
#include "tests/tools/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::tools {
namespace {

using testtools::ReadCheckpoint;
using testtools::ReadFile;
using testtools::ScratchDir;

nlohmann::json Index(const std::string& dir) {
  return nlohmann::json::parse(ReadFile(dir + "/" + planner::kPackedIndexFile));
}

void MakeModel(const std::string& preset, const std::string& out, std::uint64_t shard_size) {
  MkckptOptions m;
  m.preset = preset;
  m.out_dir = out;
  m.shard_size = shard_size;
  m.seed = 5;
  m.threads = 2;
  const Status s = MakeCheckpoint(m);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

PackSummary PackInto(const std::string& model, const std::string& out, std::uint32_t tp_multiple) {
  PackOptions p;
  p.model_dir = model;
  p.out_dir = out;
  p.tp_multiple = tp_multiple;
  p.shard_bytes = 256 << 10;  // several packed shards
  p.threads = 2;
  auto summary = PackCheckpoint(p);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  return summary.ok() ? *summary : PackSummary{};
}

std::string Pack(const ScratchDir& dir, const std::string& preset, std::uint64_t shard_size) {
  MakeModel(preset, dir.Sub("model"), shard_size);
  PackInto(dir.Sub("model"), dir.Sub("packed"), 8);
  return dir.Sub("packed");
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The independent rule: row-parallel weights of a coded dtype (BF16, F16, FP8) whose row `tp`
// divides.
bool ShouldStripe(const testtools::StTensor& t, std::uint64_t tp) {
  return tp > 1 &&
         (t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F8_E4M3" || t.dtype == "F8_E5M2") &&
         t.shape.size() == 2 && t.shape[1] % tp == 0 &&
         (EndsWith(t.name, ".o_proj.weight") || EndsWith(t.name, ".down_proj.weight"));
}

// Columns [c0, c1) of every row of a 2-D tensor.
std::vector<std::uint8_t> Columns(const testtools::StTensor& t, std::uint64_t c0,
                                  std::uint64_t c1) {
  const std::uint64_t vb = testtools::DtypeSize(t.dtype), w = t.shape[1];
  std::vector<std::uint8_t> out;
  for (std::uint64_t r = 0; r < t.shape[0]; ++r) {
    const auto* row = t.data.data() + (r * w + c0) * vb;
    out.insert(out.end(), row, row + (c1 - c0) * vb);
  }
  return out;
}

// Stream `s` of `e` decoded alone from the shard's bytes.
std::vector<std::uint8_t> DecodeStream(const planner::PackedIndex& index,
                                       const planner::PackedTensorEntry& e,
                                       const planner::PackedStreamEntry& s) {
  const std::string bytes =
      ReadFile(index.dir + "/" + index.shards[e.shard]).substr(s.offset, s.bytes);
  const std::span<const std::uint8_t> stream(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                             bytes.size());
  auto info = codec::ParseStream(stream, e.name);
  if (!info.ok()) {
    ADD_FAILURE() << info.status().ToString();
    return {};
  }
  std::vector<std::uint8_t> out(info->original_bytes);
  const Status st = codec::Decode(stream, out, e.name);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

// Checks every tensor of the packed folder against the original model; returns how many are
// striped.
int CheckPacked(const std::string& model, const std::string& packed, std::uint64_t tp) {
  const auto original = ReadCheckpoint(model);
  auto index = planner::ReadPackedIndex(packed);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  if (!index.ok()) return -1;
  EXPECT_EQ(index->tensors.size(), original.size());
  EXPECT_EQ(index->tp_multiple, tp);
  int striped = 0;
  for (const planner::PackedTensorEntry& e : index->tensors) {
    SCOPED_TRACE(e.name);
    if (original.count(e.name) != 1) {
      ADD_FAILURE() << "not in the original";
      continue;
    }
    const testtools::StTensor& t = original.at(e.name);
    auto got = ReadPackedTensor(*index, e.name);
    if (!got.ok()) {
      ADD_FAILURE() << got.status().ToString();
      continue;
    }
    EXPECT_EQ(got->dtype, t.dtype);
    EXPECT_EQ(got->shape, t.shape);
    EXPECT_TRUE(got->data == t.data);
    EXPECT_EQ(e.xxh64, codec::Xxh64(t.data.data(), t.data.size()));
    for (const auto& s : e.streams) EXPECT_EQ(s.offset % 4096, 0u);
    if (!ShouldStripe(t, tp)) {
      EXPECT_EQ(e.streams.size(), 1u);
      EXPECT_EQ(e.streams[0].col_begin, 0u);
      EXPECT_EQ(e.streams[0].col_end, e.row_values);
      continue;
    }
    ++striped;
    if (e.streams.size() != tp) {
      ADD_FAILURE() << e.streams.size() << " streams, expected " << tp;
      continue;
    }
    const std::uint64_t w = t.shape[1];
    for (std::uint64_t s = 0; s < tp; ++s) {
      EXPECT_EQ(e.streams[s].col_begin, s * w / tp);
      EXPECT_EQ(e.streams[s].col_end, (s + 1) * w / tp);
      EXPECT_TRUE(DecodeStream(*index, e, e.streams[s]) == Columns(t, s * w / tp, (s + 1) * w / tp))
          << "stripe " << s;
    }
  }
  return striped;
}

TEST(Pack, EveryTensorOfEveryFamilyDecodesToTheOriginal) {
  for (const std::string preset :
       {"qwen3-tiny", "llama-tiny", "qwen3-moe-tiny", "deepseek-v3-tiny"}) {
    SCOPED_TRACE(preset);
    ScratchDir dir("hoist-pack");
    MakeModel(preset, dir.Sub("model"), 300000);
    const PackSummary summary = PackInto(dir.Sub("model"), dir.Sub("packed"), 8);
    const int striped = CheckPacked(dir.Sub("model"), dir.Sub("packed"), 8);
    EXPECT_EQ(static_cast<int>(summary.striped), striped);
    EXPECT_TRUE(summary.note.empty()) << summary.note;
    EXPECT_GE(striped, 4);  // o_proj and down_proj of two layers at least (DeepSeek's: FP8)
    EXPECT_TRUE(std::filesystem::exists(dir.Sub("packed/config.json")));
    EXPECT_TRUE(std::filesystem::exists(dir.Sub("packed/packed-00002.bin")));
    EXPECT_FALSE(std::filesystem::exists(dir.Sub("packed/model.safetensors.index.json")));
  }
}

TEST(Pack, CodedTensorsShrink) {
  ScratchDir dir("hoist-pack");
  const std::string packed = Pack(dir, "llama-tiny", 0);
  const auto original = ReadCheckpoint(dir.Sub("model"));
  const auto index = Index(packed);
  std::uint64_t stream_bytes = 0, bf16_bytes = 0;
  for (const auto& [name, t] : original) {
    if (t.dtype != "BF16") continue;
    for (const auto& s : index["tensors"][name]["streams"]) stream_bytes += s["bytes"].get<int>();
    bf16_bytes += t.data.size();
  }
  // Tiny tensors in blocks of a few rows carry framing (a 300-byte header per stream,
  // sub-stream lengths per block): 72% holds for realistic sizes (tests/codec), here the streams
  // alone stay under 80%.
  EXPECT_LT(static_cast<double>(stream_bytes) / static_cast<double>(bf16_bytes), 0.8);
}

// Block-quantized FP8 weights (hoist-mkckpt's) are coded, striped where row-parallel, below 87%
// of their bytes; the summary's FP8 line holds the sizes and the bound computed here.
TEST(Pack, Fp8WeightsAreCodedAndTheSummaryHoldsTheirBound) {
  ScratchDir dir("hoist-pack");
  MakeModel("qwen3-fp8-tiny", dir.Sub("model"), 0);
  const PackSummary summary = PackInto(dir.Sub("model"), dir.Sub("packed"), 8);
  const auto original = ReadCheckpoint(dir.Sub("model"));
  const auto index = planner::ReadPackedIndex(dir.Sub("packed"));
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  std::uint64_t f8 = 0, f8_bytes = 0, packed_bytes = 0, all_streams = 0, all_bytes = 0;
  double bound = 0;
  for (const planner::PackedTensorEntry& e : index->tensors) {
    all_bytes += e.original_bytes;
    for (const planner::PackedStreamEntry& s : e.streams) all_streams += s.bytes;
    if (e.dtype != "F8_E4M3") continue;
    ++f8;
    f8_bytes += e.original_bytes;
    bound += codec::testing::Fp8BoundBytes(original.at(e.name).data);
    for (const planner::PackedStreamEntry& s : e.streams) {
      packed_bytes += s.bytes;
      EXPECT_EQ(s.header[7], static_cast<char>(codec::Method::kHuffman)) << e.name;
    }
  }
  ASSERT_GT(f8, 0u);
  // The summary's two totals: the streams the index lists, and the files (at least as large).
  EXPECT_EQ(summary.original_bytes, all_bytes);
  EXPECT_EQ(summary.coded_bytes(), all_streams);
  EXPECT_GE(summary.packed_bytes, summary.coded_bytes());
  EXPECT_LT(static_cast<double>(packed_bytes), 0.87 * static_cast<double>(f8_bytes));
  EXPECT_GT(static_cast<double>(packed_bytes), bound);
  const auto it = std::find_if(summary.by_dtype.begin(), summary.by_dtype.end(),
                               [](const PackSizes& d) { return d.name == "F8_E4M3"; });
  ASSERT_NE(it, summary.by_dtype.end());
  EXPECT_EQ(it->tensors, f8);
  EXPECT_EQ(it->coded, f8);
  EXPECT_EQ(it->original_bytes, f8_bytes);
  EXPECT_EQ(it->packed_bytes, packed_bytes);
  EXPECT_NEAR(it->bound_bytes, bound, 1e-6 * bound);
  ASSERT_FALSE(summary.furthest.empty());
  EXPECT_LE(summary.furthest.size(), 3u);
  for (std::size_t i = 1; i < summary.furthest.size(); ++i) {
    const auto excess = [](const PackSizes& t) {
      return static_cast<double>(t.packed_bytes) - t.bound_bytes;
    };
    EXPECT_GE(excess(summary.furthest[i - 1]), excess(summary.furthest[i]));
  }
}

TEST(Pack, StripesFollowTheTpMultiple) {
  ScratchDir dir("hoist-pack");
  MakeModel("qwen3-tiny", dir.Sub("model"), 0);
  for (std::uint32_t tp : {1u, 2u, 4u, 3u}) {
    SCOPED_TRACE(tp);
    const std::string out = dir.Sub("packed-" + std::to_string(tp));
    const PackSummary summary = PackInto(dir.Sub("model"), out, tp);
    const int striped = CheckPacked(dir.Sub("model"), out, tp);
    EXPECT_EQ(static_cast<int>(summary.striped), striped);
    // qwen3-tiny rows of o_proj (256) and down_proj (128): 3 divides neither.
    EXPECT_EQ(striped, tp == 1 || tp == 3 ? 0 : 4);
  }
}

TEST(Pack, AModelOfNoKnownFamilyIsPackedWithoutStripes) {
  ScratchDir dir("hoist-pack");
  MakeModel("qwen3-tiny", dir.Sub("model"), 0);
  auto config = nlohmann::json::parse(ReadFile(dir.Sub("model/config.json")));
  config["model_type"] = "gpt_neox";
  config["architectures"] = {"GPTNeoXForCausalLM"};  // the architecture selects a family first
  std::ofstream(dir.Sub("model/config.json"), std::ios::trunc) << config.dump();
  const PackSummary summary = PackInto(dir.Sub("model"), dir.Sub("packed"), 8);
  EXPECT_EQ(summary.striped, 0u);
  EXPECT_NE(summary.note.find("no column stripes"), std::string::npos) << summary.note;
  EXPECT_NE(summary.note.find("gpt_neox"), std::string::npos) << summary.note;
  for (const auto& [name, t] : Index(dir.Sub("packed"))["tensors"].items()) {
    EXPECT_EQ(t["streams"].size(), 1u) << name;
  }
  for (const auto& [name, t] : ReadCheckpoint(dir.Sub("model"))) {
    auto got = ReadPackedTensor(dir.Sub("packed"), name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got->data == t.data) << name;
  }
}

// Empty tensors, a scalar and dtypes the codec does not know (stored as bytes) round-trip; no
// config.json: no stripes, and the summary says why.
TEST(Pack, OddShapesAndDtypesRoundTrip) {
  ScratchDir dir("hoist-pack");
  std::filesystem::create_directories(dir.Sub("model"));
  const std::vector<std::tuple<std::string, std::string, std::vector<std::uint64_t>, int>> specs = {
      {"empty.rows", "BF16", {0, 8}, 2}, {"empty.cols", "BF16", {4, 0}, 2},
      {"scalar", "BF16", {}, 2},         {"ints", "I32", {5}, 4},
      {"doubles", "F64", {2, 3}, 8},     {"bytes", "U8", {7}, 1}};
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, dtype, shape, size] : specs) {
    std::uint64_t n = static_cast<std::uint64_t>(size);
    for (std::uint64_t d : shape) n *= d;
    header[name] = {
        {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + n}}};
    for (std::uint64_t i = 0; i < n; ++i) data.push_back(static_cast<char>(i * 37 + name.size()));
  }
  const std::string text = header.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::ofstream(dir.Sub("model/model.safetensors"), std::ios::binary) << file + text + data;
  const PackSummary summary = PackInto(dir.Sub("model"), dir.Sub("packed"), 8);
  EXPECT_EQ(summary.tensors, specs.size());
  EXPECT_NE(summary.note.find("config.json"), std::string::npos) << summary.note;
  for (const auto& [name, t] : ReadCheckpoint(dir.Sub("model"))) {
    auto got = ReadPackedTensor(dir.Sub("packed"), name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->dtype, t.dtype) << name;
    EXPECT_EQ(got->shape, t.shape) << name;
    EXPECT_TRUE(got->data == t.data) << name;
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
  auto index = planner::ReadPackedIndex(packed);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  for (const auto& e : index->tensors) {
    for (const auto& s : e.streams) {
      if (e.shape.size() < 2 || s.block_rows == 0) continue;
      const auto bytes =
          ReadFile(index->dir + "/" + index->shards[e.shard]).substr(s.offset, s.bytes);
      auto info = codec::ParseStream(
          {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, e.name);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->block_values, s.block_rows * (s.col_end - s.col_begin)) << e.name;
      EXPECT_EQ(e.shape[0] % 8 == 0 ? e.shape[0] / 8 % s.block_rows : 0u, 0u) << e.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 5);
}

TEST(Pack, DamagedPackedDataIsRefusedByName) {
  ScratchDir dir("hoist-pack");
  const std::string packed = Pack(dir, "qwen3-tiny", 0);
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  const auto t = Index(packed)["tensors"][name];
  ASSERT_EQ(t["streams"].size(), 8u);  // striped
  const std::string shard = packed + "/" + t["file"].get<std::string>();
  const std::string good = ReadFile(shard);
  auto write = [&](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  };
  auto expect = [&](Code code, const std::vector<std::string>& words) {
    auto got = ReadPackedTensor(packed, name);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), code) << got.status().ToString();
    for (const std::string& w : words) {
      EXPECT_NE(got.status().message().find(w), std::string::npos) << got.status().ToString();
    }
  };
  // A payload byte of the third stripe: the decoder's block checksum.
  const auto s2 = t["streams"][2];
  const std::uint64_t at = s2["offset"].get<std::uint64_t>() + s2["bytes"].get<std::uint64_t>();
  std::string bad = good;
  bad[at - 5] ^= 0x10;
  write(shard, bad);
  expect(Code::kCorrupt, {t["file"].get<std::string>(), name,
                          "stream at offset " + std::to_string(s2["offset"].get<std::uint64_t>()),
                          "codec stream: byte "});
  write(shard, good.substr(0, t["streams"][0]["offset"].get<std::uint64_t>() + 100));
  expect(Code::kCorrupt, {"runs past the end", t["file"].get<std::string>()});
  write(shard, good);
  ASSERT_TRUE(ReadPackedTensor(packed, name).ok());
  auto index = Index(packed);
  index["tensors"][name]["xxh64"] = "0123456789abcdef";
  write(packed + "/" + planner::kPackedIndexFile, index.dump());
  expect(Code::kCorrupt, {"xxh64", name, t["file"].get<std::string>()});
  write(packed + "/" + planner::kPackedIndexFile, "{\"format\": ");
  expect(Code::kCorrupt, {planner::kPackedIndexFile});
  EXPECT_EQ(ReadPackedTensor(dir.Sub("model"), name).status().code(), Code::kNotFound);
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
  p.out_dir = dir.Sub("out");
  p.threads = -1;
  EXPECT_EQ(PackCheckpoint(p).status().code(), Code::kInvalidArgument);
  p.threads = 0;
  // A tensor past its file's end.
  std::filesystem::create_directories(dir.Sub("bad"));
  const std::string header =
      R"({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header + std::string(16, '\1');
  std::ofstream(dir.Sub("bad/model.safetensors"), std::ios::binary) << file;
  p.model_dir = dir.Sub("bad");
  const Status s = PackCheckpoint(p).status();
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("model.safetensors: tensor \"w\""), std::string::npos) << s.ToString();
}

// The packer reads shards through the loader's own validation: whatever `hoist load` refuses,
// `hoist pack` refuses with the same message (it used to pack them, laundering the defect).
TEST(Pack, RefusesWhatTheLoaderRefusesWithItsMessage) {
  ScratchDir dir("hoist-pack");
  const std::string w = R"("w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]})";
  const std::string v = R"("v": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]})";
  struct Case {
    const char* what;
    std::string header;
    std::size_t data;
  };
  const std::vector<Case> cases = {
      {"duplicate key", "{" + w + ", " + w + "}", 4},
      {"aliased range",
       "{" + w + R"(, "v": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 4},
      {"array metadata", R"({"__metadata__": [1], )" + w + "}", 4},
      {"trailing bytes", "{" + w + ", " + v + "}", 12},
      {"text after a NUL", "{" + w + "}" + std::string(1, '\0') + "junk", 4},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string model = dir.Sub("m" + std::to_string(n++));
    std::filesystem::create_directories(model);
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((c.header.size() >> (8 * i)) & 0xFF);
    file += c.header + std::string(c.data, '\x05');
    const std::string path = model + "/model.safetensors";
    std::ofstream(path, std::ios::binary) << file;
    const Result<planner::SafetensorsHeader> load = planner::ReadSafetensorsHeader(path, nullptr);
    ASSERT_FALSE(load.ok()) << "the loader accepts it";
    PackOptions p;
    p.model_dir = model;
    p.out_dir = model + "-packed";
    const Status s = PackCheckpoint(p).status();
    EXPECT_EQ(s.code(), load.status().code()) << s.ToString();
    EXPECT_EQ(s.message(), load.status().message());
  }
}

// `hoist pack`: 0 written, 1 a bad checkpoint, 2 a usage error.
TEST(PackCommand, ExitCodes) {
  ScratchDir dir("hoist-pack");
  MakeModel("qwen3-tiny", dir.Sub("model"), 0);
  const std::string hoist = hoist::testing::HoistBin();
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {hoist, "pack"};
    argv.insert(argv.end(), args.begin(), args.end());
    return hoist::testing::RunCommand(argv, 120);
  };
  auto ok = run({"--model", dir.Sub("model"), "--out", dir.Sub("packed"), "--threads", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("24 tensors (4 in column stripes)"), std::string::npos) << ok.output;
  EXPECT_EQ(CheckPacked(dir.Sub("model"), dir.Sub("packed"), 8), 4);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--model", dir.Sub("missing"), "--out", dir.Sub("x")},
           {"--model", dir.Sub("model"), "--out", dir.Sub("model")},
           {"--model", dir.Sub("model"), "--out", dir.Sub("x"), "--tp-multiple", "0"},
           {"--model", dir.Sub("model"), "--out", dir.Sub("x"), "--tp-multiple", "2000"},
           {"--model", dir.Sub("model"), "--out", dir.Sub("x"), "--shard-gib", "0"},
           {"--model", dir.Sub("model"), "--out", dir.Sub("x"), "--threads", "-3"},
           {"--model", dir.Sub("model"), "--out", dir.Sub("x"), "--shard-gb", "1"},
           {"--model", dir.Sub("model")}}) {
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.output;
    EXPECT_NE(r.output.find("hoist: error: "), std::string::npos) << r.output;
  }
  // A checkpoint whose tensor runs past its file's end: exit 1 naming file and tensor.
  std::filesystem::create_directories(dir.Sub("bad"));
  std::filesystem::copy(dir.Sub("model/config.json"), dir.Sub("bad/config.json"));
  const std::string header =
      R"({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header + std::string(16, '\1');
  std::ofstream(dir.Sub("bad/model.safetensors"), std::ios::binary) << file;
  auto bad = run({"--model", dir.Sub("bad"), "--out", dir.Sub("bad-packed")});
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("model.safetensors: tensor \"w\""), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace hoist::tools

namespace hoist::tools {
namespace {

// A packed copy loads exactly the bytes of the original: a vision-language checkpoint's text
// model (the packed index names its tensors as the checkpoint; the vision tower's are never
// read), and gpt_oss's experts in one tensor a layer, whose sliced rows the plan coalesces with
// the bias stored right after them (one strided copy across two tensors, split by stream).
TEST(PackCommand, PackedCopiesLoadLikeTheOriginal) {
  struct Case {
    const char* data;
    const char* layout;
  };
  for (const Case& k : {Case{"hf/gemma3_vlm", "fused"}, Case{"hf/gpt_oss", "hf"},
                        Case{"quant/gpt_oss_mxfp4", "fused"}}) {
    SCOPED_TRACE(k.data);
    testtools::ScratchDir dir("hoist-pack");
    const std::string data = hoist::testing::SourceDir() + "/tests/data/" + k.data;
    MkckptOptions m;
    m.config_path = data + "/config.json";
    m.tensors_path = data + "/tensors.json";
    m.out_dir = dir.Sub("model");
    m.threads = 2;
    ASSERT_TRUE(MakeCheckpoint(m).ok());
    const std::string hoist = hoist::testing::HoistBin();
    using hoist::testing::RunCommand;
    using hoist::testing::RunResult;
    RunResult pack =
        RunCommand({hoist, "pack", "--model", dir.Sub("model"), "--out", dir.Sub("packed")}, 60);
    ASSERT_EQ(pack.exit_code, 0) << pack.output;
    for (const char* rank : {"0", "1"}) {
      for (const char* model : {"model", "packed"}) {
        RunResult load =
            RunCommand({hoist, "load", "--model", dir.Sub(model), "--tp", "2", "--rank", rank,
                        "--layout", k.layout, "--device", "host", "--verify", "--no-progress",
                        "--dump", dir.Sub(std::string("dump-") + model)},
                       60);
        ASSERT_EQ(load.exit_code, 0) << model << ": " << load.output;
      }
      const std::string file = std::string("/rank-") + rank + ".safetensors";
      EXPECT_EQ(testtools::ReadFile(dir.Sub("dump-model") + file),
                testtools::ReadFile(dir.Sub("dump-packed") + file));
    }
  }
}

}  // namespace
}  // namespace hoist::tools
