// Hang diagnosis: when no rank of a job made progress for its hang_timeout, every rank's stack
// (py-spy's frames, and the process's state from /proc) is collected by the agents; this names
// the rank that holds the others up and groups the stacks, so identical ones print once with the
// ranks that share them (the way `py-spy dump` reads, for a whole job). Pure, thread-safe.
#pragma once

#include <string>
#include <vector>

namespace cohort::agent {

struct RankStack {
  int rank = -1;        // global
  std::string label;    // "worker/2 on node 1"
  char state = '?';     // /proc/PID/stat: R, S, D, T (stopped), t (traced), Z; '?' unknown
  std::string frames;   // innermost first, one "    func (file:line)" per line; "" when none
  std::string error;    // why there are no frames ("py-spy is not installed", ...)
};

struct HangReport {
  std::string laggards;  // one line naming who holds the others up; "" when nobody stands out
  std::string text;      // every stack, grouped, with the ranks that share it
};

// The frames of `py-spy dump` output, without its process, version and thread-id lines (which
// differ from rank to rank even where the stacks are the same), and without the frames of a
// preloaded rank's template under its script's (a directly launched rank has none).
std::string framesOfPySpy(const std::string& output);

// A stopped rank, a rank in uninterruptible sleep, else the ranks whose stack is not the one
// most of the others share (the one still copying data while the others wait to connect).
HangReport diagnose(const std::vector<RankStack>& stacks);

}  // namespace cohort::agent
