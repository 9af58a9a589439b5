// The index of a packed checkpoint (hoist-packed.json, docs/PACKED.md): per original tensor, its
// dtype, shape, checksum and the codec streams that hold it in one packed shard. A tensor is one
// stream, or (column stripes, for tensors that tensor parallelism cuts by columns) several
// streams, stream s holding columns [col_begin, col_end) of every row as a row-major sub-tensor
// of rows x (col_end - col_begin) values. A row is all dimensions but the first (a 1-D tensor or
// a scalar is one row).
//
// ReadPackedIndex reads and validates dir/hoist-packed.json (format "hoist-packed", version 3)
// and every stream's header (codec::ParseHeader against the stream's size), so that a loader
// can trust offsets and tables without reading headers again. Each header is tied to its index
// entry (docs/PACKED.md, "Integrity"): its checksum must equal the entry's header_xxh64, its
// identity must name this tensor (XXH64 of the name), this stream's position, the tensor's
// stream count and first column, and a one-stream tensor's content checksum must equal the
// tensor's xxh64. Two shard names reaching one file (a hard link, a symlink) are refused.
//
// Failure: NotFound when the index is missing; Corrupt naming the index file and the tensor (or
// the shard file, stream offset and the codec's byte offset) for: invalid JSON or structure, an
// unknown key, an unknown dtype, a shape whose value count does not match original_bytes, a
// shard path leaving the folder or not a regular file, streams that do not tile the columns in
// order, a stream outside its shard, overlapping streams, a header that does not parse, a
// stream whose dtype or size disagrees with the tensor, a header not tied to its entry (above),
// two shard names of one file (same device and inode); Unsupported for another version.
// Threading: pure (it reads the headers on up to 16 threads of its own); the result is immutable
// once returned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hoist/status.h"

namespace hoist::planner {

inline constexpr const char* kPackedIndexFile = "hoist-packed.json";
inline constexpr int kPackedIndexVersion = 3;

struct PackedStreamEntry {
  std::uint64_t offset = 0;  // first byte in the tensor's shard
  std::uint64_t bytes = 0;   // the whole stream (header + payload)
  std::uint64_t col_begin = 0, col_end = 0;
  std::uint64_t block_rows = 0;    // rows per codec block (0: blocks of plain value counts)
  std::string header;              // the stream's header bytes (codec header_bytes of them)
  std::uint64_t header_xxh64 = 0;  // the header's own checksum, as the index records it
};

struct PackedTensorEntry {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<std::uint64_t> shape;
  std::uint64_t original_bytes = 0;
  std::uint64_t xxh64 = 0;                 // of the original bytes (seed 0)
  std::uint32_t shard = 0;                 // index into PackedIndex::shards
  std::uint64_t row_values = 0;            // values per row
  std::vector<PackedStreamEntry> streams;  // by column, tiling [0, row_values)
  std::uint64_t name_xxh64 = 0;            // of `name` as the index spells it (stream identity)
};

struct PackedIndex {
  std::string dir;                         // canonical absolute folder
  std::uint32_t tp_multiple = 0;           // row blocks and stripes tile every tp dividing it
  std::vector<std::string> shards;         // relative paths ("packed-00001.bin"), sorted
  std::vector<PackedTensorEntry> tensors;  // sorted by (shard, first stream offset)
};

Result<PackedIndex> ReadPackedIndex(const std::string& dir);

}  // namespace hoist::planner
