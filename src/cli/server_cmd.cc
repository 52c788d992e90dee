#include "cli/server_cmd.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "backends/local.h"
#include "backends/slurm.h"
#include "backends/ssh_pool.h"
#include "backends/volcano_backend.h"
#include "cli/args.h"
#include "cli/job_options.h"
#include "proc/job_network.h"
#include "server/server.h"
#include "server/tls.h"
#include "storage/place.h"
#include "util/fd.h"
#include "util/net.h"
#include "util/text.h"

extern char** environ;

namespace cohort::cli {

namespace {

// The help's text around its flags.
const char* kServerAbout = R"(cohort server: the multi-user job service (queue, gang scheduler, accounts, shares)

Usage: cohort server [flags]

Runs in the foreground until Ctrl-C or SIGTERM. Jobs keep running when the server stops: a
restarted server finds them again (and records those that ended meanwhile). On the first start
of a data root it creates the account "admin" and prints its token (also saved, mode 0600, in
<data-root>/server/admin.token).

Flags:
)";
const char* kQuotasAbout = R"(
Quotas: what one account may hold and do at once, where an admin set none of its own (cohort
accounts quota NAME ...); admin accounts are held only to their own. Over one: HTTP 429, naming
the quota and what is in use; the running jobs that take an account past its bytes or inodes
are stopped, saying so (docs/server.md#quotas-and-limits). none: no limit.
)";
const char* kServerAfter = R"(
The API is described in docs/server-api.md and served at /v1/openapi.json; Prometheus metrics
at /metrics. Clients: cohort login URL, then cohort submit/ps/status/logs/... (cohort --help).
)";

