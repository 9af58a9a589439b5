// The checkpoint writer of hoist-mkckpt: content generation and the multi-threaded, large-pwrite
// file writer. See tools/mkckpt.h for the contract. Independent of planner/ on purpose (the
// planner's reader is tested against files this writer makes).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tools/file_io.h"
#include "tools/fp8_content.h"
#include "tools/mkckpt.h"

namespace hoist::tools {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kChunkBytes = 8ull << 20;  // one generate + pwrite task

inline std::uint64_t Mix(std::uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t TensorKey(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return Mix(h ^ Mix(seed + kGolden));
}

// 4 BF16 lanes: sign random, exponent in [120, 127] (|x| in [2^-7, 2)), 7 random mantissa bits.
inline std::uint64_t ToBF16(std::uint64_t w) {
  constexpr std::uint64_t kKeep = 0x83FF83FF83FF83FFull;  // sign, 3 low exponent bits, mantissa
  constexpr std::uint64_t kExp = 0x3C003C003C003C00ull;   // exponent 120 = 0b01111000 << 7
  return (w & kKeep) | kExp;
}
// 4 F16 lanes: exponent in [8, 15] (|x| in [2^-7, 2)).
inline std::uint64_t ToF16(std::uint64_t w) {
  constexpr std::uint64_t kKeep = 0x9FFF9FFF9FFF9FFFull;
  constexpr std::uint64_t kExp = 0x2000200020002000ull;
  return (w & kKeep) | kExp;
}
// 2 F32 lanes: positive, exponent in [112, 119] (x in [2^-15, 2^-7)), like real block scales.
inline std::uint64_t ToF32(std::uint64_t w) {
  constexpr std::uint64_t kKeep = 0x03FFFFFF03FFFFFFull;  // 3 low exponent bits + mantissa
  constexpr std::uint64_t kExp = 0x3800000038000000ull;   // exponent 112 << 23
  return (w & kKeep) | kExp;
}
struct ShardPlan {
  std::string file_name;
  std::vector<std::size_t> tensors;    // indices into specs, name order
  std::vector<std::uint64_t> offsets;  // data-section offset per entry of `tensors`
  std::string header;                  // JSON, space-padded to a multiple of 8
  std::uint64_t data_bytes = 0;
  std::uint64_t data_start = 0;  // 8 + header.size()
};

struct Task {
  std::size_t shard;
  std::size_t spec;
  std::uint64_t file_offset;
  std::uint64_t begin, end;  // byte range of the tensor
};

Status WriteTextFile(const fs::path& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(path.string() + ": open: " + std::strerror(errno));
  Status s = WriteAll(fd, reinterpret_cast<const std::uint8_t*>(text.data()), text.size(), 0,
                      path.string());
  if (::close(fd) != 0 && s.ok()) {
    s = Status::IoError(path.string() + ": close: " + std::strerror(errno));
  }
  return s;
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  return ss.str();
}

// The config.json text to write and its model_type, from a preset or a user file.
Result<std::string> ResolveConfig(const MkckptOptions& o) {
  if (!o.preset.empty() && !o.config_path.empty()) {
    return Status::InvalidArgument("give either a preset or a config, not both");
  }
  if (o.preset.empty() && o.config_path.empty()) {
    return Status::InvalidArgument("give a preset or a config.json");
  }
  if (!o.preset.empty()) {
    HOIST_ASSIGN_OR_RETURN(std::string family, PresetFamily(o.preset));
    if (!o.family.empty() && o.family != family) {
      return Status::InvalidArgument("preset '" + o.preset + "' is of family '" + family +
                                     "', not '" + o.family + "'");
    }
    return PresetConfigJson(o.preset);
  }
  HOIST_ASSIGN_OR_RETURN(std::string text, ReadTextFile(o.config_path));
  if (!o.family.empty()) {
    const Status s = CheckConfigFamily(o.family, text);
    if (!s.ok()) return Status(s.code(), o.config_path + ": " + s.message());
  }
  return text;
}

// A tensor list {name: [dtype, shape, ...]} (MkckptOptions::tensors_path), in name order.
Result<std::vector<TensorSpec>> ReadTensorSpecs(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  std::vector<TensorSpec> specs;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) return Status::InvalidArgument(path + ": not a JSON object");
    for (const auto& [name, v] : j.items()) {
      TensorSpec t{name, v.at(0).get<std::string>(), v.at(1).get<std::vector<std::uint64_t>>()};
      if (t.Bytes() == 0 && !t.shape.empty()) {
        return Status::InvalidArgument(path + ": tensor " + name + ": dtype " + t.dtype +
                                       " is not one hoist-mkckpt writes (BF16, F16, F32, F8_E4M3, "
                                       "F8_E8M0, U8, I8, I16, U16, I32, U32, I64, U64, F64)");
      }
      specs.push_back(std::move(t));
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  return specs;
}

std::string ShardName(std::size_t k, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

std::vector<ShardPlan> PlanShards(const std::vector<TensorSpec>& specs, std::uint64_t shard_size) {
  std::vector<ShardPlan> shards;
  std::uint64_t cur = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::uint64_t b = specs[i].Bytes();
    if (shards.empty() || (cur > 0 && cur + b > shard_size)) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().tensors.push_back(i);
    cur += b;
  }
  for (std::size_t k = 0; k < shards.size(); ++k) {
    ShardPlan& sp = shards[k];
    sp.file_name = shards.size() == 1 ? "model.safetensors" : ShardName(k, shards.size());
    std::sort(sp.tensors.begin(), sp.tensors.end(),
              [&](std::size_t a, std::size_t b) { return specs[a].name < specs[b].name; });
    nlohmann::ordered_json h;
    h["__metadata__"] = {{"format", "pt"}};
    std::uint64_t off = 0;
    for (std::size_t idx : sp.tensors) {
      const TensorSpec& t = specs[idx];
      sp.offsets.push_back(off);
      h[t.name] = {
          {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.Bytes()}}};
      off += t.Bytes();
    }
    sp.data_bytes = off;
    sp.header = h.dump();
    sp.header.append((8 - sp.header.size() % 8) % 8, ' ');
    sp.data_start = 8 + sp.header.size();
  }
  return shards;
}

Status RemoveStale(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const std::string n = de.path().filename().string();
    const bool shard = n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos &&
                       n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0;
    if (shard || n == "model.safetensors" || n == "model.safetensors.index.json") {
      stale.push_back(de.path());
    }
  }
  if (ec) return Status::IoError(dir.string() + ": list: " + ec.message());
  for (const auto& p : stale) {
    if (!fs::remove(p, ec) && ec) return Status::IoError(p.string() + ": remove: " + ec.message());
  }
  return Status::Ok();
}

}  // namespace

