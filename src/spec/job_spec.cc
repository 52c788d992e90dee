#include "spec/job_spec.h"

#include <nlohmann/json.hpp>


#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "spec/yaml_tree.h"
#include "util/json_limits.h"

namespace cohort::spec {

const char* frameworkName(Framework f) {
  switch (f) {
    case Framework::kPyTorch: return "pytorch";
    case Framework::kMindSpore: return "mindspore";
    case Framework::kTensorFlow: return "tensorflow";
    case Framework::kMpi: return "mpi";
    case Framework::kDeepSpeed: return "deepspeed";
    case Framework::kGeneric: return "generic";
  }
  return "generic";
}

bool taskFlags(const JobSpec& spec) {
  if (spec.task_flags) return *spec.task_flags;
  if (spec.framework == Framework::kDeepSpeed) return true;
  return spec.compat_modelarts &&
         std::any_of(spec.roles.begin(), spec.roles.end(),
                     [](const Role& r) { return r.name == "ps"; });
}

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::kDirect: return "direct";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kSpawn: return "spawn";
    case Launcher::kMpirun: return "mpirun";
    case Launcher::kPreload: return "preload";
  }
  return "direct";
}

const char* backendName(Backend b) {
  switch (b) {
    case Backend::kLocal:
      return "local";
    case Backend::kSlurm:
      return "slurm";
    case Backend::kVolcano:
      return "volcano";
    case Backend::kSsh:
      return "ssh";
  }
  return "local";
}

Result<Backend> parseBackend(const std::string& text) {
  for (Backend b : {Backend::kLocal, Backend::kSlurm, Backend::kVolcano, Backend::kSsh}) {
    if (text == backendName(b)) return b;
  }
  return fail(Code::kInvalidArgument, "unknown backend '" + text + "' (local, slurm, volcano, ssh)");
}

std::string stopSignalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return std::string("SIG") + (abbrev ? abbrev : std::to_string(signal));
}

Result<int> parseStopSignal(const std::string& text) {
  std::string name;
  for (char c : text)
    name.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
  std::vector<std::string> names;
  for (int sig : kStopSignals) {
    if (stopSignalName(sig) == name) return sig;
    names.push_back(stopSignalName(sig));
  }
  const std::string accepted = " (" + join(names, ", ") + ")";
  if (name == "SIGKILL" || name == "SIGSTOP") {
    return fail(Code::kInvalidArgument,
                name +
                    " cannot be caught, so it gives a rank no notice (SIGKILL follows the "
                    "stop signal after grace_period anyway): use one of" +
                    accepted);
  }
  return fail(Code::kInvalidArgument,
              "unknown stop signal '" + text.substr(0, 64) + "': use one of" + accepted);
}

