#!/usr/bin/env python3
"""Benchmarks llama.cpp on the same model and the same tests as `megaqwen bench`, and prints one
markdown table with both engines and the ratio; optionally scores a text with both perplexity tools.

llama.cpp is built by scripts/build-llamacpp.sh (for this CPU, or --cuda for the H200); the Hugging
Face folder is converted once to a bf16 GGUF with llama.cpp's own convert_hf_to_gguf.py (the weights
stay bit-identical: both engines read the same bf16 values).

Tests, named as megaqwen's benchmark names them, each one llama-bench run:
  ppN      llama-bench -p N -n 0: prefill of N tokens (llama.cpp's default batch sizes);
  tgN@dD   llama-bench -p 0 -n N -d D: N decode steps after D cached positions, so the timed steps
           are at positions D .. D+N-1 as in megaqwen's tgN@dD. llama-bench fills the depth by a real
           (untimed) prefill, megaqwen with noise; decode costs the same. llama-bench does not sample
           (it feeds a fixed token), megaqwen's steps include the greedy argmax on the device.
llama-bench's own warm-up run precedes each test; the median of its --repeats samples is reported
(llama-bench itself prints the mean). Flash attention is llama.cpp's default (auto: on where the
backend has it), the whole model offloaded with --device cuda (-ngl 99).

--megaqwen BIN runs `megaqwen bench` with the same tests just before llama.cpp (back to back, same
machine state); --megaqwen-json FILE reads an earlier run instead.

--perplexity-text FILE runs llama-perplexity and `megaqwen perplexity` on that text with the same
window (-c / -w) and number of windows: both score the second half of each window from an empty
cache, so on the same weights and tokens their PPL should agree to bf16 arithmetic (llama.cpp
computes the matrix products in bf16, megaqwen's CPU engine in fp32). A relative difference above
--ppl-tolerance (default 1%) is reported as a disagreement and makes the exit status 1.

Usage: python3 tools/bench_llamacpp.py --model DIR --llama-bin DIR --llama-src DIR
         [--device cpu|cuda] [--prompt-len 64,256] [--depth 1,1024] [--tokens 16] [--repeats 3]
         [--megaqwen build/megaqwen | --megaqwen-json FILE] [--gguf FILE] [--json FILE]
         [--perplexity-text FILE --ppl-window 512 --ppl-windows 4]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time


def ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def run(cmd, env=None, timeout=None):
    """Runs cmd, returns (rc, stdout, stderr); a missing program or a timeout is an rc, not a crash."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError as e:
        return 127, "", str(e)
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", f"timed out after {timeout} s"


def converter_env(llama_src):
    # gguf-py/ in a source tree; gguf/ beside the script in build-llamacpp.sh's GPU bundle.
    env = dict(os.environ)
    paths = [os.path.join(llama_src, "gguf-py"), llama_src]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["NO_LOCAL_GGUF"] = ""
    return env


