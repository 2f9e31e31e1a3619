"""The server through the official `openai` client and raw HTTP: chat (plain, streamed, tools,
thinking switch), completions (text and token ids), seeds, prefix reuse, stop strings, and every
refusal with its status and OpenAI error body."""
import datetime
import http.client
import json
import socket
import threading
import time
import urllib.request

import openai
import pytest

from server_harness import ServerProcess, metric, wait_until

KEY = "test-key"
MODEL = "tiny"
USER = [{"role": "user", "content": "What is the capital of France?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, timeout=60, max_retries=0)


def raw(server, method, path, body=None, headers=None, key=KEY):
    """(status, parsed JSON or text) of one request; body may be bytes, str or a JSON value."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    h = {"Content-Type": "application/json", **(headers or {})}
    if key:
        h["Authorization"] = "Bearer " + key
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    conn.request(method, path, body=body, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data.decode("utf-8", "replace")


def assert_error(status, body, want_status, param=None, code=None):
    assert status == want_status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code


# ---- the happy paths ----

def test_health_models_and_page(server, client):
    assert raw(server, "GET", "/health", key=None) == (200, {"status": "ok"})
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.list().data[0].model_extra["max_model_len"] == 512  # the server's --ctx
    status, page = raw(server, "GET", "/", key=None)
    assert status == 200 and "<title>megaqwen chat</title>" in page


def test_chat_completion(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if choice.finish_reason == "length":
        assert r.usage.completion_tokens == 8


def test_streamed_chat_matches_plain_chat_with_the_same_seed(client):
    args = dict(model=MODEL, messages=USER, max_tokens=12, temperature=0.9, seed=1234)
    plain = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]
    assert text == plain.choices[0].message.content
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == plain.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_seed_reproducibility(client):
    def sample(seed):
        r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=16, temperature=1.0, seed=seed)
        return r.choices[0].message.content
    assert sample(7) == sample(7)
    assert sample(7) != sample(8)  # 16 tokens drawn at temperature 1 from a 151k vocabulary


def test_several_choices_are_seeded_one_after_another(client):
    args = dict(model=MODEL, messages=USER, max_tokens=10, temperature=1.0)
    r = client.chat.completions.create(**args, n=3, seed=40)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    # Choice i samples with seed + i: the same text a single request with that seed gets.
    for i, text in enumerate(texts):
        alone = client.chat.completions.create(**args, seed=40 + i)
        assert alone.choices[0].message.content == text
        assert alone.choices[0].finish_reason == r.choices[i].finish_reason
    assert len(set(texts)) == 3  # 10 tokens at temperature 1 from a 151k vocabulary
    # The prompt counts once; the choices' tokens add up (the later ones find the prompt cached).
    lone = client.chat.completions.create(**args, seed=40)
    assert r.usage.prompt_tokens == lone.usage.prompt_tokens
    singles = [client.chat.completions.create(**args, seed=40 + i).usage.completion_tokens for i in range(3)]
    assert r.usage.completion_tokens == sum(singles)

    # Streamed: the choices come one after another, each with its role chunk and finish reason; the
    # usage chunk and [DONE] once, at the end.
    chunks = list(client.chat.completions.create(**args, n=3, seed=40, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    by_choice = {}
    for c in chunks[:-1]:
        assert len(c.choices) == 1 and c.usage is None
        by_choice.setdefault(c.choices[0].index, []).append(c.choices[0])
    order = [c.choices[0].index for c in chunks[:-1]]
    assert order == sorted(order) and sorted(by_choice) == [0, 1, 2]
    for i, parts in by_choice.items():
        assert parts[0].delta.role == "assistant"
        assert "".join(p.delta.content or "" for p in parts) == texts[i]
        assert [p.finish_reason for p in parts if p.finish_reason] == [r.choices[i].finish_reason]

    # Completions too, with the echo on every choice.
    c = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=1.0, seed=3,
                                  n=2, echo=True)
    assert [x.index for x in c.choices] == [0, 1]
    for i, x in enumerate(c.choices):
        alone = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=1.0,
                                          seed=3 + i, echo=True)
        assert x.text == alone.choices[0].text and x.text.startswith("Once upon a time")
    streamed = list(client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=1.0,
                                              seed=3, n=2, echo=True, stream=True))
    for i, x in enumerate(c.choices):
        assert "".join(s.choices[0].text for s in streamed if s.choices[0].index == i) == x.text


def test_completion_batches_and_best_of(client):
    prompts = ["Once upon a time", [9707, 11, 1879]]
    args = dict(model=MODEL, max_tokens=6, temperature=1.0)
    r = client.completions.create(**args, prompt=prompts, n=2, seed=11)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]  # choice j of prompt p at p * n + j
    singles = [client.completions.create(**args, prompt=p, seed=11 + j) for p in prompts for j in range(2)]
    assert [c.text for c in r.choices] == [s.choices[0].text for s in singles]
    assert r.usage.prompt_tokens == singles[0].usage.prompt_tokens + singles[2].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    streamed = list(client.completions.create(**args, prompt=prompts, n=2, seed=11, stream=True))
    for c in r.choices:
        assert "".join(x.choices[0].text for x in streamed if x.choices[0].index == c.index) == c.text

    # Scoring a batch as evaluation harnesses do: each prompt's logprobs as if it came alone.
    batch = client.completions.create(model=MODEL, prompt=prompts, max_tokens=0, echo=True, logprobs=1)
    for p, choice in zip(prompts, batch.choices):
        alone = client.completions.create(model=MODEL, prompt=p, max_tokens=0, echo=True, logprobs=1).choices[0]
        assert choice.text == alone.text
        assert choice.logprobs.token_logprobs == alone.logprobs.token_logprobs

    # best_of: the candidates are the choices of seeds 5, 6, 7; the one with the highest mean token
    # logprob comes back, without logprobs unless asked for; all candidates' tokens are counted.
    best = client.completions.create(**args, prompt=prompts[0], best_of=3, seed=5)
    candidates = [client.completions.create(**args, prompt=prompts[0], seed=5 + j, logprobs=0).choices[0]
                  for j in range(3)]
    means = [sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs) for c in candidates]
    assert len(best.choices) == 1 and best.choices[0].logprobs is None
    assert best.choices[0].text == candidates[means.index(max(means))].text
    assert best.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in candidates)
    two = client.completions.create(**args, prompt=prompts[0], best_of=3, n=2, seed=5, logprobs=0)
    order = sorted(range(3), key=lambda j: -means[j])
    assert [c.text for c in two.choices] == [candidates[j].text for j in order[:2]]
    assert [c.index for c in two.choices] == [0, 1]


def test_thinking_switch_reaches_the_template(client):
    # Qwen3's template pre-fills an empty think block when thinking is off: a longer prompt.
    on = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1)
    off = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens == on.usage.prompt_tokens + 4  # "<think>", "\n\n", "</think>", "\n\n"


def test_prefix_reuse_reports_cached_tokens(client):
    first = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, temperature=0)
    history = USER + [{"role": "assistant", "content": first.choices[0].message.content},
                      {"role": "user", "content": "And of Italy?"}]
    second = client.chat.completions.create(model=MODEL, messages=history, max_tokens=4, temperature=0)
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    again = client.chat.completions.create(model=MODEL, messages=history, max_tokens=4, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    assert again.choices[0].message.content == second.choices[0].message.content


def test_tools_give_well_formed_replies(client):
    # The random tiny model rarely finishes a call in 12 tokens, so a forced call (required, or a named
    # function) shows either as a parsed call or as content that begins with the call the server
    # started; it never comes back as unrelated text.
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}, "none"):
        r = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice=choice, max_tokens=12)
        c = r.choices[0]
        assert c.finish_reason in ("stop", "length", "tool_calls")
        forced = choice not in ("auto", "none")
        if c.message.tool_calls:
            assert c.finish_reason == "tool_calls"
            for call in c.message.tool_calls:
                assert call.type == "function" and call.id.startswith("call_")
                assert isinstance(json.loads(call.function.arguments), dict)
                if isinstance(choice, dict):
                    assert call.function.name == "get_weather"
        else:
            assert isinstance(c.message.content, str)
            if forced:  # cut short: the call the server started, its JSON begun
                assert c.message.content.startswith("<tool_call>\n"), (choice, c.message.content)
                assert c.message.content[len("<tool_call>\n"):].lstrip().startswith("{"), c.message.content
    # The streamed variant ends like any stream.
    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, max_tokens=8, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_forced_tool_calls_are_whole_and_match_the_tool(client):
    # A forced call (Qwen3's JSON format) is constrained: the name is one of the tools, the arguments
    # follow its parameters, and "\n</tool_call>" closes it. These parameters bound every free part,
    # so each call finishes within the budget even from the random tiny model.
    tools = TOOLS + [{"type": "function", "function": {"name": "set_alarm", "parameters": {
        "type": "object", "additionalProperties": False, "required": ["hour", "loud"],
        "properties": {"hour": {"type": "integer"}, "loud": {"type": "boolean"},
                       "label": {"type": "string", "maxLength": 5}}}}}]
    names = []
    for seed, choice in [(1, "required"), (2, "required"), (3, "required"),
                         (4, {"type": "function", "function": {"name": "set_alarm"}})]:
        # parallel_tool_calls false ends generation on the call's closing token (seed 3).
        r = client.chat.completions.create(model=MODEL, messages=USER, tools=tools[1:] if seed < 4 else tools,
                                           tool_choice=choice, max_tokens=300, temperature=1.0, seed=seed,
                                           parallel_tool_calls=seed != 3)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c.message.content
        assert len(c.message.tool_calls) == 1
        call = c.message.tool_calls[0]
        names.append(call.function.name)
        args = json.loads(call.function.arguments)
        assert call.function.name == "set_alarm"
        assert isinstance(args["hour"], int) and isinstance(args["loud"], bool)
        assert set(args) <= {"hour", "loud", "label"} and len(args.get("label", "")) <= 5
    # Among several tools the name is one of them (the call's JSON may pick either).
    r = client.chat.completions.create(model=MODEL, messages=USER, tools=tools, tool_choice="required",
                                       max_tokens=300, temperature=1.0, seed=9)
    if r.choices[0].finish_reason == "tool_calls":
        assert r.choices[0].message.tool_calls[0].function.name in ("get_weather", "set_alarm")


def test_tool_call_history_is_accepted(client):
    messages = USER + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_abc", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "{\"temp_c\": 21}"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=4)
    assert r.usage.prompt_tokens > 100  # the tool definitions and the call were rendered


def test_completions_text_and_token_ids(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and isinstance(r.choices[0].text, str)
    assert r.usage.completion_tokens <= 6
    ids = client.completions.create(model=MODEL, prompt=[9707, 11, 1879], max_tokens=6, temperature=0)
    assert ids.usage.prompt_tokens == 3
    streamed = list(client.completions.create(model=MODEL, prompt=[9707, 11, 1879], max_tokens=6, temperature=0,
                                              stream=True))
    assert "".join(c.choices[0].text for c in streamed) == ids.choices[0].text
    assert streamed[-1].choices[0].finish_reason == ids.choices[0].finish_reason


def test_tokenize_counts_what_the_endpoints_feed_the_model(server, client):
    status, text = raw(server, "POST", "/tokenize", {"model": MODEL, "prompt": "Hello world<|im_end|>",
                                                      "return_token_strs": True})
    assert status == 200, text
    assert text == {"count": 3, "max_model_len": 512, "tokens": [9707, 1879, 151645],
                    "token_strs": ["Hello", "\u0120world", "<|im_end|>"]}
    assert raw(server, "POST", "/tokenize", {"content": "Hello world"})[1]["tokens"] == [9707, 1879]  # llama.cpp
    assert raw(server, "POST", "/detokenize", {"tokens": [9707, 1879, 151645]}) == \
        (200, {"prompt": "Hello world<|im_end|>", "content": "Hello world<|im_end|>"})

    # A chat counts exactly the prompt /v1/chat/completions feeds the model: with tools, with the
    # thinking switch, with a forced call's opening.
    for extra in [{}, {"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "required"},
                  {"chat_template_kwargs": {"enable_thinking": False}}]:
        status, counted = raw(server, "POST", "/tokenize", {"model": MODEL, "messages": USER, **extra})
        assert status == 200, counted
        kwargs = {"extra_body": extra} if "chat_template_kwargs" in extra else extra
        r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1, **kwargs)
        assert counted["count"] == len(counted["tokens"]) == r.usage.prompt_tokens, extra
    whole = raw(server, "POST", "/tokenize", {"messages": USER})[1]["tokens"]
    bare = raw(server, "POST", "/tokenize", {"messages": USER, "add_generation_prompt": False})[1]["tokens"]
    assert whole[:len(bare)] == bare and len(whole) > len(bare)
    status, chat_text = raw(server, "POST", "/detokenize", {"tokens": whole})
    assert chat_text["prompt"].startswith("<|im_start|>user\n" + USER[0]["content"] + "<|im_end|>")
    assert chat_text["prompt"].endswith("<|im_start|>assistant\n")

    # Prompts too long to generate from are still counted; bad requests are 400s naming the field.
    long_prompt = "hello" + " hello" * 999
    assert raw(server, "POST", "/tokenize", {"prompt": long_prompt})[1]["count"] == 1000
    assert_error(*raw(server, "POST", "/tokenize", {}), 400, param="prompt")
    assert_error(*raw(server, "POST", "/tokenize", {"prompt": "x", "messages": USER}), 400, param="prompt")
    assert_error(*raw(server, "POST", "/tokenize", {"messages": [{"role": "wizard", "content": "x"}]}), 400)
    assert_error(*raw(server, "POST", "/detokenize", {"tokens": [1, 151669]}), 400, param="tokens")
    assert_error(*raw(server, "POST", "/detokenize", {"tokens": "1 2"}), 400, param="tokens")
    assert_error(*raw(server, "POST", "/detokenize", {"tokens": [1], "model": "other"}), 400, code="model_not_found")
    assert_error(*raw(server, "POST", "/tokenize", {"prompt": "x"}, key=None), 401)
    metrics = raw(server, "GET", "/metrics", key=None)[1]
    assert metric(metrics, 'megaqwen_requests_total{endpoint="/tokenize",status="200"}') >= 8
    assert metric(metrics, 'megaqwen_requests_total{endpoint="/detokenize",status="400"}') >= 3


def test_logit_bias_forces_and_bans_tokens(server, client):
    forced = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=0.8, seed=1,
                                       logit_bias={"1879": 100}, logprobs=0)
    assert forced.choices[0].text == " world" * 5
    assert forced.usage.completion_tokens == 5
    plain = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, temperature=0, logprobs=True)
    first = plain.choices[0].logprobs.content[0]
    first_id = raw(server, "POST", "/tokenize", {"prompt": first.token})[1]["tokens"]
    assert len(first_id) == 1
    banned = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, temperature=0, logprobs=True,
                                            logit_bias={str(first_id[0]): -100})
    assert banned.choices[0].logprobs.content[0].token != first.token
    for value, param in [({"abc": 1}, "logit_bias"), ({"1": 101}, "logit_bias.1"), ([1], "logit_bias"),
                         ({"999999": 1}, "logit_bias")]:
        assert_error(*raw(server, "POST", "/v1/chat/completions", {"messages": USER, "logit_bias": value}), 400,
                     param=param)


def test_stop_string_cuts_the_output(client):
    full = client.completions.create(model=MODEL, prompt="The", max_tokens=16, temperature=0).choices[0].text
    stop = full[len(full) // 2: len(full) // 2 + 3]
    assert stop.strip(), full
    r = client.completions.create(model=MODEL, prompt="The", max_tokens=16, temperature=0, stop=[stop])
    assert r.choices[0].text == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_chat_logprobs(client):
    args = dict(model=MODEL, messages=USER, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    r = client.chat.completions.create(**args)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and isinstance(entry.token, str) and isinstance(entry.bytes, list)
        assert entry.token == bytes(entry.bytes).decode("utf-8", "replace")
        tops = entry.top_logprobs
        assert len(tops) == 3
        assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
        # Greedy: each token is its position's most likely one.
        assert tops[0].bytes == entry.bytes and tops[0].logprob == entry.logprob
    # Streamed: the same entries, spread over the chunks (the cache is warm now: prefill differs, so
    # the numbers agree to summation order).
    chunks = list(client.chat.completions.create(**args, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.bytes for e in streamed] == [e.bytes for e in content]
    assert all(abs(a.logprob - b.logprob) < 1e-3 for a, b in zip(streamed, content))
    # Without the switch there are none.
    assert client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2).choices[0].logprobs is None


def test_completion_logprobs_score_the_prompt_as_generation_scored_it(client):
    prompt = [9707, 11, 1879, 374]
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0, logprobs=2, echo=True)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(prompt) + n == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens) == r.choices[0].text  # the echo, then the generated text
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(lp.tokens))]
    for i in range(1, len(lp.tokens)):
        top = lp.top_logprobs[i]
        assert lp.tokens[i] in top and top[lp.tokens[i]] == lp.token_logprobs[i]
        assert 2 <= len(top) <= 3
    for i in range(len(prompt), len(lp.tokens)):  # greedy: the chosen token is the best
        assert max(lp.top_logprobs[i].values()) == lp.token_logprobs[i]

    # Scoring the whole sequence as a prompt, generating nothing (what evaluation harnesses ask),
    # gives the generated tokens the log-probabilities they had when they were drawn. vLLM's
    # return_tokens_as_token_ids names the generated tokens by id.
    generated = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0, logprobs=0,
                                          extra_body={"return_tokens_as_token_ids": True})
    g = generated.choices[0].logprobs
    assert generated.choices[0].text == r.choices[0].text[len("".join(lp.tokens[:len(prompt)])):]
    assert g.text_offset[0] == 0  # offsets into this choice's text
    assert all(t.startswith("token_id:") for t in g.tokens) and len(g.tokens) == n
    full_ids = prompt + [int(t.split(":")[1]) for t in g.tokens]
    scored = client.completions.create(model=MODEL, prompt=full_ids, max_tokens=0, echo=True, logprobs=0)
    s = scored.choices[0].logprobs
    assert scored.usage.completion_tokens == 0 and scored.choices[0].text == r.choices[0].text
    assert s.tokens == lp.tokens
    for a, b in zip(s.token_logprobs[1:], lp.token_logprobs[1:]):
        assert abs(a - b) < 1e-3, (a, b)

    # Streamed: the echo first, then the generated pieces; together the non-streamed answer.
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0, logprobs=2,
                                            echo=True, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text
    pieces = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    assert sum((p.tokens for p in pieces), []) == lp.tokens
    assert sum((p.text_offset for p in pieces), []) == lp.text_offset
    assert chunks[0].choices[0].text == "".join(lp.tokens[:len(prompt)])


# ---- refusals ----

PERSON = {"type": "object", "additionalProperties": False, "required": ["ok", "n", "color", "day"],
          "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
                         "color": {"enum": ["red", "green", "blue"]}, "day": {"type": "string", "format": "date"},
                         "note": {"type": ["string", "null"], "maxLength": 6}}}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def check_person(text):
    value = json.loads(text)
    assert list(value)[:4] == ["ok", "n", "color", "day"] and set(value) <= {"ok", "n", "color", "day", "note"}
    assert isinstance(value["ok"], bool) and isinstance(value["n"], int) and value["color"] in ("red", "green", "blue")
    datetime.date.fromisoformat(value["day"])  # a real calendar date
    if "note" in value:
        assert value["note"] is None or (isinstance(value["note"], str) and len(value["note"]) <= 6)


def test_response_format_json_schema(client):
    # The random tiny model draws among what the schema allows; this schema bounds every free part (the
    # integer's digits, the note's length, whitespace runs), so each reply ends as a whole value.
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed in range(6):
        r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=400, temperature=1.0, seed=seed,
                                           response_format=fmt, extra_body=NO_THINKING)
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        check_person(r.choices[0].message.content)
    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, max_tokens=400, temperature=1.0, seed=3,
                                                 response_format=fmt, extra_body=NO_THINKING, stream=True))
    check_person("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
    # Completions take it too (as vLLM's do).
    done = client.completions.create(model=MODEL, prompt="JSON:", max_tokens=400, temperature=1.0, seed=1,
                                     extra_body={"response_format": fmt})
    check_person(done.choices[0].text)


def test_the_openai_clients_parse_with_a_pydantic_model(client):
    # What most users write: client.chat.completions.parse(response_format=SomeModel). The client turns
    # the model into a strict JSON schema ($defs, $ref, anyOf for Optional, enum, additionalProperties
    # false) and validates the reply into the model. Every free part is bounded so the random tiny
    # model always finishes.
    import uuid
    from typing import List, Literal, Optional

    import pydantic

    class Place(pydantic.BaseModel):
        code: str = pydantic.Field(max_length=4)
        open: bool
        since: datetime.date
        key: uuid.UUID

    class Answer(pydantic.BaseModel):
        kind: Literal["city", "country"]
        rank: int
        home: Place
        other: Optional[Place]
        flags: List[bool] = pydantic.Field(max_length=2)

    for seed in range(3):
        r = client.chat.completions.parse(model=MODEL, messages=USER, max_tokens=400, temperature=1.0, seed=seed,
                                          response_format=Answer, extra_body=NO_THINKING)
        assert r.choices[0].finish_reason == "stop"
        answer = r.choices[0].message.parsed
        assert isinstance(answer, Answer) and len(answer.home.code) <= 4 and len(answer.flags) <= 2


def test_response_format_json_object_and_thinking(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=60, temperature=1.0, seed=5,
                                       response_format={"type": "json_object"}, extra_body=NO_THINKING)
    text = r.choices[0].message.content
    assert text.lstrip().startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    # With thinking on the reply may think first (left free); what follows the thinking is the JSON.
    for seed in range(4):
        r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=40, temperature=1.0, seed=seed,
                                           response_format={"type": "json_object"})
        content = r.choices[0].message.content or ""
        reasoning = getattr(r.choices[0].message, "reasoning_content", None)
        assert reasoning is not None or content.lstrip().startswith("{"), (reasoning, content)


def test_response_format_refusals(server):
    cases = [({"type": "xml"}, "response_format.type"),
             ({"type": "json_schema"}, "response_format.json_schema"),
             ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema"),
             ({"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(a)\\1"}}},
              "response_format.json_schema.schema"),
             ({"type": "json_schema", "json_schema": {"schema": {"type": "object", "required": ["a"]}}},
              "response_format.json_schema.schema"),
             ("json", "response_format")]
    for fmt, param in cases:
        body = {"model": MODEL, "messages": USER, "response_format": fmt}
        status, reply = raw(server, "POST", "/v1/chat/completions", body)
        assert_error(status, reply, 400, param=param)
    status, reply = raw(server, "POST", "/v1/chat/completions", {"model": MODEL, "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"schema": {"type": "string", "format": "uri"}}}})
    assert 'the format "uri" is not supported' in reply["error"]["message"]
    body = {"model": MODEL, "messages": USER, "tools": TOOLS, "tool_choice": "required",
            "response_format": {"type": "json_object"}}
    assert_error(*raw(server, "POST", "/v1/chat/completions", body), 400, param="response_format")


def test_authentication(server):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=MODEL, messages=USER, max_tokens=1)
    assert_error(*raw(server, "GET", "/v1/models", key=None), 401, code="invalid_api_key")
    assert_error(*raw(server, "POST", "/v1/completions", {"prompt": "x"}, key="test-ke"), 401)


def test_bad_types_and_ranges(server, client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=USER, temperature=-1)
    for field, value in [("temperature", "hot"), ("max_tokens", -1), ("max_tokens", 1e30), ("max_tokens", 2 ** 70),
                         ("top_p", 7), ("seed", 0.5), ("stop", [1]), ("stream", "yes"), ("messages", "hi"),
                         ("top_k", 1.5), ("n", 0), ("n", 65), ("model", "gpt-4o")]:
        body = {"model": MODEL, "messages": USER, field: value}
        assert_error(*raw(server, "POST", "/v1/chat/completions", body), 400, param=field)
    for extra, param in [({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                         ({"logprobs": 1}, "logprobs")]:
        body = {"model": MODEL, "messages": USER, **extra}
        assert_error(*raw(server, "POST", "/v1/chat/completions", body), 400, param=param)
    for extra, param in [({"logprobs": 21}, "logprobs"), ({"max_tokens": 0}, "max_tokens"), ({"echo": 1}, "echo"),
                         ({"best_of": 2, "stream": True}, "best_of"), ({"best_of": 2, "n": 3}, "best_of"),
                         ({"prompt": ["a", 7]}, "prompt[1]"), ({"prompt": ["a"] * 65}, "prompt")]:
        body = {"model": MODEL, "prompt": "x", **extra}
        assert_error(*raw(server, "POST", "/v1/completions", body), 400, param=param)


def test_bad_json_and_invalid_utf8(server):
    assert_error(*raw(server, "POST", "/v1/chat/completions", b'{"messages": ['), 400)
    assert_error(*raw(server, "POST", "/v1/chat/completions", b"[]"), 400)
    assert_error(*raw(server, "POST", "/v1/chat/completions",
                      b'{"messages": [{"role": "user", "content": "caf\xe9"}]}'), 400)
    assert_error(*raw(server, "POST", "/v1/chat/completions",
                      b'{"messages": [{"role": "user", "content": "\\ud800"}]}'), 400)
    assert_error(*raw(server, "POST", "/v1/completions", b""), 400)


def test_prompt_over_the_context(server, client):
    long_prompt = "hello " * 1000  # > 512 tokens
    assert_error(*raw(server, "POST", "/v1/completions", {"prompt": long_prompt}), 400,
                 code="context_length_exceeded")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_prompt}])


def test_unknown_route(server):
    assert_error(*raw(server, "GET", "/v2/everything"), 404)
    assert_error(*raw(server, "DELETE", "/v1/models"), 404)


def send_big_body(port, total, chunked):
    """Streams `total` bytes of body without holding them in memory; returns the response head."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {total}\r\n\r\n"
    sock.sendall(head.encode())
    block = b" " * (1 << 20)
    sent = 0
    try:
        while sent < total:
            sock.sendall(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
            sent += len(block)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may stop reading once the limit is passed; its answer is already on the way
    data = b""
    try:
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            part = sock.recv(65536)
            if not part:
                break
            data += part
    except (ConnectionResetError, socket.timeout):
        pass
    sock.close()
    return data


def test_oversized_bodies_get_413(server):
    started = time.monotonic()
    reply = send_big_body(server.port, 100 << 20, chunked=False)  # 100 MB with a Content-Length
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b'"code":"payload_too_large"' in reply
    reply = send_big_body(server.port, 8 << 20, chunked=True)  # no length announced
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert time.monotonic() - started < 60
    assert raw(server, "GET", "/health")[0] == 200


def test_metrics(server, client):
    client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
    status, text = raw(server, "GET", "/metrics", key=None)
    assert status == 200
    assert metric(text, 'megaqwen_requests_total{endpoint="/v1/chat/completions",status="200"}') >= 1
    assert metric(text, 'megaqwen_requests_total{endpoint="/v1/chat/completions",status="400"}') >= 1
    assert metric(text, "megaqwen_generated_tokens_total") >= 2
    assert metric(text, "megaqwen_time_to_first_token_seconds_count") >= 1
    assert metric(text, "megaqwen_queue_depth") == 0


# ---- queueing, disconnects and timeouts, on servers of their own ----

def test_full_queue_503_and_disconnect_cancels(tiny_model):
    s = ServerProcess(tiny_model, "--ctx", "4096", "--queue", "1")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
        stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4000, stream=True)
        next(iter(stream))  # running now
        queued = threading.Thread(
            target=lambda: client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2))
        queued.start()
        assert wait_until(lambda: metric(raw(s, "GET", "/metrics")[1], "megaqwen_queue_depth") == 1, 10)
        assert_error(*raw(s, "POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 2}), 503,
                     code="server_overloaded")
        # More choices than the queue holds at all: a 400 naming n, whatever the load.
        assert_error(*raw(s, "POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 2, "n": 2}), 400,
                     param="n")
        stream.close()  # the client goes away mid-stream: its generation must stop, freeing the engine
        queued.join(30)
        assert not queued.is_alive()
        text = raw(s, "GET", "/metrics")[1]
        assert metric(text, "megaqwen_generations_cancelled_total") == 1
        assert metric(text, "megaqwen_generated_tokens_total") < 4000
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER}),
    ("/v1/completions", {"prompt": "a"}),
])
def test_non_streamed_disconnect_cancels(tiny_model, path, body):
    # A non-streamed request writes nothing until its answer is done, so only the server watching the
    # connection can notice this client leave: without it the generation would run all its tokens.
    s = ServerProcess(tiny_model, "--ctx", "8192")
    try:
        payload = json.dumps({**body, "model": MODEL, "max_tokens": 8000, "temperature": 1.0}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        assert wait_until(lambda: metric(raw(s, "GET", "/metrics")[1], "megaqwen_requests_running") == 1, 10)
        time.sleep(0.5)
        left = time.monotonic()
        sock.close()
        assert wait_until(lambda: metric(raw(s, "GET", "/metrics")[1], "megaqwen_generations_cancelled_total") == 1, 5)
        assert time.monotonic() - left < 3
        text = raw(s, "GET", "/metrics")[1]
        assert metric(text, "megaqwen_generated_tokens_total") < 8000
        assert metric(text, "megaqwen_requests_running") == 0
        assert metric(text, f'megaqwen_requests_total{{endpoint="{path}",status="499"}}') == 1
        # The engine is free again and a well-behaved client still gets its whole answer.
        status, answer = raw(s, "POST", path, {**body, "max_tokens": 2})
        assert status == 200 and 1 <= answer["usage"]["completion_tokens"] <= 2
    finally:
        assert s.stop() == 0


def test_non_streamed_disconnect_in_the_queue_never_runs(tiny_model):
    s = ServerProcess(tiny_model, "--ctx", "4096", "--queue", "2")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
        stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4000, stream=True)
        next(iter(stream))  # running now
        payload = json.dumps({"messages": USER, "max_tokens": 2}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        assert wait_until(lambda: metric(raw(s, "GET", "/metrics")[1], "megaqwen_queue_depth") == 1, 10)
        sock.close()
        assert wait_until(lambda: metric(raw(s, "GET", "/metrics")[1],
                                         'megaqwen_requests_total{endpoint="/v1/chat/completions",status="499"}') == 1, 5)
        stream.close()
        assert wait_until(lambda: metric(raw(s, "GET", "/metrics")[1], "megaqwen_queue_depth") == 0, 10)
        text = raw(s, "GET", "/metrics")[1]
        assert metric(text, "megaqwen_generations_total") == 1  # the stream's; the hung-up request never ran
        assert metric(text, "megaqwen_generations_cancelled_total") == 1
    finally:
        assert s.stop() == 0


def test_request_timeout_ends_a_long_generation(tiny_model):
    s = ServerProcess(tiny_model, "--ctx", "8192", "--timeout", "2")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
        started = time.monotonic()
        r = client.completions.create(model=MODEL, prompt="a", max_tokens=8000, temperature=1.0)
        elapsed = time.monotonic() - started
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens < 8000
        assert 1.5 < elapsed < 10
    finally:
        assert s.stop() == 0


def test_shutdown_with_a_stream_in_flight(tiny_model):
    s = ServerProcess(tiny_model, "--ctx", "4096")
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
    stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4000, stream=True)
    next(iter(stream))
    started = time.monotonic()
    assert s.stop() == 0
    assert time.monotonic() - started < 10


