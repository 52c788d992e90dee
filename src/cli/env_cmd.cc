#include "cli/env_cmd.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/command.h"
#include "env/environments.h"
#include "env/image_exec.h"
#include "env/images.h"
#include "util/json_reader.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

void progress(const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); }

// "torch 2.6.0, numpy 1.26.4" (at most `most`, then "and N more").
std::string packagesText(const env::Environment& e, size_t most) {
  std::vector<std::string> parts;
  for (const auto& [name, version] : e.packages) {
    if (parts.size() == most) {
      parts.push_back("and " + std::to_string(e.packages.size() - most) + " more");
      break;
    }
    parts.push_back(name + " " + version);
  }
  return join(parts, ", ");
}

nlohmann::ordered_json toJson(const env::Environment& e) {
  return {{"name", e.name},
          {"preset", e.preset},
          {"built", e.built},
          {"from", e.from},
          {"requirements", e.requirements},
          {"python", e.python},
          {"python_version", e.python_version},
          {"packages", e.packages},
          {"dir", e.dir},
          {"bytes", (e.built || e.incomplete) && !e.dir.empty() ? env::diskUsage(e.dir) : 0},
          {"incomplete", e.incomplete},
          {"summary", e.summary}};
}

void show(const env::Environment& e) {
  std::printf("%s%s: %s\n", e.name.c_str(), e.preset ? " (preset)" : "", e.summary.c_str());
  if (e.name == "system") {
    std::printf("  the launcher's PATH, as it is\n");
    return;
  }
  std::printf("  built:     %s\n",
              e.built        ? "yes"
              : e.incomplete ? "no: a build did not finish (cohort env rm removes what it left)"
                             : "no (built on first use, or cohort env build)");
  if (!e.from.empty()) std::printf("  from:      %s\n", e.from.c_str());
  if (!e.requirements.empty()) {
    std::printf("  asked for: %s\n", join(e.requirements, " ").c_str());
  }
  if (e.built) {
    std::printf("  python:    %s (%s)\n", e.python_version.c_str(), e.python.c_str());
    std::printf("  packages:  %s\n", packagesText(e, 64).c_str());
    std::printf("  size:      %s\n",
                formatSize(static_cast<double>(env::diskUsage(e.dir))).c_str());
    std::printf("  lock file: %s/lock.txt\n", e.dir.c_str());
  }
  std::printf("  where:     %s\n", e.dir.c_str());
}

nlohmann::ordered_json imageJson(const env::ImageInfo& i) {
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (const auto& [k, v] : i.env) env[k] = v;
  return {{"name", i.ref},    {"kind", "image"},      {"id", i.id},
          {"names", i.names}, {"digests", i.digests}, {"created", i.created},
          {"bytes", i.size},  {"layers", i.layers},   {"env", env}};
}

void showImage(const env::ImageInfo& i) {
  std::printf("%s (image): podman image %s\n", i.ref.c_str(), i.id.substr(0, 12).c_str());
  if (!i.names.empty()) std::printf("  names:     %s\n", join(i.names, " ").c_str());
  if (!i.digests.empty()) std::printf("  digests:   %s\n", join(i.digests, " ").c_str());
  std::printf("  created:   %s\n", i.created.c_str());
  std::printf("  size:      %s\n", formatSize(static_cast<double>(i.size)).c_str());
  std::vector<std::string> env;
  for (const auto& [k, v] : env::imageVariables(i)) env.push_back(k + "=" + v);
  std::printf("  variables: %s\n", join(env, " ").c_str());
  std::printf("  layers:    %zu, top %s\n", i.layers.size(), i.layers.front().c_str());
}

// `cohort env exec ...`: returns only when the command could not be started.
int execInImage(int argc, char** argv) {
  const std::vector<std::string> args(argv + 3, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::fputs(envHelp().c_str(), stdout);
    return 0;
  }
  auto parsed = env::parseImageExec(args);
  if (!parsed) {
    std::fprintf(stderr, "cohort env exec: %s\n", parsed.error().message.c_str());
    return kExitUsage;
  }
  auto ran = env::execInImage(*parsed);
  std::fprintf(stderr, "cohort env exec: %s\n", ran.error().message.c_str());
  return 127;  // the shell's "could not execute"
}

