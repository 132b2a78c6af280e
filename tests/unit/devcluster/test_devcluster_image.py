"""Pure parts of the dev cluster's container image (dethpc/devcluster/image.py):
the input digest, staleness, the torch-wheel guard, the commands it builds and runs,
and that the Apptainer definition shares the install script and package list."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dethpc.common.runner import RecordingRunner
from dethpc.devcluster import image
from dethpc.devcluster.layout import DevClusterLayout

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "singularity" / "install-dethpc.sh"


def test_digest_is_order_independent_and_sees_every_input() -> None:
    files = {"a.py": b"one", "b.py": b"two"}
    settings = {"torch_version": "2.13.0", "suite": "bookworm"}
    base = image.inputs_digest(files, settings)
    backwards = image.inputs_digest(dict(reversed(files.items())),
                                    dict(reversed(settings.items())))
    assert backwards == base
    assert image.inputs_digest({**files, "a.py": b"one!"}, settings) != base
    assert image.inputs_digest({"a2.py": b"one", "b.py": b"two"}, settings) != base
    assert image.inputs_digest({**files, "c.py": b""}, settings) != base
    assert image.inputs_digest(files, {**settings, "torch_version": "2.14.0"}) != base
    # a file name and its content cannot trade places
    assert image.inputs_digest({"ab": b"c"}, {}) != image.inputs_digest({"a": b"bc"}, {})


def test_stale_reason() -> None:
    assert image.stale_reason(None, "d1") is not None
    assert image.stale_reason({"digest": "d1"}, "d1") is None
    reason = image.stale_reason({"digest": "d0"}, "d1")
    assert reason is not None and "inputs changed" in reason
    assert image.stale_reason({}, "d1") is not None


def test_recipe_settings_carry_torch_version_and_given_wheels() -> None:
    plain = image.recipe_settings()
    assert plain["torch_version"] == "2.13.0"
    assert "wheels" not in plain
    assert image.recipe_settings(["b.whl", "a.whl"])["wheels"] == "a.whl\nb.whl"


def test_current_digest_changes_with_a_given_wheel_directory(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    d1, _ = image.current_digest(tmp_path)
    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    d2, _ = image.current_digest(tmp_path)
    assert d1 != d2
    assert image.current_digest()[0] == image.current_digest()[0]


def test_input_files_cover_script_source_and_pyproject() -> None:
    files = image.input_files()
    assert files["install-dethpc.sh"] == SCRIPT.read_bytes()
    assert files["pyproject.toml"] == (REPO / "pyproject.toml").read_bytes()
    assert "dethpc/devcluster/image.py" in files
    assert "dethpc/__init__.py" in files
    assert not [n for n in files if "__pycache__" in n or n.endswith(".pyc")]


@pytest.mark.parametrize(("url", "ok"), [
    ("file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl", True),
    ("https://example.org/x/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", True),
    ("https://files.pythonhosted.org/x/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", False),
    ("file:///opt/wheels/torch-2.14.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl", False),
    ("file:///opt/wheels/torchvision-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl", False),
    ("", False),
])
def test_is_cpu_torch_wheel(url: str, ok: bool) -> None:
    assert image.is_cpu_torch_wheel(url) is ok


def test_mmdebstrap_argv_runs_the_install_script_in_the_chroot() -> None:
    argv = image.mmdebstrap_argv(Path("/s/.img.partial-1"), Path("/w/wheels"), SCRIPT)
    assert argv[0] == "mmdebstrap"
    assert "--variant=minbase" in argv
    assert "--include=" + ",".join(image.PACKAGES) in argv
    assert argv[-len(image.MIRRORS) - 2:] == ["bookworm", "/s/.img.partial-1", *image.MIRRORS]
    hooks = [a.removeprefix("--customize-hook=") for a in argv
             if a.startswith("--customize-hook=")]
    assert f"copy-in /w/wheels {SCRIPT} /tmp/dethpc-install" in hooks
    assert ('chroot "$1" sh /tmp/dethpc-install/install-dethpc.sh /tmp/dethpc-install/wheels '
            "/opt/dethpc-venv") in hooks
    assert hooks.index('rm -rf "$1"/tmp/dethpc-install') > 1


def test_ch_run_argv_and_image_python() -> None:
    assert image.ch_run_argv(Path("/i"), ["python", "-V"]) == [
        "ch-run", "-b", "/tmp:/tmp", "/i", "--", "python", "-V"]
    assert image.ch_run_argv(Path("/i"), ["true"], binds=()) == ["ch-run", "/i", "--", "true"]
    assert image.IMAGE_PYTHON == "/opt/dethpc-venv/bin/python"


def test_image_path_is_under_the_state_dir(tmp_path: Path) -> None:
    layout = DevClusterLayout(state_dir=tmp_path)
    assert image.image_path(layout) == tmp_path / "images" / "dethpc-bookworm"


def test_ensure_image_reuses_a_fresh_image_without_running_anything(tmp_path: Path) -> None:
    dest = tmp_path / "images" / "img"
    (dest / "etc").mkdir(parents=True)
    digest, settings = image.current_digest()
    stamp = image.make_stamp(digest, settings, size_mb=12, build_seconds=3.0, built_at=1.0)
    (dest / image.STAMP).write_text(json.dumps(stamp))
    runner = RecordingRunner()
    info = image.ensure_image(dest, runner)
    assert runner.calls == []
    assert (info.built, info.digest, info.size_mb, info.build_seconds) == (False, digest, 12, 3.0)


def test_leftovers_of_crashed_builds_are_cleared(tmp_path: Path) -> None:
    dest = tmp_path / "img"
    keep = [dest, tmp_path / "other.partial-1"]
    gone = [tmp_path / ".img.partial-123", tmp_path / ".img.old-9", tmp_path / ".img.wheels-4"]
    for d in keep + gone:
        (d / "x").mkdir(parents=True)
    image._clear_leftovers(dest)
    assert all(d.exists() for d in keep)
    assert not any(d.exists() for d in gone)


def test_apptainer_definition_shares_script_and_packages() -> None:
    text = (REPO / "singularity" / "dethpc.def").read_text()
    lines = [ln.strip() for ln in text.splitlines()]
    assert "Bootstrap: debootstrap" in lines and "OSVersion: bookworm" in lines
    include = next(ln for ln in lines if ln.startswith("Include:"))
    assert include.split()[1:] == list(image.PACKAGES)
    assert any(ln.startswith("sh /opt/dethpc-install/install-dethpc.sh") for ln in lines)
    assert "pip install" not in text.split("%post", 1)[1]


def test_install_script_parses_and_refuses_bad_arguments(tmp_path: Path) -> None:
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["sh", "-n", str(SCRIPT)], check=True)
    usage = subprocess.run(["sh", str(SCRIPT)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr
    empty = subprocess.run(["sh", str(SCRIPT), str(tmp_path), str(tmp_path / "venv")],
                           capture_output=True, text=True)
    assert empty.returncode == 1 and "no dethpc wheel" in empty.stderr
    assert not (tmp_path / "venv").exists()


def test_base_files_leave_out_dethpcs_own_source() -> None:
    files = {"install-dethpc.sh": b"s", "pyproject.toml": b"p", "dethpc/__init__.py": b"i",
             "sbatch_templates/x.j2": b"t", "dethpcx/y.py": b"y"}
    assert image.base_files(files) == {"install-dethpc.sh": b"s", "pyproject.toml": b"p",
                                       "dethpcx/y.py": b"y"}
    real = image.input_files()
    base = image.base_files(real)
    assert "pyproject.toml" in base and "install-dethpc.sh" in base
    assert not [n for n in base if n.startswith("dethpc/")]


P = image.ImagePlan


@pytest.mark.parametrize(("stamp", "rebuild", "can_refresh", "plan"), [
    (None, False, True, P.BUILD),                                   # no image
    ({"digest": "d", "base_digest": "b"}, False, True, P.REUSE),    # fresh
    ({"digest": "d", "base_digest": "b"}, True, True, P.BUILD),     # --rebuild
    ({"digest": "old", "base_digest": "b"}, False, True, P.REFRESH),  # own source changed
    ({"digest": "old", "base_digest": "b"}, False, False, P.BUILD),   # given wheels
    ({"digest": "old", "base_digest": "b0"}, False, True, P.BUILD),   # dependencies changed
    ({"digest": "old"}, False, True, P.BUILD),                      # a stamp from before
])
def test_image_plan(stamp: dict[str, str] | None, rebuild: bool, can_refresh: bool,
                    plan: image.ImagePlan) -> None:
    assert image.image_plan(stamp, "d", "b", rebuild=rebuild, can_refresh=can_refresh) is plan


def test_base_digest_ignores_own_source_but_not_the_dependencies(tmp_path: Path) -> None:
    files = image.input_files()
    settings = image.recipe_settings()
    base = image.inputs_digest(image.base_files(files), settings)
    assert base == image.current_base_digest()
    edited = {**files, "dethpc/__init__.py": files["dethpc/__init__.py"] + b"# x\n"}
    assert image.inputs_digest(image.base_files(edited), settings) == base
    assert image.inputs_digest(edited, settings) != image.inputs_digest(files, settings)
    deps = {**files, "pyproject.toml": files["pyproject.toml"] + b"\n"}
    assert image.inputs_digest(image.base_files(deps), settings) != base


def test_refresh_reinstalls_only_dethpcs_wheel_without_an_index() -> None:
    argv = image.refresh_argv(Path("/s/.img.partial-1"), "/tmp/dethpc-install/dethpc.whl")
    assert argv[:2] == ["chroot", "/s/.img.partial-1"]
    assert "PIP_CONFIG_FILE=/dev/null" in argv
    tail = argv[argv.index(image.IMAGE_PYTHON):]
    assert tail == [image.IMAGE_PYTHON, "-m", "pip", "install", "--quiet", "--no-index",
                    "--no-deps", "--force-reinstall", "/tmp/dethpc-install/dethpc.whl"]


def test_make_stamp_records_the_base_and_a_refresh() -> None:
    plain = image.make_stamp("d", {}, size_mb=1, build_seconds=80.04, built_at=2.0,
                             base_digest="b")
    assert plain["base_digest"] == "b" and "refresh_seconds" not in plain
    refreshed = image.make_stamp("d", {}, size_mb=1, build_seconds=80.0, built_at=2.0,
                                 base_digest="b", refresh_seconds=9.96)
    assert (refreshed["build_seconds"], refreshed["refresh_seconds"]) == (80.0, 10.0)
