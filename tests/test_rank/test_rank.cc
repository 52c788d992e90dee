// cohort-test-rank: plays a rank in multi-process tests. Its arguments are actions run in order;
// an action prefixed "rankN:" runs only on global rank N (COHORT_RANK), "attemptN:" only on
// restart attempt N (COHORT_RESTART_COUNT), "nodeN:" only on node N.
//
//   exit=N           exit with code N          sleep=S        sleep S seconds (fractions ok)
//   ignore-term      ignore SIGTERM            kill=SIG       kill itself with signal SIG
//   env              print the environment     echo=TEXT      print TEXT and a newline
//   pidfile=PATH     append "<pid>\n" to PATH  setsid-child=PATH  fork a child that leaves the
//   flood=BYTES      write BYTES of numbered lines as fast as possible   session (setsid), writes
//   partial=TEXT     print TEXT without newline                          its pid to PATH, sleeps
//   touch=PATH       create PATH           stamp=PATH     append "<rank> <unix nanos>\n" to PATH
//   wait-file=PATH   wait until PATH exists (to order ranks without guessing at sleeps)
//   work-file=REL    exit 3 unless $COHORT_WORK_DIR/REL exists (a staged input)
//   output-file=NAME write "rank <rank>\n" to $COHORT_OUTPUT_DIR/NAME
//   absent=PATH      exit 4 if PATH exists (what an isolated rank must not see)
//   spin=S           use the CPU for S seconds   hold=BYTES     allocate and touch BYTES, kept
//   bytes=HEX        write these bytes as they are (any byte: NUL, invalid UTF-8)
//   truth=PATH       from here on, record the rank's ground truth in PATH (a file the test
//                    owns, outside the job): "start R A PID" now, "line R A K" after each line
//                    `lines` printed, and "end R A exit N" / "end R A kill SIG" just before the
//                    rank ends by itself (R: rank, A: restart attempt); a rank that ends any
//                    other way (a signal it did not send itself) records no end
//   lines=N/S        print N lines "rank R attempt A line K", S seconds apart
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <ctime>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

