// The fill ceiling: how fast T threads copy a hot checkpoint's bytes from fresh file mappings into
// a ring of staging slots, as hoist's fill threads do, with no device at all. It separates what a
// fill costs (page faults of a fresh mapping, the copy kernel, strided rows against contiguous
// bytes, the thread count) from the DMA it feeds. CPU only; prints one JSON line per case.
//
//   hoist-bench-fill [--threads 8,16] [--kernels memcpy,...] [--patterns contig,rows:W:P,...]
//                    [--runs 3] [--gib 4] [--populate] FILE...
//
// Patterns: contig reads the files' bytes in order; rows:W:P reads W bytes of every P-byte row,
// the last W (a tp 2 rank 1's half of a row-parallel weight), W < P. Each run maps the files
// afresh (as every load does), so page faults are part of the cost unless --populate, which
// populates the mapping (MADV_POPULATE_READ) before the clock starts. The ring is 4 x 16 MiB of
// ordinary touched memory; tasks of slot/T bytes are taken in order, as hoist's are.
// Kernels: memcpy (glibc, hoist's), movsb (rep movsb), pf-next (prefetch every line of the next
// row, then memcpy this one), pf-head (the next row's first 1 KiB), pf-far (every line of the row
// after next).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/split.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kSlot = 16ull << 20;
constexpr int kSlots = 4;

struct Row {  // one read: width bytes at file offset src, into the stream at dst
  int file;
  std::uint64_t src, width, dst;
};

struct Task {
  std::size_t begin, end;  // rows
};

// The rows of a pattern over the files, at most `limit` bytes, cut so that no row crosses a
// task boundary of `chunk` stream bytes (a row that would is split, as hoist's cut splits it).
std::vector<Row> MakeRows(const std::string& pattern, const std::vector<std::uint64_t>& sizes,
                          std::uint64_t limit, std::uint64_t chunk) {
  std::uint64_t width = 0, pitch = 0;
  if (pattern != "contig") {
    const std::vector<std::string> p = Split(pattern, ':');
    width = std::stoull(p.at(1));
    pitch = std::stoull(p.at(2));
  }
  std::vector<Row> rows;
  std::uint64_t dst = 0;
  auto add = [&](int f, std::uint64_t src, std::uint64_t w) {
    while (w > 0 && dst < limit) {
      const std::uint64_t room = std::min(chunk - dst % chunk, limit - dst);
      const std::uint64_t n = std::min(w, room);
      rows.push_back(Row{f, src, n, dst});
      src += n;
      w -= n;
      dst += n;
    }
  };
  for (std::size_t f = 0; f < sizes.size() && dst < limit; ++f) {
    if (pattern == "contig") {
      add(static_cast<int>(f), 0, sizes[f]);
      continue;
    }
    for (std::uint64_t r = 0; (r + 1) * pitch <= sizes[f] && dst < limit; ++r) {
      add(static_cast<int>(f), r * pitch + (pitch - width), width);
    }
  }
  return rows;
}

std::vector<Task> MakeTasks(const std::vector<Row>& rows, std::uint64_t chunk) {
  std::vector<Task> tasks;
  std::size_t b = 0;
  for (std::size_t i = 1; i <= rows.size(); ++i) {
    if (i == rows.size() || rows[i].dst / chunk != rows[b].dst / chunk) {
      tasks.push_back(Task{b, i});
      b = i;
    }
  }
  return tasks;
}