bool validImageReference(const std::string& ref) {
  if (ref.empty() || ref.size() > 1024) return false;
  auto lowerAlnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  auto alnum = [&](char c) { return lowerAlnum(c) || (c >= 'A' && c <= 'Z'); };
  std::string rest = ref;
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    // A digest: ALGORITHM:HEX, at least 32 hex digits.
    const std::string digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    const size_t colon = digest.find(':');
    if (colon == std::string::npos || colon == 0 || digest.size() - colon - 1 < 32) return false;
    if (!std::all_of(digest.begin(), digest.begin() + static_cast<long>(colon),
                     [&](char c) { return lowerAlnum(c) || c == '+' || c == '.' || c == '_'; }) ||
        !std::all_of(digest.begin() + static_cast<long>(colon) + 1, digest.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
      return false;
    }
  }
  // A tag follows the last ':' after the last '/' (a ':' before it is the registry's port).
  const size_t slash = rest.rfind('/');
  if (const size_t colon = rest.rfind(':');
      colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    const std::string tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (tag.empty() || tag.size() > 128 || tag[0] == '.' || tag[0] == '-' ||
        !std::all_of(tag.begin(), tag.end(),
                     [&](char c) { return alnum(c) || c == '_' || c == '.' || c == '-'; })) {
      return false;
    }
  }
  std::vector<std::string> parts = split(rest, '/');
  if (parts.empty()) return false;
  // The first part names a registry when it has a '.' or a ':', or is localhost.
  if (parts.size() > 1 &&
      (parts[0].find_first_of(".:") != std::string::npos || parts[0] == "localhost")) {
    const std::string host = parts[0].substr(0, parts[0].find(':'));
    const std::string port = parts[0].find(':') == std::string::npos
                                 ? std::string("0")
                                 : parts[0].substr(parts[0].find(':') + 1);
    if (host.empty() || host.front() == '-' || host.back() == '-' || port.empty() ||
        !std::all_of(host.begin(), host.end(),
                     [&](char c) { return alnum(c) || c == '.' || c == '-'; }) ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    parts.erase(parts.begin());
  }
  for (const std::string& part : parts) {
    // Lower-case letters and digits, joined by one '.', one or two '_', or any number of '-'.
    if (part.empty() || !lowerAlnum(part.front()) || !lowerAlnum(part.back())) return false;
    for (size_t i = 0; i < part.size(); ++i) {
      const char c = part[i];
      if (lowerAlnum(c) || c == '-') continue;
      if (c == '.' && lowerAlnum(part[i + 1])) continue;
      if (c == '_' &&
          (lowerAlnum(part[i + 1]) || (part[i + 1] == '_' && lowerAlnum(part[i + 2])))) {
        if (part[i + 1] == '_') ++i;
        continue;
      }
      return false;
    }
  }
  return true;
}

Result<Framework> parseFramework(const std::string& text) {
  for (Framework f : {Framework::kPyTorch, Framework::kMindSpore, Framework::kTensorFlow,
                      Framework::kMpi, Framework::kDeepSpeed,
                      Framework::kGeneric}) {
    if (text == frameworkName(f)) return f;
  }
  return fail(Code::kInvalidArgument,
              "unknown framework '" + text +
                  "' (pytorch, mindspore, tensorflow, mpi, deepspeed, generic)");
}

Result<Launcher> parseLauncher(const std::string& text) {
  for (Launcher l : {Launcher::kDirect, Launcher::kTorchrun, Launcher::kSpawn, Launcher::kMpirun,
                     Launcher::kPreload}) {
    if (text == launcherName(l)) return l;
  }
  return fail(Code::kInvalidArgument,
              "unknown launcher '" + text + "' (direct, torchrun, spawn, mpirun, preload)");
}

void Origin::setByFlag(const std::string& path, const std::string& flag) {
  for (auto it = where.lower_bound(path); it != where.end() && startsWith(it->first, path);) {
    const char next = it->first.size() > path.size() ? it->first[path.size()] : '\0';
    it = next == '.' || next == '[' ? where.erase(it) : std::next(it);
  }
  where[path] = flag;
}

JobSpec defaultSpec() {
  JobSpec spec;
  spec.roles.push_back(Role{"worker", 1, 1, {}});
  return spec;
}

namespace {

// Fields that DESIGN.md names but this version does not run yet: a clear refusal beats silently
// ignoring them.
const std::set<std::string> kNotYet = {};

// A relative path that stays inside its directory: no "..", not absolute.
bool containedPath(const std::string& path) {
  if (path.empty() || path[0] == '/') return false;
  for (const std::string& part : split(path, '/')) {
    if (part == "..") return false;
  }
  return true;
}

// A value as a message shows it: at most 60 bytes of it.
std::string clip(const std::string& text) {
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

std::string tooMany(size_t n, int64_t max, const std::string& noun, const std::string& advice) {
  return std::to_string(n) + " " + noun + "; at most " + std::to_string(max) + " (" + advice + ")";
}

std::string tooLong(size_t bytes, size_t max, const std::string& advice) {
  return "has " + std::to_string(bytes) + " bytes; at most " + std::to_string(max) + " (" +
         advice + ")";
}

// What a node holds, for "expected X, got Y".
// A plain scalar (or one tagged !!int) can be a number; a quoted one is a string.
bool mayBeNumberText(const YamlNode& node) {
  return (!node.quoted && node.tag.empty()) || node.tag == "tag:yaml.org,2002:int";
}

std::string kindOf(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::kSequence: return "a list";
    case YamlNode::Kind::kMap: return "a mapping";
    case YamlNode::Kind::kScalar:
      return (mayBeNumberText(node) ? "'" : "the string '") + clip(node.scalar) + "'";
    default: return "nothing";
  }
}

int lineOfOffset(std::string_view text, size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  // The line of the field being read: what messages name when a node has no position.
  int currentLine() const { return line_; }

  std::string where(const YamlNode& node) const {
    const int line = node.line > 0 ? node.line : line_;
    return file_ + ":" + std::to_string(line);
  }

  tl::unexpected<Error> bad(const YamlNode& node, const std::string& path,
                            const std::string& what) const {
    return fail(Code::kInvalidArgument, where(node) + ": " + path + ": " + what);
  }

  void note(const std::string& path, const YamlNode& node) {
    origin_.where[path] = where(node);
  }

  // A string field: any scalar (a plain 5 is the string "5").
  Result<std::string> scalar(const YamlNode& node, const std::string& path) const {
    if (!node.isScalar()) return bad(node, path, "expected a string, got " + kindOf(node));
    if (node.scalar.find('\0') != std::string::npos) {
      return bad(node, path, "contains a NUL byte");
    }
    if (!validUtf8(node.scalar)) return bad(node, path, "is not UTF-8 text");
    return node.scalar;
  }

  Result<int> integer(const YamlNode& node, const std::string& path, int min) const {
    if (!node.isScalar()) return bad(node, path, "expected an integer, got " + kindOf(node));
    const std::string& text = node.scalar;
    if (!mayBeNumberText(node)) {
      return bad(node, path, "expected an integer, got the string '" + clip(text) +
                                 "' (write the number without quotes)");
    }
    auto value = parseInt(text);
    if (!value) {
      const bool digits = !text.empty() && text.find_first_not_of("-0123456789") == std::string::npos;
      return bad(node, path, digits ? "'" + clip(text) + "' is out of range"
                                    : "expected an integer, got '" + clip(text) + "'");
    }
    if (*value < min) {
      return bad(node, path, "must be at least " + std::to_string(min) + ", got " + text);
    }
    return *value;
  }

  Result<Millis> duration(const YamlNode& node, const std::string& path) const {
    COHORT_ASSIGN(std::string text, scalar(node, path));
    auto value = parseDuration(text);
    if (!value) return bad(node, path, value.error().message);
    return *value;
  }

  // A list (or a mapping) that may hold at most `max` entries: checked before reading them.
  Result<void> count(const YamlNode& node, const std::string& path, int max,
                     const std::string& noun, const std::string& advice) const {
    if (node.size() > static_cast<size_t>(max)) {
      return bad(node, path, tooMany(node.size(), max, noun, advice));
    }
    return {};
  }

  Result<std::vector<std::string>> stringList(const YamlNode& node, const std::string& path,
                                              int max) {
    std::vector<std::string> out;
    if (node.isScalar()) {
      // A plain string is split on spaces, as a shell would for simple commands.
      COHORT_ASSIGN(std::string text, scalar(node, path));
      for (auto& word : split(text, ' ')) {
        if (!word.empty()) out.push_back(word);
      }
      if (out.size() > static_cast<size_t>(max)) {
        return bad(node, path, tooMany(out.size(), max, "words", "the most a list here holds"));
      }
      note(path, node);
      return out;
    }
    if (!node.isSequence()) {
      return bad(node, path, "expected a list of strings, got " + kindOf(node));
    }
    COHORT_TRY(count(node, path, max, "entries", "the most a list here holds"));
    size_t i = 0;
    for (const YamlNode& item : node.items) {
      std::string sub = path + "[" + std::to_string(i++) + "]";
      COHORT_ASSIGN(std::string text, scalar(item, sub));
      note(sub, item);
      out.push_back(std::move(text));
    }
    return out;
  }

  // A mapping's key: a name, not a list or a mapping.
  Result<std::string> key(const YamlNode& node, const std::string& path) {
    line_ = node.line > 0 ? node.line : line_;
    const std::string label = path.empty() ? "job" : path;
    if (!node.isScalar()) return bad(node, label, "expected a name as the key, got " + kindOf(node));
    const std::string& name = node.scalar;
    if (name.size() > kMaxKeyBytes) {
      return bad(node, label,
                 "a name (key) " + tooLong(name.size(), kMaxKeyBytes, "names are short words"));
    }
    if (name.find('\0') != std::string::npos || !validUtf8(name)) {
      return bad(node, label, "a name contains a NUL byte or is not UTF-8 text");
    }
    return name;
  }

  // Calls `field(key, value)` for each entry of a mapping, refusing repeated keys and, unless
  // `known` is empty, keys not in `known`.
  Result<void> forEachEntry(
      const YamlNode& node, const std::string& path, const std::set<std::string>& known,
      const std::function<Result<void>(const std::string&, const YamlNode&)>& field) {
    std::map<std::string, int> seen;
    for (const auto& kv : node.entries) {
      COHORT_ASSIGN(std::string name, key(kv.first, path));
      const std::string sub = path.empty() ? name : path + "." + name;
      if (kNotYet.count(sub)) {
        return bad(kv.first, sub, "not supported by this version of cohort yet");
      }
      if (!known.empty() && !known.count(name)) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        return bad(kv.first, sub, "unknown field (known here: " + list + ")");
      }
      auto [first, fresh] = seen.emplace(name, line_);
      if (!fresh) {
        return bad(kv.first, sub, "given twice (first on line " + std::to_string(first->second) +
                                      "): remove one");
      }
      note(sub, kv.first);
      COHORT_TRY(field(name, kv.second));
    }
    return {};
  }

  Result<void> forEachField(
      const YamlNode& node, const std::string& path, const std::set<std::string>& known,
      const std::function<Result<void>(const std::string&, const YamlNode&)>& field) {
    if (!node.isMap()) {
      return bad(node, path.empty() ? "job" : path, "expected a mapping, got " + kindOf(node));
    }
    return forEachEntry(node, path, known, field);
  }

  Result<KeyValues> keyValues(const YamlNode& node, const std::string& path, int max,
                              const std::string& advice) {
    if (!node.isMap()) {
      return bad(node, path, "expected a mapping of names to values, got " + kindOf(node));
    }
    COHORT_TRY(count(node, path, max, "entries", advice));
    KeyValues out;
    COHORT_TRY(forEachEntry(node, path, {},
                            [&](const std::string& name, const YamlNode& value) -> Result<void> {
                              COHORT_ASSIGN(std::string text, scalar(value, path + "." + name));
                              out.emplace_back(name, std::move(text));
                              return {};
                            }));
    return out;
  }

  Result<Role> role(const std::string& name, const YamlNode& node, const std::string& path) {
    Role role{name, 1, 1, {}};
    if (node.isNull()) return role;
    COHORT_TRY(forEachField(
        node, path, {"nodes", "procs_per_node", "resources"},
        [&](const std::string& key, const YamlNode& value) -> Result<void> {
          if (key == "nodes") {
            COHORT_ASSIGN(role.nodes, integer(value, path + ".nodes", 1));
          } else if (key == "procs_per_node") {
            if (value.isScalar() && value.scalar == "auto") {
              role.procs_per_node = kAutoProcs;
            } else {
              COHORT_ASSIGN(role.procs_per_node, integer(value, path + ".procs_per_node", 1));
            }
          } else {
            COHORT_ASSIGN(role.resources, resources(value, path + ".resources"));
          }
          return {};
        }));
    return role;
  }

  Result<Resources> resources(const YamlNode& node, const std::string& path) {
    Resources res;
    COHORT_TRY(forEachField(
        node, path, {"gpus", "cpus", "memory", "pids"},
        [&](const std::string& key, const YamlNode& value) -> Result<void> {
          std::string sub = path + "." + key;
          if (key == "gpus") {
            COHORT_ASSIGN(res.gpus, integer(value, sub, 0));
          } else if (key == "cpus") {
            COHORT_ASSIGN(std::string text, scalar(value, sub));
            auto cpus = parseCpus(text);
            if (!cpus || *cpus <= 0) {
              return bad(value, sub,
                         "expected a positive number of CPUs, got '" + clip(text) + "'");
            }
            res.cpus = *cpus;
            res.cpus_given = true;
          } else if (key == "pids") {
            COHORT_ASSIGN(int pids, integer(value, sub, 1));
            res.pids = pids;
          } else {
            COHORT_ASSIGN(std::string text, scalar(value, sub));
            auto bytes = parseBytes(text);
            if (!bytes) return bad(value, sub, bytes.error().message);
            res.memory_bytes = *bytes;
          }
          return {};
        }));
    return res;
  }

  Result<std::vector<Input>> inputs(const YamlNode& node, const std::string& path) {
    if (!node.isSequence()) {
      return bad(node, path, "expected a list of {source, target}, got " + kindOf(node));
    }
    COHORT_TRY(count(node, path, kMaxInputs, "inputs", "stage a directory that holds them"));
    std::vector<Input> out;
    size_t i = 0;
    for (const YamlNode& item : node.items) {
      std::string sub = path + "[" + std::to_string(i++) + "]";
      note(sub, item);
      Input input;
      COHORT_TRY(forEachField(
          item, sub, {"source", "target", "mode", "arg"},
          [&](const std::string& key, const YamlNode& value) -> Result<void> {
            COHORT_ASSIGN(std::string text, scalar(value, sub + "." + key));
            if (key == "source") {
              input.source = text;
            } else if (key == "target") {
              if (!containedPath(text)) {
                return bad(value, sub + ".target",
                           "must be a relative path inside the node's work directory, got '" +
                               clip(text) + "'");
              }
              input.target = text;
            } else if (key == "mode") {
              if (text != "copy" && text != "link") {
                return bad(value, sub + ".mode", "unknown mode '" + clip(text) + "' (copy, link)");
              }
              input.mode = text == "link" ? Input::Mode::kLink : Input::Mode::kCopy;
            } else {
              input.arg = text;
            }
            return {};
          }));
      if (input.source.empty() || input.target.empty()) {
        return bad(item, sub, "needs both source and target");
      }
      out.push_back(input);
    }
    return out;
  }

  Result<std::vector<Output>> outputs(const YamlNode& node, const std::string& path) {
    if (!node.isSequence()) {
      return bad(node, path, "expected a list of {source, target}, got " + kindOf(node));
    }
    COHORT_TRY(count(node, path, kMaxOutputs, "outputs", "copy out a directory that holds them"));
    std::vector<Output> out;
    size_t i = 0;
    for (const YamlNode& item : node.items) {
      std::string sub = path + "[" + std::to_string(i++) + "]";
      note(sub, item);
      Output output;
      COHORT_TRY(forEachField(
          item, sub, {"source", "target", "when"},
          [&](const std::string& key, const YamlNode& value) -> Result<void> {
            COHORT_ASSIGN(std::string text, scalar(value, sub + "." + key));
            if (key == "source") {
              if (!containedPath(text)) {
                return bad(value, sub + ".source",
                           "must be a path inside the job directory such as output/, got '" +
                               clip(text) + "'");
              }
              output.source = text;
            } else if (key == "target") {
              output.target = text;
            } else {
              if (text != "success" && text != "always") {
                return bad(value, sub + ".when",
                           "unknown value '" + clip(text) + "' (success, always)");
              }
              output.always = text == "always";
            }
            return {};
          }));
      if (output.source.empty() || output.target.empty()) {
        return bad(item, sub, "needs both source and target");
      }
      out.push_back(output);
    }
    return out;
  }

  Result<Policy> policy(const YamlNode& node, const std::string& path) {
    Policy policy;
    COHORT_TRY(forEachField(node, path,
                            {"success", "max_restarts", "grace_period", "max_runtime",
                             "heartbeat_timeout", "hang_timeout", "startup_timeout", "stop_signal"},
                            [&](const std::string& key, const YamlNode& value) -> Result<void> {
                              std::string sub = path + "." + key;
                              if (key == "success") {
                                COHORT_ASSIGN(policy.success, stringList(value, sub, kMaxRoles));
                              } else if (key == "max_restarts") {
                                COHORT_ASSIGN(policy.max_restarts, integer(value, sub, 0));
                              } else if (key == "grace_period") {
                                COHORT_ASSIGN(policy.grace_period, duration(value, sub));
                              } else if (key == "heartbeat_timeout") {
                                COHORT_ASSIGN(policy.heartbeat_timeout, duration(value, sub));
                              } else if (key == "hang_timeout") {
                                COHORT_ASSIGN(policy.hang_timeout, duration(value, sub));
                              } else if (key == "startup_timeout") {
                                COHORT_ASSIGN(policy.startup_timeout, duration(value, sub));
                              } else if (key == "stop_signal") {
                                COHORT_ASSIGN(std::string text, scalar(value, sub));
                                auto sig = parseStopSignal(text);
                                if (!sig) return bad(value, sub, sig.error().message);
                                policy.stop_signal = *sig;
                              } else {
                                COHORT_ASSIGN(policy.max_runtime, duration(value, sub));
                              }
                              return {};
                            }));
    return policy;
  }

  Result<bool> boolean(const YamlNode& node, const std::string& path) const {
    if (node.isScalar() && !node.quoted && node.tag.empty()) {
      if (node.scalar == "true") return true;
      if (node.scalar == "false") return false;
    }
    return bad(node, path, "expected true or false, got " + kindOf(node));
  }

  Result<Debug> debug(const YamlNode& node, const std::string& path) {
    Debug d;
    d.enabled = true;
    COHORT_TRY(forEachField(
        node, path, {"ranks", "post_mortem", "wait_limit", "port", "connect"},
        [&](const std::string& key, const YamlNode& value) -> Result<void> {
          const std::string sub = path + "." + key;
          if (key == "ranks") {
            if (value.isScalar() && value.scalar == "all") {
              d.all = true;
              return {};
            }
            if (value.isScalar()) {
              COHORT_ASSIGN(int rank, integer(value, sub, 0));
              d.ranks = {rank};
              return {};
            }
            if (!value.isSequence()) {
              return bad(value, sub, "expected a list of ranks or all, got " + kindOf(value));
            }
            COHORT_TRY(
                count(value, sub, kMaxDebugRanks, "ranks", "the most ranks a debug job has"));
            size_t i = 0;
            for (const YamlNode& item : value.items) {
              const std::string at = sub + "[" + std::to_string(i++) + "]";
              note(at, item);
              COHORT_ASSIGN(int rank, integer(item, at, 0));
              d.ranks.push_back(rank);
            }
          } else if (key == "post_mortem") {
            COHORT_ASSIGN(d.post_mortem, boolean(value, sub));
          } else if (key == "wait_limit") {
            COHORT_ASSIGN(d.wait_limit, duration(value, sub));
          } else if (key == "port") {
            COHORT_ASSIGN(d.port, integer(value, sub, 1));
          } else {
            COHORT_ASSIGN(d.connect, scalar(value, sub));
          }
          return {};
        }));
    std::sort(d.ranks.begin(), d.ranks.end());
    d.ranks.erase(std::unique(d.ranks.begin(), d.ranks.end()), d.ranks.end());
    return d;
  }

  Result<Network> network(const YamlNode& node, const std::string& path) {
    Network net;
    COHORT_TRY(forEachField(node, path, {"interface", "cidr"},
                            [&](const std::string& key, const YamlNode& value) -> Result<void> {
                              COHORT_ASSIGN(std::string text, scalar(value, path + "." + key));
                              (key == "interface" ? net.interface : net.cidr) = text;
                              return {};
                            }));
    return net;
  }

  Result<SlurmOptions> slurm(const YamlNode& node, const std::string& path) {
    SlurmOptions slurm;
    COHORT_TRY(forEachField(
        node, path, {"partition", "account", "qos", "options"},
        [&](const std::string& key, const YamlNode& value) -> Result<void> {
          const std::string sub = path + "." + key;
          if (key == "options") {
            COHORT_ASSIGN(slurm.options, stringList(value, sub, kMaxSlurmOptions));
          } else {
            COHORT_ASSIGN(std::string text, scalar(value, sub));
            (key == "partition" ? slurm.partition : key == "account" ? slurm.account : slurm.qos) =
                text;
          }
          return {};
        }));
    return slurm;
  }

  Result<VolcanoOptions> volcano(const YamlNode& node, const std::string& path) {
    VolcanoOptions volcano;
    COHORT_TRY(forEachField(node, path, {"queue", "priority_class", "device_resource"},
                            [&](const std::string& key, const YamlNode& value) -> Result<void> {
                              COHORT_ASSIGN(std::string text, scalar(value, path + "." + key));
                              (key == "queue"            ? volcano.queue
                               : key == "priority_class" ? volcano.priority_class
                                                         : volcano.device_resource) = text;
                              return {};
                            }));
    return volcano;
  }

  // environment: a preset's or saved environment's name, or {image: REF}.
  Result<void> environment(const YamlNode& node, JobSpec& spec) {
    if (!node.isMap()) {
      COHORT_ASSIGN(spec.environment, scalar(node, "environment"));
      return {};
    }
    return forEachField(node, "environment", {"image"},
                        [&](const std::string&, const YamlNode& value) -> Result<void> {
                          COHORT_ASSIGN(spec.image, scalar(value, "environment.image"));
                          return {};
                        });
  }

  Result<JobSpec> job(const YamlNode& root) {
    JobSpec spec = defaultSpec();
    bool launcher_given = false;
    origin_.where[""] = where(root);
    COHORT_TRY(forEachField(
        root, "",
        {"name",
         "framework",
         "launcher",
         "mode",
         "rank_table_version",
         "compat",
         "task_flags",
         "workdir",
         "command",
         "hyperparameters",
         "env",
         "roles",
         "inputs",
         "outputs",
         "policy",
         "backend",
         "network",
         "slurm",
         "volcano",
         "preload",
         "environment",
         "debug",
         "session"},
        [&](const std::string& key, const YamlNode& value) -> Result<void> {
          if (key == "name") {
            COHORT_ASSIGN(spec.name, scalar(value, key));
          } else if (key == "framework") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            auto f = parseFramework(clip(text));
            if (!f) return bad(value, key, f.error().message);
            spec.framework = *f;
            if (!launcher_given && *f == Framework::kMpi) spec.launcher = Launcher::kMpirun;
          } else if (key == "launcher") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            auto l = parseLauncher(clip(text));
            if (!l) return bad(value, key, l.error().message);
            spec.launcher = *l;
            launcher_given = true;
          } else if (key == "mode") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            if (text == "dynamic_cluster") {
              spec.mindspore_mode = MindSporeMode::kDynamicCluster;
            } else if (text == "rank_table") {
              spec.mindspore_mode = MindSporeMode::kRankTable;
            } else {
              return bad(value, key,
                         "unknown mode '" + clip(text) + "' (dynamic_cluster, rank_table)");
            }
          } else if (key == "rank_table_version") {
            COHORT_ASSIGN(spec.rank_table_version, scalar(value, key));
            if (spec.rank_table_version != "1.0" && spec.rank_table_version != "0.1") {
              return bad(value, key, "must be \"1.0\" or \"0.1\"");
            }
          } else if (key == "compat") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            if (text != "modelarts" && text != "none") {
              return bad(value, key, "unknown compat '" + clip(text) + "' (modelarts, none)");
            }
            spec.compat_modelarts = text == "modelarts";
          } else if (key == "task_flags") {
            COHORT_ASSIGN(bool on, boolean(value, key));
            spec.task_flags = on;
          } else if (key == "workdir") {
            COHORT_ASSIGN(spec.workdir, scalar(value, key));
          } else if (key == "command") {
            COHORT_ASSIGN(spec.command, stringList(value, key, kMaxCommandArgs));
          } else if (key == "hyperparameters") {
            COHORT_ASSIGN(spec.hyperparameters,
                          keyValues(value, key, kMaxHyperparameters,
                                    "pass a configuration file as one hyperparameter"));
          } else if (key == "env") {
            COHORT_ASSIGN(spec.env, keyValues(value, key, kMaxEnv,
                                              "put the settings in a file the job reads"));
          } else if (key == "roles") {
            if (!value.isMap() || value.size() == 0) {
              return bad(value, key, "expected a mapping of role names, e.g. worker: {nodes: 2}, got " +
                                         (value.isMap() ? std::string("an empty one") : kindOf(value)));
            }
            COHORT_TRY(count(value, key, kMaxRoles, "roles", "roles that run alike can be one role"));
            spec.roles.clear();
            COHORT_TRY(forEachEntry(
                value, key, {}, [&](const std::string& name, const YamlNode& body) -> Result<void> {
                  COHORT_ASSIGN(Role r, role(name, body, "roles." + name));
                  spec.roles.push_back(r);
                  return {};
                }));
          } else if (key == "inputs") {
            COHORT_ASSIGN(spec.inputs, inputs(value, key));
          } else if (key == "outputs") {
            COHORT_ASSIGN(spec.outputs, outputs(value, key));
          } else if (key == "backend") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            auto b = parseBackend(clip(text));
            if (!b) return bad(value, key, b.error().message);
            spec.backend = *b;
          } else if (key == "network") {
            COHORT_ASSIGN(spec.network, network(value, key));
          } else if (key == "slurm") {
            COHORT_ASSIGN(spec.slurm, slurm(value, key));
          } else if (key == "volcano") {
            COHORT_ASSIGN(spec.volcano, volcano(value, key));
          } else if (key == "preload") {
            COHORT_ASSIGN(spec.preload, stringList(value, key, kMaxPreload));
            spec.preload_given = true;
          } else if (key == "environment") {
            COHORT_TRY(environment(value, spec));
          } else if (key == "debug") {
            COHORT_ASSIGN(spec.debug, debug(value, key));
          } else if (key == "session") {
            Session session;
            COHORT_TRY(forEachField(
                value, key,
                {"idle_timeout", "user", "authorized_key", "host_key", "jupyter", "jupyter_token"},
                [&](const std::string& field, const YamlNode& v) -> Result<void> {
                  const std::string sub = key + "." + field;
                  if (field == "idle_timeout") {
                    COHORT_ASSIGN(session.idle_timeout, duration(v, sub));
                  } else if (field == "user") {
                    COHORT_ASSIGN(session.user, scalar(v, sub));
                  } else if (field == "authorized_key") {
                    COHORT_ASSIGN(session.authorized_key, scalar(v, sub));
                  } else if (field == "jupyter") {
                    COHORT_ASSIGN(session.jupyter, boolean(v, sub));
                  } else if (field == "jupyter_token") {
                    COHORT_ASSIGN(session.jupyter_token, scalar(v, sub));
                  } else {
                    COHORT_ASSIGN(session.host_key, scalar(v, sub));
                  }
                  return {};
                }));
            spec.session = session;
          } else {
            COHORT_ASSIGN(spec.policy, policy(value, key));
          }
          return {};
        }));
    spec.origin = std::move(origin_);
    return spec;
  }

 private:
  std::string file_;
  Origin origin_;
  int line_ = 1;
};