void GenerateTensorBytes(const TensorSpec& spec, std::uint64_t seed, std::uint64_t begin,
                         std::uint64_t end, std::uint8_t* out) {
  const std::uint64_t key = TensorKey(seed, spec.name);
  int kind = 0;  // 0 BF16, 1 F16, 2 F32, 3 F8 E4M3 (anything else: raw bits)
  if (spec.dtype == "BF16") {
    kind = 0;
  } else if (spec.dtype == "F16") {
    kind = 1;
  } else if (spec.dtype == "F32") {
    kind = 2;
  } else if (spec.dtype == "F8_E4M3") {
    kind = 3;
  } else {
    kind = 4;
  }
  if (kind == 3) {  // block-quantized weights, rows x (last dimension)
    const std::uint64_t cols = spec.shape.empty() ? 1 : spec.shape.back();
    BlockQuantizedE4M3(key, cols == 0 ? 0 : spec.Bytes() / cols, cols, begin, end, out);
    return;
  }
  for (std::uint64_t pos = begin; pos < end; pos += 8) {
    std::uint64_t w = Mix(key + (pos / 8) * kGolden);
    switch (kind) {
      case 0:
        w = ToBF16(w);
        break;
      case 1:
        w = ToF16(w);
        break;
      case 2:
        w = ToF32(w);
        break;
      default:
        break;
    }
    const std::uint64_t n = std::min<std::uint64_t>(8, end - pos);
    std::memcpy(out + (pos - begin), &w, n);  // little-endian lanes
  }
}

namespace {

Status CheckUnique(const std::vector<TensorSpec>& specs) {
  std::set<std::string> names;
  for (const auto& t : specs) {
    if (!names.insert(t.name).second) return Status::Internal("duplicate tensor " + t.name);
  }
  return Status::Ok();
}

// The shards' open files; Close reports the first close error (the destructor closes quietly).
class ShardFiles {
 public:
  ShardFiles(const fs::path& dir, const std::vector<ShardPlan>& shards)
      : dir_(dir), shards_(shards), fds_(shards.size(), -1) {}
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;
  ~ShardFiles() { (void)Close(); }

  int fd(std::size_t k) const { return fds_[k]; }
  std::string Path(std::size_t k) const { return (dir_ / shards_[k].file_name).string(); }

  // Creates shard k at its full size and writes its header (8-byte length, then the JSON).
  Status Create(std::size_t k) {
    const ShardPlan& sp = shards_[k];
    const std::string path = Path(k);
    fds_[k] = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fds_[k] < 0) return Status::IoError(path + ": open: " + std::strerror(errno));
    const std::uint64_t file_size = sp.data_start + sp.data_bytes;
    if (::ftruncate(fds_[k], static_cast<off_t>(file_size)) != 0) {
      return Status::IoError(path + ": ftruncate to " + std::to_string(file_size) + ": " +
                             std::strerror(errno));
    }
    std::string prefix(8, '\0');
    const std::uint64_t hl = sp.header.size();
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((hl >> (8 * i)) & 0xFF);
    prefix += sp.header;
    return WriteAll(fds_[k], reinterpret_cast<const std::uint8_t*>(prefix.data()), prefix.size(), 0,
                    path);
  }

