#include "job/layout.h"

namespace cohort::job {

std::string jobsDir(const std::string& data_root) { return data_root + "/jobs"; }

std::string uploadsDir(const std::string& data_root) { return data_root + "/uploads"; }

}  // namespace cohort::job
