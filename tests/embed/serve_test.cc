// `hoist serve` as a separate process (the real binary, host backend) and clients in this
// process: attach maps the daemon's arena without a copy and matches the reference; a disallowed
// uid is refused; malformed, oversized and truncated requests do not stop the daemon; 8 clients
// x 100 attach/detach leave descriptors and memory where they started; the host cache's
// release/restore through `hoist ctl`; attaches during a restore held mid-way (pending_ok: a
// pending Model; ordinary: after it), a failing restore at Wait; SIGTERM removes the socket.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "daemon/serve_wire.h"
#include "hoist/hoist.h"
#include "hoist/hoist_c.h"
#include "tests/embed/embed_util.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

extern char** environ;

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;
using testembed::ExpectMatchesReference;
using testembed::Fixtures;
using testembed::Reference;

int CountFds(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// Mappings of hoist arenas (host backend: "/memfd:hoist-arena") in this process.
int CountArenaMaps() {
  std::ifstream in("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find("hoist-arena") != std::string::npos ? 1 : 0;
  return n;
}

// VmRSS of `pid` in KiB.
long RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Where the daemons' socket directories go: a folder others may search (0711), so that an
// allowed uid can reach a socket hoist creates inside (the fixtures' folder is 0700).
const std::string& SocketParent() {
  static testing::ScratchDir dir("hoist-serve-sock");  // removed at exit
  static const bool searchable = ::chmod(dir.path().c_str(), 0711) == 0;
  (void)searchable;
  return dir.path();
}

// A `hoist serve` child process; SIGTERM (then SIGKILL after 20 s) when destroyed.
class Daemon {
 public:
  // `socket_dir` empty: a fresh one under SocketParent(). `env`: NAME=VALUE entries added to
  // this process's environment for the daemon (the test hooks). `launcher`: words before the
  // hoist binary (e.g. mpirun -np 2).
  Daemon(const std::string& model, int tp, int rank, std::vector<std::string> extra,
         std::string socket_dir = "", std::vector<std::string> env = {},
         std::vector<std::string> launcher = {}) {
    static std::atomic<int> seq{0};
    dir_ = !socket_dir.empty() ? socket_dir
                               : SocketParent() + "/sock-" + std::to_string(::getpid()) + "-" +
                                     std::to_string(seq++);
    log_ = SocketParent() + "/log-" + std::to_string(::getpid()) + "-" + std::to_string(seq++);
    socket_ = dir_ + "/rank-" + std::to_string(rank) + ".sock";
    std::vector<std::string> args = {testing::HoistBin(),
                                     "serve",
                                     "--model",
                                     model,
                                     "--tp",
                                     std::to_string(tp),
                                     "--rank",
                                     std::to_string(rank),
                                     "--device",
                                     "host",
                                     "--socket-dir",
                                     dir_,
                                     "--threads",
                                     "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.begin(), launcher.begin(), launcher.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Daemon() { Stop(); }

  // Waits until the socket answers (the load is done).
  bool WaitReady() {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline && pid_ > 0) {
      if (std::filesystem::exists(socket_) && rank::DaemonConnection::Connect(socket_).ok()) {
        return true;
      }
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Waits up to `seconds` for the daemon to exit by itself: its exit status, or -1 if it still
  // runs (it is then stopped).
  int WaitExit(int seconds) {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(seconds);
    int st = 0;
    while (pid_ > 0 && Clock::now() < deadline) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return exit_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid_ > 0) Stop();
    return -1;
  }

  // SIGTERM and wait; the exit status (-1 when it had to be killed).
  int Stop() {
    if (pid_ <= 0) return exit_;
    ::kill(pid_, SIGTERM);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(20);
    int st = 0;
    while (::waitpid(pid_, &st, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
        return exit_ = -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    exit_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return exit_;
  }

  Result<proto::StatusReply> Status() const {
    HOIST_ASSIGN_OR_RETURN(auto c, rank::DaemonConnection::Connect(socket_));
    proto::DaemonRequest req;
    req.mutable_status();
    HOIST_ASSIGN_OR_RETURN(proto::DaemonResponse r, c->Call(req));
    return r.status();
  }

  // Polls status until `pred` holds (the daemon sees closes asynchronously).
  template <typename Pred>
  bool WaitStatus(Pred pred) const {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      Result<proto::StatusReply> s = Status();
      if (s.ok() && pred(*s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }
  std::string log() const { return ReadFile(log_); }

 private:
  std::string dir_, log_, socket_;
  pid_t pid_ = -1;
  int exit_ = -1;
};

// A raw connection for malformed traffic.
int RawConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads one framed reply; "" on EOF or error.
std::string ReadReply(int fd) {
  unsigned char h[4];
  std::size_t got = 0;
  while (got < 4) {
    ssize_t r = ::recv(fd, h + got, 4 - got, 0);
    if (r <= 0) return "";
    got += r;
  }
  const std::uint32_t n = h[0] | h[1] << 8 | h[2] << 16 | static_cast<std::uint32_t>(h[3]) << 24;
  std::string body(n, '\0');
  got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, body.data() + got, n - got, 0);
    if (r <= 0) return "";
    got += r;
  }
  proto::DaemonResponse resp;
  if (!resp.ParseFromString(body)) return "unparseable";
  return resp.ok() ? "ok" : resp.error();
}

bool AtEof(int fd) {
  char c;
  return ::recv(fd, &c, 1, 0) == 0;
}

TEST(Serve, AttachFromAnotherProcessMatchesTheReferenceWithoutACopy) {
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  Daemon d(dir, 2, 1, {});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  EXPECT_EQ(std::filesystem::status(d.dir()).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  EXPECT_EQ(std::filesystem::status(d.socket()).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  Result<Model> a = Attach(d.socket());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->attached());
  EXPECT_EQ(a->rank(), 1);
  EXPECT_EQ(a->world(), 2);
  EXPECT_EQ(a->device_type(), DeviceType::kHost);
  const auto ref = Reference(dir, 2, 0, 1);
  ExpectMatchesReference(*a, ref);

  // The C API attaches too; both map the same pages as the daemon (no copy): a byte written
  // through one mapping is seen through the other.
  hoist_model* c = nullptr;
  ASSERT_EQ(hoist_attach(d.socket().c_str(), 0, &c), HOIST_OK) << hoist_last_error();
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.clients_attached() == 2; }));
  hoist_tensor ct;
  ASSERT_EQ(hoist_model_find(c, "model.norm.weight", &ct), HOIST_OK);
  const Tensor* t = a->Find("model.norm.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_NE(ct.data, t->data);  // two mappings...
  auto* p = static_cast<unsigned char*>(t->data);
  const unsigned char old = p[0];
  p[0] = static_cast<unsigned char>(old ^ 0xFF);
  EXPECT_EQ(static_cast<unsigned char*>(ct.data)[0], old ^ 0xFF);  // ...of one arena
  p[0] = old;
  EXPECT_EQ(hoist_model_release(c), HOIST_OK);

  EXPECT_TRUE(a->Release().ok());
  EXPECT_TRUE(d.WaitStatus([](const proto::StatusReply& s) {
    return s.clients_attached() == 0 && s.attaches_served() == 2;
  }));
  // Attaching again after detaching sees the same, intact bytes.
  Result<Model> again = Attach(d.socket());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectMatchesReference(*again, ref);
}

TEST(Serve, DisallowedUidIsRefusedAndLogged) {
  const uid_t other = ::geteuid() == 4242 ? 4243 : 4242;
  Daemon d(Fixtures::Get().Dir("qwen3-tiny"), 1, 0, {"--allow-uid", std::to_string(other)});
  // Ready means the socket exists; every connection from this uid is refused.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(d.socket()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Result<Model> a = Attach(d.socket());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kFailedPrecondition) << a.status().ToString();
  EXPECT_NE(a.status().message().find("uid " + std::to_string(::geteuid()) + " is not allowed"),
            std::string::npos)
      << a.status().ToString();
  EXPECT_EQ(d.Stop(), 0);
  EXPECT_NE(d.log().find("refused connection from pid " + std::to_string(::getpid())),
            std::string::npos)
      << d.log();
}

TEST(Serve, BadRequestsAreAnsweredOrDroppedAndTheDaemonKeepsServing) {
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  Daemon d(dir, 1, 0, {"--max-request-kib", "1"});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  {  // malformed: a frame that is not a DaemonRequest gets an error, the connection stays usable
    int fd = RawConnect(d.socket());
    ASSERT_GE(fd, 0);
    const std::string bad = rank::Frame(std::string("\xff\xff\xff\xff\x0f", 5));
    ASSERT_EQ(::send(fd, bad.data(), bad.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bad.size()));
    EXPECT_NE(ReadReply(fd).find("malformed"), std::string::npos);
    proto::DaemonRequest req;
    req.mutable_status();
    const std::string good = rank::Frame(req.SerializeAsString());
    ASSERT_EQ(::send(fd, good.data(), good.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(good.size()));
    EXPECT_EQ(ReadReply(fd), "ok");
    ::close(fd);
  }
  {  // oversized: an error, then the connection is closed
    int fd = RawConnect(d.socket());
    const unsigned char h[4] = {0, 0, 0xa0, 0};  // 10 MiB
    ASSERT_EQ(::send(fd, h, 4, MSG_NOSIGNAL), 4);
    EXPECT_NE(ReadReply(fd).find("exceeds the limit of 1024"), std::string::npos);
    EXPECT_TRUE(AtEof(fd));
    ::close(fd);
  }
  {  // truncated: the client vanishes mid-request
    int fd = RawConnect(d.socket());
    const unsigned char h[6] = {100, 0, 0, 0, 0x0a, 0x00};
    ASSERT_EQ(::send(fd, h, 6, MSG_NOSIGNAL), 6);
    ::close(fd);
  }
  {  // a client that connects and leaves at once, and one that half-sends a header
    ::close(RawConnect(d.socket()));
    int fd = RawConnect(d.socket());
    ASSERT_EQ(::send(fd, "\x03", 1, MSG_NOSIGNAL), 1);
    ::close(fd);
  }
  Result<Model> a = Attach(d.socket());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectMatchesReference(*a, Reference(dir, 1, 0, 0));
  Result<proto::StatusReply> s = d.Status();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GE(s->bad_requests(), 4u);
  a->Release().ok();
  EXPECT_EQ(d.Stop(), 0);
}

TEST(Serve, ManyClientsAttachAndDetachWithoutLeaks) {
  Daemon d(Fixtures::Get().Dir("qwen3-tiny"), 1, 0, {});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  auto round = [&](int clients, int times) {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&] {
        for (int i = 0; i < times; ++i) {
          Result<Model> m = Attach(d.socket());
          if (!m.ok() || m->Find("model.norm.weight") == nullptr || !m->Release().ok()) {
            ++failures;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    return failures.load();
  };
  ASSERT_EQ(round(8, 2), 0);  // warm-up: per-thread malloc arenas, cached thread stacks
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.connections() == 1; }));
  const int fds_self = CountFds(::getpid());
  // The daemon closes a status connection when it reads its EOF: its settled count is the
  // smallest seen over a short while.
  auto settled_fds = [&d](int at_most) {
    int n = CountFds(d.pid());
    for (int i = 0; i < 300 && n > at_most; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      n = std::min(n, CountFds(d.pid()));
    }
    return n;
  };
  int fds_daemon = CountFds(d.pid());
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    fds_daemon = std::min(fds_daemon, CountFds(d.pid()));
  }
  const int maps = CountArenaMaps();
  const long rss = RssKib(d.pid());
  const long self_rss = RssKib(::getpid());
  ASSERT_GT(fds_daemon, 0);

  EXPECT_EQ(round(8, 100), 0);
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) {
    return s.connections() == 1 && s.clients_attached() == 0;
  }));
  Result<proto::StatusReply> s = d.Status();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->attaches_served(), 816u);
  EXPECT_EQ(CountFds(::getpid()), fds_self);
  EXPECT_EQ(settled_fds(fds_daemon), fds_daemon);
  EXPECT_EQ(CountArenaMaps(), maps);
  EXPECT_EQ(maps, 0);
  EXPECT_LT(RssKib(d.pid()) - rss, 1024) << "daemon RSS grew from " << rss << " KiB";
  EXPECT_LT(RssKib(::getpid()) - self_rss, 4096) << "client RSS grew from " << self_rss << " KiB";
  EXPECT_EQ(d.Stop(), 0);
}

