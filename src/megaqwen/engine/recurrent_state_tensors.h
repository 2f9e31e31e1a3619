// The Gated DeltaNet part of a Qwen3.5 hybrid's saved sequence as state-file tensors, the same for
// the CPU and the CUDA hybrid engines: the states now, and the rollback's snapshots (so that a
// truncate() inside a sequence read from a file still lands on a snapshot instead of replaying it).
//   recurrent             f32 [linear layers, value heads, key dim, value dim]
//   conv                  f32 [linear layers, conv kernel - 1, conv dim]
//   snapshot_positions    i32 [snapshots], ascending, each <= the sequence length
//   snapshot.I.recurrent, snapshot.I.conv   the states at snapshot_positions[I]
#pragma once

#include <utility>
#include <vector>

#include "megaqwen/engine/state_tensors.h"
#include "megaqwen/model/config.h"

namespace megaqwen {

// A hybrid's DeltaNet states in host memory, in the layouts above.
struct HostRecurrentStates {
  std::vector<float> recurrent, conv;
};

struct RecurrentStateTensors {
  HostRecurrentStates now;
  std::vector<std::pair<int, HostRecurrentStates>> snapshots;  // ascending position
};

void add_recurrent_state_tensors(std::vector<StateTensor>& out, const ModelConfig& config,
                                 const RecurrentStateTensors& states);
// Reads them back for a sequence of `position` tokens; throws Error naming a missing or misshapen
// tensor, or snapshot positions that are out of order, repeated, beyond the sequence or too many.
RecurrentStateTensors read_recurrent_state_tensors(const StateTensorSource& source, const ModelConfig& config,
                                                   int position);

}  // namespace megaqwen
