"""Issue 13, items 1, 2 and 6 on the dev cluster: ``dethpc sbatch`` as a drop-in for
``sbatch``, through the real CLI and the real sbatch, tracked by an in-process daemon.

- an existing array script (tests/slurm/fixtures/existing_scripts/array_train.sh, its
  own ``#SBATCH`` lines: low partition, --array, --output) is preempted by a ``high``
  job, requeued by Slurm and resumes from its own checkpoint (found through
  ``dethpc should-stop`` and ``$DETHPC_LATEST_CHECKPOINT``) with no step lost or redone;
  the preemption is not counted;
- an unchanged script that handles no signal (ignores_signals.sh) keeps beating after
  the early signal until Slurm's SIGTERM; preempted, it is requeued (not counted) and
  completes; under ``--time=1`` it ends TIMEOUT, its trial ``time_limit``;
- a calling script parses ``--parsable`` exactly as sbatch's and chains a dependency;
- sbatch's refusal is passed on (its words, its exit code) and nothing is recorded;
- the job name, the output file and the printed line are sbatch's for a script, for
  standard input and for ``--wrap``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.common.exitcodes import ExitReason
from dethpc.common.kinds import ExperimentKind
from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Experiment, Job
from dethpc.surfaces.views import describe_experiment
from tests.slurm.fixtures.harness import preempt, read_jsonl, wait_until
from tests.slurm.fixtures.sbatch_kit import (
    dethpc_sbatch,
    env_for,
    experiment_of_job,
    job_field,
    sacct,
    sbatch_home,
    tick_until,
)

FIXTURES = Path(__file__).parent / "fixtures" / "existing_scripts"
STEPS = 30


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon]]:
    with sbatch_home(tmp_path) as made:
        yield made


def copy(names: list[str], to: Path) -> Path:
    to.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(FIXTURES / name, to / name)
    return to


# ------------------------------------------------------------------ proofs
def test_existing_array_script_preempted_resumes_from_its_own_checkpoint(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    work = copy(["array_train.sh"], tmp_path / "project")
    proc = dethpc_sbatch(root, work, "array_train.sh", STEPS=str(STEPS))
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", proc.stdout)
    assert m, proc.stdout
    jid = m.group(1)
    exp_id = experiment_of_job(store, jid)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None and exp.kind == ExperimentKind.SBATCH and exp.name == "array-train"
    assert job_field(f"{jid}_0", "Partition") == "low"           # the script's own lines
    assert job_field(f"{jid}_0", "Requeue") == "1"                # dethpc's addition
    d = tick_until(store, daemon, exp_id, 120,
                   lambda d: len(d["trials"]) == 2 and d["trials"][0]["state"] == "RUNNING"
                   and (work / "steps-0.log").exists()
                   and len((work / "steps-0.log").read_text().split("\n")) > 4)
    trial_dir = Path(d["run_dir"]) / "trials" / str(d["trials"][0]["id"])
    preempt(f"{jid}_0", lambda: (trial_dir / "signal.json").exists())
    d = tick_until(store, daemon, exp_id, 240)
    summary = [(t["state"], t["runs"], t["restarts"], t["steps_completed"]) for t in d["trials"]]
    print(f"array script: {d['state']}, trials {summary}")
    assert d["state"] == "COMPLETED", summary
    for task, t in enumerate(d["trials"]):
        lines = [tuple(map(int, line.split()))
                 for line in (work / f"steps-{task}.log").read_text().splitlines()]
        assert [step for step, _ in lines] == list(range(1, STEPS + 1)), lines  # none lost
        assert t["restarts"] == 0, t                          # a preemption is not counted
    runs0 = {run for _, run in (tuple(map(int, line.split())) for line in
                                (work / "steps-0.log").read_text().splitlines())}
    assert runs0 >= {0, 1}, runs0                             # it was requeued and resumed
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert exits[0]["reason"] == "preempted" and exits[-1]["reason"] == "completed", exits
    assert "resuming after step" in (work / f"train-{jid}_0.out").read_text()
    logs = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "trial", "logs",
                           str(d["trials"][0]["id"])], env=env_for(root), capture_output=True,
                          text=True, timeout=120)
    assert logs.returncode == 0 and "resuming after step" in logs.stdout, logs  # its --output
    assert any(a["why"] == "signal" for a in read_jsonl(trial_dir / "stop-acks.jsonl"))


@pytest.mark.spanning
def test_unchanged_script_keeps_running_until_slurms_term_and_is_requeued(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    work = copy(["ignores_signals.sh"], tmp_path / "plain")
    proc = dethpc_sbatch(root, work, "--parsable", "ignores_signals.sh")
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip()
    assert jid.isdigit(), proc.stdout
    exp_id = experiment_of_job(store, jid)
    beats = work / f"beats-{jid}.log"
    d = tick_until(store, daemon, exp_id, 120, lambda d: d["trials"][0]["state"] == "RUNNING"
                   and beats.exists() and beats.read_text().count("beat") >= 2)
    trial_dir = Path(d["run_dir"]) / "trials" / str(d["trials"][0]["id"])
    preempt(jid, lambda: (trial_dir / "signal.json").exists())
    d = tick_until(store, daemon, exp_id, 240)
    (t,) = d["trials"]
    print(f"unchanged script, preempted: {d['state']}, runs {t['runs']}, restarts "
          f"{t['restarts']}")
    assert d["state"] == "COMPLETED" and t["restarts"] == 0, t
    got = read_jsonl(trial_dir / "signals.jsonl")
    assert [g["signal"] for g in got][:2] == ["USR2", "TERM"], got
    signalled = got[0]
    text = beats.read_text()
    last_beat = max(float(line.split()[2]) for line in text.splitlines()
                    if line.startswith("beat"))
    # the early signal at preemption, Slurm's TERM GraceTime (10 s) later: the script
    # beat on for most of the grace, then ended by TERM
    assert last_beat >= signalled["time"] + 5, (signalled, text)
    assert "run 1 done" in text, text


def test_unchanged_script_ends_timeout_at_its_time_limit(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    work = copy(["ignores_signals.sh"], tmp_path / "timed")
    proc = dethpc_sbatch(root, work, "--parsable", "--time=1", "-p", "debug",
                         "ignores_signals.sh")
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip()
    exp_id = experiment_of_job(store, jid)
    d = tick_until(store, daemon, exp_id, 240)
    (t,) = d["trials"]
    print(f"unchanged script, --time=1: {d['state']}, trial {t['state']} "
          f"({t['exit_reason']}), runs {t['runs']}")
    assert sacct(jid, "State") == ["TIMEOUT"], sacct(jid, "State")
    with store.session() as s:
        (job,) = s.exec(select(Job).where(Job.experiment_id == exp_id))
        assert job.exit_reason == ExitReason.TIME_LIMIT, job
    assert t["state"] == "ERROR" and "TIMEOUT (time_limit" in t["exit_reason"], t
    trial_dir = Path(d["run_dir"]) / "trials" / str(t["id"])
    got = read_jsonl(trial_dir / "signals.jsonl")
    assert [g["signal"] for g in got] == ["USR2", "TERM"], got
    beats = [float(line.split()[2]) for line in
             (work / f"beats-{jid}.log").read_text().splitlines()]
    # it beat on from the early signal to Slurm's TERM at the limit
    assert max(beats) >= got[1]["time"] - 2 and got[1]["time"] - got[0]["time"] >= 5, got



def test_a_script_that_stops_at_its_time_limit_requeues_and_resumes(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    """Issue 36 item 1, the wrapper's time limit: the existing array script under
    ``--time=1`` stops at ``dethpc should-stop`` on the early signal, checkpoints and
    exits 0; the wrapper (``dethpc.launch.run_end``: RUNNING, close to its end time)
    records ``time_limit`` and requeues the task, which resumes after its checkpoint;
    nothing is counted and no step is lost."""
    root, store, daemon = home
    work = copy(["array_train.sh"], tmp_path / "limited")
    steps = 150    # 75 s: more than one 1-minute allocation gives
    proc = dethpc_sbatch(root, work, "--parsable", "--time=1", "-p", "debug", "--array=0",
                         "array_train.sh", STEPS=str(steps))
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip()
    exp_id = experiment_of_job(store, jid)
    d = tick_until(store, daemon, exp_id, 480)
    (t,) = d["trials"]
    trial_dir = Path(d["run_dir"]) / "trials" / str(t["id"])
    exits = read_jsonl(trial_dir / "exits.jsonl")
    why = f"{d['state']} {t} {exits}"
    assert d["state"] == "COMPLETED" and t["restarts"] == 0, why
    assert len(exits) >= 2, why
    assert [e["reason"] for e in exits] == ["time_limit"] * (len(exits) - 1) + ["completed"], why
    assert {e["job"] for e in exits} == {f"{jid}_0"}, why
    lines = [tuple(map(int, line.split()))
             for line in (work / "steps-0.log").read_text().splitlines()]
    assert [step for step, _ in lines] == list(range(1, steps + 1)), lines   # none lost
    assert {run for _, run in lines} == set(range(len(exits))), lines


@pytest.mark.spanning
def test_parsable_output_feeds_a_dependency_as_with_sbatch(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    work = copy(["pipeline.sh", "step_one.sh", "step_two.sh"], tmp_path / "pipeline")
    proc = subprocess.run(["bash", "pipeline.sh"], cwd=work, env=env_for(root),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first = re.search(r"^first=(\d+)$", proc.stdout, re.M)
    second = re.search(r"^second=(\d+)$", proc.stdout, re.M)
    assert first and second, proc.stdout
    exp_id = experiment_of_job(store, first.group(1))
    ended = ("COMPLETED", "ERROR", "CANCELED")
    # the script's `dethpc sbatch` started the user's daemon, as it does for a user: that
    # daemon tracks the job, not this test's (two tickers on one database raced once in
    # CI: both ingested the same exit record, a UNIQUE constraint failed)
    assert "started the daemon" in proc.stderr, proc.stderr
    d = wait_until("the experiment's end", lambda: (
        x if (x := describe_experiment(store, exp_id))["state"] in ended else None),
        timeout=120)
    assert d["state"] == "COMPLETED", d
    wait_until("step two", lambda: (work / "two.done").exists() or None, timeout=120)
    assert (work / "two.done").read_text().strip() == "after step one"


def test_refusal_is_sbatchs_and_nothing_is_recorded(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, _ = home
    work = copy(["step_one.sh"], tmp_path / "refused")
    want = subprocess.run(["sbatch", "-p", "nowhere", "step_one.sh"], cwd=work,
                          capture_output=True, text=True)
    got = dethpc_sbatch(root, work, "-p", "nowhere", "step_one.sh")
    assert (got.returncode, got.stdout) == (want.returncode, want.stdout), (got, want)
    assert want.returncode != 0 and "invalid partition" in got.stderr.lower(), got.stderr
    with store.session() as s:
        assert list(s.exec(select(Experiment))) == []
    assert not [p for p in (root / "runs").glob("*")]


@pytest.mark.parametrize("how", ["file", "stdin", "wrap"])
def test_name_output_and_line_are_sbatchs(home: tuple[Path, Store, Daemon], tmp_path: Path,
                                          how: str) -> None:
    root, store, daemon = home
    work = tmp_path / how
    work.mkdir()
    script = "#!/bin/bash\n#SBATCH -p debug\n#SBATCH -t 1\necho hello from $SLURM_JOB_NAME\n"
    (work / "hello.sh").write_text(script)
    args, stdin = {"file": (["hello.sh"], None), "stdin": ([], script),
                   "wrap": (["-p", "debug", "-t", "1", "--wrap",
                             "echo hello from $SLURM_JOB_NAME"], None)}[how]
    plain = subprocess.run(["sbatch", *args], cwd=work, input=stdin, capture_output=True,
                           text=True, check=True)
    ours = dethpc_sbatch(root, work, *args, stdin=stdin)
    assert ours.returncode == 0, ours.stderr
    pattern = r"Submitted batch job (\d+)\n"
    a, b = re.fullmatch(pattern, plain.stdout), re.fullmatch(pattern, ours.stdout)
    assert a and b, (plain.stdout, ours.stdout)
    assert job_field(b.group(1), "JobName") == job_field(a.group(1), "JobName")
    exp_id = experiment_of_job(store, b.group(1))
    d = tick_until(store, daemon, exp_id, 120)
    assert d["state"] == "COMPLETED", d
    texts = []
    for jid in (a.group(1), b.group(1)):
        out = work / f"slurm-{jid}.out"     # sbatch's default output, in the submit dir
        texts.append(wait_until(f"{out.name}", lambda o=out: o.exists() and  # type: ignore[misc]
                                o.read_text().startswith("hello") and o.read_text() or None,
                                timeout=60))
    assert texts[0] == texts[1], texts        # the job saw what sbatch's own job saw


def test_cancel_reaches_an_unchanged_script(home: tuple[Path, Store, Daemon],
                                            tmp_path: Path) -> None:
    """`dethpc experiment cancel` of a running `dethpc sbatch` job: the stop is offered
    through `dethpc should-stop`; a script that never asks is scancelled after the
    grace; the trial and experiment end CANCELED, Slurm's job CANCELLED."""
    root, store, daemon = home
    work = copy(["ignores_signals.sh"], tmp_path / "cancel")
    proc = dethpc_sbatch(root, work, "--parsable", "-p", "debug", "ignores_signals.sh")
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip()
    exp_id = experiment_of_job(store, jid)
    tick_until(store, daemon, exp_id, 120, lambda d: d["trials"][0]["state"] == "RUNNING")
    cancel = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", "experiment",
                             "cancel", str(exp_id)], env=env_for(root), capture_output=True,
                            text=True, timeout=120)
    assert cancel.returncode == 0, cancel.stderr
    d = tick_until(store, daemon, exp_id, 240)
    print(f"cancelled: {d['state']}, trial {d['trials'][0]['state']}")
    assert d["state"] == "CANCELED" and d["trials"][0]["state"] == "CANCELED", d
    state = wait_until("sacct", lambda: sacct(jid, "State") or None, timeout=60)
    assert state[0].startswith("CANCELLED"), state


