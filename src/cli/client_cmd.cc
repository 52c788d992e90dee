#include "cli/client_cmd.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/code_upload.h"
#include "cli/command.h"
#include "cli/job_options.h"
#include "http/client.h"
#include "server/tls.h"
#include "spec/job_spec.h"
#include "storage/uri.h"
#include "store/job_store.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Json = nlohmann::json;
using Row = std::vector<std::string>;

// How long one long-poll of a job's events waits for the next (the server answers at once when
// one arrives); well under the client's 60 s read timeout.
constexpr const char* kLongPoll = "30s";
// While waiting for a job, how long a server that went away (a restart) is retried, and how
// long between two tries.
constexpr auto kWaitRetryFor = std::chrono::minutes(2);  // a server restart, ridden out
constexpr auto kRetryInterval = std::chrono::milliseconds(300);

// ---------------------------------------------------------------------------------------------
// Help

const char* kExitCodesHelp = R"(
Exit codes: 0 done; 2 bad usage, or a request the server refused (invalid, not found, not
allowed, in the wrong state); 1 the server could not be reached or failed.
)";

// ---------------------------------------------------------------------------------------------
// Flags

tl::unexpected<Error> usage(const std::string& command, const std::string& message) {
  return fail(Code::kInvalidArgument,
              command + ": " + message + " (see cohort " + command + " --help)");
}

// The command's flags (its one list, clientTable() below) plus those every client command takes.
Result<Args> parseClientArgs(const std::string& command, int argc, char** argv) {
  return parseArgs(command, argc, argv, withServerFlags(clientFlags(command)));
}

Result<ApiClient> connect(const Args& args) {
  COHORT_ASSIGN(ServerSettings settings, resolveServerSettings(args));
  return ApiClient(settings);
}

// Exactly `count` positional arguments named by `names` ("JOB").
Result<void> expectPositional(const std::string& command, const Args& args,
                              const std::vector<std::string>& names) {
  if (args.positional.size() < names.size()) {
    return usage(command, "expects " + join(names, " "));
  }
  if (args.positional.size() > names.size()) {
    return usage(command, "unexpected argument '" + args.positional[names.size()] + "'");
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Reading the server's JSON without exceptions

const Json& at(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

const Json& listAt(const Json& j, const char* key) {
  static const Json kEmpty = Json::array();
  const Json& v = at(j, key);
  return v.is_array() ? v : kEmpty;
}

std::string text(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get_ref<const std::string&>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_float()) {
    double d = v.get<double>();
    char buf[32];
    std::snprintf(buf, sizeof buf, d == std::floor(d) ? "%.0f" : "%g", d);
    return buf;
  }
  return v.dump();
}

std::string str(const Json& j, const char* key) { return text(at(j, key)); }

std::optional<int64_t> integer(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  return std::nullopt;
}

std::string jobPath(const std::string& id) { return "/v1/jobs/" + urlEncode(id); }

// ---------------------------------------------------------------------------------------------
// Formatting

int64_t nowMillis() { return nowUnixNanos() / 1000000; }

// "2026-11-30T10:44:43.740Z" -> milliseconds since the epoch.
std::optional<int64_t> parseIsoMillis(const std::string& iso) {
  int year, month, day, hour, minute;
  double seconds;
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%lf", &year, &month, &day, &hour, &minute,
                  &seconds) != 6) {
    return std::nullopt;
  }
  tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = day;
  t.tm_hour = hour;
  t.tm_min = minute;
  t.tm_sec = static_cast<int>(seconds);
  time_t secs = ::timegm(&t);
  return static_cast<int64_t>(secs) * 1000 +
         static_cast<int64_t>(std::lround((seconds - std::floor(seconds)) * 1000));
}

std::string localTime(int64_t millis, const char* format) {
  time_t secs = static_cast<time_t>(millis / 1000);
  tm local{};
  ::localtime_r(&secs, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &local);
  return buf;
}

// "5s ago", "2m ago", "3h ago", else the local date and time.
std::string relativeTime(const std::string& iso) {
  auto when = parseIsoMillis(iso);
  if (!when) return iso;
  int64_t ago = (nowMillis() - *when) / 1000;
  if (ago < 0) ago = 0;
  if (ago < 60) return std::to_string(ago) + "s ago";
  if (ago < 3600) return std::to_string(ago / 60) + "m ago";
  if (ago < 86400) return std::to_string(ago / 3600) + "h ago";
  return localTime(*when, "%Y-%m-%d %H:%M");
}

// "2026-11-30 10:44:43 (2m ago)".
std::string timeWithAge(const std::string& iso) {
  auto when = parseIsoMillis(iso);
  if (!when) return iso;
  return localTime(*when, "%Y-%m-%d %H:%M:%S") + " (" + relativeTime(iso) + ")";
}

// An event's time: "10:44:43.740" today, else with the date.
std::string eventTime(const std::string& iso) {
  auto when = parseIsoMillis(iso);
  if (!when) return iso;
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03d", static_cast<int>(*when % 1000));
  bool today = localTime(*when, "%Y-%m-%d") == localTime(nowMillis(), "%Y-%m-%d");
  return localTime(*when, today ? "%H:%M:%S" : "%Y-%m-%d %H:%M:%S") + millis;
}

// The time between two ISO times ("" when either is missing); `to` "" means now.
std::string durationBetween(const std::string& from, const std::string& to) {
  auto start = parseIsoMillis(from);
  if (!start) return "";
  std::optional<int64_t> end =
      to.empty() ? std::optional<int64_t>(nowMillis()) : parseIsoMillis(to);
  if (!end) return "";
  return formatDuration(Millis(std::max<int64_t>(*end - *start, 0)));
}

size_t displayWidth(const std::string& s) {
  size_t width = 0;
  for (unsigned char c : s) width += (c & 0xC0) != 0x80;
  return width;
}

