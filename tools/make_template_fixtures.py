#!/usr/bin/env python3
"""Render chat-template test cases with the real Jinja template and write them as C++ test fixtures.

    python3 tools/make_template_fixtures.py [--models-dir /work/shared/models]

writes tests/fixtures/chat/<template>_cases.json for each template in TEMPLATES.

Each case is a chat request (see src/megaqwen/chat/chat_request.h). The request goes through JSON text
and back before rendering, so Python sees exactly the values the C++ side parses (1.0 stays a float).
Rendering uses the Jinja environment transformers builds for apply_chat_template (sandboxed,
trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False), raise_exception).
The output records per case either "expected" (the exact prompt) or "error" (what Jinja raised).
Cases listed in REFUSED are ones megaqwen refuses on purpose where the template would render garbage or
silently drop text; they set "refused" and record the Jinja render under "jinja" (or its "error").

As a cross-check, every case is also rendered by transformers' apply_chat_template when it is
installed; differences are reported (transformers preprocesses messages a little).
"""
import argparse
import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = pathlib.Path(__file__).resolve().parent.parent


def jinja_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def load_template(model_dir):
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.exists():
        return jinja_file.read_text(encoding="utf-8")
    return json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]


# --- the cases --------------------------------------------------------------------------------------

def user(text):
    return {"role": "user", "content": text}


def system(text):
    return {"role": "system", "content": text}


def assistant(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def tool(text):
    return {"role": "tool", "content": text}


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Température en °C, 天气.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\"\nor 'Zürich'"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "number",
                       "default": 5.0, "minimum": 1e-05, "maximum": 1e16}}, "required": []},
    },
}
# Floats Python prints in every layout: fixed, exponent, negative zero, extremes, shortest digits.
FLOATS = [1.0, 0.1, -0.0, 0.0, 1e-05, 0.0001, 1e16, 1e15, 123456789.123, 1.5e+300, 5e-324,
          1.7976931348623157e308, 2.5e-7, 100.0, 0.30000000000000004, 1e22, -12.5, 3.141592653589793]
INTS = [0, -5, 12345678901234567, 9223372036854775807, -9223372036854775808, 18446744073709551615]
NASTY_STRING = "tab\tnl\ncr\rbs\\ quote\" bell\x07 nul\x00 esc\x1b us\x1f del\x7f bsp\b ff\f </script> & <> é 😀 \u2028"

