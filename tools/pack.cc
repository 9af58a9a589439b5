// hoist-pack's library: see tools/pack.h and docs/PACKED.md.
#include "tools/pack.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "codec/checksum.h"
#include "codec/codec.h"

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

std::uint64_t KnownSize(const std::string& dtype) {
  const auto d = codec::DTypeFromName(dtype);
  return d ? codec::DTypeSize(*d) : 0;
}

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

Status ParseTensor(const std::string& path, const std::string& name, const json& t,
                   std::uint64_t data_start, std::uint64_t file_size, SourceTensor& out) {
  const std::string where = path + ": tensor " + name + ": ";
  if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
      !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
      t["data_offsets"].size() != 2) {
    return Status::Corrupt(where + "needs dtype, shape and two data_offsets");
  }
  out = {path, name, t["dtype"].get<std::string>(), {}, 0, 0};
  std::uint64_t values = 1;
  for (const auto& d : t["shape"]) {
    if (!d.is_number_unsigned()) return Status::Corrupt(where + "a dimension is not a count");
    out.shape.push_back(d.get<std::uint64_t>());
    values =
        out.shape.back() == 0
            ? 0
            : (values > (1ull << 48) / out.shape.back() ? 1ull << 48 : values * out.shape.back());
  }
  const auto& o = t["data_offsets"];
  if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned()) {
    return Status::Corrupt(where + "data_offsets are not byte counts");
  }
  const std::uint64_t b = o[0].get<std::uint64_t>(), e = o[1].get<std::uint64_t>();
  if (b > e || e > file_size - data_start) {
    return Status::Corrupt(where + "bytes " + std::to_string(b) + ".." + std::to_string(e) +
                           " lie outside the file's " + std::to_string(file_size - data_start) +
                           " data bytes");
  }
  const std::uint64_t size = KnownSize(out.dtype);
  if (size != 0 && values * size != e - b) {
    return Status::Corrupt(where + std::to_string(e - b) + " bytes for a " + out.dtype +
                           " tensor of " + std::to_string(values) + " values");
  }
  out.offset = data_start + b;
  out.bytes = e - b;
  return Status::Ok();
}

Status ListFile(const std::string& path, std::vector<SourceTensor>& out) {
  std::error_code ec;
  const std::uint64_t file_size = fs::file_size(path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  if (file_size < 8) return Status::Corrupt(path + ": shorter than a safetensors header");
  HOIST_ASSIGN_OR_RETURN(std::string head, ReadRange(path, 0, 8));
  std::uint64_t len = 0;
  std::memcpy(&len, head.data(), 8);
  if (len > file_size - 8 || len > (100u << 20)) {
    return Status::Corrupt(path + ": header length " + std::to_string(len) + " exceeds the file");
  }
  HOIST_ASSIGN_OR_RETURN(std::string text, ReadRange(path, 8, len));
  const json header = json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return Status::Corrupt(path + ": the header is not a JSON object");
  }
  const std::size_t first = out.size();
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    out.emplace_back();
    HOIST_RETURN_IF_ERROR(ParseTensor(path, name, t, 8 + len, file_size, out.back()));
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
            [](const SourceTensor& a, const SourceTensor& b) { return a.offset < b.offset; });
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
  if (o.tp_multiple < 1 || o.tp_multiple > 1024 || o.target_block_values < 256 ||
      o.target_block_values > kMaxRowBlockValues || o.shard_bytes < kStreamAlign) {
    return Status::InvalidArgument(
        "--tp-multiple 1..1024, a block target of 256..2^20 values "
        "and shards of at least 4096 bytes");
  }
  return Status::Ok();
}

