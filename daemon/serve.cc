#include "daemon/serve.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "daemon/serve_wire.h"
#include "planner/plan_set.h"
#include "rank/verify.h"

namespace hoist::rank {
namespace {

using Clock = std::chrono::steady_clock;

// The wake pipe's bytes: a stop (RequestStop), a restore's end (its thread), the initial load's
// end (LoadEnded).
constexpr char kWakeStop = 1;
constexpr char kWakeRestored = 2;
constexpr char kWakeLoaded = 3;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

proto::DaemonResponse Error(const Status& s) {
  proto::DaemonResponse r;
  r.set_ok(false);
  r.set_error(s.ToString());
  return r;
}

proto::DaemonResponse Ok() {
  proto::DaemonResponse r;
  r.set_ok(true);
  return r;
}

// Tests (HOIST_TEST_HOOKS builds only), for a daemon in its own process:
// HOIST_TEST_HOLD_RESTORE=PATH holds every restore, once its arena exists, until PATH exists (or
// the daemon stops); HOIST_TEST_FAIL_RESTORE=1 fails every restore's fill with an injected I/O
// error.
void InstallRestoreTestHooks(ServeOptions* o) {
#if HOIST_TEST_HOOKS
  if (const char* path = std::getenv("HOIST_TEST_HOLD_RESTORE");
      !o->hold_restore && path != nullptr && *path) {
    o->hold_restore = [p = std::string(path)](const std::atomic<bool>& cancel) {
      while (!cancel.load() && ::access(p.c_str(), F_OK) != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    };
  }
  if (const char* fail = std::getenv("HOIST_TEST_FAIL_RESTORE");
      o->fail_restore.ok() && fail != nullptr && std::string(fail) == "1") {
    o->fail_restore = Status::IoError("injected failure while restoring (HOIST_TEST_FAIL_RESTORE)");
  }
#else
  (void)o;
#endif
}

}  // namespace

struct Daemon::Client {
  int fd = -1;
  uid_t uid = 0;
  pid_t pid = 0;
  std::string in;                               // bytes received, not yet a whole request
  std::string out;                              // reply bytes not yet sent
  std::size_t out_sent = 0;                     // of `out`
  std::deque<std::pair<std::size_t, int>> fds;  // (offset in `out`, fd to send with that byte)
  Clock::time_point last_progress = Clock::now();
  bool attached = false;
  std::uint64_t generation = 0;  // the arena generation it attached to
  bool close_after_flush = false;
  // Requests that wait for the restore in flight, in arrival order (Dispatch).
  std::deque<proto::DaemonRequest> waiting;
};

struct Daemon::RestoreRun {
  transport::DeviceBuffer arena;  // allocated and exported by the loop; filled by the thread
  std::uint64_t generation = 0;
  proto::RestoreRequest request;
  double alloc_seconds = 0;
  std::atomic<bool> cancel{false};
  std::atomic<bool> done{false};
  // Written by the thread before `done`: whether the arena holds the bytes, the outcome (a fill
  // error, or a verify error over filled bytes) and the timing.
  bool filled = false;
  Status status;
  RestoreTiming timing;
  proto::RestoreReply reply;
  std::thread thread;
};

// Requests one connection may queue behind a restore; one more drops it.
constexpr std::size_t kMaxWaiting = 64;

// Refused connections kept open at most (see Daemon::lingering_); beyond it they close at once.
constexpr std::size_t kMaxLingering = 64;

Result<std::uint32_t> MaxRequestBytesFromKib(long long kib) {
  if (kib < 1 || kib > kMaxRequestKib) {
    return Status::InvalidArgument("--max-request-kib " + std::to_string(kib) +
                                   " is out of range: 1 to " + std::to_string(kMaxRequestKib) +
                                   " (1 GiB)");
  }
  return static_cast<std::uint32_t>(kib) * 1024u;
}

Daemon::Daemon(LoadedRank loaded, const proto::LoadPlan& plan, std::uint32_t rank,
               ServeOptions options)
    : loaded_(std::move(loaded)),
      plan_(plan),
      rank_plan_(*planner::FindRank(plan_, rank)),
      options_(std::move(options)),
      self_uid_(::geteuid()),
      device_(loaded_.device.get()) {}

Status Daemon::CheckStart(const proto::LoadPlan& plan, std::uint32_t rank,
                          const transport::DeviceBuffer& arena, const ServeOptions& options) {
  if (planner::FindRank(plan, rank) == nullptr) {
    return Status::InvalidArgument("serve: rank " + std::to_string(rank) + " is not in the plan");
  }
  if (arena.ptr == nullptr) {
    return Status::InvalidArgument("serve: rank " + std::to_string(rank) + " has no arena");
  }
  if (options.max_request_bytes < 1 || options.max_request_bytes > kMaxRequestKib * 1024) {
    return Status::InvalidArgument(
        "serve: max_request_bytes " + std::to_string(options.max_request_bytes) +
        " is out of range: 1 to " + std::to_string(kMaxRequestKib * 1024));
  }
  return Status::Ok();
}

Status Daemon::Open(const transport::DeviceBuffer& arena) {
  InstallRestoreTestHooks(&options_);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return Status::IoError(Errno("serve: pipe2"));
  return ExportHandle(arena);
}

Status Daemon::CaptureCache() {
  if (!options_.host_cache) return Status::Ok();
  // A packed plan's cache holds the rank's compressed bytes, read from the files the load just
  // read (page cache); a plain plan's, a copy of the arena.
  HOIST_ASSIGN_OR_RETURN(cache_, HostCache::Capture(*device_, loaded_.arena, plan_, rank_plan_));
  return Status::Ok();
}

Result<std::unique_ptr<Daemon>> Daemon::Start(LoadedRank loaded, const proto::LoadPlan& plan,
                                              std::uint32_t rank, const ServeOptions& options) {
  if (loaded.device == nullptr) {
    return Status::InvalidArgument("serve: rank " + std::to_string(rank) + " has no arena");
  }
  HOIST_RETURN_IF_ERROR(CheckStart(plan, rank, loaded.arena, options));
  std::unique_ptr<Daemon> d(new Daemon(std::move(loaded), plan, rank, options));
  HOIST_RETURN_IF_ERROR(d->Open(d->loaded_.arena));
  HOIST_RETURN_IF_ERROR(d->CaptureCache());
  HOIST_RETURN_IF_ERROR(d->Bind());
  return d;
}

Result<std::unique_ptr<Daemon>> Daemon::StartLoading(transport::Device& device,
                                                     const transport::DeviceBuffer& arena,
                                                     const proto::LoadPlan& plan,
                                                     std::uint32_t rank,
                                                     const ServeOptions& options) {
  HOIST_RETURN_IF_ERROR(CheckStart(plan, rank, arena, options));
  std::unique_ptr<Daemon> d(new Daemon(LoadedRank{}, plan, rank, options));
  d->device_ = &device;
  d->loading_ = true;
  d->loading_arena_ = arena;
  d->resident_ = false;
  HOIST_RETURN_IF_ERROR(d->Open(arena));
  HOIST_RETURN_IF_ERROR(d->Bind());
  return d;
}

void Daemon::LoadEnded(Result<LoadedRank> loaded) {
  {
    std::lock_guard lock(load_mu_);
    if (load_result_.has_value()) return;
    load_result_.emplace(std::move(loaded));
  }
  const char b = kWakeLoaded;
  if (wake_[1] >= 0) {
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  }
}

// The loop, once LoadEnded posted: the loaded rank adopted (it must be the arena served while
// loading) and its host cache taken, or the load's error kept for the waiting requests and as
// Serve's result.
void Daemon::FinishLoad() {
  std::optional<Result<LoadedRank>> posted;
  {
    std::lock_guard lock(load_mu_);
    posted.swap(load_result_);
  }
  if (!posted.has_value()) return;
  loading_ = false;
  Status s = posted->status();
  if (s.ok()) {  // adopted in any case: device_ must stay valid until the daemon goes
    const bool same =
        (*posted)->device.get() == device_ && (*posted)->arena.ptr == loading_arena_.ptr;
    loaded_ = std::move(**posted);
    device_ = loaded_.device.get();
    resident_ = same;
    s = same ? CaptureCache()
             : Status::Internal("serve: the load ended on another arena than the one it served");
  }
  if (!s.ok()) {
    s = std::move(s).Annotate("serve: rank " + std::to_string(rank_plan_.rank()) +
                              ": the initial load failed");
    if (handle_.fd >= 0) ::close(handle_.fd);
    handle_ = {};
    stop_status_ = s;
  }
  last_generation_ = generation_;
  last_status_ = s;
  ServeWaiting();
}

Daemon::~Daemon() {
  Shutdown();
  for (int& fd : wake_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

Status Daemon::ExportHandle(const transport::DeviceBuffer& arena) {
  if (handle_.fd >= 0) ::close(handle_.fd);
  handle_ = {};
  Result<transport::ArenaHandle> h = device_->ExportArena(arena);
  if (!h.ok()) return Status(h.status()).Annotate("serve: exporting the arena");
  handle_ = std::move(h).value();
  return Status::Ok();
}

Status Daemon::Bind() {
  const std::string& path = options_.socket_path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument(path + ": socket path is empty or longer than " +
                                   std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::FailedPrecondition(path + ": exists and is not a socket");
    }
    if (DaemonConnection::Connect(path, 1000).ok()) {
      return Status::FailedPrecondition(path + ": another daemon is serving this socket");
    }
    ::unlink(path.c_str());  // stale: its daemon is gone
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::IoError(path + ": " + Errno("socket"));
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Status::IoError(path + ": " + Errno("bind"));
  }
  Result<Admission> admitted = AdmitToSocket(path, options_.allow_uids);
  if (!admitted.ok()) return admitted.status();
  if (*admitted == Admission::kModeBits) {
    spdlog::warn(
        "serve: {}: the file system has no POSIX ACLs, so the socket is 0666 and "
        "SO_PEERCRED alone refuses uids that are not allowed",
        path);
  }
  if (::listen(listen_fd_, 128) != 0) return Status::IoError(path + ": " + Errno("listen"));
  return Status::Ok();
}

void Daemon::RequestStop() {
  const char b = kWakeStop;
  if (wake_[1] >= 0) {
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  }
}

int Daemon::PollSet(std::vector<pollfd>* pfds) const {
  pfds->clear();
  pfds->push_back({wake_[0], POLLIN, 0});
  pfds->push_back({listen_fd_, POLLIN, 0});
  int timeout_ms = -1;
  const Clock::time_point now = Clock::now();
  auto until = [&](Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    const int ms = static_cast<int>(std::max<long long>(left, 0) + 1);
    timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
  };
  for (const auto& [fd, deadline] : lingering_) {
    pfds->push_back({fd, POLLIN, 0});
    until(deadline);
  }
  for (const auto& c : clients_) {
    short events = 0;
    if (c->out_sent < c->out.size()) {
      events |= POLLOUT;
    } else if (!c->close_after_flush) {
      events |= POLLIN;
    }
    pfds->push_back({c->fd, events, 0});
    if (!c->in.empty()) {
      until(c->last_progress + std::chrono::milliseconds(options_.request_timeout_ms));
    }
  }
  return timeout_ms;
}

void Daemon::ServeLingering(const pollfd* polled) {
  const Clock::time_point now = Clock::now();
  for (std::size_t i = 0; i < lingering_.size(); ++i) {
    auto& [fd, deadline] = lingering_[i];
    bool done = now >= deadline;
    if (!done && polled[i].revents != 0) {
      char sink[4096];
      const ssize_t r = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      done = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
    }
    if (done) {
      ::close(fd);
      fd = -1;
    }
  }
  std::erase_if(lingering_, [](const auto& l) { return l.first < 0; });
}

void Daemon::ServeClients(const pollfd* polled, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    Client& c = *clients_[i];
    const short re = polled[i].revents;
    if (c.fd < 0 || re == 0) continue;
    if (re & POLLOUT) Flush(c);
    if (c.fd >= 0 && (re & POLLIN)) ReadFrom(c);
    if (c.fd >= 0 && (re & (POLLERR | POLLHUP | POLLNVAL)) && !(re & POLLIN)) {
      Drop(c, c.in.empty() ? "" : "client vanished mid-request");
    }
  }
}

void Daemon::DropStalledClients() {
  const Clock::time_point now = Clock::now();
  for (auto& c : clients_) {
    if (c->fd >= 0 && !c->in.empty() &&
        now - c->last_progress > std::chrono::milliseconds(options_.request_timeout_ms)) {
      ++bad_requests_;
      Drop(*c, "incomplete request: no progress for " +
                   std::to_string(options_.request_timeout_ms) + " ms");
    }
  }
  clients_.erase(
      std::remove_if(clients_.begin(), clients_.end(), [](const auto& c) { return c->fd < 0; }),
      clients_.end());
}

Status Daemon::Serve() {
  std::vector<pollfd> pfds;
  for (;;) {
    const int timeout_ms = PollSet(&pfds);
    // pfds: the wake pipe, the listening socket, the lingering refusals, then the clients.
    const std::size_t lingering = lingering_.size(), existing = clients_.size();
    const int n = ::poll(pfds.data(), pfds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Status::IoError("serve: " + Errno("poll"));
      Shutdown();
      return s;
    }
    if ((pfds[0].revents & POLLIN) && DrainWake()) break;
    if (loading_) FinishLoad();  // once LoadEnded posted
    if (restoring_ && restoring_->done.load()) FinishRestore();
    // Refused connections: discard what they send; close on EOF, error or deadline.
    ServeLingering(pfds.data() + 2);
    // Clients, then new connections.
    ServeClients(pfds.data() + 2 + lingering, existing);
    if (pfds[1].revents & POLLIN) Accept();
    DropStalledClients();
    FreeUnusedFailedArenas();
    if (!stop_status_.ok()) break;  // the initial load failed: its waiters were answered
  }
  spdlog::info("serve: stopping ({}): refusing new clients, freeing the arena",
               options_.socket_path);
  Shutdown();
  return stop_status_;
}

void Daemon::Accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("serve: {}", Errno("accept4"));
      }
      return;
    }
    auto c = std::make_unique<Client>();
    c->fd = fd;
    ucred cred{};
    socklen_t len = sizeof cred;
    Status refuse;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      refuse = Status::FailedPrecondition("cannot read the peer's credentials");
    } else {
      c->uid = cred.uid;
      c->pid = cred.pid;
      if (!UidAllowed(cred.uid, options_.allow_uids, self_uid_)) {
        refuse = Status::FailedPrecondition("uid " + std::to_string(cred.uid) +
                                            " is not allowed by this daemon (allow_uids)");
      } else if (static_cast<int>(clients_.size()) >= options_.max_clients) {
        refuse = Status::ResourceExhausted("too many clients (" +
                                           std::to_string(options_.max_clients) + ")");
      }
    }
    if (!refuse.ok()) {
      ++refused_;
      spdlog::warn("serve: refused connection from pid {} uid {}: {}", cred.pid, cred.uid,
                   refuse.message());
      Reply(*c, Error(refuse));  // best effort: one non-blocking send
      ::shutdown(c->fd, SHUT_WR);
      if (lingering_.size() < kMaxLingering) {
        lingering_.emplace_back(c->fd, Clock::now() + std::chrono::seconds(1));
      } else {
        ::close(c->fd);
      }
      continue;
    }
    spdlog::debug("serve: connection from pid {} uid {}", cred.pid, cred.uid);
    clients_.push_back(std::move(c));
  }
}

