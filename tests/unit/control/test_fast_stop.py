"""Stops that land (issue 16 item 3): between ticks the daemon stats the live trials'
metrics files and ingests those that grew without polling the backend, so an ASHA
rung's stop writes the trial's stop file before the next tick. Real SQLite; a backend
that records every call and whose jobs run forever (no processes)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import yaml
from sqlmodel import select

from dethpc.backends.base import JobInfo, JobRequest, JobState
from dethpc.backends.local import LocalBackend
from dethpc.common.paths import ExperimentPaths
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon import Daemon, Watched, grown_files
from dethpc.control.experiments import create_experiment
from dethpc.core._preempt import STOP_CHECK_INTERVAL_S
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, Trial

TOY = Path(__file__).resolve().parents[2] / "fixtures" / "toy"


class RunningForever(LocalBackend):
    """Submits nothing real: every job is RUNNING until cancelled; counts each call."""

    def __init__(self, spool: Path) -> None:
        super().__init__(spool)
        self.calls: Counter[str] = Counter()
        self.cancelled: set[str] = set()
        self.next_id = 100
        #: False: every job reads PENDING (queued again)
        self.running = True

    def submit(self, request: JobRequest) -> list[str]:
        self.calls["submit"] += 1
        self.next_id += 1
        if not request.array_indices:
            return [str(self.next_id)]
        return [f"{self.next_id}_{i}" for i in request.array_indices]

    def poll(self, refs: Sequence[str]) -> dict[str, JobInfo]:
        self.calls["poll"] += 1
        alive = JobState.RUNNING if self.running else JobState.PENDING
        return {r: JobInfo(ref=r, state=JobState.CANCELLED if r in self.cancelled
                           else alive) for r in refs}

    def user_jobs(self) -> list[JobInfo] | None:
        self.calls["user_jobs"] += 1
        return None

    def cancel(self, refs: Sequence[str], signal: str | None = None) -> None:
        self.calls["cancel"] += 1
        self.cancelled |= set(refs)


def start(tmp_path: Path, poll_s: float = 0.05) -> tuple[Store, Daemon, RunningForever, int]:
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "t", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6}},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss", "max_time": 64,
                     "time_metric": "batches", "max_trials": 4, "max_concurrent_trials": 4,
                     "mode": "aggressive", "divisor": 4, "max_rungs": 3}}))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cluster = ClusterConfig(runs_root=tmp_path / "runs", metrics_poll_s=poll_s,
                            pools={"default": ResourcePool(name="default")})
    backend = RunningForever(tmp_path / "spool")
    exp_id = create_experiment(store, cluster, load_experiment_config(cfg_path), TOY,
                               LocalBackend(tmp_path / "spool"))
    daemon = Daemon(store, cluster, backend)
    daemon.tick()   # creates the 4 trials
    daemon.tick()   # sees them running
    return store, daemon, backend, exp_id


def report(run_dir: Path, trial_id: int, steps: int, loss: float) -> None:
    """What ``report_validation_metrics`` appends."""
    path = ExperimentPaths(run_dir).trial(trial_id).metrics
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps({"kind": "validation", "steps": steps, "time": time.time(),
                            "metrics": {"validation_loss": loss}}) + "\n")


def trials_of(store: Store, exp_id: int) -> tuple[Path, list[int]]:
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        ids = [t.id for t in s.exec(select(Trial).where(Trial.experiment_id == exp_id))
               if t.id is not None]
        return Path(exp.run_dir), sorted(ids)


VALIDATION = '{"kind": "validation", "steps": 8, "metrics": {"loss": 1.0}}\n'


def test_grown_files_reports_growth_once(tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_text(VALIDATION)
    watch = {7: Watched(exp_id=1, path=f, size=0), 8: Watched(1, tmp_path / "absent", 0)}
    assert grown_files(watch) == {1: {7}}
    assert grown_files(watch) == {}
    f.write_text(VALIDATION * 2)
    assert grown_files(watch) == {1: {7}}


def test_only_what_the_searcher_is_told_of_is_worth_a_fast_pass(tmp_path: Path) -> None:
    """Training metrics and checkpoints wait for the tick; a validation or an early exit
    is handed over, also when its line was half written at the previous stat."""
    f = tmp_path / "metrics.jsonl"
    f.write_text("")
    watch = {7: Watched(exp_id=1, path=f, size=0)}
    with f.open("a") as fh:
        fh.write('{"kind": "training", "steps": 8, "metrics": {"validation_loss": 1}}\n'
                 '{"kind": "checkpoint", "steps": 8, "uuid": "u"}\n')
    assert grown_files(watch) == {}
    assert watch[7].size == f.stat().st_size
    with f.open("a") as fh:
        fh.write('{"kind": "valid')                     # half a line: not yet
        fh.flush()
        assert grown_files(watch) == {}
        fh.write('ation", "steps": 16, "metrics": {"loss": 1.0}}\n')
    assert grown_files(watch) == {1: {7}}            # the whole line, read again
    assert grown_files(watch) == {}
    with f.open("a") as fh:
        fh.write('{"kind": "early_exit", "reason": "INVALID_HP"}\n')
    assert grown_files(watch) == {1: {7}}


def test_a_rung_stop_writes_the_stop_file_between_ticks_without_polling(tmp_path) -> None:
    store, daemon, backend, exp_id = start(tmp_path)
    run_dir, ids = trials_of(store, exp_id)
    assert len(ids) == 4
    # rung 0 is 16 batches (4 trials: 2 rungs): one good loss, then a bad one
    report(run_dir, ids[0], 16, 0.1)
    report(run_dir, ids[1], 16, 9.0)
    before = Counter(backend.calls)
    stop = ExperimentPaths(run_dir).trial(ids[1]).stop
    # the wait before the next tick: the stop file appears while it lasts
    daemon.wait(30.0, should_stop=stop.exists)
    assert stop.read_text() == "stop"
    assert not ExperimentPaths(run_dir).trial(ids[0]).stop.exists()
    assert backend.calls == before, "the file-driven path must not call the backend"
    with store.session() as s:
        kinds = [e.kind for e in s.exec(select(Event).where(Event.trial_id == ids[1]))]
    assert "stop_requested" in kinds


def test_off_means_the_stop_waits_for_the_tick(tmp_path) -> None:
    store, daemon, backend, exp_id = start(tmp_path, poll_s=0)
    run_dir, ids = trials_of(store, exp_id)
    report(run_dir, ids[0], 16, 0.1)
    report(run_dir, ids[1], 16, 9.0)
    daemon.wait(0.3, should_stop=lambda: False)
    stop = ExperimentPaths(run_dir).trial(ids[1]).stop
    assert not stop.exists()
    daemon.tick()
    assert stop.read_text() == "stop"


def test_the_fast_path_ingests_only_once(tmp_path) -> None:
    """A validation ingested between ticks is not fed to the searcher again by the
    tick (offsets commit with it): one searcher call per validation."""
    store, daemon, _backend, exp_id = start(tmp_path)
    run_dir, ids = trials_of(store, exp_id)
    report(run_dir, ids[0], 16, 0.1)
    daemon.refresh_watch()
    assert daemon.fast_tick(grown_files(daemon.watch))
    daemon.tick()
    with store.session() as s:
        calls = [e.message for e in s.exec(select(Event).where(
            Event.trial_id == ids[0], Event.kind == "searcher"))]
    assert sum("validation" in c for c in calls) == 1, calls


def test_trials_look_for_their_stop_file_every_tenth_of_a_second() -> None:
    assert STOP_CHECK_INTERVAL_S <= 0.1


def test_only_running_jobs_are_watched(tmp_path) -> None:
    """A queued job writes nothing: at thousands of pending trials the daemon stats only
    the running ones' files."""
    store, daemon, backend, exp_id = start(tmp_path)
    daemon.refresh_watch()
    assert len(daemon.watch) == 4
    backend.running = False
    daemon.tick()
    daemon.refresh_watch()
    assert daemon.watch == {}


