// The first copy after a free: why a daemon restore issued right after `ctl release` copies ~11%
// slower than one issued a second later (measured 2026-11-30), and which way of giving device
// memory back avoids it. Each case frees (or unmaps) an N-byte arena that the GPU wrote, gets
// device memory back in its own way, and times the first host-to-device pass of a pinned ring into
// it, in 512 MiB segments (one CUDA event each), so the profile shows how long the slowdown lasts.
//   malloc:       cudaFree, then cudaMalloc again (what the daemon does today).
//   malloc-wait:  the same, one second between the free and the copy.
//   sleepN:       the same, N milliseconds between the free and the copy (how long it lasts).
//   sync:         the same, cudaDeviceSynchronize after the free (does the runtime wait for it?).
//   other:        two arenas written; one freed; the copy goes into the other (never freed):
//                 is the slowdown global, or the new memory's?
//   vmm:          cuMemUnmap + cuMemRelease of the physical memory, the virtual range kept;
//                 cuMemCreate + cuMemMap at the same address again (vLLM's sleep mode).
//   vmm-remap:    unmap and map the same physical handle again (nothing freed: a control).
//   pool:         cudaMallocFromPoolAsync / cudaFreeAsync on a pool with release threshold 0;
//                 its first allocation is timed too (first_alloc_ms).
//   fresh:        the first pass into an arena allocated with no free before it (a control).
//   probe:        the same as malloc, then 16 MiB probe copies into the new arena (a 1 ms pause
//                 between them) until one runs at 90% of the rate the same probe had before the
//                 free, 500 ms at most: can a release tell when the driver's clearing is done?
//                 Its line adds settle_ms (the free's start to the last probe's end), the probes
//                 made and the rate before and of each probe.
//   CASE/2:       any case with its passes' copies alternating between two streams (does a
//                 second copy engine get the rate back?).
// Usage: hoist-bench-free [GiB=8] [cases=all, comma list] [slot_mib=8] [slots=4]
// One JSON line per case: free_ms (the free or unmap call), back_ms (the allocation), the device's
// free memory before the arena was made, after the free and after the allocation (MiB), first-pass
// GiB/s, a second pass's GiB/s, and the first pass's per-segment GiB/s.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_check.h"

#define CHECK_CU(x)                                                         \
  do {                                                                      \
    CUresult err_ = (x);                                                    \
    if (err_ != CUDA_SUCCESS) {                                             \
      std::fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, err_); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

constexpr size_t kSegment = 512ull << 20;

struct Bench {
  size_t n = 0, slot = 0, ring_bytes = 0;
  unsigned char* ring = nullptr;
  cudaStream_t s{}, s2{};
  int streams = 1;
  cudaEvent_t join{};
  std::vector<cudaEvent_t> ev;
};

// One pass of the ring into `arena`; returns per-segment milliseconds.
std::vector<float> Pass(Bench& b, void* arena) {
  const size_t segs = b.n / kSegment;
  CHECK(cudaEventRecord(b.ev[0], b.s));
  if (b.streams == 2) CHECK(cudaStreamWaitEvent(b.s2, b.ev[0], 0));
  size_t i = 0;
  for (size_t off = 0; off < b.n; off += b.slot, ++i) {
    cudaStream_t on = b.streams == 2 && i % 2 ? b.s2 : b.s;
    CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(arena) + off,
                          b.ring + (i % (b.ring_bytes / b.slot)) * b.slot,
                          std::min(b.slot, b.n - off), cudaMemcpyHostToDevice, on));
    if ((off + b.slot) % kSegment == 0 && b.streams == 2) {
      CHECK(cudaEventRecord(b.join, b.s2));
      CHECK(cudaStreamWaitEvent(b.s, b.join, 0));
    }
    if ((off + b.slot) % kSegment == 0)
      CHECK(cudaEventRecord(b.ev[(off + b.slot) / kSegment], b.s));
  }
  CHECK(cudaEventSynchronize(b.ev[segs]));
  std::vector<float> ms(segs);
  for (size_t k = 0; k < segs; ++k) CHECK(cudaEventElapsedTime(&ms[k], b.ev[k], b.ev[k + 1]));
  return ms;
}

double GibS(size_t bytes, double ms) { return bytes / double(1ull << 30) / (ms / 1e3); }

// A VMM arena: one virtual range, one physical allocation mapped into it.
struct Vmm {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  size_t bytes = 0;
  CUmemAllocationProp prop{};
  void Map() {
    CHECK_CU(cuMemCreate(&h, bytes, &prop, 0));
    CHECK_CU(cuMemMap(va, bytes, 0, h, 0));
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_CU(cuMemSetAccess(va, bytes, &access, 1));
  }
};

size_t FreeMib() {
  size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  return free >> 20;
}

struct Outcome {
  double free_ms = 0, back_ms = 0, first_alloc_ms = 0;
  size_t before_mib = FreeMib(), freed_mib = 0, back_mib = 0;
  void* arena = nullptr;
  std::function<void()> cleanup;
  std::string extra_json;  // a case's own fields ("name": value, ...), written before "bytes"
};

