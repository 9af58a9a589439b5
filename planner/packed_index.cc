// The packed index reader: see planner/packed_index.h and docs/PACKED.md.
#include "planner/packed_index.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <thread>
#include <utility>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "codec/layout.h"
#include "planner/confine.h"
#include "planner/dtype.h"
#include "planner/regular_file.h"
#include "planner/strict_json.h"
#include "util/parallel.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;
using internal::JsonTypeName;
using internal::QuoteForMessage;
using nlohmann::json;

constexpr std::uint64_t kMaxIndexBytes = 256ull << 20;
// Top object > tensors > tensor > streams > stream > columns.
constexpr int kMaxIndexDepth = 6;
constexpr std::uint64_t kMaxIndexTpMultiple = 1024;
constexpr int kHeaderThreads = 16;  // at most, reading the streams' headers
constexpr std::uint64_t kTensorsPerThread = 128;

std::string Num(std::uint64_t v) { return std::to_string(v); }

// A JSON value as it appears in the index, cut for a message.
std::string Shown(const json& v) {
  const std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 40 ? text : text.substr(0, 40) + "...";
}

// `rel` inside the canonical folder `dir`: relative, in normal form, no "..", and every symlink
// on the way staying inside ContainmentRoot(dir). `where` names who named it.
Result<fs::path> ResolveInside(const fs::path& dir, const std::string& rel,
                               const std::string& where) {
  const std::string quoted = QuoteForMessage(rel);
  const fs::path p(rel);
  if (rel.empty() || rel.find('\0') != std::string::npos || p.is_absolute() || p.has_root_name() ||
      p.has_root_directory() || p.lexically_normal() != p || !p.has_filename()) {
    return Status::Corrupt(where + ": shard path " + quoted +
                           " must be a relative file path in normal form");
  }
  for (const fs::path& part : p) {
    if (part == "..") {
      return Status::Corrupt(where + ": shard path " + quoted + " would leave the folder");
    }
  }
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir / p, ec);
  if (ec) {
    return Status::Corrupt(where + ": shard " + quoted + " is missing (" + (dir / p).string() +
                           ": " + ec.message() + ")");
  }
  if (!IsInside(canonical, ContainmentRoot(dir))) {
    return Status::Corrupt(where + ": shard " + quoted + " resolves to " + canonical.string() +
                           ", outside the folder");
  }
  return canonical;
}

Status PreadExact(int fd, const std::string& path, std::uint64_t offset, std::uint64_t n,
                  std::uint8_t* out) {
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::IoError(path + ": read at offset " + Num(offset + done) + ": " +
                             (got == 0 ? std::string("end of file") : std::strerror(errno)));
    }
    done += static_cast<std::uint64_t>(got);
  }
  return Status::Ok();
}

Result<std::string> ReadIndexText(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(RegularFile file, RegularFile::Open(path));
  if (file.size() > kMaxIndexBytes) {
    return Status::Corrupt(path + ": " + Num(file.size()) + " bytes is larger than the " +
                           Num(kMaxIndexBytes) + "-byte limit for a JSON file");
  }
  std::string text(file.size(), '\0');
  HOIST_RETURN_IF_ERROR(
      PreadExact(file.fd(), path, 0, text.size(), reinterpret_cast<std::uint8_t*>(text.data())));
  return text;
}

// Exactly `keys`: an unknown key or a missing one is refused.
Status CheckKeys(const json& obj, const std::string& where, const char* what,
                 std::initializer_list<std::string_view> keys) {
  if (!obj.is_object()) {
    return Status::Corrupt(where + ": " + what + " must be an object, got " +
                           std::string(JsonTypeName(obj)));
  }
  for (const auto& [key, value] : obj.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return Status::Corrupt(where + ": unknown key " + QuoteForMessage(key) + " in " + what);
    }
  }
  for (std::string_view key : keys) {
    if (!obj.contains(key)) {
      return Status::Corrupt(where + ": " + what + " has no \"" + std::string(key) + "\"");
    }
  }
  return Status::Ok();
}

