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
#   bench     megaqwen bench --device cuda, depths 1,512,2048,8192,32768, prompts 512,4096
#   verify    tools/verify_hf.py: logits against transformers in fp32 and bf16, with a verdict
#   peers     tools/bench_peers.py: transformers eager and static cache + torch.compile, same tests
#   memcheck  compute-sanitizer memcheck on the tiny-model engine tests and the kernel tests
#   mk        the decode megakernel: its tests (tiny + full 0.6B), SASS counts (bulk copies, 128-bit
#             shared loads), bench megakernel vs per-op at depths 1..32768, compute-sanitizer
#             racecheck + memcheck on the tiny model (docs/MEGAKERNEL.md); MEGAQWEN_STAGES="env model mk"
#             runs it alone (~330 s)
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
stages="${MEGAQWEN_STAGES:-env sass model tests mk bench verify peers memcheck}"
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
for b in megaqwen test_cuda; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$libpath" "$root/build-gpu/bin/$b" >/tmp/mq-bin/$b
  chmod +x /tmp/mq-bin/$b
done
mq=/tmp/mq-bin/megaqwen
model=/tmp/mq-models/synth-qwen3-0.6b
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
  # the megakernel's tests run in the mk stage
  MEGAQWEN_TEST_QWEN3_06B="$model" /tmp/mq-bin/test_cuda --gtest_filter='-Megakernel*' --gtest_output="xml:$out/tests.xml"
}
bench_stage() {
  $mq bench --model "$model" --device cuda --prompt-len 512,4096 --depth 1,512,2048,8192,32768 --tokens 128 \
    --repeats 5 --json "$out/bench.json"
}
verify_stage() {
  python3 tools/verify_hf.py --binary "$mq" --model "$model" --positions 256 --json "$out/verify.json"
}
peers_stage() {
  python3 tools/bench_peers.py --model "$model" --prompt-len 512,4096 --depth 1,512,2048,8192,32768 --tokens 128 \
    --megaqwen-json "$out/bench.json" --json "$out/peers.json" --budget-seconds 280
}
memcheck_stage() {
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found on this machine"; return 3; }
  MEGAQWEN_TEST_QWEN3_06B="$model" LD_LIBRARY_PATH="$libpath" "$sanitizer" --tool memcheck --error-exitcode 9 \
    --print-limit 20 build-gpu/bin/test_cuda \
    --gtest_filter='CudaEngineTest.PrefillAllLogitsMatchesCpu:CudaEngineTest.DecodeMatches*:CudaEngineTest.Chunked*:CudaKernels.QkNorm*:CudaKernels.PrefillAttention*:CudaSampling.FilteredDraws*'
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
  # 2. megakernel vs per-op, same binary, same model (MEGAQWEN_DECODE picks the path).
  for k in megakernel per-op; do
    MEGAQWEN_DECODE=$k timeout 100 $mq bench --model "$model" --device cuda --ctx 33000 --prompt-len 0 \
      --depth 1,128,1024,4096,8192,16384,32768 --tokens 128 --repeats 3 --json "/tmp/mk-bench-$k.json" ||
      echo "MK BENCH $k FAILED"
  done
  python3 - <<'PY'
import json
rows = {}
for k in ("megakernel", "per-op"):
    try:
        j = json.load(open(f"/tmp/mk-bench-{k}.json"))
    except Exception as e:
        print(f"MK BENCH {k}: no json ({e})"); continue
    print(f"MK BENCH {k}: device {j.get('device')}")
    for r in j.get("results", []):
        rows.setdefault(r["depth"], {})[k] = r
print("| depth | megakernel tok/s | GB/s | per-op tok/s | speedup | floor tok/s (4.8 TB/s) |")
print("|---:|---:|---:|---:|---:|---:|")
for d in sorted(rows):
    m, p = rows[d].get("megakernel"), rows[d].get("per-op")
    mt = m["median_tok_s"] if m else 0; pt = p["median_tok_s"] if p else 0
    b = (m or p)["bytes_per_token"]
    print(f"| MK {d} | {mt:.0f} | {(m or {}).get('achieved_gb_s', 0):.0f} | {pt:.0f} | {mt / pt if pt else 0:.2f}x | {4.8e12 / b:.0f} |")
PY
  cp /tmp/mk-bench-megakernel.json "$out/mk-bench.json" 2>/dev/null
  # 3. sanitizers on the tiny model (slow: tiny only, few tests).
  if [ -n "$sanitizer" ]; then
    for tool in racecheck memcheck; do
      LD_LIBRARY_PATH="$libpath" timeout 60 "$sanitizer" --tool $tool --error-exitcode 9 --print-limit 20 \
        build-gpu/bin/test_cuda --gtest_filter='MegakernelTiny.RepeatedRunsAreBitIdentical:Megakernel.Selection*' &&
        echo "MK SANITIZER $tool: clean" || echo "MK SANITIZER $tool: rc $?"
    done
  fi
}

export root out log libpath cublas_dir mq model sanitizer cuobjdump
export -f env_stage sass_stage model_stage tests_stage bench_stage verify_stage peers_stage memcheck_stage mk_stage

stage env 60 env_stage
stage sass 60 sass_stage
stage model 180 model_stage
stage tests 240 tests_stage
stage mk 330 mk_stage
stage bench 150 bench_stage
stage verify 150 verify_stage
stage peers 300 peers_stage
stage memcheck 200 memcheck_stage

python3 - "$out" "$log" <<'PY' | tee "$out/summary.md"
import json, os, re, sys
out, log = sys.argv[1], sys.argv[2]
text = open(log, errors="replace").read()
print("## gpu-check summary\n")
print("| stage | result |\n|---|---|")
for m in re.finditer(r"^=== (\w+): (.*)$", text, re.M):
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
                        "MK ", "| MK", "| depth", "|---:", "megakernel ")):
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
