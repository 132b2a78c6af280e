"""The requeue decision (``dethpc.launch.run_end``) as a table: every kind of job, every
signal, every answer of ``scontrol``; and the command the job scripts call."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dethpc.backends.slurm_ratelimit import rpc_cost
from dethpc.common.exitcodes import EXIT_PREEMPTED, EXIT_STOPPED, LOCAL_REQUEUE_EXIT
from dethpc.common.exitcodes import ExitReason as R
from dethpc.launch.run_end import (
    RunDecision,
    RunFacts,
    RunKind,
    SlurmJobFacts,
    ask_scontrol,
    decide,
    needs_job_facts,
    parse_job_facts,
)

T, S, W = RunKind.TRIAL, RunKind.SCRIPT, RunKind.WORKER
NOW = 1_000_000.0
RUNNING = SlurmJobFacts(state="RUNNING", end_ts=NOW + 3600)
NEAR_END = SlurmJobFacts(state="RUNNING", end_ts=NOW + 100)        # the walltime's early signal
PREEMPTING = SlurmJobFacts(state="RUNNING", end_ts=NOW + 100, preempted=True)
NO_LIMIT = SlurmJobFacts(state="RUNNING")
TIMEOUT = SlurmJobFacts(state="TIMEOUT")
REQUEUED_BY_SLURM = SlurmJobFacts(state="PENDING", restarts=1)
CANCELLED = SlurmJobFacts(state="CANCELLED")
NO_ANSWER = SlurmJobFacts()


def facts(kind: RunKind, rc: int, signal: str = "", *, local: bool = False, hook_rc: int = 0,
          acked: str = "", forward: bool = False, rehearsed: bool = False,
          hung: bool = False) -> RunFacts:
    return RunFacts(kind=kind, rc=rc, signal=signal, signal_at=NOW if signal else 0.0,
                    in_place=not local, grace_s=60, hook_rc=hook_rc, acked=acked,
                    forward=forward, run=0, rehearsed_limit=rehearsed, hung=hung)


TABLE: list[tuple[str, RunFacts, SlurmJobFacts | None, RunDecision]] = [
    # managed trials: the step's exit codes
    ("trial completed", facts(T, 0), None, RunDecision(R.COMPLETED, False, 0)),
    ("trial stopped by the searcher", facts(T, EXIT_STOPPED), None,
     RunDecision(R.STOPPED, False, 0)),
    ("trial failed", facts(T, 3), RUNNING, RunDecision(R.ERROR, False, 3)),
    # the step died of a requeue's kill before the batch shell got its TERM (which the
    # shell then ignored): Slurm already counts the next run, so the run was requeued
    ("trial's step killed by scontrol requeue, no signal seen", facts(T, 143),
     REQUEUED_BY_SLURM, RunDecision(R.REQUEUED, False, 0)),
    ("trial failed, slurmctld never answered", facts(T, 3), NO_ANSWER,
     RunDecision(R.ERROR, False, 3)),
    # the hang watchdog's end (hung.json names this run): counted, never requeued
    ("trial ended by the watchdog", facts(T, 143, "TERM", hung=True), CANCELLED,
     RunDecision(R.HUNG, False, 143)),
    ("script ended by the watchdog", facts(S, 143, "TERM", hung=True), CANCELLED,
     RunDecision(R.HUNG, False, 143)),
    ("trial completed as the watchdog struck", facts(T, 0, hung=True), None,
     RunDecision(R.COMPLETED, False, 0)),
    ("trial's hook failed", facts(T, 7, hook_rc=7), RUNNING, RunDecision(R.ERROR, False, 7)),
    ("trial preempted: grace running", facts(T, EXIT_PREEMPTED, "USR2"), PREEMPTING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("trial preempted, no user signal: TERM in the grace", facts(T, EXIT_PREEMPTED, "TERM"),
     PREEMPTING, RunDecision(R.PREEMPTED, True, 0)),
    ("trial's walltime signal", facts(T, EXIT_PREEMPTED, "USR2"), NEAR_END,
     RunDecision(R.TIME_LIMIT, True, 0)),
    ("trial signalled far from its end", facts(T, EXIT_PREEMPTED, "USR2"), RUNNING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("trial signalled, no time limit", facts(T, EXIT_PREEMPTED, "USR2"), NO_LIMIT,
     RunDecision(R.PREEMPTED, True, 0)),
    ("trial's rehearsed time limit (dethpc trial preempt --time-limit)",
     facts(T, EXIT_PREEMPTED, "USR2", rehearsed=True), RUNNING,
     RunDecision(R.TIME_LIMIT, True, 0)),
    ("a rehearsed limit that Slurm requeued meanwhile", facts(
        T, EXIT_PREEMPTED, "TERM", rehearsed=True), REQUEUED_BY_SLURM,
     RunDecision(R.REQUEUED, False, 0)),
    ("script's rehearsed time limit", facts(S, 0, "USR2", acked="signal", rehearsed=True),
     RUNNING, RunDecision(R.TIME_LIMIT, True, 0)),
    ("trial ran past the limit: Slurm's TERM", facts(T, EXIT_PREEMPTED, "TERM"), TIMEOUT,
     RunDecision(R.TIME_LIMIT, False, 0)),
    ("trial requeued by scontrol requeue", facts(T, EXIT_PREEMPTED, "TERM"),
     REQUEUED_BY_SLURM, RunDecision(R.REQUEUED, False, 0)),
    ("trial requeued by Slurm after the early signal", facts(T, EXIT_PREEMPTED, "USR2"),
     REQUEUED_BY_SLURM, RunDecision(R.PREEMPTED, False, 0)),
    ("trial scancel'd", facts(T, EXIT_PREEMPTED, "TERM"), CANCELLED,
     RunDecision(R.CANCELLED, False, 0)),
    ("trial: slurmctld never answered", facts(T, EXIT_PREEMPTED, "USR2"), NO_ANSWER,
     RunDecision(R.PREEMPTED, False, 0)),
    ("trial killed by the signal before its handler", facts(T, 140, "USR2"), RUNNING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("trial killed by a signal nobody sent the shell", facts(T, 137), RUNNING,
     RunDecision(R.ERROR, False, 137)),
    ("trial's hook failed after a signal", facts(T, 140, "USR2", hook_rc=1), RUNNING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("trial completed despite a signal", facts(T, 0, "USR2"), None,
     RunDecision(R.COMPLETED, False, 0)),
    ("trial preempted, local", facts(T, EXIT_PREEMPTED, "USR2", local=True), None,
     RunDecision(R.PREEMPTED, False, LOCAL_REQUEUE_EXIT)),
    ("trial failed, local", facts(T, 2, local=True), None, RunDecision(R.ERROR, False, 2)),
    # wrapped scripts: what should-stop answered, the signal, forwarding
    ("script completed", facts(S, 0), None, RunDecision(R.COMPLETED, False, 0)),
    ("script stopped at should-stop", facts(S, 0, acked="stop"), None,
     RunDecision(R.STOPPED, False, 0)),
    ("script paused at should-stop", facts(S, 0, acked="pause"), None,
     RunDecision(R.STOPPED, False, 0)),
    ("script stopped on the signal at should-stop", facts(S, 0, "USR2", acked="signal"),
     RUNNING, RunDecision(R.PREEMPTED, True, 0)),
    ("script got the forwarded signal, exited 0", facts(S, 0, "USR2", forward=True), RUNNING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("script got TERM, forwarded, exited 0", facts(S, 0, "TERM", forward=True), None,
     RunDecision(R.COMPLETED, False, 0)),
    ("script finished after an unforwarded signal", facts(S, 0, "USR2"), None,
     RunDecision(R.COMPLETED, False, 0)),
    ("script failed", facts(S, 1), RUNNING, RunDecision(R.ERROR, False, 1)),
    ("script's step killed by its own scontrol requeue, no signal seen (Lightning)",
     facts(S, 143), REQUEUED_BY_SLURM, RunDecision(R.REQUEUED, False, 0)),
    ("script's step ended by the requeue, the job still completing",
     facts(S, 1), SlurmJobFacts(state="COMPLETING", restarts=1), RunDecision(R.REQUEUED, False, 0)),
    ("script failed in the job's time limit (TERM unseen)", facts(S, 143), TIMEOUT,
     RunDecision(R.ERROR, False, 143)),
    ("script killed at the limit", facts(S, 143, "TERM"), TIMEOUT,
     RunDecision(R.TIME_LIMIT, False, 0)),
    ("script killed in the preemption grace", facts(S, 143, "TERM"), PREEMPTING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("script requeued by scontrol requeue", facts(S, 143, "TERM"), REQUEUED_BY_SLURM,
     RunDecision(R.REQUEUED, False, 0)),
    ("script scancel'd", facts(S, 143, "TERM"), CANCELLED, RunDecision(R.CANCELLED, False, 0)),
    ("script preempted, local", facts(S, 143, "USR2", local=True), None,
     RunDecision(R.PREEMPTED, False, LOCAL_REQUEUE_EXIT)),
    # pool workers: 85 is "I handed my lease back on a signal"
    ("worker idle exit", facts(W, 0), None, RunDecision(R.COMPLETED, False, 0)),
    ("worker failed", facts(W, 1), None, RunDecision(R.ERROR, False, 1)),
    ("worker handed back, job running", facts(W, LOCAL_REQUEUE_EXIT, "USR2"), RUNNING,
     RunDecision(R.PREEMPTED, True, 0)),
    ("worker handed back, cancelled", facts(W, LOCAL_REQUEUE_EXIT), CANCELLED,
     RunDecision(R.PREEMPTED, False, 0)),
    ("worker handed back, Slurm requeued it", facts(W, LOCAL_REQUEUE_EXIT), REQUEUED_BY_SLURM,
     RunDecision(R.PREEMPTED, False, 0)),
    ("worker handed back, local", facts(W, LOCAL_REQUEUE_EXIT, local=True), None,
     RunDecision(R.PREEMPTED, False, LOCAL_REQUEUE_EXIT)),
]


@pytest.mark.parametrize(("case", "run", "job", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_decision_table(case: str, run: RunFacts, job: SlurmJobFacts | None,
                        expected: RunDecision) -> None:
    assert decide(run, job) == expected
    # Slurm is asked exactly when the answer can depend on it
    assert needs_job_facts(run) == (job is not None), case


def test_every_kind_decides_a_preemption_the_same_way() -> None:
    """One decision by construction: a run that stopped on the early signal is judged by
    the job's state alone, whatever ran in it."""
    stopped = {T: EXIT_PREEMPTED, S: 143, W: LOCAL_REQUEUE_EXIT}
    for job in (RUNNING, NEAR_END, PREEMPTING, TIMEOUT, CANCELLED):
        requeues = {kind: decide(facts(kind, rc, "USR2"), job).requeue
                    for kind, rc in stopped.items()}
        assert len(set(requeues.values())) == 1, (job, requeues)


