#!/usr/bin/env bash
# The one command for the GPU machine (NVIDIA driver, PyTorch + transformers, compute-sanitizer;
# none of our Debian -dev libraries, no cmake/ctest needed, nothing installed). Build here first with
# scripts/build-gpu.sh, then with the device tool:
#   run(command="bash scripts/gpu-check.sh", carry=["build-gpu"], timeout_s=600)
# Stages, in priority order (each under its own `timeout`; a failing stage does not stop the others;
# a stage that would not fit in the remaining time is skipped and named in the summary):
#   env       GPU, driver, glibc, which tools exist; where cuBLAS was found
#   sass      cuobjdump -sass of the GEMV kernel: counts its 128-bit loads (LDG.E.128)
#   model     megaqwen synth --preset qwen3-0.6b (the benchmark and full-size test model)
#   tests     build-gpu/bin/test_cuda (the ctest label gpu), run directly; gtest XML kept
#   bench     megaqwen bench --device cuda, depths 1,512,2048,8192,32768, prompts 512,4096; then
#             bench_engine_state (the prompt cache's save/restore copies on the device) into the log
#   verify    megaqwen verify (the CPU reference vs both decode kernels: logits, greedy tokens), then
#             tools/verify_hf.py: logits against transformers in fp32 and bf16, with a verdict
#   peers     tools/bench_peers.py: transformers eager and static cache + torch.compile, same tests
#   memcheck  compute-sanitizer memcheck on the tiny-model engine tests and the kernel tests
#   mk        the decode megakernel: its tests (tiny + full 0.6B), SASS counts (bulk copies, 128-bit
#             shared loads), bench megakernel vs per-op at depths 1..32768, compute-sanitizer
#             racecheck + memcheck on the tiny model (docs/MEGAKERNEL.md); MEGAQWEN_STAGES="env model mk"
#             runs it alone (~330 s)
#   hybrid    Qwen3.5: synth --preset qwen3.5-0.8b, the CudaHybridEngine tests (tiny + full 0.8B),
#             and hybrid megakernel tests, megaqwen verify, tools/verify_hf.py against transformers'
#             Qwen3.5, a bench (decode on the hybrid megakernel), a prefill bench with
#             MEGAQWEN_DELTANET_PREFILL=sequential and a decode bench with MEGAQWEN_DECODE=per-op (JSON
#             printed into the log: the 8 files are taken)
#   mk-sizes  Qwen3-1.7B and 4B shapes: synth (3.4 + 8 GB), their megakernel tests, megakernel vs per-op
#             bench; MEGAQWEN_STAGES="env mk-sizes" runs it alone (~8 min)
# Output (at most 8 files, the device tool's limit: keep it at 8) under $OUT (or build-gpu/out):
# gpu-check.log (every stage's output), tests.xml, mk-tests.xml, bench.json, mk-bench.json, verify.json,
# peers.json, summary.md. The GEMV SASS stays in /tmp/sass-gemv.txt (its counts are in the log).
# MEGAQWEN_STAGES="tests bench" runs a subset; MEGAQWEN_DEADLINE (seconds, default 570) bounds the run.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
out="${OUT:-$root/build-gpu/out}"
mkdir -p "$out"
log="$out/gpu-check.log"
: >"$log"
stages="${MEGAQWEN_STAGES:-env sass model tests mk bench verify peers memcheck hybrid mk-sizes}"
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
  local t0=$SECONDS
  # The stage functions run in a child bash (timeout cannot call a function): they and the variables
  # they use are exported below.
  timeout --kill-after=10 "$budget" bash -c "$*" >>"$log" 2>&1
  local rc=$?
  status[$name]="rc $rc in $((SECONDS - t0))s$([ $rc = 124 ] && echo ' (timed out)')"
  say "=== $name: ${status[$name]}"
}

[ -x build-gpu/bin/megaqwen ] && [ -x build-gpu/bin/test_cuda ] || {
  say "gpu-check.sh: build-gpu/bin is missing: run scripts/build-gpu.sh here and carry build-gpu"
  exit 2
}

