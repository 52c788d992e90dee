#include "job/jsonl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fd.h"

namespace cohort::job {

std::vector<nlohmann::ordered_json> tailJsonLines(const std::string& path, size_t max_bytes) {
  std::vector<nlohmann::ordered_json> out;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return out;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return out;
  const off_t size = st.st_size;
  const off_t from =
      size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string text(static_cast<size_t>(size - from), '\0');
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), from);
  if (n <= 0) return out;
  text.resize(static_cast<size_t>(n));
  size_t start = 0;
  if (from > 0) {
    const size_t first = text.find('\n');
    if (first == std::string::npos) return out;
    start = first + 1;
  }
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // still being written
    auto j =
        nlohmann::ordered_json::parse(text.begin() + static_cast<ptrdiff_t>(start),
                                      text.begin() + static_cast<ptrdiff_t>(end), nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
    start = end + 1;
  }
  return out;
}

}  // namespace cohort::job
