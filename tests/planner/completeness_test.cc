// Incomplete or inconsistent checkpoints are refused (planner/model_checks.h, checkpoint.h), on
// fresh hoist-mkckpt checkpoints broken by tests/planner/ckpt_edit.h: a missing layer tensor,
// norm, embedding, lm_head, q/k norm, routed expert or FP8 scale; a config claiming far more
// layers than the tensors hold (first missing tensor and the exact count, derived here by hand);
// tensors no rule knows under error / warn / ignore; a tensor in a shard but not in the index.
// The implied-tensor walk is also checked against hoist-mkckpt's independent tensor list.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "config/job_spec.h"
#include "config/topology.h"
#include "planner/plan_builder.h"
#include "planner/rules.h"
#include "tests/launch/mpirun_util.h"
#include "tests/planner/ckpt_edit.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;
using hoist::testing::ScratchDir;

Result<proto::LoadPlan> Plan(const std::string& dir, int tp = 1, int ep = 0,
                             UnexpectedTensors unexpected = UnexpectedTensors::kWarn) {
  HOIST_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint(dir));
  PlanOptions o;
  o.tp = tp;
  o.ep = ep;
  o.unexpected = unexpected;
  return BuildLoadPlan(ckpt, o);
}

template <typename R>
void ExpectError(const R& r, Code code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok()) << "expected a failure";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "missing '" << p << "' in: " << r.status().message();
  }
}

class CompletenessTest : public ::testing::Test {
 protected:
  std::string Fixture(const std::string& preset, std::uint64_t shard_size = 1 << 16) {
    const std::string dir = scratch_.Sub(preset + "-" + std::to_string(n_++));
    testedit::Make(dir, preset, shard_size);
    return fs::canonical(dir).string();
  }
  ScratchDir scratch_{"hoist-complete"};
  int n_ = 0;
};

TEST_F(CompletenessTest, FreshPresetsAreComplete) {
  for (const char* preset : {"qwen3-tiny", "qwen3-tiny-untied", "qwen2-tiny", "llama-tiny",
                             "qwen3-moe-tiny", "deepseek-v3-tiny"}) {
    Result<proto::LoadPlan> p = Plan(Fixture(preset));
    EXPECT_TRUE(p.ok()) << preset << ": " << p.status().ToString();
  }
}

TEST_F(CompletenessTest, MissingTensorNamesItTheKeyAndTheFolder) {
  struct Case {
    const char* preset;
    const char* tensor;
    const char* because;
  };
  const std::vector<Case> cases = {
      {"qwen3-tiny", "model.layers.1.self_attn.o_proj.weight", "num_hidden_layers = 2"},
      {"qwen3-tiny", "model.norm.weight", "model_type = qwen3"},
      {"qwen3-tiny", "model.embed_tokens.weight", "model_type = qwen3"},
      {"qwen3-tiny", "model.layers.0.self_attn.k_norm.weight", "model_type = qwen3"},
      {"qwen3-tiny-untied", "lm_head.weight", "tie_word_embeddings = false"},
      {"qwen2-tiny", "model.layers.1.self_attn.v_proj.bias", "model_type = qwen2"},
      {"llama-tiny", "model.layers.0.mlp.up_proj.weight", "num_hidden_layers = 2"},
      {"qwen3-moe-tiny", "model.layers.2.mlp.experts.5.down_proj.weight", "num_experts = 8"},
      {"qwen3-moe-tiny", "model.layers.0.mlp.gate.weight", "num_experts = 8"},
      {"deepseek-v3-tiny", "model.layers.1.mlp.shared_experts.up_proj.weight",
       "n_shared_experts = 1"},
      {"deepseek-v3-tiny", "model.layers.2.self_attn.q_a_layernorm.weight", "q_lora_rank = 128"},
      {"deepseek-v3-tiny", "model.layers.1.mlp.gate.e_score_correction_bias",
       "topk_method = noaux_tc"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.preset) + " without " + c.tensor);
    const std::string dir = Fixture(c.preset);
    testedit::DropTensor(dir, c.tensor);
    for (auto layout : {proto::LAYOUT_FUSED, proto::LAYOUT_HF}) {
      Result<Checkpoint> ckpt = OpenCheckpoint(dir);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
      PlanOptions o;
      o.layout = layout;
      ExpectError(BuildLoadPlan(*ckpt, o), Code::kCorrupt,
                  {dir + ": the checkpoint is incomplete: tensor '" + c.tensor +
                   "' is missing, which config.json implies (" + c.because + ")"});
    }
  }
}