# cuBLAS: opened at run time by the engine; PyTorch's wheel carries libcublas.so.13.
cublas_dir=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia"); print(" ".join(s.submodule_search_locations) if s else "")' 2>/dev/null); do
  f=$(find "$d" -maxdepth 3 -name 'libcublas.so.1[23]*' 2>/dev/null | head -1)
  if [ -n "$f" ]; then cublas_dir=$(dirname "$f"); break; fi
done
libpath="$root/build-gpu/lib${cublas_dir:+:$cublas_dir}"
# Wrappers so our binaries (and the Python tools that call them) get our libraries; Python itself
# keeps its own environment.
mkdir -p /tmp/mq-bin
for b in megaqwen test_cuda bench_engine_state; do
  [ -x "$root/build-gpu/bin/$b" ] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$libpath" "$root/build-gpu/bin/$b" >/tmp/mq-bin/$b
  chmod +x /tmp/mq-bin/$b
done
mq=/tmp/mq-bin/megaqwen
model=/tmp/mq-models/synth-qwen3-0.6b
hybrid_model=/tmp/mq-models/synth-qwen3.5-0.8b
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || ls /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)

env_stage() {
  nvidia-smi || true
  echo "glibc: $(ldd --version | head -1)"
  grep -m1 "built:" build-gpu/BUILD-INFO || true
  echo "cuBLAS folder: ${cublas_dir:-NOT FOUND}"
  echo "compute-sanitizer: ${sanitizer:-not found}   cuobjdump: ${cuobjdump:-not found}"
  echo "python3: $(python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1)"
  LD_LIBRARY_PATH="$libpath" ldd build-gpu/bin/megaqwen | grep -i "not found" && echo "MISSING LIBRARIES ABOVE"
  $mq --help >/dev/null && echo "megaqwen starts"
}
sass_stage() {
  [ -n "$cuobjdump" ] || { echo "no cuobjdump on this machine"; return 3; }
  "$cuobjdump" -sass build-gpu/bin/megaqwen >/tmp/sass.txt || return 1
  # Not under $out: a ninth file there would not come back (8 files at most).
  awk '/Function : .*gemv_bf16_kernel/ {p=1} /Function : / && !/gemv_bf16_kernel/ {p=0} p' /tmp/sass.txt >/tmp/sass-gemv.txt
  echo "GEMV functions: $(grep -c 'Function :' /tmp/sass-gemv.txt); LDG.E.128 in them: $(grep -c 'LDG.E.128' /tmp/sass-gemv.txt); other LDG: $(grep 'LDG' /tmp/sass-gemv.txt | grep -vc 'LDG.E.128')"
}
model_stage() {
  [ -f "$model/model.safetensors" ] || $mq synth --preset qwen3-0.6b --seed 0 --out "$model"
}
tests_stage() {
  # the megakernel's tests run in the mk stage, the Qwen3.5 engine's in the hybrid stage
  MEGAQWEN_TEST_QWEN3_06B="$model" /tmp/mq-bin/test_cuda --gtest_filter='-Megakernel*:*Hybrid*' \
    --gtest_output="xml:$out/tests.xml"
}
hybrid_stage() {
  local rc=0
  [ -f "$hybrid_model/model.safetensors" ] || $mq synth --preset qwen3.5-0.8b --seed 0 --out "$hybrid_model" || return 1
  MEGAQWEN_TEST_QWEN35_08B="$hybrid_model" /tmp/mq-bin/test_cuda --gtest_filter='*Hybrid*' || rc=1
  timeout 90 $mq verify --model "$hybrid_model" --device cuda || { echo "MEGAQWEN VERIFY HYBRID FAILED"; rc=1; }
  timeout 120 python3 tools/verify_hf.py --binary "$mq" --model "$hybrid_model" --positions 128 || rc=1
  $mq bench --model "$hybrid_model" --device cuda --prompt-len 512,4096 --depth 1,512,4096 --tokens 64 --repeats 3 \
    --json /tmp/hybrid-bench.json || rc=1
  echo "HYBRID BENCH JSON"; cat /tmp/hybrid-bench.json 2>/dev/null; echo
  # What the chunked delta rule buys in prefill: the same prompts with the token-by-token kernel.
  MEGAQWEN_DELTANET_PREFILL=sequential timeout 60 $mq bench --model "$hybrid_model" --device cuda \
    --prompt-len 512,4096 --depth 1 --tokens 8 --repeats 3 --json /tmp/hybrid-bench-seq.json || rc=1
  echo "HYBRID SEQUENTIAL DELTANET BENCH JSON"; cat /tmp/hybrid-bench-seq.json 2>/dev/null; echo
  # What the hybrid megakernel buys in decode (the bench above decodes on it where it starts): the
  # per-operator graph at the same depths.
  MEGAQWEN_DECODE=per-op timeout 60 $mq bench --model "$hybrid_model" --device cuda --prompt-len 16 \
    --depth 1,512,4096 --tokens 64 --repeats 3 --json /tmp/hybrid-bench-perop.json || rc=1
  echo "HYBRID PER-OP DECODE BENCH JSON"; cat /tmp/hybrid-bench-perop.json 2>/dev/null; echo
  return $rc
}
bench_stage() {
  $mq bench --model "$model" --device cuda --prompt-len 512,4096 --depth 1,512,2048,8192,32768 --tokens 128 \
    --repeats 5 --json "$out/bench.json"
  local rc=$?
  # The prompt cache's copies on the device (save_state / restore_state of 256 .. 4096 tokens), in the log.
  if [ -x /tmp/mq-bin/bench_engine_state ]; then
    echo "ENGINE STATE BENCH (device copies of a saved sequence)"
    MEGAQWEN_BENCH_MODEL="$model" MEGAQWEN_BENCH_DEVICE=cuda timeout 45 /tmp/mq-bin/bench_engine_state \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true || echo "ENGINE STATE BENCH FAILED"
  fi
  return $rc
}
verify_stage() {
  local k rc=0
  for k in megakernel per-op; do
    timeout 60 $mq verify --model "$model" --device cuda --decode-kernel $k || { echo "MEGAQWEN VERIFY $k FAILED"; rc=1; }
  done
  python3 tools/verify_hf.py --binary "$mq" --model "$model" --positions 256 --json "$out/verify.json" && return $rc
}
peers_stage() {
  python3 tools/bench_peers.py --model "$model" --prompt-len 512,4096 --depth 1,512,2048,8192,32768 --tokens 128 \
    --megaqwen-json "$out/bench.json" --json "$out/peers.json" --budget-seconds 280
}
memcheck_stage() {
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found on this machine"; return 3; }
  MEGAQWEN_TEST_QWEN3_06B="$model" LD_LIBRARY_PATH="$libpath" "$sanitizer" --tool memcheck --error-exitcode 9 \
    --print-limit 20 build-gpu/bin/test_cuda \
    --gtest_filter='CudaEngineTest.PrefillAllLogitsMatchesCpu:CudaEngineTest.DecodeMatches*:CudaEngineTest.Chunked*:CudaKernels.QkNorm*:CudaKernels.PrefillAttention*:CudaSampling.FilteredDraws*:Presets/CudaHybridEngineTest.ChunkedPrefill*:Presets/CudaHybridEngineTest.Truncate*:CudaGatedDeltaNet.*'
}

