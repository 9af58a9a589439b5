// Divisibility, completeness and unexpected-tensor checks. See model_checks.h for the contract.
#include "planner/model_checks.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "planner/strict_json.h"

namespace hoist::planner {
namespace {

using internal::QuoteForMessage;

constexpr std::int64_t kVocabPad = 64;  // vLLM's DEFAULT_VOCAB_PADDING_SIZE

std::string N(std::int64_t v) { return std::to_string(v); }

bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

// One divisibility a tp must satisfy.
struct TpRule {
  enum Kind : std::uint8_t { kDivides, kKvHeads, kBlocks } kind = kDivides;
  std::int64_t n = 0;      // the dimension tp slices
  std::int64_t block = 0;  // kBlocks: an FP8 scale block along that dimension
  std::string what;        // "num_attention_heads = 16"
  std::string hint;        // appended to the message
};

bool Works(const TpRule& r, std::int64_t tp) {
  switch (r.kind) {
    case TpRule::kDivides:
      return r.n % tp == 0;
    case TpRule::kKvHeads:
      return tp <= r.n ? r.n % tp == 0 : tp % r.n == 0;
    case TpRule::kBlocks:
      return tp == 1 || (r.n % tp == 0 && (r.n / tp) % r.block == 0);
  }
  return false;
}

bool HasDenseLayer(const ModelConfig& c, Family family) {
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!LayerIsSparse(c, family, l)) return true;
  }
  return false;
}

bool HasSparseLayer(const ModelConfig& c, Family family) {
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (LayerIsSparse(c, family, l)) return true;
  }
  return false;
}

std::string ExpertsKey(Family family) { return InfoOf(family).experts_key; }

// Hybrid families' linear attention: tp splits its key and value heads (vLLM's head-wise split of
// in_proj_qkvz, in_proj_ba, conv1d, A_log and dt_bias).
void AddLinearAttentionRules(const ModelConfig& c, Family family, std::vector<TpRule>* rules) {
  bool any = false;
  for (std::int64_t l = 0; l < c.num_hidden_layers && !any; ++l) {
    any = LayerIsLinear(c, family, l);
  }
  if (!any) return;
  rules->push_back({TpRule::kDivides, c.linear_num_key_heads, 0,
                    "linear_num_key_heads = " + N(c.linear_num_key_heads), ""});
  rules->push_back({TpRule::kDivides, c.linear_num_value_heads, 0,
                    "linear_num_value_heads = " + N(c.linear_num_value_heads), ""});
}

// DeepSeek-V4: wo_a is column-parallel over o_groups whole groups (vLLM: o_groups // tp per
// rank), tp divides the routed experts (an assertion of vLLM's), and MXFP4 experts split under
// tp in blocks of 32 of moe_intermediate_size.
void AddDeepseekV4Rules(const ModelConfig& c, Family family, bool experts_split,
                        std::vector<TpRule>* rules) {
  if (c.o_groups > 0) {
    rules->push_back({TpRule::kDivides, c.o_groups, 0, "o_groups = " + N(c.o_groups), ""});
  }
  if (InfoOf(family).experts_divide_tp && c.num_experts > 0) {
    rules->push_back({TpRule::kDivides, c.num_experts, 0,
                      std::string(InfoOf(family).experts_key) + " = " + N(c.num_experts),
                      " (vLLM's DeepseekV4MoE asserts it, with or without --ep)"});
  }
  if (experts_split && Mxfp4Experts(c, family)) {
    rules->push_back({TpRule::kBlocks, c.moe_intermediate_size, 32,
                      "moe_intermediate_size = " + N(c.moe_intermediate_size) +
                          " into whole MXFP4 blocks of 32 a rank (expert_dtype fp4)",
                      " (or --ep, which keeps every expert whole on one rank)"});
  }
}

