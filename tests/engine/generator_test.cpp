// Generator: stop conditions, stop strings with held-back text, UTF-8 safety and prefix reuse,
// over a scripted engine whose next token is fully determined (so every expectation is exact).
#include "megaqwen/engine/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <functional>
#include <optional>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

// Greedy-predictable engine: after token t the argmax is next_[t]; records what it was asked to run.
class ScriptedEngine final : public Engine {
 public:
  explicit ScriptedEngine(int vocab, int context) : context_(context), logits_(size_t(vocab)) {
    config_.vocab_size = vocab;
    next_.resize(size_t(vocab));
    for (int i = 0; i < vocab; ++i) next_[size_t(i)] = (i + 1) % vocab;
  }
  std::vector<int32_t> next_;
  std::vector<std::vector<int32_t>> prefills;  // each prefill call's tokens
  int decodes = 0;

  const ModelConfig& config() const override { return config_; }
  std::string device_name() const override { return "scripted"; }
  int context_size() const override { return context_; }
  int position() const override { return position_; }
  std::span<const float> prefill(std::span<const int32_t> tokens) override {
    if (position_ + int(tokens.size()) > context_) fail("context full");
    prefills.emplace_back(tokens.begin(), tokens.end());
    position_ += int(tokens.size());
    return point_at(next_[size_t(tokens.back())]);
  }
  std::vector<std::vector<int32_t>> scored;  // each prefill_all_logits call's tokens
  void prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) override {
    if (position_ + int(tokens.size()) > context_) fail("context full");
    scored.emplace_back(tokens.begin(), tokens.end());
    position_ += int(tokens.size());
    out.clear();
    for (int32_t t : tokens) {
      auto row = point_at(next_[size_t(t)]);
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  std::span<const float> decode(int32_t token) override {
    if (position_ + 1 > context_) fail("context full");
    ++decodes;
    ++position_;
    return point_at(next_[size_t(token)]);
  }
  void truncate(int n) override { position_ = n; }
  void fill_cache_with_noise(int n) override { position_ = n; }
  uint64_t kv_bytes_per_token() const override { return 0; }

  // With device_runs set: whole runs of greedy steps in one call, as the CUDA megakernel serves them
  // (Engine::generate_on_device's contract: one append per draw, the last draw never appended); with
  // device_logprobs also for logprob requests, each draw scored (from the scripted logits).
  bool device_runs = false, device_logprobs = false;
  int device_calls = 0;
  std::optional<int> generate_on_device(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                        const SamplingParams& params, std::span<const int32_t>, int logprobs,
                                        const DrawSink& on_draw) override {
    if (!device_runs || !params.greedy() || (logprobs >= 0 && !device_logprobs)) return std::nullopt;
    ++device_calls;
    if (max_tokens < 1 || position_ + max_tokens > context_) fail("run of {} past the context", max_tokens);
    int drawn = 0;
    for (;;) {
      ++position_;  // `token` appended
      const int32_t next = next_[size_t(token)];
      ++drawn;
      DeviceDraw draw{next, std::nullopt};
      if (logprobs >= 0) draw.logprob = token_logprob(point_at(next), next, logprobs);
      if (!on_draw(draw) || drawn == max_tokens || std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end()) break;
      token = next;
    }
    return drawn;
  }

 private:
  std::span<const float> point_at(int32_t id) {
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    logits_[size_t(id)] = 10.0f;
    return logits_;
  }
  ModelConfig config_;
  int context_, position_ = 0;
  std::vector<float> logits_;
};

GenerationRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

TEST(Generator, StopsAtTheTokenBudget) {
  ScriptedEngine engine(100, 64);
  Generator g(engine);
  auto r = g.run(greedy({5, 6}, 4));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(engine.decodes, 3);  // the last sampled token is never run through the model
}

TEST(Generator, StopsAtAnyEosIdWithoutEmittingIt) {
  ScriptedEngine engine(100, 64);
  Generator g(engine);
  auto req = greedy({5}, 50);
  req.eos_ids = {99, 9};
  auto r = g.run(req);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(r.finish, FinishReason::Eos);
  EXPECT_STREQ(finish_reason_name(r.finish), "stop");
}

TEST(Generator, StopStringEndsTheTextBeforeItAndNeverStreamsIt) {
  ScriptedEngine engine(100, 64);
  Generator g(engine);
  // token i prints as a letter; "cd" spans two tokens.
  auto req = greedy({0}, 20);
  req.token_bytes = [](int32_t id) -> std::string_view {
    static const std::string letters = "abcdefghijklmnopqrstuvwxyz";
    return std::string_view(letters).substr(size_t(id % 26), 1);
  };
  req.stop_strings = {"cd", "zzz"};
  std::string streamed;
  auto r = g.run(req, [&](int32_t, std::string_view text) {
    streamed += text;
    return true;
  });
  EXPECT_EQ(r.text, "b");
  EXPECT_EQ(streamed, "b");
  EXPECT_EQ(r.finish, FinishReason::StopString);
}

TEST(Generator, StreamsOnlyWholeUtf8Characters) {
  ScriptedEngine engine(10, 64);
  Generator g(engine);
  // "é" (C3 A9) and "€" (E2 82 AC) split across tokens.
  static const std::vector<std::string> pieces = {"x", "\xC3", "\xA9", "\xE2", "\x82", "\xAC", "!", "y", "z", "w"};
  auto req = greedy({0}, 6);
  req.token_bytes = [](int32_t id) -> std::string_view { return pieces[size_t(id)]; };
  std::vector<std::string> chunks;
  auto r = g.run(req, [&](int32_t, std::string_view text) {
    chunks.emplace_back(text);
    return true;
  });
  EXPECT_EQ(r.text, "\xC3\xA9\xE2\x82\xAC!");
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "\xC3\xA9", "", "", "\xE2\x82\xAC", "!"}));
}

