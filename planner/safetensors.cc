// Safetensors header reading and validation. See safetensors.h for the contract.
#include "planner/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "planner/regular_file.h"
#include "planner/strict_json.h"

namespace hoist::planner {
namespace {

using json = nlohmann::json;
using internal::JsonTypeName;
using internal::QuoteForMessage;

constexpr std::uint64_t kLengthPrefixBytes = 8;
// Top-level object > tensor entry object > shape array. Anything deeper is not safetensors.
constexpr int kMaxHeaderDepth = 3;
constexpr std::string_view kMetadataKey = "__metadata__";

std::string U(std::uint64_t v) { return std::to_string(v); }

Status Corrupt(std::string_view label, const std::string& message) {
  return Status::Corrupt(std::string(label) + ": " + message);
}

Status CorruptTensor(std::string_view label, std::string_view tensor, const std::string& message) {
  return Status::Corrupt(std::string(label) + ": tensor " + QuoteForMessage(tensor) + ": " +
                         message);
}

std::string ShapeString(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += U(shape[i]);
  }
  return s + "]";
}

// "data_offsets [b, e] (file bytes [data_start+b, data_start+e))", without overflowing.
std::string OffsetsString(std::uint64_t begin, std::uint64_t end, std::uint64_t data_start) {
  std::string s = "data_offsets [" + U(begin) + ", " + U(end) + "]";
  if (begin <= UINT64_MAX - data_start && end <= UINT64_MAX - data_start) {
    s += " (file bytes [" + U(data_start + begin) + ", " + U(data_start + end) + "))";
  }
  return s;
}

Status CheckHeaderLength(std::string_view label, std::uint64_t header_len,
                         std::uint64_t file_size) {
  if (file_size < kLengthPrefixBytes) {
    return Corrupt(label, "file of " + U(file_size) +
                              " bytes is too small to hold the 8-byte header length at offset 0");
  }
  if (header_len > kMaxHeaderBytes) {
    return Corrupt(label, "header length " + U(header_len) + " (file offset 0) exceeds the " +
                              U(kMaxHeaderBytes) + "-byte limit");
  }
  if (header_len > file_size - kLengthPrefixBytes) {
    return Corrupt(label, "header length " + U(header_len) +
                              " (file offset 0) runs past the end of the file: bytes [8, " +
                              U(kLengthPrefixBytes + header_len) + ") of a " + U(file_size) +
                              "-byte file");
  }
  return Status::Ok();
}

std::uint64_t DecodeLength(std::string_view bytes) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

// A non-negative JSON integer (nlohmann stores those as number_unsigned).
bool AsU64(const json& v, std::uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<std::uint64_t>();
  return true;
}

Status ParseMetadata(std::string_view label, const json& value,
                     std::map<std::string, std::string>* metadata) {
  if (value.is_null()) return Status::Ok();
  if (!value.is_object()) {
    return Corrupt(label, "\"__metadata__\" must be an object of strings, got " +
                              std::string(JsonTypeName(value)));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return Corrupt(label, "\"__metadata__\" entry " + QuoteForMessage(key) +
                                " must be a string, got " + std::string(JsonTypeName(v)));
    }
    metadata->emplace(key, v.get<std::string>());
  }
  return Status::Ok();
}

// An entry's dtype size x elements must be exactly its byte range (overflows named).
Status CheckEntryBytes(std::string_view label, const std::string& name,
                       const std::string& dtype_name, std::uint64_t data_start,
                       const TensorEntry& e) {
  std::uint64_t elements = 1;
  for (std::uint64_t dim : e.shape) {
    if (__builtin_mul_overflow(elements, dim, &elements)) {
      return CorruptTensor(label, name,
                           "shape " + ShapeString(e.shape) +
                               " has more elements than fit in 64 bits (" +
                               OffsetsString(e.begin, e.end, data_start) + ")");
    }
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(DTypeSize(e.dtype)), &bytes)) {
    return CorruptTensor(label, name,
                         "shape " + ShapeString(e.shape) + " of " + dtype_name + " is " +
                             U(elements) + " elements, whose byte count overflows 64 bits (" +
                             OffsetsString(e.begin, e.end, data_start) + ")");
  }
  if (bytes != e.end - e.begin) {
    return CorruptTensor(label, name,
                         dtype_name + " x shape " + ShapeString(e.shape) + " = " + U(bytes) +
                             " bytes, but " + OffsetsString(e.begin, e.end, data_start) + " span " +
                             U(e.end - e.begin) + " bytes");
  }
  return Status::Ok();
}

