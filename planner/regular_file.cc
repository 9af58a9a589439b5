// Non-blocking open of regular files only. See regular_file.h for the contract.
#include "planner/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "planner/io_stats.h"
#include "util/file_kind.h"

namespace hoist::planner {
namespace {

Status OsError(const std::string& path, const char* call, int err) {
  std::string message = path + ": " + call + ": " + std::strerror(err);
  return err == ENOENT ? Status::NotFound(std::move(message)) : Status::IoError(std::move(message));
}

}  // namespace

Result<RegularFile> RegularFile::Open(const std::string& path, bool metadata) {
  // 1. stat (following symlinks: the caller has already checked where they lead) so that a
  //    FIFO or a device is never opened at all.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return OsError(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) return Status::Corrupt(NotARegularFile(path, st.st_mode));
  // 2. Non-blocking open: if the file was swapped for a FIFO since the stat, this returns at
  //    once instead of waiting for a writer.
  if (metadata) CountHeaderOpen();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return OsError(path, "open", errno);
  RegularFile file(fd, 0, 0);
  // 3. What was opened is what is read.
  if (::fstat(fd, &st) != 0) return OsError(path, "fstat", errno);
  if (!S_ISREG(st.st_mode)) return Status::Corrupt(NotARegularFile(path, st.st_mode));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return OsError(path, "fcntl", errno);
  }
  file.size_ = static_cast<std::uint64_t>(st.st_size);
  file.mtime_ns_ = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                   static_cast<std::int64_t>(st.st_mtim.tv_nsec);
  return file;
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), mtime_ns_(other.mtime_ns_) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    mtime_ns_ = other.mtime_ns_;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace hoist::planner
