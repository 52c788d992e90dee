#include "backends/ssh_hosts.h"

#include <algorithm>
#include <set>

#include "util/text.h"

namespace cohort::backends {

namespace {

// A host name as ssh takes it: never an option ('-'), no blanks, quotes or shell characters
// (the name reaches ssh as one word, but a person reads it in messages).
Result<void> checkHostName(const std::string& name, const std::string& where) {
  if (name.empty()) return fail(Code::kInvalidArgument, where + "an empty host name");
  if (name[0] == '-') {
    return fail(Code::kInvalidArgument,
                where + "'" + name + "' is not a host name (ssh would read it as an option)");
  }
  for (char c : name) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) ||
                    std::string_view("._-@%[]:").find(c) != std::string_view::npos;
    if (!ok) {
      return fail(Code::kInvalidArgument,
                  where + "'" + name + "' is not a host name (letters, digits and ._-@ only)");
    }
  }
  return {};
}

Result<int> parseSlots(const std::string& text, const std::string& where) {
  auto n = parseInt(text);
  if (!n || *n < 1 || *n > 4096) {
    return fail(Code::kInvalidArgument,
                where + "slots: expected a number from 1 to 4096, got '" + text + "'");
  }
  return *n;
}

Result<void> noRepeats(const std::vector<SshHost>& hosts, const std::string& where) {
  std::set<std::string> seen;
  for (const SshHost& h : hosts) {
    if (!seen.insert(h.name).second) {
      return fail(Code::kInvalidArgument,
                  where + "host '" + h.name +
                      "' is named twice: cohort runs one node per host (its processes are "
                      "--nproc-per-node, or the host's slots)");
    }
  }
  return {};
}

}  // namespace

Result<std::vector<SshHost>> parseHostList(const std::string& text) {
  std::vector<SshHost> hosts;
  for (const std::string& entry : split(text, ',')) {
    SshHost host;
    const std::string word(trim(entry));
    const auto colon = word.rfind(':');
    std::string name = word;
    if (colon != std::string::npos && colon + 1 < word.size() &&
        word.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
      name = word.substr(0, colon);
      COHORT_ASSIGN(host.slots, parseSlots(word.substr(colon + 1), "--hosts: '" + word + "': "));
    }
    COHORT_TRY(checkHostName(name, "--hosts: "));
    host.name = name;
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) return fail(Code::kInvalidArgument, "--hosts: names no host");
  COHORT_TRY(noRepeats(hosts, "--hosts: "));
  return hosts;
}

Result<std::vector<SshHost>> parseHostfile(const std::string& text, const std::string& file_name) {
  std::vector<SshHost> hosts;
  int line_number = 0;
  for (const std::string& raw : split(text, '\n')) {
    ++line_number;
    std::string line = raw.substr(0, raw.find('#'));
    std::vector<std::string> words;
    for (const std::string& w : split(line, ' ')) {
      for (const std::string& word : split(w, '\t')) {
        if (!trim(word).empty()) words.emplace_back(trim(word));
      }
    }
    if (words.empty()) continue;
    const std::string where = file_name + ":" + std::to_string(line_number) + ": ";
    SshHost host;
    COHORT_TRY(checkHostName(words[0], where));
    host.name = words[0];
    for (size_t i = 1; i < words.size(); ++i) {
      const std::string& w = words[i];
      if (startsWith(w, "slots=")) {
        COHORT_ASSIGN(host.slots, parseSlots(w.substr(6), where));
      } else if (startsWith(w, "max_slots=") || startsWith(w, "max-slots=")) {
        COHORT_TRY(parseSlots(w.substr(10), where));  // a limit cohort never goes past anyway
      } else {
        return fail(Code::kInvalidArgument,
                    where + "'" + w + "': expected 'host slots=N' (mpirun's and DeepSpeed's form)");
      }
    }
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) return fail(Code::kInvalidArgument, file_name + ": names no host");
  COHORT_TRY(noRepeats(hosts, file_name + ": "));
  return hosts;
}

Result<spec::Backend> chooseBackend(const std::string& flag, spec::Backend file, bool hosts_given) {
  if (hosts_given) {
    if (!flag.empty() && flag != "ssh") {
      return fail(Code::kInvalidArgument,
                  "--hosts/--hostfile run the job's nodes on those hosts over SSH; --backend " +
                      flag + " runs them elsewhere: give one or the other");
    }
    return spec::Backend::kSsh;
  }
  spec::Backend chosen = file;
  if (!flag.empty()) {
    COHORT_ASSIGN(chosen, spec::parseBackend(flag));
  }
  if (chosen == spec::Backend::kSsh) {
    return fail(Code::kInvalidArgument,
                std::string(flag.empty() ? "backend: ssh" : "--backend ssh") +
                    " needs the hosts to run on: --hosts h1,h2 or --hostfile FILE");
  }
  return chosen;
}

