"""sbatch (or the ``scontrol show config`` before it) failing because slurmctld does
not answer (restarting) is a wait, not the experiment's failure: the batch recorded
before sbatch stays SUBMITTING for the next tick's adoption (found by name, or
submitted again); any other sbatch error still fails the experiment. Real SQLite, the
local backend with its submit answering as Slurm's sbatch does when the controller is
down."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sqlmodel import select

from dethpc.backends.base import JobRequest
from dethpc.backends.local import LocalBackend
from dethpc.common.errors import CommandError, SubmitError
from dethpc.config import load_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon import Daemon, slurm_unreachable
from dethpc.control.experiments import create_experiment
from dethpc.store import Store
from dethpc.store.models import Batch, BatchState, Event, Experiment, ExperimentState, Trial

TOY = Path(__file__).resolve().parents[2] / "fixtures" / "toy"
#: what sbatch prints while slurmctld restarts (measured on the dev cluster)
DOWN = ("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)")


class RefusingBackend(LocalBackend):
    """The local backend whose every submit fails with ``error``."""

    def __init__(self, spool: Path, error: Exception) -> None:
        super().__init__(spool)
        self.error = error

    def submit(self, request: JobRequest) -> list[str]:
        raise self.error


def start(tmp_path: Path, error: Exception) -> tuple[Store, Daemon, int]:
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "t", "entrypoint": "python3 train.py", "hyperparameters": {"x": 1.0},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 3}}}))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cluster = ClusterConfig(runs_root=tmp_path / "runs",
                            pools={"default": ResourcePool(name="default")})
    backend = RefusingBackend(tmp_path / "spool", error)
    exp_id = create_experiment(store, cluster, load_experiment_config(cfg_path), TOY,
                               LocalBackend(tmp_path / "spool"))
    return store, Daemon(store, cluster, backend), exp_id


#: the end of what ``scontrol show config`` printed on stdout, exit 1, while slurmctld
#: restarted (the dev cluster, stop 27's fresh run: the multi-fault test's experiment
#: was failed by it, "submission failed", before this was read as a wait)
SHOW_CONFIG_DOWN = ("SLURM_VERSION           = 22.05.8\nWaitTime                = 0 sec\n\n"
                    "Slurmctld(primary) at vm is DOWN\n"
                    "*****************************************\n"
                    "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
                    "*****************************************\n")


@pytest.mark.parametrize("error", [
    CommandError(["sbatch"], 1, "", DOWN),
    CommandError(["scontrol", "show", "config"], 1, SHOW_CONFIG_DOWN, ""),
    CommandError(["sbatch"], 1, "", "sbatch: error: Socket timed out on send/recv operation"),
])
def test_unreachable_controller_leaves_the_batch_for_adoption(tmp_path, error) -> None:
    store, daemon, exp_id = start(tmp_path, error)
    assert slurm_unreachable(error)
    stats = daemon.tick()
    assert stats.errors and stats.submitted == 0
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None and exp.state == ExperimentState.ACTIVE
        (batch,) = s.exec(select(Batch)).all()
        assert batch.state == BatchState.SUBMITTING
        (trial,) = s.exec(select(Trial)).all()
        assert not trial.state.is_terminal
        warnings = [e.message for e in s.exec(select(Event).where(Event.kind == "warning"))]
        assert any("Slurm did not answer" in w for w in warnings), warnings


@pytest.mark.parametrize("error", [
    CommandError(["sbatch"], 1, "", "sbatch: error: Invalid generic resource (gres) "
                                    "specification"),
    SubmitError("sbatch refused the job: invalid partition"),
])
def test_other_sbatch_errors_still_fail_the_experiment(tmp_path, error) -> None:
    store, daemon, exp_id = start(tmp_path, error)
    assert not slurm_unreachable(error)
    daemon.tick()
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        # refused before any job reached Slurm: ERROR at once
        assert exp is not None and exp.state == ExperimentState.ERROR