// The server's flags, each once with its help: the service's, then the quotas' defaults.
const std::vector<FlagSpec>& serviceFlags() {
  static const std::vector<FlagSpec> kFlags = {
      {"--listen", "", "HOST:PORT",
       "where the HTTP API listens (default 127.0.0.1:8600; port 0: any). Anything but loopback "
       "needs TLS (below) or --insecure-http"},
      {"--tls-cert", "", "FILE",
       "speak HTTPS with this certificate (PEM, the chain leaf first) ..."},
      {"--tls-key", "", "FILE",
       "... and its private key (PEM, unencrypted; keep it 0600)"},
      {"--tls-self-signed", "", "",
       "speak HTTPS with a certificate made for this machine's names and addresses on the first "
       "start (kept in <data-root>/server/tls/); the server prints its fingerprint, which cohort "
       "login --fingerprint pins"},
      {"--insecure-http", "", "",
       "listen beyond loopback without TLS: tokens and data cross the network in the clear "
       "(behind a TLS-terminating proxy only)"},
      {"--data-root", "", "DIR",
       "database, jobs and store (default $COHORT_DATA_ROOT or ~/.cohort)"},
      {"--store", "", "s3://BUCKET/PREFIX",
       "keep the accounts' buckets (store://, server://, shares) under PREFIX of an S3 bucket "
       "instead of <data-root>/store; credentials, region and endpoint from this process's AWS_* "
       "variables or ~/.aws/ (as cohort cp takes them, never a flag); checked at start"},
      {"--backend", "", "NAME",
       "local (default): jobs' nodes are simulated on this machine | slurm: each job is a Slurm "
       "batch job, its ranks on the cluster's nodes; the server queues by account and priority, "
       "Slurm allocates (docs/slurm.md) | volcano: each job is a Volcano Job in the Kubernetes "
       "cluster of the kubeconfig (or of the pod the server runs in); Volcano queues and "
       "gang-schedules (docs/volcano.md) | ssh: each node of a job runs on one of --hosts, its "
       "agent started over ssh as cohort run --hosts does; the server's gang scheduler places "
       "jobs on the hosts (docs/multi-host.md)"},
      {"--hosts", "", "HOST,HOST",
       "with ssh: the hosts (HOST:N: N slots); each hands out its slots as CPUs, else its CPUs, "
       "and its memory and GPUs, as asked over ssh at start"},
      {"--hostfile", "", "FILE",
       "with ssh: the hosts, one a line: `host slots=N` (mpirun's and DeepSpeed's format)"},
      {"--ssh", "", "COMMAND",
       "with ssh: how hosts are reached (default ssh; e.g. \"ssh -p 2222 -i KEY\"): this "
       "server's user's config, keys and agent"},
      {"--namespace", "", "NS",
       "with volcano: the Jobs' namespace (default: the kubeconfig's)"},
      {"--cpus", "", "N",
       "CPUs the scheduler hands out (default: this machine's; with slurm: no limit of its own)"},
      {"--memory", "", "SIZE",
       "memory the scheduler hands out, e.g. 64Gi (default: this machine's)"},
      {"--gpus", "", "N",
       "GPUs the scheduler hands out (default: those nvidia-smi lists)"},
      {"--isolate", "", "",
       "run every job's ranks under bubblewrap, where the store and other jobs' directories do "
       "not exist (the default when bubblewrap works; with --isolate the server refuses to start "
       "without it)"},
      {"--no-isolate", "", "",
       "run jobs without the sandbox"},
      {"--rank-uids", "", "FIRST-LAST",
       "as root, account number N's ranks run as uid and gid FIRST-1+N (default 2000001-2100000): "
       "no account can read, signal or trace another's processes or files"},
      {"--single-user", "", "",
       "every account is one person: ranks run as the server's own user (needed to serve several "
       "accounts without root)"},
      {"--job-network", "", "MODE",
       "isolated (the default as root, with the sandbox): each node of a job in a network of the "
       "job's own, which nothing else reaches, with no way out | nat: the same, with a way out "
       "through this machine (nft) | host: jobs share this machine's network (the default without "
       "root)"},
      {"--input-root", "", "DIR",
       "jobs may name local inputs below DIR (repeatable; default: none, use store://); each is "
       "read as the job's account, and no link below DIR is followed"},
      {"--max-upload", "", "SIZE",
       "the largest code upload accepted (the archive cohort submit sends of a job's workdir; "
       "default 1Gi, at most 4Gi)"},
      {"--threads", "", "N",
       "HTTP worker threads (default 32; followers hold none)"},
      {"--idle-timeout", "", "DUR",
       "close a connection whose client keeps it waiting this long: half a body, an answer not "
       "read (default 60s; followers waiting for their job are not idle). A request's headers "
       "must all be in within 10s of the connection (or its previous answer), or this if shorter, "
       "however slowly they come"},
      {"--rank-pids", "", "N",
       "processes and threads each rank of a job may have at once (default 4096; a job's "
       "resources.pids may ask fewer; 0: no limit)"},
      {"--max-connections", "", "N",
       "connections open at once, in all (default 16384)"},
      {"--max-connections-per-address", "", "N",
       "connections open at once from one client address (default 1024)"},
  };
  return kFlags;
}
const std::vector<FlagSpec>& quotaFlags() {
  static const std::vector<FlagSpec> kFlags = {
      {"--quota-bytes", "", "SIZE",
       "bytes in the data root: its store files, uploads, jobs' directories and environments "
       "(default: a quarter of the data root's file system)"},
      {"--quota-inodes", "", "N",
       "files, directories and links there (default: a quarter of its inodes)"},
      {"--quota-queued-jobs", "", "N",
       "jobs waiting in the queue at once (default 100)"},
      {"--quota-uploads", "", "N",
       "uploads being received or waiting for their job (default 16)"},
      {"--max-followers", "", "N",
       "streams one account may follow at once: jobs' events and logs, builds' logs (default 256)"},
      {"--max-tunnels", "", "N",
       "tunnels one account may hold open at once into its jobs' networks: debuggers attached "
       "with cohort debug --attach (default 8)"},
      {"--quota-max-priority", "", "N",
       "the highest --priority an account may give its jobs (default 0)"},
  };
  return kFlags;
}

