"""bench/peers: dethpc next to the tools users would pick instead, on the same cluster.

Owns: per system and seed, one search of the same space with the same training
(``cnn.Trainer``: curve ``i`` of bench/asha/curves_cnn.json trained for real to at most
``cnn.BUDGET`` batches, validated every ``cnn.EVERY``) on the dev cluster's partition
``debug`` with ``--slots`` trials at once, started the way that system's user starts it
(one command on the login node: this process), and what it cost:

* time to target: from the user's command to the first validation whose loss reaches
  the target (``cnn.target_loss``: the 10% quantile of all 128 recorded losses at the
  budget, fixed before any run), from the trials' own records (``records.jsonl``);
  and the whole search's wall time (the user's command to the last job's end);
* slot-seconds held: sacct's ``CPUTimeRAW`` (allocated CPUs x elapsed) of every run of
  every job the search started (``sacct -X -D``: a requeued job's earlier runs count),
  allocations idle or not;
* slurmctld RPCs: ``sdiag``'s count for user root (the login side, the jobs and what
  they run; this driver polls as ``dethpc-user``, so its own look is left out), per
  minute of the search;
* login-node CPU seconds: user+system time of the processes this driver started on
  the "login node" (the CLI, submitit's or Hydra's waiting process: ``RUSAGE_CHILDREN``;
  dethpc's daemon, which `dethpc submit` starts detached: ``/proc/<pid>/stat``), never
  the jobs';
* batches trained (all trials, all runs), trials started, what is left on disk (the
  benchmark's own records left out);
* the work, counted the same way for every system from each trial's work log
  (``cnn.WorkLog``, ``workcount.count_work``): batches executed, redone (trained again
  after a fault, validated or not) and lost (every batch of a trial abandoned mid-run).

Medians over the seeds count an unreached seed at ``--timeout-s`` (never dropped), with
the seeds that reached the target beside. One invocation gives the whole result file:
runs are never merged (``--summarize`` recomputes one file's summary from its own runs).

Then the limit: bench/asha's simulator replays the recorded curves of the same space
through dethpc's ASHA searcher (and random search) with every start, restore and
latency 0 on ``--slots`` workers: a time to target no system can beat; each real time
as a ratio to it is that system's efficiency.

Systems: ``dethpc-pool`` (adaptive ASHA, ``slurm.workers``), ``dethpc-per-job``
(adaptive ASHA, a job per trial run), ``optuna`` (K array tasks on a JournalFileBackend,
SuccessiveHalvingPruner), ``ray`` (Tune's ASHAScheduler in one allocation of K CPUs),
``submitit`` (random search, ``map_array``), ``hydra`` (random search, the submitit
launcher). Writes ``bench/results/peers.json`` (or ``--out``).
Must not: be imported by dethpc; leave jobs behind.

Run (its own venv: ``bash bench/peers/setup.sh``; the dev cluster up, nothing else on it):
``bench/peers/.venv/bin/python bench/peers/run.py --seeds 5``; one cell:
``... run.py --systems optuna --seeds 1`` (30 s; a Hydra cell 4.5 minutes).
The regime: trials of seconds (real CNN training, 2 at once), so this cell measures the
systems' start-up and per-trial overhead; bench/peers_scale measures them at 64 GPUs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "bench" / "asha"))

import cnn  # noqa: E402
import workcount  # noqa: E402


def _asha_sim() -> Any:
    """bench/asha/run.py (the simulator), under a name that is not this file's."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("asha_run", REPO / "bench/asha/run.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["asha_run"] = mod
    spec.loader.exec_module(mod)
    return mod

SYSTEMS = ("dethpc-pool", "dethpc-per-job", "optuna", "ray", "submitit", "hydra",
           "dethpc-pool-warm", "dethpc-per-job-warm")
#: the dethpc cells as a user's later experiments find dethpc (``prepare_warm``): the
#: database exists and the daemon runs (it stays up between experiments); the plain
#: dethpc cells are a user's first contact (a fresh $DETHPC_HOME)
WARM = {"dethpc-pool-warm": "pool", "dethpc-per-job-warm": "per-job"}
WATCHER = "dethpc-user"          # the driver's own squeue runs as this user (not counted)
FINISHED = re.compile(r"^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|"
                      r"PREEMPTED|BOOT_FAIL|DEADLINE|REQUEUED)")