void Daemon::ReadFrom(Client& c) {
  char buf[16384];
  const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
  if (r < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    Drop(c, Errno("recv"));
    return;
  }
  if (r == 0) {
    if (!c.in.empty()) {
      ++bad_requests_;
      Drop(c,
           "truncated request: the client closed after " + std::to_string(c.in.size()) + " bytes");
    } else {
      Drop(c, "");
    }
    return;
  }
  c.in.append(buf, static_cast<std::size_t>(r));
  c.last_progress = Clock::now();
  while (c.fd >= 0 && c.in.size() >= 4 && !c.close_after_flush) {
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<std::uint32_t>(static_cast<unsigned char>(c.in[i])) << (8 * i);
    if (n > options_.max_request_bytes) {
      ++bad_requests_;
      spdlog::warn("serve: pid {} sent a request of {} bytes (limit {}); closing", c.pid, n,
                   options_.max_request_bytes);
      c.in.clear();
      c.close_after_flush = true;
      Reply(c, Error(Status::InvalidArgument("request of " + std::to_string(n) +
                                             " bytes exceeds the limit of " +
                                             std::to_string(options_.max_request_bytes))));
      return;
    }
    if (c.in.size() < 4 + static_cast<std::size_t>(n)) return;
    std::string body = c.in.substr(4, n);
    c.in.erase(0, 4 + static_cast<std::size_t>(n));
    Handle(c, body);
  }
}

