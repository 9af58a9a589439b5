// The planner refuses what vLLM refuses (planner/model_checks.h) and options out of range
// (planner/plan_options.h), on fresh hoist-mkckpt checkpoints: query heads, kv heads (below and
// above tp), intermediate sizes, tp-sliced experts, experts over ep, the padded vocab, MLA heads;
// each error names the config key, its value and the tp (or ep) values that work, and that list
// is checked against the planner itself (every listed value plans, every other one fails).
// Ranges: tp / dp / ep, the 64-bit world, alignment, the dedup step, through BuildLoadPlan,
// config's ResolveJobSpec and the `hoist plan` binary (dp 10^9 answers at once).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "config/job_spec.h"
#include "config/topology.h"
#include "planner/plan_builder.h"
#include "tests/launch/mpirun_util.h"
#include "tests/planner/ckpt_edit.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;
using hoist::testing::ScratchDir;

Result<proto::LoadPlan> Plan(const std::string& dir, int tp, int ep = 0, int dp = 1) {
  HOIST_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint(dir));
  PlanOptions o;
  o.tp = tp;
  o.ep = ep;
  o.dp = dp;
  return BuildLoadPlan(ckpt, o);
}

// The plan's error, which must have `code` and contain every part.
void ExpectError(const Result<proto::LoadPlan>& r, Code code,
                 const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok()) << "the plan was expected to fail";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "missing '" << p << "' in: " << r.status().message();
  }
}

std::string Config(const std::string& dir) {
  return "(" + fs::canonical(dir).string() + "/config.json)";
}

// The list a message gives must be exactly the tp values in [1, max] that plan.
void ExpectListIsTruthful(const std::string& dir, const std::string& list, int max, int ep = 0) {
  std::string planned;
  for (int tp = 1; tp <= max; ++tp) {
    if (ep > 0 && ep % tp != 0) continue;
    if (Plan(dir, tp, ep).ok()) planned += (planned.empty() ? "" : ", ") + std::to_string(tp);
  }
  EXPECT_EQ(planned, list);
}

class ParallelismTest : public ::testing::Test {
 protected:
  std::string Fixture(const std::string& preset,
                      const std::function<void(nlohmann::json&)>& edit = nullptr) {
    return testedit::Make(scratch_.Sub(preset + std::to_string(n_++)), preset, 1 << 16, edit);
  }
  ScratchDir scratch_{"hoist-parallelism"};
  int n_ = 0;
};

TEST_F(ParallelismTest, QueryHeadsMustBeDivisibleByTp) {
  const std::string dir = Fixture("qwen3-tiny");  // 16 heads, 4 kv heads
  const std::string works = "tp values that work for this model: 1, 2, 4, 8, 16";
  for (int tp : {32, 64, 3, 5, 6, 12}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    ExpectError(Plan(dir, tp), Code::kInvalidArgument,
                {"tp " + std::to_string(tp) + " does not divide num_attention_heads = 16 " +
                 Config(dir) + "; " + works});
  }
  ExpectListIsTruthful(dir, "1, 2, 4, 8, 16", 40);
  // Rank 0 at tp 16 holds exactly one query head: 16 rows of q (head_dim 16) + one kv head.
  Result<proto::LoadPlan> p = Plan(dir, 16);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const auto& t : p->ranks(0).tensors()) {
    if (t.name() == "model.layers.0.self_attn.qkv_proj.weight") {
      EXPECT_EQ(t.shape(0), 16u + 16 + 16);
    }
  }
}

// 12 heads / 4 kv heads: tp 3 splits a kv head (below 4), tp 6 replicates unevenly (above 4).
TEST_F(ParallelismTest, KvHeadsBelowAndAboveTp) {
  const std::string dir = Fixture("qwen3-tiny", [](nlohmann::json& c) {
    c["num_attention_heads"] = 12;
    c["num_key_value_heads"] = 4;
    c["intermediate_size"] = 384;
    c["vocab_size"] = 1536;
  });
  const std::string works = "tp values that work for this model: 1, 2, 4, 12";
  ExpectError(Plan(dir, 3), Code::kInvalidArgument,
              {"tp 3 does not divide num_key_value_heads = 4 " + Config(dir), works});
  ExpectError(
      Plan(dir, 6), Code::kInvalidArgument,
      {"tp 6 is larger than num_key_value_heads = 4 but not a multiple of it " + Config(dir),
       "each kv head is replicated on tp / 4 ranks", works});
  ExpectListIsTruthful(dir, "1, 2, 4, 12", 24);
}