void MovsB(void* d, const void* s, std::size_t n) {
  asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

void PrefetchRange(const std::byte* p, std::uint64_t n) {
  for (std::uint64_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 3);
}

// Copies rows [t.begin, t.end) with `kernel` (one main() checked).
void CopyTask(const std::string& kernel, const Task& t, const std::vector<Row>& rows,
              const std::vector<const std::byte*>& maps, std::byte* ring) {
  auto src = [&](std::size_t i) { return maps[rows[i].file] + rows[i].src; };
  auto dst = [&](std::size_t i) { return ring + rows[i].dst % (kSlot * kSlots); };
  for (std::size_t i = t.begin; i < t.end; ++i) {
    const Row& r = rows[i];
    if (kernel == "memcpy") {
      std::memcpy(dst(i), src(i), r.width);
    } else if (kernel == "movsb") {
      MovsB(dst(i), src(i), r.width);
    } else if (kernel == "pf-next" || kernel == "pf-head" || kernel == "pf-far") {
      const std::size_t ahead = i + (kernel == "pf-far" ? 2 : 1);
      if (ahead < t.end) {
        const std::uint64_t w = kernel == "pf-head"
                                    ? std::min<std::uint64_t>(1024, rows[ahead].width)
                                    : rows[ahead].width;
        PrefetchRange(src(ahead), w);
      }
      std::memcpy(dst(i), src(i), r.width);
    }
  }
}

struct Mapped {
  std::vector<const std::byte*> maps;
  std::vector<std::uint64_t> sizes;
};

Mapped MapAll(const std::vector<int>& fds, const std::vector<std::uint64_t>& sizes, bool populate) {
  Mapped m;
  m.sizes = sizes;
  for (std::size_t f = 0; f < fds.size(); ++f) {
    void* p = ::mmap(nullptr, sizes[f], PROT_READ, MAP_SHARED, fds[f], 0);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    if (populate) ::madvise(p, sizes[f], MADV_POPULATE_READ);
    m.maps.push_back(static_cast<const std::byte*>(p));
  }
  return m;
}

void UnmapAll(const Mapped& m) {
  for (std::size_t f = 0; f < m.maps.size(); ++f) {
    ::munmap(const_cast<std::byte*>(m.maps[f]), m.sizes[f]);
  }
}

// One timed run: seconds of wall time and the threads' summed busy seconds.
std::pair<double, double> RunOnce(const std::string& kernel, int threads,
                                  const std::vector<Row>& rows, const std::vector<Task>& tasks,
                                  const Mapped& m, std::byte* ring) {
  std::atomic<std::size_t> next{0};
  std::vector<double> busy(threads, 0);
  const Clock::time_point a = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::size_t i; (i = next.fetch_add(1)) < tasks.size();) {
        const Clock::time_point x = Clock::now();
        CopyTask(kernel, tasks[i], rows, m.maps, ring);
        busy[t] += std::chrono::duration<double>(Clock::now() - x).count();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const double wall = std::chrono::duration<double>(Clock::now() - a).count();
  double sum = 0;
  for (double b : busy) sum += b;
  return {wall, sum};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts = {8, 16};
  std::vector<std::string> kernels = {"memcpy", "movsb", "pf-next", "pf-head", "pf-far"};
  std::vector<std::string> patterns = {"contig", "rows:4096:8192", "rows:9728:19456"};
  int runs = 3;
  double gib = 4;
  bool populate = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--threads") {
      thread_counts.clear();
      for (const std::string& x : Split(next(), ',')) thread_counts.push_back(std::stoi(x));
    } else if (a == "--kernels") {
      kernels = Split(next(), ',');
    } else if (a == "--patterns") {
      patterns = Split(next(), ',');
    } else if (a == "--runs") {
      runs = std::stoi(next());
    } else if (a == "--gib") {
      gib = std::stod(next());
    } else if (a == "--populate") {
      populate = true;
    } else {
      files.push_back(a);
    }
  }
  for (const std::string& k : kernels) {
    if (k != "memcpy" && k != "movsb" && k != "pf-next" && k != "pf-head" && k != "pf-far") {
      std::fprintf(stderr, "hoist-bench-fill: unknown kernel %s\n", k.c_str());
      return 2;
    }
  }
  std::vector<int> fds;
  std::vector<std::uint64_t> sizes;
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      std::perror(f.c_str());
      return 1;
    }
    fds.push_back(fd);
    sizes.push_back(static_cast<std::uint64_t>(st.st_size));
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: hoist-bench-fill [options] FILE...\n");
    return 2;
  }
  std::byte* ring = static_cast<std::byte*>(std::aligned_alloc(4096, kSlot * kSlots));
  std::memset(ring, 1, kSlot * kSlots);
  const std::uint64_t limit = static_cast<std::uint64_t>(gib * (1ull << 30));
  for (const std::string& pattern : patterns) {
    for (int threads : thread_counts) {
      const std::uint64_t chunk = std::max<std::uint64_t>(64 << 10, kSlot / threads);
      const std::vector<Row> rows = MakeRows(pattern, sizes, limit, chunk);
      const std::vector<Task> tasks = MakeTasks(rows, chunk);
      std::uint64_t bytes = 0;
      for (const Row& r : rows) bytes += r.width;
      for (const std::string& kernel : kernels) {
        std::vector<double> rates;
        double busy_last = 0;  // busy threads per wall second, last run
        for (int run = 0; run < runs; ++run) {
          const Mapped m = MapAll(fds, sizes, populate);
          const auto [wall, sum] = RunOnce(kernel, threads, rows, tasks, m, ring);
          UnmapAll(m);
          rates.push_back(bytes / wall / 1e9);
          busy_last = sum / wall;
        }
        std::vector<double> sorted = rates;
        std::sort(sorted.begin(), sorted.end());
        std::printf(
            "{\"kind\": \"fill\", \"pattern\": \"%s\", \"threads\": %d, \"kernel\": \"%s\", "
            "\"populate\": %s, \"bytes\": %llu, \"rows\": %zu, \"gb_s_median\": %.2f, "
            "\"gb_s\": [",
            pattern.c_str(), threads, kernel.c_str(), populate ? "true" : "false",
            static_cast<unsigned long long>(bytes), rows.size(), sorted[sorted.size() / 2]);
        for (std::size_t i = 0; i < rates.size(); ++i) {
          std::printf("%s%.2f", i ? ", " : "", rates[i]);
        }
        std::printf("], \"busy_threads\": %.2f}\n", busy_last);
        std::fflush(stdout);
      }
    }
  }
  std::free(ring);
  return 0;
}
