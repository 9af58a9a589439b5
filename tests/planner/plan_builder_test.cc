// BuildLoadPlan on in-memory checkpoints (no files): exact copy operations, coalescing,
// alignment, vocab fills, KV replication, EP ownership, FP8 block errors, plan size and time at
// DeepSeek-V3 shape, Qwen3-4B byte counts, and the plan summary.
//
// Checkpoints here are plain Checkpoint structs; the small ones also get deterministic non-zero
// file bytes in memory, and a rank's copies and fills are executed with memcpy into an arena
// pre-set to 0xEE, so every expectation on content compares against slices computed directly
// from the source bytes in this file.
#include "planner/plan_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/plan_summary.h"

namespace hoist::planner {
namespace {

using Shape = std::vector<std::uint64_t>;
using Bytes = std::vector<std::uint8_t>;

struct Spec {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;
};

std::uint64_t Elems(const Shape& s) {
  std::uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
std::uint64_t CeilDiv(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

std::uint64_t SplitMix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Mem {
  Checkpoint ckpt;
  std::vector<Bytes> data;  // whole file contents (empty when built without data)

  const TensorEntry& E(const std::string& name) const { return ckpt.Entry(ckpt.tensors.at(name)); }
  std::uint32_t FileOf(const std::string& name) const { return ckpt.tensors.at(name).file; }
  // The tensor's bytes as stored.
  Bytes Src(const std::string& name) const {
    const TensorEntry& e = E(name);
    const Bytes& f = data.at(FileOf(name));
    const std::uint64_t at = ckpt.files[FileOf(name)].header.data_start + e.begin;
    return Bytes(f.begin() + at, f.begin() + at + e.bytes());
  }
};

// Lays `specs` out like HF: files in the given order (a new file when `shard_limit` would be
// exceeded), tensors sorted by name inside a file unless `keep_order`.
Mem MakeMem(const ModelConfig& cfg, std::vector<Spec> specs, bool with_data,
            std::uint64_t shard_limit = ~0ull, bool keep_order = false) {
  Mem m;
  m.ckpt.dir = "/mem/model";
  m.ckpt.config = cfg;
  std::vector<std::vector<Spec>> files(1);
  std::uint64_t cur = 0;
  for (Spec& s : specs) {
    const std::uint64_t b = Elems(s.shape) * DTypeSize(s.dtype);
    if (cur > 0 && cur + b > shard_limit) {
      files.emplace_back();
      cur = 0;
    }
    cur += b;
    files.back().push_back(std::move(s));
  }
  for (std::uint32_t f = 0; f < files.size(); ++f) {
    auto& fs = files[f];
    if (!keep_order) {
      std::sort(fs.begin(), fs.end(), [](const Spec& a, const Spec& b) { return a.name < b.name; });
    }
    ShardFile sf;
    sf.rel_path = "model-0000" + std::to_string(f + 1) + ".safetensors";
    sf.abs_path = m.ckpt.dir + "/" + sf.rel_path;
    sf.header.header_len = 1000 + 8 * f;  // odd-looking data_start catches offset bugs
    sf.header.data_start = 8 + sf.header.header_len;
    std::uint64_t off = 0;
    for (std::uint32_t i = 0; i < fs.size(); ++i) {
      TensorEntry e;
      e.name = fs[i].name;
      e.dtype = fs[i].dtype;
      e.shape = fs[i].shape;
      e.begin = off;
      off += Elems(e.shape) * DTypeSize(e.dtype);
      e.end = off;
      m.ckpt.tensors[e.name] = TensorLocation{f, i};
      m.ckpt.tensor_bytes += e.bytes();
      sf.header.tensors.push_back(std::move(e));
    }
    sf.stat.size = sf.header.data_start + off;
    sf.stat.mtime_ns = 1'700'000'000'000'000'000ll + f;
    if (with_data) {
      Bytes d(sf.stat.size);
      for (std::uint64_t p = 0; p < d.size(); ++p) {
        std::uint8_t v = static_cast<std::uint8_t>(SplitMix((std::uint64_t{f} << 48) ^ (p >> 3)) >>
                                                   ((p & 7) * 8));
        d[p] = v == 0 ? 0x5A : v;
      }
      m.data.push_back(std::move(d));
    }
    m.ckpt.files.push_back(std::move(sf));
  }
  return m;
}

// Executes rank `r`'s copies and fills into a fresh arena (pre-set to 0xEE).
Bytes Execute(const Mem& m, const proto::LoadPlan& plan, int r) {
  const proto::RankPlan& rp = plan.ranks(r);
  Bytes arena(rp.arena_bytes(), 0xEE);
  for (const auto& c : rp.copies()) {
    const Bytes& f = m.data.at(c.file());
    for (std::uint64_t i = 0; i < c.rows(); ++i) {
      const std::uint64_t s = c.src_offset() + (c.rows() > 1 ? i * c.src_pitch() : 0);
      const std::uint64_t d = c.dst_offset() + (c.rows() > 1 ? i * c.dst_pitch() : 0);
      EXPECT_LE(s + c.width(), f.size());
      EXPECT_LE(d + c.width(), arena.size());
      if (s + c.width() > f.size() || d + c.width() > arena.size()) return arena;
      std::memcpy(arena.data() + d, f.data() + s, c.width());
    }
  }
  for (const auto& fl : rp.fills()) {
    EXPECT_LE(fl.dst_offset() + fl.bytes(), arena.size());
    std::memset(arena.data() + fl.dst_offset(), static_cast<int>(fl.value()), fl.bytes());
  }
  return arena;
}

const proto::TensorOut* Out(const proto::RankPlan& rp, const std::string& name) {
  for (const auto& t : rp.tensors()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

Bytes OutBytes(const Bytes& arena, const proto::TensorOut& t) {
  return Bytes(arena.begin() + t.arena_offset(), arena.begin() + t.arena_offset() + t.bytes());
}

Shape OutShape(const proto::TensorOut& t) { return Shape(t.shape().begin(), t.shape().end()); }

// Rows [r0, r0+n) of a row-major tensor with `row_bytes` per row.
Bytes RowsOf(const Bytes& src, std::uint64_t row_bytes, std::uint64_t r0, std::uint64_t n) {
  return Bytes(src.begin() + r0 * row_bytes, src.begin() + (r0 + n) * row_bytes);
}
// Element columns [c0, c0+n) of a [R, C] tensor of `es`-byte elements.
Bytes ColsOf(const Bytes& src, std::uint64_t R, std::uint64_t C, std::uint64_t es, std::uint64_t c0,
             std::uint64_t n) {
  Bytes out;
  for (std::uint64_t r = 0; r < R; ++r) {
    auto at = src.begin() + (r * C + c0) * es;
    out.insert(out.end(), at, at + n * es);
  }
  return out;
}
Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Structural invariants every plan must satisfy: copies sorted by (file, src) and inside their
// file's data section; each tensor's bytes covered exactly once by copies and fills and nothing
// outside tensors written; offsets aligned; payload and arena sizes consistent.
void CheckInvariants(const proto::LoadPlan& plan) {
  for (const auto& rp : plan.ranks()) {
    SCOPED_TRACE("rank " + std::to_string(rp.rank()));
    std::vector<std::pair<std::uint64_t, std::uint64_t>> tensors, writes;
    std::uint64_t payload = 0;
    for (const auto& t : rp.tensors()) {
      EXPECT_EQ(t.arena_offset() % plan.alignment(), 0u) << t.name();
      std::uint64_t elems = 1;
      for (auto d : t.shape()) elems *= d;
      auto dt = ParseDType(t.dtype());
      ASSERT_TRUE(dt.has_value());
      EXPECT_EQ(elems * DTypeSize(*dt), t.bytes()) << t.name();
      tensors.emplace_back(t.arena_offset(), t.arena_offset() + t.bytes());
      payload += t.bytes();
    }
    EXPECT_EQ(payload, rp.payload_bytes());
    EXPECT_EQ(rp.arena_bytes() % plan.alignment(), 0u);
    for (std::size_t i = 0; i < static_cast<std::size_t>(rp.copies_size()); ++i) {
      const auto& c = rp.copies(static_cast<int>(i));
      ASSERT_LT(c.file(), static_cast<std::uint32_t>(plan.files_size()));
      ASSERT_GE(c.rows(), 1u);
      ASSERT_GT(c.width(), 0u);
      const auto& f = plan.files(static_cast<int>(c.file()));
      EXPECT_GE(c.src_offset(), f.data_start());
      const std::uint64_t last = c.src_offset() + (c.rows() - 1) * c.src_pitch() + c.width();
      EXPECT_LE(last, f.size());
      if (c.rows() > 1) {
        EXPECT_GE(c.src_pitch(), c.width());
        EXPECT_GE(c.dst_pitch(), c.width());
      }
      if (i > 0) {
        const auto& p = rp.copies(static_cast<int>(i - 1));
        EXPECT_TRUE(p.file() < c.file() ||
                    (p.file() == c.file() && p.src_offset() < c.src_offset()))
            << "copies not sorted at " << i;
      }
      for (std::uint64_t r = 0; r < c.rows(); ++r) {
        const std::uint64_t d = c.dst_offset() + (c.rows() > 1 ? r * c.dst_pitch() : 0);
        writes.emplace_back(d, d + c.width());
      }
    }
    for (const auto& fl : rp.fills())
      writes.emplace_back(fl.dst_offset(), fl.dst_offset() + fl.bytes());
    std::sort(tensors.begin(), tensors.end());
    std::sort(writes.begin(), writes.end());
    for (std::size_t i = 1; i < tensors.size(); ++i) {
      EXPECT_LE(tensors[i - 1].second, tensors[i].first) << "tensors overlap";
    }
    if (!tensors.empty()) {
      EXPECT_LE(tensors.back().second, rp.arena_bytes());
    }
    // Writes tile the tensors exactly: merge writes and compare with the tensors' union.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> merged;
    for (auto w : writes) {
      if (!merged.empty()) {
        ASSERT_LE(merged.back().second, w.first) << "two writes overlap at " << w.first;
        if (merged.back().second == w.first) {
          merged.back().second = w.second;
          continue;
        }
      }
      merged.push_back(w);
    }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> tunion;
    for (auto t : tensors) {
      if (t.first == t.second) continue;
      if (!tunion.empty() && tunion.back().second == t.first) {
        tunion.back().second = t.second;
      } else {
        tunion.push_back(t);
      }
    }
    EXPECT_EQ(merged, tunion) << "writes do not cover the tensors exactly";
  }
}

// ---- Model shapes -------------------------------------------------------------------------

ModelConfig Dense(const std::string& type, int layers, int hidden, int inter, int heads, int kvh,
                  int hd, int vocab, bool tied) {
  ModelConfig c;
  c.model_type = type;
  c.num_hidden_layers = layers;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kvh;
  c.head_dim = hd;
  c.vocab_size = vocab;
  c.tie_word_embeddings = tied;
  return c;
}

std::string L(int l) { return "model.layers." + std::to_string(l) + "."; }

void AddAttention(const ModelConfig& c, int l, std::vector<Spec>* s) {
  const std::uint64_t H = c.hidden_size, Q = c.num_attention_heads * c.head_dim,
                      KV = c.num_key_value_heads * c.head_dim;
  s->push_back({L(l) + "self_attn.q_proj.weight", DType::kBF16, {Q, H}});
  s->push_back({L(l) + "self_attn.k_proj.weight", DType::kBF16, {KV, H}});
  s->push_back({L(l) + "self_attn.v_proj.weight", DType::kBF16, {KV, H}});
  if (c.model_type == "qwen2") {
    s->push_back({L(l) + "self_attn.q_proj.bias", DType::kBF16, {Q}});
    s->push_back({L(l) + "self_attn.k_proj.bias", DType::kBF16, {KV}});
    s->push_back({L(l) + "self_attn.v_proj.bias", DType::kBF16, {KV}});
  }
  s->push_back({L(l) + "self_attn.o_proj.weight", DType::kBF16, {H, Q}});
  if (c.model_type == "qwen3" || c.model_type == "qwen3_moe") {
    s->push_back({L(l) + "self_attn.q_norm.weight", DType::kBF16, {std::uint64_t(c.head_dim)}});
    s->push_back({L(l) + "self_attn.k_norm.weight", DType::kBF16, {std::uint64_t(c.head_dim)}});
  }
}

void AddMlp(const std::string& prefix, std::uint64_t I, std::uint64_t H, DType dt,
            std::vector<Spec>* s, std::uint64_t block = 0) {
  s->push_back({prefix + "gate_proj.weight", dt, {I, H}});
  s->push_back({prefix + "up_proj.weight", dt, {I, H}});
  s->push_back({prefix + "down_proj.weight", dt, {H, I}});
  if (block) {
    s->push_back({prefix + "gate_proj.weight_scale_inv",
                  DType::kF32,
                  {CeilDiv(I, block), CeilDiv(H, block)}});
    s->push_back(
        {prefix + "up_proj.weight_scale_inv", DType::kF32, {CeilDiv(I, block), CeilDiv(H, block)}});
    s->push_back({prefix + "down_proj.weight_scale_inv",
                  DType::kF32,
                  {CeilDiv(H, block), CeilDiv(I, block)}});
  }
}

std::vector<Spec> DenseSpecs(const ModelConfig& c, bool lm_head_even_if_tied = false) {
  const std::uint64_t H = c.hidden_size, V = c.vocab_size;
  std::vector<Spec> s;
  s.push_back({"model.embed_tokens.weight", DType::kBF16, {V, H}});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    s.push_back({L(l) + "input_layernorm.weight", DType::kBF16, {H}});
    AddAttention(c, l, &s);
    s.push_back({L(l) + "post_attention_layernorm.weight", DType::kBF16, {H}});
    bool dense =
        c.num_experts == 0 || std::count(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), l) > 0;
    if (dense) {
      AddMlp(L(l) + "mlp.", c.intermediate_size, H, DType::kBF16, &s);
    } else {
      s.push_back({L(l) + "mlp.gate.weight", DType::kBF16, {std::uint64_t(c.num_experts), H}});
      for (int e = 0; e < c.num_experts; ++e) {
        AddMlp(L(l) + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size, H,
               DType::kBF16, &s);
      }
    }
  }
  s.push_back({"model.norm.weight", DType::kBF16, {H}});
  if (!c.tie_word_embeddings || lm_head_even_if_tied) {
    s.push_back({"lm_head.weight", DType::kBF16, {V, H}});
  }
  return s;
}

ModelConfig DeepseekConfig(int layers, int hidden, int inter, int moe_inter, int experts, int heads,
                           int q_lora, int kv_lora, int nope, int rope, int v, int vocab,
                           int first_dense) {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.num_hidden_layers = layers;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.moe_intermediate_size = moe_inter;
  c.num_experts = experts;
  c.n_shared_experts = 1;
  c.first_k_dense_replace = first_dense;
  c.num_attention_heads = heads;
  c.num_key_value_heads = heads;
  c.head_dim = hidden / heads;
  c.q_lora_rank = q_lora;
  c.kv_lora_rank = kv_lora;
  c.qk_nope_head_dim = nope;
  c.qk_rope_head_dim = rope;
  c.v_head_dim = v;
  c.vocab_size = vocab;
  c.quant_method = "fp8";
  c.weight_block_size = {128, 128};
  return c;
}

std::vector<Spec> DeepseekSpecs(const ModelConfig& c, bool mtp_layer = false) {
  const std::uint64_t H = c.hidden_size, V = c.vocab_size, B = 128;
  const std::uint64_t heads = c.num_attention_heads;
  std::vector<Spec> s;
  auto fp8 = [&](const std::string& name, std::uint64_t n, std::uint64_t k) {
    s.push_back({name + ".weight", DType::kF8E4M3, {n, k}});
    s.push_back({name + ".weight_scale_inv", DType::kF32, {CeilDiv(n, B), CeilDiv(k, B)}});
  };
  s.push_back({"model.embed_tokens.weight", DType::kBF16, {V, H}});
  for (int l = 0; l < c.num_hidden_layers + (mtp_layer ? 1 : 0); ++l) {
    s.push_back({L(l) + "input_layernorm.weight", DType::kBF16, {H}});
    fp8(L(l) + "self_attn.q_a_proj", c.q_lora_rank, H);
    s.push_back(
        {L(l) + "self_attn.q_a_layernorm.weight", DType::kBF16, {std::uint64_t(c.q_lora_rank)}});
    fp8(L(l) + "self_attn.q_b_proj", heads * (c.qk_nope_head_dim + c.qk_rope_head_dim),
        c.q_lora_rank);
    fp8(L(l) + "self_attn.kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, H);
    s.push_back(
        {L(l) + "self_attn.kv_a_layernorm.weight", DType::kBF16, {std::uint64_t(c.kv_lora_rank)}});
    fp8(L(l) + "self_attn.kv_b_proj", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    fp8(L(l) + "self_attn.o_proj", H, heads * c.v_head_dim);
    s.push_back({L(l) + "post_attention_layernorm.weight", DType::kBF16, {H}});
    if (l < c.first_k_dense_replace) {
      AddMlp(L(l) + "mlp.", c.intermediate_size, H, DType::kF8E4M3, &s, B);
    } else {
      s.push_back({L(l) + "mlp.gate.weight", DType::kBF16, {std::uint64_t(c.num_experts), H}});
      s.push_back(
          {L(l) + "mlp.gate.e_score_correction_bias", DType::kF32, {std::uint64_t(c.num_experts)}});
      AddMlp(L(l) + "mlp.shared_experts.", c.moe_intermediate_size * c.n_shared_experts, H,
             DType::kF8E4M3, &s, B);
      for (int e = 0; e < c.num_experts; ++e) {
        AddMlp(L(l) + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size, H,
               DType::kF8E4M3, &s, B);
      }
    }
    if (l == c.num_hidden_layers) {  // MTP layer extras (vLLM skips the whole layer)
      s.push_back({L(l) + "enorm.weight", DType::kBF16, {H}});
      s.push_back({L(l) + "eh_proj.weight", DType::kBF16, {H, 2 * H}});
    }
  }
  s.push_back({"model.norm.weight", DType::kBF16, {H}});
  s.push_back({"lm_head.weight", DType::kBF16, {V, H}});
  return s;
}

proto::LoadPlan MustPlan(const Mem& m, const PlanOptions& o) {
  auto p = BuildLoadPlan(m.ckpt, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  CheckInvariants(*p);
  return std::move(p).value();
}

PlanOptions Opts(int tp, proto::Layout layout = proto::LAYOUT_FUSED, int ep = 0,
                 proto::ExpertPlacement placement = proto::PLACEMENT_LINEAR) {
  PlanOptions o;
  o.tp = tp;
  o.ep = ep;
  o.layout = layout;
  o.placement = placement;
  return o;
}

// A small Llama: H 128, I 320, 8 heads / 4 kv heads of 16, vocab 1088, untied.
ModelConfig SmallLlama() { return Dense("llama", 2, 128, 320, 8, 4, 16, 1088, false); }

// ---- Tests --------------------------------------------------------------------------------

TEST(PlanBuilderTest, RowParallelShardIsOneTwoDCopy) {
  const ModelConfig c = SmallLlama();
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  const proto::LoadPlan plan = MustPlan(m, Opts(2, proto::LAYOUT_HF));
  const std::string name = "model.layers.0.mlp.down_proj.weight";  // [128, 320] -> [128, 160]
  const TensorEntry& e = m.E(name);
  const std::uint64_t ds = m.ckpt.files[m.FileOf(name)].header.data_start;
  for (int r = 0; r < 2; ++r) {
    const proto::RankPlan& rp = plan.ranks(r);
    const proto::TensorOut* t = Out(rp, name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(OutShape(*t), (Shape{128, 160}));
    int hits = 0;
    for (const auto& cp : rp.copies()) {
      if (cp.dst_offset() + cp.width() <= t->arena_offset() ||
          cp.dst_offset() >= t->arena_offset() + t->bytes()) {
        continue;
      }
      ++hits;
      EXPECT_EQ(cp.file(), m.FileOf(name));
      EXPECT_EQ(cp.src_offset(), ds + e.begin + r * 160 * 2);
      EXPECT_EQ(cp.src_pitch(), 320u * 2);
      EXPECT_EQ(cp.dst_offset(), t->arena_offset());
      EXPECT_EQ(cp.dst_pitch(), 160u * 2);
      EXPECT_EQ(cp.width(), 160u * 2);
      EXPECT_EQ(cp.rows(), 128u);
    }
    EXPECT_EQ(hits, 1) << "a row-parallel shard must be ONE 2-D copy";
    const Bytes arena = Execute(m, plan, r);
    EXPECT_EQ(OutBytes(arena, *t), ColsOf(m.Src(name), 128, 320, 2, r * 160, 160));
  }
}

TEST(PlanBuilderTest, ColumnShardIsOneContiguousCopy) {
  const ModelConfig c = SmallLlama();
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  const proto::LoadPlan plan = MustPlan(m, Opts(4, proto::LAYOUT_HF));
  const std::string name = "model.layers.1.mlp.gate_proj.weight";  // [320, 128] -> [80, 128]
  const TensorEntry& e = m.E(name);
  const std::uint64_t ds = m.ckpt.files[0].header.data_start;
  for (int r = 0; r < 4; ++r) {
    const proto::RankPlan& rp = plan.ranks(r);
    const proto::TensorOut* t = Out(rp, name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(OutShape(*t), (Shape{80, 128}));
    int hits = 0;
    for (const auto& cp : rp.copies()) {
      if (cp.dst_offset() != t->arena_offset()) continue;
      ++hits;
      EXPECT_EQ(cp.rows(), 1u);
      EXPECT_EQ(cp.src_offset(), ds + e.begin + r * 80 * 128 * 2);
      EXPECT_EQ(cp.width(), 80u * 128 * 2);
    }
    EXPECT_EQ(hits, 1);
    const Bytes arena = Execute(m, plan, r);
    EXPECT_EQ(OutBytes(arena, *t), RowsOf(m.Src(name), 128 * 2, r * 80, 80));
  }
}

TEST(PlanBuilderTest, ContiguousRangesCoalesce) {
  // Every tensor of SmallLlama is a multiple of 256 bytes, so at tp 1 in the hf layout the
  // arena is the file's data section verbatim: one copy per file.
  const ModelConfig c = SmallLlama();
  {
    const Mem m = MakeMem(c, DenseSpecs(c), true);
    const proto::LoadPlan plan = MustPlan(m, Opts(1, proto::LAYOUT_HF));
    ASSERT_EQ(plan.ranks(0).copies_size(), 1);
    const auto& cp = plan.ranks(0).copies(0);
    EXPECT_EQ(cp.rows(), 1u);
    EXPECT_EQ(cp.src_offset(), m.ckpt.files[0].header.data_start);
    EXPECT_EQ(cp.width(), m.ckpt.tensor_bytes);
    EXPECT_EQ(cp.dst_offset(), 0u);
    EXPECT_EQ(plan.ranks(0).payload_bytes(), m.ckpt.tensor_bytes);
  }
  {
    const Mem m = MakeMem(c, DenseSpecs(c), true, 400'000);  // several files
    ASSERT_GT(m.ckpt.files.size(), 2u);
    const proto::LoadPlan plan = MustPlan(m, Opts(1, proto::LAYOUT_HF));
    EXPECT_EQ(plan.ranks(0).copies_size(), static_cast<int>(m.ckpt.files.size()));
    const Bytes arena = Execute(m, plan, 0);
    for (const auto& t : plan.ranks(0).tensors()) {
      EXPECT_EQ(OutBytes(arena, t), m.Src(t.name())) << t.name();
    }
  }
  {
    // Alignment 4096 leaves gaps after the 256-byte norms: copies break there, data still right.
    const Mem m = MakeMem(c, DenseSpecs(c), true);
    PlanOptions o = Opts(1, proto::LAYOUT_HF);
    o.alignment = 4096;
    const proto::LoadPlan plan = MustPlan(m, o);
    EXPECT_GT(plan.ranks(0).copies_size(), 1);
    EXPECT_LT(plan.ranks(0).copies_size(), plan.ranks(0).tensors_size());
    const Bytes arena = Execute(m, plan, 0);
    for (const auto& t : plan.ranks(0).tensors()) {
      EXPECT_EQ(OutBytes(arena, t), m.Src(t.name())) << t.name();
    }
  }
}

TEST(PlanBuilderTest, BackToBackRowShardsMergeIntoOneTwoDCopy) {
  // Experts' down_proj stored back to back (in expert order): their tp-sharded column slices,
  // stacked in w2_weight, continue each other in source and destination: ONE 2-D copy.
  ModelConfig c = Dense("qwen3_moe", 1, 64, 128, 4, 2, 16, 1024, true);
  c.num_experts = 4;
  c.moe_intermediate_size = 32;
  std::vector<Spec> specs;
  for (int e = 0; e < 4; ++e) {
    specs.push_back(
        {L(0) + "mlp.experts." + std::to_string(e) + ".down_proj.weight", DType::kBF16, {64, 32}});
  }
  for (const Spec& s : DenseSpecs(c)) {
    if (s.name.find("down_proj") == std::string::npos) specs.push_back(s);
  }
  const Mem m = MakeMem(c, specs, true, ~0ull, /*keep_order=*/true);
  const proto::LoadPlan plan = MustPlan(m, Opts(2));
  for (int r = 0; r < 2; ++r) {
    const proto::RankPlan& rp = plan.ranks(r);
    const proto::TensorOut* w2 = Out(rp, "model.layers.0.mlp.experts.w2_weight");
    ASSERT_NE(w2, nullptr);
    EXPECT_EQ(OutShape(*w2), (Shape{4, 64, 16}));
    int hits = 0;
    for (const auto& cp : rp.copies()) {
      if (cp.dst_offset() < w2->arena_offset() ||
          cp.dst_offset() >= w2->arena_offset() + w2->bytes()) {
        continue;
      }
      ++hits;
      EXPECT_EQ(cp.rows(), 4u * 64);
      EXPECT_EQ(cp.width(), 16u * 2);
      EXPECT_EQ(cp.src_pitch(), 32u * 2);
    }
    EXPECT_EQ(hits, 1);
    const Bytes arena = Execute(m, plan, r);
    Bytes want;
    for (int e = 0; e < 4; ++e) {
      want =
          Cat({want, ColsOf(m.Src(L(0) + "mlp.experts." + std::to_string(e) + ".down_proj.weight"),
                            64, 32, 2, r * 16, 16)});
    }
    EXPECT_EQ(OutBytes(arena, *w2), want);
  }
}

TEST(PlanBuilderTest, ArenaOffsetsAreAlignedAndPacked) {
  const ModelConfig c = Dense("qwen2", 2, 96, 224, 6, 2, 16, 1000, true);  // odd sizes
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  for (std::uint64_t a : {1ull, 64ull, 256ull, 4096ull}) {
    PlanOptions o = Opts(2);
    o.alignment = a;
    const proto::LoadPlan plan = MustPlan(m, o);
    EXPECT_EQ(plan.alignment(), a);
    for (const auto& rp : plan.ranks()) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
      for (const auto& t : rp.tensors()) spans.emplace_back(t.arena_offset(), t.bytes());
      std::sort(spans.begin(), spans.end());
      std::uint64_t end = 0;
      for (auto [off, bytes] : spans) {
        EXPECT_EQ(off, (end + a - 1) / a * a) << "not packed at alignment " << a;
        end = off + bytes;
      }
      EXPECT_EQ(rp.arena_bytes(), (end + a - 1) / a * a);
    }
  }
  PlanOptions bad = Opts(2);
  bad.alignment = 384;
  auto p = BuildLoadPlan(m.ckpt, bad);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("alignment"), std::string::npos);
}

TEST(PlanBuilderTest, VocabPaddingIsZeroFilled) {
  // Vocab 1000 -> 1024 at tp 4: 256 rows per rank; rank 3 has rows [768, 1000) + 24 zero rows.
  const ModelConfig c = Dense("qwen3", 1, 64, 128, 4, 2, 16, 1000, true);
  const Mem m = MakeMem(c, DenseSpecs(c, /*lm_head_even_if_tied=*/true), true);
  for (auto layout : {proto::LAYOUT_FUSED, proto::LAYOUT_HF}) {
    const proto::LoadPlan plan = MustPlan(m, Opts(4, layout));
    EXPECT_EQ(plan.source_tensors(), m.ckpt.tensors.size());  // lm_head counted...
    const Bytes emb = m.Src("model.embed_tokens.weight");
    for (int r = 0; r < 4; ++r) {
      const proto::RankPlan& rp = plan.ranks(r);
      EXPECT_EQ(Out(rp, "lm_head.weight"), nullptr);  // ...but tied: not loaded
      const proto::TensorOut* t = Out(rp, "model.embed_tokens.weight");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(OutShape(*t), (Shape{256, 64}));
      const std::uint64_t real = r < 3 ? 256 : 232;
      const Bytes arena = Execute(m, plan, r);
      Bytes want = RowsOf(emb, 128, r * 256, real);
      want.resize(256 * 128, 0);
      EXPECT_EQ(OutBytes(arena, *t), want);
      if (r < 3) {
        EXPECT_EQ(rp.fills_size(), 0);
      } else {
        ASSERT_EQ(rp.fills_size(), 1);
        EXPECT_EQ(rp.fills(0).dst_offset(), t->arena_offset() + 232 * 128);
        EXPECT_EQ(rp.fills(0).bytes(), 24u * 128);
        EXPECT_EQ(rp.fills(0).value(), 0u);
      }
    }
  }
}

TEST(PlanBuilderTest, UntiedLmHeadIsVocabParallel) {
  const ModelConfig c = Dense("llama", 1, 64, 128, 4, 2, 16, 1000, false);
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  const proto::LoadPlan plan = MustPlan(m, Opts(2));
  for (int r = 0; r < 2; ++r) {
    const proto::TensorOut* t = Out(plan.ranks(r), "lm_head.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(OutShape(*t), (Shape{512, 64}));
    Bytes want = RowsOf(m.Src("lm_head.weight"), 128, r * 512, r == 0 ? 512 : 488);
    want.resize(512 * 128, 0);
    EXPECT_EQ(OutBytes(Execute(m, plan, r), *t), want);
  }
}

TEST(PlanBuilderTest, KvHeadsReplicateWhenTpExceedsThem) {
  // 16 heads, 4 kv heads of 16, tp 16: rank t gets q rows [16t, 16t+16) and kv head t / 4.
  const ModelConfig c = Dense("qwen3", 1, 64, 128, 16, 4, 16, 1024, true);
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  const proto::LoadPlan plan = MustPlan(m, Opts(16));
  const Bytes q = m.Src(L(0) + "self_attn.q_proj.weight"),
              k = m.Src(L(0) + "self_attn.k_proj.weight"),
              v = m.Src(L(0) + "self_attn.v_proj.weight");
  const std::uint64_t rb = 64 * 2;
  for (int r = 0; r < 16; ++r) {
    const proto::TensorOut* t = Out(plan.ranks(r), L(0) + "self_attn.qkv_proj.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(OutShape(*t), (Shape{48, 64}));
    const int h = r / 4;
    EXPECT_EQ(
        OutBytes(Execute(m, plan, r), *t),
        Cat({RowsOf(q, rb, 16 * r, 16), RowsOf(k, rb, 16 * h, 16), RowsOf(v, rb, 16 * h, 16)}));
  }
  // tp 8 with 4 kv heads: each kv head on two ranks; tp 2: two heads per rank (plain slicing).
  for (int tp : {2, 8}) {
    const proto::LoadPlan p = MustPlan(m, Opts(tp));
    for (int r = 0; r < tp; ++r) {
      const std::uint64_t qn = 256 / tp;
      const std::uint64_t kv0 = tp <= 4 ? r * (64 / tp) : (r / (tp / 4)) * 16;
      const std::uint64_t kvn = tp <= 4 ? 64 / tp : 16;
      const proto::TensorOut* t = Out(p.ranks(r), L(0) + "self_attn.qkv_proj.weight");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(OutBytes(Execute(m, p, r), *t),
                Cat({RowsOf(q, rb, qn * r, qn), RowsOf(k, rb, kv0, kvn), RowsOf(v, rb, kv0, kvn)}));
    }
  }
  // 12 heads / 4 kv heads: tp 3 splits kv heads unevenly; tp 6 > 4 kv heads is not a multiple.
  // Refused before slicing, naming the config key (planner/model_checks.h).
  const ModelConfig c12 = Dense("qwen3", 1, 64, 192, 12, 4, 16, 1152, true);
  const Mem m12 = MakeMem(c12, DenseSpecs(c12), false);
  for (auto [tp, needle] : std::vector<std::pair<int, std::string>>{
           {3, "tp 3 does not divide num_key_value_heads = 4"},
           {6, "tp 6 is larger than num_key_value_heads = 4 but not a multiple of it"}}) {
    auto p = BuildLoadPlan(m12.ckpt, Opts(tp));
    ASSERT_FALSE(p.ok()) << tp;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find("tp values that work for this model: 1, 2, 4, 12"),
              std::string::npos)
        << p.status().message();
  }
  EXPECT_TRUE(BuildLoadPlan(m12.ckpt, Opts(12)).ok());
}

TEST(PlanBuilderTest, Qwen2FusedBiasFollowsKvReplication) {
  const ModelConfig c = Dense("qwen2", 1, 64, 128, 4, 2, 16, 1024, true);
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  const proto::LoadPlan plan = MustPlan(m, Opts(4));
  const Bytes qb = m.Src(L(0) + "self_attn.q_proj.bias"),
              kb = m.Src(L(0) + "self_attn.k_proj.bias"),
              vb = m.Src(L(0) + "self_attn.v_proj.bias");
  for (int r = 0; r < 4; ++r) {
    const proto::TensorOut* t = Out(plan.ranks(r), L(0) + "self_attn.qkv_proj.bias");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(OutShape(*t), (Shape{48}));
    const int h = r / 2;
    EXPECT_EQ(
        OutBytes(Execute(m, plan, r), *t),
        Cat({RowsOf(qb, 2, 16 * r, 16), RowsOf(kb, 2, 16 * h, 16), RowsOf(vb, 2, 16 * h, 16)}));
  }
}

ModelConfig SmallMoe() {
  ModelConfig c = Dense("qwen3_moe", 2, 64, 96, 4, 2, 16, 1000, false);
  c.num_experts = 8;
  c.moe_intermediate_size = 32;
  c.mlp_only_layers = {1};
  return c;
}

std::string Ex(int l, int e, const char* w) {
  return L(l) + "mlp.experts." + std::to_string(e) + "." + w + "_proj.weight";
}

TEST(PlanBuilderTest, ExpertParallelOwnershipLinearAndRoundRobin) {
  const ModelConfig c = SmallMoe();
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  for (auto placement : {proto::PLACEMENT_LINEAR, proto::PLACEMENT_ROUND_ROBIN}) {
    for (int tp : {1, 2}) {
      SCOPED_TRACE("placement " + std::to_string(placement) + " tp " + std::to_string(tp));
      const proto::LoadPlan plan = MustPlan(m, Opts(tp, proto::LAYOUT_FUSED, 4, placement));
      EXPECT_EQ(plan.topology().world(), 4u);
      EXPECT_EQ(plan.topology().dp(), 4u / tp);
      EXPECT_EQ(plan.topology().ep(), 4u);
      for (int r = 0; r < 4; ++r) {
        const proto::RankPlan& rp = plan.ranks(r);
        EXPECT_EQ(rp.tp_rank(), static_cast<std::uint64_t>(r % tp));
        EXPECT_EQ(rp.dp_rank(), static_cast<std::uint64_t>(r / tp));
        std::vector<int> owned;
        for (int e = 0; e < 8; ++e) {
          if (placement == proto::PLACEMENT_LINEAR ? e / 2 == r : e % 4 == r) owned.push_back(e);
        }
        const proto::TensorOut* w13 = Out(rp, L(0) + "mlp.experts.w13_weight");
        const proto::TensorOut* w2 = Out(rp, L(0) + "mlp.experts.w2_weight");
        ASSERT_NE(w13, nullptr);
        ASSERT_NE(w2, nullptr);
        EXPECT_EQ(OutShape(*w13), (Shape{2, 64, 64}));
        EXPECT_EQ(OutShape(*w2), (Shape{2, 64, 32}));
        const Bytes arena = Execute(m, plan, r);
        Bytes want13, want2;
        for (int e : owned) {
          want13 = Cat({want13, m.Src(Ex(0, e, "gate")), m.Src(Ex(0, e, "up"))});
          want2 = Cat({want2, m.Src(Ex(0, e, "down"))});
        }
        EXPECT_EQ(OutBytes(arena, *w13), want13);
        EXPECT_EQ(OutBytes(arena, *w2), want2);
        // No copy reads a byte of another rank's expert.
        for (int e = 0; e < 8; ++e) {
          if (std::count(owned.begin(), owned.end(), e)) continue;
          for (const char* w : {"gate", "up", "down"}) {
            const TensorEntry& te = m.E(Ex(0, e, w));
            const std::uint64_t lo = m.ckpt.files[0].header.data_start + te.begin,
                                hi = lo + te.bytes();
            for (const auto& cp : rp.copies()) {
              const std::uint64_t end =
                  cp.src_offset() + (cp.rows() - 1) * cp.src_pitch() + cp.width();
              EXPECT_TRUE(end <= lo || cp.src_offset() >= hi)
                  << "rank " << r << " reads expert " << e << " " << w;
            }
          }
        }
        // Attention stays tp-sharded; the dense layer 1 too.
        const proto::TensorOut* gu = Out(rp, L(1) + "mlp.gate_up_proj.weight");
        ASSERT_NE(gu, nullptr);
        EXPECT_EQ(OutShape(*gu), (Shape{2 * 96 / static_cast<std::uint64_t>(tp), 64}));
      }
    }
  }
  // hf layout under EP: only the owned experts, under their own names, whole.
  const proto::LoadPlan hf =
      MustPlan(m, Opts(1, proto::LAYOUT_HF, 4, proto::PLACEMENT_ROUND_ROBIN));
  for (int r = 0; r < 4; ++r) {
    std::set<std::string> experts;
    for (const auto& t : hf.ranks(r).tensors()) {
      if (t.name().find(".experts.") != std::string::npos) experts.insert(t.name());
    }
    std::set<std::string> want;
    for (int e = r; e < 8; e += 4) {
      for (const char* w : {"gate", "up", "down"}) want.insert(Ex(0, e, w));
    }
    EXPECT_EQ(experts, want);
    const Bytes arena = Execute(m, hf, r);
    for (const std::string& n : want) {
      const proto::TensorOut* t = Out(hf.ranks(r), n);
      ASSERT_NE(t, nullptr) << n;
      EXPECT_EQ(OutBytes(arena, *t), m.Src(n));
    }
  }
}

TEST(PlanBuilderTest, ExpertsWithoutEpAreTpSharded) {
  const ModelConfig c = SmallMoe();
  const Mem m = MakeMem(c, DenseSpecs(c), true);
  const proto::LoadPlan plan = MustPlan(m, Opts(2));
  for (int r = 0; r < 2; ++r) {
    const proto::RankPlan& rp = plan.ranks(r);
    const proto::TensorOut* w13 = Out(rp, L(0) + "mlp.experts.w13_weight");
    const proto::TensorOut* w2 = Out(rp, L(0) + "mlp.experts.w2_weight");
    ASSERT_NE(w13, nullptr);
    ASSERT_NE(w2, nullptr);
    EXPECT_EQ(OutShape(*w13), (Shape{8, 32, 64}));
    EXPECT_EQ(OutShape(*w2), (Shape{8, 64, 16}));
    const Bytes arena = Execute(m, plan, r);
    Bytes want13, want2;
    for (int e = 0; e < 8; ++e) {
      want13 = Cat({want13, RowsOf(m.Src(Ex(0, e, "gate")), 128, 16 * r, 16),
                    RowsOf(m.Src(Ex(0, e, "up")), 128, 16 * r, 16)});
      want2 = Cat({want2, ColsOf(m.Src(Ex(0, e, "down")), 64, 32, 2, 16 * r, 16)});
    }
    EXPECT_EQ(OutBytes(arena, *w13), want13);
    EXPECT_EQ(OutBytes(arena, *w2), want2);
    EXPECT_NE(Out(rp, L(0) + "mlp.gate.weight"), nullptr);  // router replicated
  }
}

// A Qwen3-MoE checkpoint whose layer l is sparse ('S': router + experts) or dense ('D') per
// `kinds`, written out by hand rather than from the rule under test.
std::vector<Spec> MoeSpecs(const ModelConfig& c, const std::string& kinds) {
  const std::uint64_t H = c.hidden_size, V = c.vocab_size;
  std::vector<Spec> s = {{"model.embed_tokens.weight", DType::kBF16, {V, H}}};
  for (int l = 0; l < static_cast<int>(kinds.size()); ++l) {
    s.push_back({L(l) + "input_layernorm.weight", DType::kBF16, {H}});
    AddAttention(c, l, &s);
    s.push_back({L(l) + "post_attention_layernorm.weight", DType::kBF16, {H}});
    if (kinds[l] == 'D') {
      AddMlp(L(l) + "mlp.", c.intermediate_size, H, DType::kBF16, &s);
      continue;
    }
    s.push_back({L(l) + "mlp.gate.weight", DType::kBF16, {std::uint64_t(c.num_experts), H}});
    for (int e = 0; e < c.num_experts; ++e) {
      AddMlp(L(l) + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size, H,
             DType::kBF16, &s);
    }
  }
  s.push_back({"model.norm.weight", DType::kBF16, {H}});
  s.push_back({"lm_head.weight", DType::kBF16, {V, H}});
  return s;
}

// vLLM's (and transformers') Qwen3-MoE layers: decoder_sparse_step 2 makes layers 1 and 3 sparse;
// mlp_only_layers [1] makes layer 1 dense. Dense layers come out as gate_up_proj / down_proj,
// sparse ones as router + stacked experts (bytes checked), at tp 1 and 2 and under ep 2.
TEST(PlanBuilderTest, Qwen3MoeSparseStepAndMlpOnlyLayers) {
  struct Case {
    std::int64_t step;
    std::vector<std::int64_t> mlp_only;
    std::string kinds;  // what vLLM builds, by hand
  };
  for (const Case& k : {Case{2, {}, "DSDS"}, Case{1, {1}, "SDS"}, Case{2, {3}, "DSDD"}}) {
    ModelConfig c = SmallMoe();
    c.num_hidden_layers = static_cast<std::int64_t>(k.kinds.size());
    c.decoder_sparse_step = k.step;
    c.mlp_only_layers = k.mlp_only;
    const Mem m = MakeMem(c, MoeSpecs(c, k.kinds), true);
    for (auto [tp, ep] : {std::pair{1, 0}, std::pair{2, 0}, std::pair{1, 2}}) {
      SCOPED_TRACE(k.kinds + " tp " + std::to_string(tp) + " ep " + std::to_string(ep));
      const proto::LoadPlan plan = MustPlan(m, Opts(tp, proto::LAYOUT_FUSED, ep));
      ASSERT_EQ(plan.ranks_size(), ep ? ep : tp);
      for (int r = 0; r < plan.ranks_size(); ++r) {
        const proto::RankPlan& rp = plan.ranks(r);
        const Bytes arena = Execute(m, plan, r);
        for (int l = 0; l < static_cast<int>(k.kinds.size()); ++l) {
          const bool sparse = k.kinds[l] == 'S';
          const proto::TensorOut* gate_up = Out(rp, L(l) + "mlp.gate_up_proj.weight");
          const proto::TensorOut* down = Out(rp, L(l) + "mlp.down_proj.weight");
          const proto::TensorOut* router = Out(rp, L(l) + "mlp.gate.weight");
          const proto::TensorOut* w13 = Out(rp, L(l) + "mlp.experts.w13_weight");
          const proto::TensorOut* w2 = Out(rp, L(l) + "mlp.experts.w2_weight");
          EXPECT_EQ(gate_up == nullptr, sparse) << "layer " << l;
          EXPECT_EQ(down == nullptr, sparse) << "layer " << l;
          EXPECT_EQ(router != nullptr, sparse) << "layer " << l;
          EXPECT_EQ(w13 != nullptr, sparse) << "layer " << l;
          EXPECT_EQ(w2 != nullptr, sparse) << "layer " << l;
          const std::uint64_t tps = static_cast<std::uint64_t>(tp), t = r % tp;
          if (!sparse && gate_up && down) {  // I 96 split over tp: [gate_t; up_t], down cols t
            const std::uint64_t i = 96 / tps;
            EXPECT_EQ(OutShape(*gate_up), (Shape{2 * i, 64}));
            EXPECT_EQ(OutBytes(arena, *gate_up),
                      Cat({RowsOf(m.Src(L(l) + "mlp.gate_proj.weight"), 128, i * t, i),
                           RowsOf(m.Src(L(l) + "mlp.up_proj.weight"), 128, i * t, i)}));
            EXPECT_EQ(OutBytes(arena, *down),
                      ColsOf(m.Src(L(l) + "mlp.down_proj.weight"), 64, 96, 2, i * t, i));
          }
          if (sparse && router && w13) {  // ep 2 linear: rank r owns experts [4r, 4r + 4)
            EXPECT_EQ(OutBytes(arena, *router), m.Src(L(l) + "mlp.gate.weight"));
            const int first = ep ? 4 * r : 0, n = ep ? 4 : 8;
            const std::uint64_t i = ep ? 32 : 32 / tps;
            EXPECT_EQ(OutShape(*w13), (Shape{std::uint64_t(n), 2 * i, 64}));
            Bytes want;
            for (int e = first; e < first + n; ++e) {
              want = Cat({want, RowsOf(m.Src(Ex(l, e, "gate")), 128, ep ? 0 : i * t, i),
                          RowsOf(m.Src(Ex(l, e, "up")), 128, ep ? 0 : i * t, i)});
            }
            EXPECT_EQ(OutBytes(arena, *w13), want);
          }
        }
      }
    }
    // The same checkpoint under a config that gives its layers the other MLP fails the plan,
    // naming the first tensor on the wrong kind of layer.
    ModelConfig wrong = c;
    wrong.decoder_sparse_step = 1;
    wrong.mlp_only_layers = {};
    auto p = BuildLoadPlan(MakeMem(wrong, MoeSpecs(c, k.kinds), false).ckpt, Opts(1));
    ASSERT_FALSE(p.ok()) << k.kinds;
    EXPECT_EQ(p.status().code(), Code::kCorrupt);
    const std::string needle = "a dense-MLP tensor, but config.json makes layer " +
                               std::to_string(k.kinds.find('D')) + " a sparse MoE layer";
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find("model-00001.safetensors"), std::string::npos);
  }
}

TEST(PlanBuilderTest, TopologyErrors) {
  const ModelConfig c = SmallMoe();
  const Mem m = MakeMem(c, DenseSpecs(c), false);
  struct Bad {
    PlanOptions o;
    std::string needle;
  };
  std::vector<Bad> bad;
  bad.push_back({Opts(1, proto::LAYOUT_FUSED, 6), "ep 6 does not divide num_experts = 8"});
  bad.push_back({Opts(4, proto::LAYOUT_FUSED, 2), "tp 4 must divide ep 2"});
  bad.push_back({Opts(0), "tp 0 is out of range: tp must be between 1 and 65536"});
  PlanOptions loc = Opts(2);
  loc.locations = {{0, 0}};
  bad.push_back({loc, "world is 2"});
  bad.push_back({Opts(3), "tp 3 does not divide num_attention_heads = 4"});  // 4 heads
  for (const Bad& b : bad) {
    auto p = BuildLoadPlan(m.ckpt, b.o);
    ASSERT_FALSE(p.ok()) << b.needle;
    EXPECT_NE(p.status().message().find(b.needle), std::string::npos) << p.status().message();
  }
}

TEST(PlanBuilderTest, LocationsAndFilesAreRecorded) {
  const ModelConfig c = SmallLlama();
  const Mem m = MakeMem(c, DenseSpecs(c), false, 400'000);
  PlanOptions o = Opts(2);
  o.dp = 2;
  o.locations = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  const proto::LoadPlan plan = MustPlan(m, o);
  ASSERT_EQ(plan.ranks_size(), 4);
  EXPECT_EQ(plan.topology().nodes(), 2u);
  EXPECT_EQ(plan.model_type(), "llama");
  EXPECT_EQ(plan.model_dir(), "/mem/model");
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(plan.ranks(r).node(), static_cast<std::uint32_t>(r / 2));
    EXPECT_EQ(plan.ranks(r).gpu(), static_cast<std::uint32_t>(r % 2));
    EXPECT_EQ(plan.ranks(r).tp_rank(), static_cast<std::uint64_t>(r % 2));
    EXPECT_EQ(plan.ranks(r).dp_rank(), static_cast<std::uint64_t>(r / 2));
  }
  // dp replicas hold the same tensors at the same offsets and run the same copies.
  for (int r = 0; r < 2; ++r) {
    const auto& a = plan.ranks(r);
    const auto& b = plan.ranks(r + 2);
    ASSERT_EQ(a.tensors_size(), b.tensors_size());
    for (int i = 0; i < a.tensors_size(); ++i) {
      EXPECT_EQ(a.tensors(i).SerializeAsString(), b.tensors(i).SerializeAsString());
    }
    ASSERT_EQ(a.copies_size(), b.copies_size());
    for (int i = 0; i < a.copies_size(); ++i) {
      EXPECT_EQ(a.copies(i).SerializeAsString(), b.copies(i).SerializeAsString());
    }
  }
  EXPECT_NE(plan.ranks(0).copies(0).src_offset(), plan.ranks(1).copies(0).src_offset());
  ASSERT_EQ(plan.files_size(), static_cast<int>(m.ckpt.files.size()));
  for (int f = 0; f < plan.files_size(); ++f) {
    EXPECT_EQ(plan.files(f).path(), m.ckpt.files[f].abs_path);
    EXPECT_EQ(plan.files(f).size(), m.ckpt.files[f].stat.size);
    EXPECT_EQ(plan.files(f).mtime_ns(), m.ckpt.files[f].stat.mtime_ns);
    EXPECT_EQ(plan.files(f).data_start(), m.ckpt.files[f].header.data_start);
  }
  const proto::LoadPlan plain = MustPlan(m, Opts(2));
  EXPECT_EQ(plain.ranks(1).gpu(), 1u);
  EXPECT_EQ(plain.ranks(1).node(), 0u);
}

TEST(PlanBuilderTest, MissingPartOfAFusedGroupIsAnIncompleteCheckpoint) {
  const ModelConfig c = SmallLlama();
  std::vector<Spec> specs = DenseSpecs(c);
  specs.erase(std::remove_if(
                  specs.begin(), specs.end(),
                  [](const Spec& s) { return s.name == "model.layers.1.self_attn.v_proj.weight"; }),
              specs.end());
  const Mem m = MakeMem(c, specs, false);
  // Both layouts: an engine needs v_proj whether or not it is fused.
  for (auto layout : {proto::LAYOUT_FUSED, proto::LAYOUT_HF}) {
    auto p = BuildLoadPlan(m.ckpt, Opts(1, layout));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::kCorrupt);
    EXPECT_NE(p.status().message().find("/mem/model: the checkpoint is incomplete: tensor "
                                        "'model.layers.1.self_attn.v_proj.weight' is missing, "
                                        "which config.json implies (num_hidden_layers = 2)"),
              std::string::npos)
        << p.status().message();
  }
}

TEST(PlanBuilderTest, UnknownTensorIsSkippedOrRefusedAndShapeMismatchFails) {
  const ModelConfig c = SmallLlama();
  std::vector<Spec> specs = DenseSpecs(c);
  specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {8}});
  const Mem m = MakeMem(c, specs, false);
  PlanOptions strict = Opts(1);
  strict.unexpected = UnexpectedTensors::kError;
  auto p = BuildLoadPlan(m.ckpt, strict);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kCorrupt);
  EXPECT_NE(p.status().message().find("1 tensor that no llama rule knows: "
                                      "\"model.layers.0.self_attn.rotary_emb.inv_freq\""),
            std::string::npos)
      << p.status().message();
  // The default (warn) plans without it.
  auto warned = BuildLoadPlan(m.ckpt, Opts(1));
  ASSERT_TRUE(warned.ok()) << warned.status().ToString();
  EXPECT_EQ(Out(warned->ranks(0), "model.layers.0.self_attn.rotary_emb.inv_freq"), nullptr);

  ModelConfig wrong = c;
  wrong.intermediate_size = 256;
  auto q = BuildLoadPlan(MakeMem(wrong, DenseSpecs(c), false).ckpt, Opts(1));
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), Code::kCorrupt);
  EXPECT_NE(q.status().message().find("expected [128, 256]"), std::string::npos)
      << q.status().message();
  EXPECT_NE(q.status().message().find("shape [128, 320]"), std::string::npos);
  EXPECT_NE(q.status().message().find("model-00001.safetensors"), std::string::npos);
}

// The planner's own check of dtype x shape against the byte range, for entries that did not come
// through the safetensors parser (which checks the same): a mismatch names tensor, file, offset.
TEST(PlanBuilderTest, AnEntryWhoseBytesDisagreeWithItsShapeIsCorrupt) {
  const ModelConfig c = SmallLlama();
  Mem m = MakeMem(c, DenseSpecs(c), false);
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const TensorLocation at = m.ckpt.tensors.at(name);
  TensorEntry& e = m.ckpt.files[at.file].header.tensors[at.entry];
  const std::uint64_t want = e.bytes();
  e.end -= 2;
  auto p = BuildLoadPlan(m.ckpt, Opts(1));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kCorrupt);
  const std::string msg = p.status().message();
  EXPECT_NE(msg.find("tensor '" + name + "' in model-00001.safetensors at offset " +
                     std::to_string(e.begin)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("= " + std::to_string(want) + " bytes, but its byte range is " +
                     std::to_string(want - 2) + " bytes"),
            std::string::npos)
      << msg;
}

ModelConfig TinyDeepseek() {
  // H 256, I 512, moe I 256, 8 experts, 4 heads, q_lora 128, kv_lora 128, nope/rope/v 64.
  return DeepseekConfig(3, 256, 512, 256, 8, 4, 128, 128, 64, 64, 64, 1000, 1);
}

TEST(PlanBuilderTest, Fp8ScalesSliceInWholeBlocks) {
  const ModelConfig c = TinyDeepseek();
  const Mem m = MakeMem(c, DeepseekSpecs(c, /*mtp_layer=*/true), true, 600'000);
  const proto::LoadPlan plan = MustPlan(m, Opts(2));
  EXPECT_EQ(Out(plan.ranks(0), L(3) + "eh_proj.weight"), nullptr);  // MTP layer skipped
  const std::string o = L(1) + "self_attn.o_proj.weight";
  for (int r = 0; r < 2; ++r) {
    const proto::RankPlan& rp = plan.ranks(r);
    const Bytes arena = Execute(m, plan, r);
    // o_proj row-parallel: FP8 weight columns [128r, +128), scale columns [r, r+1) of [2, 2].
    const proto::TensorOut* ow = Out(rp, o);
    const proto::TensorOut* os = Out(rp, o + "_scale_inv");
    ASSERT_NE(ow, nullptr);
    ASSERT_NE(os, nullptr);
    EXPECT_EQ(ow->dtype(), "F8_E4M3");
    EXPECT_EQ(OutShape(*os), (Shape{2, 1}));
    EXPECT_EQ(OutBytes(arena, *ow), ColsOf(m.Src(o), 256, 256, 1, 128 * r, 128));
    EXPECT_EQ(OutBytes(arena, *os), ColsOf(m.Src(o + "_scale_inv"), 2, 2, 4, r, 1));
    // Experts, EP off: w13 scale per expert = [gate_scale row r; up_scale row r] of [2, 2].
    const proto::TensorOut* s13 = Out(rp, L(1) + "mlp.experts.w13_weight_scale_inv");
    ASSERT_NE(s13, nullptr);
    EXPECT_EQ(OutShape(*s13), (Shape{8, 2, 2}));
    Bytes want;
    for (int e = 0; e < 8; ++e) {
      want = Cat({want, RowsOf(m.Src(Ex(1, e, "gate") + "_scale_inv"), 8, r, 1),
                  RowsOf(m.Src(Ex(1, e, "up") + "_scale_inv"), 8, r, 1)});
    }
    EXPECT_EQ(OutBytes(arena, *s13), want);
    // fused_qkv_a_proj: replicated, [q_a; kv_a] and their scales [1 + 2, 2].
    const proto::TensorOut* qa = Out(rp, L(2) + "self_attn.fused_qkv_a_proj.weight");
    const proto::TensorOut* qas = Out(rp, L(2) + "self_attn.fused_qkv_a_proj.weight_scale_inv");
    ASSERT_NE(qa, nullptr);
    ASSERT_NE(qas, nullptr);
    EXPECT_EQ(OutShape(*qa), (Shape{320, 256}));
    EXPECT_EQ(OutShape(*qas), (Shape{3, 2}));
    EXPECT_EQ(OutBytes(arena, *qa), Cat({m.Src(L(2) + "self_attn.q_a_proj.weight"),
                                         m.Src(L(2) + "self_attn.kv_a_proj_with_mqa.weight")}));
    EXPECT_EQ(OutBytes(arena, *qas),
              Cat({m.Src(L(2) + "self_attn.q_a_proj.weight_scale_inv"),
                   m.Src(L(2) + "self_attn.kv_a_proj_with_mqa.weight_scale_inv")}));
  }
}

TEST(PlanBuilderTest, Fp8BlockSplitByShardIsANamedError) {
  const ModelConfig c = TinyDeepseek();
  const Mem m = MakeMem(c, DeepseekSpecs(c), false);
  for (auto layout : {proto::LAYOUT_FUSED, proto::LAYOUT_HF}) {
    auto p = BuildLoadPlan(m.ckpt, Opts(4, layout));
    ASSERT_FALSE(p.ok());
    const std::string& msg = p.status().message();
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    // The first FP8 tensor in file order whose shard cuts a block: layer 0's dense down_proj
    // (I 512 / 4 = 128 is whole, so not it) ... o_proj's 256 input columns / 4 = 64 are.
    EXPECT_NE(msg.find("o_proj.weight_scale_inv"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[256, 256]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tp 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("64 of N=256 per rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scale block 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("use a tp that divides N/128 = 2, or --ep for experts"), std::string::npos)
        << msg;
  }
  // Experts only: moe I 256 at tp 4 -> 64 rows of a 128 block. With EP they are whole.
  ModelConfig c2 = DeepseekConfig(2, 512, 512, 256, 8, 8, 128, 128, 64, 64, 64, 1024, 1);
  c2.n_shared_experts = 2;  // shared experts 512 rows: whole blocks at tp 4
  const Mem m2 = MakeMem(c2, DeepseekSpecs(c2), false);
  auto p = BuildLoadPlan(m2.ckpt, Opts(4));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("mlp.experts."), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("or --ep for experts"), std::string::npos);
  auto ep = BuildLoadPlan(m2.ckpt, Opts(4, proto::LAYOUT_FUSED, 4));
  EXPECT_TRUE(ep.ok()) << ep.status().ToString();
  if (ep.ok()) CheckInvariants(*ep);
}

// DeepSeek-V3 / R1 shape: 61 layers (3 dense), 256 routed experts + 1 shared, FP8 128x128.
ModelConfig DeepseekV3() {
  return DeepseekConfig(61, 7168, 18432, 2048, 256, 128, 1536, 512, 128, 64, 128, 129280, 3);
}

TEST(PlanBuilderTest, DeepseekV3ShapedPlanIsCompact) {
  const ModelConfig c = DeepseekV3();
  const Mem m = MakeMem(c, DeepseekSpecs(c), false, 5'000'000'000ull);
  EXPECT_GT(m.ckpt.tensors.size(), 90'000u);
  EXPECT_GT(m.ckpt.files.size(), 100u);
  struct Case {
    const char* what;
    PlanOptions o;
    std::size_t max_bytes;
  };
  const std::vector<Case> cases = {
      {"tp 8 + ep 8, fused", Opts(8, proto::LAYOUT_FUSED, 8), 4u << 20},
      {"tp 1 + ep 8 (dp 8), fused", Opts(1, proto::LAYOUT_FUSED, 8), 4u << 20},
      {"tp 8 + ep 8, hf", Opts(8, proto::LAYOUT_HF, 8), 8u << 20},
      {"tp 8 (experts tp-sharded), fused", Opts(8), 32u << 20},
  };
  for (const Case& k : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto p = BuildLoadPlan(m.ckpt, k.o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const std::size_t bytes = p->ByteSizeLong();
    std::size_t copies = 0;
    for (const auto& r : p->ranks()) copies += r.copies_size();
    std::printf("  DeepSeek-V3 %-34s %8zu KiB serialized, %7zu copies, built in %.3f s\n", k.what,
                bytes >> 10, copies, s);
    EXPECT_LE(bytes, k.max_bytes) << k.what;
    // CI never asserts a speed (the time above is printed for people); this only catches a plan
    // builder that went quadratic and would stall a 94k-tensor checkpoint.
    EXPECT_LT(s, 60.0) << k.what;
    EXPECT_EQ(p->ranks_size(), 8);
    // Every rank gets 32 of the 256 experts of each of the 58 MoE layers under EP.
    if (k.o.ep == 8 && k.o.layout == proto::LAYOUT_FUSED) {
      const proto::TensorOut* w13 = Out(p->ranks(5), L(60) + "mlp.experts.w13_weight");
      ASSERT_NE(w13, nullptr);
      EXPECT_EQ(OutShape(*w13), (Shape{32, 4096, 7168}));
    }
  }
  // Per-rank payload at tp 8 + ep 8: total / 8 for experts, 1/8 for tp-sharded, replicated rest.
  auto p = BuildLoadPlan(m.ckpt, Opts(8, proto::LAYOUT_FUSED, 8));
  ASSERT_TRUE(p.ok());
  std::uint64_t sum = 0;
  for (const auto& r : p->ranks()) sum += r.payload_bytes();
  EXPECT_GT(sum, m.ckpt.tensor_bytes);  // replicated pieces
  EXPECT_LT(sum, m.ckpt.tensor_bytes * 11 / 10);
}

TEST(PlanBuilderTest, Qwen3_4bShapeCountsAndTp2Bytes) {
  const ModelConfig c = Dense("qwen3", 36, 2560, 9728, 32, 8, 128, 151936, true);
  const Mem m = MakeMem(c, DenseSpecs(c), false, 4'000'000'000ull);
  const std::uint64_t H = 2560, I = 9728, Q = 32 * 128, KV = 8 * 128, V = 151936, hd = 128;
  {
    const proto::LoadPlan plan = MustPlan(m, Opts(1, proto::LAYOUT_HF));
    EXPECT_EQ(plan.source_tensors(), 398u);
    EXPECT_EQ(plan.source_bytes(), 8'044'936'192ull);
    EXPECT_EQ(plan.ranks(0).tensors_size(), 398);
    EXPECT_EQ(plan.ranks(0).payload_bytes(), 8'044'936'192ull);
  }
  {
    const proto::LoadPlan plan = MustPlan(m, Opts(1));
    EXPECT_EQ(plan.ranks(0).tensors_size(), 36 * 8 + 2);  // qkv, o, 2 qk norms, 2 norms, gu, down
    EXPECT_EQ(plan.ranks(0).payload_bytes(), 8'044'936'192ull);
  }
  // tp 2: q, k, v, gate, up halved by rows; o, down halved by columns; norms whole; vocab half.
  const std::uint64_t per_layer = 2 * ((Q / 2) * H + 2 * (KV / 2) * H + H * (Q / 2) +
                                       2 * (I / 2) * H + H * (I / 2) + 2 * H + 2 * hd);
  const std::uint64_t want = 36 * per_layer + 2 * (V / 2) * H + 2 * H;
  // = (8,044,936,192 - 392,192 replicated) / 2 + 392,192.
  EXPECT_EQ(want, 4'022'664'192ull);
  for (auto layout : {proto::LAYOUT_FUSED, proto::LAYOUT_HF}) {
    const proto::LoadPlan plan = MustPlan(m, Opts(2, layout));
    for (const auto& r : plan.ranks()) EXPECT_EQ(r.payload_bytes(), want);
  }
}

TEST(PlanBuilderTest, SummaryTableAndJson) {
  const ModelConfig c = SmallMoe();
  const Mem m = MakeMem(c, DenseSpecs(c), false, 300'000);
  ASSERT_GT(m.ckpt.files.size(), 1u);
  const proto::LoadPlan plan = MustPlan(m, Opts(2, proto::LAYOUT_FUSED, 4));
  const nlohmann::json j = PlanToJson(plan);
  EXPECT_EQ(j.at("source_tensors").get<std::uint64_t>(), m.ckpt.tensors.size());
  EXPECT_EQ(j.at("source_bytes").get<std::uint64_t>(), m.ckpt.tensor_bytes);
  ASSERT_EQ(j.at("ranks").size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const auto& jr = j.at("ranks")[r];
    const auto& rp = plan.ranks(r);
    EXPECT_EQ(jr.at("rank").get<int>(), r);
    EXPECT_EQ(jr.at("tensors").get<int>(), rp.tensors_size());
    EXPECT_EQ(jr.at("bytes").get<std::uint64_t>(), rp.payload_bytes());
    EXPECT_EQ(jr.at("copies").get<int>(), rp.copies_size());
    EXPECT_EQ(jr.at("fills").get<int>(), rp.fills_size());
    EXPECT_EQ(jr.at("tp_rank").get<int>(), r % 2);
    std::set<std::uint32_t> files;
    std::uint64_t moved = 0;
    for (const auto& cp : rp.copies()) {
      files.insert(cp.file());
      moved += cp.width() * cp.rows();
    }
    EXPECT_EQ(jr.at("files").get<std::size_t>(), files.size());
    std::uint64_t filled = 0;
    for (const auto& f : rp.fills()) filled += f.bytes();
    EXPECT_EQ(moved + filled, rp.payload_bytes());  // exact tiling (CheckInvariants)
    EXPECT_EQ(jr.at("copy_bytes").get<std::uint64_t>(), moved);
  }
  const std::string table = FormatPlanTable(plan);
  EXPECT_NE(table.find("qwen3_moe"), std::string::npos) << table;
  EXPECT_NE(table.find("total"), std::string::npos) << table;
  EXPECT_NE(table.find(std::to_string(plan.ranks(3).payload_bytes())), std::string::npos) << table;
  // Header, column names, 4 ranks, total, and the dedup decision when the plan states one.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'),
            2 + 4 + 1 + (plan.dedup_reason().empty() ? 0 : 1));
}

// A packed plan says so: how many tensors are coded and their stored bytes against their
// original ones, in the table and the JSON (the rank rows stay the tensors' logical bytes).
TEST(PlanSummary, APackedPlanStatesItsStoredBytes) {
  proto::LoadPlan plan;
  plan.set_model_type("qwen3");
  plan.add_ranks();
  const std::uint64_t logical[] = {1000, 3000};
  const std::vector<std::vector<std::uint64_t>> streams = {{600, 100}, {2000}};
  for (int i = 0; i < 2; ++i) {
    proto::PackedTensor* t = plan.add_packed();
    t->set_name("t" + std::to_string(i));
    t->set_bytes(logical[i]);
    for (std::uint64_t b : streams[i]) t->add_streams()->set_bytes(b);
  }
  const std::string table = FormatPlanTable(plan);
  EXPECT_NE(table.find("packed: 2 tensors stored as codec streams, 2.64 KiB for their 3.91 KiB "
                       "(67.5%)"),
            std::string::npos)
      << table;
  const nlohmann::json j = PlanToJson(plan);
  EXPECT_EQ(j.at("packed").at("tensors").get<std::uint64_t>(), 2u);
  EXPECT_EQ(j.at("packed").at("logical_bytes").get<std::uint64_t>(), 4000u);
  EXPECT_EQ(j.at("packed").at("stored_bytes").get<std::uint64_t>(), 2700u);

  plan.clear_packed();  // a plain plan has neither
  EXPECT_EQ(FormatPlanTable(plan).find("packed:"), std::string::npos);
  EXPECT_FALSE(PlanToJson(plan).contains("packed"));
}

}  // namespace
}  // namespace hoist::planner