TEST(Generator, ReusesTheCachedPrefixOfTheNextPrompt) {
  ScriptedEngine engine(100, 64);
  Generator g(engine);
  auto first = g.run(greedy({1, 2, 3}, 3));  // generates 4 5 6; the cache holds 1 2 3 4 5
  EXPECT_EQ(first.reused_tokens, 0);
  EXPECT_EQ(g.cached_tokens(), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  // The next turn: the whole conversation so far plus new tokens.
  auto second = g.run(greedy({1, 2, 3, 4, 5, 6, 40, 41}, 1));
  EXPECT_EQ(second.reused_tokens, 5);
  EXPECT_EQ(engine.prefills.back(), (std::vector<int32_t>{6, 40, 41}));
  EXPECT_EQ(second.tokens, (std::vector<int32_t>{42}));
  // A prompt that diverges early rolls the cache back to the shared part.
  auto third = g.run(greedy({1, 2, 9}, 1));
  EXPECT_EQ(third.reused_tokens, 2);
  EXPECT_EQ(engine.prefills.back(), (std::vector<int32_t>{9}));
  // The same prompt again still prefills its last token to get fresh logits.
  auto fourth = g.run(greedy({1, 2, 9}, 1));
  EXPECT_EQ(fourth.reused_tokens, 2);
  EXPECT_EQ(fourth.tokens, third.tokens);
}

TEST(Generator, CallbackCanCancel) {
  ScriptedEngine engine(100, 64);
  Generator g(engine);
  int calls = 0;
  auto r = g.run(greedy({1}, 50), [&](int32_t, std::string_view) { return ++calls < 3; });
  EXPECT_EQ(r.finish, FinishReason::Cancelled);
  EXPECT_EQ(r.tokens.size(), 3u);
}

TEST(Generator, StopsWhenTheContextIsFull) {
  ScriptedEngine engine(100, 8);
  Generator g(engine);
  auto r = g.run(greedy({1, 2, 3}, 50));
  EXPECT_EQ(r.finish, FinishReason::ContextFull);
  EXPECT_EQ(r.tokens.size(), 6u);  // 3 prompt + 5 decoded fill the 8 slots; the 6th is sampled last
}

// An engine that runs whole stretches of steps on its device (generate_on_device) gives the same
// tokens, finish reasons, cache position and cached prefix as per-token steps: budget, eos, cancel,
// context full, and prefix reuse across turns.
TEST(Generator, DeviceRunsMatchPerTokenSteps) {
  struct Turn {
    GenerationRequest req;
    int cancel_after = 0;  // the callback returns false on this call (0: never)
  };
  std::vector<Turn> turns;
  turns.push_back({greedy({1, 2, 3}, 5)});                 // budget
  turns.push_back({greedy({1, 2, 3, 4, 5, 6, 7, 40}, 4)});  // reuses the cache
  auto eos = greedy({10}, 50);
  eos.eos_ids = {14, 90};
  turns.push_back({eos});                                   // eos after 3 tokens
  turns.push_back({greedy({20}, 50), 4});                   // cancelled at the 4th token
  turns.push_back({greedy({20, 21, 22, 23, 30}, 50)});      // continues after the cancelled turn's cache
  turns.push_back({greedy({1}, 1)});                        // one token: no run at all
  turns.push_back({greedy({5, 6}, 200)});                   // context full (64)
  ScriptedEngine per_token(100, 64), on_device(100, 64);
  on_device.device_runs = true;
  Generator gp(per_token), gd(on_device);
  for (size_t i = 0; i < turns.size(); ++i) {
    auto run = [&](Generator& g) {
      int calls = 0;
      std::vector<int32_t> streamed;
      auto r = g.run(turns[i].req, [&](int32_t t, std::string_view) {
        if (t >= 0) streamed.push_back(t);
        return turns[i].cancel_after == 0 || ++calls < turns[i].cancel_after;
      });
      EXPECT_EQ(streamed, r.tokens) << "turn " << i;
      return r;
    };
    const auto a = run(gp), b = run(gd);
    EXPECT_EQ(a.tokens, b.tokens) << "turn " << i;
    EXPECT_EQ(int(a.finish), int(b.finish)) << "turn " << i;
    EXPECT_EQ(a.reused_tokens, b.reused_tokens) << "turn " << i;
    EXPECT_EQ(per_token.position(), on_device.position()) << "turn " << i;
    EXPECT_EQ(gp.cached_tokens(), gd.cached_tokens()) << "turn " << i;
    EXPECT_EQ(gd.cached_tokens().size(), size_t(on_device.position())) << "turn " << i;
  }
  EXPECT_GT(on_device.device_calls, 0);
  EXPECT_EQ(on_device.decodes, 0) << "every step after the first ran on the device";
}

// The scripted logits: 10 at the next token, 0 elsewhere.
double scripted_logprob(int vocab, bool predicted) {
  const double log_z = std::log(std::exp(10.0) + double(vocab - 1));
  return (predicted ? 10.0 : 0.0) - log_z;
}

// Runs Generator with logprobs on the scripted engine: 7 3 4 5 from prompt {5, 6}, each scored.
void expect_scored_run(ScriptedEngine& engine) {
  engine.next_[7] = 3;
  Generator g(engine);
  auto req = greedy({5, 6}, 4);
  req.logprobs = 3;
  req.eos_ids = {8};
  std::vector<std::string> events;
  auto r = g.run(
      req, [&](int32_t t, std::string_view) { return events.push_back("token " + std::to_string(t)), true; },
      [&](const TokenLogprob& lp, bool of_prompt) {
        events.push_back((of_prompt ? "prompt logprob " : "logprob ") + std::to_string(lp.token));
      });
  ASSERT_EQ(r.tokens, (std::vector<int32_t>{7, 3, 4, 5}));
  ASSERT_EQ(r.logprobs.size(), r.tokens.size());
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    EXPECT_EQ(r.logprobs[i].token, r.tokens[i]);
    EXPECT_NEAR(r.logprobs[i].logprob, scripted_logprob(100, true), 1e-6);
    ASSERT_EQ(r.logprobs[i].top.size(), 3u);
    EXPECT_EQ(r.logprobs[i].top[0].token, r.tokens[i]);
    // The rest tie at logit 0: lowest ids first, the predicted one skipped.
    EXPECT_EQ(r.logprobs[i].top[1].token, r.tokens[i] == 0 ? 1 : 0);
    EXPECT_NEAR(r.logprobs[i].top[1].logprob, scripted_logprob(100, false), 1e-6);
  }
  EXPECT_TRUE(r.prompt_logprobs.empty());
  EXPECT_EQ(events, (std::vector<std::string>{"logprob 7", "token 7", "logprob 3", "token 3", "logprob 4", "token 4",
                                              "logprob 5", "token 5"}));
}

