"""bench/peers_scale/systems: dethpc's runner asks what the issue's search is -- a valid
Determined-style config, adaptive ASHA with divisor 4 and rungs at 1/4/16 validation
periods, no more trials than asked, one GPU a trial on the preemptible partition -- and
nothing tuned beyond the documented fields; every runner is a SystemRunner."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.peers_scale import systems
from bench.peers_scale.emulator import EmulatorSpec
from dethpc.config.experiment import parse_experiment_config
from dethpc.searchers.asha import rung_lengths


def _cell(tmp_path: Path, trials: int = 32, gpus: int = 64) -> systems.Cell:
    return systems.Cell(system="dethpc-pool", seed=3, trials=trials, gpus=gpus, dir=tmp_path,
                        env={"SLURM_CONF": "/etc/slurm-scale/slurm.conf"},
                        spec=EmulatorSpec(startup_s=10, time_scale=1.0), timeout_s=600)


@pytest.fixture(autouse=True)
def _python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(systems, "user_python", lambda: "/usr/bin/python3.11")


@pytest.mark.parametrize(("mode", "trials", "gpus"), [("pool", 32, 64), ("per-job", 256, 64),
                                                      ("pool", 1024, 128)])
def test_the_experiment_is_the_issues_search(tmp_path: Path, mode: str, trials: int,
                                             gpus: int) -> None:
    cluster, exp = systems.DethpcRunner(mode).config(_cell(tmp_path, trials, gpus))
    cfg = parse_experiment_config(exp)
    s = exp["searcher"]
    assert (s["name"], s["divisor"], s["max_rungs"], s["mode"]) == \
        ("adaptive_asha", 4, 3, "aggressive")
    assert s["max_trials"] == trials and s["max_concurrent_trials"] == gpus
    period = systems.VALIDATE_EVERY * systems.BATCHES_PER_STEP
    assert rung_lengths(3, 4, s["max_time"]) == [period, 4 * period, 16 * period]
    assert cfg.searcher.max_trials == trials
    pool = cluster["pools"][cluster["default_pool"]]
    assert (pool["partition"], pool["gres"], pool["preemptible"]) == ("low", "gpu", True)
    assert "resources" not in exp            # one slot (one GPU) a trial: the default
    assert ("slurm" in exp) == (mode == "pool")
    env = dict(v.split("=", 1) for v in exp["environment"]["environment_variables"])
    assert env["PEERS_WORKLOG"] == str(tmp_path / "worklog.jsonl")
    assert env["PEERS_VALIDATE_EVERY"] == str(systems.VALIDATE_EVERY)


def test_the_curves_fit_the_longest_rung() -> None:
    from bench.peers_scale.emulator import load_curves
    c = load_curves()[0]
    assert c.steps * c.units_per_step == systems.MAX_BATCHES


def test_every_runner_is_a_system_runner() -> None:
    for name, make in systems.RUNNERS.items():
        runner = make()
        assert runner.name == name
        for method in ("launch", "finished", "kill_login", "operator_check", "stop"):
            assert callable(getattr(runner, method))
        assert runner.human_actions == [] and runner.commands_cpu_s == 0.0


def test_dethpc_verdicts_from_the_store(tmp_path: Path) -> None:
    """Every dethpc trial state has a verdict: terminal states are the store's final word
    (decided or given up), the rest still the daemon's (live)."""
    import sqlite3

    from bench.peers_scale.metrics import Verdict
    from dethpc.store.states import TrialState
    db = tmp_path / "dethpc.db"
    with sqlite3.connect(db) as c:
        c.execute("create table trial (id integer, experiment_id integer, state text)")
        c.executemany("insert into trial values (?, ?, ?)",
                      [(i, 1, st.value) for i, st in enumerate(TrialState)] + [(99, 2, "ERROR")])
    rows = systems.read_trial_states(db, 1)
    verdicts = {t: Verdict(v) for t, v in systems.dethpc_verdicts(rows).items()}
    states = {str(i): st for i, st in enumerate(TrialState)}
    assert set(verdicts) == set(states)
    for t, st in states.items():
        assert (verdicts[t] is not Verdict.LIVE) == st.is_terminal, st
    assert verdicts[str(list(TrialState).index(TrialState.STOPPED))] is Verdict.DECIDED
    assert verdicts[str(list(TrialState).index(TrialState.ERROR))] is Verdict.GAVE_UP
