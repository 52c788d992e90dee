// What the ssh backend decides before anything connects, as pure functions (no I/O): which
// hosts a job's nodes go to (`--hosts h1,h2`, or a hostfile in the `host slots=N` format that
// mpirun and DeepSpeed read), how many processes each gets, whether the job runs over SSH at
// all, how the user's `--ssh` command splits into words, and the shell scripts that run on each
// host (`probe`, `upload`, `agent`) with what their answers mean. backends/ssh.h does the I/O.
// Thread-safe (no state).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "util/result.h"

namespace cohort::backends {

struct SshHost {
  std::string name;  // what ssh is given: a name, an address, user@host or a ~/.ssh/config alias
  int slots = 0;     // processes the host takes (slots=N, host:N); 0: not said
};

// "h1,h2" or "h1:2,h2:2" (mpirun's --host form, N slots). Errors: kInvalidArgument naming the
// entry (empty, a bad slot count, a word ssh would take as an option).
Result<std::vector<SshHost>> parseHostList(const std::string& text);

// A hostfile: one host a line, `name [slots=N] [max_slots=N]`, `#` comments and blank lines
// skipped (mpirun's and DeepSpeed's format). Errors: kInvalidArgument "FILE:LINE: ...".
Result<std::vector<SshHost>> parseHostfile(const std::string& text, const std::string& file_name);

// Which backend a job runs on: hosts given (--hosts/--hostfile) mean ssh, unless --backend
// names another (refused: the two say different things); `backend: ssh` in the job file or
// --backend ssh without hosts is refused (nothing says where). `flag` is --backend's value ("":
// not given), `file` the job file's (or the default, local).
Result<spec::Backend> chooseBackend(const std::string& flag, spec::Backend file, bool hosts_given);

// Puts a job's nodes on `hosts`, node i on hosts[i]. A single-role job gets one node per host
// unless `nodes_given` (--nodes) says fewer; a job of several roles needs as many hosts as
// nodes. Processes per node: --nproc-per-node when `procs_given`, else the hosts' slots when
// they all say the same, else what the job says; never more than a host's slots. Errors:
// kInvalidArgument naming the host or the flag, with what to do.
Result<void> placeNodesOnHosts(spec::JobSpec& spec, const std::vector<SshHost>& hosts,
                               bool nodes_given, bool procs_given);

// The words of `--ssh "ssh -p 2222 -i key"`: split at blanks, with '…' and "…" quoting.
// Errors: kInvalidArgument for an empty command or an unclosed quote.
Result<std::vector<std::string>> splitSshCommand(const std::string& text);

// What the probe found on a host.
struct HostProbe {
  std::string from;     // the address this machine reached the host from ($SSH_CONNECTION)
  std::string machine;  // uname -m
  bool has_binary = false;  // cohort of this hash is in the host's cache
  std::string python;   // the interpreter's path there; "" when it has none
  bool python_asked = false;
  std::string python_answer;  // what the interpreter answered (python_check's JSON), "" if none
};

// The script run on each host first: prints the lines parseProbe reads. `python` is the job's
// interpreter as its command names it ("" when the job runs no Python) and `python_args` the
// arguments it is run with to say what it cannot import.
std::string probeScript(const std::string& hash, const std::string& python,
                        const std::vector<std::string>& python_args);

// Reads the probe's output. Errors: kUnavailable when it is not the probe's (a login shell that
// prints a banner into it is skipped; one that printed nothing of it is not a POSIX shell).
Result<HostProbe> parseProbe(const std::string& out);

// Copies cohort from stdin into the host's cache, keeping it only when its SHA-256 is `hash`.
std::string uploadScript(const std::string& hash);

// Runs the node's agent on the host, reading the job's secret as the first line of stdin and,
// when `snapshot`, the workdir's snapshot after it. The host's own job directory (`job_dir`,
// made when the coordinator's is not there) and everything in it is removed when the agent
// ends, however it ends; what the ranks wrote in its output/ comes back first, as a snapshot
// on stdout. The agent's own messages go to stderr.
struct AgentScript {
  std::string hash, job_dir, coordinator;  // coordinator: "ADDR:PORT"
  int node = 0;
  std::string interface, cidr;  // spec::Network
  bool snapshot = true;
};
std::string agentScript(const AgentScript& a);

// What a server (`cohort server --backend ssh`) hands out on a host: its slots as CPUs, else
// the CPUs it has; its memory; its NVIDIA GPUs.
struct HostCapacity {
  int64_t cpus = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
};

// The script that asks a host what it has: prints the lines parseCapacity reads.
std::string capacityScript();

// Reads capacityScript's output; `slots` (the hostfile's, 0: not said) replaces the CPUs found.
// Errors: kUnavailable when it is not the script's (a login shell that is not a POSIX sh).
Result<HostCapacity> parseCapacity(const std::string& out, int slots);

// Exit codes of the scripts that are theirs, not the agent's (which exits with the job's).
inline constexpr int kNoSecretExit = 201;    // stdin ended before the secret
inline constexpr int kNoJobDirExit = 202;    // the job directory could not be made
inline constexpr int kNoSnapshotExit = 203;  // the workdir's snapshot could not be unpacked
inline constexpr int kNoBinaryExit = 204;    // cohort is not in the cache (any more)

// What a script's exit means, in words about `host` ("" when it is the agent's own code).
// `err` is the tail of what it printed on stderr. ssh exits 255 when it could not connect.
std::string describeHostExit(const std::string& host, int code, const std::string& err);

}  // namespace cohort::backends