Result<JobSpec> parseYaml(const std::string& text, const std::string& file_name) {
  auto refuse = [&](int line, const std::string& what) {
    return fail(Code::kInvalidArgument, file_name + ":" + std::to_string(line) + ": " + what);
  };
  const std::string deep = "nested deeper than " + std::to_string(kMaxNestingDepth) +
                           " levels ([ ] and { } inside one another); a job file needs 4";
  if (text.size() > kMaxJobFileBytes) {
    return refuse(1, "job: the job file " +
                         tooLong(text.size(), kMaxJobFileBytes,
                                 "1 MiB: keep data and long lists in files the job reads"));
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) {
    // JSON, the form `cohort submit` sends and the server stores.
    const size_t at = jsonTooDeepAt(text, kMaxNestingDepth);
    if (at != std::string::npos) return refuse(lineOfOffset(text, at), "job: " + deep);
  }
  // One reader, libyaml's events (spec/yaml_tree.h): depth, size and a second document are
  // refused as they arrive, before anything is built from them.
  YamlLimits limits;
  limits.max_depth = kMaxNestingDepth;
  limits.max_nodes = kMaxJobFileNodes;
  auto root = parseYamlDocument(text, limits);
  if (!root) {
    const std::string& what = root.error().what;
    return refuse(root.error().line,
                  "job: " + (startsWith(what, "nested deeper") ? deep : what));
  }
  if (root->isNull()) return refuse(1, "job: the job file is empty");
  Parser parser(file_name);
  return parser.job(*root);
}

}  // namespace

