// The dedup exchange inside one process: four LoadRank calls on four threads, each with a Peer
// written here (an in-process stand-in for MPI/NCCL: per-pair FIFOs and an agreement barrier),
// over a real qwen3-moe-tiny checkpoint on disk and the host device. Checks: every rank's arena
// equals the arena of a plain (no dedup) load, the reports carry storage/sent/received bytes and
// the `peer` phase; a read fault on one rank during its exchange step stops its group at the
// agreement (its error names the file, the others name it); a rank whose transport fails
// mid-exchange makes the others time out (bounded) naming the pending transfers; a rank run
// without a peer reads all of its copies itself.
#include "rank/exchange.h"

#include <gtest/gtest.h>

#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "rank/worker.h"
#include "tests/transport/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::rank {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

// Shared state of an in-process peer group.
struct Hub {
  explicit Hub(int n) : size(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<Bytes>> queues;  // (from, to) -> messages in order
  int generation = 0, arrived = 0, acc = INT_MAX;
  std::map<int, int> results;  // generation -> agreed value
};

class InProcPeer final : public transport::Peer {
 public:
  InProcPeer(Hub* hub, int self, bool claim_gpu) : hub_(hub) {
    for (int r = 0; r < hub->size; ++r) group_.ranks.push_back(r);
    group_.self = self;
    caps_.device_memory = claim_gpu;
  }
  std::string Name() const override { return "inproc"; }
  const transport::PeerCaps& Caps() const override { return caps_; }
  const transport::PeerGroup& Group() const override { return group_; }

  Result<int> AllOk(bool ok, double timeout_s) override {
    if (aborted_) return Status::Aborted("inproc: aborted");
    std::unique_lock lock(hub_->mu);
    const int gen = hub_->generation;
    hub_->acc = std::min(hub_->acc, ok ? INT_MAX : group_.self);
    if (++hub_->arrived == hub_->size) {
      hub_->results[gen] = hub_->acc;
      hub_->acc = INT_MAX;
      hub_->arrived = 0;
      ++hub_->generation;
      hub_->cv.notify_all();
    } else if (!hub_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                  [&] { return hub_->generation != gen; })) {
      aborted_ = true;
      return Status::Aborted(std::string("inproc: agreement timed out (") +
                             transport::kPeerFailureNote + ")");
    }
    const int v = hub_->results[gen];
    return v == INT_MAX ? -1 : v;
  }
  Status GroupBegin() override { return aborted_ ? Status::Aborted("inproc: aborted") : Status(); }
  Status Send(int peer, const transport::DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    const auto* p = static_cast<const std::uint8_t*>(arena.ptr) + offset;
    queued_.push_back({true, peer, nullptr, Bytes(p, p + bytes)});
    return Status::Ok();
  }
  Status Recv(int peer, const transport::DeviceBuffer& arena, std::uint64_t offset,
              std::uint64_t bytes) override {
    queued_.push_back({false, peer, static_cast<std::uint8_t*>(arena.ptr) + offset, Bytes(bytes)});
    return Status::Ok();
  }
  Status GroupEnd() override {
    std::lock_guard lock(hub_->mu);
    for (Op& op : queued_) {
      if (op.send) {
        sent_ += op.data.size();
        hub_->queues[{group_.self, op.peer}].push_back(std::move(op.data));
      } else {
        recvs_.push_back(std::move(op));
      }
    }
    queued_.clear();
    hub_->cv.notify_all();
    return Status::Ok();
  }
  Result<bool> Test() override {
    if (aborted_) return Status::Aborted("inproc: aborted");
    std::lock_guard lock(hub_->mu);
    return Progress();
  }
  Status Wait(double timeout_s) override {
    if (aborted_) return Status::Aborted("inproc: aborted");
    std::unique_lock lock(hub_->mu);
    if (hub_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                          [&] { return Progress(); })) {
      return Status::Ok();
    }
    aborted_ = true;
    return Status::Aborted("inproc: timed out with " + std::to_string(recvs_.size()) +
                           " receives pending, first from rank " +
                           std::to_string(recvs_.front().peer) + " (" +
                           transport::kPeerFailureNote + ")");
  }
  void Abort() override { aborted_ = true; }
  std::uint64_t bytes_sent() const override { return sent_; }
  std::uint64_t bytes_received() const override { return received_; }

 private:
  struct Op {
    bool send;
    int peer;
    std::uint8_t* dst;
    Bytes data;
  };
  // Completes receives whose message arrived, in order per sender. Caller holds hub_->mu.
  bool Progress() {
    for (auto it = recvs_.begin(); it != recvs_.end();) {
      auto& q = hub_->queues[{it->peer, group_.self}];
      bool earlier_from_same = false;
      for (auto jt = recvs_.begin(); jt != it; ++jt) earlier_from_same |= jt->peer == it->peer;
      if (q.empty() || earlier_from_same) {
        ++it;
        continue;
      }
      EXPECT_EQ(q.front().size(), it->data.size()) << "mispaired transfer";
      std::memcpy(it->dst, q.front().data(), std::min(q.front().size(), it->data.size()));
      received_ += it->data.size();
      q.pop_front();
      it = recvs_.erase(it);
    }
    return recvs_.empty();
  }

  Hub* hub_;
  transport::PeerGroup group_;
  transport::PeerCaps caps_;
  bool aborted_ = false;
  std::vector<Op> queued_;
  std::vector<Op> recvs_;
  std::uint64_t sent_ = 0, received_ = 0;
};

class ExchangeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testtransport::ScratchDir();
    tools::MkckptOptions o;
    o.preset = "qwen3-moe-tiny";
    o.out_dir = dir_->Sub("moe");
    o.seed = 7;
    o.shard_size = 200000;
    o.threads = 2;
    ASSERT_TRUE(tools::MakeCheckpoint(o).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static proto::LoadPlan Plan(proto::Dedup dedup) {
    Result<planner::Checkpoint> ckpt = planner::OpenCheckpoint(dir_->Sub("moe"));
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    planner::PlanOptions o;
    o.tp = 1;
    o.ep = 4;
    o.dedup = dedup;
    o.dedup_step_bytes = 32 << 10;  // several steps
    Result<proto::LoadPlan> p = planner::BuildLoadPlan(*ckpt, o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return *p;
  }

  static LoadOptions Small() {
    LoadOptions o;
    o.read_mode = transport::ReadMode::kBuffered;
    o.device = DeviceKind::kHost;
    o.slots = 3;
    o.slot_bytes = 16 << 10;
    o.threads = 2;
    o.bind_numa = false;
    o.verify = true;
    o.close_in_background = false;
    return o;
  }

  static Bytes Arena(LoadedRank& lr) {
    Bytes out(lr.arena.bytes);
    EXPECT_TRUE(lr.device->CopyToHost(out.data(), lr.arena.ptr, out.size()).ok());
    return out;
  }

  // Loads every rank of `plan` on its own thread; `tweak` adjusts a rank's options.
  static std::vector<Result<LoadedRank>> LoadAll(
      const proto::LoadPlan& plan, const std::function<void(int, LoadOptions*)>& tweak,
      int gpu_claim_rank = -1) {
    const int n = plan.ranks_size();
    Hub hub(n);
    std::vector<std::unique_ptr<InProcPeer>> peers;
    for (int r = 0; r < n; ++r) {
      peers.push_back(std::make_unique<InProcPeer>(&hub, r, r == gpu_claim_rank));
    }
    std::vector<Result<LoadedRank>> out;
    for (int r = 0; r < n; ++r) out.emplace_back(Status::Internal("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        LoadOptions o = Small();
        o.exchange.peer = peers[r].get();
        o.exchange.timeout_s = 5;
        if (tweak) tweak(r, &o);
        out[r] = LoadRank(plan, static_cast<std::uint32_t>(r), o);
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  static testtransport::ScratchDir* dir_;
};

testtransport::ScratchDir* ExchangeTest::dir_ = nullptr;

TEST_F(ExchangeTest, ArenasEqualAPlainLoadAndReportsAddUp) {
  const proto::LoadPlan plain = Plan(proto::DEDUP_NONE);
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  ASSERT_GT(dd.ranks(0).steps_size(), 1);
  auto results =
      testtransport::WithWatchdog([&] { return LoadAll(dd, nullptr); }, std::chrono::seconds(60));
  std::uint64_t sent = 0, received = 0, storage = 0;
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
    Result<LoadedRank> want = LoadRank(plain, static_cast<std::uint32_t>(r), Small());
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_TRUE(Arena(*results[r]) == Arena(*want)) << "rank " << r;
    const proto::RankReport& rep = results[r]->report;
    EXPECT_TRUE(rep.verified());
    EXPECT_EQ(rep.peer(), "inproc");
    EXPECT_EQ(rep.bytes_read_from_storage(), dd.ranks(r).storage_bytes());
    EXPECT_EQ(rep.bytes_read(), rep.bytes_read_from_storage());
    EXPECT_EQ(rep.bytes_read_from_storage() + rep.bytes_received(), plain.ranks(r).storage_bytes());
    bool has_peer_phase = false;
    for (const auto& p : rep.phases()) {
      if (p.name() != "peer") continue;
      has_peer_phase = true;
      EXPECT_EQ(p.bytes(), rep.bytes_sent() + rep.bytes_received());
    }
    EXPECT_TRUE(has_peer_phase);
    sent += rep.bytes_sent();
    received += rep.bytes_received();
    storage += rep.bytes_read_from_storage();
  }
  EXPECT_EQ(sent, received);
  EXPECT_GT(sent, 0u);
  EXPECT_EQ(storage, dd.storage_bytes());
  EXPECT_LT(storage, plain.storage_bytes());
}

TEST_F(ExchangeTest, AReadFaultInAStepStopsTheGroupAtTheAgreement) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  int victim = -1;
  for (int r = 0; r < 4 && victim < 0; ++r) {
    if (dd.ranks(r).steps(0).reads_size() > 0) victim = r;
  }
  ASSERT_GE(victim, 0);
  auto results = testtransport::WithWatchdog(
      [&] {
        return LoadAll(dd, [victim](int r, LoadOptions* o) {
          if (r != victim) return;
          o->wrap_source = [](std::unique_ptr<transport::Source> s) {
            transport::FaultSpec f;
            f.eio_after = 0;
            return transport::WrapFaulty(std::move(s), f);
          };
        });
      },
      std::chrono::seconds(60));
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    const std::string msg = results[r].status().ToString();
    if (r == victim) {
      EXPECT_NE(msg.find(".safetensors"), std::string::npos) << msg;
      EXPECT_FALSE(CausedByPeer(msg)) << msg;
    } else {
      EXPECT_NE(msg.find("because peer rank " + std::to_string(victim) + " could not read"),
                std::string::npos)
          << msg;
      EXPECT_TRUE(CausedByPeer(msg)) << msg;
    }
  }
}

TEST_F(ExchangeTest, ATransportFailureMidExchangeTimesOutItsPeers) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  const auto start = Clock::now();
  auto results = testtransport::WithWatchdog(
      [&] {
        return LoadAll(dd, [](int r, LoadOptions* o) {
          o->exchange.timeout_s = 1;
          if (r == 1) o->exchange.fault = PeerFault::kError;
        });
      },
      std::chrono::seconds(60));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30);
  ASSERT_FALSE(results[1].ok());
  EXPECT_NE(results[1].status().message().find("injected peer failure"), std::string::npos);
  int timed_out = 0;
  for (int r = 0; r < 4; ++r) {
    if (r == 1 || results[r].ok()) continue;
    const std::string msg = results[r].status().ToString();
    EXPECT_TRUE(CausedByPeer(msg)) << msg;
    ++timed_out;
  }
  EXPECT_GT(timed_out, 0) << "someone waits for rank 1's sends";
}

