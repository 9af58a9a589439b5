// Checkpoint folder reading: config.json, the index or the single file, every shard's header.
// See checkpoint.h for the contract.
#include "planner/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "planner/confine.h"
#include "planner/regular_file.h"
#include "planner/strict_json.h"
#include "util/file_kind.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using internal::JsonTypeName;
using internal::QuoteForMessage;

constexpr std::string_view kConfigName = "config.json";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleFileName = "model.safetensors";
// config.json and the index are small (DeepSeek-V3's index is ~9 MB); refuse absurd ones.
constexpr std::uint64_t kMaxJsonFileBytes = 256ull << 20;
// config.json nests a little (quantization_config, rope_scaling, text_config...).
constexpr int kMaxConfigDepth = 16;
// The index: top level > weight_map / metadata > values.
constexpr int kMaxIndexDepth = 3;
// config.json sizes: every integer at most 2^30 (so products of two dimensions fit in 64 bits),
// layers and experts at most 65536, integer arrays at most 65536 entries. Real models are far
// below (DeepSeek-V3: 61 layers, 256 experts, 129280 vocab).
constexpr std::int64_t kMaxConfigInt = 1ll << 30;
constexpr std::int64_t kMaxLayers = 65536;
constexpr std::int64_t kMaxExperts = 65536;
constexpr std::int64_t kMaxConfigArray = 65536;

// ---- config.json --------------------------------------------------------------------------

Status WrongType(std::string_view label, std::string_view key, std::string_view expected,
                 const json& got) {
  return Status::Corrupt(std::string(label) + ": key \"" + std::string(key) + "\" must be " +
                         std::string(expected) + ", got " + std::string(JsonTypeName(got)));
}

// Absent and null both mean "not set" (HF writes null for unset optional fields).
const json* Lookup(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Status OutOfRange(std::string_view label, std::string_view key, std::uint64_t value,
                  std::int64_t max) {
  return Status::Corrupt(std::string(label) + ": key \"" + std::string(key) +
                         "\" = " + std::to_string(value) + " is out of range: at most " +
                         std::to_string(max));
}

Status GetInt(std::string_view label, const json& obj, std::string_view key, std::int64_t* out,
              bool* found = nullptr, std::int64_t max = kMaxConfigInt) {
  if (found) *found = false;
  const json* v = Lookup(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_unsigned()) return WrongType(label, key, "a non-negative integer", *v);
  const auto value = v->get<std::uint64_t>();
  if (value > static_cast<std::uint64_t>(max)) return OutOfRange(label, key, value, max);
  *out = static_cast<std::int64_t>(value);
  if (found) *found = true;
  return Status::Ok();
}

Status GetRequiredPositiveInt(std::string_view label, const json& obj, std::string_view key,
                              std::int64_t* out, std::int64_t max = kMaxConfigInt) {
  bool found = false;
  HOIST_RETURN_IF_ERROR(GetInt(label, obj, key, out, &found, max));
  if (!found) {
    return Status::Corrupt(std::string(label) + ": missing required key \"" + std::string(key) +
                           "\"");
  }
  if (*out <= 0) {
    return Status::Corrupt(std::string(label) + ": key \"" + std::string(key) +
                           "\" must be positive, got " + std::to_string(*out));
  }
  return Status::Ok();
}

Status GetString(std::string_view label, const json& obj, std::string_view key, std::string* out) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return WrongType(label, key, "a string", *v);
  *out = v->get<std::string>();
  return Status::Ok();
}

Status GetBool(std::string_view label, const json& obj, std::string_view key, bool* out) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return WrongType(label, key, "a boolean", *v);
  *out = v->get<bool>();
  return Status::Ok();
}

Status GetIntArray(std::string_view label, const json& obj, std::string_view key,
                   std::vector<std::int64_t>* out) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return WrongType(label, key, "an array of non-negative integers", *v);
  out->clear();
  if (v->size() > static_cast<std::size_t>(kMaxConfigArray)) {
    return Status::Corrupt(std::string(label) + ": key \"" + std::string(key) + "\" holds " +
                           std::to_string(v->size()) + " entries: at most " +
                           std::to_string(kMaxConfigArray));
  }
  for (const json& e : *v) {
    if (!e.is_number_unsigned()) {
      return WrongType(label, key, "an array of non-negative integers", e);
    }
    if (e.get<std::uint64_t>() > kMaxConfigInt) {
      return OutOfRange(label, key, e.get<std::uint64_t>(), kMaxConfigInt);
    }
    out->push_back(e.get<std::int64_t>());
  }
  return Status::Ok();
}

Status GetStringArray(std::string_view label, const json& obj, std::string_view key,
                      std::vector<std::string>* out) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return WrongType(label, key, "an array of strings", *v);
  out->clear();
  for (const json& e : *v) {
    if (!e.is_string()) return WrongType(label, key, "an array of strings", e);
    out->push_back(e.get<std::string>());
  }
  return Status::Ok();
}

// ---- files ----------------------------------------------------------------------------------

