// The storage ceiling: reads whole files with O_DIRECT (or buffered pread with --buffered),
// T threads each with its own aligned buffer, chunks handed out in file order; prints JSON.
// Run after dropping the page cache to measure the disk. Usage:
//   hoist-bench-io [--buffered] [--threads T] [--chunk-mib M] FILE...
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  bool buffered = false;
  int threads = 16;
  size_t chunk = 8ull << 20;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--buffered")
      buffered = true;
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--chunk-mib" && i + 1 < argc)
      chunk = std::strtoull(argv[++i], nullptr, 10) << 20;
    else
      files.push_back(a);
  }
  struct Job {
    int fd;
    size_t off, len;
  };
  std::vector<Job> jobs;
  std::vector<int> fds;
  size_t total = 0;
  for (const auto& f : files) {
    int fd = open(f.c_str(), O_RDONLY | (buffered ? 0 : O_DIRECT));
    if (fd < 0) {
      std::perror(f.c_str());
      return 1;
    }
    struct stat st;
    fstat(fd, &st);
    fds.push_back(fd);
    for (size_t off = 0; off < (size_t)st.st_size; off += chunk) {
      size_t len = std::min(chunk, (size_t)st.st_size - off);
      jobs.push_back({fd, off, len});
      total += len;
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      void* buf = nullptr;
      if (posix_memalign(&buf, 4096, chunk) != 0) {
        failed = true;
        return;
      }
      for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
        const Job& job = jobs[j];
        size_t want = buffered ? job.len : (job.len + 4095) & ~size_t(4095);
        ssize_t r = pread(job.fd, buf, want, (off_t)job.off);
        if (r < (ssize_t)job.len) {
          failed = true;
          break;
        }
      }
      std::free(buf);
    });
  }
  for (auto& t : pool) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int fd : fds) close(fd);
  if (failed) {
    std::fprintf(stderr, "read failed\n");
    return 1;
  }
  std::printf(
      "{\"bytes\": %zu, \"seconds\": %.4f, \"gib_s\": %.3f, \"threads\": %d, \"buffered\": %s}\n",
      total, s, total / (1024.0 * 1024 * 1024) / s, threads, buffered ? "true" : "false");
  return 0;
}
