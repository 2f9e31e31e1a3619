// The Python str methods used by the templates, against results checked with Python 3.
#include <gtest/gtest.h>

#include "megaqwen/chat/python_string.h"

namespace megaqwen::python {
namespace {

TEST(PythonString, StripChars) {
  EXPECT_EQ(lstrip("\n\nab\n", "\n"), "ab\n");
  EXPECT_EQ(rstrip("\nab\n\n", "\n"), "\nab");
  EXPECT_EQ(strip("\n a \n", "\n"), " a ");
  EXPECT_EQ(strip("\n\n", "\n"), "");
  EXPECT_EQ(strip("", "\n"), "");
}

TEST(PythonString, StripWhitespaceKnowsUnicode) {
  // " \u3000\u00a0x y\u2028\x1c\t".strip() == "x y"
  EXPECT_EQ(strip_whitespace(" \xe3\x80\x80\xc2\xa0x y\xe2\x80\xa8\x1c\t"), "x y");
  // U+200B (zero width space) is not whitespace to Python.
  EXPECT_EQ(strip_whitespace("\xe2\x80\x8bx"), "\xe2\x80\x8bx");
  EXPECT_EQ(strip_whitespace(" \n "), "");
}

TEST(PythonString, Split) {
  EXPECT_EQ(split_first("a</think>b</think>c", "</think>"), "a");
  EXPECT_EQ(split_last("a</think>b</think>c", "</think>"), "c");
  EXPECT_EQ(split_first("abc", "</think>"), "abc");
  EXPECT_EQ(split_last("abc", "<think>"), "abc");
  EXPECT_EQ(split_last("x<think>", "<think>"), "");
}

}  // namespace
}  // namespace megaqwen::python
