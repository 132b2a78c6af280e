"""submitit's driver in the peers-at-scale benchmark: synchronous successive halving, one
``map_array`` a rung, waiting on the login node.

Owns: the search as a submitit user writes it from submitit's README ("Job arrays":
``executor.map_array``, ``slurm_array_parallelism``; github.com/facebookincubator/
submitit) and docs (docs/checkpointing.md: ``Checkpointable``; docs/structure.md and
README: a ``Job`` is re-created from its folder and id, ``submitit.SlurmJob(folder,
job_id)``, and its result read from the folder; ``slurm_additional_parameters`` for any
sbatch option submitit has no argument for): rung ``r`` trains every surviving trial to
4 x 4**r steps (4, 16, 64: dethpc's rungs at 1/4/16 validation periods) as one array of
``RungRun`` jobs (bench/peers_scale/submitit_trial.py), waits for every result
(``job.result()``), keeps the best ``max(1, n // 4)`` (eta 4; bench/peers_scale/
halving.py) and goes on; trial ``i``
replays the shared draw ``i``. The executor: ``AutoExecutor`` on the ``low`` partition,
one GPU and one CPU a job, ``slurm_array_parallelism`` = the cell's GPUs, a time limit
past the cell's, ``slurm_signal_delay_s`` 120 and ``slurm_additional_parameters``
``{"requeue": True}`` (Slurm requeues a job after a preemption or a node failure; submitit
itself requeues on its signal).

Written to win: the driver persists its state (the rung, the survivors, every job id and
every loss) to ``driver_state.json`` after each submission and each rung, and a restarted
driver re-attaches to the jobs it had submitted instead of submitting them again, so a
killed driver costs the time until a person restarts it, not the work; a job that ends
without a result (failed, cancelled) is submitted once more from the trial's checkpoint.
What submitit has no answer for: the driver is a plain process on the login node; nothing
restarts it when it dies, so a person must (submitit's docs leave it to the user). A kill
between an ``sbatch`` and the state's write would submit that rung again (a window of
milliseconds).
Run as ``python -m bench.peers_scale.submitit_driver CONFIG.json`` (the runner starts it
as the benchmark's user); it writes its pid to ``driver.pid``.
Must not: be imported by dethpc or by the benchmark's driver (it imports submitit).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import submitit

from bench.peers_scale.halving import promote, rung_steps
from bench.peers_scale.submitit_trial import RungJob, RungRun

#: a job that ends without a result is submitted again this many times
RESUBMITS = 1


class Driver:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.folder = Path(cfg["folder"])
        self.state_path = self.folder / "driver_state.json"
        self.jobs_dir = self.folder / "jobs"
        self.state: dict[str, Any] = (json.loads(self.state_path.read_text())
                                      if self.state_path.exists() else
                                      {"rung": 0, "alive": list(range(len(cfg["draws"]))),
                                       "jobs": {}, "losses": {}, "resubmits": {},
                                       "done": False, "starts": 0})
        self.state["starts"] += 1
        self.executor = submitit.AutoExecutor(folder=self.jobs_dir, cluster="slurm")
        self.executor.update_parameters(
            name="submitit", slurm_partition="low", slurm_account="dethpc",
            cpus_per_task=1, tasks_per_node=1, nodes=1,
            timeout_min=int(cfg["time_limit_min"]),
            slurm_array_parallelism=int(cfg["parallelism"]), slurm_signal_delay_s=120,
            # the GPU by its type, as the other systems ask (--gpus-per-node=a100:1): an
            # untyped request on these typed-GPU nodes left Slurm 22.05's GPU count of a
            # node wrong after its jobs were requeued ("gres count underflow", tasks
            # started without a GPU) and a preemptor of that node never started
            slurm_additional_parameters={"requeue": True, "gpus_per_node": "a100:1"})

    def save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        os.replace(tmp, self.state_path)

    def job_of(self, trial: int, steps: int) -> RungJob:
        c = self.cfg
        return RungJob(trial=trial, curve=int(c["draws"][trial]), steps=steps,
                       worklog=c["worklog"], ckpt_root=c["ckpt_root"],
                       validate_every=int(c["validate_every"]), spec=c["spec"])

    def rung(self, r: int, steps: int) -> dict[int, float]:
        key = str(r)
        alive: list[int] = self.state["alive"]
        if key not in self.state["jobs"]:
            jobs = self.executor.map_array(RungRun(), [self.job_of(i, steps) for i in alive])
            self.state["jobs"][key] = {str(i): j.job_id for i, j in zip(alive, jobs,
                                                                        strict=True)}
            self.save()
            print(f"rung {r}: {len(jobs)} jobs to {steps} steps, array "
                  f"{jobs[0].job_id.split('_')[0] if jobs else '-'}", flush=True)
        else:
            print(f"rung {r}: re-attached to {len(alive)} jobs", flush=True)
        losses: dict[int, float] = {int(i): v for i, v in
                                    self.state["losses"].get(key, {}).items()}
        for i in alive:
            while i not in losses:
                job = submitit.SlurmJob(folder=self.jobs_dir,
                                        job_id=self.state["jobs"][key][str(i)])
                try:
                    losses[i] = float(job.result())
                except Exception as exc:            # noqa: BLE001 -- any job failure
                    tries = self.state["resubmits"].get(f"{key}/{i}", 0)
                    if tries >= RESUBMITS:
                        print(f"trial {i} rung {r}: gave up: {exc!r}", flush=True)
                        losses[i] = float("inf")
                        break
                    self.state["resubmits"][f"{key}/{i}"] = tries + 1
                    again = self.executor.submit(RungRun(), self.job_of(i, steps))
                    self.state["jobs"][key][str(i)] = again.job_id
                    print(f"trial {i} rung {r}: {exc!r}; resubmitted as {again.job_id}",
                          flush=True)
                self.state["losses"][key] = {str(k): v for k, v in losses.items()}
                self.save()
        return losses

    def run(self) -> None:
        steps = rung_steps(int(self.cfg["validate_every"]))
        while not self.state["done"]:
            r = int(self.state["rung"])
            losses = self.rung(r, steps[r])
            if r + 1 == len(steps):
                self.state["done"] = True
                self.state["best"] = min(losses.values())
            else:
                self.state["alive"] = promote(losses)
                self.state["rung"] = r + 1
            self.save()
        print(f"done: best loss {self.state['best']:.5f}", flush=True)


def main() -> int:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    (Path(cfg["folder"]) / "driver.pid").write_text(f"{os.getpid()}\n")
    t0 = time.time()
    Driver(cfg).run()
    print(f"driver: {time.time() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
