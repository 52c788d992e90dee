#include "env/python_check.h"

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "proc/spawn.h"
#include "util/fd.h"
#include "util/json_reader.h"
#include "util/text.h"

extern char** environ;

namespace cohort::env {

namespace {

using Json = nlohmann::json;

// Run by the interpreter with a request (JSON) in argv[1]: {"script": PATH} or {"module": NAME},
// "needs": [[MODULE, ...], ...] (one of each list), "provided": [MODULE, ...]. Prints
// {"executable", "prefix", "version", "missing": [{"modules": [...], "line": N}]}. It finds modules
// (importlib.util.find_spec of top-level names, which runs no module's code) and never imports
// one; the script is parsed, not run.
constexpr const char* kProbe = R"(import ast, importlib.util, json, os, sys
req = json.loads(sys.argv[1])
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    except Exception:
        return True
def changes_path(node):
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and (n.attr == "addsitedir" or (
                n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys")):
            return True
        if isinstance(n, ast.ImportFrom) and n.module in ("sys", "site"):
            return True
    return False
def imports(path, source=None):
    try:
        if source is None:
            with open(path, "rb") as f:
                source = f.read()
        tree = ast.parse(source, path)
    except (OSError, SyntaxError, ValueError):
        return []
    out = []
    for node in tree.body:
        if changes_path(node):
            break
        if isinstance(node, ast.Import):
            out += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.module.split(".")[0], node.lineno))
    return out
wanted = []
if req.get("source") is not None:
    wanted = [([m], line) for m, line in imports(req["script"], req["source"])]
elif req.get("script"):
    sys.path[0] = os.path.dirname(os.path.abspath(req["script"]))
    wanted = [([m], line) for m, line in imports(req["script"])]
elif req.get("module"):
    wanted = [([req["module"].split(".")[0]], 0)]
wanted += [(alternatives, 0) for alternatives in req["needs"]]
missing, seen = [], set()
for modules, line in wanted:
    if modules[0] in seen or any(m in req["provided"] or m in sys.builtin_module_names or found(m)
                                 for m in modules):
        continue
    seen.add(modules[0])
    missing.append({"modules": modules, "line": line})
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix,
                  "version": sys.version.split()[0], "missing": missing}))
)";

struct Answer {
  std::string executable, prefix, version;  // prefix: sys.prefix, one per installation or venv
  std::vector<std::pair<std::vector<std::string>, int>> missing;  // modules, line (0: none)
};

// The program the command runs: {script} or {module}, past the interpreter's own options.
Json programOf(const std::vector<std::string>& command, const std::string& workdir) {
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (a == "-m") return i + 1 < command.size() ? Json{{"module", command[i + 1]}} : Json::object();
    if (a == "-c" || a == "-" || a.empty()) return Json::object();
    if (a[0] != '-') return Json{{"script", a[0] == '/' ? a : workdir + "/" + a}};
    if (a == "-X" || a == "-W" || a == "--check-hash-based-pycs") ++i;
  }
  return Json::object();
}

// The interpreter's answer (kProbe's JSON, whose "missing" is an array), read without trusting
// its types: a host's answer crossed the network.
Answer answerOf(const Json& out, const std::string& python) {
  auto text = [](const Json& o, const char* key, const std::string& otherwise) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : otherwise;
  };
  Answer a;
  a.executable = text(out, "executable", python);
  a.prefix = text(out, "prefix", "");
  a.version = text(out, "version", "");
  for (const Json& m : out.at("missing")) {
    if (!m.is_object()) continue;
    std::vector<std::string> modules = stringItems(m.value("modules", Json::array()));
    auto line = m.find("line");
    const int at = line != m.end() && line->is_number_integer() ? line->get<int>() : 0;
    if (!modules.empty()) a.missing.emplace_back(std::move(modules), at);
  }
  return a;
}

// Asks `python` (absolute) for `request`'s modules. Errors: the interpreter did not answer
// (kFailedPrecondition, with what it printed).
Result<Answer> ask(const std::string& python, const Json& request, const PythonRanks& ranks) {
  proc::SpawnRequest req;
  req.argv = {python, "-c", kProbe, request.dump()};
  req.env = ranks.env;
  req.cwd = ranks.workdir;
  req.uid = ranks.uid;
  req.gid = ranks.gid;
  req.no_new_privs = ranks.uid >= 0 || static_cast<bool>(ranks.confine);
  UniqueFd held;
  if (ranks.confine) {
    COHORT_ASSIGN(held, ranks.confine(req));
  }
  auto ran = proc::runCaptured(req, Millis(30000));
  if (!ran) return fail(ran.error().code, ran.error().message);
  Json out = Json::parse(ran->out, nullptr, false);
  if (ran->status.shellCode() != 0 || !out.is_object() || !out["missing"].is_array()) {
    std::string why(trim(ran->err));
    why = why.substr(why.rfind('\n') + 1).substr(0, 200);
    return fail(Code::kFailedPrecondition,
                "it " + ran->status.describe() + (why.empty() ? "" : " (" + why + ")"));
  }
  return answerOf(out, python);
}

