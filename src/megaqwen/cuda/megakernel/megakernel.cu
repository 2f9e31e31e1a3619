// The megakernel's instantiations (one per compiled config) and launchers. sm_90 machine code does
// the work; the compute_80 PTX of this file holds only a trapping stub (the host checks the device's
// compute capability before choosing the megakernel).
#include "megaqwen/cuda/megakernel/megakernel.h"

#include <algorithm>
#include <string>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/launch.cuh"
#include "megaqwen/cuda/megakernel/edge_probe.cuh"
#include "megaqwen/cuda/megakernel/megakernel.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__global__ void __launch_bounds__(kThreads, 1) megakernel(const __grid_constant__ Params p) {
#if defined(MEGAQWEN_SIMT)
  megakernel_body<C>(p, simt::dynamic_shared<uint8_t>());  // the emulated device (tests/simt)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  megakernel_body<C>(p, smem);
#else
  __trap();  // sm_90+ only (cp.async.bulk, mbarrier transaction counts); the host never launches it elsewhere
#endif
}

// The token selection alone, for tests (select.cuh, select_over_logits); out[0] = the id. Runs on
// any sm_70+ device.
__global__ void __launch_bounds__(kThreads, 1) select_test_kernel(const SelectTestArgs a) {
  pdl_begin();  // launched by launch_kernel (launch.cuh)
  __shared__ float red[64];
  __shared__ int last;
  __shared__ SelectShared s;
  __shared__ NucleusMember members[kSelectTestMembers];
  const int capacity = min(a.member_capacity, kSelectTestMembers);
  const int id = select_over_logits(a, red, last, s, members, capacity, [&] { return take_ticket(a.ticket); });
  if (id >= 0 && threadIdx.x == 0) a.out[0] = id;
}

// The logprob reduction alone (logprob.cuh, logprobs_over_logits): the per-operator path's device
// logprobs of a drawn token, and the tests of the megakernel's logprob primitives. Any sm_70+ device.
__global__ void __launch_bounds__(kThreads, 1) token_logprobs_kernel(const LogprobArgs a) {
  pdl_begin();
  __shared__ float red[64];
  __shared__ int last;
  __shared__ float log_z;
  __shared__ TopKShared s;
  logprobs_over_logits(a, red, last, log_z, s, [&] { return take_ticket(a.ticket); });
}

namespace {

template <class C>
bool matches(const Shape& s) {
  const bool common = s.hidden == C::H && s.layers == C::L && s.heads == C::HEADS && s.kv_heads == C::KV_HEADS &&
                      s.head_dim == C::D && s.intermediate == C::I && s.hybrid == C::kHybrid;
  if constexpr (C::kHybrid) {
    return common && s.rotary_dim == C::R && s.key_heads == C::NK && s.value_heads == C::NV && s.key_dim == C::DK &&
           s.value_dim == C::DV && s.conv_kernel == C::CONV_K;
  } else {
    return common;
  }
}

template <class C>
KernelInfo info(const char* name) {
  return {name, C::kSmemBytes, C::kBufBytes, C::kStages, OneStageMlp<C>::kMaxUnits};
}

// Calls f.template operator()<C>(name) for the config matching `shape`; false if none.
template <class F>
bool dispatch(const Shape& s, F&& f) {
  if (matches<ConfigQwen3_06B>(s)) return f.template operator()<ConfigQwen3_06B>("qwen3-0.6b"), true;
  if (matches<ConfigQwen3_17B>(s)) return f.template operator()<ConfigQwen3_17B>("qwen3-1.7b"), true;
  if (matches<ConfigQwen3_4B>(s)) return f.template operator()<ConfigQwen3_4B>("qwen3-4b"), true;
  if (matches<ConfigTinyTest>(s)) return f.template operator()<ConfigTinyTest>("tiny-test"), true;
  if (matches<ConfigQwen35_08B>(s)) return f.template operator()<ConfigQwen35_08B>("qwen3.5-0.8b"), true;
  if (matches<ConfigTinyHybrid>(s)) return f.template operator()<ConfigTinyHybrid>("tiny-hybrid"), true;
  if (matches<ConfigTinyHybridGqa>(s)) return f.template operator()<ConfigTinyHybridGqa>("tiny-hybrid-gqa"), true;
  return false;
}

template <class C>
std::string shape_text(const char* name) {
  std::string t = std::string(name) + " (" + std::to_string(C::H) + "/" + std::to_string(C::L) + "/" +
                  std::to_string(C::HEADS) + "/" + std::to_string(C::KV_HEADS) + "/" + std::to_string(C::D) + "/" +
                  std::to_string(C::I);
  if constexpr (C::kHybrid)
    t += ", rotary " + std::to_string(C::R) + ", DeltaNet " + std::to_string(C::NK) + "/" + std::to_string(C::NV) +
         " heads of " + std::to_string(C::DK) + "/" + std::to_string(C::DV) + ", conv " + std::to_string(C::CONV_K);
  return t + ")";
}

}  // namespace

