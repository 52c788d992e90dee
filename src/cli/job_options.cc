#include "cli/job_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "agent/rank_env.h"
#include "backends/local.h"
#include "cli/torchrun_flags.h"
#include "env/environments.h"
#include "env/images.h"
#include "env/python_check.h"
#include "job/id.h"
#include "job/layout.h"
#include "storage/place.h"
#include "storage/s3.h"
#include "storage/transfer.h"
#include "storage/uri.h"
#include "util/fd.h"
#include "util/text.h"

extern char** environ;

namespace cohort::cli {

namespace {

std::string currentDir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? buf : ".";
}

std::string dirName(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<void> splitKeyValue(const std::string& flag, const std::string& text, spec::KeyValues& out) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return fail(Code::kInvalidArgument, flag + ": expected KEY=VALUE, got '" + text + "'");
  }
  std::string key = text.substr(0, eq);
  for (auto& kv : out) {
    if (kv.first == key) {
      kv.second = text.substr(eq + 1);
      return {};
    }
  }
  out.emplace_back(key, text.substr(eq + 1));
  return {};
}

// The job file, read no further than parseJobFile's limit, so that a huge file (or -f
// /dev/zero) is refused without being read.
Result<std::string> readJobFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  auto failed = [](const Error& e) {
    return fail(Code::kInvalidArgument, "job file: " + e.message);
  };
  if (!fd.valid()) return failed(failErrno("open '" + path + "'").value());
  std::string out;
  char buf[65536];
  while (out.size() <= spec::kMaxJobFileBytes) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed(failErrno("read '" + path + "'").value());
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
  return fail(Code::kInvalidArgument,
              path + ":1: job: the job file is larger than " +
                  std::to_string(spec::kMaxJobFileBytes) +
                  " bytes, the most it may have (1 MiB: keep data and long lists in files the "
                  "job reads)");
}

}  // namespace

std::string nameFromCommand(const std::vector<std::string>& command) {
  // The words of every argument, so that a shell's one string counts word by word.
  std::vector<std::string> words;
  for (const std::string& arg : command) {
    std::istringstream in(arg);
    for (std::string w; in >> w;) words.push_back(w);
  }
  auto stem = [](const std::string& w) {
    std::string base = w.substr(w.rfind('/') + 1);
    return base.substr(0, base.find('.'));
  };
  auto hasLetter = [](const std::string& w) {
    return std::any_of(w.begin(), w.end(), [](unsigned char c) { return std::isalpha(c); });
  };
  std::string word = words.empty() ? "" : stem(words[0]);
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w[0] != '-' && w.find('.') != std::string::npos && w.find('=') == std::string::npos &&
        hasLetter(stem(w))) {
      word = stem(w);
      break;
    }
  }
  std::string name;
  for (char c : word) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_';
    if (ok) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  name = name.substr(0, kDerivedNameBytes);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name.empty() ? "job" : name;
}

