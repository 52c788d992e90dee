#!/usr/bin/env python3
"""Chaos harness for cohort's supervision: is the verdict always the truth?

Runs real jobs (`cohort run`, simulated nodes, cohort-test-rank playing the ranks) under
randomized fault schedules and checks, after each, that what cohort recorded agrees with what
really happened. Each rank writes the ground truth of its own life to a file this harness owns,
outside the job's directory (cohort-test-rank's truth=PATH: its start, every line it printed,
and how it ended when it ended by itself); the harness logs every fault it injects.

Faults, at random times: SIGSTOP then SIGCONT of the coordinator, an agent or a rank (up to
several heartbeat timeouts), SIGKILL of the coordinator, an agent or a rank, CPU starvation
(dozens of spinning processes: a load average of 20-30 on two cores), and, run as root, the data
root's disk filling up (a small tmpfs). The ranks themselves exit 0, exit non-zero or kill
themselves with a signal at random times, some ignoring SIGTERM; jobs restart within
max_restarts.

Invariants checked after every schedule:
  verdict     nothing is "succeeded" unless every rank of the last attempt exited 0 by itself
              (ground truth, and the rank_exit events agree); a failed job's root cause is a rank
              that really failed by itself, with that code or signal, or one the harness killed
  expected    a job that no fault could have harmed (only pauses shorter than the heartbeat
              timeout, a paused coordinator, CPU starvation) ends as its ranks decided: it
              succeeds when an attempt's ranks all exit 0, fails otherwise
  record      result.json, the last state event in events.jsonl and cohort's exit code agree
              (or, with the disk full, the exit code is non-zero and says the record could not
              be written)
  leftovers   no process of the job is left once cohort has exited
  logs        every line a rank printed before it ended is in its log (unless an agent or the
              coordinator was killed with SIGKILL, an agent was stopped long enough to be lost,
              or the disk filled up)
  ends        cohort ends within its deadline (max_runtime, grace, and every pause allowed for)

Seeds are printed; `chaos.py --seed S` runs schedule S again. Exit code: 0 when no schedule
broke an invariant, 1 otherwise, 2 for a usage error.

  tests/chaos/chaos.py --cohort build/cohort --test-rank build/cohort-test-rank \\
      --schedules 500 [--seed S] [--json FILE]
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SIGNALS = {"SIGSEGV": signal.SIGSEGV, "SIGABRT": signal.SIGABRT, "SIGKILL": signal.SIGKILL}


def pids_by(predicate):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if predicate(int(entry), comm, fields):
            out.append(int(entry))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def job_of(pid):
    """The COHORT_JOB_ID in a process's environment, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"COHORT_JOB_ID="):
                    return var[len(b"COHORT_JOB_ID="):].decode(errors="replace")
    except OSError:
        pass
    return None


