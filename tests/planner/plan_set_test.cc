// Compact plans (planner/plan_set.h): replicas share a rank plan; expanding one gives exactly
// what dedup planned on the whole world; a rank's view holds its own plan and its node's and
// group's places; and, on the header-only DeepSeek-V3-671B shape at world 1024, the plan's size
// does not grow with dp and a rank's view does not grow with the world.
#include "planner/plan_set.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "codec/pack/pack.h"
#include "planner/checkpoint.h"
#include "planner/dedup.h"
#include "planner/plan_builder.h"
#include "rank/exchange.h"
#include "tests/planner/preset_fixture.h"
#include "tests/scratch_dir.h"

namespace hoist::planner {
namespace {

using testing::Nodes;
class PlanSetTest : public testing::PresetSuite {};

std::string Wire(const google::protobuf::Message& m) { return m.SerializeAsString(); }

TEST_F(PlanSetTest, ReplicasShareOneRankPlanAndExpandToEveryRank) {
  const Checkpoint ckpt = Open("qwen3-tiny", false);
  PlanOptions o;
  o.tp = 2;
  o.dp = 4;
  o.dedup = proto::DEDUP_NONE;
  Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  EXPECT_TRUE(compact->compact());
  EXPECT_EQ(compact->ranks_size(), o.tp);
  Result<proto::LoadPlan> all = ExpandPlan(*compact);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->ranks_size(), 8);
  EXPECT_EQ(all->storage_bytes(), compact->storage_bytes());
  for (int r = 0; r < 8; ++r) {
    const proto::RankPlan& rp = all->ranks(r);
    EXPECT_EQ(rp.rank(), static_cast<std::uint32_t>(r));
    EXPECT_EQ(rp.tp_rank(), static_cast<std::uint64_t>(r % 2));
    EXPECT_EQ(rp.dp_rank(), static_cast<std::uint64_t>(r / 2));
    EXPECT_EQ(rp.gpu(), static_cast<std::uint32_t>(r));
    EXPECT_EQ(Wire(rp.copies(0)), Wire(compact->ranks(r % 2).copies(0)));
    EXPECT_EQ(rp.copies_size(), compact->ranks(r % 2).copies_size());
  }
}

// The templates give every rank the exchange ApplyDedup plans on the expanded world: node
// dedup, and job dedup with one replica per class (ep); job dedup with replicas stripes each
// class's bytes over them instead (tests/planner/job_dedup_test.cc).
TEST_F(PlanSetTest, DedupTemplatesEqualDedupOfTheExpandedWorld) {
  const Checkpoint ckpt = Open("qwen3-moe-tiny", false);
  for (const proto::Dedup mode : {proto::DEDUP_NODE, proto::DEDUP_JOB}) {
    for (const int ep : {0, 8}) {
      if (mode == proto::DEDUP_JOB && ep == 0) continue;
      SCOPED_TRACE(std::string(DedupName(mode)) + " ep " + std::to_string(ep));
      PlanOptions o;
      o.tp = 2;
      o.dp = 4;
      o.ep = ep;
      o.locations = Nodes(2, 4);
      o.dedup = proto::DEDUP_NONE;
      o.dedup_step_bytes = 16 << 10;
      Result<proto::LoadPlan> plain = BuildLoadPlan(ckpt, o);
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      ASSERT_TRUE(ApplyDedup({mode, o.dedup_step_bytes, false}, &*plain).ok());
      o.dedup = mode;
      Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
      ASSERT_TRUE(compact.ok()) << compact.status().ToString();
      // Two nodes of the same classes share a template without ep; with ep every node differs.
      EXPECT_EQ(compact->dedup_templates_size(), mode == proto::DEDUP_JOB || ep == 0 ? 1 : 2);
      Result<proto::LoadPlan> all = ExpandPlan(*compact);
      ASSERT_TRUE(all.ok()) << all.status().ToString();
      ASSERT_EQ(all->ranks_size(), plain->ranks_size());
      EXPECT_EQ(all->storage_bytes(), plain->storage_bytes());
      for (int r = 0; r < all->ranks_size(); ++r) {
        EXPECT_EQ(Wire(all->ranks(r)), Wire(plain->ranks(r))) << "rank " << r;
      }
    }
  }
}

// A view: the rank's own plan, its node's and group's places, and only the transfers with it.
TEST_F(PlanSetTest, AViewHoldsItsRankAndThePlacesOfItsNodeAndGroup) {
  const Checkpoint ckpt = Open("qwen3-moe-tiny", false);
  PlanOptions o;
  o.tp = 2;
  o.dp = 4;
  o.locations = Nodes(2, 4);
  o.dedup = proto::DEDUP_NODE;
  Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  Result<RankDirectory> dir = RankDirectory::Of(*compact);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  Result<proto::LoadPlan> all = ExpandPlan(*compact);
  ASSERT_TRUE(all.ok());
  const proto::LoadPlan header = PlanHeader(*compact);
  const proto::LoadPlan v = RankView(*compact, header, *dir, 5);
  EXPECT_TRUE(v.view());
  EXPECT_EQ(PlanWorld(v), 8u);
  ASSERT_EQ(v.ranks_size(), 4);  // node 1: ranks 4-7
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v.ranks(i).rank(), static_cast<std::uint32_t>(4 + i));
  ASSERT_NE(FindRank(v, 5), nullptr);
  EXPECT_EQ(Wire(*FindRank(v, 5)), Wire(all->ranks(5)));
  EXPECT_EQ(FindRank(v, 0), nullptr);
  const proto::RankPlan& stub = *FindRank(v, 6);
  EXPECT_EQ(stub.copies_size(), 0);
  EXPECT_EQ(stub.steps_size(), all->ranks(6).steps_size());
  int with_five = 0;
  for (int s = 0; s < stub.steps_size(); ++s) {
    EXPECT_EQ(stub.steps(s).reads_size(), 0);
    for (const auto& t : all->ranks(6).steps(s).sends()) with_five += t.peer() == 5;
    for (const auto& t : stub.steps(s).sends()) EXPECT_EQ(t.peer(), 5u);
    for (const auto& t : stub.steps(s).recvs()) EXPECT_EQ(t.peer(), 5u);
  }
  int sends = 0;
  for (const auto& st : stub.steps()) sends += st.sends_size();
  EXPECT_EQ(sends, with_five);
}

