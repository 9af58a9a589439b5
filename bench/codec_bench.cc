// hoist-bench-codec: the codec on one GPU. Encodes every tensor of a checkpoint (or synthetic
// normal-distributed BF16 weights), then measures CPU decode, pinned H2D of the compressed bytes
// and GPU decode (CUDA events, median of --runs after one warm-up), and checks every decoded
// byte against the original once (CPU and GPU). Prints JSON lines, all with "kind": "codec":
// one "what": "size" line per dtype and one "what": "decode" line. GiB/s are of original
// (decoded) bytes unless the field says compressed.
// Usage: hoist-bench-codec (--model DIR | --synthetic-gib G) [--runs N] [--cpu-threads N]
//                          [--max-gib G] [--no-gpu] [--sub-streams T]
// (--sub-streams: per 64 Ki-value block, 1 .. 1024; default 1024, what `hoist pack` writes)
// (exit 1 on a failure or a mismatch, 2 on bad flags; --no-gpu: sizes and CPU decode only)
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "codec/cuda/codec_decode.h"
#include "codec/layout.h"

namespace {

using hoist::codec::DType;

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<std::uint8_t> data, stream;
  hoist::codec::StreamInfo info;
  std::uint64_t stream_at = 0, out_at = 0;  // offsets in the device buffers
};

struct Flags {
  std::string model;
  double synthetic_gib = 0, max_gib = 0;
  int runs = 5;
  int sub_streams = 1024;
  bool gpu = true;
  int cpu_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

[[noreturn]] void Fail(const std::string& what, int code = 1) {
  std::fprintf(stderr, "hoist-bench-codec: %s\n", what.c_str());
  std::exit(code);
}

#define CHECK_CUDA(x)                                                                \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) Fail(std::string(#x) + ": " + cudaGetErrorString(e_), 1); \
  } while (0)

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Gib(double bytes) { return bytes / (1024.0 * 1024 * 1024); }

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-gpu") {
      f.gpu = false;
      continue;
    }
    if (i + 1 >= argc) Fail("flag " + a + " needs a value", 2);
    const std::string v = argv[++i];
    if (a == "--model")
      f.model = v;
    else if (a == "--synthetic-gib")
      f.synthetic_gib = std::atof(v.c_str());
    else if (a == "--max-gib")
      f.max_gib = std::atof(v.c_str());
    else if (a == "--runs")
      f.runs = std::atoi(v.c_str());
    else if (a == "--sub-streams")
      f.sub_streams = std::atoi(v.c_str());
    else if (a == "--cpu-threads")
      f.cpu_threads = std::atoi(v.c_str());
    else
      Fail("unknown flag " + a, 2);
  }
  if (f.model.empty() == (f.synthetic_gib <= 0)) Fail("give --model DIR or --synthetic-gib G", 2);
  if (f.runs < 1 || f.cpu_threads < 1) Fail("--runs and --cpu-threads must be >= 1", 2);
  if (f.sub_streams < 1 || f.sub_streams > 1024) Fail("--sub-streams: 1 to 1024", 2);
  return f;
}

std::vector<std::uint8_t> ReadAt(int fd, std::uint64_t offset, std::uint64_t n,
                                 const std::string& path) {
  std::vector<std::uint8_t> out(n);
  for (std::uint64_t done = 0; done < n;) {
    const ssize_t r = ::pread(fd, out.data() + done, n - done, static_cast<off_t>(offset + done));
    if (r <= 0) Fail(path + ": read failed at offset " + std::to_string(offset + done));
    done += static_cast<std::uint64_t>(r);
  }
  return out;
}

