#include "transport/staging/slot_plan.h"

#include <algorithm>

namespace hoist::transport {
namespace {

// A copy's shape after packing: rows packed on both sides become one row.
struct Shape {
  std::uint64_t width, rows, src_pitch, dst_pitch;
};

Shape Packed(const proto::Copy& c) {
  Shape s{c.width(), c.rows(), c.src_pitch(), c.dst_pitch()};
  if (s.rows > 1 && s.src_pitch == s.width && s.dst_pitch == s.width) {
    s.width *= s.rows;
    s.rows = 1;
  }
  return s;
}

// Appends pieces of at most `chunk` bytes covering rows of width at src (src_pitch) -> dst
// (dst_pitch): runs of whole rows when a row fits, otherwise single-row pieces. `staged`: pieces
// land packed in a slot (dst_pitch 0) and single-row pieces keep the source pitch; direct pieces
// keep both pitches on whole rows and none on single-row pieces (as the device copies expect).
void AddPieces(std::vector<SlotPiece>* out, bool staged, std::uint32_t file, std::uint32_t seq,
               std::uint64_t src, std::uint64_t src_pitch, std::uint64_t width, std::uint64_t rows,
               std::uint64_t dst, std::uint64_t dst_pitch, std::uint64_t chunk) {
  if (rows > 1 && width <= chunk) {
    const std::uint64_t per = std::max<std::uint64_t>(1, chunk / width);
    for (std::uint64_t r = 0; r < rows; r += per) {
      out->push_back(SlotPiece{file, seq, src + r * src_pitch, src_pitch, width,
                               std::min(per, rows - r), dst + r * dst_pitch,
                               staged ? 0 : dst_pitch});
    }
    return;
  }
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t c = 0; c < width; c += chunk) {
      out->push_back(SlotPiece{file, seq, src + r * src_pitch + c, staged ? src_pitch : 0,
                               std::min(chunk, width - c), 1, dst + r * dst_pitch + c, 0});
    }
  }
}

// Consecutive pieces of one slot, at most `chunk` bytes a task.
void GroupTasks(SlotPlan* cut, std::uint64_t chunk) {
  SlotTask cur{0, 0, 0, 0};
  for (std::size_t i = 0; i < cut->pieces.size(); ++i) {
    const SlotPiece& p = cut->pieces[i];
    if (cur.end > cur.begin && (p.seq != cur.seq || cur.bytes + p.bytes() > chunk)) {
      cut->tasks.push_back(cur);
      cur = SlotTask{p.seq, i, i, 0};
    }
    if (cur.end == cur.begin) cur = SlotTask{p.seq, i, i, 0};
    cur.end = i + 1;
    cur.bytes += p.bytes();
  }
  if (cur.end > cur.begin) cut->tasks.push_back(cur);
}

// Walks the packed byte stream slot by slot.
class StagedCutter {
 public:
  StagedCutter(std::uint64_t slot_bytes, std::uint64_t chunk, SlotPlan* cut)
      : slot_bytes_(slot_bytes), chunk_(chunk), cut_(*cut) {
    cut_.seq_ops.push_back(0);
    cut_.seq_jobs.push_back(0);
  }

  // Cuts one copy with bytes; returns the last slot holding its bytes.
  std::int64_t Add(const proto::Copy& c) {
    const Shape s = Packed(c);
    std::uint64_t row = 0, col = 0;
    while (row < s.rows) {
      const std::uint64_t rem = slot_bytes_ - pos_;
      const std::uint64_t src = c.src_offset() + row * s.src_pitch + col;
      const std::uint64_t dst = c.dst_offset() + row * s.dst_pitch + col;
      if (col == 0 && s.width <= rem) {  // whole rows fit
        const std::uint64_t n = std::min(s.rows - row, rem / s.width);
        Emit(c.file(), src, s.src_pitch, s.width, n, dst, s.dst_pitch);
        row += n;
      } else {  // a part of one row, up to the slot's end
        const std::uint64_t len = std::min(s.width - col, rem);
        Emit(c.file(), src, 0, len, 1, dst, 0);
        col += len;
        if (col == s.width) {
          col = 0;
          ++row;
        }
      }
      if (pos_ == slot_bytes_) NextSlot();
    }
    return pos_ == 0 && seq_ > 0 ? seq_ - 1 : seq_;  // ended exactly at a slot boundary
  }

  // Cuts a unit of blocks (every job's bytes <= slot_bytes); returns the last slot holding them.
  std::int64_t AddUnit(const DecodeUnit& u, const std::vector<DecodeJob>& jobs) {
    std::size_t j = u.job_begin;
    while (j < u.job_end) {
      // Runs of blocks start 16-byte aligned in their slot (blocks are 4-byte multiples, so
      // every block of the run is word-aligned for the decoder); the gap is never read.
      const std::uint64_t at = (pos_ + 15) / 16 * 16;
      if (at > slot_bytes_ || jobs[j].bytes > slot_bytes_ - at) {
        NextSlot();
      } else {
        pos_ = at;
      }
      const std::uint64_t run_src = u.src + jobs[j].src, run_pos = pos_;
      for (; j < u.job_end && jobs[j].bytes <= slot_bytes_ - pos_; ++j) {
        cut_.jobs.push_back(jobs[j]);
        cut_.jobs.back().src = pos_;
        pos_ += jobs[j].bytes;
      }
      const std::uint64_t run = pos_ - run_pos;
      if (run > 0) {
        AddPieces(&cut_.pieces, /*staged=*/true, u.file, seq_, run_src, run, run, 1, run_pos, run,
                  chunk_);
      }
      if (pos_ == slot_bytes_) NextSlot();
    }
    return pos_ == 0 && seq_ > 0 ? seq_ - 1 : seq_;
  }

