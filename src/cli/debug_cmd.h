// `cohort debug JOB`: the ranks of a job with debug: that wait for a debugger, or have one
// attached, with where to attach (docs/debugging.md). For a job of this machine it reads the
// job's record (events.jsonl, plan.json) in its directory; for a job of the server it asks the
// server (GET /v1/jobs/{id}/debug). With --vscode it prints (or, with --write, merges into
// .vscode/launch.json) one VS Code attach configuration per rank, with path mappings for a job
// of the server, whose ranks run in a directory of the server's machine.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "util/result.h"

namespace cohort::cli {

// argv[1] is "debug". Exit codes: 0 listed (also when no rank waits), 1 the server or the file
// could not be read, 2 bad usage or no such job.
int cmdDebug(int argc, char** argv);

std::string debugHelp();

// VS Code's launch.json for `targets` (the "ranks" of GET /v1/jobs/{id}/debug): one attach
// configuration per rank, named "cohort: <job> <rank name>", and a compound that attaches to all
// when there are several. `remote_root` non-empty: path mappings from `local_root` to it.
nlohmann::ordered_json vscodeLaunch(const std::string& job_id, const nlohmann::json& targets,
                                    const std::string& local_root, const std::string& remote_root);

// `existing` (a launch.json's text, comments allowed) with its cohort configurations for
// `job_id` replaced by those of `ours`, those of another job kept only where `still_runs(job)`
// says so (asked once per job), and every configuration of the user's own kept. Errors:
// kInvalidArgument when `existing` is not a JSON object.
Result<nlohmann::ordered_json> mergeLaunch(
    const std::string& existing, const nlohmann::ordered_json& ours, const std::string& job_id,
    const std::function<bool(const std::string& job)>& still_runs);

}  // namespace cohort::cli
