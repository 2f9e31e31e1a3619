"""Forced tool calls from a Qwen3.5-shaped model (the tiny hybrid, real Qwen3.5 tokenizer and
template), whose calls are XML: tool_choice "required" or a named function always comes back as a
parsed call of one of the tools, its arguments valid under the tool's parameters, plain and streamed."""
import json
import subprocess
import urllib.request
from pathlib import Path

import openai
import pytest

from server_harness import BINARY, SHARED_DIR, ServerProcess

MODEL = "hybrid"
USER = [{"role": "user", "content": "Wake me up, then tell me the weather in Paris."}]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["city"],
        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "set_alarm", "parameters": {
        "type": "object", "required": ["hour", "loud"], "additionalProperties": False,
        "properties": {"hour": {"type": "integer"}, "loud": {"type": "boolean"},
                       "label": {"type": "string", "maxLength": 5},
                       "days": {"type": "array", "items": {"enum": ["mon", "tue"]}, "maxItems": 2}}}}},
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / MODEL
    subprocess.run([BINARY, "synth", "--preset", "tiny-hybrid", "--out", str(out),
                    "--tokenizer", str(Path(SHARED_DIR) / "models" / "qwen3.5-0.8b")],
                   check=True, timeout=120, capture_output=True)
    server = ServerProcess(out, "--ctx", "1024")
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=120, max_retries=0)
    assert server.stop() == 0, "".join(server.log)


def check_arguments(name, args):
    if name == "get_weather":
        assert set(args) <= {"city", "unit", "days"} and isinstance(args["city"], str)
        assert 1 <= len(args["city"]) <= 12
        assert args.get("unit", "celsius") in ("celsius", "fahrenheit")
        assert isinstance(args.get("days", 0), int)
    else:
        assert name == "set_alarm"
        assert set(args) <= {"hour", "loud", "label", "days"}
        assert isinstance(args["hour"], int) and isinstance(args["loud"], bool)
        assert len(args.get("label", "")) <= 5
        assert set(args.get("days", [])) <= {"mon", "tue"} and len(args.get("days", [])) <= 2


@pytest.mark.parametrize("seed", range(6))
def test_required_call_is_one_of_the_tools_with_valid_arguments(client, seed):
    r = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice="required",
                                       max_tokens=400, temperature=1.0, seed=seed)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c.message.content
    assert len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0].function
    check_arguments(call.name, json.loads(call.arguments))


@pytest.mark.parametrize("name", ["get_weather", "set_alarm"])
def test_named_call_is_that_tool_plain_and_streamed(client, name):
    choice = {"type": "function", "function": {"name": name}}
    r = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice=choice,
                                       max_tokens=400, temperature=1.0, seed=11)
    call = r.choices[0].message.tool_calls[0].function
    assert r.choices[0].finish_reason == "tool_calls" and call.name == name
    check_arguments(name, json.loads(call.arguments))

    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice=choice,
                                                 max_tokens=400, temperature=1.0, seed=11, stream=True))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    deltas = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name == name
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert json.loads(arguments) == json.loads(call.arguments), "the same seed, the same call"


def test_tools_the_xml_cannot_carry_are_left_to_the_model(client):
    # A key holding '>' cannot be written in <parameter=...>: the call is not constrained, but the
    # request is served (a call started by the server, whatever the model makes of it).
    tools = [{"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"a>b": {"type": "integer"}}}}}]
    r = client.chat.completions.create(model=MODEL, messages=USER, tools=tools, tool_choice="required",
                                       max_tokens=8, temperature=1.0, seed=1)
    c = r.choices[0]
    assert c.finish_reason in ("length", "stop", "tool_calls")
    if not c.message.tool_calls:
        assert c.message.content.startswith("<tool_call>\n<function=")


def test_tokenize_counts_the_chat_prompt_with_tools_and_call_history(client):
    # Qwen3.5's template takes a call's arguments as an object; clients send OpenAI's JSON string.
    history = USER + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    base = str(client.base_url).removesuffix("/v1/")
    for extra in [{}, {"tool_choice": "required"}, {"tool_choice": {"type": "function", "function": {"name": "set_alarm"}}}]:
        body = json.dumps({"model": MODEL, "messages": history, "tools": TOOLS, **extra}).encode()
        request = urllib.request.Request(base + "/tokenize", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            counted = json.load(resp)
        r = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=1, **extra)
        assert counted["count"] == r.usage.prompt_tokens, extra
        assert counted["max_model_len"] == 1024


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_false_ends_with_the_first_call(client, stream):
    # Generation ends on the first call's closing token (the engine-level end is tested in
    # generator_test.cpp); the reply carries that one call, as with parallel calls allowed.
    kwargs = dict(model=MODEL, messages=USER, tools=TOOLS, tool_choice="required", max_tokens=400, temperature=1.0,
                  seed=5)
    single = client.chat.completions.create(parallel_tool_calls=False, stream=stream, **kwargs)
    parallel = client.chat.completions.create(parallel_tool_calls=True, stream=stream, **kwargs)
    if stream:
        single, parallel = list(single), list(parallel)
        calls = [tc for ch in single for tc in (ch.choices[0].delta.tool_calls or [])]
        assert calls and all(tc.index == 0 for tc in calls)
        assert single[-1].choices[0].finish_reason == "tool_calls"
    else:
        assert len(single.choices[0].message.tool_calls) == 1
        assert single.choices[0].finish_reason == "tool_calls"
        assert single.choices[0].message.tool_calls[0].function == parallel.choices[0].message.tool_calls[0].function
        assert single.usage.completion_tokens <= parallel.usage.completion_tokens
