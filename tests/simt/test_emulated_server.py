"""`megaqwen serve --device cuda` on the emulated device (megaqwen_emulated: the real binary linked
with the emulated CUDA engine), next to a CPU server on the same tiny model with the real Qwen3
tokenizer. Plain HTTP (no client library): a greedy chat reply equals the CPU server's, token for
token; OpenAI-style sampling (temperature with top_p only: the megakernel's nucleus draw) streams
and is reproducible for a seed; a top_k wider than the kernel's selection is served by the
per-operator path; a request over the context is refused with the OpenAI error body, and the device
server keeps serving; chat logprobs scored in the kernel match the CPU server's."""
import http.client
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_harness import ServerProcess, synth_tiny_model  # noqa: E402

EMULATED = os.environ.get("MEGAQWEN_EMULATED_BINARY", "")
CPU = os.environ.get("MEGAQWEN_BINARY", "")
SHARED = os.environ.get("MEGAQWEN_SHARED_DIR", "")
USER = [{"role": "user", "content": "Name three colours."}]


def pytest_configure_check():
    if not (EMULATED and CPU and SHARED):
        pytest.exit("set MEGAQWEN_EMULATED_BINARY, MEGAQWEN_BINARY and MEGAQWEN_SHARED_DIR (ctest does)", 2)


pytest_configure_check()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return synth_tiny_model(tmp_path_factory.mktemp("model"), binary=CPU, shared_dir=SHARED)


@pytest.fixture(scope="module")
def servers(model):
    cpu = ServerProcess(model, "--device", "cpu", "--ctx", "256", "-t", "1", binary=CPU)
    gpu = ServerProcess(model, "--device", "cuda", "--ctx", "256", "-t", "1", binary=EMULATED, start_timeout=300)
    yield cpu, gpu
    assert gpu.stop(timeout=120) == 0, "".join(gpu.log)
    assert cpu.stop() == 0, "".join(cpu.log)


def post(server, body, path="/v1/chat/completions"):
    """(status, parsed JSON) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data)


def stream(server, body):
    """The content pieces and the finish reason of a streamed chat completion."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    pieces, finish, done = [], None, False
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        choice = json.loads(line[6:])["choices"][0]
        pieces.append(choice.get("delta", {}).get("content") or "")
        finish = choice.get("finish_reason") or finish
    conn.close()
    assert done, "the stream ended without [DONE]"
    return pieces, finish


def test_the_device_server_says_which_kernel_decodes(servers):
    _, gpu = servers
    banner = "".join(line for line in gpu.log if "listening on" in line)
    assert "decode: megakernel" in banner, "".join(gpu.log)


def test_greedy_reply_equals_the_cpu_server(servers):
    cpu, gpu = servers
    body = {"model": "tiny", "messages": USER, "max_tokens": 6, "temperature": 0}
    s_cpu, r_cpu = post(cpu, body)
    s_gpu, r_gpu = post(gpu, body)
    assert (s_cpu, s_gpu) == (200, 200), (r_cpu, r_gpu)
    assert r_gpu["choices"][0]["message"] == r_cpu["choices"][0]["message"]
    assert r_gpu["usage"] == r_cpu["usage"]


def test_top_p_sampling_streams_and_repeats_for_a_seed(servers):
    _, gpu = servers
    body = {"model": "tiny", "messages": USER, "max_tokens": 5, "temperature": 0.8, "top_p": 0.9, "top_k": 0,
            "seed": 7}
    pieces, finish = stream(gpu, body)
    assert finish in ("length", "stop")
    assert len(pieces) >= 2, pieces  # content arrives in pieces, not at the end
    again, _ = stream(gpu, body)
    assert "".join(again) == "".join(pieces)


def test_a_top_k_wider_than_the_kernel_is_served(servers):
    _, gpu = servers
    status, reply = post(gpu, {"model": "tiny", "messages": USER, "max_tokens": 3, "temperature": 0.7,
                               "top_k": 100, "seed": 3})
    assert status == 200, reply
    assert reply["usage"]["completion_tokens"] >= 1


def test_a_prompt_over_the_context_is_refused_and_the_server_goes_on(servers):
    _, gpu = servers
    status, reply = post(gpu, {"model": "tiny", "messages": [{"role": "user", "content": "word " * 400}],
                               "max_tokens": 2})
    assert status == 400, reply
    assert reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["code"] == "context_length_exceeded"
    status, _ = post(gpu, {"model": "tiny", "messages": USER, "max_tokens": 1, "temperature": 0})
    assert status == 200


def test_logprobs_are_scored_on_the_kernel_as_the_cpu_scores_them(servers):
    """Chat logprobs on the device server come from the megakernel's LM head (the request keeps its
    kernel path); they equal the CPU server's within the two engines' logit tolerance: the GPU tests
    bound logits at 2e-2 of a row's largest magnitude (bf16 KV cache), log_softmax moves by at most
    twice that, and this model's logits stay below ~12.5 in magnitude (`megaqwen logits`): 0.5."""
    cpu, gpu = servers
    body = {"model": "tiny", "messages": USER, "max_tokens": 6, "temperature": 0, "logprobs": True,
            "top_logprobs": 3}
    s_cpu, r_cpu = post(cpu, body)
    s_gpu, r_gpu = post(gpu, body)
    assert (s_cpu, s_gpu) == (200, 200), (r_cpu, r_gpu)
    want = r_cpu["choices"][0]["logprobs"]["content"]
    got = r_gpu["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in got] == [e["token"] for e in want]
    for g, w in zip(got, want):
        assert abs(g["logprob"] - w["logprob"]) <= 0.5, (g, w)
        assert len(g["top_logprobs"]) == 3
        assert g["top_logprobs"][0]["token"] == g["token"]  # greedy: the most likely token
        for a, b in zip(g["top_logprobs"], w["top_logprobs"]):
            assert abs(a["logprob"] - b["logprob"]) <= 0.5, (a, b)


def test_a_json_schema_reply_is_whole_and_valid_on_the_device(servers):
    """response_format on the device server: its mask needs the logits on the host, so the request
    leaves the kernel for the per-operator path (decode with logits copied back); every reply that
    ends with "stop" parses and validates."""
    _, gpu = servers
    schema = {"type": "object", "additionalProperties": False, "required": ["ok", "n"],
              "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}}
    body = {"model": "tiny", "messages": USER, "max_tokens": 200, "temperature": 1.0, "seed": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
            "chat_template_kwargs": {"enable_thinking": False}}
    status, reply = post(gpu, body)
    assert status == 200, reply
    assert reply["choices"][0]["finish_reason"] == "stop", reply
    value = json.loads(reply["choices"][0]["message"]["content"])
    assert list(value) == ["ok", "n"] and isinstance(value["ok"], bool) and isinstance(value["n"], int)
    # The device server goes on decoding on the kernel afterwards.
    status, _ = post(gpu, {"model": "tiny", "messages": USER, "max_tokens": 2, "temperature": 0})
    assert status == 200