SHOW_JOB = ("JobId=77 ArrayJobId=70 ArrayTaskId=7 JobName=x JobState={state} Reason=None "
            "Requeue=1 Restarts={restarts} BatchFlag=1 RunTime=00:01:02 TimeLimit=00:30:00 "
            "SubmitTime=2026-11-29T10:00:00 StartTime=2026-11-29T10:00:01 "
            "EndTime={end} Deadline=N/A PreemptEligibleTime=2026-11-29T10:00:01 "
            "PreemptTime={preempt} SuspendTime=None\n")


@pytest.mark.parametrize(("state", "restarts", "end", "preempt", "expected"), [
    ("RUNNING", 0, "2026-11-29T10:30:01", "None",
     SlurmJobFacts("RUNNING", 0, time.mktime((2026, 11, 29, 10, 30, 1, 0, 0, -1)), False)),
    ("RUNNING", 2, "Unknown", "2026-11-29T10:05:00", SlurmJobFacts("RUNNING", 2, 0.0, True)),
    ("TIMEOUT", 1, "2026-11-29T10:30:01", "None",
     SlurmJobFacts("TIMEOUT", 1, time.mktime((2026, 11, 29, 10, 30, 1, 0, 0, -1)), False)),
    ("PENDING", 1, "Unknown", "None", SlurmJobFacts("PENDING", 1, 0.0, False)),
])
def test_parse_job_facts(state: str, restarts: int, end: str, preempt: str,
                         expected: SlurmJobFacts) -> None:
    text = SHOW_JOB.format(state=state, restarts=restarts, end=end, preempt=preempt)
    # a heterogeneous job prints its leader first: the first record decides
    assert parse_job_facts(text + SHOW_JOB.format(state="PENDING", restarts=9, end="Unknown",
                                                  preempt="None")) == expected