// The rules config.json alone implies, in the order they are reported.
std::vector<TpRule> ConfigTpRules(const ModelConfig& c, Family family, int ep) {
  std::vector<TpRule> rules;
  rules.push_back({TpRule::kDivides, c.num_attention_heads, 0,
                   "num_attention_heads = " + N(c.num_attention_heads), ""});
  const FamilyInfo& info = InfoOf(family);
  if (info.attention == Attention::kGqa && c.num_key_value_heads > 0) {
    rules.push_back({TpRule::kKvHeads, c.num_key_value_heads, 0,
                     "num_key_value_heads = " + N(c.num_key_value_heads), ""});
  }
  if (HasDenseLayer(c, family)) {
    const bool mlp = info.dense_size_key != nullptr;
    const std::int64_t size = mlp ? c.intermediate_size_mlp : c.intermediate_size;
    rules.push_back({TpRule::kDivides, size, 0,
                     std::string(mlp ? info.dense_size_key : "intermediate_size") + " = " + N(size),
                     ""});
  }
  const bool sparse = HasSparseLayer(c, family);
  if (sparse && ep == 0 && !(family == Family::kGptOss && c.quant_method == "mxfp4")) {
    const bool moe_i = std::string_view(info.expert_size_key) == "moe_intermediate_size";
    const std::int64_t size = moe_i ? c.moe_intermediate_size : c.intermediate_size;
    rules.push_back({TpRule::kDivides, size, 0, std::string(info.expert_size_key) + " = " + N(size),
                     " (or --ep, which keeps every expert whole on one rank)"});
  }
  if (sparse && info.shared == SharedExperts::kQwen && c.shared_expert_intermediate_size > 0) {
    rules.push_back({TpRule::kDivides, c.shared_expert_intermediate_size, 0,
                     "shared_expert_intermediate_size = " + N(c.shared_expert_intermediate_size),
                     ""});
  }
  AddLinearAttentionRules(c, family, &rules);
  AddDeepseekV4Rules(c, family, sparse && ep == 0, &rules);
  if (sparse && info.shared == SharedExperts::kDeepseek && c.n_shared_experts > 0) {
    const std::int64_t shared = c.moe_intermediate_size * c.n_shared_experts;
    rules.push_back({TpRule::kDivides, shared, 0,
                     "moe_intermediate_size x n_shared_experts = " + N(c.moe_intermediate_size) +
                         " x " + N(c.n_shared_experts) + " = " + N(shared),
                     ""});
  }
  const std::int64_t padded = (c.vocab_size + kVocabPad - 1) / kVocabPad * kVocabPad;
  rules.push_back({TpRule::kDivides, padded, 0,
                   "vocab_size = " + N(c.vocab_size) + " padded to a multiple of " + N(kVocabPad) +
                       " = " + N(padded),
                   ""});
  return rules;
}

// FP8 block constraints of the checkpoint's tp-sliced scaled weights (for the list of tp values
// that work; the plan builder reports a split block itself, naming the tensor).
std::vector<TpRule> Fp8TpRules(const Checkpoint& ckpt, Family family, int ep) {
  const BlockSize block = BlockSizeOf(ckpt.config);
  std::vector<TpRule> rules;
  if (block.rows == 0) return rules;
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (const auto& [name, loc] : ckpt.tensors) {
    const std::string wname = ScaleWeightName(name);  // X.weight_scale_inv or X.scale
    if (wname.empty()) continue;
    const TensorEntry* w = ckpt.Find(wname);
    if (w == nullptr || w->shape.size() != 2 || !IsFp8(w->dtype)) continue;
    Result<TensorRule> rule = ClassifyTensor(ckpt.config, family, w->name, w->shape, "");
    if (!rule.ok()) continue;
    const Role r = rule->role;
    const bool experts_sliced = ep == 0;
    const bool column =
        r == Role::kColumn || (experts_sliced && (r == Role::kExpertGate || r == Role::kExpertUp));
    const bool row = r == Role::kRow || (experts_sliced && r == Role::kExpertDown);
    if (!column && !row) continue;
    const std::uint64_t n = column ? w->shape[0] : w->shape[1];
    const std::uint64_t b = column ? block.rows : block.cols;
    if (seen.insert({n, b}).second) {
      rules.push_back(
          {TpRule::kBlocks, static_cast<std::int64_t>(n), static_cast<std::int64_t>(b), "", ""});
    }
  }
  return rules;
}

std::string JoinOrNone(const std::vector<std::int64_t>& values) {
  if (values.empty()) return "none";
  std::string s;
  for (std::int64_t v : values) s += (s.empty() ? "" : ", ") + N(v);
  return s;
}

