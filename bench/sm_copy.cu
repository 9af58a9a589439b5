// Host-to-device copies made by the GPU's multiprocessors instead of its copy engine: a kernel
// that reads pinned host memory (mapped into the device's address space) and writes device
// memory. Asks three questions of one GPU (issue 17, item 4):
//   1. How fast is such a copy alone, against cudaMemcpyAsync (the copy engine) on the same ring?
//   2. Do the two together move more than the copy engine alone (is the link the limit)?
//   3. Right after a cudaFree, the driver's clearing of the freed memory halves the copy engine's
//      rate for ~20 ms per 8 GiB (measured 2026-12-02). Does a kernel's copy escape that?
// Every pass copies a pinned ring (slots x slot_mib, cycled) into an N GiB device arena, one slot
// at a time, and is timed by CUDA events; a pass's bytes are checked against the ring afterwards.
// Cases (comma list):
//   ce           the copy engine alone (cudaMemcpyAsync per slot)
//   smB          the kernel alone, B blocks of 512 threads per slot
//   mixF         per slot, the copy engine copies F% of it and the kernel (264 blocks) the rest,
//                on two streams
//   free-CASE    an N GiB buffer the GPU wrote is freed right before CASE's pass (the arena was
//                allocated before it and is never freed): the first pass right after a free
// Usage: hoist-bench-smcopy [GiB=8] [cases] [slot_mib=8] [slots=4]
// One JSON line per case: GiB/s of the pass, its first 1 GiB, and a second pass right after.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_check.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;
constexpr size_t kGiB = 1ull << 30;

// dst[i] = src[i] for n16 16-byte words; each thread keeps kUnroll loads in flight.
__global__ void CopyWords(const int4* __restrict__ src, int4* __restrict__ dst, size_t n16) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n16; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n16; i += stride) dst[i] = src[i];
}

struct Bench {
  size_t n = 0, slot = 0, ring_bytes = 0;
  unsigned char* ring = nullptr;  // pinned, mapped
  unsigned char* arena = nullptr;
  cudaStream_t ce{}, sm{};
  cudaEvent_t start{}, first_gib{}, end_ce{}, end_sm{}, fork{};
};

struct Split {
  int ce_percent = 100;  // of each slot, from its start
  int blocks = 264;
};

Split SplitOf(const std::string& c) {
  Split s;
  if (c == "ce") return s;
  if (c.rfind("sm", 0) == 0) {
    s.ce_percent = 0;
    s.blocks = std::atoi(c.c_str() + 2);
  } else if (c.rfind("mix", 0) == 0) {
    s.ce_percent = std::atoi(c.c_str() + 3);
  } else {
    std::fprintf(stderr, "unknown case %s\n", c.c_str());
    std::exit(2);
  }
  if (s.blocks <= 0 || s.ce_percent < 0 || s.ce_percent > 100) {
    std::fprintf(stderr, "case %s: blocks must be > 0 and the copy engine's share 0-100%%\n",
                 c.c_str());
    std::exit(2);
  }
  return s;
}

// One pass; returns {ms of the pass, ms of its first GiB}.
std::pair<float, float> Pass(Bench& b, const Split& sp) {
  CHECK(cudaEventRecord(b.start, b.ce));
  CHECK(cudaStreamWaitEvent(b.sm, b.start, 0));
  const size_t ring_slots = b.ring_bytes / b.slot;
  size_t i = 0;
  for (size_t off = 0; off < b.n; off += b.slot, ++i) {
    const size_t len = std::min(b.slot, b.n - off);
    const size_t ce_len = len * sp.ce_percent / 100 / 16 * 16;
    unsigned char* src = b.ring + (i % ring_slots) * b.slot;
    if (ce_len > 0) {
      CHECK(cudaMemcpyAsync(b.arena + off, src, ce_len, cudaMemcpyHostToDevice, b.ce));
    }
    if (ce_len < len) {
      CopyWords<<<sp.blocks, kThreads, 0, b.sm>>>(reinterpret_cast<const int4*>(src + ce_len),
                                                  reinterpret_cast<int4*>(b.arena + off + ce_len),
                                                  (len - ce_len) / 16);
      CHECK(cudaGetLastError());
    }
    if (off + len == kGiB) {
      CHECK(cudaEventRecord(b.fork, b.sm));
      CHECK(cudaStreamWaitEvent(b.ce, b.fork, 0));
      CHECK(cudaEventRecord(b.first_gib, b.ce));
    }
  }
  CHECK(cudaEventRecord(b.end_sm, b.sm));
  CHECK(cudaStreamWaitEvent(b.ce, b.end_sm, 0));
  CHECK(cudaEventRecord(b.end_ce, b.ce));
  CHECK(cudaEventSynchronize(b.end_ce));
  float all = 0, first = 0;
  CHECK(cudaEventElapsedTime(&all, b.start, b.end_ce));
  CHECK(cudaEventElapsedTime(&first, b.start, b.first_gib));
  return {all, first};
}

