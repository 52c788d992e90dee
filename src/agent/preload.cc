#include "agent/preload.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "proc/spawn.h"

namespace cohort::agent {

namespace {

using Json = nlohmann::json;

// The template, run as `python -c kBootstrap kTemplate FD MODULE...`, which compiles it under
// the name kPreloadTemplateFile. It must not start a thread or touch the network before it
// forks.
constexpr const char* kBootstrap = "import sys; exec(compile(sys.argv[1], sys.argv[2], 'exec'))";
constexpr const char* kTemplate = R"PY(
import ctypes, gc, importlib, io, json, os, signal, socket, struct, sys, traceback

template_main = sys.modules["__main__"]

sock = socket.socket(fileno=int(sys.argv[3]))
modules = sys.argv[4:]

def show_as(words):
    # What ps, top and pgrep -f show for this process (/proc/self/cmdline), as setproctitle
    # does it: the argv area this process started with (arg_start and arg_end, fields 48 and 49
    # of /proc/self/stat; the template's is large, its program is in it) gets the words, then
    # NULs, and a last byte that is not NUL, which has the kernel show it up to the first NUL.
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        start, end = int(fields[45]), int(fields[46])
        if start == 0 or end - start < 2:
            return
        text = " ".join(words).encode("utf-8", "surrogateescape")[:end - start - 2]
        ctypes.memmove(start, text.ljust(end - start - 1, b"\0") + b" ", end - start)
    except (OSError, ValueError, IndexError):
        pass

def send(obj):
    body = json.dumps(obj).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)

def exact(n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

def threads():
    return len(os.listdir("/proc/self/task"))

def unsafe():
    if threads() > 1:
        # Some libraries stop their thread pools for a fork and start them again when next
        # needed (OpenBLAS, which numpy and torch load, in its atfork handler): fork once, to
        # count only the threads that a fork would leave behind.
        probe = os.fork()
        if probe == 0:
            os._exit(0)
        os.waitpid(probe, 0)
    threads_left = threads()
    if threads_left > 1:
        return "%d threads are running after importing %s: a fork would copy only one" % (
            threads_left, ", ".join(modules))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda") and torch.cuda.is_initialized():
        return "importing %s initialised CUDA, which a forked process cannot use" % ", ".join(modules)
    return None

def stream(fd, unbuffered, encoding):
    # As the interpreter makes sys.stdout and sys.stderr (-u / PYTHONUNBUFFERED included).
    raw = io.FileIO(fd, "w", closefd=False)
    errors = "backslashreplace" if fd == 2 else "strict"
    if unbuffered:
        return io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors,
                            line_buffering=fd == 2 or raw.isatty())

def become_rank(req, out_fd, go_fd):
    # The agent's: a session and process group of its own, its output, then wait until the
    # agent adopted it (pidfd, cgroup).
    sock.close()
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    for fd in (null, out_fd):
        if fd > 2:
            os.close(fd)
    if os.read(go_fd, 1) != b"g":
        os._exit(127)
    os.close(go_fd)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != req["parent"]:
        os._exit(127)  # the agent died before we were adopted
    for s in range(1, signal.NSIG):
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(s, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.chdir(req["cwd"])
    os.environ.clear()
    for entry in req["env"]:
        key, _, value = entry.partition("=")
        os.environ[key] = value
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding = sys.stdout.encoding
    sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = stream(1, unbuffered, encoding)
    sys.stderr = sys.__stderr__ = stream(2, unbuffered, encoding)
    # A fresh interpreter seeds numpy's global generator and torch's CPU one from the OS
    # (Python's random reseeds itself after a fork; torch's CUDA generators start from a fixed
    # seed, untouched in a template that must not have initialised CUDA): each rank draws
    # numbers of its own, as a directly launched one does. A seed the script sets comes after.
    np_random = sys.modules.get("numpy.random")
    if np_random is not None and hasattr(np_random, "seed"):
        np_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "default_generator"):
        torch.default_generator.seed()
    argv = req["argv"]
    show_as(argv)
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = list(argv)
    # The script becomes the real __main__ module, a new one (not the template's), as
    # `python SCRIPT` and `python -m MODULE` make it.
    import builtins, importlib.machinery, runpy, types
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    if argv[1] == "-m":
        sys.argv = [argv[2]] + argv[3:]
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(argv[2], alter_argv=True)
    else:
        # Since Python 3.9 the interpreter makes the script's path absolute (its __file__, its
        # frames in tracebacks), not sys.argv[0].
        path = os.path.abspath(argv[1]) if sys.version_info >= (3, 9) else argv[1]
        sys.argv = argv[1:]
        sys.path[0] = os.path.dirname(os.path.abspath(path))
        main.__file__ = path
        main.__cached__ = None
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
        with io.open_code(path) as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        exec(code, main.__dict__)

def exit_code(code):
    # As the interpreter reads SystemExit's code.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1

def report(e):
    # As the interpreter reports an exception nothing caught: from the script's first frame,
    # without the template's own (run_rank, become_rank) under it.
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code in (run_rank.__code__, become_rank.__code__):
        tb = tb.tb_next
    sys.excepthook(type(e), e.with_traceback(tb), tb)

def run_rank(req, out_fd, go_fd):
    """The rank's script, and the exit code the interpreter would give it (-SIGINT for an
    unhandled Ctrl-C, which the interpreter ends by raising SIGINT again)."""
    try:
        become_rank(req, out_fd, go_fd)
        return 0
    except SystemExit as e:
        return exit_code(e.code)
    except KeyboardInterrupt as e:
        report(e)
        return -signal.SIGINT
    except BaseException as e:
        report(e)
        return 1

def release(globals_):
    # As the interpreter clears a module at exit: _private names first, then the others, so
    # the objects the script still holds are finalized (__del__, files closed).
    names = [k for k in globals_ if isinstance(k, str)]
    for k in names:
        if k[:1] == "_" and k[1:2] != "_":
            globals_[k] = None
    for k in names:
        if k != "__builtins__":
            globals_[k] = None

def close_files():
    # What the rank left open elsewhere, each wrapper before what it wraps (a gzip file before
    # its buffer, a buffer before its file). The template's own objects are frozen, not listed.
    std = set()
    for s in (sys.stdin, sys.stdout, sys.stderr):
        while s is not None and id(s) not in std:
            std.add(id(s))
            s = getattr(s, "buffer", None) or getattr(s, "raw", None)
    files = []
    for o in gc.get_objects():
        try:
            if isinstance(o, io.IOBase) and id(o) not in std and not o.closed:
                files.append(o)
        except Exception:
            pass  # a detached wrapper
    inner = {id(f): [r for r in gc.get_referents(f, getattr(f, "__dict__", None) or {})
                     if r is not f] for f in files}
    while files:
        open_ids = {id(f) for f in files}
        wrapped = {id(r) for f in files for r in inner[id(f)] if id(r) in open_ids}
        outer = [f for f in files if id(f) not in wrapped] or files  # a cycle: all at once
        for f in outer:
            try:
                f.close()
            except Exception as e:
                sys.stderr.write("Exception ignored while closing %r: %r\n" % (f, e))
        files = [f for f in files if id(f) in wrapped] if outer is not files else []

def leave(code):
    # The interpreter's way out for what the rank did, without tearing down what the template
    # imported (with torch, about 0.1 s of CPU per rank, and a copy of every page it touches):
    # threads joined, atexit handlers run, the script's globals released, files it left open
    # closed, output flushed; then _exit, as multiprocessing's forked children end.
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            sys.excepthook(*sys.exc_info())
    import atexit
    atexit._run_exitfuncs()
    atexit._clear()
    main = sys.modules.get("__main__")
    if main is not None and main is not template_main:
        release(main.__dict__)
    gc.collect()
    close_files()
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            if s is sys.stdout and code == 0:
                code = 120  # as the interpreter ends when it cannot flush stdout
    if code == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + signal.SIGINT
    os._exit(code)

def serve():
    while True:
        try:
            header, fds, _, _ = socket.recv_fds(sock, 4, 2)
        except OSError:
            return
        if not header:
            return  # the agent is gone
        if len(header) < 4:
            header += exact(4 - len(header))
        req = json.loads(exact(struct.unpack(">I", header)[0]))
        if len(fds) != 2:
            send({"error": "a fork request came without its two descriptors"})
            for fd in fds:
                os.close(fd)
            continue
        out_fd, go_fd = fds
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        middle = os.fork()
        if middle == 0:
            os.close(r)
            rank = os.fork()
            if rank == 0:
                os.close(w)
                leave(run_rank(req, out_fd, go_fd))
            os.write(w, str(rank).encode())
            os._exit(0)
        os.close(w)
        os.close(out_fd)
        os.close(go_fd)
        pid = os.read(r, 32)
        os.close(r)
        os.waitpid(middle, 0)
        send({"pid": int(pid)} if pid else {"error": "the fork failed"})

def main():
    python = (getattr(sys, "orig_argv", None) or [sys.executable])[0]
    show_as([python, "-c", "<cohort's preload template>", sys.argv[3]] + modules)
    try:
        for m in modules:
            importlib.import_module(m)
    except BaseException as e:
        # Its words and where: the template's own output goes nowhere (it runs the job's code).
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not f.filename.startswith("<") and "/importlib/" not in f.filename]
        where = " (%s:%d)" % (os.path.basename(frames[-1].filename), frames[-1].lineno) if frames else ""
        send({"error": "importing %s%s: %s" % (
            m, where, traceback.format_exception_only(type(e), e)[-1].strip())})
        return
    why = unsafe()
    if why:
        send({"error": why})
        return
    gc.collect()
    gc.freeze()  # the forked ranks share these pages instead of touching them
    send({"ready": True})
    serve()