def test_scontrol_is_asked_again_while_slurmctld_does_not_answer() -> None:
    answers = [(1, "slurm_load_jobs error: Socket timed out on send/recv operation"),
               (1, "slurm_load_jobs error: Slurmctld(primary) at ctl is DOWN"),
               (0, SHOW_JOB.format(state="RUNNING", restarts=0, end="Unknown", preempt="None"))]
    asked: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str]:
        asked.append(argv)
        return answers[len(asked) - 1]

    assert ask_scontrol("70_7", run, pause_s=0).state == "RUNNING"
    assert asked == [["scontrol", "--local", "-o", "show", "job", "70_7"]] * 3
    gone: list[list[str]] = []
    assert ask_scontrol("70_8", lambda a: (gone.append(a), (1, "Invalid job id specified"))[1],
                        pause_s=0) == SlurmJobFacts()
    assert len(gone) == 1  # a job slurmctld does not know is not asked about again


def test_the_jobs_question_about_itself_skips_the_federation_rpc() -> None:
    """A run's ``scontrol show job`` of its own job is ``--local``: 1 slurmctld RPC
    (JOB_INFO_SINGLE) instead of 2 (FED_INFO first), in the second a preemption ends
    many runs together (issue 48: a pool's 5 preempted workers made 15 RPCs at once)."""
    asked: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str]:
        asked.append(argv)
        return 0, SHOW_JOB.format(state="RUNNING", restarts=0, end="Unknown", preempt="None")

    ask_scontrol("71_3", run, pause_s=0)
    assert asked == [["scontrol", "--local", "-o", "show", "job", "71_3"]]
    assert rpc_cost(asked[0]) == 1