def test_hostile_bodies_are_refused_and_the_server_stays_up(server):
    deep = b'{"messages": ' + b"[" * 400000 + b"]" * 400000 + b"}"  # under the 1 MiB limit
    assert_error(*raw(server, "POST", "/v1/chat/completions", deep), 400)
    wide = "{" + ",".join(f'"k{i}": {i}' for i in range(20000)) + "}"
    assert_error(*raw(server, "POST", "/v1/chat/completions", wide), 400)
    deep_tool = {"messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": json.loads("[" * 60 + "]" * 60)}}]}
    assert_error(*raw(server, "POST", "/v1/chat/completions", deep_tool), 400, param="tools[0].function.parameters")
    for junk in (b"\x00\x01\x02", b"null", b"1e999999", b'{"messages": [{"role": "user", "content": "x"}], "seed": 1e400}'):
        status, _ = raw(server, "POST", "/v1/chat/completions", junk)
        assert status == 400, junk
    assert raw(server, "GET", "/health")[0] == 200


def test_prompt_cache_lets_conversations_take_turns(tiny_model):
    """Two clients take turns: each one's second turn gets its conversation back from the prompt
    cache (--cache-ram) instead of prefilling it again, and replies exactly as a server that never saw
    the other client (same reuse, so the same computation)."""
    a = [{"role": "user", "content": "Tell me the long history of Paris, from the Romans onwards. " * 6}]
    b = [{"role": "user", "content": "Explain how suspension bridges carry their loads to the ground. " * 6}]

    def second_turn(history, reply):
        return history + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And of Rome?"}]

    def ask(c, messages):
        return c.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)

    s = ServerProcess(tiny_model, "--ctx", "1024")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", timeout=60, max_retries=0)
        ra = ask(c, a)
        rb = ask(c, b)
        assert rb.usage.prompt_tokens_details.cached_tokens < 10  # only the template's opening is shared
        ra2 = ask(c, second_turn(a, ra.choices[0].message.content))
        assert ra2.usage.prompt_tokens_details.cached_tokens >= ra.usage.prompt_tokens - 1
        rb2 = ask(c, second_turn(b, rb.choices[0].message.content))
        assert rb2.usage.prompt_tokens_details.cached_tokens >= rb.usage.prompt_tokens - 1
        text = raw(s, "GET", "/metrics", key=None)[1]
        assert metric(text, "megaqwen_prompt_cache_restores_total") == 2
        assert metric(text, "megaqwen_prompt_cache_saves_total") == 3  # A, B, then A's longer sequence
        # A's first entry is superseded only if its generated tokens re-tokenize to themselves.
        assert metric(text, "megaqwen_prompt_cache_entries") in (2, 3)
        assert metric(text, 'megaqwen_prompt_cache_bytes{memory="host"}') > 0
        assert metric(text, "megaqwen_prompt_cache_restored_tokens_total") == (
            ra2.usage.prompt_tokens_details.cached_tokens + rb2.usage.prompt_tokens_details.cached_tokens)
    finally:
        assert s.stop() == 0, "".join(s.log)

    alone = ServerProcess(tiny_model, "--ctx", "1024", "--cache-ram", "0")
    try:
        c = openai.OpenAI(base_url=alone.url + "/v1", api_key="none", timeout=60, max_retries=0)
        for first, second in ((a, ra2), (b, rb2)):
            r1 = ask(c, first)
            r2 = ask(c, second_turn(first, r1.choices[0].message.content))
            assert r2.choices[0].message.content == second.choices[0].message.content
            assert r2.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens_details.cached_tokens
        # Without the cache, the other client's turn costs the whole conversation.
        ra2_again = ask(c, second_turn(a, ra.choices[0].message.content))
        assert ra2_again.usage.prompt_tokens_details.cached_tokens < 10
        assert metric(raw(alone, "GET", "/metrics", key=None)[1], "megaqwen_prompt_cache_saves_total") == 0
    finally:
        assert alone.stop() == 0, "".join(alone.log)


