#include "backends/volcano.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

#include "storage/place.h"
#include "util/text.h"

namespace cohort::backends {

using Json = nlohmann::json;

namespace {

// Kubernetes quantities: "2" or "1500m" CPUs; memory in the largest binary unit that is exact.
std::string cpuQuantity(double cpus) {
  const long long millis = std::llround(cpus * 1000);
  return millis % 1000 == 0 ? std::to_string(millis / 1000) : std::to_string(millis) + "m";
}

std::string memoryQuantity(int64_t bytes) {
  for (const auto& [unit, shift] :
       {std::pair<const char*, int>{"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}}) {
    if (bytes % (int64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  }
  return std::to_string(bytes);
}

int digits(int n) { return n < 10 ? 1 : 1 + digits(n / 10); }

// Which extended resource resources.gpus counts: the job's choice, else Ascend NPUs for a
// MindSpore rank-table job (HCCL runs on Ascend only), else NVIDIA GPUs.
std::string deviceResource(const spec::JobSpec& spec) {
  if (!spec.volcano.device_resource.empty()) return spec.volcano.device_resource;
  if (spec.framework == spec::Framework::kMindSpore &&
      spec.mindspore_mode == spec::MindSporeMode::kRankTable) {
    return "huawei.com/Ascend910";
  }
  return "nvidia.com/gpu";
}

// A role's pods are sized for all of its ranks on one node: requests what the scheduler counts,
// limits what the job file bounds (cpus when given, memory, devices).
Json podResources(const spec::JobSpec& spec, const spec::Role& role) {
  const int procs = std::max(role.procs_per_node, 1);
  const spec::Resources& r = role.resources;
  Json requests = {{"cpu", cpuQuantity(procs * r.cpus)}};
  Json limits = Json::object();
  if (r.cpus_given) limits["cpu"] = cpuQuantity(procs * r.cpus);
  if (r.memory_bytes > 0) {
    requests["memory"] = limits["memory"] = memoryQuantity(procs * r.memory_bytes);
  }
  if (r.gpus > 0) limits[deviceResource(spec)] = std::to_string(procs * r.gpus);
  Json out = {{"requests", requests}};
  if (!limits.empty()) out["limits"] = limits;
  return out;
}

// A variable from a key of the job's Kubernetes Secret `secret`, which is created with the Job
// and never written into it. `optional`: the key need not be there.
Json secretVariable(const std::string& name, const std::string& secret, const std::string& key,
                    bool optional = false) {
  Json ref = {{"name", secret}, {"key", key}};
  if (optional) ref["optional"] = true;
  return {{"name", name}, {"valueFrom", {{"secretKeyRef", ref}}}};
}

// `grace_s`: how long the kubelet waits after SIGTERM before it kills the pod's processes.
Json task(const std::string& name, int replicas, const Json& container, int64_t grace_s) {
  return {{"name", name},
          {"replicas", replicas},
          {"template",
           {{"spec",
             {{"restartPolicy", "Never"},
              {"terminationGracePeriodSeconds", grace_s},
              {"containers", Json::array({container})}}}}}};
}

bool plainScalar(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  std::string lower;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string("_./-").find(c) == std::string::npos) {
      return false;
    }
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  // YAML 1.1 readers (many tools still are) take these for booleans or null.
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}) {
    if (lower == word) return false;
  }
  return true;
}

void emit(YAML::Emitter& out, const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key;
        emit(out, key);
        out << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const Json& item : value) emit(out, item);
      out << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const std::string& s = value.get_ref<const std::string&>();
      if (plainScalar(s)) {
        out << s;
      } else {
        out << YAML::DoubleQuoted << s;
      }
      return;
    }
    case Json::value_t::boolean:
      out << YAML::TrueFalseBool << value.get<bool>();
      return;
    case Json::value_t::number_integer:
      out << value.get<int64_t>();
      return;
    case Json::value_t::number_unsigned:
      out << value.get<uint64_t>();
      return;
    case Json::value_t::number_float:
      out << value.get<double>();
      return;
    default:
      out << YAML::Null;
  }
}

bool matchesWhole(const std::string& s, bool integer) {
  if (s.empty()) return false;
  char* end = nullptr;
  if (integer) {
    errno = 0;
    std::strtoll(s.c_str(), &end, 10);
    return errno == 0 && *end == '\0' && s.find_first_of(".eE") == std::string::npos;
  }
  std::strtod(s.c_str(), &end);
  return *end == '\0' && s.find_first_not_of("0123456789+-.eE") == std::string::npos;
}

Json fromYaml(const YAML::Node& node, int depth) {
  if (depth > 256) throw YAML::Exception(node.Mark(), "nested too deep");
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& entry : node)
        out[entry.first.as<std::string>()] = fromYaml(entry.second, depth + 1);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(fromYaml(item, depth + 1));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
      if (matchesWhole(s, true)) return std::strtoll(s.c_str(), nullptr, 10);
      if (matchesWhole(s, false)) return std::strtod(s.c_str(), nullptr);
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace

std::string dnsLabel(const std::string& text, size_t max, const std::string& fallback) {
  std::string out;
  for (char c : text) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool keep = (lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9');
    if (keep) {
      out += lower;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  if (out.size() > max) out.resize(max);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? fallback.substr(0, max) : out;
}

Result<Json> volcanoJob(const spec::JobSpec& spec, const plan::Plan& plan) {
  if (spec.image.empty()) {
    const std::string what =
        spec.environment.empty()
            ? "the job names none"
            : "'" + spec.environment +
                  "' is an environment of this machine (a virtual environment), "
                  "not an image";
    return fail(Code::kInvalidArgument,
                spec::fieldLabel(spec, "environment") +
                    "the volcano backend runs every pod in a container image, and " + what +
                    ": give environment: {image: REF} (or --image REF), an image with cohort on "
                    "PATH and what the command needs");
  }
  // Task names: the roles' as DNS labels, unique, and never the coordinator's.
  std::vector<std::string> tasks;
  std::map<std::string, std::string> owner = {{kVolcanoCoordinatorTask, "cohort's coordinator"}};
  size_t longest_suffix = 0;  // "-<task>-<last index>" of the longest pod name
  for (const spec::Role& role : spec.roles) {
    if (role.procs_per_node == spec::kAutoProcs) {
      return fail(Code::kInvalidArgument,
                  spec::fieldLabel(spec, "roles." + role.name + ".procs_per_node") +
                      "auto counts this machine's GPUs, not the pods': give a number for the "
                      "volcano backend");
    }
    const std::string name = dnsLabel(role.name, kMaxVolcanoTaskName, "role");
    if (auto [at, added] = owner.emplace(name, "role '" + role.name + "'"); !added) {
      return fail(Code::kInvalidArgument, spec::fieldLabel(spec, "roles." + role.name) +
                                              "its Volcano task would be '" + name + "', as " +
                                              at->second + "'s is: rename the role");
    }
    tasks.push_back(name);
    longest_suffix =
        std::max(longest_suffix, 2 + name.size() + digits(std::max(role.nodes - 1, 0)));
  }
  longest_suffix = std::max(longest_suffix, 2 + std::string(kVolcanoCoordinatorTask).size() + 1);
  // The svc plugin's Service is named after the Job: a DNS-1035 label, which starts with a letter.
  std::string job = dnsLabel(spec.name, 63 - longest_suffix, "job");
  if (job[0] >= '0' && job[0] <= '9') job = dnsLabel("job-" + job, 63 - longest_suffix, "job");

  const std::string job_file = spec::toJobFile(spec);
  if (job_file.size() > spec::kMaxValueBytes) {
    return fail(Code::kInvalidArgument,
                "the job file is " + std::to_string(job_file.size() >> 10) +
                    " KiB as JSON, over the 128 KiB one variable of a pod's environment carries: " +
                    "put large values in a file the job reads");
  }
  const std::string secret = volcanoSecretName(job);
  const std::string image = spec.image;

  // A job of `cohort server` reports to it: where, and with which credential, is in the Secret
  // (keys the Secret of `cohort run` does not have).
  Json coordinator = {
      {"name", "coordinator"},
      {"image", image},
      {"command",
       {"cohort", "coordinate", "--listen", "0.0.0.0:" + std::to_string(kVolcanoCoordinatorPort)}},
      {"env",
       {{{"name", "COHORT_JOB_ID"}, {"value", plan.job_id}},
        {{"name", "COHORT_JOB"}, {"value", job_file}},
        secretVariable("COHORT_JOB_SECRET", secret, kVolcanoSecretKey),
        secretVariable("COHORT_REPORT_URL", secret, kVolcanoReportUrlKey, true),
        secretVariable("COHORT_REPORT_TOKEN", secret, kVolcanoReportTokenKey, true),
        secretVariable("COHORT_REPORT_PIN", secret, kVolcanoReportPinKey, true)}},
      {"ports", {{{"name", "coordinator"}, {"containerPort", kVolcanoCoordinatorPort}}}},
      {"resources", {{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}}}}};
  // A server's store in S3, for both the coordinator and the agents: from the Secret, when the
  // server put it there.
  for (const std::string& variable : storage::siteVariableNames()) {
    coordinator["env"].push_back(secretVariable(variable, secret, variable, true));
  }
  // A stop (the Job deleted, aborted or completed) gives the agents their ranks' grace period,
  // and the coordinator time after that to copy outputs, write the record and report it.
  const int64_t grace_s = (spec.policy.grace_period.count() + 999) / 1000;
  Json all_tasks =
      Json::array({task(kVolcanoCoordinatorTask, 1, coordinator, grace_s + kCoordinatorGraceS)});

  // Agents dial the coordinator by the name the svc plugin gives its pod; each takes its node
  // index from its task's first node and the index the env plugin sets (VC_TASK_INDEX).
  const std::string dial = job + "-" + kVolcanoCoordinatorTask + "-0." + job + ":" +
                           std::to_string(kVolcanoCoordinatorPort);
  std::string network;
  if (!spec.network.interface.empty())
    network += " --interface " + shellQuote(spec.network.interface);
  if (!spec.network.cidr.empty()) network += " --cidr " + shellQuote(spec.network.cidr);
  const std::vector<std::string> key_roles = spec::keyRoles(spec);
  const bool one_key_task = key_roles.size() == 1;
  int first_node = 0, pods = 1;
  for (size_t i = 0; i < spec.roles.size(); ++i) {
    const spec::Role& role = spec.roles[i];
    const std::string node = first_node == 0
                                 ? "\"$VC_TASK_INDEX\""
                                 : "$((" + std::to_string(first_node) + " + VC_TASK_INDEX))";
    Json agent = {
        {"name", "agent"},
        {"image", image},
        {"command",
         {"/bin/sh", "-c",
          "exec cohort exec --coordinator \"$COHORT_COORDINATOR\" --node " + node + network}},
        {"env",
         {{{"name", "COHORT_COORDINATOR"}, {"value", dial}},
          secretVariable("COHORT_JOB_SECRET", secret, kVolcanoSecretKey)}},
        {"resources", podResources(spec, role)}};
    for (const std::string& variable : storage::siteVariableNames()) {
      agent["env"].push_back(secretVariable(variable, secret, variable, true));
    }
    Json t = task(tasks[i], role.nodes, agent, grace_s + kAgentGraceS);
    const bool key = std::find(key_roles.begin(), key_roles.end(), role.name) != key_roles.end();
    if (key && one_key_task) {
      t["policies"] = {{{"event", "TaskCompleted"}, {"action", "CompleteJob"}}};
    }
    all_tasks.push_back(t);
    first_node += role.nodes;
    pods += role.nodes;
  }
  if (!one_key_task) {
    // Several key roles: Volcano cannot wait for all of them, the coordinator does (it ends
    // once every key rank exited 0).
    all_tasks[0]["policies"] = {{{"event", "TaskCompleted"}, {"action", "CompleteJob"}}};
  }

  // cohort restarts the gang's ranks itself, in the same pods, within max_restarts (as on every
  // backend): a pod fails only once cohort has decided the job failed, and a pod evicted or lost
  // is a node lost, which ends the job (a gang cannot go on without one of its nodes). Either
  // way Volcano aborts the Job, which ends every other pod; it never restarts it (maxRetry 0), so
  // that the job has one coordinator and one record.
  Json job_spec = {{"schedulerName", "volcano"},
                   {"minAvailable", pods},
                   {"maxRetry", 0},
                   {"plugins", {{"svc", Json::array()}, {"env", Json::array()}}},
                   {"policies",
                    {{{"event", "PodFailed"}, {"action", "AbortJob"}},
                     {{"event", "PodEvicted"}, {"action", "AbortJob"}}}},
                   {"tasks", all_tasks}};
  if (!spec.volcano.queue.empty()) job_spec["queue"] = spec.volcano.queue;
  if (!spec.volcano.priority_class.empty()) {
    job_spec["priorityClassName"] = spec.volcano.priority_class;
  }
  return Json{
      {"apiVersion", "batch.volcano.sh/v1alpha1"},
      {"kind", "Job"},
      {"metadata",
       {{"name", job},
        {"labels", {{"app.kubernetes.io/managed-by", "cohort"}, {"cohort/job-name", job}}},
        {"annotations", {{"cohort/job-id", plan.job_id}, {"cohort/framework", plan.framework}}}}},
      {"spec", job_spec}};
}

Json volcanoSecret(const Json& job, const std::string& secret,
                   const std::optional<VolcanoReport>& report,
                   const std::vector<std::pair<std::string, std::string>>& store) {
  const std::string name = job["metadata"]["name"].get<std::string>();
  Json data = {{kVolcanoSecretKey, secret}};
  if (report) {
    data[kVolcanoReportUrlKey] = report->url;
    data[kVolcanoReportTokenKey] = report->token;
    if (!report->pin.empty()) data[kVolcanoReportPinKey] = report->pin;
  }
  for (const auto& [variable, value] : store) {
    if (storage::isSiteVariable(variable)) data[variable] = value;
  }
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", volcanoSecretName(name)},
            {"labels", job["metadata"]["labels"]},
            {"annotations", {{"cohort/job-id", job["metadata"]["annotations"]["cohort/job-id"]}}}}},
          {"type", "Opaque"},
          {"stringData", data}};
}

std::string manifestYaml(const Json& manifest) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  out.SetMapFormat(YAML::Block);
  emit(out, manifest);
  return std::string(out.c_str()) + "\n";
}

Result<Json> parseYamlDocument(const std::string& text) {
  try {
    return fromYaml(YAML::Load(text), 0);
  } catch (const YAML::Exception& e) {
    return fail(Code::kInvalidArgument, "line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

}  // namespace cohort::backends