int64_t memTotal() {
  auto text = readFile("/proc/meminfo");
  if (!text) return 0;
  auto at = text->find("MemTotal:");
  if (at == std::string::npos) return 0;
  return std::strtoll(text->c_str() + at + 9, nullptr, 10) * 1024;
}

constexpr int64_t kDefaultFirstRankUid = 2000001;
constexpr int64_t kDefaultRankUids = 100000;

// Every directory from / down to `dir` (those that exist) can be entered by any user.
Result<void> searchableByAll(const std::string& dir) {
  std::string path;
  for (const std::string& part : split(dir, '/')) {
    if (part.empty()) continue;
    path += "/" + part;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    if ((st.st_mode & S_IXOTH) == 0) {
      return fail(Code::kFailedPrecondition,
                  "the data root's directory '" + path +
                      "' cannot be entered by other users, so the jobs' own users (uids " +
                      std::to_string(kDefaultFirstRankUid) +
                      " and up) cannot reach their work/ and output/: chmod o+x '" + path +
                      "', choose another --data-root, or run with --single-user");
    }
  }
  return {};
}

// The server's AWS_* settings are its store's, never its jobs': no job's process inherits them.
// The cohort processes of its jobs (coordinators, node agents) get the store in COHORT_STORE*
// instead, which a node agent keeps from the ranks (storage/place.h). Before any thread starts.
void handStoreToJobs(const std::optional<storage::StoreSite>& store) {
  std::vector<std::string> names;
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    std::string name(entry.substr(0, entry.find('=')));
    if (startsWith(name, "AWS_") || storage::isSiteVariable(name)) names.push_back(name);
  }
  for (const std::string& name : names) ::unsetenv(name.c_str());
  if (!store) return;
  for (const auto& [name, value] : storage::siteVariables(*store)) {
    ::setenv(name.c_str(), value.c_str(), 1);
  }
}

// Whether bubblewrap can make a sandbox here (it needs unprivileged user namespaces or root).
bool bubblewrapWorks() {
  if (::access("/usr/bin/bwrap", X_OK) != 0) return false;
  return std::system("/usr/bin/bwrap --dev-bind / / --tmpfs /tmp /bin/true >/dev/null 2>&1") == 0;
}

// Whether `host` is a loopback address or name: only this machine reaches it.
bool isLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || startsWith(host, "127.");
}

// The names a self-signed certificate lists: this machine's name, localhost, the address it
// listens on and every address of this machine's interfaces.
std::vector<std::string> tlsNames(const std::string& listen_host) {
  std::vector<std::string> names = {hostName(), "localhost", "127.0.0.1", "::1"};
  const bool any = listen_host.empty() || listen_host == "0.0.0.0" || listen_host == "::";
  if (!any) names.push_back(listen_host);
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      char text[INET6_ADDRSTRLEN] = {0};
      if (i->ifa_addr->sa_family == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        auto* a6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
        if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
        ::inet_ntop(AF_INET6, &a6->sin6_addr, text, sizeof text);
      } else {
        continue;
      }
      if (std::find(names.begin(), names.end(), text) == names.end()) names.emplace_back(text);
    }
    ::freeifaddrs(list);
  }
  return names;
}

}  // namespace

