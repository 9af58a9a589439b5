// Test helpers for tests/embed: one mkckpt fixture per preset (made on first use, removed at
// exit), the independent reference (tests/reference) and a byte-for-byte comparison of a
// hoist::Model's tensor table against it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "hoist/hoist.h"
#include "tests/reference/reference.h"
#include "tools/mkckpt.h"

namespace hoist::testembed {

class Fixtures {
 public:
  static Fixtures& Get() {
    static Fixtures f;
    return f;
  }
  // The checkpoint folder of `preset` (several shards except llama-tiny).
  std::string Dir(const std::string& preset) {
    auto it = dirs_.find(preset);
    if (it != dirs_.end()) return it->second;
    tools::MkckptOptions o;
    o.preset = preset;
    o.out_dir = root_ + "/" + preset;
    o.shard_size = preset == "llama-tiny" ? 0 : 150'000;
    o.seed = 23;
    o.threads = 2;
    Status s = tools::MakeCheckpoint(o);
    if (!s.ok()) return "";
    dirs_[preset] = o.out_dir;
    return o.out_dir;
  }
  const std::string& root() const { return root_; }

 private:
  Fixtures() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/hoist-embed-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) root_ = tmpl;
  }
  ~Fixtures() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  std::string root_;
  std::map<std::string, std::string> dirs_;
};

inline std::map<std::string, testref::RefTensor> Reference(const std::string& dir, int tp, int ep,
                                                           int rank) {
  testref::RefOptions ro;
  ro.tp = tp;
  ro.ep = ep;
  ro.rank = rank;
  return testref::ReferenceRankTensors(dir, ro);
}

// Every tensor of `m` equals the reference: same names, dtype, shape, contiguous strides, bytes.
// `read` copies a tensor's bytes to the host (the host backend: plain memcpy).
inline void ExpectMatchesReference(const Model& m,
                                   const std::map<std::string, testref::RefTensor>& ref) {
  ASSERT_EQ(m.tensors().size(), ref.size());
  for (const Tensor& t : m.tensors()) {
    auto it = ref.find(t.name);
    ASSERT_NE(it, ref.end()) << "not in the reference: " << t.name;
    const testref::RefTensor& want = it->second;
    EXPECT_EQ(t.dtype, want.dtype) << t.name;
    ASSERT_EQ(t.shape.size(), want.shape.size()) << t.name;
    std::int64_t stride = 1;
    for (int d = static_cast<int>(t.shape.size()) - 1; d >= 0; --d) {
      EXPECT_EQ(static_cast<std::uint64_t>(t.shape[d]), want.shape[d]) << t.name;
      EXPECT_EQ(t.strides[d], stride) << t.name << " dim " << d;
      stride *= t.shape[d];
    }
    ASSERT_EQ(t.bytes, want.data.size()) << t.name;
    EXPECT_EQ(t.data, static_cast<std::byte*>(m.arena()) + t.arena_offset) << t.name;
    EXPECT_EQ(std::memcmp(t.data, want.data.data(), t.bytes), 0) << t.name << " differs";
  }
}

}  // namespace hoist::testembed