std::string Errno(int err) { return std::strerror(err); }

// Reads a whole (small) regular file (planner/regular_file.h: never blocks on a FIFO).
Result<std::string> ReadSmallFile(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(RegularFile file, RegularFile::Open(path));
  const int fd = file.fd();
  const std::uint64_t size = file.size();
  if (size > kMaxJsonFileBytes) {
    return Status::Corrupt(path + ": " + std::to_string(size) + " bytes is larger than the " +
                           std::to_string(kMaxJsonFileBytes) + "-byte limit for a JSON file");
  }
  std::string text(size, '\0');
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, text.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": read at offset " + std::to_string(done) + ": " +
                             Errno(errno));
    }
    if (n == 0) break;  // shrank: parse what is there; the JSON parser reports truncation
    done += static_cast<std::uint64_t>(n);
  }
  text.resize(done);
  return text;
}

// Resolves `rel` (as named by the index, or a fixed name) inside the canonical model folder:
// relative, no "..", and every symlink on the way must stay inside ContainmentRoot(dir). `what`
// says who named it.
Result<fs::path> ResolveInside(const fs::path& dir, const std::string& rel,
                               const std::string& what) {
  const std::string where = dir.string() + ": " + what;
  if (rel.empty()) return Status::Corrupt(where + " is an empty path");
  if (rel.find('\0') != std::string::npos) {
    return Status::Corrupt(where + " " + QuoteForMessage(rel) + " contains a NUL byte");
  }
  const fs::path p(rel);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) {
    return Status::Corrupt(where + " " + QuoteForMessage(rel) +
                           " is an absolute path; shards must be inside the model folder");
  }
  for (const fs::path& part : p) {
    if (part == "..") {
      return Status::Corrupt(where + " " + QuoteForMessage(rel) +
                             " contains \"..\" and would leave the model folder");
    }
  }
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir / p, ec);
  if (ec) {
    return Status::NotFound(where + " " + QuoteForMessage(rel) + " is missing (" +
                            (dir / p).string() + ": " + ec.message() + ")");
  }
  const fs::path root = ContainmentRoot(dir);
  if (!IsInside(canonical, root)) {
    return Status::Corrupt(where + " " + QuoteForMessage(rel) + " resolves to " +
                           canonical.string() + " (through a symlink), outside the model folder" +
                           (root == dir ? "" : " " + root.string()));
  }
  return canonical;
}

struct PendingShard {
  std::string rel_path;              // as first named by the index
  std::vector<std::string> tensors;  // names the index maps to this file
};

// Parses model.safetensors.index.json into canonical path -> shard (ordered by the map key;
// re-sorted by rel_path by the caller) and tensor -> canonical path.
Status ParseIndex(const fs::path& dir, const std::string& index_path, const std::string& text,
                  std::map<std::string, PendingShard>* shards,
                  std::unordered_map<std::string, std::string>* tensor_to_file) {
  HOIST_ASSIGN_OR_RETURN(json root, internal::ParseStrictJson(index_path, text, kMaxIndexDepth, 0));
  if (!root.is_object()) {
    return Status::Corrupt(index_path + ": must be a JSON object, got " +
                           std::string(JsonTypeName(root)));
  }
  auto it = root.find("weight_map");
  if (it == root.end()) return Status::Corrupt(index_path + ": missing \"weight_map\"");
  if (!it->is_object()) {
    return Status::Corrupt(index_path + ": \"weight_map\" must be an object, got " +
                           std::string(JsonTypeName(*it)));
  }
  if (it->empty()) return Status::Corrupt(index_path + ": \"weight_map\" is empty");
  // Resolve each distinct file name once.
  std::unordered_map<std::string, std::string> resolved;  // rel -> canonical
  for (const auto& [tensor, file] : it->items()) {
    if (!file.is_string()) {
      return Status::Corrupt(index_path + ": \"weight_map\" entry for tensor " +
                             QuoteForMessage(tensor) + " must be a file name, got " +
                             std::string(JsonTypeName(file)));
    }
    const std::string& rel = file.get_ref<const std::string&>();
    auto r = resolved.find(rel);
    if (r == resolved.end()) {
      HOIST_ASSIGN_OR_RETURN(fs::path canonical,
                             ResolveInside(dir, rel,
                                           std::string(kIndexName) + " (tensor " +
                                               QuoteForMessage(tensor) + ") names shard"));
      r = resolved.emplace(rel, canonical.string()).first;
    }
    PendingShard& shard = (*shards)[r->second];
    if (shard.rel_path.empty()) shard.rel_path = rel;
    shard.tensors.push_back(tensor);
    (*tensor_to_file)[tensor] = r->second;
  }
  return Status::Ok();
}

