// `hoist pack`'s library: see codec/pack/pack.h and docs/PACKED.md.
#include "codec/pack/pack.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "planner/checkpoint.h"
#include "planner/regular_file.h"
#include "planner/rules.h"
#include "tools/file_io.h"

namespace hoist::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::uint64_t kStreamAlign = 4096;
constexpr std::uint64_t kMaxRowBlockValues = 1u << 20;  // within the codec's sub-stream limit

struct SourceTensor {
  std::string file, name, dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0, bytes = 0;  // in the file
};

Result<std::string> ReadRange(const std::string& path, std::uint64_t offset, std::uint64_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open");
  std::string out(n, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(out.data(), static_cast<std::streamsize>(n));
  if (static_cast<std::uint64_t>(in.gcount()) != n) {
    return Status::IoError(path + ": short read of " + std::to_string(n) + " bytes at offset " +
                           std::to_string(offset));
  }
  return out;
}

// The tensors of one shard, in file order, read through the loader's own header validation
// (planner/safetensors.h: duplicate keys, overlapping or aliased byte ranges, bytes past the last
// tensor, __metadata__ that is not an object of strings, text after the JSON value): the packer
// refuses what `hoist load` refuses, with the same message.
Status ListFile(const std::string& path, std::vector<SourceTensor>& out) {
  planner::FileStat stat;
  HOIST_ASSIGN_OR_RETURN(const planner::SafetensorsHeader header,
                         planner::ReadSafetensorsHeader(path, &stat));
  for (const planner::TensorEntry& t : header.tensors) {  // sorted by begin
    out.push_back({path, t.name, std::string(planner::DTypeName(t.dtype)), t.shape,
                   header.data_start + t.begin, t.bytes()});
  }
  return Status::Ok();
}

Status CheckOptions(const PackOptions& o) {
  std::error_code ec;
  if (o.model_dir.empty() || !fs::is_directory(o.model_dir, ec)) {
    return Status::InvalidArgument("--model " + o.model_dir + ": not a folder");
  }
  if (o.out_dir.empty()) return Status::InvalidArgument("--out is required");
  if (fs::exists(o.out_dir, ec) && fs::equivalent(o.model_dir, o.out_dir, ec)) {
    return Status::InvalidArgument("--out must differ from --model");
  }
  if (o.tp_multiple < 1 || o.tp_multiple > 1024) {
    return Status::InvalidArgument("--tp-multiple " + std::to_string(o.tp_multiple) +
                                   " is out of range: 1 to 1024");
  }
  if (o.threads < 0 || o.threads > 1024) {
    return Status::InvalidArgument("--threads " + std::to_string(o.threads) +
                                   " is out of range: 0 to 1024");
  }
  if (o.target_block_values < 256 || o.target_block_values > kMaxRowBlockValues ||
      o.shard_bytes < kStreamAlign) {
    return Status::InvalidArgument("a block target of 256..2^20 values and shards of at least " +
                                   std::to_string(kStreamAlign) + " bytes");
  }
  return Status::Ok();
}

// Values per row: every dimension but the first (a scalar or a 1-D tensor is one row).
std::uint64_t RowValues(const std::vector<std::uint64_t>& shape) {
  std::uint64_t v = 1;
  for (std::size_t i = shape.size() < 2 ? 0 : 1; i < shape.size(); ++i) v *= shape[i];
  return v;
}

// Which tensors are cut into column stripes: those tensor parallelism cuts by columns under the
// family rules of config.json (planner/rules.h).
class StripeRules {
 public:
  StripeRules(const std::string& model_dir, std::uint32_t tp_multiple) : tp_(tp_multiple) {
    if (tp_ < 2) return;
    Result<planner::Family> family = LoadFamily(model_dir);
    if (family.ok()) {
      family_ = *family;
    } else {
      note_ = "no column stripes: " + family.status().message();
    }
  }

  bool Striped(const SourceTensor& t) const {
    const auto dtype = codec::DTypeFromName(t.dtype);  // the coded dtypes (codec/split.h)
    if (!family_ || !dtype || codec::SplitOf(*dtype).symbol_bits == 0 || t.shape.size() != 2 ||
        t.shape[1] == 0 || t.shape[1] % tp_ != 0) {
      return false;
    }
    Result<planner::TensorRule> rule =
        planner::ClassifyTensor(config_, *family_, t.name, t.shape, t.file);
    return rule.ok() &&
           (rule->role == planner::Role::kRow || rule->role == planner::Role::kExpertDown);
  }
  const std::string& note() const { return note_; }

 private:
  Result<planner::Family> LoadFamily(const std::string& model_dir) {
    const std::string path = model_dir + "/config.json";
    HOIST_ASSIGN_OR_RETURN(planner::RegularFile f, planner::RegularFile::Open(path, false));
    if (f.size() > (16u << 20)) return Status::Corrupt(path + ": larger than 16 MiB");
    std::string text(f.size(), '\0');
    const ssize_t n = ::pread(f.fd(), text.data(), text.size(), 0);
    if (n < 0) return Status::IoError(path + ": read: " + std::strerror(errno));
    text.resize(static_cast<std::size_t>(n));
    HOIST_ASSIGN_OR_RETURN(config_, planner::ParseModelConfig(path, text));
    Result<planner::Family> family = planner::FamilyOf(config_);
    if (!family.ok()) return std::move(family).status().Annotate(path);
    return family;
  }

  std::uint32_t tp_;
  planner::ModelConfig config_;
  std::optional<planner::Family> family_;
  std::string note_;
};

struct EncodedStream {
  std::vector<std::uint8_t> bytes;
  std::uint64_t col_begin = 0, col_end = 0, block_rows = 0;
  std::uint64_t header_xxh64 = 0;  // the header's own checksum (its last 8 bytes)
};

// Codec options for a (sub-)tensor of `rows` rows of `row_values` values (`rows` 0: 1-D or a
// scalar): blocks of whole rows, sub-streams scaled to the block.
codec::EncodeOptions BlockOptions(std::uint64_t rows, std::uint64_t row_values,
                                  const PackOptions& o, int threads, std::uint64_t* block_rows) {
  codec::EncodeOptions e;
  e.threads = threads;
  e.block_values = o.target_block_values;
  *block_rows =
      rows > 0 ? PackBlockRows(rows, row_values, o.target_block_values, o.tp_multiple) : 0;
  if (*block_rows > 0) e.block_values = static_cast<std::uint32_t>(*block_rows * row_values);
  // 64 values a sub-stream (1024 for a 64 Ki-value block): a GPU block decodes with 1024 threads,
  // so the few blocks of one staging slot decode in a quarter of the time 256 would take.
  e.sub_streams = std::clamp<std::uint32_t>(e.block_values / 64 / 32 * 32, 32, 1024);
  return e;
}

// Columns [c0, c1) of every row of a rows x row_values tensor of `vb`-byte values.
std::vector<std::uint8_t> Columns(std::span<const std::uint8_t> data, std::uint64_t rows,
                                  std::uint64_t row_values, std::uint64_t c0, std::uint64_t c1,
                                  std::uint64_t vb) {
  std::vector<std::uint8_t> out((c1 - c0) * rows * vb);
  for (std::uint64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * (c1 - c0) * vb, data.data() + (r * row_values + c0) * vb,
                (c1 - c0) * vb);
  }
  return out;
}

