// megaqwen logits: the model's next-token logits at every position of a token sequence, as JSON
// lines of the top-k (and optionally every logit as raw little-endian float32).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cli {

void add_logits_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Print the top-k logits at every position of a token sequence");
  struct Args {
    ModelArgs model;
    std::string ids, out;
    int top_k = 5;
  };
  auto a = std::make_shared<Args>();
  a->model.add_to(cmd);
  cmd->add_option("--ids", a->ids, "Token ids, e.g. \"151644 872 198\"")->required();
  cmd->add_option("-k,--top-k", a->top_k, "How many top logits to print per position")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  cmd->add_option("-o,--out", a->out, "Also write all logits [positions, vocab] as little-endian float32 to this file");
  cmd->callback([a] {
    std::vector<int32_t> ids = parse_token_ids(a->ids);
    if (ids.empty()) fail("--ids is empty");
    auto model = a->model.load();
    EngineOptions options = a->model.engine;
    if (options.context == 0) options.context = std::min<int>(model->config.context_limit(), int(ids.size()));
    auto engine = create_engine(model, options);
    std::vector<float> logits;
    engine->prefill_all_logits(ids, logits);
    const size_t V = size_t(model->config.vocab_size);
    std::vector<int32_t> order(V);
    const size_t k = std::min(V, size_t(a->top_k));
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      const float* row = logits.data() + pos * V;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(), [&](int32_t x, int32_t y) {
        return row[x] > row[y] || (row[x] == row[y] && x < y);
      });
      nlohmann::json top = nlohmann::json::array();
      for (size_t i = 0; i < k; ++i) top.push_back({order[i], row[order[i]]});
      nlohmann::json line = {{"pos", pos}, {"token", ids[pos]}, {"top", top}};
      std::printf("%s\n", line.dump().c_str());
    }
    if (!a->out.empty()) {
      std::ofstream out(a->out, std::ios::binary | std::ios::trunc);
      static_assert(std::endian::native == std::endian::little, "logits files are little-endian");
      if (!out || !out.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float))))
        fail("cannot write {}", a->out);
    }
  });
}

}  // namespace megaqwen::cli
