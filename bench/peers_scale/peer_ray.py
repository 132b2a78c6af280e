"""Ray Tune 2.60 in the peers-at-scale benchmark, as Ray's documentation runs it on Slurm.

Owns: ``RayTuneRunner`` (``ray-tune``): one multi-node allocation, the sbatch script of
Ray's "Deploying on Slurm" page (docs.ray.io/en/latest/cluster/vms/user-guides/community/
slurm.html and its ``slurm-basic.sh``): ``#SBATCH --nodes=MIN-MAX --exclusive
--tasks-per-node=1 --cpus-per-task --gpus-per-node``, the head node's address from
``scontrol show hostnames`` and ``srun ... hostname --ip-address``, ``srun -w head ray
start --head --num-cpus --num-gpus --block &``, the other nodes ``srun ray start
--address head:port --block &``, then the driver (``python -u``, bench/peers_scale/
ray_driver.py: Tune with ASHA, one GPU a trial, ``FailureConfig``, checkpoints through
``tune.report``, ``Tuner.restore(resume_errored=True)`` when ``Tuner.can_restore``). The
allocation asks for ``--requeue`` (Slurm requeues it after a preemption or a node failure;
the rerun restores the experiment) and ``--open-mode=append``.

A node RANGE, not the page's fixed ``--nodes=4``: on a busy cluster an allocation of
every node waits until every other user's job on them has ended (seed 0's background
holds a job of 1,519 s from the start, so a 16-node Ray cell never started within the
smoke's limit). Ray's cluster cannot grow inside Slurm afterwards (the page starts a
fixed set of nodes once; the Ray autoscaler has no Slurm node provider in Ray itself),
so what the allocation gets at its start is what the search has: ``--nodes=MIN-MAX``
(sbatch(1): "the job will be allocated as many nodes as possible within the range
specified and without delaying the initiation of the job") starts it with the whole
nodes free at that moment, MAX = the cell's GPUs / 4, MIN = a quarter of MAX
(``min_nodes``). The script already starts one Ray node per allocated node
(``SLURM_JOB_NODELIST``, ``SLURM_JOB_NUM_NODES``); a requeued rerun may get a different
count, which ``Tuner.restore`` takes as it is. (The other way, ``--gpus=N`` spread over
partly busy nodes without ``--exclusive``, would use more of the free GPUs but gives
each Ray node an uneven GPU count and shares nodes with other users' jobs, which the
page's "allocate nodes specifically for Ray" advises against.)

Written to win, beyond the page's template: the head is waited for by polling its port
(not ``sleep 10``); each node gets a 100 MB object store (the
default, 30 % of the memory, is for data, not for a 4 KB checkpoint); no dashboard, no
log monitor (the driver does not print the workers' logs: ``log_to_driver=False``).
Emulation plumbing, not a choice a site would make: every "node" of the scale cluster is
this one host (127.0.0.1), so each Ray node gets its own ports (the page's "SLURM
networking caveats" list: node manager, object manager, worker ports, agents) and
``--node-ip-address`` is the head's for all. The workers start as the page's loop does,
one ``srun`` a node with ``sleep 5`` between (75 s for 15 workers): started in one
``srun`` all at once (tried first), 14 of 15 ``ray start`` exited with "The current node
timed out during startup" -- Ray waits a fixed 30 s for a raylet to register with the
GCS, and 15 raylets starting together on this 2-core host (load 5-6) missed it; on a real
cluster each node starts on its own CPUs.

The login-side process: Ray runs nothing on the login node; the process that holds the
search is the **driver** (the Tune controller, ``ray_driver.py``) in the allocation's batch
step on the head node. ``kill_login`` kills it with SIGKILL: the batch script ends, so the
allocation ends (Slurm does not requeue a job that failed) and the search stops until a
person resubmits the same script, which restores the experiment (``operator_check``: one
human action). The peers' Python is bench/peers/.venv's site-packages on ``PYTHONPATH``
under the system's python3.11 (the venv's own interpreter lives under /root, which the
benchmark's user may not run).
Must not: import Ray (the benchmark's driver runs in dethpc's environment).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers_scale import faults as flt
from bench.peers_scale.draws import shared_draws
from bench.peers_scale.systems import (
    PEERS_VENV,
    REPO,
    SYSTEM_PYTHON,
    VALIDATE_EVERY,
    Cell,
    Measured,
    as_system_user,
    chown_tree,
    run_measured,
    venv_site_packages,
)

RAY_PORT = 26379
NAME = "peers"


def min_nodes(nodes: int) -> int:
    """The range's floor: a quarter of the nodes asked (at least 1), so the search never
    starts on a sliver of the GPUs, yet starts while most nodes are busy."""
    return max(1, nodes // 4)


def render_sbatch(*, nodes: int, gpus_per_node: int, cpus_per_node: int, minutes: int,
                  out_dir: Path, storage: Path, python: str, env: dict[str, str],
                  draws: list[int], max_failures: int) -> str:
    """The allocation's script (see the module doc); every value shell-quoted."""
    q = shlex.quote
    exports = "\n".join(f"export {k}={q(v)}" for k, v in sorted(env.items()))
    ray = f"{q(python)} -m ray.scripts.scripts"
    # each Ray node of this one host: its own ports (the page's networking caveats)
    node_ports = ('--node-manager-port=$((base)) --object-manager-port=$((base + 1)) '
                  '--dashboard-agent-grpc-port=$((base + 2)) '
                  '--dashboard-agent-listen-port=$((base + 3)) '
                  '--metrics-export-port=$((base + 4)) '
                  '--runtime-env-agent-port=$((base + 5)) '
                  '--min-worker-port=$((base + 10)) --max-worker-port=$((base + 199))')
    common = ('--num-cpus "$SLURM_CPUS_PER_TASK" --num-gpus ' + str(gpus_per_node)
              + ' --object-store-memory=100000000 --include-log-monitor=false --block')
    return f"""#!/bin/bash
#SBATCH --job-name=ray-tune
#SBATCH --partition=low
#SBATCH --account=dethpc
#SBATCH --nodes={min_nodes(nodes)}-{nodes}
#SBATCH --exclusive
#SBATCH --tasks-per-node=1
#SBATCH --cpus-per-task={cpus_per_node}
#SBATCH --gpus-per-node=a100:{gpus_per_node}
#SBATCH --time={minutes}
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={q(str(out_dir / "ray-%j.out"))}
# Ray's "Deploying on Slurm" (slurm-basic.sh), see bench/peers_scale/peer_ray.py
set -x
{exports}
export RAY_USAGE_STATS_ENABLED=0

nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
nodes_array=($nodes)
head_node=${{nodes_array[0]}}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
port={RAY_PORT}
ip_head=$head_node_ip:$port
export ip_head head_node_ip
echo "IP Head: $ip_head (restart ${{SLURM_RESTART_COUNT:-0}})"

base=30000
srun --nodes=1 --ntasks=1 -w "$head_node" \\
    {ray} start --head --node-ip-address="$head_node_ip" --port=$port \\
    --include-dashboard=false {node_ports} {common} &
head_pid=$!
# the head is up when its port answers (instead of the template's sleep 10)
set +x
until (echo >"/dev/tcp/$head_node_ip/$port") 2>/dev/null; do
    kill -0 $head_pid 2>/dev/null || {{ echo "the Ray head exited"; exit 1; }}
    sleep 0.5
done
set -x

# the page's loop: one srun a worker node, 5 s apart (all at once, 14 of 15 raylets missed
# Ray's fixed 30 s start-up wait on this 2-core host: see the module doc)
worker_num=$((SLURM_JOB_NUM_NODES - 1))
for ((i = 1; i <= worker_num; i++)); do
    node_i=${{nodes_array[$i]}}
    base=$((30000 + 200 * i))
    srun --nodes=1 --ntasks=1 -w "$node_i" \\
        {ray} start --address "$ip_head" --node-ip-address="$head_node_ip" \\
        {node_ports} {common} &
    sleep 5
done

{q(python)} -u {q(str(Path(__file__).with_name("ray_driver.py")))} \\
    --storage {q(str(storage))} --name {NAME} --max-failures {max_failures} \\
    --draws {q(",".join(str(d) for d in draws))}
"""


