"""bench/peers (the small-trial cell), issue 48 item 7's fixes: the work counted the same
way for every system from the trials' work logs (redone batches validated or not, every
batch of an abandoned trial lost), an unreached seed counted at the timeout in the
medians, and the driver's own commands measured apart from the login side's CPU."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

PEERS = Path(__file__).resolve().parents[3] / "bench" / "peers"


@pytest.fixture(scope="module")
def peers() -> Any:
    sys.path.insert(0, str(PEERS))
    try:
        yield (importlib.import_module("workcount"), importlib.import_module("cnn"))
    finally:
        sys.path.remove(str(PEERS))


def _run(trial: str, start: int, upto: int, *, every: int = 4, end: bool = True,
         stop_at_validation: bool = False) -> list[dict[str, Any]]:
    """One run's events as cnn.Trainer.train_to writes them."""
    ev = [{"trial": trial, "event": "start", "batch": start}]
    for b in range(start + 1, upto + 1):
        ev.append({"trial": trial, "event": "batch", "batch": b})
        if b % every == 0:
            ev.append({"trial": trial, "event": "validate", "batch": b})
    if end and not stop_at_validation:
        ev.append({"trial": trial, "event": "end", "batch": upto})
    return ev


# (events, executed, redone, lost, abandoned)
CASES = [
    (_run("a", 0, 16), 16, 0, 0, 0),
    # killed at batch 10 (validated at 8, checkpoint at 8), resumed from 8: 9-10 again --
    # batches between validations that a validation-based count never saw
    (_run("a", 0, 10, end=False) + _run("a", 8, 16), 18, 2, 0, 0),
    # killed at 10, resumed from scratch (no checkpoint: Hydra, submitit): 10 redone
    (_run("a", 0, 10, end=False) + _run("a", 0, 16), 26, 10, 0, 0),
    # killed at 10 and never run again (Optuna's journal keeps it RUNNING): all 10 lost
    (_run("a", 0, 10, end=False) + _run("b", 0, 16), 26, 0, 10, 1),
    # stopped by its scheduler right at a validation (Ray's ASHA): decided, not lost
    (_run("a", 0, 8, stop_at_validation=True), 8, 0, 0, 0),
    # a preempted run that saved and ended cleanly, resumed where it stopped
    (_run("a", 0, 8) + _run("a", 8, 16), 16, 0, 0, 0),
]


@pytest.mark.parametrize(("events", "executed", "redone", "lost", "abandoned"), CASES)
def test_count_work(peers: Any, events: list[dict[str, Any]], executed: int, redone: int,
                    lost: int, abandoned: int) -> None:
    workcount, _ = peers
    got = workcount.count_work(events)
    assert (got["batches_executed"], got["batches_redone"], got["batches_lost"],
            got["trials_abandoned"]) == (executed, redone, lost, abandoned)


