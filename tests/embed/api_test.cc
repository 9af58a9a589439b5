// The embedding API on the host backend: hoist::Load (options and topology file), the C API and
// DLPack export each load mkckpt fixtures and match the independent reference byte for byte; an
// engine-supplied arena is used and given back exactly once; exports keep released weights alive.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <vector>

#include "hoist/hoist.h"
#include "hoist/hoist_c.h"
#include "hoist/hoist_dlpack.h"
#include "tests/embed/embed_util.h"

namespace hoist {
namespace {

using testembed::ExpectMatchesReference;
using testembed::Fixtures;
using testembed::Reference;

LoadOptions HostOptions(const std::string& dir, int tp, int ep, int rank) {
  LoadOptions o;
  o.model = dir;
  o.tp = tp;
  if (ep > 0) o.ep = ep;
  o.rank = rank;
  o.device = "host";
  o.threads = 2;
  return o;
}

TEST(EmbedLoad, EveryRankMatchesTheReference) {
  struct Case {
    const char* preset;
    int tp, ep;
  };
  for (const Case& c :
       {Case{"qwen3-tiny", 2, 0}, Case{"qwen3-moe-tiny", 2, 4}, Case{"deepseek-v3-tiny", 1, 2}}) {
    const std::string dir = Fixtures::Get().Dir(c.preset);
    ASSERT_FALSE(dir.empty());
    const int world = c.ep > 0 ? c.ep : c.tp;
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(std::string(c.preset) + " rank " + std::to_string(r));
      Result<Model> m = Load(HostOptions(dir, c.tp, c.ep, r));
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ(m->rank(), r);
      EXPECT_EQ(m->world(), world);
      EXPECT_EQ(m->device_type(), DeviceType::kHost);
      EXPECT_FALSE(m->attached());
      EXPECT_GT(m->arena_bytes(), 0u);
      ExpectMatchesReference(*m, Reference(dir, c.tp, c.ep, r));
      bool has_total = false;
      for (const Phase& p : m->phases()) has_total |= p.name == "total";
      EXPECT_TRUE(has_total);
      EXPECT_TRUE(m->Release().ok());
      EXPECT_FALSE(m->valid());
      EXPECT_TRUE(m->tensors().empty());
      EXPECT_TRUE(m->Release().ok());  // idempotent
    }
  }
}

TEST(EmbedLoad, FromATopologyFile) {
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  const std::string yaml = Fixtures::Get().root() + "/tp2.yaml";
  std::ofstream(yaml) << "model: " << dir << "\ntp: 2\ndevice: host\nlayout: hf\n";
  LoadOptions o;
  o.topology_file = yaml;
  o.rank = 1;
  Result<Model> m = Load(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  testref::RefOptions ro;
  ro.tp = 2;
  ro.rank = 1;
  ro.fused = false;
  ExpectMatchesReference(*m, testref::ReferenceRankTensors(dir, ro));
  // hf names: the unfused projections are there, the fused one is not.
  EXPECT_NE(m->Find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(m->Find("model.layers.0.self_attn.qkv_proj.weight"), nullptr);
}

TEST(EmbedLoad, BadInputIsAStatusNamingTheCause) {
  Result<Model> m = Load(HostOptions(Fixtures::Get().root() + "/no-such-model", 1, 0, 0));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no-such-model"), std::string::npos) << m.status().ToString();
  LoadOptions o = HostOptions(Fixtures::Get().Dir("qwen3-tiny"), 1, 0, 0);
  o.layout = "sideways";
  m = Load(o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("sideways"), std::string::npos);
  o = HostOptions(Fixtures::Get().Dir("qwen3-tiny"), 2, 0, 5);  // rank outside the plan
  m = Load(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rank 5"), std::string::npos) << m.status().ToString();
}

struct Counting {
  int allocs = 0, frees = 0;
  void* last = nullptr;
  std::uint64_t bytes = 0;
  int device = -2;
};

TEST(EmbedLoad, EngineAllocatorOwnsTheArena) {
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  Counting c;
  LoadOptions o = HostOptions(dir, 2, 0, 0);
  o.allocator.allocate = [&c](std::uint64_t bytes, int device) -> void* {
    ++c.allocs;
    c.bytes = bytes;
    c.device = device;
    c.last = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    std::memset(c.last, 0x5A, bytes);
    return c.last;
  };
  o.allocator.deallocate = [&c](void* p, std::uint64_t bytes, int device) {
    ++c.frees;
    EXPECT_EQ(p, c.last);
    EXPECT_EQ(bytes, c.bytes);
    EXPECT_EQ(device, -1);
    std::free(p);
  };
  Result<Model> m = Load(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(c.allocs, 1);
  EXPECT_EQ(m->arena(), c.last);
  EXPECT_EQ(m->arena_bytes(), c.bytes);
  EXPECT_EQ(c.device, -1);
  ExpectMatchesReference(*m, Reference(dir, 2, 0, 0));
  EXPECT_EQ(c.frees, 0);
  EXPECT_TRUE(m->Release().ok());
  EXPECT_EQ(c.frees, 1);
}

TEST(EmbedLoad, FailedLoadGivesTheEngineArenaBack) {
  Counting c;
  LoadOptions o = HostOptions(Fixtures::Get().Dir("qwen3-tiny"), 1, 0, 0);
  o.allocator.allocate = [&c](std::uint64_t bytes, int) -> void* {
    ++c.allocs;
    // Misaligned on purpose: the load must refuse it and still hand it back.
    c.last = static_cast<char*>(std::aligned_alloc(256, (bytes + 256) / 256 * 256 + 256)) + 16;
    return c.last;
  };
  o.allocator.deallocate = [&c](void* p, std::uint64_t, int) {
    ++c.frees;
    std::free(static_cast<char*>(p) - 16);
  };
  Result<Model> m = Load(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("aligned"), std::string::npos) << m.status().ToString();
  EXPECT_EQ(c.allocs, 1);
  EXPECT_EQ(c.frees, 1);
}

TEST(EmbedDLPack, ExportsMatchTheReferenceAndKeepReleasedWeightsAlive) {
  const std::string dir = Fixtures::Get().Dir("deepseek-v3-tiny");  // BF16, F8_E4M3 and F32
  Counting c;
  LoadOptions o = HostOptions(dir, 2, 0, 1);
  o.allocator.allocate = [&c](std::uint64_t bytes, int) -> void* {
    ++c.allocs;
    c.last = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    return c.last;
  };
  o.allocator.deallocate = [&c](void* p, std::uint64_t, int) {
    ++c.frees;
    std::free(p);
  };
  Result<Model> m = Load(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto ref = Reference(dir, 2, 0, 1);
  std::vector<DLManagedTensor*> exports;
  std::map<std::string, int> codes;
  for (std::size_t i = 0; i < m->tensors().size(); ++i) {
    const Tensor& t = m->tensors()[i];
    Result<DLManagedTensor*> d = ToDLPack(*m, i);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const DLTensor& dl = (*d)->dl_tensor;
    EXPECT_EQ(dl.device.device_type, kDLCPU);
    EXPECT_EQ(dl.byte_offset, 0u);
    ASSERT_EQ(dl.ndim, static_cast<int>(ref.at(t.name).shape.size())) << t.name;
    std::uint64_t elements = 1;
    for (int k = 0; k < dl.ndim; ++k) {
      EXPECT_EQ(static_cast<std::uint64_t>(dl.shape[k]), ref.at(t.name).shape[k]);
      elements *= static_cast<std::uint64_t>(dl.shape[k]);
    }
    EXPECT_EQ(dl.strides[dl.ndim - 1], 1);
    EXPECT_EQ(dl.dtype.lanes, 1);
    EXPECT_EQ(elements * dl.dtype.bits / 8, ref.at(t.name).data.size()) << t.name;
    if (t.dtype == "BF16") {
      EXPECT_EQ(dl.dtype.code, kDLBfloat);
      EXPECT_EQ(dl.dtype.bits, 16);
    } else if (t.dtype == "F32") {
      EXPECT_EQ(dl.dtype.code, kDLFloat);
      EXPECT_EQ(dl.dtype.bits, 32);
    } else if (t.dtype == "F8_E4M3") {
      EXPECT_EQ(dl.dtype.code, kDLUInt);
      EXPECT_EQ(dl.dtype.bits, 8);
    }
    codes[t.dtype] = dl.dtype.code;
    exports.push_back(*d);
  }
  EXPECT_EQ(codes.size(), 3u) << "the fixture should have BF16, F8_E4M3 and F32 tensors";
  Result<DLManagedTensor*> raw = ToDLPack(*m, std::string_view("model.norm.weight"), true);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ((*raw)->dl_tensor.dtype.code, kDLUInt);
  EXPECT_EQ((*raw)->dl_tensor.dtype.bits, 16);
  exports.push_back(*raw);
  EXPECT_FALSE(ToDLPack(*m, std::string_view("no.such.tensor")).ok());
  EXPECT_FALSE(ToDLPack(*m, m->tensors().size()).ok());

  // Release: the exports still hold the weights, which stay readable and intact.
  std::vector<std::string> names;
  for (const Tensor& t : m->tensors()) names.push_back(t.name);
  EXPECT_TRUE(m->Release().ok());
  EXPECT_EQ(c.frees, 0);
  for (std::size_t i = 0; i + 1 < exports.size(); ++i) {
    const std::vector<std::uint8_t>& want = ref.at(names[i]).data;
    EXPECT_EQ(std::memcmp(exports[i]->dl_tensor.data, want.data(), want.size()), 0) << names[i];
  }
  for (DLManagedTensor* d : exports) {
    EXPECT_EQ(c.frees, 0);
    d->deleter(d);
  }
  EXPECT_EQ(c.frees, 1);  // the last deleter gave the arena back
}

TEST(EmbedCApi, LoadFindDLPackRelease) {
  const std::string dir = Fixtures::Get().Dir("qwen3-moe-tiny");
  hoist_load_options o;
  hoist_load_options_init(&o);
  EXPECT_EQ(o.ep, HOIST_UNSET);
  EXPECT_EQ(o.size, sizeof o);
  o.model = dir.c_str();
  o.tp = 2;
  o.ep = 2;
  o.rank = 1;
  o.device = "host";
  hoist_model* m = nullptr;
  ASSERT_EQ(hoist_load(&o, &m), HOIST_OK) << hoist_last_error();
  ASSERT_NE(m, nullptr);
  EXPECT_STREQ(hoist_last_error(), "");
  int rank = -1, world = -1, cuda = -1, ordinal = 7;
  EXPECT_EQ(hoist_model_rank(m, &rank, &world), HOIST_OK);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(world, 2);
  EXPECT_EQ(hoist_model_device(m, &cuda, &ordinal), HOIST_OK);
  EXPECT_EQ(cuda, 0);
  EXPECT_EQ(ordinal, -1);

  const auto ref = Reference(dir, 2, 2, 1);
  ASSERT_EQ(hoist_model_tensor_count(m), ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    hoist_tensor t;
    ASSERT_EQ(hoist_model_tensor(m, i, &t), HOIST_OK);
    const testref::RefTensor& want = ref.at(t.name);
    EXPECT_STREQ(t.dtype, want.dtype.c_str());
    ASSERT_EQ(t.ndim, static_cast<int>(want.shape.size()));
    for (int k = 0; k < t.ndim; ++k)
      EXPECT_EQ(static_cast<std::uint64_t>(t.shape[k]), want.shape[k]);
    ASSERT_EQ(t.bytes, want.data.size());
    EXPECT_EQ(std::memcmp(t.data, want.data.data(), t.bytes), 0) << t.name;
    hoist_tensor again;
    ASSERT_EQ(hoist_model_find(m, t.name, &again), HOIST_OK);
    EXPECT_EQ(again.data, t.data);
  }
  hoist_tensor none;
  EXPECT_EQ(hoist_model_find(m, "model.layers.0.no_such.weight", &none), HOIST_NOT_FOUND);
  EXPECT_NE(std::string(hoist_last_error()).find("no_such"), std::string::npos);
  EXPECT_EQ(hoist_model_tensor(m, ref.size(), &none), HOIST_INVALID_ARGUMENT);

  DLManagedTensor* d = nullptr;
  ASSERT_EQ(hoist_model_dlpack(m, 0, 0, &d), HOIST_OK);
  hoist_tensor t0;
  ASSERT_EQ(hoist_model_tensor(m, 0, &t0), HOIST_OK);
  EXPECT_EQ(d->dl_tensor.data, t0.data);
  EXPECT_EQ(hoist_model_release(m), HOIST_OK);
  // The export outlives the handle.
  const testref::RefTensor& want0 = ref.at(t0.name);
  EXPECT_EQ(std::memcmp(d->dl_tensor.data, want0.data.data(), want0.data.size()), 0);
  d->deleter(d);

  EXPECT_EQ(hoist_model_release(nullptr), HOIST_OK);
  hoist_load_options bad;
  hoist_load_options_init(&bad);
  bad.model = "/nonexistent/model";
  bad.device = "host";
  hoist_model* none_model = reinterpret_cast<hoist_model*>(0x1);
  EXPECT_NE(hoist_load(&bad, &none_model), HOIST_OK);
  EXPECT_EQ(none_model, nullptr);
  EXPECT_NE(std::string(hoist_last_error()).find("/nonexistent/model"), std::string::npos)
      << hoist_last_error();
}

}  // namespace
}  // namespace hoist