def test_forwarded_signal_reaches_a_script_that_traps_it(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    """``#DETHPC --forward-signal``: the early signal reaches the script, which traps it
    itself, checkpoints and exits 0; the run counts as preempted (requeued, free) and the
    next resumes after the checkpointed step."""
    root, store, daemon = home
    work = copy(["traps_signal.sh"], tmp_path / "traps")
    proc = dethpc_sbatch(root, work, "--parsable", "traps_signal.sh", STEPS=str(STEPS))
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip()
    exp_id = experiment_of_job(store, jid)
    log = work / "traps-steps.log"
    d = tick_until(store, daemon, exp_id, 120, lambda d: d["trials"][0]["state"] == "RUNNING"
                   and log.exists() and len(log.read_text().splitlines()) >= 3)
    trial_dir = Path(d["run_dir"]) / "trials" / str(d["trials"][0]["id"])
    preempt(jid, lambda: (trial_dir / "signal.json").exists())
    d = tick_until(store, daemon, exp_id, 240)
    (t,) = d["trials"]
    lines = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    runs = sorted({r for _, r in lines})
    print(f"forwarded: {d['state']}, restarts {t['restarts']}, runs {runs}")
    assert d["state"] == "COMPLETED" and t["restarts"] == 0, t
    assert [step for step, _ in lines] == list(range(1, STEPS + 1)), lines
    assert {run for _, run in lines} >= {0, 1}, lines
    exits = read_jsonl(trial_dir / "exits.jsonl")
    assert exits[0]["reason"] == "preempted" and exits[0]["signal"] == "USR2", exits
