#!/usr/bin/env python3
"""tools/bench_llamacpp.py's reading of llama-bench and its table, on a record shaped as llama-bench
0c1e570 writes it (`-o json`), so a GPU session's only llama.cpp call is not lost to a parsing slip."""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import bench_llamacpp as bl  # noqa: E402


def record(n_prompt, n_gen, n_depth, samples):
    return {"build_commit": "0c1e570", "backends": "CUDA", "model_type": "qwen3 0.6B BF16", "n_prompt": n_prompt,
            "n_gen": n_gen, "n_depth": n_depth, "avg_ts": sum(samples) / len(samples), "samples_ts": samples}


class BenchLlamaCppTest(unittest.TestCase):
    def test_names_follow_megaqwen_bench(self):
        self.assertEqual(bl.test_name(record(512, 0, 0, [1.0])), "pp512")
        self.assertEqual(bl.test_name(record(0, 128, 8192, [1.0])), "tg128@d8192")

    def test_median_not_mean(self):
        s = bl.summarize(record(0, 128, 1, [100.0, 300.0, 110.0]))
        self.assertEqual(s["median_tok_s"], 110.0)
        self.assertEqual((s["min_tok_s"], s["max_tok_s"]), (100.0, 300.0))
        self.assertAlmostEqual(s["llama_bench_mean_tok_s"], 170.0)

    def test_json_among_log_lines(self):
        text = "load: some log line\n" + json.dumps([record(0, 16, 1, [24.5])], indent=2) + "\nbye\n"
        self.assertEqual(bl.parse_llama_bench(text)[0]["n_gen"], 16)
        with self.assertRaises(ValueError):
            bl.parse_llama_bench("error: failed to load model\n")

    def test_table_ratios_and_gaps(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"results": [{"test": "pp512", "median_tok_s": 30000.0},
                                   {"test": "tg128@d1", "median_tok_s": 3000.0}]}, f)
        try:
            ours = bl.ours_from_bench_json(f.name)
        finally:
            os.remove(f.name)
        peer = {"pp512": {"median_tok_s": 20000.0}, "tg128@d1": {"median_tok_s": 1000.0},
                "tg128@d512": {"error": "rc 1"}}
        lines = bl.table(["pp512", "tg128@d1", "tg128@d512"], ours, peer).splitlines()
        self.assertEqual(lines[2], "| pp512 | 30000.0 | 20000.0 | 1.50x |")
        self.assertEqual(lines[3], "| tg128@d1 | 3000.0 | 1000.0 | 3.00x |")
        self.assertEqual(lines[4], "| tg128@d512 | - | - | - |")

    def test_no_mtp_only_when_declared_and_missing(self):
        def folder(config, names):
            d = tempfile.mkdtemp()
            self.addCleanup(shutil.rmtree, d)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(config, f)
            header = json.dumps({n: {"dtype": "BF16", "shape": [2], "data_offsets": [4 * i, 4 * i + 4]}
                                 for i, n in enumerate(names)}).encode()
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(len(header).to_bytes(8, "little") + header + bytes(4 * len(names)))
            return d

        hybrid = {"text_config": {"mtp_num_hidden_layers": 1}}
        self.assertTrue(bl.lacks_declared_mtp(folder(hybrid, ["model.language_model.norm.weight"])))
        self.assertFalse(bl.lacks_declared_mtp(folder(hybrid, ["model.language_model.norm.weight", "mtp.fc.weight"])))
        self.assertFalse(bl.lacks_declared_mtp(folder({"num_hidden_layers": 28}, ["model.norm.weight"])))


if __name__ == "__main__":
    unittest.main()
