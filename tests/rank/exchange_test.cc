// The dedup exchange inside one process: four RankJobs (each a LoadRank on its own worker
// thread), each with a Peer written here (an in-process stand-in for MPI/NCCL: per-pair FIFOs),
// all polled by the test's thread as the coordinator's driver would, over a real qwen3-moe-tiny
// checkpoint on disk and the host device. The test plays the control plane: when a rank fails it
// cancels the others, as rank 0's stop order does. Checks: every rank's arena equals the arena of
// a plain (no dedup) load, the reports carry storage/sent/received bytes and the `peer` phase; a
// read fault on one rank stops the group (its error names the file, the others name it); a rank
// whose transport fails mid-exchange makes the others time out (bounded) naming the pending
// transfers; a stalled peer set-up times out; a rank run without a peer reads all of its copies
// itself.
#include "rank/exchange.h"

#include <gtest/gtest.h>

#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "planner/checkpoint.h"
#include "planner/plan_builder.h"
#include "rank/rank_job.h"
#include "rank/worker.h"
#include "tests/transport/test_util.h"
#include "tools/mkckpt.h"

namespace hoist::rank {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

// Whether an error tells its reader that another rank caused it (transport::kPeerFailureNote).
// The message is for people; blame reads RankJob::peer_timed_out and the report's stopped_by.
bool CausedByPeer(std::string_view error) {
  return error.find(transport::kPeerFailureNote) != std::string_view::npos;
}

// Shared state of an in-process peer group.
struct Hub {
  explicit Hub(int n) : size(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<Bytes>> queues;  // (from, to) -> messages in order
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

  Result<bool> Ready() override {
    if (aborted_) return Status::Aborted("inproc: aborted");
    if (never_ready_) {
      aborted_ = true;
      return Status::Aborted(std::string("inproc: set-up failed (") + transport::kPeerFailureNote +
                             ")");
    }
    return true;
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
    if (aborted_) return Status::Aborted("inproc: aborted");
    std::lock_guard lock(hub_->mu);
    if (!queued_.empty()) ++issued_;
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
    const bool done = Progress();
    if (done) completed_ = issued_;
    return done;
  }
  std::uint64_t groups_issued() const override { return issued_; }
  std::uint64_t groups_completed() const override { return completed_; }
  std::string PendingText() const override {
    std::lock_guard lock(hub_->mu);
    if (recvs_.empty()) return "";
    return std::to_string(recvs_.size()) + " receives, first from rank " +
           std::to_string(recvs_.front().peer);
  }
  void FailSetUp() { never_ready_ = true; }
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
  bool never_ready_ = false;
  std::uint64_t issued_ = 0, completed_ = 0;
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
    o.settings.pipeline.mode = transport::ReadMode::kBuffered;
    o.settings.device = DeviceKind::kHost;
    o.settings.pipeline.slots = 3;
    o.settings.pipeline.slot_bytes = 16 << 10;
    o.settings.pipeline.threads = 2;
    o.settings.bind_numa = false;
    o.settings.verify = true;
    o.settings.close_in_background = false;
    return o;
  }

  static Bytes Arena(LoadedRank& lr) {
    Bytes out(lr.arena.bytes);
    EXPECT_TRUE(lr.device->CopyToHost(out.data(), lr.arena.ptr, out.size()).ok());
    return out;
  }

  struct Tweak {
    std::function<void(int, LoadOptions*)> options;
    // Wraps a rank's peer (fault injection); gets the in-process peer to adjust.
    std::function<std::unique_ptr<transport::Peer>(int, std::unique_ptr<InProcPeer>)> peer;
    double timeout_s = 5;
  };

