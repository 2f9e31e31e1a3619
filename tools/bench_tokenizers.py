#!/usr/bin/env python3
"""Encode throughput of reference tokenizers on the corpus bench_tokenizer uses, single-threaded.

  tools/bench_tokenizers.py --make-corpus FILE        write the benchmark corpus (about 4 MB)
  tools/bench_tokenizers.py --corpus FILE [--model DIR] [--megaqwen build/bench/tokenizer/bench_tokenizer]

Measures HF `tokenizers` (tokenizer.json; RAYON_NUM_THREADS=1, one string per call) and `tiktoken`
given the same vocabulary (ranks = Qwen ids, Qwen's regex, the added tokens as specials). tiktoken does
no NFC, so its ids can differ on non-NFC text; the agreement with HF is printed beside its speed.
With --megaqwen, megaqwen's own encoder (the bench_tokenizer program) runs first in the same
invocation, on the same corpus and files, so the three are measured side by side.
Each is timed on the whole corpus as one string (cold = first call, warm = best of the next ones) and
line by line (one Python call per line, so that figure includes Python's call overhead).
"""
import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def make_corpus(path):
    """Python standard library sources (English comments and code), then the multilingual fixture texts."""
    parts, size = [], 0
    for f in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = f.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text.encode())
        if size > 3_500_000:
            break
    fixture = ROOT / "tests" / "fixtures" / "tokenizer" / "qwen3_encode.jsonl"
    for line in fixture.read_text(encoding="utf-8").split("\n"):
        if not line:
            continue
        parts.append(json.loads(line)["text"] + "\n")
    pathlib.Path(path).write_text("".join(parts), encoding="utf-8")
    print(f"wrote {path}: {pathlib.Path(path).stat().st_size} bytes")


def timed(fn, repeat):
    start = time.perf_counter()
    result = fn()
    cold = time.perf_counter() - start
    warm = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        warm = min(warm, time.perf_counter() - start)
    return result, cold, warm


def report(name, corpus, lines, encode_one, repeat, reference=None):
    mb = len(corpus.encode()) / 1e6
    ids, cold, warm = timed(lambda: encode_one(corpus), repeat)
    _, _, per_line = timed(lambda: [encode_one(line) for line in lines], max(1, repeat // 2))
    agree = "" if reference is None else f"   ids equal to HF: {ids == reference}"
    print(f"{name:12s} one string cold {mb / cold:6.1f} MB/s  warm {mb / warm:6.1f} MB/s"
          f" ({len(ids) / warm / 1e6:.2f} M tokens/s)   line by line {mb / per_line:6.1f} MB/s{agree}")
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make-corpus", type=pathlib.Path)
    parser.add_argument("--corpus", type=pathlib.Path)
    parser.add_argument("--model", type=pathlib.Path, default=ROOT.parent / "shared" / "models" / "qwen3-0.6b")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--megaqwen", type=pathlib.Path, help="the bench_tokenizer binary, to run megaqwen alongside")
    args = parser.parse_args()
    if args.make_corpus:
        make_corpus(args.make_corpus)
        return
    if not args.corpus:
        parser.error("--corpus or --make-corpus is required")
    corpus = args.corpus.read_text(encoding="utf-8")
    lines = corpus.splitlines(keepends=True)
    print(f"corpus {args.corpus}: {len(corpus.encode()) / 1e6:.2f} MB, {len(lines)} lines")
    if args.megaqwen:
        out = subprocess.run([str(args.megaqwen), "--model", str(args.model), "--corpus", str(args.corpus),
                              "--repeat", str(args.repeat)], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            print(f"megaqwen     {line}")

    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    reference = report("hf", corpus, lines, lambda s: hf.encode(s, add_special_tokens=False).ids, args.repeat)

    try:
        import tiktoken
    except ImportError:
        print("tiktoken not installed")
        return
    spec = json.loads((args.model / "tokenizer.json").read_text(encoding="utf-8"))
    byte_of = {}
    n = 0
    for b in range(256):  # GPT-2 byte-to-unicode map, inverted
        printable = (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255)
        byte_of[chr(b) if printable else chr(256 + n)] = b
        n += 0 if printable else 1
    ranks = {bytes(byte_of[c] for c in tok): i for tok, i in spec["model"]["vocab"].items()}
    pattern = spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    specials = {t["content"]: t["id"] for t in spec["added_tokens"]}
    enc = tiktoken.Encoding("qwen3", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    report("tiktoken", corpus, lines, lambda s: enc.encode(s, allowed_special="all"), args.repeat, reference)


if __name__ == "__main__":
    main()
