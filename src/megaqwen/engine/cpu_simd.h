// Which vector instructions the CPU engine's matmul kernels use (cpu_matmul.cpp). Picked once from
// what the processor supports; tests and benchmarks may lower it to check every kernel on one machine.
#pragma once

#include <string_view>

// Plain loops that the compiler vectorizes get an AVX2+FMA clone picked at load time, so one binary
// runs on any x86-64 and is fast on the machines we have. The clone names the ISA level x86-64-v3,
// which GCC's resolver tests by feature; "arch=haswell" (used here before) is tested by CPU model
// and silently ran the SSE2 default on every AMD processor.
// ThreadSanitizer builds go without: the clones' resolvers run while the program is being loaded,
// before the sanitizer's runtime is up, and its instrumentation of them crashes.
// MQ_VECTOR_CLONES_AVX512 adds an AVX-512 clone (x86-64-v4) for loops that do enough arithmetic per
// byte to gain from the wider vectors (prefill attention's softmax, a decode attention run).
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define MQ_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define MQ_VECTOR_CLONES_AVX512 __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MQ_VECTOR_CLONES
#define MQ_VECTOR_CLONES_AVX512
#endif

namespace megaqwen::cpu {

enum class SimdLevel {
  kGeneric,  // plain C++ (whatever the compiler vectorizes for baseline x86-64 / other targets)
  kAvx2,     // AVX2 + FMA: 16 ymm registers
  kAvx512,   // AVX-512F: 32 zmm registers
};

// The best level this processor (and the build) supports.
SimdLevel detected_simd_level();
// The level the kernels use now: detected_simd_level() unless lowered by set_simd_level().
SimdLevel simd_level();
// Use `level`, clamped to detected_simd_level(); returns the level in effect. For tests and benchmarks;
// results of the FMA levels (AVX2, AVX-512) are bit-identical for prefill, equal to rounding for decode.
SimdLevel set_simd_level(SimdLevel level);

std::string_view simd_level_name(SimdLevel level);

}  // namespace megaqwen::cpu
