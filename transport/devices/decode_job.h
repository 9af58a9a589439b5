// Decoding codec blocks into the arena (packed checkpoints: docs/PACKED.md, codec: docs/CODEC.md).
//
// A load of a packed checkpoint moves compressed blocks through the staging ring into device
// memory and decodes them there. What it decodes is a DecodeSet, built on the host
// (transport/packed/packed.h): the streams involved (their parsed headers: code table, sub-stream
// count, dtype) and the jobs. A job is one codec block and one copy of the plan: the block's
// values that fall inside the copy's source rectangle land in the arena. Stored streams (F32,
// incompressible data) become jobs too, so every decoder (the host's and the GPU's) checks each
// block it places against the block's checksum (the GPU's from codec format 4 on).
//
// The rule (ForEachKeptRun is its reference, used by the host backend; the CUDA kernel repeats it
// per value): value k of the block (0 <= k < values) is element d = first + k of the copy's
// source, read as rows of `pitch` values; it is kept when d >= 0, r = d / pitch < rows and
// c = d % pitch < width, and lands at arena byte dst + r * dst_pitch + c * value_bytes.
//
// Failure: none here (the builder validates). Ownership: plain values. Threading: immutable once
// built; any number of threads may read a DecodeSet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "proto/plan.pb.h"

namespace hoist::transport {

struct DecodeJob {
  std::uint64_t src = 0;        // the block's first byte, relative to the source DecodeAsync gets
  std::uint64_t dst = 0;        // arena byte offset of the copy's element (row 0, column 0)
  std::uint64_t dst_pitch = 0;  // arena bytes between the copy's rows
  std::int64_t first = 0;       // the copy's element index of the block's value 0 (may be < 0)
  std::uint64_t pitch = 0;      // the copy's source row length in values (>= width, >= 1)
  std::uint64_t width = 0;      // values kept per row
  std::uint64_t rows = 0;       // rows of the copy
  std::uint32_t bytes = 0;      // the block's encoded bytes
  std::uint32_t values = 0;     // values in the block
  std::uint32_t stream = 0;     // index into DecodeSet::streams
  std::uint32_t block = 0;      // block index within its stream (checksums, errors)
  std::uint32_t checksum = 0;   // the stream's block_checksums[block], for the GPU decoder
};

// Built before the load's clock (transport/packed/packed.h: with the plan, while the device opens),
// so that a decoder's making allocates and converts nothing: the GPU backend uploads `jobs` and
// `code_lengths` as they are and builds the streams' tables on the device.
struct DecodeSet {
  std::vector<codec::StreamInfo> streams;        // coded streams (and stored ones: kCheckedBlocks)
  std::vector<std::string> names;                // per stream, for errors: "<shard path>: <tensor>"
  std::vector<codec::CodeLengths> code_lengths;  // per stream (kept by AddStream; a stored
                                                 // stream's are zeros): the GPU builds its
                                                 // tables from these
  std::vector<DecodeJob> jobs;
  std::uint64_t max_block_bytes = 0;      // the largest job's `bytes`
  std::uint64_t max_block_bit_words = 0;  // over streams: the largest block's coded words

  // Appends a stream, its name and its code lengths; returns its index.
  std::uint32_t AddStream(const codec::StreamInfo& info, std::string name) {
    streams.push_back(info);
    names.push_back(std::move(name));
    code_lengths.push_back(info.code_lengths);
    max_block_bit_words = std::max(max_block_bit_words, info.max_block_bit_words);
    return static_cast<std::uint32_t>(streams.size() - 1);
  }

  // The set a decoder runs for a slot cut: this set's streams, names, tables and maxima with the
  // cut's jobs. MoveTablesWith moves them out of this set (its own jobs stay); CopyTablesWith
  // copies them. (One list of fields, here, for both.)
  DecodeSet MoveTablesWith(std::vector<DecodeJob> cut_jobs) {
    return TablesWith(std::move(*this), std::move(cut_jobs));
  }
  DecodeSet CopyTablesWith(std::vector<DecodeJob> cut_jobs) const {
    return TablesWith(*this, std::move(cut_jobs));
  }

 private:
  template <typename Set>
  static DecodeSet TablesWith(Set&& from, std::vector<DecodeJob> cut_jobs) {
    DecodeSet s;
    s.streams = std::forward<Set>(from).streams;
    s.names = std::forward<Set>(from).names;
    s.code_lengths = std::forward<Set>(from).code_lengths;
    s.jobs = std::move(cut_jobs);
    s.max_block_bytes = from.max_block_bytes;
    s.max_block_bit_words = from.max_block_bit_words;
    return s;
  }
};

// A run of consecutive blocks of one stream, contiguous in a file: what the staging ring moves.
// Its jobs are DecodeSet::jobs [job_begin, job_end), their src relative to the unit's src.
struct DecodeUnit {
  std::uint32_t file = 0;
  std::uint64_t src = 0;  // file offset of the first block's first byte
  std::uint64_t bytes = 0;
  std::size_t job_begin = 0, job_end = 0;
};

// A rank's plan of a packed checkpoint, as the pipeline runs it (transport/packed/packed.h builds
// it): plain copies of stored bytes from the real shard files, and decode units. Logical copy i of
// the plan it came from became copies [copies_end[i-1], copies_end[i]) of `plan` and units
// [units_end[i-1], units_end[i]) (0 for i = 0), so milestones keep their meaning.
struct PackedWork {
  proto::RankPlan plan;  // copies on the real files, the fills, tensors and arena size as given
  DecodeSet decode;
  std::vector<DecodeUnit> units;
  std::vector<std::size_t> copies_end, units_end;  // one per logical copy
};

inline std::uint32_t ValueBytes(const codec::StreamInfo& info) {
  return codec::DTypeSize(info.dtype);
}

// Calls fn(k_begin, k_end, arena_offset) for every maximal run of consecutive kept values of
// the block [k_begin, k_end) that land contiguously at arena_offset, in increasing k.
template <class Fn>
void ForEachKeptRun(const DecodeJob& j, std::uint32_t value_bytes, Fn&& fn) {
  if (j.pitch == 0 || j.width == 0 || j.rows == 0) return;
  std::int64_t k = j.first < 0 ? -j.first : 0;
  const std::int64_t n = j.values;
  while (k < n) {
    const std::uint64_t d = static_cast<std::uint64_t>(j.first + k);
    const std::uint64_t r = d / j.pitch, c = d % j.pitch;
    if (r >= j.rows) return;
    if (c >= j.width) {  // skip to the next row's start
      k += static_cast<std::int64_t>(j.pitch - c);
      continue;
    }
    const std::int64_t end = std::min<std::int64_t>(n, k + static_cast<std::int64_t>(j.width - c));
    fn(static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(end),
       j.dst + r * j.dst_pitch + c * value_bytes);
    k = end;
  }
}

}  // namespace hoist::transport
