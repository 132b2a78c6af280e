"""bench/peers_scale's Optuna and submitit runners: their pure parts (the job array's
script, the workers' configuration, synchronous successive halving's rules)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.peers_scale.draws import shared_draws
from bench.peers_scale.emulator import EmulatorSpec
from bench.peers_scale.halving import promote, rung_steps
from bench.peers_scale.peer_optuna import (
    SIGNAL_S,
    OptunaRunner,
    array_script,
    is_sampled,
    take_another,
)
from bench.peers_scale.peer_submitit import SubmititRunner
from bench.peers_scale.systems import RUNNERS, Cell


def _cell(tmp_path: Path) -> Cell:
    return Cell(system="optuna", seed=2, trials=32, gpus=64, dir=tmp_path, env={
        "SLURM_CONF": "/etc/slurm-scale/slurm.conf"}, spec=EmulatorSpec(time_scale=2.0),
        timeout_s=500.0)


def test_rungs_are_dethpcs_one_four_sixteen_validation_periods() -> None:
    assert rung_steps(4) == [4, 16, 64]
    with pytest.raises(ValueError):
        rung_steps(0)


@pytest.mark.parametrize(("losses", "kept"), [
    ({i: float(i) for i in range(32)}, list(range(8))),
    ({0: 0.5, 1: 0.1, 2: 0.3, 3: 0.2, 4: 0.9}, [1]),
    ({7: 1.0, 3: 1.0, 5: 1.0, 9: 1.0}, [3]),      # a tie goes to the smaller number
    ({4: 0.2}, [4]),                               # one left: it goes on
    ({}, []),
])
def test_promote_keeps_the_best_quarter(losses: dict[int, float], kept: list[int]) -> None:
    assert promote(losses) == kept


def test_the_array_script_is_bash_with_requeue_and_the_batch_signal(tmp_path: Path) -> None:
    text = array_script(tasks=64, minutes=38, out_dir=tmp_path / "o d",
                        config=tmp_path / "c.json", env={"PYTHONPATH": "/a b:/c"})
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    lines = text.splitlines()
    for want in ("#SBATCH --array=0-63", "#SBATCH --requeue", "#SBATCH --partition=low",
                 f"#SBATCH --signal=B:USR1@{SIGNAL_S}", "#SBATCH --time=38",
                 "#SBATCH --gpus-per-node=a100:1"):
        assert want in lines
    assert "export PYTHONPATH='/a b:/c'" in lines
    assert lines[-1].startswith("exec ") and "bench.peers_scale.optuna_worker" in lines[-1]


@pytest.mark.parametrize("kind", ["rdb", "journal"])
def test_the_workers_get_the_shared_draws_and_dethpcs_rungs(tmp_path: Path, kind: str) -> None:
    cfg = OptunaRunner(kind).config(_cell(tmp_path))
    assert cfg["draws"] == shared_draws(2, 32)
    assert (cfg["validate_every"], cfg["eta"]) == (4, 4)
    assert cfg["kind"] == kind and cfg["grace_period"] > cfg["heartbeat_interval"]
    assert cfg["time_limit_min"] * 60 > 500 + SIGNAL_S      # the limit is never reached
    assert cfg["spec"]["time_scale"] == 2.0


def test_the_submitit_driver_gets_the_shared_draws(tmp_path: Path) -> None:
    cfg = SubmititRunner().config(_cell(tmp_path))
    assert cfg["draws"] == shared_draws(2, 32) and cfg["parallelism"] == 64


def test_runners_are_registered_and_say_what_their_login_process_is() -> None:
    optuna, journal, submitit = (RUNNERS[n]() for n in ("optuna", "optuna-journal",
                                                        "submitit"))
    assert (optuna.name, journal.name, submitit.name) == ("optuna", "optuna-journal",
                                                          "submitit")
    assert optuna.login_process == "" and optuna.kill_login() is None
    assert journal.operator_check() is None
    assert "driver" in submitit.login_process
    with pytest.raises(ValueError):
        OptunaRunner("postgres")


@pytest.mark.parametrize(("waiting", "created", "take"), [
    (32, 32, True),        # the draws, enqueued before the array starts
    (1, 32, True),         # the last draw
    (0, 32, False),        # all 32 taken, the last still running: no 33rd is sampled
    (2, 32, True),         # retries of failed trials after the draws: run, not dropped
    (0, 31, True),         # fewer created than asked (never after --create): sample
])
def test_a_worker_stops_sampling_at_n_but_runs_every_waiting_retry(
        waiting: int, created: int, take: bool) -> None:
    assert take_another(waiting=waiting, created=created, n=32) is take


def test_only_a_trial_optuna_sampled_itself_is_left_unrun() -> None:
    assert not is_sampled({"fixed_params": {"curve": 3}})               # enqueued draw
    assert not is_sampled({"failed_trial": 4, "retry_history": [4]})     # a retry
    assert is_sampled({})                                               # from the sampler


# (case, Optuna trials as (number, state, retried_trial_number), the lineages' verdicts)
LINEAGES = [
    ("pruned", [(0, "PRUNED", None)], {"t0": "decided"}),
    ("preempted, its retry waiting", [(3, "FAIL", None), (9, "WAITING", 3)], {"t3": "live"}),
    ("retried twice, the second retry running",
     [(3, "FAIL", None), (9, "FAIL", 3), (12, "RUNNING", 3)], {"t3": "live"}),
    ("retry completed", [(3, "FAIL", None), (9, "COMPLETE", 3)], {"t3": "decided"}),
    ("pruned, then a stray retry failed", [(3, "PRUNED", None), (9, "FAIL", 3)],
     {"t3": "decided"}),
    ("retries spent", [(3, "FAIL", None), (9, "FAIL", 3)], {"t3": "gave_up"}),
    ("killed, stale at the end", [(4, "RUNNING", None)], {"t4": "live"}),
]


@pytest.mark.parametrize(("trials", "want"), [c[1:] for c in LINEAGES],
                         ids=[c[0] for c in LINEAGES])
def test_optuna_lineage_verdicts(trials: list[tuple[int, str, int | None]],
                                 want: dict[str, str]) -> None:
    from bench.peers_scale.metrics import Verdict
    from bench.peers_scale.peer_optuna import lineage_verdicts
    got = lineage_verdicts(trials)
    assert got == want
    assert all(Verdict(v) for v in got.values())


def test_submitit_driver_verdicts() -> None:
    """From the driver's state file as it saves it (json: ``inf`` as ``Infinity``): the
    newest rung of each trial decides."""
    import json

    from bench.peers_scale.peer_submitit import driver_verdicts
    state = json.loads(json.dumps({
        "rung": 1, "alive": [0, 2],
        "jobs": {"0": {"0": "1_0", "1": "1_1", "2": "1_2", "3": "1_3"},
                 "1": {"0": "2_0", "2": "2_1"}},
        "losses": {"0": {"0": 0.1, "1": 0.5, "2": 0.2, "3": float("inf")},
                   "1": {"2": 0.15}}}))
    assert driver_verdicts(state) == {"t0": "live", "t1": "decided", "t2": "decided",
                                      "t3": "gave_up"}
    assert driver_verdicts({}) == {}
