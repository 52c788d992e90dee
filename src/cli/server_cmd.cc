#include "cli/server_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "backends/local.h"
#include "cli/args.h"
#include "server/server.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {


const char* kServerHelp =
    R"(cohort server: the multi-user job service (queue, gang scheduler, accounts, shares)

Usage: cohort server [flags]

Runs in the foreground until Ctrl-C or SIGTERM. Jobs keep running when the server stops: a
restarted server finds them again (and records those that ended meanwhile). On the first start
of a data root it creates the account "admin" and prints its token (also saved, mode 0600, in
<data-root>/server/admin.token).

Flags:
  --listen HOST:PORT       where the HTTP API listens (default 127.0.0.1:8600; port 0: any)
  --data-root DIR          database, jobs and store (default $COHORT_DATA_ROOT or ~/.cohort)
  --cpus N                 CPUs the scheduler hands out (default: this machine's)
  --memory SIZE            memory the scheduler hands out, e.g. 64Gi (default: this machine's)
  --gpus N                 GPUs the scheduler hands out (default: those nvidia-smi lists)
  --isolate                run every job's ranks under bubblewrap, where the store and other
                           jobs' directories do not exist (the default when bubblewrap works;
                           with --isolate the server refuses to start without it)
  --no-isolate             run jobs without the sandbox
  --threads N              HTTP worker threads (default 32; each `logs -f` holds one)

The API is described in docs/server-api.md and served at /v1/openapi.json; Prometheus metrics
at /metrics. Clients: cohort login URL, then cohort submit/ps/status/logs/... (cohort --help).
)";

int64_t memTotal() {
  auto text = readFile("/proc/meminfo");
  if (!text) return 0;
  auto at = text->find("MemTotal:");
  if (at == std::string::npos) return 0;
  return std::strtoll(text->c_str() + at + 9, nullptr, 10) * 1024;
}

// Whether bubblewrap can make a sandbox here (it needs unprivileged user namespaces or root).
bool bubblewrapWorks() {
  if (::access("/usr/bin/bwrap", X_OK) != 0) return false;
  return std::system("/usr/bin/bwrap --dev-bind / / --tmpfs /tmp /bin/true >/dev/null 2>&1") == 0;
}

}  // namespace

const char* serverHelp() { return kServerHelp; }

