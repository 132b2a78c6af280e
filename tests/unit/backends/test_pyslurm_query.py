"""The pyslurm fast path (dethpc/backends/pyslurm_query.py) without pyslurm.

pyslurm is not installable for Slurm 22.05 here, so the records are plain objects
with the attribute names and value conventions of ``pyslurm.Job`` (22.05 and later:
``array_task_id`` of task 0 reads ``None``, ``state_reason`` "None", text fields
``None`` when empty). The main table says: a pyslurm record gives exactly the
``JobInfo`` that ``parse_squeue`` makes of the same job's ``squeue -r`` line(s), so
a poll reads the same whichever path it takes. The import rule is tested with
stand-in ``pyslurm`` packages put on ``sys.path``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dethpc.backends.base import JobInfo, JobState
from dethpc.backends.pyslurm_query import (
    PyslurmQuery,
    job_infos,
    load_query,
    pyslurm_importable,
)
from dethpc.backends.slurm_parse import parse_squeue
from dethpc.common.errors import DethpcError


def rec(**fields: Any) -> SimpleNamespace:
    """A pyslurm.Job-shaped record of a running plain job, ``fields`` changed."""
    base: dict[str, Any] = {
        "id": 101, "array_id": None, "array_task_id": None, "array_tasks_waiting": None,
        "state": "RUNNING", "state_reason": "None", "allocated_nodes": "n1",
        "name": "dethpc-e1-b1", "comment": "dethpc:exp=1:batch=1", "requeue_count": 0,
        "exit_code": 0, "exit_code_signal": 0, "qos": "normal", "account": "dethpc",
        "user_name": "alice"}
    return SimpleNamespace(**{**base, **fields})


TAIL = "normal|dethpc|dethpc-e1-b1|dethpc:exp=1:batch=1"

# (pyslurm record, the squeue -r -O SQUEUE_FIELDS output for the same job)
SAME_AS_SQUEUE = {
    "plain running job": (rec(), f"101|RUNNING|0|0|None|n1|{TAIL}"),
    "array task 3": (rec(id=105, array_id=100, array_task_id=3),
                     f"100_3|RUNNING|0|0|None|n1|{TAIL}"),
    "array task 0 (pyslurm reads index 0 as None)": (
        rec(id=104, array_id=100, array_task_id=None), f"100_0|RUNNING|0|0|None|n1|{TAIL}"),
    "pending remainder of an array": (
        rec(id=100, array_id=100, array_tasks_waiting="5-7,9", state="PENDING",
            state_reason="Resources", allocated_nodes=None),
        "\n".join(f"100_{t}|PENDING|0|0|Resources||{TAIL}" for t in (5, 6, 7, 9))),
    "pending remainder with a throttle": (
        rec(id=100, array_id=100, array_tasks_waiting="1-2%4", state="PENDING",
            state_reason="JobArrayTaskLimit", allocated_nodes=None),
        "\n".join(f"100_{t}|PENDING|0|0|JobArrayTaskLimit||{TAIL}" for t in (1, 2))),
    "failed with exit code 2": (rec(state="FAILED", exit_code=2, state_reason="NonZeroExitCode"),
                                f"101|FAILED|512|0|NonZeroExitCode|n1|{TAIL}"),
    "killed by signal 9": (rec(state="CANCELLED", exit_code=0, exit_code_signal=9),
                           f"101|CANCELLED|9|0|None|n1|{TAIL}"),
    "completed": (rec(state="COMPLETED"), f"101|COMPLETED|0|0|None|n1|{TAIL}"),
    "requeued twice, waiting": (
        rec(state="PENDING", state_reason="BeginTime", requeue_count=2, allocated_nodes=None),
        f"101|PENDING|0|2|BeginTime||{TAIL}"),
    "completing counts as running": (rec(state="COMPLETING"), f"101|COMPLETING|0|0|None|n1|{TAIL}"),
    "node failure": (rec(state="NODE_FAIL", exit_code=0), f"101|NODE_FAIL|0|0|None|n1|{TAIL}"),
    "no comment, no name": (rec(comment=None, name=None),
                            "101|RUNNING|0|0|None|n1|normal|dethpc||(null)"),
    "no QoS, no account": (rec(qos=None, account=""),
                           "101|RUNNING|0|0|None|n1|(null)||dethpc-e1-b1|dethpc:exp=1:batch=1"),
    "het job leader (pyslurm >= 23.02 reads offset 0 as None)": (
        rec(id=200, heterogeneous_id=200, heterogeneous_offset=None),
        f"200+0|RUNNING|0|0|None|n1|{TAIL}"),
    "het job component": (rec(id=201, heterogeneous_id=200, heterogeneous_offset=1),
                          f"200+1|RUNNING|0|0|None|n1|{TAIL}"),
}


@pytest.mark.parametrize(("record", "squeue"), SAME_AS_SQUEUE.values(), ids=SAME_AS_SQUEUE)
def test_record_reads_like_its_squeue_line(record: SimpleNamespace, squeue: str) -> None:
    expected = parse_squeue(squeue)
    assert expected, "the squeue side of the table parses to nothing"
    assert job_infos(record) == expected


@pytest.mark.parametrize(("state", "expected"), [
    ("PENDING", JobState.PENDING), ("REQUEUE_HOLD", JobState.PENDING),
    ("CONFIGURING", JobState.PENDING), ("RUNNING", JobState.RUNNING),
    ("STAGE_OUT", JobState.RUNNING), ("SUSPENDED", JobState.SUSPENDED),
    ("COMPLETED", JobState.COMPLETED), ("FAILED", JobState.FAILED),
    ("BOOT_FAIL", JobState.FAILED), ("CANCELLED", JobState.CANCELLED),
    ("TIMEOUT", JobState.TIMEOUT), ("PREEMPTED", JobState.PREEMPTED),
    ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY), ("DEADLINE", JobState.CANCELLED),
    ("SOMETHING_NEW", JobState.UNKNOWN), (None, JobState.UNKNOWN),
])
def test_state_translation(state: str | None, expected: JobState) -> None:
    (info,) = job_infos(rec(state=state))
    assert info.state is expected
    assert info.raw_state == (state or "")


def test_exit_code_only_for_ended_jobs() -> None:
    (running,) = job_infos(rec(state="RUNNING", exit_code=0))
    (failed,) = job_infos(rec(state="FAILED", exit_code=3))
    assert (running.exit_code, running.signal) == (None, None)
    assert (failed.exit_code, failed.signal) == (3, None)


@pytest.mark.parametrize(("record", "refs"), [
    (rec(id=None), []),                                   # nothing to name it by
    (rec(id=100, array_id=100, array_tasks_waiting="0x1F", state="PENDING"), ["100"]),
    (rec(id=100, array_id=100, array_tasks_waiting="(null)"), ["100_0"]),
])
def test_refs_of_odd_records(record: SimpleNamespace, refs: list[str]) -> None:
    """An unparsable waiting list falls back to the array's own id (the backend's poll
    hands that record to every task without its own)."""
    assert [i.ref for i in job_infos(record)] == refs


def test_missing_attributes_read_empty() -> None:
    assert job_infos(SimpleNamespace(id=7)) == [JobInfo(ref="7", state=JobState.UNKNOWN)]


def fake_pyslurm(records: list[Any] | Exception) -> SimpleNamespace:
    def load() -> dict[int, Any]:
        if isinstance(records, Exception):
            raise records
        return {i: r for i, r in enumerate(records)}

    return SimpleNamespace(Jobs=SimpleNamespace(load=load))


def test_live_jobs_keeps_the_asked_jobs_only() -> None:
    mod = fake_pyslurm([
        rec(id=105, array_id=100, array_task_id=3),
        rec(id=100, array_id=100, array_tasks_waiting="4-5", state="PENDING"),
        rec(id=300),                                          # someone else's job
        rec(id=201, heterogeneous_id=200, heterogeneous_offset=1),
        rec(id=200, heterogeneous_id=200, heterogeneous_offset=None),
        rec(id=None),
    ])
    infos = PyslurmQuery(mod).live_jobs(["100", "200", "999"])
    assert [i.ref for i in infos] == ["100_3", "100_4", "100_5", "200+1", "200+0"]
    assert [i.state for i in infos][:3] == [JobState.RUNNING, JobState.PENDING,
                                            JobState.PENDING]


def test_live_jobs_with_a_user_adds_that_users_other_jobs() -> None:
    mod = fake_pyslurm([rec(id=100), rec(id=300), rec(id=400, user_name="bob")])
    infos = PyslurmQuery(mod).live_jobs(["100"], user="alice")
    assert [i.ref for i in infos] == ["100", "300"]


def test_failed_load_is_a_dethpc_error() -> None:
    class RPCError(Exception):
        pass

    query = PyslurmQuery(fake_pyslurm(RPCError("Unable to contact slurm controller")))
    with pytest.raises(DethpcError, match=r"pyslurm Jobs\.load\(\) failed \(RPCError: "
                                          r"Unable to contact slurm controller\)"):
        query.live_jobs(["1"])


# ------------------------------------------------------------- the import rule
@pytest.fixture
def no_pyslurm_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test imports as ``pyslurm`` is forgotten afterwards."""
    monkeypatch.setitem(sys.modules, "pyslurm", None)
    del sys.modules["pyslurm"]


