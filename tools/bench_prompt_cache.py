"""Clients taking turns on one `megaqwen serve`: what the prompt cache (--cache-ram / --cache-vram) saves.

N conversations, each opened by a long first turn (a shared system prompt plus a long user message of
its own), then each comes back for a second turn in the same order. Without the cache every second
turn prefills its whole conversation again (another client's turn overwrote the engine's cache);
with it, the conversation is copied back and only the new turn is prefilled. The script starts the
server twice on the same model (cache on, cache off), streams every reply, and reports each second
turn's time to first token and cached tokens, and the medians; `--json FILE` writes them.

  python3 tools/bench_prompt_cache.py --binary build/megaqwen --model /tmp/q06 --device cpu \
      --json bench/results/cpu_prompt_cache_$(date +%F).json

--restart: the server is stopped (SIGTERM) after the first turns and started again before the second
ones, once with a --cache-dir folder (where the stopping server writes the conversations) and once
without: what the folder saves a client coming back after a restart.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

import openai

SYSTEM = ("You are a careful assistant for a city archive. Answer with dates and sources where you can, "
          "and say so when you are unsure. ") * 4
TOPICS = ["the history of the harbour and its trade", "the bridges over the river and who built them",
          "the cathedral, its towers and its fires", "the university and its first colleges",
          "the old markets and the guilds that ran them", "the railway station and the lines it served"]


def start_server(binary, model, device, ctx, cache_mib, cache_dir=None):
    command = [binary, "serve", "--model", model, "--device", device, "--ctx", str(ctx), "--port", "0",
               "--cache-ram", str(cache_mib), "--cache-vram", str(cache_mib)]
    if cache_dir:
        command += ["--cache-dir", cache_dir]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in proc.stdout:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise RuntimeError("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, f"http://127.0.0.1:{port}"


def ask(client, model, messages, max_tokens):
    """Streams one reply; returns (text, seconds to the first token, usage)."""
    started = time.monotonic()
    first = None
    text = ""
    usage = None
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta and (delta.content or getattr(delta, "reasoning_content", None)):
            if first is None:
                first = time.monotonic() - started
            text += delta.content or ""
    return text, first if first is not None else time.monotonic() - started, usage


def run(binary, model, device, ctx, cache_mib, conversations, words, max_tokens, restart=False, cache_dir=None):
    proc, url = start_server(binary, model, device, ctx, cache_mib, cache_dir)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=3600, max_retries=0)
        model_id = client.models.list().data[0].id
        histories, firsts, seconds = [], [], []
        restart_seconds = None
        for i in range(conversations):
            topic = TOPICS[i % len(TOPICS)]
            user = f"Tell me about {topic}. " + " ".join(f"Detail {k} of {topic}." for k in range(words))
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
            text, ttft, usage = ask(client, model_id, messages, max_tokens)
            firsts.append({"ttft_s": ttft, "prompt_tokens": usage.prompt_tokens,
                           "cached_tokens": usage.prompt_tokens_details.cached_tokens})
            histories.append(messages + [{"role": "assistant", "content": text}])
        if restart:
            started = time.monotonic()
            proc.terminate()
            proc.wait(600)
            restart_seconds = time.monotonic() - started  # the stop, writing the folder
            proc, url = start_server(binary, model, device, ctx, cache_mib, cache_dir)
            client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=3600, max_retries=0)
        for messages in histories:
            messages = messages + [{"role": "user", "content": "And what happened after that?"}]
            _, ttft, usage = ask(client, model_id, messages, max_tokens)
            seconds.append({"ttft_s": ttft, "prompt_tokens": usage.prompt_tokens,
                            "cached_tokens": usage.prompt_tokens_details.cached_tokens})
        metrics = urlopen_text(url + "/metrics")
        return {"cache_ram_mib": cache_mib, "cache_dir": cache_dir, "restart": restart,
                "stop_seconds": restart_seconds, "first_turns": firsts, "second_turns": seconds,
                "second_turn_ttft_median_s": statistics.median(s["ttft_s"] for s in seconds),
                "prompt_cache_metrics": {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                                         if line.startswith("megaqwen_prompt_cache_")}}
    finally:
        proc.terminate()
        proc.wait(30)


def urlopen_text(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/megaqwen")
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--conversations", type=int, default=3)
    ap.add_argument("--words", type=int, default=40, help="detail sentences in each first turn (its length)")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--restart", action="store_true", help="restart the server between the turns")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.restart:
        with tempfile.TemporaryDirectory() as folder:
            runs = [run(a.binary, a.model, a.device, a.ctx, 4096, a.conversations, a.words, a.max_tokens, True, d)
                    for d in (folder, None)]
    else:
        runs = [run(a.binary, a.model, a.device, a.ctx, mib, a.conversations, a.words, a.max_tokens)
                for mib in (4096, 0)]
    print("| prompt cache MiB | folder | turn | prompt tokens | cached tokens | time to first token (s) |")
    print("|---|---|---|---:|---:|---:|")
    for r in runs:
        for i, s in enumerate(r["second_turns"]):
            print(f"| {r['cache_ram_mib']} | {'yes' if r['cache_dir'] else 'no'} | conversation {i + 1}, second turn | "
                  f"{s['prompt_tokens']} | {s['cached_tokens']} | {s['ttft_s']:.3f} |")
    what = "the folder" if a.restart else "the cache"
    print(f"median second-turn TTFT: {runs[0]['second_turn_ttft_median_s']:.3f} s with {what}, "
          f"{runs[1]['second_turn_ttft_median_s']:.3f} s without")
    if a.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(a.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "commit": commit, "machine": platform.node(),
                       "cpu_count": os.cpu_count(), "model": a.model, "device": a.device, "runs": runs,
                       "command": "python3 tools/bench_prompt_cache.py " + " ".join(
                           f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None)},
                      f, indent=1)


if __name__ == "__main__":
    main()
