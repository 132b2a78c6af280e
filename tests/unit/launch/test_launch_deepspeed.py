"""Exact argv/env of the DeepSpeed launcher and its .deepspeed_env handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.launch import deepspeed as ds
from dethpc.launch._common import PORT_BASE, JobLayout, LaunchError

PY = "/py"
SRUN = lambda _name: "/usr/bin/srun"  # noqa: E731
BATCH = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[3-4]", "SLURM_NNODES": "2",
         "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)"}


def test_deepspeed_env_files_order_and_parse(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    (home / ".deepspeed_env").write_text("A=home\nB=1=2\n")
    (cwd / ".deepspeed_env").write_text("# comment\n\nA=cwd\n")
    files = ds.deepspeed_env_files({}, cwd, home)
    assert files == [home / ".deepspeed_env", cwd / ".deepspeed_env"]
    assert ds.read_deepspeed_env(files) == {"A": "cwd", "B": "1=2"}
    assert ds.deepspeed_env_files({"DS_ENV_FILE": "x.env"}, cwd, home)[1] == cwd / "x.env"


def test_deepspeed_env_bad_line(tmp_path: Path) -> None:
    (tmp_path / "e").write_text("NOEQUALS\n")
    with pytest.raises(LaunchError, match="expected KEY=VALUE"):
        ds.read_deepspeed_env([tmp_path / "e"])


def test_srun_mode_exports_env_file(tmp_path: Path) -> None:
    (tmp_path / ".deepspeed_env").write_text("NCCL_IB_DISABLE=1\n")
    plan = ds.plan(["--", "train.py", "--deepspeed"], BATCH, cwd=tmp_path, home=tmp_path / "no",
                   which=SRUN, python=PY)
    assert list(plan.argv) == [
        "srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
        PY, "-m", "dethpc.launch._worker", "--", PY, "-m", "dethpc.launch._run_main", "train.py",
        "--deepspeed"]
    assert plan.env["NCCL_IB_DISABLE"] == "1"
    assert (plan.env["MASTER_ADDR"], plan.env["MASTER_PORT"]) == ("n3", str(PORT_BASE + 9))


def test_hostfile_mode(tmp_path: Path) -> None:
    env = {**BATCH, "DETHPC_MPI": "pmix"}
    plan = ds.plan(["--mode", "hostfile", "--zero_stage=1", "--", "train.py", "a"], env,
                   cwd=tmp_path, home=tmp_path, which=SRUN, python=PY)
    hostfile = str(tmp_path / ".dethpc-hostfile-9")
    assert list(plan.argv) == [
        "deepspeed", f"--hostfile={hostfile}", "--launcher=slurm", "--launcher_args=--mpi=pmix",
        "--num_nodes=2", "--master_addr=n3", f"--master_port={PORT_BASE + 9}", "--no_ssh_check",
        "--zero_stage=1", "train.py", "a"]
    assert plan.files == ((hostfile, "n3 slots=2\nn4 slots=2\n"),)


def test_hostfile_module_target() -> None:
    layout = JobLayout(("n1",), 1, "n1", 15000)
    assert ds.hostfile_argv(layout, "h", ["-m", "pkg.train", "x"])[-3:] == [
        "--module", "pkg.train", "x"]


def test_local_and_bad_mode(tmp_path: Path) -> None:
    plan = ds.plan(["t.py"], {"DETHPC_NPROC": "2"}, cwd=tmp_path, home=tmp_path,
                   which=lambda _n: None, python=PY)
    assert [w.env["RANK"] for w in plan.workers] == ["0", "1"]
    with pytest.raises(LaunchError, match="unknown deepspeed launch mode"):
        ds.plan(["--mode", "pdsh", "--", "t.py"], BATCH, cwd=tmp_path, home=tmp_path, which=SRUN)