Result<JobSpec> parseJobFile(const std::string& text, const std::string& file_name) {
  try {
    return parseYaml(text, file_name);
  } catch (const std::exception& e) {
    // Only a bug or exhausted memory gets here: still an error, never an exception.
    return fail(Code::kInternal, file_name + ":1: job: " + e.what());
  }
}

namespace {

std::string whereFrom(const Origin& origin, const std::string& path) {
  std::string p = path;
  for (;;) {
    auto it = origin.where.find(p);
    if (it != origin.where.end()) return it->second.empty() ? "" : it->second + ": ";
    if (p.empty()) return "";
    size_t cut = p.find_last_of(".[");
    p = cut == std::string::npos ? "" : p.substr(0, cut);
  }
}

// Refusals of validate(): "<where the field came from>: <path>: <what>", where is file:line or
// the flag that set the field (spec.origin), found for the path or its nearest ancestor.
class Refusal {
 public:
  explicit Refusal(const JobSpec& spec) : origin_(spec.origin) {}

  tl::unexpected<Error> operator()(const std::string& path, const std::string& what) const {
    return fail(Code::kInvalidArgument, whereFrom(origin_, path) + path + ": " + what);
  }

 private:
  const Origin& origin_;
};

bool wordCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

const std::string kFileAdvice = "put large values in a file the job reads";

Result<void> validateFramework(const JobSpec& spec) {
  const Refusal bad(spec);
  const std::string launcher = launcherName(spec.launcher);
  const bool torch_launcher =
      spec.launcher == Launcher::kTorchrun || spec.launcher == Launcher::kSpawn;
  if (torch_launcher && spec.framework != Framework::kPyTorch) {
    return bad("launcher", "'" + launcher + "' is for framework pytorch");
  }
  if (spec.task_flags && spec.framework != Framework::kTensorFlow &&
      spec.framework != Framework::kDeepSpeed) {
    return bad("task_flags", "appends --task_name/--task_index to TensorFlow's tasks and "
                             "--local_rank to DeepSpeed's ranks; this job's framework is '" +
                                 std::string(frameworkName(spec.framework)) + "'");
  }
  if (spec.launcher == Launcher::kMpirun && spec.framework != Framework::kMpi) {
    return bad("launcher", "'mpirun' is for framework mpi");
  }
  if (spec.launcher == Launcher::kPreload && spec.framework != Framework::kPyTorch &&
      spec.framework != Framework::kGeneric) {
    return bad("launcher", "'preload' is for framework pytorch or generic");
  }
  // A --launcher flag may set aside a job file's preload launcher (to compare), not the file.
  const auto launcher_from = spec.origin.where.find("launcher");
  const bool launcher_flag =
      launcher_from != spec.origin.where.end() && startsWith(launcher_from->second, "--");
  if (spec.preload_given && spec.launcher != Launcher::kPreload && !launcher_flag) {
    return bad("preload", "names the modules of launcher: preload; this job's launcher is '" +
                              launcher + "'");
  }
  for (size_t i = 0; i < spec.preload.size(); ++i) {
    const std::string& m = spec.preload[i];
    bool ok = !m.empty() && m.size() <= 128 && m.front() != '.' && m.back() != '.' &&
              m.find("..") == std::string::npos && !(m.front() >= '0' && m.front() <= '9');
    for (char c : m) ok = ok && (wordCharacter(c) && c != '-');
    if (!ok) {
      return bad("preload[" + std::to_string(i) + "]",
                 "'" + m.substr(0, 64) + "' is not a Python module name (torch, numpy.linalg)");
    }
  }
  if (spec.framework == Framework::kDeepSpeed && spec.roles.size() != 1) {
    return bad("roles", "DeepSpeed's ranks are one role; this job has " +
                            std::to_string(spec.roles.size()));
  }
  if ((torch_launcher || spec.launcher == Launcher::kMpirun) && spec.roles.size() != 1) {
    return bad("launcher", "'" + launcher + "' runs one role; this job has " +
                               std::to_string(spec.roles.size()));
  }
  if (spec.framework == Framework::kTensorFlow) {
    for (const Role& role : spec.roles) {
      if (role.name != "chief" && role.name != "worker" && role.name != "ps" &&
          role.name != "evaluator") {
        return bad("roles." + role.name, "TensorFlow roles are chief, worker, ps and evaluator");
      }
      if (role.name == "chief" || role.name == "evaluator") {
        if (role.nodes * role.procs_per_node != 1) {
          return bad("roles." + role.name, "TensorFlow has exactly one " + role.name +
                                               " (nodes: 1, procs_per_node: 1)");
        }
      }
    }
  }
  if (spec.framework == Framework::kMindSpore) {
    if (spec.roles.size() != 1 || spec.roles[0].name != "worker") {
      return bad("roles", "a MindSpore job has one role, 'worker' (cohort adds the scheduler)");
    }
    const Role& worker = spec.roles[0];
    if (spec.mindspore_mode == MindSporeMode::kRankTable && worker.nodes > 1 &&
        worker.procs_per_node != 8) {
      return bad("roles.worker.procs_per_node",
                 "a rank-table (Ascend) job on several machines needs 8 devices per machine, "
                 "got " + std::to_string(worker.procs_per_node) +
                     " (use nodes: 1, or procs_per_node: 8)");
    }
  } else if (spec.mindspore_mode == MindSporeMode::kRankTable) {
    return bad("mode", "'rank_table' is for framework mindspore");
  }
  return {};
}

// Names and values of env or hyperparameters: counts, lengths, each name once.
// "10.0.0.0/8": four numbers and a prefix length.
bool isCidr(const std::string& text) {
  unsigned a, b, c, d, n;
  char tail;
  return std::sscanf(text.c_str(), "%3u.%3u.%3u.%3u/%2u%c", &a, &b, &c, &d, &n, &tail) == 5 &&
         a < 256 && b < 256 && c < 256 && d < 256 && n <= 32;
}

// Slurm's names and cohort's sbatch options go into a batch script: only characters that cannot
// end a line, quote, or start a shell word of their own.
bool slurmWord(const std::string& text) {
  return !text.empty() && text.size() <= 256 &&
         std::all_of(text.begin(), text.end(), [](char c) {
           return wordCharacter(c) || std::strchr(",:=/@%+", c) != nullptr;
         });
}

// A Kubernetes object's name in a namespace: a DNS-1123 subdomain (what Volcano's queue and a
// PriorityClass are named by).
bool dnsSubdomain(const std::string& text) {
  if (text.empty() || text.size() > 253) return false;
  for (const std::string& label : split(text, '.')) {
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
  }
  return true;
}

Result<void> validateVolcano(const JobSpec& spec) {
  const Refusal bad(spec);
  const VolcanoOptions& volcano = spec.volcano;
  for (const auto& [field, value] :
       {std::pair<std::string, const std::string&>{"volcano.queue", volcano.queue},
        {"volcano.priority_class", volcano.priority_class}}) {
    if (!value.empty() && !dnsSubdomain(value)) {
      return bad(field, "'" + clip(value) +
                            "' is not a Kubernetes name (lower-case letters, digits, '-' and '.', "
                            "at most 253)");
    }
  }
  const std::string& device = volcano.device_resource;
  if (!device.empty() && device != "nvidia.com/gpu" && !startsWith(device, "huawei.com/Ascend")) {
    return bad("volcano.device_resource",
               "'" + clip(device) +
                   "': expected nvidia.com/gpu or huawei.com/Ascend910 (or another "
                   "huawei.com/Ascend* resource)");
  }
  if (!device.empty() && !std::all_of(device.begin(), device.end(),
                                      [](char c) { return wordCharacter(c) || c == '/'; })) {
    return bad("volcano.device_resource", "'" + clip(device) + "' is not a resource name");
  }
  if (!spec.image.empty() && !validImageReference(spec.image)) {
    return bad(
        "environment.image",
        "'" + clip(spec.image) +
            "' is not an image reference: expected [HOST[:PORT]/]NAME[:TAG][@DIGEST] with "
            "a lower-case NAME, e.g. docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime "
            "or localhost/train:1");
  }
  return {};
}

Result<void> validateCluster(const JobSpec& spec) {
  const Refusal bad(spec);
  const Network& net = spec.network;
  if (!net.interface.empty() && !net.cidr.empty()) {
    return bad("network", "give interface or cidr, not both");
  }
  if (!net.interface.empty() &&
      (net.interface.size() > 15 ||
       !std::all_of(net.interface.begin(), net.interface.end(), wordCharacter))) {
    return bad("network.interface", "'" + clip(net.interface) + "' is not an interface name");
  }
  if (!net.cidr.empty() && !isCidr(net.cidr)) {
    return bad("network.cidr", "expected an IPv4 network such as 10.0.0.0/8, got '" +
                                   clip(net.cidr) + "'");
  }
  const SlurmOptions& slurm = spec.slurm;
  for (const auto& [field, value] : {std::pair<std::string, const std::string&>{
                                         "slurm.partition", slurm.partition},
                                     {"slurm.account", slurm.account},
                                     {"slurm.qos", slurm.qos}}) {
    if (!value.empty() && !slurmWord(value)) {
      return bad(field, "'" + clip(value) + "' is not a Slurm name (letters, digits, '-_.,')");
    }
  }
  // What cohort decides itself: one agent per node, its output, and the job's name.
  static const char* kOwn[] = {"--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node",
                               "--output", "-o", "--error", "-e", "--job-name", "-J",
                               "--parsable", "--wrap", "--export"};
  for (size_t i = 0; i < slurm.options.size(); ++i) {
    const std::string& option = slurm.options[i];
    const std::string sub = "slurm.options[" + std::to_string(i) + "]";
    if (!startsWith(option, "--") || !slurmWord(option)) {
      return bad(sub, "expected one sbatch option such as --constraint=ib or --exclusive, got '" +
                          clip(option) + "'");
    }
    const std::string name = option.substr(0, option.find('='));
    for (const char* own : kOwn) {
      if (name == own) {
        return bad(sub, "cohort sets " + name + " itself (nodes come from the roles)");
      }
    }
  }
  return validateVolcano(spec);
}

// A job's strings go into its plan, its record and the agents' messages, all JSON.
constexpr const char* kNotUtf8 =
    "is not UTF-8 text (a job's names, values and arguments are kept as JSON, which must be; "
    "pass bytes in a file the job reads)";

Result<void> validatePairs(const JobSpec& spec, const KeyValues& pairs, const std::string& path,
                           int max, const std::string& advice) {
  const Refusal bad(spec);
  if (pairs.size() > static_cast<size_t>(max)) {
    return bad(path, tooMany(pairs.size(), max, "entries", advice));
  }
  std::set<std::string_view> names;
  for (const auto& [key, value] : pairs) {
    const std::string sub = path + "." + clip(key);
    if (key.empty()) return bad(path, "a name is empty");
    if (key.size() > kMaxKeyBytes) {
      return bad(sub, "the name " + tooLong(key.size(), kMaxKeyBytes, "names are short words"));
    }
    if (value.size() > kMaxValueBytes) {
      return bad(sub, "the value " + tooLong(value.size(), kMaxValueBytes,
                                             "128 KiB, the most the kernel passes to a program "
                                             "in one string: " + kFileAdvice));
    }
    if (!validUtf8(key) || !validUtf8(value)) return bad(sub, kNotUtf8);
    if (!names.insert(key).second) return bad(sub, "given twice");
  }
  return {};
}

Result<void> validatePath(const JobSpec& spec, const std::string& path, const std::string& value) {
  if (value.size() > kMaxPathBytes) {
    return Refusal(spec)(path, tooLong(value.size(), kMaxPathBytes,
                                       "4096, the longest path the system opens"));
  }
  if (!validUtf8(value)) return Refusal(spec)(path, kNotUtf8);
  return {};
}

Result<void> validateRoles(const JobSpec& spec) {
  const Refusal bad(spec);
  if (spec.roles.empty()) return bad("roles", "at least one role is needed");
  if (spec.roles.size() > static_cast<size_t>(kMaxRoles)) {
    return bad("roles", tooMany(spec.roles.size(), kMaxRoles, "roles",
                                "roles that run alike can be one role"));
  }
  std::set<std::string> names;
  int64_t nodes = 0, procs = 0;
  for (const Role& role : spec.roles) {
    const std::string path = "roles." + clip(role.name);
    if (role.name.empty() || role.name.size() > kMaxNameBytes) {
      return bad(path, "a role's name must have 1 to " + std::to_string(kMaxNameBytes) +
                           " characters, got " + std::to_string(role.name.size()));
    }
    if (!std::all_of(role.name.begin(), role.name.end(), wordCharacter) ||
        role.name.find_first_not_of('.') == std::string::npos) {
      return bad(path, "role name '" + role.name +
                           "' may use only letters, digits, '-', '_' and '.' (it names files)");
    }
    if (!names.insert(role.name).second) return bad(path, "role given twice");
    if (role.nodes < 1) return bad(path + ".nodes", "must be at least 1");
    if (role.nodes > kMaxNodesPerRole) {
      return bad(path + ".nodes", "must be at most " + std::to_string(kMaxNodesPerRole) +
                                      ", got " + std::to_string(role.nodes));
    }
    if (role.procs_per_node < 1 && role.procs_per_node != kAutoProcs) {
      return bad(path + ".procs_per_node", "must be at least 1");
    }
    if (role.procs_per_node > kMaxProcsPerNode) {
      return bad(path + ".procs_per_node", "must be at most " + std::to_string(kMaxProcsPerNode) +
                                               ", got " + std::to_string(role.procs_per_node) +
                                               " (spread the processes over more nodes)");
    }
    const Resources& res = role.resources;
    if (res.gpus < 0 || res.gpus > kMaxGpusPerRank) {
      return bad(path + ".resources.gpus", "must be from 0 to " + std::to_string(kMaxGpusPerRank) +
                                               ", got " + std::to_string(res.gpus));
    }
    if (!(res.cpus >= 0.001 && res.cpus <= kMaxCpusPerRank)) {
      return bad(path + ".resources.cpus",
                 "must be from 0.001 to " + std::to_string(static_cast<int>(kMaxCpusPerRank)) +
                     " per rank");
    }
    if (res.memory_bytes < 0 || res.memory_bytes > kMaxMemoryPerRank) {
      return bad(path + ".resources.memory", "must be at most 64Ti per rank, got " +
                                                 std::to_string(res.memory_bytes) + " bytes");
    }
    if (res.pids < 0 || res.pids > kMaxPidsPerRank) {
      return bad(path + ".resources.pids", "must be from 1 to " +
                                               std::to_string(kMaxPidsPerRank) + " per rank, got " +
                                               std::to_string(res.pids));
    }
    nodes += role.nodes;
    procs += static_cast<int64_t>(role.nodes) * std::max(role.procs_per_node, 1);
  }
  if (nodes > kMaxTotalNodes) {
    return bad("roles", tooMany(static_cast<size_t>(nodes), kMaxTotalNodes, "nodes in all",
                                "use fewer nodes with more processes each"));
  }
  if (procs > kMaxTotalProcs) {
    return bad("roles", tooMany(static_cast<size_t>(procs), kMaxTotalProcs,
                                "processes in all (nodes x procs_per_node of every role)",
                                "use fewer nodes or fewer processes per node"));
  }
  return {};
}

Result<void> validateData(const JobSpec& spec) {
  const Refusal bad(spec);
  if (spec.inputs.size() > static_cast<size_t>(kMaxInputs)) {
    return bad("inputs", tooMany(spec.inputs.size(), kMaxInputs, "inputs",
                                 "stage a directory that holds them"));
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const Input& in = spec.inputs[i];
    const std::string path = "inputs[" + std::to_string(i) + "]";
    COHORT_TRY(validatePath(spec, path + ".source", in.source));
    COHORT_TRY(validatePath(spec, path + ".target", in.target));
    if (in.arg.size() > kMaxKeyBytes) {
      return bad(path + ".arg", tooLong(in.arg.size(), kMaxKeyBytes, "it names a flag"));
    }
  }
  if (spec.outputs.size() > static_cast<size_t>(kMaxOutputs)) {
    return bad("outputs", tooMany(spec.outputs.size(), kMaxOutputs, "outputs",
                                  "copy out a directory that holds them"));
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    const std::string path = "outputs[" + std::to_string(i) + "]";
    COHORT_TRY(validatePath(spec, path + ".source", spec.outputs[i].source));
    COHORT_TRY(validatePath(spec, path + ".target", spec.outputs[i].target));
  }
  return {};
}

// A long duration as a person reads it: "31 days", else "2h00m".
// `d` as a job file writes it, exactly (parseDuration reads it back): its largest units, each
// that is not 0 ("10m", "1h30m", "2d", "1m500ms", "0s"), so that what a job file said in
// minutes reads in minutes again (the console's configuration view, cohort rerun).
std::string jobFileDuration(Millis d) {
  static const struct {
    const char* unit;
    int64_t ms;
  } kUnits[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
  int64_t left = d.count();
  if (left <= 0) return left == 0 ? "0s" : std::to_string(left) + "ms";
  std::string out;
  for (const auto& u : kUnits) {
    if (left >= u.ms) {
      out += std::to_string(left / u.ms) + u.unit;
      left %= u.ms;
    }
  }
  return out;
}

std::string describe(Millis d) {
  constexpr int64_t kDay = 86400000;
  if (d.count() >= kDay && d.count() % kDay == 0) return std::to_string(d.count() / kDay) + " days";
  return formatDuration(d);
}

Result<void> validatePolicy(const JobSpec& spec, const std::set<std::string>& roles) {
  const Refusal bad(spec);
  const Policy& policy = spec.policy;
  if (policy.success.size() > static_cast<size_t>(kMaxRoles)) {
    return bad("policy.success", tooMany(policy.success.size(), kMaxRoles, "roles",
                                         "name each key role once"));
  }
  for (const auto& key : policy.success) {
    if (!roles.count(key)) {
      return bad("policy.success",
                 "no role named '" + clip(key) + "' (roles: " +
                     join(std::vector<std::string>(roles.begin(), roles.end()), ", ") + ")");
    }
  }
  if (policy.max_restarts < 0 || policy.max_restarts > kMaxRestarts) {
    return bad("policy.max_restarts", "must be from 0 to " + std::to_string(kMaxRestarts) +
                                          ", got " + std::to_string(policy.max_restarts));
  }
  if (policy.grace_period.count() < 0 || policy.grace_period > kMaxGracePeriod) {
    return bad("policy.grace_period",
               describe(policy.grace_period) + " is longer than 30 days, the longest "
               "grace period (the time between the stop signal and SIGKILL)");
  }
  if (policy.heartbeat_timeout < Millis(1000) || policy.heartbeat_timeout > Millis(3600000)) {
    return bad("policy.heartbeat_timeout",
               "must be from 1s to 1h (how long a node may say nothing before it is lost), got " +
                   describe(policy.heartbeat_timeout));
  }
  // Progress reaches the coordinator every 2 s: a shorter limit would see hangs that are not.
  for (const auto& [name, limit] : {std::pair{"policy.hang_timeout", policy.hang_timeout},
                                    std::pair{"policy.startup_timeout", policy.startup_timeout}}) {
    if (limit && (*limit < Millis(5000) || *limit > kMaxRuntime)) {
      return bad(name, std::string("must be from 5s to 365d (how long no rank may make "
                                   "progress: print, log a metric or call cohort.heartbeat()), "
                                   "got ") +
                           describe(*limit));
    }
  }
  if (std::find(std::begin(kStopSignals), std::end(kStopSignals), policy.stop_signal) ==
      std::end(kStopSignals)) {
    auto named = parseStopSignal(stopSignalName(policy.stop_signal));
    return bad("policy.stop_signal", named ? "not a stop signal" : named.error().message);
  }
  if (policy.max_runtime) {
    if (policy.max_runtime->count() <= 0) return bad("policy.max_runtime", "must be longer than 0");
    if (*policy.max_runtime > kMaxRuntime) {
      return bad("policy.max_runtime", describe(*policy.max_runtime) +
                                           " is longer than 365 days, the longest max_runtime "
                                           "(leave it out for no limit)");
    }
  }
  return {};
}

// An IDE's debug server, "HOST:PORT": an IPv4 address or a host name, and a port.
bool hostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon > 253) return false;
  auto port = parseInt(text.substr(colon + 1));
  return port && *port > 0 && *port <= 65535 &&
         std::all_of(text.begin(), text.begin() + static_cast<long>(colon),
                     [](char c) { return wordCharacter(c) && c != '_'; });
}

