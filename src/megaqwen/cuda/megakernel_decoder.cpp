#include "megaqwen/cuda/megakernel_decoder.h"

#include <cstdlib>

#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

DecodeKernel parse_decode_kernel(const std::string& name) {
  if (name == "auto") return DecodeKernel::Auto;
  if (name == "megakernel") return DecodeKernel::Megakernel;
  if (name == "per-op" || name == "perop") return DecodeKernel::PerOp;
  fail("unknown decode kernel '{}'; choose auto, megakernel or per-op", name);
}

MegakernelDecoder::MegakernelDecoder() = default;
MegakernelDecoder::~MegakernelDecoder() = default;
MegakernelDecoder::MegakernelDecoder(MegakernelDecoder&&) noexcept = default;
MegakernelDecoder& MegakernelDecoder::operator=(MegakernelDecoder&&) noexcept = default;

MegakernelDecoder::MegakernelDecoder(DecodeKernel requested, const ModelConfig& c, int device, cudaStream_t stream,
                                     const std::function<mk::Binding()>& bind)
    : vocab_(c.vocab_size) {
  DecodeKernel choice = requested;
  if (choice == DecodeKernel::Auto)
    if (const char* env = std::getenv("MEGAQWEN_DECODE"); env && *env) choice = parse_decode_kernel(env);
  if (choice == DecodeKernel::PerOp) {
    note_ = "per-op (requested)";
    return;
  }
  const std::string why = mk::Megakernel::unsupported_reason(c, device);
  if (!why.empty()) {
    if (choice == DecodeKernel::Megakernel) fail("--decode-kernel megakernel: {}", why);
    note_ = "per-op (" + why + ")";
    return;
  }
  try {
    megakernel_ = std::make_unique<mk::Megakernel>(c, bind(), device, stream);
    note_ = megakernel_->describe();
  } catch (const Error& e) {
    // Auto keeps the per-op path working when the megakernel cannot start here (e.g. its blocks
    // are not all co-resident on this device); only an explicit request fails.
    if (choice == DecodeKernel::Megakernel) throw;
    note_ = std::string("per-op (the megakernel could not start: ") + e.what() + ")";
  }
}

std::string MegakernelDecoder::device_suffix() const {
  if (!megakernel_) return ", decode: per-op";
  std::string s = ", decode: megakernel";
  if (megakernel_->ablate()) s += " (MEGAQWEN_MK_ABLATE=" + std::to_string(megakernel_->ablate()) + ")";
  if (megakernel_->flagged_vectors()) s += " (flagged vectors)";
  if (megakernel_->probe()) s += " (timing probe " + mk::probe_name(megakernel_->probe()) + ")";
  return s;
}

std::string MegakernelDecoder::profile() const { return megakernel_ ? megakernel_->timing_report() : std::string(); }

std::string MegakernelDecoder::unsupported_reason(const SamplingParams& params, int logprobs) const {
  if (!megakernel_) return note_;
  if (std::string why = megakernel_->sampling_unsupported_reason(params); !why.empty()) return why;
  return logprobs >= 0 ? megakernel_->logprob_unsupported_reason(logprobs) : std::string();
}

bool MegakernelDecoder::serves(const SamplingParams& params, std::span<const int32_t> eos_ids, int logprobs) const {
  return megakernel_ && unsupported_reason(params, logprobs).empty() && eos_ids.size() <= size_t(mk::kMaxEos);
}

int MegakernelDecoder::generate(int position, int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                const SamplingParams& params, std::span<const int32_t> history, int logprobs,
                                const DrawSink& on_draw, float* logits_out,
                                const std::function<void(int32_t)>& appended) {
  if (!megakernel_) fail("the megakernel is not in use: {}", note_);
  if (max_tokens < 1) return 0;
  if (const std::string why = unsupported_reason(params, logprobs); !why.empty())
    fail("the megakernel cannot sample with these parameters: {}", why);
  mk::RunRequest req = mk::Megakernel::request_for(params, vocab_, token, max_tokens, eos_ids, history);
  req.logits_out = logits_out;
  req.logprobs = logprobs < 0 ? -1 : logprobs;
  int32_t fed = token;
  return megakernel_->run(position, req, [&](int32_t id, const TokenLogprob* lp) {
    appended(fed);
    fed = id;
    return on_draw(DeviceDraw{id, lp ? std::optional<TokenLogprob>(*lp) : std::nullopt});
  });
}

}  // namespace megaqwen::cuda