# mk_bench NAME MODEL_DIR LIMIT: megaqwen bench (decode by position) with the megakernel and with the
# per-op path, then the side-by-side table; every model's runs accumulate in $out/mk-bench.json.
mk_bench() {
  local name=$1 dir=$2 limit=$3 k
  for k in megakernel per-op; do
    MEGAQWEN_DECODE=$k timeout "$limit" $mq bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
      --depth 1,128,1024,4096,8192,16384,32768 --tokens 128 --repeats 3 --json "/tmp/mk-bench-$name-$k.json" ||
      echo "MK BENCH $name $k FAILED"
  done
  # What in-kernel token selection costs: Qwen3's sampling defaults (top-k 20 + top-p) at two depths.
  MEGAQWEN_DECODE=megakernel timeout 60 $mq bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
    --depth 1,4096 --tokens 128 --repeats 3 --temp 0.6 --top-k 20 --top-p 0.95 --seed 1 \
    --json "/tmp/mk-bench-$name-megakernel-topk.json" || echo "MK BENCH $name sampled FAILED"
  # ... and the nucleus draw over the whole vocabulary (top-p without a top-k, as OpenAI clients ask).
  MEGAQWEN_DECODE=megakernel timeout 45 $mq bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
    --depth 1,4096 --tokens 128 --repeats 3 --temp 0.7 --top-k 0 --top-p 0.9 --seed 1 \
    --json "/tmp/mk-bench-$name-megakernel-nucleus.json" || echo "MK BENCH $name nucleus FAILED"
  # ... and scoring every greedy draw in the kernel (a logprob request: 5 alternatives).
  MEGAQWEN_DECODE=megakernel timeout 45 $mq bench --model "$dir" --device cuda --ctx 33000 --prompt-len 0 \
    --depth 1,4096 --tokens 128 --repeats 3 --logprobs 5 \
    --json "/tmp/mk-bench-$name-megakernel-logprobs.json" || echo "MK BENCH $name logprobs FAILED"
  python3 tools/mk_bench_table.py --out "$out/mk-bench.json" "$name:megakernel:/tmp/mk-bench-$name-megakernel.json" \
    "$name:per-op:/tmp/mk-bench-$name-per-op.json" "$name:megakernel-topk:/tmp/mk-bench-$name-megakernel-topk.json" \
    "$name:megakernel-nucleus:/tmp/mk-bench-$name-megakernel-nucleus.json" \
    "$name:megakernel-logprobs:/tmp/mk-bench-$name-megakernel-logprobs.json"
}