class Schedule:
    """One randomized job and the faults to inject into it, all from one seed."""

    def __init__(self, seed, can_fill_disk):
        r = random.Random(seed)
        self.seed = seed
        self.nodes = r.randint(1, 3)
        self.per_node = r.randint(1, 2)
        self.ranks = self.nodes * self.per_node
        self.max_restarts = r.choice([0, 0, 1])
        self.heartbeat_s = r.choice([2, 3, 5])
        self.grace_s = r.choice([1, 2])
        self.max_runtime_s = 40
        # Each rank's life in each attempt: some lines, then its own ending.
        self.plans = {}
        for attempt in range(self.max_restarts + 1):
            for rank in range(self.ranks):
                lines = r.randint(1, 10)
                gap = round(r.uniform(0.05, 0.7), 2)
                end = r.choices(["exit0", "exitN", "kill", "ignore-term"], [80, 8, 5, 7])[0]
                plan = {"lines": lines, "gap": gap, "end": "exit0"}
                if end == "exitN":
                    plan["end"] = f"exit{r.randint(1, 9)}"
                elif end == "kill":
                    plan["end"] = "kill:" + r.choice(list(SIGNALS))
                elif end == "ignore-term":
                    plan["ignore_term"] = True
                self.plans[(attempt, rank)] = plan
        self.faults = []
        for _ in range(r.choice([0, 1, 1, 2, 3])):
            at = round(r.uniform(0.1, 4.0), 2)
            kind = r.choices(["stop", "kill9", "hog", "disk"], [45, 25, 20, 10 if can_fill_disk else 0])[0]
            target = r.choice(["coordinator", "agent", "rank"])
            fault = {"at": at, "kind": kind}
            if kind in ("stop", "kill9"):
                fault["target"] = target
                fault["index"] = r.randrange(self.nodes if target == "agent" else self.ranks)
            if kind == "stop":
                fault["for"] = round(r.choice([r.uniform(0.2, 1.5), r.uniform(1.5, 7.0)]), 2)
            if kind == "hog":
                fault["procs"] = r.randint(10, 30)
                fault["for"] = round(r.uniform(1.0, 6.0), 2)
            self.faults.append(fault)
        self.faults.sort(key=lambda f: f["at"])

    def actions(self, truth):
        out = ["truth=" + truth]
        for (attempt, rank), plan in sorted(self.plans.items()):
            p = f"rank{rank}:attempt{attempt}:"
            if plan.get("ignore_term"):
                out.append(p + "ignore-term")
            out.append(p + f"lines={plan['lines']}/{plan['gap']}")
            end = plan["end"]
            if end.startswith("exit"):
                out.append(p + f"exit={end[4:]}")
            else:
                out.append(p + f"kill={int(SIGNALS[end.split(':')[1]])}")
        return out

    def harmless(self):
        """No fault here could change the job's verdict."""
        for f in self.faults:
            if f["kind"] in ("kill9", "disk"):
                return False
            if f["kind"] == "stop" and f["target"] == "agent" and f["for"] >= self.heartbeat_s * 0.8:
                return False
        return True

    def expected(self):
        """(succeeds, attempts) as the ranks decide, with no harmful fault."""
        for attempt in range(self.max_restarts + 1):
            if all(self.plans[(attempt, r)]["end"] == "exit0" for r in range(self.ranks)):
                return True, attempt + 1
        return False, self.max_restarts + 1

    def describe(self):
        faults = ", ".join(
            f["kind"] + (f" {f['target']}#{f['index']}" if "target" in f else "")
            + (f" for {f['for']}s" if "for" in f else "") + f" at {f['at']}s" for f in self.faults)
        return (f"{self.nodes}x{self.per_node}, restarts {self.max_restarts}, heartbeat "
                f"{self.heartbeat_s}s, faults: {faults or 'none'}")


