"""A store as the reconciler leaves it, for the dashboard's tests, and a running dashboard.

``seed(home)`` writes, through ``Store``, a finished random-search experiment (4 trials
with validation curves, checkpoints, events and job output), a running one whose queued
trial waits in Slurm's queue (``QOSMaxJobsPerUserLimit``) and has a long log, an ASHA
experiment driven by the real searcher (rungs), and another user's experiment.
``Dashboard`` runs the real ``dethpc dashboard`` in a subprocess on that store and reads
the URL it prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dethpc.control.experiments import current_user
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    Checkpoint,
    Event,
    Experiment,
    ExperimentState,
    Job,
    JobState,
    Metric,
    Trial,
    TrialState,
)

RANDOM = {"name": "finished-sweep", "entrypoint": "python3 train.py",
          "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1}},
          "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 4,
                       "max_length": {"batches": 50}}}
ASHA = {"name": "asha", "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": 0, "base": 10}},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "smaller_is_better": True, "time_metric": "batches", "max_time": 400,
                     "max_trials": 16, "max_concurrent_trials": 16, "mode": "standard",
                     "divisor": 4, "max_rungs": 3},
        "reproducibility": {"experiment_seed": 11}}
#: how many lines the running trial's log has (more than the dashboard's tail shows)
LOG_LINES = 500


def curve(n: int) -> list[tuple[int, float]]:
    """Trial ``n``'s validation losses at steps 10..50 (trial 1 is the best)."""
    return [(s, (2.0, 1.0, 3.0, 4.0)[n] / s ** 0.5) for s in range(10, 51, 10)]


def seed(home: Path, url: str | None = None) -> dict[str, Any]:
    """Fill the store under ``home`` (``DETHPC_HOME``), or at ``url``; the ids the tests
    look up."""
    store = Store(url or f"sqlite:///{home / 'dethpc.db'}")
    me = current_user()
    out: dict[str, Any] = {}
    with store.session() as s:
        exp = Experiment(name="finished-sweep", config_yaml=yaml.safe_dump(RANDOM),
                         run_dir=str(home / "runs" / "1"), owner=me, progress=1.0,
                         state=ExperimentState.COMPLETED, ended_at=time.time())
        s.add(exp)
        s.flush()
        assert exp.id is not None
        batch = Batch(experiment_id=exp.id)
        s.add(batch)
        s.flush()
        trials = []
        for n in range(4):
            points = curve(n)
            t = Trial(experiment_id=exp.id, request_id=n, state=TrialState.COMPLETED,
                      hparams={"lr": 10 ** -(n + 1)}, steps_completed=50, target_length=50,
                      best_validation=min(v for _, v in points),
                      latest_validation=points[-1][1], needs_job=False, runs=1)
            s.add(t)
            s.flush()
            assert t.id is not None
            trials.append(t.id)
            for steps, v in points:
                s.add(Metric(trial_id=t.id, kind="validation", steps=steps,
                             metrics={"validation_loss": v}))
                s.add(Metric(trial_id=t.id, kind="training", steps=steps,
                             metrics={"loss": v * 2}))
                s.add(Checkpoint(uuid=f"ck-{t.id}-{steps}", experiment_id=exp.id,
                                 trial_id=t.id, steps_completed=steps, validation_metric=v))
            s.add(Job(experiment_id=exp.id, trial_id=t.id, batch_id=batch.id or 0,
                      ref=f"100_{n}", state=JobState.COMPLETED, live=False))
            s.add(Event(experiment_id=exp.id, trial_id=t.id, kind="completed",
                        message=f"trial {t.id} completed"))
        s.add(Event(experiment_id=exp.id, kind="experiment",
                    message="experiment completed <b>no markup</b>"))
        out.update(finished=exp.id, finished_trials=trials, best_trial=trials[1])

        run = Experiment(name="running", config_yaml=yaml.safe_dump(RANDOM),
                         run_dir=str(home / "runs" / "2"), owner=me, progress=0.5)
        s.add(run)
        s.flush()
        assert run.id is not None
        rb = Batch(experiment_id=run.id)
        s.add(rb)
        s.flush()
        waiting = Trial(experiment_id=run.id, request_id=0, state=TrialState.QUEUED,
                        needs_job=False, target_length=50,
                        best_validation=float("nan"))
        s.add(waiting)
        s.flush()
        assert waiting.id is not None
        s.add(Job(experiment_id=run.id, trial_id=waiting.id, batch_id=rb.id or 0,
                  ref="200_0", state=JobState.PENDING, reason="QOSMaxJobsPerUserLimit"))
        straggling = Trial(experiment_id=run.id, request_id=1, state=TrialState.RUNNING,
                           needs_job=False, target_length=50)
        s.add(straggling)
        s.flush()
        out.update(running=run.id, waiting_trial=waiting.id, straggling_trial=straggling.id)

        other = Experiment(name="someone-elses", config_yaml=yaml.safe_dump(RANDOM),
                           run_dir=str(home / "runs" / "3"), owner=f"not-{me}")
        s.add(other)
        s.flush()
        out["other"] = other.id
        other_trial = Trial(experiment_id=other.id or 0, request_id=0)
        s.add(other_trial)
        s.flush()
        out["other_trial"] = other_trial.id

    log = home / "runs" / "2" / "trials" / str(out["waiting_trial"]) / "slurm-200_0.out"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"log line {i}\n" for i in range(LOG_LINES)))
    # a 2x2 trial's ranks (dethpc.core._steps): rank 3, on n2, twice the others' busy time
    ranks = home / "runs" / "2" / "trials" / str(out["straggling_trial"]) / "ranks"
    ranks.mkdir(parents=True)
    for rank in range(4):
        (ranks / f"{rank}.json").write_text(json.dumps({
            "rank": rank, "world": 4, "node": f"n{rank // 2 + 1}", "run": 0, "steps": 40,
            "busy_s": 0.2 if rank == 3 else 0.1, "step_s": 0.25, "at": 1.0e9}))
    out["asha"] = seed_asha(store, home)
    return out