std::vector<Tensor> LoadModel(const std::string& dir, double max_gib) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) Fail(dir + ": not a folder", 2);
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) Fail(dir + ": no .safetensors files", 2);
  std::vector<Tensor> out;
  std::uint64_t total = 0;
  for (const auto& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Fail(path.string() + ": cannot open");
    std::uint64_t len = 0;
    const auto head = ReadAt(fd, 0, 8, path);
    std::memcpy(&len, head.data(), 8);
    if (len > (100u << 20)) Fail(path.string() + ": header length " + std::to_string(len));
    const auto text = ReadAt(fd, 8, len, path);
    const auto header = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
    if (header.is_discarded() || !header.is_object()) Fail(path.string() + ": bad header");
    for (const auto& [name, t] : header.items()) {
      if (name == "__metadata__") continue;
      std::optional<DType> dtype;
      std::uint64_t b = 0, e = 0;
      try {
        dtype = hoist::codec::DTypeFromName(t.at("dtype").get<std::string>());
        b = t.at("data_offsets").at(0).get<std::uint64_t>();
        e = t.at("data_offsets").at(1).get<std::uint64_t>();
      } catch (const nlohmann::json::exception& x) {
        Fail(path.string() + ": tensor " + name + ": " + x.what());
      }
      if (e < b) Fail(path.string() + ": tensor " + name + ": data_offsets decrease");
      if (max_gib > 0 && Gib(static_cast<double>(total + e - b)) > max_gib) {
        ::close(fd);
        return out;  // enough
      }
      Tensor tensor;
      tensor.name = name;
      tensor.dtype = dtype.value_or(DType::kBytes);
      tensor.data = ReadAt(fd, 8 + len + b, e - b, path);
      out.push_back(std::move(tensor));
      total += e - b;
    }
    ::close(fd);
  }
  return out;
}

// N(0, 0.02) BF16 in 64 MiB tensors (Box-Muller on splitmix64, round to nearest even).
std::vector<Tensor> Synthetic(double gib) {
  const std::uint64_t per = 32ull << 20, total = static_cast<std::uint64_t>(gib * (1 << 29));
  std::vector<Tensor> out;
  std::uint64_t state = 1;
  auto next = [&] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
  };
  for (std::uint64_t first = 0; first < total; first += per) {
    const std::uint64_t n = std::min(per, total - first);
    Tensor t;
    t.name = "synthetic." + std::to_string(out.size());
    t.dtype = DType::kBF16;
    t.data.resize(2 * n);
    for (std::uint64_t i = 0; i < n; ++i) {
      const double r =
          0.02 * std::sqrt(-2.0 * std::log(1.0 - next())) * std::cos(6.283185307179586 * next());
      const float f = static_cast<float>(r);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      const std::uint16_t v = static_cast<std::uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      std::memcpy(&t.data[2 * i], &v, 2);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

namespace {

void EncodeAll(std::vector<Tensor>& tensors, int threads, int sub_streams,
               const std::string& source) {
  hoist::codec::EncodeOptions o;
  o.threads = threads;
  o.sub_streams = static_cast<std::uint32_t>(sub_streams);
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t original = 0;
  for (auto& t : tensors) {
    auto s = hoist::codec::Encode(t.dtype, t.data, o);
    if (!s.ok()) Fail(t.name + ": " + s.status().ToString());
    t.stream = std::move(*s);
    auto info = hoist::codec::ParseStream(t.stream, t.name);
    if (!info.ok()) Fail(info.status().ToString());
    t.info = std::move(*info);
    original += t.data.size();
  }
  const double secs = Seconds(t0);
  struct Sums {
    std::uint64_t tensors = 0, original = 0, compressed = 0, coded = 0;
  };
  std::map<std::string, Sums> by;
  for (const auto& t : tensors) {
    for (const std::string& key :
         {std::string(hoist::codec::DTypeName(t.dtype)), std::string("all")}) {
      Sums& s = by[key];
      ++s.tensors;
      s.original += t.data.size();
      s.compressed += t.stream.size();
      s.coded += t.info.method == hoist::codec::Method::kHuffman;
    }
  }
  for (const auto& [dtype, s] : by) {
    std::printf(
        "{\"kind\": \"codec\", \"what\": \"size\", \"source\": \"%s\", \"dtype\": \"%s\", "
        "\"tensors\": %lu, \"coded_tensors\": %lu, \"original_bytes\": %lu, "
        "\"compressed_bytes\": %lu, \"ratio\": %.5f, \"encode_gib_s\": %.3f}\n",
        source.c_str(), dtype.c_str(), s.tensors, s.coded, s.original, s.compressed,
        static_cast<double>(s.compressed) /
            static_cast<double>(std::max<std::uint64_t>(1, s.original)),
        Gib(static_cast<double>(original)) / secs);
  }
  std::fflush(stdout);
}

// Seconds to decode everything on the CPU with `threads`, each tensor checked once.
double CpuDecode(const std::vector<Tensor>& tensors, int threads, std::uint64_t limit) {
  std::vector<std::uint8_t> out;
  double secs = 0;
  std::uint64_t done = 0;
  for (const auto& t : tensors) {
    if (done >= limit) break;
    out.assign(t.data.size(), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const hoist::Status s = hoist::codec::Decode(t.stream, out, t.name, threads);
    secs += Seconds(t0);
    if (!s.ok()) Fail("CPU decode: " + s.ToString());
    if (out != t.data) Fail("CPU decode: " + t.name + " differs from the original");
    done += t.data.size();
  }
  return secs;
}

struct Gpu {
  void* pinned = nullptr;
  std::uint8_t* streams = nullptr;
  std::uint8_t* outs = nullptr;
  std::uint16_t* luts = nullptr;
  int* error = nullptr;
  cudaStream_t stream{};
  cudaEvent_t a{}, b{};
  std::uint64_t stream_bytes = 0, out_bytes = 0;
};

void GpuSetUp(std::vector<Tensor>& tensors, Gpu& g) {
  for (auto& t : tensors) {
    t.stream_at = g.stream_bytes;
    t.out_at = g.out_bytes;
    g.stream_bytes += (t.stream.size() + 255) / 256 * 256;
    g.out_bytes += (t.data.size() + 255) / 256 * 256;
  }
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreate(&g.a));
  CHECK_CUDA(cudaEventCreate(&g.b));
  CHECK_CUDA(cudaMallocHost(&g.pinned, g.stream_bytes));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&g.streams), g.stream_bytes));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&g.outs), g.out_bytes));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&g.luts),
                        tensors.size() * 2 * hoist::codec::kLutEntries));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&g.error), sizeof(int)));
  CHECK_CUDA(cudaMemset(g.error, 0, sizeof(int)));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    std::memcpy(static_cast<std::uint8_t*>(g.pinned) + t.stream_at, t.stream.data(),
                t.stream.size());
    const hoist::Status s = hoist::transport::cuda::UploadCodecLut(
        t.info, g.luts + i * hoist::codec::kLutEntries, g.stream);
    if (!s.ok()) Fail(s.ToString());
  }
}

