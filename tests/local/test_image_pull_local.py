"""The daemon pulls an experiment's image before its first sbatch (``containers.pull:
login``), in the background: the experiment's trials wait, other experiments are
submitted in the same tick, two experiments of one image cause one pull, and a failed
pull fails the experiment once with the runtime's own words.

The runtime is the stand-in of tests/unit/jobs/test_containers.py (Apptainer cannot be
installed here): it proves dethpc's logic around the pull, not that Apptainer pulls.
Real store, real daemon, real local backend, real threads and locks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlmodel import select

from dethpc.backends.local import LocalBackend
from dethpc.common.errors import SubmitError
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ContainerSettings, ResourcePool
from dethpc.control.daemon import Daemon
from dethpc.control.experiments import create_experiment
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, ExperimentState, Job
from tests.slurm.fixtures.harness import wait_until
from tests.unit.jobs.test_containers import STANDIN


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Daemon, Store, Path, Path]:
    bin_dir = tmp_path / "bin"
    (bin_dir / "log").mkdir(parents=True)
    exe = bin_dir / "apptainer"
    exe.write_text(STANDIN)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("STANDIN_DIR", str(bin_dir / "log"))
    cluster = ClusterConfig(backend="local", runs_root=tmp_path / "runs",
                            pools={"default": ResourcePool(name="default")},
                            containers=ContainerSettings(runtime="apptainer",
                                                         sif_cache=tmp_path / "sif"),
                            python=sys.executable)
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    daemon = Daemon(store, cluster, LocalBackend(tmp_path / "spool", max_concurrent=1))
    (tmp_path / "ctx").mkdir()
    return daemon, store, tmp_path / "ctx", bin_dir


def experiment(daemon: Daemon, store: Store, ctx: Path, image: str | None) -> int:
    raw = {"name": "img", "entrypoint": "python3 -c pass",
           "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}
    if image:
        raw["environment"] = {"image": image}
    return create_experiment(store, daemon.cluster, parse_experiment_config(raw), ctx,
                             daemon.backend)


def jobs(store: Store, exp_id: int) -> int:
    with store.session() as s:
        return len(list(s.exec(select(Job).where(Job.experiment_id == exp_id))))


def pulls(bin_dir: Path) -> int:
    f = bin_dir / "log" / "calls"
    return sum(1 for line in f.read_text().splitlines() if line.endswith(" pull")) \
        if f.exists() else 0


def test_pull_in_the_background_once_per_image(site: tuple[Daemon, Store, Path, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, store, ctx, bin_dir = site
    monkeypatch.setenv("STANDIN_HOLD", "1")           # the pull waits for <log>/go
    a = experiment(daemon, store, ctx, "org/img:1")
    b = experiment(daemon, store, ctx, "org/img:1")
    plain = experiment(daemon, store, ctx, None)
    try:
        daemon.tick()
        assert (jobs(store, a), jobs(store, b)) == (0, 0)   # pulling: their trials wait
        assert jobs(store, plain) == 1                       # nobody else waits
        wait_until("the pull", lambda: any((bin_dir / "log").glob("pulling.*")) or None,
                   timeout=60)
        (bin_dir / "log" / "go").touch()
        assert daemon.puller is not None
        daemon.puller.wait(timeout=60)
        daemon.tick()
        assert (jobs(store, a), jobs(store, b)) == (1, 1)
        assert pulls(bin_dir) == 1
        assert list((daemon.cluster.containers.sif_cache or Path()).glob("*.sif"))
    finally:
        (bin_dir / "log" / "go").touch()


def test_failed_pull_fails_the_experiment_once(site: tuple[Daemon, Store, Path, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, store, ctx, bin_dir = site
    monkeypatch.setenv("STANDIN_FAIL", "1")
    exp_id = experiment(daemon, store, ctx, "org/missing:1")
    daemon.tick()
    assert daemon.puller is not None
    daemon.puller.wait(timeout=60)
    for _ in range(3):
        daemon.tick()
    assert jobs(store, exp_id) == 0
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None and exp.state == ExperimentState.ERROR
        assert "manifest unknown" in exp.message and "org/missing:1" in exp.message
        errors = list(s.exec(select(Event).where(Event.experiment_id == exp_id,
                                                 Event.kind == "error")))
    assert len(errors) == 1 and pulls(bin_dir) == 1


def test_a_one_pass_daemon_fails_a_failed_pull(site: tuple[Daemon, Store, Path, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``dethpc daemon tick`` (cron): the pass that started the pull waits for it and looks
    again, so the failure is recorded before the process (and its memory) ends."""
    daemon, store, ctx, bin_dir = site
    monkeypatch.setenv("STANDIN_FAIL", "1")
    exp_id = experiment(daemon, store, ctx, "docker.io/badhost/missing.image")
    daemon.tick_once()
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None and exp.state == ExperimentState.ERROR, exp
        assert "manifest unknown" in exp.message
    assert pulls(bin_dir) == 1 and jobs(store, exp_id) == 0


def test_missing_runtime_is_refused_at_submit(site: tuple[Daemon, Store, Path, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, store, ctx, bin_dir = site
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(SubmitError, match="'apptainer' is not on PATH"):
        experiment(daemon, store, ctx, "org/img:1")
    with store.session() as s:
        assert list(s.exec(select(Experiment))) == []
