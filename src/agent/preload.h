// The preloading launcher (launcher: preload): one template process per node, the ranks'
// Python interpreter, imports the job's `preload` modules once; every rank of the node is then
// forked from it instead of starting a fresh interpreter that imports them again. The forked
// rank is what a directly launched one is: its own process group and session, a child of the
// agent (the template forks twice and the middle process exits, so the rank is the agent's,
// the subreaper's, before it runs a line), PR_SET_PDEATHSIG, its own output pipe, working
// directory, environment (os.environ and the C one), sys.argv and the command line ps shows,
// signal dispositions and mask, numpy's and torch's CPU generators seeded anew, and `__main__`
// run as `python SCRIPT` or `python -m MODULE` would run it (tracebacks without the template's
// frames; its code is named kPreloadTemplateFile).
//
// Safety: a fork copies only the calling thread, so the template refuses to fork (and says why)
// when importing the modules started a thread or initialised CUDA; nothing may open sockets
// before the fork either. The agent then fails the job with the template's words.
//
// The template and the agent speak over a Unix socket: frames of a 4-byte big-endian length and
// a JSON object; a fork request carries the rank's output pipe and its "go" pipe (SCM_RIGHTS).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "plan/plan.h"
#include "util/fd.h"
#include "util/result.h"

namespace cohort::agent {

// The file name the template's own code carries (in a rank's stack, under the script's frames),
// so that a stack can be shown without it.
inline constexpr char kPreloadTemplateFile[] = "<cohort preload template>";

class PreloadTemplate {
 public:
  struct Options {
    plan::Preload preload;
    std::vector<std::string> env;  // "KEY=VALUE": the whole environment it imports with
    std::string cwd;
    int uid = -1, gid = -1;
    int cgroup_fd = -1;  // a cgroup of its own, not the ranks': killing an attempt keeps it
  };
  // Starts the template; it imports the modules in the background. Its output goes to
  // /dev/null: it runs the job's code. Errors: those of spawn().
  static Result<PreloadTemplate> start(const Options& options);

  PreloadTemplate(PreloadTemplate&& other) noexcept;
  PreloadTemplate& operator=(PreloadTemplate&&) = delete;
  ~PreloadTemplate();  // SIGKILL, and reaped

  // Readable once the template says it is ready (or it died).
  int fd() const { return sock_.get(); }
  pid_t pid() const { return pid_; }

  // After fd() became readable: ok when every module was imported and the template may fork;
  // otherwise its reason ("importing torch: ModuleNotFoundError: ...", "2 threads are running
  // after the imports").
  Result<void> ready();

  struct Fork {
    std::vector<std::string> argv;  // python SCRIPT ARGS... or python -m MODULE ARGS...
    std::vector<std::string> env;   // the rank's whole environment
    std::string cwd;
    int out_fd = -1;  // the rank's stdout and stderr
    int go_fd = -1;   // the rank reads one byte from it before it runs: see go()
  };
  // Forks one rank. Returns its pid once it is a child of this process; it waits on go_fd,
  // so the caller can open its pidfd and move it into the ranks' cgroup first. Blocks up to
  // `timeout`. Errors: kUnavailable when the template is gone, kIo.
  Result<pid_t> fork(const Fork& request, Millis timeout);

 private:
  PreloadTemplate() = default;
  UniqueFd sock_;
  UniqueFd pidfd_;
  pid_t pid_ = -1;
};

}  // namespace cohort::agent