namespace {

// The PATH of the ranks' environment: the job's (an environment's bin/ first), else this
// process's for ranks that inherit it, else the base of a rank in the sandbox (agent/rank_env.h).
std::string ranksPath(const spec::JobSpec& s, bool sandboxed) {
  for (const auto& [k, v] : s.env) {
    if (k == "PATH") return v;
  }
  const char* own = std::getenv("PATH");
  if (sandboxed) {
    for (const auto& [name, value] : agent::kBaseVariables) {
      if (std::string(name) == "PATH") return value;
    }
  }
  return own ? own : "/usr/bin:/bin";
}

// --debug, --post-mortem and --pdb over the job file's debug: field.
Result<void> applyDebugFlags(const JobOptions& o, spec::JobSpec& s) {
  if (o.debug.empty() && !o.post_mortem && !o.pdb) return {};
  spec::Debug& d = s.debug;
  spec::Origin& origin = s.origin;
  if (!d.enabled)
    origin.where["debug"] = o.debug.empty() ? (o.pdb ? "--pdb" : "--post-mortem") : "--debug";
  d.enabled = true;
  if (!o.debug.empty()) {
    d.all = o.debug == "all";
    d.ranks.clear();
    if (!d.all && o.debug != "none") {
      auto ranks = parseRankList(o.debug);
      if (!ranks) return withContext(ranks.error(), "--debug");
      d.ranks.assign(ranks->begin(), ranks->end());
    }
    origin.setByFlag("debug.ranks", "--debug");
  }
  if (o.post_mortem) {
    d.post_mortem = true;
    origin.setByFlag("debug.post_mortem", "--post-mortem");
  }
  if (o.pdb) {
    d.pdb = true;
    if (o.debug.empty()) origin.setByFlag("debug.ranks", "--pdb");
  }
  return {};
}

// The ranks' command as torchrun would run the words after its flags: a module with -m
// (python3 -m MODULE ...), a Python script with --run-path or when it is the first word of a
// command given without "--" (`cohort run train.py` as `torchrun train.py`: python3 train.py),
// and as it is with --no-python or after "--" (cohort's own form: the exact command).
std::vector<std::string> commandAsTorchrunRunsIt(const JobOptions& o) {
  std::vector<std::string> command = o.command;
  const bool script = o.run_path || (!o.no_python && !o.command_after_dashes &&
                                     command[0].ends_with(".py"));
  if (o.module) {
    command.insert(command.begin(), {"python3", "-m"});
  } else if (script) {
    command.insert(command.begin(), "python3");
  }
  return command;
}


// Setting what a flag says: `flag` as the command line spelled it (for messages), `value` its
// value ("" for a switch).
using Apply = std::function<Result<void>(JobOptions&, const std::string& flag,
                                         const std::string& value)>;

// Where a flag shows in help: the "Job:" section of run, plan and submit, or a command's own
// "Output:"/"Submit:" section, or nowhere (flags cohort passes to itself, torchrun's).
enum class Section { kJob, kOutput, kHidden };

struct JobFlag {
  FlagSpec spec;
  Apply apply;
  Section section = Section::kJob;
  // For Section::kOutput, the commands whose help shows it: "run plan submit".
  std::string shown_in;
  // Why cohort submit refuses it ("" when a server's job takes it): a job the server runs has
  // its own data root, sandbox, ids and no terminal.
  std::string not_submitted;
};

Apply text(std::string JobOptions::*field) {
  return [field](JobOptions& o, const std::string&, const std::string& v) -> Result<void> {
    o.*field = v;
    return {};
  };
}
Apply each(std::vector<std::string> JobOptions::*field) {
  return [field](JobOptions& o, const std::string&, const std::string& v) -> Result<void> {
    (o.*field).push_back(v);
    return {};
  };
}
Apply yes(bool JobOptions::*field) {
  return [field](JobOptions& o, const std::string&, const std::string&) -> Result<void> {
    o.*field = true;
    return {};
  };
}
Apply integer(int JobOptions::*field, int min) {
  return [field, min](JobOptions& o, const std::string& flag,
                      const std::string& v) -> Result<void> {
    auto n = parseInt(v);
    if (!n || *n < min) {
      return fail(Code::kInvalidArgument,
                  flag + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
    }
    o.*field = *n;
    return {};
  };
}

Result<void> procsPerNode(JobOptions& o, const std::string& flag, const std::string& v) {
  // gpu, as torchrun has it: one per GPU (cohort's auto: 1 without GPUs); cpu: one per CPU of
  // this machine.
  if (v == "auto" || v == "gpu") {
    o.procs_per_node = spec::kAutoProcs;
  } else if (v == "cpu") {
    o.procs_per_node = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  } else {
    return integer(&JobOptions::procs_per_node, 1)(o, flag, v);
  }
  return {};
}

// A server runs its jobs where its own backend puts them.
constexpr const char* kHostsNotSubmitted =
    "a server's jobs run where the server's backend puts them (a server started with "
    "--backend ssh --hosts places them on its hosts; cohort run --hosts runs them from here)";

// cohort's own flags of run, plan and submit, in the order of their help.
const std::vector<JobFlag>& ownJobFlags() {
  using O = JobOptions;
  static const std::vector<JobFlag> kFlags = {
      {{"--file", "-f", "FILE", "job file (YAML or JSON); flags below override its fields"},
       text(&O::file)},
      {{"--name", "", "NAME",
        "job name (default: from the file, else the script's or program's name, cut to 40 "
        "characters)"},
       text(&O::name)},
      {{"--framework", "", "NAME",
        "pytorch (default) | mindspore | tensorflow | mpi | deepspeed | generic (generic sets "
        "only the COHORT_* variables)"},
       text(&O::framework)},
      {{"--launcher", "", "NAME",
        "direct (default): cohort starts every rank; torchrun: one torchrun per node; spawn: one "
        "process per node with --init_method --rank --world_size (mp.spawn); mpirun: one mpirun "
        "(default for mpi); preload: one Python process per node imports `preload` (torch) once, "
        "then forks every rank of the node from it"},
       text(&O::launcher)},
      {{"--preload", "", "MOD[,MOD]",
        "launcher preload, each node importing these modules once (e.g. torch,numpy; default "
        "torch for pytorch, none for generic)"},
       [](O& o, const std::string&, const std::string& v) -> Result<void> {
         o.preload = v;
         return {};
       }},
      {{"--mode", "", "NAME", "MindSpore: dynamic_cluster (default) | rank_table (Ascend)"},
       text(&O::mode)},
      {{"--compat", "", "NAME",
        "modelarts (default): also set the managed service's MA_* and VC_* variables, and append "
        "--task_name/--task_index to the tasks of a TensorFlow ps/worker job | none: neither"},
       text(&O::compat)},
      {{"--backend", "", "NAME",
        "local (default): nodes simulated on this machine | slurm: the nodes of a Slurm batch "
        "job, one per host (docs/slurm.md) | volcano: the pods of a Volcano Job on Kubernetes, "
        "one per node (cohort run submits it, cohort plan renders it; docs/volcano.md) | ssh: "
        "plain hosts reached over SSH (--hosts, docs/multi-host.md)"},
       text(&O::backend)},
      {{"--hosts", "", "HOST,HOST",
        "run one node on each host, its agent started over ssh (the coordinator stays here); "
        "HOST:N also says its slots (processes)"},
       text(&O::hosts), Section::kJob, "", kHostsNotSubmitted},
      {{"--hostfile", "", "FILE",
        "the hosts, one a line: `host slots=N` (mpirun's and DeepSpeed's format)"},
       text(&O::hostfile), Section::kJob, "", kHostsNotSubmitted},
      {{"--ssh", "", "COMMAND",
        "how hosts are reached (default ssh; e.g. \"ssh -p 2222 -i KEY\"): your config, keys "
        "and agent apply"},
       text(&O::ssh), Section::kJob, "", kHostsNotSubmitted},
      {{"--shared-workdir", "", "",
        "the workdir is at the same path on every host (NFS): no snapshot of it is sent"},
       yes(&O::shared_workdir), Section::kJob, "", kHostsNotSubmitted},
      {{"--nodes", "", "N", "nodes of a single-role job"}, integer(&O::nodes, 1)},
      {{"--nproc-per-node", "--nproc_per_node", "N|auto|gpu|cpu",
        "processes per node (auto, gpu: one per GPU, 1 without GPUs; cpu: one per CPU of this "
        "machine); also --nproc_per_node"},
       procsPerNode},
      {{"--cpus", "", "N",
        "CPUs each process takes (resources.cpus; e.g. 0.5, 2): what a server's scheduler counts "
        "(default 1), and a limit where cgroups allow"},
       text(&O::cpus)},
      {{"--memory", "", "SIZE",
        "memory each process may use (resources.memory; e.g. 2Gi): what a server's scheduler "
        "counts, and a limit where cgroups allow (default: no limit)"},
       text(&O::memory)},
      {{"--gpus", "", "N", "GPUs each process takes (resources.gpus; default 0)"},
       text(&O::gpus)},
      {{"--module", "-m", "",
        "the command's first word is a Python module: python3 -m MODULE ARGS... (torchrun's -m)"},
       yes(&O::module)},
      {{"--run-path", "--run_path", "",
        "the command's first word is a Python script: python3 SCRIPT ARGS... (torchrun's; also "
        "what a first word ending in .py gets without \"--\")"},
       yes(&O::run_path)},
      {{"--no-python", "--no_python", "",
        "the command is a program, run as it is (what a command after \"--\" always is)"},
       yes(&O::no_python)},
      {{"--workdir", "", "DIR", "where ranks run (default: the job file's directory, or here)"},
       text(&O::workdir)},
      {{"--environment", "", "NAME",
        "run every rank in this environment: a preset (system, pytorch, deepspeed, jupyter, tensorflow, "
        "mindspore; built on first use) or one saved with cohort env create; its python3 comes "
        "first on PATH (cohort env ls)"},
       text(&O::environment)},
      {{"--image", "", "REF",
        "run every rank in this container image (environment: {image: REF}): one in podman's "
        "storage, or pulled; locally and on Slurm each rank runs in the image's root file system "
        "with the host's network and the job's directories (needs root); on volcano, the pods' "
        "image"},
       text(&O::image)},
      {{"--namespace", "", "NS",
        "backend volcano: the Kubernetes namespace of the Volcano Job (default: the kubeconfig "
        "context's, else \"default\")"},
       text(&O::kube_namespace)},
      {{"--env", "", "KEY=VALUE", "set a variable for every rank (repeatable)"}, each(&O::env)},
      {{"--hp", "", "KEY=VALUE",
        "hyperparameter, appended to the command as --KEY=VALUE (repeatable)"},
       each(&O::hyperparameters)},
      {{"--max-restarts", "--max_restarts", "N",
        "restart the whole gang up to N times after a failure (default 0)"},
       integer(&O::max_restarts, 0)},
      {{"--grace-period", "", "DUR",
        "stop signal -> SIGKILL delay when stopping ranks (default 30s)"},
       text(&O::grace_period)},
      {{"--stop-signal", "", "SIG",
        "what a graceful stop sends every rank, its notice to checkpoint: SIGTERM (default) | "
        "SIGINT | SIGHUP | SIGQUIT | SIGUSR1 | SIGUSR2"},
       text(&O::stop_signal)},
      {{"--heartbeat-timeout", "", "DUR",
        "a node that says nothing for this long is lost (default 5s)"},
       text(&O::heartbeat_timeout)},
      {{"--max-runtime", "", "DUR", "stop the job after this long (e.g. 2h); exit code 124"},
       text(&O::max_runtime)},
      {{"--hang-timeout", "", "DUR",
        "no rank printed for this long: take every rank's stack, name the one that holds the "
        "others up, exit code 124 (docs/observing.md)"},
       text(&O::hang_timeout)},
      {{"--startup-timeout", "", "DUR",
        "the limit until the first output instead (imports, data loading)"},
       text(&O::startup_timeout)},
      {{"--success", "", "ROLE[,ROLE]",
        "key roles: the job succeeds when all their ranks exit 0"},
       text(&O::success)},
      {{"--debug", "", "RANKS|all|none",
        "these ranks (0, 0,2-3, all) start paused under debugpy, each waiting for a debugger on "
        "a port of its own; a breakpoint() in any rank pauses it the same way, also with none "
        "(docs/debugging.md, cohort debug JOB)"},
       text(&O::debug)},
      {{"--post-mortem", "", "", "a rank whose exception nothing caught waits for a debugger"},
       yes(&O::post_mortem)},
      {{"--pdb", "", "", "with --debug N: rank N runs pdb on this terminal instead"},
       yes(&O::pdb), Section::kJob, "",
       "a server's job has no terminal: attach a debugger (cohort debug JOB)"},
      {{"--data-root", "", "DIR",
        "where job directories go (default $COHORT_DATA_ROOT or ~/.cohort)"},
       text(&O::data_root), Section::kJob, "", "the server keeps jobs under its own data root"},
      {{"--isolate", "", "",
        "run ranks under bubblewrap: other jobs' directories and the store are not visible to "
        "them, only this job's directory"},
       yes(&O::isolate), Section::kJob, "", "the server decides how jobs are isolated"},
      {{"--input-root", "", "DIR",
        "local inputs only below DIR (repeatable), opened and copied without following a link"},
       each(&O::input_roots), Section::kJob, "",
       "the server's admin lists where local inputs may be (cohort server --input-root)"},
      {{"--job-network", "", "MODE",
        "with --isolate: isolated (the default as root) puts each node's ranks in a network of "
        "the job's own, with no way out and nothing of the machine's reaching in, MASTER_ADDR "
        "node 0's address there; nat lets them out through the machine; host keeps the "
        "machine's network"},
       text(&O::job_network), Section::kJob, "",
       "the server decides its jobs' networks (cohort server --job-network)"},
      {{"--log-ranks", "", "LIST",
        "ranks echoed on the console: all (default), none, 0, 0,2-3 (every rank's full output "
        "is always in its log file)"},
       text(&O::log_ranks), Section::kOutput, "run",
       "read a rank's output with cohort logs JOB --rank R"},
      {{"--json", "", "", "the plan as JSON"}, yes(&O::json), Section::kOutput, "plan"},
      {{"--quiet", "-q", "", "no progress lines from cohort on stderr"}, yes(&O::quiet),
       Section::kOutput, "run"},
      // Set by cohort server for the jobs it runs.
      {{"--job-id", "", "ID", ""}, text(&O::job_id), Section::kHidden, "",
       "the server picks the job id"},
      {{"--run-as", "", "UID:GID", ""}, text(&O::run_as), Section::kHidden, "",
       "the server runs each account's ranks as that account's own user"},
      {{"--report", "", "", ""}, yes(&O::report), Section::kHidden, "",
       "the server follows the jobs it runs"},
  };
  return kFlags;
}

const JobFlag* ownJobFlag(const std::string& name) {
  for (const JobFlag& f : ownJobFlags()) {
    if (f.spec.names(name)) return &f;
  }
  return nullptr;
}

// Every flag of run, plan and submit: cohort's own, then torchrun's spellings that are not
// cohort's too (cli/torchrun_flags.h), each doing what its entry there says.
const std::vector<JobFlag>& jobFlags() {
  static const std::vector<JobFlag> kFlags = [] {
    std::vector<JobFlag> flags = ownJobFlags();
    for (const TorchrunFlag& t : torchrunFlags()) {
      for (const std::string& name : t.names) {
        if (ownJobFlag(name)) continue;
        JobFlag f{{name, "", t.takes_value ? "VALUE" : "", ""}, nullptr, Section::kHidden};
        if (t.kind == TorchrunFlag::Kind::kRefused) {
          f.apply = [why = t.why](JobOptions&, const std::string& flag,
                                  const std::string&) -> Result<void> {
            return fail(Code::kInvalidArgument,
                        flag + ": torchrun's flag has no place in cohort run: " + why);
          };
        } else if (t.kind == TorchrunFlag::Kind::kNothing) {
          f.apply = [why = t.why](JobOptions& o, const std::string& flag,
                                  const std::string&) -> Result<void> {
            o.notes.push_back(flag + " changes nothing: " + why);
            return {};
          };
        } else if (startsWith(t.cohort, "--env ")) {
          // --master-port N: --env MASTER_PORT=N
          f.apply = [prefix = t.cohort.substr(6)](JobOptions& o, const std::string&,
                                                  const std::string& v) -> Result<void> {
            o.env.push_back(prefix + v);
            return {};
          };
        } else {
          const JobFlag* own = ownJobFlag(t.cohort);
          if (!own) std::abort();  // a bug: torchrun_flags.cc names a flag cohort lacks
          f.apply = own->apply;
        }
        flags.push_back(std::move(f));
      }
    }
    return flags;
  }();
  return kFlags;
}

// torchrun's flags, from their one list (cli/torchrun_flags.h), by their torchrun spelling.
std::string torchrunFlagsHelp() {
  std::vector<std::string> same, nothing, refused;
  for (const TorchrunFlag& t : torchrunFlags()) {
    std::string name = t.names[0];
    for (const std::string& n : t.names) {
      if (startsWith(n, "--")) name = n;  // the underscored one, torchrun's first spelling
    }
    if (t.kind == TorchrunFlag::Kind::kSame) {
      same.push_back(std::find(t.names.begin(), t.names.end(), t.cohort) == t.names.end()
                         ? name + " (" + t.cohort + ")"
                         : name);
    }
    if (t.kind == TorchrunFlag::Kind::kNothing) nothing.push_back(name);
    if (t.kind == TorchrunFlag::Kind::kRefused) refused.push_back(name);
  }
  return "\n" + besideColumn("", "torchrun's flags, in either spelling (--max_restarts, "
                                  "--max-restarts): " +
                                      join(same, ", ") + " are cohort's; " + join(nothing, ", ") +
                                      " change nothing here (cohort says why); " +
                                      join(refused, ", ") +
                                      " are refused with what to use instead (docs/frameworks.md)",
                              4, 95);
}

std::vector<FlagSpec> specsOf(const std::vector<JobFlag>& flags, Section section,
                              const std::string& command) {
  std::vector<FlagSpec> specs;
  for (const JobFlag& f : flags) {
    if (f.section != section) continue;
    if (command == "submit" && !f.not_submitted.empty()) continue;
    if (section == Section::kOutput &&
        (" " + f.shown_in + " ").find(" " + command + " ") == std::string::npos) {
      continue;
    }
    specs.push_back(f.spec);
  }
  return specs;
}

}  // namespace

Result<void> applyResourceFlags(const JobOptions& o, spec::JobSpec& s) {
  if (s.roles.size() != 1) {
    return fail(Code::kInvalidArgument,
                "--cpus/--memory/--gpus apply to single-role jobs; this job has " +
                    std::to_string(s.roles.size()) +
                    " roles: set each one's resources in the job file (roles: {NAME: {resources: "
                    "{cpus: 2, memory: 4Gi, gpus: 1}}})");
  }
  spec::Resources& r = s.roles[0].resources;
  const std::string role = "roles." + s.roles[0].name + ".resources.";
  if (!o.cpus.empty()) {
    auto cpus = parseCpus(o.cpus);
    if (!cpus || *cpus <= 0) {
      return fail(Code::kInvalidArgument,
                  "--cpus: expected a positive number of CPUs per process (examples: 0.5, 2), "
                  "got '" + o.cpus + "'");
    }
    r.cpus = *cpus;
    r.cpus_given = true;
    s.origin.setByFlag(role + "cpus", "--cpus");
  }
  if (!o.memory.empty()) {
    auto bytes = parseBytes(o.memory);
    if (!bytes || *bytes <= 0) {
      return fail(Code::kInvalidArgument,
                  "--memory: expected a size per process such as 512Mi or 4Gi, got '" +
                      o.memory + "'");
    }
    r.memory_bytes = *bytes;
    s.origin.setByFlag(role + "memory", "--memory");
  }
  if (!o.gpus.empty()) {
    auto gpus = parseInt(o.gpus);
    if (!gpus || *gpus < 0) {
      return fail(Code::kInvalidArgument,
                  "--gpus: expected a number of GPUs per process (0, 1, ...), got '" + o.gpus +
                      "'");
    }
    r.gpus = *gpus;
    s.origin.setByFlag(role + "gpus", "--gpus");
  }
  return {};
}

std::vector<FlagSpec> jobFlagSpecs() {
  std::vector<FlagSpec> specs;
  for (const JobFlag& f : jobFlags()) specs.push_back(f.spec);
  return specs;
}

std::string jobFlagsHelp(const std::string& command) {
  return "Job:\n" + flagsHelp(specsOf(jobFlags(), Section::kJob, command)) +
         besideColumn("  -- COMMAND...",
                      "the command every rank runs, as it is; without \"--\", the first word "
                      "that is not a flag starts it, and a first word ending in .py runs with "
                      "python3 (as torchrun runs its script)",
                      27, 95) +
         torchrunFlagsHelp();
}

std::string jobOutputFlagsHelp(const std::string& command) {
  return flagsHelp(specsOf(jobFlags(), Section::kOutput, command));
}

std::string notSubmitted(const std::string& flag) {
  for (const JobFlag& f : jobFlags()) {
    if (f.spec.names(flag)) return f.not_submitted;
  }
  return "";
}

Result<JobOptions> jobOptionsFrom(const Args& args) {
  JobOptions o;
  for (const Args::Given& given : args.given) {
    for (const JobFlag& f : jobFlags()) {
      if (f.spec.name != given.name) continue;
      if (auto applied = f.apply(o, given.spelled, given.value); !applied) {
        return tl::unexpected(applied.error());
      }
      break;
    }
  }
  if (!args.command.empty() && !args.command_after_dashes && o.file.empty()) {
    // The command without "--". A job file given this way would otherwise fail later as a
    // program not found on PATH.
    const std::string& first = args.command[0];
    if (first.ends_with(".yaml") || first.ends_with(".yml") || first.ends_with(".json")) {
      return fail(Code::kInvalidArgument,
                  "'" + first + "' looks like a job file: give it with -f " + first +
                      " (a command whose first word is a file of that name goes after --)");
    }
  }
  o.command = args.command;
  o.command_after_dashes = args.command_after_dashes;
  return o;
}

Result<JobOptions> parseJobOptions(const std::string& command, int argc, char** argv, int first) {
  COHORT_ASSIGN(Args args, parseArgs(command, argc, argv, jobFlagSpecs(),
                                     ParseMode::kCommandAfterFlags, first));
  return jobOptionsFrom(args);
}

bool jobFlagTakesValue(const std::string& flag) {
  for (const JobFlag& f : jobFlags()) {
    if (f.spec.names(flag)) return f.spec.takesValue();
  }
  return false;
}

std::string absoluteIn(const std::string& path, const std::string& base) {
  std::filesystem::path p(path);
  std::filesystem::path full = p.is_absolute() ? p : std::filesystem::path(base) / p;
  std::string out = full.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

void makePathsAbsolute(spec::JobSpec& spec) {
  spec.workdir = absoluteIn(spec.workdir.empty() ? "." : spec.workdir, spec.base_dir);
  for (spec::Input& in : spec.inputs) {
    auto where = storage::parseLocation(in.source);
    if (where && where->kind == storage::Location::Kind::kLocal) {
      in.source = absoluteIn(where->path, spec.base_dir);
    }
  }
}

Result<spec::JobSpec> buildSpec(const JobOptions& o) {
  spec::JobSpec s;
  const std::string cwd = currentDir();
  if (!o.file.empty()) {
    COHORT_ASSIGN(std::string text, readJobFile(o.file));
    COHORT_ASSIGN(s, spec::parseJobFile(text, o.file));
    s.base_dir = dirName(absoluteIn(o.file, cwd));
  } else if (!o.text.empty()) {
    COHORT_ASSIGN(s, spec::parseJobFile(o.text, o.text_name));
    s.base_dir = cwd;
  } else {
    s = spec::defaultSpec();
    s.base_dir = cwd;
  }
  // Flags take a field's place: refusals of it then name the flag, not the file's line.
  spec::Origin& origin = s.origin;
  if (o.module + o.run_path + o.no_python > 1) {
    return fail(Code::kInvalidArgument,
                "-m, --run-path and --no-python each say how to run the command: give one");
  }
  if ((o.module || o.run_path || o.no_python) && o.command.empty()) {
    return fail(Code::kInvalidArgument,
                std::string(o.module ? "-m" : o.run_path ? "--run-path" : "--no-python") +
                    " says how to run the command: give the command after the flags");
  }
  if (!o.command.empty()) {
    s.command = commandAsTorchrunRunsIt(o);
    origin.setByFlag("command", "");  // the words after "--": their messages need no label
  }
  if (!o.environment.empty()) {
    s.environment = o.environment;
    s.image.clear();
    origin.setByFlag("environment", "--environment");
  }
  if (!o.image.empty()) {
    s.image = o.image;
    s.environment.clear();
    origin.setByFlag("environment", "--image");
  }
  if (!o.name.empty()) {
    s.name = o.name;
    origin.setByFlag("name", "--name");
  } else if (s.name.empty()) {
    s.name = nameFromCommand(s.command);
  }
  if (!o.framework.empty()) {
    auto f = spec::parseFramework(o.framework);
    if (!f) return withContext(f.error(), "--framework");
    s.framework = *f;
    origin.setByFlag("framework", "--framework");
    if (*f == spec::Framework::kMpi && o.launcher.empty()) s.launcher = spec::Launcher::kMpirun;
  }
  const bool on_hosts = !o.hosts.empty() || !o.hostfile.empty();
  {
    auto b = backends::chooseBackend(o.backend, s.backend, on_hosts);
    if (!b) {
      const bool named = startsWith(b.error().message, "--") || startsWith(b.error().message, "backend");
      return named ? tl::unexpected<Error>(b.error()) : withContext(b.error(), "--backend");
    }
    if (!o.backend.empty() || on_hosts) {
      origin.setByFlag("backend", on_hosts ? (o.hosts.empty() ? "--hostfile" : "--hosts") : "--backend");
    }
    s.backend = *b;
  }
  if (!on_hosts && (!o.ssh.empty() || o.shared_workdir)) {
    return fail(Code::kInvalidArgument,
                std::string(o.ssh.empty() ? "--shared-workdir" : "--ssh") +
                    ": only with --hosts or --hostfile (the hosts to reach over SSH)");
  }
  if (!o.launcher.empty()) {
    auto l = spec::parseLauncher(o.launcher);
    if (!l) return withContext(l.error(), "--launcher");
    s.launcher = *l;
    origin.setByFlag("launcher", "--launcher");
  }
  if (o.preload) {
    if (o.preload->empty()) {
      return fail(Code::kInvalidArgument,
                  "--preload: names no module; give the ones to import once per node, e.g. "
                  "--preload torch,numpy");
    }
    if (!o.launcher.empty() && s.launcher != spec::Launcher::kPreload) {
      return fail(Code::kInvalidArgument,
                  "--preload: names the modules of --launcher preload; "
                  "this command gives --launcher " +
                      o.launcher);
    }
    s.preload = split(*o.preload, ',');
    if (s.preload.size() > static_cast<size_t>(spec::kMaxPreload)) {
      return fail(Code::kInvalidArgument, "--preload: " + std::to_string(s.preload.size()) +
                                              " modules; at most " +
                                              std::to_string(spec::kMaxPreload));
    }
    s.preload_given = true;
    s.launcher = spec::Launcher::kPreload;
    origin.setByFlag("preload", "--preload");
    if (o.launcher.empty()) origin.setByFlag("launcher", "--preload");
  }
  if (!o.mode.empty()) {
    if (o.mode != "dynamic_cluster" && o.mode != "rank_table") {
      return fail(Code::kInvalidArgument,
                  "--mode: unknown mode '" + o.mode + "' (dynamic_cluster, rank_table)");
    }
    s.mindspore_mode = o.mode == "rank_table" ? spec::MindSporeMode::kRankTable
                                              : spec::MindSporeMode::kDynamicCluster;
    origin.setByFlag("mode", "--mode");
  }
  if (!o.compat.empty()) {
    if (o.compat != "modelarts" && o.compat != "none") {
      return fail(Code::kInvalidArgument,
                  "--compat: unknown compat '" + o.compat + "' (modelarts, none)");
    }
    s.compat_modelarts = o.compat == "modelarts";
    origin.setByFlag("compat", "--compat");
  }
  if (o.nodes || o.procs_per_node) {
    if (s.roles.size() != 1) {
      return fail(Code::kInvalidArgument,
                  "--nodes/--nproc-per-node apply to single-role jobs; this job has " +
                      std::to_string(s.roles.size()) + " roles: set them in the job file");
    }
    const std::string role = "roles." + s.roles[0].name;
    if (o.nodes) {
      s.roles[0].nodes = o.nodes;
      origin.setByFlag(role + ".nodes", "--nodes");
    }
    if (o.procs_per_node) {
      s.roles[0].procs_per_node = o.procs_per_node;
      origin.setByFlag(role + ".procs_per_node", "--nproc-per-node");
    }
  }
  if (!o.cpus.empty() || !o.memory.empty() || !o.gpus.empty()) {
    COHORT_TRY(applyResourceFlags(o, s));
  }
  if (!o.workdir.empty()) {
    s.workdir = o.workdir;
    s.base_dir = cwd;
    origin.setByFlag("workdir", "--workdir");
  }
  // Counted before they are merged (one by one, by name) into the file's.
  if (o.env.size() > static_cast<size_t>(spec::kMaxEnv)) {
    return fail(Code::kInvalidArgument, "--env: given " + std::to_string(o.env.size()) +
                                            " times; at most " + std::to_string(spec::kMaxEnv) +
                                            " (put the settings in a file the job reads)");
  }
  if (o.hyperparameters.size() > static_cast<size_t>(spec::kMaxHyperparameters)) {
    return fail(Code::kInvalidArgument,
                "--hp: given " + std::to_string(o.hyperparameters.size()) + " times; at most " +
                    std::to_string(spec::kMaxHyperparameters) +
                    " (pass a configuration file as one hyperparameter)");
  }
  for (const auto& kv : o.env) {
    COHORT_TRY(splitKeyValue("--env", kv, s.env));
    origin.setByFlag("env." + kv.substr(0, kv.find('=')), "--env");
  }
  for (const auto& kv : o.hyperparameters) {
    COHORT_TRY(splitKeyValue("--hp", kv, s.hyperparameters));
    origin.setByFlag("hyperparameters." + kv.substr(0, kv.find('=')), "--hp");
  }
  if (o.max_restarts >= 0) {
    s.policy.max_restarts = o.max_restarts;
    origin.setByFlag("policy.max_restarts", "--max-restarts");
  }
  // Durations are range-checked by spec::validate (policy.<field>).
  auto duration = [&](const std::string& value, const char* flag, const char* field,
                      auto& into) -> Result<void> {
    if (value.empty()) return {};
    auto d = parseDuration(value);
    if (!d) return withContext(d.error(), flag);
    into = *d;
    origin.setByFlag(std::string("policy.") + field, flag);
    return {};
  };
  COHORT_TRY(duration(o.heartbeat_timeout, "--heartbeat-timeout", "heartbeat_timeout",
                      s.policy.heartbeat_timeout));
  COHORT_TRY(duration(o.grace_period, "--grace-period", "grace_period", s.policy.grace_period));
  COHORT_TRY(duration(o.max_runtime, "--max-runtime", "max_runtime", s.policy.max_runtime));
  COHORT_TRY(duration(o.hang_timeout, "--hang-timeout", "hang_timeout", s.policy.hang_timeout));
  COHORT_TRY(duration(o.startup_timeout, "--startup-timeout", "startup_timeout",
                      s.policy.startup_timeout));
  if (!o.stop_signal.empty()) {
    auto sig = spec::parseStopSignal(o.stop_signal);
    if (!sig) return withContext(sig.error(), "--stop-signal");
    s.policy.stop_signal = *sig;
    origin.setByFlag("policy.stop_signal", "--stop-signal");
  }
  if (!o.success.empty()) {
    s.policy.success = split(o.success, ',');
    origin.setByFlag("policy.success", "--success");
  }
  if (on_hosts) {
    COHORT_ASSIGN(auto hosts, hostsOf(o));
    COHORT_TRY(backends::placeNodesOnHosts(s, hosts, o.nodes > 0, o.procs_per_node != 0));
  }
  COHORT_TRY(applyDebugFlags(o, s));
  COHORT_TRY(spec::validate(s));
  return s;
}

Result<std::vector<backends::SshHost>> hostsOf(const JobOptions& o) {
  if (!o.hosts.empty() && !o.hostfile.empty()) {
    return fail(Code::kInvalidArgument, "--hosts and --hostfile: give one of them");
  }
  if (!o.hosts.empty()) return backends::parseHostList(o.hosts);
  if (o.hostfile.empty()) return std::vector<backends::SshHost>();
  auto text = readFile(o.hostfile);
  if (!text) return withContext(text.error(), "--hostfile");
  return backends::parseHostfile(*text, o.hostfile);
}

// An s3:// input: a valid URI and, unless only planning, credentials and something there, so
// that a typo fails now and not on every node after the job started.
Result<void> checkS3Input(const spec::JobSpec& s, const spec::Input& in, size_t i, bool dry) {
  const std::string field = "inputs[" + std::to_string(i) + "]";
  auto named = [&](const std::string& sub, const Error& e) {
    return fail(e.code, spec::fieldLabel(s, field + sub) + e.message);
  };
  if (in.mode == spec::Input::Mode::kLink) {
    return fail(Code::kInvalidArgument,
                spec::fieldLabel(s, field + ".mode") +
                    "link needs a local path or store:// source; an s3:// input is copied "
                    "(mode: copy)");
  }
  auto uri = storage::parseS3Uri(in.source);
  if (!uri) return named(".source", uri.error());
  if (dry) return {};  // planning needs no credentials and sends nothing
  auto store = storage::openS3(*uri);
  if (!store) return named(".source", store.error());
  auto there = storage::checkSource(**store, uri->key);
  if (!there) return named(".source", there.error());
  return {};
}

// The job's image, as podman has it (pulled when it is not there, unless `dry`: cohort plan
// then shows the reference alone). Errors: those of env::findOrPullImage; kFailedPrecondition
// when cohort does not run as root (an image's ranks mount its layers).
Result<env::ImageInfo> findImage(const spec::JobSpec& s, bool dry) {
  if (dry) {
    auto found = env::inspectImage(s.image);
    if (found || found.error().code == Code::kInvalidArgument) return found;
    env::ImageInfo later;  // not here (or no podman): the plan names it, the run pulls it
    later.ref = s.image;
    return later;
  }
  if (::geteuid() != 0) {
    return fail(Code::kFailedPrecondition,
                "image " + s.image +
                    ": an image's ranks run as root here (cohort mounts the image's layers from "
                    "podman's storage for each rank): run cohort as root, or name a preset or "
                    "saved environment (cohort env ls)");
  }
  return env::findOrPullImage(
      s.image, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); });
}

