// DEDUP_AUTO across nodes: with nothing measured it never forwards between them; with measured
// rates (planner::HostRates) it forwards (JOB) only where the network beats uncached storage and
// job dedup saves enough; the reason gives the figures either way.
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

HostRates Rates(double net, double storage, bool cached) {
  HostRates r;
  r.net_gib_s = net;
  r.storage_gib_s = storage;
  r.cached = cached;
  return r;
}

// The rates' verdicts, with and without GPU peers (node dedup first where they exist).
TEST(DedupAutoNodesTest, MeasuredRatesDecideWhetherHostsForward) {
  for (bool gpu_peers : {false, true}) {
    SCOPED_TRACE(gpu_peers ? "gpu peers" : "host arenas");
    const proto::Dedup local = gpu_peers ? proto::DEDUP_NODE : proto::DEDUP_NONE;
    const std::uint64_t local_bytes = (gpu_peers ? 2u : 4u) << 20;
    struct Case {
      HostRates rates;
      proto::Dedup want;  // DEDUP_AUTO: the local choice
      const char* says;
    } cases[] = {
        {Rates(2.5, 1.25, false), proto::DEDUP_JOB,
         "auto: job (the network between hosts measured 2.50 GiB/s, faster than reading storage "
         "at 1.25 GiB/s: reads "},
        {Rates(0.12, 1.5, false), proto::DEDUP_AUTO,
         "across its 2 nodes each node reads its own copy from storage: the network between "
         "hosts measured 0.12 GiB/s, not faster than reading storage at 1.50 GiB/s"},
        {Rates(2.5, 0, true), proto::DEDUP_AUTO,
         "across its 2 nodes each node reads its own copy from storage: the network between "
         "hosts measured 2.50 GiB/s, and every host has the checkpoint in its page cache"},
        {Rates(2.5, 0, false), proto::DEDUP_AUTO,  // storage not measured: nothing known
         "since a network between hosts is taken to be slower than reading"},
    };
    for (const Case& c : cases) {
      proto::LoadPlan plan = SharedBytes(4, [](int r) { return r / 2; });
      DedupOptions o{proto::DEDUP_AUTO, 64 << 20, gpu_peers, c.rates};
      ASSERT_TRUE(ApplyDedup(o, &plan).ok());
      const proto::Dedup want = c.want == proto::DEDUP_AUTO ? local : c.want;
      EXPECT_EQ(plan.dedup(), want) << plan.dedup_reason();
      // Job: the shared MiB is read once in the job; otherwise once per node or per rank.
      EXPECT_EQ(plan.storage_bytes(), want == proto::DEDUP_JOB ? 1u << 20 : local_bytes);
      EXPECT_NE(plan.dedup_reason().find(c.says), std::string::npos) << plan.dedup_reason();
    }
  }
}

// Forwarding between hosts that saves under kAutoDedupMinSaving is not taken: every rank needs
// its own 1 MiB and only 64 KiB is shared by all.
TEST(DedupAutoNodesTest, AFastNetworkThatSavesLittleKeepsEachNodeReading) {
  proto::LoadPlan plan = SharedBytes(4, [](int r) { return r / 2; });
  for (int r = 0; r < 4; ++r) {
    proto::Copy* c = plan.mutable_ranks(r)->mutable_copies(0);
    c->set_src_offset(4096 + static_cast<std::uint64_t>(r) * (1 << 20));
    c->set_width(1 << 20);
    proto::Copy* shared = plan.mutable_ranks(r)->add_copies();
    shared->set_src_offset(4096 + (4u << 20));
    shared->set_dst_offset(1 << 20);
    shared->set_width(64 << 10);
    shared->set_rows(1);
    plan.mutable_ranks(r)->set_arena_bytes((1 << 20) + (64 << 10));
  }
  plan.mutable_files(0)->set_size(8 << 20);
  DedupOptions o{proto::DEDUP_AUTO, 64 << 20, false, Rates(10, 1, false)};
  ASSERT_TRUE(ApplyDedup(o, &plan).ok());
  EXPECT_EQ(plan.dedup(), proto::DEDUP_NONE);
  EXPECT_NE(plan.dedup_reason().find("but forwarding between them would save only"),
            std::string::npos)
      << plan.dedup_reason();
}

TEST(DedupAutoNodesTest, OneNodeSaysNothingOfNodes) {
  proto::LoadPlan plan = SharedBytes(2, [](int) { return 0; });
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_AUTO, 64 << 20, true}, &plan).ok());
  EXPECT_EQ(plan.dedup(), proto::DEDUP_NODE);
  EXPECT_EQ(plan.dedup_reason().find("nodes"), std::string::npos) << plan.dedup_reason();
}

}  // namespace
}  // namespace hoist::planner
