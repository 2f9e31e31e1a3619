#!/usr/bin/env bash
# The one command for the GPU machine (NVIDIA driver, PyTorch + transformers, compute-sanitizer;
# none of our Debian -dev libraries, no cmake/ctest needed, nothing installed). Build here first with
# scripts/build-gpu.sh, then with the device tool:
#   run(command="bash scripts/gpu-check.sh", carry=["build-gpu"], timeout_s=600)
# Device time is short: 15 minutes a session, all calls together, a machine's start (1-2 min) and
# the transfers included, so one call of ~10 min and perhaps a short second one while the machine is
# still warm (30 s). Ask for the H200 by name (the issues' targets are the H200's):
#   run(command="bash scripts/gpu-check.sh", carry=["build-gpu"], kind="nvidia-h200", timeout_s=600)
# Stages, in priority order (each under its own `timeout`; a failing stage does not stop the others;
# a stage that would not fit in the remaining time is skipped; the summary's last line names the
# stages still to run, ready to paste as MEGAQWEN_STAGES into the next call):
#   env       GPU, driver, glibc, which tools exist; where cuBLAS was found
#   model     megaqwen synth --preset qwen3-0.6b (the benchmark and full-size test model), with the
#             Qwen3 tokenizer that build-gpu.sh packs into build-gpu/tokenizer when ../shared has it
#   tests     every test of build-gpu/bin/test_cuda (the ctest label gpu) but the larger models'
#             (hybrid, mk-sizes), one suite per process so that a fault poisoning the CUDA context or
#             a hang costs one suite; merged gtest XML (tests.xml), a crashed suite named with its
#             last test
#   cli       megaqwen generate --device cuda with both decode kernels next to the CPU's, and a
#             scripted two-turn megaqwen chat --device cuda (what a user types)
#   verify    megaqwen verify (the CPU reference vs both decode kernels: logits, greedy tokens), then
#             tools/verify_hf.py: logits against transformers in fp32 and bf16 over 256 and 2,048
#             positions, with a verdict
#   bench     megaqwen bench --device cuda, depths 1,512,2048,8192,32768, prompts 512,4096; then
#             bench_engine_state (the prompt cache's save/restore copies on the device) into the log
#   mk        the decode megakernel's numbers: bench
#             megakernel vs per-op at depths 1..32768 with greedy, top-k, nucleus and logprob
#             selection, then each optimization switched back (MEGAQWEN_MK_ABLATE) and the attention
#             merge in stage C at every depth (MEGAQWEN_MK_MERGE_SPLITS=32), the per-op step with
#             programmatic dependent launch (MEGAQWEN_PDL=on, both families), the flagged vectors
#             (MEGAQWEN_MK_VECTORS=flagged), the one-stage MLP (MEGAQWEN_MK_MLP=one-stage), both, and the
#             timing probes (MEGAQWEN_MK_PROBE: no waits, no weights, both), also on Qwen3.5-0.8B; then the per-operator step kernel by kernel
#             (MEGAQWEN_PEROP_PROFILE) on both models (PEROP PROFILE lines in the log)
#   mk-timing bench_mk_edges (one all-CTA dependency edge alone, ns per edge), then the megakernel's
#             per-stage wait / work / weight wait (megaqwen-mk-timing, the timing-slot build):
#             Qwen3-0.6B at depths 1 and 4,096 (and 1 with flagged vectors, with the one-stage MLP,
#             and with both; and 1 with the nucleus draw, top-p 0.9 without a top-k), Qwen3.5-0.8B at depth 1
#   memcheck  compute-sanitizer memcheck on the tiny-model engine tests and the kernel tests, then
#             racecheck and memcheck on the megakernel's tiny-model tests
#   mk-sizes  Qwen3-1.7B and 4B shapes: synth (3.4 + 8 GB), their megakernel tests, megakernel vs per-op
#             bench
#   hybrid    Qwen3.5: synth --preset qwen3.5-0.8b, the full-size CudaHybridEngine and hybrid
#             megakernel tests (the tiny presets ran in tests), megaqwen verify,
#             tools/verify_hf.py against transformers' Qwen3.5, a bench (decode on the hybrid
#             megakernel), a prefill bench with MEGAQWEN_DELTANET_PREFILL=sequential and a decode
#             bench with MEGAQWEN_DECODE=per-op (hybrid-bench.json holds all three)
#   peers     tools/bench_peers.py: transformers eager and static cache + torch.compile, same tests
#   llamacpp  llama.cpp on the same model (tools/bench_llamacpp.py: converted to a bf16 GGUF there,
#             llama-bench against megaqwen bench run just before it, same tests as bench). It needs
#             the bundle of scripts/build-llamacpp.sh --cuda (llama-bench and megaqwen xz-packed,
#             libraries, tokenizer, converter), which does not fit in one carry beside build-gpu:
#             its own call is MEGAQWEN_GPU_BUILD=build-llamacpp/gpu MEGAQWEN_STAGES="env model
#             llamacpp" with carry=["build-llamacpp/gpu"] (test_cuda is needed only by the stages
#             that run it). Without llama-bench the stage is skipped and that call named in NEXT.
# The default deadline (570 s) fits one call; the stages past what fits go to the next call, whose
# command the summary prints (e.g. MEGAQWEN_STAGES="env model peers memcheck hybrid mk-sizes").
# The kernels' SASS needs no GPU: scripts/sass-report.sh reads it here.
# Output (at most 8 files, the device tool's limit: keep it at 8) under $OUT (or build-gpu/out):
# gpu-check.log (every stage's output), tests.xml, bench.json, mk-bench.json, verify.json,
# peers.json (transformers and llama.cpp, whichever ran), hybrid-bench.json, summary.md.
# MEGAQWEN_STAGES="tests bench" runs a subset; MEGAQWEN_DEADLINE (seconds, default 570) bounds the run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root="$(pwd)"
# MEGAQWEN_GPU_BUILD: the bundle build-gpu.sh made (tests point it at an ordinary build);
# MEGAQWEN_CHECK_TMP: the scratch folder (models, per-suite gtest files, bench JSON before merging).
gb="${MEGAQWEN_GPU_BUILD:-build-gpu}"
[[ $gb == /* ]] || gb="$root/$gb"
tmp="${MEGAQWEN_CHECK_TMP:-/tmp}"
out="${OUT:-$gb/out}"
mkdir -p "$out"
log="$out/gpu-check.log"
: >"$log"
all_stages="env model tests cli verify bench mk mk-timing memcheck mk-sizes hybrid peers llamacpp"
stages="${MEGAQWEN_STAGES:-$all_stages}"
deadline="${MEGAQWEN_DEADLINE:-570}"
start=$SECONDS
declare -A status
export PYTHONUNBUFFERED=1

say() { echo "$@" | tee -a "$log"; }
want() { [[ " $stages " == *" $1 "* ]]; }
# stage NAME BUDGET_SECONDS COMMAND...: runs COMMAND under `timeout BUDGET` if it fits before the deadline.
stage() {
  local name=$1 budget=$2
  shift 2
  want "$name" || return 0
  local left=$((deadline - (SECONDS - start)))
  if ((left < budget / 2)); then
    status[$name]="skipped (needs ~${budget}s, ${left}s left)"
    say "=== $name: skipped, ${left}s left"
    return 0
  fi
  ((budget > left)) && budget=$left
  say "=== $name (limit ${budget}s) ==="
  # Anything else on the GPU shares its SMs with this stage's kernels and its numbers are void.
  local busy
  busy=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | paste -sd';')
  [ -z "$busy" ] || say "=== $name: WARNING: the GPU already runs $busy"
  local t0=$SECONDS
  # The stage functions run in a child bash (timeout cannot call a function): they and the variables
  # they use are exported below. This timeout kills the stage's whole process group; the timeouts
  # inside the stages run with --foreground so that they stay in that group (a plain one moves to a
  # group of its own, and a test cut off with its stage would go on running beside the next stage's
  # benchmarks).
  # In the background only to learn timeout's pid, which is the stage's process group id.
  timeout --kill-after=10 "$budget" bash -c "$*" >>"$log" 2>&1 &
  local group=$!
  wait "$group"
  local rc=$?
  status[$name]="rc $rc in $((SECONDS - t0))s$([ $rc = 124 ] && echo ' (timed out)')"
  say "=== $name: ${status[$name]}"
  reap_group "$group" "$name"
}

# reap_group PGID STAGE: kills what a finished stage left running in its process group. An inner
# timeout --foreground kills only its own child: on 2026-11-28 racecheck's cut left its test process
# running on the GPU beside the next stage, whose Qwen3.5 numbers then came out ~3x slow.
reap_group() {
  local left
  left=$(ps -eo pid=,pgid=,args= | awk -v g="$1" '$2 == g {print}')
  [ -n "$left" ] || return 0
  say "=== $2: killed what it left running: $(echo "$left" | awk '{$2=""; print}' | cut -c1-160 | paste -sd';')"
  kill -KILL -- "-$1" 2>/dev/null
  sleep 1
}

# The binaries: $gb/bin/NAME, or $gb/bin/NAME.xz unpacked here (build-llamacpp.sh's bundle packs
# them so that llama.cpp's call fits the device tool's 64 MiB); $bin holds them all.
bin=$gb/bin
if compgen -G "$gb/bin/*.xz" >/dev/null; then
  bin=$tmp/mq-unpacked
  rm -rf "$bin" && mkdir -p "$bin"
  for f in "$gb"/bin/*; do
    case $f in
      *.xz) python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$f" "$bin/$(basename "$f" .xz)" && chmod +x "$bin/$(basename "$f" .xz)" ;;
      *) ln -s "$f" "$bin/$(basename "$f")" ;;
    esac
  done
fi
[ -x "$bin/megaqwen" ] || {
  say "gpu-check.sh: $gb/bin/megaqwen is missing: run scripts/build-gpu.sh here and carry build-gpu"
  exit 2
}
for name in tests memcheck hybrid mk-sizes; do
  if want $name && [ ! -x "$bin/test_cuda" ]; then
    say "gpu-check.sh: stage $name runs $gb/bin/test_cuda, which was not carried (carry build-gpu)"
    exit 2
  fi
done

# lib_dir PATTERN: the folder of the first library matching PATTERN in the CUDA toolkit or in
# PyTorch's nvidia wheels (the GPU machine has cuBLAS and NCCL only there).
nvidia_dirs=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia"); print(" ".join(s.submodule_search_locations) if s else "")' 2>/dev/null)
lib_dir() {
  local d f
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $nvidia_dirs; do
    f=$(find "$d" -maxdepth 3 -name "$1" 2>/dev/null | head -1)
    if [ -n "$f" ]; then dirname "$f"; return; fi
  done
}
cublas_dir=$(lib_dir 'libcublas.so.1[23]*')  # opened at run time by the engine
nccl_dir=$(lib_dir 'libnccl.so.2*')          # linked by llama.cpp's CUDA backend (for several GPUs)
libpath="$gb/lib${cublas_dir:+:$cublas_dir}${nccl_dir:+:$nccl_dir}"
# Wrappers so our binaries (and the Python tools that call them) get our libraries; Python itself
# keeps its own environment.
mkdir -p "$tmp/mq-bin"
for b in megaqwen megaqwen-mk-timing test_cuda bench_engine_state bench_mk_edges llama-bench; do
  [ -x "$bin/$b" ] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$libpath" "$bin/$b" >"$tmp/mq-bin/$b"
  chmod +x "$tmp/mq-bin/$b"
done
mq=$tmp/mq-bin/megaqwen
model=$tmp/mq-models/synth-qwen3-0.6b
hybrid_model=$tmp/mq-models/synth-qwen3.5-0.8b
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || ls /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)

env_stage() {
  nvidia-smi || true
  echo "glibc: $(ldd --version | head -1)"
  grep -m1 "built:" "$gb/BUILD-INFO" || true
  echo "cuBLAS folder: ${cublas_dir:-NOT FOUND}"
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo "python3: $(python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1)"
  for b in megaqwen llama-bench; do
    [ -x "$bin/$b" ] || continue
    LD_LIBRARY_PATH="$libpath" ldd "$bin/$b" | grep -i "not found" && echo "MISSING LIBRARIES ABOVE ($b)"
  done
  "$mq" --help >/dev/null && echo "megaqwen starts"
}
model_stage() {
  [ -f "$model/model.safetensors" ] && return 0
  local tok=()
  [ -f "$gb/tokenizer/qwen3/vocab.json" ] && tok=(--tokenizer "$gb/tokenizer/qwen3")
  "$mq" synth --preset qwen3-0.6b --seed 0 --out "$model" "${tok[@]}"
}
# run_suites DIR SUITE_TIMEOUT SUITE...: each gtest suite of test_cuda in its own process, output in
# the log and DIR/NAME.{out,xml,rc}; merged into DIR/merged.xml by tools/merge_gtest_xml.py.
run_suites() {
  local dir=$1 limit=$2 s f
  shift 2
  rm -rf "$dir" && mkdir -p "$dir"
  for s in "$@"; do
    f=$dir/${s//\//_}
    echo "--- suite $s"
    timeout --foreground --kill-after=5 "$limit" "$tmp/mq-bin/test_cuda" --gtest_filter="$s.*" --gtest_output="xml:$f.xml" 2>&1 |
      tee "$f.out"
    echo "${PIPESTATUS[0]}" >"$f.rc"
  done
  python3 tools/merge_gtest_xml.py --runs "$dir" --out "$dir/merged.xml"
}
# The suites of test_cuda (gtest_list_tests: a suite's line is unindented, "Name." then perhaps a
# comment; gtest_main's "Running main() from ..." is not one).
list_suites() { "$tmp/mq-bin/test_cuda" --gtest_list_tests | awk '/^[^ ]/ && $1 ~ /\.$/ {sub(/\.$/, "", $1); print $1}'; }
# The suites that need the larger models run in the hybrid and mk-sizes stages.
larger_model_suites='^(Qwen3/MegakernelSizes|HybridMegakernelFull|CudaHybridFullModel)$'
tests_stage() {
  local suites
  suites=$(list_suites | grep -vE "$larger_model_suites") || return 1
  MEGAQWEN_TEST_QWEN3_06B="$model" run_suites "$tmp/gtest-tests" 150 $suites
  local rc=$?
  cp "$tmp/gtest-tests/merged.xml" "$out/tests.xml"
  return $rc
}
# What a user does: generate with each decode kernel next to the CPU (the same greedy text is
# expected, though 28 layers of bf16 cache rounding may flip a near-tie late in it: verify judges),
# and a scripted two-turn chat on the GPU.
cli_stage() {
  local rc=0 k prompt=(--ids "785 6722 315 9625 374") text=false
  [ -f "$model/vocab.json" ] || [ -f "$model/tokenizer.json" ] && text=true
  $text && prompt=(--prompt "The capital of France is")
  "$mq" generate --model "$model" --device cpu "${prompt[@]}" -n 48 --greedy --print-ids >"$tmp/gen-cpu.txt" || rc=1
  echo "GENERATE cpu: $(cat $tmp/gen-cpu.txt)"
  for k in megakernel per-op; do
    "$mq" generate --model "$model" --device cuda --decode-kernel $k "${prompt[@]}" -n 48 --greedy --print-ids \
      >"$tmp/gen-$k.txt" || { echo "GENERATE $k FAILED"; rc=1; continue; }
    echo "GENERATE $k: $(cat $tmp/gen-$k.txt)"
    cmp -s "$tmp/gen-cpu.txt" "$tmp/gen-$k.txt" && echo "GENERATE $k: same 48 tokens as the CPU" ||
      echo "GENERATE $k: differs from the CPU (tokens above)"
  done
  $text && "$mq" generate --model "$model" --device cuda "${prompt[@]}" -n 24 --greedy
  if $text; then
    printf 'Hello! Who are you?\nAnd what is 2 + 2?\n/stats\n' |
      timeout --foreground 60 "$mq" chat --model "$model" --device cuda --plain --no-think -n 32 --greedy >"$tmp/chat.txt" 2>&1 &&
      echo "CHAT: two turns answered on the GPU" || { echo "CHAT FAILED"; rc=1; }
    cat "$tmp/chat.txt"
  else
    echo "CHAT: not run (no tokenizer in $gb/tokenizer: build-gpu.sh packs it from ../shared)"
  fi
  return $rc
}
hybrid_stage() {
  local rc=0
  [ -f "$hybrid_model/model.safetensors" ] || "$mq" synth --preset qwen3.5-0.8b --seed 0 --out "$hybrid_model" || return 1
  MEGAQWEN_TEST_QWEN35_08B="$hybrid_model" run_suites "$tmp/gtest-hybrid" 240 HybridMegakernelFull CudaHybridFullModel ||
    rc=1
  timeout --foreground 90 "$mq" verify --model "$hybrid_model" --device cuda || { echo "MEGAQWEN VERIFY HYBRID FAILED"; rc=1; }
  timeout --foreground 120 python3 tools/verify_hf.py --binary "$mq" --model "$hybrid_model" --positions 128 || rc=1
  "$mq" bench --model "$hybrid_model" --device cuda --prompt-len 512,4096 --depth 1,512,4096 --tokens 64 --repeats 3 \
    --json "$tmp/hybrid-bench.json" || rc=1
  # What the chunked delta rule buys in prefill: the same prompts with the token-by-token kernel.
  MEGAQWEN_DELTANET_PREFILL=sequential timeout --foreground 60 "$mq" bench --model "$hybrid_model" --device cuda \
    --prompt-len 512,4096 --depth 1 --tokens 8 --repeats 3 --json "$tmp/hybrid-bench-seq.json" || rc=1
  # What the hybrid megakernel buys in decode (the bench above decodes on it where it starts): the
  # per-operator graph at the same depths.
  MEGAQWEN_DECODE=per-op timeout --foreground 60 "$mq" bench --model "$hybrid_model" --device cuda --prompt-len 16 \
    --depth 1,512,4096 --tokens 64 --repeats 3 --json "$tmp/hybrid-bench-perop.json" || rc=1
  python3 - "$out/hybrid-bench.json" "$tmp" <<'EOF'
import json, sys
runs, tmp = {}, sys.argv[2]
for name, path in (("default", f"{tmp}/hybrid-bench.json"), ("deltanet-sequential", f"{tmp}/hybrid-bench-seq.json"),
                   ("per-op-decode", f"{tmp}/hybrid-bench-perop.json")):
    try:
        runs[name] = json.load(open(path))
    except (OSError, ValueError) as e:
        runs[name] = {"error": str(e)}
json.dump(runs, open(sys.argv[1], "w"), indent=1)
EOF
  return $rc
}
bench_stage() {
  "$mq" bench --model "$model" --device cuda --prompt-len 512,4096 --depth 1,512,2048,8192,32768 --tokens 128 \
    --repeats 5 --json "$out/bench.json"
  local rc=$?
  # The prompt cache's copies on the device (save_state / restore_state of 256 .. 4096 tokens), in the log.
  if [ -x "$tmp/mq-bin/bench_engine_state" ]; then
    echo "ENGINE STATE BENCH (device copies of a saved sequence)"
    MEGAQWEN_BENCH_MODEL="$model" MEGAQWEN_BENCH_DEVICE=cuda timeout --foreground 45 "$tmp/mq-bin/bench_engine_state" \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true || echo "ENGINE STATE BENCH FAILED"
  fi
  return $rc
}
verify_stage() {
  local k rc=0
  for k in megakernel per-op; do
    timeout --foreground 60 "$mq" verify --model "$model" --device cuda --decode-kernel $k || { echo "MEGAQWEN VERIFY $k FAILED"; rc=1; }
  done
  python3 tools/verify_hf.py --binary "$mq" --model "$model" --positions 256,2048 --json "$out/verify.json" && return $rc
}
peers_stage() {
  python3 tools/bench_peers.py --model "$model" --prompt-len 512,4096 --depth 1,512,2048,8192,32768 --tokens 128 \
    --megaqwen-json "$out/bench.json" --json "$tmp/peers-transformers.json" --budget-seconds 280
}
# llama.cpp (the bundle of scripts/build-llamacpp.sh --cuda, carried as the whole $gb): llama-bench,
# the libraries it loads but cuBLAS and NCCL (PyTorch's), convert_hf_to_gguf.py; the GGUF is made here.
llamacpp_stage() {
  [ -f "$model/vocab.json" ] || [ -f "$model/tokenizer.json" ] ||
    { echo "LLAMACPP: $model has no tokenizer: convert_hf_to_gguf.py needs one (the bundle's tokenizer/)"; return 3; }
  echo "NCCL folder: ${nccl_dir:-NOT FOUND}"
  grep -m1 '^llama.cpp:' "$gb/BUILD-INFO" || true
  python3 tools/bench_llamacpp.py --model "$model" --llama-bin "$tmp/mq-bin" --llama-src "$gb/convert" \
    --gguf "$tmp/mq-models/synth-qwen3-0.6b-bf16.gguf" --device cuda --prompt-len 512,4096 \
    --depth 1,512,2048,8192,32768 --tokens 128 --repeats 5 --megaqwen "$mq" --json "$tmp/peers-llamacpp.json" \
    --budget-seconds 200 --test-timeout 60
}
memcheck_stage() {
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found on this machine"; return 3; }
  MEGAQWEN_TEST_QWEN3_06B="$model" LD_LIBRARY_PATH="$libpath" "$sanitizer" --tool memcheck --error-exitcode 9 \
    --print-limit 20 "$bin/test_cuda" \
    --gtest_filter='CudaEngineTest.PrefillAllLogitsMatchesCpu:CudaEngineTest.DecodeMatches*:CudaEngineTest.Chunked*:CudaKernels.QkNorm*:CudaKernels.PrefillAttention*:CudaSampling.FilteredDraws*:Presets/CudaHybridEngineTest.ChunkedPrefill*:Presets/CudaHybridEngineTest.Truncate*:CudaGatedDeltaNet.*'
  local rc=$? tool
  echo "SANITIZER memcheck (engine and kernels): $([ $rc = 0 ] && echo clean || echo "rc $rc")"
  # The megakernel on the tiny model (slow under the tools: few tests).
  for tool in racecheck memcheck; do
    MEGAQWEN_TEST_QUICK=1 LD_LIBRARY_PATH="$libpath" timeout --foreground 120 "$sanitizer" --tool $tool --error-exitcode 9 --print-limit 20 \
      "$bin/test_cuda" --gtest_filter='MegakernelTiny.RepeatedRunsAreBitIdentical:Megakernel.Selection*' &&
      echo "MK SANITIZER $tool: clean" || { echo "MK SANITIZER $tool: rc $?"; rc=1; }
    # A cut sanitizer leaves its target running (timeout --foreground kills only the tool).
    pkill -KILL -f "^$bin/test_cuda --gtest_filter=MegakernelTiny" 2>/dev/null && echo "MK SANITIZER $tool: killed its leftover test"
  done
  return $rc
}

# mk_bench NAME MODEL_DIR LIMIT: megaqwen bench (decode by position) with the megakernel and with the
# per-op path, then the side-by-side table; every model's runs accumulate in $out/mk-bench.json.
mk_bench() {
  local name=$1 dir=$2 limit=$3 k
  for k in megakernel per-op; do
    MEGAQWEN_DECODE=$k timeout --foreground "$limit" "$mq" bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
      --depth 1,128,1024,4096,8192,16384,32768 --tokens 128 --repeats 3 --json "$tmp/mk-bench-$name-$k.json" ||
      echo "MK BENCH $name $k FAILED"
  done
  # What in-kernel token selection costs: Qwen3's sampling defaults (top-k 20 + top-p) at two depths.
  MEGAQWEN_DECODE=megakernel timeout --foreground 60 "$mq" bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
    --depth 1,4096 --tokens 128 --repeats 3 --temp 0.6 --top-k 20 --top-p 0.95 --seed 1 \
    --json "$tmp/mk-bench-$name-megakernel-topk.json" || echo "MK BENCH $name sampled FAILED"
  # ... and the nucleus draw over the whole vocabulary (top-p without a top-k, as OpenAI clients ask).
  MEGAQWEN_DECODE=megakernel timeout --foreground 45 "$mq" bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
    --depth 1,4096 --tokens 128 --repeats 3 --temp 0.7 --top-k 0 --top-p 0.9 --seed 1 \
    --json "$tmp/mk-bench-$name-megakernel-nucleus.json" || echo "MK BENCH $name nucleus FAILED"
  # ... and scoring every greedy draw in the kernel (a logprob request: 5 alternatives).
  MEGAQWEN_DECODE=megakernel timeout --foreground 45 "$mq" bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
    --depth 1,4096 --tokens 128 --repeats 3 --logprobs 5 \
    --json "$tmp/mk-bench-$name-megakernel-logprobs.json" || echo "MK BENCH $name logprobs FAILED"
  python3 tools/mk_bench_table.py --peak-gb-s "$peak_gb_s" --out "$out/mk-bench.json" "$name:megakernel:$tmp/mk-bench-$name-megakernel.json" \
    "$name:per-op:$tmp/mk-bench-$name-per-op.json" "$name:megakernel-topk:$tmp/mk-bench-$name-megakernel-topk.json" \
    "$name:megakernel-nucleus:$tmp/mk-bench-$name-megakernel-nucleus.json" \
    "$name:megakernel-logprobs:$tmp/mk-bench-$name-megakernel-logprobs.json"
}

mk_stage() {
  # Its tests ran in the tests stage (tiny and full 0.6B), its sanitizers run in memcheck; its SASS
  # is read without a GPU (scripts/sass-report.sh).
  # Megakernel vs per-op, same binary, same model (MEGAQWEN_DECODE picks the path); then what each
  # optimization buys: the same kernel with one switched back (MEGAQWEN_MK_ABLATE, layout.h).
  mk_bench qwen3-0.6b "$model" 100
  local ab abl=()
  # The per-operator step with programmatic dependent launch (MEGAQWEN_PDL=on: each kernel launched
  # while its predecessor finishes; launch.cuh), against the per-op row above (Qwen3.5: below).
  MEGAQWEN_DECODE=per-op MEGAQWEN_PDL=on timeout --foreground 40 "$mq" bench --model "$model" --device cuda --ctx 5000 \
    --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "$tmp/mk-bench-qwen3-0.6b-per-op-pdl.json" ||
    echo "MK BENCH per-op-pdl FAILED"
  abl+=("qwen3-0.6b:per-op-pdl:$tmp/mk-bench-qwen3-0.6b-per-op-pdl.json")
  for ab in 1 2 4 8 15; do
    MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_ABLATE=$ab timeout --foreground 40 "$mq" bench --model "$model" --device cuda --ctx 5000 \
      --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "$tmp/mk-bench-qwen3-0.6b-ablate-$ab.json" ||
      echo "MK BENCH ablate $ab FAILED"
    abl+=("qwen3-0.6b:ablate-$ab:$tmp/mk-bench-qwen3-0.6b-ablate-$ab.json")
  done
  # Stage C merging the attention splits at every depth (16 of them at 4,096), against the default's
  # last-split merge past 4 (docs/MEGAKERNEL.md, "Who merges the attention splits").
  MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_MERGE_SPLITS=32 timeout --foreground 40 "$mq" bench --model "$model" --device cuda \
    --ctx 5000 --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "$tmp/mk-bench-qwen3-0.6b-merge-32.json" ||
    echo "MK BENCH merge-32 FAILED"
  abl+=("qwen3-0.6b:merge-32:$tmp/mk-bench-qwen3-0.6b-merge-32.json")
  # x, xmid and act as flagged words polled by their readers, against the all-CTA counters (the
  # default; docs/MEGAKERNEL.md, "Flagged vectors"), on both model families.
  MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_VECTORS=flagged timeout --foreground 40 "$mq" bench --model "$model" --device cuda \
    --ctx 5000 --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "$tmp/mk-bench-qwen3-0.6b-flagged.json" ||
    echo "MK BENCH flagged FAILED"
  abl+=("qwen3-0.6b:flagged:$tmp/mk-bench-qwen3-0.6b-flagged.json")
  # The MLP in one stage (each CTA's units through gate/up and down^T, fixed-point red.add into the
  # residual stream): one edge fewer per layer (docs/MEGAKERNEL.md, "The one-stage MLP").
  MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_MLP=one-stage timeout --foreground 40 "$mq" bench --model "$model" --device cuda \
    --ctx 5000 --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "$tmp/mk-bench-qwen3-0.6b-one-stage.json" ||
    echo "MK BENCH one-stage FAILED"
  abl+=("qwen3-0.6b:one-stage:$tmp/mk-bench-qwen3-0.6b-one-stage.json")
  # Both: the one-stage MLP's sums behind DownDone, every other edge on flagged words.
  MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_VECTORS=flagged MEGAQWEN_MK_MLP=one-stage timeout --foreground 40 "$mq" bench \
    --model "$model" --device cuda --ctx 5000 --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 \
    --json "$tmp/mk-bench-qwen3-0.6b-flagged-one-stage.json" || echo "MK BENCH flagged+one-stage FAILED"
  abl+=("qwen3-0.6b:flagged+one-stage:$tmp/mk-bench-qwen3-0.6b-flagged-one-stage.json")
  # The timing probes (meaningless tokens, only the time counts; docs/MEGAKERNEL.md, "Timing probes"):
  # no-waits is the weight stream and the work with one grid-wide edge per token, no-weights the
  # chain of edges and the work without weights; together they split a token's time.
  local probe
  for probe in no-waits no-weights no-waits,no-weights; do
    MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_PROBE=$probe timeout --foreground 40 "$mq" bench --model "$model" --device cuda \
      --ctx 5000 --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "$tmp/mk-bench-qwen3-0.6b-probe-$probe.json" ||
      echo "MK BENCH probe $probe FAILED"
    abl+=("qwen3-0.6b:probe-$probe:$tmp/mk-bench-qwen3-0.6b-probe-$probe.json")
  done
  [ -f "$hybrid_model/model.safetensors" ] || "$mq" synth --preset qwen3.5-0.8b --seed 0 --out "$hybrid_model" || true
  if [ -f "$hybrid_model/model.safetensors" ]; then
    for k in counters flagged one-stage flagged+one-stage probe-no-waits probe-no-weights per-op per-op-pdl; do
      local vectors=counters probe= mlp=two-stage decode=megakernel pdl=off
      case $k in flagged) vectors=flagged ;; one-stage) mlp=one-stage ;; flagged+one-stage) vectors=flagged mlp=one-stage ;;
        probe-*) probe=${k#probe-} ;; per-op) decode=per-op ;; per-op-pdl) decode=per-op pdl=on ;; esac
      MEGAQWEN_DECODE=$decode MEGAQWEN_PDL=$pdl MEGAQWEN_MK_VECTORS=$vectors MEGAQWEN_MK_PROBE=$probe MEGAQWEN_MK_MLP=$mlp \
        timeout --foreground 40 "$mq" bench --model "$hybrid_model" \
        --device cuda --ctx 5000 --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 \
        --json "$tmp/mk-bench-qwen3.5-0.8b-$k.json" || echo "MK BENCH qwen3.5-0.8b $k FAILED"
      abl+=("qwen3.5-0.8b:$k:$tmp/mk-bench-qwen3.5-0.8b-$k.json")
    done
  fi
  python3 tools/mk_bench_table.py --peak-gb-s "$peak_gb_s" --out "$out/mk-bench.json" "${abl[@]}"
  # Where the per-operator step's time goes, kernel by kernel (MEGAQWEN_PEROP_PROFILE: the step without
  # its graph, each kernel between two events), on both families: Qwen3.5's per-op decode (257 tok/s)
  # is 3.6x Qwen3's per token for 1.3x the bytes, and its megakernel is as far off.
  local m
  for m in "qwen3-0.6b:$model" "qwen3.5-0.8b:$hybrid_model"; do
    [ -f "${m#*:}/model.safetensors" ] || continue
    MEGAQWEN_DECODE=per-op MEGAQWEN_PEROP_PROFILE=1 timeout --foreground 40 "$mq" bench --model "${m#*:}" --device cuda \
      --ctx 5000 --prompt-len 0 --depth 1 --tokens 32 --repeats 1 >"$tmp/perop-profile.txt" 2>&1 ||
      echo "PEROP PROFILE ${m%%:*} FAILED"
    awk -v w="${m%%:*}" '/per-op decode kernels/ {p=1} p && NF {print "PEROP PROFILE " w ": " $0}' "$tmp/perop-profile.txt"
  done
}

# Where the megakernel's decode time goes: megaqwen-mk-timing (build-gpu.sh: the same code with the
# timing slots compiled in) at depths 1 and 4,096, each run's per-stage wait / work (ns per token,
# mean over CTAs) printed by bench and kept in its JSON; the tok/s of this build are not the kernel's
# (the slots add stores and a globaltimer read per stage).
mk_timing_stage() {
  [ -x "$bin/megaqwen-mk-timing" ] || { echo "no megaqwen-mk-timing in $gb/bin (scripts/build-gpu.sh builds it)"; return 3; }
  local run rc=0
  # The dependency edge alone (no weights): ns per edge by input-vector size and poll form.
  if [ -x "$bin/bench_mk_edges" ]; then
    timeout --foreground 30 "$tmp/mq-bin/bench_mk_edges" --benchmark_min_time=0.2 >"$tmp/mk-edges.txt" 2>&1 || rc=1
    sed 's/^/MK EDGES /' "$tmp/mk-edges.txt"
  else
    echo "no bench_mk_edges in $gb/bin (build-gpu.sh builds it where Google Benchmark is installed)"
  fi
  [ -f "$hybrid_model/model.safetensors" ] || "$mq" synth --preset qwen3.5-0.8b --seed 0 --out "$hybrid_model" || rc=1
  for run in "qwen3-0.6b:$model:1:counters" "qwen3-0.6b:$model:1:flagged" "qwen3-0.6b:$model:1:one-stage" \
    "qwen3-0.6b:$model:1:flagged+one-stage" "qwen3-0.6b:$model:1:counters+nucleus" "qwen3-0.6b:$model:4096:counters" \
    "qwen3.5-0.8b:$hybrid_model:1:counters"; do
    IFS=: read -r name dir depth form <<<"$run"
    [ -f "$dir/model.safetensors" ] || continue
    # +nucleus: the benchmark's nucleus draw (top-p 0.9, no top-k), whose cost shows in the Select row.
    local vectors=${form%+nucleus} mlp=two-stage sampling=()
    [ "$form" != "$vectors" ] && sampling=(--temp 0.7 --top-k 0 --top-p 0.9 --seed 1)
    case $vectors in one-stage) vectors=counters mlp=one-stage ;; flagged+one-stage) vectors=flagged mlp=one-stage ;; esac
    MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_VECTORS=$vectors MEGAQWEN_MK_MLP=$mlp timeout --foreground 40 "$tmp/mq-bin/megaqwen-mk-timing" bench \
      --model "$dir" --device cuda --ctx 5000 --prompt-len 0 --depth $depth --tokens 128 --repeats 3 "${sampling[@]}" \
      --json "$tmp/mk-timing-$name-d$depth-$form.json" >"$tmp/mk-timing.txt" 2>&1 || rc=1
    cat "$tmp/mk-timing.txt"
    awk -v w="$name depth $depth $form" '/stage timing/ {p=1; print "MK TIMING " w ": " $0; next} p && NF {print "MK TIMING " w ": " $0}' "$tmp/mk-timing.txt"
    grep -q "stage timing" "$tmp/mk-timing.txt" || { echo "MK TIMING $name depth $depth: no timing report (a build without the slots?)"; rc=1; }
  done
  return $rc
}

# The larger compiled shapes (Qwen3-1.7B, 4B): synthetic models, the MegakernelSizes tests (gtest
# output in the log: the 8-file limit), and the same side-by-side bench.
mk_sizes_stage() {
  local d17=$tmp/mq-models/synth-qwen3-1.7b d4=$tmp/mq-models/synth-qwen3-4b
  [ -f "$d17/model.safetensors" ] || "$mq" synth --preset qwen3-1.7b --seed 0 --out "$d17" || return 1
  [ -f "$d4/model.safetensors" ] || "$mq" synth --preset qwen3-4b --seed 0 --out "$d4" || return 1
  MEGAQWEN_TEST_QWEN3_17B="$d17" MEGAQWEN_TEST_QWEN3_4B="$d4" run_suites "$tmp/gtest-sizes" 180 Qwen3/MegakernelSizes ||
    echo "MK SIZES TESTS FAILED"
  mk_bench qwen3-1.7b "$d17" 120
  mk_bench qwen3-4b "$d4" 150
}

# The floor in mk_bench_table.py's tables: the datasheet bandwidth of the card found (H100 SXM 3.35
# TB/s; H200 4.8 TB/s).
peak_gb_s=4800
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H100 && peak_gb_s=3350

export root gb bin tmp out log libpath cublas_dir nccl_dir mq model hybrid_model sanitizer peak_gb_s larger_model_suites
export -f env_stage model_stage run_suites list_suites tests_stage cli_stage bench_stage verify_stage mk_timing_stage \
  peers_stage memcheck_stage mk_stage mk_bench mk_sizes_stage hybrid_stage llamacpp_stage

# Budgets are upper bounds (a stage that hangs is cut there). The first run on an H200 (2026-11-28,
# bench/results/gpu_h200_gpu-check_2026-11-28_call*.log) took: env 10 s, model 1, tests 59, cli 9,
# verify 35, bench 22, mk 35, peers 298, memcheck 77 (racecheck cut at 60 s), hybrid 64, sass 8 (a
# stage since dropped: scripts/sass-report.sh reads the SASS without a GPU).
# The order is the priority: correctness, then the megakernel's numbers (issue #5), then the peers,
# which ran once already and take the longest.
stage env 30 env_stage
stage model 60 model_stage
stage tests 180 tests_stage
stage cli 60 cli_stage
stage verify 90 verify_stage
stage bench 60 bench_stage
stage mk 210 mk_stage
stage mk-timing 90 mk_timing_stage
stage memcheck 240 memcheck_stage
stage mk-sizes 300 mk_sizes_stage
stage hybrid 150 hybrid_stage
stage peers 300 peers_stage
if want llamacpp && [ ! -x "$bin/llama-bench" ]; then
  status[llamacpp]="skipped (build-llamacpp/gpu not carried)"
  say "=== llamacpp: ${status[llamacpp]}"
else
  stage llamacpp 240 llamacpp_stage
fi
# Both peers' results in one file (the device tool brings back 8 files at most).
python3 - "$out/peers.json" "$tmp/peers-transformers.json" "$tmp/peers-llamacpp.json" <<'PY'
import json, os, sys
runs = {}
for name, path in (("transformers", sys.argv[2]), ("llama.cpp", sys.argv[3])):
    if os.path.exists(path):
        try:
            runs[name] = json.load(open(path))
        except ValueError as e:
            runs[name] = {"error": str(e)}
if runs:
    json.dump(runs, open(sys.argv[1], "w"), indent=1)
PY

python3 - "$out" "$log" <<'PY' | tee "$out/summary.md"
import json, os, re, sys
out, log = sys.argv[1], sys.argv[2]
text = open(log, errors="replace").read()
print("## gpu-check summary\n")
print("| stage | result |\n|---|---|")
for m in re.finditer(r"^=== ([\w-]+): (.*)$", text, re.M):
    print(f"| {m.group(1)} | {m.group(2)} |")
# The tests stage's merged gtest XML (a suite whose process died is one failed case naming its last
# test; the hybrid and mk-sizes suites print their SUITE lines into the log).
for name in ("tests.xml",):
    x = os.path.join(out, name)
    if not os.path.exists(x):
        print(f"\n{name}: none written (tests stage skipped or cut off)")
        continue
    t = open(x, errors="replace").read()
    m = re.search(r'<testsuites tests="(\d+)" failures="(\d+)" disabled="(\d+)" errors="(\d+)"', t)
    skipped = len(re.findall(r'result="skipped"', t))
    if m: print(f"\n{name}: {m.group(1)} tests, {m.group(2)} failed, {skipped} skipped")
    for f in re.findall(r'<testcase name="([^"]+)"[^>]*classname="([^"]+)"[^>]*>\s*<failure', t):
        print(f"  FAILED {f[1]}.{f[0]}")
for line in text.splitlines():
    if line.startswith(("GEMV functions", "qwen3-0.6b: worst", "VERDICT", "cuBLAS folder", "========= ERROR SUMMARY",
                        "MEGAQWEN VERIFY", "| tg", "| pp", "SUITE ", "GENERATE ", "CHAT", "SANITIZER",
                        "MK ", "| MK", "MK TIMING", "|---:", "megakernel ", "MEGAQWEN_TEST_QWEN3", "[  FAILED  ]",
                        "PEROP PROFILE")):
        print(line)
b = os.path.join(out, "bench.json")
if os.path.exists(b):
    j = json.load(open(b))
    print(f"\nmegaqwen on {j.get('gpu', {}).get('name', j.get('device'))}, copy bandwidth {j.get('memory_read_bandwidth_gb_s', 0):.0f} GB/s")
    print("| test | tok/s | GB/s | % of copy BW | tok/J |\n|---|---:|---:|---:|---:|")
    for r in j.get("results", []):
        print(f"| {r['test']} | {r['median_tok_s']:.1f} | {r['achieved_gb_s']:.0f} | {100*r['fraction_of_memory_bandwidth']:.1f} | {r.get('tokens_per_joule', 0):.2f} |")
p = os.path.join(out, "peers.json")
if os.path.exists(p):
    for name, j in json.load(open(p)).items():
        print(f"\n{name} on the same card and model:\n" + j.get("table_markdown", j.get("error", "")))
PY

# What is left for the next call: the asked-for stages skipped for time (failed ones need a fix
# first, and are named apart). llama.cpp's stage, when its bundle was not carried, is a call of its
# own with another carry, named on a line of its own.
pending=() failed=() llama_call=false
for name in $stages; do
  case "${status[$name]:-not reached}" in
    *"not carried"*) llama_call=true ;;
    skipped* | "not reached") pending+=("$name") ;;
    "rc 0 "*) ;;
    *) failed+=("$name") ;;
  esac
done
{
  echo
  ((${#failed[@]})) && echo "FAILED stages: ${failed[*]} (see gpu-check.log)"
  if ((${#pending[@]})); then
    need="env"
    for name in "${pending[@]}"; do
      case $name in tests | cli | verify | bench | mk | mk-timing | peers | memcheck | llamacpp) need="env model" ;; esac
    done
    next=$(printf '%s\n' $need "${pending[@]}" | awk '!seen[$0]++' | tr '\n' ' ')
    echo "NEXT: MEGAQWEN_STAGES=\"${next% }\" bash scripts/gpu-check.sh"
  elif ! $llama_call; then
    echo "NEXT: every asked-for stage ran"
  fi
  if $llama_call; then
    echo "NEXT (llama.cpp): its bundle was not carried; that call: MEGAQWEN_GPU_BUILD=build-llamacpp/gpu MEGAQWEN_STAGES=\"env model llamacpp\" bash scripts/gpu-check.sh with carry=[\"build-llamacpp/gpu\"]"
  fi
} | tee -a "$out/summary.md"
