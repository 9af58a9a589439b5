// planner::ReadPackedIndex on a packed folder written here by hand (codec::Encode streams in two
// shards, the index JSON built field by field, nothing from tools/pack): every field as written
// (stripes, block rows, header bytes, shards sorted, tensors by shard and offset), then every
// check of planner/packed_index.h on a damaged copy: one error of the documented code naming
// the index (or shard) file and the tensor.
#include "planner/packed_index.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "tests/codec/codec_data.h"
#include "tests/scratch_dir.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Spec {
  std::string name, dtype, shard;
  std::vector<std::uint64_t> shape;
  std::uint64_t row_values;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> columns;
  std::uint64_t block_rows;  // 0: plain blocks of 64 values
};

// Written in this order: shard 2 first, and the JSON object lists names alphabetically, so the
// reader's sorting is what puts them in (shard, offset) order.
std::vector<Spec> Specs() {
  return {{"w.o", "BF16", "packed-00002.bin", {16, 64}, 64, {{0, 32}, {32, 64}}, 4},
          {"w.q", "BF16", "packed-00001.bin", {16, 64}, 64, {{0, 64}}, 4},
          {"n.f32", "F32", "packed-00001.bin", {100}, 100, {{0, 100}}, 0},
          {"h.f16", "F16", "packed-00001.bin", {8, 10}, 10, {{0, 10}}, 0},
          {"s.bf16", "BF16", "packed-00001.bin", {}, 1, {{0, 1}}, 0}};
}

std::vector<std::uint8_t> Values(const Spec& s, std::uint64_t seed) {
  std::uint64_t n = 1;
  for (std::uint64_t d : s.shape) n *= d;
  if (s.dtype == "BF16") return codec::testing::NormalBf16(n, seed, 0.02);
  if (s.dtype == "F16") return codec::testing::NormalF16(n, seed, 0.02);
  std::vector<std::uint8_t> out(n * 4);
  std::uint64_t state = seed;
  for (auto& b : out) b = static_cast<std::uint8_t>(codec::testing::SplitMix(state));
  return out;
}

