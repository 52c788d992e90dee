// Whether the ranks' Python can import what the job needs, asked of that interpreter before
// anything starts. The interpreter is the one the ranks will run: the command's first word found
// on the PATH of the ranks' environment. It is asked, without running any of the job's code, to
// find each module that the program imports at its top level (unconditionally, before anything
// there changes sys.path), and the modules that cohort itself makes it import (the debugger, the
// preload launcher's modules, torchrun's torch). A module it cannot find is named with the
// interpreter it was missing from and another Python of this machine that has it.
//
// Runs processes (the interpreters); any thread. A privileged process (a server as root) asks
// only as the ranks' own identity, confined as they will be (PythonRanks::uid, confine): it
// never runs an interpreter a job chose as itself.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "proc/spawn.h"
#include "spec/job_spec.h"
#include "util/fd.h"
#include "util/result.h"

namespace cohort::env {

// A module the ranks' Python must import, one of `modules` being enough, and where it comes from.
struct PythonNeed {
  std::vector<std::string> modules;
  std::string field;    // the job file's field that asks for it ("debug", "launcher")
  std::string install;  // how to get it, e.g. "apt-get install python3-debugpy"
};

// The ranks as the check sees them.
struct PythonRanks {
  std::string path;              // the PATH of their environment
  std::vector<std::string> env;  // their environment, "KEY=VALUE" each
  std::string workdir;           // where they start (absolute)
  // Who they run as (-1: this process's user); the interpreters asked run so too, with no way
  // to gain privilege.
  int uid = -1;
  int gid = -1;
  // Makes a request to run an interpreter run where they run (a server's sandbox, env/
  // confined_build.h), returning what must stay open until it has run; unset: here. Set, the
  // interpreter is found on `path` there, as a sandboxed rank's is.
  std::function<Result<UniqueFd>(proc::SpawnRequest&)> confine;
  // Whether an interpreter that could not answer (it did not start, or its answer was not
  // one) refuses the job; a server, which cannot see what the ranks will see, leaves it to them.
  bool refuse_unanswered = true;
  // Where the user sees the environments the ranks could run in (a server's: --on-server).
  std::string environments = "cohort env ls";
};

// What the ranks' Python must import besides the program's own imports: the debugger (or,
// dialling an IDE, PyCharm's pydevd-pycharm), the preload launcher's modules, torchrun's torch.
std::vector<PythonNeed> pythonNeeds(const spec::JobSpec& s);

// True when the command's first word names a Python interpreter (python, python3, python3.11).
bool runsPython(const std::vector<std::string>& command);

// Asks the interpreter of `s.command` (a Python one) for the program's top-level imports and
// `needs`. Modules in `provided` count as found (cohort puts them there). Errors:
// kFailedPrecondition naming the field, the interpreter (as given, its path and the Python it
// runs), the module and the line that imports it, and another interpreter that has it; errors of
// finding the program (kNotFound).
Result<void> checkPython(const spec::JobSpec& s, const PythonRanks& ranks,
                         const std::vector<PythonNeed>& needs,
                         const std::vector<std::string>& provided);

// The same question for ranks on other hosts (over SSH), asked there by whoever reaches them:
// `args` make the job's interpreter answer (the script's text goes with them, since the host
// may not have the workdir yet; what the workdir holds counts as found), and `explain` turns
// its answer into the refusal ("" when nothing is missing).
struct RemotePythonCheck {
  std::vector<std::string> args;
  std::function<std::string(const std::string& answer)> explain;
};
RemotePythonCheck remotePythonCheck(const spec::JobSpec& s, const std::string& workdir,
                                    const std::vector<PythonNeed>& needs);

}  // namespace cohort::env
