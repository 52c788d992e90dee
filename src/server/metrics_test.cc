// The per-job exposition: every line of it read back by a strict reader of the Prometheus text
// format (0.0.4), hostile job names included, and its cap on series.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "util/text.h"

namespace cohort::server {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // values unescaped
  double value = 0;
};

bool metricNameChar(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// One sample line, or nullopt when it is not exactly one: name, optional {label="value",...}
// with only \\, \" and \n escapes, one space, a number, nothing after.
std::optional<Sample> readSample(const std::string& line) {
  Sample s;
  size_t i = 0;
  while (i < line.size() && metricNameChar(line[i], i == 0)) s.name += line[i++];
  if (s.name.empty()) return std::nullopt;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::string key;
      while (i < line.size() && metricNameChar(line[i], key.empty())) key += line[i++];
      if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return std::nullopt;
      }
      i += 2;
      std::string value;
      for (;; ++i) {
        if (i >= line.size()) return std::nullopt;
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          if (++i >= line.size()) return std::nullopt;
          if (line[i] == 'n') {
            value += '\n';
          } else if (line[i] == '\\' || line[i] == '"') {
            value += line[i];
          } else {
            return std::nullopt;
          }
        } else {
          value += line[i];
        }
      }
      ++i;  // the closing quote
      if (!s.labels.emplace(key, value).second) return std::nullopt;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return std::nullopt;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return std::nullopt;
  const std::string number = line.substr(i + 1);
  char* end = nullptr;
  s.value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != 0) return std::nullopt;
  return s;
}

// Every line of `text` read: comments are HELP or TYPE of a known type, each sample's family
// had its TYPE first. Fails the test at the first line that is neither.
std::vector<Sample> readExposition(const std::string& text) {
  std::vector<Sample> out;
  std::map<std::string, std::string> types;
  EXPECT_TRUE(!text.empty() && text.back() == '\n');
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    if (startsWith(line, "# HELP ")) continue;
    if (startsWith(line, "# TYPE ")) {
      std::vector<std::string> f = split(line, ' ');
      EXPECT_EQ(f.size(), 4u) << line;
      if (f.size() != 4) continue;
      EXPECT_TRUE(f[3] == "gauge" || f[3] == "counter") << line;
      EXPECT_TRUE(types.emplace(f[2], f[3]).second) << "a second TYPE: " << line;
      continue;
    }
    auto sample = readSample(line);
    EXPECT_TRUE(sample) << "not a sample line: '" << line << "'";
    if (!sample) continue;
    EXPECT_TRUE(types.count(sample->name)) << "no TYPE before: " << line;
    out.push_back(*sample);
  }
  return out;
}

JobSeries job(const std::string& id, const std::string& name, int ranks) {
  JobSeries j{id, name, "alice", "running", {}};
  for (int r = 0; r < ranks; ++r) {
    JobSeries::Rank rank;
    rank.role = "worker";
    rank.rank = r;
    rank.node = r / 2;
    rank.cpu_seconds = 1.5 * r;
    rank.rss_bytes = int64_t{100} << 20;
    j.ranks.push_back(rank);
  }
  return j;
}

TEST(JobMetrics, HostileNamesNeitherEndALineNorALabel) {
  const std::string hostile =
      "x\"} 1\ncohort_job_info{job_id=\"other\",account=\"bob\"} 1\n# TYPE evil gauge\\\\\r\t\x7f";
  JobSeries j = job("job-1", hostile, 2);
  j.ranks[0].role = "role\"\\\n";
  j.account = "a\"b";
  const std::string text = renderJobMetrics({j}, 1000);
  const std::vector<Sample> samples = readExposition(text);
  ASSERT_EQ(samples.size(), 6u) << text;  // info, 2 x cpu, 2 x rss, dropped
  EXPECT_EQ(samples[0].name, "cohort_job_info");
  // Read back, the name is the one given (control characters but the newline as '?').
  EXPECT_EQ(samples[0].labels.at("job_name"),
            "x\"} 1\ncohort_job_info{job_id=\"other\",account=\"bob\"} 1\n# TYPE evil "
            "gauge\\\\??\?");
  EXPECT_EQ(samples[0].labels.at("account"), "a\"b");
  EXPECT_EQ(samples[0].labels.at("job_id"), "job-1");
  EXPECT_EQ(samples[1].labels.at("role"), "role\"\\\n");
  for (const Sample& s : samples)
    EXPECT_NE(s.labels.count("job_id") ? s.labels.at("job_id") : "", "other");
  EXPECT_EQ(text.find("\n# TYPE evil"), std::string::npos) << "a comment line was injected";
  EXPECT_EQ(text.find("\ncohort_job_info{job_id=\"other\""), std::string::npos);
}

