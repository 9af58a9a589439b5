// Tests of OpenCheckpoint (planner/checkpoint.h) on checkpoint folders built here: single-file
// and sharded layouts, and every way an index or a folder can be wrong (missing shard, tensor
// missing from its shard, unmapped or duplicated tensors, paths leaving the folder, bad JSON).
// The tiny safetensors writer is written here, independently of tools/ and planner/.
#include "planner/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;

struct Spec {
  std::string name;
  std::string dtype;  // BF16, F32 or U8 here
  std::vector<std::uint64_t> shape;
};

std::uint64_t ElementSize(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16") return 2;
  return 1;
}

std::uint64_t Bytes(const Spec& s) {
  std::uint64_t n = ElementSize(s.dtype);
  for (auto d : s.shape) n *= d;
  return n;
}

// Writes a valid safetensors file holding `specs` back to back, with non-zero data.
void WriteSafetensors(const fs::path& path, const std::vector<Spec>& specs) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::uint64_t offset = 0;
  for (const Spec& s : specs) {
    std::string shape;
    for (std::size_t i = 0; i < s.shape.size(); ++i) {
      shape += (i ? "," : "") + std::to_string(s.shape[i]);
    }
    header += ",\"" + s.name + "\":{\"dtype\":\"" + s.dtype + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + Bytes(s)) + "]}";
    offset += Bytes(s);
  }
  header += "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  for (std::uint64_t i = 0; i < offset; ++i) bytes += static_cast<char>(1 + (i * 37 + 11) % 253);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// 8 + the header length stored in the file's first 8 bytes.
std::uint64_t DataStart(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[8] = {};
  in.read(reinterpret_cast<char*>(b), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  return 8 + n;
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

constexpr char kConfig[] = R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 96,
  "tie_word_embeddings": true})";

// {"weight_map": {tensor: file, ...}} (in the given order) plus metadata.
std::string Index(const std::vector<std::pair<std::string, std::string>>& map) {
  std::string s = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (std::size_t i = 0; i < map.size(); ++i) {
    s += (i ? ", " : "") + ("\"" + map[i].first + "\": \"" + map[i].second + "\"");
  }
  return s + "}}";
}

const std::vector<Spec> kShard1 = {
    {"model.embed_tokens.weight", "BF16", {96, 64}},
    {"model.layers.0.input_layernorm.weight", "BF16", {64}},
    {"model.layers.0.self_attn.q_proj.weight", "BF16", {64, 64}},
};
const std::vector<Spec> kShard2 = {
    {"model.layers.0.mlp.down_proj.weight", "BF16", {64, 128}},
    {"model.norm.weight", "F32", {64}},
};

// A temp folder: `root` holds the model folder `model` and a sibling `outside`.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "hoist-ckpt-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    model_ = root_ / "model";
    outside_ = root_ / "outside";
    fs::create_directories(model_);
    fs::create_directories(outside_);
    WriteText(model_ / "config.json", kConfig);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // The usual two-shard checkpoint with its index.
  void WriteSharded() {
    WriteSafetensors(model_ / "model-00001-of-00002.safetensors", kShard1);
    WriteSafetensors(model_ / "model-00002-of-00002.safetensors", kShard2);
    std::vector<std::pair<std::string, std::string>> map;
    // Listed out of order on purpose.
    for (const Spec& s : kShard2) map.emplace_back(s.name, "model-00002-of-00002.safetensors");
    for (const Spec& s : kShard1) map.emplace_back(s.name, "model-00001-of-00002.safetensors");
    WriteText(model_ / "model.safetensors.index.json", Index(map));
  }

  Status OpenError() {
    Result<Checkpoint> r = OpenCheckpoint(model_.string());
    EXPECT_FALSE(r.ok()) << "expected OpenCheckpoint to fail";
    return r.ok() ? Status::Ok() : r.status();
  }

  fs::path root_, model_, outside_;
};

void ExpectMessageHas(const Status& s, Code code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos)
        << "missing '" << p << "' in: " << s.ToString();
  }
}

// ---- happy paths ----------------------------------------------------------------------------

