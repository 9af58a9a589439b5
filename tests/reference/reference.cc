// The independent sharding reference (see reference.h). Deliberately simple: whole tensors,
// row and element loops, no cleverness.
#include "tests/reference/reference.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <stdexcept>

namespace hoist::testref {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void Fail(const std::string& msg) { throw std::runtime_error("reference: " + msg); }

std::uint64_t ElemSize(const std::string& dtype) {
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2" || dtype == "F8_E8M0") {
    return 1;
  }
  if (dtype == "I16" || dtype == "U16" || dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "I32" || dtype == "U32" || dtype == "F32") return 4;
  if (dtype == "I64" || dtype == "U64" || dtype == "F64") return 8;
  Fail("unknown dtype " + dtype);
}

std::uint64_t NumElems(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string ShapeStr(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- A tiny safetensors reader (independent of planner/). ----

struct Entry {
  std::string path;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;  // absolute in the file
  std::uint64_t bytes = 0;
};

class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir) {
    const fs::path d(dir);
    config_ = ReadJson(d / "config.json");
    std::set<std::string> files;
    if (fs::exists(d / "model.safetensors.index.json")) {
      nlohmann::json index = ReadJson(d / "model.safetensors.index.json");
      for (const auto& [name, file] : index.at("weight_map").items()) {
        files.insert(file.get<std::string>());
      }
    } else {
      files.insert("model.safetensors");
    }
    for (const auto& f : files) ReadHeader((d / f).string());
    if (config_.contains("text_config")) TakeTextModel();
    if (config_.value("model_type", "") == "deepseek_v4") TakeV4ReleaseNames();
  }

  // DeepSeek-V4 as transformers' save_pretrained writes it (model.layers.L..., model.embed_tokens,
  // model.norm, model.hc_head.hc_fn, attn.norm for the KV norm) under the Hub release's names
  // (layers.L..., embed, norm, hc_head_fn, attn.kv_norm), which the V4 rules below use.
  void TakeV4ReleaseNames() {
    std::map<std::string, Entry> kept;
    for (auto& [name, e] : entries_) {
      std::string n = name;
      if (n == "model.embed_tokens.weight") n = "embed.weight";
      if (n == "model.norm.weight") n = "norm.weight";
      if (n.rfind("model.hc_head.hc_", 0) == 0) n = "hc_head_" + n.substr(17);
      if (n.rfind("model.layers.", 0) == 0) n = n.substr(6);
      const std::string kv = ".attn.norm.weight";
      if (n.size() > kv.size() && n.compare(n.size() - kv.size(), kv.size(), kv) == 0) {
        n = n.substr(0, n.size() - kv.size()) + ".attn.kv_norm.weight";
      }
      if (!kept.emplace(n, e).second) Fail("two tensors are the release's " + n);
    }
    entries_ = std::move(kept);
  }

  // A vision-language checkpoint: the text model's config and tensors under its own names
  // (model.X), the vision tower and projector dropped.
  void TakeTextModel() {
    nlohmann::json text = config_["text_config"];
    for (const char* key : {"architectures", "tie_word_embeddings", "quantization_config"}) {
      if (config_.contains(key) && !config_[key].is_null()) text[key] = config_[key];
    }
    config_ = text;
    std::map<std::string, Entry> kept;
    for (auto& [name, e] : entries_) {
      std::string n = name;
      bool vision = false;
      for (const char* v : {"vision_tower.", "multi_modal_projector.", "model.visual.",
                            "model.vision_tower.", "model.multi_modal_projector."}) {
        vision = vision || n.rfind(v, 0) == 0;
      }
      if (vision) continue;
      if (n.rfind("model.language_model.", 0) == 0) n = "model." + n.substr(21);
      if (n.rfind("language_model.model.", 0) == 0) n = "model." + n.substr(21);
      if (n.rfind("language_model.lm_head.", 0) == 0) n = "lm_head." + n.substr(23);
      if (!kept.emplace(n, e).second) Fail("two tensors are the text model's " + n);
    }
    entries_ = std::move(kept);
  }

  const nlohmann::json& config() const { return config_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  bool Has(const std::string& name) const { return entries_.count(name) > 0; }
  const Entry& At(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) Fail("tensor " + name + " not in the checkpoint");
    return it->second;
  }

  RefTensor Load(const std::string& name) const {
    const Entry& e = At(name);
    RefTensor t{e.dtype, e.shape, std::vector<std::uint8_t>(e.bytes)};
    std::ifstream in(e.path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(e.offset));
    in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(e.bytes));
    if (!in) {
      Fail(e.path + ": short read of tensor " + name + " at offset " + std::to_string(e.offset));
    }
    return t;
  }

 private:
  static nlohmann::json ReadJson(const fs::path& p) {
    std::ifstream in(p);
    if (!in) Fail(p.string() + ": cannot open");
    try {
      return nlohmann::json::parse(in);
    } catch (const std::exception& ex) {
      Fail(p.string() + ": " + ex.what());
    }
  }

  void ReadHeader(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) Fail(path + ": cannot open");
    unsigned char len_bytes[8];
    in.read(reinterpret_cast<char*>(len_bytes), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
    const std::uint64_t file_size = fs::file_size(path);
    if (!in || n > file_size - 8) Fail(path + ": bad header length " + std::to_string(n));
    std::string text(n, '\0');
    in.read(text.data(), static_cast<std::streamsize>(n));
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(text);
    } catch (const std::exception& ex) {
      Fail(path + ": header: " + ex.what());
    }
    for (const auto& [name, v] : h.items()) {
      if (name == "__metadata__") continue;
      Entry e;
      e.path = path;
      e.dtype = v.at("dtype").get<std::string>();
      e.shape = v.at("shape").get<std::vector<std::uint64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<std::uint64_t>>();
      e.offset = 8 + n + off.at(0);
      e.bytes = off.at(1) - off.at(0);
      if (e.bytes != NumElems(e.shape) * ElemSize(e.dtype) || e.offset + e.bytes > file_size) {
        Fail(path + ": tensor " + name + " has inconsistent offsets");
      }
      if (!entries_.emplace(name, e).second) Fail(path + ": duplicate tensor " + name);
    }
  }

  nlohmann::json config_;
  std::map<std::string, Entry> entries_;
};

// ---- Plain tensor operations. ----

std::uint64_t RowBytes(const RefTensor& t) {
  std::uint64_t b = ElemSize(t.dtype);
  for (std::size_t i = 1; i < t.shape.size(); ++i) b *= t.shape[i];
  return b;
}

// Rows [r0, r1) of dimension 0.
RefTensor SliceRows(const RefTensor& t, std::uint64_t r0, std::uint64_t r1) {
  if (t.shape.empty() || r0 > r1 || r1 > t.shape[0]) Fail("bad row slice");
  RefTensor out{t.dtype, t.shape, {}};
  out.shape[0] = r1 - r0;
  const std::uint64_t rb = RowBytes(t);
  for (std::uint64_t r = r0; r < r1; ++r) {
    for (std::uint64_t b = 0; b < rb; ++b) out.data.push_back(t.data[r * rb + b]);
  }
  return out;
}

// Columns [c0, c1) of a 2-D tensor.
RefTensor SliceCols(const RefTensor& t, std::uint64_t c0, std::uint64_t c1) {
  if (t.shape.size() != 2 || c0 > c1 || c1 > t.shape[1]) Fail("bad column slice");
  const std::uint64_t es = ElemSize(t.dtype), rows = t.shape[0], cols = t.shape[1];
  RefTensor out{t.dtype, {rows, c1 - c0}, {}};
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t c = c0; c < c1; ++c) {
      for (std::uint64_t b = 0; b < es; ++b) out.data.push_back(t.data[(r * cols + c) * es + b]);
    }
  }
  return out;
}

// [a; b; ...] along dimension 0 (scalars line up as a vector, as vLLM's per-partition scales).
RefTensor ConcatRows(const std::vector<const RefTensor*>& parts) {
  if (parts.at(0)->shape.empty()) {
    RefTensor out{parts[0]->dtype, {0}, {}};
    for (const RefTensor* p : parts) {
      if (!p->shape.empty() || p->dtype != out.dtype) Fail("concat of mismatched scalars");
      out.shape[0] += 1;
      out.data.insert(out.data.end(), p->data.begin(), p->data.end());
    }
    return out;
  }
  RefTensor out{parts.at(0)->dtype, parts.at(0)->shape, {}};
  out.shape[0] = 0;
  for (const RefTensor* p : parts) {
    if (p->dtype != out.dtype || p->shape.size() != out.shape.size() ||
        !std::equal(p->shape.begin() + 1, p->shape.end(), out.shape.begin() + 1)) {
      Fail("concat of mismatched tensors");
    }
    out.shape[0] += p->shape[0];
    out.data.insert(out.data.end(), p->data.begin(), p->data.end());
  }
  return out;
}

