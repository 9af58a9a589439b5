// hoist::LoadAsync on the host backend: the tensors have their final addresses while the bytes
// are held back (a test hook, HOIST_TEST_HOLD_STREAMING, holds the streaming once the arena
// exists; the host arena starts as 0xCD, so nothing has landed yet), Wait gives byte-identical
// tensors against the independent reference (tests/reference) at the same addresses, a layer
// group reported landed holds its final bytes (and every earlier one), Cancel and a shard
// truncated while streaming surface at Wait naming the rank (and the file) with the engine's
// arena given back at Release, and the C API does the same.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "hoist/hoist.h"
#include "hoist/hoist_c.h"
#include "tests/embed/embed_util.h"

namespace hoist {
namespace {

using testembed::ExpectMatchesReference;
using testembed::Fixtures;
using testembed::Reference;

LoadOptions HostOptions(const std::string& dir, int tp, int rank) {
  LoadOptions o;
  o.model = dir;
  o.tp = tp;
  o.rank = rank;
  o.device = "host";
  o.threads = 2;
  return o;
}

// The streaming hold is a test hook (HOIST_TEST_HOOKS builds: tools/test.sh's).
#define REQUIRE_TEST_HOOKS() \
  if (!HOIST_TEST_HOOKS) GTEST_SKIP() << "needs a build with HOIST_TEST_HOOKS"

// Holds every streaming load of this process once its arena exists, until Open() (or the
// destructor) creates the gate file.
class StreamingGate {
 public:
  StreamingGate() : path_(Fixtures::Get().root() + "/gate-" + std::to_string(++count_)) {
    ::setenv("HOIST_TEST_HOLD_STREAMING", path_.c_str(), 1);
  }
  ~StreamingGate() {
    Open();
    ::unsetenv("HOIST_TEST_HOLD_STREAMING");
  }
  void Open() { std::ofstream(path_).put('1'); }

 private:
  static inline int count_ = 0;
  std::string path_;
};

// Counts the engine's arena blocks, so a test can see that none is left.
struct Blocks {
  int live = 0;
  void* last = nullptr;
  Allocator Make() {
    Allocator a;
    a.allocate = [this](std::uint64_t bytes, int) -> void* {
      ++live;
      last = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
      std::memset(last, 0xCD, bytes);
      return last;
    };
    a.deallocate = [this](void* p, std::uint64_t, int) {
      --live;
      std::free(p);
    };
    return a;
  }
};

bool AllBytes(const Tensor& t, unsigned char value) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  for (std::uint64_t i = 0; i < t.bytes; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

TEST(EmbedAsync, AddressesBeforeBytesThenTheReference) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  StreamingGate gate;
  Result<Model> m = LoadAsync(HostOptions(dir, 2, 1));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->pending());
  ASSERT_FALSE(m->tensors().empty());
  ASSERT_GE(m->layers().size(), 3u);
  EXPECT_EQ(m->layers().front(), "embeddings");
  EXPECT_EQ(m->layers()[1], "layer 0");
  EXPECT_EQ(m->layers().back(), "head");
  std::vector<void*> addresses;
  for (const Tensor& t : m->tensors()) {
    EXPECT_EQ(t.data, static_cast<std::byte*>(m->arena()) + t.arena_offset) << t.name;
    EXPECT_TRUE(AllBytes(t, 0xCD)) << t.name << ": bytes landed while the streaming was held";
    addresses.push_back(t.data);
  }
  EXPECT_FALSE(m->LayerReady(0));
  const LoadProgress held = m->progress();
  EXPECT_EQ(held.layers_ready, 0);
  EXPECT_FALSE(held.ended);
  EXPECT_GT(held.bytes_total, 0u);

