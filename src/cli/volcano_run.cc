#include "cli/volcano_run.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "backends/volcano.h"
#include "backends/volcano_cluster.h"
#include "cli/args.h"
#include "proc/event_loop.h"
#include "spec/job_spec.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::cli {

namespace {

using Clock = std::chrono::steady_clock;

constexpr Millis kSettle{1000};

void say(const std::string& line) { std::fprintf(stderr, "cohort: %s\n", line.c_str()); }

int refuse(const Error& e) {
  std::fprintf(stderr, "cohort: error: %s\n", e.message.c_str());
  return exitCodeFor(e);
}

// A line of the coordinator's log, where `cohort run` would have printed it: the ranks' (each
// prefixed "[role/rank node]") on stdout, cohort's own (progress, the root cause) on stderr. The
// kubelet keeps both streams in one log, so this is told by the line.
std::atomic<bool> verdict_said{false};  // the coordinator said the job's end in its log

void printLine(std::string_view line) {
  if (startsWith(line, "cohort: job ") &&
      (line.find(" succeeded") != std::string_view::npos ||
       line.find(" failed: ") != std::string_view::npos ||
       line.find(" stopped") != std::string_view::npos)) {
    verdict_said = true;
  }
  FILE* to = startsWith(line, "[") ? stdout : stderr;
  std::fwrite(line.data(), 1, line.size(), to);
  std::fputc('\n', to);
  if (to == stdout) std::fflush(stdout);
}

// Follows the submitted job to its end; see volcano_run.h.
class Follower {
 public:
  Follower(backends::VolcanoCluster& cluster, backends::VolcanoJobRef ref, bool progress,
           Millis stop_within)
      : cluster_(cluster), ref_(std::move(ref)), progress_(progress), stop_within_(stop_within) {}

  int run(proc::SignalFd& signals) {
    UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake.valid()) return refuse(failErrno("eventfd").value());
    wake_ = wake.get();
    backends::VolcanoWatch watch(cluster_, ref_, [this] { poke(); });
    int code = -1;
    while (code < 0) {
      pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {wake_, POLLIN, 0}};
      ::poll(fds, 2, 500);
      uint64_t n = 0;
      while (::read(wake_, &n, sizeof n) > 0) {
      }
      while (int sig = signals.next()) onSignal(sig);
      code = step(watch);
    }
    stop_log_ = true;
    if (log_.joinable()) log_.join();
    if (auto removed = cluster_.removeSecret(ref_); !removed) say(removed.error().message);
    return code;
  }

 private:
  void poke() {
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }

  void onSignal(int sig) {
    if (stopping_ == 0) {
      stopping_ = sig;
      stop_by_ = Clock::now() + stop_within_;
      say(spec::stopSignalName(sig) + " received: stopping the job: deleting its Volcano Job " +
          (started_ ? "(every pod gets SIGTERM and the coordinator stops the ranks gracefully); "
                      "press Ctrl-C again to kill its pods at once"
                    : "(no rank has started)"));
      if (auto removed = cluster_.remove(ref_, false); !removed) say(removed.error().message);
      return;
    }
    say("second signal: deleting the job's pods now");
    (void)cluster_.remove(ref_, true);
    killed_ = true;
  }

  // One look at the job: what changed is said; returns its exit code once it is over, else -1.
  int step(const backends::VolcanoWatch& watch) {
    const backends::VolcanoView v = watch.view();
    if (const std::string error = watch.error(); error != error_) {
      error_ = error;
      if (!error.empty()) say("following the job: " + error);
    }
    // Until the coordinator speaks: where the Job is, and what it waits for once that lasts
    // (a wait of a moment, between one step and the next, is not worth a line).
    if (progress_ && v.phase != phase_ && !v.phase.empty() && !v.coordinator_started) {
      say("Volcano Job " + ref_.namespace_name + "/" + ref_.name + ": " + v.phase);
    }
    phase_ = v.phase;
    if (v.waiting != candidate_) {
      candidate_ = v.waiting;
      candidate_since_ = Clock::now();
    }
    if (candidate_ != waiting_ && !stopping_ && Clock::now() - candidate_since_ >= kSettle) {
      waiting_ = candidate_;
      if (!waiting_.empty()) say(waiting_);
    }
    if (!v.broken.empty() && broken_.empty() && !stopping_) {
      broken_ = v.broken;
      say(v.broken + ": ending the job");
      if (auto removed = cluster_.remove(ref_, false); !removed) say(removed.error().message);
      stopping_ = -1;
      stop_by_ = Clock::now() + stop_within_;
    }
    started_ = started_ || v.coordinator_started;
    if (v.coordinator_started && !log_.joinable()) {
      log_ = std::thread([this] {
        auto followed = cluster_.followCoordinatorLog(ref_, 0, printLine, &stop_log_);
        if (!followed) say("the coordinator's log: " + followed.error().message);
        log_done_ = true;
        poke();
      });
    }
    if (killed_) return 128 + stopping_;
    const bool gone = watch.jobGone();
    const bool log_over = log_done_ || !v.coordinator_started;
    if (stopping_ != 0) {
      // Stopped: over once the Job and every pod are gone (or after the grace periods).
      const bool over = gone && watch.pods() == 0 && log_over;
      if (!over && Clock::now() < stop_by_) return -1;
      if (!over) {
        say("the job's pods are still there after the grace period: deleting them now");
        (void)cluster_.remove(ref_, true);
      }
      if (stopping_ < 0) return 1;  // broken
      return 128 + stopping_;
    }
    if (gone && !v.final) {
      say("its Volcano Job " + ref_.namespace_name + "/" + ref_.name +
          " was deleted before the job ended");
      return v.coordinator_exit ? *v.coordinator_exit : 1;
    }
    if (!log_over) return -1;
    if (v.coordinator_exit && (v.final || gone || log_done_)) {
      if (!verdict_said) {
        // It ended before it could say the job's end: never a job that ends without a word.
        say("job " + ref_.job_id + ": its coordinator (pod " + ref_.coordinatorPod() +
            ") ended before it said the job's end: " + v.coordinator_end);
      }
      if (progress_) {
        say("the ended Volcano Job stays for kubectl get vcjob " + ref_.name + " -n " +
            ref_.namespace_name + "; a run of a job of this name replaces it");
      }
      return *v.coordinator_exit;
    }
    if (v.final) {
      say("job " + ref_.job_id + ": its Volcano Job ended (" + v.phase + ") without a word from " +
          "its coordinator" + (v.coordinator_gone.empty() ? "" : ": " + v.coordinator_gone));
      return 1;
    }
    return -1;
  }

  backends::VolcanoCluster& cluster_;
  const backends::VolcanoJobRef ref_;
  const bool progress_;
  const Millis stop_within_;
  int wake_ = -1;
  std::thread log_;
  std::atomic<bool> stop_log_{false};
  std::atomic<bool> log_done_{false};
  int stopping_ = 0;  // the signal that stopped it; -1: cohort ended it (a pod cannot start)
  bool killed_ = false;
  bool started_ = false;  // the coordinator's container has started
  Clock::time_point stop_by_{};
  std::string phase_, waiting_, broken_, error_;
  std::string candidate_;  // what it waits for now, said once it lasted kSettle
  Clock::time_point candidate_since_{};
};

}  // namespace

