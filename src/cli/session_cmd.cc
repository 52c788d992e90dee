#include "cli/session_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/client.h"
#include "cli/job_options.h"
#include "job/state.h"
#include "spec/job_spec.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

std::string textOf(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const Json& v = j[key];
  return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
}

// Where a session's keys are kept on this machine: beside the client's config, one directory
// per session, 0700.
std::string sessionsDir() {
  return std::filesystem::path(clientConfigPath()).parent_path().string() + "/sessions";
}
std::string keysDir(const std::string& id) { return sessionsDir() + "/" + id; }

// The host's name in ssh's known_hosts and config (HostKeyAlias): the same for every server.
std::string hostAlias(const std::string& id) { return "cohort-session-" + id; }

Result<void> mkdirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return fail(Code::kIo, "cannot make " + path + ": " + ec.message());
  ::chmod(path.c_str(), 0700);
  return {};
}

// ssh-keygen from the user's OpenSSH client: a new ed25519 key pair at `path` and path.pub.
Result<void> keygen(const std::string& path) {
  const pid_t pid = ::fork();
  if (pid < 0) return fail(Code::kIo, "cannot start ssh-keygen");
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    const char* argv[] = {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cohort-session",
                          "-f", path.c_str(), nullptr};
    ::execvp("ssh-keygen", const_cast<char* const*>(argv));
    std::fprintf(stderr, "cohort session: ssh-keygen: not found (install OpenSSH's client)\n");
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail(Code::kFailedPrecondition,
                "ssh-keygen could not make a key at " + path + " (is OpenSSH's client installed?)");
  }
  return {};
}

// An OpenSSH private key file's base64 body on one line (spec::Session::host_key).
std::string keyBody(const std::string& file) {
  std::string body;
  for (const std::string& line : split(file, '\n')) {
    if (line.empty() || startsWith(line, "-----")) continue;
    body += std::string(trim(line));
  }
  return body;
}

Result<Json> sessionsOf(ApiClient& api) {
  COHORT_ASSIGN(Json answer, api.call("GET", "/v1/jobs"));
  Json out = Json::array();
  if (answer.is_object() && answer["jobs"].is_array()) {
    for (const Json& job : answer["jobs"]) {
      if (textOf(job, "kind") == "session") out.push_back(job);
    }
  }
  return out;
}

// The session NAME names: its id, else the one active session of that name.
Result<Json> findSession(ApiClient& api, const std::string& name) {
  COHORT_ASSIGN(Json sessions, sessionsOf(api));
  std::vector<Json> named;
  for (const Json& s : sessions) {
    if (textOf(s, "id") == name) return s;
    if (textOf(s, "name") == name && !job::isFinalState(textOf(s, "state"))) {
      named.push_back(s);
    }
  }
  if (named.size() == 1) return named[0];
  if (named.empty()) {
    return fail(Code::kNotFound, "no active session '" + name + "' (cohort session ls lists yours)");
  }
  std::string ids;
  for (const Json& s : named) ids += " " + textOf(s, "id");
  return fail(Code::kInvalidArgument,
              "more than one active session is named '" + name + "': give its id:" + ids);
}

std::string selfPath() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("cohort") : p.string();
}