def tensor_names(model):
    """Every tensor name in a folder's safetensors files (their JSON headers only)."""
    names = []
    for f in sorted(os.listdir(model)):
        if f.endswith(".safetensors"):
            with open(os.path.join(model, f), "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                names += [k for k in json.loads(fh.read(size)) if k != "__metadata__"]
    return names


def lacks_declared_mtp(model):
    """Qwen3.5's config declares a multi-token-prediction layer that megaqwen does not use (nor
    synthesize); llama.cpp's converter then expects its `mtp.*` tensors unless told --no-mtp."""
    cfg = load_json(os.path.join(model, "config.json"))
    n = cfg.get("text_config", cfg).get("mtp_num_hidden_layers", 0)
    return bool(n) and not any(k.startswith(("mtp.", "model.mtp.")) for k in tensor_names(model))


def convert(model, gguf, llama_src):
    if os.path.exists(gguf):
        return
    script = os.path.join(llama_src, "convert_hf_to_gguf.py")
    if not os.path.exists(script):
        sys.exit(f"bench_llamacpp.py: no convert_hf_to_gguf.py in {llama_src}")
    print(f"converting {model} to {gguf} (bf16) with llama.cpp's convert_hf_to_gguf.py", flush=True)
    extra = ["--no-mtp"] if lacks_declared_mtp(model) else []
    rc, out, err = run([sys.executable, script, model, "--outtype", "bf16", "--outfile", gguf + ".part"] + extra,
                       env=converter_env(llama_src))
    if rc != 0:
        sys.exit(f"bench_llamacpp.py: conversion failed (rc {rc}):\n{(out + err)[-3000:]}")
    os.replace(gguf + ".part", gguf)


def test_name(record):
    """megaqwen's name for one llama-bench JSON record."""
    if record.get("n_gen", 0) == 0:
        return f"pp{record['n_prompt']}"
    return f"tg{record['n_gen']}@d{record.get('n_depth', 0)}"


def summarize(record):
    samples = record.get("samples_ts") or [record["avg_ts"]]
    return {"median_tok_s": statistics.median(samples), "min_tok_s": min(samples), "max_tok_s": max(samples),
            "samples_tok_s": samples, "llama_bench_mean_tok_s": record.get("avg_ts")}


def parse_llama_bench(text):
    """llama-bench -o json prints one JSON array; log lines may surround it on some builds."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise ValueError("no JSON array in llama-bench's output")
    return json.loads(text[start:end + 1])


def load_json(path):
    with open(path) as f:
        return json.load(f)


def ours_from_bench_json(path):
    ours = {}
    for r in load_json(path).get("results", []):
        ours[r["test"]] = r["median_tok_s"]
    return ours


def table(names, ours, peer):
    lines = ["| test | megaqwen t/s | llama.cpp t/s | megaqwen / llama.cpp |", "|---|---:|---:|---:|"]
    for name in names:
        a = ours.get(name)
        b = peer.get(name, {}).get("median_tok_s")
        ratio = f"{a / b:.2f}x" if a and b else "-"
        lines.append(f"| {name} | {f'{a:.1f}' if a else '-'} | {f'{b:.1f}' if b else '-'} | {ratio} |")
    return "\n".join(lines)


def perplexity(args, gguf, threads_args, results):
    text, w, n = args.perplexity_text, args.ppl_window, args.ppl_windows
    res = results.setdefault("perplexity", {"text": text, "window": w, "windows": n})
    ppl_bin = os.path.join(args.llama_bin, "llama-perplexity")
    rc, out, err = run([ppl_bin, "-m", gguf, "-f", text, "-c", str(w), "--chunks", str(n)] + threads_args)
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out + err)
    if rc != 0 or not m:
        res["llama_cpp_error"] = f"rc {rc}: {(out + err)[-1500:]}"
        return False
    res["llama_cpp_ppl"], res["llama_cpp_stderr"] = float(m.group(1)), float(m.group(2))
    chunks = re.findall(r"\[(\d+)\]([0-9.]+),", out + err)
    res["llama_cpp_running"] = [float(v) for _, v in chunks]
    if not args.megaqwen:
        return True
    jpath = (args.json or "bench_llamacpp.json") + ".ppl.json"
    rc, out, err = run([args.megaqwen, "perplexity", "--model", args.model, "--device", args.mq_device, "-f", text,
                        "-w", str(w), "--windows", str(n), "--json", jpath])
    if rc != 0:
        res["megaqwen_error"] = f"rc {rc}: {(out + err)[-1500:]}"
        return False
    mine = load_json(jpath)
    os.remove(jpath)
    res["megaqwen_ppl"] = mine["perplexity"]
    res["megaqwen_text_tokens"], res["megaqwen_scored_tokens"] = mine["text_tokens"], mine["scored_tokens"]
    res["megaqwen_device"] = mine["device"]
    rel = abs(res["megaqwen_ppl"] - res["llama_cpp_ppl"]) / res["llama_cpp_ppl"]
    res["relative_difference"] = rel
    res["verdict"] = "agree" if rel <= args.ppl_tolerance else "DISAGREE"
    print(f"PERPLEXITY ({w}-token windows x {n}): megaqwen {res['megaqwen_ppl']:.4f}, llama.cpp "
          f"{res['llama_cpp_ppl']:.4f}, relative difference {rel:.2e}: {res['verdict']}", flush=True)
    return res["verdict"] == "agree"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face folder (megaqwen's model)")
    ap.add_argument("--llama-bin", required=True, help="folder with llama-bench (and llama-perplexity)")
    ap.add_argument("--llama-src", required=True, help="folder with convert_hf_to_gguf.py")
    ap.add_argument("--gguf", default=None, help="the converted model (default: MODEL/../NAME-bf16.gguf)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--prompt-len", default="512")
    ap.add_argument("--depth", default="1,512")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--megaqwen", default=None, help="megaqwen binary: run its bench first, same tests")
    ap.add_argument("--megaqwen-json", default=None, help="or read an earlier `megaqwen bench --json`")
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget-seconds", type=float, default=1e9)
    ap.add_argument("--test-timeout", type=float, default=300)
    ap.add_argument("--perplexity-text", default=None)
    ap.add_argument("--ppl-window", type=int, default=512)
    ap.add_argument("--ppl-windows", type=int, default=4)
    ap.add_argument("--ppl-tolerance", type=float, default=0.01)
    args = ap.parse_args()
    args.mq_device = args.device
    start = time.time()
    model = os.path.abspath(args.model.rstrip("/"))
    gguf = args.gguf or os.path.join(os.path.dirname(model), os.path.basename(model) + "-bf16.gguf")
    convert(model, gguf, args.llama_src)

    prompts, depths, n = ints(args.prompt_len), ints(args.depth), args.tokens
    names = [f"pp{p}" for p in prompts] + [f"tg{n}@d{d}" for d in depths]
    results = {"device": args.device, "model": model, "gguf": gguf, "tokens": n, "repeats": args.repeats,
               "tests": {}, "skipped": []}
    bench = os.path.join(args.llama_bin, "llama-bench")
    dev_args = ["-ngl", "99"] if args.device == "cuda" else ["-ngl", "0", "-t", str(args.threads)]
    threads_args = ["-ngl", "99"] if args.device == "cuda" else ["-t", str(args.threads)]

    ours = {}
    if args.megaqwen:
        jpath = (args.json or "bench_llamacpp.json") + ".megaqwen.json"
        cmd = [args.megaqwen, "bench", "--model", model, "--device", args.device, "--prompt-len",
               ",".join(map(str, prompts)) or "0", "--depth", ",".join(map(str, depths)) or "1", "--tokens", str(n),
               "--repeats", str(args.repeats), "--json", jpath]
        if args.device == "cpu":
            cmd += ["--threads", str(args.threads)]
        if depths:
            cmd += ["--ctx", str(max(depths) + n + 16)]
        print("megaqwen: " + " ".join(cmd), flush=True)
        rc, out, err = run(cmd)
        print(out, flush=True)
        if rc == 0:
            results["megaqwen"] = load_json(jpath)
            ours = ours_from_bench_json(jpath)
            os.remove(jpath)
        else:
            results["megaqwen_error"] = f"rc {rc}: {(out + err)[-1500:]}"
            print(f"megaqwen bench failed (rc {rc}):\n{(out + err)[-1500:]}", flush=True)
    elif args.megaqwen_json:
        ours = ours_from_bench_json(args.megaqwen_json)

    for name in names:
        if time.time() - start > args.budget_seconds:
            results["skipped"].append(name)
            continue
        if name.startswith("pp"):
            spec = ["-p", name[2:], "-n", "0"]
        else:
            d = name.split("@d")[1]
            spec = ["-p", "0", "-n", str(n), "-d", d]
        cmd = [bench, "-m", gguf, "-o", "json", "-r", str(args.repeats)] + dev_args + spec
        rc, out, err = run(cmd, timeout=args.test_timeout)
        try:
            if rc != 0:
                raise RuntimeError(f"rc {rc}")
            records = parse_llama_bench(out)
            rec = records[0]
            if test_name(rec) != name:
                raise RuntimeError(f"llama-bench ran {test_name(rec)}, not {name}")
            results["tests"][name] = summarize(rec)
            for key in ("build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_type", "n_threads",
                        "n_gpu_layers", "flash_attn", "n_batch", "n_ubatch", "type_k", "type_v"):
                results.setdefault("llama_cpp", {})[key] = rec.get(key)
            print(f"llama.cpp {name}: {results['tests'][name]['median_tok_s']:.1f} tok/s", flush=True)
        except (RuntimeError, ValueError, IndexError, KeyError) as e:
            results["tests"][name] = {"error": f"{e}: {(out + err)[-1500:]}"}
            print(f"llama.cpp {name}: error {e}\n{(out + err)[-800:]}", flush=True)

    ok = True
    if args.perplexity_text:
        if not os.path.exists(os.path.join(args.llama_bin, "llama-perplexity")):
            results["perplexity"] = {"skipped": f"no llama-perplexity in {args.llama_bin}"}
        else:
            ok = perplexity(args, gguf, threads_args, results)

    text = table(names, ours, results["tests"])
    results["table_markdown"] = text
    info = results.get("llama_cpp", {})
    print(f"\nllama.cpp build {info.get('build_commit')} ({info.get('backends')}, {info.get('gpu_info') or info.get('cpu_info')}),"
          f" flash_attn {info.get('flash_attn')}, same model as bf16 GGUF\n" + text)
    if results["skipped"]:
        print("skipped (time budget): " + ", ".join(results["skipped"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    errors = [k for k, v in results["tests"].items() if "error" in v] + (["megaqwen"] if "megaqwen_error" in results else [])
    return 0 if ok and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
