// DeepSeek-V4 (tests/data/derived/deepseek_v4: names, shapes and dtypes from vLLM's
// deepseek_v4.py): the family from `architectures`, the implied tensors equal to the fixture's
// list, and every divisibility refused with the config key and the tp values that work. The
// slicing itself is compared with the independent reference in plan_reference_test.cc and
// load_reference_test.cc; these tests plan in-memory checkpoints (headers only, nothing read).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "planner/rules.h"
#include "tests/test_paths.h"

namespace hoist::planner {
namespace {

using json = nlohmann::json;

json ReadJson(const std::string& folder, const std::string& file) {
  std::ifstream in(testing::SourceDir() + "/tests/data/derived/" + folder + "/" + file);
  EXPECT_TRUE(in) << folder << "/" << file;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::uint64_t DtypeBytes(const std::string& dtype) {
  const auto d = ParseDType(dtype);
  EXPECT_TRUE(d.has_value()) << dtype;
  return d ? DTypeSize(*d) : 1;
}

// A checkpoint of one file whose headers list `tensors` ({name: [dtype, shape]}).
Checkpoint InMemory(const json& config, const json& tensors) {
  Checkpoint ckpt;
  ckpt.dir = "/mem/deepseek_v4";
  auto parsed = ParseModelConfig("config.json", config.dump());
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  if (parsed.ok()) ckpt.config = *parsed;
  ShardFile file;
  file.rel_path = "model.safetensors";
  file.abs_path = ckpt.dir + "/" + file.rel_path;
  file.header.header_len = 1016;
  file.header.data_start = 8 + file.header.header_len;
  for (const auto& [name, v] : tensors.items()) {
    TensorEntry e;
    e.name = name;
    e.dtype = ParseDType(v.at(0).get<std::string>()).value_or(DType::kU8);
    e.shape = v.at(1).get<std::vector<std::uint64_t>>();
    std::uint64_t bytes = DtypeBytes(v.at(0).get<std::string>());
    for (std::uint64_t d : e.shape) bytes *= d;
    e.begin = file.stat.size;
    e.end = e.begin + bytes;
    file.stat.size = e.end;
    ckpt.tensors[e.name] = {0, static_cast<std::uint32_t>(file.header.tensors.size())};
    ckpt.tensor_bytes += bytes;
    file.header.tensors.push_back(std::move(e));
  }
  file.stat.size += file.header.data_start;
  ckpt.files.push_back(std::move(file));
  return ckpt;
}

// Sets the shape of every tensor whose name ends with `suffix`.
void Reshape(json* tensors, const std::string& suffix, std::vector<std::uint64_t> shape) {
  for (auto& [name, v] : tensors->items()) {
    if (name.size() >= suffix.size() && name.ends_with(suffix)) v[1] = shape;
  }
}

Result<proto::LoadPlan> Plan(const Checkpoint& ckpt, int tp, int ep = 0) {
  PlanOptions o;
  o.tp = tp;
  o.ep = ep;
  o.unexpected = UnexpectedTensors::kError;
  return BuildLoadPlan(ckpt, o);
}

void ExpectRefused(const Result<proto::LoadPlan>& plan, const std::vector<std::string>& phrases) {
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument) << plan.status().ToString();
  for (const std::string& p : phrases) {
    EXPECT_NE(plan.status().message().find(p), std::string::npos)
        << "no '" << p << "' in: " << plan.status().message();
  }
}

TEST(DeepseekV4Test, ArchitecturePicksTheFamilyAndTheWalkListsTheFixture) {
  for (const char* folder : {"deepseek_v4", "deepseek_v4_fp8"}) {
    SCOPED_TRACE(folder);
    json config = ReadJson(folder, "config.json");
    const json tensors = ReadJson(folder, "tensors.json");
    config["model_type"] = "something_else";  // the architecture decides, as vLLM's registry
    const Checkpoint ckpt = InMemory(config, tensors);
    auto family = FamilyOf(ckpt.config);
    ASSERT_TRUE(family.ok()) << family.status().ToString();
    EXPECT_EQ(*family, Family::kDeepseekV4);
    std::set<std::string> implied, listed;
    ForEachImpliedTensor(ckpt.config, *family, [&](const std::string& name, std::string_view) {
      implied.insert(name);
      auto shape = ImpliedShape(ckpt.config, *family, name);
      EXPECT_TRUE(shape.ok()) << name << ": " << shape.status().ToString();
      if (shape.ok() && tensors.contains(name)) {
        EXPECT_EQ(*shape, tensors[name][1].get<std::vector<std::uint64_t>>()) << name;
      }
      return true;
    });
    for (const auto& [name, v] : tensors.items()) {
      if (name.rfind("mtp.", 0) != 0) listed.insert(name);  // MTP: not loaded, not implied
    }
    EXPECT_EQ(implied, listed);
    auto plan = Plan(ckpt, 2);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->family(), "deepseek_v4");
    const bool fp4 = std::string(folder) == "deepseek_v4";
    EXPECT_NE(plan->format().find(fp4 ? "MXFP4 experts" : "128x128 block scales"),
              std::string::npos)
        << plan->format();
  }
}

// wo_a is column-parallel over o_groups whole groups (vLLM: o_groups // tp a rank).
TEST(DeepseekV4Test, OGroupsRefuseATpThatSplitsAGroup) {
  json config = ReadJson("deepseek_v4", "config.json");
  json tensors = ReadJson("deepseek_v4", "tensors.json");
  config["o_groups"] = 2;
  config["o_lora_rank"] = 256;
  Reshape(&tensors, ".attn.wo_a.weight", {512, 256});
  Reshape(&tensors, ".attn.wo_a.scale", {4, 2});
  const Checkpoint ckpt = InMemory(config, tensors);
  ASSERT_TRUE(Plan(ckpt, 2).ok());
  ExpectRefused(Plan(ckpt, 4),
                {"tp 4", "o_groups = 2", "config.json", "tp values that work", ": 1, 2"});
}

// MXFP4 experts split under tp in whole 32-value blocks of moe_intermediate_size (or --ep).
TEST(DeepseekV4Test, Mxfp4ExpertsRefuseATpThatCutsABlock) {
  json config = ReadJson("deepseek_v4", "config.json");
  json tensors = ReadJson("deepseek_v4", "tensors.json");
  config["moe_intermediate_size"] = 64;
  config["n_shared_experts"] = 4;  // the shared experts stay 256 wide
  for (const char* w : {"w1", "w3"}) {
    Reshape(&tensors, std::string(w) + ".weight", {64, 128});
    Reshape(&tensors, std::string(w) + ".scale", {64, 8});
    Reshape(&tensors, std::string("shared_experts.") + w + ".weight", {256, 256});
    Reshape(&tensors, std::string("shared_experts.") + w + ".scale", {2, 2});
  }
  Reshape(&tensors, "w2.weight", {256, 32});
  Reshape(&tensors, "w2.scale", {256, 2});
  Reshape(&tensors, "shared_experts.w2.weight", {256, 256});
  Reshape(&tensors, "shared_experts.w2.scale", {2, 2});
  const Checkpoint ckpt = InMemory(config, tensors);
  ASSERT_TRUE(Plan(ckpt, 2).ok()) << Plan(ckpt, 2).status().ToString();
  ExpectRefused(Plan(ckpt, 4), {"tp 4", "moe_intermediate_size = 64", "MXFP4 blocks of 32",
                                "tp values that work", ": 1, 2", "--ep"});
  // Under EP the experts stay whole, but the shared experts' 64 rows a rank cut an FP8 block.
  ExpectRefused(Plan(ckpt, 4, 4), {"shared_experts.w", "tp 4", "FP8 scale block"});
  ASSERT_TRUE(Plan(ckpt, 2, 4).ok());
}

// FP8 block scales: a tp whose shard of a column-parallel weight cuts a 128-row block.
TEST(DeepseekV4Test, Fp8BlocksRefuseATpThatCutsABlock) {
  json config = ReadJson("deepseek_v4_fp8", "config.json");
  json tensors = ReadJson("deepseek_v4_fp8", "tensors.json");
  config["moe_intermediate_size"] = 256;  // experts and shared experts 256 wide
  for (const char* w : {"w1", "w3"}) {
    Reshape(&tensors, std::string(w) + ".weight", {256, 256});
    Reshape(&tensors, std::string(w) + ".scale", {2, 2});
  }
  Reshape(&tensors, "w2.weight", {256, 256});
  Reshape(&tensors, "w2.scale", {2, 2});
  const Checkpoint ckpt = InMemory(config, tensors);
  ASSERT_TRUE(Plan(ckpt, 2).ok());
  ExpectRefused(Plan(ckpt, 4), {".scale", "tp 4", "FP8 scale block", "N/128 = 2", "--ep"});
}

TEST(DeepseekV4Test, EpMustDivideTheRoutedExperts) {
  const Checkpoint ckpt =
      InMemory(ReadJson("deepseek_v4", "config.json"), ReadJson("deepseek_v4", "tensors.json"));
  ExpectRefused(Plan(ckpt, 1, 3), {"ep 3", "n_routed_experts = 4"});
}

// vLLM's DeepseekV4MoE asserts n_routed_experts % tp == 0 even when tp splits the experts.
TEST(DeepseekV4Test, TpMustDivideTheRoutedExperts) {
  json config = ReadJson("deepseek_v4", "config.json");
  json tensors = ReadJson("deepseek_v4", "tensors.json");
  config["n_routed_experts"] = 2;
  for (auto it = tensors.begin(); it != tensors.end();) {
    const std::string& name = it.key();
    const bool gone = name.find(".experts.2.") != std::string::npos ||
                      name.find(".experts.3.") != std::string::npos;
    it = gone ? tensors.erase(it) : std::next(it);
  }
  Reshape(&tensors, "ffn.gate.weight", {2, 256});
  Reshape(&tensors, "ffn.gate.bias", {2});
  const Checkpoint ckpt = InMemory(config, tensors);
  ASSERT_TRUE(Plan(ckpt, 2).ok()) << Plan(ckpt, 2).status().ToString();
  ExpectRefused(Plan(ckpt, 4), {"tp 4", "n_routed_experts = 2", ": 1, 2"});
}

// A compressor on a layer config.json leaves uncompressed, a hash table on a score-routed layer.
TEST(DeepseekV4Test, LayerTensorsFollowCompressRatiosAndHashLayers) {
  json config = ReadJson("deepseek_v4", "config.json");
  json tensors = ReadJson("deepseek_v4", "tensors.json");
  config["compress_ratios"] = json::array({4, 0, 0, 4});
  auto plan = Plan(InMemory(config, tensors), 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("compress_ratios"), std::string::npos)
      << plan.status().message();
  config = ReadJson("deepseek_v4", "config.json");
  config["num_hash_layers"] = 0;
  plan = Plan(InMemory(config, tensors), 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("num_hash_layers"), std::string::npos)
      << plan.status().message();
  config = ReadJson("deepseek_v4", "config.json");
  config["expert_dtype"] = "int4";
  plan = Plan(InMemory(config, tensors), 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("expert_dtype"), std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace hoist::planner