// Rows as aligned columns, two spaces apart; the last column is not padded.
std::string renderTable(const std::vector<Row>& rows, const std::string& indent = "") {
  std::vector<size_t> widths;
  for (const Row& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], displayWidth(row[c]));
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - displayWidth(row[c]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

void printOut(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

void printJson(const Json& j) { printOut(j.dump(2) + "\n"); }

std::string signalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

// "exited with code 1" / "was killed by signal 9 (SIGKILL)".
std::string howItExited(const Json& exit_code, const Json& signal) {
  auto sig = integer(signal);
  if (sig && *sig > 0) {
    return "was killed by signal " + std::to_string(*sig) + " (" +
           signalName(static_cast<int>(*sig)) + ")";
  }
  auto code = integer(exit_code);
  return code ? "exited with code " + std::to_string(*code) : "ended";
}

// The root cause block: its first line starts with `first`, the others with `indent`.
std::string rootCauseText(const Json& rc, const std::string& first, const std::string& indent) {
  if (!rc.is_object()) return "";
  std::string where;
  if (auto rank = integer(at(rc, "rank"))) where += "rank " + std::to_string(*rank);
  if (auto node = integer(at(rc, "node"))) {
    where += (where.empty() ? "" : ", ") + std::string("node ") + std::to_string(*node);
  }
  const std::string who = str(rc, "name") + (where.empty() ? "" : " (" + where + ")");
  std::string how = who + " " + howItExited(at(rc, "exit_code"), at(rc, "signal"));
  // A launcher (torchrun, mpirun) that failed because a rank under it did: that rank first.
  const Json& launched = at(rc, "launched");
  if (launched.is_object() && !str(launched, "name").empty()) {
    how = str(launched, "name") + " " + str(launched, "what") + ", under " + who +
          ", which then " + howItExited(at(rc, "exit_code"), at(rc, "signal"));
  }
  std::string out = first + how + "\n";
  if (std::string hint = str(rc, "hint"); !hint.empty()) out += indent + "  hint: " + hint + "\n";
  const Json& tail = listAt(rc, "tail");
  if (!tail.empty()) {
    out += indent + "  last lines:\n";
    for (const Json& line : tail) out += indent + "    | " + text(line) + "\n";
  }
  return out;
}

// How a job stands, in one phrase: "queued: needs 4 CPUs, 2 free", "running".
std::string stateSummary(const Json& job) {
  std::string state = str(job, "state");
  const Json& waiting = at(job, "waiting");
  if (state == "queued" && waiting.is_object()) {
    std::string reason = str(waiting, "reason");
    if (!reason.empty()) return state + ": " + reason;
  }
  std::string reason = str(job, "reason");
  if (store::isFinalState(state) || state == "stopping") {
    std::string out = state;
    if (auto code = integer(at(job, "exit_code"))) {
      out += " (exit code " + std::to_string(*code) + ")";
    }
    if (!reason.empty() && state != "succeeded") out += ": " + reason;
    return out;
  }
  // "starting: Slurm job 42 is pending: waiting for free nodes (Resources)"
  return reason.empty() ? state : state + ": " + reason;
}

// The line `cohort submit --wait` and `cohort status --wait` end with.
std::string finalLine(const Json& job) {
  std::string line = "cohort: job " + str(job, "id") + " " + str(job, "state");
  std::string reason = str(job, "reason");
  if (str(job, "state") != "succeeded" && !reason.empty()) line += ": " + reason;
  std::vector<std::string> notes;
  if (auto code = integer(at(job, "exit_code"))) {
    notes.push_back("exit code " + std::to_string(*code));
  }
  if (std::string ran = durationBetween(str(job, "started"), str(job, "ended")); !ran.empty()) {
    notes.push_back("ran " + ran);
  }
  if (!notes.empty()) line += " (" + join(notes, ", ") + ")";
  return line + "\n";
}

int jobExitCode(const Json& job) {
  if (auto code = integer(at(job, "exit_code"))) return static_cast<int>(*code);
  return str(job, "state") == "succeeded" ? 0 : kExitFailed;
}

// Follows the job's events (long-poll: the server answers when the next one is stored) until
// the job is final; prints state changes on stderr unless `quiet`. Returns the final record.
Result<Json> waitForJob(ApiClient& api, Json job, bool quiet) {
  const std::string id = str(job, "id");
  std::string shown = stateSummary(job);
  auto failing_since = std::chrono::steady_clock::time_point::max();
  int64_t after = 0;  // the last event seen
  while (!store::isFinalState(str(job, "state"))) {
    auto events = api.call("GET", jobPath(id) + "/events", nullptr,
                           {{"after", std::to_string(after)}, {"wait", kLongPoll}});
    auto next = events ? api.call("GET", jobPath(id)) : Result<Json>(tl::unexpected(events.error()));
    if (events) {
      if (auto seq = integer(at(*events, "last_seq"))) after = std::max(after, *seq);
    }
    if (!next) {
      // A server restart should not end a long wait; anything else does.
      auto now = std::chrono::steady_clock::now();
      if (next.error().code != Code::kUnavailable) return tl::unexpected<Error>(next.error());
      if (failing_since == std::chrono::steady_clock::time_point::max()) failing_since = now;
      if (now - failing_since > kWaitRetryFor) return tl::unexpected<Error>(next.error());
      std::this_thread::sleep_for(kRetryInterval);  // the server is away: try again soon
      continue;
    }
    failing_since = std::chrono::steady_clock::time_point::max();
    job = std::move(*next);
    std::string summary = stateSummary(job);
    if (!quiet && summary != shown && !store::isFinalState(str(job, "state"))) {
      std::fprintf(stderr, "cohort: job %s %s\n", id.c_str(), summary.c_str());
    }
    shown = summary;
  }
  return job;
}

// Prints the end of a waited-for job on stderr: always for a failure, else unless `quiet`.
void reportEnd(const Json& job, bool quiet) {
  bool ok = str(job, "state") == "succeeded";
  if (quiet && ok) return;
  std::fputs(finalLine(job).c_str(), stderr);
  if (!ok) {
    std::fputs(rootCauseText(at(job, "root_cause"), "cohort: root cause: ", "  ").c_str(), stderr);
  }
}

// ---------------------------------------------------------------------------------------------
// Commands

Result<int> cmdLogin(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("login", argc, argv));
  std::string url = args.get("--server");
  if (url.empty()) {
    if (args.positional.empty()) return usage("login", "expects the server's URL");
    url = args.positional[0];
    args.positional.erase(args.positional.begin());
  }
  COHORT_TRY(expectPositional("login", args, {}));
  COHORT_ASSIGN(std::string server, normalizeServerUrl(url));
  std::string token = args.get("--token");
  if (token.empty()) {
    const char* env = std::getenv("COHORT_TOKEN");
    token = env ? env : "";
  }
  if (token.empty()) {
    bool terminal = ::isatty(0);
    termios saved{};
    if (terminal) {
      std::fprintf(stderr, "Token for %s: ", server.c_str());
      std::fflush(stderr);
      if (::tcgetattr(0, &saved) == 0) {
        termios quiet = saved;
        quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
        ::tcsetattr(0, TCSAFLUSH, &quiet);
      } else {
        terminal = false;
      }
    }
    std::getline(std::cin, token);
    if (terminal) {
      ::tcsetattr(0, TCSAFLUSH, &saved);
      std::fputc('\n', stderr);
    }
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
    while (!token.empty() && token.front() == ' ') token.erase(0, 1);
  }
  if (token.empty()) {
    return usage("login", "no token: pass --token TOKEN, set COHORT_TOKEN or type it on stdin");
  }
  const std::string path = clientConfigPath();
  // Whom to trust for https://: a certificate authority's certificates (--ca), or the very
  // certificate the server presents, when its fingerprint is the one the server printed.
  std::string ca = args.get("--ca");
  if (!ca.empty()) {
    char resolved[PATH_MAX];
    if (!::realpath(ca.c_str(), resolved)) {
      return fail(Code::kInvalidArgument, "login: --ca '" + ca + "': " + std::strerror(errno));
    }
    ca = resolved;
  }
  if (args.has("--fingerprint")) {
    if (!startsWith(server, "https://")) {
      return usage("login", "--fingerprint pins an https:// server's certificate");
    }
    const std::string want = server::normalizeFingerprint(args.get("--fingerprint"));
    if (want.empty()) {
      return usage("login", "--fingerprint: expected the SHA-256 fingerprint the server "
                            "printed (64 hex digits, in pairs like AB:CD:...)");
    }
    COHORT_ASSIGN(std::string pem, http::serverCertificate(server));
    COHORT_ASSIGN(std::string got, server::certificateFingerprint(pem));
    if (got != want) {
      return fail(Code::kPermissionDenied,
                  "login: the server at " + server + " presents a certificate whose SHA-256 "
                  "fingerprint is " + got + ", not " + want +
                  ": this may not be your server (someone between you and it?); nothing was "
                  "sent or saved");
    }
    // Kept beside the config file, and trusted for this server from now on.
    std::string name = server.substr(server.find("://") + 3);
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
    }
    const std::string config_dir = path.substr(0, path.rfind('/'));
    ca = config_dir + "/servers/" + name + ".pem";
    COHORT_TRY(makeDirs(config_dir + "/servers"));
    COHORT_TRY(writeFileAtomic(ca, pem, true, 0644));
  }
  ApiClient api(ServerSettings{server, token, ca});
  COHORT_ASSIGN(Json me, api.call("GET", "/v1/whoami"));
  COHORT_TRY(writeClientConfig(path, ClientConfig{server, token, ca}));
  std::fprintf(stderr, "cohort: logged in to %s as %s%s (saved in %s)\n", server.c_str(),
               str(me, "account").c_str(), at(me, "admin") == true ? " (admin)" : "", path.c_str());
  return 0;
}

Result<int> cmdWhoami(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("whoami", argc, argv));
  COHORT_TRY(expectPositional("whoami", args, {}));
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json me, api.call("GET", "/v1/whoami"));
  if (args.has("--json")) {
    printJson(me);
  } else {
    printOut(str(me, "account") + (at(me, "admin") == true ? " (admin)" : "") + "\n");
  }
  return 0;
}