Result<void> placeNodesOnHosts(spec::JobSpec& spec, const std::vector<SshHost>& hosts,
                               bool nodes_given, bool procs_given) {
  const int count = static_cast<int>(hosts.size());
  if (spec.roles.size() == 1 && !nodes_given) spec.roles[0].nodes = count;
  const int nodes = spec::totalNodes(spec);
  if (nodes > count) {
    return fail(Code::kInvalidArgument,
                "the job has " + std::to_string(nodes) + " nodes and " + std::to_string(count) +
                    " host(s) were given: one node runs on each host; name more hosts or ask "
                    "for fewer nodes");
  }
  // The hosts that run a node, and the slots they have.
  std::vector<int> slots;
  for (int n = 0; n < nodes; ++n) slots.push_back(hosts[n].slots);
  const bool all_said = std::all_of(slots.begin(), slots.end(), [](int s) { return s > 0; });
  const bool same = all_said && std::adjacent_find(slots.begin(), slots.end(),
                                                   std::not_equal_to<>()) == slots.end();
  int node = 0;
  for (spec::Role& role : spec.roles) {
    if (!procs_given && same && !slots.empty()) {
      role.procs_per_node = slots[0];
    } else if (!procs_given && all_said && !same && spec.roles.size() == 1) {
      return fail(Code::kInvalidArgument,
                  "the hosts have different slots (" + hosts[0].name + " " +
                      std::to_string(hosts[0].slots) + ", ...): cohort runs the same number of "
                      "processes on every node; give --nproc-per-node N (at most the fewest slots)");
    }
    if (role.procs_per_node == spec::kAutoProcs) {
      return fail(Code::kInvalidArgument,
                  "--nproc-per-node auto counts this machine's GPUs, not the hosts': give a "
                  "number, or slots=N for each host in the hostfile");
    }
    for (int n = 0; n < role.nodes; ++n, ++node) {
      const SshHost& host = hosts[node];
      if (host.slots > 0 && role.procs_per_node > host.slots) {
        return fail(Code::kInvalidArgument,
                    "host '" + host.name + "' has " + std::to_string(host.slots) +
                        " slot(s) and its node runs " + std::to_string(role.procs_per_node) +
                        " processes: give --nproc-per-node " + std::to_string(host.slots) +
                        " or more slots");
      }
    }
  }
  return {};
}

Result<std::vector<std::string>> splitSshCommand(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) return fail(Code::kInvalidArgument, "--ssh: an unclosed quote in '" + text + "'");
  if (in_word) words.push_back(word);
  if (words.empty()) return fail(Code::kInvalidArgument, "--ssh: names no command");
  return words;
}

namespace {

// Where the host keeps cohort binaries, one per content hash.
std::string cachedBinary(const std::string& hash) {
  return "b=\"${XDG_CACHE_HOME:-$HOME/.cache}/cohort/bin/cohort-" + hash + "\"\n";
}

}  // namespace

std::string probeScript(const std::string& hash, const std::string& python,
                        const std::vector<std::string>& python_args) {
  std::string s = cachedBinary(hash);
  s += "echo 'cohort-probe 1'\n";
  s += "echo \"from ${SSH_CONNECTION%% *}\"\n";
  s += "echo \"machine $(uname -m)\"\n";
  s += "if [ -x \"$b\" ]; then echo 'binary yes'; else echo 'binary no'; fi\n";
  if (!python.empty()) {
    std::string args;
    for (const std::string& a : python_args) args += " " + shellQuote(a);
    s += "if p=$(command -v " + shellQuote(python) + " 2>/dev/null); then\n";
    s += "  echo \"python $p\"\n";
    if (!python_args.empty()) {
      s += "  a=$(\"$p\"" + args + " 2>/dev/null | tail -n 1)\n";
      s += "  echo \"answer $a\"\n";
    }
    s += "else echo 'python none'; fi\n";
  }
  s += "echo 'cohort-probe end'\n";
  return s;
}

namespace {

// The `key value` lines a script printed between "NAME 1" and "NAME end" (a login banner before
// them is skipped); nullopt when they are not there (the shell did not run it to its end).
std::optional<std::vector<std::pair<std::string, std::string>>> answerLines(
    const std::string& out, const std::string& name) {
  std::vector<std::pair<std::string, std::string>> lines;
  bool begun = false;
  for (const std::string& line : split(out, '\n')) {
    if (line == name + " 1") {
      begun = true;
      continue;
    }
    if (!begun) continue;  // a login banner
    if (line == name + " end") return lines;
    const auto space = line.find(' ');
    lines.emplace_back(line.substr(0, space),
                       space == std::string::npos ? "" : line.substr(space + 1));
  }
  return std::nullopt;
}

}  // namespace

Result<HostProbe> parseProbe(const std::string& out) {
  auto lines = answerLines(out, "cohort-probe");
  if (!lines) {
    return fail(Code::kUnavailable,
                "its shell did not run cohort's probe (a POSIX sh is needed there)");
  }
  HostProbe p;
  for (const auto& [key, value] : *lines) {
    if (key == "from") {
      p.from = value;
    } else if (key == "machine") {
      p.machine = value;
    } else if (key == "binary") {
      p.has_binary = value == "yes";
    } else if (key == "python") {
      p.python_asked = true;
      p.python = value == "none" ? "" : value;
    } else if (key == "answer") {
      p.python_answer = value;
    }
  }
  return p;
}

