#include "spec/job_spec.h"

#include <nlohmann/json.hpp>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <set>

namespace cohort::spec {

const char* frameworkName(Framework f) {
  switch (f) {
    case Framework::kPyTorch: return "pytorch";
    case Framework::kMindSpore: return "mindspore";
    case Framework::kTensorFlow: return "tensorflow";
    case Framework::kMpi: return "mpi";
    case Framework::kGeneric: return "generic";
  }
  return "generic";
}

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::kDirect: return "direct";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kSpawn: return "spawn";
    case Launcher::kMpirun: return "mpirun";
  }
  return "direct";
}

Result<Framework> parseFramework(const std::string& text) {
  for (Framework f : {Framework::kPyTorch, Framework::kMindSpore, Framework::kTensorFlow,
                      Framework::kMpi, Framework::kGeneric}) {
    if (text == frameworkName(f)) return f;
  }
  return fail(Code::kInvalidArgument,
              "unknown framework '" + text + "' (pytorch, mindspore, tensorflow, mpi, generic)");
}

Result<Launcher> parseLauncher(const std::string& text) {
  for (Launcher l : {Launcher::kDirect, Launcher::kTorchrun, Launcher::kSpawn, Launcher::kMpirun}) {
    if (text == launcherName(l)) return l;
  }
  return fail(Code::kInvalidArgument,
              "unknown launcher '" + text + "' (direct, torchrun, spawn, mpirun)");
}

JobSpec defaultSpec() {
  JobSpec spec;
  spec.roles.push_back(Role{"worker", 1, 1, {}});
  return spec;
}

namespace {

// Fields that DESIGN.md names but this version does not run yet: a clear refusal beats silently
// ignoring them.
const std::set<std::string> kNotYet = {"debug", "policy.hang_timeout", "policy.startup_timeout"};

// A relative path that stays inside its directory: no "..", not absolute.
bool containedPath(const std::string& path) {
  if (path.empty() || path[0] == '/') return false;
  for (const std::string& part : split(path, '/')) {
    if (part == "..") return false;
  }
  return true;
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  tl::unexpected<Error> bad(const YAML::Node& node, const std::string& path,
                            const std::string& what) const {
    std::string where = file_;
    if (node.Mark().line >= 0) where += ":" + std::to_string(node.Mark().line + 1);
    return fail(Code::kInvalidArgument, where + ": " + path + ": " + what);
  }

  Result<std::string> scalar(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) return bad(node, path, "expected a string or number");
    return node.Scalar();
  }

  Result<int> integer(const YAML::Node& node, const std::string& path, int min) const {
    COHORT_ASSIGN(std::string text, scalar(node, path));
    auto value = parseInt(text);
    if (!value) return bad(node, path, "expected an integer, got '" + text + "'");
    if (*value < min) {
      return bad(node, path, "must be at least " + std::to_string(min) + ", got " + text);
    }
    return *value;
  }

  Result<Millis> duration(const YAML::Node& node, const std::string& path) const {
    COHORT_ASSIGN(std::string text, scalar(node, path));
    auto value = parseDuration(text);
    if (!value) return bad(node, path, value.error().message);
    return *value;
  }

  Result<std::vector<std::string>> stringList(const YAML::Node& node,
                                              const std::string& path) const {
    std::vector<std::string> out;
    if (node.IsScalar()) {
      // A plain string is split on spaces, as a shell would for simple commands.
      for (auto& word : split(node.Scalar(), ' ')) {
        if (!word.empty()) out.push_back(word);
      }
      return out;
    }
    if (!node.IsSequence()) return bad(node, path, "expected a list of strings");
    for (size_t i = 0; i < node.size(); ++i) {
      COHORT_ASSIGN(std::string item, scalar(node[i], path + "[" + std::to_string(i) + "]"));
      out.push_back(item);
    }
    return out;
  }

  Result<KeyValues> keyValues(const YAML::Node& node, const std::string& path) const {
    if (!node.IsMap()) return bad(node, path, "expected a mapping of names to values");
    KeyValues out;
    for (const auto& kv : node) {
      std::string key = kv.first.Scalar();
      COHORT_ASSIGN(std::string value, scalar(kv.second, path + "." + key));
      out.emplace_back(key, value);
    }
    return out;
  }

