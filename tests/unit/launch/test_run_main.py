"""``dethpc.launch._run_main`` behaves like ``python script.py`` at both ends.

Every row runs a real interpreter twice, bare and under the guard, and wants the
same exit status and the same output: the guard may change how the process
ends, never what the script's user sees.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dethpc.launch._run_main import exit_code, foreign_threads, guarded_argv

REPO = Path(__file__).resolve().parents[3]

CASES = [
    ("falls off the end", "print('hi')", 0),
    ("exit(None)", "import sys; sys.exit()", 0),
    ("exit(3)", "raise SystemExit(3)", 3),
    ("exit(256) wraps", "raise SystemExit(256)", 0),
    ("exit(True)", "raise SystemExit(True)", 1),
    ("exit('message')", "import sys; sys.exit('bye now')", 1),
    ("uncaught error", "raise ValueError('boom')", 1),
    ("atexit runs", "import atexit; atexit.register(print, 'atexit ran')", 0),
    ("non-daemon thread is joined",
     "import threading, time\n"
     "def late():\n    time.sleep(0.3); print('thread done', flush=True)\n"
     "threading.Thread(target=late).start()", 0),
    ("__del__ of a global runs",
     "class D:\n    def __del__(self):\n        print('del ran', flush=True)\nd = D()", 0),
    ("argv, __name__, sys.path[0]",
     "import os, sys; print(sys.argv[1:], __name__, "
     "sys.path[0] == os.path.dirname(os.path.abspath(__file__)))", 0),
    ("os.abort is not masked", "import os; os.abort()", -signal.SIGABRT),
    ("KeyboardInterrupt dies by SIGINT", "raise KeyboardInterrupt", -signal.SIGINT),
]


FOREIGN = "import _thread, time\n_thread.start_new_thread(time.sleep, (60,))\n"
SKIPPED = "without interpreter finalization"

FOREIGN_CASES = [
    ("exit(3)", "raise SystemExit(3)", 3),
    ("uncaught error", "raise ValueError('boom')", 1),
    ("unflushed print", "print('buffered, no flush')", 0),
    ("atexit runs", "import atexit; atexit.register(print, 'atexit ran')", 0),
    ("__del__ in a cycle runs",
     "class D:\n    def __del__(self):\n        print('del ran', flush=True)\n"
     "d = D(); d.me = d", 0),
]


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DETHPC_RUN_MAIN_DEBUG": "1"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("name", "source", "code"), CASES, ids=[c[0] for c in CASES])
def test_guard_matches_bare_python(tmp_path: Path, name: str, source: str, code: int) -> None:
    script = tmp_path / "sub" / "script.py"
    script.parent.mkdir()
    script.write_text(source + "\n")
    bare = run([sys.executable, str(script), "a", "b"], tmp_path)
    guarded = run(guarded_argv(sys.executable, [str(script), "a", "b"]), tmp_path)
    assert bare.returncode == code, bare.stderr
    assert guarded.returncode == bare.returncode, guarded.stderr
    assert guarded.stdout == bare.stdout
    last = (bare.stderr.strip().splitlines() or [""])[-1]
    assert last in guarded.stderr  # the same message or traceback's last line
    assert SKIPPED not in guarded.stderr  # no foreign threads: normal finalization


@pytest.mark.parametrize(("name", "source", "code"), FOREIGN_CASES,
                         ids=[c[0] for c in FOREIGN_CASES])
def test_with_foreign_threads_the_end_skips_finalization_only(tmp_path: Path, name: str,
                                                              source: str, code: int) -> None:
    """A thread Python did not start (``_thread`` stands in for torch's C++ workers)."""
    script = tmp_path / "script.py"
    script.write_text(FOREIGN + source + "\n")
    bare = run([sys.executable, str(script)], tmp_path)
    guarded = run(guarded_argv(sys.executable, [str(script)]), tmp_path)
    assert SKIPPED in guarded.stderr and SKIPPED not in bare.stderr
    assert (guarded.returncode, guarded.stdout) == (bare.returncode, bare.stdout) == (
        code, bare.stdout)
    assert bare.stdout or name in ("exit(3)", "uncaught error")


def test_module_target_runs_as_main_with_cwd_first(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        "import os, sys\nprint(__name__, sys.argv[1:], sys.path[0] == os.getcwd())\n"
        "raise SystemExit(4)\n")
    out = run(guarded_argv(sys.executable, ["-m", "pkg.train", "x"]), tmp_path)
    assert out.returncode == 4, out.stderr
    assert out.stdout.strip() == "__main__ ['x'] True"


def test_no_target_is_a_usage_error(tmp_path: Path) -> None:
    out = run(guarded_argv(sys.executable, []), tmp_path)
    assert out.returncode == 2 and "usage:" in out.stderr


@pytest.mark.parametrize(("code", "want"), [
    (None, 0), (0, 0), (5, 5), (256, 0), (True, 1), (False, 0), ("text", 1),
])
def test_exit_code(code: object, want: int) -> None:
    assert exit_code(SystemExit(code)) == want


@pytest.mark.parametrize(("names", "want"), [
    ([], 0), (["self"], 0), (["self", "1", "2"], 2), (["1"], 1),
])
def test_foreign_threads_counts_threads_python_did_not_start(tmp_path: Path, names: list[str],
                                                             want: int) -> None:
    import threading

    for name in names:  # "self": this (Python) thread's id
        (tmp_path / (str(threading.get_native_id()) if name == "self" else name)).mkdir()
    assert foreign_threads(tmp_path, settle_s=0) == want


def test_foreign_threads_unknown_without_proc(tmp_path: Path) -> None:
    assert foreign_threads(tmp_path / "absent", settle_s=0) == 0
