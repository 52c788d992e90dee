// libFuzzer entry for the job-file parser (built with -DCOHORT_FUZZ=ON and clang; not part of
// CI, whose fixed-seed fuzz test is job_spec_fuzz_test.cc). Every input must come back as a job
// or an error: a crash, a sanitizer report, an escaping exception or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "spec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = cohort::spec::parseJobFile(text, "fuzz.yaml");
  if (spec && cohort::spec::validate(*spec)) {
    auto again = cohort::spec::parseJobFile(cohort::spec::toJobFile(*spec), "fuzz.json");
    if (!again) __builtin_trap();  // what toJobFile writes must parse back
  }
  return 0;
}