std::string WorkingTps(const Checkpoint& ckpt, Family family, const std::vector<TpRule>& rules,
                       int ep) {
  std::vector<TpRule> all = rules;
  for (TpRule& r : Fp8TpRules(ckpt, family, ep)) all.push_back(std::move(r));
  const std::int64_t max = std::min(ckpt.config.num_attention_heads, kMaxWorld);
  std::vector<std::int64_t> ok;
  for (std::int64_t tp = 1; tp <= max; ++tp) {
    if (ep > 0 && ep % tp != 0) continue;
    if (std::all_of(all.begin(), all.end(), [tp](const TpRule& r) { return Works(r, tp); })) {
      ok.push_back(tp);
    }
  }
  return JoinOrNone(ok);
}

Status TpError(const Checkpoint& ckpt, Family family, const TpRule& r, int tp, int ep) {
  const std::string where = " (" + ckpt.dir + "/config.json)";
  std::string head;
  if (r.kind == TpRule::kKvHeads && tp > r.n) {
    head = "tp " + N(tp) + " is larger than " + r.what + " but not a multiple of it" + where +
           ": above the kv heads, each kv head is replicated on tp / " + N(r.n) + " ranks";
  } else {
    head = "tp " + N(tp) + " does not divide " + r.what + where;
  }
  return Status::InvalidArgument(
      head + "; tp values that work for this model" + (ep > 0 ? " with ep " + N(ep) : "") + ": " +
      WorkingTps(ckpt, family, ConfigTpRules(ckpt.config, family, ep), ep) + r.hint);
}

Status CheckExperts(const Checkpoint& ckpt, Family family, const PlanOptions& o) {
  const std::int64_t experts = ckpt.config.num_experts;
  if (o.ep > 0 && experts <= 0) {
    spdlog::warn(
        "--ep {}: {} has no routed experts, so expert parallelism is data parallelism "
        "here: {} groups of tp {}, each loading the whole model (say --dp {} to mean it)",
        o.ep, ckpt.dir, o.ep / o.tp, o.tp, o.ep / o.tp);
  }
  if (o.ep <= 0 || experts <= 0 || experts % o.ep == 0) return Status::Ok();
  std::vector<std::int64_t> ok;
  for (std::int64_t ep = o.tp; ep <= std::min(experts, kMaxWorld); ep += o.tp) {
    if (experts % ep == 0) ok.push_back(ep);
  }
  return Status::InvalidArgument("ep " + N(o.ep) + " does not divide " + ExpertsKey(family) +
                                 " = " + N(experts) + " (" + ckpt.dir +
                                 "/config.json): every rank holds the same number of experts; "
                                 "ep values that work for this model with tp " +
                                 N(o.tp) + ": " + JoinOrNone(ok));
}

constexpr std::int64_t kHuge = std::numeric_limits<std::int64_t>::max();

// The number in the dotted component starting at `at` (up to the next '.'): kHuge past 9
// digits, -1 when it is not a number in canonical form (digits, no leading zero).
std::int64_t NumberAt(std::string_view name, std::size_t at) {
  const std::size_t end = std::min(name.find('.', at), name.size());
  if (end == at || (name[at] == '0' && end - at > 1)) return -1;
  std::int64_t v = 0;
  for (std::size_t i = at; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    if (end - at > 9) continue;
    v = v * 10 + (name[i] - '0');
  }
  return end - at > 9 ? kHuge : v;
}

// "model.layers.12.x" (or "layers.12.x") -> 12; -1 for other names.
std::int64_t LayerOf(std::string_view name) {
  for (std::string_view prefix : {"model.layers.", "layers."}) {  // DeepSeek-V4: no model.
    if (name.rfind(prefix, 0) == 0) return NumberAt(name, prefix.size());
  }
  return -1;
}

// "model.layers.3.mlp.experts.17.x" -> 17; -1 for other names.
std::int64_t ExpertOf(std::string_view name) {
  constexpr std::string_view kExperts = ".experts.";  // mlp.experts / block_sparse_moe.experts
  const std::size_t at = name.find(kExperts);
  if (at == std::string_view::npos || LayerOf(name) < 0) return -1;
  return NumberAt(name, at + kExperts.size());
}