Result<void> validateDebug(const JobSpec& spec) {
  const Debug& d = spec.debug;
  if (!d.enabled) return {};
  const Refusal bad(spec);
  const int procs = totalProcs(spec);
  if (procs > kMaxDebugRanks) {
    return bad("debug", "a debug job has at most " + std::to_string(kMaxDebugRanks) +
                            " ranks (each gets a port of its own); this one has " +
                            std::to_string(procs) + ": debug a smaller copy of the job");
  }
  if (spec.launcher != Launcher::kDirect && spec.launcher != Launcher::kPreload) {
    return bad("debug",
               "needs launcher: direct or preload (cohort then starts each rank itself, under "
               "the debugger); launcher '" +
                   std::string(launcherName(spec.launcher)) +
                   "' starts the ranks itself: run the job with --launcher direct, which gives "
                   "every rank the same variables");
  }
  const std::string program =
      spec.command.empty() ? "" : spec.command[0].substr(spec.command[0].rfind('/') + 1);
  if (!startsWith(program, "python")) {
    return bad("debug",
               "debugs Python ranks: the command must start with a Python interpreter "
               "(python3 train.py), not '" +
                   clip(spec.command.empty() ? "" : spec.command[0]) + "'");
  }
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    if (d.ranks[i] < 0 || d.ranks[i] >= procs) {
      return bad("debug.ranks", "rank " + std::to_string(d.ranks[i]) +
                                    " does not exist: the job has " + std::to_string(procs) +
                                    " rank(s), 0 to " + std::to_string(procs - 1));
    }
  }
  if (d.wait_limit.count() <= 0 || d.wait_limit > kMaxDebugWait) {
    return bad("debug.wait_limit",
               "must be longer than 0 and at most 7 days, got " + describe(d.wait_limit));
  }
  if (d.port != 0 && (d.port < 1024 || d.port + procs - 1 > 65535)) {
    return bad("debug.port", "rank r listens on port + r: give a port from 1024 to " +
                                 std::to_string(65536 - procs) + ", got " + std::to_string(d.port));
  }
  if (!d.connect.empty() && !hostPort(d.connect)) {
    return bad("debug.connect",
               "expected HOST:PORT of the IDE's debug server, got '" + clip(d.connect) + "'");
  }
  if (!d.connect.empty() && d.port != 0) {
    return bad("debug.connect", "a rank dials the IDE (connect) or listens (port), not both");
  }
  if (d.pdb) {
    if (d.all || d.ranks.size() != 1) {
      return bad("debug.ranks",
                 "pdb takes one rank, the one whose stdin and stdout are the "
                 "terminal (--debug N --pdb)");
    }
    if (spec.backend != Backend::kLocal) {
      return bad("debug", "pdb needs the terminal of cohort run: backend local");
    }
  }
  return {};
}

