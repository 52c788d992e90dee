#include "cli/args.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <sstream>

#include "cli/cli.h"
#include "cli/job_options.h"
#include "util/text.h"

namespace cohort::cli {
namespace {

const std::vector<FlagSpec> kSpecs = {
    {"--nproc-per-node", "--nproc_per_node", "N", "processes per node"},
    {"--follow", "-f", "", "keep printing"},
    {"--env", "", "KEY=VALUE", "a variable (repeatable)"},
    {"--internal", "", "X", ""},
};

Result<Args> parse(std::vector<std::string> words, ParseMode mode = ParseMode::kPositionals) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return parseArgs("demo", static_cast<int>(argv.size()), argv.data(), kSpecs, mode, 0);
}

TEST(ParseArgs, EverySpellingLandsUnderTheFlagsOneNameInOrder) {
  auto a = parse({"--nproc_per_node=2", "-f", "JOB", "--env", "A=1", "--env=B=2", "--",
                  "--follow"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->get("--nproc-per-node"), "2");
  EXPECT_TRUE(a->has("--follow"));
  EXPECT_EQ(a->all("--env"), (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(a->positional, (std::vector<std::string>{"JOB", "--follow"}));
  ASSERT_EQ(a->given.size(), 4u);
  EXPECT_EQ(a->given[0].spelled, "--nproc_per_node");
  EXPECT_EQ(a->given[0].name, "--nproc-per-node");
  EXPECT_EQ(a->given[1].spelled, "-f");
}

TEST(ParseArgs, TheFirstWordThatIsNoFlagStartsTheCommand) {
  auto a = parse({"-f", "python3", "train.py", "--follow"}, ParseMode::kCommandAfterFlags);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->command, (std::vector<std::string>{"python3", "train.py", "--follow"}));
  EXPECT_FALSE(a->command_after_dashes);
  EXPECT_EQ(a->flags.size(), 1u);
  a = parse({"--", "job.yaml"}, ParseMode::kCommandAfterFlags);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->command, (std::vector<std::string>{"job.yaml"}));
  EXPECT_TRUE(a->command_after_dashes);
}

TEST(ParseArgs, MistakesNameTheFlagAndTheHelp) {
  struct Case {
    std::vector<std::string> words;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--folow"}, "demo: unknown flag '--folow': did you mean --follow? (see cohort demo --help)"},
           {{"--nproc-per-nod", "2"},
            "demo: unknown flag '--nproc-per-nod': did you mean --nproc-per-node? (see cohort "
            "demo --help)"},
           {{"--frobnicate"}, "demo: unknown flag '--frobnicate' (see cohort demo --help)"},
           {{"--env"}, "demo: --env needs a value (see cohort demo --help)"},
           {{"--follow=yes"}, "demo: --follow takes no value (see cohort demo --help)"},
       }) {
    auto a = parse(c.words);
    ASSERT_FALSE(a) << c.words[0];
    EXPECT_EQ(a.error().code, Code::kInvalidArgument);
    EXPECT_EQ(a.error().message, c.message);
  }
}

// The parser reads what anyone types: random words made of flag-like pieces either parse or give
// an invalid_argument naming the command, never anything else, and every value given is kept.
TEST(ParseArgs, RandomCommandLinesParseOrAreRefusedCleanly) {
  const std::vector<std::string> pieces = {
      "--nproc-per-node", "--nproc_per_node", "-f", "--follow", "--env", "--internal", "--",
      "-", "=", "--=", "--env=", "--follow=", "-x", "--nproc", "A=1", "", "train.py", "-ff",
      "--folow", "\xff\xfe", std::string(300, '-'), "--nproc-per-node=3=4"};
  std::mt19937 random(42);
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::string> words(random() % 8);
    for (std::string& w : words) {
      w = pieces[random() % pieces.size()];
      if (random() % 4 == 0) w += pieces[random() % pieces.size()];
    }
    const ParseMode mode =
        random() % 2 ? ParseMode::kPositionals : ParseMode::kCommandAfterFlags;
    auto a = parse(words, mode);
    if (!a) {
      EXPECT_EQ(a.error().code, Code::kInvalidArgument);
      EXPECT_EQ(a.error().message.rfind("demo: ", 0), 0u) << a.error().message;
      continue;
    }
    size_t values = 0;
    for (const auto& [name, given] : a->flags) values += given.size();
    EXPECT_EQ(values, a->given.size());
    EXPECT_LE(a->given.size() + a->positional.size() + a->command.size(), words.size());
  }
}

TEST(FlagsHelp, ShowsEveryFlagWithHelpOnceWrappedInItsColumn) {
  const std::string help = flagsHelp(kSpecs);
  EXPECT_NE(help.find("  --nproc-per-node N       processes per node\n"), std::string::npos)
      << help;
  EXPECT_NE(help.find("  -f, --follow             keep printing\n"), std::string::npos) << help;
  EXPECT_EQ(help.find("--internal"), std::string::npos) << help;
  const std::string long_help = flagsHelp(
      {{"--a-rather-long-flag-name", "", "VALUE", std::string(40, 'x') + " " +
                                                       std::string(40, 'y') + " " +
                                                       std::string(40, 'z')}});
  for (const std::string& line : split(long_help, '\n')) {
    EXPECT_LE(line.size(), 95u) << line;
  }
}

// The table of commands is what cohort --help lists, and each one has help of its own that
// names it; no name is declared twice.
TEST(Commands, EachIsDeclaredOnceAndListedWithItsHelp) {
  std::set<std::string> names;
  const std::string here = commandLines(commands(), Command::Group::kHere);
  const std::string server = commandLines(commands(), Command::Group::kServer);
  for (const Command& c : commands()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name << " is declared twice";
    EXPECT_TRUE(c.run) << c.name;
    if (c.group == Command::Group::kInternal) continue;
    const std::string& lines = c.group == Command::Group::kHere ? here : server;
    EXPECT_NE(lines.find("  cohort " + c.name), std::string::npos) << c.name;
    EXPECT_NE(c.help().find("cohort " + c.name), std::string::npos) << c.name;
    EXPECT_EQ(findCommand(c.name), &c);
  }
  EXPECT_EQ(findCommand("frobnicate"), nullptr);
  EXPECT_EQ(nearestName("submt", {"run", "submit", "status"}), "submit");
  EXPECT_EQ(nearestName("frobnicate", {"run", "submit", "status"}), "");
  EXPECT_EQ(nearestName("--nodse", {"--mode", "--nodes"}), "--nodes");  // two letters swapped
}

// Every flag of run, plan and submit is in the help exactly when it has help to show, under one
// name; torchrun's spellings are in the paragraph about them.
TEST(Commands, JobFlagsAreEachDeclaredOnce) {
  std::set<std::string> seen;
  for (const FlagSpec& f : jobFlagSpecs()) {
    EXPECT_TRUE(seen.insert(f.name).second) << f.name;
    if (!f.alias.empty()) {
      EXPECT_TRUE(seen.insert(f.alias).second) << f.alias;
    }
    const std::string help = jobFlagsHelp("run") + jobOutputFlagsHelp("run") +
                             jobOutputFlagsHelp("plan");
    if (!f.help.empty()) {
      EXPECT_NE(help.find("  " + (f.alias.size() == 2 ? f.alias + ", " : "") + f.name),
                std::string::npos)
          << f.name;
    }
  }
}

}  // namespace
}  // namespace cohort::cli
