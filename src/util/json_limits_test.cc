#include "util/json_limits.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort {
namespace {

TEST(JsonDepth, AcceptsNestingUpToTheLimit) {
  EXPECT_TRUE(checkJsonDepth(std::string(64, '[') + std::string(64, ']')));
  EXPECT_TRUE(checkJsonDepth(R"({"a": [{"b": [1, 2]}], "c": {}})", 4));
  EXPECT_FALSE(checkJsonDepth(R"({"a": [{"b": [1, 2]}], "c": {}})", 3));
  EXPECT_TRUE(checkJsonDepth(""));
}

TEST(JsonDepth, RefusesDeeperNestingWithItsOffset) {
  auto deep = checkJsonDepth(std::string(100000, '['));
  ASSERT_FALSE(deep);
  EXPECT_EQ(deep.error().code, Code::kInvalidArgument);
  EXPECT_EQ(deep.error().message, "JSON nested deeper than 64 levels at byte 64");
  EXPECT_EQ(jsonTooDeepAt(R"({"a": {"b": 1}})", 1), 6u);
  EXPECT_EQ(jsonTooDeepAt(R"({"a": {"b": 1}})", 2), std::string_view::npos);
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(checkJsonDepth(R"(["[[[[", "\"[[[[", "{{{{\\"])", 1));
  EXPECT_FALSE(checkJsonDepth(R"(["\"", [[]]])", 2));
}

TEST(JsonDepth, ClosingBracketsBeforeOpeningOnesDoNotHideDepth) {
  EXPECT_FALSE(checkJsonDepth("]]]]" + std::string(5, '['), 4));
}

}  // namespace
}  // namespace cohort