std::string Hex(std::uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

struct Expected {
  PackedTensorEntry entry;
  std::string shard;
};

// A packed folder: shards, index JSON, and what ReadPackedIndex must return per tensor.
struct Fixture {
  hoist::testing::ScratchDir dir{"hoist-packed-index"};
  json index;
  std::map<std::string, Expected> expected;
  std::string canonical;  // the canonical folder

  explicit Fixture(const std::vector<Spec>& specs = Specs()) {
    std::map<std::string, std::vector<std::uint8_t>> shards;
    index = {{"format", "hoist-packed"},
             {"version", 3},
             {"codec_version", codec::kFormatVersion},
             {"tp_multiple", 2},
             {"tensors", json::object()}};
    std::uint64_t seed = 1;
    for (const Spec& s : specs) Add(s, Values(s, ++seed), shards[s.shard]);
    for (const auto& [name, bytes] : shards) {
      std::ofstream(dir.Sub(name), std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    WriteIndex();
    canonical = fs::canonical(dir.path()).string();
  }

  void Add(const Spec& s, const std::vector<std::uint8_t>& v, std::vector<std::uint8_t>& shard) {
    const auto dtype = *codec::DTypeFromName(s.dtype);
    const std::uint64_t vb = codec::DTypeSize(dtype);
    const std::uint64_t rows = v.size() / vb / s.row_values;
    Expected& e = expected[s.name];
    e.shard = s.shard;
    e.entry = {s.name, s.dtype,      s.shape, v.size(), codec::Xxh64(v.data(), v.size()),
               0,      s.row_values, {}};
    json streams = json::array();
    for (std::size_t i = 0; i < s.columns.size(); ++i) {
      const auto [c0, c1] = s.columns[i];
      std::vector<std::uint8_t> part;
      for (std::uint64_t r = 0; r < rows; ++r) {
        part.insert(part.end(), v.begin() + (r * s.row_values + c0) * vb,
                    v.begin() + (r * s.row_values + c1) * vb);
      }
      codec::EncodeOptions o;
      o.block_values = static_cast<std::uint32_t>(s.block_rows ? s.block_rows * (c1 - c0) : 64);
      o.sub_streams = 32;
      o.id = {codec::Xxh64(s.name.data(), s.name.size()), static_cast<std::uint32_t>(i),
              static_cast<std::uint32_t>(s.columns.size()), c0};
      auto stream = codec::Encode(dtype, part, o);
      if (!stream.ok()) throw std::runtime_error(stream.status().ToString());
      auto info = codec::ParseStream(*stream, s.name);
      if (!info.ok()) throw std::runtime_error(info.status().ToString());
      shard.resize((shard.size() + 511) / 512 * 512);
      PackedStreamEntry pe{
          shard.size(), stream->size(),
          c0,           c1,
          s.block_rows, std::string(stream->begin(), stream->begin() + info->header_bytes)};
      pe.header_xxh64 = info->header_checksum;
      streams.push_back({{"offset", pe.offset},
                         {"bytes", pe.bytes},
                         {"columns", {c0, c1}},
                         {"block_rows", s.block_rows},
                         {"header_xxh64", Hex(pe.header_xxh64)}});
      e.entry.streams.push_back(pe);
      shard.insert(shard.end(), stream->begin(), stream->end());
    }
    index["tensors"][s.name] = {{"dtype", s.dtype},
                                {"shape", s.shape},
                                {"original_bytes", v.size()},
                                {"xxh64", Hex(e.entry.xxh64)},
                                {"file", s.shard},
                                {"streams", streams}};
  }

  void WriteIndex() const {
    std::ofstream(dir.Sub(kPackedIndexFile), std::ios::trunc) << index.dump(1);
  }
  std::string IndexPath() const { return canonical + "/" + kPackedIndexFile; }
};

TEST(PackedIndex, ReadsEveryFieldAsWritten) {
  Fixture f;
  auto got = ReadPackedIndex(f.dir.path() + "/.");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->dir, f.canonical);
  EXPECT_EQ(got->tp_multiple, 2u);
  EXPECT_EQ(got->shards, (std::vector<std::string>{"packed-00001.bin", "packed-00002.bin"}));
  std::vector<std::string> order;
  for (const PackedTensorEntry& t : got->tensors) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"w.q", "n.f32", "h.f16", "s.bf16", "w.o"}));
  for (const PackedTensorEntry& t : got->tensors) {
    SCOPED_TRACE(t.name);
    const Expected& e = f.expected.at(t.name);
    EXPECT_EQ(got->shards[t.shard], e.shard);
    EXPECT_EQ(t.dtype, e.entry.dtype);
    EXPECT_EQ(t.shape, e.entry.shape);
    EXPECT_EQ(t.original_bytes, e.entry.original_bytes);
    EXPECT_EQ(t.xxh64, e.entry.xxh64);
    EXPECT_EQ(t.row_values, e.entry.row_values);
    ASSERT_EQ(t.streams.size(), e.entry.streams.size());
    for (std::size_t i = 0; i < t.streams.size(); ++i) {
      const PackedStreamEntry &a = t.streams[i], &b = e.entry.streams[i];
      EXPECT_EQ(a.offset, b.offset);
      EXPECT_EQ(a.bytes, b.bytes);
      EXPECT_EQ(a.col_begin, b.col_begin);
      EXPECT_EQ(a.col_end, b.col_end);
      EXPECT_EQ(a.block_rows, b.block_rows);
      EXPECT_EQ(a.header_xxh64, b.header_xxh64);
      EXPECT_TRUE(a.header == b.header) << "stream " << i;
    }
  }
}

TEST(PackedIndex, MissingIndexIsNotFound) {
  hoist::testing::ScratchDir dir("hoist-packed-index");
  EXPECT_EQ(ReadPackedIndex(dir.path()).status().code(), Code::kNotFound);
  EXPECT_EQ(ReadPackedIndex(dir.Sub("nope")).status().code(), Code::kNotFound);
}

struct Case {
  Case(std::string what, std::function<void(json&)> edit, Code code, std::vector<std::string> words,
       std::string tensor, std::string shard = "")
      : what(std::move(what)),
        edit(std::move(edit)),
        code(code),
        words(std::move(words)),
        tensor(std::move(tensor)),
        shard(std::move(shard)) {}
  std::string what;
  std::function<void(json&)> edit;
  Code code;
  std::vector<std::string> words;  // besides the file and the tensor
  std::string tensor;              // "" for top-level damage
  std::string shard;               // the file named: this shard ("": the index)
};

