// Zero-copy H2D from the page cache: registers a hot checkpoint's file mappings with
// cudaHostRegister (read-only) and copies from them straight into device memory, with no staging
// fill. Measures what such a path would cost and give, on the files given:
//   register: T threads pin chunks of C bytes in parallel (aggregate GB/s);
//   copy:     one stream copies every registered chunk (CUDA events; GiB/s);
//   rows:     cudaMemcpy2DAsync of half rows (width W, pitch 2W: a tp 2 row-parallel shard)
//             from registered chunks, for each W given (GiB/s of the bytes moved);
//   unregister: every chunk (GB/s);
//   pipelined: T threads register chunks in order while one stream copies each as it is ready,
//             end to end from the first register to the last copy (GiB/s), then unregisters.
// Files should be hot (cat them first). Prints one JSON line.
// Usage: hoist-bench-zc [--threads T>=1] [--chunk-mib C>=1] [--rows W>=1,...] FILE...
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

struct Chunk {
  char* ptr;
  size_t len;
};

struct Args {
  int threads = 8;
  size_t chunk = 64ull << 20;
  std::vector<size_t> row_widths;
  std::vector<std::string> files;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--threads" && i + 1 < argc) {
      a.threads = std::atoi(argv[++i]);
    } else if (s == "--chunk-mib" && i + 1 < argc) {
      a.chunk = std::strtoull(argv[++i], nullptr, 10) << 20;
    } else if (s == "--rows" && i + 1 < argc) {
      for (char* p = argv[++i]; *p;) {
        a.row_widths.push_back(std::strtoull(p, &p, 10));
        if (*p == ',') ++p;
      }
    } else {
      a.files.push_back(s);
    }
  }
  return a;
}

// Maps each file's whole pages read-only (a last partial page is left out) and cuts the mappings
// into page-aligned chunks. Exits with 2, naming the file, when it cannot.
std::vector<Chunk> MapChunks(const Args& a, size_t* total) {
  std::vector<Chunk> chunks;
  *total = 0;
  for (const std::string& f : a.files) {
    const int fd = open(f.c_str(), O_RDONLY);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0) {
      std::fprintf(stderr, "%s: %s\n", f.c_str(), std::strerror(errno));
      std::exit(2);
    }
    const size_t n = static_cast<size_t>(st.st_size) & ~size_t{4095};
    if (n == 0) {
      std::fprintf(stderr, "%s: smaller than one page\n", f.c_str());
      std::exit(2);
    }
    char* p = static_cast<char*>(mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0));
    const int mmap_errno = errno;
    close(fd);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "%s: mmap: %s\n", f.c_str(), std::strerror(mmap_errno));
      std::exit(2);
    }
    for (size_t off = 0; off < n; off += a.chunk)
      chunks.push_back({p + off, std::min(a.chunk, n - off)});
    *total += n;
  }
  return chunks;
}

// Runs fn(i) for every chunk index on T threads, each taking the next index.
template <typename Fn>
void ParallelChunks(size_t count, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < count;) fn(i);
    });
  }
  for (std::thread& th : pool) th.join();
}

std::atomic<int> g_failures{0};

void Register(const Chunk& c) {
  if (!Ok(cudaHostRegister(c.ptr, c.len, cudaHostRegisterReadOnly), "cudaHostRegister"))
    ++g_failures;
}
void Unregister(const Chunk& c) {
  if (!Ok(cudaHostUnregister(c.ptr), "cudaHostUnregister")) ++g_failures;
}

