#!/usr/bin/env python3
"""Differential check of megaqwen's chat templates against Jinja on many requests at once.

    python3 tools/diff_templates_jinja.py --megaqwen build/megaqwen DIR_OR_FILE... \
        [--models-dir /work/shared/models] [--show 5]

Each input file is a JSON chat request (a fuzz corpus, e.g. build-fuzz/fuzz/corpus/fuzz_chat_prompt
after `fuzz_chat_prompt` ran, or fuzz/corpus/chat_prompt). Its messages and tools, with
add_generation_prompt true and chat_template_kwargs.enable_thinking, are rendered by
`megaqwen template` and by the real Jinja template (the environment transformers builds, from
tools/make_template_fixtures.py), for Qwen3 and Qwen3.5. Outcomes per template:

    same        both rendered the same bytes, or both refused
    refused     megaqwen refused what Jinja rendered (on purpose for some shapes: see REFUSED in
                make_template_fixtures.py); the messages are tallied so new kinds stand out
    MISMATCH    different bytes, or megaqwen rendered what Jinja refused

With --random N, N seeded random requests join the inputs: messages of every role with contents
that hit the templates' string handling (surrounding whitespace, <think> blocks, tags, Unicode),
reasoning_content, tool calls whose arguments are JSON text or objects of every JSON type (floats
such as 1e+100, -0.0 and 1e-05, which the templates print with Python's json.dumps and str), and
tools; enable_thinking on, off or absent. The integers stay within what the JSON parser (nlohmann)
keeps exact, -2^63 .. 2^64-1: beyond that it reads a double, as RFC 8259 allows, and the prompt
shows 1e+20 where Python prints 100000000000000000000 (the one difference found, 2026-12-07).

Exit status 1 when any MISMATCH is found. Files that are not a JSON object with a "messages" array
are skipped.
"""
import argparse
import collections
import itertools
import json
import pathlib
import random
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_template_fixtures import jinja_environment, load_template  # noqa: E402

FOLDERS = {"qwen3": "qwen3-0.6b", "qwen3.5": "qwen3.5-0.8b"}


def requests(paths):
    for path in paths:
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for f in files:
            try:
                body = json.loads(f.read_bytes())
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                continue
            request = {"messages": body["messages"], "add_generation_prompt": True}
            if body.get("tools") is not None:
                request["tools"] = body["tools"]
            kwargs = body.get("chat_template_kwargs")
            if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is not None:
                request["enable_thinking"] = kwargs["enable_thinking"]
            yield f, request


PIECES = ["", " ", "\n", "\n\n", "\t", "  x  ", "<think>", "</think>", "<think>\nr\n</think>\n\n", "<tool_call>",
          "</tool_call>", "<tool_response>", "<|im_end|>", "<|im_start|>", "{", "}", "\"", "'", "\\", "é", "天气",
          "\u00a0", "\u2028", "\U0001F600", "\x00", "\x1b", "None", "True", "{{", "{%", "#", "\r\n", "a", "b c"]


def random_text(rng, pieces=6):
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, pieces)))


def random_value(rng, depth=0):
    kind = rng.randint(0, 9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 7, 2 ** 53 + 1, -(2 ** 63), 2 ** 64 - 1])
    if kind == 3:
        return rng.choice([0.0, -0.0, 1.0, 0.1, 1e-05, 1e+100, 1.5e-7, 123456789.0, 1e16, 3.14159, -2.5e-300])
    if kind <= 6:
        return random_text(rng, 4)
    if kind <= 8:
        return {random_text(rng, 2) or "k": random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def random_request(rng):
    messages = []
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": random_text(rng)})
    for _ in range(rng.randint(1, 5)):
        role = rng.choice(["user", "user", "assistant", "assistant", "tool"])
        message = {"role": role, "content": random_text(rng) if rng.random() < 0.9 else None}
        if role == "assistant" and rng.random() < 0.4:
            message["reasoning_content"] = random_text(rng)
        if role == "assistant" and rng.random() < 0.5:
            calls = []
            for _ in range(rng.randint(1, 2)):
                arguments = {random_text(rng, 2) or "a": random_value(rng) for _ in range(rng.randint(0, 3))}
                if rng.random() < 0.4:
                    arguments = json.dumps(arguments, ensure_ascii=rng.random() < 0.5)
                calls.append({"type": "function", "function": {"name": rng.choice(["f", "get_weather", "x y"]),
                                                               "arguments": arguments}})
            message["tool_calls"] = calls
        messages.append(message)
    if messages[-1]["role"] != "user" and rng.random() < 0.7:
        messages.append({"role": "user", "content": random_text(rng)})
    request = {"messages": messages, "add_generation_prompt": True}
    if rng.random() < 0.5:
        request["tools"] = [{"type": "function", "function": {
            "name": "get_weather", "description": random_text(rng, 3),
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": random_text(rng, 2)},
                                                            "days": {"type": "integer", "default": random_value(rng)}},
                           "required": ["city"]}}}]
    thinking = rng.choice([None, True, False])
    if thinking is not None:
        request["enable_thinking"] = thinking
    return request


