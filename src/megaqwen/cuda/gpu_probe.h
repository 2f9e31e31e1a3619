// What `megaqwen bench --device cuda` reports about the GPU besides tokens per second: its name, the
// measured device-to-device copy bandwidth (the practical ceiling for a memory-bound decode), and
// energy from NVML when the driver's libnvidia-ml.so.1 can be opened at run time (it is not linked).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace megaqwen::cuda {

struct GpuInfo {
  std::string name;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  uint64_t memory_bytes = 0;
  int memory_clock_khz = 0, memory_bus_bits = 0;
};
GpuInfo gpu_info(int device = 0);

// GB/s of a cudaMemcpy device-to-device of `bytes`, counting bytes read plus bytes written (2x the
// size), the median of 7 timed copies after 2 warm-ups, timed with CUDA events.
double measure_d2d_bandwidth_gb_s(int device = 0, uint64_t bytes = uint64_t(1) << 30);

// The GPU's cumulative energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules, Volta and
// newer) through a dlopen'd NVML; the device is matched by PCI bus id.
class NvmlEnergy {
 public:
  // nullptr when NVML or the counter is unavailable; `why` says which.
  static std::unique_ptr<NvmlEnergy> open(int device, std::string* why);
  ~NvmlEnergy();
  std::optional<double> joules() const;  // the counter now
  std::optional<double> watts() const;   // the driver's power reading now

 private:
  NvmlEnergy() = default;
  struct Api;
  std::unique_ptr<Api> api_;
};

}  // namespace megaqwen::cuda