def test_prompt_cache_folder_outlives_a_restart(tiny_model, tmp_path):
    """--cache-dir: a server stopped with SIGTERM writes its conversations to the folder; the next
    server over it gets a returning client's conversation from there (cached tokens, a disk restore in
    /metrics) and replies as the first server would have."""
    folder = tmp_path / "cache"
    a = [{"role": "user", "content": "Tell me the long history of Paris, from the Romans onwards. " * 6}]

    def ask(c, messages):
        return c.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)

    first = ServerProcess(tiny_model, "--ctx", "1024", "--cache-dir", str(folder))
    try:
        c = openai.OpenAI(base_url=first.url + "/v1", api_key="none", timeout=60, max_retries=0)
        ra = ask(c, a)
        second = a + [{"role": "assistant", "content": ra.choices[0].message.content},
                      {"role": "user", "content": "And of Rome?"}]
        ask(c, second)
        # The same request again on the same server: all but its last token come from the cache. What
        # the restarted server must match (the same computation).
        expected = ask(c, second)
        assert expected.usage.prompt_tokens_details.cached_tokens == expected.usage.prompt_tokens - 1
    finally:
        assert first.stop() == 0, "".join(first.log)
    assert any("holds 1 conversations" in line for line in first.log), "".join(first.log)
    assert len(list(folder.glob("*.state"))) == 1
    (folder / "notes.txt").write_text("left alone")

    again = ServerProcess(tiny_model, "--ctx", "1024", "--cache-dir", str(folder))
    try:
        assert any("1 conversations" in line and "from earlier runs" in line for line in again.log), "".join(again.log)
        c = openai.OpenAI(base_url=again.url + "/v1", api_key="none", timeout=60, max_retries=0)
        r = ask(c, second)
        assert r.usage.prompt_tokens_details.cached_tokens == expected.usage.prompt_tokens_details.cached_tokens
        assert r.choices[0].message.content == expected.choices[0].message.content
        text = raw(again, "GET", "/metrics", key=None)[1]
        assert metric(text, "megaqwen_prompt_cache_disk_restores_total") == 1
        assert metric(text, "megaqwen_prompt_cache_disk_entries") == 1
        assert metric(text, 'megaqwen_prompt_cache_bytes{memory="disk"}') > 0
    finally:
        assert again.stop() == 0, "".join(again.log)
    assert (folder / "notes.txt").read_text() == "left alone"
