// The plan against the independent reference (tests/reference): for every tiny preset family,
// every tp (1, 2, 4, 8; 16 for qwen3-tiny), both layouts, and for the MoE families ep 2 / 4 with
// linear and round-robin placement, build the plan from a real mkckpt checkpoint, execute each
// rank's copies and fills with a plain pread loop into a byte vector, and compare every output
// tensor (name set, dtype, shape, bytes) with ReferenceRankTensors, byte for byte.
//
// Each preset is written once per test binary run (multi-shard, into a temp dir removed at exit).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "tests/reference/reference.h"
#include "tests/test_paths.h"
#include "tools/mkckpt.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;

// "hf:NAME": the checkpoint transformers writes for architecture NAME (tests/data/hf/NAME);
// "quant:NAME": a quantized checkpoint derived from one (tests/data/quant/NAME: FP8, MXFP4,
// GPTQ, AWQ, compressed-tensors WNA16 and NVFP4, ModelOpt NVFP4); "derived:NAME": another variant
// (tests/data/derived/NAME).
bool IsHf(const std::string& preset) {
  return preset.rfind("hf:", 0) == 0 || preset.rfind("quant:", 0) == 0 ||
         preset.rfind("derived:", 0) == 0;
}

// qwen3-tiny is written as one model.safetensors (no index); the others as several shards.
bool SingleFile(const std::string& preset) { return preset == "qwen3-tiny"; }

// Temp checkpoints, one per preset, made on first use and removed when the binary exits.
class Fixtures : public ::testing::Environment {
 public:
  static Fixtures* Get() {
    static Fixtures* f = [] {
      auto* env = new Fixtures;
      ::testing::AddGlobalTestEnvironment(env);  // gtest owns it; TearDown removes the dir
      return env;
    }();
    return f;
  }

  // The folder holding `preset`, or "" with *error set.
  std::string Dir(const std::string& preset, std::string* error) {
    auto it = dirs_.find(preset);
    if (it != dirs_.end()) return it->second;
    if (root_.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "hoist-plan-ref-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) {
        *error = "mkdtemp failed: " + std::string(std::strerror(errno));
        return "";
      }
      root_ = tmpl;
    }
    tools::MkckptOptions o;
    if (IsHf(preset)) {  // tests/data/hf: the names, shapes and dtypes transformers writes
      const std::size_t colon = preset.find(':');
      const std::string data = testing::SourceDir() + "/tests/data/" + preset.substr(0, colon) +
                               "/" + preset.substr(colon + 1);
      o.config_path = data + "/config.json";
      o.tensors_path = data + "/tensors.json";
    } else {
      o.preset = preset;
    }
    o.out_dir = root_ + "/" + preset;
    o.shard_size = SingleFile(preset) ? 0 : 100'000;  // several shards even for tiny presets
    o.seed = 7;
    o.threads = 2;
    Status s = tools::MakeCheckpoint(o);
    if (!s.ok()) {
      *error = s.ToString();
      return "";
    }
    dirs_[preset] = o.out_dir;
    return o.out_dir;
  }

  void TearDown() override {
    if (!root_.empty()) {
      std::error_code ec;
      fs::remove_all(root_, ec);
    }
  }

 private:
  std::string root_;
  std::map<std::string, std::string> dirs_;
};

struct Case {
  std::string preset;
  int tp = 1;
  int ep = 0;
  bool round_robin = false;
  bool fused = true;
  // Empty: the plan must succeed. Otherwise it must fail with Code InvalidArgument and a message
  // holding every one of these phrases, and the reference must refuse the topology too.
  std::vector<std::string> error_phrases = {};
};

// A shard boundary inside a 128-wide FP8 scale block.
std::vector<std::string> Fp8BlockError(int tp) {
  return {"weight_scale_inv", "tp " + std::to_string(tp), "FP8 scale block",
          "use a tp that divides N/128", "or --ep for experts"};
}

