// model_fingerprint: a digest that tells one model's arithmetic from another's, for saved sequences
// kept in files (engine/state_file.h): a KV cache made by other weights (a fine-tune of the same
// shapes, another synthetic seed) or another RoPE (a --rope-scaling override) would decode into
// garbage, so such a file is refused instead.
//
// It covers the config fields the forward pass reads, the RoPE frequencies and amplitude, every
// tensor's name, dtype and shape, and bytes sampled from each tensor (whole when small, else 16
// windows of 4 KiB spread over it): a few MB read, milliseconds, where hashing 1.2 GB of weights
// would take a second. Two different trainings differ in every window; a change confined between
// the windows of one tensor would go unseen.
#pragma once

#include <string>

namespace megaqwen {

struct Model;

// 16 hex digits.
std::string model_fingerprint(const Model& model);

}  // namespace megaqwen