std::string Ctl(const std::string& action, const std::string& socket) {
  const std::string cmd = testing::HoistBin() + " ctl " + action + " --socket " + socket + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  return out + "[exit " + std::to_string(WEXITSTATUS(st)) + "]";
}

TEST(Serve, HostCacheReleaseAndRestoreThroughCtl) {
  const std::string dir = Fixtures::Get().Dir("qwen3-moe-tiny");
  Daemon d(dir, 2, 0, {"--host-cache"});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  std::string out = Ctl("status", d.socket());
  EXPECT_NE(out.find("resident: yes"), std::string::npos) << out;
  EXPECT_NE(out.find("[exit 0]"), std::string::npos) << out;

  {
    Result<Model> a = Attach(d.socket());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    out = Ctl("release", d.socket());  // refused while a client is attached
    EXPECT_NE(out.find("1 client(s) attached"), std::string::npos) << out;
    EXPECT_NE(out.find("[exit 1]"), std::string::npos) << out;
  }
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.clients_attached() == 0; }));
  out = Ctl("release", d.socket());
  EXPECT_NE(out.find("released"), std::string::npos) << out;
  Result<proto::StatusReply> s = d.Status();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->resident());
  EXPECT_EQ(s->arena_bytes(), 0u);
  EXPECT_GT(s->host_cache_bytes(), 0u);
  Result<Model> none = Attach(d.socket());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("restore"), std::string::npos);

  out = Ctl("restore", d.socket());
  EXPECT_NE(out.find("restored"), std::string::npos) << out;
  // The copy is also timed on the device's stream (host backend: its copy thread) and the new
  // arena's allocation apart from it.
  EXPECT_NE(out.find("; DMA "), std::string::npos) << out;
  EXPECT_EQ(out.find("DMA 0.000 s (0.0 GiB/s)"), std::string::npos) << out;
  EXPECT_NE(out.find("arena allocation "), std::string::npos) << out;
  s = d.Status();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->resident());
  EXPECT_EQ(s->generation(), 2u);
  EXPECT_GT(s->last_restore_s(), 0);
  Result<Model> a = Attach(d.socket());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectMatchesReference(*a, Reference(dir, 2, 0, 0));
  a->Release().ok();
  // Without --host-cache, release is refused (it would lose the weights).
  Daemon plain(dir, 1, 0, {});
  ASSERT_TRUE(plain.WaitReady()) << plain.log();
  out = Ctl("release", plain.socket());
  EXPECT_NE(out.find("no host cache"), std::string::npos) << out;
}

