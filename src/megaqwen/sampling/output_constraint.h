// OutputConstraint: limits which tokens may come next (structured output: JsonConstraint). The
// Generator masks the logits with it before every draw and tells it every token drawn; a request
// with one decodes with its logits on the host, since the mask is computed there.
#pragma once

#include <cstdint>
#include <span>

namespace megaqwen {

class OutputConstraint {
 public:
  virtual ~OutputConstraint() = default;
  // Sets the logits of tokens that may not come next to -infinity. Throws Error when none may.
  virtual void mask(std::span<float> logits) = 0;
  // The token drawn (one mask() allowed).
  virtual void accept(int32_t token) = 0;
};

}  // namespace megaqwen
