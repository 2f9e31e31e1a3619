#!/usr/bin/env bash
# scripts/gpu-check.sh's own logic, run on a machine without a GPU (a bash slip there would cost a GPU
# session's few minutes of device time): an ordinary build stands in for build-gpu/, every test of
# test_cuda skips, and the script must still list the suites, run each in its own process, merge
# their XML, write the summary, and name what is left for the next call.
# Usage: gpu_check_script_test.sh SOURCE_DIR MEGAQWEN_BINARY TEST_CUDA_BINARY (ctest passes them).
set -uo pipefail
src=$1 megaqwen=$2 test_cuda=$3
if nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is present: gpu-check.sh would run the real thing; skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gb/bin"
ln -s "$megaqwen" "$work/gb/bin/megaqwen"
ln -s "$test_cuda" "$work/gb/bin/test_cuda"
failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}
run_check() {  # run_check OUT_DIR ENV...: the script with the stand-in build, into OUT_DIR
  local o=$1
  shift
  env "$@" OUT="$o" MEGAQWEN_GPU_BUILD="$work/gb" MEGAQWEN_CHECK_TMP="$work/tmp" bash "$src/scripts/gpu-check.sh" \
    >"$o.stdout" 2>&1
  echo "gpu-check.sh exited $? ($(wc -l <"$o/gpu-check.log") log lines)"
}

# 1. env and tests: every suite of test_cuda, one process each, skipping.
mkdir -p "$work/out1"
run_check "$work/out1" MEGAQWEN_STAGES="env tests"
o=$work/out1
check "the summary was written" test -s "$o/summary.md"
check "the tests stage ended with status 0" grep -qE '^\| tests \| rc 0 ' "$o/summary.md"
check "tests.xml was merged" test -s "$o/tests.xml"
suites=$("$test_cuda" --gtest_list_tests | grep -cE '^[^ ]+\.( |$)')
cases=$("$test_cuda" --gtest_list_tests | grep -c '^  ')
check "every suite but the larger models' ran in its own process ($suites suites)" \
  test "$(grep -c '^--- suite ' "$o/gpu-check.log")" -eq $((suites - 3))
check "tests.xml counts the cases those suites hold" \
  python3 - "$o/tests.xml" "$cases" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
n, total = int(root.get("tests")), int(sys.argv[2])
skipped = sum(1 for c in root.iter("testcase") if c.get("result") == "skipped")
print(f"tests.xml: {n} tests of {total}, failures {root.get('failures')}, skipped {skipped}")
# The larger models' suites hold a handful of cases; without a GPU nearly all the rest skip (a few
# check host-side refusals).
sys.exit(0 if total - 10 <= n < total and root.get("failures") == "0" and skipped >= n - 5 else 1)
PY
check "the summary says nothing is left" grep -q '^NEXT: every asked-for stage ran' "$o/summary.md"
check "no stage failed" bash -c "! grep -q '^FAILED stages' '$o/summary.md'"

# 2. A deadline too short for tests: it is skipped and named for the next call (with the model it
# needs); cli runs and fails (no model, no GPU) and is named apart.
mkdir -p "$work/out2"
run_check "$work/out2" MEGAQWEN_STAGES="env tests cli" MEGAQWEN_DEADLINE=80
o=$work/out2
check "tests skipped for time" grep -qE '^\| tests \| skipped' "$o/summary.md"
check "the failed cli stage is named" grep -q '^FAILED stages: cli ' "$o/summary.md"
check "the next call's stages" grep -q '^NEXT: MEGAQWEN_STAGES="env model tests" bash scripts/gpu-check.sh' \
  "$o/summary.md"

# 3. A suite whose process dies leaves no XML: the merged file names it and its last test.
runs=$work/runs
mkdir -p "$runs"
printf '[ RUN      ] A.one\n[       OK ] A.one (1 ms)\n[ RUN      ] A.two\n' >"$runs/A.out"
echo 139 >"$runs/A.rc"
cp "$work/tmp/gtest-tests/CudaKernels.xml" "$runs/B.xml" && echo 0 >"$runs/B.rc" && : >"$runs/B.out"
python3 "$src/tools/merge_gtest_xml.py" --runs "$runs" --out "$runs/merged.xml" >"$runs/report.txt"
check "a crashed suite fails the merge" test $? -eq 1
check "it is named with its signal and last test" \
  grep -q 'SUITE A: no XML; the process ended with exit status 139 (signal 11); last test started: A.two' \
  "$runs/report.txt"
check "the merged file counts it as a failure" grep -qE '<testsuites tests="[0-9]+" failures="1" ' "$runs/merged.xml"

