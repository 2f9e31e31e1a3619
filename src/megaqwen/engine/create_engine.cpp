#include "megaqwen/engine/create_engine.h"

#include <cstdio>

#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

bool cuda_available(std::string* why) {
  // The CUDA engine is not part of this build yet (see docs/ARCHITECTURE.md, "CUDA engine").
  if (why) *why = "this build of megaqwen has no CUDA engine";
  return false;
}

std::unique_ptr<Engine> create_engine(std::shared_ptr<const Model> model, const EngineOptions& options) {
  const std::string& device = options.device;
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("unknown device '{}'; choose auto, cpu or cuda", device);
  std::string why;
  if (device == "cuda" && !cuda_available(&why)) fail("--device cuda: {}", why);
  if (device == "auto" && !cuda_available(&why) && !options.quiet)
    std::fprintf(stderr, "megaqwen: no usable GPU (%s); running on the CPU\n", why.c_str());
  return std::make_unique<CpuEngine>(std::move(model), CpuEngineOptions{options.context, options.threads});
}

}  // namespace megaqwen
