#include "daemon/serve_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace hoist::rank {
namespace {

using Clock = std::chrono::steady_clock;

Status Errno(const std::string& path, const std::string& what, int err) {
  return Status::IoError(path + ": " + what + ": " + std::strerror(err));
}

// Waits until fd is ready for `events` or the deadline passes.
Status WaitFor(int fd, short events, Clock::time_point deadline, const std::string& path,
               const char* what) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status::IoError(path + ": timed out " + what);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) return Errno(path, "poll", errno);
  }
}

std::string Base64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    std::uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<unsigned char>(in[i + 2]);
    for (std::size_t k = 0; k < 4; ++k) {
      out += i + k <= in.size() ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
    }
  }
  return out;
}

nlohmann::json FieldJson(const google::protobuf::Message& m,
                         const google::protobuf::FieldDescriptor* f, int index) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FD::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FD::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FD::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case FD::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case FD::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f);
    case FD::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FD::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
    case FD::CPPTYPE_STRING: {
      const std::string v = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      return f->type() == FD::TYPE_BYTES ? Base64(v) : v;
    }
    case FD::CPPTYPE_MESSAGE:
      return MessageJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
  }
  return nullptr;
}

}  // namespace

nlohmann::json MessageJson(const google::protobuf::Message& m) {
  nlohmann::json j = nlohmann::json::object();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      nlohmann::json a = nlohmann::json::array();
      for (int k = 0; k < r->FieldSize(m, f); ++k) a.push_back(FieldJson(m, f, k));
      j[f->name()] = std::move(a);
    } else if ((f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE &&
                f->containing_oneof() == nullptr) ||
               r->HasField(m, f)) {
      j[f->name()] = FieldJson(m, f, 0);
    }
  }
  return j;
}

std::string Frame(const std::string& payload) {
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + payload;
}

void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) ::close(fd);
  fds->clear();
}

Status StatusFromWire(const std::string& error) {
  static const std::pair<Code, const char*> kCodes[] = {
      {Code::kInvalidArgument, "InvalidArgument"},
      {Code::kNotFound, "NotFound"},
      {Code::kCorrupt, "Corrupt"},
      {Code::kIoError, "IoError"},
      {Code::kUnsupported, "Unsupported"},
      {Code::kFailedPrecondition, "FailedPrecondition"},
      {Code::kResourceExhausted, "ResourceExhausted"},
      {Code::kAborted, "Aborted"},
      {Code::kInternal, "Internal"},
  };
  for (const auto& [code, name] : kCodes) {
    const std::string prefix = std::string(name) + ": ";
    if (error.rfind(prefix, 0) == 0) return Status(code, error.substr(prefix.size()));
  }
  return Status::Internal(error.empty() ? "daemon replied not ok without a message" : error);
}

Result<std::unique_ptr<DaemonConnection>> DaemonConnection::Connect(const std::string& socket_path,
                                                                    int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument(socket_path + ": socket path is empty or longer than " +
                                   std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(socket_path, "socket", errno);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EACCES || err == EPERM) {
      return Status::FailedPrecondition(
          socket_path + ": connect: " + std::strerror(err) + ": uid " +
          std::to_string(::geteuid()) +
          " is not admitted to this socket (the daemon's --allow-uid list decides)");
    }
    return Status::NotFound(socket_path + ": connect: " + std::strerror(err) +
                            " (is `hoist serve` running?)");
  }
  return std::unique_ptr<DaemonConnection>(new DaemonConnection(fd, socket_path, timeout_ms));
}

DaemonConnection::~DaemonConnection() {
  if (fd_ >= 0) ::close(fd_);
}

Status DaemonConnection::ReadFull(char* dst, std::size_t n, std::vector<int>* fds) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  std::size_t got = 0;
  while (got < n) {
    HOIST_RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, path_, "waiting for the daemon's reply"));
    iovec iov{dst + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Errno(path_, "recvmsg", errno);
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fds != nullptr) {
          fds->push_back(received);
        } else {
          ::close(received);
        }
      }
    }
    if (r == 0) {
      return Status::IoError(path_ + ": the daemon closed the connection after " +
                             std::to_string(got) + " of " + std::to_string(n) + " bytes");
    }
    got += static_cast<std::size_t>(r);
  }
  return Status::Ok();
}

Result<proto::DaemonResponse> DaemonConnection::Call(const proto::DaemonRequest& request,
                                                     std::vector<int>* fds) {
  const std::string out = Frame(request.SerializeAsString());
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  std::size_t sent = 0;
  while (sent < out.size()) {
    HOIST_RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, path_, "sending a request"));
    const ssize_t w =
        ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Errno(path_, "send", errno);
    }
    sent += static_cast<std::size_t>(w);
  }
  std::vector<int> received;
  char header[4];
  Status s = ReadFull(header, sizeof header, &received);
  std::uint32_t n = 0;
  for (int i = 0; i < 4 && s.ok(); ++i)
    n |= static_cast<std::uint32_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  if (s.ok() && n > kMaxReplyBytes) {
    s = Status::Corrupt(path_ + ": reply of " + std::to_string(n) + " bytes exceeds the limit of " +
                        std::to_string(kMaxReplyBytes));
  }
  std::string body;
  if (s.ok()) {
    body.resize(n);
    s = ReadFull(body.data(), n, &received);
  }
  proto::DaemonResponse response;
  if (s.ok() && !response.ParseFromString(body)) {
    s = Status::Corrupt(path_ + ": the daemon's reply of " + std::to_string(n) +
                        " bytes does not parse");
  }
  if (s.ok() && !response.ok()) s = StatusFromWire(response.error()).Annotate(path_);
  if (!s.ok()) {
    CloseAll(&received);
    return s;
  }
  if (fds != nullptr) {
    fds->insert(fds->end(), received.begin(), received.end());
  } else {
    CloseAll(&received);
  }
  return response;
}

}  // namespace hoist::rank
