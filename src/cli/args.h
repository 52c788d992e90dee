// Flags and positional arguments of a subcommand, parsed from a table of the flags it takes:
// "--name VALUE", "--name=VALUE", a short alias ("-f"), repeated flags, and "--" ending the
// flags; and the exit codes the subcommands share. Pure; any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "util/result.h"

namespace cohort::cli {

// Exit codes every subcommand shares: 1 when something failed, 2 when the request itself was
// wrong (a bad flag, job file, token or name; something not found or not allowed).
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
int exitCodeFor(const Error& e);

struct FlagSpec {
  std::string name;   // "--follow"
  std::string alias;  // "-f" or ""
  bool takes_value = false;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;  // by FlagSpec::name, every value given

  bool has(const std::string& name) const { return flags.count(name) > 0; }
  // The last value given, or `fallback`.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;
};

// --data-root's value, else $COHORT_DATA_ROOT, else $HOME/.cohort (as `cohort run` has it),
// made absolute.
std::string dataRoot(const std::string& flag);

// Parses argv[2..] (argv[1] is the subcommand). Errors (kInvalidArgument) name the flag and end
// with "(see cohort <command> --help)": an unknown flag, a missing value, a value given to a
// flag that takes none.
Result<Args> parseArgs(const std::string& command, int argc, char** argv,
                       const std::vector<FlagSpec>& specs);

}  // namespace cohort::cli