TEST_F(CompletenessTest, MissingFp8ScaleNamesTheWeight) {
  const std::string dir = Fixture("deepseek-v3-tiny");
  testedit::DropTensor(dir, "model.layers.2.self_attn.kv_b_proj.weight_scale_inv");
  ExpectError(Plan(dir), Code::kCorrupt,
              {"tensor 'model.layers.2.self_attn.kv_b_proj.weight_scale_inv' is missing",
               "'model.layers.2.self_attn.kv_b_proj.weight' is stored as F8_E4M3, which needs its "
               "block scales"});
}

TEST_F(CompletenessTest, FarMoreLayersThanTensorsCountsWhatIsMissing) {
  const std::string dir = Fixture("qwen3-tiny");  // 2 layers
  testedit::EditConfig(dir, [](nlohmann::json& c) { c["num_hidden_layers"] = 40; });
  // Per Qwen3 layer: input/post norms, q/k/v/o, q/k norms, gate/up/down = 11 tensors.
  const std::uint64_t missing = 38 * 11;
  ExpectError(Plan(dir), Code::kCorrupt,
              {"tensor 'model.layers.2.input_layernorm.weight' is missing, which config.json "
               "implies (num_hidden_layers = 40); " +
               std::to_string(missing) +
               " implied tensors are missing in all; the checkpoint holds tensors of layers 0 "
               "to 1 only, but num_hidden_layers = 40"});
  // The largest accepted layer count answers at once; a larger one is a config error.
  testedit::EditConfig(dir, [](nlohmann::json& c) { c["num_hidden_layers"] = 65536; });
  const auto t0 = std::chrono::steady_clock::now();
  ExpectError(Plan(dir), Code::kCorrupt,
              {std::to_string(65534ull * 11) + " implied tensors are missing in all"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  testedit::EditConfig(dir, [](nlohmann::json& c) { c["num_hidden_layers"] = 1'000'000'000; });
  ExpectError(OpenCheckpoint(dir), Code::kCorrupt,
              {"config.json", "\"num_hidden_layers\" = 1000000000 is out of range: at most 65536"});
  // A whole routed expert gone: its three projections.
  const std::string moe = Fixture("qwen3-moe-tiny");
  for (const char* w : {"gate", "up", "down"}) {
    testedit::DropTensor(moe, std::string("model.layers.2.mlp.experts.7.") + w + "_proj.weight");
  }
  ExpectError(Plan(moe, 1, 4), Code::kCorrupt,
              {"tensor 'model.layers.2.mlp.experts.7.gate_proj.weight' is missing, which "
               "config.json implies (num_experts = 8); 3 implied tensors are missing in all"});
}

// The planner's implied tensors are exactly what hoist-mkckpt (written independently) writes,
// FP8 scales aside; and the counted total equals the walked one.
TEST_F(CompletenessTest, ImpliedTensorsMatchTheIndependentWriter) {
  for (const std::string& preset : tools::PresetNames()) {
    SCOPED_TRACE(preset);
    Result<std::string> text = tools::PresetConfigJson(preset);
    ASSERT_TRUE(text.ok());
    Result<std::vector<tools::TensorSpec>> specs = tools::ListTensorSpecs(*text);
    ASSERT_TRUE(specs.ok()) << specs.status().ToString();
    std::set<std::string> written;
    for (const auto& s : *specs) {
      if (s.name.find("_scale_inv") == std::string::npos) written.insert(s.name);
    }
    Result<ModelConfig> config = ParseModelConfig("config.json", *text);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    Result<Family> family = FamilyOf(*config);
    ASSERT_TRUE(family.ok());
    std::vector<std::string> walked;
    ForEachImpliedTensor(*config, *family, [&](const std::string& n, std::string_view why) {
      EXPECT_FALSE(why.empty()) << n;
      walked.push_back(n);
      return true;
    });
    EXPECT_EQ(std::set<std::string>(walked.begin(), walked.end()), written);
    EXPECT_EQ(walked.size(), written.size()) << "a name walked twice";
    // A walk can stop early.
    int seen = 0;
    ForEachImpliedTensor(*config, *family,
                         [&](const std::string&, std::string_view) { return ++seen < 3; });
    EXPECT_EQ(seen, 3);
  }
}

// ---- tensors no rule knows ------------------------------------------------------------------

// Captures spdlog warnings for one test.
class CaptureLog {
 public:
  CaptureLog() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~CaptureLog() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::vector<std::string> Lines() const { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

TEST_F(CompletenessTest, UnexpectedTensorsErrorWarnOrIgnore) {
  const std::string dir = Fixture("qwen3-tiny");
  const std::string file = testedit::FileOf(dir, "model.layers.0.input_layernorm.weight");
  std::vector<std::string> extra;
  for (int i = 0; i < 7; ++i) {
    extra.push_back("model.layers." + std::to_string(i % 2) + ".self_attn.rotary_emb.inv_freq" +
                    std::to_string(i));
    testedit::AddTensor(dir, file, extra.back(), {8});
  }
  std::sort(extra.begin(), extra.end());
  ExpectError(
      Plan(dir, 2, 0, UnexpectedTensors::kError), Code::kCorrupt,
      {dir + ": 7 tensors that no qwen3 rule knows: \"" + extra[0] + "\", \"" + extra[1] + "\"",
       "\"" + extra[4] + "\" and 2 more", "--unexpected-tensors warn or ignore"});
  {
    CaptureLog log;
    Result<proto::LoadPlan> warned = Plan(dir, 2);
    ASSERT_TRUE(warned.ok()) << warned.status().ToString();
    const std::vector<std::string> lines = log.Lines();
    ASSERT_EQ(lines.size(), 1u) << "one warning for all of them";
    EXPECT_NE(lines[0].find("[warning]"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("not loading 7 tensors that no qwen3 rule knows: \"" + extra[0]),
              std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("and 2 more"), std::string::npos) << lines[0];
    EXPECT_EQ(lines[0].find(extra[5]), std::string::npos) << "at most 5 names: " << lines[0];
    for (const auto& t : warned->ranks(0).tensors()) {
      EXPECT_EQ(t.name().find("rotary_emb"), std::string::npos) << "loaded " << t.name();
    }
  }
  CaptureLog quiet;
  EXPECT_TRUE(Plan(dir, 2, 0, UnexpectedTensors::kIgnore).ok());
  EXPECT_TRUE(quiet.Lines().empty());
}

// The option reaches the plan from the command line and the topology file.
TEST_F(CompletenessTest, UnexpectedTensorsFlagAndTopologyKey) {
  const std::string dir = Fixture("qwen3-tiny");
  testedit::AddTensor(dir, testedit::FileOf(dir, "model.norm.weight"), "model.extra.weight", {4});
  const testing::RunResult strict = testing::RunCommand(
      {testing::HoistBin(), "plan", "--model", dir, "--unexpected-tensors", "error"}, 60);
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find("1 tensor that no qwen3 rule knows: \"model.extra.weight\""),
            std::string::npos)
      << strict.output;
  const testing::RunResult warned =
      testing::RunCommand({testing::HoistBin(), "plan", "--model", dir}, 60);
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("not loading 1 tensor that no qwen3 rule knows"), std::string::npos)
      << warned.output;
  const testing::RunResult bad = testing::RunCommand(
      {testing::HoistBin(), "plan", "--model", dir, "--unexpected-tensors", "maybe"}, 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;

  const std::string yaml = scratch_.Sub("t.yaml");
  testedit::WriteText(yaml, "model: " + dir + "\nunexpected_tensors: ignore\n");
  config::JobSpec spec;
  spec.topology = yaml;
  Result<config::ResolvedJob> job = config::ResolveJobSpec(spec);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->job.plan.unexpected, UnexpectedTensors::kIgnore);
  spec.unexpected_tensors = "error";  // the flag wins over the file
  job = config::ResolveJobSpec(spec);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->job.plan.unexpected, UnexpectedTensors::kError);
  // A value no mode has is a configuration error when the job is resolved, naming the value.
  testedit::WriteText(yaml, "model: " + dir + "\nunexpected_tensors: often\n");
  spec.unexpected_tensors.reset();
  job = config::ResolveJobSpec(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kInvalidArgument);
  EXPECT_NE(job.status().message().find("unexpected_tensors 'often' is not error, warn or ignore"),
            std::string::npos)
      << job.status().message();
}

// ---- the index ------------------------------------------------------------------------------

TEST_F(CompletenessTest, TensorInAShardButNotInTheIndex) {
  const std::string dir = Fixture("qwen3-tiny");
  const std::string tensor = "model.layers.1.mlp.down_proj.weight";
  const std::string shard = dir + "/" + testedit::FileOf(dir, tensor);
  testedit::DropFromIndex(dir, tensor);
  ExpectError(OpenCheckpoint(dir), Code::kCorrupt,
              {shard + ": tensor \"" + tensor + "\"", "is not in model.safetensors.index.json"});
}

// The index lost every tensor of one shard: the shard is still in the folder and is named.
TEST_F(CompletenessTest, ShardTheIndexForgotIsNamed) {
  const std::string dir = Fixture("qwen3-tiny");
  const std::string file = testedit::FileOf(dir, "model.norm.weight");
  const nlohmann::json index = testedit::ReadJson(dir + "/" + testedit::kIndex);
  std::string first;
  for (const auto& [name, f] : index.at("weight_map").items()) {
    if (f != file) continue;
    if (first.empty()) first = name;  // items() are sorted: the first name of the shard
    testedit::DropFromIndex(dir, name);
  }
  ASSERT_FALSE(first.empty());
  ExpectError(OpenCheckpoint(dir), Code::kCorrupt,
              {dir + "/" + file + ": tensor \"",
               "is not in model.safetensors.index.json's "
               "weight_map, which names no tensor of this "
               "shard"});
}

TEST_F(CompletenessTest, IndexNamesATensorItsShardLacks) {
  const std::string dir = Fixture("qwen3-tiny");
  const std::string tensor = "model.layers.0.self_attn.q_proj.weight";
  const std::string file = testedit::FileOf(dir, tensor);
  testedit::EditShard(dir, file, [&](std::vector<testtools::StTensor>& ts) {
    std::erase_if(ts, [&](const testtools::StTensor& t) { return t.name == tensor; });
  });
  ExpectError(OpenCheckpoint(dir), Code::kNotFound,
              {dir + "/" + file + ": tensor \"" + tensor + "\"", "is not in its header"});
}

// `hoist plan` on an incomplete checkpoint: a plan failure (exit 1) naming the tensor.
TEST_F(CompletenessTest, HoistPlanExitsOneNamingTheMissingTensor) {
  const std::string dir = Fixture("qwen3-tiny");
  testedit::DropTensor(dir, "model.layers.1.self_attn.o_proj.weight");
  const testing::RunResult r =
      testing::RunCommand({testing::HoistBin(), "plan", "--model", dir}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tensor 'model.layers.1.self_attn.o_proj.weight' is missing, which "
                          "config.json implies (num_hidden_layers = 2)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(dir), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hoist::planner
