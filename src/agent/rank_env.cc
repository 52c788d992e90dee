#include "agent/rank_env.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "storage/place.h"

extern char** environ;

namespace cohort::agent {

namespace {

std::string_view nameOf(std::string_view entry) { return entry.substr(0, entry.find('=')); }

bool named(const plan::KeyValues& vars, std::string_view name) {
  return std::any_of(vars.begin(), vars.end(), [&](const auto& kv) { return kv.first == name; });
}

}  // namespace

bool inheritsEnvironment(const plan::RankPlan& rank) { return !rank.sandboxed && rank.uid < 0; }

std::vector<std::string> rankEnvironment(const plan::RankPlan& rank, int attempt,
                                         const std::vector<std::string_view>& inherited) {
  plan::KeyValues vars = rank.env;
  for (const char* name : plan::kRestartCountVars) {
    for (auto& kv : vars) {
      if (kv.first == name) kv.second = std::to_string(attempt);
    }
  }
  std::vector<std::string> env;
  if (inheritsEnvironment(rank)) {
    for (std::string_view entry : inherited) {
      const std::string_view key = nameOf(entry);
      // The job's secret and the server's store (its credentials) are cohort's, not the job's.
      if (key == "COHORT_JOB_SECRET" || storage::isSiteVariable(key) || named(vars, key)) continue;
      env.emplace_back(entry);
    }
  } else {
    for (const auto& [name, value] : kBaseVariables) {
      if (!named(vars, name)) env.push_back(std::string(name) + "=" + value);
    }
    if (!named(vars, "HOME")) {
      std::string home = "/";
      for (const auto& [k, v] : vars) {
        if (k == "COHORT_WORK_DIR") home = v;
      }
      env.push_back("HOME=" + home);
    }
    for (const char* name : kKeptFromTheAgent) {
      if (named(vars, name)) continue;
      for (std::string_view entry : inherited) {
        if (nameOf(entry) == name) env.emplace_back(entry);
      }
    }
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

std::string sandboxArguments(const std::vector<std::string>& env) {
  std::string args = "--clearenv";
  args.push_back('\0');
  for (const std::string& entry : env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    args += "--setenv";
    args.push_back('\0');
    args.append(entry, 0, eq);
    args.push_back('\0');
    args.append(entry, eq + 1);
    args.push_back('\0');
  }
  return args;
}

Result<RankLaunch> rankLaunch(const plan::RankPlan& rank, int attempt,
                              const std::vector<std::string_view>& inherited) {
  RankLaunch launch;
  launch.env = rankEnvironment(rank, attempt, inherited);
  if (!rank.sandboxed) return launch;
  const std::string args = sandboxArguments(launch.env);
  launch.env.assign(std::begin(plan::kSandboxLauncherEnvironment),
                    std::end(plan::kSandboxLauncherEnvironment));
  launch.sandbox_args.reset(::memfd_create("cohort-rank-env", MFD_CLOEXEC));
  if (!launch.sandbox_args.valid()) return failErrno("memfd_create");
  COHORT_TRY(writeAll(launch.sandbox_args.get(), args));
  if (::lseek(launch.sandbox_args.get(), 0, SEEK_SET) != 0) return failErrno("lseek");
  return launch;
}

std::vector<std::string_view> processEnvironment() {
  std::vector<std::string_view> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace cohort::agent
