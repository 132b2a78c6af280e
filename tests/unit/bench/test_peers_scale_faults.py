"""bench/peers_scale/faults: the seeded fault schedule is one per seed, holds the issue's
faults (2 crashes revived after 120 s, 3 preemptions of 2 nodes for 180 s, one login
kill, one slurmctld restart), never hits a node twice at once, keeps injections apart,
and refuses plans that cannot fit; squeue parsing and exposure are exact; a preemption
reserves its nodes for the fault user and submits into the reservation; its verdict
tells a wait the cell's end cut short from Slurm's refusal; a preemptor that did not
start records every job on its nodes and its own pending reason."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from bench.peers_scale.faults import (
    NO_FAULTS,
    FaultEvent,
    FaultKind,
    FaultPlan,
    Verdict,
    cut_short_count,
    exposed,
    fault_schedule,
    parse_show_jobs,
    parse_squeue,
    preempt_diagnostics,
    preempt_verdict,
    preemptor_argv,
    refused_count,
    reservation_argv,
    reservation_name,
)

NODES = [f"g{i}" for i in range(1, 17)]


def test_a_seed_is_one_schedule_for_every_system() -> None:
    assert fault_schedule(1, NODES, 1800) == fault_schedule(1, NODES, 1800)
    assert fault_schedule(1, NODES, 1800) != fault_schedule(2, NODES, 1800)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("horizon", [900.0, 1800.0, 9000.0])
def test_the_issues_faults_in_the_window(seed: int, horizon: float) -> None:
    plan = FaultPlan()
    events = fault_schedule(seed, NODES, horizon, plan)
    kinds = Counter(e.kind for e in events)
    assert kinds == {FaultKind.CRASH: 2, FaultKind.REVIVE: 2, FaultKind.PREEMPT: 3,
                     FaultKind.KILL_LOGIN: 1, FaultKind.CTLD_RESTART: 1}
    assert [e.at_s for e in events] == sorted(e.at_s for e in events)
    for e in events:
        if e.kind is FaultKind.REVIVE:
            continue
        assert plan.window[0] * horizon <= e.at_s <= plan.window[1] * horizon
    crashes = [e for e in events if e.kind is FaultKind.CRASH]
    revives = [e for e in events if e.kind is FaultKind.REVIVE]
    assert sorted((c.at_s + 120.0, c.nodes) for c in crashes) == \
        sorted((r.at_s, r.nodes) for r in revives)
    for p in (e for e in events if e.kind is FaultKind.PREEMPT):
        assert len(set(p.nodes)) == 2 and p.hold_s == 180.0
    # injections (revivals included) at least min_gap apart
    times = sorted(e.at_s for e in events)
    assert all(b - a >= plan.min_gap_s - 1e-9 for a, b in zip(times, times[1:], strict=False))
    # no node under two faults at once
    held = [(e.at_s, e.at_s + e.hold_s, n) for e in events
            if e.kind in (FaultKind.CRASH, FaultKind.PREEMPT) for n in e.nodes]
    for i, (a0, a1, n) in enumerate(held):
        for b0, b1, m in held[i + 1:]:
            assert n != m or a1 < b0 or b1 < a0, (n, (a0, a1), (b0, b1))


@pytest.mark.parametrize(("plan", "nodes", "horizon", "error"), [
    (FaultPlan(), NODES, 100.0, "lengthen the horizon"),
    (FaultPlan(preempt_nodes=3, crashes=0), ["g1", "g2"], 3600.0, "nodes free to preempt"),
    (FaultPlan(), ["g1", "g1"], 3600.0, "distinct"),
    (FaultPlan(), [], 3600.0, "distinct"),
])
def test_plans_that_cannot_fit_are_refused(plan: FaultPlan, nodes: list[str],
                                           horizon: float, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        fault_schedule(0, nodes, horizon, plan)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"crashes": -1}, "counts"), ({"preempt_nodes": 0}, "counts"),
    ({"window": (0.5, 0.4)}, "window"), ({"window": (0.0, 1.5)}, "window"),
    ({"crash_down_s": 0}, "crash_down_s"), ({"min_gap_s": -1}, "min_gap_s"),
])
def test_bad_plans(kwargs: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        FaultPlan(**kwargs)  # type: ignore[arg-type]


def test_no_faults_is_an_empty_schedule() -> None:
    assert fault_schedule(0, NODES, 10.0, NO_FAULTS) == []
    assert NO_FAULTS.injections == 0 and FaultPlan().injections == 7


def test_squeue_rows_and_exposure() -> None:
    text = ("11|dethpc-bench|RUNNING|g1|low|trial-1\n"
            "12_3|dethpc-bg1|RUNNING|g[2-3]|low|bg|with|bars\n"
            "13|dethpc-bench|PENDING||low|trial-2\n"
            "garbage line\n")
    rows = parse_squeue(text)
    assert [r["job"] for r in rows] == ["11", "12_3", "13"]
    assert rows[1]["name"] == "bg|with|bars"

    def expand(spec: str) -> list[str]:
        return {"g1": ["g1"], "g[2-3]": ["g2", "g3"], "": []}[spec]

    assert [r["job"] for r in exposed(rows, ["g3"], expand)] == ["12_3"]
    assert [r["job"] for r in exposed(rows, ["g1", "g2"], expand)] == ["11", "12_3"]
    assert exposed(rows, ["g9"], expand) == []


@pytest.mark.parametrize(("outcomes", "refused"), [
    ([], 0), ([{"refused": False}, {}], 0), ([{"refused": True}, {"refused": False}], 1)])
def test_refused_count(outcomes: list[dict[str, object]], refused: int) -> None:
    assert refused_count(outcomes) == refused


@pytest.mark.parametrize(("outcomes", "cut"), [
    ([], 0), ([{"refused": True}, {"cut_short": False}], 0),
    ([{"cut_short": True, "refused": False}, {"refused": True}], 1)])
def test_cut_short_is_counted_apart_from_refused(outcomes: list[dict[str, object]],
                                                 cut: int) -> None:
    assert cut_short_count(outcomes) == cut
    assert refused_count(outcomes) == sum(bool(o.get("refused")) for o in outcomes)


def test_the_reservation_covers_the_wait_and_the_hold_for_the_fault_user() -> None:
    ev = FaultEvent(97.9, FaultKind.PREEMPT, ("g6", "g15"), 180.0)
    name = reservation_name(1764700000.6, ev)
    assert name == "peers-scale-preempt-1764700000-979"
    # the preemptor's 5 minutes (180 s + 2 min) + 60 s wait + 60 s margin = 7 minutes:
    # the reservation outlasts the preemptor
    assert reservation_argv(name, ev.nodes, ev.hold_s, 60.0) == [
        "scontrol", "create", "reservation", f"ReservationName={name}", "Nodes=g6,g15",
        "Users=dethpc-faults", "StartTime=now", "Duration=7", "Flags=IGNORE_JOBS"]
    assert "Duration=8" in reservation_argv(name, ev.nodes, 180.0, 61.0)
    assert "Duration=3" in reservation_argv(name, ev.nodes, 30.0, 0.0)


def test_the_preemptor_is_submitted_into_its_reservation() -> None:
    argv = preemptor_argv("g15", 180.0, "peers-scale-preempt-1-979")
    assert argv[:8] == ["sbatch", "--parsable", "-p", "high", "-w", "g15", "--exclusive",
                        "--reservation=peers-scale-preempt-1-979"]
    assert argv[-2:] == ["--wrap", "sleep 180"] and argv[argv.index("-t") + 1] == "5"
    # no reservation (its creation failed): the preemptor as before
    assert not any(a.startswith("--reservation") for a in preemptor_argv("g15", 180.0, None))


@pytest.mark.parametrize(("asked", "submitted", "running", "stopped", "verdict"), [
    (2, 2, 2, False, Verdict.STARTED),
    (2, 2, 2, True, Verdict.STARTED),      # both started just as the cell ended
    (2, 2, 1, False, Verdict.REFUSED),     # the wait ran out: g15's never started
    (2, 2, 1, True, Verdict.CUT_SHORT),    # optuna+faults s2: the cell ended 1.4 s in
    (2, 2, 0, True, Verdict.CUT_SHORT),
    (2, 1, 1, False, Verdict.REFUSED),     # sbatch refused one
    (2, 1, 1, True, Verdict.REFUSED),      # ... a refusal whenever the cell ended
    (2, 0, 0, True, Verdict.REFUSED),
])
def test_a_preemptions_verdict(asked: int, submitted: int, running: int, stopped: bool,
                               verdict: Verdict) -> None:
    assert preempt_verdict(asked, submitted, running, stopped) is verdict


SHOW_JOB = (
    "JobId=1339 JobName=bg UserId=dethpc-bg1(1003) GroupId=dethpc-bg1(1003) MCS_label=N/A "
    "Priority=1 Nice=0 Account=bg QOS=normal JobState=RUNNING Reason=None Dependency=(null) "
    "Requeue=1 Restarts=1 BatchFlag=2 Reboot=0 ExitCode=0:0 RunTime=00:00:41 "
    "TimeLimit=00:30:00 SubmitTime=2026-12-02T19:02:58 StartTime=2026-12-02T19:03:23 "
    "EndTime=2026-12-02T19:33:23 PreemptEligibleTime=2026-12-02T19:03:23 "
    "PreemptTime=None Partition=low AllocNode:Sid=h:1 ReqNodeList=g15 NodeList=g15 "
    "Command=sleep 600 WorkDir=/tmp\n"
    "JobId=1400 ArrayJobId=1390 ArrayTaskId=31 JobName=stream UserId=dethpc-bench(1002) "
    "JobState=RUNNING Reason=None Restarts=0 StartTime=2026-12-02T19:04:10 "
    "PreemptTime=None Partition=low NodeList=g[14-15]\n"
    "JobId=1341 JobName=peers-scale-preemptor UserId=dethpc-faults(1009) JobState=PENDING "
    "Reason=Resources Restarts=0 StartTime=Unknown PreemptTime=None Partition=high "
    "ReqNodeList=g15 NodeList=(null) Reservation=peers-scale-preempt-1-979\n"
    "JobId=1402 JobName=x UserId=dethpc-bg2(1004) JobState=RUNNING Reason=None Restarts=0 "
    "StartTime=2026-12-02T19:00:00 PreemptTime=None Partition=low NodeList=g3\n"
    "No jobs in the system\n")


def test_diagnostics_name_every_job_on_the_node_and_the_preemptors_reason() -> None:
    jobs = parse_show_jobs(SHOW_JOB)
    assert [j["JobId"] for j in jobs] == ["1339", "1400", "1341", "1402"]
    assert jobs[0] == {"JobId": "1339", "UserId": "dethpc-bg1(1003)", "JobState": "RUNNING",
                       "Reason": "None", "Restarts": "1",
                       "StartTime": "2026-12-02T19:03:23", "PreemptTime": "None",
                       "Partition": "low", "ReqNodeList": "g15", "NodeList": "g15"}

    def expand(spec: str) -> list[str]:
        return {"g15": ["g15"], "g[14-15]": ["g14", "g15"], "g3": ["g3"]}[spec]

    d = preempt_diagnostics(jobs, ["g15"], ["1341"], expand)
    assert [(j["JobId"], j["JobState"], j["Reason"]) for j in d["preemptors"]] == [
        ("1341", "PENDING", "Resources")]
    assert [(j["JobId"], j.get("ArrayTaskId"), j["Restarts"]) for j in d["jobs_on_nodes"]] \
        == [("1339", None, "1"), ("1400", "31", "0")]


class FakeSlurm:
    """``subprocess.run`` for the injector: the reservation made, the preemptors 1341 and
    1342 accepted, squeue saying ``state`` for them (``waiting`` set at its first answer),
    ``scontrol show job`` answering SHOW_JOB; every argv kept."""

    def __init__(self, state: str) -> None:
        import threading
        self.state = state
        self.calls: list[list[str]] = []
        self.waiting = threading.Event()
        self.next_id = 1341

    def __call__(self, argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        argv = argv[4:] if argv[:1] == ["runuser"] else argv
        self.calls.append(argv)
        out = ""
        if argv[0] == "sbatch":
            out, self.next_id = f"{self.next_id}\n", self.next_id + 1
        elif argv[0] == "squeue" and "-j" in argv:
            out = "".join(f"{j} {self.state}\n" for j in argv[argv.index("-j") + 1].split(","))
            self.waiting.set()
        elif argv[:3] == ["scontrol", "show", "job"]:
            out = SHOW_JOB
        return subprocess.CompletedProcess(argv, 0, out, "")


def _inject(monkeypatch: pytest.MonkeyPatch, state: str, timeout_s: float,
            stop_when_waiting: bool) -> tuple[dict[str, object], FakeSlurm]:
    from bench.peers_scale import faults
    fake = FakeSlurm(state)
    monkeypatch.setattr(faults.subprocess, "run", fake)
    ev = FaultEvent(0.0, FaultKind.PREEMPT, ("g6", "g15"), 600.0)
    inj = faults.FaultInjector([ev], None, lambda: None, {}, start_timeout_s=timeout_s)
    inj.start(1764700000.0 if not stop_when_waiting else __import__("time").time())
    if stop_when_waiting:
        assert fake.waiting.wait(30)
    else:   # the outcome first (the hold's 600 s are cut by the stop)
        inj._thread.join(30)
        for w in inj._workers:
            w.join(30)
    [out] = inj.stop()
    return out, fake


def test_a_wait_the_cells_end_cuts_short_is_not_refused(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    out, fake = _inject(monkeypatch, "PENDING", 600.0, stop_when_waiting=True)
    assert out["cut_short"] is True and out["refused"] is False, out
    assert str(out["reservation"]).startswith("peers-scale-preempt-")
    assert "cut short" in str(out["what"]) and "started_after_s" not in out
    assert [j["JobId"] for j in out["diagnostics"]["preemptors"]] == ["1341"]  # type: ignore[index]
    # the stop released the reservation: its preemptors cancelled, then it deleted
    assert fake.calls[-2:] == [["scancel", "1341", "1342"],
                               ["scontrol", "delete", f"ReservationName={out['reservation']}"]]


def test_a_preemptor_that_does_not_start_in_time_is_refused_with_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out, fake = _inject(monkeypatch, "PENDING", 0.0, stop_when_waiting=False)
    assert out["refused"] is True and "cut_short" not in out
    diag = out["diagnostics"]
    assert [(j["JobId"], j["Reason"]) for j in diag["preemptors"]] == [  # type: ignore[index]
        ("1341", "Resources")]
    assert [j["JobId"] for j in diag["jobs_on_nodes"]] == ["1339", "1400"]  # type: ignore[index]
    assert ["scontrol", "delete", f"ReservationName={out['reservation']}"] in fake.calls


def test_a_started_preemption_records_its_start_and_its_reservation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out, fake = _inject(monkeypatch, "RUNNING", 60.0, stop_when_waiting=False)
    assert out["refused"] is False and "cut_short" not in out and "diagnostics" not in out
    assert isinstance(out["started_after_s"], float)
    name = out["reservation"]
    assert fake.calls[0][:3] == ["squeue", "-h", "-a"]          # the exposure snapshot
    assert fake.calls[1][:4] == ["scontrol", "create", "reservation", f"ReservationName={name}"]
    assert [c for c in fake.calls if c[0] == "sbatch"] == [
        preemptor_argv("g6", 600.0, str(name)), preemptor_argv("g15", 600.0, str(name))]
    assert fake.calls[-1] == ["scontrol", "delete", f"ReservationName={name}"]
