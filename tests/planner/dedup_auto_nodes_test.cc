// DEDUP_AUTO across nodes: it never forwards between them, and its reason says so.
#include <gtest/gtest.h>

#include <string>

#include "planner/dedup.h"

namespace hoist::planner {
namespace {

// `ranks` ranks needing the same 1 MiB of one file, rank r on node node_of(r).
template <typename NodeOf>
proto::LoadPlan SharedBytes(int ranks, NodeOf node_of) {
  proto::LoadPlan plan;
  proto::File* f = plan.add_files();
  f->set_path("model.safetensors");
  f->set_size(2 << 20);
  for (int r = 0; r < ranks; ++r) {
    proto::RankPlan* rp = plan.add_ranks();
    rp->set_rank(static_cast<std::uint32_t>(r));
    rp->set_node(static_cast<std::uint32_t>(node_of(r)));
    rp->set_arena_bytes(1 << 20);
    proto::Copy* c = rp->add_copies();
    c->set_src_offset(4096);
    c->set_width(1 << 20);
    c->set_rows(1);
  }
  return plan;
}

TEST(DedupAutoNodesTest, AcrossNodesEachNodeReadsItsOwnCopyAndSaysWhy) {
  for (bool gpu_peers : {false, true}) {
    proto::LoadPlan plan = SharedBytes(4, [](int r) { return r / 2; });
    ASSERT_TRUE(ApplyDedup({proto::DEDUP_AUTO, 64 << 20, gpu_peers}, &plan).ok());
    // Never job: with GPU peers node dedup (one read per node), else none.
    EXPECT_EQ(plan.dedup(), gpu_peers ? proto::DEDUP_NODE : proto::DEDUP_NONE);
    EXPECT_EQ(plan.storage_bytes(), (gpu_peers ? 2u : 4u) << 20);
    EXPECT_NE(plan.dedup_reason().find("across its 2 nodes each node reads its own copy from "
                                       "storage, since a network between hosts is taken to be "
                                       "slower than reading (--dedup job forwards between them)"),
              std::string::npos)
        << plan.dedup_reason();
  }
}

TEST(DedupAutoNodesTest, OneNodeSaysNothingOfNodes) {
  proto::LoadPlan plan = SharedBytes(2, [](int) { return 0; });
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_AUTO, 64 << 20, true}, &plan).ok());
  EXPECT_EQ(plan.dedup(), proto::DEDUP_NODE);
  EXPECT_EQ(plan.dedup_reason().find("nodes"), std::string::npos) << plan.dedup_reason();
}

}  // namespace
}  // namespace hoist::planner