Result<int> start(const Args& args, ApiClient& api) {
  spec::JobSpec spec;
  spec.name = args.get("--name", "session");
  spec.framework = spec::Framework::kGeneric;
  spec.command = {"cohort", "session-host"};  // the server runs its own
  spec.workdir = "/";
  spec.environment = args.get("--env");
  spec::Role role;
  role.name = "worker";
  if (args.has("--nodes")) {
    COHORT_ASSIGN(role.nodes, parseInt(args.get("--nodes")));
  }
  if (args.has("--nproc-per-node")) {
    COHORT_ASSIGN(role.procs_per_node, parseInt(args.get("--nproc-per-node")));
  }
  spec.roles = {role};
  JobOptions resources;
  resources.cpus = args.get("--cpus");
  resources.memory = args.get("--memory");
  resources.gpus = args.get("--gpus");
  COHORT_TRY(applyResourceFlags(resources, spec));
  spec::Session session;
  if (args.has("--idle-timeout")) {
    COHORT_ASSIGN(session.idle_timeout, parseDuration(args.get("--idle-timeout")));
  }
  if (args.has("--max-runtime")) {
    COHORT_ASSIGN(spec.policy.max_runtime, parseDuration(args.get("--max-runtime")));
  }
  // The keys: made here, so that the login key never leaves this machine and the host key is
  // known before the first login.
  COHORT_TRY(mkdirs(sessionsDir()));
  std::string pending = sessionsDir() + "/.new-XXXXXX";
  if (!::mkdtemp(pending.data())) return fail(Code::kIo, "cannot make a directory in " + sessionsDir());
  auto cleanup = [&] { std::filesystem::remove_all(pending); };
  for (const char* key : {"/id_ed25519", "/host_ed25519"}) {
    if (auto made = keygen(pending + key); !made) {
      cleanup();
      return tl::unexpected<Error>(made.error());
    }
  }
  auto login_pub = readFile(pending + "/id_ed25519.pub");
  auto host = readFile(pending + "/host_ed25519");
  auto host_pub = readFile(pending + "/host_ed25519.pub");
  if (!login_pub || !host || !host_pub) {
    cleanup();
    return fail(Code::kIo, "cannot read the keys ssh-keygen made in " + pending);
  }
  session.authorized_key = std::string(trim(*login_pub));
  session.host_key = keyBody(*host);
  session.jupyter = args.has("--jupyter");
  spec.session = session;
  auto job = Json::parse(spec::toJobFile(spec), nullptr, false);
  auto created = api.call("POST", "/v1/jobs", Json{{"job", job}});
  if (!created) {
    cleanup();
    return tl::unexpected<Error>(created.error());
  }
  const std::string id = textOf(*created, "id");
  std::filesystem::rename(pending, keysDir(id));
  (void)writeFileAtomic(keysDir(id) + "/known_hosts", hostAlias(id) + " " + std::string(trim(*host_pub)) + "\n",
                        false, 0600);
  if (args.has("--json")) {
    std::printf("%s\n", created->dump(2).c_str());
  } else {
    std::printf("%s\n", id.c_str());
  }
  std::fprintf(stderr,
               "cohort: session %s (%s) is %s; cohort session %s %s %s once it runs, "
               "cohort session stop %s ends it\n",
               spec.name.c_str(), id.c_str(), textOf(*created, "state").c_str(),
               session.jupyter ? "open" : "ssh", spec.name.c_str(),
               session.jupyter ? "opens its JupyterLab" : "logs in", spec.name.c_str());
  return 0;
}

Result<int> list(const Args& args, ApiClient& api) {
  COHORT_ASSIGN(Json sessions, sessionsOf(api));
  Json shown = Json::array();
  for (const Json& s : sessions) {
    if (args.has("--all") || !job::isFinalState(textOf(s, "state"))) shown.push_back(s);
  }
  if (args.has("--json")) {
    std::printf("%s\n", shown.dump(2).c_str());
    return 0;
  }
  if (shown.empty()) {
    std::fputs("cohort: no sessions (cohort session start starts one)\n", stderr);
    return 0;
  }
  std::printf("%-28s %-16s %-10s %-6s %-12s %-6s %s\n", "ID", "NAME", "STATE", "RANKS",
              "IDLE-TIMEOUT", "CONNS", "INFO");
  for (const Json& s : shown) {
    const Json session = s.value("session", Json::object());
    std::string info = textOf(s, "reason");
    if (info.empty() && !textOf(session, "jupyter").empty()) {
      info = "ssh, JupyterLab (cohort session open " + textOf(s, "name") + ")";
    } else if (info.empty()) {
      info = "ssh";
    }
    std::printf("%-28s %-16s %-10s %-6s %-12s %-6s %s\n", textOf(s, "id").c_str(),
                textOf(s, "name").c_str(), textOf(s, "state").c_str(), textOf(s, "ranks").c_str(),
                textOf(session, "idle_timeout").c_str(), textOf(session, "connections").c_str(),
                info.c_str());
  }
  return 0;
}