// Submits `job` (the job file as JSON) and says so: the new job's id on stdout, its state on
// stderr; with `wait`, follows it to its end and returns its exit code, as cohort run does.
Result<int> submitJob(ApiClient& api, const Json& job, int priority, bool wait, bool quiet,
                      bool json, const std::string& code = "") {
  Json body{{"job", job}, {"priority", priority}};
  if (!code.empty()) body["code"] = code;
  COHORT_ASSIGN(Json record, api.call("POST", "/v1/jobs", body));
  const std::string id = str(record, "id");
  if (!json) {
    printOut(id + "\n");
    std::fflush(stdout);
  }
  if (!quiet) {
    // The answer comes before the scheduler's next pass (a few ms later): wait briefly for
    // the job's first event (it started), then ask once more, so that the line says whether
    // the job started or why it waits.
    if (str(record, "state") == "queued") {
      (void)api.call("GET", jobPath(id) + "/events", nullptr, {{"after", "0"}, {"wait", "150ms"}});
      if (auto again = api.call("GET", jobPath(id)); again) record = *again;
    }
    std::fprintf(stderr, "cohort: submitted %s (%s)\n", id.c_str(), stateSummary(record).c_str());
  }
  if (!wait) {
    if (json) printJson(record);
    return 0;
  }
  COHORT_ASSIGN(Json final_record, waitForJob(api, record, quiet));
  if (json) printJson(final_record);
  reportEnd(final_record, quiet);
  return jobExitCode(final_record);
}

Result<int> cmdSubmit(int argc, char** argv) {
  // submit's own flags (the first of a name wins: its --json and -q say what they print for a
  // submitted job), the job's, and the server's.
  std::vector<FlagSpec> specs = clientFlags("submit");
  for (const FlagSpec& f : jobFlagSpecs()) specs.push_back(f);
  COHORT_ASSIGN(Args client, parseArgs("submit", argc, argv, withServerFlags(std::move(specs)),
                                       ParseMode::kCommandAfterFlags));
  for (const Args::Given& given : client.given) {
    if (std::string why = notSubmitted(given.name); !why.empty()) {
      return usage("submit", given.spelled + " does not apply to a submitted job: " + why);
    }
  }
  int priority = 0;
  if (client.has("--priority")) {
    auto p = parseInt(client.get("--priority"));
    if (!p) {
      return usage("submit",
                   "--priority: expected an integer, got '" + client.get("--priority") + "'");
    }
    priority = *p;
  }
  auto options = jobOptionsFrom(client);
  if (!options) return withContext(options.error(), "submit");
  COHORT_ASSIGN(spec::JobSpec spec, buildSpec(*options));

  if (client.has("--upload") && client.has("--no-upload")) {
    return usage("submit", "--upload and --no-upload contradict each other: give one");
  }
  CodeUploadOptions upload_options;
  upload_options.quiet = options->quiet;
  if (client.has("--max-upload")) {
    auto bytes = parseBytes(client.get("--max-upload"));
    if (!bytes || *bytes < 1) {
      return usage("submit", "--max-upload: expected a size such as 512Mi or 2Gi, got '" +
                                 client.get("--max-upload") + "'");
    }
    upload_options.max_bytes = *bytes;
  }

  makePathsAbsolute(spec);  // the server runs the job elsewhere
  Json job = Json::parse(spec::toJobFile(spec), nullptr, false);
  if (job.is_discarded()) return fail(Code::kInternal, "submit: the job file is not JSON");
  COHORT_ASSIGN(ApiClient api, connect(client));
  const bool local = isLocalServer(api.server());
  const bool upload = client.has("--upload") || (!local && !client.has("--no-upload"));
  std::string code;
  if (upload) {
    if (!local) {
      // The server cannot read this machine's files: say so before anything is sent.
      for (size_t i = 0; i < spec.inputs.size(); ++i) {
        auto where = storage::parseLocation(spec.inputs[i].source);
        if (where && where->kind == storage::Location::Kind::kLocal) {
          return fail(Code::kInvalidArgument,
                      "submit: inputs[" + std::to_string(i) + "].source: '" + where->path +
                          "' is a path on this machine, which the server at " + api.server() +
                          " cannot read: copy it to the server's store (cohort cp " + where->path +
                          " server://BUCKET/PATH) and name store://BUCKET/PATH");
        }
      }
    }
    auto id = uploadWorkdir(api, spec.workdir, upload_options);
    if (!id) return withContext(id.error(), "submit");
    code = *id;
  }
  return submitJob(api, job, priority, client.has("--wait"), options->quiet, options->json, code);
}

// `cohort rerun JOB` for a job of the server: the job file it ran (the record's `spec`, every
// field written out) submitted again, as a new job.
Result<int> cmdRerunOnServer(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("rerun", argc, argv));
  COHORT_TRY(expectPositional("rerun", args, {"JOB"}));
  const std::string id = args.positional[0];
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json record, api.call("GET", jobPath(id)));
  Json job = at(record, "spec");
  if (!job.is_object()) {
    return fail(Code::kNotFound, "rerun: the server has no job file recorded for job " + id);
  }
  if (args.has("--name")) job["name"] = args.get("--name");
  int priority = static_cast<int>(integer(at(record, "priority")).value_or(0));
  if (args.has("--priority")) {
    auto p = parseInt(args.get("--priority"));
    if (!p) {
      return usage("rerun",
                   "--priority: expected an integer, got '" + args.get("--priority") + "'");
    }
    priority = *p;
  }
  return submitJob(api, job, priority, args.has("--wait"), args.has("--quiet"), args.has("--json"));
}

// The INFO column of `cohort ps`.
std::string psInfo(const Json& job) {
  std::string state = str(job, "state");
  if (state == "queued") {
    std::string reason = str(at(job, "waiting"), "reason");
    return reason.empty() ? str(at(job, "waiting"), "kind") : reason;
  }
  if (store::isFinalState(state)) {
    std::string out;
    if (auto code = integer(at(job, "exit_code"))) out = "exit " + std::to_string(*code);
    std::string ran = durationBetween(str(job, "started"), str(job, "ended"));
    if (!ran.empty()) out += (out.empty() ? "ran " : ", ran ") + ran;
    return out;
  }
  std::string started = str(job, "started");
  std::string since = durationBetween(started.empty() ? str(job, "submitted") : started, "");
  std::string out = since.empty() ? "" : "for " + since;
  // Why a starting job waits: "Slurm job 42 is pending: waiting for free nodes (Resources)".
  if (std::string reason = str(job, "reason"); !reason.empty()) {
    out += (out.empty() ? "" : ": ") + reason;
  }
  return out;
}

Result<int> cmdPs(int argc, char** argv) {
  COHORT_ASSIGN(
      Args args,
      parseClientArgs("ps", argc, argv));
  COHORT_TRY(expectPositional("ps", args, {}));
  QueryParams query;
  if (args.has("--state")) query.emplace_back("state", join(args.all("--state"), ","));
  if (args.has("--limit")) {
    auto limit = parseInt(args.get("--limit"));
    if (!limit || *limit < 1) {
      return usage("ps", "--limit: expected a positive integer, got '" + args.get("--limit") + "'");
    }
    query.emplace_back("limit", std::to_string(*limit));
  }
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json answer, api.call("GET", "/v1/jobs", nullptr, query));
  const Json& jobs = listAt(answer, "jobs");
  if (args.has("--json")) {
    printJson(jobs);
    return 0;
  }
  if (jobs.empty()) {
    std::fputs("cohort: no jobs\n", stderr);
    return 0;
  }
  COHORT_ASSIGN(Json me, api.call("GET", "/v1/whoami"));
  bool others = false;
  for (const Json& job : jobs) others |= str(job, "account") != str(me, "account");
  std::vector<Row> rows;
  rows.push_back(others ? Row{"ID", "NAME", "ACCOUNT", "STATE", "RANKS", "SUBMITTED", "INFO"}
                        : Row{"ID", "NAME", "STATE", "RANKS", "SUBMITTED", "INFO"});
  for (const Json& job : jobs) {
    Row row = {str(job, "id"), str(job, "name")};
    if (others) row.push_back(str(job, "account"));
    row.insert(row.end(), {str(job, "state"), str(job, "ranks"),
                           relativeTime(str(job, "submitted")), psInfo(job)});
    rows.push_back(std::move(row));
  }
  printOut(renderTable(rows));
  return 0;
}

std::string resourcesText(const Json& r) {
  std::vector<std::string> parts;
  std::string cpus = str(r, "cpus");
  if (!cpus.empty()) parts.push_back(cpus + (cpus == "1" ? " CPU" : " CPUs"));
  std::string gpus = str(r, "gpus");
  if (!gpus.empty()) parts.push_back(gpus + (gpus == "1" ? " GPU" : " GPUs"));
  auto memory = integer(at(r, "memory"));
  if (memory) {
    parts.push_back(*memory > 0 ? formatSize(static_cast<double>(*memory)) + " memory"
                                : "memory not limited");
  }
  return join(parts, ", ");
}