std::vector<Case> IndexCases() {
  auto t = [](json& j, const char* name) -> json& { return j["tensors"][name]; };
  auto s = [t](json& j, const char* name, int i) -> json& { return t(j, name)["streams"][i]; };
  return {
      {"not an object",
       [](json& j) { j = json::array(); },
       Code::kCorrupt,
       {"must be an object"},
       ""},
      {"wrong format", [](json& j) { j["format"] = "x"; }, Code::kCorrupt, {"\"format\""}, ""},
      {"unknown top key",
       [](json& j) { j["extra"] = 1; },
       Code::kCorrupt,
       {"unknown key \"extra\""},
       ""},
      {"missing tensors", [](json& j) { j.erase("tensors"); }, Code::kCorrupt, {"\"tensors\""}, ""},
      {"newer version", [](json& j) { j["version"] = 4; }, Code::kUnsupported, {"newer"}, ""},
      {"older version", [](json& j) { j["version"] = 2; }, Code::kUnsupported, {"hoist pack"}, ""},
      {"newer codec",
       [](json& j) { j["codec_version"] = codec::kFormatVersion + 1; },
       Code::kUnsupported,
       {"codec version"},
       ""},
      {"tp multiple 0", [](json& j) { j["tp_multiple"] = 0; }, Code::kCorrupt, {"tp_multiple"}, ""},
      {"unknown tensor key",
       [t](json& j) { t(j, "w.q")["offset"] = 0; },
       Code::kCorrupt,
       {"unknown key \"offset\""},
       "w.q"},
      {"missing tensor key",
       [t](json& j) { t(j, "w.q").erase("xxh64"); },
       Code::kCorrupt,
       {"\"xxh64\""},
       "w.q"},
      {"unknown stream key",
       [s](json& j) { s(j, "w.o", 1)["crc"] = 1; },
       Code::kCorrupt,
       {"unknown key \"crc\""},
       "w.o"},
      {"stream offset a string",
       [s](json& j) { s(j, "w.o", 0)["offset"] = "0"; },
       Code::kCorrupt,
       {"\"offset\""},
       "w.o"},
      {"unknown dtype",
       [t](json& j) { t(j, "h.f16")["dtype"] = "F12"; },
       Code::kCorrupt,
       {"unknown dtype"},
       "h.f16"},
      {"shape and bytes disagree",
       [t](json& j) {
         t(j, "h.f16")["shape"] = {8, 11};
       },
       Code::kCorrupt,
       {"original_bytes"},
       "h.f16"},
      {"negative dimension",
       [t](json& j) {
         t(j, "h.f16")["shape"] = {-8, 10};
       },
       Code::kCorrupt,
       {"shape"},
       "h.f16"},
      {"bad xxh64",
       [t](json& j) { t(j, "h.f16")["xxh64"] = "12"; },
       Code::kCorrupt,
       {"xxh64"},
       "h.f16"},
      {"shard leaves the folder",
       [t](json& j) { t(j, "w.q")["file"] = "../packed-00001.bin"; },
       Code::kCorrupt,
       {"leave the folder"},
       "w.q"},
      {"absolute shard",
       [t](json& j) { t(j, "w.q")["file"] = "/etc/passwd"; },
       Code::kCorrupt,
       {"relative"},
       "w.q"},
      {"missing shard",
       [t](json& j) { t(j, "w.q")["file"] = "packed-00009.bin"; },
       Code::kCorrupt,
       {"missing"},
       "w.q"},
      {"shard spelled twice",
       [t](json& j) { t(j, "w.q")["file"] = "./packed-00002.bin"; },
       Code::kCorrupt,
       {"normal form"},
       "w.q"},
      {"no streams",
       [t](json& j) { t(j, "w.q")["streams"] = json::array(); },
       Code::kCorrupt,
       {"\"streams\""},
       "w.q"},
      {"stripes out of order",
       [t](json& j) { std::swap(t(j, "w.o")["streams"][0], t(j, "w.o")["streams"][1]); },
       Code::kCorrupt,
       {"tiling"},
       "w.o"},
      {"stripe gap",
       [s](json& j) {
         s(j, "w.o", 1)["columns"] = {33, 64};
       },
       Code::kCorrupt,
       {"tiling"},
       "w.o"},
      {"stripes short of the row",
       [s](json& j) {
         s(j, "w.o", 1)["columns"] = {32, 63};
       },
       Code::kCorrupt,
       {"cover columns 0..63 of 64"},
       "w.o"},
      {"columns not a pair",
       [s](json& j) { s(j, "w.o", 1)["columns"] = {32}; },
       Code::kCorrupt,
       {"columns"},
       "w.o"},
      {"stream past the shard",
       [s](json& j) {
         s(j, "n.f32", 0)["offset"] = s(j, "n.f32", 0)["offset"].get<int>() + 100000;
       },
       Code::kCorrupt,
       {"runs past the end"},
       "n.f32"},
      {"another tensor's stream (whole entry)",
       [t](json& j) { t(j, "w.r") = t(j, "w.q"); },
       Code::kCorrupt,
       {"the index wants stream 0 of 1", "of this tensor"},
       "w.r",
       "packed-00001.bin"},
      {"header checksum not the recorded one",
       [s](json& j) { s(j, "h.f16", 0)["header_xxh64"] = "0123456789abcdef"; },
       Code::kCorrupt,
       {"header checksum", "the index recorded 0123456789abcdef"},
       "h.f16",
       "packed-00001.bin"},
      {"header checksum not hex",
       [s](json& j) { s(j, "h.f16", 0)["header_xxh64"] = 7; },
       Code::kCorrupt,
       {"\"header_xxh64\" must be 16"},
       "h.f16"},
      {"stripes' places swapped with their records",
       [s](json& j) {
         for (const char* k : {"offset", "bytes", "header_xxh64"}) {
           std::swap(s(j, "w.o", 0)[k], s(j, "w.o", 1)[k]);
         }
       },
       Code::kCorrupt,
       {"stream 1 of 2", "the index wants stream 0 of 2"},
       "w.o",
       "packed-00002.bin"},
      {"a one-stream tensor's xxh64 is not its stream's",
       [t](json& j) { t(j, "n.f32")["xxh64"] = "0123456789abcdef"; },
       Code::kCorrupt,
       {"content checksum", "is not the tensor's xxh64 0123456789abcdef"},
       "n.f32",
       "packed-00001.bin"},
      {"stream size disagrees",
       [s](json& j) { s(j, "h.f16", 0)["bytes"] = s(j, "h.f16", 0)["bytes"].get<int>() - 16; },
       Code::kCorrupt,
       {"codec stream: byte"},
       "h.f16",
       "packed-00001.bin"},
      {"stream dtype disagrees",
       [t](json& j) { t(j, "h.f16")["dtype"] = "BF16"; },
       Code::kCorrupt,
       {"header says", "F16"},
       "h.f16",
       "packed-00001.bin"},
      {"stream holds another size",
       [t, s](json& j) {
         t(j, "w.q")["file"] = "packed-00002.bin";
         s(j, "w.q", 0)["offset"] = s(j, "w.o", 0)["offset"];
         s(j, "w.q", 0)["bytes"] = s(j, "w.o", 0)["bytes"];
       },
       Code::kCorrupt,
       {"header says 1024 bytes"},
       "w.q",
       "packed-00002.bin"},
      {"block rows disagree",
       [s](json& j) { s(j, "w.q", 0)["block_rows"] = 8; },
       Code::kCorrupt,
       {"block_rows 8"},
       "w.q",
       "packed-00001.bin"},
  };
}

