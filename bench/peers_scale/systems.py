"""The systems of the peers-at-scale benchmark behind one interface, and dethpc's runner.

Owns: ``Cell`` (what one run of one system is given: its directory, seed, trials, GPUs,
the emulator's costs, the work log, the Slurm environment), ``SystemRunner`` (the
protocol every system's runner implements: ``launch``, ``finished``, ``kill_login``,
``operator_check``, ``stop``), the helpers every runner shares (``as_system_user``:
every command of the system runs as ``dethpc-bench``, so sdiag's count for that user is
the system's alone; ``run_measured``: a command waited for with its CPU from ``wait4``),
and ``DethpcRunner`` (``dethpc-pool``, ``dethpc-per-job``): a Determined-style experiment
config with dethpc's documented defaults -- ``adaptive_asha``, divisor 4, 3 rungs
(``mode: aggressive``: one bracket, rungs at 1/4/16 validation periods of 512 batches),
``time_metric: batches`` as Determined 0.38 -- submitted with ``dethpc submit``, its
daemon the login-side process. Each runner's ``stop()`` facts may carry ``verdicts``: the
system's own final word on each trial (``metrics.trial_fates`` reads them).

The peers' runners (Optuna, Ray Tune, submitit, Hydra: issue 48 item 5) are not written
yet; each is one more ``SystemRunner`` in ``RUNNERS``, launched by ``run.py`` unchanged.
Must not: measure anything (run.py and metrics.py do) or inject faults.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from bench.peers_scale.emulator import EmulatorSpec
from dethpc.devcluster.profiles import SYSTEM_USER

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: the peers' own venv (bench/peers/setup.sh): never dethpc's
PEERS_VENV = REPO / "bench" / "peers" / ".venv"
#: the system's interpreter of the venv's minor version: the venv's own python lives under
#: /root, which the system's user may not run, so its site-packages go on PYTHONPATH
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
#: a validation every this many emulated steps (128 batches each): 512 batches
VALIDATE_EVERY = 4
BATCHES_PER_STEP = 128
#: ASHA's rungs at 1, 4 and 16 validation periods (the curves' full 64 steps)
MAX_BATCHES = 16 * VALIDATE_EVERY * BATCHES_PER_STEP


#: JSON merged into dethpc's cluster config, for an A/B of one setting (bench-only)
CLUSTER_OVERRIDE = "PEERS_SCALE_DETHPC_CLUSTER"


@dataclass
class Cell:
    system: str
    seed: int
    trials: int
    gpus: int
    dir: Path
    env: dict[str, str]
    spec: EmulatorSpec
    timeout_s: float
    say: Callable[[str], None] = print

    @property
    def worklog(self) -> Path:
        return self.dir / "worklog.jsonl"


def as_system_user(argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` run as the system's user with ``env`` (runuser keeps neither HOME nor
    our variables by itself)."""
    home = pwd.getpwnam(SYSTEM_USER).pw_dir
    pairs = [f"{k}={v}" for k, v in {"HOME": home, "USER": SYSTEM_USER,
                                       "LOGNAME": SYSTEM_USER, **env}.items()]
    return ["runuser", "-u", SYSTEM_USER, "--", "env", *pairs, *argv]


def user_pythonpath() -> str:
    """The repository and this environment's site-packages: what the system's user needs
    on ``PYTHONPATH`` to import dethpc with the interpreter ``user_python`` names."""
    paths = [str(REPO), *dict.fromkeys((sysconfig.get_paths()["purelib"],
                                        sysconfig.get_paths()["platlib"]))]
    return os.pathsep.join(paths)


