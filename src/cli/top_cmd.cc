#include "cli/top_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/client.h"
#include "job/jsonl.h"
#include "job/layout.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Ordered = nlohmann::ordered_json;  // metrics keep the order they were logged in

constexpr size_t kMetricColumns = 4;

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::string number(const Ordered& v) {
  if (v.is_null()) return "nan";
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
  return buf;
}

struct RankRow {
  std::string name;
  int node = 0;
  double cpu_percent = -1;  // -1: fewer than two samples
  int64_t rss = -1;
  double gpu_util = -1;  // -1: no GPU sample (no GPU, or the rank uses none)
  int64_t gpu_memory = -1;
  Ordered metric;  // its latest metrics.jsonl record
};

// What the table is made of, from the job directory or from the server.
struct Sources {
  std::map<int, RankRow> rows;  // by global rank: name and node
  std::vector<Ordered> resources;  // resources.jsonl records, oldest first
  std::vector<Ordered> metrics;    // metrics.jsonl records, oldest first
  std::string state;            // "running", or the final state
  bool ended = false;
};

Sources localSources(const job::Layout& layout) {
  Sources src;
  auto plan_text = readFile(layout.planFile());
  Ordered plan = plan_text ? Ordered::parse(*plan_text, nullptr, false) : Ordered();
  if (plan.is_object() && plan["nodes"].is_array()) {
    for (const Ordered& node : plan["nodes"]) {
      if (!node.is_object() || !node["ranks"].is_array()) continue;
      for (const Ordered& r : node["ranks"]) {
        if (!r.is_object() || !r["rank"].is_number_integer() || r["rank"].get<int>() < 0) continue;
        src.rows[r["rank"].get<int>()] = {r.value("name", "?"), r.value("node", 0)};
      }
    }
  }
  src.resources = job::tailJsonLines(layout.resourcesFile());
  src.metrics = job::tailJsonLines(layout.metricsFile());
  auto result_text = readFile(layout.resultFile());
  Ordered result = result_text ? Ordered::parse(*result_text, nullptr, false) : Ordered();
  src.ended = result.is_object();
  src.state = src.ended ? result.value("state", std::string("ended")) : "running";
  return src;
}

// A job of `cohort server`: its record, ranks and stored metrics (GET /v1/jobs/{id}/...).
Result<Sources> serverSources(ApiClient& api, const std::string& id) {
  Sources src;
  const std::string job = "/v1/jobs/" + urlEncode(id);
  COHORT_ASSIGN(nlohmann::json record, api.call("GET", job));
  src.state = record.value("state", std::string("?"));
  src.ended = src.state == "succeeded" || src.state == "failed" || src.state == "stopped";
  COHORT_ASSIGN(nlohmann::json ranks, api.call("GET", job + "/ranks"));
  for (const auto& r : ranks.value("ranks", nlohmann::json::array())) {
    if (r.is_object() && r["rank"].is_number_integer()) {
      src.rows[r["rank"].get<int>()] = {r.value("name", "?"), r.value("node", 0)};
    }
  }
  COHORT_ASSIGN(nlohmann::json stored, api.call("GET", job + "/metrics", nullptr,
                                               {{"limit", "10000"}}));
  for (const auto& m : stored.value("metrics", nlohmann::json::array())) {
    src.metrics.push_back(Ordered::parse(m.dump()));
  }
  for (const auto& r : stored.value("resources", nlohmann::json::array())) {
    src.resources.push_back(Ordered::parse(r.dump()));
  }
  return src;
}

