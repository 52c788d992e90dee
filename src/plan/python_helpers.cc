#include "plan/python_helpers.h"

#include "job/layout.h"

namespace cohort::plan {

extern const EmbeddedFile kPythonHelpers[];
extern const std::size_t kPythonHelpersCount;

std::vector<GeneratedFile> pythonHelperFiles(const std::string& job_dir) {
  const std::string dir = job::Layout(job_dir).pythonHelpersDir();
  std::vector<GeneratedFile> files;
  for (std::size_t i = 0; i < kPythonHelpersCount; ++i) {
    const EmbeddedFile& f = kPythonHelpers[i];
    files.push_back({dir + "/" + f.name, std::string(f.content, f.size)});
  }
  return files;
}

std::string pythonPathWithHelpers(const std::string& before, const std::string& job_dir) {
  const std::string dir = job::Layout(job_dir).pythonHelpersDir();
  return before.empty() ? dir : before + ":" + dir;
}

}  // namespace cohort::plan