void Written(void* p, size_t n) {
  CHECK(cudaMemset(p, 0x11, n));
  CHECK(cudaDeviceSynchronize());
}

// cudaFree and cudaMalloc again; then `sleep_ms` of waiting, or a device synchronize if `sync`.
Outcome CaseMalloc(size_t n, int sleep_ms, bool sync) {
  Outcome o;
  void* p = nullptr;
  CHECK(cudaMalloc(&p, n));
  Written(p, n);
  auto t = Clock::now();
  CHECK(cudaFree(p));
  o.free_ms = MsSince(t);
  o.freed_mib = FreeMib();
  if (sync) CHECK(cudaDeviceSynchronize());
  t = Clock::now();
  CHECK(cudaMalloc(&o.arena, n));
  o.back_ms = MsSince(t);
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  o.cleanup = [p = o.arena] { CHECK(cudaFree(p)); };
  return o;
}

// Rate of one 16 MiB copy from the ring into `dst`, GiB/s.
double Probe(Bench& b, void* dst) {
  constexpr size_t kProbe = 16ull << 20;
  CHECK(cudaEventRecord(b.ev[0], b.s));
  for (size_t off = 0; off < kProbe; off += b.slot) {
    CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(dst) + off, b.ring + off % b.ring_bytes,
                          std::min(b.slot, kProbe - off), cudaMemcpyHostToDevice, b.s));
  }
  CHECK(cudaEventRecord(b.ev[1], b.s));
  CHECK(cudaEventSynchronize(b.ev[1]));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, b.ev[0], b.ev[1]));
  return GibS(kProbe, ms);
}

// cudaFree, cudaMalloc, then probes until the copy rate is back (see the header).
Outcome CaseProbe(Bench& b, size_t n) {
  Outcome o;
  void* p = nullptr;
  CHECK(cudaMalloc(&p, n));
  Written(p, n);
  double before = 0;
  for (int i = 0; i < 3; ++i) before = std::max(before, Probe(b, p));
  const auto t = Clock::now();
  CHECK(cudaFree(p));
  o.free_ms = MsSince(t);
  o.freed_mib = FreeMib();
  const auto a = Clock::now();
  CHECK(cudaMalloc(&o.arena, n));
  o.back_ms = MsSince(a);
  std::ostringstream rates;
  int probes = 0;
  for (;;) {
    const double r = Probe(b, o.arena);
    rates << (probes++ ? ", " : "") << static_cast<int>(r * 10) / 10.0;
    if (r >= 0.9 * before || MsSince(t) > 500) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::ostringstream line;
  line << "\"settle_ms\": " << MsSince(t) << ", \"probes\": " << probes
       << ", \"probe_before_gib_s\": " << before << ", \"probe_gib_s\": [" << rates.str() << "], ";
  o.extra_json = line.str();
  o.cleanup = [p = o.arena] { CHECK(cudaFree(p)); };
  return o;
}

Outcome CaseOther(size_t n) {
  Outcome o;
  void* p = nullptr;
  CHECK(cudaMalloc(&p, n));
  CHECK(cudaMalloc(&o.arena, n));
  Written(p, n);
  Written(o.arena, n);
  auto t = Clock::now();
  CHECK(cudaFree(p));
  o.free_ms = MsSince(t);
  o.freed_mib = FreeMib();
  o.cleanup = [p = o.arena] { CHECK(cudaFree(p)); };
  return o;
}

Outcome CaseVmm(size_t n, bool keep_physical) {
  Outcome o;
  auto* v = new Vmm;
  v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  v->prop.location.id = 0;
  size_t gran = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  v->bytes = (n + gran - 1) / gran * gran;
  CHECK_CU(cuMemAddressReserve(&v->va, v->bytes, 0, 0, 0));
  v->Map();
  o.arena = reinterpret_cast<void*>(v->va);
  Written(o.arena, n);
  auto t = Clock::now();
  CHECK_CU(cuMemUnmap(v->va, v->bytes));
  if (!keep_physical) CHECK_CU(cuMemRelease(v->h));
  o.free_ms = MsSince(t);
  o.freed_mib = FreeMib();
  t = Clock::now();
  if (keep_physical) {
    CHECK_CU(cuMemMap(v->va, v->bytes, 0, v->h, 0));
    CUmemAccessDesc access{};
    access.location = v->prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_CU(cuMemSetAccess(v->va, v->bytes, &access, 1));
  } else {
    v->Map();
  }
  o.back_ms = MsSince(t);
  o.cleanup = [v] {
    CHECK_CU(cuMemUnmap(v->va, v->bytes));
    CHECK_CU(cuMemRelease(v->h));
    CHECK_CU(cuMemAddressFree(v->va, v->bytes));
    delete v;
  };
  return o;
}

Outcome CasePool(size_t n, cudaStream_t s) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  auto* pool = new cudaMemPool_t;
  CHECK(cudaMemPoolCreate(pool, &props));
  uint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &zero));
  Outcome o;
  void* p = nullptr;
  auto t = Clock::now();
  CHECK(cudaMallocFromPoolAsync(&p, n, *pool, s));
  CHECK(cudaStreamSynchronize(s));
  o.first_alloc_ms = MsSince(t);
  CHECK(cudaMemsetAsync(p, 0x11, n, s));
  CHECK(cudaStreamSynchronize(s));
  t = Clock::now();
  CHECK(cudaFreeAsync(p, s));
  CHECK(cudaStreamSynchronize(s));
  o.free_ms = MsSince(t);
  o.freed_mib = FreeMib();
  t = Clock::now();
  CHECK(cudaMallocFromPoolAsync(&o.arena, n, *pool, s));
  CHECK(cudaStreamSynchronize(s));
  o.back_ms = MsSince(t);
  o.cleanup = [pool, p = o.arena] {
    CHECK(cudaFree(p));
    CHECK(cudaMemPoolDestroy(*pool));
    delete pool;
  };
  return o;
}

