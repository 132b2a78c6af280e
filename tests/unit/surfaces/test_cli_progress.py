"""``experiment wait`` and ``submit --follow`` show live progress (issue 17 item 4).

Not on a terminal (a pipe, a log file): one plain line on stderr per change, no
control characters, stdout untouched (a real ``dethpc`` process whose stderr is a
pipe, driven by changes to its store). On a terminal (a pseudo-terminal): rich's
progress display. ``--follow``'s log still goes to stdout, the progress to stderr.
"""

from __future__ import annotations

import fcntl
import os
import pty
import queue
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import IO

import pytest
import yaml
from sqlmodel import select as sql_select

from dethpc.common.paths import ExperimentPaths
from dethpc.control.experiments import current_user
from dethpc.store.models import Experiment, ExperimentState, Trial, TrialState
from dethpc.surfaces.cli.common import ENV

CONFIG = {"name": "progress", "entrypoint": "python3 train.py",
          "hyperparameters": {"lr": 0.1},
          "searcher": {"name": "random", "metric": "val_loss", "smaller_is_better": True,
                       "max_trials": 3, "max_length": {"epochs": 1}}}


def seed(run_dir: Path, state: ExperimentState = ExperimentState.ACTIVE) -> int:
    ENV.cluster_path = None
    with ENV.store.session() as s:
        exp = Experiment(name="progress", config_yaml=yaml.safe_dump(CONFIG),
                         run_dir=str(run_dir), owner=current_user(), state=state)
        s.add(exp)
        s.flush()
        assert exp.id is not None
        for n in range(3):
            s.add(Trial(experiment_id=exp.id, request_id=n, hparams={"lr": 0.1}))
        return exp.id


def change(exp_id: int, trial_states: list[TrialState], best: list[float | None],
           exp_state: ExperimentState | None = None, progress: float = 0.0) -> None:
    with ENV.store.session() as s:
        trials = list(s.exec(sql_select(Trial).where(Trial.experiment_id == exp_id)
                             .order_by(Trial.id)))  # type: ignore[arg-type]
        for t, st, b in zip(trials, trial_states, best, strict=True):
            t.state, t.best_validation = st, b
            s.add(t)
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        exp.progress = progress
        if exp_state is not None:
            exp.state = exp_state
        s.add(exp)


def lines_of(stream: IO[str]) -> queue.Queue[str | None]:
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return q


def next_line(q: queue.Queue[str | None], timeout: float = 60.0) -> str:
    line = q.get(timeout=timeout)
    assert line is not None, "dethpc exited before printing the next progress line"
    return line


def dethpc(*args: str) -> list[str]:
    return [sys.executable, "-c", "from dethpc.surfaces.cli.main import main; main()", *args]


Q, R, C = TrialState.QUEUED, TrialState.RUNNING, TrialState.COMPLETED


