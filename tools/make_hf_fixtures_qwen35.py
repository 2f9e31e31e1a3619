#!/usr/bin/env python3
"""Builds the Qwen3.5 hybrid parity fixtures in tests/fixtures/hf_qwen35/.

Each case is a small random Qwen3.5 checkpoint made with transformers' own qwen3_5 implementation
(Qwen3_5ForConditionalGeneration or Qwen3_5ForCausalLM), saved with save_pretrained, plus the logits
transformers computes for it in fp32. Same layout as tests/fixtures/hf (see make_hf_fixtures.py):

  <case>/config.json, model.safetensors      as save_pretrained writes them
  <case>/expected.json                       sequences, prefill lengths, the greedy continuation
  <case>/logits_<n>.f32                      raw little-endian float32 [len(ids), vocab]

Storage follows the published checkpoints: bf16, except linear_attn.A_log and linear_attn.norm.weight
in float32. The reference reloads the saved files with dtype=float32, so it uses exactly the stored
values. The Gated DeltaNet runs transformers' pure-torch path (torch_chunk_gated_delta_rule for a
whole sequence, torch_recurrent_gated_delta_rule when generate() decodes with a cache, and the torch
causal conv): the script refuses to run when flash-linear-attention, causal-conv1d or the hub
`kernels` package is importable, since those would replace it.

Usage: python3 tools/make_hf_fixtures_qwen35.py [--out tests/fixtures/hf_qwen35] [--only CASE ...]
"""

import argparse
import importlib.util
import json
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                          Qwen3_5TextConfig)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_hf_fixtures import (GREEDY_NEW_TOKENS, GREEDY_PROMPT_LEN, MIN_RELATIVE_MARGIN, SEQUENCES,  # noqa: E402
                              full_logits, greedy, greedy_margins, set_deterministic)

L, F = "linear_attention", "full_attention"

# Small shapes (all fixtures together well under 2 MB) that keep the published model's structure:
# more than one head everywhere, query heads a multiple of kv heads, value heads a multiple of key
# heads, partial rotary 0.25, conv kernel 4. SEQUENCES has prompts longer than the conv window and
# one longer than transformers' 64-token chunk of the chunked delta rule.
CASES = {
    # The published layout: Qwen3_5ForConditionalGeneration with a (tiny) vision tower, so tensors are
    # model.language_model.* and model.visual.* is stored too. Layers [linear, full].
    "lf_wrapper_bf16": dict(wrapper=True, vocab_size=320, hidden_size=64, layer_types=[L, F],
                            num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=128,
                            linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                            linear_value_head_dim=16, rope_theta=1e7, tie_word_embeddings=True),
    # Text-only Qwen3_5ForCausalLM (tensors model.*), untied head, 2 value heads per key head (as the
    # larger Qwen3.5 models), GQA 4, layers [linear, linear, full].
    "llf_text_untied_bf16": dict(wrapper=False, vocab_size=384, hidden_size=64, layer_types=[L, L, F],
                                 num_attention_heads=4, num_key_value_heads=1, head_dim=32, intermediate_size=96,
                                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                                 linear_value_head_dim=8, rope_theta=1e7, tie_word_embeddings=False),
    # Full attention first and last, head_dim 64 (16 rotary dims), key dim != value dim, rope_theta 1e6,
    # layers [full, linear, linear, full].
    "fllf_text_bf16": dict(wrapper=False, vocab_size=352, hidden_size=48, layer_types=[F, L, L, F],
                           num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=112,
                           linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=8,
                           linear_value_head_dim=16, rope_theta=1e6, tie_word_embeddings=True),
    # YaRN on the gated attention's partial rotary dims (factor 4 over an original context of 64, so the
    # 70-token sequence runs past it), layers [linear, full].
    "lf_yarn_text_bf16": dict(wrapper=False, vocab_size=320, hidden_size=64, layer_types=[L, F],
                              num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=128,
                              linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                              linear_value_head_dim=16, rope_theta=1e4, tie_word_embeddings=True,
                              rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64)),
}

INIT_STD = 0.15      # linear and embedding weights ~ N(0, INIT_STD), as in make_hf_fixtures.py
NORM_JITTER = 0.25   # (1 + w) norms: w ~ NORM_JITTER * N(0, 1); the gated norm's plain weight 1 + that
CONV_STD = 0.5       # conv1d taps
A_RANGE = (0.05, 0.7)  # A = exp(A_log) ~ U(A_RANGE): per-token decays exp(g) between ~0.2 and ~0.99
DT_BIAS_STD = 0.5
F32_TENSORS = ("linear_attn.A_log", "linear_attn.norm.weight")  # float32 in the published checkpoints


def check_torch_fallback():
    for module in ("fla", "causal_conv1d", "kernels"):
        if importlib.util.find_spec(module) is not None:
            raise SystemExit(f"'{module}' is importable; it would replace transformers' torch Gated DeltaNet path")