def stand_in_package(root: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = root / "pyslurm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(root))


def test_not_importable_falls_back_to_the_cli(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # `import pyslurm` fails
    caplog.set_level(logging.INFO)
    assert pyslurm_importable() is False
    assert load_query((22, 5)) is None
    assert "pyslurm" not in caplog.text  # not installed is the normal case: no noise


def test_broken_build_is_logged_and_falls_back(tmp_path: Path, no_pyslurm_loaded: None,
                                               monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    stand_in_package(tmp_path, 'raise OSError("libslurm.so.38: cannot open shared object '
                               'file: No such file or directory")\n', monkeypatch)
    caplog.set_level(logging.INFO)
    assert pyslurm_importable() is False
    assert load_query((22, 5)) is None
    assert ("pyslurm is installed but cannot be imported (OSError: libslurm.so.38: "
            "cannot open shared object file") in caplog.text
    assert "using the Slurm CLI" in caplog.text


PACKAGE = """
__version__ = "22.5.3"
class Jobs:
    @staticmethod
    def load():
        from types import SimpleNamespace
        return {7: SimpleNamespace(id=7, state="RUNNING")}
"""


def test_matching_version_is_used_and_another_is_not(tmp_path: Path, no_pyslurm_loaded: None,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    stand_in_package(tmp_path, PACKAGE, monkeypatch)
    caplog.set_level(logging.INFO)
    assert pyslurm_importable() is True
    query = load_query((22, 5))
    assert query is not None
    assert query.live_jobs(["7"]) == [JobInfo(ref="7", state=JobState.RUNNING,
                                              raw_state="RUNNING")]
    assert load_query((25, 11)) is None
    assert "pyslurm 22.5.3 does not match Slurm 25.11: using the Slurm CLI" in caplog.text
    assert load_query(None) is None  # the running Slurm's version is unknown


@pytest.mark.parametrize(("rc", "out", "err", "expected"), [
    (0, "25.11.2", "", "25.11.2"),
    (0, "25.11.2\n", "", "25.11.2"),
    # libslurm without a reachable slurm.conf exits the importing process (measured)
    (1, "", "python: error: _establish_config_source: failed to fetch config\n"
            "python: fatal: Could not establish a configuration source\n", None),
    (1, "", "", None),
    (0, "", "", None),
])
def test_probed_version(rc: int, out: str, err: str, expected: str | None,
                        caplog: pytest.LogCaptureFixture) -> None:
    from dethpc.backends.pyslurm_query import probed_version

    caplog.set_level(logging.INFO)
    assert probed_version(rc, out, err) == expected
    if expected is None:
        assert "cannot be imported here" in caplog.text
    if "fatal" in err:
        assert "Could not establish a configuration source" in caplog.text


@pytest.mark.parametrize(("have", "slurm", "ok"), [
    ("25.11.2", (25, 11), True),
    ("25.11.2", (22, 5), False),
    ("22.5.3", (22, 5), True),
    ("25.11.2", None, False),
])
def test_versions_match(have: str, slurm: tuple[int, int] | None, ok: bool) -> None:
    from dethpc.backends.pyslurm_query import versions_match

    assert versions_match(have, slurm) is ok


def test_the_probe_child_imports_pyslurm_with_this_interpreter() -> None:
    import sys

    from dethpc.backends.pyslurm_query import PROBE, probe_argv

    assert probe_argv() == [sys.executable, "-c", PROBE]
