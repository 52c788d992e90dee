// Training metrics as ranks report them: a line of output of the form
//
//     cohort.log step=120 loss=0.4187 accuracy=0.912
//
// (what the Python helper's cohort.log(step=120, loss=..., accuracy=...) prints) is a metric
// record: `step` an integer, every other key a number (nan and inf too: stored as null). The
// coordinator stores each record with its rank and time in the job's metrics.jsonl; the line
// stays in the rank's log as it is. Keys are 1 to 64 characters of [A-Za-z0-9_./-] starting
// with a letter or '_', not `t` or `rank`; at most 64 per line, each once. Anything else on
// such a line makes the line not a record. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::agent {

struct MetricRecord {
  std::optional<int64_t> step;
  std::vector<std::pair<std::string, double>> values;  // in the line's order
};

// The record of `line` (no newline; a trailing '\r' is allowed), or nothing.
std::optional<MetricRecord> parseMetricLine(std::string_view line);

// One line of metrics.jsonl, without the newline: {"t":NANOS,"rank":R,"step":S,"loss":0.41,...}.
std::string metricJson(int64_t unix_nanos, int rank, const MetricRecord& record);

}  // namespace cohort::agent
