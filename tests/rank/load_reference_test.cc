// End to end on the host device: mkckpt fixture -> OpenCheckpoint -> BuildLoadPlan -> LoadRank
// through the real pipeline (small slots that wrap many times, several threads, every read mode
// in turn), then every output tensor of every rank is compared byte for byte with the
// independent reference (tests/reference: whole tensors indexed per vLLM's rules).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "rank/verify.h"
#include "rank/worker.h"
#include "tests/reference/reference.h"
#include "tests/test_paths.h"
#include "tests/transport/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::rank {
namespace {

// One checkpoint folder per preset, made on first use and shared by the whole binary.
class Fixtures {
 public:
  static Fixtures& Get() {
    static Fixtures f;  // destroyed at exit, removing the folder
    return f;
  }
  Result<std::string> Dir(const std::string& preset) {
    auto it = dirs_.find(preset);
    if (it != dirs_.end()) return it->second;
    tools::MkckptOptions o;
    if (const std::size_t colon = preset.find(':'); colon != std::string::npos) {
      // "hf:NAME" / "quant:NAME" / "derived:NAME": the tensor lists of tests/data.
      const std::string data = hoist::testing::SourceDir() + "/tests/data/" +
                               preset.substr(0, colon) + "/" + preset.substr(colon + 1);
      o.config_path = data + "/config.json";
      o.tensors_path = data + "/tensors.json";
    } else {
      o.preset = preset;
    }
    o.out_dir = root_.Sub(preset);
    // llama-tiny stays one model.safetensors; the others span several shards (files).
    o.shard_size = preset == "llama-tiny" ? 0 : 150'000;
    o.seed = 11;
    o.threads = 2;
    HOIST_RETURN_IF_ERROR(tools::MakeCheckpoint(o));
    dirs_[preset] = o.out_dir;
    return o.out_dir;
  }