Result<std::uint64_t> Count(const json& v, const std::string& where, std::string_view key) {
  if (!v.is_number_unsigned()) {
    return Status::Corrupt(where + ": \"" + std::string(key) +
                           "\" must be a non-negative integer, got " +
                           std::string(JsonTypeName(v)) + " " + Shown(v));
  }
  return v.get<std::uint64_t>();
}

Result<std::uint64_t> ParseHex64(const json& v, const std::string& where, std::string_view key) {
  const std::string text = v.is_string() ? v.get<std::string>() : "";
  if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Status::Corrupt(where + ": \"" + std::string(key) +
                           "\" must be 16 lower-case hex digits, got " + Shown(v));
  }
  return std::stoull(text, nullptr, 16);
}

// dtype, shape, original_bytes (checked against each other), row_values.
Status ParseShape(const json& t, const std::string& where, PackedTensorEntry* e) {
  if (!t["dtype"].is_string()) return Status::Corrupt(where + ": \"dtype\" must be a string");
  e->dtype = t["dtype"].get<std::string>();
  const std::optional<DType> dtype = ParseDType(e->dtype);
  if (!dtype) return Status::Corrupt(where + ": unknown dtype " + QuoteForMessage(e->dtype));
  HOIST_ASSIGN_OR_RETURN(e->original_bytes, Count(t["original_bytes"], where, "original_bytes"));
  if (!t["shape"].is_array()) return Status::Corrupt(where + ": \"shape\" must be an array");
  // A row: every dimension but the first (a scalar or a 1-D tensor is one row).
  std::uint64_t rows = 1, row_values = 1;
  bool overflow = false;
  auto times = [&](std::uint64_t a, std::uint64_t b) {
    overflow = overflow || (b != 0 && a > codec::layout::kMaxOriginalBytes / b);
    return overflow ? 0 : a * b;
  };
  for (std::size_t i = 0; i < t["shape"].size(); ++i) {
    HOIST_ASSIGN_OR_RETURN(const std::uint64_t dim, Count(t["shape"][i], where, "shape"));
    e->shape.push_back(dim);
    const bool first = i == 0 && t["shape"].size() >= 2;
    (first ? rows : row_values) = times(first ? rows : row_values, dim);
  }
  const std::uint64_t values = times(rows, row_values);
  if (overflow || times(values, DTypeSize(*dtype)) != e->original_bytes) {
    return Status::Corrupt(where + ": shape " + Shown(t["shape"]) + " of " + e->dtype +
                           " does not hold original_bytes " + Num(e->original_bytes));
  }
  e->row_values = row_values;
  return Status::Ok();
}

// The streams' JSON: offset, bytes, columns (tiling [0, row_values) in order), block_rows.
Status ParseStreams(const json& t, const std::string& where, PackedTensorEntry* e) {
  const json& streams = t["streams"];
  if (!streams.is_array() || streams.empty()) {
    return Status::Corrupt(where + ": \"streams\" must be a non-empty array");
  }
  std::uint64_t next = 0;
  for (const json& s : streams) {
    const std::string at = where + ": stream " + Num(e->streams.size());
    HOIST_RETURN_IF_ERROR(
        CheckKeys(s, at, "a stream", {"offset", "bytes", "columns", "block_rows", "header_xxh64"}));
    PackedStreamEntry out;
    HOIST_ASSIGN_OR_RETURN(out.offset, Count(s["offset"], at, "offset"));
    HOIST_ASSIGN_OR_RETURN(out.bytes, Count(s["bytes"], at, "bytes"));
    HOIST_ASSIGN_OR_RETURN(out.block_rows, Count(s["block_rows"], at, "block_rows"));
    HOIST_ASSIGN_OR_RETURN(out.header_xxh64, ParseHex64(s["header_xxh64"], at, "header_xxh64"));
    const json& c = s["columns"];
    if (!c.is_array() || c.size() != 2) {
      return Status::Corrupt(at + ": \"columns\" must be [begin, end]");
    }
    HOIST_ASSIGN_OR_RETURN(out.col_begin, Count(c[0], at, "columns"));
    HOIST_ASSIGN_OR_RETURN(out.col_end, Count(c[1], at, "columns"));
    const bool empty_ok = e->row_values == 0 && streams.size() == 1;
    if (out.col_begin != next || out.col_end > e->row_values ||
        (out.col_end <= out.col_begin && !empty_ok)) {
      return Status::Corrupt(at + ": columns " + Num(out.col_begin) + ".." + Num(out.col_end) +
                             " do not continue the tiling of 0.." + Num(e->row_values) +
                             " at column " + Num(next));
    }
    next = out.col_end;
    e->streams.push_back(std::move(out));
  }
  if (next != e->row_values) {
    return Status::Corrupt(where + ": the streams cover columns 0.." + Num(next) + " of " +
                           Num(e->row_values));
  }
  return Status::Ok();
}

