"""Exact argv/env of the MPI and Horovod launchers."""

from __future__ import annotations

import sys

import pytest

from dethpc.launch import horovod, mpi
from dethpc.launch._common import LaunchError

PY = "/py"
SRUN = lambda _name: "/usr/bin/srun"  # noqa: E731
BATCH = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
         "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)"}
SAME_HOST = lambda _h: "127.0.0.1"  # noqa: E731
OWN_HOST = lambda h: {"n1": "10.0.0.1", "n2": "10.0.0.2"}[h]  # noqa: E731


@pytest.mark.parametrize(("text", "names"), [
    ("MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\nspecific pmix plugin versions "
     "available: pmix_v4\n", ["none", "pmi2", "pmix", "pmix_v4"]),
    ("srun: MPI types are...\nsrun: cray_shasta\nsrun: none\nsrun: pmi2\n",
     ["cray_shasta", "none", "pmi2"]),
])
def test_parse_mpi_list(text, names) -> None:
    assert mpi.parse_mpi_list(text) == names


@pytest.mark.parametrize(("available", "chosen"), [
    (["none", "pmi2", "pmix"], "pmix"), (["none", "pmi2"], "pmi2")])
def test_choose_plugin(available, chosen) -> None:
    assert mpi.choose_plugin(available) == chosen


def test_choose_plugin_none() -> None:
    with pytest.raises(LaunchError, match="no PMI plugin"):
        mpi.choose_plugin(["none", "cray_shasta"])


@pytest.mark.parametrize(("env", "resolve", "out"), [
    ({}, SAME_HOST, {"OMPI_MCA_btl": "self,tcp"}),
    ({}, OWN_HOST, {}),
    ({"DETHPC_MPI_BTL": "self,vader,tcp"}, SAME_HOST, {"OMPI_MCA_btl": "self,vader,tcp"}),
    ({"OMPI_MCA_btl": "^openib"}, SAME_HOST, {}),
])
def test_btl_env(env, resolve, out) -> None:
    assert mpi.btl_env(["n1", "n2"], env, resolve) == out


def test_mpi_plan_under_slurm() -> None:
    plan = mpi.mpi_plan([PY, "a.py"], BATCH, which=SRUN, plugin=lambda: "pmix",
                        resolve=SAME_HOST, python=PY)
    assert list(plan.argv) == [
        "srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
        "--mpi=pmix", PY, "-m", "dethpc.launch._worker", "--", PY, "a.py"]
    assert plan.env["OMPI_MCA_btl"] == "self,tcp"


def test_mpi_plugin_from_env_skips_detection() -> None:
    def boom() -> str:
        raise AssertionError("must not detect")

    plan = mpi.mpi_plan([PY, "a.py"], {**BATCH, "DETHPC_MPI": "pmi2"}, which=SRUN,
                        plugin=boom, resolve=OWN_HOST, python=PY)
    assert "--mpi=pmi2" in plan.argv and "OMPI_MCA_btl" not in plan.env


def test_detect_plugin_is_cached() -> None:
    from dethpc.common.runner import CommandResult, CommandRunner

    class Fake(CommandRunner):
        calls = 0

        def run(self, argv, **kw):  # type: ignore[no-untyped-def, override]
            Fake.calls += 1
            return CommandResult(tuple(argv), 0, "MPI plugin types are...\n\tpmi2\n", "")

    mpi._PLUGIN_CACHE.clear()
    try:
        assert mpi.detect_plugin(Fake()) == "pmi2"
        assert mpi.detect_plugin(Fake()) == "pmi2"
        assert Fake.calls == 1
    finally:
        mpi._PLUGIN_CACHE.clear()


def test_mpi_local_uses_mpirun() -> None:
    plan = mpi.mpi_plan([PY, "a.py"], {"DETHPC_NPROC": "4"}, which=lambda n: "/usr/bin/" + n)
    assert list(plan.argv) == ["mpirun", "--oversubscribe", "--tag-output", "-np", "4",
                               PY, "a.py"]


def test_mpi_local_without_mpirun() -> None:
    with pytest.raises(LaunchError, match="mpirun is not on PATH"):
        mpi.mpi_plan([PY, "a.py"], {"DETHPC_NPROC": "2"}, which=lambda _n: None)


def test_mpi_single_local_process() -> None:
    plan = mpi.mpi_plan([PY, "a.py"], {}, which=lambda _n: None)
    assert [list(w.argv) for w in plan.workers] == [[PY, "a.py"]]


def test_horovod_not_importable_message() -> None:
    def importer(name: str) -> object:
        raise ImportError("No module named 'horovod'")

    with pytest.raises(LaunchError) as info:
        horovod.check_horovod(importer)
    assert str(info.value) == (
        "horovod is not importable here: ImportError: No module named 'horovod' (Horovod "
        "0.28.1 does not build against torch 2.13 without patches; see docs/launchers.md)")


def test_horovod_importable_passes() -> None:
    imported: list[str] = []

    def importer(name: str) -> object:
        imported.append(name)
        return object()

    assert horovod.check_horovod(importer) is None
    assert imported == ["horovod"]  # it did try the import, and the import worked


def test_horovod_main_exit_code_without_horovod(monkeypatch, capfd) -> None:
    from dethpc.launch._procs import launcher_main

    monkeypatch.setitem(sys.modules, "horovod", None)  # makes `import horovod` fail
    assert launcher_main(lambda: horovod.main(["--", "t.py"])) == 2
    assert "horovod is not importable here" in capfd.readouterr().err