  gate.Open();
  ASSERT_TRUE(m->Wait().ok());
  EXPECT_FALSE(m->pending());
  EXPECT_TRUE(m->Wait().ok());  // idempotent
  for (std::size_t i = 0; i < addresses.size(); ++i) EXPECT_EQ(m->tensors()[i].data, addresses[i]);
  ExpectMatchesReference(*m, Reference(dir, 2, 0, 1));
  const LoadProgress done = m->progress();
  EXPECT_TRUE(done.ended);
  EXPECT_EQ(done.bytes_done, done.bytes_total);
  EXPECT_EQ(done.layers_ready, static_cast<int>(m->layers().size()));
  EXPECT_TRUE(m->StreamWait(nullptr).ok());  // the host backend: returns once landed
  EXPECT_TRUE(m->Release().ok());
}

// Each WaitLayer(k) returns with groups 0..k final, while later groups may still stream (one fill
// thread, small slots: a qwen3-tiny rank is many slots).
TEST(EmbedAsync, LayersLandInOrderWithFinalBytes) {
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  const auto ref = Reference(dir, 1, 0, 0);
  for (const char* read : {"buffered", "mmap"}) {
    SCOPED_TRACE(read);
    LoadOptions o = HostOptions(dir, 1, 0);
    o.threads = 1;
    o.slot_mib = 1;
    o.read = read;
    Result<Model> m = LoadAsync(o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const int layers = static_cast<int>(m->layers().size());
    for (int k = 0; k < layers; ++k) {
      ASSERT_TRUE(m->WaitLayer(k).ok()) << m->layers()[k];
      EXPECT_TRUE(m->LayerReady(k));
      for (const Tensor& t : m->tensors()) {
        if (t.layer > k) continue;
        const auto& want = ref.at(t.name).data;
        ASSERT_EQ(t.bytes, want.size());
        EXPECT_EQ(std::memcmp(t.data, want.data(), t.bytes), 0)
            << t.name << " (" << m->layers()[t.layer] << ") not final once " << m->layers()[k]
            << " was reported landed";
      }
    }
    EXPECT_FALSE(m->WaitLayer(layers).ok());
    ASSERT_TRUE(m->Wait().ok());
    ExpectMatchesReference(*m, ref);
  }
}

TEST(EmbedAsync, CancelSurfacesAtWaitAndGivesTheArenaBack) {
  REQUIRE_TEST_HOOKS();
  Blocks blocks;
  {
    StreamingGate gate;
    LoadOptions o = HostOptions(Fixtures::Get().Dir("qwen3-tiny"), 2, 0);
    o.allocator = blocks.Make();
    Result<Model> m = LoadAsync(o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(blocks.live, 1);
    EXPECT_EQ(m->arena(), blocks.last);
    m->Cancel();
    const Status s = m->Wait();
    EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
    EXPECT_NE(s.message().find("cancelled"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.ToString();
    EXPECT_FALSE(m->pending());
    EXPECT_FALSE(m->WaitLayer(0).ok());
    EXPECT_EQ(blocks.live, 1);  // still the engine's memory until Release
    EXPECT_TRUE(m->Release().ok());
    EXPECT_EQ(blocks.live, 0);
  }
  {  // Release during streaming is cancel + wait.
    StreamingGate gate;
    LoadOptions o = HostOptions(Fixtures::Get().Dir("qwen3-tiny"), 2, 0);
    o.allocator = blocks.Make();
    Result<Model> m = LoadAsync(o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_TRUE(m->Release().ok());
    EXPECT_EQ(blocks.live, 0);
  }
}

TEST(EmbedAsync, AShardTruncatedWhileStreamingFailsAtWaitNamingRankAndFile) {
  REQUIRE_TEST_HOOKS();
  const std::string src = Fixtures::Get().Dir("qwen3-tiny");
  const std::string dir = Fixtures::Get().root() + "/truncated";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(src, dir);
  std::string shard;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") shard = e.path().string();
  }
  ASSERT_FALSE(shard.empty());
  Blocks blocks;
  StreamingGate gate;
  LoadOptions o = HostOptions(dir, 1, 0);
  o.read = "buffered";
  o.allocator = blocks.Make();
  Result<Model> m = LoadAsync(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The files were checked before the arena; cut this one now, as a dying disk would.
  ASSERT_EQ(::truncate(shard.c_str(), 4096), 0);
  gate.Open();
  const Status s = m->Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::filesystem::path(shard).filename().string()), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(m->Release().ok());
  EXPECT_EQ(blocks.live, 0);
}

TEST(EmbedAsync, CApi) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  StreamingGate gate;
  hoist_load_options o = HOIST_LOAD_OPTIONS_INITIALIZER;
  o.model = dir.c_str();
  o.tp = 2;
  o.rank = 1;
  o.device = "host";
  hoist_model* m = nullptr;
  ASSERT_EQ(hoist_load_async(&o, &m), HOIST_OK) << hoist_last_error();
  int pending = 0, layers = 0, ready = 1, layer = -1;
  std::uint64_t done = 1, total = 0;
  ASSERT_EQ(hoist_model_pending(m, &pending), HOIST_OK);
  EXPECT_EQ(pending, 1);
  ASSERT_EQ(hoist_model_progress(m, &done, &total, nullptr, &layers), HOIST_OK);
  EXPECT_GT(total, 0u);
  EXPECT_GE(layers, 3);
  ASSERT_EQ(hoist_model_layer_ready(m, 0, &ready), HOIST_OK);
  EXPECT_EQ(ready, 0);
  const char* name = nullptr;
  ASSERT_EQ(hoist_model_layer_name(m, layers - 1, &name), HOIST_OK);
  EXPECT_STREQ(name, "head");
  EXPECT_EQ(hoist_model_layer_name(m, layers, &name), HOIST_INVALID_ARGUMENT);
  ASSERT_EQ(hoist_model_tensor_layer(m, 0, &layer), HOIST_OK);
  EXPECT_GE(layer, 0);
  hoist_tensor t = HOIST_TENSOR_INITIALIZER;
  ASSERT_EQ(hoist_model_tensor(m, 0, &t), HOIST_OK);
  void* before = t.data;
  gate.Open();
  ASSERT_EQ(hoist_model_stream_wait(m, -1, nullptr), HOIST_OK) << hoist_last_error();
  ASSERT_EQ(hoist_model_wait(m), HOIST_OK) << hoist_last_error();
  ASSERT_EQ(hoist_model_wait_layer(m, layers - 1), HOIST_OK);
  ASSERT_EQ(hoist_model_pending(m, &pending), HOIST_OK);
  EXPECT_EQ(pending, 0);
  const auto ref = Reference(dir, 2, 0, 1);
  ASSERT_EQ(hoist_model_tensor(m, 0, &t), HOIST_OK);
  EXPECT_EQ(t.data, before);
  const auto& want = ref.at(t.name).data;
  ASSERT_EQ(t.bytes, want.size());
  EXPECT_EQ(std::memcmp(t.data, want.data(), t.bytes), 0) << t.name;
  EXPECT_EQ(hoist_model_release(m), HOIST_OK);

  StreamingGate gate2;  // cancel through C
  ASSERT_EQ(hoist_load_async(&o, &m), HOIST_OK) << hoist_last_error();
  ASSERT_EQ(hoist_model_cancel(m), HOIST_OK);
  EXPECT_EQ(hoist_model_wait(m), HOIST_ABORTED);
  EXPECT_NE(std::string(hoist_last_error()).find("cancelled"), std::string::npos);
  EXPECT_EQ(hoist_model_release(m), HOIST_OK);
}

}  // namespace
}  // namespace hoist
