#!/usr/bin/env python3
"""Builds the Hugging Face parity fixtures in tests/fixtures/hf/.

Each case is a small random Qwen3 checkpoint made with transformers' own Qwen3ForCausalLM, saved with
save_pretrained (safetensors), plus the logits transformers computes for it in fp32:

  tests/fixtures/hf/<case>/config.json, model.safetensors (or shards + model.safetensors.index.json)
  tests/fixtures/hf/<case>/expected.json      sequences, prefill lengths, the greedy continuation
  tests/fixtures/hf/<case>/logits_<n>.f32     raw little-endian float32 [len(ids), vocab]

The reference is computed from the weights as stored: the model is converted to its storage dtype
(bf16 / f16 / f32), saved, then reloaded from disk with dtype=float32, so the C++ engine (which
upcasts the stored values to fp32) and transformers see exactly the same numbers.

Usage: python3 tools/make_hf_fixtures.py [--out tests/fixtures/hf] [--only CASE ...]
Needs torch and transformers (the versions used are written to the README and to expected.json).
"""

import argparse
import copy
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

# The sequences recorded for every case: (length, prefill_len). The C++ test prefills ids[:prefill_len]
# in one batch and decodes the rest one token at a time.
SEQUENCES = [(1, 1), (7, 1), (33, 33), (70, 17)]
GREEDY_PROMPT_LEN = 6
GREEDY_NEW_TOKENS = 32
MIN_RELATIVE_MARGIN = 1e-3  # (top1 - top2) / max|logit| along the greedy path

# Shapes are small so all fixtures together stay well under 4 MB.
CASES = {
    # GQA ratio 1 (heads == kv_heads), tied embeddings, bf16.
    "gqa1_bf16": dict(vocab_size=384, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, head_dim=16, intermediate_size=128, rope_theta=1e6,
                      tie_word_embeddings=True, dtype="bfloat16"),
    # GQA ratio 2, tied, bf16, 3 layers.
    "gqa2_bf16": dict(vocab_size=448, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, intermediate_size=160, rope_theta=1e6,
                      tie_word_embeddings=True, dtype="bfloat16"),
    # GQA ratio 4 with an untied LM head, bf16.
    "gqa4_untied_bf16": dict(vocab_size=448, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                             num_key_value_heads=2, head_dim=8, intermediate_size=128, rope_theta=1e6,
                             tie_word_embeddings=False, dtype="bfloat16"),
    # head_dim != hidden / heads: 128-wide heads as in the real models (RoPE pairs i, i+64), hidden 64.
    "headdim128_bf16": dict(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=128, intermediate_size=96, rope_theta=1e6,
                            tie_word_embeddings=True, dtype="bfloat16"),
    # head_dim != hidden / heads the other way (48 / 4 = 12, head_dim 32), odd-ish widths, 3 layers.
    "headdim32_h48_bf16": dict(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=32, intermediate_size=112, rope_theta=1e6,
                               tie_word_embeddings=False, dtype="bfloat16"),
    # Several safetensors shards with an index; rope_theta 10000.
    "sharded_theta1e4_bf16": dict(vocab_size=512, hidden_size=80, num_hidden_layers=3, num_attention_heads=6,
                                  num_key_value_heads=2, head_dim=16, intermediate_size=160, rope_theta=1e4,
                                  tie_word_embeddings=False, dtype="bfloat16", max_shard_size="100KB"),
    # Stored in float16.
    "f16": dict(vocab_size=400, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=128, rope_theta=1e6,
                tie_word_embeddings=True, dtype="float16"),
    # Stored in float32.
    "f32": dict(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=1, head_dim=16, intermediate_size=96, rope_theta=1e6,
                tie_word_embeddings=True, dtype="float32"),
    # YaRN RoPE scaling (transformers 5's rope_parameters form): an original context of 64 stretched x4,
    # so the 70-token sequence runs past it; attention_factor 0.1 ln 4 + 1 scales q.k.
    "yarn_bf16": dict(vocab_size=384, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, intermediate_size=128, rope_theta=1e4,
                      tie_word_embeddings=True, dtype="bfloat16",
                      rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64)),
    # Linear RoPE scaling in the legacy top-level rope_scaling form ("type", as older configs write it).
    "linear_legacy_bf16": dict(vocab_size=384, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, intermediate_size=128, rope_theta=1e4,
                               tie_word_embeddings=True, dtype="bfloat16", legacy_rope_scaling=True,
                               rope_scaling=dict(type="linear", factor=2.5)),
}

