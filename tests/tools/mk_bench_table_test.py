#!/usr/bin/env python3
"""tools/mk_bench_table.py on bench JSON shaped as `megaqwen bench --json` writes it: the merged file,
the table's columns, and the split of a token's time the timing probes give (MK SPLIT lines), so a GPU
session's numbers are not lost to a slip in the tool that reads them."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import mk_bench_table as mt  # noqa: E402


def bench(tok_s_by_depth):
    return {"device": "NVIDIA H200", "commit": "abc1234",
            "results": [{"test": f"tg128@d{d}", "kind": "decode", "depth": d, "median_tok_s": t,
                         "achieved_gb_s": t * 1.2, "bytes_per_token": 1.2e9} for d, t in tok_s_by_depth.items()]}


class MkBenchTableTest(unittest.TestCase):
    def run_tool(self, runs):
        d = tempfile.mkdtemp()
        args = []
        for model, kernel, b in runs:
            path = os.path.join(d, f"{model}-{kernel}.json")
            with open(path, "w") as f:
                json.dump(b, f)
            args.append(f"{model}:{kernel}:{path}")
        out = os.path.join(d, "merged.json")
        sys.argv = ["mk_bench_table.py", "--out", out] + args
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            self.assertEqual(mt.main(), 0)
        return text.getvalue(), json.load(open(out))

    def test_probes_split_the_token(self):
        text, merged = self.run_tool([
            ("qwen3-0.6b", "megakernel", bench({1: 1000.0, 4096: 800.0})),
            ("qwen3-0.6b", "per-op", bench({1: 900.0, 4096: 700.0})),
            ("qwen3-0.6b", "probe-no-waits", bench({1: 2500.0, 4096: 1600.0})),
            ("qwen3-0.6b", "probe-no-weights", bench({1: 1250.0})),
            ("qwen3-0.6b", "probe-no-waits,no-weights", bench({1: 5000.0})),
        ])
        self.assertEqual(len(merged["runs"]), 5)
        # 1000 tok/s: 1000 us; no waits 400 us, so the waits cost 600; no weights 800, the weights 200.
        self.assertIn("MK SPLIT qwen3-0.6b position 1: full 1000 us; no waits 400 (the waits cost 600); "
                      "no weights 800 (the weights cost 200); neither 200 (the work and one edge per token)", text)
        self.assertIn("MK SPLIT qwen3-0.6b position 4096: full 1250 us; no waits 625 (the waits cost 625)", text)
        self.assertIn("| MK qwen3-0.6b 1 | 1000 |", text)
        self.assertIn(" probe-no-waits tok/s |", text)

    def test_hybrid_counters_are_the_full_token(self):
        text, _ = self.run_tool([
            ("qwen3.5-0.8b", "counters", bench({1: 300.0})),
            ("qwen3.5-0.8b", "probe-no-weights", bench({1: 400.0})),
        ])
        self.assertIn("MK SPLIT qwen3.5-0.8b position 1: full 3333 us; no weights 2500 (the weights cost 833)", text)

    def test_no_probes_no_split(self):
        text, _ = self.run_tool([("qwen3-0.6b", "megakernel", bench({1: 1000.0}))])
        self.assertNotIn("MK SPLIT", text)


if __name__ == "__main__":
    unittest.main()