// [a, b, ...] joined along dimension d (each outer index takes a's slab, then b's, ...).
RefTensor ConcatDim(const std::vector<const RefTensor*>& parts, std::size_t d) {
  if (d == 0) return ConcatRows(parts);
  const RefTensor& a = *parts.at(0);
  if (d >= a.shape.size()) Fail("concat along a dimension the tensors do not have");
  RefTensor out{a.dtype, a.shape, {}};
  out.shape[d] = 0;
  std::uint64_t outer = 1, inner = ElemSize(a.dtype);
  for (std::size_t i = 0; i < a.shape.size(); ++i) {
    if (i < d) outer *= a.shape[i];
    if (i > d) inner *= a.shape[i];
  }
  for (const RefTensor* p : parts) {
    bool same = p->dtype == a.dtype && p->shape.size() == a.shape.size();
    for (std::size_t i = 0; same && i < a.shape.size(); ++i) {
      same = i == d || p->shape[i] == a.shape[i];
    }
    if (!same) Fail("concat of mismatched tensors");
    out.shape[d] += p->shape[d];
  }
  for (std::uint64_t o = 0; o < outer; ++o) {
    for (const RefTensor* p : parts) {
      const std::uint64_t slab = p->shape[d] * inner;
      const auto first = p->data.begin() + static_cast<std::ptrdiff_t>(o * slab);
      out.data.insert(out.data.end(), first, first + static_cast<std::ptrdiff_t>(slab));
    }
  }
  return out;
}

// A new leading dimension.
RefTensor Stack(const std::vector<RefTensor>& parts) {
  RefTensor out{parts.at(0).dtype, parts.at(0).shape, {}};
  out.shape.insert(out.shape.begin(), parts.size());
  for (const RefTensor& p : parts) {
    if (p.dtype != out.dtype || p.shape != parts[0].shape) Fail("stack of mismatched tensors");
    out.data.insert(out.data.end(), p.data.begin(), p.data.end());
  }
  return out;
}

// Appends zero rows up to `rows`.
RefTensor PadRows(const RefTensor& t, std::uint64_t rows) {
  RefTensor out = t;
  out.shape[0] = rows;
  out.data.resize(rows * RowBytes(t), 0);
  return out;
}

// ---- Roles. ----

enum class Role { kColumn, kRow, kVocab, kReplicated, kParts };

struct Name {
  std::string module;  // the component before the parameter, e.g. "q_proj"
  std::string param;   // "weight", "bias", "weight_scale_inv", "e_score_correction_bias"
};

Name SplitName(const std::string& name) {
  const auto last = name.rfind('.');
  if (last == std::string::npos) Fail("tensor name without a module: " + name);
  const auto prev = name.rfind('.', last - 1);
  const std::size_t begin = prev == std::string::npos ? 0 : prev + 1;
  return {name.substr(begin, last - begin), name.substr(last + 1)};
}

// The role of a weight or bias (not a scale, not a routed expert). `norms_split`: MiniMax-M2's
// q_norm / k_norm span all heads and split like q / k.
Role RoleOf(const std::string& name, bool norms_split) {
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return Role::kVocab;
  const Name n = SplitName(name);
  if (n.param == "e_score_correction_bias") return Role::kReplicated;
  if (n.param == "A_log" || n.param == "dt_bias") return Role::kColumn;  // per value head
  if (n.param == "sinks") return Role::kColumn;                          // gpt_oss: per q head
  static const std::set<std::string> kColumn = {
      "q_proj",    "k_proj",       "v_proj",     "gate_proj", "up_proj",   "q_b_proj",
      "kv_b_proj", "in_proj_qkvz", "in_proj_ba", "in_proj_z", "in_proj_b", "in_proj_a"};
  static const std::set<std::string> kRow = {"o_proj", "down_proj", "out_proj"};
  static const std::set<std::string> kRepl = {
      "gate", "q_a_proj", "kv_a_proj_with_mqa", "shared_expert_gate",
      "wq_b", "wk",       "weights_proj",       "router"};
  // Fused on disk: cut into parts, each sharded (phi3 qkv_proj / gate_up_proj, linear attention).
  static const std::set<std::string> kParts = {"qkv_proj", "gate_up_proj", "conv1d", "in_proj_qkv"};
  if (norms_split && (n.module == "q_norm" || n.module == "k_norm")) return Role::kColumn;
  if (kColumn.count(n.module)) return Role::kColumn;
  if (kParts.count(n.module)) return Role::kParts;
  if (kRow.count(n.module)) return n.param == "bias" ? Role::kReplicated : Role::kRow;
  if (kRepl.count(n.module) || n.module.find("norm") != std::string::npos) {
    return Role::kReplicated;
  }
  Fail("no sharding rule for tensor " + name);
}

const std::string kScaleSuffix = "_scale_inv";

bool IsScale(const std::string& name) {
  return name.size() > kScaleSuffix.size() &&
         name.compare(name.size() - kScaleSuffix.size(), kScaleSuffix.size(), kScaleSuffix) == 0;
}

std::string WeightOf(const std::string& scale_name) {
  return scale_name.substr(0, scale_name.size() - kScaleSuffix.size());
}

struct Expert {
  std::string layer_prefix;  // "model.layers.L.mlp.experts." (Mixtral: ".block_sparse_moe.")
  std::uint64_t index = 0;
  std::string proj;    // gate_proj / up_proj / down_proj (Mixtral's w1 / w3 / w2 renamed so)
  std::string param;   // weight / weight_scale_inv
  std::string stored;  // the name's own projection (w1 for a Mixtral gate)
};

bool ParseExpert(const std::string& name, Expert* out) {
  static const std::regex kRe(
      R"(^(model\.layers\.\d+\.(?:mlp|block_sparse_moe|feed_forward)\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.([a-z_0-9]+)$)");
  std::smatch m;
  if (!std::regex_match(name, m, kRe)) return false;
  out->layer_prefix = m[1];
  out->index = std::stoull(m[2]);
  out->stored = m[3];
  const std::string p = m[3];
  out->proj = p == "w1" ? "gate_proj" : p == "w3" ? "up_proj" : p == "w2" ? "down_proj" : p;
  out->param = m[4];
  return true;
}

std::int64_t CfgInt(const nlohmann::json& c, const char* key, std::int64_t dflt) {
  auto it = c.find(key);
  if (it == c.end() || !it->is_number_integer()) return dflt;
  return it->get<std::int64_t>();
}

// ---- Quantized linear layers: GPTQ, AWQ, compressed-tensors WNA16 and NVFP4, ModelOpt NVFP4.

enum class QFormat { kNone, kGptq, kAwq, kWna16, kNvfp4 };  // kNone: unquantized, FP8, MXFP4

struct QuantSpec {
  QFormat format = QFormat::kNone;
  std::uint64_t pack = 1;   // values per int32: 32 / bits
  std::uint64_t group = 0;  // group size along K; 0: one group over K (channelwise)
  bool act_order = false;   // GPTQ desc_act, compressed-tensors actorder "group"
  bool modelopt = false;    // NVFP4: ModelOpt (X.weight) or compressed-tensors (X.weight_packed)
};

// The group size from a JSON value: null or -1 is one group over K (0 here).
std::uint64_t GroupOf(const nlohmann::json& v) {
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) return 0;
  return v.get<std::uint64_t>();
}