def test_a_run_ending_in_a_worker_pool_brings_the_next_tick_forward(tmp_path) -> None:
    """A pool worker writes a run's result: the wait ends about ``tick_min_s`` after the
    last tick instead of sleeping its whole delay (the searcher hears of the exit at
    the next tick), still without a backend call between ticks."""
    store, daemon, backend, exp_id = start(tmp_path)
    run_dir, ids = trials_of(store, exp_id)
    results = run_dir / "pool" / "results"
    results.mkdir(parents=True)
    daemon.refresh_watch()
    daemon.tick()                           # marks the pool's results/ as it is now
    before = Counter(backend.calls)
    calls = 0

    def a_result_arrives() -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:                      # during the wait, after it began
            (results / "t1-s0.json").write_text("{}")
        return False

    t0 = time.monotonic()
    assert daemon.wait(60.0, should_stop=a_result_arrives) is True
    assert time.monotonic() - t0 < 30.0, "the wait slept its whole delay"
    assert backend.calls == before
    # no result since the tick began: the wait lasts its delay and reports no change
    daemon.tick()
    t0 = time.monotonic()
    assert daemon.wait(0.6, should_stop=lambda: False) is False
    assert time.monotonic() - t0 >= 0.6


def test_a_client_change_wakes_a_backed_off_daemon(tmp_path, monkeypatch) -> None:
    """A daemon idle long enough to wait tick_max_s between ticks ticks within
    tick_min_s of a submit, pause, cancel or set-concurrency (``service.wake``)."""
    from dethpc.control import experiments, service

    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    store, daemon, _backend, exp_id = start(tmp_path)
    daemon.wake = service.wake_path()
    daemon.tick()                                 # the mark: no wake file yet
    t0 = time.monotonic()
    assert daemon.wait(0.5, should_stop=lambda: False) is False   # nothing: sleeps it all
    assert time.monotonic() - t0 >= 0.5
    experiments.request_state(store, exp_id, "pause")  # touches the wake file
    t0 = time.monotonic()
    assert daemon.wait(60.0, should_stop=lambda: False) is True
    assert time.monotonic() - t0 < 30.0, "the wake must end a 60 s wait"
    daemon.tick()                                 # takes the new mark
    assert not daemon.woken()
    experiments.request_state(store, exp_id, "activate")
    assert daemon.woken()


