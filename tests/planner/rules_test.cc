// Family rules: every family's tensor names classified to the right role and fused target, the
// unknown-tensor error, config/shape mismatch errors, skipped tensors.
#include "planner/rules.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace hoist::planner {
namespace {

using Shape = std::vector<std::uint64_t>;

ModelConfig Llama() {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 128;
  c.intermediate_size = 320;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 16;
  c.vocab_size = 1088;
  return c;
}

// Layers 0 and 2 sparse, layer 1 dense through mlp_only_layers.
ModelConfig Qwen3Moe() {
  ModelConfig c = Llama();
  c.model_type = "qwen3_moe";
  c.num_hidden_layers = 3;
  c.num_experts = 8;
  c.moe_intermediate_size = 32;
  c.mlp_only_layers = {1};
  return c;
}

ModelConfig Deepseek() {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.vocab_size = 1000;
  c.num_experts = 8;
  c.moe_intermediate_size = 256;
  c.n_shared_experts = 1;
  c.first_k_dense_replace = 1;
  c.q_lora_rank = 128;
  c.kv_lora_rank = 128;
  c.qk_nope_head_dim = 64;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 64;
  c.quant_method = "fp8";
  c.weight_block_size = {128, 128};
  return c;
}

struct Case {
  std::string name;
  Shape shape;
  Role role;
  std::string fused;  // "" = not fused
  int slot = 0;
  int layer = -1;
  int expert = -1;
};

void ExpectCases(const ModelConfig& cfg, const std::vector<Case>& cases) {
  auto family = FamilyOf(cfg);
  ASSERT_TRUE(family.ok()) << family.status().ToString();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = ClassifyTensor(cfg, *family, c.name, c.shape, "f.safetensors");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(RoleName(r->role), RoleName(c.role));
    EXPECT_EQ(r->fused_name, c.fused);
    if (!c.fused.empty()) {
      EXPECT_EQ(r->slot, c.slot);
    }
    EXPECT_EQ(r->fusion == Fusion::kNone, c.fused.empty());
    EXPECT_EQ(r->layer, c.layer);
    EXPECT_EQ(r->expert, c.expert);
  }
}

TEST(RulesTest, TableHasNoDuplicateRowsPerFamily) {
  Status s = ValidateRuleTable();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(RulesTest, FamilyOfModelType) {
  ModelConfig c;
  for (auto [type, name] :
       std::vector<std::pair<std::string, std::string>>{{"llama", "llama"},
                                                        {"mistral", "llama"},
                                                        {"qwen2", "qwen2"},
                                                        {"qwen3", "qwen3"},
                                                        {"qwen3_moe", "qwen3_moe"},
                                                        {"deepseek_v3", "deepseek_v3"}}) {
    c.model_type = type;
    auto f = FamilyOf(c);
    ASSERT_TRUE(f.ok()) << type;
    EXPECT_EQ(FamilyName(*f), name);
  }
  c.model_type = "gpt2";
  auto f = FamilyOf(c);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kUnsupported);
  EXPECT_NE(f.status().message().find("gpt2"), std::string::npos);
}

TEST(RulesTest, LlamaNames) {
  const std::string qkv = "model.layers.1.self_attn.qkv_proj.weight";
  const std::string gu = "model.layers.0.mlp.gate_up_proj.weight";
  ExpectCases(
      Llama(),
      {
          {"model.embed_tokens.weight", {1088, 128}, Role::kVocab, ""},
          {"lm_head.weight", {1088, 128}, Role::kVocab, ""},
          {"model.norm.weight", {128}, Role::kReplicated, ""},
          {"model.layers.1.input_layernorm.weight", {128}, Role::kReplicated, "", 0, 1},
          {"model.layers.0.post_attention_layernorm.weight", {128}, Role::kReplicated, "", 0, 0},
          {"model.layers.1.self_attn.q_proj.weight", {128, 128}, Role::kColumn, qkv, 0, 1},
          {"model.layers.1.self_attn.k_proj.weight", {64, 128}, Role::kKvHeads, qkv, 1, 1},
          {"model.layers.1.self_attn.v_proj.weight", {64, 128}, Role::kKvHeads, qkv, 2, 1},
          {"model.layers.1.self_attn.o_proj.weight", {128, 128}, Role::kRow, "", 0, 1},
          {"model.layers.0.mlp.gate_proj.weight", {320, 128}, Role::kColumn, gu, 0, 0},
          {"model.layers.0.mlp.up_proj.weight", {320, 128}, Role::kColumn, gu, 1, 0},
          {"model.layers.0.mlp.down_proj.weight", {128, 320}, Role::kRow, "", 0, 0},
      });
}