# RoPE frequencies alone, at real shapes (tests/fixtures/hf/rope_frequencies.json): transformers'
# inverse frequencies and attention factor for each, checked by tests/model/rope_test.cpp.
ROPE_CONFIGS = {
    "qwen3_default": dict(head_dim=128, rope_theta=1e6, max_position_embeddings=40960, rope_parameters=None),
    "qwen3_yarn4": dict(head_dim=128, rope_theta=1e6, max_position_embeddings=40960,
                        rope_parameters=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768)),
    "qwen3_yarn_mscale_untruncated": dict(
        head_dim=128, rope_theta=1e6, max_position_embeddings=40960,
        rope_parameters=dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=16384, beta_fast=16,
                             beta_slow=2, mscale=1.0, mscale_all_dim=0.5, truncate=False)),
    "qwen3_linear2": dict(head_dim=128, rope_theta=1e6, max_position_embeddings=40960,
                          rope_parameters=dict(rope_type="linear", factor=2.0)),
}

# Linear and embedding weights ~ N(0, INIT_STD): large enough that logits are well spread (the default
# 0.02 gives near-uniform logits), small enough that nothing saturates. Norm weights are drawn around 1
# so that an engine that ignores them (or uses 1 + w) fails.
INIT_STD = 0.15
NORM_JITTER = 0.25


def set_deterministic(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))


def build_model(spec, seed):
    set_deterministic(seed)
    cfg = Qwen3Config(
        vocab_size=spec["vocab_size"], hidden_size=spec["hidden_size"],
        num_hidden_layers=spec["num_hidden_layers"], num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_key_value_heads"], head_dim=spec["head_dim"],
        intermediate_size=spec["intermediate_size"], rope_theta=spec["rope_theta"],
        tie_word_embeddings=spec["tie_word_embeddings"], initializer_range=INIT_STD,
        max_position_embeddings=1024, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, attn_implementation="eager",
        **({"rope_scaling": copy.deepcopy(spec["rope_scaling"])} if "rope_scaling" in spec else {}))
    model = Qwen3ForCausalLM(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_JITTER * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=gen))
    if spec["tie_word_embeddings"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


def patch_config(path, spec):
    """transformers 5 writes rope_theta only inside rope_parameters; the published Qwen3 configs have it at
    the top level. Write both, so the fixture reads like a real checkpoint and keeps the new form too."""
    cfg = json.loads(path.read_text())
    cfg["rope_theta"] = spec["rope_theta"]
    if spec.get("legacy_rope_scaling"):  # as configs written before transformers 5: no rope_parameters
        del cfg["rope_parameters"]
        cfg["rope_scaling"] = spec["rope_scaling"]
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def full_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float32).contiguous()


def greedy(model, prompt):
    gc = GenerationConfig(do_sample=False, max_new_tokens=GREEDY_NEW_TOKENS, min_new_tokens=GREEDY_NEW_TOKENS,
                          eos_token_id=None, pad_token_id=None, bos_token_id=None)
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt], dtype=torch.long),
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long), generation_config=gc)
    tokens = out[0, len(prompt):].tolist()
    assert len(tokens) == GREEDY_NEW_TOKENS, tokens
    return tokens