// `name` with every all-digit component replaced by '#' (as the rule table keys them).
void CanonicalInto(std::string_view name, std::string* key) {
  key->clear();
  std::size_t at = 0;
  while (at <= name.size()) {
    const std::size_t end = std::min(name.find('.', at), name.size());
    const std::string_view part = name.substr(at, end - at);
    if (!key->empty()) key->push_back('.');
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char ch) {
      return ch >= '0' && ch <= '9';
    });
    if (digits) {
      key->push_back('#');
    } else {
      key->append(part);
    }
    at = end + 1;
  }
}

// The implied tensors as canonical keys, per kind of slice: walking the first layer of each kind
// (dense or sparse MLP, full or linear attention) and one expert is enough, since every layer of
// a kind implies the same keys.
struct ImpliedKeys {
  std::unordered_set<std::string> model, expert;
  std::array<std::unordered_set<std::string>, 4 * kLayerVariants> layer;  // by LayerKind
  std::uint64_t total = 0;                                                // implied tensors in all
};

int LayerKind(const ModelConfig& c, Family family, std::int64_t l) {
  return (LayerIsSparse(c, family, l) ? 1 : 0) + (LayerIsLinear(c, family, l) ? 2 : 0) +
         4 * LayerVariant(c, family, l);
}

std::uint64_t Collect(const ModelConfig& c, Family family, ImpliedSlice slice,
                      std::unordered_set<std::string>* keys) {
  std::uint64_t n = 0;
  std::string key;
  ForEachImpliedTensor(
      c, family,
      [&](const std::string& name, std::string_view) {
        CanonicalInto(name, &key);
        keys->insert(key);
        ++n;
        return true;
      },
      slice);
  return n;
}

ImpliedKeys MakeImpliedKeys(const ModelConfig& c, Family family) {
  ImpliedKeys k;
  k.total = Collect(c, family, {ImpliedPart::kModel}, &k.model);
  std::array<std::int64_t, 4 * kLayerVariants> first;
  std::array<std::uint64_t, 4 * kLayerVariants> count;
  first.fill(-1);
  count.fill(0);
  std::int64_t sparse_at = -1;
  std::uint64_t sparse = 0;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int kind = LayerKind(c, family, l);
    if (count[kind]++ == 0) first[kind] = l;
    if (kind & 1 && sparse++ == 0) sparse_at = l;
  }
  // Bounded by ParseModelConfig: 65536 layers x (65536 experts x 3 + a few) fits 64 bits.
  for (int kind = 0; kind < 4 * kLayerVariants; ++kind) {
    if (count[kind] == 0) continue;
    k.total += count[kind] * Collect(c, family, {ImpliedPart::kLayer, first[kind]}, &k.layer[kind]);
  }
  if (sparse > 0) {
    const auto experts = static_cast<std::uint64_t>(std::max<std::int64_t>(0, c.num_experts));
    k.total +=
        sparse * experts * Collect(c, family, {ImpliedPart::kExpert, sparse_at, 0}, &k.expert);
  }
  return k;
}

// A layer a quantized format leaves unquantized (its `ignore` / `exclude_modules`) holds X.weight
// where the implied walk names X.qweight or X.weight_packed (QuantMainParam): one mapping, both
// ways.
class UnquantizedAlias {
 public:
  explicit UnquantizedAlias(const ModelConfig& c) : main_(QuantMainParam(SchemeOf(c))) {}
  // "X.weight" -> the implied "X.qweight"; "" when the format has no such alias.
  std::string Implied(std::string_view stored) const { return Swap(stored, "weight", main_); }
  // The implied "X.qweight" -> "X.weight"; "" likewise.
  std::string Stored(std::string_view implied) const { return Swap(implied, main_, "weight"); }

 private:
  std::string Swap(std::string_view name, std::string_view from, std::string_view to) const {
    if (main_ == "weight" || name.size() <= from.size() || !name.ends_with(from) ||
        name[name.size() - from.size() - 1] != '.') {
      return "";
    }
    return std::string(name.substr(0, name.size() - from.size())) + std::string(to);
  }
  std::string_view main_;
};

