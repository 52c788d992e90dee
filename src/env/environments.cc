#include "env/environments.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "env/tools.h"
#include "proc/spawn.h"
#include "util/fd.h"
#include "util/json_reader.h"

namespace cohort::env {

namespace {

using Json = nlohmann::json;

constexpr size_t kMaxDefinitionBytes = 1 << 20;  // env.json
constexpr size_t kMaxLockBytes = 1 << 20;        // lock.txt
constexpr size_t kMaxRequirementBytes = 256;

// A saved environment's name: what a directory and a job file can carry unquoted.
bool validName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::string sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  return hexEncode(digest, length);
}

// What `argv` prints on stdout, trimmed.
Result<std::string> capture(const std::vector<std::string>& argv) {
  COHORT_ASSIGN(proc::Captured out, runQuietly(argv, Millis(120000)));
  if (out.status.shellCode() != 0) {
    return fail(Code::kFailedPrecondition,
                join(argv, " ") + ": " + std::string(trim(out.err.empty() ? out.out : out.err)));
  }
  return std::string(trim(out.out));
}

// The line `python -c code` prints.
Result<std::string> ask(const std::string& python, const std::string& code) {
  return capture({python, "-c", code});
}

// The site-packages directory of the virtual environment whose interpreter is `python`, and
// what it itself holds, pinned.
Result<std::pair<std::string, std::string>> ownPackages(const std::string& python) {
  COHORT_ASSIGN(std::string site,
                ask(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"));
  COHORT_ASSIGN(std::string frozen, capture({python, "-m", "pip", "freeze", "--path", site}));
  return std::pair{site, frozen};
}

Result<Json> readDefinition(const std::string& dir) {
  COHORT_ASSIGN(std::string text, readBuiltFile(dir + "/env.json", kMaxDefinitionBytes));
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return fail(Code::kFailedPrecondition, dir + "/env.json is not an environment's definition");
  }
  return j;
}

std::string text(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Held while `name` is built or removed, so that two jobs starting at once build it once. The
// lock file is opened read-only: a build confined to its environment's directory can take a
// lock file made for it beforehand.
class BuildLock {
 public:
  static Result<BuildLock> take(const std::string& root, const std::string& name) {
    const std::string path = root + "/." + name + ".lock";
    BuildLock lock;
    lock.fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!lock.fd_.valid()) {
      COHORT_TRY(makeDirs(root));
      lock.fd_.reset(::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    }
    if (!lock.fd_.valid()) return failErrno("open '" + path + "'");
    while (::flock(lock.fd_.get(), LOCK_EX) < 0) {
      if (errno != EINTR) return failErrno("lock '" + path + "'");
    }
    return lock;
  }

  // The lock if nobody holds it, else kFailedPrecondition: `name` is being built now.
  static Result<BuildLock> takeIfFree(const std::string& root, const std::string& name) {
    const std::string path = root + "/." + name + ".lock";
    BuildLock lock;
    lock.fd_.reset(::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!lock.fd_.valid()) return failErrno("open '" + path + "'");
    while (::flock(lock.fd_.get(), LOCK_EX | LOCK_NB) < 0) {
      if (errno == EWOULDBLOCK) {
        return fail(Code::kFailedPrecondition,
                    "environment " + name + " is being built now: wait for that build to end");
      }
      if (errno != EINTR) return failErrno("lock '" + path + "'");
    }
    return lock;
  }

 private:
  UniqueFd fd_;
};

// True when a build of `name` in store directory `root` holds its lock now.
bool buildRunning(const std::string& root, const std::string& name) {
  UniqueFd fd(::open((root + "/." + name + ".lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return false;
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;
  return errno == EWOULDBLOCK;
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Removes what is in `dir` (links removed, never followed), keeping `dir` itself.
Result<void> emptyDir(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::filesystem::remove_all(entry.path(), ec);
    if (ec) return fail(Code::kIo, "remove '" + entry.path().string() + "': " + ec.message());
  }
  return {};
}

// Builds environment `name` in `dir` with `steps`, from an empty directory: whatever a build
// that failed or was killed left there goes first, and what this one leaves when it fails too
// (and the directory, where it may: a confined build's is the one place it may write).
Result<void> buildInto(const std::string& dir, const std::string& name,
                       const std::function<Result<void>()>& steps) {
  Result<void> built = makeDirs(dir);
  if (built) built = emptyDir(dir);
  if (built) built = steps();
  if (built) return {};
  (void)emptyDir(dir);
  (void)::rmdir(dir.c_str());
  return fail(built.error().code, "environment " + name + ": " + built.error().message);
}

// The name of the requirement `line` ("Termcolor==3.3.0" -> "termcolor"), as pip compares them.
std::string packageName(const std::string& line) {
  std::string name;
  for (char c : line) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') break;
    name.push_back(c == '_' || c == '.' ? '-' : static_cast<char>(std::tolower(c)));
  }
  return name;
}

// What the new environment at `python` sees of its base (its layers and, on the pytorch preset,
// Debian's packages) as pip constraints, PKG==VERSION, leaving out the packages `install` names:
// those the user asked to change. Versions that are not PEP 440 (which pip would refuse in a
// constraints file) are left out too.
Result<std::vector<std::string>> basePackages(const std::string& python,
                                              const std::vector<std::string>& install) {
  COHORT_ASSIGN(std::string listed,
                ask(python,
                    "import importlib.metadata as m, re\n"
                    "try:\n    from pip._vendor.packaging.version import Version\n"
                    "except ImportError:\n    from packaging.version import Version\n"
                    "for d in m.distributions():\n"
                    "    name = d.metadata['Name'] or ''\n"
                    "    try:\n        Version(d.version)\n    except Exception:\n"
                    "        continue\n"
                    "    if re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9._-]*', name):\n"
                    "        print(name + '==' + d.version)\n"));
  std::set<std::string> asked;
  for (const std::string& line : install) asked.insert(packageName(line));
  std::set<std::string> seen;
  std::vector<std::string> kept;
  for (const std::string& line : split(listed, '\n')) {
    const std::string name = packageName(line);
    if (name.empty() || line.find("==") == std::string::npos || asked.count(name) ||
        !seen.insert(name).second) {
      continue;  // the first of a name on sys.path is the one Python imports
    }
    kept.emplace_back(trim(line));
  }
  return kept;
}

}  // namespace

const std::vector<Preset>& presets() {
  // What tensorflow-cpu 2.21.0 and mindspore 2.10.0 resolve to, together (one list serves both:
  // a constraint applies only to what is installed). numpy stays below 2: mindspore 2.10.0
  // declares numpy>=1.25, but one of its modules is built against NumPy 1.x and fails at the
  // first op under numpy 2.x.
  static const std::vector<std::string> kPyPiPins = {"numpy==1.26.4",
                                                     "protobuf==7.36.2",
                                                     "keras==3.15.1",
                                                     "ml_dtypes==0.5.4",
                                                     "absl-py==2.5.1",
                                                     "asttokens==3.0.2",
                                                     "astunparse==1.6.3",
                                                     "certifi==2026.10.19.post1",
                                                     "charset-normalizer==3.5.3",
                                                     "dill==0.4.1",
                                                     "flatbuffers==25.12.19",
                                                     "gast==0.7.0",
                                                     "google-pasta==0.2.0",
                                                     "grpcio==1.85.3",
                                                     "h5py==3.14.0",
                                                     "idna==3.20",
                                                     "libclang==18.1.1",
                                                     "markdown-it-py==4.3.0",
                                                     "mdurl==0.1.2",
                                                     "namex==0.1.0",
                                                     "opt_einsum==3.4.0",
                                                     "optree==0.20.0",
                                                     "packaging==26.4",
                                                     "pillow==13.0.0",
                                                     "psutil==7.2.2",
                                                     "Pygments==2.21.0",
                                                     "requests==2.34.2",
                                                     "rich==15.0.0",
                                                     "safetensors==0.8.0",
                                                     "scipy==1.17.1",
                                                     "six==1.17.0",
                                                     "termcolor==3.3.0",
                                                     "typing_extensions==4.16.0",
                                                     "urllib3==2.8.0",
                                                     "wheel==0.48.0",
                                                     "wrapt==2.5.2"};
  static const std::vector<Preset> kPresets = {
      {"system", "the interpreter on PATH, as it is", "", false, {}, {}, {}},
      {"pytorch",
       "CPU PyTorch from Debian's python3-torch, with scikit-learn and NumPy",
       "/usr/bin/python3",
       true,
       {},
       {},
       {"torch", "numpy", "sklearn"}},
      // DeepSpeed 0.15.4 is the newest that runs on Debian's torch 1.13 (0.16 calls torch 2.0's
      // hooks); torch itself, NumPy, packaging and psutil are Debian's.
      {"deepspeed",
       "CPU DeepSpeed from PyPI on Debian's python3-torch",
       "/usr/bin/python3",
       true,
       {"deepspeed==0.15.4"},
       {"annotated-types==0.8.0", "einops==0.8.2", "hjson==3.1.0", "msgpack==1.2.4",
        "ninja==1.13.2", "py-cpuinfo==9.0.0", "pydantic==2.14.4", "pydantic_core==2.50.5",
        "tqdm==4.70.1", "typing-inspection==0.4.5", "typing_extensions==4.16.0"},
       {"deepspeed", "torch"}},
      // JupyterLab 4 for a session's lab (docs/sessions.md) over Debian's torch; its kernel is
      // Debian's python3-ipykernel (with jupyter_client, pyzmq, tornado and IPython), the rest
      // is what jupyterlab 4.6.6 resolves to from PyPI beside it.
      {"jupyter",
       "JupyterLab 4 from PyPI on Debian's python3-torch and python3-ipykernel",
       "/usr/bin/python3",
       true,
       {"jupyterlab==4.6.6"},
       {"anyio==4.16.0", "argon2-cffi==25.1.0", "argon2-cffi-bindings==26.2.0", "arrow==1.4.0",
        "async-lru==2.4.0", "babel==2.19.0", "beautifulsoup4==4.15.0", "bleach==6.4.0",
        "certifi==2026.10.19.post1", "cffi==2.1.1", "defusedxml==0.7.1", "fqdn==1.6.0",
        "h11==0.16.0", "httpcore==1.0.9", "httpx==0.29.0", "isoduration==20.11.0",
        "Jinja2==3.1.6", "json5==0.17.3", "jsonpointer==3.12", "jsonschema==4.26.0",
        "jsonschema-specifications==2025.9.1", "jupyter-events==0.12.1", "jupyter-lsp==2.3.1",
        "jupyter_builder==1.3.1", "jupyter_server==2.21.1", "jupyter_server_terminals==0.5.4",
        "jupyterlab_pygments==0.3.0", "jupyterlab_server==2.28.1", "lark==1.3.1",
        "MarkupSafe==3.0.4", "mistune==3.4.0", "nbconvert==7.17.2", "nbformat==5.11.1",
        "notebook_shim==0.2.4", "overrides==7.7.0", "packaging==26.4", "pandocfilters==1.5.1",
        "prometheus_client==0.26.0", "pycparser==3.12", "python-json-logger==4.2.0",
        "referencing==0.37.0", "requests==2.34.2", "rfc3339-validator==0.1.4",
        "rfc3986-validator==0.1.1", "rfc3987-syntax==1.1.0", "rpds-py==2026.9.1",
        "Send2Trash==2.2.0", "soupsieve==2.10", "terminado==0.18.1", "tinycss2==1.5.1",
        "traitlets==5.16.1", "typing_extensions==4.16.0", "tzdata==2026.6", "uri-template==1.3.0",
        "webcolors==25.10.0", "webencodings==0.6.1", "websocket-client==1.9.2"},
       {"jupyterlab", "jupyter_server", "ipykernel", "torch"}},
      {"tensorflow",
       "CPU TensorFlow from PyPI",
       "python3",
       false,
       {"tensorflow-cpu==2.21.0", "numpy==1.26.4"},
       kPyPiPins,
       {"tensorflow", "numpy"}},
      {"mindspore",
       "CPU MindSpore from PyPI",
       "python3",
       false,
       {"mindspore==2.10.0", "numpy==1.26.4"},
       kPyPiPins,
       {"mindspore", "numpy"}},
  };
  return kPresets;
}

const Preset* findPreset(const std::string& name) {
  for (const Preset& p : presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> storeDirs(const std::string& data_root) {
  const char* list = std::getenv("COHORT_ENVS");
  std::vector<std::string> dirs;
  char cwd[4096];
  const std::string here = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  for (const std::string& dir : split(list ? list : "", ':')) {
    if (dir.empty()) continue;
    dirs.push_back(dir[0] == '/' ? dir : here + "/" + dir);
  }
  if (dirs.empty()) dirs.push_back(data_root + "/envs");
  return dirs;
}

Result<Environment> Store::get(const std::string& name) const {
  Environment e;
  e.name = name;
  const Preset* preset = findPreset(name);
  if (preset) {
    e.preset = true;
    e.requirements = preset->requirements;
    e.summary = preset->summary;
    e.hash = presetHash(*preset);
    if (name == "system") {
      e.built = true;
      return e;
    }
    e.store = dirs_.back();
  } else if (!validName(name)) {
    return fail(Code::kInvalidArgument, "'" + name.substr(0, 64) +
                                            "' is not an environment name (letters, digits, '-', "
                                            "'_' and '.', at most 64)");
  } else {
    e.store = dirs_.front();
    for (const std::string& dir : dirs_) {
      if (::access((dir + "/" + name + "/env.json").c_str(), F_OK) == 0) {
        e.store = dir;
        break;
      }
    }
  }
  e.dir = e.store + "/" + name;
  e.venv = e.dir + "/venv";
  auto def = readDefinition(e.dir);
  if (def) {
    e.built = true;
    e.from = text(*def, "from");
    if (!e.preset) e.requirements = stringItems(def->value("requirements", Json::array()));
    e.python = e.venv + "/bin/python";
    e.python_version = text(*def, "python_version");
    const Json packages = def->value("packages", Json::object());
    for (auto it = packages.begin(); packages.is_object() && it != packages.end(); ++it) {
      if (it.value().is_string()) e.packages[it.key()] = it.value().get<std::string>();
    }
    if (!e.preset) {
      e.summary = "on " + e.from;
      e.hash = text(*def, "hash");  // "" for one built before environments had hashes
    }
    return e;
  }
  if (e.preset) {
    e.incomplete = isDirectory(e.dir);
    return e;
  }
  for (const Environment& left : unfinished()) {
    if (left.name != name) continue;
    return fail(Code::kFailedPrecondition,
                "environment " + name + " was not built to the end (" + left.dir +
                    " has no env.json: its build was killed, or is running now); cohort env rm " +
                    name + " removes what it left, cohort env create makes it again");
  }
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  for (const std::string& saved : savedNames()) names.push_back(saved);
  return fail(Code::kNotFound, "no environment '" + name + "' (there are: " + join(names, ", ") +
                                   "; cohort env create makes one)");
}

std::vector<std::string> Store::savedNames() const {
  std::vector<std::string> saved;
  for (const std::string& dir : dirs_) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (findPreset(name) || !validName(name)) continue;
      if (::access((entry.path() / "env.json").c_str(), F_OK) == 0) saved.push_back(name);
    }
  }
  std::sort(saved.begin(), saved.end());
  saved.erase(std::unique(saved.begin(), saved.end()), saved.end());
  return saved;
}

std::vector<Environment> Store::unfinished() const {
  const std::vector<std::string> saved = savedNames();
  std::vector<Environment> out;
  for (const std::string& dir : dirs_) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (findPreset(name) || !validName(name) || !entry.is_directory(ec) || entry.is_symlink(ec))
        continue;
      if (std::binary_search(saved.begin(), saved.end(), name)) continue;
      if (std::any_of(out.begin(), out.end(), [&](const Environment& e) { return e.name == name; }))
        continue;
      Environment e;
      e.name = name;
      e.store = dir;
      e.dir = dir + "/" + name;
      e.venv = e.dir + "/venv";
      e.incomplete = true;
      e.summary = buildRunning(dir, name)
                      ? "being built now"
                      : "an unfinished build (it was killed): cohort env rm " + name;
      out.push_back(std::move(e));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Environment& a, const Environment& b) { return a.name < b.name; });
  return out;
}

std::vector<Environment> Store::list() const {
  std::vector<Environment> out;
  for (const Preset& p : presets()) {
    if (auto e = get(p.name)) out.push_back(*e);
  }
  for (const std::string& name : savedNames()) {
    if (auto e = get(name)) out.push_back(*e);
  }
  for (Environment& e : unfinished()) out.push_back(std::move(e));
  return out;
}

Result<Environment> Store::ensureBuilt(const std::string& name, const Progress& progress) {
  COHORT_ASSIGN(Environment e, get(name));
  if (e.built) return e;
  if (!e.preset) return e;  // a saved one without env.json is reported by get()
  COHORT_ASSIGN(BuildLock lock, BuildLock::take(e.store, name));
  COHORT_ASSIGN(e, get(name));  // built meanwhile by another job
  if (e.built) return e;
  const Preset& p = *findPreset(name);
  COHORT_TRY(buildInto(e.dir, name, [&]() -> Result<void> {
    const char* path = std::getenv("PATH");
    COHORT_ASSIGN(std::string python,
                  proc::findProgram(p.python, path ? path : "/usr/bin:/bin", "/"));
    if (progress) progress("making a virtual environment with " + python);
    std::vector<std::string> venv = {python, "-m", "venv"};
    if (p.system_site_packages) venv.push_back("--system-site-packages");
    venv.push_back(e.venv);
    COHORT_TRY(runShowing(venv, progress));
    const std::string pip_python = e.venv + "/bin/python";
    if (!p.requirements.empty()) {
      if (progress) progress("installing " + join(p.requirements, " "));
      std::vector<std::string> pip = {pip_python, "-m", "pip", "install", "--progress-bar", "off"};
      if (!p.constraints.empty()) {
        const std::string constraints = e.dir + "/constraints.txt";
        COHORT_TRY(writeFileAtomic(constraints, join(p.constraints, "\n") + "\n", false));
        pip.insert(pip.end(), {"-c", constraints});
      }
      pip.insert(pip.end(), p.requirements.begin(), p.requirements.end());
      COHORT_TRY(runShowing(pip, progress));
    }
    // What it holds: its own packages pinned, the key modules' versions.
    COHORT_ASSIGN(auto own, ownPackages(pip_python));
    const auto& [site, frozen] = own;
    Json packages = Json::object();
    for (const std::string& module : p.modules) {
      if (progress) progress("checking that " + module + " imports");
      COHORT_ASSIGN(std::string version, ask(pip_python, "import " + module + "; print(getattr(" +
                                                             module + ", '__version__', '?'))"));
      // The last line: a module may log to stdout as it is imported (DeepSpeed does).
      const size_t last = version.find_last_of('\n', version.find_last_not_of("\n "));
      packages[module] = last == std::string::npos ? version : version.substr(last + 1);
    }
    COHORT_ASSIGN(std::string version,
                  ask(pip_python, "import platform; print(platform.python_version())"));
    COHORT_TRY(writeFileAtomic(e.dir + "/lock.txt", frozen + "\n", true));
    Json def = {{"name", name},
                {"from", ""},
                {"requirements", p.requirements},
                {"python", pip_python},
                {"python_version", version},
                {"packages", packages},
                {"site_packages", site},
                {"hash", presetHash(p)}};
    return writeFileAtomic(e.dir + "/env.json", def.dump(2) + "\n", true);  // last: now built
  }));
  return get(name);
}

Result<Environment> Store::create(const CreateRequest& request, const Progress& progress) {
  const std::string& name = request.name;
  const std::string& from = request.from;
  COHORT_TRY(checkSavedName(name));
  if (from.empty()) return fail(Code::kInvalidArgument, "--from: name the environment to build on");
  std::vector<std::string> wanted = request.requirements;
  if (!request.requirements_file.empty()) {
    COHORT_ASSIGN(std::string text, readFile(request.requirements_file));
    for (std::string line : split(text, '\n')) {
      line = std::string(trim(line.substr(0, line.find('#'))));
      if (!line.empty()) wanted.push_back(line);
    }
  }
  std::vector<std::string> pins;
  if (!request.lock_file.empty()) {
    COHORT_ASSIGN(std::string text, readFile(request.lock_file));
    auto parsed = parseLock(text);
    if (!parsed) return withContext(parsed.error(), "--lock " + request.lock_file);
    pins = *parsed;
  }
  COHORT_ASSIGN(Environment base, ensureBuilt(from, progress));
  if (base.venv.empty()) {
    return fail(Code::kInvalidArgument,
                "--from system: build on a preset with a virtual "
                "environment (pytorch, deepspeed, jupyter, tensorflow, mindspore) or a saved one");
  }
  COHORT_ASSIGN(BuildLock lock, BuildLock::take(root(), name));
  if (::access((root() + "/" + name + "/env.json").c_str(), F_OK) == 0) {
    return fail(Code::kAlreadyExists,
                "environment " + name + " exists (cohort env rm " + name + " first)");
  }
  const std::string dir = root() + "/" + name, venv = dir + "/venv";
  COHORT_TRY(buildInto(dir, name, [&]() -> Result<void> {
    COHORT_ASSIGN(Json base_def, readDefinition(base.dir));
    // The base's interpreter, through its venv's own link: the new one sees what the base sees.
    // That includes pip, when the base has it: then the new venv needs no pip of its own, whose
    // installation (ensurepip) would take longer than most builds' own packages.
    COHORT_ASSIGN(std::string answer,
                  ask(base.python,
                      "import sys, importlib.util; print(sys._base_executable); "
                      "print(importlib.util.find_spec('pip') is not None)"));
    const std::vector<std::string> lines = split(answer, '\n');
    const std::string real(trim(lines.front()));
    const bool base_has_pip = lines.size() == 2 && trim(lines[1]) == "True";
    std::vector<std::string> make = {real, "-m", "venv"};
    if (base_has_pip) make.push_back("--without-pip");
    const Preset* root_preset = findPreset(base.preset ? base.name : text(base_def, "root"));
    if (root_preset && root_preset->system_site_packages) make.push_back("--system-site-packages");
    make.push_back(venv);
    if (progress) progress("making a virtual environment on " + from);
    COHORT_TRY(runShowing(make, progress));
    const std::string python = venv + "/bin/python";
    COHORT_ASSIGN(std::string site,
                  ask(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"));
    // The base's packages, visible behind this one's own (a .pth line joins sys.path).
    std::vector<std::string> all_layers = {text(base_def, "site_packages")};
    for (const std::string& below : stringItems(base_def.value("layers", Json::array()))) {
      all_layers.push_back(below);
    }
    COHORT_TRY(writeFileAtomic(site + "/_cohort_base.pth", join(all_layers, "\n") + "\n", false));
    if (base_has_pip) {
      // `pip` in this venv is the layers' pip, run by this venv's interpreter: it installs here.
      const std::string launcher = "#!" + python +
                                   "\nimport sys\nfrom pip._internal.cli.main import main\n"
                                   "sys.exit(main())\n";
      for (const char* name : {"pip", "pip3"}) {
        COHORT_TRY(writeFileAtomic(venv + "/bin/" + name, launcher, false, 0755));
      }
    }
    const std::vector<std::string>& install = pins.empty() ? wanted : pins;
    if (!install.empty()) {
      if (progress) {
        progress("installing " + join(install, " ") + (pins.empty() ? "" : " (the lock file)"));
      }
      std::vector<std::string> pip = {python, "-m", "pip", "install", "--progress-bar", "off"};
      COHORT_ASSIGN(std::vector<std::string> kept, basePackages(python, install));
      if (!kept.empty()) {
        const std::string constraints = dir + "/base-constraints.txt";
        COHORT_TRY(writeFileAtomic(constraints, join(kept, "\n") + "\n", false));
        pip.insert(pip.end(), {"-c", constraints});
      }
      pip.insert(pip.end(), install.begin(), install.end());
      auto installed = runShowing(pip, progress);
      if (!installed && !kept.empty()) {
        return withContext(installed.error(),
                           "the packages of " + from + " stay as they are (pip constraints, " +
                               dir + "/base-constraints.txt), and a package asked for wants " +
                               "another version of one of them (pip names both below); to " +
                               "replace it, ask for that version too (--pip torch==2.1.0)");
      }
      COHORT_TRY(installed);
    }
    COHORT_ASSIGN(auto own, ownPackages(python));
    const std::string& frozen = own.second;
    COHORT_ASSIGN(std::string version,
                  ask(python, "import platform; print(platform.python_version())"));
    Json packages = Json::object();
    for (const std::string& line : split(frozen, '\n')) {
      auto eq = line.find("==");
      if (eq != std::string::npos) packages[line.substr(0, eq)] = line.substr(eq + 2);
    }
    // Its hash: of the lock file it was built from, or of what it resolved to.
    std::vector<std::string> locked = pins;
    if (locked.empty()) {
      auto resolved = parseLock(frozen);
      if (resolved) locked = *resolved;
    }
    COHORT_TRY(writeFileAtomic(dir + "/lock.txt", frozen + "\n", true));
    Json def = {{"name", name},
                {"from", from},
                {"root", root_preset ? root_preset->name : ""},
                {"requirements", wanted},
                {"python", python},
                {"python_version", version},
                {"packages", packages},
                {"site_packages", site},
                {"layers", all_layers},
                {"hash", savedHash(base.hash, wanted, locked)}};
    return writeFileAtomic(dir + "/env.json", def.dump(2) + "\n", true);  // last: now built
  }));
  return get(name);
}

Result<Environment> Store::rebuild(const std::string& name, const Progress& progress) {
  COHORT_ASSIGN(Environment e, get(name));
  if (e.preset) {
    COHORT_TRY(remove(name));
    return ensureBuilt(name, progress);
  }
  COHORT_ASSIGN(std::string lock, readBuiltFile(e.dir + "/lock.txt", kMaxLockBytes));
  const std::string saved = e.store + "/." + name + ".lock.txt";
  COHORT_TRY(writeFileAtomic(saved, lock, false));
  COHORT_TRY(remove(name));
  Store here({e.store});
  for (const std::string& dir : dirs_) {
    if (dir != e.store) here.dirs_.push_back(dir);
  }
  auto made = here.create({name, e.from, e.requirements, "", saved}, progress);
  ::unlink(saved.c_str());
  return made;
}

Result<void> Store::remove(const std::string& name) {
  for (const Environment& left : unfinished()) {
    if (left.name != name) continue;
    // What a killed build left: nothing is built on it, and a build running now keeps it.
    COHORT_ASSIGN(BuildLock lock, BuildLock::takeIfFree(left.store, name));
    std::error_code ec;
    std::filesystem::remove_all(left.dir, ec);
    if (ec) return fail(Code::kIo, "remove '" + left.dir + "': " + ec.message());
    return {};
  }
  COHORT_ASSIGN(Environment e, get(name));
  if (e.name == "system")
    return fail(Code::kInvalidArgument, "system is not built: nothing to remove");
  for (const Environment& other : list()) {
    if (other.from == name) {
      return fail(Code::kFailedPrecondition,
                  "environment " + other.name + " is built on " + name + ": remove it first");
    }
  }
  COHORT_ASSIGN(BuildLock lock, BuildLock::take(e.store, name));
  // env.json first: from then on the environment is not built, whatever is left.
  if (::unlink((e.dir + "/env.json").c_str()) < 0 && errno != ENOENT) {
    return failErrno("remove '" + e.dir + "/env.json'");
  }
  std::error_code ec;
  std::filesystem::remove_all(e.dir, ec);
  if (ec) return fail(Code::kIo, "remove '" + e.dir + "': " + ec.message());
  return {};
}

Result<std::vector<plan::EnvironmentLayer>> Store::layers(const std::string& name) const {
  std::vector<plan::EnvironmentLayer> out;
  std::string at = name;
  for (int depth = 0; !at.empty(); ++depth) {
    COHORT_ASSIGN(Environment e, get(at));
    if (e.name == "system") break;
    if (!e.built) {
      return fail(Code::kFailedPrecondition, "environment " + e.name + " is not built");
    }
    if (depth > 64) {
      return fail(Code::kFailedPrecondition, "environment " + name + ": more than 64 layers");
    }
    plan::EnvironmentLayer layer{e.name, e.store, e.hash, e.preset, e.from, {}, ""};
    if (!e.preset) {
      layer.requirements = e.requirements;
      COHORT_ASSIGN(layer.lock, readBuiltFile(e.dir + "/lock.txt", kMaxLockBytes));
    }
    out.insert(out.begin(), std::move(layer));
    at = e.from;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> rankVariables(const Environment& e,
                                                               const std::string& path) {
  if (e.venv.empty()) return {};
  return {{"VIRTUAL_ENV", e.venv}, {"PATH", e.venv + "/bin" + (path.empty() ? "" : ":" + path)}};
}

int64_t diskUsage(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<int64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

Result<void> checkSavedName(const std::string& name) {
  if (findPreset(name) || !validName(name)) {
    return fail(Code::kInvalidArgument,
                "'" + name.substr(0, 64) + "' cannot name a saved environment" +
                    (findPreset(name) ? ": it is a preset"
                                      : " (1-64 letters, digits, '-', '_' and '.', not starting "
                                        "with '.' or '-')"));
  }
  return {};
}

Result<void> checkRequirement(const std::string& requirement) {
  // NAME [EXTRAS] [SPECIFIER, ...] [; MARKER]: PEP 508 by name, without its URL form.
  static const std::regex kRequirement(
      R"(\s*[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\s*)"
      R"((\[\s*[A-Za-z0-9][A-Za-z0-9._-]*(\s*,\s*[A-Za-z0-9][A-Za-z0-9._-]*)*\s*\])?\s*)"
      R"(((===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)"
      R"((,\s*(===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?)"
      R"((;[A-Za-z0-9_.'" <>=!~()]*)?)");
  if (requirement.size() <= kMaxRequirementBytes && std::regex_match(requirement, kRequirement)) {
    return {};
  }
  std::string shown = requirement.substr(0, 64) + (requirement.size() > 64 ? "..." : "");
  return fail(Code::kInvalidArgument,
              "'" + shown +
                  "' is not a requirement of a package by name: give NAME[EXTRAS][SPECIFIERS]"
                  "[; MARKER] (e.g. termcolor==3.3.0), at most " +
                  std::to_string(kMaxRequirementBytes) +
                  " bytes; URLs, paths and pip options are not taken");
}

Result<std::vector<std::string>> parseLock(const std::string& text) {
  static const std::regex kPin(R"([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?==[A-Za-z0-9.+!_-]+)");
  std::vector<std::string> pins;
  int number = 0;
  for (const std::string& raw : split(text, '\n')) {
    ++number;
    const std::string line(trim(raw));
    if (line.empty() || line[0] == '#') continue;
    if (line.size() > kMaxRequirementBytes || !std::regex_match(line, kPin)) {
      return fail(Code::kInvalidArgument,
                  "line " + std::to_string(number) + ": '" + line.substr(0, 64) +
                      "' is not a pin (PKG==VERSION, as pip freeze writes it; a package "
                      "installed from a URL or a path cannot be built elsewhere)");
    }
    pins.push_back(line);
  }
  return pins;
}

std::string presetHash(const Preset& p) {
  return sha256Hex("cohort preset 1\n" + p.name + "\n" + p.python + "\n" +
                   (p.system_site_packages ? "system-site-packages\n" : "\n") +
                   join(p.requirements, " ") + "\n" + join(p.constraints, " ") + "\n");
}

std::string savedHash(const std::string& base_hash, const std::vector<std::string>& requirements,
                      const std::vector<std::string>& pins) {
  // Pins in pip's order of names, so that two freezes of one set hash alike.
  std::vector<std::string> sorted = pins;
  std::sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) {
    return packageName(a) < packageName(b);
  });
  return sha256Hex("cohort environment 1\nbase " + base_hash + "\nrequirements " +
                   join(requirements, " ") + "\nlock\n" + join(sorted, "\n") + "\n");
}

Result<std::string> readBuiltFile(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) return failErrno("read '" + path + "'");
    return fail(Code::kInvalidArgument, "'" + path + "' is not a regular file");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    return fail(Code::kInvalidArgument, "'" + path + "' is not a regular file with one name");
  }
  if (static_cast<size_t>(st.st_size) > max) {
    return fail(Code::kInvalidArgument,
                "'" + path + "' is over " + formatSize(static_cast<double>(max)));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failErrno("read '" + path + "'");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace cohort::env
