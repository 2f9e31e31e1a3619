#!/usr/bin/env python3
"""Benchmarks Hugging Face transformers on the GPU on the same model folder and the same tests as
`megaqwen bench`, and prints one markdown table with megaqwen's numbers and the ratios.

Modes (batch 1, bf16, greedy, sdpa attention):
  eager    DynamicCache, one model() call per token from Python (how most people run transformers);
  compile  StaticCache sized for the deepest test + torch.compile(mode="reduce-overhead") of forward
           (CUDA graphs), the fastest stock transformers path.
Tests, as megaqwen's benchmark defines them:
  ppN      prefill of N prompt tokens (ids spread over the vocabulary), tokens / second;
  tgN@dD   N decode steps starting at cache position D. The cache is filled with noise up to D - 1
           positions (as Engine::fill_cache_with_noise does; values in [-1, 1)), one untimed step at D,
           then N timed steps, each feeding the argmax of the previous logits (the device-side greedy
           loop megaqwen times). Median of --repeats after --warmup.
Writes --json with every number and the table; reads megaqwen's bench JSON (--megaqwen-json) for the
ratio columns. Stops starting new tests once --budget-seconds are spent (named in the output).

--device cpu runs the same tests on the processor (megaqwen's CPU engine has its peers too; it is also
how this script is checked on a machine without a GPU); compile mode there is torch.compile without
CUDA graphs.

Usage: python3 tools/bench_peers.py --model DIR [--prompt-len 512,4096] [--depth 1,512,2048,8192,32768]
       [--tokens 128] [--megaqwen-json bench.json] [--json peers.json] [--modes eager,compile]
       [--device cuda|cpu]
"""

import argparse
import json
import statistics
import sys
import time

import torch

DEVICE = "cuda"  # --device

def ints(text):
    return [int(x) for x in text.split(",") if x.strip() and int(x) > 0]


def bench_tokens(n, vocab):
    # The same xorshift ids as megaqwen's bench_tokens (src/megaqwen/engine/benchmark.cpp).
    s, out = 2463534242, []
    for _ in range(n):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        out.append(s % min(vocab, 150000))
    return out


def sync_time():
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def noise_like(shape, gen):
    return (torch.rand(shape, generator=gen, device=DEVICE, dtype=torch.float32) * 2 - 1).to(torch.bfloat16)


