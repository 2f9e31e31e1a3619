#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the CPU test suite with ctest.
# GPU tests (label gpu) skip themselves where no GPU is present. Set MEGAQWEN_FUZZ_SECONDS to also
# build the libFuzzer targets with clang and run each for that long.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/install-python-test-deps.sh  # the server tests drive the binary from Python
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
if [ -n "${MEGAQWEN_FUZZ_SECONDS:-}" ] && [ -f scripts/run-fuzz.sh ]; then
  bash scripts/run-fuzz.sh
fi
