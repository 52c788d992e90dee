"""cohort's debug bootstrap: runs one rank's Python program under a debugger (docs/debugging.md).

cohort writes this file into the job's files/debug/ and starts every rank of a job with debug: as

    python3 [options] cohort_debug.py PROGRAM [ARGS...]    PROGRAM: a script, -m MODULE, -c CODE

and runs PROGRAM the way python3 would (as __main__, with sys.argv[0] the script). Its variables:

  COHORT_DEBUG_LISTEN       HOST:PORT this rank's debugpy listens on, once something pauses it
  COHORT_DEBUG_CONNECT      HOST:PORT of an IDE's debug server to dial instead (PyCharm's, with
                            pydevd-pycharm importable; else a VS Code "listen" configuration)
  COHORT_DEBUG_WAIT=1       pause before the program's first line
  COHORT_DEBUG_POST_MORTEM  =1: an exception nothing caught pauses the rank where it was raised
  COHORT_DEBUG_WAIT_LIMIT   seconds a paused rank waits for a debugger, then goes on (a
                            post-mortem rank then ends with its exception)
  COHORT_DEBUG_PDB=1        pdb on the terminal instead of debugpy
  COHORT_DEBUG_FILE         where the rank says what it does, for its node's agent

breakpoint() anywhere in the program pauses the rank the same way (PYTHONBREAKPOINT=0 still turns
it off). The status file holds one JSON object, replaced whole (by rename):
{"state": "waiting" | "attached" | "running", "reason": "start" | "breakpoint" | "exception" |
"pdb", "where": "train.py:42", "seq": N, "attaches": N}. Standard library and debugpy only.
"""

import bdb
import json
import os
import runpy
import sys
import threading
import time
import traceback

_env = os.environ
_status_lock = threading.Lock()
_seq = 0
_attaches = 0  # how many times a debugger attached (one that came and went still counts)
_listening = False
_pycharm = None  # pydevd_pycharm, once this rank dialled PyCharm's debug server with it
_watcher = None
_ide_gone_said = False  # PyCharm went away, and the rank said so once
_state = "running"
_reason = ""
_where = ""
# The files whose frames are cohort's way into the program, not the program's: this one, and
# runpy's and bdb's (pdb's), which run it.
_OURS = {__file__, runpy.__file__, bdb.__file__}


def _say(line):
    sys.stderr.write("cohort: " + line + "\n")
    sys.stderr.flush()


def _write_status(state, reason=None, where=None):
    """Replaces the status file (never raises: a rank that cannot say it is paused still is)."""
    global _seq, _state, _reason, _where, _attaches
    with _status_lock:
        if state == "attached" and _state != "attached":
            _attaches += 1
        _state = state
        if reason is not None:
            _reason = reason
        if where is not None:
            _where = where[:400]
        _seq += 1
        path = _env.get("COHORT_DEBUG_FILE")
        if not path:
            return
        record = json.dumps({"state": _state, "reason": _reason, "where": _where, "seq": _seq,
                             "attaches": _attaches, "pid": os.getpid()})
        tmp = "%s.tmp.%d" % (path, os.getpid())
        try:
            with open(tmp, "w") as f:
                f.write(record + "\n")
            os.replace(tmp, path)
        except OSError:
            pass


def _wait_limit():
    try:
        return max(0.1, float(_env.get("COHORT_DEBUG_WAIT_LIMIT", "1800")))
    except ValueError:
        return 1800.0


def _address(value):
    host, _, port = value.rpartition(":")
    return host, int(port)


def _pycharm_settrace(module, suspend, frame=None):
    """Dials PyCharm's debug server (or, connected, stops in `frame`). Positional, as
    pydevd-pycharm renamed its keywords (stdoutToServer became stdout_to_server)."""
    host, port = _address(_env["COHORT_DEBUG_CONNECT"])
    try:
        module.settrace(host, True, True, port, suspend, False, False, False, frame)
    finally:
        # settrace puts pydevd's own breakpoint hook in place, which fails once the IDE has
        # gone; cohort's decides whether a debugger is still there.
        sys.breakpointhook = _breakpoint


def _start_debugger():
    """Listens on the rank's port (or dials the IDE), once. False when it cannot."""
    global _listening, _pycharm
    if _listening:
        return True
    try:
        if _env.get("COHORT_DEBUG_CONNECT"):
            try:
                import pydevd_pycharm  # PyCharm's debug server speaks pydevd's own protocol
            except ImportError:
                pydevd_pycharm = None
            if pydevd_pycharm is not None:
                _pycharm_settrace(pydevd_pycharm, False)  # returns once the IDE says run
                _pycharm = pydevd_pycharm
            else:
                import debugpy
                debugpy.connect(_address(_env["COHORT_DEBUG_CONNECT"]))
        else:
            import debugpy
            debugpy.listen(_address(_env["COHORT_DEBUG_LISTEN"]))
    except ImportError:
        _say("debugpy is not installed in this interpreter (%s): apt-get install python3-debugpy "
             "or pip install debugpy (or pydevd-pycharm, for PyCharm's debug server)"
             % sys.executable)
        return False
    except Exception as e:  # a port taken meanwhile, an IDE that is not there
        _say("the debugger could not start: %s" % e)
        return False
    _listening = True
    _hide_bootstrap()
    return True


