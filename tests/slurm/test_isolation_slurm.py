"""Issue 15 item 5, first part: two real Unix users on one installation with a shared
``runs_root`` (a sticky, world-writable directory, as a site's scratch is). The owner
is the dev cluster's test user (``dethpc-user``), the other is ``nobody``; each rule is
tried as the other user:

- the owner's state is their own: ``$DETHPC_HOME`` (database included) is created 0700,
  so the other cannot read it, nor cancel the owner's experiment through it;
- run directories are created owner-only (0700) whatever the umask: the other cannot
  list the trials nor read the config, hyperparameters or logs;
- ``runs_mode: group`` makes them 2770 (an explicit setting).
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dethpc.devcluster.users import ClusterUser
from tests.local.conftest import TOY, write_config

OTHER = "nobody"


@pytest.fixture
def shared(user_tmp: Path) -> Iterator[Path]:
    path = user_tmp.parent / f"{user_tmp.name}-shared"
    path.mkdir()
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def submit(user: ClusterUser, python: list[str], home: Path, runs: Path, work: Path,
           runs_mode: str = "private") -> subprocess.CompletedProcess[str]:
    config = work / "cluster.yaml"
    config.write_text(yaml.safe_dump({"backend": "local", "runs_root": str(runs),
                                      "runs_mode": runs_mode}))
    ctx = work / "toy"
    if not ctx.exists():
        shutil.copytree(TOY, ctx)
    exp = write_config(work / "exp.yaml")
    for p in (config, exp, *ctx.rglob("*"), ctx):
        shutil.chown(p, user.uid, user.gid)
    argv = user.as_user(["env", f"DETHPC_HOME={home}", f"DETHPC_CLUSTER_CONFIG={config}",
                         "sh", "-c", 'umask 022 && exec "$@"', "sh", *python, "-m",
                         "dethpc.surfaces.cli.main", "submit", str(exp), str(ctx), "--no-daemon"])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=work)


def as_other(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    extra = [f"{k}={v}" for k, v in env.items()]
    return subprocess.run(["runuser", "-u", OTHER, "--", "env", *extra, *argv],
                          capture_output=True, text=True, timeout=120, cwd="/")


def test_another_user_cannot_read_or_act_on_an_experiment(
        cluster_user: ClusterUser, user_python: list[str], user_tmp: Path,
        shared: Path) -> None:
    home = user_tmp / "home"
    proc = submit(cluster_user, user_python, home, shared / "runs", user_tmp)
    assert proc.returncode == 0, proc.stderr
    run_dir = shared / "runs" / "1"
    st = run_dir.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (cluster_user.uid, 0o700), oct(st.st_mode)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for argv in (["ls", str(run_dir)], ["cat", str(run_dir / "config.yaml")],
                 ["ls", str(home)], ["cat", str(home / "dethpc.db")]):
        tried = as_other(argv)
        assert tried.returncode != 0 and "Permission denied" in tried.stderr, (argv, tried)
    cancel = as_other([*user_python, "-m", "dethpc.surfaces.cli.main", "experiment", "cancel", "1"],
                      DETHPC_HOME=str(home), DETHPC_CLUSTER_CONFIG=str(user_tmp / "cluster.yaml"))
    assert cancel.returncode != 0 and "Traceback" not in cancel.stderr, cancel.stderr


def test_group_mode_is_an_explicit_setting(cluster_user: ClusterUser, user_python: list[str],
                                           user_tmp: Path, shared: Path) -> None:
    proc = submit(cluster_user, user_python, user_tmp / "home", shared / "runs", user_tmp,
                  runs_mode="group")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((shared / "runs" / "1").stat().st_mode) == 0o2770