def _command(args: list[str], env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "dethpc.launch.run_end", *args],
                         capture_output=True, text=True, check=True, env=env).stdout
    return dict(w.split("=", 1) for w in shlex.split(out))


@pytest.mark.parametrize(("slurm_env", "ref"), [
    ({"SLURM_JOB_ID": "123"}, "123"),                                   # a plain or het job
    ({"SLURM_JOB_ID": "125", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "5"}, "120_5"),
    ({}, "0"),
])
def test_the_command_records_the_run_under_the_jobs_own_ref(
        tmp_path: Path, slurm_env: dict[str, str], ref: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "SLURM_RESTART_COUNT": "2", **slurm_env}
    (tmp_path / "exits.jsonl").write_text('{"reason": "preempted", "code": 80')  # cut by a kill
    got = _command(["--kind", "trial", "--rc", "3", "--trial-dir", str(tmp_path), "--local"], env)
    assert got == {"reason": "error", "requeue": "0", "exit_code": "3", "job_state": "",
                   "JOB_REF": ref}
    lines = (tmp_path / "exits.jsonl").read_text().splitlines()
    rec = json.loads(lines[-1])
    assert (rec["reason"], rec["code"], rec["restart"], rec["job"]) == ("error", 3, 2, ref)
    # a later run of the same job that Slurm started after a completed one
    _command(["--kind", "trial", "--rc", "0", "--trial-dir", str(tmp_path), "--local"], env)
    start = _command(["start", "--trial-dir", str(tmp_path)], env)
    assert start == {"JOB_REF": ref, "done_already": "1"}
    assert json.loads((tmp_path / "exits.jsonl").read_text().splitlines()[-1])["reason"] \
        == "completed"
    assert _command(["start"], env) == {"JOB_REF": ref, "done_already": "0"}


def test_a_script_run_reads_what_should_stop_answered_in_this_run(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_ID": "9"}
    (tmp_path / "stop-acks.jsonl").write_text(
        '{"run": 1, "why": "pause", "time": 50}\n{"run": 0, "why": "stop", "time": 200}\n'
        '{"run": 1, "why": "stop", "time": 150}\n')
    base = ["--kind", "script", "--rc", "0", "--trial-dir", str(tmp_path), "--local"]
    assert _command([*base, "--started-at", "100"], env)["reason"] == "stopped"
    # an answer from before this run started is an earlier run's (a job submitted again)
    assert _command([*base, "--started-at", "160"], env)["reason"] == "completed"


def test_a_signal_while_the_decision_runs_does_not_lose_the_record(tmp_path: Path) -> None:
    """The end of a run ignores the job's signals (``trap ''`` in _run_end.j2, inherited
    by the python): Slurm's TERM at the end of a preemption's grace, or scontrol
    requeue's, may come while the decision asks scontrol. Here the ``scontrol`` it asks
    signals the whole process group (batch shell, python, itself) before it answers;
    without the ignore the python dies and the run has no exit record."""
    from dethpc.jobs.render import make_env

    macro = make_env().get_template("_run_end.j2").module.run_end  # type: ignore[attr-defined]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\nkill -TERM 0; kill -USR1 0\n"
        "echo 'JobId=7 JobState=RUNNING Restarts=0 EndTime=Unknown PreemptTime=None'\n")
    (bin_dir / "scontrol").chmod(0o755)
    script = "\n".join([
        f"TRIAL_DIR={shlex.quote(str(tmp_path))}", "rc=80; got_signal=USR1; signal_at=1; hook_rc=0",
        str(macro(sys.executable, "trial", "USR1", 30, True, hook=True)),
        'echo "reason=$reason requeue=$requeue exit_code=$exit_code"'])
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                       timeout=60, start_new_session=True, check=False)
    assert (p.returncode, p.stdout.strip()) == (0, "reason=preempted requeue=1 exit_code=0"), \
        p.stderr
    rec = json.loads((tmp_path / "exits.jsonl").read_text())
    assert (rec["reason"], rec["job"], rec["signal"]) == ("preempted", "7", "USR1")


