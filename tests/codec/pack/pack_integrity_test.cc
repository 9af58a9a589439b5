// A packed copy's integrity (issue 44, item 1; docs/PACKED.md, "Integrity"): a load that exits 0
// hands over exactly the original's bytes, and each way of damaging a packed copy that once
// loaded wrong bytes with exit 0 is now refused by `hoist load` (host device, the path CI runs),
// with and without --verify, with exit 1 and an error naming the file, the tensor and the
// stream's offset:
//  - flipped bytes inside a stored (uncoded) stream's payload;
//  - two streams of the same shape swapped in the index (their offsets, or whole entries);
//  - a stream rewritten with its stream checksums recomputed (and the index's header checksum
//    too, for a one-stream tensor);
//  - a shard reachable under a second name (a hard link) listed for another shard's streams.
// The damage is made here byte by byte from the format (docs/CODEC.md, docs/PACKED.md); the
// reference for the undamaged copy is the original checkpoint, read by the tests' own reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "planner/packed_index.h"
#include "tests/launch/mpirun_util.h"
#include "tests/test_paths.h"
#include "tests/tools/test_util.h"

namespace hoist::tools {
namespace {

using hoist::testing::RunCommand;
using hoist::testing::RunResult;
using nlohmann::json;
using testtools::ReadFile;
using testtools::ScratchDir;

// Codec header fields (docs/CODEC.md, format versions 2 and 3).
constexpr std::size_t kHeaderSizeAt = 28, kContentSumAt = 32, kBlockCountAt = 24;
constexpr std::size_t kOffsetsAt = 320;

std::uint32_t U32(const std::string& b, std::size_t at) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
template <typename T>
void Put(std::string& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string Hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// qwen3-fp8-tiny: BF16 embeddings and norms and F8_E4M3 weights (coded), F32 scales (stored),
// packed in shards of about 512 KiB (five of them).
class PackIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    // The binaries, as a user runs them (the packed shards hold about 512 KiB each).
    const RunResult make =
        RunCommand({hoist::testing::MkckptBin(), "--preset", "qwen3-fp8-tiny", "--out",
                    dir_.Sub("model"), "--seed", "11", "--threads", "2"},
                   120);
    ASSERT_EQ(make.exit_code, 0) << make.output;
    const RunResult pack =
        RunCommand({hoist::testing::HoistBin(), "pack", "--model", dir_.Sub("model"), "--out",
                    packed_, "--shard-gib", "0.0005", "--threads", "2"},
                   120);
    ASSERT_EQ(pack.exit_code, 0) << pack.output;
    index_ = json::parse(ReadFile(packed_ + "/" + planner::kPackedIndexFile));
  }

  RunResult Load(const std::string& model, bool verify, const std::string& dump = "") {
    std::vector<std::string> argv = {hoist::testing::HoistBin(),
                                     "load",
                                     "--model",
                                     model,
                                     "--tp",
                                     "1",
                                     "--layout",
                                     "hf",
                                     "--device",
                                     "host",
                                     "--no-progress"};
    if (verify) argv.push_back("--verify");
    if (!dump.empty()) argv.insert(argv.end(), {"--dump", dump});
    return RunCommand(argv, 120);
  }

  // `hoist load` refuses the damaged copy, with and without --verify: exit 1 and one error
  // holding every one of `needles`.
  void ExpectRefused(const std::vector<std::string>& needles) {
    for (bool verify : {false, true}) {
      SCOPED_TRACE(verify ? "--verify" : "no --verify");
      const RunResult r = Load(packed_, verify);
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_NE(r.output.find("hoist: error: Corrupt"), std::string::npos) << r.output;
      for (const std::string& n : needles) {
        EXPECT_NE(r.output.find(n), std::string::npos) << "no '" << n << "' in " << r.output;
      }
    }
  }

  json& Tensor(const std::string& name) { return index_["tensors"][name]; }
  void SaveIndex() { WriteFile(packed_ + "/" + planner::kPackedIndexFile, index_.dump(1)); }
  std::string Shard(const std::string& name) {
    return packed_ + "/" + Tensor(name)["file"].get<std::string>();
  }
  // "stream at offset N" of the tensor's first stream, as the errors name it.
  std::string StreamAt(const std::string& name) {
    return "stream at offset " +
           std::to_string(Tensor(name)["streams"][0]["offset"].get<std::uint64_t>());
  }

  ScratchDir dir_{"hoist-integrity"};
  const std::string packed_ = dir_.Sub("packed");
  json index_;
};

// F32 [4, 2] (FP8 weights are coded).
const char* const kStored = "model.layers.0.self_attn.q_proj.weight_scale_inv";

TEST_F(PackIntegrity, UndamagedCopyLoadsTheOriginalBytes) {
  const RunResult r = Load(packed_, true, dir_.Sub("dump"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto original = testtools::ReadCheckpoint(dir_.Sub("model"));
  const auto dumped = testtools::ParseSafetensors(dir_.Sub("dump") + "/rank-0.safetensors");
  ASSERT_EQ(dumped.tensors.size(), original.size());
  for (const testtools::StTensor& t : dumped.tensors) {
    ASSERT_EQ(original.count(t.name), 1u) << t.name;
    const std::vector<std::uint8_t>& want = original.at(t.name).data;
    // The vocabulary is padded (embeddings, lm_head): the original rows, then zeros.
    ASSERT_GE(t.data.size(), want.size()) << t.name;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), t.data.begin())) << t.name;
    EXPECT_TRUE(std::all_of(t.data.begin() + static_cast<std::ptrdiff_t>(want.size()), t.data.end(),
                            [](std::uint8_t b) { return b == 0; }))
        << t.name;
  }
  // And the original checkpoint loaded alike gives the same file.
  const RunResult ref = Load(dir_.Sub("model"), false, dir_.Sub("dump-model"));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  EXPECT_EQ(ReadFile(dir_.Sub("dump") + "/rank-0.safetensors"),
            ReadFile(dir_.Sub("dump-model") + "/rank-0.safetensors"));
}

