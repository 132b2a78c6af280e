"""bench/peers_scale/metrics: the pure parts, table-driven -- the stored target is the 1%
quantile of the curves, GPU-hours count every run of a requeued job, RPC totals survive a
slurmctld restart, login CPU counts each process once and never the benchmark's own, and
an unreached seed counts at the timeout."""

from __future__ import annotations

from typing import Any

import pytest

from bench.peers_scale.emulator import ReplayCurve, load_curves
from bench.peers_scale.metrics import (
    Fate,
    LoginCpu,
    Proc,
    RpcCounter,
    Verdict,
    alloc_gpus,
    cell_summary,
    fate_figures,
    gpu_hours,
    in_progress,
    parse_sacct,
    parse_stat,
    parse_verdicts,
    regret_at,
    regret_curve,
    sdiag_types,
    sdiag_users,
    stored_target,
    target_loss,
    thrown_figures,
    time_to_target,
    trial_fates,
)
from bench.peers_scale.worklog import EndReason, Thrown, TrialWork


def _curve(i: int, losses: list[float]) -> ReplayCurve:
    return ReplayCurve(index=i, step_s=tuple(1.0 for _ in losses), loss=tuple(losses),
                       val_s=0.0, units_per_step=1)


@pytest.mark.parametrize(("finals", "q", "want"), [
    ([5, 4, 3, 2, 1], 0.0, 1), ([5, 4, 3, 2, 1], 0.25, 2), ([5, 4, 3, 2, 1], 1.0, 5),
    ([float(x) for x in range(101)], 0.01, 1.0)])
def test_target_is_a_quantile_of_the_final_losses(finals: list[float], q: float,
                                                  want: float) -> None:
    curves = [_curve(i, [9.0, f]) for i, f in enumerate(finals)]
    assert target_loss(curves, q) == want


def test_the_stored_target_is_the_curves_one_percent() -> None:
    stored = stored_target()
    curves = load_curves()
    assert stored["quantile"] == 0.01
    assert stored["target_loss"] == target_loss(curves, 0.01)
    assert stored["curves"] == len(curves)


@pytest.mark.parametrize(("tres", "gpus"), [
    ("billing=1,cpu=1,gres/gpu=1,mem=100M,node=1", 1), ("cpu=16,gres/gpu=4,node=1", 4),
    ("cpu=1,mem=100M,node=1", 0), ("", 0), ("gres/gpu:a100=2,gres/gpu=2", 2)])
def test_alloc_gpus(tres: str, gpus: int) -> None:
    assert alloc_gpus(tres) == gpus


def test_gpu_hours_count_every_run_of_a_requeued_job() -> None:
    text = ("100|100|dethpc-bench|REQUEUED|2026-12-02T03:00:00|1800|cpu=1,gres/gpu=1\n"
            "100|100|dethpc-bench|NODE_FAIL|2026-12-02T03:40:00|360|cpu=1,gres/gpu=1\n"
            "100|100|dethpc-bench|COMPLETED|2026-12-02T03:50:00|1800|cpu=1,gres/gpu=1\n"
            "101|101_0|dethpc-bg1|RUNNING|2026-12-02T03:00:00|3600|cpu=4,gres/gpu=4\n"
            "102|102|dethpc-bench|PENDING|Unknown|0|\n"
            "not a row\n")
    rows = parse_sacct(text)
    assert len(rows) == 5
    assert gpu_hours(rows) == {"dethpc-bench": pytest.approx(1.1), "dethpc-bg1": 4.0}


SDIAG = """*******************************************************
Remote Procedure Call statistics by message type
	REQUEST_JOB_INFO                        ( 2003) count:10     ave_time:100
Remote Procedure Call statistics by user
	root            (       0) count:500    ave_time:1   total_time:500
	dethpc-bench    (    1006) count:42     ave_time:1   total_time:42
	dethpc-faults   (    1001) count:7      ave_time:1   total_time:7

Pending RPC statistics
	No pending RPCs
"""


def test_sdiag_users() -> None:
    assert sdiag_users(SDIAG) == {"root": 500, "dethpc-bench": 42, "dethpc-faults": 7}
    assert sdiag_users("") == {}


def test_sdiag_types_are_the_message_type_section_only() -> None:
    assert sdiag_types(SDIAG) == {"REQUEST_JOB_INFO": 10}
    assert sdiag_types("") == {}