// Median milliseconds of `fn` enqueued on g.stream between two events (one warm-up run first).
template <typename Fn>
std::vector<double> TimeRuns(Gpu& g, int runs, Fn fn) {
  std::vector<double> ms;
  for (int r = 0; r <= runs; ++r) {
    CHECK_CUDA(cudaEventRecord(g.a, g.stream));
    fn();
    CHECK_CUDA(cudaEventRecord(g.b, g.stream));
    CHECK_CUDA(cudaEventSynchronize(g.b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, g.a, g.b));
    if (r > 0) ms.push_back(t);
  }
  return ms;
}

void DecodeAllOnGpu(const std::vector<Tensor>& tensors, Gpu& g) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const hoist::Status s = hoist::transport::cuda::LaunchCodecDecode(
        t.info, g.streams + t.stream_at, g.outs + t.out_at, g.luts + i * hoist::codec::kLutEntries,
        g.error, g.stream);
    if (!s.ok()) Fail(t.name + ": " + s.ToString());
  }
}

// The loader's kernel (LaunchCodecJobs, codec/cuda/codec_decode.h): every block of every
// Huffman tensor one job writing its whole range, as a packed load's slots hand them over.
struct GpuJobs {
  hoist::transport::cuda::CodecJobSet set;
  std::size_t count = 0;
  std::vector<std::size_t> cuts;  // job index where each `per` bytes of blocks start
};

