// `hoist pack`: a packed (losslessly compressed) copy of a safetensors checkpoint, and the reader
// of one packed tensor. Format and rationale: docs/PACKED.md; the codec: docs/CODEC.md; the
// index (format version 3): planner/packed_index.h.
//
// PackCheckpoint reads every *.safetensors file of model_dir and encodes each tensor into codec
// streams (BF16, F16 and FP8 coded, everything else stored) whose blocks hold whole rows, written
// into packed-NNNNN.bin shards (each stream 4 KiB-aligned, every stream of a tensor in one shard),
// plus the index hoist-packed.json. A 2-D BF16/F16/FP8 tensor that tensor parallelism cuts by
// columns (planner/rules.h on config.json: Role::kRow, and Role::kExpertDown) whose row length
// tp_multiple divides is written as tp_multiple column stripes, stream s holding columns
// [s*W/N, (s+1)*W/N) of every row as a row-major sub-tensor; every other tensor is one stream.
// Each stream's header carries its identity (codec::StreamId: XXH64 of the tensor's name, its
// position, the stream count, its first column) and the index records each header's checksum.
// The summary gives sizes per dtype against the entropy bound of the codec's split, and the
// tensors furthest above it. A model whose config.json is missing, unreadable or of a family hoist
// has no rules for is packed without stripes (PackSummary::note says why). The other files of
// model_dir (config.json, tokenizer, ...) are copied; the safetensors index is not (the packed
// index replaces it). The written index is read back with planner::ReadPackedIndex before
// returning.
//
// Failure: InvalidArgument for a model folder that does not exist or holds no safetensors,
// an output folder equal to the input, or options out of range (exit 2 in `hoist pack`);
// Corrupt naming the file and tensor for a bad safetensors header or a tensor outside its file;
// IoError naming the file for a failed read or write. ReadPackedTensor reads the index with
// planner::ReadPackedIndex (its errors: the index or shard file and the tensor), decodes every
// stream with codec::Decode (Corrupt naming the shard, the tensor, the stream's offset in the
// shard and the codec's byte offset), and checks the tensor's xxh64 from the index. Nothing
// throws across this interface.
// Ownership: returns owned values. Threading: PackCheckpoint encodes with `threads` threads and
// joins them before returning; calls on distinct output folders may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "planner/packed_index.h"

namespace hoist::tools {

struct PackOptions {
  std::string model_dir;
  std::string out_dir;            // created if missing
  std::uint32_t tp_multiple = 8;  // row blocks and column stripes tile every tp dividing this
  std::uint64_t shard_bytes = 4ull << 30;        // a new shard past this many bytes
  std::uint32_t target_block_values = 1u << 16;  // rows per block: about this many values
  int threads = 0;                               // 0 = hardware concurrency
};

// Sizes against the entropy bound of each tensor's split (codec::SplitEntropyBytes: for BF16,
// raw bytes + n * H(exponent) / 8), per dtype and for the tensors furthest above it.
struct PackSizes {
  std::string name;  // a dtype (safetensors spelling) or a tensor
  std::string dtype;
  std::uint64_t tensors = 0, coded = 0;  // coded: tensors with a Huffman-coded stream
  std::uint64_t original_bytes = 0;
  std::uint64_t packed_bytes = 0;  // the streams' bytes (without the shards' 4 KiB alignment)
  double bound_bytes = 0;
};

struct PackSummary {
  std::uint64_t tensors = 0;
  std::uint64_t original_bytes = 0;  // the tensors' bytes
  std::uint64_t packed_bytes = 0;    // the shard files' (streams aligned to 4 KiB)
  std::uint64_t striped = 0;         // tensors written as column stripes
  std::string note;                  // why nothing is striped (no family rules), else empty
  std::vector<PackSizes> by_dtype;   // in name order
  std::vector<PackSizes> furthest;   // the (at most 3) tensors most bytes above their bound

  // The codec streams' bytes over every dtype (hoist plan's "packed:" ratio).
  std::uint64_t coded_bytes() const {
    std::uint64_t n = 0;
    for (const PackSizes& d : by_dtype) n += d.packed_bytes;
    return n;
  }
};

Result<PackSummary> PackCheckpoint(const PackOptions& options);

struct PackedTensor {
  std::string dtype;  // safetensors spelling
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> data;  // the original bytes
};

// Reads tensor `name` of the packed folder `packed_dir` and decodes it on the CPU (NotFound for
// a name the index does not hold).
Result<PackedTensor> ReadPackedTensor(const std::string& packed_dir, const std::string& name);
// The same with an index already read (planner::ReadPackedIndex).
Result<PackedTensor> ReadPackedTensor(const planner::PackedIndex& index, const std::string& name);

// Rows per codec block for a tensor of `rows` rows of `row_values` values: whole rows, about
// `target` values, and (when tp_multiple divides rows) a divisor of rows / tp_multiple, so a
// tensor-parallel slice of rows at any tp dividing tp_multiple is whole blocks. 0 when a row is
// too long for one block (the tensor is then cut in plain blocks of `target` values).
std::uint64_t PackBlockRows(std::uint64_t rows, std::uint64_t row_values, std::uint32_t target,
                            std::uint32_t tp_multiple);

}  // namespace hoist::tools
