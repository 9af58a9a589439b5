// What a staged slot of many copies costs the copy engine: slots of pinned host bytes go to
// scattered places in device memory, as a tensor-parallel rank's expert slices and their scales
// do (DeepSeek-V3 at tp 8: a 16 MiB slot holds about 8 slices of 1.75 MiB and 8 scale slices of
// 448 bytes, each to its own tensor). Per slot, in one case:
//   single: one copy of the slot's bytes (the same bytes, one destination: the bound);
//   each:   one cudaMemcpyAsync per piece (what hoist's staged path issues);
//   batch:  one cudaMemcpyBatchAsync per slot with every piece (stream-ordered source).
// Slots round-robin over a ring of pinned slots; destinations are disjoint, in slot order,
// pieces of a slot spread over the device buffer. --busy T runs T threads copying 64 MiB host
// buffers meanwhile (a load's fill threads' memory traffic and cores, without their bytes).
// Prints one JSON line per case and run count: GiB/s (median, all runs) and the time per slot.
//
//   hoist-bench-scatter [--pieces 1835008x8,448x8] [--gib 4] [--runs 5] [--busy 0,14]
//                       [--modes single,each,batch] [--slots 4]
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);) out.push_back(item);
  return out;
}

// "SIZExCOUNT,..." interleaved: one of each size in turn until every count is spent.
std::vector<size_t> Pieces(const std::string& spec) {
  std::vector<std::pair<size_t, int>> kinds;
  for (const std::string& k : Split(spec, ',')) {
    const size_t x = k.find('x');
    kinds.push_back(
        {std::stoull(k.substr(0, x)), x == std::string::npos ? 1 : std::stoi(k.substr(x + 1))});
  }
  std::vector<size_t> out;
  for (bool any = true; any;) {
    any = false;
    for (auto& [size, left] : kinds) {
      if (left-- > 0) out.push_back(size), any = true;
    }
  }
  return out;
}

struct Options {
  std::string pieces = "1835008x8,448x8", modes = "single,each,batch", busy = "0,14";
  double gib = 4;
  int runs = 5, slots = 4;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--pieces")
      o.pieces = v;
    else if (k == "--modes")
      o.modes = v;
    else if (k == "--busy")
      o.busy = v;
    else if (k == "--gib")
      o.gib = std::atof(v.c_str());
    else if (k == "--runs")
      o.runs = std::atoi(v.c_str());
    else if (k == "--slots")
      o.slots = std::atoi(v.c_str());
    else
      std::fprintf(stderr, "unknown option %s\n", k.c_str()), std::exit(2);
  }
  return o;
}

// Copies 64 MiB host buffers back and forth until told to stop.
void Busy(const std::atomic<bool>& stop) {
  const size_t n = 64ull << 20;
  std::vector<char> a(n, 1), b(n, 2);
  while (!stop.load(std::memory_order_relaxed)) std::memcpy(b.data(), a.data(), n), std::swap(a, b);
}

// One run of `mode`: every slot's pieces enqueued on `s`, timed by events; seconds.
// Piece p of slot i goes to dev + p * band + i * largest (band: nslots * largest bytes).
double Run(const std::string& mode, const std::vector<size_t>& pieces, size_t slot_bytes,
           size_t largest, size_t nslots, const std::vector<char*>& ring, char* dev,
           cudaStream_t s) {
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  const size_t band = nslots * largest;
  std::vector<void*> dsts(pieces.size());
  std::vector<const void*> srcs(pieces.size());
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attr_index = 0;
  CHECK(cudaEventRecord(a, s));
  for (size_t i = 0; i < nslots; ++i) {
    char* src = ring[i % ring.size()];
    if (mode == "single") {
      CHECK(cudaMemcpyAsync(dev + i * slot_bytes, src, slot_bytes, cudaMemcpyHostToDevice, s));
      continue;
    }
    size_t off = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      dsts[p] = dev + p * band + i * largest;
      srcs[p] = src + off;
      off += pieces[p];
    }
    if (mode == "each") {
      for (size_t p = 0; p < pieces.size(); ++p) {
        CHECK(cudaMemcpyAsync(dsts[p], srcs[p], pieces[p], cudaMemcpyHostToDevice, s));
      }
    } else {
      CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), pieces.data(), pieces.size(), &attr,
                                 &attr_index, 1, s));
    }
  }
  CHECK(cudaEventRecord(z, s));
  CHECK(cudaEventSynchronize(z));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, z));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(z));
  return ms / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const std::vector<size_t> pieces = Pieces(o.pieces);
  size_t slot_bytes = 0, largest = 0;
  for (size_t p : pieces) slot_bytes += p, largest = std::max(largest, p);
  const size_t nslots = std::max<size_t>(1, static_cast<size_t>(o.gib * (1ull << 30)) / slot_bytes);
  // Each piece's band holds nslots pieces of the largest size (Run).
  const size_t dev_bytes = std::max(nslots * slot_bytes, pieces.size() * nslots * largest);
  CHECK(cudaSetDevice(0));
  char* dev = nullptr;
  CHECK(cudaMalloc(&dev, dev_bytes));
  std::vector<char*> ring(o.slots);
  for (char*& r : ring) {
    CHECK(cudaMallocHost(&r, slot_bytes));
    for (size_t i = 0; i < slot_bytes; ++i) r[i] = static_cast<char>(i * 131);
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const std::string& busy : Split(o.busy, ',')) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> crew;
    for (int t = 0; t < std::atoi(busy.c_str()); ++t) crew.emplace_back(Busy, std::cref(stop));
    for (const std::string& mode : Split(o.modes, ',')) {
      (void)Run(mode, pieces, slot_bytes, largest, nslots, ring, dev, s);  // warm-up
      std::vector<double> secs;
      for (int r = 0; r < o.runs; ++r)
        secs.push_back(Run(mode, pieces, slot_bytes, largest, nslots, ring, dev, s));
      std::vector<double> sorted = secs;
      std::sort(sorted.begin(), sorted.end());
      const double med = sorted[sorted.size() / 2];
      const double gib = static_cast<double>(nslots * slot_bytes) / (1ull << 30);
      std::printf(
          "{\"mode\": \"%s\", \"busy\": %s, \"pieces\": %zu, \"slot_bytes\": %zu, "
          "\"slots\": %zu, \"gib_s\": %.2f, \"us_per_slot\": %.1f, \"runs_gib_s\": [",
          mode.c_str(), busy.c_str(), pieces.size(), slot_bytes, nslots, gib / med,
          med / nslots * 1e6);
      for (size_t r = 0; r < secs.size(); ++r) std::printf("%s%.2f", r ? ", " : "", gib / secs[r]);
      std::printf("]}\n");
      std::fflush(stdout);
    }
    stop = true;
    for (std::thread& t : crew) t.join();
  }
  return 0;
}
