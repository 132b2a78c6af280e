"""bench/peers_scale/peer_ray and peer_hydra: the Ray allocation's script is valid bash with
the documented directives and the shared draws; the Hydra multirun carries the cell's
values as overrides; the emulator's spec comes from the runner's environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.peers_scale import peer_hydra
from bench.peers_scale.draws import shared_draws
from bench.peers_scale.emulator import EmulatorSpec
from bench.peers_scale.peer_hydra import HydraRunner
from bench.peers_scale.peer_ray import min_nodes, render_sbatch
from bench.peers_scale.systems import Cell


def test_the_ray_allocation_script_is_bash_with_the_pages_directives(tmp_path: Path) -> None:
    script = render_sbatch(nodes=16, gpus_per_node=4, cpus_per_node=4, minutes=40,
                           out_dir=tmp_path, storage=tmp_path / "ray results",
                           python="/usr/bin/python3.11", env={"PEERS_WORKLOG": "/a b/w"},
                           draws=shared_draws(1, 8), max_failures=3)
    path = tmp_path / "ray.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    for line in ("#SBATCH --nodes=4-16", "#SBATCH --exclusive", "#SBATCH --tasks-per-node=1",
                 "#SBATCH --gpus-per-node=a100:4", "#SBATCH --requeue",
                 "export PEERS_WORKLOG='/a b/w'"):
        assert line in script.splitlines()
    assert "start --head" in script and "--address \"$ip_head\"" in script
    assert "--draws 34,16,65,30,126,115,120,97" in script
    assert "'" + str(tmp_path / "ray results") + "'" in script


def test_the_hydra_multirun_carries_the_cells_values(tmp_path: Path) -> None:
    cell = Cell("hydra-optuna", 3, 32, 64, tmp_path, {"SLURM_CONF": "x"}, EmulatorSpec(), 600)
    runner = HydraRunner()
    runner.cell = cell
    argv = runner.argv(cell)
    assert argv[2] == "--multirun"
    for override in ("hydra.sweeper.n_trials=32", "hydra.sweeper.n_jobs=64",
                     "hydra.sweeper.sampler.seed=3", "hydra.launcher.array_parallelism=64",
                     f"hydra.sweep.dir={tmp_path / 'multirun'}"):
        assert override in argv


def test_the_emulator_spec_comes_from_the_runners_environment() -> None:
    spec = EmulatorSpec.from_env({"PEERS_STARTUP_S": "3", "PEERS_TIME_SCALE": "0.5"})
    assert (spec.startup_s, spec.time_scale, spec.save_s) == (3.0, 0.5, 2.0)


def test_ray_asks_for_a_node_range_so_it_starts_in_a_busy_queue() -> None:
    # a quarter of the nodes (at least one) is enough to start with
    assert [min_nodes(n) for n in (1, 2, 4, 16, 32)] == [1, 1, 1, 4, 8]


class _Exited:
    """A multirun process that has exited (runuser's Popen, as the runner holds it)."""

    def __init__(self, pid: int, rc: int) -> None:
        self.pid, self.returncode = pid, rc

    def poll(self) -> int:
        return self.returncode


def test_a_multirun_that_crashed_is_a_stopped_search_a_person_runs_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = Cell("hydra-optuna", 0, 32, 64, tmp_path, {"SLURM_CONF": "x"}, EmulatorSpec(), 600)
    runner = HydraRunner()
    runner.cell = cell
    runner.procs = [_Exited(101, 1)]            # e.g. a job's result missing after a fault
    assert not runner.finished()
    scancels: list[list[str]] = []
    monkeypatch.setattr(peer_hydra.subprocess, "run",
                        lambda argv, **_kw: scancels.append(argv))
    monkeypatch.setattr(runner, "_start", lambda: _Exited(102, 0))
    action = runner.operator_check()
    assert action is not None and "exited 1" in action and runner.human_actions == [action]
    assert any("--name=hydra_app" in " ".join(a) for a in scancels)
    runner.procs = [_Exited(103, 0)]
    (runner.sweep_dir).mkdir()
    (runner.sweep_dir / "optimization_results.yaml").write_text("best: 0.1\n")
    assert runner.finished() and runner.operator_check() is None


def test_ray_snapshot_verdicts(tmp_path: Path) -> None:
    """Tune's newest experiment snapshot, as Ray 2.60 writes it (trial_data: pairs of a
    trial's JSON and its run metadata), read as verdicts; an older snapshot is ignored."""
    import json

    from bench.peers_scale.metrics import Verdict
    from bench.peers_scale.peer_ray import snapshot_verdicts
    assert snapshot_verdicts(tmp_path) is None

    def snap(name: str, statuses: dict[str, str]) -> None:
        data = {"trial_data": [[json.dumps({"trial_id": t, "status": st}), "{}"]
                               for t, st in statuses.items()], "runner_data": {}}
        (tmp_path / f"experiment_state-{name}.json").write_text(json.dumps(data))

    snap("2026-12-02_13-25-13", {"a_0": "RUNNING", "a_1": "RUNNING"})
    snap("2026-12-02_13-30-41", {"a_0": "TERMINATED", "a_1": "ERROR", "a_2": "PENDING",
                                 "a_3": "PAUSED", "a_4": "RUNNING"})
    got = snapshot_verdicts(tmp_path)
    assert got == {"a_0": "decided", "a_1": "gave_up", "a_2": "live", "a_3": "live",
                   "a_4": "live"}
    assert all(Verdict(v) for v in got.values())
