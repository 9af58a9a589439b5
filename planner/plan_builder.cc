// BuildLoadPlan: classify every checkpoint tensor with the family rules, group the tensors into
// output tensors (fused layout: qkv / gate_up / fused_qkv_a concatenations and per-layer expert
// stacks; hf layout: one output per tensor), then for each rank slice every part per its role,
// place the outputs in one aligned arena and emit 2-D copies and fills, sorted and coalesced.
#include "planner/plan_builder.h"

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <utility>

#include "planner/coalesce.h"
#include "planner/dedup.h"
#include "planner/model_checks.h"
#include "planner/plan_set.h"
#include "planner/rules.h"

namespace hoist::planner {
namespace {

constexpr std::uint64_t kVocabPad = 64;

struct Source {
  const TensorEntry* entry = nullptr;
  std::uint32_t file = 0;
  TensorRule rule;
  const TensorEntry* weight = nullptr;  // for a scale: its X.weight
};

// One output tensor before slicing (rank independent).
struct Group {
  std::string name;
  Fusion kind = Fusion::kNone;
  int slots = 1;
  std::vector<int> parts;                 // kNone / kConcat: source index per slot (-1: missing)
  std::vector<std::vector<int>> experts;  // kExpertStack: per expert, source index per slot
  std::pair<std::uint32_t, std::uint64_t> key{~0u, ~0ull};  // first (file, begin): arena order
};

// A rank's slice of a source viewed as a [R, C] matrix (C = product of the other dims).
struct Slice {
  std::uint64_t row0 = 0;
  std::uint64_t nrows = 0;
  std::uint64_t col0 = 0;
  std::uint64_t ncols = 0;
  std::uint64_t pad_rows = 0;  // zero rows appended (vocab padding)
  // A slice of dim split_dim > 0 (kExpertDim): the tensor viewed as [rows, view_cols] with
  // view_cols = shape[split_dim] x (the dims after it); split_len of shape[split_dim] kept.
  int split_dim = 0;
  std::uint64_t split_len = 0;
  std::uint64_t view_cols = 0;
};

struct Topo {
  int tp = 1;
  int dp = 1;
  int ep = 0;
  int world = 1;
  bool round_robin = false;  // expert placement under ep
};

std::uint64_t Rows(const TensorEntry& e) { return e.shape.empty() ? 1 : e.shape[0]; }
std::uint64_t Cols(const TensorEntry& e) {
  std::uint64_t c = 1;
  for (std::size_t i = 1; i < e.shape.size(); ++i) c *= e.shape[i];
  return c;
}
std::uint64_t AlignUp(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

std::string Sizes(const TensorEntry& e) { return ShapeString(e.shape); }

bool IsExpertRole(Role r) {
  return r == Role::kExpertGate || r == Role::kExpertUp || r == Role::kExpertDown;
}

int ExpertOwner(int expert, int num_experts, const Topo& topo, const PlanOptions& o) {
  if (o.placement == proto::PLACEMENT_ROUND_ROBIN) return expert % topo.ep;
  return expert / (num_experts / topo.ep);
}

// The effective slicing role of a source on this topology.
Role EffectiveRole(const Source& s, const Topo& topo) {
  Role r = s.rule.role;
  if (s.rule.param == Param::kQuantScale) {  // per-tensor, or per output channel of a row split
    const bool whole = s.rule.per_tensor || r == Role::kRow || r == Role::kExpertDown;
    if (whole || (topo.ep > 0 && IsExpertRole(r))) return Role::kReplicated;
  }
  if (r == Role::kRouter) return Role::kReplicated;
  if (IsExpertRole(r)) {
    if (topo.ep > 0) return Role::kReplicated;  // whole on its owner
    return r == Role::kExpertDown ? Role::kRow : Role::kColumn;
  }
  return r;
}

// Built only on the error paths (slicing runs once per tensor per rank).
std::string Who(const TensorEntry& e) { return "tensor '" + e.name + "' " + Sizes(e); }

Result<Slice> KvScaleSlice(const Source& s, const ModelConfig& cfg, BlockSize block,
                           std::uint64_t tp, int t, Slice sl);

// An FP8 block scale's slice: the blocks of its weight's column- or row-parallel shard.
Result<Slice> ScaleSlice(const Source& s, const ModelConfig& cfg, Role role, std::uint64_t tp,
                         int t, Slice sl) {
  const TensorEntry& e = *s.entry;
  const std::uint64_t R = Rows(e), C = Cols(e);
  const BlockSize block = BlockSizeOf(cfg);
  const TensorEntry& w = *s.weight;
  const bool column = role == Role::kColumn;
  if (role == Role::kKvHeads) return KvScaleSlice(s, cfg, block, tp, t, sl);
  if (role != Role::kColumn && role != Role::kRow) {
    return Status::Unsupported(Who(e) + ": FP8 block scales of a " + std::string(RoleName(role)) +
                               " tensor are not supported");
  }
  const std::uint64_t n = column ? Rows(w) : Cols(w);
  const std::uint64_t bsz = column ? block.rows : block.cols;
  const char* dim = column ? "rows" : "columns";
  if (n % tp != 0) {
    return Status::InvalidArgument("tensor '" + w.name + "' " + Sizes(w) + ": " +
                                   std::to_string(n) + " " + dim + " not divisible by tp " +
                                   std::to_string(tp));
  }
  const std::uint64_t shard = n / tp;
  if (shard % bsz != 0) {
    const std::uint64_t lo = t * shard, hi = lo + shard;
    const std::uint64_t blk = (lo % bsz != 0 ? lo : hi) / bsz;
    const std::string per_block =
        n % bsz == 0 ? std::to_string(n / bsz)
                     : std::to_string(n) + "/" + std::to_string(bsz) + ", not whole";
    return Status::InvalidArgument(
        Who(e) + ": the " + (column ? "column" : "row") + "-parallel shard of '" + w.name + "' " +
        Sizes(w) + " at tp " + std::to_string(tp) + " is " + dim + " [" + std::to_string(lo) +
        ", " + std::to_string(hi) + ") (" + std::to_string(shard) + " of N=" + std::to_string(n) +
        " per rank), which cuts FP8 scale block " + std::to_string(blk) + " (" + dim + " [" +
        std::to_string(blk * bsz) + ", " + std::to_string(blk * bsz + bsz) + "); blocks are " +
        std::to_string(block.rows) + "x" + std::to_string(block.cols) +
        "); use a tp that divides N/" + std::to_string(bsz) + " = " + per_block +
        ", or --ep for experts");
  }
  const std::uint64_t blocks = shard / bsz;
  if (column) {
    sl.row0 = t * blocks;
    sl.nrows = blocks;
  } else {
    if (e.shape.size() != 2)
      return Status::Unsupported(Who(e) + ": a row-parallel scale must be 2-D");
    sl.col0 = t * blocks;
    sl.ncols = blocks;
  }
  if (sl.row0 + sl.nrows > R || sl.col0 + sl.ncols > C) {
    return Status::Corrupt(Who(e) + ": scale shape disagrees with weight '" + w.name + "' " +
                           Sizes(w));
  }
  return sl;
}

Result<Slice> KvHeadSlice(const TensorEntry& e, const ModelConfig& cfg, std::uint64_t R,
                          std::uint64_t tp, int t, Slice sl);

// The FP8 block scale of a k/v projection: the scale rows of the weight's kv-head slice, which
// must start and end on block boundaries (vLLM narrows the scale at the same head).
Result<Slice> KvScaleSlice(const Source& s, const ModelConfig& cfg, BlockSize block,
                           std::uint64_t tp, int t, Slice sl) {
  const TensorEntry& w = *s.weight;
  HOIST_ASSIGN_OR_RETURN(Slice ws, KvHeadSlice(w, cfg, Rows(w), tp, t, Slice{0, Rows(w), 0, 0, 0}));
  if (ws.row0 % block.rows != 0 || ws.nrows % block.rows != 0) {
    return Status::InvalidArgument(
        Who(*s.entry) + ": at tp " + std::to_string(tp) + " rank " + std::to_string(t) +
        " holds rows [" + std::to_string(ws.row0) + ", " + std::to_string(ws.row0 + ws.nrows) +
        ") of '" + w.name + "' " + Sizes(w) + " (num_key_value_heads " +
        std::to_string(cfg.num_key_value_heads) + " x head_dim " + std::to_string(cfg.head_dim) +
        "), which do not fall on its " + std::to_string(block.rows) +
        "-row FP8 scale blocks; use a tp that gives each rank a multiple of " +
        std::to_string(block.rows) + " k/v rows");
  }
  sl.row0 = ws.row0 / block.rows;
  sl.nrows = ws.nrows / block.rows;
  if (sl.row0 + sl.nrows > Rows(*s.entry)) {
    return Status::Corrupt(Who(*s.entry) + ": scale shape disagrees with weight '" + w.name + "' " +
                           Sizes(w));
  }
  return sl;
}

// Key/value heads: a 1/tp share of the heads, or one head replicated over tp / heads ranks.
// `R` is the rows of the k or v part (all of e's rows, unless e is fused on disk).
Result<Slice> KvHeadSlice(const TensorEntry& e, const ModelConfig& cfg, std::uint64_t R,
                          std::uint64_t tp, int t, Slice sl) {
  const std::uint64_t kvh = static_cast<std::uint64_t>(cfg.num_key_value_heads);
  const std::uint64_t hd = static_cast<std::uint64_t>(cfg.head_dim);
  if (kvh == 0 || kvh * hd != R) {
    return Status::Corrupt(Who(e) + ": expected num_key_value_heads " + std::to_string(kvh) +
                           " x head_dim " + std::to_string(hd) + " rows");
  }
  if (tp <= kvh) {
    if (kvh % tp != 0) {
      return Status::InvalidArgument(Who(e) + ": num_key_value_heads " + std::to_string(kvh) +
                                     " is not divisible by tp " + std::to_string(tp) +
                                     "; use a tp that divides it or a multiple of it");
    }
    sl.row0 = t * (R / tp);
    sl.nrows = R / tp;
    return sl;
  }
  if (tp % kvh != 0) {
    return Status::InvalidArgument(Who(e) + ": tp " + std::to_string(tp) +
                                   " is larger than num_key_value_heads " + std::to_string(kvh) +
                                   " but not a multiple of it; use a tp that divides or is "
                                   "a multiple of " +
                                   std::to_string(kvh));
  }
  const std::uint64_t head = t / (tp / kvh);
  sl.row0 = head * hd;
  sl.nrows = hd;
  return sl;
}

// The shard [lo, hi) of X's N (column, kv heads) or K (row) that tp rank t holds, by the rules
// of X.weight.
Result<std::pair<std::uint64_t, std::uint64_t>> WeightRange(const Source& s, const ModelConfig& cfg,
                                                            Role role, std::uint64_t tp, int t) {
  const std::uint64_t n = role == Role::kRow ? s.rule.qk : s.rule.qn;
  if (role == Role::kKvHeads) {
    HOIST_ASSIGN_OR_RETURN(Slice ws, KvHeadSlice(*s.entry, cfg, n, tp, t, Slice{0, n, 0, 1, 0}));
    return std::make_pair(ws.row0, ws.row0 + ws.nrows);
  }
  if (n % tp != 0) {
    return Status::InvalidArgument(
        Who(*s.entry) + ": its layer's " + (role == Role::kRow ? "input" : "output") + " size " +
        std::to_string(n) + " is not divisible by tp " + std::to_string(tp) +
        "; use a tp that divides " + std::to_string(n));
  }
  return std::make_pair(t * (n / tp), (t + 1) * (n / tp));
}

// The tp values in [1, 64] whose shards of n (one kv head of hd rows past kvh heads, when kvh >
// 0) are multiples of div: "1, 2, 4".
std::string TpValuesThatWork(std::uint64_t n, std::uint64_t div, std::uint64_t kvh,
                             std::uint64_t hd) {
  std::string out;
  for (std::uint64_t tp = 1; tp <= 64; ++tp) {
    std::uint64_t shard = 0;
    if (kvh > 0 && tp > kvh) {
      shard = tp % kvh == 0 ? hd : 0;
    } else if (n % tp == 0) {
      shard = n / tp;
    }
    if (shard > 0 && shard % div == 0) out += (out.empty() ? "" : ", ") + std::to_string(tp);
  }
  return out.empty() ? "none" : out;
}

// A tensor of an integer / FP4 format: each dim on the split axis narrowed to the weight's shard
// over its divisor (pack factor or group size), the other dims whole.
Result<Slice> GroupedSlice(const Source& s, const ModelConfig& cfg, Role role, std::uint64_t tp,
                           int t, Slice sl) {
  const TensorEntry& e = *s.entry;
  if (role != Role::kColumn && role != Role::kRow && role != Role::kKvHeads) {
    return Status::Unsupported(Who(e) + ": a quantized " + std::string(RoleName(role)) +
                               " tensor is not supported");
  }
  const QuantAxis axis = role == Role::kRow ? QuantAxis::kK : QuantAxis::kN;
  HOIST_ASSIGN_OR_RETURN(auto range, WeightRange(s, cfg, role, tp, t));
  const auto [lo, hi] = range;
  for (std::size_t i = 0; i < s.rule.qdims.size(); ++i) {
    const QuantDim& d = s.rule.qdims[i];
    if (d.axis != axis || (axis == QuantAxis::kK && d.whole_when_row)) continue;
    if (lo % d.div != 0 || hi % d.div != 0) {
      const bool kv = role == Role::kKvHeads;
      return Status::InvalidArgument(
          Who(e) + ": at tp " + std::to_string(tp) + " rank " + std::to_string(t) + " holds " +
          (axis == QuantAxis::kN ? "output" : "input") + " channels [" + std::to_string(lo) + ", " +
          std::to_string(hi) + ") of " +
          std::to_string(axis == QuantAxis::kN ? s.rule.qn : s.rule.qk) +
          ", which cut this tensor's packs or groups of " + std::to_string(d.div) +
          "; tp values that work: " +
          TpValuesThatWork(axis == QuantAxis::kN ? s.rule.qn : s.rule.qk, d.div,
                           kv ? static_cast<std::uint64_t>(cfg.num_key_value_heads) : 0,
                           static_cast<std::uint64_t>(cfg.head_dim)) +
          (IsExpertRole(s.rule.role) ? " (or --ep for experts)" : ""));
    }
    if (i == 0) {
      sl.row0 = lo / d.div;
      sl.nrows = (hi - lo) / d.div;
    } else {
      sl.col0 = lo / d.div;
      sl.ncols = (hi - lo) / d.div;
    }
  }
  return sl;
}

// The vocabulary padded to a multiple of kVocabPad, then a 1/tp share (its tail zero rows).
Result<Slice> VocabSlice(const TensorEntry& e, std::uint64_t tp, int t, Slice sl) {
  const std::uint64_t R = Rows(e);
  const std::uint64_t vp = AlignUp(R, kVocabPad);
  if (vp % tp != 0) {
    return Status::InvalidArgument(Who(e) + ": padded vocab " + std::to_string(vp) +
                                   " is not divisible by tp " + std::to_string(tp));
  }
  const std::uint64_t per = vp / tp;
  const std::uint64_t a = t * per, b = a + per;
  sl.row0 = std::min(a, R);
  sl.nrows = std::min(b, R) - sl.row0;
  sl.pad_rows = per - sl.nrows;
  return sl;
}

// The expert intermediate range [s, e) of tp rank t: an even split, or MXFP4's 32-value blocks
// with the last rank shorter (vLLM: cdiv(I / 32, tp) x 32 per rank).
Result<std::pair<std::uint64_t, std::uint64_t>> ExpertRange(const TensorEntry& e,
                                                            const ModelConfig& cfg,
                                                            std::uint64_t tp, int t) {
  const std::uint64_t I = static_cast<std::uint64_t>(cfg.intermediate_size);
  if (cfg.quant_method != "mxfp4") {
    if (I % tp != 0) {
      return Status::InvalidArgument(Who(e) + ": intermediate_size " + std::to_string(I) +
                                     " is not divisible by tp " + std::to_string(tp) +
                                     "; use a tp that divides it, or --ep");
    }
    return std::make_pair(t * I / tp, (t + 1) * I / tp);
  }
  const std::uint64_t blocks = I / 32, per = (blocks + tp - 1) / tp * 32;
  const std::uint64_t s = t * per, end = std::min((t + 1) * per, I);
  if (s >= end) {
    std::uint64_t most = 1;  // the largest tp that leaves every rank a block
    for (std::uint64_t k = 1; k <= blocks; ++k) {
      if ((k - 1) * ((blocks + k - 1) / k) < blocks) most = k;
    }
    return Status::InvalidArgument(
        Who(e) + ": at tp " + std::to_string(tp) + " rank " + std::to_string(t) +
        " would hold none of intermediate_size " + std::to_string(I) + " (" +
        std::to_string(blocks) + " MXFP4 blocks of 32, " + std::to_string(per / 32) +
        " a rank, as vLLM splits them); use a tp of at most " + std::to_string(most) + ", or --ep");
  }
  return std::make_pair(s, end);
}

// Every routed expert of a layer in one tensor: the rank's experts under EP (rows of dim 0),
// else its share of the intermediate size along dim split_dim (tp rank 0 alone for a bias that
// is summed once, the others zeros).
Result<Slice> ExpertDimSlice(const Source& s, const ModelConfig& cfg, const Topo& topo, int t,
                             int rank, Slice sl) {
  const TensorEntry& e = *s.entry;
  const TensorRule& r = s.rule;
  if (topo.ep > 0) {
    if (topo.round_robin) {
      return Status::Unsupported(Who(e) +
                                 ": holds every expert of its layer in one tensor, whose "
                                 "experts a rank takes as one range: use --placement "
                                 "linear");
    }
    const std::uint64_t per = Rows(e) / static_cast<std::uint64_t>(topo.ep);
    sl.row0 = static_cast<std::uint64_t>(rank) * per;
    sl.nrows = per;
    return sl;
  }
  if (topo.tp == 1) return sl;
  if (r.rank0_only) {
    if (t != 0) std::swap(sl.nrows, sl.pad_rows);  // zeros on every rank but tp rank 0
    return sl;
  }
  HOIST_ASSIGN_OR_RETURN(auto range, ExpertRange(e, cfg, static_cast<std::uint64_t>(topo.tp), t));
  const std::uint64_t a = range.first * r.split_mul / r.split_div;
  const std::uint64_t b = range.second * r.split_mul / r.split_div;
  const std::size_t d = static_cast<std::size_t>(r.split_dim);
  std::uint64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < e.shape.size(); ++i) {
    if (i < d) outer *= e.shape[i];
    if (i > d) inner *= e.shape[i];
  }
  if (d == 0 || d >= e.shape.size() || b > e.shape[d]) {
    return Status::Internal(Who(e) + ": no dim " + std::to_string(d) + " range [" +
                            std::to_string(a) + ", " + std::to_string(b) + ")");
  }
  sl = Slice{
      0, outer, a * inner, (b - a) * inner, 0, static_cast<int>(d), b - a, e.shape[d] * inner};
  return sl;
}

Result<Slice> SliceFor(const Source& s, const ModelConfig& cfg, const Topo& topo, int t, int rank) {
  const TensorEntry& e = *s.entry;
  const std::uint64_t R = Rows(e), C = Cols(e);
  const std::uint64_t tp = static_cast<std::uint64_t>(topo.tp);
  Slice sl{0, R, 0, C, 0};
  const Role role = EffectiveRole(s, topo);
  if (role == Role::kExpertDim) return ExpertDimSlice(s, cfg, topo, t, rank, sl);
  if (role == Role::kReplicated || (tp == 1 && role != Role::kVocab)) return sl;
  if (s.rule.param == Param::kScale) return ScaleSlice(s, cfg, role, tp, t, sl);
  if (s.rule.param == Param::kGrouped) return GroupedSlice(s, cfg, role, tp, t, sl);
  switch (role) {
    case Role::kColumn: {
      if (R % tp != 0) {
        return Status::InvalidArgument(Who(e) + ": column-parallel dimension " + std::to_string(R) +
                                       " is not divisible by tp " + std::to_string(tp) +
                                       "; use a tp that divides " + std::to_string(R));
      }
      sl.row0 = t * (R / tp);
      sl.nrows = R / tp;
      return sl;
    }
    case Role::kRow: {
      if (e.shape.size() != 2) {
        return Status::Unsupported(Who(e) + ": row-parallel slicing needs a 2-D tensor");
      }
      if (C % tp != 0) {
        return Status::InvalidArgument(Who(e) + ": row-parallel dimension " + std::to_string(C) +
                                       " is not divisible by tp " + std::to_string(tp) +
                                       "; use a tp that divides " + std::to_string(C));
      }
      sl.col0 = t * (C / tp);
      sl.ncols = C / tp;
      return sl;
    }
    case Role::kKvHeads:
      return KvHeadSlice(e, cfg, R, tp, t, sl);
    case Role::kVocab:
      return VocabSlice(e, tp, t, sl);
    default:
      return Status::Internal(Who(e) + ": no slicing for role " + std::string(RoleName(role)));
  }
}

// A tensor fused on disk (phi3's qkv_proj, a conv1d over q/k/v): each part sliced by its own
// rule, the rank's slices in part order (vLLM's loaders for a fused checkpoint tensor).
Result<std::vector<Slice>> PartSlices(const Source& s, const ModelConfig& cfg, std::uint64_t tp,
                                      int t) {
  const TensorEntry& e = *s.entry;
  std::vector<Slice> out;
  std::uint64_t base = 0;
  for (const Part& part : s.rule.parts) {
    Slice sl{0, part.rows, 0, Cols(e), 0};
    if (part.kv_heads) {
      HOIST_ASSIGN_OR_RETURN(sl, KvHeadSlice(e, cfg, part.rows, tp, t, sl));
    } else if (part.rows % tp != 0) {
      return Status::InvalidArgument(Who(e) + ": its part of " + std::to_string(part.rows) +
                                     " rows at row " + std::to_string(base) +
                                     " is not divisible by tp " + std::to_string(tp));
    } else {
      sl.row0 = t * (part.rows / tp);
      sl.nrows = part.rows / tp;
    }
    sl.row0 += base;
    base += part.rows;
    out.push_back(sl);
  }
  if (base != Rows(e)) {
    return Status::Internal(Who(e) + ": parts cover " + std::to_string(base) + " rows");
  }
  return out;
}

// Every slice of source `idx` for tp rank `t`, appended to `pieces` in output order.
Status AddPieces(const Source& s, int idx, const ModelConfig& cfg, const Topo& topo, int t,
                 int rank, std::vector<std::pair<int, Slice>>* pieces) {
  if (s.rule.role == Role::kParts && topo.tp > 1) {
    HOIST_ASSIGN_OR_RETURN(std::vector<Slice> slices,
                           PartSlices(s, cfg, static_cast<std::uint64_t>(topo.tp), t));
    for (const Slice& sl : slices) pieces->emplace_back(idx, sl);
    return Status::Ok();
  }
  HOIST_ASSIGN_OR_RETURN(Slice sl, SliceFor(s, cfg, topo, t, rank));
  pieces->emplace_back(idx, sl);
  if (s.rule.halves && topo.ep == 0 && topo.tp > 1) {  // the same range of the up half
    sl.col0 += s.entry->shape[static_cast<std::size_t>(sl.split_dim)] / 2;
    pieces->emplace_back(idx, sl);
  }
  return Status::Ok();
}

std::vector<std::uint64_t> SlicedShape(const TensorEntry& e, const Slice& sl) {
  if (e.shape.empty()) return {};
  std::vector<std::uint64_t> shape = e.shape;
  if (sl.split_dim > 0) {
    shape[static_cast<std::size_t>(sl.split_dim)] = sl.split_len;
    return shape;
  }
  shape[0] = sl.nrows + sl.pad_rows;
  if (shape.size() == 2) shape[1] = sl.ncols;
  return shape;
}

struct RankBuild {
  std::vector<proto::Copy> copies;
  std::vector<proto::Fill> fills;
};

// Emits the copies (and padding fill) placing slice `sl` of `s` at arena offset `dst`.
// dst_pitch: the arena bytes between the slice's rows (0: its rows lie back to back).
void Emit(const Source& s, const Slice& sl, std::uint64_t dst, std::uint64_t data_start,
          RankBuild* out, std::uint64_t dst_pitch = 0) {
  const TensorEntry& e = *s.entry;
  const std::uint64_t es = DTypeSize(e.dtype);
  const std::uint64_t C = sl.view_cols > 0 ? sl.view_cols : Cols(e);
  const std::uint64_t row_bytes = C * es;
  const std::uint64_t src = data_start + e.begin + sl.row0 * row_bytes + sl.col0 * es;
  if (sl.nrows > 0 && sl.ncols > 0) {
    proto::Copy c;
    c.set_file(s.file);
    c.set_src_offset(src);
    c.set_dst_offset(dst);
    if (dst_pitch > 0 && dst_pitch != sl.ncols * es && sl.nrows > 1) {
      c.set_width(sl.ncols * es);
      c.set_rows(sl.nrows);
      c.set_src_pitch(row_bytes);
      c.set_dst_pitch(dst_pitch);
    } else if (sl.ncols == C || sl.nrows == 1) {
      c.set_width(sl.nrows * sl.ncols * es);
      c.set_rows(1);
    } else {
      c.set_width(sl.ncols * es);
      c.set_rows(sl.nrows);
      c.set_src_pitch(row_bytes);
      c.set_dst_pitch(sl.ncols * es);
    }
    out->copies.push_back(std::move(c));
  }
  if (sl.pad_rows > 0) {
    proto::Fill f;
    f.set_dst_offset(dst + sl.nrows * sl.ncols * es);
    f.set_bytes(sl.pad_rows * sl.ncols * es);
    f.set_value(0);
    out->fills.push_back(f);
  }
}

// Slice `sl` (whole rows, whole heads) of a q/k weight with each head's rows de-interleaved:
// rows 0, 2, 4, ... then 1, 3, 5, ... (vLLM's Llama 4 permute for neox-style rotary).
void EmitRotaryPairs(const Source& s, const Slice& sl, std::uint64_t dst, std::uint64_t data_start,
                     RankBuild* out) {
  const TensorEntry& e = *s.entry;
  const std::uint64_t hd = s.rule.rotary_head_dim;
  const std::uint64_t row_bytes = Cols(e) * DTypeSize(e.dtype);
  for (std::uint64_t h = 0; h < sl.nrows; h += hd) {
    for (std::uint64_t p = 0; p < 2; ++p) {
      proto::Copy c;
      c.set_file(s.file);
      c.set_src_offset(data_start + e.begin + (sl.row0 + h + p) * row_bytes);
      c.set_dst_offset(dst + (h + p * hd / 2) * row_bytes);
      c.set_width(row_bytes);
      c.set_rows(hd / 2);
      c.set_src_pitch(2 * row_bytes);
      c.set_dst_pitch(row_bytes);
      out->copies.push_back(std::move(c));
    }
  }
}

void SortAndCoalesce(RankBuild* b) {
  CoalesceCopies(&b->copies);

  auto& fs = b->fills;
  std::sort(fs.begin(), fs.end(), [](const proto::Fill& a, const proto::Fill& c) {
    return a.dst_offset() < c.dst_offset();
  });
  std::size_t w = 0;
  for (std::size_t i = 0; i < fs.size(); ++i) {
    if (w > 0 && fs[w - 1].value() == fs[i].value() &&
        fs[w - 1].dst_offset() + fs[w - 1].bytes() == fs[i].dst_offset()) {
      fs[w - 1].set_bytes(fs[w - 1].bytes() + fs[i].bytes());
      continue;
    }
    if (w != i) fs[w] = fs[i];
    ++w;
  }
  fs.resize(w);
}

// The options were validated (ValidatePlanOptions): sizes are in range, world fits an int.
Topo ResolveTopology(const PlanOptions& o) {
  Topo t;
  t.tp = o.tp;
  t.ep = o.ep;
  t.dp = o.ep > 0 ? o.ep / o.tp : o.dp;
  t.world = t.tp * t.dp;
  t.round_robin = o.placement == proto::PLACEMENT_ROUND_ROBIN;
  return t;
}

// Adds `idx` to the group for `name`, creating it.
Status AddToGroup(std::vector<Group>* groups, std::unordered_map<std::string, int>* by_name,
                  const std::vector<Source>& sources, int idx, const ModelConfig& cfg, bool fused) {
  const Source& s = sources[idx];
  const TensorRule& r = s.rule;
  const Fusion kind = fused ? r.fusion : Fusion::kNone;
  const std::string& name = kind == Fusion::kNone ? s.entry->name : r.fused_name;
  auto [it, inserted] = by_name->emplace(name, static_cast<int>(groups->size()));
  if (inserted) {
    Group g;
    g.name = name;
    g.kind = kind;
    g.slots = kind == Fusion::kNone ? 1 : r.slots;
    if (kind == Fusion::kExpertStack) {
      g.experts.assign(static_cast<std::size_t>(cfg.num_experts), std::vector<int>(g.slots, -1));
    } else {
      g.parts.assign(g.slots, -1);
    }
    groups->push_back(std::move(g));
  }
  Group& g = (*groups)[it->second];
  if (g.kind != kind || g.slots != (kind == Fusion::kNone ? 1 : r.slots)) {
    return Status::Corrupt("tensor '" + s.entry->name + "' maps to output '" + name +
                           "', which is also an output of a different kind");
  }
  int* slot = nullptr;
  if (kind == Fusion::kExpertStack) {
    slot = &g.experts[static_cast<std::size_t>(r.expert)][r.slot];
  } else {
    slot = &g.parts[kind == Fusion::kNone ? 0 : r.slot];
  }
  if (*slot >= 0) {
    return Status::Corrupt("tensors '" + sources[*slot].entry->name + "' and '" + s.entry->name +
                           "' both map to output '" + name + "'");
  }
  *slot = idx;
  g.key = std::min(g.key, std::make_pair(s.file, s.entry->begin));
  return Status::Ok();
}

Status CheckGroup(const Group& g, const std::vector<Source>& sources) {
  const TensorEntry* first = nullptr;
  auto check = [&](int idx, const std::string& what) -> Status {
    if (idx < 0) {
      return Status::Corrupt("fused output '" + g.name + "' is missing " + what +
                             (first ? " (present: '" + first->name + "')" : ""));
    }
    const TensorEntry& e = *sources[idx].entry;
    if (first == nullptr) {
      first = &e;
      return Status::Ok();
    }
    // Parts stack along dim 0 (equal columns), GPTQ/AWQ tensors along dim 1 (equal rows).
    const bool along_cols = sources[idx].rule.concat_dim == 1;
    const bool fits = along_cols ? Rows(e) == Rows(*first) : Cols(e) == Cols(*first);
    if (e.dtype != first->dtype || e.shape.size() != first->shape.size() ||
        (e.shape.size() >= 2 && !fits)) {
      return Status::Corrupt("fused output '" + g.name + "': tensor '" + e.name + "' " +
                             std::string(DTypeName(e.dtype)) + " " + Sizes(e) +
                             " does not stack with '" + first->name + "' " +
                             std::string(DTypeName(first->dtype)) + " " + Sizes(*first));
    }
    return Status::Ok();
  };
  if (g.kind == Fusion::kExpertStack) {
    for (std::size_t e = 0; e < g.experts.size(); ++e) {
      for (int s = 0; s < g.slots; ++s) {
        HOIST_RETURN_IF_ERROR(
            check(g.experts[e][s], "expert " + std::to_string(e) + " part " + std::to_string(s)));
      }
    }
  } else {
    for (int s = 0; s < g.slots; ++s) {
      HOIST_RETURN_IF_ERROR(
          check(g.parts[s], "part " + std::to_string(s) + " of " + std::to_string(g.slots)));
    }
  }
  return Status::Ok();
}

// A packed checkpoint: where each tensor's logical bytes are and its codec streams.
void AddPackedTensors(const Checkpoint& ckpt, proto::LoadPlan* plan) {
  for (const PackedTensorEntry& t : ckpt.packed->tensors) {
    auto it = ckpt.tensors.find(t.name);
    if (it == ckpt.tensors.end()) continue;  // a vision tower's: never read
    const TensorLocation& loc = it->second;
    proto::PackedTensor* pt = plan->add_packed();
    pt->set_name(t.name);
    pt->set_file(loc.file);
    pt->set_offset(ckpt.Entry(loc).begin);
    pt->set_bytes(t.original_bytes);
    pt->set_row_values(t.row_values);
    pt->set_dtype(t.dtype);
    pt->set_value_bytes(static_cast<std::uint32_t>(DTypeSize(ckpt.Entry(loc).dtype)));
    pt->set_xxh64(t.xxh64);
    pt->set_name_xxh64(t.name_xxh64);
    for (const PackedStreamEntry& s : t.streams) {
      proto::PackedStream* ps = pt->add_streams();
      ps->set_offset(s.offset);
      ps->set_bytes(s.bytes);
      ps->set_col_begin(s.col_begin);
      ps->set_col_end(s.col_end);
      ps->set_header(s.header);
    }
  }
}

// Step 1's product: the plan's sources in file order, with the checkpoint's totals.
struct Classified {
  std::vector<Source> sources;
  std::uint64_t tensors = 0, bytes = 0;  // every indexed tensor, skipped ones included
};

// Corrupt when e's dtype x shape is not its byte count (or overflows 64 bits). The safetensors
// parser checks the same with its own message; this backstop covers entries made any other way.
Status CheckEntryBytes(const TensorEntry& e, const ShardFile& file) {
  std::uint64_t n = 1;
  bool wrapped = false;
  for (auto d : e.shape) wrapped |= __builtin_mul_overflow(n, d, &n);
  wrapped |= __builtin_mul_overflow(n, static_cast<std::uint64_t>(DTypeSize(e.dtype)), &n);
  if (!wrapped && n == e.bytes()) return Status::Ok();
  return Status::Corrupt("tensor '" + e.name + "' in " + file.rel_path + " at offset " +
                         std::to_string(e.begin) + ": dtype x shape " +
                         (wrapped ? "overflows 64 bits" : "= " + std::to_string(n) + " bytes") +
                         ", but its byte range is " + std::to_string(e.bytes()) + " bytes");
}

bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

// `scale` (X.weight + suffix) is the scale of an FP8 X.weight.
bool IsFp8Weight(const Checkpoint& ckpt, const std::string& scale, std::string_view suffix) {
  if (scale.size() <= suffix.size() ||
      scale.compare(scale.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const TensorEntry* w = ckpt.Find(std::string_view(scale).substr(0, scale.size() - suffix.size()));
  return w != nullptr && IsFp8(w->dtype);
}

// 1. Classifies every indexed tensor, in file order, then checks the set is complete: a tensor on
// the wrong kind of layer names the config disagreement more exactly than the implied tensors it
// leaves missing, so completeness is checked after classification.
Result<Classified> ClassifySources(const Checkpoint& ckpt, Family family,
                                   const PlanOptions& options) {
  const ModelConfig& cfg = ckpt.config;
  Classified c;
  c.sources.reserve(ckpt.tensors.size());
  std::vector<std::string> unexpected;            // no rule of the family knows them
  std::uint64_t fp8_weights = 0, fp8_scaled = 0;  // FP8 weights that need a scale / have one
  Status orphan_scale;                            // the first scale whose weight is absent
  for (std::uint32_t f = 0; f < ckpt.files.size(); ++f) {
    const ShardFile& file = ckpt.files[f];
    for (std::uint32_t i = 0; i < file.header.tensors.size(); ++i) {
      const TensorEntry& e = file.header.tensors[i];
      auto it = ckpt.tensors.find(e.name);
      if (it == ckpt.tensors.end() || it->second.file != f || it->second.entry != i) continue;
      ++c.tensors;
      c.bytes += e.bytes();
      Result<TensorRule> classified = ClassifyTensor(cfg, family, e.name, e.shape, file.rel_path);
      if (classified.status().code() == Code::kNotFound) {
        unexpected.push_back(e.name);
        continue;
      }
      HOIST_ASSIGN_OR_RETURN(TensorRule rule, std::move(classified));
      if (rule.role == Role::kSkip) continue;
      HOIST_RETURN_IF_ERROR(CheckEntryBytes(e, file));
      if (rule.param == Param::kWeight && rule.scalable && IsFp8(e.dtype)) ++fp8_weights;
      fp8_scaled += rule.param == Param::kQuantScale && IsFp8Weight(ckpt, e.name, "_scale");
      Source s{&e, f, std::move(rule), nullptr};
      if (s.rule.param == Param::kScale) {
        const std::string wname = ScaleWeightName(e.name);  // X.weight_scale_inv, X.scale
        auto w = ckpt.tensors.find(wname);
        if (w == ckpt.tensors.end()) {  // reported after the completeness check, which names
          if (orphan_scale.ok()) {      // the missing weight with the config key implying it
            orphan_scale = Status::Corrupt("tensor '" + e.name + "' in " + file.rel_path +
                                           ": FP8 scale without its weight '" + wname + "'");
          }
          continue;
        }
        s.weight = &ckpt.Entry(w->second);
        fp8_scaled += IsFp8(s.weight->dtype);
      }
      c.sources.push_back(std::move(s));
    }
  }
  HOIST_RETURN_IF_ERROR(CheckComplete(ckpt, family));
  HOIST_RETURN_IF_ERROR(orphan_scale);
  HOIST_RETURN_IF_ERROR(ReportUnexpected(ckpt, family, unexpected, options.unexpected));
  if (fp8_scaled < fp8_weights) HOIST_RETURN_IF_ERROR(CheckScales(ckpt, family));
  return c;
}

// 2. Groups the sources into output tensors, checks each group is complete and consistent, and
// orders them as the arena will (by their first source's file and offset).
Result<std::vector<Group>> GroupSources(const std::vector<Source>& sources, const ModelConfig& cfg,
                                        bool fused) {
  std::vector<Group> groups;
  std::unordered_map<std::string, int> by_name;
  by_name.reserve(sources.size());
  for (int i = 0; i < static_cast<int>(sources.size()); ++i) {
    HOIST_RETURN_IF_ERROR(AddToGroup(&groups, &by_name, sources, i, cfg, fused));
  }
  for (const Group& g : groups) HOIST_RETURN_IF_ERROR(CheckGroup(g, sources));
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& a, const Group& b) { return a.key < b.key; });
  return groups;
}

// The weights' format for the plan summary: the dtype holding most of the bytes of the linear
// layers that may be quantized, and their scales (FP8 blocks, per channel or per tensor).
// "GPTQ 4-bit, groups of 32, act order" for an integer / FP4 format; "" for others.
std::string GroupedFormatOf(const ModelConfig& c) {
  const QuantScheme scheme = SchemeOf(c);
  if (scheme == QuantScheme::kNone) return "";
  std::string out(SchemeName(scheme));
  const bool fp4 = scheme == QuantScheme::kNvfp4 || scheme == QuantScheme::kNvfp4Ct;
  if (!fp4) out += " " + std::to_string(c.quant_bits) + "-bit";
  const std::int64_t g = c.quant_group_size > 0 ? c.quant_group_size : (fp4 ? 16 : 0);
  out += g > 0 ? ", groups of " + std::to_string(g) : ", one group per output channel";
  if (c.quant_act_order) out += ", act order";
  if (scheme == QuantScheme::kWna16 && !c.quant_symmetric) out += ", zero points";
  return out;
}

std::string FormatOf(const Checkpoint& ckpt, const std::vector<Source>& sources) {
  if (std::string grouped = GroupedFormatOf(ckpt.config); !grouped.empty()) return grouped;
  std::unordered_map<std::string, std::uint64_t> bytes;
  bool block = false, channel = false, tensor = false;
  for (const Source& s : sources) {
    const TensorRule& r = s.rule;
    if (r.param == Param::kWeight && r.scalable) {
      bytes[std::string(DTypeName(s.entry->dtype))] += s.entry->bytes();
    }
    block = block || r.param == Param::kScale;
    channel = channel || (r.param == Param::kQuantScale && !r.per_tensor);
    tensor = tensor || (r.param == Param::kQuantScale && r.per_tensor);
  }
  std::string top;
  for (const auto& [dtype, n] : bytes) {
    if (top.empty() || n > bytes[top] || (n == bytes[top] && dtype < top)) top = dtype;
  }
  const BlockSize b = BlockSizeOf(ckpt.config);
  if (block && b.rows > 0) {
    top += ", " + std::to_string(b.rows) + "x" + std::to_string(b.cols) + " block scales";
  }
  const Result<Family> family = FamilyOf(ckpt.config);
  if (ckpt.config.quant_method == "mxfp4" || (family.ok() && Mxfp4Experts(ckpt.config, *family))) {
    top += ", MXFP4 experts";
  }
  if (channel) top += ", per-channel scales";
  if (tensor) top += ", per-tensor scales";
  return top;
}

// 3. The plan header: model, layout, topology and files (and a packed checkpoint's streams).
proto::LoadPlan PlanHeader(const Checkpoint& ckpt, const PlanOptions& options, const Topo& topo,
                           const Classified& c) {
  proto::LoadPlan plan;
  plan.set_version(kPlanFormat);
  plan.set_model_dir(ckpt.dir);
  plan.set_model_type(ckpt.config.model_type);
  plan.set_format(FormatOf(ckpt, c.sources));
  plan.set_vision_tensors(ckpt.vision_tensors);
  plan.set_layout(options.layout);
  plan.set_alignment(options.alignment);
  plan.set_source_tensors(c.tensors);
  plan.set_source_bytes(c.bytes);
  proto::Topology* pt = plan.mutable_topology();
  pt->set_world(topo.world);
  pt->set_tp(topo.tp);
  pt->set_dp(topo.dp);
  pt->set_ep(topo.ep);
  pt->set_placement(options.placement);
  std::uint32_t max_node = 0;
  for (const auto& l : options.locations) max_node = std::max(max_node, l.node);
  pt->set_nodes(max_node + 1);
  for (const ShardFile& f : ckpt.files) {
    proto::File* pf = plan.add_files();
    pf->set_path(f.abs_path);
    pf->set_size(f.stat.size);
    pf->set_mtime_ns(f.stat.mtime_ns);
    pf->set_data_start(f.header.data_start);
    if (ckpt.packed) {
      pf->set_packed(true);
      pf->set_logical_size(f.header.tensors.empty() ? 0 : f.header.tensors.back().end);
    }
  }
  if (ckpt.packed) AddPackedTensors(ckpt, &plan);
  return plan;
}

// What step 4 needs of steps 1-3, for every rank alike.
struct RankInputs {
  const Checkpoint& ckpt;
  const PlanOptions& options;
  const Topo& topo;
  const std::vector<Source>& sources;
  const std::vector<Group>& groups;
};

// Rank `rank`'s pieces of group g (source index and slice, in output order) and how many of its
// experts the rank holds (expert stacks; 0 for other groups). No pieces: another rank's experts.
Status PiecesFor(const RankInputs& in, const Group& g, int rank,
                 std::vector<std::pair<int, Slice>>* pieces, std::uint64_t* local_experts) {
  const ModelConfig& cfg = in.ckpt.config;
  const Topo& topo = in.topo;
  const int t = rank % topo.tp, num_experts = static_cast<int>(cfg.num_experts);
  pieces->clear();
  *local_experts = 0;
  // A fused tensor with no output dim (g_idx, weight_shape) is slot 0's alone (vLLM's fused
  // parameter holds one copy; the slots share the layer input).
  const auto skip = [&](int idx) {
    const TensorRule& r = in.sources[idx].rule;
    return g.kind != Fusion::kNone && r.param == Param::kGrouped && r.concat_dim < 0 && r.slot > 0;
  };
  if (g.kind == Fusion::kExpertStack) {
    for (int e = 0; e < static_cast<int>(g.experts.size()); ++e) {
      if (topo.ep > 0 && ExpertOwner(e, num_experts, topo, in.options) != rank) continue;
      ++*local_experts;
      for (int idx : g.experts[e]) {
        if (skip(idx)) continue;
        HOIST_RETURN_IF_ERROR(AddPieces(in.sources[idx], idx, cfg, topo, t, rank, pieces));
      }
    }
    return Status::Ok();
  }
  const Source& first = in.sources[g.parts[0]];
  if (g.kind == Fusion::kNone && topo.ep > 0 && first.rule.expert >= 0 &&
      IsExpertRole(first.rule.role) &&
      ExpertOwner(first.rule.expert, num_experts, topo, in.options) != rank) {
    return Status::Ok();  // hf layout under EP: another rank's expert
  }
  for (int idx : g.parts) {
    if (skip(idx)) continue;
    HOIST_RETURN_IF_ERROR(AddPieces(in.sources[idx], idx, cfg, topo, t, rank, pieces));
  }
  return Status::Ok();
}

// A fused output whose parts lie side by side along dim 1 (GPTQ/AWQ tensors keep the output
// dim last: qkv_proj.qweight [K/8, Nq + Nk + Nv]), per expert for stacks; its bytes.
Result<std::uint64_t> EmitAlongColumns(const RankInputs& in, const Group& g,
                                       const std::vector<std::pair<int, Slice>>& pieces,
                                       std::uint64_t local_experts, std::uint64_t offset,
                                       proto::TensorOut* to, RankBuild* build) {
  const TensorEntry& e0 = *in.sources[pieces[0].first].entry;
  const std::uint64_t es = DTypeSize(e0.dtype);
  const std::uint64_t blocks = g.kind == Fusion::kExpertStack ? local_experts : 1;
  const std::size_t per = pieces.size() / blocks;
  const std::uint64_t rows = pieces[0].second.nrows;
  std::uint64_t cols = 0;
  for (std::size_t i = 0; i < per; ++i) cols += pieces[i].second.ncols;
  const bool even = pieces.size() % blocks == 0 &&
                    std::all_of(pieces.begin(), pieces.end(),
                                [&](const auto& p) { return p.second.nrows == rows; });
  if (!even) return Status::Internal("output '" + g.name + "': parts of unequal rows");
  std::vector<std::uint64_t> shape = {rows, cols};
  if (g.kind == Fusion::kExpertStack) shape.insert(shape.begin(), local_experts);
  if (pieces[0].second.split_dim > 0) {  // halves of a dim-last split: [..., cols]
    shape = e0.shape;
    shape.back() = cols;
  }
  to->set_name(g.name);
  to->set_dtype(std::string(DTypeName(e0.dtype)));
  for (auto d : shape) to->add_shape(d);
  to->set_arena_offset(offset);
  to->set_bytes(blocks * rows * cols * es);
  std::uint64_t col = 0;  // the piece's first column within its block
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto& [idx, sl] = pieces[i];
    if (i % per == 0) col = 0;
    const std::uint64_t block = offset + (i / per) * rows * cols * es;
    const Source& s = in.sources[idx];
    Emit(s, sl, block + col * es, in.ckpt.files[s.file].header.data_start, build, cols * es);
    col += sl.ncols;
  }
  return blocks * rows * cols * es;
}

// The output tensor of `pieces` at arena offset `offset`: shape (a concatenation along dim 0,
// per expert for stacks) into `to`, its copies and fills into `build`; returns its bytes.
Result<std::uint64_t> EmitGroup(const RankInputs& in, const Group& g,
                                const std::vector<std::pair<int, Slice>>& pieces,
                                std::uint64_t local_experts, std::uint64_t offset,
                                proto::TensorOut* to, RankBuild* build) {
  const TensorRule& r0 = in.sources[pieces[0].first].rule;
  if ((g.kind != Fusion::kNone && r0.param == Param::kGrouped && r0.concat_dim == 1) ||
      (r0.halves && pieces.size() > 1)) {
    return EmitAlongColumns(in, g, pieces, local_experts, offset, to, build);
  }
  const TensorEntry& e0 = *in.sources[pieces[0].first].entry;
  std::vector<std::uint64_t> shape = SlicedShape(e0, pieces[0].second);
  // Scalars (FP8 per-tensor scales) of a fused output line up along a new dimension, as vLLM's
  // per-partition scales do: qkv_proj's [3], w13's [E, 2], w2's [E].
  if (shape.empty() && g.kind != Fusion::kNone && g.slots > 1) shape = {1};
  std::uint64_t rows = 0;
  for (const auto& [idx, sl] : pieces) {
    rows += sl.split_dim > 0 ? Rows(*in.sources[idx].entry) : sl.nrows + sl.pad_rows;
  }
  if (g.kind == Fusion::kExpertStack) {
    if (!shape.empty()) shape[0] = rows / local_experts;
    // One per-tensor scale an expert ([] or [1] on disk): [E], as vLLM's w2 scales.
    if (g.slots == 1 && r0.param == Param::kQuantScale && r0.per_tensor) shape.clear();
    shape.insert(shape.begin(), local_experts);
  } else if (!shape.empty()) {
    shape[0] = rows;
  }
  const std::uint64_t es = DTypeSize(e0.dtype);
  std::uint64_t elems = 1;
  for (auto d : shape) elems *= d;
  const std::uint64_t bytes = elems * es;
  to->set_name(g.name);
  to->set_dtype(std::string(DTypeName(e0.dtype)));
  for (auto d : shape) to->add_shape(d);
  to->set_arena_offset(offset);
  to->set_bytes(bytes);
  std::uint64_t dst = offset;
  for (const auto& [idx, sl] : pieces) {
    const Source& s = in.sources[idx];
    const std::uint64_t data_start = in.ckpt.files[s.file].header.data_start;
    if (g.kind != Fusion::kNone && s.rule.rotary_head_dim > 0) {
      EmitRotaryPairs(s, sl, dst, data_start, build);
    } else {
      Emit(s, sl, dst, data_start, build);
    }
    dst += (sl.nrows + sl.pad_rows) * sl.ncols * es;
  }
  if (dst != offset + bytes) {
    return Status::Internal("output '" + g.name + "': pieces cover " +
                            std::to_string(dst - offset) + " bytes of " + std::to_string(bytes));
  }
  return bytes;
}

// A tensor vLLM transposes at load (gpt_oss's and Llama 4's 3-D BF16 experts): its copies land
// the checkpoint's orientation, [..., rows, cols], which the rank then swaps in place; the
// output's shape is the swapped one, [..., cols, rows].
void MarkTransposed(proto::TensorOut* to) {
  const int n = to->shape_size();
  if (n < 2) return;
  std::uint64_t batch = 1;
  for (int i = 0; i + 2 < n; ++i) batch *= to->shape(i);
  proto::Transpose* t = to->mutable_transpose();
  t->set_batch(batch);
  t->set_rows(to->shape(n - 2));
  t->set_cols(to->shape(n - 1));
  to->set_shape(n - 2, t->cols());
  to->set_shape(n - 1, t->rows());
}

// 4. Rank `rank`: its place, then every group sliced, placed in one aligned arena and emitted.
Status AddRank(const RankInputs& in, int rank, proto::LoadPlan* plan) {
  const Topo& topo = in.topo;
  proto::RankPlan* rp = plan->add_ranks();
  rp->set_rank(rank);
  rp->set_tp_rank(rank % topo.tp);
  rp->set_dp_rank(rank / topo.tp);
  if (in.options.locations.empty()) {
    rp->set_node(0);
    rp->set_gpu(rank);
  } else {
    rp->set_node(in.options.locations[rank].node);
    rp->set_gpu(in.options.locations[rank].gpu);
  }
  RankBuild build;
  std::uint64_t cursor = 0, payload = 0;
  std::vector<std::pair<int, Slice>> pieces;
  for (const Group& g : in.groups) {
    std::uint64_t local_experts = 0;
    HOIST_RETURN_IF_ERROR(PiecesFor(in, g, rank, &pieces, &local_experts));
    if (pieces.empty()) continue;
    const std::uint64_t offset = AlignUp(cursor, in.options.alignment);
    proto::TensorOut* to = rp->add_tensors();
    HOIST_ASSIGN_OR_RETURN(std::uint64_t bytes,
                           EmitGroup(in, g, pieces, local_experts, offset, to, &build));
    if (in.options.layout == proto::LAYOUT_FUSED && in.sources[pieces[0].first].rule.transposed) {
      MarkTransposed(to);
    }
    cursor = offset + bytes;
    payload += bytes;
  }
  SortAndCoalesce(&build);
  rp->mutable_copies()->Reserve(static_cast<int>(build.copies.size()));
  for (auto& c : build.copies) *rp->add_copies() = std::move(c);
  for (auto& f : build.fills) *rp->add_fills() = std::move(f);
  rp->set_arena_bytes(AlignUp(cursor, in.options.alignment));
  rp->set_payload_bytes(payload);
  return Status::Ok();
}

// A class's plan without the fields of one rank (plan_set.h fills them per rank).
void ClearPlace(proto::RankPlan* rp) {
  rp->set_rank(0);
  rp->set_node(0);
  rp->set_gpu(0);
  rp->set_dp_rank(0);
}

}  // namespace

