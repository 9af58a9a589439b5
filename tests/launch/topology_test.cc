#include "launch/topology.h"

#include <gtest/gtest.h>

#include "tests/test_paths.h"

namespace hoist::launch {
namespace {

TEST(Topology, ParsesEveryKey) {
  auto t = ParseTopology("t.yaml", R"(
model: /models/x
tp: 2
ep: 8
dp: 4
layout: hf
placement: round_robin
read: direct
device: host
verify: true
staging: {slots: 3, slot_mib: 16, threads: 5}
nodes:
  - {name: a, gpus: [0, 1, 2, 3]}
  - {name: b, gpus: [0, 1, 2, 3]}
)");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->model, "/models/x");
  EXPECT_EQ(*t->tp, 2);
  EXPECT_EQ(*t->ep, 8);
  EXPECT_EQ(*t->dp, 4);
  EXPECT_EQ(*t->layout, "hf");
  EXPECT_EQ(*t->placement, "round_robin");
  EXPECT_EQ(*t->read, "direct");
  EXPECT_EQ(*t->device, "host");
  EXPECT_TRUE(*t->verify);
  EXPECT_EQ(*t->slots, 3);
  EXPECT_EQ(*t->slot_mib, 16);
  EXPECT_EQ(*t->threads, 5);
  ASSERT_EQ(t->nodes.size(), 2u);
  EXPECT_EQ(t->nodes[1].name, "b");
  EXPECT_EQ(t->nodes[1].gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(NodesWorld(*t), 8);
}

TEST(Topology, AbsentKeysStayUnset) {
  auto t = ParseTopology("t.yaml", "tp: 4\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->tp, 4);
  EXPECT_FALSE(t->ep.has_value());
  EXPECT_FALSE(t->layout.has_value());
  EXPECT_EQ(NodesWorld(*t), 0);
}

TEST(Topology, UnknownKeyIsNamed) {
  auto t = ParseTopology("t.yaml", "tp: 2\ntensor_parallel: 4\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown key 'tensor_parallel'"), std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("t.yaml"), std::string::npos);
}

TEST(Topology, UnknownNestedKeyIsNamed) {
  auto t = ParseTopology("t.yaml", "staging: {slots: 2, ring: 3}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'ring' in 'staging'"), std::string::npos);
  t = ParseTopology("t.yaml", "nodes: [{name: a, gpus: [0], host: x}]\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'host' in nodes[0]"), std::string::npos);
}

TEST(Topology, WrongTypesAndValues) {
  EXPECT_FALSE(ParseTopology("t.yaml", "tp: two\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "tp: 0\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "ep: -2\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "nodes: {a: 1}\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "nodes: [{name: a}]\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "nodes: [{name: a, gpus: [-1]}]\n").ok());
  EXPECT_FALSE(
      ParseTopology("t.yaml", "nodes: [{name: a, gpus: [0]}, {name: a, gpus: [1]}]\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "- just\n- a list\n").ok());
  EXPECT_FALSE(ParseTopology("t.yaml", "tp: [unterminated\n").ok());
}

TEST(Topology, SharedGpuIsAllowed) {
  auto t = ParseTopology("t.yaml", "tp: 2\nnodes: [{name: one, gpus: [0, 0]}]\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(NodesWorld(*t), 2);
}

TEST(Topology, MissingFileIsNotFound) {
  auto t = LoadTopology("/nonexistent/hoist/topology.yaml");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kNotFound);
}

TEST(Topology, ShippedConfigsParse) {
  const std::string src = hoist::testing::SourceDir();
  for (const char* name : {"example-tp2.yaml", "one-gpu.yaml", "tp8-one-node.yaml",
                           "ep8-two-nodes.yaml", "tp2-ep4.yaml"}) {
    auto t = LoadTopology(src + "/configs/" + name);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().ToString();
  }
}

}  // namespace
}  // namespace hoist::launch
