// PeerOps (transport/peers/peer_ops.h), what the MPI, CUDA IPC and NCCL peers share, on its own:
// the call order, the argument checks naming the group, ops split at the transport's limit, and
// the counters of completed groups.
#include "transport/peers/peer_ops.h"

#include <gtest/gtest.h>

#include <vector>

namespace hoist::transport {
namespace {

PeerGroup Group() {
  PeerGroup g;
  g.ranks = {0, 2, 5};
  g.self = 2;
  return g;
}

TEST(PeerOpsTest, CallsOutsideAGroupAreRefused) {
  PeerOps ops("test peer", Group(), 1 << 20);
  std::vector<std::byte> mem(64);
  const DeviceBuffer arena{mem.data(), mem.size()};
  EXPECT_EQ(ops.Queue(true, 0, arena, 0, 8).code(), Code::kInvalidArgument);
  EXPECT_EQ(ops.End().status().code(), Code::kInvalidArgument);
  ASSERT_TRUE(ops.Begin().ok());
  EXPECT_EQ(ops.Begin().code(), Code::kInvalidArgument);
}

TEST(PeerOpsTest, OnlyAnotherMemberAndARangeInsideTheArena) {
  PeerOps ops("test peer", Group(), 1 << 20);
  std::vector<std::byte> mem(64);
  const DeviceBuffer arena{mem.data(), mem.size()};
  ASSERT_TRUE(ops.Begin().ok());
  const Status self = ops.Queue(true, 2, arena, 0, 8);
  EXPECT_EQ(self.code(), Code::kInvalidArgument);
  EXPECT_NE(self.message().find("rank 2 is not another member of group"), std::string::npos)
      << self.message();
  EXPECT_EQ(ops.Queue(true, 3, arena, 0, 8).code(), Code::kInvalidArgument);
  EXPECT_EQ(ops.Queue(false, 5, arena, 60, 8).code(), Code::kInvalidArgument);
  EXPECT_TRUE(ops.Queue(false, 5, arena, 56, 8).ok());
}

TEST(PeerOpsTest, OpsAreSplitAtTheLimitAndCountedWhenTheirGroupCompletes) {
  PeerOps ops("test peer", Group(), 16);
  std::vector<std::byte> mem(64);
  const DeviceBuffer arena{mem.data(), mem.size()};
  ASSERT_TRUE(ops.Begin().ok());
  ASSERT_TRUE(ops.Queue(true, 0, arena, 0, 40).ok());   // 16 + 16 + 8
  ASSERT_TRUE(ops.Queue(false, 5, arena, 40, 0).ok());  // nothing moves
  ASSERT_TRUE(ops.Queue(false, 5, arena, 40, 24).ok());
  Result<std::vector<PeerOp>> group = ops.End();
  ASSERT_TRUE(group.ok());
  ASSERT_EQ(group->size(), 5u);
  EXPECT_EQ((*group)[2].bytes, 8u);
  EXPECT_EQ((*group)[2].offset, 32u);
  EXPECT_EQ((*group)[0].index, 0);
  EXPECT_EQ((*group)[3].index, 2);
  EXPECT_EQ((*group)[3].ptr, mem.data() + 40);
  ops.Issued(std::move(*group));
  EXPECT_EQ(ops.groups_issued(), 1u);
  EXPECT_EQ(ops.PendingOps(), 5u);
  ops.CompleteOldest();
  EXPECT_EQ(ops.groups_completed(), 1u);
  EXPECT_EQ(ops.bytes_sent(), 40u);
  EXPECT_EQ(ops.bytes_received(), 24u);
  EXPECT_EQ(ops.PendingOps(), 0u);
}

}  // namespace
}  // namespace hoist::transport