def test_a_requeue_whose_term_reaches_the_shell_after_its_step_is_no_restart(
        tmp_path: Path) -> None:
    """The interleaving of the fresh machine's CI failure (Lightning's own ``scontrol
    requeue``, tests/slurm/test_site_scripts_slurm.py), forced: the requeue's kill ends
    the script's step first, so the wrapper's ``wait`` returns 143 with no signal seen;
    the TERM meant for the batch shell arrives only while the end of the run ignores it
    (here: sent by the ``scontrol`` the decision asks, which answers as slurmctld does
    once it has requeued the job: the next run counted). The run is recorded as
    requeued (free), never as an error (which the daemon counts as a restart)."""
    from dethpc.jobs.render import make_env

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n"
        'if [ -e "$TRIAL_DIR/requeued" ]; then kill -TERM 0\n'
        "  echo 'JobId=7 JobState=COMPLETING Restarts=1 EndTime=Unknown PreemptTime=None'\n"
        "else echo 'JobId=7 JobState=RUNNING Restarts=0 EndTime=Unknown PreemptTime=None'\n"
        "fi\n")
    (bin_dir / "scontrol").chmod(0o755)
    # the user's step: the requeue is issued (Slurm counts run 1), then its kill ends it
    step = "bash -c 'touch \"$TRIAL_DIR/requeued\"; kill -TERM $$'"
    body = make_env().from_string(
        '{% from "_wrapped_run.j2" import run_script %}'
        '{% call run_script("lit.sh", step, "USR1", 90, true, py, bin, false) %}'
        '{% endcall %}').render(step=step, py=sys.executable, bin=str(bin_dir))
    script = f"export TRIAL_DIR={shlex.quote(str(tmp_path))}\n{body}"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                       timeout=120, start_new_session=True, check=False)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    (rec,) = [json.loads(line) for line in (tmp_path / "exits.jsonl").read_text().splitlines()]
    got = (rec["reason"], rec["restart"], rec["code"], rec["signal"])
    assert got == ("requeued", 0, 143, ""), (rec, p.stderr)


@pytest.mark.parametrize(("mark", "expected"), [
    ({"what": "time_limit", "job": "7_1", "run": 2, "time": 1}, True),
    ({"what": "preemption", "job": "7_1", "run": 2, "time": 1}, False),
    ({"what": "time_limit", "job": "7_1", "run": 1, "time": 1}, False),   # an earlier run's
    ({"what": "time_limit", "job": "8_1", "run": 2, "time": 1}, False),   # another job's
    ("not an object", False),
    (None, False),                                                         # no rehearsal
])
def test_a_time_limit_rehearsal_marks_its_own_job_and_run(
        tmp_path: Path, mark: object, expected: bool) -> None:
    from dethpc.launch.run_end import rehearsed_limit

    if mark is not None:
        (tmp_path / "rehearsal.json").write_text(json.dumps(mark))
    assert rehearsed_limit(tmp_path, "7_1", 2) is expected


def _on_signal(script: str) -> str:
    """The ``on_signal`` function of a rendered job script."""
    import re

    found = re.search(r"^on_signal\(\) \{\n.*?^\}\n", script, re.M | re.S)
    assert found, script
    return found.group(0)