@pytest.mark.parametrize(("samples", "totals", "peak", "restarts"), [
    # steady: 10 then 30 more over 2 s
    ([(0, {"u": 5}), (1, {"u": 15}), (3, {"u": 45})], {"u": 40}, 15.0, 0),
    # a restart between t=1 and t=2: counts start again at 0; 4 new ones counted
    ([(0, {"u": 5}), (1, {"u": 15}), (2, {"u": 4}), (3, {"u": 10})], {"u": 20}, 10.0, 1),
    # a user first seen later
    ([(0, {"u": 1}), (1, {"u": 1, "v": 3})], {"u": 0, "v": 3}, 0.0, 0),
    ([(0, {"u": 1})], {}, None, 0),
])
def test_rpc_totals_survive_a_restart(samples: list[tuple[float, dict[str, int]]],
                                      totals: dict[str, int], peak: float | None,
                                      restarts: int) -> None:
    c = RpcCounter()
    for t, counts in samples:
        c.add(t, counts)
    assert c.totals == totals
    assert c.peak_per_s.get("u") == peak
    assert c.restarts == restarts


def test_parse_stat() -> None:
    # pid (comm with ) and spaces) state ppid ... utime stime cutime cstime at 14..17
    fields = ["S", "42"] + ["0"] * 9 + ["100", "50", "30", "20"] + ["0"] * 5
    text = "1234 (a) b (c) " + " ".join(fields)
    assert parse_stat(text, 100) == (42, 2.0)


BENCH, ROOT = 1006, 0


def _p(pid: int, ppid: int, cpu: float, uid: int = BENCH, in_job: bool = False) -> Proc:
    return Proc(pid, ppid, uid, in_job, cpu)


@pytest.mark.parametrize(("samples", "exclude", "want"), [
    # the daemon (reparented to init) and its squeue child: the child reaches its cutime
    ([{1: _p(1, 0, 0, ROOT), 10: _p(10, 1, 1.0), 11: _p(11, 10, 0.2)},
      {1: _p(1, 0, 0, ROOT), 10: _p(10, 1, 1.5)}], set(), 1.5),
    # a job's processes (SLURM_JOB_ID) and another user's are not the login side
    ([{1: _p(1, 0, 0, ROOT), 10: _p(10, 1, 1.0), 20: _p(20, 1, 9.0, in_job=True),
       30: _p(30, 1, 5.0, uid=1001)}], set(), 1.0),
    # a command the runner measures itself (runuser 5 -> submit 6 -> the daemon 7, not yet
    # detached): left out; once reparented to init the daemon counts, all its CPU
    ([{1: _p(1, 0, 0, ROOT), 5: _p(5, 1, 0, ROOT), 6: _p(6, 5, 0.4), 7: _p(7, 6, 0.1)},
      {1: _p(1, 0, 0, ROOT), 7: _p(7, 1, 0.9)}], {5}, 0.9),
    # two roots, each counted at its last reading; a process that died stays counted
    ([{10: _p(10, 1, 1.0), 12: _p(12, 1, 2.0)}, {10: _p(10, 1, 3.0)}], set(), 5.0),
    # dethpc's supervisor 10 and its daemon 11, never killed: the daemon counts while it
    # runs (the root alone was 0.1: the daemon is reaped only when it ends)
    ([{1: _p(1, 0, 0, ROOT), 10: _p(10, 1, 0.1), 11: _p(11, 10, 2.0)},
      {1: _p(1, 0, 0, ROOT), 10: _p(10, 1, 0.1), 11: _p(11, 10, 4.0)}], set(), 4.1),
    # the daemon killed (reaped: in the supervisor's cutime) and started again
    ([{10: _p(10, 1, 0.1), 11: _p(11, 10, 4.0)},
      {10: _p(10, 1, 4.1), 12: _p(12, 10, 0.5)}], set(), 4.6),
    # a live grandchild counts too, under a live child
    ([{10: _p(10, 1, 0.1), 11: _p(11, 10, 2.0), 13: _p(13, 11, 0.3)}], set(), 2.4),
    # a root dies, its child is reparented to init: counted once, not twice
    ([{10: _p(10, 1, 1.0), 11: _p(11, 10, 2.0)}, {11: _p(11, 1, 3.0)}], set(), 4.0),
    # a child measured by the runner stays out while its measured parent lives
    ([{5: _p(5, 1, 0, ROOT), 6: _p(6, 5, 0.4), 7: _p(7, 6, 0.1), 10: _p(10, 1, 1.0)}],
     {5}, 1.0),
])
def test_login_cpu(samples: list[dict[int, Proc]], exclude: set[int], want: float) -> None:
    cpu = LoginCpu(uid=BENCH, exclude=exclude)
    for s in samples:
        cpu.add(s)
    assert cpu.seconds == pytest.approx(want)