CASES = {
    # Plain conversations.
    "user_only": {"messages": [user("Hello!")]},
    "user_generation_prompt": {"messages": [user("Hello!")], "add_generation_prompt": True},
    "thinking_off": {"messages": [user("Hello!")], "add_generation_prompt": True, "enable_thinking": False},
    "thinking_on": {"messages": [user("Hello!")], "add_generation_prompt": True, "enable_thinking": True},
    "thinking_null": {"messages": [user("Hello!")], "add_generation_prompt": True, "enable_thinking": None},
    "thinking_off_without_generation_prompt": {"messages": [user("Hi")], "enable_thinking": False},
    "generation_prompt_false": {"messages": [user("Hi")], "add_generation_prompt": False},
    "system_user": {"messages": [system("You are a helpful assistant."), user("Hi")], "add_generation_prompt": True},
    "system_only": {"messages": [system("Be brief.")], "add_generation_prompt": True},
    "system_empty": {"messages": [system(""), user("Hi")], "add_generation_prompt": True},
    "two_system_messages": {"messages": [system("First."), system("Second."), user("Hi")]},
    "system_after_user": {"messages": [user("Hi"), system("Late system.")], "add_generation_prompt": True},
    "multi_turn": {"messages": [system("S"), user("Q1"), assistant("A1"), user("Q2"), assistant("A2"), user("Q3")],
                   "add_generation_prompt": True},
    "multi_turn_thinking_off": {"messages": [user("Q1"), assistant("A1"), user("Q2")], "add_generation_prompt": True,
                                "enable_thinking": False},
    "assistant_first": {"messages": [assistant("I start."), user("Ok")], "add_generation_prompt": True},
    "assistant_last": {"messages": [user("Q"), assistant("A")]},
    "assistant_last_with_generation_prompt": {"messages": [user("Q"), assistant("A")], "add_generation_prompt": True},
    "unicode": {"messages": [system("Réponds en français. 日本語もOK. Emoji: 🦀👍🏽. RTL: שלום. NFD: e\u0301."),
                             user("Ça va? 你好 \U0001F600 \u00a0nbsp \u3000ideographic space")],
                "add_generation_prompt": True},
    "empty_strings": {"messages": [user(""), assistant(""), user("")], "add_generation_prompt": True},
    "special_tokens_in_text": {"messages": [user("<|im_start|>assistant\n<|im_end|><think></think>")]},
    # Content null or missing.
    "user_content_null": {"messages": [user(None)], "add_generation_prompt": True},
    "user_content_missing": {"messages": [{"role": "user"}], "add_generation_prompt": True},
    "assistant_content_null": {"messages": [user("Q"), assistant(None), user("Q2")]},
    "tool_content_null": {"messages": [user("Q"), assistant(None, tool_calls=[call("f", {})]), tool(None)]},
    # Thinking in history.
    "think_in_history_dropped": {"messages": [user("Q1"), assistant("<think>\nreasoning 1\n</think>\n\nA1"),
                                              user("Q2")], "add_generation_prompt": True},
    "think_in_final_assistant_kept": {"messages": [user("Q1"), assistant("<think>\nreasoning\n</think>\n\nA1")]},
    "reasoning_content_final": {"messages": [user("Q"), assistant("Answer", reasoning_content="\n\nI think.\n\n")]},
    "reasoning_content_history": {"messages": [user("Q"), assistant("A", reasoning_content="thought"), user("Q2")],
                                  "add_generation_prompt": True},
    "reasoning_content_wins_over_think_tags": {
        "messages": [user("Q"), assistant("<think>inline</think>visible", reasoning_content="field")]},
    "reasoning_content_null_splits_content": {
        "messages": [user("Q"), assistant("<think>inline</think>\n\nvisible", reasoning_content=None)]},
    "reasoning_content_empty_final": {"messages": [user("Q"), assistant("\n\nA", reasoning_content="")]},
    "final_assistant_without_thinking": {"messages": [user("Q"), assistant("\n\nPlain answer")]},
    "close_tag_without_open_tag": {"messages": [user("Q"), assistant("reason</think>answer")]},
    "two_close_tags": {"messages": [user("Q"), assistant("<think>a</think>b</think>\nc")]},
    "two_open_tags": {"messages": [user("Q"), assistant("<think>x<think>\n\ny\n</think>z")]},
    "think_only_newlines": {"messages": [user("Q"), assistant("<think>\n\n</think>\n\n")]},
    # Tools.
    "tools_user": {"messages": [user("Weather in Paris?")], "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    "tools_system": {"messages": [system("You are a weather bot."), user("Weather?")], "tools": [WEATHER_TOOL, SEARCH_TOOL],
                     "add_generation_prompt": True, "enable_thinking": False},
    "tools_system_empty": {"messages": [system(""), user("Hi")], "tools": [SEARCH_TOOL]},
    "tools_empty_list": {"messages": [user("Hi")], "tools": [], "add_generation_prompt": True},
    "tools_null": {"messages": [user("Hi")], "tools": None},
    "tool_definition_values": {"messages": [user("Hi")], "tools": [
        {"floats": FLOATS, "ints": INTS, "nested": {"empty_object": {}, "empty_list": [], "list": [[], [{}], None, True,
         False]}, "string": NASTY_STRING, "z_key_first": 1, "a_key_second": 2, "": "empty key", "ключ": "значение"},
        "a bare string tool", 42, None]},
    # Tool calls and results.
    "tool_call_object_arguments": {"messages": [user("Weather?"), assistant("", tool_calls=[
        call("get_weather", {"city": "Paris", "days": 3, "unit": "celsius"})])], "tools": [WEATHER_TOOL]},
    "tool_call_string_arguments": {"messages": [user("Weather?"), assistant(None, tool_calls=[
        call("get_weather", "{\"city\":\"Paris\" ,  \"days\": 3}")])]},
    "tool_call_after_content": {"messages": [user("Weather?"), assistant("Let me check.", tool_calls=[
        call("get_weather", {"city": "Paris"})])]},
    "tool_call_content_missing": {"messages": [user("Q"), {"role": "assistant", "tool_calls": [call("f", {"x": 1})]}]},
    "tool_calls_several": {"messages": [user("Q"), assistant(None, tool_calls=[
        call("a", {"x": 1.0}), call("b", "not json at all"), call("c", {})])]},
    "tool_call_flat": {"messages": [user("Q"), assistant("x", tool_calls=[{"name": "flat", "arguments": {"k": "v"}}])]},
    "tool_call_argument_values": {"messages": [user("Q"), assistant(None, tool_calls=[call("values", {
        "floats": FLOATS, "ints": INTS, "text": NASTY_STRING, "unicode": "日本 😀", "nested": {"b": [1, {"a": None}]},
        "bool": True})])]},
    "tool_call_arguments_null": {"messages": [user("Q"), assistant(None, tool_calls=[call("f", None)])]},
    "tool_call_arguments_list": {"messages": [user("Q"), assistant(None, tool_calls=[call("f", [1, "two", 3.0])])]},
    "tool_call_arguments_number": {"messages": [user("Q"), assistant(None, tool_calls=[call("f", 2.50)])]},
    "tool_call_name_unicode": {"messages": [user("Q"), assistant(None, tool_calls=[call("naïve_\"tool\"", {})])]},
    "tool_calls_empty_list": {"messages": [user("Q"), assistant("A", tool_calls=[])]},
    "tool_calls_null": {"messages": [user("Q"), assistant("A", tool_calls=None)]},
    "tool_result": {"messages": [user("Weather?"), assistant(None, tool_calls=[call("get_weather", {"city": "Paris"})]),
                                 tool("{\"temperature\": 21}")], "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    "tool_results_grouped": {"messages": [
        user("Compare Paris and Tokyo."),
        assistant("<think>\nI need both.\n</think>\n\n", tool_calls=[call("get_weather", {"city": "Paris"}),
                                                                   call("get_weather", {"city": "Tokyo"})]),
        tool("Paris: 21°C"), tool("Tokyo: 25°C"), tool(""),
        assistant("Paris is cooler.", reasoning_content="Compare 21 and 25."),
        user("Thanks")], "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    "multi_step_tool_thinking_kept": {"messages": [
        user("Plan a trip."),
        assistant("", reasoning_content="step 1", tool_calls=[call("search", {"query": "flights"})]),
        tool("flight list"),
        assistant("\nChecking hotels.", reasoning_content="", tool_calls=[call("search", {"query": "hotels"})]),
        tool("hotel list"),
        assistant("Step 3 text", reasoning_content="step 3", tool_calls=[call("search", {"query": "trains"})]),
        tool("train list")], "add_generation_prompt": True},
    "multi_step_tool_thinking_off": {"messages": [
        user("Q"), assistant(None, reasoning_content="r", tool_calls=[call("f", {})]), tool("result")],
        "add_generation_prompt": True, "enable_thinking": False},
    "tool_response_wrapped_user": {"messages": [
        user("Real question"), assistant("<think>kept</think>calling", tool_calls=[call("f", {})]),
        user("<tool_response>\nresult\n</tool_response>"), assistant("<think>kept too</think>done")]},
    "only_tool_response_users": {"messages": [
        user("<tool_response>a</tool_response>"), assistant("<think>r</think>x"),
        user("<tool_response>b</tool_response>"), assistant("<think>r2</think>y")]},
    "user_starts_but_not_ends_with_tool_response": {"messages": [
        user("Q0"), assistant("<think>r0</think>a0"), user("<tool_response>partial"), assistant("<think>r1</think>a1")]},
    "tool_first": {"messages": [tool("orphan result"), user("Q")], "add_generation_prompt": True},
    "tool_last": {"messages": [user("Q"), assistant(None, tool_calls=[call("f", {})]), tool("r1"), tool("r2")]},
    "tool_between_users": {"messages": [user("Q"), tool("r"), user("Q2"), tool("r2"), tool("r3"), assistant("end")]},
    # Roles the template does not know are dropped.
    "unknown_role_dropped": {"messages": [system("S"), {"role": "developer", "content": "dev text"}, user("Q"),
                                          {"role": "function", "content": "f"}], "add_generation_prompt": True},
    "unknown_role_between_tools": {"messages": [user("Q"), tool("a"), {"role": "ipython", "content": "x"}, tool("b")]},
    "unknown_role_first_with_tools": {"messages": [{"role": "developer", "content": "d"}, user("Q")],
                                      "tools": [SEARCH_TOOL]},
    # Extra keys are ignored.
    "extra_keys_ignored": {"messages": [user("Q"), {"role": "tool", "content": "r", "tool_call_id": "call_1",
                                                     "name": "f"}], "temperature": 0.7, "model": "qwen3"},
    # Qwen3 fails on these (a Python TypeError or UndefinedError in Jinja).
    "error_messages_empty": {"messages": []},
    "system_content_missing_with_tools": {"messages": [{"role": "system"}, user("Hi")], "tools": [SEARCH_TOOL]},
    "tool_call_without_arguments": {"messages": [user("Q"), assistant(None, tool_calls=[
        {"type": "function", "function": {"name": "f"}}])]},
}