def _hide_bootstrap():
    """This file's frames, and runpy's that run the program, are cohort's, not the program's:
    the debugger neither shows them on the stack nor steps into them, with justMyCode or
    without (pydevd's "do not trace" files, which already hide debugpy's own)."""
    try:
        import pydevd
        from _pydevd_bundle.pydevd_api import PyDevdAPI
        py_db = pydevd.get_global_debugger()
        if py_db is None:
            return
        current = py_db.dont_trace_external_files
        start = tuple(getattr(current, "start_patterns", ()))
        end = tuple(getattr(current, "end_patterns", ()))
        ours = tuple(os.path.realpath(f) for f in (__file__, runpy.__file__))
        PyDevdAPI().set_dont_trace_start_end_patterns(py_db, start, end + ours)
    except Exception as e:  # an older or newer pydevd: the frames show, nothing else changes
        _say("the debugger shows cohort's own frames (%s)" % e)


def _end_without_stopping_again():
    """After the post-mortem stop the rank ends with sys.exit(1): the debugger, which has just
    shown the exception, does not stop again on the SystemExit."""
    try:
        import pydevd
        py_db = pydevd.get_global_debugger()
        if py_db is not None:
            codes = set(getattr(py_db, "_ignore_system_exit_codes", ()))
            py_db.set_ignore_system_exit_codes(codes | {1})
    except Exception:
        pass


def _attached():
    if not _listening:
        return False  # asking debugpy would import its own pydevd, which pydevd_pycharm needs
    try:
        if _pycharm is not None:  # connected until the IDE goes away
            import pydevd
            py_db = pydevd.get_global_debugger()
            return py_db is not None and not py_db.pydb_disposed
        import debugpy
        return debugpy.is_client_connected()
    except Exception:
        return False


def _watch():
    """Says when a debugger attaches or detaches, for as long as the rank runs."""
    while True:
        time.sleep(0.2)
        now = _attached()
        if now and _state != "attached":
            _write_status("attached")
        elif not now and _state == "attached":
            _write_status("running")


def _ensure_watcher():
    global _watcher
    if _watcher is None:
        _watcher = threading.Thread(target=_watch, name="cohort-debug", daemon=True)
        _watcher.start()


def _pause(reason, where):
    """Waits (up to the wait limit) for a debugger. True once one is attached."""
    global _ide_gone_said
    if _attached():
        return True
    if _pycharm is not None:
        if not _ide_gone_said:  # a breakpoint() in a loop says it once
            _say("PyCharm's debug server went away: breakpoint() goes on without it (pydevd "
                 "cannot dial again in this process)")
            _ide_gone_said = True
        return False
    if not _start_debugger():
        _write_status("running", reason, where)
        return False
    if _pycharm is not None:
        _write_status("attached", reason, where)
        _ensure_watcher()
        return True
    import debugpy
    _write_status("waiting", reason, where)
    limit = _wait_limit()
    timer = threading.Timer(limit, lambda: debugpy.wait_for_client.cancel())
    timer.daemon = True
    timer.start()
    try:
        debugpy.wait_for_client()
    finally:
        timer.cancel()
    if _attached():
        _write_status("attached")
        _ensure_watcher()
        return True
    _write_status("running")
    _say("no debugger attached within %gs: going on" % limit)
    return False


def _frame_where(frame):
    return "%s:%d" % (frame.f_code.co_filename, frame.f_lineno)


def _breakpoint(*args, **kwargs):
    """sys.breakpointhook: pause this rank for a debugger, then stop in the caller's frame."""
    if _env.get("PYTHONBREAKPOINT") == "0":
        return None
    frame = sys._getframe(1)
    if not _pause("breakpoint", "breakpoint() at " + _frame_where(frame)):
        return None
    if _pycharm is not None:
        try:
            _pycharm_settrace(_pycharm, True, frame)
        except Exception as e:  # the IDE went away in between
            _say("PyCharm's debug server went away (%s): going on" % e)
        return None
    try:
        from debugpy.server import api
        api._settrace(suspend=True, trace_only_current_thread=True, patch_multiprocessing=False,
                      stop_at_frame=frame)
    except Exception:
        import debugpy
        debugpy.breakpoint()
    finally:
        # pydevd puts its own breakpoint hook in place, which skips breakpoint() once the IDE
        # has detached: cohort's pauses the rank again, as the first one did.
        sys.breakpointhook = _breakpoint
    return None