  Status Close() {
    Status s;
    for (std::size_t k = 0; k < fds_.size(); ++k) {
      if (fds_[k] >= 0 && ::close(fds_[k]) != 0 && s.ok()) {
        s = Status::IoError(Path(k) + ": close: " + std::strerror(errno));
      }
      fds_[k] = -1;
    }
    return s;
  }

 private:
  fs::path dir_;
  const std::vector<ShardPlan>& shards_;
  std::vector<int> fds_;
};

// The chunks of every shard's tensors, in file order.
std::vector<Task> ChunkTasks(const std::vector<TensorSpec>& specs,
                             const std::vector<ShardPlan>& shards) {
  std::vector<Task> tasks;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const ShardPlan& sp = shards[k];
    for (std::size_t e = 0; e < sp.tensors.size(); ++e) {
      const std::uint64_t bytes = specs[sp.tensors[e]].Bytes();
      for (std::uint64_t b = 0; b < bytes; b += kChunkBytes) {
        tasks.push_back({k, sp.tensors[e], sp.data_start + sp.offsets[e] + b, b,
                         std::min(bytes, b + kChunkBytes)});
      }
    }
  }
  return tasks;
}

// Generates and writes in parallel: each worker takes the next chunk, fills its own buffer and
// pwrites it. The first error stops everyone.
Status WriteChunks(const MkckptOptions& o, const std::vector<TensorSpec>& specs,
                   const std::vector<Task>& tasks, const ShardFiles& files) {
  unsigned nthreads = o.threads > 0 ? static_cast<unsigned>(o.threads)
                                    : std::max(1u, std::thread::hardware_concurrency());
  nthreads = static_cast<unsigned>(
      std::min<std::size_t>(nthreads, std::max<std::size_t>(1, tasks.size())));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  Status first_error;
  auto worker = [&]() {
    std::unique_ptr<std::uint8_t[]> buf(new std::uint8_t[kChunkBytes]);
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      const std::size_t i = next.fetch_add(1);
      if (i >= tasks.size()) return;
      const Task& t = tasks[i];
      GenerateTensorBytes(specs[t.spec], o.seed, t.begin, t.end, buf.get());
      Status s = WriteAll(files.fd(t.shard), buf.get(), t.end - t.begin, t.file_offset,
                          files.Path(t.shard));
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.ok()) first_error = std::move(s).Annotate("tensor " + specs[t.spec].name);
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < nthreads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  return first_error;
}

// model.safetensors.index.json for a sharded checkpoint.
Status WriteIndex(const fs::path& dir, const std::vector<TensorSpec>& specs,
                  const std::vector<ShardPlan>& shards) {
  nlohmann::ordered_json index;
  std::uint64_t total = 0;
  for (const auto& t : specs) total += t.Bytes();
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json wm = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& sp : shards) {
    for (std::size_t idx : sp.tensors) entries.emplace_back(specs[idx].name, sp.file_name);
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& [name, file] : entries) wm[name] = file;
  index["weight_map"] = std::move(wm);
  return WriteTextFile(dir / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace

Status MakeCheckpoint(const MkckptOptions& o) {
  if (o.out_dir.empty()) return Status::InvalidArgument("no output folder given");
  HOIST_ASSIGN_OR_RETURN(const std::string config, ResolveConfig(o));
  HOIST_ASSIGN_OR_RETURN(
      const std::vector<TensorSpec> specs,
      o.tensors_path.empty() ? ListTensorSpecs(config) : ReadTensorSpecs(o.tensors_path));
  HOIST_RETURN_IF_ERROR(CheckUnique(specs));
  const std::uint64_t shard_size = o.shard_size ? o.shard_size : kDefaultShardSize;
  const std::vector<ShardPlan> shards = PlanShards(specs, shard_size);

  const fs::path dir(o.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError(o.out_dir + ": create folder: " + ec.message());
  HOIST_RETURN_IF_ERROR(RemoveStale(dir));

  ShardFiles files(dir, shards);
  for (std::size_t k = 0; k < shards.size(); ++k) HOIST_RETURN_IF_ERROR(files.Create(k));
  const Status written =
      WriteChunks(o, specs, o.header_only ? std::vector<Task>{} : ChunkTasks(specs, shards), files);
  const Status closed = files.Close();
  HOIST_RETURN_IF_ERROR(written);
  HOIST_RETURN_IF_ERROR(closed);
  if (shards.size() > 1) HOIST_RETURN_IF_ERROR(WriteIndex(dir, specs, shards));
  return WriteTextFile(dir / "config.json", config);
}

}  // namespace hoist::tools