std::optional<KernelInfo> find_config(const Shape& shape) {
  std::optional<KernelInfo> out;
  dispatch(shape, [&]<class C>(const char* name) { out = info<C>(name); });
  return out;
}

std::string compiled_configs() {
  return shape_text<ConfigQwen3_06B>("qwen3-0.6b") + ", " + shape_text<ConfigQwen3_17B>("qwen3-1.7b") + ", " +
         shape_text<ConfigQwen3_4B>("qwen3-4b") + ", " + shape_text<ConfigTinyTest>("tiny-test") + ", " +
         shape_text<ConfigQwen35_08B>("qwen3.5-0.8b") + ", " + shape_text<ConfigTinyHybrid>("tiny-hybrid") + ", " +
         shape_text<ConfigTinyHybridGqa>("tiny-hybrid-gqa") + " (hidden/layers/heads/kv_heads/head_dim/intermediate)";
}

int max_ctas_per_sm(const Shape& shape) {
  int blocks = 0;
  const bool found = dispatch(shape, [&]<class C>(const char*) {
    CUDA_CHECK(cudaFuncSetAttribute(megakernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, megakernel<C>, kThreads, C::kSmemBytes));
  });
  return found ? blocks : 0;
}

void launch(const Shape& shape, const Params& params, int ctas, cudaStream_t stream) {
  const bool found = dispatch(shape, [&]<class C>(const char*) {
    launch_persistent(megakernel<C>, ctas, kThreads, C::kSmemBytes, stream, params);
    CUDA_CHECK_LAUNCH("megakernel");
  });
  if (!found) throw_error("megakernel: no compiled config for this model shape");
}

bool timing_compiled() { return MEGAQWEN_MK_TIMING != 0; }

// 32 x 32 tiles through shared memory (one column of padding: the column reads hit 32 banks), so
// both the reads of src and the writes of dst are whole rows of a tile. 256 threads: 8 rows at a time.
constexpr int kTransposeTile = 32, kTransposeThreads = 256;
__global__ void __launch_bounds__(kTransposeThreads) transpose_bf16_kernel(const uint16_t* __restrict__ src, int rows,
                                                                           int cols, uint16_t* __restrict__ dst) {
  pdl_begin();
  __shared__ uint16_t tile[kTransposeTile][kTransposeTile + 1];
  constexpr int kStep = kTransposeThreads / kTransposeTile;
  const int tx = int(threadIdx.x) % kTransposeTile, ty = int(threadIdx.x) / kTransposeTile;
  const int r0 = int(blockIdx.y) * kTransposeTile, c0 = int(blockIdx.x) * kTransposeTile;
  for (int i = ty; i < kTransposeTile; i += kStep)
    if (r0 + i < rows && c0 + tx < cols) tile[i][tx] = src[size_t(r0 + i) * size_t(cols) + size_t(c0 + tx)];
  __syncthreads();
  for (int i = ty; i < kTransposeTile; i += kStep)
    if (c0 + i < cols && r0 + tx < rows) dst[size_t(c0 + i) * size_t(rows) + size_t(r0 + tx)] = tile[tx][i];
}

