// Helpers for the mpirun integration tests (tests/launch/*mpirun_test.cc): run a command line in
// its own process group with a timeout (Open MPI allowed to run as root and oversubscribe), and
// read a safetensors file written by `hoist load --dump` with an independent minimal reader.
// Test code: failures are gtest expectations; nothing here throws across the helpers.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/reference/reference.h"
#include "tools/mkckpt.h"

// The --inject-* flags exist only in builds with test hooks (CMake HOIST_TEST_HOOKS, off in
// Release): the tests that inject faults skip without them, saying why.
#if HOIST_TEST_HOOKS
#define HOIST_SKIP_WITHOUT_TEST_HOOKS() static_cast<void>(0)
#else
#define HOIST_SKIP_WITHOUT_TEST_HOOKS() \
  GTEST_SKIP() << "built without HOIST_TEST_HOOKS: hoist has no --inject-* flags"
#endif

namespace hoist::testing {

// A fresh temp folder <tmp>/<prefix>-<pid> holding one hoist-mkckpt checkpoint per preset, each
// in several shards. The caller removes it.
inline std::filesystem::path MakeFixtures(const std::string& prefix,
                                          const std::vector<const char*>& presets,
                                          std::uint64_t seed) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root);
  for (const char* preset : presets) {
    tools::MkckptOptions o;
    o.preset = preset;
    o.out_dir = (root / preset).string();
    o.seed = seed;
    o.shard_size = 1 << 20;  // several shards
    o.threads = 2;
    const Status s = tools::MakeCheckpoint(o);
    if (!s.ok()) ADD_FAILURE() << preset << ": " << s.ToString();
  }
  return root;
}

struct RunResult {
  int exit_code = -1;  // -1: timed out (the process group was killed)
  double seconds = 0;
  std::string output;  // stdout + stderr
};

// Runs `argv` in its own process group with Open MPI allowed to run as root and oversubscribe;
// kills the group after `timeout_s`.
inline RunResult RunCommand(const std::vector<std::string>& argv, double timeout_s) {
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() /
      ("hoist-run-" + std::to_string(getpid()) + "-" +
       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    setenv("OMPI_MCA_btl", "self,vader", 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);
  RunResult r;
  int status = 0;
  while (true) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (w == pid) {
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (r.seconds > timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.exit_code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  std::filesystem::remove(log);
  return r;
}

// Reads a safetensors file written by `hoist load --dump` (own minimal reader).
inline std::map<std::string, hoist::testref::RefTensor> ReadDump(
    const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  std::vector<std::uint8_t> data((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
  std::map<std::string, hoist::testref::RefTensor> out;
  const nlohmann::json parsed = nlohmann::json::parse(header);
  for (const auto& [name, v] : parsed.items()) {
    if (name == "__metadata__") continue;
    hoist::testref::RefTensor t;
    t.dtype = v["dtype"];
    t.shape = v["shape"].get<std::vector<std::uint64_t>>();
    const auto begin = v["data_offsets"][0].get<std::size_t>();
    const auto end = v["data_offsets"][1].get<std::size_t>();
    t.data.assign(data.begin() + static_cast<std::ptrdiff_t>(begin),
                  data.begin() + static_cast<std::ptrdiff_t>(end));
    out[name] = std::move(t);
  }
  return out;
}

// Every rank's dump out/rank-<R>.safetensors holds exactly the reference's tensors for
// model_dir (dtype, shape, bytes).
inline void ExpectDumpsMatchReference(const std::filesystem::path& out, int np,
                                      const std::string& model_dir,
                                      hoist::testref::RefOptions ref) {
  for (int rank = 0; rank < np; ++rank) {
    ref.rank = rank;
    const auto want = hoist::testref::ReferenceRankTensors(model_dir, ref);
    const auto got = ReadDump(out / ("rank-" + std::to_string(rank) + ".safetensors"));
    ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
    for (const auto& [tname, w] : want) {
      auto it = got.find(tname);
      ASSERT_NE(it, got.end()) << "rank " << rank << " lacks " << tname;
      EXPECT_EQ(it->second.dtype, w.dtype) << tname;
      EXPECT_EQ(it->second.shape, w.shape) << tname;
      EXPECT_TRUE(it->second.data == w.data) << "rank " << rank << " " << tname << " differs";
    }
  }
}

}  // namespace hoist::testing
