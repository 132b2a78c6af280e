"""The job side's processes: what starts and supervises the work inside an allocation.

Owns: the launchers (``python -m dethpc.launch.torch_distributed | deepspeed | horovod
| mpi | hetjob``: srun-aware, rendezvous from Slurm's environment, signal forwarding;
Determined's ``det.launch`` names), the per-rank shim (``_worker``), running a Python
target as ``__main__`` (``_run_main``), the worker pool's job half (``worker``: the
long-lived worker and its fork server), the shell API a job's bash loop calls at every
step (``jobapi``: ``dethpc report|should-stop|hparams|latest-checkpoint``, light: it
imports no package ``__init__`` heavier than a docstring), a search's submitting
environment (``submitenv``) and Determined's ``DET_*`` variables of a trial (``detenv``:
the job script evaluates its output as each run starts).
Must not: import the control plane, the store, the CLI or any login-node layer
(the import contract keeps the job side on ``dethpc.common`` and ``dethpc.core``).
"""