main()
)PY";

// One frame: 4-byte big-endian length, then the JSON.
std::string frame(const Json& j) {
  const std::string body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  return out + body;
}

// Reads exactly `n` bytes before `deadline`.
Result<std::string> readExact(int fd, size_t n, std::chrono::steady_clock::time_point deadline) {
  std::string out;
  while (out.size() < n) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return fail(Code::kDeadlineExceeded, "the preload template did not answer");
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return failErrno("poll");
    char buf[4096];
    ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), MSG_DONTWAIT);
    if (got == 0) return fail(Code::kUnavailable, "the preload template exited");
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return failErrno("read from the preload template");
    }
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

Result<Json> readFrame(int fd, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  COHORT_ASSIGN(std::string header, readExact(fd, 4, deadline));
  const uint32_t n = (static_cast<uint32_t>(static_cast<unsigned char>(header[0])) << 24) |
                     (static_cast<uint32_t>(static_cast<unsigned char>(header[1])) << 16) |
                     (static_cast<uint32_t>(static_cast<unsigned char>(header[2])) << 8) |
                     static_cast<uint32_t>(static_cast<unsigned char>(header[3]));
  if (n > (1u << 20)) return fail(Code::kIo, "the preload template sent a frame too large");
  COHORT_ASSIGN(std::string body, readExact(fd, n, deadline));
  Json j = Json::parse(body, nullptr, false);
  if (!j.is_object()) return fail(Code::kIo, "the preload template sent no JSON object");
  return j;
}