// What planning costs: every rank gets its own argv and environment: cohort's ~50 variables
// (about 2 KiB with their paths, and COHORT_HOSTS and the managed service's VC_*_HOSTS list every
// node) and the job's. Bounded, so that a plan at the limits is made, printed and written as
// plan.json in well under a second, and so that each rank's exec fits the kernel's limit.
Result<void> validateSession(const JobSpec& spec) {
  if (!spec.session) return {};
  const Refusal bad(spec);
  const Session& s = *spec.session;
  if (s.idle_timeout.count() <= 0 || s.idle_timeout > kMaxRuntime) {
    return bad("session.idle_timeout",
               "must be longer than 0 and at most 365 days, got " + describe(s.idle_timeout));
  }
  const bool user_ok = !s.user.empty() && s.user.size() <= 32 &&
                       (std::islower(static_cast<unsigned char>(s.user[0])) || s.user[0] == '_') &&
                       std::all_of(s.user.begin(), s.user.end(), [](char c) {
                         return std::islower(static_cast<unsigned char>(c)) ||
                                std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                       });
  if (!user_ok) {
    return bad("session.user", "'" + clip(s.user) +
                                   "' is not a login name (lower-case letters, digits, '_' and "
                                   "'-', at most 32, starting with a letter or '_')");
  }
  for (const auto& [field, value] : {std::pair<const char*, const std::string&>{
                                         "session.authorized_key", s.authorized_key},
                                     {"session.host_key", s.host_key}}) {
    if (value.size() > kMaxSessionKeyBytes) {
      return bad(field, tooLong(value.size(), kMaxSessionKeyBytes, "one SSH key"));
    }
    const bool one_line = std::all_of(value.begin(), value.end(), [](char c) {
      return c >= 0x20 && c < 0x7f;
    });
    if (!one_line) return bad(field, "must be one line of printable ASCII (an SSH key)");
  }
  const bool token_ok = s.jupyter_token.size() <= 128 &&
                        std::all_of(s.jupyter_token.begin(), s.jupyter_token.end(), [](char c) {
                          return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                        });
  if (!token_ok) return bad("session.jupyter_token", "must be at most 128 hex digits");
  if (spec.framework != Framework::kGeneric || spec.launcher != Launcher::kDirect) {
    return bad("session", "a session runs cohort's own program: framework generic, launcher direct");
  }
  return {};
}