VALS = [(100.0, 0.9), (103.0, 0.5), (110.0, 0.7), (120.0, 0.3), (130.0, 0.35)]


@pytest.mark.parametrize(("target", "want"), [(0.5, 3.0), (0.3, 20.0), (0.29, None),
                                              (1.0, 0.0)])
def test_time_to_target(target: float, want: float | None) -> None:
    assert time_to_target(VALS, target, t0=100.0) == want


@pytest.mark.parametrize(("at", "want"), [(0.0, 0.8), (5.0, 0.4), (60.0, 0.2), (-1.0, None)])
def test_regret_at(at: float, want: float | None) -> None:
    got = regret_at(VALS, at, t0=100.0, best=0.1)
    assert got == (None if want is None else pytest.approx(want))


def test_regret_curve_steps_down_at_improvements() -> None:
    assert regret_curve(VALS, 100.0, 0.1) == [(0.0, pytest.approx(0.8)),
                                              (3.0, pytest.approx(0.4)),
                                              (20.0, pytest.approx(0.2))]


def _run(seed: int, ttt: float | None, **kw: Any) -> dict[str, Any]:
    return {"seed": seed, "gpus": 64, "trials": 32, "time_to_target_s": ttt,
            "regret_at_fixed": 0.1, "wall_s": 300.0, "trials_lost": 0,
            "gpu_hours_allocated": 1.0, "useful_pct": 90.0, "gpu_hours_redone": 0.1,
            "gpu_hours_lost": 0.0, "human_actions": 0, "rpcs_per_trial": 5.0,
            "peak_rpcs_per_s": 3.0, "login_cpu_s": 10.0, "slurmctld_cpu_s": 2.0, **kw}


@pytest.mark.parametrize(("ttts", "median", "reached"), [
    ([100.0, 200.0, 300.0], 200.0, "3/3"),
    ([100.0, None, None], 600.0, "1/3"),       # unreached seeds at the timeout
    ([None], 600.0, "0/1"),
    ([50.0, None], 325.0, "1/2"),
])
def test_cell_counts_unreached_seeds_at_the_timeout(ttts: list[float | None], median: float,
                                                    reached: str) -> None:
    s = cell_summary([_run(i, t) for i, t in enumerate(ttts)], timeout_s=600.0)
    assert s["time_to_target_median_s"] == median
    assert s["reached"] == reached
    assert s["seeds"] == list(range(len(ttts)))


def test_cell_sums_losses_and_keeps_the_worst_peak() -> None:
    s = cell_summary([_run(0, 1.0, trials_lost=1, human_actions=1, peak_rpcs_per_s=9.0),
                      _run(1, 1.0, gpu_hours_lost=0.5)], timeout_s=10.0)
    assert (s["trials_lost"], s["human_actions"], s["peak_rpcs_per_s"],
            s["gpu_hours_lost"], s["gpu_hours_redone"]) == (1, 1, 9.0, 0.5, 0.2)
    with pytest.raises(ValueError):
        cell_summary([], 1.0)


def _rec(trial: str, event: str, wall: float) -> dict[str, Any]:
    return {"trial": trial, "run": "r", "event": event, "step": 0, "wall": wall}


@pytest.mark.parametrize(("records", "want"), [
    ([_rec("a", "start", 0), _rec("a", "step", 95)], {"a"}),          # stepping at the end
    ([_rec("a", "start", 0), _rec("a", "step", 50)], set()),          # silent: killed, lost
    ([_rec("a", "start", 0), _rec("a", "end", 99)], set()),           # ended
    ([_rec("a", "start", 0), _rec("a", "end", 50), _rec("a", "start", 98)], {"a"}),  # resumed
    ([_rec("a", "start", 0), _rec("b", "start", 92), _rec("b", "ready", 93)], {"b"}),
])
def test_in_progress_at_the_end(records: list[dict[str, Any]], want: set[str]) -> None:
    assert in_progress(records, ended=100.0, window_s=10.0) == want