namespace {

int envInt(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

void appendLine(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  std::string text = line + "\n";
  ssize_t n = ::write(fd, text.data(), text.size());
  (void)n;
  ::close(fd);
}

std::string truth_file;  // truth=PATH

// "R A": this rank and its restart attempt, for the ground truth.
std::string whoAmI() {
  return std::to_string(envInt("COHORT_RANK")) + " " + std::to_string(envInt("COHORT_RESTART_COUNT"));
}

void truth(const std::string& what) {
  if (!truth_file.empty()) appendLine(truth_file, what);
}

void sleepFor(double secs) {
  timespec ts{static_cast<time_t>(secs), static_cast<long>((secs - static_cast<long>(secs)) * 1e9)};
  while (nanosleep(&ts, &ts) < 0) {
  }
}

void flood(long bytes) {
  std::string buf;
  long line = 0;
  int rank = envInt("COHORT_RANK");
  while (bytes > 0) {
    buf.clear();
    while (buf.size() < 65536 && bytes > 0) {
      char text[128];
      int n = std::snprintf(text, sizeof text, "rank %d line %ld %s\n", rank, line++,
                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
      buf.append(text, static_cast<size_t>(n));
      bytes -= n;
    }
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t n = ::write(1, buf.data() + off, buf.size() - off);
      if (n <= 0) std::exit(3);
      off += static_cast<size_t>(n);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    std::string action = argv[i];
    // Conditions may be chained in any order ("attempt0:rank1:exit=3"); all must hold.
    bool skip = false;
    for (bool stripped = true; stripped;) {
      stripped = false;
      for (const char* prefix : {"rank", "attempt", "node"}) {
        size_t len = std::strlen(prefix);
        size_t colon = action.find(':');
        if (action.compare(0, len, prefix) != 0 || colon == std::string::npos ||
            action.size() <= len || !std::isdigit(static_cast<unsigned char>(action[len]))) {
          continue;
        }
        int want = std::atoi(action.c_str() + len);
        const char* var = prefix[0] == 'r'   ? "COHORT_RANK"
                          : prefix[0] == 'a' ? "COHORT_RESTART_COUNT"
                                             : "COHORT_NODE_RANK";
        skip = skip || envInt(var) != want;
        action = action.substr(colon + 1);
        stripped = true;
      }
    }
    if (skip) continue;
    std::string key = action.substr(0, action.find('='));
    std::string value = action.find('=') == std::string::npos ? "" : action.substr(action.find('=') + 1);
    if (key == "exit") {
      std::fflush(stdout);
      truth("end " + whoAmI() + " exit " + std::to_string(std::atoi(value.c_str())));
      return std::atoi(value.c_str());
    } else if (key == "sleep") {
      sleepFor(std::atof(value.c_str()));
    } else if (key == "truth") {
      truth_file = value;
      truth("start " + whoAmI() + " " + std::to_string(::getpid()));
    } else if (key == "lines") {
      const long count = std::atol(value.c_str());
      const double gap = value.find('/') == std::string::npos
                             ? 0
                             : std::atof(value.c_str() + value.find('/') + 1);
      for (long k = 0; k < count; ++k) {
        if (k > 0 && gap > 0) sleepFor(gap);
        std::printf("rank %d attempt %d line %ld\n", envInt("COHORT_RANK"),
                    envInt("COHORT_RESTART_COUNT"), k);
        std::fflush(stdout);
        truth("line " + whoAmI() + " " + std::to_string(k));
      }
    } else if (key == "ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
    } else if (key == "kill") {
      std::fflush(stdout);
      truth("end " + whoAmI() + " kill " + std::to_string(std::atoi(value.c_str())));
      ::kill(::getpid(), std::atoi(value.c_str()));
    } else if (key == "env") {
      for (char** e = environ; *e; ++e) std::printf("%s\n", *e);
    } else if (key == "echo") {
      std::printf("%s\n", value.c_str());
    } else if (key == "partial") {
      std::printf("%s", value.c_str());
      std::fflush(stdout);
    } else if (key == "pidfile") {
      appendLine(value, std::to_string(::getpid()));
    } else if (key == "wait-file") {
      timespec tick{0, 5'000'000};
      while (::access(value.c_str(), F_OK) != 0) nanosleep(&tick, nullptr);
    } else if (key == "touch") {
      appendLine(value, "");
    } else if (key == "stamp") {
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      appendLine(value, std::to_string(envInt("COHORT_RANK")) + " " +
                            std::to_string(ts.tv_sec * 1000000000LL + ts.tv_nsec));
    } else if (key == "work-file") {
      const char* dir = std::getenv("COHORT_WORK_DIR");
      if (!dir || ::access((std::string(dir) + "/" + value).c_str(), R_OK) != 0) {
        std::fprintf(stderr, "cohort-test-rank: %s/%s is missing\n", dir ? dir : "?",
                     value.c_str());
        return 3;
      }
    } else if (key == "absent") {
      if (::access(value.c_str(), F_OK) == 0) {
        std::fprintf(stderr, "cohort-test-rank: %s is visible\n", value.c_str());
        return 4;
      }
    } else if (key == "output-file") {
      const char* dir = std::getenv("COHORT_OUTPUT_DIR");
      appendLine(std::string(dir ? dir : ".") + "/" + value,
                 "rank " + std::to_string(envInt("COHORT_RANK")));
    } else if (key == "setsid-child") {
      // The rank goes on only once the grandchild has written its pid: a test that reads the
      // file after the job must see every grandchild, however fast the job ends.
      int ready[2];
      if (::pipe(ready) != 0) return 65;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::setsid();
        if (::fork() == 0) {
          ::signal(SIGTERM, SIG_IGN);
          appendLine(value, std::to_string(::getpid()));
          ::close(ready[1]);
          for (;;) ::pause();
        }
        ::close(ready[1]);
        char byte;
        while (::read(ready[0], &byte, 1) < 0) {
        }
        _exit(0);
      }
      ::close(ready[1]);
      ::close(ready[0]);
      int status = 0;
      ::waitpid(pid, &status, 0);
    } else if (key == "flood") {
      flood(std::atol(value.c_str()));
    } else if (key == "spin") {
      // CPU time, not wall time: on a busy machine the rank still uses S seconds of CPU.
      timespec start{}, now{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
      volatile unsigned long sink = 0;
      do {
        for (int i = 0; i < 1000000; ++i) sink = sink + static_cast<unsigned long>(i);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
      } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 <
               std::atof(value.c_str()));
    } else if (key == "hold") {
      size_t size = std::strtoull(value.c_str(), nullptr, 10);
      // A global raw pointer keeps the block reachable to the end (a leak checker's "held").
      static char* held = nullptr;
      held = static_cast<char*>(std::realloc(held, size));
      if (!held) return 66;
      std::memset(held, 1, size);  // resident, not only reserved
    } else if (key == "bytes") {
      std::fflush(stdout);
      std::string raw;
      for (size_t i = 0; i + 1 < value.size(); i += 2) {
        raw += static_cast<char>(std::strtol(value.substr(i, 2).c_str(), nullptr, 16));
      }
      ssize_t n = ::write(1, raw.data(), raw.size());
      (void)n;
    } else {
      std::fprintf(stderr, "cohort-test-rank: unknown action '%s'\n", action.c_str());
      return 64;
    }
  }
  truth("end " + whoAmI() + " exit 0");
  return 0;
}