void Daemon::Handle(Client& c, const std::string& body) {
  proto::DaemonRequest req;
  if (!req.ParseFromString(body) || req.kind_case() == proto::DaemonRequest::KIND_NOT_SET) {
    ++bad_requests_;
    spdlog::warn("serve: pid {} sent a malformed request of {} bytes", c.pid, body.size());
    Reply(c, Error(Status::InvalidArgument("malformed request (" + std::to_string(body.size()) +
                                           " bytes): not a DaemonRequest")));
    return;
  }
  Dispatch(c, req);
}

bool Daemon::MustWait(const proto::DaemonRequest& req) const {
  if (!restoring_ && !loading_) return false;
  switch (req.kind_case()) {
    case proto::DaemonRequest::kAttach:
      return !req.attach().pending_ok();
    case proto::DaemonRequest::kRelease:
    case proto::DaemonRequest::kRestore:
    case proto::DaemonRequest::kAwaitResident:
      return true;
    default:
      return false;
  }
}

void Daemon::Dispatch(Client& c, const proto::DaemonRequest& req) {
  if (!c.waiting.empty() || MustWait(req)) {
    if (c.waiting.size() >= kMaxWaiting) {
      ++bad_requests_;
      Drop(c, "more than " + std::to_string(kMaxWaiting) + " requests waiting for the restore");
      return;
    }
    c.waiting.push_back(req);  // answered in order once the restore ended (ServeWaiting)
    return;
  }
  int fd = -1;
  switch (req.kind_case()) {
    case proto::DaemonRequest::kAttach: {
      proto::DaemonResponse r = Attach(c, req.attach(), &fd);
      Reply(c, r, fd);
      return;
    }
    case proto::DaemonRequest::kDetach:
      if (c.attached) spdlog::debug("serve: pid {} detached", c.pid);
      c.attached = false;
      Reply(c, Ok());
      return;
    case proto::DaemonRequest::kStatus: {
      proto::DaemonResponse r = Ok();
      *r.mutable_status() = GetStatus();
      Reply(c, r);
      return;
    }
    case proto::DaemonRequest::kRelease:
      Reply(c, Release());
      return;
    case proto::DaemonRequest::kRestore: {
      bool started = false;
      proto::DaemonResponse r = Restore(req.restore(), &started);
      if (started) {  // its reply is the restore's end: an await, ahead of later requests
        proto::DaemonRequest await;
        await.mutable_await_resident()->set_generation(restoring_->generation);
        c.waiting.push_front(std::move(await));
        return;
      }
      Reply(c, r);
      return;
    }
    case proto::DaemonRequest::kAwaitResident:
      Reply(c, Await(req.await_resident()));
      return;
    default:
      Reply(c, Error(Status::InvalidArgument("unknown request")));
  }
}

