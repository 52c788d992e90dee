#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "plan/plan.h"
#include "util/text.h"

namespace cohort::plan {

namespace {

using Json = nlohmann::ordered_json;

// The variables, but for those named in `skip`. A plan's variables have unique names (setEnv):
// each is appended, without the ordered object's search for its name (64 ranks' worth of that
// was most of a millisecond).
Json envJson(const KeyValues& env, const std::unordered_set<std::string>* skip = nullptr) {
  Json out = Json::object();
  auto& object = out.get_ref<Json::object_t&>();
  object.reserve(env.size());
  for (const auto& [k, v] : env) {
    if (!skip || !skip->count(k)) object.Json::object_t::Container::emplace_back(k, v);
  }
  return out;
}

// The variables every rank of `node` has, with the same value, in the first rank's order.
KeyValues commonEnv(const NodePlan& node) {
  if (node.ranks.empty()) return {};
  KeyValues common = node.ranks[0].env;
  for (size_t i = 1; i < node.ranks.size() && !common.empty(); ++i) {
    std::unordered_map<std::string_view, std::string_view> env;
    for (const auto& [k, v] : node.ranks[i].env) env.emplace(k, v);
    std::erase_if(common, [&](const auto& kv) {
      auto it = env.find(kv.first);
      return it == env.end() || it->second != kv.second;
    });
  }
  return common;
}

// `skip`: the variables left out of every rank's "env" (nodeToJson sends them once).
Json nodeJson(const NodePlan& node, const std::unordered_set<std::string>* skip = nullptr) {
  Json ranks = Json::array();
  for (const RankPlan& r : node.ranks) {
    // Members are set one by one: a braced list would copy each value (the env) once more.
    Json& rank = ranks.emplace_back(Json::object());
    rank["name"] = r.name;
    rank["role"] = r.role;
    rank["role_rank"] = r.role_rank;
    rank["role_world_size"] = r.role_world_size;
    rank["rank"] = r.rank;
    rank["local_rank"] = r.local_rank;
    rank["node"] = r.node;
    rank["key"] = r.key;
    rank["console"] = r.console;
    rank["argv"] = r.argv;
    rank["env"] = envJson(r.env, skip);
    rank["log_file"] = r.log_file;
    if (r.uid >= 0) {
      rank["uid"] = r.uid;
      rank["gid"] = r.gid;
    }
    if (r.preload) rank["preload"] = true;
    if (r.terminal) rank["terminal"] = true;
    if (r.stdin_forwarded) rank["stdin"] = true;
    if (r.sandboxed) rank["sandboxed"] = true;
    if (!r.teed.empty()) {
      rank["tee_prefix"] = r.tee_prefix;
      Json& teed = rank["teed"] = Json::array();
      for (const TeedRank& t : r.teed) {
        teed.push_back(Json{{"name", t.name}, {"rank", t.rank}, {"log_file", t.log_file},
                            {"console", t.console}});
      }
    }
    if (r.cpus > 0 || r.memory_bytes > 0 || r.pids > 0) {
      rank["limits"] = Json{{"cpus", r.cpus}, {"memory_bytes", r.memory_bytes}};
      if (r.pids > 0) rank["limits"]["pids"] = r.pids;
    }
  }
  Json inputs = Json::array();
  for (const StagedInput& in : node.inputs) {
    Json j{{"source", in.source}, {"target", in.target}, {"link", in.link}};
    if (!in.beneath.empty()) j["beneath"] = in.beneath;
    if (!in.store.empty()) j["store"] = Json{{"bucket_dir", in.store.bucket_dir}, {"key", in.store.key}};
    inputs.push_back(std::move(j));
  }
  Json out = {{"node", node.node}, {"host", node.host}, {"work_dir", node.work_dir}};
  out["inputs"] = std::move(inputs);
  out["ranks"] = std::move(ranks);
  if (node.preload) {
    out["preload"] = Json{{"python", node.preload->python}, {"modules", node.preload->modules}};
    if (!node.preload->options.empty()) out["preload"]["options"] = node.preload->options;
  }
  if (node.image) {
    out["image"] =
        Json{{"ref", node.image->ref}, {"id", node.image->id}, {"layers", node.image->layers}};
  }
  if (!node.scratch_dirs.empty()) out["scratch_dirs"] = node.scratch_dirs;
  if (!node.tmpfs_dirs.empty()) {
    out["tmpfs"] = Json{{"dirs", node.tmpfs_dirs}, {"bytes", node.tmpfs_bytes}};
  }
  if (!node.environment.empty()) {
    Json layers = Json::array();
    for (const EnvironmentLayer& l : node.environment) {
      layers.push_back(Json{{"name", l.name},
                            {"store", l.store},
                            {"hash", l.hash},
                            {"preset", l.preset},
                            {"from", l.from},
                            {"requirements", l.requirements},
                            {"lock", l.lock}});
    }
    out["environment"] = layers;
  }
  return out;
}

}  // namespace

std::string toJson(const Plan& plan, int indent) {
  Json nodes = Json::array();
  for (const NodePlan& node : plan.nodes) nodes.push_back(nodeJson(node));
  Json files = Json::array();
  for (const GeneratedFile& f : plan.files) {
    files.push_back(Json{{"path", f.path}, {"content", f.content}});
  }
  Json outputs = Json::array();
  for (const OutputPlan& o : plan.outputs) {
    Json j{{"source", o.source}, {"target", o.target}, {"always", o.always}};
    if (!o.store.empty()) j["store"] = Json{{"bucket_dir", o.store.bucket_dir}, {"key", o.store.key}};
    outputs.push_back(std::move(j));
  }
  Json out = {{"job_id", plan.job_id},
              {"job_name", plan.job_name},
              {"job_dir", plan.job_dir},
              {"workdir", plan.workdir},
              {"framework", plan.framework},
              {"world_size", plan.world_size},
              {"max_restarts", plan.max_restarts},
              {"grace_period_ms", plan.grace_period_ms},
              {"heartbeat_timeout_ms", plan.heartbeat_timeout_ms},
              {"max_runtime_ms", plan.max_runtime_ms},
              {"hang_timeout_ms", plan.hang_timeout_ms},
              {"startup_timeout_ms", plan.startup_timeout_ms},
              {"stop_signal", spec::stopSignalName(plan.stop_signal)}};
  out["nodes"] = std::move(nodes);
  out["outputs"] = std::move(outputs);
  out["files"] = std::move(files);
  return out.dump(indent) + "\n";
}

std::string nodeToJson(const NodePlan& node) {
  // What every rank of the node shares (the job's variables, most of them) goes once, as the
  // node's "env", not once per rank: 64 ranks would otherwise be 120 KB for the agent to parse
  // before its first rank starts.
  const KeyValues common = commonEnv(node);
  std::unordered_set<std::string> shared;
  for (const auto& kv : common) shared.insert(kv.first);
  Json out = nodeJson(node, &shared);
  out["env"] = envJson(common);
  return out.dump();
}

namespace {

Result<NodePlan> nodeFrom(const Json& j) {
  try {
    NodePlan node;
    node.node = j.at("node").get<int>();
    node.host = j.at("host").get<std::string>();
    node.work_dir = j.at("work_dir").get<std::string>();
    if (j.contains("scratch_dirs")) {
      node.scratch_dirs = j.at("scratch_dirs").get<std::vector<std::string>>();
    }
    if (j.contains("tmpfs")) {
      node.tmpfs_dirs = j.at("tmpfs").at("dirs").get<std::vector<std::string>>();
      node.tmpfs_bytes = j.at("tmpfs").at("bytes").get<int64_t>();
    }
    for (const auto& in : j.at("inputs")) {
      StagedInput staged{in.at("source").get<std::string>(), in.at("target").get<std::string>(),
                         in.at("link").get<bool>()};
      if (in.contains("beneath")) staged.beneath = in.at("beneath").get<std::string>();
      if (in.contains("store")) {
        staged.store.bucket_dir = in.at("store").at("bucket_dir").get<std::string>();
        staged.store.key = in.at("store").at("key").get<std::string>();
      }
      node.inputs.push_back(std::move(staged));
    }
    // The variables every rank has (nodeToJson), then each rank's own.
    const Json common = j.contains("env") ? j.at("env") : Json::object();
    for (const auto& jr : j.at("ranks")) {
      RankPlan r;
      r.name = jr.at("name").get<std::string>();
      r.role = jr.at("role").get<std::string>();
      r.role_rank = jr.at("role_rank").get<int>();
      r.role_world_size = jr.at("role_world_size").get<int>();
      r.rank = jr.at("rank").get<int>();
      r.local_rank = jr.at("local_rank").get<int>();
      r.node = jr.at("node").get<int>();
      r.key = jr.at("key").get<bool>();
      r.console = jr.at("console").get<bool>();
      r.argv = jr.at("argv").get<std::vector<std::string>>();
      for (const auto& [key, value] : common.items()) {
        r.env.emplace_back(key, value.get<std::string>());
      }
      for (const auto& [key, value] : jr.at("env").items()) {
        r.env.emplace_back(key, value.get<std::string>());
      }
      r.log_file = jr.at("log_file").get<std::string>();
      r.uid = jr.value("uid", -1);
      r.gid = jr.value("gid", -1);
      r.preload = jr.value("preload", false);
      r.terminal = jr.value("terminal", false);
      r.stdin_forwarded = jr.value("stdin", false);
      r.sandboxed = jr.value("sandboxed", false);
      if (jr.contains("teed")) {
        r.tee_prefix = jr.at("tee_prefix").get<std::string>();
        for (const auto& jt : jr.at("teed")) {
          r.teed.push_back({jt.at("name").get<std::string>(), jt.at("rank").get<int>(),
                            jt.at("log_file").get<std::string>(), jt.at("console").get<bool>()});
        }
      }
      if (jr.contains("limits")) {
        r.cpus = jr.at("limits").value("cpus", 0.0);
        r.memory_bytes = jr.at("limits").value("memory_bytes", int64_t{0});
        r.pids = jr.at("limits").value("pids", int64_t{0});
      }
      node.ranks.push_back(std::move(r));
    }
    if (j.contains("preload")) {
      const auto& p = j.at("preload");
      node.preload = Preload{p.at("python").get<std::string>(),
                             p.at("modules").get<std::vector<std::string>>(),
                             p.value("options", std::vector<std::string>{})};
    }
    if (j.contains("image")) {
      const auto& i = j.at("image");
      node.image = Image{i.at("ref").get<std::string>(), i.at("id").get<std::string>(),
                         i.at("layers").get<std::vector<std::string>>()};
    }
    if (j.contains("environment")) {
      for (const Json& l : j.at("environment")) {
        node.environment.push_back(EnvironmentLayer{
            l.at("name").get<std::string>(), l.at("store").get<std::string>(),
            l.at("hash").get<std::string>(), l.at("preset").get<bool>(),
            l.at("from").get<std::string>(), l.at("requirements").get<std::vector<std::string>>(),
            l.at("lock").get<std::string>()});
      }
    }
    return node;
  } catch (const nlohmann::json::exception& e) {
    return fail(Code::kInvalidArgument, std::string("node plan: ") + e.what());
  }
}

}  // namespace

Result<NodePlan> nodeFromJson(const std::string& text) {
  try {
    return nodeFrom(Json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    return fail(Code::kInvalidArgument, std::string("node plan: ") + e.what());
  }
}

Result<NodePlan> nodeFromJsonValue(const nlohmann::json& json) {
  return nodeFrom(Json(json));  // a copy of the tree: a fraction of parsing its text again
}

std::string toText(const Plan& plan) {
  std::string out;
  out += "job " + plan.job_name + " (" + plan.job_id + "), framework " + plan.framework + ", " +
         std::to_string(plan.nodes.size()) + " node(s), " + std::to_string(plan.world_size) +
         " rank(s)\n";
  out += "job dir " + plan.job_dir + "\nworkdir " + plan.workdir + "\n";
  for (const NodePlan& node : plan.nodes) {
    out += "\nnode " + std::to_string(node.node) + " (" + node.host + "), work dir " +
           node.work_dir + "\n";
    for (const StagedInput& in : node.inputs) {
      out += "  stage " + in.source + (in.link ? " -> (link) " : " -> ") + in.target + "\n";
    }
    if (node.preload) {
      std::string python = node.preload->python;
      for (const std::string& o : node.preload->options) python += " " + shellQuote(o);
      out += "  preload: " + python + " imports " +
             (node.preload->modules.empty() ? std::string("nothing")
                                            : join(node.preload->modules, ", ")) +
             " once, then forks the ranks marked (preloaded)\n";
    }
    if (node.image) {
      out +=
          "  image: " + node.image->ref +
          (node.image->id.empty() ? std::string(" (not here yet: pulled when the job starts)")
                                  : " (" + node.image->id.substr(0, 12) + ", " +
                                        std::to_string(node.image->layers.size()) + " layer(s))") +
          "\n";
    }
    if (!node.environment.empty()) {
      const EnvironmentLayer& top = node.environment.back();
      out += "  environment: " + top.name + " (" + top.store + "/" + top.name + ", content " +
             top.hash.substr(0, 12) + (top.from.empty() ? "" : ", on " + top.from) +
             "): staged on the node when it is not there\n";
    }
    for (const RankPlan& r : node.ranks) {
      std::vector<std::string> words;
      for (const auto& a : r.argv) words.push_back(shellQuote(a));
      out += "  " + r.name + "  (process " + std::to_string(r.rank) + ", local " +
             std::to_string(r.local_rank) + (r.key ? "" : ", not a key role") +
             (r.preload ? ", preloaded" : "") + ")\n";
      out += "    argv: " + join(words, " ") + "\n";
      out += "    log:  " + r.log_file + "\n";
      for (const auto& [k, v] : r.env) out += "    " + k + "=" + v + "\n";
    }
  }
  for (const OutputPlan& o : plan.outputs) {
    out += "\noutput " + o.source + " -> " + o.target + (o.always ? " (always)" : "") + "\n";
  }
  for (const GeneratedFile& f : plan.files) {
    out += "\nfile " + f.path + ":\n" + f.content;
  }
  return out;
}

}  // namespace cohort::plan