TEST(RulesTest, Qwen2BiasesFollowTheirWeight) {
  ModelConfig c = Llama();
  c.model_type = "qwen2";
  const std::string qkvb = "model.layers.0.self_attn.qkv_proj.bias";
  ExpectCases(c, {
                     {"model.layers.0.self_attn.q_proj.bias", {128}, Role::kColumn, qkvb, 0, 0},
                     {"model.layers.0.self_attn.k_proj.bias", {64}, Role::kKvHeads, qkvb, 1, 0},
                     {"model.layers.0.self_attn.v_proj.bias", {64}, Role::kKvHeads, qkvb, 2, 0},
                     // A row-parallel bias is replicated (vLLM adds it once, after the reduce).
                     {"model.layers.0.self_attn.o_proj.bias", {128}, Role::kReplicated, "", 0, 0},
                 });
}

TEST(RulesTest, Qwen3NormsAreReplicatedAndOnlyQwen3HasThem) {
  ModelConfig c = Llama();
  c.model_type = "qwen3";
  ExpectCases(c, {
                     {"model.layers.0.self_attn.q_norm.weight", {16}, Role::kReplicated, "", 0, 0},
                     {"model.layers.1.self_attn.k_norm.weight", {16}, Role::kReplicated, "", 0, 1},
                 });
  ModelConfig l = Llama();
  auto r = ClassifyTensor(l, Family::kLlama, "model.layers.0.self_attn.q_norm.weight", {16}, "x");
  EXPECT_FALSE(r.ok());
}

TEST(RulesTest, Qwen3MoeNames) {
  ExpectCases(Qwen3Moe(),
              {
                  {"model.layers.0.mlp.gate.weight", {8, 128}, Role::kRouter, "", 0, 0},
                  {"model.layers.0.mlp.experts.7.gate_proj.weight",
                   {32, 128},
                   Role::kExpertGate,
                   "model.layers.0.mlp.experts.w13_weight",
                   0,
                   0,
                   7},
                  {"model.layers.2.mlp.experts.3.up_proj.weight",
                   {32, 128},
                   Role::kExpertUp,
                   "model.layers.2.mlp.experts.w13_weight",
                   1,
                   2,
                   3},
                  {"model.layers.2.mlp.experts.0.down_proj.weight",
                   {128, 32},
                   Role::kExpertDown,
                   "model.layers.2.mlp.experts.w2_weight",
                   0,
                   2,
                   0},
                  // Dense layer through mlp_only_layers.
                  {"model.layers.1.mlp.gate_proj.weight",
                   {320, 128},
                   Role::kColumn,
                   "model.layers.1.mlp.gate_up_proj.weight",
                   0,
                   1},
                  {"model.layers.1.self_attn.q_norm.weight", {16}, Role::kReplicated, "", 0, 1},
              });
}

// LayerMlpOf against the layouts vLLM's and transformers' Qwen3MoeDecoderLayer build, worked out
// by hand from their rule (experts when num_experts > 0, the layer is not in mlp_only_layers
// and (layer + 1) % decoder_sparse_step == 0): 'S' sparse, 'D' dense.
TEST(RulesTest, Qwen3MoeLayerMlpFollowsVllm) {
  struct Case {
    std::int64_t experts;
    std::int64_t step;
    std::vector<std::int64_t> mlp_only;
    std::string layers;
  };
  const std::vector<Case> cases = {
      {8, 1, {}, "SSSS"},         {8, 2, {}, "DSDS"},   {8, 2, {3}, "DSDD"},
      {8, 1, {1}, "SDSS"},        {8, 3, {}, "DDSDDS"}, {8, 1, {0, 1, 2, 3}, "DDDD"},
      {8, 2, {0, 7, 99}, "DSDS"}, {0, 1, {}, "DDDD"},
  };
  for (const Case& k : cases) {
    ModelConfig c = Qwen3Moe();
    c.num_experts = k.experts;
    c.decoder_sparse_step = k.step;
    c.mlp_only_layers = k.mlp_only;
    c.num_hidden_layers = static_cast<std::int64_t>(k.layers.size());
    std::string got;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      auto kind = LayerMlpOf(c, Family::kQwen3Moe, l);
      ASSERT_TRUE(kind.ok()) << kind.status().ToString();
      got += *kind == LayerMlp::kSparse ? 'S' : *kind == LayerMlp::kDense ? 'D' : '?';
    }
    EXPECT_EQ(got, k.layers) << "experts " << k.experts << " step " << k.step;
  }
  // Other families are not constrained (DeepSeek's dense layers come from its own keys).
  auto any = LayerMlpOf(Deepseek(), Family::kDeepseekV3, 0);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(*any, LayerMlp::kAny);
  ModelConfig zero = Qwen3Moe();
  zero.decoder_sparse_step = 0;
  auto bad = LayerMlpOf(zero, Family::kQwen3Moe, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorrupt);
  EXPECT_NE(bad.status().message().find("decoder_sparse_step 0"), std::string::npos)
      << bad.status().message();
}

