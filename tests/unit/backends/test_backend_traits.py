"""Backends differ through ``dethpc.common.traits``, not through name comparisons."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dethpc.backends.local import LocalBackend
from dethpc.backends.slurm import SlurmBackend
from dethpc.common.traits import LOCAL, SLURM, BackendKind, traits_of
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.jobscript import trial_command, trial_script
from dethpc.launch._common import use_slurm

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("text", "kind"), [
    ("local", BackendKind.LOCAL), ("SLURM", BackendKind.SLURM), (" slurm ", BackendKind.SLURM),
    ("", None), (None, None), ("pbs", None),
])
def test_parse(text: str | None, kind: BackendKind | None) -> None:
    assert BackendKind.parse(text) is kind


def test_traits_of() -> None:
    assert traits_of("slurm") is SLURM and traits_of(BackendKind.LOCAL) is LOCAL
    with pytest.raises(ValueError, match="unknown backend 'pbs'; allowed: local, slurm"):
        traits_of("pbs")


def test_each_backend_declares_its_traits() -> None:
    assert SlurmBackend.traits is SLURM and SlurmBackend.name == SLURM.name
    assert LocalBackend.traits is LOCAL and LocalBackend.name == LOCAL.name


CFG = parse_experiment_config({
    "name": "t", "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
    "slurm": {"components": [{"name": "server", "entrypoint": "python3 server.py"}]}})
PLAIN = parse_experiment_config({**CFG.raw, "slurm": {}})
CLUSTER = ClusterConfig(pools={"default": ResourcePool(name="default", partition="debug")})


@pytest.mark.parametrize("traits", [LOCAL, SLURM], ids=["local", "slurm"])
def test_what_each_trait_changes(traits, tmp_path) -> None:
    plain = trial_command(PLAIN, CLUSTER, traits.kind, "py", tmp_path)
    assert (plain[0] == "srun") is traits.srun_steps
    het = trial_command(CFG, CLUSTER, traits.kind, "py", tmp_path)
    assert ("dethpc.launch.hetjob" in het) is traits.het_jobs
    script = trial_script(CFG, CLUSTER, backend=traits.kind, python="py", run_dir=tmp_path,
                          exp_id=1, trial_id=1)
    assert ("#SBATCH hetjob" in script) is traits.het_jobs
    assert ("scontrol requeue" in script) is traits.requeue_in_place
    assert f"export DETHPC_BACKEND={traits.name}" in script
    env = {"SLURM_JOB_ID": "5", "DETHPC_BACKEND": traits.name}
    assert use_slurm(env, which=lambda _: "/usr/bin/srun") is traits.srun_steps


#: where a backend name may still be spelled out: the traits themselves, the config
#: checker's list of allowed values, and the dev cluster (which is Slurm by definition)
ALLOWED = {"dethpc/common/traits.py", "dethpc/config/cluster.py", "dethpc/config/model.py"}
COMPARISON = re.compile(r"""(==|!=)\s*["'](slurm|local)["']|["'](slurm|local)["']\s*(==|!=)""")


def test_no_module_compares_backend_names() -> None:
    offenders = []
    for path in sorted((ROOT / "dethpc").rglob("*.py")) + sorted(
            (ROOT / "sbatch_templates").glob("*.j2")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED or rel.startswith("dethpc/devcluster/"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if COMPARISON.search(line):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
