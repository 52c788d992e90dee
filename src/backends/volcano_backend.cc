#include "backends/volcano_backend.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "agent/reporter.h"
#include "backends/volcano.h"
#include "job/layout.h"
#include "plan/plan.h"
#include "spec/job_spec.h"
#include "storage/place.h"
#include "util/fd.h"
#include "util/net.h"
#include "util/text.h"

extern char** environ;

namespace cohort::backends {

namespace {

using Clock = std::chrono::steady_clock;

// How often running() asks the API server for a Job's phase; the job service asks more often.
constexpr auto kPhaseEvery = std::chrono::seconds(2);

// "http://127.0.0.1:8600" with `host` for its host.
std::string withHost(const std::string& url, const std::string& host) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || host.empty()) return url;
  const size_t start = scheme + 3;
  size_t end = url.find_first_of("/", start);
  const std::string authority = url.substr(start, end == std::string::npos ? end : end - start);
  const size_t colon = authority.rfind(':');
  const std::string port = colon == std::string::npos ? "" : authority.substr(colon);
  return url.substr(0, start) + host + port + (end == std::string::npos ? "" : url.substr(end));
}

// The Volcano Job of the server's job `spec`.
Result<nlohmann::json> render(spec::JobSpec spec, const std::string& job_id,
                              const std::string& job_dir) {
  spec.backend = spec::Backend::kVolcano;
  plan::PlanContext ctx;
  ctx.job_id = job_id;
  ctx.job_dir = job_dir;
  ctx.workdir = spec.workdir.empty() ? "." : spec.workdir;
  ctx.nodes_share_machine = false;
  COHORT_ASSIGN(plan::Plan plan, plan::makePlan(spec, ctx));
  return volcanoJob(spec, plan);
}

size_t linesIn(const std::string& path) {
  auto text = readFile(path);
  if (!text) return 0;
  size_t n = 0;
  for (char c : *text) n += c == '\n';
  return n;
}

// Copies the coordinator pod's log of one job into its console.log until the log ends.
struct LogCopy {
  std::atomic<bool> stop{false};
  std::thread thread;
};

class VolcanoBackend : public Backend {
 public:
  explicit VolcanoBackend(VolcanoSettings settings) : settings_(std::move(settings)) {}

  ~VolcanoBackend() override {
    for (auto& [handle, copy] : copies_) copy->stop = true;
    for (auto& [handle, copy] : copies_) {
      if (copy->thread.joinable()) copy->thread.join();
    }
  }

  const char* name() const override { return "volcano"; }

  Result<std::string> submit(const JobLaunch& l) override {
    COHORT_ASSIGN(VolcanoCluster * cluster, connect());
    const job::Layout layout(l.job_dir);
    COHORT_ASSIGN(std::string text, readFile(layout.specFile()));
    COHORT_ASSIGN(spec::JobSpec spec, spec::parseJobFile(text, layout.specFile()));
    COHORT_ASSIGN(nlohmann::json manifest, render(spec, l.job_id, l.job_dir));
    std::optional<VolcanoReport> report;
    if (l.report) {
      // The credential leaves the job directory for the Secret, which only the pods read.
      COHORT_ASSIGN(agent::ReportTarget target, agent::reportTarget(layout, l.job_id));
      report = VolcanoReport{withHost(target.server, settings_.advertise), target.token, target.pin};
    }
    COHORT_ASSIGN(std::string secret, randomHex(32));
    // console.log is the coordinator pod's log, line for line (a restarted server copies on
    // from the line it has): what this server says goes to its own stderr.
    auto say = [&](const std::string& line) {
      std::fprintf(stderr, "cohort server: job %s: %s\n", l.job_id.c_str(), line.c_str());
    };
    // A store in S3 reaches the pods through the Secret: its nodes stage store:// inputs from it
    // and copy outputs to it themselves, having no file system of the server's.
    std::vector<std::pair<std::string, std::string>> store;
    for (char** e = environ; *e; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (storage::isSiteVariable(name)) store.emplace_back(name, entry.substr(name.size() + 1));
    }
    COHORT_ASSIGN(VolcanoJobRef ref, cluster->submit(manifest, secret, report, store, say));
    ref.job_dir = l.job_dir;
    const std::string handle = ref.encode();
    copyLog(handle, ref, layout.consoleLog());
    phases_[handle] = {Clock::now(), ""};
    return handle;
  }

  Found recover(const std::string& handle) override {
    auto ref = VolcanoJobRef::decode(handle);
    if (!ref) return {};
    auto cluster = connect();
    if (!cluster) return {};
    auto phase = (*cluster)->phase(*ref);
    if (!phase || volcanoPhaseFinal(*phase)) return {};
    phases_[handle] = {Clock::now(), *phase};
    // console.log of the job directory, which the server made, goes on where it stopped.
    if (!ref->job_dir.empty()) copyLog(handle, *ref, job::Layout(ref->job_dir).consoleLog());
    return {true, {}};
  }

