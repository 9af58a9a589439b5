// What `--dedup auto` measures across hosts (coordinator/link_probe.h): the storage verdict of a
// checkpoint just written (in the page cache) and the test hook's rate; the link probe between
// two in-memory ranks (each on its own thread), and the job's rates from the hellos: only other
// hosts' first ranks are probed, the slowest storage and link govern.
#include "coordinator/link_probe.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::coordinator {
namespace {

// Ranks of one process exchanging messages through shared queues (never blocking).
struct Mailbox {
  std::mutex mu;
  std::map<std::tuple<int, int, int>, std::deque<std::string>> queues;  // (to, from, channel)
};

class MemComm final : public Comm {
 public:
  MemComm(Mailbox& box, int rank, int size, int node)
      : box_(box), rank_(rank), size_(size), node_(node) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node() const override { return node_; }
  int nodes() const override { return 2; }
  int local_rank() const override { return 0; }
  std::string host() const override { return "host-" + std::to_string(node_); }
  const void* mpi_handle() const override { return nullptr; }
  Status Send(int to, Channel channel, std::string data) override {
    std::lock_guard lock(box_.mu);
    box_.queues[{to, rank_, static_cast<int>(channel)}].push_back(std::move(data));
    ++sent_;
    return Status::Ok();
  }
  Result<std::optional<Message>> TryRecv(int from, Channel channel) override {
    std::lock_guard lock(box_.mu);
    auto& q = box_.queues[{rank_, from, static_cast<int>(channel)}];
    if (q.empty()) return std::optional<Message>();
    Message m{from, std::move(q.front())};
    q.pop_front();
    return std::optional<Message>(std::move(m));
  }
  [[noreturn]] void Abort(int) override { std::abort(); }
  int sent() const { return sent_; }

 private:
  Mailbox& box_;
  int rank_, size_, node_;
  int sent_ = 0;
};

proto::Hello HelloOf(int node, int local, bool cached, double gib_s) {
  proto::Hello h;
  h.set_node(node);
  h.set_local_rank(local);
  h.set_host("host-" + std::to_string(node));
  h.set_storage_cached(cached);
  h.set_storage_gib_s(gib_s);
  return h;
}

TEST(LinkProbeTest, ACheckpointJustWrittenIsInThePageCache) {
  testing::ScratchDir dir("link-probe");
  const std::string model = dir.Sub("model");
  ASSERT_EQ(std::system((testing::MkckptBin() + " --preset qwen3-tiny --out '" + model +
                         "' --seed 3 --threads 1 > /dev/null")
                            .c_str()),
            0);
  ::unsetenv("HOIST_TEST_STORAGE_GIB_S");
  const StorageRate r = MeasureStorage(model);
  EXPECT_TRUE(r.cached);
  EXPECT_EQ(r.gib_s, 0);
  // No checkpoint there (only a file named like a shard): nothing is measured.
  std::ofstream(dir.Sub("model.safetensors")) << std::string(1 << 20, 'x');
  const StorageRate none = MeasureStorage(dir.path());
  EXPECT_FALSE(none.cached);
  EXPECT_EQ(none.gib_s, 0);
#if HOIST_TEST_HOOKS
  ::setenv("HOIST_TEST_STORAGE_GIB_S", "0.25", 1);
  const StorageRate hooked = MeasureStorage(model);
  ::unsetenv("HOIST_TEST_STORAGE_GIB_S");
  EXPECT_FALSE(hooked.cached);
  EXPECT_DOUBLE_EQ(hooked.gib_s, 0.25);
#endif
}

// Rank 0 probes rank 1 (node 1's first rank), not rank 2 (node 1's second); the job's storage is
// the slowest uncached host's, its link the one measured.
TEST(LinkProbeTest, RankZeroProbesEachOtherHostsFirstRank) {
  Mailbox box;
  MemComm zero(box, 0, 3, 0), one(box, 1, 3, 1);
  const std::vector<proto::Hello> hellos = {HelloOf(0, 0, false, 1.5), HelloOf(1, 0, false, 0.5),
                                            HelloOf(1, 1, false, 0.01)};
  Status answered;
  std::thread leader([&] { answered = AnswerLinkProbe(one, 30); });
  Result<planner::HostRates> rates = MeasureHostRates(zero, hellos, 30);
  leader.join();
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  ASSERT_TRUE(answered.ok()) << answered.ToString();
  EXPECT_GT(rates->net_gib_s, 0);
  EXPECT_FALSE(rates->cached);
  EXPECT_DOUBLE_EQ(rates->storage_gib_s, 0.5);  // rank 2 is not a host's first rank
  EXPECT_TRUE(rates->measured());
  EXPECT_EQ(zero.sent(), 2);  // two probes to rank 1, none to rank 2
  EXPECT_EQ(one.sent(), 2);   // two acknowledgements
}

TEST(LinkProbeTest, EveryHostCachedMeansNoStorageRate) {
  Mailbox box;
  MemComm zero(box, 0, 2, 0), one(box, 1, 2, 1);
  std::thread leader([&] { (void)AnswerLinkProbe(one, 30); });
  Result<planner::HostRates> rates =
      MeasureHostRates(zero, {HelloOf(0, 0, true, 0), HelloOf(1, 0, true, 0)}, 30);
  leader.join();
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  EXPECT_TRUE(rates->cached);
  EXPECT_EQ(rates->storage_gib_s, 0);
  EXPECT_TRUE(rates->measured());
}

// A host's first rank that never answers fails the probe within the timeout, naming it.
TEST(LinkProbeTest, ASilentHostIsNamed) {
  Mailbox box;
  MemComm zero(box, 0, 2, 0);
  Result<double> r = ProbeLink(zero, 1, 0.2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAborted);
  EXPECT_NE(r.status().message().find("probing the network to rank 1"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace hoist::coordinator