// One opened shard file.
struct Shard {
  std::string rel, path;  // as the index names it; canonical
  RegularFile file;
  dev_t dev = 0;  // the opened file's identity: two names of one file are refused
  ino_t ino = 0;
  std::vector<std::uint32_t> tensors;  // indices into the parsed tensors
};

std::string Hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Stream `index` of tensor t, whose header parsed as `info`, is the stream the index entry
// recorded (its header checksum), of this tensor and at this place (its identity), and a
// one-stream tensor's stream holds the tensor's bytes (its content checksum).
Status CheckTie(const codec::StreamInfo& info, const PackedTensorEntry& t, std::uint32_t index,
                const PackedStreamEntry& s, const std::string& name) {
  if (info.header_checksum != s.header_xxh64) {
    return Status::Corrupt(name + ": header checksum " + Hex(info.header_checksum) +
                           ", the index recorded " + Hex(s.header_xxh64) +
                           " (another stream, or one rewritten since it was packed)");
  }
  const codec::StreamId want{t.name_xxh64, index, static_cast<std::uint32_t>(t.streams.size()),
                             s.col_begin};
  if (info.id != want) {
    return Status::Corrupt(name + ": the stream says it is stream " + Num(info.id.index) + " of " +
                           Num(info.id.count) + " (first column " + Num(info.id.first_column) +
                           ") of the tensor whose name hashes to " + Hex(info.id.tensor) +
                           "; the index wants stream " + Num(want.index) + " of " +
                           Num(want.count) + " (first column " + Num(want.first_column) +
                           ") of this tensor (" + Hex(want.tensor) + ")");
  }
  if (t.streams.size() == 1 && info.content_checksum != t.xxh64) {
    return Status::Corrupt(name + ": the stream's content checksum " + Hex(info.content_checksum) +
                           " is not the tensor's xxh64 " + Hex(t.xxh64));
  }
  return Status::Ok();
}

class IndexReader {
 public:
  IndexReader(fs::path dir, std::string index_path)
      : dir_(std::move(dir)), index_path_(std::move(index_path)) {}

  Result<PackedIndex> Read(const std::string& text);

 private:
  Status ParseTop(const json& root, PackedIndex* out);
  Status ParseTensor(const std::string& name, const json& t, PackedTensorEntry* e) const;
  Status ParseTensors(const json& tensors);
  Status ReadHeaders();
  Result<std::uint32_t> OpenShard(const std::string& rel, const std::string& where);
  Status ReadHeader(const Shard& shard, const PackedTensorEntry& t, std::uint32_t index,
                    PackedStreamEntry* s);
  Status CheckStreams(const Shard& shard);
  PackedIndex Assemble(std::uint32_t tp_multiple);

  fs::path dir_;
  std::string index_path_;
  std::vector<PackedTensorEntry> tensors_;
  std::vector<Shard> shards_;  // in first-use order until Assemble
};

std::string TensorWhere(const std::string& index_path, const std::string& name) {
  return index_path + ": tensor " + QuoteForMessage(name);
}

