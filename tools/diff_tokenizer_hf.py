#!/usr/bin/env python3
"""Differential check of megaqwen's tokenizer against Hugging Face `tokenizers` on many fresh texts.

    python3 tools/diff_tokenizer_hf.py --megaqwen build/megaqwen [--count 20000] [--seed 1] \
        [--shared ../shared]

Draws seeded texts the way tools/make_tokenizer_fixtures.py builds its corpus (random code points
of several kinds, mixtures of prose, code, multilingual text and added tokens, slices of Python
sources), encodes them with HF (Qwen3's tokenizer.json; Qwen3.5's vocab.json + merges.txt pipeline)
and with `megaqwen tokenize --jsonl`, and reports every text whose ids differ. Texts whose NFC
depends on the Unicode version are left out (HF's tables are Unicode 9.0; see that script).
The fixtures are one fixed draw; this is for drawing many more. Exit status 1 on any difference.
"""
import argparse
import json
import pathlib
import random
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_tokenizer_fixtures import (CODE, EDGE, MULTILINGUAL, PROSE, SPECIALS, Tokenizer,  # noqa: E402
                                     python_sources, qwen35_tokenizer, random_strings,
                                     same_nfc_as_current_unicode)


def texts(rng, count):
    out = random_strings(rng, count // 2)
    out += python_sources(rng, count // 10, 600)
    pool = PROSE + CODE + MULTILINGUAL + EDGE
    while len(out) < count:
        parts = []
        for _ in range(rng.randrange(1, 6)):
            source = rng.choice(pool)
            start = rng.randrange(0, max(1, len(source)))
            parts.append(source[start:start + rng.randrange(1, 120)])
            if rng.random() < 0.3:
                parts.append(rng.choice(SPECIALS))
            if rng.random() < 0.4:
                parts.append(rng.choice([" ", "\n", "  ", "\r\n", "\t", "", "'s", "'LL", "\u00a0", "\u3000"]))
        out.append("".join(parts))
    return [t for t in out if t and same_nfc_as_current_unicode(t)]


def ours(binary, folder, batch):
    run = subprocess.run([binary, "tokenize", "--model", str(folder), "--jsonl"], check=True, capture_output=True,
                         input="".join(json.dumps(t) + "\n" for t in batch).encode(), timeout=600)
    return [json.loads(line) for line in run.stdout.decode().splitlines()]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megaqwen", default="build/megaqwen")
    parser.add_argument("--shared", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=5)
    args = parser.parse_args()

    batch = texts(random.Random(args.seed), args.count)
    models = args.shared / "models"
    tokenizers = {"qwen3": (models / "qwen3-0.6b", Tokenizer.from_file(str(models / "qwen3-0.6b" / "tokenizer.json"))),
                  "qwen3.5": (models / "qwen3.5-0.8b", qwen35_tokenizer(models / "qwen3.5-0.8b"))}
    differences = 0
    for name, (folder, hf) in tokenizers.items():
        expected = [e.ids for e in hf.encode_batch(batch, add_special_tokens=False)]
        got = ours(args.megaqwen, folder, batch)
        wrong = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
        if len(got) != len(expected):
            sys.exit(f"{name}: megaqwen answered {len(got)} lines for {len(expected)} texts")
        print(f"{name}: {len(batch)} texts ({sum(map(len, batch))} characters), {len(wrong)} differ")
        for i in wrong[:args.show]:
            print(f"  {batch[i]!r}\n    megaqwen {got[i]}\n    HF       {expected[i]}")
        differences += len(wrong)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