  // Loads every rank of `plan` as a RankJob, polling them all from this thread; when one fails,
  // cancels the others as the coordinator's stop order would. `timed_out` (optional) gets each
  // job's peer_timed_out().
  static std::vector<Result<LoadedRank>> LoadAll(const proto::LoadPlan& plan, const Tweak& tweak,
                                                 int gpu_claim_rank = -1,
                                                 std::vector<bool>* timed_out = nullptr) {
    const int n = plan.ranks_size();
    if (timed_out != nullptr) timed_out->assign(n, false);
    Hub hub(n);
    std::vector<std::unique_ptr<RankJob>> jobs;
    for (int r = 0; r < n; ++r) {
      auto peer = std::make_unique<InProcPeer>(&hub, r, r == gpu_claim_rank);
      std::unique_ptr<transport::Peer> p =
          tweak.peer ? tweak.peer(r, std::move(peer)) : std::move(peer);
      LoadOptions o = Small();
      if (tweak.options) tweak.options(r, &o);
      ExchangeOptions xo;
      xo.timeout_s = tweak.timeout_s;
      jobs.push_back(
          RankJob::Start(plan, static_cast<std::uint32_t>(r), o, std::move(p), xo, Clock::now()));
    }
    std::vector<std::optional<Result<LoadedRank>>> out(n);
    for (int left = n; left > 0;) {
      for (int r = 0; r < n; ++r) {
        if (out[r]) continue;
        jobs[r]->Poll();
        if (!jobs[r]->finished()) continue;
        out[r] = jobs[r]->Finish();
        if (timed_out != nullptr) (*timed_out)[r] = jobs[r]->peer_timed_out();
        --left;
        if (out[r]->ok()) continue;
        for (int k = 0; k < n; ++k) {
          if (!out[k]) {
            jobs[k]->Cancel(Status::Aborted("stopped because rank " + std::to_string(r) +
                                            " failed (" + transport::kPeerFailureNote + ")"));
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    std::vector<Result<LoadedRank>> results;
    for (auto& o : out) results.push_back(std::move(*o));
    return results;
  }

  static testtransport::ScratchDir* dir_;
};

testtransport::ScratchDir* ExchangeTest::dir_ = nullptr;

TEST_F(ExchangeTest, ArenasEqualAPlainLoadAndReportsAddUp) {
  const proto::LoadPlan plain = Plan(proto::DEDUP_NONE);
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  ASSERT_GT(dd.ranks(0).steps_size(), 1);
  auto results =
      testtransport::WithWatchdog([&] { return LoadAll(dd, {}); }, std::chrono::seconds(60));
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

TEST_F(ExchangeTest, AReadFaultInAStepStopsTheGroup) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  int victim = -1;
  for (int r = 0; r < 4 && victim < 0; ++r) {
    if (dd.ranks(r).steps(0).reads_size() > 0) victim = r;
  }
  ASSERT_GE(victim, 0);
  auto results = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.options = [victim](int r, LoadOptions* o) {
          if (r != victim) return;
          o->wiring.wrap_source = [](std::unique_ptr<transport::Source> s) {
            transport::FaultSpec f;
            f.eio_after = 0;
            return transport::WrapFaulty(std::move(s), f);
          };
        };
        return LoadAll(dd, t);
      },
      std::chrono::seconds(60));
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    const std::string msg = results[r].status().ToString();
    if (r == victim) {
      EXPECT_NE(msg.find(".safetensors"), std::string::npos) << msg;
      EXPECT_FALSE(CausedByPeer(msg)) << msg;
    } else {
      EXPECT_NE(msg.find("stopped because rank " + std::to_string(victim) + " failed"),
                std::string::npos)
          << msg;
      EXPECT_TRUE(CausedByPeer(msg)) << msg;
    }
  }
}

TEST_F(ExchangeTest, ATransportFailureMidExchangeStopsItsPeers) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  const auto start = Clock::now();
  auto results = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.timeout_s = 1;
        t.peer = [](int r, std::unique_ptr<InProcPeer> p) -> std::unique_ptr<transport::Peer> {
          if (r != 1) return p;
          return transport::WrapFaultyPeer(std::move(p), transport::PeerFault::kError);
        };
        return LoadAll(dd, t);
      },
      std::chrono::seconds(60));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30);
  ASSERT_FALSE(results[1].ok());
  EXPECT_NE(results[1].status().message().find("injected peer failure"), std::string::npos);
  EXPECT_FALSE(CausedByPeer(results[1].status().message()));
  for (int r = 0; r < 4; ++r) {
    if (r == 1 || results[r].ok()) continue;
    const std::string msg = results[r].status().ToString();
    EXPECT_TRUE(CausedByPeer(msg)) << msg;
  }
}

