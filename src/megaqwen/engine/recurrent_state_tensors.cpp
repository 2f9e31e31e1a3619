#include "megaqwen/engine/recurrent_state_tensors.h"

#include <string>

#include "megaqwen/engine/recurrent_rollback.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

std::vector<int64_t> recurrent_shape(const ModelConfig& c) {
  return {c.count_layers(LayerType::LinearAttention), c.linear_num_value_heads, c.linear_key_head_dim,
          c.linear_value_head_dim};
}
std::vector<int64_t> conv_shape(const ModelConfig& c) {
  return {c.count_layers(LayerType::LinearAttention), c.linear_conv_kernel - 1, c.linear_conv_dim()};
}

void add_states(std::vector<StateTensor>& out, const ModelConfig& c, const std::string& prefix,
                const HostRecurrentStates& s) {
  out.push_back(make_state_tensor(prefix + "recurrent", DType::F32, recurrent_shape(c), s.recurrent));
  out.push_back(make_state_tensor(prefix + "conv", DType::F32, conv_shape(c), s.conv));
}

HostRecurrentStates read_states(const StateTensorSource& source, const ModelConfig& c, const std::string& prefix) {
  return {source.read<float>(prefix + "recurrent", DType::F32, recurrent_shape(c)),
          source.read<float>(prefix + "conv", DType::F32, conv_shape(c))};
}

}  // namespace

void add_recurrent_state_tensors(std::vector<StateTensor>& out, const ModelConfig& config,
                                 const RecurrentStateTensors& states) {
  add_states(out, config, "", states.now);
  std::vector<int32_t> positions;
  for (const auto& [position, s] : states.snapshots) {
    add_states(out, config, "snapshot." + std::to_string(positions.size()) + ".", s);
    positions.push_back(position);
  }
  out.push_back(make_state_tensor("snapshot_positions", DType::I32, {int64_t(positions.size())}, positions));
}

RecurrentStateTensors read_recurrent_state_tensors(const StateTensorSource& source, const ModelConfig& config,
                                                   int position) {
  RecurrentStateTensors out;
  out.now = read_states(source, config, "");
  if (!source.has("snapshot_positions")) fail("the tensor snapshot_positions is missing");
  // The count is that of the snapshot.I tensors present (bounded before anything is read);
  // snapshot_positions must hold exactly that many.
  int64_t count = 0;
  while (count <= int64_t(kMaxStateSnapshots) && source.has("snapshot." + std::to_string(count) + ".recurrent"))
    ++count;
  if (count > int64_t(kMaxStateSnapshots))
    fail("the state holds more than {} DeltaNet snapshots", kMaxStateSnapshots);
  const auto positions = source.read<int32_t>("snapshot_positions", DType::I32, {count});
  for (int64_t i = 0; i < count; ++i) {
    const int p = positions[size_t(i)];
    if (p < 0 || p > position)
      fail("snapshot {} is at position {}, outside the sequence of {} tokens", i, p, position);
    if (i > 0 && p <= positions[size_t(i - 1)])
      fail("snapshot positions must ascend: {} follows {}", p, positions[size_t(i - 1)]);
    out.snapshots.emplace_back(p, read_states(source, config, "snapshot." + std::to_string(i) + "."));
  }
  return out;
}

}  // namespace megaqwen
