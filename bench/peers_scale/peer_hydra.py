"""Hydra 1.3.8 in the peers-at-scale benchmark: a multirun with the Optuna sweeper and the
submitit launcher, as Hydra's documentation shows.

Owns: ``HydraRunner`` (``hydra-optuna``): ``python hydra_app.py --multirun`` (Hydra's
"Multi-run" tutorial, hydra.cc/docs/tutorials/basic/running_your_app/multi-run) with
``hydra/sweeper=optuna`` (hydra.cc/docs/plugins/optuna_sweeper: ``n_trials``, ``n_jobs``,
``sampler``, ``params`` with ``int(interval(0, 127))``) and
``hydra/launcher=submitit_slurm`` (hydra.cc/docs/plugins/submitit_launcher: partition,
``gpus_per_node: 1``, ``array_parallelism``, ``max_num_timeout``), in its own venv
(bench/peers/.venv-hydra, setup_hydra.sh: hydra-core 1.3.8, hydra-optuna-sweeper 1.3.0
with optuna 2.10, hydra-submitit-launcher 1.2.0). Configured to win, as its docs allow:
``n_jobs`` = the GPUs (a batch of 64 trials at once, one array), ``array_parallelism`` the
same, ``max_num_timeout: 3`` with an app that resumes from its checkpoint, one GPU and
one CPU a trial on the preemptible partition ``low``. The sweeper has no pruning (see
hydra_app.py): ASHA's early stopping has no equivalent here, every trial trains its 64
steps, and ``max_time`` does not apply.

The login-side process is the **multirun** (the sweeper, which submits each batch with
submitit and waits for it); ``kill_login`` kills it with SIGKILL. Its jobs run on, but
no batch is told and no next batch is asked. A person then cancels the sweep's jobs left
running (they would write the same checkpoints as the rerun) and runs the same multirun
again with the same sweep dir (``operator_check``: one human action); the study restarts
(``storage: null``, the docs' default), its trial ``i`` is the same job ``i`` with the
same draw, and each job resumes from the checkpoint in its output directory.
Must not: import Hydra (the benchmark's driver runs in dethpc's environment).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers_scale.systems import (
    HERE,
    REPO,
    VALIDATE_EVERY,
    Cell,
    as_system_user,
    chown_tree,
)

HYDRA_VENV = REPO / "bench" / "peers" / ".venv-hydra"
JOB_NAME = "hydra_app"


def hydra_versions() -> dict[str, str]:
    """The versions in Hydra's venv (hydra-core, the sweeper's optuna, submitit)."""
    from importlib.metadata import distributions
    wanted = {"hydra-core", "hydra-optuna-sweeper", "hydra-submitit-launcher", "optuna",
              "submitit"}
    found = {d.metadata["Name"].lower(): d.version
             for d in distributions(path=[str(p) for p in HYDRA_VENV.glob(
                 "lib/python3*/site-packages")])}
    return {k: v for k, v in sorted(found.items()) if k in wanted}


@dataclass
class HydraRunner:
    name: str = "hydra-optuna"
    login_process: str = "the Hydra multirun (hydra_app.py --multirun: the Optuna sweeper)"
    commands_cpu_s: float = 0.0
    human_actions: list[str] = field(default_factory=list)
    measured_pids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.cell: Cell | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed: set[int] = set()

    @property
    def sweep_dir(self) -> Path:
        assert self.cell is not None
        return self.cell.dir / "multirun"

    def _env(self, cell: Cell) -> dict[str, str]:
        return {"PYTHONPATH": str(REPO), "SLURM_CONF": cell.env["SLURM_CONF"],
                "PATH": f"{HYDRA_VENV / 'bin'}:/usr/bin:/bin:/usr/sbin:/sbin",
                "PEERS_WORKLOG": str(cell.worklog), **cell.spec.to_env(),
                "PEERS_VALIDATE_EVERY": str(VALIDATE_EVERY), "HYDRA_FULL_ERROR": "1"}

    def argv(self, cell: Cell) -> list[str]:
        """The multirun's command line (the cell's values as Hydra overrides)."""
        return [str(HYDRA_VENV / "bin" / "python"), str(HERE / "hydra_app.py"), "--multirun",
                f"hydra.sweeper.n_trials={cell.trials}",
                f"hydra.sweeper.n_jobs={cell.gpus}",
                f"hydra.sweeper.sampler.seed={cell.seed}",
                f"hydra.sweep.dir={self.sweep_dir}",
                f"hydra.launcher.array_parallelism={cell.gpus}",
                f"hydra.launcher.timeout_min={int(cell.timeout_s // 60) + 10}",
                f"hydra.launcher.name={JOB_NAME}"]

    def _start(self) -> subprocess.Popen[bytes]:
        assert self.cell is not None
        n = len(self.procs)
        log = (self.cell.dir / f"multirun-{n}.log").open("ab")
        proc = subprocess.Popen(as_system_user(self.argv(self.cell), self._env(self.cell)),
                                cwd=self.cell.dir, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append(proc)
        return proc

    def launch(self, cell: Cell) -> None:
        if not (HYDRA_VENV / "bin" / "python").exists():
            raise RuntimeError(f"{HYDRA_VENV}: missing; run bench/peers/setup_hydra.sh")
        self.cell = cell
        chown_tree(cell.dir)
        cell.say(f"hydra-optuna: multirun pid {self._start().pid}")

    def finished(self) -> bool:
        """The sweep ended: the sweeper wrote its results. A multirun that exited without
        them (killed, or an error such as a job's result missing after a fault) is a
        search that stopped, not one that ended: a person's look runs it again."""
        return (self.sweep_dir / "optimization_results.yaml").exists()

    def _multirun_pid(self) -> int | None:
        """The multirun's python (runuser's child, the process that holds the sweep)."""
        if not self.procs or self.procs[-1].poll() is not None:
            return None
        marker = str(HERE / "hydra_app.py").encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmd and b"--multirun" in cmd and str(self.sweep_dir).encode() in cmd \
                    and not cmd.startswith(b"runuser"):
                return int(entry.name)
        return None

    def kill_login(self) -> str | None:
        pid = self._multirun_pid()
        if pid is None:
            return "no Hydra multirun was running"
        self.killed.add(self.procs[-1].pid)
        os.kill(pid, signal.SIGKILL)
        return f"Hydra multirun pid {pid} (kill -9)"

    def operator_check(self) -> str | None:
        """A person's look: a multirun that died before the sweep ended (killed, or exited
        with an error) is run again (its jobs still running cancelled first)."""
        if not self.procs or self.finished() or self.procs[-1].poll() is None:
            return None
        assert self.cell is not None
        last = self.procs[-1]
        why = "killed" if last.pid in self.killed else f"exited {last.returncode}"
        subprocess.run(as_system_user(["scancel", f"--name={JOB_NAME}"], self._env(self.cell)),
                       capture_output=True, timeout=60, cwd="/tmp", check=False)
        proc = self._start()
        action = (f"the multirun {why}: scancel --name={JOB_NAME}; the same multirun "
                  f"again (pid {proc.pid})")
        self.human_actions.append(action)
        return action

    def stop(self) -> dict[str, Any]:
        pid = self._multirun_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        results = self.sweep_dir / "optimization_results.yaml" if self.cell else None
        return {"versions": hydra_versions(),
                "multiruns": [{"pid": p.pid, "rc": p.returncode,
                               "killed": p.pid in self.killed} for p in self.procs],
                "optimization_results": results.read_text()
                if results is not None and results.exists() else None}