QuantSpec ParseQuantSpec(const nlohmann::json& config) {
  QuantSpec s;
  const auto it = config.find("quantization_config");
  if (it == config.end() || !it->is_object()) return s;
  const nlohmann::json& q = *it;
  const std::string method = q.value("quant_method", "");
  const auto bits = [](const nlohmann::json& j, const char* key) {
    const std::int64_t b = CfgInt(j, key, 0);
    if (b != 4 && b != 8) Fail(std::string("quantization_config ") + key + " must be 4 or 8");
    return static_cast<std::uint64_t>(32 / b);
  };
  if (method == "gptq" || method == "awq") {
    s.format = method == "gptq" ? QFormat::kGptq : QFormat::kAwq;
    s.pack = bits(q, "bits");
    s.group = GroupOf(q.value("group_size", nlohmann::json()));
    s.act_order = method == "gptq" && q.value("desc_act", false);
  } else if (method == "modelopt" && q.value("quant_algo", "") == "NVFP4") {
    s.format = QFormat::kNvfp4;
    s.modelopt = true;
  } else if (method == "compressed-tensors") {
    const std::string fmt = q.value("format", "");
    if (fmt == "nvfp4-pack-quantized") s.format = QFormat::kNvfp4;
    if (fmt != "pack-quantized") return s;
    const auto groups = q.at("config_groups");
    if (groups.size() != 1) Fail("compressed-tensors: one config group expected");
    const nlohmann::json& w = groups.begin().value().at("weights");
    s.format = QFormat::kWna16;
    s.pack = bits(w, "num_bits");
    s.group =
        w.value("strategy", "") == "channel" ? 0 : GroupOf(w.value("group_size", nlohmann::json()));
    s.act_order = w.contains("actorder") && w["actorder"] == "group";
  }
  return s;
}

// A dimension of a quantized layer's tensor: the weight's output (N) or input (K) dimension
// divided by `div`, K in scale groups (the group dim: K / group, 1 when channelwise), or none.
enum class Axis { kNone, kN, kK, kGroup };

struct QDim {
  Axis axis;
  std::uint64_t div;
};

// The dims of parameter `param` of a quantized linear layer in format `s` (false: not one of
// its parameters). Scalars ([] or [1]) have no dims.
bool QuantParamDims(const QuantSpec& s, const std::string& param, std::vector<QDim>* dims) {
  const std::uint64_t p = s.pack;
  const QDim n{Axis::kN, 1}, k{Axis::kK, 1}, g{Axis::kGroup, 1};
  std::map<std::string, std::vector<QDim>> table;
  switch (s.format) {
    case QFormat::kGptq:
      table = {{"qweight", {{Axis::kK, p}, n}},
               {"qzeros", {g, {Axis::kN, p}}},
               {"scales", {g, n}},
               {"g_idx", {k}}};
      break;
    case QFormat::kAwq:
      table = {{"qweight", {k, {Axis::kN, p}}}, {"qzeros", {g, {Axis::kN, p}}}, {"scales", {g, n}}};
      break;
    case QFormat::kWna16:
      table = {{"weight_packed", {n, {Axis::kK, p}}},
               {"weight_scale", {n, g}},
               {"weight_zero_point", {{Axis::kN, p}, g}},
               {"weight_g_idx", {k}},
               {"weight_shape", {{Axis::kNone, 1}}}};
      break;
    case QFormat::kNvfp4:
      table = {{s.modelopt ? "weight" : "weight_packed", {n, {Axis::kK, 2}}},
               {"weight_scale", {n, {Axis::kK, 16}}}};
      for (const char* scalar : {"weight_scale_2", "input_scale"}) {
        if (s.modelopt) table[scalar] = {};
      }
      for (const char* scalar : {"weight_global_scale", "input_global_scale"}) {
        if (!s.modelopt) table[scalar] = {};
      }
      break;
    case QFormat::kNone:
      return false;
  }
  auto it = table.find(param);
  if (it == table.end()) return false;
  *dims = it->second;
  return true;
}

// The parameter holding a quantized layer's packed weight, from which N and K follow.
std::string PrimaryParam(const QuantSpec& s) {
  if (s.format == QFormat::kGptq || s.format == QFormat::kAwq) return "qweight";
  return s.format == QFormat::kNvfp4 && s.modelopt ? "weight" : "weight_packed";
}

class Builder {
 public:
  Builder(const Checkpoint& ck, const RefOptions& o) : ck_(ck), o_(o) {
    const auto& c = ck.config();
    if (o.tp < 1) Fail("tp must be >= 1");
    if (o.ep < 0 || o.rank < 0) Fail("ep and rank must be >= 0");
    if (o.ep > 0 && (o.ep % o.tp != 0 || o.rank >= o.ep)) {
      Fail("with ep > 0 the world is ep: ep % tp must be 0 and rank < ep");
    }
    tp_ = static_cast<std::uint64_t>(o.tp);
    t_ = static_cast<std::uint64_t>(o.rank % o.tp);
    const std::string model_type = c.value("model_type", "");
    const std::int64_t hidden = CfgInt(c, "hidden_size", 0);
    heads_ = static_cast<std::uint64_t>(CfgInt(c, "num_attention_heads", 0));
    kv_heads_ = static_cast<std::uint64_t>(CfgInt(c, "num_key_value_heads", heads_));
    head_dim_ = static_cast<std::uint64_t>(CfgInt(c, "head_dim", 0));
    if (model_type == "qwen2" || head_dim_ == 0) head_dim_ = heads_ ? hidden / heads_ : 0;
    tied_ = c.value("tie_word_embeddings", false);
    llama4_ = model_type == "llama4_text";
    experts_ = static_cast<std::uint64_t>(
        CfgInt(c, "num_experts", CfgInt(c, "n_routed_experts", CfgInt(c, "num_local_experts", 0))));
    norms_split_ = model_type == "minimax_m2";
    key_dim_ = static_cast<std::uint64_t>(CfgInt(c, "linear_num_key_heads", 0) *
                                          CfgInt(c, "linear_key_head_dim", 0));
    value_dim_ = static_cast<std::uint64_t>(CfgInt(c, "linear_num_value_heads", 0) *
                                            CfgInt(c, "linear_value_head_dim", 0));
    if (c.contains("quantization_config") && c["quantization_config"].is_object() &&
        c["quantization_config"].contains("weight_block_size")) {
      const auto bs = c["quantization_config"]["weight_block_size"];
      bn_ = bs.at(0).get<std::uint64_t>();
      bk_ = bs.at(1).get<std::uint64_t>();
    }
    qs_ = ParseQuantSpec(c);
  }

  std::map<std::string, RefTensor> Build() {
    std::map<std::string, RefTensor> out;
    for (const auto& [name, entry] : ck_.entries()) {
      if (name == "lm_head.weight" && tied_) continue;  // vLLM skips it
      if (Llama4Experts(name)) {  // vLLM: w13 [E, 2I, H] (gate rows, then up), w2 [E, H, I]
        if (!o_.fused) {
          out[name] = ShardLlama4Experts(name);
        } else {
          const std::string layer = name.substr(0, name.rfind('.'));
          out[layer + (name.ends_with("down_proj") ? ".w2_weight" : ".w13_weight")] =
              SwapLastTwo(ShardLlama4Experts(name));
        }
        continue;
      }
      std::string fused_name;
      if (GptOssExperts(name, &fused_name)) {
        if (o_.fused && fused_name.empty()) {  // BF16: vLLM's narrow(...).permute(0, 2, 1)
          const std::string layer = name.substr(0, name.rfind('.'));
          out[layer + (name.ends_with("down_proj") ? ".w2_weight" : ".w13_weight")] =
              SwapLastTwo(ShardGptOssExperts(name));
        } else {
          out[o_.fused && !fused_name.empty() ? fused_name : name] = ShardGptOssExperts(name);
        }
        continue;
      }
      Expert ex;
      if (ParseExpert(name, &ex) && o_.ep > 0) {
        if (Owns(ex.index)) out[name] = ck_.Load(name);
        continue;
      }
      out[name] = Shard(name);
      if (o_.fused && llama4_ &&
          (name.ends_with("self_attn.q_proj.weight") ||
           name.ends_with("self_attn.k_proj.weight"))) {
        out[name] = DeinterleaveHeads(out[name], head_dim_);  // whole heads: after the shard
      }
    }
    if (o_.fused) Fuse(&out);
    return out;
  }

