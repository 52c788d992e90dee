#include "agent/metrics.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace cohort::agent {

namespace {

constexpr std::string_view kPrefix = "cohort.log ";
constexpr size_t kMaxKeys = 64;
constexpr size_t kMaxKey = 64;

bool validKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKey) return false;
  if (!std::isalpha(static_cast<unsigned char>(key[0])) && key[0] != '_') return false;
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '/' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

std::optional<double> number(std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<MetricRecord> parseMetricLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  line.remove_prefix(kPrefix.size());
  MetricRecord record;
  while (!line.empty()) {
    const size_t space = line.find(' ');
    std::string_view token = line.substr(0, space);
    line.remove_prefix(space == std::string_view::npos ? line.size() : space + 1);
    if (token.empty()) continue;
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = token.substr(0, eq);
    const auto value = number(token.substr(eq + 1));
    if (!validKey(key) || !value || key == "t" || key == "rank") return std::nullopt;
    if (key == "step") {
      if (!std::isfinite(*value) || *value != std::floor(*value) || std::fabs(*value) > 9e15 ||
          record.step) {
        return std::nullopt;
      }
      record.step = static_cast<int64_t>(*value);
      continue;
    }
    for (const auto& [k, v] : record.values) {
      if (k == key) return std::nullopt;  // said twice
    }
    if (record.values.size() == kMaxKeys) return std::nullopt;
    record.values.emplace_back(std::string(key), *value);
  }
  if (record.values.empty()) return std::nullopt;
  return record;
}

std::string metricJson(int64_t unix_nanos, int rank, const MetricRecord& record) {
  std::string out = "{\"t\":" + std::to_string(unix_nanos) + ",\"rank\":" + std::to_string(rank);
  if (record.step) out += ",\"step\":" + std::to_string(*record.step);
  for (const auto& [key, value] : record.values) {
    char buf[32];
    if (std::isfinite(value)) {
      std::snprintf(buf, sizeof buf, "%.9g", value);
    } else {
      std::snprintf(buf, sizeof buf, "null");  // a loss gone NaN is kept, as JSON can say it
    }
    // Keys are [A-Za-z0-9_./-]: nothing to escape.
    out += ",\"" + key + "\":" + buf;
  }
  return out + "}";
}

}  // namespace cohort::agent
