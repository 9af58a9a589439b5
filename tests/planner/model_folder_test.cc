// The model folder and its files (planner/checkpoint.h, planner/regular_file.h): a folder that
// does not exist, is a file or has no config.json is a usage error (InvalidArgument) naming the
// path; a FIFO, a directory or a device in place of config.json, the index or a shard is refused
// without ever blocking (each open runs under a one-second bound, and a stuck one is released by
// opening the FIFO's other end), naming the file and what it is.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/hub.h"
#include "planner/regular_file.h"
#include "planner/safetensors.h"
#include "tests/launch/mpirun_util.h"
#include "tests/planner/ckpt_edit.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;
using hoist::testing::ScratchDir;

void ExpectStatus(const Status& s, Code code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos)
        << "missing '" << p << "' in: " << s.message();
  }
}

// OpenCheckpoint(dir), failing the test (not hanging it) if it takes more than a second. If it
// is stuck in an open of `fifo`, opening the write end releases it.
Status OpenBounded(const std::string& dir, const std::string& fifo) {
  auto future = std::async(std::launch::async, [dir] { return OpenCheckpoint(dir).status(); });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    ADD_FAILURE() << "OpenCheckpoint blocked on " << fifo;
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return future.get();
}

class ModelFolderTest : public ::testing::Test {
 protected:
  std::string Fixture(std::uint64_t shard_size = 1 << 16) {
    const std::string dir = scratch_.Sub("m" + std::to_string(n_++));
    testedit::Make(dir, "qwen3-tiny", shard_size);
    return fs::canonical(dir).string();
  }
  // Replaces `path` by a FIFO.
  static void MakeFifo(const std::string& path) {
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  }
  ScratchDir scratch_{"hoist-folder"};
  int n_ = 0;
};

TEST_F(ModelFolderTest, FolderThatIsNotAModelIsAUsageError) {
  const std::string missing = scratch_.Sub("no-such-model");
  Result<Checkpoint> r = OpenCheckpoint(missing);
  ASSERT_FALSE(r.ok());
  ExpectStatus(r.status(), Code::kInvalidArgument, {missing + ": the model folder does not exist"});

  const std::string file = scratch_.Sub("a-file");
  testedit::WriteText(file, "x");
  r = OpenCheckpoint(file);
  ASSERT_FALSE(r.ok());
  ExpectStatus(r.status(), Code::kInvalidArgument,
               {file + ": the model folder is a regular file, not a directory"});
  r = OpenCheckpoint(file + "/sub");
  ASSERT_FALSE(r.ok());
  ExpectStatus(r.status(), Code::kInvalidArgument, {"does not exist"});

  const std::string empty = scratch_.Sub("empty");
  fs::create_directories(empty);
  r = OpenCheckpoint(empty);
  ASSERT_FALSE(r.ok());
  ExpectStatus(r.status(), Code::kInvalidArgument,
               {empty + ": not a model folder: it has no config.json"});

  // Content errors stay content errors (exit 1): a config.json that is not JSON.
  const std::string bad = Fixture();
  testedit::WriteText(bad + "/config.json", "{not json");
  r = OpenCheckpoint(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt) << r.status().ToString();
}

TEST_F(ModelFolderTest, FifoInPlaceOfAnyFileNeverBlocks) {
  for (const char* which : {"config", "index", "shard", "single"}) {
    SCOPED_TRACE(which);
    const std::string w = which;
    const std::string dir = Fixture(w == "single" ? 0 : 1 << 16);
    std::string path;
    if (w == "config") path = dir + "/config.json";
    if (w == "index") path = dir + "/" + testedit::kIndex;
    if (w == "shard") path = dir + "/" + testedit::FileOf(dir, "model.norm.weight");
    if (w == "single") path = dir + "/model.safetensors";
    ASSERT_TRUE(fs::exists(path)) << path;
    MakeFifo(path);
    const auto t0 = std::chrono::steady_clock::now();
    ExpectStatus(OpenBounded(dir, path), Code::kCorrupt, {path + " is a FIFO, not a regular file"});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  }
}

