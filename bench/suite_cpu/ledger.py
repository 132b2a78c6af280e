"""CPU ledger of one Python process (bench/suite_cpu): run at interpreter start by a
``.pth`` file that ``install.py`` puts in the venv, only while ``DETHPC_CPU_LEDGER``
names a file.

At exit the process appends one JSON line to that file: its argv (first words), its role
(the CLI, the daemon, a job-side process, a pytest process, other), and its own user and
system CPU seconds (``getrusage(RUSAGE_SELF)``: the interpreter's start-up included;
children are not added, each Python child writes its own line; the Slurm commands a
process ran are in ``children_s`` for information). A process that ends by a signal or
``os._exit`` writes nothing: ``summarize.py`` says how many lines it read, and the
figures are lower bounds.
Must not: change anything the process does (no signal handlers, no output).
"""

import atexit
import json  # here, not at exit: a package imported inside an atexit callback makes an
import os  # unhandled KeyboardInterrupt end with exit code 1, not by SIGINT
import resource
import sys


def _role(argv: list[str]) -> str:
    first = os.path.basename(str(argv[0] or "")) if argv else ""
    if first == "dethpc":
        words = [a for a in argv[1:] if not a.startswith("-")][:2]
        return "daemon" if words[:2] == ["daemon", "run"] else "cli"
    if os.environ.get("PYTEST_XDIST_WORKER") or "pytest" in first or "xdist" in sys.modules:
        return "pytest"
    if os.environ.get("SLURM_JOB_ID") or os.environ.get("DETHPC_TRIAL_ID") \
            or os.environ.get("DETHPC_RUN_DIR"):
        return "job"
    return "other"


def _write() -> None:
    try:
        _append()
    except Exception:  # noqa: BLE001 - a measurement never changes what the process prints
        pass


def _append() -> None:
    path = os.environ.get("DETHPC_CPU_LEDGER")
    if not path:
        return
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [str(a)[:120] for a in sys.argv[:4]]
    line = json.dumps({"role": _role(sys.argv), "argv": argv,
                       "user_s": round(me.ru_utime, 4), "sys_s": round(me.ru_stime, 4),
                       "children_s": round(kids.ru_utime + kids.ru_stime, 4),
                       "module": getattr(sys.modules.get("__main__"), "__spec__", None)
                       and sys.modules["__main__"].__spec__.name}) + "\n"  # type: ignore[union-attr]
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError:
        return
    try:
        os.write(fd, line.encode()[:4000])
    finally:
        os.close(fd)


if not getattr(sys, "_dethpc_cpu_ledger", False):  # the venv's lib64 -> lib: two .pth runs
    sys._dethpc_cpu_ledger = True  # type: ignore[attr-defined]
    atexit.register(_write)