// How many of the checkpoint's tensors config.json implies. No lookup in the checkpoint's own
// (large) map: each name is keyed and looked up in the small per-kind sets.
std::uint64_t PresentImplied(const Checkpoint& ckpt, Family family, const ImpliedKeys& keys) {
  const ModelConfig& c = ckpt.config;
  std::uint64_t present = 0;
  std::string key;
  const UnquantizedAlias alias(c);
  for (const auto& [name, loc] : ckpt.tensors) {
    const std::int64_t layer = LayerOf(name);
    if (layer < 0) {
      present += keys.model.count(name);
      continue;
    }
    if (layer >= c.num_hidden_layers) continue;
    const int kind = LayerKind(c, family, layer);
    const std::int64_t expert = ExpertOf(name);
    const auto& set = expert >= 0 ? keys.expert : keys.layer[kind];
    if (expert >= 0 && (!(kind & 1) || expert >= c.num_experts)) continue;
    CanonicalInto(name, &key);
    if (set.count(key) == 0) {
      if (const std::string implied = alias.Implied(name); !implied.empty()) {
        CanonicalInto(implied, &key);  // left unquantized
      }
    }
    present += set.count(key);
  }
  return present;
}

std::string IncompleteMessage(const Checkpoint& ckpt, const std::string& first,
                              const std::string& because, std::uint64_t missing) {
  std::string m = ckpt.dir + ": the checkpoint is incomplete: tensor '" + first +
                  "' is missing, which config.json implies (" + because + ")";
  if (missing > 1) m += "; " + std::to_string(missing) + " implied tensors are missing in all";
  std::int64_t top = -1;
  for (const auto& [name, loc] : ckpt.tensors) {
    const std::int64_t l = LayerOf(name);
    if (l < ckpt.config.num_hidden_layers) top = std::max(top, l);
  }
  const std::int64_t layers = ckpt.config.num_hidden_layers;
  if (LayerOf(first) >= 0 && top < layers - 1) {
    m += top < 0 ? "; the checkpoint holds no layer tensors at all"
                 : "; the checkpoint holds tensors of layers 0 to " + N(top) +
                       " only, but num_hidden_layers = " + N(layers);
  }
  return m;
}

}  // namespace

Status CheckParallelism(const Checkpoint& ckpt, Family family, const PlanOptions& o) {
  for (const TpRule& r : ConfigTpRules(ckpt.config, family, o.ep)) {
    if (!Works(r, o.tp)) return TpError(ckpt, family, r, o.tp, o.ep);
  }
  return CheckExperts(ckpt, family, o);
}

Status CheckComplete(const Checkpoint& ckpt, Family family) {
  const ImpliedKeys keys = MakeImpliedKeys(ckpt.config, family);
  const std::uint64_t present = PresentImplied(ckpt, family, keys);
  if (present >= keys.total) return Status::Ok();
  // Something is missing: walk the implied names in model order to the first one absent.
  std::string first, because;
  const UnquantizedAlias alias(ckpt.config);
  ForEachImpliedTensor(ckpt.config, family, [&](const std::string& name, std::string_view why) {
    if (ckpt.tensors.count(name) > 0) return true;
    const std::string stored = alias.Stored(name);
    if (!stored.empty() && ckpt.tensors.count(stored) > 0) return true;  // left unquantized
    first = name;
    because = why;
    return false;
  });
  if (first.empty()) {
    return Status::Internal(ckpt.dir + ": " + std::to_string(keys.total - present) +
                            " implied tensors counted missing, but none found missing");
  }
  return Status::Corrupt(IncompleteMessage(ckpt, first, because, keys.total - present));
}