  void Finish() {
    if (pos_ > 0) NextSlot();
  }

 private:
  void Emit(std::uint32_t file, std::uint64_t src, std::uint64_t src_pitch, std::uint64_t width,
            std::uint64_t rows, std::uint64_t dst, std::uint64_t dst_pitch) {
    cut_.ops.push_back(SlotOp{pos_, dst, dst_pitch, width, rows});
    AddPieces(&cut_.pieces, /*staged=*/true, file, seq_, src, src_pitch, width, rows, pos_, width,
              chunk_);
    pos_ += rows * width;
  }

  void NextSlot() {
    cut_.seq_bytes.push_back(pos_);
    ++seq_;
    pos_ = 0;
    cut_.seq_ops.push_back(cut_.ops.size());
    cut_.seq_jobs.push_back(cut_.jobs.size());
  }

  const std::uint64_t slot_bytes_, chunk_;
  SlotPlan& cut_;
  std::uint32_t seq_ = 0;
  std::uint64_t pos_ = 0;
};

}  // namespace

SlotPlan CutStaged(const proto::RankPlan& plan, std::uint64_t slot_bytes,
                   std::uint64_t chunk_bytes) {
  SlotPlan cut;
  StagedCutter cutter(slot_bytes, chunk_bytes, &cut);
  cut.copy_last_seq.assign(plan.copies_size(), -1);
  std::int64_t last_seq = -1;  // of the latest copy with bytes
  for (int ci = 0; ci < plan.copies_size(); ++ci) {
    const proto::Copy& c = plan.copies(ci);
    if (c.width() != 0 && c.rows() != 0) last_seq = cutter.Add(c);
    cut.copy_last_seq[ci] = last_seq;
  }
  cutter.Finish();
  GroupTasks(&cut, chunk_bytes);
  return cut;
}

SlotPlan CutStaged(const PackedWork& work, std::uint64_t slot_bytes, std::uint64_t chunk_bytes) {
  SlotPlan cut;
  for (const DecodeJob& j : work.decode.jobs) {
    if (j.bytes > slot_bytes || j.bytes == 0) return cut;  // the caller's contract; nothing cut
  }
  cut.jobs.reserve(work.decode.jobs.size());
  StagedCutter cutter(slot_bytes, chunk_bytes, &cut);
  cut.copy_last_seq.assign(work.copies_end.size(), -1);
  std::int64_t last_seq = -1;
  std::size_t c = 0, u = 0;
  for (std::size_t i = 0; i < work.copies_end.size(); ++i) {
    for (; c < work.copies_end[i]; ++c) {
      const proto::Copy& copy = work.plan.copies(static_cast<int>(c));
      if (copy.width() != 0 && copy.rows() != 0) last_seq = cutter.Add(copy);
    }
    for (; u < work.units_end[i]; ++u) {
      if (work.units[u].job_end > work.units[u].job_begin) {
        last_seq = cutter.AddUnit(work.units[u], work.decode.jobs);
      }
    }
    cut.copy_last_seq[i] = last_seq;
  }
  cutter.Finish();
  GroupTasks(&cut, chunk_bytes);
  return cut;
}

SlotPlan CutDirect(const proto::RankPlan& plan, std::uint64_t chunk_bytes) {
  SlotPlan cut;
  for (const proto::Copy& c : plan.copies()) {
    if (c.width() == 0 || c.rows() == 0) continue;
    const Shape s = Packed(c);
    AddPieces(&cut.pieces, /*staged=*/false, c.file(), 0, c.src_offset(), s.src_pitch, s.width,
              s.rows, c.dst_offset(), s.dst_pitch, chunk_bytes);
  }
  for (std::size_t i = 0; i < cut.pieces.size(); ++i) {
    cut.tasks.push_back(SlotTask{0, i, i + 1, cut.pieces[i].bytes()});
  }
  return cut;
}

Copy2D SlotOpCopy(const SlotOp& op, const std::byte* slot, void* arena) {
  Copy2D c;
  c.dst = static_cast<std::byte*>(arena) + op.dst;
  c.dst_pitch = op.dst_pitch;
  c.src = slot + op.slot_off;
  c.src_pitch = op.width;
  c.width = op.width;
  c.rows = op.rows;
  if (c.rows > 1 && c.dst_pitch == c.width) {  // packed on both sides: one 1-D copy
    c.width *= c.rows;
    c.rows = 1;
  }
  return c;
}

std::int64_t LastSeqOfCopies(const SlotPlan& cut, int copies) {
  if (copies <= 0 || cut.copy_last_seq.empty()) return -1;
  return cut.copy_last_seq[std::min<std::size_t>(copies, cut.copy_last_seq.size()) - 1];
}

std::uint64_t DeviceSlotBytes(const SlotPlan& cut) {
  std::uint64_t fullest = 1;
  for (std::uint64_t b : cut.seq_bytes) fullest = std::max(fullest, b);
  return (fullest + 255) / 256 * 256;
}

}  // namespace hoist::transport
