// coordinator/hosts.h: the topology's nodes against the hosts the ranks run on.
#include "coordinator/hosts.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hoist::coordinator {
namespace {

using Hosts = std::vector<std::string>;

// Two ranks on each of `nodes` nodes, in order.
std::vector<planner::RankLocation> TwoEach(int nodes) {
  std::vector<planner::RankLocation> l;
  for (int n = 0; n < nodes; ++n) {
    for (std::uint32_t g = 0; g < 2; ++g) l.push_back({static_cast<std::uint32_t>(n), g});
  }
  return l;
}

TEST(TopologyHostsTest, NodesNamedAfterTheRanksHostsPass) {
  EXPECT_TRUE(
      CheckTopologyHosts({"gpu1", "gpu2"}, TwoEach(2), {"gpu1", "gpu1", "gpu2", "gpu2"}).ok());
  // Domain names on either side.
  EXPECT_TRUE(CheckTopologyHosts({"gpu1.cluster", "gpu2"}, TwoEach(2),
                                 {"gpu1", "gpu1", "gpu2.cluster", "gpu2.cluster"})
                  .ok());
}

TEST(TopologyHostsTest, ARankOnAnotherHostThanItsNodeIsRefusedNamingIt) {
  // mpirun --map-by node: ranks alternate between the hosts.
  const Status s =
      CheckTopologyHosts({"gpu1", "gpu2"}, TwoEach(2), {"gpu1", "gpu2", "gpu1", "gpu2"});
  ASSERT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1 runs on host gpu2, not on node 'gpu1'"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("The launcher placed gpu1: ranks 0, 2; gpu2: ranks 1, 3"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("the topology places gpu1: ranks 0-1; gpu2: ranks 2-3"),
            std::string::npos)
      << s.message();
  // The nodes listed in the other order.
  EXPECT_EQ(
      CheckTopologyHosts({"gpu2", "gpu1"}, TwoEach(2), {"gpu1", "gpu1", "gpu2", "gpu2"}).code(),
      Code::kInvalidArgument);
  // A host the topology does not name.
  EXPECT_EQ(
      CheckTopologyHosts({"gpu1", "gpu2"}, TwoEach(2), {"gpu1", "gpu1", "gpu3", "gpu3"}).code(),
      Code::kInvalidArgument);
}

TEST(TopologyHostsTest, LabelsOnOneHostAreSimulatedNodes) {
  EXPECT_TRUE(CheckTopologyHosts({"node-a", "node-b"}, TwoEach(2), Hosts(4, "ci")).ok());
}

TEST(TopologyHostsTest, LabelsAcrossHostsMustBeOneHostEach) {
  EXPECT_TRUE(CheckTopologyHosts({"node-a", "node-b"}, TwoEach(2), {"x", "x", "y", "y"}).ok());
  const Status spans = CheckTopologyHosts({"node-a", "node-b"}, TwoEach(2), {"x", "y", "x", "y"});
  ASSERT_EQ(spans.code(), Code::kInvalidArgument);
  EXPECT_NE(spans.message().find("node 'node-a' spans hosts x and y (rank 1)"), std::string::npos)
      << spans.message();
  const Status shared = CheckTopologyHosts({"node-a", "node-b", "node-c"}, TwoEach(3),
                                           {"x", "x", "x", "x", "y", "y"});
  ASSERT_EQ(shared.code(), Code::kInvalidArgument);
  EXPECT_NE(shared.message().find("host x runs ranks of nodes 'node-a' and 'node-b' (rank 2)"),
            std::string::npos)
      << shared.message();
}

TEST(TopologyHostsTest, NoNodesListChecksNothing) {
  EXPECT_TRUE(CheckTopologyHosts({}, {}, {"x", "y"}).ok());
}

}  // namespace
}  // namespace hoist::coordinator