// The table, as of now.
std::string render(Sources src, const std::string& id) {
  std::map<int, RankRow>& rows = src.rows;
  // CPU from each rank's last two samples.
  std::map<int, std::vector<std::pair<int64_t, double>>> cpu;
  for (const Ordered& line : src.resources) {
    const int64_t t = line.value("t", int64_t{0});
    if (!line.contains("ranks") || !line["ranks"].is_array()) continue;
    for (const Ordered& r : line["ranks"]) {
      if (!r.is_object()) continue;
      const int rank = r.value("rank", -1);
      if (!rows.count(rank)) continue;
      rows[rank].rss = r.value("rss_bytes", int64_t{0});
      const bool on_gpu = r.contains("gpu_memory_bytes");
      rows[rank].gpu_util = on_gpu ? r.value("gpu_util", 0.0) : -1;
      rows[rank].gpu_memory = on_gpu ? r.value("gpu_memory_bytes", int64_t{0}) : -1;
      auto& samples = cpu[rank];
      samples.emplace_back(t, r.value("cpu_seconds", 0.0));
      if (samples.size() > 2) samples.erase(samples.begin());
    }
  }
  for (auto& [rank, samples] : cpu) {
    if (samples.size() == 2 && samples[1].first > samples[0].first) {
      rows[rank].cpu_percent = 100.0 * (samples[1].second - samples[0].second) /
                               (static_cast<double>(samples[1].first - samples[0].first) / 1e9);
    }
  }
  std::vector<std::string> columns;  // metric names, by first appearance in the latest records
  for (const Ordered& line : src.metrics) {
    const int rank = line.value("rank", -1);
    if (rows.count(rank)) rows[rank].metric = line;
  }
  for (const auto& [rank, row] : rows) {
    if (!row.metric.is_object()) continue;
    for (const auto& [key, value] : row.metric.items()) {
      if (key == "t" || key == "rank" || key == "step") continue;
      bool seen = false;
      for (const std::string& c : columns) seen = seen || c == key;
      if (!seen && columns.size() < kMetricColumns) columns.push_back(key);
    }
  }
  std::string out =
      "job " + id + ": " + src.state + ", " + std::to_string(rows.size()) + " rank(s)\n";
  // GPU columns only for a job with GPU samples (agent/gpu.h): most jobs here have none.
  const bool gpus = std::any_of(rows.begin(), rows.end(),
                                [](const auto& row) { return row.second.gpu_memory >= 0; });
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-16s %4s %7s %9s", "RANK", "NAME", "NODE", "CPU%", "RSS");
  out += line;
  if (gpus) {
    std::snprintf(line, sizeof line, " %5s %9s", "GPU%", "GPU MEM");
    out += line;
  }
  std::snprintf(line, sizeof line, " %8s", "STEP");
  out += line;
  for (const std::string& c : columns) {
    std::snprintf(line, sizeof line, " %12.12s", c.c_str());
    out += line;
  }
  out += "\n";
  for (const auto& [rank, row] : rows) {
    char cpu_text[16] = "-";
    if (row.cpu_percent >= 0) std::snprintf(cpu_text, sizeof cpu_text, "%.1f", row.cpu_percent);
    const std::string step = row.metric.is_object() && row.metric.contains("step") &&
                                     row.metric["step"].is_number_integer()
                                 ? std::to_string(row.metric["step"].get<int64_t>())
                                 : "-";
    std::snprintf(line, sizeof line, "%-5d %-16.16s %4d %7s %9s", rank, row.name.c_str(), row.node,
                  cpu_text, row.rss >= 0 ? mib(row.rss).c_str() : "-");
    out += line;
    if (gpus) {
      char util[16] = "-";
      if (row.gpu_util >= 0) std::snprintf(util, sizeof util, "%.0f", row.gpu_util);
      std::snprintf(line, sizeof line, " %5s %9s", util,
                    row.gpu_memory >= 0 ? mib(row.gpu_memory).c_str() : "-");
      out += line;
    }
    std::snprintf(line, sizeof line, " %8s", step.c_str());
    out += line;
    for (const std::string& c : columns) {
      const std::string v =
          row.metric.is_object() && row.metric.contains(c) ? number(row.metric[c]) : "-";
      std::snprintf(line, sizeof line, " %12s", v.c_str());
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace

// The flags of cohort top, each once with its help.
const std::vector<FlagSpec>& topFlags() {
  static const std::vector<FlagSpec> kFlags = withServerFlags({
      {"--once", "", "",
       "print the table once and exit"},
      {"--data-root", "", "DIR",
       "where job directories are (default $COHORT_DATA_ROOT or ~/.cohort)"},
  });
  return kFlags;
}

std::string topHelp() {
  return R"(Usage: cohort top JOB [--once] [--data-root DIR] [--server URL] [--token T]

A live table of JOB's ranks, for a job that `cohort run` runs on this machine (or, when there is
no such job here, a job of the server you logged in to with cohort login): CPU use and
resident memory of each rank (its process group, sampled by its node's agent every 2 s), its
GPU utilisation and memory where nvidia-smi shows its processes (GPU columns only then), and
its latest training metrics (what it logged with cohort.log(step=..., loss=...), or printed as
`cohort.log step=N loss=X ...`). Redrawn every 2 s until the job ends; printed once when
stdout is not a terminal, or with --once. The samples are in the job's resources.jsonl and
metrics.jsonl.

)" + flagsHelp(topFlags());
}

int cmdTop(int argc, char** argv) {
  auto args =
      parseArgs("top", argc, argv, topFlags());
  if (!args) {
    std::fprintf(stderr, "cohort top: %s\n", args.error().message.c_str());
    return kExitUsage;
  }
  if (args->positional.size() != 1) {
    std::fprintf(stderr, "cohort top: give one job id (see cohort top --help)\n");
    return kExitUsage;
  }
  const std::string id = args->positional[0];
  const std::string root = dataRoot(args->get("--data-root"));
  const job::Layout layout = job::Layout::of(root, id);
  const bool local = !id.empty() && id.find('/') == std::string::npos && id[0] != '.' &&
                     ::access(layout.planFile().c_str(), F_OK) == 0;
  std::optional<ApiClient> api;
  if (!local) {
    // Not here: a job of the server this machine is logged in to (cohort login), if any.
    auto settings = resolveServerSettings(*args);
    if (!settings) {
      std::fprintf(stderr, "cohort top: no job '%s' in %s, and no server to ask (%s)\n",
                   id.c_str(), job::jobsDir(root).c_str(), settings.error().message.c_str());
      return kExitUsage;
    }
    api.emplace(*settings);
  }
  const bool live = !args->has("--once") && ::isatty(STDOUT_FILENO);
  for (;;) {
    Sources src;
    if (local) {
      src = localSources(layout);
    } else {
      auto got = serverSources(*api, id);
      if (!got) {
        std::fprintf(stderr, "cohort top: %s\n", got.error().message.c_str());
        return exitCodeFor(got.error());
      }
      src = std::move(*got);
    }
    const bool ended = src.ended;
    const std::string table = render(std::move(src), id);
    if (live) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
    std::fputs(table.c_str(), stdout);
    std::fflush(stdout);
    if (!live || ended) return 0;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

}  // namespace cohort::cli
