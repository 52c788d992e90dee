#include "job/layout.h"

namespace cohort::job {

std::string jobsDir(const std::string& data_root) { return data_root + "/jobs"; }

}  // namespace cohort::job