 private:
  // gpt_oss: every expert of a layer in one tensor. True for such a name, with the name vLLM
  // gives it as stored (empty: BF16 weights, which vLLM transposes into w13_weight / w2_weight).
  static bool GptOssExperts(const std::string& name, std::string* fused) {
    static const std::regex kRe(
        R"(^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj|gate_up_proj_bias|down_proj_bias|gate_up_proj_blocks|gate_up_proj_scales|down_proj_blocks|down_proj_scales)$)");
    std::smatch m;
    if (!std::regex_match(name, m, kRe)) return false;
    static const std::map<std::string, std::string> kVllm = {
        {"gate_up_proj_bias", "w13_bias"},     {"down_proj_bias", "w2_bias"},
        {"gate_up_proj_blocks", "w13_weight"}, {"gate_up_proj_scales", "w13_weight_scale"},
        {"down_proj_blocks", "w2_weight"},     {"down_proj_scales", "w2_weight_scale"}};
    auto it = kVllm.find(m[2]);
    *fused = it == kVllm.end() ? "" : m[1].str() + "." + it->second;
    return true;
  }

  // Llama 4: every expert of a layer in one tensor per projection (gate_up_proj [E, H, 2I] with
  // gate then up along the last dim, down_proj [E, I, H]).
  static bool Llama4Experts(const std::string& name) {
    static const std::regex kRe(
        R"(^model\.layers\.\d+\.feed_forward\.experts\.(gate_up_proj|down_proj)$)");
    return std::regex_match(name, kRe);
  }

  // vLLM's Llama 4 loaders (hf layout): under EP the rank's experts; under TP its share [s, e)
  // of I in each half of gate_up (the two side by side) and of down's I.
  RefTensor ShardLlama4Experts(const std::string& name) const {
    RefTensor t = ck_.Load(name);
    if (o_.ep > 0) {
      if (o_.round_robin) Fail(name + ": one tensor of experts: linear placement only");
      const std::uint64_t per = t.shape.at(0) / static_cast<std::uint64_t>(o_.ep),
                          r = static_cast<std::uint64_t>(o_.rank);
      return SliceRows(t, r * per, (r + 1) * per);
    }
    const std::uint64_t I =
        static_cast<std::uint64_t>(CfgInt(ck_.config(), "intermediate_size", 0));
    if (I % tp_ != 0) Fail(name + ": intermediate_size vs tp");
    const std::uint64_t s = t_ * I / tp_, e = s + I / tp_;
    if (name.ends_with("down_proj")) return SliceDim(t, 1, s, e);
    const RefTensor gate = SliceDim(t, 2, s, e), up = SliceDim(t, 2, I + s, I + e);
    RefTensor out{t.dtype, gate.shape, {}};
    out.shape[2] = 2 * (e - s);
    const std::uint64_t row = (e - s) * ElemSize(t.dtype);
    for (std::uint64_t o = 0; o < gate.data.size() / row; ++o) {
      const auto at = static_cast<std::ptrdiff_t>(o * row), n = static_cast<std::ptrdiff_t>(row);
      out.data.insert(out.data.end(), gate.data.begin() + at, gate.data.begin() + at + n);
      out.data.insert(out.data.end(), up.data.begin() + at, up.data.begin() + at + n);
    }
    return out;
  }

  // vLLM's Llama 4 q/k permute: in each head of hd rows, rows 0, 2, 4, ... then 1, 3, 5, ...
  static RefTensor DeinterleaveHeads(const RefTensor& t, std::uint64_t hd) {
    const std::uint64_t rows = t.shape.at(0), row = t.data.size() / rows;
    RefTensor out{t.dtype, t.shape, {}};
    for (std::uint64_t h = 0; h < rows; h += hd) {
      for (std::uint64_t parity = 0; parity < 2; ++parity) {
        for (std::uint64_t i = h + parity; i < h + hd; i += 2) {
          const auto at = static_cast<std::ptrdiff_t>(i * row);
          out.data.insert(out.data.end(), t.data.begin() + at,
                          t.data.begin() + at + static_cast<std::ptrdiff_t>(row));
        }
      }
    }
    return out;
  }

  // [..., R, C] -> [..., C, R]: element (r, c) of each matrix moves to (c, r).
  static RefTensor SwapLastTwo(const RefTensor& t) {
    const std::size_t n = t.shape.size();
    if (n < 2) Fail("SwapLastTwo of a tensor of rank " + std::to_string(n));
    const std::uint64_t R = t.shape[n - 2], C = t.shape[n - 1], es = ElemSize(t.dtype);
    RefTensor out{t.dtype, t.shape, std::vector<std::uint8_t>(t.data.size())};
    std::swap(out.shape[n - 2], out.shape[n - 1]);
    const std::uint64_t matrices = R * C == 0 ? 0 : t.data.size() / (R * C * es);
    for (std::uint64_t m = 0; m < matrices; ++m) {
      for (std::uint64_t r = 0; r < R; ++r) {
        for (std::uint64_t c = 0; c < C; ++c) {
          const std::uint64_t from = ((m * R + r) * C + c) * es, to = ((m * C + c) * R + r) * es;
          std::copy_n(t.data.begin() + static_cast<std::ptrdiff_t>(from), es,
                      out.data.begin() + static_cast<std::ptrdiff_t>(to));
        }
      }
    }
    return out;
  }

