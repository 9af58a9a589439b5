// The daemon in-process (daemon/serve.h) on a hand-made host arena: the uid allow-list (with a
// second real uid when run as root), the socket directory checks, the request limit, a stalled
// partial request dropped after the timeout, the connection limit, and the wire helpers
// (framing, status codes, JSON). Cross-process behaviour is in tests/embed/serve_test.cc.
#include "daemon/serve.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon/serve_wire.h"
#include "tests/scratch_dir.h"
#include "transport/devices/device.h"

namespace hoist::rank {
namespace {

// A scratch directory, removed with its contents.
struct TempDir : testing::ScratchDir {
  TempDir() : ScratchDir("hoist-serve") {}
};

TEST(ServeUid, AllowList) {
  EXPECT_TRUE(UidAllowed(1000, {}, 1000));  // default: the daemon's own uid
  EXPECT_FALSE(UidAllowed(0, {}, 1000));    // not even root
  EXPECT_FALSE(UidAllowed(1001, {}, 1000));
  EXPECT_TRUE(UidAllowed(1001, {5, 1001}, 1000));
  EXPECT_FALSE(UidAllowed(1000, {5, 1001}, 1000));  // a list replaces the default
  EXPECT_FALSE(UidAllowed(0, {4242}, 0));
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

bool HasAcl(const std::string& path) {
  return ::getxattr(path.c_str(), "system.posix_acl_access", nullptr, 0) > 0;
}

TEST(ServeSocketDir, CreatesPrivateAndRefusesWhatIsNotADirectory) {
  TempDir t;
  const std::string d = t.path() + "/a/b";
  Result<Admission> a = PrepareSocketDir(d);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, Admission::kPrivate);
  EXPECT_EQ(ModeOf(d), 0700u);
  EXPECT_TRUE(std::filesystem::is_regular_file(d + "/" + kManagedMarker));
  ASSERT_EQ(::chmod(d.c_str(), 0755), 0);
  ASSERT_TRUE(PrepareSocketDir(d).ok());
  EXPECT_EQ(ModeOf(d), 0700u);  // hoist made it (the marker): its access is set again
  const std::string f = t.path() + "/file";
  std::ofstream(f) << "x";
  Status s = PrepareSocketDir(f).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(f), std::string::npos);
  const std::string link = t.path() + "/link";
  ASSERT_EQ(::symlink(d.c_str(), link.c_str()), 0);
  s = PrepareSocketDir(link).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not a directory (or is a link)"), std::string::npos) << s.ToString();
}

// A directory hoist did not create keeps its mode (a shared sticky /tmp stays 1777, a 0755 one
// stays 0755); an unsafe one is refused with the reason, and is not changed either.
TEST(ServeSocketDir, ExistingDirectoriesAreNeverChanged) {
  TempDir t;
  const std::string shared = t.path() + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  Result<Admission> a = PrepareSocketDir(shared);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, Admission::kUnmanaged);
  EXPECT_EQ(ModeOf(shared), 01777u);
  EXPECT_FALSE(std::filesystem::exists(shared + "/" + kManagedMarker));
  const std::string plain = t.path() + "/plain";
  ASSERT_EQ(::mkdir(plain.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(plain.c_str(), 0755), 0);
  ASSERT_TRUE(PrepareSocketDir(plain).ok());
  EXPECT_EQ(ModeOf(plain), 0755u);

  const std::string open = t.path() + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  Status s = PrepareSocketDir(open).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(open + ": socket directory (mode 0777) is writable by its group or "
                                    "others without the sticky bit"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(ModeOf(open), 0777u);
  ASSERT_EQ(::chmod(open.c_str(), 0770), 0);  // group-writable: the same
  EXPECT_EQ(PrepareSocketDir(open).status().code(), Code::kInvalidArgument);

  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another uid";
  const std::string theirs = t.path() + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  s = PrepareSocketDir(theirs).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("owned by uid 65534"), std::string::npos) << s.ToString();
  EXPECT_EQ(ModeOf(theirs), 0755u);
}

// Allowed uids get search permission on a directory hoist manages (an ACL entry, or 0711 where
// the file system has none), and lose it when a later start does not list them.
TEST(ServeSocketDir, AllowedUidsCanSearchAManagedDirectoryOnly) {
  TempDir t;
  ASSERT_EQ(::chmod(t.path().c_str(), 0711), 0);
  const std::string d = t.path() + "/sock";
  Result<Admission> a = PrepareSocketDir(d, {65534, ::geteuid()});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  if (*a == Admission::kAcl) {
    EXPECT_TRUE(HasAcl(d));
    EXPECT_EQ(ModeOf(d), 0710u);  // the ACL mask shows as the group bits; others get nothing
  } else {
    ASSERT_EQ(*a, Admission::kModeBits);
    EXPECT_EQ(ModeOf(d), 0711u);
  }
  a = PrepareSocketDir(d, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, Admission::kPrivate);
  EXPECT_EQ(ModeOf(d), 0700u);
  EXPECT_FALSE(HasAcl(d));

  // A directory on the way that nobody else may search: the allowed uid could never connect.
  const std::string closed = t.path() + "/closed";
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  Status s = PrepareSocketDir(closed + "/sock", {65534}).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(
      s.message().find("--allow-uid 65534 could never reach the socket: " + closed + " (mode 0700"),
      std::string::npos)
      << s.ToString();
}

TEST(ServeLimits, MaxRequestKibIsBounded) {
  EXPECT_EQ(*MaxRequestBytesFromKib(64), 65536u);
  EXPECT_EQ(*MaxRequestBytesFromKib(1), 1024u);
  EXPECT_EQ(*MaxRequestBytesFromKib(1048576), 1073741824u);
  for (long long bad : {0LL, -1LL, 1048577LL, 4194304LL, 1LL << 40}) {
    Result<std::uint32_t> r = MaxRequestBytesFromKib(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--max-request-kib " + std::to_string(bad) +
                                        " is out of range: 1 to 1048576"),
              std::string::npos)
        << r.status().ToString();
  }
}

