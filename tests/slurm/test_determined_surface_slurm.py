"""Every name of Determined's that dethpc serves is called in a job on the dev cluster
(issue 31, item 4), by programs written as for Determined 0.38 (examples/determined_compat,
only the import changed), and each program checks what it got against what Determined
gives.

The programs run through the daemon with ``tests/fixtures/surface_trace`` on their
``PYTHONPATH``: every process of every job records the dethpc functions it ran and the
methods of dethpc classes (a ``PyTorchTrial`` subclass too). ``tests.surface_coverage``
then derives the list to cover from the inventory of Determined's source
(tests/unit/data/determined/surface-0.38.1.json) and its classification: a served or
served-differently name that no job ran fails this test by name. ``EXEMPT`` lists the
few that cannot run here, with the reason.

- ``served.yaml`` on 2 slots (Determined's torch launcher): metadata, checkpoint delete,
  alert, TensorBoard path, node-local collectives, ``DET_EXPERIMENT_CONFIG``;
- ``invalid_hp.yaml``, ``early_stop.yaml``: ``det.InvalidHP``, ``report_early_exit``;
- ``surface.yaml`` under the torch and the DeepSpeed launchers: the rest of the Core
  API, on-cluster and (a child process without the job's variables) off-cluster;
- ``trial.yaml``: a ``PyTorchTrial`` through the Trainer API (``python3 trial.py``) and
  through ``--trial`` under the torch and the DeepSpeed launchers;
- ``extras.yaml``: callbacks, custom reducers, ``evaluate_full_dataset``, ``use_amp``,
  samplers and checkpoint loading (Trainer runs off-cluster in a child of the job).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.surfaces import views
from tests import surface_coverage as coverage
from tests.slurm.fixtures.harness import DaemonHarness, job_log

REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "examples" / "determined_compat"
TRACER = REPO / "tests" / "fixtures" / "surface_trace"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None and os.environ.get("CI") != "true",
    reason="deepspeed not installed (scripts/setup.sh --tests installs it; in CI a missing "
           "deepspeed fails this test)")

#: (config, overrides) of each program run; the entrypoints are Determined's
RUNS: list[tuple[str, dict[str, Any]]] = [
    ("served.yaml", {"entrypoint": "python3 -m determined.launch.torch_distributed "
                                   "python3 served.py",
                     "resources": {"slots_per_trial": 2}}),
    ("invalid_hp.yaml", {}),
    ("early_stop.yaml", {}),
    ("surface.yaml", {}),
    ("surface.yaml", {"entrypoint": "python3 -m determined.launch.deepspeed python3 "
                                    "surface.py --launcher deepspeed"}),
    ("trial.yaml", {}),
    ("trial.yaml", {"entrypoint": "python3 -m determined.launch.deepspeed --trial "
                                  "trial:CompatTrial"}),
    ("trial.yaml", {"entrypoint": "python3 trial.py", "resources": {"slots_per_trial": 1}}),
    ("extras.yaml", {}),
    ("ds_trial.yaml", {}),
    ("ds_trial.yaml", {"entrypoint": "python3 ds_trial.py", "resources": {"slots_per_trial": 1}}),
]


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=2)
    yield h
    h.cancel_all_experiments()


def config(name: str, changes: dict[str, Any], trace: Path) -> dict[str, Any]:
    raw = yaml.safe_load((COMPAT / name).read_text())
    raw.update(changes)
    path = ":".join(p for p in (str(TRACER), os.environ.get("PYTHONPATH", "")) if p)
    raw["environment"] = {"environment_variables": [f"DETHPC_SURFACE_TRACE={trace}",
                                                    f"PYTHONPATH={path}"]}
    return raw


def logs(h: DaemonHarness, exp: int) -> str:
    run_dir = Path(h.experiment(exp).run_dir)
    return "".join(job_log(d) for d in sorted((run_dir / "trials").iterdir()))


def test_every_served_name_runs_in_a_job(harness: DaemonHarness, tmp_path: Path) -> None:
    h = harness
    trace = tmp_path / "trace"
    trace.mkdir()
    trace.chmod(0o777)    # the jobs may run as another user
    runs = [config(name, changes, trace) for name, changes in RUNS]
    exps = [h.submit(raw, context=COMPAT) for raw in runs]
    h.wait(f"experiments {exps} to end", lambda: all(
        h.experiment(e).state in ("COMPLETED", "ERROR", "CANCELED") for e in exps),
        timeout=600)
    for e in exps:
        assert h.experiment(e).state == "COMPLETED", (e, h.events(e), logs(h, e)[-4000:])

    # what the programs saw (each also checked it itself and would have failed)
    for exp, (name, changes) in zip(exps, RUNS, strict=True):
        if name == "surface.yaml":
            (trial,) = views.describe_experiment(h.store, exp)["trials"]
            report = views.trial_detail(h.store, trial["id"])["metadata"]["surface"]
            assert report["distributed"]["size"] == 2, report["distributed"]
            assert report["searcher"]["lengths"] == [4]
            assert report["reports"]["best"] == pytest.approx(0.25)   # 1 / max_length
            assert report["off_cluster"]["kinds"]["train"] == "DummyTrainContext"
            assert report["cluster"]["rendezvous"]["slots"] == [2]
            assert report["helpers"]["units"] == ["BATCHES", "EPOCHS", "RECORDS"]
        if name == "trial.yaml":
            seen = json.loads((h.trial_dir(exp) / "tensorboard" / "compat-trial.json")
                              .read_text())
            per_slot = 8 // changes.get("resources", {}).get("slots_per_trial", 2)
            assert seen["loader"]["batch_size"] == per_slot, seen
            assert seen["units"] == {"batch": [4, True], "epoch": [2, False]}

    # every served name ran in one of the jobs
    sources = [p.read_text() for p in sorted(COMPAT.glob("*.py"))]
    cov = coverage.Coverage(coverage.read_traces(trace), coverage.names_in(sources),
                            [raw["entrypoint"] for raw in runs])
    wanted = [e for e in coverage.required(coverage.load_inventory())
              if e["key"] not in coverage.EXEMPT]
    assert len(wanted) > 250
    assert cov.missing(wanted) == []
