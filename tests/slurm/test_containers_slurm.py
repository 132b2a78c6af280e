"""Issue 14, item 2: a container runtime that really runs here, on the dev cluster.

The runtime is Charliecloud (``ch-run``, Debian's charliecloud-runtime); the image is
built by the tests from Debian packages (``dethpc.devcluster.image``: mmdebstrap +
singularity/install-dethpc.sh: python, torch 2.13.0 CPU and dethpc inside the image,
nothing bind-mounted from the host's virtualenv), once per machine. Through the daemon
and the real sbatch, with ``containers.cleanenv`` (the default):

- the preemption trial runs inside the container (its python is the image's), is
  preempted in ``low``, requeued, and resumes from its checkpoint bit-identical to an
  uninterrupted run on the host;
- a 2-node ``dethpc.launch.torch_distributed`` launch (srun and torchrun modes) runs
  each rank inside the image, the config's bind_mounts in place;
- a missing image and a missing runtime are refused at submit, nothing recorded;
- a pool worker runs inside the image (the image's python runs ``dethpc.launch.worker``), its
  trial runs are forked warm from it, and a worker preempted mid-trial (``scancel
  --signal=USR2 --batch``, what ``--signal=B:`` sends) hands its lease back through the
  runtime, requeues, and the trial resumes from its checkpoint, warm again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.common.errors import SubmitError
from dethpc.store.models import Batch, BatchKind, Experiment
from tests.slurm.fixtures.harness import (
    DaemonHarness,
    assert_bit_identical,
    experiment_yaml,
    max_step,
    preempt,
    read_jsonl,
    start_reference,
)

SCRIPTS = Path(__file__).parent / "scripts"
BATCHES = 200
HPARAMS = {"step_time": 0.1}


@pytest.fixture(scope="module")
def image(slurm_cluster: Any) -> Path:
    """The dev cluster's image, built once per machine (minutes the first time)."""
    from dethpc.devcluster.image import ensure_image

    return ensure_image().path


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any, image: Path) -> Iterator[DaemonHarness]:
    from dethpc.devcluster.image import IMAGE_PYTHON

    h = DaemonHarness.create(tmp_path / "dethpc", containers={
        "runtime": "charliecloud", "python": IMAGE_PYTHON})
    yield h
    h.cancel_all_experiments()


def in_image(raw: dict[str, Any], image: Path) -> dict[str, Any]:
    return {**raw, "environment": {"image": str(image),
                                   "environment_variables": ["MY_FLAG=a b 'c'"]}}


def test_trial_in_the_container_is_preempted_and_resumes_bit_identical(
        harness: DaemonHarness, slurm_cluster: Any, tmp_path: Path, image: Path) -> None:
    from dethpc.devcluster.image import IMAGE_PYTHON

    reference = start_reference(tmp_path / "reference.pt", BATCHES, HPARAMS)
    exp = harness.submit(in_image(experiment_yaml(batches=BATCHES, pool="low",
                                                  hparams=HPARAMS), image))
    ref = harness.wait("the trial's job", lambda: harness.job_ref(exp))
    trial_dir = harness.trial_dir(exp)
    script = (trial_dir / "job.sbatch").read_text()
    assert "ch-run" in script and str(image) in script, script[-2000:]
    harness.wait("the trial to train past its second checkpoint",
                 lambda: max_step(trial_dir) >= 25, timeout=480)
    preemptors = preempt(ref, lambda: bool(read_jsonl(trial_dir / "runs.jsonl")))
    try:
        done = harness.wait_done(exp, timeout=400)
    finally:
        slurm_cluster.cancel(*preemptors)
    runs = read_jsonl(trial_dir / "runs.jsonl")
    print(f"container trial: {done.state}, runs {[(r['run'], r['preempted']) for r in runs]}")
    assert done.state == "COMPLETED", harness.story(exp)
    trial = harness.trial(exp)
    assert trial.restarts == 0 and trial.steps_completed == BATCHES, harness.story(exp)
    assert runs[0]["preempted"] and not runs[-1]["preempted"], runs
    assert {r["python"] for r in runs} == {IMAGE_PYTHON}, runs      # inside the image
    assert runs[1]["first_batch"] == runs[0]["batches_done"] + 1 \
        or runs[1]["first_batch"] <= runs[0]["batches_done"], runs
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert exits[0]["reason"] == "preempted" and exits[0]["signal"] == "USR2", exits
    assert_bit_identical(trial_dir / "final_weights.pt", tmp_path / "reference.pt", reference)


