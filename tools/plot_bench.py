#!/usr/bin/env python3
"""Plots decode speed by context position from `megaqwen bench --json` files (and, optionally, the
peers' JSON from tools/bench_peers.py, tools/bench_llamacpp.py or gpu-check's peers.json) into one PNG: tok/s against the cache position, log-scaled.

  python3 tools/plot_bench.py --out bench/results/decode_by_position.png \\
      --megaqwen per-op=bench.json --megaqwen megakernel=mk-bench.json [--peers peers.json] [--floor-gbs 4800]

--megaqwen takes LABEL=FILE (repeatable). With --floor-gbs (the card's bandwidth in GB/s) the floor
(weights + KV cache bytes per token over that bandwidth, from the bench JSON's byte counts) is drawn too.
Needs matplotlib (the GPU machine's image has it; here: python3 -m pip install matplotlib).
"""
import argparse
import json
import re
import sys

DECODE = re.compile(r"^tg(\d+)@d(\d+)$")


def megaqwen_series(path):
    """(depth, tok/s, bytes per token) for every decode test of one bench JSON, by depth."""
    data = json.load(open(path))
    points = [(r["depth"], r["median_tok_s"], r.get("bytes_per_token", 0.0))
              for r in data.get("results", []) if r.get("kind") == "decode"]
    return sorted(points), data


def decode_points(tests):
    pts = []
    for name, r in tests.items():
        m = DECODE.match(name)
        if m and isinstance(r, dict) and r.get("median_tok_s"):
            pts.append((int(m.group(2)), r["median_tok_s"]))
    return sorted(pts)


def peer_series(path):
    """{label: [(depth, tok/s)]} from tools/bench_peers.py's JSON (one series per mode),
    tools/bench_llamacpp.py's, or gpu-check's peers.json holding both ({"transformers": ..., "llama.cpp": ...})."""
    data = json.load(open(path))
    runs = data if ("transformers" in data or "llama.cpp" in data) else {"": data}
    out = {}
    for run in runs.values():
        if not isinstance(run, dict):
            continue
        if "modes" in run:
            for mode, tests in run["modes"].items():
                if isinstance(tests, dict) and decode_points(tests):
                    out[f"transformers {mode}"] = decode_points(tests)
        elif "tests" in run and decode_points(run["tests"]):
            out["llama.cpp"] = decode_points(run["tests"])
    return out, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megaqwen", action="append", default=[], metavar="LABEL=FILE")
    ap.add_argument("--peers", default=None)
    ap.add_argument("--floor-gbs", type=float, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    if not args.megaqwen and not args.peers:
        ap.error("give at least one --megaqwen LABEL=FILE or --peers FILE")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    title = args.title
    floor = None
    for spec in args.megaqwen:
        label, _, path = spec.partition("=")
        if not path:
            ap.error(f"--megaqwen wants LABEL=FILE, got {spec!r}")
        points, data = megaqwen_series(path)
        if not points:
            print(f"{path}: no decode results", file=sys.stderr)
            continue
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"megaqwen {label}")
        title = title or f"{data.get('gpu_name', data.get('device', ''))}, {data.get('model', {}).get('path', '')}"
        if args.floor_gbs and floor is None:
            floor = [(d, args.floor_gbs * 1e9 / b) for d, _, b in points if b > 0]
    if args.peers:
        series, data = peer_series(args.peers)
        for label, points in series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="s", linestyle="--", label=label)
    if floor:
        ax.plot([p[0] for p in floor], [p[1] for p in floor], color="gray", linestyle=":",
                label=f"bandwidth floor ({args.floor_gbs:.0f} GB/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cache position at the start of decode (tokens)")
    ax.set_ylabel("decode tok/s (median)")
    ax.set_title(title or "decode speed by position", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
