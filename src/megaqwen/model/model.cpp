#include "megaqwen/model/model.h"

namespace megaqwen {

std::shared_ptr<const Model> load_model(const std::string& model_arg, const std::string& rope_scaling) {
  auto model = std::make_shared<Model>();
  model->dir = resolve_model_dir(model_arg);
  model->config = load_model_config(model->dir);
  if (!rope_scaling.empty()) override_rope_scaling(model->config, rope_scaling, "--rope-scaling");
  model->checkpoint = Checkpoint::open(model->dir);
  if (model->config.is_hybrid()) {
    model->qwen35 = bind_qwen35_weights(*model->checkpoint, model->config);
  } else {
    model->weights = bind_qwen3_weights(*model->checkpoint, model->config);
  }
  return model;
}

}  // namespace megaqwen