# Cases for one template only.
QWEN3_CASES = {
    # Qwen3 tests `if tool_call.function`, so a null function falls back to the call itself. (Qwen3.5
    # tests `is defined` and fails on it; megaqwen treats null as missing for both.)
    "tool_call_function_null": {"messages": [user("Q"), assistant("x", tool_calls=[
        {"function": None, "name": "outer", "arguments": [1]}])]},
    "error_system_content_null": {"messages": [system(None), user("Hi")]},
}
QWEN35_CASES = {
    "system_content_null": {"messages": [system(None), user("Hi")], "add_generation_prompt": True},
    "content_trimmed": {"messages": [system("  \u3000S \n"), user("\n  Q \u00a0"), assistant("\n A \n"), user(" q2 ")],
                        "tools": [SEARCH_TOOL], "add_generation_prompt": True, "enable_thinking": True},
    "system_whitespace_only_with_tools": {"messages": [system(" \n "), user("Q")], "tools": [SEARCH_TOOL]},
    "content_parts": {"messages": [{"role": "system", "content": [{"type": "text", "text": "Sys "}, {"text": "two"}]},
                                   {"role": "user", "content": [{"type": "text", "text": "Look: "},
                                    {"type": "image", "image": "x.png"}, {"image_url": {"url": "u"}},
                                    {"type": "video", "video": "v.mp4"}, {"text": 5}]}],
                      "add_generation_prompt": True},
    "content_parts_empty": {"messages": [{"role": "user", "content": []}]},
    "tool_call_xml_values": {"messages": [user("Q"), assistant("Calling.", tool_calls=[call("f", {
        "s": "text\nmore", "i": 3, "f": 1.0, "tiny": 1e-05, "b": True, "n": None, "list": [1, "a", None],
        "obj": {"k": [True]}, "empty": "", "u": "日本"}), call("g", {})])],
        "add_generation_prompt": True, "enable_thinking": True},
    "tool_call_no_arguments_key": {"messages": [user("Q"), assistant("", tool_calls=[{"function": {"name": "f"}}])]},
    "tool_call_content_whitespace": {"messages": [user("Q"), assistant(" \n", tool_calls=[call("f", {"a": 1})])]},
    "assistant_history_thinking": {"messages": [user("Q1"), assistant("A1", reasoning_content="r1"), user("Q2"),
                                                assistant("<think>r2</think>A2"), assistant("A3")]},
    "error_image_in_system": {"messages": [{"role": "system", "content": [{"type": "image"}]}, user("Q")]},
    "error_video_in_system": {"messages": [{"role": "system", "content": [{"video": "v"}]}, user("Q")]},
    "error_unexpected_item": {"messages": [{"role": "user", "content": [{"type": "audio"}]}]},
    "error_content_object": {"messages": [{"role": "user", "content": {"text": "x"}}]},
}

