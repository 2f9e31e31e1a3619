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

--device cpu holds megaqwen's CPU engine to the same references on the processor (its fp32 cache
lands far inside these bounds), which is also how this script is checked without a GPU.

Usage: python3 tools/verify_hf.py --binary build-gpu/bin/megaqwen --model DIR [--positions 256,2048] [--json F]
       [--device cuda|cpu]
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

DEVICE = "cuda"  # --device
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
    model = cls.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(DEVICE).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], device=DEVICE), use_cache=False).logits[0].float()
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return out


def compare(ours, ref):
    """ours, ref: [positions, vocab] float32 tensors on DEVICE."""
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
    ap.add_argument("--positions", default="256", help="sequence lengths, e.g. 256,2048 (each from position 0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where both run (megaqwen's --device)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("verify_hf.py: torch sees no GPU (--device cpu runs both on the processor)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    work = args.work or tempfile.mkdtemp(prefix="mq-verify-")
    model_dir = args.model
    if args.random_hf or not model_dir:
        model_dir = build_random_hf(os.path.join(work, "random-qwen3-0.6b"))
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    vocab = config.get("text_config", config).get("vocab_size", 151936)
    rng = np.random.default_rng(args.seed)
    results = {"model": model_dir, "device": DEVICE, "thresholds": THRESHOLDS, "torch": torch.__version__, "runs": []}
    verdicts = []
    # One sequence per length, each from position 0: a short one, and a long one where the cache's
    # rounding and RoPE at large angles have had time to matter.
    for n in ints(args.positions):
        run = verify_sequence(args.binary, model_dir, work,
                              [int(x) for x in rng.integers(0, min(vocab, 151000), size=n)])
        results["runs"].append(run)
        verdicts.append(run["verdict"])
        print(f"\n{n} positions (megaqwen {run['megaqwen_seconds']:.1f} s):")
        print("| comparison | top-1 | mean KL | max KL | max abs err | max rel err |")
        print("|---|---:|---:|---:|---:|---:|")
        for k in ("megaqwen_vs_hf_fp32", "hf_bf16_vs_hf_fp32", "megaqwen_vs_hf_bf16"):
            r = run[k]
            print(f"| {k} | {r['top1_agreement']:.4f} | {r['kl_mean']:.3g} | {r['kl_max']:.3g} | "
                  f"{r['max_abs_error']:.3g} | {r['max_rel_error']:.3g} |")
        print(f"VERDICT (megaqwen on {DEVICE} vs transformers fp32, {n} positions): {run['verdict']}")
    results["verdict"] = "PASS" if all(v == "PASS" for v in verdicts) else "FAIL"
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if results["verdict"] == "PASS" else 1


def ints(text):
    values = [int(x) for x in str(text).split(",") if x.strip()]
    if not values or min(values) < 1:
        sys.exit(f"verify_hf.py: --positions wants positive counts, got {text!r}")
    return values


def verify_sequence(binary, model_dir, work, ids):
    """megaqwen's logits for ids against transformers' fp32 and bf16 ones, with the verdict."""
    t0 = time.time()
    logits_file = os.path.join(work, "megaqwen-logits.f32")
    cmd = [binary, "logits", "--model", model_dir, "--device", DEVICE, "-k", "1", "--ids", " ".join(map(str, ids)),
           "--out", logits_file]
    run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"verify_hf.py: megaqwen logits failed ({run.returncode}): {run.stderr.strip()}")
    ours = torch.from_numpy(np.fromfile(logits_file, dtype=np.float32).reshape(len(ids), -1)).to(DEVICE)
    os.remove(logits_file)
    result = {"positions": len(ids), "megaqwen_seconds": time.time() - t0}
    ref32 = hf_logits(model_dir, ids, torch.float32)
    result["megaqwen_vs_hf_fp32"] = compare(ours, ref32)
    ref16 = hf_logits(model_dir, ids, torch.bfloat16)
    result["hf_bf16_vs_hf_fp32"] = compare(ref16, ref32)
    result["megaqwen_vs_hf_bf16"] = compare(ours, ref16)

    m = result["megaqwen_vs_hf_fp32"]
    failures = []
    if m["top1_agreement"] < THRESHOLDS["top1_min"]: failures.append(f"top-1 agreement {m['top1_agreement']:.4f}")
    if m["kl_mean"] > THRESHOLDS["kl_mean_max"]: failures.append(f"mean KL {m['kl_mean']:.3g}")
    if m["kl_max"] > THRESHOLDS["kl_max_max"]: failures.append(f"max KL {m['kl_max']:.3g}")
    if m["max_rel_error"] > THRESHOLDS["rel_err_max"]: failures.append(f"max relative error {m['max_rel_error']:.3g}")
    result["verdict"] = "PASS" if not failures else "FAIL: " + ", ".join(failures)
    return result

if __name__ == "__main__":
    sys.exit(main())
