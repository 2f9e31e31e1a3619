#!/usr/bin/env python3
"""Benchmarks Hugging Face transformers on the GPU on the same model folder and the same tests as
`megaqwen bench`, and prints one markdown table with megaqwen's numbers and the ratios.

Modes (batch 1, bf16, greedy, sdpa attention):
  eager    DynamicCache, one model() call per token from Python (how most people run transformers);
  compile  what generate() does with a static cache, the fastest stock transformers path: a StaticCache
           sized for the test (never shrunk, as generate keeps its largest), the forward compiled by
           model.get_compiled_call (torch.compile mode "reduce-overhead": CUDA graphs), prefill eager.
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
CUDA graphs, with static shapes.

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
    """The model calls of one mode.

    compile is what transformers 5.x `generate()` does for a static cache (generation/utils.py):
    - the forward is `model.get_compiled_call(CompileConfig())`: torch.compile(model.__call__, backend
      inductor, mode "reduce-overhead" (CUDA graphs), fullgraph False, dynamic None); prefill stays eager,
      as generate's `_prefill`;
    - the cache is `StaticCache(config=, max_cache_len=)` sized for the test (the positions it writes, + 1)
      but never shrunk (generate keeps the largest `max_cache_len` it has used, to spare recompilations),
      initialized outside any compiled call. That marks its key/value tensors and each layer's
      `cumulative_length` counter as static addresses, which the CUDA graph may mutate in place. (Initialized
      inside the first compiled call, as happened when a decode test's first step met an empty cache, they
      are unmarked graph outputs that the next replay overwrites: "skipping cudagraphs due to mutated
      inputs", then "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run".)
      transformers 5.x has no `cache_position`: a static layer writes at its `cumulative_length`, and the
      mask takes its query offset from it. A decode test's cache is initialized eagerly
      (`early_initialization`, as generate does before a compiled chunked prefill) and refilled in place for
      each run (`reset()`, then the noise through the eager `update`), so its addresses, which the recorded
      CUDA graph holds, stay; a larger test makes a new one (torch.compile recompiles once, for a dynamic
      length, then CUDA graphs record once per length);
    - each decode call starts a new CUDA-graph step (`torch.compiler.cudagraph_mark_step_begin()`); of a
      replay's outputs only the logits are read, by the argmax, before the next call; the token it makes is
      an ordinary tensor, outside the graphs' memory pool.
    """

    def __init__(self, model, mode, max_len):
        import inspect
        self.model, self.mode, self.max_len = model, mode, max_len
        cfg = model.config
        cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        self.config = cfg
        self.layers = cfg.num_hidden_layers
        self.kvh = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        params = inspect.signature(model.forward).parameters
        self.takes_cache_position = "cache_position" in params  # transformers before 5.x
        self.takes_logits_to_keep = "logits_to_keep" in params  # generate passes 1
        self.forward = model.forward
        self.cache, self.cache_len = None, 0  # compile: the decode cache
        if mode == "compile":
            self.forward = self.compiled_call()

    def compiled_call(self):
        # generate(): model.get_compiled_call(generation_config.compile_config), by default CompileConfig().
        # generate does not compile on the CPU; there this script compiles with mode "default" (CUDA graphs
        # are for CUDA) and static shapes, one compilation per cache length (inductor's CPU code for a dynamic
        # cache length runs the attention tens of times slower).
        try:
            from transformers import CompileConfig
        except ImportError:
            return torch.compile(self.model.__call__, mode="reduce-overhead" if DEVICE == "cuda" else "default",
                                 dynamic=None if DEVICE == "cuda" else False)
        config = CompileConfig() if DEVICE == "cuda" else CompileConfig(mode="default", dynamic=False)
        if hasattr(self.model, "get_compiled_call"):
            return self.model.get_compiled_call(config)
        return torch.compile(self.model.__call__, **config.to_dict())

    def static_cache(self, length, early):
        from transformers import StaticCache
        try:
            cache = StaticCache(config=self.config, max_cache_len=length)
        except TypeError:  # transformers before 4.56
            return StaticCache(config=self.config, max_batch_size=1, max_cache_len=length, device=DEVICE,
                               dtype=torch.bfloat16)
        if early and hasattr(cache, "early_initialization"):
            cache.early_initialization(batch_size=1, num_heads=self.kvh, head_dim=self.hd, dtype=self.model.dtype,
                                       device=self.model.device)
        return cache

    def new_cache(self, filled, length=None):
        """A cache holding `filled` positions of noise, with room for `length` (default: the deepest test)."""
        from transformers import DynamicCache
        gen = torch.Generator(device=DEVICE).manual_seed(1)
        if self.mode == "eager":
            cache = DynamicCache()
        else:
            length = max(length or self.max_len, self.cache_len)
            if self.cache is None or length > self.cache_len or not hasattr(self.cache, "early_initialization"):
                self.cache = None  # free the old one first
                # (transformers without early_initialization: a new cache each time, initialized by the fill)
                self.cache, self.cache_len = self.static_cache(length, early=True), length
            else:
                self.cache.reset()  # in place: keys, values and every layer's cumulative_length to zero
            cache = self.cache
        if filled > 0:
            pos = torch.arange(filled, device=DEVICE)
            for layer in range(self.layers):
                k = noise_like((1, self.kvh, filled, self.hd), gen)
                v = noise_like((1, self.kvh, filled, self.hd), gen)
                # Eager. A static layer copies in place at its cumulative_length, which advances by `filled`;
                # the cache kwargs are where transformers before 5.x took the positions from.
                cache.update(k, v, layer, {"cache_position": pos})
        return cache

    def model_kwargs(self, cache, positions):
        kw = {"past_key_values": cache, "use_cache": True}
        if self.takes_cache_position:
            kw["cache_position"] = positions
        return kw

    def step(self, token, cache, position):
        # The position is made on the device (a fill: no copy from the host, so no synchronization), as
        # generate keeps its position_ids on the device.
        pos = torch.full((1, 1), position, dtype=torch.long, device=DEVICE)
        kw = self.model_kwargs(cache, pos.view(1))
        if self.takes_logits_to_keep:
            kw["logits_to_keep"] = 1
        if self.mode == "compile":
            torch.compiler.cudagraph_mark_step_begin()
        out = self.forward(input_ids=token.view(1, 1), position_ids=pos, **kw)
        return out.logits[0, -1].argmax()

    def prefill(self, ids):
        # Prefill is not compiled (the compiled graph is for one token); both modes run eager here, compile on
        # a new StaticCache for the prompt and one more token, initialized in this call, as in generate.
        from transformers import DynamicCache
        cache = DynamicCache() if self.mode == "eager" else self.static_cache(len(ids) + 1, early=False)
        pos = torch.arange(len(ids), device=DEVICE)
        out = self.model(input_ids=torch.tensor([ids], device=DEVICE), **self.model_kwargs(cache, pos))
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
                            cache = runner.new_cache(value - 1, value + n + 1)
                            tok = runner.step(ids[0], cache, value - 1)  # position depth, untimed
                            if mode == "compile" and r == 0:
                                for i in range(min(3, n)):  # compile + graph capture happen in the first calls
                                    tok = runner.step(tok, cache, value + i)
                                cache = runner.new_cache(value - 1, value + n + 1)
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
