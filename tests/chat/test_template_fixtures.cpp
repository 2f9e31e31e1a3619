// Every case of tests/fixtures/chat/<template>_cases.json (made by tools/make_template_fixtures.py from
// the real Jinja templates) rendered natively and compared byte for byte; where Jinja fails, an Error
// is expected, with the template's own message where it calls raise_exception.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "megaqwen/chat/chat_template.h"
#include "megaqwen/util/error.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

using nlohmann::ordered_json;

struct FixtureCase {
  std::string name;
  std::filesystem::path model_dir;  // the folder whose template rendered the case
  ordered_json json;
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const FixtureCase& c, std::ostream* os) { *os << c.name; }

std::vector<FixtureCase> load_cases(const std::string& file) {
  std::ifstream in(test::fixtures_dir() / "chat" / file);
  if (!in) return {};  // the test below reports the missing file
  const ordered_json all = ordered_json::parse(in);
  const auto model_dir = test::shared_dir() / "models" / all.at("model").get<std::string>();
  std::vector<FixtureCase> cases;
  for (const auto& c : all.at("cases")) cases.push_back({c.at("name").get<std::string>(), model_dir, c});
  return cases;
}

// Where two renders first differ, with a little context of each, escaped so newlines show.
std::string describe_difference(const std::string& expected, const std::string& actual) {
  const auto e = std::mismatch(expected.begin(), expected.end(), actual.begin(), actual.end()).first;
  const std::size_t at = static_cast<std::size_t>(e - expected.begin());
  const std::size_t line = 1 + static_cast<std::size_t>(std::count(expected.begin(), e, '\n'));
  auto excerpt = [at](const std::string& text) {
    const std::size_t begin = at > 30 ? at - 30 : 0;
    return ordered_json(text.substr(begin, 70)).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  };
  std::ostringstream out;
  out << "first difference at byte " << at << " (line " << line << ") of " << expected.size() << " expected, "
      << actual.size() << " actual bytes\n  expected ..." << excerpt(expected) << "\n  actual   ..." << excerpt(actual);
  return out.str();
}

// The Error message of rendering `request`, or nullopt when it renders.
std::optional<std::string> render_error(const ChatTemplate& chat, const ordered_json& request) {
  try {
    chat.render(request);
  } catch (const Error& e) {
    return e.what();
  }
  return std::nullopt;
}

class TemplateFixture : public testing::TestWithParam<FixtureCase> {};

TEST_P(TemplateFixture, RendersLikeJinja) {
  const ChatTemplate chat = ChatTemplate::load(GetParam().model_dir);
  const ordered_json& c = GetParam().json;
  const ordered_json& request = c.at("request");
  if (c.contains("expected") && !c.value("refused", false)) {
    const std::string expected = c.at("expected").get<std::string>();
    const std::string actual = chat.render(request);
    EXPECT_TRUE(actual == expected) << describe_difference(expected, actual);
    return;
  }
  const std::optional<std::string> error = render_error(chat, request);
  ASSERT_TRUE(error.has_value()) << (c.contains("error") ? "Jinja fails with " + c.at("error").dump()
                                                        : std::string("megaqwen refuses this request on purpose"));
  // raise_exception('...') in the template: the same words (refused requests fail earlier, in our words).
  constexpr std::string_view kRaised = "TemplateError: ";
  const std::string jinja_error = c.value("error", "");
  if (jinja_error.starts_with(kRaised) && !c.value("refused", false)) {
    EXPECT_EQ(*error, jinja_error.substr(kRaised.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Qwen3, TemplateFixture, testing::ValuesIn(load_cases("qwen3_cases.json")),
                         [](const testing::TestParamInfo<FixtureCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Qwen3_5, TemplateFixture, testing::ValuesIn(load_cases("qwen3_5_cases.json")),
                         [](const testing::TestParamInfo<FixtureCase>& info) { return info.param.name; });

TEST(TemplateFixtures, FilesHaveTheCases) {
  // Guards against an empty or missing fixture file making the suites above vacuous.
  EXPECT_GE(load_cases("qwen3_cases.json").size(), 40u);
  EXPECT_GE(load_cases("qwen3_5_cases.json").size(), 40u);
}

}  // namespace
}  // namespace megaqwen
