// Tests of the independent sharding reference (tests/reference/reference.h) on hand-checkable
// cases: expected values are built here from whole checkpoint tensors (read with the test's own
// reader) by byte-range arithmetic written out for each case.
#include "tests/reference/reference.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/tools/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::testref {
namespace {

using testtools::ScratchDir;
using testtools::StTensor;
using Bytes = std::vector<std::uint8_t>;
using Shape = std::vector<std::uint64_t>;
using Tensors = std::map<std::string, RefTensor>;

// One fixture folder per preset for the whole test process.
class Fixtures {
 public:
  static const std::string& Dir(const std::string& preset) {
    static ScratchDir root;  // removed at exit
    static std::map<std::string, std::string> made;
    auto it = made.find(preset);
    if (it != made.end()) return it->second;
    tools::MkckptOptions o;
    o.preset = preset;
    o.out_dir = root.Sub(preset);
    o.seed = 42;
    o.threads = 2;
    const Status s = tools::MakeCheckpoint(o);
    if (!s.ok()) throw std::runtime_error(s.ToString());
    return made[preset] = o.out_dir;
  }
  static const std::map<std::string, StTensor>& Whole(const std::string& preset) {
    static std::map<std::string, std::map<std::string, StTensor>> cache;
    auto it = cache.find(preset);
    if (it != cache.end()) return it->second;
    return cache[preset] = testtools::ReadCheckpoint(Dir(preset));
  }
};

Tensors Ref(const std::string& preset, int tp, int rank, bool fused, int ep = 0,
            bool round_robin = false) {
  RefOptions o;
  o.tp = tp;
  o.rank = rank;
  o.fused = fused;
  o.ep = ep;
  o.round_robin = round_robin;
  return ReferenceRankTensors(Fixtures::Dir(preset), o);
}

// Plain pointers, not strings: a reference bound to the result of a call with temporary strings
// among its arguments is what GCC 13's -Wdangling-reference warns about (the fixture's cache
// owns the tensor; nothing dangles).
const StTensor& W(const char* preset, const char* name) { return Fixtures::Whole(preset).at(name); }
const StTensor& W(const std::string& preset, const std::string& name) {
  return W(preset.c_str(), name.c_str());
}

std::uint64_t Esize(const StTensor& t) { return testtools::DtypeSize(t.dtype); }
std::uint64_t Cols(const StTensor& t) { return t.shape.size() > 1 ? t.shape[1] : 1; }

// Rows [r0, r1) of a whole tensor: one contiguous byte range.
Bytes RowsOf(const StTensor& t, std::uint64_t r0, std::uint64_t r1) {
  const std::uint64_t rb = Cols(t) * Esize(t);
  return Bytes(t.data.begin() + r0 * rb, t.data.begin() + r1 * rb);
}

// Columns [c0, c1) of a 2-D whole tensor.
Bytes ColsOf(const StTensor& t, std::uint64_t c0, std::uint64_t c1) {
  const std::uint64_t es = Esize(t), rb = Cols(t) * es;
  Bytes out;
  for (std::uint64_t r = 0; r < t.shape[0]; ++r) {
    out.insert(out.end(), t.data.begin() + r * rb + c0 * es, t.data.begin() + r * rb + c1 * es);
  }
  return out;
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(Reference, Tp1HfReproducesTheCheckpointExceptVocabPadding) {
  for (const std::string preset : {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-tiny-untied",
                                   "qwen3-moe-tiny", "deepseek-v3-tiny"}) {
    SCOPED_TRACE(preset);
    const Tensors out = Ref(preset, 1, 0, /*fused=*/false);
    const auto& whole = Fixtures::Whole(preset);
    ASSERT_EQ(out.size(), whole.size());
    for (const auto& [name, w] : whole) {
      ASSERT_TRUE(out.count(name)) << name;
      const RefTensor& r = out.at(name);
      EXPECT_EQ(r.dtype, w.dtype) << name;
      if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
        const std::uint64_t v = w.shape[0], vp = (v + 63) / 64 * 64;
        EXPECT_EQ(r.shape, (Shape{vp, w.shape[1]}));
        EXPECT_EQ(Bytes(r.data.begin(), r.data.begin() + w.data.size()), w.data);
        EXPECT_EQ(Bytes(r.data.begin() + w.data.size(), r.data.end()),
                  Bytes((vp - v) * w.shape[1] * 2, 0));
      } else {
        EXPECT_EQ(r.shape, w.shape) << name;
        EXPECT_EQ(r.data, w.data) << name;
      }
    }
  }
}

TEST(Reference, ColumnShardsConcatenateToTheWholeTensor) {
  for (int tp : {2, 4, 8}) {
    std::map<std::string, Bytes> joined;
    for (int r = 0; r < tp; ++r) {
      const Tensors out = Ref("qwen3-tiny", tp, r, false);
      const auto& q = out.at("model.layers.1.self_attn.q_proj.weight");
      EXPECT_EQ(q.shape, (Shape{256u / tp, 64}));
      for (const char* n :
           {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
            "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
        joined[n].insert(joined[n].end(), out.at(n).data.begin(), out.at(n).data.end());
      }
    }
    for (const auto& [n, bytes] : joined) {
      if (tp > 4 && n.find("k_proj") != std::string::npos) {
        // 4 kv heads: at tp 8 each head is held by two ranks, so the join holds each twice.
        const Bytes& w = W("qwen3-tiny", n.c_str()).data;
        ASSERT_EQ(bytes.size(), 2 * w.size());
        for (std::size_t h = 0; h < 4; ++h) {
          const Bytes head(w.begin() + h * 2048, w.begin() + (h + 1) * 2048);
          EXPECT_EQ(Bytes(bytes.begin() + 2 * h * 2048, bytes.begin() + (2 * h + 1) * 2048), head);
          EXPECT_EQ(Bytes(bytes.begin() + (2 * h + 1) * 2048, bytes.begin() + (2 * h + 2) * 2048),
                    head);
        }
        continue;
      }
      EXPECT_EQ(bytes, W("qwen3-tiny", n.c_str()).data) << n << " tp " << tp;
    }
  }
}

TEST(Reference, RowShardsAreColumnSlicesAndConcatenateToTheWholeTensor) {
  const StTensor& o = W("qwen3-tiny", "model.layers.0.self_attn.o_proj.weight");  // [64, 256]
  const int tp = 4;
  std::vector<Bytes> shards;
  for (int r = 0; r < tp; ++r) {
    const RefTensor t = Ref("qwen3-tiny", tp, r, true).at("model.layers.0.self_attn.o_proj.weight");
    EXPECT_EQ(t.shape, (Shape{64, 64}));
    EXPECT_EQ(t.data, ColsOf(o, r * 64, (r + 1) * 64));
    shards.push_back(t.data);
  }
  // Interleave the shards row by row: the whole tensor again.
  Bytes rebuilt;
  for (std::uint64_t row = 0; row < 64; ++row) {
    for (const auto& s : shards) {
      rebuilt.insert(rebuilt.end(), s.begin() + row * 128, s.begin() + (row + 1) * 128);
    }
  }
  EXPECT_EQ(rebuilt, o.data);
  // Row-parallel on rank 5 of tp 8: columns [160, 192) of down_proj [64, 128] at 16 per rank.
  const StTensor& down = W("qwen3-tiny", "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(Ref("qwen3-tiny", 8, 5, false).at("model.layers.1.mlp.down_proj.weight").data,
            ColsOf(down, 80, 96));
}

TEST(Reference, KvHeadsAreReplicatedWhenTpExceedsKvHeads) {
  // qwen3-tiny: 16 heads, 4 kv heads, head_dim 16. At tp 16 rank r gets kv head r / 4.
  const StTensor& k = W("qwen3-tiny", "model.layers.0.self_attn.k_proj.weight");
  const StTensor& v = W("qwen3-tiny", "model.layers.0.self_attn.v_proj.weight");
  const StTensor& q = W("qwen3-tiny", "model.layers.0.self_attn.q_proj.weight");
  for (int r : {0, 3, 4, 9, 15}) {
    const Tensors hf = Ref("qwen3-tiny", 16, r, false);
    const std::uint64_t h = r / 4;
    EXPECT_EQ(hf.at("model.layers.0.self_attn.k_proj.weight").shape, (Shape{16, 64}));
    EXPECT_EQ(hf.at("model.layers.0.self_attn.k_proj.weight").data, RowsOf(k, h * 16, h * 16 + 16));
    EXPECT_EQ(hf.at("model.layers.0.self_attn.v_proj.weight").data, RowsOf(v, h * 16, h * 16 + 16));
    EXPECT_EQ(hf.at("model.layers.0.self_attn.q_proj.weight").data, RowsOf(q, r * 16, r * 16 + 16));
    const Tensors fused = Ref("qwen3-tiny", 16, r, true);
    const RefTensor& qkv = fused.at("model.layers.0.self_attn.qkv_proj.weight");
    EXPECT_EQ(qkv.shape, (Shape{(1 + 2 * 1) * 16, 64}));
    EXPECT_EQ(qkv.data, Cat({RowsOf(q, r * 16, r * 16 + 16), RowsOf(k, h * 16, h * 16 + 16),
                             RowsOf(v, h * 16, h * 16 + 16)}));
  }
  // qwen2-tiny: 2 kv heads; tp 8 rank 5 -> head 5 / 4 = 1, and the biases follow.
  const StTensor& kb = W("qwen2-tiny", "model.layers.1.self_attn.k_proj.bias");
  const Tensors q2 = Ref("qwen2-tiny", 8, 5, false);
  EXPECT_EQ(q2.at("model.layers.1.self_attn.k_proj.bias").data, RowsOf(kb, 16, 32));
  EXPECT_EQ(q2.at("model.layers.1.self_attn.k_proj.bias").shape, (Shape{16}));
}

TEST(Reference, FusedQkvWithBiasesAndGateUp) {
  // qwen2-tiny at tp 2, rank 1: q rows [64, 128), k and v rows [16, 32) (2 kv heads, 1 each).
  const std::string p = "model.layers.0.self_attn.";
  const Tensors out = Ref("qwen2-tiny", 2, 1, true);
  const RefTensor& qkv = out.at(p + "qkv_proj.weight");
  EXPECT_EQ(qkv.shape, (Shape{64 + 16 + 16, 128}));
  EXPECT_EQ(qkv.data, Cat({RowsOf(W("qwen2-tiny", p + "q_proj.weight"), 64, 128),
                           RowsOf(W("qwen2-tiny", p + "k_proj.weight"), 16, 32),
                           RowsOf(W("qwen2-tiny", p + "v_proj.weight"), 16, 32)}));
  const RefTensor& bias = out.at(p + "qkv_proj.bias");
  EXPECT_EQ(bias.shape, (Shape{96}));
  EXPECT_EQ(bias.data, Cat({RowsOf(W("qwen2-tiny", p + "q_proj.bias"), 64, 128),
                            RowsOf(W("qwen2-tiny", p + "k_proj.bias"), 16, 32),
                            RowsOf(W("qwen2-tiny", p + "v_proj.bias"), 16, 32)}));
  for (const char* gone : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "q_proj.bias"}) {
    EXPECT_EQ(out.count(p + gone), 0u) << gone;
  }
  // gate_up at tp 4 rank 2 of qwen2-tiny (I = 256): gate rows [128, 192); up rows [128, 192).
  const Tensors g = Ref("qwen2-tiny", 4, 2, true);
  const RefTensor& gu = g.at("model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_EQ(gu.shape, (Shape{128, 128}));
  EXPECT_EQ(gu.data, Cat({RowsOf(W("qwen2-tiny", "model.layers.1.mlp.gate_proj.weight"), 128, 192),
                          RowsOf(W("qwen2-tiny", "model.layers.1.mlp.up_proj.weight"), 128, 192)}));
  // The fused qwen3-tiny output set: per layer input/post norms, qkv, o, q/k norm, gate_up,
  // down; plus embed and final norm (tied: no lm_head).
  const Tensors all = Ref("qwen3-tiny", 2, 0, true);
  EXPECT_EQ(all.size(), 2u * 8 + 2);
  EXPECT_EQ(all.count("lm_head.weight"), 0u);
  EXPECT_EQ(all.at("model.layers.1.self_attn.q_norm.weight").data,
            W("qwen3-tiny", "model.layers.1.self_attn.q_norm.weight").data);
}

TEST(Reference, VocabIsPaddedTo64WithZeroRowsThenSplit) {
  // qwen3-tiny: V = 1000 -> 1024. tp 2 rank 1 gets padded rows [512, 1024).
  const StTensor& e = W("qwen3-tiny", "model.embed_tokens.weight");  // [1000, 64] BF16
  const RefTensor t = Ref("qwen3-tiny", 2, 1, true).at("model.embed_tokens.weight");
  EXPECT_EQ(t.shape, (Shape{512, 64}));
  EXPECT_EQ(Bytes(t.data.begin(), t.data.begin() + 488 * 128), RowsOf(e, 512, 1000));
  EXPECT_EQ(Bytes(t.data.begin() + 488 * 128, t.data.end()), Bytes(24 * 128, 0));
  // tp 16 rank 15: rows [960, 1024): 40 real rows then 24 zero rows. Rank 14: all real.
  const RefTensor t15 = Ref("qwen3-tiny", 16, 15, false).at("model.embed_tokens.weight");
  EXPECT_EQ(t15.shape, (Shape{64, 64}));
  EXPECT_EQ(t15.data, Cat({RowsOf(e, 960, 1000), Bytes(24 * 128, 0)}));
  EXPECT_EQ(Ref("qwen3-tiny", 16, 14, false).at("model.embed_tokens.weight").data,
            RowsOf(e, 896, 960));
  // llama-tiny: V = 1088 is a multiple of 64: no padding; untied lm_head split the same way.
  const StTensor& lm = W("llama-tiny", "lm_head.weight");
  const RefTensor l3 = Ref("llama-tiny", 4, 3, true).at("lm_head.weight");
  EXPECT_EQ(l3.shape, (Shape{272, 128}));
  EXPECT_EQ(l3.data, RowsOf(lm, 816, 1088));
}

TEST(Reference, TiedEmbeddingsSkipACheckpointLmHead) {
  // An untied checkpoint whose config is switched to tied: lm_head.weight is in the files but
  // must not be output (as vLLM does); untied it is.
  ScratchDir tmp;
  tools::MkckptOptions o;
  o.preset = "qwen3-tiny-untied";
  o.out_dir = tmp.path();
  ASSERT_TRUE(tools::MakeCheckpoint(o).ok());
  RefOptions ro;
  ro.tp = 2;
  ro.rank = 1;
  EXPECT_EQ(ReferenceRankTensors(tmp.path(), ro).at("lm_head.weight").shape, (Shape{512, 64}));
  auto cfg = nlohmann::json::parse(testtools::ReadFile(tmp.Sub("config.json")));
  cfg["tie_word_embeddings"] = true;
  std::ofstream(tmp.Sub("config.json")) << cfg.dump();
  const Tensors tied = ReferenceRankTensors(tmp.path(), ro);
  EXPECT_EQ(tied.count("lm_head.weight"), 0u);
  EXPECT_EQ(tied.count("model.embed_tokens.weight"), 1u);
}

TEST(Reference, Fp8ScalesAreSlicedInWholeBlocks) {
  // deepseek-v3-tiny at tp 2, rank 1 (hf).
  const std::string P = "deepseek-v3-tiny", a = "model.layers.1.self_attn.";
  const Tensors out = Ref(P, 2, 1, false);
  // kv_b_proj [512, 128] column: rows [256, 512); its scale [4, 1]: rows [2, 4).
  EXPECT_EQ(out.at(a + "kv_b_proj.weight").data, RowsOf(W(P, a + "kv_b_proj.weight"), 256, 512));
  EXPECT_EQ(out.at(a + "kv_b_proj.weight_scale_inv").shape, (Shape{2, 1}));
  EXPECT_EQ(out.at(a + "kv_b_proj.weight_scale_inv").data,
            RowsOf(W(P, a + "kv_b_proj.weight_scale_inv"), 2, 4));
  // o_proj [256, 256] row: columns [128, 256); scale [2, 2]: column 1.
  EXPECT_EQ(out.at(a + "o_proj.weight").data, ColsOf(W(P, a + "o_proj.weight"), 128, 256));
  EXPECT_EQ(out.at(a + "o_proj.weight_scale_inv").shape, (Shape{2, 1}));
  EXPECT_EQ(out.at(a + "o_proj.weight_scale_inv").data,
            ColsOf(W(P, a + "o_proj.weight_scale_inv"), 1, 2));
  // Replicated kv_a_proj_with_mqa [192, 256] keeps its whole [2, 2] scale (partial last block).
  EXPECT_EQ(out.at(a + "kv_a_proj_with_mqa.weight_scale_inv").data,
            W(P, a + "kv_a_proj_with_mqa.weight_scale_inv").data);
  // Experts with EP off: tp-sharded like an MLP. Expert 5 down [256, 256]: scale column 1.
  const std::string x = "model.layers.2.mlp.experts.5.";
  EXPECT_EQ(out.at(x + "down_proj.weight_scale_inv").data,
            ColsOf(W(P, x + "down_proj.weight_scale_inv"), 1, 2));
  EXPECT_EQ(out.at(x + "gate_proj.weight").data, RowsOf(W(P, x + "gate_proj.weight"), 128, 256));
}

TEST(Reference, ABlockSplitByTpThrowsNamingTheTensor) {
  // tp 4: o_proj's 256 input columns split into 64, inside a 128 block.
  try {
    Ref("deepseek-v3-tiny", 4, 0, true);
    FAIL() << "expected a block error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("o_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("128"), std::string::npos) << m;
    EXPECT_NE(m.find("lower tp or use ep"), std::string::npos) << m;
  }
  // And the other misconfigurations.
  EXPECT_THROW(Ref("qwen3-tiny", 3, 0, false), std::runtime_error);          // 256 % 3
  EXPECT_THROW(Ref("deepseek-v3-tiny", 1, 0, true, 3), std::runtime_error);  // 8 % ep 3
  EXPECT_THROW(Ref("deepseek-v3-tiny", 2, 2, true, 3), std::runtime_error);  // ep % tp
  EXPECT_THROW(Ref("deepseek-v3-tiny", 1, 4, true, 4), std::runtime_error);  // rank >= ep
}

TEST(Reference, ExpertsUnderEpAreOwnedWholeLinearOrRoundRobin) {
  const std::string P = "deepseek-v3-tiny";
  auto experts_of = [](const Tensors& t, int layer) {
    std::set<int> e;
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    for (const auto& [name, x] : t) {
      if (name.rfind(p, 0) == 0) e.insert(std::stoi(name.substr(p.size())));
    }
    return e;
  };
  const Tensors lin = Ref(P, 1, 1, false, 4);
  EXPECT_EQ(experts_of(lin, 1), (std::set<int>{2, 3}));
  EXPECT_EQ(experts_of(lin, 2), (std::set<int>{2, 3}));
  const Tensors rr = Ref(P, 1, 1, false, 4, true);
  EXPECT_EQ(experts_of(rr, 2), (std::set<int>{1, 5}));
  const std::string x = "model.layers.2.mlp.experts.5.";
  for (const char* n :
       {"gate_proj.weight", "up_proj.weight", "down_proj.weight", "down_proj.weight_scale_inv"}) {
    EXPECT_EQ(rr.at(x + n).data, W(P, x + n).data) << n;  // whole
  }
  // ep 8 with tp 2 (dp 4): rank 7 owns expert 7 only; dense weights are tp rank 1's shard.
  const Tensors mixed = Ref(P, 2, 7, false, 8);
  EXPECT_EQ(experts_of(mixed, 1), (std::set<int>{7}));
  EXPECT_EQ(mixed.at("model.layers.1.self_attn.q_b_proj.weight").data,
            RowsOf(W(P, "model.layers.1.self_attn.q_b_proj.weight"), 256, 512));
  EXPECT_EQ(mixed.at("model.layers.1.mlp.shared_experts.down_proj.weight").data,
            ColsOf(W(P, "model.layers.1.mlp.shared_experts.down_proj.weight"), 128, 256));
  // The router and its correction bias are replicated.
  EXPECT_EQ(mixed.at("model.layers.1.mlp.gate.e_score_correction_bias").data,
            W(P, "model.layers.1.mlp.gate.e_score_correction_bias").data);
}

TEST(Reference, FusedDeepseekStacksExpertsAndFusesMla) {
  const std::string P = "deepseek-v3-tiny", L = "model.layers.1.";
  // EP 2 rank 1 (tp 1): experts 4..7 whole, stacked in ascending order.
  const Tensors out = Ref(P, 1, 1, true, 2);
  const RefTensor& w13 = out.at(L + "mlp.experts.w13_weight");
  const RefTensor& w2 = out.at(L + "mlp.experts.w2_weight");
  const RefTensor& s13 = out.at(L + "mlp.experts.w13_weight_scale_inv");
  const RefTensor& s2 = out.at(L + "mlp.experts.w2_weight_scale_inv");
  EXPECT_EQ(w13.shape, (Shape{4, 512, 256}));
  EXPECT_EQ(w2.shape, (Shape{4, 256, 256}));
  EXPECT_EQ(s13.shape, (Shape{4, 4, 2}));
  EXPECT_EQ(s2.shape, (Shape{4, 2, 2}));
  Bytes want13, want2, want_s13;
  for (int e = 4; e < 8; ++e) {
    const std::string x = L + "mlp.experts." + std::to_string(e) + ".";
    want13 = Cat({want13, W(P, x + "gate_proj.weight").data, W(P, x + "up_proj.weight").data});
    want2 = Cat({want2, W(P, x + "down_proj.weight").data});
    want_s13 = Cat({want_s13, W(P, x + "gate_proj.weight_scale_inv").data,
                    W(P, x + "up_proj.weight_scale_inv").data});
  }
  EXPECT_EQ(w13.data, want13);
  EXPECT_EQ(w2.data, want2);
  EXPECT_EQ(s13.data, want_s13);
  for (const auto& [name, t] : out) {
    EXPECT_EQ(name.find("experts.4."), std::string::npos) << name;  // no per-expert leftovers
  }
  // fused_qkv_a_proj = [q_a_proj; kv_a_proj_with_mqa], scales [1 + 2 block rows, 2].
  const std::string a = L + "self_attn.";
  EXPECT_EQ(out.at(a + "fused_qkv_a_proj.weight").shape, (Shape{128 + 192, 256}));
  EXPECT_EQ(out.at(a + "fused_qkv_a_proj.weight").data,
            Cat({W(P, a + "q_a_proj.weight").data, W(P, a + "kv_a_proj_with_mqa.weight").data}));
  EXPECT_EQ(out.at(a + "fused_qkv_a_proj.weight_scale_inv").shape, (Shape{3, 2}));
  EXPECT_EQ(out.at(a + "fused_qkv_a_proj.weight_scale_inv").data,
            Cat({W(P, a + "q_a_proj.weight_scale_inv").data,
                 W(P, a + "kv_a_proj_with_mqa.weight_scale_inv").data}));
  EXPECT_EQ(out.count(a + "q_a_proj.weight"), 0u);
  // Shared experts and the dense layer's MLP are fused gate_up with fused scales.
  EXPECT_EQ(out.at(L + "mlp.shared_experts.gate_up_proj.weight").data,
            Cat({W(P, L + "mlp.shared_experts.gate_proj.weight").data,
                 W(P, L + "mlp.shared_experts.up_proj.weight").data}));
  EXPECT_EQ(out.at(L + "mlp.shared_experts.gate_up_proj.weight_scale_inv").shape, (Shape{4, 2}));
  EXPECT_EQ(out.at("model.layers.0.mlp.gate_up_proj.weight_scale_inv").shape, (Shape{8, 2}));
}

TEST(Reference, ExpertsWithEpOffAreTpShardedAndStacked) {
  // deepseek-v3-tiny tp 2 rank 0: all 8 experts, each [gate rows 0..128; up rows 0..128],
  // down columns 0..128.
  const std::string P = "deepseek-v3-tiny", L = "model.layers.2.mlp.experts.";
  const Tensors out = Ref(P, 2, 0, true);
  EXPECT_EQ(out.at(L + "w13_weight").shape, (Shape{8, 256, 256}));
  EXPECT_EQ(out.at(L + "w2_weight").shape, (Shape{8, 256, 128}));
  EXPECT_EQ(out.at(L + "w13_weight_scale_inv").shape, (Shape{8, 2, 2}));
  EXPECT_EQ(out.at(L + "w2_weight_scale_inv").shape, (Shape{8, 2, 1}));
  Bytes want13, want2;
  for (int e = 0; e < 8; ++e) {
    const std::string x = L + std::to_string(e) + ".";
    want13 = Cat({want13, RowsOf(W(P, x + "gate_proj.weight"), 0, 128),
                  RowsOf(W(P, x + "up_proj.weight"), 0, 128)});
    want2 = Cat({want2, ColsOf(W(P, x + "down_proj.weight"), 0, 128)});
  }
  EXPECT_EQ(out.at(L + "w13_weight").data, want13);
  EXPECT_EQ(out.at(L + "w2_weight").data, want2);
  // Qwen3-MoE (BF16, no scales) at tp 2 rank 1: I = 32 -> 16 rows of each; router replicated.
  const std::string Q = "qwen3-moe-tiny", M = "model.layers.2.mlp.";
  const Tensors q = Ref(Q, 2, 1, true);
  EXPECT_EQ(q.at(M + "experts.w13_weight").shape, (Shape{8, 32, 64}));
  EXPECT_EQ(q.at(M + "experts.w2_weight").shape, (Shape{8, 64, 16}));
  EXPECT_EQ(q.count(M + "experts.w13_weight_scale_inv"), 0u);
  EXPECT_EQ(Bytes(q.at(M + "experts.w13_weight").data.begin(),
                  q.at(M + "experts.w13_weight").data.begin() + 32 * 64 * 2),
            Cat({RowsOf(W(Q, M + "experts.0.gate_proj.weight"), 16, 32),
                 RowsOf(W(Q, M + "experts.0.up_proj.weight"), 16, 32)}));
  EXPECT_EQ(q.at(M + "gate.weight").data, W(Q, M + "gate.weight").data);
  EXPECT_EQ(q.count("model.layers.1.mlp.gate_up_proj.weight"), 1u);  // mlp_only layer
}

}  // namespace
}  // namespace hoist::testref