  // Dim `d` of `t` narrowed to [a, b) (plain loops over the outer index).
  static RefTensor SliceDim(const RefTensor& t, std::size_t d, std::uint64_t a, std::uint64_t b) {
    std::uint64_t outer = 1, inner = ElemSize(t.dtype);
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i < d) outer *= t.shape[i];
      if (i > d) inner *= t.shape[i];
    }
    const std::uint64_t n = t.shape.at(d);
    if (a > b || b > n) Fail("bad dim slice");
    RefTensor out{t.dtype, t.shape, {}};
    out.shape[d] = b - a;
    for (std::uint64_t o = 0; o < outer; ++o) {
      const auto first = t.data.begin() + static_cast<std::ptrdiff_t>((o * n + a) * inner);
      out.data.insert(out.data.end(), first, first + static_cast<std::ptrdiff_t>((b - a) * inner));
    }
    return out;
  }

  // vLLM's gpt_oss loaders: under EP the rank's experts; under TP the rank's share [s, e) of the
  // intermediate size (MXFP4: cdiv(I/32, tp) x 32 a rank, the last shorter) on the dim that
  // holds it (gate_up interleaved: 2s..2e; MXFP4 down: blocks s/32..e/32); the down bias whole
  // on tp rank 0 and zero elsewhere.
  RefTensor ShardGptOssExperts(const std::string& name) const {
    RefTensor t = ck_.Load(name);
    const std::uint64_t E = t.shape.at(0);
    if (o_.ep > 0) {
      const std::uint64_t per = E / static_cast<std::uint64_t>(o_.ep),
                          r = static_cast<std::uint64_t>(o_.rank);
      return SliceRows(t, r * per, (r + 1) * per);
    }
    if (tp_ == 1) return t;
    const std::string param = name.substr(name.rfind('.') + 1);
    if (param == "down_proj_bias") {
      if (t_ != 0) std::fill(t.data.begin(), t.data.end(), 0);
      return t;
    }
    const std::uint64_t I =
        static_cast<std::uint64_t>(CfgInt(ck_.config(), "intermediate_size", 0));
    std::uint64_t s = 0, e = 0;
    const auto& q = ck_.config().value("quantization_config", nlohmann::json::object());
    if (q.is_object() && q.value("quant_method", "") == "mxfp4") {
      const std::uint64_t per = (I / 32 + tp_ - 1) / tp_ * 32;
      s = t_ * per;
      e = std::min((t_ + 1) * per, I);
      if (s >= e) Fail(name + ": a rank with no MXFP4 block");
    } else {
      if (I % tp_ != 0) Fail(name + ": intermediate_size vs tp");
      s = t_ * I / tp_;
      e = s + I / tp_;
    }
    if (param == "gate_up_proj") return SliceDim(t, 2, 2 * s, 2 * e);
    if (param == "down_proj") return SliceDim(t, 1, s, e);
    if (param == "down_proj_blocks" || param == "down_proj_scales") {
      return SliceDim(t, 2, s / 32, e / 32);
    }
    return SliceDim(t, 1, 2 * s, 2 * e);  // gate_up bias, blocks and scales: [E, 2I, ...]
  }

  bool Owns(std::uint64_t e) const {
    const std::uint64_t ep = static_cast<std::uint64_t>(o_.ep),
                        r = static_cast<std::uint64_t>(o_.rank);
    if (experts_ == 0 || experts_ % ep != 0) {
      Fail("num experts " + std::to_string(experts_) + " is not a multiple of ep " +
           std::to_string(ep));
    }
    if (o_.round_robin) return e % ep == r;
    const std::uint64_t per = experts_ / ep;
    return e >= r * per && e < (r + 1) * per;
  }

  // Role for a weight/bias name, routed experts (EP off) included.
  Role RoleOfAny(const std::string& name) const {
    Expert ex;
    if (ParseExpert(name, &ex)) return ex.proj == "down_proj" ? Role::kRow : Role::kColumn;
    return RoleOf(name, norms_split_);
  }

  // The parts of a tensor fused on disk, each {rows, kv-head rule}.
  std::vector<std::pair<std::uint64_t, bool>> PartsOf(const std::string& name,
                                                      std::uint64_t rows) const {
    const std::string module = SplitName(name).module;
    if (module == "qkv_proj") {
      return {{heads_ * head_dim_, false},
              {kv_heads_ * head_dim_, true},
              {kv_heads_ * head_dim_, true}};
    }
    if (module == "gate_up_proj") return {{rows / 2, false}, {rows / 2, false}};
    return {{key_dim_, false}, {key_dim_, false}, {value_dim_, false}};  // conv1d, in_proj_qkv
  }

  // Each part's shard (k and v by the kv-head rule), concatenated in part order.
  RefTensor ShardParts(const std::string& name, const RefTensor& t) const {
    std::vector<RefTensor> shards;
    std::uint64_t base = 0;
    for (const auto& [rows, kv] : PartsOf(name, t.shape.at(0))) {
      const RefTensor part = SliceRows(t, base, base + rows);
      base += rows;
      std::pair<std::uint64_t, std::uint64_t> r;
      if (kv && tp_ > kv_heads_) {
        const std::uint64_t h = t_ / (tp_ / kv_heads_);
        r = {h * head_dim_, (h + 1) * head_dim_};
      } else {
        if (rows % tp_ != 0) Fail(name + ": a part of " + std::to_string(rows) + " rows vs tp");
        r = {t_ * rows / tp_, (t_ + 1) * rows / tp_};
      }
      shards.push_back(SliceRows(part, r.first, r.second));
    }
    if (base != t.shape.at(0)) Fail(name + ": parts do not cover its rows");
    std::vector<const RefTensor*> ptrs;
    for (const RefTensor& sh : shards) ptrs.push_back(&sh);
    return ConcatRows(ptrs);
  }

  // Rows [r0, r1) of a column-parallel weight/bias with n rows (kv-head rule included).
  std::pair<std::uint64_t, std::uint64_t> ColumnRange(const std::string& name,
                                                      std::uint64_t n) const {
    const std::string module = SplitName(name).module;
    const bool kv =
        module == "k_proj" || module == "v_proj" || (norms_split_ && module == "k_norm");
    if (kv && tp_ > kv_heads_) {
      if (kv_heads_ == 0 || tp_ % kv_heads_ != 0) {
        Fail(name + ": tp " + std::to_string(tp_) + " is not a multiple of the " +
             std::to_string(kv_heads_) + " kv heads");
      }
      if (n != kv_heads_ * head_dim_) Fail(name + ": rows != kv heads * head_dim");
      const std::uint64_t h = t_ / (tp_ / kv_heads_);
      return {h * head_dim_, (h + 1) * head_dim_};
    }
    if (n % tp_ != 0) {
      Fail(name + ": " + std::to_string(n) + " rows are not divisible by tp " +
           std::to_string(tp_));
    }
    return {t_ * n / tp_, (t_ + 1) * n / tp_};
  }

  std::pair<std::uint64_t, std::uint64_t> RowRange(const std::string& name, std::uint64_t k) const {
    if (k % tp_ != 0) {
      Fail(name + ": " + std::to_string(k) + " columns are not divisible by tp " +
           std::to_string(tp_));
    }
    return {t_ * k / tp_, (t_ + 1) * k / tp_};
  }

  // The range [a0, a1) of a dimension of size `n` in units of `block`: whole blocks only.
  static std::pair<std::uint64_t, std::uint64_t> BlockRange(const std::string& weight,
                                                            std::uint64_t a0, std::uint64_t a1,
                                                            std::uint64_t n, std::uint64_t block,
                                                            const char* what) {
    if (a0 == 0 && a1 == n) return {0, (n + block - 1) / block};
    if (a0 % block != 0 || (a1 - a0) % block != 0) {
      Fail(weight + ": its " + std::to_string(n) + " " + what + " split into shards of " +
           std::to_string(a1 - a0) + " do not fall on " + std::to_string(block) +
           "-wide FP8 scale blocks; lower tp or use ep");
    }
    return {a0 / block, a1 / block};
  }

  // An FP8 per-tensor scale (one value: whole everywhere) or per-channel weight scale ([N] or
  // [N, 1]: the rows of its weight's column shard; whole for a row-parallel weight).
  RefTensor ShardQuantScale(const std::string& name, const std::string& weight) const {
    const RefTensor t = ck_.Load(name);
    if (NumElems(t.shape) == 1 || RoleOfAny(weight) != Role::kColumn) return t;
    const auto [r0, r1] = ColumnRange(weight, t.shape.at(0));
    return SliceRows(t, r0, r1);
  }

  // True for a tensor of a quantized linear layer (its packed weight is in the checkpoint and
  // is not BF16: ModelOpt keeps X.weight BF16 for the layers it excludes), with its dims.
  bool QuantDimsOf(const std::string& name, std::vector<QDim>* dims) const {
    const auto dot = name.rfind('.');
    if (qs_.format == QFormat::kNone || dot == std::string::npos) return false;
    if (!QuantParamDims(qs_, name.substr(dot + 1), dims)) return false;
    const std::string primary = name.substr(0, dot) + "." + PrimaryParam(qs_);
    return ck_.Has(primary) && (ck_.At(primary).dtype == "I32" || ck_.At(primary).dtype == "U8");
  }

  // N (output) and K (input) of quantized layer `x`'s unquantized weight, from its packed one.
  std::pair<std::uint64_t, std::uint64_t> QuantNK(const std::string& x) const {
    const Entry& e = ck_.At(x + "." + PrimaryParam(qs_));
    if (e.shape.size() != 2) Fail(x + ": packed weight is not 2-D");
    switch (qs_.format) {
      case QFormat::kGptq:  // qweight [K/p, N]
        return {e.shape[1], e.shape[0] * qs_.pack};
      case QFormat::kAwq:  // qweight [K, N/p]
        return {e.shape[1] * qs_.pack, e.shape[0]};
      case QFormat::kWna16:  // weight_packed [N, K/p]
        return {e.shape[0], e.shape[1] * qs_.pack};
      default:  // NVFP4: [N, K/2]
        return {e.shape[0], e.shape[1] * 2};
    }
  }

  // The size a dim must have, given the weight's N and K.
  std::uint64_t DimSize(const QDim& d, std::uint64_t n, std::uint64_t k) const {
    switch (d.axis) {
      case Axis::kN:
        return n / d.div;
      case Axis::kK:
        return k / d.div;
      case Axis::kGroup:
        return qs_.group == 0 ? 1 : k / qs_.group;
      case Axis::kNone:
        break;
    }
    return 0;
  }

  void CheckQuantShape(const std::string& name, const RefTensor& t, const std::vector<QDim>& dims,
                       std::uint64_t n, std::uint64_t k) const {
    if (dims.empty()) {
      if (t.shape.size() > 1 || NumElems(t.shape) != 1) Fail(name + ": not a scalar");
      return;
    }
    bool ok = t.shape.size() == dims.size();
    for (std::size_t d = 0; ok && d < dims.size(); ++d) {
      ok = dims[d].axis == Axis::kNone || t.shape[d] == DimSize(dims[d], n, k);
    }
    if (!ok || n % qs_.pack != 0 || (qs_.group != 0 && k % qs_.group != 0)) {
      Fail(name + ": shape " + ShapeStr(t.shape) + " does not fit its weight [" +
           std::to_string(n) + ", " + std::to_string(k) + "]");
    }
  }

  // The tp values (up to 64) that cut an axis of `extent` into shares that are multiples of
  // `div` (the kv-head rule aside).
  static std::string TpThatWork(std::uint64_t extent, std::uint64_t div) {
    std::string s;
    for (std::uint64_t c = 1; c <= 64; ++c) {
      if (extent % c == 0 && (extent / c) % div == 0)
        s += (s.empty() ? "" : ", ") + std::to_string(c);
    }
    return s;
  }

  // A tensor of a quantized layer: each dim on the weight's split axis narrowed to the weight's
  // range [lo, hi) divided by the dim's divisor; the others whole. Under a row split the group
  // dim of scales and zero points stays whole with act order or one group (vLLM's
  // marlin_repeat_scales_on_all_ranks); g_idx is split.
  RefTensor ShardQuantized(const std::string& name, const std::vector<QDim>& dims) const {
    const std::string x = name.substr(0, name.rfind('.'));
    const auto [n, k] = QuantNK(x);
    RefTensor t = ck_.Load(name);
    CheckQuantShape(name, t, dims, n, k);
    const std::string w = x + ".weight";
    const Role role = RoleOfAny(w);
    if (role == Role::kReplicated) return t;
    if (role != Role::kColumn && role != Role::kRow) {
      Fail(name + ": quantized vocab or fused-on-disk tensors are not supported");
    }
    const bool column = role == Role::kColumn;
    const auto [lo, hi] = column ? ColumnRange(w, n) : RowRange(w, k);
    for (std::size_t d = 0; d < dims.size(); ++d) {
      std::uint64_t div = dims[d].div;
      const Axis a = dims[d].axis;
      if (a == Axis::kNone || (a == Axis::kN) != column) continue;
      if (a == Axis::kGroup) {
        if (qs_.act_order || qs_.group == 0) continue;
        div = qs_.group;
      }
      if (lo % div != 0 || hi % div != 0) {
        const std::uint64_t extent = column ? n : k;
        Fail(name + ": tp " + std::to_string(tp_) + " gives tp rank " + std::to_string(t_) +
             " the " + (column ? "output" : "input") + " range [" + std::to_string(lo) + ", " +
             std::to_string(hi) + ") of " + std::to_string(extent) +
             ", which cuts a pack or scale group of " + std::to_string(div) +
             "; tp values that work: " + TpThatWork(extent, div));
      }
      t = SliceDim(t, d, lo / div, hi / div);
    }
    return t;
  }

  RefTensor Shard(const std::string& name) const {
    std::vector<QDim> qdims;
    if (QuantDimsOf(name, &qdims)) return ShardQuantized(name, qdims);
    for (const char* suffix : {".weight_scale", ".input_scale"}) {
      const std::string sfx(suffix);
      if (name.size() > sfx.size() &&
          name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
        return ShardQuantScale(name, name.substr(0, name.size() - sfx.size()) + ".weight");
      }
    }
    if (IsScale(name)) {
      const std::string w = WeightOf(name);
      const Entry& we = ck_.At(w);
      if (bn_ == 0 || bk_ == 0) Fail(name + ": a scale without quantization weight_block_size");
      if (we.shape.size() != 2) Fail(name + ": its weight is not 2-D");
      const RefTensor s = ck_.Load(name);
      const std::uint64_t n = we.shape[0], k = we.shape[1];
      if (s.shape != std::vector<std::uint64_t>{(n + bn_ - 1) / bn_, (k + bk_ - 1) / bk_}) {
        Fail(name + ": shape " + ShapeStr(s.shape) + " does not match weight " +
             ShapeStr(we.shape));
      }
      switch (RoleOfAny(w)) {
        case Role::kReplicated:
          return s;
        case Role::kColumn: {
          const auto [r0, r1] = ColumnRange(w, n);
          const auto [b0, b1] = BlockRange(w, r0, r1, n, bn_, "rows");
          return SliceRows(s, b0, b1);
        }
        case Role::kRow: {
          const auto [c0, c1] = RowRange(w, k);
          const auto [b0, b1] = BlockRange(w, c0, c1, k, bk_, "columns");
          return SliceCols(s, b0, b1);
        }
        case Role::kVocab:
        case Role::kParts:
          Fail(name + ": FP8 scales of vocab or fused-on-disk tensors are not supported");
      }
    }
    const RefTensor t = ck_.Load(name);
    switch (RoleOfAny(name)) {
      case Role::kReplicated:
        return t;
      case Role::kColumn: {
        const auto [r0, r1] = ColumnRange(name, t.shape.at(0));
        return SliceRows(t, r0, r1);
      }
      case Role::kRow: {
        if (t.shape.size() != 2) Fail(name + ": row-parallel tensor is not 2-D");
        const auto [c0, c1] = RowRange(name, t.shape[1]);
        return SliceCols(t, c0, c1);
      }
      case Role::kVocab: {
        const std::uint64_t v = t.shape.at(0), vp = (v + 63) / 64 * 64;
        if (vp % tp_ != 0) {
          Fail(name + ": padded vocab " + std::to_string(vp) + " is not divisible by tp " +
               std::to_string(tp_));
        }
        const RefTensor padded = PadRows(t, vp);
        return SliceRows(padded, t_ * vp / tp_, (t_ + 1) * vp / tp_);
      }
      case Role::kParts:
        return ShardParts(name, t);
    }
    Fail("unreachable");
  }

  // The fused layout's join of a parameter of the slots (q, k, v / gate, up / q_a, kv_a), named
  // `names` in the checkpoint: along the N dim of a quantized layer's tensor (dim 1 for GPTQ /
  // AWQ, which keep N last), scalars as one value per slot, a tensor without an N dim (g_idx,
  // weight_shape) slot 0's only; any other tensor along dim 0.
  RefTensor FuseSlots(const std::vector<std::string>& names,
                      const std::vector<const RefTensor*>& parts) const {
    std::vector<QDim> dims;
    if (!QuantDimsOf(names.at(0), &dims) || dims.empty()) return ConcatRows(parts);
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].axis == Axis::kN) return ConcatDim(parts, d);
    }
    return *parts.at(0);
  }

  // Replaces parts (all present) by their join (FuseSlots) under `fused_name`.
  void FuseRows(std::map<std::string, RefTensor>* m, const std::vector<std::string>& parts,
                const std::string& fused_name) const {
    std::vector<const RefTensor*> ptrs;
    for (const auto& p : parts) {
      auto it = m->find(p);
      if (it == m->end()) return;
      ptrs.push_back(&it->second);
    }
    RefTensor fused = FuseSlots(parts, ptrs);
    for (const auto& p : parts) m->erase(p);
    (*m)[fused_name] = std::move(fused);
  }

  struct FuseGroups {
    std::set<std::string> attn, mlp, mla, linear, experts;  // module prefixes, "...self_attn."
  };

  static FuseGroups CollectFuseGroups(const std::map<std::string, RefTensor>& m) {
    FuseGroups g;
    for (const auto& [name, t] : m) {
      Expert ex;
      if (ParseExpert(name, &ex)) {
        g.experts.insert(ex.layer_prefix);
        continue;
      }
      const Name n = SplitName(name);
      const std::string prefix = name.substr(0, name.size() - n.module.size() - n.param.size() - 1);
      if (n.module == "q_proj") g.attn.insert(prefix);
      if (n.module == "gate_proj") g.mlp.insert(prefix);
      if (n.module == "in_proj_qkv" && n.param == "weight") g.linear.insert(prefix);
      if (n.module == "q_a_proj") g.mla.insert(prefix);
    }
    return g;
  }

  // Every parameter of a quantized layer (none of these names is used otherwise).
  static const std::vector<std::string>& QuantParams() {
    static const std::vector<std::string> k = {"qweight",
                                               "qzeros",
                                               "scales",
                                               "g_idx",
                                               "weight_packed",
                                               "weight_zero_point",
                                               "weight_g_idx",
                                               "weight_shape",
                                               "weight_scale_2",
                                               "weight_global_scale",
                                               "input_global_scale"};
    return k;
  }

  void FuseSlotsOf(std::map<std::string, RefTensor>* m, const std::string& p,
                   const std::vector<std::string>& slots, const std::string& fused,
                   std::vector<std::string> params) const {
    params.insert(params.end(), QuantParams().begin(), QuantParams().end());
    for (const std::string& param : params) {
      std::vector<std::string> names;
      for (const std::string& slot : slots) names.push_back(p + slot + "." + param);
      FuseRows(m, names, p + fused + "." + param);
    }
  }

  void Fuse(std::map<std::string, RefTensor>* m) const {
    const FuseGroups g = CollectFuseGroups(*m);  // first: the map changes while fusing
    for (const std::string& p : g.attn) {        // "model.layers.L.self_attn."
      FuseSlotsOf(m, p, {"q_proj", "k_proj", "v_proj"}, "qkv_proj",
                  {"weight", "bias", "weight_scale_inv", "weight_scale", "input_scale"});
    }
    for (const std::string& p : g.mlp) {  // "model.layers.L.mlp." or "...mlp.shared_experts."
      FuseSlotsOf(m, p, {"gate_proj", "up_proj"}, "gate_up_proj",
                  {"weight", "weight_scale_inv", "weight_scale", "input_scale"});
    }
    for (const std::string& p : g.linear) {  // Qwen3.5: vLLM's in_proj_qkvz and in_proj_ba
      FuseRows(m, {p + "in_proj_qkv.weight", p + "in_proj_z.weight"}, p + "in_proj_qkvz.weight");
      FuseRows(m, {p + "in_proj_b.weight", p + "in_proj_a.weight"}, p + "in_proj_ba.weight");
    }
    for (const std::string& p : g.mla) {
      FuseSlotsOf(m, p, {"q_a_proj", "kv_a_proj_with_mqa"}, "fused_qkv_a_proj",
                  {"weight", "weight_scale_inv", "weight_scale", "input_scale"});
    }
    for (const std::string& p : g.experts) FuseExperts(m, p);
  }

  // A layer's routed experts (those in `m`: all, or the rank's under EP) as vLLM's stacks:
  // w13_<param> [E_local, ...] of each expert's gate and up joined (FuseSlots), w2_<param> of
  // the downs ([1] scalars as one value each, as vLLM's w2 scales [E_local]).
  void FuseExperts(std::map<std::string, RefTensor>* m, const std::string& p) const {
    std::set<std::uint64_t> local;
    std::set<std::string> params;
    for (const auto& [name, t] : *m) {
      Expert ex;
      if (ParseExpert(name, &ex) && ex.layer_prefix == p) {
        local.insert(ex.index);
        params.insert(ex.param);
      }
    }
    // gate, up, down as stored: Mixtral's block_sparse_moe experts call them w1, w3, w2.
    const bool mixtral = p.find(".block_sparse_moe.") != std::string::npos;
    const std::vector<std::string> names =
        mixtral ? std::vector<std::string>{"w1", "w3", "w2"}
                : std::vector<std::string>{"gate_proj", "up_proj", "down_proj"};
    for (const std::string& param : params) {
      std::vector<RefTensor> w13, w2;
      for (std::uint64_t e : local) {  // ascending
        const std::string base = p + std::to_string(e) + ".";
        const std::string g = base + names[0] + "." + param, u = base + names[1] + "." + param;
        w13.push_back(FuseSlots({g, u}, {&m->at(g), &m->at(u)}));
        w2.push_back(m->at(base + names[2] + "." + param));
        if (w2.back().shape.size() == 1 && w2.back().shape[0] == 1) w2.back().shape.clear();
      }
      (*m)[p + "w13_" + param] = Stack(w13);
      (*m)[p + "w2_" + param] = Stack(w2);
    }
    for (std::uint64_t e : local) {
      for (const std::string& proj : names) {
        for (const std::string& param : params) {
          m->erase(p + std::to_string(e) + "." + proj + "." + param);
        }
      }
    }
  }

  const Checkpoint& ck_;
  const RefOptions o_;
  std::uint64_t tp_ = 1, t_ = 0;
  std::uint64_t heads_ = 0, kv_heads_ = 0, head_dim_ = 0, experts_ = 0;
  std::uint64_t bn_ = 0, bk_ = 0;
  std::uint64_t key_dim_ = 0, value_dim_ = 0;  // linear attention
  bool tied_ = false;
  bool llama4_ = false;  // fused: q/k heads de-interleaved (vLLM's permute)
  bool norms_split_ = false;
  QuantSpec qs_;
};