def venv_site_packages(venv: Path) -> Path:
    """The site-packages folder of ``venv`` (a peer's)."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise RuntimeError(f"{venv}: no site-packages; run bench/peers/setup.sh")
    return found[0]


@functools.cache
def user_python() -> str:
    """This interpreter when the system's user may run it, else the system ``python3.X``
    of the same minor version (a pyenv under /root is not theirs to run)."""
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        probe = as_system_user([python, "-c", "import dethpc.core"],
                               {"PYTHONPATH": user_pythonpath()})
        if subprocess.run(probe, capture_output=True, timeout=60, cwd="/tmp").returncode == 0:
            return python
    raise RuntimeError(f"no {minor} that {SYSTEM_USER} may run imports dethpc")


@dataclass
class Measured:
    rc: int
    stdout: str
    stderr: str
    cpu_s: float
    pid: int


def run_measured(argv: list[str], cwd: Path, timeout: float = 300.0,
                 on_start: Callable[[int], None] = lambda _pid: None) -> Measured:
    """Run ``argv`` and wait for it; its CPU (user + system, with the descendants it
    waited for) from ``wait4``. ``on_start`` gets its pid first (the sampler leaves it
    and what it starts out while it runs)."""
    out, err = cwd / ".cmd.out", cwd / ".cmd.err"
    with out.open("wb") as fo, err.open("wb") as fe:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        on_start(proc.pid)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(proc.returncode, out.read_text(), err.read_text(),
                    ru.ru_utime + ru.ru_stime, proc.pid)


class SystemRunner(Protocol):
    """One system under test, for one cell (see the module doc)."""

    name: str
    #: what the login-side process is ("" when the system has none: said in the report)
    login_process: str
    #: CPU seconds of the commands the runner ran as the user and waited for
    commands_cpu_s: float
    #: what a person had to do for the search to finish (each one counted)
    human_actions: list[str]
    #: pids the login-CPU sampler must leave out (measured by ``commands_cpu_s``)
    measured_pids: set[int]

    def launch(self, cell: Cell) -> None:
        """Submit the search, as the user would (every command as ``dethpc-bench``)."""

    def finished(self) -> bool:
        """True when the search has decided every trial (or ended for good)."""

    def kill_login(self) -> str | None:
        """kill -9 the login-side process; what was killed (None: the system has none)."""

    def operator_check(self) -> str | None:
        """A person's look at a search that seems stuck: the action taken, if any (it is
        appended to ``human_actions``)."""

    def stop(self) -> dict[str, Any]:
        """End what is left (login processes, jobs); the system's own facts for the raw
        record (ids, states)."""


# ------------------------------------------------------------------ dethpc
@dataclass
class DethpcRunner:
    mode: str                       # "pool" or "per-job"
    name: str = ""
    login_process: str = "dethpc daemon"
    commands_cpu_s: float = 0.0
    human_actions: list[str] = field(default_factory=list)
    measured_pids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.name = self.name or f"dethpc-{self.mode}"
        self.cell: Cell | None = None
        self.exp_id = 0
        self.state = ""

    @property
    def home(self) -> Path:
        assert self.cell is not None
        return self.cell.dir / "home"

    def _env(self) -> dict[str, str]:
        assert self.cell is not None
        return {"DETHPC_HOME": str(self.home),
                "DETHPC_CLUSTER_CONFIG": str(self.home / "cluster.yaml"),
                "SLURM_CONF": self.cell.env["SLURM_CONF"], "PYTHONPATH": user_pythonpath(),
                "PATH": f"{Path(user_python()).parent}:/usr/bin:/bin:/usr/sbin:/sbin"}

    def _dethpc(self, *args: str) -> Measured:
        assert self.cell is not None
        cli = [user_python(), "-c", "import sys; from dethpc.surfaces.entry import main; "
               "sys.argv[0] = 'dethpc'; sys.exit(main())"]
        res = run_measured(as_system_user([*cli, *args], self._env()), self.cell.dir,
                           on_start=self.measured_pids.add)
        self.commands_cpu_s += res.cpu_s
        return res

    def config(self, cell: Cell) -> tuple[dict[str, Any], dict[str, Any]]:
        """The cluster config (the site's pool: the scale cluster's ``low`` partition,
        one GPU a slot) and the experiment config."""
        cluster = {"backend": "slurm", "runs_root": str(cell.dir / "runs"),
                   "default_pool": "gpu", "python": user_python(),
                   "slurm_conf": cell.env["SLURM_CONF"],
                   "pools": {"gpu": {"partition": "low", "account": "dethpc", "gres": "gpu",
                                     "gpu_type": "a100", "slots_per_node": 4,
                                     "cpus_per_slot": 1, "preemptible": True}}}
        # an A/B of one cluster setting at one commit (never the table's cells: the
        # table runs dethpc's documented defaults); recorded in the results' params
        cluster.update(json.loads(os.environ.get(CLUSTER_OVERRIDE, "") or "{}"))
        env = [f"PYTHONPATH={user_pythonpath()}", f"PEERS_WORKLOG={cell.worklog}",
               *(f"{k}={v}" for k, v in cell.spec.to_env().items()),
               f"PEERS_VALIDATE_EVERY={VALIDATE_EVERY}"]
        exp: dict[str, Any] = {
            "name": f"peers-scale-{self.name}-{cell.seed}",
            "entrypoint": f"{user_python()} dethpc_trial.py",
            "hyperparameters": {"curve": {"type": "int", "minval": 0, "maxval": 127}},
            "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                         "smaller_is_better": True, "max_trials": cell.trials,
                         "time_metric": "batches", "max_time": MAX_BATCHES,
                         "mode": "aggressive", "divisor": 4, "max_rungs": 3,
                         # as many at once as there are GPUs: what a user of 64 GPUs asks
                         "max_concurrent_trials": cell.gpus},
            "environment": {"environment_variables": env},
            "reproducibility": {"experiment_seed": cell.seed}}
        if self.mode == "pool":
            # docs/worker-pool.md: preload what the trial imports (the default, torch, is
            # not what this trial uses), and its CUDA initialisation as a GPU trial's
            # `torch.cuda:init`: made in a spare forked ahead of each trial
            exp["slurm"] = {"workers": {"preload": ["dethpc.core",
                                                    "bench.peers_scale.emulator",
                                                    "bench.peers_scale.emulator:init_cuda"]}}
        return cluster, exp

    def launch(self, cell: Cell) -> None:
        self.cell = cell
        self.home.mkdir(parents=True)
        ctx = cell.dir / "context"
        ctx.mkdir()
        shutil.copy(HERE / "dethpc_trial.py", ctx / "dethpc_trial.py")
        cluster, exp = self.config(cell)
        (self.home / "cluster.yaml").write_text(yaml.safe_dump(cluster))
        (cell.dir / "experiment.yaml").write_text(yaml.safe_dump(exp))
        chown_tree(cell.dir)
        res = self._dethpc("submit", str(cell.dir / "experiment.yaml"), str(ctx), "--json")
        if res.rc != 0:
            raise RuntimeError(f"dethpc submit exited {res.rc}: {res.stderr[-2000:]}")
        self.exp_id = int(json.loads(res.stdout)["id"])

    def _daemon_pid(self) -> int | None:
        try:
            pid = int((self.home / "daemon.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def finished(self) -> bool:
        try:
            with sqlite3.connect(f"file:{self.home / 'dethpc.db'}?mode=ro", uri=True,
                                 timeout=5) as db:
                row = db.execute("select state from experiment where id = ?",
                                 (self.exp_id,)).fetchone()
        except sqlite3.Error:
            return False
        self.state = str(row[0]) if row else ""
        return self.state in ("COMPLETED", "ERROR", "CANCELED")

    def kill_login(self) -> str | None:
        pid = self._daemon_pid()
        if pid is None:
            return "no dethpc daemon was running"
        os.kill(pid, signal.SIGKILL)
        return f"dethpc daemon pid {pid} (kill -9)"

    def operator_check(self) -> str | None:
        """The daemon is what moves the search. It runs under dethpc's supervisor, which
        restarts it after a kill -9 (docs/reliability.md), so a look normally finds it
        running; only a daemon still dead at the look (supervisor gone or given up)
        needs a person to run ``dethpc daemon start`` (counted)."""
        if self._daemon_pid() is not None or self.finished():
            return None
        res = self._dethpc("daemon", "start")
        action = f"dethpc daemon start (exit {res.rc})"
        self.human_actions.append(action)
        return action

    def stop(self) -> dict[str, Any]:
        pid = self._daemon_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        trials: dict[str, int] = {}
        verdicts: dict[str, str] | None = None
        try:
            rows = read_trial_states(self.home / "dethpc.db", self.exp_id)
            for _, state in rows:
                trials[state] = trials.get(state, 0) + 1
            verdicts = dethpc_verdicts(rows)
        except sqlite3.Error as exc:
            trials = {"error": str(exc)}  # type: ignore[dict-item]
        return {"experiment": self.exp_id, "state": self.state, "trial_states": trials,
                "verdicts": verdicts}


def read_trial_states(db_path: Path, exp_id: int) -> list[tuple[str, str]]:
    """``(trial id, state)`` of every trial of experiment ``exp_id`` in dethpc's store."""
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        return [(str(t), str(st)) for t, st in db.execute(
            "select id, state from trial where experiment_id = ?", (exp_id,))]