TEST(RulesTest, Qwen3MoeTensorOnTheWrongKindOfLayerIsAnError) {
  ModelConfig c = Qwen3Moe();  // 4 layers, step 2, mlp_only [3]: D S D D
  c.num_hidden_layers = 4;
  c.decoder_sparse_step = 2;
  c.mlp_only_layers = {3};
  struct Case {
    std::string name;
    Shape shape;
    bool ok;
    std::string why;  // for errors
  };
  const std::vector<Case> cases = {
      {"model.layers.0.mlp.gate_proj.weight", {320, 128}, true, ""},
      {"model.layers.1.mlp.gate.weight", {8, 128}, true, ""},
      {"model.layers.1.mlp.experts.7.down_proj.weight", {128, 32}, true, ""},
      {"model.layers.2.mlp.down_proj.weight", {128, 320}, true, ""},
      {"model.layers.3.mlp.up_proj.weight", {320, 128}, true, ""},
      {"model.layers.0.mlp.gate.weight", {8, 128}, false, "a mixture-of-experts tensor"},
      {"model.layers.2.mlp.experts.0.gate_proj.weight",
       {32, 128},
       false,
       "config.json makes layer 2 a dense-MLP layer"},
      {"model.layers.3.mlp.experts.1.up_proj.weight",
       {32, 128},
       false,
       "mlp_only_layers [3]"},  // mlp_only_layers wins over the step
      {"model.layers.1.mlp.gate_proj.weight",
       {320, 128},
       false,
       "a dense-MLP tensor, but config.json makes layer 1 a sparse MoE layer"},
      {"model.layers.1.mlp.down_proj.weight", {128, 320}, false, "decoder_sparse_step 2"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    auto r = ClassifyTensor(c, Family::kQwen3Moe, k.name, k.shape, "shard-3.safetensors");
    ASSERT_EQ(r.ok(), k.ok) << (r.ok() ? std::string("ok") : r.status().ToString());
    if (k.ok) continue;
    const std::string& m = r.status().message();
    EXPECT_EQ(r.status().code(), Code::kCorrupt);
    EXPECT_NE(m.find("tensor '" + k.name + "' in shard-3.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find(k.why), std::string::npos) << m;
  }
  // No experts at all: every expert tensor is on a dense layer, named as such.
  ModelConfig none = c;
  none.num_experts = 0;
  auto r = ClassifyTensor(none, Family::kQwen3Moe, "model.layers.1.mlp.experts.0.up_proj.weight",
                          {32, 128}, "m.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_experts 0"), std::string::npos) << r.status().message();
}

TEST(RulesTest, DeepseekV3Names) {
  const std::string qkva = "model.layers.2.self_attn.fused_qkv_a_proj.weight";
  const std::string qkvas = "model.layers.2.self_attn.fused_qkv_a_proj.weight_scale_inv";
  ExpectCases(
      Deepseek(),
      {
          {"model.layers.2.self_attn.q_a_proj.weight", {128, 256}, Role::kReplicated, qkva, 0, 2},
          {"model.layers.2.self_attn.q_a_proj.weight_scale_inv",
           {1, 2},
           Role::kReplicated,
           qkvas,
           0,
           2},
          {"model.layers.2.self_attn.kv_a_proj_with_mqa.weight",
           {192, 256},
           Role::kReplicated,
           qkva,
           1,
           2},
          {"model.layers.2.self_attn.kv_a_proj_with_mqa.weight_scale_inv",
           {2, 2},
           Role::kReplicated,
           qkvas,
           1,
           2},
          {"model.layers.2.self_attn.q_a_layernorm.weight", {128}, Role::kReplicated, "", 0, 2},
          {"model.layers.2.self_attn.kv_a_layernorm.weight", {128}, Role::kReplicated, "", 0, 2},
          {"model.layers.2.self_attn.q_b_proj.weight", {512, 128}, Role::kColumn, "", 0, 2},
          {"model.layers.2.self_attn.q_b_proj.weight_scale_inv", {4, 1}, Role::kColumn, "", 0, 2},
          {"model.layers.2.self_attn.kv_b_proj.weight", {512, 128}, Role::kColumn, "", 0, 2},
          {"model.layers.2.self_attn.o_proj.weight", {256, 256}, Role::kRow, "", 0, 2},
          {"model.layers.2.self_attn.o_proj.weight_scale_inv", {2, 2}, Role::kRow, "", 0, 2},
          {"model.layers.0.mlp.gate_proj.weight",
           {512, 256},
           Role::kColumn,
           "model.layers.0.mlp.gate_up_proj.weight",
           0,
           0},
          {"model.layers.0.mlp.down_proj.weight_scale_inv", {2, 4}, Role::kRow, "", 0, 0},
          {"model.layers.1.mlp.gate.weight", {8, 256}, Role::kRouter, "", 0, 1},
          {"model.layers.1.mlp.gate.e_score_correction_bias", {8}, Role::kRouter, "", 0, 1},
          {"model.layers.1.mlp.shared_experts.gate_proj.weight",
           {256, 256},
           Role::kColumn,
           "model.layers.1.mlp.shared_experts.gate_up_proj.weight",
           0,
           1},
          {"model.layers.1.mlp.shared_experts.up_proj.weight_scale_inv",
           {2, 2},
           Role::kColumn,
           "model.layers.1.mlp.shared_experts.gate_up_proj.weight_scale_inv",
           1,
           1},
          {"model.layers.1.mlp.shared_experts.down_proj.weight", {256, 256}, Role::kRow, "", 0, 1},
          {"model.layers.1.mlp.experts.5.up_proj.weight_scale_inv",
           {2, 2},
           Role::kExpertUp,
           "model.layers.1.mlp.experts.w13_weight_scale_inv",
           1,
           1,
           5},
          {"model.layers.1.mlp.experts.5.down_proj.weight",
           {256, 256},
           Role::kExpertDown,
           "model.layers.1.mlp.experts.w2_weight",
           0,
           1,
           5},
          {"lm_head.weight", {1000, 256}, Role::kVocab, ""},
      });
}

TEST(RulesTest, DeepseekWithoutQLoraKeepsKvAUnfused) {
  ModelConfig c = Deepseek();
  c.q_lora_rank = 0;
  ExpectCases(c,
              {
                  {"model.layers.0.self_attn.q_proj.weight", {512, 256}, Role::kColumn, "", 0, 0},
                  {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                   {192, 256},
                   Role::kReplicated,
                   "",
                   0,
                   0},
              });
}

TEST(RulesTest, DeepseekMtpLayerIsSkippedElsewhereAnError) {
  auto r = ClassifyTensor(Deepseek(), Family::kDeepseekV3, "model.layers.3.eh_proj.weight",
                          {256, 512}, "x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->role, Role::kSkip);

  auto bad = ClassifyTensor(Llama(), Family::kLlama, "model.layers.2.input_layernorm.weight", {128},
                            "model-00002-of-00002.safetensors");
  ASSERT_FALSE(bad.ok());
  const std::string& m = bad.status().message();
  EXPECT_NE(m.find("model.layers.2.input_layernorm.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("model-00002-of-00002.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("num_hidden_layers is 2"), std::string::npos) << m;
}

TEST(RulesTest, TiedLmHeadIsSkipped) {
  ModelConfig c = Llama();
  c.tie_word_embeddings = true;
  auto r = ClassifyTensor(c, Family::kLlama, "lm_head.weight", {1088, 128}, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->role, Role::kSkip);
  auto e = ClassifyTensor(c, Family::kLlama, "model.embed_tokens.weight", {1088, 128}, "x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->role, Role::kVocab);
}

TEST(RulesTest, UnknownTensorIsAnErrorNamingIt) {
  for (const char* name : {"model.layers.0.self_attn.rotary_emb.inv_freq",
                           "model.layers.0.mlp.experts.1.gate_proj.weight",  // dense family
                           "transformer.h.0.attn.c_attn.weight", "model.norm.bias_extra"}) {
    auto r = ClassifyTensor(Llama(), Family::kLlama, name, {128}, "model.safetensors");
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), Code::kNotFound);  // "unexpected": PlanOptions::unexpected
    EXPECT_FALSE(HasRule(Family::kLlama, name));
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos);
    EXPECT_NE(r.status().message().find("no llama rule"), std::string::npos);
  }
}

TEST(RulesTest, ExpertIndexOutOfRange) {
  auto r = ClassifyTensor(Qwen3Moe(), Family::kQwen3Moe,
                          "model.layers.0.mlp.experts.8.gate_proj.weight", {32, 128}, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_experts is 8"), std::string::npos)
      << r.status().message();
}

TEST(RulesTest, ShapeMismatchNamesTensorExpectedAndActual) {
  struct Bad {
    ModelConfig cfg;
    std::string name;
    Shape shape;
    std::string expected;
    std::string why;
  };
  const std::vector<Bad> bad = {
      {Llama(),
       "model.layers.0.self_attn.k_proj.weight",
       {128, 128},
       "[64, 128]",
       "num_key_value_heads 4 x head_dim 16"},
      {Llama(),
       "model.layers.0.self_attn.q_proj.weight",
       {128, 64},
       "[128, 128]",
       "hidden_size 128"},
      {Llama(),
       "model.layers.0.mlp.down_proj.weight",
       {128, 256},
       "[128, 320]",
       "intermediate_size 320"},
      {Llama(), "model.embed_tokens.weight", {1024, 128}, "[1088, 128]", "vocab_size 1088"},
      {Llama(), "model.norm.weight", {128, 1}, "[128]", "hidden_size"},
      {Qwen3Moe(), "model.layers.0.mlp.gate.weight", {16, 128}, "[8, 128]", "num_experts 8"},
      {Qwen3Moe(),
       "model.layers.0.mlp.experts.0.up_proj.weight",
       {64, 128},
       "[32, 128]",
       "moe_intermediate_size 32"},
      {Deepseek(),
       "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
       {128, 256},
       "[192, 256]",
       "kv_lora_rank 128 + qk_rope_head_dim 64"},
      {Deepseek(),
       "model.layers.1.self_attn.kv_b_proj.weight",
       {256, 128},
       "[512, 128]",
       "qk_nope_head_dim 64 + v_head_dim 64"},
      {Deepseek(), "model.layers.1.self_attn.o_proj.weight_scale_inv", {2, 3}, "[2, 2]", "/ 128"},
  };
  for (const Bad& b : bad) {
    auto f = FamilyOf(b.cfg);
    ASSERT_TRUE(f.ok());
    auto r = ClassifyTensor(b.cfg, *f, b.name, b.shape, "shard-7.safetensors");
    ASSERT_FALSE(r.ok()) << b.name;
    const std::string& m = r.status().message();
    EXPECT_EQ(r.status().code(), Code::kCorrupt);  // checkpoint content, not the user's choice
    EXPECT_NE(m.find(b.name), std::string::npos) << m;
    EXPECT_NE(m.find("shard-7.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("shape " + ShapeString(b.shape)), std::string::npos) << m;
    EXPECT_NE(m.find("expected " + b.expected), std::string::npos) << m;
    EXPECT_NE(m.find(b.why), std::string::npos) << m;
  }
}

TEST(RulesTest, ScaleWithoutBlockSizeIsAnError) {
  ModelConfig c = Deepseek();
  c.weight_block_size.clear();
  auto r = ClassifyTensor(c, Family::kDeepseekV3,
                          "model.layers.1.self_attn.o_proj.weight_scale_inv", {2, 2}, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("weight_block_size"), std::string::npos);
}

}  // namespace
}  // namespace hoist::planner

namespace hoist::planner {
namespace {

// docs/LAYOUT.md's per-family tables are the rule table itself: the block between the markers
// equals FamilyTableMarkdown of every family. On a change, the expected block is written to
// $TMPDIR/LAYOUT.families.md to paste in.
// docs/LAYOUT.md's block between `<!-- NAME tables: made by FN -->` and `<!-- end of NAME
// tables -->` equals `want` (else the expected block is written to $TMPDIR/LAYOUT.NAME.md).
void ExpectDocBlock(const std::string& name, const std::string& fn, const std::string& want) {
  std::ifstream in(testing::SourceDir() + "/docs/LAYOUT.md");
  ASSERT_TRUE(in) << "docs/LAYOUT.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- " + name + " tables: made by " + fn + " -->\n";
  const std::string end = "<!-- end of " + name + " tables -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << begin;
  ASSERT_NE(e, std::string::npos) << end;
  const std::string have = doc.substr(b + begin.size(), e - b - begin.size());
  if (have != want) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string path = std::string(tmp ? tmp : "/tmp") + "/LAYOUT." + name + ".md";
    std::ofstream(path) << want;
    FAIL() << "docs/LAYOUT.md's " << name << " tables differ from the table; the expected block is "
           << path;
  }
}

TEST(RulesTest, LayoutDocTablesFollowTheRuleTable) {
  std::string want;
  for (int f = 0; f < kFamilyCount; ++f) {
    want += (f ? "\n" : "") + FamilyTableMarkdown(static_cast<Family>(f));
  }
  ExpectDocBlock("family", "FamilyTableMarkdown", want);
}

TEST(RulesTest, LayoutDocFormatTableFollowsTheFormatTable) {
  ExpectDocBlock("format", "FormatTableMarkdown", FormatTableMarkdown());
}

}  // namespace
}  // namespace hoist::planner

namespace hoist::planner {
namespace {

// config.json's first architecture picks the family (vLLM's registry); model_type only when no
// architecture is known.
TEST(RulesTest, FamilyOfArchitectureThenModelType) {
  ModelConfig c;
  c.model_type = "kimi_k2";
  c.architectures = {"DeepseekV3ForCausalLM"};
  ASSERT_TRUE(FamilyOf(c).ok());
  EXPECT_EQ(FamilyName(*FamilyOf(c)), "deepseek_v3");
  c.architectures = {"GlmMoeDsaForCausalLM"};
  EXPECT_EQ(FamilyName(*FamilyOf(c)), "glm_moe_dsa");
  c.architectures = {"SomethingNewForCausalLM"};
  c.model_type = "mixtral";
  EXPECT_EQ(FamilyName(*FamilyOf(c)), "mixtral");
  c.model_type = "qwen3_5_moe_text";
  EXPECT_EQ(FamilyName(*FamilyOf(c)), "qwen3_5_moe");
  c.model_type = "gpt2";
  Result<Family> none = FamilyOf(c);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kUnsupported);
  for (const char* part : {"'gpt2'", "SomethingNewForCausalLM", "mixtral", "qwen3_next", "phi3"}) {
    EXPECT_NE(none.status().message().find(part), std::string::npos) << none.status().message();
  }
  // The table's families are in enum order and every name is unique.
  std::set<std::string> names;
  for (int f = 0; f < kFamilyCount; ++f) {
    EXPECT_EQ(static_cast<int>(InfoOf(static_cast<Family>(f)).family), f);
    EXPECT_TRUE(names.insert(std::string(FamilyName(static_cast<Family>(f)))).second);
  }
}

// Hybrid layers: a linear-attention tensor on a full-attention layer names layer_types.
TEST(RulesTest, HybridLayersTakeTheirOwnAttention) {
  ModelConfig c;
  c.model_type = "qwen3_next";
  c.hidden_size = 128;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 16;
  c.vocab_size = 1000;
  c.linear_num_key_heads = 4;
  c.linear_num_value_heads = 8;
  c.linear_key_head_dim = 16;
  c.linear_value_head_dim = 16;
  c.full_attention_interval = 4;
  EXPECT_TRUE(LayerIsLinear(c, Family::kQwen3Next, 0));
  EXPECT_FALSE(LayerIsLinear(c, Family::kQwen3Next, 3));
  auto ok = ClassifyTensor(c, Family::kQwen3Next, "model.layers.0.linear_attn.conv1d.weight",
                           {256, 1, 4}, "x");
  EXPECT_FALSE(ok.ok());  // conv_kernel unset: the shape check names it
  c.linear_conv_kernel_dim = 4;
  ok = ClassifyTensor(c, Family::kQwen3Next, "model.layers.0.linear_attn.conv1d.weight",
                      {256, 1, 4}, "x");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->role, Role::kParts);
  ASSERT_EQ(ok->parts.size(), 3u);
  EXPECT_EQ(ok->parts[0].rows, 64u);
  EXPECT_EQ(ok->parts[2].rows, 128u);
  auto wrong = ClassifyTensor(c, Family::kQwen3Next, "model.layers.3.linear_attn.conv1d.weight",
                              {256, 1, 4}, "x");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("full-attention layer"), std::string::npos)
      << wrong.status().message();
  // layer_types wins over the interval.
  c.linear_layers = {0, 1, 0, 0};
  EXPECT_FALSE(LayerIsLinear(c, Family::kQwen3Next, 0));
  EXPECT_TRUE(LayerIsLinear(c, Family::kQwen3Next, 1));
}

}  // namespace
}  // namespace hoist::planner
