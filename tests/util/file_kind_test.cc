#include "util/file_kind.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace hoist {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

// Each kind is made on disk and stat'ed, so the names follow what the OS reports.
TEST(FileKind, NamesWhatStatSays) {
  char tmpl[] = "/tmp/hoist-file-kind-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/regular") << "x";
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink("regular", (dir + "/link").c_str()), 0);
  EXPECT_EQ(FileKindName(ModeOf(dir + "/regular")), "a regular file");
  EXPECT_EQ(FileKindName(ModeOf(dir + "/fifo")), "a FIFO");
  EXPECT_EQ(FileKindName(ModeOf(dir)), "a directory");
  EXPECT_EQ(FileKindName(ModeOf(dir + "/link")), "a symbolic link");
  EXPECT_EQ(FileKindName(ModeOf("/dev/null")), "a character device");
  EXPECT_EQ(NotARegularFile(dir + "/fifo", ModeOf(dir + "/fifo")),
            dir + "/fifo is a FIFO, not a regular file");
  for (const char* f : {"/regular", "/fifo", "/link"}) ::unlink((dir + f).c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace hoist