int cmdServer(int argc, char** argv) {
  server::ServerOptions options;
  const char* env_root = std::getenv("COHORT_DATA_ROOT");
  const char* home = std::getenv("HOME");
  options.data_root = env_root && *env_root ? std::string(env_root)
                                            : std::string(home ? home : "/tmp") + "/.cohort";
  options.capacity.cpu_millis = static_cast<int64_t>(std::thread::hardware_concurrency()) * 1000;
  options.capacity.memory_bytes = memTotal();
  const std::vector<int> found_gpus = backends::localGpus();
  int64_t gpus = static_cast<int64_t>(found_gpus.size());
  auto parsed = parseArgs("server", argc, argv,
                          {{"--listen", "", true},
                           {"--data-root", "", true},
                           {"--cpus", "", true},
                           {"--memory", "", true},
                           {"--gpus", "", true},
                           {"--threads", "", true},
                           {"--isolate", "", false},
                           {"--no-isolate", "", false}});
  if (parsed && !parsed->positional.empty()) {
    parsed = fail(Code::kInvalidArgument, "server: unexpected argument '" + parsed->positional[0] +
                                              "' (see cohort server --help)");
  }
  if (!parsed) {
    std::fprintf(stderr, "cohort: error: %s\n", parsed.error().message.c_str());
    return kExitUsage;
  }
  if (parsed->has("--isolate") && parsed->has("--no-isolate")) {
    std::fprintf(stderr,
                 "cohort: error: server: --isolate and --no-isolate contradict each "
                 "other: give one\n");
    return kExitUsage;
  }
  const std::string isolate = parsed->has("--isolate")      ? "on"
                              : parsed->has("--no-isolate") ? "off"
                                                            : "auto";
  for (const auto& [flag, values] : parsed->flags) {
    const std::string& value = values.back();
    auto bad = [&](const std::string& what) {
      std::fprintf(stderr, "cohort: error: server: %s: %s, got '%s'\n", flag.c_str(), what.c_str(),
                   value.c_str());
      return kExitUsage;
    };
    if (flag == "--listen") {
      auto colon = value.rfind(':');
      auto port = colon == std::string::npos ? Result<int>(-1) : parseInt(value.substr(colon + 1));
      if (!port || *port < 0 || *port > 65535) return bad("expected HOST:PORT");
      options.host = colon == 0 ? "0.0.0.0" : value.substr(0, colon);
      options.port = *port;
    } else if (flag == "--data-root") {
      if (value.empty()) return bad("expected a directory");
      options.data_root = value;
    } else if (flag == "--cpus") {
      auto cpus = parseCpus(value);
      if (!cpus) return bad("expected a number of CPUs (examples: 4, 0.5)");
      options.capacity.cpu_millis = static_cast<int64_t>(*cpus * 1000);
    } else if (flag == "--memory") {
      auto bytes = parseBytes(value);
      if (!bytes) return bad(bytes.error().message);
      options.capacity.memory_bytes = *bytes;
    } else if (flag == "--gpus") {
      auto n = parseInt(value);
      if (!n || *n < 0) return bad("expected a number of GPUs");
      gpus = *n;
    } else if (flag == "--threads") {
      auto n = parseInt(value);
      if (!n || *n < 2) return bad("expected a number >= 2");
      options.http_threads = *n;
    }
  }
  if (options.data_root[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) options.data_root = std::string(cwd) + "/" + options.data_root;
  }
  // The GPUs handed out: those found first, then (when --gpus says more) the next indices.
  for (int64_t i = 0; i < gpus; ++i) {
    options.gpu_ids.push_back(i < static_cast<int64_t>(found_gpus.size())
                                  ? found_gpus[static_cast<size_t>(i)]
                                  : static_cast<int>(i));
  }
  options.capacity.gpus = gpus;
  options.cohort_bin = backends::selfExecutable();
  // Jobs of different accounts share the machine and the server's user: unless told otherwise,
  // each job runs in a sandbox where the store and other jobs' directories do not exist.
  const bool sandbox = bubblewrapWorks();
  if (isolate == "on" && !sandbox) {
    std::fprintf(stderr,
                 "cohort server: --isolate needs a working bubblewrap (/usr/bin/bwrap): "
                 "apt-get install bubblewrap, and allow unprivileged user namespaces\n");
    return kExitUsage;
  }
  options.isolate = isolate == "on" || (isolate == "auto" && sandbox);

  // SIGINT/SIGTERM are taken by a thread of our own; every other thread leaves them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto server = server::Server::create(options);
  if (!server) {
    std::fprintf(stderr, "cohort server: error: %s\n", server.error().message.c_str());
    return server.error().code == Code::kInvalidArgument ? kExitUsage : 1;
  }
  for (const std::string& line : (*server)->reconciled()) {
    std::fprintf(stderr, "cohort server: %s\n", line.c_str());
  }
  std::printf("cohort server: listening on http://%s:%d\n", options.host.c_str(),
              (*server)->port());
  std::printf("cohort server: data root %s, %s\n", options.data_root.c_str(),
              sched::describe(options.capacity).c_str());
  std::printf("cohort server: jobs run %s\n",
              options.isolate    ? "isolated (bubblewrap: each sees only its own directory)"
              : isolate == "off" ? "without isolation (--no-isolate)"
                                 : "WITHOUT isolation: bubblewrap does not work here (apt-get "
                                   "install bubblewrap); every job can read the store and other "
                                   "jobs' files");
  if (!(*server)->firstAdminToken().empty()) {
    std::printf("cohort server: admin token: %s\n", (*server)->firstAdminToken().c_str());
    std::printf(
        "cohort server: (saved in %s/server/admin.token; log in with: cohort login "
        "http://%s:%d --token <token>)\n",
        options.data_root.c_str(), options.host.c_str(), (*server)->port());
  }
  std::fflush(stdout);

  server::Server* s = server->get();
  std::thread waiter([s, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "cohort server: stopping (jobs keep running)\n");
    s->stop();
  });
  auto served = s->run();
  // run() ended: make the waiter return if it still waits.
  if (waiter.joinable()) {
    ::kill(::getpid(), SIGTERM);
    waiter.join();
  }
  if (!served) {
    std::fprintf(stderr, "cohort server: error: %s\n", served.error().message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace cohort::cli
