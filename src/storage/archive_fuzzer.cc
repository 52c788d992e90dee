// libFuzzer entry for the code-upload extractor (storage/archive.h's extractArchive, which every
// POST /v1/uploads goes through): each input is extracted into a fresh directory, which must
// then hold nothing outside it: no link that leads out, no device, and no byte over the limits.
// A crash, a sanitizer report, an escaping exception, a hang or a file outside is a finding.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "storage/archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    char pattern[] = "/tmp/cohort-archive-fuzz-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (!made) std::abort();
    return std::string(made);
  }();
  const std::string target = root + "/x";
  cohort::storage::ArchiveLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_entries = 1000;
  auto stats = cohort::storage::extractArchive(
      std::string_view(reinterpret_cast<const char*>(data), size), target, limits);
  std::error_code ec;
  if (stats) {
    // Everything extracted is below the target, and no link leads out of it.
    for (auto it = std::filesystem::recursive_directory_iterator(target, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_symlink(ec)) {
        const auto to = std::filesystem::read_symlink(it->path(), ec);
        if (to.is_absolute()) __builtin_trap();
        const auto resolved = (it->path().parent_path() / to).lexically_normal().string();
        if (resolved.rfind(target, 0) != 0) __builtin_trap();
      } else if (!it->is_directory(ec) && !it->is_regular_file(ec)) {
        __builtin_trap();
      }
    }
  }
  // Nothing beside the target: whatever was written went below it.
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (e.path() != target) __builtin_trap();
  }
  std::filesystem::remove_all(target, ec);
  return 0;
}
