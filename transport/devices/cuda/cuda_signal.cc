// The CUDA DeviceSignal: see cuda_signal.h.
#include "transport/devices/cuda/cuda_signal.h"

#include <cuda.h>  // driver types only: the entry point comes through the runtime
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

namespace hoist::transport {
namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

Status CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

// cuStreamWaitValue32 from the driver the runtime loaded (nullptr when it has none).
WaitValue32 LookUpWaitValue32() {
  static WaitValue32 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<WaitValue32>(nullptr);
    }
    return reinterpret_cast<WaitValue32>(p);
  }();
  return fn;
}

class CudaSignal final : public DeviceSignal {
 public:
  CudaSignal(std::uint32_t* word, CUdeviceptr device_word, int ordinal)
      : word_(word), device_word_(device_word), ordinal_(ordinal) {}
  ~CudaSignal() override { cudaFreeHost(word_); }

  void Raise(std::uint32_t value) override {
    std::lock_guard lock(mu_);
    if (value <= __atomic_load_n(word_, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(word_, value, __ATOMIC_RELEASE);  // the GPU reads it through the mapping
  }
  std::uint32_t Value() const override { return __atomic_load_n(word_, __ATOMIC_ACQUIRE); }

  Status EnqueueWait(void* stream, std::uint32_t value) override {
    WaitValue32 wait = LookUpWaitValue32();
    if (wait == nullptr) {
      return Status::Unsupported("cuda:" + std::to_string(ordinal_) +
                                 ": the driver has no cuStreamWaitValue32 (wait on the host)");
    }
    // GEQ compares cyclically ((int32_t)(*word - value) >= 0): values stay below 2^31.
    const CUresult r =
        wait(static_cast<CUstream>(stream), device_word_, value, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
      return Status::Internal("cuda:" + std::to_string(ordinal_) +
                              ": cuStreamWaitValue32 failed (CUresult " + std::to_string(r) +
                              "; wait on the host instead)");
    }
    return Status::Ok();
  }

 private:
  std::mutex mu_;  // Raise never lowers the word
  std::uint32_t* word_;
  CUdeviceptr device_word_;
  int ordinal_;
};

}  // namespace

Result<std::unique_ptr<DeviceSignal>> CreateCudaSignal(int ordinal) {
  HOIST_RETURN_IF_ERROR(CudaCheck(cudaSetDevice(ordinal), "cudaSetDevice"));
  void* host = nullptr;
  HOIST_RETURN_IF_ERROR(CudaCheck(
      cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc"));
  auto* word = static_cast<std::uint32_t*>(host);
  *word = 0;
  void* device = nullptr;
  Status s = CudaCheck(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer");
  if (!s.ok()) {
    cudaFreeHost(host);
    return s;
  }
  return std::unique_ptr<DeviceSignal>(
      new CudaSignal(word, reinterpret_cast<CUdeviceptr>(device), ordinal));
}

}  // namespace hoist::transport
