// The daemon in-process (daemon/serve.h) while a restore runs on its thread, held mid-way by the
// ServeOptions::hold_restore hook: status answers and a pending_ok attach gets the new arena's
// handle and table at once (its bytes not yet there), an ordinary attach, an await and the
// restore's own reply wait for the end; then every byte equals the arena the daemon started with
// (deterministic, non-zero data). A failing restore answers the await with its error, naming the
// rank; a stop during a restore cancels it and drops the waiting clients.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/serve.h"
#include "daemon/serve_wire.h"
#include "tests/scratch_dir.h"
#include "transport/devices/device.h"

namespace hoist::rank {
namespace {

constexpr std::uint64_t kArenaBytes = 1 << 20;

// A scratch directory, removed with its contents.
struct TempDir : testing::ScratchDir {
  TempDir() : ScratchDir("hoist-restore") {}
};

// The bytes the daemon starts with: xorshift64, never all zeros.
std::vector<std::uint8_t> Pattern() {
  std::vector<std::uint8_t> b(kArenaBytes);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::uint8_t& v : b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<std::uint8_t>(x >> 32);
  }
  return b;
}

// A rank as a load leaves it: `want` in a host arena, two tensors over it.
LoadedRank MakeRank(proto::LoadPlan* plan, const std::vector<std::uint8_t>& want) {
  LoadedRank lr;
  lr.device = transport::OpenHostDevice();
  lr.arena = *lr.device->Allocate(kArenaBytes);
  std::memcpy(lr.arena.ptr, want.data(), want.size());
  plan->set_model_dir("/nowhere");
  proto::RankPlan* rp = plan->add_ranks();
  rp->set_arena_bytes(kArenaBytes);
  for (int i = 0; i < 2; ++i) {
    proto::TensorOut* t = rp->add_tensors();
    t->set_name(i == 0 ? "a" : "b");
    t->set_dtype("F32");
    t->add_shape(256);
    t->add_shape(512);
    t->set_bytes(kArenaBytes / 2);
    t->set_arena_offset(i * kArenaBytes / 2);
  }
  return lr;
}

// Holds the restore's thread (ServeOptions::hold_restore) until Open or the daemon's stop.
class Gate {
 public:
  std::function<void(const std::atomic<bool>&)> Hook() {
    return [this](const std::atomic<bool>& cancel) {
      std::unique_lock lock(mu_);
      entered_ = true;
      cv_.notify_all();
      while (!open_ && !cancel.load()) cv_.wait_for(lock, std::chrono::milliseconds(1));
      cancelled_ = cancel.load();
    };
  }
  bool WaitEntered() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return entered_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
  }
  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, open_ = false, cancelled_ = false;
};

struct Reply {
  Result<proto::DaemonResponse> response = Status::Internal("no reply");
  std::vector<int> fds;
};

// Sends `req` on a connection of its own (kept in *conn) from another thread; the reply arrives
// through the future.
std::future<Reply> CallAsync(const std::string& path, proto::DaemonRequest req,
                             std::unique_ptr<DaemonConnection>* conn) {
  Result<std::unique_ptr<DaemonConnection>> c = DaemonConnection::Connect(path, 30000);
  if (c.ok()) *conn = std::move(c).value();
  DaemonConnection* raw = conn->get();
  return std::async(std::launch::async, [raw, req] {
    Reply r;
    if (raw == nullptr) return r;
    r.response = raw->Call(req, &r.fds);
    return r;
  });
}

proto::DaemonResponse Call(DaemonConnection& c, const proto::DaemonRequest& req,
                           std::vector<int>* fds = nullptr) {
  Result<proto::DaemonResponse> r = c.Call(req, fds);
  if (r.ok()) return *r;
  proto::DaemonResponse e;
  e.set_error(r.status().ToString());
  return e;
}

proto::DaemonRequest Request(const char* kind, bool pending_ok = false,
                             std::uint64_t generation = 0) {
  proto::DaemonRequest req;
  const std::string k = kind;
  if (k == "attach") req.mutable_attach()->set_pending_ok(pending_ok);
  if (k == "release") req.mutable_release();
  if (k == "restore") req.mutable_restore();
  if (k == "status") req.mutable_status();
  if (k == "await") req.mutable_await_resident()->set_generation(generation);
  return req;
}