def test_wait_prints_one_plain_line_per_change_when_not_a_terminal(home: Path) -> None:
    exp = seed(home / "runs" / "1")
    proc = subprocess.Popen(dethpc("experiment", "wait", str(exp)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert proc.stderr is not None and proc.stdout is not None
        err = lines_of(proc.stderr)
        # no daemon runs for this store: said once, before the progress
        assert next_line(err).startswith("note: no dethpc daemon is running")
        first = next_line(err)
        assert first == (f"experiment {exp} ACTIVE 0%: 0 done, 0 running, 3 queued; "
                         "best val_loss none yet\n")
        change(exp, [R, Q, Q], [None, None, None])
        assert next_line(err) == (f"experiment {exp} ACTIVE 0%: 0 done, 1 running, "
                                  "2 queued; best val_loss none yet\n")
        change(exp, [C, R, Q], [0.5, 0.25, None], progress=0.5)
        assert next_line(err) == (f"experiment {exp} ACTIVE 50%: 1 done, 1 running, "
                                  "1 queued; best val_loss 0.25 (trial 2)\n")
        time.sleep(1.0)  # two polls (every 0.5 s) with nothing new: nothing printed
        change(exp, [C, C, C], [0.5, 0.25, 0.75], ExperimentState.COMPLETED, 1.0)
        last = next_line(err)
        assert last == (f"experiment {exp} COMPLETED 100%: 3 done, 0 running, 0 queued; "
                        "best val_loss 0.25 (trial 2)\n")
        assert err.get(timeout=60) is None  # nothing more: the "nothing new" polls were quiet
        out = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert out == f"experiment {exp}: COMPLETED\n"
    for text in (first, last, out):
        assert "\x1b" not in text and "\r" not in text


def on_terminal(argv: list[str], *, stdout: bool) -> tuple[subprocess.Popen[bytes], str]:
    """Run ``argv`` with stderr (and ``stdout``: stdout too) on an 80-column
    pseudo-terminal; what the terminal received, once the process ended."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=follower if stdout else subprocess.PIPE, stderr=follower,
                            env={**env, "TERM": "xterm"})
    os.close(follower)
    seen = b""
    try:
        while True:  # read the terminal until the process ends
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                pytest.fail(f"no output on the terminal for 60 s: {seen!r}")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        proc.wait(timeout=60)
    return proc, seen.decode(errors="replace")


def test_wait_shows_richs_progress_display_on_a_terminal(home: Path) -> None:
    exp = seed(home / "runs" / "1")
    change(exp, [C, R, Q], [0.5, 0.25, None], progress=0.5)
    proc, text = on_terminal(dethpc("experiment", "wait", str(exp), "--timeout", "0.1"),
                             stdout=False)
    assert "\x1b[" in text  # a live display: cursor control, not plain lines
    assert "━" in text  # rich's bar
    # the bar's line, then the counts' line: whole at 80 columns
    assert "1 done, 1 running, 1 queued; best val_loss 0.25 (trial 2)" in text
    assert f"experiment {exp} ACTIVE" in text
    assert proc.returncode == 1  # still running after --timeout 0.1


def test_follow_streams_the_log_to_stdout_and_progress_to_stderr(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dethpc.surfaces.cli.experiment_cmd import _follow

    run_dir = home / "runs" / "1"
    exp = seed(run_dir, ExperimentState.COMPLETED)
    change(exp, [C, C, C], [0.5, 0.25, 0.75], ExperimentState.COMPLETED, 1.0)
    tp = ExperimentPaths(run_dir).trial(1)
    tp.root.mkdir(parents=True)
    (tp.root / "slurm-1.out").write_text("epoch 1\nepoch 2\n")
    assert _follow(exp) == "COMPLETED"
    out, err = capsys.readouterr()
    assert out.startswith("epoch 1\nepoch 2\n")
    assert err == (f"experiment {exp} COMPLETED 100%: 3 done, 0 running, 0 queued; "
                   "best val_loss 0.25 (trial 2)\n")


def test_follow_on_a_terminal_prints_the_log_above_the_display(home: Path) -> None:
    run_dir = home / "runs" / "1"
    exp = seed(run_dir, ExperimentState.COMPLETED)
    change(exp, [C, C, C], [0.5, 0.25, 0.75], ExperimentState.COMPLETED, 1.0)
    tp = ExperimentPaths(run_dir).trial(1)
    tp.root.mkdir(parents=True)
    (tp.root / "slurm-1.out").write_text("epoch 1\nepoch 2\n")
    proc, text = on_terminal([sys.executable, "-c",
                              "from dethpc.surfaces.cli.experiment_cmd import "
                              f"_follow; print('->', _follow({exp}))"], stdout=True)
    assert proc.returncode == 0, text
    assert "\x1b[" in text and "━" in text  # the live display
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")
    assert "epoch 1\nepoch 2\n" in plain  # the log, whole lines, above the display
    # the last frame, then the final state on a line of its own below it
    assert plain.rstrip().endswith(f"3 done, 0 running, 0 queued; best val_loss 0.25 (trial "
                                   f"2)\nexperiment {exp} COMPLETED\n-> COMPLETED"), plain
