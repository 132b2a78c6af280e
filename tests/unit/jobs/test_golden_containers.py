"""Golden files for the container matrix (issue 14): runtime {apptainer, singularity} x
pool {GPU, CPU} x launch {plain entrypoint, ``dethpc.launch.torch_distributed`` in srun
mode, in torchrun mode} x cleanenv {on, off}: the trial script dethpc submits and, for
the launchers, the command the launcher runs on a 2-node allocation (each srun task
started in the image). The argv is checked, not that Apptainer runs it (it cannot be
installed here: docs/containers.md says "argv-tested"). Regenerate after an intended
change with ``DETHPC_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from dethpc.common.version import __version__
from dethpc.config import parse_experiment_config
from dethpc.config.cluster import parse_cluster_config
from dethpc.jobs.jobscript import trial_script
from dethpc.launch import torch_distributed as td

GOLDEN = Path(__file__).parent / "golden" / "containers"
RUN = Path("/shared/runs/7")
PYTHON = "/shared/venv/bin/python"
BATCH = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
         "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0",
         "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_CPUS_PER_TASK": "2"}
ENTRYPOINTS = {
    "plain": "python3 train.py --epochs 2",
    "srun": "python3 -m dethpc.launch.torch_distributed -- python3 train.py --epochs 2",
    "torchrun": "python3 -m dethpc.launch.torch_distributed --mode torchrun -- train.py",
}
CASES = [(runtime, pool, launch, cleanenv)
         for runtime in ("apptainer", "singularity") for pool in ("gpu", "cpu")
         for launch in ENTRYPOINTS for cleanenv in (True, False)]


def cluster(runtime: str, cleanenv: bool):  # noqa: ANN201 - ClusterConfig
    return parse_cluster_config({
        "backend": "slurm", "runs_root": "/shared/runs", "default_pool": "gpu",
        "pools": {
            "gpu": {"partition": "gpu", "slots_per_node": 2, "gres": "gpu", "gpu_type": "a100",
                    "cpus_per_slot": 2, "mem_per_slot": "8G", "signal": "USR2",
                    "signal_grace_s": 60},
            "cpu": {"partition": "cpu", "slots_per_node": 2, "cpus_per_slot": 2,
                    "mem_per_slot": "2G"}},
        "containers": {"runtime": runtime, "sif_cache": "/shared/sif",
                       "binds": ["/shared/datasets:/datasets:ro"], "cleanenv": cleanenv,
                       "pass_env": ["WANDB_*"], "python": "/opt/conda/bin/python"},
        "python": PYTHON}, "golden cluster")


def render(runtime: str, pool: str, launch: str, cleanenv: bool) -> str:
    cfg = parse_experiment_config({
        "name": "golden", "entrypoint": ENTRYPOINTS[launch],
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "resources": {"slots_per_trial": 4, "resource_pool": pool},
        "environment": {"image": {"cpu": "pytorch/pytorch:2.3.0-cpu",
                                  "cuda": "nvcr.io/nvidia/pytorch:24.01-py3"},
                        "environment_variables": ["NCCL_DEBUG=INFO", "MY_FLAG=a b"]},
        "bind_mounts": [{"host_path": "/scratch/me", "container_path": "/scratch"}]})
    cl = cluster(runtime, cleanenv)
    text = trial_script(cfg, cl, backend="slurm", python=PYTHON, run_dir=RUN, exp_id=7,
                        trial_id=3).replace(__version__, "<version>")
    if launch == "plain":
        return text
    exports = dict(line[len("export "):].split("=", 1) for line in text.splitlines()
                   if line.startswith("export DETHPC_CONTAINER_"))
    env = {**BATCH, **{k: shlex.split(v)[0] for k, v in exports.items()}}
    args = ENTRYPOINTS[launch].split(" ", 3)[3].split()
    plan = td.plan(args, env, lambda _: "/usr/bin/srun", PYTHON)
    argv = list(plan.argv) if plan.argv else []
    return text + "\n# ---- the launcher's command on a 2-node allocation (batch shell):\n" \
        + json.dumps(argv, indent=1) + "\n"


@pytest.mark.parametrize(("runtime", "pool", "launch", "cleanenv"), CASES)
def test_container_matrix_matches_golden(runtime: str, pool: str, launch: str,
                                         cleanenv: bool) -> None:
    text = render(runtime, pool, launch, cleanenv)
    path = GOLDEN / f"{runtime}-{pool}-{launch}-{'clean' if cleanenv else 'hostenv'}.sbatch"
    if os.environ.get("DETHPC_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} changed; if intended, regenerate with DETHPC_UPDATE_GOLDEN=1 and review")
    sif = "nvcr.io_nvidia_pytorch_24.01-py3" if pool == "gpu" else "pytorch_pytorch_2.3.0-cpu"
    assert sif in text
    assert ("--nv" in text) is (pool == "gpu")
    assert ("--cleanenv" in text) is cleanenv
    if launch != "plain":
        tail = json.loads(text.split("(batch shell):\n", 1)[1])
        runtime_at = tail.index(runtime)
        assert tail[0] == "srun" and tail[runtime_at + 1] == "exec"   # srun ... <rt> exec
        inner = tail[tail.index(next(a for a in tail if a.endswith(".sif"))) + 1:]
        assert inner[0] == "/opt/conda/bin/python"                     # the image's python
        want = "dethpc.launch._worker" if launch == "srun" else "dethpc.launch.torch_distributed"
        assert want in inner