Status IndexReader::ParseTop(const json& root, PackedIndex* out) {
  HOIST_RETURN_IF_ERROR(
      CheckKeys(root, index_path_, "the index",
                {"format", "version", "codec_version", "tp_multiple", "tensors"}));
  if (root["format"] != "hoist-packed") {
    return Status::Corrupt(index_path_ + ": \"format\" is " + Shown(root["format"]) +
                           ", not \"hoist-packed\"");
  }
  HOIST_ASSIGN_OR_RETURN(const std::uint64_t version,
                         Count(root["version"], index_path_, "version"));
  if (version != static_cast<std::uint64_t>(kPackedIndexVersion)) {
    return Status::Unsupported(
        index_path_ + ": packed index version " + Num(version) +
        (version > static_cast<std::uint64_t>(kPackedIndexVersion)
             ? " is newer than this hoist reads (" + Num(kPackedIndexVersion) + ")"
             : " is older than this hoist reads (" + Num(kPackedIndexVersion) +
                   "): pack the checkpoint again with `hoist pack`"));
  }
  HOIST_ASSIGN_OR_RETURN(const std::uint64_t codec_version,
                         Count(root["codec_version"], index_path_, "codec_version"));
  if (codec_version == 0 || codec_version > codec::kFormatVersion) {
    return Status::Unsupported(index_path_ + ": codec version " + Num(codec_version) +
                               " (this hoist decodes version " + Num(codec::kFormatVersion) + ")");
  }
  HOIST_ASSIGN_OR_RETURN(const std::uint64_t tp,
                         Count(root["tp_multiple"], index_path_, "tp_multiple"));
  if (tp < 1 || tp > kMaxIndexTpMultiple) {
    return Status::Corrupt(index_path_ + ": \"tp_multiple\" " + Num(tp) + " is not in 1.." +
                           Num(kMaxIndexTpMultiple));
  }
  out->tp_multiple = static_cast<std::uint32_t>(tp);
  if (!root["tensors"].is_object()) {
    return Status::Corrupt(index_path_ + ": \"tensors\" must be an object");
  }
  return Status::Ok();
}

Result<std::uint32_t> IndexReader::OpenShard(const std::string& rel, const std::string& where) {
  for (std::uint32_t i = 0; i < shards_.size(); ++i) {
    if (shards_[i].rel == rel) return i;
  }
  HOIST_ASSIGN_OR_RETURN(const fs::path canonical, ResolveInside(dir_, rel, where));
  for (const Shard& s : shards_) {
    if (s.path == canonical.string()) {
      return Status::Corrupt(where + ": shard " + QuoteForMessage(rel) + " is the same file as " +
                             QuoteForMessage(s.rel));
    }
  }
  Result<RegularFile> file = RegularFile::Open(canonical.string());
  if (!file.ok()) {
    const Code code = file.status().code() == Code::kIoError ? Code::kIoError : Code::kCorrupt;
    return Status(code, where + ": " + file.status().message());
  }
  struct stat st {};
  if (::fstat(file->fd(), &st) != 0) {
    return Status::IoError(where + ": " + canonical.string() + ": fstat: " + std::strerror(errno));
  }
  for (const Shard& s : shards_) {
    if (s.dev == st.st_dev && s.ino == st.st_ino) {
      return Status::Corrupt(where + ": shard " + QuoteForMessage(rel) + " (" + canonical.string() +
                             ") is the same file as shard " + QuoteForMessage(s.rel) +
                             " (one inode, two names: a hard link?)");
    }
  }
  shards_.push_back(
      Shard{rel, canonical.string(), std::move(file).value(), st.st_dev, st.st_ino, {}});
  return static_cast<std::uint32_t>(shards_.size() - 1);
}

// One tensor's entry, all but its shard (OpenShard) and its headers (ReadHeader).
Status IndexReader::ParseTensor(const std::string& name, const json& t,
                                PackedTensorEntry* e) const {
  const std::string where = TensorWhere(index_path_, name);
  if (name.empty()) return Status::Corrupt(index_path_ + ": a tensor has an empty name");
  HOIST_RETURN_IF_ERROR(CheckKeys(
      t, where, "the tensor", {"dtype", "shape", "original_bytes", "xxh64", "file", "streams"}));
  e->name = name;
  e->name_xxh64 = codec::Xxh64(name.data(), name.size());
  HOIST_RETURN_IF_ERROR(ParseShape(t, where, e));
  HOIST_ASSIGN_OR_RETURN(e->xxh64, ParseHex64(t["xxh64"], where, "xxh64"));
  if (!t["file"].is_string()) return Status::Corrupt(where + ": \"file\" must be a string");
  return ParseStreams(t, where, e);
}

