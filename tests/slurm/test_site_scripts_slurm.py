"""Scripts users already have, unchanged, under ``sbatch`` and under ``dethpc sbatch``
(issue 32 item 4): the kinds of script sites publish, each submitted both ways from
its own copy, and what Slurm shows of the two jobs compared -- job name, output files
by the script's own ``--output`` pattern, their text, exit codes, requeues -- plus
dethpc's tracking of its own.

- multi-node torch.distributed with ``MASTER_ADDR`` from ``scontrol show hostnames``;
- a PyTorch Lightning script with ``SLURMEnvironment(auto_requeue=True)`` and
  ``#SBATCH --signal=SIGUSR1@90``: the warning signal (sent here with ``scancel
  --signal=USR1``, the path Slurm's own ``--signal`` takes: to the steps, not the batch
  shell) makes Lightning save its hpc checkpoint and ``scontrol requeue`` the job; the
  second run resumes from it;
- an MPI hello compiled with ``mpicc`` and started with ``srun --mpi=pmix``;
- an array job with ``%A_%a`` output names whose last task fails with code 3.

The scripts are tests/slurm/fixtures/site_scripts/, written as site guides write them.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.surfaces.views import trial_detail
from tests.conftest import in_ci
from tests.slurm.fixtures.harness import read_jsonl, wait_until
from tests.slurm.fixtures.sbatch_kit import (
    dethpc_sbatch,
    env_for,
    experiment_of_job,
    sbatch_home,
    tick_until,
)

SITE = Path(__file__).parent / "fixtures" / "site_scripts"
#: Slurm's words for a job (or array task) that is over
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon]]:
    with sbatch_home(tmp_path) as made:
        yield made


def workdir(tmp_path: Path, how: str, names: list[str]) -> Path:
    work = tmp_path / how
    work.mkdir()
    for name in names:
        shutil.copy2(SITE / name, work / name)
    return work


def submitted(stdout: str) -> str:
    m = re.fullmatch(r"Submitted batch job (\d+)\n", stdout)
    assert m, stdout
    return m.group(1)


def both(root: Path, tmp_path: Path, names: list[str], script: str, job_name: str,
         prepare: Callable[[Path], None] | None = None,
         **env: str) -> tuple[str, str, Path, Path]:
    """``sbatch script`` and ``dethpc sbatch script``, each from its own copy of
    ``names``, as the user types them: (plain job id, ours, plain dir, our dir). Both
    jobs carry the script's ``job_name`` (Slurm's word, read while they are queued).
    ``env``: the user's environment beyond the shell's (a site's module, say)."""
    dirs = [workdir(tmp_path, how, names) for how in ("plain", "ours")]
    for d in dirs:
        if prepare is not None:
            prepare(d)
    plain = subprocess.run(["sbatch", script], cwd=dirs[0], env=env_for(root, **env),
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    ours = dethpc_sbatch(root, dirs[1], script, **env)
    assert ours.returncode == 0, ours.stderr
    a, b = submitted(plain.stdout), submitted(ours.stdout)
    assert [job_name_of(j) for j in (a, b)] == [job_name, job_name]
    return a, b, dirs[0], dirs[1]


def job_name_of(job: str) -> str:
    """Slurm's name of ``job`` from the controller (an ended job stays listed for
    MinJobAge, 300 s here): accounting can lag a job that just ended."""
    names = subprocess.run(["squeue", "-h", "--states=all", "-j", job, "-o", "%j"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    assert len(set(names.split())) == 1, names
    return names.split()[0]


def runs(job: str) -> list[dict[str, str]]:
    """Every run of ``job`` (each array task's too) as accounting has it, oldest first:
    ``sacct -D`` keeps a requeued job's earlier runs; ``-S`` an hour back leaves out a
    job of an earlier dev cluster that had the same id."""
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-D", "-S", "now-1hours", "-j", job,
                          "-o", "JobID,State,ExitCode"],
                         capture_output=True, text=True, check=False, timeout=60).stdout
    rows = [dict(zip(("id", "state", "exit"), line.split("|"), strict=True))
            for line in out.splitlines() if line.strip()]
    for r in rows:
        r["state"] = r["state"].split()[0]
    return rows


def ended(job: str, tasks: int = 1) -> list[dict[str, str]]:
    """Wait until accounting has ``tasks`` ended tasks of ``job`` and none live."""
    def over() -> list[dict[str, str]] | None:
        seen = runs(job)
        last = {r["id"]: r for r in seen}       # a task's latest run
        done = len(last) == tasks and all(r["state"] in ENDED for r in last.values())
        return seen if done else None
    return wait_until(f"job {job} to end in accounting", over, timeout=300)


def same_shape(rows: list[dict[str, str]], job: str) -> list[tuple[str, str, str]]:
    """Runs with the job id written as JOB: the two jobs' runs compare equal."""
    return [(r["id"].replace(job, "JOB"), r["state"], r["exit"]) for r in rows]


def tick(daemon: Daemon) -> None:
    daemon.tick()


def text_of(path: Path, job: str) -> str:
    return path.read_text().replace(job, "JOB")


# ------------------------------------------------------------------ the proofs
def test_torch_distributed_with_master_addr_from_scontrol(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root, store, daemon = home
    a, b, da, db = both(root, tmp_path, ["ddp_master_addr.sh", "ddp_allreduce.py"],
                        "ddp_master_addr.sh", "ddp-allreduce")
    d = tick_until(store, daemon, experiment_of_job(store, b), 240)
    ra, rb = ended(a), ended(b)
    assert same_shape(ra, a) == same_shape(rb, b) == [("JOB", "COMPLETED", "0:0")], (ra, rb)
    outs = [(da / f"ddp-allreduce-{a}.out"), (db / f"ddp-allreduce-{b}.out")]
    texts = []
    for out in outs:
        lines = sorted(re.sub(r" on [^:]+:", ":", line) for line in out.read_text().splitlines()
                       if line.startswith("rank "))
        texts.append(lines)
        assert re.search(r"^MASTER_ADDR=\S+ WORLD_SIZE=4$", out.read_text(), re.M), out
    assert texts[0] == texts[1] == [f"rank {r} of 4: sum 10" for r in range(4)], texts
    assert d["state"] == "COMPLETED" and [t["state"] for t in d["trials"]] == ["COMPLETED"], d


@pytest.mark.skipif(importlib.util.find_spec("pytorch_lightning") is None and not in_ci(),
                    reason="pytorch-lightning not installed (scripts/setup.sh --tests "
                           "installs it; in CI a missing one fails this test)")
def test_lightning_auto_requeue_resumes_under_both(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    # 0.5 s a batch: after epoch 1, 16 s of training are left for the signal to land in
    a, b, da, db = both(root, tmp_path, ["lightning_requeue.sh", "lightning_train.py"],
                        "lightning_requeue.sh", "lit-requeue", TRAIN_STEP_S="0.5")
    exp_id = experiment_of_job(store, b)
    outs = {a: da / f"lit-requeue-{a}.out", b: db / f"lit-requeue-{b}.out"}
    signalled: set[str] = set()

    def signal_after_epoch_1() -> bool:
        """Slurm's --signal=SIGUSR1@90 before the time limit, sent to each job (to its
        steps) as soon as it finished epoch 1: both jobs are watched at once."""
        for job, out in outs.items():
            if job not in signalled and out.exists() and "epoch 1 done" in out.read_text():
                subprocess.run(["scancel", "--signal=USR1", job], check=True, timeout=30)
                signalled.add(job)
        return len(signalled) == len(outs)

    wait_until("both jobs to finish epoch 1", signal_after_epoch_1, timeout=180,
               between=lambda: tick(daemon))
    d = tick_until(store, daemon, exp_id, 300)
    ra, rb = ended(a), ended(b)
    # Slurm saw the same: Lightning's own requeue, then the resumed run completed
    assert same_shape(ra, a) == same_shape(rb, b), (ra, rb)
    assert [r["state"] for r in ra] == ["REQUEUED", "COMPLETED"], ra
    for job, out in outs.items():
        # the output file holds the requeued run's (Slurm truncates it, both ways)
        text = out.read_text()
        assert list((out.parent).glob("hpc_ckpt_*.ckpt")), list(out.parent.iterdir())
        assert "run 1 starts" in text, text                    # the requeued run
        assert "Restored all states from the checkpoint" in text, text
        first = re.search(r"^epoch (\d+) done", text, re.M)
        assert first and int(first.group(1)) >= 2, text       # resumed, epochs 0-1 not redone
        assert "finished: 6 epochs, 48 steps" in text, text
    # dethpc tracked it: one trial, two runs, Lightning's requeue not counted
    assert d["state"] == "COMPLETED", d
    (trial,) = d["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0, trial
    (exits,) = (root / "runs").glob("**/exits.jsonl")
    assert [(e["reason"], e["restart"]) for e in read_jsonl(exits)] == [
        ("requeued", 0), ("completed", 1)], exits.read_text()


@pytest.mark.skipif(shutil.which("mpicc") is None and not in_ci(), reason="no mpicc (the "
                    "dev cluster's packages install openmpi; in CI its absence fails)")
def test_mpi_hello_with_srun_pmix(home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home

    def build(work: Path) -> None:          # as a user builds it on the login node
        subprocess.run(["mpicc", "-o", "mpi_hello", "mpi_hello.c"], cwd=work, check=True,
                       timeout=120)

    # the dev cluster's nodes share one host, whose shared-memory transport OpenMPI
    # would set up twice: TCP between ranks, as a site's module would say for it
    a, b, da, db = both(root, tmp_path, ["mpi_hello.sh", "mpi_hello.c"], "mpi_hello.sh",
                        "mpi-hello", prepare=build, OMPI_MCA_btl="self,tcp")
    d = tick_until(store, daemon, experiment_of_job(store, b), 240)
    ra, rb = ended(a), ended(b)
    assert same_shape(ra, a) == same_shape(rb, b) == [("JOB", "COMPLETED", "0:0")], (ra, rb)
    texts = [sorted(text_of(p, j).splitlines()) for p, j in
             ((da / f"mpi_hello_{a}.out", a), (db / f"mpi_hello_{b}.out", b))]
    assert texts[0] == texts[1] == [f"hello from rank {r} of 4" for r in range(4)], texts
    assert d["state"] == "COMPLETED", d


def test_array_job_with_per_task_output_names(home: tuple[Path, Store, Daemon],
                                              tmp_path: Path) -> None:
    root, store, daemon = home
    a, b, da, db = both(root, tmp_path, ["array_tasks.sh"], "array_tasks.sh", "array-tasks")
    d = tick_until(store, daemon, experiment_of_job(store, b), 240)
    ra, rb = ended(a, tasks=3), ended(b, tasks=3)
    assert sorted(same_shape(ra, a)) == sorted(same_shape(rb, b)) == [
        ("JOB_0", "COMPLETED", "0:0"), ("JOB_1", "COMPLETED", "0:0"),
        ("JOB_2", "FAILED", "3:0")], (ra, rb)
    for task in range(3):
        plain, ours = da / f"array_{a}_{task}.out", db / f"array_{b}_{task}.out"
        # the same text; a run that failed gets one line of dethpc's after the script's
        # (docs/existing-scripts.md, "What it never changes")
        extra = "dethpc: array_tasks.sh exited with code 3 (error)\n" if task == 2 else ""
        assert text_of(plain, a) + extra == text_of(ours, b), (plain.read_text(),
                                                               ours.read_text())
    assert "input 2 is bad" in (db / f"array_{b}_2.out").read_text()
    # dethpc: one trial per task, the failed one with its exit code
    states = sorted((t["state"], t["exit_reason"], t["id"]) for t in d["trials"])
    assert [st for st, _, _ in states] == ["COMPLETED", "COMPLETED", "ERROR"], states
    assert "exit code 3" in states[-1][1], states
    failed = trial_detail(store, states[-1][2])
    assert [j["exit_code"] for j in failed["jobs"]] == [3], failed["jobs"]