class Runner:
    def __init__(self, model, mode, max_len):
        self.model, self.mode, self.max_len = model, mode, max_len
        cfg = model.config
        self.layers, self.kvh = cfg.num_hidden_layers, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
        self.forward = model.forward
        if mode == "compile":
            # "reduce-overhead" is CUDA graphs; on the CPU the default mode is the compiled path.
            self.forward = torch.compile(model.forward, mode="reduce-overhead" if DEVICE == "cuda" else "default",
                                         fullgraph=True)

    def new_cache(self, filled):
        from transformers import DynamicCache, StaticCache
        gen = torch.Generator(device=DEVICE).manual_seed(1)
        if self.mode == "eager":
            cache = DynamicCache()
            for layer in range(self.layers):
                if filled > 0:
                    k = noise_like((1, self.kvh, filled, self.hd), gen)
                    v = noise_like((1, self.kvh, filled, self.hd), gen)
                    cache.update(k, v, layer)
            return cache
        try:
            cache = StaticCache(config=self.model.config, max_cache_len=self.max_len)
        except TypeError:
            cache = StaticCache(config=self.model.config, max_batch_size=1, max_cache_len=self.max_len,
                                device=DEVICE, dtype=torch.bfloat16)
        if filled > 0:
            pos = torch.arange(filled, device=DEVICE)
            for layer in range(self.layers):
                k = noise_like((1, self.kvh, filled, self.hd), gen)
                v = noise_like((1, self.kvh, filled, self.hd), gen)
                cache.update(k, v, layer, {"cache_position": pos})
        return cache

    def step(self, token, cache, position):
        ids = token.view(1, 1)
        pos = torch.tensor([position], device=DEVICE)
        out = self.forward(input_ids=ids, past_key_values=cache, cache_position=pos, position_ids=pos.view(1, 1),
                           use_cache=True)
        return out.logits[0, -1].argmax()

    def prefill(self, ids):
        cache = self.new_cache(0)
        pos = torch.arange(len(ids), device=DEVICE)
        # Prefill is not compiled (the compiled graph is for one token); both modes run eager here.
        out = self.model(input_ids=torch.tensor([ids], device=DEVICE), past_key_values=cache, cache_position=pos,
                         use_cache=True)
        return out.logits[0, -1].argmax()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", default="512")
    ap.add_argument("--depth", default="1,512")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--megaqwen-json", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget-seconds", type=float, default=1e9)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_peers.py: torch sees no GPU (--device cpu runs on the processor)")
    import transformers
    from transformers import AutoModelForCausalLM

    start = time.time()
    prompts, depths, n = ints(args.prompt_len), ints(args.depth), args.tokens
    max_len = max([d + n + 1 for d in depths] + prompts + [1])
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.to(DEVICE).eval()
    vocab = model.config.vocab_size
    where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    results = {"device": DEVICE, "gpu": where, "torch": torch.__version__, "transformers": transformers.__version__,
               "model": args.model, "tokens": n, "repeats": args.repeats, "modes": {}, "skipped": []}

    for mode in [m for m in args.modes.split(",") if m]:
        try:
            runner = Runner(model, mode, max_len)
        except Exception as e:  # an API difference in this transformers version: report, go on
            results["modes"][mode] = {"error": repr(e)}
            continue
        res = results["modes"].setdefault(mode, {})
        tests = [("pp", p) for p in prompts] + [("tg", d) for d in depths]
        for kind, value in tests:
            name = f"pp{value}" if kind == "pp" else f"tg{n}@d{value}"
            if time.time() - start > args.budget_seconds:
                results["skipped"].append(f"{mode}:{name}")
                continue
            try:
                with torch.no_grad():
                    secs = []
                    for r in range(args.warmup + args.repeats):
                        if kind == "pp":
                            ids = bench_tokens(value, vocab)
                            t0 = sync_time()
                            runner.prefill(ids)
                            t1 = sync_time()
                        else:
                            ids = torch.tensor(bench_tokens(n + 1, vocab), device=DEVICE)
                            cache = runner.new_cache(value - 1)
                            tok = runner.step(ids[0], cache, value - 1)  # position depth, untimed
                            if mode == "compile" and r == 0:
                                for i in range(3):  # compile + graph capture happen in the first calls
                                    runner.step(tok, cache, value + i)
                                cache = runner.new_cache(value - 1)
                                tok = runner.step(ids[0], cache, value - 1)
                            t0 = sync_time()
                            for i in range(1, n + 1):
                                tok = runner.step(tok, cache, value - 1 + i)
                            t1 = sync_time()
                        if r >= args.warmup:
                            secs.append(t1 - t0)
                count = value if kind == "pp" else n
                med = statistics.median(secs)
                res[name] = {"median_tok_s": count / med, "min_tok_s": count / max(secs), "max_tok_s": count / min(secs)}
                print(f"{mode} {name}: {count / med:.1f} tok/s", flush=True)
            except Exception as e:
                res[name] = {"error": repr(e)[:500]}
                print(f"{mode} {name}: error {e!r}"[:300], flush=True)

    ours = {}
    if args.megaqwen_json:
        try:
            for r in json.load(open(args.megaqwen_json)).get("results", []):
                ours[r["test"]] = r["median_tok_s"]
        except OSError:
            pass
    modes = list(results["modes"])
    head = "| test | megaqwen t/s | " + " | ".join(f"HF {m} t/s | megaqwen / HF {m}" for m in modes) + " |"
    lines = [head, "|---|---:|" + "---:|---:|" * len(modes)]
    names = [f"pp{p}" for p in prompts] + [f"tg{n}@d{d}" for d in depths]
    for name in names:
        row = f"| {name} | {ours[name]:.1f} |" if name in ours else f"| {name} | - |"
        for m in modes:
            v = results["modes"][m].get(name, {}).get("median_tok_s")
            ratio = f"{ours[name] / v:.2f}x" if v and name in ours else "-"
            row += f" {v:.1f} | {ratio} |" if v else " - | - |"
        lines.append(row)
    table = "\n".join(lines)
    results["table_markdown"] = table
    print("\n" + table)
    if results["skipped"]:
        print("skipped (time budget): " + ", ".join(results["skipped"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
