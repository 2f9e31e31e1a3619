// Metrics: the Prometheus text carries every family with HELP and TYPE, counts add up, and the
// time-to-first-token histogram is cumulative.
#include "megaqwen/server/metrics.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>

namespace megaqwen::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

TEST(Metrics, CountsRequestsByEndpointAndStatus) {
  Metrics m;
  m.record_request("/v1/chat/completions", 200);
  m.record_request("/v1/chat/completions", 200);
  m.record_request("/v1/chat/completions", 400);
  const std::string text = m.render(3, 1);
  EXPECT_TRUE(has_line(text, "megaqwen_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "megaqwen_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1"));
  EXPECT_TRUE(has_line(text, "megaqwen_queue_depth 3"));
  EXPECT_TRUE(has_line(text, "megaqwen_requests_running 1"));
}

TEST(Metrics, TokensAndTimeToFirstTokenHistogram) {
  Metrics m;
  m.record_generation({10, 4, 5, 0.02, 0.4, false});   // bucket le=0.025
  m.record_generation({20, 0, 9, 3.0, 0.8, true});     // bucket le=5
  m.record_generation({7, 0, 0, -1, 0, true});         // no token: not in the histogram
  const std::string text = m.render(0, 0);
  EXPECT_TRUE(has_line(text, "megaqwen_prompt_tokens_total 37")) << text;
  EXPECT_TRUE(has_line(text, "megaqwen_cached_prompt_tokens_total 4"));
  EXPECT_TRUE(has_line(text, "megaqwen_generated_tokens_total 14"));
  EXPECT_TRUE(has_line(text, "megaqwen_generations_total 3"));
  EXPECT_TRUE(has_line(text, "megaqwen_generations_cancelled_total 2"));
  EXPECT_TRUE(has_line(text, "megaqwen_decode_tokens_per_second 10.000"));  // the last with > 1 token: 8 / 0.8
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_bucket{le=\"0.01\"} 0"));
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_bucket{le=\"0.025\"} 1"));
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_bucket{le=\"2.5\"} 1"));
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_bucket{le=\"5\"} 2"));
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2"));
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_count 2"));
  EXPECT_TRUE(has_line(text, "megaqwen_time_to_first_token_seconds_sum 3.020000"));
}

// The exposition format: every family has a non-empty "# HELP name text" and a "# TYPE name type"
// before its samples, and every sample's name is its family's (plus _bucket/_sum/_count for a
// histogram), not merely a name that starts with it.
TEST(Metrics, EveryFamilyHasHelpAndType) {
  const std::string text = Metrics().render(0, 0);
  std::istringstream in(text);
  std::map<std::string, std::string> help, type;
  std::string family;  // the family of the latest TYPE line
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      const size_t name_end = line.find(' ', 7);
      ASSERT_NE(name_end, std::string::npos) << line;
      const std::string name = line.substr(7, name_end - 7), rest = line.substr(name_end + 1);
      EXPECT_FALSE(rest.empty()) << line;
      if (line[2] == 'H') {
        EXPECT_TRUE(help.emplace(name, rest).second) << "second HELP for " << name;
      } else {
        EXPECT_TRUE(type.emplace(name, rest).second) << "second TYPE for " << name;
        EXPECT_TRUE(rest == "counter" || rest == "gauge" || rest == "histogram") << line;
        family = name;
      }
      continue;
    }
    ASSERT_FALSE(line.starts_with("#")) << "unknown comment: " << line;
    ASSERT_FALSE(family.empty()) << "a sample before any TYPE: " << line;
    std::string name = line.substr(0, line.find_first_of("{ "));
    if (type[family] == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (name.ends_with(suffix) && name.size() - std::strlen(suffix) == family.size()) {
          name.resize(family.size());
          break;
        }
    }
    EXPECT_EQ(name, family) << line;
    EXPECT_TRUE(help.contains(family)) << "no HELP before the samples of " << family;
    ++samples;
  }
  EXPECT_GT(samples, 5);
  for (const auto& [name, kind] : type) EXPECT_TRUE(help.contains(name)) << name << " has a TYPE but no HELP";
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace megaqwen::server