TEST(ServeWire, FrameAndStatusCodes) {
  EXPECT_EQ(Frame("abc"), std::string("\x03\x00\x00\x00"
                                      "abc",
                                      7));
  EXPECT_EQ(Frame(std::string(300, 'x')).substr(0, 4), std::string("\x2c\x01\x00\x00", 4));
  Status s = StatusFromWire("FailedPrecondition: uid 7 is not allowed");
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.message(), "uid 7 is not allowed");
  EXPECT_EQ(StatusFromWire("gibberish").code(), Code::kInternal);
}

// A one-tensor rank on the host backend: 4096 bytes of a non-zero pattern.
LoadedRank MakeRank(proto::LoadPlan* plan) {
  LoadedRank lr;
  lr.device = transport::OpenHostDevice();
  lr.arena = *lr.device->Allocate(4096);
  auto* p = static_cast<unsigned char*>(lr.arena.ptr);
  for (int i = 0; i < 4096; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
  plan->set_model_dir("/nowhere");
  proto::RankPlan* rp = plan->add_ranks();
  rp->set_arena_bytes(4096);
  proto::TensorOut* t = rp->add_tensors();
  t->set_name("w");
  t->set_dtype("F32");
  t->add_shape(32);
  t->add_shape(32);
  t->set_bytes(4096);
  return lr;
}

int Connect(const std::string& path) {
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

TEST(ServeDaemon, StalledRequestIsDroppedAndConnectionLimitRefuses) {
  TempDir t;
  proto::LoadPlan plan;
  LoadedRank lr = MakeRank(&plan);
  ServeOptions o;
  o.socket_path = t.path() + "/rank-0.sock";
  o.request_timeout_ms = 200;
  o.max_clients = 2;
  Result<std::unique_ptr<Daemon>> d = Daemon::Start(std::move(lr), plan, 0, o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  // A second daemon on the same live socket is refused.
  {
    proto::LoadPlan plan2;
    LoadedRank lr2 = MakeRank(&plan2);
    std::thread serve([&] { ASSERT_TRUE((*d)->Serve().ok()); });
    Result<std::unique_ptr<Daemon>> d2 = Daemon::Start(std::move(lr2), plan2, 0, o);
    ASSERT_FALSE(d2.ok());
    EXPECT_NE(d2.status().message().find("another daemon"), std::string::npos);

    // Stalled: half a header, then nothing: dropped after ~200 ms (EOF on our side).
    int stalled = Connect(o.socket_path);
    ASSERT_GE(stalled, 0);
    ASSERT_EQ(::send(stalled, "\x10\x00", 2, MSG_NOSIGNAL), 2);
    char c;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(::recv(stalled, &c, 1, 0), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    ::close(stalled);

    // Two idle connections fill the limit; a third is refused with a reason.
    int a = Connect(o.socket_path), b = Connect(o.socket_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Result<std::unique_ptr<DaemonConnection>> third = DaemonConnection::Connect(o.socket_path);
    ASSERT_TRUE(third.ok());
    proto::DaemonRequest req;
    req.mutable_status();
    Result<proto::DaemonResponse> r = (*third)->Call(req);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("too many clients"), std::string::npos);
    ::close(a);
    ::close(b);
    // Once they are gone the daemon serves again, and attach carries the table and the memfd.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Result<std::unique_ptr<DaemonConnection>> ok = DaemonConnection::Connect(o.socket_path);
    ASSERT_TRUE(ok.ok());
    req.mutable_attach();
    std::vector<int> fds;
    r = (*ok)->Call(req, &fds);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(fds.size(), 1u);
    EXPECT_EQ(r->attach().tensors_size(), 1);
    EXPECT_EQ(r->attach().arena_bytes(), 4096u);
    unsigned char first[4];
    ASSERT_EQ(::pread(fds[0], first, 4, 0), 4);
    EXPECT_EQ(first[1], 8);  // the daemon's bytes, through the received descriptor
    EXPECT_EQ(first[3], 22);
    CloseAll(&fds);
    (*d)->RequestStop();
    serve.join();
  }
  EXPECT_FALSE(std::filesystem::exists(o.socket_path));
  proto::StatusReply s = (*d)->GetStatus();
  EXPECT_FALSE(s.resident());
  EXPECT_GE(s.refused(), 1u);
  EXPECT_GE(s.bad_requests(), 1u);
}

// Reads exactly n bytes from fd (a child's helper: plain syscalls only).
bool ReadExactly(int fd, char* dst, std::size_t n) {
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd, dst + got, n - got);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

struct AsUid {
  int exit_code = -1;  // 0: a reply came back; 10: connect refused with EACCES
  proto::DaemonResponse reply;
};

// Sends a status request to `path` from a forked child running as `uid` (setgid/setuid; needs
// root). The child only makes system calls and exits within 20 s whatever happens.
AsUid StatusAsUid(const std::string& path, uid_t uid) {
  proto::DaemonRequest req;
  req.mutable_status();
  const std::string frame = Frame(req.SerializeAsString());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int out[2];
  if (::pipe(out) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    ::alarm(20);
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(20);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      ::_exit(errno == EACCES ? 10 : 11);
    }
    if (::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) != ssize_t(frame.size())) ::_exit(12);
    unsigned char h[4];
    if (!ReadExactly(fd, reinterpret_cast<char*>(h), 4)) ::_exit(13);
    const std::uint32_t n = h[0] | h[1] << 8 | h[2] << 16 | std::uint32_t(h[3]) << 24;
    static char body[1 << 16];
    if (n > sizeof body || !ReadExactly(fd, body, n)) ::_exit(14);
    if (::write(out[1], body, n) != ssize_t(n)) ::_exit(15);
    ::_exit(0);
  }
  ::close(out[1]);
  std::string body;
  char buf[4096];
  for (ssize_t r; (r = ::read(out[0], buf, sizeof buf)) > 0;) body.append(buf, std::size_t(r));
  ::close(out[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  AsUid result;
  result.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (result.exit_code == 0 && !result.reply.ParseFromString(body)) result.exit_code = 16;
  return result;
}

// Another real uid: allowed when listed (the file system lets it reach the socket and
// SO_PEERCRED accepts it), refused when not (at connect by the ACL, or by SO_PEERCRED where the
// file system has no ACLs); and without a list only the daemon's own uid gets in.
TEST(ServeDaemon, AllowListAdmitsAnotherRealUidAndOnlyIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid (CI is root)";
  TempDir t;
  ASSERT_EQ(::chmod(t.path().c_str(), 0711), 0);
  for (const bool listed : {true, false}) {
    const std::string dir = t.path() + (listed ? "/listed" : "/unlisted");
    ServeOptions o;
    o.socket_path = dir + "/rank-0.sock";
    if (listed) o.allow_uids = {65534, 0};
    Result<Admission> how = PrepareSocketDir(dir, o.allow_uids);
    ASSERT_TRUE(how.ok()) << how.status().ToString();
    proto::LoadPlan plan;
    Result<std::unique_ptr<Daemon>> d = Daemon::Start(MakeRank(&plan), plan, 0, o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    std::thread serve([&] { EXPECT_TRUE((*d)->Serve().ok()); });
    if (listed) {
      const AsUid nobody = StatusAsUid(o.socket_path, 65534);
      EXPECT_EQ(nobody.exit_code, 0);
      EXPECT_TRUE(nobody.reply.ok()) << nobody.reply.error();
      EXPECT_EQ(nobody.reply.status().tensors(), 1u);
      const AsUid other = StatusAsUid(o.socket_path, 65533);  // not on the list
      if (*how == Admission::kAcl) {
        EXPECT_EQ(other.exit_code, 10);  // the file system refuses it before the daemon sees it
      } else {
        ASSERT_EQ(other.exit_code, 0);
        EXPECT_FALSE(other.reply.ok());
        EXPECT_NE(other.reply.error().find("uid 65533 is not allowed"), std::string::npos);
      }
    } else {
      EXPECT_EQ(*how, Admission::kPrivate);
      EXPECT_EQ(ModeOf(dir), 0700u);
      EXPECT_EQ(ModeOf(o.socket_path), 0600u);
      EXPECT_EQ(StatusAsUid(o.socket_path, 65534).exit_code, 10);  // cannot even reach it
    }
    (*d)->RequestStop();
    serve.join();
  }
}

// --max-request-kib at its top (1 GiB) still lets ordinary requests through (4194304 KiB used to
// wrap the 32-bit limit to 0 and refuse everything); a limit out of range cannot start a daemon.
TEST(ServeDaemon, LargestRequestLimitStillServes) {
  TempDir t;
  ServeOptions o;
  o.socket_path = t.path() + "/rank-0.sock";
  o.max_request_bytes = *MaxRequestBytesFromKib(kMaxRequestKib);
  proto::LoadPlan plan;
  Result<std::unique_ptr<Daemon>> d = Daemon::Start(MakeRank(&plan), plan, 0, o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::thread serve([&] { EXPECT_TRUE((*d)->Serve().ok()); });
  Result<std::unique_ptr<DaemonConnection>> c = DaemonConnection::Connect(o.socket_path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  proto::DaemonRequest req;
  req.mutable_status();
  Result<proto::DaemonResponse> r = (*c)->Call(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status().tensors(), 1u);
  (*d)->RequestStop();
  serve.join();

  for (std::uint32_t bad : {0u, kMaxRequestKib * 1024 + 1}) {
    o.max_request_bytes = bad;
    proto::LoadPlan plan2;
    Result<std::unique_ptr<Daemon>> d2 = Daemon::Start(MakeRank(&plan2), plan2, 0, o);
    ASSERT_FALSE(d2.ok());
    EXPECT_EQ(d2.status().code(), Code::kInvalidArgument) << d2.status().ToString();
  }
}

// `hoist ctl --json` (MessageJson): 64-bit counts are JSON numbers, exact beyond 2^53, and the
// text parses back into the same message with protobuf's own JSON parser.
TEST(ServeWire, MessageJsonPrintsNumbersAndRoundTrips) {
  proto::DaemonResponse r;
  r.set_ok(true);
  proto::StatusReply* s = r.mutable_status();
  s->set_rank(3);
  s->set_refused((1ull << 63) + 5);
  s->set_generation((1ull << 53) + 1);
  s->set_arena_bytes(8044936192ull);
  s->set_last_restore_gib_s(47.25);
  s->set_model_dir("/models/q");
  const nlohmann::json j = MessageJson(r);
  ASSERT_TRUE(j["status"]["refused"].is_number_unsigned()) << j.dump();
  EXPECT_EQ(j["status"]["refused"].get<std::uint64_t>(), (1ull << 63) + 5);
  EXPECT_EQ(j["status"]["generation"].get<std::uint64_t>(), (1ull << 53) + 1);
  EXPECT_EQ(j["status"]["attaches_served"], 0);  // defaults are printed too
  EXPECT_EQ(j["status"]["resident"], false);
  EXPECT_EQ(j["error"], "");
  EXPECT_FALSE(j.contains("attach"));  // unset oneof members are not
  const std::string text = j.dump(2);
  EXPECT_EQ(text.find("\"8044936192\""), std::string::npos) << text;
  proto::DaemonResponse back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &back).ok()) << text;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back, r)) << text;

  // Bytes (base64, every padding case), enums by name and repeated messages.
  for (const std::string& ipc : {std::string("\x01"), std::string("\xff\x00", 2),
                                 std::string("abc"), std::string(64, '\xa5')}) {
    proto::DaemonResponse a;
    a.set_ok(true);
    a.mutable_attach()->set_cuda_ipc_handle(ipc);
    a.mutable_attach()->set_layout(proto::LAYOUT_HF);
    proto::TensorOut* t = a.mutable_attach()->add_tensors();
    t->set_name("w");
    t->add_shape(32);
    t->set_bytes(1ull << 40);
    const std::string at = MessageJson(a).dump();
    proto::DaemonResponse a2;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(at, &a2).ok()) << at;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(a2, a)) << at;
  }
}

}  // namespace
}  // namespace hoist::rank