// The canonical model folder. A path that does not exist, is not a directory or has no
// config.json is the user's mistake (InvalidArgument), not a damaged checkpoint.
Result<fs::path> ModelFolder(const std::string& dir_arg) {
  std::error_code ec;
  const fs::path dir = fs::canonical(dir_arg, ec);
  if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) {
    return Status::InvalidArgument(dir_arg + ": the model folder does not exist");
  }
  if (ec) return Status::IoError(dir_arg + ": model folder: " + ec.message());
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::IoError(dir_arg + ": model folder: stat: " + Errno(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir_arg + ": the model folder is " +
                                   std::string(FileKindName(st.st_mode)) + ", not a directory");
  }
  if (!fs::exists(fs::symlink_status(dir / kConfigName, ec))) {
    return Status::InvalidArgument(dir_arg + ": not a model folder: it has no " +
                                   std::string(kConfigName) +
                                   " (a HuggingFace checkpoint folder holds config.json and "
                                   "model.safetensors or model.safetensors.index.json)");
  }
  return dir;
}

// "model-00001-of-00003.safetensors", HuggingFace's shard names.
bool IsShardName(const std::string& name) {
  static constexpr std::string_view kPrefix = "model-", kMid = "-of-", kExt = ".safetensors";
  if (name.size() <= kPrefix.size() + kMid.size() + kExt.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kExt.size(), kExt.size(), kExt) != 0) {
    return false;
  }
  const std::string_view middle(name.data() + kPrefix.size(),
                                name.size() - kPrefix.size() - kExt.size());
  const std::size_t of = middle.find(kMid);
  if (of == std::string_view::npos || of == 0 || of + kMid.size() == middle.size()) return false;
  for (std::size_t i = 0; i < middle.size(); ++i) {
    if ((i < of || i >= of + kMid.size()) && (middle[i] < '0' || middle[i] > '9')) return false;
  }
  return true;
}