// The hosts of --backend ssh (--hosts or --hostfile) and how to reach them (--ssh), not yet
// asked. Errors: kInvalidArgument naming the flag.
Result<std::shared_ptr<backends::SshHostPool>> sshHostPool(const Args& parsed) {
  if (parsed.has("--hosts") && parsed.has("--hostfile")) {
    return fail(Code::kInvalidArgument, "--hosts and --hostfile: give one of them");
  }
  Result<std::vector<backends::SshHost>> hosts = std::vector<backends::SshHost>();
  if (parsed.has("--hosts")) {
    hosts = backends::parseHostList(parsed.get("--hosts"));
  } else if (auto text = readFile(parsed.get("--hostfile")); !text) {
    hosts = withContext(text.error(), "--hostfile");
  } else {
    hosts = backends::parseHostfile(*text, parsed.get("--hostfile"));
  }
  if (!hosts) return tl::unexpected<Error>(hosts.error());
  if (hosts->empty()) return fail(Code::kInvalidArgument, "--hosts: no host named");
  auto ssh = backends::splitSshCommand(parsed.get("--ssh", "ssh"));
  if (!ssh) return withContext(ssh.error(), "--ssh");
  return std::make_shared<backends::SshHostPool>(std::move(*hosts), std::move(*ssh));
}