def test_fault_digest_keeps_each_outcome_and_counts_the_systems_exposure() -> None:
    """An outcome of the dethpc smoke (peers_scale_smoke.json, trimmed): the squeue
    snapshot goes, the exposure is the system user's jobs on the hit nodes only."""
    from bench.peers_scale.metrics import fault_digest
    preempt = {"at_s": 30.4, "kind": "preempt", "nodes": ["g12", "g14"], "refused": False,
               "what": "high jobs ['673', '674'] running on ['g12', 'g14'] for 180 s",
               "took_s": 9.4, "squeue": [{"job": "1", "user": "dethpc-bg1"}],
               "exposed": [{"job": "643_5", "user": "dethpc-bench", "nodes": "g12"},
                           {"job": "612", "user": "dethpc-bg2", "nodes": "g14"},
                           {"job": "643_9", "user": "dethpc-bench", "nodes": "g14"}]}
    skipped = {"at_s": 391.3, "kind": "node_revive", "nodes": ["g13"], "refused": False,
               "skipped": "the search ended before it was due"}
    # optuna+faults s2 of the first full run: the cell ended 1.4 s into the wait
    cut = {"at_s": 94.7, "kind": "preempt", "nodes": ["g3", "g9"], "refused": False,
           "cut_short": True, "reservation": "peers-scale-preempt-1-947", "took_s": 1.4,
           "diagnostics": {"preemptors": [{"JobId": "9", "Reason": "Resources"}],
                           "jobs_on_nodes": []}}
    runs: list[dict[str, Any]] = [{"cell": "dethpc-pool+faults", "metrics": {"seed": 0},
                                   "fault_outcomes": [preempt, skipped, cut]},
                                  {"cell": "dethpc-pool", "metrics": {"seed": 0},
                                   "fault_outcomes": []}]
    got = fault_digest(runs, "dethpc-bench")
    assert list(got) == ["dethpc-pool+faults-s0"]
    first, second, third = got["dethpc-pool+faults-s0"]
    assert third["cut_short"] is True and third["refused"] is False
    assert third["reservation"] == cut["reservation"]
    assert third["diagnostics"] == cut["diagnostics"]
    assert "squeue" not in first and "exposed" not in first
    assert first["system_jobs_exposed"] == 2 and first["refused"] is False
    assert second["skipped"] and second["system_jobs_exposed"] == 0


#: issue 48 item 8: what every summary cell must hold
ITEM_8 = ("gpus", "trials", "seeds", "reached", "time_to_target_median_s", "trials_lost",
          "gpu_hours_redone", "gpu_hours_lost", "human_actions", "rpcs_per_trial",
          "peak_rpcs_per_s", "login_cpu_s")


def test_a_cell_holds_item_8s_fields_and_the_fault_counts() -> None:
    s = cell_summary([_run(0, 1.0, rpcs=160, gpu_hours_executed=0.25, faults_injected=7,
                           faults_skipped=1, faults_refused=0, faults_cut_short=1),
                      _run(1, 2.0, rpcs=100, gpu_hours_executed=0.5, faults_injected=8)],
                     timeout_s=10.0)
    assert all(k in s for k in ITEM_8)
    assert (s["rpcs_median"], s["gpu_hours_executed"], s["faults_injected"],
            s["faults_skipped"], s["faults_refused"], s["faults_cut_short"]) == \
        (130.0, 0.75, 15, 1, 0, 1)


@pytest.mark.parametrize(("runs", "thrown", "never"), [
    ([{"gpu_hours_thrown": 0.002, "runs_cut_never_resumed": 1},
      {"gpu_hours_thrown": 0.0005, "runs_cut_never_resumed": 0}], 0.0025, 1),
    ([{}, {}], None, None),                    # runs recorded before they were counted
    ([{"gpu_hours_thrown": 0.002, "runs_cut_never_resumed": 1}, {}], None, None),
])
def test_a_cell_sums_the_work_thrown_away_or_says_it_was_not_counted(
        runs: list[dict[str, Any]], thrown: float | None, never: int | None) -> None:
    s = cell_summary([_run(i, 1.0, **r) for i, r in enumerate(runs)], timeout_s=10.0)
    assert (s["gpu_hours_thrown"], s["runs_cut_never_resumed"]) == (thrown, never)
    assert never is None or isinstance(s["runs_cut_never_resumed"], int)