def greedy_margins(model, prompt, tokens):
    """Checks the greedy path against one full forward: the argmax at each step is the token generate()
    chose, with a clear gap to the runner-up. Returns the smallest relative margin."""
    seq = prompt + tokens
    logits = full_logits(model, seq[:-1])
    worst = float("inf")
    for step, tok in enumerate(tokens):
        row = logits[len(prompt) - 1 + step]
        top2 = torch.topk(row, 2)
        if int(top2.indices[0]) != tok:
            return -1.0
        margin = float(top2.values[0] - top2.values[1]) / float(row.abs().max())
        worst = min(worst, margin)
    return worst


def make_case(name, spec, out_root, seed):
    case_dir = out_root / name
    for attempt in range(20):
        s = seed + 1000 * attempt
        model = build_model(spec, s)
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        storage = getattr(torch, spec["dtype"])
        save_kwargs = dict(safe_serialization=True)
        if "max_shard_size" in spec:
            save_kwargs["max_shard_size"] = spec["max_shard_size"]
        model.to(storage).save_pretrained(case_dir, **save_kwargs)
        patch_config(case_dir / "config.json", spec)
        # Reload what is on disk, upcast to fp32: the reference uses exactly the stored values.
        ref = Qwen3ForCausalLM.from_pretrained(case_dir, dtype=torch.float32, attn_implementation="eager").eval()
        assert next(ref.parameters()).dtype == torch.float32

        rng = np.random.default_rng(s)
        V = spec["vocab_size"]
        prompt = rng.integers(0, V, GREEDY_PROMPT_LEN).tolist()
        tokens = greedy(ref, prompt)
        margin = greedy_margins(ref, prompt, tokens)
        if margin < MIN_RELATIVE_MARGIN:
            print(f"  {name}: seed {s} greedy margin {margin:.2e} too small, retrying", flush=True)
            continue

        sequences = []
        for i, (length, prefill_len) in enumerate(SEQUENCES):
            ids = rng.integers(0, V, length).tolist()
            logits = full_logits(ref, ids)
            assert logits.shape == (length, V)
            fname = f"logits_{i}.f32"
            logits.numpy().astype("<f4").tofile(case_dir / fname)
            sequences.append(dict(ids=ids, prefill_len=prefill_len, logits_file=fname))

        for p in case_dir.iterdir():
            p.chmod(0o644)  # safetensors writes 0600
        files = sorted(p.name for p in case_dir.iterdir())
        shards = [f for f in files if f.endswith(".safetensors")]
        if "max_shard_size" in spec:
            assert len(shards) > 1 and "model.safetensors.index.json" in files, files
        expected = dict(
            case=name, seed=s, stored_dtype=spec["dtype"], vocab_size=V,
            torch_version=torch.__version__, transformers_version=transformers.__version__,
            note="logits: one fp32 forward over the whole sequence (eager attention), [len(ids), vocab] little-endian float32",
            sequences=sequences,
            greedy=dict(prompt=prompt, tokens=tokens, min_relative_margin=margin),
        )
        (case_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        size = sum(p.stat().st_size for p in case_dir.iterdir())
        print(f"  {name}: seed {s}, {len(shards)} shard(s), {size / 1024:.0f} KiB, greedy margin {margin:.3f}",
              flush=True)
        return size
    raise SystemExit(f"{name}: no seed gave clear greedy margins")


README = """# Hugging Face parity fixtures

Small random Qwen3 checkpoints made with `transformers`' own `Qwen3ForCausalLM`, and the fp32 logits
`transformers` computes for them. `tests/engine/hf_parity_test.cpp` checks the CPU engine against them.

Made with:

    python3 tools/make_hf_fixtures.py

using torch {torch}, transformers {tf}, numpy {np}, Python {py}, on CPU (eager attention,
`torch.use_deterministic_algorithms(True)`).

Per case (`<case>/`):
- `config.json`, `model.safetensors` (or several shards and `model.safetensors.index.json`),
  `generation_config.json`: written by `save_pretrained(..., safe_serialization=True)`. The script adds a
  top-level `rope_theta` next to transformers 5's `rope_parameters`, as in the published Qwen3 configs.
- `expected.json`: `sequences`, each `ids` (random token ids), `prefill_len` (the test prefills
  `ids[:prefill_len]` in one call and decodes the rest one token at a time) and `logits_file`; `greedy`:
  `prompt` and the 32 `tokens` of `model.generate(do_sample=False, max_new_tokens=32)` with no eos.
- `logits_<i>.f32`: raw little-endian float32 `[len(ids), vocab_size]`, one forward over the whole sequence.

Weights: linear and embedding weights ~ N(0, {std}), norm weights 1 + {jit} * N(0, 1) (so logits are well
spread and a wrong norm is caught). The model is converted to the stored dtype, saved, and reloaded from
disk with `dtype=torch.float32`, so the reference uses exactly the stored values upcast to fp32. Seeds are
retried until every greedy step has (top1 - top2) / max|logit| >= {margin}.

| case | stored | vocab | hidden | layers | heads / kv | head_dim | inter | tied | rope_theta | rope scaling | shards |
|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}

`rope_frequencies.json`: transformers' RoPE inverse frequencies and attention factor for real Qwen3
shapes with and without scaling (YaRN, linear), with the config.json each came from
(`tests/model/rope_test.cpp`).
"""


def rope_frequencies():
    """transformers' inverse frequencies and attention factor for each of ROPE_CONFIGS."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    table = {}
    for name, spec in ROPE_CONFIGS.items():
        rope = {"rope_type": "default", "rope_theta": spec["rope_theta"], **(spec["rope_parameters"] or {})}
        cfg = Qwen3Config(vocab_size=16, hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
                          num_key_value_heads=1, head_dim=spec["head_dim"],
                          max_position_embeddings=spec["max_position_embeddings"], rope_parameters=rope)
        config_json = json.loads(cfg.to_json_string())
        kind = rope["rope_type"]
        if kind == "default":
            inv_freq = 1.0 / (spec["rope_theta"] ** (torch.arange(0, spec["head_dim"], 2, dtype=torch.int64)
                                                     .to(dtype=torch.float) / spec["head_dim"]))
            factor = 1.0
        else:
            inv_freq, factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
        table[name] = dict(config=config_json, inv_freq=[float(x) for x in inv_freq.to(torch.float32)],
                           attention_factor=float(factor))
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf"))
    ap.add_argument("--only", nargs="*", help="cases to (re)make; default all")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__} -> {out_root}", flush=True)
    for i, (name, spec) in enumerate(CASES.items()):
        if args.only and name not in args.only:
            continue
        make_case(name, spec, out_root, args.seed + 17 * i)

    rope = rope_frequencies()
    (out_root / "rope_frequencies.json").write_text(json.dumps(dict(
        torch_version=torch.__version__, transformers_version=transformers.__version__, configs=rope), indent=1) + "\n")

    rows = []
    for name, s in CASES.items():
        n_shards = len(list((out_root / name).glob("*.safetensors"))) if (out_root / name).exists() else 0
        rows.append(f"| {name} | {s['dtype']} | {s['vocab_size']} | {s['hidden_size']} | {s['num_hidden_layers']} | "
                    f"{s['num_attention_heads']} / {s['num_key_value_heads']} | {s['head_dim']} | "
                    f"{s['intermediate_size']} | {'yes' if s['tie_word_embeddings'] else 'no'} | "
                    f"{s['rope_theta']:g} | {json.dumps(s['rope_scaling']) if 'rope_scaling' in s else '-'} | "
                    f"{n_shards} |")
    (out_root / "README.md").write_text(README.format(
        torch=torch.__version__, tf=transformers.__version__, np=np.__version__, py=platform.python_version(),
        std=INIT_STD, jit=NORM_JITTER, margin=MIN_RELATIVE_MARGIN, rows="\n".join(rows)))
    total = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    print(f"total {total / 1024:.0f} KiB", flush=True)


if __name__ == "__main__":
    sys.exit(main())
