// An engine's start-up with hoist, under mpirun or alone: get the weights (embedded load, or
// attach to a running `hoist serve`), then use one for real work to prove the bytes are usable,
// and print where the start-up time went.
//
//   mpirun -np 2 hoist-engine-startup --model /models/qwen3-4b --tp 2        # embedded
//   mpirun -np 2 hoist serve --model /models/qwen3-4b --tp 2 --socket-dir /run/hoist &
//   mpirun -np 2 hoist-engine-startup --attach /run/hoist                     # attach
//
// Work: Y = W X for a 2-D BF16 weight W [N, K] and a deterministic X [K, 8]. The default W is the
// first layer's o_proj, else (FP8 checkpoints such as DeepSeek-V3 keep their projections in FP8)
// the first BF16 projection, MoE router gate, lm_head or embedding; --weight NAME picks one. CUDA:
// a cuBLAS GEMM (bf16 in, fp32 accumulate); host backend: a CPU matrix product. A few rows of Y are
// checked against a plain double-precision reference computed from W's bytes copied back to the
// host. Exit 0 when the check passes.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hoist/hoist.h"
#include "hoist/hoist_mpi.h"

#ifdef HOIST_EXAMPLE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

float Bf16ToFloat(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t FloatToBf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
}

struct Args {
  std::string model, topology, attach, device, weight;
  int tp = 0, ep = -1, check_rows = 4;
};

constexpr const char* kUsage =
    "usage: %s (--model DIR [--tp N] [--ep N] | --topology FILE | --attach SOCKET_DIR)\n"
    "          [--device auto|cuda|host] [--weight NAME] [--check-rows N]\n"
    "  --weight NAME  the 2-D BF16 weight to multiply (default: the first layer's o_proj, else "
    "the\n"
    "                 first 2-D BF16 projection, router gate, lm_head or embedding on the rank)\n";

// 0: run; 1: --help was asked (exit 0); 2: a bad command line (message printed).
int Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") return 1;
    static const char* const kTakesValue[] = {"--model",  "--topology", "--attach", "--device",
                                              "--weight", "--tp",       "--ep",     "--check-rows"};
    bool known = false;
    for (const char* f : kTakesValue) known = known || k == f;
    if (!known) {
      std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], k.c_str());
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], k.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (k == "--model") a->model = v;
    if (k == "--topology") a->topology = v;
    if (k == "--attach") a->attach = v;
    if (k == "--device") a->device = v;
    if (k == "--weight") a->weight = v;
    if (k == "--tp") a->tp = std::atoi(v);
    if (k == "--ep") a->ep = std::atoi(v);
    if (k == "--check-rows") a->check_rows = std::atoi(v);
  }
  if (a->model.empty() && a->topology.empty() && a->attach.empty()) {
    std::fprintf(stderr, "%s: one of --model, --topology or --attach is needed\n", argv[0]);
    return 2;
  }
  return 0;
}

bool Is2dBf16(const hoist::Tensor& t) { return t.dtype == "BF16" && t.shape.size() == 2; }

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The weight to multiply: `name` if given, else the first 2-D BF16 tensor in this order of
// preference: an o_proj (dense families), any other projection (FP8 checkpoints keep few in
// BF16), the MoE router gate, lm_head, the embedding. On failure *why says what is missing.
const hoist::Tensor* PickWeight(const hoist::Model& m, const std::string& name, std::string* why) {
  if (!name.empty()) {
    const hoist::Tensor* t = m.Find(name);
    if (t == nullptr) {
      *why = "--weight " + name + ": no such tensor on this rank";
    } else if (!Is2dBf16(*t)) {
      *why = "--weight " + name + " is " + t->dtype + " with " + std::to_string(t->shape.size()) +
             " dimensions; the example multiplies a 2-D BF16 weight";
      t = nullptr;
    }
    return t;
  }
  for (const char* tail : {"o_proj.weight", "_proj.weight", "mlp.gate.weight", "lm_head.weight",
                           "embed_tokens.weight"}) {
    for (const hoist::Tensor& t : m.tensors()) {
      if (Is2dBf16(t) && EndsWith(t.name, tail)) return &t;
    }
  }
  *why = "no 2-D BF16 weight on this rank (" + std::to_string(m.tensors().size()) +
         " tensors): the example multiplies one; name it with --weight";
  return nullptr;
}

