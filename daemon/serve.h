// The resident daemon of one rank (`hoist serve`): it keeps the rank's arena on the device and
// serves its unix socket. An engine attaches (hoist::Attach) and receives the tensor table plus
// the arena's handle (CUDA IPC handle, or the host arena's memfd via SCM_RIGHTS); no weight byte
// is copied. With a host cache, `hoist ctl release` frees the device arena (keeping a pinned host
// copy) and `restore` brings it back at DMA speed.
//
// Restores run on a thread of their own so that the loop keeps answering while the bytes land:
// the loop allocates the new arena and exports its handle, the thread fills it (HostCache::Fill,
// the packed layout's transposes, `--verify` when asked) and posts its end through the wake pipe.
// Meanwhile an attach that allows it (AttachRequest.pending_ok) gets the new arena's handle and
// table at once, marked pending, and learns the outcome through an AwaitRequest that the loop
// answers when the restore ends (OK, or the restore's error naming the rank); an ordinary attach,
// a release, another restore and an await wait (in order, per connection) for the end, so an
// attach without pending_ok still returns only when the weights are resident. The `ctl restore`
// that started it is answered at the end too. A failed restore's arena is freed once no client
// that attached to it pending is still attached (until then it stays mapped for them); the daemon
// stays released. The initial load normally happens before the daemon exists; StartLoading
// serves while it runs (the worker fills the arena, the load's caller posts its end with
// LoadEnded), with the same pending attaches and queued requests; a failed initial load answers
// them with its error and stops the daemon.
//
// Security: the socket directory and file admit exactly the daemon's uid and the allow-listed
// uids (daemon/serve_access.h: 0700 / 0600 plus a POSIX ACL entry per listed uid; an existing
// directory hoist did not create is never changed); every connection's peer uid (SO_PEERCRED)
// must be in the allow-list (empty: the daemon's own uid) or it gets a refusal and a log line.
// Robustness: requests are length-prefixed protobuf (daemon/serve_wire.h) limited to
// max_request_bytes; a malformed request gets an error reply; an oversized one an error reply and
// the connection closed; a truncated or stalled one (no progress for request_timeout_ms) or a
// client that vanishes is dropped. Nothing a client sends stops the daemon.
//
// Ownership: the Daemon owns the LoadedRank (device, arena), the host cache and the socket;
// while loading it borrows the worker's device and arena (never frees them) until LoadEnded.
// Stop (RequestStop, e.g. from SIGTERM) closes the listening socket first (new clients are
// refused), then the clients (those waiting for a restore see the connection close), cancels a
// restore in flight (at its next step: a fill already on the device completes) and joins its
// thread, frees the arenas and the pinned cache and removes the socket file.
// Threading: Serve() runs the whole loop on the calling thread, plus at most one restore thread
// that touches only its own arena, the host cache and the (thread-safe) device; RequestStop() may
// be called from any thread or a signal handler (it writes one byte to a pipe); LoadEnded from any
// thread. GetStatus() is for the serving thread or after Serve() returned.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/host_cache.h"
#include "daemon/serve_access.h"
#include "hoist/status.h"
#include "proto/daemon.pb.h"
#include "proto/plan.pb.h"
#include "rank/worker.h"

