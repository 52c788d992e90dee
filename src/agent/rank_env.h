// A rank's environment: the variables its node agent hands execve, and how a sandboxed rank
// gets them. Pure but for rankLaunch's memory file: the agent's own environment comes in as a
// list. Thread-safe.
//
// Two kinds of rank:
//  - On a user's own machine without the sandbox (`cohort run` without --isolate) a rank runs
//    the user's code as the user, in the user's shell's environment: it inherits the agent's
//    environment (which is `cohort run`'s), with the job's and cohort's variables over it, less
//    the job's secret and the store's settings (COHORT_JOB_SECRET, COHORT_STORE*).
//  - A rank in the sandbox or run as an account's own user (every job of `cohort server`) gets
//    nothing of the agent's environment, which is the server's: only the plan's variables (the
//    job file's `env`, its environment's, cohort's and the framework's), over a small base that
//    cohort sets itself (kBaseVariables, docs/security.md), plus the GPUs the server gave the
//    job (CUDA_VISIBLE_DEVICES) when the plan does not name one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.h"
#include "util/fd.h"
#include "util/result.h"

namespace cohort::agent {

// The base of a rank that does not inherit: each name with cohort's value for it (HOME is the
// node's work directory, COHORT_WORK_DIR, set apart).
inline constexpr std::pair<const char*, const char*> kBaseVariables[] = {
    {"PATH", "/usr/local/bin:/usr/bin:/bin"},
    {"LANG", "C.UTF-8"},
    {"TERM", "dumb"},
};

// What such a rank still takes from the agent's environment where the plan says nothing of it:
// the GPUs the server gave the job (none: an empty value, which hides every GPU from CUDA).
inline constexpr const char* kKeptFromTheAgent[] = {"CUDA_VISIBLE_DEVICES"};

// Whether `rank` inherits the agent's environment (a rank of the user's own, unsandboxed).
bool inheritsEnvironment(const plan::RankPlan& rank);

// The environment ("KEY=VALUE" each, every name once) of `rank` in restart `attempt`
// (COHORT_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT say it), given the agent's own
// environment `inherited` ("KEY=VALUE" each, as environ holds it).
std::vector<std::string> rankEnvironment(const plan::RankPlan& rank, int attempt,
                                         const std::vector<std::string_view>& inherited);

// bubblewrap's arguments that give what it runs exactly `env` ("KEY=VALUE" each): "--clearenv",
// then "--setenv", KEY, VALUE for each, NUL-separated, as `--args FD` reads them.
std::string sandboxArguments(const std::vector<std::string>& env);

// What the agent hands spawn for `rank`: the environment execve gets and, for a sandboxed rank
// (plan/isolation.cc), the descriptor bubblewrap reads the rank's own from (a memory file, read
// from its start; kSandboxArgsFd in the child), the environment being then only cohort's
// (plan::kSandboxLauncherEnvironment). Errors: kIo when the memory file cannot be made.
struct RankLaunch {
  std::vector<std::string> env;
  UniqueFd sandbox_args;  // invalid unless sandboxed
};
Result<RankLaunch> rankLaunch(const plan::RankPlan& rank, int attempt,
                              const std::vector<std::string_view>& inherited);

// This process's environment, for rankEnvironment.
std::vector<std::string_view> processEnvironment();

}  // namespace cohort::agent