Result<void> validatePlanSize(const JobSpec& spec) {
  const Refusal bad(spec);
  constexpr int64_t kCohortVariables = 48;
  constexpr int64_t kCohortBytes = 2048;
  constexpr int64_t kBytesPerHost = 12;  // "10.1.23.45,": most addresses are shorter
  int64_t rank_bytes = 0;
  for (const std::string& arg : spec.command) rank_bytes += static_cast<int64_t>(arg.size()) + 1;
  for (const auto& [k, v] : spec.hyperparameters) {
    rank_bytes += static_cast<int64_t>(k.size() + v.size()) + 4;
  }
  for (const auto& [k, v] : spec.env) rank_bytes += static_cast<int64_t>(k.size() + v.size()) + 2;
  for (const Input& in : spec.inputs) {
    if (!in.arg.empty()) rank_bytes += static_cast<int64_t>(in.arg.size() + in.target.size()) + 4;
  }
  if (rank_bytes > static_cast<int64_t>(kMaxRankBytes)) {
    return bad("command", "with hyperparameters and env, each rank's arguments and variables "
                          "take " + std::to_string(rank_bytes) + " bytes; at most " +
                              std::to_string(kMaxRankBytes) +
                              " (1 MiB; exec refuses more): " + kFileAdvice);
  }
  int64_t procs = 0, nodes = 0;
  for (const Role& role : spec.roles) {
    procs += static_cast<int64_t>(role.nodes) * std::max(role.procs_per_node, 1);
    nodes += role.nodes;
  }
  // The managed service's variables name each role's hosts and count (VC_<ROLE>_HOSTS/_NUM).
  const int64_t roles = spec.compat_modelarts ? static_cast<int64_t>(spec.roles.size()) : 0;
  const int64_t entries = static_cast<int64_t>(spec.command.size() + spec.hyperparameters.size() +
                                               spec.env.size() + spec.inputs.size()) +
                          kCohortVariables + 2 * roles;
  if (procs * entries > kMaxPlanEntries) {
    return bad("roles", std::to_string(procs) + " ranks, each with about " +
                            std::to_string(entries) +
                            " arguments and variables of its own, make a plan of " +
                            std::to_string(procs * entries) + " entries; at most " +
                            std::to_string(kMaxPlanEntries) +
                            " (use fewer ranks, or fewer env entries and hyperparameters; "
                            "compat: none drops two variables per role)");
  }
  // TF_CONFIG lists every task's address ("host:port") in every rank's copy.
  const int64_t tf_config = spec.framework == Framework::kTensorFlow ? procs * 24 : 0;
  const int64_t share = kCohortBytes + rank_bytes + roles * 40 + tf_config +
                        nodes * kBytesPerHost * (spec.compat_modelarts ? 2 : 1);
  if (procs * share > kMaxPlanBytes) {
    return bad("roles", std::to_string(procs) + " ranks on " + std::to_string(nodes) +
                            " nodes, each rank with about " + std::to_string(share) +
                            " bytes of arguments and variables of its own (the host lists "
                            "name every node; TensorFlow's TF_CONFIG every task), make a plan "
                            "of about " +
                            std::to_string(procs * share >> 20) + " MiB; at most " +
                            std::to_string(kMaxPlanBytes >> 20) +
                            " MiB (use fewer nodes with more processes each, fewer ranks, "
                            "or smaller values; compat: none drops the VC_*_HOSTS lists)");
  }
  return {};
}

}  // namespace