// The template's reason, kept to one screen: it runs the job's code, which chose the words.
std::string errorOf(const Json& j) {
  auto it = j.find("error");
  return it != j.end() && it->is_string() ? it->get<std::string>().substr(0, 2048) : "";
}

}  // namespace

Result<PreloadTemplate> PreloadTemplate::start(const Options& options) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) return failErrno("socketpair");
  UniqueFd ours(pair[0]);
  UniqueFd theirs(pair[1]);
  proc::SpawnRequest req;
  req.argv = {options.preload.python};
  req.argv.insert(req.argv.end(), options.preload.options.begin(), options.preload.options.end());
  req.argv.insert(req.argv.end(), {"-c", kBootstrap, kTemplate, kPreloadTemplateFile, "3"});
  req.argv.insert(req.argv.end(), options.preload.modules.begin(), options.preload.modules.end());
  req.env = options.env;
  req.cwd = options.cwd;
  // Nowhere: it runs the job's code, which must not write into the agent's output (on a server,
  // the job's console record). What it has to say comes back in its answers.
  UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  req.stdout_fd = null.get();
  req.uid = options.uid;
  req.gid = options.gid;
  req.cgroup_fd = options.cgroup_fd;
  req.fd3 = theirs.get();
  COHORT_ASSIGN(proc::Child child, proc::spawn(req));
  PreloadTemplate t;
  t.sock_ = std::move(ours);
  t.pid_ = child.pid;
  t.pidfd_ = std::move(child.pidfd);
  return t;
}

PreloadTemplate::PreloadTemplate(PreloadTemplate&& other) noexcept
    : sock_(std::move(other.sock_)), pidfd_(std::move(other.pidfd_)), pid_(other.pid_) {
  other.pid_ = -1;
}

PreloadTemplate::~PreloadTemplate() {
  if (pid_ < 0) return;
  sock_.reset();
  // Through its pidfd: its pid may have been reaped and reused by now.
  if (pidfd_.valid()) {
    (void)::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    (void)proc::reap(pidfd_.get());
  }
  pid_ = -1;
}

Result<void> PreloadTemplate::ready() {
  auto said = readFrame(sock_.get(), Millis(1000));
  if (!said) {
    if (said.error().code == Code::kUnavailable) {
      return fail(Code::kUnavailable, "the preload template exited before it was ready (its "
                                      "output is in the agent's)");
    }
    return tl::unexpected<Error>(said.error());
  }
  if (std::string why = errorOf(*said); !why.empty()) return fail(Code::kFailedPrecondition, why);
  return {};
}

Result<pid_t> PreloadTemplate::fork(const Fork& request, Millis timeout) {
  Json req = {{"argv", request.argv}, {"env", request.env}, {"cwd", request.cwd},
              {"parent", ::getpid()}};
  const std::string bytes = frame(req);
  // The descriptors ride on the frame's first bytes.
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {request.out_fd, request.go_fd};
  std::memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
  ssize_t sent = ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL);
  if (sent < 0) {
    return errno == EPIPE ? fail(Code::kUnavailable, "the preload template is gone")
                          : failErrno("send to the preload template");
  }
  if (static_cast<size_t>(sent) < bytes.size()) {
    COHORT_TRY(writeAll(sock_.get(), std::string_view(bytes).substr(static_cast<size_t>(sent))));
  }
  COHORT_ASSIGN(Json answer, readFrame(sock_.get(), timeout));
  if (std::string why = errorOf(answer); !why.empty()) return fail(Code::kIo, why);
  auto pid = answer.find("pid");
  if (pid == answer.end() || !pid->is_number_integer()) {
    return fail(Code::kIo, "the preload template said no pid");
  }
  return static_cast<pid_t>(pid->get<int64_t>());
}

}  // namespace cohort::agent
