#include "megaqwen/cuda/gpu_probe.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_buffer.h"

namespace megaqwen::cuda {

GpuInfo gpu_info(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  GpuInfo g;
  g.name = prop.name;
  g.sm_count = prop.multiProcessorCount;
  g.cc_major = prop.major;
  g.cc_minor = prop.minor;
  g.memory_bytes = prop.totalGlobalMem;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrMemoryClockRate, device) == cudaSuccess) g.memory_clock_khz = value;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) g.memory_bus_bits = value;
  cudaGetLastError();
  return g;
}

double measure_d2d_bandwidth_gb_s(int device, uint64_t bytes) {
  CUDA_CHECK(cudaSetDevice(device));
  DeviceBuffer<uint8_t> src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> seconds;
  for (int i = 0; i < 9; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(cudaMemcpy(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) seconds.push_back(double(ms) / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return 2.0 * double(bytes) / seconds[seconds.size() / 2] / 1e9;
}

// NVML's C API, declared here so neither nvml.h nor the library is needed at build time.
struct NvmlEnergy::Api {
  using Device = void*;
  void* lib = nullptr;
  Device device = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_pci)(const char*, Device*) = nullptr;
  int (*energy)(Device, unsigned long long*) = nullptr;
  int (*power)(Device, unsigned int*) = nullptr;
};

std::unique_ptr<NvmlEnergy> NvmlEnergy::open(int device, std::string* why) {
  auto set = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return nullptr;
  };
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    cudaGetLastError();
    return set("cudaDeviceGetPCIBusId failed");
  }
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return set(std::string("libnvidia-ml.so.1 not found: ") + dlerror());
  std::unique_ptr<NvmlEnergy> e(new NvmlEnergy());
  e->api_ = std::make_unique<Api>();
  Api& a = *e->api_;
  a.lib = lib;
  a.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  a.shutdown = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlShutdown"));
  a.by_pci = reinterpret_cast<int (*)(const char*, Api::Device*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  a.energy = reinterpret_cast<int (*)(Api::Device, unsigned long long*)>(dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
  a.power = reinterpret_cast<int (*)(Api::Device, unsigned int*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
  if (!a.init || !a.shutdown || !a.by_pci || !a.energy || !a.power) return set("NVML lacks an expected symbol");
  if (a.init() != 0) {
    a.shutdown = nullptr;
    return set("nvmlInit_v2 failed");
  }
  if (a.by_pci(bus_id, &a.device) != 0) return set(std::string("NVML has no device at PCI bus id ") + bus_id);
  if (!e->joules()) return set("nvmlDeviceGetTotalEnergyConsumption is not supported on this GPU");
  return e;
}

NvmlEnergy::~NvmlEnergy() {
  if (!api_) return;
  if (api_->shutdown) api_->shutdown();
  if (api_->lib) dlclose(api_->lib);
}

std::optional<double> NvmlEnergy::joules() const {
  unsigned long long mj = 0;
  if (!api_->device || api_->energy(api_->device, &mj) != 0) return std::nullopt;
  return double(mj) / 1e3;
}

std::optional<double> NvmlEnergy::watts() const {
  unsigned int mw = 0;
  if (!api_->device || api_->power(api_->device, &mw) != 0) return std::nullopt;
  return double(mw) / 1e3;
}

}  // namespace megaqwen::cuda
