// The storage ceiling: reads whole files with O_DIRECT (or buffered pread with --buffered),
// T threads, chunks handed out in file order; prints JSON. Each thread reads with blocking pread
// (one request in flight per thread) or, with --depth D, keeps D requests in flight through
// Linux native AIO (io_submit), so T x D requests can be queued at the device: the deepest queue
// a reader can give the disk. Run after dropping the page cache to measure the disk. Usage:
//   hoist-bench-io [--buffered] [--threads T] [--chunk-mib M] [--depth D] FILE...
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

struct Job {
  int fd;
  size_t off, len;
};

// One thread's share with `depth` O_DIRECT requests in flight (native AIO); false on failure.
bool ReadQueued(const std::vector<Job>& jobs, std::atomic<size_t>& next, size_t chunk, int depth) {
  aio_context_t ctx = 0;
  if (syscall(SYS_io_setup, depth, &ctx) != 0) return false;
  std::vector<void*> bufs(depth, nullptr);
  std::vector<iocb> cbs(depth);
  std::vector<size_t> want(depth, 0);
  bool ok = true;
  int inflight = 0;
  auto submit = [&](int k) {
    const size_t j = next.fetch_add(1);
    if (j >= jobs.size()) return false;
    std::memset(&cbs[k], 0, sizeof(iocb));
    cbs[k].aio_fildes = jobs[j].fd;
    cbs[k].aio_lio_opcode = IOCB_CMD_PREAD;
    cbs[k].aio_buf = reinterpret_cast<__u64>(bufs[k]);
    cbs[k].aio_nbytes = (jobs[j].len + 4095) & ~size_t(4095);
    cbs[k].aio_offset = jobs[j].off;
    cbs[k].aio_data = k;
    want[k] = jobs[j].len;
    iocb* p = &cbs[k];
    if (syscall(SYS_io_submit, ctx, 1, &p) != 1) {
      ok = false;
      return false;
    }
    ++inflight;
    return true;
  };
  for (int k = 0; k < depth && ok; ++k) {
    if (posix_memalign(&bufs[k], 4096, chunk) != 0) ok = false;
    if (ok && !submit(k)) break;
  }
  std::vector<io_event> ev(depth);
  while (ok && inflight > 0) {
    const long n = syscall(SYS_io_getevents, ctx, 1, depth, ev.data(), nullptr);
    if (n < 0) {
      ok = errno == EINTR;
      continue;
    }
    for (long e = 0; e < n; ++e) {
      --inflight;
      const int k = static_cast<int>(ev[e].data);
      if (ev[e].res < static_cast<long long>(want[k])) ok = false;
      if (ok) submit(k);
    }
  }
  syscall(SYS_io_destroy, ctx);
  for (void* b : bufs) std::free(b);
  return ok;
}

int main(int argc, char** argv) {
  bool buffered = false;
  int depth = 0;
  int threads = 16;
  size_t chunk = 8ull << 20;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--buffered")
      buffered = true;
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--depth" && i + 1 < argc)
      depth = std::atoi(argv[++i]);
    else if (a == "--chunk-mib" && i + 1 < argc)
      chunk = std::strtoull(argv[++i], nullptr, 10) << 20;
    else
      files.push_back(a);
  }
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
      if (depth > 0 && !buffered) {
        if (!ReadQueued(jobs, next, chunk, depth)) failed = true;
        return;
      }
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
      "{\"bytes\": %zu, \"seconds\": %.4f, \"gib_s\": %.3f, \"threads\": %d, \"depth\": %d, "
      "\"buffered\": %s}\n",
      total, s, total / (1024.0 * 1024 * 1024) / s, threads, depth > 0 ? depth : 1,
      buffered ? "true" : "false");
  return 0;
}