@dataclass
class RayTuneRunner:
    #: Ray nodes (Slurm nodes of the allocation); None: every node of the cluster
    nodes: int | None = None
    max_failures: int = 3
    name: str = "ray-tune"
    login_process: str = ("Ray Tune driver (ray_driver.py, the Tune controller) in the "
                          "allocation's batch step on the head node")
    commands_cpu_s: float = 0.0
    human_actions: list[str] = field(default_factory=list)
    measured_pids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.cell: Cell | None = None
        self.jobs: list[str] = []
        self.script = Path()

    @property
    def storage(self) -> Path:
        assert self.cell is not None
        return self.cell.dir / "ray_results"

    def _env(self, cell: Cell) -> dict[str, str]:
        pythonpath = f"{REPO}{os.pathsep}{venv_site_packages(PEERS_VENV)}"
        return {"PYTHONPATH": pythonpath, "SLURM_CONF": cell.env["SLURM_CONF"],
                "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                "PEERS_WORKLOG": str(cell.worklog), **cell.spec.to_env(),
                "PEERS_VALIDATE_EVERY": str(VALIDATE_EVERY)}

    def _as_user(self, argv: list[str]) -> Measured:
        assert self.cell is not None
        res = run_measured(as_system_user(argv, self._env(self.cell)), self.cell.dir,
                           on_start=self.measured_pids.add)
        self.commands_cpu_s += res.cpu_s
        return res

    def _submit(self) -> str:
        res = self._as_user(["sbatch", "--parsable", str(self.script)])
        if res.rc != 0:
            raise RuntimeError(f"sbatch exited {res.rc}: {res.stderr[-2000:]}")
        job = res.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def launch(self, cell: Cell) -> None:
        self.cell = cell
        gpus_per_node = 4
        nodes = self.nodes or max(1, cell.gpus // gpus_per_node)
        self.storage.mkdir(parents=True)
        self.script = cell.dir / "ray_tune.sbatch"
        self.script.write_text(render_sbatch(
            nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_node=gpus_per_node,
            minutes=int(cell.timeout_s // 60) + 10, out_dir=cell.dir, storage=self.storage,
            python=SYSTEM_PYTHON, env=self._env(cell),
            draws=shared_draws(cell.seed, cell.trials), max_failures=self.max_failures))
        chown_tree(cell.dir)
        cell.say(f"ray-tune: {nodes} nodes x {gpus_per_node} GPUs, job {self._submit()}")

    def finished(self) -> bool:
        return (self.storage / f"{NAME}.done.json").exists()

    def _driver_pid(self) -> int | None:
        try:
            pid = int((self.storage / f"{NAME}.driver.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    @staticmethod
    def _head_pid() -> int | None:
        """The head's ``ray start --head`` (the srun task's process, not srun itself)."""
        want = (b"ray.scripts.scripts", b"start", b"--head", f"--port={RAY_PORT}".encode())
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and not argv[0].endswith(b"srun") and all(w in argv for w in want):
                return int(entry.name)
        return None

    def kill_login(self) -> str | None:
        """kill -9 of the driver (the Tune controller); while it has not started yet (the
        allocation's Ray nodes still starting), of the head's ``ray start --head``: the
        batch script's driver then cannot connect and the allocation ends. Neither while
        the allocation waits in the queue: nothing of Ray runs then (said so)."""
        pid = self._driver_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            return f"Ray Tune driver pid {pid} (kill -9)"
        pid = self._head_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            return f"Ray head (ray start --head) pid {pid} (kill -9; the driver had not started)"
        return "nothing of Ray was running (the allocation was not started)"

    def _job_state(self) -> str:
        """The allocation's state as a person sees it (squeue; "" when it left the queue).
        Asked as the fault user, so the system's RPC count stays its own."""
        assert self.cell is not None
        out = subprocess.run(flt.as_fault_user(["squeue", "-h", "-j", self.jobs[-1],
                                                "-o", "%T"]),
                             capture_output=True, text=True, env=self.cell.env,
                             timeout=60, cwd="/tmp", check=False).stdout
        return out.strip()

    def operator_check(self) -> str | None:
        """A person's look: an allocation that left the queue before the search ended (the
        driver was killed; it failed) is submitted again (the same script restores)."""
        if not self.jobs or self.finished() or self._job_state():
            return None
        job = self._submit()
        action = f"sbatch ray_tune.sbatch again (job {job}; Tuner.restore)"
        self.human_actions.append(action)
        return action

    def stop(self) -> dict[str, Any]:
        if self.cell is not None and self.jobs:
            subprocess.run(as_system_user(["scancel", *self.jobs], self._env(self.cell)),
                           capture_output=True, timeout=60, cwd="/tmp", check=False)
        starts: list[dict[str, Any]] = []
        path = self.storage / f"{NAME}.starts" if self.cell else None
        if path is not None and path.exists():
            starts = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        done = self.storage / f"{NAME}.done.json" if self.cell else None
        result = json.loads(done.read_text()) if done and done.exists() else None
        # once fit() returned, its results; at a cut, Tune's last experiment snapshot
        # (what a restore would resume from)
        verdicts = (result or {}).get("verdicts")
        if verdicts is None and self.cell is not None:
            verdicts = snapshot_verdicts(self.storage / NAME)
        return {"jobs": self.jobs, "driver_starts": starts, "done": result,
                "verdicts": verdicts}


#: Tune's trial statuses as the benchmark's verdicts (metrics.Verdict's values)
_RAY_VERDICT = {"TERMINATED": "decided", "ERROR": "gave_up"}


def snapshot_verdicts(experiment: Path) -> dict[str, str] | None:
    """Each trial's verdict from Tune's newest ``experiment_state-*.json`` under
    ``experiment`` (its periodic snapshot, what ``Tuner.restore`` resumes from): a
    TERMINATED trial decided, ERROR given up (``FailureConfig``'s retries spent), PENDING,
    RUNNING or PAUSED live. None when there is no snapshot. A snapshot can be seconds
    old: a trial ended after it reads live, but the work log's end decides it first."""
    snaps = sorted(experiment.glob("experiment_state-*.json"))
    if not snaps:
        return None
    try:
        data = json.loads(snaps[-1].read_text())
        trials = [json.loads(entry[0]) for entry in data["trial_data"]]
        return {str(t["trial_id"]): _RAY_VERDICT.get(str(t["status"]), "live")
                for t in trials}
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