TEST_F(ExchangeTest, AStalledPeerTimesOutTheRanksWaitingForIt) {
  // Rank 2 withholds its sends but stays alive: the ranks that expect its bytes give up after
  // the timeout, naming the transfers still pending, within a bounded time.
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  const auto start = Clock::now();
  auto results = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.timeout_s = 1;
        t.peer = [](int r, std::unique_ptr<InProcPeer> p) -> std::unique_ptr<transport::Peer> {
          if (r != 2) return p;
          return transport::WrapFaultyPeer(std::move(p), transport::PeerFault::kStall);
        };
        return LoadAll(dd, t);
      },
      std::chrono::seconds(60));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30);
  int timed_out = 0;
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    const std::string msg = results[r].status().ToString();
    EXPECT_TRUE(CausedByPeer(msg)) << msg;
    if (msg.find("timed out after 1.0 s waiting for transfers") != std::string::npos) {
      EXPECT_NE(msg.find("from rank 2"), std::string::npos) << msg;
      ++timed_out;
    }
  }
  EXPECT_GT(timed_out, 0);
}

TEST_F(ExchangeTest, APeerSetUpFailureFailsTheRank) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  auto results = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.peer = [](int r, std::unique_ptr<InProcPeer> p) -> std::unique_ptr<transport::Peer> {
          if (r == 3) p->FailSetUp();
          return p;
        };
        return LoadAll(dd, t);
      },
      std::chrono::seconds(60));
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    const std::string msg = results[r].status().ToString();
    if (r == 3) {
      EXPECT_NE(msg.find("inproc: set-up failed"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("stopped because rank 3 failed"), std::string::npos) << msg;
    }
  }
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
  // and its group is stopped instead of waiting.
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  auto results = testtransport::WithWatchdog([&] { return LoadAll(dd, {}, /*gpu_claim_rank=*/0); },
                                             std::chrono::seconds(60));
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

// Blame reads structure, not text: RankJob::peer_timed_out is set exactly for a timeout waiting
// for another rank, whatever the messages say.
TEST_F(ExchangeTest, OnlyATimeoutWaitingForAnotherRankIsMarkedAsSuch) {
  const proto::LoadPlan dd = Plan(proto::DEDUP_JOB);
  std::vector<bool> stalled_flags, setup_flags, error_flags;
  auto stalled = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.timeout_s = 1;
        t.peer = [](int r, std::unique_ptr<InProcPeer> p) -> std::unique_ptr<transport::Peer> {
          if (r != 2) return p;
          return transport::WrapFaultyPeer(std::move(p), transport::PeerFault::kStall);
        };
        return LoadAll(dd, t, -1, &stalled_flags);
      },
      std::chrono::seconds(60));
  int timed_out = 0;
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(stalled[r].ok()) << "rank " << r;
    const bool waited =
        stalled[r].status().message().find("timed out after 1.0 s waiting") != std::string::npos;
    EXPECT_EQ(stalled_flags[r], waited) << stalled[r].status().ToString();
    timed_out += waited;
  }
  EXPECT_GT(timed_out, 0);

  // Rank 3's set-up error carries the peer-failure note in its text, but its peer did not time
  // out: it failed on its own.
  auto setup = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.peer = [](int r, std::unique_ptr<InProcPeer> p) -> std::unique_ptr<transport::Peer> {
          if (r == 3) p->FailSetUp();
          return p;
        };
        return LoadAll(dd, t, -1, &setup_flags);
      },
      std::chrono::seconds(60));
  ASSERT_FALSE(setup[3].ok());
  EXPECT_NE(setup[3].status().message().find(transport::kPeerFailureNote), std::string::npos);
  EXPECT_FALSE(setup_flags[3]);

  // A transport error of rank 1's own is not a timeout; nor is a stop order to the others.
  auto error = testtransport::WithWatchdog(
      [&] {
        Tweak t;
        t.timeout_s = 30;
        t.peer = [](int r, std::unique_ptr<InProcPeer> p) -> std::unique_ptr<transport::Peer> {
          if (r != 1) return p;
          return transport::WrapFaultyPeer(std::move(p), transport::PeerFault::kError);
        };
        return LoadAll(dd, t, -1, &error_flags);
      },
      std::chrono::seconds(60));
  ASSERT_FALSE(error[1].ok());
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(error_flags[r]) << error[r].status().ToString();
}

}  // namespace
}  // namespace hoist::rank
