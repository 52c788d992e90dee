// libFuzzer entry for the proxy's reader of a lab's answer head (lab_proxy.h:
// parseLabAnswerHead), which reads what a session's JupyterLab, code of the account's, sends
// back through the server: a status line and headers, bounded, fed as the bytes arrive. The
// input is split at its first byte's value into two arrivals, as a socket would hand them over.
// A crash, a sanitizer report, an escaping exception or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/lab_proxy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  std::string got(all.substr(0, cut));
  for (int arrival = 0; arrival < 2; ++arrival) {
    auto head = cohort::server::parseLabAnswerHead(got);
    if (head && *head) {
      const cohort::server::LabAnswerHead& h = **head;
      if (h.size > got.size() || h.size > cohort::server::kMaxLabHead) __builtin_trap();
      for (const auto& [name, value] : h.headers) {
        for (char c : name) {
          if (c >= 'A' && c <= 'Z') __builtin_trap();  // names come back in lower case
        }
        (void)value;
      }
    }
    got = std::string(all);
  }
  return 0;
}