// The tensor's streams: `stripes` column stripes (1: the whole tensor).
Result<std::vector<EncodedStream>> EncodeTensor(const SourceTensor& t,
                                                std::span<const std::uint8_t> data,
                                                std::uint32_t stripes, const PackOptions& o,
                                                int threads) {
  const auto dtype = codec::DTypeFromName(t.dtype).value_or(codec::DType::kBytes);
  const std::uint64_t row_values = RowValues(t.shape);
  const std::uint64_t rows = t.shape.size() >= 2 ? t.shape[0] : 0;
  std::vector<EncodedStream> out;
  for (std::uint32_t s = 0; s < stripes; ++s) {
    EncodedStream e;
    e.col_begin = row_values * s / stripes;
    e.col_end = row_values * (s + 1) / stripes;
    const std::uint64_t width = e.col_end - e.col_begin;
    codec::EncodeOptions eo = BlockOptions(rows, width, o, threads, &e.block_rows);
    eo.id = codec::StreamId{codec::Xxh64(t.name.data(), t.name.size()), s, stripes, e.col_begin};
    std::vector<std::uint8_t> stripe;
    if (stripes > 1) {
      stripe = Columns(data, rows, row_values, e.col_begin, e.col_end, codec::DTypeSize(dtype));
    }
    auto stream = codec::Encode(dtype, stripes > 1 ? stripe : data, eo);
    if (!stream.ok()) return std::move(stream).status().Annotate(t.file + ": tensor " + t.name);
    e.bytes = std::move(stream).value();
    std::uint32_t header_bytes = 0;  // the codec's header size field (docs/CODEC.md)
    std::memcpy(&header_bytes, e.bytes.data() + 28, 4);
    std::memcpy(&e.header_xxh64, e.bytes.data() + header_bytes - 8, 8);
    out.push_back(std::move(e));
  }
  return out;
}