// ViewWriter's bytes parse as RankView's message, for every rank, with and without dedup and ep.
TEST_F(PlanSetTest, ViewWriterBytesAreTheViews) {
  const Checkpoint ckpt = Open("qwen3-moe-tiny", false);
  for (const proto::Dedup mode : {proto::DEDUP_NONE, proto::DEDUP_NODE, proto::DEDUP_JOB}) {
    for (const int ep : {0, 8}) {
      SCOPED_TRACE(std::string(DedupName(mode)) + " ep " + std::to_string(ep));
      PlanOptions o;
      o.tp = 2;
      o.dp = 4;
      o.ep = ep;
      o.locations = Nodes(2, 4);
      o.dedup = mode;
      o.dedup_step_bytes = 16 << 10;
      Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
      ASSERT_TRUE(compact.ok()) << compact.status().ToString();
      Result<RankDirectory> dir = RankDirectory::Of(*compact);
      ASSERT_TRUE(dir.ok());
      const proto::LoadPlan header = PlanHeader(*compact);
      const ViewWriter writer(*compact, *dir);
      for (std::uint32_t r = 0; r < 8; ++r) {
        proto::LoadPlan parsed;
        ASSERT_TRUE(parsed.ParseFromString(writer.View(r))) << "rank " << r;
        EXPECT_EQ(Wire(parsed), Wire(RankView(*compact, header, *dir, r))) << "rank " << r;
      }
    }
  }
}