TEST_F(ExchangeTest, WithoutAPeerARankReadsAllItsCopies) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_NODE);
  const proto::LoadPlan plain = Plan(proto::DEDUP_NONE);
  Result<LoadedRank> got = LoadRank(dd, 2, Small());
  Result<LoadedRank> want = LoadRank(plain, 2, Small());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  EXPECT_TRUE(Arena(*got) == Arena(*want));
  EXPECT_EQ(got->report.bytes_read_from_storage(), plain.ranks(2).storage_bytes());
  EXPECT_EQ(got->report.bytes_received(), 0u);
  EXPECT_TRUE(got->report.peer().empty());
}

TEST_F(ExchangeTest, APeerForTheWrongMemoryIsRefusedBeforeAnythingMoves) {
  // Rank 0's peer claims to move GPU memory while its arena is host memory: it refuses at once
  // and its group stops at the first agreement instead of waiting.
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  auto results = testtransport::WithWatchdog(
      [&] { return LoadAll(dd, nullptr, /*gpu_claim_rank=*/0); }, std::chrono::seconds(60));
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].status().code(), Code::kFailedPrecondition);
  EXPECT_NE(results[0].status().message().find("moves GPU memory but the arena is on host"),
            std::string::npos)
      << results[0].status().ToString();
  for (int r = 1; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_TRUE(CausedByPeer(results[r].status().message())) << results[r].status().ToString();
  }
}

}  // namespace
}  // namespace hoist::rank
