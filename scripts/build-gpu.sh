#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-check.sh runs on the GPU machine, where none of
# our Debian -dev libraries exist and nothing can be installed:
#   build-gpu/bin/megaqwen, build-gpu/bin/test_cuda   Release, sm_90a machine code + compute_80 PTX,
#   (and bench_engine_state where Google Benchmark is installed; megaqwen-mk-timing: megaqwen with the
#   megakernel's timing slots), each xz-packed (NAME.xz)
#                                                      no -march=native, libstdc++/libgcc linked statically
#   build-gpu/lib/                                     the non-system shared libraries they load (fmt,
#                                                      pcre2, utf8proc, libedit, libbsd, libmd, ...)
#   build-gpu/tokenizer/qwen3/                         Qwen3's tokenizer from ../shared (4.5 MB)
#   build-gpu/BUILD-INFO                               commit, compiler, ldd output
# The CMake tree stays in build-gpu-tree/ (large, not carried). Carry build-gpu/ with the device tool:
#   run(command="bash scripts/gpu-check.sh", carry=["build-gpu"], kind="nvidia-h200", timeout_s=600)
# cuBLAS is not bundled (hundreds of MB): it is opened at run time from PyTorch's wheel on that machine.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "build-gpu.sh: nvcc not found" >&2; exit 1; }
export PATH="/usr/local/cuda/bin:$PATH"
jobs="${MEGAQWEN_JOBS:-2}"
tree=build-gpu-tree
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# A CUDA object for which ninja recorded no header dependencies would never be compiled again after a
# header changes (seen once in build/: megakernel.cu.o with "#deps 0", so megaqwen kept the nucleus
# draw from before a header change): such objects are removed, so they are compiled now.
drop_objects_without_deps() {
  [ -f "$1/build.ninja" ] || return 0
  ninja -C "$1" -t deps 2>/dev/null | awk '/\.cu\.o: #deps 0,/ {sub(/:$/, "", $1); print $1}' |
    while read -r o; do echo "build-gpu.sh: $1/$o has no recorded dependencies: compiled again" >&2; rm -f "$1/$o"; done
}
drop_objects_without_deps "$tree"
drop_objects_without_deps "$tree-timing"
cmake -S . -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_CUDA_ARCHITECTURES="90a-real;80-virtual" \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build "$tree" -j "$jobs" --target megaqwen_cli test_cuda

rm -rf build-gpu
mkdir -p build-gpu/bin build-gpu/lib
cp "$tree/megaqwen" "$tree/tests/cuda/test_cuda" build-gpu/bin/
# Optional (Google Benchmark): the save/restore timings (gpu-check's bench stage) and the megakernel's
# dependency edge alone (bench_mk_edges, gpu-check's mk-timing stage).
if cmake --build "$tree" -j "$jobs" --target bench_engine_state bench_mk_edges >/dev/null 2>&1; then
  cp "$tree/bench/engine/bench_engine_state" "$tree/bench/engine/bench_mk_edges" build-gpu/bin/
else
  echo "build-gpu.sh: bench_engine_state / bench_mk_edges not built (no Google Benchmark); gpu-check skips them" >&2
fi
# megaqwen again with the megakernel's per-stage timing slots compiled in (-DMEGAQWEN_MK_TIMING=ON, a
# tree of its own: the slots cost registers and stores in the hot loop, so the normal build has none;
# only megakernel.cu differs, ccache serves the rest): gpu-check's mk-timing stage prints where
# decode time goes. MEGAQWEN_GPU_TIMING=0 skips it.
if [ "${MEGAQWEN_GPU_TIMING:-1}" != 0 ]; then
  cmake -S . -B "$tree-timing" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
    -DCMAKE_CUDA_ARCHITECTURES="90a-real;80-virtual" -DMEGAQWEN_MK_TIMING=ON \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
  cmake --build "$tree-timing" -j "$jobs" --target megaqwen_cli
  cp "$tree-timing/megaqwen" build-gpu/bin/megaqwen-mk-timing
fi
# Everything ldd resolves outside the C library, the dynamic loader and the driver goes along.
for bin in build-gpu/bin/*; do ldd "$bin"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so*|libnvidia*) ;;
    *) cp -L "$lib" build-gpu/lib/ ;;
  esac
done
# The Qwen3 tokenizer for the synthetic model on the GPU machine (gpu-check's cli stage: generate
# from text, a chat), where ../shared does not travel: the vocab.json + merges.txt form, 4.5 MB
# (tokenizer.json is 11 MB of the same).
tok=../shared/models/qwen3-0.6b
if [ -f "$tok/vocab.json" ] && [ -f "$tok/merges.txt" ] && [ -f "$tok/tokenizer_config.json" ]; then
  mkdir -p build-gpu/tokenizer/qwen3
  cp "$tok/vocab.json" "$tok/merges.txt" "$tok/tokenizer_config.json" build-gpu/tokenizer/qwen3/
else
  echo "build-gpu.sh: no Qwen3 tokenizer in $tok; gpu-check's cli stage will generate from ids, without chat" >&2
fi
# The executables travel xz-packed (about a quarter of their size; gpu-check.sh unpacks them there):
# with the timing build beside the others they would not fit the device tool's 64 MiB otherwise.
for f in build-gpu/bin/*; do xz -T0 -6 "$f"; done
{
  echo "commit: $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown) (plus uncommitted changes: $(git status --porcelain 2>/dev/null | wc -l) files)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "nvcc: $(nvcc --version | tail -1)"
  echo "gcc: $(gcc --version | head -1)"
  for bin in "$tree/megaqwen" "$tree/tests/cuda/test_cuda"; do echo "--- ldd $bin"; ldd "$bin"; done
} > build-gpu/BUILD-INFO
du -sh build-gpu build-gpu/bin/* build-gpu/lib | sed 's/^/build-gpu.sh: /'
# The device tool carries at most 64 MiB: the working tree (tracked and untracked files git does not
# ignore) plus build-gpu.
tree_kb=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total_kb=$((tree_kb + $(du -sk build-gpu | cut -f1)))
echo "build-gpu.sh: working tree + build-gpu = $((total_kb / 1024)) MiB of the device tool's 64"
((total_kb <= 64 * 1024)) || echo "build-gpu.sh: OVER the 64 MiB the device tool carries" >&2