def ours(binary, model_dir, request):
    """(text, None) or (None, error message)."""
    run = subprocess.run([binary, "template", "--model", str(model_dir)], input=json.dumps(request).encode(),
                         capture_output=True, timeout=60)
    if run.returncode == 0:
        return run.stdout.decode("utf-8", "surrogateescape"), None
    if run.returncode != 1:
        raise RuntimeError(f"megaqwen template exited {run.returncode}: {run.stderr.decode(errors='replace')}")
    return None, run.stderr.decode("utf-8", "replace").strip()


def theirs(template, request):
    variables = dict(request)
    variables.setdefault("tools", None)
    try:
        return template.render(**variables), None
    except Exception as e:  # noqa: BLE001 - whatever Jinja or the template raised is a refusal
        return None, f"{type(e).__name__}: {e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", type=pathlib.Path)
    parser.add_argument("--megaqwen", default="build/megaqwen")
    parser.add_argument("--models-dir", type=pathlib.Path, default=pathlib.Path("/work/shared/models"))
    parser.add_argument("--show", type=int, default=5, help="mismatches to print in full")
    parser.add_argument("--random", type=int, default=0, help="random requests to add")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = jinja_environment()
    templates = {name: env.from_string(load_template(args.models_dir / folder)) for name, folder in FOLDERS.items()}
    outcomes = {name: collections.Counter() for name in FOLDERS}
    refusals = {name: collections.Counter() for name in FOLDERS}
    mismatches = []
    rng = random.Random(args.seed)
    generated = ((f"random #{i} (seed {args.seed})", random_request(rng)) for i in range(args.random))
    for path, request in itertools.chain(requests(args.inputs), generated):
        for name, folder in FOLDERS.items():
            # Jinja sees the request after a JSON round trip, as the C++ side parses it.
            request_json = json.loads(json.dumps(request))
            mine, my_error = ours(args.megaqwen, args.models_dir / folder, request_json)
            jinja, jinja_error = theirs(templates[name], request_json)
            if mine is not None and mine == jinja or mine is None and jinja is None:
                outcomes[name]["same"] += 1
            elif mine is None:
                outcomes[name]["refused"] += 1
                refusals[name][my_error.split(":", 2)[-1].strip()[:90]] += 1
            else:
                outcomes[name]["MISMATCH"] += 1
                mismatches.append((name, path, request_json, mine, jinja, jinja_error))

    for name in FOLDERS:
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes[name].items())))
        for message, count in refusals[name].most_common(12):
            print(f"    refused x{count}: {message}")
    for name, path, request, mine, jinja, jinja_error in mismatches[:args.show]:
        print(f"\nMISMATCH ({name}) {path}\n  request: {json.dumps(request, ensure_ascii=False)[:600]}")
        if jinja is None:
            print(f"  megaqwen: {mine!r:.600}\n  jinja refused: {jinja_error}")
            continue
        at = next((i for i, (a, b) in enumerate(zip(mine, jinja)) if a != b), min(len(mine), len(jinja)))
        print(f"  first difference at byte {at} of {len(mine)} / {len(jinja)}:")
        print(f"  megaqwen: ...{mine[max(0, at - 80):at + 120]!r}")
        print(f"  jinja:    ...{jinja[max(0, at - 80):at + 120]!r}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
