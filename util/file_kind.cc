#include "util/file_kind.h"

#include <sys/stat.h>

namespace hoist {

std::string_view FileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

std::string NotARegularFile(const std::string& path, mode_t mode) {
  return path + " is " + std::string(FileKindName(mode)) + ", not a regular file";
}

}  // namespace hoist
