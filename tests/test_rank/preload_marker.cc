// What a hostile job names in its env: LD_PRELOAD. Every process that loads this library appends
// one line to the file $TEST_MARKER_FILE: its command name and that of process 1 of its PID
// namespace ("bwrap" in a sandbox). Any other is code of the job's that ran outside its sandbox.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace {

std::string_view readSmall(const char* path, char* buf, size_t size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  return n > 0 ? std::string_view(buf, static_cast<size_t>(n)) : std::string_view();
}

__attribute__((constructor)) void mark() {
  const char* path = std::getenv("TEST_MARKER_FILE");
  if (!path) return;
  char comm[64] = {}, first[64] = {};
  std::string_view name = readSmall("/proc/self/comm", comm, sizeof comm);
  if (!name.empty() && name.back() == '\n') name.remove_suffix(1);
  // Process 1 of its PID namespace: bubblewrap's own in a sandbox, the machine's init outside.
  std::string_view init = readSmall("/proc/1/comm", first, sizeof first);
  if (!init.empty() && init.back() == '\n') init.remove_suffix(1);
  char out[160];
  int n = std::snprintf(out, sizeof out, "%.*s %.*s\n", static_cast<int>(name.size()), name.data(),
                        static_cast<int>(init.size()), init.data());
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  if (n > 0) (void)!::write(fd, out, static_cast<size_t>(n));
  ::close(fd);
}

}  // namespace
