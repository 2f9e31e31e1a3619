// Scheduler and GenerationJob: one worker runs jobs in arrival order, the queue is bounded, a
// cancelled or expired job stops, and consecutive prompts share the KV cache prefix.
#include "megaqwen/server/scheduler.h"

#include <gtest/gtest.h>

#include <thread>

#include "megaqwen/util/error.h"

namespace megaqwen::server {
namespace {

using namespace std::chrono_literals;

// Always predicts token 1; each decode step can be slowed down so jobs overlap in time.
class SlowEngine final : public Engine {
 public:
  explicit SlowEngine(std::chrono::milliseconds step) : step_(step), logits_(4, 0.0f) {
    config_.vocab_size = 4;
    logits_[1] = 10;
  }
  const ModelConfig& config() const override { return config_; }
  std::string device_name() const override { return "slow"; }
  int context_size() const override { return 1024; }
  int position() const override { return position_; }
  std::span<const float> prefill(std::span<const int32_t> tokens) override {
    prefilled += int(tokens.size());
    position_ += int(tokens.size());
    return logits_;
  }
  void prefill_all_logits(std::span<const int32_t>, std::vector<float>&) override { fail("unused"); }
  std::span<const float> decode(int32_t) override {
    std::this_thread::sleep_for(step_);
    ++position_;
    return logits_;
  }
  void truncate(int n) override { position_ = n; }
  void fill_cache_with_noise(int n) override { position_ = n; }
  uint64_t kv_bytes_per_token() const override { return 0; }
  std::atomic<int> prefilled{0};