std::string Hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Shards are written through one 8 MiB buffer, flushed with whole-buffer pwrites at offsets
// that are multiples of it (as hoist-mkckpt writes), not as a stream of tensor-sized writes and
// small pads.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::uint64_t limit) : dir_(std::move(dir)), limit_(limit) {
    buf_.reserve(kBufferBytes);
  }
  ~ShardWriter() { (void)Close(); }
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends a tensor's streams to one shard (a new one when they would push the current one
  // past the limit); sets the shard's name and each stream's offset in it.
  Status Append(const std::vector<EncodedStream>& streams, std::string* file,
                std::vector<std::uint64_t>* at) {
    std::uint64_t need = 0;
    for (const EncodedStream& s : streams) need = Aligned(need) + s.bytes.size();
    if (fd_ < 0 || (offset_ > 0 && Aligned(offset_) + need > limit_)) {
      HOIST_RETURN_IF_ERROR(Open());
    }
    at->clear();
    for (const EncodedStream& s : streams) {
      static const std::uint8_t zeros[kStreamAlign] = {};
      const std::uint64_t pad = Aligned(offset_) - offset_;
      HOIST_RETURN_IF_ERROR(Put(zeros, pad));
      at->push_back(offset_);
      HOIST_RETURN_IF_ERROR(Put(s.bytes.data(), s.bytes.size()));
    }
    *file = name_;
    return Status::Ok();
  }
  Status Close() {
    if (fd_ < 0) return Status::Ok();
    Status s = Flush();
    if (::close(fd_) != 0 && s.ok()) {
      s = Status::IoError(Path() + ": close: " + std::strerror(errno));
    }
    fd_ = -1;
    return s;
  }
  std::uint64_t total() const { return total_; }

 private:
  static constexpr std::uint64_t kBufferBytes = 8ull << 20;
  static std::uint64_t Aligned(std::uint64_t x) {
    return (x + kStreamAlign - 1) / kStreamAlign * kStreamAlign;
  }
  std::string Path() const { return dir_ + "/" + name_; }
  Status Open() {
    HOIST_RETURN_IF_ERROR(Close());
    char name[32];
    std::snprintf(name, sizeof(name), "packed-%05d.bin", ++index_);
    name_ = name;
    fd_ = ::open(Path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::IoError(Path() + ": cannot create: " + std::strerror(errno));
    offset_ = flushed_ = 0;
    return Status::Ok();
  }
  Status Put(const std::uint8_t* p, std::uint64_t n) {
    offset_ += n;
    total_ += n;
    while (n > 0) {
      const std::uint64_t m = std::min<std::uint64_t>(n, kBufferBytes - buf_.size());
      buf_.insert(buf_.end(), p, p + m);
      p += m;
      n -= m;
      if (buf_.size() == kBufferBytes) HOIST_RETURN_IF_ERROR(Flush());
    }
    return Status::Ok();
  }
  Status Flush() {
    if (buf_.empty()) return Status::Ok();
    HOIST_RETURN_IF_ERROR(WriteAll(fd_, buf_.data(), buf_.size(), flushed_, Path()));
    flushed_ += buf_.size();
    buf_.clear();
    return Status::Ok();
  }

  std::string dir_, name_;
  std::uint64_t limit_, offset_ = 0, flushed_ = 0, total_ = 0;
  int index_ = 0;
  int fd_ = -1;
  std::vector<std::uint8_t> buf_;  // bytes [flushed_, offset_) of the open shard
};

Status CopyOtherFiles(const std::string& from, const std::string& to) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name == planner::kPackedIndexFile) {
      continue;
    }
    fs::copy_file(e.path(), fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::IoError(e.path().string() + ": copy: " + ec.message());
  }
  return ec ? Status::IoError(from + ": " + ec.message()) : Status::Ok();
}