// Parses one tensor entry and checks everything that does not involve other tensors.
Status ParseEntry(std::string_view label, const std::string& name, const json& value,
                  std::uint64_t data_start, std::uint64_t data_size, TensorEntry* out) {
  out->name = name;
  if (!value.is_object()) {
    return CorruptTensor(label, name,
                         "entry must be an object, got " + std::string(JsonTypeName(value)));
  }
  // dtype
  auto it = value.find("dtype");
  if (it == value.end()) return CorruptTensor(label, name, "missing \"dtype\"");
  if (!it->is_string()) {
    return CorruptTensor(label, name,
                         "\"dtype\" must be a string, got " + std::string(JsonTypeName(*it)));
  }
  const std::string& dtype_name = it->get_ref<const std::string&>();
  const std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype) return CorruptTensor(label, name, "unknown dtype " + QuoteForMessage(dtype_name));
  out->dtype = *dtype;
  // shape
  it = value.find("shape");
  if (it == value.end()) return CorruptTensor(label, name, "missing \"shape\"");
  if (!it->is_array()) {
    return CorruptTensor(label, name,
                         "\"shape\" must be an array, got " + std::string(JsonTypeName(*it)));
  }
  out->shape.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    std::uint64_t dim = 0;
    if (!AsU64((*it)[i], &dim)) {
      return CorruptTensor(label, name,
                           "shape[" + U(i) + "] must be a non-negative integer, got " +
                               std::string(JsonTypeName((*it)[i])));
    }
    out->shape.push_back(dim);
  }
  // data_offsets
  it = value.find("data_offsets");
  if (it == value.end()) return CorruptTensor(label, name, "missing \"data_offsets\"");
  if (!it->is_array() || it->size() != 2) {
    return CorruptTensor(
        label, name,
        "\"data_offsets\" must be an array of two integers, got " +
            (it->is_array() ? "an array of " + U(it->size()) : std::string(JsonTypeName(*it))));
  }
  if (!AsU64((*it)[0], &out->begin) || !AsU64((*it)[1], &out->end)) {
    return CorruptTensor(label, name, "\"data_offsets\" must hold two non-negative integers");
  }
  if (out->begin > out->end) {
    return CorruptTensor(label, name,
                         OffsetsString(out->begin, out->end, data_start) + ": begin > end");
  }
  if (out->end > data_size) {
    return CorruptTensor(label, name,
                         OffsetsString(out->begin, out->end, data_start) +
                             " run past the data section of " + U(data_size) +
                             " bytes (file bytes [" + U(data_start) + ", " +
                             U(data_start + data_size) + "))");
  }
  return CheckEntryBytes(label, name, dtype_name, data_start, *out);
}

// Tensors sorted by begin must tile the data section exactly: no overlap, no hole, no tail.
Status CheckCoverage(std::string_view label, const std::vector<TensorEntry>& tensors,
                     std::uint64_t data_start, std::uint64_t data_size) {
  std::uint64_t covered = 0;  // data offset up to which the tensors so far tile the section
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : tensors) {
    if (t.begin < covered) {
      return Corrupt(label, "tensors " + QuoteForMessage(previous->name) + " (" +
                                OffsetsString(previous->begin, previous->end, data_start) +
                                ") and " + QuoteForMessage(t.name) + " (" +
                                OffsetsString(t.begin, t.end, data_start) +
                                ") overlap at file offset " + U(data_start + t.begin));
    }
    if (t.begin > covered) {
      return Corrupt(label, "hole in the data section: file bytes [" + U(data_start + covered) +
                                ", " + U(data_start + t.begin) + ") belong to no tensor (before " +
                                QuoteForMessage(t.name) + ", " +
                                OffsetsString(t.begin, t.end, data_start) + ")");
    }
    if (previous == nullptr || t.end >= covered) previous = &t;
    covered = std::max(covered, t.end);
  }
  if (covered != data_size) {
    return Corrupt(label, U(data_size - covered) + " trailing bytes after the last tensor" +
                              (previous ? " " + QuoteForMessage(previous->name) : std::string()) +
                              ": file bytes [" + U(data_start + covered) + ", " +
                              U(data_start + data_size) + ") belong to no tensor");
  }
  return Status::Ok();
}