# Requests megaqwen refuses although the template may render them: the result would drop or garble text.
REFUSED_QWEN3 = {
    "refused_content_parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "lost"}]}]},
}
REFUSED = {
    "refused_content_number": {"messages": [user(42)]},
    "refused_assistant_content_object": {"messages": [user("Q"), assistant({"text": "lost"})]},
    "refused_role_missing": {"messages": [{"content": "no role"}, user("Q")]},
    "refused_role_not_string": {"messages": [{"role": 1, "content": "x"}, user("Q")]},
    "refused_reasoning_content_number": {"messages": [user("Q"), assistant("A", reasoning_content=5)]},
    "refused_tool_call_name_missing": {"messages": [user("Q"), assistant(None, tool_calls=[
        {"function": {"arguments": {}}}])]},
    "refused_tool_call_name_number": {"messages": [user("Q"), assistant(None, tool_calls=[call(7, {})])]},
    "refused_tools_object": {"messages": [user("Q")], "tools": {"name": "f"}},
    "refused_generation_prompt_not_bool": {"messages": [user("Q")], "add_generation_prompt": 1},
    "refused_content_part_string": {"messages": [{"role": "user", "content": ["image"]}]},
}

# Each template: the model folder it comes from, and its own cases besides the shared ones.
TEMPLATES = {
    "qwen3": ("qwen3-0.6b", QWEN3_CASES, REFUSED_QWEN3),
    "qwen3_5": ("qwen3.5-0.8b", QWEN35_CASES, {}),
}


