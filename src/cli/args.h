// Flags and positional arguments of a subcommand, parsed from the one list of the flags it takes
// (each declared once, with the help line that `--help` shows for it): "--name VALUE",
// "--name=VALUE", a short or second spelling ("-f", "--nproc_per_node"), repeated flags, and
// "--" ending the flags; an unknown flag names the nearest known one. Also the exit codes the
// subcommands share. Pure; any thread.
//
// Why our own parser and not CLI11 (Debian's libcli11-dev): cohort's help is prose written for
// a person, with flags grouped in sections between paragraphs and examples, which CLI11's
// formatter would replace with its own layout; torchrun's flags are accepted in three ways (the
// same as one of ours, accepted with a note, refused with the reason: cli/torchrun_flags.h),
// which CLI11 has no notion of; a command line's first word that is not a flag starts the
// ranks' command (as torchrun and mpirun have it), which CLI11 does not stop at; errors here are
// values (util/result.h) where CLI11 throws; and the whole parser is the loop in args.cc, which
// src/cli/args_test.cc feeds random command lines. What CLI11 would add that we use is none.
//
// To add a flag to a command: add one FlagSpec to that command's list (its name, its value's
// name for the help, or "" for a switch, and its help), then read it with Args::has/get/all.
// Its line in the command's --help, its "did you mean", and its parsing follow from that entry.
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
  std::string name;   // "--follow": the name Args keeps its values under
  std::string alias;  // another spelling: "-f", "--nproc_per_node"; or ""
  std::string value;  // the value's name in the help ("N", "FILE"); "" for a switch
  // Its help, wrapped beside the flag in --help; "" keeps the flag out of the help (flags that
  // cohort passes to itself, and other spellings listed elsewhere).
  std::string help;

  bool takesValue() const { return !value.empty(); }
  bool names(const std::string& flag) const {
    return flag == name || (!alias.empty() && flag == alias);
  }
};

struct Args {
  struct Given {
    std::string name;     // FlagSpec::name
    std::string spelled;  // as the command line spelled it ("--max_restarts")
    std::string value;    // "" for a switch
  };
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;  // by FlagSpec::name, every value given
  std::vector<Given> given;                               // every flag, in command-line order
  // With ParseMode::kCommandAfterFlags: the words from the first that is not a flag on, or
  // those after "--" (then `command_after_dashes`).
  std::vector<std::string> command;
  bool command_after_dashes = false;

  bool has(const std::string& name) const { return flags.count(name) > 0; }
  // The last value given, or `fallback`.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;
};

// --data-root's value, else $COHORT_DATA_ROOT, else $HOME/.cohort (as `cohort run` has it),
// made absolute.
std::string dataRoot(const std::string& flag);

enum class ParseMode {
  kPositionals,        // words that are not flags are positional, between flags too
  kCommandAfterFlags,  // the first word that is not a flag starts Args::command (cohort run)
};

// Parses argv[2..] (argv[1] is the subcommand). Errors (kInvalidArgument) name the flag and end
// with "(see cohort <command> --help)": an unknown flag (with the nearest known one when it is
// close), a missing value, a value given to a flag that takes none.
// `first` is where the flags start (2: after "cohort COMMAND").
Result<Args> parseArgs(const std::string& command, int argc, char** argv,
                       const std::vector<FlagSpec>& specs,
                       ParseMode mode = ParseMode::kPositionals, int first = 2);

// The "  --name VALUE    help" lines of `specs` for --help (those with a help), the help
// wrapped at 96 columns beside the flags; a flag too long for its column gets its help on the
// next line.
std::string flagsHelp(const std::vector<FlagSpec>& specs);

// `left`, then `text` beside it from `column` on, its words wrapped at `width` columns onto
// lines indented to `column`; a `left` too wide for its column puts `text` two spaces after it,
// or on the next line when that leaves too little room.
std::string besideColumn(const std::string& left, const std::string& text, size_t column,
                         size_t width);

// The nearest of `known` to `word` by spelling when it is at most two edits away (a typo:
// "--nproc-per-nod" -> "--nproc-per-node"), else "".
std::string nearestName(const std::string& word, const std::vector<std::string>& known);

// Every spelling of `specs`: what an unknown flag is compared with.
std::vector<std::string> flagNames(const std::vector<FlagSpec>& specs);

}  // namespace cohort::cli