# what the user wrote and typed, per system (the files of bench/peers they correspond to)
USER_SIDE = {
    "dethpc-pool": {"typed": ["dethpc submit experiment.yaml ."],
                    "wrote": ["experiment.yaml", "train.py (Core API)"]},
    "dethpc-per-job": {"typed": ["dethpc submit experiment.yaml ."],
                       "wrote": ["experiment.yaml", "train.py (Core API)"]},
    "dethpc-pool-warm": {"typed": ["dethpc submit experiment.yaml ."],
                         "wrote": ["experiment.yaml", "train.py (Core API)"]},
    "dethpc-per-job-warm": {"typed": ["dethpc submit experiment.yaml ."],
                            "wrote": ["experiment.yaml", "train.py (Core API)"]},
    "optuna": {"typed": ["python optuna_worker.py --enqueue <draws> (creates the study)",
                         "sbatch optuna_worker.sbatch"],
               "wrote": ["optuna_worker.py", "optuna_worker.sbatch"]},
    "ray": {"typed": ["sbatch ray_tune.sbatch"],
            "wrote": ["ray_tune_search.py", "ray_tune.sbatch"]},
    "submitit": {"typed": ["python submitit_search.py (stays until the last job ends)"],
                 "wrote": ["submitit_search.py"]},
    "hydra": {"typed": ["python hydra_app.py --multirun curve=<32 values> "
                        "(stays until the last job ends)"],
              "wrote": ["hydra_app.py", "hydra_conf/config.yaml"]},
}


# ------------------------------------------------------------------ measuring
#: CPU seconds of the driver's own commands in the current cell (its squeue, sacct and
#: sdiag looks, the fault injector's commands): reaped children of this process, so in
#: ``RUSAGE_CHILDREN``, and taken out of the login CPU (issue 48: it held them)
OWN_CPU: list[float] = []


def own_run(argv: list[str], timeout: float = 60.0, check: bool = False) -> str:
    """``argv``'s stdout; its CPU (with its waited-for children's, from ``wait4``)
    added to ``OWN_CPU``. Killed after ``timeout``; ``check``: a failure raises."""
    import threading
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        _pid, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)   # reaped here, not by Popen
    OWN_CPU.append(usage.ru_utime + usage.ru_stime)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}")
    return out


def sdiag_root() -> int:
    out = own_run(["sdiag"])
    section = False
    for line in out.splitlines():
        if "statistics by user" in line:
            section = True
        elif section and (m := re.match(r"^\s*root\s+\(\s*0\)\s+count:(\d+)", line)):
            return int(m.group(1))
    return 0


def sdiag_types() -> dict[str, int]:
    """slurmctld's RPC counts by message type (all users: the watcher's squeue polls
    are in them too, as REQUEST_JOB_INFO): where a system's RPCs go."""
    out = own_run(["sdiag"])
    counts: dict[str, int] = {}
    section = False
    for line in out.splitlines():
        if "statistics by message type" in line:
            section = True
        elif "statistics by user" in line:
            break
        elif section and (m := re.match(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)", line)):
            counts[m.group(1)] = int(m.group(2))
    return counts


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


#: login-node CPU seconds of detached processes (dethpc's daemon, which `dethpc submit`
#: starts in its own session: not this process's child), added by the cell that ran them
DETACHED_CPU: list[float] = []


def process_cpu(pid: int, children: bool = True) -> float:
    """``pid``'s user+system CPU seconds with those of its waited-for children (the
    Slurm commands a daemon ran), from ``/proc/<pid>/stat``; ``children=False``: its
    own alone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15 if children else 13]) / os.sysconf("SC_CLK_TCK")


#: the daemon's own CPU (without its Slurm commands'), beside DETACHED_CPU
DETACHED_OWN_CPU: list[float] = []


def watch(cmd: list[str]) -> str:
    """A Slurm query run as the watcher, whose RPCs are not the system's (nor its CPU
    the login side's: ``own_run``)."""
    return own_run(["runuser", "-u", WATCHER, "--", *cmd])


def wait_jobs_gone(job_ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not watch(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)]).strip():
            return
        time.sleep(1.0)
    raise SystemExit(f"peers: jobs {job_ids} still queued after {timeout:.0f} s")


def accounting(since: float, timeout: float = 120.0) -> list[dict[str, str]]:
    """Every run (``-D``: a requeued job's earlier runs too) of every allocation (``-X``)
    that started at ``since`` or later, once all ended."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 1))
    fields = ["JobIDRaw", "JobName", "State", "AllocCPUS", "ElapsedRaw", "CPUTimeRAW", "Start"]
    deadline = time.monotonic() + timeout
    rows: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        out = watch(["sacct", "-a", "-X", "-D", "-n", "-P", "-S", start, "-o",
                     ",".join(fields)])
        rows = [dict(zip(fields, line.split("|"), strict=False)) for line in out.splitlines()
                if line.strip()]
        # -S also lists jobs that ended just after it: only what started in the search
        rows = [r for r in rows if _epoch(r.get("Start", "")) >= since - 1]
        if rows and all(FINISHED.match(r["State"]) for r in rows):
            return rows
        time.sleep(2.0)
    return rows


def disk(path: Path) -> dict[str, int]:
    files = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()
             and not (p.parent == path and p.name.startswith("records."))]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


# ------------------------------------------------------------------ the systems
def _sbatch(script: Path, env: dict[str, str]) -> str:
    out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                         text=True, env=env, check=True, cwd=script.parent)
    return out.stdout.strip().split(";")[0]


#: JSON merged into dethpc's cluster config, for an A/B of one key at one commit
#: (recorded in the results as ``dethpc_cluster_override``); unset: the defaults
CLUSTER_OVERRIDE = "PEERS_DETHPC_CLUSTER"


def _override() -> dict[str, Any]:
    """``CLUSTER_OVERRIDE``'s settings ({} when unset)."""
    return dict(json.loads(os.environ.get(CLUSTER_OVERRIDE, "") or "{}"))


