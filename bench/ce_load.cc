// The copy engine's rate while the CPU copies beside it: what a staged load's DMA gets when its
// fill threads read the page cache and write the staging ring at the same time. T load threads
// copy a hot checkpoint's bytes (mapped and populated: no page faults) into the very ring the DMA
// reads (--dsts ring), or into ordinary memory of the ring's size that the DMA never reads
// (--dsts apart), in tasks of slot/T at rotating offsets, for as long as a case runs; meanwhile N
// GiB go host-to-device in slot-sized pieces, piece i from ring slot i % K on stream i % S. No
// ordering between the CPU's writes and the DMA's reads (the bytes are not checked, and unlike
// hoist's fill a thread may write the slot the DMA is reading): `ring` is harsher than a load,
// `apart` shows the contention for memory alone. The case's main thread, waiting for the copies,
// is one more runnable thread. Prints one JSON line per case: the copies' GiB/s (median and all
// runs) and the load threads' GB/s over the case.
//
//   hoist-bench-ce [--threads 0,8,16] [--streams 1,2] [--patterns contig,rows:W:P]
//                  [--dsts ring,apart] [--gib 8] [--runs 5] [--slots 4] [--slot-mib 16] FILE...
//
// Patterns as hoist-bench-fill's: contig copies the files' bytes in order; rows:W:P the last W
// bytes of every P-byte row (a tp 2 rank 1's half of a row-parallel weight).
#include <cuda_runtime.h>
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

#include "bench/cuda_check.h"
#include "bench/split.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Pattern {
  std::string name = "contig";
  size_t width = 0, pitch = 0;  // rows:W:P; 0 = contiguous
};

struct Options {
  std::vector<int> threads{0, 8, 16};
  std::vector<int> streams{1, 2};
  std::vector<Pattern> patterns{Pattern{}};
  std::vector<std::string> dsts{"ring"};
  double gib = 8;
  int runs = 5, slots = 4;
  size_t slot_bytes = 16u << 20;
  std::vector<std::string> files;
};

std::vector<int> Ints(const std::string& s) {
  std::vector<int> v;
  for (const std::string& x : Split(s, ',')) v.push_back(std::atoi(x.c_str()));
  return v;
}

bool ParsePattern(const std::string& s, Pattern* p) {
  p->name = s;
  if (s == "contig") return true;
  return std::sscanf(s.c_str(), "rows:%zu:%zu", &p->width, &p->pitch) == 2 && p->width > 0 &&
         p->width < p->pitch;
}

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--threads" && has) {
      o->threads = Ints(argv[++i]);
    } else if (a == "--streams" && has) {
      o->streams = Ints(argv[++i]);
    } else if (a == "--patterns" && has) {
      o->patterns.clear();
      for (const std::string& x : Split(argv[++i], ',')) {
        o->patterns.emplace_back();
        if (!ParsePattern(x, &o->patterns.back())) return false;
      }
    } else if (a == "--dsts" && has) {
      o->dsts.clear();
      for (const std::string& x : Split(argv[++i], ',')) {
        if (x != "ring" && x != "apart") return false;
        o->dsts.push_back(x);
      }
    } else if (a == "--gib" && has) {
      o->gib = std::atof(argv[++i]);
    } else if (a == "--runs" && has) {
      o->runs = std::atoi(argv[++i]);
    } else if (a == "--slots" && has) {
      o->slots = std::atoi(argv[++i]);
    } else if (a == "--slot-mib" && has) {
      o->slot_bytes = static_cast<size_t>(std::atoi(argv[++i])) << 20;
    } else if (a.rfind("--", 0) == 0) {
      return false;
    } else {
      o->files.push_back(a);
    }
  }
  return !o->files.empty() && o->runs > 0 && o->slots > 0 && o->slot_bytes > 0 && o->gib > 0;
}

struct Mapped {
  const unsigned char* p = nullptr;
  size_t n = 0;
};

// Maps every file read-only and populates it; exits on failure.
std::vector<Mapped> MapAll(const std::vector<std::string>& files) {
  std::vector<Mapped> out;
  for (const std::string& f : files) {
    const int fd = open(f.c_str(), O_RDONLY);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
      std::fprintf(stderr, "hoist-bench-ce: cannot open %s\n", f.c_str());
      std::exit(1);
    }
    void* p = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "hoist-bench-ce: cannot map %s\n", f.c_str());
      std::exit(1);
    }
    madvise(p, st.st_size, MADV_POPULATE_READ);
    out.push_back(Mapped{static_cast<const unsigned char*>(p), static_cast<size_t>(st.st_size)});
  }
  return out;
}

