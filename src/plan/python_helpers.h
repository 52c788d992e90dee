// cohort's Python module (python/cohort: the in-script helpers, cohort.run and the server's
// SDK; standard library only), which every rank can `import cohort` without installing it. It
// is built into the cohort binary; whatever writes a job's generated files (the coordinator
// into its job directory, a node agent into a job directory of its own) writes it into
// files/python/, and every rank's PYTHONPATH ends with that directory: after the job's own
// PYTHONPATH and, for a rank that inherits the user's environment, the user's. A `cohort` the
// rank's Python finds anywhere else (site-packages included) is imported in its place
// (python_helpers_init.py). Pure; any thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace cohort::plan {

struct EmbeddedFile {
  const char* name;  // below files/python/
  const char* content;
  std::size_t size;
};

// The module's files for the job directory `job_dir`, at their absolute paths.
std::vector<GeneratedFile> pythonHelperFiles(const std::string& job_dir);

// PYTHONPATH for a rank whose PYTHONPATH would otherwise be `before` ("" for none): `before`,
// then the module's directory of the job directory `job_dir`.
std::string pythonPathWithHelpers(const std::string& before, const std::string& job_dir);

}  // namespace cohort::plan
