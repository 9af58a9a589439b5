// The daemon in-process (rank/serve.h) on a hand-made host arena: the uid allow-list, the socket
// directory checks, a stalled partial request dropped after the timeout, the connection limit,
// and the wire helpers. Cross-process behaviour is in tests/embed/serve_test.cc.
#include "rank/serve.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "rank/serve_wire.h"
#include "transport/device.h"

namespace hoist::rank {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string t = "/tmp/hoist-serve-XXXXXX";
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ServeUid, AllowList) {
  EXPECT_TRUE(UidAllowed(1000, {}, 1000));  // default: the daemon's own uid
  EXPECT_FALSE(UidAllowed(0, {}, 1000));    // not even root
  EXPECT_FALSE(UidAllowed(1001, {}, 1000));
  EXPECT_TRUE(UidAllowed(1001, {5, 1001}, 1000));
  EXPECT_FALSE(UidAllowed(1000, {5, 1001}, 1000));  // a list replaces the default
  EXPECT_FALSE(UidAllowed(0, {4242}, 0));
}

TEST(ServeSocketDir, CreatesPrivateAndRefusesWhatIsNotADirectory) {
  TempDir t;
  const std::string d = t.path() + "/a/b";
  ASSERT_TRUE(PrepareSocketDir(d).ok());
  struct stat st;
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::chmod(d.c_str(), 0755), 0);
  ASSERT_TRUE(PrepareSocketDir(d).ok());
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // tightened
  const std::string f = t.path() + "/file";
  std::ofstream(f) << "x";
  Status s = PrepareSocketDir(f);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find(f), std::string::npos);
  const std::string link = t.path() + "/link";
  ASSERT_EQ(::symlink(d.c_str(), link.c_str()), 0);
  EXPECT_FALSE(PrepareSocketDir(link).ok());
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

}  // namespace
}  // namespace hoist::rank
