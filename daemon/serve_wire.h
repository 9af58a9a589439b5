// The daemon's wire (proto/daemon.proto) on a unix stream socket: 4-byte little-endian length
// prefix + protobuf, with file descriptors passed as SCM_RIGHTS. Used by the daemon
// (daemon/serve.h), `hoist ctl` and hoist::Attach (include/hoist/hoist.h).
//
// Ownership: a DaemonConnection owns its socket (closed by its destructor); descriptors received
// with a reply belong to the caller. Failure: every call returns a Status naming the socket path
// and what failed (connect, timeout, oversized or malformed reply, refusal by the daemon).
// Threading: one DaemonConnection per thread; distinct connections are independent.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "proto/daemon.pb.h"

namespace hoist::rank {

// Requests larger than this are refused by default (ServeOptions::max_request_bytes).
inline constexpr std::uint32_t kDefaultMaxRequestBytes = 64 << 10;
// Replies larger than this are refused by clients (a tensor table is far smaller).
inline constexpr std::uint32_t kMaxReplyBytes = 1u << 30;

// Encodes `payload` with its 4-byte little-endian length prefix.
std::string Frame(const std::string& payload);

class DaemonConnection {
 public:
  // Connects to the daemon's socket. timeout_ms bounds every later Call too.
  static Result<std::unique_ptr<DaemonConnection>> Connect(const std::string& socket_path,
                                                           int timeout_ms = 10000);
  ~DaemonConnection();
  DaemonConnection(const DaemonConnection&) = delete;
  DaemonConnection& operator=(const DaemonConnection&) = delete;

  // Sends one request and waits for its reply. Descriptors that came with the reply are appended
  // to *fds (or closed when fds is nullptr). A reply with ok == false becomes the Status it
  // names (e.g. PermissionDenied-like refusals arrive as FailedPrecondition).
  Result<proto::DaemonResponse> Call(const proto::DaemonRequest& request,
                                     std::vector<int>* fds = nullptr);

  // The bound of later Calls (e.g. longer for an await that lasts a whole restore).
  void set_timeout_ms(int timeout_ms) { timeout_ms_ = timeout_ms; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  DaemonConnection(int fd, std::string path, int timeout_ms)
      : fd_(fd), path_(std::move(path)), timeout_ms_(timeout_ms) {}
  // Reads exactly n bytes (fds received on the way are appended to *fds).
  Status ReadFull(char* dst, std::size_t n, std::vector<int>* fds);

  int fd_;
  std::string path_;
  int timeout_ms_;
};

// "FailedPrecondition: ..." -> Status(kFailedPrecondition, "..."); unknown codes -> kInternal.
Status StatusFromWire(const std::string& error);

// A message as JSON for people and scripts (`hoist ctl --json`): proto field names, every
// singular scalar (defaults included), set sub-messages only, enums by name, bytes in base64, and
// 64-bit integers as JSON numbers (protobuf's own printer makes them strings). Strings are as they
// are; dump with error_handler_t::replace if they may hold invalid UTF-8.
nlohmann::json MessageJson(const google::protobuf::Message& m);

// Closes every descriptor in fds and clears it.
void CloseAll(std::vector<int>* fds);

}  // namespace hoist::rank
