"""submitit (>= 1.5) in the peers-at-scale benchmark, as submitit's documentation runs it.

Owns: ``SubmititRunner`` (``submitit``): the user starts one driver script on the login
node (bench/peers_scale/submitit_driver.py: synchronous successive halving, one
``executor.map_array`` of ``Checkpointable`` jobs a rung, eta 4, rungs at 4/16/64 steps;
its docstring cites submitit's README and docs and says what is written to win) and
waits. The driver is the **login-side process**: ``kill_login`` kills it with SIGKILL;
the jobs it submitted run on. Nothing restarts a dead driver (submitit has no daemon or
service; its docs leave the waiting process to the user), so a person has to: at their
next look (``operator_check``) the runner starts the same command again and counts one
human action; the driver re-attaches to its jobs from ``driver_state.json``, so the
restart costs the wait for that look, not the work. The search is finished when the
driver has written ``done`` (the last rung's results). The peers' Python: the system's
python3.11 with bench/peers/.venv's site-packages on ``PYTHONPATH`` (bench/peers_scale/
peer_optuna.py says why); submitit's jobs run the driver's interpreter and inherit that
``PYTHONPATH`` through sbatch's default ``--export=ALL``.
Must not: import submitit (the benchmark's driver runs in dethpc's environment).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers_scale.draws import shared_draws
from bench.peers_scale.peer_optuna import peers_env
from bench.peers_scale.systems import (
    SYSTEM_PYTHON,
    VALIDATE_EVERY,
    Cell,
    as_system_user,
    chown_tree,
)


@dataclass
class SubmititRunner:
    name: str = "submitit"
    login_process: str = "submitit driver (python -m bench.peers_scale.submitit_driver)"
    commands_cpu_s: float = 0.0
    human_actions: list[str] = field(default_factory=list)
    measured_pids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.cell: Cell | None = None
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def dir(self) -> Path:
        assert self.cell is not None
        return self.cell.dir / "submitit"

    def config(self, cell: Cell) -> dict[str, Any]:
        d = cell.dir / "submitit"
        return {"folder": str(d), "draws": shared_draws(cell.seed, cell.trials),
                "worklog": str(cell.worklog), "ckpt_root": str(d / "ckpt"),
                "validate_every": VALIDATE_EVERY, "parallelism": cell.gpus,
                "time_limit_min": int(cell.timeout_s // 60) + 30,
                "spec": {"startup_s": cell.spec.startup_s,
                         "container_s": cell.spec.container_part_s,
                         "time_scale": cell.spec.time_scale,
                         "save_s": cell.spec.save_s, "load_s": cell.spec.load_s,
                         "state_bytes": cell.spec.state_bytes}}

    def _start_driver(self) -> None:
        """``nohup python -m bench.peers_scale.submitit_driver CONFIG &`` as the user."""
        assert self.cell is not None
        log = (self.dir / "driver.log").open("ab")
        argv = as_system_user([SYSTEM_PYTHON, "-m", "bench.peers_scale.submitit_driver",
                               str(self.dir / "config.json")], peers_env(self.cell))
        self.procs.append(subprocess.Popen(argv, cwd=self.dir, stdout=log, stderr=log,
                                           stdin=subprocess.DEVNULL,
                                           start_new_session=True))
        log.close()

    def launch(self, cell: Cell) -> None:
        self.cell = cell
        (self.dir / "ckpt").mkdir(parents=True)
        (self.dir / "jobs").mkdir()
        (self.dir / "config.json").write_text(json.dumps(self.config(cell), indent=1))
        chown_tree(cell.dir)
        self._start_driver()
        cell.say(f"{self.name}: driver started")

    def _state(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.dir / "driver_state.json").read_text()))
        except (OSError, ValueError):
            return {}

    def _driver_pid(self) -> int | None:
        try:
            pid = int((self.dir / "driver.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if b"submitit_driver" in cmdline else None

    def finished(self) -> bool:
        return bool(self._state().get("done"))

    def kill_login(self) -> str | None:
        pid = self._driver_pid()
        if pid is None:
            return "no submitit driver was running"
        os.kill(pid, signal.SIGKILL)
        return f"submitit driver pid {pid} (kill -9)"

    def operator_check(self) -> str | None:
        """A dead driver before the search's end: a person runs it again."""
        if self._driver_pid() is not None or self.finished():
            return None
        for p in self.procs:
            p.poll()                # reap the killed one
        self._start_driver()
        action = "restarted the submitit driver (it re-attaches from driver_state.json)"
        self.human_actions.append(action)
        return action

    def stop(self) -> dict[str, Any]:
        pid = self._driver_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        state = self._state()
        return {"verdicts": driver_verdicts(state),
                "driver_starts": state.get("starts", 0), "done": state.get("done", False),
                "rung": state.get("rung"), "best": state.get("best"),
                "jobs_per_rung": {r: len(j) for r, j in state.get("jobs", {}).items()},
                "resubmits": state.get("resubmits", {})}


def driver_verdicts(state: dict[str, Any]) -> dict[str, str]:
    """The driver's final word on each work-log trial ``t<i>`` (metrics.Verdict's values),
    from its state file: a trial's newest rung decides -- its loss there recorded: decided
    (promoted or not: the driver's halving took its result); ``inf``: the driver gave up
    on it (its resubmits spent, a job that failed again); no loss yet: live (its job is
    queued, running or requeued, the driver waits for it)."""
    out: dict[str, str] = {}
    for rung in sorted(state.get("jobs", {}), key=int):
        losses = state.get("losses", {}).get(rung, {})
        for i in state["jobs"][rung]:
            loss = losses.get(i)
            out[f"t{i}"] = "live" if loss is None else \
                "gave_up" if float(loss) == float("inf") else "decided"
    return out


RUNNERS = {"submitit": SubmititRunner}
