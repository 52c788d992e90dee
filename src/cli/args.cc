#include "cli/args.h"

#include <unistd.h>

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
                       const std::vector<FlagSpec>& specs) {
  auto usage = [&](const std::string& message) {
    return fail(Code::kInvalidArgument,
                command + ": " + message + " (see cohort " + command + " --help)");
  };
  Args args;
  bool flags_done = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      args.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
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
      if (arg == s.name || (!s.alias.empty() && arg == s.alias)) spec = &s;
    }
    if (!spec) return usage("unknown flag '" + arg + "'");
    if (spec->takes_value) {
      if (!inline_value) {
        if (i + 1 >= argc) return usage(arg + " needs a value");
        value = argv[++i];
      }
    } else if (inline_value) {
      return usage(arg + " takes no value");
    }
    args.flags[spec->name].push_back(value);
  }
  return args;
}

}  // namespace cohort::cli