// A shard-named regular file in the folder that the index names no tensor of, but which holds a
// tensor the index does not know: the index lost it (Corrupt naming the shard and the tensor).
// Files that cannot be read, or whose tensors the index maps elsewhere, are left alone (other
// files in a model folder are not hoist's business); missing tensors are the plan's to report.
Status CheckUnindexedShards(const fs::path& dir, const std::map<std::string, PendingShard>& shards,
                            const std::unordered_map<std::string, std::string>& tensor_to_file) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsShardName(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    Result<fs::path> abs = ResolveInside(dir, name, "shard file");
    if (!abs.ok() || shards.count(abs->string()) > 0) continue;
    struct stat st {};
    if (::stat(abs->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    Result<SafetensorsHeader> header = ReadSafetensorsHeader(abs->string(), nullptr);
    if (!header.ok()) continue;
    for (const TensorEntry& t : header->tensors) {
      if (tensor_to_file.count(t.name) > 0) continue;
      return Status::Corrupt(abs->string() + ": tensor " + QuoteForMessage(t.name) +
                             " (file offset " + std::to_string(header->data_start + t.begin) +
                             ") is not in " + std::string(kIndexName) +
                             "'s weight_map, which names no tensor of this shard");
    }
  }
  return Status::Ok();
}

// A packed checkpoint's files: each shard with a made-up header listing its tensors back to back
// in a logical data section (data_start 0), in the index's order.
Status OpenPacked(const fs::path& dir, Checkpoint* ckpt) {
  HOIST_ASSIGN_OR_RETURN(PackedIndex index, ReadPackedIndex(dir.string()));
  for (const std::string& rel : index.shards) {
    ShardFile file;
    file.rel_path = rel;
    file.abs_path = (fs::path(index.dir) / rel).string();
    HOIST_ASSIGN_OR_RETURN(RegularFile fd, RegularFile::Open(file.abs_path));
    file.stat = FileStat{fd.size(), fd.mtime_ns()};
    ckpt->files.push_back(std::move(file));
  }
  for (const PackedTensorEntry& t : index.tensors) {
    const std::optional<DType> dtype = ParseDType(t.dtype);
    if (!dtype || t.shard >= ckpt->files.size()) {
      return Status::Corrupt(index.dir + "/" + kPackedIndexFile + ": tensor " +
                             QuoteForMessage(t.name) + ": dtype " + t.dtype + " or shard " +
                             std::to_string(t.shard) + " unknown");
    }
    SafetensorsHeader& h = ckpt->files[t.shard].header;
    const std::uint64_t begin = h.tensors.empty() ? 0 : h.tensors.back().end;
    const auto entry = static_cast<std::uint32_t>(h.tensors.size());
    h.tensors.push_back(TensorEntry{t.name, *dtype, t.shape, begin, begin + t.original_bytes});
    if (!ckpt->tensors.emplace(t.name, TensorLocation{t.shard, entry}).second) {
      return Status::Corrupt(index.dir + "/" + kPackedIndexFile + ": tensor " +
                             QuoteForMessage(t.name) + " is listed twice");
    }
    ckpt->tensor_bytes += t.original_bytes;
  }
  ckpt->packed = std::move(index);
  return Status::Ok();
}

// DeepSeek-V4's per-layer schedule as transformers' DeepseekV4Config spells it, where the Hub
// release's compress_ratios / num_hash_layers are absent: layer_types (sliding_attention: no
// compressor; compressed_sparse_attention and heavily_compressed_attention: compress_rates'
// ratio, by default 4 and 128) and mlp_layer_types (hash_moe layers first, then moe).
Status ParseV4Schedule(std::string_view label, const json& root,
                       const std::vector<std::string>& types, ModelConfig* c) {
  if (c->model_type != "deepseek_v4") return Status::Ok();
  if (c->compress_ratios.empty() && !types.empty()) {
    std::map<std::string, std::int64_t> rates = {{"sliding_attention", 0},
                                                 {"compressed_sparse_attention", 4},
                                                 {"heavily_compressed_attention", 128}};
    if (const json* r = Lookup(root, "compress_rates"); r != nullptr && r->is_object()) {
      for (auto& [kind, rate] : rates) {
        if (kind != "sliding_attention") {
          HOIST_RETURN_IF_ERROR(GetInt(label, *r, kind, &rate, nullptr, 1 << 20));
        }
      }
    }
    for (const std::string& t : types) {
      auto it = rates.find(t);
      if (it == rates.end()) {
        return Status::Unsupported(std::string(label) + ": \"layer_types\" entry " +
                                   QuoteForMessage(t) +
                                   " is not a DeepSeek-V4 attention kind (sliding_attention, "
                                   "compressed_sparse_attention, heavily_compressed_attention)");
      }
      c->compress_ratios.push_back(it->second);
    }
  }
  std::vector<std::string> mlp;
  HOIST_RETURN_IF_ERROR(GetStringArray(label, root, "mlp_layer_types", &mlp));
  if (Lookup(root, "num_hash_layers") != nullptr || mlp.empty()) return Status::Ok();
  // transformers' V4 router always holds the score correction bias on its moe layers (the
  // release says so with topk_method noaux_tc).
  if (c->topk_method.empty()) c->topk_method = "noaux_tc";
  const auto first_moe = std::find(mlp.begin(), mlp.end(), "moe");
  c->num_hash_layers = first_moe - mlp.begin();
  for (auto it = mlp.begin(); it != mlp.end(); ++it) {
    if ((*it == "hash_moe") != (it < first_moe) || (*it != "hash_moe" && *it != "moe")) {
      return Status::Unsupported(std::string(label) + ": \"mlp_layer_types\" entry " +
                                 std::to_string(it - mlp.begin()) + " is " + QuoteForMessage(*it) +
                                 ": hoist takes DeepSeek-V4's hash_moe layers first, then moe (as "
                                 "vLLM's num_hash_layers)");
    }
  }
  return Status::Ok();
}

// MLA (DeepSeek), its sparse-attention indexer, q/k norms (GLM) and the hybrid families' linear
// attention: the keys of config.json that shape attention beyond heads and head_dim.
Status ParseAttentionKeys(std::string_view label, const json& root, ModelConfig* c) {
  const std::pair<const char*, std::int64_t*> ints[] = {
      {"q_lora_rank", &c->q_lora_rank},  // null: 0
      {"kv_lora_rank", &c->kv_lora_rank},
      {"qk_nope_head_dim", &c->qk_nope_head_dim},
      {"qk_rope_head_dim", &c->qk_rope_head_dim},
      {"v_head_dim", &c->v_head_dim},
      {"index_n_heads", &c->index_n_heads},
      {"index_head_dim", &c->index_head_dim},
      {"linear_num_key_heads", &c->linear_num_key_heads},
      {"linear_num_value_heads", &c->linear_num_value_heads},
      {"linear_key_head_dim", &c->linear_key_head_dim},
      {"linear_value_head_dim", &c->linear_value_head_dim},
      {"linear_conv_kernel_dim", &c->linear_conv_kernel_dim},
      {"full_attention_interval", &c->full_attention_interval},
      {"o_groups", &c->o_groups},
      {"o_lora_rank", &c->o_lora_rank},
      {"hc_mult", &c->hc_mult},
      {"num_hash_layers", &c->num_hash_layers},
      {"num_experts_per_tok", &c->num_experts_per_tok},
  };
  for (const auto& [key, field] : ints) HOIST_RETURN_IF_ERROR(GetInt(label, root, key, field));
  HOIST_RETURN_IF_ERROR(GetBool(label, root, "use_qk_norm", &c->use_qk_norm));
  HOIST_RETURN_IF_ERROR(GetIntArray(label, root, "compress_ratios", &c->compress_ratios));
  for (std::int64_t r : c->compress_ratios) {
    if (r > (1 << 20)) {
      return Status::Corrupt(std::string(label) + ": \"compress_ratios\" entry " +
                             std::to_string(r) + " is not a compression ratio in [0, 2^20]");
    }
  }
  HOIST_RETURN_IF_ERROR(GetString(label, root, "expert_dtype", &c->expert_dtype));
  std::vector<std::string> types;
  HOIST_RETURN_IF_ERROR(GetStringArray(label, root, "layer_types", &types));
  if (types.size() > static_cast<std::size_t>(kMaxLayers)) {
    return Status::Corrupt(std::string(label) + ": \"layer_types\" has " +
                           std::to_string(types.size()) + " entries, more than " +
                           std::to_string(kMaxLayers));
  }
  for (const std::string& t : types) c->linear_layers.push_back(t == "linear_attention");
  return ParseV4Schedule(label, root, types, c);
}

// A group size: a positive integer, or -1 / null / absent for one group over the input dim (0).
Status GetGroupSize(std::string_view label, const json& obj, std::int64_t* out) {
  const json* v = Lookup(obj, "group_size");
  if (v != nullptr && v->is_number_integer() && v->get<std::int64_t>() == -1) {
    *out = 0;
    return Status::Ok();
  }
  return GetInt(label, obj, "group_size", out);
}

// The integer / FP4 keys of quantization_config (ModelConfig::quant_bits and after).
Status ParseGroupQuantKeys(const std::string& qlabel, const json& q, ModelConfig* c) {
  HOIST_RETURN_IF_ERROR(GetInt(qlabel, q, "bits", &c->quant_bits, nullptr, 64));
  HOIST_RETURN_IF_ERROR(GetGroupSize(qlabel, q, &c->quant_group_size));
  HOIST_RETURN_IF_ERROR(GetBool(qlabel, q, "desc_act", &c->quant_act_order));
  const json* groups = Lookup(q, "config_groups");
  if (groups == nullptr) return Status::Ok();
  if (!groups->is_object() || groups->empty()) {
    return WrongType(qlabel, "config_groups", "a non-empty object", *groups);
  }
  const std::string glabel = qlabel + ".config_groups." + groups->begin().key();
  const json& group = groups->begin().value();
  if (!group.is_object()) return WrongType(glabel, "", "an object", group);
  if (c->quant_format.empty())
    HOIST_RETURN_IF_ERROR(GetString(glabel, group, "format", &c->quant_format));
  const json* w = Lookup(group, "weights");
  if (w == nullptr) return Status::Ok();
  if (!w->is_object()) return WrongType(glabel, "weights", "an object", *w);
  const std::string wlabel = glabel + ".weights";
  HOIST_RETURN_IF_ERROR(GetInt(wlabel, *w, "num_bits", &c->quant_bits, nullptr, 64));
  HOIST_RETURN_IF_ERROR(GetGroupSize(wlabel, *w, &c->quant_group_size));
  HOIST_RETURN_IF_ERROR(GetBool(wlabel, *w, "symmetric", &c->quant_symmetric));
  std::string actorder;
  if (const json* a = Lookup(*w, "actorder"); a != nullptr && a->is_boolean()) {
    actorder = a->get<bool>() ? "group" : "";
  } else {
    HOIST_RETURN_IF_ERROR(GetString(wlabel, *w, "actorder", &actorder));
  }
  c->quant_act_order = actorder == "group";
  return Status::Ok();
}

// quantization_config: the method, format and block size, then the integer / FP4 keys.
Status ParseQuantizationConfig(std::string_view label, const json& root, ModelConfig* c) {
  if (const json* q = Lookup(root, "quantization_config")) {
    if (!q->is_object()) return WrongType(label, "quantization_config", "an object", *q);
    const std::string qlabel = std::string(label) + ": quantization_config";
    HOIST_RETURN_IF_ERROR(GetString(qlabel, *q, "quant_method", &c->quant_method));
    HOIST_RETURN_IF_ERROR(GetString(qlabel, *q, "format", &c->quant_format));
    HOIST_RETURN_IF_ERROR(GetString(qlabel, *q, "quant_algo", &c->quant_algo));
    HOIST_RETURN_IF_ERROR(GetIntArray(qlabel, *q, "weight_block_size", &c->weight_block_size));
    for (std::int64_t b : c->weight_block_size) {
      if (b <= 0) {
        return Status::Corrupt(qlabel + ": \"weight_block_size\" entries must be positive");
      }
    }
    HOIST_RETURN_IF_ERROR(ParseGroupQuantKeys(qlabel, *q, c));
  }
  return Status::Ok();
}

}  // namespace