// The index entry of one tensor (docs/PACKED.md, version 3).
json IndexEntry(const SourceTensor& t, std::uint64_t xxh64, const std::string& file,
                const std::vector<EncodedStream>& streams, const std::vector<std::uint64_t>& at) {
  json list = json::array();
  for (std::size_t i = 0; i < streams.size(); ++i) {
    list.push_back({{"offset", at[i]},
                    {"bytes", streams[i].bytes.size()},
                    {"columns", {streams[i].col_begin, streams[i].col_end}},
                    {"block_rows", streams[i].block_rows},
                    {"header_xxh64", Hex(streams[i].header_xxh64)}});
  }
  return {{"dtype", t.dtype},    {"shape", t.shape}, {"original_bytes", t.bytes},
          {"xxh64", Hex(xxh64)}, {"file", file},     {"streams", std::move(list)}};
}

Status WriteIndex(const std::string& out_dir, const json& index) {
  const std::string path = out_dir + "/" + planner::kPackedIndexFile;
  std::ofstream out(path, std::ios::trunc);
  out << index.dump(1) << "\n";
  out.close();
  return out ? Status::Ok() : Status::IoError(path + ": write failed");
}

Result<std::vector<SourceTensor>> ListTensors(const std::string& model_dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  }
  if (ec) return Status::IoError(model_dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) return Status::InvalidArgument(model_dir + ": no .safetensors files");
  std::vector<SourceTensor> tensors;
  for (const auto& f : files) HOIST_RETURN_IF_ERROR(ListFile(f, tensors));
  return tensors;
}

// Adds a tensor's sizes to the summary: its dtype's sums, and the furthest-above-bound list.
void AddSizes(const SourceTensor& t, std::span<const std::uint8_t> data,
              const std::vector<EncodedStream>& streams, int threads, PackSummary* summary) {
  const auto dtype = codec::DTypeFromName(t.dtype).value_or(codec::DType::kBytes);
  PackSizes one{t.name, t.dtype, 1, 0, t.bytes, 0, codec::SplitEntropyBytes(dtype, data, threads)};
  for (const EncodedStream& e : streams) {
    one.packed_bytes += e.bytes.size();
    one.coded = e.bytes[7] == static_cast<std::uint8_t>(codec::Method::kHuffman) ? 1 : one.coded;
  }
  auto it = std::find_if(summary->by_dtype.begin(), summary->by_dtype.end(),
                         [&](const PackSizes& s) { return s.name == t.dtype; });
  if (it == summary->by_dtype.end()) {
    it = summary->by_dtype.insert(
        std::upper_bound(summary->by_dtype.begin(), summary->by_dtype.end(), t.dtype,
                         [](const std::string& d, const PackSizes& s) { return d < s.name; }),
        PackSizes{t.dtype, t.dtype});
  }
  it->tensors += 1;
  it->coded += one.coded;
  it->original_bytes += one.original_bytes;
  it->packed_bytes += one.packed_bytes;
  it->bound_bytes += one.bound_bytes;
  auto excess = [](const PackSizes& s) {
    return static_cast<double>(s.packed_bytes) - s.bound_bytes;
  };
  auto& worst = summary->furthest;
  worst.insert(std::upper_bound(
                   worst.begin(), worst.end(), one,
                   [&](const PackSizes& a, const PackSizes& b) { return excess(a) > excess(b); }),
               one);
  if (worst.size() > 3) worst.pop_back();
}

Status PreadAll(int fd, const std::string& path, std::uint64_t offset, std::uint8_t* out,
                std::uint64_t n) {
  for (std::uint64_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::IoError(path + ": read at offset " + std::to_string(offset + done) + ": " +
                             (got == 0 ? std::string("end of file") : std::strerror(errno)));
    }
    done += static_cast<std::uint64_t>(got);
  }
  return Status::Ok();
}

}  // namespace

std::uint64_t PackBlockRows(std::uint64_t rows, std::uint64_t row_values, std::uint32_t target,
                            std::uint32_t tp_multiple) {
  if (rows == 0 || row_values == 0 || row_values > kMaxRowBlockValues) return 0;
  const std::uint64_t want = std::max<std::uint64_t>(1, target / row_values);
  const std::uint64_t span = tp_multiple > 0 && rows % tp_multiple == 0 ? rows / tp_multiple : rows;
  for (std::uint64_t r = std::min(want, span); r > 1; --r) {
    if (span % r == 0) return r;
  }
  return 1;
}