# 4. Without llama.cpp's bundle the llamacpp stage is skipped, and the summary names the call that
# carries it; stages that run test_cuda refuse to start without it.
mkdir -p "$work/gb4/bin" "$work/out4"
ln -s "$megaqwen" "$work/gb4/bin/megaqwen"
run_check4() {  # run_check4 OUT_DIR BUILD ENV...
  local o=$1 gb=$2
  shift 2
  env "$@" OUT="$o" MEGAQWEN_GPU_BUILD="$gb" MEGAQWEN_CHECK_TMP="$work/tmp" bash "$src/scripts/gpu-check.sh" >"$o.stdout" 2>&1
}
run_check4 "$work/out4" "$work/gb4" MEGAQWEN_STAGES="env llamacpp"
o=$work/out4
check "the llamacpp stage is skipped without its bundle" \
  grep -qE '^\| llamacpp \| skipped \(build-llamacpp/gpu not carried\) \|' "$o/summary.md"
check "and its call is named" grep -q '^NEXT (llama.cpp): .*MEGAQWEN_GPU_BUILD=build-llamacpp/gpu.*carry=\["build-llamacpp/gpu"\]' \
  "$o/summary.md"
check "nothing else is left for the next call" bash -c "! grep -q '^NEXT: ' '$o/summary.md'"
mkdir -p "$work/out5"
run_check4 "$work/out5" "$work/gb4" MEGAQWEN_STAGES="env tests"
check "stages that need test_cuda refuse to start without it" grep -q 'runs .*test_cuda, which was not carried' \
  "$work/out5/gpu-check.log"

# 5. llama.cpp's call end to end with stand-ins: a bundle as build-llamacpp.sh packs it (megaqwen and
# llama-bench xz-packed, a converter), a tiny model in place of the synthetic 0.6B, a llama-bench
# that answers like the real one. megaqwen bench fails without a GPU; llama.cpp's rows must still
# reach peers.json and the summary.
b=$work/gb6
mkdir -p "$b/bin" "$b/lib" "$b/convert/gguf" "$work/out6"
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), lzma.open(sys.argv[2], "wb", preset=0))' \
  "$megaqwen" "$b/bin/megaqwen.xz"
cat >"$work/llama-bench" <<'SH'
#!/bin/sh
# Stand-in llama-bench: one JSON record for the -p / -n / -d asked.
p=0 n=0 d=0
while [ $# -gt 0 ]; do case $1 in -p) p=$2; shift ;; -n) n=$2; shift ;; -d) d=$2; shift ;; esac; shift; done
echo "load: stand-in"
printf '[{"build_commit": "stand-in", "backends": "CUDA", "gpu_info": "none", "n_prompt": %s, "n_gen": %s, "n_depth": %s, "avg_ts": 100.0, "samples_ts": [90.0, 100.0, 110.0]}]\n' "$p" "$n" "$d"
SH
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), lzma.open(sys.argv[2], "wb", preset=0))' \
  "$work/llama-bench" "$b/bin/llama-bench.xz"
printf 'import sys\nimport gguf\nopen(sys.argv[sys.argv.index("--outfile") + 1], "w").write("GGUF")\n' >"$b/convert/convert_hf_to_gguf.py"
: >"$b/convert/gguf/__init__.py"
echo "llama.cpp: stand-in" >"$b/BUILD-INFO"
"$megaqwen" synth --preset tiny --seed 1 --out "$work/tmp/mq-models/synth-qwen3-0.6b" \
  --tokenizer "$src/../shared/models/qwen3-0.6b" >/dev/null 2>&1 ||
  "$megaqwen" synth --preset tiny --seed 1 --out "$work/tmp/mq-models/synth-qwen3-0.6b" >/dev/null
run_check4 "$work/out6" "$b" MEGAQWEN_STAGES="env model llamacpp"
o=$work/out6
if [ -f "$work/tmp/mq-models/synth-qwen3-0.6b/vocab.json" ] || [ -f "$work/tmp/mq-models/synth-qwen3-0.6b/tokenizer.json" ]; then
  check "the packed megaqwen was unpacked and starts" grep -q '^megaqwen starts' "$o/gpu-check.log"
  check "the llamacpp stage ran (and failed: megaqwen bench needs a GPU)" grep -qE '^\| llamacpp \| rc 1 ' "$o/summary.md"
  check "llama.cpp's rows reach the summary through peers.json" \
    grep -q '^| tg128@d32768 | - | 100.0 | - |' "$o/summary.md"
  check "peers.json holds llama.cpp's run" python3 -c 'import json, sys; j = json.load(open(sys.argv[1]));
sys.exit(0 if j["llama.cpp"]["tests"]["pp4096"]["median_tok_s"] == 100.0 else 1)' "$o/peers.json"
else
  echo "no Qwen3 tokenizer beside the source tree: case 5 not run"
fi

if ((failures)); then
  echo "--- out1 summary"; cat "$work/out1/summary.md"; echo "--- out2 summary"; cat "$work/out2/summary.md"
  echo "--- out2 log"; cat "$work/out2/gpu-check.log"
  echo "$failures checks failed"
  exit 1
fi
echo "all checks passed"
