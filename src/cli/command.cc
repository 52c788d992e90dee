#include "cli/command.h"

#include "cli/args.h"

namespace cohort::cli {

namespace {

constexpr size_t kSummaryColumn = 53;
constexpr size_t kWidth = 100;

}  // namespace

std::string commandLines(const std::vector<Command>& commands, Command::Group group) {
  std::string out;
  for (const Command& c : commands) {
    if (c.group != group || c.summary.empty()) continue;
    out += besideColumn("  cohort " + c.usage, c.summary, kSummaryColumn, kWidth);
  }
  return out;
}

}  // namespace cohort::cli