void Daemon::ServeWaiting() {
  for (auto& c : clients_) {
    while (c->fd >= 0 && !c->waiting.empty() && !MustWait(c->waiting.front())) {
      proto::DaemonRequest req = std::move(c->waiting.front());
      c->waiting.pop_front();
      std::deque<proto::DaemonRequest> later;
      later.swap(c->waiting);  // Dispatch answers `req` now, or queues it first if it must wait
      Dispatch(*c, req);
      for (proto::DaemonRequest& l : later) c->waiting.push_back(std::move(l));
    }
  }
}

bool Daemon::DrainWake() {
  bool stop = false;
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(wake_[0], buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) stop = stop || buf[i] == kWakeStop;
  }
  return stop;
}

proto::DaemonResponse Daemon::Attach(Client& c, const proto::AttachRequest& req, int* fd) {
  // Reached while restoring or loading only with pending_ok (MustWait): bytes still landing.
  const bool pending = restoring_ != nullptr || loading_;
  if (!stop_status_.ok()) return Error(stop_status_);  // the initial load failed
  if (!resident_ && !pending) {
    std::string why = "the arena is released (host cache only)";
    if (last_generation_ == generation_ && !last_status_.ok()) {
      why += "; the last restore failed: " + last_status_.ToString();
    }
    return Error(Status::FailedPrecondition(why + "; run `hoist ctl restore` first"));
  }
  const transport::DeviceBuffer& arena =
      restoring_ ? restoring_->arena : (loading_ ? loading_arena_ : loaded_.arena);
  proto::DaemonResponse r = Ok();
  proto::AttachReply* a = r.mutable_attach();
  a->set_rank(rank_plan_.rank());
  a->set_world(planner::PlanWorld(plan_));
  a->set_model_dir(plan_.model_dir());
  a->set_layout(plan_.layout());
  a->set_gpu(handle_.gpu);
  a->set_device(device_->Name());
  a->set_pci_bus_id(device_->Caps().pci_bus_id);
  a->set_arena_bytes(arena.bytes);
  a->set_cuda_ipc_handle(handle_.ipc);
  a->set_generation(generation_);
  a->set_tp_rank(static_cast<std::uint32_t>(rank_plan_.tp_rank()));
  a->set_pending(pending);
  *a->mutable_tensors() = rank_plan_.tensors();
  if (!handle_.gpu) *fd = handle_.fd;
  c.generation = generation_;
  if (!c.attached) {
    c.attached = true;
    ++attaches_served_;
    spdlog::debug("serve: pid {} ({}) attached{}", c.pid, req.client(),
                  pending ? " while the arena is restored" : "");
  }
  return r;
}