// The CUDA context, made before the weights as an engine makes its own (CUDA builds with a GPU
// and --device other than host); its time in ms, 0 when none was made.
double OpenCudaContext(const Args& args, int rank) {
#ifdef HOIST_EXAMPLE_CUDA
  int gpus = 0;
  if (args.device != "host" && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
    const Clock::time_point c = Clock::now();
    cudaSetDevice(rank % gpus);
    cudaFree(nullptr);  // the engine's CUDA context
    return Since(c);
  }
#endif
  return 0;
}

// 1. The weights: attached to `hoist serve`'s rank, or loaded over MPI_COMM_WORLD.
hoist::Result<hoist::Model> GetWeights(const Args& args, int rank) {
  if (!args.attach.empty()) {
    return hoist::Attach(args.attach + "/rank-" + std::to_string(rank) + ".sock");
  }
  hoist::LoadOptions o;
  o.model = args.model;
  o.topology_file = args.topology;
  if (args.tp > 0) o.tp = args.tp;
  if (args.ep >= 0) o.ep = args.ep;
  if (!args.device.empty()) o.device = args.device;
  return hoist::Load(o, MPI_COMM_WORLD);
}

// Y = W X for W [n, k] (row-major, BF16) and X [k, b] (column-major, BF16, deterministic), with
// the first check_rows rows of W copied back to the host for the reference.
struct Gemm {
  int n = 0, k = 0, b = 8, check_rows = 0;
  std::vector<std::uint16_t> x;       // column-major [K, B]
  std::vector<float> y;               // column-major [N, B]
  std::vector<std::uint16_t> w_host;  // check_rows rows of W
  bool on_gpu = false;                // cuBLAS ran it (else the CPU)
  double ms = 0;
};

Gemm MakeGemm(const hoist::Tensor& w, int check_rows) {
  Gemm g;
  g.n = static_cast<int>(w.shape[0]);
  g.k = static_cast<int>(w.shape[1]);
  g.check_rows = std::max(1, std::min(check_rows, g.n));  // w_host holds that many rows
  g.x.resize(static_cast<std::size_t>(g.k) * g.b);
  for (std::size_t i = 0; i < g.x.size(); ++i) {
    g.x[i] = FloatToBf16(static_cast<float>((i * 37 + 11) % 19) / 19.0f - 0.5f);
  }
  g.y.resize(static_cast<std::size_t>(g.n) * g.b);
  g.w_host.resize(static_cast<std::size_t>(g.k) * g.check_rows);
  return g;
}