def _show_exception(exc_info):
    """The post-mortem stop: the debugger is shown the exception where it was raised."""
    try:
        import pydevd
        from _pydevd_bundle.pydevd_breakpoints import stop_on_unhandled_exception
        py_db = pydevd.get_global_debugger()
        if not py_db.break_on_uncaught_exceptions:
            # The IDE asked for no stop on uncaught exceptions: this stop is what it attached for.
            options = dict(condition=None, expression=None, notify_on_handled_exceptions=0,
                           notify_on_unhandled_exceptions=1, notify_on_first_raise_only=False,
                           ignore_libraries=False)
            if _pycharm is None:  # debugpy's pydevd has one more kind of exception to ask for
                options["notify_on_user_unhandled_exceptions"] = 0
            py_db.add_break_on_exception("BaseException", **options)
        thread = threading.current_thread()
        if _pycharm is None:
            info = py_db.set_additional_thread_info(thread)
        else:
            from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
            info = set_additional_thread_info(thread)
        info.is_tracing += 1
        try:
            stop_on_unhandled_exception(py_db, thread, info, exc_info)
        finally:
            info.is_tracing -= 1
    except Exception as e:
        _say("the debugger could not be shown the exception: %s" % e)


def _user_traceback(tb):
    """The traceback without this file's frames: what python3 itself would have printed."""
    while tb is not None and tb.tb_frame.f_code.co_filename in _OURS:
        tb = tb.tb_next
    return tb


def _innermost(tb):
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _run(target):
    kind, what = target
    if kind == "-m":
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    elif kind == "-c":
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_path(what, run_name="__main__")


def _target(argv):
    """(kind, what) and the program's sys.argv, from the words after this file."""
    if not argv:
        _say("cohort_debug.py: no program to run")
        sys.exit(2)
    if argv[0] in ("-m", "-c") and len(argv) > 1:
        return (argv[0], argv[1]), (["-c"] if argv[0] == "-c" else [argv[1]]) + argv[2:]
    return ("script", argv[0]), argv


def _pdb():
    """A pdb.Pdb that shows the program's frames only: `where`, `up` and `down` start at its
    first frame, as `python3 -m pdb` would show it, without this file's, runpy's or bdb's."""
    import pdb

    class Pdb(pdb.Pdb):
        def get_stack(self, f, t):
            stack, i = super().get_stack(f, t)
            cut = 0
            while cut < len(stack) - 1 and stack[cut][0].f_code.co_filename in _OURS:
                cut += 1
            return stack[cut:], max(i - cut, 0)

    return Pdb()


def _pdb_breakpoint(*args, **kwargs):
    """sys.breakpointhook under pdb: stops in the caller's frame, with the program's stack."""
    if _env.get("PYTHONBREAKPOINT") == "0":
        return None
    _pdb().set_trace(sys._getframe(1))
    return None


def _run_under_pdb(target):
    """Runs the program under pdb, stopped before its first line, as `python3 -m pdb` does."""
    _write_status("attached", "pdb", "pdb on the terminal")
    sys.breakpointhook = _pdb_breakpoint
    kind, what = target
    debugger = _pdb()
    if kind == "script":
        with open(what, "rb") as f:
            code = compile(f.read(), what, "exec")
        globals_ = {"__name__": "__main__", "__file__": what, "__builtins__": __builtins__}
    elif kind == "-m":
        name, spec, code = runpy._get_module_details(what)
        globals_ = {"__name__": "__main__", "__file__": spec.origin, "__package__": spec.parent,
                    "__spec__": spec, "__loader__": spec.loader, "__builtins__": __builtins__}
        sys.argv[0] = spec.origin
    else:
        code = compile(what, "<string>", "exec")
        globals_ = {"__name__": "__main__", "__builtins__": __builtins__}
    debugger.run(code, globals_)


def main():
    target, sys.argv = _target(sys.argv[1:])
    if target[0] == "script":
        sys.path[0] = os.path.dirname(os.path.abspath(target[1]))
    else:
        sys.path[0] = os.getcwd()
    if _env.get("COHORT_DEBUG_PDB") == "1":
        try:
            _run_under_pdb(target)
        except SystemExit:
            raise
        except BaseException:
            exc = sys.exc_info()
            traceback.print_exception(exc[0], exc[1], _user_traceback(exc[2]))
            if _env.get("COHORT_DEBUG_POST_MORTEM") == "1":
                debugger = _pdb()
                debugger.reset()
                debugger.interaction(None, _user_traceback(exc[2]))
            sys.exit(1)
        return
    sys.breakpointhook = _breakpoint
    if _env.get("COHORT_DEBUG_WAIT") == "1":
        _pause("start", "before " + (target[1] if target[0] != "-c" else "-c"))
    try:
        _run(target)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        exc = sys.exc_info()
        if _env.get("COHORT_DEBUG_POST_MORTEM") != "1":
            raise
        tb = _user_traceback(exc[2]) or exc[2]
        line = traceback.format_exception_only(exc[0], exc[1])[-1].strip()
        where = "%s at %s" % (line, _frame_where(_innermost(tb).tb_frame))
        traceback.print_exception(exc[0], exc[1], tb)
        sys.stderr.flush()
        if _pause("exception", where):
            _show_exception((exc[0], exc[1], tb))
            _end_without_stopping_again()
        _write_status("running")
        sys.exit(1)


if __name__ == "__main__":
    main()