TEST(Generator, LogprobsOfEveryGeneratedTokenFromHostLogits) {
  ScriptedEngine engine(100, 64);
  engine.device_runs = true;  // but it cannot score there: every step comes to the host
  expect_scored_run(engine);
  EXPECT_EQ(engine.device_calls, 0);
  EXPECT_EQ(engine.decodes, 3);
}

// An engine that scores where it draws keeps logprob requests on its device runs.
TEST(Generator, LogprobsFromTheDeviceKeepRunsOnTheDevice) {
  ScriptedEngine engine(100, 64);
  engine.device_runs = engine.device_logprobs = true;
  expect_scored_run(engine);
  EXPECT_EQ(engine.device_calls, 1);
  EXPECT_EQ(engine.decodes, 0);
}

// Allows only odd ids (and the eos); records what the generator told it.
class OddTokensOnly final : public OutputConstraint {
 public:
  std::vector<std::string> events;
  void mask(std::span<float> logits) override {
    events.push_back("mask");
    for (size_t i = 0; i < logits.size(); i += 2)
      if (i != 8) logits[i] = -INFINITY;
  }
  void accept(int32_t token) override { events.push_back("accept " + std::to_string(token)); }
};

TEST(Generator, AConstraintMasksEveryDrawOnTheHost) {
  ScriptedEngine engine(100, 64);
  engine.device_runs = engine.device_logprobs = true;  // a device path it must not take
  engine.next_[3] = 4;                                 // 4 is masked: the draw falls to the best odd id
  Generator g(engine);
  auto req = greedy({2}, 3);
  auto constraint = std::make_shared<OddTokensOnly>();
  req.constraint = constraint;
  req.logprobs = 0;
  const auto r = g.run(req);
  // After 2 the scripted argmax 3 is odd; after 3 it is 4 (masked), so the lowest odd id of the
  // tied rest: 1; after 1 it is 2 (masked): 1 again.
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{3, 1, 1}));
  EXPECT_EQ(constraint->events,
            (std::vector<std::string>{"mask", "accept 3", "mask", "accept 1", "mask", "accept 1"}));
  EXPECT_EQ(engine.device_calls, 0);
  EXPECT_EQ(engine.decodes, 2);
  // Log-probabilities score the model's logits, not the masked ones: 4 was the likely one.
  ASSERT_EQ(r.logprobs.size(), 3u);
  EXPECT_NEAR(r.logprobs[1].logprob, scripted_logprob(100, false), 1e-6);
  // The eos passes the mask and ends the run.
  auto eos = greedy({7}, 5);
  engine.next_[7] = 8;
  eos.eos_ids = {8};
  eos.constraint = std::make_shared<OddTokensOnly>();
  EXPECT_EQ(g.run(eos).finish, FinishReason::Eos);
}