// What an event says, the important fields first: "worker/3 on node 1 exited with code 1",
// "running", "node 0: 3 files, 1.2 MiB in 0.4s"; any other field as key=value.
std::string eventDetails(const Json& event) {
  if (!event.is_object()) return "";
  const std::string kind = str(event, "event");
  std::set<std::string> shown = {"time", "event"};
  std::vector<std::string> parts;
  if (kind == "state") {
    std::string line = str(event, "state");
    if (auto code = integer(at(event, "exit_code"))) {
      line += " (exit code " + std::to_string(*code) + ")";
    }
    if (std::string reason = str(event, "reason"); !reason.empty()) line += ": " + reason;
    parts.push_back(line);
    shown.insert({"state", "exit_code", "reason"});
  } else if (kind == "rank_exit") {
    const Json& code = at(event, "code").is_null() ? at(event, "exit_code") : at(event, "code");
    std::string line = str(event, "name");
    if (std::string node = str(event, "node"); !node.empty()) line += " on node " + node;
    if (auto limit = integer(at(event, "memory_limit")); limit && *limit > 0) {
      line += " was killed by the kernel for using more than its memory limit of " +
              formatSize(static_cast<double>(*limit)) + " (memory.max)";
    } else {
      line += " " + howItExited(code, at(event, "signal"));
    }
    if (at(event, "by_cohort") == true) line += " (stopped by cohort)";
    parts.push_back(line);
    shown.insert({"name", "node", "code", "exit_code", "signal", "by_cohort", "rank", "role",
                  "role_rank", "exit_time", "exit_t", "memory_limit"});
  } else if (kind == "debug") {
    const std::string who = str(event, "name") + " on node " + str(event, "node");
    const std::string state = str(event, "state");
    std::string line = state == "waiting"
                           ? who + " is waiting for a debugger at " + str(event, "address")
                       : state == "attached" ? "a debugger is attached to " + who
                                             : who + " goes on without a debugger";
    if (state == "waiting" && !str(event, "where").empty())
      line += " (" + str(event, "where") + ")";
    parts.push_back(line);
    shown.insert({"name", "node", "state", "address", "where", "rank", "reason"});
  } else if (kind == "limits") {
    parts.push_back("warning: " + str(event, "warning"));
    shown.insert({"node", "warning"});
  } else if (kind == "staged" && at(event, "files").is_number()) {
    std::string line = "node " + str(event, "node") + ": " + str(event, "files") + " file(s), " +
                       formatSize(static_cast<double>(integer(at(event, "bytes")).value_or(0)));
    if (const Json& secs = at(event, "seconds"); secs.is_number()) {
      line += " in " + formatDuration(Millis(static_cast<int64_t>(secs.get<double>() * 1000)));
    }
    parts.push_back(line);
    shown.insert({"node", "files", "bytes", "seconds"});
  }
  for (auto it = event.begin(); it != event.end(); ++it) {
    if (shown.count(it.key()) || it.value().is_null()) continue;
    if (it.key() == "attempt" && it.value() == 0) continue;
    std::string value = text(it.value());
    if (value.empty()) continue;
    if (value.find(' ') != std::string::npos && it.value().is_string()) value = "'" + value + "'";
    parts.push_back(it.key() + "=" + value);
  }
  return join(parts, " ");
}

std::string statusText(const Json& job, const Json& ranks, const Json& events) {
  std::vector<Row> fields = {
      {"Job:", str(job, "id")},
      {"Name:", str(job, "name")},
      {"Account:", str(job, "account")},
      {"State:", str(job, "state") == "queued" ? std::string("queued") : stateSummary(job)}};
  if (std::string reason = str(job, "reason");
      !reason.empty() && str(job, "state") == "succeeded") {
    fields.push_back({"Reason:", reason});
  }
  const Json& waiting = at(job, "waiting");
  if (waiting.is_object()) {
    fields.push_back({"Waiting:", str(waiting, "kind") + ": " + str(waiting, "reason")});
  }
  fields.push_back({"Framework:", str(job, "framework")});
  fields.push_back({"Ranks:", str(job, "ranks")});
  fields.push_back({"Resources:", resourcesText(at(job, "resources"))});
  fields.push_back({"Priority:", str(job, "priority")});
  if (auto attempts = integer(at(job, "attempts")); attempts && *attempts > 1) {
    fields.push_back({"Attempts:", std::to_string(*attempts)});
  }
  fields.push_back({"Submitted:", timeWithAge(str(job, "submitted"))});
  if (std::string started = str(job, "started"); !started.empty()) {
    fields.push_back({"Started:", timeWithAge(started)});
  }
  if (std::string ended = str(job, "ended"); !ended.empty()) {
    std::string ran = durationBetween(str(job, "started"), ended);
    fields.push_back({"Ended:", timeWithAge(ended) + (ran.empty() ? "" : ", ran " + ran)});
  } else if (std::string started = str(job, "started"); !started.empty()) {
    fields.push_back({"Running:", durationBetween(started, "")});
  }
  std::string out = renderTable(fields);

  const Json& rank_list = listAt(ranks, "ranks");
  if (!rank_list.empty()) {
    // What each running rank is doing, when its node agent has said.
    bool progress = false;
    for (const Json& r : rank_list) progress |= at(r, "cpu_seconds").is_number();
    Row header = {"RANK", "NAME", "NODE", "STATE", "EXIT"};
    if (progress) header.insert(header.end(), {"LAST OUTPUT", "CPU", "MEMORY"});
    std::vector<Row> rows = {header};
    for (const Json& r : rank_list) {
      std::string exit;
      if (!at(r, "exit_code").is_null() || integer(at(r, "signal")).value_or(0) > 0) {
        auto sig = integer(at(r, "signal"));
        exit = sig && *sig > 0 ? signalName(static_cast<int>(*sig)) : str(r, "exit_code");
        if (at(r, "by_cohort") == true) exit += " (stopped by cohort)";
      }
      Row row = {str(r, "rank"), str(r, "name"), str(r, "node"), str(r, "state"), exit};
      if (progress) {
        const Json& cpu = at(r, "cpu_seconds");
        const Json& rss = at(r, "rss_bytes");
        char seconds[32] = "";
        if (cpu.is_number()) std::snprintf(seconds, sizeof seconds, "%.1fs", cpu.get<double>());
        row.insert(row.end(),
                   {at(r, "last_output").is_string() ? relativeTime(str(r, "last_output")) : "",
                    seconds,
                    rss.is_number() ? formatSize(rss.get<double>()) : ""});
      }
      rows.push_back(std::move(row));
    }
    out += "\nRanks:\n" + renderTable(rows, "  ");
  }
  const Json& event_list = listAt(events, "events");
  if (!event_list.empty()) {
    std::vector<Row> rows;
    for (const Json& e : event_list) {
      rows.push_back({eventTime(str(e, "time")), str(e, "event"), eventDetails(e)});
    }
    out += "\nEvents:\n" + renderTable(rows, "  ");
  }
  std::string root_cause = rootCauseText(at(job, "root_cause"), "Root cause: ", "");
  if (!root_cause.empty()) out += "\n" + root_cause;
  return out;
}

Result<int> cmdStatus(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("status", argc, argv));
  COHORT_TRY(expectPositional("status", args, {"JOB"}));
  const std::string id = args.positional[0];
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json job, api.call("GET", jobPath(id)));
  if (args.has("--wait")) {
    COHORT_ASSIGN(job, waitForJob(api, job, true));
  }
  COHORT_ASSIGN(Json ranks, api.call("GET", jobPath(id) + "/ranks"));
  COHORT_ASSIGN(Json events, api.call("GET", jobPath(id) + "/events"));
  if (args.has("--json")) {
    printJson(Json{
        {"job", job}, {"ranks", listAt(ranks, "ranks")}, {"events", listAt(events, "events")}});
  } else {
    printOut(statusText(job, ranks, events));
  }
  return args.has("--wait") ? jobExitCode(job) : 0;
}