Status CheckQuantization(const Checkpoint& ckpt, Family family) {
  const ModelConfig& c = ckpt.config;
  const std::string& m = c.quant_method;
  if (!c.expert_dtype.empty() && c.expert_dtype != "fp4" && c.expert_dtype != "fp8") {
    return Status::Unsupported(ckpt.dir + "/config.json: expert_dtype " +
                               QuoteForMessage(c.expert_dtype) +
                               " is not supported: vLLM's DeepSeek-V4 takes \"fp4\" (MXFP4 "
                               "experts, the default) or \"fp8\" (FP8 block experts)");
  }
  const bool ok = m.empty() || m == "fp8" || m == "fbgemm_fp8" ||
                  (m == "mxfp4" && family == Family::kGptOss) ||
                  (m == "compressed-tensors" &&
                   (c.quant_format.empty() || c.quant_format == "float-quantized")) ||
                  (m == "modelopt" && (c.quant_algo.empty() || c.quant_algo == "FP8"));
  if (ok) return Status::Ok();
  const QuantScheme scheme = SchemeOf(c);
  if (scheme != QuantScheme::kNone) {
    const bool packs_ints = scheme == QuantScheme::kGptq || scheme == QuantScheme::kAwq ||
                            scheme == QuantScheme::kWna16;
    const bool bits_ok =
        !packs_ints || c.quant_bits == 4 || (c.quant_bits == 8 && scheme != QuantScheme::kAwq);
    if (bits_ok) return Status::Ok();
    return Status::Unsupported(
        ckpt.dir + "/config.json: quantization_config: " + std::string(SchemeName(scheme)) +
        " with " + std::to_string(c.quant_bits) + " bits is not supported (hoist slices 4-bit" +
        (scheme == QuantScheme::kAwq ? "" : " and 8-bit") + " weights packed in int32)");
  }
  std::string what = "quant_method " + QuoteForMessage(m);
  if (!c.quant_format.empty()) what += ", format " + QuoteForMessage(c.quant_format);
  if (!c.quant_algo.empty()) what += ", quant_algo " + QuoteForMessage(c.quant_algo);
  return Status::Unsupported(
      ckpt.dir + "/config.json: quantization_config " + what +
      " is not supported yet: hoist slices unquantized, FP8 (block, per-channel or per-tensor "
      "scales), GPTQ, AWQ, compressed-tensors pack-quantized and NVFP4 checkpoints, and gpt_oss "
      "MXFP4 (docs/LAYOUT.md)");
}

Status CheckScales(const Checkpoint& ckpt, Family family) {
  std::string first, weight;
  std::uint64_t missing = 0;
  for (const auto& [name, loc] : ckpt.tensors) {
    const TensorEntry& e = ckpt.Entry(loc);
    if (!IsFp8(e.dtype) || LayerOf(name) >= ckpt.config.num_hidden_layers) continue;
    std::string scale = name + "_scale_inv";
    if (!HasRule(family, scale) && name.ends_with(".weight")) {  // DeepSeek-V4: X.scale
      scale = name.substr(0, name.size() - 6) + "scale";
    }
    if (ckpt.tensors.count(scale) > 0 || ckpt.tensors.count(name + "_scale") > 0 ||
        !HasRule(family, scale)) {
      continue;
    }
    ++missing;
    if (first.empty() || scale < first) {
      first = scale;
      weight = name + "' is stored as " + std::string(DTypeName(e.dtype));
    }
  }
  if (missing == 0) return Status::Ok();
  return Status::Corrupt(
      IncompleteMessage(ckpt, first, "'" + weight + ", which needs its block scales", missing));
}

Status ReportUnexpected(const Checkpoint& ckpt, Family family,
                        const std::vector<std::string>& names, UnexpectedTensors mode) {
  if (names.empty() || mode == UnexpectedTensors::kIgnore) return Status::Ok();
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  constexpr std::size_t kShown = 5;
  std::string list;
  for (std::size_t i = 0; i < sorted.size() && i < kShown; ++i) {
    list += (i ? ", " : "") + QuoteForMessage(sorted[i]);
  }
  if (sorted.size() > kShown) list += " and " + std::to_string(sorted.size() - kShown) + " more";
  const std::string what = std::to_string(sorted.size()) + " tensor" +
                           (sorted.size() == 1 ? "" : "s") + " that no " +
                           std::string(FamilyName(family)) + " rule knows: " + list;
  if (mode == UnexpectedTensors::kError) {
    return Status::Corrupt(ckpt.dir + ": " + what +
                           " (--unexpected-tensors warn or ignore skips them)");
  }
  spdlog::warn("{}: not loading {} (--unexpected-tensors error refuses them, ignore is silent)",
               ckpt.dir, what);
  return Status::Ok();
}

}  // namespace hoist::planner