// Closes a file descriptor on scope exit.
std::string ErrnoText(int err) { return std::strerror(err); }

// Reads exactly `len` bytes at `offset`; a short file is Corrupt, an OS failure IoError.
Status PreadFull(const std::string& path, int fd, char* buf, std::uint64_t len,
                 std::uint64_t offset) {
  std::uint64_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": read of " + U(len - done) + " bytes at offset " +
                             U(offset + done) + ": " + ErrnoText(errno));
    }
    if (n == 0) {
      return Status::Corrupt(path + ": unexpected end of file at offset " + U(offset + done) +
                             " (the file shrank while being read?)");
    }
    done += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view label,
                                                 std::string_view header_json,
                                                 std::uint64_t file_size) {
  SafetensorsHeader header;
  header.header_len = header_json.size();
  HOIST_RETURN_IF_ERROR(CheckHeaderLength(label, header.header_len, file_size));
  header.data_start = kLengthPrefixBytes + header.header_len;
  const std::uint64_t data_size = file_size - header.data_start;

  HOIST_ASSIGN_OR_RETURN(json root,
                         internal::ParseStrictJson(std::string(label) + ": header", header_json,
                                                   kMaxHeaderDepth, kLengthPrefixBytes));
  if (!root.is_object()) {
    return Corrupt(label, "header JSON (file bytes [8, " + U(header.data_start) +
                              ")) must be an object, got " + std::string(JsonTypeName(root)));
  }
  header.tensors.reserve(root.size());
  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      HOIST_RETURN_IF_ERROR(ParseMetadata(label, value, &header.metadata));
      continue;
    }
    TensorEntry entry;
    HOIST_RETURN_IF_ERROR(ParseEntry(label, name, value, header.data_start, data_size, &entry));
    header.tensors.push_back(std::move(entry));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) {
              if (a.begin != b.begin) return a.begin < b.begin;
              if (a.end != b.end) return a.end < b.end;
              return a.name < b.name;
            });
  HOIST_RETURN_IF_ERROR(CheckCoverage(label, header.tensors, header.data_start, data_size));
  return header;
}

Result<SafetensorsHeader> ParseSafetensorsPrefix(std::string_view label, std::string_view bytes,
                                                 std::uint64_t file_size) {
  if (bytes.size() > file_size) {
    return Status::InvalidArgument(std::string(label) + ": prefix of " + U(bytes.size()) +
                                   " bytes is longer than the " + U(file_size) + "-byte file");
  }
  if (file_size < kLengthPrefixBytes) return CheckHeaderLength(label, 0, file_size);
  if (bytes.size() < kLengthPrefixBytes) {
    return Status::InvalidArgument(std::string(label) + ": prefix of " + U(bytes.size()) +
                                   " bytes does not hold the 8-byte header length");
  }
  const std::uint64_t header_len = DecodeLength(bytes);
  HOIST_RETURN_IF_ERROR(CheckHeaderLength(label, header_len, file_size));
  if (bytes.size() - kLengthPrefixBytes < header_len) {
    return Status::InvalidArgument(std::string(label) + ": prefix of " + U(bytes.size()) +
                                   " bytes does not hold the header (bytes [8, " +
                                   U(kLengthPrefixBytes + header_len) + "))");
  }
  return ParseSafetensorsHeader(label, bytes.substr(kLengthPrefixBytes, header_len), file_size);
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path, FileStat* stat) {
  HOIST_ASSIGN_OR_RETURN(RegularFile fd, RegularFile::Open(path));
  const std::uint64_t file_size = fd.size();
  if (stat != nullptr) {
    stat->size = file_size;
    stat->mtime_ns = fd.mtime_ns();
  }
  if (file_size < kLengthPrefixBytes) return CheckHeaderLength(path, 0, file_size);
  char prefix[kLengthPrefixBytes];
  HOIST_RETURN_IF_ERROR(PreadFull(path, fd.fd(), prefix, kLengthPrefixBytes, 0));
  const std::uint64_t header_len = DecodeLength(std::string_view(prefix, kLengthPrefixBytes));
  HOIST_RETURN_IF_ERROR(CheckHeaderLength(path, header_len, file_size));
  std::string header_json(header_len, '\0');
  HOIST_RETURN_IF_ERROR(
      PreadFull(path, fd.fd(), header_json.data(), header_len, kLengthPrefixBytes));
  return ParseSafetensorsHeader(path, header_json, file_size);
}

}  // namespace hoist::planner
