#!/usr/bin/env bash
# The machine code (SASS, sm_90a) of megaqwen's kernels, read on this GPU-less machine, so that what
# the compiler made of a kernel is known before a GPU session spends device time on it. cuobjdump and
# nvdisasm come from NVIDIA's PyPI wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm; ~5 MB),
# unpacked once into build-sass-tools/ (gitignored with the other build folders).
#
# One line per kernel (every sm_90a function of the binary, or those whose demangled name matches
# FILTER, an extended regex), its counts of the instructions that decide its speed:
#   regs       registers per thread (cuobjdump -res-usage)
#   stack      bytes of local memory per thread (spills and local arrays)
#   STL / LDL  local-memory stores / loads in the code (where spills land)
#   cas-loop   ATOMS.CAST.SPIN: a 64-bit (or float) shared-memory atomic compiled as a compare-and-swap
#              loop whose lanes retry per bank (sm_90 adds only 32-bit integers natively in shared
#              memory); the nucleus draw's histogram spent most of its time so until 2026-12-07
#   UBLKCP     bulk copies global -> shared (the megakernel's weight ring)
#   UBLKPF     bulk L2 prefetches (the ring's look-ahead)
#   LDS.128    128-bit shared loads (the GEMVs' weight and vector reads)
#   LDG.128    128-bit global loads
#   pdl        wait: griddepcontrol.wait (ACQBULK) comes before the kernel's first global memory access,
#              as launch_kernel's programmatic launches need (launch.cuh); LATE: a global access
#              comes first; -: the kernel never waits (the megakernel's persistent grids)
#
# Usage: scripts/sass-report.sh [--check] [--check-pdl EXCEPT] [--spills] [BINARY] [FILTER]
#   BINARY       an executable or object with sm_90a code (default build/megaqwen, built by
#                scripts/build.sh where nvcc is installed)
#   --check      exit 1 when any reported kernel has a cas-loop
#   --check-pdl  exit 1 when a reported kernel whose name does not match the regex EXCEPT is not
#                "wait" in the pdl column
#   --spills     after the table, where each reported kernel's local stores and loads are: counts per
#                source line with the chain of inlined calls it came through (nvdisasm -gi), so a
#                spill in a hot loop is told from one in a cold path
set -euo pipefail
cd "$(dirname "$0")/.."
check=false pdl_except= spills=false
while [ $# -gt 0 ]; do
  case $1 in
    --check) check=true && shift ;;
    --spills) spills=true && shift ;;
    --check-pdl) pdl_except=${2:?--check-pdl needs a regex of the kernels that launch the ordinary way} && shift 2 ;;
    *) break ;;
  esac
done
binary=${1:-build/megaqwen}
filter=${2:-.}
tools=${MEGAQWEN_SASS_TOOLS:-build-sass-tools}
[ -f "$binary" ] || { echo "sass-report.sh: no $binary (build it first: bash scripts/build.sh)" >&2; exit 2; }

# cuobjdump calls nvdisasm for -sass and -res-usage: both wheels, the same version. Unpacked into a
# folder of its own first and then renamed into place, so a run that finds the tools finds them whole.
find_tool_dir() { dirname "$(find "$1" -name cuobjdump -type f 2>/dev/null | head -1)" 2>/dev/null; }
bin_dir=$(find_tool_dir "$tools")
if [ ! -x "$bin_dir/cuobjdump" ] || [ ! -x "$bin_dir/nvdisasm" ]; then
  staging=$(mktemp -d "${tools%/}.staging.XXXXXX")
  if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$staging/wheels" \
    nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >"$staging/pip.log" 2>&1; then
    echo "sass-report.sh: could not download cuobjdump / nvdisasm from PyPI:" >&2
    tail -3 "$staging/pip.log" >&2
    rm -rf "$staging"
    exit 3
  fi
  for w in "$staging"/wheels/*.whl; do python3 -m zipfile -e "$w" "$staging"; done
  bin_dir=$(find_tool_dir "$staging")
  if [ -z "$bin_dir" ] || [ ! -f "$bin_dir/nvdisasm" ]; then
    echo "sass-report.sh: the wheels hold no cuobjdump / nvdisasm" >&2
    rm -rf "$staging"
    exit 3
  fi
  chmod +x "$bin_dir/cuobjdump" "$bin_dir/nvdisasm"
  rm -rf "$tools" && mv "$staging" "$tools"
  bin_dir=$(find_tool_dir "$tools")
fi
export PATH="$(realpath "$bin_dir"):$PATH"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cuobjdump -arch sm_90a -sass "$binary" >"$work/sass.txt"
cuobjdump -arch sm_90a -res-usage "$binary" >"$work/res.txt"
grep -q "Function :" "$work/sass.txt" || { echo "sass-report.sh: $binary holds no sm_90a code" >&2; exit 2; }

# Per function: the counts from the SASS, the registers and stack from the resource usage, the
# demangled name shortened (namespaces and the megakernel's config parameters kept readable).
awk '
  /Function : / { f = $3; order[++n] = f; pdl[f] = "-"; next }
  f == "" { next }
  /STL/ { stl[f]++ } /LDL/ { ldl[f]++ } /ATOMS\.CAST\.SPIN/ { cas[f]++ }
  /UBLKCP/ { cp[f]++ } /UBLKPF/ { pf[f]++ } /LDS\.128/ { lds[f]++ } /LDG\.E\.128/ { ldg[f]++ }
  /ACQBULK/ && pdl[f] == "-" { pdl[f] = "wait" }
  /[ \t](LDG|STG|ATOMG|REDG|LD|ST|RED|ATOM)\.E/ && pdl[f] == "-" { pdl[f] = "early" }
  END { for (i = 1; i <= n; ++i) { g = order[i]; printf "%s %d %d %d %d %d %d %d %s\n", g, stl[g], ldl[g], cas[g], cp[g], pf[g], lds[g], ldg[g], pdl[g] } }
' "$work/sass.txt" >"$work/counts.txt"
awk '/^ Function / { f = $2; sub(/:$/, "", f); next }
     f != "" && /REG:/ { r = $0; sub(/.*REG:/, "", r); sub(/ .*/, "", r);
                         s = $0; sub(/.*STACK:/, "", s); sub(/ .*/, "", s); print f, r, s; f = "" }' \
  "$work/res.txt" >"$work/res-by-fn.txt"