def test_thrown_figures_sum_a_runs_trials() -> None:
    got = thrown_figures([Thrown("a", 2, 1, 5, 1800.0), Thrown("b", 1, 0, 1, 36.0)])
    assert got == {"gpu_hours_thrown": 0.51, "runs_cut": 3, "runs_cut_never_resumed": 1}


# ------------------------------------------------------------------ trial fates (issue 48)
def _tw(trial: str, decided: bool, last_end: str | None, lost_s: float = 0.0,
        elsewhere: bool = False) -> TrialWork:
    return TrialWork(trial=trial, decided=decided or elsewhere, runs=1, executed=1,
                     useful=0, redone=0, lost=1, executed_s=lost_s, redone_s=0.0,
                     lost_s=lost_s, decided_elsewhere=elsewhere,
                     last_end=None if last_end is None else EndReason(last_end))


D, L, G = Verdict.DECIDED, Verdict.LIVE, Verdict.GAVE_UP
# (case, log decided, last end, finished, in progress, system's verdict, fate)
FATES = [
    ("completed in the log", True, "completed", True, False, None, Fate.DECIDED),
    ("stopped in the log, system says error", True, "stopped", True, False, G, Fate.DECIDED),
    ("stopped by the searcher, killed in its save (pool trial 216)",
     False, None, True, False, D, Fate.DECIDED),
    ("Optuna PRUNED, the process died after", False, "failed", True, False, D, Fate.DECIDED),
    ("preempted and waiting for its requeue at the cut", False, "preempted", False, False,
     None, Fate.UNFINISHED),
    ("killed, the system still runs it (requeue/lease)", False, None, False, False, None,
     Fate.UNFINISHED),
    ("running at the cut", False, None, False, True, None, Fate.UNFINISHED),
    ("the system says queued again after a failure", False, "failed", False, False, L,
     Fate.UNFINISHED),
    ("dethpc ERROR: max_restarts spent", False, "failed", False, False, G, Fate.LOST),
    ("Ray ERROR while still in progress by the log", False, None, False, True, G, Fate.LOST),
    ("failed at a cut, no word from the system", False, "failed", False, False, None,
     Fate.LOST),
    ("the search ended without deciding it", False, "preempted", True, False, None,
     Fate.LOST),
    ("the search ended, the system says live: only a person's restore would run it",
     False, None, True, False, L, Fate.LOST),
]


@pytest.mark.parametrize(("decided", "last_end", "finished", "running", "verdict", "fate"),
                         [c[1:] for c in FATES], ids=[c[0] for c in FATES])
def test_trial_fates(decided: bool, last_end: str | None, finished: bool, running: bool,
                     verdict: Verdict | None, fate: Fate) -> None:
    got = trial_fates([_tw("t", decided, last_end)], finished=finished,
                      in_progress={"t"} if running else set(),
                      verdicts=None if verdict is None else {"t": verdict})
    assert got == {"t": fate}


def test_fate_figures_split_trials_and_hours() -> None:
    work = [_tw("a", True, "completed", 36.0), _tw("b", False, None, 360.0),
            _tw("c", False, "preempted", 720.0), _tw("d", False, None, 72.0, elsewhere=True)]
    fates = {"a": Fate.DECIDED, "b": Fate.LOST, "c": Fate.UNFINISHED, "d": Fate.DECIDED}
    assert fate_figures(work, fates) == {
        "trials_lost": 1, "trials_unfinished": 1, "trials_decided_by_system": 1,
        "gpu_hours_lost": 0.13, "gpu_hours_unfinished": 0.2}


def test_parse_verdicts() -> None:
    assert parse_verdicts({"trial_states": {"COMPLETED": 3}}) is None
    assert parse_verdicts({"verdicts": {"7": "decided", "t3": "gave_up"}}) == {
        "7": Verdict.DECIDED, "t3": Verdict.GAVE_UP}