def _cluster_yaml(home: Path, args: argparse.Namespace) -> None:
    cluster: dict[str, Any] = {
        "backend": "slurm", "runs_root": str(home / "runs"), "default_pool": "debug",
        "python": sys.executable, "pools": {"debug": {"partition": args.partition,
                                                      "cpus_per_slot": 1}}}
    cluster.update(_override())
    (home / "cluster.yaml").write_text(yaml.safe_dump(cluster))


def _store_url(home: Path) -> str:
    """The store the cell's dethpc uses: the override's ``database_url``, else the home's
    SQLite file (the default)."""
    url = _override().get("database_url")
    return str(url) if url else f"sqlite:///{home / 'dethpc.db'}"


def _dethpc_env(home: Path, env: dict[str, str]) -> dict[str, str]:
    return {**env, "DETHPC_HOME": str(home), "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml")}


#: a warm cell's daemon CPU seconds before the cell's clock started (home -> seconds)
WARM_CPU0: dict[str, float] = {}


def prepare_warm(home: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Before a warm cell's clock: the home as a user's earlier experiment left it, its
    database created and its daemon running and idle (`dethpc daemon start`; it ticks at
    its idle back-off until the submit wakes it)."""
    _cluster_yaml(home, args)
    out = subprocess.run([str(Path(sys.executable).parent / "dethpc"), "daemon", "start"],
                         capture_output=True, text=True, env=_dethpc_env(home, env),
                         timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"peers: dethpc daemon start failed: {out.stderr.strip()[-2000:]}")
    pid = int((home / "daemon.pid").read_text())
    time.sleep(5.0)      # the daemon settles into its idle back-off, as between experiments
    WARM_CPU0[str(home)] = process_cpu(pid)
    WARM_CPU0[f"{home}:own"] = process_cpu(pid, children=False)


def run_dethpc(mode: str, home: Path, seed: int, args: argparse.Namespace,
               env: dict[str, str]) -> Callable[[], None]:
    from sqlmodel import select

    from dethpc.store import Store
    from dethpc.store.models import Batch, Experiment

    ctx = home / "context"
    ctx.mkdir()
    shutil.copy(HERE / "dethpc_trial.py", ctx / "train.py")
    _cluster_yaml(home, args)
    exp: dict[str, Any] = {
        "name": f"peers-{mode}-{seed}", "entrypoint": "python3 train.py",
        "hyperparameters": {"curve": {"type": "int", "minval": 0,
                                      "maxval": cnn.N_CURVES - 1}},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "smaller_is_better": True, "max_length": {"batches": cnn.BUDGET},
                     "max_trials": args.trials,
                     "max_concurrent_trials": args.slots * (
                         args.pool_queue if mode == "pool" else 1),
                     "mode": "aggressive", "divisor": 4, "max_rungs": 3},
        "min_validation_period": {"batches": cnn.EVERY},
        "environment": {"environment_variables": [
            f"PEERS_RECORDS={env['PEERS_RECORDS']}", f"PYTHONPATH={env['PYTHONPATH']}",
            f"PEERS_BUDGET={cnn.BUDGET}"]},
        "max_restarts": 1, "reproducibility": {"experiment_seed": seed}}
    if mode == "pool":
        # what the trial imports, preloaded once per worker (docs/worker-pool.md): each
        # trial run is then a fork that finds torch, scikit-learn and the model code loaded
        # (torch._dynamo: torch's optimizers import it at their first step, 2.2 s here)
        exp["slurm"] = {"workers": {"count": args.slots,
                                    "preload": ["torch", "torch._dynamo", "dethpc.core",
                                                "curves", "cnn"]}}
    (home / "experiment.yaml").write_text(yaml.safe_dump(exp))
    denv = _dethpc_env(home, env)
    # what the user types: the console script, which starts the user's daemon (detached,
    # in its own session; its CPU is read from /proc before it is stopped)
    out = subprocess.run([str(Path(sys.executable).parent / "dethpc"), "submit",
                          str(home / "experiment.yaml"), str(ctx), "--json"],
                         capture_output=True, text=True, env=denv, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"peers: dethpc submit failed: {out.stderr.strip()[-2000:]}")
    exp_id = int(json.loads(out.stdout)["id"])
    daemon = int((home / "daemon.pid").read_text())
    store = Store(_store_url(home))

    def wait() -> None:
        state = ""
        deadline = time.monotonic() + args.timeout_s
        try:
            while time.monotonic() < deadline:
                with store.session() as s:
                    row = s.get(Experiment, exp_id)
                    state = str(row.state) if row else ""
                if state in ("COMPLETED", "ERROR", "CANCELED"):
                    break
                time.sleep(0.5)
            with store.session() as s:
                ids = sorted({b.array_job_id for b in s.exec(select(Batch)) if b.array_job_id})
            if ids:
                wait_jobs_gone(ids, 120)
        finally:
            DETACHED_CPU.append(process_cpu(daemon) - WARM_CPU0.pop(str(home), 0.0))
            DETACHED_OWN_CPU.append(process_cpu(daemon, children=False)
                                    - WARM_CPU0.pop(f"{home}:own", 0.0))
            os.kill(daemon, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while Path(f"/proc/{daemon}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        if state != "COMPLETED":
            raise SystemExit(f"peers: dethpc experiment ended {state or 'never'}; "
                             f"see {home / 'daemon.log'}")
    return wait


def run_optuna(home: Path, seed: int, args: argparse.Namespace,
               env: dict[str, str]) -> Callable[[], None]:
    script = home / "optuna_worker.sbatch"
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name=peers-optuna
#SBATCH --partition={args.partition}
#SBATCH --array=0-{args.slots - 1}
#SBATCH --cpus-per-task=1
#SBATCH --output={home}/optuna-%A_%a.out
{shlex.quote(sys.executable)} {HERE / 'optuna_worker.py'} --journal {home}/journal.log \\
    --study peers --seed {seed} --trials {args.trials}
""")
    # the study and the shared draws, before the array (one more command on the login
    # node: Optuna's docs create the study first too, `optuna create-study`)
    subprocess.run([sys.executable, str(HERE / "optuna_worker.py"), "--journal",
                    f"{home}/journal.log", "--study", "peers", "--seed", str(seed),
                    "--trials", str(args.trials), "--enqueue",
                    ",".join(map(str, cnn.draws(seed, args.trials)))],
                   check=True, env=env, capture_output=True)
    job = _sbatch(script, env)
    return lambda: wait_jobs_gone([job], args.timeout_s)