std::string capacityScript() {
  return "echo 'cohort-capacity 1'\n"
         "echo \"cpus $(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)\"\n"
         "echo \"memory_kib $(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)\"\n"
         "echo \"gpus $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')\"\n"
         "echo 'cohort-capacity end'\n";
}

Result<HostCapacity> parseCapacity(const std::string& out, int slots) {
  auto lines = answerLines(out, "cohort-capacity");
  if (!lines) {
    return fail(Code::kUnavailable,
                "its shell did not run cohort's question (a POSIX sh is needed there)");
  }
  HostCapacity c;
  for (const auto& [key, value] : *lines) {
    auto n = parseInt64(std::string(trim(value)));
    const int64_t number = n && *n > 0 ? *n : 0;
    if (key == "cpus") {
      c.cpus = number;
    } else if (key == "memory_kib") {
      c.memory_bytes = number * 1024;
    } else if (key == "gpus") {
      c.gpus = number;
    }
  }
  if (slots > 0) c.cpus = slots;
  if (c.cpus == 0) c.cpus = 1;
  return c;
}

std::string uploadScript(const std::string& hash) {
  std::string s = cachedBinary(hash);
  s += "set -e\n";
  s += "mkdir -p \"${b%/*}\"\n";
  s += "t=\"$b.$$.part\"\n";
  s += "trap 'rm -f \"$t\"' EXIT\n";
  s += "cat > \"$t\"\n";
  s += "h=$(sha256sum \"$t\")\n";
  s += "if [ \"${h%% *}\" != " + hash + " ]; then\n";
  s += "  echo \"cohort: the copy of cohort that reached $(hostname) has another hash (${h%% *})\" >&2\n";
  s += "  exit 1\n";
  s += "fi\n";
  s += "chmod 755 \"$t\"\n";
  s += "mv -f \"$t\" \"$b\"\n";
  return s;
}

std::string agentScript(const AgentScript& a) {
  std::string s = cachedBinary(a.hash);
  s += "d=" + shellQuote(a.job_dir) + "\n";
  s += "IFS= read -r s || exit " + std::to_string(kNoSecretExit) + "\n";
  s += "[ -x \"$b\" ] || { echo \"cohort: $b is gone from $(hostname)\" >&2; exit " +
       std::to_string(kNoBinaryExit) + "; }\n";
  s += "own=\n";
  // A job directory that the coordinator's mark is in is the coordinator's (the same machine,
  // or a shared filesystem): the host's agent uses it, and it is left to the coordinator.
  s += "if [ ! -e \"$d/mark\" ]; then\n";
  s += "  own=1\n";
  // What it makes, from the first directory that was not there (the data root, even), it
  // removes.
  s += "  m=$d\n";
  s += "  while [ -n \"${m%/*}\" ] && [ ! -e \"${m%/*}\" ]; do m=${m%/*}; done\n";
  s += "  trap 'cd /; rm -rf \"$m\" 2>/dev/null' EXIT\n";
  s += "  trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM\n";
  s += "  mkdir -p \"$d\" || exit " + std::to_string(kNoJobDirExit) + "\n";
  if (a.snapshot) {
    s += "  \"$b\" snapshot unpack \"$d/code\" || exit " + std::to_string(kNoSnapshotExit) + "\n";
  }
  s += "fi\n";
  std::string agent = "\"$b\" exec --coordinator " + a.coordinator + " --node " +
                      std::to_string(a.node);
  if (!a.interface.empty()) agent += " --interface " + shellQuote(a.interface);
  if (!a.cidr.empty()) agent += " --cidr " + shellQuote(a.cidr);
  s += "COHORT_JOB_SECRET=\"$s\" " + agent + " </dev/null >&2\n";
  s += "c=$?\n";
  // What the ranks wrote comes back (as a snapshot on stdout) before the directory goes.
  s += "if [ -n \"$own\" ] && [ -d \"$d/output\" ]; then \"$b\" snapshot pack \"$d/output\"; fi\n";
  s += "exit $c\n";
  return s;
}

std::string describeHostExit(const std::string& host, int code, const std::string& err) {
  std::string said(trim(err));
  if (said.size() > 300) said = said.substr(said.size() - 300);
  const std::string words = said.empty() ? "" : ": " + said;
  switch (code) {
    case 255:
      return "host " + host + ": ssh could not reach it or log in" + words;
    case 126:
    case 127:
      return "host " + host + ": cohort's script could not run there (exit " +
             std::to_string(code) + ")" + words;
    case kNoSecretExit:
      return "host " + host + ": its agent got no job secret (ssh closed its stdin)" + words;
    case kNoJobDirExit:
      return "host " + host + ": the job directory could not be made there (choose a "
             "--data-root every host can write)" + words;
    case kNoSnapshotExit:
      return "host " + host + ": the workdir's snapshot could not be unpacked there" + words;
    case kNoBinaryExit:
      return "host " + host + ": cohort is not in its cache" + words;
    default:
      return "host " + host + ": its agent exited with " + std::to_string(code) +
             " before the job began" + words;
  }
}

}  // namespace cohort::backends
