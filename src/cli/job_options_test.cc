#include "cli/job_options.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace cohort::cli {
namespace {

// cohort submit picks its own flags out of the job's with jobFlagTakesValue: every flag the
// help shows with a value ("--nodes N") must be one that takes a value, and the others not.
TEST(JobFlags, EveryFlagInTheHelpTakesAValueExactlyWhenTheHelpShowsOne) {
  std::istringstream help(jobFlagsHelp());
  const std::regex line(R"(^  (?:(-\w), )?(--[a-z_-]+)( [A-Z][A-Z|=a-z,\[\]]*)?\s)");
  int seen = 0;
  for (std::string text; std::getline(help, text);) {
    std::smatch m;
    if (!std::regex_search(text, m, line)) continue;
    ++seen;
    const bool shown_with_value = m[3].matched;
    EXPECT_EQ(jobFlagTakesValue(m[2]), shown_with_value) << text;
    if (m[1].matched) {
      EXPECT_EQ(jobFlagTakesValue(m[1]), shown_with_value) << text;
    }
  }
  EXPECT_GT(seen, 20);
}

}  // namespace
}  // namespace cohort::cli