// gpt_oss's BF16 experts, which the fused layout holds transposed, from a packed copy: the host
// cache keeps the compressed bytes as stored, so a restore decodes them and transposes them again
// before anyone may attach; --verify proves it.
TEST(Serve, PackedRestoreTransposesTheFusedExpertsAgain) {
  const std::string dir = Fixtures::Get().Dir("gpt-oss-tiny");
  ASSERT_FALSE(dir.empty());
  const std::string packed = dir + "-packed";
  const std::string pack = testing::HoistBin() + " pack --model " + dir + " --out " + packed +
                           " > " + packed + ".log 2>&1";
  ASSERT_EQ(std::system(pack.c_str()), 0) << ReadFile(packed + ".log");
  Daemon d(packed, 2, 1, {"--host-cache"});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  std::string out = Ctl("release", d.socket());
  EXPECT_NE(out.find("released"), std::string::npos) << out;
  out = Ctl("restore --verify", d.socket());
  EXPECT_NE(out.find("verified: PASS"), std::string::npos) << out;
  EXPECT_NE(out.find("[exit 0]"), std::string::npos) << out;
  Result<Model> a = Attach(d.socket());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectMatchesReference(*a, Reference(dir, 2, 0, 1));
  a->Release().ok();
}

TEST(Serve, SigtermStopsAcceptingFreesAndRemovesTheSocket) {
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  Daemon d(dir, 1, 0, {});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  Result<Model> a = Attach(d.socket());  // still attached when the daemon stops
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const pid_t pid = d.pid();
  EXPECT_EQ(d.Stop(), 0) << d.log();
  EXPECT_FALSE(std::filesystem::exists(d.socket()));
  EXPECT_LT(::kill(pid, 0), 0);  // gone
  EXPECT_FALSE(Attach(d.socket()).ok());
  // The client's mapping outlives the daemon (host backend: the memfd stays while mapped).
  ExpectMatchesReference(*a, Reference(dir, 1, 0, 0));
  EXPECT_TRUE(a->Release().ok());
}