std::string serverHelp() {
  return kServerAbout + flagsHelp(serviceFlags()) + kQuotasAbout + flagsHelp(quotaFlags()) +
         kServerAfter;
}

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
  std::vector<FlagSpec> specs = serviceFlags();
  specs.insert(specs.end(), quotaFlags().begin(), quotaFlags().end());
  auto parsed = parseArgs("server", argc, argv, specs);
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
  std::string volcano_where;  // with --backend volcano: the cluster and namespace, for a person
  std::string isolate = parsed->has("--isolate")      ? "on"
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
    } else if (flag == "--store") {
      if (!storage::isS3Uri(value)) {
        return bad("expected s3://BUCKET/PREFIX (without --store the store is <data-root>/store)");
      }
      auto site = storage::s3StoreSite(value);
      if (!site) {
        std::fprintf(stderr, "cohort: error: server: --store: %s\n", site.error().message.c_str());
        return kExitUsage;
      }
      options.store = *site;
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
    } else if (flag == "--max-upload") {
      auto bytes = parseBytes(value);
      if (!bytes || *bytes < 1 || *bytes > (int64_t{4} << 30)) {
        return bad("expected a size from 1 byte to 4Gi (examples: 512Mi, 2Gi)");
      }
      options.max_upload_bytes = *bytes;
    } else if (flag == "--rank-uids") {
      auto dash = value.find('-');
      auto first = parseInt64(value.substr(0, dash));
      auto last = dash == std::string::npos ? first : parseInt64(value.substr(dash + 1));
      if (!first || !last || *first < 1000 || *last < *first || *last > 4000000000) {
        return bad("expected FIRST-LAST, two uids between 1000 and 4000000000");
      }
      options.identities.first = *first - 1;  // account number 1 runs as FIRST
      options.identities.count = *last - *first + 1;
    } else if (flag == "--threads") {
      auto n = parseInt(value);
      if (!n || *n < 2) return bad("expected a number >= 2");
      options.http_threads = *n;
    } else if (flag == "--backend") {
      auto b = spec::parseBackend(value);
      if (!b) return bad("expected local, slurm, volcano or ssh");
      options.nodes = *b;
    } else if (flag == "--max-followers") {
      auto n = parseInt64(value);
      if (!n || *n < 1 || *n > 1000000) return bad("expected a number from 1 to 1000000");
      options.quotas.followers = *n;
    } else if (flag == "--max-tunnels") {
      auto n = parseInt64(value);
      if (!n || *n < 1 || *n > 100000) return bad("expected a number from 1 to 100000");
      options.max_tunnels = *n;
    } else if (flag == "--quota-bytes") {
      auto bytes = parseBytes(value);
      if (value != "none" && (!bytes || *bytes < 1)) return bad("expected a size (like 500Gi) or none");
      options.quotas.bytes = value == "none" ? std::nullopt : std::optional<int64_t>(*bytes);
    } else if (flag == "--quota-inodes" || flag == "--quota-queued-jobs" ||
               flag == "--quota-uploads") {
      auto n = parseInt64(value);
      if (value != "none" && (!n || *n < 0)) return bad("expected a number >= 0, or none");
      std::optional<int64_t>& quota = flag == "--quota-inodes"        ? options.quotas.inodes
                                      : flag == "--quota-queued-jobs" ? options.quotas.queued_jobs
                                                                      : options.quotas.uploads;
      quota = value == "none" ? std::nullopt : std::optional<int64_t>(*n);
    } else if (flag == "--quota-max-priority") {
      auto n = parseInt(value);
      if (value != "none" && !n) return bad("expected a priority (a whole number), or none");
      options.quotas.max_priority = value == "none" ? std::nullopt : std::optional<int64_t>(*n);
    } else if (flag == "--rank-pids") {
      auto n = parseInt64(value);
      if (!n || *n < 0 || *n > 4194304) return bad("expected a number from 0 (none) to 4194304");
      options.rank_pids = *n;
    } else if (flag == "--max-connections" || flag == "--max-connections-per-address") {
      auto n = parseInt64(value);
      if (!n || *n < 1 || *n > 1000000) return bad("expected a number from 1 to 1000000");
      (flag == "--max-connections" ? options.http_limits.max_connections
                                   : options.http_limits.max_per_address) = static_cast<size_t>(*n);
    } else if (flag == "--idle-timeout") {
      auto d = parseDuration(value);
      if (!d || *d < Millis(100) || *d > Millis(86400000)) {
        return bad("expected a duration from 100ms to 24h (like 60s)");
      }
      options.http_idle_timeout = *d;
    }
  }
  if (options.data_root[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) options.data_root = std::string(cwd) + "/" + options.data_root;
  }
  // No account alone fills the data root: by default each may hold a quarter of its file
  // system's space and inodes.
  if (!parsed->has("--quota-bytes") || !parsed->has("--quota-inodes")) {
    std::string existing = options.data_root;
    struct statvfs fs {};
    while (::statvfs(existing.c_str(), &fs) != 0 && existing.size() > 1) {
      existing = existing.substr(0, std::max<size_t>(existing.rfind('/'), 1));
    }
    if (!parsed->has("--quota-bytes") && fs.f_blocks > 0) {
      options.quotas.bytes = static_cast<int64_t>(fs.f_blocks * fs.f_frsize / 4);
    }
    if (!parsed->has("--quota-inodes") && fs.f_files > 0) {
      options.quotas.inodes = static_cast<int64_t>(fs.f_files / 4);
    }
  }
  // TLS: a certificate given, or one made for this machine; beyond loopback, one is a must.
  if (parsed->has("--tls-cert") != parsed->has("--tls-key")) {
    std::fprintf(stderr, "cohort: error: server: --tls-cert and --tls-key go together\n");
    return kExitUsage;
  }
  if (parsed->has("--tls-cert") && parsed->has("--tls-self-signed")) {
    std::fprintf(stderr, "cohort: error: server: --tls-self-signed or --tls-cert/--tls-key, "
                         "not both\n");
    return kExitUsage;
  }
  bool tls_created = false;
  std::string tls_fingerprint;
  if (parsed->has("--tls-cert") || parsed->has("--tls-self-signed")) {
    Result<server::TlsIdentity> identity = fail(Code::kInternal, "no identity");
    if (parsed->has("--tls-cert")) {
      identity = server::loadTlsIdentity(parsed->get("--tls-cert"), parsed->get("--tls-key"));
    } else if (auto made = makeDirs(options.data_root + "/server"); !made) {
      identity = tl::unexpected(made.error());
    } else {
      identity = server::selfSignedIdentity(options.data_root + "/server/tls",
                                            tlsNames(options.host), &tls_created);
    }
    if (!identity) {
      std::fprintf(stderr, "cohort: error: server: TLS: %s\n", identity.error().message.c_str());
      return kExitUsage;
    }
    options.tls = {identity->cert_pem, identity->key_pem};
    tls_fingerprint = identity->fingerprint;
  } else if (!isLoopback(options.host) && !parsed->has("--insecure-http")) {
    std::fprintf(stderr,
                 "cohort: error: server: --listen %s is reachable from other machines, and "
                 "without TLS every token and byte would cross the network in the clear: give "
                 "--tls-cert FILE --tls-key FILE, or --tls-self-signed, or (behind a "
                 "TLS-terminating proxy) --insecure-http\n",
                 options.host.c_str());
    return kExitUsage;
  }
  const std::string scheme = options.tls.cert_pem.empty() ? "http" : "https";
  // The GPUs handed out: those found first, then (when --gpus says more) the next indices.
  for (int64_t i = 0; i < gpus; ++i) {
    options.gpu_ids.push_back(i < static_cast<int64_t>(found_gpus.size())
                                  ? found_gpus[static_cast<size_t>(i)]
                                  : static_cast<int>(i));
  }
  options.capacity.gpus = gpus;
  if (options.nodes == spec::Backend::kSlurm) {
    // Slurm allocates and gang-schedules: this server queues by account and priority, and hands
    // Slurm whatever it asks for, unless --cpus, --memory or --gpus set the share it may use.
    if (auto at = backends::slurmCoordinatorAddress({}); !at) {
      std::fprintf(stderr, "cohort server: --backend slurm: %s\n", at.error().message.c_str());
      return kExitFailed;
    }
    options.gpu_ids.clear();  // Slurm gives each node its GPUs (--gres)
    if (!parsed->has("--cpus")) options.capacity.cpu_millis = int64_t{1} << 50;
    if (!parsed->has("--memory")) options.capacity.memory_bytes = int64_t{1} << 60;
    if (!parsed->has("--gpus")) options.capacity.gpus = int64_t{1} << 30;
  }
  if (options.nodes == spec::Backend::kVolcano) {
    // The cluster, and Volcano in it, are there and cohort may use them; the coordinator pods
    // report to this server at an address they reach.
    auto cluster = backends::VolcanoCluster::connect(parsed->get("--namespace"));
    Result<std::string> advertise = fail(Code::kInternal, "not asked");
    if (!cluster) {
      advertise = tl::unexpected(cluster.error());
    } else if (auto checked = (*cluster)->checkVolcano(); !checked) {
      advertise = tl::unexpected(checked.error());
    } else {
      advertise = backends::volcanoAdvertiseAddress(**cluster, options.host);
    }
    if (!advertise) {
      std::fprintf(stderr, "cohort server: --backend volcano: %s\n",
                   advertise.error().message.c_str());
      return exitCodeFor(advertise.error());
    }
    options.volcano = {(*cluster)->namespaceName(), *advertise};
    volcano_where = (*cluster)->where();
    // Volcano queues and gang-schedules: this server queues by account and priority and hands
    // the cluster whatever a job asks for, unless --cpus, --memory or --gpus set its share.
    options.gpu_ids.clear();
    if (!parsed->has("--cpus")) options.capacity.cpu_millis = int64_t{1} << 50;
    if (!parsed->has("--memory")) options.capacity.memory_bytes = int64_t{1} << 60;
    if (!parsed->has("--gpus")) options.capacity.gpus = int64_t{1} << 30;
  }
  std::vector<std::string> host_lines;  // what each host has, for the log
  const bool on_hosts = options.nodes == spec::Backend::kSsh;
  if (on_hosts != (parsed->has("--hosts") || parsed->has("--hostfile")) ||
      (!on_hosts && parsed->has("--ssh"))) {
    std::fprintf(stderr, "cohort: error: server: %s\n",
                 on_hosts ? "--backend ssh: name the hosts (--hosts H1,H2 or --hostfile FILE)"
                          : "--hosts, --hostfile and --ssh go with --backend ssh");
    return kExitUsage;
  }
  if (on_hosts) {
    auto made = sshHostPool(*parsed);
    if (!made) {
      std::fprintf(stderr, "cohort: error: server: %s\n", made.error().message.c_str());
      return kExitUsage;
    }
    for (const char* flag :
         {"--cpus", "--memory", "--gpus", "--job-network", "--rank-uids", "--isolate"}) {
      if (!parsed->has(flag)) continue;
      std::fprintf(stderr, "cohort: error: server: %s: not with --backend ssh: %s\n", flag,
                   std::string(flag) == "--rank-uids" || std::string(flag) == "--job-network" ||
                           std::string(flag) == "--isolate"
                       ? "ranks run on the hosts as the user ssh logs in as, in the hosts' "
                         "network, without this machine's sandbox"
                       : "each host hands out its slots (or CPUs), memory and GPUs");
      return kExitUsage;
    }
    if (::geteuid() == 0 && !parsed->has("--single-user")) {
      std::fprintf(stderr,
                   "cohort server: --backend ssh: every job's ranks run on the hosts as the user "
                   "this server's ssh logs in as, so accounts cannot be kept apart there: start "
                   "it with --single-user (accounts of one person or one team that trust each "
                   "other)\n");
      return kExitUsage;
    }
    host_lines = (*made)->start();
    options.hosts = std::move(*made);
    options.gpu_ids.clear();  // each host's are its own
    options.capacity = {};
    isolate = "off";  // the ranks run on the hosts, not under this machine's bubblewrap
  }
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
  // Each job's own network: possible with the sandbox, as root, for nodes on this machine.
  const bool own_network = options.isolate && options.nodes == spec::Backend::kLocal &&
                           proc::JobNetwork::available();
  options.job_network = parsed->get("--job-network", own_network ? "isolated" : "host");
  if (options.job_network != "host") {
    if (!proc::parseEgress(options.job_network)) {
      std::fprintf(stderr, "cohort: error: server: --job-network: expected isolated, nat or host, "
                           "got '%s'\n", options.job_network.c_str());
      return kExitUsage;
    }
    if (!own_network) {
      std::fprintf(stderr,
                   "cohort server: --job-network %s needs root, the sandbox (--isolate) and the "
                   "local backend\n",
                   options.job_network.c_str());
      return kExitUsage;
    }
  }
  for (const std::string& root : parsed->all("--input-root")) {
    if (root.empty() || root[0] != '/') {
      std::fprintf(stderr,
                   "cohort: error: server: --input-root: must be an absolute path, got '%s'\n",
                   root.c_str());
      return kExitUsage;
    }
    std::string trimmed = absoluteIn(root, "/");
    options.input_roots.push_back(trimmed);
  }
  options.identities.single_user = parsed->has("--single-user");
  if (::geteuid() != 0) {
    if (parsed->has("--rank-uids")) {
      std::fprintf(stderr, "cohort server: --rank-uids needs root: only root can run ranks "
                           "as other users\n");
      return kExitUsage;
    }
  } else if (options.identities.single_user) {
    options.identities.first = -1;
  } else {
    if (options.identities.first < 0) {
      options.identities.first = kDefaultFirstRankUid - 1;
      options.identities.count = kDefaultRankUids;
    }
    // Ranks run as those uids, in a sandbox where only their job's directories are bound: every
    // directory above the data root must let them through.
    if (auto open = searchableByAll(options.data_root); !open) {
      std::fprintf(stderr, "cohort server: %s\n", open.error().message.c_str());
      return kExitUsage;
    }
  }

  // SIGINT/SIGTERM are taken by a thread of our own; every other thread leaves them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  handStoreToJobs(options.store);
  auto server = server::Server::create(options);
  if (!server) {
    std::fprintf(stderr, "cohort server: error: %s\n", server.error().message.c_str());
    return server.error().code == Code::kInvalidArgument ? kExitUsage : 1;
  }
  for (const std::string& line : (*server)->reconciled()) {
    std::fprintf(stderr, "cohort server: %s\n", line.c_str());
  }
  std::printf("cohort server: listening on %s://%s:%d\n", scheme.c_str(), options.host.c_str(),
              (*server)->port());
  if (!tls_fingerprint.empty()) {
    std::printf("cohort server: TLS certificate%s, SHA-256 fingerprint %s\n",
                parsed->has("--tls-self-signed")
                    ? (tls_created ? " (self-signed, made now)" : " (self-signed)")
                    : "",
                tls_fingerprint.c_str());
  }
  if (options.nodes == spec::Backend::kVolcano) {
    std::printf("cohort server: data root %s; jobs are Volcano Jobs in %s; their coordinators "
                "report to http://%s:%d\n",
                options.data_root.c_str(), volcano_where.c_str(),
                options.volcano.advertise.c_str(), (*server)->port());
  } else if (on_hosts) {
    std::printf("cohort server: data root %s; jobs run on hosts over ssh (%s):\n",
                options.data_root.c_str(), join(options.hosts->ssh(), " ").c_str());
    for (const std::string& line : host_lines) std::printf("cohort server:   %s\n", line.c_str());
  } else if (options.nodes == spec::Backend::kSlurm) {
    std::printf("cohort server: data root %s; jobs are Slurm batch jobs (SLURM_CONF %s)\n",
                options.data_root.c_str(),
                std::getenv("SLURM_CONF") ? std::getenv("SLURM_CONF") : "not set");
  } else {
    std::printf("cohort server: data root %s, %s\n", options.data_root.c_str(),
                sched::describe(options.capacity).c_str());
  }
  if (options.store) {
    std::printf("cohort server: store %s (at %s)\n", options.store->describe().c_str(),
                options.store->s3.endpoint.empty() ? "AWS" : options.store->s3.endpoint.c_str());
  }
  std::printf("cohort server: jobs run %s\n",
              on_hosts ? "on the hosts as the user ssh logs in as there (no sandbox)"
              : options.isolate ? "isolated (bubblewrap: each sees only its own directory)"
              : isolate == "off" ? "without isolation (--no-isolate)"
                                 : "WITHOUT isolation: bubblewrap does not work here (apt-get "
                                   "install bubblewrap); every job can read the store and other "
                                   "jobs' files");
  std::printf("cohort server: %s\n",
              on_hosts ? "jobs use the hosts' network (the network: setting picks addresses)"
              : options.job_network == "host"
                  ? "jobs share this machine's network (no --job-network: any process here can "
                    "reach their ports)"
                  : options.job_network == "nat"
                        ? "each job has a network of its own, with a way out through this "
                          "machine (--job-network nat)"
                        : "each job has a network of its own, with no way out (--job-network "
                          "isolated)");
  std::printf("cohort server: local inputs %s\n",
              options.input_roots.empty()
                  ? "refused (no --input-root: jobs name store:// data)"
                  : ("below " + join(options.input_roots, ", ") + ", read as each job's account")
                        .c_str());
  if (options.identities.first >= 0) {
    std::printf("cohort server: each account's ranks run as a user of its own (uids %lld-%lld)\n",
                static_cast<long long>(options.identities.first + 1),
                static_cast<long long>(options.identities.first + options.identities.count));
  } else {
    std::printf("cohort server: every job runs as this server's user (%s)\n",
                options.identities.single_user ? "--single-user" : "not root: one account only");
  }
  if (!(*server)->firstAdminToken().empty()) {
    std::printf("cohort server: admin token: %s\n", (*server)->firstAdminToken().c_str());
    std::printf(
        "cohort server: (saved in %s/server/admin.token; log in with: cohort login "
        "%s://%s:%d --token <token>%s%s)\n",
        options.data_root.c_str(), scheme.c_str(), options.host.c_str(), (*server)->port(),
        parsed->has("--tls-self-signed") ? " --fingerprint " : "",
        parsed->has("--tls-self-signed") ? tls_fingerprint.c_str() : "");
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
