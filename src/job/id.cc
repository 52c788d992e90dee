#include "job/id.h"

#include <ctime>

#include "util/text.h"

namespace cohort::job {

std::string newJobId(const std::string& name) {
  time_t now = ::time(nullptr);
  tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return name + "-" + stamp + "-" + randomHex(3).value_or("000000");
}

}  // namespace cohort::job