Result<int> cmdLogs(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("logs", argc, argv));
  COHORT_TRY(expectPositional("logs", args, {"JOB"}));
  QueryParams query;
  if (args.has("--rank")) {
    auto rank = parseInt(args.get("--rank"));
    if (!rank || *rank < 0) {
      return usage("logs", "--rank: expected a rank number, got '" + args.get("--rank") + "'");
    }
    query.emplace_back("rank", std::to_string(*rank));
  }
  const bool follow = args.has("--follow");
  if (follow) query.emplace_back("follow", "1");
  COHORT_ASSIGN(ApiClient api, connect(args));
  int write_errno = 0;  // saved at once: the HTTP client makes more calls before we report
  int64_t offset = 0;   // the log's bytes printed so far
  auto failing_since = std::chrono::steady_clock::time_point::max();
  bool said = false;
  // A followed log ends when the server says it is complete (the stream's end); one that breaks
  // (a server restart, a cut connection) is followed again from the byte it stopped at.
  for (;;) {
    QueryParams at = query;
    if (offset > 0) at.emplace_back("offset", std::to_string(offset));
    auto status = api.stream(
        jobPath(args.positional[0]) + "/logs", at,
        [&](const char* data, size_t size) {
          if (std::fwrite(data, 1, size, stdout) != size || std::fflush(stdout) != 0) {
            write_errno = errno ? errno : EIO;
            return false;
          }
          offset += static_cast<int64_t>(size);
          failing_since = std::chrono::steady_clock::time_point::max();
          return true;
        },
        follow);
    if (write_errno) return failErrno("logs: write to stdout", write_errno);
    if (status) return 0;
    const auto now = std::chrono::steady_clock::now();
    if (!follow || status.error().code != Code::kUnavailable) {
      return tl::unexpected<Error>(status.error());
    }
    if (failing_since == std::chrono::steady_clock::time_point::max()) failing_since = now;
    if (now - failing_since > kWaitRetryFor) return tl::unexpected<Error>(status.error());
    if (!said) {
      std::fprintf(stderr, "cohort: %s; following again from byte %lld once it is back\n",
                   status.error().message.c_str(), static_cast<long long>(offset));
      said = true;
    }
    std::this_thread::sleep_for(kRetryInterval);
  }
}

Result<int> cmdStop(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("stop", argc, argv));
  COHORT_TRY(expectPositional("stop", args, {"JOB"}));
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json job, api.call("POST", jobPath(args.positional[0]) + "/stop"));
  std::string state = str(job, "state");
  std::string id = str(job, "id").empty() ? args.positional[0] : str(job, "id");
  if (state == "stopping") {
    std::fprintf(stderr,
                 "cohort: stopping job %s (its stop signal, then SIGKILL after its grace "
                 "period)\n",
                 id.c_str());
  } else if (state == "stopped") {
    std::fprintf(stderr, "cohort: job %s stopped\n", id.c_str());
  } else {
    std::fprintf(stderr, "cohort: job %s is %s\n", id.c_str(), stateSummary(job).c_str());
  }
  return 0;
}

Result<int> cmdDelete(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("delete", argc, argv));
  COHORT_TRY(expectPositional("delete", args, {"JOB"}));
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_TRY(api.call("DELETE", jobPath(args.positional[0])));
  std::fprintf(stderr, "cohort: deleted job %s (its record, logs and outputs)\n",
               args.positional[0].c_str());
  return 0;
}

// A path from the server that is safe to write under the download directory: relative, no
// empty, "." or ".." part. Errors: kInvalidArgument naming it.
Result<void> checkOutputPath(const std::string& path, const std::string& dest) {
  bool bad = path.empty() || path[0] == '/' || path.find('\0') != std::string::npos;
  for (const std::string& part : split(path, '/')) {
    bad |= part.empty() || part == "." || part == "..";
  }
  if (bad) {
    return fail(Code::kInvalidArgument,
                "output path '" + path + "' would be written outside '" + dest + "'; refused");
  }
  return {};
}

// Downloads one output file to `target` (under `root`, which is real) through a temporary
// file and rename. Returns the bytes written.
Result<int64_t> downloadOutput(ApiClient& api, const std::string& id, const std::string& rel,
                               const std::string& root) {
  const std::string target = root + "/" + rel;
  // Directories one by one, none of them a symbolic link: a link already under DEST must not
  // carry the file elsewhere.
  std::string parent = root;
  std::vector<std::string> parts = split(rel, '/');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    parent += "/" + parts[i];
    if (::mkdir(parent.c_str(), 0755) < 0 && errno != EEXIST) {
      return failErrno("create '" + parent + "'");
    }
    struct stat st {};
    if (::lstat(parent.c_str(), &st) < 0) return failErrno("create '" + parent + "'");
    if (!S_ISDIR(st.st_mode)) {
      return fail(Code::kInvalidArgument, "output path '" + rel + "': '" + parent +
                                              "' is not a directory (a link?); refused");
    }
  }
  std::string tmp = parent + "/.cohort-download-XXXXXX";
  UniqueFd fd(::mkstemp(tmp.data()));
  if (!fd.valid()) return failErrno("create a temporary file in '" + parent + "'");
  ::fchmod(fd.get(), 0644);
  std::string segments;
  for (const std::string& part : parts) segments += "/" + urlEncode(part);
  int64_t written = 0;
  Result<void> write_result;
  auto status = api.stream(
      jobPath(id) + "/outputs" + segments, {},
      [&](const char* data, size_t size) {
        write_result = writeAll(fd.get(), std::string_view(data, size));
        written += static_cast<int64_t>(size);
        return static_cast<bool>(write_result);
      },
      false);
  Result<void> done;
  if (!status) {
    done = tl::unexpected<Error>(status.error());
  } else if (!write_result) {
    done = withContext(write_result.error(), "write '" + tmp + "'");
  } else if (::close(fd.release()) < 0) {
    done = failErrno("write '" + tmp + "'");
  } else if (::rename(tmp.c_str(), target.c_str()) < 0) {
    done = failErrno("rename to '" + target + "'");
  }
  if (!done) {
    ::unlink(tmp.c_str());
    return withContext(done.error(), "download '" + rel + "'");
  }
  return written;
}

Result<int> cmdOutputs(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("outputs", argc, argv));
  if (args.positional.empty()) return usage("outputs", "expects JOB");
  const bool download = args.positional.size() > 1;
  if (download) {
    if (args.positional[1] != "download") {
      return usage("outputs", "unexpected argument '" + args.positional[1] +
                                  "' (did you mean: outputs JOB download DEST?)");
    }
    COHORT_TRY(expectPositional("outputs", args, {"JOB", "download", "DEST"}));
  }
  const std::string id = args.positional[0];
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json answer, api.call("GET", jobPath(id) + "/outputs"));
  const Json& files = listAt(answer, "files");
  if (!download) {
    if (args.has("--json")) {
      printJson(files);
    } else if (files.empty()) {
      std::fprintf(stderr, "cohort: job %s has no output files\n", id.c_str());
    } else {
      std::vector<Row> rows = {{"SIZE", "PATH"}};
      int64_t total = 0;
      for (const Json& f : files) {
        int64_t size = integer(at(f, "size")).value_or(0);
        total += size;
        rows.push_back({formatSize(static_cast<double>(size)), str(f, "path")});
      }
      printOut(renderTable(rows));
      std::fprintf(stderr, "cohort: %zu file(s), %s\n", files.size(),
                   formatSize(static_cast<double>(total)).c_str());
    }
    return 0;
  }
  const std::string dest = args.positional[2];
  const bool quiet = args.has("--quiet");
  for (const Json& f : files) COHORT_TRY(checkOutputPath(str(f, "path"), dest));
  COHORT_TRY(makeDirs(absoluteIn(dest, std::filesystem::current_path().string())));
  char real[PATH_MAX];
  if (!::realpath(dest.c_str(), real)) return failErrno("resolve '" + dest + "'");
  const std::string root = real;
  int64_t total = 0;
  for (const Json& f : files) {
    const std::string rel = str(f, "path");
    COHORT_ASSIGN(int64_t size, downloadOutput(api, id, rel, root));
    total += size;
    if (!quiet) {
      std::fprintf(stderr, "cohort: %s (%s)\n", rel.c_str(),
                   formatSize(static_cast<double>(size)).c_str());
    }
  }
  if (!quiet) {
    std::fprintf(stderr, "cohort: downloaded %zu file(s), %s, to %s\n", files.size(),
                 formatSize(static_cast<double>(total)).c_str(), dest.c_str());
  }
  return 0;
}