// Event-timed milliseconds of everything fn enqueues on s.
template <typename Fn>
float Timed(cudaStream_t s, Fn fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  fn();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

// Enqueues one chunk's copy to dst on s.
void CopyChunk(cudaStream_t s, const Chunk& c, char* dst) {
  if (!Ok(cudaMemcpyAsync(dst, c.ptr, c.len, cudaMemcpyHostToDevice, s), "copy")) ++g_failures;
}

double CopyAll(cudaStream_t s, const std::vector<Chunk>& chunks, char* dev) {
  return Timed(s, [&] {
    size_t off = 0;
    for (const Chunk& c : chunks) {
      CopyChunk(s, c, dev + off);
      off += c.len;
    }
  });
}

// Half of every 2W-byte row of every chunk, as a 2-D copy per chunk.
double CopyRows(cudaStream_t s, const std::vector<Chunk>& chunks, char* dev, size_t w,
                size_t* moved) {
  *moved = 0;
  return Timed(s, [&] {
    for (const Chunk& c : chunks) {
      const size_t rows = c.len / (2 * w);
      if (rows == 0) continue;
      if (!Ok(cudaMemcpy2DAsync(dev + *moved, w, c.ptr, 2 * w, w, rows, cudaMemcpyHostToDevice, s),
              "2d"))
        ++g_failures;
      *moved += w * rows;
    }
  });
}

// Registers in order on T threads while the stream copies each chunk once it is registered.
double Pipelined(cudaStream_t s, const std::vector<Chunk>& chunks, int threads, char* dev,
                 double* first_copy_s) {
  std::vector<char> ready(chunks.size(), 0);  // guarded by mu
  std::mutex mu;
  std::condition_variable cv;
  const Clock::time_point t0 = Clock::now();
  std::thread producers([&] {
    ParallelChunks(chunks.size(), threads, [&](size_t i) {
      Register(chunks[i]);
      {
        std::lock_guard<std::mutex> l(mu);
        ready[i] = 1;
      }
      cv.notify_all();
    });
  });
  size_t off = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return ready[i] != 0; });
    l.unlock();
    if (i == 0) *first_copy_s = Since(t0);
    CopyChunk(s, chunks[i], dev + off);
    off += chunks[i].len;
  }
  cudaStreamSynchronize(s);
  const double total = Since(t0);
  producers.join();
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const bool zero_width =
      std::find(a.row_widths.begin(), a.row_widths.end(), size_t{0}) != a.row_widths.end();
  if (a.files.empty() || a.threads < 1 || a.chunk < 4096 || zero_width) {
    std::fprintf(
        stderr,
        "usage: hoist-bench-zc [--threads T>=1] [--chunk-mib C>=1] [--rows W>=1,...] FILE...\n");
    return 2;
  }
  size_t total = 0;
  const std::vector<Chunk> chunks = MapChunks(a, &total);  // file errors before the device
  if (!Ok(cudaSetDevice(0), "cudaSetDevice") || !Ok(cudaFree(nullptr), "init")) return 1;
  char* dev = nullptr;
  if (!Ok(cudaMalloc(&dev, total), "cudaMalloc")) return 1;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const double gb = total / 1e9, gib = total / double(1ull << 30);

  Clock::time_point t = Clock::now();
  ParallelChunks(chunks.size(), a.threads, [&](size_t i) { Register(chunks[i]); });
  const double reg_s = Since(t);
  const double copy1 = CopyAll(s, chunks, dev), copy2 = CopyAll(s, chunks, dev);
  std::string rows_json;
  for (size_t w : a.row_widths) {
    size_t moved = 0;
    const double ms = CopyRows(s, chunks, dev, w, &moved);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s{\"width\": %zu, \"ms\": %.2f, \"gib_s\": %.2f}",
                  rows_json.empty() ? "" : ", ", w, ms, moved / double(1ull << 30) / (ms / 1e3));
    rows_json += buf;
  }
  t = Clock::now();
  ParallelChunks(chunks.size(), a.threads, [&](size_t i) { Unregister(chunks[i]); });
  const double unreg_s = Since(t);

  double first = 0;
  const double pipe_s = Pipelined(s, chunks, a.threads, dev, &first);
  t = Clock::now();
  ParallelChunks(chunks.size(), a.threads, [&](size_t i) { Unregister(chunks[i]); });
  const double unreg2_s = Since(t);

  std::printf(
      "{\"bytes\": %zu, \"chunks\": %zu, \"threads\": %d, \"chunk_mib\": %zu, \"register_s\": %.4f,"
      " \"register_gb_s\": %.1f, \"copy_ms\": [%.2f, %.2f], \"copy_gib_s\": %.2f,"
      " \"rows\": [%s], \"unregister_s\": %.4f, \"unregister_gb_s\": %.1f,"
      " \"pipelined_s\": %.4f, \"pipelined_gib_s\": %.2f, \"pipelined_first_copy_ms\": %.2f,"
      " \"unregister2_s\": %.4f, \"failures\": %d}\n",
      total, chunks.size(), a.threads, a.chunk >> 20, reg_s, gb / reg_s, copy1, copy2,
      gib / (std::min(copy1, copy2) / 1e3), rows_json.c_str(), unreg_s, gb / unreg_s, pipe_s,
      gib / pipe_s, first * 1e3, unreg2_s, g_failures.load());
  cudaFree(dev);
  return g_failures.load() == 0 ? 0 : 1;
}
