#include "cli/command.h"

#include <cstdio>

#include "cli/args.h"

namespace cohort::cli {

namespace {

constexpr size_t kSummaryColumn = 53;
constexpr size_t kWidth = 100;

}  // namespace

int failWith(const char* command, int code, const std::string& message) {
  std::fprintf(stderr, "cohort %s: %s\n", command, message.c_str());
  return code;
}

std::string commandLines(const std::vector<Command>& commands, Command::Group group) {
  std::string out;
  for (const Command& c : commands) {
    if (c.group != group || c.summary.empty()) continue;
    out += besideColumn("  cohort " + c.usage, c.summary, kSummaryColumn, kWidth);
  }
  return out;
}

}  // namespace cohort::cli