Result<int> stop(const std::string& name, ApiClient& api) {
  COHORT_ASSIGN(Json session, findSession(api, name));
  const std::string id = textOf(session, "id");
  COHORT_ASSIGN(Json answer, api.call("POST", "/v1/jobs/" + urlEncode(id) + "/stop"));
  std::error_code ec;
  std::filesystem::remove_all(keysDir(id), ec);  // nothing logs in to it any more
  std::fprintf(stderr, "cohort: session %s (%s) is %s\n", textOf(session, "name").c_str(),
               id.c_str(), textOf(answer, "state").c_str());
  return 0;
}

// The tunnel to the session's sshd on stdin and stdout (ssh's ProxyCommand). The session may
// have just started: its sshd is given 30 s to listen.
Result<int> stdio(const std::string& id, ApiClient& api) {
  const std::string path = "/v1/jobs/" + urlEncode(id) + "/session/ssh/tunnel";
  const auto until = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto tunnel = api.tunnel(path, "cohort-tunnel");
    if (tunnel) {
      COHORT_TRY((*tunnel)->relay(0, 1));
      return 0;
    }
    const bool early = tunnel.error().code == Code::kUnavailable ||
                       (tunnel.error().code == Code::kFailedPrecondition &&
                        tunnel.error().message.find("not started") != std::string::npos);
    if (!early || std::chrono::steady_clock::now() > until) {
      return tl::unexpected<Error>(tunnel.error());
    }
    std::this_thread::sleep_for(250ms);
  }
}

std::string configBlock(const Json& session, const std::string& self) {
  const std::string id = textOf(session, "id");
  const std::string dir = keysDir(id);
  const std::string user = textOf(session.value("session", Json::object()), "user");
  return "Host cohort-" + textOf(session, "name") + "\n" +
         "  HostName " + hostAlias(id) + "\n" +
         "  HostKeyAlias " + hostAlias(id) + "\n" +
         "  User " + user + "\n" +
         "  ProxyCommand " + self + " session ssh --stdio " + id + "\n" +
         "  IdentityFile " + dir + "/id_ed25519\n" +
         "  IdentitiesOnly yes\n" +
         "  UserKnownHostsFile " + dir + "/known_hosts\n" +
         "  StrictHostKeyChecking yes\n";
}

Result<void> haveKeys(const std::string& id) {
  if (::access((keysDir(id) + "/id_ed25519").c_str(), R_OK) != 0) {
    return fail(Code::kFailedPrecondition,
                "the keys of session " + id + " are not on this machine (" + keysDir(id) +
                    "): cohort session start made them where it ran; log in from there");
  }
  return {};
}

// ssh's command line that logs in to `session` through the server (`self`: this binary).
std::vector<std::string> sshArgv(const Json& session, const std::string& self) {
  const std::string id = textOf(session, "id");
  const std::string dir = keysDir(id);
  const std::string user = textOf(session.value("session", Json::object()), "user");
  return {"ssh",
          "-o", "ProxyCommand=" + self + " session ssh --stdio " + id,
          "-o", "HostKeyAlias=" + hostAlias(id),
          "-o", "UserKnownHostsFile=" + dir + "/known_hosts",
          "-o", "StrictHostKeyChecking=yes",
          "-o", "IdentitiesOnly=yes",
          "-o", "BatchMode=yes",
          "-i", dir + "/id_ed25519",
          "-l", user,
          hostAlias(id)};
}