def run_ray(home: Path, seed: int, args: argparse.Namespace,
            env: dict[str, str]) -> Callable[[], None]:
    script = home / "ray_tune.sbatch"
    tolerant = " --fault-tolerant" if args.faults else ""
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name=peers-ray
#SBATCH --partition={args.partition}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={args.slots}
#SBATCH --output={home}/ray-%j.out
{shlex.quote(sys.executable)} {HERE / 'ray_tune_search.py'} --seed {seed} \\
    --trials {args.trials} --storage {home}/ray_results --temp-dir {home}/ray_tmp \\
    --draws {",".join(map(str, cnn.draws(seed, args.trials)))}{tolerant}
""")
    job = _sbatch(script, env)
    return lambda: wait_jobs_gone([job], args.timeout_s)


def _login_process(argv: list[str], home: Path, env: dict[str, str],
                   args: argparse.Namespace) -> Callable[[], None]:
    log = (home / "login.log").open("wb")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                            cwd=home)

    def wait() -> None:
        try:
            rc = proc.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise SystemExit(f"peers: {argv[1]} still running after {args.timeout_s} s") from None
        if rc != 0:
            raise SystemExit(f"peers: {argv[1]} exited {rc}; see {home / 'login.log'}")
    return wait


def run_submitit(home: Path, seed: int, args: argparse.Namespace,
                 env: dict[str, str]) -> Callable[[], None]:
    return _login_process([sys.executable, str(HERE / "submitit_search.py"), "--folder",
                           str(home / "submitit" / "%j"), "--seed", str(seed), "--trials",
                           str(args.trials), "--slots", str(args.slots), "--partition",
                           args.partition], home, env, args)


def run_hydra(home: Path, seed: int, args: argparse.Namespace,
              env: dict[str, str]) -> Callable[[], None]:
    curves = cnn.draws(seed, args.trials)
    return _login_process([
        sys.executable, str(HERE / "hydra_app.py"), "--multirun",
        "curve=" + ",".join(map(str, curves)), f"hydra.sweep.dir={home / 'multirun'}",
        f"hydra.launcher.submitit_folder={home / 'multirun' / '.submitit' / '%j'}",
        f"hydra.launcher.array_parallelism={args.slots}",
        f"hydra.launcher.partition={args.partition}"], home, env, args)


LAUNCH: dict[str, Callable[..., Callable[[], None]]] = {
    "dethpc-pool": lambda *a: run_dethpc("pool", *a),
    "dethpc-per-job": lambda *a: run_dethpc("per-job", *a),
    "dethpc-pool-warm": lambda *a: run_dethpc("pool", *a),
    "dethpc-per-job-warm": lambda *a: run_dethpc("per-job", *a),
    "optuna": run_optuna, "ray": run_ray, "submitit": run_submitit, "hydra": run_hydra}


# ------------------------------------------------------------------ faults
#: the faults of a ``--faults`` cell, in seconds after the search's first validation (so
#: that every system is hit while it searches, however fast it starts): the node running
#: most of the search's jobs crashed (every process killed, then DOWN, as a power loss:
#: ``dethpc.devcluster.nodes.crash_node``) and revived 15 s later, and half the nodes
#: (n1, n2: where Slurm packs 1-CPU jobs first) taken by ``high`` jobs for 8 s, twice
FAULTS: tuple[tuple[str, float], ...] = (("crash", 4.0), ("preempt", 10.0),
                                         ("revive", 19.0), ("preempt", 24.0))
PREEMPT_NODES = ("n1", "n2")
PREEMPT_HOLD_S = 8
PREEMPTOR = "peers-preemptor"
#: the preemptor submits as this user: QoS ``normal``, no per-user limits (it submitted
#: as dethpc-user, whose QoS ``limited`` allows 2 submitted / 1 running job, and its
#: second preemption was refused in every cell that reached it: issue 48); its RPCs are
#: not root's, so not the system's
PREEMPT_USER = "dethpc-faults"


def ensure_preempt_user() -> None:
    """``PREEMPT_USER`` exists, a member of the dev cluster's accounts (default account
    ``dethpc``, QoS ``normal``: no limits)."""
    from dethpc.devcluster import DevCluster
    cluster = DevCluster()
    cluster.host.ensure_users((PREEMPT_USER,))
    cluster.accounting.ensure_accounts([PREEMPT_USER])


def ensure_watcher() -> None:
    """``WATCHER`` exists, with its association: the driver's squeue and sacct run as it.
    Without it every ``runuser -u dethpc-user`` printed nothing, so each cell waited out
    ``accounting``'s 120 s for rows that never came and recorded 0 slot-seconds (the
    full table of af452fc: its small cell took 77 min, not 29; issue 48)."""
    from dethpc.devcluster.users import ensure_user
    ensure_user(WATCHER)


def as_preemptor(cmd: list[str]) -> str:
    return own_run(["runuser", "-u", PREEMPT_USER, "--", *cmd])


def node_fault(action: str, node: str) -> None:
    """``dethpc.devcluster.nodes``' crash or revive of ``node``, in a child process so
    that its commands' CPU is measured as the injector's (``own_run``), not the login
    side's."""
    own_run([sys.executable, "-c",
             "import sys; from dethpc.devcluster import DevCluster, nodes; "
             "n = sys.argv[2]; c = DevCluster(); "
             "nodes.crash_node(c, n, reason='bench/peers: node crash') "
             "if sys.argv[1] == 'crash' else nodes.revive_node(c, n)", action, node],
            timeout=240, check=True)


