// Packed checkpoints on a rank (docs/PACKED.md): the plan's copies address each packed shard's
// logical bytes (the original tensors back to back); PackedStreams knows where each tensor's
// codec streams are and turns a plan's logical copies into what the pipeline runs (PackedWork:
// plain copies of stored bytes on the real shards, and units of compressed blocks with their
// decode jobs, transport/devices/decode_job.h). It also decodes logical ranges on the host, for
// --verify.
//
// Translation rules: a logical copy is cut at tensor boundaries; within a tensor it becomes a
// rectangle of values (rows of `width` values `pitch` apart). For each of the tensor's streams
// (all columns, or one column stripe) the part of the rectangle it holds becomes one unit
// holding every block that the part touches, with one job per block (a stored stream too: every
// decoder checks each block it places). Blocks shared by two copies are moved once per copy.
//
// Failure: FromPlan returns Corrupt naming the file, tensor and byte offset of a stream header
// that does not parse (codec::ParseHeader), disagrees with its tensor, or whose identity
// (codec::StreamId) is not this tensor's stream at this place. Translate returns
// Corrupt naming the copy and file for a copy outside the logical bytes, one cutting a value,
// a 2-D copy crossing tensors, or one a column-striped tensor cannot serve (a region that is
// not whole-row aligned to its stripes). ReadLogical returns IoError naming the shard for a
// failed read and Corrupt (codec::Decode) for damaged data, and checks every tensor it decodes
// against its stream checksums and, reassembled, against the index's XXH64 of the original
// bytes (PackedTensor.xxh64): --verify's reference is the original bytes, not the shard.
// Threading: FromPlan parses the headers on up to 16 threads of its own (joined before it
// returns). A PackedStreams is immutable after FromPlan; Translate and ReadLogical may run on
// several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/devices/decode_job.h"

namespace hoist::transport {

class PackedStreams {
 public:
  // The plan's packed tensors (none: an empty PackedStreams that translates nothing).
  static Result<PackedStreams> FromPlan(const proto::LoadPlan& plan);

  bool empty() const { return tensors_.empty(); }
  bool IsPacked(std::uint32_t file) const { return file < packed_.size() && packed_[file]; }

  // The pipeline's work for `logical` (a RankPlan, or a dedup read plan, of this plan).
  Result<PackedWork> Translate(const proto::RankPlan& logical) const;

  // Logical bytes [offset, offset + bytes) of packed file `file` into dst, decoded on the host
  // (each tensor touched is read and decoded whole).
  Status ReadLogical(std::uint32_t file, std::uint64_t offset, std::uint64_t bytes,
                     std::byte* dst) const;

  struct Stream {
    std::uint64_t offset = 0, bytes = 0;  // in the tensor's file
    std::uint64_t col_begin = 0, col_end = 0;
    codec::StreamInfo info;
  };
  struct Tensor {
    std::string name;
    std::uint32_t file = 0;
    std::uint64_t offset = 0, bytes = 0;  // logical
    std::uint64_t row_values = 0;
    std::uint32_t value_bytes = 0;
    std::uint64_t xxh64 = 0;  // of the original bytes, from the index (ReadLogical checks it)
    std::vector<Stream> streams;
  };
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<std::string> paths_;         // per plan file
  std::vector<bool> packed_;               // per plan file
  std::vector<Tensor> tensors_;            // sorted by (file, offset)
  std::vector<std::size_t> file_first_;    // per file: first tensor index (size files + 1)
  std::vector<std::size_t> stream_first_;  // per tensor: its first stream's index over all tensors
  std::size_t streams_ = 0, blocks_ = 0;   // over every tensor (Translate reserves these)
  struct Cache {                           // ReadLogical's last decoded tensor
    std::mutex mu;
    std::size_t tensor = ~std::size_t{0};
    std::vector<std::byte> bytes;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace hoist::transport