  bool running(const std::string& handle) override {
    auto ref = VolcanoJobRef::decode(handle);
    if (!ref) return false;
    auto cached = phases_.find(handle);
    if (cached != phases_.end() && Clock::now() - cached->second.first < kPhaseEvery) return true;
    auto cluster = connect();
    if (!cluster) return true;  // cannot tell: it runs until the API server says otherwise
    auto phase = (*cluster)->phase(*ref);
    if (!phase && phase.error().code != Code::kNotFound) {
      phases_[handle] = {Clock::now(), ""};
      return true;  // the API server is away: ask again later
    }
    if (phase && !volcanoPhaseFinal(*phase)) {
      phases_[handle] = {Clock::now(), *phase};
      return true;
    }
    // Ended (or deleted): released. The log copy ends with the log; the Secret is not needed.
    phases_.erase(handle);
    if (auto end = (*cluster)->coordinatorEnd(*ref); end && !end->empty()) ended_[handle] = *end;
    (void)(*cluster)->removeSecret(*ref);
    if (auto it = copies_.find(handle); it != copies_.end()) {
      LogCopy& copy = *it->second;
      if (copy.thread.joinable()) copy.thread.join();
      copies_.erase(it);
    }
    return false;
  }

  void cancel(const std::string& handle) override {
    auto ref = VolcanoJobRef::decode(handle);
    auto cluster = connect();
    if (!ref || !cluster) return;
    if (auto removed = (*cluster)->remove(*ref, false); !removed) {
      std::fprintf(stderr, "cohort server: %s\n", removed.error().message.c_str());
    }
  }

  // No signal reaches into the coordinator's pod from here.
  bool requestStacks(const std::string&) override { return false; }

  std::string describe(const std::string& handle) const override {
    auto ref = VolcanoJobRef::decode(handle);
    return ref ? "Volcano Job " + ref->namespace_name + "/" + ref->name : "no Volcano Job";
  }

  std::string endWords(const std::string& handle) const override {
    auto it = ended_.find(handle);
    return it == ended_.end() ? "" : "its coordinator pod: " + it->second;
  }

 private:
  Result<VolcanoCluster*> connect() {
    if (!cluster_) {
      COHORT_ASSIGN(cluster_, VolcanoCluster::connect(settings_.namespace_name));
    }
    return cluster_.get();
  }

  void copyLog(const std::string& handle, const VolcanoJobRef& ref, const std::string& console) {
    if (console.empty() || copies_.count(handle)) return;
    auto copy = std::make_unique<LogCopy>();
    LogCopy* c = copy.get();
    VolcanoCluster* cluster = cluster_.get();
    c->thread = std::thread([c, cluster, ref, console] {
      const int64_t skip = static_cast<int64_t>(linesIn(console));
      UniqueFd fd(::open(console.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
      if (!fd.valid()) return;
      // Until the coordinator's container runs, there is no log to read.
      while (!c->stop) {
        auto phase = cluster->phase(ref);
        if (phase && volcanoPhaseFinal(*phase)) break;
        if (!phase && phase.error().code == Code::kNotFound) return;
        auto started = cluster->coordinatorStarted(ref);
        if (started && *started) break;
        for (int i = 0; i < 20 && !c->stop; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
      auto followed = cluster->followCoordinatorLog(
          ref, skip,
          [&](std::string_view line) { (void)writeAll(fd.get(), std::string(line) + "\n"); },
          &c->stop);
      if (!followed) {
        (void)writeAll(fd.get(),
                       "cohort: the coordinator's log: " + followed.error().message + "\n");
      }
    });
    copies_[handle] = std::move(copy);
  }

  VolcanoSettings settings_;
  std::unique_ptr<VolcanoCluster> cluster_;
  std::map<std::string, std::pair<Clock::time_point, std::string>> phases_;  // by handle
  std::map<std::string, std::string> ended_;  // by handle: how its coordinator pod ended
  std::map<std::string, std::unique_ptr<LogCopy>> copies_;                   // by handle
};

}  // namespace

Result<void> checkVolcanoJob(const spec::JobSpec& spec, bool uploaded) {
  if (uploaded) {
    return fail(Code::kInvalidArgument,
                "workdir: this server runs its jobs as Volcano Jobs, whose pods cannot read code "
                "uploaded to it: put the code in the job's image and submit with --no-upload "
                "(workdir: the directory in the image)");
  }
  if (spec.backend == spec::Backend::kSlurm) {
    return fail(Code::kInvalidArgument,
                "backend: this server runs its jobs as Volcano Jobs, not on Slurm");
  }
  COHORT_TRY(render(spec, "job-check", "/nonexistent"));
  return {};
}

std::unique_ptr<Backend> makeVolcanoBackend(VolcanoSettings settings) {
  return std::make_unique<VolcanoBackend>(std::move(settings));
}

Result<std::string> volcanoAdvertiseAddress(const VolcanoCluster& cluster,
                                            const std::string& listen_host) {
  auto loopback = [](const std::string& a) { return startsWith(a, "127.") || a == "localhost"; };
  std::string address = listen_host;
  if (listen_host.empty() || listen_host == "0.0.0.0") {
    // The API server's host, as an address: the route toward it leaves from the address the
    // cluster's network reaches this host at.
    std::string server = cluster.client().config().server;
    server = server.substr(server.find("://") + 3);
    std::string host = server.substr(0, server.find_first_of(":/"));
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    auto resolved = resolveIpv4(host, Millis(5000));
    if (!resolved) return tl::unexpected<Error>(resolved.error());
    auto chosen = chooseAddress("", "", *resolved);
    if (!chosen) return tl::unexpected<Error>(chosen.error());
    address = chosen->address;
  }
  if (loopback(address)) {
    return fail(Code::kInvalidArgument,
                "--listen " + listen_host +
                    ": the coordinators in the cluster's pods report to this server, and they "
                    "cannot reach it at " +
                    address +
                    ": listen on an address of this host that the pods reach (--listen ADDR:PORT)");
  }
  return address;
}

}  // namespace cohort::backends