// A vision-language config's text model: text_config, with the top level's architectures,
// tie_word_embeddings and quantization_config over it.
json TextModelConfig(const json& root) {
  json text = root.at("text_config");
  for (const char* key : {"architectures", "tie_word_embeddings", "quantization_config"}) {
    auto it = root.find(key);
    if (it != root.end() && !it->is_null()) text[key] = *it;
  }
  return text;
}

Result<ModelConfig> ParseModelConfig(std::string_view label, std::string_view json_text) {
  HOIST_ASSIGN_OR_RETURN(json root,
                         internal::ParseStrictJson(label, json_text, kMaxConfigDepth, 0));
  if (!root.is_object()) {
    return Status::Corrupt(std::string(label) + ": must be a JSON object, got " +
                           std::string(JsonTypeName(root)));
  }
  ModelConfig c;
  if (const json* text = Lookup(root, "text_config"); text != nullptr && text->is_object()) {
    root = TextModelConfig(root);
    c.text_model = true;
  }
  HOIST_RETURN_IF_ERROR(GetString(label, root, "model_type", &c.model_type));
  HOIST_RETURN_IF_ERROR(GetStringArray(label, root, "architectures", &c.architectures));
  HOIST_RETURN_IF_ERROR(GetRequiredPositiveInt(label, root, "hidden_size", &c.hidden_size));
  HOIST_RETURN_IF_ERROR(
      GetRequiredPositiveInt(label, root, "num_hidden_layers", &c.num_hidden_layers, kMaxLayers));
  HOIST_RETURN_IF_ERROR(
      GetRequiredPositiveInt(label, root, "num_attention_heads", &c.num_attention_heads));
  HOIST_RETURN_IF_ERROR(GetRequiredPositiveInt(label, root, "vocab_size", &c.vocab_size));
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "intermediate_size", &c.intermediate_size));
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "intermediate_size_mlp", &c.intermediate_size_mlp));

  bool found = false;
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "num_key_value_heads", &c.num_key_value_heads, &found));
  if (!found) c.num_key_value_heads = c.num_attention_heads;
  if (c.num_key_value_heads == 0) {
    return Status::Corrupt(std::string(label) +
                           ": key \"num_key_value_heads\" must be positive, got 0");
  }
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "head_dim", &c.head_dim, &found));
  if (!found) c.head_dim = c.hidden_size / c.num_attention_heads;
  HOIST_RETURN_IF_ERROR(GetBool(label, root, "tie_word_embeddings", &c.tie_word_embeddings));
  HOIST_RETURN_IF_ERROR(GetBool(label, root, "attention_bias", &c.attention_bias));

  // Experts: Qwen3-MoE / Qwen2-MoE spell it num_experts, DeepSeek n_routed_experts, Mixtral
  // num_local_experts. Two different spellings with different values are ambiguous.
  std::string experts_key;
  for (std::string_view key : {"num_experts", "n_routed_experts", "num_local_experts"}) {
    std::int64_t value = 0;
    HOIST_RETURN_IF_ERROR(GetInt(label, root, key, &value, &found, kMaxExperts));
    if (!found) continue;
    if (!experts_key.empty() && value != c.num_experts) {
      return Status::Corrupt(std::string(label) + ": \"" + experts_key +
                             "\" = " + std::to_string(c.num_experts) + " disagrees with \"" +
                             std::string(key) + "\" = " + std::to_string(value));
    }
    experts_key = key;
    c.num_experts = value;
  }
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "moe_intermediate_size", &c.moe_intermediate_size));
  HOIST_RETURN_IF_ERROR(
      GetInt(label, root, "shared_expert_intermediate_size", &c.shared_expert_intermediate_size));
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "n_shared_experts", &c.n_shared_experts));
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "first_k_dense_replace", &c.first_k_dense_replace));
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "decoder_sparse_step", &c.decoder_sparse_step));
  // Llama 4 spells it interleave_moe_layer_step: layer L is MoE when (L + 1) % step == 0.
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "interleave_moe_layer_step", &c.decoder_sparse_step));
  HOIST_RETURN_IF_ERROR(GetInt(label, root, "moe_layer_freq", &c.moe_layer_freq));
  HOIST_RETURN_IF_ERROR(GetString(label, root, "topk_method", &c.topk_method));
  HOIST_RETURN_IF_ERROR(GetIntArray(label, root, "mlp_only_layers", &c.mlp_only_layers));
  std::sort(c.mlp_only_layers.begin(), c.mlp_only_layers.end());
  c.mlp_only_layers.erase(std::unique(c.mlp_only_layers.begin(), c.mlp_only_layers.end()),
                          c.mlp_only_layers.end());

  HOIST_RETURN_IF_ERROR(ParseAttentionKeys(label, root, &c));
  HOIST_RETURN_IF_ERROR(ParseQuantizationConfig(label, root, &c));
  return c;
}

