// The last records of a JSON-lines file of a job (metrics.jsonl, resources.jsonl): readers want
// the latest, and the files grow for as long as the job runs. Pure apart from the read.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cohort::job {

// The whole lines among the last `max_bytes` of `path` that are JSON objects, in file order
// (keys in their written order); a partial first or last line is left out. Nothing when the
// file is missing, not a regular file (it is never followed as a link) or unreadable.
std::vector<nlohmann::ordered_json> tailJsonLines(const std::string& path,
                                                  size_t max_bytes = 1 << 20);

}  // namespace cohort::job