// Codec options for one tensor: blocks of whole rows, sub-streams scaled to the block.
codec::EncodeOptions BlockOptions(const SourceTensor& t, const PackOptions& o, int threads,
                                  std::uint64_t* block_rows) {
  codec::EncodeOptions e;
  e.threads = threads;
  e.block_values = o.target_block_values;
  *block_rows = 0;
  if (t.shape.size() >= 2 && t.shape[0] > 0) {
    std::uint64_t row_values = 1;
    for (std::size_t i = 1; i < t.shape.size(); ++i) row_values *= t.shape[i];
    *block_rows = PackBlockRows(t.shape[0], row_values, o.target_block_values, o.tp_multiple);
    if (*block_rows > 0) e.block_values = static_cast<std::uint32_t>(*block_rows * row_values);
  }
  e.sub_streams = std::clamp<std::uint32_t>(e.block_values / 256 / 32 * 32, 32, 256);
  return e;
}

std::string Hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

class ShardWriter {
 public:
  ShardWriter(std::string dir, std::uint64_t limit) : dir_(std::move(dir)), limit_(limit) {}
  // Appends `stream`; sets the shard file name and offset it went to.
  Status Append(const std::vector<std::uint8_t>& stream, std::string* file, std::uint64_t* at) {
    if (!out_.is_open() || (offset_ > 0 && offset_ + stream.size() > limit_)) {
      HOIST_RETURN_IF_ERROR(Close());
      char name[32];
      std::snprintf(name, sizeof(name), "packed-%05d.bin", ++index_);
      name_ = name;
      out_.open(dir_ + "/" + name_, std::ios::binary | std::ios::trunc);
      offset_ = 0;
      if (!out_) return Status::IoError(dir_ + "/" + name_ + ": cannot create");
    }
    const std::uint64_t pad = (kStreamAlign - offset_ % kStreamAlign) % kStreamAlign;
    static const char zeros[kStreamAlign] = {};
    out_.write(zeros, static_cast<std::streamsize>(pad));
    out_.write(reinterpret_cast<const char*>(stream.data()),
               static_cast<std::streamsize>(stream.size()));
    if (!out_) return Status::IoError(dir_ + "/" + name_ + ": write failed");
    *file = name_;
    *at = offset_ + pad;
    offset_ += pad + stream.size();
    total_ += pad + stream.size();
    return Status::Ok();
  }
  Status Close() {
    if (!out_.is_open()) return Status::Ok();
    out_.close();
    return out_ ? Status::Ok() : Status::IoError(dir_ + "/" + name_ + ": close failed");
  }
  std::uint64_t total() const { return total_; }

 private:
  std::string dir_, name_;
  std::uint64_t limit_, offset_ = 0, total_ = 0;
  int index_ = 0;
  std::ofstream out_;
};

Status CopyOtherFiles(const std::string& from, const std::string& to) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name == kPackedIndexName) {
      continue;
    }
    fs::copy_file(e.path(), fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::IoError(e.path().string() + ": copy: " + ec.message());
  }
  return ec ? Status::IoError(from + ": " + ec.message()) : Status::Ok();
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
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o.model_dir, ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return Status::InvalidArgument(o.model_dir + ": no .safetensors files");
  std::vector<SourceTensor> tensors;
  for (const auto& f : files) HOIST_RETURN_IF_ERROR(ListFile(f, tensors));
  fs::create_directories(o.out_dir, ec);
  if (ec) return Status::IoError(o.out_dir + ": " + ec.message());
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ShardWriter writer(o.out_dir, o.shard_bytes);
  json index = {{"format", "hoist-packed"},
                {"version", 1},
                {"codec_version", codec::kFormatVersion},
                {"tp_multiple", o.tp_multiple},
                {"tensors", json::object()}};
  PackSummary summary;
  for (const auto& t : tensors) {
    HOIST_ASSIGN_OR_RETURN(std::string bytes, ReadRange(t.file, t.offset, t.bytes));
    std::uint64_t block_rows = 0;
    const codec::EncodeOptions eo = BlockOptions(t, o, threads, &block_rows);
    const auto dtype = codec::DTypeFromName(t.dtype).value_or(codec::DType::kBytes);
    const std::span<const std::uint8_t> data(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                             bytes.size());
    auto stream = codec::Encode(dtype, data, eo);
    if (!stream.ok()) return std::move(stream).status().Annotate(t.file + ": tensor " + t.name);
    std::string file;
    std::uint64_t at = 0;
    HOIST_RETURN_IF_ERROR(writer.Append(*stream, &file, &at));
    index["tensors"][t.name] = {{"dtype", t.dtype},
                                {"shape", t.shape},
                                {"file", file},
                                {"offset", at},
                                {"bytes", stream->size()},
                                {"original_bytes", t.bytes},
                                {"block_rows", block_rows},
                                {"xxh64", Hex(codec::Xxh64(data.data(), data.size()))}};
    ++summary.tensors;
    summary.original_bytes += t.bytes;
  }
  HOIST_RETURN_IF_ERROR(writer.Close());
  summary.packed_bytes = writer.total();
  const std::string index_path = o.out_dir + "/" + kPackedIndexName;
  std::ofstream out(index_path, std::ios::trunc);
  out << index.dump(1) << "\n";
  out.close();
  if (!out) return Status::IoError(index_path + ": write failed");
  HOIST_RETURN_IF_ERROR(CopyOtherFiles(o.model_dir, o.out_dir));
  return summary;
}