#ifdef HOIST_EXAMPLE_CUDA
// A cuBLAS GEMM (bf16 in, fp32 accumulate) on W in device memory. False when cuBLAS failed
// (printed).
bool MultiplyOnGpu(const hoist::Tensor& w, int rank, Gemm* g) {
  void *dx = nullptr, *dy = nullptr;
  cublasHandle_t h;
  cublasCreate(&h);
  cudaMalloc(&dx, g->x.size() * 2);
  cudaMalloc(&dy, g->y.size() * 4);
  cudaMemcpy(dx, g->x.data(), g->x.size() * 2, cudaMemcpyHostToDevice);
  const float alpha = 1, beta = 0;
  // W row-major [N, K] is column-major [K, N]: Y = op_T(W) X.
  const cublasStatus_t st = cublasGemmEx(
      h, CUBLAS_OP_T, CUBLAS_OP_N, g->n, g->b, g->k, &alpha, w.data, CUDA_R_16BF, g->k, dx,
      CUDA_R_16BF, g->k, &beta, dy, CUDA_R_32F, g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  cudaMemcpy(g->y.data(), dy, g->y.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(g->w_host.data(), w.data, g->w_host.size() * 2, cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  cublasDestroy(h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "rank %d: cublasGemmEx failed (%d)\n", rank, static_cast<int>(st));
    return false;
  }
  g->on_gpu = true;
  return true;
}
#endif

// A CPU matrix product on W in host memory (the host backend).
void MultiplyOnHost(const hoist::Tensor& w, Gemm* g) {
  const auto* wp = static_cast<const std::uint16_t*>(w.data);
  std::vector<float> xf(g->x.size());
  for (std::size_t i = 0; i < g->x.size(); ++i) xf[i] = Bf16ToFloat(g->x[i]);
  for (int r = 0; r < g->n; ++r) {
    for (int c = 0; c < g->b; ++c) {
      float acc = 0;
      for (int j = 0; j < g->k; ++j) acc += Bf16ToFloat(wp[r * g->k + j]) * xf[c * g->k + j];
      g->y[r + c * g->n] = acc;
    }
  }
  std::memcpy(g->w_host.data(), wp, g->w_host.size() * 2);
}

// 3. The largest error of the checked rows of Y relative to the magnitude of their terms, against
// a double-precision reference from W's bytes.
double WorstRelativeError(const Gemm& g) {
  double worst = 0;
  for (int r = 0; r < g.check_rows && r < g.n; ++r) {
    for (int c = 0; c < g.b; ++c) {
      double ref = 0, mag = 0;
      for (int j = 0; j < g.k; ++j) {
        const double t =
            static_cast<double>(Bf16ToFloat(g.w_host[r * g.k + j])) * Bf16ToFloat(g.x[c * g.k + j]);
        ref += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(ref - g.y[r + c * g.n]) / (mag + 1e-30));
    }
  }
  return worst;
}

// Where the start-up time went (ms since the start, of MPI, the context and the weights).
struct Times {
  Clock::time_point t0;
  double mpi_ms = 0, context_ms = 0, weights_ms = 0;
};

void PrintReport(const Args& args, int rank, int world, const Times& t, const hoist::Model& model,
                 const hoist::Tensor& w, const Gemm& g, double worst, bool ok) {
  std::printf(
      "rank %d/%d: %s %s on %s: mpi_init %.1f ms, cuda_context %.1f ms, weights %.1f ms "
      "(%zu tensors, %.1f MiB), gemm %s %s [%d x %d] x [%d x %d] %.2f ms, check %d rows: max rel "
      "err "
      "%.2e %s, total %.1f ms\n",
      rank, world, model.attached() ? "attached" : "loaded",
      model.attached() ? args.attach.c_str() : args.model.c_str(), model.device_name().c_str(),
      t.mpi_ms, t.context_ms, t.weights_ms, model.tensors().size(), model.arena_bytes() / 1048576.0,
      g.on_gpu ? "cuBLAS" : "CPU", w.name.c_str(), g.n, g.k, g.k, g.b, g.ms, g.check_rows, worst,
      ok ? "PASS" : "FAIL", Since(t.t0));
  for (const hoist::Phase& p : model.phases()) {
    if (p.seconds > 0)
      std::printf("rank %d:   %-14s %8.2f ms\n", rank, p.name.c_str(), p.seconds * 1e3);
  }
}

// Everything between MPI_Init and MPI_Finalize; the exit code.
int Run(const Args& args, int rank, int world, Times t) {
  t.context_ms = OpenCudaContext(args, rank);
  const Clock::time_point l = Clock::now();
  hoist::Result<hoist::Model> model = GetWeights(args, rank);
  t.weights_ms = Since(l);
  if (!model.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, model.status().ToString().c_str());
    return 1;
  }
  // 2. Real work with one weight.
  std::string why;
  const hoist::Tensor* w = PickWeight(*model, args.weight, &why);
  if (w == nullptr) {
    std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
    return args.weight.empty() ? 1 : 2;
  }
  Gemm g = MakeGemm(*w, args.check_rows);
  const Clock::time_point start = Clock::now();
#ifdef HOIST_EXAMPLE_CUDA
  if (model->device_type() == hoist::DeviceType::kCuda && !MultiplyOnGpu(*w, rank, &g)) return 1;
#endif
  if (!g.on_gpu) MultiplyOnHost(*w, &g);  // host backend: the weights are host memory
  g.ms = Since(start);
  const double worst = WorstRelativeError(g);
  const bool ok = worst < 1e-2;
  PrintReport(args, rank, world, t, *model, *w, g, worst, ok);
  if (!model->Release().ok()) std::fprintf(stderr, "rank %d: release failed\n", rank);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Times t;
  t.t0 = Clock::now();
  Args args;
  if (const int p = Parse(argc, argv, &args); p != 0) {
    std::fprintf(p == 1 ? stdout : stderr, kUsage, argv[0]);
    return p == 1 ? 0 : 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  t.mpi_ms = Since(t.t0);
  const int code = Run(args, rank, world, t);
  MPI_Finalize();
  return code;
}