// The holds and injected failures below are test hooks (HOIST_TEST_HOOKS builds: tools/test.sh's).
#define REQUIRE_TEST_HOOKS() \
  if (!HOIST_TEST_HOOKS) GTEST_SKIP() << "needs a build with HOIST_TEST_HOOKS"

// A fresh path for a restore's gate file (HOIST_TEST_HOLD_RESTORE holds until it exists).
std::string GatePath() {
  static std::atomic<int> seq{0};
  return SocketParent() + "/gate-" + std::to_string(::getpid()) + "-" + std::to_string(seq++);
}

void Touch(const std::string& path) { std::ofstream(path) << "go"; }

// Whether any tensor of `m` differs from the reference (its bytes have not all landed).
bool AnyDiffers(const Model& m, const std::map<std::string, testref::RefTensor>& ref) {
  for (const Tensor& t : m.tensors()) {
    const auto it = ref.find(t.name);
    if (it == ref.end() || std::memcmp(t.data, it->second.data.data(), t.bytes) != 0) return true;
  }
  return false;
}

// An engine attaches while `hoist ctl restore` is held mid-way (after the new arena exists,
// before a byte moves): with pending_ok it gets the final table at once and a pending Model whose
// Wait returns OK once the bytes are in, then every tensor equals the checkpoint's; the C API's
// hoist_attach_pending does the same; an ordinary attach waits for the end of the restore.
TEST(Serve, AttachDuringARestoreIsPendingUntilTheBytesAreResident) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  const std::string gate = GatePath();
  Daemon d(dir, 2, 1, {"--host-cache"}, "", {"HOIST_TEST_HOLD_RESTORE=" + gate});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  const auto ref = Reference(dir, 2, 0, 1);
  EXPECT_NE(Ctl("release", d.socket()).find("[exit 0]"), std::string::npos);
  auto restored = std::async(std::launch::async, [&] {
    return Ctl("restore --timeout-s 120", d.socket());  // held meanwhile: a loaded CI machine
  });
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.restoring(); })) << d.log();
  const std::string held = Ctl("status", d.socket());  // the loop answers during the restore
  EXPECT_NE(held.find("resident: no (restoring)"), std::string::npos) << held;

  AttachOptions po;
  po.pending_ok = true;
  Result<Model> m = Attach(d.socket(), po);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->pending());
  EXPECT_FALSE(m->LayerReady(0));
  EXPECT_EQ(m->progress().bytes_done, 0u);
  EXPECT_FALSE(m->progress().ended);
  ASSERT_EQ(m->tensors().size(), ref.size());
  EXPECT_TRUE(AnyDiffers(*m, ref)) << "the bytes landed before the restore was let go";
  std::map<std::string, void*> addresses;
  for (const Tensor& t : m->tensors()) addresses[t.name] = t.data;
  hoist_model* c = nullptr;
  ASSERT_EQ(hoist_attach_pending(d.socket().c_str(), 0, &c), HOIST_OK) << hoist_last_error();
  int pending = 0;
  ASSERT_EQ(hoist_model_pending(c, &pending), HOIST_OK);
  EXPECT_EQ(pending, 1);
  auto plain = std::async(std::launch::async, [&] { return Attach(d.socket()); });
  // Queued: the restore's own reply and the ordinary attach.
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.waiting_requests() == 2; }));
  EXPECT_EQ(plain.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  Touch(gate);
  ASSERT_TRUE(m->Wait().ok());
  EXPECT_FALSE(m->pending());
  EXPECT_TRUE(m->LayerReady(0));
  EXPECT_EQ(m->progress().bytes_done, m->progress().bytes_total);
  for (const Tensor& t : m->tensors()) EXPECT_EQ(t.data, addresses[t.name]) << t.name;
  ExpectMatchesReference(*m, ref);
  ASSERT_EQ(hoist_model_wait(c), HOIST_OK) << hoist_last_error();
  ASSERT_EQ(hoist_model_pending(c, &pending), HOIST_OK);
  EXPECT_EQ(pending, 0);
  hoist_tensor ct;
  ASSERT_EQ(hoist_model_find(c, "model.norm.weight", &ct), HOIST_OK);
  const testref::RefTensor& norm = ref.at("model.norm.weight");
  EXPECT_EQ(std::memcmp(ct.data, norm.data.data(), norm.data.size()), 0);
  EXPECT_EQ(hoist_model_release(c), HOIST_OK);
  Result<Model> p = plain.get();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->pending());
  ExpectMatchesReference(*p, ref);
  const std::string out = restored.get();
  EXPECT_NE(out.find("restored"), std::string::npos) << out;
  EXPECT_NE(out.find("[exit 0]"), std::string::npos) << out;
  // A resident daemon's attach is complete, pending_ok or not.
  Result<Model> again = Attach(d.socket(), po);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->pending());
  EXPECT_TRUE(again->Wait().ok());
}

