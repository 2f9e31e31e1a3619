// create_engine: picks the engine for --device auto|cpu|cuda. `auto` takes CUDA when this build has
// it and a usable GPU is present, and otherwise says in one line on stderr that it uses the CPU.
#pragma once

#include <memory>
#include <string>

#include "megaqwen/engine/engine.h"
#include "megaqwen/model/model.h"

namespace megaqwen {

struct EngineOptions {
  std::string device = "auto";  // auto | cpu | cuda
  int context = 0;              // KV cache tokens; 0: the engine's default
  int threads = 0;              // CPU threads; 0: all
  bool quiet = false;           // no fallback notice
  std::string decode_kernel = "auto";  // CUDA: auto | megakernel | per-op (cuda::DecodeKernel)
  // CPU engines: keep k and v rounded to bf16, as the CUDA engines store them (CpuEngineOptions).
  bool bf16_kv_cache = false;
  // CPU engines: prefill products on AMX, the input split into two bf16 parts as the CUDA prefill
  // does (CpuEngineOptions::amx_prefill); where the processor has no AMX, a line on stderr says so
  // (unless quiet) and prefill stays fp32. No effect on the CUDA engines.
  bool amx_prefill = false;
  // CPU engines: weights and KV cache in transparent huge pages (CpuEngineOptions::huge_pages).
  bool huge_pages = true;
};

std::unique_ptr<Engine> create_engine(std::shared_ptr<const Model> model, const EngineOptions& options);

// Whether this build has the CUDA engine and a device is usable; `why` says why not.
bool cuda_available(std::string* why = nullptr);

}  // namespace megaqwen
