// megaqwen synth --preset NAME --seed N --out DIR [--tokenizer DIR]: a model folder with seeded
// random weights at real shapes.
#include <cstdio>

#include "cli/commands.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cli {

void add_synth_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a model folder with seeded random weights at real Qwen3 / Qwen3.5 shapes");
  struct Args {
    SynthOptions options;
    std::string out, tokenizer, dtype = "bf16";
  };
  auto a = std::make_shared<Args>();
  std::string presets;
  for (const auto& p : synth_presets()) presets += "\n  " + p.name + ": " + p.description;
  cmd->add_option("--preset", a->options.preset, "Shape preset:" + presets)->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "Random seed")->capture_default_str();
  cmd->add_option("--out", a->out, "Output folder")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Copy tokenizer files from this folder (e.g. ../shared/models/qwen3-0.6b, ../shared/models/qwen3.5-0.8b)");
  cmd->add_option("--vocab-size", a->options.vocab_size,
                  "Vocabulary size instead of the preset's (no tokenizer then; the last id ends a sequence)");
  cmd->add_option("--dtype", a->dtype, "Weight dtype: bf16, f16 or f32")->capture_default_str();
  cmd->add_option("-t,--threads", a->options.threads, "Threads (0: all)");
  cmd->callback([a] {
    if (a->dtype == "bf16") a->options.dtype = DType::BF16;
    else if (a->dtype == "f16") a->options.dtype = DType::F16;
    else if (a->dtype == "f32") a->options.dtype = DType::F32;
    else fail("--dtype must be bf16, f16 or f32, not '{}'", a->dtype);
    a->options.out_dir = a->out;
    a->options.tokenizer_dir = a->tokenizer;
    find_synth_preset(a->options.preset);  // fail fast on a bad name
    write_synthetic_model(a->options);
    std::fprintf(stderr, "megaqwen: wrote %s model (seed %llu) to %s\n", a->options.preset.c_str(),
                 (unsigned long long)a->options.seed, a->out.c_str());
  });
}

}  // namespace megaqwen::cli