class Faults:
    """Injects ``FAULTS`` from a thread while a cell runs; ``events`` says what was done
    and when (seconds after the cell's start)."""

    def __init__(self, t0: float, records: Path) -> None:
        import threading
        self.t0, self.records, self.events = t0, records, []  # type: ignore[var-annotated]
        #: when the first validation was written (the faults' zero), None until then
        self.base: float | None = None
        self.crashed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Faults:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not (self.records.exists() and self.records.stat().st_size > 0):
            if self._stop.wait(0.1):
                return
        self.base = time.time()
        for kind, at in FAULTS:
            if self._stop.wait(max(0.0, self.base + at - time.time())):
                return
            event: dict[str, Any] = {"t": round(time.time() - self.t0, 1), "fault": kind}
            try:
                what = getattr(self, kind)()
            except Exception as exc:  # noqa: BLE001 - recorded, the cell goes on
                what = f"failed: {exc}"
            event.update(what if isinstance(what, dict) else {"what": what})
            self.events.append(event)

    def preempt(self) -> dict[str, Any]:
        """High jobs on ``PREEMPT_NODES`` as ``PREEMPT_USER``, and what ran there (who
        was hit); ``stop`` adds whether each preemptor ran (``started_check``)."""
        nodes = ",".join(PREEMPT_NODES)
        hit = [ln.split("|") for ln in watch(["squeue", "-h", "-t", "R", "-w", nodes, "-o",
                                              "%i|%u|%j|%N"]).splitlines() if ln.strip()]
        jobs = []
        for node in PREEMPT_NODES:
            out = as_preemptor(["sbatch", "--parsable", "-p", "high", "-w", node, "-c", "16",
                                "-t", "2", "-o", "/dev/null", "-J", PREEMPTOR, "--wrap",
                                f"sleep {PREEMPT_HOLD_S}"])
            jobs.append(out.strip().split(";")[0])
        return {"what": f"high jobs {jobs} on {list(PREEMPT_NODES)} for {PREEMPT_HOLD_S} s "
                        f"as {PREEMPT_USER}",
                "hit": [{"job": h[0], "user": h[1], "name": h[2], "node": h[3]}
                        for h in hit if len(h) == 4],
                "preemptor_jobs": jobs, "refused": sum(not j for j in jobs)}

    @staticmethod
    def started_check(event: dict[str, Any]) -> None:
        """A preemption's jobs as sacct saw them: each one's wait from submit to start;
        one that never started counts as refused too (no preemption happened)."""
        jobs = [j for j in event.get("preemptor_jobs", []) if j]
        if not jobs:
            return
        out = watch(["sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o",
                     "JobIDRaw,State,Submit,Start"])
        waits: dict[str, float | None] = dict.fromkeys(jobs)
        for line in out.splitlines():
            job, _state, submit, start = (line.split("|") + ["", "", "", ""])[:4]
            if job in waits and _epoch(start) > 0:
                waits[job] = round(_epoch(start) - _epoch(submit), 1)
        event["started_after_s"] = waits
        event["refused"] = sum(not j for j in event["preemptor_jobs"]) + \
            sum(w is None for w in waits.values())

    def crash(self) -> str:
        out = watch(["squeue", "-h", "-u", "root", "-t", "R", "-o", "%N"]).split()
        hosts = [h for h in out if h]
        node = max(sorted(set(hosts)), key=hosts.count) if hosts else "n3"
        node_fault("crash", node)
        self.crashed = node
        return f"{node} crashed ({hosts.count(node)} of {len(hosts)} running jobs there)"

    def revive(self) -> str:
        if self.crashed is None:
            return "nothing to revive"
        node, self.crashed = self.crashed, None
        node_fault("revive", node)
        return f"{node} back"

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=300)
        if self.crashed is not None:
            self.revive()
        return self.events


