"""Issue 35 item 1 for wrapped scripts on the dev cluster: ``dethpc sbatch --max-idle``
on an unchanged script that goes quiet (no output, no dethpc call, job RUNNING).

The script (fixtures/existing_scripts/goes_quiet.sh) prints a line every 0.5 s and
registers checkpoints at steps 2 and 30 only, 14 s apart: longer than ``--max-idle``, so
only its output shows progress in between (a watchdog that did not read the output would
end it before step 30). In its first run it stops printing after step 32 and sleeps
on. The daemon (in-process, ticked by the test) sees its output file unchanged for
``--max-idle`` seconds: ``hung.json`` within that plus a tick, the job requeued
(``scontrol requeue``: the same job id, Slurm's restart count 1), the run recorded
``hung`` and counted (restarts 1), and the second run resumes after the step-30
checkpoint and completes. Without the watchdog the script sleeps until its time limit.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlmodel import select

from dethpc.control.daemon import Daemon
from dethpc.store import Store
from dethpc.store.models import Event
from tests.slurm.fixtures.harness import read_jsonl
from tests.slurm.fixtures.sbatch_kit import (
    dethpc_sbatch,
    experiment_of_job,
    job_field,
    sbatch_home,
    tick_until,
)

#: release-agnostic, and run in the 25.11 lane only: that lane has room, Debian's three
#: have none (docs/testing.md, "Which release runs what")
pytestmark = [pytest.mark.parametrize("slurm_release", ["25.11"], indirect=True,
                                      ids=["slurm-25.11"])]

FIXTURES = Path(__file__).parent / "fixtures" / "existing_scripts"
MAX_IDLE_S = 10
#: the script's steps (0.5 s each), where its first run goes quiet, its later checkpoint
STEPS, QUIET_AFTER, CHECKPOINT = 34, 32, 30


@pytest.fixture
def home(tmp_path: Path, slurm_cluster: Any) -> Iterator[tuple[Path, Store, Daemon]]:
    with sbatch_home(tmp_path) as made:
        yield made


def test_a_wrapped_script_whose_output_stops_is_requeued_and_resumes(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    root, store, daemon = home
    work = tmp_path / "project"
    work.mkdir()
    shutil.copy2(FIXTURES / "goes_quiet.sh", work / "goes_quiet.sh")
    proc = dethpc_sbatch(root, work, "--max-idle", str(MAX_IDLE_S), "goes_quiet.sh",
                         STEPS=str(STEPS), QUIET_AFTER=str(QUIET_AFTER),
                         CKPT_STEPS=f"2 {CHECKPOINT}")
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", proc.stdout)
    assert m, proc.stdout
    jid = m.group(1)
    exp_id = experiment_of_job(store, jid)
    d = tick_until(store, daemon, exp_id, 120, lambda d: d["trials"][0]["state"] == "RUNNING")
    trial_dir = Path(d["run_dir"]) / "trials" / str(d["trials"][0]["id"])
    hung_file = trial_dir / "hung.json"
    tick_until(store, daemon, exp_id, 120, lambda d: hung_file.exists())
    hung = json.loads(hung_file.read_text())
    print(f"hung.json: {hung}")
    assert hung["job"] == jid and hung["run"] == 0 and hung["max_idle_s"] == MAX_IDLE_S
    # within max_idle plus about a tick (the test ticks every 0.5 s; a loaded machine's
    # tick takes longer)
    assert MAX_IDLE_S <= hung["idle_s"] <= MAX_IDLE_S + 8, hung
    d = tick_until(store, daemon, exp_id, 300)
    t = d["trials"][0]
    print(f"goes_quiet: {d['state']}, trial {t['state']} runs {t['runs']} "
          f"restarts {t['restarts']}")
    assert d["state"] == "COMPLETED" and t["restarts"] == 1, t      # counted
    # idle since the script went quiet, after the later checkpoint: its printed steps
    # were progress (read without the output, it was idle from step 2 on)
    later = next((r for r in read_jsonl(trial_dir / "metrics.jsonl")
                 if r.get("kind") == "checkpoint" and r.get("steps") == CHECKPOINT), {})
    assert hung["time"] - later.get("time", hung["time"]) >= MAX_IDLE_S, (hung, later)
    assert job_field(jid, "Restarts") == "1"          # the same job, requeued by Slurm
    steps = [tuple(map(int, line.split()))
             for line in (work / "steps.log").read_text().splitlines()]
    # run 0: every step up to the quiet one (its output was its progress between the two
    # checkpoints); run 1: resumed after the later checkpoint
    assert steps == ([(s, 0) for s in range(1, QUIET_AFTER + 1)]
                     + [(s, 1) for s in range(CHECKPOINT + 1, STEPS + 1)]), steps
    exits = read_jsonl(trial_dir / "exits.jsonl")
    reasons = [(e["reason"], e["restart"]) for e in exits]
    # the daemon's record of the hung run (and the batch shell's, when the requeue's TERM
    # ended the script before Slurm's KILL), then the second run's
    assert reasons[0] == ("hung", 0) and reasons[-1] == ("completed", 1), reasons
    assert set(reasons[1:-1]) <= {("hung", 0)}, reasons
    assert f"resuming after step {CHECKPOINT}" in (work / f"quiet-{jid}.out").read_text()
    with store.session() as s:
        events = [(e.kind, e.message) for e in s.exec(
            select(Event).where(Event.experiment_id == exp_id))]
    assert any(k == "hung" and "requeued" in m for k, m in events), events
    assert any(k == "restart" and "run 0 ended hung" in m for k, m in events), events


def test_a_search_trial_whose_output_stops_is_requeued_and_resumes(
        home: tuple[Path, Store, Daemon], tmp_path: Path) -> None:
    """The same script as a search's one trial (``dethpc sbatch --search``), opted in by
    the search file's ``slurm.watchdog.output``: the daemon submits these jobs, and the
    hung one is requeued in place as for ``dethpc sbatch``."""
    root, store, daemon = home
    work = tmp_path / "search"
    work.mkdir()
    shutil.copy2(FIXTURES / "goes_quiet.sh", work / "goes_quiet.sh")
    (work / "search.yaml").write_text(yaml.safe_dump({
        "name": "quiet search",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "hyperparameters": {}, "max_restarts": 2,
        "slurm": {"watchdog": {"output": True, "max_idle_s": MAX_IDLE_S}}}))
    proc = dethpc_sbatch(root, work, "--parsable", "--search", "search.yaml", "goes_quiet.sh",
                         STEPS=str(STEPS), QUIET_AFTER=str(QUIET_AFTER),
                         CKPT_STEPS=f"2 {CHECKPOINT}")
    assert proc.returncode == 0, proc.stderr
    exp_id = int(proc.stdout)
    d = tick_until(store, daemon, exp_id, 300)
    t = d["trials"][0]
    trial_dir = Path(d["run_dir"]) / "trials" / str(t["id"])
    hung = json.loads((trial_dir / "hung.json").read_text())
    print(f"search: {d['state']}, trial {t['state']} restarts {t['restarts']}, hung {hung}")
    assert d["state"] == "COMPLETED" and t["restarts"] == 1, t
    assert MAX_IDLE_S <= hung["idle_s"] <= MAX_IDLE_S + 8, hung
    steps = [tuple(map(int, line.split()))
             for line in (work / "steps.log").read_text().splitlines()]
    assert steps == ([(s, 0) for s in range(1, QUIET_AFTER + 1)]
                     + [(s, 1) for s in range(CHECKPOINT + 1, STEPS + 1)]), steps
    reasons = [(e["reason"], e["restart"]) for e in read_jsonl(trial_dir / "exits.jsonl")]
    assert reasons[0] == ("hung", 0) and reasons[-1] == ("completed", 1), reasons