Result<int> cmdShare(int argc, char** argv) {
  COHORT_ASSIGN(
      Args args,
      parseClientArgs("share", argc, argv));
  COHORT_TRY(expectPositional("share", args, {"store://BUCKET/PREFIX"}));
  const std::string prefix = args.positional[0];
  if (!startsWith(prefix, "store://") || prefix.size() <= std::strlen("store://")) {
    return usage("share", "'" + prefix + "' is not a store URI (store://bucket/prefix)");
  }
  if (args.get("--with").empty()) return usage("share", "--with ACCOUNT is required");
  std::string access = args.get("--access", "read");
  if (access != "read" && access != "write") {
    return usage("share", "--access: expected read or write, got '" + access + "'");
  }
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(
      Json share,
      api.call("POST", "/v1/shares",
               Json{{"prefix", prefix}, {"with", args.get("--with")}, {"access", access}}));
  if (args.has("--json")) {
    printJson(share);
  } else {
    printOut(str(share, "id") + "\n");
  }
  std::fprintf(stderr, "cohort: shared %s with %s (%s); share %s\n", str(share, "prefix").c_str(),
               str(share, "with").c_str(), str(share, "access").c_str(), str(share, "id").c_str());
  return 0;
}

Result<int> cmdShares(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("shares", argc, argv));
  COHORT_TRY(expectPositional("shares", args, {}));
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json answer, api.call("GET", "/v1/shares"));
  const Json& shares = listAt(answer, "shares");
  if (args.has("--json")) {
    printJson(shares);
    return 0;
  }
  if (shares.empty()) {
    std::fputs("cohort: no shares\n", stderr);
    return 0;
  }
  std::vector<Row> rows = {{"ID", "PREFIX", "OWNER", "WITH", "ACCESS", "CREATED"}};
  for (const Json& s : shares) {
    rows.push_back({str(s, "id"), str(s, "prefix"), str(s, "owner"), str(s, "with"),
                    str(s, "access"), relativeTime(str(s, "created"))});
  }
  printOut(renderTable(rows));
  return 0;
}

Result<int> cmdUnshare(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("unshare", argc, argv));
  COHORT_TRY(expectPositional("unshare", args, {"ID"}));
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_TRY(api.call("DELETE", "/v1/shares/" + urlEncode(args.positional[0])));
  std::fprintf(stderr, "cohort: revoked share %s\n", args.positional[0].c_str());
  return 0;
}

// The flags of `cohort accounts quota`, with the field each sets.
constexpr std::pair<const char*, const char*> kQuotaFlags[] = {
    {"--bytes", "bytes"},       {"--inodes", "inodes"},       {"--queued-jobs", "queued_jobs"},
    {"--uploads", "uploads"},   {"--followers", "followers"}, {"--max-priority", "max_priority"}};

// cohort accounts quota [NAME] [flags]: shows an account's quotas, or sets them (an admin).
Result<int> accountQuota(const Args& args) {
  if (args.positional.size() > 2) {
    return usage("accounts", "quota takes one account name, got '" + args.positional[2] + "'");
  }
  COHORT_ASSIGN(ApiClient api, connect(args));
  std::string name;
  if (args.positional.size() == 2) {
    name = args.positional[1];
  } else {
    COHORT_ASSIGN(Json who, api.call("GET", "/v1/whoami"));
    name = str(who, "account");
  }
  Json body = Json::object();
  for (const auto& [flag, field_name] : kQuotaFlags) {
    if (!args.has(flag)) continue;
    const std::string value = args.get(flag);
    if (value == "default") {
      body[field_name] = nullptr;
      continue;
    }
    auto n = std::string(flag) == "--bytes" ? parseBytes(value) : parseInt64(value);
    if (!n || (*n < 0 && std::string(flag) != "--max-priority")) {
      return usage("accounts", std::string(flag) + ": expected " +
                                   (std::string(flag) == "--bytes" ? "a size (like 200Gi)"
                                                                   : "a whole number") +
                                   " or default, got '" + value + "'");
    }
    body[field_name] = *n;
  }
  const std::string path = "/v1/accounts/" + urlEncode(name) + "/quotas";
  COHORT_ASSIGN(Json answer, body.empty() ? api.call("GET", path) : api.call("PUT", path, body));
  if (args.has("--json")) {
    printJson(answer);
    return 0;
  }
  std::vector<Row> rows = {{"QUOTA", "LIMIT", "USED", "SET"}};
  const Json& quotas = at(answer, "quotas");
  for (const auto& [flag, field_name] : kQuotaFlags) {
    const Json& q = at(quotas, field_name);
    auto shown = [&](const char* key) {
      const Json& v = at(q, key);
      if (!v.is_number_integer()) return std::string(std::string(key) == "limit" ? "none" : "-");
      const int64_t n = v.get<int64_t>();
      return std::string(field_name) == "bytes" ? formatSize(static_cast<double>(n))
                                                : std::to_string(n);
    };
    rows.push_back({field_name, shown("limit"), shown("used"),
                    at(q, "default") == true ? "server default" : "for " + name});
  }
  printOut(renderTable(rows));
  return 0;
}

Result<int> cmdAccounts(int argc, char** argv) {
  COHORT_ASSIGN(Args args, parseClientArgs("accounts", argc, argv));
  std::string sub = args.positional.empty() ? "list" : args.positional[0];
  if (sub == "quota") {
    for (const char* flag : {"--admin", "--max-gpus", "--max-cpus"}) {
      if (args.has(flag)) return usage("accounts", std::string(flag) + " goes with create");
    }
    return accountQuota(args);
  }
  for (const auto& [flag, field_name] : kQuotaFlags) {
    if (args.has(flag)) return usage("accounts", std::string(flag) + " goes with quota");
  }
  if (sub == "list") {
    COHORT_TRY(expectPositional(
        "accounts", args,
        args.positional.empty() ? std::vector<std::string>{} : std::vector<std::string>{"list"}));
    for (const char* flag : {"--admin", "--max-gpus", "--max-cpus"}) {
      if (args.has(flag)) return usage("accounts", std::string(flag) + " goes with create");
    }
    COHORT_ASSIGN(ApiClient api, connect(args));
    COHORT_ASSIGN(Json answer, api.call("GET", "/v1/accounts"));
    const Json& accounts = listAt(answer, "accounts");
    if (args.has("--json")) {
      printJson(accounts);
      return 0;
    }
    std::vector<Row> rows = {{"NAME", "ADMIN", "MAX GPUS", "MAX CPUS", "CREATED"}};
    for (const Json& a : accounts) {
      auto limit = [&](const char* key) {
        std::string v = str(a, key);
        return v.empty() ? std::string("-") : v;
      };
      rows.push_back({str(a, "name"), at(a, "admin") == true ? "yes" : "no", limit("max_gpus"),
                      limit("max_cpus"), relativeTime(str(a, "created"))});
    }
    printOut(renderTable(rows));
    return 0;
  }
  if (sub != "create") {
    return usage("accounts", "unknown subcommand '" + sub + "' (list, create, quota)");
  }
  COHORT_TRY(expectPositional("accounts", args, {"create", "NAME"}));
  Json body = {{"name", args.positional[1]}, {"admin", args.has("--admin")}};
  if (args.has("--max-gpus")) {
    auto n = parseInt(args.get("--max-gpus"));
    if (!n || *n < 0) {
      return usage("accounts",
                   "--max-gpus: expected an integer >= 0, got '" + args.get("--max-gpus") + "'");
    }
    body["max_gpus"] = *n;
  }
  if (args.has("--max-cpus")) {
    auto n = parseCpus(args.get("--max-cpus"));
    if (!n) return usage("accounts", "--max-cpus: " + n.error().message);
    body["max_cpus"] = *n;
  }
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json answer, api.call("POST", "/v1/accounts", body));
  if (args.has("--json")) {
    printJson(answer);
  } else {
    printOut(str(answer, "token") + "\n");
  }
  std::fprintf(stderr,
               "cohort: created account '%s'; its token is shown only this once: keep it "
               "(cohort login %s --token TOKEN)\n",
               args.positional[1].c_str(), api.server().c_str());
  return 0;
}

