// Test-only: fresh hoist-mkckpt checkpoints (tools/mkckpt.h) and edits that break them the way a
// damaged download or a bad conversion would: a tensor dropped from its shard and the index, a
// tensor dropped from the index only, an extra tensor, an edited config.json. Shards are
// rewritten with the independent reader of tests/tools/test_util.h and a writer here (packed
// data, header padded to 8 bytes), never with planner/ code.
// Test code: throws std::runtime_error on a failed edit (gtest reports it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/tools/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::testedit {

namespace fs = std::filesystem;
using testtools::StTensor;

constexpr char kIndex[] = "model.safetensors.index.json";

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

// A fresh checkpoint of `preset` (or of the preset's config edited by `edit`) in `dir`, in
// shards of `shard_size` bytes (0: one model.safetensors when it fits 5 GB).
inline std::string Make(const std::string& dir, const std::string& preset,
                        std::uint64_t shard_size = 1 << 16,
                        const std::function<void(nlohmann::json&)>& edit = nullptr) {
  tools::MkckptOptions o;
  o.out_dir = dir;
  o.shard_size = shard_size;
  o.seed = 7;
  o.threads = 2;
  if (edit) {
    Result<std::string> text = tools::PresetConfigJson(preset);
    if (!text.ok()) throw std::runtime_error(text.status().ToString());
    nlohmann::json config = nlohmann::json::parse(*text);
    edit(config);
    fs::create_directories(dir);
    o.config_path = dir + ".config.json";
    WriteText(o.config_path, config.dump(2));
  } else {
    o.preset = preset;
  }
  const Status s = tools::MakeCheckpoint(o);
  if (!s.ok()) throw std::runtime_error(s.ToString());
  return dir;
}

inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(testtools::ReadFile(path));
}

// Rewrites config.json through `edit`.
inline void EditConfig(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json c = ReadJson(dir + "/config.json");
  edit(c);
  WriteText(dir + "/config.json", c.dump(2));
}

inline bool HasIndex(const std::string& dir) { return fs::exists(dir + "/" + kIndex); }

// The shard file (relative name) holding `tensor`.
inline std::string FileOf(const std::string& dir, const std::string& tensor) {
  if (!HasIndex(dir)) return "model.safetensors";
  const nlohmann::json index = ReadJson(dir + "/" + kIndex);
  return index.at("weight_map").at(tensor).get<std::string>();
}

// Writes a packed safetensors file holding `tensors` in order.
inline void WriteShard(const std::string& path, const std::vector<StTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  bytes += text;
  for (const StTensor& t : tensors) bytes.append(t.data.begin(), t.data.end());
  WriteText(path, bytes);
}

// Rewrites shard `file` of `dir` through `edit` (tensors in data order).
inline void EditShard(const std::string& dir, const std::string& file,
                      const std::function<void(std::vector<StTensor>&)>& edit) {
  std::vector<StTensor> tensors = testtools::ParseSafetensors(dir + "/" + file).tensors;
  edit(tensors);
  WriteShard(dir + "/" + file, tensors);
}

// Removes `tensor` from the index's weight_map only (the shard keeps it).
inline void DropFromIndex(const std::string& dir, const std::string& tensor) {
  nlohmann::json index = ReadJson(dir + "/" + kIndex);
  if (index.at("weight_map").erase(tensor) != 1) throw std::runtime_error("not indexed: " + tensor);
  WriteText(dir + "/" + kIndex, index.dump(2));
}

// Removes `tensor` from its shard and from the index.
inline void DropTensor(const std::string& dir, const std::string& tensor) {
  const std::string file = FileOf(dir, tensor);
  EditShard(dir, file, [&](std::vector<StTensor>& ts) {
    const auto before = ts.size();
    std::erase_if(ts, [&](const StTensor& t) { return t.name == tensor; });
    if (ts.size() + 1 != before) throw std::runtime_error("not in " + file + ": " + tensor);
  });
  if (HasIndex(dir)) DropFromIndex(dir, tensor);
}

// Adds a BF16 tensor of `shape` (non-zero bytes) to shard `file`, and to the index if any.
inline void AddTensor(const std::string& dir, const std::string& file, const std::string& name,
                      const std::vector<std::uint64_t>& shape) {
  StTensor t;
  t.name = name;
  t.dtype = "BF16";
  t.shape = shape;
  std::uint64_t n = 2;
  for (auto d : shape) n *= d;
  for (std::uint64_t i = 0; i < n; ++i) t.data.push_back(static_cast<std::uint8_t>(0x3c + i % 7));
  EditShard(dir, file, [&](std::vector<StTensor>& ts) { ts.push_back(t); });
  if (HasIndex(dir)) {
    nlohmann::json index = ReadJson(dir + "/" + kIndex);
    index["weight_map"][name] = file;
    WriteText(dir + "/" + kIndex, index.dump(2));
  }
}

}  // namespace hoist::testedit
