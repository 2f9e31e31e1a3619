"""Load on `megaqwen serve` through the official `openai` client: C concurrent clients send R
requests each, half of them streamed; about one streamed request in seven hangs up after three chunks.
Every request that completes is checked for a well-formed, complete reply; the figures (requests/s,
latency and time-to-first-token percentiles, RSS) are returned, and written as JSON when run as a
script:

  python3 tests/server/load_client.py --binary build/megaqwen --shared ../shared \
      --out bench/results/server_load_$(date +%F).json
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import threading
import time

import openai

MODEL = "tiny"
PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "Explain recursion briefly.",
           "List three prime numbers.", "Say hello in Spanish."]


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def one_request(client, client_index, i, max_tokens, outcome):
    """Runs request i of a client; appends a record to `outcome`, or raises on a malformed reply."""
    stream = i % 2 == 1
    hang_up = stream and (client_index * 10 + i) % 7 == 0
    messages = [{"role": "user", "content": PROMPTS[(client_index + i) % len(PROMPTS)]}]
    started = time.monotonic()
    if not stream:
        r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens)
        c = r.choices[0]
        assert c.finish_reason in ("stop", "length") and isinstance(c.message.content, str), r
        assert 1 <= r.usage.completion_tokens <= max_tokens, r.usage
        assert c.finish_reason != "length" or r.usage.completion_tokens == max_tokens, r
        outcome.append({"kind": "plain", "latency": time.monotonic() - started, "ttft": None,
                        "tokens": r.usage.completion_tokens})
        return
    # A hang-up asks for many tokens so the server is still generating when the client leaves.
    s = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=400 if hang_up else max_tokens,
                                       stream=True, stream_options={"include_usage": True})
    ttft, chunks, finish, usage, role = None, 0, None, None, None
    for chunk in s:
        chunks += 1
        if chunk.usage:
            usage = chunk.usage
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        role = role or d.role
        if ttft is None and (d.content or getattr(d, "reasoning_content", None)):
            ttft = time.monotonic() - started
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if hang_up and chunks >= 3:
            s.close()
            outcome.append({"kind": "hang_up", "latency": time.monotonic() - started, "ttft": ttft, "tokens": 0})
            return
    assert role == "assistant", "no role chunk"
    assert finish in ("stop", "length"), finish
    assert usage is not None and 1 <= usage.completion_tokens <= max_tokens, usage
    outcome.append({"kind": "stream", "latency": time.monotonic() - started, "ttft": ttft,
                    "tokens": usage.completion_tokens})


def run_round(url, clients=32, requests_per_client=10, max_tokens=8, timeout=300):
    """One round of load; returns its figures. Raises if any request failed or went missing."""
    records, errors = [], []
    lock = threading.Lock()

    def client_thread(index):
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=timeout)
        for i in range(requests_per_client):
            mine = []
            try:
                one_request(client, index, i, max_tokens, mine)
            except Exception as e:  # recorded; the round fails below
                with lock:
                    errors.append(f"client {index} request {i}: {type(e).__name__}: {e}")
            with lock:
                records.extend(mine)
        client.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client_thread, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    wall = time.monotonic() - started
    if any(t.is_alive() for t in threads):
        errors.append("some clients did not finish in time")
    if errors:
        raise AssertionError(f"{len(errors)} failed requests:\n" + "\n".join(errors[:20]))
    total = clients * requests_per_client
    assert len(records) == total, f"{total - len(records)} requests lost"
    done = [r for r in records if r["kind"] != "hang_up"]
    latencies = [r["latency"] for r in done]
    ttfts = [r["ttft"] for r in records if r["ttft"] is not None]
    return {
        "requests": total,
        "completed": len(done),
        "hung_up": total - len(done),
        "streamed": sum(r["kind"] == "stream" for r in records),
        "wall_seconds": round(wall, 3),
        "requests_per_second": round(total / wall, 2),
        "generated_tokens": sum(r["tokens"] for r in done),
        "latency_p50_s": round(percentile(latencies, 50), 4),
        "latency_p95_s": round(percentile(latencies, 95), 4),
        "latency_mean_s": round(statistics.mean(latencies), 4),
        "ttft_p50_s": round(percentile(ttfts, 50), 4),
        "ttft_p95_s": round(percentile(ttfts, 95), 4),
    }


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main():
    from server_harness import ServerProcess, metric, synth_tiny_model
    import urllib.request

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--shared", required=True, help="the shared/ folder (tokenizer of the tiny model)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=10, help="per client")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = synth_tiny_model(tmp, a.binary, a.shared)
        server = ServerProcess(model, "--ctx", "1024", binary=a.binary)
        try:
            rounds, rss = [], [server.status_kib("VmRSS")]
            for _ in range(a.rounds):
                rounds.append(run_round(server.url, a.clients, a.requests, a.max_tokens))
                rss.append(server.status_kib("VmRSS"))
            peak = server.status_kib("VmHWM")
            metrics_text = urllib.request.urlopen(server.url + "/metrics").read().decode()
        finally:
            status = server.stop()
    result = {
        "date": datetime.date.today().isoformat(),
        "command": "python3 tests/server/load_client.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if k not in ("binary", "shared", "out")),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release()},
        "model": "synth tiny (random weights, Qwen3 tokenizer), CPU engine",
        "clients": a.clients, "requests_per_client": a.requests, "max_tokens": a.max_tokens,
        "rounds": rounds,
        "rss_kib_start_and_after_each_round": rss,
        "peak_rss_kib": peak,
        "server_decode_tokens_per_second_last": metric(metrics_text, "megaqwen_decode_tokens_per_second"),
        "server_cancelled_generations": metric(metrics_text, "megaqwen_generations_cancelled_total"),
        "clean_shutdown": status == 0,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