class Run:
    def __init__(self, args, schedule, workdir):
        self.args = args
        self.s = schedule
        self.work = workdir
        self.root = os.path.join(workdir, "data")
        self.truth = os.path.join(workdir, "truth")
        os.makedirs(self.root)
        self.injected = []  # (time, kind, target, pid, signal, seconds)
        self.hogs = []
        self.stopped = []  # (pid, continue at)
        self.mounted = False
        self.violations = []
        self.agents = set()  # every agent pid seen

    def violate(self, invariant, why):
        self.violations.append(f"{invariant}: {why}")

    # ---- the job ----

    def command(self):
        s = self.s
        return [self.args.cohort, "run", "--data-root", self.root, "--nodes", str(s.nodes),
                "--nproc-per-node", str(s.per_node), "--framework", "generic",
                "--max-restarts", str(s.max_restarts), "--grace-period", f"{s.grace_s}s",
                "--heartbeat-timeout", f"{s.heartbeat_s}s", "--max-runtime",
                f"{s.max_runtime_s}s", "--quiet", "--", self.args.test_rank] + s.actions(self.truth)

    def truth_lines(self):
        try:
            with open(self.truth) as f:
                return [line.split() for line in f if line.strip()]
        except OSError:
            return []

    # ---- faults ----

    def target_pid(self, fault, coordinator):
        if fault["target"] == "coordinator":
            return coordinator
        if fault["target"] == "agent":
            name = f"cohort node {fault['index']}"
            found = pids_by(lambda pid, comm, f: comm == name and int(f[1]) == coordinator)
            return found[0] if found else None
        starts = [t for t in self.truth_lines() if t[0] == "start" and int(t[1]) == fault["index"]]
        return int(starts[-1][3]) if starts else None

    def inject(self, fault, coordinator, now):
        kind = fault["kind"]
        if kind == "hog":
            for _ in range(fault["procs"]):
                self.hogs.append((subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]),
                                  now + fault["for"]))
            self.injected.append((now, "hog", str(fault["procs"]), None, None, fault["for"]))
            return
        if kind == "disk":
            self.fill_disk()
            self.injected.append((now, "disk", "", None, None, 0))
            return
        pid = self.target_pid(fault, coordinator)
        if pid is None:
            self.injected.append((now, kind, fault["target"], None, None, 0))  # none yet
            return
        sig = signal.SIGSTOP if kind == "stop" else signal.SIGKILL
        try:
            os.kill(pid, sig)
        except OSError:
            return
        self.injected.append((now, kind, fault["target"] + f"#{fault['index']}", pid, int(sig),
                              fault.get("for", 0)))
        if kind == "stop":
            self.stopped.append((pid, now + fault["for"]))

    def release(self, now, everything=False):
        for pid, until in list(self.stopped):
            if everything or now >= until:
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
                self.stopped.remove((pid, until))
        for proc, until in list(self.hogs):
            if everything or now >= until:
                proc.kill()
                proc.wait()
                self.hogs.remove((proc, until))

    def fill_disk(self):
        try:
            with open(os.path.join(self.root, "filler"), "wb") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
        except OSError:
            pass

    # ---- one schedule ----

    def run(self):
        s = self.s
        if any(f["kind"] == "disk" for f in s.faults):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", self.root],
                           check=True)
            self.mounted = True
        err_path = os.path.join(self.work, "stderr")
        with open(err_path, "wb") as err:
            cohort = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=err)
        start = time.monotonic()
        pauses = sum(f.get("for", 0) for f in s.faults if f["kind"] == "stop")
        deadline = start + s.max_runtime_s + s.grace_s + pauses + 30
        pending = list(s.faults)
        code = None
        next_look = 0.0
        while True:
            now = time.monotonic() - start
            if now >= next_look:
                self.agents.update(pids_by(lambda pid, comm, f: comm.startswith("cohort node")
                                           and int(f[1]) == cohort.pid))
                next_look = now + 0.3
            while pending and pending[0]["at"] <= now:
                self.inject(pending.pop(0), cohort.pid, now)
            self.release(now)
            code = cohort.poll()
            if code is not None and not self.stopped:
                break
            if time.monotonic() > deadline:
                self.violate("ends", f"cohort still ran after {deadline - start:.0f}s")
                self.release(now, everything=True)
                cohort.kill()
                code = cohort.wait()
                break
            time.sleep(0.02)
        self.release(0, everything=True)
        if code is None:
            code = cohort.wait()
        self.code = code
        with open(err_path, "rb") as f:
            self.stderr = f.read().decode(errors="replace")
        self.check()
        self.cleanup()

    def job_dir(self):
        jobs = os.path.join(self.root, "jobs")
        names = os.listdir(jobs) if os.path.isdir(jobs) else []
        return os.path.join(jobs, names[0]) if len(names) == 1 else None

    # ---- invariants ----

    def check(self):
        s = self.s
        truth = self.truth_lines()
        job = self.job_dir()
        killed_pids = {k[3]: k[4] for k in self.injected if k[1] == "kill9" and k[3]}
        killed = {k[2].split("#")[0] for k in self.injected if k[1] == "kill9" and k[3]}
        disk = any(k[1] == "disk" for k in self.injected)
        result = None
        if job:
            try:
                with open(os.path.join(job, "result.json")) as f:
                    result = json.load(f)
            except (OSError, ValueError):
                result = None
        events = []
        if job:
            try:
                with open(os.path.join(job, "events.jsonl")) as f:
                    for line in f:
                        try:
                            events.append(json.loads(line))
                        except ValueError:
                            self.violate("record", f"events.jsonl has a line that is not JSON: {line[:80]!r}")
            except OSError:
                pass
        self.outcome = result["state"] if result else f"no result (exit {self.code})"

        # record: result.json, the last state event and the exit code agree.
        coordinator_killed = "coordinator" in killed
        if result is None:
            if not coordinator_killed and not disk:
                self.violate("record", f"no result.json (exit code {self.code}): {self.stderr[-300:]}")
            elif self.code == 0:
                self.violate("record", "exit code 0 without a result.json")
        else:
            if self.code != result["exit_code"]:
                self.violate("record", f"cohort exited {self.code}, result.json says {result['exit_code']}")
            states = [e for e in events if e.get("event") == "state"]
            final = states[-1] if states else None
            if not final or final.get("state") != result["state"] or final.get("exit_code") != result["exit_code"]:
                if not disk:
                    self.violate("record", f"the last state event {final} disagrees with result.json "
                                           f"({result['state']}, {result['exit_code']})")

        # verdict: a success is every rank of the last attempt exiting 0 by itself.
        succeeded = (result and result["state"] == "succeeded") or (result is None and self.code == 0)
        if succeeded:
            attempt = (result["attempts"] if result else 1) - 1
            for rank in range(s.ranks):
                ends = [t for t in truth if t[0] == "end" and int(t[1]) == rank and int(t[2]) == attempt]
                starts = [int(t[3]) for t in truth if t[0] == "start" and int(t[1]) == rank and int(t[2]) == attempt]
                if not ends or ends[-1][3:] != ["exit", "0"]:
                    self.violate("verdict", f"succeeded, but rank {rank} of attempt {attempt} did not exit 0 by itself (truth: {ends})")
                if any(pid in killed_pids for pid in starts):
                    self.violate("verdict", f"succeeded, but the harness killed rank {rank} of attempt {attempt}")
                exits = [e for e in events if e.get("event") == "rank_exit" and e.get("rank") == rank and e.get("attempt") == attempt]
                if not exits or exits[-1].get("code") != 0 or exits[-1].get("signal") != 0 or exits[-1].get("by_cohort"):
                    self.violate("verdict", f"succeeded, but rank {rank}'s exit event is {exits[-1:] }")
        elif result and result.get("root_cause"):
            rc = result["root_cause"]
            rank, attempt = rc["rank"], rc["attempt"]
            ends = [t for t in truth if t[0] == "end" and int(t[1]) == rank and int(t[2]) == attempt]
            starts = [int(t[3]) for t in truth if t[0] == "start" and int(t[1]) == rank and int(t[2]) == attempt]
            real = ends and ((ends[-1][3] == "exit" and int(ends[-1][4]) == rc["code"] and rc["code"] != 0)
                             or (ends[-1][3] == "kill" and int(ends[-1][4]) == rc["signal"]))
            by_harness = any(killed_pids.get(pid) == rc["signal"] for pid in starts)
            if not real and not by_harness:
                self.violate("verdict", f"root cause rank {rank} (code {rc['code']}, signal {rc['signal']}) "
                                        f"did not fail so: truth {ends}")

        # expected: a job no fault could harm ends as its ranks decided.
        if s.harmless() and not self.violations:
            want, attempts = s.expected()
            got = result["state"] if result else None
            if want and got != "succeeded":
                self.violate("expected", f"should have succeeded in attempt {attempts}, got {self.outcome}: "
                                         f"{result.get('reason') if result else self.stderr[-300:]}")
            if not want and got != "failed":
                self.violate("expected", f"should have failed, got {self.outcome}")
            if result and result["attempts"] != attempts and want:
                self.violate("expected", f"{result['attempts']} attempt(s), expected {attempts}")

        # leftovers: nothing of the job is left.
        ranks = {int(t[3]) for t in truth if t[0] == "start"}
        job_id = os.path.basename(job) if job else None
        deadline = time.monotonic() + 10
        left = []
        while time.monotonic() < deadline:
            left = [pid for pid in ranks | self.agents if alive(pid)]
            if job_id and not left:
                left = [pid for pid in pids_by(lambda pid, c, f: True)
                        if job_of(pid) == job_id and alive(pid)]
            if not left:
                break
            time.sleep(0.1)
        if left:
            self.violate("leftovers", f"processes left: {sorted(set(left))}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

        # logs: every line a rank printed is in its log. An agent stopped for the heartbeat
        # timeout is lost, and cohort kills it: what still sat in its ranks' pipes goes with it.
        lost = any(k[1] == "stop" and k[2].startswith("agent") and k[3] and
                   k[5] >= s.heartbeat_s * 0.8 for k in self.injected)
        if job and not killed & {"agent", "coordinator"} and not disk and not lost:
            for rank in range(s.ranks):
                printed = [t for t in truth if t[0] == "line" and int(t[1]) == rank]
                try:
                    with open(os.path.join(job, "logs", f"worker-{rank}.log")) as f:
                        log = f.read()
                except OSError:
                    log = ""
                for t in printed:
                    line = f"rank {rank} attempt {t[2]} line {t[3]}\n"
                    if line not in log:
                        self.violate("logs", f"rank {rank} printed {line.strip()!r}, not in its log")
                        break

    def cleanup(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.root], check=False)
            self.mounted = False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cohort", required=True)
    p.add_argument("--test-rank", required=True)
    p.add_argument("--schedules", type=int, default=1)
    p.add_argument("--seed", type=int, help="the first schedule's seed (default: random)")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--keep", action="store_true", help="keep each schedule's directory")
    args = p.parse_args()
    for path in (args.cohort, args.test_rank):
        if not os.access(path, os.X_OK):
            print(f"chaos: {path} is not an executable", file=sys.stderr)
            return 2
    base = args.seed if args.seed is not None else random.randrange(1 << 31)
    can_fill_disk = os.geteuid() == 0 and shutil.which("mount") is not None
    print(f"chaos: {args.schedules} schedule(s) from seed {base} "
          f"(replay one: {sys.argv[0]} --cohort {args.cohort} --test-rank {args.test_rank} --seed S)"
          + ("" if can_fill_disk else "; not root: no disk-full faults"), flush=True)
    counts, bad = {}, []
    started = time.monotonic()
    for i in range(args.schedules):
        seed = base + i
        schedule = Schedule(seed, can_fill_disk)
        work = tempfile.mkdtemp(prefix=f"cohort-chaos-{seed}-")
        run = Run(args, schedule, work)
        try:
            run.run()
        finally:
            run.cleanup()
        verdict = "ok" if not run.violations else "VIOLATION"
        counts[run.outcome] = counts.get(run.outcome, 0) + 1
        print(f"chaos: seed {seed}: {schedule.describe()} -> {run.outcome} (exit {run.code}): {verdict}", flush=True)
        for v in run.violations:
            print(f"chaos:   {v}", flush=True)
            bad.append({"seed": seed, "violation": v})
        if not run.violations and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        elif run.violations:
            print(f"chaos:   kept {work}", flush=True)
    elapsed = time.monotonic() - started
    summary = {"schedules": args.schedules, "first_seed": base, "violations": len(bad),
               "outcomes": counts, "seconds": round(elapsed, 1), "details": bad}
    print(f"chaos: {args.schedules} schedule(s) in {elapsed:.0f}s, outcomes {counts}, "
          f"{len(bad)} invariant violation(s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
