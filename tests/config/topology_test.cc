#include "config/topology.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::config {
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

// Refused with InvalidArgument and a message naming the file and what is wrong.
void ExpectRefused(const std::string& yaml, const std::string& message) {
  auto t = ParseTopology("t.yaml", yaml);
  ASSERT_FALSE(t.ok()) << yaml;
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find("t.yaml"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find(message), std::string::npos)
      << "want: " << message << "\ngot: " << t.status().message();
}

TEST(Topology, WrongTypesAndShapes) {
  ExpectRefused("tp: two\n", "line 1: key 'tp' must be a whole number, not 'two'");
  ExpectRefused("tp: 99999999999\n", "key 'tp' must be a whole number, not '99999999999'");
  ExpectRefused("verify: maybe\n", "key 'verify' must be true or false, not 'maybe'");
  ExpectRefused("peer_timeout_s: [1]\n", "key 'peer_timeout_s' must be a number, not a list");
  ExpectRefused("model: {a: 1}\n", "key 'model' must be a string, not a mapping");
  ExpectRefused("nodes: {a: 1}\n", "'nodes' must be a list");
  ExpectRefused("nodes: [{name: a}]\n", "'gpus' missing or empty in nodes[0]");
  ExpectRefused("nodes: [{name: a, gpus: [x]}]\n", "key 'gpus' must be a list of whole numbers");
  ExpectRefused("nodes: [{name: a, gpus: [0]}, {name: a, gpus: [1]}]\n",
                "node name 'a' appears twice");
  ExpectRefused("- just\n- a list\n", "top level must be a mapping");
  ExpectRefused("tp: [unterminated\n", "invalid YAML");
  ExpectRefused("allow_uids: [-3]\n", "allow_uids: -3 is not a uid");
}

// Numbers parse here and are range-checked where flags and file meet (job_spec_test.cc).
TEST(Topology, NumbersAreKeptForTheRangeCheck) {
  auto t = ParseTopology("t.yaml",
                         "tp: 0\nep: -2\nstaging: {threads: 1000000}\n"
                         "peer_timeout_s: .inf\nnodes: [{name: a, gpus: [-1]}]\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t->tp, 0);
  EXPECT_EQ(*t->ep, -2);
  EXPECT_EQ(*t->threads, 1000000);
  EXPECT_TRUE(std::isinf(*t->peer_timeout_s));
  EXPECT_EQ(t->nodes[0].gpus, std::vector<int>{-1});
}

TEST(Topology, KeysMustBeStrings) {
  ExpectRefused("tp: 2\n[1, 2]: 3\n", "line 2: a key is not a string");
  ExpectRefused("? {a: 1}\n: 2\n", "line 1: a key is not a string");
  ExpectRefused("staging: {[1]: 2}\n", "a key in 'staging' is not a string");
  ExpectRefused("nodes: [{{x: 1}: 2}]\n", "a key in nodes[0] is not a string");
}

TEST(Topology, DuplicateKeysAreRefused) {
  ExpectRefused("tp: 2\nread: auto\ntp: 4\n", "key 'tp' appears twice (lines 1 and 3)");
  ExpectRefused("staging: {slots: 2, slots: 3}\n", "key 'slots' in 'staging' appears twice");
  ExpectRefused("nodes: [{name: a, gpus: [0], gpus: [1]}]\n",
                "key 'gpus' in nodes[0] appears twice");
}

// Binary garbage and control bytes: an error, never an exception, and no raw control byte in
// the message.
TEST(Topology, GarbageIsAnErrorWithoutRawControlBytes) {
  const std::vector<std::string> inputs = {std::string("\x01\x02\xff\xfe: [\n", 7),
                                           std::string("tp: 2\n\x1b[31mred: 1\n"),
                                           std::string("\0\0\0\0", 4),
                                           "{{{{",
                                           "&a [*a]",
                                           "tp: !!binary AAAA\n",
                                           "? |\n  multi\n  line\n: 1\n"};
  for (const std::string& in : inputs) {
    Result<Topology> t = Topology();
    ASSERT_NO_THROW(t = ParseTopology("t.yaml", in));
    ASSERT_FALSE(t.ok()) << in;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    for (char c : t.status().message()) {
      EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n') << t.status().message();
    }
  }
  ExpectRefused(std::string("tp: 2\n\x1b[31mred: 1\n"), "unknown key '\\x1B[31mred'");
}

TEST(Topology, SharedGpuIsAllowed) {
  auto t = ParseTopology("t.yaml", "tp: 2\nnodes: [{name: one, gpus: [0, 0]}]\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(NodesWorld(*t), 2);
}

// A topology the user named but that cannot be read is their configuration error (exit 2).
TEST(Topology, MissingFileIsAConfigurationError) {
  auto t = LoadTopology("/nonexistent/hoist/topology.yaml");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("/nonexistent/hoist/topology.yaml: cannot open"),
            std::string::npos)
      << t.status().message();
}

TEST(Topology, OnlyRegularFilesOfAtMostOneMebibyteAreRead) {
  hoist::testing::ScratchDir dir("hoist-topo");
  const std::string fifo = dir.Sub("fifo.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto t = LoadTopology(fifo);  // returns at once: the FIFO has no writer and is not read
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos);
  t = LoadTopology(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos);
  const std::string big = dir.Sub("big.yaml");
  std::ofstream(big) << "# " << std::string(1 << 20, 'x') << "\ntp: 2\n";
  t = LoadTopology(big);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("more than the limit of 1048576"), std::string::npos)
      << t.status().message();
  const std::string ok = dir.Sub("ok.yaml");
  std::ofstream(ok) << "tp: 2\nstaging: {threads: 3}\n";
  t = LoadTopology(ok);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t->tp, 2);
  EXPECT_EQ(*t->threads, 3);
}

TEST(Topology, ShippedConfigsParse) {
  const std::string src = hoist::testing::SourceDir();
  for (const char* name : {"example-tp2.yaml", "one-gpu.yaml", "tp8-one-node.yaml",
                           "ep8-two-nodes.yaml", "tp2-ep4.yaml", "two-nodes-dedup.yaml"}) {
    auto t = LoadTopology(src + "/examples/topologies/" + name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_TRUE(t->warnings.empty()) << name << ": " << t->warnings.front();  // no old spelling
  }
}

}  // namespace
}  // namespace hoist::config
