#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/ and runs them for a bounded
# time through ctest (label `fuzz`). Every target must finish without a crash, sanitizer report, leak
# or timeout; a crashing input is left in build-fuzz/fuzz/artifacts/.
# MEGAQWEN_FUZZ_SECONDS sets the time per target (default 20); extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "run-fuzz.sh: clang++ is needed for libFuzzer" >&2; exit 1; }
build="${MEGAQWEN_FUZZ_BUILD:-build-fuzz}"
seconds="${MEGAQWEN_FUZZ_SECONDS:-20}"
jobs="${MEGAQWEN_JOBS:-$(nproc)}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The fuzz targets are host-only parsers: CMAKE_CUDA_COMPILER= keeps CUDA (nvcc) out of this build.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGAQWEN_FUZZ=ON \
  -DMEGAQWEN_TESTS=OFF -DCMAKE_CUDA_COMPILER= -DMEGAQWEN_FUZZ_SECONDS="$seconds" "${launcher[@]}" >/dev/null
targets=(fuzz_safetensors_header fuzz_config fuzz_openai_request fuzz_json_schema fuzz_tool_call fuzz_chat_prompt fuzz_state_file)
[ -f fuzz/fuzz_tokenizer.cpp ] && targets+=(fuzz_tokenizer)
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
ctest --test-dir "$build/fuzz" -L fuzz --output-on-failure "$@"
