// The OpenAI request checks (every field's type and range, 400 naming the field) and the shapes of
// responses, stream chunks and errors, without HTTP.
#include "megaqwen/server/openai_protocol.h"

#include <gtest/gtest.h>

#include "megaqwen/server/api_error.h"

namespace megaqwen::server {
namespace {

ModelLimits limits() {
  ModelLimits m;
  m.id = "tiny";
  m.context_size = 512;
  m.vocab_size = 1000;
  m.defaults.temperature = 0.6f;
  m.defaults.top_p = 0.95f;
  m.defaults.top_k = 20;
  return m;
}

ordered_json chat_body(ordered_json extra = ordered_json::object()) {
  ordered_json body = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body.update(extra);
  return body;
}

// The status and param of the ApiError a body raises; (0, "") when it is accepted.
std::pair<int, std::string> chat_error(const ordered_json& body, bool objects = false) {
  try {
    parse_chat_completion_request(body, limits(), objects);
  } catch (const ApiError& e) {
    return {e.status(), e.param()};
  }
  return {0, ""};
}

TEST(OpenAiProtocol, DefaultsComeFromTheModelAndRequestOverrides) {
  ChatCompletionRequest r = parse_chat_completion_request(chat_body(), limits(), false);
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.6f);
  EXPECT_EQ(r.options.sampling.top_k, 20);
  EXPECT_FALSE(r.options.max_tokens);
  EXPECT_FALSE(r.options.stream);
  EXPECT_EQ(r.tool_choice, ToolChoice::None);