Result<PackedTensor> ReadPackedTensor(const std::string& dir, const std::string& name) {
  const std::string index_path = dir + "/" + kPackedIndexName;
  std::ifstream in(index_path);
  if (!in) return Status::NotFound(index_path + ": cannot open");
  const json index = json::parse(in, nullptr, false);
  if (index.is_discarded() || !index.is_object() || index.value("format", "") != "hoist-packed" ||
      !index.contains("tensors") || !index["tensors"].is_object()) {
    return Status::Corrupt(index_path + ": not a hoist-packed index");
  }
  if (!index["tensors"].contains(name)) return Status::NotFound(index_path + ": no tensor " + name);
  const json& t = index["tensors"][name];
  PackedTensor out;
  std::string file, sum;
  std::uint64_t offset = 0, bytes = 0, original = 0;
  try {
    out.dtype = t.at("dtype").get<std::string>();
    out.shape = t.at("shape").get<std::vector<std::uint64_t>>();
    file = t.at("file").get<std::string>();
    offset = t.at("offset").get<std::uint64_t>();
    bytes = t.at("bytes").get<std::uint64_t>();
    original = t.at("original_bytes").get<std::uint64_t>();
    sum = t.at("xxh64").get<std::string>();
  } catch (const json::exception& e) {
    return Status::Corrupt(index_path + ": tensor " + name + ": " + e.what());
  }
  if (file.find('/') != std::string::npos || file.empty() || file[0] == '.') {
    return Status::Corrupt(index_path + ": tensor " + name + ": bad shard name");
  }
  const std::string path = dir + "/" + file;
  const std::string where =
      path + ": tensor " + name + " (stream at offset " + std::to_string(offset) + ")";
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  if (offset > size || bytes > size - offset) {
    return Status::Corrupt(where + ": " + std::to_string(bytes) +
                           " bytes run past the file's end (" + std::to_string(size) + " bytes)");
  }
  HOIST_ASSIGN_OR_RETURN(std::string stream, ReadRange(path, offset, bytes));
  if (original > (1ull << 40)) return Status::Corrupt(where + ": absurd original size");
  out.data.resize(original);
  const std::span<const std::uint8_t> s(reinterpret_cast<const std::uint8_t*>(stream.data()),
                                        stream.size());
  HOIST_RETURN_IF_ERROR(codec::Decode(s, out.data, where));
  if (Hex(codec::Xxh64(out.data.data(), out.data.size())) != sum) {
    return Status::Corrupt(where + ": decoded bytes do not match the index's xxh64");
  }
  return out;
}

}  // namespace hoist::tools