TEST(JobMetrics, EachRankHasItsSamplesWithTheJobsLabels) {
  JobSeries j = job("job-2", "train", 2);
  j.ranks[1].gpu_util = 87;
  j.ranks[1].gpu_memory_bytes = int64_t{1} << 30;
  JobSeries ended{"job-3", "old", "bob", "succeeded", {}};
  auto samples = readExposition(renderJobMetrics({j, ended}, 1000));
  std::map<std::string, std::vector<Sample>> by_name;
  for (const Sample& s : samples) by_name[s.name].push_back(s);
  ASSERT_EQ(by_name["cohort_job_info"].size(), 2u);
  EXPECT_EQ(by_name["cohort_job_info"][1].labels.at("state"), "succeeded");
  ASSERT_EQ(by_name["cohort_rank_cpu_seconds_total"].size(), 2u);
  const Sample& cpu = by_name["cohort_rank_cpu_seconds_total"][1];
  EXPECT_EQ(cpu.value, 1.5);
  EXPECT_EQ(cpu.labels, (std::map<std::string, std::string>{{"job_id", "job-2"},
                                                            {"job_name", "train"},
                                                            {"account", "alice"},
                                                            {"role", "worker"},
                                                            {"rank", "1"},
                                                            {"node", "0"}}));
  ASSERT_EQ(by_name["cohort_rank_gpu_utilization_percent"].size(), 1u);
  EXPECT_EQ(by_name["cohort_rank_gpu_utilization_percent"][0].value, 87);
  EXPECT_EQ(by_name["cohort_rank_gpu_memory_bytes"][0].value, 1 << 30);
  EXPECT_EQ(by_name["cohort_job_series_dropped"][0].value, 0);
}

TEST(JobMetrics, SeriesOverTheCapAreCountedNotShown) {
  auto samples = readExposition(renderJobMetrics({job("a", "a", 10), job("b", "b", 10)}, 25));
  // 2 info + 20 cpu + 20 rss = 42 series; 25 are shown.
  ASSERT_EQ(samples.size(), 26u);
  EXPECT_EQ(samples.back().name, "cohort_job_series_dropped");
  EXPECT_EQ(samples.back().value, 17);
}

TEST(JobMetrics, InvalidUtf8IsReplacedAndValidUtf8Kept) {
  EXPECT_EQ(escapeLabelValue("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(escapeLabelValue("\xe2\x82\xac"), "\xe2\x82\xac");
  EXPECT_EQ(escapeLabelValue("a\xff"
                             "b\xc3"),
            "a?b?");
  EXPECT_EQ(escapeLabelValue("\xc0\xaf"), "??") << "an overlong '/'";
  EXPECT_EQ(escapeLabelValue("\xed\xa0\x80"), "???") << "a surrogate";
}

// The reader can tell a broken line.
TEST(JobMetrics, TheReaderRefusesWhatIsNotTheFormat) {
  EXPECT_FALSE(readSample("m{a=\"x} 1"));
  EXPECT_FALSE(readSample("m{a=\"x\\q\"} 1"));
  EXPECT_FALSE(readSample("m{a=\"x\"} 1 extra"));
  EXPECT_FALSE(readSample("m{a=\"x\",a=\"y\"} 1"));
  EXPECT_FALSE(readSample("1m 1"));
  EXPECT_TRUE(readSample("m{a=\"x\\\"\\n\\\\\"} 1.5e3"));
}

}  // namespace
}  // namespace cohort::server