void transpose_bf16(const uint16_t* src, int rows, int cols, uint16_t* dst, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || (rows > 0 && cols > 0 && (!src || !dst)))
    throw_error("transpose_bf16: " + std::to_string(rows) + " x " + std::to_string(cols) + " (sizes >= 0, buffers given)");
  if (rows == 0 || cols == 0) return;
  const dim3 grid(unsigned((cols + kTransposeTile - 1) / kTransposeTile), unsigned((rows + kTransposeTile - 1) / kTransposeTile));
  launch_kernel(transpose_bf16_kernel, grid, kTransposeThreads, 0, stream, src, rows, cols, dst);
  CUDA_CHECK_LAUNCH("transpose_bf16_kernel");
}

// The edge probe (edge_probe.cuh). Any sm_70+ device. Its 32 floats of reduction scratch are dynamic
// shared memory, as the megakernel's are: the emulated device runs a persistent grid's CTAs side by
// side, where a static __shared__ array would be one for all of them.
__global__ void __launch_bounds__(kThreads, 1) edge_probe_kernel(const EdgeProbeArgs a) {
#if defined(MEGAQWEN_SIMT)
  edge_probe_body(a, simt::dynamic_shared<float>());
#else
  extern __shared__ float red[];
  edge_probe_body(a, red);
#endif
}

void launch_edge_probe(const EdgeProbeArgs& args, int ctas, cudaStream_t stream) {
  if (ctas < 1 || args.edges < 0 || args.n < 0 || (!args.words && (!args.counter || (args.n > 0 && !args.vec))))
    throw_error("edge probe: " + std::to_string(ctas) + " CTAs, " + std::to_string(args.edges) + " edges, " +
                std::to_string(args.n) + " floats (CTAs >= 1, edges and floats >= 0, buffers given)");
  if (args.words && (args.n < 1 || args.n > kEdgeProbeMaxFlagged))
    throw_error("edge probe: the flagged form carries 1.." + std::to_string(kEdgeProbeMaxFlagged) + " words, not " +
                std::to_string(args.n));
  launch_persistent(edge_probe_kernel, ctas, kThreads, 32 * sizeof(float), stream, args);
  CUDA_CHECK_LAUNCH("edge_probe_kernel");
}

void launch_select_test(const SelectTestArgs& args, int ctas, cudaStream_t stream) {
  launch_kernel(select_test_kernel, ctas, kThreads, 0, stream, args);
  CUDA_CHECK_LAUNCH("select_test_kernel");
}

int token_logprob_blocks(int V) { return std::clamp((V + 2047) / 2048, 1, kMaxLogprobBlocks); }

void launch_token_logprobs(const LogprobArgs& args, int blocks, cudaStream_t stream) {
  // A slice wider than the top-k registers would silently lose its tail (cta_top_k reads kThreads x
  // kSelPerThread keys): refuse it.
  const int capacity = kThreads * kSelPerThread;
  if (blocks < 1 || blocks > kMaxLogprobBlocks || args.V < 1 || args.top < 0 || args.top > kMaxLogprobTop)
    throw_error("token logprobs: " + std::to_string(blocks) + " blocks, vocabulary " + std::to_string(args.V) +
                ", top " + std::to_string(args.top) + " (blocks 1.." + std::to_string(kMaxLogprobBlocks) + ", top 0.." +
                std::to_string(kMaxLogprobTop) + ")");
  if (args.top > 0 && ((args.V + blocks - 1) / blocks > capacity || blocks * args.top > capacity))
    throw_error("token logprobs: " + std::to_string(blocks) + " blocks over " + std::to_string(args.V) +
                " ids leave " + std::to_string((args.V + blocks - 1) / blocks) + " ids per block with top " +
                std::to_string(args.top) + "; the selection holds " + std::to_string(capacity) +
                " (use token_logprob_blocks(V))");
  launch_kernel(token_logprobs_kernel, blocks, kThreads, 0, stream, args);
  CUDA_CHECK_LAUNCH("token_logprobs_kernel");
}

}  // namespace megaqwen::cuda::mk
