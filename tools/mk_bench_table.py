#!/usr/bin/env python3
"""Megakernel vs per-operator decode, from `megaqwen bench --json` files of the same model and GPU.

Usage: mk_bench_table.py --out merged.json MODEL:KERNEL:FILE [MODEL:KERNEL:FILE ...]
  e.g. qwen3-0.6b:megakernel:/tmp/a.json qwen3-0.6b:per-op:/tmp/b.json

KERNEL is megakernel or per-op, or a variant of the megakernel run that gets its own column
(megakernel-topk: Qwen's sampling defaults; megakernel-nucleus: top-p without a top-k;
megakernel-logprobs: greedy draws scored in the kernel; ablate-N:
MEGAQWEN_MK_ABLATE=N; merge-N: MEGAQWEN_MK_MERGE_SPLITS=N; counters / flagged:
MEGAQWEN_MK_VECTORS; one-stage: MEGAQWEN_MK_MLP=one-stage; flagged+one-stage: both;
per-op-pdl: the per-op step with MEGAQWEN_PDL=on;
probe-P: the timing probe MEGAQWEN_MK_PROBE=P).

Where the timing probes ran (probe-no-waits, probe-no-weights, probe-no-waits,no-weights) it also
prints, per position, the split of a token's time they give (MK SPLIT lines, docs/MEGAKERNEL.md
"Timing probes"): the full token (megakernel, else counters), each probe's token, and what the
waits and the weights cost on top of the rest.

Prints, per model, a markdown table of decode tok/s by position for both kernels, the speedup, the
achieved GB/s and the fraction of the floor at the card's datasheet bandwidth (4.8 TB/s for the
H200, or --peak-gb-s), and merges every input into one JSON ({"runs": [{model, kernel, bench}]})
so a GPU run returns one file. Missing or unreadable inputs are reported and skipped. Entries
already in --out (from an earlier stage of the same session) are kept unless replaced.
"""
import argparse
import json
import os
import sys


def us_per_token(result) -> float:
    return 1e6 / result["median_tok_s"] if result and result.get("median_tok_s") else 0.0


def time_split(by_depth: dict) -> list:
    """MK SPLIT lines from {kernel: decode result} at one position: the full token against the probes."""
    full = by_depth.get("megakernel") or by_depth.get("counters")
    waits, weights = by_depth.get("probe-no-waits"), by_depth.get("probe-no-weights")
    neither = by_depth.get("probe-no-waits,no-weights")
    if not full or not (waits or weights):
        return []
    t = us_per_token(full)
    parts = [f"full {t:.0f} us"]
    if waits:
        parts.append(f"no waits {us_per_token(waits):.0f} (the waits cost {t - us_per_token(waits):.0f})")
    if weights:
        parts.append(f"no weights {us_per_token(weights):.0f} (the weights cost {t - us_per_token(weights):.0f})")
    if neither:
        parts.append(f"neither {us_per_token(neither):.0f} (the work and one edge per token)")
    return ["; ".join(parts)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help="MODEL:KERNEL:FILE")
    ap.add_argument("--out", required=True, help="merged JSON (created or extended)")
    ap.add_argument("--peak-gb-s", type=float, default=4800.0, help="datasheet bandwidth for the floor (H200: 4800)")
    args = ap.parse_args()

    merged = {"runs": []}
    if os.path.exists(args.out):
        try:
            merged = json.load(open(args.out))
        except (OSError, ValueError):
            pass
    runs = {(r["model"], r["kernel"]): r for r in merged.get("runs", [])}
    for spec in args.inputs:
        try:
            model, kernel, path = spec.split(":", 2)
        except ValueError:
            print(f"mk_bench_table: bad input '{spec}' (MODEL:KERNEL:FILE)", file=sys.stderr)
            return 2
        try:
            bench = json.load(open(path))
        except (OSError, ValueError) as e:
            print(f"MK BENCH {model} {kernel}: no result ({e})")
            continue
        runs[(model, kernel)] = {"model": model, "kernel": kernel, "bench": bench}
    merged["runs"] = list(runs.values())
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1)

    for model in sorted({m for m, _ in runs}):
        by_kernel = {k: r["bench"] for (m, k), r in runs.items() if m == model}
        any_bench = next(iter(by_kernel.values()))
        print(f"\nMK BENCH {model} on {any_bench.get('device', '?')} (commit {any_bench.get('commit', '?')})")
        rows = {}
        for kernel, bench in by_kernel.items():
            for r in bench.get("results", []):
                if r.get("kind") == "decode":
                    rows.setdefault(r["depth"], {})[kernel] = r
        # Other runs of the megakernel (Qwen's sampling defaults "megakernel-topk", ablations "ablate-N")
        # get a column each.
        extra = sorted(k for k in by_kernel if k not in ("megakernel", "per-op"))
        print(f"| MK {model} position | megakernel tok/s | GB/s | % of floor | per-op tok/s | speedup | floor tok/s |"
              + "".join(f" {k} tok/s |" for k in extra))
        print("|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(extra))
        for depth in sorted(rows):
            mk, po = rows[depth].get("megakernel"), rows[depth].get("per-op")
            ref = mk or po or next(iter(rows[depth].values()))
            floor = args.peak_gb_s * 1e9 / ref["bytes_per_token"] if ref["bytes_per_token"] else 0.0
            mt = mk["median_tok_s"] if mk else 0.0
            pt = po["median_tok_s"] if po else 0.0
            line = (f"| MK {model} {depth} | {mt:.0f} | {(mk or {}).get('achieved_gb_s', 0):.0f} | "
                    f"{100 * mt / floor if floor else 0:.0f}% | {pt:.0f} | {mt / pt if pt else 0:.2f}x | {floor:.0f} |")
            for k in extra:
                st = rows[depth].get(k)
                line += f" {st['median_tok_s']:.0f} |" if st else " - |"
            print(line)
        for depth in sorted(rows):
            for split in time_split(rows[depth]):
                print(f"MK SPLIT {model} position {depth}: {split}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
