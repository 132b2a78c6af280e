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

import json
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


def _image_dethpc(img: Path) -> Path:
    return img / image.IMAGE_VENV.lstrip("/") / "lib" / "python3.11" / "site-packages" / "dethpc"


def _source_py_files() -> dict[str, bytes]:
    import dethpc
    src = Path(dethpc.__file__).resolve().parent
    return {p.relative_to(src).as_posix(): p.read_bytes() for p in src.rglob("*.py")}


def test_the_images_dethpc_is_the_checkouts(built: image.ImageInfo) -> None:
    """Every .py file of the checkout's dethpc/ is in the image, byte for byte: the image
    is rebuilt or refreshed whenever the source changes."""
    inside = _image_dethpc(built.path)
    differ = [rel for rel, data in _source_py_files().items()
              if not (inside / rel).is_file() or (inside / rel).read_bytes() != data]
    assert differ == []


def test_a_source_change_refreshes_a_copy_and_leaves_the_old_image_alone(
        built: image.ImageInfo, tmp_path: Path) -> None:
    """An image whose stamp says only dethpc's source differs is refreshed (the wheel
    reinstalled into a hard-linked copy), not rebuilt; the old tree's files are unlinked,
    never written, so the image it was copied from keeps its inodes and bytes."""
    old = tmp_path / "images" / "img"
    old.parent.mkdir()
    subprocess.run(["cp", "-al", str(built.path), str(old)], check=True)
    stamp = dict(image.read_stamp(old) or {})
    assert stamp.get("base_digest") == image.current_base_digest()
    stamp["digest"] = "an-older-source"
    (old / image.STAMP).unlink()
    (old / image.STAMP).write_text(json.dumps(stamp))
    init = _image_dethpc(old) / "__init__.py"
    kept = _image_dethpc(built.path) / "__init__.py"
    before = (kept.stat().st_ino, kept.read_bytes())
    assert init.stat().st_ino == before[0]  # a hard link, as the refresh's own copy will be
    info = image.ensure_image(old)
    assert (info.built, info.plan) == (True, image.ImagePlan.REFRESH)
    assert info.digest == built.digest
    new_init = _image_dethpc(old) / "__init__.py"
    assert new_init.read_bytes() == (Path(image.source_root() or ".") / "dethpc" /
                                     "__init__.py").read_bytes()
    assert new_init.stat().st_ino != before[0]  # pip wrote a new file
    assert (kept.stat().st_ino, kept.read_bytes()) == before
    proc = ch_run(old, [image.IMAGE_PYTHON, "-c", "import dethpc, torch; print('ok')"])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert image.ensure_image(old).plan is image.ImagePlan.REUSE
    assert "refresh_seconds" in (image.read_stamp(old) or {})