// The output of `command` run in session `session` over ssh (as `cohort session ssh` logs in).
Result<std::string> runInSession(const Json& session, const std::string& command) {
  const std::string id = textOf(session, "id");
  std::vector<std::string> argv = sshArgv(session, selfPath());
  argv.push_back(command);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return fail(Code::kIo, "pipe");
  const pid_t pid = ::fork();
  if (pid < 0) return fail(Code::kIo, "cannot start ssh");
  if (pid == 0) {
    ::dup2(out[1], 1);
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execvp("ssh", raw.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (1 << 20)) break;
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail(Code::kFailedPrecondition, "'" + command + "' failed in session " + id +
                                               " (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  }
  return text;
}

Result<int> save(const Args& args, ApiClient& api) {
  const std::string name = args.positional[1];
  COHORT_ASSIGN(Json session, findSession(api, name));
  const std::string id = textOf(session, "id");
  COHORT_TRY(haveKeys(id));
  COHORT_ASSIGN(Json full, api.call("GET", "/v1/jobs/" + urlEncode(id)));
  const std::string base = full.contains("spec") ? textOf(full["spec"], "environment") : "";
  if (base.empty() || base == "system") {
    return fail(Code::kFailedPrecondition,
                "session " + name + " runs in the server's own Python (no --env), which has no "
                "virtual environment to build on: save from a session started with --env "
                "(pytorch, tensorflow, mindspore or one of yours)");
  }
  const std::string as = args.get("--as", textOf(session, "name"));
  COHORT_ASSIGN(std::string frozen,
                runInSession(session, "python3 -m pip list --path \"$PIP_TARGET\" --format=freeze"));
  std::vector<std::string> requirements;
  for (const std::string& line : split(frozen, '\n')) {
    const std::string l(trim(line));
    if (!l.empty() && l.find("==") != std::string::npos) requirements.push_back(l);
  }
  if (requirements.empty()) {
    return fail(Code::kFailedPrecondition,
                "nothing was pip-installed in session " + name + " (pip install PKG there first)");
  }
  Json body = {{"base", base}, {"requirements", requirements}, {"lock", join(requirements, "\n") + "\n"}};
  COHORT_TRY(api.call("PUT", "/v1/environments/" + urlEncode(as), body));
  std::fprintf(stderr, "cohort: saving %zu package(s) of session %s as environment %s on %s; the server builds it\n",
               requirements.size(), name.c_str(), as.c_str(), base.c_str());
  for (;;) {
    COHORT_ASSIGN(Json e, api.call("GET", "/v1/environments/" + urlEncode(as)));
    const std::string state = textOf(e, "state");
    if (state == "built") {
      std::printf("%s\n", as.c_str());
      std::fprintf(stderr, "cohort: environment %s is built: cohort session start --env %s, or environment: %s in a job\n", as.c_str(), as.c_str(), as.c_str());
      return 0;
    }
    if (state == "failed") {
      return fail(Code::kFailedPrecondition, "environment " + as + " failed to build: " + textOf(e, "reason"));
    }
    std::this_thread::sleep_for(500ms);
  }
}

// The session's JupyterLab: a URL that signs a browser in to it, once, within a minute
// (server/lab_proxy.h); with --browser, opened in one. Waits (up to 60 s) for the session to
// run and its lab to answer.
Result<int> openLab(const Args& args, ApiClient& api) {
  COHORT_ASSIGN(Json session, findSession(api, args.positional[1]));
  const std::string id = textOf(session, "id");
  if (textOf(session.value("session", Json::object()), "jupyter").empty()) {
    return fail(Code::kInvalidArgument,
                "session '" + textOf(session, "name") + "' (" + id +
                    ") has no JupyterLab: start one with cohort session start --jupyter --env jupyter");
  }
  const std::string base = "/v1/jobs/" + urlEncode(id) + "/session/jupyter/";
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    auto status = api.call("GET", base + "api/status");
    if (status) break;
    COHORT_ASSIGN(Json job, api.call("GET", "/v1/jobs/" + urlEncode(id)));
    const std::string state = textOf(job, "state");
    if (job::isFinalState(state)) {
      return fail(Code::kFailedPrecondition, "session '" + id + "' is " + state + ": " +
                                                 textOf(job, "reason") + " (cohort logs " + id +
                                                 " says more)");
    }
    if (std::chrono::steady_clock::now() > until) return tl::unexpected<Error>(status.error());
    std::this_thread::sleep_for(500ms);
  }
  COHORT_ASSIGN(Json ticket, api.call("POST", base + "ticket", Json::object()));
  const std::string url = api.server() + textOf(ticket, "url");
  std::printf("%s\n", url.c_str());
  std::fprintf(stderr, "cohort: open it within %s; it works once (cohort session open %s makes "
               "another); the lab is then at %s%slab\n",
               textOf(ticket, "expires_in").c_str(), args.positional[1].c_str(),
               api.server().c_str(), base.c_str());
  if (!args.has("--browser")) return 0;
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const char* argv[] = {"xdg-open", url.c_str(), nullptr};
    ::execvp("xdg-open", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int st = 0;
  while (pid > 0 && ::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return fail(Code::kFailedPrecondition,
                "could not open a browser (xdg-open): open the URL above in yours");
  }
  return 0;
}

Result<int> ssh(const Args& args, ApiClient& api) {
  const std::string name = args.positional[1];
  COHORT_ASSIGN(Json session, findSession(api, name));
  const std::string id = textOf(session, "id");
  if (args.has("--stdio")) return stdio(id, api);
  COHORT_TRY(haveKeys(id));
  const std::string self = selfPath();
  if (args.has("--config")) {
    std::printf("%s", configBlock(session, self).c_str());
    return 0;
  }
  std::vector<std::string> argv = sshArgv(session, self);
  for (size_t i = 2; i < args.positional.size(); ++i) argv.push_back(args.positional[i]);
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::fflush(stdout);
  ::execvp("ssh", raw.data());
  return fail(Code::kFailedPrecondition, "ssh: not found (install OpenSSH's client)");
}

}  // namespace

Result<int> cmdSession(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseArgs("session", argc, argv, withServerFlags(sessionFlags())));
  const std::string verb = args.positional.empty() ? "" : args.positional[0];
  const size_t want = verb == "start" || verb == "ls" ? 1 : 2;
  const bool any_more = verb == "ssh";  // a command to run in the session
  if (verb != "start" && verb != "ls" && verb != "stop" && verb != "ssh" && verb != "save" &&
      verb != "open") {
    return fail(Code::kInvalidArgument,
                "session: expected start, ls, stop NAME, ssh NAME, open NAME or save NAME (see "
                "cohort session --help)");
  }
  if (args.positional.size() < want || (!any_more && args.positional.size() > want)) {
    return fail(Code::kInvalidArgument,
                "session " + verb + ": " + (want == 1 ? "takes no name" : "give the session's name or id") +
                    " (see cohort session --help)");
  }
  COHORT_ASSIGN(ServerSettings settings, resolveServerSettings(args));
  ApiClient api(settings);
  if (verb == "start") return start(args, api);
  if (verb == "ls") return list(args, api);
  if (verb == "stop") return stop(args.positional[1], api);
  if (verb == "save") return save(args, api);
  if (verb == "open") return openLab(args, api);
  return ssh(args, api);
}