 private:
  testtransport::ScratchDir root_;
  std::map<std::string, std::string> dirs_;
};

struct Case {
  std::string preset;
  int tp = 1;
  int ep = 0;
  bool round_robin = false;
  bool fused = true;
  transport::ReadMode mode = transport::ReadMode::kMmap;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.preset << " tp " << c.tp << " ep " << c.ep << (c.round_robin ? " round_robin" : "")
      << (c.fused ? " fused " : " hf ") << transport::ReadModeName(c.mode);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string n = c.preset + "_tp" + std::to_string(c.tp);
  if (c.ep > 0) n += "_ep" + std::to_string(c.ep) + (c.round_robin ? "_rr" : "");
  n += c.fused ? "_fused_" : "_hf_";
  n += transport::ReadModeName(c.mode);
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

class LoadReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(LoadReferenceTest, EveryRankMatchesTheReferenceByteForByte) {
  const Case& c = GetParam();
  Result<std::string> dir = Fixtures::Get().Dir(c.preset);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto ckpt = planner::OpenCheckpoint(*dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  planner::PlanOptions po;
  po.tp = c.tp;
  po.ep = c.ep;
  po.layout = c.fused ? proto::LAYOUT_FUSED : proto::LAYOUT_HF;
  po.placement = c.round_robin ? proto::PLACEMENT_ROUND_ROBIN : proto::PLACEMENT_LINEAR;
  auto plan = planner::BuildLoadPlan(*ckpt, po);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int world = c.ep > 0 ? c.ep : c.tp;
  ASSERT_EQ(plan->ranks_size(), world);

  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    LoadOptions o;
    o.settings.pipeline.mode = c.mode;
    o.settings.device = DeviceKind::kHost;
    o.settings.pipeline.slots = 3;
    o.settings.pipeline.slot_bytes = 16384;
    o.settings.pipeline.threads = 3;
    o.settings.pipeline.chunk_bytes = 5000;
    o.settings.verify = true;  // the independent verifier agrees on real plans too
    Result<LoadedRank> lr = testtransport::WithWatchdog(
        [&] { return LoadRank(*plan, static_cast<std::uint32_t>(r), o); });
    if (!lr.ok() && lr.status().code() == Code::kUnsupported &&
        c.mode == transport::ReadMode::kDirect) {
      GTEST_SKIP() << lr.status().ToString();
    }
    ASSERT_TRUE(lr.ok()) << lr.status().ToString();
    EXPECT_GT(lr->report.bytes_h2d(), 16384u * 3) << "the ring must wrap";

    std::vector<std::uint8_t> arena(lr->arena.bytes);
    ASSERT_TRUE(lr->device->CopyToHost(arena.data(), lr->arena.ptr, arena.size()).ok());

    testref::RefOptions ro;
    ro.tp = c.tp;
    ro.ep = c.ep;
    ro.rank = r;
    ro.fused = c.fused;
    ro.round_robin = c.round_robin;
    std::map<std::string, testref::RefTensor> ref;
    try {
      ref = testref::ReferenceRankTensors(*dir, ro);
    } catch (const std::exception& e) {
      FAIL() << "reference: " << e.what();
    }
    const proto::RankPlan& rp = plan->ranks(r);
    ASSERT_EQ(ref.size(), static_cast<std::size_t>(rp.tensors_size()));
    for (const proto::TensorOut& t : rp.tensors()) {
      auto it = ref.find(t.name());
      ASSERT_NE(it, ref.end()) << "not in the reference: " << t.name();
      const testref::RefTensor& want = it->second;
      EXPECT_EQ(t.dtype(), want.dtype) << t.name();
      EXPECT_EQ(std::vector<std::uint64_t>(t.shape().begin(), t.shape().end()), want.shape)
          << t.name();
      ASSERT_EQ(t.bytes(), want.data.size()) << t.name();
      ASSERT_LE(t.arena_offset() + t.bytes(), arena.size()) << t.name();
      const std::uint8_t* got = arena.data() + t.arena_offset();
      if (std::memcmp(got, want.data.data(), t.bytes()) != 0) {
        std::uint64_t b = 0;
        while (got[b] == want.data[b]) ++b;
        ADD_FAILURE() << t.name() << " differs at byte " << b << " of " << t.bytes() << ": loaded "
                      << int(got[b]) << ", reference " << int(want.data[b]);
      }
    }
  }
}

std::vector<Case> Cases() {
  using transport::ReadMode;
  const ReadMode modes[] = {ReadMode::kMmap, ReadMode::kBuffered, ReadMode::kAuto,
                            ReadMode::kDirect};
  std::vector<Case> base = {
      {"llama-tiny", 1},
      {"llama-tiny", 2},
      {"qwen2-tiny", 2},
      {"qwen2-tiny", 4},  // kv heads 2: tp 4 replicates
      {"qwen3-tiny", 1},
      {"qwen3-tiny", 4},
      {"qwen3-moe-tiny", 2},
      {"qwen3-moe-tiny", 1, 2},
      {"qwen3-moe-tiny", 2, 4, true},
      {"deepseek-v3-tiny", 2},
      {"deepseek-v3-tiny", 1, 2},
      {"deepseek-v3-tiny", 2, 4, true},
      {"qwen3-fp8-tiny", 4},  // FP8 block scales of replicated kv heads
      // The architectures as transformers writes them (tests/data/hf), and FP8 / MXFP4 forms.
      {"hf:mixtral", 2},
      {"hf:mixtral", 1, 2},
      {"hf:minimax_m2", 4},
      {"hf:qwen2_moe", 2},
      {"hf:qwen2_moe", 2, 4, true},
      {"hf:glm4_moe", 2},
      {"hf:glm_moe_dsa", 2},
      {"hf:deepseek_v2", 2, 4},
      {"hf:gemma3_vlm", 2},
      {"hf:phi3", 4},
      {"hf:qwen3_next", 2},
      {"hf:qwen3_5_moe", 4},
      {"hf:qwen3_5_vlm", 2},
      {"quant:qwen3_moe_fp8_channel", 2},
      {"quant:mixtral_fp8_tensor", 2},
      {"quant:gpt_oss_mxfp4", 2},
      {"quant:gpt_oss_mxfp4", 1, 4},
      {"hf:gpt_oss", 2},
      {"hf:gpt_oss", 1, 2},
      // GPTQ, AWQ, compressed-tensors WNA16 / NVFP4 and ModelOpt NVFP4 (tests/data/quant).
      {"quant:mistral_gptq", 2},
      {"quant:qwen3_moe_gptq_actorder", 4},  // act order: row-parallel scales whole
      {"quant:qwen3_moe_gptq_actorder", 2, 4, true},
      {"quant:mixtral_awq", 4},
      {"quant:mixtral_awq", 1, 2},
      {"quant:qwen3_moe_wna16", 2},
      {"quant:deepseek_v2_wna16_asym", 4},
      {"quant:mistral_wna16_channel", 8},  // one group: row-parallel scales whole
      {"quant:mixtral_nvfp4", 2},
      {"quant:mixtral_nvfp4", 1, 2},
      {"quant:qwen3_moe_nvfp4_ct", 4},
      // Llama 4: 3-D experts in halves (hf layout); one FP8 tensor per expert, with the fused
      // layout's q/k rotary de-interleave.
      {"hf:llama4_text", 2},
      {"quant:llama4_fp8_experts", 2},
      // DeepSeek-V4 (tests/data/derived: names from vLLM's deepseek_v4.py): MXFP4 experts with
      // ue8m0 scales, FP8-block experts.
      {"derived:deepseek_v4", 1},
      {"derived:deepseek_v4", 2},
      {"derived:deepseek_v4", 4},
      {"derived:deepseek_v4", 1, 2},
      {"derived:deepseek_v4", 2, 4, true},
      {"derived:deepseek_v4_fp8", 4},
      {"derived:deepseek_v4_fp8", 1, 2},
      {"hf:deepseek_v4", 2},  // as transformers writes it: BF16, its own spelling of names
      {"hf:deepseek_v4", 1, 2},
  };
  std::vector<Case> out;
  int k = 0;
  for (const Case& b : base) {
    for (bool fused : {true, false}) {
      Case c = b;
      c.fused = fused;
      c.mode = modes[k++ % 4];
      out.push_back(c);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, LoadReferenceTest, ::testing::ValuesIn(Cases()), CaseName);

// The fused layout's transposed experts (gpt_oss BF16): --verify compares them with the
// checkpoint although the arena holds them transposed, and catches a byte changed after the load.
TEST(TransposedExpertsTest, VerifyChecksThemAsTransposedAndCatchesAFlippedByte) {
  Result<std::string> dir = Fixtures::Get().Dir("hf:gpt_oss");
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto ckpt = planner::OpenCheckpoint(*dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  planner::PlanOptions po;
  po.tp = 2;
  auto plan = planner::BuildLoadPlan(*ckpt, po);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  LoadOptions o;
  o.settings.device = DeviceKind::kHost;
  o.settings.verify = true;
  Result<LoadedRank> lr = LoadRank(*plan, 1, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  EXPECT_TRUE(lr->report.verified());
  const proto::RankPlan& rp = plan->ranks(1);
  const proto::TensorOut* w13 = nullptr;
  for (const auto& t : rp.tensors()) {
    if (t.name() == "model.layers.1.mlp.experts.w13_weight") w13 = &t;
  }
  ASSERT_NE(w13, nullptr);
  ASSERT_TRUE(w13->has_transpose());
  auto* arena = static_cast<std::uint8_t*>(lr->arena.ptr);  // host device: plain memory
  arena[w13->arena_offset() + 1001] ^= 0x10;
  Status s = VerifyArena(*lr->device, lr->arena, *plan, rp);
  ASSERT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("tensor model.layers.1.mlp.experts.w13_weight byte "),
            std::string::npos)
      << s.ToString();
  arena[w13->arena_offset() + 1001] ^= 0x10;
  EXPECT_TRUE(VerifyArena(*lr->device, lr->arena, *plan, rp).ok());
}

}  // namespace
}  // namespace hoist::rank
