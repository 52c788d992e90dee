#include "agent/hang.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "agent/preload.h"

namespace cohort::agent {

namespace {

const char* stateWord(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "in uninterruptible sleep";
    case 'T':
      return "stopped";
    case 't':
      return "stopped by a debugger";
    case 'Z':
      return "exited, not yet reaped";
    default:
      return "state unknown";
  }
}

bool stopped(const RankStack& s) { return s.state == 'T' || s.state == 't'; }

// "worker/2 on node 1, worker/5 on node 2 and 3 more"
std::string names(const std::vector<const RankStack*>& ranks) {
  constexpr size_t kNamed = 8;
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < kNamed; ++i) {
    out += (i == 0 ? "" : ", ") + ranks[i]->label;
  }
  if (ranks.size() > kNamed) out += " and " + std::to_string(ranks.size() - kNamed) + " more";
  return out;
}

std::string verb(const std::vector<const RankStack*>& ranks, const char* one, const char* many) {
  return ranks.size() == 1 ? one : many;
}

// The innermost frame, without its indentation: where a stack is.
std::string top(const std::string& frames) {
  std::istringstream in(frames);
  std::string line;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start != std::string::npos && line.compare(start, 7, "Thread ") != 0) {
      return line.substr(start);
    }
  }
  return "?";
}

}  // namespace

std::string framesOfPySpy(const std::string& output) {
  std::istringstream in(output);
  std::string line, out;
  const std::string in_template = std::string("(") + kPreloadTemplateFile + ":";
  bool under_template = false;  // the line before was one of the template's frames
  while (std::getline(in, line)) {
    // Under a preloaded rank's script: the template's frames, then the `python -c` line that
    // started it (preload.cc's kBootstrap).
    if (line.find(in_template) != std::string::npos ||
        (under_template && line == "    <module> (<string>:1)")) {
      under_template = true;
      continue;
    }
    under_template = false;
    if (line.rfind("Thread ", 0) == 0) {
      // "Thread 11875 (idle): "MainThread"": the id differs from rank to rank, and whether
      // py-spy saw the thread idle or active at that instant says nothing about where it is.
      const size_t name = line.find("): ");
      out += "Thread" + (name == std::string::npos ? std::string() : " " + line.substr(name + 3)) +
             "\n";
    } else if (line.rfind("    ", 0) == 0) {
      out += line + "\n";
    }
  }
  return out;
}

HangReport diagnose(const std::vector<RankStack>& stacks) {
  HangReport report;
  std::vector<const RankStack*> held, in_d;
  for (const RankStack& s : stacks) {
    if (stopped(s)) held.push_back(&s);
    if (s.state == 'D') in_d.push_back(&s);
  }
  std::vector<std::string> why;
  if (!held.empty()) {
    why.push_back(names(held) + verb(held, " is", " are") +
                  " stopped (SIGSTOP, or a debugger holds it): the others wait for " +
                  verb(held, "it", "them"));
  }
  if (!in_d.empty()) {
    why.push_back(names(in_d) + verb(in_d, " is", " are") +
                  " in uninterruptible sleep (D state: waiting on a disk, a network filesystem "
                  "or a device)");
  }
  // Identical stacks, once, with the ranks that share them; the largest group first.
  std::map<std::string, std::vector<const RankStack*>> groups;
  for (const RankStack& s : stacks) {
    groups[s.frames.empty() ? "    (no stack: " + (s.error.empty() ? "unknown" : s.error) + ")\n"
                            : s.frames]
        .push_back(&s);
  }
  std::vector<std::pair<std::string, std::vector<const RankStack*>>> ordered(groups.begin(),
                                                                             groups.end());
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });

  if (why.empty() && ordered.size() >= 2 && ordered[0].second.size() >= 2 &&
      ordered[0].second.size() > ordered[1].second.size() &&
      !ordered[0].second.front()->frames.empty()) {
    // Most ranks wait in one place (a collective); the others are where the hold-up is.
    std::vector<const RankStack*> elsewhere;
    for (size_t g = 1; g < ordered.size(); ++g) {
      for (const RankStack* s : ordered[g].second) elsewhere.push_back(s);
    }
    std::sort(elsewhere.begin(), elsewhere.end(),
              [](const RankStack* a, const RankStack* b) { return a->rank < b->rank; });
    const RankStack& first = *elsewhere.front();
    why.push_back(names(elsewhere) + verb(elsewhere, " is", " are") + " elsewhere (" +
                  (first.frames.empty() ? "no stack" : "at " + top(first.frames)) + ") while " +
                  std::to_string(ordered[0].second.size()) + " other rank(s) wait at " +
                  top(ordered[0].first));
  }
  for (size_t i = 0; i < why.size(); ++i) report.laggards += (i ? "; " : "") + why[i];

  report.text = "stacks of " + std::to_string(stacks.size()) + " rank(s), grouped:\n";
  for (const auto& [frames, ranks] : ordered) {
    std::vector<const RankStack*> sorted = ranks;
    std::sort(sorted.begin(), sorted.end(),
              [](const RankStack* a, const RankStack* b) { return a->rank < b->rank; });
    std::map<std::string, int> states;
    for (const RankStack* s : sorted) ++states[stateWord(s->state)];
    std::string how;
    for (const auto& [word, n] : states) {
      how +=
          (how.empty() ? "" : ", ") + (states.size() == 1 ? word : std::to_string(n) + " " + word);
    }
    report.text += "\n" + names(sorted) + " (" + std::to_string(sorted.size()) + " rank(s), " +
                   how + "):\n" + frames;
  }
  return report;
}

}  // namespace cohort::agent