# A demangled name without its parameter list (the last balanced (...): template arguments may hold
# parentheses too) and without the project's namespaces.
short_name() {
  c++filt "$1" | sed -E 's/megaqwen::cuda::(mk::)?//g; s/^void //' | awk '{
    depth = 0
    for (i = length($0); i > 0; --i) {
      c = substr($0, i, 1)
      if (c == ")") ++depth
      else if (c == "(" && --depth == 0) { print substr($0, 1, i - 1); exit }
    }
    print }'
}

printf '%-80s %5s %5s %5s %5s %8s %6s %6s %7s %7s %5s\n' kernel regs stack STL LDL cas-loop UBLKCP UBLKPF LDS.128 LDG.128 pdl
bad=0 bad_pdl=0
while read -r fn stl ldl cas cp pf lds ldg pdl; do
  name=$(short_name "$fn")
  [[ $name =~ $filter ]] || continue
  read -r regs stack < <(awk -v f="$fn" '$1 == f { print $2, $3; exit }' "$work/res-by-fn.txt")
  # "early" (a global access before any wait) may still wait later: either way it is LATE for a
  # programmatic launch. A kernel that never touches global memory before a wait it lacks shows "-".
  [ "$pdl" = early ] && pdl=LATE
  printf '%-80s %5s %5s %5d %5d %8d %6d %6d %7d %7d %5s\n' "${name:0:80}" "${regs:-?}" "${stack:-?}" \
    "$stl" "$ldl" "$cas" "$cp" "$pf" "$lds" "$ldg" "$pdl"
  ((cas > 0)) && bad=$((bad + 1))
  if [ -n "$pdl_except" ] && [ "$pdl" != wait ] && ! [[ $name =~ $pdl_except ]]; then bad_pdl=$((bad_pdl + 1)); fi
done <"$work/counts.txt"
if $spills; then
  binary_path=$(realpath "$binary")
  (cd "$work" && cuobjdump -arch sm_90a -xelf all "$binary_path" >/dev/null)
  for cubin in "$work"/*.sm_90a.cubin; do nvdisasm -gi -c "$cubin"; done >"$work/lines.sass"
  python3 - "$work/lines.sass" "$filter" <<'PY'
import collections, re, subprocess, sys
path, keep = sys.argv[1], re.compile(sys.argv[2])
where = collections.OrderedDict()  # function -> Counter of (kind, chain)
fn, chain, in_chain = None, [], False
for line in open(path):
    if line.startswith("//--") and ".text." in line:
        fn = line.split(".text.", 1)[1].split()[0]
        where.setdefault(fn, collections.Counter())
        continue
    m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
    if m:
        if not in_chain:
            chain = []
        if "/cuda/include/" not in m.group(1):  # the CUDA headers' own lines say nothing here
            chain.append(m.group(1).rsplit("/", 1)[-1] + ":" + m.group(2))
        in_chain = True
        continue
    in_chain = False
    k = re.search(r"\s(STL|LDL)[.\s]", line)
    if fn and k:
        where[fn][(k.group(1), " < ".join(chain[:5]))] += 1
names = subprocess.run(["c++filt"], input="\n".join(where), capture_output=True, text=True).stdout.split("\n")
for (fn, counts), name in zip(where.items(), names):
    name = re.sub(r"megaqwen::cuda::(mk::)?", "", name)
    if not counts or not keep.search(name):
        continue
    print(f"\nlocal memory in {name[:100]}:")
    for (kind, ch), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {kind} {n:3d}  {ch}")
PY
fi
rc=0
if $check && ((bad > 0)); then
  echo "sass-report.sh: $bad kernel(s) add to shared memory through compare-and-swap loops (cas-loop above)" >&2
  rc=1
fi
if ((bad_pdl > 0)); then
  echo "sass-report.sh: $bad_pdl kernel(s) launched by launch_kernel touch global memory before pdl_begin's wait (pdl above)" >&2
  rc=1
fi
exit $rc