Result<PackSummary> PackCheckpoint(const PackOptions& o) {
  HOIST_RETURN_IF_ERROR(CheckOptions(o));
  HOIST_ASSIGN_OR_RETURN(const std::vector<SourceTensor> tensors, ListTensors(o.model_dir));
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return Status::IoError(o.out_dir + ": " + ec.message());
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const StripeRules rules(o.model_dir, o.tp_multiple);
  ShardWriter writer(o.out_dir, o.shard_bytes);
  json index = {{"format", "hoist-packed"},
                {"version", planner::kPackedIndexVersion},
                {"codec_version", codec::kFormatVersion},
                {"tp_multiple", o.tp_multiple},
                {"tensors", json::object()}};
  PackSummary summary;
  summary.note = rules.note();
  for (const auto& t : tensors) {
    HOIST_ASSIGN_OR_RETURN(std::string bytes, ReadRange(t.file, t.offset, t.bytes));
    const std::span<const std::uint8_t> data(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                             bytes.size());
    const bool striped = rules.Striped(t);
    HOIST_ASSIGN_OR_RETURN(const std::vector<EncodedStream> streams,
                           EncodeTensor(t, data, striped ? o.tp_multiple : 1, o, threads));
    std::string file;
    std::vector<std::uint64_t> at;
    HOIST_RETURN_IF_ERROR(writer.Append(streams, &file, &at));
    index["tensors"][t.name] =
        IndexEntry(t, codec::Xxh64(data.data(), data.size()), file, streams, at);
    AddSizes(t, data, streams, threads, &summary);
    ++summary.tensors;
    summary.striped += striped ? 1 : 0;
    summary.original_bytes += t.bytes;
  }
  HOIST_RETURN_IF_ERROR(writer.Close());
  summary.packed_bytes = writer.total();
  HOIST_RETURN_IF_ERROR(WriteIndex(o.out_dir, index));
  HOIST_RETURN_IF_ERROR(CopyOtherFiles(o.model_dir, o.out_dir));
  // What was written reads back as a valid index (offsets, columns, every stream header).
  HOIST_RETURN_IF_ERROR(planner::ReadPackedIndex(o.out_dir).status());
  return summary;
}

Result<PackedTensor> ReadPackedTensor(const std::string& dir, const std::string& name) {
  HOIST_ASSIGN_OR_RETURN(const planner::PackedIndex index, planner::ReadPackedIndex(dir));
  return ReadPackedTensor(index, name);
}

Result<PackedTensor> ReadPackedTensor(const planner::PackedIndex& index, const std::string& name) {
  const auto it = std::find_if(index.tensors.begin(), index.tensors.end(),
                               [&](const planner::PackedTensorEntry& t) { return t.name == name; });
  if (it == index.tensors.end()) {
    return Status::NotFound(index.dir + "/" + planner::kPackedIndexFile + ": no tensor " + name);
  }
  const planner::PackedTensorEntry& t = *it;
  const std::string path = index.dir + "/" + index.shards[t.shard];
  HOIST_ASSIGN_OR_RETURN(const planner::RegularFile file, planner::RegularFile::Open(path, false));
  PackedTensor out{t.dtype, t.shape, std::vector<std::uint8_t>(t.original_bytes)};
  const std::uint64_t vb =
      codec::DTypeSize(codec::DTypeFromName(t.dtype).value_or(codec::DType::kBytes));
  const std::uint64_t rows = t.row_values == 0 ? 0 : t.original_bytes / vb / t.row_values;
  std::vector<std::uint8_t> stream, stripe;
  for (const planner::PackedStreamEntry& s : t.streams) {
    const std::string where =
        path + ": tensor " + name + " (stream at offset " + std::to_string(s.offset) + ")";
    stream.resize(s.bytes);
    HOIST_RETURN_IF_ERROR(PreadAll(file.fd(), path, s.offset, stream.data(), s.bytes));
    const std::uint64_t width = s.col_end - s.col_begin;
    stripe.resize(rows * width * vb);
    HOIST_RETURN_IF_ERROR(codec::Decode(stream, stripe, where));
    for (std::uint64_t r = 0; r < rows; ++r) {
      std::memcpy(out.data.data() + (r * t.row_values + s.col_begin) * vb,
                  stripe.data() + r * width * vb, width * vb);
    }
  }
  if (codec::Xxh64(out.data.data(), out.data.size()) != t.xxh64) {
    return Status::Corrupt(path + ": tensor " + name +
                           ": decoded bytes do not match the index's xxh64 " + Hex(t.xxh64));
  }
  return out;
}

}  // namespace hoist::tools
