// The plan-to-slots cut alone, against a byte-by-byte reference: every copy expanded into its
// (file, src, dst) bytes in plan order, the i-th of them belonging in slot i / slot_bytes at
// i % slot_bytes. The cut's pieces, ops and tasks are expanded the same way and must give exactly
// that sequence, within slot capacity, chunk size and slot boundaries. Seeded pseudo-random plans
// plus edge cases (empty plan, copies larger than / exactly one slot, zero-length copies, strided
// rows, rows wider than a slot).
#include "transport/staging/slot_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace hoist::transport {
namespace {

struct Byte {
  std::uint32_t file;
  std::uint64_t src;
  std::uint64_t dst;
  int copy;
};

// Obviously correct: each copy's bytes, row by row, column by column, in plan order.
std::vector<Byte> Expand(const proto::RankPlan& plan) {
  std::vector<Byte> out;
  for (int i = 0; i < plan.copies_size(); ++i) {
    const proto::Copy& c = plan.copies(i);
    for (std::uint64_t r = 0; r < c.rows(); ++r) {
      for (std::uint64_t x = 0; x < c.width(); ++x) {
        out.push_back(Byte{c.file(), c.src_offset() + r * c.src_pitch() + x,
                           c.dst_offset() + r * c.dst_pitch() + x, i});
      }
    }
  }
  return out;
}

proto::Copy* AddCopy(proto::RankPlan* plan, std::uint32_t file, std::uint64_t src,
                     std::uint64_t src_pitch, std::uint64_t dst, std::uint64_t dst_pitch,
                     std::uint64_t width, std::uint64_t rows) {
  proto::Copy* c = plan->add_copies();
  c->set_file(file);
  c->set_src_offset(src);
  c->set_src_pitch(src_pitch);
  c->set_dst_offset(dst);
  c->set_dst_pitch(dst_pitch);
  c->set_width(width);
  c->set_rows(rows);
  return c;
}

void CheckStaged(const proto::RankPlan& plan, std::uint64_t slot, std::uint64_t chunk) {
  SCOPED_TRACE("slot " + std::to_string(slot) + ", chunk " + std::to_string(chunk));
  const std::vector<Byte> ref = Expand(plan);
  const SlotPlan cut = CutStaged(plan, slot, chunk);
  const std::uint64_t n = ref.size();
  const std::uint64_t seqs = (n + slot - 1) / slot;
  ASSERT_EQ(cut.seqs(), seqs);
  for (std::uint64_t q = 0; q < seqs; ++q) {
    EXPECT_EQ(cut.seq_bytes[q], q + 1 < seqs ? slot : n - q * slot) << "slot " << q;
  }

  // Pieces: in order, the stream's bytes, each in its slot, within the chunk.
  std::uint64_t g = 0;
  for (std::size_t i = 0; i < cut.pieces.size(); ++i) {
    const SlotPiece& p = cut.pieces[i];
    ASSERT_GT(p.bytes(), 0u) << "piece " << i;
    ASSERT_LE(p.bytes(), chunk) << "piece " << i;
    ASSERT_LE(p.dst_off + p.bytes(), slot) << "piece " << i << " crosses its slot's end";
    ASSERT_EQ(p.dst_pitch, 0u);
    for (std::uint64_t r = 0; r < p.rows; ++r) {
      for (std::uint64_t x = 0; x < p.width; ++x, ++g) {
        ASSERT_LT(g, n) << "piece " << i << " reads past the plan";
        ASSERT_EQ(p.file, ref[g].file) << "byte " << g;
        ASSERT_EQ(p.src + r * p.src_pitch + x, ref[g].src) << "byte " << g;
        ASSERT_EQ(p.seq, g / slot) << "byte " << g;
        ASSERT_EQ(p.dst_off + r * p.width + x, g % slot) << "byte " << g;
      }
    }
  }
  ASSERT_EQ(g, n) << "pieces miss bytes";

  // Ops: slot q's ops, in order, move the stream's bytes of slot q to their arena offsets.
  ASSERT_EQ(cut.seq_ops.size(), seqs + 1);
  EXPECT_EQ(cut.seq_ops.front(), 0u);
  EXPECT_EQ(cut.seq_ops.back(), cut.ops.size());
  g = 0;
  for (std::uint64_t q = 0; q < seqs; ++q) {
    ASSERT_LE(cut.seq_ops[q], cut.seq_ops[q + 1]);
    for (std::size_t i = cut.seq_ops[q]; i < cut.seq_ops[q + 1]; ++i) {
      const SlotOp& op = cut.ops[i];
      ASSERT_GT(op.width * op.rows, 0u) << "op " << i;
      ASSERT_LE(op.slot_off + op.width * op.rows, slot) << "op " << i << " crosses its slot";
      for (std::uint64_t r = 0; r < op.rows; ++r) {
        for (std::uint64_t x = 0; x < op.width; ++x, ++g) {
          ASSERT_LT(g, n);
          ASSERT_EQ(g / slot, q) << "byte " << g;
          ASSERT_EQ(op.slot_off + r * op.width + x, g % slot) << "byte " << g;
          ASSERT_EQ(op.dst + r * op.dst_pitch + x, ref[g].dst) << "byte " << g;
        }
      }
    }
  }
  ASSERT_EQ(g, n) << "ops miss bytes";

  // Tasks: consecutive runs of one slot's pieces, within the chunk, every slot has one.
  std::size_t next = 0;
  std::vector<int> per_slot(seqs, 0);
  for (const SlotTask& t : cut.tasks) {
    ASSERT_EQ(t.begin, next);
    ASSERT_LT(t.begin, t.end);
    std::uint64_t bytes = 0;
    for (std::size_t i = t.begin; i < t.end; ++i) {
      ASSERT_EQ(cut.pieces[i].seq, t.seq);
      bytes += cut.pieces[i].bytes();
    }
    EXPECT_EQ(t.bytes, bytes);
    EXPECT_LE(t.bytes, chunk);
    ASSERT_LT(t.seq, seqs);
    ++per_slot[t.seq];
    next = t.end;
  }
  EXPECT_EQ(next, cut.pieces.size());
  for (std::uint64_t q = 0; q < seqs; ++q) EXPECT_GE(per_slot[q], 1) << "slot " << q;

  // Milestones: the last slot holding a byte of copies [0, i].
  ASSERT_EQ(cut.copy_last_seq.size(), static_cast<std::size_t>(plan.copies_size()));
  std::int64_t last = -1;
  std::size_t b = 0;
  for (int i = 0; i < plan.copies_size(); ++i) {
    for (; b < n && ref[b].copy == i; ++b) last = static_cast<std::int64_t>(b / slot);
    EXPECT_EQ(cut.copy_last_seq[i], last) << "copy " << i;
    EXPECT_EQ(LastSeqOfCopies(cut, i + 1), last) << "copy " << i;
  }
  EXPECT_EQ(LastSeqOfCopies(cut, 0), -1);
  EXPECT_EQ(LastSeqOfCopies(cut, plan.copies_size() + 5), plan.copies_size() > 0 ? last : -1);
}

void CheckDirect(const proto::RankPlan& plan, std::uint64_t chunk) {
  SCOPED_TRACE("direct, chunk " + std::to_string(chunk));
  const std::vector<Byte> ref = Expand(plan);
  const SlotPlan cut = CutDirect(plan, chunk);
  EXPECT_TRUE(cut.ops.empty());
  EXPECT_EQ(cut.seqs(), 0u);
  std::uint64_t g = 0;
  for (std::size_t i = 0; i < cut.pieces.size(); ++i) {
    const SlotPiece& p = cut.pieces[i];
    ASSERT_GT(p.bytes(), 0u);
    ASSERT_LE(p.bytes(), chunk);
    ASSERT_EQ(p.seq, 0u);
    for (std::uint64_t r = 0; r < p.rows; ++r) {
      for (std::uint64_t x = 0; x < p.width; ++x, ++g) {
        ASSERT_LT(g, ref.size());
        ASSERT_EQ(p.file, ref[g].file) << "byte " << g;
        ASSERT_EQ(p.src + r * p.src_pitch + x, ref[g].src) << "byte " << g;
        ASSERT_EQ(p.dst_off + r * p.dst_pitch + x, ref[g].dst) << "byte " << g;
      }
    }
    ASSERT_LT(i, cut.tasks.size());
    EXPECT_EQ(cut.tasks[i].begin, i);
    EXPECT_EQ(cut.tasks[i].end, i + 1);
    EXPECT_EQ(cut.tasks[i].bytes, p.bytes());
  }
  EXPECT_EQ(g, ref.size());
  EXPECT_EQ(cut.tasks.size(), cut.pieces.size());
}

void CheckAll(const proto::RankPlan& plan, std::uint64_t slot, std::uint64_t chunk) {
  CheckStaged(plan, slot, chunk);
  CheckDirect(plan, chunk);
  CheckDirect(plan, ~0ull);
}

proto::RankPlan RandomPlan(std::mt19937_64& rng) {
  proto::RankPlan plan;
  auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const int copies = static_cast<int>(pick(0, 12));
  std::uint64_t src = pick(0, 50), dst = pick(0, 50);
  for (int i = 0; i < copies; ++i) {
    const std::uint64_t width = pick(0, 5) == 0 ? 0 : pick(1, 90);
    const std::uint64_t rows = pick(0, 5) == 0 ? 0 : pick(1, 6);
    const int kind = static_cast<int>(pick(0, 3));  // packed, strided source, strided dest, both
    const std::uint64_t sp = width + ((kind & 1) ? pick(1, 40) : 0);
    const std::uint64_t dp = width + ((kind & 2) ? pick(1, 40) : 0);
    AddCopy(&plan, static_cast<std::uint32_t>(pick(0, 3)), src, sp, dst, dp, width, rows);
    src += sp * rows + pick(0, 30);
    dst += dp * rows + pick(0, 30);
  }
  return plan;
}

TEST(SlotPlanTest, RandomPlansMatchByteReference) {
  std::mt19937_64 rng(20261130);
  for (int iter = 0; iter < 400; ++iter) {
    SCOPED_TRACE("plan " + std::to_string(iter));
    const proto::RankPlan plan = RandomPlan(rng);
    const std::uint64_t slot = std::uniform_int_distribution<std::uint64_t>(1, 120)(rng);
    const std::uint64_t chunk = std::uniform_int_distribution<std::uint64_t>(1, slot)(rng);
    CheckAll(plan, slot, chunk);
    CheckStaged(plan, slot, slot);
    if (HasFatalFailure()) return;
  }
}

TEST(SlotPlanTest, EmptyPlanHasNoSlots) {
  proto::RankPlan plan;
  CheckAll(plan, 64, 16);
  const SlotPlan cut = CutStaged(plan, 64, 16);
  EXPECT_EQ(cut.seqs(), 0u);
  EXPECT_TRUE(cut.tasks.empty());
  EXPECT_TRUE(cut.pieces.empty());
  EXPECT_EQ(LastSeqOfCopies(cut, 1), -1);
}

TEST(SlotPlanTest, ZeroLengthCopiesAddNothing) {
  proto::RankPlan plan;
  AddCopy(&plan, 0, 10, 0, 0, 0, 0, 5);  // no width
  AddCopy(&plan, 0, 10, 7, 0, 7, 7, 0);  // no rows
  CheckAll(plan, 16, 4);
  EXPECT_EQ(CutStaged(plan, 16, 4).seqs(), 0u);
  AddCopy(&plan, 1, 3, 5, 100, 5, 5, 1);
  AddCopy(&plan, 0, 10, 0, 0, 0, 0, 0);
  CheckAll(plan, 16, 4);
  const SlotPlan cut = CutStaged(plan, 16, 4);
  EXPECT_EQ(cut.copy_last_seq, (std::vector<std::int64_t>{-1, -1, 0, 0}));
}

TEST(SlotPlanTest, CopyLargerThanASlotSpansSlots) {
  proto::RankPlan plan;
  AddCopy(&plan, 0, 0, 1000, 0, 1000, 1000, 1);  // 1000 bytes over slots of 64
  AddCopy(&plan, 1, 5, 300, 2000, 300, 300, 3);  // packed rows, merged to one range
  CheckAll(plan, 64, 64);
  CheckAll(plan, 64, 10);
  const SlotPlan cut = CutStaged(plan, 64, 64);
  EXPECT_EQ(cut.seqs(), (1000u + 900u + 63u) / 64u);
}

TEST(SlotPlanTest, CopyOfExactlyOneSlotEndsAtTheBoundary) {
  proto::RankPlan plan;
  AddCopy(&plan, 0, 0, 64, 0, 64, 64, 1);
  AddCopy(&plan, 0, 64, 32, 64, 32, 32, 2);  // two rows filling slot 1 exactly
  AddCopy(&plan, 0, 200, 8, 300, 8, 8, 1);
  CheckAll(plan, 64, 64);
  const SlotPlan cut = CutStaged(plan, 64, 64);
  EXPECT_EQ(cut.copy_last_seq, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(cut.seq_bytes, (std::vector<std::uint64_t>{64, 64, 8}));
}

TEST(SlotPlanTest, StridedRowsAreGatheredAndSplitAtSlotEnds) {
  proto::RankPlan plan;
  AddCopy(&plan, 0, 7, 100, 0, 30, 30, 9);    // strided source, rows straddle slots of 64
  AddCopy(&plan, 1, 0, 20, 1000, 50, 20, 7);  // strided destination
  AddCopy(&plan, 2, 0, 90, 2000, 90, 80, 3);  // rows wider than a slot
  for (std::uint64_t slot : {1ull, 7ull, 30ull, 64ull, 200ull}) {
    for (std::uint64_t chunk : {std::uint64_t{1}, std::uint64_t{3}, slot}) {
      if (chunk <= slot) CheckAll(plan, slot, chunk);
    }
  }
}

TEST(SlotPlanTest, DeviceSlotBytesIsTheFullestSlotRoundedTo256) {
  SlotPlan cut;
  EXPECT_EQ(DeviceSlotBytes(cut), 256u) << "no slot: the smallest slot";
  cut.seq_bytes = {256};
  EXPECT_EQ(DeviceSlotBytes(cut), 256u);
  cut.seq_bytes = {1000, 257, 3};
  EXPECT_EQ(DeviceSlotBytes(cut), 1024u);
  cut.seq_bytes = {5, 64u << 20, 7};
  EXPECT_EQ(DeviceSlotBytes(cut), 64u << 20);
}

}  // namespace
}  // namespace hoist::transport