TEST(PackedIndex, EveryDamagedIndexIsRefusedNamingFileAndTensor) {
  for (const Case& c : IndexCases()) {
    SCOPED_TRACE(c.what);
    Fixture f;
    c.edit(f.index);
    f.WriteIndex();
    const Status st = ReadPackedIndex(f.dir.path()).status();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), c.code) << st.ToString();
    std::vector<std::string> words = c.words;
    words.push_back(c.shard.empty() ? f.IndexPath() : f.canonical + "/" + c.shard);
    if (!c.tensor.empty()) words.push_back("tensor \"" + c.tensor + "\"");
    for (const std::string& w : words) {
      EXPECT_NE(st.message().find(w), std::string::npos) << w << " in " << st.ToString();
    }
  }
}

TEST(PackedIndex, InvalidJsonNamesTheIndexAndOffset) {
  Fixture f;
  std::ofstream(f.dir.Sub(kPackedIndexFile), std::ios::trunc) << "{\"format\": \"hoist-packed\",";
  const Status st = ReadPackedIndex(f.dir.path()).status();
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find(f.IndexPath()), std::string::npos) << st.ToString();
  std::ofstream(f.dir.Sub(kPackedIndexFile), std::ios::trunc)
      << R"({"format": "hoist-packed", "format": "hoist-packed"})";
  EXPECT_EQ(ReadPackedIndex(f.dir.path()).status().code(), Code::kCorrupt);
}