proto::DaemonResponse Daemon::Release() {
  if (!cache_) {
    return Error(Status::FailedPrecondition(
        "this daemon has no host cache (start it with --host-cache): releasing would lose the "
        "weights"));
  }
  proto::DaemonResponse r = Ok();
  if (!resident_) {
    r.mutable_release()->set_freed_bytes(0);
    return r;
  }
  int attached = 0;
  for (const auto& c : clients_) attached += (c->fd >= 0 && c->attached) ? 1 : 0;
  if (attached > 0) {
    return Error(Status::FailedPrecondition(std::to_string(attached) +
                                            " client(s) attached; they must detach first"));
  }
  const std::uint64_t bytes = loaded_.arena.bytes;
  if (handle_.fd >= 0) ::close(handle_.fd);
  handle_ = {};
  Status s = device_->Free(loaded_.arena);
  if (!s.ok()) return Error(s);
  resident_ = false;
  spdlog::info("serve: released the {}-byte arena (host cache kept)", bytes);
  r.mutable_release()->set_freed_bytes(bytes);
  return r;
}

proto::DaemonResponse Daemon::Restore(const proto::RestoreRequest& req, bool* started) {
  *started = false;
  if (!cache_) {
    return Error(Status::FailedPrecondition("this daemon has no host cache (--host-cache)"));
  }
  proto::DaemonResponse r = Ok();
  if (resident_) {  // nothing to restore; still verified when asked
    r.mutable_restore()->set_bytes(0);
    Status v = req.verify() ? Verify(loaded_.arena, "the resident arena", r.mutable_restore())
                            : Status::Ok();
    return v.ok() ? r : Error(v);
  }
  if (Status s = StartRestore(req); !s.ok()) return Error(s);
  *started = true;
  return r;
}

