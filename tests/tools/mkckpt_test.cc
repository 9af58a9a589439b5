// Tests of the fixture generator (tools/mkckpt.h): tensor lists per family, the real byte
// counts of qwen3-4b (listed, never written), file format (checked with the test's own reader),
// sharding, determinism and the value ranges of the generated content.
#include "tools/mkckpt.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/test_util.h"
#include "tools/fp8_content.h"

namespace hoist::tools {
namespace {

using testtools::ParseSafetensors;
using testtools::ReadCheckpoint;
using testtools::ScratchDir;
using Shape = std::vector<std::uint64_t>;

std::map<std::string, TensorSpec> SpecsOf(const std::string& preset) {
  auto config = PresetConfigJson(preset);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto specs = ListTensorSpecs(*config);
  EXPECT_TRUE(specs.ok()) << specs.status().ToString();
  std::map<std::string, TensorSpec> m;
  for (const auto& s : *specs) EXPECT_TRUE(m.emplace(s.name, s).second) << "duplicate " << s.name;
  return m;
}

Status Make(const std::string& preset, const std::string& out, std::uint64_t seed = 7,
            std::uint64_t shard_size = 0, int threads = 2) {
  MkckptOptions o;
  o.preset = preset;
  o.out_dir = out;
  o.seed = seed;
  o.shard_size = shard_size;
  o.threads = threads;
  return MakeCheckpoint(o);
}

const std::vector<std::string> kTinyPresets = {"llama-tiny",     "qwen2-tiny",
                                               "qwen3-tiny",     "qwen3-tiny-untied",
                                               "qwen3-moe-tiny", "deepseek-v3-tiny"};

TEST(MkckptPresets, NamesIncludeEveryRequiredPreset) {
  const auto names = PresetNames();
  const std::set<std::string> have(names.begin(), names.end());
  for (const char* want :
       {"qwen3-4b", "llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-tiny-untied", "qwen3-moe-tiny",
        "deepseek-v3-tiny", "deepseek-v3-small"}) {
    EXPECT_TRUE(have.count(want)) << want;
  }
  EXPECT_EQ(*PresetFamily("qwen3-moe-tiny"), "qwen3-moe");
  EXPECT_EQ(*PresetFamily("deepseek-v3-small"), "deepseek-v3");
  EXPECT_EQ(PresetFamily("qwen9").status().code(), Code::kNotFound);
  EXPECT_EQ(*FamilyModelType("qwen3-moe"), "qwen3_moe");
  EXPECT_EQ(*FamilyModelType("deepseek-v3"), "deepseek_v3");
  EXPECT_FALSE(FamilyModelType("gpt2").ok());
}

TEST(MkckptPresets, Qwen3_4bHas398TensorsAnd8044936192Bytes) {
  const auto specs = SpecsOf("qwen3-4b");
  std::uint64_t total = 0;
  for (const auto& [name, s] : specs) {
    EXPECT_EQ(s.dtype, "BF16") << name;
    total += s.Bytes();
  }
  EXPECT_EQ(specs.size(), 398u);
  EXPECT_EQ(total, 8'044'936'192ull);
  // The same total from the architecture, by hand: embed + 36 layers + final norm, 2 bytes each.
  const std::uint64_t H = 2560, I = 9728, q = 32 * 128, kv = 8 * 128, V = 151936;
  const std::uint64_t layer = 2 * H + q * H + 2 * kv * H + H * q + 2 * 128 + 3 * I * H;
  EXPECT_EQ(total, 2 * (V * H + 36 * layer + H));

  EXPECT_EQ(specs.count("lm_head.weight"), 0u);  // tied
  EXPECT_EQ(specs.at("model.embed_tokens.weight").shape, (Shape{V, H}));
  EXPECT_EQ(specs.at("model.layers.35.self_attn.q_proj.weight").shape, (Shape{4096, 2560}));
  EXPECT_EQ(specs.at("model.layers.0.self_attn.k_proj.weight").shape, (Shape{1024, 2560}));
  EXPECT_EQ(specs.at("model.layers.0.self_attn.v_proj.weight").shape, (Shape{1024, 2560}));
  EXPECT_EQ(specs.at("model.layers.0.self_attn.o_proj.weight").shape, (Shape{2560, 4096}));
  EXPECT_EQ(specs.at("model.layers.7.self_attn.q_norm.weight").shape, (Shape{128}));
  EXPECT_EQ(specs.at("model.layers.7.self_attn.k_norm.weight").shape, (Shape{128}));
  EXPECT_EQ(specs.at("model.layers.3.mlp.gate_proj.weight").shape, (Shape{9728, 2560}));
  EXPECT_EQ(specs.at("model.layers.3.mlp.up_proj.weight").shape, (Shape{9728, 2560}));
  EXPECT_EQ(specs.at("model.layers.3.mlp.down_proj.weight").shape, (Shape{2560, 9728}));
  EXPECT_EQ(specs.at("model.norm.weight").shape, (Shape{2560}));
  EXPECT_EQ(specs.count("model.layers.36.input_layernorm.weight"), 0u);
  EXPECT_EQ(specs.count("model.layers.0.self_attn.q_proj.bias"), 0u);

  const auto config = nlohmann::json::parse(*PresetConfigJson("qwen3-4b"));
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["num_key_value_heads"], 8);
  EXPECT_EQ(config["head_dim"], 128);
}

TEST(MkckptPresets, DenseFamiliesHaveTheirHfTensors) {
  const auto qwen2 = SpecsOf("qwen2-tiny");  // H 128, 8 heads, 2 kv heads, hd 16, I 256
  EXPECT_EQ(qwen2.at("model.layers.1.self_attn.q_proj.bias").shape, (Shape{128}));
  EXPECT_EQ(qwen2.at("model.layers.1.self_attn.k_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(qwen2.at("model.layers.1.self_attn.v_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(qwen2.count("model.layers.1.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(qwen2.count("model.layers.1.self_attn.q_norm.weight"), 0u);
  EXPECT_EQ(qwen2.count("lm_head.weight"), 0u);
  EXPECT_EQ(qwen2.size(), 2u + 2 * 12);  // embed, norm; 12 per layer with 3 biases

  const auto llama = SpecsOf("llama-tiny");
  EXPECT_EQ(llama.at("lm_head.weight").shape, (Shape{1088, 128}));
  EXPECT_EQ(llama.count("model.layers.0.self_attn.q_norm.weight"), 0u);
  EXPECT_EQ(llama.count("model.layers.0.self_attn.q_proj.bias"), 0u);
  EXPECT_EQ(llama.at("model.layers.1.self_attn.k_proj.weight").shape, (Shape{64, 128}));
  EXPECT_EQ(llama.size(), 3u + 2 * 9);

  const auto q3 = SpecsOf("qwen3-tiny");
  EXPECT_NE(1000 % 64, 0);  // vocab padding is exercised
  EXPECT_EQ(q3.at("model.embed_tokens.weight").shape, (Shape{1000, 64}));
  EXPECT_EQ(q3.at("model.layers.0.self_attn.q_proj.weight").shape, (Shape{256, 64}));
  EXPECT_EQ(q3.at("model.layers.0.self_attn.k_proj.weight").shape, (Shape{64, 64}));
  EXPECT_EQ(q3.at("model.layers.0.self_attn.o_proj.weight").shape, (Shape{64, 256}));
  EXPECT_EQ(q3.count("lm_head.weight"), 0u);
  EXPECT_EQ(SpecsOf("qwen3-tiny-untied").at("lm_head.weight").shape, (Shape{1000, 64}));
}

TEST(MkckptPresets, Qwen3MoeHasSparseAndMlpOnlyLayers) {
  const auto s = SpecsOf("qwen3-moe-tiny");  // 3 layers, mlp_only_layers [1], 8 experts
  for (int L : {0, 2}) {
    const std::string p = "model.layers." + std::to_string(L) + ".mlp.";
    EXPECT_EQ(s.at(p + "gate.weight").shape, (Shape{8, 64})) << L;
    EXPECT_EQ(s.count(p + "gate_proj.weight"), 0u);
    for (int e = 0; e < 8; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      EXPECT_EQ(s.at(x + "gate_proj.weight").shape, (Shape{32, 64}));
      EXPECT_EQ(s.at(x + "up_proj.weight").shape, (Shape{32, 64}));
      EXPECT_EQ(s.at(x + "down_proj.weight").shape, (Shape{64, 32}));
    }
    EXPECT_EQ(s.count(p + "experts.8.gate_proj.weight"), 0u);
  }
  EXPECT_EQ(s.at("model.layers.1.mlp.gate_proj.weight").shape, (Shape{128, 64}));
  EXPECT_EQ(s.count("model.layers.1.mlp.gate.weight"), 0u);
  EXPECT_EQ(s.count("model.layers.1.self_attn.q_norm.weight"), 1u);
  EXPECT_EQ(s.count("lm_head.weight"), 1u);
  const auto config = nlohmann::json::parse(*PresetConfigJson("qwen3-moe-tiny"));
  EXPECT_EQ(config["model_type"], "qwen3_moe");
  EXPECT_EQ(config["num_experts"], 8);
  EXPECT_EQ(config["mlp_only_layers"], nlohmann::json::array({1}));
  EXPECT_EQ(config["decoder_sparse_step"], 1);
  EXPECT_EQ(config["moe_intermediate_size"], 32);
}

// A Qwen3-MoE config.json as transformers 5 saves it (num_local_experts, rope_parameters) with
// decoder_sparse_step 2: layers 1 and 3 sparse, 0 and 2 dense, as vLLM builds them; with
// mlp_only_layers [3] layer 3 is dense too. Disagreeing spellings and step 0 are errors.
TEST(MkckptPresets, Qwen3MoeSparseStepFromATransformers5Config) {
  nlohmann::json c = nlohmann::json::parse(*PresetConfigJson("qwen3-moe-tiny"));
  c.erase("num_experts");
  c["num_local_experts"] = 4;
  c["num_hidden_layers"] = 4;
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = nlohmann::json::array();
  for (auto [only, kinds] : std::vector<std::pair<nlohmann::json, std::string>>{
           {nlohmann::json::array(), "DSDS"}, {nlohmann::json::array({3}), "DSDD"}}) {
    c["mlp_only_layers"] = only;
    auto specs = ListTensorSpecs(c.dump());
    ASSERT_TRUE(specs.ok()) << specs.status().ToString();
    std::set<std::string> names;
    for (const auto& t : *specs) names.insert(t.name);
    for (int L = 0; L < 4; ++L) {
      SCOPED_TRACE(kinds + " layer " + std::to_string(L));
      const std::string p = "model.layers." + std::to_string(L) + ".mlp.";
      const bool sparse = kinds[L] == 'S';
      EXPECT_EQ(names.count(p + "gate.weight"), sparse ? 1u : 0u);
      EXPECT_EQ(names.count(p + "experts.3.down_proj.weight"), sparse ? 1u : 0u);
      EXPECT_EQ(names.count(p + "experts.4.down_proj.weight"), 0u);
      EXPECT_EQ(names.count(p + "gate_proj.weight"), sparse ? 0u : 1u);
      EXPECT_EQ(names.count(p + "down_proj.weight"), sparse ? 0u : 1u);
    }
  }
  nlohmann::json both = c;
  both["num_experts"] = 8;
  auto r = ListTensorSpecs(both.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"num_experts\" = 8 disagrees with \"num_local_experts\""),
            std::string::npos)
      << r.status().ToString();
  nlohmann::json zero = c;
  zero["decoder_sparse_step"] = 0;
  r = ListTensorSpecs(zero.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("decoder_sparse_step"), std::string::npos);
}

TEST(MkckptPresets, DeepseekV3TinyHasMlaMoeAndFp8BlockScales) {
  const auto s = SpecsOf("deepseek-v3-tiny");
  const std::string a = "model.layers.1.self_attn.";
  EXPECT_EQ(s.at(a + "q_a_proj.weight").shape, (Shape{128, 256}));
  EXPECT_EQ(s.at(a + "q_a_layernorm.weight").shape, (Shape{128}));
  EXPECT_EQ(s.at(a + "q_b_proj.weight").shape, (Shape{4 * (64 + 64), 128}));
  EXPECT_EQ(s.at(a + "kv_a_proj_with_mqa.weight").shape, (Shape{128 + 64, 256}));
  EXPECT_EQ(s.at(a + "kv_a_proj_with_mqa.weight_scale_inv").shape, (Shape{2, 2}));
  EXPECT_EQ(s.at(a + "kv_a_layernorm.weight").shape, (Shape{128}));
  EXPECT_EQ(s.at(a + "kv_b_proj.weight").shape, (Shape{4 * (64 + 64), 128}));
  EXPECT_EQ(s.at(a + "o_proj.weight").shape, (Shape{256, 4 * 64}));
  EXPECT_EQ(s.count(a + "q_proj.weight"), 0u);
  // Layer 0 dense, layers 1 and 2 MoE with one shared expert.
  EXPECT_EQ(s.at("model.layers.0.mlp.gate_proj.weight").shape, (Shape{512, 256}));
  EXPECT_EQ(s.at("model.layers.0.mlp.down_proj.weight_scale_inv").shape, (Shape{2, 4}));
  EXPECT_EQ(s.count("model.layers.0.mlp.gate.weight"), 0u);
  for (int L : {1, 2}) {
    const std::string p = "model.layers." + std::to_string(L) + ".mlp.";
    EXPECT_EQ(s.at(p + "gate.weight").dtype, "BF16");
    EXPECT_EQ(s.at(p + "gate.weight").shape, (Shape{8, 256}));
    EXPECT_EQ(s.at(p + "gate.e_score_correction_bias").dtype, "F32");
    EXPECT_EQ(s.at(p + "gate.e_score_correction_bias").shape, (Shape{8}));
    EXPECT_EQ(s.at(p + "shared_experts.up_proj.weight").shape, (Shape{256, 256}));
    EXPECT_EQ(s.at(p + "experts.7.down_proj.weight").shape, (Shape{256, 256}));
    EXPECT_EQ(s.count(p + "experts.8.down_proj.weight"), 0u);
  }
  // Every linear weight inside the layers is FP8 with an F32 [ceil(n/128), ceil(k/128)] scale;
  // embed, lm_head, norms and the router are BF16.
  int fp8 = 0;
  for (const auto& [name, t] : s) {
    const bool in_layer = name.rfind("model.layers.", 0) == 0;
    const bool linear = name.find("_proj.weight") != std::string::npos ||
                        name.find("_mqa.weight") != std::string::npos;
    if (name.size() > 10 && name.compare(name.size() - 10, 10, "_scale_inv") == 0) {
      const TensorSpec& w = s.at(name.substr(0, name.size() - 10));
      EXPECT_EQ(t.dtype, "F32");
      EXPECT_EQ(t.shape, (Shape{(w.shape[0] + 127) / 128, (w.shape[1] + 127) / 128})) << name;
    } else if (in_layer && linear) {
      ++fp8;
      EXPECT_EQ(t.dtype, "F8_E4M3") << name;
      EXPECT_EQ(s.count(name + "_scale_inv"), 1u) << name;
    } else if (name.find("e_score_correction_bias") == std::string::npos) {
      EXPECT_EQ(t.dtype, "BF16") << name;
    }
  }
  // 3 layers x 5 attention projections + 3 dense + 2 x (3 shared + 8 x 3 experts).
  EXPECT_EQ(fp8, 15 + 3 + 2 * (3 + 24));
  EXPECT_EQ(s.count("lm_head.weight"), 1u);

  const auto c = nlohmann::json::parse(*PresetConfigJson("deepseek-v3-tiny"));
  EXPECT_EQ(c["model_type"], "deepseek_v3");
  EXPECT_EQ(c["n_routed_experts"], 8);
  EXPECT_EQ(c["n_shared_experts"], 1);
  EXPECT_EQ(c["first_k_dense_replace"], 1);
  EXPECT_EQ(c["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(c["quantization_config"]["weight_block_size"], nlohmann::json::array({128, 128}));
  for (const char* k : {"moe_intermediate_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                        "qk_rope_head_dim", "v_head_dim"}) {
    EXPECT_TRUE(c.contains(k)) << k;
  }
}

TEST(MkckptPresets, DeepseekV3SmallIsOneToTwoGigabytesAndSplitsInBlocksUpToTp8) {
  const auto s = SpecsOf("deepseek-v3-small");
  std::uint64_t total = 0;
  for (const auto& [name, t] : s) {
    total += t.Bytes();
    if (t.dtype != "F8_E4M3") continue;
    const bool row =
        name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
    const bool repl =
        name.find("q_a_proj") != std::string::npos || name.find("kv_a_proj") != std::string::npos;
    if (!repl) {
      EXPECT_EQ((row ? t.shape[1] : t.shape[0]) % (8 * 128), 0u) << name;
    }
  }
  EXPECT_GT(total, 1'000'000'000ull);
  EXPECT_LT(total, 2'000'000'000ull);
}

TEST(MkckptPresets, TinyPresetsAreSmall) {
  for (const auto& p : kTinyPresets) {
    std::uint64_t total = 0;
    for (const auto& [name, t] : SpecsOf(p)) total += t.Bytes();
    EXPECT_LT(total, 6'000'000ull) << p;
    EXPECT_GT(total, 100'000ull) << p;
  }
}

// Every tiny preset's files parse, hold exactly the listed tensors in name order with no holes,
// and the content respects the value ranges of each dtype.
TEST(MkckptWrite, TinyPresetsWriteValidSafetensors) {
  ScratchDir tmp;
  for (const auto& preset : kTinyPresets) {
    SCOPED_TRACE(preset);
    const std::string dir = tmp.Sub(preset);
    ASSERT_TRUE(Make(preset, dir).ok());
    EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
    const auto config = nlohmann::json::parse(testtools::ReadFile(dir + "/config.json"));
    EXPECT_EQ(config.dump(), nlohmann::json::parse(*PresetConfigJson(preset)).dump());

    const auto f = ParseSafetensors(dir + "/model.safetensors");
    EXPECT_EQ(f.header_len % 8, 0u);
    EXPECT_EQ(f.header["__metadata__"]["format"], "pt");
    const auto specs = SpecsOf(preset);
    ASSERT_EQ(f.tensors.size(), specs.size());
    std::uint64_t pos = 0;
    std::string prev;
    for (const auto& t : f.tensors) {
      EXPECT_EQ(t.begin, pos) << t.name;  // contiguous, in offset order
      EXPECT_LT(prev, t.name);            // ... which is name order
      prev = t.name;
      pos = t.end;
      ASSERT_TRUE(specs.count(t.name)) << t.name;
      const TensorSpec& s = specs.at(t.name);
      EXPECT_EQ(t.dtype, s.dtype);
      EXPECT_EQ(t.shape, s.shape);
      std::uint64_t n = testtools::DtypeSize(t.dtype);
      for (auto d : t.shape) n *= d;
      EXPECT_EQ(t.end - t.begin, n) << t.name;
    }
    EXPECT_EQ(f.file_size, 8 + f.header_len + pos);
  }
}

// Block-quantized FP8 (scale amax / 448 per 128 x 128 block): each block's largest magnitude is
// 448 (0x7E), and the block's values spread below it (more than a few distinct bytes).
void ExpectBlockMaxima(const std::string& name, const std::vector<std::uint64_t>& shape,
                       const std::vector<std::uint8_t>& data) {
  const std::uint64_t cols = shape.back(), rows = data.size() / cols;
  for (std::uint64_t br = 0; br < rows; br += 128) {
    for (std::uint64_t bc = 0; bc < cols; bc += 128) {
      std::uint8_t top = 0;
      std::set<std::uint8_t> seen;
      for (std::uint64_t r = br; r < std::min(rows, br + 128); ++r) {
        for (std::uint64_t c = bc; c < std::min(cols, bc + 128); ++c) {
          top = std::max<std::uint8_t>(top, data[r * cols + c] & 0x7F);
          seen.insert(data[r * cols + c]);
        }
      }
      ASSERT_EQ(top, 0x7E) << name << " block (" << br << ", " << bc << ")";
      ASSERT_GT(seen.size(), 16u) << name << " block (" << br << ", " << bc << ")";
    }
  }
}

TEST(MkckptWrite, ContentIsFiniteNonZeroAndNeverFp8Nan) {
  ScratchDir tmp;
  ASSERT_TRUE(Make("deepseek-v3-tiny", tmp.path(), 3).ok());
  int bf16 = 0, f32 = 0, f8 = 0;
  std::set<int> f8_values;
  for (const auto& [name, t] : ReadCheckpoint(tmp.path())) {
    if (t.dtype == "BF16") {
      ++bf16;
      for (std::size_t i = 0; i + 1 < t.data.size(); i += 2) {
        const float v = testtools::Bf16ToFloat(std::uint16_t(t.data[i] | (t.data[i + 1] << 8)));
        ASSERT_TRUE(std::isfinite(v)) << name;
        ASSERT_GE(std::fabs(v), 1.0f / 128) << name;
        ASSERT_LT(std::fabs(v), 2.0f) << name;
      }
    } else if (t.dtype == "F32") {
      ++f32;
      for (std::size_t i = 0; i + 3 < t.data.size(); i += 4) {
        float v;
        std::memcpy(&v, &t.data[i], 4);
        ASSERT_TRUE(std::isnormal(v)) << name;
        ASSERT_GT(v, 0.0f) << name;
      }
    } else {
      ASSERT_EQ(t.dtype, "F8_E4M3");
      ++f8;
      for (std::uint8_t b : t.data) {
        ASSERT_NE(b & 0x7F, 0x7F) << name << " has an FP8 NaN";
        f8_values.insert(b);
      }
      ExpectBlockMaxima(name, t.shape, t.data);
    }
  }
  EXPECT_GT(bf16, 0);
  EXPECT_GT(f32, 0);
  EXPECT_GT(f8, 0);
  EXPECT_GT(f8_values.size(), 200u);  // non-trivial: nearly every non-NaN normal E4M3 value
}

TEST(MkckptWrite, SameSeedSameBytesOtherSeedDifferentBytes) {
  ScratchDir tmp;
  // Same seed with different thread counts and shardings: the tensors are byte-identical.
  ASSERT_TRUE(Make("qwen3-moe-tiny", tmp.Sub("a"), 11, 0, 1).ok());
  ASSERT_TRUE(Make("qwen3-moe-tiny", tmp.Sub("b"), 11, 100'000, 3).ok());
  ASSERT_TRUE(Make("qwen3-moe-tiny", tmp.Sub("c"), 12).ok());
  EXPECT_NE(testtools::ReadFile(tmp.Sub("a") + "/model.safetensors"),
            testtools::ReadFile(tmp.Sub("c") + "/model.safetensors"));
  const auto a = ReadCheckpoint(tmp.Sub("a"));
  const auto b = ReadCheckpoint(tmp.Sub("b"));
  const auto c = ReadCheckpoint(tmp.Sub("c"));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  for (const auto& [name, t] : a) {
    EXPECT_EQ(t.data, b.at(name).data) << name;
    EXPECT_NE(t.data, c.at(name).data) << name;
  }
  // Tensors of equal shape differ from each other (content depends on the name).
  EXPECT_NE(a.at("model.layers.0.self_attn.q_norm.weight").data,
            a.at("model.layers.0.self_attn.k_norm.weight").data);
  EXPECT_NE(a.at("model.layers.0.mlp.experts.3.gate_proj.weight").data,
            a.at("model.layers.0.mlp.experts.3.up_proj.weight").data);
  EXPECT_NE(a.at("model.layers.0.mlp.experts.3.gate_proj.weight").data,
            a.at("model.layers.2.mlp.experts.3.gate_proj.weight").data);
  // Same seed twice into the same folder: the very same file.
  const std::string before = testtools::ReadFile(tmp.Sub("a") + "/model.safetensors");
  ASSERT_TRUE(Make("qwen3-moe-tiny", tmp.Sub("a"), 11, 0, 4).ok());
  EXPECT_EQ(testtools::ReadFile(tmp.Sub("a") + "/model.safetensors"), before);
}

// E4M3 (fn) as the OCP spec defines it, decoded independently: every byte but NaN round-trips
// through ToE4M3, a midpoint goes to the even neighbour, and magnitudes over 448 saturate.
float FromE4M3(std::uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                         : std::ldexp(1.0f + static_cast<float>(m) / 8, e - 7);
  return (b & 0x80) ? -v : v;
}

TEST(MkckptFp8, ToE4M3RoundsToNearestEven) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    EXPECT_EQ(ToE4M3(FromE4M3(static_cast<std::uint8_t>(b))), b) << b;
  }
  EXPECT_EQ(ToE4M3(1.0625f), 0x38);  // between 1.0 (0x38) and 1.125 (0x39): even
  EXPECT_EQ(ToE4M3(1.1875f), 0x3A);  // between 1.125 and 1.25 (0x3A): even
  EXPECT_EQ(ToE4M3(1000.0f), 0x7E);
  EXPECT_EQ(ToE4M3(-460.0f), 0xFE);
  EXPECT_EQ(ToE4M3(0.0009765625f), 0x00);  // 2^-10: half of the smallest subnormal, to even 0
}

TEST(MkckptWrite, GeneratedBytesDoNotDependOnChunking) {
  const TensorSpec spec{"model.layers.0.mlp.up_proj.weight", "F8_E4M3", {37, 29}};
  const std::uint64_t n = spec.Bytes();  // 1073: not a multiple of 8
  std::vector<std::uint8_t> whole(n), parts(n);
  GenerateTensorBytes(spec, 5, 0, n, whole.data());
  for (std::uint64_t b = 0; b < n; b += 96) {
    GenerateTensorBytes(spec, 5, b, std::min(n, b + 96), parts.data() + b);
  }
  EXPECT_EQ(whole, parts);
  std::vector<std::uint8_t> other(n);
  GenerateTensorBytes(spec, 6, 0, n, other.data());
  EXPECT_NE(whole, other);
}

TEST(MkckptWrite, ShardsSplitAtShardSizeWithAnIndex) {
  ScratchDir tmp;
  const std::string dir = tmp.path();
  ASSERT_TRUE(Make("qwen3-tiny-untied", dir).ok());  // single file first: must be replaced
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  const std::uint64_t shard = 100'000;
  ASSERT_TRUE(Make("qwen3-tiny-untied", dir, 7, shard).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));

  const auto index =
      nlohmann::json::parse(testtools::ReadFile(dir + "/model.safetensors.index.json"));
  const auto specs = SpecsOf("qwen3-tiny-untied");
  std::uint64_t total = 0;
  for (const auto& [n, s] : specs) total += s.Bytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), specs.size());

  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file);
  // embed 128000 B and lm_head 128000 B each exceed the shard size: >= 3 shards.
  ASSERT_GE(files.size(), 3u);
  const std::size_t n = files.size();
  std::size_t k = 1;
  std::uint64_t seen = 0;
  for (const auto& file : files) {  // sorted: model-00001-of-0000N ...
    char want[64];
    std::snprintf(want, sizeof(want), "model-%05zu-of-%05zu.safetensors", k++, n);
    EXPECT_EQ(file, want);
    const auto f = ParseSafetensors(dir + "/" + file);
    std::uint64_t bytes = 0;
    for (const auto& t : f.tensors) {
      bytes += t.end - t.begin;
      EXPECT_EQ(index["weight_map"][t.name], file) << t.name;
    }
    EXPECT_TRUE(bytes <= shard || f.tensors.size() == 1) << file << " holds " << bytes;
    seen += f.tensors.size();
  }
  EXPECT_EQ(seen, specs.size());
  // Sharded content equals the single-file content.
  ScratchDir one;
  ASSERT_TRUE(Make("qwen3-tiny-untied", one.path()).ok());
  const auto sharded = ReadCheckpoint(dir), single = ReadCheckpoint(one.path());
  ASSERT_EQ(sharded.size(), single.size());
  for (const auto& [name, t] : single) EXPECT_EQ(t.data, sharded.at(name).data) << name;
}

TEST(MkckptWrite, UserConfigOfASupportedFamily) {
  ScratchDir tmp;
  auto cfg = nlohmann::json::parse(*PresetConfigJson("llama-tiny"));
  cfg["num_hidden_layers"] = 1;
  cfg["attention_bias"] = true;
  cfg["tie_word_embeddings"] = true;
  { std::ofstream(tmp.Sub("config.json")) << cfg.dump(); }
  MkckptOptions o;
  o.family = "llama";
  o.config_path = tmp.Sub("config.json");
  o.out_dir = tmp.Sub("out");
  const Status s = MakeCheckpoint(o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto t = ReadCheckpoint(o.out_dir);
  EXPECT_EQ(t.size(), 2u + 13);  // embed, norm; 9 + q/k/v/o biases
  EXPECT_EQ(t.at("model.layers.0.self_attn.o_proj.bias").shape, (Shape{128}));
  EXPECT_EQ(t.count("model.layers.1.input_layernorm.weight"), 0u);
  EXPECT_EQ(t.count("lm_head.weight"), 0u);
  EXPECT_EQ(nlohmann::json::parse(testtools::ReadFile(o.out_dir + "/config.json")), cfg);

  o.family = "qwen3";  // model_type llama does not match
  const Status bad = MakeCheckpoint(o);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("model_type"), std::string::npos) << bad.ToString();
}

TEST(MkckptWrite, BadRequestsFailWithAMessage) {
  ScratchDir tmp;
  MkckptOptions o;
  o.out_dir = tmp.path();
  o.preset = "no-such-preset";
  EXPECT_EQ(MakeCheckpoint(o).code(), Code::kNotFound);
  o.preset = "qwen3-tiny";
  o.family = "deepseek-v3";
  const Status mismatch = MakeCheckpoint(o);
  EXPECT_EQ(mismatch.code(), Code::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("qwen3-tiny"), std::string::npos);
  o.family.clear();
  o.config_path = tmp.Sub("config.json");
  EXPECT_EQ(MakeCheckpoint(o).code(), Code::kInvalidArgument);  // both preset and config
  o.preset.clear();
  std::ofstream(o.config_path) << "{\"model_type\": \"qwen3\", \"hidden_size\": ";
  const Status truncated = MakeCheckpoint(o);
  EXPECT_FALSE(truncated.ok());
  EXPECT_NE(truncated.message().find("config"), std::string::npos) << truncated.ToString();
  std::ofstream(o.config_path) << R"({"model_type": "gpt2", "hidden_size": 8})";
  EXPECT_EQ(MakeCheckpoint(o).code(), Code::kUnsupported);
  std::ofstream(o.config_path) << R"({"model_type": "qwen3", "hidden_size": 8})";
  const Status missing = MakeCheckpoint(o);
  EXPECT_NE(missing.message().find("num_hidden_layers"), std::string::npos) << missing.ToString();
}

// $HOIST_MKCKPT, else the build tree's tools/hoist-mkckpt next to this tests/ binary.
std::string MkckptBin() {
  if (const char* env = std::getenv("HOIST_MKCKPT"); env != nullptr && *env) return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : (self.parent_path().parent_path() / "tools" / "hoist-mkckpt").string();
}

TEST(MkckptCli, WritesAPresetAndRejectsBadFlags) {
  const std::string bin = MkckptBin();
  ASSERT_TRUE(std::filesystem::exists(bin)) << "hoist-mkckpt not found at '" << bin << "'";
  ScratchDir tmp;
  const std::string ok = std::string(bin) + " --family qwen2 --preset qwen2-tiny --seed 9 --out " +
                         tmp.Sub("q") + " --threads 2 > /dev/null";
  EXPECT_EQ(std::system(ok.c_str()), 0);
  EXPECT_EQ(ParseSafetensors(tmp.Sub("q") + "/model.safetensors").tensors.size(), 26u);
  const std::string bad = std::string(bin) + " --family qwen3 --preset qwen2-tiny --out " +
                          tmp.Sub("r") + " 2> /dev/null";
  const int rc = std::system(bad.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
  const std::string noout = std::string(bin) + " --preset qwen2-tiny > /dev/null 2>&1";
  const int rc2 = std::system(noout.c_str());
  EXPECT_TRUE(WIFEXITED(rc2) && WEXITSTATUS(rc2) == 2) << rc2;
}

// --list-presets: one line per preset with its family, tensor count, bytes and a human size. The
// tiny presets' figures are checked against checkpoints written and read back with the test's own
// reader; qwen3-4b's against the real model (398 tensors, 8,044,936,192 bytes).
TEST(MkckptCli, ListPresetsShowsEachPresetsSize) {
  const std::string bin = MkckptBin();
  ASSERT_TRUE(std::filesystem::exists(bin)) << "hoist-mkckpt not found at '" << bin << "'";
  ScratchDir tmp;
  const std::string cmd = bin + " --list-presets > " + tmp.Sub("list.txt");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(tmp.Sub("list.txt"));
  std::map<std::string, std::vector<std::string>> rows;  // preset -> family, tensors, bytes, size
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("preset", 0), 0u) << line;  // a header
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name, family, tensors, bytes, value, unit;
    ls >> name >> family >> tensors >> bytes >> value >> unit;
    rows[name] = {family, tensors, bytes, value + " " + unit};
  }
  EXPECT_EQ(rows.size(), PresetNames().size());
  ASSERT_TRUE(rows.count("qwen3-4b"));
  EXPECT_EQ(rows["qwen3-4b"], (std::vector<std::string>{"qwen3", "398", "8044936192", "7.49 GiB"}));
  for (const std::string& preset : kTinyPresets) {
    ASSERT_TRUE(rows.count(preset)) << preset;
    ASSERT_TRUE(Make(preset, tmp.Sub(preset)).ok()) << preset;
    std::uint64_t bytes = 0;
    const auto tensors = ReadCheckpoint(tmp.Sub(preset));
    for (const auto& [name, t] : tensors) bytes += t.end - t.begin;
    EXPECT_EQ(rows[preset][0], *PresetFamily(preset));
    EXPECT_EQ(rows[preset][1], std::to_string(tensors.size())) << preset;
    EXPECT_EQ(rows[preset][2], std::to_string(bytes)) << preset;
    // Tiny presets are KiB or MiB, never "0.00 GiB".
    const std::string& size = rows[preset][3];
    const double kib = std::stod(size) * (size.find("MiB") != std::string::npos ? 1024 : 1);
    EXPECT_TRUE(size.find("KiB") != std::string::npos || size.find("MiB") != std::string::npos)
        << preset << ": " << size;
    EXPECT_NEAR(kib * 1024, static_cast<double>(bytes), static_cast<double>(bytes) * 0.005)
        << preset << ": " << size;
  }
}

}  // namespace
}  // namespace hoist::tools