TEST_F(CheckpointTest, SingleFileModel) {
  WriteSafetensors(model_ / "model.safetensors", kShard1);
  Result<Checkpoint> r = OpenCheckpoint(model_.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Checkpoint& c = *r;
  EXPECT_EQ(c.dir, fs::canonical(model_).string());
  EXPECT_EQ(c.config.model_type, "qwen3");
  EXPECT_EQ(c.config.hidden_size, 64);
  ASSERT_EQ(c.files.size(), 1u);
  EXPECT_EQ(c.files[0].rel_path, "model.safetensors");
  EXPECT_EQ(c.files[0].abs_path, fs::canonical(model_ / "model.safetensors").string());
  EXPECT_EQ(c.files[0].stat.size, fs::file_size(model_ / "model.safetensors"));
  EXPECT_GT(c.files[0].stat.mtime_ns, 0);
  EXPECT_EQ(c.files[0].header.metadata.at("format"), "pt");
  EXPECT_EQ(c.tensors.size(), kShard1.size());
  std::uint64_t total = 0;
  for (const Spec& s : kShard1) {
    total += Bytes(s);
    const TensorEntry* e = c.Find(s.name);
    ASSERT_NE(e, nullptr) << s.name;
    EXPECT_EQ(e->name, s.name);
    EXPECT_EQ(e->shape, s.shape);
    EXPECT_EQ(e->bytes(), Bytes(s));
  }
  EXPECT_EQ(c.tensor_bytes, total);
  EXPECT_EQ(c.Find("model.layers.0.self_attn.k_proj.weight"), nullptr);
}

TEST_F(CheckpointTest, ShardedModelWithIndex) {
  WriteSharded();
  // A plain model.safetensors next to the index is ignored: the index wins.
  WriteSafetensors(model_ / "model.safetensors", {{"stray", "U8", {3}}});
  Result<Checkpoint> r = OpenCheckpoint(model_.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Checkpoint& c = *r;
  ASSERT_EQ(c.files.size(), 2u);
  EXPECT_EQ(c.files[0].rel_path, "model-00001-of-00002.safetensors");
  EXPECT_EQ(c.files[1].rel_path, "model-00002-of-00002.safetensors");
  EXPECT_EQ(c.files[1].abs_path,
            fs::canonical(model_ / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(c.tensors.size(), kShard1.size() + kShard2.size());
  EXPECT_EQ(c.Find("stray"), nullptr);
  std::uint64_t total = 0;
  for (std::uint32_t f = 0; f < 2; ++f) {
    const std::vector<Spec>& specs = f == 0 ? kShard1 : kShard2;
    std::uint64_t begin = 0;  // the writer lays tensors out back to back in spec order
    for (const Spec& s : specs) {
      total += Bytes(s);
      auto it = c.tensors.find(s.name);
      ASSERT_NE(it, c.tensors.end()) << s.name;
      EXPECT_EQ(it->second.file, f) << s.name;
      const TensorEntry& e = c.Entry(it->second);
      EXPECT_EQ(e.name, s.name);
      EXPECT_EQ(e.begin, begin);
      EXPECT_EQ(e.end, begin + Bytes(s));
      EXPECT_EQ(DTypeName(e.dtype), s.dtype);
      EXPECT_EQ(c.Find(s.name), &e);
      begin += Bytes(s);
    }
  }
  EXPECT_EQ(c.tensor_bytes, total);
}

TEST_F(CheckpointTest, ShardsInSubfoldersAndSymlinksInsideAreAllowed) {
  fs::create_directories(model_ / "shards");
  WriteSafetensors(model_ / "shards" / "a.safetensors", kShard1);
  WriteSafetensors(model_ / "real-b.safetensors", kShard2);
  fs::create_symlink("real-b.safetensors", model_ / "b.safetensors");
  std::vector<std::pair<std::string, std::string>> map;
  for (const Spec& s : kShard1) map.emplace_back(s.name, "shards/a.safetensors");
  // One file named two ways is still one file.
  map.emplace_back(kShard2[0].name, "b.safetensors");
  map.emplace_back(kShard2[1].name, "./real-b.safetensors");
  WriteText(model_ / "model.safetensors.index.json", Index(map));
  Result<Checkpoint> r = OpenCheckpoint(model_.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->files.size(), 2u);
  EXPECT_EQ(r->files[0].rel_path, "b.safetensors");
  EXPECT_EQ(r->files[0].abs_path, fs::canonical(model_ / "real-b.safetensors").string());
  EXPECT_EQ(r->files[1].rel_path, "shards/a.safetensors");
  EXPECT_EQ(r->tensors.size(), 5u);
}

// ---- folder and index errors ----------------------------------------------------------------

TEST_F(CheckpointTest, MissingFolder) {
  Result<Checkpoint> r = OpenCheckpoint((root_ / "nope").string());
  ASSERT_FALSE(r.ok());
  ExpectMessageHas(r.status(), Code::kInvalidArgument,
                   {(root_ / "nope").string(), "does not exist"});  // a usage error (exit 2)
}

TEST_F(CheckpointTest, MissingConfig) {
  WriteSafetensors(model_ / "model.safetensors", kShard1);
  fs::remove(model_ / "config.json");
  ExpectMessageHas(OpenError(), Code::kInvalidArgument,
                   {model_.string(), "not a model folder: it has no config.json"});
}

TEST_F(CheckpointTest, BadConfigNamesConfigJson) {
  WriteSafetensors(model_ / "model.safetensors", kShard1);
  WriteText(model_ / "config.json", R"({"hidden_size": 64})");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"config.json", "num_hidden_layers"});
}

TEST_F(CheckpointTest, NoWeightsAtAll) {
  ExpectMessageHas(OpenError(), Code::kNotFound,
                   {"model.safetensors.index.json", "model.safetensors"});
}

TEST_F(CheckpointTest, IndexNamesAMissingShard) {
  WriteSharded();
  fs::remove(model_ / "model-00002-of-00002.safetensors");
  ExpectMessageHas(OpenError(), Code::kNotFound,
                   {"model-00002-of-00002.safetensors", "is missing",
                    "\"model.layers.0.mlp.down_proj.weight\""});
}

TEST_F(CheckpointTest, TensorNamedByTheIndexIsMissingFromItsShard) {
  WriteSharded();
  // Rewrite shard 2 without model.norm.weight.
  WriteSafetensors(model_ / "model-00002-of-00002.safetensors", {kShard2[0]});
  ExpectMessageHas(
      OpenError(), Code::kNotFound,
      {"\"model.norm.weight\"", "model-00002-of-00002.safetensors", "is not in its header"});
}

TEST_F(CheckpointTest, TensorInAShardButNotInTheIndex) {
  WriteSharded();
  std::vector<Spec> more = kShard2;
  more.push_back({"lm_head.weight", "BF16", {96, 64}});
  WriteSafetensors(model_ / "model-00002-of-00002.safetensors", more);
  // lm_head.weight's data begins after the two tensors of kShard2.
  const std::uint64_t offset = DataStart(model_ / "model-00002-of-00002.safetensors") +
                               Bytes(kShard2[0]) + Bytes(kShard2[1]);
  ExpectMessageHas(OpenError(), Code::kCorrupt,
                   {"\"lm_head.weight\"", "model-00002-of-00002.safetensors", "weight_map",
                    "file offset " + std::to_string(offset)});
}

TEST_F(CheckpointTest, TensorDuplicatedAcrossShards) {
  WriteSharded();
  std::vector<Spec> dup = kShard2;
  dup.push_back(kShard1[1]);  // input_layernorm is also in shard 1, where the index maps it
  WriteSafetensors(model_ / "model-00002-of-00002.safetensors", dup);
  ExpectMessageHas(OpenError(), Code::kCorrupt,
                   {"\"model.layers.0.input_layernorm.weight\"", "model-00001-of-00002.safetensors",
                    "not to this file"});
}

TEST_F(CheckpointTest, IndexPathWithDotDotIsRejected) {
  WriteSharded();
  // The file exists outside, so only the path rule can stop it.
  WriteSafetensors(outside_ / "evil.safetensors", kShard2);
  std::vector<std::pair<std::string, std::string>> map;
  for (const Spec& s : kShard1) map.emplace_back(s.name, "model-00001-of-00002.safetensors");
  for (const Spec& s : kShard2) map.emplace_back(s.name, "../outside/evil.safetensors");
  WriteText(model_ / "model.safetensors.index.json", Index(map));
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"../outside/evil.safetensors", "\"..\""});
  // ".." that comes back inside is still refused: the index has no business walking out.
  for (auto& [tensor, file] : map) file = "../model/model-00001-of-00002.safetensors";
  WriteText(model_ / "model.safetensors.index.json", Index(map));
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"\"..\""});
}