Status Daemon::StartRestore(const proto::RestoreRequest& req) {
  const std::string rank = "serve: rank " + std::to_string(rank_plan_.rank()) + ": restore";
  auto run = std::make_unique<RestoreRun>();
  const Clock::time_point a = Clock::now();
  Result<transport::DeviceBuffer> arena = cache_->AllocateArena();
  if (!arena.ok()) return Status(arena.status()).Annotate(rank);
  run->arena = *arena;
  run->alloc_seconds = std::chrono::duration<double>(Clock::now() - a).count();
  run->generation = generation_ + 1;
  run->request = req;
  Status s = ExportHandle(run->arena);  // before a byte moves: a pending attach maps it
  if (s.ok()) {
    try {
      RestoreRun* r = run.get();
      run->thread = std::thread([this, r] { RunRestore(r); });
    } catch (const std::system_error& e) {
      s = Status::ResourceExhausted(std::string("cannot start the restore's thread: ") + e.what());
    }
  }
  if (!s.ok()) {
    if (handle_.fd >= 0) ::close(handle_.fd);
    handle_ = {};
    (void)device_->Free(run->arena);
    return std::move(s).Annotate(rank);
  }
  generation_ = run->generation;
  restoring_ = std::move(run);
  return Status::Ok();
}

void Daemon::RunRestore(RestoreRun* run) {
  if (options_.hold_restore) options_.hold_restore(run->cancel);
  Status s = options_.fail_restore;
  if (s.ok() && run->cancel.load()) s = Status::Aborted("cancelled: the daemon is stopping");
  if (s.ok()) s = cache_->Fill(run->arena, &run->timing);
  if (s.ok() && cache_->packed()) {  // decoded as the copies land: the fused layout's transposes
    s = TransposeArenaTensors(*device_, run->arena, rank_plan_);
  }
  run->filled = s.ok();
  if (s.ok()) {
    const RestoreTiming& t = run->timing;
    proto::RestoreReply& r = run->reply;
    r.set_bytes(t.bytes);
    r.set_seconds(t.seconds);
    r.set_gib_per_s(t.seconds > 0 ? t.bytes / t.seconds / (1ull << 30) : 0);
    r.set_dma_seconds(t.dma_seconds);
    r.set_alloc_seconds(run->alloc_seconds);
    r.set_moved_bytes(t.moved_bytes);
    r.set_decode_seconds(t.decode_seconds);
    r.set_packed(cache_->packed());
    if (run->request.verify()) s = Verify(run->arena, "the restored arena", &r);
  } else {
    s = std::move(s).Annotate("serve: rank " + std::to_string(rank_plan_.rank()) +
                              ": restore of arena generation " + std::to_string(run->generation) +
                              " failed");
  }
  run->status = std::move(s);
  run->done.store(true);
  const char b = kWakeRestored;
  [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
}

void Daemon::FinishRestore() {
  std::unique_ptr<RestoreRun> run = std::move(restoring_);
  run->thread.join();
  if (run->filled) {
    loaded_.arena = run->arena;
    resident_ = true;
    last_restore_s_ = run->reply.seconds();
    last_restore_gib_s_ = run->reply.gib_per_s();
    const RestoreTiming& t = run->timing;
    spdlog::info(
        "serve: restored {} bytes from the host cache ({} bytes moved{}) in {:.3f} s ({:.1f} "
        "GiB/s)",
        t.bytes, t.moved_bytes, cache_->packed() ? ", decoded on the device" : "", t.seconds,
        last_restore_gib_s_);
  } else {  // still released; kept while clients that attached pending map it
    if (handle_.fd >= 0) ::close(handle_.fd);
    handle_ = {};
    failed_arenas_.emplace_back(run->generation, run->arena);
    spdlog::warn("{}", run->status.ToString());
  }
  last_generation_ = run->generation;
  last_status_ = run->status;
  last_reply_ = run->reply;
  ServeWaiting();
  FreeUnusedFailedArenas();
}

void Daemon::FreeUnusedFailedArenas() {
  std::erase_if(failed_arenas_, [this](std::pair<std::uint64_t, transport::DeviceBuffer>& f) {
    for (const auto& c : clients_) {
      if (c->fd >= 0 && c->attached && c->generation == f.first) return false;
    }
    if (Status s = device_->Free(f.second); !s.ok()) {
      spdlog::warn("serve: freeing a failed restore's arena: {}", s.ToString());
    }
    return true;
  });
}

proto::DaemonResponse Daemon::Await(const proto::AwaitRequest& req) const {
  const std::uint64_t g = req.generation();
  const bool last = g == last_generation_ && last_generation_ != 0;
  if (last && !last_status_.ok()) return Error(last_status_);  // failed, or failed its verify
  if (resident_ && g == generation_) {
    proto::DaemonResponse r = Ok();
    if (last) *r.mutable_restore() = last_reply_;
    return r;
  }
  return Error(Status::FailedPrecondition(
      "serve: rank " + std::to_string(rank_plan_.rank()) + ": arena generation " +
      std::to_string(g) + " is not resident (the daemon is at generation " +
      std::to_string(generation_) + (resident_ ? ")" : ", released)")));
}

Status Daemon::Verify(const transport::DeviceBuffer& arena, const char* what,
                      proto::RestoreReply* reply) {
  const auto a = std::chrono::steady_clock::now();
  Status v = VerifyArena(*device_, arena, plan_, rank_plan_);
  if (!v.ok()) {
    return std::move(v).Annotate("serve: rank " + std::to_string(rank_plan_.rank()) + ": " + what);
  }
  reply->set_verified(true);
  reply->set_verify_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  return Status::Ok();
}

proto::StatusReply Daemon::GetStatus() const {
  proto::StatusReply s;
  s.set_rank(rank_plan_.rank());
  s.set_device(device_ != nullptr ? device_->Name() : "");
  s.set_resident(resident_);
  s.set_host_cache(cache_ != nullptr);
  s.set_arena_bytes(resident_ ? loaded_.arena.bytes : 0);
  s.set_host_cache_bytes(cache_ ? cache_->bytes() : 0);
  std::uint32_t attached = 0, connections = 0, waiting = 0;
  for (const auto& c : clients_) {
    if (c->fd < 0) continue;
    ++connections;
    waiting += static_cast<std::uint32_t>(c->waiting.size());
    attached += c->attached ? 1 : 0;
  }
  s.set_clients_attached(attached);
  s.set_connections(connections);
  s.set_generation(generation_);
  s.set_attaches_served(attaches_served_);
  s.set_refused(refused_);
  s.set_bad_requests(bad_requests_);
  s.set_tensors(static_cast<std::uint64_t>(rank_plan_.tensors_size()));
  s.set_last_restore_s(last_restore_s_);
  s.set_last_restore_gib_s(last_restore_gib_s_);
  s.set_socket(options_.socket_path);
  s.set_model_dir(plan_.model_dir());
  s.set_restoring(restoring_ != nullptr);
  s.set_loading(loading_);
  s.set_waiting_requests(waiting);
  return s;
}

void Daemon::Reply(Client& c, const proto::DaemonResponse& response, int fd) {
  const std::size_t at = c.out.size();
  c.out += Frame(response.SerializeAsString());
  if (fd >= 0) c.fds.emplace_back(at, fd);
  Flush(c);
}

void Daemon::Flush(Client& c) {
  while (c.fd >= 0 && c.out_sent < c.out.size()) {
    std::size_t end = c.out.size();
    int send_fd = -1;
    if (!c.fds.empty()) {
      if (c.fds.front().first == c.out_sent) {
        send_fd = c.fds.front().second;
        if (c.fds.size() > 1) end = c.fds[1].first;
      } else {
        end = c.fds.front().first;
      }
    }
    iovec iov{c.out.data() + c.out_sent, end - c.out_sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (send_fd >= 0) {
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &send_fd, sizeof(int));
    }
    const ssize_t w = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      Drop(c, c.attached ? "" : Errno("sendmsg"));
      return;
    }
    if (send_fd >= 0 && w > 0) c.fds.pop_front();
    c.out_sent += static_cast<std::size_t>(w);
  }
  if (c.fd >= 0 && c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    if (c.close_after_flush) Drop(c, "");
  }
}