GpuJobs MakeGpuJobs(const std::vector<Tensor>& tensors, Gpu& g, std::uint64_t per) {
  namespace cu = hoist::transport::cuda;
  std::vector<cu::CodecJob> jobs;
  std::vector<cu::CodecJobStream> streams(tensors.size());
  GpuJobs out;
  std::uint32_t threads = 32;
  std::uint64_t max_words = 0, bytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const hoist::codec::StreamInfo& info = tensors[i].info;
    if (info.method != hoist::codec::Method::kHuffman) continue;
    streams[i] = {
        info.sub_streams, static_cast<std::uint8_t>(info.dtype),
        static_cast<std::uint8_t>(info.version > hoist::codec::layout::kU16LengthsVersion ? 1 : 0),
        0};
    threads = std::max(threads, (info.sub_streams + 31) / 32 * 32);
    for (std::uint32_t b = 0; b < info.block_count; ++b) {
      cu::CodecJob j;
      j.src = tensors[i].stream_at + info.header_bytes + info.block_offsets[b];
      j.bytes = static_cast<std::uint32_t>(info.block_offsets[b + 1] - info.block_offsets[b]);
      j.values = static_cast<std::uint32_t>(info.block_value_count(b));
      j.dst = tensors[i].out_at + info.block_first_byte(b);
      j.pitch = j.width = j.values;
      j.rows = 1;
      j.stream = static_cast<std::uint32_t>(i);
      j.block = b;
      const std::uint64_t head = info.min_block_head_bytes(j.values);
      if (j.bytes >= head) max_words = std::max<std::uint64_t>(max_words, (j.bytes - head) / 4);
      if (bytes >= per * out.cuts.size()) out.cuts.push_back(jobs.size());
      bytes += j.bytes;
      jobs.push_back(j);
    }
  }
  out.cuts.push_back(jobs.size());
  out.count = jobs.size();
  cu::CodecJob* d_jobs = nullptr;
  cu::CodecJobStream* d_streams = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_jobs), jobs.size() * sizeof(jobs[0]) + 1));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_streams), streams.size() * sizeof(streams[0])));
  CHECK_CUDA(
      cudaMemcpy(d_jobs, jobs.data(), jobs.size() * sizeof(jobs[0]), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_streams, streams.data(), streams.size() * sizeof(streams[0]),
                        cudaMemcpyHostToDevice));
  out.set.jobs = d_jobs;
  out.set.streams = d_streams;
  out.set.luts = g.luts;
  out.set.threads = threads;
  out.set.max_words = static_cast<std::uint32_t>(max_words);
  out.set.error = g.error;
  const hoist::Status s = cu::PrepareCodecJobs(cu::CodecJobSharedBytes(max_words));
  if (!s.ok()) Fail(s.ToString());
  return out;
}

// Every job, in launches of the jobs of `per` block bytes each (cuts of MakeGpuJobs).
void DecodeJobsOnGpu(const GpuJobs& j, Gpu& g) {
  for (std::size_t c = 0; c + 1 < j.cuts.size(); ++c) {
    const hoist::Status s = hoist::transport::cuda::LaunchCodecJobs(
        j.set, j.cuts[c], j.cuts[c + 1] - j.cuts[c], g.streams, g.outs, g.stream);
    if (!s.ok()) Fail("jobs: " + s.ToString());
  }
}

// Every tensor's output against its original (coded_only: the Huffman tensors, the jobs' part).
void GpuVerify(const std::vector<Tensor>& tensors, Gpu& g, bool coded_only = false) {
  const hoist::Status flag = hoist::transport::cuda::CodecDecodeError(g.error, "GPU decode");
  if (!flag.ok()) Fail(flag.ToString());
  std::vector<std::uint8_t> back;
  for (const auto& t : tensors) {
    if (coded_only && t.info.method != hoist::codec::Method::kHuffman) continue;
    back.assign(t.data.size(), 0);
    CHECK_CUDA(cudaMemcpy(back.data(), g.outs + t.out_at, back.size(), cudaMemcpyDeviceToHost));
    if (back != t.data) Fail("GPU decode: " + t.name + " differs from the original");
  }
}