std::string realPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

// Another Python of this machine that finds every one of `modules` (one of each list), other
// than the installation or virtual environment `except` (its sys.prefix): python3 in each
// directory of the ranks' PATH and of this process's, then the system's. "" when none does.
std::string anotherWith(const std::vector<std::vector<std::string>>& modules,
                        const std::string& except, const PythonRanks& ranks) {
  std::vector<std::string> dirs = split(ranks.path, ':');
  if (const char* own = std::getenv("PATH")) {
    for (const std::string& d : split(own, ':')) dirs.push_back(d);
  }
  dirs.insert(dirs.end(), {"/usr/local/bin", "/usr/bin"});
  std::set<std::string> paths, prefixes = {except};
  for (const std::string& dir : dirs) {
    if (dir.empty() || dir[0] != '/') continue;
    const std::string python = dir + "/python3";
    // Confined, the sandbox says whether it is there (this process may see what it does not).
    if ((!ranks.confine && ::access(python.c_str(), X_OK) != 0) || !paths.insert(python).second) {
      continue;
    }
    auto answer = ask(python, Json{{"needs", modules}, {"provided", Json::array()}}, ranks);
    if (!answer || !prefixes.insert(answer->prefix).second) continue;
    if (answer->missing.empty()) return python;
  }
  return "";
}

std::string quoted(const std::vector<std::string>& modules) {
  std::vector<std::string> words;
  for (const std::string& m : modules) words.push_back("'" + m + "'");
  return join(words, " or ");
}

// "'torch' (train.py line 3), 'numpy'": what the answer says is missing.
std::string missingNames(const Answer& answer, const std::string& script) {
  std::vector<std::string> names;
  for (const auto& [modules, at] : answer.missing) {
    std::string name = quoted(modules);
    if (at > 0) name += " (" + script.substr(script.rfind('/') + 1) + " line " + std::to_string(at) + ")";
    names.push_back(name);
  }
  return join(names, ", ");
}

}  // namespace

RemotePythonCheck remotePythonCheck(const spec::JobSpec& s, const std::string& workdir,
                                    const std::vector<PythonNeed>& needs) {
  RemotePythonCheck check;
  Json request = programOf(s.command, workdir);
  const std::string script = request.value("script", "");
  // The script goes to the host in the probe's arguments (one argument holds 128 KiB at most):
  // a larger one is not asked about, only what cohort needs.
  if (!script.empty()) {
    auto text = readFile(script);
    if (text && text->size() <= 64 * 1024 && validUtf8(*text)) {
      request["source"] = *text;
    } else {
      request.erase("script");
    }
  }
  request["needs"] = Json::array();
  for (const PythonNeed& need : needs) request["needs"].push_back(need.modules);
  // What the workdir holds is on the host once its snapshot is: its modules count as found.
  Json provided = Json::array({"cohort"});
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(workdir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec)) provided.push_back(name);
    if (name.size() > 3 && name.ends_with(".py")) provided.push_back(name.substr(0, name.size() - 3));
  }
  request["provided"] = provided;
  check.args = {"-c", kProbe, request.dump()};
  check.explain = [s, needs, script](const std::string& text) -> std::string {
    Json out = Json::parse(text, nullptr, false);
    if (!out.is_object() || !out["missing"].is_array()) {
      return "the ranks' interpreter '" + s.command[0] + "' could not say what it imports";
    }
    const Answer a = answerOf(out, s.command[0]);
    if (a.missing.empty()) return "";
    const PythonNeed* need = nullptr;
    for (const PythonNeed& n : needs) {
      if (n.modules == a.missing.front().first) need = &n;
    }
    return (need ? spec::fieldLabel(s, need->field) : spec::fieldLabel(s, "command")) +
           "the ranks' interpreter '" + s.command[0] + "' (" + a.executable +
           (a.version.empty() ? "" : ", Python " + a.version) + ") cannot import " +
           missingNames(a, script) + " there: install " +
           (need && !need->install.empty() ? need->install
                                           : "it for that interpreter (" + a.executable +
                                                 " -m pip install " + a.missing.front().first.front() + ")");
  };
  return check;
}