Result<int> cmdTokens(int argc, char** argv) {
  COHORT_ASSIGN(
      Args args,
      parseClientArgs("tokens", argc, argv));
  std::string sub = args.positional.empty() ? "list" : args.positional[0];
  if (sub != "list" && sub != "create" && sub != "delete") {
    return usage("tokens", "unknown subcommand '" + sub + "' (list, create, delete)");
  }
  if (sub != "create" && (args.has("--label") || args.has("--account"))) {
    return usage("tokens", "--label and --account go with create");
  }
  if (sub == "list") {
    COHORT_TRY(expectPositional(
        "tokens", args,
        args.positional.empty() ? std::vector<std::string>{} : std::vector<std::string>{"list"}));
    COHORT_ASSIGN(ApiClient api, connect(args));
    COHORT_ASSIGN(Json answer, api.call("GET", "/v1/tokens"));
    const Json& tokens = listAt(answer, "tokens");
    if (args.has("--json")) {
      printJson(tokens);
      return 0;
    }
    std::vector<Row> rows = {{"ID", "ACCOUNT", "LABEL", "CREATED"}};
    for (const Json& t : tokens) {
      rows.push_back(
          {str(t, "id"), str(t, "account"), str(t, "label"), relativeTime(str(t, "created"))});
    }
    printOut(renderTable(rows));
    return 0;
  }
  if (sub == "delete") {
    COHORT_TRY(expectPositional("tokens", args, {"delete", "ID"}));
    COHORT_ASSIGN(ApiClient api, connect(args));
    COHORT_TRY(api.call("DELETE", "/v1/tokens/" + urlEncode(args.positional[1])));
    std::fprintf(stderr, "cohort: revoked token %s\n", args.positional[1].c_str());
    return 0;
  }
  COHORT_TRY(expectPositional("tokens", args, {"create"}));
  Json body = {{"label", args.get("--label")}};
  if (args.has("--account")) body["account"] = args.get("--account");
  COHORT_ASSIGN(ApiClient api, connect(args));
  COHORT_ASSIGN(Json answer, api.call("POST", "/v1/tokens", body));
  if (args.has("--json")) {
    printJson(answer);
  } else {
    printOut(str(answer, "token") + "\n");
  }
  std::fprintf(stderr, "cohort: created token %s for %s; it is shown only this once\n",
               str(answer, "id").c_str(), str(answer, "account").c_str());
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The server's commands, each declared once: its line in cohort --help, its help and its flags
// (besides serverFlags(), which every one takes), and what runs it.

struct ClientCommand {
  std::string name, usage, summary;
  std::string about;             // its help's title, usage and prose, up to its flags
  std::vector<FlagSpec> flags;   // its own, shown under "Flags:"
  Result<int> (*run)(int argc, char** argv);
  std::string after = kExitCodesHelp;  // its help's end: examples, exit codes
  // Its help's flags, when they are more than its own list (submit: the job's too).
  std::string (*flags_help)() = nullptr;
};

std::string submitFlagsHelp();

const std::vector<ClientCommand>& clientTable() {
  static const FlagSpec kJson = {"--json", "", "", "print the answer as JSON"};
  static const std::vector<ClientCommand> kTable = {
      {"login", "login URL [--token T] [--fingerprint FP]",
       "check a token and save it with the server",
       R"(cohort login: check a token with a server and save both for later commands

Usage: cohort login URL [--token TOKEN] [--ca FILE | --fingerprint SHA256]

The token comes from --token, else $COHORT_TOKEN, else stdin (typed without echo on a
terminal). It is checked with the server (GET /v1/whoami), then the server and the token are
written to $XDG_CONFIG_HOME/cohort/config.json (default ~/.config/cohort/config.json, mode
0600). Later commands use them unless --server/--token or COHORT_SERVER/COHORT_TOKEN say
otherwise; the saved token is only ever sent to the saved server.

An https:// server's certificate is always verified, against the system's certificate
authorities unless --ca FILE (a private certificate authority's, saved with the server) or
--fingerprint says otherwise.

)",
       {{"--fingerprint", "", "SHA256",
         "trust the certificate the server presents if its SHA-256 fingerprint is this one (what "
         "cohort server --tls-self-signed printed); it is saved beside the config file and "
         "trusted from then on. A different certificate is refused before the token is sent."}},
       cmdLogin,
       R"(
Examples:
  cohort login http://gpu-box:8600 --token cohort_...
  cohort login https://gpu-box:8600 --token cohort_... --fingerprint 3A:9F:...
  echo "$TOKEN" | cohort login gpu-box:8600
)" + std::string(kExitCodesHelp)},
      {"whoami", "whoami", "the account your token belongs to",
       R"(cohort whoami: the account the token belongs to

Usage: cohort whoami [--json]

Prints the account's name, and "admin" after it for an admin account.

)",
       {kJson}, cmdWhoami},
      {"submit", "submit [flags] [-f job.yaml] [-- cmd...]",
       "queue a job on the server; prints its id",
       R"(cohort submit: queue a job on a cohort server

Usage: cohort submit [flags] [-f job.yaml] [-- command...]

The job file and the flags are read as by cohort run; the job then waits in the server's queue
until the whole gang fits, and runs on the server's machine. Its workdir (default: the job
file's directory, or here) is uploaded as a snapshot (leaving out what its .cohortignore, else
its .gitignore, names; .git always), and the ranks run on that snapshot, so later edits here do
not change the job. A server on this machine (localhost, 127.x.x.x, [::1]) reads the workdir
where it is instead, unless --upload is given. Local input paths are made absolute here: they
must exist on the server's machine (or be in its store: store://...). Prints the job id on
stdout, so that JOB=$(cohort submit ...) works, and on stderr where the job stands ("queued:
needs 4 CPUs, 2 free").

)",
       {{"--priority", "", "N",
         "queued jobs with a higher priority start first (default 0; at most your account's "
         "max_priority quota, cohort accounts quota)"},
        {"--wait", "", "",
         "wait until the job ends, then exit with its exit code; Ctrl-C stops waiting, not the "
         "job (cohort stop JOB does)"},
        {"--json", "", "", "print the job record instead of the id"},
        {"--quiet", "-q", "", "no lines from cohort on stderr, except a failure's"},
        {"--upload", "", "", "upload the workdir even to a server on this machine"},
        {"--no-upload", "", "", "never upload: the workdir is a path on the server's machine"},
        {"--max-upload", "", "SIZE",
         "the largest workdir snapshot to upload (default 256Mi; the server takes up to its own "
         "--max-upload, 1Gi by default)"}},
       cmdSubmit,
       R"(
Examples:
  cohort submit -f examples/pytorch/ddp.yaml --priority 10
  JOB=$(cohort submit --nodes 2 --nproc-per-node 2 -- python3 train.py)
  cohort submit --wait --framework generic -- ./check.sh

Exit codes: 0 submitted (with --wait: the job's exit code, as for cohort run); 2 bad usage, a
bad job, or a request the server refused; 1 the server could not be reached or failed.
)",
       submitFlagsHelp},
      {"rerun", "rerun JOB", "run a job again with its job file (here, or on the server)",
       R"(cohort rerun: run a job again, with the job file it ran

Usage: cohort rerun JOB [flags]

A job that cohort run ran on this machine (found under --data-root, default $COHORT_DATA_ROOT
or ~/.cohort) runs again here, from the job file kept in its directory (job.json, every field
written out, paths absolute); the flags are cohort run's and change that job file, as they
would change a job.yaml:  cohort rerun JOB --nodes 4 --max-runtime 2h

Else JOB is a job of the server: the job file it ran (its record's spec) is submitted again
as a new job; a job that ran uploaded code runs a copy of that same code, with these flags:

)",
       {{"--name", "", "NAME", "the new job's name (default: the same)"},
        {"--priority", "", "N", "its priority (default: the same as JOB's)"},
        {"--wait", "", "", "wait until it ends, then exit with its exit code"},
        {"--json", "", "", "print its record instead of its id"},
        {"--quiet", "-q", "", "no lines from cohort on stderr, except a failure's"}},
       cmdRerunOnServer, R"(
Exit codes: as cohort run (here) or cohort submit (a server's job).
)"},
      {"ps", "ps [--state S]", "list jobs",
       R"(cohort ps: list jobs on the server, newest first

Usage: cohort ps [--state STATE[,STATE]] [--limit N] [--json]

Shows your jobs (an admin's: everyone's). INFO says why a queued job waits, how long an
active one has run, and how a finished one ended.

)",
       {{"--state", "", "LIST",
         "only jobs in these states (repeatable): queued, starting, staging, running, "
         "restarting, stopping, succeeded, failed, stopped"},
        {"--limit", "", "N", "at most N jobs (default: the server's, 1000)"},
        {"--json", "", "", "the job records as a JSON array"}},
       cmdPs},
      {"status", "status JOB", "a job's state, ranks, events, root cause",
       R"(cohort status: everything about one job

Usage: cohort status JOB [--wait] [--json]

Shows the job's state, times, resources and why it waits or ended; its ranks (node, state,
exit code); its events in order; and, when a rank's failure ended it, that rank's exit code,
a hint and its last log lines.

)",
       {{"--wait", "", "", "wait until the job ends first, and exit with its exit code"},
        {"--json", "", "", R"({"job": record, "ranks": [...], "events": [...]})"}},
       cmdStatus},
      {"logs", "logs JOB [--rank R] [-f]", "print (or follow) a job's log",
       R"(cohort logs: print a job's log

Usage: cohort logs JOB [--rank R] [-f]

By default the merged log of every rank, each line prefixed with [role/rank node]; with
--rank, that rank's log alone.

)",
       {{"--rank", "", "R", "one rank's log (R is the global rank)"},
        {"--follow", "-f", "", "keep printing new lines until the job ends (Ctrl-C stops)"}},
       cmdLogs},
      {"stop", "stop JOB", "stop a job (its ranks get their stop signal)",
       R"(cohort stop: stop a job

Usage: cohort stop JOB

A queued job is stopped at once; a running one's ranks get its stop signal (policy.stop_signal,
SIGTERM by default: their notice to save a checkpoint), then SIGKILL after its grace period.

)",
       {}, cmdStop},
      {"delete", "delete JOB", "delete a finished job: record, logs, outputs",
       R"(cohort delete: delete a finished job: its record, events, logs and outputs

Usage: cohort delete JOB

Only a job that ended (succeeded, failed or stopped) can be deleted; stop it first.

)",
       {}, cmdDelete},
      {"outputs", "outputs JOB [download DEST]", "list or download a job's output files",
       R"(cohort outputs: list or download a job's output files

Usage: cohort outputs JOB [--json]
       cohort outputs JOB download DEST [-q]

The files are those the ranks wrote under $COHORT_OUTPUT_DIR. download writes each file to
DEST/<path> (directories created; each file under a temporary name, then renamed), and refuses
any path that would land outside DEST.

)",
       {{"--json", "", "", "the list as JSON"},
        {"--quiet", "-q", "", "no line per file on stderr"}},
       cmdOutputs},
      {"share", "share store://B/P --with ACCOUNT", "share a store prefix with another account",
       R"(cohort share: let another account read (or write) a prefix of one of your buckets

Usage: cohort share store://BUCKET/PREFIX --with ACCOUNT [--access read|write] [--json]

Prints the new share's id (for cohort unshare). write includes read.

)",
       {{"--with", "", "ACCOUNT", "the account to share with (required)"},
        {"--access", "", "read|write", "default read"},
        {"--json", "", "", "print the share as JSON"}},
       cmdShare},
      {"shares", "shares", "the shares you granted and those granted to you",
       R"(cohort shares: the shares you granted and those granted to you

Usage: cohort shares [--json]

)",
       {kJson}, cmdShares},
      {"unshare", "unshare ID", "revoke a share at once",
       R"(cohort unshare: revoke a share at once

Usage: cohort unshare ID

)",
       {}, cmdUnshare},
      {"accounts", "accounts [create NAME | quota [NAME]]", "the server's accounts and quotas",
       R"(cohort accounts: the server's accounts (admin only, but for your own quotas)

Usage: cohort accounts [list] [--json]
       cohort accounts create NAME [--admin] [--max-gpus N] [--max-cpus N]
       cohort accounts quota [NAME] [--bytes SIZE] [--inodes N] [--queued-jobs N]
                             [--uploads N] [--followers N] [--max-priority N] [--json]

create prints the new account's first token on stdout; the server never shows it again.
quota shows an account's quotas (yours without NAME) and what it uses of each; with flags an
admin sets them (`default`: back to the server's, cohort server --quota-*).

)",
       {{"--admin", "", "", "the account may see every job and manage accounts"},
        {"--max-gpus", "", "N", "at most N GPUs held by the account's running jobs"},
        {"--max-cpus", "", "N", "at most N CPUs held by the account's running jobs"},
        {"--bytes", "", "SIZE",
         "bytes it may hold in the data root (store files, uploads, jobs' directories, "
         "environments), e.g. 200Gi"},
        {"--inodes", "", "N", "files, directories and links it may hold there"},
        {"--queued-jobs", "", "N", "jobs it may have waiting in the queue at once"},
        {"--uploads", "", "N", "uploads it may have being received or waiting for their job"},
        {"--followers", "", "N", "streams (jobs' events and logs) it may follow at once"},
        {"--max-priority", "", "N", "the highest priority it may give its jobs"},
        kJson},
       cmdAccounts},
      {"tokens", "tokens [create | delete ID]", "your tokens (an admin's: everyone's)",
       R"(cohort tokens: your tokens (an admin's: everyone's)

Usage: cohort tokens [list] [--json]
       cohort tokens create [--label LABEL] [--account ACCOUNT]
       cohort tokens delete ID

create prints the new token on stdout; the server never shows it again. delete revokes a
token at once.

)",
       {{"--label", "", "LABEL", R"(what the token is for ("laptop", "ci"))"},
        {"--account", "", "ACCOUNT", "(admin) make the token for another account"},
        kJson},
       cmdTokens},
  };
  return kTable;
}