// One load thread: copies tasks of `task` bytes from its share of the files into the ring, in
// the pattern, until `stop`; adds the bytes it wrote to *bytes.
void LoadLoop(const std::vector<Mapped>& src, const Pattern& pat, unsigned char* ring,
              size_t ring_bytes, size_t task, int tid, int nthreads, const std::atomic<bool>* stop,
              std::atomic<uint64_t>* bytes) {
  uint64_t done = 0;
  // Threads spread over the files and, within one, over its length (2026-12-03 measurements: calls
  // 1-2 started every thread of a file at its offset 0, so that their reads partly shared lines).
  const size_t nf = src.size(), per_file = (nthreads + nf - 1) / nf;
  const size_t pitch = pat.pitch ? pat.pitch : task, width = pat.pitch ? pat.width : task;
  size_t f = tid % nf, j = tid;
  size_t off = src[f].n / per_file * (tid / nf) / pitch * pitch;
  while (!stop->load(std::memory_order_relaxed)) {
    unsigned char* dst = ring + (j * task) % ring_bytes;
    j += nthreads;
    for (size_t w = 0; w + width <= task;) {
      if (off + pitch > src[f].n) {
        off = 0;
        f = (f + 1) % src.size();
      }
      std::memcpy(dst + w, src[f].p + off + (pitch - width), width);
      off += pitch;
      w += width;
    }
    done += task / width * width;
  }
  bytes->fetch_add(done);
}

// Copies `n` bytes host-to-device in slot-sized pieces over the streams; returns seconds.
double CopyPass(unsigned char* ring, const Options& o, unsigned char* dev, size_t n,
                const std::vector<cudaStream_t>& streams) {
  CHECK(cudaDeviceSynchronize());
  const Clock::time_point a = Clock::now();
  size_t i = 0;
  for (size_t off = 0; off < n; off += o.slot_bytes, ++i) {
    const size_t len = std::min(o.slot_bytes, n - off);
    CHECK(cudaMemcpyAsync(dev + off, ring + (i % o.slots) * o.slot_bytes, len,
                          cudaMemcpyHostToDevice, streams[i % streams.size()]));
  }
  CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double>(Clock::now() - a).count();
}

void RunCase(const Options& o, const std::vector<Mapped>& src, const Pattern& pat, int nthreads,
             int nstreams, unsigned char* ring, unsigned char* dst, const std::string& dst_name,
             unsigned char* dev, size_t n) {
  std::vector<cudaStream_t> streams(nstreams);
  for (cudaStream_t& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0};
  const size_t ring_bytes = o.slot_bytes * o.slots;
  const size_t task = std::max<size_t>(64u << 10, o.slot_bytes / 16);
  std::vector<std::thread> load;
  for (int t = 0; t < nthreads; ++t) {
    load.emplace_back(LoadLoop, std::cref(src), std::cref(pat), dst, ring_bytes, task, t, nthreads,
                      &stop, &bytes);
  }
  const Clock::time_point a = Clock::now();
  CopyPass(ring, o, dev, n, streams);  // warm-up, not recorded
  std::vector<double> gibs;
  for (int r = 0; r < o.runs; ++r)
    gibs.push_back(n / CopyPass(ring, o, dev, n, streams) / (1 << 30));
  stop.store(true);
  for (std::thread& t : load) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - a).count();
  for (cudaStream_t st : streams) CHECK(cudaStreamDestroy(st));
  std::vector<double> sorted = gibs;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "{\"threads\": %d, \"streams\": %d, \"pattern\": \"%s\", \"dst\": \"%s\", \"slots\": %d, "
      "\"slot_mib\": %zu, \"gib_s\": %.3f, \"cpu_gb_s\": %.2f, \"runs_gib_s\": [",
      nthreads, nstreams, pat.name.c_str(), dst_name.c_str(), o.slots, o.slot_bytes >> 20,
      sorted[sorted.size() / 2], bytes.load() / s / 1e9);
  for (size_t i = 0; i < gibs.size(); ++i) std::printf("%s%.3f", i ? ", " : "", gibs[i]);
  std::printf("]}\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!Parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: hoist-bench-ce [--threads 0,8,16] [--streams 1,2] "
                 "[--patterns contig,rows:W:P] [--dsts ring,apart] [--gib 8] [--runs 5] [--slots "
                 "4] [--slot-mib 16] "
                 "FILE...\n");
    return 2;
  }
  const std::vector<Mapped> src = MapAll(o.files);
  const size_t n = static_cast<size_t>(o.gib * (1ull << 30));
  CHECK(cudaSetDevice(0));
  unsigned char* ring = nullptr;
  unsigned char* dev = nullptr;
  CHECK(cudaMallocHost(&ring, o.slot_bytes * o.slots));
  std::memset(ring, 0x5a, o.slot_bytes * o.slots);
  std::vector<unsigned char> apart(o.slot_bytes * o.slots, 0x5a);
  CHECK(cudaMalloc(&dev, n));
  for (const Pattern& pat : o.patterns) {
    for (int t : o.threads) {
      for (const std::string& d : o.dsts) {
        unsigned char* dst = d == "ring" ? ring : apart.data();
        for (int s : o.streams) RunCase(o, src, pat, t, s, ring, dst, d, dev, n);
      }
    }
  }
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(ring));
  return 0;
}