TEST(Generator, LogitBiasShiftsEveryDrawOnTheHost) {
  ScriptedEngine engine(100, 64);
  engine.device_runs = engine.device_logprobs = true;  // a device path it must not take
  Generator g(engine);
  auto req = greedy({2}, 3);
  // After 2 the scripted argmax is 3 (logit 10, the rest 0): 3 falls to -90, so 5 (at 5) wins; after
  // 5 the argmax 6 falls to -10, so 5 again.
  req.logit_bias = {{3, -100.0f}, {5, 5.0f}, {6, -20.0f}};
  req.logprobs = 0;
  auto r = g.run(req);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{5, 5, 5}));
  EXPECT_EQ(engine.device_calls, 0);
  // Log-probabilities score the model's logits, without the bias.
  ASSERT_EQ(r.logprobs.size(), 3u);
  for (const auto& lp : r.logprobs) EXPECT_NEAR(lp.logprob, scripted_logprob(100, false), 1e-6);
  // A bias past the top logit forces a token, whatever the temperature and seed.
  for (uint64_t seed : {1u, 2u, 3u}) {
    GenerationRequest forced = greedy({2}, 4);
    forced.sampling.temperature = 1.0f;
    forced.sampling.seed = seed;
    forced.logit_bias = {{9, 100.0f}};
    EXPECT_EQ(g.run(forced).tokens, (std::vector<int32_t>{9, 9, 9, 9})) << "seed " << seed;
  }
  // Without a bias the same request runs on the device.
  EXPECT_EQ(g.run(greedy({2}, 3)).tokens, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(engine.device_calls, 1);
}

TEST(Generator, EndIdsStopAfterTheTokenAndKeepIt) {
  for (bool device : {false, true}) {
    ScriptedEngine engine(100, 64);
    engine.device_runs = device;
    Generator g(engine);
    auto req = greedy({10}, 20);
    req.end_ids = {13, 50};
    req.eos_ids = {12};  // an eos id ends before the end id would: here it comes first
    EXPECT_EQ(g.run(req).tokens, (std::vector<int32_t>{11})) << device;
    req.eos_ids.clear();
    const auto r = g.run(req);
    EXPECT_EQ(r.tokens, (std::vector<int32_t>{11, 12, 13})) << device;
    EXPECT_EQ(r.finish, FinishReason::Eos) << device;
    // The end id is the last token drawn, never fed back: the cache holds the prompt and 11, 12.
    EXPECT_EQ(g.cached_tokens(), (std::vector<int32_t>{10, 11, 12})) << device;
  }
}