const std::vector<FlagSpec>& sessionFlags() {
  static const std::vector<FlagSpec> kFlags = {
      {"--env", "", "NAME", "start: the environment it runs in (cohort env ls; default: the server's PATH)"},
      {"--nodes", "", "N", "start: its nodes (default 1)"},
      {"--nproc-per-node", "", "M", "start: its ranks on each node (default 1)"},
      {"--cpus", "", "N", "start: CPUs of each rank (default 1)"},
      {"--memory", "", "SIZE", "start: memory of each rank (8Gi)"},
      {"--gpus", "", "N", "start: GPUs of each rank"},
      {"--idle-timeout", "", "DUR",
       "start: end it once nothing has been connected to it through the server for DUR "
       "(default 1h)"},
      {"--max-runtime", "", "DUR", "start: end it after DUR whatever happens"},
      {"--name", "", "NAME", "start: its name (default: session)"},
      {"--jupyter", "", "",
       "start: serve JupyterLab too, through the server (its environment needs jupyterlab: "
       "--env jupyter)"},
      {"--browser", "", "", "open: open the URL in a browser (xdg-open)"},
      {"--stdio", "", "", "ssh: carry the SSH connection on stdin and stdout (ssh's ProxyCommand)"},
      {"--config", "", "", "ssh: print a Host block for ~/.ssh/config (VS Code, PyCharm)"},
      {"--all", "", "", "ls: ended sessions too"},
      {"--as", "", "ENV", "save: the environment's name (default: the session's)"},
      {"--json", "", "", "start, ls: print the records as JSON"}};
  return kFlags;
}