# ------------------------------------------------------------------ one cell
def run_cell(system: str, seed: int, args: argparse.Namespace, root: Path,
             target: float) -> dict[str, Any]:
    home = root / f"{system}-seed{seed}"
    home.mkdir(parents=True)
    home.chmod(0o755)
    records = home / "records.jsonl"
    # every allocation started during the cell is counted as the system's: start on an
    # empty queue (a job left by an interrupted run once added 5 minutes to a cell)
    deadline = time.monotonic() + 600
    while (left := watch(["squeue", "-h", "-o", "%i"]).split()) and time.monotonic() < deadline:
        time.sleep(2.0)
    if left:
        raise SystemExit(f"peers: jobs {left} are still queued; the cells need the "
                         f"cluster to themselves (scancel them)")
    env = {**os.environ, "PEERS_RECORDS": str(records),
           "PYTHONPATH": f"{HERE}:{REPO / 'bench' / 'asha'}",
           "PYTHONUNBUFFERED": "1"}
    if system in WARM:
        prepare_warm(home, args, env)
    rpc0, types0 = sdiag_root(), sdiag_types()
    OWN_CPU.clear()
    cpu0 = children_cpu()
    t0 = time.time()
    faults = Faults(t0, records).start() if args.faults else None
    finished, why = True, ""
    try:
        wait = LAUNCH[system](home, seed, args, env)
        try:
            wait()
        except SystemExit as exc:
            # a search that does not end by itself within --timeout-s is a result, not a
            # crash of the benchmark, faults or not: recorded (its wall counts at the
            # timeout), its jobs cancelled (what a human would have to do)
            finished, why = False, str(exc)
            subprocess.run(["scancel", "-u", "root"], check=False)
    except SystemExit as exc:
        if faults is None:
            raise                 # the launch itself failed: the benchmark is broken
        finished, why = False, str(exc)
        subprocess.run(["scancel", "-u", "root"], check=False)
    finally:
        fault_events = faults.stop() if faults is not None else []
    end_user = time.time()                      # the search is over for its user
    # the system's login side: this process's reaped children less the driver's and the
    # injector's own commands, plus the detached daemon's
    cpu = children_cpu() - cpu0 - sum(OWN_CPU) + sum(DETACHED_CPU)
    daemon_cpu = sum(DETACHED_CPU) if DETACHED_CPU else None    # dethpc's daemon alone
    daemon_own = sum(DETACHED_OWN_CPU) if DETACHED_OWN_CPU else None   # less its commands
    DETACHED_CPU.clear()
    DETACHED_OWN_CPU.clear()
    # the fault cells' high jobs are the faults', not the system's
    rows = [r for r in accounting(t0) if r["JobName"] != PREEMPTOR]
    for event in fault_events:           # every job has ended: did each preemptor run?
        if event["fault"] == "preempt":
            Faults.started_check(event)
    rpcs = sdiag_root() - rpc0
    types = {k: n - types0.get(k, 0) for k, n in sdiag_types().items()
             if n - types0.get(k, 0) > 0}
    last_end = max((float(r["ElapsedRaw"] or 0) + _epoch(r["Start"]) for r in rows),
                   default=end_user)
    recs = [json.loads(line) for line in records.read_text().splitlines() if line.strip()] \
        if records.exists() else []
    hits = sorted(r["t"] - t0 for r in recs if r["loss"] <= target)
    wall = max(end_user, last_end) - t0
    # the work, the same count for every system (workcount's doc), faults or not
    work = workcount.count_work(workcount.read_events(records.with_suffix(".work.jsonl")))
    result = {
        "system": system, "seed": seed,
        "time_to_target_s": hits[0] if hits else None,
        # a search that did not end by itself has no wall: it counts at the timeout
        "wall_s": wall if finished else None, "ended_after_s": wall,
        "finished_alone": finished, "why_not": why,
        "best_loss": min((r["loss"] for r in recs), default=None),
        "slot_seconds": sum(int(r["CPUTimeRAW"] or 0) for r in rows),
        "jobs": len({r["JobIDRaw"] for r in rows}), "job_runs": len(rows),
        "rpcs": rpcs, "rpcs_per_min": rpcs / (wall / 60.0) if wall > 0 else None,
        "rpc_types_all_users": dict(sorted(types.items(), key=lambda kv: -kv[1])),
        "login_cpu_s": cpu, "daemon_cpu_s": daemon_cpu,
        "daemon_own_cpu_s": daemon_own,
        "batches_trained": work["batches_executed"],
        "batches_redone": work["batches_redone"], "batches_lost": work["batches_lost"],
        "trials_abandoned": work["trials_abandoned"], "work": work,
        "trials": len({r["trial"] for r in recs}),
        "disk": disk(home),
        "first_validation_s": min((r["t"] - t0 for r in recs), default=None),
        "home": str(home),
        "faults": args.faults,
    }
    if args.faults:
        result.update({"fault_events": fault_events,
                       "faults_from_s": round(faults.base - t0, 1)
                       if faults is not None and faults.base else None,
                       "faults_refused": sum(int(e.get("refused", 0)) for e in fault_events)})
    label = system + ("+faults" if args.faults else "")
    print(f"{label} seed {seed}: target at {result['time_to_target_s']}, wall {wall:.1f} s, "
          f"{result['slot_seconds']} slot-s, {rpcs} RPCs, login CPU {cpu:.1f} s, "
          f"{result['trials']} trials", flush=True)
    return result


