// libFuzzer target: arbitrary bytes as a state file (`--prompt-cache FILE`), read by the CPU engines
// of two tiny synthetic models (Qwen3 and the Qwen3.5 hybrid). Reading must either refuse the file
// with megaqwen::Error or give a sequence the engine restores, decodes from and truncates; any
// other exception, crash, sanitizer report, leak or hang is a finding.
// Seeds: at start-up, valid files of both engines (4 tokens, the hybrid's with two snapshots) are
// written into the first corpus folder given, so they always match the models built here.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/state_file.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/util/error.h"

namespace {

namespace fs = std::filesystem;
using namespace megaqwen;

struct Subject {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
};

fs::path scratch() { return fs::temp_directory_path() / ("megaqwen_fuzz_state_file_" + std::to_string(::getpid())); }

std::vector<Subject>& subjects() {
  static std::vector<Subject> s;
  return s;
}

Subject make(const std::string& preset) {
  const fs::path dir = scratch() / preset;
  write_synthetic_model({.preset = preset, .seed = 1, .dtype = DType::BF16, .out_dir = dir, .tokenizer_dir = {}, .threads = 1});
  Subject s{load_model(dir.string()), nullptr};
  const CpuEngineOptions options{.context = 16, .threads = 1, .bf16_kv_cache = false};
  if (s.model->config.is_hybrid())
    s.engine = std::make_unique<CpuHybridEngine>(s.model, options);
  else
    s.engine = std::make_unique<CpuEngine>(s.model, options);
  return s;
}

void write_seed(Subject& s, const fs::path& path) {
  const std::vector<int32_t> tokens = {11, 22, 33, 44};
  s.engine->truncate(0);
  s.engine->prefill(std::span(tokens).first(2));
  s.engine->prefill(std::span(tokens).subspan(2));
  write_state_file(path, *s.model, *s.engine, SavedSequence{tokens, s.engine->save_state()});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fs::create_directories(scratch());
  subjects().push_back(make("tiny"));
  subjects().push_back(make("tiny-hybrid"));
  // The first argument that is a folder is a corpus: seed it.
  for (int i = 1; i < *argc; ++i) {
    const fs::path corpus = (*argv)[i];
    if ((*argv)[i][0] == '-' || !fs::is_directory(corpus)) continue;
    write_seed(subjects()[0], corpus / "seed-qwen3.state");
    write_seed(subjects()[1], corpus / "seed-qwen35.state");
    break;
  }
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(scratch(), ignored);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path path = scratch() / "input.state";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  for (Subject& s : subjects()) {
    try {
      const StateFile file = StateFile::open(path);
      const SavedSequence saved = file.load(*s.model, *s.engine);
      if (saved.tokens.size() != file.tokens().size() || saved.state->position() != int(saved.tokens.size())) std::abort();
      s.engine->restore_state(*saved.state);
      if (s.engine->position() != int(saved.tokens.size())) std::abort();
      // Any finite values may come in (the loader refuses only non-finite ones): decoding runs on them.
      if (s.engine->position() < s.engine->context_size()) s.engine->decode(7);
      if (s.engine->position() > 0) s.engine->truncate(s.engine->position() - 1);  // onto a snapshot or replayed
    } catch (const Error&) {
    }
  }
  return 0;
}