def text_config(spec):
    head_dim = spec["head_dim"]
    freqs = head_dim // 4 // 2
    return Qwen3_5TextConfig(
        vocab_size=spec["vocab_size"], hidden_size=spec["hidden_size"], intermediate_size=spec["intermediate_size"],
        num_hidden_layers=len(spec["layer_types"]), layer_types=spec["layer_types"],
        num_attention_heads=spec["num_attention_heads"], num_key_value_heads=spec["num_key_value_heads"],
        head_dim=head_dim, linear_num_key_heads=spec["linear_num_key_heads"],
        linear_num_value_heads=spec["linear_num_value_heads"], linear_key_head_dim=spec["linear_key_head_dim"],
        linear_value_head_dim=spec["linear_value_head_dim"], linear_conv_kernel_dim=4,
        max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=spec["tie_word_embeddings"],
        initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={**dict(rope_type="default", rope_theta=spec["rope_theta"], partial_rotary_factor=0.25,
                                mrope_section=[freqs - freqs // 2, freqs // 2, 0], mrope_interleaved=True),
                         **spec.get("rope_scaling", {})},
        attn_implementation="eager")


def build_model(spec, seed):
    set_deterministic(seed)
    tc = text_config(spec)
    if spec["wrapper"]:
        cfg = Qwen3_5Config(
            text_config=tc.to_dict(), tie_word_embeddings=spec["tie_word_embeddings"],
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                               spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=spec["hidden_size"],
                               num_position_embeddings=16),
            attn_implementation="eager")
        model = Qwen3_5ForConditionalGeneration(cfg)
    else:
        model = Qwen3_5ForCausalLM(tc)
    model = model.to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):      # gated norm: plain weight
                p.copy_(1.0 + NORM_JITTER * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight"):                # (1 + w) norms, w zero-centred
                p.copy_(NORM_JITTER * torch.randn(p.shape, generator=gen))
            elif name.endswith("A_log"):
                lo, hi = A_RANGE
                p.copy_(torch.log(lo + (hi - lo) * torch.rand(p.shape, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(DT_BIAS_STD * torch.randn(p.shape, generator=gen))
            elif name.endswith("conv1d.weight"):
                p.copy_(CONV_STD * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=gen))
    return model


def to_published_dtypes(model):
    """bf16 everywhere except A_log and the gated norm, which keep their float32 values."""
    keep = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith(F32_TENSORS)}
    model.to(torch.bfloat16)
    for name, value in keep.items():
        module = model.get_submodule(name.rsplit(".", 1)[0])
        setattr(module, name.rsplit(".", 1)[1], torch.nn.Parameter(value, requires_grad=False))
    return model


def stored_dtypes(case_dir):
    out = {}
    with safe_open(case_dir / "model.safetensors", "pt") as f:
        for k in f.keys():
            out[k] = str(f.get_slice(k).get_dtype())
    return out


def recurrent_logits(model, ids):
    """transformers with a cache, one token at a time: the recurrent delta rule and conv update (the
    decode path), as a cross-check of the chunked reference."""
    rows, cache = [], None
    with torch.no_grad():
        for i, tok in enumerate(ids):
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            rows.append(out.logits[0, -1].to(torch.float32))
    return torch.stack(rows)


def rel_err(a, b):
    return float(((a - b).abs().amax(dim=-1) / b.abs().amax(dim=-1)).max())


def make_case(name, spec, out_root, seed):
    case_dir = out_root / name
    cls = Qwen3_5ForConditionalGeneration if spec["wrapper"] else Qwen3_5ForCausalLM
    for attempt in range(20):
        s = seed + 1000 * attempt
        model = to_published_dtypes(build_model(spec, s))
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        model.save_pretrained(case_dir, safe_serialization=True)
        dtypes = stored_dtypes(case_dir)
        for k, d in dtypes.items():
            want = "F32" if k.endswith(F32_TENSORS) else "BF16"
            assert d == want, (k, d)
        prefix = "model.language_model." if spec["wrapper"] else "model."
        assert f"{prefix}embed_tokens.weight" in dtypes, sorted(dtypes)[:5]
        ref = cls.from_pretrained(case_dir, dtype=torch.float32, attn_implementation="eager").eval()
        assert all(p.dtype == torch.float32 for p in ref.parameters())

        rng = np.random.default_rng(s)
        V = spec["vocab_size"]
        prompt = rng.integers(0, V, GREEDY_PROMPT_LEN).tolist()
        tokens = greedy(ref, prompt)
        margin = greedy_margins(ref, prompt, tokens)
        if margin < MIN_RELATIVE_MARGIN:
            print(f"  {name}: seed {s} greedy margin {margin:.2e} too small, retrying", flush=True)
            continue

        sequences, self_check = [], 0.0
        for i, (length, prefill_len) in enumerate(SEQUENCES):
            ids = rng.integers(0, V, length).tolist()
            logits = full_logits(ref, ids)
            assert logits.shape == (length, V)
            self_check = max(self_check, rel_err(recurrent_logits(ref, ids), logits))
            fname = f"logits_{i}.f32"
            logits.numpy().astype("<f4").tofile(case_dir / fname)
            sequences.append(dict(ids=ids, prefill_len=prefill_len, logits_file=fname))

        for p in case_dir.iterdir():
            p.chmod(0o644)  # safetensors writes 0600
        n_visual = sum(k.startswith("model.visual.") for k in dtypes)
        expected = dict(
            case=name, seed=s, stored_dtype="bfloat16 (A_log, linear_attn.norm.weight: float32)", vocab_size=V,
            layer_types=spec["layer_types"], architecture=cls.__name__, visual_tensors=n_visual,
            torch_version=torch.__version__, transformers_version=transformers.__version__,
            note="logits: one fp32 forward over the whole sequence (eager attention, torch chunked gated delta "
                 "rule), [len(ids), vocab] little-endian float32",
            chunked_vs_recurrent_max_relative_error=self_check,
            sequences=sequences,
            greedy=dict(prompt=prompt, tokens=tokens, min_relative_margin=margin),
        )
        (case_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        size = sum(p.stat().st_size for p in case_dir.iterdir())
        print(f"  {name}: seed {s}, {size / 1024:.0f} KiB, greedy margin {margin:.3f}, "
              f"chunked vs recurrent {self_check:.1e}, {n_visual} visual tensors", flush=True)
        return size
    raise SystemExit(f"{name}: no seed gave clear greedy margins")


README = """# Hugging Face parity fixtures: Qwen3.5 hybrid

Small random Qwen3.5 checkpoints made with `transformers`' own qwen3_5 implementation, and the fp32
logits `transformers` computes for them. `tests/engine/qwen35_parity_test.cpp` checks the CPU hybrid
engine against them; the format is that of `tests/fixtures/hf` (see its README).

Made with:

    python3 tools/make_hf_fixtures_qwen35.py

using torch {torch}, transformers {tf}, numpy {np}, Python {py}, on CPU (eager attention, the pure-torch
Gated DeltaNet: no flash-linear-attention, causal-conv1d or hub kernels installed).

Storage as published: bf16, with `linear_attn.A_log` and `linear_attn.norm.weight` in float32. The
reference reloads the files with `dtype=torch.float32`. Weights: linear and embedding ~ N(0, {std});
(1 + w) norms w ~ {jit} N(0, 1); the gated norm's plain weight 1 + {jit} N(0, 1); conv taps ~ N(0, {conv});
A = exp(A_log) ~ U{arange}; dt_bias ~ N(0, {dt}). `expected.json` also records
`chunked_vs_recurrent_max_relative_error`: transformers' whole-sequence (chunked) logits against its own
token-by-token (recurrent, cached) logits, i.e. the reference's own numerical noise.

| case | class | layers | vocab | hidden | heads / kv | head_dim | DeltaNet k / v heads | k / v dim | inter | tied | rope_theta | rope scaling |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf_qwen35"))
    ap.add_argument("--only", nargs="*", help="cases to (re)make; default all")
    ap.add_argument("--seed", type=int, default=4321)
    args = ap.parse_args()
    check_torch_fallback()
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__} -> {out_root}", flush=True)
    for i, (name, spec) in enumerate(CASES.items()):
        if args.only and name not in args.only:
            continue
        make_case(name, spec, out_root, args.seed + 17 * i)

    rows = []
    for name, s in CASES.items():
        layers = ", ".join("L" if t == L else "F" for t in s["layer_types"])
        rows.append(f"| {name} | {'ForConditionalGeneration' if s['wrapper'] else 'ForCausalLM'} | {layers} | "
                    f"{s['vocab_size']} | {s['hidden_size']} | {s['num_attention_heads']} / "
                    f"{s['num_key_value_heads']} | {s['head_dim']} | {s['linear_num_key_heads']} / "
                    f"{s['linear_num_value_heads']} | {s['linear_key_head_dim']} / {s['linear_value_head_dim']} | "
                    f"{s['intermediate_size']} | {'yes' if s['tie_word_embeddings'] else 'no'} | {s['rope_theta']:g} | "
                    f"{json.dumps(s['rope_scaling']) if 'rope_scaling' in s else '-'} |")
    (out_root / "README.md").write_text(README.format(
        torch=torch.__version__, tf=transformers.__version__, np=np.__version__, py=platform.python_version(),
        std=INIT_STD, jit=NORM_JITTER, conv=CONV_STD, arange=A_RANGE, dt=DT_BIAS_STD, rows="\n".join(rows)))
    total = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    print(f"total {total / 1024:.0f} KiB", flush=True)


if __name__ == "__main__":
    sys.exit(main())
