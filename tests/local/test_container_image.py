"""The dev cluster's Charliecloud image really runs here (issue 14).

Builds the image once per machine (or reuses the cached one under the dev cluster's
state directory) with ``ensure_image``, then runs its own Python through ``ch-run``:
torch 2.13.0 CPU and dethpc are installed inside the image (not the host's venv), a
2-process gloo all_reduce works through ``dethpc.launch.torch_distributed``, and a
second ``ensure_image`` reuses the image without rebuilding it.

Needs root on Debian (apt-get installs mmdebstrap and charliecloud-runtime when
missing, mmdebstrap builds as root); skipped elsewhere. The first build takes a
minute or two and downloads Debian packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dethpc.devcluster import image

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="building the image needs root"),
    pytest.mark.skipif(not Path("/etc/debian_version").exists() or not shutil.which("apt-get"),
                       reason="building the image needs Debian (apt-get, mmdebstrap)"),
    pytest.mark.timeout(1800),
]

ALL_REDUCE = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum={t.item()}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def built() -> image.ImageInfo:
    return image.ensure_image()


def ch_run(img: Path, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "USER": os.environ.get("USER") or "root", **env}
    return subprocess.run(image.ch_run_argv(img, argv), capture_output=True, text=True,
                          env=full_env, timeout=300)


def test_torch_cpu_and_dethpc_are_installed_inside_the_image(built: image.ImageInfo) -> None:
    assert built.path == image.image_path()
    assert (built.path / image.IMAGE_PYTHON.lstrip("/")).exists()
    code = ("import sys, torch, dethpc; print(torch.__version__, dethpc.__version__, "
            "torch.cuda.is_available(), sys.version_info[:2] == (3, 11), "
            "torch.__file__, dethpc.__file__)")
    proc = ch_run(built.path, [image.IMAGE_PYTHON, "-c", code])
    assert proc.returncode == 0, proc.stderr
    torch_v, dethpc_v, cuda, py311, torch_file, dethpc_file = proc.stdout.split()
    assert torch_v == "2.13.0+cpu"
    assert cuda == "False" and py311 == "True"
    import dethpc
    assert dethpc_v == dethpc.__version__
    # installed in the image's venv, not bind-mounted from the host
    assert torch_file.startswith(image.IMAGE_VENV + "/lib/python3.11/site-packages/")
    assert dethpc_file.startswith(image.IMAGE_VENV + "/lib/python3.11/site-packages/")


def test_gloo_all_reduce_of_two_processes_in_the_image(
        built: image.ImageInfo, tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/"), "the test script must lie under the bound /tmp"
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    proc = ch_run(built.path,
                  [image.IMAGE_PYTHON, "-m", "dethpc.launch.torch_distributed", str(script)],
                  DETHPC_BACKEND="local", DETHPC_NPROC="2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0/2 sum=3.0" in proc.stdout
    assert "rank 1/2 sum=3.0" in proc.stdout


def test_a_second_ensure_image_reuses_the_image(built: image.ImageInfo) -> None:
    stamp_file = built.path / image.STAMP
    before = stamp_file.stat()
    stamp = image.read_stamp(built.path)
    again = image.ensure_image()
    assert not again.built
    assert again.digest == built.digest == (stamp or {}).get("digest")
    after = stamp_file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert image.read_stamp(built.path) == stamp
    assert built.path.stat().st_ino == again.path.stat().st_ino
