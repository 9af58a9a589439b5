#include "daemon/serve_access.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

namespace hoist::rank {
namespace {

constexpr const char* kAclXattr = "system.posix_acl_access";

std::string Errno(const std::string& path, const std::string& what) {
  return path + ": " + what + ": " + std::strerror(errno);
}

std::string Octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(Fd&& other) noexcept : fd(other.fd) { other.fd = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// The listed uids the file system must let in: not the daemon's own, not root (who needs no
// grant), sorted and unique (as an ACL wants them).
std::vector<uid_t> OthersToAdmit(const std::vector<uid_t>& allow) {
  std::vector<uid_t> out;
  for (uid_t u : allow) {
    if (u != ::geteuid() && u != 0) out.push_back(u);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Linux's POSIX ACL xattr (linux/posix_acl_xattr.h): a little-endian version 2 header, then
// (tag u16, perm u16, id u32) entries sorted by tag, then id.
std::string AclXattr(unsigned owner_perm, unsigned user_perm, const std::vector<uid_t>& users) {
  enum : std::uint16_t { kUserObj = 1, kUser = 2, kGroupObj = 4, kMask = 0x10, kOther = 0x20 };
  std::string out;
  auto put = [&out](std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto entry = [&put](std::uint16_t tag, unsigned perm, std::uint32_t id) {
    put(tag, 2);
    put(perm, 2);
    put(id, 4);
  };
  constexpr std::uint32_t kNoId = 0xffffffffu;
  put(2, 4);
  entry(kUserObj, owner_perm, kNoId);
  for (uid_t u : users) entry(kUser, user_perm, u);
  entry(kGroupObj, 0, kNoId);
  entry(kMask, user_perm, kNoId);
  entry(kOther, 0, kNoId);
  return out;
}

// Sets the access of `path` (fd >= 0: through it): `private_mode` alone when `users` is empty;
// else an ACL that adds `user_perm` for each of them, or `open_mode` without ACL support.
Result<Admission> SetAccess(int fd, const std::string& path, mode_t private_mode, mode_t open_mode,
                            unsigned user_perm, const std::vector<uid_t>& users) {
  auto chmod_to = [&](mode_t m) { return fd >= 0 ? ::fchmod(fd, m) : ::chmod(path.c_str(), m); };
  if (chmod_to(private_mode) != 0)
    return Status::IoError(Errno(path, "chmod " + Octal(private_mode)));
  if (users.empty()) {
    // Drop an ACL an earlier run may have left (a plain chmod keeps its user entries).
    const int r = fd >= 0 ? ::fremovexattr(fd, kAclXattr) : ::removexattr(path.c_str(), kAclXattr);
    if (r != 0 && errno != ENODATA && errno != EOPNOTSUPP) {
      return Status::IoError(Errno(path, "removing its ACL"));
    }
    return Admission::kPrivate;
  }
  const std::string acl = AclXattr((private_mode >> 6) & 7, user_perm, users);
  const int r = fd >= 0 ? ::fsetxattr(fd, kAclXattr, acl.data(), acl.size(), 0)
                        : ::setxattr(path.c_str(), kAclXattr, acl.data(), acl.size(), 0);
  if (r == 0) return Admission::kAcl;
  if (errno != EOPNOTSUPP) return Status::IoError(Errno(path, "setting its ACL"));
  if (chmod_to(open_mode) != 0) return Status::IoError(Errno(path, "chmod " + Octal(open_mode)));
  return Admission::kModeBits;
}

bool HasAcl(const std::string& path) { return ::getxattr(path.c_str(), kAclXattr, nullptr, 0) > 0; }

// An existing directory hoist did not create: one that is safe to put sockets in, as it is.
Status CheckUnmanaged(const std::string& dir, const struct stat& st) {
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return Status::InvalidArgument(dir + ": socket directory is owned by uid " +
                                   std::to_string(st.st_uid) + ", not by this daemon's uid " +
                                   std::to_string(::geteuid()) + " or root");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return Status::InvalidArgument(
        dir + ": socket directory (mode " + Octal(st.st_mode) +
        ") is writable by its group or others without the sticky bit: anyone could replace the "
        "socket; use a private directory (hoist creates a missing one 0700)");
  }
  return Status::Ok();
}

// Every uid in `users` can search every directory from / down to `dir` (see the header).
Status CheckReachable(const std::string& dir, const std::vector<uid_t>& users) {
  if (users.empty()) return Status::Ok();
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(dir, ec);
  if (ec) return Status::IoError(dir + ": " + ec.message());
  std::filesystem::path at = "/";
  std::vector<std::filesystem::path> chain = {at};
  for (const auto& part : canonical.relative_path()) chain.push_back(at /= part);
  for (const auto& p : chain) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return Status::IoError(Errno(p.string(), "stat"));
    if ((st.st_mode & (S_IXGRP | S_IXOTH)) != 0 || HasAcl(p.string())) continue;
    for (uid_t u : users) {
      if (u == st.st_uid && (st.st_mode & S_IXUSR) != 0) continue;
      return Status::InvalidArgument(
          "--allow-uid " + std::to_string(u) + " could never reach the socket: " + p.string() +
          " (mode " + Octal(st.st_mode) + ", owner uid " + std::to_string(st.st_uid) +
          ") lets neither its group nor others search it, and hoist does not change a directory "
          "it did not create; choose a --socket-dir that uid can reach (a missing one is created "
          "with access for exactly the allowed uids)");
    }
  }
  return Status::Ok();
}

// flock on `dir`'s parent for at most 10 s, so that ranks preparing one directory take turns.
// Without a lock (a file system that has none) the preparation still runs.
Fd LockParent(const std::string& dir) {
  std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (parent.empty()) parent = ".";
  Fd fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fd.fd >= 0 && ::flock(fd.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fd;
}

}  // namespace

bool UidAllowed(uid_t uid, const std::vector<uid_t>& allow, uid_t self) {
  if (allow.empty()) return uid == self;
  return std::find(allow.begin(), allow.end(), uid) != allow.end();
}

Result<Admission> PrepareSocketDir(const std::string& dir, const std::vector<uid_t>& allow) {
  if (dir.empty()) return Status::InvalidArgument("socket directory is empty");
  std::error_code ec;
  const std::filesystem::path p(dir);
  if (p.has_parent_path() && !std::filesystem::exists(p.parent_path(), ec)) {
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) return Status::IoError(dir + ": creating its parent: " + ec.message());
  }
  const Fd lock = LockParent(dir);
  bool created = ::mkdir(dir.c_str(), 0700) == 0;
  if (!created && errno != EEXIST) return Status::IoError(Errno(dir, "mkdir"));
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::IoError(Errno(dir, "lstat"));
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + ": socket directory is not a directory (or is a link)");
  }
  const Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.fd < 0 || ::fstat(fd.fd, &st) != 0) return Status::IoError(Errno(dir, "open"));
  if (!S_ISDIR(st.st_mode)) {  // replaced since the lstat
    return Status::InvalidArgument(dir + ": socket directory is not a directory (or is a link)");
  }
  const std::string marker = dir + "/" + kManagedMarker;
  if (created) {
    const Fd m(::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (m.fd < 0) return Status::IoError(Errno(marker, "creating"));
  }
  struct stat ms;
  const bool managed = st.st_uid == ::geteuid() && ::lstat(marker.c_str(), &ms) == 0 &&
                       S_ISREG(ms.st_mode) && ms.st_uid == ::geteuid();
  const std::vector<uid_t> others = OthersToAdmit(allow);
  Admission how = Admission::kUnmanaged;
  if (managed) {
    HOIST_ASSIGN_OR_RETURN(how, SetAccess(fd.fd, dir, 0700, 0711, /*--x*/ 1, others));
  } else {
    HOIST_RETURN_IF_ERROR(CheckUnmanaged(dir, st));
  }
  HOIST_RETURN_IF_ERROR(CheckReachable(dir, others));
  return how;
}

Result<Admission> AdmitToSocket(const std::string& path, const std::vector<uid_t>& allow) {
  return SetAccess(-1, path, 0600, 0666, /*rw-*/ 6, OthersToAdmit(allow));
}

}  // namespace hoist::rank
