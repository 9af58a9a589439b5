// Cutting a rank plan's copies into staging slots and fill tasks: the pipeline's pure logic
// (transport/staging/pipeline.h runs what this returns). No I/O, no device, no threads.
//
// Staged modes (CutStaged). The copies with bytes, in plan order, are laid end to end as one byte
// stream: copy by copy, row by row, column by column. A copy whose rows are packed on both sides
// (src_pitch == dst_pitch == width) counts as one row of width * rows. The stream is cut into
// consecutive slots ("seqs") of slot_bytes; slot q holds stream bytes [q * slot_bytes,
// +slot_bytes). Invariants the pipeline relies on:
//   - every slot but the last is full (seq_bytes[q] == slot_bytes); the last holds >= 1 byte;
//     an empty stream (no copy with bytes) gives no slot, no op, no piece, no task;
//   - ops[seq_ops[q], seq_ops[q+1]) are slot q's host->device copies, in stream order; each
//     reads rows * width bytes packed at slot_off (pitch = width) and writes rows of width at
//     dst + r * dst_pitch; they never cross the slot's end and tile the slot exactly once;
//   - pieces are the fill reads, in stream order: rows of width from the file at
//     src + r * src_pitch, packed into their slot at slot_off; each lies inside one slot, holds
//     at most chunk_bytes, and together they cover every stream byte exactly once;
//   - tasks are consecutive runs of pieces [begin, end) of one slot, in order, covering all
//     pieces; a task's bytes are its pieces' sum, at most chunk_bytes; every slot has >= 1 task;
//   - copy_last_seq[i] is the last slot holding a byte of copies [0, i] (-1: none has bytes);
//     a copy ending exactly at a slot's end does not reach the next slot.
// Direct modes (CutDirect: pageable, registered). No slots: each piece reads rows of width from
// the file and writes them at the arena offset dst_offset (pitch dst_pitch); pieces cover each
// copy's bytes once, in plan order, at most chunk_bytes each; one task per piece, all seq 0.
//
// Failure: none; callers validate the plan first (ValidateRankPlan). Threading: pure functions;
// the result is immutable once returned and may be read by any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "proto/plan.pb.h"
#include "transport/devices/decode_job.h"
#include "transport/devices/device.h"

namespace hoist::transport {

// One host->device copy out of a slot: rows of `width` packed at slot_off (pitch = width).
struct SlotOp {
  std::uint64_t slot_off;
  std::uint64_t dst;
  std::uint64_t dst_pitch;
  std::uint64_t width;
  std::uint64_t rows;
};

// One fill read: rows of `width` from the file into the slot at slot_off (packed).
struct SlotPiece {
  std::uint32_t file;
  std::uint32_t seq;
  std::uint64_t src;
  std::uint64_t src_pitch;
  std::uint64_t width;
  std::uint64_t rows;
  std::uint64_t dst_off;    // staged: offset in the slot; direct: the arena offset
  std::uint64_t dst_pitch;  // direct only (staged pieces are packed: 0)
  std::uint64_t bytes() const { return width * rows; }
};

// A chunk of work for one fill thread: pieces [begin, end) of slot `seq`.
struct SlotTask {
  std::uint32_t seq;
  std::size_t begin;
  std::size_t end;
  std::uint64_t bytes;
};

struct SlotPlan {
  std::vector<SlotOp> ops;               // staged only
  std::vector<std::size_t> seq_ops;      // staged: slot q's ops are [seq_ops[q], seq_ops[q+1])
  std::vector<std::uint64_t> seq_bytes;  // staged: bytes in slot q
  std::vector<SlotPiece> pieces;
  std::vector<SlotTask> tasks;
  std::vector<std::int64_t> copy_last_seq;  // staged only; one per plan copy
  // Packed work only: the decode jobs with src rewritten to the block's offset in its slot;
  // slot q's jobs are [seq_jobs[q], seq_jobs[q+1]).
  std::vector<DecodeJob> jobs;
  std::vector<std::size_t> seq_jobs;
  std::uint64_t seqs() const { return seq_bytes.size(); }
};

// Staged cut. slot_bytes >= 1, 1 <= chunk_bytes <= slot_bytes.
SlotPlan CutStaged(const proto::RankPlan& plan, std::uint64_t slot_bytes,
                   std::uint64_t chunk_bytes);

// Staged cut of a packed checkpoint's work: its plain copies as above and its units' blocks,
// each block whole in one slot (a block that does not fit the rest of a slot starts the next
// one; the caller makes sure every job's bytes <= slot_bytes). Each run of a unit's blocks in a
// slot starts at a multiple of 16 bytes (the gap before it is read by no piece); pieces read
// the run in one go. copy_last_seq is per logical copy (work.copies_end).
SlotPlan CutStaged(const PackedWork& work, std::uint64_t slot_bytes, std::uint64_t chunk_bytes);

// Packed: the size of one device slot that a slot of `cut` is copied into for decoding (a load's
// or a cache restore's): the fullest slot, rounded up to 256 bytes so that device slot k (at k
// times this) keeps the slots' alignment; at least 256. A small model's device slots are as
// small as its data.
std::uint64_t DeviceSlotBytes(const SlotPlan& cut);

// Direct cut (pageable: chunk_bytes >= 1; registered: whole copies, ~0ull).
SlotPlan CutDirect(const proto::RankPlan& plan, std::uint64_t chunk_bytes);

// The host->device copy of `op`, out of a slot whose first byte is `slot`, into the arena whose
// first byte is `arena` (rows packed on both sides become one 1-D copy).
Copy2D SlotOpCopy(const SlotOp& op, const std::byte* slot, void* arena);

// The last slot holding a byte of the plan's first `copies` copies (-1: none).
std::int64_t LastSeqOfCopies(const SlotPlan& cut, int copies);

}  // namespace hoist::transport