namespace {

// Checkpoints whose tensors some writer names otherwise than the family table does: a
// vision-language checkpoint's text model, and architectures whose transformers
// save_pretrained spelling differs from the Hub release the table follows. Data: a rule renames
// a whole name (kExact), its start (kPrefix) or its end (kSuffix); "" as `to` drops the tensor
// (a vision tower). Rules apply in order, each to the name the earlier ones left.
enum class Match : std::uint8_t { kExact, kPrefix, kSuffix };
struct Respelling {
  std::string_view model_type;  // "" for every vision-language checkpoint (text_config)
  Match match;
  std::string_view from;
  std::string_view to;
};
constexpr std::string_view kVlm = "";
constexpr std::string_view kV4 = "deepseek_v4";
constexpr Respelling kRespellings[] = {
    {kVlm, Match::kPrefix, "model.language_model.", "model."},
    {kVlm, Match::kPrefix, "language_model.model.", "model."},
    {kVlm, Match::kPrefix, "language_model.lm_head.", "lm_head."},
    {kVlm, Match::kPrefix, "vision_tower.", ""},
    {kVlm, Match::kPrefix, "multi_modal_projector.", ""},
    {kVlm, Match::kPrefix, "visual.", ""},
    {kVlm, Match::kPrefix, "vision_model.", ""},
    {kVlm, Match::kPrefix, "model.vision_tower.", ""},
    {kVlm, Match::kPrefix, "model.multi_modal_projector.", ""},
    {kVlm, Match::kPrefix, "model.visual.", ""},
    {kVlm, Match::kPrefix, "model.vision_model.", ""},
    // DeepSeek-V4 as transformers 5.17 saves it (its conversion mapping reverted but for these):
    // the Hub release's names are bare (embed, layers.L..., norm, hc_head_*) and its attention's
    // KV norm is attn.kv_norm.
    {kV4, Match::kExact, "model.embed_tokens.weight", "embed.weight"},
    {kV4, Match::kExact, "model.norm.weight", "norm.weight"},
    {kV4, Match::kExact, "model.hc_head.hc_fn", "hc_head_fn"},
    {kV4, Match::kExact, "model.hc_head.hc_base", "hc_head_base"},
    {kV4, Match::kExact, "model.hc_head.hc_scale", "hc_head_scale"},
    {kV4, Match::kPrefix, "model.layers.", "layers."},
    {kV4, Match::kSuffix, ".attn.norm.weight", ".attn.kv_norm.weight"},
};

bool Applies(const Respelling& r, const ModelConfig& c) {
  return r.model_type.empty() ? c.text_model : r.model_type == c.model_type;
}

// The family table's name of a checkpoint's tensor; "" for one the model does not load.
std::string TableName(const ModelConfig& c, std::string name) {
  for (const Respelling& r : kRespellings) {
    if (!Applies(r, c)) continue;
    const bool hit = r.match == Match::kExact    ? name == r.from
                     : r.match == Match::kPrefix ? name.starts_with(r.from)
                                                 : name.ends_with(r.from);
    if (!hit) continue;
    if (r.to.empty()) return "";
    if (r.match == Match::kExact) {
      name = std::string(r.to);
    } else if (r.match == Match::kPrefix) {
      name = std::string(r.to) + name.substr(r.from.size());
    } else {
      name = name.substr(0, name.size() - r.from.size()) + std::string(r.to);
    }
  }
  return name;
}

// Checkpoint::tensors under the family table's names (TableName): a vision-language
// checkpoint's text model alone, a respelled architecture's tensors renamed.
Status TakeTableNames(Checkpoint* ckpt) {
  const bool any = std::any_of(std::begin(kRespellings), std::end(kRespellings),
                               [&](const Respelling& r) { return Applies(r, ckpt->config); });
  if (!any) return Status::Ok();
  std::unordered_map<std::string, TensorLocation> kept;
  kept.reserve(ckpt->tensors.size());
  for (const auto& [name, loc] : ckpt->tensors) {
    TensorEntry& e = ckpt->files[loc.file].header.tensors[loc.entry];
    std::string renamed = TableName(ckpt->config, name);
    if (renamed.empty()) {
      ++ckpt->vision_tensors;
      ckpt->tensor_bytes -= e.bytes();
      continue;
    }
    if (!kept.emplace(renamed, loc).second) {
      return Status::Corrupt(ckpt->dir + ": tensor " + QuoteForMessage(name) + " is " +
                             QuoteForMessage(renamed) +
                             " (the name hoist's family table uses), which another tensor of the "
                             "checkpoint already is");
    }
    e.name = std::move(renamed);
  }
  ckpt->tensors = std::move(kept);
  if (ckpt->packed) {  // the packed index names them as the checkpoint did
    for (PackedTensorEntry& t : ckpt->packed->tensors) {
      std::string renamed = TableName(ckpt->config, t.name);
      if (!renamed.empty()) t.name = std::move(renamed);
    }
  }
  return Status::Ok();
}

}  // namespace