// ---- DeepSeek-V4, from vLLM's deepseek_v4.py (load_weights, its WeightsMapper and
// stacked_params_mapping; FusedMoE for the experts). Names carry no "model." prefix; FP8 block
// scales are X.scale; routed experts are MXFP4 (weight [N, K/2] two codes a byte, scale
// [N, K/32]) unless config.json says expert_dtype "fp8" (FP8 blocks like the rest). ----
class V4Builder {
 public:
  V4Builder(const Checkpoint& ck, const RefOptions& o) : ck_(ck), o_(o) {
    const auto& c = ck.config();
    if (o.tp < 1 || o.ep < 0 || o.rank < 0) Fail("bad tp / ep / rank");
    if (o.ep > 0 && (o.ep % o.tp != 0 || o.rank >= o.ep)) Fail("ep % tp != 0 or rank >= ep");
    tp_ = static_cast<std::uint64_t>(o.tp);
    t_ = static_cast<std::uint64_t>(o.rank % o.tp);
    layers_ = CfgInt(c, "num_hidden_layers", 0);
    heads_ = static_cast<std::uint64_t>(CfgInt(c, "num_attention_heads", 0));
    groups_ = static_cast<std::uint64_t>(CfgInt(c, "o_groups", 0));
    experts_ = static_cast<std::uint64_t>(CfgInt(c, "n_routed_experts", 0));
    inter_ = static_cast<std::uint64_t>(CfgInt(c, "moe_intermediate_size", 0));
    tied_ = c.value("tie_word_embeddings", false);
    // Unquantized (transformers' BF16 save_pretrained): no scales, BF16 experts.
    const bool quantized = c.contains("quantization_config");
    fp4_ = quantized && c.value("expert_dtype", std::string("fp4")) == "fp4";
    if (quantized) {
      const auto& q = c.at("quantization_config").at("weight_block_size");
      bn_ = q.at(0).get<std::uint64_t>();
      bk_ = q.at(1).get<std::uint64_t>();
    }
    // vLLM: n_heads % tp == 0 (DeepseekV4Attention), o_groups // tp groups a rank.
    if (heads_ % tp_ != 0) Fail("num_attention_heads % tp != 0");
    if (groups_ % tp_ != 0) Fail("o_groups % tp != 0");
    if (experts_ % tp_ != 0) Fail("n_routed_experts % tp != 0");  // DeepseekV4MoE asserts it
    if (o.ep > 0 && experts_ % static_cast<std::uint64_t>(o.ep) != 0) Fail("experts % ep != 0");
  }