// Every tensor's entry, on up to kHeaderThreads threads (the first error in index order), then
// each one's shard, in index order.
Status IndexReader::ParseTensors(const json& tensors) {
  std::vector<std::pair<const std::string*, const json*>> items;
  items.reserve(tensors.size());
  for (auto it = tensors.begin(); it != tensors.end(); ++it) items.emplace_back(&it.key(), &*it);
  tensors_.resize(items.size());
  const int threads = util::ThreadsFor(items.size(), kTensorsPerThread, kHeaderThreads);
  HOIST_RETURN_IF_ERROR(util::ParallelTry(items.size(), threads, [&](std::uint64_t i) {
    return ParseTensor(*items[i].first, *items[i].second, &tensors_[i]);
  }));
  for (std::uint32_t i = 0; i < items.size(); ++i) {
    const std::string where = TensorWhere(index_path_, *items[i].first);
    HOIST_ASSIGN_OR_RETURN(tensors_[i].shard,
                           OpenShard((*items[i].second)["file"].get<std::string>(), where));
    shards_[tensors_[i].shard].tensors.push_back(i);
  }
  return Status::Ok();
}

// Every parsed tensor's stream headers (ReadHeader), on up to kHeaderThreads threads: a packed
// DeepSeek-V3 has 45,000 streams, a pread and a parse each. The error returned is the one a
// single thread would meet first (the lowest tensor in index order).
Status IndexReader::ReadHeaders() {
  const int threads = util::ThreadsFor(tensors_.size(), kTensorsPerThread, kHeaderThreads);
  return util::ParallelTry(tensors_.size(), threads, [&](std::uint64_t i) {
    PackedTensorEntry& e = tensors_[i];
    for (std::uint32_t s = 0; s < e.streams.size(); ++s) {
      HOIST_RETURN_IF_ERROR(ReadHeader(shards_[e.shard], e, s, &e.streams[s]));
    }
    return Status::Ok();
  });
}

// Reads stream `s`'s header from its shard (the fixed part, then header_bytes of it) and checks
// it against the tensor: dtype, decoded size, whole stream size and rows per block.
Status IndexReader::ReadHeader(const Shard& shard, const PackedTensorEntry& t, std::uint32_t index,
                               PackedStreamEntry* s) {
  const std::string name = shard.path + ": tensor " + QuoteForMessage(t.name) +
                           " (stream at offset " + Num(s->offset) + ")";
  const std::uint64_t size = shard.file.size();
  if (s->offset > size || s->bytes > size - s->offset) {
    return Status::Corrupt(TensorWhere(index_path_, t.name) + ": stream at offset " +
                           Num(s->offset) + " (" + Num(s->bytes) + " bytes) runs past the end of " +
                           shard.path + " (" + Num(size) + " bytes)");
  }
  std::vector<std::uint8_t> head(std::min(s->bytes, codec::layout::kFixedHeaderBytes));
  HOIST_RETURN_IF_ERROR(
      PreadExact(shard.file.fd(), shard.path, s->offset, head.size(), head.data()));
  if (head.size() == codec::layout::kFixedHeaderBytes) {
    const std::uint64_t header_bytes = codec::layout::Load<std::uint32_t>(head.data() + 28);
    if (header_bytes > head.size() && header_bytes <= s->bytes) {
      head.resize(header_bytes);
      HOIST_RETURN_IF_ERROR(
          PreadExact(shard.file.fd(), shard.path, s->offset, head.size(), head.data()));
    }
  }
  HOIST_ASSIGN_OR_RETURN(const codec::StreamInfo info, codec::ParseHeader(head, s->bytes, name));
  const codec::DType want = codec::DTypeFromName(t.dtype).value_or(codec::DType::kBytes);
  const std::uint64_t value_bytes = codec::DTypeSize(want);
  const std::uint64_t rows = t.row_values == 0 ? 0 : t.original_bytes / value_bytes / t.row_values;
  const std::uint64_t width = s->col_end - s->col_begin;
  const std::uint64_t decoded = rows * width * value_bytes;
  if (info.dtype != want || info.original_bytes != decoded || info.stream_bytes() != s->bytes) {
    return Status::Corrupt(name + ": the header says " + Num(info.original_bytes) + " bytes of " +
                           std::string(codec::DTypeName(info.dtype)) + " in a " +
                           Num(info.stream_bytes()) + "-byte stream; the index: " + Num(decoded) +
                           " bytes of " + t.dtype + " in " + Num(s->bytes));
  }
  if (s->block_rows > rows || (s->block_rows != 0 && info.block_values != s->block_rows * width)) {
    return Status::Corrupt(name + ": blocks of " + Num(info.block_values) + " values are not " +
                           "block_rows " + Num(s->block_rows) + " of " + Num(width) + " values");
  }
  HOIST_RETURN_IF_ERROR(CheckTie(info, t, index, *s, name));
  s->header.assign(reinterpret_cast<const char*>(head.data()), info.header_bytes);
  return Status::Ok();
}