def test_worklog_writes_what_count_work_reads(peers: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    workcount, cnn = peers
    records = tmp_path / "records.jsonl"
    monkeypatch.setenv("PEERS_RECORDS", str(records))
    assert cnn.work_path() == str(tmp_path / "records.work.jsonl")
    log = cnn.WorkLog("optuna", "7")
    log.event("start", 0)
    for b in (1, 2, 3):
        log.event("batch", b)
    log.close()                                   # killed: no end
    with (tmp_path / "records.work.jsonl").open("a") as f:
        f.write('{"trial": "7", "event": "ba')    # a line torn by the kill
    events = workcount.read_events(tmp_path / "records.work.jsonl")
    assert [e["event"] for e in events] == ["start", "batch", "batch", "batch"]
    assert events[0]["system"] == "optuna"
    got = workcount.count_work(events)
    assert got["batches_lost"] == 3 and got["trials_abandoned"] == 1


def test_worklog_without_records_writes_nothing(peers: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, cnn = peers
    monkeypatch.delenv("PEERS_RECORDS", raising=False)
    log = cnn.WorkLog("hydra", "0")
    log.event("batch", 1)                         # no file, no error
    log.close()


@pytest.fixture(scope="module")
def run_mod(peers: Any) -> Any:
    sys.path.insert(0, str(PEERS))
    try:
        spec = importlib.util.spec_from_file_location("peers_run", PEERS / "run.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(PEERS))


def _row(system: str, seed: int, ttt: float | None) -> dict[str, Any]:
    return {"system": system, "seed": seed, "faults": True, "time_to_target_s": ttt,
            "wall_s": 100.0, "slot_seconds": 10, "rpcs_per_min": 1.0, "login_cpu_s": 1.0,
            "batches_trained": 64, "batches_redone": 0, "batches_lost": 0, "jobs": 1,
            "disk": {"bytes": 1, "files": 1}, "finished_alone": True}


def test_an_unreached_seed_counts_at_the_timeout(run_mod: Any) -> None:
    """Hydra under faults once showed 9.2 s over its one reached seed of five."""
    rows = [_row("hydra", 0, 9.2), _row("hydra", 1, None), _row("hydra", 2, None)]
    lim = {"seeds": [0, 1, 2], "asha_stopping": {"time_to_target_s": [5.0, 5.0, 5.0]}}
    got = run_mod.summarize(rows, lim, 900.0)["hydra+faults"]
    assert got["time_to_target_median_s"] == 900.0
    assert got["reached"] == "1/3" and got["reached_target"] == 1


def test_no_update_merging(run_mod: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["run.py", "--update"])
    monkeypatch.setattr(run_mod.shutil, "which", lambda _name: None)   # never runs a cell
    with pytest.raises(SystemExit) as exc:
        run_mod.main()
    assert exc.value.code == 2                    # argparse: no such option


def test_sacct_counts_every_run_of_a_requeued_job(run_mod: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake(cmd: list[str]) -> str:
        seen.append(cmd)
        return ("10|peers-ray|REQUEUED|2|40|80|2026-12-02T10:00:00\n"
                "10|peers-ray|COMPLETED|2|30|60|2026-12-02T10:01:00\n")
    monkeypatch.setattr(run_mod, "watch", fake)
    rows = run_mod.accounting(run_mod._epoch("2026-12-02T10:00:00"), timeout=5)
    assert "-D" in seen[0] and "-X" in seen[0]
    assert sum(int(r["CPUTimeRAW"]) for r in rows) == 140


def test_own_commands_are_measured_apart(run_mod: Any) -> None:
    run_mod.OWN_CPU.clear()
    out = run_mod.own_run([sys.executable, "-c", "print(sum(range(3_000_000)))"])
    assert out.strip() == str(sum(range(3_000_000)))
    assert len(run_mod.OWN_CPU) == 1 and run_mod.OWN_CPU[0] > 0.0


def test_a_plain_cell_that_runs_past_its_timeout_is_a_result(
        run_mod: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 7 / the whole table's budget: a plain (no-fault) search still running at
    --timeout-s is recorded (not finished alone, no wall: it counts at the timeout) and its
    jobs cancelled; it used to end the whole invocation."""
    def timed_out() -> None:
        raise SystemExit("peers: submitit_search.py still running after 60.0 s")
    monkeypatch.setitem(run_mod.LAUNCH, "submitit", lambda *_a: timed_out)
    monkeypatch.setattr(run_mod, "watch", lambda _cmd: "")
    monkeypatch.setattr(run_mod, "sdiag_root", lambda: 0)
    monkeypatch.setattr(run_mod, "sdiag_types", dict)
    monkeypatch.setattr(run_mod, "accounting", lambda _since: [])
    cancelled: list[list[str]] = []
    monkeypatch.setattr(run_mod.subprocess, "run",
                        lambda argv, **_k: cancelled.append(list(argv)))
    args = run_mod.argparse.Namespace(faults=False, timeout_s=60.0)
    got = run_mod.run_cell("submitit", 0, args, tmp_path, 0.05)
    assert got["finished_alone"] is False and got["wall_s"] is None
    assert "still running" in got["why_not"]
    assert cancelled == [["scancel", "-u", "root"]]
    rows = [{**_row("submitit", 0, None), "faults": False, "wall_s": None,
             "finished_alone": False}]
    lim = {"seeds": [0], "asha_stopping": {"time_to_target_s": [5.0]}}
    cell = run_mod.summarize(rows, lim, 60.0)["submitit"]
    assert cell["wall_median_s"] == 60.0 and cell["finished_alone"] == 0


def test_a_plain_cell_whose_launch_fails_ends_the_run(
        run_mod: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: Any) -> None:
        raise SystemExit("peers: dethpc submit failed")
    monkeypatch.setitem(run_mod.LAUNCH, "submitit", broken)
    monkeypatch.setattr(run_mod, "watch", lambda _cmd: "")
    monkeypatch.setattr(run_mod, "sdiag_root", lambda: 0)
    monkeypatch.setattr(run_mod, "sdiag_types", dict)
    args = run_mod.argparse.Namespace(faults=False, timeout_s=60.0)
    with pytest.raises(SystemExit, match="submit failed"):
        run_mod.run_cell("submitit", 0, args, tmp_path, 0.05)
