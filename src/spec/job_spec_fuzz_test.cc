// A fuzz test of the job-file parser, run with the unit tests: random bytes and mutations of the
// examples' job files (YAML, and their JSON forms from toJobFile), thousands of cases from a
// fixed seed. Whatever the input, parseJobFile and validate return (no crash, no exception, no
// hang) and every refusal is an invalid_argument error that names file:line; whatever they
// accept survives toJobFile and parses back to the same job.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "spec/job_spec.h"

namespace cohort::spec {
namespace {

std::vector<std::string> exampleJobFiles() {
  std::vector<std::string> files;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(COHORT_EXAMPLES_DIR)) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      files.push_back(text.str());
    }
  }
  return files;
}

// Pieces that reach the parser's corners: YAML structure, JSON, numbers at the edges.
const std::vector<std::string> kTokens = {
    "[", "]", "{", "}", ":", ": ", ", ", "- ", "\n", "\n  ", "\"", "'", "# ", "&a ", "*a", "!!int ",
    "!!str ", "|\n", ">\n", "---\n", "...\n", "? ", "~", "null", "\t", "\\", "\\0", "\"\\0\"",
    "%YAML 1.2\n", "99999999999999999999", "-1", "0", "1e309", "nan", "auto", "2Gi", "365d",
    "99999999999999999999h", "roles", "worker", "nodes", "procs_per_node", "env", "policy",
    "grace_period", "max_runtime", "inputs", "outputs", "command", "COHORT_RANK", "../",
    std::string(100, '['), std::string(100, '{'), std::string(70, ' '), "\xff\xfe", "\xc3\xa9",
    std::string(1, '\0')};

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  size_t below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  std::string randomBytes() {
    std::string out(below(512), '\0');
    for (char& c : out) c = static_cast<char>(below(256));
    return out;
  }

  std::string mutate(std::string text, const std::vector<std::string>& seeds) {
    const size_t steps = 1 + below(4);
    for (size_t s = 0; s < steps; ++s) {
      const size_t at = below(text.size() + 1);
      switch (below(7)) {
        case 0:  // flip a byte
          if (!text.empty()) text[below(text.size())] = static_cast<char>(below(256));
          break;
        case 1:  // insert a token
          text.insert(at, kTokens[below(kTokens.size())]);
          break;
        case 2:  // delete a range
          text.erase(at, below(32));
          break;
        case 3: {  // repeat a range
          std::string piece = text.substr(at, below(64));
          for (size_t i = below(20); i > 0; --i) text.insert(at, piece);
          break;
        }
        case 4: {  // splice in part of another seed
          const std::string& other = seeds[below(seeds.size())];
          const size_t from = below(other.size());
          text.insert(at, other.substr(from, below(200)));
          break;
        }
        case 5:  // cut the end off
          text.resize(at);
          break;
        default: {  // replace a line's value with a token
          const size_t colon = text.find(": ", at);
          if (colon != std::string::npos) {
            const size_t eol = text.find('\n', colon);
            text.replace(colon + 2, eol == std::string::npos ? std::string::npos : eol - colon - 2,
                         kTokens[below(kTokens.size())]);
          }
        }
      }
    }
    return text;
  }

 private:
  std::mt19937 rng_;
};

struct Outcome {
  bool accepted = false;
  std::string problem;  // empty when the outcome is one the contract allows
};

Outcome check(const std::string& text) {
  static const std::regex located("^fuzz\\.yaml:[1-9][0-9]*: ");
  Outcome out;
  try {
    auto spec = parseJobFile(text, "fuzz.yaml");
    if (spec) {
      auto valid = validate(*spec);
      if (valid) {
        out.accepted = true;
        const std::string json = toJobFile(*spec);
        auto again = parseJobFile(json, "fuzz.yaml");
        if (!again) {
          out.problem = "toJobFile's output does not parse: " + again.error().message;
        } else if (!validate(*again)) {
          out.problem = "toJobFile's output does not validate: " + validate(*again).error().message;
        } else if (toJobFile(*again) != json) {
          out.problem = "toJobFile(parseJobFile(toJobFile(s))) differs";
        }
        return out;
      }
      if (valid.error().code != Code::kInvalidArgument) {
        out.problem = "validate: not invalid_argument: " + valid.error().message;
      } else if (!std::regex_search(valid.error().message, located)) {
        out.problem = "validate: no file:line: " + valid.error().message;
      }
      return out;
    }
    if (spec.error().code != Code::kInvalidArgument) {
      out.problem = "parseJobFile: not invalid_argument: " + spec.error().message;
    } else if (!std::regex_search(spec.error().message, located)) {
      out.problem = "parseJobFile: no file:line: " + spec.error().message;
    }
  } catch (const std::exception& e) {
    out.problem = std::string("exception: ") + e.what();
  } catch (...) {
    out.problem = "an exception that is not a std::exception";
  }
  return out;
}

std::string printable(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 400)) {
    const auto u = static_cast<unsigned char>(c);
    if (u == '\n' || (u >= 32 && u < 127)) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

TEST(JobFileFuzz, AnyInputIsAJobOrALocatedErrorNeverACrash) {
  std::vector<std::string> seeds = exampleJobFiles();
  ASSERT_GE(seeds.size(), 4u) << "no job files under " << COHORT_EXAMPLES_DIR;
  const size_t yaml_seeds = seeds.size();
  for (size_t i = 0; i < yaml_seeds; ++i) {
    auto spec = parseJobFile(seeds[i], "example.yaml");
    ASSERT_TRUE(spec) << spec.error().message;
    seeds.push_back(toJobFile(*spec));  // the JSON form the server receives
  }

  Mutator mutator(20240601);
  constexpr int kMutations = 4000;
  constexpr int kRandom = 500;
  int accepted = 0;
  auto slowest = std::chrono::nanoseconds::zero();
  std::string slowest_input;
  for (int i = 0; i < kMutations + kRandom; ++i) {
    const std::string input = i < kMutations ? mutator.mutate(seeds[i % seeds.size()], seeds)
                                             : mutator.randomBytes();
    const auto start = std::chrono::steady_clock::now();
    const Outcome outcome = check(input);
    const auto took = std::chrono::steady_clock::now() - start;
    if (took > slowest) {
      slowest = took;
      slowest_input = input;
    }
    ASSERT_EQ(outcome.problem, "") << "case " << i << ":\n" << printable(input);
    accepted += outcome.accepted;
  }
  // Mutations must sometimes keep a job valid, or the test only sees the first error path.
  EXPECT_GT(accepted, kMutations / 20);
  // A bound that only a hang (or a quadratic blow-up) reaches, far above any real case.
  EXPECT_LT(slowest, std::chrono::seconds(5)) << printable(slowest_input);
}

}  // namespace
}  // namespace cohort::spec
