// Job ids: "<name>-<yyyymmdd-hhmmss>-<6 hex digits>", the time local, so that local and server
// jobs are named alike and sort by their start. Thread-safe.
#pragma once

#include <string>

namespace cohort::job {

// Unique enough with the stamp; whoever stores ids draws again on a collision.
std::string newJobId(const std::string& name);

}  // namespace cohort::job