TEST_F(CheckpointTest, IndexAbsolutePathIsRejected) {
  WriteSharded();
  const fs::path abs = fs::canonical(model_ / "model-00002-of-00002.safetensors");
  std::vector<std::pair<std::string, std::string>> map;
  for (const Spec& s : kShard1) map.emplace_back(s.name, "model-00001-of-00002.safetensors");
  for (const Spec& s : kShard2) map.emplace_back(s.name, abs.string());
  WriteText(model_ / "model.safetensors.index.json", Index(map));
  ExpectMessageHas(OpenError(), Code::kCorrupt, {abs.string(), "absolute path"});
}

TEST_F(CheckpointTest, SymlinkedShardLeavingTheFolderIsRejected) {
  WriteSharded();
  WriteSafetensors(outside_ / "evil.safetensors", kShard2);
  fs::remove(model_ / "model-00002-of-00002.safetensors");
  fs::create_symlink(outside_ / "evil.safetensors", model_ / "model-00002-of-00002.safetensors");
  ExpectMessageHas(OpenError(), Code::kCorrupt,
                   {"model-00002-of-00002.safetensors", "outside the model folder",
                    fs::canonical(outside_ / "evil.safetensors").string()});
}

TEST_F(CheckpointTest, SymlinkedSubfolderLeavingTheFolderIsRejected) {
  WriteSafetensors(model_ / "model-00001-of-00002.safetensors", kShard1);
  WriteSafetensors(outside_ / "model-00002-of-00002.safetensors", kShard2);
  fs::create_directory_symlink(outside_, model_ / "sub");
  std::vector<std::pair<std::string, std::string>> map;
  for (const Spec& s : kShard1) map.emplace_back(s.name, "model-00001-of-00002.safetensors");
  for (const Spec& s : kShard2) map.emplace_back(s.name, "sub/model-00002-of-00002.safetensors");
  WriteText(model_ / "model.safetensors.index.json", Index(map));
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"sub/", "outside the model folder"});
}