#: dethpc's trial states as the benchmark's verdicts (metrics.Verdict's values): the
#: searcher's COMPLETED/STOPPED decided; ERROR (max_restarts spent) and CANCELED (a
#: person's) given up; the rest still the daemon's to run
_DETHPC_VERDICT = {"COMPLETED": "decided", "STOPPED": "decided", "ERROR": "gave_up",
                   "CANCELED": "gave_up"}


def dethpc_verdicts(rows: list[tuple[str, str]]) -> dict[str, str]:
    """Per trial (the work log's key is dethpc's trial id), the store's final word."""
    return {t: _DETHPC_VERDICT.get(state, "live") for t, state in rows}


def chown_tree(path: Path) -> None:
    """Give ``path`` and everything under it to the system's user."""
    pw = pwd.getpwnam(SYSTEM_USER)
    for p in [path, *path.rglob("*")]:
        os.chown(p, pw.pw_uid, pw.pw_gid)


RUNNERS: dict[str, Callable[[], SystemRunner]] = {
    "dethpc-pool": lambda: DethpcRunner("pool"),
    "dethpc-per-job": lambda: DethpcRunner("per-job"),
    "optuna": lambda: __import__("bench.peers_scale.peer_optuna", fromlist=["_"]).OptunaRunner(
        "rdb"),
    "optuna-journal": lambda: __import__("bench.peers_scale.peer_optuna",
                                         fromlist=["_"]).OptunaRunner("journal"),
    "submitit": lambda: __import__("bench.peers_scale.peer_submitit",
                                   fromlist=["_"]).SubmititRunner(),
    "ray-tune": lambda: __import__("bench.peers_scale.peer_ray", fromlist=["_"]).RayTuneRunner(),
    "hydra-optuna": lambda: __import__("bench.peers_scale.peer_hydra", fromlist=["_"]).HydraRunner(),  # noqa: E501
}