def _epoch(stamp: str) -> float:
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0


# ------------------------------------------------------------------ the limit
def limit(args: argparse.Namespace, target: float,
          seeds: list[int] | None = None) -> dict[str, Any]:
    """bench/asha's simulator, every cost 0: the recorded curves cut at the budget."""
    sim = _asha_sim()
    Curve, configs, simulate = sim.Curve, sim.configs, sim.simulate
    _meta, curves = sim.load(REPO / "bench" / "asha" / "curves_cnn.json")
    cut = []
    for c in curves:
        n = sum(1 for length in c.lengths if length <= cnn.BUDGET)
        cut.append(Curve(c.lengths[:n], c.loss[:n], c.train_s[:n], c.val_s))
    ns = argparse.Namespace(trials=args.trials, workers=args.slots, concurrency=args.slots,
                            exec="pool", job_start_s=0.0, warm_start_s=0.0, restore_s=0.0,
                            queue_wait_s=0.0, submit_s=0.0, release_s=0.0,
                            start_cores=math.inf, validation_period=cnn.EVERY,
                            mode="aggressive", divisor=4, max_rungs=3)
    out: dict[str, Any] = {}
    seed_list = list(seeds if seeds is not None else
                     range(args.first_seed, args.first_seed + args.seeds))
    out["seeds"] = seed_list
    for name, config in configs(ns, cnn.BUDGET).items():
        per_seed = [simulate(config, cut, seed, ns, target) for seed in seed_list]
        out[name] = {"time_to_target_s": [r["time_to_target_s"] for r in per_seed],
                     "total_time_s": [r["total_time_s"] for r in per_seed]}
    return out