// Compares sampled 4 KiB blocks of the arena with the ring bytes that should be there.
bool Matches(const Bench& b) {
  std::vector<unsigned char> got(4096);
  const size_t ring_slots = b.ring_bytes / b.slot;
  for (size_t off = 0; off + got.size() <= b.n; off += b.n / 97 / 4096 * 4096 + 4096) {
    CHECK(cudaMemcpy(got.data(), b.arena + off, got.size(), cudaMemcpyDeviceToHost));
    const size_t slot_i = off / b.slot, in = off % b.slot;
    const unsigned char* want = b.ring + (slot_i % ring_slots) * b.slot + in;
    if (std::memcmp(got.data(), want, got.size()) != 0) return false;
  }
  return true;
}

double GibS(size_t bytes, double ms) { return bytes / double(kGiB) / (ms / 1e3); }

// Frees an n-byte buffer the GPU wrote; returns the free call's ms.
double FreeWritten(size_t n) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, n));
  CHECK(cudaMemset(p, 0x5a, n));
  CHECK(cudaDeviceSynchronize());
  const auto t = std::chrono::steady_clock::now();
  CHECK(cudaFree(p));
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  b.n = static_cast<size_t>((argc > 1 ? std::atof(argv[1]) : 8.0) * kGiB) / kGiB * kGiB;
  const std::string cases =
      argc > 2 ? argv[2] : "ce,sm132,sm264,sm528,sm1056,mix50,mix70,free-ce,free-sm264,free-mix50";
  b.slot = (argc > 3 ? std::atoi(argv[3]) : 8) * (1ull << 20);
  b.ring_bytes = (argc > 4 ? std::atoi(argv[4]) : 4) * b.slot;
  if (b.n < kGiB || b.slot == 0 || kGiB % b.slot != 0 || b.ring_bytes < b.slot) {
    std::fprintf(stderr,
                 "usage: hoist-bench-smcopy [GiB>=1] [cases] [slot_mib dividing 1024] "
                 "[slots>=1]\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&b.ring), b.ring_bytes, cudaHostAllocMapped));
  for (size_t i = 0; i < b.ring_bytes; ++i) b.ring[i] = static_cast<unsigned char>(i * 131 + 7);
  CHECK(cudaMalloc(reinterpret_cast<void**>(&b.arena), b.n));
  CHECK(cudaStreamCreateWithFlags(&b.ce, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b.sm, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&b.start, &b.first_gib, &b.end_ce, &b.end_sm}) CHECK(cudaEventCreate(e));
  CHECK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
  std::stringstream list(cases);
  for (std::string c; std::getline(list, c, ',');) {
    std::this_thread::sleep_for(std::chrono::seconds(1));  // let any earlier free settle
    const bool after_free = c.rfind("free-", 0) == 0;
    const Split sp = SplitOf(after_free ? c.substr(5) : c);
    CHECK(cudaMemset(b.arena, 0, b.n));
    CHECK(cudaDeviceSynchronize());
    const double free_ms = after_free ? FreeWritten(b.n) : 0;
    const auto [ms, first_ms] = Pass(b, sp);
    const bool ok = Matches(b);
    const float ms2 = Pass(b, sp).first;
    std::printf(
        "{\"kind\": \"sm_copy\", \"case\": \"%s\", \"bytes\": %zu, \"ce_percent\": %d, "
        "\"blocks\": %d, \"free_ms\": %.2f, \"ms\": %.2f, \"gib_s\": %.2f, "
        "\"first_gib_gib_s\": %.2f, \"second_gib_s\": %.2f, \"bytes_match\": %s}\n",
        c.c_str(), b.n, sp.ce_percent, sp.ce_percent == 100 ? 0 : sp.blocks, free_ms, ms,
        GibS(b.n, ms), GibS(kGiB, first_ms), GibS(b.n, ms2), ok ? "true" : "false");
    std::fflush(stdout);
  }
  return 0;
}
