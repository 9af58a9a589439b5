// Test-only helpers for tests/tools: a scratch folder and a minimal safetensors reader written
// for the tests (independent of planner/, tools/ and tests/reference/). Throws on bad input.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/scratch_dir.h"

namespace hoist::testtools {

using ScratchDir = hoist::testing::ScratchDir;

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;  // relative to the data section
  std::vector<std::uint8_t> data;
};

struct StFile {
  std::uint64_t header_len = 0;
  std::uint64_t file_size = 0;
  nlohmann::json header;
  std::vector<StTensor> tensors;  // in header (key) order as written, data filled
};

inline std::uint64_t DtypeSize(const std::string& d) {
  if (d == "BF16" || d == "F16") return 2;
  if (d == "F32") return 4;
  if (d == "F8_E4M3") return 1;
  throw std::runtime_error("test reader: unexpected dtype " + d);
}

// Parses a whole safetensors file. Entries come in ascending data offset order.
inline StFile ParseSafetensors(const std::string& path) {
  const std::string bytes = ReadFile(path);
  if (bytes.size() < 8) throw std::runtime_error(path + ": shorter than 8 bytes");
  StFile f;
  f.file_size = bytes.size();
  for (int i = 7; i >= 0; --i) f.header_len = (f.header_len << 8) | std::uint8_t(bytes[i]);
  if (f.header_len > bytes.size() - 8) throw std::runtime_error(path + ": header too long");
  f.header = nlohmann::json::parse(bytes.substr(8, f.header_len));
  const std::uint64_t base = 8 + f.header_len;
  for (const auto& [name, v] : f.header.items()) {
    if (name == "__metadata__") continue;
    StTensor t;
    t.name = name;
    t.dtype = v.at("dtype").get<std::string>();
    t.shape = v.at("shape").get<std::vector<std::uint64_t>>();
    t.begin = v.at("data_offsets").at(0).get<std::uint64_t>();
    t.end = v.at("data_offsets").at(1).get<std::uint64_t>();
    if (t.end < t.begin || base + t.end > bytes.size()) {
      throw std::runtime_error(path + ": " + name + " out of the file");
    }
    t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(base + t.begin),
                  bytes.begin() + static_cast<std::ptrdiff_t>(base + t.end));
    f.tensors.push_back(std::move(t));
  }
  std::sort(f.tensors.begin(), f.tensors.end(),
            [](const StTensor& a, const StTensor& b) { return a.begin < b.begin; });
  return f;
}

// Every tensor of a checkpoint folder (index + shards, or model.safetensors), by name.
inline std::map<std::string, StTensor> ReadCheckpoint(const std::string& dir) {
  std::vector<std::string> files;
  if (std::filesystem::exists(dir + "/model.safetensors.index.json")) {
    const auto index = nlohmann::json::parse(ReadFile(dir + "/model.safetensors.index.json"));
    for (const auto& [name, file] : index.at("weight_map").items()) {
      const std::string f = file.get<std::string>();
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else {
    files.push_back("model.safetensors");
  }
  std::map<std::string, StTensor> out;
  for (const auto& f : files) {
    for (auto& t : ParseSafetensors(dir + "/" + f).tensors) {
      std::string name = t.name;
      out.emplace(std::move(name), std::move(t));
    }
  }
  return out;
}

inline float Bf16ToFloat(std::uint16_t v) {
  const std::uint32_t bits = std::uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace hoist::testtools