  std::map<std::string, RefTensor> Build() {
    std::map<std::string, RefTensor> out;
    static const std::regex kLayer(R"(^layers\.(\d+)\..*)");
    static const std::regex kExpert(
        R"(^layers\.\d+\.ffn\.experts\.(\d+)\.(w[123])\.(weight|scale)$)");
    for (const auto& [name, entry] : ck_.entries()) {
      std::smatch m;
      if (name.rfind("mtp.", 0) == 0) continue;  // vLLM: skip_substrs ["mtp."]
      if (std::regex_match(name, m, kLayer) && std::stoll(m[1]) >= layers_) continue;
      if (name == "head.weight" && tied_) continue;
      if (std::regex_match(name, m, kExpert)) {
        const std::uint64_t e = std::stoull(m[1]);
        if (o_.ep > 0 && !Owns(e)) continue;
        out[name] = o_.ep > 0 ? ck_.Load(name) : ShardExpert(name, m[2], m[3]);
        continue;
      }
      out[name] = Shard(name);
    }
    return o_.fused ? Fuse(out) : out;
  }

 private:
  bool Owns(std::uint64_t e) const {
    const std::uint64_t ep = static_cast<std::uint64_t>(o_.ep),
                        r = static_cast<std::uint64_t>(o_.rank);
    return o_.round_robin ? e % ep == r : e / (experts_ / ep) == r;
  }

  static bool EndsWith(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  }

  // vLLM's parallel linears: ColumnParallelLinear wq_b, wo_a and the shared experts' w1 / w3
  // (MergedColumnParallelLinear gate_up_proj); RowParallelLinear wo_b and shared w2 (down_proj).
  // attn_sink is narrowed to the rank's heads. Everything else is replicated (ReplicatedLinear,
  // fused_wqa_wkv with disable_tp, the compressors, the indexer, norms, hc_*, the router).
  RefTensor Shard(const std::string& name) const {
    RefTensor t = ck_.Load(name);
    if (name == "embed.weight" || name == "head.weight") return Vocab(t);
    if (EndsWith(name, ".attn.attn_sink")) return Rows(t, name, 1);
    for (const char* col :
         {".attn.wq_b.", ".attn.wo_a.", ".shared_experts.w1.", ".shared_experts.w3."}) {
      if (name.find(col) == std::string::npos || name.find(".indexer.") != std::string::npos)
        continue;
      return EndsWith(name, ".scale") ? Rows(t, name, bn_) : Rows(t, name, 1);
    }
    for (const char* row : {".attn.wo_b.", ".shared_experts.w2."}) {
      if (name.find(row) == std::string::npos) continue;
      return EndsWith(name, ".scale") ? Cols(t, name, bk_) : Cols(t, name, 1);
    }
    return t;
  }