std::vector<std::uint8_t> ReadArena(int fd) {
  std::vector<std::uint8_t> got(kArenaBytes);
  if (::pread(fd, got.data(), got.size(), 0) != static_cast<ssize_t>(got.size())) got.clear();
  return got;
}

// Asks for the status until `n` requests wait for the restore (the daemon queued them).
bool WaitQueued(DaemonConnection& c, std::uint32_t n) {
  for (int i = 0; i < 2000; ++i) {
    const proto::DaemonResponse r = Call(c, Request("status"));
    if (r.ok() && r.status().waiting_requests() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

struct Served {
  TempDir dir;
  Gate gate;
  std::vector<std::uint8_t> want = Pattern();
  std::unique_ptr<Daemon> daemon;
  std::thread thread;
  std::unique_ptr<DaemonConnection> ctl;
  std::string socket;

  // Starts a host-cache daemon on `want`, held restores, and releases its arena.
  ::testing::AssertionResult Start(Status fail_restore = Status::Ok()) {
    proto::LoadPlan plan;
    LoadedRank lr = MakeRank(&plan, want);
    ServeOptions o;
    socket = o.socket_path = dir.path() + "/rank-0.sock";
    o.host_cache = true;
    o.hold_restore = gate.Hook();
    o.fail_restore = std::move(fail_restore);
    Result<std::unique_ptr<Daemon>> d = Daemon::Start(std::move(lr), plan, 0, o);
    if (!d.ok()) return ::testing::AssertionFailure() << d.status().ToString();
    daemon = std::move(d).value();
    thread = std::thread([this] { EXPECT_TRUE(daemon->Serve().ok()); });
    Result<std::unique_ptr<DaemonConnection>> c = DaemonConnection::Connect(socket);
    if (!c.ok()) return ::testing::AssertionFailure() << c.status().ToString();
    ctl = std::move(c).value();
    const proto::DaemonResponse r = Call(*ctl, Request("release"));
    if (!r.ok()) return ::testing::AssertionFailure() << r.error();
    return ::testing::AssertionSuccess();
  }
  ~Served() {
    if (daemon) daemon->RequestStop();
    if (thread.joinable()) thread.join();
  }
};

TEST(RestoreAsync, PendingAttachGetsTheFinalArenaAndAwaitTheBytes) {
  Served s;
  ASSERT_TRUE(s.Start());
  std::unique_ptr<DaemonConnection> restorer, plain, awaiting;
  std::future<Reply> restored = CallAsync(s.socket, Request("restore"), &restorer);
  ASSERT_TRUE(s.gate.WaitEntered());

  // The loop answers while the restore is held: status, and a pending attach at once.
  proto::DaemonResponse st = Call(*s.ctl, Request("status"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_TRUE(st.status().restoring());
  EXPECT_FALSE(st.status().resident());
  EXPECT_EQ(st.status().generation(), 2u);
  Result<std::unique_ptr<DaemonConnection>> pc = DaemonConnection::Connect(s.socket);
  ASSERT_TRUE(pc.ok());
  std::vector<int> pfds;
  const proto::DaemonResponse pa = Call(**pc, Request("attach", true), &pfds);
  ASSERT_TRUE(pa.ok()) << pa.error();
  ASSERT_EQ(pfds.size(), 1u);
  EXPECT_TRUE(pa.attach().pending());
  EXPECT_EQ(pa.attach().generation(), 2u);
  EXPECT_EQ(pa.attach().arena_bytes(), kArenaBytes);
  ASSERT_EQ(pa.attach().tensors_size(), 2);
  EXPECT_EQ(pa.attach().tensors(1).arena_offset(), kArenaBytes / 2);
  const std::vector<std::uint8_t> before = ReadArena(pfds[0]);
  ASSERT_EQ(before.size(), kArenaBytes) << "the pending attach's arena cannot be read";
  EXPECT_NE(before, s.want) << "the bytes landed before the restore was let go";

  // An ordinary attach and an await wait for the end (queued, not answered).
  std::future<Reply> attached = CallAsync(s.socket, Request("attach"), &plain);
  std::future<Reply> awaited = CallAsync(s.socket, Request("await", false, 2), &awaiting);
  ASSERT_TRUE(WaitQueued(*s.ctl, 3));  // the restore's own reply, the attach, the await
  EXPECT_EQ(attached.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(awaited.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(restored.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  s.gate.Open();
  Reply aw = awaited.get();
  ASSERT_TRUE(aw.response.ok()) << aw.response.status().ToString();
  EXPECT_EQ(aw.response->restore().bytes(), kArenaBytes);
  EXPECT_EQ(ReadArena(pfds[0]), s.want) << "the pending attach's mapping after the await";
  // The pending client's own await, on its connection, says the same.
  const proto::DaemonResponse own = Call(**pc, Request("await", false, 2));
  EXPECT_TRUE(own.ok()) << own.error();
  Reply at = attached.get();
  ASSERT_TRUE(at.response.ok()) << at.response.status().ToString();
  EXPECT_FALSE(at.response->attach().pending());
  EXPECT_EQ(at.response->attach().generation(), 2u);
  ASSERT_EQ(at.fds.size(), 1u);
  EXPECT_EQ(ReadArena(at.fds[0]), s.want);
  Reply re = restored.get();
  ASSERT_TRUE(re.response.ok()) << re.response.status().ToString();
  EXPECT_EQ(re.response->restore().bytes(), kArenaBytes);
  st = Call(*s.ctl, Request("status"));
  EXPECT_TRUE(st.status().resident());
  EXPECT_FALSE(st.status().restoring());
  EXPECT_EQ(st.status().clients_attached(), 2u);
  CloseAll(&pfds);
  CloseAll(&at.fds);
}

TEST(RestoreAsync, FailedRestoreAnswersTheAwaitNamingTheRank) {
  Served s;
  ASSERT_TRUE(s.Start(Status::IoError("injected restore failure")));
  std::unique_ptr<DaemonConnection> restorer, plain;
  std::future<Reply> restored = CallAsync(s.socket, Request("restore"), &restorer);
  ASSERT_TRUE(s.gate.WaitEntered());
  Result<std::unique_ptr<DaemonConnection>> pc = DaemonConnection::Connect(s.socket);
  ASSERT_TRUE(pc.ok());
  std::vector<int> pfds;
  const proto::DaemonResponse pa = Call(**pc, Request("attach", true), &pfds);
  ASSERT_TRUE(pa.ok()) << pa.error();
  EXPECT_TRUE(pa.attach().pending());
  std::future<Reply> attached = CallAsync(s.socket, Request("attach"), &plain);
  ASSERT_TRUE(WaitQueued(*s.ctl, 2));
  s.gate.Open();

  const Result<proto::DaemonResponse> aw = (*pc)->Call(Request("await", false, 2));
  ASSERT_FALSE(aw.ok());
  const std::string e = aw.status().ToString();
  EXPECT_EQ(aw.status().code(), Code::kIoError) << e;
  EXPECT_NE(e.find("rank 0: restore of arena generation 2 failed"), std::string::npos) << e;
  EXPECT_NE(e.find("injected restore failure"), std::string::npos) << e;
  Reply re = restored.get();
  ASSERT_FALSE(re.response.ok());
  EXPECT_NE(re.response.status().ToString().find("injected restore failure"), std::string::npos);
  // The ordinary attach waited for the end and learns that the arena is not there.
  Reply at = attached.get();
  ASSERT_FALSE(at.response.ok());
  EXPECT_NE(at.response.status().message().find("the last restore failed"), std::string::npos)
      << at.response.status().ToString();
  const proto::DaemonResponse st = Call(*s.ctl, Request("status"));
  EXPECT_FALSE(st.status().resident());
  EXPECT_FALSE(st.status().restoring());
  CloseAll(&pfds);
}

TEST(RestoreAsync, StopDuringARestoreCancelsItAndDropsTheWaitingClients) {
  Served s;
  ASSERT_TRUE(s.Start());
  std::unique_ptr<DaemonConnection> restorer;
  std::future<Reply> restored = CallAsync(s.socket, Request("restore"), &restorer);
  ASSERT_TRUE(s.gate.WaitEntered());
  s.daemon->RequestStop();
  s.thread.join();
  EXPECT_TRUE(s.gate.cancelled());
  Reply re = restored.get();
  EXPECT_FALSE(re.response.ok());
  EXPECT_FALSE(std::filesystem::exists(s.socket));
  EXPECT_FALSE(s.daemon->GetStatus().restoring());
  EXPECT_FALSE(s.daemon->GetStatus().resident());
}

}  // namespace
}  // namespace hoist::rank