// A rank's view of a packed checkpoint carries exactly the packed tensors its copies read, against
// a reference that tests every row of every copy of the rank against every tensor's logical bytes:
// under tp (every rank reads a slice of most tensors) and ep (a rank reads its experts alone), with
// and without dedup. The views together carry every tensor some rank reads.
TEST_F(PlanSetTest, AViewCarriesThePackedTensorsItsCopiesRead) {
  const Checkpoint original = Open("qwen3-moe-tiny", false);
  hoist::testing::ScratchDir out{"hoist-view-packed"};
  tools::PackOptions po;
  po.model_dir = original.dir;
  po.out_dir = out.path();
  po.tp_multiple = 4;
  po.threads = 2;
  ASSERT_TRUE(tools::PackCheckpoint(po).ok());
  Result<Checkpoint> ckpt = OpenCheckpoint(out.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const auto reads = [](const proto::RankPlan& rp, const proto::PackedTensor& t) {
    for (const proto::Copy& c : rp.copies()) {
      for (std::uint64_t r = 0; c.file() == t.file() && r < c.rows() && c.width() > 0; ++r) {
        const std::uint64_t lo = c.src_offset() + r * c.src_pitch(), hi = lo + c.width();
        if (lo < t.offset() + t.bytes() && t.offset() < hi) return true;
      }
    }
    return false;
  };
  for (const auto& [tp, ep, dedup] :
       {std::tuple{4, 0, proto::DEDUP_NONE}, std::tuple{1, 4, proto::DEDUP_NONE},
        std::tuple{2, 4, proto::DEDUP_NODE}}) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " ep " + std::to_string(ep));
    PlanOptions o;
    o.tp = tp;
    o.ep = ep;
    o.dp = ep > 0 ? 1 : 2;
    o.dedup = dedup;
    Result<proto::LoadPlan> compact = BuildCompactPlan(*ckpt, o);
    ASSERT_TRUE(compact.ok()) << compact.status().ToString();
    ASSERT_GT(compact->packed_size(), 0);
    Result<RankDirectory> dir = RankDirectory::Of(*compact);
    ASSERT_TRUE(dir.ok());
    const ViewWriter writer(*compact, *dir);
    std::set<std::string> carried, needed;
    for (std::uint32_t r = 0; r < dir->world(); ++r) {
      proto::LoadPlan view;
      ASSERT_TRUE(view.ParseFromString(writer.View(r))) << "rank " << r;
      const proto::RankPlan* own = FindRank(view, r);
      ASSERT_NE(own, nullptr);
      std::vector<std::string> got, want;
      for (const proto::PackedTensor& t : view.packed()) got.push_back(t.name());
      for (const proto::PackedTensor& t : compact->packed()) {
        if (reads(*own, t)) want.push_back(t.name());
      }
      EXPECT_EQ(got, want) << "rank " << r;
      if (ep > 0) {
        EXPECT_LT(got.size(), static_cast<std::size_t>(compact->packed_size()));
      }
      carried.insert(got.begin(), got.end());
      needed.insert(want.begin(), want.end());
    }
    EXPECT_EQ(carried, needed);
  }
}

TEST_F(PlanSetTest, AnInconsistentCompactPlanIsCorruptNamingTheField) {
  const Checkpoint ckpt = Open("qwen3-tiny", false);
  PlanOptions o;
  o.tp = 2;
  o.dp = 2;
  o.dedup = proto::DEDUP_NONE;
  Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
  ASSERT_TRUE(compact.ok());
  proto::LoadPlan bad = *compact;
  bad.mutable_topology()->set_world(3);
  Result<RankDirectory> d = RankDirectory::Of(bad);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kCorrupt);
  EXPECT_NE(d.status().message().find("world of 3"), std::string::npos) << d.status().message();
  bad = *compact;
  bad.mutable_placement()->add_node(0);
  bad.mutable_placement()->add_gpu(0);
  d = RankDirectory::Of(bad);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("placement"), std::string::npos) << d.status().message();
  EXPECT_FALSE(ExpandPlan(bad).ok());
}

// A plan without what names the world: its topology and its total over all ranks.
std::string WithoutWorld(proto::LoadPlan p) {
  p.clear_topology();
  p.clear_storage_bytes();
  p.clear_dedup_reason();  // names the node count
  return p.SerializeAsString();
}