TEST(Generator, LogprobsEndAtEosAndRefuseBadCounts) {
  ScriptedEngine engine(100, 64);
  engine.next_[7] = 3;
  Generator g(engine);
  auto req = greedy({5, 6}, 4);
  req.logprobs = 3;
  req.eos_ids = {8};

  // An eos ends the run without a logprob entry, as it has no place in `tokens`.
  req.max_tokens = 10;
  req.prompt = {6};
  engine.next_[5] = 8;
  const GenerationResult r = g.run(req);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{7, 3, 4, 5}));
  EXPECT_EQ(r.logprobs.size(), 4u);
  EXPECT_EQ(r.finish, FinishReason::Eos);

  req.logprobs = kMaxTopLogprobs + 1;
  EXPECT_THROW(g.run(req), Error);
  req.logprobs = -1;
  EXPECT_THROW(g.run(req), Error);
}

TEST(Generator, PromptLogprobsScoreEveryPromptTokenWithoutReusingTheCache) {
  // A vocabulary large enough that the scoring prefill takes several blocks (64 MiB of logits each).
  constexpr int kVocab = 600'000;
  ScriptedEngine engine(kVocab, 128);
  Generator g(engine);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; ++i) prompt.push_back(i % 5 == 4 ? 1000 + i : i);  // every fifth token off the script
  auto warm = greedy(prompt, 1);
  g.run(warm);  // fills the cache with the prompt

  auto req = greedy(prompt, 2);
  req.prompt_logprobs = true;
  req.logprobs = 2;
  std::vector<std::pair<int32_t, bool>> calls;  // (token, of_prompt) per logprob callback
  const auto r = g.run(req, {}, [&](const TokenLogprob& lp, bool of_prompt) { calls.emplace_back(lp.token, of_prompt); });
  EXPECT_EQ(r.reused_tokens, 0);
  ASSERT_EQ(calls.size(), prompt.size() - 1 + 2);  // the prompt's, then the two generated tokens'
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, i + 1 < prompt.size()) << i;
    EXPECT_EQ(calls[i].first, i + 1 < prompt.size() ? prompt[i + 1] : r.tokens[i + 1 - prompt.size()]) << i;
  }
  ASSERT_EQ(r.prompt_logprobs.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const TokenLogprob& lp = r.prompt_logprobs[i];
    EXPECT_EQ(lp.token, prompt[i + 1]);
    const bool predicted = engine.next_[size_t(prompt[i])] == prompt[i + 1];
    EXPECT_EQ(predicted, (i + 1) % 5 != 4 && i % 5 != 4) << i;  // into and out of the odd tokens
    EXPECT_NEAR(lp.logprob, scripted_logprob(kVocab, predicted), 1e-5) << i;
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[0].token, engine.next_[size_t(prompt[i])]);
  }
  // Three blocks of at most 27 rows, in order, covering the prompt once.
  ASSERT_EQ(engine.scored.size(), 3u);
  std::vector<int32_t> all;
  for (const auto& s : engine.scored) {
    EXPECT_LE(s.size(), 27u);
    all.insert(all.end(), s.begin(), s.end());
  }
  EXPECT_EQ(all, prompt);
  // Generation goes on from the last prompt position's logits, and the cache is known again.
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{engine.next_[size_t(prompt.back())], engine.next_[size_t(prompt.back()) + 1]}));
  EXPECT_EQ(r.logprobs.size(), 2u);
  EXPECT_EQ(g.cached_tokens().size(), prompt.size() + 1);
  auto again = greedy(prompt, 1);
  EXPECT_EQ(g.run(again).reused_tokens, int(prompt.size()) - 1);

  // A one-token prompt has nothing to score; max_tokens 0 scores without generating.
  req.prompt = {3};
  EXPECT_TRUE(g.run(req).prompt_logprobs.empty());
  req.prompt = prompt;
  req.max_tokens = 0;
  const auto scored_only = g.run(req);
  EXPECT_TRUE(scored_only.tokens.empty());
  EXPECT_EQ(scored_only.prompt_logprobs.size(), prompt.size() - 1);
}

TEST(Generator, RejectsBadRequests) {
  ScriptedEngine engine(100, 8);
  Generator g(engine);
  EXPECT_THROW(g.run(greedy({}, 5)), Error);
  EXPECT_THROW(g.run(greedy({1}, -1)), Error);
  EXPECT_THROW(g.run(greedy(std::vector<int32_t>(9, 1), 1)), Error);  // longer than the context
  auto req = greedy({1}, 5);
  req.stop_strings = {"x"};  // stop strings without token bytes
  EXPECT_THROW(g.run(req), Error);
}

}  // namespace
}  // namespace megaqwen
