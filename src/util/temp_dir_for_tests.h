// A directory under /tmp for one test, removed with everything in it when the test is done.
// Header-only, for the unit tests (the integration tests have their own in harness.h).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace cohort {

class TempDir {
 public:
  // `prefix`: what the directory's name starts with, to tell whose it is ("cohort-env-test").
  explicit TempDir(const std::string& prefix = "cohort-test") {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }  // "" when it could not be made

 private:
  std::string path_;
};

}  // namespace cohort