// Compact plans of `ckpt` at tp 8 x dp 32 and x dp 128 on nodes of 8, with their directories.
void PlanTp8(const Checkpoint& ckpt, proto::Dedup dedup, std::vector<proto::LoadPlan>* plans,
             std::vector<RankDirectory>* dirs) {
  for (const int dp : {32, 128}) {
    PlanOptions o;
    o.tp = 8;
    o.dp = dp;
    o.locations = Nodes(dp, 8);
    o.dedup = dedup;
    Result<proto::LoadPlan> p = BuildCompactPlan(ckpt, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Result<RankDirectory> d = RankDirectory::Of(*p);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    plans->push_back(std::move(p).value());
    dirs->push_back(std::move(d).value());
  }
}

// Issue 41: DeepSeek-V3-671B (FP8, 90,427 tensors, data as sparse holes) at tp 8: the plan at
// world 1024 is the plan at world 256 (dp is not in it), and rank r's view at world 1024, on
// nodes of 8 GPUs, is its view at world 256.
TEST_F(PlanSetTest, DeepSeekV3At1024RanksGrowsWithClassesNotTheWorld) {
  const Checkpoint ckpt = Open("deepseek-v3-671b", true);
  EXPECT_EQ(ckpt.files.size(), 158u);
  std::vector<proto::LoadPlan> plans;
  std::vector<RankDirectory> dirs;
  PlanTp8(ckpt, proto::DEDUP_AUTO, &plans, &dirs);
  ASSERT_EQ(plans.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(plans[i].ranks_size(), 8);
    EXPECT_EQ(plans[i].topology().world(), i == 0 ? 256u : 1024u);
  }
  // The placement is the topology's (a node and gpu per rank): the rest is equal byte for byte.
  proto::LoadPlan a = plans[0], b = plans[1];
  a.clear_placement();
  b.clear_placement();
  EXPECT_TRUE(WithoutWorld(a) == WithoutWorld(b)) << "the plans at world 256 and 1024 differ";
  EXPECT_EQ(a.storage_bytes() * 4, b.storage_bytes());
  for (const std::uint32_t r : {0u, 9u, 255u}) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const proto::LoadPlan v256 = RankView(plans[0], PlanHeader(plans[0]), dirs[0], r);
    const proto::LoadPlan v1024 = RankView(plans[1], PlanHeader(plans[1]), dirs[1], r);
    EXPECT_EQ(v256.ranks_size(), 8);
    EXPECT_TRUE(WithoutWorld(v256) == WithoutWorld(v1024)) << "the views differ";
    EXPECT_LT(v1024.ByteSizeLong(), plans[1].ByteSizeLong());
  }
  // The last rank of the larger world: the same class plan as its tp rank's first replica.
  const proto::LoadPlan last = RankView(plans[1], PlanHeader(plans[1]), dirs[1], 1023);
  ASSERT_NE(FindRank(last, 1023), nullptr);
  EXPECT_EQ(FindRank(last, 1023)->dp_rank(), 127u);
  EXPECT_EQ(FindRank(last, 1023)->copies_size(), plans[1].ranks(7).copies_size());
}

// Issue 41 item 3: the same shape under --dedup job. The plan holds one class template (a member
// per class) whatever the world; a rank's view (its class plan, its class's member, its node's
// places) is the same at world 256 and 1024 but for its place's few bytes, and expands to an
// exchange that tiles its arena.
TEST_F(PlanSetTest, DeepSeekV3JobDedupAt1024RanksGrowsWithClassesNotTheWorld) {
  const Checkpoint ckpt = Open("deepseek-v3-671b", true);
  std::vector<proto::LoadPlan> plans;
  std::vector<RankDirectory> dirs;
  PlanTp8(ckpt, proto::DEDUP_JOB, &plans, &dirs);
  ASSERT_EQ(plans.size(), 2u);
  for (const proto::LoadPlan& p : plans) {
    ASSERT_EQ(p.dedup_templates_size(), 1);
    EXPECT_EQ(p.dedup_templates(0).members_size(), 8);
  }
  // K depends on the replicas (about 8 chunks each): the rest is equal byte for byte.
  proto::LoadPlan a = plans[0], b = plans[1];
  for (proto::LoadPlan* p : {&a, &b}) {
    p->clear_placement();
    p->mutable_job()->clear_chunk_bytes();
  }
  EXPECT_TRUE(WithoutWorld(a) == WithoutWorld(b)) << "the plans at world 256 and 1024 differ";
  EXPECT_EQ(a.storage_bytes(), b.storage_bytes()) << "each byte read once per job";
  EXPECT_LE(plans[1].job().chunk_bytes(), plans[0].job().chunk_bytes());
  for (const std::uint32_t r : {0u, 9u, 255u}) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::size_t v256 = ViewWriter(plans[0], dirs[0]).View(r).size();
    const std::size_t v1024 = ViewWriter(plans[1], dirs[1]).View(r).size();
    EXPECT_LE(std::max(v256, v1024) - std::min(v256, v1024), 16u);
    EXPECT_LT(v1024, plans[1].ByteSizeLong() / 4);
  }
  // The last rank of the larger world expands its view into an exchange the rank accepts
  // (reads, receives and fills tile its arena; sends lie in its reads).
  proto::LoadPlan last;
  ASSERT_TRUE(last.ParseFromString(ViewWriter(plans[1], dirs[1]).View(1023)));
  EXPECT_EQ(last.ranks_size(), 8);
  ASSERT_TRUE(ExpandJobView(&last, 1023).ok());
  const proto::RankPlan* mine = FindRank(last, 1023);
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(mine->steps_size(), static_cast<int>(plans[1].exchange_steps()));
  const Status s = rank::ValidateExchange(last, *mine, rank::GroupOf(last, 1023));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(mine->storage_bytes(), JobFigures(plans[1], dirs[1])[1023].storage_bytes);
}

}  // namespace
}  // namespace hoist::planner