def render(template, request):
    variables = {key: value for key, value in request.items()}
    variables.setdefault("tools", None)
    try:
        return {"expected": template.render(**variables)}
    except Exception as e:  # what the template raised, recorded for the C++ test to expect an Error
        return {"error": f"{type(e).__name__}: {e}"}


def transformers_cross_check(model_dir, cases):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("transformers not installed: cross-check skipped")
        return
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    for case in cases:
        request = case["request"]
        kwargs = {k: v for k, v in request.items() if k not in ("messages", "tools", "temperature", "model")}
        try:
            text = tokenizer.apply_chat_template(request["messages"], tools=request.get("tools"), tokenize=False, **kwargs)
        except Exception as e:
            text = f"<{type(e).__name__}>"
        ours = case.get("expected", case.get("jinja"))
        if ours is not None and text != ours:
            print(f"note: transformers renders {case['name']} differently: {text[:80]!r}...")


def make_fixture(model_dir, cases, refused_cases, out, cross_check):
    template = jinja_environment().from_string(load_template(model_dir))
    written = []
    for refused, table in ((False, cases), (True, refused_cases)):
        for name, request in table.items():
            request = json.loads(json.dumps(request, ensure_ascii=False))  # the values C++ will parse
            case = {"name": name, "request": request}
            result = render(template, request)
            if refused:
                case["refused"] = True
                if "expected" in result:
                    result = {"jinja": result["expected"]}
            case.update(result)
            written.append(case)

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": model_dir.name, "cases": written}, ensure_ascii=False, indent=1) + "\n",
                   encoding="utf-8")
    errors = sum("error" in c and not c.get("refused") for c in written)
    print(f"wrote {len(written)} cases ({errors} where the template fails, {len(refused_cases)} refused) to {out}")
    if cross_check:
        transformers_cross_check(model_dir, written)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", type=pathlib.Path, default=pathlib.Path("/work/shared/models"))
    parser.add_argument("--out-dir", type=pathlib.Path, default=ROOT / "tests/fixtures/chat")
    parser.add_argument("--no-cross-check", action="store_true")
    args = parser.parse_args()
    for name, (folder, own_cases, own_refused) in TEMPLATES.items():
        make_fixture(args.models_dir / folder, {**CASES, **own_cases}, {**REFUSED, **own_refused},
                     args.out_dir / f"{name}_cases.json", not args.no_cross_check)


if __name__ == "__main__":
    main()