Outcome CaseFresh(size_t n) {
  Outcome o;
  auto t = Clock::now();
  CHECK(cudaMalloc(&o.arena, n));
  o.back_ms = MsSince(t);
  o.cleanup = [p = o.arena] { CHECK(cudaFree(p)); };
  return o;
}

Outcome Run(const std::string& c, Bench& b) {
  const size_t n = b.n;
  cudaStream_t s = b.s;
  if (c == "probe") return CaseProbe(b, n);
  if (c == "malloc") return CaseMalloc(n, 0, false);
  if (c == "malloc-wait") return CaseMalloc(n, 1000, false);
  if (c == "sync") return CaseMalloc(n, 0, true);
  if (c.rfind("sleep", 0) == 0) return CaseMalloc(n, std::atoi(c.c_str() + 5), false);
  if (c == "other") return CaseOther(n);
  if (c == "vmm" || c == "vmm-remap") return CaseVmm(n, c == "vmm-remap");
  if (c == "pool") return CasePool(n, s);
  if (c == "fresh") return CaseFresh(n);
  std::fprintf(stderr, "unknown case %s\n", c.c_str());
  std::exit(2);
}

void Report(const std::string& c, const Bench& b, const Outcome& o, const std::vector<float>& first,
            const std::vector<float>& second) {
  double f = 0, s2 = 0;
  std::ostringstream seg;
  for (size_t k = 0; k < first.size(); ++k) {
    f += first[k];
    s2 += second[k];
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", k ? ", " : "", GibS(kSegment, first[k]));
    seg << buf;
  }
  std::printf(
      "{\"kind\": \"free_settle\", \"case\": \"%s\", %s\"bytes\": %zu, \"free_ms\": %.2f, "
      "\"back_ms\": %.2f, \"first_alloc_ms\": %.2f, \"free_mib\": [%zu, %zu, %zu], "
      "\"first_ms\": %.2f, \"first_gib_s\": %.2f, \"second_gib_s\": %.2f, "
      "\"first_by_segment_gib_s\": [%s]}\n",
      c.c_str(), o.extra_json.c_str(), b.n, o.free_ms, o.back_ms, o.first_alloc_ms, o.before_mib,
      o.freed_mib, o.back_mib, f, GibS(b.n, f), GibS(b.n, s2), seg.str().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  b.n = static_cast<size_t>((argc > 1 ? std::atof(argv[1]) : 8.0) * (1ull << 30)) / kSegment *
        kSegment;
  const std::string cases =
      argc > 2 ? argv[2] : "fresh,malloc,malloc-wait,other,vmm,vmm-remap,pool";
  b.slot = (argc > 3 ? std::atoi(argv[3]) : 8) * (1ull << 20);
  b.ring_bytes = (argc > 4 ? std::atoi(argv[4]) : 4) * b.slot;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  CHECK(cudaMallocHost(reinterpret_cast<void**>(&b.ring), b.ring_bytes));
  for (size_t i = 0; i < b.ring_bytes; ++i) b.ring[i] = static_cast<unsigned char>(i * 131);
  CHECK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b.s2, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&b.join, cudaEventDisableTiming));
  b.ev.resize(b.n / kSegment + 1);
  for (auto& e : b.ev) CHECK(cudaEventCreate(&e));
  std::stringstream list(cases);
  for (std::string c; std::getline(list, c, ',');) {
    std::this_thread::sleep_for(std::chrono::seconds(2));  // let the last case's frees settle
    b.streams = c.size() > 2 && c.compare(c.size() - 2, 2, "/2") == 0 ? 2 : 1;
    if (b.streams == 2) c.resize(c.size() - 2);
    Outcome o = Run(c, b);
    o.back_mib = FreeMib();
    const std::vector<float> first = Pass(b, o.arena);
    const std::vector<float> second = Pass(b, o.arena);
    Report(b.streams == 2 ? c + "/2" : c, b, o, first, second);
    o.cleanup();
  }
  return 0;
}
