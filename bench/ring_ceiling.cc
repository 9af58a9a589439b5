// The ring DMA ceiling: the host-to-device rate that hoist's staging pattern can reach, for each
// kind of pinned host memory, with no reading or filling at all. K slots of M bytes (default
// 4 x 8 MiB, hoist's default ring) are copied round-robin into successive offsets of an N-byte
// cudaMalloc arena on one non-blocking stream, timed with CUDA events.
//   host kinds: mallochost (cudaMallocHost), register-thp (mmap + MADV_HUGEPAGE + touch +
//   cudaHostRegister: hoist's default staging), register-4k (the same with MADV_NOHUGEPAGE).
// Each kind reports the first pass into a freshly allocated arena ("fresh", as a daemon restore
// or a first load sees it) apart from the median of later passes into the same arena ("warm"),
// and how much of the ring the kernel backed with huge pages.
// Usage: hoist-bench-ring [GiB=8] [runs=5] [slots=4] [slot_mib=8] [kinds=all, or a comma list]
//                        [fill=cpu|dma|realloc|realloc-memset] (dma: the ring is written by a
//                        device-to-host copy, as a daemon's host cache is captured from the arena,
//                        and the arena is freed and allocated again before the first pass, as a
//                        restore after a release does; realloc: the same with a CPU-written ring;
//                        realloc-memset: then a device memset of the new arena, timed apart;
//                        realloc-wait: a second between the free and the first pass);
// one JSON line per kind. slots x slot_mib = GiB copies from that much distinct memory in pieces
// of slot_mib, as a daemon restore from its host cache does.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_check.h"

namespace {

// AnonHugePages (KiB) of the mapping that starts at `p`, from /proc/self/smaps; -1 if not found.
long HugeKib(const void* p) {
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(p));
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    if (line.rfind(start, 0) == 0) in = true;
    if (in && line.rfind("AnonHugePages:", 0) == 0) return std::atol(line.c_str() + 14);
  }
  return -1;
}

struct Ring {
  std::string kind;
  unsigned char* ptr = nullptr;
  size_t bytes = 0;
  long huge_kib = -1;
};

Ring MakeRing(const std::string& kind, size_t bytes) {
  Ring r{kind, nullptr, bytes};
  if (kind == "mallochost") {
    void* p = nullptr;
    CHECK(cudaMallocHost(&p, bytes));
    r.ptr = static_cast<unsigned char*>(p);
  } else {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::exit(1);
    madvise(p, bytes, kind == "register-thp" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    r.ptr = static_cast<unsigned char*>(p);
    std::memset(r.ptr, 0, bytes);
    r.huge_kib = HugeKib(p);
    CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
  }
  for (size_t i = 0; i < bytes; i += 4096) r.ptr[i] = static_cast<unsigned char>(i >> 12);
  return r;
}

void FreeRing(Ring& r) {
  if (r.kind == "mallochost") {
    CHECK(cudaFreeHost(r.ptr));
  } else {
    CHECK(cudaHostUnregister(r.ptr));
    munmap(r.ptr, r.bytes);
  }
}

// One pass: the arena filled slot by slot from the ring, in hoist's order. Milliseconds.
float Pass(const Ring& ring, unsigned char* arena, size_t n, size_t slot, cudaStream_t s,
           cudaEvent_t a, cudaEvent_t b) {
  const size_t slots = ring.bytes / slot;
  CHECK(cudaEventRecord(a, s));
  for (size_t off = 0, i = 0; off < n; off += slot, ++i) {
    CHECK(cudaMemcpyAsync(arena + off, ring.ptr + (i % slots) * slot, std::min(slot, n - off),
                          cudaMemcpyHostToDevice, s));
  }
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 8.0;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t slots = argc > 3 ? std::atoi(argv[3]) : 4;
  const size_t slot = (argc > 4 ? std::atoi(argv[4]) : 8) * (1ull << 20);
  const size_t n = static_cast<size_t>(gib * (1ull << 30));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const std::string only = argc > 5 ? argv[5] : "register-thp,mallochost,register-4k";
  const std::string fill = argc > 6 ? argv[6] : "cpu";
  for (const char* kind : {"register-thp", "mallochost", "register-4k"}) {
    if (("," + only + ",").find(std::string(",") + kind + ",") == std::string::npos) continue;
    Ring ring = MakeRing(kind, slots * slot);
    void* dev = nullptr;
    CHECK(cudaMalloc(&dev, n));
    if (fill == "dma") {
      CHECK(cudaMemset(dev, 0x5a, std::min(n, ring.bytes)));
      CHECK(cudaMemcpy(ring.ptr, dev, std::min(n, ring.bytes), cudaMemcpyDeviceToHost));
    }
    if (fill != "cpu") {  // the restore's arena is allocated after the capture freed one
      CHECK(cudaMemset(dev, 0x11, n));
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaFree(dev));
      CHECK(cudaMalloc(&dev, n));
      if (fill == "realloc-wait") std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    float touch_ms = 0;
    if (fill == "realloc-memset") {
      CHECK(cudaEventRecord(a, s));
      CHECK(cudaMemsetAsync(dev, 0, n, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaEventElapsedTime(&touch_ms, a, b));
    }
    const float fresh = Pass(ring, static_cast<unsigned char*>(dev), n, slot, s, a, b);
    std::vector<float> warm;
    for (int r = 0; r < runs; ++r)
      warm.push_back(Pass(ring, static_cast<unsigned char*>(dev), n, slot, s, a, b));
    std::sort(warm.begin(), warm.end());
    const float med = warm[warm.size() / 2];
    std::ostringstream runs_ms;
    for (size_t i = 0; i < warm.size(); ++i) runs_ms << (i ? ", " : "") << warm[i];
    std::printf(
        "{\"kind\": \"ring_ceiling\", \"host\": \"%s\", \"fill\": \"%s\", \"touch_ms\": %.3f, "
        "\"slots\": %zu, "
        "\"slot_mib\": %zu, "
        "\"bytes\": %zu, \"ring_huge_kib\": %ld, \"fresh_ms\": %.3f, \"warm_ms\": [%s], "
        "\"median_ms\": %.3f, \"gib_s\": %.3f, \"fresh_gib_s\": %.3f}\n",
        kind, fill.c_str(), touch_ms, slots, slot >> 20, n, ring.huge_kib, fresh,
        runs_ms.str().c_str(), med, n / (1024.0 * 1024 * 1024) / (med / 1e3),
        n / (1024.0 * 1024 * 1024) / (fresh / 1e3));
    std::fflush(stdout);
    CHECK(cudaFree(dev));
    FreeRing(ring);
  }
  return 0;
}
