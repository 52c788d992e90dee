// debug: every rank runs its Python program through cohort's debug bootstrap
// (plan/debug_bootstrap.py, written into files/debug/), which starts debugpy listening on the
// rank's own port (or dialling the IDE), pauses where the job asks (at the start, at a
// breakpoint(), at an exception nothing caught) and says so in the rank's debug status file,
// which its agent reads. The variables below are the bootstrap's whole contract.
#include <algorithm>
#include <string>

#include "plan/wiring.h"

namespace cohort::plan {

extern const char kDebugBootstrap[];
extern const std::size_t kDebugBootstrapSize;

namespace {

// Frozen standard modules hide their source from the debugger (debugpy warns of missed
// breakpoints): the interpreter of a debugged rank loads them from their files.
constexpr const char* kNoFrozenModules = "-Xfrozen_modules=off";

// The rank's argv with the bootstrap in front of its program: `python3 [options] PROGRAM ...`
// becomes `python3 -Xfrozen_modules=off [options] cohort_debug.py PROGRAM ...`, where PROGRAM
// is a script, -m MODULE or -c CODE (the bootstrap runs it the way python3 would). A preloaded
// rank, whose interpreter is its node's template, becomes `python3 cohort_debug.py PROGRAM ...`.
std::vector<std::string> underBootstrap(const std::vector<std::string>& argv,
                                        const std::string& bootstrap, bool preloaded) {
  if (preloaded) {
    std::vector<std::string> out = {argv[0], bootstrap};
    out.insert(out.end(), argv.begin() + 1, argv.end());
    return out;
  }
  std::vector<std::string> out = {argv[0], kNoFrozenModules};
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m" || a == "-c" || a == "-" || a.empty() || a[0] != '-') break;
    out.push_back(a);
    // Options whose value is the next word.
    if ((a == "-X" || a == "-W" || a == "--check-hash-based-pycs") && i + 1 < argv.size()) {
      out.push_back(argv[++i]);
    }
  }
  out.push_back(bootstrap);
  out.insert(out.end(), argv.begin() + static_cast<long>(i), argv.end());
  return out;
}

}  // namespace

int debugPortsNeeded(const spec::JobSpec& spec) {
  return spec.debug.enabled && spec.debug.connect.empty() ? spec::totalProcs(spec) : 0;
}

void wireDebug(Builder& b) {
  const spec::Debug& d = b.spec.debug;
  if (!d.enabled) return;
  const job::Layout layout(b.ctx.job_dir);
  const std::string bootstrap = layout.debugBootstrapFile();
  b.plan.files.push_back({bootstrap, std::string(kDebugBootstrap, kDebugBootstrapSize)});
  const std::string wait_limit = std::to_string(d.wait_limit.count() / 1000.0);
  b.plan.debug_wait_limit_ms = d.wait_limit.count();
  b.forEachRank([&](NodePlan& node, RankPlan& r) {
    // pdb takes cohort run's terminal, which only a rank cohort starts itself can have.
    if (d.pdb && spec::debugWaitsAtStart(d, r.rank)) r.preload = false;
    r.argv = underBootstrap(r.argv, bootstrap, r.preload);
    setEnv(r.env, "COHORT_DEBUG_FILE", layout.debugStatusFile(node.node, r.rank));
    setEnv(r.env, "COHORT_DEBUG_WAIT_LIMIT", wait_limit.substr(0, wait_limit.find('.') + 4));
    if (spec::debugWaitsAtStart(d, r.rank)) setEnv(r.env, "COHORT_DEBUG_WAIT", "1");
    if (d.post_mortem) setEnv(r.env, "COHORT_DEBUG_POST_MORTEM", "1");
    if (d.pdb && spec::debugWaitsAtStart(d, r.rank)) {
      setEnv(r.env, "COHORT_DEBUG_PDB", "1");
      r.terminal = true;
    }
    if (!d.connect.empty()) {
      setEnv(r.env, "COHORT_DEBUG_CONNECT", d.connect);
      return;
    }
    // Only on the node itself: debugpy runs any code it is sent, so it never listens where
    // another machine can reach it; a remote user tunnels (ssh -L, docs/debugging.md).
    const size_t index = static_cast<size_t>(r.rank);
    const std::string port = index < b.ctx.debug_ports.size()
                                 ? std::to_string(b.ctx.debug_ports[index])
                             : d.port != 0 ? std::to_string(d.port + r.rank)
                                           : "auto";
    setEnv(r.env, "COHORT_DEBUG_LISTEN", "127.0.0.1:" + port);
  });
  for (NodePlan& node : b.plan.nodes) {
    if (!node.preload) continue;
    if (std::none_of(node.ranks.begin(), node.ranks.end(),
                     [](const RankPlan& r) { return r.preload; })) {
      node.preload.reset();  // its one rank is on the terminal
    } else {
      node.preload->options = {kNoFrozenModules};
    }
  }
}

}  // namespace cohort::plan
