#!/usr/bin/env bash
# Builds llama.cpp, the peer most users measure an engine against, for tools/bench_llamacpp.py.
# Its source comes from the llama-cpp-python source release on PyPI (pinned below, checked by
# SHA-256), which vendors a whole llama.cpp tree: our machines reach PyPI, not GitHub.
#
#   bash scripts/build-llamacpp.sh          build-llamacpp/cpu/bin/{llama-bench,llama-perplexity}
#                                           for this machine's processor (-march=native: llama.cpp at
#                                           its best here, as megaqwen's CPU kernels pick theirs)
#   bash scripts/build-llamacpp.sh --cuda   build-llamacpp/gpu/: llama-bench for the H200 (sm_90a, no
#                                           -march=native) and build-gpu's megaqwen, both xz-packed,
#                                           the shared libraries they need but cuBLAS and NCCL
#                                           (PyTorch's wheel has those there), the Qwen3 tokenizer,
#                                           and convert_hf_to_gguf.py with its packages, since the
#                                           GGUF is made there from the synthetic model. Run
#                                           scripts/build-gpu.sh first. gpu-check.sh's llamacpp call:
#   run(command='MEGAQWEN_GPU_BUILD=build-llamacpp/gpu MEGAQWEN_STAGES="env model llamacpp" bash scripts/gpu-check.sh',
#       carry=["build-llamacpp/gpu"], kind="nvidia-h200")
# The source and CMake trees stay in build-llamacpp/src and build-llamacpp/tree-*; ccache is used
# when present. The CUDA build compiles ~190 CUDA files: about half an hour on 2 cores (2026-11-28).
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cuda=false
case "${1:-}" in
  --cuda) cuda=true ;;
  "") ;;
  *) echo "usage: bash scripts/build-llamacpp.sh [--cuda]" >&2; exit 2 ;;
esac
jobs="${MEGAQWEN_JOBS:-2}"
top=build-llamacpp
src=$top/src
mkdir -p "$top"

if [ ! -f "$src/CMakeLists.txt" ]; then
  sdist=$top/llama_cpp_python-$version.tar.gz
  if [ ! -f "$sdist" ]; then
    python3 -m pip download --no-deps --no-binary :all: --dest "$top" "llama-cpp-python==$version" >&2
  fi
  echo "$sha256  $sdist" | sha256sum -c --quiet - || { echo "build-llamacpp.sh: $sdist does not have the pinned SHA-256" >&2; exit 1; }
  rm -rf "$src" "$top/unpack" && mkdir -p "$top/unpack"
  tar xzf "$sdist" -C "$top/unpack"
  mv "$top/unpack/llama_cpp_python-$version/vendor/llama.cpp" "$src"
  rm -rf "$top/unpack"
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF "${launcher[@]}")

if ! $cuda; then
  [ -f "$top/tree-cpu/CMakeCache.txt" ] || cmake -S "$src" -B "$top/tree-cpu" "${common[@]}" -DGGML_NATIVE=ON >/dev/null
  cmake --build "$top/tree-cpu" -j "$jobs" --target llama-bench llama-perplexity
  mkdir -p "$top/cpu/bin"
  cp "$top/tree-cpu/bin/llama-bench" "$top/tree-cpu/bin/llama-perplexity" "$top/cpu/bin/"
  echo "build-llamacpp.sh: $top/cpu/bin: $(ls "$top/cpu/bin" | tr '\n' ' ')"
  exit 0
fi

export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "build-llamacpp.sh: nvcc not found" >&2; exit 1; }
# A tree configured before is only rebuilt (an hour's work is not redone for a changed flag: remove
# it). Its llama-bench is kept in build-llamacpp/cuda/bin, so a bundle can be packed again (a new
# megaqwen) after the tree is gone.
if [ -f "$top/tree-cuda/CMakeCache.txt" ] || [ ! -x "$top/cuda/bin/llama-bench" ]; then
  [ -f "$top/tree-cuda/CMakeCache.txt" ] || cmake -S "$src" -B "$top/tree-cuda" "${common[@]}" -DGGML_NATIVE=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
  cmake --build "$top/tree-cuda" -j "$jobs" --target llama-bench
  mkdir -p "$top/cuda/bin"
  strip -o "$top/cuda/bin/llama-bench" "$top/tree-cuda/bin/llama-bench"
  grep -m1 -o 'CMAKE_CUDA_ARCHITECTURES:[A-Z]*=.*' "$top/tree-cuda/CMakeCache.txt" >"$top/cuda/ARCHITECTURES"
else
  echo "build-llamacpp.sh: packing the llama-bench built before ($top/cuda/bin; remove it to rebuild)"
fi

# The bundle: everything gpu-check.sh's llamacpp call runs, in one folder under the device tool's
# 64 MiB: llama-bench (49 MB stripped: the CUDA kernels of every quantization) and megaqwen packed
# with xz (gpu-check unpacks them), the libraries both load but cuBLAS and NCCL (PyTorch's wheel
# has them there), the Qwen3 tokenizer for the synthetic model, llama.cpp's converter.
mq=build-gpu
[ -f "$mq/bin/megaqwen.xz" ] || { echo "build-llamacpp.sh: run scripts/build-gpu.sh first (its megaqwen goes in the bundle)" >&2; exit 1; }
gpu=$top/gpu
rm -rf "$gpu" && mkdir -p "$gpu/bin" "$gpu/lib" "$gpu/convert"
xz -T0 -6 -c "$top/cuda/bin/llama-bench" >"$gpu/bin/llama-bench.xz"
cp "$mq/bin/megaqwen.xz" "$gpu/bin/"  # build-gpu.sh packs it already
cp "$mq"/lib/* "$gpu/lib/"
cp -r "$mq/tokenizer" "$gpu/" 2>/dev/null || echo "build-llamacpp.sh: build-gpu has no tokenizer; the converter will fail there" >&2
ldd "$top/cuda/bin/llama-bench" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so*|libnvidia*|libcublas*|libnccl*) ;;
    *) [ -f "$gpu/lib/$(basename "$lib")" ] || cp -L "$lib" "$gpu/lib/" ;;
  esac
done
cp "$src/convert_hf_to_gguf.py" "$gpu/convert/"
cp -r "$src/conversion" "$gpu/convert/"
cp -r "$src/gguf-py/gguf" "$gpu/convert/gguf"
find "$gpu/convert" -name __pycache__ -prune -exec rm -rf {} +
{
  echo "llama.cpp: vendored in llama-cpp-python $version, $(cat "$top/cuda/ARCHITECTURES")"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(nvcc --version | tail -1)"
  echo "--- ldd llama-bench"; ldd "$top/cuda/bin/llama-bench"
  echo "--- megaqwen (build-gpu/BUILD-INFO)"; cat "$mq/BUILD-INFO"
} >"$gpu/BUILD-INFO"
du -sh "$gpu" "$gpu"/* | sed 's/^/build-llamacpp.sh: /'
tree_kb=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total_kb=$((tree_kb + $(du -sk "$gpu" | cut -f1)))
echo "build-llamacpp.sh: working tree + $gpu = $((total_kb / 1024)) MiB of the device tool's 64"
((total_kb <= 64 * 1024)) || echo "build-llamacpp.sh: OVER the 64 MiB the device tool carries" >&2