// A restore that fails after a pending attach: Wait (and WaitLayer, StreamWait, and Wait again)
// returns the restore's error naming the rank, the model is no longer pending and no layer is
// ready; `ctl restore` fails with the same error; the daemon stays released and says why.
TEST(Serve, AFailedRestoreSurfacesAtWaitNamingTheRank) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  const std::string gate = GatePath();
  Daemon d(dir, 1, 0, {"--host-cache"}, "",
           {"HOIST_TEST_HOLD_RESTORE=" + gate, "HOIST_TEST_FAIL_RESTORE=1"});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  EXPECT_NE(Ctl("release", d.socket()).find("[exit 0]"), std::string::npos);
  auto restored = std::async(std::launch::async, [&] {
    return Ctl("restore --timeout-s 120", d.socket());  // held meanwhile: a loaded CI machine
  });
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.restoring(); })) << d.log();
  AttachOptions po;
  po.pending_ok = true;
  Result<Model> m = Attach(d.socket(), po);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->pending());
  Touch(gate);
  const Status w = m->Wait();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.code(), Code::kIoError) << w.ToString();
  EXPECT_NE(w.message().find("rank 0: restore of arena generation 2 failed"), std::string::npos)
      << w.ToString();
  EXPECT_NE(w.message().find("injected failure while restoring"), std::string::npos)
      << w.ToString();
  EXPECT_FALSE(m->pending());
  EXPECT_FALSE(m->LayerReady(0));
  EXPECT_EQ(m->progress().bytes_done, 0u);
  EXPECT_EQ(m->Wait().ToString(), w.ToString());
  EXPECT_EQ(m->WaitLayer(0).ToString(), w.ToString());
  EXPECT_EQ(m->StreamWait(nullptr).ToString(), w.ToString());
  const std::string out = restored.get();
  EXPECT_NE(out.find("injected failure while restoring"), std::string::npos) << out;
  EXPECT_NE(out.find("[exit 1]"), std::string::npos) << out;
  Result<proto::StatusReply> s = d.Status();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->resident());
  EXPECT_FALSE(s->restoring());
  Result<Model> none = Attach(d.socket());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("the last restore failed"), std::string::npos)
      << none.status().ToString();
  EXPECT_TRUE(m->Release().ok());
  EXPECT_EQ(d.Stop(), 0) << d.log();
}