TEST_F(ModelFolderTest, DirectoryOrDeviceInPlaceOfAFile) {
  const std::string dir = Fixture();
  const std::string shard = dir + "/" + testedit::FileOf(dir, "model.norm.weight");
  fs::remove(shard);
  fs::create_directory(shard);
  ExpectStatus(OpenBounded(dir, shard), Code::kCorrupt,
               {shard + " is a directory, not a regular file"});

  const std::string dir2 = Fixture();
  fs::remove(dir2 + "/config.json");
  fs::create_directory(dir2 + "/config.json");
  ExpectStatus(OpenBounded(dir2, ""), Code::kCorrupt,
               {dir2 + "/config.json is a directory, not a regular file"});

  // A character device (as root, e.g. in CI): /dev/null's numbers under a shard's name.
  const std::string dir3 = Fixture();
  const std::string dev = dir3 + "/" + testedit::FileOf(dir3, "model.norm.weight");
  fs::remove(dev);
  if (::mknod(dev.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs privileges";
  }
  ExpectStatus(OpenBounded(dir3, ""), Code::kCorrupt,
               {dev + " is a character device, not a regular file"});
}

// The helper itself: what it refuses before opening, and that a regular file opens.
TEST_F(ModelFolderTest, RegularFileOpensOnlyRegularFiles) {
  const std::string fifo = scratch_.Sub("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<RegularFile> f = RegularFile::Open(fifo);
  ASSERT_FALSE(f.ok());
  ExpectStatus(f.status(), Code::kCorrupt, {fifo + " is a FIFO, not a regular file"});
  Result<SafetensorsHeader> h = ReadSafetensorsHeader(fifo, nullptr);
  ASSERT_FALSE(h.ok());
  ExpectStatus(h.status(), Code::kCorrupt, {"is a FIFO"});
  Result<RegularFile> missing = RegularFile::Open(scratch_.Sub("none"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);

  const std::string file = scratch_.Sub("plain");
  testedit::WriteText(file, "12345");
  Result<RegularFile> ok = RegularFile::Open(file);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 5u);
  EXPECT_EQ(::fcntl(ok->fd(), F_GETFL) & O_NONBLOCK, 0) << "O_NONBLOCK must be cleared";
  char buf[5];
  EXPECT_EQ(::pread(ok->fd(), buf, 5, 0), 5);
}

// A hub cache ref that is a FIFO is not read (planner/hub.h), and never blocks.
TEST_F(ModelFolderTest, HubRefThatIsAFifoNeverBlocks) {
  const std::string cache = scratch_.Sub("hub");
  const std::string repo = cache + "/models--acme--tiny";
  fs::create_directories(repo + "/refs");
  fs::create_directories(repo + "/snapshots");
  MakeFifo(repo + "/refs/main");
  HubEnv env;
  env.hf_hub_cache = cache;
  auto future =
      std::async(std::launch::async, [env] { return ResolveModelPath("acme/tiny", env).status(); });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    ADD_FAILURE() << "ResolveModelPath blocked on the FIFO";
    const int fd = ::open((repo + "/refs/main").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  ExpectStatus(future.get(), Code::kInvalidArgument, {repo + "/refs/main"});
}

// `hoist plan` on a folder whose shard is a FIFO ends at once (exit 1), naming it.
TEST_F(ModelFolderTest, HoistPlanWithAFifoShardEndsAtOnce) {
  const std::string dir = Fixture();
  const std::string shard = dir + "/" + testedit::FileOf(dir, "model.norm.weight");
  MakeFifo(shard);
  const testing::RunResult r =
      testing::RunCommand({testing::HoistBin(), "plan", "--model", dir}, 20);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.output.find(shard + " is a FIFO, not a regular file"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hoist::planner