// Where the command is looked for: in the image when there is one (not at all when it is not
// here yet: cohort plan of an image to pull).
backends::ProgramFinder programFinder(const std::optional<env::ImageInfo>& image) {
  if (!image) return nullptr;
  if (image->layers.empty()) {
    return [](const std::string& program, const std::string&, const std::string&) {
      return Result<std::string>(program);
    };
  }
  return [info = *image](const std::string& program, const std::string& path,
                         const std::string& workdir) {
    return env::findInImage(info, program, path, workdir);
  };
}

// A store:// location where the data root's store is in S3 (a server started with --store: its
// jobs' cohort processes get the site in COHORT_STORE, storage/place.h): every node reads and
// writes it itself, so it stays a URI. False for a store on disk, whose paths are resolved.
Result<bool> storeInS3(const std::string& uri, const std::string& data_root) {
  auto where = storage::parseLocation(uri);
  if (!where || where->kind != storage::Location::Kind::kStore) return false;
  COHORT_ASSIGN(storage::StoreSite site, storage::storeSite(data_root));
  return site.inS3();
}

// An input from the store kept in S3: copied, and there (unless only planning).
Result<void> checkStoreInput(const spec::JobSpec& s, const spec::Input& in, size_t i,
                             const std::string& data_root, bool dry) {
  const std::string field = "inputs[" + std::to_string(i) + "]";
  if (in.mode == spec::Input::Mode::kLink) {
    return fail(Code::kInvalidArgument,
                spec::fieldLabel(s, field + ".mode") +
                    "link needs a store on disk; this store is kept in S3, so its inputs are "
                    "copied (mode: copy)");
  }
  if (dry) return {};
  auto place = storage::openPlace(in.source, data_root);
  auto there = place ? storage::checkSource(*place->store, place->key) : Result<void>();
  if (!place || !there) {
    const Error& e = place ? there.error() : place.error();
    return fail(e.code, spec::fieldLabel(s, field + ".source") + e.message);
  }
  return {};
}