@pytest.mark.parametrize("mode", ["srun", "torchrun"])
def test_two_node_torch_distributed_inside_containers(harness: DaemonHarness, tmp_path: Path,
                                                      image: Path, mode: str) -> None:
    from dethpc.devcluster.image import IMAGE_PYTHON

    out = tmp_path / "out"
    out.mkdir()
    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy2(SCRIPTS / "ddp_train.py", context / "ddp_train.py")
    raw = in_image({
        "name": f"ddp-{mode}",
        "entrypoint": f"python3 -m dethpc.launch.torch_distributed --mode {mode} -- "
                      "python3 ddp_train.py /mnt/ddp.json",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": 2, "resource_pool": "debug"},
        "max_restarts": 0}, image)
    raw["bind_mounts"] = [{"host_path": str(out), "container_path": "/mnt"}]
    exp = harness.submit(raw, context=context)
    done = harness.wait_done(exp, timeout=300)
    log = "".join(p.read_text() for p in harness.trial_dir(exp).glob("slurm-*.out"))
    assert done.state == "COMPLETED", log[-3000:]
    got = json.loads((out / "ddp.json").read_text())
    print(f"ddp in containers ({mode}): world {got['world']}, placed {got['placed']}")
    assert got["world"] == 2 and got["allreduce"] == 1 + 2
    assert len({p["node"] for p in got["placed"]}) == 2, got["placed"]     # two nodes
    assert {p["python"] for p in got["placed"]} == {IMAGE_PYTHON}, got      # in the image


def test_missing_image_is_refused_at_submit(harness: DaemonHarness, tmp_path: Path) -> None:
    with pytest.raises(SubmitError, match="unpacked image directory"):
        harness.submit(in_image(experiment_yaml(batches=5), tmp_path / "no-such-image"))
    with harness.store.session() as s:
        assert list(s.exec(select(Experiment))) == []


def test_bind_destination_missing_in_the_image_is_refused_at_submit(
        harness: DaemonHarness, tmp_path: Path, image: Path) -> None:
    raw = in_image(experiment_yaml(batches=5), image)
    raw["bind_mounts"] = [{"host_path": str(tmp_path), "container_path": "/datasets"}]
    with pytest.raises(SubmitError, match="no directory for the bind destination.*/datasets"):
        harness.submit(raw)


def test_missing_runtime_is_refused_at_submit(harness: DaemonHarness, image: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SubmitError, match="'ch-run' is not on PATH"):
        harness.submit(in_image(experiment_yaml(batches=5), image))


def test_digits_example_runs_in_the_container(harness: DaemonHarness, image: Path) -> None:
    """examples/digits (const.yaml, unchanged but for the image) trains inside the image:
    the example's digits.npz, numpy and torch from the image, validation reported,
    COMPLETED."""
    import yaml

    from dethpc.config import load_experiment_config
    from dethpc.control.experiments import create_experiment

    digits = Path(__file__).resolve().parents[2] / "examples" / "digits"
    raw = yaml.safe_load((digits / "const.yaml").read_text())
    raw["environment"] = {"image": str(image)}
    path = harness.root / "digits.yaml"
    path.write_text(yaml.safe_dump(raw))
    exp = create_experiment(harness.store, harness.cluster, load_experiment_config(path, []),
                            digits, harness.backend)
    done = harness.wait_done(exp, timeout=400)
    trial = harness.trial(exp)
    script = (harness.trial_dir(exp) / "job.sbatch").read_text()
    print(f"digits in the container: {done.state}, {trial.steps_completed} batches, "
          f"best validation_loss {trial.best_validation}")
    assert done.state == "COMPLETED", harness.events(exp)
    assert "ch-run" in script and trial.steps_completed == 300
    assert trial.best_validation is not None and trial.best_validation < 1.0


def test_pool_worker_runs_in_the_image_and_forks_its_trials_warm(
        harness: DaemonHarness, image: Path) -> None:
    from dethpc.devcluster.image import IMAGE_PYTHON

    raw = in_image(experiment_yaml(batches=120, pool="low", hparams={"step_time": 0.05}),
                   image)
    raw["slurm"] = {"workers": {"count": 1, "preload": ["torch", "dethpc.core"],
                                "heartbeat_s": 1}}
    exp = harness.submit(raw)

    def workers() -> str | None:
        with harness.store.session() as s:
            b = s.exec(select(Batch).where(Batch.experiment_id == exp,
                                           Batch.kind == BatchKind.WORKERS)).first()
            return b.array_job_id if b is not None and b.array_job_id else None

    job = harness.wait("the pool's worker array", workers)
    try:
        trial_dir = harness.trial_dir(exp)
        harness.wait("the trial to train past its second checkpoint",
                     lambda: max_step(trial_dir) >= 25, timeout=300)
        subprocess.run(["scancel", "--signal=USR2", "--batch", f"{job}_0"], check=True,
                       capture_output=True, timeout=60)
        done = harness.wait_done(exp, timeout=300)
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
    scripts = list((Path(harness.experiment(exp).run_dir) / "pool").glob("workers-*.sbatch"))
    script = scripts[0].read_text()
    runs = read_jsonl(trial_dir / "runs.jsonl")
    print(f"pool in the image: {done.state}, runs "
          f"{[(r['preempted'], r['batches_done'], r['process']) for r in runs]}")
    assert done.state == "COMPLETED", harness.events(exp)
    assert "ch-run" in script and f"{IMAGE_PYTHON} -m dethpc.launch.worker" in script, script
    assert len(runs) == 2 and runs[0]["preempted"] and not runs[1]["preempted"], runs
    for r in runs:   # the image's python, forked from the worker: a warm start
        assert r["python"] == IMAGE_PYTHON, r
        assert r["process"] == [IMAGE_PYTHON, "-m", "dethpc.launch.worker"], r
    assert runs[1]["first_batch"] <= runs[0]["batches_done"] + 1, runs
    assert harness.trial(exp).steps_completed == 120