// `hoist serve --serve-while-loading` held before its first byte (HOIST_TEST_HOLD_STREAMING):
// the socket answers during the initial load, a pending_ok attach gets the final table at once
// and Wait returns OK once the load landed (every tensor then equals the checkpoint's at the same
// address), an ordinary attach waits for the end, and the host cache is taken after the load.
TEST(Serve, ServeWhileLoadingGivesAPendingAttachBeforeTheBytes) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  const std::string gate = GatePath();
  Daemon d(dir, 2, 0, {"--serve-while-loading", "--host-cache"}, "",
           {"HOIST_TEST_HOLD_STREAMING=" + gate});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.loading(); })) << d.log();
  const auto ref = Reference(dir, 2, 0, 0);
  AttachOptions po;
  po.pending_ok = true;
  Result<Model> m = Attach(d.socket(), po);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->pending());
  EXPECT_EQ(m->rank(), 0);
  EXPECT_EQ(m->world(), 2);
  ASSERT_EQ(m->tensors().size(), ref.size());
  EXPECT_TRUE(AnyDiffers(*m, ref)) << "the bytes landed before the load was let go";
  std::map<std::string, void*> addresses;
  for (const Tensor& t : m->tensors()) addresses[t.name] = t.data;
  auto plain = std::async(std::launch::async, [&] { return Attach(d.socket()); });
  ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.waiting_requests() == 1; }));
  EXPECT_EQ(plain.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  Touch(gate);
  ASSERT_TRUE(m->Wait().ok());
  EXPECT_FALSE(m->pending());
  for (const Tensor& t : m->tensors()) EXPECT_EQ(t.data, addresses[t.name]) << t.name;
  ExpectMatchesReference(*m, ref);
  Result<Model> p = plain.get();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->pending());
  ExpectMatchesReference(*p, ref);
  Result<proto::StatusReply> s = d.Status();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->resident());
  EXPECT_FALSE(s->loading());
  EXPECT_EQ(s->generation(), 1u);
  EXPECT_GT(s->host_cache_bytes(), 0u);
  EXPECT_NE(d.log().find("serving at " + d.socket() + " while it loads"), std::string::npos)
      << d.log();
  EXPECT_NE(d.log().find("ready at " + d.socket()), std::string::npos) << d.log();
  EXPECT_TRUE(m->Release().ok());
  EXPECT_TRUE(p->Release().ok());
  EXPECT_EQ(d.Stop(), 0) << d.log();
}

