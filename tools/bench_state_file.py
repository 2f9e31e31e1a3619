"""What `megaqwen generate --prompt-cache FILE` saves: a long prompt run once to make the file, then
again (the same prompt: a rerun) and extended (the prompt plus a new question), each with and
without the file. Every run is a fresh process, timed from its start to its exit; the summary line
each prints gives the prompt and reused tokens and the file's read and write times.

  python3 tools/bench_state_file.py --binary build/megaqwen --model /tmp/q06 --device cpu \
      --prompt-file /tmp/long.txt --json bench/results/cpu_state_file_$(date +%F).json
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time


def run(binary, args):
    start = time.monotonic()
    proc = subprocess.run([binary] + args, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr}")
    out = {"wall_seconds": round(seconds, 3), "stdout": proc.stdout}
    m = re.search(r"prompt (\d+) tokens(?: \((\d+) from the cache\))?, ([\d.]+) tok/s prefill", proc.stderr)
    out["prompt_tokens"] = int(m.group(1))
    out["reused_tokens"] = int(m.group(2) or 0)
    m = re.search(r"read in ([\d.]+) s", proc.stderr)
    out["read_seconds"] = float(m.group(1)) if m else None
    m = re.search(r"saved (\d+) tokens to the prompt cache \S+ \(([\d.]+) MB, ([\d.]+) s\)", proc.stderr)
    if m:
        out["saved_tokens"], out["file_mb"], out["write_seconds"] = int(m.group(1)), float(m.group(2)), float(m.group(3))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/megaqwen")
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompt-file", required=True)
    p.add_argument("--tokens", type=int, default=8, help="tokens generated per run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "p.state")
        extended = os.path.join(tmp, "extended.txt")
        with open(a.prompt_file) as f, open(extended, "w") as g:
            g.write(f.read() + "\n\nQuestion: what does the text above say about the KV cache?\nAnswer:")
        base = ["generate", "-m", a.model, "--device", a.device, "-n", str(a.tokens), "--greedy"]
        runs = {"cold_making_the_file": [run(a.binary, base + ["-f", a.prompt_file, "--prompt-cache", cache])]}
        for name, prompt in (("same_prompt", a.prompt_file), ("extended_prompt", extended)):
            runs[name + "_without_file"] = [run(a.binary, base + ["-f", prompt]) for _ in range(a.repeats)]
            runs[name + "_with_file"] = [run(a.binary, base + ["-f", prompt, "--prompt-cache", cache, "--prompt-cache-ro"])
                                         for _ in range(a.repeats)]
        same = {r["stdout"] for r in runs["same_prompt_without_file"] + runs["same_prompt_with_file"]}

    summary = {name: statistics.median(r["wall_seconds"] for r in rs) for name, rs in runs.items()}
    print(f"{'run':<32} {'median s':>9} {'prompt':>7} {'reused':>7}")
    for name, rs in runs.items():
        print(f"{name:<32} {summary[name]:>9.2f} {rs[0]['prompt_tokens']:>7} {rs[0]['reused_tokens']:>7}")
    print(f"same output with and without the file: {len(same) == 1}")
    if a.json:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(a.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "commit": commit, "machine": platform.node(),
                       "cpu": platform.processor(), "model": a.model, "device": a.device, "tokens": a.tokens,
                       "median_wall_seconds": summary, "same_output": len(same) == 1, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