TEST_F(ParallelismTest, VocabAfterPaddingMustBeDivisible) {
  const std::string dir = Fixture("qwen3-tiny", [](nlohmann::json& c) {
    c["num_attention_heads"] = 12;
    c["num_key_value_heads"] = 4;
    c["intermediate_size"] = 384;
    c["vocab_size"] = 1000;  // 1024 after padding: 12 does not divide it
  });
  ExpectError(Plan(dir, 12), Code::kInvalidArgument,
              {"tp 12 does not divide vocab_size = 1000 padded to a multiple of 64 = 1024 " +
               Config(dir) + "; tp values that work for this model: 1, 2, 4"});
  ExpectListIsTruthful(dir, "1, 2, 4", 24);
}

TEST_F(ParallelismTest, IntermediateSizeMustBeDivisible) {
  const std::string dir =
      Fixture("qwen3-tiny", [](nlohmann::json& c) { c["intermediate_size"] = 100; });
  ExpectError(Plan(dir, 8), Code::kInvalidArgument,
              {"tp 8 does not divide intermediate_size = 100 " + Config(dir) +
               "; tp values that work for this model: 1, 2, 4"});
  ExpectListIsTruthful(dir, "1, 2, 4", 20);
}

// Routed experts are tp-sliced without ep, whole with it.
TEST_F(ParallelismTest, MoeIntermediateSizeUnlessEp) {
  const std::string dir =
      Fixture("qwen3-moe-tiny", [](nlohmann::json& c) { c["moe_intermediate_size"] = 20; });
  ExpectError(Plan(dir, 8), Code::kInvalidArgument,
              {"tp 8 does not divide moe_intermediate_size = 20 " + Config(dir) +
                   "; tp values that work for this model: 1, 2, 4",
               "--ep"});
  ExpectListIsTruthful(dir, "1, 2, 4", 16);
  Result<proto::LoadPlan> ep = Plan(dir, 8, 8);
  EXPECT_TRUE(ep.ok()) << ep.status().ToString();
}

TEST_F(ParallelismTest, ExpertsMustDivideOverEp) {
  const std::string moe = Fixture("qwen3-moe-tiny");  // 8 experts
  ExpectError(Plan(moe, 1, 3), Code::kInvalidArgument,
              {"ep 3 does not divide num_experts = 8 " + Config(moe),
               "ep values that work for this model with tp 1: 1, 2, 4, 8"});
  const std::string ds = Fixture("deepseek-v3-tiny");
  ExpectError(Plan(ds, 2, 6), Code::kInvalidArgument,
              {"ep 6 does not divide n_routed_experts = 8 " + Config(ds),
               "ep values that work for this model with tp 2: 2, 4, 8"});
  for (int ep : {1, 2, 4, 8}) EXPECT_TRUE(Plan(moe, 1, ep).ok()) << ep;
}

// DeepSeek MLA: 4 heads; the list also leaves out tp 4, which splits FP8 scale blocks.
TEST_F(ParallelismTest, MlaHeadsAndFp8BlocksInTheList) {
  const std::string dir = Fixture("deepseek-v3-tiny");
  for (int tp : {3, 8}) {
    ExpectError(Plan(dir, tp), Code::kInvalidArgument,
                {"tp " + std::to_string(tp) + " does not divide num_attention_heads = 4 " +
                 Config(dir) + "; tp values that work for this model: 1, 2"});
  }
  ExpectListIsTruthful(dir, "1, 2", 16);
  ExpectError(Plan(dir, 4), Code::kInvalidArgument, {"FP8 scale block"});
}

// ---- option ranges ------------------------------------------------------------------------

PlanOptions Opts(int tp, int dp, int ep = 0) {
  PlanOptions o;
  o.tp = tp;
  o.dp = dp;
  o.ep = ep;
  return o;
}

