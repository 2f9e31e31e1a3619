#!/usr/bin/env bash
# Configures and builds megaqwen into build/ (Release, Ninja). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DMEGAQWEN_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
