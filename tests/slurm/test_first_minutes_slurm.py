"""The first five minutes on a login node, as the dev cluster's non-root ``dethpc-user``
with an empty home and no config file anywhere (issue 32 items 3 and 5):

- an install without root: this checkout built into a wheel, installed by the user into
  a venv of the system Python (its dependencies from the package index, as a user
  gets them); ``dethpc --version``, ``dethpc admin check`` on the config derived from
  Slurm, and a ``dethpc submit`` whose trial runs on the cluster with that venv's Python;
- each block of the README's "The first five minutes" (researcher, script owner, admin),
  cut out of README.md and run verbatim by bash (``-euo pipefail``: any failing command
  fails the block), with ``dethpc`` this checkout for that user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.devcluster.users import ClusterUser
from tests.conftest import in_ci
from tests.local.conftest import TOY, write_config

REPO = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!-- first-five-minutes: ([a-z-]+) -->\n```bash\n(.*?)\n```", re.S)


def readme_blocks() -> dict[str, str]:
    return {name: body for name, body in MARK.findall((REPO / "README.md").read_text())}


def test_the_readme_has_the_three_blocks() -> None:
    assert sorted(readme_blocks()) == ["admin", "researcher", "script-owner"]


@pytest.fixture
def login(cluster_user: ClusterUser, user_tmp: Path, slurm_cluster: Any) -> Iterator[
        dict[str, Any]]:
    """A login shell of the user: an empty home, a bare environment (HOME, USER, PATH
    and the lane's SLURM_CONF), a work directory it owns; on the way out its daemon is
    stopped and its jobs cancelled."""
    home, work = user_tmp / "home", user_tmp / "work"
    for d in (home, work):
        d.mkdir()
        shutil.chown(d, cluster_user.uid, cluster_user.gid)
    env = {"HOME": str(home), "USER": cluster_user.name, "LOGNAME": cluster_user.name,
           "PATH": "/usr/local/bin:/usr/bin:/bin",
           "SLURM_CONF": os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")}
    ctx: dict[str, Any] = {"user": cluster_user, "home": home, "work": work, "env": env}
    yield ctx
    as_user(ctx, "dethpc daemon stop || true", timeout=120)
    subprocess.run(["scancel", "-u", cluster_user.name], capture_output=True, timeout=60)


def as_user(ctx: dict[str, Any], script: str, *, timeout: float = 600,
            extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash as the user in its bare environment, from its work dir."""
    env = [f"{k}={v}" for k, v in {**ctx["env"], **(extra or {})}.items()]
    argv = ctx["user"].as_user(["env", "-i", *env, "bash", "-euo", "pipefail", "-c", script])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          cwd=ctx["work"])


# ------------------------------------------------------------------ install, no root
@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    out.chmod(0o755)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, timeout=600)
    (built,) = out.glob("dethpc-*.whl")
    built.chmod(0o644)
    return built


def system_python() -> str:
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for path in (f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        if Path(path).exists():
            return path
    reason = f"no system {minor} for the user's venv"
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def test_install_without_root_then_check_and_submit(login: dict[str, Any], wheel: Path,
                                                    tmp_path: Path) -> None:
    venv = login["home"] / "venv"
    mine = Path(shutil.copy2(wheel, login["work"]))       # the wheel, handed to the user
    shutil.chown(mine, login["user"].uid, login["user"].gid)
    t0 = time.monotonic()
    made = as_user(login, f"{system_python()} -m venv {venv} && "
                          f"{venv}/bin/pip install -q {mine}", timeout=900)
    print(f"venv and pip install as {login['user'].name}: {time.monotonic() - t0:.1f} s")
    assert made.returncode == 0, made.stderr[-3000:]
    login["env"]["PATH"] = f"{venv}/bin:{login['env']['PATH']}"   # the venv, activated

    version = as_user(login, "dethpc --version")
    assert version.returncode == 0 and "0.1.0" in version.stdout, version
    assert as_user(login, "command -v dethpc").stdout.strip() == f"{venv}/bin/dethpc"

    check = as_user(login, "dethpc admin check")
    assert check.returncode == 0, (check.stdout, check.stderr)

    ctx_dir = login["work"] / "toy"
    shutil.copytree(TOY, ctx_dir)
    cfg = write_config(login["work"] / "toy.yaml", searcher={
        "name": "single", "metric": "validation_loss", "max_length": {"batches": 5}},
        hyperparameters={"x": 3, "step_time": 0.01}, resources={"resource_pool": "debug"})
    subprocess.run(["chown", "-R", f"{login['user'].uid}:{login['user'].gid}",
                    str(ctx_dir), str(cfg)], check=True)
    sub = as_user(login, f"dethpc submit {cfg} {ctx_dir}")
    assert sub.returncode == 0, (sub.stdout, sub.stderr)
    done = as_user(login, "dethpc experiment wait 1 --timeout 300 >/dev/null; "
                          "dethpc experiment describe 1 --json", timeout=420)
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["state"] == "COMPLETED", d
    assert d["trials"][0]["state"] == "COMPLETED", d["trials"]


# ------------------------------------------------------------------ the README's blocks
@pytest.fixture
def shell(login: dict[str, Any], user_python: list[str]) -> dict[str, Any]:
    """``dethpc`` on the user's PATH as this checkout (``user_python``), and the
    repository's examples beside the work directory, as in a checkout."""
    bindir = login["work"].parent / "bin"
    bindir.mkdir()
    pythonpath = next(p for p in user_python if p.startswith("PYTHONPATH="))
    interpreter = [p for p in user_python if p != "env" and not p.startswith("PYTHONPATH=")]
    (bindir / "dethpc").write_text(
        "#!/bin/sh\nexec " + " ".join(interpreter) + ' -m dethpc.surfaces.cli.main "$@"\n')
    (bindir / "dethpc").chmod(0o755)
    (login["work"] / "examples").symlink_to(REPO / "examples")
    login["env"]["PATH"] = f"{bindir}:{login['env']['PATH']}"
    # what the user's install brings (dethpc, torch, numpy) for the jobs' python3
    login["env"]["PYTHONPATH"] = pythonpath.split("=", 1)[1]
    return login


def run_block(ctx: dict[str, Any], name: str) -> subprocess.CompletedProcess[str]:
    t0 = time.monotonic()
    out = as_user(ctx, readme_blocks()[name], timeout=600)
    print(f"README block {name}: exit {out.returncode} in {time.monotonic() - t0:.1f} s\n"
          f"{out.stdout}\n{out.stderr}")
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    return out


def test_readme_researcher_block(shell: dict[str, Any]) -> None:
    out = run_block(shell, "researcher")
    assert "backend: slurm" in out.stdout, out.stdout          # derived, not local
    assert re.search(r"Created experiment 1\b", out.stdout), out.stdout
    assert "COMPLETED" in out.stdout, out.stdout


def test_readme_script_owner_block(shell: dict[str, Any]) -> None:
    out = run_block(shell, "script-owner")
    assert re.search(r"^Submitted batch job \d+$", out.stdout, re.M), out.stdout
    assert "COMPLETED" in out.stdout and "hello" in out.stdout, out.stdout
    # `srun hostname` on two nodes (the dev cluster's nodes share this host)
    lines = out.stdout.splitlines()
    assert lines.count(socket.gethostname()) == 2, out.stdout


def test_readme_admin_block(shell: dict[str, Any]) -> None:
    run_block(shell, "admin")
    saved = shell["work"] / "cluster.yaml"
    assert "backend: slurm" in saved.read_text()