Result<void> validate(const JobSpec& spec) {
  const Refusal bad(spec);
  if (spec.command.empty()) {
    return bad("command", "no command to run (give one after '--' or in the job file's 'command')");
  }
  if (spec.name.empty() || spec.name.size() > kMaxNameBytes) {
    return bad("name", "must have 1 to " + std::to_string(kMaxNameBytes) + " characters, got '" +
                           clip(spec.name) + "'");
  }
  if (!std::all_of(spec.name.begin(), spec.name.end(), wordCharacter) ||
      spec.name.find_first_not_of('.') == std::string::npos) {
    return bad("name", "'" + spec.name +
                           "' may use only letters, digits, '-', '_' and '.' (it names "
                           "directories)");
  }
  if (spec.command.size() > static_cast<size_t>(kMaxCommandArgs)) {
    return bad("command", tooMany(spec.command.size(), kMaxCommandArgs, "arguments",
                                  "pass a file of arguments instead"));
  }
  for (size_t i = 0; i < spec.command.size(); ++i) {
    if (spec.command[i].size() > kMaxValueBytes) {
      return bad("command[" + std::to_string(i) + "]",
                 tooLong(spec.command[i].size(), kMaxValueBytes,
                         "128 KiB, the most the kernel passes to a program in one string: " +
                             kFileAdvice));
    }
    if (!validUtf8(spec.command[i])) return bad("command[" + std::to_string(i) + "]", kNotUtf8);
  }
  COHORT_TRY(validatePath(spec, "workdir", spec.workdir));
  COHORT_TRY(validateRoles(spec));
  COHORT_TRY(validateFramework(spec));
  std::set<std::string> names;
  for (const Role& role : spec.roles) names.insert(role.name);
  COHORT_TRY(validatePolicy(spec, names));
  COHORT_TRY(validatePairs(spec, spec.hyperparameters, "hyperparameters", kMaxHyperparameters,
                           "pass a configuration file as one hyperparameter"));
  COHORT_TRY(validatePairs(spec, spec.env, "env", kMaxEnv,
                           "put the settings in a file the job reads"));
  for (const auto& [key, value] : spec.env) {
    if (key.find('=') != std::string::npos) {
      return bad("env." + clip(key), "'" + clip(key) + "' is not a valid variable name");
    }
    if (startsWith(key, "COHORT_")) {
      return bad("env." + key, "names starting with COHORT_ are set by cohort itself");
    }
  }
  COHORT_TRY(validateData(spec));
  COHORT_TRY(validateSession(spec));
  COHORT_TRY(validateCluster(spec));
  COHORT_TRY(validateDebug(spec));
  COHORT_TRY(validatePlanSize(spec));
  return {};
}

std::string fieldLabel(const JobSpec& spec, const std::string& path) {
  return whereFrom(spec.origin, path) + path + ": ";
}

std::vector<std::string> keyRoles(const JobSpec& spec) {
  if (!spec.policy.success.empty()) return spec.policy.success;
  if (spec.framework == Framework::kTensorFlow) {
    // ParameterServerStrategy: only the chief finishes; the managed service's ps/worker jobs
    // end with their workers. ps and evaluator never decide.
    for (const char* key : {"chief", "worker"}) {
      for (const Role& role : spec.roles) {
        if (role.name == key) return {key};
      }
    }
  }
  std::vector<std::string> all;
  for (const Role& role : spec.roles) all.push_back(role.name);
  return all;
}

bool debugWaitsAtStart(const Debug& debug, int rank) {
  return debug.enabled &&
         (debug.all || std::binary_search(debug.ranks.begin(), debug.ranks.end(), rank));
}

int totalNodes(const JobSpec& spec) {
  int n = 0;
  for (const Role& role : spec.roles) n += role.nodes;
  return n;
}

int totalProcs(const JobSpec& spec) {
  int n = 0;
  for (const Role& role : spec.roles) n += role.nodes * std::max(role.procs_per_node, 1);
  return n;
}

std::string toJobFile(const JobSpec& spec) {
  using Json = nlohmann::ordered_json;
  auto pairs = [](const KeyValues& kvs) {
    Json out = Json::object();
    for (const auto& [k, v] : kvs) out[k] = v;
    return out;
  };
  Json roles = Json::object();
  for (const Role& r : spec.roles) {
    Json role = {{"nodes", r.nodes}};
    role["procs_per_node"] = r.procs_per_node == kAutoProcs ? Json("auto") : Json(r.procs_per_node);
    role["resources"] = {{"gpus", r.resources.gpus}, {"memory", r.resources.memory_bytes}};
    // Only when asked for: a job that named no cpus is not held to the default.
    if (r.resources.cpus_given) role["resources"]["cpus"] = r.resources.cpus;
    if (r.resources.pids > 0) role["resources"]["pids"] = r.resources.pids;
    roles[r.name] = role;
  }
  Json inputs = Json::array();
  for (const Input& in : spec.inputs) {
    Json input = {{"source", in.source}, {"target", in.target},
                  {"mode", in.mode == Input::Mode::kLink ? "link" : "copy"}};
    if (!in.arg.empty()) input["arg"] = in.arg;
    inputs.push_back(input);
  }
  Json outputs = Json::array();
  for (const Output& out : spec.outputs) {
    outputs.push_back({{"source", out.source}, {"target", out.target},
                       {"when", out.always ? "always" : "success"}});
  }
  Json policy = {{"success", spec.policy.success},
                 {"max_restarts", spec.policy.max_restarts},
                 {"grace_period", jobFileDuration(spec.policy.grace_period)},
                 {"heartbeat_timeout",
                  jobFileDuration(spec.policy.heartbeat_timeout)},
                 {"stop_signal", stopSignalName(spec.policy.stop_signal)}};
  if (spec.policy.max_runtime) {
    policy["max_runtime"] = jobFileDuration(*spec.policy.max_runtime);
  }
  if (spec.policy.hang_timeout) {
    policy["hang_timeout"] = jobFileDuration(*spec.policy.hang_timeout);
  }
  if (spec.policy.startup_timeout) {
    policy["startup_timeout"] = jobFileDuration(*spec.policy.startup_timeout);
  }
  Json job = {{"name", spec.name},
              {"framework", frameworkName(spec.framework)},
              {"launcher", launcherName(spec.launcher)},
              {"mode", spec.mindspore_mode == MindSporeMode::kRankTable ? "rank_table"
                                                                        : "dynamic_cluster"},
              {"rank_table_version", spec.rank_table_version},
              {"compat", spec.compat_modelarts ? "modelarts" : "none"},
              {"workdir", spec.workdir},
              {"command", spec.command},
              {"hyperparameters", pairs(spec.hyperparameters)},
              {"env", pairs(spec.env)},
              {"roles", roles},
              {"inputs", inputs},
              {"outputs", outputs},
              {"policy", policy}};
  if (spec.preload_given) job["preload"] = spec.preload;
  if (spec.task_flags) job["task_flags"] = *spec.task_flags;
  if (spec.debug.enabled) {
    const Debug& d = spec.debug;
    Json debug = {{"ranks", d.all ? Json("all") : Json(d.ranks)},
                  {"post_mortem", d.post_mortem},
                  {"wait_limit", jobFileDuration(d.wait_limit)}};
    if (d.port != 0) debug["port"] = d.port;
    if (!d.connect.empty()) debug["connect"] = d.connect;
    job["debug"] = debug;
  }
  if (spec.session) {
    const Session& ss = *spec.session;
    job["session"] = {{"idle_timeout", std::to_string(ss.idle_timeout.count()) + "ms"},
                      {"user", ss.user},
                      {"authorized_key", ss.authorized_key},
                      {"host_key", ss.host_key}};
    if (ss.jupyter) job["session"]["jupyter"] = true;
    if (!ss.jupyter_token.empty()) job["session"]["jupyter_token"] = ss.jupyter_token;
  }
  if (!spec.environment.empty()) job["environment"] = spec.environment;
  if (!spec.image.empty()) job["environment"] = {{"image", spec.image}};
  // Only when asked for: a server decides where a job without one runs.
  if (spec.backend != Backend::kLocal) job["backend"] = backendName(spec.backend);
  Json network = Json::object();
  if (!spec.network.interface.empty()) network["interface"] = spec.network.interface;
  if (!spec.network.cidr.empty()) network["cidr"] = spec.network.cidr;
  if (!network.empty()) job["network"] = network;
  const SlurmOptions& so = spec.slurm;
  if (!so.partition.empty() || !so.account.empty() || !so.qos.empty() || !so.options.empty()) {
    Json slurm = {{"options", so.options}};
    if (!so.partition.empty()) slurm["partition"] = so.partition;
    if (!so.account.empty()) slurm["account"] = so.account;
    if (!so.qos.empty()) slurm["qos"] = so.qos;
    job["slurm"] = slurm;
  }
  const VolcanoOptions& vo = spec.volcano;
  Json volcano = Json::object();
  if (!vo.queue.empty()) volcano["queue"] = vo.queue;
  if (!vo.priority_class.empty()) volcano["priority_class"] = vo.priority_class;
  if (!vo.device_resource.empty()) volcano["device_resource"] = vo.device_resource;
  if (!volcano.empty()) job["volcano"] = volcano;
  // Never throws: bytes that are not UTF-8 (an argument given as a flag) become U+FFFD.
  return job.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string expandTarget(std::string target, const std::string& job_id,
                         const std::string& name) {
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"{job}", job_id}, {"{name}", name}}) {
    for (size_t at; (at = target.find(key)) != std::string::npos;) {
      target.replace(at, key.size(), value);
    }
  }
  return target;
}

}  // namespace cohort::spec