std::string sessionHelp() {
  return R"(cohort session: interactive sessions on the server (docs/sessions.md)

Usage: cohort session start [--env NAME] [--nodes N --nproc-per-node M] [--cpus N] [--memory SIZE]
                            [--gpus N] [--idle-timeout DUR] [--max-runtime DUR] [--name NAME]
                            [--jupyter]
       cohort session ls [--all] [--json]
       cohort session open NAME [--browser]    a URL that opens its JupyterLab (--jupyter)
       cohort session stop NAME
       cohort session ssh NAME [-- COMMAND...]
       cohort session ssh NAME --config        a ~/.ssh/config Host block (VS Code, PyCharm)
       cohort session ssh --stdio NAME         for ssh's ProxyCommand
       cohort session save NAME [--as ENV]

A session is a job of your account that runs an SSH server instead of a command: scheduled,
limited, sandboxed and counted against your quotas like any of your jobs, in the environment
you name, with your account's identity. Its port is reachable only through the server, with
your token: `cohort session ssh NAME` logs in (or runs COMMAND), and the block that --config
prints lets VS Code Remote-SSH and PyCharm's SSH interpreter connect to `cohort-NAME`.
The keys are made here by `start` (in ~/.config/cohort/sessions/ID): log in from this machine.

With --jupyter, the session serves JupyterLab too, through the server alone: `cohort session
open NAME` prints a URL that signs your browser in to it (once, within a minute); the console's
session page has the same as a button. Its environment needs jupyterlab (the `jupyter` preset).

In a session, `pip install PKG` installs into the session's own package directory (on PYTHONPATH
before the environment's); `save` makes what was installed there, pinned to the versions
installed, a saved environment of your account on the session's environment: the server builds
it with its lock file, and jobs and sessions then name it (--env ENV).

A session ends when you stop it, once nothing has been connected to it through the server for
its idle timeout, or at its max runtime; what ran in it ends with it.

)" + flagsHelp(withServerFlags(sessionFlags())) +
         R"(
Examples:
  cohort session start --env pytorch --cpus 4 --memory 8Gi --idle-timeout 2h --name dev
  cohort session ssh dev -- python3 -c 'import torch; print(torch.__version__)'
  cohort session ssh dev --config >> ~/.ssh/config     # then: ssh cohort-dev
  cohort session start --jupyter --env jupyter --name lab && cohort session open lab --browser
  cohort session ssh dev -- pip install einops
  cohort session save dev --as dev-env                # then: cohort session start --env dev-env
  cohort session stop dev

Exit codes: 0 success; 2 a bad request (flag, name, a session that is not yours or has ended);
1 when the server cannot be reached or failed; ssh's own otherwise.
)";
}

}  // namespace cohort::cli
