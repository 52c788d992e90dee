// Hand-made ustar entries for tests that feed archives to the code-upload reader: any name,
// type, link target or content, the checksum right unless asked otherwise, so that a test can
// build the hostile archives a client could send.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace cohort::testing {

// One entry: its 512-byte header and its content padded to 512. `mode` is written as given.
inline std::string tarEntry(const std::string& name, char type, const std::string& content = "",
                            const std::string& link = "", const std::string& prefix = "",
                            unsigned mode = 0644) {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(h.data() + 100, 8, "%07o", mode & 07777);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  std::snprintf(h.data() + 124, 12, "%011o", static_cast<unsigned>(content.size()));
  std::snprintf(h.data() + 136, 12, "%011o", 0);
  h[156] = type;
  std::memcpy(h.data() + 157, link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memcpy(h.data() + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
  }
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  h[155] = ' ';
  std::string data = content;
  data.resize((content.size() + 511) / 512 * 512, '\0');
  return h + data;
}

// The two zero blocks that end an archive.
inline std::string tarEnd() { return std::string(1024, '\0'); }

}  // namespace cohort::testing