TEST(PackedIndex, ADamagedHeaderByteNamesShardTensorAndOffsets) {
  Fixture f;
  const PackedStreamEntry& s = f.expected.at("w.o").entry.streams[1];
  const std::string shard = f.dir.Sub("packed-00002.bin");
  for (std::uint64_t byte : {0u, 16u, 28u, 300u}) {
    SCOPED_TRACE(byte);
    std::fstream io(shard, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    io.seekg(static_cast<std::streamoff>(s.offset + byte));
    io.get(c);
    io.seekp(static_cast<std::streamoff>(s.offset + byte));
    io.put(static_cast<char>(c ^ 0x41));
    io.close();
    const Status st = ReadPackedIndex(f.dir.path()).status();
    EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
    for (const std::string& w :
         {f.canonical + "/packed-00002.bin", std::string("tensor \"w.o\""),
          "stream at offset " + std::to_string(s.offset), std::string("codec stream: byte ")}) {
      EXPECT_NE(st.message().find(w), std::string::npos) << w << " in " << st.ToString();
    }
    io.open(shard, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(s.offset + byte));
    io.put(c);
  }
  EXPECT_TRUE(ReadPackedIndex(f.dir.path()).ok());
}

// Many tensors: the entries and headers are read on several threads (a thread per 128 tensors).
// Every tensor reads as written, and with two damaged headers the error names the first in index
// order, every time.
TEST(PackedIndex, ManyTensorsReadOnThreadsAndTheFirstDamageInIndexOrderIsReported) {
  std::vector<Spec> specs;
  for (int i = 0; i < 300; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "t.%03d", i);  // the index lists names in this order
    specs.push_back(
        {name, "BF16", i % 2 ? "packed-00002.bin" : "packed-00001.bin", {4, 64}, 64, {{0, 64}}, 0});
  }
  Fixture f(specs);
  Result<PackedIndex> whole = ReadPackedIndex(f.dir.path());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(whole->tensors.size(), specs.size());
  for (const PackedTensorEntry& t : whole->tensors) {
    const Expected& e = f.expected.at(t.name);
    ASSERT_EQ(t.streams.size(), 1u) << t.name;
    EXPECT_EQ(whole->shards[t.shard], e.shard) << t.name;
    EXPECT_EQ(t.xxh64, e.entry.xxh64) << t.name;
    EXPECT_TRUE(t.streams[0].header == e.entry.streams[0].header) << t.name;
  }
  auto damage = [&](const std::string& tensor) {
    const Expected& e = f.expected.at(tensor);
    std::fstream io(f.dir.Sub(e.shard), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(e.entry.streams[0].offset + 16));
    io.put('\x5a');
  };
  damage("t.251");  // a later task's
  damage("t.131");
  for (int run = 0; run < 8; ++run) {
    const Status st = ReadPackedIndex(f.dir.path()).status();
    ASSERT_EQ(st.code(), Code::kCorrupt) << st.ToString();
    EXPECT_NE(st.message().find("tensor \"t.131\""), std::string::npos) << st.ToString();
  }
}

TEST(PackedIndex, ShardsThatAreNoRegularFileInsideTheFolderAreRefused) {
  Fixture f;
  // A symlink out of the folder.
  hoist::testing::ScratchDir other("hoist-packed-other");
  fs::copy_file(f.dir.Sub("packed-00001.bin"), other.Sub("outside.bin"));
  fs::create_symlink(other.Sub("outside.bin"), f.dir.Sub("link.bin"));
  f.index["tensors"]["w.q"]["file"] = "link.bin";
  f.WriteIndex();
  Status st = ReadPackedIndex(f.dir.path()).status();
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("outside the folder"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("\"w.q\""), std::string::npos) << st.ToString();
  // A FIFO in place of a shard: refused at once, never opened for reading.
  Fixture g;
  fs::remove(g.dir.Sub("packed-00002.bin"));
  ASSERT_EQ(::mkfifo(g.dir.Sub("packed-00002.bin").c_str(), 0600), 0);
  st = ReadPackedIndex(g.dir.path()).status();
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("FIFO"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("\"w.o\""), std::string::npos) << st.ToString();
  // A hard link: a second name of shard 1 (so shard 1's streams overlap nothing "in it"),
  // named for tensors whose streams are in shard 1 under its own name too.
  Fixture k;
  ASSERT_EQ(::link(k.dir.Sub("packed-00001.bin").c_str(), k.dir.Sub("alias.bin").c_str()), 0);
  k.index["tensors"]["w.r"] = k.index["tensors"]["w.q"];
  k.index["tensors"]["w.r"]["file"] = "alias.bin";
  k.WriteIndex();
  st = ReadPackedIndex(k.dir.path()).status();
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  for (const char* w : {"tensor \"w.r\"", "shard \"alias.bin\"", "is the same file as shard",
                        "\"packed-00001.bin\"", kPackedIndexFile}) {
    EXPECT_NE(st.message().find(w), std::string::npos) << w << " in " << st.ToString();
  }
  // A directory in place of the index.
  Fixture h;
  fs::remove(h.dir.Sub(kPackedIndexFile));
  fs::create_directory(h.dir.Sub(kPackedIndexFile));
  EXPECT_EQ(ReadPackedIndex(h.dir.path()).status().code(), Code::kCorrupt);
}

}  // namespace
}  // namespace hoist::planner