std::vector<PythonNeed> pythonNeeds(const spec::JobSpec& s) {
  std::vector<PythonNeed> needs;
  if (s.debug.enabled) {
    const bool dials = !s.debug.connect.empty();
    needs.push_back({dials ? std::vector<std::string>{"pydevd_pycharm", "debugpy"}
                           : std::vector<std::string>{"debugpy"},
                     "debug",
                     std::string("it where the ranks run (apt-get install python3-debugpy, or pip "
                                 "install debugpy into the job's environment") +
                         (dials ? "; for PyCharm's debug server, pip install pydevd-pycharm)" : ")")});
  }
  if (s.launcher == spec::Launcher::kPreload) {
    std::vector<std::string> modules = s.preload;
    if (!s.preload_given && s.framework == spec::Framework::kPyTorch) modules = {"torch"};
    for (const std::string& m : modules) needs.push_back({{m}, "preload", ""});
  }
  if (s.launcher == spec::Launcher::kTorchrun) needs.push_back({{"torch"}, "launcher", ""});
  return needs;
}

bool runsPython(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  return startsWith(command[0].substr(command[0].rfind('/') + 1), "python");
}

Result<void> checkPython(const spec::JobSpec& s, const PythonRanks& ranks,
                         const std::vector<PythonNeed>& needs,
                         const std::vector<std::string>& provided) {
  // Confined, the sandbox finds it on the ranks' PATH (bubblewrap's execvp, as for a rank).
  auto python = ranks.confine ? Result<std::string>(s.command[0])
                              : proc::findProgram(s.command[0], ranks.path, ranks.workdir);
  if (!python) return withContext(python.error(), spec::fieldLabel(s, "command") + "python");
  Json request = programOf(s.command, ranks.workdir);
  request["needs"] = Json::array();
  for (const PythonNeed& need : needs) request["needs"].push_back(need.modules);
  request["provided"] = provided;
  const std::string which = "the ranks' interpreter '" + s.command[0] + "' (" + *python;
  auto answer = ask(*python, request, ranks);
  if (!answer && !ranks.refuse_unanswered) return {};
  if (!answer) {
    return fail(Code::kFailedPrecondition, spec::fieldLabel(s, "command") + which +
                                               ") could not be asked what it imports: " +
                                               answer.error().message);
  }
  if (answer->missing.empty()) return {};
  // The first missing module says the field; every missing one is named.
  const auto& [first, line] = answer->missing.front();
  const PythonNeed* need = nullptr;
  for (const PythonNeed& n : needs) {
    if (n.modules == first) need = &n;
  }
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> lists;
  for (const auto& [modules, at] : answer->missing) {
    std::string name = quoted(modules);
    if (at > 0) {
      const Json program = programOf(s.command, ranks.workdir);
      std::string script = program.value("script", "");
      name += " (" + script.substr(script.rfind('/') + 1) + " line " + std::to_string(at) + ")";
    }
    names.push_back(name);
    lists.push_back(modules);
  }
  std::string runs = *python;
  if (ranks.confine) {
    runs = answer->executable;  // where the sandbox found it
  } else if (realPath(answer->executable) != realPath(*python)) {
    runs += ", which runs " + answer->executable;
  }
  if (!answer->version.empty()) runs += ", Python " + answer->version;
  std::string msg = (need ? spec::fieldLabel(s, need->field) : spec::fieldLabel(s, "command")) +
                    "the ranks' interpreter '" + s.command[0] + "' (" + runs +
                    ") cannot import " + join(names, ", ") + ": ";
  const std::string other = anotherWith(lists, answer->prefix, ranks);
  if (!other.empty()) {
    std::vector<std::string> words = {other};
    for (size_t i = 1; i < s.command.size() && i < 3; ++i) words.push_back(s.command[i]);
    msg += other + " has " + (lists.size() == 1 ? "it" : "them") + ": name it in the command (-- " +
           join(words, " ") + (s.command.size() > 3 ? " ..." : "") +
           ") or put its directory first on the ranks' PATH; or install ";
  } else {
    msg += "no other python3 on this machine has " +
           std::string(lists.size() == 1 ? "it" : "them") + ": install ";
  }
  msg += need && !need->install.empty()
             ? need->install
             : "it for this interpreter (" + answer->executable + " -m pip install " +
                   first.front() + "), or run in an environment that has it (--environment, " +
                   ranks.environments + ")";
  return fail(Code::kFailedPrecondition, msg);
}

}  // namespace cohort::env