  r = parse_chat_completion_request(
      chat_body({{"temperature", 0}, {"top_p", 0.5}, {"top_k", -1}, {"min_p", 0.1}, {"presence_penalty", 1.5},
                 {"frequency_penalty", -0.5}, {"repetition_penalty", 1.1}, {"seed", 42}, {"max_tokens", 7},
                 {"max_completion_tokens", 9}, {"stop", "END"}, {"stream", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"chat_template_kwargs", {{"enable_thinking", false}}}}),
      limits(), false);
  const SamplingParams& s = r.options.sampling;
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_FLOAT_EQ(s.top_p, 0.5f);
  EXPECT_EQ(s.top_k, 0);  // -1: off
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_FLOAT_EQ(s.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(r.options.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.options.stream);
  EXPECT_TRUE(r.options.include_usage);
  EXPECT_EQ(r.enable_thinking, false);
}

TEST(OpenAiProtocol, RequestsWithoutSeedDrawDifferentSeeds) {
  auto a = parse_chat_completion_request(chat_body(), limits(), false).options.sampling.seed;
  auto b = parse_chat_completion_request(chat_body(), limits(), false).options.sampling.seed;
  EXPECT_NE(a, b);
}

TEST(OpenAiProtocol, NullMeansAbsent) {
  auto r = parse_chat_completion_request(chat_body({{"temperature", nullptr}, {"stop", nullptr}, {"tools", nullptr}}),
                                         limits(), false);
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.6f);
  EXPECT_TRUE(r.options.stop.empty());
}

TEST(OpenAiProtocol, WrongTypesAndRangesAre400NamingTheField) {
  const std::vector<std::pair<ordered_json, std::string>> cases = {
      {{{"temperature", "hot"}}, "temperature"},
      {{{"temperature", -0.1}}, "temperature"},
      {{{"temperature", 1e308}}, "temperature"},
      {{{"temperature", true}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_p", 1.5}}, "top_p"},
      {{{"top_k", 2.5}}, "top_k"},
      {{{"top_k", -2}}, "top_k"},
      {{{"min_p", 2}}, "min_p"},
      {{{"presence_penalty", 3}}, "presence_penalty"},
      {{{"frequency_penalty", -9}}, "frequency_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", -5}}, "max_tokens"},
      {{{"max_tokens", 10.5}}, "max_tokens"},
      {{{"max_tokens", "10"}}, "max_tokens"},
      {{{"max_tokens", ordered_json::parse("18446744073709551615")}}, "max_tokens"},
      {{{"max_tokens", ordered_json::parse("-9223372036854775808")}}, "max_tokens"},
      {{{"max_completion_tokens", 1e12}}, "max_completion_tokens"},
      {{{"seed", 1.5}}, "seed"},
      {{{"seed", "1"}}, "seed"},
      {{{"stop", 5}}, "stop"},
      {{{"stop", {"a", 5}}}, "stop"},
      {{{"stop", ""}}, "stop"},
      {{{"stop", ordered_json(std::vector<std::string>(17, "x"))}}, "stop"},
      {{{"stream", "yes"}}, "stream"},
      {{{"stream_options", 1}}, "stream_options"},
      {{{"stream_options", {{"include_usage", 1}}}}, "stream_options.include_usage"},
      {{{"n", 65}}, "n"},
      {{{"logprobs", 1}}, "logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},  // without logprobs: true
      {{{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {{{"logprobs", true}, {"top_logprobs", -1}}, "top_logprobs"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"model", "gpt-4"}}, "model"},
      {{{"model", 3}}, "model"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", ordered_json::array()}}, "messages"},
      {{{"messages", {1}}}, "messages[0]"},
      {{{"messages", {{{"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "user"}}}}}, "messages[0].content"},
      {{{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, "messages[0].content[0].type"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_calls", ordered_json::array()}}}}},
       "messages[0].tool_calls"},
      {{{"tools", {{{"type", "function"}}}}}, "tools[0].function"},
      {{{"tools", {{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}}}, "tools[0].type"},
      {{{"tools", {{{"function", {{"name", ""}}}}}}}, "tools[0].function.name"},
      {{{"tool_choice", "always"}}, "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},  // no tools
      {{{"tools", {{{"function", {{"name", "f"}}}}}}, {"tool_choice", {{"function", {{"name", "g"}}}}}}, "tool_choice"},
      {{{"chat_template_kwargs", {{"enable_thinking", "no"}}}}, "chat_template_kwargs.enable_thinking"},
  };
  for (const auto& [extra, param] : cases) {
    auto [status, got_param] = chat_error(chat_body(extra));
    EXPECT_EQ(status, 400) << extra.dump();
    EXPECT_EQ(got_param, param) << extra.dump();
  }
}

TEST(OpenAiProtocol, MessagesAreNormalizedForTheTemplate) {
  ordered_json body = chat_body({{"messages",
                                  {{{"role", "developer"}, {"content", "Be brief."}},
                                   {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}},
                                                                   {{"type", "text"}, {"text", "b"}}}}},
                                   {{"role", "assistant"},
                                    {"content", nullptr},
                                    {"tool_calls",
                                     {{{"id", "call_1"},
                                       {"type", "function"},
                                       {"function", {{"name", "f"}, {"arguments", "{\"x\": 1}"}}}}}}},
                                   {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}}}});
  ChatCompletionRequest as_text = parse_chat_completion_request(body, limits(), false);
  EXPECT_EQ(as_text.messages[0]["role"], "system");
  EXPECT_EQ(as_text.messages[1]["content"], "a\nb");
  EXPECT_EQ(as_text.messages[2]["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");
  // Qwen3.5's template iterates the arguments: they arrive parsed.
  ChatCompletionRequest as_objects = parse_chat_completion_request(body, limits(), true);
  EXPECT_EQ(as_objects.messages[2]["tool_calls"][0]["function"]["arguments"], ordered_json({{"x", 1}}));

  body["messages"][2]["tool_calls"][0]["function"]["arguments"] = "not json";
  EXPECT_EQ(chat_error(body, true), std::make_pair(400, std::string("messages[2].tool_calls[0].function.arguments")));
  EXPECT_EQ(chat_error(body, false).first, 0);  // Qwen3 prints the text verbatim
}

TEST(OpenAiProtocol, ToolChoice) {
  ordered_json tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}};
  EXPECT_EQ(parse_chat_completion_request(chat_body({{"tools", tools}}), limits(), false).tool_choice,
            ToolChoice::Auto);
  EXPECT_EQ(parse_chat_completion_request(chat_body({{"tools", tools}, {"tool_choice", "none"}}), limits(), false)
                .tool_choice,
            ToolChoice::None);
  EXPECT_EQ(parse_chat_completion_request(chat_body({{"tools", tools}, {"tool_choice", "required"}}), limits(), false)
                .tool_choice,
            ToolChoice::Required);
  auto named = parse_chat_completion_request(
      chat_body({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}),
      limits(), false);
  EXPECT_EQ(named.tool_choice, ToolChoice::Function);
  EXPECT_EQ(named.forced_function, "get_weather");
}

TEST(OpenAiProtocol, CompletionPrompts) {
  auto text = parse_completion_request({{"prompt", "Once upon"}, {"max_tokens", 4}}, limits());
  ASSERT_EQ(text.prompts.size(), 1u);
  EXPECT_EQ(text.prompts[0].text, "Once upon");
  auto ids = parse_completion_request({{"prompt", {1, 2, 999}}}, limits());
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].ids, (std::vector<int32_t>{1, 2, 999}));
  EXPECT_FALSE(ids.prompts[0].text);
  auto batch_of_one = parse_completion_request({{"prompt", {"x"}}}, limits());
  ASSERT_EQ(batch_of_one.prompts.size(), 1u);
  EXPECT_EQ(batch_of_one.prompts[0].text, "x");
  EXPECT_FALSE(batch_of_one.echo);
  EXPECT_FALSE(batch_of_one.options.logprobs);
  // A batch: strings and id arrays, in order; n choices each.
  auto batch = parse_completion_request(
      {{"prompt", ordered_json::array({"a", ordered_json::array({5, 6}), "b"})}, {"n", 2}}, limits());
  ASSERT_EQ(batch.prompts.size(), 3u);
  EXPECT_EQ(batch.prompts[0].text, "a");
  EXPECT_EQ(batch.prompts[1].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(batch.prompts[2].text, "b");
  EXPECT_EQ(batch.generations(), 6);
  const auto error_of = [](const ordered_json& body) -> std::pair<int, std::string> {
    try {
      parse_completion_request(body, limits());
      return {0, ""};
    } catch (const ApiError& e) {
      return {e.status(), e.param()};
    }
  };
  using E = std::pair<int, std::string>;
  EXPECT_EQ(error_of({{"prompt", ordered_json::array({"a", 5})}}), (E{400, "prompt[1]"}));
  EXPECT_EQ(error_of({{"prompt", ordered_json::array({"a", ""})}}), (E{400, "prompt[1]"}));
  EXPECT_EQ(error_of({{"prompt", ordered_json::array({"a", ordered_json::array()})}}), (E{400, "prompt[1]"}));
  EXPECT_EQ(error_of({{"prompt", ordered_json::array({ordered_json::array({1}), ordered_json::array({-1})})}}),
            (E{400, "prompt[1]"}));
  EXPECT_EQ(error_of({{"prompt", ordered_json::array()}}), (E{400, "prompt"}));
  EXPECT_EQ(error_of({{"prompt", ordered_json(std::vector<std::string>(kMaxChoices + 1, "a"))}}), (E{400, "prompt"}));
  EXPECT_EQ(error_of({{"prompt", ordered_json(std::vector<std::string>(kMaxChoices, "a"))}}), (E{0, ""}));
  EXPECT_EQ(error_of({{"prompt", ordered_json(std::vector<std::string>(2, "a"))}, {"n", kMaxChoices / 2 + 1}}),
            (E{400, "prompt"}));
  // best_of: candidates per prompt, at least n, not streamed.
  EXPECT_EQ(parse_completion_request({{"prompt", "a"}, {"best_of", 4}, {"n", 2}}, limits()).generations(), 4);
  EXPECT_EQ(error_of({{"prompt", "a"}, {"best_of", 2}, {"n", 3}}), (E{400, "best_of"}));
  EXPECT_EQ(error_of({{"prompt", "a"}, {"best_of", 2}, {"stream", true}}), (E{400, "best_of"}));
  EXPECT_EQ(error_of({{"prompt", "a"}, {"best_of", 1}, {"stream", true}}), (E{0, ""}));
  EXPECT_EQ(error_of({{"prompt", "a"}, {"best_of", 0}}), (E{400, "best_of"}));
  EXPECT_EQ(error_of({{"prompt", "a"}, {"best_of", kMaxChoices + 1}}), (E{400, "best_of"}));

  // Scoring as evaluation harnesses ask for it: echo, logprobs, no or one generated token.
  auto score = parse_completion_request({{"prompt", {1, 2}}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}}, limits());
  EXPECT_TRUE(score.echo);
  EXPECT_EQ(score.options.logprobs, 0);
  EXPECT_TRUE(score.options.prompt_logprobs);
  EXPECT_EQ(score.options.max_tokens, 0);
  auto echo_only = parse_completion_request({{"prompt", "x"}, {"echo", true}}, limits());
  EXPECT_TRUE(echo_only.echo);
  EXPECT_FALSE(echo_only.options.prompt_logprobs);  // the echo needs no scores without logprobs
  auto generated_only = parse_completion_request({{"prompt", "x"}, {"logprobs", 5}, {"best_of", 1}}, limits());
  EXPECT_EQ(generated_only.options.logprobs, 5);
  EXPECT_FALSE(generated_only.options.prompt_logprobs);

  // Each refusal is a 400 naming the field at fault (its param starts with that name).
  const std::vector<std::pair<ordered_json, std::string>> bad_requests = {
      {{{"max_tokens", 3}}, "prompt"},
      {{{"prompt", 5}}, "prompt"},
      {{{"prompt", ""}}, "prompt"},
      {{{"prompt", ordered_json::array()}}, "prompt"},
      {{{"prompt", {1, 1000}}}, "prompt"},
      {{{"prompt", {-1}}}, "prompt"},
      {{{"prompt", {1.5}}}, "prompt"},
      {{{"prompt", {"a", 5}}}, "prompt"},
      {{{"prompt", "x"}, {"echo", "yes"}}, "echo"},
      {{{"prompt", "x"}, {"logprobs", true}}, "logprobs"},
      {{{"prompt", "x"}, {"logprobs", 21}}, "logprobs"},
      {{{"prompt", "x"}, {"logprobs", -1}}, "logprobs"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},  // generating nothing needs echo
      {{{"prompt", "x"}, {"best_of", 3}, {"n", 4}}, "best_of"},
      {{{"prompt", "x"}, {"suffix", "y"}}, "suffix"},
      {{{"prompt", "x"}, {"model", "other"}}, "model"}};
  for (const auto& [bad, field] : bad_requests) {
    try {
      parse_completion_request(bad, limits());
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << bad.dump();
      EXPECT_EQ(e.param().rfind(field, 0), 0u) << bad.dump() << ": param '" << e.param() << "', " << e.what();
    }
  }
}

TEST(OpenAiProtocol, DeprecatedFunctionCallingIsRefusedNotDropped) {
  EXPECT_EQ(chat_error(chat_body({{"functions", {{{"name", "f"}, {"parameters", {{"type", "object"}}}}}}})),
            (std::pair<int, std::string>{400, "functions"}));
  EXPECT_EQ(chat_error(chat_body({{"function_call", "auto"}})), (std::pair<int, std::string>{400, "function_call"}));
  EXPECT_EQ(chat_error(chat_body({{"functions", nullptr}})).first, 0);  // null means absent
}

TEST(OpenAiProtocol, ParallelToolCalls) {
  EXPECT_TRUE(parse_chat_completion_request(chat_body(), limits(), false).parallel_tool_calls);
  EXPECT_FALSE(parse_chat_completion_request(chat_body({{"parallel_tool_calls", false}}), limits(), false)
                   .parallel_tool_calls);
  EXPECT_EQ(chat_error(chat_body({{"parallel_tool_calls", "no"}})),
            (std::pair<int, std::string>{400, "parallel_tool_calls"}));
}

TEST(OpenAiProtocol, LogitBias) {
  auto r = parse_chat_completion_request(chat_body({{"logit_bias", {{"5", -100}, {"999", 2.5}, {"0", 100}}}}),
                                         limits(), false);
  ASSERT_EQ(r.options.logit_bias.size(), 3u);
  EXPECT_EQ(r.options.logit_bias[0].token, 5);
  EXPECT_EQ(r.options.logit_bias[0].bias, -100.0f);
  EXPECT_EQ(r.options.logit_bias[1].token, 999);
  EXPECT_EQ(r.options.logit_bias[1].bias, 2.5f);
  auto c = parse_completion_request({{"prompt", "x"}, {"logit_bias", {{"7", 1}}}}, limits());
  ASSERT_EQ(c.options.logit_bias.size(), 1u);
  EXPECT_TRUE(parse_chat_completion_request(chat_body({{"logit_bias", nullptr}}), limits(), false)
                  .options.logit_bias.empty());
  for (const ordered_json& bad : {ordered_json(5), ordered_json({1, 2}), ordered_json({{"1000", 1}}),
                                  ordered_json({{"-1", 1}}), ordered_json({{"x", 1}}), ordered_json({{"", 1}}),
                                  ordered_json({{"1.5", 1}}), ordered_json({{"99999999999", 1}}),
                                  ordered_json({{"1", 101}}), ordered_json({{"1", -100.5}}),
                                  ordered_json({{"1", "5"}}), ordered_json({{"1", nullptr}})}) {
    const auto [status, param] = chat_error(chat_body({{"logit_bias", bad}}));
    EXPECT_EQ(status, 400) << bad.dump();
    EXPECT_EQ(param.rfind("logit_bias", 0), 0u) << bad.dump() << ": " << param;
  }
}

TEST(OpenAiProtocol, TokenizeAndDetokenizeRequests) {
  auto text = parse_tokenize_request({{"prompt", "Once upon"}}, limits(), false);
  EXPECT_EQ(text.text, "Once upon");
  EXPECT_FALSE(text.chat);
  EXPECT_FALSE(text.token_strs);
  auto llama = parse_tokenize_request({{"content", "x"}, {"add_special_tokens", true}}, limits(), false);
  EXPECT_EQ(llama.text, "x");
  auto empty = parse_tokenize_request({{"prompt", ""}}, limits(), false);  // counting nothing is fine here
  EXPECT_EQ(empty.text, "");
  auto chat = parse_tokenize_request(chat_body({{"return_token_strs", true}, {"add_generation_prompt", false}}),
                                     limits(), false);
  ASSERT_TRUE(chat.chat);
  EXPECT_EQ(chat.chat->messages.size(), 1u);
  EXPECT_TRUE(chat.token_strs);
  EXPECT_FALSE(chat.add_generation_prompt);
  EXPECT_TRUE(parse_tokenize_request(chat_body(), limits(), false).add_generation_prompt);

  EXPECT_EQ(parse_detokenize_request({{"tokens", {0, 5, 999}}}, limits()), (std::vector<int32_t>{0, 5, 999}));
  EXPECT_TRUE(parse_detokenize_request({{"tokens", ordered_json::array()}}, limits()).empty());

  const std::vector<std::pair<ordered_json, std::string>> bad_tokenize = {
      {ordered_json::object(), "prompt"},
      {{{"prompt", 5}}, "prompt"},
      {{{"content", {1, 2}}}, "content"},
      {{{"prompt", "x"}, {"content", "y"}}, "prompt"},
      {chat_body({{"prompt", "x"}}), "prompt"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", ordered_json::array()}}, "messages"},
      {{{"prompt", "x"}, {"return_token_strs", 1}}, "return_token_strs"},
      {{{"prompt", "x"}, {"add_special_tokens", "no"}}, "add_special_tokens"},
      {chat_body({{"add_generation_prompt", "yes"}}), "add_generation_prompt"},
      {chat_body({{"tool_choice", "required"}}), "tool_choice"},
      {{{"prompt", "x"}, {"model", "other"}}, "model"}};
  for (const auto& [bad, field] : bad_tokenize) {
    try {
      parse_tokenize_request(bad, limits(), false);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << bad.dump();
      EXPECT_EQ(e.param().rfind(field, 0), 0u) << bad.dump() << ": param '" << e.param() << "', " << e.what();
    }
  }
  const std::vector<ordered_json> bad_detokenize = {
      ordered_json::object(), {{"tokens", 5}}, {{"tokens", {1, 1000}}}, {{"tokens", {-1}}},
      {{"tokens", {1.5}}},    {{"tokens", {"a"}}}, {{"tokens", {ordered_json::array({1})}}},
      {{"tokens", {uint64_t(1) << 63}}}};
  for (const auto& bad : bad_detokenize) {
    try {
      parse_detokenize_request(bad, limits());
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << bad.dump();
      EXPECT_EQ(e.param(), "tokens") << bad.dump();
    }
  }
  try {
    parse_detokenize_request({{"tokens", {1}}, {"model", "other"}}, limits());
    ADD_FAILURE() << "accepted another model";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "model");
  }
}

TEST(OpenAiProtocol, TokenizeAndDetokenizeShapes) {
  const std::vector<int32_t> ids = {7, 8};
  EXPECT_EQ(json_text(tokenize_json(ids, 512, nullptr)),
            R"({"count":2,"max_model_len":512,"tokens":[7,8],"token_strs":null})");
  const std::vector<std::string> strs = {"a", "Ġb"};
  EXPECT_EQ(json_text(tokenize_json(ids, 512, &strs)),
            R"({"count":2,"max_model_len":512,"tokens":[7,8],"token_strs":["a","Ġb"]})");
  EXPECT_EQ(json_text(detokenize_json("hi")), R"({"prompt":"hi","content":"hi"})");
}

TEST(OpenAiProtocol, BodyMustBeAJsonObject) {
  EXPECT_NO_THROW(parse_json_body(R"({"a": 1})"));
  for (std::string bad : {std::string("{bad"), std::string("[1, 2]"), std::string(""), std::string("\"x\""),
                          std::string("{\"a\": \"\xff\"}"), std::string("{\"a\": \"\\ud800\"}"),
                          std::string("{\"a\": NaN}"), std::string("1e999999"),
                          std::string("{\"seed\": -1e400}")}) {
    try {
      parse_json_body(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.type(), "invalid_request_error");
    }
  }
}

TEST(OpenAiProtocol, BodyShapeIsBoundedBeforeParsing) {
  // Deep nesting and huge objects are refused from the raw text (no recursion, no quadratic inserts).
  EXPECT_THROW(parse_json_body(std::string(100000, '[') + std::string(100000, ']')), ApiError);
  std::string wide = "{";
  for (int i = 0; i < 1100; ++i) wide += "\"k" + std::to_string(i) + "\":1,";
  wide.back() = '}';
  EXPECT_THROW(parse_json_body(wide), ApiError);
  // Brackets and commas inside strings do not count.
  EXPECT_NO_THROW(parse_json_body("{\"a\": \"" + std::string(1000, '[') + std::string(10000, ',') + "\\\"\"}"));
  EXPECT_NO_THROW(parse_json_body("{\"a\": " + std::string(60, '[') + std::string(60, ']') + "}"));
}

TEST(OpenAiProtocol, ErrorJson) {
  ordered_json e = error_json(invalid_request("'top_p' must be a number", "top_p"));
  EXPECT_EQ(e.dump(),
            R"({"error":{"message":"'top_p' must be a number","type":"invalid_request_error","param":"top_p","code":null}})");
  EXPECT_EQ(unauthorized().status(), 401);
  EXPECT_EQ(payload_too_large(10).status(), 413);
  EXPECT_EQ(overloaded("busy").status(), 503);
  EXPECT_EQ(error_json(not_found("x"))["error"]["param"], nullptr);
}

TEST(OpenAiProtocol, FinishReasons) {
  EXPECT_EQ(finish_reason(FinishReason::Eos, false), "stop");
  EXPECT_EQ(finish_reason(FinishReason::StopString, false), "stop");
  EXPECT_EQ(finish_reason(FinishReason::Eos, true), "tool_calls");
  EXPECT_EQ(finish_reason(FinishReason::Length, true), "length");
  EXPECT_EQ(finish_reason(FinishReason::ContextFull, false), "length");
  EXPECT_EQ(finish_reason(FinishReason::Cancelled, false), "length");
}

TEST(OpenAiProtocol, ChatLogprobs) {
  EXPECT_FALSE(parse_chat_completion_request(chat_body({{"logprobs", false}}), limits(), false).options.logprobs);
  EXPECT_EQ(parse_chat_completion_request(chat_body({{"logprobs", true}}), limits(), false).options.logprobs, 0);
  auto top = parse_chat_completion_request(chat_body({{"logprobs", true}, {"top_logprobs", 20}}), limits(), false);
  EXPECT_EQ(top.options.logprobs, 20);
  EXPECT_FALSE(top.options.prompt_logprobs);

  // OpenAI's shape: the token's text, logprob, exact bytes and the alternatives, each alike.
  const std::vector<TokenLogprob> entries = {{7, -0.25f, {{7, -0.25f}, {9, -1.5f}}}, {8, -3.0f, {}}};
  const TokenNames names{[](int32_t id) -> std::string_view { return id == 7 ? "Hi" : id == 8 ? "\xc3" : "!"; }};
  const ordered_json j = chat_logprobs_json(entries, names);
  // Half a character: U+FFFD in the text (as the response is written), the byte itself in "bytes".
  EXPECT_EQ(ordered_json::parse(json_text(j)), ordered_json::parse(R"({"content": [
      {"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
       "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                        {"token": "!", "logprob": -1.5, "bytes": [33]}]},
      {"token": "\uFFFD", "logprob": -3.0, "bytes": [195], "top_logprobs": []}], "refusal": null})"));
  ResponseHeader h{"chatcmpl-1", 1, "tiny"};
  EXPECT_EQ(chat_choice_json(0, {"", "Hi", {}}, "stop", j)["logprobs"], j);
  EXPECT_EQ(chat_chunk_json(h, 0, {{"content", "Hi"}}, std::nullopt, false, j)["choices"][0]["logprobs"], j);
  // return_tokens_as_token_ids names tokens by id; the bytes stay.
  const ordered_json by_id = chat_logprobs_json(entries, {names.bytes, true});
  EXPECT_EQ(by_id["content"][0]["token"], "token_id:7");
  EXPECT_EQ(by_id["content"][0]["top_logprobs"][1]["token"], "token_id:9");
  EXPECT_EQ(by_id["content"][1]["bytes"], ordered_json::parse("[195]"));
  EXPECT_TRUE(parse_chat_completion_request(chat_body({{"return_tokens_as_token_ids", true}}), limits(), false)
                  .options.tokens_as_ids);
}

TEST(OpenAiProtocol, CompletionLogprobs) {
  // An echoed prompt "a" "bc", then a generated "é" split over two tokens and a "d".
  const TokenNames names{[](int32_t id) -> std::string_view {
    switch (id) {
      case 1: return "a";
      case 2: return "bc";
      case 3: return "\xc3";
      case 4: return "\xa9";
      default: return "d";
    }
  }};
  const std::vector<TokenLogprob> prompt = {{2, -2.0f, {{5, -0.5f}}}};
  const std::vector<TokenLogprob> generated = {{3, -0.1f, {{3, -0.1f}}}, {4, -0.01f, {{4, -0.01f}}},
                                               {5, -1.0f, {{2, -0.75f}}}};
  size_t offset = 0;
  const ordered_json echo = completion_logprobs_json(1, prompt, names, offset);
  EXPECT_EQ(json_text(echo), json_text(ordered_json::parse(R"({"tokens": ["a", "bc"], "token_logprobs": [null, -2.0],
      "top_logprobs": [null, {"d": -0.5, "bc": -2.0}], "text_offset": [0, 1]})")));
  EXPECT_EQ(offset, 3u);
  const ordered_json gen = completion_logprobs_json(std::nullopt, generated, names, offset);
  EXPECT_EQ(gen["text_offset"], ordered_json::parse("[3, 4, 4]"));  // the two halves of é share one character
  EXPECT_EQ(offset, 5u);
  EXPECT_EQ(gen["top_logprobs"][0].size(), 1u);  // the chosen token is the best: one key
  EXPECT_EQ(gen["top_logprobs"][2].size(), 2u);  // best "bc", and the chosen "d"
  EXPECT_DOUBLE_EQ(gen["top_logprobs"][2]["d"].get<double>(), -1.0);
  ResponseHeader h{"cmpl-1", 1, "tiny"};
  EXPECT_EQ(completion_choice_json(0, "abc", "length", gen)["logprobs"], gen);
  EXPECT_EQ(completion_chunk_json(h, 0, "abc", std::nullopt, false, gen)["choices"][0]["logprobs"], gen);
  EXPECT_NO_THROW(ordered_json::parse(json_text(gen)));
  // By id: the names change, the offsets still count characters of the text.
  offset = 0;
  const ordered_json by_id = completion_logprobs_json(1, generated, {names.bytes, true}, offset);
  EXPECT_EQ(by_id["tokens"], ordered_json::parse(R"(["token_id:1", "token_id:3", "token_id:4", "token_id:5"])"));
  EXPECT_EQ(by_id["text_offset"], ordered_json::parse("[0, 1, 2, 2]"));
  EXPECT_TRUE(by_id["top_logprobs"][3].contains("token_id:2"));
}

TEST(OpenAiProtocol, ChatCompletionShape) {
  ResponseHeader h{"chatcmpl-1", 1700000000, "tiny"};
  ReplyDelta reply{"thought", "\n\n", {{"f", R"({"x":1})"}}};
  ordered_json j = chat_completion_json(h, ordered_json::array({chat_choice_json(0, reply, "tool_calls")}), {10, 3, 4});
  EXPECT_EQ(j["object"], "chat.completion");
  const auto& message = j["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["content"], nullptr);  // only whitespace beside the tool calls
  EXPECT_EQ(message["reasoning_content"], "thought");
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"x":1})");
  EXPECT_FALSE(message["tool_calls"][0].contains("index"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"], ordered_json::parse(R"({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                                                "prompt_tokens_details": {"cached_tokens": 4}})"));
}

TEST(OpenAiProtocol, SeveralChoices) {
  // n is read for both endpoints, 1 when absent; each choice carries its index.
  EXPECT_EQ(parse_chat_completion_request(chat_body(), limits(), false).options.n, 1);
  EXPECT_EQ(parse_chat_completion_request(chat_body({{"n", 3}}), limits(), false).options.n, 3);
  EXPECT_EQ(parse_completion_request({{"model", "tiny"}, {"prompt", "a"}, {"n", kMaxChoices}}, limits()).options.n,
            kMaxChoices);
  for (const ordered_json& n : {ordered_json(0), ordered_json(kMaxChoices + 1), ordered_json(2.5), ordered_json("2")}) {
    try {
      parse_chat_completion_request(chat_body({{"n", n}}), limits(), false);
      ADD_FAILURE() << "accepted n = " << n;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "n");
    }
  }
  ResponseHeader h{"cmpl-1", 1, "tiny"};
  const ordered_json j = completion_json(
      h, ordered_json::array({completion_choice_json(0, "a", "stop"), completion_choice_json(1, "b", "length")}),
      {4, 7, 0});
  EXPECT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "b");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(chat_chunk_json(h, 5, {{"content", "x"}}, std::nullopt, false)["choices"][0]["index"], 5);
  EXPECT_EQ(completion_chunk_json(h, 2, "x", "stop", false)["choices"][0]["index"], 2);
}

TEST(OpenAiProtocol, SseChunks) {
  ResponseHeader h{"chatcmpl-1", 1700000000, "tiny"};
  const std::string event = sse_event(chat_chunk_json(h, 0, {{"content", "Hi"}}, std::nullopt, true));
  EXPECT_EQ(event,
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"tiny\","
            "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}],"
            "\"usage\":null}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  ordered_json last = chat_chunk_json(h, 0, ordered_json::object(), "stop", false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last.contains("usage"));
  ordered_json usage = usage_chunk_json(h, "chat.completion.chunk", {5, 2, 0});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  ordered_json calls = tool_calls_json({{"a", "{}"}, {"b", "{}"}}, 2);
  EXPECT_EQ(calls[0]["index"], 2);
  EXPECT_EQ(calls[1]["index"], 3);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
}

TEST(OpenAiProtocol, InvalidUtf8InGeneratedTextIsReplacedNotThrown) {
  ResponseHeader h{"cmpl-1", 1, "tiny"};
  std::string event;
  ASSERT_NO_THROW(event = sse_event(completion_chunk_json(h, 0, "ok \xff\xfe", std::nullopt, false)));
  EXPECT_NE(event.find("ok \xEF\xBF\xBD"), std::string::npos);  // U+FFFD
  EXPECT_NO_THROW(ordered_json::parse(event.substr(6)));
}

}  // namespace
}  // namespace megaqwen::server