const ClientCommand& clientCommand(const std::string& name) {
  for (const ClientCommand& c : clientTable()) {
    if (c.name == name) return c;
  }
  std::abort();  // a bug: a command of this file that is not in its table
}

// The job's flags that a server's job takes, then submit's own.
std::string submitFlagsHelp() {
  return jobFlagsHelp("submit") + "\nSubmit:\n" + flagsHelp(clientCommand("submit").flags);
}

// Runs `c`, its error (or an exception of the JSON library) a message on stderr.
int runClient(const ClientCommand& c, int argc, char** argv) {
  Result<int> result = [&]() -> Result<int> {
    try {
      return c.run(argc, argv);
    } catch (const std::exception& e) {
      // The server's JSON had a shape cohort did not expect, or memory ran out.
      return fail(Code::kInternal, c.name + ": " + e.what());
    }
  }();
  std::fflush(stdout);
  if (!result) {
    std::fprintf(stderr, "cohort: error: %s\n", result.error().message.c_str());
    return exitCodeFor(result.error());
  }
  return *result;
}

std::string helpOf(const ClientCommand& c) {
  std::string text = c.about;
  if (c.flags_help) {
    text += c.flags_help();
  } else if (!c.flags.empty()) {
    text += "Flags:\n" + flagsHelp(c.flags);
  }
  if (!c.flags.empty() || c.flags_help) text += "\n";
  return text + "Server:\n" + flagsHelp(serverFlags()) + c.after;
}

}  // namespace

const std::vector<FlagSpec>& clientFlags(const std::string& command) {
  return clientCommand(command).flags;
}

std::vector<Command> clientCommands() {
  std::vector<Command> out;
  for (const ClientCommand& c : clientTable()) {
    Command command{c.name, c.usage, c.summary, Command::Group::kServer,
                    [&c] { return helpOf(c); }, nullptr};
    command.run = [&c](int argc, char** argv) { return runClient(c, argc, argv); };
    out.push_back(std::move(command));
  }
  return out;
}

int cmdServerRerun(int argc, char** argv) {
  return runClient(clientCommand("rerun"), argc, argv);
}

}  // namespace cohort::cli