const TensorEntry* Checkpoint::Find(std::string_view name) const {
  auto it = tensors.find(std::string(name));
  return it == tensors.end() ? nullptr : &Entry(it->second);
}

namespace {

// The shards: the index's (with its tensor -> file map), or the single file.
Status FindShards(const fs::path& dir, std::map<std::string, PendingShard>* shards,
                  std::unordered_map<std::string, std::string>* tensor_to_file, bool* has_index) {
  std::error_code ec;
  *has_index = fs::exists(fs::symlink_status(dir / kIndexName, ec));
  if (*has_index) {
    HOIST_ASSIGN_OR_RETURN(fs::path index_path,
                           ResolveInside(dir, std::string(kIndexName), "index file"));
    HOIST_ASSIGN_OR_RETURN(std::string index_text, ReadSmallFile(index_path.string()));
    return ParseIndex(dir, index_path.string(), index_text, shards, tensor_to_file);
  }
  if (!fs::exists(fs::symlink_status(dir / kSingleFileName, ec))) {
    return Status::NotFound(dir.string() + ": neither " + std::string(kIndexName) + " nor " +
                            std::string(kSingleFileName) + " found");
  }
  HOIST_ASSIGN_OR_RETURN(fs::path single,
                         ResolveInside(dir, std::string(kSingleFileName), "single-file model"));
  (*shards)[single.string()].rel_path = std::string(kSingleFileName);
  return Status::Ok();
}

// file's tensors into ckpt->tensors (file_index: its place in ckpt->files), each checked against
// the index's map when there is one (tensor_to_file non-null).
Status AddShardTensors(const ShardFile& file, std::uint32_t file_index,
                       const std::unordered_map<std::string, std::string>* tensor_to_file,
                       Checkpoint* ckpt) {
  const std::string& abs = file.abs_path;
  for (std::uint32_t e = 0; e < file.header.tensors.size(); ++e) {
    const TensorEntry& t = file.header.tensors[e];
    if (tensor_to_file != nullptr) {
      auto mapped = tensor_to_file->find(t.name);
      if (mapped == tensor_to_file->end()) {
        return Status::Corrupt(abs + ": tensor " + QuoteForMessage(t.name) + " (file offset " +
                               std::to_string(file.header.data_start + t.begin) + ") is not in " +
                               std::string(kIndexName) + "'s weight_map");
      }
      if (mapped->second != abs) {
        return Status::Corrupt(abs + ": tensor " + QuoteForMessage(t.name) + " (file offset " +
                               std::to_string(file.header.data_start + t.begin) +
                               ") is mapped by " + std::string(kIndexName) + " to " +
                               mapped->second + ", not to this file (duplicate across shards?)");
      }
    }
    auto [it, inserted] = ckpt->tensors.emplace(t.name, TensorLocation{file_index, e});
    if (!inserted) {  // only reachable without an index if ever; kept as a guard
      return Status::Corrupt(abs + ": tensor " + QuoteForMessage(t.name) + " is also in " +
                             ckpt->files[it->second.file].abs_path);
    }
    if (__builtin_add_overflow(ckpt->tensor_bytes, t.bytes(), &ckpt->tensor_bytes)) {
      return Status::Corrupt(ckpt->dir + ": total tensor bytes overflow 64 bits");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Checkpoint> OpenCheckpoint(const std::string& dir_arg) {
  HOIST_ASSIGN_OR_RETURN(const fs::path dir, ModelFolder(dir_arg));
  Checkpoint ckpt;
  ckpt.dir = dir.string();

  // config.json
  HOIST_ASSIGN_OR_RETURN(fs::path config_path,
                         ResolveInside(dir, std::string(kConfigName), "config file"));
  HOIST_ASSIGN_OR_RETURN(std::string config_text, ReadSmallFile(config_path.string()));
  HOIST_ASSIGN_OR_RETURN(ckpt.config, ParseModelConfig(config_path.string(), config_text));

  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir / kPackedIndexFile, ec))) {
    HOIST_RETURN_IF_ERROR(OpenPacked(dir, &ckpt));
    HOIST_RETURN_IF_ERROR(TakeTableNames(&ckpt));
    return ckpt;
  }
  std::map<std::string, PendingShard> shards;                   // canonical path -> shard
  std::unordered_map<std::string, std::string> tensor_to_file;  // empty without an index
  bool has_index = false;
  HOIST_RETURN_IF_ERROR(FindShards(dir, &shards, &tensor_to_file, &has_index));

  // Files in rel_path order, each header read once.
  std::vector<std::pair<std::string, PendingShard*>> order;
  for (auto& [abs, pending] : shards) order.emplace_back(abs, &pending);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->rel_path < b.second->rel_path; });
  if (order.size() > UINT32_MAX) return Status::Unsupported(ckpt.dir + ": too many shards");
  ckpt.files.reserve(order.size());
  for (auto& [abs, pending] : order) {
    ShardFile file;
    file.rel_path = pending->rel_path;
    file.abs_path = abs;
    HOIST_ASSIGN_OR_RETURN(file.header, ReadSafetensorsHeader(abs, &file.stat));
    if (file.header.tensors.size() > UINT32_MAX) {
      return Status::Unsupported(abs + ": too many tensors");
    }
    HOIST_RETURN_IF_ERROR(AddShardTensors(file, static_cast<std::uint32_t>(ckpt.files.size()),
                                          has_index ? &tensor_to_file : nullptr, &ckpt));
    ckpt.files.push_back(std::move(file));
  }
  if (has_index) HOIST_RETURN_IF_ERROR(CheckUnindexedShards(dir, shards, tensor_to_file));
  // Every tensor the index names must be in the file it names.
  for (const auto& [abs, pending] : order) {
    for (const std::string& name : pending->tensors) {
      if (ckpt.tensors.find(name) == ckpt.tensors.end()) {
        return Status::NotFound(abs + ": tensor " + QuoteForMessage(name) + ", which " +
                                std::string(kIndexName) + " maps to this shard (" +
                                QuoteForMessage(pending->rel_path) + "), is not in its header");
      }
    }
  }
  HOIST_RETURN_IF_ERROR(TakeTableNames(&ckpt));
  return ckpt;
}

}  // namespace hoist::planner