int runOnVolcano(const JobOptions& options) {
  if (options.isolate || options.pdb) {
    return refuse(Error{Code::kInvalidArgument,
                        std::string(options.isolate ? "--isolate" : "--pdb") +
                            ": not with the volcano backend (each node is a pod of its own; "
                            "its ranks have no terminal here)"});
  }
  // Nothing of this machine runs the job: its environment is the image, its inputs are read
  // in the pods.
  auto job = prepareJob(options, /*dry=*/true);
  if (!job) return refuse(job.error());
  auto plan = plan::makePlan(job->spec, job->context);
  if (!plan) return refuse(plan.error());
  auto manifest = backends::volcanoJob(job->spec, *plan);
  if (!manifest) return refuse(manifest.error());

  auto cluster = backends::VolcanoCluster::connect(options.kube_namespace);
  if (!cluster) return refuse(cluster.error());
  if (auto ok = (*cluster)->checkVolcano(); !ok) return refuse(ok.error());
  auto secret = randomHex(32);
  if (!secret) return refuse(secret.error());
  auto signals = proc::SignalFd::create({SIGINT, SIGTERM, SIGHUP});
  if (!signals) return refuse(signals.error());
  auto ref = (*cluster)->submit(*manifest, *secret, std::nullopt, {}, say);
  if (!ref) return refuse(ref.error());
  const bool progress = !options.quiet;
  if (progress) {
    say("job " + plan->job_id + ": " + plan->framework + ", " + std::to_string(plan->nodes.size()) +
        " node(s), " + std::to_string(plan->world_size) + " rank(s): Volcano Job " +
        ref->namespace_name + "/" + ref->name + " (" +
        std::to_string((*manifest)["spec"]["minAvailable"].get<int>()) + " pods) in " +
        (*cluster)->client().config().server);
  }
  // A stop waits this long for the pods to go: the agents' grace, then the coordinator's.
  const Millis stop_within =
      job->spec.policy.grace_period + Millis(1000 * (backends::kCoordinatorGraceS + 30));
  Follower follower(**cluster, *ref, progress, stop_within);
  return follower.run(*signals);
}

}  // namespace cohort::cli
