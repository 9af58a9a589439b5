// hoist-pack: a packed (losslessly compressed) copy of a safetensors checkpoint, and the reader
// of one packed tensor. Format and rationale: docs/PACKED.md; the codec: docs/CODEC.md.
//
// PackCheckpoint reads every *.safetensors file of model_dir, encodes each tensor into one codec
// stream (BF16/F16 coded, everything else stored) whose blocks hold whole rows, and writes the
// streams into packed-NNNNN.bin shards (each stream 4 KiB-aligned) plus the index
// hoist-packed.json (original name, dtype, shape, shard, offset, sizes, XXH64, rows per block).
// The other files of model_dir (config.json, tokenizer, ...) are copied; the safetensors index
// is not (the packed index replaces it).
//
// Failure: InvalidArgument for a model folder that does not exist or holds no safetensors,
// an output folder equal to the input, or options out of range (exit 2 in hoist-pack); Corrupt
// naming the file and tensor for a bad safetensors header or a tensor outside its file; IoError
// naming the file for a failed read or write. ReadPackedTensor names the index or shard file,
// the tensor and the byte offset of what is wrong (via the codec's checks), and checks the
// tensor's checksum from the index. Nothing throws across this interface.
// Ownership: returns owned values. Threading: PackCheckpoint encodes with `threads` threads and
// joins them before returning; calls on distinct output folders may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hoist/status.h"

namespace hoist::tools {

inline constexpr const char* kPackedIndexName = "hoist-packed.json";

struct PackOptions {
  std::string model_dir;
  std::string out_dir;                           // created if missing
  std::uint32_t tp_multiple = 8;                 // row blocks tile every tp dividing this
  std::uint64_t shard_bytes = 4ull << 30;        // a new shard past this many bytes
  std::uint32_t target_block_values = 1u << 16;  // rows per block: about this many values
  int threads = 0;                               // 0 = hardware concurrency
};

struct PackSummary {
  std::uint64_t tensors = 0, original_bytes = 0, packed_bytes = 0;
};

Result<PackSummary> PackCheckpoint(const PackOptions& options);

struct PackedTensor {
  std::string dtype;  // safetensors spelling
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> data;  // the original bytes
};

// Reads tensor `name` of the packed folder `packed_dir` and decodes it on the CPU.
Result<PackedTensor> ReadPackedTensor(const std::string& packed_dir, const std::string& name);

// Rows per codec block for a tensor of `rows` rows of `row_values` values: whole rows, about
// `target` values, and (when tp_multiple divides rows) a divisor of rows / tp_multiple, so a
// tensor-parallel slice of rows at any tp dividing tp_multiple is whole blocks. 0 when a row is
// too long for one block (the tensor is then cut in plain blocks of `target` values).
std::uint64_t PackBlockRows(std::uint64_t rows, std::uint64_t row_values, std::uint32_t target,
                            std::uint32_t tp_multiple);

}  // namespace hoist::tools