def test_wake_does_nothing_without_a_home(tmp_path, monkeypatch) -> None:
    from dethpc.control import service

    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "absent"))
    service.wake()
    assert not (tmp_path / "absent").exists()


def test_the_searched_marker_follows_the_searchers_decision_between_ticks(tmp_path) -> None:
    """After the fast path fed a trial's validation to the searcher, the trial's
    ``searched`` marker says that length; the stopped trial's stop file was written
    before it (a trial waiting at the rung sees the stop, never a marker without it)."""
    store, daemon, _backend, exp_id = start(tmp_path)
    run_dir, ids = trials_of(store, exp_id)
    good, bad = (ExperimentPaths(run_dir).trial(i) for i in ids[:2])
    report(run_dir, ids[0], 16, 0.1)
    report(run_dir, ids[1], 16, 9.0)
    assert not good.searched.exists()
    daemon.wait(30.0, should_stop=lambda: bad.searched.exists())
    assert bad.searched.read_text() == "16\n"
    assert bad.stop.read_text() == "stop"
    assert good.searched.read_text() == "16\n"
    assert not good.stop.exists()
    assert not ExperimentPaths(run_dir).trial(ids[2]).searched.exists()


def test_a_tick_writes_the_marker_too_and_it_never_goes_back(tmp_path) -> None:
    store, daemon, _backend, exp_id = start(tmp_path, poll_s=0)
    run_dir, ids = trials_of(store, exp_id)
    marker = ExperimentPaths(run_dir).trial(ids[0]).searched
    report(run_dir, ids[0], 16, 0.1)
    daemon.tick()
    assert marker.read_text() == "16\n"
    from dethpc.control.daemon.verdicts import write_searched
    write_searched({str(marker): 8})
    assert marker.read_text() == "16\n"
    write_searched({str(marker): 32})
    assert marker.read_text() == "32\n"
    assert [p.name for p in marker.parent.iterdir() if p.name.startswith(".searched")] == []