namespace hoist::rank {

struct ServeOptions {
  std::string socket_path;                     // e.g. <socket_dir>/rank-<R>.sock
  std::vector<uid_t> allow_uids;               // empty: only the daemon's own uid
  bool host_cache = false;                     // keep a pinned host copy (release/restore)
  std::uint32_t max_request_bytes = 64 << 10;  // 1 .. kMaxRequestKib KiB
  int request_timeout_ms = 5000;               // a partial request idle this long is dropped
  int max_clients = 1024;                      // connections beyond this are refused
  // Tests: called on a restore's thread once its arena exists and its handle is exported, before
  // any byte moves; it must return once `cancel` is set (the daemon stops). Unset, in
  // HOIST_TEST_HOOKS builds: the environment's HOIST_TEST_HOLD_RESTORE=PATH holds until PATH
  // exists.
  std::function<void(const std::atomic<bool>& cancel)> hold_restore;
  // Tests: the error a restore's fill returns instead of filling (OK: none). Unset, in
  // HOIST_TEST_HOOKS builds: the environment's HOIST_TEST_FAIL_RESTORE=1 injects an IoError.
  Status fail_restore;
};

// The largest request limit: 1 GiB (a request is held in memory whole).
inline constexpr std::uint32_t kMaxRequestKib = 1u << 20;

// `--max-request-kib N` in bytes; InvalidArgument naming the range 1..kMaxRequestKib otherwise.
Result<std::uint32_t> MaxRequestBytesFromKib(long long kib);

class Daemon {
 public:
  // Takes the rank's weights and binds the socket (a stale socket file nobody answers on is
  // replaced; a live one is an error: another daemon serves it). options.max_request_bytes out
  // of range is an InvalidArgument.
  static Result<std::unique_ptr<Daemon>> Start(LoadedRank loaded, const proto::LoadPlan& plan,
                                               std::uint32_t rank, const ServeOptions& options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves before the rank's initial load ended (`hoist serve --serve-while-loading`): binds the
  // socket over `arena`, which the load's worker is filling on `device` (borrowed until
  // LoadEnded; no host cache is taken before then). Until LoadEnded the daemon is loading: a
  // pending_ok attach gets the arena at once (generation 1, pending) and the requests that must
  // see the end wait, as during a restore.
  static Result<std::unique_ptr<Daemon>> StartLoading(transport::Device& device,
                                                      const transport::DeviceBuffer& arena,
                                                      const proto::LoadPlan& plan,
                                                      std::uint32_t rank,
                                                      const ServeOptions& options);
  // Any thread, once (later calls are ignored): the initial load's outcome. OK: its LoadedRank,
  // which must hold the arena given to StartLoading on the same device; the loop takes the host
  // cache, becomes resident and answers the waiting requests. An error: the loop answers them with
  // it (naming the rank) and Serve returns it.
  void LoadEnded(Result<LoadedRank> loaded);

  // Serves until RequestStop() (or a failed initial load); then shuts down as described above
  // and returns (the initial load's error, if that stopped it).
  Status Serve();
  // Async-signal-safe.
  void RequestStop();

  proto::StatusReply GetStatus() const;
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Client;
  struct RestoreRun;  // a restore in flight: its arena, generation, thread and outcome
  Daemon(LoadedRank loaded, const proto::LoadPlan& plan, std::uint32_t rank, ServeOptions options);
  static Status CheckStart(const proto::LoadPlan& plan, std::uint32_t rank,
                           const transport::DeviceBuffer& arena, const ServeOptions& options);
  Status Open(const transport::DeviceBuffer& arena);  // test hooks, wake pipe, handle
  Status CaptureCache();                              // --host-cache, of loaded_
  void FinishLoad();                                  // the loop, once LoadEnded posted
  Status Bind();
  Status ExportHandle(const transport::DeviceBuffer& arena);  // into handle_
  // One turn of Serve: the poll set (the wake pipe, the listening socket, the lingering refusals,
  // the clients) and the poll timeout (-1: none) the nearest deadline asks for.
  int PollSet(std::vector<pollfd>* pfds) const;
  void ServeLingering(const pollfd* polled);                   // polled: lingering_'s entries
  void ServeClients(const pollfd* polled, std::size_t count);  // the first `count` clients
  void DropStalledClients();
  void Accept();
  void ReadFrom(Client& c);
  void Handle(Client& c, const std::string& body);
  // One parsed request: answered now, or queued on the client (behind its earlier queued ones)
  // while a restore runs and the request must see its end (MustWait).
  void Dispatch(Client& c, const proto::DaemonRequest& req);
  bool MustWait(const proto::DaemonRequest& req) const;
  // Answers the queued requests of every client that no longer must wait.
  void ServeWaiting();
  // The wake pipe: true when a stop was asked (a restore's end is noticed through restoring_).
  bool DrainWake();
  void Reply(Client& c, const proto::DaemonResponse& response, int fd = -1);
  void Flush(Client& c);
  void Drop(Client& c, const std::string& why);
  proto::DaemonResponse Attach(Client& c, const proto::AttachRequest& req, int* fd);
  proto::DaemonResponse Release();
  // Restores in place when resident (verify only) or starts a restore on its thread: then
  // *started is set and the reply comes when it ends (the caller queues an await).
  proto::DaemonResponse Restore(const proto::RestoreRequest& req, bool* started);
  Status StartRestore(const proto::RestoreRequest& req);
  void RunRestore(RestoreRun* run);  // the restore's thread
  void FinishRestore();              // the loop, once the thread ended
  void FreeUnusedFailedArenas();     // a failed restore's arena nobody is attached to
  proto::DaemonResponse Await(const proto::AwaitRequest& req) const;
  // ctl restore --verify: `arena` against the checkpoint (rank/verify.h), into the reply.
  Status Verify(const transport::DeviceBuffer& arena, const char* what, proto::RestoreReply* reply);
  void Shutdown();

  LoadedRank loaded_;                 // empty while loading
  const proto::LoadPlan plan_;        // the model, layout and world; what --verify checks
  const proto::RankPlan& rank_plan_;  // this rank's part of plan_
  ServeOptions options_;
  uid_t self_uid_;
  // loaded_.device, or the loading worker's device until LoadEnded.
  transport::Device* device_ = nullptr;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  bool resident_ = true;
  transport::ArenaHandle handle_;  // exported once per residency (fd owned here on the host)
  std::unique_ptr<HostCache> cache_;
  std::vector<std::unique_ptr<Client>> clients_;
  // Refused connections whose refusal was sent: kept open (input drained) until the peer closes
  // or a second passes, so that the peer's request arriving after the refusal does not reset the
  // connection and destroy the refusal before the peer reads it.
  std::vector<std::pair<int, std::chrono::steady_clock::time_point>> lingering_;
  std::uint64_t generation_ = 1;  // the arena's; a restore takes the next when it starts
  std::unique_ptr<RestoreRun> restoring_;
  // The last restore that ended: its generation, outcome (fill or verify error) and reply.
  std::uint64_t last_generation_ = 0;
  Status last_status_;
  proto::RestoreReply last_reply_;
  // Arenas of failed restores that clients attached to while pending: (generation, arena).
  std::vector<std::pair<std::uint64_t, transport::DeviceBuffer>> failed_arenas_;
  std::uint64_t attaches_served_ = 0, refused_ = 0, bad_requests_ = 0;
  double last_restore_s_ = 0, last_restore_gib_s_ = 0;
  bool shut_down_ = false;
  // The initial load (StartLoading): in flight, over the worker's arena; LoadEnded's outcome,
  // posted under load_mu_; a failure stops Serve with it.
  bool loading_ = false;
  transport::DeviceBuffer loading_arena_;
  std::mutex load_mu_;
  std::optional<Result<LoadedRank>> load_result_;
  Status stop_status_;
};

}  // namespace hoist::rank
