"""The loop on its own (``dethpc.control.daemon.loop.Daemon``): the order of a tick's
phases, what a tick with no open experiment does, and the backend calls of a steady
tick. Each phase is wrapped to log its call; real SQLite, a recording backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dethpc.backends.base import JobState
from dethpc.control.daemon import Daemon
from dethpc.store.models import ExperimentState, TrialState
from tests.unit.control.daemon_kit import world

#: a tick, read top to bottom
ORDER = ["holds", "mark", "scan", "retry_cancels", "adopt", "observe", "check", "start_tick",
         "run", "cancel_wanted", "run"]


def logged(daemon: Daemon, log: list[str]) -> Daemon:
    def wrap(owner: Any, name: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            log.append(name)
            return inner(*args, **kwargs)

        setattr(owner, name, call)

    wrap(daemon.guard, "holds")
    wrap(daemon.watcher, "mark")
    wrap(daemon.adopter, "scan")
    wrap(daemon.recovery, "retry_cancels")
    wrap(daemon.recovery, "adopt")
    wrap(daemon.pulls, "check")
    wrap(daemon.poller, "observe")
    wrap(daemon.budget, "start_tick")
    wrap(daemon.reconciling, "run")
    wrap(daemon.canceller, "cancel_wanted")
    wrap(daemon.submitting, "run")
    return daemon


def test_a_tick_runs_the_phases_in_order(tmp_path: Path) -> None:
    w = world(tmp_path)
    log: list[str] = []
    daemon = logged(Daemon(w.store, w.cluster, w.backend), log)
    stats = daemon.tick()
    # one lease check per acting phase: at the start and per experiment's submit
    assert [n for n in log if n != "holds"] == [n for n in ORDER if n != "holds"]
    assert log[0] == "holds" and log.count("holds") == 2
    assert stats.experiments == 1 and stats.submitted == 2     # the searcher's 2 creates


def test_without_an_open_experiment_only_recovery_runs(tmp_path: Path) -> None:
    w = world(tmp_path)
    with w.store.session() as s:
        exp = s.get(type(w.experiment()), w.exp_id)
        assert exp is not None
        exp.state = ExperimentState.COMPLETED
        s.add(exp)
    log: list[str] = []
    stats = logged(Daemon(w.store, w.cluster, w.backend), log).tick()
    assert log == ["holds", "mark", "scan", "retry_cancels"]
    assert stats.experiments == 0 and w.backend.calls == []


def test_a_steady_tick_makes_one_poll_and_asks_for_the_users_jobs(tmp_path: Path) -> None:
    w = world(tmp_path)
    daemon = Daemon(w.store, w.cluster, w.backend)
    daemon.tick()                                              # creates and submits
    for _ in range(3):
        w.backend.calls.clear()
        daemon.tick()
        assert w.backend.names() == ["poll", "user_jobs"]


def test_catch_up_judges_ended_jobs_and_submits_nothing(tmp_path: Path) -> None:
    """A view with no daemon running (``Daemon.catch_up``): the jobs' ends are read and
    judged as a tick would, but no new trial is submitted."""
    w = world(tmp_path, max_restarts=0)
    daemon = Daemon(w.store, w.cluster, w.backend)
    daemon.tick()                                              # 2 trials, one array
    refs = sorted(w.backend.states)
    assert len(refs) == 2
    w.backend.states.update({r: JobState.FAILED for r in refs})
    w.backend.calls.clear()
    stats = daemon.catch_up()
    assert "submit" not in w.backend.names(), w.backend.calls
    assert stats.experiments == 1 and stats.submitted == 0
    # the two ended ERROR; the searcher's next trials wait for a daemon's submit
    assert [t.state for t in w.trials()] == [TrialState.ERROR] * 2 + [TrialState.QUEUED] * 2
    daemon.tick()                                              # a daemon submits again
    assert "submit" in w.backend.names()


def test_a_tick_resolves_each_experiments_config_and_pool_once(tmp_path: Path,
                                                               monkeypatch: Any) -> None:
    """Issue 46 item 3: the stored config is parsed and its resource pool looked up once
    per open experiment per tick (``dethpc.control.resolved``), then handed to every
    phase (reconcile, watchdog, throttles, submit, the worker pool), not resolved again
    by each: counted over a tick that creates and submits trials and a steady one. (Job
    building, ``dethpc.jobs``, takes the cluster config and looks the pool up for each
    script it renders: not the control plane's lookups, not counted.)"""
    import sys

    from dethpc.config import stored
    from dethpc.config.model import ClusterConfig
    from dethpc.control import resolved
    from dethpc.control.reconcile import tick

    w = world(tmp_path)
    parses: list[str] = []
    pools: list[str] = []
    real_parse, real_pool = stored.parse_stored, ClusterConfig.pool

    def parse(text: str) -> Any:
        parses.append(text)
        return real_parse(text)

    def pool(self: ClusterConfig, name: str | None) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if not caller.startswith("dethpc.jobs"):
            pools.append(f"{caller}: {name}")
        return real_pool(self, name)

    for module in (tick, resolved):
        monkeypatch.setattr(module, "parse_stored", parse)
    monkeypatch.setattr(ClusterConfig, "pool", pool)
    daemon = Daemon(w.store, w.cluster, w.backend)
    for _ in range(2):
        parses.clear()
        pools.clear()
        stats = daemon.tick()
        assert stats.experiments == 1
        assert len(parses) == 1 and len(pools) == 1, (parses, pools)
    assert len(w.trials()) == 2 and all(not t.needs_job for t in w.trials())