// ---------------------------------------------------------------------------------------------
// The server's environments: cohort env push NAME, and ls, show and rm --on-server.

using Json = nlohmann::json;

std::string stringAt(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// "termcolor 3.3.0, numpy 1.26.4" from the API's "packages".
std::string packagesOf(const Json& e) {
  env::Environment shown;
  auto it = e.find("packages");
  if (it != e.end() && it->is_object()) {
    for (const auto& [name, version] : it->items()) {
      if (version.is_string()) shown.packages[name] = version.get<std::string>();
    }
  }
  return packagesText(shown, 6);
}

std::string environmentPath(const std::string& name) {
  return "/v1/environments/" + urlEncode(name);
}

void showRemote(const Json& e) {
  const std::string owner = e["owner"].is_string() ? e["owner"].get<std::string>() : "";
  std::printf("%s (%s%s): %s\n", stringAt(e, "name").c_str(), stringAt(e, "kind").c_str(),
              e.value("shared", false) ? (owner.empty() ? "" : ", an admin's: every account's")
                                       : (", " + owner + "'s").c_str(),
              stringAt(e, "summary").c_str());
  std::printf("  state:     %s\n", stringAt(e, "state").c_str());
  if (!stringAt(e, "base").empty()) std::printf("  base:      %s\n", stringAt(e, "base").c_str());
  std::vector<std::string> asked = stringItems(e.value("requirements", Json::array()));
  if (!asked.empty()) std::printf("  asked for: %s\n", join(asked, " ").c_str());
  if (!stringAt(e, "python_version").empty()) {
    std::printf("  python:    %s\n", stringAt(e, "python_version").c_str());
    std::printf("  packages:  %s\n", packagesOf(e).c_str());
  }
  if (!stringAt(e, "hash").empty()) std::printf("  content:   %s\n", stringAt(e, "hash").c_str());
  if (!stringAt(e, "reason").empty()) {
    std::printf("  why:       %s\n", stringAt(e, "reason").c_str());
  }
  const Json log = e.value("log", Json::array());
  if (!log.empty()) {
    std::printf("  build log (last lines):\n");
    for (const Json& line : log) {
      if (line.is_string()) std::printf("    %s\n", line.get<std::string>().c_str());
    }
  }
}

// Follows the build of `name` on the server, its lines on stderr, until it is over; returns
// the environment as the server then has it.
Result<Json> followBuild(ApiClient& api, const std::string& name) {
  int64_t offset = 0;
  std::string pending;
  for (int tries = 0;; ++tries) {
    auto status = api.stream(
        environmentPath(name) + "/log", {{"follow", "1"}, {"offset", std::to_string(offset)}},
        [&](const char* data, size_t size) {
          offset += static_cast<int64_t>(size);
          pending.append(data, size);
          for (size_t nl; (nl = pending.find('\n')) != std::string::npos;
               pending.erase(0, nl + 1)) {
            std::fprintf(stderr, "  %s\n", pending.substr(0, nl).c_str());
          }
          return true;
        },
        true);
    COHORT_ASSIGN(Json e, api.call("GET", environmentPath(name)));
    if (stringAt(e, "state") != "building") return e;
    // The stream broke (the server restarted, the network): take it up where it was.
    if (!status && tries >= 100) return tl::unexpected<Error>(status.error());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

Result<int> push(const Args& args, env::Store& store) {
  const std::string& name = args.positional[0];
  const std::string as = args.get("--as", name);
  COHORT_ASSIGN(env::Environment e, store.get(name));
  if (e.preset) {
    return fail(Code::kInvalidArgument,
                name +
                    " is a preset: every server has its own. Push a saved environment made "
                    "on it (cohort env create NAME --from " +
                    name + " --pip PKG==VER)");
  }
  COHORT_ASSIGN(std::string lock, env::readBuiltFile(e.dir + "/lock.txt", 1 << 20));
  COHORT_ASSIGN(ServerSettings settings,
                resolveServerSettings(args));
  ApiClient api(settings);
  Json body = {{"base", e.from}, {"requirements", e.requirements}, {"lock", lock}};
  COHORT_TRY(api.call("PUT", environmentPath(as), body));
  std::fprintf(stderr, "cohort env: %s sent to %s (on %s, %s); the server builds it:\n", as.c_str(),
               api.server().c_str(), e.from.c_str(), packagesText(e, 6).c_str());
  COHORT_ASSIGN(Json done, followBuild(api, as));
  if (stringAt(done, "state") != "built") {
    std::fprintf(stderr, "cohort env: %s failed to build on the server: %s\n", as.c_str(),
                 stringAt(done, "reason").c_str());
    return kExitFailed;
  }
  std::fprintf(stderr,
               "cohort env: %s is built on the server (%s); its jobs run in it with "
               "environment: %s\n",
               as.c_str(), packagesOf(done).c_str(), as.c_str());
  return 0;
}

Result<int> onServer(const std::string& verb, const Args& args, env::Store& store) {
  if (verb == "push" && args.positional.size() == 1) return push(args, store);
  COHORT_ASSIGN(ServerSettings settings,
                resolveServerSettings(args));
  ApiClient api(settings);
  const bool json = args.has("--json");
  if (verb == "ls" && args.positional.empty()) {
    COHORT_ASSIGN(Json answer, api.call("GET", "/v1/environments"));
    const Json list = answer.value("environments", Json::array());
    if (json) {
      std::printf("%s\n", list.dump(2).c_str());
      return 0;
    }
    std::printf("%-16s %-7s %-10s %-10s %s\n", "NAME", "KIND", "STATE", "OWNER", "WHAT");
    for (const Json& e : list) {
      std::string owner = e["owner"].is_string() ? e["owner"].get<std::string>() : "-";
      if (e.value("shared", false) && owner != "-") owner += " (all)";
      std::string what = stringAt(e, "summary");
      if (!stringAt(e, "python_version").empty()) what += ": " + packagesOf(e);
      std::printf("%-16s %-7s %-10s %-10s %s\n", stringAt(e, "name").c_str(),
                  stringAt(e, "kind").c_str(), stringAt(e, "state").c_str(), owner.c_str(),
                  what.c_str());
    }
    return 0;
  }
  if (verb == "show" && args.positional.size() == 1) {
    COHORT_ASSIGN(Json e, api.call("GET", environmentPath(args.positional[0])));
    if (json) {
      std::printf("%s\n", e.dump(2).c_str());
    } else {
      showRemote(e);
    }
    return 0;
  }
  if (verb == "rm" && args.positional.size() == 1) {
    COHORT_TRY(api.call("DELETE", environmentPath(args.positional[0])));
    std::fprintf(stderr, "cohort env: removed %s from %s\n", args.positional[0].c_str(),
                 api.server().c_str());
    return 0;
  }
  return fail(Code::kInvalidArgument, "'" + verb + "' with " +
                                          std::to_string(args.positional.size()) +
                                          " name(s) on a server: see cohort env --help");
}

}  // namespace

// The flags of cohort env's verbs, each once with its help.
const std::vector<FlagSpec>& envFlags() {
  static const std::vector<FlagSpec> kFlags = withServerFlags({
      {"--from", "", "BASE",
       "the environment to build on"},
      {"--pip", "", "PKG==VER",
       "a requirement (repeatable)"},
      {"--requirements", "", "FILE",
       "a requirements.txt"},
      {"--lock", "", "FILE",
       "install exactly the pins of this lock file (another machine's lock.txt)"},
      {"--as", "", "NAME",
       "push under another name"},
      {"--on-server", "", "",
       "ls, show, rm: the server's environments, not this machine's"},
      {"--json", "", "",
       "machine-readable output (ls, show)"},
      {"--data-root", "", "DIR",
       "environments are kept in DIR/envs (default $COHORT_DATA_ROOT or ~/.cohort), or in "
       "$COHORT_ENVS (DIR[:DIR...]: made in the first, looked up in each, presets in the last) "
       "when it is set"},
  });
  return kFlags;
}

std::string envHelp() {
  return R"(cohort env: the environments jobs run in

Usage: cohort env ls [--json]
       cohort env show NAME [--json]
       cohort env build NAME
       cohort env create NAME --from BASE [--pip PKG==VER]... [--requirements FILE]
                         [--lock FILE]
       cohort env rebuild NAME
       cohort env rm NAME
       cohort env exec --image REF -- COMMAND [ARG...]
On a cohort server (the one cohort login saved, or --server URL):
       cohort env push NAME [--as NAME]
       cohort env ls --on-server [--json]
       cohort env show NAME --on-server [--json]
       cohort env rm NAME --on-server

A job runs in an environment with `environment: NAME` in its job file or --environment NAME:
every rank gets the environment's bin/ first on PATH and VIRTUAL_ENV, so that
`command: [python3, train.py]` runs with its packages.

A job runs in a container image with `environment: {image: REF}` or --image REF: an image in
podman's local storage (podman images), or one podman can pull. Each rank runs in the image's
root file system with the host's network and the job's directories bound in (see
docs/environments.md). ls lists podman's images too; show, build (podman pull) and rm (podman
rmi) take an image's reference as well as an environment's name. exec runs COMMAND in an image
the way a rank runs (the current directory bound in; needs root).

Presets ship with cohort and are built on first use, then kept:
  system       the interpreter on PATH, as it is
  pytorch      CPU PyTorch from Debian's python3-torch (with scikit-learn, NumPy)
  tensorflow   CPU TensorFlow from PyPI, pinned
  mindspore    CPU MindSpore from PyPI, pinned

create makes a saved environment on BASE (a preset or a saved one): a virtual environment in
which BASE's packages stay visible (nothing is copied) and the requirements are installed with
pip; every package it installed is pinned in its lock file, and rebuild installs exactly those
again. A build that fails says so in pip's words and leaves nothing under the name. On a
cluster's node that does not see an environment at its path, the node builds a copy of its own
there from the lock file before any rank starts, once (docs/environments.md).

push sends a saved environment's definition (its base, requirements and lock file; not its
files) to the server, which builds it as your account's user, and follows the build until it is
built or failed; your jobs there then name it like a preset. An admin's pushed environments are
every account's. ls/show/rm --on-server list, show and remove what the server has for you.

)" + flagsHelp(envFlags()) + R"(
Exit codes: 0 done; 1 a build failed (also push's build on the server), or the server could not
be reached; 2 bad usage, no such environment, or a request the server refused; exec: COMMAND's,
or 127 when it could not start.
)";
}