Result<proto::LoadPlan> BuildCompactPlan(const Checkpoint& ckpt, const PlanOptions& options) {
  HOIST_RETURN_IF_ERROR(ValidatePlanOptions(options));
  HOIST_ASSIGN_OR_RETURN(Family family, FamilyOf(ckpt.config));
  HOIST_RETURN_IF_ERROR(CheckQuantization(ckpt, family));
  HOIST_RETURN_IF_ERROR(CheckParallelism(ckpt, family, options));
  const Topo topo = ResolveTopology(options);
  HOIST_ASSIGN_OR_RETURN(Classified classified, ClassifySources(ckpt, family, options));
  HOIST_ASSIGN_OR_RETURN(
      std::vector<Group> groups,
      GroupSources(classified.sources, ckpt.config, options.layout == proto::LAYOUT_FUSED));
  proto::LoadPlan plan = PlanHeader(ckpt, options, topo, classified);
  plan.set_family(std::string(FamilyName(family)));
  plan.set_compact(true);
  const RankInputs in{ckpt, options, topo, classified.sources, groups};
  // Replicas load the same slices: one plan per tp rank, or per rank under ep (its experts).
  const int classes = topo.ep > 0 ? topo.world : topo.tp;
  for (int c = 0; c < classes; ++c) {
    HOIST_RETURN_IF_ERROR(AddRank(in, c, &plan));
    ClearPlace(plan.mutable_ranks(c));
  }
  for (const RankLocation& l : options.locations) {
    plan.mutable_placement()->add_node(l.node);
    plan.mutable_placement()->add_gpu(l.gpu);
  }
  HOIST_RETURN_IF_ERROR(
      ApplyCompactDedup({options.dedup, options.dedup_step_bytes, options.gpu_peers,
                         options.host_rates, options.dedup_chunk_bytes},
                        &plan));
  return plan;
}

Result<proto::LoadPlan> BuildLoadPlan(const Checkpoint& ckpt, const PlanOptions& options) {
  HOIST_ASSIGN_OR_RETURN(proto::LoadPlan compact, BuildCompactPlan(ckpt, options));
  return ExpandPlan(compact);
}

}  // namespace hoist::planner