TEST_F(CheckpointTest, SymlinkedSingleFileLeavingTheFolderIsRejected) {
  WriteSafetensors(outside_ / "model.safetensors", kShard1);
  fs::create_symlink(outside_ / "model.safetensors", model_ / "model.safetensors");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"outside the model folder"});
}

// A HuggingFace hub cache snapshot: files are symlinks from snapshots/<rev>/ into ../../blobs/.
TEST_F(CheckpointTest, HubCacheSnapshotSymlinksIntoBlobsAreAllowed) {
  const fs::path repo = root_ / "models--org--tiny";
  const fs::path snap = repo / "snapshots" / "0123abcd";
  fs::create_directories(snap);
  fs::create_directories(repo / "blobs");
  WriteText(repo / "blobs" / "c0nf1g", kConfig);
  WriteSafetensors(repo / "blobs" / "5afe", kShard1);
  fs::create_symlink("../../blobs/c0nf1g", snap / "config.json");
  fs::create_symlink("../../blobs/5afe", snap / "model.safetensors");
  Result<Checkpoint> r = OpenCheckpoint(snap.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].abs_path, fs::canonical(repo / "blobs" / "5afe").string());
  // A link that leaves the repository folder is still refused.
  fs::remove(snap / "model.safetensors");
  WriteSafetensors(outside_ / "model.safetensors", kShard1);
  fs::create_symlink(outside_ / "model.safetensors", snap / "model.safetensors");
  Result<Checkpoint> bad = OpenCheckpoint(snap.string());
  ASSERT_FALSE(bad.ok());
  ExpectMessageHas(bad.status(), Code::kCorrupt,
                   {"outside the model folder", fs::canonical(repo).string()});
}

TEST_F(CheckpointTest, InvalidIndexJson) {
  WriteSharded();
  std::string text = Index({{kShard1[0].name, "model-00001-of-00002.safetensors"}});
  WriteText(model_ / "model.safetensors.index.json", text.substr(0, text.size() - 3));
  ExpectMessageHas(OpenError(), Code::kCorrupt,
                   {"model.safetensors.index.json", "truncated JSON at byte"});
}

TEST_F(CheckpointTest, IndexWithDuplicateTensorIsRejected) {
  WriteSharded();
  std::vector<std::pair<std::string, std::string>> map;
  for (const Spec& s : kShard1) map.emplace_back(s.name, "model-00001-of-00002.safetensors");
  for (const Spec& s : kShard2) map.emplace_back(s.name, "model-00002-of-00002.safetensors");
  map.emplace_back(kShard1[0].name, "model-00002-of-00002.safetensors");
  WriteText(model_ / "model.safetensors.index.json", Index(map));
  ExpectMessageHas(OpenError(), Code::kCorrupt,
                   {"model.safetensors.index.json", "duplicate key \"model.embed_tokens.weight\"",
                    "/\"weight_map\""});
}

TEST_F(CheckpointTest, IndexWithWrongStructureIsRejected) {
  WriteSharded();
  const fs::path index = model_ / "model.safetensors.index.json";
  WriteText(index, R"({"metadata": {}})");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"missing \"weight_map\""});
  WriteText(index, R"({"weight_map": ["a"]})");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"\"weight_map\" must be an object, got array"});
  WriteText(index, R"({"weight_map": {}})");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"\"weight_map\" is empty"});
  WriteText(index, R"({"weight_map": {"model.norm.weight": 3}})");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"\"model.norm.weight\"", "must be a file name"});
  WriteText(index, R"([1])");
  ExpectMessageHas(OpenError(), Code::kCorrupt, {"must be a JSON object"});
}

TEST_F(CheckpointTest, CorruptShardHeaderNamesTheShard) {
  WriteSharded();
  // Append a byte: the data section now has a trailing byte.
  std::ofstream(model_ / "model-00002-of-00002.safetensors", std::ios::app | std::ios::binary)
      << 'x';
  ExpectMessageHas(OpenError(), Code::kCorrupt,
                   {"model-00002-of-00002.safetensors", "1 trailing bytes", "model.norm.weight"});
}

}  // namespace
}  // namespace hoist::planner