 private:
  std::chrono::milliseconds step_;
  ModelConfig config_;
  int position_ = 0;
  std::vector<float> logits_;
};

GenerationRequest request(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.token_bytes = [](int32_t) { return std::string_view("x"); };
  return r;
}

std::shared_ptr<GenerationJob> job(std::vector<int32_t> prompt, int max_tokens,
                                   std::chrono::milliseconds deadline = 10s) {
  return std::make_shared<GenerationJob>(request(std::move(prompt), max_tokens),
                                         GenerationJob::Clock::now() + deadline);
}

void wait_done(GenerationJob& j) {
  GenerationJob::Update u;
  for (int i = 0; i < 500 && j.wait(20ms, u) != GenerationJob::State::Done; ++i) {
  }
  ASSERT_EQ(j.wait(0ms, u), GenerationJob::State::Done);
}

TEST(Scheduler, RunsJobsInArrivalOrderAndStreamsText) {
  SlowEngine engine(1ms);
  std::vector<int> order;
  std::mutex m;
  Scheduler scheduler(engine, 8, [&](const GenerationJob& j) {
    std::lock_guard lock(m);
    order.push_back(int(j.request().prompt.size()));
  });
  auto a = job({0, 0}, 5), b = job({0, 0, 0}, 5), c = job({2}, 5);
  ASSERT_TRUE(scheduler.submit(a));
  ASSERT_TRUE(scheduler.submit(b));
  ASSERT_TRUE(scheduler.submit(c));
  GenerationJob::Update streamed;
  while (a->wait(50ms, streamed) != GenerationJob::State::Done) {
  }
  EXPECT_EQ(streamed.text, "xxxxx");
  EXPECT_TRUE(streamed.logprobs.empty());  // not asked for
  wait_done(*b);
  wait_done(*c);
  scheduler.stop();  // on_done runs after a job is done: join the worker before reading `order`
  EXPECT_EQ(order, (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(a->result().tokens.size(), 5u);
  EXPECT_GE(a->first_token_seconds(), 0.0);
}

TEST(Scheduler, StreamsLogprobsWithTheText) {
  SlowEngine engine(1ms);
  Scheduler scheduler(engine, 4);
  GenerationRequest r = request({0, 0}, 6);
  r.logprobs = 2;
  auto j = std::make_shared<GenerationJob>(std::move(r), GenerationJob::Clock::now() + 10s);
  ASSERT_TRUE(scheduler.submit(j));
  GenerationJob::Update u;
  while (j->wait(50ms, u) != GenerationJob::State::Done) {
    // A token's logprob is handed over before its text: never fewer logprobs than characters.
    EXPECT_GE(u.logprobs.size(), u.text.size());
  }
  EXPECT_EQ(u.text, "xxxxxx");
  ASSERT_EQ(u.logprobs.size(), 6u);
  EXPECT_TRUE(u.prompt_logprobs.empty());
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(u.logprobs[i].token, j->result().tokens[i]);
    EXPECT_EQ(u.logprobs[i].top.size(), 2u);
  }
}

TEST(Scheduler, BoundedQueueRefusesWhenFull) {
  SlowEngine engine(20ms);
  Scheduler scheduler(engine, 2);
  auto running = job({0}, 50);
  ASSERT_TRUE(scheduler.submit(running));
  while (scheduler.running() == 0) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(scheduler.submit(job({0}, 1)));
  EXPECT_TRUE(scheduler.submit(job({0}, 1)));
  EXPECT_FALSE(scheduler.submit(job({0}, 1)));
  EXPECT_EQ(scheduler.queued(), 2u);
  running->cancel();
}

TEST(Scheduler, GroupIsQueuedWholeOrNotAtAllAndRunsBackToBack) {
  SlowEngine engine(20ms);
  Scheduler scheduler(engine, 3);
  auto running = job({0}, 50);
  ASSERT_TRUE(scheduler.submit(running));
  while (scheduler.running() == 0) std::this_thread::sleep_for(1ms);
  auto lone = job({0}, 1);
  ASSERT_TRUE(scheduler.submit(lone));
  // Three choices do not fit beside the one queued job: none of them is queued.
  EXPECT_FALSE(scheduler.submit({job({0}, 1), job({0}, 1), job({0}, 1)}));
  EXPECT_EQ(scheduler.queued(), 1u);
  running->cancel();
  wait_done(*lone);
  // Two do, and run in their order; the second finds the shared prompt in the cache.
  const std::vector<std::shared_ptr<GenerationJob>> group = {job({3, 3, 3, 3}, 2), job({3, 3, 3, 3}, 2)};
  ASSERT_TRUE(scheduler.submit(group));
  wait_done(*group[1]);
  wait_done(*group[0]);
  EXPECT_EQ(group[0]->result().tokens.size(), 2u);
  EXPECT_EQ(group[1]->result().tokens.size(), 2u);
  EXPECT_EQ(group[1]->result().reused_tokens, 3);  // all but the last prompt token, whose logits are needed
}

TEST(Scheduler, CancelStopsARunningJob) {
  SlowEngine engine(5ms);
  Scheduler scheduler(engine, 4);
  auto j = job({0}, 10000);
  ASSERT_TRUE(scheduler.submit(j));
  GenerationJob::Update u;
  while (u.text.empty()) j->wait(50ms, u);
  j->cancel();
  wait_done(*j);
  EXPECT_EQ(j->result().finish, FinishReason::Cancelled);
  EXPECT_LT(j->result().tokens.size(), 1000u);
}

TEST(Scheduler, DeadlineDropsQueuedJobAndStopsRunningOne) {
  SlowEngine engine(10ms);
  Scheduler scheduler(engine, 4);
  auto slow = job({0}, 10000, 150ms);  // stops itself at its deadline
  auto queued = job({0}, 5, 50ms);    // expires while the first one runs
  ASSERT_TRUE(scheduler.submit(slow));
  ASSERT_TRUE(scheduler.submit(queued));
  wait_done(*slow);
  wait_done(*queued);
  EXPECT_EQ(slow->result().finish, FinishReason::Cancelled);
  ASSERT_TRUE(queued->error());
  EXPECT_EQ(queued->error()->status(), 503);
}

TEST(Scheduler, WithdrawOnlyBeforeStart) {
  auto j = job({0}, 1);
  EXPECT_TRUE(j->withdraw());
  EXPECT_FALSE(j->start());  // the worker then skips it
  auto k = job({0}, 1);
  EXPECT_TRUE(k->start());
  EXPECT_FALSE(k->withdraw());
}

TEST(Scheduler, ExtendedPromptOnlyPrefillsTheNewPart) {
  SlowEngine engine(0ms);
  Scheduler scheduler(engine, 4);
  auto first = job({0, 2, 3, 2}, 2);
  ASSERT_TRUE(scheduler.submit(first));
  wait_done(*first);
  const int before = engine.prefilled;
  // The first prompt, its two generated tokens and one more. The cache holds the prompt and the first
  // generated token (the last sampled token was never run through the model).
  auto second = job({0, 2, 3, 2, 1, 1, 3}, 2);
  ASSERT_TRUE(scheduler.submit(second));
  wait_done(*second);
  EXPECT_EQ(second->result().reused_tokens, 5);
  EXPECT_EQ(engine.prefilled - before, 2);
}

// stop() cancels the running job and the queued ones. Their deadlines are an hour away, so a stop()
// that did not cancel would wait on 100,000 slow steps (the test's time limit fails it), not on a
// deadline; the running job ends as cancelled and the queued one with the cancellation error.
TEST(Scheduler, StopCancelsEverything) {
  SlowEngine engine(5ms);
  auto scheduler = std::make_unique<Scheduler>(engine, 4);
  auto running = job({0}, 100000, 1h), queued = job({0}, 5, 1h);
  ASSERT_TRUE(scheduler->submit(running));
  ASSERT_TRUE(scheduler->submit(queued));
  GenerationJob::Update u;  // the first job runs (has drawn a token) before stop()
  for (int i = 0; i < 500 && u.text.empty(); ++i) running->wait(20ms, u);
  ASSERT_FALSE(u.text.empty());
  scheduler->stop();
  wait_done(*running);
  wait_done(*queued);
  EXPECT_EQ(running->result().finish, FinishReason::Cancelled);
  EXPECT_LT(running->result().tokens.size(), 100000u);
  ASSERT_TRUE(queued->error().has_value());
  EXPECT_STREQ(queued->error()->what(), "the request was cancelled");
  EXPECT_EQ(queued->error()->status(), 503);
  EXPECT_FALSE(scheduler->submit(job({0}, 1)));
}

}  // namespace
}  // namespace megaqwen::server