mk_stage() {
  # 1. correctness first (tiny + full 0.6B), then the numbers, then the sanitizers on the tiny model.
  MEGAQWEN_TEST_QWEN3_06B="$model" timeout 150 /tmp/mq-bin/test_cuda --gtest_filter='Megakernel*' \
    --gtest_output="xml:$out/mk-tests.xml" || echo "MK TESTS FAILED (rc $?)"
  if [ -n "$cuobjdump" ]; then
    "$cuobjdump" -sass build-gpu/bin/megaqwen 2>/dev/null |
      awk '/Function : .*megakernel/ {p=1} /Function : / && !/megakernel/ {p=0} p' >/tmp/sass-mk.txt
    echo "MK SASS: functions $(grep -c 'Function :' /tmp/sass-mk.txt), UBLKCP (bulk copy) $(grep -c UBLKCP /tmp/sass-mk.txt), UBLKPF (L2 prefetch) $(grep -c UBLKPF /tmp/sass-mk.txt), LDS.128 $(grep -c 'LDS.128' /tmp/sass-mk.txt), LDL/STL (local memory) $(grep -cE 'LDL|STL' /tmp/sass-mk.txt)"
  fi
  # 2. megakernel vs per-op, same binary, same model (MEGAQWEN_DECODE picks the path); then what each
  # optimization buys: the same kernel with one switched back (MEGAQWEN_MK_ABLATE, layout.h).
  mk_bench qwen3-0.6b "$model" 100
  local ab abl=()
  for ab in 1 2 4 7; do
    MEGAQWEN_DECODE=megakernel MEGAQWEN_MK_ABLATE=$ab timeout 40 $mq bench --model "$model" --device cuda --ctx 5000 \
      --prompt-len 0 --depth 1,4096 --tokens 128 --repeats 3 --json "/tmp/mk-bench-qwen3-0.6b-ablate-$ab.json" ||
      echo "MK BENCH ablate $ab FAILED"
    abl+=("qwen3-0.6b:ablate-$ab:/tmp/mk-bench-qwen3-0.6b-ablate-$ab.json")
  done
  python3 tools/mk_bench_table.py --out "$out/mk-bench.json" "${abl[@]}"
  # 3. sanitizers on the tiny model (slow: tiny only, few tests).
  if [ -n "$sanitizer" ]; then
    for tool in racecheck memcheck; do
      MEGAQWEN_TEST_QUICK=1 LD_LIBRARY_PATH="$libpath" timeout 60 "$sanitizer" --tool $tool --error-exitcode 9 --print-limit 20 \
        build-gpu/bin/test_cuda --gtest_filter='MegakernelTiny.RepeatedRunsAreBitIdentical:Megakernel.Selection*' &&
        echo "MK SANITIZER $tool: clean" || echo "MK SANITIZER $tool: rc $?"
    done
  fi
}

