#include "cli/torchrun_flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "cli/job_options.h"

namespace cohort::cli {
namespace {

// Every name of a flag in one cell of the table: `--nnodes N`, `--tee` (`-t`), `-m`.
std::vector<std::string> flagsIn(const std::string& cell) {
  std::vector<std::string> names;
  const std::regex flag(R"(`(-{1,2}[a-z][a-z_-]*))");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), flag);
       it != std::sregex_iterator(); ++it) {
    names.push_back((*it)[1]);
  }
  return names;
}

std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// The table "torchrun's flag | on `cohort run`" of docs/frameworks.md: each flag (dashed) and
// what its row says cohort does with it.
std::map<std::string, std::string> docsTable() {
  std::ifstream in(std::string(COHORT_DOCS_DIR) + "/frameworks.md");
  std::map<std::string, std::string> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| torchrun's flag |", 0) == 0) {
      inside = true;
      continue;
    }
    if (!inside || line.rfind("|---", 0) == 0) continue;
    if (line.rfind("| ", 0) != 0) break;
    const size_t split = line.find(" | ", 2);
    if (split == std::string::npos) continue;
    for (const std::string& name : flagsIn(line.substr(2, split - 2))) {
      rows[dashed(name)] = line.substr(split + 3);
    }
  }
  return rows;
}

TEST(TorchrunFlags, TheDocsTableMapsEveryFlag) {
  const auto rows = docsTable();
  ASSERT_GT(rows.size(), 20u) << "no torchrun table in docs/frameworks.md";
  std::set<std::string> cohort;
  for (const FlagSpec& f : jobFlagSpecs()) {
    cohort.insert(f.name);
    if (!f.alias.empty()) cohort.insert(f.alias);
  }
  // Each flag of the list is in the table, saying what the list does with it; and each flag
  // the table names is one `cohort run` takes, in every spelling of the list.
  std::set<std::string> listed;
  for (const TorchrunFlag& t : torchrunFlags()) {
    for (const std::string& name : t.names) {
      listed.insert(dashed(name));
      EXPECT_TRUE(cohort.count(name)) << name << " is in torchrun_flags.cc but not parsed";
      auto row = rows.find(dashed(name));
      ASSERT_NE(row, rows.end()) << name << " is missing from docs/frameworks.md's table";
      const std::string& says = row->second;
      switch (t.kind) {
        case TorchrunFlag::Kind::kRefused:
          EXPECT_EQ(says.rfind("refused", 0), 0u) << name << ": " << says;
          break;
        case TorchrunFlag::Kind::kNothing:
          EXPECT_EQ(says.rfind("taken", 0), 0u) << name << ": " << says;
          break;
        case TorchrunFlag::Kind::kSame:
          // "the same" for a flag cohort has by torchrun's name, else the flag it is.
          EXPECT_NE(says.find(std::count(t.names.begin(), t.names.end(), t.cohort)
                                  ? std::string("the same")
                                  : t.cohort.substr(0, t.cohort.find('=') - 4)),
                    std::string::npos)
              << name << ": " << says;
          break;
      }
    }
  }
  for (const auto& [name, says] : rows) {
    EXPECT_TRUE(listed.count(name)) << name << " is in the docs' table but not in the list";
  }
}

// The installed torchrun's own parser, where Debian's python3-torch is there: every flag it
// has is in the list (a torch release that adds one fails here until it is placed).
TEST(TorchrunFlags, TheListHasEveryFlagOfTheInstalledTorchrun) {
  FILE* p = ::popen(
      "/usr/bin/python3 -c 'from torch.distributed.run import get_args_parser as g\n"
      "for a in g()._actions:\n print(*a.option_strings)' 2>/dev/null",
      "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0 || out.empty()) {
    GTEST_SKIP() << "no torch for /usr/bin/python3 (scripts/setup installs python3-torch): "
                    "the list was not compared with torchrun's own flags";
  }
  std::set<std::string> listed = {"-h", "--help"};  // cohort run --help
  for (const TorchrunFlag& t : torchrunFlags()) {
    for (const std::string& name : t.names) listed.insert(dashed(name));
  }
  std::istringstream lines(out);
  int seen = 0;
  for (std::string word; lines >> word; ++seen) {
    EXPECT_TRUE(listed.count(dashed(word))) << "torchrun's " << word << " is not in the list";
  }
  EXPECT_GT(seen, 15);
}

}  // namespace
}  // namespace cohort::cli