void Daemon::Drop(Client& c, const std::string& why) {
  if (c.fd < 0) return;
  if (!why.empty()) spdlog::warn("serve: dropping pid {}: {}", c.pid, why);
  ::close(c.fd);
  c.fd = -1;
  c.attached = false;
  c.fds.clear();  // descriptors to send are the daemon's (handle_), not the client's
}

void Daemon::Shutdown() {
  for (const auto& [fd, deadline] : lingering_) ::close(fd);
  lingering_.clear();
  if (shut_down_) return;
  shut_down_ = true;
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(options_.socket_path.c_str());
  }
  for (auto& c : clients_) Drop(*c, "");
  clients_.clear();
  if (restoring_) {  // cancelled at its next step; the arena goes with it
    restoring_->cancel.store(true);
    restoring_->thread.join();
    if (Status s = device_->Free(restoring_->arena); !s.ok()) {
      spdlog::warn("serve: freeing the arena of the restore in flight: {}", s.ToString());
    }
    restoring_.reset();
  }
  FreeUnusedFailedArenas();  // no client is left
  if (handle_.fd >= 0) ::close(handle_.fd);
  handle_ = {};
  if (resident_ && device_ != nullptr) {
    if (Status s = device_->Free(loaded_.arena); !s.ok()) {
      spdlog::warn("serve: freeing the arena: {}", s.ToString());
    }
    resident_ = false;
  }
  cache_.reset();
}

}  // namespace hoist::rank
