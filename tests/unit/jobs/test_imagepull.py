"""The pure parts of the daemon's image pulls: which images an experiment needs pulled,
the environment of a pull, and the pre-pull job's script."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ContainerSettings, ResourcePool
from dethpc.jobs.imagepull import images_of, main, pull_env, pull_job, pull_job_script

POOLS = {"cpu": ResourcePool(name="cpu"), "gpu": ResourcePool(name="gpu", gres="gpu")}


def cfg(image: object, pool: str = "cpu"):  # noqa: ANN201
    raw = {"name": "x", "entrypoint": "python3 t.py", "resources": {"resource_pool": pool},
           "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}
    if image is not None:
        raw["environment"] = {"image": image}
    return parse_experiment_config(raw)


@pytest.mark.parametrize(("runtime", "image", "pool", "want"), [
    ("apptainer", "org/a:1", "cpu", ["org/a:1"]),
    ("apptainer", {"cpu": "org/c:1", "cuda": "org/g:1"}, "gpu", ["org/g:1"]),
    ("apptainer", {"cpu": "org/c:1", "cuda": "org/g:1"}, "cpu", ["org/c:1"]),
    ("apptainer", None, "cpu", []),
    ("none", "org/a:1", "cpu", []),
    ("charliecloud", "/images/a", "cpu", []),       # an image directory: nothing to pull
])
def test_images_of(runtime: str, image: object, pool: str, want: list[str]) -> None:
    cluster = ClusterConfig(pools=POOLS, default_pool="cpu",
                            containers=ContainerSettings(runtime=runtime))  # type: ignore[arg-type]
    assert images_of(cfg(image, pool), cluster) == want


def test_pull_env_moves_cache_and_tmp_off_home() -> None:
    env = pull_env(ContainerSettings(runtime="apptainer", cache_dir=Path("/scratch/c"),
                                     tmp_dir=Path("/scratch/t")))
    assert env["APPTAINER_CACHEDIR"] == env["SINGULARITY_CACHEDIR"] == "/scratch/c"
    assert env["APPTAINER_TMPDIR"] == env["SINGULARITY_TMPDIR"] == "/scratch/t"


def test_pull_job_script_and_files() -> None:
    settings = ContainerSettings(runtime="singularity", sif_cache=Path("/shared/sif"))
    text = pull_job_script(settings, "docker://org/it's:1", "/venv/bin/python")
    line = text.splitlines()[-1]
    assert shlex.split(line) == ["/venv/bin/python", "-m", "dethpc.jobs.imagepull", "singularity",
                                 "/shared/sif", "-", "-", "docker://org/it's:1"]
    pj = pull_job(Path("/runs"), settings, "docker://org/it's:1")
    assert pj.root == Path("/runs/.dethpc-pulls")
    assert pj.script.parent == pj.record.parent == pj.output.parent == pj.root
    assert main(["too", "few"]) == 2