std::string Join(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  const std::string source = f.model.empty() ? "synthetic-normal-bf16" : f.model;
  std::vector<Tensor> tensors =
      f.model.empty() ? Synthetic(f.synthetic_gib) : LoadModel(f.model, f.max_gib);
  std::uint64_t original = 0;
  for (const auto& t : tensors) original += t.data.size();
  EncodeAll(tensors, f.cpu_threads, f.sub_streams, source);

  const double cpu_s = CpuDecode(tensors, f.cpu_threads, UINT64_MAX);
  const std::uint64_t one_limit = 512ull << 20;
  std::uint64_t one_bytes = 0;
  for (const auto& t : tensors) {
    if (one_bytes >= one_limit) break;
    one_bytes += t.data.size();
  }
  const double cpu1_s = CpuDecode(tensors, 1, one_limit);

  if (!f.gpu) {
    std::printf(
        "{\"kind\": \"codec\", \"what\": \"decode\", \"source\": \"%s\", \"tensors\": %zu, "
        "\"original_bytes\": %lu, \"cpu_threads\": %d, \"cpu_decode_gib_s\": %.3f, "
        "\"cpu_decode_1thread_gib_s\": %.3f, \"verified\": true}\n",
        source.c_str(), tensors.size(), original, f.cpu_threads,
        Gib(static_cast<double>(original)) / cpu_s, Gib(static_cast<double>(one_bytes)) / cpu1_s);
    return 0;
  }
  Gpu g;
  GpuSetUp(tensors, g);
  const auto h2d = TimeRuns(g, f.runs, [&] {
    CHECK_CUDA(
        cudaMemcpyAsync(g.streams, g.pinned, g.stream_bytes, cudaMemcpyHostToDevice, g.stream));
  });
  const auto dec = TimeRuns(g, f.runs, [&] { DecodeAllOnGpu(tensors, g); });
  GpuVerify(tensors, g);
  // The loader's batched kernel: launches of 16 MiB of blocks (a load's default staging slot,
  // transport::kDefaultSlotBytes) and of every block at once; the output is cleared and checked
  // again after each.
  const GpuJobs slot_jobs = MakeGpuJobs(tensors, g, 16ull << 20);
  const GpuJobs all_jobs = MakeGpuJobs(tensors, g, ~0ull >> 1);
  const auto clear = [&g] {
    CHECK_CUDA(cudaMemsetAsync(g.outs, 0, g.out_bytes, g.stream));
    CHECK_CUDA(cudaStreamSynchronize(g.stream));
  };
  clear();
  const auto jobs_slot = TimeRuns(g, f.runs, [&] { DecodeJobsOnGpu(slot_jobs, g); });
  GpuVerify(tensors, g, /*coded_only=*/true);
  clear();
  const auto jobs_all = TimeRuns(g, f.runs, [&] { DecodeJobsOnGpu(all_jobs, g); });
  GpuVerify(tensors, g, /*coded_only=*/true);
  std::uint64_t compressed = 0, coded = 0;  // coded: original bytes of Huffman tensors (jobs)
  for (const auto& t : tensors) {
    compressed += t.stream.size();
    if (t.info.method == hoist::codec::Method::kHuffman) coded += t.data.size();
  }
  const double h2d_s = Median(h2d) / 1e3, dec_s = Median(dec) / 1e3;
  std::printf(
      "{\"kind\": \"codec\", \"what\": \"decode\", \"source\": \"%s\", \"tensors\": %zu, "
      "\"original_bytes\": %lu, \"compressed_bytes\": %lu, \"cpu_threads\": %d, "
      "\"cpu_decode_gib_s\": %.3f, \"cpu_decode_1thread_gib_s\": %.3f, "
      "\"gpu_decode_ms\": [%s], \"gpu_decode_gib_s\": %.2f, \"h2d_compressed_ms\": [%s], "
      "\"h2d_compressed_gib_s\": %.3f, \"effective_h2d_gib_s\": %.3f, "
      "\"effective_h2d_then_decode_gib_s\": %.3f, \"sub_streams\": %d, \"jobs\": %zu, "
      "\"jobs_slot_ms\": [%s], \"jobs_slot_gib_s\": %.2f, \"jobs_all_ms\": [%s], "
      "\"jobs_all_gib_s\": %.2f, \"verified\": true}\n",
      source.c_str(), tensors.size(), original, compressed, f.cpu_threads,
      Gib(static_cast<double>(original)) / cpu_s, Gib(static_cast<double>(one_bytes)) / cpu1_s,
      Join(dec).c_str(), Gib(static_cast<double>(original)) / dec_s, Join(h2d).c_str(),
      Gib(static_cast<double>(compressed)) / h2d_s, Gib(static_cast<double>(original)) / h2d_s,
      Gib(static_cast<double>(original)) / (h2d_s + dec_s), f.sub_streams, all_jobs.count,
      Join(jobs_slot).c_str(), Gib(static_cast<double>(coded)) / (Median(jobs_slot) / 1e3),
      Join(jobs_all).c_str(), Gib(static_cast<double>(coded)) / (Median(jobs_all) / 1e3));
  return 0;
}
