// The megakernel's launch interface (plain C++, no CUDA device headers): which model shapes are
// compiled (configs.cuh), their shared-memory needs, occupancy, the launch itself, and the selection
// reduction alone for tests. runner.h builds on it; megakernel.cu implements it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

struct Shape {
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  // Qwen3.5 hybrids: rotary dims and the DeltaNet's heads (0 for Qwen3).
  bool hybrid = false;
  int rotary_dim = 0, key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 0;
};

struct KernelInfo {
  const char* name;   // "qwen3-0.6b", ...
  size_t smem_bytes;  // dynamic shared memory per CTA
  size_t buf_bytes;   // one weight buffer of the ring
  int stages;         // weight buffers in the ring
  int one_stage_units;  // the one-stage MLP: intermediate units one CTA can own (stage_mlp_one_stage.cuh)
};

// The compiled configuration whose shape equals `shape`, if any.
std::optional<KernelInfo> find_config(const Shape& shape);
// Every compiled configuration's name and shape, for messages ("qwen3-0.6b (1024/28/16/8/128/3072), ...").
std::string compiled_configs();
// CTAs of the kernel for `shape` that can be resident on one SM of the current device with its shared
// memory (raises the kernel's dynamic shared-memory limit first). 0 means it cannot run there.
int max_ctas_per_sm(const Shape& shape);
// Launches ctas CTAs of kThreads threads (the caller checked co-residency: ctas <= SMs x max_ctas_per_sm).
void launch(const Shape& shape, const Params& params, int ctas, cudaStream_t stream);
// dst = src^T: src [rows, cols] bf16 row-major, dst [cols, rows] (device memory, not overlapping).
// The one-stage MLP's down^T, made on the device once when the megakernel is set up.
void transpose_bf16(const uint16_t* src, int rows, int cols, uint16_t* dst, cudaStream_t stream);
// Whether this build has timing slots compiled in (-DMEGAQWEN_MK_TIMING=1).
bool timing_compiled();

// The edge probe (edge_probe.cuh): `edges` rounds of the kernel's all-CTA dependency edge with no
// weights, each reading the previous round's n-float vector through L2; for bench_mk_edges and its test.
// The flagged form (words != null) carries the vector as flagged words (sync.cuh: value and round in
// one 64-bit word) and has no counter: a CTA reads the previous round's words until each carries it.
struct EdgeProbeArgs {
  uint32_t* counter = nullptr;  // one counter, zeroed before the launch (counter form)
  float* vec = nullptr;         // [2, n], zeroed before the launch (counter form; unused when n == 0)
  int n = 0;                    // floats per vector (0: edges alone; the flagged form needs 1..4,096)
  int edges = 0;                // rounds
  uint32_t ablate = 0;          // sync.cuh's forms (kAblateFences, kAblateRelaxedSpin)
  uint64_t* words = nullptr;    // [2, n] flagged words, zeroed before the launch: the flagged form
};
constexpr int kEdgeProbeMaxFlagged = 4096;  // words per vector in the flagged form (8 per thread)
// Launches ctas co-resident CTAs of kThreads threads (ctas <= the device's SMs); Error on bad args.
void launch_edge_probe(const EdgeProbeArgs& args, int ctas, cudaStream_t stream);

// Tests: the LM head's token selection alone over given logits (device pointers), with `ctas` CTAs
// (each owns ceil(V / ctas) ids, as in the kernel). Argmax modes (top_k 0): greedy, or Gumbel-max
// with gumbel; filtered mode (top_k 1..kMaxTopK): top-k / top-p / min-p draw. Penalties with counts.
// Scratch: best_v / best_i / cand_n [ctas], cand_v / cand_i [ctas * top_k], sel_vals [V], ticket (one
// uint32, zeroed before each call). out[0] = the id.
void launch_select_test(const SelectTestArgs& args, int ctas, cudaStream_t stream);

// The log-probabilities of one token (logprob.cuh) over given logits, with `blocks` blocks (each owns
// ceil(V / blocks) ids; token_logprob_blocks(V) is the per-operator path's choice, in 1..kMaxLogprobBlocks):
// *args.out = the record of *args.token. Scratch: parts.lse [2 blocks], parts.cand_v / cand_i
// [blocks * top], parts.cand_n [blocks], ticket (one uint32, zeroed before each call). A block's slice
// and blocks * top must each be <= kThreads * kSelPerThread.
constexpr int kMaxLogprobBlocks = 256;
int token_logprob_blocks(int V);
void launch_token_logprobs(const LogprobArgs& args, int blocks, cudaStream_t stream);

}  // namespace megaqwen::cuda::mk
