// The slot ring (transport/staging/slot_ring.h) on its own, on the host backend: driven by hand,
// sequence by sequence, through fewer slots than sequences (each slot reused after its earlier
// sequence's copies completed), its copies land in the arena; the first failure is the ring's.
#include "transport/staging/slot_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "transport/staging/run_context.h"
#include "transport/staging/slot_plan.h"

namespace hoist::transport::pipeline_internal {
namespace {

constexpr std::uint64_t kSlotBytes = 4096;
constexpr std::uint64_t kBytes = 5 * kSlotBytes + 123;  // six sequences, the last partial

proto::RankPlan OneCopy() {
  proto::RankPlan plan;
  proto::Copy* c = plan.add_copies();
  c->set_file(0);
  c->set_width(kBytes);
  c->set_rows(1);
  c->set_src_pitch(kBytes);
  c->set_dst_pitch(kBytes);
  plan.set_arena_bytes(kBytes);
  return plan;
}

// A run context set up as the runner does for a staged run of `plan` (the copy stream and the
// time base), on a host device.
struct Rig {
  explicit Rig(const proto::RankPlan& p) : plan(p) {
    dev = OpenHostDevice();
    arena = *dev->Allocate(kBytes);
    options.slots = 2;
    options.slot_bytes = kSlotBytes;
    cx = std::make_unique<RunContext>(*dev, arena, plan, sources, options, report);
    cx->slots = 2;
    cx->slot_bytes = kSlotBytes;
    cx->chunk = kSlotBytes;
    cx->cut = CutStaged(plan, kSlotBytes, kSlotBytes);
    cx->stream = *dev->CreateStream();
    cx->t0_event = *dev->CreateEvent(true);
    EXPECT_TRUE(dev->Record(cx->t0_event, cx->stream).ok());
    EXPECT_TRUE(dev->Wait(cx->t0_event).ok());
  }

  proto::RankPlan plan;
  std::unique_ptr<Device> dev;  // destroyed last: it frees what the ring left
  DeviceBuffer arena;
  std::vector<FileSources> sources;
  PipelineOptions options;
  PipelineReport report;
  std::unique_ptr<RunContext> cx;
};

TEST(SlotRingTest, SequencesThroughFewerSlotsLandInTheArena) {
  Rig rig(OneCopy());
  ASSERT_EQ(rig.cx->cut.seqs(), 6u);
  std::vector<std::byte> want(kBytes);
  for (std::uint64_t i = 0; i < kBytes; ++i) want[i] = static_cast<std::byte>(i * 7 + 3);

  Milestones milestones(*rig.cx);
  SlotRing ring(*rig.cx, milestones, 2);
  ASSERT_EQ(ring.size(), 2);
  ASSERT_TRUE(ring.CreateEvents().ok());
  ASSERT_TRUE(ring.AllocateAll().ok());
  for (std::uint32_t q = 0; q < rig.cx->cut.seqs(); ++q) {
    const int k = static_cast<int>(q % 2);
    ASSERT_TRUE(ring.Acquire(k, q).ok()) << q;
    std::memcpy(ring.buffer(k), want.data() + q * kSlotBytes, rig.cx->cut.seq_bytes[q]);
    ASSERT_TRUE(ring.TaskDone(q)) << "one task a sequence: its last";
    ASSERT_TRUE(ring.Submit(q).ok()) << q;
  }
  ASSERT_TRUE(ring.Drain().ok());
  EXPECT_TRUE(ring.status().ok());
  EXPECT_EQ(ring.TakeSubmitSpans().size(), 6u);

  std::vector<std::byte> got(kBytes);
  ASSERT_TRUE(rig.dev->CopyToHost(got.data(), rig.arena.ptr, kBytes).ok());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(ring.FreeStaging().ok());
}

TEST(SlotRingTest, TheFirstFailureIsTheRings) {
  Rig rig(OneCopy());
  Milestones milestones(*rig.cx);
  SlotRing ring(*rig.cx, milestones, 2);
  ASSERT_TRUE(ring.CreateEvents().ok());
  EXPECT_FALSE(ring.failed());
  ring.Fail(Status::IoError("first"));
  ring.Fail(Status::Internal("second"));
  EXPECT_TRUE(ring.failed());
  EXPECT_EQ(ring.status().code(), Code::kIoError);
  EXPECT_EQ(ring.status().message(), "first");
  EXPECT_TRUE(ring.Drain().ok()) << "nothing was submitted";
  EXPECT_TRUE(ring.FreeStaging().ok());
}

}  // namespace
}  // namespace hoist::transport::pipeline_internal