  // This rank's 1/tp of the rows, the weight's rows when `block` > 1 (a scale of blocks).
  RefTensor Rows(const RefTensor& t, const std::string& name, std::uint64_t block) const {
    const std::uint64_t n = block > 1 ? WeightDim(name, 0) : t.shape.at(0);
    if (n % tp_ != 0 || (n / tp_) % block != 0) Fail(name + ": rows vs tp / FP8 block");
    const std::uint64_t per = n / tp_ / block;
    return SliceRows(t, t_ * per, (t_ + 1) * per);
  }
  RefTensor Cols(const RefTensor& t, const std::string& name, std::uint64_t block) const {
    const std::uint64_t n = block > 1 ? WeightDim(name, 1) : t.shape.at(1);
    if (n % tp_ != 0 || (n / tp_) % block != 0) Fail(name + ": cols vs tp / FP8 block");
    const std::uint64_t per = n / tp_ / block;
    return SliceCols(t, t_ * per, (t_ + 1) * per);
  }
  std::uint64_t WeightDim(const std::string& scale, int d) const {
    return ck_.At(scale.substr(0, scale.size() - 5) + "weight")
        .shape.at(static_cast<std::size_t>(d));
  }

  // VocabParallelEmbedding / ParallelLMHead: vocab padded to 64, 1/tp of the padded rows.
  RefTensor Vocab(const RefTensor& t) const {
    const std::uint64_t v = t.shape.at(0), vp = (v + 63) / 64 * 64;
    if (vp % tp_ != 0) Fail("padded vocab % tp != 0");
    const std::uint64_t a = t_ * vp / tp_, b = a + vp / tp_;
    return PadRows(SliceRows(t, std::min(a, v), std::min(b, v)), b - a);
  }

  // FusedMoE with EP off: w1 / w3 take the rank's rows of moe_intermediate_size, w2 its columns.
  // MXFP4: the weight packs 2 values a byte and the scale one per 32 along the input (w2: the
  // intermediate) dim; FP8: 128-blocks.
  RefTensor ShardExpert(const std::string& name, const std::string& w, const std::string& p) const {
    const RefTensor t = ck_.Load(name);
    if (inter_ % tp_ != 0) Fail(name + ": moe_intermediate_size % tp");
    const std::uint64_t s = t_ * inter_ / tp_, e = s + inter_ / tp_;
    const bool scale = p == "scale";
    const std::uint64_t div = fp4_ ? (scale ? 32 : 2) : (scale ? (w == "w2" ? bk_ : bn_) : 1);
    const std::uint64_t rdiv = fp4_ ? 1 : div;  // w1 / w3 rows: MXFP4 is per row
    if (w != "w2") {
      if (s % rdiv != 0 || e % rdiv != 0) Fail(name + ": rows cut a block");
      return SliceRows(t, s / rdiv, e / rdiv);
    }
    if (s % div != 0 || e % div != 0)
      Fail(name + ": columns cut a block of " + std::to_string(div));
    return SliceCols(t, s / div, e / div);
  }

  // vLLM's names (WeightsMapper: prefix, .scale regex, suffix, substring), then its stacked
  // params (fused_wqa_wkv, fused_wkv_wgate, gate_up_proj) and FusedMoE's w13_ / w2_ stacks.
  static std::string VllmName(std::string n, bool fp4) {
    static const std::regex kExpertScale(R"((\.experts\.\d+\.w[123])\.scale$)");
    static const std::regex kScale(R"(\.scale$)");
    for (const auto& [from, to] :
         std::vector<std::pair<std::string, std::string>>{{"layers.", "model.layers."},
                                                          {"embed.", "model.embed."},
                                                          {"norm.", "model.norm."},
                                                          {"hc_head", "model.hc_head"}}) {
      if (n.rfind(from, 0) == 0) {
        n = to + n.substr(from.size());
        break;
      }
    }
    if (fp4) n = std::regex_replace(n, kExpertScale, "$1.weight_scale");
    n = std::regex_replace(n, kScale, ".weight_scale_inv");
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"head.weight", "lm_head.weight"},
             {"embed.weight", "embed_tokens.weight"},
             {".ffn.gate.bias", ".ffn.gate.e_score_correction_bias"}}) {
      if (EndsWith(n, from)) {
        n = n.substr(0, n.size() - from.size()) + to;
        break;
      }
    }
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {".attn.compressor.", ".attn.mla_attn.compressor."},
             {".shared_experts.w2", ".shared_experts.down_proj"}}) {
      const auto at = n.find(from);
      if (at != std::string::npos) n = n.substr(0, at) + to + n.substr(at + from.size());
    }
    return n;
  }

  std::map<std::string, RefTensor> Fuse(const std::map<std::string, RefTensor>& in) const {
    static const std::regex kExpert(
        R"(^(model\.layers\.\d+\.ffn\.experts\.)(\d+)\.(w[123])\.(.*)$)");
    // stacked_params_mapping: (param, shard, slot)
    static const std::vector<std::tuple<std::string, std::string, int>> kStacked = {
        {"gate_up_proj", "w1", 0},
        {"gate_up_proj", "w3", 1},
        {"attn.fused_wqa_wkv", "attn.wq_a", 0},
        {"attn.fused_wqa_wkv", "attn.wkv", 1},
        {"compressor.fused_wkv_wgate", "compressor.wkv", 0},
        {"compressor.fused_wkv_wgate", "compressor.wgate", 1}};
    std::map<std::string, std::map<int, const RefTensor*>> stacked;
    std::map<std::string, std::map<std::uint64_t, std::map<std::string, const RefTensor*>>> experts;
    std::map<std::string, RefTensor> out;
    for (const auto& [name, t] : in) {
      std::string n = VllmName(name, fp4_);
      std::smatch m;
      if (std::regex_match(n, m, kExpert)) {
        experts[m[1].str() + "|" + m[4].str()][std::stoull(m[2])][m[3]] = &t;
        continue;
      }
      bool done = false;
      for (const auto& [param, shard, slot] : kStacked) {
        const auto at = n.find(shard);
        if (at == std::string::npos) continue;
        stacked[n.substr(0, at) + param + n.substr(at + shard.size())][slot] = &t;
        done = true;
        break;
      }
      if (!done) out[n] = t;
    }
    for (const auto& [n, slots] : stacked) {
      std::vector<const RefTensor*> parts;
      for (const auto& [slot, t] : slots) parts.push_back(t);
      if (parts.size() != 2) Fail(n + ": a stacked parameter without both shards");
      out[n] = ConcatRows(parts);
    }
    for (const auto& [key, by_expert] : experts) {
      const std::string prefix = key.substr(0, key.find('|')),
                        param = key.substr(key.find('|') + 1);
      std::vector<RefTensor> w13, w2;
      for (const auto& [e, ws] : by_expert) {  // ascending expert ids
        w13.push_back(ConcatRows({ws.at("w1"), ws.at("w3")}));
        w2.push_back(*ws.at("w2"));
      }
      out[prefix + "w13_" + param] = Stack(w13);
      out[prefix + "w2_" + param] = Stack(w2);
    }
    return out;
  }

  const Checkpoint& ck_;
  const RefOptions o_;
  std::uint64_t tp_ = 1, t_ = 0, heads_ = 0, groups_ = 0, experts_ = 0, inter_ = 0;
  std::uint64_t bn_ = 128, bk_ = 128;
  std::int64_t layers_ = 0;
  bool tied_ = false, fp4_ = true;
};

}  // namespace

std::map<std::string, RefTensor> ReferenceRankTensors(const std::string& model_dir,
                                                      const RefOptions& o) {
  const Checkpoint ck(model_dir);
  if (ck.config().value("model_type", "") == "deepseek_v4") return V4Builder(ck, o).Build();
  return Builder(ck, o).Build();
}

}  // namespace hoist::testref
