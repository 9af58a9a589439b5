// Reading and validating one safetensors file's header (untrusted input).
//
// Format: 8-byte little-endian header length N, N bytes of JSON, then the data section. The JSON
// maps tensor name -> {dtype, shape, data_offsets: [begin, end]} (offsets relative to the data
// section) plus an optional "__metadata__" map of string -> string.
//
// Validation (each failure is Status::Corrupt naming the file, the tensor and the offset):
// N larger than the file or than kMaxHeaderBytes; invalid or truncated JSON (the byte offset of
// the error is reported as a file offset); a header that is not an object, an entry that is not
// an object, missing or wrongly-typed dtype / shape / data_offsets; unknown dtype; shape product
// or byte count overflowing 64 bits; dtype size x elements != end - begin; begin > end; offsets
// outside the data section, overlapping, or (after sorting) leaving holes; bytes after the last
// tensor; duplicate names (or duplicate keys anywhere: nlohmann would silently keep the last);
// nesting deeper than the format needs; `__metadata__` that is not a string -> string map
// (null is accepted as empty). Zero-size tensors (begin == end) are legal. Unknown extra keys in
// an entry are ignored, as the reference implementation does.
//
// Other failures: ReadSafetensorsHeader returns NotFound (no such file), IoError (the OS failed
// stat/open/fstat/pread), Corrupt ("<path> is a FIFO, not a regular file": only regular files
// are opened, never blocking; planner/regular_file.h); ParseSafetensorsPrefix returns
// InvalidArgument when the caller's `bytes` is inconsistent with `file_size`.
//
// Threading: pure functions, no shared state. Only rank 0 ever calls these.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "planner/dtype.h"

namespace hoist::planner {

inline constexpr std::uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  // relative to the data section
  std::uint64_t end = 0;
  std::uint64_t bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::uint64_t header_len = 0;
  std::uint64_t data_start = 0;      // 8 + header_len
  std::vector<TensorEntry> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
};

// Parses and validates the JSON header of a file of `file_size` bytes whose header is
// `header_json` (the N bytes after the length prefix). `label` names the file in errors.
// This is the libFuzzer entry point.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view label,
                                                 std::string_view header_json,
                                                 std::uint64_t file_size);

// Parses the full prefix of a file: `bytes` holds at least the first 8 bytes (and, when the
// header fits, the header itself).
Result<SafetensorsHeader> ParseSafetensorsPrefix(std::string_view label, std::string_view bytes,
                                                 std::uint64_t file_size);

struct FileStat {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

// Opens `path`, stats it and reads + validates its header (never the tensor data).
Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path, FileStat* stat);

}  // namespace hoist::planner