def _trial_script() -> str:
    from dethpc.config import parse_experiment_config
    from dethpc.config.cluster import parse_cluster_config
    from dethpc.jobs.jobscript import trial_script

    cluster = parse_cluster_config({"backend": "slurm", "runs_root": "/r", "default_pool": "p",
                                    "pools": {"p": {"partition": "low", "signal": "USR2"}}},
                                   "test cluster")
    cfg = parse_experiment_config({
        "name": "x", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})
    return trial_script(cfg, cluster, backend="slurm", python=sys.executable,
                        run_dir=Path("/r/exp-1"), exp_id=1, trial_id=1)


def _wrapped_script() -> str:
    from dethpc.jobs.render import make_env

    return make_env().from_string(
        '{% from "_wrapped_run.j2" import run_script %}'
        '{% call run_script("s.sh", "bash s.sh", "USR2", 30, true, "/py", "/bin", false) %}'
        '{% endcall %}').render()


@pytest.mark.parametrize("which", ["trial", "wrapped"])
def test_a_runs_first_signal_is_its_cause(tmp_path: Path, which: str) -> None:
    """A preemption's early signal, then Slurm's TERM when the grace ran out (a loaded
    node checkpoints slowly): the run's record keeps the early signal, so the decision
    says preempted, not requeued by hand (CI on stop 45: the container trial's record
    said "requeued", code 143). The wrapper's signal.json keeps the latest, for
    ``dethpc should-stop``."""
    script = _trial_script() if which == "trial" else _wrapped_script()
    body = "\n".join([
        f"TRIAL_DIR={shlex.quote(str(tmp_path))}", "RUN=0; child=0; got_signal=''; signal_at=0",
        _on_signal(script), "on_signal USR2 USR2", "first_at=$signal_at", "sleep 1.1",
        "on_signal TERM TERM", 'echo "$got_signal $((signal_at - first_at))" >&3'])
    p = subprocess.run(["bash", "-c", f"{{ {body}\n}} 3>&1 >/dev/null"], capture_output=True,
                       text=True, timeout=30, check=False)
    assert (p.returncode, p.stdout.split()) == (0, ["USR2", "0"]), p.stderr
    if which == "wrapped":
        assert json.loads((tmp_path / "signal.json").read_text())["signal"] == "TERM"
        assert [json.loads(line)["signal"] for line in
                (tmp_path / "signals.jsonl").read_text().splitlines()] == ["USR2", "TERM"]


@pytest.mark.parametrize(("nodelist", "nodes"), [
    (None, []),                                     # no Slurm (local)
    ("n1", ["n1"]),
    ("n1,gpu-02", ["n1", "gpu-02"]),
    ("n[1-3],gpu[07-08]", ["n1", "n2", "n3", "gpu07", "gpu08"]),
    ("n[1-", []),                                   # unreadable: unknown, not wrong
])
def test_a_runs_nodes_are_its_nodelist_expanded(nodelist: str | None, nodes: list[str]) -> None:
    from dethpc.launch.run_end import run_nodes

    assert run_nodes({} if nodelist is None else {"SLURM_JOB_NODELIST": nodelist}) == nodes


def test_the_exit_record_names_the_runs_nodes(tmp_path: Path) -> None:
    from dethpc.control.reconcile.ingest_rules import parse_exit_record

    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[2,4]"}
    assert _command(["--kind", "trial", "--rc", "1", "--trial-dir", str(tmp_path)],
                    env)["reason"] == "error"
    raw = json.loads((tmp_path / "exits.jsonl").read_text())
    assert raw["nodes"] == ["n2", "n4"]
    assert parse_exit_record(raw).nodes == ("n2", "n4")
    assert parse_exit_record({"reason": "error", "nodes": "n1"}).nodes == ()  # not a list


@pytest.mark.parametrize(("mark", "expected"), [
    ({"job": "7_1", "run": 2, "time": 1, "idle_s": 40, "max_idle_s": 30}, True),
    ({"job": "7_1", "run": 1, "time": 1}, False),       # an earlier run's
    ({"job": "8_1", "run": 2, "time": 1}, False),       # another job's
    ([1, 2], False),
    (None, False),
])
def test_the_watchdogs_mark_names_its_own_job_and_run(
        tmp_path: Path, mark: object, expected: bool) -> None:
    from dethpc.launch.run_end import hung_marked

    if mark is not None:
        (tmp_path / "hung.json").write_text(json.dumps(mark))
    assert hung_marked(tmp_path, "7_1", 2) is expected
