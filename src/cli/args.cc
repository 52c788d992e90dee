#include "cli/args.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "util/text.h"

namespace cohort::cli {

std::string dataRoot(const std::string& flag) {
  const char* env_root = std::getenv("COHORT_DATA_ROOT");
  const char* home = std::getenv("HOME");
  std::string root = !flag.empty()           ? flag
                     : env_root && *env_root ? std::string(env_root)
                                             : std::string(home ? home : "/tmp") + "/.cohort";
  if (root[0] == '/') return root;
  char cwd[4096];
  return std::string(::getcwd(cwd, sizeof cwd) ? cwd : "/") + "/" + root;
}

int exitCodeFor(const Error& e) {
  switch (e.code) {
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
    case Code::kUnauthenticated:
    case Code::kPermissionDenied:
    case Code::kTooLarge:
      return kExitUsage;
    default:
      return kExitFailed;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = flags.find(name);
  return it == flags.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = flags.find(name);
  return it == flags.end() ? std::vector<std::string>{} : it->second;
}

Result<Args> parseArgs(const std::string& command, int argc, char** argv,
                       const std::vector<FlagSpec>& specs, ParseMode mode, int first) {
  auto usage = [&](const std::string& message) {
    return fail(Code::kInvalidArgument,
                command + ": " + message + " (see cohort " + command + " --help)");
  };
  Args args;
  bool flags_done = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      if (mode == ParseMode::kCommandAfterFlags) {
        args.command_after_dashes = flags_done;
        args.command.assign(argv + i, argv + argc);
        break;
      }
      args.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      if (mode == ParseMode::kCommandAfterFlags) {
        args.command_after_dashes = true;
        args.command.assign(argv + i + 1, argv + argc);
        break;
      }
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); startsWith(arg, "--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.names(arg)) {
        spec = &s;
        break;
      }
    }
    if (!spec) {
      const std::string near = nearestName(arg, flagNames(specs));
      return usage("unknown flag '" + arg + "'" +
                   (near.empty() ? "" : ": did you mean " + near + "?"));
    }
    if (spec->takesValue()) {
      if (!inline_value) {
        if (i + 1 >= argc) return usage(arg + " needs a value");
        value = argv[++i];
      }
    } else if (inline_value) {
      return usage(arg + " takes no value");
    }
    args.flags[spec->name].push_back(value);
    args.given.push_back({spec->name, arg, value});
  }
  return args;
}

namespace {

// Where a flag's help starts, and how wide the help is.
constexpr size_t kHelpColumn = 27;
constexpr size_t kHelpWidth = 95;

// Edits from `a` to `b`: a character inserted, deleted, changed, or two neighbours swapped
// ("--nodse" is one from "--nodes").
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string besideColumn(const std::string& left, const std::string& text, size_t column,
                         size_t width) {
  std::string out, line = left;
  const std::string indent(column, ' ');
  if (line.size() + 2 > column) {
    // Two spaces after a wide left side when that leaves room, else the next line.
    if (line.size() + 2 + 20 > width) {
      out += line + "\n";
      line = indent;
    } else {
      line += "  ";
    }
  } else {
    line.resize(column, ' ');
  }
  bool first_word = true;
  for (const std::string& text_line : split(text, '\n')) {
    for (const std::string& word : split(text_line, ' ')) {
      if (word.empty()) continue;
      if (!first_word && line.size() + 1 + word.size() > width) {
        out += line + "\n";
        line = indent;
        first_word = true;
      }
      if (!first_word) line += " ";
      line += word;
      first_word = false;
    }
  }
  return out + line + "\n";
}

std::string flagsHelp(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    if (s.help.empty()) continue;
    std::string left = "  ";
    if (!s.alias.empty() && s.alias.size() == 2) left += s.alias + ", ";
    left += s.name;
    if (s.takesValue()) left += " " + s.value;
    out += besideColumn(left, s.help, kHelpColumn, kHelpWidth);
  }
  return out;
}

std::string nearestName(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  if (word.size() > 64) return best;  // no flag or command is that long
  size_t best_distance = 3;  // at most two edits away
  for (const std::string& name : known) {
    const size_t d = editDistance(word, name);
    if (d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> flagNames(const std::vector<FlagSpec>& specs) {
  std::vector<std::string> names;
  for (const FlagSpec& s : specs) {
    names.push_back(s.name);
    if (!s.alias.empty()) names.push_back(s.alias);
  }
  return names;
}

}  // namespace cohort::cli
