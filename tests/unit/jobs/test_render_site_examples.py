"""The example site configs we ship render scripts that sbatch's own rules accept.

sbatch refuses a script whose directives combine ``--mem``, ``--mem-per-cpu`` and
``--mem-per-gpu`` ("mutually exclusive", measured on 22.05), and a script that gives
one option twice takes the last value silently. Every pool of every example cluster
config is rendered with every example experiment config, as a trial script and as an
array script, and must pass ``dethpc.common.sbatch_options.sbatch_conflicts``. The Slurm tier asks
``sbatch --test-only`` about ``examples/cluster/slurm-devcluster.yaml``, the dev-cluster
copy of the site example (tests/slurm/test_submit_verdict_slurm.py).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from dethpc.common.sbatch_options import sbatch_conflicts
from dethpc.config import load_cluster_config, load_experiment_config
from dethpc.jobs.jobscript import array_script, trial_script
from dethpc.jobs.render import make_env

ROOT = Path(__file__).resolve().parents[3]
CLUSTERS = sorted((ROOT / "examples" / "cluster").glob("*.yaml"))
EXPERIMENTS = sorted((ROOT / "examples" / "digits").glob("*.yaml"))
MEMORY = {"--mem", "--mem-per-cpu", "--mem-per-gpu"}
#: options sbatch may legitimately see more than once
REPEATABLE = {"--export", "--dependency", "hetjob"}


def directives(script: str) -> list[str]:
    return [m.group(1).split("=", 1)[0]
            for m in re.finditer(r"^#SBATCH\s+(\S+)", script, re.MULTILINE)]


def cases():
    for cluster in CLUSTERS:
        pools = load_cluster_config(cluster).pools
        for pool in sorted(pools):
            for exp in EXPERIMENTS:
                yield pytest.param(cluster, pool, exp, id=f"{cluster.stem}-{pool}-{exp.stem}")


@pytest.mark.parametrize("cluster_path,pool,exp_path", list(cases()))
def test_example_site_configs_render_one_memory_option_and_no_duplicates(
        cluster_path, pool, exp_path, tmp_path):
    cluster = load_cluster_config(cluster_path)
    cluster = replace(cluster, runs_root=str(tmp_path / "runs"))
    cfg = load_experiment_config(exp_path)
    cfg = replace(cfg, resources=replace(cfg.resources, resource_pool=pool))
    jenv = make_env()
    trial = trial_script(cfg, cluster, backend=cluster.backend, python="python3",
                         run_dir=tmp_path / "run", exp_id=1, trial_id=1, jenv=jenv)
    array = array_script(cfg, cluster, run_dir=tmp_path / "run", exp_id=1, batch_id=1,
                         tasks=[(0, tmp_path / "run" / "trials" / "1" / "job.sbatch")],
                         jenv=jenv)
    for script in (trial, array):
        opts = directives(script)
        assert len(MEMORY & set(opts)) <= 1, opts
        dup = {o: n for o, n in Counter(opts).items() if n > 1 and o not in REPEATABLE}
        assert not dup, dup
        # the checks dethpc.jobs.directives applies (the Slurm tier asks sbatch --test-only
        # the same of examples/cluster/slurm-devcluster.yaml)
        lines = [m.group(1) for m in re.finditer(r"^#SBATCH\s+(.+)$", script, re.MULTILINE)]
        assert sbatch_conflicts(lines) == [], lines
    if cluster.pools[pool].mem_per_slot:
        assert "--mem" in directives(trial)