std::string dataRootFor(const JobOptions& o) {
  const char* env_root = std::getenv("COHORT_DATA_ROOT");
  const char* home = std::getenv("HOME");
  return !o.data_root.empty()    ? absoluteIn(o.data_root, currentDir())
         : env_root && *env_root ? std::string(env_root)
                                 : std::string(home ? home : "/tmp") + "/.cohort";
}

std::string jobDirFor(const JobOptions& o) {
  return job::Layout::of(dataRootFor(o), o.job_id).dir();
}

Result<PreparedJob> prepareJob(const JobOptions& o, bool dry) {
  PreparedJob job;
  COHORT_ASSIGN(job.spec, buildSpec(o));
  spec::JobSpec& s = job.spec;
  const std::string cwd = currentDir();
  job.data_root = dataRootFor(o);
  const std::string job_id = o.job_id.empty() ? job::newJobId(s.name) : o.job_id;

  // Where inputs come from and outputs go: store:// URIs and paths relative to the job file.
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    spec::Input& in = s.inputs[i];
    std::string field = "inputs[" + std::to_string(i) + "].source";
    if (storage::isS3Uri(in.source)) {
      COHORT_TRY(checkS3Input(s, in, i, dry));
      in.source_path = in.source;
      continue;
    }
    auto in_s3 = storeInS3(in.source, job.data_root);
    if (!in_s3) return fail(in_s3.error().code, spec::fieldLabel(s, field) + in_s3.error().message);
    if (*in_s3) {
      COHORT_TRY(checkStoreInput(s, in, i, job.data_root, dry));
      in.source_path = in.source;
      continue;
    }
    auto path = storage::resolve(in.source, job.data_root, s.base_dir);
    if (!path) {
      return fail(path.error().code, spec::fieldLabel(s, field) + path.error().message);
    }
    // A server's job: its inputs are the account's to read, which staging does as the account
    // (account/as_account.h), not this process: a look here would tell what it sees.
    const bool as_account = !o.run_as.empty() || !o.input_roots.empty();
    struct stat st{};
    if (!as_account && ::stat(path->c_str(), &st) < 0) {
      return fail(Code::kInvalidArgument, spec::fieldLabel(s, field) + "'" + in.source +
                                              "' does not exist (" + *path + ")");
    }
    in.source_path = *path;
  }
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    spec::Output& out = s.outputs[i];
    const std::string target = spec::expandTarget(out.target, job_id, s.name);
    if (storage::isS3Uri(target)) {
      // Checked now (the URI, and that there are credentials), written when the job ends.
      const std::string field = "outputs[" + std::to_string(i) + "].target";
      auto uri = storage::parseS3Uri(target);
      if (!uri) return fail(uri.error().code, spec::fieldLabel(s, field) + uri.error().message);
      auto config = storage::s3ConfigFromEnvironment();
      if (!config && !dry) {
        return fail(config.error().code, spec::fieldLabel(s, field) + config.error().message);
      }
      out.target_path = target;
      continue;
    }
    auto in_s3 = storeInS3(target, job.data_root);
    if (!in_s3) {
      const std::string field = "outputs[" + std::to_string(i) + "].target";
      return fail(in_s3.error().code, spec::fieldLabel(s, field) + in_s3.error().message);
    }
    if (*in_s3) {
      out.target_path = target;  // written by the nodes, into the store kept in S3
      continue;
    }
    auto path = storage::resolve(target, job.data_root, s.base_dir);
    if (!path) {
      return fail(path.error().code,
                  spec::fieldLabel(s, "outputs[" + std::to_string(i) + "].target") +
                      path.error().message);
    }
    out.target_path = *path;
  }

  // The environment, built now when it is not (its progress on stderr): its bin/ comes first
  // on every rank's PATH, and the command is looked for there.
  spec::JobSpec with_environment = s;
  if (!s.environment.empty()) {
    env::Store store(env::storeDirs(job.data_root));
    auto found = store.get(s.environment);
    if (!found) return fail(found.error().code, spec::fieldLabel(s, "environment") + found.error().message);
    if (!found->built && !dry) {
      std::fprintf(stderr, "cohort: building environment %s (once; then it is kept in %s)\n",
                   s.environment.c_str(), store.root().c_str());
    }
    auto built = dry ? found : store.ensureBuilt(s.environment, [](const std::string& line) {
      std::fprintf(stderr, "  %s\n", line.c_str());
    });
    if (!built) return fail(built.error().code, spec::fieldLabel(s, "environment") + built.error().message);
    std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
    for (const auto& [k, v] : s.env) {
      if (k == "PATH") path = v;
    }
    job.context.environment = env::rankVariables(*built, path);
    for (const auto& [k, v] : job.context.environment) with_environment.env.emplace_back(k, v);
    // What a node that does not see it needs to build its own copy (env/node_copy.h).
    if (built->built) {
      auto layers = store.layers(s.environment);
      if (!layers)
        return fail(layers.error().code,
                    spec::fieldLabel(s, "environment") + layers.error().message);
      job.context.environment_layers = std::move(*layers);
    }
  }
  // An image (on volcano it is the pods' and nothing of it is here): in podman's storage, or
  // pulled now (its progress on stderr). Its variables come with the environment, the job's own
  // winning, and the command is looked for in it.
  std::optional<env::ImageInfo> image;
  if (!s.image.empty() && s.backend != spec::Backend::kVolcano) {
    auto found = findImage(s, dry);
    if (!found) {
      return fail(found.error().code, spec::fieldLabel(s, "environment") + found.error().message);
    }
    image = *found;
    job.context.image = plan::Image{image->ref, image->id, image->layers};
    for (const auto& kv : env::imageVariables(*image)) {
      if (std::none_of(s.env.begin(), s.env.end(),
                       [&](const auto& e) { return e.first == kv.first; })) {
        job.context.environment.push_back(kv);
        with_environment.env.push_back(kv);
      }
    }
  }

  // A sandboxed rank looks for its program on the sandbox's PATH, not on this process's.
  if (o.isolate && std::none_of(with_environment.env.begin(), with_environment.env.end(),
                                [](const auto& kv) { return kv.first == "PATH"; })) {
    with_environment.env.emplace_back("PATH", ranksPath(with_environment, true));
  }
  // The file system: refuse now what would fail at start. A Volcano Job's command runs in its
  // image, not here: nothing of this machine to check.
  // On hosts over SSH the program is looked for there, when the agent starts it; the workdir
  // (what is sent) and the script in it are checked here.
  const bool on_hosts = s.backend == spec::Backend::kSsh;
  const backends::ProgramFinder anywhere = [](const std::string& program, const std::string&,
                                              const std::string&) {
    return Result<std::string>(program);
  };
  auto checked = s.backend == spec::Backend::kVolcano
                     ? Result<std::string>(absoluteIn(s.workdir.empty() ? "." : s.workdir,
                                                      s.base_dir.empty() ? cwd : s.base_dir))
                     : backends::checkCommand(with_environment,
                                              on_hosts ? anywhere : programFinder(image));
  if (!checked) {
    // Its messages start with the field; say where that field came from.
    std::string msg = checked.error().message;
    for (const std::string field : {"command", "workdir"}) {
      if (startsWith(msg, field + ": ")) msg = spec::fieldLabel(s, field) + msg.substr(field.size() + 2);
    }
    return fail(checked.error().code, msg);
  }
  const std::string workdir = *checked;
  // The ranks' Python, asked now for what the job imports (as the user: never for a server's
  // job, which runs as its account).
  if (!dry && s.backend == spec::Backend::kLocal && !image && o.run_as.empty() &&
      env::runsPython(s.command)) {
    env::PythonRanks ranks{ranksPath(with_environment, o.isolate), {}, workdir};
    for (char** e = environ; *e; ++e) ranks.env.emplace_back(*e);
    for (const auto& [k, v] : with_environment.env) ranks.env.push_back(k + "=" + v);
    ranks.env.push_back("PATH=" + ranks.path);
    COHORT_TRY(env::checkPython(with_environment, ranks, env::pythonNeeds(s), {"cohort"}));
  }
  if (on_hosts && env::runsPython(s.command)) {
    job.host_python = env::remotePythonCheck(s, workdir, env::pythonNeeds(s));
  }
  plan::PlanContext& ctx = job.context;
  if (on_hosts) {
    COHORT_ASSIGN(auto hosts, hostsOf(o));
    for (const backends::SshHost& h : hosts) ctx.machines.push_back(h.name);  // node i on the i-th
  }
  ctx.as_root = ::geteuid() == 0;
  if (s.backend != spec::Backend::kLocal) {
    // Real hosts: each node has the GPUs Slurm gives it (--gres) or its pod was given, numbered
    // from 0.
    ctx.nodes_share_machine = false;
    int per_node = 0;
    for (const spec::Role& role : s.roles) {
      if (role.procs_per_node == spec::kAutoProcs) {
        return fail(Code::kInvalidArgument,
                    spec::fieldLabel(s, "roles." + role.name + ".procs_per_node") +
                        "auto counts this machine's GPUs, not the cluster nodes': give a number "
                        "for the " +
                        std::string(spec::backendName(s.backend)) + " backend");
      }
      per_node = std::max(per_node, role.procs_per_node * role.resources.gpus);
    }
    for (int g = 0; g < per_node; ++g) ctx.gpus.push_back(g);
  } else {
    ctx.gpus = backends::localGpus();
    ctx.device_ips = backends::localAscendAddresses();
    // The CPUs the simulated nodes share (in a session, its share): what MPI's hostfile says
    // (plan/mpi.cc).
    ctx.cores = backends::localCpus();
    if (o.isolate) ctx.shared_devices = backends::sharedDevices();
  }
  for (spec::Role& role : s.roles) {
    if (role.procs_per_node != spec::kAutoProcs) continue;
    // One per device; simulated nodes share this machine's devices.
    int per_node = static_cast<int>(ctx.gpus.size()) / spec::totalNodes(s);
    role.procs_per_node = std::max(per_node, 1);
  }
  ctx.job_id = job_id;
  ctx.data_root = job.data_root;
  if (auto site = storage::storeSite(job.data_root); site && !site->inS3()) ctx.store_dir = site->dir;
  for (const std::string& root : o.input_roots) {
    if (root.empty() || root[0] != '/') {
      return fail(Code::kInvalidArgument, "--input-root: must be an absolute path, got '" + root + "'");
    }
    std::string trimmed = absoluteIn(root, "/");
    ctx.input_roots.push_back(trimmed);
  }
  ctx.cohort_bin = backends::selfExecutable();
  // Ranks that inherit the user's environment keep its PYTHONPATH before cohort's module's.
  if (!o.isolate && o.run_as.empty() && !image && s.backend != spec::Backend::kVolcano &&
      !on_hosts) {
    if (const char* python_path = std::getenv("PYTHONPATH")) ctx.inherited_python_path = python_path;
  }
  if (o.isolate) {
    if (::access("/usr/bin/bwrap", X_OK) != 0) {
      return fail(Code::kFailedPrecondition,
                  "--isolate needs bubblewrap (/usr/bin/bwrap): apt-get install bubblewrap");
    }
    ctx.isolate = true;
  }
  ctx.job_dir = job::Layout::of(job.data_root, ctx.job_id).dir();
  if (!o.run_as.empty()) {
    auto colon = o.run_as.find(':');
    auto uid = parseInt(o.run_as.substr(0, colon));
    auto gid = colon == std::string::npos ? uid : parseInt(o.run_as.substr(colon + 1));
    if (!uid || !gid || *uid <= 0 || *gid <= 0) {
      return fail(Code::kInvalidArgument, "--run-as: expected UID:GID (not root), got '" +
                                              o.run_as + "'");
    }
    if (::geteuid() != 0) {
      return fail(Code::kFailedPrecondition, "--run-as: only root can run ranks as another user");
    }
    ctx.uid = *uid;
    ctx.gid = *gid;
  }
  job.source_workdir = workdir;
  ctx.workdir = on_hosts && !o.shared_workdir ? job::Layout(ctx.job_dir).codeDir() : workdir;
  if (o.log_ranks == "none") {
    ctx.console_ranks = {-1};  // no rank has that number: nothing is echoed
  } else if (!o.log_ranks.empty()) {
    auto ranks = parseRankList(o.log_ranks);
    if (!ranks) return withContext(ranks.error(), "--log-ranks");
    ctx.console_ranks = *ranks;
  }
  return job;
}

}  // namespace cohort::cli