// A load that fails after a pending attach: Wait returns its error naming the rank, and the daemon
// exits 1; a SIGTERM during a held load cancels it and exits 0, removing the socket.
TEST(Serve, ServeWhileLoadingFailureReachesWaitAndStopCancels) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  {
    const std::string gate = GatePath();
    Daemon d(dir, 1, 0, {"--serve-while-loading"}, "",
             {"HOIST_TEST_HOLD_STREAMING=" + gate, "HOIST_TEST_FAIL_STREAMING_RANK=0"});
    ASSERT_TRUE(d.WaitReady()) << d.log();
    AttachOptions po;
    po.pending_ok = true;
    Result<Model> m = Attach(d.socket(), po);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE(m->pending());
    // The await queued before the load may fail (the daemon exits right after answering it).
    auto waited = std::async(std::launch::async, [&] { return m->Wait(); });
    ASSERT_TRUE(
        d.WaitStatus([](const proto::StatusReply& s) { return s.waiting_requests() == 1; }));
    Touch(gate);
    const Status w = waited.get();
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.message().find("rank 0: the initial load failed"), std::string::npos)
        << w.ToString();
    EXPECT_NE(w.message().find("injected failure while streaming"), std::string::npos)
        << w.ToString();
    EXPECT_FALSE(m->pending());
    EXPECT_FALSE(m->LayerReady(0));
    EXPECT_EQ(d.WaitExit(60), 1) << d.log();
    EXPECT_TRUE(m->Release().ok());
  }
  {
    const std::string gate = GatePath();  // never created: the load stays held
    Daemon d(dir, 1, 0, {"--serve-while-loading"}, "", {"HOIST_TEST_HOLD_STREAMING=" + gate});
    ASSERT_TRUE(d.WaitReady()) << d.log();
    ASSERT_TRUE(d.WaitStatus([](const proto::StatusReply& s) { return s.loading(); }));
    EXPECT_EQ(d.Stop(), 0) << d.log();
    EXPECT_FALSE(std::filesystem::exists(d.socket()));
    EXPECT_NE(d.log().find("stopped during the initial load"), std::string::npos) << d.log();
  }
}

// Under `mpirun -np 2` with dedup (bytes forwarded between the ranks through the control loop,
// which runs on the main thread while each rank's daemon serves on its own): a pending attach to
// each rank during the held load, then both equal their reference after Wait; SIGTERM to mpirun
// stops both daemons.
TEST(Serve, ServeWhileLoadingUnderMpirunWithDedup) {
  REQUIRE_TEST_HOOKS();
  const std::string dir = Fixtures::Get().Dir("qwen3-tiny");
  const std::string gate = GatePath();
  Daemon d(dir, 2, 0, {"--serve-while-loading", "--dedup", "node"}, "",
           {"HOIST_TEST_HOLD_STREAMING=" + gate, "OMPI_ALLOW_RUN_AS_ROOT=1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"},
           {"mpirun", "-np", "2", "--oversubscribe", "-x", "HOIST_TEST_HOLD_STREAMING"});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  const std::string rank1 = d.dir() + "/rank-1.sock";
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (!rank::DaemonConnection::Connect(rank1).ok() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  AttachOptions po;
  po.pending_ok = true;
  Result<Model> m0 = Attach(d.socket(), po), m1 = Attach(rank1, po);
  ASSERT_TRUE(m0.ok()) << m0.status().ToString() << d.log();
  ASSERT_TRUE(m1.ok()) << m1.status().ToString() << d.log();
  EXPECT_TRUE(m0->pending());
  EXPECT_TRUE(m1->pending());
  Touch(gate);
  ASSERT_TRUE(m0->Wait().ok()) << d.log();
  ASSERT_TRUE(m1->Wait().ok()) << d.log();
  ExpectMatchesReference(*m0, Reference(dir, 2, 0, 0));
  ExpectMatchesReference(*m1, Reference(dir, 2, 0, 1));
  EXPECT_TRUE(m0->Release().ok());
  EXPECT_TRUE(m1->Release().ok());
  d.Stop();  // mpirun's own status after a SIGTERM is Open MPI's; each rank's stop is logged
  EXPECT_FALSE(std::filesystem::exists(rank1));
  for (const std::string& sock : {d.socket(), rank1}) {
    EXPECT_NE(d.log().find("serve: stopping (" + sock + ")"), std::string::npos) << d.log();
  }
  EXPECT_EQ(d.log().find("hoist: error"), std::string::npos) << d.log();
}

// `hoist ctl ACTION --socket SOCKET [extra]` run as `uid` (fork, setgid/setuid, exec of a copy
// of the binary in a folder that uid can reach): its output and "[exit N]".
std::string CtlAsUid(uid_t uid, const std::string& socket, const std::vector<std::string>& extra) {
  const std::string bin = SocketParent() + "/hoist";
  if (!std::filesystem::exists(bin)) {
    std::filesystem::copy_file(testing::HoistBin(), bin);
    ::chmod(bin.c_str(), 0755);
  }
  std::vector<std::string> args = {bin, "ctl", "status", "--socket", socket};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::alarm(30);
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(120);
    ::execv(argv[0], argv.data());
    ::_exit(121);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, std::size_t(r));
  ::close(out[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return text + "[exit " + std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)) +
         "]";
}