TEST_F(PackIntegrity, FlippedByteInAStoredPayloadIsRefused) {
  std::string shard = ReadFile(Shard(kStored));
  const std::uint64_t at = Tensor(kStored)["streams"][0]["offset"].get<std::uint64_t>();
  ASSERT_EQ(shard[at + 7], 0) << "a stored stream (method 0)";
  shard[at + U32(shard, at + kHeaderSizeAt) + 17] ^= 0x10;
  WriteFile(Shard(kStored), shard);
  ExpectRefused({Shard(kStored), kStored, StreamAt(kStored), "block 0 checksum mismatch"});
}

// Two tensors of one shape and dtype, one stream each, in one shard (layer 0's gate and up).
const char* const kGate = "model.layers.0.mlp.gate_proj.weight";
const char* const kUp = "model.layers.0.mlp.up_proj.weight";

TEST_F(PackIntegrity, SwappedStreamOffsetsAreRefused) {
  ASSERT_EQ(Tensor(kGate)["file"], Tensor(kUp)["file"]);
  ASSERT_EQ(Tensor(kGate)["shape"], Tensor(kUp)["shape"]);
  ASSERT_NE(Tensor(kGate)["xxh64"], Tensor(kUp)["xxh64"]);
  json& a = Tensor(kGate)["streams"][0];
  json& b = Tensor(kUp)["streams"][0];
  std::swap(a["offset"], b["offset"]);
  std::swap(a["bytes"], b["bytes"]);  // coded streams of one shape may differ in size
  SaveIndex();
  ExpectRefused({Shard(kGate), "stream at offset", "header checksum", "the index recorded"});
}

TEST_F(PackIntegrity, SwappedStreamEntriesAreRefused) {
  // Whole entries, the recorded header checksums with them: only the stream's identity tells.
  std::swap(Tensor(kGate)["streams"], Tensor(kUp)["streams"]);
  SaveIndex();
  ExpectRefused(
      {Shard(kGate), "stream at offset", "the index wants stream 0 of 1", "of this tensor"});
}

// A stored stream's payload changed and every checksum the stream holds recomputed: its block's,
// its content checksum and its header checksum. What is left to tell: the index's record of the
// header, then (a one-stream tensor) the index's xxh64 of the original bytes.
void Rewrite(std::string& shard, std::uint64_t at) {
  const std::uint32_t header = U32(shard, at + kHeaderSizeAt);
  const std::uint32_t blocks = U32(shard, at + kBlockCountAt);
  std::uint64_t end;  // the payload's size: the last block offset
  std::memcpy(&end, shard.data() + at + kOffsetsAt + 8 * blocks, 8);
  std::uint64_t b1;  // block 0's end
  std::memcpy(&b1, shard.data() + at + kOffsetsAt + 8, 8);
  shard[at + header + 5] ^= 0x01;
  const char* payload = shard.data() + at + header;
  Put<std::uint32_t>(shard, at + kOffsetsAt + 8 * (blocks + 1),
                     static_cast<std::uint32_t>(codec::Xxh64(payload, b1)));
  Put<std::uint64_t>(shard, at + kContentSumAt, codec::Xxh64(payload, end));
  Put<std::uint64_t>(shard, at + header - 8, codec::Xxh64(shard.data() + at, header - 8));
}

TEST_F(PackIntegrity, RewrittenStreamWithRecomputedChecksumsIsRefused) {
  std::string shard = ReadFile(Shard(kStored));
  const std::uint64_t at = Tensor(kStored)["streams"][0]["offset"].get<std::uint64_t>();
  Rewrite(shard, at);
  WriteFile(Shard(kStored), shard);
  ExpectRefused(
      {Shard(kStored), kStored, StreamAt(kStored), "header checksum", "the index recorded"});
  // The index's header record rewritten as well: the tensor's xxh64 still tells.
  const std::uint32_t header = U32(shard, at + kHeaderSizeAt);
  std::uint64_t sum;
  std::memcpy(&sum, shard.data() + at + header - 8, 8);
  Tensor(kStored)["streams"][0]["header_xxh64"] = Hex(sum);
  SaveIndex();
  ExpectRefused({Shard(kStored), kStored, StreamAt(kStored), "content checksum",
                 "is not the tensor's xxh64"});
}

// Layer 0's input norm (shard 1) and post-attention norm (shard 2): one shape. The second's
// entry names a hard link of shard 1 and the first's stream there.
TEST_F(PackIntegrity, HardLinkedShardListedForAnotherShardsStreamsIsRefused) {
  const char* const in_norm = "model.layers.0.input_layernorm.weight";
  const char* const post_norm = "model.layers.0.post_attention_layernorm.weight";
  ASSERT_NE(Tensor(in_norm)["file"], Tensor(post_norm)["file"]);
  ASSERT_EQ(Tensor(in_norm)["shape"], Tensor(post_norm)["shape"]);
  const std::string alias = packed_ + "/packed-00099.bin";
  ASSERT_EQ(::link(Shard(in_norm).c_str(), alias.c_str()), 0) << std::strerror(errno);
  Tensor(post_norm)["file"] = "packed-00099.bin";
  Tensor(post_norm)["streams"] = Tensor(in_norm)["streams"];
  SaveIndex();
  ExpectRefused({planner::kPackedIndexFile, "packed-00099.bin", "is the same file as shard",
                 Tensor(in_norm)["file"].get<std::string>(), post_norm});
}

}  // namespace
}  // namespace hoist::tools
