// One command of `cohort`, declared once: its name, its line in `cohort --help`, its own help
// and what runs it. cli.cc holds the table of every command (client_cmd.h adds the server's);
// from that one table come `cohort --help`, `cohort help NAME` and `cohort NAME --help`, the
// "did you mean" for a mistyped command, and the dispatch. Pure data; any thread.
//
// To add a command: write its `int cmdName(int argc, char** argv)` (argv[1] is the command's
// name; parse its flags with parseArgs over its one FlagSpec list, args.h) and a help function
// that shows those flags with flagsHelp(); then add one Command to the table in cli.cc (or to
// clientCommands() in client_cmd.cc for a command that speaks to a server).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cohort::cli {

struct Command {
  enum class Group {
    kHere,      // listed under "Usage:" in cohort --help
    kServer,    // listed under "Server commands"
    kInternal,  // started by cohort itself; not listed
  };
  std::string name;
  // Its line in cohort --help: the usage after "cohort " ("logs JOB [--rank R] [-f]") and
  // what it does.
  std::string usage, summary;
  Group group = Group::kHere;
  std::function<std::string()> help;  // what `cohort NAME --help` prints
  // Runs it with argv[1] == name; returns the exit code.
  std::function<int(int argc, char** argv)> run;
  // Whether run() answers -h/--help itself (a subcommand's verbs); else cohort answers any -h or
  // --help before "--" with help().
  bool reads_help = false;
};

// Prints "cohort COMMAND: MESSAGE" on stderr and returns `code`: how a command ends with an
// error it has already worded.
int failWith(const char* command, int code, const std::string& message);

// The lines of `commands` in `group` for cohort --help: "  cohort USAGE   SUMMARY", the
// summaries in one column (wrapped beneath it when long).
std::string commandLines(const std::vector<Command>& commands, Command::Group group);

}  // namespace cohort::cli
