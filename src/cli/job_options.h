// The flags shared by `cohort run` and `cohort plan`: they read a job file and/or a command after
// "--", apply the common fields given as flags, and resolve paths, producing a validated JobSpec
// and a PlanContext. File-system checks (workdir, program, script) live here, so that a wrong
// path is refused before anything starts.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/ssh_hosts.h"
#include "cli/args.h"
#include "env/python_check.h"
#include "plan/plan.h"
#include "spec/job_spec.h"
#include "util/result.h"

namespace cohort::cli {

struct JobOptions {
  std::string file;
  // Or the job file itself, named `text_name` in messages; its relative paths are relative to
  // the current directory (cohort coordinate: the job in $COHORT_JOB).
  std::string text, text_name;
  std::string name, framework, launcher, backend, mode, compat, workdir, grace_period, max_runtime,
      heartbeat_timeout, hang_timeout, startup_timeout, stop_signal, success, data_root, log_ranks;
  std::optional<std::string> preload;  // --preload MOD[,MOD...]: launcher preload, these
  std::string environment;  // --environment NAME
  std::string image;        // --image REF: environment: {image: REF}
  std::string kube_namespace;  // --namespace NS: the volcano backend's (default: kubeconfig's)
  std::string debug;        // --debug RANKS|all
  bool post_mortem = false, pdb = false;
  std::string job_id;  // --job-id: set by `cohort server`, whose job directory already exists
  std::string run_as;  // --run-as UID:GID: set by `cohort server`, the account's identity
  // --input-root DIR (repeatable): local inputs only below these, opened without a link (a
  // server passes its own)
  std::vector<std::string> input_roots;
  // --job-network isolated|nat|host: each simulated node's ranks in a network of the job's own
  // (proc/job_network.h), with or without a way out, or the machine's. Default: isolated with
  // --isolate where this process may make one (root), else host.
  std::string job_network;
  // The ssh backend (backends/ssh.h): --hosts h1,h2 or --hostfile FILE (one node on each),
  // --ssh "ssh -p 2222" (the command that reaches them), --shared-workdir (the workdir is at
  // the same path on every host: no snapshot is sent).
  std::string hosts, hostfile, ssh;
  bool shared_workdir = false;
  int nodes = 0, procs_per_node = 0, max_restarts = -1;  // procs_per_node may be kAutoProcs
  // --cpus, --memory, --gpus: each process's resources (roles' resources:), "" when not given
  std::string cpus, memory, gpus;
  std::vector<std::string> env, hyperparameters;  // KEY=VALUE
  std::vector<std::string> command;               // after "--", or the first word not a flag
  bool command_after_dashes = false;              // the command came after "--"
  // torchrun's ways to name the program: -m (the command's first word is a Python module),
  // --run-path (a Python script), --no-python (a program, run as it is)
  bool module = false, run_path = false, no_python = false;
  bool json = false, quiet = false, isolate = false;
  // --report: set by `cohort server`: push the job's record to the server that the job
  // directory's report.url names, with the credential in its report.token
  bool report = false;
  // What the flags said that cohort does not do (torchrun's flags that mean nothing here, each
  // with why), for the command to print once on stderr.
  std::vector<std::string> notes;
};

// Every flag of run, plan and submit, declared once in job_options.cc (with its help, what it
// sets, where its help shows and why a submitted job refuses it), torchrun's spellings included
// (cli/torchrun_flags.h). To add one: one JobFlag there, and its field in JobOptions.
std::vector<FlagSpec> jobFlagSpecs();

// Parses the flags of `command` (run, plan) from argv[first..]; the first word that is not a
// flag, or the words after "--", are the ranks' command. Errors: kInvalidArgument naming the
// flag.
Result<JobOptions> parseJobOptions(const std::string& command, int argc, char** argv, int first);

// The options that `args` (parsed over jobFlagSpecs() and maybe more, in
// ParseMode::kCommandAfterFlags) give; flags that are not the job's are left alone.
Result<JobOptions> jobOptionsFrom(const Args& args);

// Whether `flag` is one of the job's flags that take a value ("--nodes", not "--json").
bool jobFlagTakesValue(const std::string& flag);

// Why `cohort submit` refuses the job flag `flag` ("" when a server's job takes it).
std::string notSubmitted(const std::string& flag);

// The help of the job's flags for `command` (run, plan, submit: submit's leaves out those it
// refuses), under "Job:", and those its own "Output:" section lists.
std::string jobFlagsHelp(const std::string& command);
std::string jobOutputFlagsHelp(const std::string& command);

// `path` relative to `base` (unless it is absolute), without "." and ".." parts.
std::string absoluteIn(const std::string& path, const std::string& base);

// Makes the workdir and the local inputs' sources of `spec` absolute (from its base_dir), so
// that its job file means the same job read anywhere: submitted to a server, or run again from
// the job's directory (cohort rerun).
void makePathsAbsolute(spec::JobSpec& spec);

// The most characters of a name derived from the command: the job's id adds 23 ("-<yyyymmdd-
// hhmmss>-<6 hex digits>"), and 63 is as long as a Kubernetes label or DNS name may be.
inline constexpr size_t kDerivedNameBytes = 40;

// A valid job name from the command, for a job that names none: the script's or program's stem
// ("python3 ddp.py" -> "ddp", "sh -c 'cd data && python3 train.py'" -> "train",
// "./bin/hello" -> "hello"), letters, digits and '_' kept, anything else one '-', at most
// kDerivedNameBytes characters; "job" when nothing is left.
std::string nameFromCommand(const std::vector<std::string>& command);

// The spec from the job file and the flags, validated; base_dir is the job file's directory (or
// the current one). Reads the job file; no other file-system check.
Result<spec::JobSpec> buildSpec(const JobOptions& options);
// --cpus, --memory and --gpus (options.cpus, .memory, .gpus): each process's resources, those of
// the job's one role; a value that is not one names its flag.
Result<void> applyResourceFlags(const JobOptions& options, spec::JobSpec& s);

struct PreparedJob {
  spec::JobSpec spec;
  plan::PlanContext context;
  std::string data_root;
  // The workdir on this machine. On hosts over SSH the ranks run in its snapshot, unpacked in
  // the job directory's code/ (context.workdir), unless --shared-workdir.
  std::string source_workdir;
  // On hosts over SSH: what asks each host's Python for the job's imports (none when the job
  // runs no Python).
  env::RemotePythonCheck host_python;
};

// The hosts of --hosts or --hostfile (read now); none when neither is given. Errors:
// kInvalidArgument naming the flag or the file's line.
Result<std::vector<backends::SshHost>> hostsOf(const JobOptions& options);

// Where a job's files go: --data-root, else COHORT_DATA_ROOT, else ~/.cohort.
std::string dataRootFor(const JobOptions& options);
// The directory of the job `options.job_id` names (a server's job, --job-id).
std::string jobDirFor(const JobOptions& options);

// Builds the spec (job file, then flags), validates it, resolves the workdir and checks that the
// workdir and the program exist, looks at the machine's devices (resolving procs_per_node: auto)
// and picks the job id and directory (not created yet). Ports are leased by the caller. The
// job's environment is built when it is not, unless `dry` (cohort plan, which starts nothing:
// its ranks then show where the environment will be).
Result<PreparedJob> prepareJob(const JobOptions& options, bool dry = false);


}  // namespace cohort::cli