// No two streams of one shard overlap.
Status IndexReader::CheckStreams(const Shard& shard) {
  struct Span {
    std::uint64_t begin, end;
    std::uint32_t tensor;
  };
  std::vector<Span> spans;
  for (std::uint32_t t : shard.tensors) {
    for (const PackedStreamEntry& s : tensors_[t].streams) {
      spans.push_back({s.offset, s.offset + s.bytes, t});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return Status::Corrupt(TensorWhere(index_path_, tensors_[spans[i].tensor].name) +
                             ": stream at offset " + Num(spans[i].begin) + " of " + shard.path +
                             " overlaps a stream of tensor " +
                             QuoteForMessage(tensors_[spans[i - 1].tensor].name) + " (bytes " +
                             Num(spans[i - 1].begin) + ".." + Num(spans[i - 1].end) + ")");
    }
  }
  return Status::Ok();
}

// Shards sorted by name, tensors by (shard, first stream offset).
PackedIndex IndexReader::Assemble(std::uint32_t tp_multiple) {
  std::vector<std::uint32_t> order(shards_.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return shards_[a].rel < shards_[b].rel; });
  std::vector<std::uint32_t> rank(shards_.size());
  PackedIndex out;
  out.dir = dir_.string();
  out.tp_multiple = tp_multiple;
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    rank[order[i]] = i;
    out.shards.push_back(shards_[order[i]].rel);
  }
  for (PackedTensorEntry& t : tensors_) t.shard = rank[t.shard];
  std::sort(tensors_.begin(), tensors_.end(),
            [](const PackedTensorEntry& a, const PackedTensorEntry& b) {
              return a.shard != b.shard ? a.shard < b.shard
                                        : a.streams.front().offset < b.streams.front().offset;
            });
  out.tensors = std::move(tensors_);
  return out;
}

Result<PackedIndex> IndexReader::Read(const std::string& text) {
  HOIST_ASSIGN_OR_RETURN(json root,
                         internal::ParseStrictJson(index_path_, text, kMaxIndexDepth, 0));
  PackedIndex top;
  HOIST_RETURN_IF_ERROR(ParseTop(root, &top));
  HOIST_RETURN_IF_ERROR(ParseTensors(root["tensors"]));
  // The document is freed beside the header reads (a 53 MB index: a few hundred milliseconds).
  std::thread freeing([doc = std::move(root)]() mutable { doc = json(); });
  const Status read = ReadHeaders();
  freeing.join();
  HOIST_RETURN_IF_ERROR(read);
  for (const Shard& s : shards_) HOIST_RETURN_IF_ERROR(CheckStreams(s));
  return Assemble(top.tp_multiple);
}

}  // namespace

Result<PackedIndex> ReadPackedIndex(const std::string& dir_arg) {
  std::error_code ec;
  const fs::path dir = fs::canonical(dir_arg, ec);
  if (ec) return Status::NotFound(dir_arg + ": packed folder: " + ec.message());
  const fs::path index = dir / kPackedIndexFile;
  if (!fs::exists(fs::symlink_status(index, ec))) {
    return Status::NotFound(index.string() + ": no packed index (" + kPackedIndexFile + ")");
  }
  const std::string where = dir.string() + ": " + kPackedIndexFile;
  HOIST_ASSIGN_OR_RETURN(const fs::path resolved, ResolveInside(dir, kPackedIndexFile, where));
  HOIST_ASSIGN_OR_RETURN(const std::string text, ReadIndexText(resolved.string()));
  return IndexReader(dir, index.string()).Read(text);
}

}  // namespace hoist::planner