# The larger compiled shapes (Qwen3-1.7B, 4B): synthetic models, the MegakernelSizes tests (gtest
# output in the log: the 8-file limit), and the same side-by-side bench.
mk_sizes_stage() {
  local d17=/tmp/mq-models/synth-qwen3-1.7b d4=/tmp/mq-models/synth-qwen3-4b
  [ -f "$d17/model.safetensors" ] || $mq synth --preset qwen3-1.7b --seed 0 --out "$d17" || return 1
  [ -f "$d4/model.safetensors" ] || $mq synth --preset qwen3-4b --seed 0 --out "$d4" || return 1
  MEGAQWEN_TEST_QWEN3_17B="$d17" MEGAQWEN_TEST_QWEN3_4B="$d4" timeout 180 /tmp/mq-bin/test_cuda \
    --gtest_filter='Qwen3/MegakernelSizes*' || echo "MK SIZES TESTS FAILED (rc $?)"
  mk_bench qwen3-1.7b "$d17" 120
  mk_bench qwen3-4b "$d4" 150
}

export root out log libpath cublas_dir mq model hybrid_model sanitizer cuobjdump
export -f env_stage sass_stage model_stage tests_stage bench_stage verify_stage peers_stage memcheck_stage mk_stage \
  mk_bench mk_sizes_stage hybrid_stage

stage env 60 env_stage
stage sass 60 sass_stage
stage model 180 model_stage
stage tests 240 tests_stage
stage mk 420 mk_stage
stage bench 150 bench_stage
stage verify 210 verify_stage
stage peers 300 peers_stage
stage memcheck 200 memcheck_stage
stage hybrid 300 hybrid_stage
stage mk-sizes 560 mk_sizes_stage

python3 - "$out" "$log" <<'PY' | tee "$out/summary.md"
import json, os, re, sys
out, log = sys.argv[1], sys.argv[2]
text = open(log, errors="replace").read()
print("## gpu-check summary\n")
print("| stage | result |\n|---|---|")
for m in re.finditer(r"^=== ([\w-]+): (.*)$", text, re.M):
    print(f"| {m.group(1)} | {m.group(2)} |")
# Both gtest XML files (tests stage, mk stage). A binary that crashed or was killed writes none: then
# the last test the log saw start is the suspect.
last_run = re.findall(r"^\[ RUN      \] (\S+)", text, re.M)
for name in ("tests.xml", "mk-tests.xml"):
    x = os.path.join(out, name)
    if not os.path.exists(x):
        print(f"\n{name}: none written (stage skipped, crashed or timed out; last test started: {last_run[-1] if last_run else '-'})")
        continue
    t = open(x, errors="replace").read()
    m = re.search(r'<testsuites tests="(\d+)" failures="(\d+)" disabled="(\d+)" errors="(\d+)"', t)
    skipped = len(re.findall(r'result="skipped"', t))
    if m: print(f"\n{name}: {m.group(1)} tests, {m.group(2)} failed, {skipped} skipped")
    for f in re.findall(r'<testcase name="([^"]+)"[^>]*classname="([^"]+)"[^>]*>\s*<failure', t):
        print(f"  FAILED {f[1]}.{f[0]}")
for line in text.splitlines():
    if line.startswith(("GEMV functions", "qwen3-0.6b: worst", "VERDICT", "cuBLAS folder", "========= ERROR SUMMARY",
                        "MEGAQWEN VERIFY", "| tg", "| pp",
                        "MK ", "| MK", "|---:", "megakernel ", "MEGAQWEN_TEST_QWEN3", "[  FAILED  ]")):
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
    j = json.load(open(p))
    print("\n" + j.get("table_markdown", ""))
PY