def _median(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def common_seeds(rows: list[dict[str, Any]], faults: bool) -> list[int]:
    """The seeds every system of the (fault or plain) cells ran: medians compare the same
    draws and targets, never one system's easy seeds with another's hard ones."""
    group = [r for r in rows if bool(r.get("faults")) == faults]
    per_system = [{r["seed"] for r in group if r["system"] == s} for s in SYSTEMS]
    present = [seeds for seeds in per_system if seeds]
    return sorted(set.intersection(*present)) if present else []


def at_timeout(xs: list[float | None], timeout_s: float) -> list[float]:
    """Each seed's figure, an unreached (None) seed at the timeout: never dropped (a
    median over the reached seeds alone made a system that failed most seeds look
    fast: Hydra under faults showed 9.2 s)."""
    return [timeout_s if x is None else float(x) for x in xs]


def summarize(rows: list[dict[str, Any]], lim: dict[str, Any],
              timeout_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system, faults in [(s, f) for f in (False, True) for s in SYSTEMS]:
        seeds = common_seeds(rows, faults)
        mine = [r for r in rows if r["system"] == system
                and bool(r.get("faults")) == faults and r["seed"] in seeds]
        if not mine:
            continue
        # dethpc's searcher as the dethpc cells run it (adaptive_asha's default variant,
        # stopping), every cost 0, on the same seeds: what each median is compared with
        best_limit = _median([lim["asha_stopping"]["time_to_target_s"][i]
                              for i, sd in enumerate(lim["seeds"]) if sd in seeds])
        label = system + ("+faults" if faults else "")
        tt = [r["time_to_target_s"] for r in mine]
        reached = [x for x in tt if x is not None]
        med = _median(list(at_timeout(tt, timeout_s)))
        out[label] = {
            "seeds": len(mine), "seeds_used": seeds,
            "seeds_run": sorted({r["seed"] for r in rows if r["system"] == system
                                 and bool(r.get("faults")) == faults}),
            "reached_target": len(reached),
            "reached": f"{len(reached)}/{len(mine)}",
            "time_to_target_median_s": med, "timeout_s": timeout_s,
            "time_to_target_min_s": min(reached) if reached else None,
            "time_to_target_max_s": max(reached) if reached else None,
            "efficiency_vs_limit": (best_limit / med) if med and best_limit else None,
            "wall_median_s": _median(list(at_timeout([r["wall_s"] for r in mine],
                                                     timeout_s))),
            "slot_seconds_median": _median([r["slot_seconds"] for r in mine]),
            "rpcs_per_min_median": _median([r["rpcs_per_min"] for r in mine]),
            "login_cpu_s_median": _median([r["login_cpu_s"] for r in mine]),
            "batches_trained_median": _median([r["batches_trained"] for r in mine]),
            "batches_redone_median": _median([r.get("batches_redone") for r in mine]),
            "batches_lost_median": _median([r.get("batches_lost") for r in mine]),
            "trials_abandoned": sum(int(r.get("trials_abandoned") or 0) for r in mine),
            "jobs_median": _median([r["jobs"] for r in mine]),
            "disk_bytes_median": _median([r["disk"]["bytes"] for r in mine]),
            "disk_files_median": _median([r["disk"]["files"] for r in mine]),
            "user_side": USER_SIDE[system],
            "finished_alone": sum(bool(r.get("finished_alone", True)) for r in mine)}
        if faults:
            out[label].update({
                "faults_refused": sum(int(r.get("faults_refused") or 0) for r in mine)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--pool-queue", type=int, default=2,
                    help="dethpc-pool: searcher.max_concurrent_trials = slots x this, so "
                         "that runs wait queued for a worker (docs/worker-pool.md)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--slots", type=int, default=2,
                    help="trials at once (the dev cluster's nodes share this machine's cores)")
    ap.add_argument("--budget", type=int, default=cnn.BUDGET,
                    help="batches of a trial trained to the end (a multiple of 32 up to "
                         "2048, the recorded curves' length)")
    ap.add_argument("--target-quantile", type=float, default=0.10)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "peers.json")
    ap.add_argument("--keep", action="store_true", help="keep the runs' directories")
    ap.add_argument("--summarize", action="store_true",
                    help="run nothing: recompute --out's limit and summary from its cells")
    ap.add_argument("--faults", action="store_true",
                    help="the fault cells: every system on the preemptible partition low, "
                         "half the nodes taken by high jobs twice and the busiest node "
                         "crashed once during the search (FAULTS)")
    args = ap.parse_args()
    for name in ("seeds", "trials", "slots"):
        if getattr(args, name) < 1:
            print(f"peers: --{name} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    if shutil.which("sbatch") is None:
        print("peers: sbatch not found: start the dev cluster (python -m dethpc.devcluster up)",
              file=sys.stderr)
        return 2
    if args.budget % cnn.EVERY or not cnn.EVERY <= args.budget <= 2048:
        print(f"peers: --budget must be a multiple of {cnn.EVERY} in [{cnn.EVERY}, 2048], "
              f"got {args.budget}", file=sys.stderr)
        return 2
    args.partition = "low" if args.faults else "debug"
    os.environ["PEERS_BUDGET"] = str(args.budget)
    cnn.BUDGET = args.budget
    target = cnn.target_loss(args.target_quantile, args.budget)
    if args.summarize:
        result = json.loads(args.out.read_text())
        runs = result["runs"]
        result["limit"] = limit(args, target, sorted({r["seed"] for r in runs}))
        result["summary"] = summarize(runs, result["limit"], args.timeout_s)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result["summary"], indent=1))
        return 0
    root = Path(tempfile.mkdtemp(prefix="peers-", dir="/tmp"))
    root.chmod(0o755)
    rows: list[dict[str, Any]] = []
    ensure_watcher()
    if args.faults:
        ensure_preempt_user()
    # seeds outermost: a slow drift of the machine touches every system alike
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for system in args.systems:
            rows.append(run_cell(system, seed, args, root, target))
            partial = {"rows": rows, "target_loss": target}
            args.out.with_suffix(".partial.json").write_text(json.dumps(partial, indent=1))
    # one invocation, one commit: the runs are never merged with another file's
    rows = sorted(rows, key=lambda r: (bool(r.get("faults")), r["seed"],
                                       SYSTEMS.index(r["system"])))
    lim = limit(args, target, sorted({r["seed"] for r in rows}))
    versions = {}
    for mod in ("optuna", "ray", "submitit", "hydra", "torch"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    result = {
        "what": "the same search (--trials trials of the CNN space, ASHA where the system has it) "
                "through dethpc and its peers on the dev cluster; time to target and costs",
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "budget_batches": cnn.BUDGET, "validation_every": cnn.EVERY, "target_loss": target,
        "versions": versions, "slurm": subprocess.run(["sinfo", "-V"], capture_output=True,
                                                      text=True).stdout.strip(),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "dethpc_cluster_override": os.environ.get(CLUSTER_OVERRIDE, ""),
        "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                 capture_output=True, text=True).stdout.strip(),
        "limit": lim, "summary": summarize(rows, lim, args.timeout_s), "runs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(json.dumps(result["summary"], indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
