#!/usr/bin/env python3
"""Compares megaqwen's CUDA engine with Hugging Face transformers on a full-size Qwen3 or Qwen3.5 model.

The model is a folder (--model: e.g. the synthetic qwen3-0.6b or qwen3.5-0.8b that `megaqwen synth`
writes, which are Hugging Face layouts; a Qwen3.5 wrapper folder, model_type qwen3_5, loads as
Qwen3_5ForConditionalGeneration, whose vision tower a text prompt never touches) or, with --random-hf, a Qwen3-0.6B-shaped Qwen3ForCausalLM that transformers
initializes randomly and saves (bf16 safetensors) to --work. Then:

  megaqwen logits --model DIR --device cuda --ids "..." --out FILE     (all positions, float32)
  transformers, same weights, in fp32 (TF32 off) and in bf16, same ids   (one forward each)

and per position: KL(p_ref || p_megaqwen) of the softmaxes, top-1 agreement, max |logit difference|
(absolute, and relative to max |logit| of the reference).

Verdict (exit status 1 when it fails), against the fp32 reference, which computes from exactly the
stored bf16 weights (upcast) like megaqwen does:
  - top-1 agreement >= 0.98: megaqwen keeps fp32 activations and a bf16 KV cache; on random weights
    near-ties between the two largest logits are common (gaps ~0.1), so a few flips from cache rounding
    are expected, and a real bug (wrong RoPE pairing, mask, kv head) drops agreement far below this;
  - mean KL <= 1e-3 and max KL <= 2e-2 nats: cache rounding (2^-9 relative per element) moves logits by
    ~1e-3 relative, KL ~ var(delta)/2 ~ 1e-5; a structural bug gives KL of order 0.1-1;
  - max relative logit error <= 2e-2 (the bound the C++ GPU tests use, same reasons).
The bf16 transformers run is reported for scale, not judged: it rounds every activation to bf16, so its
distance to fp32 is the error budget a bf16 engine normally has; megaqwen should be closer to fp32.

Usage: python3 tools/verify_hf.py --binary build-gpu/bin/megaqwen --model DIR [--positions 256] [--json F]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

THRESHOLDS = {"top1_min": 0.98, "kl_mean_max": 1e-3, "kl_max_max": 2e-2, "rel_err_max": 2e-2}


def build_random_hf(work):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, intermediate_size=3072, rope_theta=1e6,
                      tie_word_embeddings=True, max_position_embeddings=40960, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(work, safe_serialization=True)
    cfg_path = os.path.join(work, "config.json")
    c = json.load(open(cfg_path))
    c["rope_theta"] = 1e6  # transformers 5 writes it only inside rope_parameters
    json.dump(c, open(cfg_path, "w"), indent=2)
    return work


def hf_model_class(model_dir):
    import transformers
    with open(os.path.join(model_dir, "config.json")) as f:
        model_type = json.load(f).get("model_type")
    if model_type == "qwen3_5":  # the published Qwen3.5 layout: language model under a multimodal wrapper
        return transformers.Qwen3_5ForConditionalGeneration
    return transformers.AutoModelForCausalLM


def hf_logits(model_dir, ids, dtype):
    cls = hf_model_class(model_dir)
    model = cls.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").cuda().eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], device="cuda"), use_cache=False).logits[0].float()
    del model
    torch.cuda.empty_cache()
    return out


def compare(ours, ref):
    """ours, ref: [positions, vocab] float32 tensors on the GPU."""
    lp_ref = torch.log_softmax(ref.double(), -1)
    lp_ours = torch.log_softmax(ours.double(), -1)
    kl = (lp_ref.exp() * (lp_ref - lp_ours)).sum(-1)
    top1 = (ours.argmax(-1) == ref.argmax(-1)).double()
    abs_err = (ours - ref).abs().amax(-1)
    rel_err = abs_err / ref.abs().amax(-1)
    return {"positions": int(ref.shape[0]), "top1_agreement": float(top1.mean()), "kl_mean": float(kl.mean()),
            "kl_max": float(kl.max()), "max_abs_error": float(abs_err.max()), "max_rel_error": float(rel_err.max()),
            "worst_position": int(rel_err.argmax())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="the megaqwen executable (or a wrapper setting LD_LIBRARY_PATH)")
    ap.add_argument("--model", help="a Hugging Face layout Qwen3 or Qwen3.5 folder")
    ap.add_argument("--random-hf", action="store_true", help="build a random Qwen3-0.6B with transformers instead")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("verify_hf.py: torch sees no GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    work = args.work or tempfile.mkdtemp(prefix="mq-verify-")
    model_dir = args.model
    if args.random_hf or not model_dir:
        model_dir = build_random_hf(os.path.join(work, "random-qwen3-0.6b"))
    rng = np.random.default_rng(args.seed)
    ids = [int(x) for x in rng.integers(0, 151000, size=args.positions)]

    t0 = time.time()
    logits_file = os.path.join(work, "megaqwen-logits.f32")
    cmd = [args.binary, "logits", "--model", model_dir, "--device", "cuda", "-k", "1", "--ids", " ".join(map(str, ids)),
           "--out", logits_file]
    run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"verify_hf.py: megaqwen logits failed ({run.returncode}): {run.stderr.strip()}")
    ours = torch.from_numpy(np.fromfile(logits_file, dtype=np.float32).reshape(len(ids), -1)).cuda()
    t_ours = time.time() - t0

    results = {"model": model_dir, "positions": len(ids), "thresholds": THRESHOLDS,
               "torch": torch.__version__, "megaqwen_seconds": t_ours}
    ref32 = hf_logits(model_dir, ids, torch.float32)
    ref16 = hf_logits(model_dir, ids, torch.bfloat16)
    results["megaqwen_vs_hf_fp32"] = compare(ours, ref32)
    results["hf_bf16_vs_hf_fp32"] = compare(ref16, ref32)
    results["megaqwen_vs_hf_bf16"] = compare(ours, ref16)

    m = results["megaqwen_vs_hf_fp32"]
    failures = []
    if m["top1_agreement"] < THRESHOLDS["top1_min"]: failures.append(f"top-1 agreement {m['top1_agreement']:.4f}")
    if m["kl_mean"] > THRESHOLDS["kl_mean_max"]: failures.append(f"mean KL {m['kl_mean']:.3g}")
    if m["kl_max"] > THRESHOLDS["kl_max_max"]: failures.append(f"max KL {m['kl_max']:.3g}")
    if m["max_rel_error"] > THRESHOLDS["rel_err_max"]: failures.append(f"max relative error {m['max_rel_error']:.3g}")
    results["verdict"] = "PASS" if not failures else "FAIL: " + ", ".join(failures)

    print("| comparison | top-1 | mean KL | max KL | max abs err | max rel err |")
    print("|---|---:|---:|---:|---:|---:|")
    for k in ("megaqwen_vs_hf_fp32", "hf_bf16_vs_hf_fp32", "megaqwen_vs_hf_bf16"):
        r = results[k]
        print(f"| {k} | {r['top1_agreement']:.4f} | {r['kl_mean']:.3g} | {r['kl_max']:.3g} | "
              f"{r['max_abs_error']:.3g} | {r['max_rel_error']:.3g} |")
    print(f"VERDICT (megaqwen vs transformers fp32, {len(ids)} positions): {results['verdict']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