void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(PlanOptionsTest, RangesNameTheValueAndTheRange) {
  ExpectInvalid(ValidatePlanOptions(Opts(0, 1)),
                "tp 0 is out of range: tp must be between 1 and 65536");
  ExpectInvalid(ValidatePlanOptions(Opts(65537, 1)),
                "tp 65537 is out of range: tp must be between 1 and 65536");
  ExpectInvalid(ValidatePlanOptions(Opts(1, 0)),
                "dp 0 is out of range: dp must be between 1 and 65536");
  ExpectInvalid(ValidatePlanOptions(Opts(1, 1'000'000'000)),
                "dp 1000000000 is out of range: dp must be between 1 and 65536");
  ExpectInvalid(ValidatePlanOptions(Opts(1, 1, -1)),
                "ep -1 is out of range: ep must be 0 (off) or between 1 and 65536");
  ExpectInvalid(ValidatePlanOptions(Opts(4, 1, 2)), "tp 4 must divide ep 2");
  // 65536 x 65536 wraps to 0 in 32 bits; computed in 64 it is refused.
  ExpectInvalid(ValidatePlanOptions(Opts(65536, 65536)),
                "tp 65536 x dp 65536 = 4294967296 ranks is out of range: the world (tp x dp, or "
                "ep) must be between 1 and 65536 ranks");
  ExpectInvalid(ValidatePlanOptions(Opts(256, 512)), "= 131072 ranks is out of range");
  EXPECT_TRUE(ValidatePlanOptions(Opts(256, 256)).ok());
  EXPECT_TRUE(ValidatePlanOptions(Opts(8, 1, 65536)).ok());

  PlanOptions o = Opts(1, 1);
  o.dedup_step_bytes = 1024;
  ExpectInvalid(ValidatePlanOptions(o),
                "dedup step 1 KiB is out of range: it must be between 4 KiB and 1 TiB "
                "(--dedup-step-kib 4 to 1073741824)");
  o.dedup_step_bytes = 2ull << 40;
  ExpectInvalid(ValidatePlanOptions(o), "dedup step 2 TiB is out of range");
  for (std::uint64_t ok : {4ull << 10, 1ull << 30, 1ull << 40}) {
    o.dedup_step_bytes = ok;
    EXPECT_TRUE(ValidatePlanOptions(o).ok()) << ok;
  }
  o = Opts(1, 1);
  for (std::uint64_t bad : {0ull, 3ull, 2ull << 30}) {
    o.alignment = bad;
    ExpectInvalid(ValidatePlanOptions(o), "it must be a power of two between 1 and 1073741824");
  }
  o = Opts(2, 1);
  o.locations = {{0, 0}};
  ExpectInvalid(ValidatePlanOptions(o), "locations name 1 ranks but world is 2");
  o = Opts(1, 1);
  o.unexpected = static_cast<UnexpectedTensors>(9);
  ExpectInvalid(ValidatePlanOptions(o), "is not error, warn or ignore");
}

TEST_F(ParallelismTest, HugeDpIsRefusedAtOnce) {
  const std::string dir = Fixture("qwen3-tiny");
  const auto t0 = std::chrono::steady_clock::now();
  ExpectError(Plan(dir, 1, 0, 1'000'000'000), Code::kInvalidArgument,
              {"dp 1000000000 is out of range: dp must be between 1 and 65536"});
  ExpectError(Plan(dir, 2, 0, 40'000), Code::kInvalidArgument,
              {"tp 2 x dp 40000 = 80000 ranks is out of range"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);

  // config/ resolves flags and the topology file through the same check.
  config::JobSpec spec;
  spec.model = dir;
  spec.dp = 1'000'000'000;
  Result<config::ResolvedJob> r = config::ResolveJobSpec(spec);
  ASSERT_FALSE(r.ok());
  ExpectInvalid(r.status(), "dp 1000000000 is out of range: dp must be between 1 and 65536");
  const std::string yaml = scratch_.Sub("t.yaml");
  testedit::WriteText(yaml, "model: " + dir + "\ntp: 4\ndp: 1000000000\n");
  config::JobSpec from_file;
  from_file.topology = yaml;
  r = config::ResolveJobSpec(from_file);
  ASSERT_FALSE(r.ok());
  ExpectInvalid(r.status(), "dp 1000000000 is out of range");
  config::JobSpec step;
  step.model = dir;
  step.dedup_step_kib = 1;
  r = config::ResolveJobSpec(step);
  ASSERT_FALSE(r.ok());
  ExpectInvalid(r.status(), "dedup step 1 KiB is out of range");
}

// ---- the command line ---------------------------------------------------------------------

TEST_F(ParallelismTest, HoistPlanRefusesTpThatSplitsHeads) {
  const std::string dir = Fixture("qwen3-tiny");
  for (const char* tp : {"32", "3"}) {
    const testing::RunResult r =
        testing::RunCommand({testing::HoistBin(), "plan", "--model", dir, "--tp", tp}, 60);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, -1) << "timed out";
    EXPECT_NE(r.output.find(std::string("tp ") + tp + " does not divide num_attention_heads = 16"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("tp values that work for this model: 1, 2, 4, 8, 16"),
              std::string::npos)
        << r.output;
  }
  // A usage error, refused before the model is even read.
  const testing::RunResult huge =
      testing::RunCommand({testing::HoistBin(), "plan", "--model", dir, "--dp", "1000000000"}, 30);
  EXPECT_EQ(huge.exit_code, 2) << huge.output;
  EXPECT_LT(huge.seconds, 10.0);
  EXPECT_NE(huge.output.find("dp must be between 1 and 65536"), std::string::npos) << huge.output;
}

}  // namespace
}  // namespace hoist::planner

namespace hoist::planner {
namespace {

// A checkpoint with the tensor list transformers writes for `name` (tests/data/hf).
std::string MakeHf(const std::string& dir, const std::string& name) {
  const std::string data = hoist::testing::SourceDir() + "/tests/data/hf/" + name;
  tools::MkckptOptions o;
  o.config_path = data + "/config.json";
  o.tensors_path = data + "/tensors.json";
  o.out_dir = dir;
  o.threads = 2;
  const Status s = tools::MakeCheckpoint(o);
  if (!s.ok()) throw std::runtime_error(s.ToString());
  return dir;
}

// Qwen3.5's linear attention splits its 4 key heads (and 8 value heads) by tp, as vLLM does.
TEST_F(ParallelismTest, LinearAttentionHeadsMustBeDivisibleByTp) {
  const std::string dir = MakeHf(scratch_.Sub("qwen3_5"), "qwen3_5");
  ExpectError(Plan(dir, 8), Code::kInvalidArgument,
              {"tp 8 does not divide linear_num_key_heads = 4 " + Config(dir) +
               "; tp values that work for this model: 1, 2, 4"});
  ExpectListIsTruthful(dir, "1, 2, 4", 8);
}

// FP8 block scales of k/v: a rank's kv rows must fall on whole 128-row blocks. With head_dim 64
// a kv head is half a block, so tp 2 (one head per rank) cannot split the scale.
TEST_F(ParallelismTest, KvScalesNeedWholeBlocksPerRank) {
  const std::string ok = Fixture("qwen3-fp8-tiny");  // head_dim 128: tp 1, 2 and 4 plan
  for (int tp : {1, 2, 4}) EXPECT_TRUE(Plan(ok, tp).ok()) << "tp " << tp;
  const std::string dir = Fixture("qwen3-fp8-tiny", [](nlohmann::json& c) { c["head_dim"] = 64; });
  EXPECT_TRUE(Plan(dir, 1).ok());
  ExpectError(Plan(dir, 2), Code::kInvalidArgument,
              {"k_proj.weight_scale_inv", "at tp 2 rank 0 holds rows [0, 64) of",
               "num_key_value_heads 2 x head_dim 64", "128-row FP8 scale blocks"});
}

}  // namespace
}  // namespace hoist::planner

namespace hoist::planner {
namespace {

// Formats hoist cannot slice yet are refused up front, naming them, not as missing tensors.
TEST_F(ParallelismTest, UnsupportedQuantizationIsNamed) {
  const std::string dir = Fixture("qwen3-tiny");
  testedit::EditConfig(dir, [](nlohmann::json& c) {
    c["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
  });
  ExpectError(Plan(dir, 1), Code::kUnsupported,
              {"quantization_config quant_method \"bitsandbytes\" is not supported yet"});
  const std::string ct = Fixture("qwen3-tiny");
  testedit::EditConfig(ct, [](nlohmann::json& c) {
    c["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "int-quantized"}};
  });
  ExpectError(Plan(ct, 1), Code::kUnsupported, {"format \"int-quantized\""});
  // GPTQ packs 4 and 8 bits into int32; 3 bits straddle words.
  const std::string gptq3 = Fixture("qwen3-tiny");
  testedit::EditConfig(gptq3, [](nlohmann::json& c) {
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}};
  });
  ExpectError(Plan(gptq3, 1), Code::kUnsupported, {"GPTQ with 3 bits is not supported"});
}

}  // namespace
}  // namespace hoist::planner

namespace hoist::planner {
namespace {

// The plan names an integer / FP4 format with its bits, groups, act order and zero points.
TEST_F(ParallelismTest, PlanNamesTheQuantizedFormat) {
  const std::string root = hoist::testing::SourceDir() + "/tests/data/quant/";
  const std::pair<const char*, const char*> kCases[] = {
      {"mistral_gptq", "GPTQ 4-bit, groups of 32"},
      {"deepseek_v2_wna16_asym",
       "compressed-tensors pack-quantized 4-bit, groups of 32, act order, zero points"},
      {"mixtral_nvfp4", "ModelOpt NVFP4, groups of 16"}};
  for (const auto& [name, want] : kCases) {
    tools::MkckptOptions o;
    o.config_path = root + name + "/config.json";
    o.tensors_path = root + name + "/tensors.json";
    o.out_dir = scratch_.Sub(name);
    o.threads = 2;
    ASSERT_TRUE(tools::MakeCheckpoint(o).ok()) << name;
    auto plan = Plan(o.out_dir, 2);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->format(), want) << name;
  }
}

// Llama 4's 3-D experts: under EP a rank takes its experts as one range (round-robin placement
// refused).
TEST_F(ParallelismTest, Llama4ExpertsNameWhatTheyCannotDo) {
  const std::string dir = MakeHf(scratch_.Sub("llama4"), "llama4_text");
  PlanOptions o;
  o.ep = 2;
  o.layout = proto::LAYOUT_HF;
  o.placement = proto::PLACEMENT_ROUND_ROBIN;
  auto ckpt = OpenCheckpoint(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectError(BuildLoadPlan(*ckpt, o), Code::kUnsupported, {"use --placement linear"});
}

// gpt_oss and Llama 4 keep every expert of a layer in one tensor a projection, which vLLM
// transposes at load: the fused layout's w13_weight / w2_weight are the rank's slices with their
// last two dims swapped, which the plan asks the rank to do after the copies (TensorOut.transpose);
// the hf layout keeps them as stored.
TEST_F(ParallelismTest, BF16ThreeDExpertsAreTransposedInTheFusedLayoutOnly) {
  struct Want {
    const char* family;
    const char* name;
    std::vector<std::uint64_t> shape;  // E=8, H=128, I=64 at tp 2: I_t = 32
  };
  const Want kWants[] = {
      {"gpt_oss", "model.layers.0.mlp.experts.w13_weight", {8, 64, 128}},
      {"gpt_oss", "model.layers.0.mlp.experts.w2_weight", {8, 128, 32}},
      {"llama4_text", "model.layers.1.feed_forward.experts.w13_weight", {8, 64, 128}},
      {"llama4_text", "model.layers.1.feed_forward.experts.w2_weight", {8, 128, 32}}};
  for (const Want& w : kWants) {
    const std::string dir = MakeHf(scratch_.Sub(w.family), w.family);
    auto plan = Plan(dir, 2);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const proto::TensorOut* found = nullptr;
    for (const auto& t : plan->ranks(1).tensors()) {
      if (t.name() == w.name) found = &t;
      if (t.has_transpose()) {
        EXPECT_TRUE(t.name().ends_with("_weight")) << t.name();
      }
    }
    ASSERT_NE(found, nullptr) << w.name;
    EXPECT_EQ(std::vector<std::uint64_t>(found->shape().begin(), found->shape().end()), w.shape)
        << w.name;
    ASSERT_TRUE(found->has_transpose()) << w.name;
    EXPECT_EQ(found->transpose().batch(), w.shape[0]) << w.name;
    EXPECT_EQ(found->transpose().rows(), w.shape[2]) << w.name;  // as landed: [E, cols, rows]
    EXPECT_EQ(found->transpose().cols(), w.shape[1]) << w.name;
    PlanOptions o;
    o.tp = 2;
    o.layout = proto::LAYOUT_HF;
    auto ckpt = OpenCheckpoint(dir);
    ASSERT_TRUE(ckpt.ok());
    auto hf = BuildLoadPlan(*ckpt, o);
    ASSERT_TRUE(hf.ok()) << hf.status().ToString();
    for (const auto& t : hf->ranks(1).tensors()) EXPECT_FALSE(t.has_transpose()) << t.name();
  }
}

// MXFP4 tp must leave each rank a 32-value block; round-robin placement cannot take a range of
// such a tensor.
TEST_F(ParallelismTest, GptOssExpertsNameWhatTheyCannotDo) {
  const std::string data = hoist::testing::SourceDir() + "/tests/data/quant/gpt_oss_mxfp4";
  tools::MkckptOptions o;
  o.config_path = data + "/config.json";
  o.tensors_path = data + "/tensors.json";
  o.out_dir = scratch_.Sub("gpt_oss_mxfp4");
  o.threads = 2;
  ASSERT_TRUE(tools::MakeCheckpoint(o).ok());
  EXPECT_TRUE(Plan(o.out_dir, 2).ok());
  ExpectError(Plan(o.out_dir, 4), Code::kInvalidArgument,
              {"at tp 4 rank 2 would hold none of intermediate_size 64 (2 MXFP4 blocks of 32",
               "use a tp of at most 2, or --ep"});
  Result<Checkpoint> ckpt = OpenCheckpoint(o.out_dir);
  ASSERT_TRUE(ckpt.ok());
  PlanOptions rr;
  rr.ep = 2;
  rr.placement = proto::PLACEMENT_ROUND_ROBIN;
  ExpectError(BuildLoadPlan(*ckpt, rr), Code::kUnsupported, {"--placement linear"});
}

}  // namespace
}  // namespace hoist::planner