// A shard boundary inside a pack or a scale group of a quantized layer's tensor `tensor`.
std::vector<std::string> QuantGroupError(const std::string& tensor, int tp) {
  return {tensor, "tp " + std::to_string(tp), "tp values that work"};
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.preset << " tp " << c.tp << " ep " << c.ep << (c.round_robin ? " round_robin" : "")
      << (c.fused ? " fused" : " hf");
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string n = c.preset + "_tp" + std::to_string(c.tp);
  if (c.ep > 0) n += "_ep" + std::to_string(c.ep) + (c.round_robin ? "_rr" : "_linear");
  n += c.fused ? "_fused" : "_hf";
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

// Executes one rank's copies (pread, row by row) and fills into a fresh arena set to 0xEE.
Status ExecuteRank(const proto::LoadPlan& plan, int rank, std::vector<std::uint8_t>* arena) {
  const proto::RankPlan& rp = plan.ranks(rank);
  arena->assign(rp.arena_bytes(), 0xEE);
  std::vector<int> fds;
  for (const auto& f : plan.files()) {
    int fd = open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      for (int x : fds) close(x);
      return Status::IoError(f.path() + ": " + std::strerror(errno));
    }
    fds.push_back(fd);
  }
  Status status;
  for (const auto& c : rp.copies()) {
    for (std::uint64_t i = 0; i < c.rows() && status.ok(); ++i) {
      const std::uint64_t src = c.src_offset() + (c.rows() > 1 ? i * c.src_pitch() : 0);
      const std::uint64_t dst = c.dst_offset() + (c.rows() > 1 ? i * c.dst_pitch() : 0);
      if (dst + c.width() > arena->size()) {
        status = Status::Internal("copy lands outside the arena");
        break;
      }
      ssize_t n = pread(fds[c.file()], arena->data() + dst, c.width(), static_cast<off_t>(src));
      if (n != static_cast<ssize_t>(c.width())) {
        status = Status::IoError(plan.files(static_cast<int>(c.file())).path() +
                                 ": short read at offset " + std::to_string(src));
      }
    }
  }
  for (int fd : fds) close(fd);
  HOIST_RETURN_IF_ERROR(status);
  for (const auto& f : rp.fills()) {
    if (f.dst_offset() + f.bytes() > arena->size()) return Status::Internal("fill outside arena");
    std::memset(arena->data() + f.dst_offset(), static_cast<int>(f.value()), f.bytes());
  }
  // Tensors the plan says to transpose after the copies: element (r, c) of each matrix to (c, r).
  for (const auto& t : rp.tensors()) {
    if (!t.has_transpose()) continue;
    const std::uint64_t R = t.transpose().rows(), C = t.transpose().cols();
    const std::uint64_t n = t.transpose().batch() * R * C;
    if (n == 0 || t.bytes() % n != 0) return Status::Internal(t.name() + ": bad transpose");
    const std::uint64_t es = t.bytes() / n;
    std::uint8_t* base = arena->data() + t.arena_offset();
    const std::vector<std::uint8_t> landed(base, base + t.bytes());
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t m = i / (R * C), r = i / C % R, c = i % C;
      std::memcpy(base + ((m * C + c) * R + r) * es, landed.data() + i * es, es);
    }
  }
  return Status::Ok();
}

class PlanReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanReferenceTest, EveryRankMatchesTheReferenceByteForByte) {
  const Case& c = GetParam();
  std::string error;
  const std::string dir = Fixtures::Get()->Dir(c.preset, &error);
  ASSERT_FALSE(dir.empty()) << error;
  auto ckpt = OpenCheckpoint(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (SingleFile(c.preset)) {
    ASSERT_EQ(ckpt->files.size(), 1u);
  } else {
    ASSERT_GT(ckpt->files.size(), 1u) << "fixture should span several shards";
  }

  PlanOptions o;
  o.tp = c.tp;
  o.ep = c.ep;
  o.layout = c.fused ? proto::LAYOUT_FUSED : proto::LAYOUT_HF;
  o.placement = c.round_robin ? proto::PLACEMENT_ROUND_ROBIN : proto::PLACEMENT_LINEAR;
  auto plan = BuildLoadPlan(*ckpt, o);

  testref::RefOptions ro;
  ro.tp = c.tp;
  ro.ep = c.ep;
  ro.fused = c.fused;
  ro.round_robin = c.round_robin;

  if (!c.error_phrases.empty()) {
    ASSERT_FALSE(plan.ok()) << "tp " << c.tp << " must split a block, pack or scale group";
    const std::string& m = plan.status().message();
    EXPECT_EQ(plan.status().code(), Code::kInvalidArgument) << plan.status().ToString();
    for (const std::string& phrase : c.error_phrases) {
      EXPECT_NE(m.find(phrase), std::string::npos) << "no '" << phrase << "' in: " << m;
    }
    // The reference agrees that this topology is impossible.
    EXPECT_ANY_THROW(testref::ReferenceRankTensors(dir, ro));
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int world = c.ep > 0 ? c.ep : c.tp;
  ASSERT_EQ(plan->ranks_size(), world);
  EXPECT_EQ(plan->source_tensors(), ckpt->tensors.size());
  EXPECT_EQ(plan->source_bytes(), ckpt->tensor_bytes);

  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ro.rank = r;
    std::map<std::string, testref::RefTensor> ref;
    try {
      ref = testref::ReferenceRankTensors(dir, ro);
    } catch (const std::exception& e) {
      FAIL() << "reference failed: " << e.what();
    }
    std::vector<std::uint8_t> arena;
    Status s = ExecuteRank(*plan, r, &arena);
    ASSERT_TRUE(s.ok()) << s.ToString();

    const proto::RankPlan& rp = plan->ranks(r);
    std::set<std::string> names, ref_names;
    for (const auto& [name, t] : ref) ref_names.insert(name);
    for (const auto& t : rp.tensors()) {
      EXPECT_TRUE(names.insert(t.name()).second) << "duplicate output " << t.name();
      auto it = ref.find(t.name());
      if (it == ref.end()) continue;  // reported by the name-set comparison below
      const testref::RefTensor& want = it->second;
      EXPECT_EQ(t.dtype(), want.dtype) << t.name();
      EXPECT_EQ(std::vector<std::uint64_t>(t.shape().begin(), t.shape().end()), want.shape)
          << t.name();
      ASSERT_EQ(t.bytes(), want.data.size()) << t.name();
      ASSERT_LE(t.arena_offset() + t.bytes(), arena.size()) << t.name();
      const bool same =
          std::memcmp(arena.data() + t.arena_offset(), want.data.data(), want.data.size()) == 0;
      EXPECT_TRUE(same) << t.name() << ": bytes differ from the reference";
    }
    EXPECT_EQ(names, ref_names);
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (bool fused : {true, false}) {
    for (const char* preset : {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny"}) {
      for (int tp : {1, 2, 4, 8}) cases.push_back({preset, tp, 0, false, fused});
    }
    cases.push_back({"qwen3-tiny", 16, 0, false, fused});  // KV heads replicated (4 kv heads)
    // FP8 block scales on k/v: one kv head's block per rank at tp 2, replicated at tp 4.
    for (int tp : {1, 2, 4}) cases.push_back({"qwen3-fp8-tiny", tp, 0, false, fused});
    // deepseek-v3-tiny: o_proj's 256 input columns split in 64 at tp 4 (inside a 128 block).
    for (int tp : {1, 2}) cases.push_back({"deepseek-v3-tiny", tp, 0, false, fused});
    // (tp 8 is refused earlier: it does not divide the 4 MLA heads; parallelism_test.cc.)
    cases.push_back({"deepseek-v3-tiny", 4, 0, false, fused, Fp8BlockError(4)});
    for (const char* preset : {"qwen3-moe-tiny", "deepseek-v3-tiny"}) {
      for (bool rr : {false, true}) {
        for (int ep : {2, 4}) cases.push_back({preset, 1, ep, rr, fused});
        cases.push_back({preset, 2, 4, rr, fused});  // tp 2 x dp 2, experts over 4 ranks
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Presets, PlanReferenceTest, ::testing::ValuesIn(AllCases()), CaseName);

// The architectures as transformers 5.17 writes them (tests/data/hf): tp 1, 2 and 4 in both
// layouts (tp 8 replicates the 4 kv heads; Qwen3.5's 4 linear key heads refuse it), and ep 2
// and 4 for the mixtures of experts.
std::vector<Case> TransformersCases() {
  const std::vector<std::string> dense = {"mistral", "gemma3_text", "phi3",
                                          "qwen3_5", "gemma3_vlm",  "qwen3_5_vlm"};
  const std::vector<std::string> moe = {"mixtral",     "minimax_m2", "qwen2_moe",
                                        "qwen3_moe",   "glm4_moe",   "glm_moe_dsa",
                                        "deepseek_v2", "qwen3_next", "qwen3_5_moe"};
  std::vector<Case> cases;
  for (bool fused : {true, false}) {
    for (const auto* list : {&dense, &moe}) {
      for (const std::string& name : *list) {
        for (int tp : {1, 2, 4}) cases.push_back({"hf:" + name, tp, 0, false, fused});
      }
    }
    for (const std::string& name : dense) {
      if (name.rfind("qwen3_5", 0) != 0) cases.push_back({"hf:" + name, 8, 0, false, fused});
    }
    for (const std::string& name : moe) {
      for (int ep : {2, 4}) cases.push_back({"hf:" + name, 1, ep, false, fused});
      cases.push_back({"hf:" + name, 2, 4, true, fused});
    }
    // gpt_oss: every expert of a layer in one tensor. BF16 in both layouts (the fused one holds
    // them transposed, as vLLM does at load), MXFP4 in both (tp 4 would leave a rank without a
    // 32-value block of its 64-wide intermediate size: refused).
    for (int tp : {1, 2, 4}) cases.push_back({"hf:gpt_oss", tp, 0, false, fused});
    for (int tp : {1, 2}) cases.push_back({"quant:gpt_oss_mxfp4", tp, 0, false, fused});
    for (int ep : {2, 4}) {
      cases.push_back({"hf:gpt_oss", 1, ep, false, fused});
      cases.push_back({"quant:gpt_oss_mxfp4", 1, ep, false, fused});
    }
    // Llama 4: 3-D experts (halves of gate_up side by side; transposed in the fused layout); the
    // fused layout's q/k rotary de-interleave on a Llama 4 without MoE layers (tp 8: one kv head
    // a rank).
    for (int tp : {1, 2, 4}) cases.push_back({"hf:llama4_text", tp, 0, false, fused});
    for (int ep : {2, 4}) cases.push_back({"hf:llama4_text", 1, ep, false, fused});
    for (int tp : {1, 2, 4, 8}) cases.push_back({"derived:llama4_dense", tp, 0, false, fused});
    // Llama 4 as its FP8 exports store it: one tensor per expert, both layouts.
    for (int tp : {1, 2, 4}) cases.push_back({"quant:llama4_fp8_experts", tp, 0, false, fused});
    for (int ep : {2, 4}) cases.push_back({"quant:llama4_fp8_experts", 1, ep, false, fused});
    cases.push_back({"quant:llama4_fp8_experts", 2, 4, true, fused});
    // FP8 with per-channel (compressed-tensors) and per-tensor (ModelOpt) scales.
    for (const char* name : {"quant:qwen3_moe_fp8_channel", "quant:mixtral_fp8_tensor"}) {
      for (int tp : {1, 2, 4}) cases.push_back({name, tp, 0, false, fused});
      cases.push_back({name, 1, 2, false, fused});
      cases.push_back({name, 2, 4, true, fused});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Transformers, PlanReferenceTest, ::testing::ValuesIn(TransformersCases()),
                         CaseName);

// GPTQ, AWQ, compressed-tensors WNA16 and NVFP4, ModelOpt NVFP4 (tests/data/quant/README.md):
// tp 1, 2, 4 and 8 in both layouts, ep 2 for the mixtures of experts. Group size 32 (NVFP4: 16)
// refuses a row-parallel layer whose per-rank K cuts a group: the MoE downs' K of 64 at tp 4
// (WNA16) or 8 (NVFP4), o_proj's K of 128 at tp 8; act order (GPTQ desc_act, WNA16 actorder
// group) and channelwise scales stay whole under a row split, so those fixtures load at tp 8.
std::vector<Case> QuantizedCases() {
  const std::vector<std::string> dense = {"mistral_gptq", "mistral_wna16_channel"};
  const std::vector<std::string> moe = {"qwen3_moe_gptq_actorder", "mixtral_awq",
                                        "qwen3_moe_wna16",         "deepseek_v2_wna16_asym",
                                        "mixtral_nvfp4",           "qwen3_moe_nvfp4_ct"};
  // fixture -> {tp -> the tensor named in the refusal}
  const std::map<std::string, std::map<int, std::string>> refused = {
      {"mistral_gptq", {{8, "o_proj."}}},
      {"mixtral_awq", {{8, "o_proj."}}},
      {"qwen3_moe_wna16", {{4, "down_proj.weight_scale"}, {8, "down_proj.weight_scale"}}},
      {"qwen3_moe_nvfp4_ct", {{8, "down_proj.weight_scale"}}}};
  std::vector<Case> cases;
  for (bool fused : {true, false}) {
    for (const auto* list : {&dense, &moe}) {
      for (const std::string& name : *list) {
        for (int tp : {1, 2, 4, 8}) {
          Case c{"quant:" + name, tp, 0, false, fused};
          auto it = refused.find(name);
          if (it != refused.end() && it->second.count(tp)) {
            c.error_phrases = QuantGroupError(it->second.at(tp), tp);
          }
          cases.push_back(c);
        }
      }
    }
    for (const std::string& name : moe) cases.push_back({"quant:" + name, 1, 2, false, fused});
    // tp 2 x dp 2 with experts round-robin over 4 ranks: act order and asymmetric zero points.
    for (const char* name : {"quant:qwen3_moe_gptq_actorder", "quant:deepseek_v2_wna16_asym"}) {
      cases.push_back({name, 2, 4, true, fused});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Quantized, PlanReferenceTest, ::testing::ValuesIn(QuantizedCases()),
                         CaseName);

// DeepSeek-V4 (tests/data/derived/deepseek_v4: names, shapes and dtypes from vLLM's
// deepseek_v4.py): MXFP4 routed experts with ue8m0 scales, and the FP8-expert form
// (deepseek_v4_fp8); tp 1, 2, 4, ep 2 and 4, tp 2 x ep 4 round-robin, both layouts. tp 8 does not
// divide the 4 heads: refused by config.json's num_attention_heads, and by the reference. Then
// the checkpoint transformers writes.
std::vector<Case> DeepseekV4Cases() {
  std::vector<Case> cases;
  for (bool fused : {true, false}) {
    for (const char* name : {"derived:deepseek_v4", "derived:deepseek_v4_fp8"}) {
      for (int tp : {1, 2, 4}) cases.push_back({name, tp, 0, false, fused});
      for (int ep : {2, 4}) cases.push_back({name, 1, ep, false, fused});
      cases.push_back({name, 2, 4, true, fused});
      cases.push_back({name, 8, 0, false, fused, {"tp 8", "num_attention_heads = 4", "1, 2, 4"}});
    }
    // As transformers 5.17's save_pretrained writes it (tests/data/hf/deepseek_v4: BF16, the
    // model. prefix, attn.norm, layer_types / mlp_layer_types): o_groups 2 refuses tp 4.
    const char* hf = "hf:deepseek_v4";
    for (int tp : {1, 2}) cases.push_back({hf, tp, 0, false, fused});
    for (int ep : {2, 4}) cases.push_back({hf, 1, ep, false, fused});
    cases.push_back({hf, 2, 4, true, fused});
    cases.push_back({hf, 4, 0, false, fused, {"tp 4", "o_groups = 2", "1, 2"}});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(DeepseekV4, PlanReferenceTest, ::testing::ValuesIn(DeepseekV4Cases()),
                         CaseName);

}  // namespace
}  // namespace hoist::planner