// --allow-uid 65534: uid 65534 (nobody) really connects, through the real `hoist ctl`; a uid not
// on the list is refused; `--json` prints the counts as numbers.
TEST(Serve, AllowUidAdmitsThatUidAndNoOtherThroughCtl) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run ctl as another uid (CI is root)";
  Daemon d(Fixtures::Get().Dir("qwen3-tiny"), 1, 0, {"--allow-uid", "65534", "--allow-uid", "0"});
  ASSERT_TRUE(d.WaitReady()) << d.log();
  std::string out = CtlAsUid(65534, d.socket(), {});
  EXPECT_NE(out.find("resident: yes"), std::string::npos) << out;
  EXPECT_NE(out.find("[exit 0]"), std::string::npos) << out;
  out = CtlAsUid(65533, d.socket(), {});
  EXPECT_NE(out.find("[exit 1]"), std::string::npos) << out;
  EXPECT_TRUE(out.find("uid 65533 is not admitted to this socket") != std::string::npos ||  // ACL
              out.find("uid 65533 is not allowed") != std::string::npos)  // SO_PEERCRED
      << out;
  EXPECT_EQ(out.find("resident"), std::string::npos) << out;

  out = CtlAsUid(65534, d.socket(), {"--json"});
  const std::string json = out.substr(0, out.rfind("[exit"));
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << out;
  Result<proto::StatusReply> s = d.Status();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(j["status"]["tensors"].is_number_unsigned()) << json;
  EXPECT_EQ(j["status"]["tensors"].get<std::uint64_t>(), s->tensors());
  ASSERT_TRUE(j["status"]["arena_bytes"].is_number_unsigned()) << json;
  EXPECT_EQ(j["status"]["arena_bytes"].get<std::uint64_t>(), s->arena_bytes());
  EXPECT_GT(s->arena_bytes(), 0u);
  EXPECT_EQ(d.Stop(), 0);
}

// --socket-dir on an existing shared (1777) directory leaves its mode alone; an unsafe one, an
// allowed uid that could never reach the socket and an out-of-range request limit exit 2 at once.
TEST(Serve, SocketDirAndLimitsAreCheckedWithoutChangingTheDirectory) {
  const std::string model = Fixtures::Get().Dir("qwen3-tiny");
  const std::string shared = SocketParent() + "/shared-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  {
    Daemon d(model, 1, 0, {}, shared);
    ASSERT_TRUE(d.WaitReady()) << d.log();
    EXPECT_EQ(std::filesystem::status(shared).permissions(),
              std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
    EXPECT_TRUE(Attach(d.socket()).ok());
    EXPECT_EQ(d.Stop(), 0);
  }
  const std::string open = SocketParent() + "/open-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  {
    Daemon d(model, 1, 0, {}, open);
    EXPECT_EQ(d.WaitExit(60), 2) << d.log();
    EXPECT_NE(d.log().find("hoist: error: InvalidArgument: " + open +
                           ": socket directory (mode 0777) is writable"),
              std::string::npos)
        << d.log();
    EXPECT_EQ(std::filesystem::status(open).permissions(), std::filesystem::perms::all);
  }
  {
    const std::string closed = Fixtures::Get().root() + "/closed-" + std::to_string(::getpid());
    Daemon d(model, 1, 0, {"--allow-uid", "4242"}, closed);
    EXPECT_EQ(d.WaitExit(60), 2) << d.log();
    EXPECT_NE(d.log().find("--allow-uid 4242 could never reach the socket"), std::string::npos)
        << d.log();
  }
  {
    Daemon d(model, 1, 0, {"--max-request-kib", "4194304"});
    EXPECT_EQ(d.WaitExit(60), 2) << d.log();
    EXPECT_NE(d.log().find("--max-request-kib 4194304 is out of range: 1 to 1048576"),
              std::string::npos)
        << d.log();
  }
  {  // the largest limit serves ordinary requests (it used to wrap to 0 and refuse them all)
    Daemon d(model, 1, 0, {"--max-request-kib", "1048576"});
    ASSERT_TRUE(d.WaitReady()) << d.log();
    Result<Model> a = Attach(d.socket());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ExpectMatchesReference(*a, Reference(model, 1, 0, 0));
    EXPECT_TRUE(a->Release().ok());
    EXPECT_EQ(d.Stop(), 0);
  }
}

}  // namespace
}  // namespace hoist