int cmdEnv(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h") {
    std::fputs(envHelp().c_str(), argc < 3 ? stderr : stdout);
    return argc < 3 ? kExitUsage : 0;
  }
  const std::string verb = argv[2];
  if (verb == "exec") return execInImage(argc, argv);
  // The verb's own arguments: argv[1] becomes "env VERB" for the messages.
  auto args = parseArgs("env " + verb, argc - 1, argv + 1,
                        envFlags());
  if (!args) return failWith("env", kExitUsage, args.error().message);
  env::Store store(env::storeDirs(dataRoot(args->get("--data-root"))));
  if (verb == "push" || args->has("--on-server") || args->has("--server") || args->has("--token") ||
      args->has("--ca")) {
    if (verb == "push" && args->positional.size() != 1) {
      return failWith("env", kExitUsage, "push takes one name: cohort env push NAME [--as NAME]");
    }
    auto code = onServer(verb, *args, store);
    if (!code) return failWith("env", exitCodeFor(code.error()), code.error().message);
    return *code;
  }
  if (args->has("--as")) return failWith("env", kExitUsage, "--as: only with push");
  const bool json = args->has("--json");
  auto need = [&](size_t n) { return args->positional.size() == n; };
  auto outcome = [&](const Result<env::Environment>& e, const char* done) {
    if (!e) return failWith("env", exitCodeFor(e.error()), e.error().message);
    std::fprintf(stderr, "cohort env: %s %s (%s)\n", e->name.c_str(), done,
                 packagesText(*e, 6).c_str());
    return 0;
  };
  // An image's reference, written with its tag, digest or registry (REF:TAG, HOST/NAME): no
  // environment's name has ':', '/' or '@'.
  auto image = [&](const std::string& name) {
    return name.find_first_of(":/@") != std::string::npos && !store.get(name);
  };
  if (verb == "ls" && need(0)) {
    std::vector<env::Environment> all = store.list();
    const std::vector<env::ImageInfo> images = env::localImages();
    if (json) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const env::Environment& e : all) out.push_back(toJson(e));
      for (const env::ImageInfo& i : images) out.push_back(imageJson(i));
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    std::printf("%-16s %-7s %-8s %-10s %s\n", "NAME", "KIND", "BUILT", "SIZE", "WHAT");
    for (const env::Environment& e : all) {
      const std::string size = (e.built || e.incomplete) && !e.dir.empty()
                                   ? formatSize(static_cast<double>(env::diskUsage(e.dir)))
                                   : "-";
      std::string what = e.summary;
      if (e.built && !e.packages.empty())
        what += ": python " + e.python_version + ", " + packagesText(e, 4);
      std::printf("%-16s %-7s %-8s %-10s %s\n", e.name.c_str(), e.preset ? "preset" : "saved",
                  e.built ? "yes" : e.incomplete ? "broken" : "no", size.c_str(), what.c_str());
    }
    for (const env::ImageInfo& i : images) {
      std::printf("%-16s %-7s %-8s %-10s podman image %s, created %s\n", i.ref.c_str(), "image",
                  "yes", formatSize(static_cast<double>(i.size)).c_str(),
                  i.id.substr(0, 12).c_str(), i.created.c_str());
    }
    return 0;
  }
  if (verb == "show" && need(1)) {
    if (image(args->positional[0])) {
      auto info = env::inspectImage(args->positional[0]);
      if (!info) return failWith("env", exitCodeFor(info.error()), info.error().message);
      if (json) {
        std::printf("%s\n", imageJson(*info).dump(2).c_str());
      } else {
        showImage(*info);
      }
      return 0;
    }
    auto e = store.get(args->positional[0]);
    if (!e) return failWith("env", exitCodeFor(e.error()), e.error().message);
    if (json) {
      std::printf("%s\n", toJson(*e).dump(2).c_str());
    } else {
      show(*e);
    }
    return 0;
  }
  if (verb == "build" && !args->positional.empty()) {
    for (const std::string& name : args->positional) {
      if (image(name)) {
        auto pulled = env::findOrPullImage(name, progress);
        if (!pulled) return failWith("env", exitCodeFor(pulled.error()), pulled.error().message);
        std::fprintf(stderr, "cohort env: image %s is here (%s)\n", name.c_str(),
                     pulled->id.substr(0, 12).c_str());
        continue;
      }
      if (int code = outcome(store.ensureBuilt(name, progress), "is built")) return code;
    }
    return 0;
  }
  if (verb == "create" && need(1)) {
    return outcome(store.create({args->positional[0], args->get("--from"), args->all("--pip"),
                                 args->get("--requirements"), args->get("--lock")},
                                progress),
                   "is saved");
  }
  if (verb == "rebuild" && need(1)) {
    return outcome(store.rebuild(args->positional[0], progress), "is built again");
  }
  if (verb == "rm" && need(1)) {
    const std::string& name = args->positional[0];
    if (auto r = image(name) ? env::removeImage(name) : store.remove(name); !r) {
      return failWith("env", exitCodeFor(r.error()), r.error().message);
    }
    std::fprintf(stderr, "cohort env: removed %s\n", args->positional[0].c_str());
    return 0;
  }
  return failWith("env", kExitUsage,
                  "'" + verb + "' with " + std::to_string(args->positional.size()) +
                      " name(s): see cohort env --help");
}

}  // namespace cohort::cli
