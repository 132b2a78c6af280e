"""Golden files: the exact trial, array and heterogeneous job scripts dethpc submits.

A change to a directive, the template or the environment contract shows up here as a
diff to review (as submitit's ``test_make_sbatch_string`` does). After an intended
change, regenerate with ``DETHPC_UPDATE_GOLDEN=1 pytest tests/unit/jobs/test_golden_scripts.py``
and read the diff before committing it. The version line is normalised.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dethpc.common.sbatch_options import sbatch_conflicts
from dethpc.common.version import __version__
from dethpc.config import parse_experiment_config
from dethpc.config.cluster import parse_cluster_config
from dethpc.jobs.jobscript import array_script, trial_script

GOLDEN = Path(__file__).parent / "golden"
RUN = Path("/shared/runs/exp-7")
PYTHON = "/shared/venv/bin/python"

CLUSTER = parse_cluster_config({
    "backend": "slurm", "runs_root": "/shared/runs", "default_pool": "gpu",
    "pools": {
        "gpu": {"partition": "low", "qos": "normal", "account": "ml-team",
                "slots_per_node": 2, "gres": "gpu", "gpu_type": "a100",
                "cpus_per_slot": 4, "mem_per_slot": "3G", "preemptible": True,
                "default_time": "04:00:00", "signal": "USR2", "signal_grace_s": 30,
                "socket_ifname": "lo", "sbatch_args": ["--exclude=n4", "--mail-type=FAIL"]},
        "cpu": {"partition": "debug", "cpus_per_slot": 2, "mem_per_slot": "1G",
                "default_time": "00:30:00"},
    }}, "golden cluster")


def experiment(**extra: object):
    return parse_experiment_config({
        "name": "golden", "entrypoint": "python3 train.py --lr 0.1",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "resources": {"slots_per_trial": 4},
        "environment": {"environment_variables": ["NCCL_DEBUG=INFO", "QUOTE=it's"]},
        "slurm": {"sbatch_args": ["--mem-per-gpu=4G", "!--mail-type"]},
        **extra})


def scripts() -> dict[str, str]:
    het = experiment(resources={"slots_per_trial": 2}, slurm={"components": [
        {"name": "server", "entrypoint": "python3 server.py", "resource_pool": "cpu",
         "tasks_per_node": 2}]})
    return {
        "trial.sbatch": trial_script(experiment(), CLUSTER, backend="slurm", python=PYTHON,
                                     run_dir=RUN, exp_id=7, trial_id=3),
        "array.sbatch": array_script(experiment(), CLUSTER, run_dir=RUN, exp_id=7,
                                     batch_id=2, tag="a1b2c3",
                                     tasks=[(i, RUN / "trials" / str(t) / "job.sbatch")
                                            for i, t in enumerate((3, 4, 5))]),
        "hetjob.sbatch": trial_script(het, CLUSTER, backend="slurm", python=PYTHON,
                                      run_dir=RUN, exp_id=7, trial_id=4),
    }


@pytest.mark.parametrize("name", ["trial.sbatch", "array.sbatch", "hetjob.sbatch"])
def test_script_matches_golden_file(name: str) -> None:
    text = scripts()[name].replace(__version__, "<version>")
    path = GOLDEN / name
    if os.environ.get("DETHPC_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} changed; if intended, regenerate with DETHPC_UPDATE_GOLDEN=1 and review the diff")
    directives = [line.split(None, 1)[1] for line in text.splitlines()
                  if line.startswith("#SBATCH ")]
    assert sbatch_conflicts(directives) == []