def seed_asha(store: Store, home: Path) -> int:
    """An ASHA experiment driven by the real searcher: every trial at its first rung."""
    from tests.fixtures.asha_seed import seed_asha as seed

    return seed(store, ASHA, home / "runs" / "4")


@dataclass
class Dashboard:
    """``dethpc dashboard`` running in a subprocess over the store in ``home``."""

    proc: subprocess.Popen[str] | None
    url: str
    base: str
    token: str
    ssh_line: str
    #: set when served in this process's thread (``in_thread``)
    running: Any = None
    thread: threading.Thread | None = None

    @classmethod
    def in_thread(cls, home: Path, timeout: float = 60.0) -> Dashboard:
        """The same app and uvicorn server, served from a thread of this process (no
        second interpreter to start: the unit tests' variant)."""
        from dethpc.surfaces.dashboard.serve import prepare

        running = prepare(Store(f"sqlite:///{home / 'dethpc.db'}"), current_user())
        thread = threading.Thread(target=running.server.run,
                                  kwargs={"sockets": [running.sock]}, daemon=True)
        thread.start()
        a = running.address
        ssh = next(line for line in running.lines if "ssh -N -L" in line)
        dash = cls(None, a.url, f"http://127.0.0.1:{a.port}", a.token,
                   ssh[ssh.index("ssh -N"):], running, thread)
        dash.wait_ready(time.monotonic() + timeout)
        return dash

    @classmethod
    def start(cls, home: Path, timeout: float = 60.0) -> Dashboard:
        return cls.attach(cls.spawn(home), timeout)

    @staticmethod
    def spawn(home: Path) -> subprocess.Popen[str]:
        """Start ``dethpc dashboard`` (``attach`` waits for it: start something else
        meanwhile, a browser, while this one imports)."""
        env = {**os.environ, "DETHPC_HOME": str(home), "COLUMNS": "200"}
        (home / "cluster.yaml").write_text(yaml.safe_dump(
            {"backend": "local", "runs_root": str(home / "runs")}))
        env["DETHPC_CLUSTER_CONFIG"] = str(home / "cluster.yaml")
        return subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "dashboard"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)

    @classmethod
    def attach(cls, proc: subprocess.Popen[str], timeout: float = 60.0) -> Dashboard:
        """Read the URL ``dethpc dashboard`` printed; wait until it answers."""
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(lines) < 3:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        text = "".join(lines)
        m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", text)
        ssh = re.search(r"ssh -N -L \S+ \S+", text)
        if m is None or ssh is None:
            proc.kill()
            raise AssertionError(f"dethpc dashboard printed no URL:\n{text}")
        dash = cls(proc, m.group(0), m.group(1), m.group(2), ssh.group(0))
        dash.wait_ready(deadline)
        return dash

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                self.get("/api/experiments", token=self.token)
                return
            except (ConnectionError, urllib.error.URLError):
                time.sleep(0.05)
        raise AssertionError("the dashboard never answered")

    def get(self, path: str, *, token: str | None = None, cookie: str | None = None,
            ) -> tuple[int, dict[str, str], bytes]:
        """GET without following redirects: status, headers (lower-case), body."""
        req = urllib.request.Request(self.base + path)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        if cookie is not None:
            req.add_header("Cookie", cookie)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=30) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def json(self, path: str) -> Any:
        status, _, body = self.get(path, token=self.token)
        assert status == 200, (status, body)
        return json.loads(body)

    def stop(self) -> None:
        if self.proc is None:
            self.running.server.should_exit = True
            assert self.thread is not None
            self.thread.join(30)
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