  // Calls `field(key, value)` for each key of a mapping, refusing keys not in `known`.
  Result<void> forEachField(
      const YAML::Node& node, const std::string& path, const std::set<std::string>& known,
      const std::function<Result<void>(const std::string&, const YAML::Node&)>& field) const {
    if (!node.IsMap()) return bad(node, path.empty() ? "job" : path, "expected a mapping");
    for (const auto& kv : node) {
      std::string key = kv.first.Scalar();
      std::string sub = path.empty() ? key : path + "." + key;
      if (kNotYet.count(sub)) {
        return bad(kv.first, sub, "not supported by this version of cohort yet");
      }
      if (!known.count(key)) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        return bad(kv.first, sub, "unknown field (known here: " + list + ")");
      }
      COHORT_TRY(field(key, kv.second));
    }
    return {};
  }

  Result<Role> role(const std::string& name, const YAML::Node& node,
                    const std::string& path) const {
    Role role{name, 1, 1, {}};
    if (node.IsNull()) return role;
    COHORT_TRY(forEachField(
        node, path, {"nodes", "procs_per_node", "resources"},
        [&](const std::string& key, const YAML::Node& value) -> Result<void> {
          if (key == "nodes") {
            COHORT_ASSIGN(role.nodes, integer(value, path + ".nodes", 1));
          } else if (key == "procs_per_node") {
            if (value.IsScalar() && value.Scalar() == "auto") {
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

  Result<Resources> resources(const YAML::Node& node, const std::string& path) const {
    Resources res;
    COHORT_TRY(forEachField(
        node, path, {"gpus", "cpus", "memory"},
        [&](const std::string& key, const YAML::Node& value) -> Result<void> {
          std::string sub = path + "." + key;
          if (key == "gpus") {
            COHORT_ASSIGN(res.gpus, integer(value, sub, 0));
          } else if (key == "cpus") {
            COHORT_ASSIGN(std::string text, scalar(value, sub));
            auto cpus = parseCpus(text);
            if (!cpus || *cpus <= 0) {
              return bad(value, sub, "expected a positive number of CPUs, got '" + text + "'");
            }
            res.cpus = *cpus;
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

  Result<std::vector<Input>> inputs(const YAML::Node& node, const std::string& path) const {
    if (!node.IsSequence()) return bad(node, path, "expected a list of {source, target}");
    std::vector<Input> out;
    for (size_t i = 0; i < node.size(); ++i) {
      std::string sub = path + "[" + std::to_string(i) + "]";
      Input input;
      COHORT_TRY(forEachField(
          node[i], sub, {"source", "target", "mode", "arg"},
          [&](const std::string& key, const YAML::Node& value) -> Result<void> {
            COHORT_ASSIGN(std::string text, scalar(value, sub + "." + key));
            if (key == "source") {
              input.source = text;
            } else if (key == "target") {
              if (!containedPath(text)) {
                return bad(value, sub + ".target",
                           "must be a relative path inside the node's work directory, got '" +
                               text + "'");
              }
              input.target = text;
            } else if (key == "mode") {
              if (text != "copy" && text != "link") {
                return bad(value, sub + ".mode", "unknown mode '" + text + "' (copy, link)");
              }
              input.mode = text == "link" ? Input::Mode::kLink : Input::Mode::kCopy;
            } else {
              input.arg = text;
            }
            return {};
          }));
      if (input.source.empty() || input.target.empty()) {
        return bad(node[i], sub, "needs both source and target");
      }
      out.push_back(input);
    }
    return out;
  }

  Result<std::vector<Output>> outputs(const YAML::Node& node, const std::string& path) const {
    if (!node.IsSequence()) return bad(node, path, "expected a list of {source, target}");
    std::vector<Output> out;
    for (size_t i = 0; i < node.size(); ++i) {
      std::string sub = path + "[" + std::to_string(i) + "]";
      Output output;
      COHORT_TRY(forEachField(
          node[i], sub, {"source", "target", "when"},
          [&](const std::string& key, const YAML::Node& value) -> Result<void> {
            COHORT_ASSIGN(std::string text, scalar(value, sub + "." + key));
            if (key == "source") {
              if (!containedPath(text)) {
                return bad(value, sub + ".source",
                           "must be a path inside the job directory such as output/, got '" +
                               text + "'");
              }
              output.source = text;
            } else if (key == "target") {
              output.target = text;
            } else {
              if (text != "success" && text != "always") {
                return bad(value, sub + ".when", "unknown value '" + text + "' (success, always)");
              }
              output.always = text == "always";
            }
            return {};
          }));
      if (output.source.empty() || output.target.empty()) {
        return bad(node[i], sub, "needs both source and target");
      }
      out.push_back(output);
    }
    return out;
  }

  Result<Policy> policy(const YAML::Node& node, const std::string& path) const {
    Policy policy;
    COHORT_TRY(forEachField(
        node, path, {"success", "max_restarts", "grace_period", "max_runtime"},
        [&](const std::string& key, const YAML::Node& value) -> Result<void> {
          std::string sub = path + "." + key;
          if (key == "success") {
            COHORT_ASSIGN(policy.success, stringList(value, sub));
          } else if (key == "max_restarts") {
            COHORT_ASSIGN(policy.max_restarts, integer(value, sub, 0));
          } else if (key == "grace_period") {
            COHORT_ASSIGN(policy.grace_period, duration(value, sub));
          } else {
            COHORT_ASSIGN(policy.max_runtime, duration(value, sub));
          }
          return {};
        }));
    return policy;
  }

  Result<JobSpec> job(const YAML::Node& root) const {
    JobSpec spec = defaultSpec();
    bool launcher_given = false;
    COHORT_TRY(forEachField(
        root, "",
        {"name", "framework", "launcher", "mode", "rank_table_version", "compat", "workdir",
         "command", "hyperparameters", "env", "roles", "inputs", "outputs", "policy"},
        [&](const std::string& key, const YAML::Node& value) -> Result<void> {
          if (key == "name") {
            COHORT_ASSIGN(spec.name, scalar(value, key));
          } else if (key == "framework") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            auto f = parseFramework(text);
            if (!f) return bad(value, key, f.error().message);
            spec.framework = *f;
            if (!launcher_given && *f == Framework::kMpi) spec.launcher = Launcher::kMpirun;
          } else if (key == "launcher") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            auto l = parseLauncher(text);
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
              return bad(value, key, "unknown mode '" + text + "' (dynamic_cluster, rank_table)");
            }
          } else if (key == "rank_table_version") {
            COHORT_ASSIGN(spec.rank_table_version, scalar(value, key));
            if (spec.rank_table_version != "1.0" && spec.rank_table_version != "0.1") {
              return bad(value, key, "must be \"1.0\" or \"0.1\"");
            }
          } else if (key == "compat") {
            COHORT_ASSIGN(std::string text, scalar(value, key));
            if (text != "modelarts" && text != "none") {
              return bad(value, key, "unknown compat '" + text + "' (modelarts, none)");
            }
            spec.compat_modelarts = text == "modelarts";
          } else if (key == "workdir") {
            COHORT_ASSIGN(spec.workdir, scalar(value, key));
          } else if (key == "command") {
            COHORT_ASSIGN(spec.command, stringList(value, key));
          } else if (key == "hyperparameters") {
            COHORT_ASSIGN(spec.hyperparameters, keyValues(value, key));
          } else if (key == "env") {
            COHORT_ASSIGN(spec.env, keyValues(value, key));
          } else if (key == "roles") {
            if (!value.IsMap() || value.size() == 0) {
              return bad(value, key, "expected a mapping of role names, e.g. worker: {nodes: 2}");
            }
            spec.roles.clear();
            for (const auto& kv : value) {
              std::string name = kv.first.Scalar();
              COHORT_ASSIGN(Role r, role(name, kv.second, "roles." + name));
              spec.roles.push_back(r);
            }
          } else if (key == "inputs") {
            COHORT_ASSIGN(spec.inputs, inputs(value, key));
          } else if (key == "outputs") {
            COHORT_ASSIGN(spec.outputs, outputs(value, key));
          } else {
            COHORT_ASSIGN(spec.policy, policy(value, key));
          }
          return {};
        }));
    return spec;
  }

 private:
  std::string file_;
};

}  // namespace

Result<JobSpec> parseJobFile(const std::string& text, const std::string& file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return fail(Code::kInvalidArgument, file_name + ":" + std::to_string(e.mark.line + 1) +
                                            ": not valid YAML: " + e.msg);
  }
  if (!root || root.IsNull()) {
    return fail(Code::kInvalidArgument, file_name + ": the job file is empty");
  }
  try {
    return Parser(file_name).job(root);
  } catch (const YAML::Exception& e) {
    return fail(Code::kInvalidArgument, file_name + ": " + e.what());
  }
}

namespace {

Result<void> validateFramework(const JobSpec& spec) {
  auto bad = [](const std::string& msg) { return fail(Code::kInvalidArgument, msg); };
  const std::string launcher = launcherName(spec.launcher);
  const bool torch_launcher =
      spec.launcher == Launcher::kTorchrun || spec.launcher == Launcher::kSpawn;
  if (torch_launcher && spec.framework != Framework::kPyTorch) {
    return bad("launcher: '" + launcher + "' is for framework pytorch");
  }
  if (spec.launcher == Launcher::kMpirun && spec.framework != Framework::kMpi) {
    return bad("launcher: 'mpirun' is for framework mpi");
  }
  if (torch_launcher && spec.roles.size() != 1) {
    return bad("launcher: '" + launcher + "' runs one role; this job has " +
               std::to_string(spec.roles.size()));
  }
  if (spec.framework == Framework::kTensorFlow) {
    for (const Role& role : spec.roles) {
      if (role.name != "chief" && role.name != "worker" && role.name != "ps" &&
          role.name != "evaluator") {
        return bad("roles." + role.name +
                   ": TensorFlow roles are chief, worker, ps and evaluator");
      }
      if (role.name == "chief" || role.name == "evaluator") {
        if (role.nodes * role.procs_per_node != 1) {
          return bad("roles." + role.name + ": TensorFlow has exactly one " + role.name +
                     " (nodes: 1, procs_per_node: 1)");
        }
      }
    }
  }
  if (spec.framework == Framework::kMindSpore) {
    if (spec.roles.size() != 1 || spec.roles[0].name != "worker") {
      return bad("roles: a MindSpore job has one role, 'worker' (cohort adds the scheduler)");
    }
    const Role& worker = spec.roles[0];
    if (spec.mindspore_mode == MindSporeMode::kRankTable && worker.nodes > 1 &&
        worker.procs_per_node != 8) {
      return bad("roles.worker.procs_per_node: a rank-table (Ascend) job on several machines "
                 "needs 8 devices per machine, got " + std::to_string(worker.procs_per_node) +
                 " (use nodes: 1, or procs_per_node: 8)");
    }
  } else if (spec.mindspore_mode == MindSporeMode::kRankTable) {
    return bad("mode: 'rank_table' is for framework mindspore");
  }
  return {};
}

}  // namespace

Result<void> validate(const JobSpec& spec) {
  auto bad = [](const std::string& msg) { return fail(Code::kInvalidArgument, msg); };
  if (spec.command.empty()) {
    return bad("command: no command to run (give one after '--' or in the job file's 'command')");
  }
  if (spec.name.empty() || spec.name.size() > 63) {
    return bad("name: must have 1 to 63 characters, got '" + spec.name + "'");
  }
  for (char c : spec.name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) {
      return bad("name: '" + spec.name +
                 "' may use only letters, digits, '-', '_' and '.' (it names directories)");
    }
  }
  if (spec.roles.empty()) return bad("roles: at least one role is needed");
  std::set<std::string> names;
  for (const Role& role : spec.roles) {
    std::string path = "roles." + role.name;
    if (role.name.empty() || role.name.find_first_of("/ \t") != std::string::npos) {
      return bad("roles: role name '" + role.name + "' must be a word without '/' or spaces");
    }
    if (!names.insert(role.name).second) return bad(path + ": role given twice");
    if (role.nodes < 1) return bad(path + ".nodes: must be at least 1");
    if (role.procs_per_node < 1 && role.procs_per_node != kAutoProcs) {
      return bad(path + ".procs_per_node: must be at least 1");
    }
  }
  COHORT_TRY(validateFramework(spec));
  for (const auto& key : spec.policy.success) {
    if (!names.count(key)) {
      return bad("policy.success: no role named '" + key + "' (roles: " +
                 join(std::vector<std::string>(names.begin(), names.end()), ", ") + ")");
    }
  }
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return bad("env: '" + key + "' is not a valid variable name");
    }
    if (startsWith(key, "COHORT_")) {
      return bad("env." + key + ": names starting with COHORT_ are set by cohort itself");
    }
  }
  if (spec.policy.max_runtime && spec.policy.max_runtime->count() <= 0) {
    return bad("policy.max_runtime: must be longer than 0");
  }
  return {};
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
    role["resources"] = {{"gpus", r.resources.gpus},
                         {"cpus", std::to_string(r.resources.cpus)},
                         {"memory", std::to_string(r.resources.memory_bytes)}};
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
                 {"grace_period", std::to_string(spec.policy.grace_period.count()) + "ms"}};
  if (spec.policy.max_runtime) {
    policy["max_runtime"] = std::to_string(spec.policy.max_runtime->count()) + "ms";
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
  return job.dump();
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
